//! patchbay: a Kubernetes operator that configures switch and SmartNIC ports from
//! custom resources. This library is the operator and nothing else; the `patchbay`
//! binary adds the CLI around it (`src/bin/patchbay/`: `run`, `validate`, `device`,
//! and, with the default feature `devtools`, `devplane` and `demo`). The switch
//! simulators tests and the demo start live in the `patchbay-testbed` crate, the
//! device backends in `patchbay-providers`.
//!
//! Decisions, apart from I/O, from the pure core (crate `patchbay-core`, whose
//! Cargo.toml reaches no client, runtime or socket; `tests/layout.rs`):
//! - [`api`]: the custom resource types, their CRDs, and the names patchbay writes on
//!   objects ([`api::keys`]: finalizers, labels, annotations).
//! - [`decide`]: every decision, pure and table-tested — the port state machine, host
//!   phases, allocation, tenancy and admission, validation, status, failures,
//!   the lease decision, the switch worker's reachability and lobby.
//! - [`triggers`]: which objects an event wakes (pure, here because its keys are
//!   kube-runtime's `ObjectRef` and it reads the port cache's records,
//!   [`compact_port`], whose interner is process state).
//!
//! Modules that do I/O:
//! - [`controllers`]: one room per controller (SwitchPort, Switch, ProviderSwitch,
//!   SmartNicPort, ServerClaim — the allocator —, Server), the shared state-machine
//!   loop, the runtime that wires them.
//! - [`worker`]: one writer per switch: batches, drift sweeps, reachability.
//! - [`backends`]: ProviderSwitch (+ Secret) → device backend.
//! - [`settings`]: the operator's settings (flags, environment, file).
//! - [`lease`]: leader election on a Lease (its decision is [`decide::lease`]).
//! - [`grants`]: the VLANPool grants, computed once per pool change.
//! - [`probes`]: the metrics and the device gate every room reports through.
//! - [`metrics`]: the metrics registry (state, rendered in the Prometheus format);
//!   [`process_metrics`]: the standard `process_*` families, read from `/proc` at
//!   each scrape; [`serve`]: the one HTTP server (metrics, health probes, the admission webhooks
//!   over TLS); [`webhook`]: the tenancy webhook's own caches and its answers;
//!   [`blast_radius`]: the warnings that say how far an edit reaches;
//!   [`device_reads`]: the switches' own state for `patchbay plan --read-devices`.

pub use patchbay_core::{api, decide};

pub mod backends;
pub mod blast_radius;
pub mod compact_port;
pub mod controllers;
pub mod device_reads;
pub mod grants;
pub mod lease;
pub mod metrics;
pub mod probes;
pub mod process_metrics;
pub mod serve;
pub mod settings;
pub mod triggers;
pub mod webhook;
pub mod worker;

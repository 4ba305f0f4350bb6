//! patchbay: a Kubernetes operator that configures switch and SmartNIC ports from
//! custom resources. This library is the operator and nothing else; the `patchbay`
//! binary adds the CLI around it (`src/bin/patchbay/`: `run`, `validate`, `device`,
//! and, with the default feature `devtools`, `devplane` and `demo`). The switch
//! simulators tests and the demo start live in the `patchbay-testbed` crate, the
//! device backends in `patchbay-providers`.
//!
//! Pure modules (decide; no I/O, table-tested):
//! - [`api`]: the custom resource types and their CRDs.
//! - [`validate`]: the validator (field paths and reasons) used by the controllers and
//!   the CLI; it turns a configuration into a device-level
//!   [`patchbay_providers::DesiredPort`], and finds misspelt fields.
//! - [`state_machine`]: the port state machine, one function: `decide`.
//! - [`tenancy`]: which namespace may carry which VLAN where (VLANPool grants), and
//!   which configurations a tenant may name; [`admission`]: what the webhook answers
//!   for one object, by the same rules.
//! - [`allocation`]: which Servers a claim gets (one function: `plan`);
//!   [`inventory`]: the installer's `hosts.ini` and `hosts.yaml` for a claim.
//! - [`validate::claim`]: claims checked and turned into allocation requests.
//! - [`controllers::status`], [`controllers::failure`], [`controllers::triggers`]: how
//!   status is computed, what can go wrong, which objects an event wakes.
//!
//! Modules that do I/O:
//! - [`controllers`]: one room per controller (SwitchPort, Switch, ProviderSwitch,
//!   SmartNicPort, ServerClaim — the allocator —, Server), the shared state-machine
//!   loop, the runtime that wires them.
//! - [`worker`]: one writer per switch: batches, drift sweeps, reachability.
//! - [`backends`]: ProviderSwitch (+ Secret) → device backend.
//! - [`settings`]: the operator's settings (flags, environment, file).
//! - [`lease`]: leader election on a Lease (its decision, `decide`, is pure).
//! - [`metrics`]: the metrics registry (state, rendered in the Prometheus format);
//!   [`serve`]: the one HTTP server (metrics, health probes, the admission webhook
//!   over TLS); [`webhook`]: the webhook's own caches and its answers.

pub mod admission;
pub mod allocation;
pub mod api;
pub mod backends;
pub mod controllers;
pub mod host;
pub mod inventory;
pub mod lease;
pub mod metrics;
pub mod serve;
pub mod settings;
pub mod state_machine;
pub mod tenancy;
pub mod validate;
pub mod webhook;
pub mod worker;

//! patchbay's pure core: the custom resource types ([`api`]) and every decision
//! ([`decide`]) — what the operator, the webhook and `patchbay validate` decide, as
//! functions of what was read (objects, facts, the time) to what to do.
//!
//! The fence is Cargo's: this crate's dependencies are the device vocabulary
//! (`patchbay-model`), kube-core and kube-derive (through `patchbay-kube-facade`,
//! named `kube`), k8s-openapi's types, serde, schemars, jiff, sha2 and thiserror —
//! no Kubernetes client, no runtime, no sockets, no processes. What Cargo cannot
//! keep out (the wall clock, `Instant::now`, locks, threads, files) is disallowed by
//! `core/clippy.toml`, so `cargo clippy -D warnings` refuses it. The operator
//! (`patchbay`) re-exports both modules: `patchbay::api`, `patchbay::decide`.

// Unit tests may read the clock and build fixtures their own way; the library may not.
#![cfg_attr(test, allow(clippy::disallowed_methods, clippy::disallowed_types))]

pub mod api;
pub mod decide;

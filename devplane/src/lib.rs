//! devplane: a small Kubernetes API server for patchbay's tests and demo.
//!
//! It follows the API conventions the operator and kubectl rely on — discovery,
//! CRD installation, get/list/watch with resourceVersion, create/update/patch/delete,
//! the status subresource, generation, finalizers, ownerReference garbage collection,
//! selectors, schema validation — closely enough that kube-rs and kubectl work
//! unchanged. It keeps everything in memory and is not for production: no
//! authentication, no scheduler, no pods, no CEL, no conversion between versions.

pub mod admission;
pub mod events;
pub mod http;
pub mod resources;
pub mod schema;
pub mod selector;
pub mod store;
pub mod table;

pub use http::{AuditEntry, Config, DevPlane, WatchBreak};

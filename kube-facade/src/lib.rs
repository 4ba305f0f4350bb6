//! The part of kube's facade the pure core uses, without kube's client or runtime:
//! `kube::core` (kube-core, with its typed AdmissionReview), `Resource`, `ResourceExt`, `CustomResourceExt`, and the
//! `CustomResource` and `KubeSchema` derives (kube-derive, whose generated code names
//! `::kube::core`). `patchbay-core` depends on this crate under the name `kube`, so
//! its types derive as they would with kube itself while its Cargo.toml reaches no
//! API client, no tokio and no sockets.

pub use kube_core as core;
pub use kube_core::{CustomResourceExt, Resource, ResourceExt};
pub use kube_derive::{CustomResource, KubeSchema};

//! The Server controller: the one writer of `Server.status`. It mirrors the binding
//! the allocator wrote into `spec.claimRef` (`phase`, `allocated`, `role`, `claim`),
//! reports the spec's errors, and wakes the orphan sweep when a Server names a claim
//! the cache does not know. Kubernetes I/O; the status is computed by
//! [`super::status::server_status`], which is pure.

use std::sync::Arc;

use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;

use super::server_claim::Allocator;
use super::status::server_status;
use super::{ControllerError, write_status};
use crate::api::Server;

/// Reconciles one Server.
pub(super) async fn reconcile(
    server: Arc<Server>,
    alloc: Arc<Allocator>,
) -> Result<Action, ControllerError> {
    if let Some(b) = &server.spec.claim_ref {
        let known = alloc
            .claims
            .get(&ObjectRef::new(&b.name).within(&b.namespace))
            .is_some_and(|c| c.uid().as_deref() == Some(b.uid.as_str()));
        if !known {
            alloc.sweep.notify_one();
        }
    }
    let old = server.status.clone().unwrap_or_default();
    let status = server_status(&server, &old, jiff::Timestamp::now());
    write_status(
        &Api::<Server>::all(alloc.client.clone()),
        &server.name_any(),
        &old,
        &status,
    )
    .await?;
    Ok(Action::await_change())
}

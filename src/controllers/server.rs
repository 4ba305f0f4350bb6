//! The Server controller: the one writer of `Server.status`. It mirrors the binding
//! the allocator wrote into `spec.claimRef` (`phase`, `allocated`, `role`, `claim`),
//! reports the spec's errors, and wakes the orphan sweep when a Server names a claim
//! the cache does not know. Kubernetes I/O; the status is computed by
//! [`server_status`], which is pure.

use std::sync::Arc;

use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;

use super::ControllerError;
use super::server_claim::Allocator;
use super::status::{set_condition, status_merge_patch};
use crate::api::server::ClaimRef;
use crate::api::{Server, ServerPhase, ServerStatus};
use crate::validate::validate_server;

/// The status a Server should have: its binding mirrored, its spec's errors.
pub fn server_status(server: &Server, old: &ServerStatus, now: jiff::Timestamp) -> ServerStatus {
    let mut status = old.clone();
    let b = server.spec.claim_ref.as_ref();
    status.phase = Some(if b.is_some() {
        ServerPhase::Allocated
    } else {
        ServerPhase::Available
    });
    status.allocated = b.is_some();
    status.role = b.map(|b| b.role.clone());
    status.claim = b.map(|b| ClaimRef {
        name: b.name.clone(),
        namespace: b.namespace.clone(),
    });
    status.observed_generation = server.metadata.generation;
    status.errors = validate_server(&server.spec)
        .err()
        .map(|e| e.0.iter().map(ToString::to_string).collect())
        .unwrap_or_default();
    let (truth, reason, message) = if status.errors.is_empty() {
        (true, "Valid", String::new())
    } else {
        (false, "InvalidSpec", status.errors.join("; "))
    };
    set_condition(
        &mut status.conditions,
        "Valid",
        truth,
        reason,
        message,
        server.metadata.generation,
        now,
    );
    status
}

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
    if status != old {
        Api::<Server>::all(alloc.client.clone())
            .patch_status(
                &server.name_any(),
                &PatchParams::default(),
                &Patch::Merge(status_merge_patch(&old, &status)),
            )
            .await?;
    }
    Ok(Action::await_change())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::ServerClaimBinding;

    fn server(bound: bool) -> Server {
        let mut s: Server = serde_json::from_value(serde_json::json!({
            "apiVersion": "patchbay.dev/v1alpha1", "kind": "Server",
            "metadata": {"name": "s1", "generation": 3},
            "spec": {"bmc": {"address": "10.0.0.5", "credentialsSecretRef":
                {"name": "bmc", "namespace": "infra"}},
                "bootMac": "aa:bb:cc:dd:ee:01", "site": "dc1"}
        }))
        .unwrap();
        if bound {
            s.spec.claim_ref = Some(ServerClaimBinding {
                name: "web".into(),
                namespace: "team".into(),
                uid: "u".into(),
                role: "worker".into(),
                since: "2026-11-23T00:00:00Z".into(),
            });
        }
        s
    }

    #[test]
    fn the_status_mirrors_the_binding() {
        let now = jiff::Timestamp::UNIX_EPOCH;
        let st = server_status(&server(true), &ServerStatus::default(), now);
        assert_eq!(st.phase, Some(ServerPhase::Allocated));
        assert!(st.allocated);
        assert_eq!(st.role.as_deref(), Some("worker"));
        assert_eq!(st.claim.as_ref().map(|c| c.name.as_str()), Some("web"));
        let released = server_status(&server(false), &st, now);
        assert_eq!(released.phase, Some(ServerPhase::Available));
        assert!(!released.allocated && released.role.is_none() && released.claim.is_none());
        assert_eq!(released.observed_generation, Some(3));
        // Nothing changed: the same status, so nothing is written.
        assert_eq!(server_status(&server(false), &released, now), released);
    }

    #[test]
    fn a_bad_spec_is_reported_by_field() {
        let mut s = server(false);
        s.spec.boot_mac = "nope".into();
        let st = server_status(&s, &ServerStatus::default(), jiff::Timestamp::UNIX_EPOCH);
        assert_eq!(st.errors.len(), 1);
        assert!(st.errors[0].starts_with("spec.bootMac:"), "{:?}", st.errors);
        let valid = st.conditions.iter().find(|c| c.type_ == "Valid").unwrap();
        assert_eq!(valid.status, "False");
    }
}

//! The Server controller: the one writer of `Server.status`. It moves a Server
//! through its phases and its NICs' ports with it ([`super::host::drive_host`]), mirrors
//! the binding the allocator wrote into `spec.claimRef`, reports the spec's errors,
//! consumes the installer's signal on release, and wakes the orphan sweep when a
//! Server names a claim the cache does not know; links a NIC that declares only its
//! MAC to the SwitchPort where the MAC is seen (discovery). A finalizer keeps a deleted Server
//! until its ports are clean and unmarked. Kubernetes I/O; the status is computed by
//! [`crate::decide::status::server_status`], which is pure.

use std::sync::Arc;
use std::time::Duration;

use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::finalizer::{Event as FinalizerEvent, finalizer};
use kube::runtime::reflector::ObjectRef;
use serde_json::json;

use super::host::{HostView, HostWorld, drive_host, sightings};
use super::metal3::linked_host;
use super::server_claim::Allocator;
use super::{ControllerError, write_status_at};
use crate::api::keys::{FINALIZER, PROVISIONED_ANNOTATION};
use crate::api::server::{CabledPortKind, CabledPortRef};
use crate::api::{Server, ServerClaim, ServerPhase};
use crate::decide::cabling::{self, NicCabling};
use crate::decide::phases::{ClaimNetwork, Driver, Verdict, claim_entries};
use crate::decide::status::{Severity, server_status};

/// What the Server controller works with.
pub struct ServerCtx {
    /// The allocator's caches (Servers, claims, BareMetalHosts).
    pub alloc: Arc<Allocator>,
    /// The port caches and the client.
    pub world: HostWorld,
}

/// How often a Server is looked at again without a change (a safety net; every
/// input wakes it).
const RECHECK: Duration = Duration::from_secs(300);

/// Links each NIC that declares a MAC and no port to the SwitchPort its MAC is seen
/// on ([`cabling::discover`]), writing the port into the Server's spec (over the
/// version read: a Server changed meanwhile is read again) with a Normal Event; the
/// link then stays until the infra team changes it. Returns the NICs left unlinked,
/// with why, and whether a link was written.
async fn discover(
    server: &Server,
    ctx: &ServerCtx,
    phase: Option<ServerPhase>,
    deleting: bool,
) -> Result<(Vec<NicCabling>, bool), ControllerError> {
    let may = !deleting
        && matches!(
            phase,
            None | Some(ServerPhase::Available | ServerPhase::Provisioning)
        );
    let me = format!("Server/{}", server.name_any());
    let servers = ctx.alloc.servers.state();
    let mut nics = server.spec.nics.clone();
    let mut report = Vec::new();
    let mut linked = Vec::new();
    for nic in nics.iter_mut().filter(|n| n.port.is_none()) {
        let Some(mac) = nic.mac.clone() else { continue };
        let seen = sightings(&ctx.world, &servers, &me, &mac);
        match cabling::discover(&seen, may) {
            Ok((namespace, name)) => {
                let words = seen[0].words.clone();
                linked.push(format!(
                    "NIC {} ({mac}) linked to SwitchPort {namespace}/{name}: its MAC is seen on {words}",
                    nic.name
                ));
                nic.port = Some(CabledPortRef {
                    kind: Some(CabledPortKind::SwitchPort),
                    name,
                    namespace,
                });
            }
            Err(verdict) => report.push(NicCabling {
                nic: nic.name.clone(),
                mac: Some(mac),
                port: "no port".into(),
                verdict,
                action: cabling::Action::ReportOnly,
                seen_on: Vec::new(),
            }),
        }
    }
    if linked.is_empty() {
        return Ok((report, false));
    }
    let api: Api<Server> = Api::all(ctx.alloc.client.clone());
    let patch = json!({
        "metadata": {"resourceVersion": server.resource_version()},
        "spec": {"nics": nics},
    });
    api.patch(
        &server.name_any(),
        &PatchParams::default(),
        &Patch::Merge(patch),
    )
    .await?;
    for note in &linked {
        tracing::info!(server = %server.name_any(), "{note}");
        ctx.alloc
            .events
            .publish(server, Severity::Normal, "CablingDiscovered", note)
            .await;
    }
    Ok((report, true))
}

/// Reconciles one Server.
pub(super) async fn reconcile(
    server: Arc<Server>,
    ctx: Arc<ServerCtx>,
) -> Result<Action, ControllerError> {
    let api: Api<Server> = Api::all(ctx.alloc.client.clone());
    finalizer(&api, FINALIZER, server, |event| async {
        match event {
            FinalizerEvent::Apply(s) => follow(&s, &ctx, false).await,
            FinalizerEvent::Cleanup(s) => follow(&s, &ctx, true).await,
        }
    })
    .await
    .map_err(|e| ControllerError::Finalizer(Box::new(e)))
}

/// The claim a Server is bound to, if the cache has that very claim.
fn bound_claim(alloc: &Allocator, server: &Server) -> Option<Arc<ServerClaim>> {
    let b = server.spec.claim_ref.as_ref()?;
    alloc
        .claims
        .get(&ObjectRef::new(&b.name).within(&b.namespace))
        .filter(|c| c.uid().as_deref() == Some(b.uid.as_str()))
}

async fn follow(
    server: &Server,
    ctx: &ServerCtx,
    deleting: bool,
) -> Result<Action, ControllerError> {
    let alloc = &ctx.alloc;
    let claim = bound_claim(alloc, server);
    if server.spec.claim_ref.is_some() && claim.is_none() {
        alloc.sweep.notify_one();
    }
    let role = server.spec.claim_ref.as_ref().map(|b| b.role.as_str());
    let entries = match (&claim, role) {
        (Some(c), Some(r)) => claim_entries(&c.spec, r),
        _ => Vec::new(),
    };
    let claim_ns = claim
        .as_ref()
        .and_then(|c| c.namespace())
        .unwrap_or_default();
    let network = claim.as_ref().map(|_| ClaimNetwork {
        entries: &entries,
        namespace: &claim_ns,
    });
    // The hosts' cache has a listed gate of its own (Metal3 may come after
    // patchbay): wait while it lists, never taking "not listed yet" for "not there".
    let metal3 = alloc.hosts.settled().await;
    let bmh = alloc.hosts.listed().and_then(|h| linked_host(h, server));
    let old = server.status.clone().unwrap_or_default();
    // Without Metal3, a Server whose status says it was linked (by boot MAC) stays
    // linked: nothing can say otherwise.
    let remembered = old
        .bare_metal_host
        .as_ref()
        .filter(|_| !metal3)
        .map(|h| format!("{}/{}", h.namespace, h.name));
    let linked_name = match (&bmh, &server.spec.bare_metal_host_ref, remembered) {
        (Some(h), _, _) => Some(format!(
            "{}/{}",
            h.metadata.namespace.as_deref().unwrap_or_default(),
            h.metadata.name.as_deref().unwrap_or_default()
        )),
        (None, Some(r), _) => Some(format!("{}/{}", r.namespace, r.name)),
        (None, None, remembered) => remembered,
    };
    let installed = server
        .annotations()
        .get(PROVISIONED_ANNOTATION)
        .is_some_and(|v| v == "true");
    let driver = if let Some(host) = linked_name.as_deref() {
        if metal3 {
            Driver::Metal3 {
                host,
                state: bmh.as_ref().map(|h| h.status.provisioning.state.as_str()),
            }
        } else {
            Driver::Metal3Absent { host }
        }
    } else {
        Driver::Installer {
            bound: server.spec.claim_ref.is_some(),
            installed,
        }
    };
    let nic_field = |name: &str| {
        server
            .spec
            .nics
            .iter()
            .position(|n| n.name == name)
            .map_or_else(
                || format!("spec.nics (NIC {name})"),
                |i| format!("spec.nics[{i}]"),
            )
    };
    let view = HostView {
        me: format!("Server/{}", server.name_any()),
        nics: &server.spec.nics,
        nic_field: &nic_field,
        network,
        driver,
        deleting,
        phase: old.phase,
        bare_metal_host: bmh.clone(),
        cabling_policy: server.spec.cabling_policy.unwrap_or_default(),
        bgp_peered: crate::decide::bgp::still_peered(
            &server.name_any(),
            &ctx.world.stores.switches.state(),
        ),
    };
    let (undiscovered, linked) = discover(server, ctx, old.phase, deleting).await?;
    if linked {
        // The spec change brings the Server back with its new port.
        return Ok(Action::await_change());
    }
    let mut facts = drive_host(&ctx.world, &view).await?;
    facts.cabling.extend(undiscovered);
    let mut status = server_status(server, &old, &facts, jiff::Timestamp::now());
    let mut published = super::bgp::publish(
        server,
        &ctx.world.stores,
        ctx.world.tenancy.as_ref(),
        &alloc.client,
    )
    .await?;
    status.bgp_peers = std::mem::take(&mut published.status);
    status.bgp = crate::decide::bgp::summary(&status.bgp_peers);
    let api: Api<Server> = Api::all(alloc.client.clone());
    let name = server.name_any();
    // The phase is this controller's memory: written only over the version it was
    // read from (a reconcile of a stale copy gets a 409 and reads again), and each
    // change announced once, after it is written.
    write_status_at(&api, &name, server.resource_version(), &old, &status).await?;
    if old.phase != status.phase
        && let (Some(from), Some(to)) = (old.phase, status.phase)
    {
        tracing::info!(server = %name, %from, %to, "phase changed");
        alloc
            .events
            .publish(
                server,
                Severity::Normal,
                "PhaseChanged",
                &format!("{from} → {to}"),
            )
            .await;
    }
    // A cabling mismatch is announced once, when it is found (the condition keeps
    // saying it while it lasts).
    let cabling = |s: &crate::api::server::ServerStatus| {
        s.conditions
            .iter()
            .find(|c| c.type_ == "CablingVerified")
            .map(|c| (c.status.clone(), c.message.clone()))
    };
    if let Some((truth, message)) = cabling(&status)
        && truth == "False"
        && cabling(&old).is_none_or(|(was, _)| was != "False")
    {
        alloc
            .events
            .publish(server, Severity::Warning, "CablingMismatch", &message)
            .await;
    }
    // The installer's signal belongs to one installation: consumed on release.
    if linked_name.is_none()
        && facts.step.phase == crate::api::ServerPhase::Deprovisioning
        && server.annotations().contains_key(PROVISIONED_ANNOTATION)
    {
        let patch = json!({"metadata": {"annotations": {PROVISIONED_ANNOTATION: null}}});
        api.patch(&name, &PatchParams::default(), &Patch::Merge(patch))
            .await?;
    }
    // Opted in: the Nodes that are this Server (and MetalLB) carry its peers; a
    // failure (MetalLB not installed, say) is announced and retried, after the
    // status above is written.
    if let Some(nodes) = &ctx.world.bgp_nodes
        && let Err(e) = super::bgp_nodes::sync(&alloc.client, nodes, &name, &published).await
    {
        alloc
            .events
            .publish(
                server,
                Severity::Warning,
                "BgpNodesFailed",
                &format!("putting its BGP peers on its Nodes: {e}"),
            )
            .await;
        return Err(e);
    }
    // Deleted: done once no port carries what this host set (ports that do not
    // exist, or that are somebody else's, carry nothing of it).
    let released = facts.ports.iter().all(|(t, v, _)| {
        t.configuration.is_none()
            && matches!(v, Verdict::Settled | Verdict::Missing | Verdict::InUse(_))
    });
    if deleting && !released {
        return Err(ControllerError::Waiting(format!(
            "Server {name} keeps its finalizer until its ports are clean"
        )));
    }
    Ok(Action::requeue(RECHECK))
}

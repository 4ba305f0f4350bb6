//! The ServerClaim controller: the allocator. It binds Servers to claims (the only
//! writer of `Server.spec.claimRef`), writes the claim's status, its inventory
//! ConfigMap and, on request, the BMC credentials copy; it releases a deleted claim's
//! Servers (finalizer) and, on start-up and periodically, the Servers of claims
//! that no longer exist. The decisions are [`crate::decide::allocation::plan`]'s; this room
//! does the Kubernetes I/O.
//!
//! Allocation is serialised (one lock), and every binding is written with the
//! Server's resourceVersion as precondition: a Server that changed since it was read
//! is never overwritten. A conflict where only the Server's status or metadata moved
//! (its spec, all the plan read, is the same) is not a lost race: the binding is sent
//! again at the new version. A lost race (the spec changed) undoes the bindings of
//! that reconcile (whole or nothing) and plans again.

use parking_lot::Mutex;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::finalizer::{Event as FinalizerEvent, finalizer};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, Resource, ResourceExt};
use serde_json::json;
use sha2::{Digest, Sha256};

use super::events::EventPublisher;
use super::{ControllerError, write_status};
use crate::api::keys::{FINALIZER, MANAGER};
use crate::api::{Server, ServerClaim, ServerClaimStatus};
use crate::decide::allocation::{ClaimKey, ClaimPlan, ClaimRequest, plan_until};
use crate::decide::inventory::{InventoryHost, bmc_copy_keys, render};
use crate::decide::status::{Severity, claim_ready, claim_status, set_condition};
use crate::decide::validate::claim::{
    candidate, claim_request, default_groups, inspected_address, inspected_hardware,
};

/// How long an allocation waits for the cache to show its own writes.
const CACHE_CATCH_UP: Duration = Duration::from_secs(5);
/// How many times one binding is sent while only the Server's status or metadata
/// moves under it (see [`write_binding`]).
const BINDING_ATTEMPTS: u32 = 5;
/// How often Servers bound to claims that no longer exist are looked for.
pub const ORPHAN_SWEEP: Duration = Duration::from_secs(30);

/// What the allocator and the Server controller share.
pub struct Allocator {
    /// The API server.
    pub client: Client,
    /// Only claims of this namespace are served (all when `None`).
    pub namespace: Option<String>,
    /// The Server cache.
    pub servers: Store<Server>,
    /// The ServerClaim cache.
    pub claims: Store<ServerClaim>,
    /// The BareMetalHost cache, if Metal3 is installed.
    pub hosts: super::metal3::HostsCache,
    /// Wakes the orphan sweep (a Server names a claim the cache does not have).
    pub sweep: tokio::sync::Notify,
    /// Events on the claims (bound, released).
    pub events: EventPublisher,
    /// One allocation at a time.
    lock: tokio::sync::Mutex<()>,
    /// Digest of the inventory (and credentials copy) last applied per claim uid.
    applied: Mutex<HashMap<String, String>>,
    /// Tenancy, when on (the BMC copy of tenant claims).
    tenancy: Option<crate::decide::tenancy::Tenancy>,
    /// The caches a claim's BGP is decided against (Switches, pools, claims).
    bgp: Option<super::context::Stores>,
}

impl Allocator {
    /// The shared state.
    pub fn new(
        client: Client,
        namespace: Option<String>,
        servers: Store<Server>,
        claims: Store<ServerClaim>,
        hosts: super::metal3::HostsCache,
        events: EventPublisher,
    ) -> Self {
        Self {
            events,
            client,
            namespace,
            servers,
            claims,
            hosts,
            sweep: tokio::sync::Notify::new(),
            lock: tokio::sync::Mutex::new(()),
            applied: Mutex::new(HashMap::new()),
            tenancy: None,
            bgp: None,
        }
    }

    /// With the caches a claim's BGP roles are checked against (`BgpAccepted`).
    pub fn with_bgp(mut self, stores: super::context::Stores) -> Self {
        self.bgp = Some(stores);
        self
    }

    /// With tenancy: a tenant claim's BMC copy is refused unless the settings allow it.
    pub fn with_tenancy(mut self, tenancy: Option<crate::decide::tenancy::Tenancy>) -> Self {
        self.tenancy = tenancy;
        self
    }

    /// The status of the BareMetalHost a Server links to (by reference or boot MAC).
    pub fn host_status(&self, server: &Server) -> Option<serde_json::Value> {
        let obj = super::metal3::linked_host(self.hosts.listed()?, server)?;
        Some(obj.status_json())
    }

    fn in_scope(&self, namespace: &str) -> bool {
        self.namespace.as_deref().is_none_or(|ns| ns == namespace)
    }

    fn applied(&self) -> parking_lot::MutexGuard<'_, HashMap<String, String>> {
        self.applied.lock()
    }
}

fn key_of(claim: &ServerClaim) -> ClaimKey {
    ClaimKey {
        namespace: claim.namespace().unwrap_or_default(),
        name: claim.name_any(),
    }
}

fn created(claim: &ServerClaim) -> String {
    claim
        .metadata
        .creation_timestamp
        .as_ref()
        .map(|t| t.0.to_string())
        .unwrap_or_default()
}

/// The last complete allocation, from the status: `status.roles` only ever lists a
/// complete allocation, or what a claim that could not grow kept of its last one.
fn committed(claim: &ServerClaim) -> BTreeSet<String> {
    claim
        .status
        .as_ref()
        .map(|s| s.roles.iter().flat_map(|r| r.servers.clone()).collect())
        .unwrap_or_default()
}

/// The allocator's request for `claim`, or the errors of its spec.
fn request_of(
    claim: &ServerClaim,
) -> Result<ClaimRequest, crate::decide::validate::ValidationErrors> {
    claim_request(
        key_of(claim),
        claim.uid().unwrap_or_default(),
        created(claim),
        &claim.spec,
        committed(claim),
    )
}

/// Reconciles one ServerClaim.
pub(super) async fn reconcile(
    claim: Arc<ServerClaim>,
    alloc: Arc<Allocator>,
) -> Result<Action, ControllerError> {
    let ns = claim.namespace().unwrap_or_default();
    let api: Api<ServerClaim> = Api::namespaced(alloc.client.clone(), &ns);
    finalizer(&api, FINALIZER, claim, |event| async {
        match event {
            FinalizerEvent::Apply(c) => apply_claim(&c, &alloc).await,
            FinalizerEvent::Cleanup(c) => release_claim(&c, &alloc).await,
        }
    })
    .await
    .map_err(|e| ControllerError::Finalizer(Box::new(e)))
}

/// Waits until the cache has moved past the versions `written` were read at (so it
/// holds these writes or newer), at most [`CACHE_CATCH_UP`]. Every step that writes
/// bindings waits so before the next one plans from the cache.
async fn wait_seen(alloc: &Allocator, written: &[(String, Option<String>)]) {
    let deadline = Instant::now() + CACHE_CATCH_UP;
    loop {
        let behind = written.iter().any(|(name, read_at)| {
            alloc
                .servers
                .get(&ObjectRef::new(name))
                .is_some_and(|s| s.resource_version() == *read_at)
        });
        if !behind {
            return;
        }
        if Instant::now() > deadline {
            tracing::warn!("the Server cache did not catch up with the allocator's writes");
            return;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Writes `spec.claimRef` of `server` (bind or release) if its spec is still the
/// one read; returns the Server as written.
///
/// The write carries the resourceVersion read as precondition, so nothing written
/// since is overwritten. But the resourceVersion also moves when only the Server's
/// status or metadata changed (the Server controller writes its status right after
/// every binding; other tools annotate), and the allocator decided on
/// the spec alone ([`candidate`] reads nothing else). So a conflict is checked: the
/// Server is read again and, if its spec is still the one read, the same write is
/// sent again at the new version (at most [`BINDING_ATTEMPTS`] times). A changed
/// spec (another binding, maintenance, new hardware) is a real conflict and is
/// returned. Without this, an undo of a lost race failed as often as the bind did,
/// and left half a claim bound.
async fn write_binding(
    alloc: &Allocator,
    server: &Server,
    binding: Option<serde_json::Value>,
) -> Result<Arc<Server>, kube::Error> {
    let api: Api<Server> = Api::all(alloc.client.clone());
    let name = server.name_any();
    let mut version = server.resource_version();
    let mut attempt = 1;
    loop {
        let patch = json!({
            "metadata": { "resourceVersion": version },
            "spec": { "claimRef": binding },
        });
        match api
            .patch(&name, &PatchParams::default(), &Patch::Merge(patch))
            .await
        {
            Ok(written) => return Ok(Arc::new(written)),
            Err(kube::Error::Api(e)) if e.code == 409 && attempt < BINDING_ATTEMPTS => {
                let fresh = api.get(&name).await?;
                if fresh.spec != server.spec {
                    return Err(kube::Error::Api(e));
                }
                tracing::debug!(server = %name, attempt, "only the status or metadata moved; writing the binding again");
                version = fresh.resource_version();
                attempt += 1;
            }
            Err(e) => return Err(e),
        }
    }
}

fn binding_json(claim: &ServerClaim, role: &str, since: &str) -> serde_json::Value {
    json!({
        "name": claim.name_any(),
        "namespace": claim.namespace().unwrap_or_default(),
        "uid": claim.uid().unwrap_or_default(),
        "role": role,
        "since": since,
    })
}

/// Plans and carries out this claim's part, under the allocation lock. Returns the
/// plan, or the spec's errors when it is invalid (then nothing is touched).
async fn allocate(
    claim: &ServerClaim,
    alloc: &Allocator,
) -> Result<Result<ClaimPlan, crate::decide::validate::ValidationErrors>, ControllerError> {
    let key = key_of(claim);
    let mine = match request_of(claim) {
        Ok(r) => r,
        Err(e) => return Ok(Err(e)),
    };
    let _one_at_a_time = alloc.lock.lock().await;
    let servers = alloc.servers.state();
    let candidates: Vec<_> = servers
        .iter()
        .map(|s| candidate(s, inspected_hardware(alloc.host_status(s).as_ref())))
        .collect();
    let mut requests: Vec<ClaimRequest> = alloc
        .claims
        .state()
        .iter()
        .filter(|c| c.metadata.deletion_timestamp.is_none() && key_of(c) != key)
        .filter_map(|c| request_of(c).ok())
        .collect();
    requests.push(mine);
    let plan = plan_until(&candidates, &requests, Some(&key))
        .remove(&key)
        .unwrap_or_default();
    if plan.is_noop() {
        return Ok(Ok(plan));
    }
    let by_name: BTreeMap<String, &Arc<Server>> =
        servers.iter().map(|s| (s.name_any(), s)).collect();
    let since = jiff::Timestamp::now().to_string();
    let mut done: Vec<Arc<Server>> = Vec::new();
    let mut written: Vec<(String, Option<String>)> = Vec::new();
    let steps = plan
        .release
        .iter()
        .map(|n| (n, None))
        .chain(plan.bind.iter().map(|(n, r)| (n, Some(r))));
    for (name, role) in steps {
        let Some(server) = by_name.get(name) else {
            continue;
        };
        let binding = role.map(|r| binding_json(claim, r, &since));
        match write_binding(alloc, server, binding).await {
            Ok(w) => {
                written.push((name.clone(), server.resource_version()));
                if role.is_some() {
                    done.push(w);
                }
            }
            Err(e) => {
                // Whole or nothing: undo this reconcile's bindings, then plan again.
                tracing::debug!(server = %name, error = %e, "binding lost a race; undoing");
                for w in done {
                    if let Err(e) = write_binding(alloc, &w, None).await {
                        tracing::warn!(server = %w.name_any(), error = %e, "undoing a binding failed");
                    }
                }
                wait_seen(alloc, &written).await;
                return Err(e.into());
            }
        }
    }
    wait_seen(alloc, &written).await;
    tracing::info!(
        claim = %key,
        bound = plan.bind.len(),
        released = plan.release.len(),
        served = plan.served,
        "allocation changed"
    );
    let mut notes = Vec::new();
    if !plan.bind.is_empty() {
        let names: Vec<String> = plan
            .bind
            .iter()
            .map(|(n, r)| format!("{n} ({r})"))
            .collect();
        notes.push(("Bound", format!("bound {}", names.join(", "))));
    }
    if !plan.release.is_empty() {
        notes.push(("Released", format!("released {}", plan.release.join(", "))));
    }
    for (reason, note) in notes {
        alloc
            .events
            .publish(claim, Severity::Normal, reason, &note)
            .await;
    }
    Ok(Ok(plan))
}

async fn apply_claim(claim: &ServerClaim, alloc: &Allocator) -> Result<Action, ControllerError> {
    // A plan reads hosts' hardware: not from a cache that is listing (Metal3 just
    // installed).
    alloc.hosts.settled().await;
    let outcome = allocate(claim, alloc).await?;
    let now = jiff::Timestamp::now();
    let old = claim.status.clone().unwrap_or_default();
    let (mut status, held) =
        claim_status(&claim.spec, claim.metadata.generation, &outcome, &old, now);
    if outcome.is_ok() {
        write_inventory(claim, alloc, &held, &mut status, now).await?;
    }
    let servers: BTreeMap<String, Arc<Server>> = held
        .iter()
        .filter_map(|(n, _)| {
            alloc
                .servers
                .get(&ObjectRef::new(n))
                .map(|s| (n.clone(), s))
        })
        .collect();
    let (ready, reason, message) =
        claim_ready(claim, &status, &held, |n| servers.get(n).map(AsRef::as_ref));
    set_condition(
        &mut status.conditions,
        "Ready",
        ready,
        reason,
        message,
        claim.metadata.generation,
        now,
    );
    if let Some(stores) = &alloc.bgp {
        bgp_accepted(claim, stores, alloc.tenancy.as_ref(), &mut status, now);
    }
    if let Some(note) = claim_forbidden(&mut status, &servers, claim.metadata.generation, now) {
        alloc
            .events
            .publish(claim, Severity::Warning, "Forbidden", &note)
            .await;
    }
    let api = Api::<ServerClaim>::namespaced(
        alloc.client.clone(),
        &claim.namespace().unwrap_or_default(),
    );
    write_status(&api, &claim.name_any(), &old, &status).await?;
    Ok(Action::await_change())
}

/// The claim's `BgpAccepted` condition, when a role asks for BGP: False naming each
/// refused field and why (nothing of a refused claim reaches a ToR), True otherwise.
fn bgp_accepted(
    claim: &ServerClaim,
    stores: &super::context::Stores,
    tenancy: Option<&crate::decide::tenancy::Tenancy>,
    status: &mut crate::api::ServerClaimStatus,
    now: jiff::Timestamp,
) {
    if claim.spec.roles.iter().all(|r| r.bgp.is_none()) {
        status.conditions.retain(|c| c.type_ != "BgpAccepted");
        return;
    }
    let fleet = super::bgp::bgp_switches(stores);
    let (truth, reason, message) =
        match super::bgp::claim_verdict(stores, tenancy, claim, &fleet.tors) {
            Ok(_) => (true, "Accepted", String::new()),
            Err(errors) => (
                false,
                "Refused",
                format!(
                    "{}; no host of this claim gets a BGP neighbour until it is fixed",
                    errors
                        .iter()
                        .map(|(f, w)| format!("{f}: {w}"))
                        .collect::<Vec<_>>()
                        .join("; ")
                ),
            ),
        };
    set_condition(
        &mut status.conditions,
        "BgpAccepted",
        truth,
        reason,
        message,
        claim.metadata.generation,
        now,
    );
}

/// The claim's `Forbidden` condition: True while a held Server's ports are refused
/// the claim's network by the tenancy check (tenants read neither the ports of the
/// infra namespace nor Servers, so the claim says it), naming each Server and why.
/// Returns the Event note when the refusal is new or changed.
fn claim_forbidden(
    status: &mut crate::api::ServerClaimStatus,
    servers: &BTreeMap<String, Arc<Server>>,
    generation: Option<i64>,
    now: jiff::Timestamp,
) -> Option<String> {
    use crate::decide::status::{Truth, find_condition};
    let refused: Vec<String> = servers
        .iter()
        .filter_map(|(name, s)| {
            let st = s.status.as_ref()?;
            let c = find_condition(&st.conditions, "Forbidden").filter(|c| c.status == "True")?;
            Some(format!("Server {name}: {}", c.message))
        })
        .collect();
    let before = find_condition(&status.conditions, "Forbidden")
        .filter(|c| c.status == "True")
        .map(|c| c.message.clone());
    if refused.is_empty() {
        if before.is_some() {
            set_condition(
                &mut status.conditions,
                "Forbidden",
                Truth::False,
                "Granted",
                "every port carries what the namespace is granted".into(),
                generation,
                now,
            );
        }
        return None;
    }
    let message = format!(
        "{}; those ports are left as they are and nothing is sent to their devices",
        refused.join("; ")
    );
    set_condition(
        &mut status.conditions,
        "Forbidden",
        Truth::True,
        "Forbidden",
        message.clone(),
        generation,
        now,
    );
    (before.as_deref() != Some(message.as_str())).then_some(message)
}

fn owner_reference(claim: &ServerClaim) -> serde_json::Value {
    json!([{
        "apiVersion": ServerClaim::api_version(&()),
        "kind": ServerClaim::kind(&()),
        "name": claim.name_any(),
        "uid": claim.uid().unwrap_or_default(),
        "controller": true,
        "blockOwnerDeletion": true,
    }])
}

fn digest(parts: &[&[u8]]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update((p.len() as u64).to_le_bytes());
        h.update(p);
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// Writes `<claim>-inventory` (and `<claim>-bmc` when asked for) when they changed,
/// and the `InventoryComplete` condition.
async fn write_inventory(
    claim: &ServerClaim,
    alloc: &Allocator,
    held: &[(String, String)],
    status: &mut ServerClaimStatus,
    now: jiff::Timestamp,
) -> Result<(), ControllerError> {
    let ns = claim.namespace().unwrap_or_default();
    let name = claim.name_any();
    let inv_spec = claim.spec.inventory.clone().unwrap_or_default();
    let copy_name = format!("{name}-bmc");
    // Under tenancy a tenant's claim gets no BMC copy unless the operator allows it:
    // a Server's next holder would share power control with this one.
    let copy_refused = inv_spec.include_bmc_credentials
        && alloc
            .tenancy
            .as_ref()
            .is_some_and(|t| !t.is_infra(&ns) && !t.allow_bmc_credentials);
    let copy = (inv_spec.include_bmc_credentials && !copy_refused).then_some(copy_name.as_str());
    let servers: Vec<Arc<Server>> = held
        .iter()
        .filter_map(|(n, _)| alloc.servers.get(&ObjectRef::new(n)))
        .collect();
    let hosts: Vec<InventoryHost> =
        held.iter()
            .filter_map(|(n, role)| {
                let s = servers.iter().find(|s| s.name_any() == *n)?;
                let address =
                    s.spec.host_address.clone().or_else(|| {
                        inspected_address(alloc.host_status(s).as_ref(), &s.spec.boot_mac)
                    });
                Some(InventoryHost {
                    name: n.clone(),
                    role: role.clone(),
                    boot_mac: s.spec.boot_mac.clone(),
                    address,
                    bmc_address: s.spec.bmc.address.clone(),
                    bmc_secret: (
                        s.spec.bmc.credentials_secret_ref.namespace.clone(),
                        s.spec.bmc.credentials_secret_ref.name.clone(),
                    ),
                    // What the host configures; the session's state is not the
                    // installer's business (and would rewrite the inventory).
                    bgp_peers: s
                        .status
                        .iter()
                        .flat_map(|st| st.bgp_peers.iter().cloned())
                        .map(|p| crate::api::BgpPeer { state: None, ..p })
                        .collect(),
                })
            })
            .collect();
    let groups = |role: &str| {
        inv_spec
            .groups
            .get(role)
            .cloned()
            .unwrap_or_else(|| default_groups(role))
    };
    let inventory = render(&ns, &name, &hosts, &groups, copy);
    let (truth, reason, message) = if copy_refused {
        (
            false,
            "BmcCredentialsRefused",
            "spec.inventory.includeBmcCredentials: BMC credentials stay with the infra team \
             (the operator runs without --allow-bmc-credentials=true); the inventory is \
             written without them"
                .to_owned(),
        )
    } else if inventory.without_address.is_empty() {
        (true, "AllAddressesKnown", String::new())
    } else {
        (
            false,
            "AddressMissing",
            format!(
                "no address for {} (set spec.hostAddress, or link a BareMetalHost with an \
                 address on the boot MAC)",
                inventory.without_address.join(", ")
            ),
        )
    };
    set_condition(
        &mut status.conditions,
        "InventoryComplete",
        truth,
        reason,
        message,
        claim.metadata.generation,
        now,
    );

    // The credentials copy: read only when asked for, never logged.
    let mut secret_data: BTreeMap<String, ByteString> = BTreeMap::new();
    if copy.is_some() {
        for s in &servers {
            let r = &s.spec.bmc.credentials_secret_ref;
            let secret = Api::<Secret>::namespaced(alloc.client.clone(), &r.namespace)
                .get_opt(&r.name)
                .await?;
            let data = secret.and_then(|s| s.data).unwrap_or_default();
            let (user_key, pass_key) = bmc_copy_keys(&s.name_any());
            for (from, to) in [("username", user_key), ("password", pass_key)] {
                if let Some(v) = data.get(from) {
                    secret_data.insert(to, v.clone());
                }
            }
        }
    }
    let mut parts: Vec<&[u8]> = vec![
        inventory.hosts_ini.as_bytes(),
        inventory.hosts_yaml.as_bytes(),
        if copy.is_some() { b"copy" } else { b"none" },
    ];
    for (k, v) in &secret_data {
        parts.push(k.as_bytes());
        parts.push(&v.0);
    }
    let fingerprint = digest(&parts);
    let uid = claim.uid().unwrap_or_default();
    if alloc.applied().get(&uid) == Some(&fingerprint) {
        return Ok(());
    }
    let params = PatchParams::apply(MANAGER).force();
    let cm = json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": format!("{name}-inventory"),
            "namespace": ns,
            "labels": { "patchbay.dev/claim": name },
            "ownerReferences": owner_reference(claim),
        },
        "data": { "hosts.ini": inventory.hosts_ini, "hosts.yaml": inventory.hosts_yaml },
    });
    Api::<ConfigMap>::namespaced(alloc.client.clone(), &ns)
        .patch(&format!("{name}-inventory"), &params, &Patch::Apply(cm))
        .await?;
    let secrets = Api::<Secret>::namespaced(alloc.client.clone(), &ns);
    if copy.is_some() {
        let secret = json!({
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {
                "name": copy_name,
                "namespace": ns,
                "labels": { "patchbay.dev/claim": name },
                "ownerReferences": owner_reference(claim),
            },
            "type": "Opaque",
            "data": secret_data,
        });
        secrets
            .patch(&copy_name, &params, &Patch::Apply(secret))
            .await?;
    } else {
        delete_copy(&secrets, &copy_name).await?;
    }
    alloc.applied().insert(uid, fingerprint);
    Ok(())
}

async fn delete_copy(secrets: &Api<Secret>, name: &str) -> Result<(), ControllerError> {
    match secrets.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// A claim being deleted: its Servers go back to the pool, the credentials copy
/// goes; the inventory ConfigMap follows its owner.
async fn release_claim(claim: &ServerClaim, alloc: &Allocator) -> Result<Action, ControllerError> {
    let key = key_of(claim);
    let uid = claim.uid().unwrap_or_default();
    let _one_at_a_time = alloc.lock.lock().await;
    let mut written = Vec::new();
    for s in alloc.servers.state() {
        let bound =
            s.spec.claim_ref.as_ref().is_some_and(|b| {
                b.name == key.name && b.namespace == key.namespace && b.uid == uid
            });
        if bound {
            write_binding(alloc, &s, None).await?;
            written.push((s.name_any(), s.resource_version()));
        }
    }
    wait_seen(alloc, &written).await;
    let ns = claim.namespace().unwrap_or_default();
    let name = claim.name_any();
    if !written.is_empty() {
        // In name order: the cache's is a hash map's, different each time.
        let mut names: Vec<&str> = written.iter().map(|(n, _)| n.as_str()).collect();
        names.sort_unstable();
        let note = format!("claim deleted: released {}", names.join(", "));
        alloc
            .events
            .publish(claim, Severity::Normal, "Released", &note)
            .await;
    }
    // The finalizer stays until every released Server's ports are off the claim's
    // network (the Server's status stops naming the claim).
    let mut leaving: Vec<String> = alloc
        .servers
        .state()
        .iter()
        .filter(|s| {
            s.status
                .as_ref()
                .and_then(|st| st.claim.as_ref())
                .is_some_and(|c| c.namespace == ns && c.name == name)
        })
        .map(|s| {
            let phase = s.status.as_ref().and_then(|st| st.phase);
            format!(
                "{} ({})",
                s.name_any(),
                phase.map(|p| p.to_string()).unwrap_or_default()
            )
        })
        .collect();
    leaving.extend(written.iter().map(|(n, _)| format!("{n} (released)")));
    if !leaving.is_empty() {
        leaving.sort();
        leaving.dedup_by(|a, b| a.split(' ').next() == b.split(' ').next());
        let message = format!(
            "deprovisioning: waiting for {} to be back on the provisioning network (or clean)",
            leaving.join(", ")
        );
        let old = claim.status.clone().unwrap_or_default();
        let mut status = old.clone();
        set_condition(
            &mut status.conditions,
            "Ready",
            false,
            "Deprovisioning",
            message.clone(),
            claim.metadata.generation,
            jiff::Timestamp::now(),
        );
        let api = Api::<ServerClaim>::namespaced(alloc.client.clone(), &ns);
        write_status(&api, &name, &old, &status).await?;
        return Err(ControllerError::Waiting(message));
    }
    delete_copy(
        &Api::namespaced(alloc.client.clone(), &ns),
        &format!("{}-bmc", claim.name_any()),
    )
    .await?;
    alloc.applied().remove(&uid);
    tracing::info!(claim = %key, "claim deleted; its servers are released");
    Ok(Action::await_change())
}

/// Releases every Server bound to a claim that no longer exists (or to an earlier
/// claim of the same name). Each suspect is checked against the API server, not
/// only the cache, before it is released.
pub async fn sweep_orphans(alloc: &Allocator) -> Result<usize, ControllerError> {
    let mut released = 0;
    let _one_at_a_time = alloc.lock.lock().await;
    for s in alloc.servers.state() {
        let Some(b) = &s.spec.claim_ref else { continue };
        if !alloc.in_scope(&b.namespace) {
            continue;
        }
        let cached = alloc
            .claims
            .get(&ObjectRef::new(&b.name).within(&b.namespace))
            .is_some_and(|c| c.uid().as_deref() == Some(b.uid.as_str()));
        if cached {
            continue;
        }
        let live = Api::<ServerClaim>::namespaced(alloc.client.clone(), &b.namespace)
            .get_opt(&b.name)
            .await?;
        if live.is_some_and(|c| c.uid().as_deref() == Some(b.uid.as_str())) {
            continue;
        }
        match write_binding(alloc, &s, None).await {
            Ok(_) => {
                released += 1;
                wait_seen(alloc, &[(s.name_any(), s.resource_version())]).await;
                tracing::info!(server = %s.name_any(), claim = %format!("{}/{}", b.namespace, b.name), "released an orphaned server");
            }
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(released)
}

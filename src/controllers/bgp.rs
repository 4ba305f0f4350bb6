//! BGP to allocated hosts, the I/O side ([`crate::decide::bgp`] decides): a Switch's
//! speaker kept to the neighbours its hosts should have (called by the Switch
//! controller within its reconcile: one session to read, and when something differs
//! one more to change and read back), and each Server's peers published (called by
//! the Server controller: annotations, status, the per-peer password Secrets in the
//! claim's namespace). Kubernetes and device I/O.
//!
//! When the speaker is touched: at every reconcile of a Switch with `spec.bgp`, and
//! the Switch is reconciled when a Server or claim changes and every
//! `spec.bgp.intervalSeconds` (default 30) — so drift (a neighbour removed by hand,
//! a speaker restarted empty) is repaired within one interval. A speaker that failed
//! (unreachable, login refused, an answer it could not parse) is tried again one
//! interval after the failure, not sooner, whatever wakes its Switch meanwhile
//! ([`SpeakerFailures`]): a speaker that is down costs one login attempt per
//! interval, however busy the claims are. Between Switch events a pass looks at no
//! other Switch (`BgpSwitchesCache`).
//!
//! Passwords: generated (24 letters and digits, from the system's random source)
//! into Secret `<claim>-bgp-<server>-<n>` (key `password`, type
//! `kubernetes.io/basic-auth`, MetalLB's `passwordSecret` shape) when a Server is
//! bound to a role with BGP; read from there only when a neighbour is sent; never
//! logged, never in status, Events or errors. A Secret is created once and never
//! rewritten (a changed password would break the session on one side); released
//! Servers' Secrets are deleted.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Resource as _, ResourceExt};
use patchbay_providers::bgp::{Change, Router, plan};
use patchbay_providers::secret::SecretString;

use super::ControllerError;
use super::bgp_fleet::{BgpFleet, BgpSwitches};
use super::context::{Context, Stores};
use crate::api::{BgpNeighborStatus, Server, ServerClaim, Switch, SwitchStatus};
use crate::decide::bgp::{
    self, Allowed, BgpGrants, Peer, SwitchBgp, Wanted, peering, peers_of, switch_bgp,
};
use crate::decide::bgp_nodes;
use crate::decide::failure::Failure;
use crate::decide::status::set_condition;
use crate::decide::tenancy::Tenancy;

/// The label on a password Secret naming its Server.
const SERVER_LABEL: &str = "patchbay.dev/bgp-server";

/// What the BGP passes keep between a Switch's reconciles (the Switch controller
/// owns it): when each speaker failed, and what each had in place.
#[derive(Default)]
pub struct Speakers {
    /// When each Switch's speaker last failed.
    pub failures: SpeakerFailures,
    /// What each Switch's speaker had in place at its last pass.
    pub established: SpeakerEstablished,
}

impl Speakers {
    /// Forgets `switch` (deleted).
    pub(super) fn forget(&self, switch: &Switch) {
        self.failures.forget(switch);
        self.established.forget(switch);
    }
}

/// When each Switch's speaker last failed (`namespace/name`), for as long as it
/// fails: its next pass waits one interval from then.
#[derive(Default)]
pub struct SpeakerFailures(parking_lot::Mutex<std::collections::HashMap<String, Instant>>);

impl SpeakerFailures {
    fn key(switch: &Switch) -> String {
        super::neighbors::key(switch)
    }

    /// How long `switch`'s speaker must still be left alone (`None`: it may be
    /// contacted now).
    fn wait(&self, switch: &Switch, every: Duration) -> Option<Duration> {
        let since = self.0.lock().get(&Self::key(switch))?.elapsed();
        (since < every).then(|| every - since)
    }

    /// Records the outcome of a pass: a device failure starts the wait, anything
    /// else ends it.
    fn record(&self, switch: &Switch, failed_on_the_device: bool) {
        let mut failures = self.0.lock();
        if failed_on_the_device {
            failures.insert(Self::key(switch), Instant::now());
        } else {
            crate::decide::slack::remove(&mut failures, &Self::key(switch));
        }
    }

    /// Forgets `switch` (deleted).
    pub(super) fn forget(&self, switch: &Switch) {
        crate::decide::slack::remove(&mut self.0.lock(), &Self::key(switch));
    }
}

/// The neighbours each Switch's speaker had in place as patchbay wanted them at its
/// last pass (`namespace/name` → address → [`bgp::digest`]): a later pass that must
/// put one back as it was is repairing drift ([`bgp::repairs`]). In memory: after a
/// restart the first pass that finds them in place learns them again.
#[derive(Default)]
pub struct SpeakerEstablished(
    parking_lot::Mutex<std::collections::HashMap<String, BTreeMap<std::net::Ipv4Addr, u64>>>,
);

impl SpeakerEstablished {
    fn of(&self, switch: &Switch) -> BTreeMap<std::net::Ipv4Addr, u64> {
        self.0
            .lock()
            .get(&super::neighbors::key(switch))
            .cloned()
            .unwrap_or_default()
    }

    fn set(&self, switch: &Switch, now: BTreeMap<std::net::Ipv4Addr, u64>) {
        let mut all = self.0.lock();
        if now.is_empty() {
            crate::decide::slack::remove(&mut all, &super::neighbors::key(switch));
        } else {
            all.insert(super::neighbors::key(switch), now);
        }
    }

    /// Forgets `switch` (deleted).
    pub(super) fn forget(&self, switch: &Switch) {
        crate::decide::slack::remove(&mut self.0.lock(), &super::neighbors::key(switch));
    }
}

/// Every Switch with valid BGP settings ([`BgpSwitchesCache`]), from the caches.
pub(super) fn bgp_switches(stores: &Stores) -> BgpSwitches {
    super::bgp_fleet::bgp_switches(&stores.bgp_switches, &stores.switches)
}

/// Why `switch`'s BGP is refused for overlapping an older Switch's subnets (empty:
/// it is not).
fn refused_overlaps(fleet: &BgpFleet, switch: &Switch, b: &SwitchBgp) -> Vec<(String, String)> {
    if fleet.keeps(switch) {
        return Vec::new();
    }
    fleet.tors.overlaps(b)
}

/// What `claim`'s roles may do with BGP (grants apply to a tenant's claim under
/// tenancy).
pub(super) fn claim_verdict(
    stores: &Stores,
    tenancy: Option<&Tenancy>,
    claim: &ServerClaim,
    tors: &bgp::Tors,
) -> bgp::ClaimBgp {
    let all = tenancy.map(|_| BgpGrants::new(stores.pools.state().iter().map(|p| &**p)));
    let grants_of = |ns: &str| match (tenancy, &all) {
        (Some(t), Some(g)) if !t.is_infra(ns) => Some(g.of(ns)),
        _ => None,
    };
    bgp::claim_bgp(claim, &grants_of, tors, &stores.claims.state())
}

/// `server`'s claim, its role's allowed BGP and its peers, when it is bound to a
/// role with BGP that is allowed.
pub(super) fn node_peers(
    stores: &Stores,
    tenancy: Option<&Tenancy>,
    server: &Server,
    fleet: &BgpFleet,
) -> Option<(Arc<ServerClaim>, Allowed, Vec<Peer>)> {
    let b = server.spec.claim_ref.as_ref()?;
    let claim = stores
        .claims
        .get(&kube::runtime::reflector::ObjectRef::new(&b.name).within(&b.namespace))
        .filter(|c| c.uid().as_deref() == Some(b.uid.as_str()))?;
    let allowed = claim_verdict(stores, tenancy, &claim, &fleet.tors)
        .ok()?
        .remove(&b.role)?;
    let peers = peers_of(server, &claim.name_any(), allowed.asn, &fleet.switches);
    Some((claim, allowed, peers))
}

/// The neighbours `switch`'s speaker must have now.
fn wanted(ctx: &Context, switch: &Switch, b: &SwitchBgp, fleet: &BgpFleet) -> Vec<Wanted> {
    let ns = switch.namespace().unwrap_or_default();
    let name = switch.name_any();
    let tenancy = ctx.settings.tenancy.as_ref();
    let mut out = Vec::new();
    for server in ctx.stores.servers.state() {
        // Only hosts cabled to one of this Switch's BGP ports are looked at further.
        let cabled = server.spec.nics.iter().any(|n| {
            n.port
                .as_ref()
                .is_some_and(|p| p.namespace == ns && b.links.contains_key(&p.name))
        });
        if !cabled || !peering(&server) {
            continue;
        }
        let Some((claim, allowed, peers)) = node_peers(&ctx.stores, tenancy, &server, fleet) else {
            continue;
        };
        let claim_ns = claim.namespace().unwrap_or_default();
        for p in peers
            .iter()
            .filter(|p| p.switch == name && p.switch_namespace == ns)
        {
            out.push(bgp::neighbor(
                b,
                p,
                &allowed,
                &server.name_any(),
                &claim_ns,
                &claim.name_any(),
            ));
        }
    }
    out
}

/// Keeps `switch`'s speaker to the neighbours its hosts should have and writes what
/// the speaker has into `status` (`bgp`, condition `BgpConfigured`). Returns when to
/// look again (`None`: the Switch has no BGP).
pub(super) async fn sync(
    switch: &Switch,
    status: &mut SwitchStatus,
    ctx: &Context,
    speakers: &Speakers,
) -> Option<Duration> {
    let Some(spec) = &switch.spec.bgp else {
        status.bgp = None;
        status.conditions.retain(|c| c.type_ != "BgpConfigured");
        return None;
    };
    let every = Duration::from_secs(spec.interval_seconds.unwrap_or(30).clamp(2, 3600) as u64);
    let generation = switch.metadata.generation;
    let now = jiff::Timestamp::now();
    let fleet = bgp_switches(&ctx.stores);
    // Parsed once per spec change when the Switch is kept; parsed here otherwise.
    let parsed;
    let b = match fleet.of(switch) {
        Some(b) => b,
        None => {
            let Ok(Some(b)) = switch_bgp(&switch.spec) else {
                // The Switch's own validation reports the fields (Ready=False).
                return Some(every);
            };
            parsed = b;
            &parsed
        }
    };
    let overlaps = refused_overlaps(&fleet, switch, b);
    if !overlaps.is_empty() {
        let message = overlaps
            .iter()
            .map(|(f, w)| format!("{f}: {w}"))
            .collect::<Vec<_>>()
            .join("; ");
        set_condition(
            &mut status.conditions,
            "BgpConfigured",
            false,
            "AddressOverlap",
            format!("{message}; nothing is sent to the speaker"),
            generation,
            now,
        );
        return Some(every);
    }
    // A speaker that failed is left alone until an interval after the failure (its
    // condition stays as that pass wrote it).
    if let Some(wait) = speakers.failures.wait(switch, every) {
        return Some(wait);
    }
    let result = keep(switch, b, &fleet, status, ctx, &speakers.established).await;
    let outcome = match &result {
        Ok(_) => "ok",
        Err(f) => f.category(),
    };
    ctx.probes
        .metrics
        .bgp_passes
        .get_or_create(&crate::metrics::OutcomeLabel { outcome })
        .inc();
    speakers
        .failures
        .record(switch, matches!(result, Err(Failure::Device(_))));
    let (truth, reason, message) = match &result {
        Ok(waiting) if waiting.is_empty() => (true, "Configured", String::new()),
        Ok(waiting) => (
            false,
            "PasswordMissing",
            format!(
                "no password Secret yet for {}; their neighbours wait",
                waiting.join(", ")
            ),
        ),
        Err(f) => {
            tracing::warn!(switch = %switch.name_any(), error = %f, "BGP speaker not kept");
            (false, f.category(), f.to_string())
        }
    };
    set_condition(
        &mut status.conditions,
        "BgpConfigured",
        truth,
        reason,
        message,
        generation,
        now,
    );
    // A rollout waiting on a read after a time still ahead is read then, not up to
    // an interval later.
    let due = read_after(switch)
        .filter(|after| *after > now)
        .and_then(|after| Duration::try_from(after.duration_since(now)).ok());
    Some(due.map_or(every, |d| d.min(every)))
}

/// The time a rollout asks this Switch's speaker to be read after, if one does.
fn read_after(switch: &Switch) -> Option<jiff::Timestamp> {
    switch
        .annotations()
        .get(crate::api::keys::BGP_READ_AFTER_ANNOTATION)
        .and_then(|t| t.parse::<jiff::Timestamp>().ok())
}

/// One read, and when needed one change. Returns the neighbours left out for want of
/// their password Secret.
async fn keep(
    switch: &Switch,
    b: &SwitchBgp,
    fleet: &BgpFleet,
    status: &mut SwitchStatus,
    ctx: &Context,
    established: &SpeakerEstablished,
) -> Result<Vec<String>, Failure> {
    let (speaker, backend) = speaker_of(switch, ctx).await?;
    let router = Router {
        asn: b.asn,
        router_id: b.router_id,
    };
    let managed = b.managed();
    let wanted = wanted(ctx, switch, b, fleet);
    let desired: Vec<_> = wanted.iter().map(|w| w.neighbor.clone()).collect();
    let mut state = speaker.bgp_state().await.map_err(Failure::Device)?;
    let had = established.of(switch);
    let mut changes = plan(&desired, &state, &managed);
    let mut waiting = Vec::new();
    if !changes.is_empty() {
        // The passwords, read only for the neighbours being sent.
        let mut ready = Vec::with_capacity(changes.len());
        for mut c in changes {
            if let Change::Put { neighbor, .. } = &mut c {
                let w = wanted
                    .iter()
                    .find(|w| w.neighbor.address == neighbor.address)
                    .expect("a put comes from a wanted neighbour");
                match password(ctx, &w.namespace, &w.password_secret).await? {
                    Some(p) => neighbor.password = Some(p),
                    None => {
                        waiting.push(w.server.clone());
                        continue;
                    }
                }
            }
            ready.push(c);
        }
        changes = ready;
    }
    if !changes.is_empty() {
        let n = changes.len();
        let repaired = bgp::repairs(&changes, &had);
        let metrics = &ctx.probes.metrics;
        if !repaired.is_empty() {
            metrics
                .drift_found
                .get_or_create(&crate::metrics::BackendLabel { backend })
                .inc_by(repaired.len() as u64);
        }
        state = speaker
            .bgp_apply(&router, &changes)
            .await
            .map_err(Failure::Device)?;
        let what: Vec<String> = changes.iter().map(Change::describe).collect();
        tracing::info!(switch = %switch.name_any(), changes = n, what = %what.join(", "), "BGP neighbours changed");
        let sent: BTreeSet<_> = changes.iter().filter_map(Change::address).collect();
        let left: Vec<String> = desired
            .iter()
            .filter(|d| sent.contains(&d.address))
            .filter_map(|d| {
                let differs = state
                    .neighbors
                    .get(&d.address)
                    .map_or(vec!["missing"], |seen| {
                        patchbay_providers::bgp::differences(d, seen)
                    });
                (!differs.is_empty()).then(|| format!("{} ({})", d.address, differs.join(", ")))
            })
            .collect();
        // The route-maps patchbay owns, as it wrote them.
        let left: Vec<String> = left
            .into_iter()
            .chain(
                plan(&desired, &state, &managed)
                    .iter()
                    .filter(|c| matches!(c, Change::Policy { .. }))
                    .map(Change::describe),
            )
            .collect();
        if !left.is_empty() {
            return Err(Failure::Device(patchbay_providers::DeviceError::Protocol {
                during: "reading the BGP neighbours back".into(),
                cause: patchbay_providers::Cause::msg(format!(
                    "the speaker does not have what was sent: {}",
                    left.join("; ")
                )),
            }));
        }
        if !repaired.is_empty() {
            metrics
                .drift_repaired
                .get_or_create(&crate::metrics::KindLabel {
                    kind: bgp::DRIFT_KIND,
                })
                .inc_by(repaired.len() as u64);
            let note = format!(
                "the BGP speaker was changed behind patchbay's back; put back: {}",
                repaired.join("; ")
            );
            tracing::warn!(switch = %switch.name_any(), repaired = %repaired.join("; "), "BGP drift repaired");
            ctx.events
                .publish(
                    switch,
                    crate::decide::status::Severity::Warning,
                    "BgpDriftRepaired",
                    &note,
                )
                .await;
        }
    }
    established.set(switch, bgp::established(&desired, &state));
    // A rollout waiting on this speaker's evidence (see crate::controllers::rollout).
    record(status, b, &wanted, &state, read_after(switch));
    Ok(waiting)
}

/// A Switch being deleted: its hosts' neighbours come off its speaker first. Best
/// effort: a speaker that cannot be reached or changed is logged and left (the
/// Switch's deletion does not wait on it).
pub(super) async fn withdraw(switch: &Switch, ctx: &Context) {
    let Ok(Some(b)) = switch_bgp(&switch.spec) else {
        return;
    };
    let result = async {
        let (speaker, _) = speaker_of(switch, ctx).await?;
        let state = speaker.bgp_state().await.map_err(Failure::Device)?;
        let changes = plan(&[], &state, &b.managed());
        if !changes.is_empty() {
            let router = Router {
                asn: b.asn,
                router_id: b.router_id,
            };
            speaker
                .bgp_apply(&router, &changes)
                .await
                .map_err(Failure::Device)?;
        }
        Ok::<usize, Failure>(changes.len())
    }
    .await;
    match result {
        Ok(n) => {
            tracing::info!(switch = %switch.name_any(), removed = n, "BGP neighbours withdrawn")
        }
        Err(f) => tracing::warn!(
            switch = %switch.name_any(),
            error = %f,
            "BGP neighbours not withdrawn; they stay on the speaker"
        ),
    }
}

/// The BGP speaker `switch.spec.bgp.speaker` names.
/// The Switch's speaker, and its backend (the metrics' `backend` label).
async fn speaker_of(
    switch: &Switch,
    ctx: &Context,
) -> Result<(Arc<dyn patchbay_providers::BgpSpeaker>, &'static str), Failure> {
    let spec = switch.spec.bgp.as_ref().expect("a Switch with spec.bgp");
    let ns = switch.namespace().unwrap_or_default();
    let field = "spec.bgp.speaker";
    let (provider, secret) = ctx.checked_provider(&ns, &spec.speaker.name, field).await?;
    let speaker = ctx
        .backends
        .bgp_speaker(&provider, secret.as_deref())
        .map_err(Failure::Backend)?
        .ok_or_else(|| Failure::ProviderRole {
            field,
            name: provider.name_any(),
            why: "is not a BGP speaker: patchbay keeps BGP neighbours on os frr or ios over ssh (or a fixture device)",
        })?;
    Ok((speaker, provider.spec.backend.name()))
}

/// Writes the managed neighbours the speaker has into `status.bgp` (see
/// [`bgp::bgp_status`] for when `readAt` moves).
fn record(
    status: &mut SwitchStatus,
    b: &SwitchBgp,
    wanted: &[Wanted],
    state: &patchbay_providers::bgp::SpeakerState,
    read_after: Option<jiff::Timestamp>,
) {
    // The SwitchPort of each node address, built only when the speaker has
    // neighbours (an idle pass of a Switch without hosts builds nothing).
    let ports: BTreeMap<_, _> = if state.neighbors.is_empty() {
        BTreeMap::new()
    } else {
        b.links.iter().map(|(k, l)| (l.node(), k)).collect()
    };
    let neighbors: Vec<BgpNeighborStatus> = state
        .neighbors
        .iter()
        .filter_map(|(a, seen)| {
            Some(BgpNeighborStatus {
                address: a.to_string(),
                switch_port: (*ports.get(a)?).clone(),
                server: wanted
                    .iter()
                    .find(|w| w.neighbor.address == *a)
                    .map(|w| w.server.clone())
                    .unwrap_or_default(),
                asn: i64::from(seen.remote_asn),
                state: seen.state.clone(),
                accepted_prefixes: i64::from(seen.accepted),
            })
        })
        .collect();
    status.bgp = Some(bgp::bgp_status(
        status.bgp.take(),
        neighbors,
        jiff::Timestamp::now(),
        read_after,
    ));
}

/// The password in Secret `name` of `namespace`, when it exists.
async fn password(
    ctx: &Context,
    namespace: &str,
    name: &str,
) -> Result<Option<SecretString>, Failure> {
    Ok(password_bytes(&ctx.client, namespace, name)
        .await
        .map_err(super::kube_failure)?
        .and_then(|v| String::from_utf8(v.0).ok())
        .map(SecretString::new))
}

/// The `password` key of Secret `name` of `namespace`, when it exists and is not
/// empty.
pub(super) async fn password_bytes(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> Result<Option<ByteString>, kube::Error> {
    let secret = Api::<Secret>::namespaced(client.clone(), namespace)
        .get_opt(name)
        .await?;
    Ok(secret
        .and_then(|s| s.data)
        .and_then(|mut d| d.remove("password"))
        .filter(|p| !p.0.is_empty()))
}

/// A new password: 24 letters and digits (no character a CLI would read specially).
fn generate_password() -> String {
    use ring::rand::SecureRandom;
    const ALPHABET: &[u8] = b"ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz23456789";
    let rng = ring::rand::SystemRandom::new();
    let mut out = String::with_capacity(24);
    while out.len() < 24 {
        let mut b = [0u8; 32];
        rng.fill(&mut b).expect("the system's random source");
        // Rejection sampling keeps every letter equally likely.
        let limit = 256 - 256 % ALPHABET.len();
        for x in b {
            if (x as usize) < limit && out.len() < 24 {
                out.push(ALPHABET[x as usize % ALPHABET.len()] as char);
            }
        }
    }
    out
}

/// What [`publish`] published for one Server: its peers (for the Nodes, when opted
/// in), their status form, and the claim's namespace (where the passwords are).
pub(super) struct Published {
    /// The peers.
    pub peers: Vec<Peer>,
    /// Their status form, each with its session's state.
    pub status: Vec<crate::api::BgpPeer>,
    /// The bound claim's namespace (`None`: no peers).
    pub claim_namespace: Option<String>,
    /// Each peer's Switch's timers.
    pub timers: Vec<Option<patchbay_providers::bgp::Timers>>,
}

/// The Server's side: its peers (annotations, and the status the caller writes) and
/// their password Secrets; a Server without peers has its annotations and Secrets
/// removed.
pub(super) async fn publish(
    server: &Server,
    stores: &Stores,
    tenancy: Option<&Tenancy>,
    client: &kube::Client,
) -> Result<Published, ControllerError> {
    let switches = bgp_switches(stores);
    let found = if server.metadata.deletion_timestamp.is_some() {
        None
    } else {
        node_peers(stores, tenancy, server, &switches)
    };
    let name = server.name_any();
    let (peers, claim) = match &found {
        Some((claim, _, peers)) => (peers.clone(), Some(claim.clone())),
        None => (Vec::new(), None),
    };
    let timers = peers
        .iter()
        .map(|p| {
            switches
                .named(&p.switch_namespace, &p.switch)
                .map(|b| b.timers)
        })
        .collect();
    let published = Published {
        // The sessions' states from the Switches as the cache has them now.
        status: bgp::peer_status(
            &peers,
            &peers
                .iter()
                .filter_map(|p| {
                    stores.switches.get(
                        &kube::runtime::reflector::ObjectRef::new(&p.switch)
                            .within(&p.switch_namespace),
                    )
                })
                .collect::<Vec<_>>(),
        ),
        claim_namespace: claim.as_ref().and_then(|c| c.namespace()),
        timers,
        peers,
    };
    let peers = &published.peers;
    // Published as they should be (Secrets are written with the annotations).
    let Some(patch) = bgp_nodes::annotation_patch(server.annotations(), &bgp::annotations(peers))
    else {
        return Ok(published);
    };
    // Secrets first: a host told its peers finds their passwords.
    if let Some(claim) = &claim {
        let ns = claim.namespace().unwrap_or_default();
        let secrets = Api::<Secret>::namespaced(client.clone(), &ns);
        for p in peers {
            if secrets.get_opt(&p.password_secret).await?.is_some() {
                continue;
            }
            let s = Secret {
                metadata: kube::api::ObjectMeta {
                    name: Some(p.password_secret.clone()),
                    namespace: Some(ns.clone()),
                    labels: Some(
                        [
                            ("patchbay.dev/claim".to_owned(), claim.name_any()),
                            (SERVER_LABEL.to_owned(), name.clone()),
                        ]
                        .into(),
                    ),
                    owner_references: Some(vec![claim.controller_owner_ref(&()).expect("named")]),
                    ..Default::default()
                },
                type_: Some("kubernetes.io/basic-auth".into()),
                data: Some(
                    [(
                        "password".to_owned(),
                        ByteString(generate_password().into_bytes()),
                    )]
                    .into(),
                ),
                ..Default::default()
            };
            match secrets.create(&PostParams::default(), &s).await {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 409 => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
    // Secrets of this Server no peer names any more (released, re-cabled), in any
    // namespace.
    let keep: BTreeSet<(String, String)> = match &claim {
        Some(c) => peers
            .iter()
            .map(|p| (c.namespace().unwrap_or_default(), p.password_secret.clone()))
            .collect(),
        None => BTreeSet::new(),
    };
    let all = Api::<Secret>::all(client.clone());
    let listed = all
        .list_metadata(&ListParams::default().labels(&format!("{SERVER_LABEL}={name}")))
        .await?;
    for s in listed {
        let key = (s.namespace().unwrap_or_default(), s.name_any());
        if !keep.contains(&key) {
            match Api::<Secret>::namespaced(client.clone(), &key.0)
                .delete(&key.1, &DeleteParams::default())
                .await
            {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
    // Annotations: the seed's pattern, replaced whole.
    Api::<Server>::all(client.clone())
        .patch(&name, &PatchParams::default(), &Patch::Merge(patch))
        .await?;
    Ok(published)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::reflector::store;
    use kube::runtime::watcher::Event;

    fn switch(name: &str, generation: i64, created: &str, address: &str) -> Switch {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "patchbay.dev/v1alpha1", "kind": "Switch",
            "metadata": {"name": name, "namespace": "infra", "uid": format!("u-{name}"),
                         "generation": generation, "creationTimestamp": created},
            "spec": {"provider": {"name": "p"},
                     "ports": {"p0": {"name": "eth0", "bgpAddress": address}},
                     "bgp": {"speaker": {"name": "frr"}, "asn": 65000,
                             "routerId": format!("10.255.0.{}", name.len())}},
        }))
        .unwrap()
    }

    fn stores(switches: kube::runtime::reflector::Store<Switch>) -> Stores {
        Stores::new(
            switches,
            store().0,
            store().0,
            store().0,
            store().0,
            store().0,
            store().0,
        )
    }

    #[test]
    fn the_fleet_follows_the_switch_events_and_costs_nothing_between_them() {
        let (reader, mut writer) = store::<Switch>();
        let stores = stores(reader);
        let older = switch("a", 1, "2026-01-01T00:00:00Z", "10.0.0.0/31");
        writer.apply_watcher_event(&Event::Apply(older.clone()));
        // Nothing feeds the epoch yet: every read checks the key.
        assert_eq!(bgp_switches(&stores).switches.len(), 1);
        let newer = switch("bb", 1, "2026-01-02T00:00:00Z", "10.0.0.2/31");
        writer.apply_watcher_event(&Event::Apply(newer.clone()));
        assert_eq!(bgp_switches(&stores).switches.len(), 2);

        // Fed by the watch: a read with no event since is the cached fleet itself.
        stores.bgp_switches.switches_changed();
        let fleet = bgp_switches(&stores);
        assert!(Arc::ptr_eq(&fleet, &bgp_switches(&stores)));
        assert!(fleet.of(&older).is_some() && fleet.of(&newer).is_some());

        // The newer Switch takes the older's subnet: after the event it is left out,
        // and told which Switch it overlaps.
        let clash = switch("bb", 2, "2026-01-02T00:00:00Z", "10.0.0.1/31");
        writer.apply_watcher_event(&Event::Apply(clash.clone()));
        stores.bgp_switches.switches_changed();
        let fleet = bgp_switches(&stores);
        assert_eq!(fleet.switches.len(), 1);
        assert!(fleet.of(&clash).is_none() && fleet.of(&newer).is_none());
        let b = switch_bgp(&clash.spec).unwrap().unwrap();
        let refused = refused_overlaps(&fleet, &clash, &b);
        assert_eq!(refused.len(), 1, "{refused:?}");
        assert!(refused[0].1.contains("Switch a"), "{refused:?}");
        assert!(refused_overlaps(&fleet, &older, fleet.of(&older).unwrap()).is_empty());

        // A status write (an event, same generation) keeps the parsed fleet.
        let mut written = older.clone();
        written.metadata.resource_version = Some("9".into());
        writer.apply_watcher_event(&Event::Apply(written));
        stores.bgp_switches.switches_changed();
        assert!(Arc::ptr_eq(&fleet, &bgp_switches(&stores)));

        // Deleted: gone from the fleet once the watch says so, and the Switch it
        // kept out is in.
        writer.apply_watcher_event(&Event::Delete(older.clone()));
        stores.bgp_switches.switches_changed();
        let fleet = bgp_switches(&stores);
        assert!(fleet.of(&older).is_none() && fleet.of(&clash).is_some());
        assert_eq!(fleet.switches.len(), 1);
    }
}

//! Rollouts of SwitchPortConfigurations, SmartNicConfigurations and a Switch's port
//! entries ([`Rolled`]): an edit reaches the ports carrying the configuration (or,
//! of a Switch, the ports carrying a configuration whose entry it changes) in
//! waves, each gated, rolled back when a gate fails. Kubernetes I/O
//! (ControllerRevisions, the configuration's status, each moved port's
//! [`ROLLOUT_ANNOTATION`] and what it saw of the host, Events, a Switch's BGP and
//! neighbour read-after, the Nodes for the Node Ready gate), the hosts' HTTP probes
//! (`rollout/probe.rs`) and, through each switch's worker, settling a wave held on its
//! devices (confirmed when its gates pass, cancelled when one fails or on abort);
//! every decision is [`crate::decide::rollout`]'s.
//!
//! How a port follows: a port carries its configuration's `status.rollout.
//! currentRevision` unless its pin names the rollout under way
//! (`<updateRevision>.<attempt>.<wave>`), then the update revision
//! ([`super::context::Stores::configuration_carried`]). So an edit moves no port by
//! itself; this controller moves them by pinning them, a wave at a time.
//!
//! What is stored, in this order, so that a process killed at any point resumes
//! and never leaves a wave half-done:
//! 1. the revision, as a ControllerRevision `<configuration>-<hash>` (its spec
//!    without `rollout`; the last [`REVISION_HISTORY`] kept);
//! 2. the wave, in `status.rollout` (`wave`, `waveCommittedAt`), before any port
//!    is pinned. Its ports are not listed: they are the same plan over the same
//!    ports ([`crate::decide::rollout::wave_members`]), and its pins;
//! 3. the pins. Every look pins whatever port of the wave under way is not pinned
//!    yet, and, while a rollback (`RollingBack`) or an abort (`Aborting`) is
//!    stored, unpins whatever port it concerns that still is.
//!
//! An edit while a rollout is under way waits for it to finish (complete, rolled
//! back or aborted); the newest spec then rolls out from the current revision.
//!
//! A SmartNicConfiguration's rollout is the same over its SmartNicPorts, with a
//! SmartNIC (the port's ProviderSwitch) where a SwitchPortConfiguration's has a
//! Switch: waves spread over SmartNICs, `maxUnavailablePerSwitch` bounds each one,
//! `status.rollout.switches` counts them. A SmartNicPort reads back Active only when
//! its bridge port and, where chained, its next SwitchPort both carry what the
//! revision says, so a revision that changes `nextConfigurationRef` moves the next
//! port in the same wave and puts it back with a rollback. Its gates are the ports'
//! read-back, Node Ready and the HTTP probe (the BGP and NeighborSeen gates read a
//! Switch's status: a SmartNIC has none); an Open vSwitch holds no change for a
//! gate, so a rollback re-applies the previous revision and reads it back.
//!
//! A Switch's rollout is the same over its SwitchPorts, with its own pin
//! ([`SWITCH_ROLLOUT_ANNOTATION`]: a port may be in its configuration's rollout and
//! its Switch's at once) and revisions of `spec.ports`. A port is on the update
//! revision once Active with that revision's entry applied (`status.entryHash`);
//! the rollout writes only `status.rollout` of the Switch (a merge: the rest is the
//! Switch controller's), and a settled one keeps the counts it stored, since each
//! Switch status write wakes every port of the Switch.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use crate::decide::status::Severity;
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::core::NamespaceResourceScope;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use serde_json::json;

use super::ControllerError;
use super::context::Context;
use crate::api::keys::{
    BGP_READ_AFTER_ANNOTATION, CONFIGURATION_KIND_LABEL, CONFIGURATION_LABEL, HOST_ANNOTATION,
    MANAGER, NEIGHBORS_READ_AFTER_ANNOTATION, REVISION_HISTORY, ROLLOUT_ANNOTATION,
    ROLLOUT_SEEN_ANNOTATION, SWITCH_ROLLOUT_ANNOTATION, SWITCH_ROLLOUT_SEEN_ANNOTATION,
};
use crate::api::{
    CabledPortKind, ConfigurationRef, ConfigurationStatus, PortState, PortStatus, Revisioned,
    RolloutStatus, SmartNicConfiguration, SmartNicPort, Switch, SwitchPort,
    SwitchPortConfiguration, SwitchPortDefinition,
};
use crate::decide::conditions::{Truth, set_condition};
use crate::decide::rollout::{
    self as decide, PortFacts, Progress, Seen, Signal, Step, pin, revision_name, rollout_of,
};
use patchbay_providers::Settled;

mod probe;

/// The rollout controller's context: the shared one, and its own state.
pub struct RolloutContext {
    /// What every controller shares.
    pub shared: Arc<Context>,
    /// What each host probed for `spec.rollout.probe` answered.
    pub probes: probe::ProbeBook,
    /// The pins this process wrote lately.
    pub pins: RecentPins,
    /// The BareMetalHost cache (empty without Metal3): a BareMetalHost host's MACs,
    /// for the NeighborSeen gate.
    pub hosts: kube::runtime::reflector::Store<crate::api::metal3::BareMetalHost>,
}

/// The pins this process wrote lately, by port (`namespace/name`): the port cache
/// shows a pin a moment after its patch, and a look in between would write it
/// again (1-4 % of a 10,000-port rollout's pins were such repeats). A pin counts as
/// written for 30 s; a port whose cache still lacks it then (its
/// annotation removed by hand) is pinned again.
#[derive(Default)]
pub struct RecentPins(
    parking_lot::Mutex<std::collections::HashMap<String, (String, std::time::Instant)>>,
);

impl RecentPins {
    /// How long a written pin counts as written without the cache showing it.
    const FRESH: Duration = Duration::from_secs(30);

    /// Notes `pin` written on `ports`.
    fn wrote(&self, ports: &[(String, Option<&str>)], pin: &str) {
        let now = std::time::Instant::now();
        let mut pins = self.0.lock();
        pins.retain(|_, (_, at)| at.elapsed() < Self::FRESH);
        for (key, _) in ports {
            pins.insert(key.clone(), (pin.to_owned(), now));
        }
    }

    /// Whether this process wrote `pin` on `port` lately.
    fn lately(&self, port: &str, pin: &str) -> bool {
        self.0
            .lock()
            .get(port)
            .is_some_and(|(p, at)| p == pin && at.elapsed() < Self::FRESH)
    }
}

/// Phases of `status.rollout.phase`.
pub mod phase {
    /// Waves under way.
    pub const PROGRESSING: &str = "Progressing";
    /// Held between waves.
    pub const PAUSED: &str = "Paused";
    /// Every port on the update revision.
    pub const COMPLETE: &str = "Complete";
    /// A gate failed; the failed wave's ports are being put back.
    pub const ROLLING_BACK: &str = "RollingBack";
    /// A gate failed; the failed wave went back.
    pub const ROLLED_BACK: &str = "RolledBack";
    /// Aborted; every port moved is being put back.
    pub const ABORTING: &str = "Aborting";
    /// Aborted: every port moved went back.
    pub const ABORTED: &str = "Aborted";
    /// The policy asks for more than the infra team allows.
    pub const REFUSED: &str = "Refused";
}

/// A port carrying the configuration, as the rollout reads it.
pub struct Carrier {
    key: String,
    switch: String,
    pinned: Option<String>,
    state: Option<PortState>,
    /// Whether what it applied is the update revision's (its kind says how:
    /// [`Rolled::carriers`]).
    on_update: bool,
    failed_at: Option<i64>,
    /// Its last attempt's key (`status.lastAttempt`): the pins it was made under.
    attempt: Option<String>,
    /// When its state last changed (Unix seconds).
    since: Option<i64>,
    host: Option<String>,
    bgp: Option<Signal>,
    /// How its host's NIC showed on it before its pin moved it
    /// ([`ROLLOUT_SEEN_ANNOTATION`]).
    seen_before: Option<String>,
}

/// The BGP signal of the port `name` on `switch`: where the Switch speaks BGP to
/// hosts on that port, whether each of its sessions is Established, as the
/// speaker's last read written in the Switch's status says.
fn bgp_signal(switch: Option<&Switch>, name: &str) -> Option<Signal> {
    let switch = switch?;
    let hold = switch.spec.bgp.as_ref()?.hold_seconds.unwrap_or(90);
    let status = switch.status.as_ref()?.bgp.as_ref()?;
    let sessions: Vec<_> = status
        .neighbors
        .iter()
        .filter(|n| n.switch_port == name)
        .collect();
    if sessions.is_empty() {
        return None;
    }
    Some(Signal {
        healthy: sessions.iter().all(|n| n.state == "Established"),
        observed_at: status
            .read_at
            .as_deref()
            .and_then(|t| t.parse::<jiff::Timestamp>().ok())
            .map(|t| t.as_second()),
        settle: hold + 1,
    })
}

impl Carrier {
    /// The port `key` on `switch` as its annotations (`annotation`: the pin and what
    /// it saw are the rollout kind `C`'s) and status show it, with its BGP signal
    /// and whether it applied the update revision (`on_update`).
    fn new<'a, C: Rolled>(
        key: String,
        switch: String,
        annotation: impl Fn(&str) -> Option<&'a str>,
        status: Option<&PortStatus>,
        bgp: Option<Signal>,
        on_update: bool,
    ) -> Carrier {
        Carrier {
            key,
            switch,
            bgp,
            pinned: annotation(C::PIN).map(str::to_owned),
            state: status.and_then(|s| s.state),
            on_update,
            // A failure that is not the change's (a lock another session holds,
            // the switch away) does not fail the wave: it waits.
            failed_at: status
                .filter(|s| {
                    crate::decide::status::find_condition(&s.conditions, "Ready")
                        .is_none_or(|c| decide::fails_the_wave(&c.reason))
                })
                .and_then(|s| s.last_failure_time.as_ref())
                .map(|t| t.0.as_second()),
            attempt: status.and_then(|s| s.last_attempt.clone()),
            since: status
                .and_then(|s| s.last_transition_time.as_ref())
                .map(|t| t.0.as_second()),
            host: annotation(HOST_ANNOTATION).map(str::to_owned),
            seen_before: annotation(C::SEEN).map(str::to_owned),
        }
    }
}

/// Whether a port's `spec.configuration` (`reference`, of a port in `port_ns`)
/// names `ns/name`.
fn names(reference: Option<&ConfigurationRef>, port_ns: &str, ns: &str, name: &str) -> bool {
    reference.is_some_and(|r| r.name == name && r.namespace.as_deref().unwrap_or(port_ns) == ns)
}

/// A configuration whose edits roll out, and the ports that carry it: what this
/// controller needs of each kind.
pub trait Rolled:
    Revisioned
    + Resource<Scope = NamespaceResourceScope>
    + std::fmt::Debug
    + serde::Serialize
    + serde::de::DeserializeOwned
    + Send
    + Sync
    + 'static
{
    /// The ports carrying it.
    type Port: Pinned;
    /// Their kind: only SwitchPorts are on a Switch (BGP, neighbours, a change held
    /// on the device).
    const PORTS: CabledPortKind;
    /// The annotation that pins a port to a wave of this kind's rollouts.
    const PIN: &'static str;
    /// The annotation a pin writes with it: how the port's host showed before.
    const SEEN: &'static str;
    /// Whether the rollout owns the object's status (`conditions`,
    /// `observedGeneration` besides `rollout`); a Switch's is the Switch
    /// controller's, and the rollout writes only `status.rollout` there.
    const OWNS_STATUS: bool;
    /// The ports its rollout at `r` reaches, from the caches, in any order (the
    /// controller orders them by key), each saying whether it applied `r`'s update
    /// revision. `Err`: a revision it needs is not in the cache yet.
    fn carriers(
        &self,
        ctx: &Context,
        r: Option<&RolloutStatus>,
    ) -> Result<Vec<Carrier>, ControllerError>;
    /// Whether its waves take whole switches (a link-aggregation group's members
    /// change together), as it stands or as its current revision was.
    fn whole_switches(&self, ctx: &Context) -> bool;
    /// Its status as the rollout keeps it.
    fn status_view(&self) -> ConfigurationStatus;
    /// Whether its rollout policy is a tenant's (bounded by the infra team's
    /// limits): a configuration outside the infra namespace with tenancy on.
    fn tenant_owned(&self, ctx: &Context) -> bool {
        let ns = self.namespace().unwrap_or_default();
        ctx.settings
            .tenancy
            .as_ref()
            .is_some_and(|t| t.infra_namespace != ns)
    }
}

/// Whether a port's applied configuration hash is `r`'s update revision's.
fn applied_update(status: Option<&PortStatus>, r: Option<&RolloutStatus>) -> bool {
    r.is_some_and(|r| {
        is_revision(
            status.and_then(|s| s.configuration_hash.as_deref()),
            &r.update_revision,
        )
    })
}

impl Rolled for SwitchPortConfiguration {
    type Port = SwitchPort;
    const PORTS: CabledPortKind = CabledPortKind::SwitchPort;
    const PIN: &'static str = ROLLOUT_ANNOTATION;
    const SEEN: &'static str = ROLLOUT_SEEN_ANNOTATION;
    const OWNS_STATUS: bool = true;

    fn carriers(
        &self,
        ctx: &Context,
        r: Option<&RolloutStatus>,
    ) -> Result<Vec<Carrier>, ControllerError> {
        let (ns, name) = (self.namespace().unwrap_or_default(), self.name_any());
        Ok(ctx
            .ports
            .0
            .state()
            .iter()
            .filter(|p| {
                p.configuration()
                    .is_some_and(|(n, in_ns)| n == name && in_ns.unwrap_or(p.namespace()) == ns)
            })
            .map(|p| {
                let port = p.to_port();
                let switch = super::switch_port::switch_name(&port, &ctx.port_index);
                let bgp = bgp_signal(
                    switch
                        .as_deref()
                        .and_then(|s| ctx.stores.switch(p.namespace(), s))
                        .as_deref(),
                    p.name(),
                );
                let status = p.status();
                Carrier::new::<Self>(
                    format!("{}/{}", p.namespace(), p.name()),
                    switch
                        .map(|s| format!("{}/{s}", p.namespace()))
                        .unwrap_or_default(),
                    |k| p.annotation(k),
                    status.as_ref(),
                    bgp,
                    applied_update(status.as_ref(), r),
                )
            })
            .collect())
    }

    fn whole_switches(&self, ctx: &Context) -> bool {
        let (ns, name) = (self.namespace().unwrap_or_default(), self.name_any());
        let current = ctx
            .stores
            .configuration_carried(&ns, &name, None)
            .ok()
            .flatten();
        self.spec.link_aggregation.is_some()
            || current.is_some_and(|c| c.spec.link_aggregation.is_some())
    }

    fn status_view(&self) -> ConfigurationStatus {
        self.status.clone().unwrap_or_default()
    }
}

impl Rolled for SmartNicConfiguration {
    type Port = SmartNicPort;
    const PORTS: CabledPortKind = CabledPortKind::SmartNicPort;
    const PIN: &'static str = ROLLOUT_ANNOTATION;
    const SEEN: &'static str = ROLLOUT_SEEN_ANNOTATION;
    const OWNS_STATUS: bool = true;

    /// Each SmartNicPort's "switch" is its SmartNIC: its ProviderSwitch.
    fn carriers(
        &self,
        ctx: &Context,
        r: Option<&RolloutStatus>,
    ) -> Result<Vec<Carrier>, ControllerError> {
        let (ns, name) = (self.namespace().unwrap_or_default(), self.name_any());
        Ok(ctx
            .stores
            .smartnics
            .state()
            .iter()
            .filter(|p| {
                let port_ns = p.namespace().unwrap_or_default();
                names(p.spec.configuration.as_ref(), &port_ns, &ns, &name)
            })
            .map(|p| {
                let port_ns = p.namespace().unwrap_or_default();
                Carrier::new::<Self>(
                    format!("{port_ns}/{}", p.name_any()),
                    format!("{port_ns}/{}", p.spec.provider.name),
                    |k| p.annotations().get(k).map(String::as_str),
                    p.status.as_ref(),
                    None,
                    applied_update(p.status.as_ref(), r),
                )
            })
            .collect())
    }

    fn whole_switches(&self, _: &Context) -> bool {
        false
    }

    fn status_view(&self) -> ConfigurationStatus {
        self.status.clone().unwrap_or_default()
    }
}

/// A Switch's port entries: an edit of `spec.ports` reaches, in waves, the ports
/// that carry a configuration and whose entry the edit changes (a port carrying
/// nothing takes its entry at once). A port is on the update revision once it
/// applied that revision's entry (`status.entryHash`). The Switch controller owns
/// the rest of the Switch's status.
impl Rolled for Switch {
    type Port = SwitchPort;
    const PORTS: CabledPortKind = CabledPortKind::SwitchPort;
    const PIN: &'static str = SWITCH_ROLLOUT_ANNOTATION;
    const SEEN: &'static str = SWITCH_ROLLOUT_SEEN_ANNOTATION;
    const OWNS_STATUS: bool = false;

    fn carriers(
        &self,
        ctx: &Context,
        r: Option<&RolloutStatus>,
    ) -> Result<Vec<Carrier>, ControllerError> {
        let ns = self.namespace().unwrap_or_default();
        let switch = format!("{ns}/{}", self.name_any());
        // Each revision's entries, from its stored spec (the live spec for the
        // revision that is the spec as it stands).
        let live = revision_name(&self.name_any(), &self.content_hash());
        let entries =
            |revision: &str| -> Result<BTreeMap<String, SwitchPortDefinition>, ControllerError> {
                if revision == live {
                    return Ok(self.spec.ports.clone());
                }
                let stored = ctx
                    .stores
                    .revisions
                    .get(&ObjectRef::new(revision).within(&ns))
                    .ok_or_else(|| {
                        ControllerError::Waiting(format!(
                            "revision {revision} of Switch {switch} is not in the cache yet"
                        ))
                    })?;
                Ok(stored
                    .data
                    .0
                    .get("ports")
                    .cloned()
                    .and_then(|p| serde_json::from_value(p).ok())
                    .unwrap_or_default())
            };
        let (current, update) = match r {
            Some(r) => (entries(&r.current_revision)?, entries(&r.update_revision)?),
            None => (self.spec.ports.clone(), self.spec.ports.clone()),
        };
        let settled = r.is_none_or(|r| r.current_revision == r.update_revision);
        let port_part = |e: Option<&SwitchPortDefinition>| e.map(SwitchPortDefinition::port_part);
        Ok(self
            .spec
            .ports
            .keys()
            .filter(|key| {
                // Settled: every port carrying something counts; under way, those
                // whose entry the update revision changes.
                settled || port_part(current.get(*key)) != port_part(update.get(*key))
            })
            .filter_map(|key| {
                let p = ctx.ports.record(&ObjectRef::new(key).within(&ns))?;
                p.configuration()?;
                let status = p.status();
                let wanted = update
                    .get(key)
                    .or_else(|| self.spec.ports.get(key))
                    .map(SwitchPortDefinition::entry_hash);
                let on_update = wanted.is_some()
                    && status.as_ref().and_then(|s| s.entry_hash.clone()) == wanted;
                Some(Carrier::new::<Self>(
                    format!("{ns}/{key}"),
                    switch.clone(),
                    |k| p.annotation(k),
                    status.as_ref(),
                    bgp_signal(Some(self), key),
                    on_update,
                ))
            })
            .collect())
    }

    /// A link-aggregation group's members change together: any port of the Switch
    /// carrying a configuration with link aggregation makes the waves whole
    /// switches (this one: the whole edit in one wave).
    fn whole_switches(&self, ctx: &Context) -> bool {
        let ns = self.namespace().unwrap_or_default();
        self.spec.ports.keys().any(|key| {
            ctx.ports
                .record(&ObjectRef::new(key).within(&ns))
                .and_then(|p| {
                    let (name, in_ns) = p.configuration()?;
                    ctx.stores.configuration(in_ns.unwrap_or(&ns), name)
                })
                .is_some_and(|c| c.spec.link_aggregation.is_some())
        })
    }

    fn status_view(&self) -> ConfigurationStatus {
        ConfigurationStatus {
            rollout: self.status.as_ref().and_then(|s| s.rollout.clone()),
            ..ConfigurationStatus::default()
        }
    }

    /// A Switch is the infra team's.
    fn tenant_owned(&self, _: &Context) -> bool {
        false
    }
}

/// The ports `config`'s rollout at `r` reaches, from the cache, in key order: what
/// one look of its rollout reads.
fn carriers<C: Rolled>(
    ctx: &Context,
    config: &C,
    r: Option<&RolloutStatus>,
) -> Result<Vec<Carrier>, ControllerError> {
    let mut out = config.carriers(ctx, r)?;
    out.sort_by(|a, b| a.key.cmp(&b.key));
    Ok(out)
}

/// Whether a content hash is the one a revision is named by.
fn is_revision(hash: Option<&str>, revision: &str) -> bool {
    let suffix = revision.rsplit('-').next().unwrap_or_default();
    hash.is_some_and(|h| !suffix.is_empty() && h.starts_with(suffix))
}

/// Keeps a configuration's rollout going: see the module doc.
pub async fn reconcile<C: Rolled>(
    config: Arc<C>,
    rc: Arc<RolloutContext>,
) -> Result<Action, ControllerError> {
    let ctx = rc.shared.clone();
    if config.meta().deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let ns = config.namespace().unwrap_or_default();
    let name = config.name_any();
    let now = jiff::Timestamp::now();
    let old = config.status_view();
    let mut status = old.clone();
    let spec_revision = revision_name(&name, &config.content_hash());
    // A Switch is looked at on each of its events (its neighbour and BGP reads write
    // its status): a settled rollout with no new edit has nothing to do, and its
    // ports are not read (a hash of each configured port's entry).
    if !C::OWNS_STATUS
        && old.rollout.as_ref().is_some_and(|r| {
            r.update_revision == spec_revision
                && matches!(
                    r.phase.as_str(),
                    phase::COMPLETE | phase::ROLLED_BACK | phase::ABORTED
                )
        })
    {
        return Ok(Action::await_change());
    }
    // Read once a look; again only after this look unpinned ports or started a
    // rollout.
    let mut ports = carriers(&ctx, config.as_ref(), old.rollout.as_ref())?;
    let mut wait = None;
    let mut event = None;
    match status.rollout.as_mut() {
        // First sight: the spec as it stands is the current revision.
        None => {
            let number = ensure_revision(&ctx, config.as_ref(), &spec_revision, None).await?;
            status.rollout = Some(RolloutStatus {
                current_revision: spec_revision.clone(),
                current_revision_number: number,
                update_revision: spec_revision,
                update_revision_number: number,
                attempt: 0,
                phase: phase::COMPLETE.into(),
                ..RolloutStatus::default()
            });
        }
        Some(r) => {
            // Put back what a stored rollback or abort has not put back yet.
            if let Some((done, wave)) = match r.phase.as_str() {
                phase::ROLLING_BACK => Some((phase::ROLLED_BACK, Some(r.wave))),
                phase::ABORTING => Some((phase::ABORTED, None)),
                _ => None,
            } {
                let token = pin(r, r.wave);
                let mut back = Vec::new();
                let mut switches = BTreeSet::new();
                for p in &ports {
                    let by = decide::moved_by(p.pinned.as_deref(), r);
                    if p.pinned.as_deref() == Some(token.as_str()) {
                        switches.insert(p.switch.clone());
                    }
                    if by.is_some() && (wave.is_none() || by == wave) {
                        back.push(p.key.clone());
                    }
                }
                // The last wave was held on its devices: they take it back (one
                // that cannot hold, or no longer does, gets the previous revision
                // applied again and read back: the unpin).
                for (switch, settled) in settle_wave::<C>(&ctx, &switches, &token, false).await {
                    if let Err(e) = settled {
                        tracing::warn!(switch = %switch, token = %token, error = %e, "a held wave not cancelled; its device takes it back at its timeout, and the previous revision is applied again");
                    }
                }
                unpin::<C>(&ctx, &back).await?;
                ports = carriers(&ctx, config.as_ref(), Some(&*r))?;
                r.phase = done.into();
                r.wave_committed_at = None;
            }
            let settled = matches!(
                r.phase.as_str(),
                phase::COMPLETE | phase::ROLLED_BACK | phase::ABORTED | phase::REFUSED
            );
            if settled && spec_revision != r.update_revision {
                // A new edit: a new rollout from the current revision.
                let number =
                    ensure_revision(&ctx, config.as_ref(), &spec_revision, Some(r)).await?;
                r.update_revision = spec_revision.clone();
                r.update_revision_number = number;
                r.attempt += 1;
                r.phase = phase::PROGRESSING.into();
                r.wave = 0;
                r.wave_committed_at = None;
                r.message.clear();
                prune_revisions::<C>(&ctx, &ns, &name, r).await;
                ports = carriers(&ctx, config.as_ref(), Some(&*r))?;
            }
            if matches!(
                r.phase.as_str(),
                phase::PROGRESSING | phase::PAUSED | phase::REFUSED
            ) {
                let (w, e) = advance(&rc, config.as_ref(), &ports, r, now).await?;
                wait = w;
                event = e;
            }
            if spec_revision != r.update_revision
                && matches!(r.phase.as_str(), phase::PROGRESSING | phase::PAUSED)
            {
                r.message = format!(
                    "{} (the spec was edited again: its revision rolls out once this one is done)",
                    r.message
                );
            }
        }
    }
    let r = status.rollout.as_ref().expect("set above");
    // A Switch's status write wakes each of its ports: a settled rollout that this
    // look left as it was keeps the counts it stored (they were right when it
    // settled; a restart writes nothing).
    let keep_counts = !C::OWNS_STATUS
        && old.rollout.as_ref() == Some(r)
        && matches!(
            r.phase.as_str(),
            phase::COMPLETE | phase::ROLLED_BACK | phase::ABORTED | phase::REFUSED
        );
    if !keep_counts {
        let counts = counts(&ports, r);
        let r = status.rollout.as_mut().expect("set above");
        (r.ports, r.updated_ports, r.switches) = counts;
    }
    if C::OWNS_STATUS {
        set_conditions(&mut status, config.meta().generation, now);
        status.observed_generation = config.meta().generation;
    }
    if status != old {
        let api: Api<C> = Api::namespaced(ctx.client.clone(), &ns);
        // A Switch's status is its controller's but for `rollout`.
        let patch = if C::OWNS_STATUS {
            json!({"status": status})
        } else {
            json!({"status": {"rollout": status.rollout}})
        };
        api.patch_status(&name, &PatchParams::default(), &Patch::Merge(patch))
            .await?;
    }
    if let Some((severity, reason, note)) = event {
        ctx.events
            .publish(config.as_ref(), severity, reason, &note)
            .await;
    }
    Ok(match wait {
        Some(after) => Action::requeue(after),
        None => Action::await_change(),
    })
}

/// What happened that an Event reports.
type Reported = Option<(Severity, &'static str, String)>;

/// One step of the rollout `r` (Progressing or Paused), done: see the module doc.
/// Returns when to look again, and what to report.
async fn advance<C: Rolled>(
    rc: &RolloutContext,
    config: &C,
    ports: &[Carrier],
    r: &mut RolloutStatus,
    now: jiff::Timestamp,
) -> Result<(Option<Duration>, Reported), ControllerError> {
    let (ctx, probes, pins, hosts) = (rc.shared.as_ref(), &rc.probes, &rc.pins, &rc.hosts);
    let spec = config.policy();
    if spec.and_then(|s| s.abort_revision) == Some(r.update_revision_number) {
        let moved = ports
            .iter()
            .filter(|p| decide::moved_by(p.pinned.as_deref(), r).is_some())
            .count();
        r.message = format!(
            "revision {} aborted (spec.rollout.abortRevision): {moved} port(s) it had reached go back to revision {}",
            r.update_revision_number, r.current_revision_number
        );
        r.phase = phase::ABORTING.into();
        r.wave_committed_at = None;
        return Ok((
            Some(Duration::ZERO),
            Some((Severity::Warning, "RolloutAborted", r.message.clone())),
        ));
    }
    let tenant = config.tenant_owned(ctx);
    let rollout = match rollout_of(spec, &ctx.settings.rollout, tenant, ports.len()) {
        Ok(mut rollout) => {
            // A link-aggregation group's members change together.
            rollout.whole_switches = config.whole_switches(ctx);
            rollout
        }
        Err(refused) => {
            let why: Vec<String> = refused.iter().map(|(f, w)| format!("{f}: {w}")).collect();
            r.message = format!("nothing moved: {}", why.join("; "));
            let was = std::mem::replace(&mut r.phase, phase::REFUSED.into());
            let event = (was != phase::REFUSED)
                .then(|| (Severity::Warning, "RolloutRefused", r.message.clone()));
            return Ok((None, event));
        }
    };
    // The wave's pin (judged only while it is under way).
    let token = pin(r, r.wave);
    let mut facts: Vec<PortFacts<'_>> = ports
        .iter()
        .map(|p| PortFacts {
            key: &p.key,
            switch: &p.switch,
            moved: decide::moved_by(p.pinned.as_deref(), r),
            active_on_update: (p.state == Some(PortState::Active) && p.on_update)
                .then(|| p.since.unwrap_or(0)),
            failed_at: p.failed_at,
            failed_in_wave: decide::attempted_under(p.attempt.as_deref(), &token),
            bgp: p.bgp,
            node: None,
            neighbor: None,
            probe: None,
        })
        .collect();
    let committed_at = committed_at_of(r).map(|t| t.as_second());
    let progress = Progress {
        wave: r.wave,
        committed_at,
    };
    let mut members = Vec::new();
    if committed_at.is_some() {
        // The wave under way: pin whatever of it is not pinned yet (all of it
        // after the commit; the rest after a process killed mid-commit), a switch
        // at a time so that each switch's worker batches its ports of the wave.
        members = decide::wave_members(&rollout, &progress, &facts);
        let seen_now = match C::PORTS {
            CabledPortKind::SwitchPort => read_neighbors(ctx, hosts, ports, &members, &mut facts),
            CabledPortKind::SmartNicPort => BTreeMap::new(),
        };
        let mut unpinned: Vec<usize> = members
            .iter()
            .copied()
            .filter(|i| facts[*i].moved != Some(r.wave))
            .filter(|i| !pins.lately(&ports[*i].key, &token))
            .collect();
        if !unpinned.is_empty() {
            unpinned.sort_by(|a, b| {
                (&ports[*a].switch, &ports[*a].key).cmp(&(&ports[*b].switch, &ports[*b].key))
            });
            let keys: Vec<(String, Option<&str>)> = unpinned
                .iter()
                .map(|i| {
                    let seen = seen_now.get(i).and_then(|s| s.annotation());
                    (ports[*i].key.clone(), seen)
                })
                .collect();
            pin_ports::<C>(ctx, &keys, &token).await?;
            pins.wrote(&keys, &token);
        }
        for (annotation, of) in [
            (BGP_READ_AFTER_ANNOTATION, decide::BGP),
            (NEIGHBORS_READ_AFTER_ANNOTATION, decide::NEIGHBOR),
        ] {
            let wanted = decide::read_after(&progress, &facts, &members, of);
            ask_for_evidence(ctx, annotation, wanted).await?;
        }
        if let Some(grace) = ctx.settings.rollout.node_grace_seconds {
            read_nodes(ctx, ports, &members, &mut facts, grace, now).await?;
        }
        if let Some(p) = decide::probe_of(spec) {
            let probed: Vec<usize> = members
                .iter()
                .copied()
                .filter(|i| ports[*i].host.is_some())
                .collect();
            let targets: Vec<probe::Target<'_>> = probed
                .iter()
                .map(|i| probe::Target {
                    port: &ports[*i].key,
                    host: ports[*i].host.as_deref().unwrap_or_default(),
                    landed: decide::landed_at(&facts[*i], &progress),
                })
                .collect();
            let shown = probes
                .probe(ctx, &p, &token, &targets, now.as_second())
                .await;
            for (i, s) in probed.iter().zip(shown) {
                facts[*i].probe = Some(s.signal(&p));
            }
        }
    }
    let paused = spec.is_some_and(|s| s.paused);
    let mut step = decide::step(now.as_second(), &rollout, &progress, &facts, paused);
    if step == Step::Passed {
        // Passed: the change held on the wave's devices is confirmed; a device that
        // took it back by itself fails the wave.
        let switches: BTreeSet<String> = members.iter().map(|i| ports[*i].switch.clone()).collect();
        let mut gone = Vec::new();
        for (switch, settled) in settle_wave::<C>(ctx, &switches, &token, true).await {
            match settled? {
                Settled::Gone(why) => gone.push(format!("{switch} ({why})")),
                Settled::Confirmed | Settled::Cancelled | Settled::NeverHeld => {}
            }
        }
        if !gone.is_empty() {
            step = Step::RollBack {
                gate: decide::gate::DEVICE_HELD,
                message: format!(
                    "the device no longer held wave {}'s change when its gates passed (it took it back by itself): {}",
                    r.wave,
                    gone.join(", ")
                ),
            };
        }
    }
    if matches!(step, Step::Passed | Step::RollBack { .. }) {
        // The wave is judged: what its hosts answered is of no more use.
        let keys: Vec<&str> = members.iter().map(|i| ports[*i].key.as_str()).collect();
        probes.forget(&keys);
    }
    let mut report = None;
    let look = match step {
        Step::Commit => {
            r.wave += 1;
            r.phase = phase::PROGRESSING.into();
            r.message = format!(
                "wave {} committed: moving to revision {}",
                r.wave, r.update_revision_number
            );
            r.wave_committed_at = Some(now.to_string());
            // The wave is stored (the caller writes the status) before any port
            // is pinned: the next look pins it.
            Some(Duration::ZERO)
        }
        Step::Wait { after, message } => {
            r.phase = phase::PROGRESSING.into();
            r.message = message;
            Some(Duration::from_secs(after.max(1) as u64))
        }
        Step::Passed => {
            r.message = format!("wave {} passed its gates", r.wave);
            r.wave_committed_at = None;
            Some(Duration::ZERO)
        }
        Step::Paused => {
            r.phase = phase::PAUSED.into();
            r.message = format!("paused after wave {} (spec.rollout.paused)", r.wave);
            None
        }
        Step::Complete => {
            r.phase = phase::COMPLETE.into();
            r.current_revision = r.update_revision.clone();
            r.current_revision_number = r.update_revision_number;
            r.message = format!(
                "revision {} on all {} port(s)",
                r.update_revision_number,
                ports.len()
            );
            r.wave_committed_at = None;
            report = Some((Severity::Normal, "RolloutComplete", r.message.clone()));
            None
        }
        Step::RollBack { gate, message } => {
            let keys: Vec<&str> = members.iter().map(|i| ports[*i].key.as_str()).collect();
            let hosts: BTreeSet<&str> = members
                .iter()
                .filter_map(|i| ports[*i].host.as_deref())
                .collect();
            let hosts: Vec<&str> = hosts.into_iter().collect();
            r.phase = phase::ROLLING_BACK.into();
            r.message = format!(
                "gate {gate} failed: {message}; wave {} ({}) goes back to revision {}{}",
                r.wave,
                decide::some_of(&keys),
                r.current_revision_number,
                if hosts.is_empty() {
                    String::new()
                } else {
                    format!("; hosts {}", decide::some_of(&hosts))
                }
            );
            r.wave_committed_at = None;
            report = Some((Severity::Warning, "RolledBack", r.message.clone()));
            Some(Duration::ZERO)
        }
    };
    Ok((look, report))
}

/// When the wave under way was committed.
fn committed_at_of(r: &RolloutStatus) -> Option<jiff::Timestamp> {
    r.wave_committed_at.as_deref().and_then(|t| t.parse().ok())
}

/// The Node Ready gate's signals (`--rollout-node-grace-seconds`): the wave's
/// hosts that are Kubernetes Nodes ([`decide::node_host`]), each Ready or not as
/// one LIST of the Nodes read now (the API server's cache: `resourceVersion=0`).
/// Only while a wave with hosts is under way.
async fn read_nodes(
    ctx: &Context,
    ports: &[Carrier],
    members: &[usize],
    facts: &mut [PortFacts<'_>],
    grace: i64,
    now: jiff::Timestamp,
) -> Result<(), ControllerError> {
    if !members.iter().any(|i| ports[*i].host.is_some()) {
        return Ok(());
    }
    let nodes = Api::<Node>::all(ctx.client.clone())
        .list(&ListParams::default().match_any())
        .await?;
    let no_labels = BTreeMap::new();
    let ready: BTreeMap<String, bool> = nodes
        .items
        .iter()
        .filter_map(|n| {
            let host = decide::node_host(
                n.metadata.labels.as_ref().unwrap_or(&no_labels),
                n.spec.as_ref().and_then(|s| s.provider_id.as_deref()),
            )?;
            let is_ready = n
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
                .is_some_and(|c| c.status == "True");
            Some((host, is_ready))
        })
        .collect();
    for i in members {
        if let Some(healthy) = ports[*i].host.as_ref().and_then(|h| ready.get(h)) {
            facts[*i].node = Some(Signal {
                healthy: *healthy,
                observed_at: Some(now.as_second()),
                settle: decide::node_settle(grace),
            });
        }
    }
    Ok(())
}

/// The NeighborSeen gate's signals, from the caches: for each port of the wave
/// (`members`) whose Switch reads neighbours and whose host is known by its MACs —
/// a Server declaring the MAC of its NIC on the port, or a BareMetalHost (in
/// `hosts`: every MAC it declares or its inspection reports, the NIC on the port not
/// told apart) — how the host shows on the port in the Switch's status now, and the
/// signal that and what the port's pin recorded before it moved give
/// ([`decide::neighbor_signal`]). Returns how each shows now: what pinning a port
/// records.
fn read_neighbors(
    ctx: &Context,
    hosts: &kube::runtime::reflector::Store<crate::api::metal3::BareMetalHost>,
    ports: &[Carrier],
    members: &[usize],
    facts: &mut [PortFacts<'_>],
) -> BTreeMap<usize, Seen> {
    let mut out = BTreeMap::new();
    for i in members {
        let p = &ports[*i];
        let (Some((ns, name)), Some((switch_ns, switch_name))) =
            (p.key.split_once('/'), p.switch.split_once('/'))
        else {
            continue;
        };
        let Some(switch) = ctx.stores.switch(switch_ns, switch_name) else {
            continue;
        };
        let Some(spec) = switch.spec.neighbors.as_ref() else {
            continue;
        };
        // The NIC's MAC (a Server's), and every MAC of the host.
        let (nic, host_macs): (Option<String>, Vec<String>) = match p.host.as_deref() {
            Some(h) if h.starts_with("Server/") => {
                let Some(server) = ctx
                    .stores
                    .servers
                    .get(&ObjectRef::new(h.trim_start_matches("Server/")))
                else {
                    continue;
                };
                let nics = &server.spec.nics;
                let Some(mac) =
                    crate::decide::phases::cabled_nic(nics, CabledPortKind::SwitchPort, ns, name)
                        .and_then(|n| n.mac.clone())
                else {
                    continue;
                };
                let all = std::iter::once(server.spec.boot_mac.clone())
                    .chain(nics.iter().filter_map(|n| n.mac.clone()))
                    .collect();
                (Some(mac), all)
            }
            Some(h) if h.starts_with("BareMetalHost/") => {
                let Some((host_ns, host_name)) =
                    h.trim_start_matches("BareMetalHost/").split_once('/')
                else {
                    continue;
                };
                let Some(host) = hosts.get(&ObjectRef::new(host_name).within(host_ns)) else {
                    continue;
                };
                (None, crate::decide::metal3_host::host_macs(&host, None))
            }
            _ => continue,
        };
        if host_macs.is_empty() {
            continue;
        }
        let host_macs: Vec<&str> = host_macs.iter().map(String::as_str).collect();
        let status = switch.status.as_ref();
        let entry = status.and_then(|s| {
            s.neighbors
                .iter()
                .find(|n| n.switch_port.as_deref() == Some(name))
        });
        let now = match nic.as_deref() {
            Some(mac) => Seen::on(entry, mac, &host_macs),
            None => Seen::of_host(entry, &host_macs),
        };
        let read_at = status
            .and_then(|s| s.neighbors_read_at.as_deref())
            .and_then(|t| t.parse::<jiff::Timestamp>().ok())
            .map(|t| t.as_second());
        facts[*i].neighbor = decide::neighbor_signal(
            Seen::parse(p.seen_before.as_deref()),
            now,
            read_at,
            crate::decide::neighbors::age_out(spec),
        );
        out.insert(*i, now);
    }
    out
}

/// Asks each Switch whose read is a host of the wave's evidence (BGP: its speaker,
/// [`BGP_READ_AFTER_ANNOTATION`]; neighbours: its sources,
/// [`NEIGHBORS_READ_AFTER_ANNOTATION`]) for a read late enough to be it: when the
/// last of its hosts' ports went Active on the update revision, plus the signal's
/// settle time ([`decide::read_after`]). Patched only when the Switch does not
/// already ask for that time: a wave's look writes a Switch at most once per second
/// its ports landed in.
async fn ask_for_evidence(
    ctx: &Context,
    annotation: &str,
    wanted: BTreeMap<&str, i64>,
) -> Result<(), ControllerError> {
    for (switch, after) in wanted {
        let Some((ns, name)) = switch.split_once('/') else {
            continue;
        };
        let Ok(after) = jiff::Timestamp::from_second(after) else {
            continue;
        };
        let asked = ctx.stores.switch(ns, name).and_then(|s| {
            s.annotations()
                .get(annotation)
                .and_then(|t| t.parse::<jiff::Timestamp>().ok())
        });
        if asked == Some(after) {
            continue;
        }
        let api: Api<Switch> = Api::namespaced(ctx.client.clone(), ns);
        let patch = json!({"metadata": {"annotations": {
            annotation: after.to_string()
        }}});
        match api
            .patch(name, &PatchParams::default(), &Patch::Merge(patch))
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// `(ports, updated, "switches moved/switches")` of the rollout `r`.
fn counts(ports: &[Carrier], r: &RolloutStatus) -> (i64, i64, String) {
    let complete = r.current_revision == r.update_revision;
    let on_update = |p: &Carrier| complete || decide::moved_by(p.pinned.as_deref(), r).is_some();
    let updated = ports
        .iter()
        .filter(|p| on_update(p))
        .filter(|p| p.state == Some(PortState::Active) && p.on_update)
        .count();
    let switches: BTreeSet<&str> = ports.iter().map(|p| p.switch.as_str()).collect();
    let reached: BTreeSet<&str> = ports
        .iter()
        .filter(|p| on_update(p))
        .map(|p| p.switch.as_str())
        .collect();
    (
        ports.len() as i64,
        updated as i64,
        format!("{}/{}", reached.len(), switches.len()),
    )
}

/// The configuration's conditions from its rollout.
fn set_conditions(status: &mut ConfigurationStatus, generation: Option<i64>, now: jiff::Timestamp) {
    let Some(r) = status.rollout.clone() else {
        return;
    };
    let (progressing, reason) = match r.phase.as_str() {
        phase::PROGRESSING => (Truth::True, "WaveInProgress"),
        phase::ROLLING_BACK => (Truth::True, "RollingBack"),
        phase::ABORTING => (Truth::True, "Aborting"),
        phase::COMPLETE => (Truth::False, "Complete"),
        phase::PAUSED => (Truth::False, "Paused"),
        phase::ROLLED_BACK => (Truth::False, "RolledBack"),
        phase::ABORTED => (Truth::False, "Aborted"),
        _ => (Truth::False, "Refused"),
    };
    let message = if r.message.is_empty() {
        format!("revision {}", r.update_revision_number)
    } else {
        r.message.clone()
    };
    set_condition(
        &mut status.conditions,
        "Progressing",
        progressing,
        reason,
        message.clone(),
        generation,
        now,
    );
    let complete = r.phase == phase::COMPLETE;
    set_condition(
        &mut status.conditions,
        "Complete",
        if complete { Truth::True } else { Truth::False },
        if complete { "AllPortsUpdated" } else { reason },
        message,
        generation,
        now,
    );
}

/// Patches in flight when a wave is pinned or put back: a wave's ports reach their
/// workers together, so each switch batches them (one at a time, every port of a
/// 10,000-port rollout went in a device session of its own; measured in
/// `benches/rollout.rs`).
const PINS_IN_FLIGHT: usize = 32;

/// Confirms (`confirm`) or cancels the wave `token` held on each of `switches`
/// (`namespace/name`), through each switch's worker: each switch's answer.
async fn settle_wave<C: Rolled>(
    ctx: &Context,
    switches: &BTreeSet<String>,
    token: &str,
    confirm: bool,
) -> Vec<(String, Result<Settled, ControllerError>)> {
    let mut out = Vec::new();
    if C::PORTS != CabledPortKind::SwitchPort {
        // A SmartNicPort's change is never held (an Open vSwitch commits each
        // transaction at once).
        return out;
    }
    for switch in switches {
        let settled = async {
            let (ns, name) = switch.split_once('/').unwrap_or_default();
            let Some(sw) = ctx.stores.switch(ns, name) else {
                return Ok(Settled::NeverHeld);
            };
            let (provider, secret) = ctx
                .checked_provider(ns, &sw.spec.provider.name, "spec.provider")
                .await
                .map_err(|f| ControllerError::Waiting(f.to_string()))?;
            let entry = ctx
                .port_worker(&provider, secret.as_deref(), None, || {
                    super::context::switch_device_ports(&sw)
                })
                .map_err(|e| ControllerError::Waiting(e.to_string()))?;
            entry
                .worker
                .settle_hold(token, confirm)
                .await
                .map_err(|e| ControllerError::Waiting(e.to_string()))
        }
        .await;
        out.push((switch.clone(), settled));
    }
    out
}

/// Pins `ports` (`namespace/name`, with how each one's host shows on it now:
/// [`ROLLOUT_SEEN_ANNOTATION`]) to the rollout `value`.
async fn pin_ports<C: Rolled>(
    ctx: &Context,
    ports: &[(String, Option<&str>)],
    value: &str,
) -> Result<(), ControllerError> {
    annotate_all::<C>(ctx, ports, Some(value)).await
}

/// Takes the pin off `ports` (`namespace/name`, each pinned by this rollout, as
/// the caller read them): they carry the current revision.
async fn unpin<C: Rolled>(ctx: &Context, ports: &[String]) -> Result<(), ControllerError> {
    let ports: Vec<(String, Option<&str>)> = ports.iter().map(|k| (k.clone(), None)).collect();
    annotate_all::<C>(ctx, &ports, None).await
}

/// A port a rollout pins (SwitchPort, SmartNicPort).
pub trait Pinned:
    Resource<DynamicType = (), Scope = NamespaceResourceScope>
    + Clone
    + std::fmt::Debug
    + serde::de::DeserializeOwned
    + Send
    + Sync
    + 'static
{
}

impl<P> Pinned for P where
    P: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static
{
}

/// Sets (or removes) the pin of every port of `ports`, with what it records of its
/// host (removed with the pin), [`PINS_IN_FLIGHT`] at a time; the first error is
/// returned once all were tried.
async fn annotate_all<C: Rolled>(
    ctx: &Context,
    ports: &[(String, Option<&str>)],
    value: Option<&str>,
) -> Result<(), ControllerError> {
    use futures::StreamExt;
    // Each patch owns what it uses (a borrowing stream is not Send for every
    // lifetime the controller's future needs).
    let patches: Vec<_> = ports
        .iter()
        .map(|(key, seen)| {
            let (client, key) = (ctx.client.clone(), key.clone());
            let value = value.map(str::to_owned);
            let seen = value.as_ref().and(seen.map(str::to_owned));
            async move { annotate::<C>(&client, &key, value.as_deref(), seen.as_deref()).await }
        })
        .collect();
    let results: Vec<Result<(), ControllerError>> = futures::stream::iter(patches)
        .buffer_unordered(PINS_IN_FLIGHT)
        .collect()
        .await;
    results.into_iter().collect()
}

/// Sets (or removes) a port's pin and what it records of the host; a port gone
/// meanwhile is skipped.
async fn annotate<C: Rolled>(
    client: &kube::Client,
    key: &str,
    value: Option<&str>,
    seen: Option<&str>,
) -> Result<(), ControllerError> {
    let Some((ns, name)) = key.split_once('/') else {
        return Ok(());
    };
    let api: Api<C::Port> = Api::namespaced(client.clone(), ns);
    let patch = json!({"metadata": {"annotations": {
        C::PIN: value,
        C::SEEN: seen,
    }}});
    match api
        .patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// The ControllerRevision `revision` of `config` (its spec without `rollout`),
/// created when missing; returns its number: the one it has when it is the
/// rollout's update revision already, else one past the rollout's latest.
async fn ensure_revision<C: Rolled>(
    ctx: &Context,
    config: &C,
    revision: &str,
    rollout: Option<&RolloutStatus>,
) -> Result<i64, ControllerError> {
    let ns = config.namespace().unwrap_or_default();
    if let Some(r) = rollout
        && r.update_revision == revision
    {
        return Ok(r.update_revision_number);
    }
    let number = rollout.map_or(1, |r| {
        r.update_revision_number.max(r.current_revision_number) + 1
    });
    let data = serde_json::to_value(config.revision_spec()).unwrap_or_default();
    let owner = OwnerReference {
        api_version: C::api_version(&()).into_owned(),
        kind: C::kind(&()).into_owned(),
        name: config.name_any(),
        uid: config.uid().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: None,
    };
    let mut labels = BTreeMap::from([(CONFIGURATION_LABEL, config.name_any())]);
    if let Some(kind) = C::REVISION_KIND {
        labels.insert(CONFIGURATION_KIND_LABEL, kind.to_owned());
    }
    let object = json!({
        "apiVersion": "apps/v1",
        "kind": "ControllerRevision",
        "metadata": {
            "name": revision,
            "namespace": ns,
            "labels": labels,
            "ownerReferences": [owner],
        },
        "data": RawExtension(data),
        "revision": number,
    });
    let api: Api<ControllerRevision> = Api::namespaced(ctx.client.clone(), &ns);
    api.patch(
        revision,
        &PatchParams::apply(MANAGER).force(),
        &Patch::Apply(object),
    )
    .await?;
    Ok(number)
}

/// Deletes the configuration's oldest revisions beyond [`REVISION_HISTORY`], never
/// the current or the update one. Best effort: a failure is logged.
async fn prune_revisions<C: Rolled>(ctx: &Context, ns: &str, name: &str, r: &RolloutStatus) {
    let mut revisions: Vec<(i64, String)> = ctx
        .stores
        .revisions
        .state()
        .iter()
        .filter(|c| c.namespace().as_deref() == Some(ns))
        .filter(|c| c.labels().get(CONFIGURATION_LABEL).map(String::as_str) == Some(name))
        .filter(|c| {
            c.labels().get(CONFIGURATION_KIND_LABEL).map(String::as_str) == C::REVISION_KIND
        })
        .map(|c| (c.revision.unwrap_or_default(), c.name_any()))
        .filter(|(_, n)| *n != r.current_revision && *n != r.update_revision)
        .collect();
    revisions.sort();
    let keep = REVISION_HISTORY.saturating_sub(2);
    let excess = revisions.len().saturating_sub(keep);
    let api: Api<ControllerRevision> = Api::namespaced(ctx.client.clone(), ns);
    for (_, old) in revisions.into_iter().take(excess) {
        if let Err(e) = api.delete(&old, &DeleteParams::default()).await {
            tracing::warn!(revision = %old, error = %e, "pruning an old revision failed");
        }
    }
}

/// The configuration whose rollout a port's change may move: the one it carries,
/// while a wave of its rollout is under way (only then does a port's change
/// matter to the rollout; otherwise the periodic look and the configuration's own
/// changes drive it).
pub fn rollout_of_port<C: Rolled>(
    configs: &kube::runtime::reflector::Store<C>,
    port_ns: Option<String>,
    reference: Option<&ConfigurationRef>,
) -> Option<ObjectRef<C>> {
    let r = reference?;
    let ns = r.namespace.clone().or(port_ns).unwrap_or_default();
    let key = ObjectRef::new(&r.name).within(&ns);
    let config = configs.get(&key)?;
    let under_way = config
        .rollout_status()
        .is_some_and(|r| r.wave_committed_at.is_some());
    under_way.then_some(key)
}

/// The Switch whose port-entry rollout a port's change may move: the port's, while
/// a wave of its rollout is under way.
pub fn switch_rollout_of_port(
    switches: &kube::runtime::reflector::Store<Switch>,
    port_ns: Option<String>,
    switch: Option<String>,
) -> Option<ObjectRef<Switch>> {
    let key = ObjectRef::new(&switch?).within(&port_ns.unwrap_or_default());
    let under_way = switches
        .get(&key)?
        .rollout_status()
        .is_some_and(|r| r.wave_committed_at.is_some());
    under_way.then_some(key)
}

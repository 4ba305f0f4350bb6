//! Ports follow their host: where a host is in its life (its phase), what each of
//! its NICs' ports must carry in that phase, whether the ports do, and whether a
//! Metal3 BareMetalHost must be held with the pause annotation. Pure: no client, no
//! clock; table-tested. The host controller (`controllers::host`) does the I/O.
//!
//! A host is a Server (or a BareMetalHost that carries its own `spec.ports`, turned
//! into the same NICs). Its phase runs
//! `Available → Provisioning → Provisioned → Deprovisioning → Available`, and
//! `Deleting` while it goes away:
//!
//! | phase | each NIC's port carries |
//! |---|---|
//! | Available, Provisioning | the NIC's `provisioningConfiguration`, else clean |
//! | Provisioned | the claim's `networkConfiguration` matched by `nicHint`, else the NIC's `configuration`, else clean |
//! | Deprovisioning | the NIC's `provisioningConfiguration`, else clean |
//! | Deleting | clean |
//!
//! A provisioning configuration that sets a link-aggregation group is refused, its
//! port left as it is ([`refuse_grouped_provisioning`]): PXE needs the single links.
//!
//! Who sets the goal: for a Server without a BareMetalHost, the binding and the
//! installer's signal ([`Driver::Installer`]); for one linked to a BareMetalHost,
//! the host's `status.provisioning.state` ([`metal3_phase`]). The phase moves
//! towards its goal only when every port of the current phase is settled (Active on
//! its configuration, or Idle where clean is wanted) — except when it leaves the
//! tenant's network or heads for deprovisioning or deletion, which happens at once:
//! those moves take something away, and waiting would keep it plugged in.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::api::claim::{ConfigurationKind, NetworkConfiguration, ServerClaimSpec};
use crate::api::keys::PAUSED_BY_PATCHBAY;
use crate::api::metal3::BareMetalHost;
use crate::api::server::{CabledPortKind, CabledPortRef, ServerNic};
use crate::api::{ConfigurationRef, PortState, ServerPhase};
use crate::decide::allocation::{CandidateNic, NicNeed, match_nics};

/// What moves a host's phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Driver<'a> {
    /// No BareMetalHost: bound to a claim or not, and whether the installer has
    /// said the host is installed.
    Installer {
        /// `spec.claimRef` is set.
        bound: bool,
        /// [`crate::api::keys::PROVISIONED_ANNOTATION`] is `"true"`.
        installed: bool,
    },
    /// A Metal3 BareMetalHost (`namespace/name`) while Metal3's BareMetalHost CRD is
    /// not installed (removed, or never there): nothing says where the host is, so
    /// its Server stays where it is.
    Metal3Absent {
        /// The linked host, `namespace/name`.
        host: &'a str,
    },
    /// A Metal3 BareMetalHost: its `status.provisioning.state` (`None`: the host is
    /// not found).
    Metal3 {
        /// The linked host, `namespace/name`.
        host: &'a str,
        /// The state.
        state: Option<&'a str>,
    },
}

/// The phase a BareMetalHost's `status.provisioning.state` means, for every state
/// the baremetal-operator has; `None` for a state it does not know.
pub fn metal3_phase(state: &str) -> Option<ServerPhase> {
    Some(match state {
        "" | "unmanaged" | "registering" | "match profile" | "inspecting" | "preparing"
        | "ready" | "available" => ServerPhase::Available,
        "provisioning" => ServerPhase::Provisioning,
        "provisioned" | "externally provisioned" => ServerPhase::Provisioned,
        "deprovisioning" => ServerPhase::Deprovisioning,
        "powering off before delete" | "deleting" => ServerPhase::Deleting,
        _ => return None,
    })
}

/// Why a host does not move to its goal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hold {
    /// The ports of the current phase are not settled.
    Ports,
    /// Provisioning, bound, waiting for the installer's signal.
    NotInstalled,
    /// The linked BareMetalHost (`namespace/name`) is not found.
    HostNotFound(String),
    /// Metal3's BareMetalHost CRD is not installed; the linked host
    /// (`namespace/name`) cannot be read.
    Metal3Absent(String),
    /// The BareMetalHost is in a state patchbay does not know.
    UnknownState(String),
    /// The linked BareMetalHost (`namespace/name`) has no state yet (created a moment
    /// ago, or restored after Metal3 came back) while the host is past `Available`.
    StateNotReported(String),
    /// Leaving `Provisioned`, its BGP neighbours are still on a ToR: the ports keep
    /// the tenant's network until they are gone.
    BgpPeers,
}

/// One step of the phase machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PhaseStep {
    /// The phase after the step.
    pub phase: ServerPhase,
    /// Why the host is not where its driver wants it, if it is not.
    pub hold: Option<Hold>,
}

/// Where the driver wants the host, seen from `current`, or why it cannot say.
fn goal(current: ServerPhase, driver: Driver<'_>, deleting: bool) -> Result<ServerPhase, Hold> {
    use ServerPhase::*;
    if deleting {
        return Ok(Deleting);
    }
    match driver {
        Driver::Installer { bound, installed } => Ok(match (current, bound) {
            (Available, false) | (Deprovisioning, _) | (Deleting, _) => Available,
            (Available, true) => Provisioning,
            (Provisioning | Provisioned, false) => Deprovisioning,
            (Provisioning, true) if installed => Provisioned,
            (Provisioning, true) => return Err(Hold::NotInstalled),
            (Provisioned, true) => Provisioned,
        }),
        Driver::Metal3Absent { host } => Err(Hold::Metal3Absent(host.to_owned())),
        Driver::Metal3 { host, state: None } => Err(Hold::HostNotFound(host.to_owned())),
        // No state is not "registering": a host object made again (Metal3 reinstalled,
        // a backup restored) has none until its operator speaks, and taking a
        // provisioned tenant's ports back to the provisioning network for that moment
        // would cut the tenant off.
        Driver::Metal3 {
            host,
            state: Some(""),
        } if current != Available => Err(Hold::StateNotReported(host.to_owned())),
        Driver::Metal3 { state: Some(s), .. } => {
            metal3_phase(s).ok_or_else(|| Hold::UnknownState(s.to_owned()))
        }
    }
}

/// The next phase: towards the driver's goal, gated on `settled` (every port of
/// the current phase carries what it should) unless the move takes something away
/// (leaving `Provisioned`, or heading for `Deprovisioning` or `Deleting`). A host
/// with no phase yet starts `Available`.
pub fn next_phase(
    current: Option<ServerPhase>,
    driver: Driver<'_>,
    deleting: bool,
    settled: bool,
) -> PhaseStep {
    use ServerPhase::*;
    let Some(current) = current else {
        let phase = if deleting { Deleting } else { Available };
        return PhaseStep { phase, hold: None };
    };
    let goal = match goal(current, driver, deleting) {
        Ok(g) => g,
        Err(hold) => {
            // Waiting for the installer, the ports still hold the host when they are
            // not settled: say the nearer reason.
            let hold = if hold == Hold::NotInstalled && !settled {
                Hold::Ports
            } else {
                hold
            };
            return PhaseStep {
                phase: current,
                hold: Some(hold),
            };
        }
    };
    if goal == current {
        return PhaseStep {
            phase: current,
            hold: None,
        };
    }
    let at_once = current == Provisioned || matches!(goal, Deprovisioning | Deleting);
    if at_once || settled {
        PhaseStep {
            phase: goal,
            hold: None,
        }
    } else {
        PhaseStep {
            phase: current,
            hold: Some(Hold::Ports),
        }
    }
}

/// `step`, held in `Provisioned` while the host's BGP neighbours are still on a ToR
/// (`peered`): a neighbour comes off before the ports leave the tenant's network.
pub fn hold_for_bgp(step: PhaseStep, current: Option<ServerPhase>, peered: bool) -> PhaseStep {
    if peered && current == Some(ServerPhase::Provisioned) && step.phase != ServerPhase::Provisioned
    {
        PhaseStep {
            phase: ServerPhase::Provisioned,
            hold: Some(Hold::BgpPeers),
        }
    } else {
        step
    }
}

/// A port a NIC is cabled to.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PortId {
    /// `SwitchPort` or `SmartNicPort`.
    pub kind: CabledPortKind,
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
}

impl std::fmt::Display for PortId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?} {}/{}", self.kind, self.namespace, self.name)
    }
}

/// Why a port carries what it carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The NIC's `provisioningConfiguration`.
    Provisioning,
    /// The claim's `networkConfiguration`.
    Claim,
    /// The NIC's own `configuration` (the infra team's default).
    Nic,
    /// Nothing: clean.
    Clean,
    /// The Switch's parking configuration: the NIC's cabling is not confirmed.
    Parked,
}

impl Source {
    /// The word in `status.ports[].source`.
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Provisioning => "provisioning",
            Source::Claim => "claim",
            Source::Nic => "nic",
            Source::Clean => "clean",
            Source::Parked => "parked",
        }
    }
}

/// What one NIC's port must carry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NicTarget {
    /// The NIC.
    pub nic: String,
    /// Its port.
    pub port: PortId,
    /// The configuration (namespace resolved); `None`: clean.
    pub configuration: Option<ConfigurationRef>,
    /// Why.
    pub source: Source,
}

/// A claim's network for one host: the entries (the claim's, then its role's) and
/// the claim's namespace (where a reference without one points).
#[derive(Debug, Clone, Copy)]
pub struct ClaimNetwork<'a> {
    /// The entries, in the allocator's order.
    pub entries: &'a [&'a NetworkConfiguration],
    /// The claim's namespace.
    pub namespace: &'a str,
}

/// The one of `nics` cabled to port `namespace/name` of `kind`, if any.
pub fn cabled_nic<'n>(
    nics: &'n [ServerNic],
    kind: CabledPortKind,
    namespace: &str,
    name: &str,
) -> Option<&'n ServerNic> {
    nics.iter().find(|n| {
        n.port
            .as_ref()
            .is_some_and(|p| p.port_kind() == kind && p.namespace == namespace && p.name == name)
    })
}

/// Whether one of `nics` is cabled to port `namespace/name` of `kind`.
pub fn cabled_to(nics: &[ServerNic], kind: CabledPortKind, namespace: &str, name: &str) -> bool {
    cabled_nic(nics, kind, namespace, name).is_some()
}

/// A claim's network entries for a Server of `role`: the claim's, then the role's
/// (the allocator's order).
pub fn claim_entries<'a>(spec: &'a ServerClaimSpec, role: &str) -> Vec<&'a NetworkConfiguration> {
    let role_entries = spec
        .roles
        .iter()
        .filter(|r| r.name == role)
        .flat_map(|r| r.network_configuration.iter());
    spec.network_configuration
        .iter()
        .chain(role_entries)
        .collect()
}

fn resolve(r: &ConfigurationRef, default_ns: &str) -> ConfigurationRef {
    ConfigurationRef {
        name: r.name.clone(),
        namespace: Some(r.namespace.clone().unwrap_or_else(|| default_ns.to_owned())),
    }
}

/// What each cabled NIC's port carries in `phase` (NICs without a port are not
/// driven), and the claim entries no NIC can take (one message each; their NICs stay
/// as the rest of the table says). A NIC's references without a namespace point to
/// its port's namespace (a Server is cluster-scoped), a claim's to the claim's.
pub fn port_targets(
    phase: ServerPhase,
    nics: &[ServerNic],
    network: Option<ClaimNetwork<'_>>,
) -> (Vec<NicTarget>, Vec<String>) {
    let mut claimed: BTreeMap<usize, ConfigurationRef> = BTreeMap::new();
    let mut errors = Vec::new();
    if phase == ServerPhase::Provisioned
        && let Some(net) = network
    {
        let candidates: Vec<CandidateNic> = nics.iter().map(CandidateNic::of).collect();
        // One entry at a time, so that an entry no NIC can take does not stop the
        // others (the allocator only binds Servers that fit them all).
        let mut taken: Vec<CandidateNic> = candidates.clone();
        for (i, e) in net.entries.iter().enumerate() {
            let need = NicNeed {
                path: format!(
                    "networkConfiguration entry {i} ({})",
                    e.configuration_ref.name
                ),
                kind: e.configuration_ref.kind,
                nic_name: e.nic_hint.name.clone(),
                smart_nic: e.nic_hint.smart_nic,
            };
            match match_nics(&taken, std::slice::from_ref(&need)) {
                Ok(picks) => {
                    let k = picks[0];
                    taken[k].port = None;
                    let r = &e.configuration_ref;
                    claimed.insert(
                        k,
                        ConfigurationRef {
                            name: r.name.clone(),
                            namespace: Some(
                                r.namespace
                                    .clone()
                                    .unwrap_or_else(|| net.namespace.to_owned()),
                            ),
                        },
                    );
                }
                Err(_) => errors.push(format!(
                    "no NIC can carry {} {} ({})",
                    kind_word(e.configuration_ref.kind),
                    e.configuration_ref.name,
                    hint_words(e)
                )),
            }
        }
    }
    let targets = nics
        .iter()
        .enumerate()
        .filter_map(|(i, nic)| {
            let p = nic.port.as_ref()?;
            let port = PortId {
                kind: p.port_kind(),
                namespace: p.namespace.clone(),
                name: p.name.clone(),
            };
            let own = |r: &Option<ConfigurationRef>| r.as_ref().map(|r| resolve(r, &p.namespace));
            let (configuration, source) = match phase {
                ServerPhase::Available
                | ServerPhase::Provisioning
                | ServerPhase::Deprovisioning => match own(&nic.provisioning_configuration) {
                    Some(c) => (Some(c), Source::Provisioning),
                    None => (None, Source::Clean),
                },
                ServerPhase::Provisioned => match (claimed.get(&i), own(&nic.configuration)) {
                    (Some(c), _) => (Some(c.clone()), Source::Claim),
                    (None, Some(c)) => (Some(c), Source::Nic),
                    (None, None) => (None, Source::Clean),
                },
                ServerPhase::Deleting => (None, Source::Clean),
            };
            Some(NicTarget {
                nic: nic.name.clone(),
                port,
                configuration,
                source,
            })
        })
        .collect();
    (targets, errors)
}

/// A provisioning configuration carries no link-aggregation group: PXE boots over
/// the host's individual links, and a group forms only with the tenant's
/// configuration. Each target that would link a SwitchPort to a provisioning
/// configuration setting a group (`group_of` gives it) is dropped — its port stays as
/// it is, nothing reaches the device — and refused with one message naming the NIC's
/// field (`field_of` gives its path, `spec.nics[0]`). While one is refused the host's
/// ports are not settled, so its phase waits.
pub fn refuse_grouped_provisioning(
    targets: Vec<NicTarget>,
    group_of: impl Fn(&ConfigurationRef) -> Option<i64>,
    field_of: impl Fn(&str) -> String,
) -> (Vec<NicTarget>, Vec<(NicTarget, String)>) {
    let mut kept = Vec::with_capacity(targets.len());
    let mut refused = Vec::new();
    for t in targets {
        let group = match (t.source, &t.configuration, t.port.kind) {
            (Source::Provisioning, Some(c), CabledPortKind::SwitchPort) => {
                group_of(c).map(|g| (g, c.name.clone()))
            }
            _ => None,
        };
        match group {
            None => kept.push(t),
            Some((group, name)) => {
                let why = format!(
                    "{}.provisioningConfiguration: SwitchPortConfiguration {name} sets \
                     linkAggregation (group {group}); a provisioning configuration carries no \
                     link-aggregation group (PXE boots over the individual links): the group \
                     belongs in the tenant's configuration",
                    field_of(&t.nic),
                );
                refused.push((t, why));
            }
        }
    }
    (kept, refused)
}

fn kind_word(kind: ConfigurationKind) -> &'static str {
    match kind {
        ConfigurationKind::SwitchPortConfiguration => "SwitchPortConfiguration",
        ConfigurationKind::SmartNicConfiguration => "SmartNicConfiguration",
    }
}

fn hint_words(e: &NetworkConfiguration) -> String {
    let port = if e.nic_hint.smart_nic {
        "cabled to a SmartNicPort"
    } else {
        "cabled to a SwitchPort"
    };
    match &e.nic_hint.name {
        Some(n) => format!("nicHint: NIC {n}, {port}, not taken by another entry"),
        None => format!("nicHint: a NIC {port}, not taken by another entry"),
    }
}

/// A port as the host controller sees it in the cache.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CachedPort {
    /// Its `spec.configuration`, namespace resolved.
    pub configuration: Option<ConfigurationRef>,
    /// [`crate::api::keys::HOST_ANNOTATION`].
    pub host: Option<String>,
    /// The SmartNicPort that chained to it (a SwitchPort's `patchbay.dev/chained-from`).
    pub chained_from: Option<String>,
    /// `status.state`.
    pub state: Option<PortState>,
    /// `status.configurationRef`.
    pub applied: Option<ConfigurationRef>,
    /// `status.observedGeneration == metadata.generation`.
    pub seen: bool,
    /// `status.lastError`.
    pub last_error: Option<String>,
    /// The port's `Ready` condition when it is not `True`: `reason: message` (a
    /// switch that does not answer leaves an Active port `Unknown`).
    pub not_ready: Option<String>,
}

/// What the host controller writes to a port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PortWrite {
    /// Mark it as the host's and set `spec.configuration`.
    Set(Option<ConfigurationRef>),
    /// Drop the host's mark (the port is back to clean and Idle).
    Unmark,
}

/// How a port stands against its target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// It carries what it should.
    Settled,
    /// On its way (message: its state).
    Pending(String),
    /// Failing (message: its state and last error).
    Failing(String),
    /// Somebody else's (message: whose, or what it carries); never touched.
    InUse(String),
    /// The port object does not exist.
    Missing,
    /// Its target was refused before anything reached the port (a configuration the
    /// claim's namespace may not carry, a provisioning configuration with a
    /// link-aggregation group); the port is left as it is (message: why).
    Refused(String),
}

impl Verdict {
    /// True when settled.
    pub fn settled(&self) -> bool {
        *self == Verdict::Settled
    }

    /// Why the port is not settled, in words (`None` when it is).
    pub fn reason(&self) -> Option<String> {
        match self {
            Verdict::Settled => None,
            Verdict::Pending(m) | Verdict::Failing(m) | Verdict::InUse(m) | Verdict::Refused(m) => {
                Some(m.clone())
            }
            Verdict::Missing => Some("the port object does not exist".into()),
        }
    }
}

/// The write a port needs (if any) and how it stands, for host `me`. A port marked
/// by another host, chained from a SmartNicPort, or carrying a configuration this
/// host did not set is in use and never written. A port this host marked is set to
/// the target; clean and Idle with a clean target, its mark is dropped. Settled
/// means on target with its `Ready` condition True: a port whose switch does not
/// answer is not settled, whatever it carried before.
pub fn port_step(
    target: Option<&ConfigurationRef>,
    observed: Option<&CachedPort>,
    me: &str,
) -> (Option<PortWrite>, Verdict) {
    let Some(o) = observed else {
        return (None, Verdict::Missing);
    };
    if let Some(other) = o.host.as_deref().filter(|h| *h != me) {
        return (None, Verdict::InUse(format!("driven by {other}")));
    }
    if o.host.is_none()
        && let Some(snp) = &o.chained_from
    {
        return (
            None,
            Verdict::InUse(format!("chained from SmartNicPort {snp}")),
        );
    }
    let mine = o.host.is_some();
    if !mine && o.configuration.is_some() && o.configuration.as_ref() != target {
        let c = o
            .configuration
            .as_ref()
            .map(|c| c.name.as_str())
            .unwrap_or_default();
        return (
            None,
            Verdict::InUse(format!("carries {c}, set by someone else")),
        );
    }
    let clean_idle =
        o.configuration.is_none() && o.applied.is_none() && o.state == Some(PortState::Idle);
    let write = match target {
        Some(t) if !mine || o.configuration.as_ref() != Some(t) => {
            Some(PortWrite::Set(Some(t.clone())))
        }
        None if mine && o.configuration.is_some() => Some(PortWrite::Set(None)),
        None if mine && clean_idle && o.seen => Some(PortWrite::Unmark),
        _ => None,
    };
    if write.as_ref().is_some_and(|w| *w != PortWrite::Unmark) {
        return (write, Verdict::Pending("being set".into()));
    }
    let on_target = o.seen
        && match target {
            Some(t) => o.state == Some(PortState::Active) && o.applied.as_ref() == Some(t),
            None => clean_idle,
        };
    let state = o.state.map_or_else(
        || "not yet seen by its controller".into(),
        |s| s.to_string(),
    );
    let verdict = match (&o.last_error, &o.not_ready) {
        _ if on_target && o.not_ready.is_none() => Verdict::Settled,
        (Some(e), _) => Verdict::Failing(format!("{state}, last error: {e}")),
        // On target, but its controller cannot vouch for it (the switch does not
        // answer, the device drifted).
        (None, Some(why)) if on_target => Verdict::Failing(format!("{state}, {why}")),
        _ => Verdict::Pending(state),
    };
    (write, verdict)
}

/// One entry of `spec.ports` as seed 003 writes it; references default to the
/// host's namespace.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PortEntry {
    name: String,
    #[serde(default)]
    mac: Option<String>,
    port: EntryRef,
    #[serde(default)]
    provisioning_configuration: Option<EntryRef>,
    #[serde(default)]
    configuration: Option<EntryRef>,
}

#[derive(Deserialize)]
struct EntryRef {
    name: String,
    #[serde(default)]
    kind: Option<String>,
    #[serde(default)]
    namespace: Option<String>,
}

/// The host's `spec.ports` as NICs, and one message per entry that is not one.
pub fn bare_metal_host_nics(host: &BareMetalHost) -> (Vec<ServerNic>, Vec<String>) {
    let ns = host.metadata.namespace.clone().unwrap_or_default();
    let Some(entries) = host.spec.ports.as_ref() else {
        return (Vec::new(), Vec::new());
    };
    let Some(entries) = entries.as_array() else {
        return (Vec::new(), vec!["spec.ports: not a list".into()]);
    };
    let mut nics = Vec::new();
    let mut errors = Vec::new();
    for (i, e) in entries.iter().enumerate() {
        let entry = match PortEntry::deserialize(e) {
            Ok(p) => p,
            Err(err) => {
                errors.push(format!("spec.ports[{i}]: {err}"));
                continue;
            }
        };
        let kind = match entry.port.kind.as_deref() {
            None | Some("SwitchPort") => CabledPortKind::SwitchPort,
            Some("SmartNicPort") => CabledPortKind::SmartNicPort,
            Some(other) => {
                errors.push(format!(
                    "spec.ports[{i}].port.kind: {other:?} is neither SwitchPort nor SmartNicPort"
                ));
                continue;
            }
        };
        let reference = |r: EntryRef| ConfigurationRef {
            name: r.name,
            namespace: Some(r.namespace.unwrap_or_else(|| ns.clone())),
        };
        nics.push(ServerNic {
            name: entry.name,
            mac: entry.mac,
            port: Some(CabledPortRef {
                kind: Some(kind),
                name: entry.port.name,
                namespace: entry.port.namespace.unwrap_or_else(|| ns.clone()),
            }),
            provisioning_configuration: entry.provisioning_configuration.map(reference),
            configuration: entry.configuration.map(reference),
        });
    }
    (nics, errors)
}

/// The mark a host's ports carry.
pub fn bare_metal_host_mark(host: &BareMetalHost) -> String {
    format!(
        "BareMetalHost/{}/{}",
        host.metadata.namespace.clone().unwrap_or_default(),
        host.metadata.name.as_deref().unwrap_or_default()
    )
}

/// Whether a linked BareMetalHost should carry patchbay's pause, and what to do
/// about the annotation it has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Gate {
    /// Nothing to do.
    Open,
    /// Set patchbay's pause (the host would use ports that are not ready).
    Hold,
    /// Keep patchbay's pause.
    Holding,
    /// Remove patchbay's pause.
    Release,
    /// Someone else paused the host (the value): leave it, wait.
    Foreign(String),
}

/// The Metal3 gate. The host is held while the baremetal-operator would use the
/// provisioning network — from registration through provisioning, and (best effort)
/// while it deprovisions — and the ports do not carry it yet. A pause somebody else
/// set is never touched.
pub fn metal3_gate(goal: Option<ServerPhase>, settled: bool, paused: Option<&str>) -> Gate {
    let wants = !settled
        && matches!(
            goal,
            Some(ServerPhase::Available | ServerPhase::Provisioning | ServerPhase::Deprovisioning)
        );
    match (paused, wants) {
        (Some(v), _) if v != PAUSED_BY_PATCHBAY => Gate::Foreign(v.to_owned()),
        (Some(_), true) => Gate::Holding,
        (Some(_), false) => Gate::Release,
        (None, true) => Gate::Hold,
        (None, false) => Gate::Open,
    }
}

/// The goal a Metal3 driver gives (for the gate): the state's phase, if known.
pub fn metal3_goal(state: Option<&str>) -> Option<ServerPhase> {
    state.and_then(metal3_phase)
}

#[cfg(test)]
mod tests;

//! Drives the ports of one host (a Server, or a BareMetalHost carrying its own
//! `spec.ports`) through its phases, and holds a Metal3 BareMetalHost with the pause
//! annotation while its ports are not ready for what the baremetal-operator is
//! about to do. Kubernetes I/O: reads from the caches, merge patches on ports and
//! hosts, Events on hosts. Every decision is [`crate::decide::phases`]'s.
//!
//! Writes are guarded by the object's resourceVersion as read from the cache: a
//! port somebody else changed in the meantime (a person, a SmartNicPort claiming
//! it) is never overwritten; the conflict requeues the host, which reads again.

use std::collections::BTreeSet;
use std::sync::Arc;

use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, ResourceExt};
use serde_json::json;

use super::ControllerError;
use super::events::EventPublisher;
use crate::api::keys::{
    CHAINED_FROM_ANNOTATION, HOST_ANNOTATION, PAUSED_ANNOTATION, PAUSED_BY_PATCHBAY,
};
use crate::api::metal3::BareMetalHost;
use crate::api::server::{CabledPortKind, LinkedHost, ServerNic};
use crate::api::{CablingPolicy, ServerPhase};
use crate::api::{ConfigurationRef, PortStatus, SmartNicPort, SwitchPort, SwitchPortConfiguration};
use crate::decide::cabling::{self, Action, NicCabling};
use crate::decide::phases::{
    CachedPort, ClaimNetwork, Driver, Gate, Hold, NicTarget, PortId, PortWrite, Source,
    hold_for_bgp, metal3_gate, metal3_goal, next_phase, port_step, port_targets,
    refuse_grouped_provisioning,
};
use crate::decide::status::{HostFacts, Severity};

/// What the host controller reads and writes through.
pub struct HostWorld {
    /// The API server.
    pub client: Client,
    /// The SwitchPort cache.
    pub switch_ports: super::context::PortCache,
    /// Each cached SwitchPort's Switch (the cache keeps no labels).
    pub port_index: super::context::SharedPortIndex,
    /// The SmartNicPort cache.
    pub smartnic_ports: Store<SmartNicPort>,
    /// The SwitchPortConfiguration cache (a provisioning configuration must carry
    /// no link-aggregation group).
    pub configurations: Store<SwitchPortConfiguration>,
    /// Events on hosts.
    pub events: EventPublisher,
    /// The caches the tenancy check reads (pools, Servers, SmartNicPorts).
    pub stores: super::context::Stores,
    /// Tenancy; `None`: nothing checked.
    pub tenancy: Option<crate::decide::tenancy::Tenancy>,
    /// The Nodes (and MetalLB) a Server's BGP peers go to; `None`: none.
    pub bgp_nodes: Option<crate::decide::bgp_nodes::BgpNodes>,
    /// Metal3's switch API (`--metal3-switches`); `None`: a BareMetalHost's
    /// `networkInterfaces` are not read.
    pub metal3: Option<Metal3World>,
    /// The BareMetalHost cache (empty without Metal3): whether a host whose mark a
    /// port carries runs its user's OS.
    pub bare_metal_hosts: Store<BareMetalHost>,
}

/// What inspection found on `host`: its HardwareData's `spec.hardware` (with
/// `--metal3-switches`), else its own `status.hardware`.
pub fn inspection(world: &HostWorld, host: &BareMetalHost) -> Option<serde_json::Value> {
    world
        .metal3
        .as_ref()
        .and_then(|m| {
            m.hardware.get(
                &ObjectRef::new(&host.name_any()).within(&host.namespace().unwrap_or_default()),
            )
        })
        .and_then(|hd| hd.spec.hardware.clone())
        .or_else(|| host.status.hardware.clone())
}

/// Whether host mark `host` is an allocated host ([`cabling::allocated_mark`]),
/// from the caches.
fn allocated(world: &HostWorld, servers: &[Arc<crate::api::Server>], host: &str) -> bool {
    cabling::allocated_mark(
        host,
        |name| {
            servers
                .iter()
                .any(|s| s.name_any() == name && s.spec.claim_ref.is_some())
        },
        |ns, name| {
            world
                .bare_metal_hosts
                .get(&ObjectRef::new(name).within(ns))
                .map(|h| h.status.provisioning.state.clone())
        },
    )
}

/// What a BareMetalHost's `networkInterfaces` are resolved with.
#[derive(Clone)]
pub struct Metal3World {
    /// The BareMetalSwitches (a `switchID` names one by its MAC).
    pub switches: Store<crate::api::metal3_switch::BareMetalSwitch>,
    /// Whether that cache holds its first list: before, a host's interfaces are
    /// not read (a switch not listed yet would read as gone, and the host's ports
    /// would be cleaned).
    pub switches_listed: super::context::Listed,
    /// The HardwareData: each host's inspection, by the host's name.
    pub hardware: Store<crate::api::metal3::HardwareData>,
    /// What the interfaces carry while the host is provisioned with
    /// (`--metal3-provisioning-configuration`).
    pub provisioning: Option<ConfigurationRef>,
}

/// One host as the controller sees it.
pub struct HostView<'a> {
    /// The mark its ports carry (`Server/<name>`).
    pub me: String,
    /// Its NICs.
    pub nics: &'a [ServerNic],
    /// The path of a NIC's entry in the host's spec, by NIC name (`spec.nics[0]`),
    /// for messages that name a field.
    pub nic_field: &'a (dyn Fn(&str) -> String + Sync),
    /// The claim's network, when bound.
    pub network: Option<ClaimNetwork<'a>>,
    /// What moves its phase.
    pub driver: Driver<'a>,
    /// Being deleted.
    pub deleting: bool,
    /// Its phase so far.
    pub phase: Option<ServerPhase>,
    /// The linked (or own) BareMetalHost, to gate.
    pub bare_metal_host: Option<Arc<BareMetalHost>>,
    /// The host's own `cablingPolicy` (a port's ProviderSwitch may make it Strict).
    pub cabling_policy: CablingPolicy,
    /// Whether a ToR still has a BGP neighbour of this host (it may not leave
    /// `Provisioned` until none does).
    pub bgp_peered: bool,
}

fn observed(
    meta: &kube::core::ObjectMeta,
    spec: Option<&ConfigurationRef>,
    status: Option<&PortStatus>,
) -> CachedPort {
    let ns = meta.namespace.clone().unwrap_or_default();
    let annotations = meta.annotations.clone().unwrap_or_default();
    let status = status.cloned().unwrap_or_default();
    CachedPort {
        configuration: spec.map(|r| ConfigurationRef {
            name: r.name.clone(),
            namespace: Some(r.namespace.clone().unwrap_or_else(|| ns.clone())),
        }),
        host: annotations.get(HOST_ANNOTATION).cloned(),
        chained_from: annotations.get(CHAINED_FROM_ANNOTATION).cloned(),
        state: status.state,
        applied: status.configuration_ref,
        seen: status.observed_generation.is_some() && status.observed_generation == meta.generation,
        last_error: status.last_error,
        not_ready: status
            .conditions
            .iter()
            .find(|c| c.type_ == "Ready" && c.status != "True")
            .map(|c| format!("{}: {}", c.reason, c.message)),
    }
}

/// What the host controller reads of a port object, whatever its kind.
trait DrivenPort: kube::Resource<DynamicType = ()> + Clone + 'static {
    fn configuration(&self) -> Option<&ConfigurationRef>;
    fn port_status(&self) -> Option<&PortStatus>;
}

impl DrivenPort for SwitchPort {
    fn configuration(&self) -> Option<&ConfigurationRef> {
        self.spec.configuration.as_ref()
    }
    fn port_status(&self) -> Option<&PortStatus> {
        self.status.as_ref()
    }
}

impl DrivenPort for SmartNicPort {
    fn configuration(&self) -> Option<&ConfigurationRef> {
        self.spec.configuration.as_ref()
    }
    fn port_status(&self) -> Option<&PortStatus> {
        self.status.as_ref()
    }
}

fn cached<K: DrivenPort>(p: &K) -> (CachedPort, Option<String>) {
    (
        observed(p.meta(), p.configuration(), p.port_status()),
        p.meta().resource_version.clone(),
    )
}

/// A port from the caches: what it is, and its resourceVersion.
fn look_up(world: &HostWorld, port: &PortId) -> Option<(CachedPort, Option<String>)> {
    match port.kind {
        CabledPortKind::SwitchPort => world
            .switch_ports
            .get(&ObjectRef::new(&port.name).within(&port.namespace))
            .map(|p| cached(&*p)),
        CabledPortKind::SmartNicPort => world
            .smartnic_ports
            .get(&ObjectRef::new(&port.name).within(&port.namespace))
            .map(|p| cached(&*p)),
    }
}

/// The ports of one kind in `store` carrying `me`'s mark.
fn marked_in<K: DrivenPort>(store: &Store<K>, kind: CabledPortKind, me: &str) -> Vec<PortId> {
    store
        .state()
        .iter()
        .filter(|p| {
            p.meta()
                .annotations
                .as_ref()
                .and_then(|a| a.get(HOST_ANNOTATION))
                .is_some_and(|h| h == me)
        })
        .map(|p| PortId {
            kind,
            namespace: p.meta().namespace.clone().unwrap_or_default(),
            name: p.meta().name.clone().unwrap_or_default(),
        })
        .collect()
}

/// The ports carrying `me`'s mark, from the caches.
pub fn marked(world: &HostWorld, me: &str) -> BTreeSet<PortId> {
    let switch_ports = world.switch_ports.state();
    switch_ports
        .iter()
        .filter(|p| p.annotation(HOST_ANNOTATION) == Some(me))
        .map(|p| PortId {
            kind: CabledPortKind::SwitchPort,
            namespace: p.namespace().to_owned(),
            name: p.name().to_owned(),
        })
        .chain(marked_in(
            &world.smartnic_ports,
            CabledPortKind::SmartNicPort,
            me,
        ))
        .collect()
}

/// Hands the ports carrying `from`'s mark to `to` (a Server now linked to the host
/// that drove them): a port `keeps` says `to` is cabled to takes `to`'s mark and
/// keeps what it carries, so nothing changes on the device until `to` moves it; any
/// other port is cleaned under `from`'s mark, then unmarked, as a port no NIC is
/// cabled to any more. Each write is over the version read. Returns how many ports
/// were handed and how many are still being cleaned.
pub async fn hand_over(
    world: &HostWorld,
    from: &str,
    to: &str,
    keeps: impl Fn(&PortId) -> bool,
) -> Result<(usize, usize), ControllerError> {
    let (mut handed, mut cleaning) = (0, 0);
    for port in marked(world, from) {
        let Some((o, version)) = look_up(world, &port) else {
            continue;
        };
        let result = if keeps(&port) {
            handed += 1;
            let patch = json!({"metadata": {
                "resourceVersion": version, "annotations": {HOST_ANNOTATION: to}}});
            patch_port(world, &port, patch).await
        } else {
            let (write, verdict) = port_step(None, Some(&o), from);
            if !verdict.settled() {
                cleaning += 1;
            }
            match write {
                Some(w) => write_port(world, &port, version, from, &w).await,
                None => Ok(()),
            }
        };
        match result {
            // Changed meanwhile: its next event brings this back.
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            r => r?,
        }
    }
    Ok((handed, cleaning))
}

async fn write_port(
    world: &HostWorld,
    port: &PortId,
    version: Option<String>,
    me: &str,
    write: &PortWrite,
) -> Result<(), kube::Error> {
    let patch = match write {
        PortWrite::Set(c) => json!({
            "metadata": {"resourceVersion": version, "annotations": {HOST_ANNOTATION: me}},
            "spec": {"configuration": c},
        }),
        PortWrite::Unmark => json!({
            "metadata": {"resourceVersion": version, "annotations": {HOST_ANNOTATION: null}},
        }),
    };
    patch_port(world, port, patch).await
}

/// A merge patch of a port object, whatever its kind; a port gone meanwhile is
/// no error.
async fn patch_port(
    world: &HostWorld,
    port: &PortId,
    patch: serde_json::Value,
) -> Result<(), kube::Error> {
    let pp = PatchParams::default();
    let result = match port.kind {
        CabledPortKind::SwitchPort => {
            Api::<SwitchPort>::namespaced(world.client.clone(), &port.namespace)
                .patch(&port.name, &pp, &Patch::Merge(patch))
                .await
                .map(|_| ())
        }
        CabledPortKind::SmartNicPort => {
            Api::<SmartNicPort>::namespaced(world.client.clone(), &port.namespace)
                .patch(&port.name, &pp, &Patch::Merge(patch))
                .await
                .map(|_| ())
        }
    };
    match result {
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        r => r,
    }
}

/// What `phase` asks of a host's ports.
struct Targets {
    /// The ports to drive and what each must carry.
    ports: Vec<NicTarget>,
    /// Claim entries no NIC can take.
    unmatched: Vec<String>,
    /// Targets refused (their ports are left as they are), one message each.
    refused: Vec<String>,
    /// Targets the tenancy check refused (their ports are left as they are).
    forbidden: Vec<String>,
    /// The targets refused (by either check), each with why: not written, listed.
    withheld: Vec<(NicTarget, String)>,
    /// Each NIC's cabling, checked against what its port sees.
    cabling: Vec<NicCabling>,
    /// Ports parked for their cabling, one message each: they hold the phase.
    miscabled: Vec<String>,
}

impl Targets {
    fn settled(&self, world: &HostWorld, me: &str) -> bool {
        self.unmatched.is_empty()
            && self.refused.is_empty()
            && self.forbidden.is_empty()
            && self.miscabled.is_empty()
            && judge(world, me, &self.ports)
    }
}

/// What the Switch of SwitchPort `port` reads its ports to see: whether it reads at
/// all (a neighbour source that has been read), what `port`'s device port sees, its
/// words for messages, and whether its ProviderSwitch says Strict.
struct PortSight {
    /// `namespace/name` of the Switch, and the device port.
    at: (String, String),
    /// The Switch's own chassis id, as its sources read it.
    chassis: Option<String>,
    reading: cabling::Reading,
    seen: Option<crate::api::PortNeighborsStatus>,
    words: String,
    strict: bool,
    /// What a parked port carries (`spec.neighbors.parkingConfiguration`); `None`:
    /// clean.
    parking: Option<ConfigurationRef>,
}

fn sight(world: &HostWorld, port: &PortId) -> Option<PortSight> {
    let sp = world
        .switch_ports
        .get(&ObjectRef::new(&port.name).within(&port.namespace))?;
    let switch_name = super::switch_port::switch_name(&sp, &world.port_index)?;
    let switch = world.stores.switch(&port.namespace, &switch_name)?;
    let device_port = switch.spec.ports.get(&port.name).map(|d| d.name.clone())?;
    let status = switch.status.clone().unwrap_or_default();
    let strict = world
        .stores
        .provider(&port.namespace, &switch.spec.provider.name)
        .is_some_and(|p| p.spec.cabling_policy == Some(CablingPolicy::Strict));
    Some(PortSight {
        at: (
            format!("{}/{switch_name}", port.namespace),
            device_port.clone(),
        ),
        chassis: status.chassis_id.clone(),
        parking: switch
            .spec
            .neighbors
            .as_ref()
            .and_then(|n| n.parking_configuration.clone())
            .map(|name| ConfigurationRef {
                name,
                namespace: Some(port.namespace.clone()),
            }),
        reading: match (&switch.spec.neighbors, &status.neighbors_read_at) {
            (None, _) => cabling::Reading::None,
            (Some(_), Some(_)) => cabling::Reading::Read,
            (Some(_), None) => {
                let failed = status
                    .conditions
                    .iter()
                    .any(|c| c.type_ == crate::decide::neighbors::CONDITION && c.status == "False");
                if failed {
                    cabling::Reading::Failed
                } else {
                    cabling::Reading::NotYet
                }
            }
        },
        seen: status.neighbors.into_iter().find(|p| p.port == device_port),
        words: format!(
            "SwitchPort {}/{} (Switch {switch_name}, {device_port})",
            port.namespace, port.name
        ),
        strict,
    })
}

/// Where else `mac` is seen, other than at `except` (Switch `namespace/name`, device
/// port), from every Switch's status, each with whose port it is (the NIC's host
/// `me` excepted: its own other ports are its own evidence).
fn seen_elsewhere(
    world: &HostWorld,
    me: &str,
    mac: &str,
    except: &(String, String),
) -> Vec<cabling::Elsewhere> {
    let servers = world.stores.servers.state();
    sightings(world, &servers, me, mac)
        .iter()
        .filter(|s| s.at != *except)
        .map(cabling::Sighting::elsewhere)
        .collect()
}

/// Every port `mac` is seen on, from every Switch's status, as discovery weighs it
/// ([`cabling::discover`]): the SwitchPort managing it, and the host that already
/// has it — a Server of `servers` other than `me` declared on it, or the host whose
/// mark it carries.
pub fn sightings(
    world: &HostWorld,
    servers: &[Arc<crate::api::Server>],
    me: &str,
    mac: &str,
) -> Vec<cabling::Sighting> {
    let mut found = Vec::new();
    for sw in world.stores.switches.state() {
        let Some(status) = &sw.status else { continue };
        let ns = sw.namespace().unwrap_or_default();
        let at = format!("{ns}/{}", sw.name_any());
        for p in status
            .neighbors
            .iter()
            .filter(|p| cabling::sees_mac(p, mac))
        {
            let port = p.switch_port.clone().map(|sp| (ns.clone(), sp));
            let taken_by = port.as_ref().and_then(|(ns, sp)| {
                let declared = servers.iter().find(|s| {
                    format!("Server/{}", s.name_any()) != me
                        && crate::decide::phases::cabled_to(
                            &s.spec.nics,
                            CabledPortKind::SwitchPort,
                            ns,
                            sp,
                        )
                });
                if let Some(s) = declared {
                    return Some((
                        format!("Server/{}", s.name_any()),
                        s.spec.claim_ref.is_some(),
                    ));
                }
                let id = PortId {
                    kind: CabledPortKind::SwitchPort,
                    namespace: ns.clone(),
                    name: sp.clone(),
                };
                // The host whose mark the port carries: allocated when it is a
                // Server bound to a claim.
                look_up(world, &id)
                    .and_then(|(o, _)| o.host)
                    .filter(|h| h != me)
                    .map(|h| {
                        let allocated = allocated(world, servers, &h);
                        (h, allocated)
                    })
            });
            found.push(cabling::Sighting {
                words: format!("Switch {at} port {}", p.port),
                at: (at.clone(), p.port.clone()),
                by_lldp: p.lldp.iter().any(|n| {
                    cabling::same_mac(&n.chassis_id, mac) || cabling::same_mac(&n.port_id, mac)
                }),
                port,
                taken_by,
            });
        }
    }
    found
}

/// Checks each SwitchPort target's cabling ([`cabling::check`]) and parks
/// ([`cabling::action`]) the ports that must not move: their target becomes clean
/// and a message holds the phase.
fn check_cabling(
    world: &HostWorld,
    view: &HostView<'_>,
    phase: ServerPhase,
    targets: Vec<NicTarget>,
) -> (Vec<NicTarget>, Vec<NicCabling>, Vec<String>) {
    let host_macs: Vec<&str> = view.nics.iter().filter_map(|n| n.mac.as_deref()).collect();
    let mut report = Vec::new();
    let mut miscabled = Vec::new();
    let targets = targets
        .into_iter()
        .map(|mut t| {
            let Some(nic) = view.nics.iter().find(|n| n.name == t.nic) else {
                return t;
            };
            if t.port.kind != CabledPortKind::SwitchPort {
                return t;
            }
            let Some(sight) = sight(world, &t.port) else {
                return t;
            };
            let mac = nic.mac.as_deref();
            // Where else the NIC is seen matters only when its LLDP is not seen here.
            let by_lldp_here = sight
                .seen
                .as_ref()
                .zip(mac)
                .is_some_and(|(s, m)| cabling::named_by_lldp(s, m, &host_macs));
            let seen_on = match mac {
                Some(mac) if sight.reading == cabling::Reading::Read && !by_lldp_here => {
                    seen_elsewhere(world, &view.me, mac, &sight.at)
                }
                _ => Vec::new(),
            };
            let mut verdict = cabling::check(
                mac,
                &host_macs,
                sight.seen.as_ref(),
                sight.reading,
                &seen_on,
            );
            // Seen nowhere on the wire: a Metal3 inspection of the host may say where.
            if verdict == cabling::Cabling::NotSeen
                && let Some(mac) = mac
            {
                let hardware = view
                    .bare_metal_host
                    .as_ref()
                    .and_then(|h| inspection(world, h));
                let inspected = hardware.and_then(|hw| cabling::inspected(&hw, mac));
                if let Some(v) = cabling::by_inspection(
                    inspected.as_ref(),
                    sight.chassis.as_deref(),
                    &sight.at.1,
                ) {
                    verdict = v;
                }
            }
            let policy = if sight.strict {
                CablingPolicy::Strict
            } else {
                view.cabling_policy
            };
            let observed = look_up(world, &t.port).map(|(o, _)| o);
            let running = phase == ServerPhase::Provisioned
                && observed.as_ref().is_some_and(|o| {
                    o.state == Some(crate::api::PortState::Active)
                        && o.applied.is_some()
                        && o.applied == t.configuration
                });
            // A port headed for clean needs no parking unless the Switch parks
            // elsewhere; a host going away gets its ports clean whatever they see.
            let parks_elsewhere = sight.parking.is_some() && phase != ServerPhase::Deleting;
            let action = if t.configuration.is_some() || parks_elsewhere {
                cabling::action(&verdict, policy, running)
            } else {
                Action::Proceed
            };
            let entry = NicCabling {
                nic: t.nic.clone(),
                mac: mac.map(str::to_owned),
                port: sight.words,
                verdict,
                action,
                seen_on,
            };
            match action {
                Action::Park => {
                    miscabled.push(format!(
                        "{} ({}): parked, its cabling is not confirmed (see CablingVerified)",
                        t.port, t.nic
                    ));
                    t.source = if sight.parking.is_some() {
                        Source::Parked
                    } else {
                        Source::Clean
                    };
                    t.configuration = sight.parking.clone();
                }
                Action::Wait => {
                    miscabled.push(format!(
                        "{} ({}): left as it is until its Switch's neighbours are read",
                        t.port, t.nic
                    ));
                    // What the port carries now, if this host set it: nothing is written.
                    t.configuration = observed
                        .filter(|o| o.host.as_deref() == Some(view.me.as_str()))
                        .and_then(|o| o.configuration);
                    if t.configuration.is_none() {
                        t.source = Source::Clean;
                    }
                }
                Action::Proceed | Action::ReportOnly => {}
            }
            report.push(entry);
            t
        })
        .collect();
    (targets, report, miscabled)
}

/// The claim's targets (and a NIC's default configuration applied under the claim)
/// that the claim's namespace may not carry: dropped, their ports left as they are,
/// one message each. A SwitchPortConfiguration's VLANs are checked against the
/// grants on the port's Switch here; a SmartNicConfiguration's reference is, and
/// its VLANs are checked by the SmartNicPort's controller before anything is sent.
fn refuse_ungranted(
    world: &HostWorld,
    targets: Vec<NicTarget>,
    network: Option<ClaimNetwork<'_>>,
) -> (Vec<NicTarget>, Vec<(NicTarget, Vec<String>)>) {
    use crate::decide::tenancy::{Carrying, Reference, Settings, is_shared, judge};
    let (Some(t), Some(net)) = (world.tenancy.as_ref(), network) else {
        return (targets, Vec::new());
    };
    let tenant = net.namespace;
    if t.is_infra(tenant) {
        return (targets, Vec::new());
    }
    let grants = world.stores.grants(Some(t.parking_vlan));
    let mut forbidden = Vec::new();
    let mut kept = Vec::with_capacity(targets.len());
    for target in targets {
        let why = {
            let (Source::Claim | Source::Nic, Some(c)) = (target.source, &target.configuration)
            else {
                kept.push(target);
                continue;
            };
            let cns = c.namespace.as_deref().unwrap_or_default();
            let (kind, labels, port, switch) = match target.port.kind {
                CabledPortKind::SwitchPort => {
                    let cfg = world
                        .configurations
                        .get(&ObjectRef::new(&c.name).within(cns));
                    let switch = world
                        .switch_ports
                        .get(&ObjectRef::new(&target.port.name).within(&target.port.namespace))
                        .and_then(|p| super::switch_port::switch_name(&p, &world.port_index));
                    (
                        "SwitchPortConfiguration",
                        cfg.as_ref().and_then(|c| c.metadata.labels.clone()),
                        cfg.map(|c| {
                            let group = c.spec.link_aggregation.as_ref().map(|l| l.group);
                            (c.spec.port.clone(), group)
                        }),
                        switch,
                    )
                }
                CabledPortKind::SmartNicPort => ("SmartNicConfiguration", None, None, None),
            };
            // A NIC's default configuration is the infra team's: its reference is
            // theirs to make; what it carries must still be granted to the claim.
            let verdict = judge(
                Some(t),
                &grants,
                &Carrying {
                    tenant,
                    switch: switch.as_deref(),
                    reference: (target.source == Source::Claim).then(|| Reference {
                        namespace: cns,
                        shared: is_shared(labels.as_ref()),
                        field: format!(
                            "networkConfiguration for NIC {}: {kind} {cns}/{}",
                            target.nic, c.name
                        ),
                    }),
                    settings: port.as_ref().map(|(port, group)| Settings {
                        port,
                        group: *group,
                        what: format!("NIC {}: {kind} {cns}/{}", target.nic, c.name),
                    }),
                },
            );
            verdict.refusals().to_vec()
        };
        if why.is_empty() {
            kept.push(target);
        } else {
            forbidden.push((target, why));
        }
    }
    (kept, forbidden)
}

/// The targets of `phase` for `view`, less those refused (a provisioning
/// configuration with a link-aggregation group), plus a clean target for every port
/// in `marked` (carrying the host's mark) that no NIC is cabled to any more.
fn targets_of(
    world: &HostWorld,
    view: &HostView<'_>,
    marked: &BTreeSet<PortId>,
    phase: ServerPhase,
) -> Targets {
    let (targets, unmatched) = port_targets(phase, view.nics, view.network);
    let cabled: BTreeSet<PortId> = targets.iter().map(|t| t.port.clone()).collect();
    let group_of = |c: &ConfigurationRef| {
        let ns = c.namespace.as_deref().unwrap_or_default();
        let cfg = world
            .configurations
            .get(&ObjectRef::new(&c.name).within(ns))?;
        cfg.spec.link_aggregation.as_ref().map(|l| l.group)
    };
    let (targets, refused) = refuse_grouped_provisioning(targets, group_of, view.nic_field);
    let (targets, forbidden) = refuse_ungranted(world, targets, view.network);
    let messages = (
        refused.iter().map(|(_, why)| why.clone()).collect(),
        forbidden.iter().flat_map(|(_, why)| why.clone()).collect(),
    );
    let withheld: Vec<(NicTarget, String)> = refused
        .into_iter()
        .chain(
            forbidden
                .into_iter()
                .map(|(t, why)| (t, format!("forbidden: {}", why.join("; ")))),
        )
        .collect();
    let (refused, forbidden) = messages;
    let (mut targets, cabling, miscabled) = check_cabling(world, view, phase, targets);
    for port in marked.difference(&cabled) {
        targets.push(NicTarget {
            nic: "no longer cabled".into(),
            port: port.clone(),
            configuration: None,
            source: Source::Clean,
        });
    }
    Targets {
        ports: targets,
        unmatched,
        refused,
        forbidden,
        withheld,
        cabling,
        miscabled,
    }
}

/// How the ports stand against `targets`, without writing.
fn judge(world: &HostWorld, me: &str, targets: &[NicTarget]) -> bool {
    targets.iter().all(|t| {
        let o = look_up(world, &t.port).map(|(o, _)| o);
        port_step(t.configuration.as_ref(), o.as_ref(), me)
            .1
            .settled()
    })
}

/// One pass over a host: the phase step, the port writes it calls for, the Metal3
/// gate. Returns the facts its status is computed from.
pub async fn drive_host(
    world: &HostWorld,
    view: &HostView<'_>,
) -> Result<HostFacts, ControllerError> {
    let marked = marked(world, &view.me);
    let current = view.phase.map(|p| (p, targets_of(world, view, &marked, p)));
    let settled_now = current
        .as_ref()
        .is_some_and(|(_, targets)| targets.settled(world, &view.me));
    let step = hold_for_bgp(
        next_phase(view.phase, view.driver, view.deleting, settled_now),
        view.phase,
        view.bgp_peered,
    );
    let Targets {
        ports: targets,
        unmatched,
        refused,
        forbidden,
        withheld,
        cabling,
        miscabled,
    } = match current {
        Some((p, same)) if p == step.phase => same,
        _ => targets_of(world, view, &marked, step.phase),
    };
    let mut ports = Vec::with_capacity(targets.len());
    let mut conflict = None;
    for t in targets {
        let found = look_up(world, &t.port);
        let (o, version) = match found {
            Some((o, v)) => (Some(o), v),
            None => (None, None),
        };
        let (write, verdict) = port_step(t.configuration.as_ref(), o.as_ref(), &view.me);
        // Held for its BGP neighbours: the ports keep what they carry (the claim's
        // network, whose binding is already gone) until the neighbours are off.
        let write = write.filter(|_| step.hold != Some(Hold::BgpPeers));
        if let Some(w) = &write {
            match write_port(world, &t.port, version, &view.me, w).await {
                Ok(()) => {}
                Err(kube::Error::Api(s)) if s.code == 409 => conflict = Some(s),
                Err(e) => return Err(e.into()),
            }
        }
        let state = o.as_ref().and_then(|o| o.state);
        ports.push((t, verdict, state));
    }
    // A refused target's port is left as it is, and listed with why.
    for (t, why) in withheld {
        let state = look_up(world, &t.port).and_then(|(o, _)| o.state);
        ports.push((t, crate::decide::phases::Verdict::Refused(why), state));
    }
    let (host, gate) = match &view.bare_metal_host {
        Some(bmh) => {
            let state = bmh.status.provisioning.state.as_str();
            let goal = if view.deleting {
                Some(ServerPhase::Deleting)
            } else {
                metal3_goal(Some(state))
            };
            let settled = unmatched.is_empty()
                && refused.is_empty()
                && forbidden.is_empty()
                && miscabled.is_empty()
                && ports.iter().all(|(_, v, _)| v.settled());
            let paused = bmh.annotations().get(PAUSED_ANNOTATION).map(String::as_str);
            let gate = metal3_gate(goal, settled, paused);
            apply_gate(world, bmh, &gate).await?;
            let linked = LinkedHost {
                namespace: bmh.namespace().unwrap_or_default(),
                name: bmh.name_any(),
                state: Some(state.to_owned()),
            };
            (Some(linked), Some(gate))
        }
        None => (None, None),
    };
    if let Some(s) = conflict {
        return Err(kube::Error::Api(s).into());
    }
    Ok(HostFacts {
        step,
        ports,
        unmatched,
        refused,
        forbidden,
        cabling,
        miscabled,
        host,
        gate,
    })
}

/// Writes `annotations` (a JSON object; `null` removes one) on a BareMetalHost,
/// over the version read: the host's spec and status are BMO's, so what patchbay
/// must say there goes into annotations, never from a stale read.
pub async fn annotate(
    world: &HostWorld,
    bmh: &BareMetalHost,
    annotations: serde_json::Value,
) -> Result<(), kube::Error> {
    let api: Api<BareMetalHost> =
        Api::namespaced(world.client.clone(), &bmh.namespace().unwrap_or_default());
    let patch = json!({"metadata": {
        "resourceVersion": bmh.resource_version(),
        "annotations": annotations,
    }});
    api.patch(
        &bmh.name_any(),
        &PatchParams::default(),
        &Patch::Merge(patch),
    )
    .await
    .map(|_| ())
}

/// Sets or removes patchbay's pause on a BareMetalHost, with an Event on the host.
/// The write is guarded by the host's resourceVersion, so a pause somebody else set
/// in the meantime is never overwritten.
async fn apply_gate(
    world: &HostWorld,
    bmh: &BareMetalHost,
    gate: &Gate,
) -> Result<(), ControllerError> {
    let (value, reason, note) = match gate {
        Gate::Hold => (
            Some(PAUSED_BY_PATCHBAY),
            "PortsHold",
            "paused by patchbay until the host's ports carry the provisioning network",
        ),
        Gate::Release => (
            None,
            "PortsRelease",
            "pause removed by patchbay: the host's ports are ready",
        ),
        Gate::Open | Gate::Holding | Gate::Foreign(_) => return Ok(()),
    };
    annotate(world, bmh, json!({PAUSED_ANNOTATION: value})).await?;
    tracing::info!(host = %format!("{}/{}", bmh.namespace().unwrap_or_default(), bmh.name_any()), reason, "BareMetalHost gate");
    world
        .events
        .publish(bmh, Severity::Normal, reason, note)
        .await;
    Ok(())
}

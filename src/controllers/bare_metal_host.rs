//! The BareMetalHost controller: a Metal3 BareMetalHost that carries Metal3's own
//! `spec.networkInterfaces` (with `--metal3-switches`: each interface on the
//! declared port its `switchPort`, inspection's LLDP (the host's HardwareData) or
//! patchbay's own neighbour reads name — a port found on the wire is kept in the
//! host's `patchbay.dev/discovered-ports` annotation —, checked on the wire, carrying
//! its HostNetworkAttachment once provisioned; [`crate::decide::metal3_host`]) or
//! seed 003's `spec.ports` (the upstream CRD prunes that field, so this only
//! happens on clusters whose CRD has it) is a host like a Server with those
//! NICs — same phases, same pure functions, same gate ([`super::host::drive_host`]). A
//! host that a Server links to (by reference or boot MAC) is driven by that Server
//! instead, and its `spec.ports` is ignored; ports it drove before are handed to
//! the Server (those the Server is cabled to) or cleaned
//! ([`super::host::hand_over`]).
//!
//! The host's status belongs to the baremetal-operator, so patchbay records what it
//! needs on the host's annotations: `patchbay.dev/phase` (its memory of the phase)
//! and `patchbay.dev/ports` (`2/2`, or what holds the ports back), and publishes
//! phase changes and refusals as Events on the host. patchbay puts no finalizer on
//! somebody else's object: the ports are cleaned when the host reaches BMO's
//! `deleting` states, and a port still carrying the host's mark after the host is
//! gone is left as it is (a Server linked to the host does hold a finalizer).
//! Under tenancy only hosts of trusted namespaces drive ports: the infra namespace
//! and `--trusted-host-namespaces`; their ports serve the namespace of what they
//! carry (a tenant's HostNetworkAttachment: that tenant), whose grants it passes as
//! a claim's does. Kubernetes I/O.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use serde_json::json;

use super::ControllerError;
use super::host::{HostView, drive_host};
use super::server::ServerCtx;
use crate::api::ServerPhase;
use crate::api::keys::{PHASE_ANNOTATION, PORTS_ANNOTATION};
use crate::api::metal3::BareMetalHost;
use crate::decide::cabling;
use crate::decide::metal3_host::{DISCOVERED_ANNOTATION, Unplaced, with_discovered};
use crate::decide::phases::{Driver, bare_metal_host_mark, bare_metal_host_nics};
use crate::decide::status::Severity;

/// How often a host a Server links to is looked at again: the Server's deletion
/// reaches it by no event, and its own interfaces then drive its ports again.
const LINKED_RECHECK: Duration = Duration::from_secs(300);

/// Reconciles one BareMetalHost.
pub(super) async fn reconcile(
    host: Arc<BareMetalHost>,
    ctx: Arc<ServerCtx>,
) -> Result<Action, ControllerError> {
    let servers = crate::triggers::servers_of_host(&ctx.alloc.servers.state(), &host);
    let linked = !servers.is_empty();
    let me = bare_metal_host_mark(&host);
    let server = servers.first().and_then(|r| {
        ctx.alloc
            .servers
            .state()
            .into_iter()
            .find(|s| s.name_any() == r.name)
    });
    // A host a Server links to is driven by that Server alone. Ports this host
    // drove before the Server linked are handed to it.
    if let Some(server) = &server {
        let to = format!("Server/{}", server.name_any());
        let (handed, cleaning) = super::host::hand_over(&ctx.world, &me, &to, |p| {
            crate::decide::phases::cabled_to(&server.spec.nics, p.kind, &p.namespace, &p.name)
        })
        .await?;
        if handed > 0 {
            let note = format!(
                "{handed} port(s) this host drove handed to Server {} (it links to the host \
                 and is cabled to them); they keep what they carry until it moves them",
                server.name_any()
            );
            ctx.world
                .events
                .publish(host.as_ref(), Severity::Normal, "PortsHandedOver", &note)
                .await;
            ctx.world
                .events
                .publish(server.as_ref(), Severity::Normal, "PortsHandedOver", &note)
                .await;
        }
        if cleaning > 0 {
            // Woken by those ports' changes; looked at again meanwhile too.
            return Ok(Action::requeue(Duration::from_secs(30)));
        }
    }
    // Metal3's networkInterfaces on a linked host are ignored, and both objects
    // say so.
    if let Some(server) = &server
        && ctx.world.metal3.is_some()
        && host.spec.network_interfaces.is_some()
    {
        let note = format!(
            "spec.networkInterfaces ignored: Server {} drives this host's ports (it links \
             to the host by spec.bareMetalHostRef or boot MAC)",
            server.name_any()
        );
        if say_ignored(&host, &ctx, &note, Severity::Normal, "PortsDrivenByServer").await? {
            let on_server = format!(
                "BareMetalHost {}/{} lists spec.networkInterfaces; this Server drives its \
                     ports, and they are ignored",
                host.namespace().unwrap_or_default(),
                host.name_any()
            );
            ctx.world
                .events
                .publish(
                    server.as_ref(),
                    Severity::Normal,
                    "PortsDrivenByServer",
                    &on_server,
                )
                .await;
        }
        return Ok(Action::requeue(LINKED_RECHECK));
    }
    // Metal3's own `networkInterfaces` (with --metal3-switches), else seed 003's
    // `spec.ports`.
    let interfaces = match (&ctx.world.metal3, &host.spec.network_interfaces) {
        (Some(m), Some(_)) if !*m.switches_listed.borrow() => {
            // The BareMetalSwitches are not listed yet (or their CRD is missing):
            // nothing is decided from a cache that may still be filling.
            return Ok(Action::requeue(Duration::from_secs(2)));
        }
        (Some(m), Some(_)) => Some(interfaces_of(&host, &ctx.world, m)),
        _ => None,
    };
    let phase: Option<ServerPhase> = host
        .annotations()
        .get(PHASE_ANNOTATION)
        .and_then(|p| serde_json::from_value(json!(p)).ok());
    let deleting = host.meta().deletion_timestamp.is_some();
    let (nics, errors, waiting) = match interfaces {
        Some((mut i, declared)) => {
            if !i.unplaced.is_empty() && trusted(&host, &ctx) {
                // Discovery runs where an allocated host's would not: before the host
                // runs its user's OS.
                let may = !deleting
                    && matches!(
                        phase,
                        None | Some(ServerPhase::Available | ServerPhase::Provisioning)
                    )
                    && crate::decide::phases::metal3_goal(Some(&host.status.provisioning.state))
                        != Some(ServerPhase::Provisioned);
                if discover(&host, &ctx, &i.unplaced, &declared, may, &mut i.waiting).await? {
                    // The annotation's write wakes this host again.
                    return Ok(Action::await_change());
                }
            }
            (i.nics, i.refused, i.waiting)
        }
        None => {
            let (nics, errors) = bare_metal_host_nics(&host);
            (nics, errors, Vec::new())
        }
    };
    let from_interfaces = ctx.world.metal3.is_some() && host.spec.network_interfaces.is_some();
    // Nothing to drive: no ports, no phase, no port still marked (scanned last).
    let idle = nics.is_empty()
        && errors.is_empty()
        && waiting.is_empty()
        && phase.is_none()
        && super::host::marked(&ctx.world, &me).is_empty();
    if linked {
        return Ok(Action::requeue(LINKED_RECHECK));
    }
    if idle {
        return Ok(Action::await_change());
    }
    // Under tenancy a host's spec.ports names SwitchPorts and configurations of any
    // namespace, acted on with the operator's rights: honoured only in namespaces
    // the settings trust (the infra namespace, --trusted-host-namespaces). Ports it
    // marked before are left as they are.
    let ns = host.namespace().unwrap_or_default();
    if !trusted(&host, &ctx) {
        let ignored = format!(
            "{} ignored: namespace {ns} is not trusted to drive ports \
             (--trusted-host-namespaces)",
            if from_interfaces {
                "spec.networkInterfaces"
            } else {
                "spec.ports"
            }
        );
        say_ignored(&host, &ctx, &ignored, Severity::Warning, "PortsIgnored").await?;
        return Ok(Action::await_change());
    }
    let field = if from_interfaces {
        "spec.networkInterfaces"
    } else {
        "spec.ports"
    };
    let nic_field = |name: &str| {
        let entries = if from_interfaces {
            host.spec.network_interfaces.as_ref()
        } else {
            host.spec.ports.as_ref()
        }
        .and_then(|p| p.as_array());
        entries
            .and_then(|e| {
                e.iter()
                    .position(|e| e.get("name").and_then(|n| n.as_str()) == Some(name))
            })
            .map_or_else(
                || format!("{field} (NIC {name})"),
                |i| format!("{field}[{i}]"),
            )
    };
    let view = HostView {
        me,
        nics: &nics,
        nic_field: &nic_field,
        network: None,
        driver: Driver::Metal3 {
            // Found: the name is never shown.
            host: "",
            state: Some(host.status.provisioning.state.as_str()),
        },
        deleting,
        phase,
        bare_metal_host: Some(host.clone()),
        cabling_policy: crate::api::CablingPolicy::Permissive,
        // A BareMetalHost carrying its own ports has no claim, so no BGP.
        bgp_peered: false,
    };
    let facts = drive_host(&ctx.world, &view).await?;
    let ready = facts.ports.iter().filter(|(_, v, _)| v.settled()).count();
    let mut ports = format!("{ready}/{}", facts.ports.len());
    let mut conditions = Vec::new();
    crate::decide::status::host_conditions(&mut conditions, &facts, None, jiff::Timestamp::now());
    let why: Vec<String> = conditions
        .iter()
        .filter(|c| c.type_ == "PortsReady" && c.status != "True")
        .map(|c| format!("{}: {}", c.reason, c.message))
        .chain(errors.iter().cloned())
        .chain(waiting.iter().cloned())
        .collect();
    if !why.is_empty() {
        ports = format!("{ports}; {}", why.join("; "));
    }
    let new_phase = facts.step.phase.to_string();
    let annotations = host.annotations();
    if annotations.get(PHASE_ANNOTATION) != Some(&new_phase)
        || annotations.get(PORTS_ANNOTATION) != Some(&ports)
    {
        let says = json!({PHASE_ANNOTATION: new_phase, PORTS_ANNOTATION: ports});
        super::host::annotate(&ctx.world, &host, says).await?;
    }
    if let Some(from) = phase
        && from != facts.step.phase
    {
        let note = format!("{from} → {}", facts.step.phase);
        ctx.world
            .events
            .publish(host.as_ref(), Severity::Normal, "PhaseChanged", &note)
            .await;
    }
    if !errors.is_empty() {
        ctx.world
            .events
            .publish(
                host.as_ref(),
                Severity::Warning,
                "InvalidPorts",
                &errors.join("; "),
            )
            .await;
    }
    Ok(Action::requeue(Duration::from_secs(300)))
}

/// Whether the host's namespace may drive ports: all without tenancy; under it, the
/// infra namespace and `--trusted-host-namespaces`.
fn trusted(host: &BareMetalHost, ctx: &ServerCtx) -> bool {
    ctx.world
        .tenancy
        .as_ref()
        .is_none_or(|t| t.trusts_hosts_of(&host.namespace().unwrap_or_default()))
}

/// Says on the host why its ports are not its own to drive: `note` in its
/// `patchbay.dev/ports` annotation (over the version read) and an Event, once —
/// nothing when the annotation says so already. Whether it was said now.
async fn say_ignored(
    host: &BareMetalHost,
    ctx: &ServerCtx,
    note: &str,
    severity: Severity,
    reason: &str,
) -> Result<bool, ControllerError> {
    if host.annotations().get(PORTS_ANNOTATION).map(String::as_str) == Some(note) {
        return Ok(false);
    }
    super::host::annotate(&ctx.world, host, json!({PORTS_ANNOTATION: note})).await?;
    ctx.world.events.publish(host, severity, reason, note).await;
    Ok(true)
}

/// The host's `networkInterfaces` resolved against the BareMetalSwitches, the
/// ports the Switches naming them declare and the host's inspection; with the
/// declared ports (namespace, SwitchPort), which discovery may link to.
fn interfaces_of(
    host: &BareMetalHost,
    world: &super::host::HostWorld,
    m: &super::host::Metal3World,
) -> (
    crate::decide::metal3_host::Interfaces,
    BTreeSet<(String, String)>,
) {
    use crate::decide::metal3_host::{DeclaredPort, Fabric, KnownSwitch, network_interfaces};
    let bmss = m.switches.state();
    let known: Vec<KnownSwitch<'_>> = bmss
        .iter()
        .map(|b| KnownSwitch {
            namespace: b.metadata.namespace.as_deref().unwrap_or_default(),
            name: b.metadata.name.as_deref().unwrap_or_default(),
            mac: &b.spec.mac_address,
        })
        .collect();
    let switches = world.stores.switches.state();
    let declared: Vec<DeclaredPort<'_>> = switches
        .iter()
        .filter(|s| {
            known.iter().any(|k| {
                Some(k.namespace) == s.metadata.namespace.as_deref()
                    && k.name == s.spec.provider.name
            })
        })
        .flat_map(|s| {
            s.spec.ports.iter().map(move |(key, p)| DeclaredPort {
                namespace: s.metadata.namespace.as_deref().unwrap_or_default(),
                provider: &s.spec.provider.name,
                key,
                device_port: &p.name,
            })
        })
        .collect();
    let inspection = super::host::inspection(world, host);
    let interfaces = network_interfaces(
        host,
        &Fabric {
            switches: &known,
            declared: &declared,
            partial: false,
            inspection: inspection.as_ref(),
        },
        m.provisioning.as_ref(),
    );
    let keys = declared
        .iter()
        .map(|d| (d.namespace.to_owned(), d.key.to_owned()))
        .collect();
    (interfaces, keys)
}

/// Looks for each interface no `switchPort` or inspection places by its MAC on the
/// ports the Switches' neighbour sources read ([`cabling::discover`]: only while the
/// host is not yet provisioned, never on another host's port), taking only a port
/// declared on a BareMetalSwitch. What it finds goes into the host's
/// [`DISCOVERED_ANNOTATION`] (over the version read), with a Normal Event for each;
/// the link then stays. Says in `waiting` why each other one is not found; returns
/// whether it wrote.
async fn discover(
    host: &BareMetalHost,
    ctx: &ServerCtx,
    unplaced: &[Unplaced],
    declared: &BTreeSet<(String, String)>,
    may: bool,
    waiting: &mut [String],
) -> Result<bool, ControllerError> {
    let me = bare_metal_host_mark(host);
    let servers = ctx.alloc.servers.state();
    let mut found = Vec::new();
    let mut notes = Vec::new();
    for u in unplaced {
        let seen = super::host::sightings(&ctx.world, &servers, &me, &u.mac);
        let why = match cabling::discover(&seen, may) {
            Ok((ns, name)) if declared.contains(&(ns.clone(), name.clone())) => {
                notes.push(format!(
                    "{} (NIC {}, {}) linked to SwitchPort {ns}/{name}: its MAC is seen on {}",
                    u.field, u.nic, u.mac, seen[0].words
                ));
                found.push((u.mac.clone(), ns, name));
                continue;
            }
            Ok((ns, name)) => format!(
                "its MAC is seen on SwitchPort {ns}/{name}, which is declared on no \
                 BareMetalSwitch: nothing is linked"
            ),
            Err(cabling::Cabling::Undiscovered(why)) => why,
            Err(other) => format!("{other:?}"),
        };
        let head = format!("{}: ", u.field);
        if let Some(w) = waiting.iter_mut().find(|w| w.starts_with(&head)) {
            w.push_str(&format!(" ({why})"));
        }
    }
    if found.is_empty() {
        return Ok(false);
    }
    let link = json!({DISCOVERED_ANNOTATION: with_discovered(host, &found)});
    super::host::annotate(&ctx.world, host, link).await?;
    for note in &notes {
        tracing::info!(host = %me, "{note}");
        ctx.world
            .events
            .publish(host, Severity::Normal, "CablingDiscovered", note)
            .await;
    }
    Ok(true)
}

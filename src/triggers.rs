//! Which objects an event wakes: a SwitchPortConfiguration wakes the ports linked to
//! it, a Switch its ports, a ProviderSwitch the ports of its Switches, a credentials
//! Secret the ports of the Switches whose ProviderSwitch reads it, and the same for
//! SmartNicPorts; a Server the claim it is bound to, the claims that list it and
//! the claims of its site still waiting for Servers (and the claim it is leaving);
//! a port the Server that drives it or is cabled to it; a claim its Servers; a
//! BareMetalHost the Servers linked to it; a Switch that reads neighbours the hosts
//! cabled to its ports (their cabling is checked against what the ports see). The
//! runtime calls these with its caches' contents. Pure, no I/O.
//!
//! It lives in the operator crate, not the pure core, because what it returns is
//! kube-runtime's key (`ObjectRef`, what a controller's wake stream takes) and what
//! it reads for ports is the cache's record ([`crate::compact_port`]); neither can
//! be named from a crate without kube-runtime.

use std::collections::BTreeSet;
use std::sync::Arc;

use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;

use crate::api::keys::{CHAINED_FROM_ANNOTATION, HOST_ANNOTATION};
use crate::api::metal3::BareMetalHost;
use crate::api::server::{CabledPortKind, ServerNic};
use crate::api::{
    ConfigurationRef, ProviderSwitch, Server, ServerClaim, SmartNicPort, Switch, SwitchPort,
    SwitchPortConfiguration,
};
use crate::compact_port::CompactPort;
use crate::decide::phases::{bare_metal_host_nics, cabled_to};
use crate::decide::port_index::PortIndex;

/// Whether `reference`, held by an object of namespace `holder_ns`, names object
/// `name` of namespace `ns` (a reference without namespace means the holder's).
fn names(reference: &ConfigurationRef, holder_ns: Option<&str>, ns: &str, name: &str) -> bool {
    reference.name == name && reference.namespace.as_deref().or(holder_ns) == Some(ns)
}

/// Objects (of `objs`) whose configuration reference (read by `reference`) names
/// `ns/name`.
fn linked_to<K>(
    objs: &[Arc<K>],
    ns: &str,
    name: &str,
    reference: impl Fn(&K) -> Option<&ConfigurationRef>,
) -> Vec<ObjectRef<K>>
where
    K: kube::Resource<DynamicType = ()> + ResourceExt,
{
    objs.iter()
        .filter(|o| reference(o).is_some_and(|r| names(r, o.namespace().as_deref(), ns, name)))
        .map(|o| ObjectRef::from_obj(o.as_ref()))
        .collect()
}

/// Ports linked to the SwitchPortConfiguration `ns/name`.
pub fn ports_using_configuration(
    ports: &[Arc<CompactPort>],
    ns: &str,
    name: &str,
) -> Vec<ObjectRef<SwitchPort>> {
    ports
        .iter()
        .filter(|p| {
            p.configuration()
                .is_some_and(|(n, in_ns)| n == name && in_ns.unwrap_or(p.namespace()) == ns)
        })
        .map(|p| p.object_ref())
        .collect()
}

/// Ports of the Switches named `switches` in namespace `ns` (by their Switch label,
/// looked up in the index rather than scanned).
pub fn ports_of_switches(
    index: &PortIndex,
    ns: Option<&str>,
    switches: &[String],
) -> Vec<ObjectRef<SwitchPort>> {
    let ns = ns.unwrap_or_default();
    switches
        .iter()
        .flat_map(|s| index.of_switch(ns, s))
        .map(|name| ObjectRef::new(&name).within(ns))
        .collect()
}

/// Names of the Switches of namespace `ns` that use one of `providers`.
pub fn switches_of_providers(
    switches: &[Arc<Switch>],
    ns: Option<&str>,
    providers: &[String],
) -> Vec<String> {
    switches
        .iter()
        .filter(|s| s.namespace().as_deref() == ns && providers.contains(&s.spec.provider.name))
        .map(|s| s.name_any())
        .collect()
}

/// Ports whose Switch's ProviderSwitch reads the Secret `ns/name`.
pub fn ports_using_secret(
    ports: &PortIndex,
    switches: &[Arc<Switch>],
    providers: &[Arc<ProviderSwitch>],
    ns: Option<&str>,
    name: &str,
) -> Vec<ObjectRef<SwitchPort>> {
    let mut out = Vec::new();
    for p in providers {
        let reads = p.spec.credentials_secret_ref.as_ref().is_some_and(|r| {
            r.name == name && r.namespace.as_deref().or(p.namespace().as_deref()) == ns
        });
        if reads {
            let pns = p.namespace();
            let names = switches_of_providers(switches, pns.as_deref(), &[p.name_any()]);
            out.extend(ports_of_switches(ports, pns.as_deref(), &names));
        }
    }
    out
}

/// SmartNicPorts linked to the SmartNicConfiguration `ns/name`.
pub fn smartnics_using_configuration(
    snics: &[Arc<SmartNicPort>],
    ns: &str,
    name: &str,
) -> Vec<ObjectRef<SmartNicPort>> {
    linked_to(snics, ns, name, |p| p.spec.configuration.as_ref())
}

/// SmartNicPorts chained to `port`: by their `nextPortRef`, or by the port's claim.
pub fn smartnics_chained_to(
    snics: &[Arc<SmartNicPort>],
    port: &SwitchPort,
) -> Vec<ObjectRef<SmartNicPort>> {
    let (sns, sname) = (port.namespace().unwrap_or_default(), port.name_any());
    let claimed_by = port.annotations().get(CHAINED_FROM_ANNOTATION);
    snics
        .iter()
        .filter(|p| {
            let me = format!("{}/{}", p.namespace().unwrap_or_default(), p.name_any());
            claimed_by == Some(&me)
                || p.spec.next_port_ref.as_ref().is_some_and(|n| {
                    n.name == sname
                        && n.namespace.clone().or_else(|| p.namespace()).as_deref()
                            == Some(sns.as_str())
                })
        })
        .map(|p| ObjectRef::from_obj(p.as_ref()))
        .collect()
}

/// SmartNicPorts on the ProviderSwitch `name` of namespace `ns`.
pub fn smartnics_of_provider(
    snics: &[Arc<SmartNicPort>],
    ns: Option<&str>,
    name: &str,
) -> Vec<ObjectRef<SmartNicPort>> {
    snics
        .iter()
        .filter(|p| p.namespace().as_deref() == ns && p.spec.provider.name == name)
        .map(|p| ObjectRef::from_obj(p.as_ref()))
        .collect()
}

/// Claims a change to `server` may concern: the one it is bound to, those whose
/// status lists it, the one its ports are leaving, and those of its site that are not fully allocated (a Server
/// freed, added or out of maintenance may complete them).
pub fn claims_for_server(
    claims: &[Arc<ServerClaim>],
    server: &Server,
) -> Vec<ObjectRef<ServerClaim>> {
    let name = server.metadata.name.as_deref().unwrap_or_default();
    let bound = server.spec.claim_ref.as_ref();
    claims
        .iter()
        .filter(|c| {
            let status = c.status.as_ref();
            let is_bound = bound.is_some_and(|b| {
                c.metadata.name.as_deref() == Some(b.name.as_str())
                    && c.metadata.namespace.as_deref() == Some(b.namespace.as_str())
            });
            let lists =
                status.is_some_and(|s| s.roles.iter().any(|r| r.servers.iter().any(|n| n == name)));
            let leaving = server
                .status
                .as_ref()
                .and_then(|st| st.claim.as_ref())
                .is_some_and(|l| {
                    c.metadata.name.as_deref() == Some(l.name.as_str())
                        && c.metadata.namespace.as_deref() == Some(l.namespace.as_str())
                });
            let waiting = c.spec.site == server.spec.site
                && !status.is_some_and(|s| {
                    s.observed_generation == c.metadata.generation
                        && s.conditions
                            .iter()
                            .any(|k| k.type_ == "Allocated" && k.status == "True")
                });
            is_bound || lists || leaving || waiting
        })
        .map(|c| ObjectRef::from_obj(c.as_ref()))
        .collect()
}

/// A port's namespace, name and host mark.
fn port_and_mark(port: &kube::core::ObjectMeta) -> (&str, &str, Option<&str>) {
    (
        port.namespace.as_deref().unwrap_or_default(),
        port.name.as_deref().unwrap_or_default(),
        port.annotations
            .as_ref()
            .and_then(|a| a.get(HOST_ANNOTATION))
            .map(String::as_str),
    )
}

/// Servers a change to a port concerns: the one its host mark names, and those
/// with a NIC cabled to it.
pub fn servers_of_port(
    servers: &[Arc<Server>],
    kind: CabledPortKind,
    port: &kube::core::ObjectMeta,
) -> Vec<ObjectRef<Server>> {
    let (ns, name, mark) = port_and_mark(port);
    let mark = mark.and_then(|m| m.strip_prefix("Server/"));
    let mut out: BTreeSet<String> = mark.map(str::to_owned).into_iter().collect();
    for s in servers {
        if cabled_to(&s.spec.nics, kind, ns, name) {
            out.insert(s.name_any());
        }
    }
    out.into_iter().map(|n| ObjectRef::new(&n)).collect()
}

/// Whether `switch`'s status speaks of neighbours (it reads them, or did).
fn reads_neighbors(switch: &Switch) -> bool {
    switch.spec.neighbors.is_some()
        || switch
            .status
            .as_ref()
            .is_some_and(|s| s.neighbors_read_at.is_some())
}

/// Whether one of `nics` is cabled to a SwitchPort of `switch`.
fn cabled_to_switch(nics: &[ServerNic], switch: &Switch) -> bool {
    let ns = switch.namespace().unwrap_or_default();
    switch
        .spec
        .ports
        .keys()
        .any(|port| cabled_to(nics, CabledPortKind::SwitchPort, &ns, port))
}

/// Whether a Switch keeps BGP neighbours (or did: its status still lists some).
fn keeps_bgp(switch: &Switch) -> bool {
    switch.spec.bgp.is_some() || switch.status.as_ref().is_some_and(|s| s.bgp.is_some())
}

/// Switches with BGP a change to `server` concerns: those with a SwitchPort its
/// NICs are cabled to (the host's neighbours follow its binding and phase).
pub fn bgp_switches_of_server(switches: &[Arc<Switch>], server: &Server) -> Vec<ObjectRef<Switch>> {
    switches
        .iter()
        .filter(|s| keeps_bgp(s) && cabled_to_switch(&server.spec.nics, s))
        .map(|s| ObjectRef::from_obj(&**s))
        .collect()
}

/// Every Switch with BGP, when `claim` has a role with BGP (its change may change
/// what its hosts, or a newer claim's, announce); none for a claim without BGP. A
/// claim's every event woke every Switch with BGP before: its status writes while
/// allocating too, each one a pass over every speaker.
pub fn bgp_switches_of_claim(
    switches: &[Arc<Switch>],
    claim: &ServerClaim,
) -> Vec<ObjectRef<Switch>> {
    if !claim.spec.roles.iter().any(|r| r.bgp.is_some()) {
        return Vec::new();
    }
    switches
        .iter()
        .filter(|s| s.spec.bgp.is_some())
        .map(|s| ObjectRef::from_obj(&**s))
        .collect()
}

/// Servers a change to a Switch that reads neighbours or keeps BGP neighbours
/// concerns: those with a NIC cabled to one of its SwitchPorts, and (reading
/// neighbours) those with a NIC that declares a MAC and no port (it may be
/// discovered there); nothing for a Switch that does neither.
pub fn servers_of_switch(servers: &[Arc<Server>], switch: &Switch) -> Vec<ObjectRef<Server>> {
    if !reads_neighbors(switch) {
        if keeps_bgp(switch) {
            return servers
                .iter()
                .filter(|s| cabled_to_switch(&s.spec.nics, switch))
                .map(|s| ObjectRef::new(&s.name_any()))
                .collect();
        }
        return Vec::new();
    }
    let undiscovered =
        |nics: &[ServerNic]| nics.iter().any(|n| n.port.is_none() && n.mac.is_some());
    servers
        .iter()
        .filter(|s| cabled_to_switch(&s.spec.nics, switch) || undiscovered(&s.spec.nics))
        .map(|s| ObjectRef::new(&s.name_any()))
        .collect()
}

/// BareMetalHosts carrying their own ports a change to a Switch that reads
/// neighbours concerns (as [`servers_of_switch`]).
pub fn hosts_of_switch(
    hosts: &[Arc<BareMetalHost>],
    switch: &Switch,
) -> Vec<ObjectRef<BareMetalHost>> {
    // Hosts with Metal3 interfaces look their ports up among the Switches' entries.
    let mut out = hosts_with_interfaces(hosts);
    if !reads_neighbors(switch) {
        return out;
    }
    out.extend(
        hosts
            .iter()
            .filter(|h| {
                h.spec.ports.is_some() && cabled_to_switch(&bare_metal_host_nics(h).0, switch)
            })
            .map(|h| ObjectRef::new(&h.name_any()).within(&h.namespace().unwrap_or_default())),
    );
    out
}

/// The hosts carrying Metal3's `spec.networkInterfaces`: what a BareMetalSwitch, a
/// Switch's entries or a configuration derived from a HostNetworkAttachment may
/// change.
pub fn hosts_with_interfaces(hosts: &[Arc<BareMetalHost>]) -> Vec<ObjectRef<BareMetalHost>> {
    hosts
        .iter()
        .filter(|h| h.spec.network_interfaces.is_some())
        .map(|h| ObjectRef::from_obj(h.as_ref()))
        .collect()
}

/// Ports of `kind` a change to a Server's spec concerns: those its NICs are cabled
/// to (their egress ACL rules name the NIC's MAC, their link-aggregation check the
/// Server).
pub fn ports_cabled_to<K>(server: &Server, kind: CabledPortKind) -> Vec<ObjectRef<K>>
where
    K: kube::Resource<DynamicType = ()>,
{
    let set: BTreeSet<(String, String)> = server
        .spec
        .nics
        .iter()
        .filter_map(|n| n.port.as_ref())
        .filter(|p| p.port_kind() == kind)
        .map(|p| (p.namespace.clone(), p.name.clone()))
        .collect();
    set.into_iter()
        .map(|(ns, name)| ObjectRef::new(&name).within(&ns))
        .collect()
}

/// Servers a change to a claim concerns: those bound to it, and those whose status
/// says their ports carry (or are leaving) its network.
pub fn servers_of_claim(servers: &[Arc<Server>], claim: &ServerClaim) -> Vec<ObjectRef<Server>> {
    let (ns, name) = (
        claim.metadata.namespace.as_deref().unwrap_or_default(),
        claim.metadata.name.as_deref().unwrap_or_default(),
    );
    servers
        .iter()
        .filter(|s| {
            let bound = s
                .spec
                .claim_ref
                .as_ref()
                .is_some_and(|b| b.namespace == ns && b.name == name);
            let leaving = s
                .status
                .as_ref()
                .and_then(|st| st.claim.as_ref())
                .is_some_and(|c| c.namespace == ns && c.name == name);
            bound || leaving
        })
        .map(|s| ObjectRef::from_obj(s.as_ref()))
        .collect()
}

/// Servers linked to a BareMetalHost: by `spec.bareMetalHostRef`, or (without
/// one) by the host's boot MAC.
pub fn servers_of_host(servers: &[Arc<Server>], host: &BareMetalHost) -> Vec<ObjectRef<Server>> {
    let (ns, name) = (
        host.metadata.namespace.as_deref().unwrap_or_default(),
        host.metadata.name.as_deref().unwrap_or_default(),
    );
    let mac = host
        .spec
        .boot_mac_address
        .as_deref()
        .map(str::to_ascii_lowercase);
    servers
        .iter()
        .filter(|s| match &s.spec.bare_metal_host_ref {
            Some(r) => r.namespace == ns && r.name == name,
            None => mac.as_deref() == Some(s.spec.boot_mac.to_ascii_lowercase().as_str()),
        })
        .map(|s| ObjectRef::from_obj(s.as_ref()))
        .collect()
}

/// The BareMetalHosts `server` links to: the one its `spec.bareMetalHostRef` names,
/// or (without one) those with its boot MAC — the reverse of [`servers_of_host`].
pub fn hosts_of_server(
    hosts: &[Arc<BareMetalHost>],
    server: &Server,
) -> Vec<ObjectRef<BareMetalHost>> {
    if let Some(r) = &server.spec.bare_metal_host_ref {
        return vec![ObjectRef::new(&r.name).within(&r.namespace)];
    }
    let mac = server.spec.boot_mac.to_ascii_lowercase();
    hosts
        .iter()
        .filter(|h| {
            h.spec
                .boot_mac_address
                .as_deref()
                .is_some_and(|m| m.to_ascii_lowercase() == mac)
        })
        .map(|h| ObjectRef::from_obj(h.as_ref()))
        .collect()
}

/// Servers linked to some BareMetalHost, by `spec.bareMetalHostRef` or (by boot MAC)
/// as their status last recorded: what Metal3's CRD coming or going concerns.
pub fn servers_linked_to_hosts(servers: &[Arc<Server>]) -> Vec<ObjectRef<Server>> {
    servers
        .iter()
        .filter(|s| {
            s.spec.bare_metal_host_ref.is_some()
                || s.status
                    .as_ref()
                    .is_some_and(|st| st.bare_metal_host.is_some())
        })
        .map(|s| ObjectRef::from_obj(s.as_ref()))
        .collect()
}

/// BareMetalHosts a change to a port concerns: the one its host mark names, and
/// those whose `spec.ports` is cabled to it.
pub fn hosts_of_port(
    hosts: &[Arc<BareMetalHost>],
    kind: CabledPortKind,
    port: &kube::core::ObjectMeta,
) -> Vec<ObjectRef<BareMetalHost>> {
    let (ns, name, mark) = port_and_mark(port);
    let mark = mark
        .and_then(|m| m.strip_prefix("BareMetalHost/"))
        .and_then(|m| m.split_once('/'));
    let mut out: BTreeSet<(String, String)> = mark
        .map(|(n, h)| (n.to_owned(), h.to_owned()))
        .into_iter()
        .collect();
    for h in hosts.iter().filter(|h| h.spec.ports.is_some()) {
        let (nics, _) = bare_metal_host_nics(h);
        if cabled_to(&nics, kind, ns, name) {
            out.insert((h.namespace().unwrap_or_default(), h.name_any()));
        }
    }
    out.into_iter()
        .map(|(n, h)| ObjectRef::new(&h).within(&n))
        .collect()
}

/// Whether a NIC of `nics` is provisioned with the SwitchPortConfiguration of
/// `config` (a NIC's reference without a namespace points to its port's).
fn provisioned_with(nics: &[ServerNic], config: &SwitchPortConfiguration) -> bool {
    let (ns, name) = (
        config.metadata.namespace.as_deref().unwrap_or_default(),
        config.metadata.name.as_deref().unwrap_or_default(),
    );
    nics.iter()
        .any(|n| match (&n.provisioning_configuration, &n.port) {
            (Some(r), Some(p)) => names(r, Some(&p.namespace), ns, name),
            _ => false,
        })
}

/// Servers a change to a SwitchPortConfiguration concerns: those that provision a
/// NIC with it (a provisioning configuration refused for its link-aggregation group
/// lets its host go on once the group is taken out, and the other way round), and
/// those whose claim is of its namespace, or that default a NIC to it (a claim target
/// the tenancy check refused is judged again when its configuration changes).
pub fn servers_provisioned_with(
    servers: &[Arc<Server>],
    config: &SwitchPortConfiguration,
) -> Vec<ObjectRef<Server>> {
    let (ns, name) = (
        config.metadata.namespace.as_deref().unwrap_or_default(),
        config.metadata.name.as_deref().unwrap_or_default(),
    );
    let claimed_in = |s: &Server| {
        s.status
            .as_ref()
            .and_then(|st| st.claim.as_ref())
            .is_some_and(|c| c.namespace == ns)
    };
    let defaults_to = |s: &Server| {
        s.spec
            .nics
            .iter()
            .any(|n| match (&n.configuration, &n.port) {
                (Some(r), Some(p)) => names(r, Some(&p.namespace), ns, name),
                _ => false,
            })
    };
    servers
        .iter()
        .filter(|s| provisioned_with(&s.spec.nics, config) || claimed_in(s) || defaults_to(s))
        .map(|s| ObjectRef::from_obj(s.as_ref()))
        .collect()
}

/// BareMetalHosts carrying their own ports that provision one with `config`.
pub fn hosts_provisioned_with(
    hosts: &[Arc<BareMetalHost>],
    config: &SwitchPortConfiguration,
) -> Vec<ObjectRef<BareMetalHost>> {
    let mut out: Vec<ObjectRef<BareMetalHost>> = hosts
        .iter()
        .filter(|h| h.spec.ports.is_some() && provisioned_with(&bare_metal_host_nics(h).0, config))
        .map(|h| ObjectRef::from_obj(h.as_ref()))
        .collect();
    let derived = config
        .metadata
        .labels
        .as_ref()
        .is_some_and(|l| l.contains_key(crate::decide::metal3_host::ATTACHMENT_LABEL));
    if derived {
        out.extend(hosts_with_interfaces(hosts));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::keys::SWITCH_LABEL;
    use serde_json::json;

    fn obj<K: serde::de::DeserializeOwned>(v: serde_json::Value) -> Arc<K> {
        Arc::new(serde_json::from_value(v).unwrap())
    }

    fn port(ns: &str, name: &str, switch: &str, cfg: Option<serde_json::Value>) -> Arc<SwitchPort> {
        obj(json!({
            "apiVersion": "patchbay.dev/v1alpha1", "kind": "SwitchPort",
            "metadata": {"name": name, "namespace": ns, "labels": {SWITCH_LABEL: switch}},
            "spec": {"configuration": cfg}
        }))
    }

    fn index_of(ports: &[Arc<SwitchPort>]) -> PortIndex {
        let mut index = PortIndex::default();
        for p in ports {
            index.put(p);
        }
        index
    }

    fn names_of<K: kube::Resource>(refs: Vec<ObjectRef<K>>) -> Vec<String> {
        let mut v: Vec<String> = refs.into_iter().map(|r| r.name).collect();
        v.sort();
        v
    }

    /// Ports, Switches and ProviderSwitches of one small fabric.
    type Fabric = (
        Vec<Arc<SwitchPort>>,
        Vec<Arc<Switch>>,
        Vec<Arc<ProviderSwitch>>,
    );

    fn fabric() -> Fabric {
        let ports = vec![
            port("infra", "p1", "tor-1", Some(json!({"name": "web"}))),
            port(
                "infra",
                "p2",
                "tor-1",
                Some(json!({"name": "web", "namespace": "tenant"})),
            ),
            port("infra", "p3", "tor-2", None),
            port("other", "p4", "tor-1", Some(json!({"name": "web"}))),
        ];
        let switches = vec![
            obj(
                json!({"apiVersion": "patchbay.dev/v1alpha1", "kind": "Switch",
                       "metadata": {"name": "tor-1", "namespace": "infra"},
                       "spec": {"provider": {"name": "tor-1-ssh"}}}),
            ),
            obj(
                json!({"apiVersion": "patchbay.dev/v1alpha1", "kind": "Switch",
                       "metadata": {"name": "tor-2", "namespace": "infra"},
                       "spec": {"provider": {"name": "tor-2-ssh"}}}),
            ),
        ];
        let providers = vec![
            obj(
                json!({"apiVersion": "patchbay.dev/v1alpha1", "kind": "ProviderSwitch",
                       "metadata": {"name": "tor-1-ssh", "namespace": "infra"},
                       "spec": {"backend": "ssh", "os": "ios", "address": "10.0.0.1",
                                "credentialsSecretRef": {"name": "login"}}}),
            ),
            obj(
                json!({"apiVersion": "patchbay.dev/v1alpha1", "kind": "ProviderSwitch",
                       "metadata": {"name": "tor-2-ssh", "namespace": "infra"},
                       "spec": {"backend": "ssh", "os": "ios", "address": "10.0.0.2",
                                "credentialsSecretRef": {"name": "login", "namespace": "vault"}}}),
            ),
        ];
        (ports, switches, providers)
    }

    /// The port cache's records of `ports`.
    fn cached(ports: &[Arc<SwitchPort>]) -> Vec<Arc<CompactPort>> {
        ports
            .iter()
            .map(|p| Arc::new(CompactPort::from_port((**p).clone())))
            .collect()
    }

    #[test]
    fn each_input_wakes_exactly_the_ports_that_depend_on_it() {
        let (ports, switches, providers) = fabric();
        // A configuration: by name, with the reference's namespace defaulting to the
        // port's.
        assert_eq!(
            names_of(ports_using_configuration(&cached(&ports), "infra", "web")),
            ["p1"]
        );
        assert_eq!(
            names_of(ports_using_configuration(&cached(&ports), "tenant", "web")),
            ["p2"]
        );
        // A Switch: its ports in its namespace only.
        assert_eq!(
            names_of(ports_of_switches(
                &index_of(&ports),
                Some("infra"),
                &["tor-1".into()]
            )),
            ["p1", "p2"]
        );
        assert!(ports_of_switches(&index_of(&ports), Some("infra"), &[]).is_empty());
        // A ProviderSwitch whose name is not its Switch's.
        assert_eq!(
            switches_of_providers(&switches, Some("infra"), &["tor-2-ssh".into()]),
            ["tor-2"]
        );
        // A Secret: through the providers that read it, wherever it lives.
        assert_eq!(
            names_of(ports_using_secret(
                &index_of(&ports),
                &switches,
                &providers,
                Some("infra"),
                "login"
            )),
            ["p1", "p2"]
        );
        assert_eq!(
            names_of(ports_using_secret(
                &index_of(&ports),
                &switches,
                &providers,
                Some("vault"),
                "login"
            )),
            ["p3"]
        );
        assert!(
            ports_using_secret(&index_of(&ports), &switches, &providers, Some("infra"), "x")
                .is_empty()
        );
    }

    #[test]
    fn smartnic_ports_are_woken_by_their_configuration_chain_and_provider() {
        let snic = |name: &str, next: &str| -> Arc<SmartNicPort> {
            obj(
                json!({"apiVersion": "patchbay.dev/v1alpha1", "kind": "SmartNicPort",
                       "metadata": {"name": name, "namespace": "infra"},
                       "spec": {"provider": {"name": "snic-1"}, "portName": "p0",
                                "configuration": {"name": "snc"},
                                "nextPortRef": {"name": next}}}),
            )
        };
        let snics = vec![snic("s1", "p1"), snic("s2", "p2")];
        assert_eq!(
            names_of(smartnics_using_configuration(&snics, "infra", "snc")),
            ["s1", "s2"]
        );
        let (ports, _, _) = fabric();
        assert_eq!(names_of(smartnics_chained_to(&snics, &ports[0])), ["s1"]);
        // A port claimed by a SmartNicPort that no longer names it still wakes it.
        let mut claimed = (*ports[2]).clone();
        claimed
            .metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(CHAINED_FROM_ANNOTATION.into(), "infra/s2".into());
        assert_eq!(names_of(smartnics_chained_to(&snics, &claimed)), ["s2"]);
        assert_eq!(
            names_of(smartnics_of_provider(&snics, Some("infra"), "snic-1")),
            ["s1", "s2"]
        );
        assert!(smartnics_of_provider(&snics, Some("other"), "snic-1").is_empty());
    }

    #[test]
    fn a_server_wakes_its_claim_the_claims_listing_it_and_the_waiting_claims_of_its_site() {
        let claim = |name: &str, site: &str, allocated: Option<&str>, lists: &[&str]| {
            obj::<ServerClaim>(json!({
                "apiVersion": "patchbay.dev/v1alpha1", "kind": "ServerClaim",
                "metadata": {"name": name, "namespace": "t", "generation": 1},
                "spec": {"site": site, "roles": [{"name": "w", "count": 1}]},
                "status": allocated.map(|a| json!({
                    "observedGeneration": 1,
                    "roles": [{"name": "w", "requested": 1, "servers": lists}],
                    "conditions": [{"type": "Allocated", "status": a, "reason": "r",
                        "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]
                }))
            }))
        };
        let claims = vec![
            claim("served", "dc1", Some("True"), &["other"]),
            claim("waiting", "dc1", Some("False"), &[]),
            claim("new", "dc1", None, &[]),
            claim("elsewhere", "dc2", Some("False"), &[]),
            claim("holder", "dc2", Some("True"), &["s1"]),
            claim("bound", "dc2", Some("True"), &[]),
        ];
        let server: Server = serde_json::from_value(json!({
            "apiVersion": "patchbay.dev/v1alpha1", "kind": "Server",
            "metadata": {"name": "s1"},
            "spec": {"bmc": {"address": "10.0.0.5", "credentialsSecretRef":
                {"name": "bmc", "namespace": "infra"}},
                "bootMac": "aa:bb:cc:dd:ee:01", "site": "dc1",
                "claimRef": {"name": "bound", "namespace": "t", "uid": "u", "role": "w",
                    "since": "2026-01-01T00:00:00Z"}}
        }))
        .unwrap();
        assert_eq!(
            names_of(claims_for_server(&claims, &server)),
            vec!["bound", "holder", "new", "waiting"]
        );
    }

    fn host_server(name: &str, ports: &[(&str, &str)], extra: serde_json::Value) -> Arc<Server> {
        let nics: Vec<serde_json::Value> = ports
            .iter()
            .enumerate()
            .map(|(i, (kind, p))| {
                json!({"name": format!("eth{i}"), "port": {"kind": kind, "name": p, "namespace": "infra"}})
            })
            .collect();
        let mut spec = json!({"bmc": {"address": "10.0.0.1",
                "credentialsSecretRef": {"name": "b", "namespace": "infra"}},
            "bootMac": format!("aa:bb:cc:00:00:{:02x}", name.len()), "site": "dc1", "nics": nics});
        if let (Some(s), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
            s.extend(e.clone());
        }
        obj(
            json!({"apiVersion": "patchbay.dev/v1alpha1", "kind": "Server",
                   "metadata": {"name": name}, "spec": spec}),
        )
    }

    #[test]
    fn hosts_are_woken_by_their_ports_their_claim_and_their_baremetalhost() {
        let servers = vec![
            host_server(
                "a",
                &[("SwitchPort", "p1"), ("SmartNicPort", "p1")],
                json!({}),
            ),
            host_server(
                "bb",
                &[("SwitchPort", "p2")],
                json!({"claimRef": {"name": "web", "namespace": "team", "uid": "u",
                                    "role": "w", "since": "t"},
                       "bareMetalHostRef": {"name": "bmh-b", "namespace": "metal3"}}),
            ),
            host_server("ccc", &[], json!({})),
        ];
        let meta = |name: &str, mark: Option<&str>| kube::core::ObjectMeta {
            name: Some(name.into()),
            namespace: Some("infra".into()),
            annotations: mark.map(|m| [(HOST_ANNOTATION.to_string(), m.to_string())].into()),
            ..Default::default()
        };
        // A port wakes the Servers cabled to it (of that kind) and the one marking it.
        assert_eq!(
            names_of(servers_of_port(
                &servers,
                CabledPortKind::SwitchPort,
                &meta("p1", None)
            )),
            vec!["a"]
        );
        assert_eq!(
            names_of(servers_of_port(
                &servers,
                CabledPortKind::SwitchPort,
                &meta("p9", Some("Server/ccc"))
            )),
            vec!["ccc"]
        );
        assert!(
            servers_of_port(&servers, CabledPortKind::SmartNicPort, &meta("p2", None)).is_empty()
        );
        // A claim wakes its bound Servers and the one leaving it.
        let claim: ServerClaim = serde_json::from_value(json!({
            "apiVersion": "patchbay.dev/v1alpha1", "kind": "ServerClaim",
            "metadata": {"name": "web", "namespace": "team"}, "spec": {"site": "dc1"}}))
        .unwrap();
        let mut leaving = (*servers[2]).clone();
        leaving.status = Some(crate::api::ServerStatus {
            claim: Some(crate::api::server::ClaimRef {
                name: "web".into(),
                namespace: "team".into(),
            }),
            ..Default::default()
        });
        let mut with_leaving = servers.clone();
        with_leaving[2] = Arc::new(leaving);
        assert_eq!(
            names_of(servers_of_claim(&with_leaving, &claim)),
            vec!["bb", "ccc"]
        );
        // A BareMetalHost wakes the Server naming it, or without a reference the one
        // with its boot MAC.
        let host = |name: &str, mac: &str| -> BareMetalHost {
            serde_json::from_value(json!({"metadata": {"name": name, "namespace": "metal3"},
                "spec": {"bootMACAddress": mac}}))
            .unwrap()
        };
        assert_eq!(
            names_of(servers_of_host(
                &servers,
                &host("bmh-b", "00:00:00:00:00:00")
            )),
            vec!["bb"]
        );
        assert_eq!(
            names_of(servers_of_host(&servers, &host("x", "AA:BB:CC:00:00:01"))),
            vec!["a"]
        );
        assert_eq!(
            names_of(servers_of_host(&servers, &host("x", "aa:bb:cc:00:00:02"))),
            Vec::<String>::new(),
            "bb names its host: its MAC does not link it to another"
        );
        // A port wakes the BareMetalHost marking it and those whose spec.ports cable to it.
        let with_ports: BareMetalHost = serde_json::from_value(json!({
            "metadata": {"name": "bmh-p", "namespace": "metal3"},
            "spec": {"ports": [{"name": "eth0", "port": {"name": "p1", "namespace": "infra"}}]}}))
        .unwrap();
        let hosts = vec![Arc::new(with_ports)];
        let woken = |m: kube::core::ObjectMeta| {
            hosts_of_port(&hosts, CabledPortKind::SwitchPort, &m)
                .into_iter()
                .map(|r| format!("{}/{}", r.namespace.unwrap_or_default(), r.name))
                .collect::<Vec<_>>()
        };
        assert_eq!(woken(meta("p1", None)), vec!["metal3/bmh-p"]);
        assert_eq!(
            woken(meta("p7", Some("BareMetalHost/metal3/gone"))),
            vec!["metal3/gone"]
        );
        assert!(woken(meta("p7", None)).is_empty());
    }

    #[test]
    fn a_configuration_wakes_the_hosts_it_provisions() {
        let server = |name: &str, prov: serde_json::Value| -> Arc<Server> {
            obj(json!({
                "apiVersion": "patchbay.dev/v1alpha1", "kind": "Server",
                "metadata": {"name": name},
                "spec": {"bmc": {"address": "10.0.0.1",
                    "credentialsSecretRef": {"name": "b", "namespace": "infra"}},
                    "bootMac": "aa:bb:cc:00:00:01", "site": "dc1", "nics": [{"name": "eth0",
                    "port": {"name": "p1", "namespace": "infra"},
                    "provisioningConfiguration": prov,
                    "configuration": {"name": "pxe", "namespace": "other"}}]}
            }))
        };
        let servers = vec![
            server("same-ns", json!({"name": "pxe"})),
            server("explicit", json!({"name": "pxe", "namespace": "infra"})),
            server("elsewhere", json!({"name": "pxe", "namespace": "lab"})),
            server("other-name", json!({"name": "pxe-lag"})),
        ];
        let config = |ns: &str, name: &str| -> SwitchPortConfiguration {
            serde_json::from_value(json!({
                "apiVersion": "patchbay.dev/v1alpha1", "kind": "SwitchPortConfiguration",
                "metadata": {"name": name, "namespace": ns}, "spec": {}
            }))
            .unwrap()
        };
        assert_eq!(
            names_of(servers_provisioned_with(&servers, &config("infra", "pxe"))),
            vec!["explicit", "same-ns"]
        );
        assert_eq!(
            names_of(servers_provisioned_with(&servers, &config("lab", "pxe"))),
            vec!["elsewhere"]
        );
        // The NIC's default configuration wakes its Servers too (a claim target the
        // tenancy check refused is judged again), and so does any configuration of
        // the namespace of a Server's claim.
        assert_eq!(
            names_of(servers_provisioned_with(&servers, &config("other", "pxe"))),
            vec!["elsewhere", "explicit", "other-name", "same-ns"]
        );
        assert!(servers_provisioned_with(&servers, &config("team", "web")).is_empty());
        let mut claimed = (*servers[0]).clone();
        claimed.status = Some(
            serde_json::from_value(json!({
                "claim": {"name": "c", "namespace": "team"}
            }))
            .unwrap(),
        );
        assert_eq!(
            names_of(servers_provisioned_with(
                &[Arc::new(claimed)],
                &config("team", "web")
            )),
            vec!["same-ns"]
        );
        let host: BareMetalHost = serde_json::from_value(json!({
            "metadata": {"name": "bmh", "namespace": "metal3"},
            "spec": {"ports": [{"name": "eth0", "port": {"name": "p1", "namespace": "infra"},
                "provisioningConfiguration": {"name": "pxe"}}]}}))
        .unwrap();
        let hosts = vec![Arc::new(host)];
        // A BareMetalHost's references without a namespace point to the host's.
        assert_eq!(
            names_of(hosts_provisioned_with(&hosts, &config("metal3", "pxe"))),
            vec!["bmh"]
        );
        assert!(hosts_provisioned_with(&hosts, &config("infra", "pxe")).is_empty());
    }

    #[test]
    fn a_server_wakes_the_ports_its_nics_are_cabled_to_by_kind() {
        let server: Server = serde_json::from_value(json!({
            "apiVersion": "patchbay.dev/v1alpha1", "kind": "Server",
            "metadata": {"name": "s1"},
            "spec": {"bmc": {"address": "10.0.0.1",
                "credentialsSecretRef": {"name": "b", "namespace": "infra"}},
                "bootMac": "aa:bb:cc:00:00:01", "site": "dc1", "nics": [
                {"name": "eth0", "mac": "aa:bb:cc:00:00:01",
                 "port": {"namespace": "infra", "name": "tor1-p1"}},
                {"name": "eth1", "port": {"namespace": "infra", "name": "tor2-p1",
                                          "kind": "SwitchPort"}},
                {"name": "eth2", "port": {"namespace": "tenant", "name": "snic-1",
                                          "kind": "SmartNicPort"}},
                {"name": "eth3"}
            ]}
        }))
        .unwrap();
        let ports: Vec<ObjectRef<SwitchPort>> =
            ports_cabled_to(&server, CabledPortKind::SwitchPort);
        assert_eq!(
            ports,
            vec![
                ObjectRef::new("tor1-p1").within("infra"),
                ObjectRef::new("tor2-p1").within("infra")
            ]
        );
        let nics: Vec<ObjectRef<SmartNicPort>> =
            ports_cabled_to(&server, CabledPortKind::SmartNicPort);
        assert_eq!(nics, vec![ObjectRef::new("snic-1").within("tenant")]);
    }

    #[test]
    fn only_a_claim_with_bgp_wakes_the_switches_with_bgp() {
        let switch = |name: &str, bgp: bool| -> Arc<Switch> {
            let mut spec = json!({"provider": {"name": name}, "ports": {}});
            if bgp {
                spec["bgp"] = json!({"speaker": {"name": "frr"}, "asn": 65000,
                                     "routerId": "10.255.0.1"});
            }
            obj(
                json!({"apiVersion": "patchbay.dev/v1alpha1", "kind": "Switch",
                       "metadata": {"name": name, "namespace": "infra"}, "spec": spec}),
            )
        };
        let switches = vec![
            switch("leaf-1", true),
            switch("leaf-2", false),
            switch("leaf-3", true),
        ];
        let claim = |bgp: Option<serde_json::Value>| -> Arc<ServerClaim> {
            let mut role = json!({"name": "worker", "count": 1});
            if let Some(b) = bgp {
                role["bgp"] = b;
            }
            obj(
                json!({"apiVersion": "patchbay.dev/v1alpha1", "kind": "ServerClaim",
                       "metadata": {"name": "c", "namespace": "tenant"},
                       "spec": {"site": "s", "roles": [role]}}),
            )
        };
        assert!(bgp_switches_of_claim(&switches, &claim(None)).is_empty());
        assert_eq!(
            names_of(bgp_switches_of_claim(
                &switches,
                &claim(Some(json!({"prefixes": ["192.0.2.0/28"]})))
            )),
            vec!["leaf-1", "leaf-3"]
        );
    }
}

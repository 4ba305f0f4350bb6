use serde_json::json;

use super::*;
use patchbay_model::{Capability, VlanMode};

fn obj<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> T {
    serde_json::from_value(v).unwrap()
}

/// Switch `tor` (ports p1, p2 on Gi1/0/1-2, p2 limited to VLANs 200-299) through
/// ProviderSwitch `tor` (`os` given), in namespace `infra`; p1 carries `web`.
fn fleet(os: &str, web: serde_json::Value) -> Fleet {
    Fleet {
        providers: vec![obj(json!({
            "metadata": {"name": "tor", "namespace": "infra"},
            "spec": {"backend": "ssh", "os": os, "address": "192.0.2.1"}}))],
        switches: vec![obj(json!({
            "metadata": {"name": "tor", "namespace": "infra"},
            "spec": {"provider": {"name": "tor"}, "ports": {
                "p1": {"name": "GigabitEthernet1/0/1"},
                "p2": {"name": "GigabitEthernet1/0/2", "vlanRange": "200-299"}}}}))],
        ports: vec![
            obj(json!({"metadata": {"name": "p1", "namespace": "infra",
                                    "labels": {"patchbay.dev/switch": "tor"},
                                    "annotations": {"patchbay.dev/host": "Server/web-1"}},
                       "spec": {"configuration": {"name": "web"}}})),
            obj(json!({"metadata": {"name": "p2", "namespace": "infra",
                                    "labels": {"patchbay.dev/switch": "tor"}},
                       "spec": {}})),
        ],
        configurations: vec![obj(json!({
            "metadata": {"name": "web", "namespace": "infra"}, "spec": web}))],
        ..Fleet::default()
    }
}

/// Access and trunk everywhere; trunks only (no access) on `eos`.
fn caps(p: &ProviderSwitch) -> Option<Capabilities> {
    match format!("{:?}", p.spec.os).to_lowercase().as_str() {
        "eos" => Some(Capabilities::new([Capability::Trunk])),
        "ios" => Some(Capabilities::all()),
        _ => None,
    }
}

/// The rules with tenancy off.
fn untenanted(capabilities: &dyn Fn(&ProviderSwitch) -> Option<Capabilities>) -> Rules<'_> {
    Rules {
        capabilities,
        tenancy: None,
    }
}

fn vlans(c: &Carry) -> Option<VlanMode> {
    match c {
        Carry::Set(d) => Some(d.vlans.clone()),
        _ => None,
    }
}

#[test]
fn an_edit_lists_the_ports_it_moves_and_nothing_else() {
    let before = fleet("ios", json!({"untaggedVLAN": 100}));
    // Nothing changes: nothing listed.
    assert!(plan(&before, &before, untenanted(&caps)).is_empty());
    // The configuration edited: p1 moves from access 100 to 101; p2 (no
    // configuration) is not listed.
    let manifests = Fleet {
        configurations: vec![obj(json!({
            "metadata": {"name": "web"}, "spec": {"untaggedVLAN": 101}}))],
        ..Fleet::default()
    };
    let after = before.with(&manifests, "infra");
    let changes = plan(&before, &after, untenanted(&caps));
    assert_eq!(changes.len(), 1, "{changes:?}");
    let c = &changes[0];
    assert_eq!(
        (c.namespace.as_str(), c.switch.as_str(), c.port.as_str()),
        ("infra", "tor", "p1")
    );
    assert_eq!(c.device_port.as_deref(), Some("GigabitEthernet1/0/1"));
    assert_eq!(c.host.as_deref(), Some("Server/web-1"));
    assert!(matches!(vlans(&c.before), Some(VlanMode::Access { vlan }) if vlan.get() == 100));
    assert!(matches!(vlans(&c.after), Some(VlanMode::Access { vlan }) if vlan.get() == 101));
    assert_eq!(
        c.configuration,
        (Some("infra/web".into()), Some("infra/web".into()))
    );
}

#[test]
fn what_the_operator_would_refuse_is_listed_as_refused_with_its_reason() {
    let before = fleet("ios", json!({"untaggedVLAN": 100}));
    let rows: Vec<(Fleet, &str, &str)> = vec![
        // p2 linked to a VLAN outside its vlanRange.
        (
            Fleet {
                ports: vec![obj(json!({"metadata": {"name": "p2", "namespace": "infra",
                        "labels": {"patchbay.dev/switch": "tor"}},
                    "spec": {"configuration": {"name": "web"}}}))],
                ..Fleet::default()
            },
            "p2",
            "InvalidConfiguration: ",
        ),
        // A configuration that does not exist.
        (
            Fleet {
                ports: vec![obj(json!({"metadata": {"name": "p2", "namespace": "infra",
                        "labels": {"patchbay.dev/switch": "tor"}},
                    "spec": {"configuration": {"name": "nope"}}}))],
                ..Fleet::default()
            },
            "p2",
            "ConfigurationNotFound: ",
        ),
        // The provider turned into a device that cannot carry an access VLAN.
        (
            Fleet {
                providers: vec![obj(json!({"metadata": {"name": "tor"},
                    "spec": {"backend": "ssh", "os": "eos", "address": "192.0.2.1"}}))],
                ..Fleet::default()
            },
            "p1",
            "InvalidConfiguration: ",
        ),
    ];
    for (manifests, port, says) in rows {
        let after = before.with(&manifests, "infra");
        let changes = plan(&before, &after, untenanted(&caps));
        let c = changes
            .iter()
            .find(|c| c.port == port)
            .unwrap_or_else(|| panic!("{port} listed: {changes:?}"));
        match &c.after {
            Carry::Refused(why) => assert!(why.starts_with(says), "{why}"),
            other => panic!("{port}: {other:?}"),
        }
    }
}

#[test]
fn a_new_switch_entry_carries_nothing_and_a_removed_one_is_cleaned() {
    let before = fleet("ios", json!({"untaggedVLAN": 100}));
    let mut switch = before.switches[0].clone();
    switch.spec.ports.remove("p1");
    switch
        .spec
        .ports
        .insert("p3".into(), obj(json!({"name": "GigabitEthernet1/0/3"})));
    let after = before.with(
        &Fleet {
            switches: vec![switch],
            ..Fleet::default()
        },
        "infra",
    );
    let changes = plan(&before, &after, untenanted(&caps));
    // p1's entry is gone: its SwitchPort is deleted, the port cleaned. p3 is new and
    // carries nothing: no device change, not listed.
    assert_eq!(changes.len(), 1, "{changes:?}");
    assert_eq!(changes[0].port, "p1");
    assert_eq!(changes[0].after, Carry::Clean);
    // The device port is still named from the Switch before.
    assert_eq!(
        changes[0].device_port.as_deref(),
        Some("GigabitEthernet1/0/1")
    );
}

/// A SmartNIC's Open vSwitch (`snic`, no OpenFlow) with bridge port `h1` on
/// SmartNicConfiguration `nic-a`.
fn smartnic_fleet(nic_a: serde_json::Value) -> Fleet {
    Fleet {
        providers: vec![obj(json!({
            "metadata": {"name": "snic", "namespace": "infra"},
            "spec": {"backend": "ovsdb", "os": "ovs", "address": "192.0.2.9",
                     "options": {"bridge": "br0"}}}))],
        smartnic_configurations: vec![obj(json!({
            "metadata": {"name": "nic-a", "namespace": "infra"}, "spec": nic_a}))],
        smartnic_ports: vec![obj(json!({
            "metadata": {"name": "h1", "namespace": "infra"},
            "spec": {"provider": {"name": "snic"}, "portName": "h1",
                     "configuration": {"name": "nic-a"}}}))],
        ..Fleet::default()
    }
}

#[test]
fn a_smartnic_configuration_edit_moves_its_bridge_ports() {
    let ovs = |p: &ProviderSwitch| {
        (p.spec.backend == crate::api::Backend::Ovsdb)
            .then(|| Capabilities::new([Capability::Trunk, Capability::AccessVlan]))
    };
    let before = smartnic_fleet(json!({"untaggedVLAN": 20}));
    assert!(plan(&before, &before, untenanted(&ovs)).is_empty());
    let edit = |spec: serde_json::Value| Fleet {
        smartnic_configurations: vec![obj(json!({"metadata": {"name": "nic-a"}, "spec": spec}))],
        ..Fleet::default()
    };
    let after = before.with(&edit(json!({"untaggedVLAN": 21})), "infra");
    let changes = plan(&before, &after, untenanted(&ovs));
    assert_eq!(changes.len(), 1, "{changes:?}");
    let c = &changes[0];
    assert_eq!(
        (
            c.kind,
            c.switch.as_str(),
            c.port.as_str(),
            c.device_port.as_deref()
        ),
        (PortKind::SmartNicPort, "snic", "h1", Some("h1"))
    );
    assert!(matches!(vlans(&c.before), Some(VlanMode::Access { vlan }) if vlan.get() == 20));
    assert!(matches!(vlans(&c.after), Some(VlanMode::Access { vlan }) if vlan.get() == 21));
    // An ACL on a bridge without OpenFlow: refused as the SmartNicPort controller
    // refuses it, naming what is missing.
    let acl = before.with(
        &edit(
            json!({"untaggedVLAN": 20, "acl": [{"type": "ipv4", "action": "deny",
            "protocol": "tcp", "direction": "ingress", "dstPortRange": "22"}]}),
        ),
        "infra",
    );
    let changes = plan(&before, &acl, untenanted(&ovs));
    let Carry::Refused(why) = &changes[0].after else {
        panic!("{changes:?}")
    };
    assert!(why.contains("options.openflow"), "{why}");
}

/// A Server cabled to infra/p1, held by claim tenant-a/web; p1 carries tenant-a's
/// `web` (VLAN 100) while it serves that claim; one pool grants `vlans` to tenant-a.
fn tenant_fleet(vlans: &str) -> Fleet {
    let mut f = fleet("ios", json!({}));
    f.configurations = vec![obj(json!({
        "metadata": {"name": "web", "namespace": "tenant-a"},
        "spec": {"untaggedVLAN": 100}}))];
    f.ports[0].spec.configuration = Some(ConfigurationRef {
        name: "web".into(),
        namespace: Some("tenant-a".into()),
    });
    f.servers = vec![obj(json!({
        "metadata": {"name": "web-1"},
        "spec": {"bmc": {"address": "10.0.0.1", "credentialsSecretRef": {"name": "bmc", "namespace": "infra"}},
                 "bootMac": "aa:bb:cc:dd:ee:01", "site": "dc1",
                 "nics": [{"name": "eth0", "port": {"name": "p1", "namespace": "infra"}}]},
        "status": {"claim": {"name": "web", "namespace": "tenant-a", "uid": "u",
                             "role": "worker", "since": "2026-01-01T00:00:00Z"}}}))];
    f.pools = vec![obj(json!({
        "metadata": {"name": "tenant-a"},
        "spec": {"vlans": vlans, "namespaces": ["tenant-a"]}}))];
    f
}

/// With the operator's tenancy settings the plan refuses what the operator would: a
/// pool edit that takes VLAN 100 away from tenant-a refuses the port serving
/// tenant-a's claim, with the operator's words; the claim is shown. Without them
/// the same edit changes nothing (pools grant nothing with tenancy off).
#[test]
fn a_pool_that_stops_granting_refuses_the_tenants_ports_under_tenancy() {
    let tenancy = Tenancy {
        infra_namespace: "infra".into(),
        parking_vlan: patchbay_model::values::VlanId::new(999).unwrap(),
        trusted_host_namespaces: Default::default(),
        allow_bmc_credentials: false,
    };
    let rules = Rules {
        capabilities: &caps,
        tenancy: Some(&tenancy),
    };
    let before = tenant_fleet("100-199");
    let after = before.with(
        &Fleet {
            pools: tenant_fleet("200-299").pools,
            ..Fleet::default()
        },
        "infra",
    );
    assert!(plan(&before, &before, rules).is_empty());
    let changes = plan(&before, &after, rules);
    assert_eq!(changes.len(), 1, "{changes:?}");
    let c = &changes[0];
    assert_eq!(c.port, "p1");
    assert_eq!(c.claim.as_deref(), Some("tenant-a/web"));
    assert_eq!(
        vlans(&c.before),
        Some(VlanMode::Access {
            vlan: patchbay_model::values::VlanId::new(100).unwrap()
        })
    );
    let Carry::Refused(why) = &c.after else {
        panic!("{:?}", c.after)
    };
    assert!(
        why.starts_with("Forbidden: ")
            && why.contains("VLAN 100 is not granted to namespace tenant-a on Switch tor"),
        "{why}"
    );
    // Tenancy off: the same edit moves nothing.
    assert!(plan(&before, &after, untenanted(&caps)).is_empty());
    // A port serving the infra namespace (no claim) is not checked at all.
    let mut unclaimed = before.clone();
    unclaimed.servers[0].status = None;
    let unclaimed_after = unclaimed.with(
        &Fleet {
            pools: after.pools.clone(),
            ..Fleet::default()
        },
        "infra",
    );
    // infra/p1 carries tenant-a's configuration: named by an infra port, that is
    // infra's choice; it serves infra and is granted.
    assert!(plan(&unclaimed, &unclaimed_after, rules).is_empty());
}

/// A link-aggregation group is checked as the operator checks it: p1 and p2 of
/// Server web-1 bundle in group 1 carrying `bond`; moving p2 to `bond-b` (same group,
/// another VLAN) refuses both members, p1 too though its own configuration did not
/// change.
/// [`fleet`] with p1 and p2 (any VLAN) both on `bond`: VLAN 100, group 1.
fn bonded() -> Fleet {
    let mut f = fleet("ios", json!({}));
    f.switches[0].spec.ports.get_mut("p2").unwrap().vlan_range = None;
    f.configurations = vec![obj(
        json!({"metadata": {"name": "bond", "namespace": "infra"},
               "spec": {"untaggedVLAN": 100, "linkAggregation": {"group": 1}}}),
    )];
    for p in &mut f.ports {
        p.spec.configuration = Some(ConfigurationRef {
            name: "bond".into(),
            namespace: None,
        });
    }
    f
}

#[test]
fn a_group_member_is_checked_against_the_others() {
    let mut before = bonded();
    before.configurations.push(obj(
        json!({"metadata": {"name": "bond-b", "namespace": "infra"},
               "spec": {"untaggedVLAN": 200, "linkAggregation": {"group": 1}}}),
    ));
    before.servers = vec![obj(json!({
        "metadata": {"name": "web-1"},
        "spec": {"bmc": {"address": "10.0.0.1", "credentialsSecretRef": {"name": "bmc", "namespace": "infra"}},
                 "bootMac": "aa:bb:cc:dd:ee:01", "site": "dc1",
                 "nics": [{"name": "eth0", "port": {"name": "p1", "namespace": "infra"}},
                          {"name": "eth1", "port": {"name": "p2", "namespace": "infra"}}]}}))];
    let rules = untenanted(&caps);
    assert!(plan(&before, &before, rules).is_empty());
    let mut moved = before.ports[1].clone();
    moved.spec.configuration = Some(ConfigurationRef {
        name: "bond-b".into(),
        namespace: None,
    });
    let after = before.with(
        &Fleet {
            ports: vec![moved],
            ..Fleet::default()
        },
        "infra",
    );
    let changes = plan(&before, &after, rules);
    let refused: Vec<(&str, &str)> = changes
        .iter()
        .filter_map(|c| match &c.after {
            Carry::Refused(why) => Some((c.port.as_str(), why.as_str())),
            _ => None,
        })
        .collect();
    assert_eq!(refused.len(), 2, "{changes:?}");
    assert_eq!(refused[0].0, "p1");
    assert!(
        refused[0]
            .1
            .contains("SwitchPort \"p2\" in group 1 carries a different configuration"),
        "{}",
        refused[0].1
    );
    assert_eq!(vlans(&changes[0].before), vlans(&changes[1].before));
}

#[test]
fn a_member_leaving_its_group_comes_with_the_members_that_stay() {
    let before = bonded();
    let rules = untenanted(&caps);
    // p2 leaves (unlinked). Each member's state names the group's members: both
    // move, none stays.
    let mut left = before.ports[1].clone();
    left.spec.configuration = None;
    let after = before.with(
        &Fleet {
            ports: vec![left],
            ..Fleet::default()
        },
        "infra",
    );
    let changes = plan(&before, &after, rules);
    assert_eq!(changes.len(), 2, "{changes:?}");
    assert!(unchanged_members(&after, rules, &changes).is_empty());
    // p2's entry disabled: p2 is refused (nothing is sent for it), p1 stays as it
    // is, in group 1, and its batch needs to know.
    let mut disabled = before.clone();
    disabled.switches[0]
        .spec
        .ports
        .get_mut("p2")
        .unwrap()
        .disabled = true;
    let changes = plan(&before, &disabled, rules);
    assert_eq!(changes.len(), 1, "{changes:?}");
    assert_eq!(changes[0].after.word(), "refused");
    let members = unchanged_members(&disabled, rules, &changes);
    let place = ("infra".to_owned(), "tor".to_owned(), PortKind::SwitchPort);
    assert_eq!(members.keys().collect::<Vec<_>>(), [&place]);
    let stays = &members[&place];
    assert_eq!(stays.len(), 1, "{stays:?}");
    assert_eq!(stays[0].port.as_str(), "GigabitEthernet1/0/1");
    assert_eq!(stays[0].lag.map(|l| l.group.get()), Some(1));
    // A change that touches no group asks for none.
    let single = fleet("ios", json!({"untaggedVLAN": 100}));
    let edited = fleet("ios", json!({"untaggedVLAN": 101}));
    let moved = plan(&single, &edited, rules);
    assert_eq!(moved.len(), 1, "{moved:?}");
    assert!(unchanged_members(&edited, rules, &moved).is_empty());
}

/// The Cisco fleet of [`fleet`] (p2 limited to VLANs 200-299) and the SmartNIC of
/// [`smartnic_fleet`] in one: bridge port h1 chains to SwitchPort p2
/// (`nextPortRef`), and `nic-a` names `next` (`nextConfigurationRef`) for it; `web2`
/// (VLAN 200) and `web3` (VLAN 201) exist. The live state, as the controller left
/// it: p2 claimed by infra/h1 and carrying `web2`.
fn chained_fleet() -> Fleet {
    let mut f = fleet("ios", json!({"untaggedVLAN": 100}));
    let nic = smartnic_fleet(json!({"untaggedVLAN": 20,
                                    "nextConfigurationRef": {"name": "web2"}}));
    f.providers.extend(nic.providers);
    f.smartnic_configurations = nic.smartnic_configurations;
    f.smartnic_ports = nic.smartnic_ports;
    f.smartnic_ports[0].spec.next_port_ref = Some(obj(json!({"name": "p2"})));
    for (name, vlan) in [("web2", 200), ("web3", 201)] {
        f.configurations.push(obj(json!({
            "metadata": {"name": name, "namespace": "infra"}, "spec": {"untaggedVLAN": vlan}})));
    }
    f.ports[1].spec.configuration = Some(ConfigurationRef {
        name: "web2".into(),
        namespace: Some("infra".into()),
    });
    f.ports[1].metadata.annotations = Some(
        [(
            crate::api::keys::CHAINED_FROM_ANNOTATION.to_owned(),
            "infra/h1".to_owned(),
        )]
        .into(),
    );
    f
}

/// A SmartNIC chain is followed as the SmartNicPort controller writes it: a
/// SmartNicConfiguration's `nextConfigurationRef` edit moves the SwitchPort behind
/// the bridge port; a bridge port cleaned releases it; a second bridge port naming
/// the same SwitchPort is refused (it is claimed), and nothing else moves.
#[test]
fn a_smartnic_chain_moves_the_switch_port_behind_it() {
    let all = |p: &ProviderSwitch| match p.spec.backend {
        crate::api::Backend::Ovsdb => Some(Capabilities::new([
            Capability::Trunk,
            Capability::AccessVlan,
        ])),
        _ => caps(p),
    };
    let rules = untenanted(&all);
    let before = chained_fleet();
    assert!(plan(&before, &before, rules).is_empty());
    let nic = |spec: serde_json::Value| Fleet {
        smartnic_configurations: vec![obj(json!({"metadata": {"name": "nic-a"}, "spec": spec}))],
        ..Fleet::default()
    };
    // The next configuration edited: p2 moves from VLAN 200 to 201; h1's own
    // bridge port is as it was.
    let after = before.with(
        &nic(json!({"untaggedVLAN": 20, "nextConfigurationRef": {"name": "web3"}})),
        "infra",
    );
    let changes = plan(&before, &after, rules);
    assert_eq!(changes.len(), 1, "{changes:?}");
    let c = &changes[0];
    assert_eq!((c.kind, c.port.as_str()), (PortKind::SwitchPort, "p2"));
    assert_eq!(
        c.configuration,
        (Some("infra/web2".into()), Some("infra/web3".into()))
    );
    assert!(matches!(vlans(&c.after), Some(VlanMode::Access { vlan }) if vlan.get() == 201));
    // h1 cleaned (its configuration removed): h1 and p2 both clean.
    let mut cleaned = before.smartnic_ports[0].clone();
    cleaned.spec.configuration = None;
    let after = before.with(
        &Fleet {
            smartnic_ports: vec![cleaned],
            ..Fleet::default()
        },
        "infra",
    );
    let changes = plan(&before, &after, rules);
    let moved: Vec<(&str, &str)> = changes
        .iter()
        .map(|c| (c.port.as_str(), c.after.word()))
        .collect();
    assert_eq!(moved, [("p2", "clean"), ("h1", "clean")], "{changes:?}");
    // A second bridge port chaining to p2: refused as claimed by h1; p2 stays.
    let mut h2 = before.smartnic_ports[0].clone();
    h2.metadata.name = Some("h2".into());
    h2.spec.port_name = "h2".into();
    let after = before.with(
        &Fleet {
            smartnic_ports: vec![h2],
            ..Fleet::default()
        },
        "infra",
    );
    let changes = plan(&before, &after, rules);
    assert_eq!(changes.len(), 1, "{changes:?}");
    let Carry::Refused(why) = &changes[0].after else {
        panic!("{changes:?}")
    };
    assert_eq!(changes[0].port, "h2");
    assert!(why.starts_with("NextPortClaimed: "), "{why}");
    assert!(why.contains("infra/h1"), "{why}");
    // From files alone (nothing claimed yet): the chain claims p2, which moves.
    let mut fresh = before.clone();
    fresh.ports[1].spec.configuration = None;
    fresh.ports[1].metadata.annotations = None;
    let unchained = Fleet {
        smartnic_ports: Vec::new(),
        ..fresh.clone()
    };
    let changes = plan(&unchained, &fresh, rules);
    let p2 = changes.iter().find(|c| c.port == "p2").expect("p2 moves");
    assert_eq!(p2.before, Carry::Clean);
    assert!(matches!(vlans(&p2.after), Some(VlanMode::Access { vlan }) if vlan.get() == 200));
}

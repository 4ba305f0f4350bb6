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
    assert!(plan(&before, &before, &caps).is_empty());
    // The configuration edited: p1 moves from access 100 to 101; p2 (no
    // configuration) is not listed.
    let manifests = Fleet {
        configurations: vec![obj(json!({
            "metadata": {"name": "web"}, "spec": {"untaggedVLAN": 101}}))],
        ..Fleet::default()
    };
    let after = before.with(&manifests, "infra");
    let changes = plan(&before, &after, &caps);
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
        let changes = plan(&before, &after, &caps);
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
    let changes = plan(&before, &after, &caps);
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
    assert!(plan(&before, &before, &ovs).is_empty());
    let edit = |spec: serde_json::Value| Fleet {
        smartnic_configurations: vec![obj(json!({"metadata": {"name": "nic-a"}, "spec": spec}))],
        ..Fleet::default()
    };
    let after = before.with(&edit(json!({"untaggedVLAN": 21})), "infra");
    let changes = plan(&before, &after, &ovs);
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
    let changes = plan(&before, &acl, &ovs);
    let Carry::Refused(why) = &changes[0].after else {
        panic!("{changes:?}")
    };
    assert!(why.contains("options.openflow"), "{why}");
}

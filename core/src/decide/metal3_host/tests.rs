use serde_json::json;

use super::*;

fn hna(spec: serde_json::Value) -> HostNetworkAttachmentSpec {
    serde_json::from_value(spec).unwrap()
}

#[test]
fn an_attachment_is_the_configuration_its_mode_says() {
    let access = attachment_configuration(&hna(json!({"nativeVLAN": 100}))).unwrap();
    assert_eq!(access.port.untagged_vlan, Some(100));
    assert!(access.port.vlans.is_empty());
    for mode in ["trunk", "hybrid"] {
        let t = attachment_configuration(&hna(json!({"mode": mode, "nativeVLAN": 10,
            "allowedVLANs": ["10", "20", "30-32"], "mtu": 9000})))
        .unwrap();
        assert_eq!(t.port.untagged_vlan, Some(10), "{mode}");
        let tagged: Vec<i64> = t.port.vlans.iter().map(|v| v.id).collect();
        // The native VLAN is carried untagged, not listed again.
        assert_eq!(tagged, [20, 30, 31, 32], "{mode}");
        assert_eq!(t.port.mtu, Some(9000));
    }
}

#[test]
fn an_attachment_breaking_the_webhook_rules_is_refused_naming_the_field() {
    let rows = [
        (
            json!({"nativeVLAN": 100, "allowedVLANs": ["200"]}),
            "spec.allowedVLANs",
            "access port",
        ),
        (
            json!({"mode": "trunk", "nativeVLAN": 100, "allowedVLANs": ["300-200"]}),
            "spec.allowedVLANs[0]",
            "start must be below its end",
        ),
        (
            json!({"mode": "trunk", "nativeVLAN": 100, "allowedVLANs": ["5-5"]}),
            "spec.allowedVLANs[0]",
            "start must be below its end",
        ),
        (
            json!({"mode": "trunk", "nativeVLAN": 100, "allowedVLANs": ["4095"]}),
            "spec.allowedVLANs[0]",
            "within 1-4094",
        ),
        (
            json!({"nativeVLAN": 0}),
            "spec.nativeVLAN",
            "outside 1-4094",
        ),
        (json!({"nativeVLAN": 5, "mtu": 100}), "spec.mtu", "576-9216"),
        (
            json!({"mode": "routed", "nativeVLAN": 5}),
            "spec.mode",
            "unsupported value",
        ),
    ];
    for (spec, path, says) in rows {
        let errors = attachment_configuration(&hna(spec.clone())).unwrap_err();
        assert!(
            errors
                .iter()
                .any(|e| e.path == path && e.reason.contains(says)),
            "{spec}: {errors:?}"
        );
    }
}

fn host(interfaces: serde_json::Value, nics: serde_json::Value) -> BareMetalHost {
    serde_json::from_value(json!({
        "metadata": {"name": "host-1", "namespace": "hosts"},
        "spec": {"networkInterfaces": interfaces},
        "status": {"hardware": {"nics": nics}},
    }))
    .unwrap()
}

const SWITCHES: &[KnownSwitch<'static>] = &[KnownSwitch {
    namespace: "infra",
    name: "tor-1",
    mac: "AA:BB:CC:00:00:01",
}];
const DECLARED: &[DeclaredPort<'static>] = &[DeclaredPort {
    namespace: "infra",
    provider: "tor-1",
    key: "host-1-eth0",
    device_port: "GigabitEthernet1/0/1",
}];

fn fabric() -> Fabric<'static> {
    Fabric {
        switches: SWITCHES,
        declared: DECLARED,
        partial: false,
        inspection: None,
    }
}

fn provisioning() -> ConfigurationRef {
    ConfigurationRef {
        name: "provisioning".into(),
        namespace: Some("infra".into()),
    }
}

#[test]
fn an_interface_is_cabled_to_the_declared_port_its_switch_port_or_lldp_names() {
    let lldp = json!([{"name": "eth0", "mac": "52:54:00:00:00:01",
        "lldp": {"switchID": "aa:bb:cc:00:00:01", "portID": "gigabitethernet1/0/1"}}]);
    // By name, through inspection's MAC and LLDP.
    let by_lldp = network_interfaces(
        &host(
            json!([{"name": "eth0", "hostNetworkAttachment": {"name": "web"}}]),
            lldp.clone(),
        ),
        &fabric(),
        Some(&provisioning()),
    );
    assert!(
        by_lldp.refused.is_empty() && by_lldp.waiting.is_empty(),
        "{by_lldp:?}"
    );
    let nic = &by_lldp.nics[0];
    assert_eq!(nic.mac.as_deref(), Some("52:54:00:00:00:01"));
    let port = nic.port.as_ref().unwrap();
    assert_eq!(
        (port.namespace.as_str(), port.name.as_str()),
        ("infra", "host-1-eth0")
    );
    assert_eq!(nic.provisioning_configuration, Some(provisioning()));
    // The attachment's namespace defaults to the host's.
    assert_eq!(
        nic.configuration,
        Some(ConfigurationRef {
            name: "web".into(),
            namespace: Some("hosts".into())
        })
    );
    // switchPort given wins over LLDP; by MAC, no inspection needed.
    let given = network_interfaces(
        &host(
            json!([{"macAddress": "52:54:00:00:00:09",
                    "hostNetworkAttachment": {"name": "web", "namespace": "tenant-a"},
                    "switchPort": {"switchID": "aa:bb:cc:00:00:01",
                                   "portID": "GigabitEthernet1/0/1"}}]),
            json!([]),
        ),
        &fabric(),
        None,
    );
    assert_eq!(given.nics.len(), 1, "{given:?}");
    assert_eq!(
        given.nics[0]
            .configuration
            .as_ref()
            .unwrap()
            .namespace
            .as_deref(),
        Some("tenant-a")
    );
}

#[test]
fn interfaces_that_break_a_rule_or_name_an_undeclared_port_are_refused_and_unknown_nics_wait() {
    let web = json!({"name": "web"});
    let rows: Vec<(serde_json::Value, &str)> = vec![
        (
            json!([{"name": "eth0", "macAddress": "52:54:00:00:00:01", "hostNetworkAttachment": web}]),
            "mutually exclusive",
        ),
        (
            json!([{"hostNetworkAttachment": web}]),
            "one of name or macAddress",
        ),
        (
            json!([{"macAddress": "52:54:00:00:00:01", "hostNetworkAttachment": web,
                    "switchPort": {"switchID": "aa:bb:cc:00:00:01", "portID": "GigabitEthernet1/0/1"}},
                   {"macAddress": "52:54:00:00:00:01", "hostNetworkAttachment": web}]),
            "listed twice",
        ),
        (
            json!([{"macAddress": "52:54:00:00:00:01"}]),
            "names no HostNetworkAttachment",
        ),
        (
            json!([{"name": "eth 0", "hostNetworkAttachment": web}]),
            "spec.networkInterfaces[0].name: \"eth 0\" is not a NIC name",
        ),
        (
            json!([{"macAddress": "52:54:00:00:01", "hostNetworkAttachment": web}]),
            "spec.networkInterfaces[0].macAddress",
        ),
        (
            json!([{"macAddress": "52:54:00:00:00:01", "hostNetworkAttachment": web,
                    "switchPort": {"switchID": "tor-1", "portID": "GigabitEthernet1/0/1"}}]),
            "spec.networkInterfaces[0].switchPort.switchID",
        ),
        (
            json!([{"macAddress": "52:54:00:00:00:01", "hostNetworkAttachment": web,
                    "switchPort": {"switchID": "aa:bb:cc:00:00:01", "portID": "TenGigabitEthernet1/1/1"}}]),
            "portID \"TenGigabitEthernet1/1/1\" is not declared on BareMetalSwitch infra/tor-1 (declared: GigabitEthernet1/0/1)",
        ),
        (
            json!([{"macAddress": "52:54:00:00:00:01", "hostNetworkAttachment": web,
                    "switchPort": {"switchID": "aa:bb:cc:00:00:99", "portID": "GigabitEthernet1/0/1"}}]),
            "no BareMetalSwitch's macAddress",
        ),
    ];
    for (interfaces, says) in rows {
        let got = network_interfaces(&host(interfaces.clone(), json!([])), &fabric(), None);
        assert!(
            got.refused.iter().any(|r| r.contains(says)),
            "{interfaces}: {got:?}"
        );
        assert!(
            got.nics.len() <= 1 && got.nics.iter().all(|n| n.mac.is_some()),
            "{got:?}"
        );
    }
    // A NIC by name that inspection has not reported, or no LLDP and no switchPort:
    // waiting, not refused.
    for (interfaces, nics, says) in [
        (
            json!([{"name": "eth1", "hostNetworkAttachment": web}]),
            json!([]),
            "has not been reported by inspection yet",
        ),
        (
            json!([{"name": "eth1", "hostNetworkAttachment": web}]),
            json!([{"name": "eth1", "mac": "52:54:00:00:00:02"}]),
            "no LLDP neighbour",
        ),
    ] {
        let got = network_interfaces(&host(interfaces, nics), &fabric(), None);
        assert!(got.refused.is_empty() && got.nics.is_empty(), "{got:?}");
        assert!(got.waiting[0].contains(says), "{got:?}");
    }
}

#[test]
fn a_nic_with_no_switch_port_and_no_lldp_takes_the_declared_port_patchbay_discovered() {
    let web = json!({"name": "web"});
    let mut h = host(
        json!([{"macAddress": "52:54:00:00:00:07", "hostNetworkAttachment": web}]),
        json!([]),
    );
    // Nothing found yet: waiting, and handed to discovery with its MAC.
    let got = network_interfaces(&h, &fabric(), None);
    assert!(got.nics.is_empty() && got.refused.is_empty(), "{got:?}");
    assert_eq!(
        got.unplaced,
        vec![Unplaced {
            field: "spec.networkInterfaces[0]".into(),
            nic: "52:54:00:00:00:07".into(),
            mac: "52:54:00:00:00:07".into(),
        }]
    );
    assert!(got.waiting[0].contains("has not been found on a declared port"));
    // Found: kept in the annotation (merged with what is there), then cabled there.
    let value = with_discovered(
        &h,
        &[(
            "52:54:00:00:00:07".into(),
            "infra".into(),
            "host-1-eth0".into(),
        )],
    );
    assert_eq!(value, r#"{"52:54:00:00:00:07":"infra/host-1-eth0"}"#);
    h.metadata.annotations = Some([(DISCOVERED_ANNOTATION.to_owned(), value)].into());
    let got = network_interfaces(&h, &fabric(), None);
    assert!(got.unplaced.is_empty() && got.waiting.is_empty(), "{got:?}");
    let port = got.nics[0].port.as_ref().unwrap();
    assert_eq!(
        (port.namespace.as_str(), port.name.as_str()),
        ("infra", "host-1-eth0")
    );
    // A link to a port nobody declares (any more) is not followed: looked for again.
    h.metadata.annotations = Some(
        [(
            DISCOVERED_ANNOTATION.to_owned(),
            r#"{"52:54:00:00:00:07":"infra/uplink"}"#.to_owned(),
        )]
        .into(),
    );
    let got = network_interfaces(&h, &fabric(), None);
    assert!(got.nics.is_empty() && got.unplaced.len() == 1, "{got:?}");
    // An annotation that does not parse counts as none.
    h.metadata.annotations = Some([(DISCOVERED_ANNOTATION.to_owned(), "{".to_owned())].into());
    assert!(discovered(&h).is_empty());
}

#[test]
fn the_host_s_hardware_data_is_its_inspection_when_given() {
    let h = host(
        json!([{"name": "eth0", "hostNetworkAttachment": {"name": "web"}}]),
        json!([]),
    );
    // The host's status has no such NIC; its HardwareData has, with LLDP.
    let hardware = json!({"nics": [{"name": "eth0", "mac": "52:54:00:00:00:01",
        "lldp": {"switchID": "aa:bb:cc:00:00:01", "portID": "GigabitEthernet1/0/1"}}]});
    let with = Fabric {
        inspection: Some(&hardware),
        ..fabric()
    };
    let got = network_interfaces(&h, &with, None);
    assert_eq!(got.nics.len(), 1, "{got:?}");
    assert_eq!(got.nics[0].mac.as_deref(), Some("52:54:00:00:00:01"));
    let without = network_interfaces(&h, &fabric(), None);
    assert!(without.waiting[0].contains("has not been reported by inspection yet"));
}

#[test]
fn a_host_is_known_by_every_mac_it_declares_or_inspection_reports() {
    let host: BareMetalHost = serde_json::from_value(json!({
        "metadata": {"name": "h", "namespace": "metal3"},
        "spec": {"bootMACAddress": "AA:BB:CC:00:00:01",
                 "ports": [{"mac": "aa:bb:cc:00:00:02"}, "not an object", {"name": "eth9"}],
                 "networkInterfaces": [{"macAddress": "aa-bb-cc-00-00-03"},
                                       {"macAddress": "aa:bb:cc:00:00:01"}]},
        "status": {"hardware": {"nics": [{"name": "eno1", "mac": "aa:bb:cc:00:00:04"}]}}
    }))
    .unwrap();
    assert_eq!(
        host_macs(&host, None),
        [
            "aa:bb:cc:00:00:01",
            "aa:bb:cc:00:00:02",
            "aa:bb:cc:00:00:03",
            "aa:bb:cc:00:00:04"
        ]
    );
    // A HardwareData's inspection stands for the host's own.
    let hardware = json!({"nics": [{"mac": "aa:bb:cc:00:00:05"}]});
    assert_eq!(host_macs(&host, Some(&hardware))[3], "aa:bb:cc:00:00:05");
    assert!(host_macs(&BareMetalHost::default(), None).is_empty());
}

//! The validator refuses hostile and malformed input with the field path and the
//! reason, in both layers: the CRD schema the API server enforces, and the Rust
//! validator the controllers and the CLI run. And a valid configuration becomes
//! exactly the device state a network engineer would expect.

use patchbay::api::{
    ProviderSwitchSpec, SwitchPortConfigurationSpec, SwitchPortDefinition, SwitchSpec, crds,
};
use patchbay::decide::validate::{
    LagPeer, PortContext, ValidationErrors, configuration_to_desired, desired_for_port,
    lag_members, validate_configuration, validate_provider, validate_switch, with_host_mac,
};
use patchbay_providers::values::{PortName, VlanId};
use patchbay_providers::{AdminState, Capabilities, Capability, LagMode, VlanMode};
use serde_json::{Value, json};

#[path = "support/hostile.rs"]
mod hostile;
use hostile::hostile_strings;

fn config(value: Value) -> SwitchPortConfigurationSpec {
    serde_json::from_value(value).expect("test input matches the types")
}

fn expect_error(result: Result<impl std::fmt::Debug, ValidationErrors>, path: &str, reason: &str) {
    let errors = result.expect_err("must be refused");
    assert!(
        errors
            .0
            .iter()
            .any(|e| e.path == path && e.reason.contains(reason)),
        "expected `{path}: …{reason}…`, got: {errors}"
    );
    for e in &errors.0 {
        assert!(
            !e.reason.chars().any(|c| c.is_control()),
            "an error message carries a control character: {e:?}"
        );
    }
}

#[test]
fn configuration_vlan_ids_outside_1_to_4094_are_refused() {
    for bad in [0i64, 4095, 5000, -1, 70000] {
        expect_error(
            validate_configuration(&config(json!({"untaggedVLAN": bad}))),
            "spec.untaggedVLAN",
            "outside 1-4094",
        );
        expect_error(
            validate_configuration(&config(json!({"vlans": [{"id": 10}, {"id": bad}]}))),
            "spec.vlans[1].id",
            "outside 1-4094",
        );
    }
    assert!(validate_configuration(&config(json!({"untaggedVLAN": 1}))).is_ok());
    assert!(validate_configuration(&config(json!({"untaggedVLAN": 4094}))).is_ok());
}

#[test]
fn configuration_refuses_duplicate_and_ambiguous_vlans() {
    expect_error(
        validate_configuration(&config(json!({"vlans": [{"id": 10}, {"id": 10}]}))),
        "spec.vlans[1].id",
        "already listed at spec.vlans[0]",
    );
    expect_error(
        validate_configuration(&config(json!({"untaggedVLAN": 10, "vlans": [{"id": 10}]}))),
        "spec.vlans[0].id",
        "already the untaggedVLAN",
    );
}

#[test]
fn hostile_descriptions_and_vlan_names_are_refused() {
    for (what, s) in hostile_strings() {
        let result = validate_configuration(&config(json!({"description": s})));
        assert!(
            result
                .as_ref()
                .is_err_and(|e| e.first_path() == "spec.description"),
            "description with {what} accepted: {result:?}"
        );
        let result = validate_configuration(&config(json!({"vlans": [{"id": 5, "name": s}]})));
        assert!(
            result
                .as_ref()
                .is_err_and(|e| e.first_path() == "spec.vlans[0].name"),
            "VLAN name with {what} accepted: {result:?}"
        );
    }
    expect_error(
        validate_configuration(&config(json!({"description": "a".repeat(300)}))),
        "spec.description",
        "300 characters long",
    );
}

#[test]
fn malformed_acl_rules_are_refused_with_their_index() {
    let rule = |extra: Value| {
        let mut base = json!({"type": "ipv4", "action": "deny", "protocol": "tcp"});
        base.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        config(json!({"acl": [{"type": "ipv4", "action": "allow", "protocol": "all"}, base]}))
    };
    let cases = [
        (
            json!({"src": "10.0.0.0"}),
            "spec.acl[1].src",
            "no prefix length",
        ),
        (
            json!({"src": "10.0.0.1/8"}),
            "spec.acl[1].src",
            "did you mean 10.0.0.0/8",
        ),
        (
            json!({"src": "300.0.0.0/8"}),
            "spec.acl[1].src",
            "not an IP address",
        ),
        (
            json!({"dst": "10.0.0.0/33"}),
            "spec.acl[1].dst",
            "prefix length",
        ),
        (
            json!({"dst": "2001:db8::/32"}),
            "spec.acl[1].dst",
            "not an IPv4 network",
        ),
        (
            json!({"dst": "10.0.0.0/8;reload"}),
            "spec.acl[1].dst",
            "only hex digits",
        ),
        (
            json!({"srcPortRange": "30-22"}),
            "spec.acl[1].srcPortRange",
            "reversed",
        ),
        (
            json!({"srcPortRange": "22-"}),
            "spec.acl[1].srcPortRange",
            "open-ended",
        ),
        (
            json!({"dstPortRange": "0"}),
            "spec.acl[1].dstPortRange",
            "1-65535",
        ),
        (
            json!({"dstPortRange": "65536"}),
            "spec.acl[1].dstPortRange",
            "1-65535",
        ),
        (
            json!({"dstPortRange": "22,23"}),
            "spec.acl[1].dstPortRange",
            "only digits",
        ),
    ];
    for (extra, path, reason) in cases {
        expect_error(validate_configuration(&rule(extra)), path, reason);
    }
    let icmp_with_ports = config(json!({"acl": [
        {"type": "ipv4", "action": "deny", "protocol": "icmp", "dstPortRange": "22"}
    ]}));
    expect_error(
        validate_configuration(&icmp_with_ports),
        "spec.acl[0].dstPortRange",
        "need protocol tcp or udp",
    );
}

#[test]
fn mtu_and_link_aggregation_ranges() {
    expect_error(
        validate_configuration(&config(json!({"mtu": 100}))),
        "spec.mtu",
        "outside 576-9216",
    );
    expect_error(
        validate_configuration(&config(json!({"linkAggregation": {"group": 0}}))),
        "spec.linkAggregation.group",
        "outside 1-4096",
    );
}

fn port_def(value: Value) -> SwitchPortDefinition {
    serde_json::from_value(value).unwrap()
}

fn for_port(
    spec: &SwitchPortConfigurationSpec,
    def: &SwitchPortDefinition,
    caps: Option<&Capabilities>,
) -> Result<patchbay_providers::DesiredPort, ValidationErrors> {
    desired_for_port(
        spec,
        &PortContext {
            switch: "tor-1",
            port_key: "server-7-eth0",
            definition: def,
            capabilities: caps,
        },
    )
}

#[test]
fn a_configuration_must_fit_the_port_it_is_linked_to() {
    let def = port_def(json!({"name": "Gi0/7", "vlanRange": "1, 6-10", "trunkDisable": true}));
    expect_error(
        for_port(&config(json!({"untaggedVLAN": 5})), &def, None),
        "spec.untaggedVLAN",
        "outside the vlanRange \"1, 6-10\" of port \"server-7-eth0\" of Switch \"tor-1\"",
    );
    expect_error(
        for_port(
            &config(json!({"untaggedVLAN": 6, "vlans": [{"id": 7}]})),
            &def,
            None,
        ),
        "spec.vlans",
        "does not allow trunking",
    );
    let ok = for_port(&config(json!({"untaggedVLAN": 10})), &def, None).unwrap();
    assert_eq!(
        ok.vlans,
        VlanMode::Access {
            vlan: VlanId::new(10).unwrap()
        }
    );

    let trunk_ok = port_def(json!({"name": "Gi0/8", "vlanRange": "1, 6-10"}));
    expect_error(
        for_port(
            &config(json!({"vlans": [{"id": 6}, {"id": 11}]})),
            &trunk_ok,
            None,
        ),
        "spec.vlans[1].id",
        "VLAN 11 is outside the vlanRange",
    );

    let disabled = port_def(json!({"name": "Gi0/9", "disabled": true}));
    expect_error(
        for_port(&config(json!({"untaggedVLAN": 10})), &disabled, None),
        "Switch.spec.ports[\"server-7-eth0\"].disabled",
        "accepts no configuration",
    );
    // Even an empty configuration is refused on a disabled port.
    assert!(for_port(&config(json!({})), &disabled, None).is_err());
}

#[test]
fn a_configuration_needing_a_missing_capability_is_refused_naming_the_field() {
    let def = port_def(json!({"name": "Ethernet1"}));
    let trunk_only = Capabilities::new([Capability::Trunk]);
    let spec = config(json!({
        "untaggedVLAN": 10, "vlans": [{"id": 20}], "disabled": true, "description": "x"
    }));
    let errors = for_port(&spec, &def, Some(&trunk_only)).unwrap_err();
    let paths: Vec<&str> = errors.0.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(
        paths,
        ["spec.untaggedVLAN", "spec.disabled", "spec.description"]
    );
    assert!(errors.0[0].reason.contains("cannot configure native VLAN"));
}

#[test]
fn a_valid_configuration_becomes_the_expected_device_state() {
    let spec = config(json!({
        "untaggedVLAN": 100,
        "vlans": [{"id": 102, "name": "web-db"}, {"id": 101}],
        "disabled": true,
        "mtu": 9000,
        "description": "tenant web, server-7",
        "acl": [{"type": "ipv6", "action": "allow", "protocol": "udp",
                 "src": "2001:db8::/32", "dstPortRange": "53"}]
    }));
    let desired = configuration_to_desired(&spec, PortName::parse("Gi0/1").unwrap()).unwrap();
    assert_eq!(desired.admin, AdminState::Down);
    match &desired.vlans {
        VlanMode::Trunk { native, allowed } => {
            assert_eq!(native.map(VlanId::get), Some(100));
            assert_eq!(allowed.to_range_string(), "101-102");
        }
        other => panic!("expected a trunk, got {other:?}"),
    }
    assert_eq!(
        desired.vlan_names[&VlanId::new(102).unwrap()].as_str(),
        "web-db"
    );
    assert_eq!(desired.mtu.map(|m| m.get()), Some(9000));
    assert_eq!(desired.acl.len(), 1);
    assert_eq!(
        desired.acl[0].dst_ports.map(|p| p.to_string()).as_deref(),
        Some("53")
    );
    assert_eq!(desired.lag, None);
    let lag =
        config(json!({"untaggedVLAN": 100, "linkAggregation": {"group": 12, "mode": "passive"}}));
    let desired = configuration_to_desired(&lag, PortName::parse("Gi0/1").unwrap()).unwrap();
    assert_eq!(
        desired.lag.map(|l| (l.group.get(), l.mode)),
        Some((12, LagMode::Passive))
    );
    // An empty configuration means: no VLANs of ours, port up.
    let empty = configuration_to_desired(&config(json!({})), PortName::parse("Gi0/1").unwrap());
    assert_eq!(empty.unwrap().vlans, VlanMode::Unconfigured);
}

#[test]
fn switch_port_names_and_vlan_ranges_are_checked() {
    let switch = |ports: Value| -> SwitchSpec {
        serde_json::from_value(json!({"provider": {"name": "tor-1"}, "ports": ports})).unwrap()
    };
    let cases = [
        ("1-", "open-ended"),
        ("10-5", "reversed"),
        ("0", "outside 1-4094"),
        ("4095", "outside 1-4094"),
        ("1,,2", "empty item"),
        ("1;2", "only digits"),
    ];
    for (range, reason) in cases {
        expect_error(
            validate_switch(&switch(
                json!({"p1": {"name": "Gi0/1", "vlanRange": range}}),
            )),
            "spec.ports[\"p1\"].vlanRange",
            reason,
        );
    }
    for (what, s) in hostile_strings() {
        let result = validate_switch(&switch(json!({"p1": {"name": s}})));
        assert!(
            result
                .as_ref()
                .is_err_and(|e| e.first_path() == "spec.ports[\"p1\"].name"),
            "port name with {what} accepted: {result:?}"
        );
    }
    expect_error(
        validate_switch(&switch(json!({"Bad_Key": {"name": "Gi0/1"}}))),
        "spec.ports[\"Bad_Key\"]",
        "not a valid object name",
    );
    expect_error(
        validate_switch(&switch(
            json!({"a": {"name": "Gi0/1"}, "b": {"name": "Gi0/1"}}),
        )),
        "spec.ports[\"b\"].name",
        "already used by spec.ports[\"a\"]",
    );
    assert!(
        validate_switch(&switch(
            json!({"a": {"name": "ethernet 1/g1", "vlanRange": "1, 6-10"}})
        ))
        .is_ok()
    );
    // A Switch's rollout policy (its port entries' edits), checked by field.
    let with_rollout = |rollout: Value| -> SwitchSpec {
        serde_json::from_value(json!({"provider": {"name": "tor-1"},
                                      "ports": {"a": {"name": "Gi0/1"}},
                                      "rollout": rollout}))
        .unwrap()
    };
    expect_error(
        validate_switch(&with_rollout(json!({"maxUnavailable": "0%"}))),
        "spec.rollout.maxUnavailable",
        "between 1% and 100%",
    );
    expect_error(
        validate_switch(&with_rollout(
            json!({"canary": {"ports": 2, "oneSwitch": true}}),
        )),
        "spec.rollout.canary",
        "",
    );
    assert!(
        validate_switch(&with_rollout(
            json!({"canary": {"ports": 1}, "maxUnavailable": 4, "minWaitSeconds": 30})
        ))
        .is_ok()
    );
    let with_neighbors = |n: Value| -> SwitchSpec {
        serde_json::from_value(json!({"provider": {"name": "tor-1"}, "neighbors": n})).unwrap()
    };
    expect_error(
        validate_switch(&with_neighbors(
            json!({"providers": [{"name": "Bad_Name"}]}),
        )),
        "spec.neighbors.providers[0].name",
        "not a valid object name",
    );
    expect_error(
        validate_switch(&with_neighbors(
            json!({"providers": [{"name": "lldp"}], "parkingConfiguration": "Not_A_Name"}),
        )),
        "spec.neighbors.parkingConfiguration",
        "not a valid object name",
    );
    expect_error(
        validate_switch(&with_neighbors(json!({"providers": []}))),
        "spec.neighbors.providers",
        "name 1 to 4 ProviderSwitches",
    );
    expect_error(
        validate_switch(&with_neighbors(
            json!({"providers": [{"name": "lldp"}], "intervalSeconds": 1}),
        )),
        "spec.neighbors.intervalSeconds",
        "outside 5-3600",
    );
    expect_error(
        validate_switch(&with_neighbors(
            json!({"providers": [{"name": "lldp"}], "ageOutSeconds": 4000}),
        )),
        "spec.neighbors.ageOutSeconds",
        "4000 is outside 5-3600",
    );
    assert!(
        validate_switch(&with_neighbors(
            json!({"providers": [{"name": "lldp"}, {"name": "ovs"}], "intervalSeconds": 10,
                   "ageOutSeconds": 15})
        ))
        .is_ok()
    );
}

#[test]
fn provider_switch_rules() {
    let provider = |v: Value| -> ProviderSwitchSpec { serde_json::from_value(v).unwrap() };
    let base = json!({"backend": "ssh", "os": "ios", "address": "127.0.0.1",
                      "credentialsSecretRef": {"name": "login"}});
    let with = |extra: Value| {
        let mut v = base.clone();
        v.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        provider(v)
    };
    assert!(validate_provider(&with(json!({}))).is_ok());
    assert!(
        validate_provider(&with(
            json!({"options": {"maxSessions": 2, "readSessions": 1}})
        ))
        .is_ok()
    );
    // The operator's share of the sessions: maxSessions (else its setting) less
    // readSessions, never below one.
    for (options, default, operator, tools) in [
        (json!({}), 1, 1, 0),
        (json!({}), 4, 4, 0),
        (json!({"maxSessions": 2, "readSessions": 1}), 1, 1, 1),
        (json!({"maxSessions": 4, "readSessions": 1}), 1, 3, 1),
        (json!({"readSessions": 1}), 3, 2, 1),
        (json!({"readSessions": 5}), 1, 1, 5),
    ] {
        let o: patchbay::api::BackendOptions = serde_json::from_value(options.clone()).unwrap();
        assert_eq!(
            (o.operator_sessions(default), o.tool_sessions()),
            (operator, tools),
            "{options} with the operator's default {default}"
        );
    }
    let cases = [
        (
            json!({"os": "ovs"}),
            "spec.os",
            "cannot be driven by backend ssh",
        ),
        (
            json!({"address": "tor1;reboot"}),
            "spec.address",
            "contains",
        ),
        (
            json!({"address": "tor1\nreboot"}),
            "spec.address",
            "contains",
        ),
        (json!({"port": 70000}), "spec.port", "not a TCP port"),
        (
            json!({"credentialsSecretRef": null}),
            "spec.credentialsSecretRef",
            "needs a credentials Secret",
        ),
        (
            json!({"hostKey": {"fingerprint": "MD5:aa"}}),
            "spec.hostKey.fingerprint",
            "must start with SHA256:",
        ),
        (
            json!({"hostKey": {"knownHostsLine": "tor1 ssh-rsa !!!"}}),
            "spec.hostKey.knownHostsLine",
            "not base64",
        ),
        (
            json!({"hostKey": {}}),
            "spec.hostKey",
            "give a fingerprint or a knownHostsLine",
        ),
        (
            json!({"hostKey": {"fingerprint": "SHA256:v4cRr7ClTTn6CxGK/qsnWEhL7L4H+y3qHDbCyB3xeug"},
                "insecureAcceptAnyHostKey": true}),
            "spec.insecureAcceptAnyHostKey",
            "cannot be true",
        ),
        (
            json!({"options": {"bridge": "br0"}}),
            "spec.options.bridge",
            "only the ovsdb backend",
        ),
        (
            json!({"options": {"maxSessions": 0}}),
            "spec.options.maxSessions",
            "outside 1-16",
        ),
        // Sessions kept for read-only tools leave the operator at least one.
        (
            json!({"options": {"readSessions": 1}}),
            "spec.options.readSessions",
            "1 of maxSessions 1 leaves the operator no session to configure the device \
             (set maxSessions to at least 2)",
        ),
        (
            json!({"options": {"maxSessions": 3, "readSessions": 3}}),
            "spec.options.readSessions",
            "leaves the operator no session",
        ),
        (
            json!({"options": {"maxSessions": 2, "readSessions": -1}}),
            "spec.options.readSessions",
            "outside 0-15",
        ),
        (
            json!({"options": {"model": "junos-els"}}),
            "spec.options.model",
            "only the netconf backend",
        ),
        // NETCONF drives the OSes it has a device model for.
        (
            json!({"backend": "netconf"}),
            "spec.os",
            "os ios cannot be driven by backend netconf",
        ),
        (
            json!({"os": "yang"}),
            "spec.os",
            "cannot be driven by backend ssh",
        ),
        (
            json!({"backend": "netconf", "os": "junos", "options": {"model": "patchbay-ports"}}),
            "spec.options.model",
            "no NETCONF model \"patchbay-ports\" for os junos; models: junos-els (os junos)",
        ),
        (
            json!({"backend": "netconf", "os": "junos", "options": {"model": "junos-qfx"}}),
            "spec.options.model",
            "no NETCONF model",
        ),
        // Ansible drives the OSes patchbay has playbooks for; a user's playbooks
        // live in an absolute directory.
        (
            json!({"backend": "ansible", "os": "eos"}),
            "spec.os",
            "os eos cannot be driven by backend ansible",
        ),
        (
            json!({"options": {"playbooks": "/etc/patchbay/playbooks"}}),
            "spec.options.playbooks",
            "only the ansible backend",
        ),
        (
            json!({"backend": "ansible", "options": {"playbooks": "playbooks/ios"}}),
            "spec.options.playbooks",
            "not an absolute directory path",
        ),
        (
            json!({"backend": "ansible", "options": {"playbooks": "/etc/../root"}}),
            "spec.options.playbooks",
            "no '..'",
        ),
        (
            json!({"options": {"lldpSocket": "/run/lldpd.socket"}}),
            "spec.options.lldpSocket",
            "only os linux",
        ),
        (
            json!({"os": "linux", "options": {"lldpSocket": "/run/lldpd.socket; reboot"}}),
            "spec.options.lldpSocket",
            "must not contain ';'",
        ),
        (
            json!({"os": "linux", "options": {"lldpSocket": "run/lldpd.socket"}}),
            "spec.options.lldpSocket",
            "absolute",
        ),
        (
            json!({"os": "linux", "backend": "netconf"}),
            "spec.os",
            "os linux cannot be driven by backend netconf",
        ),
        (
            json!({"options": {"controlSocket": "/run/openvswitch/ovs-vswitchd.ctl"}}),
            "spec.options.controlSocket",
            "only the ovsdb backend",
        ),
    ];
    for (extra, path, reason) in cases {
        expect_error(validate_provider(&with(extra)), path, reason);
    }
    for (os, model) in [
        ("junos", None),
        ("junos", Some("junos-els")),
        ("junos", Some("junos-port-mode")),
        ("yang", None),
        ("yang", Some("patchbay-ports")),
    ] {
        let spec = with(json!({"backend": "netconf", "os": os, "options": {"model": model}}));
        assert!(validate_provider(&spec).is_ok(), "{os} {model:?}");
    }
    let linux = with(json!({"os": "linux", "options": {"lldpSocket": "/run/lldpd.socket"}}));
    assert!(validate_provider(&linux).is_ok());
    let ansible =
        with(json!({"backend": "ansible", "options": {"playbooks": "/etc/patchbay/playbooks"}}));
    assert!(validate_provider(&ansible).is_ok());
    let pinned = with(json!({"hostKey": {
        "fingerprint": "SHA256:v4cRr7ClTTn6CxGK/qsnWEhL7L4H+y3qHDbCyB3xeug"}}));
    assert!(validate_provider(&pinned).is_ok());
    let ovs = provider(json!({"backend": "ovsdb", "os": "ovs", "address": "127.0.0.1"}));
    expect_error(
        validate_provider(&ovs),
        "spec.options.bridge",
        "needs the bridge",
    );
    let ovs_with = |openflow: &str| {
        provider(
            json!({"backend": "ovsdb", "os": "ovs", "address": "127.0.0.1",
                        "options": {"bridge": "br0", "openflow": openflow}}),
        )
    };
    for good in [
        "unix:/var/run/openvswitch/br0.mgmt",
        "tcp:10.0.0.5:6653",
        "tcp:[fd00::1]:6653",
    ] {
        assert!(validate_provider(&ovs_with(good)).is_ok(), "{good}");
    }
    for (bad, reason) in [
        ("unix:relative/br0.mgmt", "not an absolute socket path"),
        ("unix:/var/run/../etc/x", "not an absolute socket path"),
        ("tcp:10.0.0.5", "needs HOST:PORT"),
        ("tcp:10.0.0.5:99999", "not a TCP port"),
        ("ssl:10.0.0.5:6653", "neither unix:/PATH nor tcp:HOST:PORT"),
    ] {
        expect_error(
            validate_provider(&ovs_with(bad)),
            "spec.options.openflow",
            reason,
        );
    }
    expect_error(
        validate_provider(&with(json!({"options": {"openflow": "tcp:10.0.0.5:6653"}}))),
        "spec.options.openflow",
        "only the ovsdb backend",
    );
}

// ---- The schema layer: what the API server refuses before anything is stored ----

/// The schema of `kind`'s spec.
fn spec_schema(kind: &str) -> Value {
    let (_, crd) = crds()
        .into_iter()
        .find(|(_, c)| c.spec.names.kind == kind)
        .unwrap();
    let v = serde_json::to_value(&crd.spec.versions[0].schema).unwrap();
    v["openAPIV3Schema"]["properties"]["spec"].clone()
}

/// Checks a string against a schema node's pattern and length limits, the way the API
/// server does.
fn schema_accepts_string(node: &Value, s: &str) -> bool {
    let pattern = regex::Regex::new(node["pattern"].as_str().expect("has a pattern")).unwrap();
    let len = s.chars().count() as u64;
    pattern.is_match(s)
        && node["maxLength"].as_u64().is_none_or(|m| len <= m)
        && node["minLength"].as_u64().is_none_or(|m| len >= m)
}

fn schema_accepts_integer(node: &Value, n: i64) -> bool {
    node["minimum"].as_f64().is_none_or(|m| n as f64 >= m)
        && node["maximum"].as_f64().is_none_or(|m| n as f64 <= m)
}

#[test]
fn the_schema_refuses_the_hostile_corpus_too() {
    let spc = spec_schema("SwitchPortConfiguration");
    let props = &spc["properties"];
    let description = &props["description"];
    let vlan_name = &props["vlans"]["items"]["properties"]["name"];
    let switch = spec_schema("Switch");
    let port_name = &switch["properties"]["ports"]["additionalProperties"]["properties"]["name"];
    for (what, s) in hostile_strings() {
        assert!(
            !schema_accepts_string(description, &s),
            "schema: description with {what}"
        );
        assert!(
            !schema_accepts_string(vlan_name, &s),
            "schema: VLAN name with {what}"
        );
        assert!(
            !schema_accepts_string(port_name, &s),
            "schema: port name with {what}"
        );
    }
    assert!(schema_accepts_string(
        description,
        "tenant web, server-7 (eth0)"
    ));
    assert!(schema_accepts_string(port_name, "tengigabitethernet 0/0/1"));

    for node in [
        &props["untaggedVLAN"],
        &props["vlans"]["items"]["properties"]["id"],
    ] {
        for bad in [0, 4095, 5000] {
            assert!(
                !schema_accepts_integer(node, bad),
                "schema accepts VLAN {bad}"
            );
        }
        assert!(schema_accepts_integer(node, 1) && schema_accepts_integer(node, 4094));
    }

    let range = &switch["properties"]["ports"]["additionalProperties"]["properties"]["vlanRange"];
    for good in ["1, 6-10", "100", "1-4094"] {
        assert!(schema_accepts_string(range, good), "{good}");
    }
    for bad in ["1-", "-5", "1,,2", "a", "1;2", "1\n2", ""] {
        assert!(
            !schema_accepts_string(range, bad),
            "schema accepts vlanRange {bad:?}"
        );
    }

    let acl = &props["acl"]["items"]["properties"];
    for bad in ["10.0.0.0", "10.0.0.0/8;", "x/8", "10.0.0.0/8\n"] {
        assert!(
            !schema_accepts_string(&acl["src"], bad),
            "schema accepts CIDR {bad:?}"
        );
    }
    assert!(schema_accepts_string(&acl["src"], "10.0.0.0/8"));
    assert!(schema_accepts_string(&acl["src"], "2001:db8::/32"));
    for bad in ["22-", "-22", "a", "22 30"] {
        assert!(!schema_accepts_string(&acl["srcPortRange"], bad), "{bad:?}");
    }
    // The rules a pattern cannot express are CEL rules on the objects.
    let rules: Vec<String> = acl_rules(&props["acl"]["items"]);
    assert!(
        rules
            .iter()
            .any(|r| r.contains("tcp") && r.contains("PortRange"))
    );
}

fn acl_rules(node: &Value) -> Vec<String> {
    node["x-kubernetes-validations"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|r| r["rule"].as_str().unwrap_or("").to_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// "Any" written as `/0` is the same rule as no network (every backend renders and
/// reads back the same thing), and an egress rule on a device that matches egress by
/// the host's MAC is refused, naming the rule, until a MAC is known.
#[test]
fn acl_any_networks_and_egress_host_macs() {
    let spec = config(json!({"acl": [
        {"type": "ipv4", "action": "deny", "protocol": "tcp", "src": "0.0.0.0/0",
         "dstPortRange": "22"},
        {"type": "ipv6", "action": "deny", "protocol": "all", "dst": "::/0",
         "direction": "egress"},
    ]}));
    let desired = configuration_to_desired(&spec, PortName::parse("p1").unwrap()).unwrap();
    assert_eq!(desired.acl[0].src, None);
    assert_eq!(desired.acl[1].dst, None);
    let ovs = Capabilities::new([Capability::Acl]).egress_acl_by_host_mac();
    expect_error(
        with_host_mac(desired.clone(), None, &ovs, "set spec.hostMac"),
        "spec.acl[1].direction",
        "egress rules on this device match the MAC address of the host behind the port, \
         and none is known: set spec.hostMac",
    );
    let with = with_host_mac(desired.clone(), Some("02:00:00:AA:bb:01"), &ovs, "-").unwrap();
    assert_eq!(
        with.host_mac.map(|m| m.to_string()).as_deref(),
        Some("02:00:00:aa:bb:01")
    );
    // A switch that filters on the port itself needs no MAC.
    let switch = Capabilities::new([Capability::Acl]);
    assert!(with_host_mac(desired, None, &switch, "-").is_ok());
}

#[test]
fn link_aggregation_members_share_a_switch_a_host_and_their_settings() {
    let lag = |vlan: i64, extra: Value| {
        let mut v = json!({"untaggedVLAN": vlan, "linkAggregation": {"group": 7}});
        v.as_object_mut()
            .unwrap()
            .extend(extra.as_object().cloned().unwrap_or_default());
        config(v)
    };
    let (same, described, other_vlan, other_group) = (
        lag(100, json!({})),
        lag(100, json!({"description": "b", "disabled": true})),
        lag(200, json!({})),
        config(json!({"untaggedVLAN": 100, "linkAggregation": {"group": 8}})),
    );
    let peer =
        |name: &'static str, switch: &'static str, server: Option<&'static str>, spec| LagPeer {
            name,
            switch,
            device_port: Some(PortName::parse(&format!("Gi0/{}", &name[1..])).unwrap()),
            server,
            spec,
        };
    let this = peer("p1", "leaf1", Some("srv1"), &same);
    let names = |r: Result<std::collections::BTreeSet<PortName>, ValidationErrors>| {
        r.unwrap().iter().map(|p| p.to_string()).collect::<Vec<_>>()
    };
    // Members: same Switch, same group, same Server; description and `disabled` stay
    // each member's.
    assert_eq!(
        names(lag_members(
            &this,
            &[
                this.clone(),
                peer("p2", "leaf1", Some("srv1"), &described),
                peer("p4", "leaf1", Some("srv2"), &other_group),
                peer("p5", "leaf2", Some("srv9"), &same),
            ]
        )),
        ["Gi0/1", "Gi0/2"]
    );
    // Ports cabled to no Server group among themselves.
    let loose = peer("p6", "leaf1", None, &same);
    assert_eq!(
        names(lag_members(
            &loose,
            &[loose.clone(), peer("p7", "leaf1", None, &described)]
        )),
        ["Gi0/6", "Gi0/7"]
    );
    // A host's link and a port of no known host never share a bundle.
    expect_error(
        lag_members(&this, &[peer("p3", "leaf1", None, &same)]),
        "spec.linkAggregation.group",
        "already holds SwitchPort \"p3\", cabled to no Server; this port is cabled to \
         Server \"srv1\"",
    );
    expect_error(
        lag_members(&this, &[peer("p2", "leaf1", Some("srv1"), &other_vlan)]),
        "spec.linkAggregation.group",
        "SwitchPort \"p2\" in group 7 carries a different configuration (untaggedVLAN)",
    );
    expect_error(
        lag_members(&this, &[peer("p2", "leaf1", Some("srv2"), &same)]),
        "spec.linkAggregation.group",
        "already holds SwitchPort \"p2\", cabled to Server \"srv2\"",
    );
    expect_error(
        lag_members(&this, &[peer("p2", "leaf2", Some("srv1"), &same)]),
        "spec.linkAggregation.group",
        "SwitchPort \"p2\" of the same Server \"srv1\" is in group 7 on Switch \"leaf2\"",
    );
    // ACL and link aggregation do not mix.
    expect_error(
        validate_configuration(&lag(
            100,
            json!({"acl": [{"type": "ipv4", "action": "deny", "protocol": "all"}]}),
        )),
        "spec.acl",
        "either acl or linkAggregation",
    );
}

#[test]
fn a_yaml_syntax_error_is_one_row_for_the_file_with_its_line() {
    use patchbay::decide::validate::manifests::validate_manifests;
    let good = "apiVersion: patchbay.dev/v1alpha1\nkind: SwitchPortConfiguration\n\
                metadata: {name: ok, namespace: team-web}\nspec: {untaggedVLAN: 10}\n";
    let broken = format!("{good}---\nkind: SwitchPortConfiguration\nspec: {{vlans: [\n");
    let report = validate_manifests(&[
        ("good.yaml".into(), format!("---\n{good}---\n---\n{good}")),
        ("broken.yaml".into(), broken),
    ]);
    let rows: Vec<(&str, &str, usize)> = report
        .verdicts
        .iter()
        .map(|v| (v.source.as_str(), v.object.as_str(), v.errors.len()))
        .collect();
    // Empty documents are not counted; the broken file is one row, its documents
    // before the break included (a parser cannot resynchronise).
    assert_eq!(
        rows,
        [
            ("good.yaml#1", "SwitchPortConfiguration team-web/ok", 0),
            ("good.yaml#2", "SwitchPortConfiguration team-web/ok", 0),
            ("broken.yaml", "(unparsable YAML)", 1),
        ]
    );
    let reason = &report.verdicts[2].errors[0].reason;
    assert!(
        reason.contains("line ") && !reason.contains('\n'),
        "{reason}"
    );
    assert_eq!(report.invalid(), 1);
}

#[test]
fn a_malformed_rollout_policy_is_reported_by_its_field() {
    use patchbay::decide::validate::manifests::validate_manifests;
    for kind in ["SwitchPortConfiguration", "SmartNicConfiguration"] {
        let doc = format!(
            "apiVersion: patchbay.dev/v1alpha1\nkind: {kind}\n\
             metadata: {{name: web, namespace: team-web}}\n\
             spec: {{untaggedVLAN: 10, rollout: {{maxUnavailable: \"0%\", canary: {{ports: 2, oneSwitch: true}},\n\
             probe: {{httpGet: {{port: 8080, path: healthz}}}}}}}}\n"
        );
        malformed_policy_reported(kind, validate_manifests(&[("web.yaml".into(), doc)]));
    }
}

/// What [`a_malformed_rollout_policy_is_reported_by_its_field`] expects of `kind`.
fn malformed_policy_reported(
    kind: &str,
    report: patchbay::decide::validate::manifests::ValidationReport,
) {
    let errors: Vec<(&str, &str)> = report.verdicts[0]
        .errors
        .iter()
        .map(|e| (e.path.as_str(), e.reason.as_str()))
        .collect();
    let paths: Vec<&str> = errors.iter().map(|(p, _)| *p).collect();
    assert_eq!(
        paths,
        [
            "spec.rollout.maxUnavailable",
            "spec.rollout.canary",
            "spec.rollout.probe.httpGet.path"
        ],
        "{kind}: {errors:?}"
    );
    assert!(errors[0].1.contains("between 1% and 100%"), "{errors:?}");
    assert!(errors[2].1.contains("a path from /"), "{errors:?}");
    assert_eq!(report.invalid(), 1);
}

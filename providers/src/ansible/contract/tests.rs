use super::*;
use crate::model::DesiredPort;
use crate::values::VlanName;

/// The persistent timeout the tests' runs had.
const T: std::time::Duration = std::time::Duration::from_secs(4);

fn port(name: &str) -> PortName {
    PortName::parse(name).unwrap()
}

fn vlan(n: u16) -> VlanId {
    VlanId::new(n).unwrap()
}

#[test]
fn a_batch_becomes_the_contract_variables() {
    let mut a = DesiredPort::clean(port("Fa0/1"));
    a.vlans = VlanMode::Access { vlan: vlan(100) };
    a.vlan_names
        .insert(vlan(100), VlanName::parse("web").unwrap());
    a.description = Some(Description::parse("rack 4").unwrap());
    let mut t = DesiredPort::clean(port("Fa0/2"));
    t.vlans = VlanMode::Trunk {
        native: Some(vlan(10)),
        allowed: [vlan(100), vlan(200)].into_iter().collect(),
    };
    t.admin = AdminState::Down;
    let v = apply_vars(&[a, t, DesiredPort::clean(port("Fa0/3"))]);
    assert_eq!(
        v["patchbay_vlans"],
        json!([{"vlan_id": 10}, {"vlan_id": 100, "name": "web"}, {"vlan_id": 200}])
    );
    assert_eq!(
        v["patchbay_ports"],
        json!([
            {"name": "Fa0/1", "enabled": true, "description": "rack 4", "mtu": null, "mode": "access",
             "access_vlan": 100, "native_vlan": null, "allowed_vlans": []},
            {"name": "Fa0/2", "enabled": false, "description": null, "mtu": null, "mode": "trunk",
             "access_vlan": null, "native_vlan": 10, "allowed_vlans": [100, 200]},
            {"name": "Fa0/3", "enabled": true, "description": null, "mtu": null, "mode": "none",
             "access_vlan": null, "native_vlan": null, "allowed_vlans": []},
        ])
    );
}

#[test]
fn the_inventory_quotes_every_value() {
    let platform = platform("ios").unwrap();
    let inv = inventory(
        platform,
        &Login {
            address: "10.0.0.1",
            port: 2222,
            username: "net\"ops",
            password: Some("p: w\n#x"),
            key_file: None,
            enable_password: Some("en"),
            command_timeout: 30,
            connect_timeout: 10,
        },
    );
    let parsed: serde_json::Value = crate::yaml::from_str(&inv).unwrap();
    let host = &parsed["all"]["hosts"]["device"];
    assert_eq!(host["ansible_password"].as_str(), Some("p: w\n#x"));
    assert_eq!(host["ansible_user"].as_str(), Some("net\"ops"));
    assert_eq!(host["ansible_port"].as_u64(), Some(2222));
    assert_eq!(host["ansible_become_method"].as_str(), Some("enable"));
    assert_eq!(host["ansible_network_os"].as_str(), Some("cisco.ios.ios"));
}

fn output(tasks: Value) -> String {
    json!({"plays": [{"tasks": tasks}], "stats": {}}).to_string()
}

#[test]
fn apply_results_are_per_port_and_name_the_task() {
    let out = output(json!([
        {"task": {"name": "l2 batch"}, "hosts": {"device": {"changed": true}}},
        {"task": {"name": "patchbay results"}, "hosts": {"device": {"patchbay_results": {
            "Fa0/1": {"changed": true, "failed": false},
            "Fa0/2": {"changed": false, "failed": false},
            "Fa0/9": {"changed": false, "failed": true, "task": "known ports",
                      "msg": "port Fa0/9 does not exist on the device"}
        }}}}
    ]));
    let r = apply_results(
        &out,
        &[port("Fa0/1"), port("Fa0/2"), port("Fa0/9"), port("Fa0/4")],
        "sw:22",
        T,
    )
    .unwrap();
    assert_eq!(r[0], Ok(PortChange::Changed));
    assert_eq!(r[1], Ok(PortChange::Unchanged));
    match &r[2] {
        Err(DeviceError::CommandRejected { command, output }) => {
            assert!(
                command.contains("known ports") && command.contains("Fa0/9"),
                "{command}"
            );
            assert!(output.contains("does not exist"), "{output}");
        }
        other => panic!("{other:?}"),
    }
    assert!(
        matches!(r[3], Err(DeviceError::Protocol { .. })),
        "a port the playbook forgot"
    );
}

#[test]
fn a_run_without_results_says_why() {
    let unreachable = output(json!([
        {"task": {"name": "device ports"}, "hosts": {"device": {"unreachable": true,
            "msg": "Failed to connect: [Errno 111] Connection refused"}}}
    ]));
    assert!(matches!(
        apply_results(&unreachable, &[port("Fa0/1")], "sw:22", T),
        Err(DeviceError::Unreachable { .. })
    ));
    let auth = output(json!([
        {"task": {"name": "device ports"}, "hosts": {"device": {"failed": true,
            "msg": "Authentication failed."}}}
    ]));
    assert!(matches!(
        read_results(&auth, &[port("Fa0/1")], "sw:22", T),
        Err(DeviceError::AuthenticationFailed { .. })
    ));
    assert!(apply_results("not json", &[port("Fa0/1")], "sw:22", T).is_err());
}

#[test]
fn reads_become_observed_ports() {
    let out = output(json!([
        {"task": {"name": "patchbay ports"}, "hosts": {"device": {"patchbay_ports_read": [
            {"name": "Fa0/1", "enabled": true, "description": "rack 4", "mode": "access",
             "access_vlan": 100, "native_vlan": null, "allowed_vlans": []},
            {"name": "Fa0/2", "enabled": false, "description": null, "mode": "trunk",
             "access_vlan": null, "native_vlan": 10, "allowed_vlans": ["10", "100-102"]},
            {"name": "Fa0/3", "enabled": true, "mode": "none", "allowed_vlans": []},
            {"name": "Fa0/4", "enabled": true, "mode": "trunk", "allowed_vlans": ["x"]}
        ]}}}
    ]));
    let r = read_results(
        &out,
        &[
            port("Fa0/1"),
            port("Fa0/2"),
            port("Fa0/3"),
            port("Fa0/4"),
            port("Fa0/9"),
        ],
        "sw:22",
        T,
    )
    .unwrap();
    let o = r[0].as_ref().unwrap();
    assert_eq!(o.vlans, Some(VlanMode::Access { vlan: vlan(100) }));
    assert_eq!(
        o.description.clone().flatten().map(|d| d.to_string()),
        Some("rack 4".into())
    );
    assert_eq!(o.mtu, None, "not read: not compared");
    let o = r[1].as_ref().unwrap();
    assert_eq!(o.admin, Some(AdminState::Down));
    assert_eq!(
        o.vlans,
        Some(VlanMode::Trunk {
            native: Some(vlan(10)),
            allowed: [100, 101, 102].map(vlan).into_iter().collect()
        }),
        "the native VLAN is not listed as allowed"
    );
    assert_eq!(r[2].as_ref().unwrap().vlans, Some(VlanMode::Unconfigured));
    assert!(matches!(r[3], Err(DeviceError::Protocol { .. })));
    assert!(matches!(r[4], Err(DeviceError::UnknownPort { .. })));
    // Without a VLAN table the table is not checked.
    assert_eq!(r[0].as_ref().unwrap().missing_vlans, None);
}

#[test]
fn a_read_with_the_vlan_table_names_what_a_port_carries_and_the_switch_lacks() {
    let out = output(json!([
        {"task": {"name": "patchbay vlans"}, "hosts": {"device": {"patchbay_vlans_read":
            [1, "100", "101-102", 200]}}},
        {"task": {"name": "patchbay ports"}, "hosts": {"device": {"patchbay_ports_read": [
            {"name": "Fa0/1", "enabled": true, "mode": "access", "access_vlan": 10},
            {"name": "Fa0/2", "enabled": true, "mode": "trunk", "native_vlan": 100,
             "allowed_vlans": ["101-103", 200]}
        ]}}}
    ]));
    let r = read_results(&out, &[port("Fa0/1"), port("Fa0/2")], "sw:22", T).unwrap();
    let missing = |i: usize| r[i].as_ref().unwrap().missing_vlans.clone();
    assert_eq!(missing(0), Some([vlan(10)].into_iter().collect()));
    assert_eq!(missing(1), Some([vlan(103)].into_iter().collect()));
    let broken = output(json!([
        {"task": {"name": "patchbay vlans"}, "hosts": {"device": {"patchbay_vlans_read": "1"}}},
        {"task": {"name": "patchbay ports"}, "hosts": {"device": {"patchbay_ports_read": []}}}
    ]));
    assert!(matches!(
        read_results(&broken, &[port("Fa0/1")], "sw:22", T),
        Err(DeviceError::Protocol { .. })
    ));
}

#[test]
fn every_embedded_playbook_is_yaml_and_ends_with_the_contract_task() {
    for (dir, file, text) in PLAYBOOKS {
        let v: serde_json::Value =
            crate::yaml::from_str(text).unwrap_or_else(|e| panic!("{dir}/{file}: {e}"));
        let last = match file {
            "apply.yml" => "patchbay results",
            "read.yml" => "patchbay ports",
            _ => continue,
        };
        let tasks = v[0]["tasks"].as_array().unwrap();
        assert_eq!(
            tasks.last().unwrap()["name"].as_str(),
            Some(last),
            "{dir}/{file}"
        );
    }
    assert_eq!(config("/tmp/x", 30).matches("/tmp/x/").count(), 2);
}

#[test]
fn a_connection_failure_is_the_switchs_and_named_as_the_ssh_backend_names_it() {
    let t = std::time::Duration::from_secs(4);
    // What Ansible 11 (network_cli, paramiko) printed for each, against real peers.
    let rows: [(&str, bool, &str); 10] = [
        (
            "command timeout triggered, timeout value is 4 secs.\nSee the timeout setting \
             options in the Network Debug and Troubleshooting Guide.",
            false,
            "DeviceTimeout",
        ),
        (
            "[Errno None] Unable to connect to port 41625 on 127.0.0.1",
            false,
            "DeviceUnreachable",
        ),
        ("Authentication failed.", false, "AuthenticationFailed"),
        ("Authentication timeout.", false, "DeviceTimeout"),
        (
            "ssh connection failed: ssh connect failed: Connection refused",
            false,
            "DeviceUnreachable",
        ),
        (
            "Error reading SSH protocol banner",
            false,
            "DeviceUnreachable",
        ),
        (
            "paramiko: The authenticity of host '[127.0.0.1]:22' can't be established. host key not found",
            false,
            "HostKeyMismatch",
        ),
        (
            "Failed to connect to the host via ssh",
            true,
            "DeviceUnreachable",
        ),
        ("Invalid input (privileged mode required)", false, "-"),
        ("port Fa0/9 does not exist on the device", false, "-"),
    ];
    for (msg, unreachable, want) in rows {
        let got = connection_failure(msg, unreachable, "sw:22", t);
        assert_eq!(
            got.as_ref().map_or("-", DeviceError::category),
            want,
            "{msg}: {got:?}"
        );
        if let Some(e) = got {
            assert!(e.is_session_failure(), "{e}");
        }
    }
    assert!(matches!(
        connection_failure("command timeout triggered, timeout value is 7 secs.", false, "sw:22", t),
        Some(DeviceError::Timeout { after, .. }) if after == std::time::Duration::from_secs(7)
    ));
    assert!(matches!(
        connection_failure("socket.timeout: timed out", false, "sw:22", t),
        Some(DeviceError::Timeout { after, .. }) if after == t
    ));
}

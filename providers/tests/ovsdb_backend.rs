//! The OVSDB client and the Open vSwitch backend against a real Open vSwitch
//! (ovsdb-server + ovs-vswitchd started by `fake-switch/ovs.py` in a temporary
//! directory, stopped by PID). Everything the backend writes is read back twice: by
//! the backend itself and independently with `ovs-vsctl`.

#[path = "support/netns.rs"]
mod netns;

#[path = "support/lag_cases.rs"]
mod lag_cases;

use lag_cases::{outcomes, sets};

use std::time::Duration;

use netns::Hosts;
use patchbay_providers::ovsdb::{Connection, Endpoint, OvsOptions, OvsSwitch, OvsdbError};
use patchbay_providers::values::{
    Cidr, Description, L4PortRange, LagGroup, MacAddress, Mtu, PortName, VlanId,
};
use patchbay_providers::{
    AclAction, AclDirection, AclProtocol, AclRule, AdminState, Capability, DesiredPort, Device,
    DeviceError, IpVersion, LagMembership, LagMode, PortChange, PortOperation, VlanMode,
};
use patchbay_testbed::OvsSim;
use serde_json::json;

fn p(name: &str) -> PortName {
    PortName::parse(name).unwrap()
}

fn v(n: u16) -> VlanId {
    VlanId::new(n).unwrap()
}

fn backend(ovs: &OvsSim, bridge: &str, openflow: bool) -> OvsSwitch {
    OvsSwitch::new(OvsOptions {
        endpoint: Endpoint::Tcp(ovs.ovsdb_tcp()),
        bridge: bridge.into(),
        openflow: if openflow { ovs.openflow(bridge) } else { None },
        connect_timeout: Duration::from_secs(5),
        command_timeout: Duration::from_secs(10),
        control_socket: Some(ovs.info.dir.join("ovs-vswitchd.ctl")),
    })
}

/// `tag trunks vlan_mode mtu_request description admin_state` as ovs-vsctl sees them.
fn columns(ovs: &OvsSim, port: &str) -> String {
    let get = |table: &str, col: &str| ovs.vsctl(&["get", table, port, col]).unwrap();
    let desc = ovs
        .vsctl(&[
            "--if-exists",
            "get",
            "Port",
            port,
            "external_ids:\"patchbay/description\"",
        ])
        .unwrap();
    format!(
        "tag={} trunks={} vlan_mode={} mtu_request={} description={} admin={}",
        get("Port", "tag"),
        get("Port", "trunks"),
        get("Port", "vlan_mode"),
        get("Interface", "mtu_request"),
        if desc.is_empty() { "-".into() } else { desc },
        get("Interface", "admin_state"),
    )
}

#[tokio::test]
async fn client_speaks_rfc7047_over_tcp_and_unix_with_typed_errors() {
    let ovs = OvsSim::start(&["br0"]).expect("Open vSwitch starts");
    ovs.vsctl(&[
        "add-port",
        "br0",
        "t1",
        "--",
        "set",
        "Interface",
        "t1",
        "type=internal",
    ])
    .unwrap();
    let t = Duration::from_secs(5);
    for ep in [
        Endpoint::Tcp(ovs.ovsdb_tcp()),
        Endpoint::Unix(ovs.info.db_socket.clone()),
    ] {
        let mut c = Connection::connect(&ep, t, t).await.unwrap();
        let dbs = c.list_dbs().await.unwrap();
        assert!(dbs.contains(&"Open_vSwitch".to_string()), "{ep}: {dbs:?}");
        assert_eq!(c.echo(json!(["ping"])).await.unwrap(), json!(["ping"]));
        let r = c
            .transact(
                "Open_vSwitch",
                &[json!({"op": "select", "table": "Port", "where": [["name", "==", "t1"]], "columns": ["name"]})],
            )
            .await
            .unwrap();
        assert_eq!(r[0]["rows"][0]["name"], "t1", "{ep}");
    }

    // insert (with a uuid-name), mutate, delete: a root table (QoS) row round trip.
    let mut c = Connection::connect(&Endpoint::Unix(ovs.info.db_socket.clone()), t, t)
        .await
        .unwrap();
    let r = c
        .transact(
            "Open_vSwitch",
            &[
                json!({"op": "insert", "table": "QoS", "uuid-name": "q",
                       "row": {"type": "linux-htb", "external_ids": ["map", [["owner", "test"]]]}}),
                json!({"op": "mutate", "table": "QoS", "where": [["_uuid", "==", ["named-uuid", "q"]]],
                       "mutations": [["external_ids", "insert", ["map", [["k", "v"]]]]]}),
            ],
        )
        .await
        .unwrap();
    let uuid = r[0]["uuid"][1].as_str().unwrap().to_owned();
    assert_eq!(r[1]["count"], 1);
    assert_eq!(
        ovs.vsctl(&["get", "QoS", &uuid, "external_ids"]).unwrap(),
        "{k=v, owner=test}"
    );
    let r = c
        .transact(
            "Open_vSwitch",
            &[json!({"op": "delete", "table": "QoS", "where": [["_uuid", "==", ["uuid", uuid]]]})],
        )
        .await
        .unwrap();
    assert_eq!(r[0]["count"], 1);
    assert_eq!(ovs.vsctl(&["list", "QoS"]).unwrap(), "");

    // An error inside result[i] is typed, names the operation, and the whole
    // transaction is rolled back: the good update before it did not happen.
    let mut c = Connection::connect(&Endpoint::Tcp(ovs.ovsdb_tcp()), t, t)
        .await
        .unwrap();
    let err = c
        .transact(
            "Open_vSwitch",
            &[
                json!({"op": "update", "table": "Port", "where": [["name", "==", "t1"]], "row": {"tag": 10}}),
                json!({"op": "update", "table": "Port", "where": [["name", "==", "t1"]], "row": {"tag": 4096}}),
            ],
        )
        .await
        .unwrap_err();
    match &err {
        OvsdbError::Operation { op, error, .. } => {
            assert_eq!(op, "operation 1 (update Port)");
            assert_eq!(error, "constraint violation");
        }
        other => panic!("expected an operation error, got {other:?}"),
    }
    assert_eq!(ovs.vsctl(&["get", "Port", "t1", "tag"]).unwrap(), "[]");
    // A wrong method is a top-level error.
    assert!(matches!(
        c.call("no_such_method", json!([])).await,
        Err(OvsdbError::Rpc { .. })
    ));

    // The server's echo probes are answered while a call waits: a manager with a
    // 1 s probe, and a `wait` that blocks for 2.5 s and then times out (typed).
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    ovs.vsctl(&["set-manager", &format!("ptcp:{port}:127.0.0.1")])
        .unwrap();
    ovs.vsctl(&["set", "Manager", ".", "inactivity_probe=1000"])
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut c = Connection::connect(
        &Endpoint::Tcp(format!("127.0.0.1:{port}")),
        t,
        Duration::from_secs(10),
    )
    .await
    .unwrap();
    let err = c
        .transact(
            "Open_vSwitch",
            &[
                json!({"op": "wait", "table": "Open_vSwitch", "where": [], "columns": ["cur_cfg"],
                     "until": "==", "rows": [{"cur_cfg": -1}], "timeout": 2500}),
            ],
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&err, OvsdbError::Operation { error, .. } if error == "timed out"),
        "{err:?}"
    );
    assert!(c.echoes_answered() >= 1, "no echo was answered");
    // The session survived its probes.
    assert!(c.list_dbs().await.is_ok());

    // Nothing listening: Unreachable, naming the endpoint.
    let e: DeviceError = Connection::connect(&Endpoint::Tcp("127.0.0.1:1".into()), t, t)
        .await
        .err()
        .unwrap()
        .into();
    assert!(
        matches!(&e, DeviceError::Unreachable { address, .. } if address == "tcp:127.0.0.1:1"),
        "{e:?}"
    );
}

#[tokio::test]
async fn every_port_state_is_written_read_back_and_reset() {
    let ovs = OvsSim::start(&["br0"]).expect("Open vSwitch starts");
    let hosts = Hosts::create(&ovs, "br0", 1);
    let port = hosts.ports[0].clone();
    let sw = backend(&ovs, "br0", true);
    assert!(sw.capabilities().supports(Capability::Disable));
    let clean = columns(&ovs, &port);
    assert_eq!(
        clean,
        "tag=[] trunks=[] vlan_mode=[] mtu_request=[] description=- admin=up"
    );
    assert_eq!(
        sw.get_port(&p(&port)).await.unwrap(),
        patchbay_providers::ObservedPort {
            acl: Some(Vec::new()),
            // Open vSwitch has no VLAN table.
            missing_vlans: None,
            ..patchbay_providers::ObservedPort::from_desired(&DesiredPort::clean(p(&port)))
        }
    );

    let mut access = DesiredPort::clean(p(&port));
    access.vlans = VlanMode::Access { vlan: v(10) };
    access.mtu = Some(Mtu::new(9000).unwrap());
    access.description = Some(Description::parse("web-01 eth1").unwrap());
    let mut trunk = DesiredPort::clean(p(&port));
    trunk.vlans = VlanMode::Trunk {
        native: None,
        allowed: [v(20), v(30)].into_iter().collect(),
    };
    let mut native = DesiredPort::clean(p(&port));
    native.vlans = VlanMode::Trunk {
        native: Some(v(5)),
        allowed: [v(20)].into_iter().collect(),
    };
    let mut disabled = access.clone();
    disabled.admin = AdminState::Down;
    let cases = [
        (
            &access,
            "tag=10 trunks=[] vlan_mode=access mtu_request=9000 description=\"web-01 eth1\" admin=up",
        ),
        (
            &trunk,
            "tag=[] trunks=[20, 30] vlan_mode=trunk mtu_request=[] description=- admin=up",
        ),
        (
            &native,
            "tag=5 trunks=[5, 20] vlan_mode=native-untagged mtu_request=[] description=- admin=up",
        ),
        (
            &disabled,
            "tag=10 trunks=[] vlan_mode=access mtu_request=9000 description=\"web-01 eth1\" admin=down",
        ),
        (
            &access,
            "tag=10 trunks=[] vlan_mode=access mtu_request=9000 description=\"web-01 eth1\" admin=up",
        ),
    ];
    for (desired, expect) in cases {
        assert_eq!(sw.set_port(desired).await.unwrap(), PortChange::Changed);
        assert_eq!(columns(&ovs, &port), expect);
        let observed = sw.get_port(&p(&port)).await.unwrap();
        assert!(
            patchbay_providers::diff(desired, &observed).is_empty(),
            "{desired:?} read back as {observed:?}"
        );
        // Idempotent: nothing to send the second time.
        assert_eq!(sw.set_port(desired).await.unwrap(), PortChange::Unchanged);
        if desired.admin == AdminState::Down {
            assert!(!hosts.has_carrier(0), "the host still has carrier");
        } else {
            assert!(hosts.has_carrier(0), "the host has no carrier");
        }
    }
    // Other external_ids survive a description change.
    ovs.vsctl(&["set", "Port", &port, "external_ids:owner=infra"])
        .unwrap();
    let mut other = access.clone();
    other.description = Some(Description::parse("db-02").unwrap());
    sw.set_port(&other).await.unwrap();
    assert_eq!(
        ovs.vsctl(&["get", "Port", &port, "external_ids"]).unwrap(),
        "{owner=infra, \"patchbay/description\"=db-02}"
    );

    // Reset: back to the clean definition, port up.
    sw.set_port(&disabled).await.unwrap();
    assert_eq!(sw.reset_port(&p(&port)).await.unwrap(), PortChange::Changed);
    assert_eq!(columns(&ovs, &port), clean);
    assert!(hosts.has_carrier(0));

    // Drift behind the backend's back is seen on the next read.
    sw.set_port(&access).await.unwrap();
    ovs.vsctl(&["set", "Port", &port, "tag=30"]).unwrap();
    let observed = sw.get_port(&p(&port)).await.unwrap();
    assert_eq!(observed.vlans, Some(VlanMode::Access { vlan: v(30) }));
    ovs.vsctl(&["set", "Port", &port, "vlan_mode=native-tagged"])
        .unwrap();
    let observed = sw.get_port(&p(&port)).await.unwrap();
    assert!(!patchbay_providers::diff(&access, &observed).is_empty());
    assert_eq!(sw.set_port(&access).await.unwrap(), PortChange::Changed);
    assert_eq!(
        columns(&ovs, &port),
        "tag=10 trunks=[] vlan_mode=access mtu_request=9000 description=\"web-01 eth1\" admin=up"
    );
}

#[tokio::test]
async fn batches_are_one_transaction_with_results_per_port() {
    let ovs = OvsSim::start(&["br0", "br1"]).expect("Open vSwitch starts");
    for i in 1..=4 {
        let name = format!("b{i}");
        ovs.vsctl(&[
            "add-port",
            "br0",
            &name,
            "--",
            "set",
            "Interface",
            &name,
            "type=internal",
        ])
        .unwrap();
    }
    ovs.vsctl(&[
        "add-port",
        "br1",
        "other",
        "--",
        "set",
        "Interface",
        "other",
        "type=internal",
    ])
    .unwrap();
    let sw = backend(&ovs, "br0", false);
    assert!(!sw.capabilities().supports(Capability::Disable));
    let access = |port: &str, vlan: u16| {
        let mut d = DesiredPort::clean(p(port));
        d.vlans = VlanMode::Access { vlan: v(vlan) };
        d
    };
    let mut disabled = access("b3", 30);
    disabled.admin = AdminState::Down;
    let ops = vec![
        PortOperation::Set(access("b1", 10)),
        PortOperation::Set(access("nope", 10)),
        PortOperation::Set(access("other", 10)),
        PortOperation::Set(disabled),
        PortOperation::Set(access("b2", 20)),
        PortOperation::Reset(p("b4")),
    ];
    let before = ovs
        .vsctl(&["get", "Open_vSwitch", ".", "cur_cfg"])
        .unwrap()
        .parse::<i64>()
        .unwrap();
    let results = sw.apply_batch(&ops).await.unwrap();
    let outcome: Vec<String> = results
        .iter()
        .map(|r| match &r.outcome {
            Ok(c) => format!("{}: {c:?}", r.port),
            Err(e) => format!("{}: {e}", r.port),
        })
        .collect();
    assert_eq!(
        outcome,
        vec![
            "b1: Changed",
            "nope: port nope does not exist on the device",
            "other: port other (not on bridge br0) does not exist on the device",
            "b3: this backend cannot configure disabling the port",
            "b2: Changed",
            "b4: Unchanged",
        ]
    );
    // One configuration round for the whole batch, applied by ovs-vswitchd.
    let after = ovs
        .vsctl(&["get", "Open_vSwitch", ".", "cur_cfg"])
        .unwrap()
        .parse::<i64>()
        .unwrap();
    assert_eq!(after, before + 1);
    assert_eq!(ovs.vsctl(&["get", "Port", "b1", "tag"]).unwrap(), "10");
    assert_eq!(ovs.vsctl(&["get", "Port", "b2", "tag"]).unwrap(), "20");
    assert_eq!(ovs.vsctl(&["get", "Port", "b3", "tag"]).unwrap(), "[]");
    assert_eq!(ovs.vsctl(&["get", "Port", "other", "tag"]).unwrap(), "[]");

    // A bridge that does not exist is named.
    let e = backend(&ovs, "br9", false)
        .get_port(&p("b1"))
        .await
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "the device rejected `select Bridge br9`: there is no bridge of that name"
    );

    // ovs-vswitchd gone: the change is in the database but never applied, and the
    // backend says so instead of reporting success.
    let slow = OvsSwitch::new(OvsOptions {
        endpoint: Endpoint::Tcp(ovs.ovsdb_tcp()),
        bridge: "br0".into(),
        openflow: None,
        connect_timeout: Duration::from_secs(5),
        command_timeout: Duration::from_secs(1),
        control_socket: None,
    });
    let pid = ovs.info.ovs_vswitchd_pid.to_string();
    std::process::Command::new("kill")
        .args(["-STOP", &pid])
        .status()
        .unwrap();
    let e = slow.set_port(&access("b1", 11)).await.unwrap_err();
    std::process::Command::new("kill")
        .args(["-CONT", &pid])
        .status()
        .unwrap();
    assert!(
        matches!(&e, DeviceError::Timeout { during, .. } if during.contains("ovs-vswitchd")),
        "{e:?}"
    );
}

/// patchbay's flows (cookie 0x7062…) on `bridge`, one per line, as ovs-ofctl
/// prints them without counters.
fn patchbay_flows(ovs: &OvsSim, bridge: &str) -> Vec<String> {
    ovs.ofctl(
        "dump-flows",
        bridge,
        &["--no-stats", "cookie=0x7062000000000000/0xffff000000000000"],
    )
    .unwrap()
    .lines()
    .filter(|l| l.contains("cookie="))
    .map(|l| l.trim().to_owned())
    .collect()
}

fn rule(text: &str) -> AclRule {
    let mut r = AclRule::matching(
        IpVersion::V4,
        AclProtocol::Tcp,
        AclDirection::Ingress,
        AclAction::Deny,
    );
    for w in text.split_whitespace() {
        match w {
            "allow" => r.action = AclAction::Allow,
            "icmp" => r.protocol = AclProtocol::Icmp,
            "out" => r.direction = AclDirection::Egress,
            "v6" => r.ip_version = IpVersion::V6,
            _ => match w.split_once('=') {
                Some(("dp", p)) => r.dst_ports = Some(L4PortRange::parse(p).unwrap()),
                Some(("src", c)) => r.src = Some(Cidr::parse(c).unwrap()),
                _ => panic!("{w}"),
            },
        }
    }
    r
}

#[tokio::test]
async fn acl_flows_are_written_read_back_repaired_and_only_patchbay_s_removed() {
    let ovs = OvsSim::start(&["br0"]).expect("Open vSwitch starts");
    let hosts = Hosts::create(&ovs, "br0", 2);
    let (port, other) = (hosts.ports[0].clone(), hosts.ports[1].clone());
    let sw = backend(&ovs, "br0", true);
    assert!(sw.capabilities().supports(Capability::Acl));
    assert!(sw.capabilities().egress_needs_host_mac());
    assert!(
        !backend(&ovs, "br0", false)
            .capabilities()
            .supports(Capability::Acl),
        "without an OpenFlow target there are no ACLs"
    );
    // A flow somebody else wrote: patchbay must never touch it.
    ovs.ofctl(
        "add-flow",
        "br0",
        &["cookie=0x1234,priority=100,tcp,tp_dst=9999,actions=drop"],
    )
    .unwrap();
    let foreign = || {
        ovs.ofctl("dump-flows", "br0", &["--no-stats", "cookie=0x1234/-1"])
            .unwrap()
    };
    assert!(foreign().contains("tp_dst=9999"));

    let mut desired = DesiredPort::clean(p(&port));
    desired.vlans = VlanMode::Access { vlan: v(10) };
    desired.acl = vec![
        rule("dp=22-25"),
        rule("allow icmp out"),
        rule("v6 src=2001:db8::/32"),
    ];
    desired.host_mac = Some(MacAddress::parse("02:00:00:00:00:01").unwrap());
    assert_eq!(sw.set_port(&desired).await.unwrap(), PortChange::Changed);
    let back = sw.get_port(&p(&port)).await.unwrap();
    assert_eq!(back.acl.as_ref(), Some(&desired.acl));
    assert_eq!(back.vlans, Some(VlanMode::Access { vlan: v(10) }));
    // Read independently: two blocks for 22-25, one egress flow, one IPv6 rule and
    // the five neighbour-discovery pass flows IPv6 rules bring.
    let flows = patchbay_flows(&ovs, "br0");
    assert_eq!(flows.len(), 9, "{flows:#?}");
    assert!(
        flows
            .iter()
            .any(|f| f.contains("tp_dst=0x16/0xfffe") && f.contains("actions=drop"))
    );
    assert!(flows.iter().any(|f| f.contains("tp_dst=0x18/0xfffe")));
    assert!(
        flows
            .iter()
            .any(|f| f.contains("dl_dst=02:00:00:00:00:01") && f.contains("actions=NORMAL"))
    );
    assert_eq!(
        flows.iter().filter(|f| f.contains("icmp_type=13")).count(),
        5
    );
    assert_eq!(sw.set_port(&desired).await.unwrap(), PortChange::Unchanged);

    // Drift: one of the port's flows deleted behind patchbay's back is seen and
    // put back.
    ovs.ofctl("del-flows", "br0", &["tcp,tp_dst=0x18/0xfffe"])
        .unwrap();
    assert_ne!(
        sw.get_port(&p(&port)).await.unwrap().acl.as_ref(),
        Some(&desired.acl)
    );
    assert_eq!(sw.set_port(&desired).await.unwrap(), PortChange::Changed);
    assert_eq!(
        sw.get_port(&p(&port)).await.unwrap().acl.as_ref(),
        Some(&desired.acl)
    );
    assert_eq!(patchbay_flows(&ovs, "br0").len(), 9);

    // A changed ACL replaces the old flows; nothing of the old generation is left.
    let mut changed = desired.clone();
    changed.acl = vec![rule("allow dp=80"), rule("")];
    assert_eq!(sw.set_port(&changed).await.unwrap(), PortChange::Changed);
    assert_eq!(
        sw.get_port(&p(&port)).await.unwrap().acl.as_ref(),
        Some(&changed.acl)
    );
    let flows = patchbay_flows(&ovs, "br0");
    assert_eq!(flows.len(), 2, "{flows:#?}");

    // The neighbour's ACL is its own: cleaning one port leaves the other's flows.
    let mut neighbour = DesiredPort::clean(p(&other));
    neighbour.acl = vec![rule("dp=443")];
    sw.set_port(&neighbour).await.unwrap();
    assert_eq!(patchbay_flows(&ovs, "br0").len(), 3);

    // An egress rule without the host's MAC is refused, and changes nothing.
    let mut no_mac = changed.clone();
    no_mac.acl = vec![rule("out")];
    no_mac.host_mac = None;
    let e = sw.set_port(&no_mac).await.unwrap_err();
    assert!(e.to_string().contains("MAC address of the host"), "{e}");
    assert_eq!(patchbay_flows(&ovs, "br0").len(), 3);

    // Cleaning removes exactly the port's flows: the neighbour's and the foreign
    // flow stay.
    sw.reset_port(&p(&port)).await.unwrap();
    assert_eq!(sw.get_port(&p(&port)).await.unwrap().acl, Some(Vec::new()));
    let left = patchbay_flows(&ovs, "br0");
    assert_eq!(left.len(), 1, "{left:#?}");
    assert!(left[0].contains("tp_dst=443"));
    assert!(
        foreign().contains("tp_dst=9999"),
        "a foreign flow was touched"
    );
    sw.reset_port(&p(&other)).await.unwrap();
    assert!(patchbay_flows(&ovs, "br0").is_empty());
    assert!(foreign().contains("tp_dst=9999"));
}

/// The bridge's ports, as `ovs-vsctl list-ports` sees them.
fn bridge_ports(ovs: &OvsSim, bridge: &str) -> Vec<String> {
    let mut ports: Vec<String> = ovs
        .vsctl(&["list-ports", bridge])
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    ports.sort();
    ports
}

/// `lacp tag trunks vlan_mode` of a bond Port and its interfaces' names.
fn bond(ovs: &OvsSim, name: &str) -> String {
    let get = |col: &str| ovs.vsctl(&["get", "Port", name, col]).unwrap();
    let mut ifaces: Vec<String> = get("interfaces")
        .trim_matches(|c| c == '[' || c == ']')
        .split(", ")
        .filter(|u| !u.is_empty())
        .map(|u| ovs.vsctl(&["get", "Interface", u, "name"]).unwrap())
        .collect();
    ifaces.sort();
    format!(
        "lacp={} tag={} trunks={} vlan_mode={} bond_mode={} ifaces={}",
        get("lacp"),
        get("tag"),
        get("trunks"),
        get("vlan_mode"),
        get("bond_mode"),
        ifaces.join(",")
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bonds_are_formed_changed_and_dissolved_one_transaction_at_a_time() {
    let ovs = OvsSim::start(&["br0"]).expect("Open vSwitch starts");
    let hosts = Hosts::create(&ovs, "br0", 3);
    let [a, b, c] = [0, 1, 2].map(|i| hosts.ports[i].clone());
    let sw = backend(&ovs, "br0", true);
    let member = |port: &str, vlans: VlanMode, mode: LagMode| {
        lag_cases::member(p(port), 7, mode, vlans, &[p(&a), p(&b)])
    };
    let trunk = VlanMode::Trunk {
        native: Some(v(10)),
        allowed: [v(20), v(30)].into_iter().collect(),
    };
    let mut da = member(&a, trunk.clone(), LagMode::Active);
    da.description = Some(Description::parse("uplink a").unwrap());
    let mut db = member(&b, trunk.clone(), LagMode::Active);
    db.admin = AdminState::Down;
    db.mtu = Some(Mtu::new(9000).unwrap());

    // Formed: both members in one bond, which carries the VLANs.
    let r = sw.apply_batch(&sets(&[&da, &db])).await.unwrap();
    assert_eq!(outcomes(r), ["Changed", "Changed"]);
    assert_eq!(bridge_ports(&ovs, "br0"), ["bond7".to_owned(), c.clone()]);
    assert_eq!(
        bond(&ovs, "bond7"),
        format!(
            "lacp=active tag=10 trunks=[10, 20, 30] vlan_mode=native-untagged \
             bond_mode=balance-slb ifaces={a},{b}"
        )
    );
    let get = |iface: &str, col: &str| ovs.vsctl(&["get", "Interface", iface, col]).unwrap();
    assert_eq!(
        get(&a, "external_ids"),
        "{\"patchbay/description\"=\"uplink a\"}"
    );
    assert_eq!(
        (
            get(&b, "mtu_request"),
            get(&b, "admin_state"),
            get(&a, "admin_state")
        ),
        ("9000".into(), "down".into(), "up".into())
    );
    // Each member reads back as itself, with its group.
    for d in [&da, &db] {
        let seen = sw.get_port(&d.port).await.unwrap();
        assert!(patchbay_providers::diff(d, &seen).is_empty(), "{seen:?}");
        assert_eq!(seen.lag, Some(d.lag));
    }
    let r = sw.apply_batch(&sets(&[&da, &db])).await.unwrap();
    assert_eq!(outcomes(r), ["Unchanged", "Unchanged"]);

    // Changed: LACP passive on access VLAN 40, in one update of the bond.
    let pa = member(&a, VlanMode::Access { vlan: v(40) }, LagMode::Passive);
    let pb = member(&b, VlanMode::Access { vlan: v(40) }, LagMode::Passive);
    let r = sw.apply_batch(&sets(&[&pa, &pb])).await.unwrap();
    assert_eq!(outcomes(r), ["Changed", "Changed"]);
    assert!(
        bond(&ovs, "bond7").starts_with("lacp=passive tag=40 trunks=[] vlan_mode=access"),
        "{}",
        bond(&ovs, "bond7")
    );
    assert_eq!(
        get(&b, "admin_state"),
        "up",
        "b's own admin state follows it"
    );

    // A member leaves: its own Port again, clean; the bond keeps the other.
    let r = sw
        .apply_batch(&[PortOperation::Reset(p(&a))])
        .await
        .unwrap();
    assert_eq!(outcomes(r), ["Changed"]);
    assert_eq!(
        bridge_ports(&ovs, "br0"),
        ["bond7".to_owned(), a.clone(), c.clone()]
    );
    assert_eq!(
        columns(&ovs, &a),
        "tag=[] trunks=[] vlan_mode=[] mtu_request=[] description=- admin=up"
    );
    assert_eq!(get(&a, "external_ids"), "{}");
    assert_eq!(sw.get_port(&p(&a)).await.unwrap().lag, Some(None));
    assert!(bond(&ovs, "bond7").ends_with(&format!("ifaces={b}")));
    // The last member leaves: the bond goes with it.
    let r = sw
        .apply_batch(&[PortOperation::Reset(p(&b))])
        .await
        .unwrap();
    assert_eq!(outcomes(r), ["Changed"]);
    assert_eq!(bridge_ports(&ovs, "br0"), [a.clone(), b.clone(), c.clone()]);
    assert_eq!(
        columns(&ovs, &b),
        "tag=[] trunks=[] vlan_mode=[] mtu_request=[] description=- admin=up"
    );

    // A Port of the bond's name that patchbay did not make is refused, untouched.
    ovs.vsctl(&[
        "add-port",
        "br0",
        "bond9",
        "--",
        "set",
        "Interface",
        "bond9",
        "type=internal",
    ])
    .unwrap();
    let mut foreign = member(&c, VlanMode::Access { vlan: v(40) }, LagMode::Active);
    foreign.lag = Some(LagMembership {
        group: LagGroup::new(9).unwrap(),
        mode: LagMode::Active,
    });
    let r = sw.apply_batch(&sets(&[&foreign])).await.unwrap();
    let text = outcomes(r).join("");
    assert!(
        text.contains("Port bond9 exists on the bridge and is not patchbay's bond of group 9"),
        "{text}"
    );
    assert_eq!(
        columns(&ovs, &c),
        "tag=[] trunks=[] vlan_mode=[] mtu_request=[] description=- admin=up"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn learned_macs_are_read_per_port_from_the_control_socket() {
    use patchbay_providers::NeighborSource;
    let ovs = OvsSim::start(&["br0", "br1"]).unwrap();
    let hosts = Hosts::create_on(&ovs, &["br0", "br0", "br1"]);
    // Traffic teaches the bridges where each host is (the third, alone on br1, speaks
    // to nobody but still sends its ARP requests).
    assert_eq!(hosts.loss(0, 1, 2), 0);
    let _ = hosts.loss(2, 0, 1);
    let n = backend(&ovs, "br0", false).neighbors().await.unwrap();
    let seen = |port: &str| n.port(port).map(|p| p.macs.clone()).unwrap_or_default();
    assert_eq!(seen(&hosts.ports[0]), vec![hosts.mac(0)]);
    assert_eq!(seen(&hosts.ports[1]), vec![hosts.mac(1)]);
    assert!(
        n.port(&hosts.ports[2]).is_none(),
        "br1's ports are not br0's: {n:#?}"
    );
    assert_eq!(n.chassis_id, None, "Open vSwitch sends no LLDP of its own");
    let br1 = backend(&ovs, "br1", false).neighbors().await.unwrap();
    assert_eq!(
        br1.port(&hosts.ports[2]).map(|p| p.macs.clone()),
        Some(vec![hosts.mac(2)])
    );
    // Without a control socket there is nothing to read from, and it says so.
    let blind = OvsSwitch::new(OvsOptions {
        endpoint: Endpoint::Tcp(ovs.ovsdb_tcp()),
        bridge: "br0".into(),
        openflow: None,
        connect_timeout: Duration::from_secs(5),
        command_timeout: Duration::from_secs(5),
        control_socket: None,
    });
    let e = blind.neighbors().await.unwrap_err().to_string();
    assert!(e.contains("options.controlSocket"), "{e}");
}

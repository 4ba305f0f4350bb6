//! SmartNicPorts on a real Open vSwitch, proven with traffic. Three network
//! namespaces hang off an OVS bridge (userspace datapath, ovsdb-server and
//! ovs-vswitchd started by `fake-switch/ovs.py` and stopped by PID); the operator on
//! devplane configures the bridge ports from SmartNicPort / SmartNicConfiguration
//! objects, and chains one of them to a port of a simulated Cisco switch (SSH).
//! Every step is checked three ways: the objects' status, the device read back
//! (`ovs-vsctl`, the Cisco's own show output) and ping between the namespaces.

#[path = "../providers/tests/support/ssh_cases.rs"]
mod ssh_cases;
mod support;

use kube::ResourceExt;
use kube::api::{Patch, PatchParams};
use patchbay::api::keys::CHAINED_FROM_ANNOTATION;
use patchbay::api::{
    PortState, ProviderSwitch, SmartNicConfiguration, SmartNicPort, SwitchPort,
    SwitchPortConfiguration,
};
use patchbay_providers::{Device as _, VlanMode};
use patchbay_testbed::{FakeSwitches, OvsSim, SimSpec};
use serde_json::json;
use ssh_cases::{backend, port, vlan};
use support::env::Env;
use support::netns::Hosts;
use support::{eventually, eventually_seen};

const BRIDGE: &str = "br-snic";

fn state(status: Option<&patchbay::api::PortStatus>) -> Option<PortState> {
    status.and_then(|s| s.state)
}

fn snp_state(p: &SmartNicPort) -> Option<PortState> {
    state(p.status.as_ref())
}

/// Ping loss in percent, off the async runtime (the operator runs on it).
fn loss(hosts: &Hosts, from: usize, to: usize) -> u32 {
    tokio::task::block_in_place(|| hosts.loss(from, to, 4))
}

async fn patch<K>(env: &Env, name: &str, value: serde_json::Value)
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    env.api::<K>()
        .patch(name, &PatchParams::default(), &Patch::Merge(value))
        .await
        .unwrap();
}

fn vsctl_port(ovs: &OvsSim, port: &str) -> String {
    let get = |table: &str, col: &str| ovs.vsctl(&["get", table, port, col]).unwrap();
    format!(
        "tag={} trunks={} vlan_mode={} mtu_request={} external_ids={} admin={}",
        get("Port", "tag"),
        get("Port", "trunks"),
        get("Port", "vlan_mode"),
        get("Interface", "mtu_request"),
        get("Port", "external_ids"),
        get("Interface", "admin_state"),
    )
}

/// tor1 (a simulated Cisco) with one port, `tor1-p1` = FastEthernet0/1.
async fn tor1(env: &Env, sim: &patchbay_testbed::SimSwitch) {
    env.switch(
        "tor1",
        "ios",
        sim,
        &sim.host_key_fingerprint,
        &[("tor1-p1", "FastEthernet0/1")],
    )
    .await;
}

/// The SmartNIC's ProviderSwitch `snic`: OVSDB over TCP, and OpenFlow through the
/// bridge's management socket when `openflow`.
async fn smartnic(env: &Env, ovs: &OvsSim, openflow: bool) {
    let mut options = json!({"bridge": BRIDGE});
    if openflow {
        options["openflow"] = json!(ovs.openflow(BRIDGE));
    }
    env.create::<ProviderSwitch>(json!({
        "apiVersion": "patchbay.dev/v1alpha1", "kind": "ProviderSwitch",
        "metadata": {"name": "snic"},
        "spec": {"backend": "ovsdb", "os": "ovs", "address": "127.0.0.1",
                 "port": ovs.info.ovsdb_port, "options": options}
    }))
    .await;
}

async fn smartnic_configurations(env: &Env, configs: Vec<(&str, serde_json::Value)>) {
    for (name, spec) in configs {
        env.create::<SmartNicConfiguration>(json!({
            "apiVersion": "patchbay.dev/v1alpha1", "kind": "SmartNicConfiguration",
            "metadata": {"name": name}, "spec": spec
        }))
        .await;
    }
}

/// Waits until `name` of kind K no longer exists.
async fn gone<K>(env: &Env, name: &str)
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    eventually(30, &format!("{name} deleted"), || async {
        env.api::<K>()
            .get_opt(name)
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn smartnic_ports_carry_traffic_and_chain_to_their_switch_port() {
    let ovs = OvsSim::start(&[BRIDGE]).expect("Open vSwitch starts");
    let hosts = Hosts::create(&ovs, BRIDGE, 3);
    let [p1, p2, p3] = [0, 1, 2].map(|i| hosts.ports[i].clone());
    let clean = vsctl_port(&ovs, &p1);
    assert_eq!(
        clean,
        "tag=[] trunks=[] vlan_mode=[] mtu_request=[] external_ids={} admin=up"
    );
    let sims = FakeSwitches::start(&[SimSpec::new("tor1", "cisco_generic")]).unwrap();
    let sim = sims.get("tor1");
    let cisco = backend("ios", sim);
    let env = Env::start("ovs-traffic").await;

    // The top-of-rack switch the SmartNIC of host 1 is cabled to.
    tor1(&env, sim).await;
    env.configuration("tor-a", json!({"untaggedVLAN": 10}))
        .await;
    // The SmartNIC: OVSDB over TCP, OpenFlow through the bridge's management socket.
    smartnic(&env, &ovs, true).await;
    smartnic_configurations(
        &env,
        vec![
            (
                "nic-a",
                json!({"untaggedVLAN": 10, "description": "tenant a",
                       "nextConfigurationRef": {"name": "tor-a"}}),
            ),
            ("nic-b", json!({"untaggedVLAN": 20})),
            ("nic-a-off", json!({"untaggedVLAN": 10, "disabled": true})),
        ],
    )
    .await;
    let snp = |name: &str, port: &str, config: &str, next: Option<&str>| {
        let mut spec = json!({"provider": {"name": "snic"}, "portName": port,
                              "configuration": {"name": config}});
        if let Some(n) = next {
            spec["nextPortRef"] = json!({"kind": "SwitchPort", "name": n});
        }
        json!({"apiVersion": "patchbay.dev/v1alpha1", "kind": "SmartNicPort",
               "metadata": {"name": name}, "spec": spec})
    };
    env.create::<SmartNicPort>(snp("h1", &p1, "nic-a", Some("tor1-p1")))
        .await;
    env.create::<SmartNicPort>(snp("h2", &p2, "nic-a", None))
        .await;
    env.create::<SmartNicPort>(snp("h3", &p3, "nic-b", None))
        .await;

    // 1. Configure: h1 is Active only once its switch port is.
    let h1 = env
        .wait_obj::<SmartNicPort>("h1", "h1 Active", |p| {
            snp_state(p) == Some(PortState::Active)
        })
        .await;
    let tor = env.api::<SwitchPort>().get("tor1-p1").await.unwrap();
    let tor_status = tor.status.clone().unwrap();
    assert_eq!(tor_status.state, Some(PortState::Active));
    assert_eq!(tor_status.configuration_ref.unwrap().name, "tor-a");
    assert_eq!(
        tor.annotations()
            .get(CHAINED_FROM_ANNOTATION)
            .map(String::as_str),
        Some(format!("{}/h1", env.cluster.namespace).as_str())
    );
    assert_eq!(
        condition_of(&h1),
        Some((
            "True".into(),
            "Active".into(),
            "the device carries SmartNicConfiguration nic-a".into()
        ))
    );
    for h in ["h2", "h3"] {
        env.wait_obj::<SmartNicPort>(h, &format!("{h} Active"), |p| {
            snp_state(p) == Some(PortState::Active)
        })
        .await;
    }
    assert_eq!(
        vsctl_port(&ovs, &p1),
        "tag=10 trunks=[] vlan_mode=access mtu_request=[] external_ids={\"patchbay/description\"=\"tenant a\"} admin=up"
    );
    assert_eq!(
        vsctl_port(&ovs, &p3),
        "tag=20 trunks=[] vlan_mode=access mtu_request=[] external_ids={} admin=up"
    );
    let cisco_port = cisco.get_port(&port("FastEthernet0/1")).await.unwrap();
    assert_eq!(cisco_port.vlans, Some(VlanMode::Access { vlan: vlan(10) }));
    assert_eq!(loss(&hosts, 0, 1), 0, "same VLAN must reach");
    assert_eq!(loss(&hosts, 0, 2), 100, "another VLAN must not");

    // 2. Edit a configuration: h3 moves to VLAN 10 and reachability flips.
    patch::<SmartNicConfiguration>(&env, "nic-b", json!({"spec": {"untaggedVLAN": 10}})).await;
    eventually(30, "h3 retagged and Active", || async {
        let p = env.api::<SmartNicPort>().get("h3").await.ok()?;
        (snp_state(&p) == Some(PortState::Active)
            && ovs.vsctl(&["get", "Port", &p3, "tag"]).ok()? == "10")
            .then_some(())
    })
    .await;
    assert_eq!(loss(&hosts, 0, 2), 0, "retagged host must reach");

    // 3. Editing the next port's configuration takes h1 back through Configuring;
    //    it is Active again only when the Cisco carries the new VLAN.
    patch::<SwitchPortConfiguration>(&env, "tor-a", json!({"spec": {"untaggedVLAN": 11}})).await;
    eventually(30, "h1 Active on the new switch configuration", || async {
        let p = env.api::<SmartNicPort>().get("h1").await.ok()?;
        let hash_changed =
            p.status.as_ref()?.configuration_hash != h1.status.as_ref()?.configuration_hash;
        (snp_state(&p) == Some(PortState::Active) && hash_changed).then_some(())
    })
    .await;
    let cisco_port = cisco.get_port(&port("FastEthernet0/1")).await.unwrap();
    assert_eq!(cisco_port.vlans, Some(VlanMode::Access { vlan: vlan(11) }));

    // 4. Disable: the port goes silent (and its host loses carrier).
    patch::<SmartNicPort>(
        &env,
        "h2",
        json!({"spec": {"configuration": {"name": "nic-a-off"}}}),
    )
    .await;
    eventually(30, "h2 disabled and Active", || async {
        let p = env.api::<SmartNicPort>().get("h2").await.ok()?;
        (snp_state(&p) == Some(PortState::Active)
            && p.status.as_ref()?.configuration_ref.as_ref()?.name == "nic-a-off")
            .then_some(())
    })
    .await;
    assert_eq!(
        ovs.vsctl(&["get", "Interface", &p2, "admin_state"])
            .unwrap(),
        "down"
    );
    assert!(!hosts.has_carrier(1));
    assert_eq!(loss(&hosts, 0, 1), 100, "a disabled port must be silent");
    assert_eq!(loss(&hosts, 0, 2), 0, "other ports keep working");

    // 5. Drift behind the operator's back is put right.
    ovs.vsctl(&["set", "Port", &p3, "tag=30"]).unwrap();
    eventually(30, "the drifted tag restored", || async {
        (ovs.vsctl(&["get", "Port", &p3, "tag"]).ok()? == "10").then_some(())
    })
    .await;
    assert_eq!(loss(&hosts, 0, 2), 0);

    // 6. Clear: Cleaning -> Idle, the bridge port and the chained switch port clean.
    patch::<SmartNicPort>(&env, "h1", json!({"spec": {"configuration": null}})).await;
    patch::<SmartNicPort>(&env, "h2", json!({"spec": {"configuration": null}})).await;
    for h in ["h1", "h2"] {
        let p = env
            .wait_obj::<SmartNicPort>(h, &format!("{h} Idle"), |p| {
                snp_state(p) == Some(PortState::Idle)
            })
            .await;
        assert_eq!(p.status.unwrap().configuration_ref, None);
    }
    assert_eq!(vsctl_port(&ovs, &p1), clean);
    assert_eq!(vsctl_port(&ovs, &p2), clean);
    assert!(hosts.has_carrier(1));
    let tor = env.api::<SwitchPort>().get("tor1-p1").await.unwrap();
    assert_eq!(tor.spec.configuration, None);
    assert_eq!(state(tor.status.as_ref()), Some(PortState::Idle));
    assert!(!tor.annotations().contains_key(CHAINED_FROM_ANNOTATION));
    let cisco_port = cisco.get_port(&port("FastEthernet0/1")).await.unwrap();
    assert_eq!(cisco_port.vlans, Some(VlanMode::Unconfigured));
    // Clean ports on the bridge are in OVS's default VLAN together again.
    assert_eq!(loss(&hosts, 0, 1), 0);

    // 7. Deletion: the ProviderSwitch is held while SmartNicPorts use it, and an
    //    Active SmartNicPort is cleaned before it goes.
    let dp = kube::api::DeleteParams::default();
    env.api::<ProviderSwitch>()
        .delete("snic", &dp)
        .await
        .unwrap();
    env.api::<SmartNicPort>().delete("h3", &dp).await.unwrap();
    gone::<SmartNicPort>(&env, "h3").await;
    assert_eq!(vsctl_port(&ovs, &p3), clean);
    assert!(
        env.api::<ProviderSwitch>()
            .get_opt("snic")
            .await
            .unwrap()
            .is_some(),
        "the ProviderSwitch went while SmartNicPorts still use it"
    );
    for h in ["h1", "h2"] {
        env.api::<SmartNicPort>().delete(h, &dp).await.unwrap();
    }
    gone::<ProviderSwitch>(&env, "snic").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_change_nothing_on_either_device() {
    let ovs = OvsSim::start(&[BRIDGE]).expect("Open vSwitch starts");
    let hosts = Hosts::create(&ovs, BRIDGE, 2);
    let env = Env::start("ovs-refusals").await;
    // No OpenFlow target: this SmartNIC cannot disable ports.
    smartnic(&env, &ovs, false).await;
    env.configuration("tor-a", json!({"untaggedVLAN": 10}))
        .await;
    smartnic_configurations(
        &env,
        vec![
            ("off", json!({"untaggedVLAN": 10, "disabled": true})),
            (
                "chained",
                json!({"untaggedVLAN": 10, "nextConfigurationRef": {"name": "tor-a"}}),
            ),
        ],
    )
    .await;
    let before: Vec<String> = hosts.ports.iter().map(|p| vsctl_port(&ovs, p)).collect();
    env.create::<SmartNicPort>(json!({
        "apiVersion": "patchbay.dev/v1alpha1", "kind": "SmartNicPort",
        "metadata": {"name": "h1"},
        "spec": {"provider": {"name": "snic"}, "portName": hosts.ports[0],
                 "configuration": {"name": "off"}}
    }))
    .await;
    let h1 = env
        .wait_obj::<SmartNicPort>("h1", "h1 refused", |p| {
            condition_of(p).is_some_and(|c| c.1 == "InvalidConfiguration")
        })
        .await;
    let (_, _, message) = condition_of(&h1).unwrap();
    assert!(
        message.starts_with("spec.disabled: this SmartNIC cannot configure disabling the port"),
        "{message}"
    );

    // A SwitchPort somebody else configured is not taken over.
    let sims = FakeSwitches::start(&[SimSpec::new("tor1", "cisco_generic")]).unwrap();
    let sim = sims.get("tor1");
    tor1(&env, sim).await;
    env.configuration("other", json!({"untaggedVLAN": 99}))
        .await;
    env.link("tor1-p1", Some("other")).await;
    env.wait_state("tor1-p1", PortState::Active).await;
    env.create::<SmartNicPort>(json!({
        "apiVersion": "patchbay.dev/v1alpha1", "kind": "SmartNicPort",
        "metadata": {"name": "h2"},
        "spec": {"provider": {"name": "snic"}, "portName": hosts.ports[1],
                 "configuration": {"name": "chained"},
                 "nextPortRef": {"name": "tor1-p1"}}
    }))
    .await;
    let h2 = env
        .wait_obj::<SmartNicPort>("h2", "h2 refused", |p| {
            condition_of(p).is_some_and(|c| c.1 == "NextPortInUse")
        })
        .await;
    assert!(
        condition_of(&h2)
            .unwrap()
            .2
            .contains("SwitchPortConfiguration other")
    );
    let tor = env.api::<SwitchPort>().get("tor1-p1").await.unwrap();
    assert_eq!(tor.spec.configuration.unwrap().name, "other");
    let after: Vec<String> = hosts.ports.iter().map(|p| vsctl_port(&ovs, p)).collect();
    assert_eq!(before, after, "a refused configuration touched the bridge");
    let cisco = backend("ios", sim);
    let cisco_port = cisco.get_port(&port("FastEthernet0/1")).await.unwrap();
    assert_eq!(cisco_port.vlans, Some(VlanMode::Access { vlan: vlan(99) }));
}

/// Whether host `from` reaches host `to` on TCP `port`, off the async runtime.
fn tcp(hosts: &Hosts, from: usize, to: usize, port: u16) -> bool {
    tokio::task::block_in_place(|| hosts.tcp_connects(from, to, port))
}

/// Waits until SmartNicPort `name` is Active on a configuration other than `before`.
async fn active_again(env: &Env, name: &str, before: &SmartNicPort) -> SmartNicPort {
    let old = before
        .status
        .as_ref()
        .and_then(|s| s.configuration_hash.clone());
    env.wait_obj::<SmartNicPort>(name, &format!("{name} Active on the edit"), |p| {
        snp_state(p) == Some(PortState::Active)
            && p.status.as_ref().and_then(|s| s.configuration_hash.clone()) != old
    })
    .await
}

/// The age in seconds (`duration=`) of each patchbay flow (cookie 0x7062…) in an
/// `ovs-ofctl dump-flows` listing with statistics.
fn patchbay_flow_ages(dump: &str) -> Vec<f64> {
    dump.lines()
        .filter(|l| l.contains("cookie=0x7062"))
        .filter_map(|l| {
            let rest = l.split("duration=").nth(1)?;
            rest.split('s').next()?.parse().ok()
        })
        .collect()
}

fn ssh_rule(direction: &str) -> serde_json::Value {
    json!([{"type": "ipv4", "action": "deny", "protocol": "tcp",
            "dstPortRange": "22", "direction": direction}])
}

/// Seed 003 story 5 on a SmartNIC: an ACL denying TCP 22 on one host's port, first
/// as it leaves the host (ingress to the bridge), then towards it (egress), proven
/// with connections between namespaces; its neighbours are never affected, drift
/// is put right, and removing the rule restores everything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acls_filter_only_what_they_name_in_the_direction_they_name() {
    let ovs = OvsSim::start(&[BRIDGE]).expect("Open vSwitch starts");
    let hosts = Hosts::create(&ovs, BRIDGE, 3);
    let env = Env::start("ovs-acl").await;
    smartnic(&env, &ovs, true).await;
    smartnic_configurations(
        &env,
        vec![
            ("open", json!({"untaggedVLAN": 10})),
            (
                "guarded",
                json!({"untaggedVLAN": 10, "acl": ssh_rule("ingress")}),
            ),
            (
                "guarded-out",
                json!({"untaggedVLAN": 10, "acl": ssh_rule("egress")}),
            ),
        ],
    )
    .await;
    let snp = |name: &str, i: usize, config: &str, mac: Option<String>| {
        let mut spec = json!({"provider": {"name": "snic"}, "portName": hosts.ports[i],
                              "configuration": {"name": config}});
        if let Some(m) = mac {
            spec["hostMac"] = json!(m);
        }
        json!({"apiVersion": "patchbay.dev/v1alpha1", "kind": "SmartNicPort",
               "metadata": {"name": name}, "spec": spec})
    };
    env.create::<SmartNicPort>(snp("h0", 0, "guarded", Some(hosts.mac(0))))
        .await;
    env.create::<SmartNicPort>(snp("h1", 1, "open", None)).await;
    env.create::<SmartNicPort>(snp("h2", 2, "open", None)).await;
    let mut h0 = None;
    for h in ["h0", "h1", "h2"] {
        let p = env
            .wait_obj::<SmartNicPort>(h, &format!("{h} Active"), |p| {
                snp_state(p) == Some(PortState::Active)
            })
            .await;
        if h == "h0" {
            h0 = Some(p);
        }
    }
    let _listeners: Vec<_> = (0..3).map(|i| hosts.listen(i, &[22, 80])).collect();

    // Ingress (from host 0 into the bridge): its SSH out is blocked, nothing else.
    assert!(!tcp(&hosts, 0, 1, 22), "TCP 22 from host 0 must be denied");
    assert!(tcp(&hosts, 0, 1, 80), "TCP 80 from host 0 must pass");
    assert_eq!(loss(&hosts, 0, 1), 0, "ICMP from host 0 must pass");
    assert!(
        tcp(&hosts, 1, 0, 22),
        "an ingress rule must not filter towards host 0"
    );
    assert!(tcp(&hosts, 1, 2, 22), "neighbours must not be affected");

    // Egress (towards host 0): now SSH to it is blocked and its own SSH out passes.
    patch::<SmartNicPort>(
        &env,
        "h0",
        json!({"spec": {"configuration": {"name": "guarded-out"}}}),
    )
    .await;
    let h0 = active_again(&env, "h0", h0.as_ref().unwrap()).await;
    assert!(
        !tcp(&hosts, 1, 0, 22),
        "TCP 22 towards host 0 must be denied"
    );
    assert!(!tcp(&hosts, 2, 0, 22), "from every host");
    assert!(tcp(&hosts, 1, 0, 80), "TCP 80 towards host 0 must pass");
    assert!(
        tcp(&hosts, 0, 1, 22),
        "an egress rule must not filter from host 0"
    );
    assert_eq!(loss(&hosts, 1, 0), 0);
    assert!(tcp(&hosts, 1, 2, 22), "neighbours must not be affected");

    // Drift: patchbay's flows deleted behind its back are put back; then, right
    // after, turned into allow-everything (the deny flow's actions made NORMAL) —
    // put back again (a port repaired once is repaired every time). No traffic is
    // tried while they are wrong: the drift sweep (every second here) may already
    // have put them back. That they are new is read from their age instead (a sweep
    // that finds no drift writes nothing: they were 7 s old here before deletion).
    let patchbay_flows = "cookie=0x7062000000000000/0xffff000000000000";
    for (what, command, args) in [
        ("deleted", "del-flows", vec![patchbay_flows.to_owned()]),
        (
            "allowing everything",
            "mod-flows",
            vec![format!("{patchbay_flows},actions=NORMAL")],
        ),
    ] {
        let changed = std::time::Instant::now();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        ovs.ofctl(command, BRIDGE, &args).unwrap();
        eventually_seen(30, &format!("the ACL flows restored ({what})"), || async {
            let dump = ovs
                .ofctl("dump-flows", BRIDGE, &[])
                .map_err(|e| e.to_string())?;
            let ages = patchbay_flow_ages(&dump);
            let since = changed.elapsed().as_secs_f64();
            (!ages.is_empty() && ages.iter().all(|age| *age <= since))
                .then_some(())
                .ok_or(dump)
        })
        .await;
        assert!(
            !tcp(&hosts, 1, 0, 22),
            "the restored rule must deny again ({what})"
        );
    }

    // Removing the rule restores SSH, and leaves no patchbay flow.
    patch::<SmartNicPort>(
        &env,
        "h0",
        json!({"spec": {"configuration": {"name": "open"}}}),
    )
    .await;
    active_again(&env, "h0", &h0).await;
    assert!(tcp(&hosts, 1, 0, 22), "SSH to host 0 must be restored");
    assert!(tcp(&hosts, 0, 1, 22));
    let dump = ovs.ofctl("dump-flows", BRIDGE, &["--no-stats"]).unwrap();
    assert!(!dump.contains("cookie=0x7062"), "{dump}");

    // An egress rule where no host MAC is known is refused naming the field, and
    // touches nothing.
    let before = ovs.ofctl("dump-flows", BRIDGE, &["--no-stats"]).unwrap();
    patch::<SmartNicPort>(
        &env,
        "h1",
        json!({"spec": {"configuration": {"name": "guarded-out"}}}),
    )
    .await;
    let h1 = env
        .wait_obj::<SmartNicPort>("h1", "h1 refused", |p| {
            condition_of(p).is_some_and(|c| c.1 == "InvalidConfiguration")
        })
        .await;
    let message = condition_of(&h1).unwrap().2;
    assert!(
        message.starts_with("spec.acl[0].direction: egress rules on this device match the MAC"),
        "{message}"
    );
    assert_eq!(
        before,
        ovs.ofctl("dump-flows", BRIDGE, &["--no-stats"]).unwrap()
    );
    assert!(tcp(&hosts, 0, 1, 22));
}

fn condition_of(p: &SmartNicPort) -> Option<(String, String, String)> {
    p.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

/// Waits until SwitchPort `name` is Active carrying configuration `config`.
async fn carries(env: &Env, name: &str, config: &str) -> SwitchPort {
    env.wait_for(name, &format!("{name} Active on {config}"), |p| {
        let s = p.status.as_ref();
        s.and_then(|s| s.state) == Some(PortState::Active)
            && s.and_then(|s| s.configuration_ref.as_ref())
                .is_some_and(|r| r.name == config)
    })
    .await
}

/// Ping from `from` to `to` until it passes (`true`) or fails completely
/// (`false`), for at most `seconds` (LACP settles in a second or two).
fn settles(hosts: &Hosts, from: usize, to: usize, reach: bool, seconds: u64) -> bool {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(seconds);
    loop {
        let lost = loss(hosts, from, to);
        if (reach && lost == 0) || (!reach && lost == 100) {
            return true;
        }
        if std::time::Instant::now() > deadline {
            return false;
        }
    }
}

/// Waits up to `seconds` for `members` links of `bond` to be attached by LACP
/// (negotiation runs per link; one link can carry traffic before the other is in).
/// Returns the last `lacp/show` text when it does not happen.
fn attached(ovs: &OvsSim, bond: &str, members: usize, seconds: u64) -> Result<(), String> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(seconds);
    loop {
        let lacp = ovs.appctl(&["lacp/show", bond]).unwrap_or_default();
        if lacp.matches("current attached").count() == members {
            return Ok(());
        }
        if std::time::Instant::now() > deadline {
            return Err(lacp);
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

/// An `ovsdb` Switch whose two ports are cabled to a host's bond (a second bridge,
/// `br-host`, with its own LACP-active bond: the host side, as no Linux bonding
/// driver is assumed). The host reaches its neighbour only once patchbay forms the
/// group: a LACP bond without a partner forwards nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bond_forms_carries_traffic_over_either_link_and_dissolves() {
    let ovs = OvsSim::start(&["br-tor", "br-host"]).expect("Open vSwitch starts");
    // Host 0 behind the host-side bond, host 1 on the switch.
    let hosts = Hosts::create_on(&ovs, &["br-host", "br-tor"]);
    for (t, n) in [("lagt1", "lagn1"), ("lagt2", "lagn2")] {
        Hosts::cable(&ovs, t, n);
    }
    ovs.vsctl(&[
        "add-port", "br-tor", "lagt1", "--", "add-port", "br-tor", "lagt2",
    ])
    .unwrap();
    ovs.vsctl(&[
        "add-bond",
        "br-host",
        "hbond",
        "lagn1",
        "lagn2",
        "lacp=active",
        "bond_mode=balance-slb",
        "other_config:lacp-time=fast",
    ])
    .unwrap();
    let env = Env::start("ovs-lag").await;
    env.device(
        "tor",
        &[],
        json!({"backend": "ovsdb", "os": "ovs", "address": "127.0.0.1",
               "port": ovs.info.ovsdb_port,
               "options": {"bridge": "br-tor", "openflow": ovs.openflow("br-tor")}}),
        &[
            ("tor-t1", "lagt1"),
            ("tor-t2", "lagt2"),
            ("tor-h1", &hosts.ports[1]),
        ],
    )
    .await;
    env.configuration("single", json!({"untaggedVLAN": 10}))
        .await;
    env.configuration(
        "bundled",
        json!({"untaggedVLAN": 10, "linkAggregation": {"group": 1}}),
    )
    .await;
    env.configuration(
        "bundled-other",
        json!({"untaggedVLAN": 20, "linkAggregation": {"group": 1}}),
    )
    .await;
    for p in ["tor-t1", "tor-t2", "tor-h1"] {
        env.link(p, Some("single")).await;
    }
    for p in ["tor-t1", "tor-t2", "tor-h1"] {
        carries(&env, p, "single").await;
    }
    // Single links (what a host is provisioned on): the host's LACP bond has no
    // partner and forwards nothing.
    assert!(settles(&hosts, 0, 1, false, 10), "no partner, no traffic");
    let lacp = ovs.appctl(&["lacp/show", "hbond"]).unwrap();
    assert!(
        !lacp.contains("may_enable: true"),
        "no member enabled: {lacp}"
    );

    // The group forms: one bond Port on the switch, LACP negotiates, traffic flows.
    env.link("tor-t1", Some("bundled")).await;
    env.link("tor-t2", Some("bundled")).await;
    carries(&env, "tor-t1", "bundled").await;
    carries(&env, "tor-t2", "bundled").await;
    let ports = ovs.vsctl(&["list-ports", "br-tor"]).unwrap();
    assert!(
        ports.contains("bond1") && !ports.contains("lagt1") && !ports.contains("lagt2"),
        "{ports}"
    );
    assert_eq!(ovs.vsctl(&["get", "Port", "bond1", "tag"]).unwrap(), "10");
    assert!(
        settles(&hosts, 0, 1, true, 15),
        "the bundle carries traffic"
    );
    if let Err(lacp) = attached(&ovs, "bond1", 2, 15) {
        panic!("both links in the bundle: {lacp}");
    }

    // Either link alone carries it.
    for link in ["lagt1", "lagt2"] {
        Hosts::set_link(&ovs, link, false);
        assert!(
            settles(&hosts, 0, 1, true, 15),
            "{link} down, the other carries"
        );
        Hosts::set_link(&ovs, link, true);
        if let Err(lacp) = attached(&ovs, "bond1", 2, 15) {
            panic!("{link} back in the bundle: {lacp}");
        }
    }

    // A member carrying other VLANs than its group is refused, naming the field and
    // the other member; the device is untouched.
    let before = ovs.vsctl(&["list", "Port", "bond1"]).unwrap();
    env.link("tor-t2", Some("bundled-other")).await;
    let refused = env
        .wait_for("tor-t2", "tor-t2 refused", |p| {
            p.status.as_ref().is_some_and(|s| {
                s.conditions.iter().any(|c| {
                    c.type_ == "Ready"
                        && c.message.contains(
                            "spec.linkAggregation.group: SwitchPort \"tor-t1\" in group 1 \
                             carries a different configuration (untaggedVLAN)",
                        )
                })
            })
        })
        .await;
    assert_eq!(
        refused.status.unwrap().configuration_ref.map(|r| r.name),
        Some("bundled".into()),
        "the port still carries its last good configuration"
    );
    assert_eq!(ovs.vsctl(&["list", "Port", "bond1"]).unwrap(), before);

    // Dissolved: both back on single links, the bond is gone, and the host's bond
    // has no partner again.
    env.link("tor-t1", Some("single")).await;
    env.link("tor-t2", Some("single")).await;
    carries(&env, "tor-t1", "single").await;
    carries(&env, "tor-t2", "single").await;
    let ports = ovs.vsctl(&["list-ports", "br-tor"]).unwrap();
    assert!(
        !ports.contains("bond1") && ports.contains("lagt1") && ports.contains("lagt2"),
        "{ports}"
    );
    assert_eq!(ovs.vsctl(&["get", "Port", "lagt1", "tag"]).unwrap(), "10");
    assert!(settles(&hosts, 0, 1, false, 15), "no partner again");
}

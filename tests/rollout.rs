//! A rollout on real peers: one SwitchPortConfiguration carried by eight ports on
//! four switches — two simulated Ciscos (fake-switches, over SSH), an Open vSwitch
//! bridge (OVSDB) and netconfd (NETCONF) — edited, and the edit followed on the
//! devices themselves: each device is read on sessions of the test's own while the
//! rollout runs, and the waves are what the devices showed, sample by sample (the
//! ports seen joining within three seconds of each other are one wave; waves are
//! six seconds apart).
//! A wave held on netconfd is taken back by the server when the operator dies; the
//! NeighborSeen (hosts that are Servers or BareMetalHosts) and HttpProbe gates watch
//! hosts in network namespaces on Open vSwitch. A SmartNicConfiguration rolls out over SmartNicPorts on Open vSwitch,
//! gated on its hosts' probes, and its chain to a simulated Cisco moves with its
//! wave and goes back with it. A Switch's port-entry edits roll out in waves on a
//! simulated Cisco (re-cabled ports moved one at a time; a refused entry rolled
//! back), and an entry renamed onto the wrong bridge port is rolled back on its
//! host's probe.
//! (The rollout's other behaviour — rollback, pause, a kill mid-rollout, abort — is
//! proven on fixture switches in `operator_e2e.rs`, and its BGP gate on FRR and
//! GoBGP in `bgp.rs`.)

#[path = "../providers/tests/support/ssh_cases.rs"]
mod ssh_cases;
mod support;

/// How the test logs in to netconfd itself.
#[path = "../providers/tests/support/netconfd.rs"]
mod netconfd;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use patchbay::api::{PortState, Revisioned, RolloutStatus, SwitchPortConfiguration};
use patchbay_providers::netconf::{NetconfOptions, NetconfSwitch, model};
use patchbay_providers::values::PortName;
use patchbay_providers::{Device, VlanMode};
use patchbay_testbed::{FakeSwitches, NetconfTarget, Netconfd, OvsSim, SimSpec};
use serde_json::json;
use support::env::Env;

/// Edits configuration `shared` to access VLAN `vlan`.
async fn edit_shared(env: &Env, vlan: u16) {
    env.api::<SwitchPortConfiguration>()
        .patch(
            "shared",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"untaggedVLAN": vlan}})),
        )
        .await
        .unwrap();
}

/// The test's own NETCONF session to `nc`.
fn own_session(nc: &Netconfd) -> NetconfSwitch {
    NetconfSwitch::new(
        netconfd::login(nc),
        model::for_os("yang", None).unwrap(),
        NetconfOptions::default(),
    )
}

/// A configuration of either kind, as the tests read and edit it.
trait Config:
    Revisioned
    + kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
    + Clone
    + serde::de::DeserializeOwned
    + serde::Serialize
    + std::fmt::Debug
{
}

impl<C> Config for C where
    C: Revisioned
        + kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug
{
}

/// Configuration `name`'s rollout of its first edit (attempt 1), once it reaches
/// `phase`.
async fn rollout_in<C: Config>(env: &Env, name: &str, phase: &str) -> RolloutStatus {
    let shared = env
        .wait_obj_within::<C>(90, name, phase, |c| {
            c.rollout_status()
                .is_some_and(|r| r.phase == phase && r.attempt == 1)
        })
        .await;
    shared.rollout_status().cloned().unwrap()
}

/// The access VLAN of each port of `device` (`None`: anything else).
async fn access(device: &dyn Device, ports: &[&str]) -> Vec<Option<u16>> {
    let names: Vec<PortName> = ports.iter().map(|p| PortName::parse(p).unwrap()).collect();
    let reads = device.get_ports(&names).await.expect("the device answers");
    names
        .iter()
        .map(|n| {
            let read = reads
                .iter()
                .find(|(p, _)| p == n)
                .and_then(|(_, r)| r.as_ref().ok());
            match read.and_then(|o| o.vlans.clone()) {
                Some(VlanMode::Access { vlan }) => Some(vlan.get()),
                _ => None,
            }
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edit_reaches_four_real_switches_in_waves() {
    let sims = FakeSwitches::start(&[
        SimSpec::new("tor1", "cisco_generic"),
        SimSpec::new("tor2", "cisco_generic"),
    ])
    .unwrap();
    let ovs = OvsSim::start(&["br-r"]).expect("Open vSwitch starts");
    ovs.add_internal_ports("br-r", &["r1", "r2"]).unwrap();
    let nc = Netconfd::start(NetconfTarget::Candidate).unwrap();
    let env = Env::start("rollout-peers").await;
    for name in ["tor1", "tor2"] {
        let sim = sims.get(name);
        env.switch(
            name,
            "ios",
            sim,
            &sim.host_key_fingerprint,
            &[
                (&format!("{name}-p1"), "FastEthernet0/1"),
                (&format!("{name}-p2"), "FastEthernet0/2"),
            ],
        )
        .await;
    }
    env.device(
        "ovs",
        &[],
        json!({"backend": "ovsdb", "os": "ovs", "address": "127.0.0.1",
               "port": ovs.info.ovsdb_port, "options": {"bridge": "br-r"}}),
        &[("ovs-p1", "r1"), ("ovs-p2", "r2")],
    )
    .await;
    env.netconfd_switch("leaf", &nc, &[("leaf-p1", "eth1"), ("leaf-p2", "eth2")])
        .await;
    // Waves at least six seconds apart (the minimum wait, from the wave's last port
    // going Active): longer than a sample, and than the spread of one wave's ports
    // over devices of different speeds.
    env.configuration(
        "shared",
        json!({"untaggedVLAN": 10, "rollout": {"canary": {"ports": 1}, "maxUnavailable": 2,
               "maxUnavailablePerSwitch": 1, "minWaitSeconds": 6}}),
    )
    .await;
    let ports = [
        "leaf-p1", "leaf-p2", "ovs-p1", "ovs-p2", "tor1-p1", "tor1-p2", "tor2-p1", "tor2-p2",
    ];
    for p in ports {
        env.link(p, Some("shared")).await;
    }
    for p in ports {
        env.wait_state_within(p, PortState::Active, 60).await;
    }

    // The test's own sessions to each device.
    let tor1 = ssh_cases::backend("ios", sims.get("tor1"));
    let tor2 = ssh_cases::backend("ios", sims.get("tor2"));
    let leaf = own_session(&nc);
    let read_ovs = |port: &str| {
        ovs.vsctl(&["get", "Port", port, "tag"])
            .ok()
            .and_then(|t| t.trim().parse::<u16>().ok())
    };
    let cisco = ["FastEthernet0/1", "FastEthernet0/2"];
    let sample = || async {
        let mut on: BTreeMap<&str, Option<u16>> = BTreeMap::new();
        let l = access(&leaf, &["eth1", "eth2"]).await;
        on.insert("leaf-p1", l[0]);
        on.insert("leaf-p2", l[1]);
        on.insert("ovs-p1", read_ovs("r1"));
        on.insert("ovs-p2", read_ovs("r2"));
        let t1 = access(&tor1, &cisco).await;
        on.insert("tor1-p1", t1[0]);
        on.insert("tor1-p2", t1[1]);
        let t2 = access(&tor2, &cisco).await;
        on.insert("tor2-p1", t2[0]);
        on.insert("tor2-p2", t2[1]);
        on
    };
    let before = sample().await;
    assert!(before.values().all(|v| *v == Some(10)), "{before:?}");

    edit_shared(&env, 20).await;
    let started = Instant::now();
    let mut seen: BTreeSet<&str> = BTreeSet::new();
    let mut steps: Vec<(Duration, Vec<&str>)> = Vec::new();
    let mut longest = Duration::ZERO;
    while seen.len() < ports.len() {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "every port on VLAN 20 within 120 s: {steps:?}"
        );
        let at = Instant::now();
        let now: BTreeSet<&str> = sample()
            .await
            .into_iter()
            .filter(|(_, v)| *v == Some(20))
            .map(|(k, _)| k)
            .collect();
        longest = longest.max(at.elapsed());
        assert!(seen.is_subset(&now), "a port went back: {seen:?} → {now:?}");
        let joined: Vec<&str> = now.difference(&seen).copied().collect();
        if !joined.is_empty() {
            steps.push((started.elapsed(), joined));
        }
        seen = now;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    eprintln!("ports seen joining VLAN 20 (a sample took at most {longest:?}): {steps:#?}");
    // Each sample is shorter than the minimum wait, so no sample saw two waves join.
    assert!(
        longest < Duration::from_secs(3),
        "a sample took {longest:?}"
    );
    // A wave's ports reach their devices within a second or two of each other (the
    // devices differ in speed); waves are six seconds apart. Joins less than three
    // seconds after the one before are the same wave.
    let mut waves: Vec<Vec<&str>> = Vec::new();
    let mut last: Option<Duration> = None;
    for (at, joined) in &steps {
        match (waves.last_mut(), last) {
            (Some(wave), Some(before)) if *at - before < Duration::from_secs(3) => {
                wave.extend(joined.iter().copied())
            }
            _ => waves.push(joined.clone()),
        }
        last = Some(*at);
    }
    for wave in &mut waves {
        wave.sort();
    }
    assert_eq!(waves[0], ["leaf-p1"], "the canary first, alone: {steps:?}");
    for wave in &waves {
        assert!(wave.len() <= 2, "at most two at once: {steps:?}");
        let switches: BTreeSet<&str> = wave.iter().map(|p| p.split('-').next().unwrap()).collect();
        assert_eq!(switches.len(), wave.len(), "one per switch: {steps:?}");
    }
    // The canary, then waves of two across the switches in turn, then the last.
    assert_eq!(
        waves,
        [
            vec!["leaf-p1"],
            vec!["leaf-p2", "ovs-p1"],
            vec!["ovs-p2", "tor1-p1"],
            vec!["tor1-p2", "tor2-p1"],
            vec!["tor2-p2"],
        ],
        "{steps:?}"
    );
    let r = rollout_in::<SwitchPortConfiguration>(&env, "shared", "Complete").await;
    assert_eq!(
        (r.phase.as_str(), r.updated_ports, r.switches.as_str()),
        ("Complete", 8, "4/4")
    );
}

/// Lines of netconfd's log where the server changed its own configuration (session
/// 0, not a client's): how it takes back a held change — cancelled, or timed out.
fn server_edits(nc: &Netconfd) -> usize {
    std::fs::read_to_string(nc.dir.join("netconfd.log"))
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("edit-transaction") && l.contains("on session 0 "))
        .count()
}

/// A wave on netconfd is a persisted confirmed commit held across its gate: the
/// operator killed mid-gate, the server itself takes the wave back at the hold's
/// timeout (twice the progress deadline), with nobody connected; the restarted
/// operator finds the wave failed, rolls it back, and the port not reached was
/// never touched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wave_held_on_netconfd_is_taken_back_by_the_server_when_the_operator_dies() {
    let nc = Netconfd::start(NetconfTarget::Candidate).unwrap();
    let mut env = Env::start("rollout-held").await;
    env.netconfd_switch("leaf", &nc, &[("leaf-p1", "eth1"), ("leaf-p2", "eth2")])
        .await;
    // The canary's gate waits 8 s; the hold times out 20 s after its commit.
    env.configuration(
        "shared",
        json!({"untaggedVLAN": 10, "rollout": {"canary": {"ports": 1},
               "minWaitSeconds": 8, "progressDeadlineSeconds": 10}}),
    )
    .await;
    for p in ["leaf-p1", "leaf-p2"] {
        env.link(p, Some("shared")).await;
    }
    for p in ["leaf-p1", "leaf-p2"] {
        env.wait_state_within(p, PortState::Active, 60).await;
    }
    let leaf = own_session(&nc);
    assert_eq!(access(&leaf, &["eth1", "eth2"]).await, [Some(10), Some(10)]);
    let before = server_edits(&nc);

    edit_shared(&env, 20).await;
    support::eventually(30, "the canary on the device", || async {
        (access(&leaf, &["eth1"]).await == [Some(20)]).then_some(())
    })
    .await;
    env.kill_operator();
    let killed = Instant::now();
    assert_eq!(access(&leaf, &["eth2"]).await, [Some(10)]);
    assert_eq!(server_edits(&nc), before, "nothing taken back yet");

    // Nobody confirms it: the server takes it back by itself. (Read every 1.5 s:
    // netconfd runs its timers when idle a while, and a session every 50 ms would
    // keep the hold past its timeout.)
    let mut back = false;
    while killed.elapsed() < Duration::from_secs(45) {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        if access(&leaf, &["eth1"]).await == [Some(10)] {
            back = true;
            break;
        }
    }
    assert!(
        back,
        "the server kept the held wave 45 s after the operator died"
    );
    let back_after = killed.elapsed();
    assert!(
        server_edits(&nc) > before,
        "the server's own transaction is not in its log"
    );
    eprintln!("the server took the wave back {back_after:?} after the operator died");

    env.restart_operator();
    let r = rollout_in::<SwitchPortConfiguration>(&env, "shared", "RolledBack").await;
    assert!(
        r.message.contains("ProgressDeadline") || r.message.contains("DeviceHeld"),
        "{}",
        r.message
    );
    env.wait_state_within("leaf-p1", PortState::Active, 60)
        .await;
    assert_eq!(access(&leaf, &["eth1", "eth2"]).await, [Some(10), Some(10)]);
}

/// Configuration `name`'s rollout once RolledBack (within `secs`), `meanwhile`
/// checked at every look.
async fn rolled_back<C: Config>(
    env: &Env,
    name: &str,
    secs: u64,
    meanwhile: impl Fn(),
) -> RolloutStatus {
    let started = Instant::now();
    loop {
        meanwhile();
        let c = env.api::<C>().get(name).await.unwrap();
        let r = c.rollout_status().cloned().unwrap();
        if r.phase == "RolledBack" {
            return r;
        }
        assert!(
            started.elapsed() < Duration::from_secs(secs),
            "not rolled back within {secs} s: {r:?}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// Merges `spec` into configuration `name`'s spec.
async fn edit<C: Config>(env: &Env, name: &str, spec: serde_json::Value) {
    env.api::<C>()
        .patch(
            name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({ "spec": spec })),
        )
        .await
        .unwrap();
}

/// The NeighborSeen gate on Open vSwitch: two hosts in network namespaces talk to
/// each other through the bridge, which learns their MACs (aged out after 15 s);
/// the Switch reads them. An edit that keeps the hosts on the wire passes each
/// wave's gate once a read an age-out after the port's change still sees its host;
/// one that drops the canary's host's frames (a trunk without its untagged VLAN)
/// fails it: the canary goes back, the other port is never touched, and the host
/// is seen again. The hosts are Servers declaring their NIC's MAC.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_no_longer_seen_on_its_port_rolls_the_wave_back() {
    host_no_longer_seen_rolls_back(Host::Server).await;
}

/// The same with BareMetalHosts driving their own ports (seed 003's `spec.ports`):
/// a host is known by every MAC it declares or its inspection reports.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bare_metal_host_no_longer_seen_on_its_port_rolls_the_wave_back() {
    if !support::on_devplane() {
        return; // needs a BareMetalHost CRD with seed 003's spec.ports
    }
    host_no_longer_seen_rolls_back(Host::BareMetalHost).await;
}

/// The kind of host a test drives its ports with.
#[derive(Clone, Copy)]
enum Host {
    Server,
    BareMetalHost,
}

/// See [`a_host_no_longer_seen_on_its_port_rolls_the_wave_back`].
async fn host_no_longer_seen_rolls_back(kind: Host) {
    use kube::ResourceExt;
    use patchbay::api::{Switch, SwitchPort};
    let ovs = OvsSim::start(&["br0"]).expect("Open vSwitch starts");
    ovs.vsctl(&["set", "Bridge", "br0", "other_config:mac-aging-time=15"])
        .unwrap();
    let hosts = support::netns::Hosts::create(&ovs, "br0", 2);
    let (mac0, mac1) = (hosts.mac(0), hosts.mac(1));
    let _talk = (hosts.chatter(0, 1), hosts.chatter(1, 0));
    let cluster = support::Cluster::start("rollout-neighbors").await;
    if let Host::BareMetalHost = kind {
        cluster
            .install_crd(support::bare_metal_host_crd(true))
            .await;
    }
    let env = Env::start_on(cluster, |_| {}).await;
    env.ovs_provider(&ovs, "tor").await;
    env.switch_reading(
        "tor",
        &[("tor-a", &hosts.ports[0]), ("tor-b", &hosts.ports[1])],
        json!({"providers": [{"name": "tor"}], "intervalSeconds": 5, "ageOutSeconds": 15}),
    )
    .await;
    env.configuration(
        "prov",
        json!({"untaggedVLAN": 10, "rollout": {"canary": {"ports": 1}, "maxUnavailable": 1,
               "progressDeadlineSeconds": 120}}),
    )
    .await;
    let ns = env.cluster.namespace.clone();
    let (x, y) = (format!("{ns}-x"), format!("{ns}-y"));
    // How the rollout names host x.
    let x_named = match kind {
        Host::Server => {
            env.server((&x, &ns), (&mac0, "tor-a"), "prov", json!({}))
                .await;
            env.server((&y, &ns), (&mac1, "tor-b"), "prov", json!({}))
                .await;
            format!("Server/{x}")
        }
        Host::BareMetalHost => {
            for (name, mac, port) in [(&x, &mac0, "tor-a"), (&y, &mac1, "tor-b")] {
                // Known by its boot MAC alone: the NIC on the port is not told apart.
                env.create::<patchbay::api::metal3::BareMetalHost>(json!({
                    "apiVersion": "metal3.io/v1alpha1", "kind": "BareMetalHost",
                    "metadata": {"name": name},
                    "spec": {"bootMACAddress": mac,
                             "ports": [{"name": "eth0",
                                        "port": {"name": port, "kind": "SwitchPort",
                                                 "namespace": ns},
                                        "provisioningConfiguration": {"name": "prov"}}]}
                }))
                .await;
            }
            format!("BareMetalHost/{ns}/{x}")
        }
    };
    let tag = |i: usize| ovs.vsctl(&["get", "Port", &hosts.ports[i], "tag"]).unwrap();
    for p in ["tor-a", "tor-b"] {
        env.wait_carrying(p, "prov").await;
    }
    assert_eq!((tag(0), tag(1)), ("10".into(), "10".into()));
    let sees = |sw: &Switch, i: usize, mac: &str| {
        sw.status.as_ref().is_some_and(|s| {
            s.neighbors
                .iter()
                .any(|n| n.port == hosts.ports[i] && n.macs.iter().any(|m| m == mac))
        })
    };
    env.wait_obj::<Switch>("tor", "both hosts' MACs read", |sw| {
        sees(sw, 0, &mac0) && sees(sw, 1, &mac1)
    })
    .await;

    // VLAN 11: the hosts' untagged frames are learned there; each wave waits for a
    // read an age-out after its change, which still sees its host.
    edit::<SwitchPortConfiguration>(&env, "prov", json!({"untaggedVLAN": 11})).await;
    let waited = env
        .wait_obj::<patchbay::api::SwitchPortConfiguration>(
            "prov",
            "the canary waiting on a read",
            |c| {
                c.status
                    .as_ref()
                    .and_then(|s| s.rollout.as_ref())
                    .is_some_and(|r| r.message.contains("not yet read an age-out time"))
            },
        )
        .await;
    eprintln!(
        "{:?}",
        waited.status.and_then(|s| s.rollout).map(|r| r.message)
    );
    let canary = env.api::<SwitchPort>().get("tor-a").await.unwrap();
    assert_eq!(
        canary
            .annotations()
            .get("patchbay.dev/rollout-seen")
            .map(String::as_str),
        Some("mac"),
        "the pin records how the host was seen before its port moved"
    );
    let r = rollout_in::<SwitchPortConfiguration>(&env, "prov", "Complete").await;
    assert_eq!(r.updated_ports, 2, "{r:?}");
    assert_eq!((tag(0), tag(1)), ("11".into(), "11".into()));

    // A trunk of VLAN 20 alone drops host x's untagged frames: not seen any more.
    edit::<SwitchPortConfiguration>(
        &env,
        "prov",
        json!({"untaggedVLAN": null, "vlans": [{"id": 20}]}),
    )
    .await;
    let r = rolled_back::<SwitchPortConfiguration>(&env, "prov", 90, || {
        assert_eq!(
            tag(1),
            "11",
            "the port the rollout did not reach is untouched"
        )
    })
    .await;
    assert!(
        r.message.contains("gate NeighborSeen failed"),
        "{}",
        r.message
    );
    assert!(r.message.contains(&format!("{ns}/tor-a")), "{}", r.message);
    assert!(r.message.contains(&x_named), "{}", r.message);
    assert!(!r.message.contains("tor-b"), "{}", r.message);
    let warned = env.warnings("prov").await;
    assert!(
        warned
            .iter()
            .any(|e| e.reason.as_deref() == Some("RolledBack")),
        "{warned:?}"
    );
    // The canary back on VLAN 11, and its host seen there again.
    support::eventually(30, "the canary back on VLAN 11", || async {
        (tag(0) == "11"
            && ovs
                .vsctl(&["get", "Port", &hosts.ports[0], "trunks"])
                .unwrap()
                == "[]")
            .then_some(())
    })
    .await;
    env.wait_obj::<Switch>("tor", "host x seen again", |sw| sees(sw, 0, &mac0))
        .await;
    assert_eq!(tag(1), "11");
    env.cluster.finish().await;
}

/// Whether `ip:8080/healthz` answers 200 to the test itself, from the root namespace.
fn answers(ip: &str) -> bool {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect_timeout(
        &format!("{ip}:8080").parse().unwrap(),
        Duration::from_secs(1),
    ) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(1)));
    let request = format!("GET /healthz HTTP/1.1\r\nHost: {ip}\r\nConnection: close\r\n\r\n");
    let mut got = String::new();
    s.write_all(request.as_bytes()).is_ok()
        && s.read_to_string(&mut got).is_ok()
        && got.starts_with("HTTP/1.0 200")
}

/// Once both hosts answer through the bridge, edits configuration `prov`'s
/// description: the hosts stay reachable, and each wave passes once its host
/// answered the operator's probe (each host's own request log shows it). Returns the
/// completed rollout.
async fn probed_description_edit<C: Config>(
    env: &Env,
    hosts: &support::netns::Hosts,
    web: &[support::netns::HttpServer; 2],
) -> RolloutStatus {
    support::eventually(20, "both hosts answer through the bridge", || async {
        (answers(&hosts.ip(0)) && answers(&hosts.ip(1))).then_some(())
    })
    .await;
    let asked = |i: usize| web[i].requests().len();
    let before = (asked(0), asked(1));
    edit::<C>(env, "prov", json!({"description": "probed"})).await;
    let r = rollout_in::<C>(env, "prov", "Complete").await;
    assert!(
        asked(0) > before.0 && asked(1) > before.1,
        "each host probed by the operator: {:?} {:?}",
        web[0].requests(),
        web[1].requests()
    );
    r
}

/// A rollout policy of one port at a time gated on each host's `/healthz` (1 s
/// apart, three failures fail the wave).
fn probed_policy() -> serde_json::Value {
    json!({"canary": {"ports": 1}, "maxUnavailable": 1, "progressDeadlineSeconds": 120,
           "probe": {"httpGet": {"port": 8080, "path": "/healthz"},
                     "initialDelaySeconds": 1, "periodSeconds": 1,
                     "timeoutSeconds": 1, "failureThreshold": 3}})
}

/// Servers `<ns>-x` and `<ns>-y`, the hosts 0 and 1 of `hosts` (their address, the
/// MAC of their NIC) cabled to SwitchPorts `tor-a` and `tor-b`, provisioned with
/// `prov`. Returns x's name.
async fn probed_servers(env: &Env, hosts: &support::netns::Hosts) -> String {
    let ns = env.cluster.namespace.clone();
    for (i, name, port) in [(0, "x", "tor-a"), (1, "y", "tor-b")] {
        env.server(
            (&format!("{ns}-{name}"), &ns),
            (&hosts.mac(i), port),
            "prov",
            json!({"hostAddress": hosts.ip(i)}),
        )
        .await;
    }
    format!("{ns}-x")
}

/// Moves configuration `prov` (of kind `C`) to VLAN 20, which cuts the canary's host
/// (host 0, on port `canary`, Server `server`) off from the operator: the wave rolls
/// back on the HttpProbe gate, the other port (`other`, host 1's, whose VLAN `tag`
/// reads) never leaving VLAN 10, and the canary is back on VLAN 10 with its host
/// answering.
async fn probe_cuts_the_canary_off<C: Config>(
    env: &Env,
    hosts: &support::netns::Hosts,
    tag: &dyn Fn(usize) -> String,
    (canary, other): (&str, &str),
    server: &str,
) {
    let ns = &env.cluster.namespace;
    edit::<C>(env, "prov", json!({"untaggedVLAN": 20})).await;
    let started = Instant::now();
    let r = rolled_back::<C>(env, "prov", 60, || {
        assert_eq!(
            tag(1),
            "10",
            "the port the rollout did not reach is untouched"
        )
    })
    .await;
    eprintln!(
        "rolled back {:?} after the edit: {}",
        started.elapsed(),
        r.message
    );
    assert!(r.message.contains("gate HttpProbe failed"), "{}", r.message);
    assert!(
        r.message.contains(&format!("{ns}/{canary}")),
        "{}",
        r.message
    );
    assert!(
        r.message.contains(&format!("Server/{server}")),
        "{}",
        r.message
    );
    assert!(!r.message.contains(other), "{}", r.message);
    support::eventually(
        30,
        "the canary back on VLAN 10 and its host answering",
        || async { (tag(0) == "10" && answers(&hosts.ip(0))).then_some(()) },
    )
    .await;
}

/// The HttpProbe gate on real traffic: two hosts in network namespaces behind Open
/// vSwitch serve `/healthz`, and the operator (in the root namespace) reaches them
/// through the bridge on VLAN 10 only. An edit that leaves them reachable passes
/// each wave once its host answered; one that moves the canary's host to VLAN 20
/// cuts it off: three failed probes in a row roll the wave back, the other port is
/// never touched, and the host answers again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_that_stops_answering_its_probe_rolls_the_wave_back() {
    let ovs = OvsSim::start(&["br0"]).expect("Open vSwitch starts");
    let hosts = support::netns::Hosts::create(&ovs, "br0", 2);
    let _management = hosts.reach_from_root(&ovs, "br0", 10);
    let web = [hosts.serve_http(0, 8080), hosts.serve_http(1, 8080)];
    let env = Env::start("rollout-probe").await;
    env.device(
        "tor",
        &[],
        json!({"backend": "ovsdb", "os": "ovs", "address": "127.0.0.1",
               "port": ovs.info.ovsdb_port, "options": {"bridge": "br0"}}),
        &[("tor-a", &hosts.ports[0]), ("tor-b", &hosts.ports[1])],
    )
    .await;
    env.configuration(
        "prov",
        json!({"untaggedVLAN": 10, "rollout": probed_policy()}),
    )
    .await;
    let x = probed_servers(&env, &hosts).await;
    let tag = |i: usize| ovs.vsctl(&["get", "Port", &hosts.ports[i], "tag"]).unwrap();
    for p in ["tor-a", "tor-b"] {
        env.wait_carrying(p, "prov").await;
    }
    assert_eq!((tag(0), tag(1)), ("10".into(), "10".into()));
    let r = probed_description_edit::<SwitchPortConfiguration>(&env, &hosts, &web).await;
    assert_eq!(r.updated_ports, 2, "{r:?}");

    probe_cuts_the_canary_off::<SwitchPortConfiguration>(
        &env,
        &hosts,
        &tag,
        ("tor-a", "tor-b"),
        &x,
    )
    .await;
    assert_eq!(tag(1), "10");
    env.cluster.finish().await;
}

/// A SmartNicConfiguration rolls out in waves like a SwitchPortConfiguration: two
/// hosts in network namespaces behind a SmartNIC's Open vSwitch bridge (a
/// SmartNicPort each, driven by its Server), serving `/healthz`, reached by the
/// operator over VLAN 10. A description edit passes both waves once each host
/// answered, its revisions kept as ControllerRevisions of their own kind; VLAN 20
/// cuts the canary's host off: its wave goes back, the other port is never touched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_smartnic_configuration_rolls_out_in_waves_and_back() {
    use k8s_openapi::api::apps::v1::ControllerRevision;
    use kube::ResourceExt;
    use patchbay::api::{SmartNicConfiguration, SmartNicPort};
    let ovs = OvsSim::start(&["br0"]).expect("Open vSwitch starts");
    let hosts = support::netns::Hosts::create(&ovs, "br0", 2);
    let _management = hosts.reach_from_root(&ovs, "br0", 10);
    let web = [hosts.serve_http(0, 8080), hosts.serve_http(1, 8080)];
    let env = Env::start("rollout-smartnic").await;
    env.ovs_provider(&ovs, "nic").await;
    for (name, port) in [("snp-a", &hosts.ports[0]), ("snp-b", &hosts.ports[1])] {
        env.create::<SmartNicPort>(json!({
            "apiVersion": "patchbay.dev/v1alpha1", "kind": "SmartNicPort",
            "metadata": {"name": name},
            "spec": {"provider": {"name": "nic"}, "portName": port}
        }))
        .await;
    }
    env.create::<SmartNicConfiguration>(json!({
        "apiVersion": "patchbay.dev/v1alpha1", "kind": "SmartNicConfiguration",
        "metadata": {"name": "prov"},
        "spec": {"untaggedVLAN": 10,
                 "rollout": {"canary": {"ports": 1}, "maxUnavailable": 1,
                             "progressDeadlineSeconds": 120,
                             "probe": {"httpGet": {"port": 8080, "path": "/healthz"},
                                       "initialDelaySeconds": 1, "periodSeconds": 1,
                                       "timeoutSeconds": 1, "failureThreshold": 3}}}
    }))
    .await;
    let ns = env.cluster.namespace.clone();
    let (x, y) = (format!("{ns}-x"), format!("{ns}-y"));
    for (i, server, port) in [(0, &x, "snp-a"), (1, &y, "snp-b")] {
        let mac = hosts.mac(i);
        env.server(
            (server, &ns),
            (&mac, port),
            "prov",
            json!({"hostAddress": hosts.ip(i),
                   "nics": [{"name": "eth0", "mac": mac,
                             "port": {"kind": "SmartNicPort", "name": port, "namespace": ns},
                             "provisioningConfiguration": {"name": "prov"}}]}),
        )
        .await;
    }
    let tag = |i: usize| ovs.vsctl(&["get", "Port", &hosts.ports[i], "tag"]).unwrap();
    for p in ["snp-a", "snp-b"] {
        env.wait_obj_within::<SmartNicPort>(60, p, "Active on prov", |sp| {
            let st = sp.status.as_ref();
            st.and_then(|s| s.state) == Some(PortState::Active)
                && st
                    .and_then(|s| s.configuration_ref.as_ref())
                    .is_some_and(|c| c.name == "prov")
        })
        .await;
    }
    assert_eq!((tag(0), tag(1)), ("10".into(), "10".into()));
    let r = probed_description_edit::<SmartNicConfiguration>(&env, &hosts, &web).await;
    assert_eq!((r.ports, r.updated_ports), (2, 2), "{r:?}");
    assert_eq!(r.switches, "1/1", "{r:?}");
    for port in &hosts.ports {
        assert_eq!(
            ovs.vsctl(&["get", "Port", port, "external_ids:\"patchbay/description\""])
                .unwrap(),
            "probed",
            "the description read back from the bridge"
        );
    }
    let revisions = env
        .api::<ControllerRevision>()
        .list(&kube::api::ListParams::default().labels("patchbay.dev/configuration=prov"))
        .await
        .unwrap();
    let kinds: Vec<(String, Option<String>)> = revisions
        .items
        .iter()
        .map(|c| {
            (
                c.name_any(),
                c.labels().get("patchbay.dev/configuration-kind").cloned(),
            )
        })
        .collect();
    assert_eq!(kinds.len(), 2, "{kinds:?}");
    assert!(
        kinds
            .iter()
            .all(|(_, k)| k.as_deref() == Some("SmartNicConfiguration")),
        "{kinds:?}"
    );
    assert!(
        kinds.iter().any(|(n, _)| *n == r.current_revision),
        "{kinds:?} {r:?}"
    );

    probe_cuts_the_canary_off::<SmartNicConfiguration>(&env, &hosts, &tag, ("snp-a", "snp-b"), &x)
        .await;
    let warned = env.warnings("prov").await;
    assert!(
        warned
            .iter()
            .any(|e| e.reason.as_deref() == Some("RolledBack")),
        "{warned:?}"
    );
    // Drift repair does not bring the rolled-back revision back.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!((tag(0), tag(1)), ("10".into(), "10".into()));
    let canary = env.api::<SmartNicPort>().get("snp-a").await.unwrap();
    assert!(
        !canary.annotations().contains_key("patchbay.dev/rollout"),
        "the canary's pin is gone: {:?}",
        canary.annotations()
    );
    env.cluster.finish().await;
}

/// A SmartNicConfiguration whose revision names another `nextConfigurationRef` moves
/// the chained SwitchPort in the same wave as its SmartNicPort: a simulated Cisco
/// behind an Open vSwitch SmartNIC. The canary's chain (bridge port and the Cisco
/// port) moves first, the other SmartNicPort a wave later; a typo in the next
/// configuration's name leaves the canary's chain waiting, and at the progress
/// deadline the wave goes back — the Cisco port to the previous revision's VLAN —
/// while the other port is never touched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_smartnic_chain_moves_with_its_wave_and_goes_back_with_it() {
    use patchbay::api::{SmartNicConfiguration, SmartNicPort, SwitchPort};
    let sims = FakeSwitches::start(&[SimSpec::new("tor1", "cisco_generic")]).unwrap();
    let sim = sims.get("tor1");
    let ovs = OvsSim::start(&["br0"]).expect("Open vSwitch starts");
    ovs.add_internal_ports("br0", &["s1", "s2"]).unwrap();
    let env = Env::start("rollout-chain").await;
    env.switch(
        "tor1",
        "ios",
        sim,
        &sim.host_key_fingerprint,
        &[("tor1-p1", "FastEthernet0/1")],
    )
    .await;
    env.configuration("tor-a", json!({"untaggedVLAN": 10}))
        .await;
    env.configuration("tor-b", json!({"untaggedVLAN": 20}))
        .await;
    env.ovs_provider(&ovs, "nic").await;
    env.create::<SmartNicConfiguration>(json!({
        "apiVersion": "patchbay.dev/v1alpha1", "kind": "SmartNicConfiguration",
        "metadata": {"name": "chain"},
        "spec": {"untaggedVLAN": 10, "nextConfigurationRef": {"name": "tor-a"},
                 "rollout": {"canary": {"ports": 1}, "maxUnavailable": 1,
                             "minWaitSeconds": 5, "progressDeadlineSeconds": 20}}
    }))
    .await;
    for (name, port, next) in [("h1", "s1", Some("tor1-p1")), ("h2", "s2", None)] {
        let mut spec = json!({"provider": {"name": "nic"}, "portName": port,
                              "configuration": {"name": "chain"}});
        if let Some(n) = next {
            spec["nextPortRef"] = json!({"kind": "SwitchPort", "name": n});
        }
        env.create::<SmartNicPort>(json!({
            "apiVersion": "patchbay.dev/v1alpha1", "kind": "SmartNicPort",
            "metadata": {"name": name}, "spec": spec
        }))
        .await;
    }
    let active =
        |p: &SmartNicPort| p.status.as_ref().and_then(|s| s.state) == Some(PortState::Active);
    for h in ["h1", "h2"] {
        env.wait_obj_within::<SmartNicPort>(60, h, "Active", active)
            .await;
    }
    let tor1 = ssh_cases::backend("ios", sim);
    let cisco = || async { access(&tor1, &["FastEthernet0/1"]).await[0] };
    let tag = |port: &str| ovs.vsctl(&["get", "Port", port, "tag"]).unwrap();
    assert_eq!(cisco().await, Some(10));
    assert_eq!((tag("s1"), tag("s2")), ("10".into(), "10".into()));

    // The revision names tor-b: the canary's chain moves, bridge and Cisco, a wave
    // (five seconds' minimum wait) before the other port.
    edit::<SmartNicConfiguration>(
        &env,
        "chain",
        json!({"untaggedVLAN": 11, "nextConfigurationRef": {"name": "tor-b"}}),
    )
    .await;
    let started = Instant::now();
    let on_cisco = loop {
        if cisco().await == Some(20) {
            break (tag("s1"), tag("s2"));
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the canary's chain never reached the Cisco port"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(
        on_cisco,
        ("11".into(), "10".into()),
        "when the Cisco port moved, the canary's bridge port had and the other port had not"
    );
    let r = rollout_in::<SmartNicConfiguration>(&env, "chain", "Complete").await;
    assert_eq!((r.ports, r.updated_ports), (2, 2), "{r:?}");
    assert_eq!((tag("s1"), tag("s2")), ("11".into(), "11".into()));
    let next = env.api::<SwitchPort>().get("tor1-p1").await.unwrap();
    assert_eq!(
        next.spec.configuration.as_ref().map(|c| c.name.as_str()),
        Some("tor-b")
    );

    // A typo in the next configuration's name: the canary's chain waits for a
    // SwitchPortConfiguration that does not exist; the deadline puts it back.
    edit::<SmartNicConfiguration>(
        &env,
        "chain",
        json!({"untaggedVLAN": 12, "nextConfigurationRef": {"name": "tor-bb"}}),
    )
    .await;
    let r = rolled_back::<SmartNicConfiguration>(&env, "chain", 90, || {
        assert_eq!(
            tag("s2"),
            "11",
            "the port the rollout did not reach is untouched"
        )
    })
    .await;
    assert!(
        r.message.contains("gate ProgressDeadline failed"),
        "{}",
        r.message
    );
    assert!(r.message.contains("/h1"), "{}", r.message);
    assert!(!r.message.contains("/h2"), "{}", r.message);
    support::eventually(
        60,
        "the canary's chain back on the previous revision",
        || async {
            let next = env.api::<SwitchPort>().get("tor1-p1").await.ok()?;
            let carries = next.spec.configuration.as_ref().map(|c| c.name.clone());
            (tag("s1") == "11" && carries.as_deref() == Some("tor-b") && cisco().await == Some(20))
                .then_some(())
        },
    )
    .await;
    env.wait_obj_within::<SmartNicPort>(60, "h1", "Active again", active)
        .await;
    assert_eq!(tag("s2"), "11");
    env.cluster.finish().await;
}

/// A Switch's port entries edited: the ports that carry a configuration follow in
/// waves, read on the simulated Cisco itself; a port carrying nothing follows at
/// once. Three configured ports re-cabled (each entry renamed) move one at a time
/// — each one's old device port cleaned as it moves — and the Switch's rollout
/// completes; then a `vlanRange` that refuses their VLAN fails the canary's wave:
/// rolled back, the canary Active again on its entry, the other two never leaving
/// Active, their device ports unchanged throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_switch_port_entry_edit_reaches_its_ports_in_waves_and_goes_back() {
    use kube::ResourceExt;
    use patchbay::api::Switch;
    let sims = FakeSwitches::start(&[SimSpec::new("tor5", "cisco_generic")]).unwrap();
    let sim = sims.get("tor5");
    let env = Env::start("rollout-entries").await;
    env.switch(
        "tor5",
        "ios",
        sim,
        &sim.host_key_fingerprint,
        &[
            ("tor5-p1", "FastEthernet0/1"),
            ("tor5-p2", "FastEthernet0/2"),
            ("tor5-p3", "FastEthernet0/3"),
            ("tor5-p4", "FastEthernet0/4"),
        ],
    )
    .await;
    edit::<Switch>(
        &env,
        "tor5",
        json!({"rollout": {"canary": {"ports": 1}, "maxUnavailable": 1, "minWaitSeconds": 4,
                           "progressDeadlineSeconds": 60}}),
    )
    .await;
    env.configuration("ten", json!({"untaggedVLAN": 10})).await;
    let carried = ["tor5-p1", "tor5-p2", "tor5-p3"];
    for p in carried {
        env.link(p, Some("ten")).await;
    }
    for p in carried {
        env.wait_state_within(p, PortState::Active, 60).await;
    }
    env.wait_obj_within::<Switch>(30, "tor5", "its first revision", |s| {
        s.rollout_status().is_some_and(|r| r.phase == "Complete")
    })
    .await;
    let device = ssh_cases::backend("ios", sim);
    let old = ["FastEthernet0/1", "FastEthernet0/2", "FastEthernet0/3"];
    let new = ["FastEthernet0/5", "FastEthernet0/6", "FastEthernet0/7"];
    assert_eq!(access(&device, &old).await, [Some(10); 3]);

    // Re-cabled: every entry renamed in one edit.
    let renamed: serde_json::Map<String, serde_json::Value> = (1..=4)
        .map(|i| {
            (
                format!("tor5-p{i}"),
                json!({"name": format!("FastEthernet0/{}", i + 4)}),
            )
        })
        .collect();
    edit::<Switch>(&env, "tor5", json!({ "ports": renamed })).await;
    // The port carrying nothing takes its new device port at once.
    env.wait_for("tor5-p4", "its new device port", |p| {
        p.status.as_ref().and_then(|s| s.device_port.as_deref()) == Some("FastEthernet0/8")
    })
    .await;
    let started = Instant::now();
    let mut moved: Vec<(Duration, usize)> = Vec::new();
    loop {
        assert!(
            started.elapsed() < Duration::from_secs(90),
            "all moved within 90 s: {moved:?}"
        );
        let (at_new, at_old) = (access(&device, &new).await, access(&device, &old).await);
        let count = at_new.iter().filter(|v| **v == Some(10)).count();
        // A port is never on both device ports, and never on neither once moved.
        for i in 0..3 {
            assert!(
                !(at_new[i] == Some(10) && at_old[i] == Some(10)),
                "{} on both {} and {}",
                carried[i],
                old[i],
                new[i]
            );
        }
        if moved.last().is_none_or(|(_, c)| *c != count) {
            moved.push((started.elapsed(), count));
        }
        if count == 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    eprintln!("ports moved (elapsed, count on their new device port): {moved:?}");
    // One at a time (the canary may have moved before the first sample), each wave
    // after the last one's minimum wait (4 s).
    let counts: Vec<usize> = moved.iter().map(|(_, c)| *c).collect();
    assert!(
        counts.windows(2).all(|w| w[1] == w[0] + 1) && counts[0] <= 1,
        "{moved:?}"
    );
    for pair in moved.windows(2).skip(1) {
        assert!(
            pair[1].0 - pair[0].0 >= Duration::from_secs(3),
            "waves closer than the minimum wait: {moved:?}"
        );
    }
    assert_eq!(
        access(&device, &old).await,
        [None; 3],
        "the old ports cleaned"
    );
    let r = env
        .wait_obj_within::<Switch>(60, "tor5", "the rename Complete", |s| {
            s.rollout_status()
                .is_some_and(|r| r.phase == "Complete" && r.attempt == 1)
        })
        .await
        .rollout_status()
        .cloned()
        .unwrap();
    assert_eq!(
        (r.updated_ports, r.current_revision_number),
        (3, 2),
        "{r:?}"
    );

    // A constraint that refuses VLAN 10: the canary fails, goes back; the others
    // never move.
    let narrowed: serde_json::Map<String, serde_json::Value> = (1..=4)
        .map(|i| {
            (
                format!("tor5-p{i}"),
                json!({"name": format!("FastEthernet0/{}", i + 4), "vlanRange": "20-30"}),
            )
        })
        .collect();
    edit::<Switch>(&env, "tor5", json!({ "ports": narrowed })).await;
    let ports: kube::Api<patchbay::api::SwitchPort> = env.api();
    let others_active = || async {
        for p in &carried[1..] {
            let port = ports.get(p).await.unwrap();
            assert_eq!(
                port.status.and_then(|s| s.state),
                Some(PortState::Active),
                "{p} left Active"
            );
        }
    };
    let started = Instant::now();
    let r = loop {
        others_active().await;
        let sw = env.api::<Switch>().get("tor5").await.unwrap();
        let r = sw.rollout_status().cloned().unwrap();
        if r.phase == "RolledBack" {
            eprintln!(
                "rolled back {:?} after the edit: {}",
                started.elapsed(),
                r.message
            );
            break r;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "not rolled back within 60 s: {r:?}; the canary: {:?}",
            ports
                .get("tor5-p1")
                .await
                .map(|p| (p.metadata.annotations, p.status))
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    assert!(
        r.message.contains("tor5-p1") && r.message.contains("goes back to revision 2"),
        "{r:?}"
    );
    env.wait_state_within("tor5-p1", PortState::Active, 30)
        .await;
    others_active().await;
    assert_eq!(access(&device, &new).await, [Some(10); 3]);
    let p1 = ports.get("tor5-p1").await.unwrap();
    assert!(
        !p1.annotations().contains_key("patchbay.dev/switch-rollout"),
        "the canary's pin stays: {p1:?}"
    );
}

/// A Switch entry renamed to the wrong device port cuts its host off: the HttpProbe
/// gate of the Switch's own rollout fails the canary and the rollback moves the port
/// back. Two hosts behind Open vSwitch serve `/healthz`, reached by the operator over
/// VLAN 10; the edit "re-cables" `tor-a` onto a bridge port with nothing behind it.
/// The canary moves (its old port cleaned, the spare one on VLAN 10), its host stops
/// answering, three failed probes roll it back onto its own port, the host answers
/// again and the spare port is clean; `tor-b`, not reached, stays on VLAN 10.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_switch_entry_renamed_to_the_wrong_port_is_rolled_back_on_its_hosts_probe() {
    use patchbay::api::Switch;
    let ovs = OvsSim::start(&["br0"]).expect("Open vSwitch starts");
    let hosts = support::netns::Hosts::create(&ovs, "br0", 2);
    ovs.add_internal_ports("br0", &["spare0"]).unwrap();
    let _management = hosts.reach_from_root(&ovs, "br0", 10);
    let _web = [hosts.serve_http(0, 8080), hosts.serve_http(1, 8080)];
    let env = Env::start("rollout-entry-probe").await;
    env.device(
        "tor",
        &[],
        json!({"backend": "ovsdb", "os": "ovs", "address": "127.0.0.1",
               "port": ovs.info.ovsdb_port, "options": {"bridge": "br0"}}),
        &[("tor-a", &hosts.ports[0]), ("tor-b", &hosts.ports[1])],
    )
    .await;
    edit::<Switch>(&env, "tor", json!({ "rollout": probed_policy() })).await;
    env.configuration("prov", json!({"untaggedVLAN": 10})).await;
    let ns = env.cluster.namespace.clone();
    let x = probed_servers(&env, &hosts).await;
    let tag = |port: &str| ovs.vsctl(&["get", "Port", port, "tag"]).unwrap();
    for p in ["tor-a", "tor-b"] {
        env.wait_carrying(p, "prov").await;
    }
    support::eventually(20, "both hosts answer through the bridge", || async {
        (answers(&hosts.ip(0)) && answers(&hosts.ip(1))).then_some(())
    })
    .await;

    edit::<Switch>(&env, "tor", json!({"ports": {"tor-a": {"name": "spare0"}}})).await;
    support::eventually(20, "the canary moved onto the spare port", || async {
        (tag("spare0") == "10" && tag(&hosts.ports[0]) == "[]").then_some(())
    })
    .await;
    let started = Instant::now();
    let r = rolled_back::<Switch>(&env, "tor", 60, || {
        assert_eq!(tag(&hosts.ports[1]), "10", "tor-b was not to be touched")
    })
    .await;
    eprintln!(
        "rolled back {:?} after the canary moved: {}",
        started.elapsed(),
        r.message
    );
    assert!(r.message.contains("gate HttpProbe failed"), "{}", r.message);
    assert!(r.message.contains(&format!("{ns}/tor-a")), "{}", r.message);
    assert!(r.message.contains(&format!("Server/{x}")), "{}", r.message);
    assert!(!r.message.contains("tor-b"), "{}", r.message);
    support::eventually(
        30,
        "tor-a back on its own port, its host answering, the spare port clean",
        || async {
            (tag(&hosts.ports[0]) == "10" && tag("spare0") == "[]" && answers(&hosts.ip(0)))
                .then_some(())
        },
    )
    .await;
    let port = env
        .wait_for("tor-a", "back on its own device port", |p| {
            p.status.as_ref().and_then(|s| s.device_port.as_deref()) == Some(&hosts.ports[0])
        })
        .await;
    assert_eq!(port.status.and_then(|s| s.state), Some(PortState::Active));
    assert_eq!(tag(&hosts.ports[1]), "10");
    env.cluster.finish().await;
}

//! What a Switch's ports see, end to end: the operator on devplane (or a real
//! cluster) reads a Linux switch's lldpd (real LLDP between network namespaces, read
//! over a private sshd with a key login and a pinned host key) into the Switch's
//! status — each port's neighbour, the SwitchPort managing it, the switch's own
//! chassis id — and a swapped pair of cables shows up swapped within one interval
//! plus LLDP's hold time. A source that is not one, and a neighbour source named as
//! a Switch's port device, are refused with the field and the reason.
//!
//! Verification: a Server whose NIC is where it says moves onto its provisioning
//! network (read back on the device); one whose declared port sees another host is
//! not moved, its port stays clean and its phase held, with one Warning; a cable
//! moved while the port carries its network is reported (Permissive) and parked
//! under Strict. Discovery: a NIC that gives only its MAC is linked to the one port
//! it is seen on; one seen on two ports is reported, not guessed. Open vSwitch's own
//! MAC learning (read from ovs-vswitchd's control socket) catches two servers swapped
//! in the inventory and verifies the fix, read back with ovs-vsctl.

mod support;

use std::time::{Duration, Instant};

use kube::api::{Api, Patch, PatchParams, PostParams};
use patchbay::api::{
    PortState, ProviderSwitch, Server, ServerClaim, ServerPhase, Switch, SwitchPort, SwitchStatus,
};
use patchbay_providers::VlanMode;
use patchbay_providers::values::{PortName, VlanId};
use patchbay_testbed::lldp::LldpFabric;
use serde_json::json;
use support::env::{Env, find_condition};

const HOST_A: &str = "52:54:00:0a:00:01";
const HOST_B: &str = "52:54:00:0b:00:01";

/// The neighbour (chassis id) the status shows on `port`, and the SwitchPort it names.
fn seen(s: &SwitchStatus, port: &str) -> Option<(String, Option<String>)> {
    let p = s.neighbors.iter().find(|p| p.port == port)?;
    Some((p.lldp.first()?.chassis_id.clone(), p.switch_port.clone()))
}

fn status(sw: &Switch) -> SwitchStatus {
    sw.status.clone().unwrap_or_default()
}

/// Seconds between neighbour reads of the tests' Switches.
const INTERVAL: u64 = 5;

/// The Linux side of switch leaf1, read only: ProviderSwitch `leaf1-lldp`
/// ([`Env::lldp_source`]).
async fn lldp_source(env: &Env, fabric: &LldpFabric) {
    env.lldp_source(fabric, "leaf1-lldp").await;
}

/// The fixture switch leaf1 managing `ports` (SwitchPort, device port), reading its
/// neighbours through `leaf1-lldp` every [`INTERVAL`] s, and the provisioning
/// configuration (access VLAN 10).
async fn leaf1(env: &Env, ports: &[(&str, &str)]) {
    env.create::<ProviderSwitch>(json!({
        "apiVersion": "patchbay.dev/v1alpha1", "kind": "ProviderSwitch",
        "metadata": {"name": "leaf1"},
        "spec": {"backend": "fixture", "os": "fixture", "address": "127.0.0.1"}
    }))
    .await;
    let ports: serde_json::Map<String, serde_json::Value> = ports
        .iter()
        .map(|(name, device)| ((*name).to_owned(), json!({"name": device})))
        .collect();
    env.create::<Switch>(json!({
        "apiVersion": "patchbay.dev/v1alpha1", "kind": "Switch",
        "metadata": {"name": "leaf1"},
        "spec": {"provider": {"name": "leaf1"}, "ports": ports,
                 "neighbors": {"providers": [{"name": "leaf1-lldp"}],
                               "intervalSeconds": INTERVAL}}
    }))
    .await;
    env.configuration("provisioning", json!({"untaggedVLAN": 10}))
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_switch_shows_what_each_port_sees_and_a_swap_within_one_interval() {
    let mut fabric = LldpFabric::start("leaf1").expect("the fabric starts");
    fabric.add_host("server-a", HOST_A, "swp1").unwrap();
    fabric.add_host("server-b", HOST_B, "swp2").unwrap();
    let env = Env::start("cabling").await;

    // The Linux side of the switch, read only: a key login and a pinned host key.
    lldp_source(&env, &fabric).await;
    // The Switch a linux source was created with above has it as its port device:
    // refused, naming the field.
    let refused = env
        .wait_obj::<Switch>("leaf1-lldp", "a linux provider refused for ports", |s| {
            find_condition(&status(s).conditions, "Ready").is_some_and(|(truth, _, message)| {
                truth == "False"
                    && message
                        == "spec.provider: ProviderSwitch leaf1-lldp is os linux, a neighbour \
                            source that configures no port: name it in spec.neighbors.providers"
            })
        })
        .await;
    assert!(status(&refused).neighbors.is_empty());

    // The fixture switch whose ports are managed, reading its neighbours through it.
    let interval = INTERVAL;
    leaf1(&env, &[("leaf1-a", "swp1"), ("leaf1-b", "swp2")]).await;
    let sw = env
        .wait_obj::<Switch>("leaf1", "each port's neighbour in the status", |s| {
            let s = status(s);
            seen(&s, "swp1") == Some((HOST_A.into(), Some("leaf1-a".into())))
                && seen(&s, "swp2") == Some((HOST_B.into(), Some("leaf1-b".into())))
        })
        .await;
    let s = status(&sw);
    let a = &s.neighbors[0].lldp[0];
    assert_eq!(a.system_name.as_deref(), Some("server-a"));
    assert_eq!(a.chassis_id_subtype, "mac");
    assert_eq!(a.port_description.as_deref(), Some("eth0"));
    let (truth, reason, _) = find_condition(&s.conditions, "NeighborsRead").expect("NeighborsRead");
    assert_eq!((truth.as_str(), reason.as_str()), ("True", "Read"));
    // The chassis id is the switch's own: what the hosts' LLDP agents see it as.
    let chassis = s.chassis_id.clone().expect("the switch's chassis id");
    let host_view = fabric.host_neighbors_json(0).unwrap();
    assert!(
        host_view.contains(&chassis),
        "{chassis} not in what server-a sees: {host_view}"
    );

    // Swap the two cables: the status follows within one interval plus LLDP's hold
    // time (4 s here), never naming a neighbour on a port that no longer sees it.
    let swapped_at = Instant::now();
    fabric.swap_cables(0, 1).unwrap();
    env.wait_obj::<Switch>("leaf1", "the swap in the status", |s| {
        let s = status(s);
        seen(&s, "swp1") == Some((HOST_B.into(), Some("leaf1-a".into())))
            && seen(&s, "swp2") == Some((HOST_A.into(), Some("leaf1-b".into())))
    })
    .await;
    let took = swapped_at.elapsed();
    println!("swap reported after {took:?} (interval {interval} s, LLDP hold 4 s)");
    assert!(
        took < Duration::from_secs(interval + 4 + 5),
        "a swap is reported within an interval and a hold time: {took:?}"
    );

    // A source that cannot be read for neighbours: the condition names the field.
    env.create::<ProviderSwitch>(json!({
        "apiVersion": "patchbay.dev/v1alpha1", "kind": "ProviderSwitch",
        "metadata": {"name": "not-lldp"},
        "spec": {"backend": "ovsdb", "os": "ovs", "address": "127.0.0.1",
                 "options": {"bridge": "br0"}}
    }))
    .await;
    env.api::<Switch>()
        .patch(
            "leaf1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"neighbors": {"providers": [{"name": "not-lldp"}]}}})),
        )
        .await
        .unwrap();
    let sw = env
        .wait_obj::<Switch>("leaf1", "the wrong source refused", |s| {
            find_condition(&status(s).conditions, "NeighborsRead").is_some_and(
                |(truth, _, message)| {
                    truth == "False"
                    && message.starts_with(
                        "spec.neighbors.providers[0]: ProviderSwitch not-lldp is an Open vSwitch \
                         without options.controlSocket",
                    )
                },
            )
        })
        .await;
    assert_eq!(
        find_condition(&status(&sw).conditions, "NeighborsRead")
            .unwrap()
            .1,
        "InvalidProvider"
    );
    // The last good read stays, with its time.
    assert!(seen(&status(&sw), "swp1").is_some());
    env.cluster.finish().await;
}

/// [`Env::server`] provisioned with `provisioning`, of site `site`.
async fn server_at(env: &Env, site: &str, name: &str, mac: &str, port: &str) {
    env.server((name, site), (mac, port), "provisioning", json!({}))
        .await;
}

/// [`server_at`] of the test's own site.
async fn server(env: &Env, name: &str, mac: &str, port: &str) {
    server_at(env, &env.cluster.namespace.clone(), name, mac, port).await;
}

async fn wait_server(env: &Env, name: &str, what: &str, check: impl Fn(&Server) -> bool) -> Server {
    let api = Api::<Server>::all(env.cluster.client.clone());
    support::eventually_seen(30, what, || async {
        match api.get_opt(name).await {
            Ok(Some(s)) if check(&s) => Ok(s),
            Ok(Some(s)) => Err(format!("{:#?}", s.status)),
            other => Err(format!("{other:?}")),
        }
    })
    .await
}

fn cabling(s: &Server) -> Option<(String, String, String)> {
    find_condition(&s.status.as_ref()?.conditions, "CablingVerified")
}

/// The VLANs the fixture device has on `port`.
fn on_device(env: &Env, port: &str) -> VlanMode {
    let device = env
        .fixtures
        .get(&env.cluster.namespace, "leaf1")
        .expect("the fixture switch exists");
    device
        .port_state(&PortName::parse(port).unwrap())
        .and_then(|o| o.vlans)
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_miscabled_port_is_parked_and_held_and_a_verified_one_moves() {
    const HOST_C: &str = "52:54:00:0c:00:01";
    let mut fabric = LldpFabric::start("leaf1").expect("the fabric starts");
    fabric.add_host("server-a", HOST_A, "swp1").unwrap();
    // swp2 has server-b in it, but the inventory says server-c's NIC is there.
    fabric.add_host("server-b", HOST_B, "swp2").unwrap();
    let env = Env::start("cabling-verify").await;
    lldp_source(&env, &fabric).await;
    leaf1(&env, &[("leaf1-a", "swp1"), ("leaf1-b", "swp2")]).await;
    // The neighbours are read before the Servers arrive: their ports are judged on
    // what the wire says from the start.
    env.wait_obj::<Switch>("leaf1", "both ports' neighbours", |s| {
        let s = status(s);
        seen(&s, "swp1").is_some() && seen(&s, "swp2").is_some()
    })
    .await;
    // Servers are cluster-scoped: named after the test's namespace.
    let ns = env.cluster.namespace.clone();
    let (sa, sc) = (format!("{ns}-a"), format!("{ns}-c"));
    server(&env, &sa, HOST_A, "leaf1-a").await;
    // (Of another site: the claim below is for server-a.)
    server_at(&env, "elsewhere", &sc, HOST_C, "leaf1-b").await;

    // server-a is where it says: verified, its port carries the provisioning network.
    let a = wait_server(&env, &sa, "server-a verified and ready", |s| {
        cabling(s).is_some_and(|(t, r, _)| t == "True" && r == "Verified")
            && s.status.as_ref().and_then(|s| s.ports_ready.as_deref()) == Some("1/1")
    })
    .await;
    assert_eq!(cabling(&a).unwrap().2, "1 NIC seen where declared");
    env.wait_state("leaf1-a", PortState::Active).await;
    let vlan10 = VlanMode::Access {
        vlan: VlanId::new(10).unwrap(),
    };
    assert_eq!(on_device(&env, "swp1"), vlan10);

    // server-c's port sees server-b: not moved, parked (clean), the phase held,
    // the condition naming the port, what it sees and that the NIC is nowhere.
    let c = wait_server(&env, &sc, "server-c's mismatch", |s| {
        cabling(s).is_some_and(|(t, r, _)| t == "False" && r == "CablingMismatch")
    })
    .await;
    let (_, _, message) = cabling(&c).unwrap();
    assert_eq!(
        message,
        format!(
            "NIC eth0 ({HOST_C}) is declared on SwitchPort {ns}/leaf1-b (Switch leaf1, swp2), \
             which sees LLDP chassis {HOST_B} (server-b) port {HOST_B}; the NIC is not seen on \
             any port; the port is parked"
        )
    );
    let held = find_condition(&c.status.as_ref().unwrap().conditions, "PortsReady").unwrap();
    assert_eq!(
        (held.0.as_str(), held.1.as_str()),
        ("False", "CablingMismatch")
    );
    // Give the operator several reads to do the wrong thing: nothing reaches swp2.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let port = env.api::<SwitchPort>().get("leaf1-b").await.unwrap();
    assert_eq!(
        port.spec.configuration, None,
        "never linked to the provisioning network"
    );
    assert_eq!(on_device(&env, "swp2"), VlanMode::Unconfigured);
    // (A cluster-scoped object's Events are in `default`.)
    let events = Api::<k8s_openapi::api::events::v1::Event>::namespaced(
        env.cluster.client.clone(),
        "default",
    );
    let warnings = support::events_about(&events, &sc).await;
    let mismatches: Vec<_> = warnings
        .iter()
        .filter(|e| e.reason.as_deref() == Some("CablingMismatch"))
        .collect();
    assert_eq!(mismatches.len(), 1, "one Warning: {warnings:#?}");

    // server-a is allocated and installed: its port carries the tenant's network.
    env.configuration("tenant", json!({"untaggedVLAN": 20}))
        .await;
    claim_and_install(&env, &[&sa]).await;
    let vlan20 = VlanMode::Access {
        vlan: VlanId::new(20).unwrap(),
    };
    wait_server(
        &env,
        &sa,
        "server-a Provisioned on the tenant network",
        |s| {
            s.status.as_ref().and_then(|s| s.phase) == Some(ServerPhase::Provisioned)
                && s.status.as_ref().and_then(|s| s.ports_ready.as_deref()) == Some("1/1")
                && cabling(s).is_some_and(|(t, _, _)| t == "True")
        },
    )
    .await;
    assert_eq!(on_device(&env, "swp1"), vlan20);

    // Its cable moves to swp3 while it runs: reported (Permissive) within an
    // interval, the running host's port left as it is...
    let moved_at = Instant::now();
    fabric.move_cable(0, "swp3").unwrap();
    let a = wait_server(&env, &sa, "server-a's moved cable reported", |s| {
        cabling(s).is_some_and(|(t, _, m)| t == "False" && m.contains("the NIC is seen on"))
    })
    .await;
    println!("moved cable reported after {:?}", moved_at.elapsed());
    let (_, _, message) = cabling(&a).unwrap();
    assert_eq!(
        message,
        format!(
            "NIC eth0 ({HOST_A}) is declared on SwitchPort {ns}/leaf1-a (Switch leaf1, swp1), \
             which sees nothing; the NIC is seen on Switch {ns}/leaf1 port swp3; the port is \
             left as it is (cablingPolicy Permissive)"
        )
    );
    assert_eq!(on_device(&env, "swp1"), vlan20);
    // ...and under Strict, parked.
    Api::<Server>::all(env.cluster.client.clone())
        .patch(
            &sa,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"cablingPolicy": "Strict"}})),
        )
        .await
        .unwrap();
    env.wait_for("leaf1-a", "server-a's port parked under Strict", |p| {
        p.spec.configuration.is_none()
            && p.status.as_ref().and_then(|s| s.state) == Some(PortState::Idle)
    })
    .await;
    assert_eq!(on_device(&env, "swp1"), VlanMode::Unconfigured);
    env.cluster.finish().await;
}

/// ServerClaim `tenant` (the test's site, configuration `tenant`) for as many Servers
/// as `servers`; once each is bound, marks it installed (`patchbay.dev/provisioned`).
async fn claim_and_install(env: &Env, servers: &[&str]) {
    let ns = env.cluster.namespace.clone();
    let claim: ServerClaim = serde_json::from_value(json!({
        "apiVersion": "patchbay.dev/v1alpha1", "kind": "ServerClaim",
        "metadata": {"name": "tenant", "namespace": ns},
        "spec": {"site": ns, "roles": [{"name": "worker", "count": servers.len()}],
                 "networkConfiguration": [{"configurationRef":
                     {"kind": "SwitchPortConfiguration", "name": "tenant"}}]}
    }))
    .unwrap();
    env.api::<ServerClaim>()
        .create(&PostParams::default(), &claim)
        .await
        .unwrap();
    for s in servers {
        wait_server(env, s, "bound", |s| s.spec.claim_ref.is_some()).await;
        Api::<Server>::all(env.cluster.client.clone())
            .patch(
                s,
                &PatchParams::default(),
                &Patch::Merge(
                    json!({"metadata": {"annotations": {"patchbay.dev/provisioned": "true"}}}),
                ),
            )
            .await
            .unwrap();
    }
}

/// Server `name` with one NIC `eth0` that declares only its MAC.
async fn mac_only_server(env: &Env, name: &str, mac: &str) {
    let ns = env.cluster.namespace.clone();
    let server: Server = serde_json::from_value(json!({
        "apiVersion": "patchbay.dev/v1alpha1", "kind": "Server",
        "metadata": {"name": name},
        "spec": {
            "bmc": {"address": "10.0.0.1", "credentialsSecretRef": {"name": "bmc", "namespace": ns}},
            "bootMac": mac,
            "site": ns,
            "nics": [{"name": "eth0", "mac": mac,
                      "provisioningConfiguration": {"name": "provisioning"}}],
        }
    }))
    .unwrap();
    Api::<Server>::all(env.cluster.client.clone())
        .create(&PostParams::default(), &server)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mac_only_nic_is_discovered_once_seen_on_one_port_and_an_ambiguous_one_is_not() {
    const HOST_D: &str = "52:54:00:0d:00:01";
    const HOST_E: &str = "52:54:00:0e:00:01";
    let mut fabric = LldpFabric::start("leaf1").expect("the fabric starts");
    fabric.add_host("server-d", HOST_D, "swp3").unwrap();
    // The same MAC behind two ports (a flooding hub, a cloned VM): never guessed.
    fabric.add_host("clone-1", HOST_E, "swp4").unwrap();
    fabric.add_host("clone-2", HOST_E, "swp5").unwrap();
    let env = Env::start("cabling-discover").await;
    lldp_source(&env, &fabric).await;
    leaf1(
        &env,
        &[
            ("leaf1-c", "swp3"),
            ("leaf1-d", "swp4"),
            ("leaf1-e", "swp5"),
        ],
    )
    .await;
    let ns = env.cluster.namespace.clone();
    let (sd, se) = (format!("{ns}-d"), format!("{ns}-e"));
    mac_only_server(&env, &sd, HOST_D).await;
    mac_only_server(&env, &se, HOST_E).await;

    // server-d: linked to the port its MAC is seen on, then verified there and moved.
    let d = wait_server(&env, &sd, "server-d discovered, verified, ready", |s| {
        s.spec.nics[0]
            .port
            .as_ref()
            .is_some_and(|p| p.name == "leaf1-c")
            && cabling(s).is_some_and(|(t, _, _)| t == "True")
            && s.status.as_ref().and_then(|s| s.ports_ready.as_deref()) == Some("1/1")
    })
    .await;
    assert_eq!(d.spec.nics[0].port.as_ref().unwrap().namespace, ns);
    env.wait_state("leaf1-c", PortState::Active).await;
    assert_eq!(
        on_device(&env, "swp3"),
        VlanMode::Access {
            vlan: VlanId::new(10).unwrap()
        }
    );
    let events = Api::<k8s_openapi::api::events::v1::Event>::namespaced(
        env.cluster.client.clone(),
        "default",
    );
    let found: Vec<String> = support::events_about(&events, &sd)
        .await
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("CablingDiscovered"))
        .filter_map(|e| e.note)
        .collect();
    assert_eq!(
        found,
        [format!(
            "NIC eth0 ({HOST_D}) linked to SwitchPort {ns}/leaf1-c: its MAC is seen on \
             Switch {ns}/leaf1 port swp3"
        )]
    );

    // server-e: seen on two ports, reported, nothing linked or moved.
    let e = wait_server(&env, &se, "server-e's ambiguity reported", |s| {
        cabling(s).is_some_and(|(t, r, _)| t == "Unknown" && r == "NotDiscovered")
    })
    .await;
    let (_, _, message) = cabling(&e).unwrap();
    assert_eq!(
        message,
        format!(
            "NIC eth0 ({HOST_E}) declares no port: its MAC is seen on 2 ports (Switch \
             {ns}/leaf1 port swp4, Switch {ns}/leaf1 port swp5): ambiguous, nothing is linked"
        )
    );
    tokio::time::sleep(Duration::from_secs(6)).await;
    let e = Api::<Server>::all(env.cluster.client.clone())
        .get(&se)
        .await
        .unwrap();
    assert!(e.spec.nics[0].port.is_none());
    for p in ["leaf1-d", "leaf1-e"] {
        let port = env.api::<SwitchPort>().get(p).await.unwrap();
        assert_eq!(port.spec.configuration, None, "{p} untouched");
    }
    env.cluster.finish().await;
}

/// Points Server `name`'s one NIC at SwitchPort `port`.
async fn recable(env: &Env, name: &str, mac: &str, port: &str) {
    let ns = env.cluster.namespace.clone();
    let nics = json!([{"name": "eth0", "mac": mac,
                       "port": {"kind": "SwitchPort", "name": port, "namespace": ns},
                       "provisioningConfiguration": {"name": "provisioning"}}]);
    Api::<Server>::all(env.cluster.client.clone())
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"nics": nics}})),
        )
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn macs_learned_by_open_vswitch_catch_a_swapped_inventory_and_verify_the_fix() {
    let ovs = patchbay_testbed::OvsSim::start(&["br0"]).expect("Open vSwitch starts");
    let hosts = support::netns::Hosts::create(&ovs, "br0", 2);
    let (mac0, mac1) = (hosts.mac(0), hosts.mac(1));
    // Traffic teaches the bridge where each host is (clean ports carry every VLAN).
    assert_eq!(hosts.loss(0, 1, 2), 0);
    let env = Env::start("cabling-ovs").await;
    env.ovs_provider(&ovs, "tor").await;
    // Clean on Open vSwitch carries every VLAN: park on a quarantine VLAN.
    env.switch_reading(
        "tor",
        &[("tor-a", &hosts.ports[0]), ("tor-b", &hosts.ports[1])],
        json!({"providers": [{"name": "tor"}], "intervalSeconds": 5,
               "parkingConfiguration": "quarantine"}),
    )
    .await;
    env.configuration("provisioning", json!({"untaggedVLAN": 10}))
        .await;
    env.configuration("quarantine", json!({"untaggedVLAN": 999}))
        .await;
    let sw = env
        .wait_obj::<Switch>("tor", "the learned MACs in the status", |s| {
            let s = status(s);
            let macs = |p: &str| {
                s.neighbors
                    .iter()
                    .find(|n| n.port == p)
                    .map(|n| n.macs.clone())
            };
            macs(&hosts.ports[0]) == Some(vec![mac0.clone()])
                && macs(&hosts.ports[1]) == Some(vec![mac1.clone()])
        })
        .await;
    assert_eq!(
        status(&sw).neighbors[0].switch_port.as_deref(),
        Some("tor-a")
    );

    // The inventory has the two servers swapped: neither port gets the provisioning
    // network; both are parked.
    let ns = env.cluster.namespace.clone();
    let (sx, sy) = (format!("{ns}-x"), format!("{ns}-y"));
    server(&env, &sx, &mac0, "tor-b").await;
    server(&env, &sy, &mac1, "tor-a").await;
    let x = wait_server(&env, &sx, "x's mismatch", |s| {
        cabling(s).is_some_and(|(t, _, _)| t == "False")
    })
    .await;
    assert_eq!(
        cabling(&x).unwrap().2,
        format!(
            "NIC eth0 ({mac0}) is declared on SwitchPort {ns}/tor-b (Switch tor, {}), which sees \
             MAC {mac1}; the NIC is seen on Switch {ns}/tor port {} (SwitchPort tor-a); the \
             port is parked",
            hosts.ports[1], hosts.ports[0]
        )
    );
    wait_server(&env, &sy, "y's mismatch", |s| {
        cabling(s).is_some_and(|(t, _, _)| t == "False")
    })
    .await;
    // Both ports parked on the Switch's quarantine VLAN, never the provisioning one.
    for p in ["tor-a", "tor-b"] {
        env.wait_carrying(p, "quarantine").await;
    }
    for p in &hosts.ports {
        assert_eq!(
            ovs.vsctl(&["get", "Port", p, "tag"]).unwrap(),
            "999",
            "{p} parked"
        );
    }

    // The inventory fixed: both verified, both ports on the provisioning VLAN.
    recable(&env, &sx, &mac0, "tor-a").await;
    recable(&env, &sy, &mac1, "tor-b").await;
    for s in [&sx, &sy] {
        wait_server(&env, s, "verified and ready", |s| {
            cabling(s).is_some_and(|(t, _, _)| t == "True")
                && s.status.as_ref().and_then(|s| s.ports_ready.as_deref()) == Some("1/1")
        })
        .await;
    }
    for p in &hosts.ports {
        assert_eq!(ovs.vsctl(&["get", "Port", p, "tag"]).unwrap(), "10");
    }
    env.cluster.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metal3_inspection_places_a_nic_the_wire_does_not_show() {
    if !support::on_devplane() {
        return; // the test plays Metal3; on a real cluster Metal3 plays itself
    }
    const HOST_M: &str = "52:54:00:0f:00:01";
    // The host is powered off: it sends nothing, so the wire shows it nowhere.
    let fabric = LldpFabric::start("leaf1").expect("the fabric starts");
    let cluster = support::Cluster::start("cabling-metal3").await;
    cluster
        .install_crd(support::bare_metal_host_crd(false))
        .await;
    let env = Env::start_on(cluster, |_| {}).await;
    lldp_source(&env, &fabric).await;
    leaf1(&env, &[("leaf1-a", "swp1"), ("leaf1-b", "swp2")]).await;
    let sw = env
        .wait_obj::<Switch>("leaf1", "a first read", |s| {
            status(s).neighbors_read_at.is_some() && status(s).chassis_id.is_some()
        })
        .await;
    let chassis = status(&sw).chassis_id.unwrap();

    // Metal3 inspected the host when it was last on: its NIC was on swp2.
    let ns = env.cluster.namespace.clone();
    let bmh: patchbay::api::metal3::BareMetalHost = serde_json::from_value(json!({
        "apiVersion": "metal3.io/v1alpha1", "kind": "BareMetalHost",
        "metadata": {"name": "bmh-m", "namespace": ns},
        "spec": {"bootMACAddress": HOST_M}
    }))
    .unwrap();
    let hosts: Api<patchbay::api::metal3::BareMetalHost> = env.api();
    hosts.create(&PostParams::default(), &bmh).await.unwrap();
    hosts
        .patch_status(
            "bmh-m",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {
                "provisioning": {"state": "available"},
                "hardware": {"nics": [{"name": "eth0", "mac": HOST_M,
                    "lldp": {"switchID": chassis, "portID": "swp2", "switchSystemName": "leaf1"}}]}
            }})),
        )
        .await
        .unwrap();
    // The inventory says swp1.
    let sm = format!("{ns}-m");
    server(&env, &sm, HOST_M, "leaf1-a").await;
    Api::<Server>::all(env.cluster.client.clone())
        .patch(
            &sm,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"spec": {"bareMetalHostRef": {"name": "bmh-m", "namespace": ns}}}),
            ),
        )
        .await
        .unwrap();
    let m = wait_server(&env, &sm, "the inspection's mismatch", |s| {
        cabling(s).is_some_and(|(t, _, _)| t == "False")
    })
    .await;
    assert_eq!(
        cabling(&m).unwrap().2,
        format!(
            "NIC eth0 ({HOST_M}) is declared on SwitchPort {ns}/leaf1-a (Switch leaf1, swp1), \
             which sees nothing now, and Metal3's inspection found the NIC on switch {chassis} \
             (leaf1) port swp2; the NIC is not seen on any port; the port is parked"
        )
    );
    let port = env.api::<SwitchPort>().get("leaf1-a").await.unwrap();
    assert_eq!(port.spec.configuration, None, "never moved");

    // The inventory corrected: the inspection now agrees, the port moves.
    recable(&env, &sm, HOST_M, "leaf1-b").await;
    wait_server(&env, &sm, "verified by the inspection", |s| {
        cabling(s).is_some_and(|(t, _, _)| t == "True")
    })
    .await;
    env.wait_state("leaf1-b", PortState::Active).await;
    assert_eq!(
        on_device(&env, "swp2"),
        VlanMode::Access {
            vlan: VlanId::new(10).unwrap()
        }
    );
    env.cluster.finish().await;
}

/// A process the test started, stopped by its PID when dropped (a failing test
/// leaves nothing running).
struct Started(std::process::Child);

impl Drop for Started {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs `python3 -c SCRIPT ARGS…` in network namespace `ns`, in the background.
fn python_in(ns: &str, script: &str, args: &[&str]) -> Started {
    Started(
        std::process::Command::new("ip")
            .args(["netns", "exec", ns, "python3", "-c", script])
            .args(args)
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("python3 runs"),
    )
}

/// Frames a host sends with another NIC's MAC as their source, once a second for a
/// number of seconds (raw AF_PACKET: any OS can do it).
const SPOOF_FRAMES: &str = r#"
import socket, struct, sys, time
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind(("eth0", 0))
src = bytes.fromhex(sys.argv[1].replace(":", ""))
f = b"\xff" * 6 + src + struct.pack("!H", 0x88B5) + b"spoofed".ljust(46, b".")
for _ in range(int(sys.argv[2])):
    s.send(f)
    time.sleep(1)
"#;

/// LLDP frames naming another NIC (chassis and port id: its MAC, TTL 120 s), sent
/// once a second for a number of seconds.
const SPOOF_LLDP: &str = r#"
import socket, struct, sys, time
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind(("eth0", 0))
mac = bytes.fromhex(sys.argv[1].replace(":", ""))
own = bytes.fromhex(open("/sys/class/net/eth0/address").read().strip().replace(":", ""))
tlv = lambda t, v: struct.pack("!H", (t << 9) | len(v)) + v
body = tlv(1, b"\x04" + mac) + tlv(2, b"\x03" + mac) + tlv(3, struct.pack("!H", 120)) + tlv(0, b"")
f = bytes.fromhex("0180c200000e") + own + struct.pack("!H", 0x88CC) + body
for _ in range(int(sys.argv[2])):
    s.send(f)
    time.sleep(1)
"#;

/// Whose evidence counts, and a moved cable seen in seconds, on one switch that is
/// both an Open vSwitch learning MACs and an lldpd speaking LLDP on its ports:
///
/// - a Provisioned tenant host sends frames whose source is another Server's MAC,
///   and LLDP naming it: that Server (declared on a port that sees nothing) stays
///   NotSeen — never `CablingMismatch`, its port never parked, no Warning — and the
///   sightings are reported as a tenant's; under Strict it is parked as NotSeen, not
///   as a mismatch;
/// - a Provisioned host's cable moves to another port: reported within seconds,
///   although Open vSwitch keeps its MAC learned on the old port (aging left at its
///   300 s), and that old entry is marked stale once the new one is younger.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_cannot_park_another_host_and_a_moved_cable_is_seen_in_seconds() {
    let ovs = patchbay_testbed::OvsSim::start(&["br0"]).expect("Open vSwitch starts");
    let hosts = support::netns::Hosts::create(&ovs, "br0", 3);
    let (t, v, m) = (0, 1, 2);
    // Each host's MAC, as cabled now (a new cable later keeps it).
    let macs: Vec<String> = (0..3).map(|i| hosts.mac(i)).collect();
    let mac = |i: usize| macs[i].clone();
    // The victim's host is off: its link down, nothing of it learned.
    support::netns::Hosts::set_link(&ovs, &hosts.ports[v], false);
    ovs.appctl(&["fdb/flush", "br0"]).unwrap();
    // lldpd on the switch side (Open vSwitch's namespace) and on T and M.
    // (Only on the bridge's ports: Open vSwitch's own tap devices are not ports.)
    let ports = format!("{}*", &hosts.ports[0][..hosts.ports[0].len() - 1]);
    let mut fabric =
        LldpFabric::start_in(&ovs.info.netns, "tor", &ports).expect("lldpd on the switch");
    fabric
        .speak(&hosts.namespaces[t], "tenant-t", &mac(t), &hosts.ports[t])
        .unwrap();
    let m_lldp = fabric
        .speak(&hosts.namespaces[m], "mover-m", &mac(m), &hosts.ports[m])
        .unwrap();

    let env = Env::start("cabling-trust").await;
    let ns = env.cluster.namespace.clone();
    env.lldp_source(&fabric, "tor-lldp").await;
    env.ovs_provider(&ovs, "tor").await;
    env.create::<Switch>(json!({
        "apiVersion": "patchbay.dev/v1alpha1", "kind": "Switch",
        "metadata": {"name": "tor"},
        "spec": {"provider": {"name": "tor"},
                 "ports": {"tor-t": {"name": hosts.ports[t]}, "tor-v": {"name": hosts.ports[v]},
                           "tor-m": {"name": hosts.ports[m]}},
                 "neighbors": {"providers": [{"name": "tor"}, {"name": "tor-lldp"}],
                               "intervalSeconds": 5, "parkingConfiguration": "quarantine"}}
    }))
    .await;
    env.configuration("provisioning", json!({"untaggedVLAN": 10}))
        .await;
    env.configuration("tenant", json!({"untaggedVLAN": 20}))
        .await;
    env.configuration("quarantine", json!({"untaggedVLAN": 999}))
        .await;
    let (st, sv, sm) = (format!("{ns}-t"), format!("{ns}-v"), format!("{ns}-m"));
    server(&env, &st, &mac(t), "tor-t").await;
    server(&env, &sm, &mac(m), "tor-m").await;
    server_at(&env, "elsewhere", &sv, &mac(v), "tor-v").await;
    // M keeps talking to T (its frames keep its MAC learned, fresh).
    let pinger = Started(
        std::process::Command::new("ip")
            .args([
                "netns",
                "exec",
                &hosts.namespaces[m],
                "ping",
                "-q",
                "-i",
                "0.2",
            ])
            .arg(hosts.ip(t))
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    // T and M: allocated to a claim and installed, on the tenant's VLAN, verified.
    claim_and_install(&env, &[&st, &sm]).await;
    for s in [&st, &sm] {
        wait_server(&env, s, "Provisioned and verified", |s| {
            s.status.as_ref().and_then(|s| s.phase) == Some(ServerPhase::Provisioned)
                && s.status.as_ref().and_then(|s| s.ports_ready.as_deref()) == Some("1/1")
                && cabling(s).is_some_and(|(t, r, _)| t == "True" && r == "Verified")
        })
        .await;
    }
    let tag = |p: usize| ovs.vsctl(&["get", "Port", &hosts.ports[p], "tag"]).unwrap();
    // V's host is off: nothing seen, its port moves onto the provisioning network.
    wait_server(&env, &sv, "V not seen, ready", |s| {
        cabling(s).is_some_and(|(_, r, _)| r == "NotSeen")
            && s.status.as_ref().and_then(|s| s.ports_ready.as_deref()) == Some("1/1")
    })
    .await;
    assert_eq!(tag(v), "10");

    // T sends frames with V's MAC, and LLDP naming V: the switch sees both on T's port.
    let frames = python_in(&hosts.namespaces[t], SPOOF_FRAMES, &[&mac(v), "60"]);
    let lldp = python_in(&hosts.namespaces[t], SPOOF_LLDP, &[&mac(v), "60"]);
    env.wait_obj::<Switch>("tor", "V's MAC and LLDP seen on T's port", |sw| {
        status(sw).neighbors.iter().any(|p| {
            p.port == hosts.ports[t]
                && p.macs.contains(&mac(v))
                && p.lldp.iter().any(|n| n.port_id == mac(v))
        })
    })
    .await;
    // Several reads later: V still NotSeen, its port where it was, no Warning.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let victim = wait_server(&env, &sv, "V still NotSeen", |s| {
        cabling(s).is_some_and(|(_, r, m)| r == "NotSeen" && m.contains("which is allocated"))
    })
    .await;
    let (_, _, message) = cabling(&victim).unwrap();
    assert!(
        message.contains(&format!(
            "the NIC is seen on Switch {ns}/tor port {} (SwitchPort tor-t) (a port of \
             Server/{st}, which is allocated: a tenant's OS may send any MAC or LLDP, so this \
             is not taken as evidence)",
            hosts.ports[t]
        )),
        "{message}"
    );
    assert_eq!(tag(v), "10", "V's port is not parked");
    let events = Api::<k8s_openapi::api::events::v1::Event>::namespaced(
        env.cluster.client.clone(),
        "default",
    );
    let mismatches = support::events_about(&events, &sv)
        .await
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("CablingMismatch"))
        .count();
    assert_eq!(mismatches, 0, "no CablingMismatch Warning on V");
    // Under Strict: a host that is not seen is parked — as not seen, not as a
    // mismatch the tenant made up.
    Api::<Server>::all(env.cluster.client.clone())
        .patch(
            &sv,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"cablingPolicy": "Strict"}})),
        )
        .await
        .unwrap();
    support::eventually(30, "V parked under Strict", || async {
        (tag(v) == "999").then_some(())
    })
    .await;
    let victim = wait_server(&env, &sv, "V NotSeen under Strict", |s| {
        cabling(s).is_some_and(|(_, r, _)| r == "NotSeen")
    })
    .await;
    assert!(cabling(&victim).unwrap().2.contains("which is allocated"));
    drop((frames, lldp));

    // M's cable moves to a new port while M runs (and keeps sending): its old port
    // loses carrier, Open vSwitch keeps its MAC learned there.
    let unplugged = format!("{}u", hosts.namespaces[m]);
    let run = |args: &[&str]| {
        let ok = std::process::Command::new(args[0])
            .args(&args[1..])
            .status()
            .unwrap()
            .success();
        assert!(ok, "{args:?}");
    };
    let new_port = format!("{}n", hosts.ports[m]);
    run(&["ip", "netns", "add", &unplugged]);
    let moved_at = Instant::now();
    run(&[
        "ip",
        "-n",
        &hosts.namespaces[m],
        "link",
        "set",
        "eth0",
        "netns",
        &unplugged,
    ]);
    run(&[
        "ip",
        "-n",
        &ovs.info.netns,
        "link",
        "add",
        &new_port,
        "type",
        "veth",
        "peer",
        "name",
        "eth0",
        "netns",
        &hosts.namespaces[m],
    ]);
    run(&[
        "ip",
        "-n",
        &hosts.namespaces[m],
        "link",
        "set",
        "eth0",
        "address",
        &mac(m),
    ]);
    run(&[
        "ip",
        "-n",
        &hosts.namespaces[m],
        "link",
        "set",
        "eth0",
        "up",
    ]);
    run(&["ip", "-n", &ovs.info.netns, "link", "set", &new_port, "up"]);
    ovs.vsctl(&["add-port", "br0", &new_port]).unwrap();
    fabric.recabled(m_lldp, &new_port).unwrap();
    let fdb = ovs.appctl(&["fdb/show", "br0"]).unwrap();
    let mover = wait_server(&env, &sm, "M's moved cable reported", |s| {
        cabling(s).is_some_and(|(t, _, m)| t == "False" && m.contains("its LLDP is seen on"))
    })
    .await;
    let took = moved_at.elapsed();
    println!("moved cable reported after {took:?}");
    assert!(
        took < Duration::from_secs(60),
        "reported after {took:?}, not at Open vSwitch's MAC aging"
    );
    let (_, _, message) = cabling(&mover).unwrap();
    assert!(
        message.contains(&format!(
            "its LLDP is seen on Switch {ns}/tor port {new_port}"
        )) && message.contains("(cablingPolicy Permissive)"),
        "{message}\n{fdb}"
    );
    assert_eq!(tag(m), "20", "a running host's port is left as it is");
    // The old entry, older than the new one by more than STALE_AFTER, is stale.
    env.wait_obj::<Switch>("tor", "M's old entry stale", |sw| {
        status(sw).neighbors.iter().any(|p| {
            p.port == hosts.ports[m] && p.stale_macs.contains(&mac(m)) && !p.macs.contains(&mac(m))
        })
    })
    .await;
    drop(pinger);
    let _ = std::process::Command::new("ip")
        .args(["netns", "del", &unplugged])
        .status();
    env.cluster.finish().await;
}

//! Ports follow their host, end to end: the operator on devplane (or the cluster
//! `PATCHBAY_E2E_CLUSTER=kubeconfig` points at) moves Servers through their phases
//! and their NICs' ports with them; at each phase the ports are read back from the
//! devices themselves — a simulated Cisco over SSH and a real Open vSwitch over
//! OVSDB — and must carry exactly what the phase says. A second test plays Metal3's
//! host controller against the pause annotation.

mod support;

#[path = "support/ssh_cases.rs"]
mod ssh_cases;

use std::time::Duration;

use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use patchbay::api::{Server, ServerClaim, ServerPhase, SmartNicConfiguration, SmartNicPort};
use patchbay_providers::{Device as _, VlanMode};
use patchbay_testbed::{FakeSwitches, OvsSim, SimSpec, SimSwitch};
use serde_json::json;
use ssh_cases::{backend, port, vlan};
use support::env::{Env, find_condition};
use support::{Cluster, eventually, on_devplane};

const BRIDGE: &str = "br-snic";

/// The test's objects: Servers are cluster-scoped, so they are named after the
/// namespace.
struct Rig {
    env: Env,
}

impl Rig {
    fn ns(&self) -> &str {
        &self.env.cluster.namespace
    }

    fn name(&self, short: &str) -> String {
        format!("{}-{short}", self.ns())
    }

    fn servers(&self) -> Api<Server> {
        Api::all(self.env.cluster.client.clone())
    }

    async fn server(&self, short: &str, n: u8, nics: serde_json::Value) {
        let server: Server = serde_json::from_value(json!({
            "apiVersion": "patchbay.dev/v1alpha1", "kind": "Server",
            "metadata": {"name": self.name(short)},
            "spec": {
                "bmc": {"address": format!("10.0.0.{n}"),
                        "credentialsSecretRef": {"name": "bmc", "namespace": self.ns()}},
                "bootMac": format!("aa:bb:cc:00:01:{n:02x}"),
                "site": self.ns(),
                "hostAddress": format!("192.168.20.{n}"),
                "nics": nics,
            }
        }))
        .unwrap();
        self.servers()
            .create(&PostParams::default(), &server)
            .await
            .unwrap();
    }

    async fn annotate(&self, short: &str, value: Option<&str>) {
        self.servers()
            .patch(
                &self.name(short),
                &PatchParams::default(),
                &Patch::Merge(
                    json!({"metadata": {"annotations": {"patchbay.dev/provisioned": value}}}),
                ),
            )
            .await
            .unwrap();
    }

    async fn wait_server(
        &self,
        short: &str,
        what: &str,
        check: impl Fn(&Server) -> bool,
    ) -> Server {
        let api = self.servers();
        let name = self.name(short);
        eventually(60, &format!("{short}: {what}"), || async {
            let s = api.get_opt(&name).await.ok()??;
            check(&s).then_some(s)
        })
        .await
    }

    /// Waits for `phase` with every port ready.
    async fn settled_in(&self, short: &str, phase: ServerPhase) -> Server {
        self.wait_server(short, &format!("{phase}, ports ready"), |s| {
            let st = s.status.as_ref();
            st.and_then(|st| st.phase) == Some(phase)
                && st.is_some_and(|st| {
                    find_condition(&st.conditions, "PortsReady").is_some_and(|c| c.0 == "True")
                })
        })
        .await
    }

    async fn claim_condition(&self, name: &str, type_: &str, truth: &str) -> ServerClaim {
        self.env
            .wait_obj::<ServerClaim>(name, &format!("{name} {type_}={truth}"), |c| {
                c.status.as_ref().is_some_and(|s| {
                    s.observed_generation == c.metadata.generation
                        && find_condition(&s.conditions, type_).is_some_and(|(t, _, _)| t == truth)
                })
            })
            .await
    }
}

fn condition(s: &Server, type_: &str) -> (String, String, String) {
    s.status
        .as_ref()
        .and_then(|st| find_condition(&st.conditions, type_))
        .unwrap_or_default()
}

/// The VLANs a Cisco port carries, read from the simulator.
async fn cisco(sim: &SimSwitch, p: &str) -> Option<VlanMode> {
    backend("ios", sim).get_port(&port(p)).await.ok()?.vlans
}

fn access(n: u16) -> Option<VlanMode> {
    Some(VlanMode::Access { vlan: vlan(n) })
}

/// The OVS port's tag (`[]` when clean), read with ovs-vsctl.
fn ovs_tag(ovs: &OvsSim, p: &str) -> String {
    ovs.vsctl(&["get", "Port", p, "tag"]).unwrap()
}

async fn expect_cisco(sim: &SimSwitch, p: &str, want: Option<VlanMode>, what: &str) {
    eventually(30, &format!("{p} to carry {what}"), || async {
        (cisco(sim, p).await == want).then_some(())
    })
    .await;
}

async fn rig(test: &str, sim: &SimSwitch, ovs: &OvsSim) -> Rig {
    let env = Env::start(test).await;
    let ns = env.cluster.namespace.clone();
    env.switch(
        "tor1",
        "ios",
        sim,
        &sim.host_key_fingerprint,
        &[
            ("tor1-p1", "FastEthernet0/1"),
            ("tor1-p2", "FastEthernet0/2"),
            ("tor1-p3", "FastEthernet0/3"),
        ],
    )
    .await;
    env.create::<patchbay::api::ProviderSwitch>(json!({
        "apiVersion": "patchbay.dev/v1alpha1", "kind": "ProviderSwitch",
        "metadata": {"name": "snic"},
        "spec": {"backend": "ovsdb", "os": "ovs", "address": "127.0.0.1",
                 "port": ovs.info.ovsdb_port, "options": {"bridge": BRIDGE}}
    }))
    .await;
    env.create::<SmartNicPort>(json!({
        "apiVersion": "patchbay.dev/v1alpha1", "kind": "SmartNicPort",
        "metadata": {"name": "snic-b"},
        "spec": {"provider": {"name": "snic"}, "portName": "snic-b"}
    }))
    .await;
    env.configuration(
        "pxe",
        json!({"untaggedVLAN": 10, "description": "provisioning"}),
    )
    .await;
    env.configuration("infra-default", json!({"untaggedVLAN": 50}))
        .await;
    env.configuration("tenant-web", json!({"untaggedVLAN": 100}))
        .await;
    env.configuration("tenant-web-2", json!({"untaggedVLAN": 101}))
        .await;
    env.create::<SmartNicConfiguration>(json!({
        "apiVersion": "patchbay.dev/v1alpha1", "kind": "SmartNicConfiguration",
        "metadata": {"name": "tenant-snic"}, "spec": {"untaggedVLAN": 300}
    }))
    .await;
    let secret: k8s_openapi::api::core::v1::Secret = serde_json::from_value(json!({
        "metadata": {"name": "bmc", "namespace": ns},
        "stringData": {"username": "admin", "password": "bmc-pw"}
    }))
    .unwrap();
    env.api::<k8s_openapi::api::core::v1::Secret>()
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    Rig { env }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ports_follow_two_servers_through_every_phase_on_a_cisco_and_an_open_vswitch() {
    let mut sims = FakeSwitches::start(&[SimSpec::new("tor1", "cisco_generic")]).unwrap();
    let sim = sims.get("tor1").clone();
    let ovs = OvsSim::start(&[BRIDGE]).expect("Open vSwitch starts");
    ovs.vsctl(&[
        "add-port",
        BRIDGE,
        "snic-b",
        "--",
        "set",
        "Interface",
        "snic-b",
        "type=internal",
    ])
    .unwrap();
    let rig = rig("hosts-phases", &sim, &ovs).await;
    let ns = rig.ns().to_owned();
    // srv-a: eth0 (PXE) on tor1-p1, eth1 on tor1-p2 with the infra team's default;
    // srv-b: eth0 (PXE) on tor1-p3, eth1 a SmartNIC on the OVS port snic-b.
    rig.server(
        "a",
        1,
        json!([
            {"name": "eth0", "port": {"name": "tor1-p1", "namespace": ns},
             "provisioningConfiguration": {"name": "pxe"}},
            {"name": "eth1", "port": {"name": "tor1-p2", "namespace": ns},
             "configuration": {"name": "infra-default"}},
        ]),
    )
    .await;
    rig.server(
        "b",
        2,
        json!([
            {"name": "eth0", "port": {"name": "tor1-p3", "namespace": ns},
             "provisioningConfiguration": {"name": "pxe"}},
            {"name": "eth1", "port": {"kind": "SmartNicPort", "name": "snic-b", "namespace": ns}},
        ]),
    )
    .await;

    // 1. Available: the provisioning network is there before anything else.
    for s in ["a", "b"] {
        rig.settled_in(s, ServerPhase::Available).await;
    }
    assert_eq!(cisco(&sim, "FastEthernet0/1").await, access(10));
    assert_eq!(
        cisco(&sim, "FastEthernet0/2").await,
        Some(VlanMode::Unconfigured)
    );
    assert_eq!(cisco(&sim, "FastEthernet0/3").await, access(10));
    assert_eq!(ovs_tag(&ovs, "snic-b"), "[]");
    let p1 = rig
        .env
        .api::<patchbay::api::SwitchPort>()
        .get("tor1-p1")
        .await
        .unwrap();
    assert_eq!(
        p1.metadata.annotations.unwrap().get("patchbay.dev/host"),
        Some(&rig.name("a")).map(|n| format!("Server/{n}")).as_ref(),
        "the port carries its host's mark"
    );

    // 2. A claim binds both: Provisioning, the tenant network not plugged in yet.
    let claim: ServerClaim = serde_json::from_value(json!({
        "apiVersion": "patchbay.dev/v1alpha1", "kind": "ServerClaim",
        "metadata": {"name": "web", "namespace": ns},
        "spec": {"site": ns,
            "networkConfiguration": [{"configurationRef":
                {"kind": "SwitchPortConfiguration", "name": "tenant-web"},
                "nicHint": {"name": "eth0"}}],
            "roles": [
                {"name": "web", "count": 1,
                 "requirements": {"macAddresses": ["aa:bb:cc:00:01:01"]}},
                {"name": "edge", "count": 1,
                 "networkConfiguration": [{"configurationRef":
                    {"kind": "SmartNicConfiguration", "name": "tenant-snic"},
                    "nicHint": {"smartNIC": true}}]}]}
    }))
    .unwrap();
    rig.env
        .api::<ServerClaim>()
        .create(&PostParams::default(), &claim)
        .await
        .unwrap();
    for s in ["a", "b"] {
        let srv = rig
            .wait_server(s, "Provisioning, waiting for the installer", |s| {
                s.status.as_ref().and_then(|st| st.phase) == Some(ServerPhase::Provisioning)
                    && condition(s, "Held").1 == "WaitingForInstaller"
            })
            .await;
        assert_eq!(condition(&srv, "PortsReady").0, "True");
    }
    let c = rig.claim_condition("web", "Ready", "False").await;
    let (_, _, message) = find_condition(&c.status.unwrap().conditions, "Ready").unwrap();
    assert!(message.contains("Provisioning"), "{message}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        cisco(&sim, "FastEthernet0/1").await,
        access(10),
        "no tenant before installed"
    );

    // 3. The switch breaks during Provisioning: the host is held, naming the port,
    //    even once the installer says it is installed.
    sims.stop();
    let held = rig
        .wait_server("a", "held by its ports while the switch is down", |s| {
            condition(s, "PortsReady").0 == "False"
        })
        .await;
    rig.annotate("a", Some("true")).await;
    rig.annotate("b", Some("true")).await;
    let (_, reason, message) = condition(&held, "PortsReady");
    assert_eq!(reason, "PortFailed", "{message}");
    assert!(
        message.contains(&format!("SwitchPort {ns}/tor1-p1 (eth0)")),
        "{message}"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    let a = rig.servers().get(&rig.name("a")).await.unwrap();
    assert_eq!(
        a.status.as_ref().unwrap().phase,
        Some(ServerPhase::Provisioning)
    );
    let (truth, _, message) = condition(&a, "Held");
    assert_eq!(truth, "True");
    assert!(message.contains("tor1-p1"), "{message}");
    // Back (a fresh, empty device at the same address): the provisioning network is
    // put back first, then the host moves on.
    let sims = FakeSwitches::start(&[SimSpec::again(&sim)]).unwrap();
    let sim = sims.get("tor1").clone();

    // 4. Provisioned: the claim's configurations by nicHint, the NIC's own default
    //    where the claim says nothing, the SmartNIC's bridge port tagged.
    for s in ["a", "b"] {
        rig.settled_in(s, ServerPhase::Provisioned).await;
    }
    assert_eq!(cisco(&sim, "FastEthernet0/1").await, access(100));
    assert_eq!(cisco(&sim, "FastEthernet0/2").await, access(50));
    assert_eq!(cisco(&sim, "FastEthernet0/3").await, access(100));
    assert_eq!(ovs_tag(&ovs, "snic-b"), "300");
    rig.claim_condition("web", "Ready", "True").await;

    // 5. Update: the claim's network edited, every bound Server's ports follow.
    rig.env
        .api::<ServerClaim>()
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"spec": {"networkConfiguration": [{"configurationRef":
                {"kind": "SwitchPortConfiguration", "name": "tenant-web-2"},
                "nicHint": {"name": "eth0"}}]}}),
            ),
        )
        .await
        .unwrap();
    expect_cisco(&sim, "FastEthernet0/1", access(101), "tenant-web-2").await;
    expect_cisco(&sim, "FastEthernet0/3", access(101), "tenant-web-2").await;
    rig.claim_condition("web", "Ready", "True").await;

    // 6. Release: deleting the claim deprovisions its Servers; the claim (and its
    //    inventory) goes only once they are Available with their ports back.
    rig.env
        .api::<ServerClaim>()
        .delete("web", &DeleteParams::default())
        .await
        .unwrap();
    for s in ["a", "b"] {
        let srv = rig.settled_in(s, ServerPhase::Available).await;
        assert!(
            !srv.annotations().contains_key("patchbay.dev/provisioned"),
            "the installer's signal is consumed on release"
        );
    }
    eventually(30, "the claim gone", || async {
        rig.env
            .api::<ServerClaim>()
            .get_opt("web")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    assert_eq!(cisco(&sim, "FastEthernet0/1").await, access(10));
    assert_eq!(
        cisco(&sim, "FastEthernet0/2").await,
        Some(VlanMode::Unconfigured)
    );
    assert_eq!(cisco(&sim, "FastEthernet0/3").await, access(10));
    assert_eq!(ovs_tag(&ovs, "snic-b"), "[]");
    // A port back to clean carries no mark; one on the provisioning network keeps it.
    let ports = rig.env.api::<patchbay::api::SwitchPort>();
    let p2 = ports.get("tor1-p2").await.unwrap();
    assert!(!p2.annotations().contains_key("patchbay.dev/host"));
    let snic = rig.env.api::<SmartNicPort>().get("snic-b").await.unwrap();
    assert!(!snic.annotations().contains_key("patchbay.dev/host"));
    let p1 = ports.get("tor1-p1").await.unwrap();
    assert!(p1.annotations().contains_key("patchbay.dev/host"));
    // The Server's phase changes are Events.
    let events = rig
        .env
        .api::<k8s_openapi::api::events::v1::Event>()
        .list(&Default::default())
        .await
        .unwrap();
    let _ = events;
    rig.env.cluster.finish().await;
}

use kube::ResourceExt;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_port_somebody_else_configured_is_left_alone_and_named() {
    let sims = FakeSwitches::start(&[SimSpec::new("tor1", "cisco_generic")]).unwrap();
    let sim = sims.get("tor1").clone();
    let ovs = OvsSim::start(&[BRIDGE]).expect("Open vSwitch starts");
    let rig = rig("hosts-in-use", &sim, &ovs).await;
    let ns = rig.ns().to_owned();
    // Somebody configured tor1-p1 by hand.
    rig.env.link("tor1-p1", Some("infra-default")).await;
    rig.env
        .wait_state("tor1-p1", patchbay::api::PortState::Active)
        .await;
    rig.server(
        "c",
        3,
        json!([
            {"name": "eth0", "port": {"name": "tor1-p1", "namespace": ns},
             "provisioningConfiguration": {"name": "pxe"}},
            {"name": "eth1", "port": {"name": "tor1-p2", "namespace": ns},
             "provisioningConfiguration": {"name": "pxe"}},
        ]),
    )
    .await;
    let c = rig
        .wait_server("c", "PortInUse", |s| condition(s, "PortInUse").0 == "True")
        .await;
    let (_, _, message) = condition(&c, "PortInUse");
    assert!(
        message.contains(&format!(
            "SwitchPort {ns}/tor1-p1 (eth0): carries infra-default, set by someone else"
        )),
        "{message}"
    );
    // The other port is driven; the one in use is untouched on the device.
    expect_cisco(&sim, "FastEthernet0/2", access(10), "pxe").await;
    assert_eq!(cisco(&sim, "FastEthernet0/1").await, access(50));
    let p1 = rig
        .env
        .api::<patchbay::api::SwitchPort>()
        .get("tor1-p1")
        .await
        .unwrap();
    assert!(!p1.annotations().contains_key("patchbay.dev/host"));
    // The owner lets it go: the host takes it.
    rig.env.link("tor1-p1", None).await;
    rig.settled_in("c", ServerPhase::Available).await;
    assert_eq!(cisco(&sim, "FastEthernet0/1").await, access(10));
    // Deleting the Server cleans and releases every port before it goes.
    rig.servers()
        .delete(&rig.name("c"), &DeleteParams::default())
        .await
        .unwrap();
    eventually(30, "the Server gone", || async {
        rig.servers()
            .get_opt(&rig.name("c"))
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    assert_eq!(
        cisco(&sim, "FastEthernet0/1").await,
        Some(VlanMode::Unconfigured)
    );
    assert_eq!(
        cisco(&sim, "FastEthernet0/2").await,
        Some(VlanMode::Unconfigured)
    );
    let p1 = rig
        .env
        .api::<patchbay::api::SwitchPort>()
        .get("tor1-p1")
        .await
        .unwrap();
    assert!(!p1.annotations().contains_key("patchbay.dev/host"));
    let _ = on_devplane;
    let _ = Cluster::start;
    rig.env.cluster.finish().await;
}

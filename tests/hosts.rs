//! Ports follow their host, end to end: the operator on devplane (or the cluster
//! `PATCHBAY_E2E_CLUSTER=kubeconfig` points at) moves Servers through their phases
//! and their NICs' ports with them; at each phase the ports are read back from the
//! devices themselves — a simulated Cisco over SSH and a real Open vSwitch over
//! OVSDB — and must carry exactly what the phase says. A second test plays Metal3's
//! host controller against the pause annotation.

mod support;

#[path = "../providers/tests/support/ssh_cases.rs"]
mod ssh_cases;

use std::time::Duration;

use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use patchbay::api::{Server, ServerClaim, ServerPhase, SmartNicConfiguration, SmartNicPort};
use patchbay_providers::VlanMode;
use patchbay_testbed::{FakeSwitches, OvsSim, SimSpec, SimSwitch};
use serde_json::json;
use ssh_cases::access;
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

    /// The SwitchPort `name` of the test's namespace, as the API server has it.
    async fn switch_port(&self, name: &str) -> patchbay::api::SwitchPort {
        self.env
            .api::<patchbay::api::SwitchPort>()
            .get(name)
            .await
            .unwrap()
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

    /// Server `short` with one NIC, eth0 on tor1-p1 (provisioned with pxe), linked to
    /// the BareMetalHost bmh-m.
    async fn linked_server(&self, short: &str, n: u8) {
        let ns = self.ns();
        self.server(
            short,
            n,
            json!([{"name": "eth0", "mac": format!("aa:bb:cc:00:01:{n:02x}"),
                    "port": {"name": "tor1-p1", "namespace": ns},
                    "provisioningConfiguration": {"name": "pxe"}}]),
        )
        .await;
        self.servers()
            .patch(
                &self.name(short),
                &PatchParams::default(),
                &Patch::Merge(
                    json!({"spec": {"bareMetalHostRef": {"name": "bmh-m", "namespace": ns}}}),
                ),
            )
            .await
            .unwrap();
    }

    /// Claim `name` of one worker on tenant-web, once it is allocated.
    async fn claim_one_worker(&self, name: &str) {
        let claim: ServerClaim = serde_json::from_value(json!({
            "apiVersion": "patchbay.dev/v1alpha1", "kind": "ServerClaim",
            "metadata": {"name": name, "namespace": self.ns()},
            "spec": {"site": self.ns(), "roles": [{"name": "worker", "count": 1}],
                "networkConfiguration": [{"configurationRef":
                    {"kind": "SwitchPortConfiguration", "name": "tenant-web"}}]}
        }))
        .unwrap();
        self.env
            .api::<ServerClaim>()
            .create(&PostParams::default(), &claim)
            .await
            .unwrap();
        self.claim_condition(name, "Allocated", "True").await;
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
    ssh_cases::cisco_vlans(sim, p).await
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
    rig_on(Cluster::start(test).await, sim, Some(ovs)).await
}

/// The rig on a cluster the test prepared (a BareMetalHost CRD, say): tor1 with
/// three ports, the SmartNIC when `ovs` is given, the configurations.
async fn rig_on(cluster: Cluster, sim: &SimSwitch, ovs: Option<&OvsSim>) -> Rig {
    let env = Env::start_on(cluster, |_| {}).await;
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
    if let Some(ovs) = ovs {
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
    }
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
    let p1 = rig.switch_port("tor1-p1").await;
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
    // Each phase change is an Event on the Server.
    // (A cluster-scoped object's Events are in `default`.)
    let events = Api::<k8s_openapi::api::events::v1::Event>::namespaced(
        rig.env.cluster.client.clone(),
        "default",
    );
    let changes: Vec<String> = support::events_about(&events, &rig.name("a"))
        .await
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("PhaseChanged"))
        .filter_map(|e| e.note)
        .collect();
    assert_eq!(
        changes,
        [
            "Available → Provisioning",
            "Provisioning → Provisioned",
            "Provisioned → Deprovisioning",
            "Deprovisioning → Available"
        ],
        "{changes:?}"
    );
    rig.env.cluster.finish().await;
}

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
    let p1 = rig.switch_port("tor1-p1").await;
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
    let p1 = rig.switch_port("tor1-p1").await;
    assert!(!p1.annotations().contains_key("patchbay.dev/host"));
    rig.env.cluster.finish().await;
}

/// A provisioning configuration carries no link-aggregation group (PXE boots over
/// the individual links): a NIC provisioned with one is refused by name, its port left
/// as it is on the device, the host's other ports driven; once the group is taken out
/// of the configuration, the host goes on at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provisioning_configuration_with_a_link_aggregation_group_is_refused() {
    let sims = FakeSwitches::start(&[SimSpec::new("tor1", "cisco_generic")]).unwrap();
    let sim = sims.get("tor1").clone();
    let rig = rig_on(Cluster::start("hosts-pxe-lag").await, &sim, None).await;
    let ns = rig.ns().to_owned();
    rig.env
        .configuration(
            "pxe-lag",
            json!({"untaggedVLAN": 10, "linkAggregation": {"group": 7}}),
        )
        .await;
    rig.server(
        "d",
        4,
        json!([
            {"name": "eth0", "port": {"name": "tor1-p1", "namespace": ns},
             "provisioningConfiguration": {"name": "pxe-lag"}},
            {"name": "eth1", "port": {"name": "tor1-p2", "namespace": ns},
             "provisioningConfiguration": {"name": "pxe"}},
        ]),
    )
    .await;
    let d = rig
        .wait_server("d", "ConfigurationRefused", |s| {
            condition(s, "PortsReady").1 == "ConfigurationRefused"
        })
        .await;
    let (truth, _, message) = condition(&d, "PortsReady");
    assert_eq!(truth, "False");
    assert!(
        message.contains(
            "spec.nics[0].provisioningConfiguration: SwitchPortConfiguration pxe-lag sets \
             linkAggregation (group 7); a provisioning configuration carries no \
             link-aggregation group"
        ),
        "{message}"
    );
    // The other NIC's port is driven; the refused one is not touched at all.
    expect_cisco(&sim, "FastEthernet0/2", access(10), "pxe").await;
    rig.env
        .wait_state("tor1-p2", patchbay::api::PortState::Active)
        .await;
    let p1 = rig.switch_port("tor1-p1").await;
    assert!(p1.spec.configuration.is_none(), "{:?}", p1.spec);
    assert!(!p1.annotations().contains_key("patchbay.dev/host"));
    assert_eq!(
        cisco(&sim, "FastEthernet0/1").await,
        Some(VlanMode::Unconfigured)
    );
    assert_eq!(
        rig.servers()
            .get(&rig.name("d"))
            .await
            .unwrap()
            .status
            .and_then(|s| s.phase),
        Some(ServerPhase::Available)
    );
    // The group taken out of the configuration: the host goes on.
    rig.env
        .api::<patchbay::api::SwitchPortConfiguration>()
        .patch(
            "pxe-lag",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"linkAggregation": null}})),
        )
        .await
        .unwrap();
    rig.settled_in("d", ServerPhase::Available).await;
    assert_eq!(cisco(&sim, "FastEthernet0/1").await, access(10));
    rig.env.cluster.finish().await;
}

const PAUSED: &str = "baremetalhost.metal3.io/paused";

/// The test playing Metal3's baremetal-operator for one host.
struct Bmo<'a> {
    rig: &'a Rig,
    host: &'a str,
}

impl Bmo<'_> {
    fn api(&self) -> Api<BareMetalHost> {
        self.rig.env.api()
    }

    /// Creates the host with `spec`, as the infra team would; returns what was sent.
    async fn create(&self, spec: serde_json::Value) -> BareMetalHost {
        let host: BareMetalHost = serde_json::from_value(json!({
            "apiVersion": "metal3.io/v1alpha1", "kind": "BareMetalHost",
            "metadata": {"name": self.host, "namespace": self.rig.ns()},
            "spec": spec
        }))
        .unwrap();
        self.api()
            .create(&PostParams::default(), &host)
            .await
            .unwrap();
        host
    }

    async fn get(&self) -> BareMetalHost {
        self.api().get(self.host).await.unwrap()
    }

    fn paused(h: &BareMetalHost) -> Option<String> {
        h.annotations().get(PAUSED).cloned()
    }

    /// Sets `status.provisioning.state` as BMO would, which it does only while the
    /// host is not paused: waits for the pause to go first.
    async fn step(&self, state: &str) {
        eventually(
            60,
            &format!("{} unpaused, to go {state}", self.host),
            || async { Self::paused(&self.get().await).is_none().then_some(()) },
        )
        .await;
        self.force(state).await;
    }

    /// Sets the state whatever the pause says (BMO had started before it).
    async fn force(&self, state: &str) {
        self.api()
            .patch_status(
                self.host,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"provisioning": {"state": state}}})),
            )
            .await
            .unwrap();
    }

    async fn annotate(&self, key: &str, value: Option<&str>) {
        self.api()
            .patch(
                self.host,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": {key: value}}})),
            )
            .await
            .unwrap();
    }

    async fn wait_paused(&self, value: Option<&str>) -> BareMetalHost {
        eventually(60, &format!("{} paused={value:?}", self.host), || async {
            let h = self.get().await;
            (Self::paused(&h).as_deref() == value).then_some(h)
        })
        .await
    }

    /// The reasons of the Events on the host, in order.
    async fn events(&self) -> Vec<String> {
        support::events_about(&self.rig.env.api(), self.host)
            .await
            .into_iter()
            .filter_map(|e| e.reason)
            .collect()
    }
}

use patchbay::api::metal3::BareMetalHost;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_baremetalhost_is_held_until_its_ports_carry_the_provisioning_network() {
    if !on_devplane() {
        return; // the test plays Metal3; on a real cluster Metal3 plays itself
    }
    let mut sims = FakeSwitches::start(&[SimSpec::new("tor1", "cisco_generic")]).unwrap();
    let sim = sims.get("tor1").clone();
    sims.stop(); // the switch is down when the host appears
    let cluster = Cluster::start("hosts-metal3").await;
    cluster
        .install_crd(support::bare_metal_host_crd(false))
        .await;
    let rig = rig_on(cluster, &sim, None).await;
    rig.linked_server("m", 7).await;
    // The host appears, with seed 003's spec.ports, which the upstream CRD prunes.
    let bmo = Bmo {
        rig: &rig,
        host: "bmh-m",
    };
    bmo.create(json!({"bootMACAddress": "aa:bb:cc:00:01:07",
                      "ports": [{"name": "eth0", "port": {"name": "tor1-p2"}}]}))
        .await;
    assert_eq!(bmo.get().await.spec.ports, None, "pruned by the API server");

    // Held from the moment it appears, while its port cannot carry the
    // provisioning network; the Server says so.
    bmo.wait_paused(Some("patchbay.dev/waiting-for-ports"))
        .await;
    let m = rig
        .wait_server("m", "HostPaused", |s| {
            condition(s, "HostPaused").1 == "PausedByPatchbay"
        })
        .await;
    assert_eq!(
        m.status.as_ref().unwrap().phase,
        Some(ServerPhase::Available)
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(Bmo::paused(&bmo.get().await).is_some(), "still held");

    // The switch back: the port carries the provisioning network, the pause goes,
    // and BMO registers and inspects the host on that network.
    let mut sims = FakeSwitches::start(&[SimSpec::again(&sim)]).unwrap();
    let sim = sims.get("tor1").clone();
    for state in ["registering", "inspecting", "available"] {
        bmo.step(state).await;
        assert_eq!(cisco(&sim, "FastEthernet0/1").await, access(10), "{state}");
    }
    assert_eq!(bmo.events().await, ["PortsHold", "PortsRelease"]);

    // Claimed and provisioned by Metal3: the tenant network only once provisioned.
    rig.claim_one_worker("metal").await;
    bmo.step("provisioning").await;
    rig.settled_in("m", ServerPhase::Provisioning).await;
    assert_eq!(cisco(&sim, "FastEthernet0/1").await, access(10));
    bmo.step("provisioned").await;
    rig.settled_in("m", ServerPhase::Provisioned).await;
    assert_eq!(cisco(&sim, "FastEthernet0/1").await, access(100));
    rig.claim_condition("metal", "Ready", "True").await;

    // CAPM3 pauses the host with its own value, and BMO had already started
    // deprovisioning with the switch down: patchbay would hold the host, but
    // leaves somebody else's pause alone and says so.
    sims.stop();
    bmo.annotate(PAUSED, Some("metal3.io/capm3")).await;
    bmo.force("deprovisioning").await;
    rig.wait_server("m", "PausedByOther", |s| {
        condition(s, "HostPaused").1 == "PausedByOther"
            && s.status.as_ref().and_then(|st| st.phase) == Some(ServerPhase::Deprovisioning)
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        Bmo::paused(&bmo.get().await).as_deref(),
        Some("metal3.io/capm3"),
        "a foreign pause is never overwritten"
    );
    // CAPM3 lets go: the port is still not back, so patchbay holds the host (best
    // effort: BMO's deprovisioning had started), until the switch answers again.
    bmo.annotate(PAUSED, None).await;
    bmo.wait_paused(Some("patchbay.dev/waiting-for-ports"))
        .await;
    let sims = FakeSwitches::start(&[SimSpec::again(&sim)]).unwrap();
    let sim = sims.get("tor1").clone();
    bmo.step("available").await;
    rig.settled_in("m", ServerPhase::Available).await;
    assert_eq!(cisco(&sim, "FastEthernet0/1").await, access(10));
    rig.env.cluster.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_baremetalhost_with_its_own_ports_is_followed_like_a_server() {
    if !on_devplane() {
        return; // needs a BareMetalHost CRD with seed 003's spec.ports
    }
    let sims = FakeSwitches::start(&[SimSpec::new("tor1", "cisco_generic")]).unwrap();
    let sim = sims.get("tor1").clone();
    let cluster = Cluster::start("hosts-bmh-ports").await;
    cluster
        .install_crd(support::bare_metal_host_crd(true))
        .await;
    let rig = rig_on(cluster, &sim, None).await;
    let ns = rig.ns().to_owned();
    let bmo = Bmo {
        rig: &rig,
        host: "bmh-p",
    };
    bmo.create(json!({"bootMACAddress": "aa:bb:cc:00:01:09",
                      "ports": [{"mac": "aa:bb:cc:00:01:09", "name": "eth0",
                                 "port": {"name": "tor1-p2", "kind": "SwitchPort", "namespace": ns},
                                 "provisioningConfiguration": {"name": "pxe",
                                     "kind": "SwitchPortConfiguration"},
                                 "configuration": {"name": "tenant-web",
                                     "kind": "SwitchPortConfiguration"}}]}))
        .await;
    let phase = |want: &'static str| {
        let bmo = &bmo;
        async move {
            eventually(60, &format!("bmh-p {want}, ports ready"), || async {
                let h = bmo.get().await;
                let a = h.annotations();
                (a.get("patchbay.dev/phase").map(String::as_str) == Some(want)
                    && a.get("patchbay.dev/ports").map(String::as_str) == Some("1/1"))
                .then_some(())
            })
            .await
        }
    };
    phase("Available").await;
    bmo.step("inspecting").await;
    assert_eq!(cisco(&sim, "FastEthernet0/2").await, access(10));
    bmo.step("provisioning").await;
    phase("Provisioning").await;
    bmo.step("provisioned").await;
    phase("Provisioned").await;
    assert_eq!(cisco(&sim, "FastEthernet0/2").await, access(100));
    bmo.step("deprovisioning").await;
    phase("Deprovisioning").await;
    assert_eq!(cisco(&sim, "FastEthernet0/2").await, access(10));
    bmo.step("available").await;
    phase("Available").await;
    bmo.step("deleting").await;
    phase("Deleting").await;
    expect_cisco(
        &sim,
        "FastEthernet0/2",
        Some(VlanMode::Unconfigured),
        "nothing",
    )
    .await;
    let p2 = rig
        .env
        .api::<patchbay::api::SwitchPort>()
        .get("tor1-p2")
        .await
        .unwrap();
    assert!(!p2.annotations().contains_key("patchbay.dev/host"));
    let changes: Vec<String> = bmo
        .events()
        .await
        .into_iter()
        .filter(|r| r == "PhaseChanged")
        .collect();
    assert_eq!(changes.len(), 5, "{changes:?}");
    rig.env.cluster.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_held_by_a_dead_switch_writes_its_port_once_and_its_status_rarely() {
    let mut sims = FakeSwitches::start(&[SimSpec::new("tor1", "cisco_generic")]).unwrap();
    let sim = sims.get("tor1").clone();
    sims.stop();
    let cluster = Cluster::start("hosts-quiet").await;
    let rig = rig_on(cluster, &sim, None).await;
    let ns = rig.ns().to_owned();
    rig.server(
        "q",
        9,
        json!([{"name": "eth0", "port": {"name": "tor1-p1", "namespace": ns},
                "provisioningConfiguration": {"name": "pxe"}}]),
    )
    .await;
    rig.wait_server("q", "held by its dead switch", |s| {
        condition(s, "PortsReady").1 == "PortFailed"
    })
    .await;
    // Over 10 s of a dead switch (probes back off 0.3 s doubling to 2 s here): the
    // host set its port once, and its status moves only when what it reports does
    // (measured: not once; the bound leaves room for one probe changing the error).
    let ports = rig.env.api::<patchbay::api::SwitchPort>();
    let port_before = ports.get("tor1-p1").await.unwrap();
    let server_before = rig.servers().get(&rig.name("q")).await.unwrap();
    let mut writes = 0;
    let mut last = server_before.resource_version();
    let until = tokio::time::Instant::now() + Duration::from_secs(10);
    while tokio::time::Instant::now() < until {
        let s = rig.servers().get(&rig.name("q")).await.unwrap();
        if s.resource_version() != last {
            writes += 1;
            last = s.resource_version();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let port_after = ports.get("tor1-p1").await.unwrap();
    assert_eq!(
        port_after.metadata.generation, port_before.metadata.generation,
        "the host does not rewrite a port it has set"
    );
    assert_eq!(
        port_after.metadata.generation,
        Some(2),
        "set once: created, then linked"
    );
    assert!(writes <= 2, "{writes} Server status writes in 10 s");
    let s = rig.servers().get(&rig.name("q")).await.unwrap();
    assert_eq!(s.status.unwrap().phase, Some(ServerPhase::Available));
    rig.env.cluster.finish().await;
}

/// Metal3 installed after patchbay, then removed, then back, the operator running
/// throughout: a host created once the CRD is there is watched (its pause appears
/// while its port cannot carry the provisioning network) and followed to
/// Provisioned; when the CRD goes — and with it every BareMetalHost — the Server
/// holds where it is, `Metal3NotInstalled`, and its port keeps the tenant network;
/// back, the host is followed again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metal3_installed_after_patchbay_is_followed_and_its_removal_moves_no_port() {
    if !on_devplane() {
        return; // the test installs and removes Metal3's CRD
    }
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let mut sims = FakeSwitches::start(&[SimSpec::new("tor1", "cisco_generic")]).unwrap();
    let sim = sims.get("tor1").clone();
    let rig = rig_on(Cluster::start("hosts-metal3-late").await, &sim, None).await;
    rig.linked_server("m", 9).await;
    let not_installed = |s: &Server| {
        let (truth, reason, message) = condition(s, "Held");
        truth == "True" && reason == "Metal3NotInstalled" && message.contains("/bmh-m")
    };
    rig.wait_server("m", "Metal3NotInstalled", not_installed)
        .await;

    // Metal3 arrives while the switch is down: the host is read at once and held.
    sims.stop();
    let crds: Api<CustomResourceDefinition> = Api::all(rig.env.cluster.client.clone());
    rig.env
        .cluster
        .install_crd(support::bare_metal_host_crd(false))
        .await;
    let bmo = Bmo {
        rig: &rig,
        host: "bmh-m",
    };
    let host = bmo
        .create(json!({"bootMACAddress": "aa:bb:cc:00:01:09"}))
        .await;
    bmo.wait_paused(Some("patchbay.dev/waiting-for-ports"))
        .await;
    let sims = FakeSwitches::start(&[SimSpec::again(&sim)]).unwrap();
    let sim = sims.get("tor1").clone();
    bmo.step("available").await;
    rig.settled_in("m", ServerPhase::Available).await;
    rig.claim_one_worker("late").await;
    bmo.step("provisioning").await;
    rig.settled_in("m", ServerPhase::Provisioning).await;
    bmo.step("provisioned").await;
    rig.settled_in("m", ServerPhase::Provisioned).await;
    assert_eq!(cisco(&sim, "FastEthernet0/1").await, access(100));

    // Metal3 removed: its hosts go with its CRD. The Server holds, the port keeps
    // the tenant's network.
    crds.delete("baremetalhosts.metal3.io", &DeleteParams::default())
        .await
        .unwrap();
    let held = rig
        .wait_server("m", "Metal3NotInstalled after removal", not_installed)
        .await;
    assert_eq!(
        held.status.as_ref().unwrap().phase,
        Some(ServerPhase::Provisioned)
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(cisco(&sim, "FastEthernet0/1").await, access(100));
    assert_eq!(
        rig.switch_port("tor1-p1")
            .await
            .spec
            .configuration
            .map(|c| c.name),
        Some("tenant-web".into())
    );

    // Back: the host is read again and followed.
    rig.env
        .cluster
        .install_crd(support::bare_metal_host_crd(false))
        .await;
    let mut again = host.clone();
    again.metadata.resource_version = None;
    bmo.api()
        .create(&PostParams::default(), &again)
        .await
        .unwrap();
    // Made again, it has no state until its operator speaks: the provisioned
    // tenant keeps its network meanwhile.
    rig.wait_server("m", "HostStateNotReported", |s| {
        condition(s, "Held").1 == "HostStateNotReported"
    })
    .await;
    assert_eq!(cisco(&sim, "FastEthernet0/1").await, access(100));
    bmo.force("provisioned").await;
    rig.wait_server("m", "followed again", |s| {
        condition(s, "Held").1 == "NotHeld"
            && s.status
                .as_ref()
                .and_then(|st| st.bare_metal_host.as_ref())
                .and_then(|h| h.state.as_deref())
                == Some("provisioned")
    })
    .await;
    assert_eq!(cisco(&sim, "FastEthernet0/1").await, access(100));
    rig.env.cluster.finish().await;
}

//! Metal3's host half (baremetal-operator v0.14.0-rc.0) on the Cisco simulator: a
//! BareMetalHost's `spec.networkInterfaces` drive the port the infra team declared
//! on its BareMetalSwitch through the host's whole life — the provisioning
//! configuration while it is inspected and provisioned, the configuration derived
//! from its HostNetworkAttachment once provisioned, back to provisioning when
//! deprovisioned, clean when deleted — each read back from the device; an interface
//! named by NIC name waits for inspection and is then driven on the port its LLDP
//! names. An interface naming a port nobody declared is refused and nothing is sent
//! to that port; an attachment breaking BMO's webhook rules derives nothing and
//! says why; a tenant's attachment is held to the tenant's grants. A Server that
//! links to a host later takes over the ports it is cabled to. On an Arista EOS
//! simulator with real LLDP beside it, a host's interfaces are found and checked on
//! the wire: a MAC-only interface is discovered, a swapped pair of cables parked.
//! The CRDs are upstream's renditions (`testbed/crds/`, the networkInterfaces
//! schema in `support::bare_metal_host_crd`).

#[path = "../providers/tests/support/ssh_cases.rs"]
mod ssh_cases;
mod support;

use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams, PostParams};
use patchbay::api::metal3::{BareMetalHost, HardwareData};
use patchbay::api::metal3_attachment::HostNetworkAttachment;
use patchbay::api::metal3_switch::BareMetalSwitch;
use patchbay::api::{ConfigurationRef, Switch, SwitchPortConfiguration};
use patchbay_providers::VlanMode;
use patchbay_testbed::{FakeSwitches, SimSpec, SimSwitch};
use serde_json::json;
use ssh_cases::{access, vlan};
use support::env::Env;
use support::{Cluster, eventually, on_devplane};

async fn create<K>(env: &Env, value: serde_json::Value) -> K
where
    K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + serde::Serialize
        + serde::de::DeserializeOwned
        + Clone
        + std::fmt::Debug,
{
    let object: K = serde_json::from_value(value).unwrap();
    env.api::<K>()
        .create(&PostParams::default(), &object)
        .await
        .unwrap()
}

async fn cisco(sim: &SimSwitch, port: &str) -> Option<VlanMode> {
    ssh_cases::cisco_vlans(sim, port).await
}

async fn expect(sim: &SimSwitch, port: &str, want: Option<VlanMode>) {
    eventually(60, &format!("{port} to carry {want:?}"), || async {
        (cisco(sim, port).await == want).then_some(())
    })
    .await;
}

const PAUSED: &str = "baremetalhost.metal3.io/paused";

/// A cluster with Metal3's CRDs (upstream's renditions), the operator with
/// `--metal3-switches` (`tweak` changes more), the provisioning configuration `pxe`
/// (VLAN 10 untagged), and the Cisco `sim` as BareMetalSwitch `tor1` (MAC
/// aa:bb:cc:00:00:01) with `ports` (key, device port) declared on it by Switch
/// `tor1`.
async fn metal3(
    test: &str,
    sim: &SimSwitch,
    ports: &[(&str, &str)],
    tweak: impl FnOnce(&mut patchbay::settings::Settings, &str),
) -> Env {
    let pxe = json!({"untaggedVLAN": 10});
    metal3_on(test, (sim, "netmiko_cisco_ios"), ports, pxe, tweak).await
}

/// [`metal3`] with `sim` of NGS device type `device.1`, and `pxe` as the
/// provisioning configuration's spec.
async fn metal3_on(
    test: &str,
    device: (&SimSwitch, &str),
    ports: &[(&str, &str)],
    pxe: serde_json::Value,
    tweak: impl FnOnce(&mut patchbay::settings::Settings, &str),
) -> Env {
    let (sim, device_type) = device;
    let cluster = Cluster::start(test).await;
    for file in [
        "metal3.io_baremetalswitches.yaml",
        "metal3.io_hostnetworkattachments.yaml",
        "metal3.io_hardwaredata.yaml",
    ] {
        cluster.install_crd(support::rendition(file)).await;
    }
    cluster
        .install_crd(support::bare_metal_host_crd(false))
        .await;
    let ns = cluster.namespace.clone();
    let env = Env::start_on(cluster, |s| {
        s.metal3_switches = true;
        s.metal3_provisioning = Some(ConfigurationRef {
            name: "pxe".into(),
            namespace: Some(ns.clone()),
        });
        tweak(s, &ns);
    })
    .await;
    env.configuration("pxe", pxe).await;
    create::<Secret>(
        &env,
        json!({"metadata": {"name": "tor1-credentials"},
               "stringData": {"username": sim.username, "password": sim.password,
                              "admin-password": sim.enable_password}}),
    )
    .await;
    create::<BareMetalSwitch>(
        &env,
        json!({"apiVersion": "metal3.io/v1alpha1", "kind": "BareMetalSwitch",
               "metadata": {"name": "tor1",
                            "annotations": {"patchbay.dev/host-key": sim.host_key_fingerprint}},
               "spec": {"address": sim.address, "port": sim.port,
                        "macAddress": "aa:bb:cc:00:00:01", "deviceType": device_type,
                        "credentials": {"name": "tor1-credentials"}}}),
    )
    .await;
    let declared: serde_json::Map<String, serde_json::Value> = ports
        .iter()
        .map(|(key, name)| ((*key).to_owned(), json!({"name": name})))
        .collect();
    env.create::<Switch>(json!({
        "apiVersion": "patchbay.dev/v1alpha1", "kind": "Switch",
        "metadata": {"name": "tor1"},
        "spec": {"provider": {"name": "tor1"}, "ports": declared}
    }))
    .await;
    env
}

/// A HostNetworkAttachment `name` with `spec`, in `namespace`.
async fn attachment(env: &Env, namespace: &str, name: &str, spec: serde_json::Value) {
    let hna: HostNetworkAttachment = serde_json::from_value(
        json!({"apiVersion": "metal3.io/v1alpha1", "kind": "HostNetworkAttachment",
               "metadata": {"name": name, "namespace": namespace}, "spec": spec}),
    )
    .unwrap();
    Api::<HostNetworkAttachment>::namespaced(env.cluster.client.clone(), namespace)
        .create(&PostParams::default(), &hna)
        .await
        .unwrap();
}

/// The test playing BMO for host `name`.
struct Bmo {
    hosts: Api<BareMetalHost>,
    name: &'static str,
}

impl Bmo {
    /// Creates the host with `interfaces`.
    async fn create(env: &Env, name: &'static str, interfaces: serde_json::Value) -> Self {
        create::<BareMetalHost>(
            env,
            json!({"apiVersion": "metal3.io/v1alpha1", "kind": "BareMetalHost",
                   "metadata": {"name": name},
                   "spec": {"networkInterfaces": interfaces}}),
        )
        .await;
        Bmo {
            hosts: env.api(),
            name,
        }
    }

    /// Waits for patchbay's phase `phase` with every port ready; the ports
    /// annotation.
    async fn settled(&self, phase: &str) -> String {
        eventually(
            60,
            &format!("{} {phase}, its ports ready", self.name),
            || async {
                let h = self.hosts.get(self.name).await.ok()?;
                let a = h.annotations();
                let ports = a.get("patchbay.dev/ports")?;
                let (ready, total) = ports.split(';').next()?.split_once('/')?;
                (a.get("patchbay.dev/phase").map(String::as_str) == Some(phase) && ready == total)
                    .then(|| ports.clone())
            },
        )
        .await
    }

    /// Sets BMO's state once patchbay's pause is gone.
    async fn step(&self, state: &str) {
        eventually(
            60,
            &format!("{} unpaused, to go {state}", self.name),
            || async {
                let h = self.hosts.get(self.name).await.ok()?;
                (!h.annotations().contains_key(PAUSED)).then_some(())
            },
        )
        .await;
        self.hosts
            .patch_status(
                self.name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"provisioning": {"state": state}}})),
            )
            .await
            .unwrap();
    }
}

/// An interface on `port` of tor1, by MAC, carrying attachment `hna` (in `namespace`
/// when given).
fn interface(mac: &str, port: &str, hna: &str, namespace: Option<&str>) -> serde_json::Value {
    let mut reference = json!({"name": hna});
    if let Some(ns) = namespace {
        reference["namespace"] = json!(ns);
    }
    json!({"macAddress": mac, "hostNetworkAttachment": reference,
           "switchPort": {"switchID": "aa:bb:cc:00:00:01", "portID": port}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bare_metal_host_follows_its_network_interfaces_through_its_life() {
    if !on_devplane() {
        return; // installs Metal3's CRDs
    }
    let sims = FakeSwitches::start(&[SimSpec::new("tor1", "cisco_generic")]).unwrap();
    let sim = sims.get("tor1").clone();
    let env = metal3(
        "metal3-host",
        &sim,
        &[
            ("host-1-eth0", "FastEthernet0/1"),
            ("host-1-eth1", "FastEthernet0/3"),
        ],
        |_, _| {},
    )
    .await;
    let ns = env.cluster.namespace.clone();

    // The attachments: a trunk, and one breaking BMO's webhook rule (allowedVLANs
    // in access mode), which derives nothing and says why.
    attachment(
        &env,
        &ns,
        "web",
        json!({"mode": "trunk", "nativeVLAN": 100, "allowedVLANs": ["200-201"]}),
    )
    .await;
    attachment(
        &env,
        &ns,
        "bad",
        json!({"mode": "access", "nativeVLAN": 5, "allowedVLANs": ["6"]}),
    )
    .await;
    let configs: Api<SwitchPortConfiguration> = env.api();
    let web = eventually(60, "web derived", || async {
        configs.get_opt("web").await.ok().flatten()
    })
    .await;
    assert_eq!(web.spec.port.untagged_vlan, Some(100));
    let tagged: Vec<i64> = web.spec.port.vlans.iter().map(|v| v.id).collect();
    assert_eq!(tagged, [200, 201]);
    let note = eventually(60, "bad refused", || async {
        support::events_about(&env.api(), "bad")
            .await
            .into_iter()
            .find(|e| e.reason.as_deref() == Some("InvalidAttachment"))
            .and_then(|e| e.note)
    })
    .await;
    assert!(note.contains("spec.allowedVLANs"), "{note}");
    assert!(configs.get_opt("bad").await.unwrap().is_none());

    // The host: one interface on the declared port its switchPort names, one
    // naming an undeclared port, and one by NIC name with no switchPort: its port
    // is what inspection's LLDP will say.
    let host = Bmo::create(
        &env,
        "host-1",
        json!([
            interface("52:54:00:00:00:01", "FastEthernet0/1", "web", None),
            interface("52:54:00:00:00:02", "FastEthernet0/9", "web", None),
            {"name": "eth1", "hostNetworkAttachment": {"name": "web"}}
        ]),
    )
    .await;
    let ports = host.settled("Available").await;
    assert!(
        ports.contains("portID \"FastEthernet0/9\" is not declared on BareMetalSwitch"),
        "{ports}"
    );
    assert!(
        ports.contains("NIC eth1 has not been reported by inspection yet"),
        "{ports}"
    );
    host.step("inspecting").await;
    expect(&sim, "FastEthernet0/1", access(10)).await;
    // Inspection reports eth1 and its LLDP neighbour in the host's HardwareData
    // (BMO v0.14 also writes the host's status.hardware, which its next API version
    // drops; it says nothing of eth1 here): its port is driven from now.
    create::<HardwareData>(
        &env,
        json!({"apiVersion": "metal3.io/v1alpha1", "kind": "HardwareData",
               "metadata": {"name": "host-1"},
               "spec": {"hardware": {"nics": [
                   {"name": "eth1", "mac": "52:54:00:00:00:03",
                    "lldp": {"switchID": "aa:bb:cc:00:00:01", "portID": "FastEthernet0/3",
                             "switchSystemName": "tor1"}}]}}}),
    )
    .await;
    expect(&sim, "FastEthernet0/3", access(10)).await;
    host.step("provisioning").await;
    host.settled("Provisioning").await;
    host.step("provisioned").await;
    host.settled("Provisioned").await;
    let trunk = Some(VlanMode::Trunk {
        native: Some(vlan(100)),
        allowed: [vlan(200), vlan(201)].into_iter().collect(),
    });
    expect(&sim, "FastEthernet0/1", trunk.clone()).await;
    expect(&sim, "FastEthernet0/3", trunk).await;
    // `kubectl get swp` shows each interface's port with its host and state.
    let table = env.cluster.kubectl_ok(&["get", "swp", "-n", &ns]);
    let row = table
        .lines()
        .find(|l| l.starts_with("host-1-eth0 "))
        .unwrap_or_default();
    assert!(
        row.contains("Active") && row.contains(&format!("BareMetalHost/{ns}/host-1")),
        "{table}"
    );
    host.step("deprovisioning").await;
    host.settled("Deprovisioning").await;
    expect(&sim, "FastEthernet0/1", access(10)).await;
    host.step("deleting").await;
    expect(&sim, "FastEthernet0/1", Some(VlanMode::Unconfigured)).await;
    expect(&sim, "FastEthernet0/3", Some(VlanMode::Unconfigured)).await;
    // The undeclared port was never touched.
    assert_eq!(
        cisco(&sim, "FastEthernet0/9").await,
        Some(VlanMode::Unconfigured)
    );
    env.cluster.finish().await;
}

/// Tenancy, as a hostile tenant would try it: an attachment in tenant a's namespace
/// carrying a VLAN granted to tenant b only is refused on the device's port (the
/// port keeps the provisioning network, `Forbidden` names the VLAN), while tenant
/// a's own attachment on another host's port is applied; each read back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_attachment_is_held_to_its_grants() {
    if !on_devplane() {
        return; // installs Metal3's CRDs, namespaces and cluster-scoped pools
    }
    use k8s_openapi::api::core::v1::Namespace;
    let sims = FakeSwitches::start(&[SimSpec::new("tor1", "cisco_generic")]).unwrap();
    let sim = sims.get("tor1").clone();
    let env = metal3(
        "metal3-host-tenancy",
        &sim,
        &[
            ("host-a-eth0", "FastEthernet0/1"),
            ("host-b-eth0", "FastEthernet0/2"),
        ],
        |s, infra| {
            s.namespace = None;
            s.tenancy = Some(patchbay::decide::tenancy::Tenancy {
                infra_namespace: infra.to_owned(),
                parking_vlan: patchbay_providers::values::VlanId::new(999).unwrap(),
                trusted_host_namespaces: Default::default(),
                allow_bmc_credentials: false,
            });
        },
    )
    .await;
    let infra = env.cluster.namespace.clone();
    let (a, b) = (format!("{infra}-a"), format!("{infra}-b"));
    for ns in [&a, &b] {
        let n: Namespace = serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap();
        Api::<Namespace>::all(env.cluster.client.clone())
            .create(&PostParams::default(), &n)
            .await
            .unwrap();
    }
    for (pool, vlans, ns) in [("a", "200-209", &a), ("b", "300-309", &b)] {
        let p: patchbay::api::VLANPool = serde_json::from_value(json!({
            "apiVersion": "patchbay.dev/v1alpha1", "kind": "VLANPool",
            "metadata": {"name": format!("{infra}-{pool}")},
            "spec": {"vlans": vlans, "namespaces": [ns]}
        }))
        .unwrap();
        Api::<patchbay::api::VLANPool>::all(env.cluster.client.clone())
            .create(&PostParams::default(), &p)
            .await
            .unwrap();
    }
    // Tenant a: its own VLAN, and tenant b's.
    attachment(&env, &a, "web", json!({"nativeVLAN": 200})).await;
    attachment(&env, &a, "steal", json!({"nativeVLAN": 300})).await;
    let hosts = [
        (
            Bmo::create(
                &env,
                "host-a",
                json!([interface(
                    "52:54:00:00:00:0a",
                    "FastEthernet0/1",
                    "web",
                    Some(&a)
                )]),
            )
            .await,
            "host-a-eth0",
        ),
        (
            Bmo::create(
                &env,
                "host-b",
                json!([interface(
                    "52:54:00:00:00:0b",
                    "FastEthernet0/2",
                    "steal",
                    Some(&a)
                )]),
            )
            .await,
            "host-b-eth0",
        ),
    ];
    for (host, _) in &hosts {
        host.settled("Available").await;
        host.step("provisioning").await;
        host.settled("Provisioning").await;
        host.step("provisioned").await;
    }
    hosts[0].0.settled("Provisioned").await;
    expect(&sim, "FastEthernet0/1", access(200)).await;
    // Tenant b's VLAN through tenant a's attachment: refused on the port, which
    // keeps the provisioning network; never VLAN 300 on the device.
    let port = env
        .wait_for(hosts[1].1, "the grant refusal", |p| {
            p.status.as_ref().is_some_and(|s| {
                s.conditions.iter().any(|c| {
                    c.type_ == "Forbidden" && c.status == "True" && c.message.contains("300")
                })
            })
        })
        .await;
    let forbidden = port
        .status
        .unwrap()
        .conditions
        .into_iter()
        .find(|c| c.type_ == "Forbidden")
        .unwrap();
    assert!(forbidden.message.contains(&a), "{}", forbidden.message);
    assert_eq!(cisco(&sim, "FastEthernet0/2").await, access(10));
    env.cluster.finish().await;
}

/// A host a patchbay Server links to is driven by that Server alone: its
/// networkInterfaces are ignored (nothing marked or sent for them), and the host's
/// annotation and an Event on each object say which one drives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_a_server_links_to_is_driven_by_the_server_alone() {
    if !on_devplane() {
        return; // installs Metal3's CRDs
    }
    let sims = FakeSwitches::start(&[SimSpec::new("tor1", "cisco_generic")]).unwrap();
    let sim = sims.get("tor1").clone();
    let env = metal3(
        "metal3-host-linked",
        &sim,
        &[
            ("host-2-eth0", "FastEthernet0/1"),
            ("host-3-eth0", "FastEthernet0/3"),
            ("host-3-eth1", "FastEthernet0/4"),
        ],
        |_, _| {},
    )
    .await;
    let ns = env.cluster.namespace.clone();
    attachment(&env, &ns, "web", json!({"nativeVLAN": 100})).await;
    // The Server first: it is the authority for the host from the start.
    let server: patchbay::api::Server = serde_json::from_value(json!({
        "apiVersion": "patchbay.dev/v1alpha1", "kind": "Server",
        "metadata": {"name": format!("{ns}-srv")},
        "spec": {"bmc": {"address": "redfish://192.0.2.1/redfish/v1/Systems/1",
                         "credentialsSecretRef": {"name": "bmc", "namespace": ns}},
                 "bootMac": "52:54:00:00:00:21", "site": "dc1",
                 "bareMetalHostRef": {"name": "host-2", "namespace": ns}}
    }))
    .unwrap();
    Api::<patchbay::api::Server>::all(env.cluster.client.clone())
        .create(&PostParams::default(), &server)
        .await
        .unwrap();
    let host = Bmo::create(
        &env,
        "host-2",
        json!([interface(
            "52:54:00:00:00:21",
            "FastEthernet0/1",
            "web",
            None
        )]),
    )
    .await;
    let note = eventually(60, "host-2 says the Server drives it", || async {
        let h = host.hosts.get("host-2").await.ok()?;
        h.annotations()
            .get("patchbay.dev/ports")
            .filter(|p| p.starts_with("spec.networkInterfaces ignored"))
            .cloned()
    })
    .await;
    assert!(note.contains(&format!("Server {ns}-srv drives")), "{note}");
    // The Event follows the annotation.
    eventually(30, "PortsDrivenByServer on host-2", || async {
        support::events_about(&env.api(), "host-2")
            .await
            .into_iter()
            .any(|e| e.reason.as_deref() == Some("PortsDrivenByServer"))
            .then_some(())
    })
    .await;
    // The Server names no NIC on the port: the host's interface is not driven.
    let ports = env.api::<patchbay::api::SwitchPort>();
    let port = eventually(60, "SwitchPort host-2-eth0", || async {
        ports.get_opt("host-2-eth0").await.ok().flatten()
    })
    .await;
    assert!(
        !port.annotations().contains_key("patchbay.dev/host"),
        "{:?}",
        port.annotations()
    );
    assert_eq!(
        cisco(&sim, "FastEthernet0/1").await,
        Some(VlanMode::Unconfigured)
    );

    // A Server linking later to a host whose interfaces drive its ports: the port
    // the Server is cabled to is handed over (its mark), the other is cleaned.
    let host3 = Bmo::create(
        &env,
        "host-3",
        json!([
            interface("52:54:00:00:00:31", "FastEthernet0/3", "web", None),
            interface("52:54:00:00:00:32", "FastEthernet0/4", "web", None)
        ]),
    )
    .await;
    for state in ["inspecting", "provisioning", "provisioned"] {
        host3.step(state).await;
    }
    host3.settled("Provisioned").await;
    expect(&sim, "FastEthernet0/3", access(100)).await;
    expect(&sim, "FastEthernet0/4", access(100)).await;
    let server3: patchbay::api::Server = serde_json::from_value(json!({
        "apiVersion": "patchbay.dev/v1alpha1", "kind": "Server",
        "metadata": {"name": format!("{ns}-srv3")},
        "spec": {"bmc": {"address": "redfish://192.0.2.3/redfish/v1/Systems/1",
                         "credentialsSecretRef": {"name": "bmc", "namespace": ns}},
                 "bootMac": "52:54:00:00:00:31", "site": "dc1",
                 "bareMetalHostRef": {"name": "host-3", "namespace": ns},
                 "nics": [{"name": "eth0", "mac": "52:54:00:00:00:31",
                           "port": {"kind": "SwitchPort", "name": "host-3-eth0",
                                    "namespace": ns},
                           "provisioningConfiguration": {"name": "pxe", "namespace": ns}}]}
    }))
    .unwrap();
    Api::<patchbay::api::Server>::all(env.cluster.client.clone())
        .create(&PostParams::default(), &server3)
        .await
        .unwrap();
    let mark = |p: &patchbay::api::SwitchPort| p.annotations().get("patchbay.dev/host").cloned();
    eventually(60, "host-3-eth0 handed to the Server", || async {
        let p = ports.get("host-3-eth0").await.ok()?;
        (mark(&p) == Some(format!("Server/{ns}-srv3"))).then_some(())
    })
    .await;
    eventually(60, "host-3-eth1 cleaned and let go", || async {
        let p = ports.get("host-3-eth1").await.ok()?;
        mark(&p).is_none().then_some(())
    })
    .await;
    expect(&sim, "FastEthernet0/4", Some(VlanMode::Unconfigured)).await;
    let handed = eventually(30, "PortsHandedOver on host-3", || async {
        let notes: Vec<String> = support::events_about(&env.api(), "host-3")
            .await
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some("PortsHandedOver"))
            .filter_map(|e| e.note)
            .collect();
        (!notes.is_empty()).then_some(notes)
    })
    .await;
    assert_eq!(handed.len(), 1, "one hand-over, said once: {handed:?}");
    assert!(
        handed[0].contains(&format!(
            "1 port(s) this host drove handed to Server {ns}-srv3"
        )),
        "{handed:?}"
    );
    // From there the Server drives it (its phase's configuration, never a blip to
    // clean): read back what the Server's status reports for the port.
    let servers = Api::<patchbay::api::Server>::all(env.cluster.client.clone());
    let status = eventually(60, "the Server reporting host-3-eth0", || async {
        let s = servers.get(&format!("{ns}-srv3")).await.ok()?;
        let st = s.status?;
        st.ports
            .iter()
            .any(|p| p.port == format!("{ns}/host-3-eth0"))
            .then(|| format!("{:?} {:?}", st.phase, st.ports))
    })
    .await;
    println!("Server after the hand-over: {status}");
    assert!(
        host3
            .hosts
            .get("host-3")
            .await
            .unwrap()
            .annotations()
            .get("patchbay.dev/ports")
            .is_some_and(|p| p.starts_with("spec.networkInterfaces ignored")),
    );
    for name in [format!("{ns}-srv"), format!("{ns}-srv3")] {
        servers.delete(&name, &Default::default()).await.unwrap();
    }
    env.cluster.finish().await;
}

/// An Arista EOS switch's declared port, as the simulator reports it.
async fn eos(sim: &SimSwitch, port: &str) -> Option<VlanMode> {
    use patchbay_providers::Device as _;
    ssh_cases::backend("eos", sim)
        .get_port(&ssh_cases::port(port))
        .await
        .ok()
        .and_then(|p| p.vlans)
}

/// The wire, on this path too: real LLDP between network namespaces (lldpd, read
/// over sshd as Switch `tor1`'s neighbour source) beside a simulated Arista EOS as
/// BareMetalSwitch `tor1`, whose Linux-side port names match EOS's (`Ethernet1`..).
/// Host a gives only its MAC (no switchPort, no inspection): patchbay's own
/// neighbour reads find it on its port, and the link is kept on the host. Host b is
/// on the port its `switchPort` names, verified. Both move onto the provisioning
/// network. Then their cables are swapped: both ports are parked (clean), the hosts
/// held and saying why, and a's link is not moved by what the wire says now. Each
/// read back from the switch (the simulated EOS has two ports).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_s_interfaces_are_checked_and_found_on_the_wire() {
    use patchbay_testbed::lldp::LldpFabric;
    if !on_devplane() {
        return; // installs Metal3's CRDs
    }
    const A: &str = "52:54:00:0a:00:01";
    const B: &str = "52:54:00:0b:00:01";
    let mut fabric = LldpFabric::start("tor1").expect("the fabric starts");
    fabric.add_host("host-a", A, "Ethernet1").unwrap();
    fabric.add_host("host-b", B, "Ethernet2").unwrap();
    let sims = FakeSwitches::start(&[SimSpec::new("tor1", "arista_generic")]).unwrap();
    let sim = sims.get("tor1").clone();
    // EOS carries trunks only: the provisioning network is tagged.
    let env = metal3_on(
        "metal3-host-wire",
        (&sim, "netmiko_arista_eos"),
        &[("wire-a", "Ethernet1"), ("wire-b", "Ethernet2")],
        json!({"vlans": [{"id": 10}]}),
        |_, _| {},
    )
    .await;
    let ns = env.cluster.namespace.clone();
    env.lldp_source(&fabric, "tor1-lldp").await;
    env.api::<Switch>()
        .patch(
            "tor1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"neighbors": {
                "providers": [{"name": "tor1-lldp"}], "intervalSeconds": 5}}})),
        )
        .await
        .unwrap();
    attachment(&env, &ns, "web", json!({"nativeVLAN": 100})).await;
    let a = Bmo::create(
        &env,
        "host-a",
        json!([{"macAddress": A, "hostNetworkAttachment": {"name": "web"}}]),
    )
    .await;
    let b = Bmo::create(
        &env,
        "host-b",
        json!([interface(B, "Ethernet2", "web", None)]),
    )
    .await;
    let pxe = Some(VlanMode::Trunk {
        native: None,
        allowed: [vlan(10)].into_iter().collect(),
    });
    // Nothing moves before the neighbours are read; then each port, verified or
    // found, carries the provisioning network.
    for port in ["Ethernet1", "Ethernet2"] {
        eventually(
            90,
            &format!("{port} on the provisioning network"),
            || async { (eos(&sim, port).await == pxe).then_some(()) },
        )
        .await;
    }
    for host in [&a, &b] {
        host.settled("Available").await;
    }
    // Host a's port was found on the wire, and the link is kept on the host.
    let link = format!(r#"{{"{A}":"{ns}/wire-a"}}"#);
    let discovered = |h: &BareMetalHost| {
        h.annotations()
            .get("patchbay.dev/discovered-ports")
            .cloned()
    };
    assert_eq!(
        discovered(&a.hosts.get("host-a").await.unwrap()).as_ref(),
        Some(&link)
    );
    eventually(30, "CablingDiscovered on host-a", || async {
        support::events_about(&env.api(), "host-a")
            .await
            .into_iter()
            .find(|e| e.reason.as_deref() == Some("CablingDiscovered"))
            .and_then(|e| e.note)
            .filter(|n| n.contains(&format!("linked to SwitchPort {ns}/wire-a")))
    })
    .await;

    // Swap a's and b's cables: each declared port now sees the other host.
    fabric.swap_cables(0, 1).unwrap();
    for (port, host) in [("Ethernet1", &a), ("Ethernet2", &b)] {
        eventually(60, &format!("{port} parked"), || async {
            (eos(&sim, port).await == Some(VlanMode::Unconfigured)).then_some(())
        })
        .await;
        // Held: BMO paused until the cabling is confirmed, and the host says why.
        let h = eventually(30, &format!("{} held", host.name), || async {
            let h = host.hosts.get(host.name).await.ok()?;
            h.annotations().contains_key(PAUSED).then_some(h)
        })
        .await;
        let ports = h.annotations().get("patchbay.dev/ports").cloned();
        assert!(
            ports
                .as_deref()
                .is_some_and(|p| p.contains("CablingMismatch")
                    && p.contains("parked, its cabling is not confirmed")),
            "{}: {ports:?}",
            host.name
        );
    }
    // The link stays where it was made: the wire is checked, not followed.
    assert_eq!(
        discovered(&a.hosts.get("host-a").await.unwrap()).as_ref(),
        Some(&link)
    );
    env.cluster.finish().await;
    fabric.stop();
}

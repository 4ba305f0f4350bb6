//! Metal3's host half (baremetal-operator v0.14.0-rc.0) on the Cisco simulator: a
//! BareMetalHost's `spec.networkInterfaces` drive the port the infra team declared
//! on its BareMetalSwitch through the host's whole life — the provisioning
//! configuration while it is inspected and provisioned, the configuration derived
//! from its HostNetworkAttachment once provisioned, back to provisioning when
//! deprovisioned, clean when deleted — each read back from the device. An
//! interface naming a port nobody declared is refused and nothing is sent to that
//! port; an attachment breaking BMO's webhook rules derives nothing and says why.
//! The CRDs are upstream's renditions (`testbed/crds/`, the networkInterfaces
//! schema in `support::bare_metal_host_crd`).

#[path = "../providers/tests/support/ssh_cases.rs"]
mod ssh_cases;
mod support;

use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams, PostParams};
use patchbay::api::metal3::BareMetalHost;
use patchbay::api::metal3_attachment::HostNetworkAttachment;
use patchbay::api::metal3_switch::BareMetalSwitch;
use patchbay::api::{ConfigurationRef, Switch, SwitchPortConfiguration};
use patchbay_providers::VlanMode;
use patchbay_testbed::{FakeSwitches, SimSpec, SimSwitch};
use serde_json::json;
use ssh_cases::{access, vlan};
use support::env::Env;
use support::{Cluster, eventually, on_devplane};

fn crd(
    file: &str,
) -> k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("testbed/crds")
        .join(file);
    patchbay_providers::yaml::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bare_metal_host_follows_its_network_interfaces_through_its_life() {
    if !on_devplane() {
        return; // installs Metal3's CRDs
    }
    let sims = FakeSwitches::start(&[SimSpec::new("tor1", "cisco_generic")]).unwrap();
    let sim = sims.get("tor1").clone();
    let cluster = Cluster::start("metal3-host").await;
    for file in [
        "metal3.io_baremetalswitches.yaml",
        "metal3.io_hostnetworkattachments.yaml",
    ] {
        cluster.install_crd(crd(file)).await;
    }
    cluster
        .install_crd(support::bare_metal_host_crd(false))
        .await;
    let ns = cluster.namespace.clone();
    let pxe = ConfigurationRef {
        name: "pxe".into(),
        namespace: Some(ns.clone()),
    };
    let env = Env::start_on(cluster, |s| {
        s.metal3_switches = true;
        s.metal3_provisioning = Some(pxe);
    })
    .await;
    env.configuration("pxe", json!({"untaggedVLAN": 10})).await;

    // The infra team: the switch as a BareMetalSwitch, one port declared on it.
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
                        "macAddress": "aa:bb:cc:00:00:01", "deviceType": "netmiko_cisco_ios",
                        "credentials": {"name": "tor1-credentials"}}}),
    )
    .await;
    env.create::<Switch>(json!({
        "apiVersion": "patchbay.dev/v1alpha1", "kind": "Switch",
        "metadata": {"name": "tor1"},
        "spec": {"provider": {"name": "tor1"},
                 "ports": {"host-1-eth0": {"name": "FastEthernet0/1"}}}
    }))
    .await;

    // The attachments: a trunk, and one breaking BMO's webhook rule (allowedVLANs
    // in access mode), which derives nothing and says why.
    let hna = |name: &str, spec: serde_json::Value| {
        json!({"apiVersion": "metal3.io/v1alpha1", "kind": "HostNetworkAttachment",
               "metadata": {"name": name}, "spec": spec})
    };
    create::<HostNetworkAttachment>(
        &env,
        hna(
            "web",
            json!({"mode": "trunk", "nativeVLAN": 100, "allowedVLANs": ["200-201"]}),
        ),
    )
    .await;
    create::<HostNetworkAttachment>(
        &env,
        hna(
            "bad",
            json!({"mode": "access", "nativeVLAN": 5, "allowedVLANs": ["6"]}),
        ),
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

    // The host: one interface on the declared port, one naming an undeclared one.
    let hosts: Api<BareMetalHost> = env.api();
    create::<BareMetalHost>(
        &env,
        json!({"apiVersion": "metal3.io/v1alpha1", "kind": "BareMetalHost",
               "metadata": {"name": "host-1"},
               "spec": {"bootMACAddress": "52:54:00:00:00:01", "networkInterfaces": [
                   {"macAddress": "52:54:00:00:00:01", "hostNetworkAttachment": {"name": "web"},
                    "switchPort": {"switchID": "aa:bb:cc:00:00:01", "portID": "FastEthernet0/1"}},
                   {"macAddress": "52:54:00:00:00:02", "hostNetworkAttachment": {"name": "web"},
                    "switchPort": {"switchID": "aa:bb:cc:00:00:01", "portID": "FastEthernet0/9"}}]}}),
    )
    .await;
    let annotated = |phase: &'static str| {
        let hosts = hosts.clone();
        async move {
            eventually(60, &format!("host-1 {phase}, its port ready"), || async {
                let h = hosts.get("host-1").await.ok()?;
                let a = h.annotations();
                let ports = a.get("patchbay.dev/ports")?;
                (a.get("patchbay.dev/phase").map(String::as_str) == Some(phase)
                    && ports.starts_with("1/1"))
                .then(|| ports.clone())
            })
            .await
        }
    };
    let ports = annotated("Available").await;
    assert!(
        ports.contains("portID \"FastEthernet0/9\" is not declared on BareMetalSwitch"),
        "{ports}"
    );
    // BMO's part: each state once patchbay's pause is gone.
    let step = |state: &'static str| {
        let hosts = hosts.clone();
        async move {
            eventually(60, &format!("host-1 unpaused, to go {state}"), || async {
                let h = hosts.get("host-1").await.ok()?;
                (!h.annotations().contains_key(PAUSED)).then_some(())
            })
            .await;
            hosts
                .patch_status(
                    "host-1",
                    &PatchParams::default(),
                    &Patch::Merge(json!({"status": {"provisioning": {"state": state}}})),
                )
                .await
                .unwrap();
        }
    };
    step("inspecting").await;
    expect(&sim, "FastEthernet0/1", access(10)).await;
    step("provisioning").await;
    annotated("Provisioning").await;
    step("provisioned").await;
    annotated("Provisioned").await;
    expect(
        &sim,
        "FastEthernet0/1",
        Some(VlanMode::Trunk {
            native: Some(vlan(100)),
            allowed: [vlan(200), vlan(201)].into_iter().collect(),
        }),
    )
    .await;
    step("deprovisioning").await;
    annotated("Deprovisioning").await;
    expect(&sim, "FastEthernet0/1", access(10)).await;
    step("deleting").await;
    expect(&sim, "FastEthernet0/1", Some(VlanMode::Unconfigured)).await;
    // The undeclared port was never touched.
    assert_eq!(
        cisco(&sim, "FastEthernet0/9").await,
        Some(VlanMode::Unconfigured)
    );
    env.cluster.finish().await;
}

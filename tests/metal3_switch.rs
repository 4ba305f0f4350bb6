//! Metal3's BareMetalSwitch as a cluster with the baremetal-operator (v0.14.0-rc.0)
//! has it: the CRD rendition in `testbed/crds/` accepts and refuses, at
//! `kubectl apply`, what upstream's schema does — required fields, the MAC pattern,
//! the driver enum and its default, the port's range, and no field upstream lacks —
//! and patchbay's type (`patchbay::api::metal3_switch`) reads back what is stored.
//! With `--metal3-switches`, a BareMetalSwitch for a simulated Cisco switch (its
//! Secret in Metal3's keys, its host key pinned by annotation) drives the ports a
//! patchbay Switch declares on it, read back from the simulator; the refused ones
//! (an unmapped device type, a Secret in another namespace, a second writer on the
//! same device, also when two are applied together) say why and get no
//! ProviderSwitch.

#[path = "../providers/tests/support/ssh_cases.rs"]
mod ssh_cases;
mod support;

use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::{Api, PostParams};
use patchbay::api::metal3_switch::BareMetalSwitch;
use patchbay::api::{PortState, ProviderSwitch, Switch};
use patchbay_providers::{Device as _, VlanMode};
use patchbay_testbed::{FakeSwitches, SimSpec};
use serde_json::json;
use support::Cluster;
use support::env::Env;

fn crd()
-> k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition {
    support::rendition("metal3.io_baremetalswitches.yaml")
}

/// `kubectl apply` of one BareMetalSwitch whose spec is `spec`: stdout on success,
/// stderr on refusal.
fn apply(cluster: &Cluster, name: &str, spec: &str) -> Result<String, String> {
    let path = cluster.dir.join(format!("{name}.yaml"));
    let doc = format!(
        "apiVersion: metal3.io/v1alpha1\nkind: BareMetalSwitch\nmetadata:\n  name: {name}\n  namespace: {}\nspec:\n{spec}",
        cluster.namespace
    );
    std::fs::write(&path, doc).expect("write manifest");
    let out = cluster.kubectl(&["apply", "-f", path.to_str().expect("path")]);
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

#[tokio::test]
async fn a_bare_metal_switch_is_accepted_and_refused_as_upstream_does() {
    let cluster = Cluster::start("metal3-switch").await;
    cluster.install_crd(crd()).await;
    let good = "  address: 192.0.2.10\n  macAddress: aa:bb:cc:00:00:01\n  deviceType: netmiko_cisco_ios\n  credentials:\n    name: tor-1\n  port: 22\n";
    apply(&cluster, "tor-1", good).expect("upstream's shape is accepted");
    let api: Api<BareMetalSwitch> = Api::namespaced(cluster.client.clone(), &cluster.namespace);
    let read = api.get("tor-1").await.expect("read back");
    assert_eq!(read.spec.address, "192.0.2.10");
    assert_eq!(read.spec.mac_address, "aa:bb:cc:00:00:01");
    assert_eq!(read.spec.device_type, "netmiko_cisco_ios");
    assert_eq!(read.spec.port, Some(22));
    assert_eq!(
        read.spec.driver.as_deref(),
        Some("generic-switch"),
        "the driver defaults as upstream's schema says"
    );
    assert_eq!(
        read.spec.credentials.and_then(|c| c.name).as_deref(),
        Some("tor-1")
    );
    // (name, spec, what the refusal names)
    let refused = [
        (
            "no-mac",
            "  address: 192.0.2.11\n  deviceType: netmiko_cisco_ios\n",
            "spec.macAddress",
        ),
        (
            "no-type",
            "  address: 192.0.2.11\n  macAddress: aa:bb:cc:00:00:02\n",
            "spec.deviceType",
        ),
        (
            "no-address",
            "  macAddress: aa:bb:cc:00:00:02\n  deviceType: netmiko_cisco_ios\n",
            "spec.address",
        ),
        (
            "bad-mac",
            "  address: 192.0.2.11\n  macAddress: aa-bb-cc-00-00-02\n  deviceType: netmiko_cisco_ios\n",
            "spec.macAddress",
        ),
        (
            "bad-driver",
            "  address: 192.0.2.11\n  macAddress: aa:bb:cc:00:00:02\n  deviceType: netmiko_cisco_ios\n  driver: ironic\n",
            "spec.driver",
        ),
        (
            "port-zero",
            "  address: 192.0.2.11\n  macAddress: aa:bb:cc:00:00:02\n  deviceType: netmiko_cisco_ios\n  port: 0\n",
            "spec.port",
        ),
        (
            "port-high",
            "  address: 192.0.2.11\n  macAddress: aa:bb:cc:00:00:02\n  deviceType: netmiko_cisco_ios\n  port: 65536\n",
            "spec.port",
        ),
        // A field upstream lacks (a port list) is refused, as kubectl's strict
        // field validation does on a real cluster.
        (
            "with-ports",
            "  address: 192.0.2.11\n  macAddress: aa:bb:cc:00:00:02\n  deviceType: netmiko_cisco_ios\n  ports: [Gi0/1]\n",
            "spec.ports",
        ),
    ];
    for (name, spec, field) in refused {
        let err = apply(&cluster, name, spec).expect_err(name);
        assert!(
            err.contains(field),
            "{name}: the refusal names {field}: {err}"
        );
        assert!(
            api.get_opt(name).await.expect("get").is_none(),
            "{name} was stored"
        );
    }
    cluster.finish().await;
}

/// The `Valid` condition of BareMetalSwitch `name`: (status, reason, message).
async fn valid(api: &Api<BareMetalSwitch>, name: &str) -> Option<(String, String, String)> {
    let b = api.get_opt(name).await.ok()??;
    b.status
        .conditions
        .iter()
        .find(|c| c.type_ == "Valid")
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

/// Secret `name` in the test's namespace, holding `data` (`stringData`).
async fn login_secret(env: &Env, name: &str, data: serde_json::Value) {
    let secret: Secret =
        serde_json::from_value(json!({"metadata": {"name": name}, "stringData": data})).unwrap();
    env.api::<Secret>()
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
}

/// `kubectl apply` of BareMetalSwitch `name` for the simulator `sim`, its host key
/// pinned to `host_key` by annotation.
fn apply_bms(
    env: &Env,
    name: &str,
    sim: &patchbay_testbed::SimSwitch,
    host_key: &str,
    device_type: &str,
    credentials: serde_json::Value,
) {
    let b = json!({
        "apiVersion": "metal3.io/v1alpha1", "kind": "BareMetalSwitch",
        "metadata": {"name": name, "namespace": env.cluster.namespace,
                     "annotations": {"patchbay.dev/host-key": host_key}},
        "spec": {"address": sim.address, "port": sim.port,
                 "macAddress": "aa:bb:cc:00:00:01", "deviceType": device_type,
                 "credentials": credentials}
    });
    let path = env.cluster.dir.join(format!("{name}.json"));
    std::fs::write(&path, b.to_string()).unwrap();
    env.cluster
        .kubectl_ok(&["apply", "-f", path.to_str().unwrap()]);
}

#[tokio::test]
async fn a_bare_metal_switch_drives_the_ports_a_switch_declares_on_it() {
    let sims = FakeSwitches::start(&[
        SimSpec::new("tor1", "cisco_generic"),
        SimSpec::new("tor2", "cisco_generic"),
        SimSpec::new("tor3", "cisco_generic"),
    ])
    .unwrap();
    let sim = sims.get("tor1");
    let cluster = Cluster::start("metal3-switch-e2e").await;
    cluster.install_crd(crd()).await;
    let env = Env::start_on(cluster, |s| s.metal3_switches = true).await;
    let ns = env.cluster.namespace.clone();
    // The Secret in Metal3's keys: the enable secret is `admin-password`.
    login_secret(
        &env,
        "tor1-credentials",
        json!({"username": sim.username, "password": sim.password,
               "admin-password": sim.enable_password}),
    )
    .await;
    let on = |name: &str,
              sim: &patchbay_testbed::SimSwitch,
              host_key: &str,
              device_type: &str,
              credentials: serde_json::Value| {
        apply_bms(&env, name, sim, host_key, device_type, credentials)
    };
    let bms = |name: &str, device_type: &str, credentials: serde_json::Value| {
        on(
            name,
            sim,
            &sim.host_key_fingerprint,
            device_type,
            credentials,
        )
    };
    bms(
        "tor1",
        "netmiko_cisco_ios",
        json!({"name": "tor1-credentials"}),
    );
    let bmss: Api<BareMetalSwitch> = env.api();
    let (_, reason, message) = support::eventually(60, "tor1 Valid", || async {
        valid(&bmss, "tor1").await.filter(|(s, _, _)| s == "True")
    })
    .await;
    assert_eq!(reason, "Reconciled", "{message}");
    let derived = env.api::<ProviderSwitch>().get("tor1").await.unwrap();
    assert_eq!(
        derived
            .labels()
            .get("patchbay.dev/bare-metal-switch")
            .map(String::as_str),
        Some("tor1")
    );
    // The infra team declares the ports on it: a Switch naming it as its provider.
    env.create::<Switch>(json!({
        "apiVersion": "patchbay.dev/v1alpha1", "kind": "Switch",
        "metadata": {"name": "tor1"},
        "spec": {"provider": {"name": "tor1"},
                 "ports": {"tor1-p1": {"name": "FastEthernet0/1"}}}
    }))
    .await;
    env.configuration("web", json!({"untaggedVLAN": 100})).await;
    env.link("tor1-p1", Some("web")).await;
    env.wait_state("tor1-p1", PortState::Active).await;
    let device = ssh_cases::backend("ios", sim);
    assert_eq!(
        device
            .get_port(&ssh_cases::port("FastEthernet0/1"))
            .await
            .unwrap()
            .vlans,
        Some(VlanMode::Access {
            vlan: ssh_cases::vlan(100)
        }),
        "read back from the simulator"
    );
    // No other port was touched: FastEthernet0/2 is declared nowhere.
    assert_eq!(
        device
            .get_port(&ssh_cases::port("FastEthernet0/2"))
            .await
            .unwrap()
            .vlans,
        Some(VlanMode::Unconfigured)
    );

    // Refused, each with its reason, and no ProviderSwitch derived.
    bms(
        "tor-ovs",
        "netmiko_ovs_linux",
        json!({"name": "tor1-credentials"}),
    );
    bms(
        "tor-elsewhere",
        "netmiko_cisco_ios",
        json!({"name": "tor1-credentials", "namespace": "kube-system"}),
    );
    bms(
        "tor-twice",
        "netmiko_cisco_ios",
        json!({"name": "tor1-credentials"}),
    );
    for (name, reason, says) in [
        ("tor-ovs", "UnsupportedDeviceType", "OVSDB"),
        (
            "tor-elsewhere",
            "CredentialError",
            "spec.credentials.namespace",
        ),
        ("tor-twice", "Conflict", "already drives"),
    ] {
        let (status, got, message) =
            support::eventually(60, &format!("{name} refused"), || async {
                valid(&bmss, name).await.filter(|(s, _, _)| s == "False")
            })
            .await;
        assert_eq!(
            (status.as_str(), got.as_str()),
            ("False", reason),
            "{name}: {message}"
        );
        assert!(message.contains(says), "{name}: {message}");
        assert!(
            env.api::<ProviderSwitch>()
                .get_opt(name)
                .await
                .unwrap()
                .is_none(),
            "{name}: a ProviderSwitch was derived"
        );
    }

    // Two BareMetalSwitches on one device applied together, before either is in
    // any cache: one is taken in, the other refused (one device, one writer).
    let pair: Vec<serde_json::Value> = ["race-a", "race-b"]
        .iter()
        .map(|name| {
            json!({
                "apiVersion": "metal3.io/v1alpha1", "kind": "BareMetalSwitch",
                "metadata": {"name": name, "namespace": ns,
                             "annotations": {"patchbay.dev/host-key": sim.host_key_fingerprint}},
                "spec": {"address": "192.0.2.77", "macAddress": "aa:bb:cc:00:00:77",
                         "deviceType": "netmiko_cisco_ios",
                         "credentials": {"name": "tor1-credentials"}}
            })
        })
        .collect();
    let dir = env.cluster.dir.join("race");
    std::fs::create_dir_all(&dir).unwrap();
    for (i, b) in pair.iter().enumerate() {
        std::fs::write(dir.join(format!("{i}.json")), b.to_string()).unwrap();
    }
    env.cluster
        .kubectl_ok(&["apply", "-f", dir.to_str().unwrap()]);
    let verdicts = support::eventually(60, "race-a and race-b judged", || async {
        let a = valid(&bmss, "race-a").await?;
        let b = valid(&bmss, "race-b").await?;
        (a.1 != "Pending" && b.1 != "Pending").then_some([a, b])
    })
    .await;
    let conflicts = verdicts.iter().filter(|v| v.1 == "Conflict").count();
    let mut derived = 0;
    for name in ["race-a", "race-b"] {
        derived += usize::from(
            env.api::<ProviderSwitch>()
                .get_opt(name)
                .await
                .unwrap()
                .is_some(),
        );
    }
    assert_eq!((conflicts, derived), (1, 1), "{verdicts:?}");

    // What the device says of a wrong password, or of a host key other than the
    // pinned one, shows on the BareMetalSwitch once a Switch on it tried.
    let tor2 = sims.get("tor2");
    login_secret(
        &env,
        "tor2-credentials",
        json!({"username": tor2.username, "password": "not-the-password"}),
    )
    .await;
    on(
        "tor2",
        tor2,
        &tor2.host_key_fingerprint,
        "netmiko_cisco_ios",
        json!({"name": "tor2-credentials"}),
    );
    let tor3 = sims.get("tor3");
    on(
        "tor3",
        tor3,
        "SHA256:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
        "netmiko_cisco_ios",
        json!({"name": "tor1-credentials"}),
    );
    for name in ["tor2", "tor3"] {
        env.create::<Switch>(json!({
            "apiVersion": "patchbay.dev/v1alpha1", "kind": "Switch",
            "metadata": {"name": name},
            "spec": {"provider": {"name": name},
                     "ports": {format!("{name}-p1"): {"name": "FastEthernet0/1"}}}
        }))
        .await;
        env.link(&format!("{name}-p1"), Some("web")).await;
    }
    for (name, reason) in [("tor2", "CredentialError"), ("tor3", "HostKeyMismatch")] {
        let (_, got, message) = support::eventually(60, &format!("{name}: {reason}"), || async {
            valid(&bmss, name)
                .await
                .filter(|(s, r, _)| s == "False" && r == reason)
        })
        .await;
        assert_eq!(got, reason);
        assert!(
            message.starts_with(&format!("Switch {name}: ")),
            "{message}"
        );
        assert!(!message.contains("not-the-password"), "{message}");
    }
    // The password corrected in the Secret (rotated): used at once, the port goes
    // Active and the BareMetalSwitch is Valid again.
    env.api::<Secret>()
        .patch(
            "tor2-credentials",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"stringData": {"password": tor2.password}})),
        )
        .await
        .unwrap();
    env.wait_state("tor2-p1", PortState::Active).await;
    support::eventually(60, "tor2 Valid again", || async {
        valid(&bmss, "tor2").await.filter(|(s, _, _)| s == "True")
    })
    .await;
    env.cluster.kubectl_ok(&["get", "bms", "-n", &ns]);
}

/// Each device type the map drives, on its simulator, through a BareMetalSwitch:
/// Dell PowerConnect, Brocade FastIron and Arista EOS over their CLIs, a Juniper QFX
/// over NETCONF (its `spec.port` the NETCONF port) — the declared port Active and
/// read back from the device. On EOS (trunks only) an access configuration is
/// refused with the reason and the port left as it was.
#[tokio::test]
async fn every_mapped_device_type_drives_its_declared_port() {
    use patchbay_providers::cli::{Auth, HostKeyPolicy, SshTarget};
    use patchbay_providers::netconf::{NetconfOptions, NetconfSwitch, model};
    use patchbay_providers::secret::SecretString;

    let sims = FakeSwitches::start(&[
        SimSpec::new("dell1", "dell_generic"),
        SimSpec::new("brocade1", "brocade_generic"),
        SimSpec::new("qfx1", "juniper_qfx_copper_generic"),
        SimSpec::new("eos1", "arista_generic"),
    ])
    .unwrap();
    let cluster = Cluster::start("metal3-switch-types").await;
    cluster.install_crd(crd()).await;
    let env = Env::start_on(cluster, |s| s.metal3_switches = true).await;
    env.configuration("web", json!({"untaggedVLAN": 100})).await;
    env.configuration("trunk", json!({"vlans": [{"id": 10}, {"id": 20}]}))
        .await;
    let bmss: Api<BareMetalSwitch> = env.api();
    let access = || {
        Some(VlanMode::Access {
            vlan: ssh_cases::vlan(100),
        })
    };
    let cases = [
        (
            "dell1",
            "netmiko_dell_powerconnect",
            "ethernet 1/g1",
            "web",
            access(),
        ),
        (
            "brocade1",
            "netmiko_brocade_fastiron",
            "ethernet 1/1",
            "web",
            access(),
        ),
        ("qfx1", "netmiko_juniper", "ge-0/0/1", "web", access()),
        (
            "eos1",
            "netmiko_arista_eos",
            "Ethernet1",
            "trunk",
            Some(VlanMode::Trunk {
                native: None,
                allowed: [ssh_cases::vlan(10), ssh_cases::vlan(20)]
                    .into_iter()
                    .collect(),
            }),
        ),
    ];
    for (name, device_type, device_port, configuration, _) in &cases {
        let (name, device_type, device_port) = (*name, *device_type, *device_port);
        let sim = sims.get(name);
        login_secret(
            &env,
            &format!("{name}-credentials"),
            json!({"username": sim.username, "password": sim.password,
                   "admin-password": sim.enable_password}),
        )
        .await;
        apply_bms(
            &env,
            name,
            sim,
            &sim.host_key_fingerprint,
            device_type,
            json!({"name": format!("{name}-credentials")}),
        );
        let mut ports = json!({format!("{name}-p1"): {"name": device_port}});
        if name == "eos1" {
            ports["eos1-p2"] = json!({"name": "Ethernet2"});
        }
        env.create::<Switch>(json!({
            "apiVersion": "patchbay.dev/v1alpha1", "kind": "Switch",
            "metadata": {"name": name},
            "spec": {"provider": {"name": name},
                     "ports": ports}
        }))
        .await;
        env.link(&format!("{name}-p1"), Some(configuration)).await;
    }
    for (name, device_type, device_port, _, want) in cases {
        let sim = sims.get(name);
        let (_, reason, message) = support::eventually(60, &format!("{name} Valid"), || async {
            valid(&bmss, name).await.filter(|(s, _, _)| s == "True")
        })
        .await;
        assert_eq!(reason, "Reconciled", "{name}: {message}");
        env.wait_state(&format!("{name}-p1"), PortState::Active)
            .await;
        let read = if device_type == "netmiko_juniper" {
            let target = SshTarget {
                address: sim.address.clone(),
                port: sim.port,
                username: sim.username.clone(),
                auth: Auth::Password(SecretString::new(sim.password.clone())),
                host_key: HostKeyPolicy::Fingerprint(sim.host_key_fingerprint.clone()),
                connect_timeout: std::time::Duration::from_secs(10),
            };
            NetconfSwitch::new(
                target,
                model::for_os("junos", Some("junos-els")).unwrap(),
                NetconfOptions::default(),
            )
            .get_port(&ssh_cases::port(device_port))
            .await
            .unwrap()
        } else {
            let os = match name {
                "dell1" => "powerconnect",
                "brocade1" => "fastiron",
                _ => "eos",
            };
            ssh_cases::backend(os, sim)
                .get_port(&ssh_cases::port(device_port))
                .await
                .unwrap()
        };
        assert_eq!(read.vlans, want, "{name}: read back from the device");
    }
    // Arista EOS carries trunks only: an access configuration on its second
    // declared port is refused with the reason, and the port is not touched.
    env.link("eos1-p2", Some("web")).await;
    let p = env
        .wait_for("eos1-p2", "the capability refusal", |p| {
            p.status.as_ref().is_some_and(|s| {
                s.conditions.iter().any(|c| {
                    c.type_ == "Ready"
                        && c.status == "False"
                        && c.message.contains("cannot configure access VLAN")
                })
            })
        })
        .await;
    assert_ne!(
        p.status.and_then(|s| s.state),
        Some(PortState::Active),
        "refused"
    );
    assert_eq!(
        ssh_cases::backend("eos", sims.get("eos1"))
            .get_port(&ssh_cases::port("Ethernet2"))
            .await
            .unwrap()
            .vlans,
        Some(VlanMode::Unconfigured),
        "nothing sent to Ethernet2"
    );
}

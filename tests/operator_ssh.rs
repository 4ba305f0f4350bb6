//! The operator driving simulated switches over SSH: ProviderSwitch (backend ssh, a
//! Secret, a pinned host key) + Switch + SwitchPortConfiguration on devplane (or a real
//! cluster with `PATCHBAY_E2E_CLUSTER=kubeconfig`), fake-switches simulators started
//! and stopped by PID. Device state is read back from the simulator itself.

#[path = "support/ssh_cases.rs"]
mod ssh_cases;
mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use patchbay::api::{PortState, ProviderSwitch, Switch, SwitchPort, SwitchPortConfiguration, crds};
use patchbay::backends::Backends;
use patchbay::fake_switch::{FakeSwitches, SimSpec, SimSwitch};
use patchbay::settings::Settings;
use patchbay::state_machine::Backoff;
use patchbay_providers::{AdminState, Switch as _, VlanMode};
use serde_json::json;
use ssh_cases::{backend, port, vlan};
use support::{Cluster, eventually};

struct Env {
    cluster: Cluster,
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl Env {
    async fn start(test: &str) -> Env {
        let cluster = Cluster::start(test).await;
        for (_, crd) in crds() {
            cluster.install_crd(crd).await;
        }
        let settings = Settings {
            namespace: Some(cluster.namespace.clone()),
            batch_window: Duration::from_millis(50),
            drift_interval: Duration::from_secs(1),
            max_sessions: 1,
            backoff: Backoff {
                base: Duration::from_millis(300),
                cap: Duration::from_secs(2),
            },
            fixture_latency: Duration::ZERO,
        };
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(patchbay::operator::run(
            cluster.client.clone(),
            settings,
            Backends::default(),
            async move {
                let _ = stopped.await;
            },
        ));
        Env {
            cluster,
            _stop: stop,
        }
    }

    fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        Api::namespaced(self.cluster.client.clone(), &self.cluster.namespace)
    }

    async fn create<K>(&self, value: serde_json::Value)
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
            + Clone
            + serde::de::DeserializeOwned
            + serde::Serialize
            + std::fmt::Debug,
    {
        let obj: K = serde_json::from_value(value).unwrap();
        self.api::<K>()
            .create(&PostParams::default(), &obj)
            .await
            .unwrap();
    }

    /// Secret + ProviderSwitch (ssh, `os`, pinned to `fingerprint`) + Switch with
    /// the given (key, device port) pairs.
    async fn switch(
        &self,
        name: &str,
        os: &str,
        sim: &SimSwitch,
        fingerprint: &str,
        ports: &[(&str, &str)],
    ) {
        let secret = Secret {
            metadata: ObjectMeta {
                name: Some(format!("{name}-login")),
                ..Default::default()
            },
            string_data: Some(BTreeMap::from([
                ("username".to_string(), sim.username.clone()),
                ("password".to_string(), sim.password.clone()),
                ("enablePassword".to_string(), sim.enable_password.clone()),
            ])),
            ..Default::default()
        };
        self.api::<Secret>()
            .create(&PostParams::default(), &secret)
            .await
            .unwrap();
        self.create::<ProviderSwitch>(json!({
            "apiVersion": "patchbay.dev/v1alpha1", "kind": "ProviderSwitch",
            "metadata": {"name": name},
            "spec": {"backend": "ssh", "os": os, "address": sim.address, "port": sim.port,
                     "credentialsSecretRef": {"name": format!("{name}-login")},
                     "hostKey": {"fingerprint": fingerprint}}
        }))
        .await;
        let port_map: serde_json::Map<String, serde_json::Value> = ports
            .iter()
            .map(|(k, dev)| (k.to_string(), json!({"name": dev})))
            .collect();
        self.create::<Switch>(json!({
            "apiVersion": "patchbay.dev/v1alpha1", "kind": "Switch",
            "metadata": {"name": name},
            "spec": {"provider": {"name": name}, "ports": port_map}
        }))
        .await;
    }

    async fn configuration(&self, name: &str, spec: serde_json::Value) {
        self.create::<SwitchPortConfiguration>(json!({
            "apiVersion": "patchbay.dev/v1alpha1", "kind": "SwitchPortConfiguration",
            "metadata": {"name": name}, "spec": spec
        }))
        .await;
    }

    async fn link(&self, port: &str, configuration: Option<&str>) {
        let api: Api<SwitchPort> = self.api();
        eventually(20, &format!("SwitchPort {port} to exist"), || async {
            api.get_opt(port).await.ok()?
        })
        .await;
        let value = configuration.map(|c| json!({"name": c}));
        api.patch(
            port,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"configuration": value}})),
        )
        .await
        .unwrap();
    }

    async fn wait_for(
        &self,
        port: &str,
        what: &str,
        check: impl Fn(&SwitchPort) -> bool,
    ) -> SwitchPort {
        let api: Api<SwitchPort> = self.api();
        eventually(30, what, || async {
            let p = api.get_opt(port).await.ok()??;
            check(&p).then_some(p)
        })
        .await
    }

    async fn wait_state(&self, port: &str, state: PortState) -> SwitchPort {
        self.wait_for(port, &format!("{port} to be {state}"), |p| {
            p.status.as_ref().and_then(|s| s.state) == Some(state)
        })
        .await
    }
}

fn condition(p: &SwitchPort, type_: &str) -> Option<(String, String, String)> {
    p.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

#[tokio::test]
async fn the_operator_configures_and_cleans_a_simulated_cisco_port() {
    let sims = FakeSwitches::start(&[SimSpec::new("tor1", "cisco_generic")]).unwrap();
    let sim = sims.get("tor1");
    let env = Env::start("ssh-cisco").await;
    env.switch(
        "tor1",
        "ios",
        sim,
        &sim.host_key_fingerprint,
        &[
            ("tor1-p1", "FastEthernet0/1"),
            ("tor1-p2", "FastEthernet0/2"),
        ],
    )
    .await;
    env.configuration(
        "tenant-web",
        json!({"untaggedVLAN": 100, "vlans": [{"id": 200, "name": "storage"}],
               "description": "tenant web"}),
    )
    .await;
    env.link("tor1-p1", Some("tenant-web")).await;
    env.wait_state("tor1-p1", PortState::Active).await;

    let device = backend("ios", sim);
    let observed = device.get_port(&port("FastEthernet0/1")).await.unwrap();
    assert_eq!(
        observed.vlans,
        Some(VlanMode::Trunk {
            native: Some(vlan(100)),
            allowed: [vlan(200)].into_iter().collect(),
        })
    );
    assert_eq!(observed.admin, Some(AdminState::Up));
    assert_eq!(
        observed.description.flatten().map(|d| d.to_string()),
        Some("tenant web".into())
    );
    // The untouched port stays clean.
    let p2 = device.get_port(&port("FastEthernet0/2")).await.unwrap();
    assert_eq!(p2.vlans, Some(VlanMode::Unconfigured));

    // Editing the configuration reconfigures the device.
    env.api::<SwitchPortConfiguration>()
        .patch(
            "tenant-web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"untaggedVLAN": 300, "vlans": [], "description": null}})),
        )
        .await
        .unwrap();
    eventually(30, "the device to carry access VLAN 300", || async {
        let o = device.get_port(&port("FastEthernet0/1")).await.ok()?;
        (o.vlans == Some(VlanMode::Access { vlan: vlan(300) }) && o.description == Some(None))
            .then_some(())
    })
    .await;
    env.wait_state("tor1-p1", PortState::Active).await;

    // Unlinking cleans the port on the device.
    env.link("tor1-p1", None).await;
    env.wait_state("tor1-p1", PortState::Idle).await;
    let clean = device.get_port(&port("FastEthernet0/1")).await.unwrap();
    assert_eq!(clean.vlans, Some(VlanMode::Unconfigured));
    assert_eq!(clean.admin, Some(AdminState::Up));
    assert_eq!(clean.description, Some(None));
}

#[tokio::test]
async fn capabilities_and_host_keys_are_enforced_by_the_operator() {
    let sims = FakeSwitches::start(&[
        SimSpec::new("eos1", "arista_generic"),
        SimSpec::new("tor2", "cisco_generic"),
    ])
    .unwrap();
    let env = Env::start("ssh-refusals").await;

    // Arista over SSH carries trunks only: an access configuration is refused at
    // validation, naming the field, and nothing reaches the device.
    let eos = sims.get("eos1");
    env.switch(
        "eos1",
        "eos",
        eos,
        &eos.host_key_fingerprint,
        &[("eos1-p1", "Ethernet1")],
    )
    .await;
    env.configuration("access-only", json!({"untaggedVLAN": 100}))
        .await;
    env.link("eos1-p1", Some("access-only")).await;
    let p = env
        .wait_for("eos1-p1", "the capability refusal", |p| {
            condition(p, "Ready")
                .is_some_and(|(s, _, m)| s == "False" && m.contains("spec.untaggedVLAN"))
        })
        .await;
    let (_, _, message) = condition(&p, "Ready").unwrap();
    assert!(
        message.contains("cannot configure access VLAN"),
        "{message}"
    );
    let device = backend("eos", eos);
    assert_eq!(
        device.get_port(&port("Ethernet1")).await.unwrap().vlans,
        Some(VlanMode::Unconfigured)
    );
    // A trunk is fine.
    env.configuration("trunk", json!({"vlans": [{"id": 10}, {"id": 20}]}))
        .await;
    env.link("eos1-p1", Some("trunk")).await;
    env.wait_state("eos1-p1", PortState::Active).await;
    assert_eq!(
        device.get_port(&port("Ethernet1")).await.unwrap().vlans,
        Some(VlanMode::Trunk {
            native: None,
            allowed: [vlan(10), vlan(20)].into_iter().collect()
        })
    );

    // A wrong pin: the port never configures and the status names both keys.
    let tor2 = sims.get("tor2");
    let wrong = "SHA256:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";
    env.switch(
        "tor2",
        "ios",
        tor2,
        wrong,
        &[("tor2-p1", "FastEthernet0/1")],
    )
    .await;
    env.link("tor2-p1", Some("trunk")).await;
    let p = env
        .wait_for("tor2-p1", "the host-key refusal", |p| {
            p.status
                .as_ref()
                .and_then(|s| s.last_error.as_deref())
                .is_some_and(|e| e.contains("host key"))
        })
        .await;
    let err = p.status.unwrap().last_error.unwrap();
    assert!(
        err.contains(wrong) && err.contains(&tor2.host_key_fingerprint),
        "{err}"
    );
    assert!(!err.contains(&tor2.password));
    let tor2_device = backend("ios", tor2);
    assert_eq!(
        tor2_device
            .get_port(&port("FastEthernet0/1"))
            .await
            .unwrap()
            .vlans,
        Some(VlanMode::Unconfigured)
    );
}

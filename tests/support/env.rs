//! An operator on a test cluster: devplane (or a real cluster) with the CRDs, the
//! operator running in-process with test-friendly settings, and helpers to create
//! objects and wait for ports.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use patchbay::api::{PortState, ProviderSwitch, Switch, SwitchPort, SwitchPortConfiguration, crds};
use patchbay::backends::Backends;
use patchbay::decide::state_machine::Backoff;
use patchbay::settings::Settings;
use patchbay_testbed::SimSwitch;
use serde_json::json;

use super::{Cluster, eventually, eventually_seen};

pub struct Env {
    pub cluster: Cluster,
    /// The in-process operator's metrics and device gate.
    pub probes: patchbay::probes::Probes,
    /// The in-process operator's fixture devices (read back by tests).
    pub fixtures: patchbay::backends::FixtureRegistry,
    _stop: Option<tokio::sync::oneshot::Sender<()>>,
    /// The operator's task and the settings it runs with (to kill and restart it).
    operator: Option<(tokio::task::JoinHandle<()>, Settings)>,
}

impl Env {
    pub async fn start(test: &str) -> Env {
        Self::start_with(test, |_| {}).await
    }

    /// Like [`Env::start`], with the test's own changes to the settings.
    pub async fn start_with(test: &str, edit: impl FnOnce(&mut Settings)) -> Env {
        Self::start_on(Cluster::start(test).await, edit).await
    }

    /// Like [`Env::start_with`] on a cluster the test prepared (CRDs the operator
    /// looks up at start, say).
    pub async fn start_on(cluster: Cluster, edit: impl FnOnce(&mut Settings)) -> Env {
        for (_, crd) in crds() {
            cluster.install_crd(crd).await;
        }
        let mut settings = Settings {
            namespace: Some(cluster.namespace.clone()),
            batch_window: Duration::from_millis(50),
            // The whole window: tests that expect one batch do not depend on timing.
            batch_quiet: Duration::from_millis(50),
            drift_interval: Duration::from_secs(1),
            max_sessions: 1,
            backoff: Backoff {
                base: Duration::from_millis(300),
                cap: Duration::from_secs(2),
            },
            rechecks_per_second: patchbay::decide::retry::RECHECKS_PER_SECOND,
            fixture_latency: Duration::ZERO,
            fixture_state_dir: None,
            batch_timeout: None,
            ansible_playbook: patchbay_testbed::ansible_playbook()
                .unwrap_or_else(|_| "ansible-playbook".into()),
            tenancy: None,
            bgp_nodes: None,
            metal3_switches: false,
            metal3_provisioning: None,
            rollout: Default::default(),
        };
        edit(&mut settings);
        let mut env = Env {
            cluster,
            probes: patchbay::probes::Probes::default(),
            fixtures: Default::default(),
            _stop: None,
            operator: None,
        };
        env.run_operator(settings);
        env
    }

    /// Starts the in-process operator with `settings`.
    fn run_operator(&mut self, settings: Settings) {
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let backends = Backends {
            ansible_playbook: settings.ansible_playbook.clone(),
            ..Backends::default()
        };
        let probes = patchbay::probes::Probes::default();
        self.fixtures = backends.fixtures.clone();
        let task = tokio::spawn(patchbay::controllers::run(
            self.cluster.client.clone(),
            settings.clone(),
            backends,
            probes.clone(),
            async move {
                let _ = stopped.await;
            },
        ));
        self.probes = probes;
        self._stop = Some(stop);
        self.operator = Some((task, settings));
    }

    /// Kills the operator at once (no graceful shutdown), as `kill -9` would: its
    /// sessions are dropped mid-way, nothing it held in memory survives.
    pub fn kill_operator(&mut self) {
        if let Some((task, _)) = &self.operator {
            task.abort();
        }
        self._stop = None;
    }

    /// A new operator with the killed one's settings, as a restarted pod.
    pub fn restart_operator(&mut self) {
        let settings = self
            .operator
            .take()
            .map(|(_, s)| s)
            .expect("an operator ran");
        self.run_operator(settings);
    }

    /// The CRDs on `cluster` and these helpers, without an in-process operator (the
    /// test runs `patchbay run` itself).
    pub async fn without_operator(cluster: Cluster) -> Env {
        for (_, crd) in crds() {
            cluster.install_crd(crd).await;
        }
        Env {
            cluster,
            probes: patchbay::probes::Probes::default(),
            fixtures: Default::default(),
            _stop: None,
            operator: None,
        }
    }

    pub fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        Api::namespaced(self.cluster.client.clone(), &self.cluster.namespace)
    }

    pub async fn create<K>(&self, value: serde_json::Value)
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
    pub async fn switch(
        &self,
        name: &str,
        os: &str,
        sim: &SimSwitch,
        fingerprint: &str,
        ports: &[(&str, &str)],
    ) {
        self.device(
            name,
            &[
                ("username", &sim.username),
                ("password", &sim.password),
                ("enablePassword", &sim.enable_password),
            ],
            json!({"backend": "ssh", "os": os, "address": sim.address, "port": sim.port,
                   "hostKey": {"fingerprint": fingerprint}}),
            ports,
        )
        .await;
    }

    /// `sim` (a Cisco simulator with the IOS shims) driven through Ansible and its
    /// built-in IOS playbooks as ProviderSwitch `name`, with a Switch of that name
    /// ([`Env::device`]).
    pub async fn ansible_switch(&self, name: &str, sim: &SimSwitch, ports: &[(&str, &str)]) {
        self.device(
            name,
            &[
                ("username", &sim.username),
                ("password", &sim.password),
                ("enablePassword", &sim.enable_password),
            ],
            json!({"backend": "ansible", "os": "ios", "address": sim.address, "port": sim.port,
                   "hostKey": {"fingerprint": sim.host_key_fingerprint}}),
            ports,
        )
        .await;
    }

    /// The Linux side of a switch as ProviderSwitch `name` (and the Switch of that
    /// name [`Env::device`] makes with it), read only: `fabric`'s lldpd over its sshd,
    /// with a key login and a pinned host key. A Switch names it in
    /// `spec.neighbors.providers`.
    pub async fn lldp_source(&self, fabric: &patchbay_testbed::lldp::LldpFabric, name: &str) {
        self.device(
            name,
            &[
                ("username", &fabric.username),
                ("privateKey", &fabric.client_key),
            ],
            json!({"backend": "ssh", "os": "linux", "address": "127.0.0.1",
                   "port": fabric.ssh_port,
                   "hostKey": {"fingerprint": fabric.host_key_fingerprint},
                   "options": {"lldpSocket": fabric.switch_socket}}),
            &[],
        )
        .await;
    }

    /// ProviderSwitch `name`: bridge `br0` of `ovs`, its learned MACs read through
    /// ovs-vswitchd's control socket (a Switch names it in `spec.neighbors`).
    pub async fn ovs_provider(&self, ovs: &patchbay_testbed::OvsSim, name: &str) {
        let control = ovs.info.dir.join("ovs-vswitchd.ctl");
        self.create::<ProviderSwitch>(json!({
            "apiVersion": "patchbay.dev/v1alpha1", "kind": "ProviderSwitch",
            "metadata": {"name": name},
            "spec": {"backend": "ovsdb", "os": "ovs", "address": "127.0.0.1",
                     "port": ovs.info.ovsdb_port,
                     "options": {"bridge": "br0", "controlSocket": control}}
        }))
        .await;
    }

    /// Switch `name` on ProviderSwitch `name`, its ports the given (key, device
    /// port) pairs, with `neighbors` as its `spec.neighbors`.
    pub async fn switch_reading(
        &self,
        name: &str,
        ports: &[(&str, &str)],
        neighbors: serde_json::Value,
    ) {
        let mut switch = switch_object(name, ports);
        switch["spec"]["neighbors"] = neighbors;
        self.create::<Switch>(switch).await;
    }

    /// Server `name` (cluster-scoped, of site `site`) with one NIC `eth0` of MAC
    /// `mac` declared on SwitchPort `port` of the test's namespace, provisioned with
    /// configuration `provisioning`; `extra` merged into its spec.
    pub async fn server(
        &self,
        (name, site): (&str, &str),
        (mac, port): (&str, &str),
        provisioning: &str,
        extra: serde_json::Value,
    ) {
        let ns = self.cluster.namespace.clone();
        let mut spec = json!({
            "bmc": {"address": "10.0.0.1", "credentialsSecretRef": {"name": "bmc", "namespace": ns}},
            "bootMac": mac,
            "site": site,
            "nics": [{"name": "eth0", "mac": mac,
                      "port": {"kind": "SwitchPort", "name": port, "namespace": ns},
                      "provisioningConfiguration": {"name": provisioning}}],
        });
        if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
            spec.extend(extra.clone());
        }
        let server: patchbay::api::Server = serde_json::from_value(json!({
            "apiVersion": "patchbay.dev/v1alpha1", "kind": "Server",
            "metadata": {"name": name},
            "spec": spec,
        }))
        .unwrap();
        Api::<patchbay::api::Server>::all(self.cluster.client.clone())
            .create(&PostParams::default(), &server)
            .await
            .unwrap();
    }

    /// A Secret `<name>-login` with `login`, a ProviderSwitch `name` with `spec` (the
    /// Secret referenced) and a Switch `name` with the given (key, device port) pairs.
    pub async fn device(
        &self,
        name: &str,
        login: &[(&str, &str)],
        mut spec: serde_json::Value,
        ports: &[(&str, &str)],
    ) {
        let secret = Secret {
            metadata: ObjectMeta {
                name: Some(format!("{name}-login")),
                ..Default::default()
            },
            string_data: Some(
                login
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect::<BTreeMap<_, _>>(),
            ),
            ..Default::default()
        };
        self.api::<Secret>()
            .create(&PostParams::default(), &secret)
            .await
            .unwrap();
        spec["credentialsSecretRef"] = json!({"name": format!("{name}-login")});
        self.create::<ProviderSwitch>(json!({
            "apiVersion": "patchbay.dev/v1alpha1", "kind": "ProviderSwitch",
            "metadata": {"name": name}, "spec": spec
        }))
        .await;
        self.create::<Switch>(switch_object(name, ports)).await;
    }

    /// Caps the device of ProviderSwitch `name` at `n` sessions
    /// (`spec.options.maxSessions`).
    /// A netconfd device (backend netconf, os yang, its key login, its host key
    /// pinned) as ProviderSwitch + Switch `name` with `ports` (key, device port).
    pub async fn netconfd_switch(
        &self,
        name: &str,
        nc: &patchbay_testbed::Netconfd,
        ports: &[(&str, &str)],
    ) {
        self.device(
            name,
            &[("username", &nc.username), ("privateKey", &nc.client_key)],
            json!({"backend": "netconf", "os": "yang", "address": nc.address, "port": nc.port,
                   "hostKey": {"fingerprint": nc.host_key_fingerprint}}),
            ports,
        )
        .await;
    }

    pub async fn cap_sessions(&self, name: &str, n: u32) {
        self.api::<ProviderSwitch>()
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"options": {"maxSessions": n}}})),
            )
            .await
            .unwrap();
    }

    pub async fn configuration(&self, name: &str, spec: serde_json::Value) {
        self.create::<SwitchPortConfiguration>(json!({
            "apiVersion": "patchbay.dev/v1alpha1", "kind": "SwitchPortConfiguration",
            "metadata": {"name": name}, "spec": spec
        }))
        .await;
    }

    pub async fn link(&self, port: &str, configuration: Option<&str>) {
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

    pub async fn wait_for(
        &self,
        port: &str,
        what: &str,
        check: impl Fn(&SwitchPort) -> bool,
    ) -> SwitchPort {
        self.wait_obj(port, what, check).await
    }

    /// Waits for `port` to read back Active carrying configuration `configuration`.
    pub async fn wait_carrying(&self, port: &str, configuration: &str) -> SwitchPort {
        self.wait_for(port, &format!("Active on {configuration}"), |sp| {
            let st = sp.status.as_ref();
            st.and_then(|s| s.state) == Some(PortState::Active)
                && st
                    .and_then(|s| s.configuration_ref.as_ref())
                    .is_some_and(|c| c.name == configuration)
        })
        .await
    }

    /// Polls `name` of kind K until `check` holds (30 s).
    pub async fn wait_obj<K>(&self, name: &str, what: &str, check: impl Fn(&K) -> bool) -> K
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
            + Clone
            + serde::de::DeserializeOwned
            + serde::Serialize
            + std::fmt::Debug,
    {
        self.wait_obj_within(30, name, what, check).await
    }

    /// Polls `name` of kind K until `check` holds (`secs`).
    pub async fn wait_obj_within<K>(
        &self,
        secs: u64,
        name: &str,
        what: &str,
        check: impl Fn(&K) -> bool,
    ) -> K
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
            + Clone
            + serde::de::DeserializeOwned
            + serde::Serialize
            + std::fmt::Debug,
    {
        let api: Api<K> = self.api();
        eventually_seen(secs, what, || async {
            match api.get_opt(name).await {
                Ok(Some(o)) if check(&o) => Ok(o),
                Ok(Some(o)) => Err(without_metadata(&o)),
                Ok(None) => Err(format!("{name}: not found")),
                Err(e) => Err(format!("{name}: {e}")),
            }
        })
        .await
    }

    pub async fn wait_state(&self, port: &str, state: PortState) -> SwitchPort {
        self.wait_for(port, &format!("{port} to be {state}"), |p| {
            p.status.as_ref().and_then(|s| s.state) == Some(state)
        })
        .await
    }

    /// [`Env::wait_state`] for up to `secs` (a backend whose every apply is two
    /// Ansible runs needs longer than 30 s on a loaded machine).
    pub async fn wait_state_within(&self, port: &str, state: PortState, secs: u64) -> SwitchPort {
        let api: Api<SwitchPort> = self.api();
        eventually_seen(secs, &format!("{port} to be {state}"), || async {
            match api.get_opt(port).await {
                Ok(Some(p)) if p.status.as_ref().and_then(|s| s.state) == Some(state) => Ok(p),
                Ok(Some(p)) => Err(without_metadata(&p)),
                Ok(None) => Err(format!("{port}: not found")),
                Err(e) => Err(format!("{port}: {e}")),
            }
        })
        .await
    }

    /// The Warning Events about the object `name` (of any kind) in the test's
    /// namespace.
    pub async fn warnings(&self, name: &str) -> Vec<Event> {
        super::warnings(&self.api(), name).await
    }
}

/// Switch `name` on ProviderSwitch `name`, its ports the given (key, device port)
/// pairs.
fn switch_object(name: &str, ports: &[(&str, &str)]) -> serde_json::Value {
    let ports: serde_json::Map<String, serde_json::Value> = ports
        .iter()
        .map(|(k, dev)| (k.to_string(), json!({ "name": dev })))
        .collect();
    json!({
        "apiVersion": "patchbay.dev/v1alpha1", "kind": "Switch",
        "metadata": {"name": name},
        "spec": {"provider": {"name": name}, "ports": ports}
    })
}

/// An object as JSON without its metadata (managed fields drown what a timeout
/// needs to show: the spec and the status).
fn without_metadata(o: &impl serde::Serialize) -> String {
    let mut v = serde_json::to_value(o).unwrap_or_default();
    if let Some(map) = v.as_object_mut() {
        map.remove("metadata");
    }
    serde_json::to_string_pretty(&v).unwrap_or_default()
}

/// The condition `type_` of an object's conditions: (status, reason, message).
pub fn find_condition(
    conditions: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition],
    type_: &str,
) -> Option<(String, String, String)> {
    conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

pub fn condition(p: &SwitchPort, type_: &str) -> Option<(String, String, String)> {
    find_condition(&p.status.as_ref()?.conditions, type_)
}

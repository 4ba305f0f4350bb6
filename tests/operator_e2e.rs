//! The operator end to end: every seed 003 workflow through the real controllers, on
//! devplane (or a real cluster with `PATCHBAY_E2E_CLUSTER=kubeconfig`) with the
//! fixture backend. Device state is read back from the fixture device itself, and
//! its operation log proves what was — and was not — sent.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::{
    Api, DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams, WatchEvent,
    WatchParams,
};
use patchbay::api::{PortState, ProviderSwitch, Switch, SwitchPort, SwitchPortConfiguration, crds};
use patchbay::backends::{Backends, FixtureRegistry};
use patchbay::decide::state_machine::Backoff;
use patchbay::settings::Settings;
use patchbay_providers::fixture::{FixtureFailure, FixtureSwitch, LoggedOperation};
use patchbay_providers::values::{PortName, VlanId};
use patchbay_providers::{AdminState, VlanMode};
use serde_json::json;
use support::{Cluster, eventually};
use tokio::sync::oneshot;

struct Env {
    cluster: Cluster,
    fixtures: FixtureRegistry,
    operator: Option<(tokio::task::JoinHandle<()>, oneshot::Sender<()>)>,
    settings: Settings,
}

fn test_settings(namespace: &str) -> Settings {
    Settings {
        namespace: Some(namespace.into()),
        batch_window: Duration::from_millis(30),
        // The whole window: tests that expect one batch do not depend on timing.
        batch_quiet: Duration::from_millis(30),
        drift_interval: Duration::from_millis(400),
        max_sessions: 1,
        backoff: Backoff {
            base: Duration::from_millis(200),
            cap: Duration::from_secs(1),
        },
        rechecks_per_second: patchbay::decide::retry::RECHECKS_PER_SECOND,
        fixture_latency: Duration::from_millis(2),
        fixture_state_dir: None,
        batch_timeout: None,
        ansible_playbook: "ansible-playbook".into(),
        tenancy: None,
        bgp_nodes: None,
        metal3_switches: false,
        metal3_provisioning: None,
        rollout: Default::default(),
    }
}

impl Env {
    async fn start(test: &str) -> Env {
        Self::start_with(test, |_| {}).await
    }

    /// Like [`Env::start`], with the test's own changes to the settings.
    async fn start_with(test: &str, edit: impl FnOnce(&mut Settings)) -> Env {
        let cluster = Cluster::start(test).await;
        for (_, crd) in crds() {
            cluster.install_crd(crd).await;
        }
        let mut settings = test_settings(&cluster.namespace);
        edit(&mut settings);
        let mut env = Env {
            cluster,
            fixtures: FixtureRegistry::default(),
            operator: None,
            settings,
        };
        env.start_operator();
        env
    }

    fn start_operator(&mut self) {
        let (stop, stopped) = oneshot::channel::<()>();
        let backends = Backends {
            fixtures: self.fixtures.clone(),
            fixture_latency: self.settings.fixture_latency,
            fixture_log_limit: None,
            ansible_playbook: self.settings.ansible_playbook.clone(),
            ..Backends::default()
        };
        let handle = tokio::spawn(patchbay::controllers::run(
            self.cluster.client.clone(),
            self.settings.clone(),
            backends,
            patchbay::probes::Probes::default(),
            async move {
                let _ = stopped.await;
            },
        ));
        self.operator = Some((handle, stop));
    }

    /// Kills the operator at once (no graceful shutdown), as a crash would.
    fn kill_operator(&mut self) {
        if let Some((handle, _stop)) = self.operator.take() {
            handle.abort();
        }
    }

    fn ns(&self) -> &str {
        &self.cluster.namespace
    }

    fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        Api::namespaced(self.cluster.client.clone(), self.ns())
    }

    /// A Secret, a fixture ProviderSwitch and a Switch with these ports
    /// (key, device port, vlanRange).
    async fn switch(&self, name: &str, ports: &[(&str, &str, Option<&str>)], drift_policy: &str) {
        let secrets: Api<Secret> = self.api();
        let secret = Secret {
            metadata: ObjectMeta {
                name: Some(format!("{name}-login")),
                ..Default::default()
            },
            string_data: Some(BTreeMap::from([
                ("username".to_string(), "patchbay".to_string()),
                ("password".to_string(), "not-logged-anywhere".to_string()),
            ])),
            ..Default::default()
        };
        secrets
            .create(&PostParams::default(), &secret)
            .await
            .unwrap();
        let provider: ProviderSwitch = serde_json::from_value(json!({
            "apiVersion": "patchbay.dev/v1alpha1", "kind": "ProviderSwitch",
            "metadata": {"name": name},
            "spec": {"backend": "fixture", "os": "fixture", "address": "127.0.0.1",
                     "credentialsSecretRef": {"name": format!("{name}-login")}}
        }))
        .unwrap();
        self.api::<ProviderSwitch>()
            .create(&PostParams::default(), &provider)
            .await
            .unwrap();
        let port_map: serde_json::Map<String, serde_json::Value> = ports
            .iter()
            .map(|(k, dev, range)| {
                let mut v = json!({"name": dev});
                if let Some(r) = range {
                    v["vlanRange"] = json!(r);
                }
                (k.to_string(), v)
            })
            .collect();
        let switch: Switch = serde_json::from_value(json!({
            "apiVersion": "patchbay.dev/v1alpha1", "kind": "Switch",
            "metadata": {"name": name},
            "spec": {"provider": {"name": name}, "driftPolicy": drift_policy, "ports": port_map}
        }))
        .unwrap();
        self.api::<Switch>()
            .create(&PostParams::default(), &switch)
            .await
            .unwrap();
        for (key, _, _) in ports {
            self.wait_state(key, PortState::Idle).await;
        }
    }

    /// A switch with ports `p1..pN` on `Gi0/1..N`; returns (key, device port) pairs.
    async fn switch_of(&self, name: &str, n: usize) -> Vec<(String, String)> {
        let ports: Vec<(String, String)> = (1..=n)
            .map(|i| (format!("p{i}"), format!("Gi0/{i}")))
            .collect();
        let refs: Vec<(&str, &str, Option<&str>)> = ports
            .iter()
            .map(|(k, d)| (k.as_str(), d.as_str(), None))
            .collect();
        self.switch(name, &refs, "Reconcile").await;
        ports
    }

    async fn configuration(&self, name: &str, spec: serde_json::Value) {
        let cfg: SwitchPortConfiguration = serde_json::from_value(json!({
            "apiVersion": "patchbay.dev/v1alpha1", "kind": "SwitchPortConfiguration",
            "metadata": {"name": name}, "spec": spec
        }))
        .unwrap();
        self.api::<SwitchPortConfiguration>()
            .create(&PostParams::default(), &cfg)
            .await
            .unwrap();
    }

    async fn link(&self, port: &str, configuration: Option<&str>) {
        let value = configuration.map(|c| json!({"name": c}));
        self.api::<SwitchPort>()
            .patch(
                port,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"configuration": value}})),
            )
            .await
            .unwrap();
    }

    async fn wait_state(&self, port: &str, state: PortState) -> SwitchPort {
        let api: Api<SwitchPort> = self.api();
        eventually(20, &format!("{port} to be {state}"), || async {
            let p = api.get_opt(port).await.ok()??;
            (p.status.as_ref()?.state == Some(state)).then_some(p)
        })
        .await
    }

    async fn wait_for<F>(&self, port: &str, what: &str, check: F) -> SwitchPort
    where
        F: Fn(&SwitchPort) -> bool,
    {
        let api: Api<SwitchPort> = self.api();
        eventually(20, what, || async {
            let p = api.get_opt(port).await.ok()??;
            check(&p).then_some(p)
        })
        .await
    }

    fn device(&self, switch: &str) -> FixtureSwitch {
        self.fixtures
            .get(self.ns(), switch)
            .expect("fixture device exists")
    }

    async fn finish(mut self) {
        if let Some((handle, stop)) = self.operator.take() {
            let _ = stop.send(());
            let _ = tokio::time::timeout(Duration::from_secs(5), handle).await;
        }
        self.cluster.finish().await;
    }
}

fn p(name: &str) -> PortName {
    PortName::parse(name).unwrap()
}

fn vlan(n: u16) -> VlanId {
    VlanId::new(n).unwrap()
}

fn ready(port: &SwitchPort) -> Option<(String, String, String)> {
    port.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

#[tokio::test]
async fn ports_follow_their_configuration_through_every_workflow() {
    let env = Env::start("workflows").await;
    env.switch(
        "tor-1",
        &[("server-7-eth0", "Gi0/7", Some("10, 100-199"))],
        "Reconcile",
    )
    .await;
    let device = env.device("tor-1");
    // Creation: the Switch controller made the port, owned by the Switch.
    let port = env.wait_state("server-7-eth0", PortState::Idle).await;
    assert_eq!(port.owner_references()[0].kind, "Switch");
    assert_eq!(
        port.status.as_ref().unwrap().device_port.as_deref(),
        Some("Gi0/7")
    );

    // Provisioning: configure an access VLAN.
    env.configuration(
        "provisioning",
        json!({"untaggedVLAN": 10, "description": "pxe"}),
    )
    .await;
    env.link("server-7-eth0", Some("provisioning")).await;
    let port = env.wait_state("server-7-eth0", PortState::Active).await;
    let status = port.status.clone().unwrap();
    assert_eq!(status.configuration_ref.unwrap().name, "provisioning");
    assert!(status.configuration_hash.is_some());
    assert_eq!(status.observed_generation, port.metadata.generation);
    assert_eq!(ready(&port).unwrap().0, "True");
    assert_eq!(
        device.port_state(&p("Gi0/7")).unwrap().vlans,
        Some(VlanMode::Access { vlan: vlan(10) })
    );

    // Update: a new reference (the tenant's trunk).
    env.configuration(
        "tenant",
        json!({"untaggedVLAN": 100, "vlans": [{"id": 101}, {"id": 102}]}),
    )
    .await;
    env.link("server-7-eth0", Some("tenant")).await;
    env.wait_for("server-7-eth0", "the tenant configuration applied", |p| {
        p.status.as_ref().is_some_and(|s| {
            s.state == Some(PortState::Active)
                && s.configuration_ref
                    .as_ref()
                    .is_some_and(|r| r.name == "tenant")
        })
    })
    .await;
    let expected_trunk = |allowed: &[u16]| VlanMode::Trunk {
        native: Some(vlan(100)),
        allowed: allowed.iter().map(|v| vlan(*v)).collect(),
    };
    assert_eq!(
        device.port_state(&p("Gi0/7")).unwrap().vlans,
        Some(expected_trunk(&[101, 102]))
    );

    // Update: the same reference, an edited configuration.
    let before = env.api::<SwitchPort>().get("server-7-eth0").await.unwrap();
    env.api::<SwitchPortConfiguration>()
        .patch(
            "tenant",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"vlans": [{"id": 101}, {"id": 102}, {"id": 150}]}})),
        )
        .await
        .unwrap();
    eventually(20, "the edited configuration on the device", || async {
        (device.port_state(&p("Gi0/7")).unwrap().vlans == Some(expected_trunk(&[101, 102, 150])))
            .then_some(())
    })
    .await;
    let after = env.wait_state("server-7-eth0", PortState::Active).await;
    assert_ne!(
        before.status.unwrap().configuration_hash,
        after.status.unwrap().configuration_hash,
        "the applied hash follows the edit"
    );

    // Deprovision: reference cleared -> Cleaning -> Idle, device clean, port up.
    env.link("server-7-eth0", None).await;
    let idle = env.wait_state("server-7-eth0", PortState::Idle).await;
    assert!(idle.status.unwrap().configuration_ref.is_none());
    let clean = device.port_state(&p("Gi0/7")).unwrap();
    assert_eq!(clean.vlans, Some(VlanMode::Unconfigured));
    assert_eq!(clean.admin, Some(AdminState::Up));
    assert_eq!(clean.description, Some(None));

    // Every state the port came to rest in left an Event on it; work under way
    // (Configuring, Cleaning) left none: one Event per link, not two.
    let reasons: Vec<String> = support::events_about(&env.api(), "server-7-eth0")
        .await
        .into_iter()
        .filter_map(|e| e.reason)
        .collect();
    for reason in ["Idle", "Active"] {
        assert!(
            reasons.iter().any(|r| r == reason),
            "no {reason} event in {reasons:?}"
        );
    }
    for reason in ["Configuring", "Cleaning"] {
        assert!(
            !reasons.iter().any(|r| r == reason),
            "a {reason} event in {reasons:?}"
        );
    }
    env.finish().await;
}

#[tokio::test]
async fn deleting_a_switch_cleans_its_ports_first_then_the_switch_then_the_provider() {
    let env = Env::start("deletion").await;
    env.switch(
        "tor-1",
        &[("a", "Gi0/1", None), ("b", "Gi0/2", None)],
        "Reconcile",
    )
    .await;
    env.configuration("cfg", json!({"untaggedVLAN": 20})).await;
    env.link("a", Some("cfg")).await;
    env.link("b", Some("cfg")).await;
    env.wait_state("a", PortState::Active).await;
    env.wait_state("b", PortState::Active).await;
    let device = env.device("tor-1");

    let start = env
        .api::<SwitchPort>()
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let deleted_rvs = |api_events: Vec<(String, u64)>| api_events;
    let watch_deletes =
        |kind: &'static str,
         stream: futures::stream::BoxStream<'static, Result<(String, u64), ()>>| {
            tokio::spawn(async move {
                stream
                    .filter_map(|e| async move { e.ok() })
                    .map(move |(n, rv)| (format!("{kind}/{n}"), rv))
                    .collect::<Vec<_>>()
                    .await
            })
        };
    fn deletions<K>(
        api: Api<K>,
        rv: String,
    ) -> futures::stream::BoxStream<'static, Result<(String, u64), ()>>
    where
        K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
    {
        async_stream(api, rv)
    }
    fn async_stream<K>(
        api: Api<K>,
        rv: String,
    ) -> futures::stream::BoxStream<'static, Result<(String, u64), ()>>
    where
        K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
    {
        futures::stream::once(async move {
            api.watch(&WatchParams::default().timeout(15), &rv)
                .await
                .map_err(|_| ())
        })
        .filter_map(|s| async move { s.ok() })
        .flatten()
        .filter_map(|e| async move {
            match e {
                Ok(WatchEvent::Deleted(o)) => Some(Ok((
                    o.meta().name.clone().unwrap_or_default(),
                    o.meta()
                        .resource_version
                        .as_deref()
                        .unwrap_or("0")
                        .parse()
                        .unwrap_or(0),
                ))),
                _ => None,
            }
        })
        .take(2)
        .boxed()
    }
    let ports = watch_deletes(
        "SwitchPort",
        deletions(env.api::<SwitchPort>(), start.clone()),
    );
    let switches = watch_deletes(
        "Switch",
        deletions(env.api::<Switch>(), start.clone())
            .take(1)
            .boxed(),
    );
    let providers = watch_deletes(
        "ProviderSwitch",
        deletions(env.api::<ProviderSwitch>(), start)
            .take(1)
            .boxed(),
    );
    tokio::time::sleep(Duration::from_millis(200)).await;

    // The user deletes everything at once, provider first.
    env.api::<ProviderSwitch>()
        .delete("tor-1", &DeleteParams::default())
        .await
        .unwrap();
    env.api::<Switch>()
        .delete("tor-1", &DeleteParams::default())
        .await
        .unwrap();

    let mut order = deleted_rvs(ports.await.unwrap());
    order.extend(switches.await.unwrap());
    order.extend(providers.await.unwrap());
    order.sort_by_key(|(_, rv)| *rv);
    let names: Vec<&str> = order.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names.len(), 4, "{names:?}");
    assert!(
        names[0].starts_with("SwitchPort/") && names[1].starts_with("SwitchPort/"),
        "{names:?}"
    );
    assert_eq!(&names[2..], ["Switch/tor-1", "ProviderSwitch/tor-1"]);
    // Each port was cleaned on the device before it went.
    for port in ["Gi0/1", "Gi0/2"] {
        assert_eq!(
            device.port_state(&p(port)).unwrap().vlans,
            Some(VlanMode::Unconfigured)
        );
    }
    let resets = device
        .operations()
        .iter()
        .filter(|o| matches!(o, LoggedOperation::Reset { changed: true, .. }))
        .count();
    assert_eq!(resets, 2);
    env.finish().await;
}

#[tokio::test]
async fn drift_is_corrected_or_only_reported_as_the_switch_policy_says() {
    let env = Env::start("drift").await;
    env.switch("fix", &[("fix-p", "Gi0/1", None)], "Reconcile")
        .await;
    env.switch("report", &[("report-p", "Gi0/1", None)], "ReportOnly")
        .await;
    env.configuration("cfg", json!({"untaggedVLAN": 30})).await;
    env.link("fix-p", Some("cfg")).await;
    env.link("report-p", Some("cfg")).await;
    env.wait_state("fix-p", PortState::Active).await;
    env.wait_state("report-p", PortState::Active).await;
    let (fix, report) = (env.device("fix"), env.device("report"));
    let wanted = Some(VlanMode::Access { vlan: vlan(30) });

    // Someone changes both ports by hand.
    for d in [&fix, &report] {
        d.tamper(&p("Gi0/1"), |o| {
            o.vlans = Some(VlanMode::Access { vlan: vlan(999) })
        });
    }
    eventually(20, "the Reconcile port to be restored", || async {
        (fix.port_state(&p("Gi0/1")).unwrap().vlans == wanted).then_some(())
    })
    .await;
    env.wait_state("fix-p", PortState::Active).await;

    let drifted = env
        .wait_for("report-p", "a Drifted condition", |p| {
            p.status.as_ref().is_some_and(|s| {
                s.conditions
                    .iter()
                    .any(|c| c.type_ == "Drifted" && c.status == "True")
            })
        })
        .await;
    assert_eq!(drifted.status.unwrap().state, Some(PortState::Active));
    assert_eq!(
        report.port_state(&p("Gi0/1")).unwrap().vlans,
        Some(VlanMode::Access { vlan: vlan(999) }),
        "ReportOnly leaves the device alone"
    );
    let writes = report.write_count();
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert_eq!(
        report.write_count(),
        writes,
        "ReportOnly never writes to the device"
    );
    assert!(
        writes <= 1,
        "only the first apply wrote: {:?}",
        report.operations()
    );
    // The engineer puts it back by hand: the condition clears.
    report.tamper(&p("Gi0/1"), |o| {
        o.vlans = Some(VlanMode::Access { vlan: vlan(30) })
    });
    env.wait_for("report-p", "Drifted to clear", |p| {
        p.status.as_ref().is_some_and(|s| {
            s.conditions
                .iter()
                .any(|c| c.type_ == "Drifted" && c.status == "False")
        })
    })
    .await;
    env.finish().await;
}

#[tokio::test]
async fn a_device_outage_sets_a_condition_backs_off_and_recovers() {
    let env = Env::start("outage").await;
    env.switch("tor-1", &[("p", "Gi0/1", None)], "Reconcile")
        .await;
    env.configuration("cfg", json!({"untaggedVLAN": 40})).await;
    let device = env.device("tor-1");
    device.set_unreachable(true);
    env.link("p", Some("cfg")).await;
    let failing = env
        .wait_for("p", "repeated failures", |p| {
            p.status
                .as_ref()
                .is_some_and(|s| s.failure_count.unwrap_or(0) >= 2)
        })
        .await;
    let status = failing.status.clone().unwrap();
    assert_eq!(status.state, Some(PortState::Configuring));
    let (ok, reason, message) = ready(&failing).unwrap();
    assert_eq!(
        (ok.as_str(), reason.as_str()),
        ("False", "DeviceUnreachable")
    );
    assert!(message.contains("cannot reach"), "{message}");
    assert!(status.last_error.unwrap().contains("cannot reach"));
    assert!(
        !message.contains("not-logged-anywhere"),
        "credentials never appear in status"
    );

    device.set_unreachable(false);
    let recovered = env.wait_state("p", PortState::Active).await;
    let s = recovered.status.unwrap();
    assert!(s.failure_count.is_none() && s.last_error.is_none());
    assert_eq!(
        device.port_state(&p("Gi0/1")).unwrap().vlans,
        Some(VlanMode::Access { vlan: vlan(40) })
    );
    env.finish().await;
}

#[tokio::test]
async fn an_operator_killed_while_configuring_resumes_and_finishes() {
    let mut env = Env::start("restart").await;
    env.switch("tor-1", &[("p", "Gi0/1", None)], "Reconcile")
        .await;
    env.configuration(
        "cfg",
        json!({"untaggedVLAN": 50, "vlans": [{"id": 51}], "description": "after restart"}),
    )
    .await;
    let device = env.device("tor-1");
    device.set_latency(Duration::from_millis(1500));
    env.link("p", Some("cfg")).await;
    env.wait_state("p", PortState::Configuring).await;
    env.kill_operator();
    tokio::time::sleep(Duration::from_millis(300)).await;
    device.set_latency(Duration::from_millis(2));
    env.start_operator();
    let port = env.wait_state("p", PortState::Active).await;
    assert_eq!(port.status.unwrap().configuration_ref.unwrap().name, "cfg");
    let state = device.port_state(&p("Gi0/1")).unwrap();
    assert_eq!(
        state.vlans,
        Some(VlanMode::Trunk {
            native: Some(vlan(50)),
            allowed: [vlan(51)].into_iter().collect()
        })
    );
    assert_eq!(
        state
            .description
            .flatten()
            .map(|d| d.to_string())
            .as_deref(),
        Some("after restart")
    );
    assert_eq!(state.admin, Some(AdminState::Up));
    env.finish().await;
}

/// A restart (or a takeover) with every port Active and nothing changed rewrites
/// nothing: no device write, no port or Switch written. The new operator is live: a
/// port changed after it started is applied.
#[tokio::test]
async fn an_operator_restarted_with_every_port_active_writes_nothing() {
    let mut env = Env::start("restart-steady").await;
    env.switch(
        "tor-1",
        &[
            ("a", "Gi0/1", None),
            ("b", "Gi0/2", None),
            ("c", "Gi0/3", None),
        ],
        "Reconcile",
    )
    .await;
    env.configuration("cfg", json!({"untaggedVLAN": 20})).await;
    env.configuration("other", json!({"untaggedVLAN": 30}))
        .await;
    for port in ["a", "b", "c"] {
        env.link(port, Some("cfg")).await;
    }
    for port in ["a", "b", "c"] {
        env.wait_state(port, PortState::Active).await;
    }
    let switches: Api<Switch> = env.api();
    eventually(20, "the Switch shows its device answering", || async {
        let sw = switches.get("tor-1").await.ok()?;
        let reachable = sw
            .status?
            .conditions
            .into_iter()
            .any(|c| c.type_ == "DeviceReachable" && c.status == "True");
        reachable.then_some(())
    })
    .await;
    // Let the last status writes land, then note every object's version.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let ports: Api<SwitchPort> = env.api();
    let mut before = Vec::new();
    for port in ["a", "b", "c"] {
        before.push(ports.get(port).await.unwrap().resource_version());
    }
    let switch_before = switches.get("tor-1").await.unwrap().resource_version();
    let device = env.device("tor-1");
    device.clear_log();
    // Every operation that would change a port, changed or not (a re-apply of an
    // unchanged port would change nothing and still be one).
    let sent = |device: &FixtureSwitch| -> Vec<LoggedOperation> {
        device
            .operations()
            .into_iter()
            .filter(|o| {
                matches!(
                    o,
                    LoggedOperation::Set { .. }
                        | LoggedOperation::Reset { .. }
                        | LoggedOperation::Batch { .. }
                )
            })
            .collect()
    };
    env.kill_operator();
    // The drift sweep far away: a resumed switch is swept on its own schedule.
    env.settings.drift_interval = Duration::from_secs(3600);
    env.start_operator();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(sent(&device), [], "nothing sent to the device");
    let mut after = Vec::new();
    for port in ["a", "b", "c"] {
        after.push(ports.get(port).await.unwrap().resource_version());
    }
    assert_eq!(before, after, "no port was written");
    assert_eq!(
        switch_before,
        switches.get("tor-1").await.unwrap().resource_version(),
        "the Switch was not written"
    );
    // Live: a change made now is applied.
    env.link("b", Some("other")).await;
    eventually(20, "the change applied", || async {
        (device.port_state(&p("Gi0/2"))?.vlans == Some(VlanMode::Access { vlan: vlan(30) }))
            .then_some(())
    })
    .await;
    let sent = sent(&device);
    assert_eq!(sent.len(), 2, "one batch of the changed port: {sent:?}");
    env.finish().await;
}

#[tokio::test]
async fn an_invalid_configuration_is_refused_naming_the_field_and_the_device_is_untouched() {
    let env = Env::start("invalid").await;
    env.switch("tor-1", &[("p", "Gi0/1", Some("1, 6-10"))], "Reconcile")
        .await;
    let device = env.device("tor-1");
    device.clear_log();
    // Valid for the schema, not for this port's vlanRange.
    env.configuration("too-high", json!({"untaggedVLAN": 100}))
        .await;
    env.link("p", Some("too-high")).await;
    let refused = env
        .wait_for("p", "the refusal", |p| {
            ready(p).is_some_and(|r| r.1 == "InvalidConfiguration")
        })
        .await;
    let (_, _, message) = ready(&refused).unwrap();
    assert!(message.contains("spec.untaggedVLAN"), "{message}");
    assert!(message.contains("outside the vlanRange"), "{message}");
    assert_eq!(refused.status.unwrap().state, Some(PortState::Configuring));
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(device.write_count(), 0, "{:?}", device.operations());
    assert!(
        !device.operations().iter().any(|o| matches!(
            o,
            LoggedOperation::Set { .. } | LoggedOperation::Batch { .. }
        )),
        "nothing was sent: {:?}",
        device.operations()
    );
    // Fixing the configuration lets the port go Active.
    env.api::<SwitchPortConfiguration>()
        .patch(
            "too-high",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"untaggedVLAN": 7}})),
        )
        .await
        .unwrap();
    env.wait_state("p", PortState::Active).await;
    env.finish().await;
}

#[tokio::test]
async fn ports_of_one_switch_are_batched_into_few_sessions() {
    let env = Env::start("batching").await;
    let ports = env.switch_of("tor-1", 12).await;
    env.configuration("cfg", json!({"untaggedVLAN": 60})).await;
    let device = env.device("tor-1");
    device.clear_log();
    futures::future::join_all(ports.iter().map(|(k, _)| env.link(k, Some("cfg")))).await;
    for (k, _) in &ports {
        env.wait_state(k, PortState::Active).await;
    }
    let batches: Vec<usize> = device
        .operations()
        .iter()
        .filter_map(|o| match o {
            LoggedOperation::Batch { size } => Some(*size),
            _ => None,
        })
        .collect();
    assert_eq!(
        batches.iter().sum::<usize>(),
        12,
        "{batches:?} {:#?}",
        device
            .operations()
            .iter()
            .filter(|o| !matches!(o, LoggedOperation::Get { .. }))
            .collect::<Vec<_>>()
    );
    assert!(
        batches.len() < 12,
        "12 ports should share batches: {batches:?}"
    );
    assert_eq!(device.max_concurrent_sessions(), 1);
    env.finish().await;
}

#[tokio::test]
async fn the_skip_cleanup_annotation_deletes_a_dead_switch_without_touching_it() {
    let env = Env::start("escape").await;
    env.switch("tor-1", &[("p", "Gi0/1", None)], "Reconcile")
        .await;
    env.configuration("cfg", json!({"untaggedVLAN": 70})).await;
    env.link("p", Some("cfg")).await;
    env.wait_state("p", PortState::Active).await;
    let device = env.device("tor-1");
    // The switch is gone for good.
    device.set_unreachable(true);
    let switches: Api<Switch> = env.api();
    switches
        .patch(
            "tor-1",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"annotations": {"patchbay.dev/skip-device-cleanup": "true"}}}),
            ),
        )
        .await
        .unwrap();
    device.clear_log();
    switches
        .delete("tor-1", &DeleteParams::default())
        .await
        .unwrap();
    env.api::<ProviderSwitch>()
        .delete("tor-1", &DeleteParams::default())
        .await
        .unwrap();
    let ports: Api<SwitchPort> = env.api();
    let providers: Api<ProviderSwitch> = env.api();
    eventually(20, "port, switch and provider to be deleted", || async {
        let gone = ports.get_opt("p").await.unwrap().is_none()
            && switches.get_opt("tor-1").await.unwrap().is_none()
            && providers.get_opt("tor-1").await.unwrap().is_none();
        gone.then_some(())
    })
    .await;
    assert!(
        device.operations().iter().all(|o| !o.is_write()),
        "{:?}",
        device.operations()
    );
    device.set_unreachable(false);
    assert_eq!(
        device.port_state(&p("Gi0/1")).unwrap().vlans,
        Some(VlanMode::Access { vlan: vlan(70) }),
        "the device was not touched"
    );
    env.finish().await;
}

#[tokio::test]
async fn twelve_ports_on_a_dead_switch_cost_one_attempt_per_backoff_step() {
    let env = Env::start("dead-switch").await;
    let ports = env.switch_of("tor-1", 12).await;
    env.configuration("cfg", json!({"untaggedVLAN": 80})).await;
    let device = env.device("tor-1");
    device.set_unreachable(true);
    device.clear_log();
    let start = std::time::Instant::now();
    futures::future::join_all(ports.iter().map(|(k, _)| env.link(k, Some("cfg")))).await;
    for (k, _) in &ports {
        env.wait_for(k, "the port to wait for its switch", |p| {
            ready(p).is_some_and(|(s, r, _)| s == "False" && r == "DeviceUnreachable")
        })
        .await;
    }
    tokio::time::sleep(Duration::from_millis(3000).saturating_sub(start.elapsed())).await;
    let window = start.elapsed();
    // Backoff 0.2 s doubling to 1 s: attempts at about 0, 0.2, 0.6, 1.4, 2.4 s (and
    // the sweep when the switch was still believed up): one per step for all twelve
    // ports, where each port retrying on its own would make 60.
    let attempts = device
        .operations()
        .iter()
        .filter(|o| matches!(o, LoggedOperation::Failed { .. }))
        .count();
    assert!(
        (3..=7).contains(&attempts),
        "{attempts} device attempts in {window:?}"
    );
    // Every port mirrors the switch's count and says when it is tried again.
    for (k, _) in &ports {
        let p = env.api::<SwitchPort>().get(k).await.unwrap();
        let s = p.status.clone().unwrap();
        assert_eq!(s.state, Some(PortState::Configuring));
        assert!(s.failure_count.unwrap_or(0) >= 2, "{k}: {s:?}");
        assert!(s.next_retry_time.is_some());
        assert_eq!(env.warnings(k).await.len(), 1, "{k}: one Warning");
    }
    device.set_unreachable(false);
    for (k, _) in &ports {
        env.wait_state(k, PortState::Active).await;
    }
    for (_, dev) in &ports {
        assert_eq!(
            device.port_state(&p(dev)).unwrap().vlans,
            Some(VlanMode::Access { vlan: vlan(80) })
        );
    }
    env.finish().await;
}

#[tokio::test]
async fn a_repeated_failure_is_one_event_series_not_one_event_per_attempt() {
    let env = Env::start("event-series").await;
    env.switch("tor-1", &[("p", "Gi0/1", None)], "Reconcile")
        .await;
    env.configuration("cfg", json!({"untaggedVLAN": 90})).await;
    let device = env.device("tor-1");
    device.fail_port(&p("Gi0/1"), Some(FixtureFailure::Rejected));
    env.link("p", Some("cfg")).await;
    // The device refuses the port's command: the port's own failure, retried after
    // 0.2, 0.4, 0.8, 1 s...
    let failing = env
        .wait_for("p", "four failures", |p| {
            p.status
                .as_ref()
                .is_some_and(|s| s.failure_count.unwrap_or(0) >= 4)
        })
        .await;
    let (_, reason, _) = ready(&failing).unwrap();
    assert_eq!(reason, "CommandRejected");
    let count = failing.status.unwrap().failure_count.unwrap();
    let warnings = env.warnings("p").await;
    assert_eq!(warnings.len(), 1, "one Event object: {warnings:?}");
    let series = warnings[0].series.clone().expect("a series");
    assert!(
        (count - 1..=count + 1).contains(&series.count),
        "series count {} vs {count} failures",
        series.count
    );
    device.fail_port(&p("Gi0/1"), None);
    env.wait_state("p", PortState::Active).await;
    env.finish().await;
}

impl Env {
    /// The Warning Events about `name`.
    async fn warnings(&self, name: &str) -> Vec<k8s_openapi::api::events::v1::Event> {
        support::warnings(&self.api(), name).await
    }
}

/// Runs the machine's kubectl in the test's namespace; returns stdout.
fn kubectl(env: &Env, args: &[&str]) -> String {
    let mut all = vec!["--namespace", env.ns()];
    all.extend_from_slice(args);
    env.cluster.kubectl_ok(&all)
}

#[tokio::test]
async fn kubectl_describe_and_events_show_the_ports_transitions_and_failures() {
    let env = Env::start("kubectl-events").await;
    env.switch("tor-1", &[("p", "Gi0/1", None)], "Reconcile")
        .await;
    env.configuration("cfg", json!({"untaggedVLAN": 95})).await;
    let device = env.device("tor-1");
    device.fail_port(&p("Gi0/1"), Some(FixtureFailure::Rejected));
    env.link("p", Some("cfg")).await;
    env.wait_for("p", "three failures", |p| {
        p.status
            .as_ref()
            .is_some_and(|s| s.failure_count.unwrap_or(0) >= 3)
    })
    .await;
    device.fail_port(&p("Gi0/1"), None);
    env.wait_state("p", PortState::Active).await;
    let described = kubectl(&env, &["describe", "switchport", "p"]);
    let events = described
        .split_once("Events:")
        .map(|(_, e)| e.to_owned())
        .unwrap_or_default();
    // Every state the port rested in, and the repeated failure as one line with
    // its count.
    for want in ["Idle", "Active", "CommandRejected"] {
        assert!(events.contains(want), "{want} in:\n{described}");
    }
    let failure = events
        .lines()
        .find(|l| l.contains("CommandRejected"))
        .unwrap();
    assert!(failure.contains("Warning"), "{failure}");
    assert!(failure.contains("(x"), "a series with its count: {failure}");
    assert!(failure.contains("patchbay"), "{failure}");
    assert_eq!(
        events
            .lines()
            .filter(|l| l.contains("CommandRejected"))
            .count(),
        1,
        "{events}"
    );
    let listed = kubectl(&env, &["events", "--for", "switchport/p"]);
    for want in ["Active", "CommandRejected", "SwitchPort/p"] {
        assert!(listed.contains(want), "{want} in:\n{listed}");
    }
    env.finish().await;
}

#[tokio::test]
async fn a_switch_and_its_provider_switch_may_have_different_names() {
    let env = Env::start("different-names").await;
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some("rack-7-login".into()),
            ..Default::default()
        },
        string_data: Some(BTreeMap::from([
            ("username".to_string(), "patchbay".to_string()),
            ("password".to_string(), "x".to_string()),
        ])),
        ..Default::default()
    };
    env.api::<Secret>()
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    let provider: ProviderSwitch = serde_json::from_value(json!({
        "apiVersion": "patchbay.dev/v1alpha1", "kind": "ProviderSwitch",
        "metadata": {"name": "rack-7-fixture"},
        "spec": {"backend": "fixture", "os": "fixture", "address": "127.0.0.1",
                 "credentialsSecretRef": {"name": "rack-7-login"}}
    }))
    .unwrap();
    env.api::<ProviderSwitch>()
        .create(&PostParams::default(), &provider)
        .await
        .unwrap();
    let switch: Switch = serde_json::from_value(json!({
        "apiVersion": "patchbay.dev/v1alpha1", "kind": "Switch",
        "metadata": {"name": "tor-7"},
        "spec": {"provider": {"name": "rack-7-fixture"}, "ports": {"p": {"name": "Gi0/1"}}}
    }))
    .unwrap();
    env.api::<Switch>()
        .create(&PostParams::default(), &switch)
        .await
        .unwrap();
    env.configuration("cfg", json!({"untaggedVLAN": 77})).await;
    env.wait_state("p", PortState::Idle).await;
    env.link("p", Some("cfg")).await;
    let port = env.wait_state("p", PortState::Active).await;
    let s = port.status.unwrap();
    assert_eq!(s.switch.as_deref(), Some("tor-7"));
    assert_eq!(s.provider.as_deref(), Some("rack-7-fixture"));
    // The device is the provider's: the fixture registry knows it by that name.
    let device = env
        .fixtures
        .get(env.ns(), "rack-7-fixture")
        .expect("the provider's device");
    assert_eq!(
        device.port_state(&p("Gi0/1")).unwrap().vlans,
        Some(VlanMode::Access { vlan: vlan(77) })
    );
    env.finish().await;
}

/// A Switch's spec is validated once per generation (the periodic reconciles skip
/// it): an edit that breaks it is still refused at its next reconcile, naming the
/// field, with nothing sent to the device, and the fix is taken.
#[tokio::test]
async fn a_switch_edited_to_an_invalid_spec_is_refused_and_taken_again_once_fixed() {
    let env = Env::start("switch-edit").await;
    env.switch_of("tor", 2).await;
    let switches: Api<Switch> = env.api();
    let ready = |want: &'static str| {
        let switches = switches.clone();
        async move {
            eventually(20, &format!("Switch tor Ready={want}"), || async {
                let s = switches.get("tor").await.ok()?;
                let status = s.status?;
                let c = status.conditions.iter().find(|c| c.type_ == "Ready")?;
                (c.status == want && status.observed_generation == s.metadata.generation)
                    .then(|| (c.reason.clone(), c.message.clone()))
            })
            .await
        }
    };
    ready("True").await;
    let operations = env.device("tor").operations().len();
    // p2 now names p1's device port.
    let edit = |device: &str| json!({"spec": {"ports": {"p2": {"name": device}}}});
    switches
        .patch("tor", &PatchParams::default(), &Patch::Merge(edit("Gi0/1")))
        .await
        .unwrap();
    let (reason, message) = ready("False").await;
    assert_eq!(reason, "InvalidSwitch", "{message}");
    assert!(
        message.contains("spec.ports[\"p2\"].name") && message.contains("already used"),
        "{message}"
    );
    let writes: Vec<_> = env.device("tor").operations()[operations..]
        .iter()
        .filter(|o| {
            matches!(
                o,
                LoggedOperation::Set { .. } | LoggedOperation::Reset { .. }
            )
        })
        .cloned()
        .collect();
    assert!(
        writes.is_empty(),
        "nothing is sent to the device: {writes:?}"
    );
    switches
        .patch("tor", &PatchParams::default(), &Patch::Merge(edit("Gi0/2")))
        .await
        .unwrap();
    ready("True").await;
    env.finish().await;
}

/// A BGP speaker that stops answering is asked again one interval after each
/// failure, not at every wake of its Switch (here a claim with BGP changing every
/// 200 ms, each change waking every Switch with BGP), and wakes that keep coming do
/// not postpone its passes either; meanwhile its Switch says why, and it is
/// configured again once it answers.
#[tokio::test]
async fn a_bgp_speaker_that_is_down_is_tried_once_per_interval_however_often_its_switch_wakes() {
    let env = Env::start("bgp-speaker-down").await;
    env.switch_of("tor", 1).await;
    let speaker: ProviderSwitch = serde_json::from_value(json!({
        "apiVersion": "patchbay.dev/v1alpha1", "kind": "ProviderSwitch",
        "metadata": {"name": "spk"},
        "spec": {"backend": "fixture", "os": "fixture", "address": "127.0.0.1",
                 "credentialsSecretRef": {"name": "tor-login"}}
    }))
    .unwrap();
    env.api::<ProviderSwitch>()
        .create(&PostParams::default(), &speaker)
        .await
        .unwrap();
    let switches: Api<Switch> = env.api();
    switches
        .patch(
            "tor",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {
                "ports": {"p1": {"name": "Gi0/1", "bgpAddress": "10.0.0.0/31"}},
                "bgp": {"speaker": {"name": "spk"}, "asn": 65000, "routerId": "10.255.0.1",
                        "intervalSeconds": 2},
            }})),
        )
        .await
        .unwrap();
    let configured = |want: &'static str| {
        let switches = switches.clone();
        async move {
            eventually(20, &format!("BgpConfigured={want}"), || async {
                let status = switches.get("tor").await.ok()?.status?;
                let c = status
                    .conditions
                    .iter()
                    .find(|c| c.type_ == "BgpConfigured")?;
                (c.status == want).then(|| c.reason.clone())
            })
            .await
        }
    };
    configured("True").await;
    let device = env.fixtures.get(env.ns(), "spk").expect("the speaker");

    device.set_unreachable(true);
    assert_eq!(configured("False").await, "DeviceUnreachable");
    // A claim with BGP that changes every 200 ms: each change wakes every Switch
    // with BGP.
    let claims: Api<patchbay::api::ServerClaim> = env.api();
    let claim: patchbay::api::ServerClaim = serde_json::from_value(json!({
        "apiVersion": "patchbay.dev/v1alpha1", "kind": "ServerClaim",
        "metadata": {"name": "waker"},
        "spec": {"site": "nowhere", "roles": [{"name": "worker", "count": 1,
                 "bgp": {"asn": 65101, "prefixes": ["192.0.2.0/28"]}}]}
    }))
    .unwrap();
    claims.create(&PostParams::default(), &claim).await.unwrap();
    let before = device.bgp_attempts();
    let window = Duration::from_secs(10);
    let started = std::time::Instant::now();
    let mut n = 0;
    while started.elapsed() < window {
        n += 1;
        claims
            .patch(
                "waker",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": {"wake": n.to_string()}}})),
            )
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let attempts = device.bgp_attempts() - before;
    // One per 2 s interval: 5 in 10 s, one more at an edge. (Fewer: the wakes
    // postponed the passes; more: each wake reached the speaker.)
    assert!(
        (4..=6).contains(&attempts),
        "{attempts} attempts on the speaker in 10 s of {n} claim changes (interval 2 s)"
    );
    let reason = switches
        .get("tor")
        .await
        .unwrap()
        .status
        .unwrap()
        .conditions
        .into_iter()
        .find(|c| c.type_ == "BgpConfigured")
        .map(|c| c.reason)
        .unwrap_or_default();
    assert_eq!(
        reason, "DeviceUnreachable",
        "the condition says why meanwhile"
    );

    device.set_unreachable(false);
    configured("True").await;
    env.finish().await;
}

/// The change a reconcile handed to the worker is answered after its spec changed:
/// the late answer is not taken for the new configuration, which is sent after the
/// old one (one writer, in order) and is what the port ends Active with.
#[tokio::test]
async fn a_result_for_a_port_whose_configuration_changed_meanwhile_is_not_taken() {
    let env = Env::start("handoff-change").await;
    env.switch("tor-1", &[("p", "Gi0/1", None)], "Reconcile")
        .await;
    env.configuration("first", json!({"untaggedVLAN": 71}))
        .await;
    env.configuration("second", json!({"untaggedVLAN": 72}))
        .await;
    let device = env.device("tor-1");
    device.set_latency(Duration::from_millis(1500));
    device.clear_log();
    env.link("p", Some("first")).await;
    env.wait_state("p", PortState::Configuring).await;
    // The first change is on its way to the device; the port changes its mind.
    env.link("p", Some("second")).await;
    let port = env
        .wait_for("p", "Active with the second configuration", |p| {
            let s = p.status.clone().unwrap_or_default();
            s.state == Some(PortState::Active)
                && s.configuration_ref.is_some_and(|r| r.name == "second")
        })
        .await;
    assert!(port.status.is_some());
    let sets: Vec<Option<VlanMode>> = device
        .operations()
        .iter()
        .filter_map(|o| match o {
            LoggedOperation::Set { desired, .. } => Some(Some(desired.vlans.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(
        sets.last(),
        Some(&Some(VlanMode::Access { vlan: vlan(72) })),
        "the last change sent is the second configuration: {sets:?}"
    );
    assert_eq!(
        device.port_state(&p("Gi0/1")).unwrap().vlans,
        Some(VlanMode::Access { vlan: vlan(72) })
    );
    // Nothing is sent once the port is Active (no late re-apply of either).
    let count = device.write_count();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(device.write_count(), count, "{:?}", device.operations());
    env.finish().await;
}

/// A graceful stop while changes are handed off: nothing new is sent, the batches
/// in flight finish on the device and their ports record the answers before the
/// controllers stop.
#[tokio::test]
async fn a_graceful_stop_lets_handed_off_changes_finish() {
    let mut env = Env::start("handoff-stop").await;
    env.switch("tor-1", &[("p", "Gi0/1", None)], "Reconcile")
        .await;
    env.configuration("cfg", json!({"untaggedVLAN": 73})).await;
    let device = env.device("tor-1");
    device.set_latency(Duration::from_millis(2000));
    env.link("p", Some("cfg")).await;
    env.wait_state("p", PortState::Configuring).await;
    // Give the reconcile time to hand the change off (it returns at once).
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (handle, stop) = env.operator.take().expect("the operator runs");
    let _ = stop.send(());
    tokio::time::timeout(Duration::from_secs(20), handle)
        .await
        .expect("run returns once the hand-off is answered")
        .unwrap();
    // The change reached the device before run returned, and the port took the
    // answer and recorded it before the controllers stopped.
    assert_eq!(
        device.port_state(&p("Gi0/1")).unwrap().vlans,
        Some(VlanMode::Access { vlan: vlan(73) })
    );
    let port: SwitchPort = env.api().get("p").await.unwrap();
    assert_eq!(port.status.unwrap().state, Some(PortState::Active));
    // Nothing new was sent while stopping; the next operator has nothing to do.
    let writes = device.write_count();
    device.set_latency(Duration::from_millis(2));
    env.start_operator();
    env.wait_state("p", PortState::Active).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(device.write_count(), writes, "{:?}", device.operations());
    env.finish().await;
}

/// A Switch keeps exactly one SwitchPort per `spec.ports` entry: it creates each
/// missing one once (counted at the API server: however many times the Switch is
/// reconciled before the creates' watch events arrive, here held back 2 s), adopts
/// one a user created ahead of its entry, and deletes one whose entry is removed.
#[tokio::test]
async fn a_switch_creates_each_port_once_adopts_one_made_ahead_and_deletes_a_removed_one() {
    let env = Env::start("switch-ports").await;
    let creates = |env: &Env| {
        env.cluster
            .devplane()
            .map(|plane| plane.request_count("create", "switchports"))
    };
    let before = creates(&env);
    // The port cache lags the creates by 2 s: the Switch's own status write wakes it
    // again before its ports' first events arrive.
    if let Some(plane) = env.cluster.devplane() {
        plane.delay_watch_events("switchports", Duration::from_secs(2));
    }
    env.switch(
        "tor-1",
        &[
            ("p1", "Gi0/1", None),
            ("p2", "Gi0/2", None),
            ("p3", "Gi0/3", None),
        ],
        "Reconcile",
    )
    .await;
    // Let the Switch's later reconciles (its ports' first events) run.
    tokio::time::sleep(Duration::from_secs(3)).await;
    if let (Some(before), Some(after)) = (before, creates(&env)) {
        assert_eq!(after - before, 3, "SwitchPort creates");
    }
    if let Some(plane) = env.cluster.devplane() {
        plane.delay_watch_events("switchports", Duration::ZERO);
    }
    let ahead: SwitchPort = serde_json::from_value(json!({
        "apiVersion": "patchbay.dev/v1alpha1", "kind": "SwitchPort",
        "metadata": {"name": "ahead"}, "spec": {}
    }))
    .unwrap();
    env.api::<SwitchPort>()
        .create(&PostParams::default(), &ahead)
        .await
        .unwrap();
    env.api::<Switch>()
        .patch(
            "tor-1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"ports": {"p3": null, "ahead": {"name": "Gi0/4"}}}})),
        )
        .await
        .unwrap();
    let adopted = env
        .wait_for("ahead", "adopted by its Switch", |p| {
            p.labels().get("patchbay.dev/switch").map(String::as_str) == Some("tor-1")
        })
        .await;
    assert_eq!(adopted.owner_references()[0].kind, "Switch");
    assert_eq!(adopted.owner_references()[0].name, "tor-1");
    let api = env.api::<SwitchPort>();
    eventually(20, "p3 deleted", || async {
        api.get_opt("p3").await.ok()?.is_none().then_some(())
    })
    .await;
    for kept in ["p1", "p2", "ahead"] {
        assert!(api.get_opt(kept).await.unwrap().is_some(), "{kept} kept");
    }
    env.finish().await;
}

/// The access VLAN each device port of `ports` carries on its fixture device.
fn access_vlans(env: &Env, ports: &[(&str, &str)]) -> BTreeMap<String, Option<u16>> {
    ports
        .iter()
        .map(|(switch, dev)| {
            let vlan = match env.device(switch).port_state(&p(dev)).and_then(|s| s.vlans) {
                Some(VlanMode::Access { vlan }) => Some(vlan.get()),
                _ => None,
            };
            (format!("{switch}/{dev}"), vlan)
        })
        .collect()
}

/// Two fixture switches of three ports each (`a1..a3` on tor-a, `b1..b3` on tor-b),
/// every port Active on configuration `shared` (access VLAN 10, `rollout` its
/// policy); returns the (switch, device port) pairs.
async fn shared_fleet(env: &Env, rollout: serde_json::Value) -> Vec<(&'static str, &'static str)> {
    env.switch(
        "tor-a",
        &[
            ("a1", "Gi0/1", None),
            ("a2", "Gi0/2", None),
            ("a3", "Gi0/3", None),
        ],
        "Reconcile",
    )
    .await;
    env.switch(
        "tor-b",
        &[
            ("b1", "Gi0/1", None),
            ("b2", "Gi0/2", None),
            ("b3", "Gi0/3", None),
        ],
        "Reconcile",
    )
    .await;
    env.configuration("shared", json!({"untaggedVLAN": 10, "rollout": rollout}))
        .await;
    for port in ["a1", "a2", "a3", "b1", "b2", "b3"] {
        env.link(port, Some("shared")).await;
    }
    for port in ["a1", "a2", "a3", "b1", "b2", "b3"] {
        env.wait_state(port, PortState::Active).await;
    }
    // The first revision is recorded before the edit.
    env.wait_rollout("the first revision", |r| r.phase == "Complete")
        .await;
    vec![
        ("tor-a", "Gi0/1"),
        ("tor-a", "Gi0/2"),
        ("tor-a", "Gi0/3"),
        ("tor-b", "Gi0/1"),
        ("tor-b", "Gi0/2"),
        ("tor-b", "Gi0/3"),
    ]
}

impl Env {
    /// Polls configuration `shared` until its rollout status satisfies `check`.
    async fn wait_rollout(
        &self,
        what: &str,
        check: impl Fn(&patchbay::api::RolloutStatus) -> bool,
    ) -> patchbay::api::RolloutStatus {
        let api: Api<SwitchPortConfiguration> = self.api();
        eventually(30, what, || async {
            let c = api.get_opt("shared").await.ok()??;
            let r = c.status?.rollout?;
            check(&r).then_some(r)
        })
        .await
    }

    async fn edit_shared(&self, patch: serde_json::Value) {
        self.api::<SwitchPortConfiguration>()
            .patch(
                "shared",
                &PatchParams::default(),
                &Patch::Merge(json!({ "spec": patch })),
            )
            .await
            .unwrap();
    }
}

/// Device ports seen on VLAN `to`, sampled every 50 ms until all of `ports` are or
/// `secs` pass, as waves: the ports seen joining, those joining less than a second
/// after the join before them counted with it (a wave's ports reach two switches'
/// workers a few milliseconds apart; waves are two seconds apart).
async fn waves_seen(env: &Env, ports: &[(&str, &str)], to: u16, secs: u64) -> Vec<Vec<String>> {
    let mut seen: std::collections::BTreeSet<String> = Default::default();
    let mut waves: Vec<Vec<String>> = Vec::new();
    let mut last_join: Option<std::time::Instant> = None;
    let deadline = std::time::Instant::now() + Duration::from_secs(secs);
    while seen.len() < ports.len() && std::time::Instant::now() < deadline {
        let now: std::collections::BTreeSet<String> = access_vlans(env, ports)
            .into_iter()
            .filter(|(_, v)| *v == Some(to))
            .map(|(k, _)| k)
            .collect();
        let joined: Vec<String> = now.difference(&seen).cloned().collect();
        if !joined.is_empty() {
            let at = std::time::Instant::now();
            match (waves.last_mut(), last_join) {
                (Some(wave), Some(before)) if at - before < Duration::from_secs(1) => {
                    wave.extend(joined);
                    wave.sort();
                }
                _ => waves.push(joined),
            }
            last_join = Some(at);
        }
        seen = now;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    waves
}

/// An edit of a configuration six ports on two switches carry reaches the devices
/// in waves: the canary alone, then at most two ports at a time and one per switch,
/// each wave after the one before read back Active and waited its minimum (2 s from
/// its last port going Active). The
/// status counts the ports and switches on the new revision, and both revisions
/// are kept as ControllerRevisions.
#[tokio::test]
async fn an_edit_rolls_out_in_waves_each_gated_on_the_one_before() {
    let env = Env::start("rollout-waves").await;
    let ports = shared_fleet(
        &env,
        json!({"canary": {"ports": 1}, "maxUnavailable": 2, "maxUnavailablePerSwitch": 1,
               "minWaitSeconds": 2}),
    )
    .await;
    env.edit_shared(json!({"untaggedVLAN": 20})).await;
    let steps = waves_seen(&env, &ports, 20, 40).await;
    let flat: Vec<&String> = steps.iter().flatten().collect();
    assert_eq!(flat.len(), 6, "every port reached VLAN 20: {steps:?}");
    assert_eq!(
        steps[0],
        ["tor-a/Gi0/1"],
        "the canary first, alone: {steps:?}"
    );
    for step in &steps {
        assert!(step.len() <= 2, "at most two at once: {steps:?}");
        let on_a = step.iter().filter(|k| k.starts_with("tor-a/")).count();
        assert!(
            on_a <= 1 && step.len() - on_a <= 1,
            "one per switch: {steps:?}"
        );
    }
    // Canary, then waves of two (one per switch): 1, 2, 2, 1.
    assert_eq!(steps.len(), 4, "{steps:?}");
    let r = env
        .wait_rollout("the rollout to complete", |r| {
            r.phase == "Complete" && r.updated_ports == 6
        })
        .await;
    assert_eq!(
        (r.current_revision_number, r.update_revision_number),
        (2, 2)
    );
    assert_eq!((r.ports, r.switches.as_str(), r.wave), (6, "2/2", 4));
    let revisions: Api<k8s_openapi::api::apps::v1::ControllerRevision> = env.api();
    let kept = revisions
        .list(&ListParams::default().labels("patchbay.dev/configuration=shared"))
        .await
        .unwrap();
    let mut numbers: Vec<i64> = kept.items.iter().filter_map(|c| c.revision).collect();
    numbers.sort();
    assert_eq!(numbers, [1, 2]);
    assert!(
        kept.items
            .iter()
            .any(|c| c.name_any() == r.current_revision && c.data.0["untaggedVLAN"] == 20),
        "{kept:?}"
    );
    env.finish().await;
}

/// A wave whose port fails to apply the new revision is put back: its ports carry
/// the previous revision again (read back on the device), the rollout stops, the
/// ports not reached are never touched, and the configuration says which gate
/// failed, on which ports, with a Warning Event. Drift repair keeps the failed
/// wave on the previous revision.
#[tokio::test]
async fn a_wave_that_fails_its_gate_goes_back_and_the_ports_not_reached_are_untouched() {
    let env = Env::start("rollout-back").await;
    let ports = shared_fleet(
        &env,
        json!({"canary": {"ports": 1}, "maxUnavailable": 2, "maxUnavailablePerSwitch": 1}),
    )
    .await;
    // tor-b's first port refuses the new configuration.
    env.device("tor-b")
        .fail_port(&p("Gi0/1"), Some(FixtureFailure::Rejected));
    for (switch, _) in &ports {
        env.device(switch).clear_log();
    }
    env.edit_shared(json!({"untaggedVLAN": 20})).await;
    let r = env
        .wait_rollout("the rollout to be rolled back", |r| r.phase == "RolledBack")
        .await;
    assert!(
        r.message.contains("gate PortsActive failed"),
        "{}",
        r.message
    );
    assert!(r.message.contains("b1"), "{}", r.message);
    assert_eq!(r.wave, 2, "{r:?}");
    env.device("tor-b").fail_port(&p("Gi0/1"), None);
    // The failed wave (a2 on tor-a, b1 on tor-b) back on VLAN 10, the canary
    // stays on 20; a3, b2, b3 never written.
    env.wait_for("a2", "a2 back on the previous revision", |p| {
        p.status.as_ref().and_then(|s| s.state) == Some(PortState::Active)
            && p.annotations().get("patchbay.dev/rollout").is_none()
    })
    .await;
    env.wait_for("b1", "b1 Active on the previous revision", |p| {
        p.status.as_ref().and_then(|s| s.state) == Some(PortState::Active)
    })
    .await;
    // Longer than a few drift sweeps (400 ms): nothing moves the failed wave again.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let vlans = access_vlans(&env, &ports);
    let want: BTreeMap<String, Option<u16>> = [
        ("tor-a/Gi0/1", 20),
        ("tor-a/Gi0/2", 10),
        ("tor-a/Gi0/3", 10),
        ("tor-b/Gi0/1", 10),
        ("tor-b/Gi0/2", 10),
        ("tor-b/Gi0/3", 10),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), Some(v)))
    .collect();
    assert_eq!(vlans, want);
    for (switch, untouched) in [("tor-a", "Gi0/3"), ("tor-b", "Gi0/2"), ("tor-b", "Gi0/3")] {
        let writes: Vec<_> = env
            .device(switch)
            .operations()
            .into_iter()
            .filter(|o| match o {
                LoggedOperation::Set { desired, changed } => {
                    *changed && desired.port.as_str() == untouched
                }
                _ => false,
            })
            .collect();
        assert!(
            writes.is_empty(),
            "{switch}/{untouched} was written: {writes:?}"
        );
    }
    let config: SwitchPortConfiguration = env.api().get("shared").await.unwrap();
    let progressing = config
        .status
        .unwrap()
        .conditions
        .into_iter()
        .find(|c| c.type_ == "Progressing")
        .unwrap();
    assert_eq!(
        (progressing.status.as_str(), progressing.reason.as_str()),
        ("False", "RolledBack")
    );
    let events: Api<k8s_openapi::api::events::v1::Event> = env.api();
    let warned = eventually(10, "a RolledBack Warning", || async {
        let list = events.list(&ListParams::default()).await.ok()?;
        list.items.into_iter().find(|e| {
            e.reason.as_deref() == Some("RolledBack")
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("shared")
        })
    })
    .await;
    assert_eq!(warned.type_.as_deref(), Some("Warning"));
    assert!(warned.note.unwrap_or_default().contains("b1"));
    env.finish().await;
}

/// Paused, nothing moves; resumed, the rollout goes on; an
/// operator killed mid-rollout resumes it from what it stored (no port written
/// twice, the waves keep their bounds); aborted, every port it reached goes back.
#[tokio::test]
async fn a_rollout_pauses_resumes_after_a_kill_and_aborts() {
    let mut env = Env::start("rollout-control").await;
    let ports = shared_fleet(
        &env,
        json!({"canary": {"ports": 1}, "maxUnavailable": 1, "paused": true}),
    )
    .await;
    env.edit_shared(json!({"untaggedVLAN": 30})).await;
    // Paused before its first wave: nothing moves.
    let r = env
        .wait_rollout("the rollout to be held", |r| {
            r.phase == "Paused" && r.update_revision_number == 2
        })
        .await;
    assert_eq!(r.wave, 0);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let on_30 = |env: &Env| {
        access_vlans(env, &ports)
            .into_values()
            .filter(|v| *v == Some(30))
            .count()
    };
    assert_eq!(on_30(&env), 0, "nothing moved while paused");
    // Resumed with a minimum wait, killed mid-rollout, started again.
    env.edit_shared(json!({"rollout": {"paused": false, "minWaitSeconds": 1}}))
        .await;
    env.wait_rollout("a wave after the canary", |r| r.wave >= 2)
        .await;
    env.kill_operator();
    let moved_at_kill = on_30(&env);
    tokio::time::sleep(Duration::from_millis(300)).await;
    env.start_operator();
    let r = env
        .wait_rollout("the rollout to complete after the restart", |r| {
            r.phase == "Complete" && r.updated_ports == 6
        })
        .await;
    assert_eq!(r.wave, 6, "one port a wave, none repeated: {r:?}");
    assert!(
        moved_at_kill < 6,
        "killed before the end ({moved_at_kill} moved)"
    );
    assert_eq!(on_30(&env), 6);
    for (switch, dev) in &ports {
        let writes = env
            .device(switch)
            .operations()
            .into_iter()
            .filter(|o| matches!(o, LoggedOperation::Set { desired, changed: true }
                if desired.port.as_str() == *dev && matches!(desired.vlans, VlanMode::Access { vlan } if vlan.get() == 30)))
            .count();
        assert_eq!(writes, 1, "{switch}/{dev} written once with VLAN 30");
    }

    // Abort: the next edit reaches two ports or more, then is aborted; every one
    // goes back.
    env.edit_shared(json!({"untaggedVLAN": 40, "rollout": {"minWaitSeconds": 2}}))
        .await;
    env.wait_rollout("revision 3's second wave", |r| {
        r.update_revision_number == 3 && r.wave >= 2
    })
    .await;
    eventually(20, "two ports on VLAN 40", || async {
        let n = access_vlans(&env, &ports)
            .into_values()
            .filter(|v| *v == Some(40))
            .count();
        (n >= 2).then_some(())
    })
    .await;
    env.edit_shared(json!({"rollout": {"abortRevision": 3}}))
        .await;
    let r = env
        .wait_rollout("the abort", |r| r.phase == "Aborted")
        .await;
    assert_eq!(r.current_revision_number, 2);
    eventually(20, "every port back on VLAN 30", || async {
        (on_30(&env) == 6).then_some(())
    })
    .await;
    env.finish().await;
}

/// With the Node Ready gate on (a 1 s grace period: evidence 6 s after a port
/// changed), a wave whose host's Node goes NotReady after its port changed is put
/// back, naming the gate and the host; with the Node Ready again, the next edit
/// waits out the grace period and completes.
#[tokio::test]
async fn a_wave_whose_hosts_node_goes_not_ready_goes_back() {
    use k8s_openapi::api::core::v1::Node;
    let env = Env::start_with("rollout-node", |s| {
        s.rollout.node_grace_seconds = Some(1);
    })
    .await;
    let ports = shared_fleet(
        &env,
        json!({"canary": {"ports": 1}, "maxUnavailable": 2, "maxUnavailablePerSwitch": 1}),
    )
    .await;
    // a1 drives Server <ns>-h1, which is the Kubernetes Node <ns>-n1, Ready.
    let server = format!("{}-h1", env.ns());
    env.api::<SwitchPort>()
        .patch(
            "a1",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {
                "patchbay.dev/host": format!("Server/{server}")}}})),
        )
        .await
        .unwrap();
    let nodes: Api<Node> = Api::all(env.cluster.client.clone());
    let node = format!("{}-n1", env.ns());
    nodes
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": node,
                "labels": {"patchbay.dev/server": server}}}))
            .unwrap(),
        )
        .await
        .unwrap();
    let ready = |truth: &str| {
        json!({"status": {"conditions": [{"type": "Ready", "status": truth,
            "reason": "KubeletReady", "lastHeartbeatTime": "2026-11-29T00:00:00Z",
            "lastTransitionTime": "2026-11-29T00:00:00Z"}]}})
    };
    nodes
        .patch_status(&node, &PatchParams::default(), &Patch::Merge(ready("True")))
        .await
        .unwrap();

    env.edit_shared(json!({"untaggedVLAN": 20})).await;
    eventually(20, "the canary on the device", || async {
        (access_vlans(&env, &ports[..1])["tor-a/Gi0/1"] == Some(20)).then_some(())
    })
    .await;
    // Its host's Node loses the cluster right after the change.
    nodes
        .patch_status(
            &node,
            &PatchParams::default(),
            &Patch::Merge(ready("False")),
        )
        .await
        .unwrap();
    let r = env
        .wait_rollout("the wave put back", |r| r.phase == "RolledBack")
        .await;
    assert!(
        r.message.contains("gate NodeReady failed") && r.message.contains(&server),
        "{}",
        r.message
    );
    eventually(20, "the canary back on VLAN 10", || async {
        (access_vlans(&env, &ports).values().all(|v| *v == Some(10))).then_some(())
    })
    .await;

    // Ready again: the next edit's canary waits out the grace period, then the
    // rollout completes.
    nodes
        .patch_status(&node, &PatchParams::default(), &Patch::Merge(ready("True")))
        .await
        .unwrap();
    env.edit_shared(json!({"untaggedVLAN": 30})).await;
    let waiting = env
        .wait_rollout("the canary waiting on its Node", |r| {
            r.message.contains("Node(s) of 1 host(s) not yet read")
        })
        .await;
    assert_eq!(waiting.wave, 1, "{waiting:?}");
    env.wait_rollout("the rollout complete", |r| {
        r.phase == "Complete" && r.updated_ports == 6
    })
    .await;
    assert!(access_vlans(&env, &ports).values().all(|v| *v == Some(30)));
    let _ = nodes.delete(&node, &Default::default()).await;
    env.finish().await;
}

//! The controllers: SwitchPort (drives the pure state machine), Switch (provider,
//! credentials, reachability, one SwitchPort per `spec.ports` entry, ordered
//! deletion), ProviderSwitch (held until no Switch uses it) and SmartNicPort
//! (`smartnic`: an Open vSwitch bridge port chained to its SwitchPort; it shares
//! the state-machine loop, `drive`). Does Kubernetes I/O
//! through kube-rs and device I/O through the per-switch workers.
//!
//! Each SwitchPort reconcile dereferences (Switch, ProviderSwitch, Secret,
//! configuration, and the digest of them all), asks [`decide`] what to do — with the
//! time, the port's failures and its switch worker's outage, so a failure waits out
//! its retry time whatever woke the reconcile — writes the new state *before* acting,
//! acts, feeds the outcome back, and finally writes status in one place, only when it
//! changed. Nothing reaches a device before the configuration has been validated
//! against the port's constraints and the backend's capabilities. Ports are woken by
//! every input (configuration, Switch, ProviderSwitch, the credentials Secret's
//! metadata) and by their worker's notices (drift, the switch answering or not).
//! Events go through the `events` module (repeated Warnings as one series).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, OwnerReference, Time};
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::core::PartialObjectMeta;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::Reporter;
use kube::runtime::finalizer::{Event as FinalizerEvent, finalizer};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use patchbay_providers::values::PortName;
use patchbay_providers::{DesiredPort, Device, PortOperation, diff};
use serde_json::json;
use tokio::sync::mpsc;

use crate::api::{
    ConditionsStatus, ConfigurationRef, DriftPolicy, FINALIZER, PortState, PortStatus,
    ProviderSwitch, SmartNicConfiguration, SmartNicPort, Switch, SwitchPort,
    SwitchPortConfiguration, SwitchPortDefinition, SwitchPortSpec, configuration_hash,
};
use crate::backends::{BackendError, Backends, check_credentials};
use crate::settings::Settings;
use crate::state_machine::{
    AppliedChange, FailureKind, Health, Outcome, PortFacts, PortTarget, Requeue, Step, decide,
};
use crate::validate::{PortContext, validate_for_port, validate_provider, validate_switch};
use crate::worker::{
    Notice, Notifier, Outage, PortKey, Reachability, SwitchWorker, WorkerConfig, WorkerError,
};

mod events;
mod smartnic;

use events::{EventPublisher, Severity};
pub use smartnic::CHAINED_FROM_ANNOTATION;

/// Annotation (on a SwitchPort or its Switch): delete without touching the device,
/// for devices that are gone for good.
pub const SKIP_CLEANUP_ANNOTATION: &str = "patchbay.dev/skip-device-cleanup";
/// Label on every SwitchPort: the Switch it belongs to.
pub const SWITCH_LABEL: &str = "patchbay.dev/switch";

/// Errors of the controllers (Kubernetes I/O; device failures are port conditions).
#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    /// The API server refused or failed.
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// The finalizer helper failed.
    #[error("finalizer: {0}")]
    Finalizer(#[source] Box<kube::runtime::finalizer::Error<ControllerError>>),
    /// A Switch cannot go while its ports exist.
    #[error("{0} SwitchPort(s) still exist; waiting for them to be cleaned and deleted")]
    PortsRemaining(usize),
    /// A ProviderSwitch cannot go while a Switch or SmartNicPort uses it.
    #[error("{0} Switch(es) or SmartNicPort(s) still use this ProviderSwitch")]
    SwitchesRemaining(usize),
}

impl ControllerError {
    /// A bounded category for metrics and events.
    pub fn category(&self) -> &'static str {
        match self {
            ControllerError::Kube(_) => "KubernetesError",
            ControllerError::Finalizer(_) => "FinalizerError",
            ControllerError::PortsRemaining(_) => "PortsRemaining",
            ControllerError::SwitchesRemaining(_) => "SwitchesInUse",
        }
    }
}

struct WorkerEntry {
    fingerprint: String,
    device: Arc<dyn Device>,
    worker: Arc<SwitchWorker>,
}

/// Shared state of the controllers.
pub struct Context {
    client: Client,
    settings: Settings,
    backends: Backends,
    workers: Mutex<HashMap<(String, String), Arc<WorkerEntry>>>,
    /// Publishes Events (Warning repetitions folded into series).
    events: EventPublisher,
    /// The failures recorded last, per port (see [`FailureLedger`]).
    ledger: FailureLedger,
    /// Ports to reconcile at a worker's notice (drift, the switch's reachability).
    port_notices: mpsc::UnboundedSender<ObjectRef<SwitchPort>>,
    /// SmartNicPorts to reconcile at their provider worker's notice.
    smartnic_notices: mpsc::UnboundedSender<ObjectRef<SmartNicPort>>,
    /// Switches whose worker found their reachability changed.
    switch_notices: mpsc::UnboundedSender<ObjectRef<Switch>>,
    /// The SwitchPort cache of the port controller: the Switch controller checks its
    /// ports here instead of listing them from the API server on every port event.
    ports: kube::runtime::reflector::Store<SwitchPort>,
}

impl Context {
    fn workers(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), Arc<WorkerEntry>>> {
        self.workers.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The worker of a switch, (re)built when its provider or credentials changed.
    fn worker(
        &self,
        switch: &Switch,
        provider: &ProviderSwitch,
        secret: Option<&Secret>,
    ) -> Result<Arc<WorkerEntry>, BackendError> {
        let key = (switch.namespace().unwrap_or_default(), switch.name_any());
        let ports: Vec<PortName> = switch
            .spec
            .ports
            .values()
            .filter_map(|d| PortName::parse(&d.name).ok())
            .collect();
        let fingerprint = worker_fingerprint(provider, secret);
        if let Some(entry) = self.workers().get(&key)
            && entry.fingerprint == fingerprint
        {
            // New device ports appear on fixture devices as the Switch grows.
            self.backends.build(provider, secret, &ports)?;
            entry.worker.set_probe_ports(ports);
            return Ok(entry.clone());
        }
        let (ports_tx, switch_tx) = (self.port_notices.clone(), self.switch_notices.clone());
        let switch_ref = ObjectRef::from_obj(switch);
        let notify: Notifier = Arc::new(move |notice| match notice {
            Notice::Port(k) => {
                let _ = ports_tx.send(ObjectRef::new(&k.name).within(&k.namespace));
            }
            Notice::Switch => {
                let _ = switch_tx.send(switch_ref.clone());
            }
        });
        self.spawn_worker(key, fingerprint, provider, secret, ports, notify)
    }

    /// The worker of a SmartNIC's ProviderSwitch (one per provider, serving every
    /// SmartNicPort on it).
    fn smartnic_worker(
        &self,
        provider: &ProviderSwitch,
        port: &PortName,
    ) -> Result<Arc<WorkerEntry>, BackendError> {
        let key = smartnic_worker_key(
            &provider.namespace().unwrap_or_default(),
            &provider.name_any(),
        );
        let fingerprint = worker_fingerprint(provider, None);
        if let Some(entry) = self.workers().get(&key)
            && entry.fingerprint == fingerprint
        {
            return Ok(entry.clone());
        }
        let tx = self.smartnic_notices.clone();
        let notify: Notifier = Arc::new(move |notice| {
            if let Notice::Port(k) = notice {
                let _ = tx.send(ObjectRef::new(&k.name).within(&k.namespace));
            }
        });
        self.spawn_worker(key, fingerprint, provider, None, vec![port.clone()], notify)
    }

    fn spawn_worker(
        &self,
        key: (String, String),
        fingerprint: String,
        provider: &ProviderSwitch,
        secret: Option<&Secret>,
        ports: Vec<PortName>,
        notify: Notifier,
    ) -> Result<Arc<WorkerEntry>, BackendError> {
        let device = self.backends.build(provider, secret, &ports)?;
        let max_sessions = provider
            .spec
            .options
            .as_ref()
            .and_then(|o| o.max_sessions)
            .map(|n| n.clamp(1, 16) as usize)
            .unwrap_or(self.settings.max_sessions);
        let worker = SwitchWorker::spawn(
            device.clone(),
            WorkerConfig {
                batch_window: self.settings.batch_window,
                drift_interval: self.settings.drift_interval,
                max_sessions,
                backoff: self.settings.backoff,
            },
            ports,
            notify,
        );
        let entry = Arc::new(WorkerEntry {
            fingerprint,
            device,
            worker: Arc::new(worker),
        });
        self.workers().insert(key, entry.clone());
        Ok(entry)
    }

    /// The worker of `key`, if one runs for this provider and Secret as they are
    /// (a worker for an older version of them is about to be replaced).
    fn current_worker(
        &self,
        key: &(String, String),
        provider: Option<&ProviderSwitch>,
        secret: Option<&Secret>,
    ) -> Option<Arc<WorkerEntry>> {
        let fingerprint = worker_fingerprint(provider?, secret);
        self.workers()
            .get(key)
            .filter(|e| e.fingerprint == fingerprint)
            .cloned()
    }

    fn drop_worker(&self, namespace: &str, name: &str) {
        self.workers()
            .remove(&(namespace.to_owned(), name.to_owned()));
    }
}

/// What a worker is built from: the ProviderSwitch (uid, generation) and the
/// credentials Secret's version. A worker whose fingerprint differs is replaced.
fn worker_fingerprint(provider: &ProviderSwitch, secret: Option<&Secret>) -> String {
    format!(
        "{}/{}/{}",
        provider.uid().unwrap_or_default(),
        provider.metadata.generation.unwrap_or(0),
        secret
            .and_then(|s| s.resource_version())
            .unwrap_or_default()
    )
}

/// The worker key of a SmartNIC provider (Switch names cannot contain `/`).
fn smartnic_worker_key(namespace: &str, provider: &str) -> (String, String) {
    (namespace.to_owned(), format!("smartnic/{provider}"))
}

fn api_for<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// Ports (in `store`) of the Switches named in `switches` of namespace `ns`.
fn ports_of_switches(
    store: &kube::runtime::reflector::Store<SwitchPort>,
    ns: Option<&str>,
    switches: &[String],
) -> Vec<ObjectRef<SwitchPort>> {
    if switches.is_empty() {
        return Vec::new();
    }
    store
        .state()
        .iter()
        .filter(|p| {
            p.namespace().as_deref() == ns
                && p.labels()
                    .get(SWITCH_LABEL)
                    .is_some_and(|s| switches.contains(s))
        })
        .map(|p| ObjectRef::from_obj(p.as_ref()))
        .collect()
}

/// Names of the Switches (in `store`) of namespace `ns` that use one of `providers`.
fn switches_of_providers(
    store: &kube::runtime::reflector::Store<Switch>,
    ns: Option<&str>,
    providers: &[String],
) -> Vec<String> {
    store
        .state()
        .iter()
        .filter(|s| s.namespace().as_deref() == ns && providers.contains(&s.spec.provider.name))
        .map(|s| s.name_any())
        .collect()
}

/// Runs the controllers until `shutdown` completes.
pub async fn run(
    client: Client,
    settings: Settings,
    backends: Backends,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let ns = settings.namespace.clone();
    let (port_tx, mut port_rx) = mpsc::unbounded_channel();
    let (snic_tx, mut snic_rx) = mpsc::unbounded_channel();
    let (switch_tx, mut switch_rx) = mpsc::unbounded_channel();
    let wc = watcher::Config::default();
    let ports: Api<SwitchPort> = api_for(&client, ns.as_deref());
    let switches: Api<Switch> = api_for(&client, ns.as_deref());
    let configs: Api<SwitchPortConfiguration> = api_for(&client, ns.as_deref());
    let providers: Api<ProviderSwitch> = api_for(&client, ns.as_deref());
    let port_ctl = Controller::new(ports.clone(), wc.clone());
    let port_store = port_ctl.store();
    let switch_ctl = Controller::new(switches.clone(), wc.clone());
    let switch_store = switch_ctl.store();
    let provider_ctl = Controller::new(providers.clone(), wc.clone());
    let provider_store = provider_ctl.store();
    let ctx = Arc::new(Context {
        ports: port_store.clone(),
        events: EventPublisher::new(
            client.clone(),
            Reporter {
                controller: "patchbay".into(),
                instance: std::env::var("HOSTNAME").ok(),
            },
        ),
        client: client.clone(),
        settings,
        backends,
        workers: Mutex::new(HashMap::new()),
        ledger: FailureLedger::default(),
        port_notices: port_tx,
        smartnic_notices: snic_tx,
        switch_notices: switch_tx,
    });

    let (stop_tx, _) = tokio::sync::broadcast::channel::<()>(1);
    let stopped = |tx: &tokio::sync::broadcast::Sender<()>| {
        let mut rx = tx.subscribe();
        async move {
            let _ = rx.recv().await;
        }
    };

    // SwitchPorts are woken by their configuration, their Switch, the Switch's
    // ProviderSwitch and credentials Secret (any input of theirs: a change starts a
    // new attempt at once, whatever the backoff), and their worker's notices.
    let by_config = port_store.clone();
    let by_switch = port_store.clone();
    let (by_provider, provider_switches) = (port_store.clone(), switch_store.clone());
    let (by_secret, secret_switches, secret_providers) = (
        port_store.clone(),
        switch_store.clone(),
        provider_store.clone(),
    );
    let notices = futures::stream::poll_fn(move |cx| port_rx.poll_recv(cx));
    // Only the metadata of Secrets: the operator never keeps their data in memory.
    let secrets = watcher(
        api_for::<PartialObjectMeta<Secret>>(&client, ns.as_deref()),
        wc.clone(),
    )
    .touched_objects();
    let port_ctl = port_ctl
        .watches(configs, wc.clone(), move |cfg: SwitchPortConfiguration| {
            let cfg_ns = cfg.namespace().unwrap_or_default();
            let cfg_name = cfg.name_any();
            by_config
                .state()
                .iter()
                .filter(|p| {
                    p.spec.configuration.as_ref().is_some_and(|r| {
                        r.name == cfg_name
                            && r.namespace.clone().or_else(|| p.namespace()).as_deref()
                                == Some(cfg_ns.as_str())
                    })
                })
                .map(|p| ObjectRef::from_obj(p.as_ref()))
                .collect::<Vec<_>>()
        })
        .watches(switches.clone(), wc.clone(), move |sw: Switch| {
            ports_of_switches(&by_switch, sw.namespace().as_deref(), &[sw.name_any()])
        })
        .watches(providers.clone(), wc.clone(), move |pv: ProviderSwitch| {
            let ns = pv.namespace();
            let names = switches_of_providers(&provider_switches, ns.as_deref(), &[pv.name_any()]);
            ports_of_switches(&by_provider, ns.as_deref(), &names)
        })
        .watches_stream(secrets, move |secret| {
            let (sns, sname) = (secret.namespace(), secret.name_any());
            let mut out = Vec::new();
            let users: Vec<Arc<ProviderSwitch>> = secret_providers
                .state()
                .into_iter()
                .filter(|p| {
                    p.spec.credentials_secret_ref.as_ref().is_some_and(|r| {
                        r.name == sname && r.namespace.clone().or_else(|| p.namespace()) == sns
                    })
                })
                .collect();
            for p in users {
                let pns = p.namespace();
                let names =
                    switches_of_providers(&secret_switches, pns.as_deref(), &[p.name_any()]);
                out.extend(ports_of_switches(&by_secret, pns.as_deref(), &names));
            }
            out
        })
        .reconcile_on(notices)
        .with_config(kube::runtime::controller::Config::default().concurrency(64))
        .graceful_shutdown_on(stopped(&stop_tx))
        .run(reconcile_port, port_error_policy, ctx.clone())
        .for_each(|r| async move {
            if let Err(e) = r {
                tracing::debug!(error = %e, "SwitchPort reconcile failed");
            }
        });

    let by_provider = switch_store.clone();
    let switch_notices = futures::stream::poll_fn(move |cx| switch_rx.poll_recv(cx));
    let switch_ctl = switch_ctl
        .owns(ports, wc.clone())
        .watches(providers.clone(), wc.clone(), move |p: ProviderSwitch| {
            let p_ns = p.namespace();
            switches_of_providers(&by_provider, p_ns.as_deref(), &[p.name_any()])
                .into_iter()
                .map(|n| ObjectRef::new(&n).within(p_ns.as_deref().unwrap_or_default()))
                .collect::<Vec<_>>()
        })
        .reconcile_on(switch_notices)
        // Every port event wakes its Switch (owns); gather them.
        .with_config(
            kube::runtime::controller::Config::default()
                .concurrency(8)
                .debounce(Duration::from_millis(500)),
        )
        .graceful_shutdown_on(stopped(&stop_tx))
        .run(reconcile_switch, generic_error_policy, ctx.clone())
        .for_each(|r| async move {
            if let Err(e) = r {
                tracing::debug!(error = %e, "Switch reconcile failed");
            }
        });

    let provider_ctl = provider_ctl
        .watches(switches, wc.clone(), |s: Switch| {
            Some(
                ObjectRef::<ProviderSwitch>::new(&s.spec.provider.name)
                    .within(&s.namespace().unwrap_or_default()),
            )
        })
        .watches(
            api_for::<SmartNicPort>(&client, ns.as_deref()),
            wc.clone(),
            |p: SmartNicPort| {
                Some(
                    ObjectRef::<ProviderSwitch>::new(&p.spec.provider.name)
                        .within(&p.namespace().unwrap_or_default()),
                )
            },
        )
        .graceful_shutdown_on(stopped(&stop_tx))
        .run(reconcile_provider, generic_error_policy, ctx.clone())
        .for_each(|r| async move {
            if let Err(e) = r {
                tracing::debug!(error = %e, "ProviderSwitch reconcile failed");
            }
        });

    // SmartNicPorts: woken by their configuration, the SwitchPort they chain to (or
    // claimed), their provider, and the notices of their provider's worker.
    let snics: Api<SmartNicPort> = api_for(&client, ns.as_deref());
    let snic_ctl = Controller::new(snics, wc.clone());
    let snic_store = snic_ctl.store();
    let (by_snc, by_next, by_provider) = (snic_store.clone(), snic_store.clone(), snic_store);
    let snic_notices = futures::stream::poll_fn(move |cx| snic_rx.poll_recv(cx));
    let snic_ctl = snic_ctl
        .watches(
            api_for::<SmartNicConfiguration>(&client, ns.as_deref()),
            wc.clone(),
            move |cfg: SmartNicConfiguration| {
                let (cns, cname) = (cfg.namespace().unwrap_or_default(), cfg.name_any());
                by_snc
                    .state()
                    .iter()
                    .filter(|p| {
                        p.spec.configuration.as_ref().is_some_and(|r| {
                            r.name == cname
                                && r.namespace.clone().or_else(|| p.namespace()).as_deref()
                                    == Some(cns.as_str())
                        })
                    })
                    .map(|p| ObjectRef::from_obj(p.as_ref()))
                    .collect::<Vec<_>>()
            },
        )
        .watches(
            api_for::<SwitchPort>(&client, ns.as_deref()),
            wc.clone(),
            move |sp: SwitchPort| {
                let (sns, sname) = (sp.namespace().unwrap_or_default(), sp.name_any());
                let claimed_by = sp.annotations().get(CHAINED_FROM_ANNOTATION).cloned();
                by_next
                    .state()
                    .iter()
                    .filter(|p| {
                        let me = format!("{}/{}", p.namespace().unwrap_or_default(), p.name_any());
                        claimed_by.as_deref() == Some(me.as_str())
                            || p.spec.next_port_ref.as_ref().is_some_and(|n| {
                                n.name == sname
                                    && n.namespace.clone().or_else(|| p.namespace()).as_deref()
                                        == Some(sns.as_str())
                            })
                    })
                    .map(|p| ObjectRef::from_obj(p.as_ref()))
                    .collect::<Vec<_>>()
            },
        )
        .watches(providers.clone(), wc.clone(), move |pv: ProviderSwitch| {
            let (pns, pname) = (pv.namespace(), pv.name_any());
            by_provider
                .state()
                .iter()
                .filter(|p| p.namespace() == pns && p.spec.provider.name == pname)
                .map(|p| ObjectRef::from_obj(p.as_ref()))
                .collect::<Vec<_>>()
        })
        .reconcile_on(snic_notices)
        .with_config(kube::runtime::controller::Config::default().concurrency(64))
        .graceful_shutdown_on(stopped(&stop_tx))
        .run(smartnic::reconcile, generic_error_policy, ctx.clone())
        .for_each(|r| async move {
            if let Err(e) = r {
                tracing::debug!(error = %e, "SmartNicPort reconcile failed");
            }
        });

    let stopper = async move {
        shutdown.await;
        let _ = stop_tx.send(());
    };
    tokio::join!(port_ctl, switch_ctl, provider_ctl, snic_ctl, stopper);
}

fn port_error_policy(_: Arc<SwitchPort>, e: &ControllerError, _: Arc<Context>) -> Action {
    tracing::debug!(error = %e, category = e.category(), "SwitchPort reconcile error");
    if is_conflict(e) {
        // Someone else wrote first (the Switch controller adopting the port, say):
        // read again at once.
        return Action::requeue(Duration::from_millis(50));
    }
    Action::requeue(Duration::from_secs(1))
}

fn is_conflict(e: &ControllerError) -> bool {
    matches!(e, ControllerError::Kube(kube::Error::Api(s)) if s.code == 409)
}

fn generic_error_policy<K>(_: Arc<K>, e: &ControllerError, _: Arc<Context>) -> Action {
    tracing::debug!(error = %e, category = e.category(), "reconcile error");
    Action::requeue(Duration::from_secs(1))
}

/// Condition `type_`, if set.
fn find_condition<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

fn is_true(map: &std::collections::BTreeMap<String, String>, key: &str) -> bool {
    map.get(key).is_some_and(|v| v == "true")
}

/// The status of a condition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Truth {
    True,
    False,
    Unknown,
}

impl From<bool> for Truth {
    fn from(b: bool) -> Self {
        if b { Truth::True } else { Truth::False }
    }
}

/// Sets a condition, keeping lastTransitionTime unless the status changes.
fn set_condition(
    conditions: &mut Vec<Condition>,
    type_: &str,
    status: impl Into<Truth>,
    reason: &str,
    message: String,
    generation: Option<i64>,
) {
    let status = match status.into() {
        Truth::True => "True",
        Truth::False => "False",
        Truth::Unknown => "Unknown",
    }
    .to_owned();
    let now = Time(jiff::Timestamp::now());
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(c) => {
            if c.status != status {
                c.last_transition_time = now;
            }
            c.status = status;
            c.reason = reason.into();
            c.message = message;
            c.observed_generation = generation;
        }
        None => conditions.push(Condition {
            type_: type_.into(),
            status,
            reason: reason.into(),
            message,
            observed_generation: generation,
            last_transition_time: now,
        }),
    }
}

/// The status as a merge patch that also clears absent fields.
fn status_patch(status: &impl serde::Serialize, keys: &[&str]) -> serde_json::Value {
    let mut v = serde_json::to_value(status).unwrap_or_else(|_| json!({}));
    if let Some(obj) = v.as_object_mut() {
        for k in keys {
            obj.entry(k.to_string()).or_insert(serde_json::Value::Null);
        }
    }
    json!({ "status": v })
}

const PORT_STATUS_KEYS: &[&str] = &[
    "state",
    "switch",
    "devicePort",
    "configurationRef",
    "configurationHash",
    "observedGeneration",
    "conditions",
    "lastError",
    "failureCount",
    "lastAttempt",
    "lastFailureTime",
    "nextRetryTime",
    "lastTransitionTime",
];

/// A short digest of everything a port's decision depends on: its failures belong
/// to it, so a change to any input starts a new attempt at once.
fn inputs_digest(inputs: &serde_json::Value) -> String {
    configuration_hash(inputs).chars().take(16).collect()
}

/// What a SwitchPort refers to, fetched once per reconcile.
struct PortWorld {
    switch: Option<Switch>,
    definition: Option<SwitchPortDefinition>,
    provider: Option<ProviderSwitch>,
    secret: Option<Secret>,
    desired: Option<PortTarget>,
    config: Option<SwitchPortConfiguration>,
    device_port: Option<String>,
    /// See [`inputs_digest`].
    inputs: String,
}

async fn dereference(port: &SwitchPort, ctx: &Context) -> Result<PortWorld, ControllerError> {
    let ns = port.namespace().unwrap_or_default();
    let client = &ctx.client;
    let switch_name = port.labels().get(SWITCH_LABEL).cloned().or_else(|| {
        port.owner_references()
            .iter()
            .find(|o| o.kind == "Switch")
            .map(|o| o.name.clone())
    });
    let switch = match &switch_name {
        Some(n) => {
            Api::<Switch>::namespaced(client.clone(), &ns)
                .get_opt(n)
                .await?
        }
        None => None,
    };
    let definition = switch
        .as_ref()
        .and_then(|s| s.spec.ports.get(&port.name_any()).cloned());
    let provider = match &switch {
        Some(s) => {
            Api::<ProviderSwitch>::namespaced(client.clone(), &ns)
                .get_opt(&s.spec.provider.name)
                .await?
        }
        None => None,
    };
    let secret = match provider
        .as_ref()
        .and_then(|p| p.spec.credentials_secret_ref.clone())
    {
        Some(r) => {
            let sns = r.namespace.clone().unwrap_or_else(|| ns.clone());
            Api::<Secret>::namespaced(client.clone(), &sns)
                .get_opt(&r.name)
                .await?
        }
        None => None,
    };
    let (desired, config) = match &port.spec.configuration {
        None => (None, None),
        Some(r) => {
            let cns = r.namespace.clone().unwrap_or_else(|| ns.clone());
            let resolved = ConfigurationRef {
                name: r.name.clone(),
                namespace: Some(cns.clone()),
            };
            let cfg = Api::<SwitchPortConfiguration>::namespaced(client.clone(), &cns)
                .get_opt(&r.name)
                .await?;
            let hash = cfg
                .as_ref()
                .map(|c| configuration_hash(&c.spec))
                .unwrap_or_else(|| "missing".into());
            (
                Some(PortTarget {
                    configuration: resolved,
                    hash,
                }),
                cfg,
            )
        }
    };
    let device_port = definition
        .as_ref()
        .map(|d| d.name.clone())
        .or_else(|| port.status.as_ref().and_then(|s| s.device_port.clone()));
    let inputs = inputs_digest(&json!({
        "spec": port.spec,
        "configuration": config.as_ref().map(|c| &c.spec),
        "definition": definition,
        "provider": provider.as_ref().map(|p| json!({"uid": p.uid(), "spec": p.spec})),
        "secret": secret.as_ref().map(|s| json!({"uid": s.uid(), "version": s.resource_version()})),
    }));
    Ok(PortWorld {
        switch,
        definition,
        provider,
        secret,
        desired,
        config,
        device_port,
        inputs,
    })
}

/// A failure to report: how it is retried, category (bounded) and message, and the
/// switch's outage when the switch does not answer.
struct Failure {
    kind: FailureKind,
    category: &'static str,
    message: String,
    outage: Option<Box<Outage>>,
}

impl Failure {
    fn new(kind: FailureKind, category: &'static str, message: impl Into<String>) -> Self {
        Self {
            kind,
            category,
            message: message.into(),
            outage: None,
        }
    }

    /// What the switch worker said.
    fn worker(e: WorkerError) -> Self {
        match e {
            WorkerError::Device(e) => {
                Self::new(FailureKind::Transient, e.category(), e.to_string())
            }
            WorkerError::SwitchDown(outage) => Self {
                kind: FailureKind::SwitchDown,
                category: outage.error.category(),
                message: outage.error.to_string(),
                outage: Some(outage),
            },
        }
    }

    /// No backend can be built from the ProviderSwitch and its Secret as they are:
    /// nothing to retry until one of them changes.
    fn backend(e: BackendError) -> Self {
        Self::new(FailureKind::Invalid, e.category(), e.to_string())
    }

    /// The linked configuration (`kind`) does not exist (yet).
    fn configuration_not_found(kind: &str, target: Option<&PortTarget>) -> Self {
        let name = target
            .map(|t| {
                let r = &t.configuration;
                format!("{}/{}", r.namespace.as_deref().unwrap_or_default(), r.name)
            })
            .unwrap_or_default();
        Self::new(
            FailureKind::Transient,
            "ConfigurationNotFound",
            format!("{kind} {name} not found (spec.configuration)"),
        )
    }
}

struct PortRun<'a> {
    ctx: &'a Context,
    port: &'a SwitchPort,
    world: PortWorld,
    key: PortKey,
}

impl PortDevice for PortRun<'_> {
    fn worker(&self) -> Result<Arc<WorkerEntry>, Failure> {
        let Some(switch) = &self.world.switch else {
            return Err(Failure::new(
                FailureKind::Transient,
                "SwitchNotFound",
                format!(
                    "the Switch of this port was not found; to delete the port without cleaning the \
                     device, annotate it {SKIP_CLEANUP_ANNOTATION}=true"
                ),
            ));
        };
        let Some(provider) = &self.world.provider else {
            return Err(Failure::new(
                FailureKind::Transient,
                "ProviderNotFound",
                format!("ProviderSwitch {:?} not found", switch.spec.provider.name),
            ));
        };
        if let Err(e) = validate_provider(&provider.spec) {
            return Err(Failure::new(
                FailureKind::Invalid,
                "InvalidProvider",
                format!("ProviderSwitch {}: {e}", provider.name_any()),
            ));
        }
        self.ctx
            .worker(switch, provider, self.world.secret.as_ref())
            .map_err(Failure::backend)
    }

    fn device_port(&self) -> Result<PortName, Failure> {
        let name = self.world.device_port.as_deref().ok_or_else(|| {
            Failure::new(
                FailureKind::Invalid,
                "PortNotDefined",
                format!("Switch.spec.ports has no entry {:?}", self.port.name_any()),
            )
        })?;
        PortName::parse(name)
            .map_err(|e| Failure::new(FailureKind::Invalid, "InvalidPortName", e.0))
    }

    /// The validated desired device state of the linked configuration.
    fn desired(&self, entry: &WorkerEntry) -> Result<DesiredPort, Failure> {
        let Some(cfg) = &self.world.config else {
            return Err(Failure::configuration_not_found(
                "SwitchPortConfiguration",
                self.world.desired.as_ref(),
            ));
        };
        let Some(definition) = &self.world.definition else {
            return Err(Failure::new(
                FailureKind::Invalid,
                "PortNotDefined",
                format!("Switch.spec.ports has no entry {:?}", self.port.name_any()),
            ));
        };
        let caps = entry.device.capabilities();
        let switch_name = self
            .world
            .switch
            .as_ref()
            .map(|s| s.name_any())
            .unwrap_or_default();
        let port_key = self.port.name_any();
        validate_for_port(
            &cfg.spec,
            &PortContext {
                switch: &switch_name,
                port_key: &port_key,
                definition,
                capabilities: Some(&caps),
            },
        )
        .map_err(|e| Failure::new(FailureKind::Invalid, "InvalidConfiguration", e.to_string()))
    }

    fn key(&self) -> &PortKey {
        &self.key
    }
}

async fn reconcile_port(
    port: Arc<SwitchPort>,
    ctx: Arc<Context>,
) -> Result<Action, ControllerError> {
    use tracing::Instrument;
    let span = tracing::info_span!(
        "switchport",
        namespace = %port.namespace().unwrap_or_default(),
        name = %port.name_any(),
        switch = %port.labels().get(SWITCH_LABEL).cloned().unwrap_or_default(),
    );
    reconcile_port_inner(port, ctx).instrument(span).await
}

async fn reconcile_port_inner(
    port: Arc<SwitchPort>,
    ctx: Arc<Context>,
) -> Result<Action, ControllerError> {
    let ns = port.namespace().unwrap_or_default();
    let name = port.name_any();
    let api: Api<SwitchPort> = Api::namespaced(ctx.client.clone(), &ns);
    let world = dereference(&port, &ctx).await?;
    let key = PortKey {
        namespace: ns.clone(),
        name: name.clone(),
    };
    let old_status = port.status.clone().unwrap_or_default();
    let mut status = old_status.clone();
    if world.switch.is_none()
        && old_status.state.is_none()
        && port.metadata.deletion_timestamp.is_none()
    {
        // Created ahead of its Switch (or by hand): nothing to manage until a Switch
        // lists it; the Switch watch brings us back.
        set_condition(
            &mut status.conditions,
            "Ready",
            false,
            "WaitingForSwitch",
            "no Switch lists this port in spec.ports yet".into(),
            port.metadata.generation,
        );
        status.observed_generation = port.metadata.generation;
        write_status(&api, &name, port.status.as_ref(), &status).await?;
        return Ok(Action::await_change());
    }
    status.switch = world
        .switch
        .as_ref()
        .map(|s| s.name_any())
        .or(status.switch);
    status.device_port = world.device_port.clone();
    let drift_policy = world
        .switch
        .as_ref()
        .and_then(|s| s.spec.drift_policy)
        .unwrap_or_default();
    let skip_cleanup = is_true(port.annotations(), SKIP_CLEANUP_ANNOTATION)
        || world
            .switch
            .as_ref()
            .is_some_and(|s| is_true(s.annotations(), SKIP_CLEANUP_ANNOTATION));
    let worker = ctx.current_worker(
        &(ns.clone(), status.switch.clone().unwrap_or_default()),
        world.provider.as_ref(),
        world.secret.as_ref(),
    );
    let drift_notice = worker
        .as_ref()
        .and_then(|e| e.worker.take_drift_notice(&key));
    let outage = worker.as_ref().and_then(|e| e.worker.outage());
    let inputs = world.inputs.clone();
    let run = PortRun {
        ctx: &ctx,
        port: &port,
        world,
        key: key.clone(),
    };
    drive(
        Drive {
            ctx: &ctx,
            obj: port.as_ref(),
            api,
            old_status,
            status,
            desired: run.world.desired.clone(),
            inputs,
            outage,
            drift_policy,
            skip_cleanup,
            drift_check_due: drift_notice.is_some(),
            kind: "SwitchPortConfiguration",
        },
        &run,
    )
    .await
}

/// What a port controller does on its device(s). The state-machine loop ([`drive`])
/// is shared by SwitchPorts and SmartNicPorts.
trait PortDevice {
    /// The worker of the device the port is on (checking what it needs first).
    fn worker(&self) -> Result<Arc<WorkerEntry>, Failure>;
    /// The validated desired device state of the linked configuration.
    fn desired(&self, entry: &WorkerEntry) -> Result<DesiredPort, Failure>;
    /// The port's name on the device.
    fn device_port(&self) -> Result<PortName, Failure>;
    /// The key the worker's drift sweep tracks the port under.
    fn key(&self) -> &PortKey;

    /// Validate and apply the desired configuration, verified by read-back.
    async fn apply(&self) -> Result<Outcome, Failure> {
        let entry = self.worker()?;
        let desired = self.desired(&entry)?;
        self.set_on_device(&entry, desired).await?;
        Ok(Outcome::Applied)
    }

    /// Return the port to clean, verified by read-back.
    async fn clean(&self) -> Result<Outcome, Failure> {
        self.reset_on_device().await?;
        Ok(Outcome::Cleaned)
    }

    /// Read back and compare with the applied configuration.
    async fn verify(&self) -> Result<Outcome, Failure> {
        Ok(if self.device_matches().await? {
            Outcome::InSync
        } else {
            Outcome::Drifted
        })
    }

    /// Applies `desired` through the worker and keeps the port in the drift sweep.
    async fn set_on_device(
        &self,
        entry: &WorkerEntry,
        desired: DesiredPort,
    ) -> Result<(), Failure> {
        entry
            .worker
            .apply(Some(self.key()), PortOperation::Set(desired.clone()))
            .await
            .map_err(Failure::worker)?;
        entry.worker.track(self.key().clone(), Some(desired));
        Ok(())
    }

    /// Resets the port through the worker (out of the drift sweep first).
    async fn reset_on_device(&self) -> Result<(), Failure> {
        let port = self.device_port()?;
        let entry = self.worker()?;
        entry.worker.track(self.key().clone(), None);
        entry
            .worker
            .apply(Some(self.key()), PortOperation::Reset(port))
            .await
            .map_err(Failure::worker)?;
        Ok(())
    }

    /// Whether the device port reads back as the desired state.
    async fn device_matches(&self) -> Result<bool, Failure> {
        let entry = self.worker()?;
        let desired = self.desired(&entry)?;
        let observed = entry
            .worker
            .read(Some(self.key()), desired.port.clone())
            .await
            .map_err(Failure::worker)?;
        let matches = diff(&desired, &observed).is_empty();
        entry.worker.track(self.key().clone(), Some(desired));
        Ok(matches)
    }

    /// The loop ended in Active: keep the port in its switch's drift sweep.
    fn track_active(&self) {
        if let Ok(entry) = self.worker()
            && let Ok(desired) = self.desired(&entry)
        {
            entry.worker.track(self.key().clone(), Some(desired));
        }
    }

    /// What the last [`Outcome::Waiting`] waits for.
    fn waiting(&self) -> Option<String> {
        None
    }
}

/// One reconcile of a port object with [`PortStatus`].
struct Drive<'a, K> {
    ctx: &'a Context,
    obj: &'a K,
    api: Api<K>,
    old_status: PortStatus,
    /// The status to write (switch / devicePort already filled in).
    status: PortStatus,
    desired: Option<PortTarget>,
    /// See [`inputs_digest`].
    inputs: String,
    /// The switch's outage, if its worker finds it not answering.
    outage: Option<Outage>,
    drift_policy: DriftPolicy,
    skip_cleanup: bool,
    drift_check_due: bool,
    /// The configuration kind, for status messages.
    kind: &'static str,
}

fn timestamp(t: &Option<Time>) -> Option<jiff::Timestamp> {
    t.as_ref().map(|t| t.0)
}

/// A port's failures: count, attempt key, last failure and retry time.
#[derive(Debug, Clone, PartialEq, Default)]
struct FailureRecord {
    failures: u32,
    last_attempt: Option<String>,
    last_failure: Option<jiff::Timestamp>,
    next_retry: Option<jiff::Timestamp>,
}

impl FailureRecord {
    fn of(status: &PortStatus) -> Self {
        Self {
            failures: status.failure_count.unwrap_or(0).max(0) as u32,
            last_attempt: status.last_attempt.clone(),
            last_failure: timestamp(&status.last_failure_time),
            next_retry: timestamp(&status.next_retry_time),
        }
    }
}

/// The failures this process recorded last, per port object (by uid: a port
/// deleted and created again starts afresh). A reconcile may read a cached object that does not show its own latest
/// status write yet; the retry time must hold all the same, so the newer of the two
/// records counts. Only failing ports are kept.
#[derive(Default)]
struct FailureLedger(Mutex<HashMap<String, FailureRecord>>);

impl FailureLedger {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, FailureRecord>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The newer of `status` and what this process recorded for `key`.
    fn newest(&self, key: &str, status: FailureRecord) -> FailureRecord {
        match self.map().get(key) {
            Some(mine) if mine.last_failure > status.last_failure => mine.clone(),
            _ => status,
        }
    }

    fn record(&self, key: String, record: FailureRecord) {
        if record.failures == 0 {
            self.map().remove(&key);
        } else {
            self.map().insert(key, record);
        }
    }
}

/// Runs the state machine for one port object: decide, write the state before
/// acting, act, feed the outcome back, until there is nothing to do; then writes
/// status once if it changed.
async fn drive<K, D>(input: Drive<'_, K>, device: &D) -> Result<Action, ControllerError>
where
    K: Resource<DynamicType = ()>
        + ResourceExt
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
    D: PortDevice,
{
    let Drive {
        ctx,
        obj,
        api,
        old_status,
        mut status,
        desired,
        inputs,
        mut outage,
        drift_policy,
        skip_cleanup,
        mut drift_check_due,
        kind,
    } = input;
    let name = obj.name_any();
    let generation = obj.meta().generation;
    let mut state = status.state;
    let mut applied: Option<PortTarget> =
        match (&status.configuration_ref, &status.configuration_hash) {
            (Some(r), Some(h)) => Some(PortTarget {
                configuration: r.clone(),
                hash: h.clone(),
            }),
            _ => None,
        };
    let mut has_finalizer = obj.finalizers().iter().any(|f| f == FINALIZER);
    let ledger_key = obj.uid().unwrap_or_default();
    let FailureRecord {
        mut failures,
        mut last_attempt,
        mut last_failure,
        mut next_retry,
    } = ctx.ledger.newest(&ledger_key, FailureRecord::of(&status));
    let mut outcome: Option<Outcome> = None;
    let mut failure: Option<Failure> = None;
    let mut waiting: Option<String> = None;
    let mut drift_reported = old_status
        .conditions
        .iter()
        .any(|c| c.type_ == "Drifted" && c.status == "True");
    let mut decision = None;
    let mut removed = false;
    for _ in 0..12 {
        let facts = PortFacts {
            state,
            has_finalizer,
            deletion_requested: obj.meta().deletion_timestamp.is_some(),
            skip_device_cleanup: skip_cleanup,
            desired: desired.as_ref(),
            applied: applied.as_ref(),
            inputs: &inputs,
            failures,
            last_attempt: last_attempt.as_deref(),
            last_failure,
            next_retry,
            switch_outage: outage.as_ref().map(|o| o.timing),
            now: jiff::Timestamp::now(),
            drift_check_due,
            drift_reported,
            drift_policy,
            backoff: ctx.settings.backoff,
            outcome,
        };
        let d = decide(&facts);
        tracing::debug!(?state, outcome = ?facts.outcome, drift_check_due, next = %d.state, step = ?d.step, health = ?d.health, "decision");
        failures = d.failures;
        last_attempt = d.attempt.clone();
        last_failure = d.last_failure;
        next_retry = d.next_retry;
        drift_reported = d.health == Health::Drifted;
        match d.applied {
            AppliedChange::Keep => {}
            AppliedChange::SetToDesired => applied = desired.clone(),
            AppliedChange::Clear => applied = None,
        }
        if state != Some(d.state) {
            let from = state.map_or("(none)".to_owned(), |s| s.to_string());
            tracing::info!(from = %from, to = %d.state, kind = K::kind(&()).as_ref(), "port state");
            status.state = Some(d.state);
            status.last_transition_time = Some(Time(jiff::Timestamp::now()));
            state = Some(d.state);
            fill_status(
                &mut status,
                &StatusFacts {
                    generation,
                    applied: applied.as_ref(),
                    failures,
                    last_attempt: &last_attempt,
                    last_failure,
                    next_retry,
                    health: d.health,
                    failure: failure.as_ref(),
                    waiting: waiting.as_deref(),
                    outage: outage.as_ref(),
                    drift_policy,
                    kind,
                },
            );
            // Write the state before acting: a restarted operator resumes from it.
            if d.step != Step::RemoveFinalizer {
                write_status(&api, &name, Some(&old_status), &status).await?;
            }
            ctx.events
                .publish(
                    obj,
                    Severity::Normal,
                    &d.state.to_string(),
                    &format!("{from} -> {}", d.state),
                )
                .await;
        }
        drift_check_due = false;
        let step = d.step;
        decision = Some(d.clone());
        if step == Step::None {
            if d.requeue == Requeue::Now {
                outcome = None;
                continue;
            }
            break;
        }
        let result = match step {
            Step::None => Ok(Outcome::InSync),
            Step::AddFinalizer => {
                let mut f = obj.finalizers().to_vec();
                f.push(FINALIZER.into());
                api.patch(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"metadata": {
                        "finalizers": f,
                        "resourceVersion": obj.resource_version(),
                    }})),
                )
                .await?;
                Ok(Outcome::FinalizerAdded)
            }
            Step::RemoveFinalizer => {
                let f: Vec<String> = obj
                    .finalizers()
                    .iter()
                    .filter(|f| *f != FINALIZER)
                    .cloned()
                    .collect();
                api.patch(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"metadata": {"finalizers": f}})),
                )
                .await?;
                Ok(Outcome::FinalizerRemoved)
            }
            Step::Apply => device.apply().await,
            Step::Clean => device.clean().await,
            Step::Verify => device.verify().await,
        };
        waiting = None;
        match result {
            Ok(o) => {
                outcome = Some(o);
                failure = None;
                match o {
                    Outcome::FinalizerAdded => has_finalizer = true,
                    Outcome::FinalizerRemoved => {
                        has_finalizer = false;
                        removed = true;
                    }
                    Outcome::Waiting => waiting = device.waiting(),
                    _ => {}
                }
            }
            Err(f) => {
                if let Some(o) = &f.outage {
                    outage = Some(o.as_ref().clone());
                }
                outcome = Some(Outcome::Failed(f.kind));
                tracing::warn!(category = f.category, error = %f.message, "port step failed");
                ctx.events
                    .publish(obj, Severity::Warning, f.category, &f.message)
                    .await;
                failure = Some(f);
            }
        }
    }
    let Some(d) = decision else {
        return Ok(Action::await_change());
    };
    ctx.ledger.record(
        ledger_key,
        FailureRecord {
            failures: if removed { 0 } else { failures },
            last_attempt: last_attempt.clone(),
            last_failure,
            next_retry,
        },
    );
    if removed {
        ctx.events.forget(&obj.uid().unwrap_or_default());
        return Ok(Action::await_change());
    }
    // Active ports are watched by their switch's drift sweep.
    if state == Some(PortState::Active) {
        device.track_active();
    }
    if d.health == Health::Steady {
        ctx.events.forget(&obj.uid().unwrap_or_default());
    }
    // A port that starts waiting for a switch that does not answer says so once (an
    // Active port does not: its configuration is believed to be in place, and the
    // Switch carries the Warning).
    if let (Health::SwitchDown, None, Some(o)) = (d.health, &failure, &outage)
        && state != Some(PortState::Active)
        && find_condition(&old_status.conditions, "Ready").map(|c| c.reason.as_str())
            != Some(o.error.category())
    {
        ctx.events
            .publish(
                obj,
                Severity::Warning,
                o.error.category(),
                &o.error.to_string(),
            )
            .await;
    }
    fill_status(
        &mut status,
        &StatusFacts {
            generation,
            applied: applied.as_ref(),
            failures,
            last_attempt: &last_attempt,
            last_failure,
            next_retry,
            health: d.health,
            failure: failure.as_ref(),
            waiting: waiting.as_deref(),
            outage: outage.as_ref(),
            drift_policy,
            kind,
        },
    );
    if status != old_status {
        write_status(&api, &name, Some(&old_status), &status).await?;
    }
    Ok(match d.requeue {
        Requeue::Never | Requeue::DriftCheck | Requeue::Now => Action::await_change(),
        Requeue::After(t) => Action::requeue(t),
    })
}

/// What [`fill_status`] needs besides the status.
struct StatusFacts<'a> {
    generation: Option<i64>,
    applied: Option<&'a PortTarget>,
    failures: u32,
    last_attempt: &'a Option<String>,
    last_failure: Option<jiff::Timestamp>,
    next_retry: Option<jiff::Timestamp>,
    health: Health,
    failure: Option<&'a Failure>,
    waiting: Option<&'a str>,
    outage: Option<&'a Outage>,
    drift_policy: DriftPolicy,
    kind: &'static str,
}

fn fill_status(status: &mut PortStatus, facts: &StatusFacts<'_>) {
    let StatusFacts {
        generation,
        applied,
        failures,
        last_attempt,
        last_failure,
        next_retry,
        health,
        failure,
        waiting,
        outage,
        drift_policy,
        kind,
    } = *facts;
    status.configuration_ref = applied.map(|a| a.configuration.clone());
    status.configuration_hash = applied.map(|a| a.hash.clone());
    status.observed_generation = generation;
    let failing = failures > 0;
    status.failure_count = failing.then_some(failures as i32);
    status.last_attempt = if failing { last_attempt.clone() } else { None };
    status.last_failure_time = last_failure.filter(|_| failing).map(Time);
    status.next_retry_time = next_retry.filter(|_| failing).map(Time);
    let state = status.state.map(|s| s.to_string()).unwrap_or_default();
    match (health, failure, outage) {
        // Waiting out an earlier failure: the condition and error stay as it left
        // them.
        (Health::BackingOff, _, _) => {}
        (Health::SwitchDown, _, Some(o)) => {
            let since = o.since.round(jiff::Unit::Second).unwrap_or(o.since);
            if status.state == Some(PortState::Active) {
                set_condition(
                    &mut status.conditions,
                    "Ready",
                    Truth::Unknown,
                    o.error.category(),
                    format!(
                        "the switch does not answer (since {since}): {}; the configuration is \
                         believed to be still on the device, and is checked when it answers",
                        o.error
                    ),
                    generation,
                );
            } else {
                let next = o
                    .timing
                    .next_probe
                    .round(jiff::Unit::Second)
                    .unwrap_or(o.timing.next_probe);
                status.last_error = Some(o.error.to_string());
                set_condition(
                    &mut status.conditions,
                    "Ready",
                    false,
                    o.error.category(),
                    format!(
                        "{}; the switch does not answer since {since} ({} failed attempts) and is \
                         tried again at {next}; this port waits for it",
                        o.error, o.timing.failures
                    ),
                    generation,
                );
            }
        }
        (Health::Failed(_) | Health::SwitchDown, Some(f), _) => {
            status.last_error = Some(f.message.clone());
            set_condition(
                &mut status.conditions,
                "Ready",
                false,
                f.category,
                f.message.clone(),
                generation,
            );
        }
        (Health::Steady, _, _) => {
            status.last_error = None;
            let msg = match applied {
                Some(a) => format!("the device carries {kind} {}", a.configuration.name),
                None => "the port is clean".into(),
            };
            set_condition(
                &mut status.conditions,
                "Ready",
                true,
                &state,
                msg,
                generation,
            );
        }
        (Health::Drifted, _, _) => {
            status.last_error = None;
            set_condition(
                &mut status.conditions,
                "Ready",
                false,
                "Drifted",
                "the device differs from the applied configuration".into(),
                generation,
            );
        }
        _ => {
            let (reason, message) = match waiting {
                Some(w) => ("WaitingForNextPort", w.to_owned()),
                None => (state.as_str(), format!("the port is {state}")),
            };
            set_condition(
                &mut status.conditions,
                "Ready",
                false,
                reason,
                message,
                generation,
            );
        }
    }
    if drift_policy == DriftPolicy::ReportOnly
        || status.conditions.iter().any(|c| c.type_ == "Drifted")
    {
        let drifted = health == Health::Drifted;
        set_condition(
            &mut status.conditions,
            "Drifted",
            drifted,
            if drifted { "DeviceDiffers" } else { "InSync" },
            if drifted {
                "the device differs from the applied configuration; driftPolicy ReportOnly leaves it alone".into()
            } else {
                "the device matches the applied configuration".into()
            },
            generation,
        );
    }
}

async fn write_status<K>(
    api: &Api<K>,
    name: &str,
    current: Option<&PortStatus>,
    status: &PortStatus,
) -> Result<(), ControllerError>
where
    K: Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    if current == Some(status) {
        return Ok(());
    }
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(status_patch(status, PORT_STATUS_KEYS)),
    )
    .await?;
    Ok(())
}

// ---------------------------------------------------------------- Switch

async fn reconcile_switch(
    switch: Arc<Switch>,
    ctx: Arc<Context>,
) -> Result<Action, ControllerError> {
    let ns = switch.namespace().unwrap_or_default();
    let api: Api<Switch> = Api::namespaced(ctx.client.clone(), &ns);
    finalizer(&api, FINALIZER, switch, |event| async {
        match event {
            FinalizerEvent::Apply(s) => apply_switch(&s, &ctx).await,
            FinalizerEvent::Cleanup(s) => cleanup_switch(&s, &ctx).await,
        }
    })
    .await
    .map_err(|e| ControllerError::Finalizer(Box::new(e)))
}

async fn apply_switch(switch: &Switch, ctx: &Context) -> Result<Action, ControllerError> {
    let ns = switch.namespace().unwrap_or_default();
    let name = switch.name_any();
    let client = &ctx.client;
    let generation = switch.metadata.generation;
    let mut status = switch.status.clone().unwrap_or_default();
    status.observed_generation = generation;
    let provider = Api::<ProviderSwitch>::namespaced(client.clone(), &ns)
        .get_opt(&switch.spec.provider.name)
        .await?;
    let mut requeue = ctx.settings.drift_interval;
    let verdict: Result<Reachability, (&'static str, String)> = async {
        validate_switch(&switch.spec).map_err(|e| ("InvalidSwitch", e.to_string()))?;
        let provider = provider.as_ref().ok_or_else(|| {
            (
                "ProviderNotFound",
                format!(
                    "ProviderSwitch {:?} not found; waiting for it",
                    switch.spec.provider.name
                ),
            )
        })?;
        validate_provider(&provider.spec)
            .map_err(|e| ("InvalidProvider", format!("ProviderSwitch: {e}")))?;
        let secret = match &provider.spec.credentials_secret_ref {
            Some(r) => {
                let sns = r.namespace.clone().unwrap_or_else(|| ns.clone());
                Api::<Secret>::namespaced(client.clone(), &sns)
                    .get_opt(&r.name)
                    .await
                    .map_err(|e| ("KubernetesError", e.to_string()))?
            }
            None => None,
        };
        check_credentials(provider, secret.as_ref()).map_err(|e| (e.category(), e.to_string()))?;
        let entry = ctx
            .worker(switch, provider, secret.as_ref())
            .map_err(|e| (e.category(), e.to_string()))?;
        Ok(entry.worker.reachability())
    }
    .await;
    let was_reachable =
        find_condition(&status.conditions, "DeviceReachable").map(|c| c.status.clone());
    match &verdict {
        Ok(Reachability::Reachable) => {
            set_condition(
                &mut status.conditions,
                "DeviceReachable",
                true,
                "Reachable",
                "the device answered".into(),
                generation,
            );
            set_condition(
                &mut status.conditions,
                "Ready",
                true,
                "Ready",
                format!("{} ports managed", switch.spec.ports.len()),
                generation,
            );
        }
        Ok(Reachability::Unknown) => {
            let message = "the device has not been tried yet".to_owned();
            set_condition(
                &mut status.conditions,
                "DeviceReachable",
                Truth::Unknown,
                "Probing",
                message.clone(),
                generation,
            );
            set_condition(
                &mut status.conditions,
                "Ready",
                Truth::Unknown,
                "Probing",
                message,
                generation,
            );
        }
        Ok(Reachability::Down(o)) => {
            let round = |t: jiff::Timestamp| t.round(jiff::Unit::Second).unwrap_or(t);
            let message = format!(
                "{} (since {}, {} failed attempts; tried again at {})",
                o.error,
                round(o.since),
                o.timing.failures,
                round(o.timing.next_probe)
            );
            let reason = o.error.category();
            set_condition(
                &mut status.conditions,
                "DeviceReachable",
                false,
                reason,
                message.clone(),
                generation,
            );
            set_condition(
                &mut status.conditions,
                "Ready",
                false,
                reason,
                message,
                generation,
            );
        }
        Err((reason, message)) => {
            requeue = ctx.settings.backoff.base;
            set_condition(
                &mut status.conditions,
                "Ready",
                false,
                reason,
                message.clone(),
                generation,
            );
        }
    }
    match (
        was_reachable.as_deref(),
        find_condition(&status.conditions, "DeviceReachable").map(|c| c.status.as_str()),
        &verdict,
    ) {
        (prev, Some("False"), Ok(Reachability::Down(o))) if prev != Some("False") => {
            ctx.events
                .publish(
                    switch,
                    Severity::Warning,
                    o.error.category(),
                    &format!("the device does not answer: {}", o.error),
                )
                .await;
        }
        (Some("False"), Some("True"), _) => {
            ctx.events
                .publish(
                    switch,
                    Severity::Normal,
                    "Reachable",
                    "the device answers again",
                )
                .await;
        }
        _ => {}
    }
    ensure_ports(switch, ctx).await?;
    if switch.status.as_ref() != Some(&status) {
        api_status_patch::<Switch>(client, &ns, &name, &status).await?;
    }
    Ok(Action::requeue(requeue))
}

async fn api_status_patch<K>(
    client: &Client,
    ns: &str,
    name: &str,
    status: &ConditionsStatus,
) -> Result<(), ControllerError>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    Api::<K>::namespaced(client.clone(), ns)
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(status_patch(status, &["observedGeneration", "conditions"])),
        )
        .await?;
    Ok(())
}

/// One SwitchPort per `spec.ports` entry, owned by the Switch; adopts a port a user
/// created ahead of time; deletes ports whose entry went away.
async fn ensure_ports(switch: &Switch, ctx: &Context) -> Result<(), ControllerError> {
    let ns = switch.namespace().unwrap_or_default();
    let name = switch.name_any();
    let api: Api<SwitchPort> = Api::namespaced(ctx.client.clone(), &ns);
    let owner = OwnerReference {
        api_version: "patchbay.dev/v1alpha1".into(),
        kind: "Switch".into(),
        name: name.clone(),
        uid: switch.uid().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    };
    let ours: Vec<Arc<SwitchPort>> = ctx
        .ports
        .state()
        .into_iter()
        .filter(|p| {
            p.namespace().as_deref() == Some(ns.as_str())
                && p.labels().get(SWITCH_LABEL) == Some(&name)
        })
        .collect();
    let known: std::collections::HashSet<String> = ours.iter().map(|p| p.name_any()).collect();
    for key in switch.spec.ports.keys() {
        if known.contains(key) {
            continue;
        }
        match api.get_opt(key).await? {
            None => {
                let port = SwitchPort {
                    metadata: ObjectMeta {
                        name: Some(key.clone()),
                        namespace: Some(ns.clone()),
                        labels: Some([(SWITCH_LABEL.to_string(), name.clone())].into()),
                        owner_references: Some(vec![owner.clone()]),
                        ..Default::default()
                    },
                    spec: SwitchPortSpec::default(),
                    status: None,
                };
                match api.create(&PostParams::default(), &port).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(e)) if e.code == 409 => {}
                    Err(e) => return Err(e.into()),
                }
            }
            Some(p) => {
                // Created ahead of time by a user: adopt it, unless another controller
                // owns it.
                let foreign = p
                    .owner_references()
                    .iter()
                    .any(|o| o.controller == Some(true) && o.uid != owner.uid);
                let owned = p.owner_references().iter().any(|o| o.uid == owner.uid);
                let labelled = p.labels().get(SWITCH_LABEL) == Some(&name);
                if !(foreign || owned && labelled) {
                    let mut refs = p.owner_references().to_vec();
                    if !owned {
                        refs.push(owner.clone());
                    }
                    api.patch(
                        key,
                        &PatchParams::default(),
                        &Patch::Merge(json!({"metadata": {
                            "labels": {SWITCH_LABEL: name},
                            "ownerReferences": refs,
                        }})),
                    )
                    .await?;
                }
            }
        }
    }
    for p in &ours {
        if !switch.spec.ports.contains_key(&p.name_any()) && p.metadata.deletion_timestamp.is_none()
        {
            api.delete(&p.name_any(), &DeleteParams::default()).await?;
        }
    }
    Ok(())
}

async fn cleanup_switch(switch: &Switch, ctx: &Context) -> Result<Action, ControllerError> {
    let ns = switch.namespace().unwrap_or_default();
    let name = switch.name_any();
    let api: Api<SwitchPort> = Api::namespaced(ctx.client.clone(), &ns);
    let ours: Vec<SwitchPort> = api
        .list(&ListParams::default().labels(&format!("{SWITCH_LABEL}={name}")))
        .await?
        .items;
    for p in &ours {
        if p.metadata.deletion_timestamp.is_none() {
            api.delete(&p.name_any(), &DeleteParams::default()).await?;
        }
    }
    if !ours.is_empty() {
        return Err(ControllerError::PortsRemaining(ours.len()));
    }
    ctx.drop_worker(&ns, &name);
    ctx.events.forget(&switch.uid().unwrap_or_default());
    ctx.events
        .publish(
            switch,
            Severity::Normal,
            "Deleted",
            "every port was cleaned and deleted",
        )
        .await;
    Ok(Action::await_change())
}

// ---------------------------------------------------------------- ProviderSwitch

async fn reconcile_provider(
    provider: Arc<ProviderSwitch>,
    ctx: Arc<Context>,
) -> Result<Action, ControllerError> {
    let ns = provider.namespace().unwrap_or_default();
    let api: Api<ProviderSwitch> = Api::namespaced(ctx.client.clone(), &ns);
    finalizer(&api, FINALIZER, provider, |event| async {
        match event {
            FinalizerEvent::Apply(p) => apply_provider(&p, &ctx).await,
            FinalizerEvent::Cleanup(p) => {
                let users = switches_using(&p, &ctx).await?;
                if users > 0 {
                    return Err(ControllerError::SwitchesRemaining(users));
                }
                Ok(Action::await_change())
            }
        }
    })
    .await
    .map_err(|e| ControllerError::Finalizer(Box::new(e)))
}

/// Switches and SmartNicPorts that use `provider`: it stays until they are gone
/// (their ports must be cleaned through it first).
async fn switches_using(
    provider: &ProviderSwitch,
    ctx: &Context,
) -> Result<usize, ControllerError> {
    let ns = provider.namespace().unwrap_or_default();
    let switches = Api::<Switch>::namespaced(ctx.client.clone(), &ns)
        .list(&ListParams::default())
        .await?;
    let snics = Api::<SmartNicPort>::namespaced(ctx.client.clone(), &ns)
        .list(&ListParams::default())
        .await?;
    Ok(switches
        .items
        .iter()
        .filter(|s| s.spec.provider.name == provider.name_any())
        .count()
        + snics
            .items
            .iter()
            .filter(|p| p.spec.provider.name == provider.name_any())
            .count())
}

async fn apply_provider(
    provider: &ProviderSwitch,
    ctx: &Context,
) -> Result<Action, ControllerError> {
    let ns = provider.namespace().unwrap_or_default();
    let generation = provider.metadata.generation;
    let mut status = provider.status.clone().unwrap_or_default();
    status.observed_generation = generation;
    let secret = match &provider.spec.credentials_secret_ref {
        Some(r) => {
            let sns = r.namespace.clone().unwrap_or_else(|| ns.clone());
            Api::<Secret>::namespaced(ctx.client.clone(), &sns)
                .get_opt(&r.name)
                .await?
        }
        None => None,
    };
    let verdict = validate_provider(&provider.spec)
        .map_err(|e| ("InvalidProvider", e.to_string()))
        .and_then(|()| {
            check_credentials(provider, secret.as_ref()).map_err(|e| (e.category(), e.to_string()))
        });
    match verdict {
        Ok(()) => set_condition(
            &mut status.conditions,
            "Ready",
            true,
            "Valid",
            "specification and credentials are valid".into(),
            generation,
        ),
        Err((reason, message)) => set_condition(
            &mut status.conditions,
            "Ready",
            false,
            reason,
            message,
            generation,
        ),
    }
    if provider.status.as_ref() != Some(&status) {
        api_status_patch::<ProviderSwitch>(&ctx.client, &ns, &provider.name_any(), &status).await?;
    }
    Ok(Action::requeue(Duration::from_secs(300)))
}

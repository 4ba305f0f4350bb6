//! What the controllers share: the client, the settings, the backends, the switch
//! workers (one per Switch or SmartNIC provider, rebuilt when the ProviderSwitch or
//! its Secret changes), the Event publisher, the status ledger and the channels the
//! workers' notices travel on. Spawns workers; reads Secrets from the API server.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, Resource, ResourceExt};
use patchbay_providers::Device;
use patchbay_providers::values::PortName;
use tokio::sync::{mpsc, watch};

use super::events::EventPublisher;
use super::port_loop::{DeviceHandle, StatusLedger};
use crate::api::{
    CabledPortKind, ProviderSwitch, Server, SmartNicPort, Switch, SwitchPort,
    SwitchPortConfiguration,
};
use crate::backends::{BackendError, Backends};
use crate::settings::Settings;
use crate::worker::{Notice, Notifier, SwitchWorker, WorkerConfig};

/// A running switch worker and what it was built from.
pub struct WorkerEntry {
    /// The ProviderSwitch (uid, generation) and Secret version it was built from.
    pub fingerprint: String,
    /// The backend.
    pub device: Arc<dyn Device>,
    /// The worker that owns it.
    pub worker: Arc<SwitchWorker>,
}

impl WorkerEntry {
    /// The handle a port's steps use.
    pub fn handle(&self) -> DeviceHandle {
        DeviceHandle {
            worker: self.worker.clone(),
            capabilities: self.device.capabilities(),
        }
    }
}

/// Where workers' notices go: ports to reconcile, Switches whose reachability changed.
pub struct Notices {
    /// SwitchPorts (drift, the switch answering or not).
    pub ports: mpsc::UnboundedSender<ObjectRef<SwitchPort>>,
    /// SmartNicPorts, from their provider's worker.
    pub smartnics: mpsc::UnboundedSender<ObjectRef<SmartNicPort>>,
    /// Switches.
    pub switches: mpsc::UnboundedSender<ObjectRef<Switch>>,
}

/// Whether one shared watch's cache holds its first list: set by the watch when the
/// list is in, never unset (a later re-list replaces the cache in one step).
pub type Listed = watch::Receiver<bool>;

/// The gate every reconcile passes before it reads a cache: open once every shared
/// watch holds its first list. Read earlier, an object not listed yet reads as
/// deleted — a Switch as gone, a bound Server's claim as missing (its ports would be
/// sent back to the provisioning network), a port as not cabled.
///
/// Not kube's `Store::wait_until_ready`: its readiness is a oneshot receiver that
/// keeps the waker of the last task to poll it, so when several reconciles wait on it
/// at once only the last is woken and the others wait forever, holding their object
/// (their next triggers queue behind them). That happens when the controllers start
/// before every cache has listed — a restart, a new leader under load. One future
/// ([`SyncGate::open_when`]) waits on the watches; any number wait on the gate.
#[derive(Clone, Debug)]
pub struct Synced(watch::Receiver<bool>);

/// The side of [`Synced`] that opens it.
pub struct SyncGate(watch::Sender<bool>);

impl Synced {
    /// A closed gate and what opens it.
    pub fn new() -> (SyncGate, Synced) {
        let (tx, rx) = watch::channel(false);
        (SyncGate(tx), Synced(rx))
    }

    /// Waits until the gate opens (at once afterwards); false when it never will —
    /// a watch stopped before its first list, so the operator is stopping.
    pub async fn wait(&self) -> bool {
        self.0.clone().wait_for(|open| *open).await.is_ok()
    }
}

impl SyncGate {
    /// Opens the gate once every watch of `listed` holds its first list; drops it
    /// closed if one of them stops first.
    pub async fn open_when(self, listed: Vec<Listed>) {
        for mut watch in listed {
            if watch.wait_for(|l| *l).await.is_err() {
                return;
            }
        }
        self.0.send_replace(true);
    }
}

/// The caches of the shared watches the controllers read from instead of a GET per
/// reconcile. Each is fed by one watch whose events also wake the controllers that
/// read it, and a controller is woken only once the cache holds what woke it. A
/// reconcile reads them only after the [`Synced`] gate opened.
#[derive(Clone)]
pub struct Stores {
    /// Switches.
    pub switches: Store<Switch>,
    /// ProviderSwitches.
    pub providers: Store<ProviderSwitch>,
    /// SwitchPortConfigurations.
    pub configurations: Store<SwitchPortConfiguration>,
}

impl Stores {
    /// Switch `name` of namespace `ns`.
    pub fn switch(&self, ns: &str, name: &str) -> Option<Switch> {
        self.switches
            .get(&ObjectRef::new(name).within(ns))
            .map(|s| (*s).clone())
    }

    /// ProviderSwitch `name` of namespace `ns`.
    pub fn provider(&self, ns: &str, name: &str) -> Option<ProviderSwitch> {
        self.providers
            .get(&ObjectRef::new(name).within(ns))
            .map(|p| (*p).clone())
    }

    /// SwitchPortConfiguration `name` of namespace `ns`.
    pub fn configuration(&self, ns: &str, name: &str) -> Option<SwitchPortConfiguration> {
        self.configurations
            .get(&ObjectRef::new(name).within(ns))
            .map(|c| (*c).clone())
    }
}

/// Shared state of the controllers.
pub struct Context {
    /// The API server.
    pub client: Client,
    /// The operator's settings.
    pub settings: Settings,
    /// Builds device backends.
    pub backends: Backends,
    /// Publishes Events (Warning repetitions folded into series).
    pub events: EventPublisher,
    /// The status this process wrote last, per port (a stale cached copy waits).
    pub ledger: StatusLedger,
    /// Where workers' notices go.
    pub notices: Notices,
    /// The SwitchPort cache of the port controller: the Switch controller checks its
    /// ports here instead of listing them on every port event.
    pub ports: Store<SwitchPort>,
    /// The caches a reconcile reads what it refers to from (no GET per reconcile).
    pub stores: Stores,
    workers: Mutex<HashMap<(String, String), Arc<WorkerEntry>>>,
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

/// The worker key of a Switch.
pub fn switch_worker_key(namespace: &str, switch: &str) -> (String, String) {
    (namespace.to_owned(), switch.to_owned())
}

/// The worker key of a SmartNIC provider (Switch names cannot contain `/`).
pub fn smartnic_worker_key(namespace: &str, provider: &str) -> (String, String) {
    (namespace.to_owned(), format!("smartnic/{provider}"))
}

/// The credentials Secret of `provider`, if it names one (its namespace defaults to
/// the provider's). The one place the controllers read Secrets.
pub async fn fetch_secret(
    client: &Client,
    provider: &ProviderSwitch,
) -> Result<Option<Secret>, kube::Error> {
    let Some(r) = &provider.spec.credentials_secret_ref else {
        return Ok(None);
    };
    let ns = r
        .namespace
        .clone()
        .or_else(|| provider.namespace())
        .unwrap_or_default();
    Api::<Secret>::namespaced(client.clone(), &ns)
        .get_opt(&r.name)
        .await
}

/// Every Server NIC cabled to a port of `kind`: (port namespace, port name) →
/// (Server name, the NIC's MAC). One list of the (cluster-scoped) Servers.
pub async fn cabled_nics(
    client: &Client,
    kind: CabledPortKind,
) -> Result<HashMap<(String, String), (String, Option<String>)>, kube::Error> {
    let servers = Api::<Server>::all(client.clone())
        .list(&kube::api::ListParams::default())
        .await?;
    let mut out = HashMap::new();
    for s in &servers.items {
        for nic in &s.spec.nics {
            let Some(p) = &nic.port else { continue };
            if p.kind.unwrap_or(CabledPortKind::SwitchPort) == kind {
                out.insert(
                    (p.namespace.clone(), p.name.clone()),
                    (s.name_any(), nic.mac.clone()),
                );
            }
        }
    }
    Ok(out)
}

/// The MAC address of the Server NIC cabled to port `name` (of `kind`) in
/// `namespace`, if a Server names it and gives the NIC a `mac`. Called only for a
/// configuration with egress ACL rules.
pub async fn cabled_host_mac(
    client: &Client,
    kind: CabledPortKind,
    namespace: &str,
    name: &str,
) -> Result<Option<String>, kube::Error> {
    Ok(cabled_nics(client, kind)
        .await?
        .remove(&(namespace.to_owned(), name.to_owned()))
        .and_then(|(_, mac)| mac))
}

/// An API for kind `K` in `namespace`, or in all namespaces.
pub fn api_for<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope>,
    K::DynamicType: Default,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

impl Context {
    /// The shared state; workers are spawned on first use.
    pub fn new(
        client: Client,
        settings: Settings,
        backends: Backends,
        events: EventPublisher,
        notices: Notices,
        ports: Store<SwitchPort>,
        stores: Stores,
    ) -> Self {
        Self {
            client,
            settings,
            backends,
            events,
            ledger: StatusLedger::default(),
            notices,
            ports,
            stores,
            workers: Mutex::new(HashMap::new()),
        }
    }

    fn workers(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), Arc<WorkerEntry>>> {
        self.workers.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The worker of a Switch, (re)built when its provider or credentials changed.
    pub fn worker(
        &self,
        switch: &Switch,
        provider: &ProviderSwitch,
        secret: Option<&Secret>,
    ) -> Result<Arc<WorkerEntry>, BackendError> {
        let key = switch_worker_key(&switch.namespace().unwrap_or_default(), &switch.name_any());
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
            // The Switch may have grown: fixture devices grow the ports too.
            self.backends.add_ports(provider, &ports);
            entry.worker.set_probe_ports(ports);
            return Ok(entry.clone());
        }
        let (ports_tx, switch_tx) = (self.notices.ports.clone(), self.notices.switches.clone());
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
    pub fn smartnic_worker(
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
        let tx = self.notices.smartnics.clone();
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
                batch_quiet: self.settings.batch_quiet,
                drift_interval: self.settings.drift_interval,
                max_sessions,
                backoff: self.settings.backoff,
                backend: provider.spec.backend.name(),
                batch_timeout: self.settings.batch_timeout,
                group_hold: crate::worker::GROUP_HOLD,
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

    /// The worker of `key`, if one runs for this provider and Secret as they are (a
    /// worker for an older version of them is about to be replaced).
    pub fn current_worker(
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

    /// Stops the worker of `key` (its Switch is gone).
    pub fn drop_worker(&self, key: &(String, String)) {
        self.workers().remove(key);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use futures::StreamExt;
    use futures::stream::FuturesUnordered;
    use tokio::sync::watch;

    use super::Synced;

    /// Waiters as the controllers hold them: each its own future in a
    /// `FuturesUnordered`, polled only when its own waker fires.
    fn waiters(synced: &Synced, n: usize) -> FuturesUnordered<impl Future<Output = bool>> {
        (0..n)
            .map(|_| {
                let s = synced.clone();
                async move { s.wait().await }
            })
            .collect()
    }

    #[tokio::test]
    async fn every_waiter_goes_on_once_the_last_watch_has_listed() {
        let (gate, synced) = Synced::new();
        let (ports, ports_listed) = watch::channel(false);
        let (switches, switches_listed) = watch::channel(false);
        let opener = tokio::spawn(gate.open_when(vec![ports_listed, switches_listed]));
        let mut waiting = waiters(&synced, 64);
        assert!(futures::poll!(waiting.next()).is_pending());
        ports.send_replace(true);
        tokio::task::yield_now().await;
        assert!(
            futures::poll!(waiting.next()).is_pending(),
            "one watch still lists"
        );
        switches.send_replace(true);
        let went_on: Vec<bool> = tokio::time::timeout(Duration::from_secs(5), waiting.collect())
            .await
            .expect("every waiter is woken, not only the last to poll");
        assert_eq!(went_on, vec![true; 64]);
        opener.await.unwrap();
        // Open for good: a later waiter passes at once, whatever the watches do next.
        drop((ports, switches));
        assert!(futures::poll!(std::pin::pin!(synced.wait())).is_ready());
    }

    #[tokio::test]
    async fn a_watch_stopping_before_its_list_leaves_the_gate_shut_and_the_waiters_told() {
        let (gate, synced) = Synced::new();
        let (ports, ports_listed) = watch::channel(false);
        let opener = tokio::spawn(gate.open_when(vec![ports_listed]));
        let waiting = waiters(&synced, 8);
        drop(ports);
        let went_on: Vec<bool> = tokio::time::timeout(Duration::from_secs(5), waiting.collect())
            .await
            .expect("the waiters are told");
        assert_eq!(went_on, vec![false; 8]);
        opener.await.unwrap();
    }
}

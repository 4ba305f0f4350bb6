//! What the controllers share: the client, the settings, the backends, the switch
//! workers (one per Switch or SmartNIC provider, rebuilt when the ProviderSwitch or
//! its Secret changes), the Event publisher, the status ledger and the channels the
//! workers' notices travel on. Spawns workers; reads Secrets from the API server.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, Resource, ResourceExt};
use patchbay_providers::values::PortName;
use tokio::sync::{mpsc, watch};

use super::events::EventPublisher;
use super::port_loop::{DeviceHandle, StatusLedger};
use crate::api::{
    CabledPortKind, ProviderSwitch, Revisioned, Server, ServerClaim, SmartNicConfiguration,
    SmartNicPort, Switch, SwitchPort, SwitchPortConfiguration, SwitchPortDefinition, VLANPool,
};
use crate::backends::Backends;
use crate::compact_port::CompactPort;
use crate::decide::failure::{BackendError, Failure};
use crate::decide::own_writes::OwnWrites;
use crate::decide::phases::cabled_nic;
use crate::decide::port_index::PortIndex;
use crate::decide::tenancy::{self, Carried, Grants, TenancyVerdict};
use crate::grants::GrantsCache;
use crate::settings::Settings;
use crate::worker::{Notice, Notifier, SwitchWorker, WorkerConfig};
use patchbay_providers::values::VlanId;

/// The one worker of a device (a ProviderSwitch) and what it drives now.
pub struct WorkerEntry {
    /// The worker: one per ProviderSwitch for its whole life (a changed
    /// ProviderSwitch or Secret replaces its device, not the worker).
    pub worker: Arc<SwitchWorker>,
    current: Mutex<Built>,
}

/// What a worker's device was built from, and what it can do.
struct Built {
    /// The ProviderSwitch (uid, generation) and Secret version.
    fingerprint: String,
    capabilities: patchbay_providers::Capabilities,
}

impl WorkerEntry {
    fn built(&self) -> parking_lot::MutexGuard<'_, Built> {
        self.current.lock()
    }

    /// The handle a port's steps use.
    pub fn handle(&self) -> DeviceHandle {
        DeviceHandle {
            worker: self.worker.clone(),
            capabilities: self.built().capabilities.clone(),
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

/// The SwitchPort cache: a record per port ([`CompactPort`]), keyed by name and
/// namespace. A reader that needs a port gets one made from its record.
#[derive(Clone)]
pub struct PortCache(pub Store<CompactPort>);

impl PortCache {
    /// The record of the port `key` names.
    pub fn record(&self, key: &ObjectRef<SwitchPort>) -> Option<Arc<CompactPort>> {
        let mut at = ObjectRef::<CompactPort>::new(&key.name);
        at.namespace.clone_from(&key.namespace);
        self.0.get(&at)
    }

    /// The port `key` names, made from its record.
    pub fn get(&self, key: &ObjectRef<SwitchPort>) -> Option<Arc<SwitchPort>> {
        self.record(key).map(|r| Arc::new(r.to_port()))
    }

    /// Every port's record.
    pub fn state(&self) -> Vec<Arc<CompactPort>> {
        self.0.state()
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
    /// SmartNicPorts.
    pub smartnics: Store<SmartNicPort>,
    /// VLANPools (cluster-scoped) and the grants last computed from them.
    pub pools: Store<VLANPool>,
    /// Servers (cluster-scoped): whom a port they drive serves.
    pub servers: Store<Server>,
    /// ServerClaims: what a Server's role asks of BGP.
    pub claims: Store<ServerClaim>,
    /// The configurations' ControllerRevisions (their rollouts' revisions).
    pub revisions: Store<ControllerRevision>,
    /// SmartNicConfigurations.
    pub smartnic_configurations: Store<SmartNicConfiguration>,
    grants: Arc<GrantsCache>,
    /// The Switches with valid BGP, last computed ([`super::bgp_fleet::bgp_switches`]).
    pub(super) bgp_switches: Arc<super::bgp_fleet::BgpSwitchesCache>,
}

impl Stores {
    /// The caches, and no grants computed yet.
    pub fn new(
        switches: Store<Switch>,
        providers: Store<ProviderSwitch>,
        configurations: Store<SwitchPortConfiguration>,
        smartnics: Store<SmartNicPort>,
        pools: Store<VLANPool>,
        servers: Store<Server>,
        claims: Store<ServerClaim>,
    ) -> Self {
        Stores {
            switches,
            providers,
            configurations,
            smartnics,
            pools,
            servers,
            claims,
            revisions: kube::runtime::reflector::store().0,
            smartnic_configurations: kube::runtime::reflector::store().0,
            grants: Arc::default(),
            bgp_switches: Arc::default(),
        }
    }

    /// Every Server NIC cabled to a port of `kind`: (port namespace, port name) →
    /// (Server name, the NIC's MAC). From the Server cache (a Server's change wakes
    /// the ports it names: [`crate::triggers::ports_cabled_to`]).
    pub fn cabled_nics(
        &self,
        kind: CabledPortKind,
    ) -> HashMap<(String, String), (String, Option<String>)> {
        let mut out = HashMap::new();
        for s in self.servers.state() {
            for nic in &s.spec.nics {
                let Some(p) = &nic.port else { continue };
                if p.port_kind() == kind {
                    out.insert(
                        (p.namespace.clone(), p.name.clone()),
                        (s.name_any(), nic.mac.clone()),
                    );
                }
            }
        }
        out
    }

    /// The MAC address of the Server NIC cabled to port `name` (of `kind`) in
    /// `namespace`, if a Server names it and gives the NIC a `mac`. Called only for a
    /// configuration with egress ACL rules.
    pub fn cabled_host_mac(
        &self,
        kind: CabledPortKind,
        namespace: &str,
        name: &str,
    ) -> Option<String> {
        self.servers
            .state()
            .iter()
            .find_map(|s| cabled_nic(&s.spec.nics, kind, namespace, name)?.mac.clone())
    }

    /// What the cached VLANPools grant (recomputed only when a pool changed), with
    /// `parking` granted to nobody.
    pub fn grants(&self, parking: Option<VlanId>) -> Arc<Grants> {
        self.grants.get(&self.pools.state(), parking)
    }

    /// Whether a port (`kind`, `meta`) on `switch` (its Switch; a SmartNicPort's
    /// ProviderSwitch) may carry `carried`, under `tenancy` (`None`: not checked):
    /// [`tenancy::judge_carried`] on what the caches hold.
    pub fn tenancy_verdict(
        &self,
        tenancy: Option<&tenancy::Tenancy>,
        kind: CabledPortKind,
        meta: &kube::core::ObjectMeta,
        switch: Option<&str>,
        carried: &Carried<'_>,
    ) -> TenancyVerdict {
        let Some(t) = tenancy else {
            return TenancyVerdict::default();
        };
        let tenant = self.serving_namespace(kind, meta, Some(carried.reference));
        tenancy::judge_carried(
            t,
            &self.grants(Some(t.parking_vlan)),
            &tenant,
            switch,
            carried,
        )
    }

    /// The namespace a port serves ([`tenancy::serving_namespace`], on the cached
    /// Servers and SmartNicPorts).
    pub fn serving_namespace(
        &self,
        kind: CabledPortKind,
        meta: &kube::core::ObjectMeta,
        configuration: Option<&crate::api::ConfigurationRef>,
    ) -> String {
        tenancy::serving_namespace(
            kind,
            meta,
            configuration,
            &tenancy::Lookups {
                server: &|name| self.servers.get(&ObjectRef::new(name)),
                smartnic: &|ns, name| self.smartnics.get(&ObjectRef::new(name).within(ns)),
            },
        )
    }

    /// Switch `name` of namespace `ns`.
    pub fn switch(&self, ns: &str, name: &str) -> Option<Arc<Switch>> {
        self.switches.get(&ObjectRef::new(name).within(ns))
    }

    /// ProviderSwitch `name` of namespace `ns`.
    pub fn provider(&self, ns: &str, name: &str) -> Option<Arc<ProviderSwitch>> {
        self.providers.get(&ObjectRef::new(name).within(ns))
    }

    /// SwitchPortConfiguration `name` of namespace `ns`.
    pub fn configuration(&self, ns: &str, name: &str) -> Option<SwitchPortConfiguration> {
        self.configurations
            .get(&ObjectRef::new(name).within(ns))
            .map(|c| (*c).clone())
    }

    /// These caches, with the SmartNicConfigurations read from `configurations`.
    pub fn with_smartnic_configurations(
        mut self,
        configurations: Store<SmartNicConfiguration>,
    ) -> Self {
        self.smartnic_configurations = configurations;
        self
    }

    /// These caches, with the configurations' revisions read from `revisions`.
    pub fn with_revisions(mut self, revisions: Store<ControllerRevision>) -> Self {
        self.revisions = revisions;
        self
    }

    /// The configuration `ns/name` as a port whose rollout pin is `pin` carries it
    /// ([`Stores::carried`]).
    pub fn configuration_carried(
        &self,
        ns: &str,
        name: &str,
        pin: Option<&str>,
    ) -> Result<Option<SwitchPortConfiguration>, String> {
        self.configuration(ns, name)
            .map(|c| self.carried(c, pin))
            .transpose()
    }

    /// The entry `key` of `switch` as a port whose Switch rollout pin is `pin`
    /// carries it: the entry of the revision the Switch's rollout gives the port
    /// ([`crate::decide::rollout::revision_of`]), read from the revision's stored
    /// spec (only that entry is deserialised); the live entry where the Switch has
    /// no rollout yet, where the revision is the spec as it stands, or where the
    /// revision has no such entry (added since). `Err` names a revision the cache
    /// does not hold: the port waits rather than take an entry its rollout has not
    /// reached.
    pub fn switch_entry_carried(
        &self,
        switch: &Switch,
        key: &str,
        pin: Option<&str>,
    ) -> Result<Option<SwitchPortDefinition>, String> {
        let live = switch.spec.ports.get(key).cloned();
        let rollout = switch.status.as_ref().and_then(|s| s.rollout.as_ref());
        let Some(revision) = crate::decide::rollout::revision_of(pin, rollout) else {
            return Ok(live);
        };
        let ns = switch.namespace().unwrap_or_default();
        match self.revisions.get(&ObjectRef::new(revision).within(&ns)) {
            Some(r) => Ok(r
                .data
                .0
                .get("ports")
                .and_then(|p| p.get(key))
                .and_then(|v| serde_json::from_value(v.clone()).ok())
                .or(live)),
            None if revision
                == crate::decide::rollout::revision_name(
                    &switch.name_any(),
                    &switch.spec.content_hash(),
                ) =>
            {
                Ok(live)
            }
            None => Err(format!(
                "revision {revision} of Switch {ns}/{} (the one this port's rollout gives \
                 it) is not in the cache",
                switch.name_any()
            )),
        }
    }

    /// `config` (a SwitchPortConfiguration or a SmartNicConfiguration) as a port
    /// whose rollout pin is `pin` carries it: its spec at the revision the
    /// configuration's rollout gives the port
    /// ([`crate::decide::rollout::revision_of`]), which is the spec as it stands
    /// unless a rollout holds the port on an earlier one. `Err` names a revision the
    /// cache does not hold (not listed yet, or deleted): the port waits rather than
    /// take a spec its rollout has not reached.
    pub fn carried<C: Revisioned>(&self, mut config: C, pin: Option<&str>) -> Result<C, String> {
        let rollout = config.rollout_status();
        let Some(revision) = crate::decide::rollout::revision_of(pin, rollout) else {
            return Ok(config);
        };
        let (ns, name) = (
            config.meta().namespace.clone().unwrap_or_default(),
            config.meta().name.clone().unwrap_or_default(),
        );
        let live = crate::decide::rollout::revision_name(&name, &config.content_hash());
        if revision == live {
            return Ok(config);
        }
        let spec = self
            .revisions
            .get(&ObjectRef::new(revision).within(&ns))
            .and_then(|r| serde_json::from_value(r.data.0.clone()).ok())
            .ok_or_else(|| {
                format!(
                    "revision {revision} of {} {ns}/{name} (the one this port's rollout gives \
                     it) is not in the cache",
                    C::kind(&())
                )
            })?;
        *config.spec_mut() = spec;
        Ok(config)
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
    /// The SwitchPort cache of the port controller, a compact record per port: the
    /// Switch controller checks its ports here instead of listing them on every port
    /// event. A cached port keeps no labels: its Switch is in `port_index` (see
    /// `switch_port::switch_name`).
    pub ports: PortCache,
    /// The caches a reconcile reads what it refers to from (no GET per reconcile).
    pub stores: Stores,
    /// The metrics and the device gate.
    pub probes: crate::probes::Probes,
    /// The credentials Secrets, cached by version.
    pub secrets: Arc<super::secrets::SecretCache>,
    /// The SwitchPorts of each Switch and each port's Switch, kept from the port
    /// watch's events before the cache holds them.
    pub port_index: SharedPortIndex,
    /// The port writes whose watch events are only their echo.
    pub own_writes: SharedOwnWrites,
    /// The switch workers, one per device: keyed by ProviderSwitch (namespace,
    /// name), whatever uses it (Switches, SmartNicPorts).
    workers: Mutex<HashMap<DeviceKey, Arc<WorkerEntry>>>,
}

/// The port index ([`PortIndex`]) the port watch keeps and the Switch controller and
/// the wakes read.
pub type SharedPortIndex = Arc<parking_lot::RwLock<PortIndex>>;

/// The port writes awaiting their watch events ([`OwnWrites`]): noted by the port
/// records, read by the port controllers' own trigger streams.
pub type SharedOwnWrites = Arc<parking_lot::Mutex<OwnWrites>>;

/// A device as the workers know it: its ProviderSwitch's namespace and name. One
/// ProviderSwitch is one device, so every Switch and SmartNicPort naming it shares
/// one worker — one writer.
pub type DeviceKey = (String, String);

/// The device key of `provider`.
pub fn device_key(provider: &ProviderSwitch) -> DeviceKey {
    (
        provider.namespace().unwrap_or_default(),
        provider.name_any(),
    )
}

/// What a worker's device is built from: the ProviderSwitch (uid, generation) and
/// the credentials Secret's version (not for `ovsdb`, which reads no Secret). A
/// device whose fingerprint differs is replaced.
fn worker_fingerprint(provider: &ProviderSwitch, secret: Option<&Secret>) -> String {
    let secret = match provider.spec.backend {
        crate::api::Backend::Ovsdb => None,
        _ => secret,
    };
    format!(
        "{}/{}/{}",
        provider.uid().unwrap_or_default(),
        provider.metadata.generation.unwrap_or(0),
        secret
            .and_then(|s| s.resource_version())
            .unwrap_or_default()
    )
}

/// The device ports a Switch lists (those whose names parse).
pub fn switch_device_ports(switch: &Switch) -> Vec<PortName> {
    switch
        .spec
        .ports
        .values()
        .filter_map(|d| PortName::parse(&d.name).ok())
        .collect()
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
    /// ProviderSwitch `name` of `namespace` (named by `field`), checked, with its
    /// credentials Secret: what a neighbour source or a BGP speaker is built from.
    pub async fn checked_provider(
        &self,
        namespace: &str,
        name: &str,
        field: &'static str,
    ) -> Result<
        (
            Arc<ProviderSwitch>,
            Option<Arc<k8s_openapi::api::core::v1::Secret>>,
        ),
        Failure,
    > {
        let provider =
            self.stores
                .provider(namespace, name)
                .ok_or_else(|| Failure::ProviderNotFound {
                    name: name.to_owned(),
                    field,
                })?;
        crate::decide::validate::validate_provider(&provider.spec).map_err(|errors| {
            Failure::InvalidProvider {
                name: provider.name_any(),
                errors,
            }
        })?;
        let secret = self
            .secrets
            .of_provider(&self.client, &provider)
            .await
            .map_err(super::kube_failure)?;
        Ok((provider, secret))
    }

    /// The shared state; workers are spawned on first use.
    pub fn new(
        client: Client,
        settings: Settings,
        backends: Backends,
        events: EventPublisher,
        notices: Notices,
        ports: PortCache,
        stores: Stores,
    ) -> Self {
        Self {
            probes: crate::probes::Probes::default(),
            client,
            // A NETCONF session is kept for a batch that follows within the window.
            backends: Backends {
                netconf_keep_session: settings.batch_window,
                session_bound: settings.batch_timeout,
                ..backends
            },
            settings,
            events,
            ledger: StatusLedger::default(),
            notices,
            ports,
            stores,
            secrets: Arc::default(),
            port_index: Arc::default(),
            own_writes: Arc::default(),
            workers: Mutex::new(HashMap::new()),
        }
    }

    /// The same context with `index` as its port index: the one the port watch
    /// feeds before its cache.
    pub fn with_port_index(mut self, index: SharedPortIndex) -> Self {
        self.port_index = index;
        self
    }

    /// The same context reporting through, and fenced by, `probes`.
    pub fn with_probes(mut self, probes: crate::probes::Probes) -> Self {
        self.probes = probes;
        self
    }

    fn workers(&self) -> parking_lot::MutexGuard<'_, HashMap<DeviceKey, Arc<WorkerEntry>>> {
        self.workers.lock()
    }

    /// The worker of `provider`'s device for one port's reconcile: the running
    /// worker when its device is current — the Switch controller keeps the device's
    /// port list current, so a port adds only its own (to a fixture device) — else
    /// as [`Context::ensure_worker`] with `ports()`. Nothing per reconcile grows
    /// with the switch's size.
    pub fn port_worker(
        &self,
        provider: &ProviderSwitch,
        secret: Option<&Secret>,
        own: Option<&PortName>,
        ports: impl FnOnce() -> Vec<PortName>,
    ) -> Result<Arc<WorkerEntry>, BackendError> {
        let running = self.workers().get(&device_key(provider)).cloned();
        if let Some(entry) = running
            && entry.built().fingerprint == worker_fingerprint(provider, secret)
        {
            if let Some(own) = own {
                self.backends.add_ports(provider, std::slice::from_ref(own));
            }
            return Ok(entry);
        }
        self.ensure_worker(provider, secret, &ports())
    }

    /// The worker of `provider`'s device, started if none runs, its device replaced
    /// if the ProviderSwitch or its Secret changed since it was built. The lookup,
    /// the start and the replacement happen under one lock, so however many
    /// reconciles ask at once there is one worker per device. `ports` are device
    /// ports of whoever asks: read to check reachability while no port is tracked
    /// (an in-memory fixture device grows them).
    pub fn ensure_worker(
        &self,
        provider: &ProviderSwitch,
        secret: Option<&Secret>,
        ports: &[PortName],
    ) -> Result<Arc<WorkerEntry>, BackendError> {
        let key = device_key(provider);
        let fingerprint = worker_fingerprint(provider, secret);
        let mut workers = self.workers();
        if let Some(entry) = workers.get(&key) {
            if entry.built().fingerprint != fingerprint {
                let device = self.backends.build(provider, secret, ports)?;
                tracing::info!(provider = %key.1, "the ProviderSwitch or its Secret changed; the worker's next session uses the new device settings");
                entry.worker.replace_device(
                    device.clone(),
                    self.max_sessions(provider),
                    provider.spec.backend.name(),
                );
                *entry.built() = Built {
                    fingerprint,
                    capabilities: device.capabilities(),
                };
            }
            self.backends.add_ports(provider, ports);
            entry.worker.set_probe_ports(ports);
            return Ok(entry.clone());
        }
        let device = self.backends.build(provider, secret, ports)?;
        // A switch an earlier operator found answering is believed to answer still,
        // and swept on its own schedule (a restart or a takeover opens no session of
        // its own); any other is checked at once.
        let reachable_before = self
            .stores
            .switches
            .find(|s| {
                s.spec.provider.name == key.1
                    && s.namespace().as_deref() == Some(key.0.as_str())
                    && s.status.as_ref().is_some_and(|st| {
                        crate::decide::status::find_condition(&st.conditions, "DeviceReachable")
                            .is_some_and(|c| c.status == "True")
                    })
            })
            .is_some();
        let worker = SwitchWorker::spawn(
            device.clone(),
            WorkerConfig {
                batch_window: self.settings.batch_window,
                batch_quiet: self.settings.batch_quiet,
                drift_interval: self.settings.drift_interval,
                start: crate::decide::reachability::worker_start(
                    &format!("{}/{}", key.0, key.1),
                    self.settings.drift_interval,
                    jiff::Timestamp::now(),
                    reachable_before,
                ),
                max_sessions: self.max_sessions(provider),
                backoff: self.settings.backoff,
                backend: provider.spec.backend.name(),
                batch_timeout: self.settings.batch_timeout,
                group_hold: crate::worker::GROUP_HOLD,
                group_gather: crate::worker::GROUP_GATHER,
                probes: self.probes.clone(),
            },
            ports.to_vec(),
            self.notifier(key.clone()),
        );
        let entry = Arc::new(WorkerEntry {
            worker: Arc::new(worker),
            current: Mutex::new(Built {
                fingerprint,
                capabilities: device.capabilities(),
            }),
        });
        workers.insert(key, entry.clone());
        Ok(entry)
    }

    /// The first part of a graceful stop, while the controllers still run: nothing
    /// new is handed to a worker; the changes in flight finish on the device; and
    /// their ports take the answers and record them (Active, Idle), for at most
    /// `take_within` — a port that does not come back in time stays in the state it
    /// wrote before acting, which the next operator applies again.
    pub async fn finish_hand_offs(&self, take_within: std::time::Duration) {
        let workers: Vec<_> = self.workers().values().map(|e| e.worker.clone()).collect();
        for worker in &workers {
            worker.close_hand_offs();
        }
        for worker in &workers {
            worker.hand_offs_settled().await;
        }
        let taken = async {
            for worker in &workers {
                worker.hand_offs_taken().await;
            }
        };
        let _ = tokio::time::timeout(take_within, taken).await;
    }

    /// At most this many sessions to the device: the ProviderSwitch's
    /// `options.maxSessions` (1–16), else the operator's setting, less the
    /// `readSessions` kept for read-only tools.
    fn max_sessions(&self, provider: &ProviderSwitch) -> usize {
        provider
            .spec
            .options
            .clone()
            .unwrap_or_default()
            .operator_sessions(self.settings.max_sessions)
    }

    /// Where the worker of device `key` sends its notices: a port notice to the
    /// controller of its kind, a reachability notice to every Switch that names the
    /// ProviderSwitch (as the Switch cache has them when it happens).
    fn notifier(&self, key: DeviceKey) -> Notifier {
        let (ports, smartnics, switches) = (
            self.notices.ports.clone(),
            self.notices.smartnics.clone(),
            self.notices.switches.clone(),
        );
        let store = self.stores.switches.clone();
        Arc::new(move |notice| match notice {
            Notice::Port(k) => match k.kind {
                CabledPortKind::SwitchPort => {
                    let _ = ports.send(ObjectRef::new(&k.name).within(&k.namespace));
                }
                CabledPortKind::SmartNicPort => {
                    let _ = smartnics.send(ObjectRef::new(&k.name).within(&k.namespace));
                }
            },
            Notice::Switch => {
                for s in store.state() {
                    if s.namespace().as_deref() == Some(key.0.as_str())
                        && s.spec.provider.name == key.1
                    {
                        let _ = switches.send(ObjectRef::from_obj(s.as_ref()));
                    }
                }
            }
        })
    }

    /// The worker of `provider`'s device, if one runs with the ProviderSwitch and
    /// Secret as they are (a device built from older versions is about to be
    /// replaced). Only looks: never starts or replaces anything.
    pub fn running_worker(
        &self,
        provider: Option<&ProviderSwitch>,
        secret: Option<&Secret>,
    ) -> Option<Arc<WorkerEntry>> {
        let provider = provider?;
        let fingerprint = worker_fingerprint(provider, secret);
        self.workers()
            .get(&device_key(provider))
            .filter(|e| e.built().fingerprint == fingerprint)
            .cloned()
    }

    /// Quiets the worker of device `key` when nothing uses its ProviderSwitch any
    /// more (no Switch names it besides those being deleted, no SmartNicPort): it
    /// stops probing the device. The worker itself stays until its ProviderSwitch
    /// is deleted ([`Context::remove_worker`]), so a Switch created again for the
    /// device finds it — and its one session limit — rather than a second writer.
    pub fn quiet_worker_if_unused(&self, key: &DeviceKey) {
        let in_ns = |ns: Option<String>| ns.as_deref() == Some(key.0.as_str());
        let switches = self.stores.switches.state().into_iter().any(|s| {
            in_ns(s.namespace())
                && s.spec.provider.name == key.1
                && s.metadata.deletion_timestamp.is_none()
        });
        let smartnics = self
            .stores
            .smartnics
            .state()
            .into_iter()
            .any(|p| in_ns(p.namespace()) && p.spec.provider.name == key.1);
        if !switches
            && !smartnics
            && let Some(entry) = self.workers().get(key)
        {
            entry.worker.set_probe_ports(&[]);
        }
    }

    /// Stops the worker of device `key`: its ProviderSwitch is deleted, and nothing
    /// used it any more (its ProviderSwitch is held until then).
    pub fn remove_worker(&self, key: &DeviceKey) {
        self.workers().remove(key);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
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

    /// A context on an API server nobody calls (the workers need none).
    fn context() -> super::Context {
        let client =
            kube::Client::try_from(kube::Config::new("http://127.0.0.1:9".parse().unwrap()))
                .unwrap();
        let (tx, _) = tokio::sync::mpsc::unbounded_channel();
        let (stx, _) = tokio::sync::mpsc::unbounded_channel();
        let (wtx, _) = tokio::sync::mpsc::unbounded_channel();
        super::Context::new(
            client.clone(),
            crate::settings::Settings::default(),
            crate::backends::Backends::default(),
            super::EventPublisher::new(
                client,
                kube::runtime::events::Reporter {
                    controller: "test".into(),
                    instance: None,
                },
            ),
            super::Notices {
                ports: tx,
                smartnics: stx,
                switches: wtx,
            },
            super::PortCache(kube::runtime::reflector::store().0),
            super::Stores::new(
                kube::runtime::reflector::store().0,
                kube::runtime::reflector::store().0,
                kube::runtime::reflector::store().0,
                kube::runtime::reflector::store().0,
                kube::runtime::reflector::store().0,
                kube::runtime::reflector::store().0,
                kube::runtime::reflector::store().0,
            ),
        )
    }

    fn fixture_provider(generation: i64) -> crate::api::ProviderSwitch {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "patchbay.dev/v1alpha1",
            "kind": "ProviderSwitch",
            "metadata": {"name": "tor", "namespace": "infra", "uid": "u-1",
                         "generation": generation},
            "spec": {"backend": "fixture", "os": "fixture", "address": "127.0.0.1"},
        }))
        .unwrap()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn one_worker_per_device_however_many_ask_at_once_and_whatever_changes() {
        let ctx = Arc::new(context());
        let port = |n: &str| patchbay_providers::values::PortName::parse(n).unwrap();
        // 64 reconciles ask at once, from two Switches naming the same ProviderSwitch
        // (their own ports) and a SmartNicPort.
        let asks = (0..64).map(|i| {
            let ctx = ctx.clone();
            tokio::spawn(async move {
                let ports = match i % 3 {
                    0 => vec![port("Gi0/1"), port("Gi0/2")],
                    1 => vec![port("Gi0/3")],
                    _ => vec![port("p0")],
                };
                ctx.ensure_worker(&fixture_provider(1), None, &ports)
                    .unwrap()
            })
        });
        let entries: Vec<_> = futures::future::join_all(asks)
            .await
            .into_iter()
            .map(Result::unwrap)
            .collect();
        assert!(entries.iter().all(|e| Arc::ptr_eq(e, &entries[0])));
        // A ProviderSwitch edit replaces the device, not the worker.
        let edited = ctx
            .ensure_worker(&fixture_provider(2), None, &[port("Gi0/1")])
            .unwrap();
        assert!(Arc::ptr_eq(&edited.worker, &entries[0].worker));
        assert!(
            ctx.running_worker(Some(&fixture_provider(1)), None)
                .is_none()
        );
        assert!(
            ctx.running_worker(Some(&fixture_provider(2)), None)
                .is_some()
        );
    }
}

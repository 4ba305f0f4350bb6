//! The wiring: one kube-rs `Controller` per kind (SwitchPorts: patchbay's own
//! [`port_runner`], same rules, tables given back after a burst), the watches that wake each
//! (through [`crate::decide::triggers`]), the streams the switch workers' notices arrive on,
//! the error policies, and a graceful shutdown of all of them together. Kubernetes
//! I/O (watches).
//!
//! How to read it: [`run`] builds the `Watches` value once (every kind the
//! controllers read, one cache each), then one function per controller subscribes
//! to the watches that wake it (`switch_ports`, `switches`, `provider_switches`,
//! `smartnic_ports`, `hosts_and_claims`); `Watches::start` then runs every watch
//! with its deletion hooks, and `Harness::run` runs each controller behind the
//! cache gate with its timing, counting and error policy. Each controller, watch
//! and background loop is a task of its own (`run_parts`), so a wake polls only
//! the part it concerns.

use std::sync::Arc;
use std::time::Duration;

use futures::{FutureExt, StreamExt};
use k8s_openapi::api::core::v1::{Node, Secret};
use kube::core::PartialObjectMeta;
use kube::runtime::controller::{Action, Config, Controller};
use kube::runtime::events::Reporter;
use kube::runtime::reflector::store::Writer;
use kube::runtime::reflector::{ObjectRef, ReflectHandle, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use tokio::sync::mpsc;

use super::context::{
    Context, Listed, Notices, PortCache, SharedOwnWrites, SharedPortIndex, Stores, Synced, api_for,
};
use super::events::EventPublisher;
use super::host::HostWorld;
use super::server_claim::Allocator;
use super::{
    ControllerError, bare_metal_host, metal3, port_runner, provider_switch, server, server_claim,
    smartnic_port, switch, switch_port, vlan_pool,
};
use crate::api::server::CabledPortKind;
use crate::api::{Cached, CompactPort, PortState};
use crate::api::{
    ProviderSwitch, Server, ServerClaim, SmartNicConfiguration, SmartNicPort, Switch, SwitchPort,
    SwitchPortConfiguration, VLANPool,
};
use crate::backends::Backends;
use crate::decide::failure::ReconcileRetry;
use crate::decide::triggers;
use crate::metrics::{ControllerLabel, Metrics, ReconcileLabels};
use crate::settings::Settings;

/// SwitchPort reconciles at once (see where it is used for the trade-off).
const PORT_RECONCILES: u16 = 64;

/// On a graceful stop, how long the ports whose changes were in flight get to take
/// the answers and record them before the controllers stop.
const HAND_OFF_TAKE: Duration = Duration::from_secs(5);

/// A stream of what arrives on `rx`.
fn notices<T: Send + 'static>(
    mut rx: mpsc::UnboundedReceiver<T>,
) -> impl futures::Stream<Item = T> + Send + 'static {
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

fn log_errors<T, E: std::fmt::Display>(
    kind: &'static str,
) -> impl Fn(Result<T, E>) -> futures::future::Ready<()> {
    move |r| {
        if let Err(e) = r {
            tracing::debug!(error = %e, kind, "reconcile failed");
        }
        futures::future::ready(())
    }
}

/// Each object's consecutive failed reconciles (keyed by controller and object): what the
/// error policy backs off by ([`ReconcileRetry::after`]). A reconcile that succeeds
/// (or waits) clears its object's count.
#[derive(Default)]
struct Retries(parking_lot::Mutex<std::collections::HashMap<String, u32>>);

/// `namespace/name` of `obj`.
fn object_key<K: kube::Resource>(obj: &K) -> String {
    format!(
        "{}/{}",
        obj.meta().namespace.as_deref().unwrap_or_default(),
        obj.meta().name.as_deref().unwrap_or_default()
    )
}

impl Retries {
    fn key<K: kube::Resource>(controller: &str, obj: &K) -> String {
        format!("{controller}/{}", object_key(obj))
    }

    fn table(&self) -> parking_lot::MutexGuard<'_, std::collections::HashMap<String, u32>> {
        self.0.lock()
    }

    /// Forgets `obj`'s failures; nothing to look up (no key made) while no object
    /// of any controller is failing, the usual case.
    fn clear<K: kube::Resource>(&self, controller: &str, obj: &K) {
        let mut table = self.table();
        if !table.is_empty() {
            table.remove(&Self::key(controller, obj));
        }
    }

    fn bump(&self, key: &str) {
        *self.table().entry(key.to_owned()).or_default() += 1;
    }

    fn count(&self, key: &str) -> u32 {
        self.table().get(key).copied().unwrap_or(1).max(1)
    }
}

/// How long after `e` the object `obj` of `controller` is retried: per object, by the
/// error's class (see [`ReconcileRetry`]).
fn retry_after_error<K: kube::Resource>(
    controller: &'static str,
    retries: &Retries,
    obj: &K,
    e: &ControllerError,
) -> Duration {
    let class = e.retry();
    let after = class.after(retries.count(&Retries::key(controller, obj)));
    tracing::debug!(error = %e, category = e.category(), ?class, ?after, controller, "reconcile error");
    after
}

/// The error policy of `controller` for kube's `Controller` ([`retry_after_error`]).
fn error_policy<K, C>(
    controller: &'static str,
    retries: Arc<Retries>,
) -> impl Fn(Arc<K>, &ControllerError, Arc<C>) -> Action
where
    K: kube::Resource,
{
    move |obj, e, _| Action::requeue(retry_after_error(controller, &retries, obj.as_ref(), e))
}

/// What a reconcile asks for next, in its runner's terms: kube's [`Action`] for the
/// controllers kube runs, `Option<Duration>` (retry after; `None` only when woken)
/// for the [`port_runner`].
trait Next: Send + 'static {
    /// Retry after `after`.
    fn retry(after: Duration) -> Self;
    /// Run again only when woken.
    fn when_woken() -> Self;
}

impl Next for Action {
    fn retry(after: Duration) -> Self {
        Action::requeue(after)
    }
    fn when_woken() -> Self {
        Action::await_change()
    }
}

impl Next for Option<Duration> {
    fn retry(after: Duration) -> Self {
        Some(after)
    }
    fn when_woken() -> Self {
        None
    }
}

/// One watch shared by several controllers: its cache, a subscription per reader
/// (each sees an object only once the cache holds it, so a controller woken by it
/// reads what woke it), whether the cache holds its first list, and the future that
/// drives the watch until `stop`, calling its `on_event` with every event once the
/// cache holds it (a shared stream carries no deletions; the deletion hooks are fed
/// from here).
/// The cache keeps what the controllers read: server-side bookkeeping
/// (`managedFields`, `kubectl`'s last-applied annotation) is dropped on arrival, and
/// `arrive` sees every event before the cache does: it may note what it needs and
/// drop what no controller reads of this kind (see [`port_arrival`]); `keep` makes
/// the cache's record of each object (the object itself, or a [`CompactPort`]).
#[allow(clippy::type_complexity)]
fn shared_watch<S, K, St>(
    api: kube::Api<S>,
    wc: &watcher::Config,
    stop: St,
    mut arrive: Arrival<S>,
    keep: fn(S) -> K,
) -> (
    Store<K>,
    Writer<K>,
    impl FnOnce(
        Writer<K>,
        Box<dyn Fn(&watcher::Event<K>) + Send>,
    ) -> futures::future::BoxFuture<'static, ()>
    + Send
    + use<S, K, St>,
    Listed,
)
where
    St: std::future::Future<Output = ()> + Send + 'static,
    S: Cached,
    K: Record,
{
    let writer = Writer::<K>::new_shared(1024, ());
    let store = writer.as_reader();
    let wc = wc.clone();
    let (listing, listed) = tokio::sync::watch::channel(false);
    let run = move |writer: Writer<K>, on_event: Box<dyn Fn(&watcher::Event<K>) + Send>| {
        let events = watcher(api, wc)
            .modify(move |o| {
                let meta = o.meta_mut();
                meta.managed_fields = None;
                if let Some(a) = meta.annotations.as_mut() {
                    a.remove(LAST_APPLIED);
                }
            })
            .default_backoff()
            .map(move |event| {
                event.map(|mut e| {
                    arrive(&mut e);
                    match e {
                        watcher::Event::Apply(o) => watcher::Event::Apply(keep(o)),
                        watcher::Event::Delete(o) => watcher::Event::Delete(keep(o)),
                        watcher::Event::InitApply(o) => watcher::Event::InitApply(keep(o)),
                        watcher::Event::Init => watcher::Event::Init,
                        watcher::Event::InitDone => watcher::Event::InitDone,
                    }
                })
            });
        kube::runtime::reflector(writer, events)
            .take_until(stop)
            .for_each(move |event| {
                if let Ok(event) = &event {
                    on_event(event);
                    // The reflector has put the list in the cache before it yields this.
                    if let watcher::Event::InitDone = event {
                        listing.send_replace(true);
                    }
                }
                futures::future::ready(())
            })
            .boxed()
    };
    (store, writer, run, listed)
}

/// What a cache may hold: the object of a kind, or a record of it ([`CompactPort`]).
trait Record:
    kube::runtime::reflector::Lookup<DynamicType = ()> + Clone + Send + Sync + 'static
{
}

impl<K> Record for K where
    K: kube::runtime::reflector::Lookup<DynamicType = ()> + Clone + Send + Sync + 'static
{
}

/// The objects of a shared stream whose spec changed (`metadata.generation` moved,
/// or first seen): a Server's status, written often, wakes no port.
fn spec_changes<K>(
    stream: impl futures::Stream<Item = Arc<K>> + Send + 'static,
) -> impl futures::Stream<Item = Arc<K>> + Send + 'static
where
    K: kube::Resource + Send + Sync + 'static,
{
    let mut seen = std::collections::HashMap::<String, i64>::new();
    stream.filter(move |o| {
        let key = object_key(o.as_ref());
        let generation = o.meta().generation.unwrap_or_default();
        futures::future::ready(seen.insert(key, generation) != Some(generation))
    })
}

/// What [`shared_watch`] does with each event before the cache sees it.
type Arrival<K> = Box<dyn FnMut(&mut watcher::Event<K>) + Send>;

/// [`shared_watch`]'s `arrive` for kinds whose cached objects are kept whole.
fn keep_whole<K>() -> Arrival<K> {
    Box::new(|_| {})
}

/// [`shared_watch`]'s `arrive` for SwitchPorts: each event goes into the port index
/// first, so the index knows a port's Switch by the time any reader sees the port in
/// the cache; then each port the cache will hold is trimmed ([`trim_port`]), and
/// the watch's `keep` makes the cache's record of it ([`CompactPort`]). A deleted
/// port keeps its labels: the deletion hook reads its Switch from them.
fn port_arrival(index: SharedPortIndex) -> Arrival<SwitchPort> {
    Box::new(move |event| {
        index_port(&index, event);
        if let watcher::Event::Apply(p) | watcher::Event::InitApply(p) = event {
            trim_port(p);
        }
    })
}

/// What the SwitchPort cache drops of a port: its labels, whose one entry read (the
/// Switch label) the port index holds, interned ([`switch_port::switch_name`]; the
/// map alone was ~0.6 KB of each of 10,000 cached ports); and its owner references
/// when the Switch label named its Switch (~250 bytes each; the Switch controller
/// reads a port's owners from the API server, never from the cache). A port with no
/// Switch label keeps its owners: they name its Switch then.
fn trim_port(port: &mut SwitchPort) {
    if let Some(labels) = port.metadata.labels.take()
        && labels.contains_key(crate::api::keys::SWITCH_LABEL)
    {
        port.metadata.owner_references = None;
    }
}

/// `kubectl apply`'s copy of the whole object, which no controller reads.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Sends every reference of `refs` on `tx` (a controller's `reconcile_on` channel).
fn wake<K>(tx: &mpsc::UnboundedSender<ObjectRef<K>>, refs: impl IntoIterator<Item = ObjectRef<K>>)
where
    K: kube::Resource,
{
    for r in refs {
        let _ = tx.send(r);
    }
}

fn subscribe<K>(writer: &Writer<K>) -> ReflectHandle<K>
where
    K: kube::runtime::reflector::Lookup + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    writer.subscribe().expect("a shared writer has subscribers")
}

/// `reconcile` once the caches are listed (see [`Synced`]), with its duration and
/// result recorded in the metrics (`patchbay_reconciles_total`,
/// `patchbay_reconcile_duration_seconds`).
fn timed<K, C, F, Fut, N>(
    controller: &'static str,
    synced: &Synced,
    retries: &Arc<Retries>,
    metrics: &Arc<Metrics>,
    reconcile: F,
) -> impl Fn(Arc<K>, Arc<C>) -> futures::future::BoxFuture<'static, Result<N, ControllerError>>
+ use<K, C, F, Fut, N>
where
    K: Cached,
    N: Next,
    F: Fn(Arc<K>, Arc<C>) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<N, ControllerError>> + Send + 'static,
{
    let synced = synced.clone();
    let retries = retries.clone();
    let metrics = metrics.clone();
    metrics.controller_started(controller, ControllerError::CATEGORIES);
    move |obj, ctx| {
        let me = obj.clone();
        let fut = reconcile(obj, ctx);
        let synced = synced.clone();
        let retries = retries.clone();
        let metrics = metrics.clone();
        async move {
            if !synced.wait().await {
                // Stopping before the caches were listed: nothing to do.
                return Ok(N::when_woken());
            }
            let started = std::time::Instant::now();
            let result = fut.await;
            metrics
                .reconcile_seconds
                .get_or_create(&ControllerLabel { controller })
                .observe(started.elapsed().as_secs_f64());
            let (outcome, result) = match result {
                Ok(a) => ("ok", Ok(a)),
                Err(e) if e.retry() == ReconcileRetry::Waiting => {
                    tracing::debug!(reason = %e, controller, "waiting");
                    ("ok", Ok(N::retry(ReconcileRetry::Waiting.after(1))))
                }
                Err(e) => (e.category(), Err(e)),
            };
            match &result {
                Ok(_) => retries.clear(controller, me.as_ref()),
                Err(_) => retries.bump(&Retries::key(controller, me.as_ref())),
            }
            metrics
                .reconciles
                .get_or_create(&ReconcileLabels {
                    controller,
                    result: outcome,
                })
                .inc();
            result
        }
        .boxed()
    }
}

/// Counts the ports per kind and state into `patchbay_ports` every
/// [`PORT_GAUGE_PERIOD`], and marks the operator ready once every cache has synced.
async fn port_gauges(
    ports: Store<CompactPort>,
    smartnics: Store<SmartNicPort>,
    metrics: Arc<Metrics>,
    ready: impl std::future::Future<Output = ()>,
) {
    ready.await;
    metrics.set_ready(true);
    loop {
        // Counted by state without an allocation or a hash per port: a handful of
        // (kind, state) pairs, searched in a list.
        let mut tally: Vec<((&str, Option<PortState>), f64)> = Vec::new();
        let mut count = |kind: &'static str, state: Option<PortState>| {
            let key = (kind, state);
            match tally.iter_mut().find(|(k, _)| *k == key) {
                Some((_, n)) => *n += 1.0,
                None => tally.push((key, 1.0)),
            }
        };
        for p in ports.state() {
            count("SwitchPort", p.state());
        }
        for p in smartnics.state() {
            count("SmartNicPort", p.status.as_ref().and_then(|s| s.state));
        }
        let counts: std::collections::BTreeMap<_, _> = tally
            .into_iter()
            .map(|((kind, s), n)| {
                let s = s.map_or_else(|| "(none)".to_owned(), |s| s.to_string());
                ((kind.to_owned(), s), n)
            })
            .collect();
        metrics.set_ports(counts);
        tokio::time::sleep(PORT_GAUGE_PERIOD).await;
    }
}

/// How often the port gauge is counted. Not every 2 s: counting walks every cached
/// port, and at 10,000 idle ports that walk every 2 s was two thirds of the
/// operator's idle CPU samples (`perf record`); it grows with the ports.
const PORT_GAUGE_PERIOD: Duration = Duration::from_secs(10);

/// Who the Events say reported them.
fn reporter() -> Reporter {
    Reporter {
        controller: "patchbay".into(),
        instance: std::env::var("HOSTNAME").ok(),
    }
}

type Runner<K> = Box<
    dyn FnOnce(
            Writer<K>,
            Box<dyn Fn(&watcher::Event<K>) + Send>,
        ) -> futures::future::BoxFuture<'static, ()>
        + Send,
>;

/// One shared watch ([`shared_watch`]): its cache, the writer readers subscribe to
/// until it starts, whether it has listed, and what runs it.
struct Watch<K>
where
    K: Record,
{
    store: Store<K>,
    writer: Writer<K>,
    run: Runner<K>,
    listed: Listed,
}

impl<K> Watch<K>
where
    K: Record,
{
    fn new<S: Cached>(
        api: kube::Api<S>,
        wc: &watcher::Config,
        stop: impl std::future::Future<Output = ()> + Send + 'static,
        arrive: Arrival<S>,
        keep: fn(S) -> K,
    ) -> Self {
        let (store, writer, run, listed) = shared_watch(api, wc, stop, arrive, keep);
        Watch {
            store,
            writer,
            run: Box::new(run),
            listed,
        }
    }

    /// A watch whose cache keeps each object whole.
    fn whole(
        api: kube::Api<K>,
        wc: &watcher::Config,
        stop: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> Self
    where
        K: Cached,
    {
        Self::new(api, wc, stop, keep_whole(), |o| o)
    }

    /// A reader of this watch: it sees an object once the cache holds it. Every
    /// reader subscribes before the watch starts.
    fn subscribe(&self) -> ReflectHandle<K> {
        subscribe(&self.writer)
    }

    /// The watch, running until the operator stops; `on_delete` is called with each
    /// deleted object (a shared stream carries no deletions).
    fn start(
        self,
        on_delete: impl Fn(&K) + Send + 'static,
    ) -> futures::future::BoxFuture<'static, ()> {
        self.start_observed(move |e| {
            if let watcher::Event::Delete(o) = e {
                on_delete(o);
            }
        })
    }

    /// The watch, running until the operator stops, with `on_event` called with
    /// every event once the cache holds it.
    fn start_observed(
        self,
        on_event: impl Fn(&watcher::Event<K>) + Send + 'static,
    ) -> futures::future::BoxFuture<'static, ()> {
        (self.run)(self.writer, Box::new(on_event))
    }
}

impl Watch<CompactPort> {
    /// The SwitchPort cache, for the readers that look ports up.
    fn cache(&self) -> PortCache {
        PortCache(self.store.clone())
    }

    /// A reader of the port watch that gets each port as a SwitchPort, made from
    /// the cache's record ([`CompactPort::to_port`]) for this reader.
    fn subscribe_ports(&self) -> impl futures::Stream<Item = Arc<SwitchPort>> + Send + use<> {
        self.subscribe().map(|p| Arc::new(p.to_port()))
    }
}

/// Every kind the controllers read, watched once into one cache, built once; each
/// controller subscribes to the watches that wake it, then [`Watches::start`] runs
/// them all with the deletion hooks.
struct Watches {
    ports: Watch<CompactPort>,
    /// Fed by the port watch before its cache ([`port_arrival`]).
    port_index: SharedPortIndex,
    switches: Watch<Switch>,
    providers: Watch<ProviderSwitch>,
    configs: Watch<SwitchPortConfiguration>,
    smartnics: Watch<SmartNicPort>,
    claims: Watch<ServerClaim>,
    servers: Watch<Server>,
    pools: Watch<VLANPool>,
}

impl Watches {
    fn new(client: &Client, ns: Option<&str>, wc: &watcher::Config, h: &Harness) -> Self {
        let port_index = SharedPortIndex::default();
        let ports = port_arrival(port_index.clone());
        Watches {
            ports: Watch::new(
                api_for::<SwitchPort>(client, ns),
                wc,
                h.stopped(),
                ports,
                CompactPort::from_port,
            ),
            port_index,
            switches: Watch::whole(api_for(client, ns), wc, h.stopped()),
            providers: Watch::whole(api_for(client, ns), wc, h.stopped()),
            configs: Watch::whole(api_for(client, ns), wc, h.stopped()),
            smartnics: Watch::whole(api_for(client, ns), wc, h.stopped()),
            claims: Watch::whole(api_for(client, ns), wc, h.stopped()),
            servers: Watch::whole(kube::Api::all(client.clone()), wc, h.stopped()),
            pools: Watch::whole(kube::Api::all(client.clone()), wc, h.stopped()),
        }
    }

    /// Whether each cache holds its first list (what [`Synced`] waits for).
    fn listed(&self) -> Vec<Listed> {
        vec![
            self.ports.listed.clone(),
            self.switches.listed.clone(),
            self.providers.listed.clone(),
            self.configs.listed.clone(),
            self.smartnics.listed.clone(),
            self.claims.listed.clone(),
            self.servers.listed.clone(),
            self.pools.listed.clone(),
        ]
    }

    /// The caches a port reconcile reads what it refers to from.
    fn stores(&self) -> Stores {
        Stores::new(
            self.switches.store.clone(),
            self.providers.store.clone(),
            self.configs.store.clone(),
            self.smartnics.store.clone(),
            self.pools.store.clone(),
            self.servers.store.clone(),
            self.claims.store.clone(),
        )
    }

    /// Every watch, running, each with what its deletions wake.
    fn start(
        self,
        wakes: &Wakes,
        pool_deleted: Arc<tokio::sync::Notify>,
        port_index: &SharedPortIndex,
        own_writes: &SharedOwnWrites,
        bgp_switches: Arc<super::bgp_fleet::BgpSwitchesCache>,
    ) -> impl std::future::Future<Output = ()> + use<> {
        let (ports, switches, snics, claims) = (
            self.ports.store.clone(),
            self.switches.store.clone(),
            self.smartnics.store.clone(),
            self.claims.store.clone(),
        );
        let port_watch = {
            let (switch_tx, snic_tx, snics) = (
                wakes.switches.clone(),
                wakes.smartnics.clone(),
                snics.clone(),
            );
            let (own1, index) = (own_writes.clone(), port_index.clone());
            self.ports
                .start_observed(move |e: &watcher::Event<CompactPort>| {
                    note_relist_or_delete(&own1, e, CompactPort::uid);
                    if let watcher::Event::Delete(p) = e {
                        let p = &p.to_port();
                        if let Some(sw) = switch_port::switch_name(p, &index) {
                            wake(
                                &switch_tx,
                                [ObjectRef::new(&sw).within(&p.namespace().unwrap_or_default())],
                            );
                        }
                        wake(&snic_tx, triggers::smartnics_chained_to(&snics.state(), p));
                    }
                })
        };
        let switch_watch = {
            let (port_tx, provider_tx, index) = (
                wakes.ports.clone(),
                wakes.providers.clone(),
                port_index.clone(),
            );
            self.switches
                .start_observed(move |e: &watcher::Event<Switch>| {
                    bgp_switches.switches_changed();
                    let watcher::Event::Delete(sw) = e else {
                        return;
                    };
                    let ns = sw.namespace();
                    wake(
                        &port_tx,
                        triggers::ports_of_switches(&index.read(), ns.as_deref(), &[sw.name_any()]),
                    );
                    wake(
                        &provider_tx,
                        [ObjectRef::new(&sw.spec.provider.name)
                            .within(ns.as_deref().unwrap_or_default())],
                    );
                })
        };
        let provider_watch = {
            let (port_tx, switch_tx, snic_tx) = (
                wakes.ports.clone(),
                wakes.switches.clone(),
                wakes.smartnics.clone(),
            );
            let (index, switches, snics) = (port_index.clone(), switches.clone(), snics.clone());
            self.providers.start(move |pv: &ProviderSwitch| {
                let ns = pv.namespace();
                let names = triggers::switches_of_providers(
                    &switches.state(),
                    ns.as_deref(),
                    &[pv.name_any()],
                );
                wake(
                    &port_tx,
                    triggers::ports_of_switches(&index.read(), ns.as_deref(), &names),
                );
                wake(
                    &switch_tx,
                    names
                        .iter()
                        .map(|n| ObjectRef::new(n).within(ns.as_deref().unwrap_or_default())),
                );
                wake(
                    &snic_tx,
                    triggers::smartnics_of_provider(&snics.state(), ns.as_deref(), &pv.name_any()),
                );
            })
        };
        let config_watch = {
            let (port_tx, ports) = (wakes.ports.clone(), ports.clone());
            self.configs.start(move |c: &SwitchPortConfiguration| {
                wake(
                    &port_tx,
                    triggers::ports_using_configuration(
                        &ports.state(),
                        &c.namespace().unwrap_or_default(),
                        &c.name_any(),
                    ),
                );
            })
        };
        let snic_watch = {
            let own = own_writes.clone();
            self.smartnics
                .start_observed(move |e: &watcher::Event<SmartNicPort>| {
                    note_relist_or_delete(&own, e, |p| p.metadata.uid.as_deref());
                })
        };
        let claim_watch = self.claims.start(|_| {});
        let server_watch = {
            let (gone, claims) = (wakes.claims.clone(), claims.clone());
            self.servers.start(move |server: &Server| {
                for claim in triggers::claims_for_server(&claims.state(), server) {
                    let _ = gone.send(claim);
                }
            })
        };
        // A grant given or taken wakes every port and claim (their tenancy check reads
        // the grants); pools change rarely.
        let pool_watch = {
            let (port_tx, snic_tx, claim_tx) = (
                wakes.ports.clone(),
                wakes.smartnics.clone(),
                wakes.claims.clone(),
            );
            self.pools.start(move |_: &VLANPool| {
                pool_deleted.notify_one();
                wake(&port_tx, ports.state().iter().map(|p| p.object_ref()));
                wake(
                    &snic_tx,
                    snics.state().iter().map(|p| ObjectRef::from_obj(&**p)),
                );
                wake(
                    &claim_tx,
                    claims.state().iter().map(|c| ObjectRef::from_obj(&**c)),
                );
            })
        };
        run_parts(parts![
            port_watch,
            switch_watch,
            provider_watch,
            config_watch,
            snic_watch,
            claim_watch,
            server_watch,
            pool_watch
        ])
    }
}

/// Keeps the port index ([`crate::decide::port_index::PortIndex`]) from the port watch's events.
/// A relist makes no event an echo any more; a deleted port's writes are forgotten
/// ([`crate::decide::own_writes`]).
fn note_relist_or_delete<K>(
    own: &SharedOwnWrites,
    event: &watcher::Event<K>,
    uid: fn(&K) -> Option<&str>,
) {
    match event {
        watcher::Event::Init => own.lock().clear(),
        watcher::Event::Delete(p) => own.lock().forget(uid(p).unwrap_or_default()),
        _ => {}
    }
}

/// A port kind's own trigger stream without the events that only echo this
/// process's own writes ([`crate::decide::own_writes`]): the reconcile they would
/// wake finds what the write left. Wakes from anything else are not filtered.
/// A port kind's own trigger stream for its controller: [`without_own_echoes`] with
/// the operator's notes of its writes, each echo settling the status ledger's entry
/// (and waking the port when a reconcile waits for it).
fn own_triggers<K>(
    stream: impl futures::Stream<Item = Arc<K>> + Send + 'static,
    ctx: &Arc<Context>,
    status: fn(&K) -> Option<&crate::api::PortStatus>,
) -> impl futures::Stream<Item = Arc<K>> + Send + 'static
where
    K: kube::Resource + Send + Sync + 'static,
{
    let c = ctx.clone();
    without_own_echoes(stream, ctx.own_writes.clone(), move |uid, p| {
        c.ledger.seen(uid, status(p))
    })
}

/// `on_echo` is called with each echo (the status ledger's entry it shows goes) and
/// says whether it must wake the port after all (a reconcile waits for it).
fn without_own_echoes<K>(
    stream: impl futures::Stream<Item = Arc<K>> + Send + 'static,
    own: SharedOwnWrites,
    on_echo: impl Fn(&str, &K) -> bool + Send + 'static,
) -> impl futures::Stream<Item = Arc<K>> + Send + 'static
where
    K: kube::Resource + Send + Sync + 'static,
{
    stream.filter(move |o| {
        let meta = o.meta();
        let dropped = match (meta.uid.as_deref(), meta.resource_version.as_deref()) {
            (Some(uid), Some(rv)) if own.lock().take_echo(uid, rv) => !on_echo(uid, o),
            _ => false,
        };
        futures::future::ready(!dropped)
    })
}

fn index_port(index: &SharedPortIndex, event: &watcher::Event<SwitchPort>) {
    let mut index = index.write();
    match event {
        watcher::Event::Init => index.begin_relist(),
        watcher::Event::InitApply(p) | watcher::Event::Apply(p) => index.put(p),
        watcher::Event::InitDone => index.end_relist(),
        watcher::Event::Delete(p) => index.remove(
            p.metadata.namespace.as_deref().unwrap_or_default(),
            p.metadata.name.as_deref().unwrap_or_default(),
        ),
    }
}

/// Where reconciles are asked for besides the watches: the switch workers' notices
/// (ports, SmartNicPorts, Switches), the deletion hooks (ProviderSwitches, claims).
struct Wakes {
    ports: mpsc::UnboundedSender<ObjectRef<SwitchPort>>,
    smartnics: mpsc::UnboundedSender<ObjectRef<SmartNicPort>>,
    switches: mpsc::UnboundedSender<ObjectRef<Switch>>,
    providers: mpsc::UnboundedSender<ObjectRef<ProviderSwitch>>,
    claims: mpsc::UnboundedSender<ObjectRef<ServerClaim>>,
}

/// The receiving ends of [`Wakes`], one per controller.
struct Woken {
    ports: mpsc::UnboundedReceiver<ObjectRef<SwitchPort>>,
    smartnics: mpsc::UnboundedReceiver<ObjectRef<SmartNicPort>>,
    switches: mpsc::UnboundedReceiver<ObjectRef<Switch>>,
    providers: mpsc::UnboundedReceiver<ObjectRef<ProviderSwitch>>,
    claims: mpsc::UnboundedReceiver<ObjectRef<ServerClaim>>,
}

fn wakes() -> (Wakes, Woken) {
    let (ports, port_rx) = mpsc::unbounded_channel();
    let (smartnics, snic_rx) = mpsc::unbounded_channel();
    let (switches, switch_rx) = mpsc::unbounded_channel();
    let (providers, provider_rx) = mpsc::unbounded_channel();
    let (claims, claim_rx) = mpsc::unbounded_channel();
    (
        Wakes {
            ports,
            smartnics,
            switches,
            providers,
            claims,
        },
        Woken {
            ports: port_rx,
            smartnics: snic_rx,
            switches: switch_rx,
            providers: provider_rx,
            claims: claim_rx,
        },
    )
}

/// What every controller runs with: the gate every reconcile waits at, the retry
/// counts, the metrics, and the stop signal.
#[derive(Clone)]
struct Harness {
    synced: Synced,
    retries: Arc<Retries>,
    metrics: Arc<Metrics>,
    stop: tokio::sync::broadcast::Sender<()>,
}

impl Harness {
    /// Completes when the operator stops.
    fn stopped(&self) -> impl std::future::Future<Output = ()> + Send + Sync + 'static + use<> {
        let mut rx = self.stop.subscribe();
        async move {
            let _ = rx.recv().await;
        }
    }

    /// `reconcile` of `controller`, behind the gate, timed and counted, with its
    /// error policy, on `controller`'s stream until the operator stops.
    fn run<K, C, F, Fut>(
        &self,
        name: &'static str,
        controller: Controller<K>,
        reconcile: F,
        ctx: Arc<C>,
    ) -> impl std::future::Future<Output = ()> + Send + use<K, C, F, Fut>
    where
        K: Cached,
        C: Send + Sync + 'static,
        F: Fn(Arc<K>, Arc<C>) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = Result<Action, ControllerError>> + Send + 'static,
    {
        controller
            .graceful_shutdown_on(self.stopped())
            .run(
                timed(name, &self.synced, &self.retries, &self.metrics, reconcile),
                error_policy(name, self.retries.clone()),
                ctx,
            )
            .for_each(log_errors(name))
    }

    /// The SwitchPort `reconcile`, behind the gate, timed and counted, with its
    /// error policy, on patchbay's own runner ([`port_runner`], which gives back the
    /// tables a burst grew) for every port `wakes` names, until the operator stops.
    fn run_ports<W, C, F, Fut>(
        &self,
        wakes: W,
        ports: PortCache,
        reconcile: F,
        ctx: Arc<C>,
    ) -> impl std::future::Future<Output = ()> + Send + use<W, C, F, Fut>
    where
        W: futures::Stream<Item = ObjectRef<SwitchPort>> + Send + 'static,
        C: Send + Sync + 'static,
        F: Fn(Arc<SwitchPort>, Arc<C>) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = Result<Option<Duration>, ControllerError>>
            + Send
            + 'static,
    {
        const NAME: &str = "SwitchPort";
        let timed = timed(NAME, &self.synced, &self.retries, &self.metrics, reconcile);
        let retries = self.retries.clone();
        let run: port_runner::Reconcile<SwitchPort> = Arc::new(move |obj| {
            let retries = retries.clone();
            let fut = timed(obj.clone(), ctx.clone());
            async move {
                fut.await.unwrap_or_else(|e| {
                    let after = retry_after_error(NAME, &retries, obj.as_ref(), &e);
                    tracing::debug!(error = %e, kind = NAME, "reconcile failed");
                    Some(after)
                })
            }
            .boxed()
        });
        let synced = self.synced.clone();
        port_runner::run(
            wakes,
            move |key| ports.get(key),
            PORT_RECONCILES.into(),
            run,
            async move { synced.wait().await },
            self.stopped(),
        )
    }
}

/// One part of the operator (a controller, a watch, a background loop), run as a
/// task of its own by [`run_parts`].
type Part = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

/// `parts![a, b, …]`: the futures, boxed as [`Part`]s.
macro_rules! parts {
    ($($part:expr),+ $(,)?) => {
        vec![$(Box::pin($part) as Part),+]
    };
}
use parts;

/// Runs `parts` as tasks of their own until every one has ended, not as the
/// branches of one `join!`: a joined branch is polled whenever any other is woken,
/// and with every controller, watch and in-flight reconcile in one task, each wake
/// (a device's answer, a timer, an event) polled the whole operator — measured, the
/// most of the idle cost of a BGP speaker pass at 200 Switches. Dropping the
/// returned future aborts the tasks (an operator stopped by dropping its future
/// stops whole); a panic in one is raised here, which stops the others.
fn run_parts(parts: Vec<Part>) -> impl std::future::Future<Output = ()> + Send + use<> {
    let mut tasks = tokio::task::JoinSet::new();
    for part in parts {
        tasks.spawn(part);
    }
    async move {
        while let Some(ended) = tasks.join_next().await {
            if let Err(e) = ended
                && e.is_panic()
            {
                std::panic::resume_unwind(e.into_panic());
            }
        }
    }
}

/// Runs the controllers until `shutdown` completes.
pub async fn run(
    client: Client,
    settings: Settings,
    backends: Backends,
    probes: crate::probes::Probes,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let ns = settings.namespace.clone();
    let ns = ns.as_deref();
    let wc = watcher::Config::default();
    // Every reconcile waits for every cache's first list; see `Synced`.
    let (sync_gate, synced) = Synced::new();
    let (stop, _) = tokio::sync::broadcast::channel::<()>(1);
    let harness = Harness {
        synced,
        retries: Arc::new(Retries::default()),
        metrics: probes.metrics.clone(),
        stop,
    };
    let (wakes, woken) = wakes();
    let watches = Watches::new(&client, ns, &wc, &harness);
    let listed = watches.listed();
    let ctx = Arc::new(
        Context::new(
            client.clone(),
            settings.clone(),
            backends,
            EventPublisher::new(client.clone(), reporter()),
            Notices {
                ports: wakes.ports.clone(),
                smartnics: wakes.smartnics.clone(),
                switches: wakes.switches.clone(),
            },
            watches.ports.cache(),
            watches.stores(),
        )
        .with_port_index(watches.port_index.clone())
        .with_probes(probes),
    );
    // The Secret metadata watch wakes the ports a credentials change concerns and
    // tells the Secret cache which versions are current.
    let secret_versions = ctx.secrets.clone();
    let secrets = watcher(
        api_for::<PartialObjectMeta<Secret>>(&client, ns),
        wc.clone(),
    )
    // Backed off on errors, as kube's `Controller` did with its triggers.
    .default_backoff()
    .inspect(move |e| {
        if let Ok(e) = e {
            secret_versions.observe(e);
        }
    })
    .touched_objects();
    let snic_configs = api_for::<SmartNicConfiguration>(&client, ns);
    let port_ctl = switch_ports(&watches, &harness, &ctx, secrets, woken.ports);
    let switch_ctl = switches(&watches, &harness, &ctx, woken.switches);
    let provider_ctl = provider_switches(&watches, &harness, &ctx, woken.providers);
    let snic_ctl = smartnic_ports(&watches, &harness, &ctx, snic_configs, &wc, woken.smartnics);
    let hosts = hosts_and_claims(
        &client,
        &settings,
        &watches,
        &harness,
        &ctx,
        &wc,
        woken.claims,
    );
    let pools_changed = watches.pools.subscribe();
    let background = background(
        &client,
        &settings,
        &watches,
        &harness,
        pools_changed,
        &ctx.own_writes,
    );
    let pool_deleted = background.pool_deleted.clone();
    let watched = watches.start(
        &wakes,
        pool_deleted,
        &ctx.port_index,
        &ctx.own_writes,
        ctx.stores.bgp_switches.clone(),
    );
    let stopper = {
        let stop = harness.stop.clone();
        let ctx = ctx.clone();
        async move {
            shutdown.await;
            // Changes already with a worker finish and their ports record the
            // answers before the controllers stop.
            ctx.finish_hand_offs(HAND_OFF_TAKE).await;
            let _ = stop.send(());
        }
    };
    run_parts(parts![
        sync_gate.open_when(listed),
        port_ctl,
        switch_ctl,
        provider_ctl,
        snic_ctl,
        hosts,
        watched,
        background.run,
        stopper
    ])
    .await;
}

/// SwitchPorts, on the [`port_runner`]: woken by every input of theirs — configuration, Switch, the
/// Switch's ProviderSwitch, the credentials Secret (metadata only), the Servers
/// cabled to them, the VLANPools — so a change starts a new attempt at once whatever
/// the backoff, and by their worker's notices (drift, the switch answering or not).
fn switch_ports<S>(
    w: &Watches,
    h: &Harness,
    ctx: &Arc<Context>,
    secrets: S,
    notices_rx: mpsc::UnboundedReceiver<ObjectRef<SwitchPort>>,
) -> impl std::future::Future<Output = ()> + Send + use<S>
where
    S: futures::Stream<Item = Result<PartialObjectMeta<Secret>, watcher::Error>> + Send + 'static,
{
    let ports = &w.ports.store;
    let (p1, p5) = (ports.clone(), ports.clone());
    let (i2, i3, i4) = (
        ctx.port_index.clone(),
        ctx.port_index.clone(),
        ctx.port_index.clone(),
    );
    let (s1, s2) = (w.switches.store.clone(), w.switches.store.clone());
    let ps = w.providers.store.clone();
    let own = own_triggers(w.ports.subscribe_ports(), ctx, |p| p.status.as_ref());
    type Wakes = futures::stream::BoxStream<'static, Vec<ObjectRef<SwitchPort>>>;
    let wakes: [Wakes; 8] = [
        own.map(|p| vec![ObjectRef::from_obj(&*p)]).boxed(),
        spec_changes(w.servers.subscribe())
            .map(|s| triggers::ports_cabled_to::<SwitchPort>(&s, CabledPortKind::SwitchPort))
            .boxed(),
        w.pools
            .subscribe()
            .map(move |_| {
                p5.state()
                    .iter()
                    .map(|p| p.object_ref())
                    .collect::<Vec<_>>()
            })
            .boxed(),
        w.configs
            .subscribe()
            .map(move |c| {
                triggers::ports_using_configuration(
                    &p1.state(),
                    &c.namespace().unwrap_or_default(),
                    &c.name_any(),
                )
            })
            .boxed(),
        w.switches
            .subscribe()
            .map(move |sw| {
                triggers::ports_of_switches(&i2.read(), sw.namespace().as_deref(), &[sw.name_any()])
            })
            .boxed(),
        w.providers
            .subscribe()
            .map(move |pv| {
                let ns = pv.namespace();
                let names =
                    triggers::switches_of_providers(&s1.state(), ns.as_deref(), &[pv.name_any()]);
                triggers::ports_of_switches(&i3.read(), ns.as_deref(), &names)
            })
            .boxed(),
        secrets
            .filter_map(|secret| {
                if let Err(e) = &secret {
                    tracing::debug!(error = %e, "Secret watch");
                }
                futures::future::ready(secret.ok())
            })
            .map(move |secret| {
                triggers::ports_using_secret(
                    &i4.read(),
                    &s2.state(),
                    &ps.state(),
                    secret.namespace().as_deref(),
                    &secret.name_any(),
                )
            })
            .boxed(),
        notices(notices_rx).map(|r| vec![r]).boxed(),
    ];
    let wakes = futures::stream::select_all(wakes).flat_map(futures::stream::iter);
    // A reconcile hands its device change to the switch's worker and returns
    // (hand-offs), so the slots no longer bound the batch sizes; they bound the
    // reconciles computing at once.
    h.run_ports(wakes, w.ports.cache(), switch_port::reconcile, ctx.clone())
}

/// Switches: woken by their ports (owns), their ProviderSwitch and their worker's
/// reachability notices.
fn switches(
    w: &Watches,
    h: &Harness,
    ctx: &Arc<Context>,
    notices_rx: mpsc::UnboundedReceiver<ObjectRef<Switch>>,
) -> impl std::future::Future<Output = ()> + Send + use<> {
    let s3 = w.switches.store.clone();
    let (s4, s5) = (w.switches.store.clone(), w.switches.store.clone());
    let controller =
        Controller::for_shared_stream(w.switches.subscribe(), w.switches.store.clone())
            // A port's first events (no status yet: just created, by this controller
            // or ahead of it by a user) are what the Switch keeps its ports by; its
            // deletion wakes the Switch through the deletion hook. A port's status
            // changes say nothing the Switch shows, and at 10,000 ports they woke every
            // Switch on every transition (measured: most of the operator's CPU).
            .owns_shared_stream(
                w.ports
                    .subscribe()
                    .filter(|p| futures::future::ready(!p.has_status()))
                    .map(|p| Arc::new(p.to_port())),
            )
            .watches_shared_stream(w.providers.subscribe(), move |p| {
                let ns = p.namespace();
                triggers::switches_of_providers(&s3.state(), ns.as_deref(), &[p.name_any()])
                    .into_iter()
                    .map(|n| ObjectRef::new(&n).within(ns.as_deref().unwrap_or_default()))
                    .collect::<Vec<_>>()
            })
            // A host's binding and phase move its BGP neighbours; a claim's change
            // what they may announce.
            .watches_shared_stream(w.servers.subscribe(), move |s| {
                triggers::bgp_switches_of_server(&s4.state(), &s)
            })
            .watches_shared_stream(w.claims.subscribe(), move |c| {
                triggers::bgp_switches_of_claim(&s5.state(), &c)
            })
            .reconcile_on(notices(notices_rx))
            // No debounce: kube's keeps postponing an object's reconcile for as long
            // as wakes for it come faster than the debounce, and a ToR whose hosts
            // are provisioned together (each Server's every write wakes its BGP
            // Switch), or claims with BGP changing often, kept a Switch's speaker
            // pass and neighbour read waiting for as long as that lasted (found by
            // the failing-speaker test, with wakes every 200 ms against 500 ms). A
            // burst still costs at most two reconciles: the scheduler holds one
            // pending request per Switch while one runs.
            .with_config(Config::default().concurrency(8));
    let switch_ctx = Arc::new(switch::SwitchContext {
        shared: ctx.clone(),
        own: Default::default(),
    });
    h.run("Switch", controller, switch::reconcile, switch_ctx)
}

/// ProviderSwitches: held while a Switch or SmartNicPort uses them.
fn provider_switches(
    w: &Watches,
    h: &Harness,
    ctx: &Arc<Context>,
    deleted_users: mpsc::UnboundedReceiver<ObjectRef<ProviderSwitch>>,
) -> impl std::future::Future<Output = ()> + Send + use<> {
    let controller =
        Controller::for_shared_stream(w.providers.subscribe(), w.providers.store.clone())
            .watches_shared_stream(w.switches.subscribe(), |s| {
                Some(
                    ObjectRef::<ProviderSwitch>::new(&s.spec.provider.name)
                        .within(&s.namespace().unwrap_or_default()),
                )
            })
            .watches_shared_stream(w.smartnics.subscribe(), |p| {
                Some(
                    ObjectRef::<ProviderSwitch>::new(&p.spec.provider.name)
                        .within(&p.namespace().unwrap_or_default()),
                )
            })
            .reconcile_on(notices(deleted_users));
    h.run(
        "ProviderSwitch",
        controller,
        provider_switch::reconcile,
        ctx.clone(),
    )
}

/// SmartNicPorts: woken by their configuration, the SwitchPort they chain to (or
/// claimed), their provider, the Servers cabled to them, the VLANPools, and the
/// notices of their provider's worker.
fn smartnic_ports(
    w: &Watches,
    h: &Harness,
    ctx: &Arc<Context>,
    configs: kube::Api<SmartNicConfiguration>,
    wc: &watcher::Config,
    notices_rx: mpsc::UnboundedReceiver<ObjectRef<SmartNicPort>>,
) -> impl std::future::Future<Output = ()> + Send + use<> {
    let snics = &w.smartnics.store;
    let (n1, n2, n3, n4) = (snics.clone(), snics.clone(), snics.clone(), snics.clone());
    let own = own_triggers(w.smartnics.subscribe(), ctx, |p| p.status.as_ref());
    let controller = Controller::for_shared_stream(own, snics.clone())
        .watches_shared_stream(spec_changes(w.servers.subscribe()), |s| {
            triggers::ports_cabled_to::<SmartNicPort>(&s, CabledPortKind::SmartNicPort)
        })
        .watches_shared_stream(w.pools.subscribe(), move |_| {
            n4.state()
                .iter()
                .map(|p| ObjectRef::from_obj(&**p))
                .collect::<Vec<_>>()
        })
        .watches(configs, wc.clone(), move |c| {
            triggers::smartnics_using_configuration(
                &n1.state(),
                &c.namespace().unwrap_or_default(),
                &c.name_any(),
            )
        })
        .watches_shared_stream(w.ports.subscribe_ports(), move |sp| {
            triggers::smartnics_chained_to(&n2.state(), &sp)
        })
        .watches_shared_stream(w.providers.subscribe(), move |pv| {
            triggers::smartnics_of_provider(&n3.state(), pv.namespace().as_deref(), &pv.name_any())
        })
        .reconcile_on(notices(notices_rx))
        .with_config(Config::default().concurrency(64));
    h.run(
        "SmartNicPort",
        controller,
        smartnic_port::reconcile,
        ctx.clone(),
    )
}

/// Allocation and the hosts: ServerClaims woken by the Servers (and BareMetalHosts)
/// that may complete or concern them; Servers by their own changes, the ports they
/// drive or are cabled to, their claim, the configurations they provision with, the
/// pools and their BareMetalHost; BareMetalHosts carrying their own ports likewise;
/// the Metal3 cache that follows its CRD. One Server watch feeds the cache the
/// allocator plans from and then both controllers, so a claim is never woken by a
/// Server change its plan cannot see. A shared stream carries no deletions: a
/// deleted Server wakes the claims it concerns through `gone`, once the cache no
/// longer has it. Also the orphan sweep, on start-up, periodically and when a Server
/// names an unknown claim.
fn hosts_and_claims(
    client: &Client,
    settings: &Settings,
    w: &Watches,
    h: &Harness,
    ctx: &Arc<Context>,
    wc: &watcher::Config,
    gone: mpsc::UnboundedReceiver<ObjectRef<ServerClaim>>,
) -> impl std::future::Future<Output = ()> + Send + use<> {
    // Metal3's hosts: a cache whose watch follows the BareMetalHost CRD (installed
    // before or after patchbay, or removed), with a listed gate of its own — the
    // other caches' gate does not wait for Metal3.
    let (hosts, host_writer, host_run) = metal3::hosts_cache(client, wc, h.stopped());
    let (hosts_for_claims, hosts_for_servers, hosts_for_hosts) = (
        subscribe(&host_writer),
        subscribe(&host_writer),
        subscribe(&host_writer),
    );
    let host_watch = host_run(host_writer);
    let (servers, claims) = (w.servers.store.clone(), w.claims.store.clone());
    let alloc = Arc::new(
        Allocator::new(
            client.clone(),
            settings.namespace.clone(),
            servers.clone(),
            claims.clone(),
            hosts,
            EventPublisher::new(client.clone(), reporter()),
        )
        .with_tenancy(settings.tenancy.clone())
        .with_bgp(ctx.stores.clone()),
    );
    let (c1, c2, c3) = (claims.clone(), claims.clone(), claims.clone());
    let (v4, v1, v2, v3, v6, v7, v5, v8) = (
        servers.clone(),
        servers.clone(),
        servers.clone(),
        servers.clone(),
        servers.clone(),
        servers.clone(),
        servers.clone(),
        servers.clone(),
    );
    let claim_ctl = Controller::for_shared_stream(w.claims.subscribe(), claims.clone())
        .watches_shared_stream(w.servers.subscribe(), move |s| {
            triggers::claims_for_server(&c1.state(), &s)
        })
        .watches_shared_stream(w.pools.subscribe(), move |_| {
            c3.state()
                .iter()
                .map(|c| ObjectRef::from_obj(&**c))
                .collect::<Vec<_>>()
        })
        .watches_shared_stream(hosts_for_claims, move |host| {
            triggers::servers_of_host(&v4.state(), &host)
                .iter()
                .filter_map(|r| v4.get(r))
                .flat_map(|s| triggers::claims_for_server(&c2.state(), &s))
                .collect::<Vec<_>>()
        })
        .reconcile_on(notices(gone))
        .with_config(Config::default().concurrency(8));
    // Metal3 coming or going changes what every linked Server follows, and a cache
    // that fills or empties wakes nobody by itself.
    let (metal3_tx, metal3_rx) = mpsc::unbounded_channel();
    let metal3_changes = {
        let (mut hosts, servers, mut stop) =
            (alloc.hosts.clone(), servers.clone(), h.stop.subscribe());
        async move {
            loop {
                tokio::select! {
                    changed = hosts.next_settled_change() => if !changed { return },
                    _ = stop.recv() => return,
                }
                wake(
                    &metal3_tx,
                    triggers::servers_linked_to_hosts(&servers.state()),
                );
            }
        }
    };
    let server_ctl = Controller::for_shared_stream(w.servers.subscribe(), servers.clone())
        .watches_shared_stream(w.ports.subscribe_ports(), move |p| {
            triggers::servers_of_port(&v1.state(), CabledPortKind::SwitchPort, &p.metadata)
        })
        .watches_shared_stream(w.smartnics.subscribe(), move |p| {
            triggers::servers_of_port(&v2.state(), CabledPortKind::SmartNicPort, &p.metadata)
        })
        .watches_shared_stream(w.claims.subscribe(), move |c| {
            triggers::servers_of_claim(&v3.state(), &c)
        })
        .watches_shared_stream(w.configs.subscribe(), move |c| {
            triggers::servers_provisioned_with(&v6.state(), &c)
        })
        .watches_shared_stream(w.pools.subscribe(), move |_| {
            v7.state()
                .iter()
                .map(|s| ObjectRef::from_obj(&**s))
                .collect::<Vec<_>>()
        })
        .watches_shared_stream(hosts_for_servers, move |host| {
            triggers::servers_of_host(&v5.state(), &host)
        })
        .watches_shared_stream(w.switches.subscribe(), move |sw| {
            triggers::servers_of_switch(&v8.state(), &sw)
        })
        .reconcile_on(notices(metal3_rx))
        .with_config(Config::default().concurrency(8));
    // Opted in (--bgp-node-selector): a selected Node that appears, changes or goes
    // wakes the Server it is.
    let server_ctl = match &settings.bgp_nodes {
        Some(b) => {
            let cfg = if b.selector.is_empty() {
                wc.clone()
            } else {
                wc.clone().labels(&b.selector)
            };
            server_ctl.watches(kube::Api::<Node>::all(client.clone()), cfg, |node: Node| {
                crate::decide::bgp_nodes::server_of_node(
                    node.labels(),
                    node.spec.as_ref().and_then(|s| s.provider_id.as_deref()),
                )
                .map(ObjectRef::<Server>::new)
            })
        }
        None => server_ctl,
    };
    // BareMetalHosts that carry their own ports: woken by their own changes, the
    // ports they drive or are cabled to and the configurations they provision with.
    let store = alloc.hosts.store().clone();
    let (h1, h2, h3, h4) = (store.clone(), store.clone(), store.clone(), store.clone());
    let host_ctl = Controller::for_shared_stream(hosts_for_hosts, store)
        .watches_shared_stream(w.ports.subscribe_ports(), move |p| {
            triggers::hosts_of_port(&h1.state(), CabledPortKind::SwitchPort, &p.metadata)
        })
        .watches_shared_stream(w.smartnics.subscribe(), move |p| {
            triggers::hosts_of_port(&h2.state(), CabledPortKind::SmartNicPort, &p.metadata)
        })
        .watches_shared_stream(w.configs.subscribe(), move |c| {
            triggers::hosts_provisioned_with(&h3.state(), &c)
        })
        .watches_shared_stream(w.switches.subscribe(), move |sw| {
            triggers::hosts_of_switch(&h4.state(), &sw)
        })
        .with_config(Config::default().concurrency(8));
    let server_ctx = Arc::new(server::ServerCtx {
        alloc: alloc.clone(),
        world: HostWorld {
            client: client.clone(),
            switch_ports: w.ports.cache(),
            port_index: w.port_index.clone(),
            smartnic_ports: w.smartnics.store.clone(),
            configurations: w.configs.store.clone(),
            events: EventPublisher::new(client.clone(), reporter()),
            stores: ctx.stores.clone(),
            tenancy: ctx.settings.tenancy.clone(),
            bgp_nodes: ctx.settings.bgp_nodes.clone(),
        },
    });
    let claim_ctl = h.run(
        "ServerClaim",
        claim_ctl,
        server_claim::reconcile,
        alloc.clone(),
    );
    let host_ctl = h.run(
        "BareMetalHost",
        host_ctl,
        bare_metal_host::reconcile,
        server_ctx.clone(),
    );
    let server_ctl = h.run("Server", server_ctl, server::reconcile, server_ctx);
    let sweeper = orphan_sweeps(alloc, h);
    run_parts(parts![
        host_watch,
        metal3_changes,
        claim_ctl,
        host_ctl,
        server_ctl,
        sweeper
    ])
}

/// The orphan sweep: once the caches are listed, then every
/// [`server_claim::ORPHAN_SWEEP`] and whenever the allocator asks.
fn orphan_sweeps(
    alloc: Arc<Allocator>,
    h: &Harness,
) -> impl std::future::Future<Output = ()> + Send + use<> {
    let mut stop = h.stop.subscribe();
    let synced = h.synced.clone();
    async move {
        tokio::select! {
            listed = synced.wait() => if !listed { return },
            _ = stop.recv() => return,
        }
        loop {
            match server_claim::sweep_orphans(&alloc).await {
                Ok(0) => {}
                Ok(n) => tracing::info!(released = n, "orphan sweep"),
                Err(e) => tracing::warn!(error = %e, "orphan sweep failed"),
            }
            tokio::select! {
                _ = tokio::time::sleep(server_claim::ORPHAN_SWEEP) => {}
                _ = alloc.sweep.notified() => {}
                _ = stop.recv() => return,
            }
        }
    }
}

/// What runs beside the controllers: the port gauges and readiness, the ageing of
/// own-write records, and with tenancy each pool's Ready condition and each served
/// namespace's grants summary.
struct Background<F> {
    run: F,
    /// Told by the pool watch's deletion hook.
    pool_deleted: Arc<tokio::sync::Notify>,
}

fn background(
    client: &Client,
    settings: &Settings,
    w: &Watches,
    h: &Harness,
    mut pools_changed: ReflectHandle<VLANPool>,
    own_writes: &SharedOwnWrites,
) -> Background<impl std::future::Future<Output = ()> + Send + use<>> {
    let gauges = {
        let synced = h.synced.clone();
        let listed = async move {
            if !synced.wait().await {
                // Stopping before the first lists: never ready.
                std::future::pending::<()>().await;
            }
        };
        let mut stop = h.stop.subscribe();
        let metrics = h.metrics.clone();
        let gauges = port_gauges(
            w.ports.store.clone(),
            w.smartnics.store.clone(),
            metrics.clone(),
            listed,
        );
        async move {
            tokio::select! {
                _ = gauges => {}
                _ = stop.recv() => {}
            }
            metrics.set_ready(false);
        }
    };
    // With tenancy: each pool's Ready condition and each served namespace's
    // summary of its grants, after any pool change (and once at start).
    let pool_deleted = Arc::new(tokio::sync::Notify::new());
    let pool_sync = {
        let (client, pools, tenancy) = (
            client.clone(),
            w.pools.store.clone(),
            settings.tenancy.clone(),
        );
        let (synced, mut stop, deleted) =
            (h.synced.clone(), h.stop.subscribe(), pool_deleted.clone());
        async move {
            let Some(tenancy) = tenancy else { return };
            tokio::select! {
                listed = synced.wait() => if !listed { return },
                _ = stop.recv() => return,
            }
            let mut written = vlan_pool::Written::default();
            loop {
                if let Err(e) = vlan_pool::sync(&client, &tenancy, &pools, &mut written).await {
                    tracing::warn!(error = %e, "VLANPool status or grant summaries not written; trying again");
                    tokio::time::sleep(Duration::from_secs(5)).await;
                    continue;
                }
                tokio::select! {
                    _ = pools_changed.next() => {}
                    _ = deleted.notified() => {}
                    _ = stop.recv() => return,
                }
                // Gather a burst of pool changes.
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    // Records of the ports' own writes whose events came first are forgotten.
    let ageing = {
        let (own, mut stop) = (own_writes.clone(), h.stop.subscribe());
        async move {
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(crate::decide::own_writes::AGE_PERIOD) => {}
                    _ = stop.recv() => return,
                }
                own.lock().age();
            }
        }
    };
    Background {
        run: run_parts(parts![gauges, pool_sync, ageing]),
        pool_deleted,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn port(uid: &str, rv: &str) -> Arc<SwitchPort> {
        let mut p = SwitchPort::new("p", Default::default());
        p.metadata.namespace = Some("infra".into());
        p.metadata.uid = Some(uid.into());
        p.metadata.resource_version = Some(rv.into());
        Arc::new(p)
    }

    #[test]
    fn a_cached_port_keeps_no_labels_and_its_owners_only_when_no_label_names_its_switch() {
        let owner = k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
            kind: "Switch".into(),
            name: "leaf1".into(),
            ..Default::default()
        };
        let mut labelled = SwitchPort::new("p", Default::default());
        labelled.metadata.namespace = Some("infra".into());
        labelled.metadata.labels = Some(
            [
                (
                    crate::api::keys::SWITCH_LABEL.to_owned(),
                    "leaf1".to_owned(),
                ),
                ("team".to_owned(), "blue".to_owned()),
            ]
            .into(),
        );
        labelled.metadata.owner_references = Some(vec![owner.clone()]);
        let mut unlabelled = labelled.clone();
        unlabelled.metadata.name = Some("q".into());
        unlabelled.metadata.labels = None;
        let index = SharedPortIndex::default();
        let mut arrive = port_arrival(index.clone());
        let mut events = [
            watcher::Event::Apply(labelled.clone()),
            watcher::Event::Apply(unlabelled),
        ];
        for e in &mut events {
            arrive(e);
        }
        let [
            watcher::Event::Apply(cached),
            watcher::Event::Apply(cached_unlabelled),
        ] = &events
        else {
            unreachable!()
        };
        assert_eq!(cached.metadata.labels, None);
        assert_eq!(cached.metadata.owner_references, None);
        assert_eq!(
            cached_unlabelled.metadata.owner_references,
            Some(vec![owner])
        );
        // Either way the port's Switch is still known: from the index, from the owner.
        let switch_of = |p: &SwitchPort| switch_port::switch_name(p, &index);
        assert_eq!(switch_of(cached).as_deref(), Some("leaf1"));
        assert_eq!(switch_of(cached_unlabelled).as_deref(), Some("leaf1"));
        // Without the index, the compacted port would have lost it.
        let empty = SharedPortIndex::default();
        assert_eq!(switch_port::switch_name(cached, &empty), None);
        // A deleted port keeps its labels (the deletion hook reads its Switch) and
        // leaves the index.
        let mut gone = watcher::Event::Delete(labelled);
        arrive(&mut gone);
        let watcher::Event::Delete(gone) = gone else {
            unreachable!()
        };
        assert!(gone.metadata.labels.is_some());
        assert_eq!(index.read().switch_of("infra", "p"), None);
        assert_eq!(switch_of(&gone).as_deref(), Some("leaf1"));
    }

    #[tokio::test]
    async fn a_port_is_not_woken_by_the_echo_of_its_own_write_but_by_anything_else() {
        let own = SharedOwnWrites::default();
        own.lock().record("u1", "11");
        own.lock().record("u1", "13");
        let echoes = Arc::new(parking_lot::Mutex::new(Vec::new()));
        let seen = echoes.clone();
        let events = [
            port("u1", "10"), // before the write: wakes
            port("u1", "11"), // the write's own event: dropped
            port("u1", "12"), // somebody else's change after it: wakes
            port("u2", "13"), // another port at a written version: wakes
            port("u1", "13"), // the second write, waited for: wakes
            port("u1", "11"), // the same version again (a relist's copy): wakes
        ];
        let woken: Vec<String> =
            without_own_echoes(futures::stream::iter(events), own.clone(), move |uid, p| {
                let rv = p.metadata.resource_version.as_deref().unwrap_or_default();
                seen.lock().push(format!("{uid}@{rv}"));
                // A reconcile waits for the write of version 13: it wakes the port.
                rv == "13"
            })
            .map(|p| {
                format!(
                    "{}@{}",
                    p.metadata.uid.as_deref().unwrap_or_default(),
                    p.metadata.resource_version.as_deref().unwrap_or_default()
                )
            })
            .collect()
            .await;
        assert_eq!(woken, ["u1@10", "u1@12", "u2@13", "u1@13", "u1@11"]);
        assert_eq!(*echoes.lock(), ["u1@11", "u1@13"]);
        assert!(own.lock().is_empty());
    }

    #[test]
    fn a_relist_or_a_deletion_forgets_the_writes() {
        let own = SharedOwnWrites::default();
        own.lock().record("u1", "11");
        own.lock().record("u2", "12");
        let deleted = CompactPort::from_port((*port("u1", "11")).clone());
        note_relist_or_delete(&own, &watcher::Event::Delete(deleted), CompactPort::uid);
        assert_eq!(own.lock().len(), 1);
        note_relist_or_delete(&own, &watcher::Event::<CompactPort>::Init, CompactPort::uid);
        assert!(own.lock().is_empty());
    }
}

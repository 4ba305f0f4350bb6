//! The watches: one shared reflector per kind the controllers read (`Watches`,
//! `Watch::start`), what each event keeps of its object, the deletion and relist hooks,
//! and the triggers that ignore this process's own status writes. Kubernetes I/O (watch
//! streams).

use super::*;

/// How every watch of the operator lists and watches (the decision, issue 58):
///
/// - **`Any` list semantics** (`resourceVersion=0`, `NotOlderThan`): a relist —
///   at start, at a takeover, after a 410 Gone — is answered from the API server's
///   watch cache, not by a quorum read of etcd per page. kube-rs's default,
///   `MostRecent`, makes a relist of 100,000 SwitchPorts ~200 quorum reads. What
///   `Any` may give is a list a little behind etcd; the watch that follows brings
///   the rest, and a port never acts on a status older than one this process wrote
///   (the status ledger, `port_loop`), so a stale list costs at most a wake.
/// - **Pages of 500** (kube-rs's and client-go's default) where the server pages
///   an `Any` list at all: a relist then holds one page of raw JSON at a time, which
///   keeps the operator's peak at 100,000 ports inside its memory target.
/// - **No streaming lists** (`sendInitialEvents`, Kubernetes' WatchList): not on
///   by default in the API servers patchbay supports, and kube-rs falls back to
///   nothing when the server refuses them.
pub fn watch_config() -> watcher::Config {
    watcher::Config::default().any_semantic().page_size(500)
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
pub(super) fn shared_watch<S, K, St>(
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
pub(super) trait Record:
    kube::runtime::reflector::Lookup<DynamicType = ()> + Clone + Send + Sync + 'static
{
}

impl<K> Record for K where
    K: kube::runtime::reflector::Lookup<DynamicType = ()> + Clone + Send + Sync + 'static
{
}

/// The objects of a shared stream whose spec changed (`metadata.generation` moved,
/// or first seen): a Server's status, written often, wakes no port. Objects are
/// told apart by uid, so one deleted and created again under its name is new.
pub(super) fn spec_changes<K>(
    stream: impl futures::Stream<Item = Arc<K>> + Send + 'static,
    store: kube::runtime::reflector::Store<K>,
) -> impl futures::Stream<Item = Arc<K>> + Send + 'static
where
    K: kube::Resource + Record,
{
    changes_of(stream, store, |o| o.meta().generation.unwrap_or_default())
}

/// The configurations (SwitchPortConfigurations, SmartNicConfigurations) whose
/// ports carry something else: the spec changed, or the rollout's current revision
/// moved (a rollout's other status writes, one or more a wave, wake no port: the
/// pins it writes wake the ports it moves).
pub(super) fn carried_changes<C>(
    stream: impl futures::Stream<Item = Arc<C>> + Send + 'static,
    store: kube::runtime::reflector::Store<C>,
) -> impl futures::Stream<Item = Arc<C>> + Send + 'static
where
    C: crate::api::Revisioned + Record,
{
    changes_of(stream, store, |c| {
        let current = c.rollout_status().map_or(0, |r| r.current_revision_number);
        c.meta().generation.unwrap_or_default() ^ (current << 40)
    })
}

/// The objects of a shared stream whose `version` moved, or first seen.
fn changes_of<K>(
    stream: impl futures::Stream<Item = Arc<K>> + Send + 'static,
    store: kube::runtime::reflector::Store<K>,
    version: impl Fn(&K) -> i64 + Send + 'static,
) -> impl futures::Stream<Item = Arc<K>> + Send + 'static
where
    K: kube::Resource + Record,
{
    let mut seen = Generations::default();
    stream.filter(move |o| {
        let changed = seen.moved(o.as_ref(), version(o), store.len(), || {
            store.state().iter().map(|o| identity(o.as_ref())).collect()
        });
        futures::future::ready(changed)
    })
}

/// An object's identity for [`Generations`]: its uid, else its key.
fn identity<K: kube::Resource>(o: &K) -> String {
    o.meta().uid.clone().unwrap_or_else(|| object_key(o))
}

/// The version (its generation, or what a caller counts) last seen of each object; forgets the objects the cache no longer
/// holds (deleted) once it remembers twice as many as the cache holds, so a fleet
/// whose objects come and go does not grow it.
#[derive(Default)]
pub(super) struct Generations(std::collections::HashMap<String, i64>);

impl Generations {
    /// Whether `o` is new or its generation moved; `held` is how many objects the
    /// cache holds, `identities` their identities (asked only to forget).
    #[cfg(test)]
    pub(super) fn changed<K: kube::Resource>(
        &mut self,
        o: &K,
        held: usize,
        identities: impl FnOnce() -> std::collections::HashSet<String>,
    ) -> bool {
        let generation = o.meta().generation.unwrap_or_default();
        self.moved(o, generation, held, identities)
    }

    /// Whether `o` is new or its `version` moved; `held` and `identities` as for
    /// [`Generations::changed`].
    pub(super) fn moved<K: kube::Resource>(
        &mut self,
        o: &K,
        version: i64,
        held: usize,
        identities: impl FnOnce() -> std::collections::HashSet<String>,
    ) -> bool {
        let changed = self.0.insert(identity(o), version) != Some(version);
        if self.0.len() > 2 * held + 64 {
            let keep = identities();
            self.0.retain(|k, _| keep.contains(k));
            self.0.shrink_to_fit();
        }
        changed
    }

    /// Objects remembered.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.0.len()
    }
}

/// What [`shared_watch`] does with each event before the cache sees it.
pub(super) type Arrival<K> = Box<dyn FnMut(&mut watcher::Event<K>) + Send>;

/// [`shared_watch`]'s `arrive` for kinds whose cached objects are kept whole.
pub(super) fn keep_whole<K>() -> Arrival<K> {
    Box::new(|_| {})
}

/// [`shared_watch`]'s `arrive` for SwitchPorts: each event goes into the port index
/// first, so the index knows a port's Switch by the time any reader sees the port in
/// the cache; then each port the cache will hold is trimmed ([`trim_port`]), and
/// the watch's `keep` makes the cache's record of it ([`CompactPort`]). A deleted
/// port keeps its labels: the deletion hook reads its Switch from them.
pub(super) fn port_arrival(index: SharedPortIndex) -> Arrival<SwitchPort> {
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
pub(super) fn trim_port(port: &mut SwitchPort) {
    if let Some(labels) = port.metadata.labels.take()
        && labels.contains_key(crate::api::keys::SWITCH_LABEL)
    {
        port.metadata.owner_references = None;
    }
}

/// `kubectl apply`'s copy of the whole object, which no controller reads.
pub(super) const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Sends every reference of `refs` on `tx` (a controller's `reconcile_on` channel).
pub(super) fn wake<K>(
    tx: &mpsc::UnboundedSender<ObjectRef<K>>,
    refs: impl IntoIterator<Item = ObjectRef<K>>,
) where
    K: kube::Resource,
{
    for r in refs {
        let _ = tx.send(r);
    }
}

pub(super) fn subscribe<K>(writer: &Writer<K>) -> ReflectHandle<K>
where
    K: kube::runtime::reflector::Lookup + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    writer.subscribe().expect("a shared writer has subscribers")
}

pub(super) type Runner<K> = Box<
    dyn FnOnce(
            Writer<K>,
            Box<dyn Fn(&watcher::Event<K>) + Send>,
        ) -> futures::future::BoxFuture<'static, ()>
        + Send,
>;

/// One shared watch ([`shared_watch`]): its cache, the writer readers subscribe to
/// until it starts, whether it has listed, and what runs it.
pub(super) struct Watch<K>
where
    K: Record,
{
    pub(super) store: Store<K>,
    pub(super) writer: Writer<K>,
    pub(super) run: Runner<K>,
    pub(super) listed: Listed,
}

impl<K> Watch<K>
where
    K: Record,
{
    pub(super) fn new<S: Cached>(
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
    pub(super) fn whole(
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
    pub(super) fn subscribe(&self) -> ReflectHandle<K> {
        subscribe(&self.writer)
    }

    /// The watch, running until the operator stops; `on_delete` is called with each
    /// deleted object (a shared stream carries no deletions).
    pub(super) fn start(
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
    pub(super) fn start_observed(
        self,
        on_event: impl Fn(&watcher::Event<K>) + Send + 'static,
    ) -> futures::future::BoxFuture<'static, ()> {
        (self.run)(self.writer, Box::new(on_event))
    }
}

impl Watch<CompactPort> {
    /// The SwitchPort cache, for the readers that look ports up.
    pub(super) fn cache(&self) -> PortCache {
        PortCache(self.store.clone())
    }

    /// A reader of the port watch that gets each port as a SwitchPort, made from
    /// the cache's record ([`CompactPort::to_port`]) for this reader.
    pub(super) fn subscribe_ports(
        &self,
    ) -> impl futures::Stream<Item = Arc<SwitchPort>> + Send + use<> {
        self.subscribe().map(|p| Arc::new(p.to_port()))
    }
}

/// Every kind the controllers read, watched once into one cache, built once; each
/// controller subscribes to the watches that wake it, then [`Watches::start`] runs
/// them all with the deletion hooks.
pub(super) struct Watches {
    pub(super) ports: Watch<CompactPort>,
    /// Fed by the port watch before its cache ([`port_arrival`]).
    pub(super) port_index: SharedPortIndex,
    pub(super) switches: Watch<Switch>,
    pub(super) providers: Watch<ProviderSwitch>,
    pub(super) configs: Watch<SwitchPortConfiguration>,
    pub(super) smartnics: Watch<SmartNicPort>,
    pub(super) smartnic_configs: Watch<SmartNicConfiguration>,
    pub(super) claims: Watch<ServerClaim>,
    pub(super) servers: Watch<Server>,
    pub(super) pools: Watch<VLANPool>,
    /// The configurations' ControllerRevisions (labelled with their
    /// configuration): what a port a rollout holds back carries.
    pub(super) revisions: Watch<ControllerRevision>,
}

/// Metal3's switch API, watched only with `--metal3-switches` (without it the
/// CRDs may not be installed): the BareMetalSwitches (whose ports a host's
/// interfaces are looked up among), the HostNetworkAttachments and the
/// HardwareData (a host's inspection; not waited for: until listed, a host's own
/// `status.hardware` stands for it, as BMO v0.14 writes both).
pub(super) struct Metal3Watches {
    pub(super) switches: Watch<crate::api::metal3_switch::BareMetalSwitch>,
    pub(super) attachments: Watch<crate::api::metal3_attachment::HostNetworkAttachment>,
    pub(super) hardware: Watch<crate::api::metal3::HardwareData>,
}

impl Metal3Watches {
    pub(super) fn new(
        client: &Client,
        ns: Option<&str>,
        wc: &watcher::Config,
        h: &Harness,
        on: bool,
    ) -> Option<Self> {
        on.then(|| Metal3Watches {
            switches: Watch::whole(api_for(client, ns), wc, h.stopped()),
            attachments: Watch::whole(api_for(client, ns), wc, h.stopped()),
            hardware: Watch::whole(api_for(client, ns), wc, h.stopped()),
        })
    }

    /// The watches, running.
    pub(super) fn start(self) -> impl std::future::Future<Output = ()> + use<> {
        let (a, b, c) = (
            self.switches.start(|_| {}),
            self.attachments.start(|_| {}),
            self.hardware.start(|_| {}),
        );
        async move {
            futures::join!(a, b, c);
        }
    }
}

impl Watches {
    pub(super) fn new(
        client: &Client,
        ns: Option<&str>,
        wc: &watcher::Config,
        h: &Harness,
    ) -> Self {
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
            smartnic_configs: Watch::whole(api_for(client, ns), wc, h.stopped()),
            claims: Watch::whole(api_for(client, ns), wc, h.stopped()),
            servers: Watch::whole(kube::Api::all(client.clone()), wc, h.stopped()),
            pools: Watch::whole(kube::Api::all(client.clone()), wc, h.stopped()),
            revisions: Watch::whole(
                api_for(client, ns),
                &wc.clone().labels(crate::api::keys::CONFIGURATION_LABEL),
                h.stopped(),
            ),
        }
    }

    /// Whether each cache holds its first list (what [`Synced`] waits for).
    pub(super) fn listed(&self) -> Vec<Listed> {
        vec![
            self.ports.listed.clone(),
            self.switches.listed.clone(),
            self.providers.listed.clone(),
            self.configs.listed.clone(),
            self.smartnics.listed.clone(),
            self.smartnic_configs.listed.clone(),
            self.claims.listed.clone(),
            self.servers.listed.clone(),
            self.pools.listed.clone(),
            self.revisions.listed.clone(),
        ]
    }

    /// The caches a port reconcile reads what it refers to from.
    pub(super) fn stores(&self) -> Stores {
        Stores::new(
            self.switches.store.clone(),
            self.providers.store.clone(),
            self.configs.store.clone(),
            self.smartnics.store.clone(),
            self.pools.store.clone(),
            self.servers.store.clone(),
            self.claims.store.clone(),
        )
        .with_revisions(self.revisions.store.clone())
        .with_smartnic_configurations(self.smartnic_configs.store.clone())
    }

    /// Every watch, running, each with what its deletions wake.
    pub(super) fn start(
        self,
        wakes: &Wakes,
        pool_deleted: Arc<tokio::sync::Notify>,
        port_index: &SharedPortIndex,
        own_writes: &SharedOwnWrites,
        bgp_switches: Arc<super::super::bgp_fleet::BgpSwitchesCache>,
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
        // A deleted SmartNicConfiguration wakes its ports (its changes do through
        // the SmartNicPort controller's trigger on this watch).
        let snic_config_watch = {
            let (snic_tx, snics) = (wakes.smartnics.clone(), snics.clone());
            self.smartnic_configs
                .start(move |c: &SmartNicConfiguration| {
                    wake(
                        &snic_tx,
                        triggers::smartnics_using_configuration(
                            &snics.state(),
                            &c.namespace().unwrap_or_default(),
                            &c.name_any(),
                        ),
                    );
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
        let revision_watch = self.revisions.start(|_| {});
        run_parts(parts![
            revision_watch,
            port_watch,
            switch_watch,
            provider_watch,
            config_watch,
            snic_watch,
            snic_config_watch,
            claim_watch,
            server_watch,
            pool_watch
        ])
    }
}

/// Keeps the port index ([`crate::decide::port_index::PortIndex`]) from the port watch's events.
/// A relist makes no event an echo any more; a deleted port's writes are forgotten
/// ([`crate::decide::own_writes`]).
pub(super) fn note_relist_or_delete<K>(
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
pub(super) fn own_triggers<K>(
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
pub(super) fn without_own_echoes<K>(
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

pub(super) fn index_port(index: &SharedPortIndex, event: &watcher::Event<SwitchPort>) {
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

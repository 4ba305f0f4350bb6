//! The wiring: one kube-rs `Controller` per kind, the watches that wake each
//! (through [`crate::decide::triggers`]), the streams the switch workers' notices arrive on,
//! the error policies, and a graceful shutdown of all of them together. Kubernetes
//! I/O (watches).

use std::sync::Arc;
use std::time::Duration;

use futures::{FutureExt, StreamExt};
use k8s_openapi::api::core::v1::Secret;
use kube::core::PartialObjectMeta;
use kube::runtime::controller::{Action, Config, Controller};
use kube::runtime::events::Reporter;
use kube::runtime::reflector::store::Writer;
use kube::runtime::reflector::{ObjectRef, ReflectHandle, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use tokio::sync::mpsc;

use super::context::{Context, Listed, Notices, Stores, Synced, api_for};
use super::events::EventPublisher;
use super::host::HostWorld;
use super::server_claim::Allocator;
use super::{
    ControllerError, bare_metal_host, metal3, provider_switch, server, server_claim, smartnic_port,
    switch, switch_port, vlan_pool,
};
use crate::api::server::CabledPortKind;
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

impl Retries {
    fn key<K: kube::Resource>(controller: &str, obj: &K) -> String {
        format!(
            "{controller}/{}/{}",
            obj.meta().namespace.as_deref().unwrap_or_default(),
            obj.meta().name.as_deref().unwrap_or_default()
        )
    }

    fn table(&self) -> parking_lot::MutexGuard<'_, std::collections::HashMap<String, u32>> {
        self.0.lock()
    }

    fn clear(&self, key: &str) {
        self.table().remove(key);
    }

    fn bump(&self, key: &str) {
        *self.table().entry(key.to_owned()).or_default() += 1;
    }

    fn count(&self, key: &str) -> u32 {
        self.table().get(key).copied().unwrap_or(1).max(1)
    }
}

/// The error policy of `controller`: per object, by the error's class (see
/// [`ReconcileRetry`]).
fn error_policy<K, C>(
    controller: &'static str,
    retries: Arc<Retries>,
) -> impl Fn(Arc<K>, &ControllerError, Arc<C>) -> Action
where
    K: kube::Resource,
{
    move |obj, e, _| {
        let class = e.retry();
        let after = class.after(retries.count(&Retries::key(controller, obj.as_ref())));
        tracing::debug!(error = %e, category = e.category(), ?class, ?after, controller, "reconcile error");
        Action::requeue(after)
    }
}

/// One watch shared by several controllers: its cache, a subscription per reader
/// (each sees an object only once the cache holds it, so a controller woken by it
/// reads what woke it), whether the cache holds its first list, and the future that
/// drives the watch until `stop`, calling its `on_delete` with every deleted object
/// (a shared stream carries no deletions).
/// The cache keeps what the controllers read: server-side bookkeeping
/// (`managedFields`, `kubectl`'s last-applied annotation) is dropped on arrival.
#[allow(clippy::type_complexity)]
fn shared_watch<K>(
    api: kube::Api<K>,
    wc: &watcher::Config,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> (
    Store<K>,
    Writer<K>,
    impl FnOnce(Writer<K>, Box<dyn Fn(&K) + Send>) -> futures::future::BoxFuture<'static, ()>,
    Listed,
)
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let writer = Writer::<K>::new_shared(1024, ());
    let store = writer.as_reader();
    let wc = wc.clone();
    let (listing, listed) = tokio::sync::watch::channel(false);
    let run = move |writer: Writer<K>, on_delete: Box<dyn Fn(&K) + Send>| {
        watcher(api, wc)
            .modify(|o| {
                let meta = o.meta_mut();
                meta.managed_fields = None;
                if let Some(a) = meta.annotations.as_mut() {
                    a.remove(LAST_APPLIED);
                }
            })
            .default_backoff()
            .reflect_shared(writer)
            .take_until(stop)
            .for_each(move |event| {
                match &event {
                    // The reflector has put the list in the cache before it yields this.
                    Ok(watcher::Event::InitDone) => {
                        listing.send_replace(true);
                    }
                    Ok(watcher::Event::Delete(o)) => on_delete(o),
                    _ => {}
                }
                futures::future::ready(())
            })
            .boxed()
    };
    (store, writer, run, listed)
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
        let key = Retries::key("", o.as_ref());
        let generation = o.meta().generation.unwrap_or_default();
        futures::future::ready(seen.insert(key, generation) != Some(generation))
    })
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
fn timed<K, C, F, Fut>(
    controller: &'static str,
    synced: &Synced,
    retries: &Arc<Retries>,
    metrics: &Arc<Metrics>,
    reconcile: F,
) -> impl Fn(Arc<K>, Arc<C>) -> futures::future::BoxFuture<'static, Result<Action, ControllerError>>
where
    K: kube::Resource,
    F: Fn(Arc<K>, Arc<C>) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<Action, ControllerError>> + Send + 'static,
{
    let synced = synced.clone();
    let retries = retries.clone();
    let metrics = metrics.clone();
    move |obj, ctx| {
        let key = Retries::key(controller, obj.as_ref());
        let fut = reconcile(obj, ctx);
        let synced = synced.clone();
        let retries = retries.clone();
        let metrics = metrics.clone();
        async move {
            if !synced.wait().await {
                // Stopping before the caches were listed: nothing to do.
                return Ok(Action::await_change());
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
                    ("ok", Ok(Action::requeue(ReconcileRetry::Waiting.after(1))))
                }
                Err(e) => (e.category(), Err(e)),
            };
            match &result {
                Ok(_) => retries.clear(&key),
                Err(_) => retries.bump(&key),
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

/// Counts the ports per kind and state into `patchbay_ports` every 2 s, and marks
/// the operator ready once every cache has synced.
async fn port_gauges(
    ports: Store<SwitchPort>,
    smartnics: Store<SmartNicPort>,
    metrics: Arc<Metrics>,
    ready: impl std::future::Future<Output = ()>,
) {
    ready.await;
    metrics.set_ready(true);
    loop {
        let mut counts: std::collections::BTreeMap<(String, String), f64> = Default::default();
        let state = |s: Option<&crate::api::PortStatus>| {
            s.and_then(|s| s.state)
                .map_or_else(|| "(none)".to_owned(), |s| s.to_string())
        };
        for p in ports.state() {
            *counts
                .entry(("SwitchPort".into(), state(p.status.as_ref())))
                .or_default() += 1.0;
        }
        for p in smartnics.state() {
            *counts
                .entry(("SmartNicPort".into(), state(p.status.as_ref())))
                .or_default() += 1.0;
        }
        metrics.set_ports(counts);
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// Who the Events say reported them.
fn reporter() -> Reporter {
    Reporter {
        controller: "patchbay".into(),
        instance: std::env::var("HOSTNAME").ok(),
    }
}

/// Runs the controllers until `shutdown` completes.
pub async fn run(
    client: Client,
    settings: Settings,
    backends: Backends,
    probes: super::Probes,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let metrics = probes.metrics.clone();
    let ns = settings.namespace.clone();
    let settings_namespace = ns.clone();
    let settings_tenancy = settings.tenancy.clone();
    let ns = ns.as_deref();
    let (port_tx, port_rx) = mpsc::unbounded_channel();
    let (snic_tx, snic_rx) = mpsc::unbounded_channel();
    let (switch_tx, switch_rx) = mpsc::unbounded_channel();
    let (provider_tx, provider_rx) = mpsc::unbounded_channel::<ObjectRef<ProviderSwitch>>();
    let wc = watcher::Config::default();
    // Every reconcile waits for every cache's first list; see `Synced`.
    let (sync_gate, synced) = Synced::new();
    let retries = Arc::new(Retries::default());
    let ports: kube::Api<SwitchPort> = api_for(&client, ns);
    let switches: kube::Api<Switch> = api_for(&client, ns);
    let providers: kube::Api<ProviderSwitch> = api_for(&client, ns);
    let (stop_tx, _) = tokio::sync::broadcast::channel::<()>(1);
    let stopped = |tx: &tokio::sync::broadcast::Sender<()>| {
        let mut rx = tx.subscribe();
        async move {
            let _ = rx.recv().await;
        }
    };
    // Every kind the controllers read is watched once, into one cache, and that
    // watch wakes every controller that reads it: SwitchPorts (their controller, the
    // Switches that own them, the SmartNicPorts chained to them, the Servers),
    // Switches, ProviderSwitches, SwitchPortConfigurations, SmartNicPorts, claims.
    let (port_store, port_writer, port_run, ports_listed) =
        shared_watch(ports.clone(), &wc, stopped(&stop_tx));
    let port_ctl = Controller::for_shared_stream(subscribe(&port_writer), port_store.clone());
    let ports_for_servers = subscribe(&port_writer);
    let ports_for_switches = subscribe(&port_writer);
    let ports_for_smartnics = subscribe(&port_writer);
    let ports_for_hosts = subscribe(&port_writer);
    let (switch_store, switch_writer, switch_run, switches_listed) =
        shared_watch(switches.clone(), &wc, stopped(&stop_tx));
    let switch_ctl = Controller::for_shared_stream(subscribe(&switch_writer), switch_store.clone());
    let switches_for_ports = subscribe(&switch_writer);
    let switches_for_providers = subscribe(&switch_writer);
    let (provider_store, provider_writer, provider_run, providers_listed) =
        shared_watch(providers.clone(), &wc, stopped(&stop_tx));
    let provider_ctl =
        Controller::for_shared_stream(subscribe(&provider_writer), provider_store.clone());
    let providers_for_ports = subscribe(&provider_writer);
    let providers_for_switches = subscribe(&provider_writer);
    let providers_for_smartnics = subscribe(&provider_writer);
    let (config_store, config_writer, config_run, configs_listed) = shared_watch(
        api_for::<SwitchPortConfiguration>(&client, ns),
        &wc,
        stopped(&stop_tx),
    );
    let configs_for_ports = subscribe(&config_writer);
    let configs_for_servers = subscribe(&config_writer);
    let configs_for_hosts = subscribe(&config_writer);
    let (snic_store, snic_writer, snic_run, snics_listed) =
        shared_watch(api_for::<SmartNicPort>(&client, ns), &wc, stopped(&stop_tx));
    let snic_ctl = Controller::for_shared_stream(subscribe(&snic_writer), snic_store.clone());
    let smartnics_for_servers = subscribe(&snic_writer);
    let smartnics_for_providers = subscribe(&snic_writer);
    let smartnics_for_hosts = subscribe(&snic_writer);
    let snic_watch = snic_run(snic_writer, Box::new(|_| {}));
    // What a deletion wakes (the shared streams carry none).
    let port_watch = {
        let (switch_tx, snic_tx, snics) = (switch_tx.clone(), snic_tx.clone(), snic_store.clone());
        port_run(
            port_writer,
            Box::new(move |p: &SwitchPort| {
                if let Some(sw) = switch_port::switch_name(p) {
                    wake(
                        &switch_tx,
                        [ObjectRef::new(&sw).within(&p.namespace().unwrap_or_default())],
                    );
                }
                wake(&snic_tx, triggers::smartnics_chained_to(&snics.state(), p));
            }),
        )
    };
    let switch_watch = {
        let (port_tx, provider_tx, ports) =
            (port_tx.clone(), provider_tx.clone(), port_store.clone());
        switch_run(
            switch_writer,
            Box::new(move |sw: &Switch| {
                let ns = sw.namespace();
                wake(
                    &port_tx,
                    triggers::ports_of_switches(&ports.state(), ns.as_deref(), &[sw.name_any()]),
                );
                wake(
                    &provider_tx,
                    [ObjectRef::new(&sw.spec.provider.name)
                        .within(ns.as_deref().unwrap_or_default())],
                );
            }),
        )
    };
    let provider_watch = {
        let (port_tx, switch_tx, snic_tx) = (port_tx.clone(), switch_tx.clone(), snic_tx.clone());
        let (ports, switches, snics) =
            (port_store.clone(), switch_store.clone(), snic_store.clone());
        provider_run(
            provider_writer,
            Box::new(move |pv: &ProviderSwitch| {
                let ns = pv.namespace();
                let names = triggers::switches_of_providers(
                    &switches.state(),
                    ns.as_deref(),
                    &[pv.name_any()],
                );
                wake(
                    &port_tx,
                    triggers::ports_of_switches(&ports.state(), ns.as_deref(), &names),
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
            }),
        )
    };
    let config_watch = {
        let (port_tx, ports) = (port_tx.clone(), port_store.clone());
        config_run(
            config_writer,
            Box::new(move |c: &SwitchPortConfiguration| {
                wake(
                    &port_tx,
                    triggers::ports_using_configuration(
                        &ports.state(),
                        &c.namespace().unwrap_or_default(),
                        &c.name_any(),
                    ),
                );
            }),
        )
    };
    let (claim_store, claim_writer, claim_run, claims_listed) =
        shared_watch(api_for::<ServerClaim>(&client, ns), &wc, stopped(&stop_tx));
    let claim_ctl = Controller::for_shared_stream(subscribe(&claim_writer), claim_store.clone());
    let claims_for_servers = subscribe(&claim_writer);
    let claim_watch = claim_run(claim_writer, Box::new(|_| {}));
    let (gone_tx, gone_rx) = mpsc::unbounded_channel();
    let (server_store, server_writer, server_run, servers_listed) = shared_watch(
        kube::Api::<Server>::all(client.clone()),
        &wc,
        stopped(&stop_tx),
    );
    let server_events = subscribe(&server_writer);
    let servers_for_ports = spec_changes(subscribe(&server_writer));
    let servers_for_smartnics = spec_changes(subscribe(&server_writer));
    let c0 = claim_store.clone();
    let gone = gone_tx.clone();
    let server_watch = server_run(
        server_writer,
        Box::new(move |server: &Server| {
            for claim in triggers::claims_for_server(&c0.state(), server) {
                let _ = gone.send(claim);
            }
        }),
    );
    // VLANPools (cluster-scoped): a grant given or taken wakes every port and claim
    // (their tenancy check reads the grants); pools change rarely.
    let (pool_store, pool_writer, pool_run, pools_listed) = shared_watch(
        kube::Api::<VLANPool>::all(client.clone()),
        &wc,
        stopped(&stop_tx),
    );
    let pools_for_ports = subscribe(&pool_writer);
    let pools_for_smartnics = subscribe(&pool_writer);
    let pools_for_claims = subscribe(&pool_writer);
    let pools_for_servers = subscribe(&pool_writer);
    let mut pools_for_summary = subscribe(&pool_writer);
    let pool_deleted = Arc::new(tokio::sync::Notify::new());
    let pool_watch = {
        let deleted = pool_deleted.clone();
        let (port_tx, snic_tx, ports, snics) = (
            port_tx.clone(),
            snic_tx.clone(),
            port_store.clone(),
            snic_store.clone(),
        );
        let (claim_tx, claims) = (gone_tx.clone(), claim_store.clone());
        pool_run(
            pool_writer,
            Box::new(move |_: &VLANPool| {
                deleted.notify_one();
                wake(
                    &port_tx,
                    ports.state().iter().map(|p| ObjectRef::from_obj(&**p)),
                );
                wake(
                    &snic_tx,
                    snics.state().iter().map(|p| ObjectRef::from_obj(&**p)),
                );
                wake(
                    &claim_tx,
                    claims.state().iter().map(|c| ObjectRef::from_obj(&**c)),
                );
            }),
        )
    };
    let ctx = Arc::new(
        Context::new(
            client.clone(),
            settings,
            backends,
            EventPublisher::new(client.clone(), reporter()),
            Notices {
                ports: port_tx,
                smartnics: snic_tx,
                switches: switch_tx,
            },
            port_store.clone(),
            Stores::new(
                switch_store.clone(),
                provider_store.clone(),
                config_store.clone(),
                snic_store.clone(),
                pool_store.clone(),
                server_store.clone(),
            ),
        )
        .with_probes(probes),
    );

    // SwitchPorts: woken by every input of theirs — configuration, Switch, the
    // Switch's ProviderSwitch, the credentials Secret (metadata only) — so a change
    // starts a new attempt at once whatever the backoff, and by their worker's
    // notices (drift, the switch answering or not).
    let (p1, p2, p3, p4) = (
        port_store.clone(),
        port_store.clone(),
        port_store.clone(),
        port_store.clone(),
    );
    let (s1, s2) = (switch_store.clone(), switch_store.clone());
    let secrets = watcher(
        api_for::<PartialObjectMeta<Secret>>(&client, ns),
        wc.clone(),
    )
    .touched_objects();
    let ps = provider_store.clone();
    let p5 = port_store.clone();
    let port_ctl = port_ctl
        .watches_shared_stream(servers_for_ports, |s| {
            triggers::ports_cabled_to::<SwitchPort>(&s, CabledPortKind::SwitchPort)
        })
        .watches_shared_stream(pools_for_ports, move |_| {
            p5.state()
                .iter()
                .map(|p| ObjectRef::from_obj(&**p))
                .collect::<Vec<_>>()
        })
        .watches_shared_stream(configs_for_ports, move |c| {
            triggers::ports_using_configuration(
                &p1.state(),
                &c.namespace().unwrap_or_default(),
                &c.name_any(),
            )
        })
        .watches_shared_stream(switches_for_ports, move |sw| {
            triggers::ports_of_switches(&p2.state(), sw.namespace().as_deref(), &[sw.name_any()])
        })
        .watches_shared_stream(providers_for_ports, move |pv| {
            let ns = pv.namespace();
            let names =
                triggers::switches_of_providers(&s1.state(), ns.as_deref(), &[pv.name_any()]);
            triggers::ports_of_switches(&p3.state(), ns.as_deref(), &names)
        })
        .watches_stream(secrets, move |secret| {
            triggers::ports_using_secret(
                &p4.state(),
                &s2.state(),
                &ps.state(),
                secret.namespace().as_deref(),
                &secret.name_any(),
            )
        })
        .reconcile_on(notices(port_rx))
        // A reconcile waiting on its switch's batch holds its slot, so the slots bound
        // how many ports can wait on the workers at once, and with them the batch
        // sizes (measured: 50 switches x 20 ports linked at once, 64 slots: batches
        // of 1.4 ports, 3.5 s; 2048 slots: 8.4 ports, 1.5 s — but 10,000 idle ports
        // then cost 24 % of a core and 155 MiB instead of 0.9 % and 80 MiB).
        .with_config(Config::default().concurrency(PORT_RECONCILES))
        .graceful_shutdown_on(stopped(&stop_tx))
        .run(
            timed(
                "SwitchPort",
                &synced,
                &retries,
                &metrics,
                switch_port::reconcile,
            ),
            error_policy("SwitchPort", retries.clone()),
            ctx.clone(),
        )
        .for_each(log_errors("SwitchPort"));

    // Switches: woken by their ports (owns), their ProviderSwitch and their worker's
    // reachability notices.
    let s3 = switch_store.clone();
    let switch_ctl = switch_ctl
        .owns_shared_stream(ports_for_switches)
        .watches_shared_stream(providers_for_switches, move |p| {
            let ns = p.namespace();
            triggers::switches_of_providers(&s3.state(), ns.as_deref(), &[p.name_any()])
                .into_iter()
                .map(|n| ObjectRef::new(&n).within(ns.as_deref().unwrap_or_default()))
                .collect::<Vec<_>>()
        })
        .reconcile_on(notices(switch_rx))
        // Every port event wakes its Switch (owns); gather them.
        .with_config(
            Config::default()
                .concurrency(8)
                .debounce(Duration::from_millis(500)),
        )
        .graceful_shutdown_on(stopped(&stop_tx))
        .run(
            timed("Switch", &synced, &retries, &metrics, switch::reconcile),
            error_policy("Switch", retries.clone()),
            ctx.clone(),
        )
        .for_each(log_errors("Switch"));

    // ProviderSwitches: held while a Switch or SmartNicPort uses them.
    let provider_ctl = provider_ctl
        .watches_shared_stream(switches_for_providers, |s| {
            Some(
                ObjectRef::<ProviderSwitch>::new(&s.spec.provider.name)
                    .within(&s.namespace().unwrap_or_default()),
            )
        })
        .watches_shared_stream(smartnics_for_providers, |p| {
            Some(
                ObjectRef::<ProviderSwitch>::new(&p.spec.provider.name)
                    .within(&p.namespace().unwrap_or_default()),
            )
        })
        .reconcile_on(notices(provider_rx))
        .graceful_shutdown_on(stopped(&stop_tx))
        .run(
            timed(
                "ProviderSwitch",
                &synced,
                &retries,
                &metrics,
                provider_switch::reconcile,
            ),
            error_policy("ProviderSwitch", retries.clone()),
            ctx.clone(),
        )
        .for_each(log_errors("ProviderSwitch"));

    // SmartNicPorts: woken by their configuration, the SwitchPort they chain to (or
    // claimed), their provider, and the notices of their provider's worker.
    let (n1, n2, n3) = (snic_store.clone(), snic_store.clone(), snic_store.clone());
    let n4 = snic_store.clone();
    let snic_ctl = snic_ctl
        .watches_shared_stream(servers_for_smartnics, |s| {
            triggers::ports_cabled_to::<SmartNicPort>(&s, CabledPortKind::SmartNicPort)
        })
        .watches_shared_stream(pools_for_smartnics, move |_| {
            n4.state()
                .iter()
                .map(|p| ObjectRef::from_obj(&**p))
                .collect::<Vec<_>>()
        })
        .watches(
            api_for::<SmartNicConfiguration>(&client, ns),
            wc.clone(),
            move |c| {
                triggers::smartnics_using_configuration(
                    &n1.state(),
                    &c.namespace().unwrap_or_default(),
                    &c.name_any(),
                )
            },
        )
        .watches_shared_stream(ports_for_smartnics, move |sp| {
            triggers::smartnics_chained_to(&n2.state(), &sp)
        })
        .watches_shared_stream(providers_for_smartnics, move |pv| {
            triggers::smartnics_of_provider(&n3.state(), pv.namespace().as_deref(), &pv.name_any())
        })
        .reconcile_on(notices(snic_rx))
        .with_config(Config::default().concurrency(64))
        .graceful_shutdown_on(stopped(&stop_tx))
        .run(
            timed(
                "SmartNicPort",
                &synced,
                &retries,
                &metrics,
                smartnic_port::reconcile,
            ),
            error_policy("SmartNicPort", retries.clone()),
            ctx.clone(),
        )
        .for_each(log_errors("SmartNicPort"));

    // Allocation: ServerClaims woken by the Servers (and BareMetalHosts) that may
    // complete or concern them; Servers by their own changes; the orphan sweep on
    // start-up, periodically and when a Server names an unknown claim.
    // One Server watch feeds the cache the allocator plans from and then both
    // controllers, so a claim is never woken by a Server change its plan cannot see.
    // A shared stream carries no deletions: a deleted Server wakes the claims it
    // concerns through `gone`, once the cache no longer has it.
    let server_ctl = Controller::for_shared_stream(server_events.clone(), server_store.clone());
    let listed = vec![
        ports_listed,
        switches_listed,
        providers_listed,
        configs_listed,
        snics_listed,
        claims_listed,
        servers_listed,
        pools_listed,
    ];
    // Metal3's hosts: a cache whose watch follows the BareMetalHost CRD (installed
    // before or after patchbay, or removed), with a listed gate of its own — the
    // other caches' gate does not wait for Metal3.
    let (hosts, host_writer, host_run) = metal3::hosts_cache(&client, &wc, stopped(&stop_tx));
    let (hosts_for_claims, hosts_for_servers, hosts_for_hosts) = (
        subscribe(&host_writer),
        subscribe(&host_writer),
        subscribe(&host_writer),
    );
    let host_watch = host_run(host_writer);
    let alloc = Arc::new(
        Allocator::new(
            client.clone(),
            settings_namespace,
            server_store.clone(),
            claim_store.clone(),
            hosts,
            EventPublisher::new(client.clone(), reporter()),
        )
        .with_tenancy(settings_tenancy.clone()),
    );
    let (c1, c2) = (claim_store.clone(), claim_store.clone());
    let c3 = claim_store.clone();
    let mut claim_ctl = claim_ctl
        .watches_shared_stream(server_events, move |s| {
            triggers::claims_for_server(&c1.state(), &s)
        })
        .watches_shared_stream(pools_for_claims, move |_| {
            c3.state()
                .iter()
                .map(|c| ObjectRef::from_obj(&**c))
                .collect::<Vec<_>>()
        });
    // Servers: woken by their own changes, the ports they drive or are cabled to,
    // their claim, the configurations they provision with, and their BareMetalHost.
    let (v1, v2, v3, v6, v7) = (
        server_store.clone(),
        server_store.clone(),
        server_store.clone(),
        server_store.clone(),
        server_store.clone(),
    );
    let mut server_ctl = server_ctl
        .watches_shared_stream(ports_for_servers, move |p| {
            triggers::servers_of_port(&v1.state(), CabledPortKind::SwitchPort, &p.metadata)
        })
        .watches_shared_stream(smartnics_for_servers, move |p| {
            triggers::servers_of_port(&v2.state(), CabledPortKind::SmartNicPort, &p.metadata)
        })
        .watches_shared_stream(claims_for_servers, move |c| {
            triggers::servers_of_claim(&v3.state(), &c)
        })
        .watches_shared_stream(configs_for_servers, move |c| {
            triggers::servers_provisioned_with(&v6.state(), &c)
        })
        .watches_shared_stream(pools_for_servers, move |_| {
            v7.state()
                .iter()
                .map(|s| ObjectRef::from_obj(&**s))
                .collect::<Vec<_>>()
        });
    let (v4, v5) = (server_store.clone(), server_store.clone());
    claim_ctl = claim_ctl.watches_shared_stream(hosts_for_claims, move |host| {
        triggers::servers_of_host(&v4.state(), &host)
            .iter()
            .filter_map(|r| v4.get(r))
            .flat_map(|s| triggers::claims_for_server(&c2.state(), &s))
            .collect::<Vec<_>>()
    });
    server_ctl = server_ctl.watches_shared_stream(hosts_for_servers, move |host| {
        triggers::servers_of_host(&v5.state(), &host)
    });
    // BareMetalHosts that carry their own ports: woken by their own changes, the
    // ports they drive or are cabled to and the configurations they provision with.
    let store = alloc.hosts.store().clone();
    let (h1, h2, h3) = (store.clone(), store.clone(), store.clone());
    let host_ctl = Controller::for_shared_stream(hosts_for_hosts, store)
        .watches_shared_stream(ports_for_hosts, move |p| {
            triggers::hosts_of_port(&h1.state(), CabledPortKind::SwitchPort, &p.metadata)
        })
        .watches_shared_stream(smartnics_for_hosts, move |p| {
            triggers::hosts_of_port(&h2.state(), CabledPortKind::SmartNicPort, &p.metadata)
        })
        .watches_shared_stream(configs_for_hosts, move |c| {
            triggers::hosts_provisioned_with(&h3.state(), &c)
        });
    let claim_ctl = claim_ctl
        .reconcile_on(notices(gone_rx))
        .with_config(Config::default().concurrency(8))
        .graceful_shutdown_on(stopped(&stop_tx))
        .run(
            timed(
                "ServerClaim",
                &synced,
                &retries,
                &metrics,
                server_claim::reconcile,
            ),
            error_policy("ServerClaim", retries.clone()),
            alloc.clone(),
        )
        .for_each(log_errors("ServerClaim"));
    let server_ctx = Arc::new(server::ServerCtx {
        alloc: alloc.clone(),
        world: HostWorld {
            client: client.clone(),
            switch_ports: port_store.clone(),
            smartnic_ports: snic_store.clone(),
            configurations: config_store.clone(),
            events: EventPublisher::new(client.clone(), reporter()),
            stores: ctx.stores.clone(),
            tenancy: ctx.settings.tenancy.clone(),
        },
    });
    let host_ctl = host_ctl
        .with_config(Config::default().concurrency(8))
        .graceful_shutdown_on(stopped(&stop_tx))
        .run(
            timed(
                "BareMetalHost",
                &synced,
                &retries,
                &metrics,
                bare_metal_host::reconcile,
            ),
            error_policy("BareMetalHost", retries.clone()),
            server_ctx.clone(),
        )
        .for_each(log_errors("BareMetalHost"));
    // Metal3 coming or going changes what every linked Server follows, and a cache
    // that fills or empties wakes nobody by itself.
    let (metal3_tx, metal3_rx) = mpsc::unbounded_channel();
    let metal3_changes = {
        let (mut hosts, servers, mut stop) = (
            alloc.hosts.clone(),
            server_store.clone(),
            stop_tx.subscribe(),
        );
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
    let server_ctl = server_ctl
        .reconcile_on(notices(metal3_rx))
        .with_config(Config::default().concurrency(8))
        .graceful_shutdown_on(stopped(&stop_tx))
        .run(
            timed("Server", &synced, &retries, &metrics, server::reconcile),
            error_policy("Server", retries.clone()),
            server_ctx,
        )
        .for_each(log_errors("Server"));
    let sweeper = {
        let mut stop = stop_tx.subscribe();
        let synced = synced.clone();
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
    };

    let gauges = {
        let synced = synced.clone();
        let listed = async move {
            if !synced.wait().await {
                // Stopping before the first lists: never ready.
                std::future::pending::<()>().await;
            }
        };
        let mut stop = stop_tx.subscribe();
        let metrics = metrics.clone();
        let gauges = port_gauges(
            port_store.clone(),
            snic_store.clone(),
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
    let pool_sync = {
        let (client, pools, tenancy) =
            (client.clone(), pool_store.clone(), settings_tenancy.clone());
        let (synced, mut stop) = (synced.clone(), stop_tx.subscribe());
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
                    _ = pools_for_summary.next() => {}
                    _ = pool_deleted.notified() => {}
                    _ = stop.recv() => return,
                }
                // Gather a burst of pool changes.
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    let stopper = async move {
        shutdown.await;
        let _ = stop_tx.send(());
    };
    tokio::join!(
        sync_gate.open_when(listed),
        port_ctl,
        switch_ctl,
        provider_ctl,
        snic_ctl,
        port_watch,
        switch_watch,
        provider_watch,
        config_watch,
        snic_watch,
        claim_watch,
        server_watch,
        pool_watch,
        host_watch,
        metal3_changes,
        host_ctl,
        claim_ctl,
        server_ctl,
        sweeper,
        gauges,
        pool_sync,
        stopper
    );
}

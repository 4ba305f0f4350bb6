//! Metal3's BareMetalHosts as the controllers see them: one cache whose watch follows
//! the CRD. Kubernetes I/O (a watch on the CRD, a watch on the hosts).
//!
//! Metal3 may be installed after patchbay, removed, installed again; the operator
//! keeps running. A watch on `customresourcedefinitions` (the one CRD, by name) says
//! whether the BareMetalHost CRD exists and is established. While it is, a watch on
//! the hosts feeds the cache; when it goes, the cache is emptied in one step (no host
//! is left to drive) and the host watch stops; when it comes (back), a fresh watch
//! lists the hosts. The cache's [`HostsState`] says which of these holds, and is a
//! gate of its own, beside the one every reconcile passes: a reconcile that reads the
//! hosts waits while the cache is listing ([`HostsCache::settled`]), so it never takes
//! "not listed yet" for "not there" — exactly as for the other caches.
//!
//! The controllers that consume host events are wired once, at start, whether Metal3
//! is there or not: their streams come from the cache's one writer, which lives for
//! the operator's life.

use std::future::Future;
use std::time::Duration;

use futures::{FutureExt, StreamExt};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use std::sync::Arc;

use kube::runtime::reflector::store::Writer;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use tokio::sync::{mpsc, watch};

use crate::api::Server;
use crate::api::metal3::BareMetalHost;

/// The BareMetalHost CRD's name.
pub const CRD_NAME: &str = "baremetalhosts.metal3.io";

/// The Metal3 BareMetalHosts' cache, when the cluster has them.
pub type Hosts = Store<BareMetalHost>;

/// The linked BareMetalHost of a Server: `spec.bareMetalHostRef`, else the host
/// whose `spec.bootMACAddress` is the Server's boot MAC.
pub fn linked_host(hosts: &Hosts, server: &Server) -> Option<Arc<BareMetalHost>> {
    if let Some(r) = &server.spec.bare_metal_host_ref {
        return hosts.get(&ObjectRef::new(&r.name).within(&r.namespace));
    }
    let mac = server.spec.boot_mac.to_ascii_lowercase();
    hosts.state().into_iter().find(|h| {
        h.spec
            .boot_mac_address
            .as_deref()
            .is_some_and(|m| m.to_ascii_lowercase() == mac)
    })
}

/// Where the BareMetalHost cache stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostsState {
    /// The CRD is not installed (or not established): there are no hosts.
    Absent,
    /// The CRD is there and the hosts are being listed: the cache is not to be read.
    Listing,
    /// The cache holds the hosts' list and follows their changes.
    Listed,
}

/// The BareMetalHost cache and where it stands.
#[derive(Clone)]
pub struct HostsCache {
    store: Store<BareMetalHost>,
    state: watch::Receiver<HostsState>,
}

impl HostsCache {
    /// The hosts, when the cache is listed; `None` while Metal3 is absent or the
    /// cache is listing.
    pub fn listed(&self) -> Option<&Store<BareMetalHost>> {
        (*self.state.borrow() == HostsState::Listed).then_some(&self.store)
    }

    /// Waits while the cache is listing; then whether Metal3 is there (`true`: the
    /// cache is listed) or absent (`false`). At once in either steady state.
    pub async fn settled(&self) -> bool {
        let mut state = self.state.clone();
        match state.wait_for(|s| *s != HostsState::Listing).await {
            Ok(s) => *s == HostsState::Listed,
            // The watch stopped: the operator is stopping.
            Err(_) => false,
        }
    }

    /// Where the cache stands now.
    pub fn state(&self) -> HostsState {
        *self.state.borrow()
    }

    /// Waits until the cache becomes listed or absent (Metal3 came or went); false
    /// when the operator is stopping. A cache that empties or fills wakes no
    /// controller by itself (a relist carries no events), so the caller wakes what
    /// the change concerns.
    pub async fn next_settled_change(&mut self) -> bool {
        loop {
            if self.state.changed().await.is_err() {
                return false;
            }
            if *self.state.borrow_and_update() != HostsState::Listing {
                return true;
            }
        }
    }

    /// The cache as it is (every host the watch holds; empty while absent).
    pub fn store(&self) -> &Store<BareMetalHost> {
        &self.store
    }

    /// A cache that never holds a host (tests of the pure parts, a build without
    /// Metal3 wiring).
    pub fn absent() -> Self {
        let (_, state) = watch::channel(HostsState::Absent);
        Self {
            store: Writer::<BareMetalHost>::default().as_reader(),
            state,
        }
    }
}

/// The host watch's events, as the reflector takes them.
type HostEvent = watcher::Result<watcher::Event<BareMetalHost>>;

/// The cache, its writer (for the controllers' subscriptions, taken before `run`)
/// and the future that runs both watches until `stop`.
pub fn hosts_cache(
    client: &Client,
    wc: &watcher::Config,
    stop: impl Future<Output = ()> + Send + 'static,
) -> (
    HostsCache,
    Writer<BareMetalHost>,
    impl FnOnce(Writer<BareMetalHost>) -> futures::future::BoxFuture<'static, ()>,
) {
    let writer = Writer::<BareMetalHost>::new_shared(1024, ());
    let (state_tx, state) = watch::channel(HostsState::Absent);
    let cache = HostsCache {
        store: writer.as_reader(),
        state,
    };
    let (client, wc) = (client.clone(), wc.clone());
    let run = move |writer: Writer<BareMetalHost>| {
        let (events_tx, events_rx) = mpsc::unbounded_channel::<HostEvent>();
        // How many lists (InitDone) the reflector has put in the cache.
        let (done_tx, done_rx) = watch::channel(0u64);
        let state_tx = std::sync::Arc::new(state_tx);
        let marks = state_tx.clone();
        let mut events_rx = events_rx;
        let stream = futures::stream::poll_fn(move |cx| events_rx.poll_recv(cx))
            .reflect_shared(writer)
            .for_each(move |event| {
                if let Ok(watcher::Event::InitDone) = event {
                    done_tx.send_modify(|n| *n += 1);
                    // Listed once a list of a present CRD is in (the emptying list
                    // sent when the CRD goes arrives while Absent).
                    marks.send_if_modified(|s| {
                        let listing = *s == HostsState::Listing;
                        if listing {
                            *s = HostsState::Listed;
                        }
                        listing
                    });
                }
                futures::future::ready(())
            });
        let supervise = supervise(client, wc, events_tx, state_tx, done_rx);
        async move {
            tokio::select! {
                _ = stream => {}
                _ = supervise => {}
                _ = stop => {}
            }
        }
        .boxed()
    };
    (cache, writer, run)
}

/// Whether `crd` is established (served).
fn established(crd: &CustomResourceDefinition) -> bool {
    crd.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c.type_ == "Established" && c.status == "True")
        })
}

/// Follows the CRD: starts a host watch (forwarding into `events`) while it is
/// established, and when it goes, stops it and empties the cache (an empty list),
/// waiting until the reflector has taken that before anything else.
async fn supervise(
    client: Client,
    wc: watcher::Config,
    events: mpsc::UnboundedSender<HostEvent>,
    state: std::sync::Arc<watch::Sender<HostsState>>,
    mut lists_done: watch::Receiver<u64>,
) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let (reader, crd_writer) = kube::runtime::reflector::store();
    let mut crd_events = std::pin::pin!(
        watcher(
            crds,
            watcher::Config::default().fields(&format!("metadata.name={CRD_NAME}")),
        )
        .default_backoff()
        .reflect(crd_writer)
    );
    let mut hosts: Option<tokio::task::JoinHandle<()>> = None;
    while let Some(event) = crd_events.next().await {
        if let Err(e) = &event {
            tracing::debug!(error = %e, "watching the BareMetalHost CRD");
            continue;
        }
        let present = reader
            .state()
            .iter()
            .any(|c| c.metadata.deletion_timestamp.is_none() && established(c));
        match (present, hosts.is_some()) {
            (true, false) => {
                tracing::info!("Metal3's BareMetalHost CRD is installed: watching the hosts");
                state.send_replace(HostsState::Listing);
                let api: Api<BareMetalHost> = Api::all(client.clone());
                let (wc, events) = (wc.clone(), events.clone());
                hosts = Some(tokio::spawn(async move {
                    let mut stream = std::pin::pin!(
                        watcher(api, wc)
                            .modify(|h| h.metadata.managed_fields = None)
                            .default_backoff()
                    );
                    while let Some(e) = stream.next().await {
                        if events.send(e).is_err() {
                            return;
                        }
                    }
                }));
            }
            (false, true) => {
                tracing::warn!(
                    "Metal3's BareMetalHost CRD is gone: linked Servers hold where they are"
                );
                if let Some(task) = hosts.take() {
                    task.abort();
                }
                state.send_replace(HostsState::Absent);
                // An empty list empties the cache in one step.
                let before = *lists_done.borrow_and_update();
                for e in [watcher::Event::Init, watcher::Event::InitDone] {
                    let _ = events.send(Ok(e));
                }
                let _ = tokio::time::timeout(
                    Duration::from_secs(30),
                    lists_done.wait_for(|n| *n > before),
                )
                .await;
            }
            _ => {}
        }
    }
}

//! The background loops: the port gauges' sweep and the orphan sweeps (ports whose
//! owner is gone), each a periodic task. Kubernetes reads and deletes.

use super::*;

/// Counts the ports per kind and state into `patchbay_ports` every
/// [`PORT_GAUGE_PERIOD`], and marks the operator ready once every cache has synced.
pub(super) async fn port_gauges(
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
pub(super) const PORT_GAUGE_PERIOD: Duration = Duration::from_secs(10);

/// Who the Events say reported them.
pub(super) fn reporter() -> Reporter {
    Reporter {
        controller: "patchbay".into(),
        instance: std::env::var("HOSTNAME").ok(),
    }
}

/// The orphan sweep: once the caches are listed, then every
/// [`server_claim::ORPHAN_SWEEP`] and whenever the allocator asks.
pub(super) fn orphan_sweeps(
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
pub(super) struct Background<F> {
    pub(super) run: F,
    /// Told by the pool watch's deletion hook.
    pub(super) pool_deleted: Arc<tokio::sync::Notify>,
}

pub(super) fn background(
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

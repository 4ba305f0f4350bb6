//! Running controllers: each reconcile behind the cache gate, timed and counted
//! (`Harness::run`), the wake channels the watches feed, and every part a task of its
//! own (`run_parts`). Tasks and metrics, no API calls of its own.

use super::*;

/// `reconcile` once the caches are listed (see [`Synced`]), with its duration and
/// result recorded in the metrics (`patchbay_reconciles_total`,
/// `patchbay_reconcile_duration_seconds`).
pub(super) fn timed<K, C, F, Fut, N>(
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
                Err(e) if e.retry() == Retry::Waiting => {
                    tracing::debug!(reason = %e, controller, "waiting");
                    ("ok", Ok(N::retry(WAITING_REQUEUE)))
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

/// Where reconciles are asked for besides the watches: the switch workers' notices
/// (ports, SmartNicPorts, Switches), the deletion hooks (ProviderSwitches, claims).
pub(super) struct Wakes {
    pub(super) ports: mpsc::UnboundedSender<ObjectRef<SwitchPort>>,
    pub(super) smartnics: mpsc::UnboundedSender<ObjectRef<SmartNicPort>>,
    pub(super) switches: mpsc::UnboundedSender<ObjectRef<Switch>>,
    pub(super) providers: mpsc::UnboundedSender<ObjectRef<ProviderSwitch>>,
    pub(super) claims: mpsc::UnboundedSender<ObjectRef<ServerClaim>>,
}

/// The receiving ends of [`Wakes`], one per controller.
pub(super) struct Woken {
    pub(super) ports: mpsc::UnboundedReceiver<ObjectRef<SwitchPort>>,
    pub(super) smartnics: mpsc::UnboundedReceiver<ObjectRef<SmartNicPort>>,
    pub(super) switches: mpsc::UnboundedReceiver<ObjectRef<Switch>>,
    pub(super) providers: mpsc::UnboundedReceiver<ObjectRef<ProviderSwitch>>,
    pub(super) claims: mpsc::UnboundedReceiver<ObjectRef<ServerClaim>>,
}

pub(super) fn wakes() -> (Wakes, Woken) {
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
pub(super) struct Harness {
    pub(super) synced: Synced,
    pub(super) retries: Arc<Retries>,
    pub(super) metrics: Arc<Metrics>,
    pub(super) stop: tokio::sync::broadcast::Sender<()>,
}

impl Harness {
    /// Completes when the operator stops.
    pub(super) fn stopped(
        &self,
    ) -> impl std::future::Future<Output = ()> + Send + Sync + 'static + use<> {
        let mut rx = self.stop.subscribe();
        async move {
            let _ = rx.recv().await;
        }
    }

    /// `reconcile` of `controller`, behind the gate, timed and counted, with its
    /// error policy, on `controller`'s stream until the operator stops.
    pub(super) fn run<K, C, F, Fut>(
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
    pub(super) fn run_ports<W, C, F, Fut>(
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
            self.metrics.port_queue.clone(),
        )
    }
}

/// One part of the operator (a controller, a watch, a background loop), run as a
/// task of its own by [`run_parts`].
pub(super) type Part = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

/// Runs `parts` as tasks of their own until every one has ended, not as the
/// branches of one `join!`: a joined branch is polled whenever any other is woken,
/// and with every controller, watch and in-flight reconcile in one task, each wake
/// (a device's answer, a timer, an event) polled the whole operator — measured, the
/// most of the idle cost of a BGP speaker pass at 200 Switches. Dropping the
/// returned future aborts the tasks (an operator stopped by dropping its future
/// stops whole); a panic in one is raised here, which stops the others.
pub(super) fn run_parts(parts: Vec<Part>) -> impl std::future::Future<Output = ()> + Send + use<> {
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

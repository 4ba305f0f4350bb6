//! One writer per switch: a task that owns a switch's device access, coalesces the
//! port operations that arrive within a short window into one batch (one session,
//! one commit), answers each port with its own result, and sweeps the switch for
//! drift with one read of all its tracked ports. Does device I/O through the
//! [`Switch`] it owns; no Kubernetes.
//!
//! Port reconciles talk to it through [`SwitchWorker`]; at most `max_sessions`
//! batches run against the device at once (1 by default). Reads requested within the
//! same window are served by one `get_ports` call.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use patchbay_providers::values::PortName;
use patchbay_providers::verify::apply_batch_verified;
use patchbay_providers::{
    DesiredPort, DeviceError, ObservedPort, PortChange, PortOperation, Switch, diff,
};
use tokio::sync::{Semaphore, mpsc, oneshot};

/// Identifies a SwitchPort object (namespace, name).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PortKey {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
}

/// How a worker behaves.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// How long to gather operations into one batch.
    pub batch_window: Duration,
    /// How often tracked ports are read back for drift.
    pub drift_interval: Duration,
    /// Most batches (device sessions) at once.
    pub max_sessions: usize,
}

/// Called with a port whose drift verdict changed (to reconcile it).
pub type DriftNotifier = Arc<dyn Fn(PortKey) + Send + Sync>;

enum Job {
    Apply {
        op: PortOperation,
        reply: oneshot::Sender<Result<PortChange, DeviceError>>,
    },
    Read {
        port: PortName,
        reply: oneshot::Sender<Result<ObservedPort, DeviceError>>,
    },
}

#[derive(Default)]
struct Tracking {
    /// Active ports and what they should be.
    desired: BTreeMap<PortKey, DesiredPort>,
    /// The last sweep's verdict per port (true = drifted).
    verdict: HashMap<PortKey, bool>,
    /// Ports whose verdict changed and that have not been reconciled since.
    pending: HashMap<PortKey, bool>,
}

/// A handle to one switch's worker. Dropping every handle stops the worker.
pub struct SwitchWorker {
    jobs: mpsc::UnboundedSender<Job>,
    tracking: Arc<Mutex<Tracking>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for SwitchWorker {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn lock(t: &Mutex<Tracking>) -> std::sync::MutexGuard<'_, Tracking> {
    t.lock().unwrap_or_else(|e| e.into_inner())
}

fn closed() -> DeviceError {
    DeviceError::Protocol {
        during: "handing the operation to the switch worker".into(),
        detail: "the worker stopped".into(),
    }
}

impl SwitchWorker {
    /// Starts a worker for `switch`.
    pub fn spawn(switch: Arc<dyn Switch>, config: WorkerConfig, notify: DriftNotifier) -> Self {
        let (jobs, rx) = mpsc::unbounded_channel();
        let tracking = Arc::new(Mutex::new(Tracking::default()));
        let task = tokio::spawn(run(switch, config, rx, tracking.clone(), notify));
        Self {
            jobs,
            tracking,
            task,
        }
    }

    /// Applies one operation (batched with others) and returns its verified result.
    pub async fn apply(&self, op: PortOperation) -> Result<PortChange, DeviceError> {
        let (reply, rx) = oneshot::channel();
        self.jobs
            .send(Job::Apply { op, reply })
            .map_err(|_| closed())?;
        rx.await.map_err(|_| closed())?
    }

    /// Reads one port (reads in the same window share one device read).
    pub async fn read(&self, port: PortName) -> Result<ObservedPort, DeviceError> {
        let (reply, rx) = oneshot::channel();
        self.jobs
            .send(Job::Read { port, reply })
            .map_err(|_| closed())?;
        rx.await.map_err(|_| closed())?
    }

    /// Checks the device answers by reading the given ports.
    pub async fn probe(&self, ports: &[PortName]) -> Result<(), DeviceError> {
        let reads = ports.iter().map(|p| self.read(p.clone()));
        for r in futures::future::join_all(reads).await {
            match r {
                Ok(_) | Err(DeviceError::UnknownPort { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Tracks an Active port for drift sweeps (`None` stops tracking it).
    pub fn track(&self, key: PortKey, desired: Option<DesiredPort>) {
        let mut t = lock(&self.tracking);
        match desired {
            Some(d) => {
                if t.desired.get(&key) != Some(&d) {
                    t.verdict.remove(&key);
                }
                t.desired.insert(key, d);
            }
            None => {
                t.desired.remove(&key);
                t.verdict.remove(&key);
                t.pending.remove(&key);
            }
        }
    }

    /// Whether a sweep changed this port's drift verdict since it was last asked.
    pub fn take_drift_notice(&self, key: &PortKey) -> Option<bool> {
        lock(&self.tracking).pending.remove(key)
    }
}

async fn run(
    switch: Arc<dyn Switch>,
    config: WorkerConfig,
    mut rx: mpsc::UnboundedReceiver<Job>,
    tracking: Arc<Mutex<Tracking>>,
    notify: DriftNotifier,
) {
    let sessions = Arc::new(Semaphore::new(config.max_sessions.max(1)));
    let mut sweep = tokio::time::interval(config.drift_interval);
    sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    sweep.tick().await;
    loop {
        tokio::select! {
            job = rx.recv() => {
                let Some(first) = job else { return };
                let mut batch = vec![first];
                let deadline = tokio::time::Instant::now() + config.batch_window;
                while let Ok(Some(job)) = tokio::time::timeout_at(deadline, rx.recv()).await {
                    batch.push(job);
                }
                let permit = match sessions.clone().acquire_owned().await {
                    Ok(p) => p,
                    Err(_) => return,
                };
                let switch = switch.clone();
                tokio::spawn(async move {
                    run_batch(switch.as_ref(), batch).await;
                    drop(permit);
                });
            }
            _ = sweep.tick() => {
                let Ok(permit) = sessions.clone().acquire_owned().await else { return };
                sweep_drift(switch.as_ref(), &tracking, &notify).await;
                drop(permit);
            }
        }
    }
}

/// Runs one batch: all writes in one `apply_batch` (split into rounds only if a port
/// appears twice), all reads in one `get_ports`.
async fn run_batch(switch: &dyn Switch, batch: Vec<Job>) {
    let mut writes: Vec<(
        PortOperation,
        oneshot::Sender<Result<PortChange, DeviceError>>,
    )> = Vec::new();
    let mut reads: Vec<(PortName, oneshot::Sender<Result<ObservedPort, DeviceError>>)> = Vec::new();
    for job in batch {
        match job {
            Job::Apply { op, reply } => writes.push((op, reply)),
            Job::Read { port, reply } => reads.push((port, reply)),
        }
    }
    while !writes.is_empty() {
        let mut seen = std::collections::HashSet::new();
        let (round, rest): (Vec<_>, Vec<_>) = writes
            .into_iter()
            .partition(|(op, _)| seen.insert(op.port().clone()));
        writes = rest;
        let ops: Vec<PortOperation> = round.iter().map(|(op, _)| op.clone()).collect();
        match apply_batch_verified(switch, &ops).await {
            Ok(results) => {
                let mut by_port: HashMap<PortName, Result<PortChange, DeviceError>> =
                    results.into_iter().map(|r| (r.port, r.outcome)).collect();
                for (op, reply) in round {
                    let outcome = by_port.remove(op.port()).unwrap_or_else(|| {
                        Err(DeviceError::Protocol {
                            during: format!("configuring {}", op.port()),
                            detail: "the batch reported no result for this port".into(),
                        })
                    });
                    let _ = reply.send(outcome);
                }
            }
            Err(e) => {
                // The session itself failed: nothing is known applied.
                for (_, reply) in round {
                    let _ = reply.send(Err(e.clone()));
                }
            }
        }
    }
    if reads.is_empty() {
        return;
    }
    let mut names: Vec<PortName> = reads.iter().map(|(p, _)| p.clone()).collect();
    names.sort();
    names.dedup();
    match switch.get_ports(&names).await {
        Ok(observed) => {
            let by_port: HashMap<PortName, Result<ObservedPort, DeviceError>> =
                observed.into_iter().collect();
            for (port, reply) in reads {
                let r = by_port.get(&port).cloned().unwrap_or_else(|| {
                    Err(DeviceError::UnknownPort {
                        port: port.to_string(),
                    })
                });
                let _ = reply.send(r);
            }
        }
        Err(e) => {
            for (_, reply) in reads {
                let _ = reply.send(Err(e.clone()));
            }
        }
    }
}

/// Reads every tracked port in one call and notifies ports whose verdict changed.
async fn sweep_drift(switch: &dyn Switch, tracking: &Mutex<Tracking>, notify: &DriftNotifier) {
    let tracked: Vec<(PortKey, DesiredPort)> = lock(tracking)
        .desired
        .iter()
        .map(|(k, d)| (k.clone(), d.clone()))
        .collect();
    if tracked.is_empty() {
        return;
    }
    let mut names: Vec<PortName> = tracked.iter().map(|(_, d)| d.port.clone()).collect();
    names.sort();
    names.dedup();
    let Ok(observed) = switch.get_ports(&names).await else {
        // Unreachable: the next sweep tries again; port reconciles report outages.
        return;
    };
    let observed: HashMap<PortName, ObservedPort> = observed
        .into_iter()
        .filter_map(|(p, r)| r.ok().map(|o| (p, o)))
        .collect();
    let mut changed = Vec::new();
    tracing::debug!(ports = names.len(), "drift sweep read the switch");
    {
        let mut t = lock(tracking);
        for (key, desired) in tracked {
            let Some(obs) = observed.get(&desired.port) else {
                continue;
            };
            let drifted = !diff(&desired, obs).is_empty();
            tracing::debug!(port = %desired.port, drifted, "drift verdict");
            let before = t.verdict.insert(key.clone(), drifted);
            if before != Some(drifted) && (drifted || before == Some(true)) {
                t.pending.insert(key.clone(), drifted);
                changed.push(key);
            }
        }
    }
    for key in changed {
        notify(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use patchbay_providers::VlanMode;
    use patchbay_providers::fixture::{FixtureSwitch, LoggedOperation};
    use patchbay_providers::values::VlanId;

    fn p(n: &str) -> PortName {
        PortName::parse(n).unwrap()
    }

    fn access(port: &str, vlan: u16) -> DesiredPort {
        let mut d = DesiredPort::clean(p(port));
        d.vlans = VlanMode::Access {
            vlan: VlanId::new(vlan).unwrap(),
        };
        d
    }

    fn config() -> WorkerConfig {
        WorkerConfig {
            batch_window: Duration::from_millis(50),
            drift_interval: Duration::from_secs(3600),
            max_sessions: 1,
        }
    }

    #[tokio::test]
    async fn operations_in_one_window_share_one_batch_and_one_session() {
        let names: Vec<PortName> = (1..=8).map(|i| p(&format!("Gi0/{i}"))).collect();
        let fixture = FixtureSwitch::new("tor", names.clone());
        fixture.set_latency(Duration::from_millis(5));
        let worker = SwitchWorker::spawn(Arc::new(fixture.clone()), config(), Arc::new(|_| {}));
        let applies =
            (1..=8).map(|i| worker.apply(PortOperation::Set(access(&format!("Gi0/{i}"), 100 + i))));
        let results = futures::future::join_all(applies).await;
        assert!(results.iter().all(|r| r.is_ok()), "{results:?}");
        let batches: Vec<usize> = fixture
            .operations()
            .iter()
            .filter_map(|o| match o {
                LoggedOperation::Batch { size } => Some(*size),
                _ => None,
            })
            .collect();
        assert_eq!(batches, [8]);
        assert_eq!(fixture.max_concurrent_sessions(), 1);
        assert_eq!(fixture.write_count(), 8);
    }

    #[tokio::test]
    async fn a_sweep_reads_the_switch_once_and_reports_drift() {
        let fixture = FixtureSwitch::new("tor", [p("Gi0/1"), p("Gi0/2")]);
        let notified = Arc::new(Mutex::new(Vec::new()));
        let n = notified.clone();
        let mut cfg = config();
        cfg.drift_interval = Duration::from_millis(100);
        let worker = SwitchWorker::spawn(
            Arc::new(fixture.clone()),
            cfg,
            Arc::new(move |k| n.lock().unwrap().push(k)),
        );
        for (i, port) in ["Gi0/1", "Gi0/2"].iter().enumerate() {
            let d = access(port, 10);
            worker.apply(PortOperation::Set(d.clone())).await.unwrap();
            worker.track(
                PortKey {
                    namespace: "ns".into(),
                    name: format!("port-{i}"),
                },
                Some(d),
            );
        }
        fixture.clear_log();
        fixture.tamper(&p("Gi0/2"), |o| o.vlans = Some(VlanMode::Unconfigured));
        tokio::time::sleep(Duration::from_millis(350)).await;
        let keys = notified.lock().unwrap().clone();
        assert_eq!(keys.len(), 1, "{keys:?}");
        assert_eq!(keys[0].name, "port-1");
        assert_eq!(worker.take_drift_notice(&keys[0]), Some(true));
        // Each sweep read both ports in one get_ports call (two Get log entries per sweep).
        let gets = fixture
            .operations()
            .iter()
            .filter(|o| matches!(o, LoggedOperation::Get { .. }))
            .count();
        assert!(gets >= 2 && gets % 2 == 0, "{gets}");
    }
}

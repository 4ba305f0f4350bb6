//! One writer per switch: a task that owns a switch's device access, coalesces the
//! port operations that arrive close together into one batch (one session, one
//! commit): an operation arriving after a quiet spell of a whole `batch_window` is
//! sent at once (a lone change does not wait); one arriving in a burst opens a batch
//! that closes once nothing arrived for `batch_quiet`, or `batch_window` after its
//! first operation, whichever is first; a batch takes in whatever arrived while it
//! waited for a session, answers each port with its own result, sweeps the switch for drift
//! with one read of all its tracked ports, and knows whether the switch answers.
//! Does device I/O through the [`Device`] it owns; no Kubernetes.
//!
//! **Link aggregation.** A change that makes a port a member of group G (its desired
//! state has `lag`) is held until every member named in its `lag_members` either
//! has a change waiting too or is tracked (Active) with the same group settings;
//! then the group's changes go in one batch, where the backend configures the
//! aggregate before its members. A group still incomplete after
//! [`WorkerConfig::group_hold`] fails its held changes with
//! [`WorkerError::GroupIncomplete`], touching nothing. Leaving a group is not held:
//! each member leaves when its own change comes, and the backend removes the
//! aggregate with its last member.
//!
//! Port reconciles talk to it through [`SwitchWorker`]; at most `max_sessions`
//! batches run against the device at once (1 by default). Reads requested within the
//! same window are served by one `get_ports` call.
//!
//! **Reachability.** A failure of the whole session (unreachable, timeout,
//! authentication, host key: [`DeviceError::is_session_failure`]) puts the switch
//! [`Reachability::Down`]: from then on the worker refuses every operation at once,
//! without touching the device ([`WorkerError::SwitchDown`]), and probes the switch
//! itself once per backoff step (base doubling to cap) — one probe for the whole
//! switch however many ports wait. A batch arriving when the probe is due is run
//! and is the probe. The periodic drift sweep is also the reachability check (it
//! reads one port when no port is tracked), so a switch that goes away is noticed
//! within one drift interval. Every change is announced through the [`Notifier`]:
//! the switch (its status shows it), the ports waiting on it, and the tracked
//! (Active) ports; when the switch answers again every tracked port gets a drift
//! notice, so a device that came back empty is re-applied at once.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jiff::Timestamp;
use patchbay_providers::values::PortName;
use patchbay_providers::verify::apply_batch_verified;
use patchbay_providers::{
    Cause, DesiredPort, Device, DeviceError, ObservedPort, PortChange, PortOperation, diff,
};
use tokio::sync::{Notify, Semaphore, mpsc, oneshot};

use crate::metrics;
use crate::state_machine::{Backoff, SwitchOutage};

/// Identifies a port object (namespace, name).
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
    /// The longest to gather operations into one batch, from the first.
    pub batch_window: Duration,
    /// Close the batch once nothing arrived for this long (at most the window).
    pub batch_quiet: Duration,
    /// How often tracked ports are read back for drift (and the switch probed).
    pub drift_interval: Duration,
    /// Most batches (device sessions) at once.
    pub max_sessions: usize,
    /// How the switch is probed again after a session failure.
    pub backoff: Backoff,
    /// The backend's name, the `backend` label of the metrics.
    pub backend: &'static str,
    /// The longest a batch may take (with leader election: `leaseDuration −
    /// renewDeadline`); a batch that takes longer is abandoned and its ports fail.
    pub batch_timeout: Option<Duration>,
    /// The longest a link-aggregation member's change waits for its group's other
    /// members (see "Link aggregation" above); then it fails naming the missing
    /// ones.
    pub group_hold: Duration,
}

/// [`WorkerConfig::group_hold`] in the operator.
pub const GROUP_HOLD: Duration = Duration::from_secs(30);

/// What a worker announces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notice {
    /// This port should be reconciled: its drift verdict changed, or the switch's
    /// reachability changed while it waits on the switch or is tracked.
    Port(PortKey),
    /// The switch's reachability changed (or a probe failed again).
    Switch,
}

/// Receives the worker's notices.
pub type Notifier = Arc<dyn Fn(Notice) + Send + Sync>;

/// A switch that does not answer. As an error it reads as its last session failure
/// (its source).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{error}")]
pub struct Outage {
    /// The session failure of the last attempt.
    #[source]
    pub error: DeviceError,
    /// When the first attempt of this outage failed.
    pub since: Timestamp,
    /// Failure count, last failure and next probe (what port decisions mirror).
    pub timing: SwitchOutage,
}

/// Whether the switch answers.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Reachability {
    /// Not tried yet (or nothing to probe).
    #[default]
    Unknown,
    /// The last session worked.
    Reachable,
    /// The last session failed as a whole.
    Down(Outage),
}

/// Why the worker could not do an operation.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum WorkerError {
    /// The device failed the operation (the port's own failure).
    #[error(transparent)]
    Device(DeviceError),
    /// The switch does not answer; nothing was sent. It is probed again at
    /// `timing.next_probe`.
    #[error("{}", .0.error)]
    SwitchDown(Box<Outage>),
    /// A link-aggregation member's change waited [`WorkerConfig::group_hold`] for
    /// the group's other members and was not sent.
    #[error(
        "link-aggregation group {group} waited {:.0} s for {} and sent nothing: every member \
         of a group is configured in one batch, and these members' changes did not arrive \
         (is their configuration valid and ready?)",
        waited.as_secs_f64(),
        missing.join(", ")
    )]
    GroupIncomplete {
        /// The group number.
        group: u16,
        /// The device ports whose change did not arrive.
        missing: Vec<String>,
        /// How long the change waited.
        waited: Duration,
    },
}

enum Job {
    Apply {
        key: Option<PortKey>,
        op: PortOperation,
        reply: oneshot::Sender<Result<PortChange, WorkerError>>,
    },
    Read {
        key: Option<PortKey>,
        port: PortName,
        reply: oneshot::Sender<Result<ObservedPort, WorkerError>>,
    },
}

impl Job {
    fn key(&self) -> Option<&PortKey> {
        match self {
            Job::Apply { key, .. } | Job::Read { key, .. } => key.as_ref(),
        }
    }

    fn refuse(self, outage: &Outage) {
        let e = || WorkerError::SwitchDown(Box::new(outage.clone()));
        match self {
            Job::Apply { reply, .. } => {
                let _ = reply.send(Err(e()));
            }
            Job::Read { reply, .. } => {
                let _ = reply.send(Err(e()));
            }
        }
    }
}

#[derive(Default)]
struct Tracking {
    /// Active ports and what they should be.
    desired: BTreeMap<PortKey, DesiredPort>,
    /// The last sweep's verdict per port (true = drifted).
    verdict: HashMap<PortKey, bool>,
    /// Ports with a drift notice they have not taken yet.
    pending: HashMap<PortKey, bool>,
}

#[derive(Default)]
struct HealthState {
    reach: Reachability,
    /// A probe (or a batch standing in for it) is running.
    probing: bool,
    /// A drift sweep is running.
    sweeping: bool,
    /// Ports that were refused (or failed) because the switch is down.
    waiting: BTreeSet<PortKey>,
    /// The device ports to read when no port is tracked.
    probe_ports: Vec<PortName>,
}

/// What the worker's task and its spawned batches share.
struct Shared {
    tracking: Mutex<Tracking>,
    health: Mutex<HealthState>,
    /// Wakes the worker loop when the probe schedule changed.
    changed: Notify,
    notify: Notifier,
    backoff: Backoff,
    /// The `backend` label of the metrics.
    backend: &'static str,
    /// See [`WorkerConfig::batch_timeout`].
    batch_timeout: Option<Duration>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// What to do with a batch that arrives.
enum Admission {
    Run,
    Refuse(Outage),
}

impl Shared {
    fn admit(&self) -> Admission {
        let mut h = lock(&self.health);
        let outage = match &h.reach {
            Reachability::Down(o) => o.clone(),
            _ => return Admission::Run,
        };
        if h.probing || Timestamp::now() < outage.timing.next_probe {
            return Admission::Refuse(outage);
        }
        // The probe is due: this batch is the probe.
        h.probing = true;
        Admission::Run
    }

    /// How long until the next probe, when the switch is down and none is running.
    fn probe_wait(&self) -> Option<Duration> {
        let h = lock(&self.health);
        match &h.reach {
            Reachability::Down(o) if !h.probing => Some(
                Duration::try_from(o.timing.next_probe.duration_since(Timestamp::now()))
                    .unwrap_or(Duration::ZERO),
            ),
            _ => None,
        }
    }

    fn tracked_keys(&self) -> Vec<PortKey> {
        lock(&self.tracking).desired.keys().cloned().collect()
    }

    /// Records a session failure. A failure of a batch that started before the
    /// outage was known belongs to the same step and does not count again.
    fn fail(&self, error: DeviceError, as_probe: bool) -> Outage {
        let now = Timestamp::now();
        let mut h = lock(&self.health);
        let previous = match &h.reach {
            Reachability::Down(o) => Some(o.clone()),
            _ => None,
        };
        if let Some(o) = &previous
            && !as_probe
        {
            return o.clone();
        }
        let failures = previous.as_ref().map_or(1, |o| o.timing.failures + 1);
        let outage = Outage {
            error,
            since: previous.as_ref().map_or(now, |o| o.since),
            timing: SwitchOutage {
                failures,
                last_failure: now,
                next_probe: self.backoff.retry_at(now, failures),
            },
        };
        h.reach = Reachability::Down(outage.clone());
        h.probing = false;
        let mut wake: Vec<PortKey> = h.waiting.iter().cloned().collect();
        drop(h);
        if previous.is_none() {
            tracing::warn!(error = %outage.error, "the switch does not answer; probing it again after the backoff");
            wake.extend(self.tracked_keys());
        } else {
            tracing::debug!(failures, error = %outage.error, "the switch still does not answer");
        }
        self.changed.notify_one();
        (self.notify)(Notice::Switch);
        for key in dedup(wake) {
            (self.notify)(Notice::Port(key));
        }
        outage
    }

    /// Records a session that worked.
    fn succeed(&self) {
        let mut h = lock(&self.health);
        h.probing = false;
        let was = std::mem::replace(&mut h.reach, Reachability::Reachable);
        if was == Reachability::Reachable {
            return;
        }
        let waiting: Vec<PortKey> = std::mem::take(&mut h.waiting).into_iter().collect();
        drop(h);
        let tracked = {
            let mut t = lock(&self.tracking);
            let keys: Vec<PortKey> = t.desired.keys().cloned().collect();
            if matches!(was, Reachability::Down(_)) {
                // Whatever the device holds now is unknown: check every tracked port.
                for k in &keys {
                    t.pending.insert(k.clone(), true);
                }
            }
            keys
        };
        if matches!(was, Reachability::Down(_)) {
            tracing::info!("the switch answers again");
        }
        self.changed.notify_one();
        (self.notify)(Notice::Switch);
        for key in dedup(waiting.into_iter().chain(tracked).collect()) {
            (self.notify)(Notice::Port(key));
        }
    }

    fn wait_for_switch(&self, key: Option<&PortKey>) {
        if let Some(k) = key {
            lock(&self.health).waiting.insert(k.clone());
        }
    }
}

fn dedup(mut keys: Vec<PortKey>) -> Vec<PortKey> {
    keys.sort();
    keys.dedup();
    keys
}

/// A handle to one switch's worker. Dropping every handle stops the worker.
pub struct SwitchWorker {
    jobs: mpsc::UnboundedSender<Job>,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for SwitchWorker {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn closed() -> WorkerError {
    WorkerError::Device(DeviceError::Protocol {
        during: "handing the operation to the switch worker".into(),
        cause: Cause::msg("the worker stopped"),
    })
}

impl SwitchWorker {
    /// Starts a worker for `switch`; `probe_ports` are read to check reachability
    /// while no port is tracked. The first check runs at once.
    pub fn spawn(
        switch: Arc<dyn Device>,
        config: WorkerConfig,
        probe_ports: Vec<PortName>,
        notify: Notifier,
    ) -> Self {
        let (jobs, rx) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            tracking: Mutex::new(Tracking::default()),
            health: Mutex::new(HealthState {
                probe_ports,
                ..Default::default()
            }),
            changed: Notify::new(),
            notify,
            backoff: config.backoff,
            backend: config.backend,
            batch_timeout: config.batch_timeout,
        });
        let task = tokio::spawn(run(switch, config, rx, shared.clone()));
        Self { jobs, shared, task }
    }

    /// Hands a job to the worker and waits for its answer.
    async fn ask<T>(
        &self,
        job: impl FnOnce(oneshot::Sender<Result<T, WorkerError>>) -> Job,
    ) -> Result<T, WorkerError> {
        let (reply, rx) = oneshot::channel();
        self.jobs.send(job(reply)).map_err(|_| closed())?;
        rx.await.map_err(|_| closed())?
    }

    /// Applies one operation (batched with others) and returns its verified result.
    /// `key` is the port object asking: it is notified when the switch answers again
    /// after refusing it.
    pub async fn apply(
        &self,
        key: Option<&PortKey>,
        op: PortOperation,
    ) -> Result<PortChange, WorkerError> {
        let key = key.cloned();
        self.ask(|reply| Job::Apply { key, op, reply }).await
    }

    /// Reads one port (reads in the same window share one device read).
    pub async fn read(
        &self,
        key: Option<&PortKey>,
        port: PortName,
    ) -> Result<ObservedPort, WorkerError> {
        let key = key.cloned();
        self.ask(|reply| Job::Read { key, port, reply }).await
    }

    /// Whether the switch answers, as the worker last found.
    pub fn reachability(&self) -> Reachability {
        lock(&self.shared.health).reach.clone()
    }

    /// The outage, while the switch does not answer.
    pub fn outage(&self) -> Option<Outage> {
        match self.reachability() {
            Reachability::Down(o) => Some(o),
            _ => None,
        }
    }

    /// The device ports read to check reachability while no port is tracked.
    pub fn set_probe_ports(&self, ports: Vec<PortName>) {
        lock(&self.shared.health).probe_ports = ports;
    }

    /// Tracks an Active port for drift sweeps (`None` stops tracking it).
    pub fn track(&self, key: PortKey, desired: Option<DesiredPort>) {
        let mut t = lock(&self.shared.tracking);
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

    /// Whether a drift check of this port is due (a sweep changed its verdict, or the
    /// switch answers again after an outage) since it was last asked.
    pub fn take_drift_notice(&self, key: &PortKey) -> Option<bool> {
        lock(&self.shared.tracking).pending.remove(key)
    }

    /// Puts back a drift notice its port took but did not act on (the port waited for
    /// a fresher copy of itself): the next reconcile checks. A notice posted since
    /// stays as it is.
    pub fn keep_drift_notice(&self, key: PortKey) {
        lock(&self.shared.tracking)
            .pending
            .entry(key)
            .or_insert(true);
    }
}

/// Link-aggregation members' changes held until their group is complete.
#[derive(Default)]
struct Lobby {
    groups: BTreeMap<u16, Held>,
}

struct Held {
    since: tokio::time::Instant,
    jobs: Vec<Job>,
}

/// The group a job makes its port a member of.
fn joining_group(job: &Job) -> Option<u16> {
    match job {
        Job::Apply {
            op: PortOperation::Set(d),
            ..
        } => d.lag.map(|l| l.group.get()),
        _ => None,
    }
}

impl Lobby {
    /// Takes a batch and returns what may run now: every job that joins no group,
    /// and the jobs of each group that became complete (see the module docs).
    fn admit(&mut self, batch: Vec<Job>, shared: &Shared) -> Vec<Job> {
        let mut runnable = Vec::new();
        let mut touched = BTreeSet::new();
        let now = tokio::time::Instant::now();
        for job in batch {
            match joining_group(&job) {
                Some(g) => {
                    touched.insert(g);
                    self.groups
                        .entry(g)
                        .or_insert_with(|| Held {
                            since: now,
                            jobs: Vec::new(),
                        })
                        .jobs
                        .push(job);
                }
                None => runnable.push(job),
            }
        }
        let tracked: Vec<DesiredPort> = lock(&shared.tracking).desired.values().cloned().collect();
        for g in touched {
            if self
                .groups
                .get(&g)
                .is_some_and(|h| missing(&h.jobs, &tracked).is_empty())
                && let Some(held) = self.groups.remove(&g)
            {
                runnable.extend(held.jobs);
            }
        }
        runnable
    }

    /// When the oldest held group gives up.
    fn next_deadline(&self, hold: Duration) -> Option<tokio::time::Instant> {
        self.groups.values().map(|h| h.since + hold).min()
    }

    /// Fails the groups held for `hold` or longer.
    fn expire(&mut self, hold: Duration, shared: &Shared) {
        let now = tokio::time::Instant::now();
        let tracked: Vec<DesiredPort> = lock(&shared.tracking).desired.values().cloned().collect();
        let due: Vec<u16> = self
            .groups
            .iter()
            .filter(|(_, h)| now >= h.since + hold)
            .map(|(g, _)| *g)
            .collect();
        for g in due {
            let Some(held) = self.groups.remove(&g) else {
                continue;
            };
            let missing: Vec<String> = missing(&held.jobs, &tracked)
                .iter()
                .map(ToString::to_string)
                .collect();
            tracing::warn!(group = g, missing = ?missing, "link-aggregation group incomplete; its changes were not sent");
            for job in held.jobs {
                if let Job::Apply { reply, .. } = job {
                    let _ = reply.send(Err(WorkerError::GroupIncomplete {
                        group: g,
                        missing: missing.clone(),
                        waited: now - held.since,
                    }));
                }
            }
        }
    }
}

/// The members named by the held `jobs` of one group that have neither a change
/// among them nor a tracked desired state with the same group settings as the
/// newest change.
fn missing(jobs: &[Job], tracked: &[DesiredPort]) -> Vec<PortName> {
    let targets: Vec<DesiredPort> = jobs
        .iter()
        .filter_map(|j| match j {
            Job::Apply {
                op: PortOperation::Set(d),
                ..
            } => Some(d.clone()),
            _ => None,
        })
        .collect();
    let Some(newest) = targets.last() else {
        return Vec::new();
    };
    let present: BTreeSet<&PortName> = targets.iter().map(|d| &d.port).collect();
    let named: BTreeSet<&PortName> = targets.iter().flat_map(|d| &d.lag_members).collect();
    named
        .into_iter()
        .filter(|m| !present.contains(m))
        .filter(|m| {
            !tracked
                .iter()
                .any(|d| &&d.port == m && d.same_group_settings(newest))
        })
        .cloned()
        .collect()
}

async fn run(
    switch: Arc<dyn Device>,
    config: WorkerConfig,
    mut rx: mpsc::UnboundedReceiver<Job>,
    shared: Arc<Shared>,
) {
    let sessions = Arc::new(Semaphore::new(config.max_sessions.max(1)));
    // The first tick is immediate: the first reachability check.
    let mut sweep = tokio::time::interval(config.drift_interval);
    sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_arrival: Option<tokio::time::Instant> = None;
    let mut lobby = Lobby::default();
    loop {
        let probe_in = shared.probe_wait();
        let group_due = lobby.next_deadline(config.group_hold);
        tokio::select! {
            _ = tokio::time::sleep_until(group_due.unwrap_or_else(tokio::time::Instant::now)), if group_due.is_some() => {
                lobby.expire(config.group_hold, &shared);
            }
            job = rx.recv() => {
                let Some(first) = job else { return };
                let mut batch = vec![first];
                let now = tokio::time::Instant::now();
                // A change after a quiet spell of a whole window goes at once; one in
                // a burst gathers the others.
                let burst = last_arrival.is_some_and(|t| now - t < config.batch_window);
                last_arrival = Some(now);
                let cap = now + config.batch_window;
                if burst {
                    loop {
                        let until = cap.min(tokio::time::Instant::now() + config.batch_quiet);
                        match tokio::time::timeout_at(until, rx.recv()).await {
                            Ok(Some(job)) => {
                                last_arrival = Some(tokio::time::Instant::now());
                                batch.push(job);
                            }
                            _ => break,
                        }
                    }
                }
                match shared.admit() {
                    Admission::Refuse(outage) => {
                        for job in batch {
                            shared.wait_for_switch(job.key());
                            job.refuse(&outage);
                        }
                    }
                    Admission::Run => {
                        let Ok(permit) = sessions.clone().acquire_owned().await else { return };
                        // What arrived while waiting for a session joins this batch.
                        while let Ok(job) = rx.try_recv() {
                            last_arrival = Some(tokio::time::Instant::now());
                            batch.push(job);
                        }
                        let batch = lobby.admit(batch, &shared);
                        if batch.is_empty() {
                            drop(permit);
                            continue;
                        }
                        let (switch, shared) = (switch.clone(), shared.clone());
                        tokio::spawn(async move {
                            run_batch(switch.as_ref(), &shared, batch).await;
                            drop(permit);
                        });
                    }
                }
            }
            _ = tokio::time::sleep(probe_in.unwrap_or_default()), if probe_in.is_some() => {
                lock(&shared.health).probing = true;
                let Ok(permit) = sessions.clone().acquire_owned().await else { return };
                let (switch, shared) = (switch.clone(), shared.clone());
                tokio::spawn(async move {
                    check(switch.as_ref(), &shared).await;
                    drop(permit);
                });
            }
            _ = sweep.tick() => {
                {
                    let mut h = lock(&shared.health);
                    // While the switch is down, the probe schedule does the checking.
                    if matches!(h.reach, Reachability::Down(_)) || h.sweeping {
                        continue;
                    }
                    h.sweeping = true;
                }
                let Ok(permit) = sessions.clone().acquire_owned().await else { return };
                let (switch, shared) = (switch.clone(), shared.clone());
                tokio::spawn(async move {
                    check(switch.as_ref(), &shared).await;
                    lock(&shared.health).sweeping = false;
                    drop(permit);
                });
            }
            _ = shared.changed.notified() => {}
        }
    }
}

/// Runs one batch: all writes in one `apply_batch` (split into rounds only if a port
/// appears twice), all reads in one `get_ports`. A session failure marks the switch
/// down (once for the batch) and the operations it hit are answered with the outage.
/// Refused while this replica may not touch devices (it lost, or never held, the
/// leader lease): [`crate::lease::may_touch_devices`].
fn not_leading() -> WorkerError {
    WorkerError::Device(DeviceError::Protocol {
        during: "opening a device session".into(),
        cause: Cause::msg("this replica does not hold the leader lease"),
    })
}

/// `f` within the batch bound, if there is one, counted as an open session.
async fn bounded<T>(
    shared: &Shared,
    f: impl std::future::Future<Output = Result<T, DeviceError>>,
) -> Result<T, DeviceError> {
    metrics::add(metrics::SESSIONS, &[shared.backend], 1.0);
    let result = within_bound(shared, f).await;
    metrics::add(metrics::SESSIONS, &[shared.backend], -1.0);
    result
}

async fn within_bound<T>(
    shared: &Shared,
    f: impl std::future::Future<Output = Result<T, DeviceError>>,
) -> Result<T, DeviceError> {
    match shared.batch_timeout {
        None => f.await,
        Some(limit) => tokio::time::timeout(limit, f).await.unwrap_or_else(|_| {
            Err(DeviceError::Protocol {
                during: "a batch".into(),
                cause: Cause::msg(format!(
                    "abandoned after {:.1} s, the bound leader election sets",
                    limit.as_secs_f64()
                )),
            })
        }),
    }
}

async fn run_batch(switch: &dyn Device, shared: &Shared, batch: Vec<Job>) {
    if !crate::lease::may_touch_devices() {
        for job in batch {
            match job {
                Job::Apply { reply, .. } => {
                    let _ = reply.send(Err(not_leading()));
                }
                Job::Read { reply, .. } => {
                    let _ = reply.send(Err(not_leading()));
                }
            }
        }
        return;
    }
    let as_probe = lock(&shared.health).probing;
    let outage: Mutex<Option<Outage>> = Mutex::new(None);
    let port_error = |e: DeviceError, key: Option<&PortKey>| {
        if !e.is_session_failure() {
            return WorkerError::Device(e);
        }
        shared.wait_for_switch(key);
        let mut recorded = lock(&outage);
        let o = recorded
            .get_or_insert_with(|| shared.fail(e, as_probe))
            .clone();
        WorkerError::SwitchDown(Box::new(o))
    };
    let mut writes = Vec::new();
    let mut reads = Vec::new();
    for job in batch {
        match job {
            Job::Apply { key, op, reply } => writes.push((key, op, reply)),
            Job::Read { key, port, reply } => reads.push((key, port, reply)),
        }
    }
    while !writes.is_empty() {
        let mut seen = std::collections::HashSet::new();
        let (round, rest): (Vec<_>, Vec<_>) = writes
            .into_iter()
            .partition(|(_, op, _)| seen.insert(op.port().clone()));
        writes = rest;
        let ops: Vec<PortOperation> = round.iter().map(|(_, op, _)| op.clone()).collect();
        let backend = shared.backend;
        metrics::observe(metrics::BATCH_SIZE, &[backend], ops.len() as f64);
        let started = std::time::Instant::now();
        let applied = bounded(shared, apply_batch_verified(switch, &ops)).await;
        metrics::observe(
            metrics::DEVICE_SECONDS,
            &[backend],
            started.elapsed().as_secs_f64(),
        );
        match &applied {
            Ok(results) => {
                for r in results {
                    let outcome = match &r.outcome {
                        Ok(PortChange::Changed) => "changed",
                        Ok(PortChange::Unchanged) => "unchanged",
                        Err(e) => e.category(),
                    };
                    metrics::inc(metrics::DEVICE_OPERATIONS, &[backend, outcome]);
                }
            }
            Err(e) => metrics::add(
                metrics::DEVICE_OPERATIONS,
                &[backend, e.category()],
                ops.len() as f64,
            ),
        }
        match applied {
            Ok(results) => {
                let mut by_port: HashMap<PortName, Result<PortChange, DeviceError>> =
                    results.into_iter().map(|r| (r.port, r.outcome)).collect();
                if !by_port
                    .values()
                    .any(|r| r.as_ref().is_err_and(DeviceError::is_session_failure))
                {
                    shared.succeed();
                }
                for (key, op, reply) in round {
                    let outcome = by_port.remove(op.port()).unwrap_or_else(|| {
                        Err(DeviceError::Protocol {
                            during: format!("configuring {}", op.port()),
                            cause: Cause::msg("the batch reported no result for this port"),
                        })
                    });
                    let _ = reply.send(outcome.map_err(|e| port_error(e, key.as_ref())));
                }
            }
            Err(e) => {
                // The session itself failed: nothing is known applied.
                for (key, _, reply) in round {
                    let _ = reply.send(Err(port_error(e.clone(), key.as_ref())));
                }
            }
        }
    }
    if !reads.is_empty() {
        let mut names: Vec<PortName> = reads.iter().map(|(_, p, _)| p.clone()).collect();
        names.sort();
        names.dedup();
        match bounded(shared, switch.get_ports(&names)).await {
            Ok(observed) => {
                let by_port: HashMap<PortName, Result<ObservedPort, DeviceError>> =
                    observed.into_iter().collect();
                if !by_port
                    .values()
                    .any(|r| r.as_ref().is_err_and(DeviceError::is_session_failure))
                {
                    shared.succeed();
                }
                for (key, port, reply) in reads {
                    let r = by_port.get(&port).cloned().unwrap_or_else(|| {
                        Err(DeviceError::UnknownPort {
                            port: port.to_string(),
                        })
                    });
                    let _ = reply.send(r.map_err(|e| port_error(e, key.as_ref())));
                }
            }
            Err(e) => {
                for (key, _, reply) in reads {
                    let _ = reply.send(Err(port_error(e.clone(), key.as_ref())));
                }
            }
        }
    }
    if as_probe {
        // A probe that ended without a verdict (a protocol error) must not block
        // the next one.
        lock(&shared.health).probing = false;
    }
}

/// The drift sweep and reachability check in one read: every tracked port (or one
/// probe port when none is tracked). Notifies ports whose drift verdict changed and
/// records whether the switch answered.
async fn check(switch: &dyn Device, shared: &Shared) {
    if !crate::lease::may_touch_devices() {
        lock(&shared.health).probing = false;
        return;
    }
    let tracked: Vec<(PortKey, DesiredPort)> = lock(&shared.tracking)
        .desired
        .iter()
        .map(|(k, d)| (k.clone(), d.clone()))
        .collect();
    let mut names: Vec<PortName> = tracked.iter().map(|(_, d)| d.port.clone()).collect();
    if names.is_empty() {
        names.extend(lock(&shared.health).probe_ports.first().cloned());
    }
    if names.is_empty() {
        // Nothing to read: reachability stays as it is.
        lock(&shared.health).probing = false;
        return;
    }
    names.sort();
    names.dedup();
    let observed = match bounded(shared, switch.get_ports(&names)).await {
        Ok(o) => o,
        Err(e) if e.is_session_failure() => {
            shared.fail(e, true);
            return;
        }
        Err(e) => {
            tracing::debug!(error = %e, "the drift sweep could not read the switch");
            lock(&shared.health).probing = false;
            return;
        }
    };
    if let Some(e) = observed
        .iter()
        .filter_map(|(_, r)| r.as_ref().err())
        .find(|e| e.is_session_failure())
    {
        shared.fail(e.clone(), true);
        return;
    }
    let observed: HashMap<PortName, ObservedPort> = observed
        .into_iter()
        .filter_map(|(p, r)| r.ok().map(|o| (p, o)))
        .collect();
    let mut changed = Vec::new();
    tracing::debug!(ports = names.len(), "drift sweep read the switch");
    {
        let mut t = lock(&shared.tracking);
        for (key, desired) in tracked {
            let Some(obs) = observed.get(&desired.port) else {
                continue;
            };
            let drifted = !diff(&desired, obs).is_empty();
            tracing::debug!(port = %desired.port, drifted, "drift verdict");
            let before = t.verdict.insert(key.clone(), drifted);
            if drifted && before != Some(true) {
                metrics::inc(metrics::DRIFT_FOUND, &[shared.backend]);
            }
            if before != Some(drifted) && (drifted || before == Some(true)) {
                t.pending.insert(key.clone(), drifted);
                changed.push(key);
            }
        }
    }
    shared.succeed();
    for key in changed {
        (shared.notify)(Notice::Port(key));
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

    fn key(n: &str) -> PortKey {
        PortKey {
            namespace: "ns".into(),
            name: n.into(),
        }
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
            backend: "fixture",
            batch_timeout: None,
            group_hold: Duration::from_secs(5),
            batch_window: Duration::from_millis(50),
            batch_quiet: Duration::from_millis(50),
            drift_interval: Duration::from_secs(3600),
            max_sessions: 1,
            backoff: Backoff {
                base: Duration::from_millis(400),
                cap: Duration::from_secs(2),
            },
        }
    }

    fn recorder() -> (Notifier, Arc<Mutex<Vec<Notice>>>) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = seen.clone();
        (Arc::new(move |n| s.lock().unwrap().push(n)), seen)
    }

    fn attempts(fixture: &FixtureSwitch) -> usize {
        fixture
            .operations()
            .iter()
            .filter(|o| matches!(o, LoggedOperation::Failed { .. }))
            .count()
    }

    fn batch_sizes(fixture: &FixtureSwitch) -> Vec<usize> {
        fixture
            .operations()
            .iter()
            .filter_map(|o| match o {
                LoggedOperation::Batch { size } => Some(*size),
                _ => None,
            })
            .collect()
    }

    #[tokio::test(start_paused = true)]
    async fn a_lone_change_goes_at_once_and_a_burst_is_gathered_up_to_the_window() {
        let names: Vec<PortName> = (1..=200).map(|i| p(&format!("Gi0/{i}"))).collect();
        let fixture = FixtureSwitch::new("tor", names.clone());
        let worker = Arc::new(SwitchWorker::spawn(
            Arc::new(fixture.clone()),
            WorkerConfig {
                batch_window: Duration::from_millis(1000),
                batch_quiet: Duration::from_millis(20),
                ..config()
            },
            Vec::new(),
            Arc::new(|_| {}),
        ));
        // Virtual time: a lone change (after a quiet spell) is sent at once.
        let t = tokio::time::Instant::now();
        worker
            .apply(None, PortOperation::Set(access("Gi0/1", 100)))
            .await
            .unwrap();
        assert_eq!(t.elapsed(), Duration::ZERO);
        // Right after it, a burst: changes 10 ms apart stay one batch, closed 20 ms
        // after the last; a stream longer than the window is cut at the window.
        let stream = |from: u16, n: u16| {
            let worker = worker.clone();
            tokio::spawn(async move {
                let mut waits = Vec::new();
                for i in from..from + n {
                    let w = worker.clone();
                    waits.push(tokio::spawn(async move {
                        w.apply(None, PortOperation::Set(access(&format!("Gi0/{i}"), 200)))
                            .await
                    }));
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                for w in waits {
                    w.await.unwrap().unwrap();
                }
            })
        };
        stream(2, 30).await.unwrap();
        assert_eq!(batch_sizes(&fixture), [1, 30]);
        stream(40, 150).await.unwrap();
        let sizes = batch_sizes(&fixture);
        assert_eq!(sizes.len(), 4, "{sizes:?}");
        assert_eq!(sizes[2] + sizes[3], 150);
        assert!((95..=105).contains(&sizes[2]), "{sizes:?}");
    }

    #[tokio::test]
    async fn operations_in_one_window_share_one_batch_and_one_session() {
        let names: Vec<PortName> = (1..=8).map(|i| p(&format!("Gi0/{i}"))).collect();
        let fixture = FixtureSwitch::new("tor", names.clone());
        fixture.set_latency(Duration::from_millis(5));
        let worker = SwitchWorker::spawn(
            Arc::new(fixture.clone()),
            config(),
            Vec::new(),
            Arc::new(|_| {}),
        );
        let applies = (1..=8).map(|i| {
            worker.apply(
                None,
                PortOperation::Set(access(&format!("Gi0/{i}"), 100 + i)),
            )
        });
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
        assert_eq!(worker.reachability(), Reachability::Reachable);
    }

    #[tokio::test]
    async fn a_sweep_reads_the_switch_once_and_reports_drift() {
        let fixture = FixtureSwitch::new("tor", [p("Gi0/1"), p("Gi0/2")]);
        let (notify, notified) = recorder();
        let mut cfg = config();
        cfg.drift_interval = Duration::from_millis(100);
        let worker = SwitchWorker::spawn(Arc::new(fixture.clone()), cfg, Vec::new(), notify);
        for (i, port) in ["Gi0/1", "Gi0/2"].iter().enumerate() {
            let d = access(port, 10);
            worker
                .apply(None, PortOperation::Set(d.clone()))
                .await
                .unwrap();
            worker.track(key(&format!("port-{i}")), Some(d));
        }
        fixture.clear_log();
        notified.lock().unwrap().clear();
        fixture.tamper(&p("Gi0/2"), |o| o.vlans = Some(VlanMode::Unconfigured));
        tokio::time::sleep(Duration::from_millis(350)).await;
        let ports: Vec<Notice> = notified
            .lock()
            .unwrap()
            .iter()
            .filter(|n| matches!(n, Notice::Port(_)))
            .cloned()
            .collect();
        assert_eq!(ports, [Notice::Port(key("port-1"))]);
        assert_eq!(worker.take_drift_notice(&key("port-1")), Some(true));
        // The verdict stays drifted, so no sweep posts the notice again: a port that
        // took it without checking puts it back, and its next reconcile finds it.
        assert_eq!(worker.take_drift_notice(&key("port-1")), None);
        worker.keep_drift_notice(key("port-1"));
        tokio::time::sleep(Duration::from_millis(250)).await;
        assert_eq!(worker.take_drift_notice(&key("port-1")), Some(true));
        // Each sweep read both ports in one get_ports call (two Get log entries per sweep).
        let gets = fixture
            .operations()
            .iter()
            .filter(|o| matches!(o, LoggedOperation::Get { .. }))
            .count();
        assert!(gets >= 2 && gets % 2 == 0, "{gets}");
    }

    #[tokio::test]
    async fn a_dead_switch_is_probed_once_per_backoff_step_for_all_its_ports() {
        let names: Vec<PortName> = (1..=48).map(|i| p(&format!("Gi0/{i}"))).collect();
        let fixture = FixtureSwitch::new("tor", names.clone());
        fixture.set_unreachable(true);
        let (notify, notified) = recorder();
        let worker = Arc::new(SwitchWorker::spawn(
            Arc::new(fixture.clone()),
            config(),
            vec![names[0].clone()],
            notify,
        ));
        // 48 ports ask, and keep asking every 50 ms for 2.5 s, as impatient
        // reconciles would.
        let started = std::time::Instant::now();
        let mut refused = 0;
        while started.elapsed() < Duration::from_millis(2500) {
            let asks = (1..=48).map(|i| {
                let w = worker.clone();
                async move {
                    w.apply(
                        Some(&key(&format!("p{i}"))),
                        PortOperation::Set(access(&format!("Gi0/{i}"), 10)),
                    )
                    .await
                }
            });
            for r in futures::future::join_all(asks).await {
                match r {
                    Err(WorkerError::SwitchDown(o)) => {
                        assert_eq!(o.error.category(), "DeviceUnreachable");
                        refused += 1;
                    }
                    other => panic!("expected SwitchDown, got {other:?}"),
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // Schedule 0.4 s doubling to 2 s: the first check, then about 0.4, 1.2, 2.8 s.
        let tries = attempts(&fixture);
        assert!(
            (2..=5).contains(&tries),
            "{tries} device attempts for 48 ports in 2.5 s"
        );
        assert!(refused > 48 * 10, "{refused}");
        let outage = worker.outage().expect("down");
        assert_eq!(outage.timing.failures as usize, tries);
        // Every waiting port and the switch hear about each failed probe.
        assert!(notified.lock().unwrap().contains(&Notice::Switch));
        assert!(notified.lock().unwrap().contains(&Notice::Port(key("p48"))));

        // The switch comes back: the next probe finds it, and every waiting port is
        // told at once.
        notified.lock().unwrap().clear();
        fixture.set_unreachable(false);
        tokio::time::sleep(Duration::from_millis(2200)).await;
        assert_eq!(worker.reachability(), Reachability::Reachable);
        let heard = notified.lock().unwrap().clone();
        assert!(heard.contains(&Notice::Switch), "{heard:?}");
        for i in 1..=48 {
            assert!(heard.contains(&Notice::Port(key(&format!("p{i}")))), "p{i}");
        }
        worker
            .apply(None, PortOperation::Set(access("Gi0/1", 10)))
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn a_switch_that_goes_away_is_found_by_the_sweep_and_its_ports_rechecked_when_back() {
        let fixture = FixtureSwitch::new("tor", [p("Gi0/1"), p("Gi0/2")]);
        let (notify, notified) = recorder();
        let mut cfg = config();
        cfg.drift_interval = Duration::from_millis(200);
        let worker = SwitchWorker::spawn(Arc::new(fixture.clone()), cfg, Vec::new(), notify);
        let d = access("Gi0/1", 10);
        worker
            .apply(Some(&key("a")), PortOperation::Set(d.clone()))
            .await
            .unwrap();
        worker.track(key("a"), Some(d));
        fixture.set_unreachable(true);
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(worker.outage().is_some(), "{:?}", worker.reachability());
        assert!(notified.lock().unwrap().contains(&Notice::Port(key("a"))));
        // It comes back empty: the port gets a drift notice.
        fixture.set_unreachable(false);
        fixture.tamper(&p("Gi0/1"), |o| o.vlans = Some(VlanMode::Unconfigured));
        tokio::time::sleep(Duration::from_millis(1200)).await;
        assert_eq!(worker.reachability(), Reachability::Reachable);
        assert_eq!(worker.take_drift_notice(&key("a")), Some(true));
    }

    fn member(port: &str, group: u16, members: &[&str]) -> DesiredPort {
        let mut d = access(port, 300);
        d.lag = Some(patchbay_providers::LagMembership {
            group: patchbay_providers::values::LagGroup::new(group.into()).unwrap(),
            mode: patchbay_providers::LagMode::Active,
        });
        d.lag_members = members.iter().map(|m| p(m)).collect();
        d
    }

    #[tokio::test(start_paused = true)]
    async fn a_group_goes_in_one_batch_once_every_member_is_there_or_fails_naming_the_missing() {
        let fixture = FixtureSwitch::new("tor", [p("Gi0/1"), p("Gi0/2"), p("Gi0/3")]);
        let worker = Arc::new(SwitchWorker::spawn(
            Arc::new(fixture.clone()),
            config(),
            Vec::new(),
            Arc::new(|_| {}),
        ));
        let both = ["Gi0/1", "Gi0/2"];
        // The first member waits for the second, which comes 2 s later: one batch.
        let first = {
            let worker = worker.clone();
            tokio::spawn(async move {
                worker
                    .apply(None, PortOperation::Set(member("Gi0/1", 7, &both)))
                    .await
            })
        };
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert!(
            batch_sizes(&fixture).is_empty(),
            "nothing sent for half a group"
        );
        worker
            .apply(None, PortOperation::Set(member("Gi0/2", 7, &both)))
            .await
            .unwrap();
        first.await.unwrap().unwrap();
        assert_eq!(batch_sizes(&fixture), vec![2]);

        // A member already Active with the same settings counts: a change of one
        // member's description goes at once.
        worker.track(key("b"), Some(member("Gi0/2", 7, &both)));
        let mut described = member("Gi0/1", 7, &both);
        described.description = Some(patchbay_providers::values::Description::parse("x").unwrap());
        worker
            .apply(None, PortOperation::Set(described))
            .await
            .unwrap();
        assert_eq!(batch_sizes(&fixture), vec![2, 1]);

        // A tracked member with other settings does not count, and a member that never
        // comes fails the group after the hold, touching nothing.
        let mut other_vlan = member("Gi0/1", 7, &["Gi0/1", "Gi0/3"]);
        other_vlan.vlans = VlanMode::Access {
            vlan: VlanId::new(301).unwrap(),
        };
        let t = tokio::time::Instant::now();
        let err = worker
            .apply(None, PortOperation::Set(other_vlan))
            .await
            .unwrap_err();
        assert_eq!(t.elapsed(), Duration::from_secs(5));
        match &err {
            WorkerError::GroupIncomplete { group, missing, .. } => {
                assert_eq!((*group, missing.clone()), (7, vec!["Gi0/3".to_owned()]));
            }
            other => panic!("expected GroupIncomplete, got {other:?}"),
        }
        assert!(
            err.to_string().contains("group 7 waited 5 s for Gi0/3"),
            "{err}"
        );
        assert_eq!(batch_sizes(&fixture), vec![2, 1], "nothing more was sent");
    }
}

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
//! **One writer.** The operator runs one worker per device (per ProviderSwitch, see
//! `controllers::context`). Every session — batch, drift sweep, probe — holds one of
//! the worker's `max_sessions` permits (1 by default) for its whole length. A new
//! device for the same switch ([`SwitchWorker::replace_device`]: the ProviderSwitch
//! or its Secret changed) takes over only once every permit of the old one is back,
//! so its first session never overlaps the old one's last.
//!
//! **Drift notices.** A port settles what it established itself
//! ([`SwitchWorker::settle`]: in sync after applying, drifted after reading a drift
//! it leaves); a sweep whose verdict differs posts a notice
//! ([`SwitchWorker::drift_notice`]) and wakes the port at every sweep until the port
//! settles it. So a repaired port is repaired again whenever a later sweep finds it
//! drifted, and a drift reported and left (ReportOnly) wakes nothing until the
//! device changes again.
//!
//! **Link aggregation.** A change that makes a port a member of group G (its desired
//! state has `lag`) is held until every member named in the held changes'
//! `lag_members` either has a change waiting too or is tracked (Active) with the
//! same group settings; a group new to the device (no tracked member in it) also
//! waits [`WorkerConfig::group_gather`] after its latest change, for members whose
//! reconciles named only themselves. Then the group's changes go in one batch, where
//! the backend configures the aggregate before its members. Held groups are looked
//! at again whenever tracking changes and when a gather or hold ends
//! (`group_verdict`, pure). A group still incomplete after
//! [`WorkerConfig::group_hold`] fails its held changes with
//! [`WorkerError::GroupIncomplete`] naming the missing members, touching nothing.
//! Leaving a group is not held: each member leaves when its own change comes, and
//! the backend removes the aggregate with its last member.
//!
//! Port reconciles talk to it through [`SwitchWorker`]. Reads requested within the
//! same window are served by one `get_ports` call.
//!
//! **Hand-offs.** A port's change does not hold its reconcile while the batch runs
//! on the device ([`SwitchWorker::hand_off`]): the reconcile hands the operation
//! over and returns; when the batch answers, the result waits here under the port's
//! key and the port is woken ([`Notice::Port`]); its next reconcile takes the result
//! (the same operation handed off again finds it). So the controller's reconcile
//! slots are never spent waiting for a device, and every port of a fleet reaches its
//! worker within the batch window — batches as large as the fleet's changes allow.
//! A result belongs to the operation that asked for it: a port whose desired state
//! changed meanwhile hands off the new operation (sent after the old one: one
//! writer, in order) and the old result is dropped; a port entering a new state
//! drops whatever it handed off before ([`SwitchWorker::forget_hand_off`]). Results
//! live in memory only: an operator that stops between hand-off and result leaves
//! the port in Configuring or Cleaning, which the next one applies again.
//! A failed result sent before the switch last came back (its device replaced, or
//! answering again after being down) is not handed to the port: it tells of a
//! switch that is no longer there, so the operation is sent again instead. Without
//! this, a pin corrected while a port was refused waited a whole backoff step: the
//! port took the old refusal and mirrored its probe time.
//! A graceful stop closes the hand-offs ([`SwitchWorker::close_hand_offs`]: nothing
//! new is sent), waits for those in flight to be answered
//! ([`SwitchWorker::hand_offs_settled`]) and, bounded, for their ports to take the
//! answers ([`SwitchWorker::hand_offs_taken`]).
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
//!
//! **The batch bound.** With leader election every session (batch, sweep, probe) is
//! bounded by [`WorkerConfig::batch_timeout`]; one that runs into it is abandoned,
//! and is a session failure (the switch goes down) only when the device sent
//! nothing since the session began — a silent device — and a failure of its ports
//! alone (`DeviceSlow`) when it was answering or its backend cannot tell
//! ([`lease::overrun`] decides, from [`Device::heard`]).

use parking_lot::Mutex;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use jiff::Timestamp;
use patchbay_providers::values::PortName;
use patchbay_providers::verify::apply_batch_verified;
use patchbay_providers::{
    Cause, DesiredPort, Device, DeviceError, ObservedPort, PortChange, PortOperation, diff,
};
use tokio::sync::{Notify, Semaphore, mpsc, oneshot};

use crate::api::CabledPortKind;
use crate::decide::failure::WorkerError;
use crate::decide::lease;
use crate::decide::lobby::{GroupVerdict, group_verdict, missing};
use crate::decide::reachability::{Admission, Link, Outage, Reachability};
use crate::decide::slack;
use crate::decide::state_machine::Backoff;
use crate::metrics::{BackendLabel, OperationLabels};

/// Identifies a port object (kind, namespace, name): one worker serves a device's
/// SwitchPorts and SmartNicPorts alike, and its notices go to the right controller.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PortKey {
    /// Which kind of port object.
    pub kind: CabledPortKind,
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
    /// The metrics and the device gate.
    pub probes: crate::probes::Probes,
    /// The backend's name, the `backend` label of the metrics.
    pub backend: &'static str,
    /// The longest a batch may take (with leader election: `leaseDuration −
    /// renewDeadline`); a batch that takes longer is abandoned and its ports fail.
    pub batch_timeout: Option<Duration>,
    /// The longest a link-aggregation member's change waits for its group's other
    /// members (see "Link aggregation" above); then it fails naming the missing
    /// ones.
    pub group_hold: Duration,
    /// How long a group that is new to the device waits after its latest member's
    /// change for more members (see "Link aggregation" above).
    pub group_gather: Duration,
}

/// [`WorkerConfig::group_hold`] in the operator.
pub const GROUP_HOLD: Duration = Duration::from_secs(30);

/// [`WorkerConfig::group_gather`] in the operator: members linked together reach
/// the worker well within it (their reconciles follow their watch events).
pub const GROUP_GATHER: Duration = Duration::from_secs(1);

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

/// The drift bookkeeping of the tracked (Active) ports. See [`SwitchWorker::settle`]
/// for how a port and the sweeps share it.
#[derive(Default)]
struct Tracking {
    /// Active ports and what they should be.
    desired: BTreeMap<PortKey, Tracked>,
    /// The desired states the tracked ports share (see [`Tracked`]).
    shapes: Vec<Arc<DesiredPort>>,
    /// The ports that last established their device port as drifted themselves
    /// (read it drifted and left it so, ReportOnly); a port that applied it or read
    /// it in sync is not here. Only the drifted are kept: a port in sync holds no
    /// entry (an entry each was ~0.1 KB of each of 10,000 idle Active ports,
    /// heaptrack).
    known: HashSet<PortKey>,
    /// Sweep verdicts that differ from `known` and that the port has not confirmed
    /// yet: its drift check is due.
    pending: HashMap<PortKey, bool>,
    /// When each port's drift was repaired lately (see [`REPAIR_WINDOW`]).
    repairs: HashMap<PortKey, VecDeque<tokio::time::Instant>>,
}

/// Takes `key` out of the drifted ports, giving back the slack ([`slack`]).
fn forget_drifted(known: &mut HashSet<PortKey>, key: &PortKey) {
    if known.remove(key) {
        slack::release_set(known);
    }
}

/// How far back [`SwitchWorker::record_repair`] counts a port's repairs.
pub const REPAIR_WINDOW: Duration = Duration::from_secs(600);

impl Tracking {
    /// Takes a sweep's verdict for `key`: `true` when the port must be told (the
    /// verdict differs from what the port established, whether or not it was told
    /// already — a port that could not act yet is told again at every sweep).
    fn sweep_verdict(&mut self, key: &PortKey, drifted: bool) -> bool {
        if self.known.contains(key) == drifted {
            slack::remove(&mut self.pending, key);
            return false;
        }
        self.pending.insert(key.clone(), drifted);
        true
    }

    /// Tracks `key` as `desired`; whether its desired state changed.
    fn put(&mut self, key: PortKey, desired: DesiredPort) -> bool {
        if self.desired.get(&key).is_some_and(|t| t.is(&desired)) {
            return false;
        }
        let port = desired.port.clone();
        let shape = match self.shapes.iter().find(|s| alike(s, &desired)) {
            Some(s) => s.clone(),
            None => {
                let s = Arc::new(desired);
                self.shapes.push(s.clone());
                s
            }
        };
        let old = self.desired.insert(key, Tracked { port, shape });
        self.release(old);
        true
    }

    /// Drops a shape no tracked port holds any more.
    fn release(&mut self, old: Option<Tracked>) {
        if let Some(old) = old
            && Arc::strong_count(&old.shape) == 2
        {
            self.shapes.retain(|s| !Arc::ptr_eq(s, &old.shape));
        }
    }

    fn forget(&mut self, key: &PortKey) {
        let old = self.desired.remove(key);
        self.release(old);
        forget_drifted(&mut self.known, key);
        slack::remove(&mut self.pending, key);
        slack::remove(&mut self.repairs, key);
    }
}

/// A tracked port's desired state. Ports that should look alike (one configuration
/// on one switch) share one copy of it, the shape, which differs from each port's
/// own only in `port` (the shape's is whichever port had it first, and is ignored).
/// At 10,000 Active ports a copy per port was ~0.3 KB of each (heaptrack of an idle
/// operator).
struct Tracked {
    port: PortName,
    shape: Arc<DesiredPort>,
}

impl Tracked {
    /// The port's desired state.
    fn desired(&self) -> DesiredPort {
        DesiredPort {
            port: self.port.clone(),
            ..(*self.shape).clone()
        }
    }

    /// Whether the port's desired state is `d`.
    fn is(&self, d: &DesiredPort) -> bool {
        self.port == d.port && alike(&self.shape, d)
    }
}

/// Whether `a` and `b` are the same desired state but for the device port.
fn alike(a: &DesiredPort, b: &DesiredPort) -> bool {
    // Every field named, so that a new one is compared too.
    let DesiredPort {
        port: _,
        admin,
        vlans,
        vlan_names,
        mtu,
        description,
        acl,
        lag,
        lag_members,
        host_mac,
    } = a;
    *admin == b.admin
        && *vlans == b.vlans
        && *mtu == b.mtu
        && *lag == b.lag
        && *host_mac == b.host_mac
        && *description == b.description
        && *vlan_names == b.vlan_names
        && *acl == b.acl
        && *lag_members == b.lag_members
}

#[derive(Default)]
struct HealthState {
    /// Reachability and the probe (the pure transitions).
    link: Link,
    /// A drift sweep is running.
    sweeping: bool,
    /// Ports that were refused (or failed) because the switch is down.
    waiting: BTreeSet<PortKey>,
    /// The device ports to read when no port is tracked.
    probe_ports: Vec<PortName>,
}

/// Operations handed off by ports (see "Hand-offs" above), by port.
#[derive(Default)]
struct HandOffs {
    by_port: HashMap<PortKey, HandedOff>,
    /// Numbers hand-offs, so a late answer to a replaced one is recognised.
    next: u64,
    /// Hand-offs not answered yet.
    in_flight: usize,
    /// The operator is stopping: nothing new is sent (see
    /// [`SwitchWorker::close_hand_offs`]).
    closed: bool,
}

struct HandedOff {
    op: PortOperation,
    id: u64,
    /// The switch's [`Shared::comebacks`] when the operation was sent.
    sent_in: u64,
    /// The worker's answer, once it came.
    result: Option<Result<PortChange, WorkerError>>,
}

/// Where a handed-off operation is.
#[derive(Debug)]
pub enum HandOff {
    /// Handed to the worker, not answered yet: the answer wakes the port.
    InFlight,
    /// The worker's answer (taken: the next hand-off of the operation sends it
    /// again).
    Done(Result<PortChange, WorkerError>),
}

/// What the worker's task and its spawned batches share.
struct Shared {
    tracking: Mutex<Tracking>,
    hand_offs: Mutex<HandOffs>,
    /// Signalled whenever the last in-flight hand-off is answered.
    settled: Notify,
    health: Mutex<HealthState>,
    /// How many times the switch came back: its device replaced (counted when
    /// asked, and again when done), or answering again after being down or unknown. A failed hand-off answer sent before the
    /// last one is stale.
    comebacks: AtomicU64,
    /// Wakes the worker loop when the probe schedule changed.
    changed: Notify,
    notify: Notifier,
    backoff: Backoff,
    /// The `backend` label of the metrics (the current device's backend).
    backend: Mutex<&'static str>,
    /// See [`WorkerConfig::batch_timeout`].
    batch_timeout: Option<Duration>,
    /// The metrics and the device gate.
    probes: crate::probes::Probes,
}

impl Shared {
    fn backend(&self) -> &'static str {
        *self.backend.lock()
    }

    /// A new device: whether it answers is not known yet. The ports waiting for the
    /// old one and the switch's status are told (the first check runs at once).
    fn restart(&self) {
        let mut h = self.health.lock();
        h.link.restart();
        self.comebacks.fetch_add(1, Ordering::SeqCst);
        let waiting: Vec<PortKey> = std::mem::take(&mut h.waiting).into_iter().collect();
        drop(h);
        (self.notify)(Notice::Switch);
        for key in waiting {
            (self.notify)(Notice::Port(key));
        }
    }

    fn admit(&self) -> Admission {
        self.health.lock().link.admit(Timestamp::now())
    }

    /// How long until the next probe, when the switch is down and none is running.
    fn probe_wait(&self) -> Option<Duration> {
        let next = self.health.lock().link.next_probe()?;
        Some(Duration::try_from(next.duration_since(Timestamp::now())).unwrap_or(Duration::ZERO))
    }

    fn tracked_keys(&self) -> Vec<PortKey> {
        self.tracking.lock().desired.keys().cloned().collect()
    }

    /// Records a session failure ([`Link::fail`]) and tells whom it concerns.
    fn fail(&self, error: DeviceError, as_probe: bool) -> Outage {
        let mut h = self.health.lock();
        let failed = h
            .link
            .fail(error, as_probe, Timestamp::now(), &self.backoff);
        if !failed.counted {
            return failed.outage;
        }
        let mut wake: Vec<PortKey> = h.waiting.iter().cloned().collect();
        drop(h);
        let outage = failed.outage;
        if failed.went_down {
            tracing::warn!(error = %outage.error, "the switch does not answer; probing it again after the backoff");
            wake.extend(self.tracked_keys());
        } else {
            tracing::debug!(failures = outage.timing.failures, error = %outage.error, "the switch still does not answer");
        }
        self.changed.notify_one();
        (self.notify)(Notice::Switch);
        for key in dedup(wake) {
            (self.notify)(Notice::Port(key));
        }
        outage
    }

    /// Records a session that worked ([`Link::succeed`]) and tells whom it concerns.
    fn succeed(&self) {
        let mut h = self.health.lock();
        let was = h.link.succeed();
        if was == Reachability::Reachable {
            return;
        }
        self.comebacks.fetch_add(1, Ordering::SeqCst);
        let waiting: Vec<PortKey> = std::mem::take(&mut h.waiting).into_iter().collect();
        drop(h);
        let tracked = {
            let mut t = self.tracking.lock();
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

    /// The worker answered hand-off `id` of port `key`: keep the result for the
    /// port and wake it, unless the port has handed off something else since.
    fn answer(&self, key: &PortKey, id: u64, result: Result<PortChange, WorkerError>) {
        let mut h = self.hand_offs.lock();
        let Some(entry) = h.by_port.get_mut(key).filter(|e| e.id == id) else {
            return;
        };
        entry.result = Some(result);
        h.in_flight -= 1;
        let settled = h.in_flight == 0;
        drop(h);
        if settled {
            self.settled.notify_waiters();
        }
        (self.notify)(Notice::Port(key.clone()));
    }

    fn wait_for_switch(&self, key: Option<&PortKey>) {
        if let Some(k) = key {
            self.health.lock().waiting.insert(k.clone());
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
    /// Boxed: the channel allocates its slots 32 at a time and keeps the blocks it
    /// grew to, and a `Job` carries a desired state inline (~300 bytes), so each
    /// worker held ~8 KB of slots (heaptrack of an idle operator, 200 workers).
    jobs: mpsc::UnboundedSender<Box<Job>>,
    replace: mpsc::UnboundedSender<Replacement>,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for SwitchWorker {
    fn drop(&mut self) {
        self.task.abort();
    }
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
            hand_offs: Mutex::new(HandOffs::default()),
            settled: Notify::new(),
            health: Mutex::new(HealthState {
                probe_ports,
                ..Default::default()
            }),
            comebacks: AtomicU64::new(0),
            changed: Notify::new(),
            notify,
            backoff: config.backoff,
            backend: Mutex::new(config.backend),
            batch_timeout: config.batch_timeout,
            probes: config.probes.clone(),
        });
        let (replace, replacements) = mpsc::unbounded_channel();
        let task = tokio::spawn(run(switch, config, rx, replacements, shared.clone()));
        Self {
            jobs,
            replace,
            shared,
            task,
        }
    }

    /// Drives `device` from now on (its ProviderSwitch or credentials changed),
    /// with at most `max_sessions` sessions: batches and sweeps running on the old
    /// device finish first, and none of the new one opens before they have. Jobs
    /// and tracked ports carry over; reachability is found afresh at once.
    pub fn replace_device(
        &self,
        device: Arc<dyn Device>,
        max_sessions: usize,
        backend: &'static str,
    ) {
        // Counted now, not when the worker takes it: an operation handed off
        // right after this call must not be answered from the old device's errors.
        self.shared.comebacks.fetch_add(1, Ordering::SeqCst);
        let _ = self.replace.send(Replacement {
            device,
            max_sessions,
            backend,
        });
    }

    /// Hands a job to the worker and waits for its answer.
    async fn ask<T>(
        &self,
        job: impl FnOnce(oneshot::Sender<Result<T, WorkerError>>) -> Job,
    ) -> Result<T, WorkerError> {
        let (reply, rx) = oneshot::channel();
        self.jobs
            .send(Box::new(job(reply)))
            .map_err(|_| WorkerError::WorkerStopped)?;
        rx.await.map_err(|_| WorkerError::WorkerStopped)?
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

    /// Hands `op` for port `key` to the worker without waiting for the device (see
    /// "Hand-offs" above). The first call sends it and answers
    /// [`HandOff::InFlight`]; the worker's answer wakes the port, and the call with
    /// the same operation then answers [`HandOff::Done`] with it. A different
    /// operation replaces the one in flight (which still runs first; its answer is
    /// dropped).
    pub fn hand_off(&self, key: &PortKey, op: PortOperation) -> HandOff {
        let mut h = self.shared.hand_offs.lock();
        let comebacks = self.shared.comebacks.load(Ordering::SeqCst);
        if let Some(entry) = h.by_port.get(key)
            && entry.op == op
        {
            match &entry.result {
                None => return HandOff::InFlight,
                // Stale: sent again below.
                Some(Err(_)) if entry.sent_in != comebacks => {}
                Some(_) => {
                    let result = slack::remove(&mut h.by_port, key).and_then(|e| e.result);
                    if h.by_port.is_empty() {
                        self.shared.settled.notify_waiters();
                    }
                    return HandOff::Done(
                        result.unwrap_or_else(|| Err(WorkerError::WorkerStopped)),
                    );
                }
            }
        }
        if h.closed {
            // Stopping: nothing new reaches the device; the port stays in the state
            // it wrote before acting, for the next operator.
            return HandOff::InFlight;
        }
        let id = h.next;
        h.next += 1;
        if h.by_port.get(key).is_none_or(|e| e.result.is_some()) {
            h.in_flight += 1;
        }
        h.by_port.insert(
            key.clone(),
            HandedOff {
                op: op.clone(),
                id,
                sent_in: comebacks,
                result: None,
            },
        );
        drop(h);
        let (reply, answer) = oneshot::channel();
        let job = Job::Apply {
            key: Some(key.clone()),
            op,
            reply,
        };
        if self.jobs.send(Box::new(job)).is_err() {
            self.shared.answer(key, id, Err(WorkerError::WorkerStopped));
            return HandOff::InFlight;
        }
        let shared = self.shared.clone();
        let key = key.clone();
        tokio::spawn(async move {
            let result = answer
                .await
                .unwrap_or_else(|_| Err(WorkerError::WorkerStopped));
            shared.answer(&key, id, result);
        });
        HandOff::InFlight
    }

    /// Drops what port `key` handed off (it entered a new state, or is gone): an
    /// answer still to come is not kept.
    pub fn forget_hand_off(&self, key: &PortKey) {
        let mut h = self.shared.hand_offs.lock();
        if let Some(entry) = slack::remove(&mut h.by_port, key)
            && entry.result.is_none()
        {
            h.in_flight -= 1;
        }
        if h.in_flight == 0 || h.by_port.is_empty() {
            self.shared.settled.notify_waiters();
        }
    }

    /// The operator is stopping: operations not handed off yet are not sent (the
    /// ports stay in the state they wrote before acting, which the next operator
    /// applies); those in flight finish and can still be taken.
    pub fn close_hand_offs(&self) {
        self.shared.hand_offs.lock().closed = true;
    }

    /// Waits until every answer has been taken by its port (or forgotten).
    pub async fn hand_offs_taken(&self) {
        loop {
            let settled = self.shared.settled.notified();
            if self.shared.hand_offs.lock().by_port.is_empty() {
                return;
            }
            settled.await;
        }
    }

    /// Waits until every hand-off of this worker has been answered (or forgotten).
    pub async fn hand_offs_settled(&self) {
        loop {
            let settled = self.shared.settled.notified();
            if self.shared.hand_offs.lock().in_flight == 0 {
                return;
            }
            settled.await;
        }
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
        self.shared.health.lock().link.reach.clone()
    }

    /// The outage, while the switch does not answer.
    pub fn outage(&self) -> Option<Outage> {
        match self.reachability() {
            Reachability::Down(o) => Some(o),
            _ => None,
        }
    }

    /// The device ports read to check reachability while no port is tracked.
    pub fn set_probe_ports(&self, ports: &[PortName]) {
        let mut health = self.shared.health.lock();
        if health.probe_ports != ports {
            health.probe_ports = ports.to_vec();
        }
    }

    /// Tracks an Active port for drift sweeps (`None` stops tracking it). A new
    /// desired state starts its drift bookkeeping afresh.
    pub fn track(&self, key: PortKey, desired: Option<DesiredPort>) {
        let mut t = self.shared.tracking.lock();
        match desired {
            Some(d) => {
                if t.put(key.clone(), d) {
                    forget_drifted(&mut t.known, &key);
                    slack::remove(&mut t.pending, &key);
                }
            }
            None => t.forget(&key),
        }
        drop(t);
        // A held link-aggregation group may be complete now.
        self.shared.changed.notify_one();
    }

    /// The port itself established whether its device port differs from its desired
    /// state: `false` after it applied the port (or read it in sync), `true` after it
    /// read it drifted and left it so. Its pending drift notice is answered.
    ///
    /// A sweep notifies the port whenever its verdict differs from this — so a port
    /// that was repaired is repaired again at the next sweep that finds it drifted,
    /// however often something undoes it, and a drift the port reported (and left)
    /// is not reported again until the device changes back.
    pub fn settle(&self, key: &PortKey, drifted: bool) {
        let mut t = self.shared.tracking.lock();
        if drifted {
            t.known.insert(key.clone());
        } else {
            forget_drifted(&mut t.known, key);
        }
        slack::remove(&mut t.pending, key);
    }

    /// Whether the port last established its device port as drifted (and has not
    /// applied it since): an apply now repairs a drift.
    pub fn known_drifted(&self, key: &PortKey) -> bool {
        self.shared.tracking.lock().known.contains(key)
    }

    /// Whether a drift check of this port is due: a sweep found its device port
    /// other than the port last established, or the switch answers again after an
    /// outage. It stays due until the port settles it ([`SwitchWorker::settle`]).
    pub fn drift_notice(&self, key: &PortKey) -> Option<bool> {
        self.shared.tracking.lock().pending.get(key).copied()
    }

    /// Records that the port's drift was repaired now; returns how many times it was
    /// within the last [`REPAIR_WINDOW`] (this one included).
    pub fn record_repair(&self, key: &PortKey) -> usize {
        let now = tokio::time::Instant::now();
        let mut t = self.shared.tracking.lock();
        let times = t.repairs.entry(key.clone()).or_default();
        times.push_back(now);
        while times
            .front()
            .is_some_and(|at| now.duration_since(*at) > REPAIR_WINDOW)
        {
            times.pop_front();
        }
        times.len()
    }
}

/// Link-aggregation members' changes held until their group can go whole.
#[derive(Default)]
struct Lobby {
    groups: BTreeMap<u16, Held>,
}

struct Held {
    /// When the group's first held change arrived.
    since: tokio::time::Instant,
    /// When its latest held change arrived.
    last: tokio::time::Instant,
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
    /// Takes a batch: holds every job that joins a group, returns the others.
    fn admit(&mut self, batch: Vec<Job>) -> Vec<Job> {
        let now = tokio::time::Instant::now();
        let mut runnable = Vec::new();
        for job in batch {
            match joining_group(&job) {
                Some(g) => {
                    let held = self.groups.entry(g).or_insert_with(|| Held {
                        since: now,
                        last: now,
                        jobs: Vec::new(),
                    });
                    held.last = now;
                    held.jobs.push(job);
                }
                None => runnable.push(job),
            }
        }
        runnable
    }

    /// Releases the groups that may go now (their jobs, to run as one batch) and
    /// fails those held too long, naming their missing members.
    fn release(&mut self, config: &WorkerConfig, shared: &Shared) -> Vec<Job> {
        if self.groups.is_empty() {
            return Vec::new();
        }
        let now = tokio::time::Instant::now();
        let tracked: Vec<DesiredPort> = shared
            .tracking
            .lock()
            .desired
            .values()
            .map(Tracked::desired)
            .collect();
        let mut runnable = Vec::new();
        let groups: Vec<u16> = self.groups.keys().copied().collect();
        for g in groups {
            let Some(held) = self.groups.get(&g) else {
                continue;
            };
            let established = tracked
                .iter()
                .any(|d| d.lag.map(|l| l.group.get()) == Some(g));
            let verdict = group_verdict(
                &missing(&held_targets(&held.jobs), &tracked),
                established,
                held.since,
                held.last,
                now,
                config.group_gather,
                config.group_hold,
            );
            match verdict {
                GroupVerdict::Hold => {}
                GroupVerdict::Go => {
                    if let Some(held) = self.groups.remove(&g) {
                        runnable.extend(held.jobs);
                    }
                }
                GroupVerdict::GiveUp(missing) => {
                    let Some(held) = self.groups.remove(&g) else {
                        continue;
                    };
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
        runnable
    }

    /// When a held group's verdict may change by time alone: the end of its gather
    /// or of its hold.
    fn next_deadline(&self, config: &WorkerConfig) -> Option<tokio::time::Instant> {
        let now = tokio::time::Instant::now();
        self.groups
            .values()
            .flat_map(|h| [h.last + config.group_gather, h.since + config.group_hold])
            .filter(|t| *t > now)
            .min()
    }
}

/// The desired states the held `jobs` set, in arrival order.
fn held_targets(jobs: &[Job]) -> Vec<DesiredPort> {
    jobs.iter()
        .filter_map(|j| match j {
            Job::Apply {
                op: PortOperation::Set(d),
                ..
            } => Some(d.clone()),
            _ => None,
        })
        .collect()
}

/// A new device for the worker (its ProviderSwitch or credentials changed).
struct Replacement {
    device: Arc<dyn Device>,
    max_sessions: usize,
    backend: &'static str,
}

/// The device the worker drives now and the sessions it may open to it.
struct Driver {
    device: Arc<dyn Device>,
    sessions: Arc<Semaphore>,
    max: u32,
}

impl Driver {
    fn new(device: Arc<dyn Device>, max_sessions: usize) -> Self {
        let max = max_sessions.clamp(1, Semaphore::MAX_PERMITS) as u32;
        Self {
            device,
            sessions: Arc::new(Semaphore::new(max as usize)),
            max,
        }
    }

    /// Waits for every session of this driver to end (none opens afterwards).
    async fn drain(&self) {
        let _ = self.sessions.acquire_many(self.max).await;
    }
}

async fn run(
    device: Arc<dyn Device>,
    config: WorkerConfig,
    mut rx: mpsc::UnboundedReceiver<Box<Job>>,
    mut replacements: mpsc::UnboundedReceiver<Replacement>,
    shared: Arc<Shared>,
) {
    let mut driver = Driver::new(device, config.max_sessions);
    // The first tick is immediate: the first reachability check.
    let mut sweep = tokio::time::interval(config.drift_interval);
    sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_arrival: Option<tokio::time::Instant> = None;
    let mut lobby = Lobby::default();
    let mut gate = shared.probes.devices.subscribe();
    loop {
        let probe_in = shared.probe_wait();
        let group_due = lobby.next_deadline(&config);
        tokio::select! {
            biased;
            replacement = replacements.recv() => {
                let Some(r) = replacement else { return };
                // One writer: every session of the old device ends (a kept one
                // too) before the first one of the new opens.
                driver.drain().await;
                driver.device.close_idle().await;
                driver = Driver::new(r.device, r.max_sessions);
                *shared.backend.lock() = r.backend;
                shared.restart();
                sweep.reset_immediately();
            }
            Ok(()) = gate.changed() => {
                // The lease is lost: a session kept for the next batch ends now.
                if !*gate.borrow_and_update() {
                    driver.device.close_idle().await;
                }
            }
            job = rx.recv() => {
                let Some(first) = job else { return };
                let mut batch = vec![*first];
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
                                batch.push(*job);
                            }
                            _ => break,
                        }
                    }
                }
                let mut batch = lobby.admit(batch);
                batch.extend(lobby.release(&config, &shared));
                if !dispatch(&driver, &shared, batch, &mut rx, &mut lobby, &mut last_arrival).await {
                    return;
                }
            }
            _ = tokio::time::sleep_until(group_due.unwrap_or_else(tokio::time::Instant::now)), if group_due.is_some() => {
                let batch = lobby.release(&config, &shared);
                if !dispatch(&driver, &shared, batch, &mut rx, &mut lobby, &mut last_arrival).await {
                    return;
                }
            }
            _ = tokio::time::sleep(probe_in.unwrap_or_default()), if probe_in.is_some() => {
                shared.health.lock().link.probing = true;
                let Ok(permit) = driver.sessions.clone().acquire_owned().await else { return };
                let (device, shared) = (driver.device.clone(), shared.clone());
                tokio::spawn(async move {
                    check(device.as_ref(), &shared).await;
                    close_idle_if_not_leading(device.as_ref(), &shared).await;
                    drop(permit);
                });
            }
            _ = sweep.tick() => {
                {
                    let mut h = shared.health.lock();
                    // While the switch is down, the probe schedule does the checking.
                    if matches!(h.link.reach, Reachability::Down(_)) || h.sweeping {
                        continue;
                    }
                    h.sweeping = true;
                }
                let Ok(permit) = driver.sessions.clone().acquire_owned().await else { return };
                let (device, shared) = (driver.device.clone(), shared.clone());
                tokio::spawn(async move {
                    check(device.as_ref(), &shared).await;
                    close_idle_if_not_leading(device.as_ref(), &shared).await;
                    shared.health.lock().sweeping = false;
                    drop(permit);
                });
            }
            _ = shared.changed.notified() => {
                // Tracking or the probe schedule changed: a held group may go.
                let batch = lobby.release(&config, &shared);
                if !dispatch(&driver, &shared, batch, &mut rx, &mut lobby, &mut last_arrival).await {
                    return;
                }
            }
        }
    }
}

/// Runs `batch` on a session of its own, or refuses it at once while the switch is
/// down and no probe is due. What arrived while it waited for a session joins it
/// (members of a group go back to the lobby). False when the worker is stopping.
async fn dispatch(
    driver: &Driver,
    shared: &Arc<Shared>,
    mut batch: Vec<Job>,
    rx: &mut mpsc::UnboundedReceiver<Box<Job>>,
    lobby: &mut Lobby,
    last_arrival: &mut Option<tokio::time::Instant>,
) -> bool {
    if batch.is_empty() {
        return true;
    }
    match shared.admit() {
        Admission::Refuse(outage) => {
            for job in batch {
                shared.wait_for_switch(job.key());
                job.refuse(&outage);
            }
            true
        }
        Admission::Run => {
            let Ok(permit) = driver.sessions.clone().acquire_owned().await else {
                return false;
            };
            let mut late = Vec::new();
            while let Ok(job) = rx.try_recv() {
                *last_arrival = Some(tokio::time::Instant::now());
                late.push(*job);
            }
            batch.extend(lobby.admit(late));
            let (device, shared) = (driver.device.clone(), shared.clone());
            tokio::spawn(async move {
                run_batch(device.as_ref(), &shared, batch).await;
                close_idle_if_not_leading(device.as_ref(), &shared).await;
                drop(permit);
            });
            true
        }
    }
}

/// Closes the session a backend kept for the next batch when the lease was lost
/// while the session ran (the gate's change found nothing kept then).
async fn close_idle_if_not_leading(device: &dyn Device, shared: &Shared) {
    if !shared.probes.devices.allows() {
        device.close_idle().await;
    }
}

/// `f`, a session of `switch`, within the batch bound if there is one, counted as
/// an open session.
async fn bounded<T>(
    shared: &Shared,
    switch: &dyn Device,
    f: impl std::future::Future<Output = Result<T, DeviceError>>,
) -> Result<T, DeviceError> {
    let open = BackendLabel {
        backend: shared.backend(),
    };
    shared.probes.metrics.sessions.get_or_create(&open).inc();
    let result = within_bound(shared, switch, f).await;
    shared.probes.metrics.sessions.get_or_create(&open).dec();
    result
}

/// A session that runs into the bound is abandoned; whether the device was silent
/// (the switch fails) or slow (its ports retry) is [`lease::overrun`]'s to say,
/// from when the device last answered.
async fn within_bound<T>(
    shared: &Shared,
    switch: &dyn Device,
    f: impl std::future::Future<Output = Result<T, DeviceError>>,
) -> Result<T, DeviceError> {
    match shared.batch_timeout {
        None => f.await,
        Some(limit) => {
            let started = std::time::Instant::now();
            match tokio::time::timeout(limit, f).await {
                Ok(r) => r,
                Err(_) => Err(lease::overrun(
                    limit,
                    started,
                    switch.heard().map(|h| h.last()),
                )),
            }
        }
    }
}

/// Runs one batch: all writes in one `apply_batch` (split into rounds only if a port
/// appears twice), all reads in one `get_ports`. A session failure marks the switch
/// down (once for the batch) and the operations it hit are answered with the outage.
/// Refused (`NotLeading`) while this replica may not touch devices (it lost, or
/// never held, the leader lease): [`crate::lease::DeviceGate`].
async fn run_batch(switch: &dyn Device, shared: &Shared, batch: Vec<Job>) {
    if !shared.probes.devices.allows() {
        for job in batch {
            match job {
                Job::Apply { reply, .. } => {
                    let _ = reply.send(Err(WorkerError::NotLeading));
                }
                Job::Read { reply, .. } => {
                    let _ = reply.send(Err(WorkerError::NotLeading));
                }
            }
        }
        return;
    }
    let as_probe = shared.health.lock().link.probing;
    let outage: Mutex<Option<Outage>> = Mutex::new(None);
    let port_error = |e: DeviceError, key: Option<&PortKey>| {
        if !e.is_session_failure() {
            return WorkerError::Device(e);
        }
        shared.wait_for_switch(key);
        let mut recorded = outage.lock();
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
        let backend = shared.backend();
        let metrics = &shared.probes.metrics;
        metrics
            .batch_size
            .get_or_create(&BackendLabel { backend })
            .observe(ops.len() as f64);
        let started = std::time::Instant::now();
        let applied = bounded(shared, switch, apply_batch_verified(switch, &ops)).await;
        metrics
            .device_seconds
            .get_or_create(&BackendLabel { backend })
            .observe(started.elapsed().as_secs_f64());
        match &applied {
            Ok(results) => {
                for r in results {
                    let outcome = match &r.outcome {
                        Ok(PortChange::Changed) => "changed",
                        Ok(PortChange::Unchanged) => "unchanged",
                        Err(e) => e.category(),
                    };
                    metrics
                        .device_operations
                        .get_or_create(&OperationLabels { backend, outcome })
                        .inc();
                }
            }
            Err(e) => {
                metrics
                    .device_operations
                    .get_or_create(&OperationLabels {
                        backend,
                        outcome: e.category(),
                    })
                    .inc_by(ops.len() as u64);
            }
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
        match bounded(shared, switch, switch.get_ports(&names)).await {
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
        shared.health.lock().link.probing = false;
    }
}

/// The drift sweep and reachability check in one read: every tracked port (or one
/// probe port when none is tracked). Notifies ports whose drift verdict changed and
/// records whether the switch answered.
async fn check(switch: &dyn Device, shared: &Shared) {
    if !shared.probes.devices.allows() {
        shared.health.lock().link.probing = false;
        return;
    }
    let tracked: Vec<(PortKey, DesiredPort)> = shared
        .tracking
        .lock()
        .desired
        .iter()
        .map(|(k, t)| (k.clone(), t.desired()))
        .collect();
    let mut names: Vec<PortName> = tracked.iter().map(|(_, d)| d.port.clone()).collect();
    if names.is_empty() {
        names.extend(shared.health.lock().probe_ports.first().cloned());
    }
    if names.is_empty() {
        // Nothing to read: reachability stays as it is.
        shared.health.lock().link.probing = false;
        return;
    }
    names.sort();
    names.dedup();
    let observed = match bounded(shared, switch, switch.get_ports(&names)).await {
        Ok(o) => o,
        Err(e) if e.is_session_failure() => {
            shared.fail(e, true);
            return;
        }
        Err(e) => {
            tracing::debug!(error = %e, "the drift sweep could not read the switch");
            shared.health.lock().link.probing = false;
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
    shared
        .probes
        .metrics
        .drift_sweeps
        .get_or_create(&BackendLabel {
            backend: shared.backend(),
        })
        .inc();
    let observed: HashMap<PortName, ObservedPort> = observed
        .into_iter()
        .filter_map(|(p, r)| r.ok().map(|o| (p, o)))
        .collect();
    let mut changed = Vec::new();
    tracing::debug!(ports = names.len(), "drift sweep read the switch");
    {
        let mut t = shared.tracking.lock();
        for (key, desired) in tracked {
            let Some(obs) = observed.get(&desired.port) else {
                continue;
            };
            let drifted = !diff(&desired, obs).is_empty();
            tracing::debug!(port = %desired.port, drifted, "drift verdict");
            let told = t.pending.get(&key).copied();
            if t.sweep_verdict(&key, drifted) {
                if drifted && told != Some(true) {
                    shared
                        .probes
                        .metrics
                        .drift_found
                        .get_or_create(&BackendLabel {
                            backend: shared.backend(),
                        })
                        .inc();
                }
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
            kind: CabledPortKind::SwitchPort,
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

    #[test]
    fn ports_that_should_look_alike_share_one_desired_state_and_each_keeps_its_own_port() {
        let mut t = Tracking::default();
        assert!(t.put(key("a"), access("Ethernet1", 10)));
        assert!(t.put(key("b"), access("Ethernet2", 10)));
        assert!(t.put(key("c"), access("Ethernet3", 20)));
        assert_eq!(t.shapes.len(), 2);
        assert!(Arc::ptr_eq(
            &t.desired[&key("a")].shape,
            &t.desired[&key("b")].shape
        ));
        // Each gives back its own desired state, device port included.
        assert_eq!(t.desired[&key("b")].desired(), access("Ethernet2", 10));
        assert_eq!(t.desired[&key("c")].desired(), access("Ethernet3", 20));
        // The same again is no change; another device port, or anything else, is.
        assert!(!t.put(key("a"), access("Ethernet1", 10)));
        assert!(t.put(key("a"), access("Ethernet9", 10)));
        assert_eq!(t.desired[&key("a")].desired(), access("Ethernet9", 10));
        let mut described = access("Ethernet2", 10);
        described.description = Some("rack 4".parse().unwrap());
        assert!(t.put(key("b"), described.clone()));
        assert_eq!(t.desired[&key("b")].desired(), described);
        assert_eq!(t.shapes.len(), 3);
        // A shape no port holds any more goes.
        assert!(t.put(key("c"), access("Ethernet3", 10)));
        t.forget(&key("b"));
        assert_eq!(t.shapes.len(), 1);
        t.forget(&key("a"));
        t.forget(&key("c"));
        assert!(t.shapes.is_empty() && t.desired.is_empty());
    }

    fn config() -> WorkerConfig {
        WorkerConfig {
            backend: "fixture",
            probes: crate::probes::Probes::default(),
            batch_timeout: None,
            group_hold: Duration::from_secs(5),
            group_gather: Duration::from_millis(200),
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
        (Arc::new(move |n| s.lock().push(n)), seen)
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

    /// A session a backend keeps for the next batch (NETCONF) is closed the moment
    /// the replica loses the lease (each loss once), not when its time is up.
    #[tokio::test]
    async fn losing_the_lease_closes_a_session_kept_for_the_next_batch_at_once() {
        let mut device = patchbay_providers::MockDevice::new();
        device
            .expect_capabilities()
            .returning(patchbay_providers::Capabilities::all);
        device.expect_get_ports().returning(|_| Ok(Vec::new()));
        let closed = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let c = closed.clone();
        device.expect_close_idle().returning(move || {
            c.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        });
        let probes = crate::probes::Probes::default();
        let _worker = SwitchWorker::spawn(
            Arc::new(device),
            WorkerConfig {
                probes: probes.clone(),
                ..config()
            },
            vec![p("Gi0/1")],
            Arc::new(|_| {}),
        );
        let count = || closed.load(std::sync::atomic::Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(count(), 0, "nothing closed while leading");
        for (losses, gate) in [(1, false), (1, false), (1, true), (2, false)] {
            probes.devices.set(gate);
            let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
            while count() < losses && tokio::time::Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
            assert_eq!(count(), losses, "after the gate was set {gate}");
        }
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

    /// A failed answer from before the switch came back is not handed to the port:
    /// the operation goes to the device again (the CI failure of the corrected
    /// host-key pin: the port took the old refusal and waited a backoff step).
    #[tokio::test]
    async fn a_failed_answer_from_before_the_switch_came_back_is_sent_again_not_taken() {
        let op = PortOperation::Set(access("Gi0/1", 10));
        /// Hands `op` off — it must be sent, not answered from what is kept — and
        /// waits for the worker's answer.
        async fn sent(worker: &SwitchWorker, op: &PortOperation) {
            assert!(matches!(
                worker.hand_off(&key("a"), op.clone()),
                HandOff::InFlight
            ));
            tokio::time::timeout(Duration::from_secs(5), worker.hand_offs_settled())
                .await
                .expect("answered");
        }
        /// [`sent`], and the answer taken.
        async fn sent_and_answered(
            worker: &SwitchWorker,
            op: &PortOperation,
        ) -> Result<PortChange, WorkerError> {
            sent(worker, op).await;
            match worker.hand_off(&key("a"), op.clone()) {
                HandOff::Done(r) => r,
                other => panic!("answered: {other:?}"),
            }
        }
        /// A worker on a switch that does not answer, whose refusal of `op` is
        /// kept, not taken.
        async fn refused(op: &PortOperation) -> (FixtureSwitch, SwitchWorker) {
            let fixture = FixtureSwitch::new("tor", vec![p("Gi0/1")]);
            fixture.set_unreachable(true);
            let worker = SwitchWorker::spawn(
                Arc::new(fixture.clone()),
                config(),
                vec![p("Gi0/1")],
                Arc::new(|_| {}),
            );
            sent(&worker, op).await;
            assert!(worker.outage().is_some());
            (fixture, worker)
        }
        // The switch answers again after being down.
        let (fixture, worker) = refused(&op).await;
        fixture.set_unreachable(false);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while worker.reachability() != Reachability::Reachable {
            assert!(tokio::time::Instant::now() < deadline, "never probed back");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let r = sent_and_answered(&worker, &op).await;
        assert!(r.is_ok(), "{r:?}");
        // The device is replaced while the old one refuses; the replacement is
        // taken before anything sent after it.
        let (_old, worker) = refused(&op).await;
        let new = FixtureSwitch::new("tor", vec![p("Gi0/1")]);
        worker.replace_device(Arc::new(new.clone()), 1, "fixture");
        let r = sent_and_answered(&worker, &op).await;
        assert!(r.is_ok(), "{r:?}");
        assert!(
            new.operations()
                .iter()
                .any(|o| matches!(o, LoggedOperation::Set { .. })),
            "{:?}",
            new.operations()
        );
        // An error from the switch as it is now is still the port's to take.
        new.fail_next(patchbay_providers::fixture::FixtureFailure::Rejected);
        let r = sent_and_answered(&worker, &PortOperation::Set(access("Gi0/1", 20))).await;
        assert!(r.is_err(), "{r:?}");
    }

    #[tokio::test]
    async fn a_hand_off_is_answered_once_for_its_own_operation_and_wakes_the_port() {
        let fixture = FixtureSwitch::new("tor", vec![p("Gi0/1"), p("Gi0/2")]);
        fixture.set_latency(Duration::from_millis(200));
        let (notify, seen) = recorder();
        let worker = SwitchWorker::spawn(Arc::new(fixture.clone()), config(), Vec::new(), notify);
        let woken = |seen: &Mutex<Vec<Notice>>| {
            seen.lock()
                .iter()
                .filter(|n| **n == Notice::Port(key("a")))
                .count()
        };
        let first = PortOperation::Set(access("Gi0/1", 10));
        let second = PortOperation::Set(access("Gi0/1", 20));
        // Handed off: in flight until the worker answers (the caller does not wait).
        assert!(matches!(
            worker.hand_off(&key("a"), first.clone()),
            HandOff::InFlight
        ));
        assert!(matches!(
            worker.hand_off(&key("a"), first.clone()),
            HandOff::InFlight
        ));
        // The port changes its mind while the first is on the device.
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(matches!(
            worker.hand_off(&key("a"), second.clone()),
            HandOff::InFlight
        ));
        worker.hand_offs_settled().await;
        // The first one's answer was dropped (no wake for it); the second's wakes.
        assert_eq!(woken(&seen), 1);
        assert!(matches!(
            worker.hand_off(&key("a"), first.clone()),
            HandOff::InFlight
        ));
        worker.hand_offs_settled().await;
        // ... and a third for `first` again, which replaced `second`: only the
        // latest operation's answer is taken, once.
        match worker.hand_off(&key("a"), first.clone()) {
            HandOff::Done(r) => assert!(r.is_ok(), "{r:?}"),
            other => panic!("answered: {other:?}"),
        }
        assert!(matches!(
            worker.hand_off(&key("b"), PortOperation::Reset(p("Gi0/2"))),
            HandOff::InFlight
        ));
        // Forgotten (the port entered a new state): the answer is not kept.
        worker.forget_hand_off(&key("b"));
        worker.hand_offs_settled().await;
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert!(matches!(
            worker.hand_off(&key("b"), PortOperation::Reset(p("Gi0/2"))),
            HandOff::InFlight
        ));
        worker.hand_offs_settled().await;
        // Every operation handed off reached the device, in order.
        let sets: Vec<u16> = fixture
            .operations()
            .iter()
            .filter_map(|o| match o {
                LoggedOperation::Set { desired, .. } => match desired.vlans {
                    VlanMode::Access { vlan } => Some(vlan.get()),
                    _ => None,
                },
                _ => None,
            })
            .collect();
        assert_eq!(sets, [10, 20, 10]);
        // Stopping: nothing new is sent.
        worker.close_hand_offs();
        let before = fixture.operations().len();
        assert!(matches!(
            worker.hand_off(&key("a"), second.clone()),
            HandOff::InFlight
        ));
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert_eq!(fixture.operations().len(), before);
        // Stopping waits for answers to be taken: `b`'s is still there.
        let taken = tokio::time::timeout(Duration::from_millis(100), worker.hand_offs_taken());
        assert!(taken.await.is_err());
        assert!(matches!(
            worker.hand_off(&key("b"), PortOperation::Reset(p("Gi0/2"))),
            HandOff::Done(Ok(_))
        ));
        worker.hand_offs_taken().await;
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

    fn port_notices(notified: &Mutex<Vec<Notice>>) -> Vec<Notice> {
        notified
            .lock()
            .iter()
            .filter(|n| matches!(n, Notice::Port(_)))
            .cloned()
            .collect()
    }

    #[tokio::test]
    async fn a_sweep_reads_the_switch_once_and_reports_drift_until_the_port_settles_it() {
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
        notified.lock().clear();
        fixture.tamper(&p("Gi0/2"), |o| o.vlans = Some(VlanMode::Unconfigured));
        tokio::time::sleep(Duration::from_millis(350)).await;
        // The drifted port, and only it, is told — at every sweep while it has not
        // looked (a reconcile that could not act yet is woken again).
        let told = port_notices(&notified);
        assert!(told.len() >= 2, "{told:?}");
        assert!(
            told.iter().all(|n| *n == Notice::Port(key("port-1"))),
            "{told:?}"
        );
        assert_eq!(worker.drift_notice(&key("port-1")), Some(true));
        assert_eq!(worker.drift_notice(&key("port-0")), None);
        // The port read it drifted and left it so (ReportOnly): no more notices
        // while the device stays as it is.
        worker.settle(&key("port-1"), true);
        notified.lock().clear();
        tokio::time::sleep(Duration::from_millis(250)).await;
        assert_eq!(worker.drift_notice(&key("port-1")), None);
        assert!(port_notices(&notified).is_empty());
        // Each sweep read both ports in one get_ports call (two Get log entries per sweep).
        let gets = fixture
            .operations()
            .iter()
            .filter(|o| matches!(o, LoggedOperation::Get { .. }))
            .count();
        assert!(gets >= 2 && gets % 2 == 0, "{gets}");
    }

    #[tokio::test]
    async fn a_port_repaired_is_told_again_each_time_its_drift_comes_back() {
        let fixture = FixtureSwitch::new("tor", [p("Gi0/1")]);
        let (notify, notified) = recorder();
        let mut cfg = config();
        cfg.drift_interval = Duration::from_millis(100);
        let worker = SwitchWorker::spawn(Arc::new(fixture.clone()), cfg, Vec::new(), notify);
        let d = access("Gi0/1", 10);
        worker
            .apply(None, PortOperation::Set(d.clone()))
            .await
            .unwrap();
        worker.track(key("a"), Some(d.clone()));
        for round in 1..=3 {
            notified.lock().clear();
            fixture.tamper(&p("Gi0/1"), |o| o.vlans = Some(VlanMode::Unconfigured));
            tokio::time::sleep(Duration::from_millis(250)).await;
            assert_eq!(worker.drift_notice(&key("a")), Some(true), "round {round}");
            assert!(
                port_notices(&notified).contains(&Notice::Port(key("a"))),
                "round {round}"
            );
            // The port repairs it, as its reconcile does: apply, track, settle.
            worker
                .apply(Some(&key("a")), PortOperation::Set(d.clone()))
                .await
                .unwrap();
            worker.track(key("a"), Some(d.clone()));
            worker.settle(&key("a"), false);
            assert_eq!(worker.drift_notice(&key("a")), None);
            assert_eq!(worker.record_repair(&key("a")), round);
        }
        // In sync again: nothing more to tell.
        notified.lock().clear();
        tokio::time::sleep(Duration::from_millis(250)).await;
        assert!(port_notices(&notified).is_empty());
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
        assert!(notified.lock().contains(&Notice::Switch));
        assert!(notified.lock().contains(&Notice::Port(key("p48"))));

        // The switch comes back: the next probe finds it, and every waiting port is
        // told at once.
        notified.lock().clear();
        fixture.set_unreachable(false);
        tokio::time::sleep(Duration::from_millis(2200)).await;
        assert_eq!(worker.reachability(), Reachability::Reachable);
        let heard = notified.lock().clone();
        assert!(heard.contains(&Notice::Switch), "{heard:?}");
        for i in 1..=48 {
            assert!(heard.contains(&Notice::Port(key(&format!("p{i}")))), "p{i}");
        }
        worker
            .apply(None, PortOperation::Set(access("Gi0/1", 10)))
            .await
            .unwrap();
    }

    /// Under leader election's batch bound, a device that said nothing is the switch
    /// failing (DeviceTimeout, the switch down, in words); one that answers but not
    /// within the bound is slow: its port fails (DeviceSlow) and the switch stays up.
    #[tokio::test]
    async fn a_silent_switch_is_down_and_a_slow_one_is_not() {
        let bound = Duration::from_millis(500);
        let cfg = || WorkerConfig {
            batch_timeout: Some(bound),
            ..config()
        };
        let silent = FixtureSwitch::new("silent", [p("Gi0/1")]);
        silent.set_latency(Duration::from_secs(3));
        let worker = quiet_worker(&silent, cfg());
        match worker
            .apply(None, PortOperation::Set(access("Gi0/1", 10)))
            .await
        {
            Err(WorkerError::SwitchDown(o)) => {
                assert_eq!(o.error.category(), "DeviceTimeout");
                assert_eq!(
                    o.error.to_string(),
                    "no answer from the device within 0.5 s, the batch bound that leader \
                     election sets"
                );
            }
            other => panic!("expected the switch down, got {other:?}"),
        }
        assert!(worker.outage().is_some(), "{:?}", worker.reachability());

        // Each operation answered after 0.3 s: the write, then its read-back.
        let slow = FixtureSwitch::new("slow", [p("Gi0/1")]);
        slow.set_latency(Duration::from_millis(300));
        let worker = quiet_worker(&slow, cfg());
        match worker
            .apply(None, PortOperation::Set(access("Gi0/1", 10)))
            .await
        {
            Err(WorkerError::Device(e)) => {
                assert_eq!(e.category(), "DeviceSlow");
                assert!(!e.is_session_failure() && e.is_transient(), "{e}");
                assert!(
                    e.to_string().starts_with(
                        "the device was still answering when the session reached 0.5 s"
                    ),
                    "{e}"
                );
            }
            other => panic!("expected the port to fail as slow, got {other:?}"),
        }
        assert!(worker.outage().is_none(), "{:?}", worker.reachability());
        // Answering faster, the same device takes the change, and answers.
        slow.set_latency(Duration::from_millis(100));
        worker
            .apply(None, PortOperation::Set(access("Gi0/1", 10)))
            .await
            .expect("a faster answer fits the bound");
        assert_eq!(worker.reachability(), Reachability::Reachable);
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
        assert!(notified.lock().contains(&Notice::Port(key("a"))));
        // It comes back empty: the port gets a drift notice.
        fixture.set_unreachable(false);
        fixture.tamper(&p("Gi0/1"), |o| o.vlans = Some(VlanMode::Unconfigured));
        tokio::time::sleep(Duration::from_millis(1200)).await;
        assert_eq!(worker.reachability(), Reachability::Reachable);
        assert_eq!(worker.drift_notice(&key("a")), Some(true));
    }

    /// A worker on `fixture` with `cfg` whose notices go nowhere.
    fn quiet_worker(fixture: &FixtureSwitch, cfg: WorkerConfig) -> Arc<SwitchWorker> {
        Arc::new(SwitchWorker::spawn(
            Arc::new(fixture.clone()),
            cfg,
            Vec::new(),
            Arc::new(|_| {}),
        ))
    }

    /// `worker.apply(None, Set(d))` on a task of its own (a reconcile waiting).
    fn apply_in_background(
        worker: &Arc<SwitchWorker>,
        d: DesiredPort,
    ) -> tokio::task::JoinHandle<Result<PortChange, WorkerError>> {
        let worker = worker.clone();
        tokio::spawn(async move { worker.apply(None, PortOperation::Set(d)).await })
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
        let worker = quiet_worker(&fixture, config());
        let both = ["Gi0/1", "Gi0/2"];
        // The first member waits for the second, which comes 2 s later: one batch.
        let first = apply_in_background(&worker, member("Gi0/1", 7, &both));
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
        // The hold, from when the change left its burst (the 50 ms window).
        assert!(
            (Duration::from_secs(5)..=Duration::from_millis(5100)).contains(&t.elapsed()),
            "{:?}",
            t.elapsed()
        );
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

    #[tokio::test]
    async fn a_replaced_device_opens_no_session_before_the_old_one_has_finished() {
        // Old and new device share one fixture (a ProviderSwitch edit, a Secret
        // rotated: the same switch), so its session count sees both.
        let fixture = FixtureSwitch::new("tor", [p("Gi0/1"), p("Gi0/2")]);
        fixture.set_latency(Duration::from_millis(150));
        let (notify, notified) = recorder();
        let worker = Arc::new(SwitchWorker::spawn(
            Arc::new(fixture.clone()),
            config(),
            vec![p("Gi0/1")],
            notify,
        ));
        tokio::time::sleep(Duration::from_millis(400)).await;
        let first = {
            let w = worker.clone();
            tokio::spawn(
                async move { w.apply(None, PortOperation::Set(access("Gi0/1", 10))).await },
            )
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        notified.lock().clear();
        worker.replace_device(Arc::new(fixture.clone()), 1, "fixture");
        let second = worker
            .apply(None, PortOperation::Set(access("Gi0/2", 20)))
            .await;
        assert!(first.await.unwrap().is_ok());
        assert!(second.is_ok(), "{second:?}");
        assert_eq!(fixture.max_concurrent_sessions(), 1);
        // The switch's status hears that the device changed.
        assert!(notified.lock().contains(&Notice::Switch));
    }

    #[tokio::test(start_paused = true)]
    async fn members_whose_reconciles_knew_only_themselves_still_go_in_one_batch() {
        let fixture = FixtureSwitch::new("tor", [p("Gi0/1"), p("Gi0/2")]);
        let worker = quiet_worker(
            &fixture,
            WorkerConfig {
                group_gather: Duration::from_secs(1),
                ..config()
            },
        );
        // The first member's reconcile did not see the second linked yet.
        let first = apply_in_background(&worker, member("Gi0/1", 7, &["Gi0/1"]));
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(batch_sizes(&fixture).is_empty(), "a new group gathers");
        worker
            .apply(
                None,
                PortOperation::Set(member("Gi0/2", 7, &["Gi0/1", "Gi0/2"])),
            )
            .await
            .unwrap();
        first.await.unwrap().unwrap();
        assert_eq!(batch_sizes(&fixture), vec![2]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_member_held_for_one_in_flight_goes_once_that_one_is_tracked() {
        let fixture = FixtureSwitch::new("tor", [p("Gi0/1"), p("Gi0/2")]);
        let worker = quiet_worker(&fixture, config());
        let both = ["Gi0/1", "Gi0/2"];
        // Gi0/1 went alone earlier (its group on the device); Gi0/2 names it, but
        // Gi0/1's port has not tracked its new state yet.
        worker
            .apply(None, PortOperation::Set(member("Gi0/1", 7, &["Gi0/1"])))
            .await
            .unwrap();
        worker.track(key("a"), Some(member("Gi0/1", 7, &["Gi0/1"])));
        let mut other = member("Gi0/1", 7, &both);
        other.vlans = VlanMode::Access {
            vlan: VlanId::new(301).unwrap(),
        };
        worker.track(key("a"), Some(other));
        let second = apply_in_background(&worker, member("Gi0/2", 7, &both));
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(batch_sizes(&fixture), vec![1], "held: Gi0/1 differs");
        // Gi0/1's port tracks the group's settings: Gi0/2 goes at once, long before
        // the hold.
        let t = tokio::time::Instant::now();
        worker.track(key("a"), Some(member("Gi0/1", 7, &both)));
        second.await.unwrap().unwrap();
        assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
        assert_eq!(batch_sizes(&fixture), vec![1, 1]);
    }
}

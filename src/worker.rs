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
//! the port in Configuring or Cleaning, which the next one applies again. A result
//! no port takes within ten minutes (its port deleted with the finalizer removed by
//! hand, so nothing told the worker) is forgotten at the next sweep of answers.
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
//! **Held waves.** A rollout wave's change comes with a [`Hold`] (its pin as the
//! token): its writes go in a batch — a device transaction — of their own, never
//! with another port's, and where the device can hold a change
//! ([`Device::apply_and_read_held`]: NETCONF with `:confirmed-commit:1.1`) it is
//! committed as a persisted confirmed commit left unconfirmed. The rollout settles
//! it after the wave's gate ([`SwitchWorker::settle_hold`]: confirm, or cancel and
//! the device takes it back); if nobody does, the device takes it back by itself at
//! the hold's timeout. No session stays open meanwhile, but the device commits
//! nothing else while a confirmed commit is pending, so writes outside the hold wait
//! here (not failed, not counted) until it is settled or its timeout passes; reads,
//! sweeps and probes go on. More of the same wave join the hold (a follow-up
//! confirmed commit).
//!
//! **The batch bound.** With leader election every session (batch, sweep, probe) is
//! bounded by [`WorkerConfig::batch_timeout`]; one that runs into it is abandoned,
//! and is a session failure (the switch goes down) only when the device sent
//! nothing since the session began — a silent device — and a failure of its ports
//! alone (`DeviceSlow`) when it was answering or its backend cannot tell
//! ([`lease::overrun`] decides, from [`Device::heard`]).
//!
//! The rooms: this file (the handle ports talk to, [`SwitchWorker`], and the state
//! it shares with its task); `worker/driver.rs` (the task: jobs into batches,
//! device replacement); `worker/batch.rs` (one batch within the bound);
//! `worker/sweep.rs` (drift sweeps and probes); `worker/tracking.rs` (what ports
//! established, drift notices); `worker/hand_offs.rs` (health and hand-offs);
//! `worker/lobby.rs` (link-aggregation groups held for one batch).

use parking_lot::Mutex;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use jiff::Timestamp;
use patchbay_providers::values::PortName;
use patchbay_providers::verify::apply_held_verified;
use patchbay_providers::{
    Cause, DesiredPort, Device, DeviceError, HeldBy, Hold, ObservedPort, PortChange, PortOperation,
    Settled, diff,
};
use tokio::sync::{Notify, Semaphore, mpsc, oneshot};

use crate::api::CabledPortKind;
use crate::decide::failure::WorkerError;
use crate::decide::lease;
use crate::decide::lobby::{GroupVerdict, group_verdict, missing};
use crate::decide::reachability::{Admission, Link, Outage, Reachability, WorkerStart};
use crate::decide::slack;
use crate::decide::state_machine::Backoff;
use crate::metrics::{BackendLabel, OperationLabels};

mod batch;
mod driver;
mod hand_offs;
mod lobby;
mod sweep;
mod tracking;
use batch::*;
use driver::*;
pub use hand_offs::*;
use lobby::*;
use sweep::*;
pub use tracking::*;

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
    /// Whether the switch is believed to answer and when its first sweep comes
    /// ([`crate::decide::reachability::worker_start`]).
    pub start: crate::decide::reachability::WorkerStart,
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
        /// A rollout wave's change, held on the device until its gate says (see
        /// "Held waves" above).
        hold: Option<Hold>,
        reply: oneshot::Sender<Result<PortChange, WorkerError>>,
    },
    Read {
        key: Option<PortKey>,
        port: PortName,
        reply: oneshot::Sender<Result<ObservedPort, WorkerError>>,
    },
    /// Confirm or cancel the change held under `token`.
    Settle {
        token: String,
        confirm: bool,
        reply: oneshot::Sender<Result<Settled, WorkerError>>,
    },
}

impl Job {
    fn key(&self) -> Option<&PortKey> {
        match self {
            Job::Apply { key, .. } | Job::Read { key, .. } => key.as_ref(),
            Job::Settle { .. } => None,
        }
    }

    /// The hold a write belongs to: `Some(None)` for a write outside any rollout
    /// wave, `None` for a job that writes nothing.
    fn writes_under(&self) -> Option<Option<&str>> {
        match self {
            Job::Apply { hold, .. } => Some(hold.as_ref().map(|h| h.token.as_str())),
            _ => None,
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
            Job::Settle { reply, .. } => {
                let _ = reply.send(Err(e()));
            }
        }
    }
}

/// A change held on the device (a persisted confirmed commit) and the writes that
/// wait for it to be settled.
#[derive(Default)]
struct Holding {
    /// The token of the hold pending on the device, and when the device will have
    /// taken it back by itself (its timeout and a margin).
    pending: Option<(String, tokio::time::Instant)>,
    /// Writes outside that hold, in arrival order: the device commits nothing else
    /// while a confirmed commit is pending (netconfd: "cannot perform the operation
    /// with confirmed-commit pending").
    behind: Vec<Job>,
    /// The last wave whose writes this worker sent, and whether the device held any
    /// of them: a wave it sent and the device held none of (it cannot hold, or
    /// nothing changed) settles without asking the device.
    last: Option<(String, bool)>,
    /// The last hold settled and how: asked again (the rollout's status write
    /// failed after it settled), the same answer, not the device's "nothing held".
    settled: Option<(String, bool, Settled)>,
}

impl Holding {
    /// The token of the hold pending on the device, forgetting one whose timeout
    /// passed (the device took it back by itself: nothing is pending any more).
    fn pending(&mut self) -> Option<&str> {
        if self
            .pending
            .as_ref()
            .is_some_and(|(_, until)| *until <= tokio::time::Instant::now())
        {
            self.pending = None;
        }
        self.pending.as_ref().map(|(t, _)| t.as_str())
    }
}

/// What the device's own timeout is given on top, before the worker believes it.
const HOLD_MARGIN: Duration = Duration::from_secs(5);

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
    /// A rollout wave's change held on the device, and the writes behind it.
    holding: Mutex<Holding>,
}

impl Shared {
    /// Takes `jobs`, keeping back every write outside the hold pending on the
    /// device (until it is settled or times out); returns the rest.
    fn hold_back(&self, jobs: Vec<Job>) -> Vec<Job> {
        let mut h = self.holding.lock();
        let Some(token) = h.pending().map(str::to_owned) else {
            return jobs;
        };
        let mut runnable = Vec::new();
        for job in jobs {
            match job.writes_under() {
                Some(under) if under != Some(token.as_str()) => h.behind.push(job),
                _ => runnable.push(job),
            }
        }
        runnable
    }

    /// The writes held back, once nothing is pending on the device.
    fn release_held_back(&self) -> Vec<Job> {
        let mut h = self.holding.lock();
        if h.pending().is_some() {
            return Vec::new();
        }
        std::mem::take(&mut h.behind)
    }

    /// When the hold pending on the device times out, while writes wait behind it.
    fn hold_due(&self) -> Option<tokio::time::Instant> {
        let h = self.holding.lock();
        h.pending
            .as_ref()
            .filter(|_| !h.behind.is_empty())
            .map(|(_, until)| *until)
    }

    /// Whether a write under `token` (`None`: outside any wave) may commit now, and
    /// as a follow-up of the hold pending under the same token.
    fn may_commit(&self, token: Option<&str>) -> Option<bool> {
        match self.holding.lock().pending() {
            Some(t) => (token == Some(t)).then_some(true),
            None => Some(false),
        }
    }

    /// A batch of the wave `hold` was committed, `held` by the device or not.
    fn wrote_under(&self, hold: &Hold, held: bool) {
        let mut h = self.holding.lock();
        if held {
            h.pending = Some((
                hold.token.clone(),
                tokio::time::Instant::now() + hold.timeout + HOLD_MARGIN,
            ));
        }
        match &mut h.last {
            Some((t, any)) if *t == hold.token => *any |= held,
            _ => h.last = Some((hold.token.clone(), held)),
        }
    }

    /// Whether settling `token` needs the device: not for the last wave this
    /// worker sent when the device held none of it (after a restart it does not
    /// know, and asks).
    fn settle_needs_device(&self, token: &str) -> bool {
        let h = self.holding.lock();
        h.pending.as_ref().is_some_and(|(t, _)| t == token)
            || !h.last.as_ref().is_some_and(|(t, held)| t == token && !held)
    }

    /// The hold under `token` is settled (`confirm`: confirmed) as `how` (or the
    /// device held nothing under it): the writes behind it may go.
    fn hold_settled(&self, token: &str, confirm: bool, how: &Settled) {
        let mut h = self.holding.lock();
        if h.pending.as_ref().is_some_and(|(t, _)| t == token) {
            h.pending = None;
        }
        h.settled = Some((token.to_owned(), confirm, how.clone()));
        drop(h);
        self.changed.notify_one();
    }

    /// How `token` was settled the last time it was asked the same, if it was the
    /// last hold settled and nothing was held under it since.
    fn settled_before(&self, token: &str, confirm: bool) -> Option<Settled> {
        let h = self.holding.lock();
        if h.pending.as_ref().is_some_and(|(t, _)| t == token) {
            return None;
        }
        h.settled
            .as_ref()
            .filter(|(t, c, _)| t == token && *c == confirm)
            .map(|(_, _, how)| how.clone())
    }

    /// Writes that found a hold pending when their batch ran wait behind it.
    fn keep_behind(&self, jobs: Vec<Job>) {
        self.holding.lock().behind.extend(jobs);
        self.changed.notify_one();
    }

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
        let now = tokio::time::Instant::now();
        entry.result = Some(result);
        entry.answered = Some(now);
        h.in_flight -= 1;
        h.sweep(now);
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
                link: Link {
                    reach: match config.start {
                        WorkerStart::Fresh => Reachability::Unknown,
                        WorkerStart::Resumed { .. } => Reachability::Reachable,
                    },
                    probing: false,
                },
                ..Default::default()
            }),
            comebacks: AtomicU64::new(0),
            changed: Notify::new(),
            notify,
            backoff: config.backoff,
            backend: Mutex::new(config.backend),
            batch_timeout: config.batch_timeout,
            probes: config.probes.clone(),
            holding: Mutex::new(Holding::default()),
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
        self.ask(|reply| Job::Apply {
            key,
            op,
            hold: None,
            reply,
        })
        .await
    }

    /// Confirms (`confirm`) or cancels the rollout wave's change held on the device
    /// under `token` (see "Held waves" above); the writes kept back behind it go
    /// next.
    pub async fn settle_hold(&self, token: &str, confirm: bool) -> Result<Settled, WorkerError> {
        let token = token.to_owned();
        self.ask(|reply| Job::Settle {
            token,
            confirm,
            reply,
        })
        .await
    }

    /// Hands `op` for port `key` to the worker without waiting for the device (see
    /// "Hand-offs" above). The first call sends it and answers
    /// [`HandOff::InFlight`]; the worker's answer wakes the port, and the call with
    /// the same operation then answers [`HandOff::Done`] with it. A different
    /// operation replaces the one in flight (which still runs first; its answer is
    /// dropped).
    pub fn hand_off(&self, key: &PortKey, op: PortOperation) -> HandOff {
        self.hand_off_held(key, op, None)
    }

    /// [`Self::hand_off`] of a rollout wave's change, held on the device under
    /// `hold` where the device can (see "Held waves" above).
    pub fn hand_off_held(&self, key: &PortKey, op: PortOperation, hold: Option<Hold>) -> HandOff {
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
                answered: None,
            },
        );
        drop(h);
        let (reply, answer) = oneshot::channel();
        let job = Job::Apply {
            key: Some(key.clone()),
            op,
            hold,
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
            start: WorkerStart::Fresh,
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

    /// A port deleted with its finalizer removed by hand never takes its answer:
    /// the answer is forgotten once it has waited ANSWER_KEPT, at the next sweep.
    #[tokio::test(start_paused = true)]
    async fn an_answer_no_port_takes_is_forgotten() {
        let fixture = FixtureSwitch::new("tor", vec![p("Gi0/1"), p("Gi0/2")]);
        let (notify, _seen) = recorder();
        let worker = SwitchWorker::spawn(Arc::new(fixture), config(), Vec::new(), notify);
        let kept = |k: &str| worker.shared.hand_offs.lock().by_port.contains_key(&key(k));
        worker.hand_off(&key("gone"), PortOperation::Set(access("Gi0/1", 10)));
        worker.hand_offs_settled().await;
        assert!(kept("gone"), "answered, waiting for its port");
        // Nine minutes on, another port's answer: still kept.
        tokio::time::sleep(Duration::from_secs(540)).await;
        worker.hand_off(&key("b"), PortOperation::Set(access("Gi0/2", 10)));
        worker.hand_offs_settled().await;
        assert!(kept("gone"));
        // Past ten minutes, the next answer sweeps it away; the fresh one stays.
        tokio::time::sleep(Duration::from_secs(120)).await;
        worker.hand_off(&key("b"), PortOperation::Set(access("Gi0/2", 11)));
        worker.hand_offs_settled().await;
        assert!(!kept("gone"));
        assert!(kept("b"));
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
    async fn a_resumed_switch_is_believed_answering_and_swept_on_its_schedule_a_fresh_one_at_once()
    {
        let reads = |fixture: &FixtureSwitch| {
            fixture
                .operations()
                .iter()
                .filter(|o| matches!(o, LoggedOperation::Get { .. }))
                .count()
        };
        let mut cfg = config();
        cfg.drift_interval = Duration::from_secs(10);
        // Fresh: unknown, and read at once (the first reachability check).
        let fresh = FixtureSwitch::new("fresh", [p("Gi0/1")]);
        let (notify, _) = recorder();
        let worker = SwitchWorker::spawn(
            Arc::new(fresh.clone()),
            cfg.clone(),
            vec![p("Gi0/1")],
            notify,
        );
        tokio::time::sleep(Duration::from_millis(150)).await;
        assert_eq!(reads(&fresh), 1);
        assert_eq!(worker.reachability(), Reachability::Reachable);
        // Resumed: answering from the start, and no session before its first sweep.
        let resumed = FixtureSwitch::new("resumed", [p("Gi0/1")]);
        cfg.start = WorkerStart::Resumed {
            first_sweep: Duration::from_millis(400),
        };
        let (notify, _) = recorder();
        let worker = SwitchWorker::spawn(Arc::new(resumed.clone()), cfg, vec![p("Gi0/1")], notify);
        assert_eq!(worker.reachability(), Reachability::Reachable);
        tokio::time::sleep(Duration::from_millis(250)).await;
        assert_eq!(reads(&resumed), 0, "{:?}", resumed.operations());
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert_eq!(reads(&resumed), 1, "its first sweep came");
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
                assert_eq!(
                    crate::decide::retry::Retry::of_device(&e),
                    crate::decide::retry::Retry::Transient,
                    "{e}"
                );
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
    /// A fixture device that holds a rollout wave's change until told, as a NETCONF
    /// device with `:confirmed-commit:1.1` does, and says whether it holds one.
    struct HoldingDevice {
        fixture: FixtureSwitch,
        held: Mutex<Option<String>>,
    }

    #[async_trait::async_trait]
    impl Device for HoldingDevice {
        fn capabilities(&self) -> patchbay_providers::Capabilities {
            self.fixture.capabilities()
        }
        async fn apply_batch(
            &self,
            ops: &[PortOperation],
        ) -> Result<Vec<patchbay_providers::PortResult>, DeviceError> {
            assert!(
                self.held.lock().is_none(),
                "a commit while a confirmed commit is pending"
            );
            self.fixture.apply_batch(ops).await
        }
        async fn apply_and_read_held(
            &self,
            ops: &[PortOperation],
            hold: &Hold,
        ) -> Result<
            (
                Vec<patchbay_providers::PortResult>,
                patchbay_providers::PortReads,
                HeldBy,
            ),
            DeviceError,
        > {
            let pending = self.held.lock().clone();
            assert!(
                pending.is_none() || (hold.follow_up && pending.as_deref() == Some(&hold.token)),
                "a held commit over another: {pending:?} {hold:?}"
            );
            let (results, reads) = self.fixture.apply_and_read(ops).await?;
            *self.held.lock() = Some(hold.token.clone());
            Ok((results, reads, HeldBy::Device))
        }
        async fn settle_hold(&self, token: &str, _confirm: bool) -> Result<Settled, DeviceError> {
            let mut held = self.held.lock();
            Ok(if held.as_deref() == Some(token) {
                *held = None;
                Settled::Confirmed
            } else {
                Settled::Gone("not active".into())
            })
        }
        async fn get_ports(
            &self,
            ports: &[PortName],
        ) -> Result<patchbay_providers::PortReads, DeviceError> {
            self.fixture.get_ports(ports).await
        }
    }

    #[tokio::test]
    async fn a_held_wave_keeps_other_writes_back_until_it_is_settled_or_times_out() {
        let fixture = FixtureSwitch::new("tor", vec![p("Gi0/1"), p("Gi0/2"), p("Gi0/3")]);
        let device = Arc::new(HoldingDevice {
            fixture: fixture.clone(),
            held: Mutex::new(None),
        });
        let worker = Arc::new(SwitchWorker::spawn(
            device.clone(),
            config(),
            Vec::new(),
            Arc::new(|_| {}),
        ));
        let hold = |token: &str, secs: u64| Hold {
            token: token.into(),
            timeout: Duration::from_secs(secs),
            follow_up: false,
        };
        let wave = |port: &str, vlan: u16, h: Hold| {
            let (worker, key) = (worker.clone(), key(port));
            let op = PortOperation::Set(access(port, vlan));
            async move {
                loop {
                    match worker.hand_off_held(&key, op.clone(), Some(h.clone())) {
                        HandOff::Done(r) => return r,
                        HandOff::InFlight => tokio::time::sleep(Duration::from_millis(10)).await,
                    }
                }
            }
        };
        // The wave's port is held on the device.
        wave("Gi0/1", 20, hold("cfg.1.1", 60)).await.unwrap();
        assert_eq!(device.held.lock().as_deref(), Some("cfg.1.1"));
        // Another port's write and another wave's wait behind it; the same wave's
        // next port joins it (a follow-up).
        let other = tokio::spawn({
            let worker = worker.clone();
            async move {
                worker
                    .apply(None, PortOperation::Set(access("Gi0/2", 30)))
                    .await
            }
        });
        let second = tokio::spawn(wave("Gi0/3", 40, hold("cfg2.1.1", 60)));
        wave("Gi0/2", 20, hold("cfg.1.1", 60)).await.unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!other.is_finished() && !second.is_finished());
        let vlan = |port: &str| match fixture.port_state(&p(port)).and_then(|s| s.vlans) {
            Some(patchbay_providers::VlanMode::Access { vlan }) => Some(vlan.get()),
            _ => None,
        };
        assert_eq!(vlan("Gi0/3"), None, "the other wave waits");
        // Settled: the writes behind it go, in order — the other port, then the
        // other wave (held in its turn).
        assert_eq!(
            worker.settle_hold("cfg.1.1", true).await.unwrap(),
            Settled::Confirmed
        );
        other.await.unwrap().unwrap();
        second.await.unwrap().unwrap();
        assert_eq!(vlan("Gi0/2"), Some(30));
        assert_eq!(vlan("Gi0/3"), Some(40));
        assert_eq!(device.held.lock().as_deref(), Some("cfg2.1.1"));
        // Asked again (a status write lost after it), the same answer.
        assert_eq!(
            worker.settle_hold("cfg.1.1", true).await.unwrap(),
            Settled::Confirmed
        );
        // A hold nobody settles: once its timeout (and margin) passes, the device
        // has taken it back and the writes behind it go.
        *device.held.lock() = None;
        wave("Gi0/1", 21, hold("cfg.2.1", 1)).await.unwrap();
        let started = std::time::Instant::now();
        *device.held.lock() = None; // the device's own timeout
        worker
            .apply(None, PortOperation::Set(access("Gi0/2", 31)))
            .await
            .unwrap();
        assert!(
            started.elapsed() >= Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
    }

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
        let fixture = FixtureSwitch::new("tor", vec![p("Gi0/1"), p("Gi0/2"), p("Gi0/3")]);
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

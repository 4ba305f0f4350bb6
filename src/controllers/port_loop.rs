//! The state-machine loop every port runs — SwitchPorts, SmartNicPorts, and the port
//! `patchbay demo --walk` takes through its life: ask [`decide`] what to do, write
//! the new state *before* acting (an operator killed mid-apply resumes in
//! Configuring and applies again), act, feed the outcome back, until there is
//! nothing to do; then write the status once, only if it changed.
//!
//! A reconcile reads as four stages: **dereference** (the kind's controller reads
//! what the port refers to from the caches), **validate** (pure: names, the
//! provider's settings and role), **acquire** the device (find or start the
//! switch's worker), together a [`PreparedPort`], then **drive** ([`drive_port`]).
//! The steps hold the prepared port — the device handle, the device port name, the
//! desired state — and never validate again.
//!
//! The loop does no I/O of its own. It reaches the device through [`PortSteps`]
//! (implemented per kind of port over its switch's worker) and the port object
//! through [`PortRecord`] (the API server for the operator, memory for the walk).
//! Failures carry their retry time in status; a [`StatusLedger`] keeps what this
//! process wrote last, so that a reconcile reading a cached copy from before that
//! write waits for the fresh one instead of acting again (applying a port twice, or
//! retrying too early).

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use patchbay_providers::values::{PortName, VlanId};
use patchbay_providers::{Capabilities, DesiredPort, Hold, PortOperation, diff};

use super::ControllerError;
use crate::api::{DriftPolicy, PortState, PortStatus};
use crate::decide::failure::Failure;
use crate::decide::reachability::Outage;
use crate::decide::slack;
use crate::decide::state_machine::{
    AppliedChange, Backoff, Health, Outcome, PortFacts, PortTarget, Requeue, Step, decide,
};
use crate::decide::status::{Severity, StatusFacts, find_condition, port_status};
use crate::metrics::{CategoryLabel, KindLabel, Metrics, TransitionLabels};
use crate::worker::{HandOff, PortKey, SwitchWorker};

/// The name a parking VLAN gets when patchbay creates it on a device.
pub const PARKING_VLAN_NAME: &str = "patchbay-parking";

/// A parked port: the clean definition (no ACL, description, MTU or LAG; up, so
/// LLDP keeps working) but an access port on the parking VLAN, which no namespace
/// is granted: the host behind it reaches nothing and receives no tenant's frames,
/// and an access port does not become a trunk.
pub fn parked(port: PortName, vlan: VlanId) -> DesiredPort {
    let mut d = DesiredPort::clean(port);
    d.vlans = patchbay_providers::VlanMode::Access { vlan };
    if let Ok(name) = patchbay_providers::values::VlanName::parse(PARKING_VLAN_NAME) {
        d.vlan_names.insert(vlan, name);
    }
    d
}

/// A port's switch, as its steps use it: the worker that owns the device, and what
/// the device can configure.
#[derive(Clone)]
pub struct DeviceHandle {
    /// The switch's worker (one writer per switch).
    pub worker: Arc<SwitchWorker>,
    /// What the backend can configure on the device.
    pub capabilities: Capabilities,
}

/// A port's inputs, validated and its device acquired once per reconcile, before
/// the loop runs.
///
/// Each part is its own `Result` rather than the whole being one: cleaning needs the
/// device and the port's name while its configuration is invalid or gone, and an
/// Idle port with no configuration needs neither. A step takes the part it needs and
/// fails with that part's error; the errors are the ones the steps reported before
/// (a device error first, as `apply` checked the device before the configuration).
#[derive(Clone)]
pub struct PreparedPort {
    /// The port's name on the device.
    pub device_port: Result<PortName, Failure>,
    /// The port's switch: its worker and what the backend can configure.
    pub device: Result<DeviceHandle, Failure>,
    /// The desired device state of the linked configuration, checked against what
    /// the device can configure (the device's error when there is no device).
    pub desired: Result<DesiredPort, Failure>,
    /// The rollout wave the port's change belongs to, held on the device until the
    /// wave's gate where the device can hold it ([`crate::worker::SwitchWorker::hand_off_held`]).
    pub hold: Option<Hold>,
}

impl PreparedPort {
    /// Validates the desired state against the device's capabilities: `desired` runs
    /// only when there is a device.
    pub fn new(
        device_port: Result<PortName, Failure>,
        device: Result<DeviceHandle, Failure>,
        desired: impl FnOnce(&Capabilities) -> Result<DesiredPort, Failure>,
    ) -> Self {
        let desired = match &device {
            Ok(d) => desired(&d.capabilities),
            Err(e) => Err(e.clone()),
        };
        Self {
            device_port,
            device,
            desired,
            hold: None,
        }
    }

    /// The same, its change held under `hold` (a rollout wave's).
    pub fn held(mut self, hold: Option<Hold>) -> Self {
        self.hold = hold;
        self
    }
}

/// Whether a change handed to the switch's worker has been answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    /// The worker answered: the change is on the device, read back.
    Done,
    /// Handed off; the worker's answer wakes the port.
    HandedOff,
}

impl Progress {
    /// The step's outcome: `done` once answered, [`Outcome::HandedOff`] before.
    pub fn outcome(self, done: Outcome) -> Outcome {
        match self {
            Progress::Done => done,
            Progress::HandedOff => Outcome::HandedOff,
        }
    }
}

/// Hands `op` to the port's worker: done (the answer's failure is the step's), or
/// still with the worker.
fn hand_off(
    device: &DeviceHandle,
    key: &PortKey,
    op: PortOperation,
    hold: Option<Hold>,
) -> Result<Progress, Failure> {
    match device.worker.hand_off_held(key, op, hold) {
        HandOff::InFlight => Ok(Progress::HandedOff),
        HandOff::Done(result) => {
            result?;
            Ok(Progress::Done)
        }
    }
}

/// What a kind of port does on its device for the state machine's steps. `apply`,
/// `clean` and `verify` are provided on top of the two required methods; a kind
/// overrides them only where it differs (a SmartNicPort also chains its next port).
#[allow(async_fn_in_trait)]
pub trait PortSteps {
    /// The port's inputs, validated once for this reconcile.
    fn validated(&self) -> &PreparedPort;
    /// The key the worker knows the port under (drift sweeps, notices).
    fn key(&self) -> &PortKey;

    /// The port's switch, as validated.
    fn device(&self) -> Result<DeviceHandle, Failure> {
        self.validated().device.clone()
    }

    /// The device and the desired state on it, as validated (the device's error
    /// first).
    fn device_and_desired(&self) -> Result<(DeviceHandle, DesiredPort), Failure> {
        let v = self.validated();
        Ok((v.device.clone()?, v.desired.clone()?))
    }

    /// The parking VLAN (tenancy on): clean parks the port on it instead of
    /// resetting it to the device default, which is open to every VLAN (an OVS port
    /// without `tag` and `trunks`, a Cisco port back in VLAN 1).
    fn parking(&self) -> Option<VlanId> {
        None
    }

    /// Applies the desired configuration, verified by read-back: handed to the
    /// switch's worker ([`Outcome::HandedOff`] until its answer wakes the port).
    /// A moving port leaves its old device port first ([`Self::move_off`]).
    async fn apply(&self) -> Result<Outcome, Failure> {
        if self.move_off()? == Progress::HandedOff {
            return Ok(Outcome::HandedOff);
        }
        let (device, desired) = self.device_and_desired()?;
        Ok(self
            .set_on_device(&device, desired)?
            .outcome(Outcome::Applied))
    }

    /// Returns the port to clean, verified by read-back (handed off as `apply`); a
    /// moving port cleans the device port it leaves first.
    async fn clean(&self) -> Result<Outcome, Failure> {
        if self.move_off()? == Progress::HandedOff {
            return Ok(Outcome::HandedOff);
        }
        Ok(self.reset_on_device()?.outcome(Outcome::Cleaned))
    }

    /// A moving port ([`DriveInput::moving`]) cleans the device port it leaves,
    /// verified by read-back, before its step touches the new one: done (or nothing
    /// to leave), or still with the worker. Only a SwitchPort moves.
    fn move_off(&self) -> Result<Progress, Failure> {
        Ok(Progress::Done)
    }

    /// Reads the port back and compares it with the applied configuration.
    async fn verify(&self) -> Result<Outcome, Failure> {
        Ok(if self.device_matches().await? {
            Outcome::InSync
        } else {
            Outcome::Drifted
        })
    }

    /// Hands `desired` to the worker; once it is answered, keeps the port in the
    /// drift sweep.
    fn set_on_device(
        &self,
        device: &DeviceHandle,
        desired: DesiredPort,
    ) -> Result<Progress, Failure> {
        let progress = hand_off(
            device,
            self.key(),
            PortOperation::Set(desired.clone()),
            self.validated().hold.clone(),
        )?;
        if progress == Progress::Done {
            device.worker.track(self.key().clone(), Some(desired));
            device.worker.settle(self.key(), false);
        }
        Ok(progress)
    }

    /// Hands the port's reset to the worker (out of the drift sweep first): to the
    /// device default, or parked ([`parked`]) when a parking VLAN is set.
    fn reset_on_device(&self) -> Result<Progress, Failure> {
        self.reset_device_port(self.validated().device_port.clone()?)
    }

    /// [`Self::reset_on_device`] of `port`, a device port of the port's switch (the
    /// one a moving port leaves, or its own).
    fn reset_device_port(&self, port: PortName) -> Result<Progress, Failure> {
        let device = self.device()?;
        device.worker.track(self.key().clone(), None);
        let operation = match self.parking() {
            Some(vlan) => PortOperation::Set(parked(port, vlan)),
            None => PortOperation::Reset(port),
        };
        hand_off(&device, self.key(), operation, None)
    }

    /// Whether the port's last drift check found its device port drifted (an apply
    /// now is a repair, also when the check was an earlier reconcile's).
    fn known_drifted(&self) -> bool {
        self.device()
            .is_ok_and(|d| d.worker.known_drifted(self.key()))
    }

    /// The port entered a new state: what it handed off in the last one is not
    /// its answer any more.
    fn new_state(&self) {
        if let Ok(device) = &self.validated().device {
            device.worker.forget_hand_off(self.key());
        }
    }

    /// Whether the device port reads back as the desired state.
    async fn device_matches(&self) -> Result<bool, Failure> {
        let (device, desired) = self.device_and_desired()?;
        let observed = device
            .worker
            .read(Some(self.key()), desired.port.clone())
            .await?;
        let matches = diff(&desired, &observed).is_empty();
        device.worker.track(self.key().clone(), Some(desired));
        device.worker.settle(self.key(), !matches);
        Ok(matches)
    }

    /// The port's drift was just repaired: how many times it was within the
    /// worker's repair window ([`crate::worker::REPAIR_WINDOW`]).
    fn repaired(&self) -> usize {
        self.device()
            .map(|d| d.worker.record_repair(self.key()))
            .unwrap_or(0)
    }

    /// The loop ended in Active: keep the port in its switch's drift sweep.
    fn track_active(&self) {
        if let Ok((device, desired)) = self.device_and_desired() {
            device.worker.track(self.key().clone(), Some(desired));
        }
    }

    /// What the last [`Outcome::Waiting`] waits for.
    fn waiting(&self) -> Option<String> {
        None
    }

    /// The device port a moving port ([`DriveInput::moving`]) now stands on, once
    /// the one it left is clean (or another port's to write): from then on its status
    /// names this one.
    fn moved_to(&self) -> Option<String> {
        None
    }
}

/// The port object the loop records its progress on.
#[allow(async_fn_in_trait)]
pub trait PortRecord {
    /// Writes `new` over `old` (nothing when they are equal).
    async fn write_status(&self, old: &PortStatus, new: &PortStatus)
    -> Result<(), ControllerError>;
    /// Adds (`true`) or removes the cleanup finalizer.
    async fn set_finalizer(&self, present: bool) -> Result<(), ControllerError>;
    /// Publishes an Event about the port (best effort).
    async fn publish(&self, severity: Severity, reason: &str, note: &str);
    /// The port is healthy or gone: its open Warning series end.
    fn forget_events(&self);
    /// Whether the cache already holds a newer copy of the port than the one this
    /// reconcile read. The [`StatusLedger`] alone cannot tell once the echo of the
    /// port's own last write has arrived: the echo takes the ledger's entry away
    /// (the cache shows the write), so a reconcile that read its copy before the
    /// echo and checks the ledger after it would act on the old copy (a port applied
    /// again on a busy operator: `tests/production.rs`, two replicas, under load).
    fn superseded(&self) -> bool {
        false
    }
}

/// What the loop needs to know about the port object.
#[derive(Debug, Clone)]
pub struct PortMeta {
    /// Kind, for logs (`SwitchPort`, `SmartNicPort`).
    pub kind: &'static str,
    /// The object's uid (the ledger's key).
    pub uid: String,
    /// `metadata.generation`.
    pub generation: Option<i64>,
    /// Whether the cleanup finalizer is on it.
    pub has_finalizer: bool,
    /// Whether `metadata.deletionTimestamp` is set.
    pub deletion_requested: bool,
}

/// One run of the loop for one port.
#[derive(Clone)]
pub struct DriveInput {
    /// The port object.
    pub meta: PortMeta,
    /// Its status as read.
    pub old_status: PortStatus,
    /// The status to write (resolved fields such as `switch` and `devicePort` filled
    /// in).
    pub status: PortStatus,
    /// What the port should carry.
    pub desired: Option<PortTarget>,
    /// The digest of every input of the port (see [`PortFacts::inputs`]).
    pub inputs: String,
    /// The switch's outage, when its worker finds it not answering.
    pub outage: Option<Outage>,
    /// The Switch's drift policy.
    pub drift_policy: DriftPolicy,
    /// Whether the port may be deleted without touching the device.
    pub skip_cleanup: bool,
    /// Whether a drift check is due (the worker's notice).
    pub drift_check_due: bool,
    /// Whether the port moves to another device port
    /// ([`crate::decide::port_move`]): `status.devicePort` names the one it leaves
    /// until [`PortSteps::moved_to`] says it left.
    pub moving: bool,
    /// The hash of the Switch port entry the port reads now (a SwitchPort's,
    /// [`crate::api::SwitchPortDefinition::entry_hash`]): recorded in
    /// `status.entryHash` with each apply; a port Active with another one applies
    /// again.
    pub entry: Option<String>,
    /// The configuration kind, for status messages.
    pub config_kind: &'static str,
    /// The backoff settings.
    pub backoff: Backoff,
}

/// A port's failures: count, attempt key, last failure and retry time.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct FailureRecord {
    failures: u32,
    last_attempt: Option<String>,
    last_failure: Option<jiff::Timestamp>,
    next_retry: Option<jiff::Timestamp>,
}

impl FailureRecord {
    fn of(status: &PortStatus) -> Self {
        Self {
            failures: status.failure_count.unwrap_or(0).max(0) as u32,
            last_attempt: status.last_attempt.clone(),
            last_failure: status.last_failure_time.as_ref().map(|t| t.0),
            next_retry: status.next_retry_time.as_ref().map(|t| t.0),
        }
    }
}

/// What a port's status says of the state machine: the state, the second it was
/// entered (as status stores it) and the failures.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Written {
    state: Option<PortState>,
    since: Option<i64>,
    failures: FailureRecord,
}

impl Written {
    fn of(status: &PortStatus) -> Self {
        Self {
            state: status.state,
            since: stored(status.last_transition_time.as_ref().map(|t| t.0)),
            failures: FailureRecord::of(status),
        }
    }

    /// Whether `read` shows this (to the precision status stores).
    fn shown_by(&self, read: &Written) -> bool {
        let (mine, theirs) = (&self.failures, &read.failures);
        self.state == read.state
            && self.since == read.since
            && mine.failures == theirs.failures
            && mine.last_attempt == theirs.last_attempt
            && stored(mine.last_failure) == stored(theirs.last_failure)
    }
}

/// The status this process wrote last, per port object (by uid: a port deleted and
/// created again starts afresh). A reconcile may read a cached object that does not
/// show its own latest status write yet — a trigger queued while the write was
/// being made runs before the write's watch event arrives. Acting on it would run
/// the step again (a port applied twice), retry too early, or write back what the
/// write replaced. So a reconcile that finds the ledger ahead of the status does
/// nothing and waits for the fresh object (its own write's watch event brings it).
/// An entry goes once a read shows it.
#[derive(Default)]
pub struct StatusLedger(Mutex<HashMap<String, Entry>>);

/// What the ledger holds per port: the status written, when, and whether a
/// reconcile found the cache behind it (and waits for the write's watch event).
struct Entry {
    written: Written,
    at: std::time::Instant,
    waited: bool,
}

/// A cache is never this far behind; an older ledger entry is not trusted (someone
/// may have edited the status by hand). Not shorter: at 100,000 ports a saturated
/// operator's cache lagged more than the 10 s this was, every port whose entry
/// expired acted on its old status again (re-applied, wrote the same transition and
/// its Event again), and that extra work made the cache lag more — 907,039 status
/// writes and 499,906 Events for 12,430 ports Active in 600 s.
const LEDGER_TRUST: std::time::Duration = std::time::Duration::from_secs(60);

/// A time as status stores it: whole seconds.
fn stored(t: Option<jiff::Timestamp>) -> Option<i64> {
    t.map(|t| t.as_second())
}

impl StatusLedger {
    fn map(&self) -> parking_lot::MutexGuard<'_, HashMap<String, Entry>> {
        self.0.lock()
    }

    /// Whether this process recently wrote a status for `key` that `read` does not
    /// show yet (it was read from a cache that is behind).
    fn is_ahead_of(&self, key: &str, read: &Written) -> bool {
        let mut map = self.map();
        let Some(entry) = map.get_mut(key) else {
            return false;
        };
        let mine = &entry.written;
        if mine.shown_by(read) || entry.at.elapsed() >= LEDGER_TRUST {
            slack::remove(&mut map, key);
            return false;
        }
        // A status newer than this process's write is somebody else's: not behind.
        let behind = mine.since >= read.since
            && stored(mine.failures.last_failure) >= stored(read.failures.last_failure);
        entry.waited |= behind;
        behind
    }

    /// Notes that `written` was written for `key`.
    fn record(&self, key: &str, written: Written) {
        let entry = Entry {
            written,
            at: std::time::Instant::now(),
            waited: false,
        };
        self.map().insert(key.to_owned(), entry);
    }

    /// The port's watch brought `read`, the echo of this process's own write, which
    /// wakes no reconcile ([`crate::decide::own_writes`]). The entry it shows goes
    /// here instead of at that reconcile. Returns whether a reconcile found the cache
    /// behind that write and waits for it: then the echo must wake the port after all
    /// (else it would wait for the stale-read retry, 2 s).
    pub fn seen(&self, key: &str, read: Option<&PortStatus>) -> bool {
        let Some(read) = read else {
            return false;
        };
        let mut map = self.map();
        match map.get(key) {
            Some(entry) if entry.written.shown_by(&Written::of(read)) => {
                slack::remove(&mut map, key).is_some_and(|e| e.waited)
            }
            _ => false,
        }
    }

    /// The port is gone: nothing to wait for.
    fn forget(&self, key: &str) {
        slack::remove(&mut self.map(), key);
    }
}

/// When to look again at a port whose cache already holds a newer copy than the
/// reconcile read ([`PortRecord::superseded`]): the copy is there, so soon.
const SUPERSEDED_RETRY: std::time::Duration = std::time::Duration::from_millis(100);

/// Repairs of one port within [`crate::worker::REPAIR_WINDOW`] from which each
/// repair also publishes a `DriftRepeated` Warning: two tools fighting over a port.
pub const REPEATED_DRIFT: usize = 3;

/// When to look again at a port whose cached copy is behind this process's own write
/// (the write's watch event normally comes first, and wakes the port: this is only a
/// safety net; a 200 ms retry turned a busy operator's lagging cache into a loop of
/// reconciles at 10,000 ports).
const STALE_READ_RETRY: std::time::Duration = std::time::Duration::from_secs(2);

/// Runs the state machine for one port until there is nothing left to do. Returns
/// when to come back.
pub async fn drive_port(
    input: DriveInput,
    steps: &impl PortSteps,
    record: &impl PortRecord,
    ledger: &StatusLedger,
    metrics: &Metrics,
) -> Result<Requeue, ControllerError> {
    let DriveInput {
        meta,
        old_status,
        mut status,
        desired,
        inputs,
        mut outage,
        drift_policy,
        skip_cleanup,
        mut drift_check_due,
        mut moving,
        entry,
        config_kind,
        backoff,
    } = input;
    let generation = meta.generation;
    let mut state = status.state;
    let mut applied: Option<PortTarget> =
        match (&status.configuration_ref, &status.configuration_hash) {
            (Some(r), Some(h)) => Some(PortTarget {
                configuration: r.clone(),
                hash: h.clone(),
            }),
            _ => None,
        };
    let mut has_finalizer = meta.has_finalizer;
    // What the object holds as far as this reconcile knows: the status read, then
    // each status it wrote (the last write compares with it, so a transition
    // written before its step is not written again unchanged).
    let mut written = old_status.clone();
    if ledger.is_ahead_of(&meta.uid, &Written::of(&status)) {
        tracing::debug!(
            "the cached port is behind this process's last status write; waiting for it"
        );
        return Ok(Requeue::After(STALE_READ_RETRY));
    }
    // After the ledger: an echo that arrives between the two checks leaves either
    // the ledger's entry (first check) or the newer copy in the cache (this one).
    if record.superseded() {
        tracing::debug!(
            "the cache holds a newer copy of the port than this reconcile read; reading it again"
        );
        return Ok(Requeue::After(SUPERSEDED_RETRY));
    }
    let FailureRecord {
        mut failures,
        mut last_attempt,
        mut last_failure,
        mut next_retry,
    } = FailureRecord::of(&status);
    let mut outcome: Option<Outcome> = None;
    let mut failure: Option<Failure> = None;
    let mut waiting: Option<String> = None;
    let mut drift_reported =
        find_condition(&old_status.conditions, "Drifted").is_some_and(|c| c.status == "True");
    let mut decision = None;
    let mut removed = false;
    // The drift check of this reconcile found the device differing.
    let mut drifted = false;
    // The status from everything known so far, for the decision's health.
    macro_rules! fill_status {
        ($health:expr, $now:expr) => {
            port_status(
                &mut status,
                &StatusFacts {
                    generation,
                    applied: applied.as_ref(),
                    failures,
                    last_attempt: &last_attempt,
                    last_failure,
                    next_retry,
                    health: $health,
                    failure: failure.as_ref(),
                    waiting: waiting.as_deref(),
                    outage: outage.as_ref(),
                    drift_policy,
                    kind: config_kind,
                    now: $now,
                },
            )
        };
    }
    for _ in 0..12 {
        let now = jiff::Timestamp::now();
        let facts = PortFacts {
            state,
            has_finalizer,
            deletion_requested: meta.deletion_requested,
            skip_device_cleanup: skip_cleanup,
            desired: desired.as_ref(),
            applied: applied.as_ref(),
            inputs: &inputs,
            failures,
            last_attempt: last_attempt.as_deref(),
            last_failure,
            next_retry,
            switch_outage: outage.as_ref().map(|o| o.timing),
            now,
            drift_check_due,
            drift_reported,
            drift_policy,
            backoff,
            park_new: steps.parking().is_some(),
            moving,
            entry_changed: entry.is_some()
                && status.entry_hash.is_some()
                && status.entry_hash != entry,
            outcome,
        };
        let mut d = decide(&facts);
        // A look past the backoff's cap takes its turn in the operator's one budget.
        if let Some(floor) = d.budgeted {
            let at = super::runtime::RECHECKS
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .grant(now, floor);
            d = d.paid(at, now);
        }
        tracing::debug!(?state, outcome = ?facts.outcome, drift_check_due, next = %d.state, step = ?d.step, health = ?d.health, "decision");
        failures = d.failures;
        last_attempt = d.attempt.clone();
        last_failure = d.last_failure;
        next_retry = d.next_retry;
        drift_reported = d.health == Health::Drifted;
        match d.applied {
            AppliedChange::Keep => {}
            AppliedChange::SetToDesired => {
                applied = desired.clone();
                status.entry_hash.clone_from(&entry);
            }
            AppliedChange::Clear => {
                applied = None;
                status.entry_hash = None;
            }
        }
        // A port applied before entries were recorded: the read-back in sync
        // shows the device carries what this entry gives.
        if outcome == Some(Outcome::InSync) && status.entry_hash.is_none() {
            status.entry_hash.clone_from(&entry);
        }
        if state != Some(d.state) {
            let from = state.map_or("(none)".to_owned(), |s| s.to_string());
            tracing::info!(from = %from, to = %d.state, kind = meta.kind, "port state");
            metrics
                .transitions
                .get_or_create(&TransitionLabels {
                    from: from.clone(),
                    to: d.state.to_string(),
                })
                .inc();
            status.state = Some(d.state);
            status.last_transition_time = Some(Time(now));
            state = Some(d.state);
            steps.new_state();
            fill_status!(d.health, now);
            // Write the state before changing the device: a restarted operator
            // resumes from it. Other transitions are written once, at the end of the
            // reconcile (at 10,000 ports, one status write per port saved).
            if matches!(d.step, Step::Apply | Step::Clean) {
                record.write_status(&written, &status).await?;
                ledger.record(&meta.uid, Written::of(&status));
                written = status.clone();
            }
            // One Event where the work ends, not one where it starts.
            if !d.state.is_in_progress() {
                record
                    .publish(
                        Severity::Normal,
                        &d.state.to_string(),
                        &format!("{from} -> {}", d.state),
                    )
                    .await;
            }
        }
        drift_check_due = false;
        let step = d.step;
        decision = Some(d.clone());
        if step == Step::None {
            if d.requeue == Requeue::Now {
                outcome = None;
                continue;
            }
            break;
        }
        let result = match step {
            Step::None => Ok(Outcome::InSync),
            Step::AddFinalizer => {
                record.set_finalizer(true).await?;
                Ok(Outcome::FinalizerAdded)
            }
            Step::RemoveFinalizer => {
                record.set_finalizer(false).await?;
                Ok(Outcome::FinalizerRemoved)
            }
            Step::Apply => {
                // The drift this apply repairs may have been found by an earlier
                // reconcile (the apply was handed off in between).
                drifted |= steps.known_drifted();
                steps.apply().await
            }
            Step::Clean => steps.clean().await,
            Step::Verify => steps.verify().await,
        };
        waiting = None;
        if moving && let Some(to) = steps.moved_to() {
            let from = status.device_port.replace(to.clone()).unwrap_or_default();
            tracing::info!(from = %from, to = %to, "port moved to its entry's device port");
            record
                .publish(
                    Severity::Normal,
                    "Moved",
                    &format!("moved from device port {from} to {to}"),
                )
                .await;
            moving = false;
        }
        match result {
            Ok(o) => {
                // A drift this reconcile (or an earlier report) found, applied again.
                if (drifted || drift_reported) && o == Outcome::Applied {
                    metrics
                        .drift_repaired
                        .get_or_create(&KindLabel { kind: meta.kind })
                        .inc();
                    drifted = false;
                    let times = steps.repaired();
                    if times >= REPEATED_DRIFT {
                        record
                            .publish(
                                Severity::Warning,
                                "DriftRepeated",
                                &format!(
                                    "the device port was changed behind patchbay's back and \
                                     put back {times} times in the last {} minutes: another \
                                     tool or person keeps configuring it",
                                    crate::worker::REPAIR_WINDOW.as_secs() / 60
                                ),
                            )
                            .await;
                    }
                }
                drifted |= o == Outcome::Drifted;
                outcome = Some(o);
                failure = None;
                match o {
                    Outcome::FinalizerAdded => has_finalizer = true,
                    Outcome::FinalizerRemoved => {
                        has_finalizer = false;
                        removed = true;
                    }
                    Outcome::Waiting => waiting = steps.waiting(),
                    _ => {}
                }
            }
            Err(f) => {
                if let Some(o) = f.outage() {
                    outage = Some(o.clone());
                }
                outcome = Some(Outcome::Failed(f.retry()));
                tracing::warn!(category = f.category(), error = %f, "port step failed");
                metrics
                    .failures
                    .get_or_create(&CategoryLabel {
                        category: f.category(),
                    })
                    .inc();
                record
                    .publish(Severity::Warning, f.category(), &f.to_string())
                    .await;
                failure = Some(f);
            }
        }
    }
    let Some(d) = decision else {
        return Ok(Requeue::Never);
    };
    if removed {
        ledger.forget(&meta.uid);
        record.forget_events();
        return Ok(Requeue::Never);
    }
    // Active ports are watched by their switch's drift sweep.
    if state == Some(PortState::Active) {
        steps.track_active();
    }
    if d.health == Health::Steady {
        record.forget_events();
    }
    // A port that starts waiting for a switch that does not answer says so once (an
    // Active port does not: its configuration is believed to be in place, and the
    // Switch carries the Warning).
    if let (Health::SwitchDown, None, Some(o)) = (d.health, &failure, &outage)
        && state != Some(PortState::Active)
        && find_condition(&old_status.conditions, "Ready").map(|c| c.reason.as_str())
            != Some(o.error.category())
    {
        record
            .publish(Severity::Warning, o.error.category(), &o.error.to_string())
            .await;
    }
    fill_status!(d.health, jiff::Timestamp::now());
    if status != written {
        record.write_status(&written, &status).await?;
        ledger.record(&meta.uid, Written::of(&status));
    }
    Ok(d.requeue)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(nanos: i128) -> jiff::Timestamp {
        jiff::Timestamp::from_nanosecond(nanos).unwrap()
    }

    fn failing(failures: u32, at_nanos: i128) -> Written {
        Written {
            state: Some(PortState::Configuring),
            since: Some(1_799_999_000),
            failures: FailureRecord {
                failures,
                last_attempt: Some("apply/abc".into()),
                last_failure: Some(at(at_nanos)),
                next_retry: None,
            },
        }
    }

    fn in_state(state: PortState, since_nanos: i128) -> Written {
        Written {
            state: Some(state),
            since: stored(Some(at(since_nanos))),
            failures: FailureRecord::default(),
        }
    }

    #[test]
    fn the_ledger_knows_when_a_cached_failure_is_behind_its_own_write() {
        let ledger = StatusLedger::default();
        let written = failing(2, 1_800_000_000_123_456_789);
        ledger.record("uid-1", written.clone());
        // A cached status from before the write: behind.
        assert!(ledger.is_ahead_of("uid-1", &failing(1, 1_799_999_990_000_000_000)));
        assert!(ledger.is_ahead_of("uid-1", &Written::default()));
        // A newer status (written after, by someone else): not behind.
        assert!(!ledger.is_ahead_of("uid-1", &failing(3, 1_800_000_030_000_000_000)));
        // The status as stored reads the same failure to the second: not behind, and
        // the entry has served.
        assert!(!ledger.is_ahead_of("uid-1", &failing(2, 1_800_000_000_000_000_000)));
        assert!(!ledger.is_ahead_of("uid-1", &Written::default()));
        // Another port: nothing recorded.
        assert!(!ledger.is_ahead_of("uid-2", &Written::default()));
    }

    #[test]
    fn the_echo_of_a_write_wakes_the_port_only_when_a_reconcile_waits_for_it() {
        let ledger = StatusLedger::default();
        let second = 1_800_000_000_000_000_000;
        let status = |state, nanos| PortStatus {
            state: Some(state),
            last_transition_time: Some(Time(at(nanos))),
            ..Default::default()
        };
        ledger.record("uid-1", Written::of(&status(PortState::Active, second)));
        // Nobody waited: the echo wakes nothing, and the entry goes.
        assert!(!ledger.seen("uid-1", Some(&status(PortState::Active, second))));
        assert!(!ledger.is_ahead_of("uid-1", &Written::default()));
        // A reconcile read a copy from before the write, and waits.
        ledger.record(
            "uid-1",
            Written::of(&status(PortState::Configuring, second)),
        );
        assert!(ledger.is_ahead_of("uid-1", &in_state(PortState::Idle, second - 5_000_000_000)));
        // An older write's echo does not show it; the write's own echo wakes the port.
        assert!(!ledger.seen(
            "uid-1",
            Some(&status(PortState::Idle, second - 5_000_000_000))
        ));
        assert!(ledger.seen("uid-1", Some(&status(PortState::Configuring, second))));
        assert!(!ledger.seen("uid-1", Some(&status(PortState::Configuring, second))));
        assert!(!ledger.seen("uid-1", None));
    }

    #[test]
    fn the_ledger_knows_when_a_cached_state_is_behind_its_own_write() {
        // One reconcile wrote Configuring and then Active within the same second; a
        // trigger queued meanwhile reads the copy showing Configuring.
        let ledger = StatusLedger::default();
        let second = 1_800_000_000_000_000_000;
        ledger.record("uid-1", in_state(PortState::Configuring, second + 100));
        ledger.record("uid-1", in_state(PortState::Active, second + 400_000_000));
        assert!(ledger.is_ahead_of("uid-1", &in_state(PortState::Configuring, second)));
        assert!(ledger.is_ahead_of("uid-1", &in_state(PortState::Idle, second - 5_000_000_000)));
        // The copy with the write: not behind, and the entry goes.
        assert!(!ledger.is_ahead_of("uid-1", &in_state(PortState::Active, second)));
        assert!(!ledger.is_ahead_of("uid-1", &in_state(PortState::Configuring, second)));
        // A port deleted is forgotten.
        ledger.record(
            "uid-1",
            in_state(PortState::Cleaning, second + 1_000_000_000),
        );
        ledger.forget("uid-1");
        assert!(!ledger.is_ahead_of("uid-1", &in_state(PortState::Active, second)));
    }
}

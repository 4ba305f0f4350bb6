//! The state-machine loop every port runs — SwitchPorts, SmartNicPorts, and the port
//! `patchbay demo --walk` takes through its life: ask [`decide`] what to do, write
//! the new state *before* acting (an operator killed mid-apply resumes in
//! Configuring and applies again), act, feed the outcome back, until there is
//! nothing to do; then write the status once, only if it changed.
//!
//! The loop does no I/O of its own. It reaches the device through [`PortSteps`]
//! (implemented per kind of port over its switch's worker) and the port object
//! through [`PortRecord`] (the API server for the operator, memory for the walk).
//! Failures carry their retry time in status; a [`FailureLedger`] keeps this
//! process's latest so that a reconcile reading a stale cache waits all the same.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use patchbay_providers::values::PortName;
use patchbay_providers::{Capabilities, DesiredPort, PortOperation, diff};

use super::ControllerError;
use super::failure::Failure;
use super::status::{Severity, StatusFacts, find_condition, port_status};
use crate::api::{DriftPolicy, PortState, PortStatus};
use crate::metrics;
use crate::state_machine::{
    AppliedChange, Backoff, Health, Outcome, PortFacts, PortTarget, Requeue, Step, decide,
};
use crate::worker::{Outage, PortKey, SwitchWorker};

/// A port's switch, as its steps use it: the worker that owns the device, and what
/// the device can configure.
#[derive(Clone)]
pub struct DeviceHandle {
    /// The switch's worker (one writer per switch).
    pub worker: Arc<SwitchWorker>,
    /// What the backend can configure on the device.
    pub capabilities: Capabilities,
}

/// What a kind of port does on its device for the state machine's steps. `apply`,
/// `clean` and `verify` are provided on top of the four required methods; a kind
/// overrides them only where it differs (a SmartNicPort also chains its next port).
#[allow(async_fn_in_trait)]
pub trait PortSteps {
    /// The port's switch, after checking what it needs (provider, backend).
    fn device(&self) -> Result<DeviceHandle, Failure>;
    /// The validated desired device state of the linked configuration.
    fn desired(&self, capabilities: &Capabilities) -> Result<DesiredPort, Failure>;
    /// The port's name on the device.
    fn device_port(&self) -> Result<PortName, Failure>;
    /// The key the worker knows the port under (drift sweeps, notices).
    fn key(&self) -> &PortKey;

    /// Validates and applies the desired configuration, verified by read-back.
    async fn apply(&self) -> Result<Outcome, Failure> {
        let device = self.device()?;
        let desired = self.desired(&device.capabilities)?;
        self.set_on_device(&device, desired).await?;
        Ok(Outcome::Applied)
    }

    /// Returns the port to clean, verified by read-back.
    async fn clean(&self) -> Result<Outcome, Failure> {
        self.reset_on_device().await?;
        Ok(Outcome::Cleaned)
    }

    /// Reads the port back and compares it with the applied configuration.
    async fn verify(&self) -> Result<Outcome, Failure> {
        Ok(if self.device_matches().await? {
            Outcome::InSync
        } else {
            Outcome::Drifted
        })
    }

    /// Applies `desired` through the worker and keeps the port in the drift sweep.
    async fn set_on_device(
        &self,
        device: &DeviceHandle,
        desired: DesiredPort,
    ) -> Result<(), Failure> {
        device
            .worker
            .apply(Some(self.key()), PortOperation::Set(desired.clone()))
            .await?;
        device.worker.track(self.key().clone(), Some(desired));
        Ok(())
    }

    /// Resets the port through the worker (out of the drift sweep first).
    async fn reset_on_device(&self) -> Result<(), Failure> {
        let port = self.device_port()?;
        let device = self.device()?;
        device.worker.track(self.key().clone(), None);
        device
            .worker
            .apply(Some(self.key()), PortOperation::Reset(port))
            .await?;
        Ok(())
    }

    /// Whether the device port reads back as the desired state.
    async fn device_matches(&self) -> Result<bool, Failure> {
        let device = self.device()?;
        let desired = self.desired(&device.capabilities)?;
        let observed = device
            .worker
            .read(Some(self.key()), desired.port.clone())
            .await?;
        let matches = diff(&desired, &observed).is_empty();
        device.worker.track(self.key().clone(), Some(desired));
        Ok(matches)
    }

    /// The loop ended in Active: keep the port in its switch's drift sweep.
    fn track_active(&self) {
        if let Ok(device) = self.device()
            && let Ok(desired) = self.desired(&device.capabilities)
        {
            device.worker.track(self.key().clone(), Some(desired));
        }
    }

    /// What the last [`Outcome::Waiting`] waits for.
    fn waiting(&self) -> Option<String> {
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

/// The failures this process recorded last, per port object (by uid: a port deleted
/// and created again starts afresh). A reconcile may read a cached object that does
/// not show its own latest status write yet: acting on it would retry too early, and
/// writing it would put back the conditions that write replaced. So a reconcile that
/// finds the ledger ahead of the status does nothing and waits for the fresh object
/// (its own write's watch event brings it). Only failing ports are kept.
#[derive(Default)]
pub struct FailureLedger(Mutex<HashMap<String, (FailureRecord, std::time::Instant)>>);

/// A cache is never this far behind; an older ledger entry is not trusted (someone
/// may have edited the status by hand).
const LEDGER_TRUST: std::time::Duration = std::time::Duration::from_secs(10);

/// A time as status stores it: whole seconds.
fn stored(t: Option<jiff::Timestamp>) -> Option<i64> {
    t.map(|t| t.as_second())
}

impl FailureLedger {
    fn map(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<String, (FailureRecord, std::time::Instant)>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether this process recently recorded a failure for `key` that `status`
    /// does not show yet (the status was read from a cache that is behind).
    fn is_ahead_of(&self, key: &str, status: &FailureRecord) -> bool {
        let map = self.map();
        let Some((mine, at)) = map.get(key) else {
            return false;
        };
        let shown = mine.failures == status.failures
            && mine.last_attempt == status.last_attempt
            && stored(mine.last_failure) == stored(status.last_failure);
        !shown
            && at.elapsed() < LEDGER_TRUST
            && stored(mine.last_failure) >= stored(status.last_failure)
    }

    fn record(&self, key: String, record: FailureRecord) {
        if record.failures == 0 {
            self.map().remove(&key);
        } else {
            self.map().insert(key, (record, std::time::Instant::now()));
        }
    }
}

/// When to look again at a port whose cached copy is behind this process's own write
/// (the write's watch event normally comes first).
const STALE_READ_RETRY: std::time::Duration = std::time::Duration::from_millis(200);

/// Runs the state machine for one port until there is nothing left to do. Returns
/// when to come back.
pub async fn drive(
    input: DriveInput,
    steps: &impl PortSteps,
    record: &impl PortRecord,
    ledger: &FailureLedger,
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
    let record_read = FailureRecord::of(&status);
    if ledger.is_ahead_of(&meta.uid, &record_read) {
        tracing::debug!(
            "the cached port is behind this process's last status write; waiting for it"
        );
        return Ok(Requeue::After(STALE_READ_RETRY));
    }
    let FailureRecord {
        mut failures,
        mut last_attempt,
        mut last_failure,
        mut next_retry,
    } = record_read;
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
            outcome,
        };
        let d = decide(&facts);
        tracing::debug!(?state, outcome = ?facts.outcome, drift_check_due, next = %d.state, step = ?d.step, health = ?d.health, "decision");
        failures = d.failures;
        last_attempt = d.attempt.clone();
        last_failure = d.last_failure;
        next_retry = d.next_retry;
        drift_reported = d.health == Health::Drifted;
        match d.applied {
            AppliedChange::Keep => {}
            AppliedChange::SetToDesired => applied = desired.clone(),
            AppliedChange::Clear => applied = None,
        }
        if state != Some(d.state) {
            let from = state.map_or("(none)".to_owned(), |s| s.to_string());
            tracing::info!(from = %from, to = %d.state, kind = meta.kind, "port state");
            metrics::inc(metrics::TRANSITIONS, &[&from, &d.state.to_string()]);
            status.state = Some(d.state);
            status.last_transition_time = Some(Time(now));
            state = Some(d.state);
            fill_status!(d.health, now);
            // Write the state before acting: a restarted operator resumes from it.
            if d.step != Step::RemoveFinalizer {
                record.write_status(&old_status, &status).await?;
            }
            record
                .publish(
                    Severity::Normal,
                    &d.state.to_string(),
                    &format!("{from} -> {}", d.state),
                )
                .await;
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
            Step::Apply => steps.apply().await,
            Step::Clean => steps.clean().await,
            Step::Verify => steps.verify().await,
        };
        waiting = None;
        match result {
            Ok(o) => {
                // A drift this reconcile (or an earlier report) found, applied again.
                if (drifted || drift_reported) && o == Outcome::Applied {
                    metrics::inc(metrics::DRIFT_REPAIRED, &[meta.kind]);
                    drifted = false;
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
                outcome = Some(Outcome::Failed(f.kind()));
                tracing::warn!(category = f.category(), error = %f, "port step failed");
                metrics::inc(metrics::FAILURES, &[f.category()]);
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
    ledger.record(
        meta.uid.clone(),
        FailureRecord {
            failures: if removed { 0 } else { failures },
            last_attempt: last_attempt.clone(),
            last_failure,
            next_retry,
        },
    );
    if removed {
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
    record.write_status(&old_status, &status).await?;
    Ok(d.requeue)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(failures: u32, at_nanos: i128) -> FailureRecord {
        FailureRecord {
            failures,
            last_attempt: Some("apply/abc".into()),
            last_failure: Some(jiff::Timestamp::from_nanosecond(at_nanos).unwrap()),
            next_retry: None,
        }
    }

    #[test]
    fn the_ledger_knows_when_a_cached_status_is_behind_its_own_write() {
        let ledger = FailureLedger::default();
        let written = record(2, 1_800_000_000_123_456_789);
        ledger.record("uid-1".into(), written.clone());
        // The status as stored reads the same failure to the second: not behind.
        let as_stored = record(2, 1_800_000_000_000_000_000);
        assert!(!ledger.is_ahead_of("uid-1", &as_stored));
        // A cached status from before the write: behind.
        assert!(ledger.is_ahead_of("uid-1", &record(1, 1_799_999_990_000_000_000)));
        assert!(ledger.is_ahead_of("uid-1", &FailureRecord::default()));
        // A newer status (written after): not behind.
        assert!(!ledger.is_ahead_of("uid-1", &record(3, 1_800_000_030_000_000_000)));
        // Another port, and a port that stopped failing: nothing recorded.
        assert!(!ledger.is_ahead_of("uid-2", &FailureRecord::default()));
        ledger.record("uid-1".into(), FailureRecord::default());
        assert!(!ledger.is_ahead_of("uid-1", &FailureRecord::default()));
    }
}

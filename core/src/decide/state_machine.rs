//! The SwitchPort state machine (seed 003), as one pure function: [`decide`]. No
//! client, no I/O; the current time is one of the facts.
//!
//! The controller gathers [`PortFacts`] (current state, desired and applied targets,
//! deletion, finalizer, failures, the switch's outage, the time) and calls [`decide`]
//! with `outcome: None` to learn the next state and the [`Step`] to take. It writes
//! the new state *before* it acts (so an operator killed mid-apply resumes in
//! Configuring and applies again), performs the step, and calls [`decide`] again with
//! the [`Outcome`] to learn where the port goes next. It repeats until the step is
//! [`Step::None`], then requeues as the [`Decision`] says.
//!
//! | state | leaves when |
//! |---|---|
//! | (none) | finalizer added → Idle (with a parking VLAN, [`PortFacts::park_new`]: → Cleaning first) |
//! | Idle | configuration set → Configuring; deletion → Deleting; parked and moving → Cleaning |
//! | Configuring | applied and verified → Active (a SmartNicPort also waits for its next port); configuration cleared or deletion → Cleaning |
//! | Active | drift (policy Reconcile), target changed, moving ([`PortFacts::moving`]) or its entry changed ([`PortFacts::entry_changed`]) → Configuring; cleared or deletion → Cleaning |
//! | Cleaning | clean (the device default, or parked on the parking VLAN with tenancy) → Idle, or straight to Deleting when deletion is pending |
//! | Deleting | finalizer removed (the object disappears) |
//!
//! Failures are not a state: the port stays where it is, [`Decision::health`] says why,
//! and nothing touches the device again before the failure's retry time, *whatever
//! woke the reconcile* (an event, the port's own status write, a requeue):
//!
//! - each failure is retried as its class in the one retry policy says
//!   ([`crate::decide::retry`]);
//! - a failure of the port (a rejected command, a read-back that differs, a missing
//!   object) is retried after an exponential backoff from its time (`base` doubling
//!   to `cap`), written to status as `nextRetryTime`; once the backoff reaches its
//!   cap, the retry takes its turn in the operator's one budget
//!   ([`Decision::budgeted`]), as does a refusal by the API server (5 minutes at the
//!   earliest);
//! - an invalid configuration, port or provider is not retried at all: the port waits
//!   for one of its inputs to change;
//! - a switch that does not answer (unreachable, timeout, authentication, host key) is
//!   the switch's failure, not the port's: its worker probes it once per backoff step
//!   for all its ports ([`SwitchOutage`]); a port that needs the device waits for it
//!   and mirrors its failure count and next probe, and an Active port stays Active
//!   (its configuration is believed to be still there) with its readiness unknown.
//!
//! Failures are counted against an attempt key made of the step and the digest of
//! every input of the port ([`PortFacts::inputs`]: its spec, its configuration, its
//! Switch port entry, the ProviderSwitch, the credentials Secret). A change to any of
//! them is a new attempt: the count and the retry time start afresh, at once.

use std::time::Duration;

use jiff::Timestamp;

pub use crate::decide::retry::Retry;
use crate::decide::retry::{Look, look};

use crate::api::{ConfigurationRef, DriftPolicy, PortState};

/// What a port should carry, or carries: a configuration and the hash of its spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortTarget {
    /// The configuration (namespace resolved).
    pub configuration: ConfigurationRef,
    /// SHA-256 of the configuration's spec.
    pub hash: String,
}

/// What the last step achieved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The finalizer was added.
    FinalizerAdded,
    /// The finalizer was removed.
    FinalizerRemoved,
    /// The configuration was applied and read back equal.
    Applied,
    /// The port was reset and read back clean.
    Cleaned,
    /// The drift check read the port back equal.
    InSync,
    /// The drift check found the device differs from the applied configuration.
    Drifted,
    /// The step did its own part but depends on another object that is not there
    /// yet (a SmartNicPort whose next SwitchPort is still Configuring or Cleaning):
    /// stay in the state without counting a failure; that object's watch brings the
    /// port back.
    Waiting,
    /// The step was handed to the switch's worker, which answers later and wakes
    /// the port (`worker`'s "Hand-offs"): stay in the state and keep the attempt's
    /// failure record — the attempt is still going — and look again after the cap
    /// should the wake be lost.
    HandedOff,
    /// The step failed.
    Failed(Retry),
}

/// A switch whose worker found it not answering: the worker probes it again at
/// `next_probe`, once for all its ports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SwitchOutage {
    /// Consecutive failed attempts to reach the switch.
    pub failures: u32,
    /// When the last one failed.
    pub last_failure: Timestamp,
    /// When the worker tries again.
    pub next_probe: Timestamp,
}

/// What the controller must do now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Add the cleanup finalizer.
    AddFinalizer,
    /// Validate the desired configuration, apply it, read it back.
    Apply,
    /// Read the port back and compare with the applied configuration.
    Verify,
    /// Reset the port to clean and read it back.
    Clean,
    /// Remove the cleanup finalizer.
    RemoveFinalizer,
    /// Nothing.
    None,
}

impl Step {
    /// Whether the step talks to the device.
    pub fn touches_device(self) -> bool {
        matches!(self, Step::Apply | Step::Verify | Step::Clean)
    }
}

/// When to reconcile again (besides watch events).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Requeue {
    /// Only when something changes.
    Never,
    /// At once.
    Now,
    /// After this delay (a backoff).
    After(Duration),
    /// After the configured drift-check interval.
    DriftCheck,
}

/// How the port is doing, for its conditions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Health {
    /// In a steady state that matches the spec (Idle without a target, or Active).
    Steady,
    /// Working towards the target.
    Progressing,
    /// Active, but the device differs and the drift policy is report-only.
    Drifted,
    /// The step just failed.
    Failed(Retry),
    /// Waiting out the retry time of an earlier failure: the conditions and the
    /// error stay as that failure left them.
    BackingOff,
    /// The switch does not answer: a port that needs it waits; an Active port is
    /// still believed configured, its readiness is unknown.
    SwitchDown,
}

/// What to record as the applied target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AppliedChange {
    /// Leave it.
    Keep,
    /// Record the desired target as applied.
    SetToDesired,
    /// Clear it (nothing verified applied).
    Clear,
}

/// Backoff settings: the delay doubles from `base` with each consecutive failure, up
/// to `cap`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// Delay after the first failure.
    pub base: Duration,
    /// Longest delay.
    pub cap: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Self {
            base: Duration::from_secs(5),
            cap: Duration::from_secs(300),
        }
    }
}

impl Backoff {
    /// Delay after `failures` consecutive failures (`failures` ≥ 1).
    pub fn delay(&self, failures: u32) -> Duration {
        let exp = failures.saturating_sub(1).min(31);
        let factor = 1u32 << exp;
        self.base.saturating_mul(factor).min(self.cap)
    }

    /// The time to try again after the `failures`-th failure at `at`.
    pub fn retry_at(&self, at: Timestamp, failures: u32) -> Timestamp {
        at.checked_add(self.delay(failures)).unwrap_or(at)
    }
}

/// Everything [`decide`] needs to know.
#[derive(Debug, Clone)]
pub struct PortFacts<'a> {
    /// `status.state` (absent for a new object).
    pub state: Option<PortState>,
    /// Whether our finalizer is on the object.
    pub has_finalizer: bool,
    /// Whether `metadata.deletionTimestamp` is set.
    pub deletion_requested: bool,
    /// Whether the escape-hatch annotation says: delete without touching the device.
    pub skip_device_cleanup: bool,
    /// The target `spec.configuration` resolves to (absent when cleared).
    pub desired: Option<&'a PortTarget>,
    /// The target recorded as applied in status.
    pub applied: Option<&'a PortTarget>,
    /// A digest of every input of the port (its spec, configuration, Switch port
    /// entry, ProviderSwitch, credentials Secret, chained objects): failures belong
    /// to it, so any change starts a new attempt.
    pub inputs: &'a str,
    /// Consecutive failures so far (`status.failureCount`), counted against
    /// `last_attempt`.
    pub failures: u32,
    /// The attempt key the failures were counted against (`status.lastAttempt`).
    pub last_attempt: Option<&'a str>,
    /// When the last failure happened (`status.lastFailureTime`).
    pub last_failure: Option<Timestamp>,
    /// When the failed attempt may be tried again (`status.nextRetryTime`); absent
    /// while failing means: only when an input changes.
    pub next_retry: Option<Timestamp>,
    /// The switch's outage, when its worker finds it not answering.
    pub switch_outage: Option<SwitchOutage>,
    /// The current time.
    pub now: Timestamp,
    /// Whether an Active port's periodic drift check is due.
    pub drift_check_due: bool,
    /// Whether the port is currently reported drifted (policy ReportOnly): it stays
    /// so until a read-back finds the device in sync again.
    pub drift_reported: bool,
    /// The Switch's drift policy.
    pub drift_policy: DriftPolicy,
    /// The backoff settings.
    pub backoff: Backoff,
    /// Whether a port seen for the first time is parked (cleaned onto the parking
    /// VLAN) before it is Idle: with tenancy on, a port nobody configured yet must
    /// not stay open to every VLAN.
    pub park_new: bool,
    /// Whether the port is moving to another device port: its Switch port entry now
    /// names another device port than the one it carries something on
    /// ([`crate::decide::port_move`]). An Active port applies again (on the new device
    /// port, after the old one is cleaned) whatever the drift policy; an Idle port,
    /// parked, is parked there.
    pub moving: bool,
    /// Whether the Switch port entry the port's configuration was applied with
    /// (`status.entryHash`) is not the entry the port now reads (edited, or moved on
    /// by its Switch's rollout): an Active port applies again whatever the drift
    /// policy.
    pub entry_changed: bool,
    /// What the step of the previous decision achieved; `None` to plan.
    pub outcome: Option<Outcome>,
}

/// What [`decide`] says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// The state to write.
    pub state: PortState,
    /// What to do now.
    pub step: Step,
    /// When to come back.
    pub requeue: Requeue,
    /// How the applied target changes.
    pub applied: AppliedChange,
    /// Consecutive failures after this decision.
    pub failures: u32,
    /// The attempt key failures are counted against after this decision.
    pub attempt: Option<String>,
    /// When the last failure happened (absent without failures).
    pub last_failure: Option<Timestamp>,
    /// When a failed attempt is tried again (absent without failures, or while
    /// waiting for an input to change).
    pub next_retry: Option<Timestamp>,
    /// How the port is doing.
    pub health: Health,
    /// A retry the operator's one budget pays for, at this floor
    /// ([`crate::decide::retry::Budget`]): `next_retry` is the floor until the
    /// caller takes its turn ([`Decision::paid`]).
    pub budgeted: Option<Duration>,
}

impl Decision {
    fn new(state: PortState, step: Step, requeue: Requeue, health: Health) -> Self {
        Self {
            state,
            step,
            requeue,
            applied: AppliedChange::Keep,
            failures: 0,
            attempt: None,
            last_failure: None,
            next_retry: None,
            health,
            budgeted: None,
        }
    }

    /// The decision with its retry at `at`, the turn the operator's budget granted
    /// for a look past the backoff's cap ([`Decision::budgeted`]).
    pub fn paid(mut self, at: Timestamp, now: Timestamp) -> Self {
        self.next_retry = Some(at);
        self.requeue = Requeue::After(until(at, now));
        self
    }

    fn applied(mut self, change: AppliedChange) -> Self {
        self.applied = change;
        self
    }

    /// Records the failure numbers of a switch outage.
    fn mirror(mut self, outage: &SwitchOutage) -> Self {
        self.failures = outage.failures;
        self.last_failure = Some(outage.last_failure);
        self.next_retry = Some(outage.next_probe);
        self
    }
}

/// The attempt key a step in `state` works towards: the step and the inputs.
fn attempt_key(state: PortState, facts: &PortFacts<'_>) -> Option<String> {
    let step = match state {
        PortState::Configuring => "apply",
        PortState::Cleaning => "clean",
        PortState::Active => "verify",
        PortState::Idle | PortState::Deleting => return None,
    };
    Some(format!("{step}/{}", facts.inputs))
}

/// Keeps the failures of the current attempt across a plan (a new attempt starts at
/// zero).
fn carry_failures(mut d: Decision, facts: &PortFacts<'_>) -> Decision {
    let key = attempt_key(d.state, facts);
    if key.is_some() && key.as_deref() == facts.last_attempt {
        d.failures = facts.failures;
        if d.failures > 0 {
            d.last_failure = facts.last_failure;
            d.next_retry = facts.next_retry;
        }
    }
    d.attempt = key;
    d
}

/// How long until `at`, from `now` (zero when past).
fn until(at: Timestamp, now: Timestamp) -> Duration {
    Duration::try_from(at.duration_since(now)).unwrap_or(Duration::ZERO)
}

/// Whether `desired` differs from what is applied.
fn target_changed(facts: &PortFacts<'_>) -> bool {
    facts.desired != facts.applied
}

/// The next state and step. See the module documentation.
pub fn decide(facts: &PortFacts<'_>) -> Decision {
    match facts.outcome {
        None => hold(carry_failures(plan(facts), facts), facts),
        Some(outcome) => after(facts, outcome),
    }
}

/// Turns a planned device step into waiting when it may not run yet: the switch
/// does not answer, or an earlier failure's retry time has not come (or never comes
/// before an input changes).
fn hold(mut d: Decision, facts: &PortFacts<'_>) -> Decision {
    if let Some(outage) = &facts.switch_outage {
        if d.state == PortState::Active {
            // Still believed configured: no drift read while the switch is away; the
            // worker's notice brings the port back when it answers again.
            if d.step == Step::Verify {
                d.step = Step::None;
            }
            if d.step == Step::None {
                d.health = Health::SwitchDown;
                return d;
            }
        }
        if d.step.touches_device() {
            let wait = until(outage.next_probe, facts.now).max(facts.backoff.base);
            let mut held = d.mirror(outage);
            held.step = Step::None;
            held.requeue = Requeue::After(wait);
            held.health = Health::SwitchDown;
            return held;
        }
        return d;
    }
    if !d.step.touches_device() || d.failures == 0 {
        return d;
    }
    match d.next_retry {
        None => {
            d.step = Step::None;
            d.requeue = Requeue::Never;
            d.health = Health::BackingOff;
        }
        Some(at) if facts.now < at => {
            d.step = Step::None;
            d.requeue = Requeue::After(until(at, facts.now));
            d.health = Health::BackingOff;
        }
        Some(_) => {}
    }
    d
}

/// Plans from the current state (no step performed yet).
fn plan(facts: &PortFacts<'_>) -> Decision {
    use PortState::*;
    let state = facts.state;
    // Guard: deletion of an object without our finalizer needs nothing from us.
    if facts.deletion_requested && !facts.has_finalizer {
        return Decision::new(Deleting, Step::None, Requeue::Never, Health::Steady);
    }
    // Guard: the finalizer comes first, in every live state.
    if !facts.deletion_requested && !facts.has_finalizer {
        let first = if facts.park_new { Cleaning } else { Idle };
        let next = state.unwrap_or(first);
        let next = if next == Deleting { Idle } else { next };
        return Decision::new(next, Step::AddFinalizer, Requeue::Now, Health::Progressing);
    }
    // Guard: deletion without device cleanup (escape hatch).
    if facts.deletion_requested && facts.skip_device_cleanup {
        return Decision::new(
            Deleting,
            Step::RemoveFinalizer,
            Requeue::Never,
            Health::Progressing,
        );
    }
    let cleaning = || Decision::new(Cleaning, Step::Clean, Requeue::Never, Health::Progressing);
    let configuring = || {
        Decision::new(
            Configuring,
            Step::Apply,
            Requeue::Never,
            Health::Progressing,
        )
    };
    match state {
        None | Some(Idle) => {
            if facts.deletion_requested {
                Decision::new(
                    Deleting,
                    Step::RemoveFinalizer,
                    Requeue::Never,
                    Health::Progressing,
                )
            } else if facts.desired.is_some() {
                configuring()
            } else if facts.moving && state.is_some() {
                cleaning()
            } else {
                Decision::new(Idle, Step::None, Requeue::Never, Health::Steady)
            }
        }
        Some(Configuring) => {
            if facts.deletion_requested || facts.desired.is_none() {
                cleaning()
            } else {
                configuring()
            }
        }
        Some(Active) => {
            if facts.deletion_requested || facts.desired.is_none() {
                cleaning()
            } else if target_changed(facts) || facts.moving || facts.entry_changed {
                configuring()
            } else {
                let health = if facts.drift_reported {
                    Health::Drifted
                } else {
                    Health::Steady
                };
                let step = if facts.drift_check_due {
                    Step::Verify
                } else {
                    Step::None
                };
                Decision::new(Active, step, Requeue::DriftCheck, health)
            }
        }
        Some(Cleaning) => cleaning(),
        Some(Deleting) => Decision::new(
            Deleting,
            Step::RemoveFinalizer,
            Requeue::Never,
            Health::Progressing,
        ),
    }
}

/// Where the port goes after the step of a decision taken in `facts.state`.
fn after(facts: &PortFacts<'_>, outcome: Outcome) -> Decision {
    use PortState::*;
    let state = facts.state.unwrap_or(Idle);
    match outcome {
        Outcome::FinalizerAdded => {
            Decision::new(state, Step::None, Requeue::Now, Health::Progressing)
        }
        Outcome::FinalizerRemoved => {
            Decision::new(Deleting, Step::None, Requeue::Never, Health::Steady)
        }
        Outcome::Applied => Decision::new(Active, Step::None, Requeue::DriftCheck, Health::Steady)
            .applied(AppliedChange::SetToDesired),
        Outcome::InSync => Decision::new(Active, Step::None, Requeue::DriftCheck, Health::Steady),
        Outcome::Drifted => match facts.drift_policy {
            DriftPolicy::Reconcile => {
                // Seed 003: back to Configuring with the applied reference cleared.
                let mut d = Decision::new(
                    Configuring,
                    Step::Apply,
                    Requeue::Never,
                    Health::Progressing,
                )
                .applied(AppliedChange::Clear);
                d.attempt = attempt_key(Configuring, facts);
                d
            }
            DriftPolicy::ReportOnly => {
                Decision::new(Active, Step::None, Requeue::DriftCheck, Health::Drifted)
            }
        },
        Outcome::Waiting => {
            let mut d = Decision::new(
                state,
                Step::None,
                Requeue::After(facts.backoff.cap),
                Health::Progressing,
            );
            d.attempt = attempt_key(state, facts);
            d
        }
        Outcome::HandedOff => {
            let d = carry_failures(
                Decision::new(
                    state,
                    Step::None,
                    Requeue::After(facts.backoff.cap),
                    Health::Progressing,
                ),
                facts,
            );
            let health = if d.failures > 0 {
                Health::BackingOff
            } else {
                Health::Progressing
            };
            Decision { health, ..d }
        }
        Outcome::Cleaned => {
            if facts.deletion_requested {
                Decision::new(
                    Deleting,
                    Step::RemoveFinalizer,
                    Requeue::Never,
                    Health::Progressing,
                )
                .applied(AppliedChange::Clear)
            } else {
                Decision::new(Idle, Step::None, Requeue::Now, Health::Steady)
                    .applied(AppliedChange::Clear)
            }
        }
        Outcome::Failed(Retry::SwitchDown) if facts.switch_outage.is_some() => {
            let outage = facts.switch_outage.unwrap_or(SwitchOutage {
                failures: 1,
                last_failure: facts.now,
                next_probe: facts.now,
            });
            let wait = until(outage.next_probe, facts.now).max(facts.backoff.base);
            let mut d = Decision::new(state, Step::None, Requeue::After(wait), Health::SwitchDown)
                .mirror(&outage);
            d.attempt = attempt_key(state, facts);
            d
        }
        Outcome::Failed(kind) => {
            let key = attempt_key(state, facts);
            let previous = if key.is_some() && key.as_deref() == facts.last_attempt {
                facts.failures
            } else {
                0
            };
            let failures = previous.saturating_add(1);
            // One policy for every failure (`decide::retry`). A look the budget
            // pays for is at its floor here; the caller takes its turn
            // ([`Decision::paid`]).
            let (next_retry, budgeted) = match look(kind, failures, &facts.backoff) {
                Look::After(d) => (Some(facts.now.checked_add(d).unwrap_or(facts.now)), None),
                Look::Paid(floor) => (
                    Some(facts.now.checked_add(floor).unwrap_or(facts.now)),
                    Some(floor),
                ),
                Look::OnChange => (None, None),
            };
            let requeue = match next_retry {
                Some(at) => Requeue::After(until(at, facts.now)),
                None => Requeue::Never,
            };
            let mut d = Decision::new(state, Step::None, requeue, Health::Failed(kind));
            d.failures = failures;
            d.attempt = key;
            d.last_failure = Some(facts.now);
            d.next_retry = next_retry;
            d.budgeted = budgeted;
            d
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use PortState::*;

    fn target(name: &str, hash: &str) -> PortTarget {
        PortTarget {
            configuration: ConfigurationRef {
                name: name.into(),
                namespace: Some("default".into()),
            },
            hash: hash.into(),
        }
    }

    /// A port with its finalizer, nothing desired or applied, no outcome.
    fn facts<'a>(state: Option<PortState>) -> PortFacts<'a> {
        PortFacts {
            state,
            has_finalizer: true,
            deletion_requested: false,
            skip_device_cleanup: false,
            desired: None,
            applied: None,
            inputs: "i",
            failures: 0,
            last_attempt: None,
            last_failure: None,
            next_retry: None,
            switch_outage: None,
            now: t0(),
            drift_check_due: false,
            drift_reported: false,
            drift_policy: DriftPolicy::Reconcile,
            backoff: Backoff::default(),
            park_new: false,
            moving: false,
            entry_changed: false,
            outcome: None,
        }
    }

    #[test]
    fn failures_past_the_cap_take_their_turn_in_the_operators_one_budget() {
        use crate::decide::retry::{Budget, RECHECKS_PER_SECOND};
        let mut budget = Budget::new(RECHECKS_PER_SECOND);
        let want = target("cfg", "h1");
        let failed = |failures: u32, kind: Retry| {
            let mut f = facts(Some(PortState::Configuring));
            f.desired = Some(&want);
            f.failures = failures;
            f.last_attempt = Some("apply/i");
            f.outcome = Some(Outcome::Failed(kind));
            decide(&f)
        };
        let secs = |at: Option<Timestamp>| at.map(|at| at.duration_since(t0()).as_secs_f64());
        // Three ports failing for the 20th time in a row at the same instant: the
        // backoff says 5 minutes for each; the budget spaces them half a second.
        let retries: Vec<Option<f64>> = (0..3)
            .map(|_| {
                let d = failed(19, Retry::Transient);
                assert_eq!(d.failures, 20);
                assert_eq!(d.budgeted, Some(Duration::from_secs(300)));
                let at = budget.grant(t0(), d.budgeted.unwrap());
                secs(d.paid(at, t0()).next_retry)
            })
            .collect();
        assert_eq!(retries, [Some(300.0), Some(300.5), Some(301.0)]);
        // Below the cap, the budget is not asked: the port's own backoff.
        let d = failed(0, Retry::Transient);
        assert_eq!((d.budgeted, secs(d.next_retry)), (None, Some(5.0)));
        // A refusal by the API server on the port's behalf (403): 5 minutes at the
        // earliest, paid from the budget too.
        let d = failed(0, Retry::Rejected);
        assert_eq!(d.budgeted, Some(Duration::from_secs(300)));
        let at = budget.grant(t0(), d.budgeted.unwrap());
        let d = d.paid(at, t0());
        assert_eq!(secs(d.next_retry), Some(301.5));
        assert_eq!(d.requeue, Requeue::After(Duration::from_millis(301_500)));
        // Invalid input: only when it changes.
        let d = failed(0, Retry::Invalid);
        assert_eq!(
            (d.budgeted, d.next_retry, d.requeue),
            (None, None, Requeue::Never)
        );
    }

    #[test]
    fn with_a_parking_vlan_a_new_port_is_parked_before_it_is_idle() {
        use PortState::*;
        let mut new = facts(None);
        new.has_finalizer = false;
        new.park_new = true;
        let d = decide(&new);
        assert_eq!((d.state, d.step), (Cleaning, Step::AddFinalizer));
        let mut parking = facts(Some(Cleaning));
        parking.park_new = true;
        let d = decide(&parking);
        assert_eq!((d.state, d.step), (Cleaning, Step::Clean));
        parking.outcome = Some(Outcome::Cleaned);
        assert_eq!(decide(&parking).state, Idle);
        // An Idle port is not parked again; without parking a new port is Idle.
        let mut idle = facts(Some(Idle));
        idle.park_new = true;
        assert_eq!(decide(&idle).step, Step::None);
        new.park_new = false;
        assert_eq!(decide(&new).state, Idle);
    }

    #[test]
    fn a_moved_port_or_an_edited_entry_applies_again_whatever_the_drift_policy() {
        use PortState::*;
        let want = target("cfg", "h1");
        for policy in [DriftPolicy::Reconcile, DriftPolicy::ReportOnly] {
            let mut active = facts(Some(Active));
            active.desired = Some(&want);
            active.applied = Some(&want);
            active.drift_policy = policy;
            assert_eq!(decide(&active).step, Step::None, "{policy:?}");
            active.moving = true;
            let d = decide(&active);
            assert_eq!((d.state, d.step), (Configuring, Step::Apply), "{policy:?}");
            // Once applied on the new device port it is Active there.
            active.state = Some(Configuring);
            active.outcome = Some(Outcome::Applied);
            assert_eq!(decide(&active).state, Active);
        }
        // Idle, parked: parked again (the old device port, then the new one).
        let mut idle = facts(Some(Idle));
        idle.moving = true;
        let d = decide(&idle);
        assert_eq!((d.state, d.step), (Cleaning, Step::Clean));
        idle.state = Some(Cleaning);
        idle.outcome = Some(Outcome::Cleaned);
        assert_eq!(decide(&idle).state, Idle);
        // An entry edited under the port: applied again, whatever the policy.
        for policy in [DriftPolicy::Reconcile, DriftPolicy::ReportOnly] {
            let mut active = facts(Some(Active));
            active.desired = Some(&want);
            active.applied = Some(&want);
            active.drift_policy = policy;
            active.entry_changed = true;
            let d = decide(&active);
            assert_eq!((d.state, d.step), (Configuring, Step::Apply), "{policy:?}");
        }
        // Configuring and Cleaning keep their step (the step moves).
        for (state, step) in [(Configuring, Step::Apply), (Cleaning, Step::Clean)] {
            let mut f = facts(Some(state));
            f.desired = (state == Configuring).then_some(&want);
            f.moving = true;
            assert_eq!(decide(&f).step, step, "{state}");
        }
    }

    /// A fixed "now" for the tables.
    fn t0() -> Timestamp {
        Timestamp::from_second(1_800_000_000).unwrap()
    }

    fn at(seconds: i64) -> Timestamp {
        t0().checked_add(jiff::SignedDuration::from_secs(seconds))
            .unwrap()
    }

    struct Row {
        name: &'static str,
        facts: PortFacts<'static>,
        state: PortState,
        step: Step,
        requeue: Requeue,
        applied: AppliedChange,
        health: Health,
    }

    fn secs(s: u64) -> Requeue {
        Requeue::After(Duration::from_secs(s))
    }

    #[test]
    fn transition_table() {
        let a: &'static PortTarget = Box::leak(Box::new(target("tenant-a", "h-a")));
        let a2: &'static PortTarget = Box::leak(Box::new(target("tenant-a", "h-a2")));
        let b: &'static PortTarget = Box::leak(Box::new(target("tenant-b", "h-b")));
        let f = facts;
        let with = |mut p: PortFacts<'static>, edit: &dyn Fn(&mut PortFacts<'static>)| {
            edit(&mut p);
            p
        };
        use AppliedChange::{Clear, Keep, SetToDesired};
        use Health::*;
        use Step as A;
        let rows = vec![
            // (none)
            Row {
                name: "new port gets the finalizer and becomes Idle",
                facts: with(f(None), &|p| p.has_finalizer = false),
                state: Idle,
                step: A::AddFinalizer,
                requeue: Requeue::Now,
                applied: Keep,
                health: Progressing,
            },
            Row {
                name: "finalizer added -> evaluate Idle at once",
                facts: with(f(Some(Idle)), &|p| {
                    p.outcome = Some(Outcome::FinalizerAdded)
                }),
                state: Idle,
                step: A::None,
                requeue: Requeue::Now,
                applied: Keep,
                health: Progressing,
            },
            Row {
                name: "deleted before we ever saw it: nothing to do",
                facts: with(f(None), &|p| {
                    p.has_finalizer = false;
                    p.deletion_requested = true
                }),
                state: Deleting,
                step: A::None,
                requeue: Requeue::Never,
                applied: Keep,
                health: Steady,
            },
            Row {
                name: "new port that already has a configuration goes straight to Configuring",
                facts: with(f(None), &|p| p.desired = Some(a)),
                state: Configuring,
                step: A::Apply,
                requeue: Requeue::Never,
                applied: Keep,
                health: Progressing,
            },
            // Idle
            Row {
                name: "Idle without configuration stays Idle",
                facts: f(Some(Idle)),
                state: Idle,
                step: A::None,
                requeue: Requeue::Never,
                applied: Keep,
                health: Steady,
            },
            Row {
                name: "Idle + configuration -> Configuring",
                facts: with(f(Some(Idle)), &|p| p.desired = Some(a)),
                state: Configuring,
                step: A::Apply,
                requeue: Requeue::Never,
                applied: Keep,
                health: Progressing,
            },
            Row {
                name: "Idle + deletion -> Deleting",
                facts: with(f(Some(Idle)), &|p| p.deletion_requested = true),
                state: Deleting,
                step: A::RemoveFinalizer,
                requeue: Requeue::Never,
                applied: Keep,
                health: Progressing,
            },
            Row {
                name: "Idle + deletion with a configuration still set -> Deleting (nothing applied)",
                facts: with(f(Some(Idle)), &|p| {
                    p.deletion_requested = true;
                    p.desired = Some(a)
                }),
                state: Deleting,
                step: A::RemoveFinalizer,
                requeue: Requeue::Never,
                applied: Keep,
                health: Progressing,
            },
            // Configuring
            Row {
                name: "Configuring applies",
                facts: with(f(Some(Configuring)), &|p| p.desired = Some(a)),
                state: Configuring,
                step: A::Apply,
                requeue: Requeue::Never,
                applied: Keep,
                health: Progressing,
            },
            Row {
                name: "applied and verified -> Active",
                facts: with(f(Some(Configuring)), &|p| {
                    p.desired = Some(a);
                    p.outcome = Some(Outcome::Applied)
                }),
                state: Active,
                step: A::None,
                requeue: Requeue::DriftCheck,
                applied: SetToDesired,
                health: Steady,
            },
            Row {
                name: "Configuring + configuration cleared -> Cleaning",
                facts: f(Some(Configuring)),
                state: Cleaning,
                step: A::Clean,
                requeue: Requeue::Never,
                applied: Keep,
                health: Progressing,
            },
            Row {
                name: "Configuring + deletion -> Cleaning",
                facts: with(f(Some(Configuring)), &|p| {
                    p.desired = Some(a);
                    p.deletion_requested = true
                }),
                state: Cleaning,
                step: A::Clean,
                requeue: Requeue::Never,
                applied: Keep,
                health: Progressing,
            },
            Row {
                name: "Configuring + deletion with skip-cleanup -> Deleting, device untouched",
                facts: with(f(Some(Configuring)), &|p| {
                    p.desired = Some(a);
                    p.deletion_requested = true;
                    p.skip_device_cleanup = true
                }),
                state: Deleting,
                step: A::RemoveFinalizer,
                requeue: Requeue::Never,
                applied: Keep,
                health: Progressing,
            },
            Row {
                name: "first transient failure: stay, back off 5s",
                facts: with(f(Some(Configuring)), &|p| {
                    p.desired = Some(a);
                    p.outcome = Some(Outcome::Failed(Retry::Transient))
                }),
                state: Configuring,
                step: A::None,
                requeue: secs(5),
                applied: Keep,
                health: Failed(Retry::Transient),
            },
            Row {
                name: "fourth failure at the same target: 40s",
                facts: with(f(Some(Configuring)), &|p| {
                    p.desired = Some(a);
                    p.failures = 3;
                    p.last_attempt = Some("apply/i");
                    p.outcome = Some(Outcome::Failed(Retry::Transient))
                }),
                state: Configuring,
                step: A::None,
                requeue: secs(40),
                applied: Keep,
                health: Failed(Retry::Transient),
            },
            Row {
                name: "backoff is capped at 5 minutes",
                facts: with(f(Some(Configuring)), &|p| {
                    p.desired = Some(a);
                    p.failures = 40;
                    p.last_attempt = Some("apply/i");
                    p.outcome = Some(Outcome::Failed(Retry::Transient))
                }),
                state: Configuring,
                step: A::None,
                requeue: secs(300),
                applied: Keep,
                health: Failed(Retry::Transient),
            },
            Row {
                name: "a spec change resets the backoff",
                facts: with(f(Some(Configuring)), &|p| {
                    p.desired = Some(a2);
                    p.inputs = "i2";
                    p.failures = 6;
                    p.last_attempt = Some("apply/i");
                    p.outcome = Some(Outcome::Failed(Retry::Transient))
                }),
                state: Configuring,
                step: A::None,
                requeue: secs(5),
                applied: Keep,
                health: Failed(Retry::Transient),
            },
            Row {
                name: "invalid configuration: stay, wait for a change",
                facts: with(f(Some(Configuring)), &|p| {
                    p.desired = Some(a);
                    p.outcome = Some(Outcome::Failed(Retry::Invalid))
                }),
                state: Configuring,
                step: A::None,
                requeue: Requeue::Never,
                applied: Keep,
                health: Failed(Retry::Invalid),
            },
            // Active
            Row {
                name: "Active, check not due: wait for the drift interval",
                facts: with(f(Some(Active)), &|p| {
                    p.desired = Some(a);
                    p.applied = Some(a)
                }),
                state: Active,
                step: A::None,
                requeue: Requeue::DriftCheck,
                applied: Keep,
                health: Steady,
            },
            Row {
                name: "Active, check due: read back",
                facts: with(f(Some(Active)), &|p| {
                    p.desired = Some(a);
                    p.applied = Some(a);
                    p.drift_check_due = true
                }),
                state: Active,
                step: A::Verify,
                requeue: Requeue::DriftCheck,
                applied: Keep,
                health: Steady,
            },
            Row {
                name: "read back in sync: stay Active",
                facts: with(f(Some(Active)), &|p| {
                    p.desired = Some(a);
                    p.applied = Some(a);
                    p.outcome = Some(Outcome::InSync)
                }),
                state: Active,
                step: A::None,
                requeue: Requeue::DriftCheck,
                applied: Keep,
                health: Steady,
            },
            Row {
                name: "drift with policy Reconcile -> Configuring, applied ref cleared",
                facts: with(f(Some(Active)), &|p| {
                    p.desired = Some(a);
                    p.applied = Some(a);
                    p.outcome = Some(Outcome::Drifted)
                }),
                state: Configuring,
                step: A::Apply,
                requeue: Requeue::Never,
                applied: Clear,
                health: Progressing,
            },
            Row {
                name: "drift with policy ReportOnly: stay Active, report, touch nothing",
                facts: with(f(Some(Active)), &|p| {
                    p.desired = Some(a);
                    p.applied = Some(a);
                    p.drift_policy = DriftPolicy::ReportOnly;
                    p.outcome = Some(Outcome::Drifted)
                }),
                state: Active,
                step: A::None,
                requeue: Requeue::DriftCheck,
                applied: Keep,
                health: Drifted,
            },
            Row {
                name: "drift check cannot reach the device: stay Active, back off",
                facts: with(f(Some(Active)), &|p| {
                    p.desired = Some(a);
                    p.applied = Some(a);
                    p.outcome = Some(Outcome::Failed(Retry::Transient))
                }),
                state: Active,
                step: A::None,
                requeue: secs(5),
                applied: Keep,
                health: Failed(Retry::Transient),
            },
            Row {
                name: "update: a new configuration ref -> Configuring",
                facts: with(f(Some(Active)), &|p| {
                    p.desired = Some(b);
                    p.applied = Some(a)
                }),
                state: Configuring,
                step: A::Apply,
                requeue: Requeue::Never,
                applied: Keep,
                health: Progressing,
            },
            Row {
                name: "update: the same ref, edited configuration -> Configuring",
                facts: with(f(Some(Active)), &|p| {
                    p.desired = Some(a2);
                    p.applied = Some(a)
                }),
                state: Configuring,
                step: A::Apply,
                requeue: Requeue::Never,
                applied: Keep,
                health: Progressing,
            },
            Row {
                name: "deprovision: ref cleared -> Cleaning",
                facts: with(f(Some(Active)), &|p| p.applied = Some(a)),
                state: Cleaning,
                step: A::Clean,
                requeue: Requeue::Never,
                applied: Keep,
                health: Progressing,
            },
            Row {
                name: "Active + deletion -> Cleaning",
                facts: with(f(Some(Active)), &|p| {
                    p.desired = Some(a);
                    p.applied = Some(a);
                    p.deletion_requested = true
                }),
                state: Cleaning,
                step: A::Clean,
                requeue: Requeue::Never,
                applied: Keep,
                health: Progressing,
            },
            Row {
                name: "Active + deletion with skip-cleanup -> Deleting",
                facts: with(f(Some(Active)), &|p| {
                    p.desired = Some(a);
                    p.applied = Some(a);
                    p.deletion_requested = true;
                    p.skip_device_cleanup = true
                }),
                state: Deleting,
                step: A::RemoveFinalizer,
                requeue: Requeue::Never,
                applied: Keep,
                health: Progressing,
            },
            Row {
                name: "someone removed our finalizer from an Active port: add it back",
                facts: with(f(Some(Active)), &|p| {
                    p.desired = Some(a);
                    p.applied = Some(a);
                    p.has_finalizer = false
                }),
                state: Active,
                step: A::AddFinalizer,
                requeue: Requeue::Now,
                applied: Keep,
                health: Progressing,
            },
            // Cleaning
            Row {
                name: "Cleaning cleans",
                facts: with(f(Some(Cleaning)), &|p| p.applied = Some(a)),
                state: Cleaning,
                step: A::Clean,
                requeue: Requeue::Never,
                applied: Keep,
                health: Progressing,
            },
            Row {
                name: "Cleaning keeps cleaning even if a configuration is set meanwhile",
                facts: with(f(Some(Cleaning)), &|p| {
                    p.applied = Some(a);
                    p.desired = Some(b)
                }),
                state: Cleaning,
                step: A::Clean,
                requeue: Requeue::Never,
                applied: Keep,
                health: Progressing,
            },
            Row {
                name: "clean -> Idle, applied cleared, look again at once",
                facts: with(f(Some(Cleaning)), &|p| {
                    p.applied = Some(a);
                    p.outcome = Some(Outcome::Cleaned)
                }),
                state: Idle,
                step: A::None,
                requeue: Requeue::Now,
                applied: Clear,
                health: Steady,
            },
            Row {
                name: "clean while deletion is pending -> Deleting",
                facts: with(f(Some(Cleaning)), &|p| {
                    p.applied = Some(a);
                    p.deletion_requested = true;
                    p.outcome = Some(Outcome::Cleaned)
                }),
                state: Deleting,
                step: A::RemoveFinalizer,
                requeue: Requeue::Never,
                applied: Clear,
                health: Progressing,
            },
            Row {
                name: "cleaning fails: stay Cleaning, back off",
                facts: with(f(Some(Cleaning)), &|p| {
                    p.applied = Some(a);
                    p.failures = 1;
                    p.last_attempt = Some("clean/i");
                    p.outcome = Some(Outcome::Failed(Retry::Transient))
                }),
                state: Cleaning,
                step: A::None,
                requeue: secs(10),
                applied: Keep,
                health: Failed(Retry::Transient),
            },
            Row {
                name: "skip-cleanup set while Cleaning is stuck -> Deleting",
                facts: with(f(Some(Cleaning)), &|p| {
                    p.applied = Some(a);
                    p.deletion_requested = true;
                    p.skip_device_cleanup = true
                }),
                state: Deleting,
                step: A::RemoveFinalizer,
                requeue: Requeue::Never,
                applied: Keep,
                health: Progressing,
            },
            // Deleting
            Row {
                name: "Deleting removes the finalizer",
                facts: with(f(Some(Deleting)), &|p| p.deletion_requested = true),
                state: Deleting,
                step: A::RemoveFinalizer,
                requeue: Requeue::Never,
                applied: Keep,
                health: Progressing,
            },
            Row {
                name: "finalizer removed: done",
                facts: with(f(Some(Deleting)), &|p| {
                    p.deletion_requested = true;
                    p.outcome = Some(Outcome::FinalizerRemoved)
                }),
                state: Deleting,
                step: A::None,
                requeue: Requeue::Never,
                applied: Keep,
                health: Steady,
            },
        ];
        let mut failures = Vec::new();
        for row in rows {
            let d = decide(&row.facts);
            let got = (d.state, d.step, d.requeue, d.applied.clone(), d.health);
            let want = (
                row.state,
                row.step,
                row.requeue,
                row.applied.clone(),
                row.health,
            );
            if got != want {
                failures.push(format!("{}:\n   got  {got:?}\n   want {want:?}", row.name));
            }
        }
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    }

    #[test]
    fn failures_accumulate_per_target_and_reset_on_success() {
        let a = target("tenant-a", "h-a");
        let step = |count: u32, last: Option<&str>, outcome: Option<Outcome>| {
            let mut p = facts(Some(Configuring));
            p.desired = Some(&a);
            p.failures = count;
            p.last_attempt = last;
            p.outcome = outcome;
            decide(&p)
        };
        let mut delays = Vec::new();
        let mut count = 0;
        let mut last: Option<String> = None;
        for _ in 0..8 {
            let d = step(
                count,
                last.as_deref(),
                Some(Outcome::Failed(Retry::Transient)),
            );
            if let Requeue::After(t) = d.requeue {
                delays.push(t.as_secs());
            }
            count = d.failures;
            last = d.attempt;
        }
        assert_eq!(delays, [5, 10, 20, 40, 80, 160, 300, 300]);
        // Planning again (the retry) keeps the count; success clears it.
        assert_eq!(step(count, last.as_deref(), None).failures, 8);
        assert_eq!(
            step(count, last.as_deref(), Some(Outcome::Applied)).failures,
            0
        );
    }

    /// A tiny driver that plays the controller: apply decisions, feed outcomes from a
    /// scripted device, and record the states the port passes through. Its clock
    /// moves only when the test moves it.
    struct Driver {
        state: Option<PortState>,
        has_finalizer: bool,
        applied: Option<PortTarget>,
        failures: u32,
        last_attempt: Option<String>,
        last_failure: Option<Timestamp>,
        next_retry: Option<Timestamp>,
        now: Timestamp,
        trail: Vec<PortState>,
        device: Vec<&'static str>,
    }

    impl Driver {
        fn new() -> Self {
            Self {
                state: None,
                has_finalizer: false,
                applied: None,
                failures: 0,
                last_attempt: None,
                last_failure: None,
                next_retry: None,
                now: t0(),
                trail: Vec::new(),
                device: Vec::new(),
            }
        }

        /// One reconcile. `device_ok` decides whether device steps succeed. The
        /// inputs digest is the desired hash (a new configuration is a new input).
        fn reconcile(
            &mut self,
            desired: Option<&PortTarget>,
            deletion: bool,
            device_ok: bool,
        ) -> Decision {
            let mut outcome = None;
            let inputs = desired.map_or("none".to_owned(), |d| d.hash.clone());
            for _ in 0..10 {
                let facts = PortFacts {
                    state: self.state,
                    has_finalizer: self.has_finalizer,
                    deletion_requested: deletion,
                    skip_device_cleanup: false,
                    desired,
                    applied: self.applied.as_ref(),
                    inputs: &inputs,
                    failures: self.failures,
                    last_attempt: self.last_attempt.as_deref(),
                    last_failure: self.last_failure,
                    next_retry: self.next_retry,
                    switch_outage: None,
                    now: self.now,
                    drift_check_due: false,
                    drift_reported: false,
                    drift_policy: DriftPolicy::Reconcile,
                    backoff: Backoff::default(),
                    park_new: false,
                    moving: false,
                    entry_changed: false,
                    outcome,
                };
                let d = decide(&facts);
                if self.state != Some(d.state) {
                    self.trail.push(d.state);
                }
                self.state = Some(d.state);
                self.failures = d.failures;
                self.last_attempt = d.attempt.clone();
                self.last_failure = d.last_failure;
                self.next_retry = d.next_retry;
                match d.applied {
                    AppliedChange::Keep => {}
                    AppliedChange::SetToDesired => self.applied = desired.cloned(),
                    AppliedChange::Clear => self.applied = None,
                }
                outcome = Some(match d.step {
                    // A requeue at once is another reconcile, as the controller does it.
                    Step::None if d.requeue == Requeue::Now => {
                        outcome = None;
                        continue;
                    }
                    Step::None => return d,
                    Step::AddFinalizer => {
                        self.has_finalizer = true;
                        Outcome::FinalizerAdded
                    }
                    Step::RemoveFinalizer => {
                        self.has_finalizer = false;
                        Outcome::FinalizerRemoved
                    }
                    _ if !device_ok => {
                        self.device.push("failed");
                        Outcome::Failed(Retry::Transient)
                    }
                    Step::Apply => {
                        self.device.push("apply");
                        Outcome::Applied
                    }
                    Step::Clean => {
                        self.device.push("clean");
                        Outcome::Cleaned
                    }
                    Step::Verify => Outcome::InSync,
                });
            }
            panic!("no steady state after 10 steps: {:?}", self.trail);
        }

        fn wait(&mut self, seconds: i64) {
            self.now = self
                .now
                .checked_add(jiff::SignedDuration::from_secs(seconds))
                .unwrap();
        }
    }

    #[test]
    fn workflow_create_configure_update_deprovision_delete() {
        let a = target("provisioning", "h-p");
        let b = target("tenant", "h-t");
        let mut port = Driver::new();
        // Creation: (none) -> Idle.
        port.reconcile(None, false, true);
        assert_eq!(port.trail, [Idle]);
        // Provisioning: configuration set -> Configuring -> Active.
        port.reconcile(Some(&a), false, true);
        assert_eq!(port.trail, [Idle, Configuring, Active]);
        assert_eq!(port.applied.as_ref(), Some(&a));
        // Update to the tenant network.
        port.reconcile(Some(&b), false, true);
        assert_eq!(port.trail, [Idle, Configuring, Active, Configuring, Active]);
        assert_eq!(port.applied.as_ref(), Some(&b));
        // Deprovision: ref cleared -> Cleaning -> Idle.
        port.reconcile(None, false, true);
        assert_eq!(port.trail[5..], [Cleaning, Idle]);
        assert_eq!(port.applied, None);
        // Deletion from Idle.
        port.reconcile(None, true, true);
        assert_eq!(port.trail.last(), Some(&Deleting));
        assert!(!port.has_finalizer);
        assert_eq!(port.device, ["apply", "apply", "clean"]);
    }

    #[test]
    fn waiting_stays_put_without_counting_a_failure() {
        let a = target("chained", "h");
        for state in [Configuring, Cleaning] {
            let mut f = facts(Some(state));
            f.desired = Some(&a);
            f.failures = 3;
            f.last_attempt = Some("apply/i");
            f.outcome = Some(Outcome::Waiting);
            let d = decide(&f);
            assert_eq!(d.state, state);
            assert_eq!(d.step, Step::None);
            assert_eq!(d.health, Health::Progressing);
            assert_eq!(d.failures, 0);
            assert_eq!(d.applied, AppliedChange::Keep);
            assert!(matches!(d.requeue, Requeue::After(_)));
        }
    }

    #[test]
    fn a_handed_off_step_stays_put_and_keeps_its_attempts_failures() {
        let a = target("handed", "h");
        let at = Timestamp::from_second(1_800_000_000).unwrap();
        // (state, failures of this attempt, attempt key, expected failures, health)
        let cases = [
            (Configuring, 0, Some("apply/i"), 0, Health::Progressing),
            (Configuring, 3, Some("apply/i"), 3, Health::BackingOff),
            (Cleaning, 2, Some("clean/i"), 2, Health::BackingOff),
            // Failures of another attempt (other inputs) are not this one's.
            (Configuring, 3, Some("apply/old"), 0, Health::Progressing),
        ];
        for (state, failures, attempt, want, health) in cases {
            let mut f = facts(Some(state));
            f.desired = Some(&a);
            f.failures = failures;
            f.last_attempt = attempt;
            f.last_failure = Some(at);
            f.outcome = Some(Outcome::HandedOff);
            let d = decide(&f);
            let case = format!("{state:?} {failures} {attempt:?}");
            assert_eq!(d.state, state, "{case}");
            assert_eq!(d.step, Step::None, "{case}");
            assert_eq!(d.failures, want, "{case}");
            assert_eq!(d.health, health, "{case}");
            assert_eq!(d.last_failure, (want > 0).then_some(at), "{case}");
            assert_eq!(d.applied, AppliedChange::Keep, "{case}");
            assert_eq!(d.requeue, Requeue::After(f.backoff.cap), "{case}");
        }
    }

    #[test]
    fn workflow_deletion_of_an_active_port_cleans_first() {
        let a = target("tenant", "h-t");
        let mut port = Driver::new();
        port.reconcile(Some(&a), false, true);
        port.reconcile(Some(&a), true, true);
        assert_eq!(port.trail, [Idle, Configuring, Active, Cleaning, Deleting]);
        assert_eq!(port.device, ["apply", "clean"]);
        assert!(!port.has_finalizer);
    }

    #[test]
    fn workflow_device_outage_backs_off_then_recovers() {
        let a = target("tenant", "h-t");
        let mut port = Driver::new();
        port.reconcile(None, false, true);
        let d1 = port.reconcile(Some(&a), false, false);
        assert_eq!(d1.requeue, Requeue::After(Duration::from_secs(5)));
        // Woken again at once (its own status write, another event): it waits.
        let held = port.reconcile(Some(&a), false, false);
        assert_eq!((held.step, held.health), (Step::None, Health::BackingOff));
        assert_eq!(held.requeue, Requeue::After(Duration::from_secs(5)));
        port.wait(5);
        let d2 = port.reconcile(Some(&a), false, false);
        assert_eq!(d2.requeue, Requeue::After(Duration::from_secs(10)));
        assert_eq!(port.device, ["failed", "failed"]);
        assert_eq!(port.state, Some(Configuring));
        port.wait(10);
        let d3 = port.reconcile(Some(&a), false, true);
        assert_eq!(d3.state, Active);
        assert_eq!(d3.failures, 0);
        assert_eq!((d3.last_failure, d3.next_retry), (None, None));
    }

    #[test]
    fn a_failing_port_woken_ten_times_a_second_touches_the_device_on_the_backoff_schedule() {
        // Whatever wakes it, a port whose device step keeps failing tries at 0, 5, 15,
        // 35 s (5 s doubling): four attempts in a minute, not one per wake-up.
        let a = target("tenant", "h-t");
        let mut port = Driver::new();
        port.reconcile(None, false, true);
        let mut attempts_at = Vec::new();
        for tick in 0..600 {
            let before = port.device.len();
            port.reconcile(Some(&a), false, false);
            if port.device.len() > before {
                attempts_at.push(tick / 10);
            }
            port.now = port
                .now
                .checked_add(jiff::SignedDuration::from_millis(100))
                .unwrap();
        }
        assert_eq!(attempts_at, [0, 5, 15, 35]);
        assert_eq!(port.failures, 4);
        assert_eq!(port.next_retry, Some(at(35 + 40)));
        // A new configuration is a new input: tried at once, counted from zero.
        let b = target("tenant", "h-edited");
        let d = port.reconcile(Some(&b), false, false);
        assert_eq!(port.device.len(), 5);
        assert_eq!(d.failures, 1);
    }

    #[test]
    fn an_invalid_configuration_is_not_tried_again_until_an_input_changes() {
        let a = target("tenant", "h-t");
        let mut p = facts(Some(Configuring));
        p.desired = Some(&a);
        p.outcome = Some(Outcome::Failed(Retry::Invalid));
        let failed = decide(&p);
        assert_eq!(failed.requeue, Requeue::Never);
        assert_eq!(failed.next_retry, None);
        assert_eq!(failed.last_failure, Some(t0()));
        // An hour later, woken by anything: still nothing.
        let mut later = facts(Some(Configuring));
        later.desired = Some(&a);
        later.failures = failed.failures;
        later.last_attempt = failed.attempt.as_deref();
        later.last_failure = failed.last_failure;
        later.now = at(3600);
        let d = decide(&later);
        assert_eq!(
            (d.step, d.requeue, d.health),
            (Step::None, Requeue::Never, Health::BackingOff)
        );
        assert_eq!(d.failures, 1);
        // The configuration is fixed (a new inputs digest): applied at once.
        later.inputs = "fixed";
        let d = decide(&later);
        assert_eq!((d.step, d.failures), (Step::Apply, 0));
    }

    #[test]
    fn a_port_waits_for_its_switch_and_mirrors_the_outage() {
        let a = target("tenant", "h-t");
        let outage = SwitchOutage {
            failures: 3,
            last_failure: at(-2),
            next_probe: at(18),
        };
        // Configuring (or Cleaning) on a switch that does not answer: nothing is
        // sent; the port shows the switch's count and next probe.
        for state in [Configuring, Cleaning] {
            let mut p = facts(Some(state));
            p.desired = (state == Configuring).then_some(&a);
            p.switch_outage = Some(outage);
            let d = decide(&p);
            assert_eq!(
                (d.state, d.step, d.health),
                (state, Step::None, Health::SwitchDown)
            );
            assert_eq!(d.requeue, Requeue::After(Duration::from_secs(18)));
            assert_eq!(
                (d.failures, d.last_failure, d.next_retry),
                (3, Some(at(-2)), Some(at(18)))
            );
        }
        // The first failure comes from the step itself: mirrored the same way.
        let mut p = facts(Some(Configuring));
        p.desired = Some(&a);
        p.switch_outage = Some(outage);
        p.outcome = Some(Outcome::Failed(Retry::SwitchDown));
        let d = decide(&p);
        assert_eq!((d.health, d.failures), (Health::SwitchDown, 3));
        // A probe due within the backoff base still leaves the worker time to probe.
        let mut soon = outage;
        soon.next_probe = at(1);
        p.outcome = None;
        p.switch_outage = Some(soon);
        assert_eq!(decide(&p).requeue, Requeue::After(Duration::from_secs(5)));
        // The switch answers again and the probe time has passed: apply.
        let mut back = facts(Some(Configuring));
        back.desired = Some(&a);
        back.failures = 3;
        back.last_attempt = d.attempt.as_deref();
        back.last_failure = Some(at(-2));
        back.next_retry = Some(at(18));
        back.now = at(19);
        assert_eq!(decide(&back).step, Step::Apply);
    }

    #[test]
    fn an_active_port_on_a_switch_that_went_away_stays_active_with_unknown_readiness() {
        let a = target("tenant", "h-t");
        let mut p = facts(Some(Active));
        p.desired = Some(&a);
        p.applied = Some(&a);
        p.drift_check_due = true;
        p.switch_outage = Some(SwitchOutage {
            failures: 1,
            last_failure: t0(),
            next_probe: at(5),
        });
        let d = decide(&p);
        assert_eq!(
            (d.state, d.step, d.health, d.applied.clone()),
            (Active, Step::None, Health::SwitchDown, AppliedChange::Keep)
        );
        assert_eq!(d.failures, 0, "the port itself did not fail");
        // Deleting it still needs the device: Cleaning waits for the switch.
        p.deletion_requested = true;
        let d = decide(&p);
        assert_eq!((d.state, d.step), (Cleaning, Step::None));
        // Back: the drift check runs.
        p.deletion_requested = false;
        p.switch_outage = None;
        assert_eq!(decide(&p).step, Step::Verify);
    }

    #[test]
    fn deletion_never_leaves_a_finalizer_behind_when_the_device_is_healthy() {
        // Whatever state a port is in, a deletion with a healthy device ends with the
        // finalizer removed and, if anything was ever applied, a device clean.
        let a = target("tenant", "h-t");
        for start in [
            None,
            Some(Idle),
            Some(Configuring),
            Some(Active),
            Some(Cleaning),
            Some(Deleting),
        ] {
            let mut port = Driver::new();
            port.state = start;
            port.has_finalizer = start.is_some();
            if start == Some(Active) {
                port.applied = Some(a.clone());
            }
            for _ in 0..4 {
                port.reconcile(Some(&a), true, true);
            }
            assert!(!port.has_finalizer, "from {start:?}: {:?}", port.trail);
            if matches!(start, Some(Configuring) | Some(Active) | Some(Cleaning)) {
                assert_eq!(port.device, ["clean"], "from {start:?}");
            } else {
                assert!(port.device.is_empty(), "from {start:?}: {:?}", port.device);
            }
        }
    }
}

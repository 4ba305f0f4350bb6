//! The SwitchPort state machine (seed 003), as one pure function: [`decide`]. No
//! client, no I/O, no clock.
//!
//! The controller gathers [`PortFacts`] (current state, desired and applied targets,
//! deletion, finalizer, failures) and calls [`decide`] with `outcome: None` to learn
//! the next state and the [`Action`] to take. It writes the new state *before* it acts
//! (so an operator killed mid-apply resumes in Configuring and applies again), performs
//! the action, and calls [`decide`] again with the [`Outcome`] to learn where the port
//! goes next. It repeats until the action is [`Action::None`], then requeues as the
//! [`Decision`] says.
//!
//! | state | leaves when |
//! |---|---|
//! | (none) | finalizer added → Idle |
//! | Idle | configuration set → Configuring; deletion → Deleting |
//! | Configuring | applied and verified → Active (a SmartNicPort also waits for its next port); configuration cleared or deletion → Cleaning |
//! | Active | drift (policy Reconcile) or target changed → Configuring; cleared or deletion → Cleaning |
//! | Cleaning | clean → Idle, or straight to Deleting when deletion is pending |
//! | Deleting | finalizer removed (the object disappears) |
//!
//! Failures are not a state: the port stays where it is, [`Decision::health`] says why,
//! and the retry backs off exponentially (capped). The failure count belongs to one
//! target; a new target (a spec change) starts again at zero.

use std::time::Duration;

use crate::api::{ConfigurationRef, DriftPolicy, PortState};

/// What a port should carry, or carries: a configuration and the hash of its spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortTarget {
    /// The configuration (namespace resolved).
    pub configuration: ConfigurationRef,
    /// SHA-256 of the configuration's spec.
    pub hash: String,
}

/// Key under which failures of a Cleaning attempt are counted.
pub const CLEAN_TARGET: &str = "clean";

/// What the last action achieved.
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
    /// The action did its own part but depends on another object that is not there
    /// yet (a SmartNicPort whose next SwitchPort is still Configuring or Cleaning):
    /// stay in the state without counting a failure; that object's watch brings the
    /// port back.
    Waiting,
    /// The action failed.
    Failed(FailureKind),
}

/// How an action failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureKind {
    /// Network trouble, timeouts, a busy device: retry with backoff.
    Transient,
    /// The device refused (bad credentials, rejected command, host key): retry with
    /// backoff, since a human may fix the device or the Secret meanwhile.
    Device,
    /// The configuration is invalid for this port: no retry until something changes
    /// (the controller watches configurations and switches).
    Invalid,
}

/// What the controller must do now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
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
    /// The last attempt failed.
    Failed(FailureKind),
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
    /// Consecutive failures so far, counted against `last_attempt`.
    pub failures: u32,
    /// The target key the failures were counted against (a configuration hash, or
    /// [`CLEAN_TARGET`]).
    pub last_attempt: Option<&'a str>,
    /// Whether an Active port's periodic drift check is due.
    pub drift_check_due: bool,
    /// Whether the port is currently reported drifted (policy ReportOnly): it stays
    /// so until a read-back finds the device in sync again.
    pub drift_reported: bool,
    /// The Switch's drift policy.
    pub drift_policy: DriftPolicy,
    /// The backoff settings.
    pub backoff: Backoff,
    /// What the action of the previous decision achieved; `None` to plan.
    pub outcome: Option<Outcome>,
}

/// What [`decide`] says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// The state to write.
    pub state: PortState,
    /// What to do now.
    pub action: Action,
    /// When to come back.
    pub requeue: Requeue,
    /// How the applied target changes.
    pub applied: AppliedChange,
    /// Consecutive failures after this decision.
    pub failures: u32,
    /// The target key failures are counted against after this decision.
    pub attempt: Option<String>,
    /// How the port is doing.
    pub health: Health,
}

impl Decision {
    fn new(state: PortState, action: Action, requeue: Requeue, health: Health) -> Self {
        Self {
            state,
            action,
            requeue,
            applied: AppliedChange::Keep,
            failures: 0,
            attempt: None,
            health,
        }
    }

    fn applied(mut self, change: AppliedChange) -> Self {
        self.applied = change;
        self
    }
}

/// The target key an action in `state` works towards.
fn attempt_key(state: PortState, facts: &PortFacts<'_>) -> Option<String> {
    match state {
        PortState::Configuring => facts.desired.map(|d| d.hash.clone()),
        PortState::Cleaning => Some(CLEAN_TARGET.to_owned()),
        PortState::Active => facts.applied.map(|a| a.hash.clone()),
        PortState::Idle | PortState::Deleting => None,
    }
}

/// Keeps the failure count of the current attempt across a plan (a spec change
/// starts a new attempt at zero).
fn carry_failures(mut d: Decision, facts: &PortFacts<'_>) -> Decision {
    let key = attempt_key(d.state, facts);
    if key.is_some() && key.as_deref() == facts.last_attempt {
        d.failures = facts.failures;
    }
    d.attempt = key;
    d
}

/// Whether `desired` differs from what is applied.
fn target_changed(facts: &PortFacts<'_>) -> bool {
    facts.desired != facts.applied
}

/// The next state and action. See the module documentation.
pub fn decide(facts: &PortFacts<'_>) -> Decision {
    match facts.outcome {
        None => carry_failures(plan(facts), facts),
        Some(outcome) => after(facts, outcome),
    }
}

/// Plans from the current state (no action performed yet).
fn plan(facts: &PortFacts<'_>) -> Decision {
    use PortState::*;
    let state = facts.state;
    // Guard: deletion of an object without our finalizer needs nothing from us.
    if facts.deletion_requested && !facts.has_finalizer {
        return Decision::new(Deleting, Action::None, Requeue::Never, Health::Steady);
    }
    // Guard: the finalizer comes first, in every live state.
    if !facts.deletion_requested && !facts.has_finalizer {
        let next = state.unwrap_or(Idle);
        let next = if next == Deleting { Idle } else { next };
        return Decision::new(
            next,
            Action::AddFinalizer,
            Requeue::Now,
            Health::Progressing,
        );
    }
    // Guard: deletion without device cleanup (escape hatch).
    if facts.deletion_requested && facts.skip_device_cleanup {
        return Decision::new(
            Deleting,
            Action::RemoveFinalizer,
            Requeue::Never,
            Health::Progressing,
        );
    }
    let cleaning = || Decision::new(Cleaning, Action::Clean, Requeue::Never, Health::Progressing);
    let configuring = || {
        Decision::new(
            Configuring,
            Action::Apply,
            Requeue::Never,
            Health::Progressing,
        )
    };
    match state {
        None | Some(Idle) => {
            if facts.deletion_requested {
                Decision::new(
                    Deleting,
                    Action::RemoveFinalizer,
                    Requeue::Never,
                    Health::Progressing,
                )
            } else if facts.desired.is_some() {
                configuring()
            } else {
                Decision::new(Idle, Action::None, Requeue::Never, Health::Steady)
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
            } else if target_changed(facts) {
                configuring()
            } else {
                let health = if facts.drift_reported {
                    Health::Drifted
                } else {
                    Health::Steady
                };
                let action = if facts.drift_check_due {
                    Action::Verify
                } else {
                    Action::None
                };
                Decision::new(Active, action, Requeue::DriftCheck, health)
            }
        }
        Some(Cleaning) => cleaning(),
        Some(Deleting) => Decision::new(
            Deleting,
            Action::RemoveFinalizer,
            Requeue::Never,
            Health::Progressing,
        ),
    }
}

/// Where the port goes after the action of a decision taken in `facts.state`.
fn after(facts: &PortFacts<'_>, outcome: Outcome) -> Decision {
    use PortState::*;
    let state = facts.state.unwrap_or(Idle);
    match outcome {
        Outcome::FinalizerAdded => {
            Decision::new(state, Action::None, Requeue::Now, Health::Progressing)
        }
        Outcome::FinalizerRemoved => {
            Decision::new(Deleting, Action::None, Requeue::Never, Health::Steady)
        }
        Outcome::Applied => {
            Decision::new(Active, Action::None, Requeue::DriftCheck, Health::Steady)
                .applied(AppliedChange::SetToDesired)
        }
        Outcome::InSync => Decision::new(Active, Action::None, Requeue::DriftCheck, Health::Steady),
        Outcome::Drifted => match facts.drift_policy {
            DriftPolicy::Reconcile => {
                // Seed 003: back to Configuring with the applied reference cleared.
                let mut d = Decision::new(
                    Configuring,
                    Action::Apply,
                    Requeue::Never,
                    Health::Progressing,
                )
                .applied(AppliedChange::Clear);
                d.attempt = attempt_key(Configuring, facts);
                d
            }
            DriftPolicy::ReportOnly => {
                Decision::new(Active, Action::None, Requeue::DriftCheck, Health::Drifted)
            }
        },
        Outcome::Waiting => {
            let mut d = Decision::new(
                state,
                Action::None,
                Requeue::After(facts.backoff.cap),
                Health::Progressing,
            );
            d = carry_failures(d, facts);
            d.failures = 0;
            d
        }
        Outcome::Cleaned => {
            if facts.deletion_requested {
                Decision::new(
                    Deleting,
                    Action::RemoveFinalizer,
                    Requeue::Never,
                    Health::Progressing,
                )
                .applied(AppliedChange::Clear)
            } else {
                Decision::new(Idle, Action::None, Requeue::Now, Health::Steady)
                    .applied(AppliedChange::Clear)
            }
        }
        Outcome::Failed(kind) => {
            let key = attempt_key(state, facts);
            let previous = if key.is_some() && key.as_deref() == facts.last_attempt {
                facts.failures
            } else {
                0
            };
            let failures = previous.saturating_add(1);
            let requeue = match kind {
                FailureKind::Invalid => Requeue::Never,
                FailureKind::Transient | FailureKind::Device => {
                    Requeue::After(facts.backoff.delay(failures))
                }
            };
            let mut d = Decision::new(state, Action::None, requeue, Health::Failed(kind));
            d.failures = failures;
            d.attempt = key;
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
            failures: 0,
            last_attempt: None,
            drift_check_due: false,
            drift_reported: false,
            drift_policy: DriftPolicy::Reconcile,
            backoff: Backoff::default(),
            outcome: None,
        }
    }

    struct Row {
        name: &'static str,
        facts: PortFacts<'static>,
        state: PortState,
        action: Action,
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
        use Action as A;
        use AppliedChange::{Clear, Keep, SetToDesired};
        use Health::*;
        let rows = vec![
            // (none)
            Row {
                name: "new port gets the finalizer and becomes Idle",
                facts: with(f(None), &|p| p.has_finalizer = false),
                state: Idle,
                action: A::AddFinalizer,
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
                action: A::None,
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
                action: A::None,
                requeue: Requeue::Never,
                applied: Keep,
                health: Steady,
            },
            Row {
                name: "new port that already has a configuration goes straight to Configuring",
                facts: with(f(None), &|p| p.desired = Some(a)),
                state: Configuring,
                action: A::Apply,
                requeue: Requeue::Never,
                applied: Keep,
                health: Progressing,
            },
            // Idle
            Row {
                name: "Idle without configuration stays Idle",
                facts: f(Some(Idle)),
                state: Idle,
                action: A::None,
                requeue: Requeue::Never,
                applied: Keep,
                health: Steady,
            },
            Row {
                name: "Idle + configuration -> Configuring",
                facts: with(f(Some(Idle)), &|p| p.desired = Some(a)),
                state: Configuring,
                action: A::Apply,
                requeue: Requeue::Never,
                applied: Keep,
                health: Progressing,
            },
            Row {
                name: "Idle + deletion -> Deleting",
                facts: with(f(Some(Idle)), &|p| p.deletion_requested = true),
                state: Deleting,
                action: A::RemoveFinalizer,
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
                action: A::RemoveFinalizer,
                requeue: Requeue::Never,
                applied: Keep,
                health: Progressing,
            },
            // Configuring
            Row {
                name: "Configuring applies",
                facts: with(f(Some(Configuring)), &|p| p.desired = Some(a)),
                state: Configuring,
                action: A::Apply,
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
                action: A::None,
                requeue: Requeue::DriftCheck,
                applied: SetToDesired,
                health: Steady,
            },
            Row {
                name: "Configuring + configuration cleared -> Cleaning",
                facts: f(Some(Configuring)),
                state: Cleaning,
                action: A::Clean,
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
                action: A::Clean,
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
                action: A::RemoveFinalizer,
                requeue: Requeue::Never,
                applied: Keep,
                health: Progressing,
            },
            Row {
                name: "first transient failure: stay, back off 5s",
                facts: with(f(Some(Configuring)), &|p| {
                    p.desired = Some(a);
                    p.outcome = Some(Outcome::Failed(FailureKind::Transient))
                }),
                state: Configuring,
                action: A::None,
                requeue: secs(5),
                applied: Keep,
                health: Failed(FailureKind::Transient),
            },
            Row {
                name: "fourth failure at the same target: 40s",
                facts: with(f(Some(Configuring)), &|p| {
                    p.desired = Some(a);
                    p.failures = 3;
                    p.last_attempt = Some("h-a");
                    p.outcome = Some(Outcome::Failed(FailureKind::Device))
                }),
                state: Configuring,
                action: A::None,
                requeue: secs(40),
                applied: Keep,
                health: Failed(FailureKind::Device),
            },
            Row {
                name: "backoff is capped at 5 minutes",
                facts: with(f(Some(Configuring)), &|p| {
                    p.desired = Some(a);
                    p.failures = 40;
                    p.last_attempt = Some("h-a");
                    p.outcome = Some(Outcome::Failed(FailureKind::Transient))
                }),
                state: Configuring,
                action: A::None,
                requeue: secs(300),
                applied: Keep,
                health: Failed(FailureKind::Transient),
            },
            Row {
                name: "a spec change resets the backoff",
                facts: with(f(Some(Configuring)), &|p| {
                    p.desired = Some(a2);
                    p.failures = 6;
                    p.last_attempt = Some("h-a");
                    p.outcome = Some(Outcome::Failed(FailureKind::Transient))
                }),
                state: Configuring,
                action: A::None,
                requeue: secs(5),
                applied: Keep,
                health: Failed(FailureKind::Transient),
            },
            Row {
                name: "invalid configuration: stay, wait for a change",
                facts: with(f(Some(Configuring)), &|p| {
                    p.desired = Some(a);
                    p.outcome = Some(Outcome::Failed(FailureKind::Invalid))
                }),
                state: Configuring,
                action: A::None,
                requeue: Requeue::Never,
                applied: Keep,
                health: Failed(FailureKind::Invalid),
            },
            // Active
            Row {
                name: "Active, check not due: wait for the drift interval",
                facts: with(f(Some(Active)), &|p| {
                    p.desired = Some(a);
                    p.applied = Some(a)
                }),
                state: Active,
                action: A::None,
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
                action: A::Verify,
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
                action: A::None,
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
                action: A::Apply,
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
                action: A::None,
                requeue: Requeue::DriftCheck,
                applied: Keep,
                health: Drifted,
            },
            Row {
                name: "drift check cannot reach the device: stay Active, back off",
                facts: with(f(Some(Active)), &|p| {
                    p.desired = Some(a);
                    p.applied = Some(a);
                    p.outcome = Some(Outcome::Failed(FailureKind::Transient))
                }),
                state: Active,
                action: A::None,
                requeue: secs(5),
                applied: Keep,
                health: Failed(FailureKind::Transient),
            },
            Row {
                name: "update: a new configuration ref -> Configuring",
                facts: with(f(Some(Active)), &|p| {
                    p.desired = Some(b);
                    p.applied = Some(a)
                }),
                state: Configuring,
                action: A::Apply,
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
                action: A::Apply,
                requeue: Requeue::Never,
                applied: Keep,
                health: Progressing,
            },
            Row {
                name: "deprovision: ref cleared -> Cleaning",
                facts: with(f(Some(Active)), &|p| p.applied = Some(a)),
                state: Cleaning,
                action: A::Clean,
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
                action: A::Clean,
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
                action: A::RemoveFinalizer,
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
                action: A::AddFinalizer,
                requeue: Requeue::Now,
                applied: Keep,
                health: Progressing,
            },
            // Cleaning
            Row {
                name: "Cleaning cleans",
                facts: with(f(Some(Cleaning)), &|p| p.applied = Some(a)),
                state: Cleaning,
                action: A::Clean,
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
                action: A::Clean,
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
                action: A::None,
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
                action: A::RemoveFinalizer,
                requeue: Requeue::Never,
                applied: Clear,
                health: Progressing,
            },
            Row {
                name: "cleaning fails: stay Cleaning, back off",
                facts: with(f(Some(Cleaning)), &|p| {
                    p.applied = Some(a);
                    p.failures = 1;
                    p.last_attempt = Some(CLEAN_TARGET);
                    p.outcome = Some(Outcome::Failed(FailureKind::Transient))
                }),
                state: Cleaning,
                action: A::None,
                requeue: secs(10),
                applied: Keep,
                health: Failed(FailureKind::Transient),
            },
            Row {
                name: "skip-cleanup set while Cleaning is stuck -> Deleting",
                facts: with(f(Some(Cleaning)), &|p| {
                    p.applied = Some(a);
                    p.deletion_requested = true;
                    p.skip_device_cleanup = true
                }),
                state: Deleting,
                action: A::RemoveFinalizer,
                requeue: Requeue::Never,
                applied: Keep,
                health: Progressing,
            },
            // Deleting
            Row {
                name: "Deleting removes the finalizer",
                facts: with(f(Some(Deleting)), &|p| p.deletion_requested = true),
                state: Deleting,
                action: A::RemoveFinalizer,
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
                action: A::None,
                requeue: Requeue::Never,
                applied: Keep,
                health: Steady,
            },
        ];
        let mut failures = Vec::new();
        for row in rows {
            let d = decide(&row.facts);
            let got = (d.state, d.action, d.requeue, d.applied.clone(), d.health);
            let want = (
                row.state,
                row.action,
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
                Some(Outcome::Failed(FailureKind::Transient)),
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
    /// scripted device, and record the states the port passes through.
    struct Driver {
        state: Option<PortState>,
        has_finalizer: bool,
        applied: Option<PortTarget>,
        failures: u32,
        last_attempt: Option<String>,
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
                trail: Vec::new(),
                device: Vec::new(),
            }
        }

        /// One reconcile. `device_ok` decides whether device actions succeed.
        fn reconcile(
            &mut self,
            desired: Option<&PortTarget>,
            deletion: bool,
            device_ok: bool,
        ) -> Decision {
            let mut outcome = None;
            for _ in 0..10 {
                let facts = PortFacts {
                    state: self.state,
                    has_finalizer: self.has_finalizer,
                    deletion_requested: deletion,
                    skip_device_cleanup: false,
                    desired,
                    applied: self.applied.as_ref(),
                    failures: self.failures,
                    last_attempt: self.last_attempt.as_deref(),
                    drift_check_due: false,
                    drift_reported: false,
                    drift_policy: DriftPolicy::Reconcile,
                    backoff: Backoff::default(),
                    outcome,
                };
                let d = decide(&facts);
                if self.state != Some(d.state) {
                    self.trail.push(d.state);
                }
                self.state = Some(d.state);
                self.failures = d.failures;
                self.last_attempt = d.attempt.clone();
                match d.applied {
                    AppliedChange::Keep => {}
                    AppliedChange::SetToDesired => self.applied = desired.cloned(),
                    AppliedChange::Clear => self.applied = None,
                }
                outcome = Some(match d.action {
                    // A requeue at once is another reconcile, as the controller does it.
                    Action::None if d.requeue == Requeue::Now => {
                        outcome = None;
                        continue;
                    }
                    Action::None => return d,
                    Action::AddFinalizer => {
                        self.has_finalizer = true;
                        Outcome::FinalizerAdded
                    }
                    Action::RemoveFinalizer => {
                        self.has_finalizer = false;
                        Outcome::FinalizerRemoved
                    }
                    _ if !device_ok => Outcome::Failed(FailureKind::Transient),
                    Action::Apply => {
                        self.device.push("apply");
                        Outcome::Applied
                    }
                    Action::Clean => {
                        self.device.push("clean");
                        Outcome::Cleaned
                    }
                    Action::Verify => Outcome::InSync,
                });
            }
            panic!("no steady state after 10 steps: {:?}", self.trail);
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
            f.last_attempt = Some("x");
            f.outcome = Some(Outcome::Waiting);
            let d = decide(&f);
            assert_eq!(d.state, state);
            assert_eq!(d.action, Action::None);
            assert_eq!(d.health, Health::Progressing);
            assert_eq!(d.failures, 0);
            assert_eq!(d.applied, AppliedChange::Keep);
            assert!(matches!(d.requeue, Requeue::After(_)));
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
        let d2 = port.reconcile(Some(&a), false, false);
        assert_eq!(d1.requeue, Requeue::After(Duration::from_secs(5)));
        assert_eq!(d2.requeue, Requeue::After(Duration::from_secs(10)));
        assert_eq!(port.state, Some(Configuring));
        let d3 = port.reconcile(Some(&a), false, true);
        assert_eq!(d3.state, Active);
        assert_eq!(d3.failures, 0);
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

//! How status is computed: facts in, status and conditions out — a port's status
//! after a decision, a Switch's from its check and its worker's reachability, a
//! ProviderSwitch's from its validation — plus the merge patch that writes a status
//! and the Events a reachability change calls for. Pure: no client, no clock (the
//! time is passed in), table-tested like the state machine.
//!
//! Conditions follow Kubernetes conventions: `type`, `status` (`True`, `False`,
//! `Unknown`), a bounded `reason`, a `message`, `observedGeneration`, and a
//! `lastTransitionTime` that moves only when the status does.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use serde_json::{Value, json};

use super::failure::Failure;
use crate::api::{ConditionsStatus, DriftPolicy, PortState, PortStatus};
use crate::state_machine::{Health, PortTarget};
use crate::worker::{Outage, Reachability};

/// The status of a condition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Truth {
    /// `True`.
    True,
    /// `False`.
    False,
    /// `Unknown`.
    Unknown,
}

impl Truth {
    fn as_str(self) -> &'static str {
        match self {
            Truth::True => "True",
            Truth::False => "False",
            Truth::Unknown => "Unknown",
        }
    }
}

impl From<bool> for Truth {
    fn from(b: bool) -> Self {
        if b { Truth::True } else { Truth::False }
    }
}

/// Normal or Warning (an Event's type).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    /// Something went as expected (a transition).
    Normal,
    /// Something failed.
    Warning,
}

/// An Event to publish: type, bounded reason, note.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventNote {
    /// Normal or Warning.
    pub severity: Severity,
    /// A bounded reason.
    pub reason: &'static str,
    /// What happened.
    pub note: String,
}

/// Condition `type_`, if set.
pub fn find_condition<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// Sets a condition at `now`, keeping lastTransitionTime unless the status changes.
pub fn set_condition(
    conditions: &mut Vec<Condition>,
    type_: &str,
    status: impl Into<Truth>,
    reason: &str,
    message: String,
    generation: Option<i64>,
    now: jiff::Timestamp,
) {
    let status = status.into().as_str().to_owned();
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(c) => {
            if c.status != status {
                c.last_transition_time = Time(now);
            }
            c.status = status;
            c.reason = reason.into();
            c.message = message;
            c.observed_generation = generation;
        }
        None => conditions.push(Condition {
            type_: type_.into(),
            status,
            reason: reason.into(),
            message,
            observed_generation: generation,
            last_transition_time: Time(now),
        }),
    }
}

/// A merge patch that makes the stored status `new`: every field of `new`, and
/// `null` for each field `old` has and `new` has not (a merge patch leaves absent
/// fields alone). No field list to keep in step with the type.
pub fn status_merge_patch(old: &impl serde::Serialize, new: &impl serde::Serialize) -> Value {
    let mut patch = serde_json::to_value(new).unwrap_or_else(|_| json!({}));
    if let (Some(p), Ok(Value::Object(o))) = (patch.as_object_mut(), serde_json::to_value(old)) {
        for key in o.keys() {
            p.entry(key.clone()).or_insert(Value::Null);
        }
    }
    json!({ "status": patch })
}

fn second(t: jiff::Timestamp) -> jiff::Timestamp {
    t.round(jiff::Unit::Second).unwrap_or(t)
}

/// What [`port_status`] needs besides the status.
pub struct StatusFacts<'a> {
    /// `metadata.generation`.
    pub generation: Option<i64>,
    /// The target applied to the device, if any.
    pub applied: Option<&'a PortTarget>,
    /// Consecutive failures.
    pub failures: u32,
    /// The attempt key they belong to.
    pub last_attempt: &'a Option<String>,
    /// When the last failure happened.
    pub last_failure: Option<jiff::Timestamp>,
    /// When the failed attempt is tried again.
    pub next_retry: Option<jiff::Timestamp>,
    /// How the port is doing.
    pub health: Health,
    /// The failure of the step just taken.
    pub failure: Option<&'a Failure>,
    /// What a waiting SmartNicPort waits for.
    pub waiting: Option<&'a str>,
    /// The switch's outage, when it does not answer.
    pub outage: Option<&'a Outage>,
    /// The Switch's drift policy.
    pub drift_policy: DriftPolicy,
    /// The configuration kind, for messages.
    pub kind: &'static str,
    /// The time.
    pub now: jiff::Timestamp,
}

/// Fills a port's status (its `state` already set) from the facts of a decision.
pub fn port_status(status: &mut PortStatus, facts: &StatusFacts<'_>) {
    let StatusFacts {
        generation,
        applied,
        failures,
        last_attempt,
        last_failure,
        next_retry,
        health,
        failure,
        waiting,
        outage,
        drift_policy,
        kind,
        now,
    } = *facts;
    status.configuration_ref = applied.map(|a| a.configuration.clone());
    status.configuration_hash = applied.map(|a| a.hash.clone());
    status.observed_generation = generation;
    let failing = failures > 0;
    status.failure_count = failing.then_some(failures as i32);
    status.last_attempt = if failing { last_attempt.clone() } else { None };
    status.last_failure_time = last_failure.filter(|_| failing).map(Time);
    status.next_retry_time = next_retry.filter(|_| failing).map(Time);
    let state = status.state.map(|s| s.to_string()).unwrap_or_default();
    let mut ready = |truth: Truth, reason: &str, message: String| {
        set_condition(
            &mut status.conditions,
            "Ready",
            truth,
            reason,
            message,
            generation,
            now,
        )
    };
    let mut last_error = status.last_error.take();
    match (health, failure, outage) {
        // Waiting out an earlier failure: the condition and error stay as it left
        // them.
        (Health::BackingOff, _, _) => {}
        (Health::SwitchDown, _, Some(o)) if status.state == Some(PortState::Active) => {
            ready(
                Truth::Unknown,
                o.error.category(),
                format!(
                    "the switch does not answer (since {}): {}; the configuration is believed \
                     to be still on the device, and is checked when it answers",
                    second(o.since),
                    o.error
                ),
            );
        }
        (Health::SwitchDown, _, Some(o)) => {
            last_error = Some(o.error.to_string());
            ready(
                Truth::False,
                o.error.category(),
                format!(
                    "{}; the switch does not answer since {} ({} failed attempts) and is tried \
                     again at {}; this port waits for it",
                    o.error,
                    second(o.since),
                    o.timing.failures,
                    second(o.timing.next_probe)
                ),
            );
        }
        (Health::Failed(_) | Health::SwitchDown, Some(f), _) => {
            last_error = Some(f.to_string());
            ready(Truth::False, f.category(), f.to_string());
        }
        (Health::Steady, _, _) => {
            last_error = None;
            let message = match applied {
                Some(a) => format!("the device carries {kind} {}", a.configuration.name),
                None => "the port is clean".into(),
            };
            ready(Truth::True, &state, message);
        }
        (Health::Drifted, _, _) => {
            last_error = None;
            ready(
                Truth::False,
                "Drifted",
                "the device differs from the applied configuration".into(),
            );
        }
        _ => {
            let (reason, message) = match waiting {
                Some(w) => ("WaitingForNextPort", w.to_owned()),
                None => (state.as_str(), format!("the port is {state}")),
            };
            ready(Truth::False, reason, message);
        }
    }
    status.last_error = last_error;
    if drift_policy == DriftPolicy::ReportOnly
        || status.conditions.iter().any(|c| c.type_ == "Drifted")
    {
        let drifted = health == Health::Drifted;
        set_condition(
            &mut status.conditions,
            "Drifted",
            drifted,
            if drifted { "DeviceDiffers" } else { "InSync" },
            if drifted {
                "the device differs from the applied configuration; driftPolicy ReportOnly \
                 leaves it alone"
                    .into()
            } else {
                "the device matches the applied configuration".into()
            },
            generation,
            now,
        );
    }
}

/// A Switch's status: `DeviceReachable` as its worker last found, and `Ready` (the
/// Switch, its ProviderSwitch and credentials are usable and the device answers), or
/// the failure that stops it.
pub fn switch_status(
    status: &mut ConditionsStatus,
    verdict: &Result<Reachability, Failure>,
    ports: usize,
    generation: Option<i64>,
    now: jiff::Timestamp,
) {
    status.observed_generation = generation;
    let mut set = |type_: &str, truth: Truth, reason: &str, message: String| {
        set_condition(
            &mut status.conditions,
            type_,
            truth,
            reason,
            message,
            generation,
            now,
        )
    };
    match verdict {
        Ok(Reachability::Reachable) => {
            set(
                "DeviceReachable",
                Truth::True,
                "Reachable",
                "the device answered".into(),
            );
            set(
                "Ready",
                Truth::True,
                "Ready",
                format!("{ports} ports managed"),
            );
        }
        Ok(Reachability::Unknown) => {
            let message = "the device has not been tried yet".to_owned();
            set(
                "DeviceReachable",
                Truth::Unknown,
                "Probing",
                message.clone(),
            );
            set("Ready", Truth::Unknown, "Probing", message);
        }
        Ok(Reachability::Down(o)) => {
            let message = format!(
                "{} (since {}, {} failed attempts; tried again at {})",
                o.error,
                second(o.since),
                o.timing.failures,
                second(o.timing.next_probe)
            );
            let reason = o.error.category();
            set("DeviceReachable", Truth::False, reason, message.clone());
            set("Ready", Truth::False, reason, message);
        }
        Err(f) => set("Ready", Truth::False, f.category(), f.to_string()),
    }
}

/// The Event a Switch's reachability change calls for: one Warning when the device
/// stops answering, one Normal when it answers again; nothing while it stays so.
pub fn reachability_event(
    before: Option<&str>,
    after: &ConditionsStatus,
    verdict: &Result<Reachability, Failure>,
) -> Option<EventNote> {
    let now = find_condition(&after.conditions, "DeviceReachable").map(|c| c.status.as_str());
    match (before, now, verdict) {
        (before, Some("False"), Ok(Reachability::Down(o))) if before != Some("False") => {
            Some(EventNote {
                severity: Severity::Warning,
                reason: o.error.category(),
                note: format!("the device does not answer: {}", o.error),
            })
        }
        (Some("False"), Some("True"), _) => Some(EventNote {
            severity: Severity::Normal,
            reason: "Reachable",
            note: "the device answers again".into(),
        }),
        _ => None,
    }
}

/// A ProviderSwitch's status: `Ready` when its spec and credentials are valid.
pub fn provider_status(
    status: &mut ConditionsStatus,
    verdict: &Result<(), Failure>,
    generation: Option<i64>,
    now: jiff::Timestamp,
) {
    status.observed_generation = generation;
    let (truth, reason, message) = match verdict {
        Ok(()) => (
            true,
            "Valid",
            "specification and credentials are valid".to_owned(),
        ),
        Err(f) => (false, f.category(), f.to_string()),
    };
    set_condition(
        &mut status.conditions,
        "Ready",
        truth,
        reason,
        message,
        generation,
        now,
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::ConfigurationRef;
    use crate::backends::BackendError;
    use crate::state_machine::{FailureKind, SwitchOutage};
    use crate::validate::{FieldError, ValidationErrors};
    use patchbay_providers::{Cause, DeviceError};

    fn t(s: i64) -> jiff::Timestamp {
        jiff::Timestamp::from_second(1_800_000_000 + s).unwrap()
    }

    fn outage() -> Outage {
        Outage {
            error: DeviceError::Unreachable {
                address: "10.0.0.1:22".into(),
                cause: Cause::msg("connection refused"),
            },
            since: t(0),
            timing: SwitchOutage {
                failures: 3,
                last_failure: t(30),
                next_probe: t(70),
            },
        }
    }

    fn target() -> PortTarget {
        PortTarget {
            configuration: ConfigurationRef {
                name: "tenant-web".into(),
                namespace: Some("ns".into()),
            },
            hash: "h".into(),
        }
    }

    fn ready(s: &PortStatus) -> (String, String, String) {
        let c = find_condition(&s.conditions, "Ready").expect("Ready");
        (c.status.clone(), c.reason.clone(), c.message.clone())
    }

    #[test]
    fn port_status_table() {
        let applied = target();
        let invalid = Failure::InvalidConfiguration(ValidationErrors(vec![FieldError {
            path: "spec.mtu".into(),
            reason: "this switch cannot configure MTU".into(),
        }]));
        let down = outage();
        let none: Option<String> = None;
        let attempt = Some("apply/abc".to_owned());
        struct Row<'a> {
            name: &'static str,
            state: PortState,
            facts: StatusFacts<'a>,
            ready: (&'static str, &'static str, &'static str),
            last_error: Option<&'static str>,
            failure_count: Option<i32>,
        }
        let base = |state_health: Health| StatusFacts {
            generation: Some(4),
            applied: None,
            failures: 0,
            last_attempt: &none,
            last_failure: None,
            next_retry: None,
            health: state_health,
            failure: None,
            waiting: None,
            outage: None,
            drift_policy: DriftPolicy::Reconcile,
            kind: "SwitchPortConfiguration",
            now: t(100),
        };
        let rows = vec![
            Row {
                name: "Active and in sync",
                state: PortState::Active,
                facts: StatusFacts {
                    applied: Some(&applied),
                    ..base(Health::Steady)
                },
                ready: (
                    "True",
                    "Active",
                    "the device carries SwitchPortConfiguration tenant-web",
                ),
                last_error: None,
                failure_count: None,
            },
            Row {
                name: "Idle and clean",
                state: PortState::Idle,
                facts: base(Health::Steady),
                ready: ("True", "Idle", "the port is clean"),
                last_error: None,
                failure_count: None,
            },
            Row {
                name: "Configuring, on its way",
                state: PortState::Configuring,
                facts: base(Health::Progressing),
                ready: ("False", "Configuring", "the port is Configuring"),
                last_error: None,
                failure_count: None,
            },
            Row {
                name: "a SmartNicPort waiting for its next port",
                state: PortState::Configuring,
                facts: StatusFacts {
                    waiting: Some("waiting for SwitchPort ns/p1"),
                    ..base(Health::Progressing)
                },
                ready: (
                    "False",
                    "WaitingForNextPort",
                    "waiting for SwitchPort ns/p1",
                ),
                last_error: None,
                failure_count: None,
            },
            Row {
                name: "an invalid configuration",
                state: PortState::Configuring,
                facts: StatusFacts {
                    failures: 1,
                    last_attempt: &attempt,
                    last_failure: Some(t(99)),
                    failure: Some(&invalid),
                    ..base(Health::Failed(FailureKind::Invalid))
                },
                ready: (
                    "False",
                    "InvalidConfiguration",
                    "spec.mtu: this switch cannot configure MTU",
                ),
                last_error: Some("spec.mtu: this switch cannot configure MTU"),
                failure_count: Some(1),
            },
            Row {
                name: "a port waiting for a switch that does not answer",
                state: PortState::Configuring,
                facts: StatusFacts {
                    failures: 3,
                    last_attempt: &attempt,
                    last_failure: Some(t(30)),
                    next_retry: Some(t(70)),
                    outage: Some(&down),
                    ..base(Health::SwitchDown)
                },
                ready: (
                    "False",
                    "DeviceUnreachable",
                    "cannot reach the device at 10.0.0.1:22: connection refused; the switch \
                     does not answer since 2027-01-15T08:00:00Z (3 failed attempts) and is \
                     tried again at 2027-01-15T08:01:10Z; this port waits for it",
                ),
                last_error: Some("cannot reach the device at 10.0.0.1:22: connection refused"),
                failure_count: Some(3),
            },
            Row {
                name: "an Active port on a switch that went away",
                state: PortState::Active,
                facts: StatusFacts {
                    applied: Some(&applied),
                    outage: Some(&down),
                    ..base(Health::SwitchDown)
                },
                ready: (
                    "Unknown",
                    "DeviceUnreachable",
                    "the switch does not answer (since 2027-01-15T08:00:00Z): cannot reach the \
                     device at 10.0.0.1:22: connection refused; the configuration is believed \
                     to be still on the device, and is checked when it answers",
                ),
                last_error: None,
                failure_count: None,
            },
            Row {
                name: "drift reported, not repaired",
                state: PortState::Active,
                facts: StatusFacts {
                    applied: Some(&applied),
                    drift_policy: DriftPolicy::ReportOnly,
                    ..base(Health::Drifted)
                },
                ready: (
                    "False",
                    "Drifted",
                    "the device differs from the applied configuration",
                ),
                last_error: None,
                failure_count: None,
            },
        ];
        for row in rows {
            let mut s = PortStatus {
                state: Some(row.state),
                ..Default::default()
            };
            port_status(&mut s, &row.facts);
            let (status, reason, message) = ready(&s);
            assert_eq!(
                (status.as_str(), reason.as_str(), message.as_str()),
                row.ready,
                "{}",
                row.name
            );
            assert_eq!(s.last_error.as_deref(), row.last_error, "{}", row.name);
            assert_eq!(s.failure_count, row.failure_count, "{}", row.name);
            assert_eq!(s.observed_generation, Some(4), "{}", row.name);
            let ready_since = &find_condition(&s.conditions, "Ready")
                .unwrap()
                .last_transition_time;
            assert_eq!(ready_since.0, t(100), "{}", row.name);
        }
    }

    #[test]
    fn backing_off_leaves_the_failure_as_it_was_and_times_move_only_on_change() {
        let mut s = PortStatus {
            state: Some(PortState::Configuring),
            last_error: Some("the device rejected `x`: no".into()),
            ..Default::default()
        };
        set_condition(
            &mut s.conditions,
            "Ready",
            false,
            "CommandRejected",
            "the device rejected `x`: no".into(),
            Some(1),
            t(0),
        );
        let before = s.clone();
        let attempt = Some("apply/abc".to_owned());
        port_status(
            &mut s,
            &StatusFacts {
                generation: Some(1),
                applied: None,
                failures: 2,
                last_attempt: &attempt,
                last_failure: Some(t(0)),
                next_retry: Some(t(10)),
                health: Health::BackingOff,
                failure: None,
                waiting: None,
                outage: None,
                drift_policy: DriftPolicy::Reconcile,
                kind: "SwitchPortConfiguration",
                now: t(5),
            },
        );
        assert_eq!(s.conditions, before.conditions);
        assert_eq!(s.last_error, before.last_error);
        assert_eq!(s.next_retry_time, Some(Time(t(10))));
        // Same status again: lastTransitionTime stays; another status: it moves.
        set_condition(
            &mut s.conditions,
            "Ready",
            false,
            "X",
            "y".into(),
            None,
            t(7),
        );
        assert_eq!(s.conditions[0].last_transition_time, Time(t(0)));
        set_condition(
            &mut s.conditions,
            "Ready",
            true,
            "X",
            "y".into(),
            None,
            t(8),
        );
        assert_eq!(s.conditions[0].last_transition_time, Time(t(8)));
    }

    #[test]
    fn switch_status_and_its_events() {
        let down: Result<Reachability, Failure> = Ok(Reachability::Down(outage()));
        let up: Result<Reachability, Failure> = Ok(Reachability::Reachable);
        let mut s = ConditionsStatus::default();
        switch_status(&mut s, &up, 3, Some(2), t(0));
        let c = |s: &ConditionsStatus, ty: &str| {
            let c = find_condition(&s.conditions, ty).unwrap();
            (c.status.clone(), c.reason.clone(), c.message.clone())
        };
        assert_eq!(c(&s, "Ready").2, "3 ports managed");
        assert_eq!(c(&s, "DeviceReachable").0, "True");
        assert_eq!(reachability_event(None, &s, &up), None);
        // It goes away: one Warning, then none while it stays away.
        switch_status(&mut s, &down, 3, Some(2), t(40));
        let (status, reason, message) = c(&s, "DeviceReachable");
        assert_eq!(
            (status.as_str(), reason.as_str()),
            ("False", "DeviceUnreachable")
        );
        assert!(
            message.ends_with("(since 2027-01-15T08:00:00Z, 3 failed attempts; tried again at 2027-01-15T08:01:10Z)"),
            "{message}"
        );
        let warning = reachability_event(Some("True"), &s, &down).unwrap();
        assert_eq!(
            (warning.severity, warning.reason),
            (Severity::Warning, "DeviceUnreachable")
        );
        assert_eq!(reachability_event(Some("False"), &s, &down), None);
        // Back: one Normal.
        switch_status(&mut s, &up, 3, Some(2), t(80));
        let back = reachability_event(Some("False"), &s, &up).unwrap();
        assert_eq!(
            (back.severity, back.reason),
            (Severity::Normal, "Reachable")
        );
        // Not tried yet, and a Switch that cannot be used.
        let mut fresh = ConditionsStatus::default();
        switch_status(&mut fresh, &Ok(Reachability::Unknown), 0, None, t(0));
        assert_eq!(c(&fresh, "Ready").0, "Unknown");
        let unusable = Err(Failure::Backend(BackendError::HostKeyNotPinned));
        switch_status(&mut fresh, &unusable, 0, None, t(1));
        assert_eq!(c(&fresh, "Ready").1, "HostKeyNotPinned");
        assert_eq!(c(&fresh, "DeviceReachable").0, "Unknown", "untouched");
    }

    #[test]
    fn provider_status_says_why_it_is_not_ready() {
        let mut s = ConditionsStatus::default();
        provider_status(&mut s, &Ok(()), Some(1), t(0));
        assert_eq!(s.conditions[0].reason, "Valid");
        let missing = Err(Failure::Backend(BackendError::Credentials(
            "Secret \"login\" (spec.credentialsSecretRef) not found".into(),
        )));
        provider_status(&mut s, &missing, Some(2), t(1));
        assert_eq!(
            (
                s.conditions[0].status.as_str(),
                s.conditions[0].reason.as_str()
            ),
            ("False", "CredentialsInvalid")
        );
        assert_eq!(s.observed_generation, Some(2));
    }

    #[test]
    fn a_status_patch_clears_what_the_new_status_no_longer_has() {
        let old = PortStatus {
            state: Some(PortState::Configuring),
            last_error: Some("boom".into()),
            failure_count: Some(2),
            ..Default::default()
        };
        let new = PortStatus {
            state: Some(PortState::Active),
            ..Default::default()
        };
        assert_eq!(
            status_merge_patch(&old, &new),
            json!({"status": {"state": "Active", "lastError": null, "failureCount": null}})
        );
    }
}

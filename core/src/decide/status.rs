//! How status is computed: facts in, status and conditions out — a port's status
//! after a decision, a Switch's from its check and its worker's reachability, a
//! ProviderSwitch's from its validation, a ServerClaim's from its allocation plan, a
//! Server's from its binding —
//! plus the merge patch that writes a status
//! and the Events a reachability change calls for. Pure: no client, no clock (the
//! time is passed in), table-tested like the state machine.
//!
//! Conditions follow Kubernetes conventions: `type`, `status` (`True`, `False`,
//! `Unknown`), a bounded `reason`, a `message`, `observedGeneration`, and a
//! `lastTransitionTime` that moves only when the status does.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use super::failure::Failure;
use crate::api::keys::{PAUSED_ANNOTATION, PROVISIONED_ANNOTATION};
use crate::api::server::ClaimRef;
use crate::api::server::{LinkedHost, NicPortStatus};
use crate::api::{
    ConditionsStatus, DriftPolicy, PortState, PortStatus, RoleAllocation, Server, ServerClaim,
    ServerClaimSpec, ServerClaimStatus, ServerPhase, ServerStatus, SwitchStatus,
};
use crate::decide::allocation::ClaimPlan;
use crate::decide::phases::{
    ClaimNetwork, Gate, Hold, NicTarget, PhaseStep, Verdict, claim_entries, port_targets,
};
use crate::decide::reachability::{Outage, Reachability};
use crate::decide::state_machine::{Health, PortTarget};
use crate::decide::validate::{ValidationErrors, validate_server};

pub use super::conditions::{
    EventNote, Severity, Truth, find_condition, set_condition, status_merge_patch,
};

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
    status: &mut SwitchStatus,
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
    after: &SwitchStatus,
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

/// A ProviderSwitch's status: `Ready` when its spec and credentials are valid, its
/// message adding `note` (a setting that cannot take effect) when there is one.
pub fn provider_status(
    status: &mut ConditionsStatus,
    verdict: &Result<(), Failure>,
    note: Option<&str>,
    generation: Option<i64>,
    now: jiff::Timestamp,
) {
    status.observed_generation = generation;
    let (truth, reason, message) = match verdict {
        Ok(()) => (
            true,
            "Valid",
            match note {
                None => "specification and credentials are valid".to_owned(),
                Some(note) => format!("specification and credentials are valid; {note}"),
            },
        ),
        Err(f) => (false, f.category(), f.to_string()),
    };
    let conditions = &mut status.conditions;
    set_condition(conditions, "Ready", truth, reason, message, generation, now);
}

mod hosts;
pub use hosts::{HostFacts, claim_ready, claim_status, host_conditions, server_status};

#[cfg(test)]
mod tests;

//! The vocabulary of status: a condition's truth, setting and finding conditions
//! by Kubernetes conventions (`lastTransitionTime` moves only when the status
//! does), the merge patch that writes a status, and an Event's type and note.
//! Pure: the time is passed in. Everything that computes a status uses it
//! ([`crate::decide::status`], [`crate::decide::cabling`], the BGP and neighbour
//! statuses).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use serde_json::{Value, json};

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

//! Events in two API groups over one storage, as the Kubernetes API server does it:
//! every Event is stored once in its core/v1 shape and served through both
//! `/api/v1/…/events` and `/apis/events.k8s.io/v1/…/events`, converted field by field
//! (`involvedObject` ↔ `regarding`, `message` ↔ `note`, `source` ↔
//! `deprecatedSource`, `firstTimestamp`/`lastTimestamp`/`count` ↔ their `deprecated…`
//! forms, `reportingComponent` ↔ `reportingController`). The field selectors each
//! group supports are those of the API server (`involvedObject.*`, `reason`,
//! `reportingComponent`, `source`, `type` on core; `regarding.*`,
//! `reportingController` on events.k8s.io, mapped onto the same fields). Pure, no I/O.

use serde_json::{Map, Value};

/// The group whose `events` resource is the second face of core Events.
pub const EVENTS_GROUP: &str = "events.k8s.io";

/// Field name pairs: (core/v1, events.k8s.io/v1).
const RENAMED: &[(&str, &str)] = &[
    ("involvedObject", "regarding"),
    ("message", "note"),
    ("source", "deprecatedSource"),
    ("firstTimestamp", "deprecatedFirstTimestamp"),
    ("lastTimestamp", "deprecatedLastTimestamp"),
    ("count", "deprecatedCount"),
    ("reportingComponent", "reportingController"),
];

/// Whether `(group, plural)` is the events.k8s.io face of core Events.
pub fn is_events_alias(group: &str, plural: &str) -> bool {
    group == EVENTS_GROUP && plural == "events"
}

fn rename(obj: Value, from_core: bool) -> Value {
    let Value::Object(map) = obj else {
        return obj;
    };
    let out: Map<String, Value> = map
        .into_iter()
        .map(|(k, v)| {
            let renamed = RENAMED.iter().find_map(|(core, v1)| {
                if from_core && k == *core {
                    Some(*v1)
                } else if !from_core && k == *v1 {
                    Some(*core)
                } else {
                    None
                }
            });
            (renamed.map_or(k, str::to_owned), v)
        })
        .collect();
    Value::Object(out)
}

/// A stored (core/v1) Event as events.k8s.io/v1 presents it (apiVersion left to the
/// caller).
pub fn core_to_v1(obj: Value) -> Value {
    rename(obj, true)
}

/// An events.k8s.io/v1 Event in its stored core/v1 shape (apiVersion `v1`).
pub fn v1_to_core(obj: Value) -> Value {
    let mut out = rename(obj, false);
    if let Some(m) = out.as_object_mut() {
        m.insert("apiVersion".into(), Value::String("v1".into()));
    }
    out
}

/// The stored field a field-selector label of `group`'s Events names, or `None`
/// when the API server does not support that label (`metadata.*` is handled by the
/// caller).
pub fn field_label(group: &str, label: &str) -> Option<&'static str> {
    const CORE: &[&str] = &[
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "involvedObject.resourceVersion",
        "involvedObject.fieldPath",
        "reason",
        "reportingComponent",
        "source",
        "type",
    ];
    if group.is_empty() {
        return CORE.iter().copied().find(|l| *l == label);
    }
    if group != EVENTS_GROUP {
        return None;
    }
    if let Some(rest) = label.strip_prefix("regarding.") {
        let core = format!("involvedObject.{rest}");
        return CORE.iter().copied().find(|l| *l == core);
    }
    match label {
        "reportingController" => Some("reportingComponent"),
        "reason" | "source" | "type" => CORE.iter().copied().find(|l| *l == label),
        _ => None,
    }
}

/// The value of stored field `label` (one of [`field_label`]'s answers) of a core
/// Event; absent fields read as "", as the API server's selectable fields do.
pub fn field_value<'a>(obj: &'a Value, label: &str) -> &'a str {
    let pointer = match label {
        "source" => "/source/component".to_owned(),
        other => format!("/{}", other.replace('.', "/")),
    };
    obj.pointer(&pointer).and_then(Value::as_str).unwrap_or("")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn both_faces_carry_the_same_event() {
        let v1 = json!({
            "apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": "p1.17", "namespace": "ns"},
            "eventTime": "2026-11-23T10:00:00.000000Z",
            "regarding": {"kind": "SwitchPort", "name": "p1", "namespace": "ns", "uid": "u1"},
            "note": "cannot reach the device", "reason": "DeviceUnreachable",
            "type": "Warning", "action": "Reconcile",
            "reportingController": "patchbay", "reportingInstance": "patchbay",
            "series": {"count": 3, "lastObservedTime": "2026-11-23T10:00:09.000000Z"},
        });
        let core = v1_to_core(v1.clone());
        assert_eq!(core["apiVersion"], "v1");
        assert_eq!(core["involvedObject"]["name"], "p1");
        assert_eq!(core["message"], "cannot reach the device");
        assert_eq!(core["reportingComponent"], "patchbay");
        assert_eq!(core["series"]["count"], 3);
        assert!(core.get("regarding").is_none() && core.get("note").is_none());
        let mut back = core_to_v1(core);
        back["apiVersion"] = json!("events.k8s.io/v1");
        assert_eq!(back, v1);
    }

    #[test]
    fn field_labels_of_each_group() {
        assert_eq!(
            field_label("", "involvedObject.kind"),
            Some("involvedObject.kind")
        );
        assert_eq!(
            field_label(EVENTS_GROUP, "regarding.name"),
            Some("involvedObject.name")
        );
        assert_eq!(
            field_label(EVENTS_GROUP, "reportingController"),
            Some("reportingComponent")
        );
        assert_eq!(field_label(EVENTS_GROUP, "involvedObject.kind"), None);
        assert_eq!(field_label("", "regarding.kind"), None);
        assert_eq!(field_label("", "note"), None);
        assert_eq!(field_label("patchbay.dev", "reason"), None);
        let core = json!({"involvedObject": {"kind": "SwitchPort"}, "source": {"component": "x"}});
        assert_eq!(field_value(&core, "involvedObject.kind"), "SwitchPort");
        assert_eq!(field_value(&core, "source"), "x");
        assert_eq!(field_value(&core, "reason"), "");
    }
}

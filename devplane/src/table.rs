//! Server-side printing: `meta.k8s.io/v1` Table responses, so `kubectl get` shows a
//! CRD's additionalPrinterColumns (STATE, SWITCH, PORT, …). Includes the small JSONPath
//! subset printer columns use (`.a.b`, `.a[0]`, `.a[?(@.type=="Ready")].status`,
//! `.metadata.annotations.example\.com/key`).
//! Pure, no I/O.

use serde_json::{Value, json};

use crate::resources::Resource;

/// Evaluates a printer-column JSONPath against an object.
pub fn jsonpath(obj: &Value, path: &str) -> Option<Value> {
    let mut current = vec![obj.clone()];
    let mut rest = path.trim().trim_start_matches('{').trim_end_matches('}');
    rest = rest.strip_prefix('$').unwrap_or(rest);
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('.') {
            // A field name ends at an unescaped `.` or `[` (`\.` is a dot in the
            // name, as in `.metadata.annotations.example\.com/key`).
            let mut end = r.len();
            let mut escaped = false;
            for (i, c) in r.char_indices() {
                match c {
                    _ if escaped => escaped = false,
                    '\\' => escaped = true,
                    '.' | '[' => {
                        end = i;
                        break;
                    }
                    _ => {}
                }
            }
            let field = r[..end].replace("\\.", ".");
            current = current
                .iter()
                .filter_map(|v| v.get(&field).cloned())
                .collect();
            rest = &r[end..];
        } else if let Some(r) = rest.strip_prefix('[') {
            let end = r.find(']')?;
            let inner = &r[..end];
            rest = &r[end + 1..];
            if let Some(filter) = inner.strip_prefix("?(@.").and_then(|f| f.strip_suffix(')')) {
                let (field, want) = filter.split_once("==")?;
                let want = want.trim().trim_matches(|c| c == '"' || c == '\'');
                current = current
                    .iter()
                    .filter_map(Value::as_array)
                    .flatten()
                    .filter(|item| {
                        item.get(field.trim()).is_some_and(|v| match v {
                            Value::String(s) => s == want,
                            Value::Number(n) => n.to_string() == want,
                            Value::Bool(b) => b.to_string() == want,
                            _ => false,
                        })
                    })
                    .cloned()
                    .collect();
            } else if inner == "*" {
                current = current
                    .iter()
                    .filter_map(Value::as_array)
                    .flatten()
                    .cloned()
                    .collect();
            } else {
                let i: usize = inner.parse().ok()?;
                current = current.iter().filter_map(|v| v.get(i).cloned()).collect();
            }
        } else {
            return None;
        }
    }
    match current.len() {
        0 => None,
        1 => current.pop(),
        _ => Some(Value::Array(current)),
    }
}

/// `5s`, `3m`, `2h`, `4d` since an RFC 3339 timestamp.
pub fn age(timestamp: &str) -> String {
    let Ok(t) = timestamp.parse::<jiff::Timestamp>() else {
        return "<unknown>".into();
    };
    let secs = (jiff::Timestamp::now().as_second() - t.as_second()).max(0);
    match secs {
        s if s < 120 => format!("{s}s"),
        s if s < 2 * 3600 => format!("{}m", s / 60),
        s if s < 48 * 3600 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86400),
    }
}

fn columns(res: &Resource, version: &str) -> Vec<Value> {
    match res.printer_columns.get(version) {
        Some(cols) if !cols.is_empty() => cols.clone(),
        _ => {
            vec![json!({"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"})]
        }
    }
}

/// The column definitions: Name first, then the resource's columns.
pub fn column_definitions(res: &Resource, version: &str) -> Vec<Value> {
    let mut defs = vec![json!({"name": "Name", "type": "string", "format": "name",
        "description": "Name must be unique within a namespace.", "priority": 0})];
    for c in columns(res, version) {
        defs.push(json!({
            "name": c.get("name").cloned().unwrap_or(json!("")),
            "type": c.get("type").cloned().unwrap_or(json!("string")),
            "format": c.get("format").cloned().unwrap_or(json!("")),
            "description": c.get("description").cloned().unwrap_or(json!("")),
            "priority": c.get("priority").cloned().unwrap_or(json!(0)),
        }));
    }
    defs
}

/// One row for an object.
pub fn row(res: &Resource, version: &str, obj: &Value, include_object: &str) -> Value {
    let mut cells = vec![obj.pointer("/metadata/name").cloned().unwrap_or(json!(""))];
    for c in columns(res, version) {
        let path = c.get("jsonPath").and_then(Value::as_str).unwrap_or("");
        let ty = c.get("type").and_then(Value::as_str).unwrap_or("string");
        let cell = match jsonpath(obj, path) {
            None | Some(Value::Null) => Value::Null,
            Some(Value::String(s)) if ty == "date" => json!(age(&s)),
            Some(Value::Array(items)) => json!(
                items
                    .iter()
                    .map(|v| v
                        .as_str()
                        .map(str::to_owned)
                        .unwrap_or_else(|| v.to_string()))
                    .collect::<Vec<_>>()
                    .join(",")
            ),
            Some(v) => v,
        };
        cells.push(cell);
    }
    let object = match include_object {
        "None" => Value::Null,
        "Object" => obj.clone(),
        _ => json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                     "metadata": obj.get("metadata").cloned().unwrap_or(json!({}))}),
    };
    json!({"cells": cells, "object": object})
}

/// A whole Table.
pub fn table(
    res: &Resource,
    version: &str,
    objects: &[&Value],
    include_object: &str,
    with_headers: bool,
    list_meta: Value,
) -> Value {
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": list_meta,
        "columnDefinitions": if with_headers { column_definitions(res, version) } else { Vec::new() },
        "rows": objects.iter().map(|o| row(res, version, o, include_object)).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jsonpath_subset() {
        let obj = json!({"status": {"state": "Active", "conditions": [
            {"type": "Drifted", "status": "False"}, {"type": "Ready", "status": "True"}]},
            "spec": {"list": [1, 2]}});
        assert_eq!(jsonpath(&obj, ".status.state"), Some(json!("Active")));
        assert_eq!(
            jsonpath(&obj, ".status.conditions[?(@.type==\"Ready\")].status"),
            Some(json!("True"))
        );
        assert_eq!(jsonpath(&obj, ".spec.list[1]"), Some(json!(2)));
        assert_eq!(jsonpath(&obj, ".spec.missing"), None);
        let annotated = json!({"metadata": {"annotations": {"patchbay.dev/host": "Server/a"}}});
        assert_eq!(
            jsonpath(&annotated, ".metadata.annotations.patchbay\\.dev/host"),
            Some(json!("Server/a"))
        );
    }
}

//! Validation of custom objects against a CRD's `openAPIV3Schema`, the way the
//! Kubernetes API server does it: unknown fields pruned (or refused under
//! `fieldValidation=Strict`), defaults applied, then types, `required`, `enum`,
//! `minimum`/`maximum`, `pattern`, lengths, item counts and list-map key uniqueness
//! checked. Pure, no I/O. CEL (`x-kubernetes-validations`) is not evaluated.

use std::collections::{BTreeSet, HashMap};

use regex::Regex;
use serde_json::{Map, Value};

/// One invalid field, shaped like `metav1.StatusCause`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cause {
    /// `FieldValueInvalid`, `FieldValueRequired`, …
    pub reason: &'static str,
    /// The field path (`spec.vlans[0].id`).
    pub field: String,
    /// The message, in the API server's words.
    pub message: String,
}

/// What checking an object found.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Invalid fields (the object must be refused).
    pub causes: Vec<Cause>,
    /// Paths of unknown fields that were pruned.
    pub unknown: Vec<String>,
}

/// Compiled patterns, shared across requests.
#[derive(Default)]
pub struct PatternCache(HashMap<String, Option<Regex>>);

impl PatternCache {
    fn get(&mut self, pattern: &str) -> Option<&Regex> {
        self.0
            .entry(pattern.to_owned())
            .or_insert_with(|| Regex::new(pattern).ok())
            .as_ref()
    }
}

/// Prunes, defaults and validates `obj` (a whole object) against `schema` (the
/// CRD version's `openAPIV3Schema`). `metadata` is left to the caller.
pub fn check(schema: &Value, obj: &mut Value, cache: &mut PatternCache) -> Outcome {
    let mut out = Outcome::default();
    let Some(obj_map) = obj.as_object_mut() else {
        out.causes.push(Cause {
            reason: "FieldValueTypeInvalid",
            field: String::new(),
            message: "Invalid value: the object must be a JSON object".into(),
        });
        return out;
    };
    let props = schema.get("properties").and_then(Value::as_object);
    let keys: Vec<String> = obj_map.keys().cloned().collect();
    for key in keys {
        if matches!(key.as_str(), "apiVersion" | "kind" | "metadata") {
            continue;
        }
        match props.and_then(|p| p.get(&key)) {
            Some(sub) => {
                if obj_map.get(&key).is_some_and(Value::is_null) && !nullable(sub) {
                    obj_map.remove(&key);
                    continue;
                }
                if let Some(v) = obj_map.get_mut(&key) {
                    walk(sub, v, &key, &mut out, cache);
                }
            }
            None if preserves_unknown(schema) => {}
            None => {
                obj_map.remove(&key);
                out.unknown.push(key);
            }
        }
    }
    apply_defaults(schema, obj_map, "", &mut out, cache);
    required(schema, obj_map, "", &mut out);
    out
}

fn nullable(schema: &Value) -> bool {
    schema
        .get("nullable")
        .and_then(Value::as_bool)
        .unwrap_or(false)
}

fn preserves_unknown(schema: &Value) -> bool {
    schema
        .get("x-kubernetes-preserve-unknown-fields")
        .and_then(Value::as_bool)
        .unwrap_or(false)
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

fn short(v: &Value) -> String {
    let s = match v {
        Value::String(s) => format!("{s:?}"),
        other => other.to_string(),
    };
    if s.chars().count() > 80 {
        format!("{}…", s.chars().take(80).collect::<String>())
    } else {
        s
    }
}

fn invalid(out: &mut Outcome, path: &str, value: &Value, detail: String) {
    out.causes.push(Cause {
        reason: "FieldValueInvalid",
        field: path.to_owned(),
        message: format!("Invalid value: {}: {detail}", short(value)),
    });
}

fn apply_defaults(
    schema: &Value,
    map: &mut Map<String, Value>,
    path: &str,
    out: &mut Outcome,
    cache: &mut PatternCache,
) {
    let Some(props) = schema.get("properties").and_then(Value::as_object) else {
        return;
    };
    for (key, sub) in props {
        if map.contains_key(key) {
            continue;
        }
        if let Some(default) = sub.get("default") {
            let mut v = default.clone();
            walk(sub, &mut v, &join(path, key), out, cache);
            map.insert(key.clone(), v);
        }
    }
}

fn required(schema: &Value, map: &Map<String, Value>, path: &str, out: &mut Outcome) {
    if let Some(req) = schema.get("required").and_then(Value::as_array) {
        for r in req.iter().filter_map(Value::as_str) {
            if !map.contains_key(r) {
                out.causes.push(Cause {
                    reason: "FieldValueRequired",
                    field: join(path, r),
                    message: "Required value".into(),
                });
            }
        }
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn walk(
    schema: &Value,
    value: &mut Value,
    path: &str,
    out: &mut Outcome,
    cache: &mut PatternCache,
) {
    if value.is_null() {
        if !nullable(schema) {
            out.causes.push(Cause {
                reason: "FieldValueTypeInvalid",
                field: path.to_owned(),
                message: "Invalid value: \"null\": field must not be null".into(),
            });
        }
        return;
    }
    let int_or_string = schema
        .get("x-kubernetes-int-or-string")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    if let Some(want) = schema.get("type").and_then(Value::as_str) {
        let got = type_name(value);
        let ok = got == want
            || (want == "number" && got == "integer")
            || (int_or_string && matches!(got, "integer" | "string"));
        if !ok {
            out.causes.push(Cause {
                reason: "FieldValueTypeInvalid",
                field: path.to_owned(),
                message: format!(
                    "Invalid value: \"{got}\": {path} in body must be of type {want}: \"{got}\""
                ),
            });
            return;
        }
    }
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array)
        && !allowed.contains(value)
    {
        let list: Vec<String> = allowed.iter().map(short).collect();
        out.causes.push(Cause {
            reason: "FieldValueNotSupported",
            field: path.to_owned(),
            message: format!(
                "Unsupported value: {}: supported values: {}",
                short(value),
                list.join(", ")
            ),
        });
    }
    match value {
        Value::Object(map) => walk_object(schema, map, path, out, cache),
        Value::Array(items) => walk_array(schema, items, path, out, cache),
        Value::String(s) => {
            let len = s.chars().count() as u64;
            if let Some(max) = schema.get("maxLength").and_then(Value::as_u64)
                && len > max
            {
                out.causes.push(Cause {
                    reason: "FieldValueTooLong",
                    field: path.to_owned(),
                    message: format!("Too long: may not be more than {max} bytes"),
                });
            }
            if let Some(min) = schema.get("minLength").and_then(Value::as_u64)
                && len < min
            {
                let v = Value::String(s.clone());
                invalid(
                    out,
                    path,
                    &v,
                    format!("{path} in body should be at least {min} chars long"),
                );
            }
            if let Some(p) = schema.get("pattern").and_then(Value::as_str) {
                let matched = cache.get(p).is_none_or(|re| re.is_match(s));
                if !matched {
                    let v = Value::String(s.clone());
                    invalid(out, path, &v, format!("{path} in body should match '{p}'"));
                }
            }
        }
        Value::Number(n) => {
            let x = n.as_f64().unwrap_or(0.0);
            let excl_max = schema.get("exclusiveMaximum").and_then(Value::as_bool) == Some(true);
            let excl_min = schema.get("exclusiveMinimum").and_then(Value::as_bool) == Some(true);
            if let Some(max) = schema.get("maximum").and_then(Value::as_f64)
                && (x > max || (excl_max && x == max))
            {
                let v = Value::Number(n.clone());
                let how = if excl_max {
                    "less than"
                } else {
                    "less than or equal to"
                };
                invalid(
                    out,
                    path,
                    &v,
                    format!("{path} in body should be {how} {}", num(max)),
                );
            }
            if let Some(min) = schema.get("minimum").and_then(Value::as_f64)
                && (x < min || (excl_min && x == min))
            {
                let v = Value::Number(n.clone());
                let how = if excl_min {
                    "greater than"
                } else {
                    "greater than or equal to"
                };
                invalid(
                    out,
                    path,
                    &v,
                    format!("{path} in body should be {how} {}", num(min)),
                );
            }
        }
        _ => {}
    }
}

fn num(x: f64) -> String {
    if x.fract() == 0.0 {
        format!("{}", x as i64)
    } else {
        x.to_string()
    }
}

fn walk_object(
    schema: &Value,
    map: &mut Map<String, Value>,
    path: &str,
    out: &mut Outcome,
    cache: &mut PatternCache,
) {
    let props = schema.get("properties").and_then(Value::as_object);
    let additional = schema.get("additionalProperties");
    let preserve = preserves_unknown(schema);
    let keys: Vec<String> = map.keys().cloned().collect();
    for key in keys {
        let sub_path = join(path, &key);
        let sub = props.and_then(|p| p.get(&key)).or(match additional {
            Some(Value::Object(_)) => additional,
            _ => None,
        });
        match sub {
            Some(sub) => {
                if map.get(&key).is_some_and(Value::is_null) && !nullable(sub) {
                    map.remove(&key);
                    continue;
                }
                if let Some(v) = map.get_mut(&key) {
                    walk(sub, v, &sub_path, out, cache);
                }
            }
            None if preserve || additional == Some(&Value::Bool(true)) => {}
            None if props.is_none() && additional.is_none() && schema.get("type").is_none() => {}
            None => {
                map.remove(&key);
                out.unknown.push(sub_path);
            }
        }
    }
    apply_defaults(schema, map, path, out, cache);
    required(schema, map, path, out);
    let n = map.len() as u64;
    if let Some(max) = schema.get("maxProperties").and_then(Value::as_u64)
        && n > max
    {
        out.causes.push(Cause {
            reason: "FieldValueTooMany",
            field: path.to_owned(),
            message: format!("Too many: {n}: must have at most {max} items"),
        });
    }
}

fn walk_array(
    schema: &Value,
    items: &mut [Value],
    path: &str,
    out: &mut Outcome,
    cache: &mut PatternCache,
) {
    let n = items.len() as u64;
    if let Some(max) = schema.get("maxItems").and_then(Value::as_u64)
        && n > max
    {
        out.causes.push(Cause {
            reason: "FieldValueTooMany",
            field: path.to_owned(),
            message: format!("Too many: {n}: must have at most {max} items"),
        });
    }
    if let Some(min) = schema.get("minItems").and_then(Value::as_u64)
        && n < min
    {
        out.causes.push(Cause {
            reason: "FieldValueInvalid",
            field: path.to_owned(),
            message: format!("Invalid value: {n}: {path} in body should have at least {min} items"),
        });
    }
    if let Some(item_schema) = schema.get("items") {
        for (i, item) in items.iter_mut().enumerate() {
            walk(item_schema, item, &format!("{path}[{i}]"), out, cache);
        }
    }
    match schema.get("x-kubernetes-list-type").and_then(Value::as_str) {
        Some("map") => {
            let keys: Vec<&str> = schema
                .get("x-kubernetes-list-map-keys")
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let mut seen = BTreeSet::new();
            for (i, item) in items.iter().enumerate() {
                let key: Vec<String> = keys.iter().map(|k| short(&item[*k])).collect();
                if !seen.insert(key.clone()) {
                    out.causes.push(Cause {
                        reason: "FieldValueDuplicate",
                        field: format!("{path}[{i}]"),
                        message: format!("Duplicate value: {{{}}}", key.join(", ")),
                    });
                }
            }
        }
        Some("set") => {
            let mut seen = BTreeSet::new();
            for (i, item) in items.iter().enumerate() {
                if !seen.insert(item.to_string()) {
                    out.causes.push(Cause {
                        reason: "FieldValueDuplicate",
                        field: format!("{path}[{i}]"),
                        message: format!("Duplicate value: {}", short(item)),
                    });
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "spec": {
                    "type": "object",
                    "required": ["name"],
                    "properties": {
                        "name": {"type": "string", "pattern": "^[a-z]+$", "maxLength": 5},
                        "vlan": {"type": "integer", "minimum": 1, "maximum": 4094, "nullable": true},
                        "mode": {"type": "string", "enum": ["a", "b"], "default": "a"},
                        "vlans": {"type": "array", "maxItems": 2,
                                  "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["id"],
                                  "items": {"type": "object", "properties": {"id": {"type": "integer"}}}},
                        "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                        "labels": {"type": "object", "additionalProperties": {"type": "string"}}
                    }
                },
                "status": {"type": "object", "properties": {"state": {"type": "string"}}}
            }
        })
    }

    #[test]
    fn prunes_unknown_fields_and_applies_defaults() {
        let mut obj = json!({"apiVersion": "x/v1", "kind": "X", "metadata": {"name": "n"},
            "spec": {"name": "abc", "bogus": 1, "free": {"anything": [1]}, "labels": {"k": "v"}},
            "extra": true});
        let out = check(&schema(), &mut obj, &mut PatternCache::default());
        assert!(out.causes.is_empty(), "{:?}", out.causes);
        assert_eq!(out.unknown, ["extra", "spec.bogus"]);
        assert_eq!(obj["spec"]["mode"], "a");
        assert_eq!(obj["spec"]["free"]["anything"][0], 1);
        assert!(obj.get("extra").is_none());
    }

    #[test]
    fn reports_each_violation_with_its_path() {
        let mut obj = json!({"spec": {"name": "ABCDEFG", "vlan": 5000, "mode": "c",
            "vlans": [{"id": 1}, {"id": 1}, {"id": 2}], "labels": {"k": 3}}});
        let out = check(&schema(), &mut obj, &mut PatternCache::default());
        let got: Vec<(String, &str)> = out
            .causes
            .iter()
            .map(|c| (c.field.clone(), c.reason))
            .collect();
        assert!(
            got.contains(&("spec.name".into(), "FieldValueTooLong")),
            "{got:?}"
        );
        assert!(
            got.contains(&("spec.name".into(), "FieldValueInvalid")),
            "{got:?}"
        );
        assert!(
            got.contains(&("spec.vlan".into(), "FieldValueInvalid")),
            "{got:?}"
        );
        assert!(
            got.contains(&("spec.mode".into(), "FieldValueNotSupported")),
            "{got:?}"
        );
        assert!(
            got.contains(&("spec.vlans".into(), "FieldValueTooMany")),
            "{got:?}"
        );
        assert!(
            got.contains(&("spec.vlans[1]".into(), "FieldValueDuplicate")),
            "{got:?}"
        );
        assert!(
            got.contains(&("spec.labels.k".into(), "FieldValueTypeInvalid")),
            "{got:?}"
        );
        let vlan = out.causes.iter().find(|c| c.field == "spec.vlan").unwrap();
        assert_eq!(
            vlan.message,
            "Invalid value: 5000: spec.vlan in body should be less than or equal to 4094"
        );
    }

    #[test]
    fn required_and_null_handling() {
        let mut obj = json!({"spec": {"vlan": null}});
        let out = check(&schema(), &mut obj, &mut PatternCache::default());
        assert_eq!(out.causes.len(), 1);
        assert_eq!(out.causes[0].field, "spec.name");
        assert_eq!(out.causes[0].reason, "FieldValueRequired");
        // A null for a non-nullable field is dropped, not an error.
        let mut obj = json!({"spec": {"name": "a", "mode": null}});
        let out = check(&schema(), &mut obj, &mut PatternCache::default());
        assert!(out.causes.is_empty());
        assert_eq!(obj["spec"]["mode"], "a");
    }
}

//! Unknown fields in a manifest, found against a structural schema — the one the
//! CRDs publish (`openAPIV3Schema`), or a JSON schema generated from a settings
//! struct — with the nearest known name as a hint:
//! `spec.disabeld: unknown field, did you mean "disabled"?`; and, against a CRD's
//! schema, values of the wrong type or outside an enum, named by their path as the
//! API server names them (`spec.acl[0].protocol: unsupported value "sctp": supported
//! values: "tcp", "udp", "icmp", "all"`). Pure, no I/O.
//!
//! The API server prunes unknown fields silently (or refuses them under
//! `fieldValidation=Strict`); the CLI reads files directly, where a misspelt field
//! would otherwise be dropped and the opposite of what the user meant applied. The
//! check walks the document along the schema rather than relying on serde's
//! `deny_unknown_fields`, so it keeps working when the Rust types flatten structs.
//! `metadata` is checked against the fields of `ObjectMeta` (the CRD schema leaves it
//! open).

use serde_json::Value;

use super::FieldError;

/// The fields of `metadata` (ObjectMeta) a manifest may carry.
const OBJECT_META: &[&str] = &[
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
];

/// The fields of an `ownerReferences` entry.
const OWNER_REFERENCE: &[&str] = &[
    "apiVersion",
    "kind",
    "name",
    "uid",
    "controller",
    "blockOwnerDeletion",
];

/// The top-level fields of a core/v1 Secret.
pub const SECRET_FIELDS: &[&str] = &[
    "apiVersion",
    "kind",
    "metadata",
    "data",
    "stringData",
    "type",
    "immutable",
];

/// Unknown fields of `doc` (a whole object: apiVersion, kind, metadata, spec, …)
/// against `schema` (a CRD version's `openAPIV3Schema`).
pub fn unknown_fields(schema: &Value, doc: &Value) -> Vec<FieldError> {
    let mut errors = Vec::new();
    walk(schema, doc, "", Check::Names, &mut errors);
    if let Some(meta) = doc.get("metadata") {
        check_metadata(meta, &mut errors);
    }
    errors
}

/// [`unknown_fields`], and every value whose JSON type is not the schema's `type` or
/// that is not among its `enum` (see [`value_error`]): what the API server refuses
/// with a path before any typed decoding, which cannot name a field inside a
/// flattened struct.
pub fn schema_errors(schema: &Value, doc: &Value) -> Vec<FieldError> {
    let mut errors = Vec::new();
    walk(schema, doc, "", Check::NamesAndValues, &mut errors);
    if let Some(meta) = doc.get("metadata") {
        check_metadata(meta, &mut errors);
    }
    errors
}

/// What [`walk`] checks.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Check {
    /// Field names only.
    Names,
    /// Names, types and enum words.
    NamesAndValues,
}

/// Why `doc` does not fit `schema`'s own `type` and `enum` (not its children),
/// worded as the API server words it. Null passes: absent and null read alike.
pub fn value_error(schema: &Value, doc: &Value) -> Option<String> {
    if doc.is_null()
        || schema
            .get("x-kubernetes-int-or-string")
            .and_then(Value::as_bool)
            == Some(true)
    {
        return None;
    }
    if let Some(t) = schema.get("type").and_then(Value::as_str) {
        let fits = match t {
            "integer" => doc.is_i64() || doc.is_u64(),
            "number" => doc.is_number(),
            "string" => doc.is_string(),
            "boolean" => doc.is_boolean(),
            "array" => doc.is_array(),
            "object" => doc.is_object(),
            _ => true,
        };
        if !fits {
            return Some(format!("must be of type {t}, found {}", shown(doc)));
        }
    }
    let allowed = schema.get("enum").and_then(Value::as_array)?;
    if allowed.contains(doc) {
        return None;
    }
    let words: Vec<String> = allowed.iter().map(shown_value).collect();
    Some(format!(
        "unsupported value {}: supported values: {}",
        shown_value(doc),
        words.join(", ")
    ))
}

/// A value for a message: its JSON type, then the value (long ones cut).
fn shown(v: &Value) -> String {
    let kind = match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => return "an array".to_owned(),
        Value::Object(_) => return "an object".to_owned(),
    };
    format!("{kind} {}", shown_value(v))
}

fn shown_value(v: &Value) -> String {
    let text = v.to_string();
    if text.chars().count() > 64 {
        format!("{}…", text.chars().take(64).collect::<String>())
    } else {
        text
    }
}

/// Unknown top-level fields of `doc` among `known` (objects without a schema here,
/// such as a Secret), plus its `metadata`.
pub fn unknown_top_level(known: &[&str], doc: &Value) -> Vec<FieldError> {
    let mut errors = Vec::new();
    if let Some(map) = doc.as_object() {
        for key in map.keys() {
            if !known.contains(&key.as_str()) {
                errors.push(unknown(key, key, known.iter().copied()));
            }
        }
    }
    if let Some(meta) = doc.get("metadata") {
        check_metadata(meta, &mut errors);
    }
    errors
}

fn check_metadata(meta: &Value, errors: &mut Vec<FieldError>) {
    let Some(map) = meta.as_object() else {
        return;
    };
    for (key, value) in map {
        let path = format!("metadata.{key}");
        if !OBJECT_META.contains(&key.as_str()) {
            errors.push(unknown(&path, key, OBJECT_META.iter().copied()));
        } else if key == "ownerReferences"
            && let Some(items) = value.as_array()
        {
            for (i, item) in items.iter().enumerate() {
                for k in item.as_object().into_iter().flat_map(|m| m.keys()) {
                    if !OWNER_REFERENCE.contains(&k.as_str()) {
                        errors.push(unknown(
                            &format!("{path}[{i}].{k}"),
                            k,
                            OWNER_REFERENCE.iter().copied(),
                        ));
                    }
                }
            }
        }
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

fn walk(schema: &Value, doc: &Value, path: &str, check: Check, errors: &mut Vec<FieldError>) {
    if check == Check::NamesAndValues
        && let Some(reason) = value_error(schema, doc)
    {
        errors.push(FieldError {
            path: path.to_owned(),
            reason,
        });
        return;
    }
    if schema
        .get("x-kubernetes-preserve-unknown-fields")
        .and_then(Value::as_bool)
        == Some(true)
    {
        return;
    }
    match doc {
        Value::Object(map) => {
            let props = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties").filter(|a| a.is_object());
            for (key, value) in map {
                let sub = join(path, key);
                // Every object has these; CRD schemas may leave them out.
                if path.is_empty() && matches!(key.as_str(), "apiVersion" | "kind" | "metadata") {
                    continue;
                }
                match (props.and_then(|p| p.get(key)), additional) {
                    (Some(s), _) => walk(s, value, &sub, check, errors),
                    (None, Some(s)) => walk(s, value, &sub, check, errors),
                    (None, None) if props.is_some() => {
                        let known = props.into_iter().flat_map(|p| p.keys().map(String::as_str));
                        errors.push(unknown(&sub, key, known));
                    }
                    // An object the schema leaves open.
                    (None, None) => {}
                }
            }
        }
        Value::Array(items) => {
            if let Some(s) = schema.get("items") {
                for (i, item) in items.iter().enumerate() {
                    walk(s, item, &format!("{path}[{i}]"), check, errors);
                }
            }
        }
        _ => {}
    }
}

fn unknown<'a>(path: &str, key: &str, known: impl Iterator<Item = &'a str>) -> FieldError {
    let reason = match nearest(key, known) {
        Some(name) => format!("unknown field, did you mean {name:?}?"),
        None => "unknown field".to_owned(),
    };
    FieldError {
        path: path.to_owned(),
        reason,
    }
}

/// The known name closest to `typed`, if it is close enough to be a typo: the same
/// name in another case, or the single nearest name within an edit distance
/// (insertions, deletions, substitutions, transpositions) of at most a third of its
/// length (at least 2), that did not replace every character typed.
pub fn nearest<'a>(typed: &str, known: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    let lower = typed.to_lowercase();
    let mut best: Option<(usize, &'a str)> = None;
    let mut tie = false;
    for name in known {
        if name.to_lowercase() == lower {
            return Some(name);
        }
        let d = edit_distance(&lower, &name.to_lowercase());
        match best {
            Some((b, _)) if d > b => {}
            Some((b, _)) if d == b => tie = true,
            _ => {
                best = Some((d, name));
                tie = false;
            }
        }
    }
    let (d, name) = best?;
    let limit = (name.chars().count() / 3).max(2);
    (!tie && d <= limit && d < typed.chars().count()).then_some(name)
}

/// Optimal string alignment distance (Damerau–Levenshtein without repeated edits
/// of one substring).
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut v = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                v = v.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = v;
        }
    }
    d[a.len()][b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "apiVersion": {"type": "string"},
                "kind": {"type": "string"},
                "metadata": {"type": "object"},
                "spec": {
                    "type": "object",
                    "properties": {
                        "disabled": {"type": "boolean"},
                        "description": {"type": "string"},
                        "untaggedVLAN": {"type": "integer"},
                        "vlans": {"type": "array", "items": {
                            "type": "object",
                            "properties": {"id": {"type": "integer"}, "name": {"type": "string"}}
                        }},
                        "acl": {"type": "array", "items": {
                            "type": "object",
                            "properties": {
                                "src": {"type": "string"}, "dst": {"type": "string"},
                                "srcPortRange": {"type": "string"},
                                "dstPortRange": {"type": "string"},
                                "protocol": {"type": "string"}
                            }
                        }},
                        "ports": {"type": "object", "additionalProperties": {
                            "type": "object", "properties": {"name": {"type": "string"}}
                        }},
                        "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                        "open": {"type": "object"}
                    }
                }
            }
        })
    }

    fn found(doc: Value) -> Vec<String> {
        unknown_fields(&schema(), &doc)
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn misspelt_fields_are_named_with_the_nearest_known_name() {
        assert_eq!(
            found(json!({
                "apiVersion": "patchbay.dev/v1alpha1", "kind": "X",
                "metadata": {"name": "x", "lables": {"a": "b"}},
                "spec": {"disabeld": true, "descripton": "x", "untaggedVlan": 3,
                         "vlans": [{"id": 1}, {"id": 2, "nmae": "y"}],
                         "acl": [{"des": "10.0.0.0/8", "desPortRange": "22"}],
                         "ports": {"p1": {"name": "Gi0/1", "nam": "z"}},
                         "free": {"anything": 1}, "open": {"anything": 2},
                         "zzzzzz": 1},
                "sepc": {}
            })),
            [
                "sepc: unknown field, did you mean \"spec\"?",
                "spec.acl[0].des: unknown field, did you mean \"dst\"?",
                "spec.acl[0].desPortRange: unknown field, did you mean \"dstPortRange\"?",
                "spec.descripton: unknown field, did you mean \"description\"?",
                "spec.disabeld: unknown field, did you mean \"disabled\"?",
                "spec.ports.p1.nam: unknown field, did you mean \"name\"?",
                "spec.untaggedVlan: unknown field, did you mean \"untaggedVLAN\"?",
                "spec.vlans[1].nmae: unknown field, did you mean \"name\"?",
                "spec.zzzzzz: unknown field",
                "metadata.lables: unknown field, did you mean \"labels\"?",
            ]
        );
    }

    #[test]
    fn a_clean_manifest_has_none() {
        assert!(
            found(json!({
                "apiVersion": "v", "kind": "k",
                "metadata": {"name": "x", "ownerReferences": [{"kind": "Switch", "name": "s", "uid": "u"}]},
                "spec": {"disabled": false, "vlans": [{"id": 1, "name": "a"}]}
            }))
            .is_empty()
        );
    }

    #[test]
    fn the_hint_is_a_typo_not_a_guess() {
        let known = ["disabled", "description", "mtu", "vlans", "dst", "src"];
        let near = |t: &str| nearest(t, known.iter().copied());
        assert_eq!(near("disabeld"), Some("disabled"));
        assert_eq!(near("MTU"), Some("mtu"));
        assert_eq!(near("vlan"), Some("vlans"));
        assert_eq!(near("des"), Some("dst"));
        assert_eq!(near("x"), None, "replacing everything is not a typo");
        assert_eq!(near("bandwidth"), None);
        // Equally near to two names: no hint rather than a wrong one.
        assert_eq!(nearest("clan", ["vlan", "plan"].into_iter()), None);
    }

    #[test]
    fn a_secret_and_its_metadata() {
        let errors: Vec<String> = unknown_top_level(
            SECRET_FIELDS,
            &json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"nme": "x"},
                    "stringdata": {"password": "p"}}),
        )
        .iter()
        .map(ToString::to_string)
        .collect();
        assert_eq!(
            errors,
            [
                "stringdata: unknown field, did you mean \"stringData\"?",
                "metadata.nme: unknown field, did you mean \"name\"?",
            ]
        );
    }

    #[test]
    fn a_value_of_the_wrong_type_or_outside_the_enum_is_named_as_the_api_server_would() {
        let int = json!({"type": "integer", "nullable": true});
        let word = json!({"type": "string", "enum": ["tcp", "udp"]});
        let open = json!({"x-kubernetes-int-or-string": true});
        let rows: [(&Value, Value, Option<&str>); 7] = [
            (&int, json!(10), None),
            (&int, json!(null), None),
            (
                &int,
                json!("ten"),
                Some("must be of type integer, found string \"ten\""),
            ),
            (
                &int,
                json!(1.5),
                Some("must be of type integer, found number 1.5"),
            ),
            (&word, json!("udp"), None),
            (
                &word,
                json!("TCP; reload"),
                Some("unsupported value \"TCP; reload\": supported values: \"tcp\", \"udp\""),
            ),
            (&open, json!("80%"), None),
        ];
        for (i, (schema, doc, want)) in rows.into_iter().enumerate() {
            assert_eq!(value_error(schema, &doc).as_deref(), want, "row {i}");
        }
        // Paths through objects and arrays; a misfit's children are not looked at.
        let schema = json!({"type": "object", "properties": {"spec": {"type": "object",
            "properties": {"acl": {"type": "array", "items": {"type": "object",
                "properties": {"protocol": word}}}}}}});
        let errors = schema_errors(
            &schema,
            &json!({"spec": {"acl": [{"protocol": "tcp"}, {"protocol": "sctp"}]}}),
        );
        assert_eq!(
            errors.iter().map(|e| e.path.as_str()).collect::<Vec<_>>(),
            ["spec.acl[1].protocol"]
        );
        assert_eq!(
            schema_errors(&schema, &json!({"spec": {"acl": "all"}}))[0].to_string(),
            "spec.acl: must be of type array, found string \"all\""
        );
    }
}

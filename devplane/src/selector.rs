//! Label selectors (equality and set-based) and field selectors (`metadata.name`,
//! `metadata.namespace`, Events' field labels, and a custom resource's
//! `selectableFields`), parsed from query strings and matched against objects.
//! Pure, no I/O.

use serde_json::Value;

/// One requirement of a label selector.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    DoesNotExist(String),
}

/// A parsed label selector; the empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector(Vec<Requirement>);

/// Splits on commas that are not inside parentheses.
fn split_top(input: &str) -> Vec<String> {
    let mut parts = Vec::new();
    let mut depth = 0;
    let mut cur = String::new();
    for c in input.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(std::mem::take(&mut cur));
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    parts.push(cur);
    parts
        .into_iter()
        .map(|p| p.trim().to_owned())
        .filter(|p| !p.is_empty())
        .collect()
}

fn valid_key(k: &str) -> bool {
    !k.is_empty()
        && k.len() <= 317
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
}

fn set_values(s: &str) -> Option<Vec<String>> {
    let inner = s.trim().strip_prefix('(')?.strip_suffix(')')?;
    Some(
        inner
            .split(',')
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
            .collect(),
    )
}

impl LabelSelector {
    /// Parses `a=b,c!=d,e in (x,y),f notin (z),g,!h`.
    pub fn parse(input: &str) -> Result<Self, String> {
        let mut reqs = Vec::new();
        for part in split_top(input) {
            let req = if let Some(k) = part.strip_prefix('!') {
                Requirement::DoesNotExist(k.trim().to_owned())
            } else if let Some((k, v)) = part.split_once("!=") {
                Requirement::NotEquals(k.trim().to_owned(), v.trim().to_owned())
            } else if let Some((k, v)) = part.split_once("==") {
                Requirement::Equals(k.trim().to_owned(), v.trim().to_owned())
            } else if let Some((k, v)) = part.split_once('=') {
                Requirement::Equals(k.trim().to_owned(), v.trim().to_owned())
            } else if let Some((k, v)) = part.split_once(" notin ") {
                let vals = set_values(v).ok_or_else(|| format!("invalid selector {part:?}"))?;
                Requirement::NotIn(k.trim().to_owned(), vals)
            } else if let Some((k, v)) = part.split_once(" in ") {
                let vals = set_values(v).ok_or_else(|| format!("invalid selector {part:?}"))?;
                Requirement::In(k.trim().to_owned(), vals)
            } else {
                Requirement::Exists(part.trim().to_owned())
            };
            let key = match &req {
                Requirement::Equals(k, _)
                | Requirement::NotEquals(k, _)
                | Requirement::In(k, _)
                | Requirement::NotIn(k, _)
                | Requirement::Exists(k)
                | Requirement::DoesNotExist(k) => k,
            };
            if !valid_key(key) {
                return Err(format!("invalid label key {key:?} in selector"));
            }
            reqs.push(req);
        }
        Ok(Self(reqs))
    }

    /// Whether `obj`'s labels satisfy every requirement.
    pub fn matches(&self, obj: &Value) -> bool {
        if self.0.is_empty() {
            return true;
        }
        let labels = obj.get("metadata").and_then(|m| m.get("labels"));
        let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        self.0.iter().all(|r| match r {
            Requirement::Equals(k, v) => get(k) == Some(v.as_str()),
            Requirement::NotEquals(k, v) => get(k) != Some(v.as_str()),
            Requirement::In(k, vs) => get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            Requirement::NotIn(k, vs) => get(k).is_none_or(|x| vs.iter().all(|v| v != x)),
            Requirement::Exists(k) => get(k).is_some(),
            Requirement::DoesNotExist(k) => get(k).is_none(),
        })
    }
}

/// A parsed field selector: `metadata.name` and `metadata.namespace` for every
/// resource, the labels the API server supports for Events in each group
/// ([`crate::events::field_label`]), stored as the field they read, and the paths a
/// CustomResourceDefinition version declares in `selectableFields` (KEP-4358, GA in
/// Kubernetes 1.32): `spec.configuration.name` for `.spec.configuration.name`; an
/// absent field reads as the empty string, as kube-apiserver matches it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSelector(Vec<FieldRequirement>);

/// One requirement of a field selector.
#[derive(Debug, Clone, PartialEq, Eq)]
struct FieldRequirement {
    /// The field read (a path into the stored object, or a name `matches` knows).
    field: String,
    /// `=` rather than `!=`.
    equals: bool,
    value: String,
    /// A custom resource's selectable field: `field` is a dotted path.
    path: bool,
}

impl FieldSelector {
    /// Parses `metadata.name=x,metadata.namespace!=y` for any resource.
    pub fn parse(input: &str) -> Result<Self, String> {
        Self::parse_for(input, "", "", &[])
    }

    /// Parses a selector for resource `plural` of `group`, whose served version
    /// declares `selectable` (`selectableFields[].jsonPath`, `.spec.x`).
    pub fn parse_for(
        input: &str,
        group: &str,
        plural: &str,
        selectable: &[String],
    ) -> Result<Self, String> {
        let events =
            plural == "events" && (group.is_empty() || group == crate::events::EVENTS_GROUP);
        let mut reqs = Vec::new();
        for part in split_top(input) {
            let (field, eq, value) = if let Some((f, v)) = part.split_once("!=") {
                (f, false, v)
            } else if let Some((f, v)) = part.split_once("==") {
                (f, true, v)
            } else if let Some((f, v)) = part.split_once('=') {
                (f, true, v)
            } else {
                return Err(format!("invalid field selector {part:?}"));
            };
            let field = field.trim();
            let declared = selectable
                .iter()
                .any(|p| p.strip_prefix('.') == Some(field));
            let stored = match field {
                "metadata.name" | "metadata.namespace" => field,
                _ if declared => field,
                _ if events => crate::events::field_label(group, field)
                    .ok_or_else(|| format!("field label not supported: {field}"))?,
                _ => {
                    return Err(format!(
                        "field label not supported: {field} (only metadata.name and metadata.namespace)"
                    ));
                }
            };
            reqs.push(FieldRequirement {
                field: stored.to_owned(),
                equals: eq,
                value: value.trim().to_owned(),
                path: declared && !field.starts_with("metadata."),
            });
        }
        Ok(Self(reqs))
    }

    /// Whether `obj` (as stored) satisfies every requirement.
    pub fn matches(&self, obj: &Value) -> bool {
        self.0.iter().all(|r| {
            let actual = match r.field.as_str() {
                _ if r.path => selected(obj, &r.field),
                "metadata.name" | "metadata.namespace" => obj
                    .get("metadata")
                    .and_then(|m| m.get(&r.field["metadata.".len()..]))
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .into(),
                other => crate::events::field_value(obj, other).into(),
            };
            (actual == r.value.as_str()) == r.equals
        })
    }

    /// The name this selector pins, if any (`metadata.name=x`).
    pub fn pinned_name(&self) -> Option<&str> {
        self.0
            .iter()
            .find(|r| r.field == "metadata.name" && r.equals)
            .map(|r| r.value.as_str())
    }
}

/// The value a selectable field's path reads in `obj`: a string as it is, a number
/// or boolean as its text, anything else (absent included) as the empty string.
fn selected<'a>(obj: &'a Value, path: &str) -> std::borrow::Cow<'a, str> {
    let mut at = obj;
    for step in path.split('.') {
        match at.get(step) {
            Some(v) => at = v,
            None => return "".into(),
        }
    }
    match at {
        Value::String(s) => s.as_str().into(),
        Value::Number(n) => n.to_string().into(),
        Value::Bool(b) => b.to_string().into(),
        _ => "".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn label_selectors() {
        let obj = json!({"metadata": {"labels": {"switch": "tor-1", "tier": "web"}}});
        let yes = [
            "switch=tor-1",
            "switch==tor-1,tier",
            "tier in (web, db)",
            "tier notin (db)",
            "!missing",
            "switch!=tor-2",
            "",
        ];
        let no = [
            "switch=tor-2",
            "missing",
            "tier in (db)",
            "tier notin (web)",
            "!tier",
        ];
        for s in yes {
            assert!(LabelSelector::parse(s).unwrap().matches(&obj), "{s}");
        }
        for s in no {
            assert!(!LabelSelector::parse(s).unwrap().matches(&obj), "{s}");
        }
        assert!(LabelSelector::parse("a b=c").is_err());
    }

    #[test]
    fn field_selectors() {
        let obj = json!({"metadata": {"name": "p1", "namespace": "infra"}});
        assert!(
            FieldSelector::parse("metadata.name=p1")
                .unwrap()
                .matches(&obj)
        );
        assert!(
            FieldSelector::parse("metadata.namespace!=default")
                .unwrap()
                .matches(&obj)
        );
        assert!(
            !FieldSelector::parse("metadata.name=p2")
                .unwrap()
                .matches(&obj)
        );
        assert!(FieldSelector::parse("spec.x=1").is_err());
    }

    #[test]
    fn a_custom_resources_selectable_fields() {
        let declared = [
            ".spec.configuration.name".to_owned(),
            ".spec.size".to_owned(),
        ];
        let parse = |s: &str| FieldSelector::parse_for(s, "patchbay.dev", "switchports", &declared);
        let web = json!({"spec": {"configuration": {"name": "web"}, "size": 3}});
        let bare = json!({"spec": {}});
        assert!(parse("spec.configuration.name=web").unwrap().matches(&web));
        assert!(!parse("spec.configuration.name=web").unwrap().matches(&bare));
        assert!(
            parse("spec.configuration.name!=web")
                .unwrap()
                .matches(&bare)
        );
        assert!(parse("spec.configuration.name=").unwrap().matches(&bare));
        assert!(parse("spec.size=3,metadata.name!=x").unwrap().matches(&web));
        let err = parse("spec.configuration.namespace=a").unwrap_err();
        assert!(
            err.contains("field label not supported: spec.configuration.namespace"),
            "{err}"
        );
    }

    #[test]
    fn event_field_selectors_in_both_groups() {
        let stored = json!({"metadata": {"name": "e1"},
                            "involvedObject": {"kind": "SwitchPort", "name": "p1"},
                            "type": "Warning", "reportingComponent": "patchbay"});
        for (group, selector) in [
            (
                "",
                "involvedObject.kind=SwitchPort,involvedObject.name=p1,type=Warning",
            ),
            (
                "events.k8s.io",
                "regarding.kind=SwitchPort,regarding.name=p1,reportingController=patchbay",
            ),
        ] {
            let s = FieldSelector::parse_for(selector, group, "events", &[]).unwrap();
            assert!(s.matches(&stored), "{group}: {selector}");
        }
        assert!(
            !FieldSelector::parse_for("involvedObject.name=p2", "", "events", &[])
                .unwrap()
                .matches(&stored)
        );
        let err =
            FieldSelector::parse_for("involvedObject.kind=X", "patchbay.dev", "switchports", &[])
                .unwrap_err();
        assert!(
            err.starts_with("field label not supported: involvedObject.kind"),
            "{err}"
        );
        assert!(FieldSelector::parse_for("regarding.kind=X", "", "events", &[]).is_err());
    }
}

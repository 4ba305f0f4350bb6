//! Which Kubernetes Nodes and MetalLB `BGPPeer`s carry a Server's BGP peers, when
//! the operator is opted in with `--bgp-node-selector` (seed 004's `bgpNodeSelector`)
//! and, for MetalLB, `--metallb-namespace`. Pure: the selector's check, which Server
//! a Node is, the annotation patch, the `BGPPeer` and its password Secret's name.
//!
//! A Node is a Server's when its label `patchbay.dev/server` names the Server, or
//! else its `spec.providerID` is `patchbay://<server>` (the label wins: a node agent
//! can set a label, only the kubelet sets the provider id). Only Nodes the selector
//! selects are looked at: off by default, since most claims' hosts join clusters
//! elsewhere and read the claim's inventory instead.

use std::collections::BTreeMap;

use patchbay_model::bgp::Timers;
use serde_json::{Value, json};

use super::bgp::{ANNOTATION_PREFIX, Peer};

/// The label that names a Node's Server.
pub const NODE_SERVER_LABEL: &str = "patchbay.dev/server";
/// The provider-id scheme that names a Node's Server.
pub const PROVIDER_ID_PREFIX: &str = "patchbay://";
/// The label on the `BGPPeer`s and password copies patchbay writes for a Server.
pub const METALLB_SERVER_LABEL: &str = "patchbay.dev/metallb-server";
/// The label on a Node patchbay annotated (so it is found again when it stops being
/// selected or being the Server).
pub const NODE_MARK_LABEL: &str = "patchbay.dev/bgp-annotated";
/// The annotation on such a Node naming the Server its peers are (one of patchbay's
/// `bgp-peers-*` keys, so it comes and goes with them).
pub const NODE_SERVER_ANNOTATION: &str = "patchbay.dev/bgp-peers-server";
/// MetalLB's API group and version (0.13.2 and later: the seed's minimum).
pub const METALLB_API_VERSION: &str = "metallb.io/v1beta2";

/// Where a Server's peers go besides the Server itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BgpNodes {
    /// A label selector (`key=value`, `key!=value`, `key`, `!key`, comma-separated;
    /// empty: every Node).
    pub selector: String,
    /// The namespace MetalLB runs in: `BGPPeer`s (and their password Secrets, which
    /// MetalLB reads from its own namespace) are written there. `None`: Nodes'
    /// annotations only.
    pub metallb_namespace: Option<String>,
}

/// `selector` checked: equality and existence terms only (what the seed's
/// `key1=value1,key2=value2` means), each key and value a valid label key and value.
/// Returns it without spaces around terms.
pub fn check_selector(selector: &str) -> Result<String, String> {
    let mut terms = Vec::new();
    for term in selector.split(',').map(str::trim) {
        if term.is_empty() {
            if selector.trim().is_empty() {
                break;
            }
            return Err("an empty term (two commas, or one at an end)".into());
        }
        if term.contains(" in ") || term.contains(" notin ") || term.contains('(') {
            return Err(format!(
                "{term:?}: set-based terms (in, notin) are not supported; use key=value"
            ));
        }
        let (key, value) = if let Some((k, v)) = term.split_once("!=") {
            (k, Some(v))
        } else if let Some((k, v)) = term.split_once("==") {
            (k, Some(v))
        } else if let Some((k, v)) = term.split_once('=') {
            (k, Some(v))
        } else {
            (term.strip_prefix('!').unwrap_or(term), None)
        };
        let key = key.trim();
        check_key(key).map_err(|r| format!("{term:?}: key {key:?} {r}"))?;
        if let Some(v) = value {
            let v = v.trim();
            check_value(v).map_err(|r| format!("{term:?}: value {v:?} {r}"))?;
        }
        terms.push(term.replace(' ', ""));
    }
    Ok(terms.join(","))
}

/// A label name segment: 1–63 letters, digits, `-`, `_`, `.`, starting and ending
/// with a letter or digit.
fn check_name(s: &str) -> Result<(), String> {
    let ok_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    let ends = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    if s.is_empty() || s.len() > 63 {
        return Err("must be 1 to 63 characters".into());
    }
    if !s.chars().all(ok_char) || !ends(s.chars().next()) || !ends(s.chars().last()) {
        return Err(
            "must be letters, digits, '-', '_' or '.', starting and ending with a letter or \
             digit"
                .into(),
        );
    }
    Ok(())
}

fn check_key(key: &str) -> Result<(), String> {
    match key.split_once('/') {
        Some((prefix, name)) => {
            let dns = !prefix.is_empty()
                && prefix.len() <= 253
                && prefix.split('.').all(|l| {
                    !l.is_empty()
                        && l.chars()
                            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                        && !l.starts_with('-')
                        && !l.ends_with('-')
                });
            if !dns {
                return Err("has a prefix that is not a DNS subdomain".into());
            }
            check_name(name)
        }
        None => check_name(key),
    }
}

fn check_value(value: &str) -> Result<(), String> {
    if value.is_empty() {
        return Ok(());
    }
    check_name(value)
}

/// The Server a Node is: its `patchbay.dev/server` label, else a
/// `patchbay://<server>` provider id.
pub fn server_of_node<'a>(
    labels: &'a BTreeMap<String, String>,
    provider_id: Option<&'a str>,
) -> Option<&'a str> {
    if let Some(s) = labels.get(NODE_SERVER_LABEL).filter(|s| !s.is_empty()) {
        return Some(s);
    }
    provider_id
        .and_then(|p| p.strip_prefix(PROVIDER_ID_PREFIX))
        .filter(|s| !s.is_empty() && !s.contains('/'))
}

/// The merge patch that turns an object's `patchbay.dev/bgp-peers-*` annotations
/// (among `have`, all its annotations) into `want`, or `None` when they are already
/// that. Keys no longer wanted are removed; other annotations are left alone.
pub fn annotation_patch(
    have: &BTreeMap<String, String>,
    want: &BTreeMap<String, String>,
) -> Option<Value> {
    let mine: BTreeMap<&String, &String> = have
        .iter()
        .filter(|(k, _)| k.starts_with(ANNOTATION_PREFIX))
        .collect();
    if mine.len() == want.len() && want.iter().all(|(k, v)| mine.get(k) == Some(&v)) {
        return None;
    }
    let mut patch = serde_json::Map::new();
    for k in mine.keys() {
        patch.insert((*k).clone(), Value::Null);
    }
    for (k, v) in want {
        patch.insert(k.clone(), json!(v));
    }
    Some(json!({"metadata": {"annotations": patch}}))
}

/// The merge patch that gives a Node `server`'s peers' annotations `want` (empty:
/// none) and the mark that finds it again, or `None` when it has them.
pub fn node_patch(
    annotations: &BTreeMap<String, String>,
    labels: &BTreeMap<String, String>,
    want: &BTreeMap<String, String>,
    server: &str,
) -> Option<Value> {
    let mut want = want.clone();
    if !want.is_empty() {
        want.insert(NODE_SERVER_ANNOTATION.to_owned(), server.to_owned());
    }
    let mut patch = annotation_patch(annotations, &want).unwrap_or_else(|| json!({}));
    let marked = labels.get(NODE_MARK_LABEL).is_some_and(|v| v == "true");
    if want.is_empty() == marked {
        patch["metadata"]["labels"] = json!({
            NODE_MARK_LABEL: if want.is_empty() { Value::Null } else { json!("true") }
        });
    }
    (patch != json!({})).then_some(patch)
}

/// The name of `server`'s peer `n`'s `BGPPeer`, and of the copy of its password in
/// MetalLB's namespace.
pub fn metallb_name(server: &str, n: usize) -> String {
    format!("patchbay-{server}-{n}")
}

/// A Node as a `BGPPeer` selects it: its `kubernetes.io/hostname` label (what
/// MetalLB's speaker matches on), or its name when it has none.
pub fn node_hostname<'a>(name: &'a str, labels: &'a BTreeMap<String, String>) -> &'a str {
    labels
        .get("kubernetes.io/hostname")
        .map_or(name, String::as_str)
}

/// The `BGPPeer` (MetalLB `metallb.io/v1beta2`) for `server`'s peer `n`, on the
/// Nodes whose hostnames are `hostnames`, in `namespace`; its password is the Secret
/// of the same name there ([`metallb_name`]).
pub fn metallb_peer(
    server: &str,
    n: usize,
    peer: &Peer,
    timers: Option<&Timers>,
    hostnames: &[&str],
    namespace: &str,
) -> Value {
    let name = metallb_name(server, n);
    let mut spec = json!({
        "myASN": peer.node_asn,
        "peerASN": peer.peer_asn,
        "peerAddress": peer.peer_ip.to_string(),
        "sourceAddress": peer.src_ip.to_string(),
        "passwordSecret": {"name": name, "namespace": namespace},
        "nodeSelectors": hostnames
            .iter()
            .map(|h| json!({"matchLabels": {"kubernetes.io/hostname": h}}))
            .collect::<Vec<_>>(),
    });
    if let Some(t) = timers {
        spec["holdTime"] = json!(format!("{}s", t.hold));
        spec["keepaliveTime"] = json!(format!("{}s", t.keepalive));
    }
    json!({
        "apiVersion": METALLB_API_VERSION,
        "kind": "BGPPeer",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {METALLB_SERVER_LABEL: server},
        },
        "spec": spec,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors_of_equality_and_existence_terms_are_accepted() {
        for (given, kept) in [
            ("", ""),
            ("patchbay.dev/bgp=on", "patchbay.dev/bgp=on"),
            ("a=b, c!=d", "a=b,c!=d"),
            ("role==worker,!excluded", "role==worker,!excluded"),
            (
                "node-role.kubernetes.io/worker",
                "node-role.kubernetes.io/worker",
            ),
            ("a=", "a="),
        ] {
            assert_eq!(check_selector(given).as_deref(), Ok(kept), "{given}");
        }
    }

    #[test]
    fn other_selectors_are_refused_saying_why() {
        for (given, says) in [
            ("a=b,,c=d", "empty term"),
            ("a=b,", "empty term"),
            ("zone in (a,b)", "set-based"),
            ("-a=b", "key \"-a\""),
            ("a=b c", "value \"b c\""),
            ("Bad_Prefix/a=b", "DNS subdomain"),
            (&"x".repeat(64), "1 to 63"),
        ] {
            let e = check_selector(given).unwrap_err();
            assert!(e.contains(says), "{given}: {e}");
        }
    }

    #[test]
    fn a_node_is_a_server_by_label_else_by_provider_id() {
        let labels = |v: &[(&str, &str)]| -> BTreeMap<String, String> {
            v.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let both = labels(&[(NODE_SERVER_LABEL, "s1")]);
        assert_eq!(server_of_node(&both, Some("patchbay://s2")), Some("s1"));
        let none = labels(&[]);
        assert_eq!(server_of_node(&none, Some("patchbay://s2")), Some("s2"));
        assert_eq!(server_of_node(&none, Some("metal3://ns/bmh/s2")), None);
        assert_eq!(server_of_node(&none, Some("patchbay://")), None);
        assert_eq!(server_of_node(&none, Some("patchbay://a/b")), None);
        assert_eq!(server_of_node(&none, None), None);
        let empty = labels(&[(NODE_SERVER_LABEL, "")]);
        assert_eq!(server_of_node(&empty, Some("patchbay://s3")), Some("s3"));
    }

    #[test]
    fn the_annotation_patch_replaces_only_patchbays_keys_and_is_none_when_equal() {
        let m = |v: &[(&str, &str)]| -> BTreeMap<String, String> {
            v.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let k0 = format!("{ANNOTATION_PREFIX}0-node-asn");
        let k1 = format!("{ANNOTATION_PREFIX}1-node-asn");
        let have = m(&[(&k0, "65001"), (&k1, "65001"), ("other", "x")]);
        assert_eq!(
            annotation_patch(&have, &m(&[(&k0, "65001"), (&k1, "65001")])),
            None
        );
        let p = annotation_patch(&have, &m(&[(&k0, "65002")])).unwrap();
        assert_eq!(
            p,
            json!({"metadata": {"annotations": {k0.clone(): "65002", k1.clone(): null}}})
        );
        let gone = annotation_patch(&have, &BTreeMap::new()).unwrap();
        assert_eq!(
            gone,
            json!({"metadata": {"annotations": {k0: null, k1: null}}})
        );
        assert_eq!(
            annotation_patch(&m(&[("other", "x")]), &BTreeMap::new()),
            None
        );
    }

    #[test]
    fn a_node_is_marked_with_its_peers_and_unmarked_without() {
        let m = |v: &[(&str, &str)]| -> BTreeMap<String, String> {
            v.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let k0 = format!("{ANNOTATION_PREFIX}0-node-asn");
        let want = m(&[(&k0, "65101")]);
        let fresh = node_patch(&m(&[]), &m(&[]), &want, "s1").unwrap();
        assert_eq!(
            fresh,
            json!({"metadata": {
                "annotations": {k0.clone(): "65101", NODE_SERVER_ANNOTATION: "s1"},
                "labels": {NODE_MARK_LABEL: "true"}}})
        );
        let annotated = m(&[(&k0, "65101"), (NODE_SERVER_ANNOTATION, "s1")]);
        let marked = m(&[(NODE_MARK_LABEL, "true")]);
        assert_eq!(node_patch(&annotated, &marked, &want, "s1"), None);
        assert_eq!(
            node_patch(&annotated, &marked, &BTreeMap::new(), "s1").unwrap(),
            json!({"metadata": {
                "annotations": {k0: null, NODE_SERVER_ANNOTATION: null},
                "labels": {NODE_MARK_LABEL: null}}})
        );
        assert_eq!(node_patch(&m(&[]), &m(&[]), &BTreeMap::new(), "s1"), None);
    }

    #[test]
    fn a_bgp_peer_carries_the_peer_its_timers_and_selects_its_nodes_by_hostname() {
        let peer = Peer {
            switch_namespace: "infra".into(),
            switch: "tor".into(),
            switch_port: "tor-n1".into(),
            node_asn: 65001,
            peer_asn: 65000,
            peer_ip: "10.99.0.1".parse().unwrap(),
            src_ip: "10.99.0.2".parse().unwrap(),
            password_secret: "c-bgp-s1-0".into(),
        };
        let timers = Timers {
            keepalive: 3,
            hold: 9,
            connect_retry: 1,
        };
        let p = metallb_peer("s1", 0, &peer, Some(&timers), &["node-1"], "metallb-system");
        assert_eq!(p["metadata"]["name"], "patchbay-s1-0");
        assert_eq!(p["metadata"]["labels"][METALLB_SERVER_LABEL], "s1");
        assert_eq!(
            p["spec"],
            json!({
                "myASN": 65001, "peerASN": 65000, "peerAddress": "10.99.0.1",
                "sourceAddress": "10.99.0.2",
                "passwordSecret": {"name": "patchbay-s1-0", "namespace": "metallb-system"},
                "nodeSelectors": [{"matchLabels": {"kubernetes.io/hostname": "node-1"}}],
                "holdTime": "9s", "keepaliveTime": "3s",
            })
        );
        let labels: BTreeMap<String, String> =
            [("kubernetes.io/hostname".to_owned(), "n1.example".to_owned())].into();
        assert_eq!(node_hostname("n1", &labels), "n1.example");
        assert_eq!(node_hostname("n1", &BTreeMap::new()), "n1");
    }
}

//! Validating admission webhooks, called the way kube-apiserver calls them: every
//! ValidatingWebhookConfiguration (admissionregistration.k8s.io/v1) whose rules
//! match a CREATE, UPDATE or DELETE of one object (a DELETE with the stored object as
//! `oldObject` and no object; a collection's DELETE is not sent) is sent an AdmissionReview v1
//! over HTTPS (its `clientConfig.url`, verified against its `caBundle`, with
//! `?timeout=Ns`) before the write is stored; a denial comes back as the API server
//! words it (`admission webhook "NAME" denied the request: MESSAGE`, with the
//! webhook's status code), and a webhook that cannot be called fails the write or is
//! skipped as its `failurePolicy` says (`Fail` by default). An allowed answer's
//! `warnings` reach the client as `Warning` headers, as kube-apiserver sends them
//! (kubectl prints each as `Warning: …`).
//!
//! Supported: `rules` (apiGroups, apiVersions, operations, resources — no
//! subresources — and scope), `namespaceSelector` (matchLabels and matchExpressions
//! on the namespace's labels), `objectSelector` (matchLabels), `timeoutSeconds`
//! (default 10, at most 30), `failurePolicy`. Not supported: `clientConfig.service`
//! (devplane cannot resolve Services: such a webhook counts as unreachable),
//! `matchConditions`, mutating webhooks. Matching is pure; calling does network
//! I/O.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::Request;
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::{Value, json};

use crate::resources::string_list;
use crate::store::ApiError;

/// The request being admitted.
#[derive(Debug, Clone)]
pub struct Attributes<'a> {
    /// API group of the resource (`patchbay.dev`).
    pub group: &'a str,
    /// Version.
    pub version: &'a str,
    /// Kind (`SwitchPortConfiguration`).
    pub kind: &'a str,
    /// Plural (`switchportconfigurations`).
    pub resource: &'a str,
    /// Namespace, for a namespaced resource.
    pub namespace: Option<&'a str>,
    /// Object name.
    pub name: &'a str,
    /// `CREATE`, `UPDATE` or `DELETE`.
    pub operation: &'a str,
    /// The object as it would be stored (absent for DELETE).
    pub object: Option<&'a Value>,
    /// The object as stored (UPDATE, DELETE).
    pub old_object: Option<&'a Value>,
    /// The namespace's labels (for `namespaceSelector`).
    pub namespace_labels: BTreeMap<String, String>,
    /// A dry run.
    pub dry_run: bool,
}

/// One webhook to call.
#[derive(Debug, Clone, PartialEq)]
pub struct Hook {
    /// Its name.
    pub name: String,
    /// Its URL; `None` for a `service` reference (unreachable here).
    pub url: Option<String>,
    /// The PEM certificates its server certificate is verified against.
    pub ca_bundle: Vec<u8>,
    /// `failurePolicy: Fail` (the default) rather than `Ignore`.
    pub fail: bool,
    /// `timeoutSeconds`.
    pub timeout: Duration,
}

fn listed(list: &[String], value: &str) -> bool {
    list.iter().any(|v| v == "*" || v == value)
}

fn labels_match(selector: Option<&Value>, labels: &BTreeMap<String, String>) -> bool {
    let Some(sel) = selector else { return true };
    let by_labels = sel
        .get("matchLabels")
        .and_then(Value::as_object)
        .is_none_or(|m| {
            m.iter()
                .all(|(k, v)| labels.get(k).map(String::as_str) == v.as_str())
        });
    let by_expressions = sel
        .get("matchExpressions")
        .and_then(Value::as_array)
        .is_none_or(|exprs| {
            exprs.iter().all(|e| {
                let key = e.get("key").and_then(Value::as_str).unwrap_or_default();
                let values = string_list(e, "/values");
                let have = labels.get(key);
                match e
                    .get("operator")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                {
                    "In" => have.is_some_and(|h| values.contains(h)),
                    "NotIn" => have.is_none_or(|h| !values.contains(h)),
                    "Exists" => have.is_some(),
                    "DoesNotExist" => have.is_none(),
                    _ => false,
                }
            })
        });
    by_labels && by_expressions
}

fn object_labels(o: Option<&Value>) -> BTreeMap<String, String> {
    o.and_then(|o| o.pointer("/metadata/labels"))
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                .collect()
        })
        .unwrap_or_default()
}

/// The webhooks of `configurations` whose rules match `a`, in order.
pub fn matching(configurations: &[Value], a: &Attributes<'_>) -> Vec<Hook> {
    let mut hooks = Vec::new();
    for config in configurations {
        let Some(webhooks) = config.get("webhooks").and_then(Value::as_array) else {
            continue;
        };
        for w in webhooks {
            let ruled = w
                .get("rules")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .any(|r| {
                    let scope = r.get("scope").and_then(Value::as_str).unwrap_or("*");
                    let scoped = match scope {
                        "Namespaced" => a.namespace.is_some(),
                        "Cluster" => a.namespace.is_none(),
                        _ => true,
                    };
                    scoped
                        && listed(&string_list(r, "/apiGroups"), a.group)
                        && listed(&string_list(r, "/apiVersions"), a.version)
                        && listed(&string_list(r, "/operations"), a.operation)
                        && string_list(r, "/resources")
                            .iter()
                            .any(|x| x == "*" || x == "*/*" || x == a.resource)
                });
            if !ruled {
                continue;
            }
            if a.namespace.is_some()
                && !labels_match(w.get("namespaceSelector"), &a.namespace_labels)
            {
                continue;
            }
            let labels = object_labels(a.object.or(a.old_object));
            if !labels_match(w.get("objectSelector"), &labels) {
                continue;
            }
            let ca = w
                .pointer("/clientConfig/caBundle")
                .and_then(Value::as_str)
                .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
                .unwrap_or_default();
            hooks.push(Hook {
                name: w
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned(),
                url: w
                    .pointer("/clientConfig/url")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
                ca_bundle: ca,
                fail: w.get("failurePolicy").and_then(Value::as_str) != Some("Ignore"),
                timeout: Duration::from_secs(
                    w.get("timeoutSeconds")
                        .and_then(Value::as_u64)
                        .unwrap_or(10)
                        .clamp(1, 30),
                ),
            });
        }
    }
    hooks
}

/// The AdmissionReview sent for `a`.
pub fn review(a: &Attributes<'_>, uid: &str) -> Value {
    let gvk = json!({"group": a.group, "version": a.version, "kind": a.kind});
    let gvr = json!({"group": a.group, "version": a.version, "resource": a.resource});
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": gvk, "resource": gvr, "requestKind": gvk, "requestResource": gvr,
            "name": a.name,
            "namespace": a.namespace,
            "operation": a.operation,
            "userInfo": {"username": "devplane-anonymous"},
            "object": a.object,
            "oldObject": a.old_object,
            "dryRun": a.dry_run,
        }
    })
}

fn reason_of(code: u16) -> &'static str {
    match code {
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "NotFound",
        409 => "Conflict",
        422 => "Invalid",
        429 => "TooManyRequests",
        _ => "BadRequest",
    }
}

fn denial(hook: &str, status: &Value) -> ApiError {
    let code = status
        .get("code")
        .and_then(Value::as_u64)
        .map(|c| c as u16)
        .filter(|c| *c >= 400)
        .unwrap_or(400);
    let message = status
        .get("message")
        .and_then(Value::as_str)
        .filter(|m| !m.is_empty())
        .map(|m| format!("admission webhook {hook:?} denied the request: {m}"))
        .unwrap_or_else(|| {
            format!("admission webhook {hook:?} denied the request without explanation")
        });
    ApiError {
        code,
        reason: reason_of(code),
        message,
        details: None,
    }
}

/// Calls every hook for `a`, in order; the first denial (or failure of a `Fail`
/// hook) is the error the write fails with. Otherwise the warnings the hooks'
/// answers carry (`response.warnings`), in order, which kube-apiserver returns to
/// the client as `Warning` headers.
pub async fn admit(hooks: &[Hook], a: &Attributes<'_>) -> Result<Vec<String>, ApiError> {
    let mut warnings = Vec::new();
    for (i, hook) in hooks.iter().enumerate() {
        let uid = format!(
            "devplane-{}-{i}-{}",
            std::process::id(),
            jiff::Timestamp::now().as_nanosecond()
        );
        let body = review(a, &uid);
        let called = match &hook.url {
            None => Err("clientConfig.service is not supported by devplane".to_owned()),
            Some(url) => call(url, &hook.ca_bundle, hook.timeout, &body).await,
        };
        match called {
            Ok(answer) => {
                let response = answer.get("response").cloned().unwrap_or_default();
                let same = response.get("uid").and_then(Value::as_str) == Some(uid.as_str());
                match (same, response.get("allowed").and_then(Value::as_bool)) {
                    (true, Some(true)) => warnings.extend(warnings_of(&response)),
                    (true, Some(false)) => {
                        return Err(denial(
                            &hook.name,
                            &response.get("status").cloned().unwrap_or_default(),
                        ));
                    }
                    (false, _) => failed(hook, "the response's uid is not the request's")?,
                    (true, None) => failed(hook, "the response is neither allowed nor denied")?,
                }
            }
            Err(why) => failed(hook, &why)?,
        }
    }
    Ok(warnings)
}

/// The warnings of an AdmissionReview's `response` (its `warnings` strings), as
/// kube-apiserver passes them on: each cut to 256 characters, control characters
/// dropped, at most 64.
fn warnings_of(response: &Value) -> Vec<String> {
    response
        .get("warnings")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(|w| w.chars().filter(|c| !c.is_control()).take(256).collect())
        .filter(|w: &String| !w.is_empty())
        .take(64)
        .collect()
}

fn failed(hook: &Hook, why: &str) -> Result<(), ApiError> {
    let url = hook.url.clone().unwrap_or_default();
    let message = format!(
        "Internal error occurred: failed calling webhook {:?}: failed to call webhook: Post \"{url}?timeout={}s\": {why}",
        hook.name,
        hook.timeout.as_secs()
    );
    if hook.fail {
        Err(ApiError {
            code: 500,
            reason: "InternalError",
            message,
            details: None,
        })
    } else {
        tracing::warn!(%message, "webhook skipped (failurePolicy: Ignore)");
        Ok(())
    }
}

/// POSTs `body` to `url` (https, verified against `ca`) within `timeout`.
async fn call(url: &str, ca: &[u8], timeout: Duration, body: &Value) -> Result<Value, String> {
    tokio::time::timeout(timeout, call_once(url, ca, timeout, body))
        .await
        .map_err(|_| {
            "context deadline exceeded (Client.Timeout exceeded while awaiting headers)".to_owned()
        })?
}

async fn call_once(url: &str, ca: &[u8], timeout: Duration, body: &Value) -> Result<Value, String> {
    let uri: hyper::Uri = url.parse().map_err(|e| format!("invalid URL: {e}"))?;
    if uri.scheme_str() != Some("https") {
        return Err("webhook URLs must be https".into());
    }
    let host = uri.host().ok_or("the URL has no host")?.to_owned();
    let port = uri.port_u16().unwrap_or(443);
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca) {
        let cert = cert.map_err(|e| format!("caBundle: {e}"))?;
        roots.add(cert).map_err(|e| format!("caBundle: {e}"))?;
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| e.to_string())?
    .with_root_certificates(roots)
    .with_no_client_auth();
    let name = ServerName::try_from(
        host.trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned(),
    )
    .map_err(|e| format!("server name: {e}"))?;
    let tcp = tokio::net::TcpStream::connect((host.as_str(), port))
        .await
        .map_err(|e| format!("dial tcp {host}:{port}: {e}"))?;
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
        .map_err(|e| format!("tls: {e}"))?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let path = format!(
        "{}?timeout={}s",
        uri.path_and_query().map(|p| p.path()).unwrap_or("/"),
        timeout.as_secs()
    );
    let request = Request::post(path)
        .header(hyper::header::HOST, format!("{host}:{port}"))
        .header(hyper::header::CONTENT_TYPE, "application/json")
        .header(hyper::header::ACCEPT, "application/json")
        .body(Full::new(Bytes::from(
            serde_json::to_vec(body).unwrap_or_default(),
        )))
        .map_err(|e| e.to_string())?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| e.to_string())?;
    let status = response.status();
    let bytes = Limited::new(response.into_body(), 3 * 1024 * 1024)
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    if !status.is_success() {
        return Err(format!("the server answered {status}"));
    }
    serde_json::from_slice(&bytes).map_err(|e| format!("the answer is not JSON: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attrs<'a>(op: &'a str, ns: Option<&'a str>, object: &'a Value) -> Attributes<'a> {
        Attributes {
            group: "patchbay.dev",
            version: "v1alpha1",
            kind: "SwitchPortConfiguration",
            resource: "switchportconfigurations",
            namespace: ns,
            name: "web",
            operation: op,
            object: Some(object),
            old_object: None,
            namespace_labels: BTreeMap::from([("team".to_owned(), "a".to_owned())]),
            dry_run: false,
        }
    }

    /// The review says whether the write is a dry run, as kube-apiserver's does
    /// (`kubectl apply --dry-run=server`): a webhook with side effects skips them.
    #[test]
    fn the_review_says_a_dry_run() {
        let o = json!({"metadata": {"name": "web"}});
        let mut a = attrs("UPDATE", Some("a"), &o);
        assert_eq!(review(&a, "u")["request"]["dryRun"], json!(false));
        a.dry_run = true;
        let r = review(&a, "u");
        assert_eq!(r["request"]["dryRun"], json!(true));
        assert_eq!(r["request"]["operation"], json!("UPDATE"));
    }

    #[test]
    fn rules_and_selectors_choose_the_webhooks() {
        let configs = vec![json!({"webhooks": [
            {"name": "all.patchbay.dev", "clientConfig": {"url": "https://127.0.0.1:1/validate"},
             "rules": [{"apiGroups": ["patchbay.dev"], "apiVersions": ["*"],
                        "operations": ["CREATE", "UPDATE"], "resources": ["switchportconfigurations"]}]},
            {"name": "other.patchbay.dev", "failurePolicy": "Ignore",
             "clientConfig": {"url": "https://127.0.0.1:1/validate"},
             "rules": [{"apiGroups": ["patchbay.dev"], "apiVersions": ["*"],
                        "operations": ["*"], "resources": ["serverclaims"]}]},
            {"name": "not-team-a", "clientConfig": {"url": "https://127.0.0.1:1/validate"},
             "namespaceSelector": {"matchExpressions": [{"key": "team", "operator": "NotIn", "values": ["a"]}]},
             "rules": [{"apiGroups": ["*"], "apiVersions": ["*"], "operations": ["*"], "resources": ["*"]}]},
        ]})];
        let o = json!({"metadata": {"name": "web"}});
        let names = |a: &Attributes<'_>| -> Vec<String> {
            matching(&configs, a).into_iter().map(|h| h.name).collect()
        };
        assert_eq!(names(&attrs("CREATE", Some("a"), &o)), ["all.patchbay.dev"]);
        assert!(names(&attrs("DELETE", Some("a"), &o)).is_empty());
        let mut other = attrs("CREATE", Some("b"), &o);
        other.namespace_labels.clear();
        assert_eq!(names(&other), ["all.patchbay.dev", "not-team-a"]);
        let hooks = matching(&configs, &attrs("UPDATE", Some("a"), &o));
        assert!(hooks[0].fail && hooks[0].timeout == Duration::from_secs(10));
    }

    #[test]
    fn a_denial_reads_as_the_api_server_words_it() {
        let e = denial(
            "vlans.patchbay.dev",
            &json!({"code": 403, "message": "spec.untaggedVLAN: VLAN 300 is not granted"}),
        );
        assert_eq!((e.code, e.reason), (403, "Forbidden"));
        assert_eq!(
            e.message,
            "admission webhook \"vlans.patchbay.dev\" denied the request: spec.untaggedVLAN: VLAN 300 is not granted"
        );
        let bare = denial("x", &json!({}));
        assert_eq!(bare.code, 400);
        assert!(bare.message.ends_with("without explanation"));
    }

    #[test]
    fn an_allowed_answer_s_warnings_are_passed_on_cleaned() {
        let response = json!({"allowed": true, "warnings": [
            "moves 212 ports on 9 switches",
            "a\u{7}bell",
            "",
            42,
            "x".repeat(300),
        ]});
        let w = warnings_of(&response);
        assert_eq!(w[0], "moves 212 ports on 9 switches");
        assert_eq!(w[1], "abell");
        assert_eq!(w[2].len(), 256);
        assert_eq!(w.len(), 3);
        assert!(warnings_of(&json!({"allowed": true})).is_empty());
    }

    #[tokio::test]
    async fn an_unreachable_webhook_fails_the_write_or_is_skipped_by_policy() {
        // A port nothing listens on.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut hook = Hook {
            name: "down.patchbay.dev".into(),
            url: Some(format!("https://127.0.0.1:{port}/validate")),
            ca_bundle: Vec::new(),
            fail: true,
            timeout: Duration::from_secs(2),
        };
        let o = json!({"metadata": {"name": "web"}});
        let e = admit(std::slice::from_ref(&hook), &attrs("CREATE", Some("a"), &o))
            .await
            .unwrap_err();
        assert_eq!(e.code, 500);
        assert!(
            e.message.starts_with(
                "Internal error occurred: failed calling webhook \"down.patchbay.dev\""
            ),
            "{}",
            e.message
        );
        hook.fail = false;
        assert!(
            admit(&[hook], &attrs("CREATE", Some("a"), &o))
                .await
                .is_ok()
        );
    }
}

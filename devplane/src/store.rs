//! The in-memory object store and the API semantics on top of it: create (with
//! generateName, uid, creationTimestamp, generation), update with resourceVersion
//! conflicts, the four patch types, the status subresource, finalizers and
//! deletionTimestamp, garbage collection through ownerReferences and namespace
//! deletion, CRD installation, and the bounded event history watches replay from.
//! Pure data structure, no I/O: the HTTP layer locks it and calls in.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::ops::Bound;
use std::sync::Arc;

use base64::Engine;
use serde_json::{Map, Value, json};
use tokio::sync::broadcast;

use crate::resources::{ResKey, Resource};
use crate::schema::{self, Cause, PatternCache};
use crate::selector::{FieldSelector, LabelSelector};

/// An API error, rendered as a `metav1.Status`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{code} {reason}: {message}")]
pub struct ApiError {
    /// HTTP status code.
    pub code: u16,
    /// `NotFound`, `AlreadyExists`, `Conflict`, `Invalid`, …
    pub reason: &'static str,
    /// Human-readable message.
    pub message: String,
    /// `details` (name, group, kind, causes), if any.
    pub details: Option<Value>,
}

impl ApiError {
    fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            reason,
            message: message.into(),
            details: None,
        }
    }

    /// 400 BadRequest.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    /// 404 NotFound for `resource "name"`.
    pub fn not_found(res: &Resource, name: &str) -> Self {
        let mut e = Self::new(
            404,
            "NotFound",
            format!("{} \"{name}\" not found", qualified(res)),
        );
        e.details = Some(json!({"name": name, "group": res.group, "kind": res.plural}));
        e
    }

    /// 404 for a path that names no resource.
    pub fn no_route(path: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("the server could not find the requested resource ({path})"),
        )
    }

    /// A request refused on purpose (a test's fault), as the API server's RBAC
    /// (403 Forbidden), an admission plugin (422 Invalid) or an overloaded server
    /// (429, 5xx) answers it.
    pub fn refused(code: u16, verb: &str, resource: &str) -> Self {
        let reason = match code {
            403 => "Forbidden",
            422 => "Invalid",
            429 => "TooManyRequests",
            503 => "ServiceUnavailable",
            _ => "InternalError",
        };
        Self::new(
            code,
            reason,
            format!("{resource}: {verb} refused ({reason})"),
        )
    }

    /// 405 MethodNotAllowed.
    pub fn method_not_allowed(message: impl Into<String>) -> Self {
        Self::new(405, "MethodNotAllowed", message)
    }

    /// 409 Conflict on a stale resourceVersion.
    pub fn conflict(res: &Resource, name: &str) -> Self {
        let mut e = Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": the object has been modified; \
                 please apply your changes to the latest version and try again",
                qualified(res)
            ),
        );
        e.details = Some(json!({"name": name, "group": res.group, "kind": res.plural}));
        e
    }

    /// 410 Gone (expired resourceVersion or continue token).
    pub fn gone(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    /// 422 Invalid with field causes.
    pub fn invalid(res: &Resource, name: &str, causes: &[Cause]) -> Self {
        let parts: Vec<String> = causes
            .iter()
            .map(|c| {
                if c.field.is_empty() {
                    c.message.clone()
                } else {
                    format!("{}: {}", c.field, c.message)
                }
            })
            .collect();
        let summary = if parts.len() == 1 {
            parts[0].clone()
        } else {
            format!("[{}]", parts.join(", "))
        };
        let mut e = Self::new(
            422,
            "Invalid",
            format!(
                "{}.{} \"{name}\" is invalid: {summary}",
                res.kind, res.group
            )
            .replace(&format!("{}. \"", res.kind), &format!("{} \"", res.kind)),
        );
        let causes: Vec<Value> = causes
            .iter()
            .map(|c| json!({"reason": c.reason, "message": c.message, "field": c.field}))
            .collect();
        e.details =
            Some(json!({"name": name, "group": res.group, "kind": res.kind, "causes": causes}));
        e
    }

    /// The `metav1.Status` body.
    pub fn to_status(&self) -> Value {
        let mut s = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(d) = &self.details {
            s["details"] = d.clone();
        }
        s
    }
}

fn qualified(res: &Resource) -> String {
    if res.group.is_empty() {
        res.plural.clone()
    } else {
        format!("{}.{}", res.plural, res.group)
    }
}

/// Watch event types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    /// Created.
    Added,
    /// Changed.
    Modified,
    /// Removed.
    Deleted,
}

impl EventType {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One change, as recorded in the history and sent to watchers.
#[derive(Debug)]
pub struct Event {
    /// The resourceVersion the change produced.
    pub rv: u64,
    /// Which resource.
    pub res: ResKey,
    /// Namespace ("" when cluster-scoped).
    pub namespace: String,
    /// Kind of change.
    pub etype: EventType,
    /// The object after the change (before removal for DELETED).
    pub object: Arc<Value>,
    /// For MODIFIED, the object before it: a watch with a selector sees an object
    /// that starts matching as ADDED and one that stops matching as DELETED, as
    /// kube-apiserver's watch cache does.
    pub prev: Option<Arc<Value>>,
    /// When it happened (a replayed synthetic ADDED: when the replay was made).
    pub at: std::time::Instant,
    /// The watch line (`{"type":…,"object":…}\n`), serialised once for every watcher
    /// that wants the object as stored.
    pub encoded: std::sync::OnceLock<bytes::Bytes>,
}

impl Event {
    /// The JSON watch line for this event, encoded once.
    pub fn line(&self) -> bytes::Bytes {
        self.encoded
            .get_or_init(|| {
                let mut line = serde_json::to_vec(
                    &json!({"type": self.etype.as_str(), "object": &*self.object}),
                )
                .unwrap_or_default();
                line.push(b'\n');
                bytes::Bytes::from(line)
            })
            .clone()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct ObjKey {
    res: ResKey,
    namespace: String,
    name: String,
}

/// How a write is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FieldValidation {
    /// Unknown fields are pruned silently.
    Ignore,
    /// Unknown fields are pruned with a warning (the default).
    #[default]
    Warn,
    /// Unknown fields are an error.
    Strict,
}

/// Options common to writes.
#[derive(Debug, Clone, Default)]
pub struct WriteOptions {
    /// `dryRun=All`: validate, do not persist.
    pub dry_run: bool,
    /// `fieldValidation`.
    pub field_validation: FieldValidation,
}

/// Which part of an object a write targets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Subresource {
    /// The object (status changes ignored when a status subresource exists).
    Main,
    /// `/status` (only status changes taken).
    Status,
}

/// The patch content types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchType {
    /// `application/merge-patch+json` (RFC 7386).
    Merge,
    /// `application/strategic-merge-patch+json`, treated as a merge patch.
    StrategicMerge,
    /// `application/json-patch+json` (RFC 6902, including `test`).
    Json,
    /// `application/apply-patch+yaml`: an approximation of server-side apply.
    Apply,
}

/// Deletion propagation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Propagation {
    /// Delete now; dependents are collected afterwards (the default).
    #[default]
    Background,
    /// Dependents first, then the owner.
    Foreground,
    /// Dependents lose their ownerReference and stay.
    Orphan,
}

/// Options of a delete.
#[derive(Debug, Clone, Default)]
pub struct DeleteOptions {
    /// Propagation policy.
    pub propagation: Propagation,
    /// Precondition on the uid.
    pub uid: Option<String>,
    /// Precondition on the resourceVersion.
    pub resource_version: Option<String>,
    /// `dryRun=All`.
    pub dry_run: bool,
}

/// A list result.
pub struct ListResult {
    /// The items.
    pub items: Vec<Arc<Value>>,
    /// The store's resourceVersion at the time of the list.
    pub resource_version: u64,
    /// Continue token when `limit` cut the list.
    pub continue_token: Option<String>,
}

/// What a watch starts from.
pub struct WatchStart {
    /// Events to send first (synthetic ADDED for a watch without resourceVersion, or
    /// the history after the given resourceVersion).
    pub replay: Vec<Arc<Event>>,
    /// Live events.
    pub live: broadcast::Receiver<Arc<Event>>,
    /// The resourceVersion the replay ends at.
    pub resource_version: u64,
}

const FINALIZER_FOREGROUND: &str = "foregroundDeletion";
const FINALIZER_ORPHAN: &str = "orphan";
const FINALIZER_CRD: &str = "customresourcecleanup.apiextensions.k8s.io";

fn now() -> String {
    jiff::Timestamp::now()
        .round(jiff::Unit::Second)
        .map(|t| t.to_string())
        .unwrap_or_default()
}

fn meta_str<'a>(obj: &'a Value, field: &str) -> Option<&'a str> {
    obj.get("metadata")?.get(field)?.as_str()
}

fn finalizers(obj: &Value) -> Vec<String> {
    crate::resources::string_list(obj, "/metadata/finalizers")
}

fn set_finalizers(obj: &mut Value, list: Vec<String>) {
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        if list.is_empty() {
            meta.remove("finalizers");
        } else {
            meta.insert("finalizers".into(), json!(list));
        }
    }
}

fn is_deleting(obj: &Value) -> bool {
    obj.pointer("/metadata/deletionTimestamp")
        .is_some_and(|v| !v.is_null())
}

fn owner_uids(obj: &Value) -> Vec<String> {
    obj.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|r| r.get("uid").and_then(Value::as_str).map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// A lowercase RFC 1123 subdomain.
fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric())
}

/// The store. See the module documentation.
pub struct Store {
    resources: BTreeMap<ResKey, Arc<Resource>>,
    objects: BTreeMap<ObjKey, Arc<Value>>,
    rv: u64,
    history: VecDeque<Arc<Event>>,
    history_limit: usize,
    compacted_rv: u64,
    counter: u64,
    patterns: PatternCache,
    events: broadcast::Sender<Arc<Event>>,
}

impl Store {
    /// An empty store with the built-in kinds and the `default`, `kube-system` and
    /// `kube-public` namespaces; `history_limit` bounds the watch history.
    pub fn new(history_limit: usize) -> Self {
        let (events, _) = broadcast::channel(65_536);
        let mut store = Self {
            resources: Resource::builtins()
                .into_iter()
                .map(|r| (r.key(), Arc::new(r)))
                .collect(),
            objects: BTreeMap::new(),
            rv: 0,
            history: VecDeque::new(),
            history_limit: history_limit.max(16),
            compacted_rv: 0,
            counter: 0,
            patterns: PatternCache::default(),
            events,
        };
        for ns in ["default", "kube-system", "kube-public"] {
            let body = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
            let key = ResKey {
                group: String::new(),
                plural: "namespaces".into(),
            };
            // Cannot fail: a fresh store, valid names.
            let _ = store.create(&key, "v1", None, body, &WriteOptions::default());
        }
        store
    }

    /// The served resources.
    pub fn resources(&self) -> impl Iterator<Item = &Resource> {
        self.resources.values().map(|r| r.as_ref())
    }

    /// The resource at `group`/`version` with this plural.
    pub fn resource(&self, group: &str, version: &str, plural: &str) -> Option<Arc<Resource>> {
        self.resources
            .get(&ResKey {
                group: group.into(),
                plural: plural.into(),
            })
            .filter(|r| r.serves(version))
            .cloned()
    }

    /// The current resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.rv
    }

    fn res(&self, key: &ResKey) -> Result<Arc<Resource>, ApiError> {
        self.resources
            .get(key)
            .cloned()
            .ok_or_else(|| ApiError::no_route(&key.plural))
    }

    fn obj_key(res: &Resource, namespace: Option<&str>, name: &str) -> ObjKey {
        ObjKey {
            res: res.storage_key(),
            namespace: if res.namespaced {
                namespace.unwrap_or("").to_owned()
            } else {
                String::new()
            },
            name: name.to_owned(),
        }
    }

    /// Renders a stored object as `res` serves it at `version`: the apiVersion, and
    /// for events.k8s.io Events the conversion from their stored core shape. No
    /// conversion between versions of one group.
    pub(crate) fn present(res: &Resource, version: &str, obj: &Value) -> Value {
        let mut v = if res.is_events_alias() {
            crate::events::core_to_v1(obj.clone())
        } else {
            obj.clone()
        };
        v["apiVersion"] = json!(res.api_version(version));
        v
    }

    /// The resource whose storage `res` serves (itself, or core Events for
    /// events.k8s.io Events).
    fn storage_res(&self, res: &Arc<Resource>) -> Result<Arc<Resource>, ApiError> {
        if res.is_events_alias() {
            self.res(&res.storage_key())
        } else {
            Ok(res.clone())
        }
    }

    fn next_uid(&mut self) -> String {
        self.counter += 1;
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let a = (nanos as u64) ^ self.counter.rotate_left(32);
        format!(
            "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
            (a >> 32) as u32,
            (a >> 16) as u16,
            (a & 0xfff) as u16,
            (self.counter & 0xfff) as u16,
            self.counter
        )
    }

    fn random_suffix(&mut self) -> String {
        const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
        self.counter += 1;
        let mut x = self
            .counter
            .wrapping_mul(0x9e37_79b9_7f4a_7c15)
            .rotate_left(17)
            ^ (self.rv.wrapping_mul(31));
        (0..5)
            .map(|_| {
                let c = ALPHABET[(x % ALPHABET.len() as u64) as usize] as char;
                x /= ALPHABET.len() as u64;
                c
            })
            .collect()
    }

    /// Stores `obj` under `key` with a new resourceVersion and records the event.
    fn commit(&mut self, key: ObjKey, mut obj: Value, etype: EventType) -> Arc<Value> {
        self.rv += 1;
        obj["metadata"]["resourceVersion"] = json!(self.rv.to_string());
        let obj = Arc::new(obj);
        let namespace = key.namespace.clone();
        let res = key.res.clone();
        let prev = (etype == EventType::Modified)
            .then(|| self.objects.get(&key).cloned())
            .flatten();
        if etype == EventType::Deleted {
            self.objects.remove(&key);
        } else {
            self.objects.insert(key, obj.clone());
        }
        let event = Arc::new(Event {
            rv: self.rv,
            res,
            namespace,
            etype,
            object: obj.clone(),
            prev,
            at: std::time::Instant::now(),
            encoded: std::sync::OnceLock::new(),
        });
        self.history.push_back(event.clone());
        while self.history.len() > self.history_limit {
            if let Some(old) = self.history.pop_front() {
                self.compacted_rv = old.rv;
            }
        }
        let _ = self.events.send(event);
        obj
    }

    /// Validates and prunes a custom object against its schema.
    fn check_schema(
        &mut self,
        res: &Resource,
        version: &str,
        name: &str,
        obj: &mut Value,
        validation: FieldValidation,
    ) -> Result<Vec<String>, ApiError> {
        let Some(schema) = res
            .schemas
            .get(version)
            .or_else(|| res.schemas.values().next())
        else {
            return Ok(Vec::new());
        };
        let outcome = schema::check(schema, obj, &mut self.patterns);
        if !outcome.causes.is_empty() {
            return Err(ApiError::invalid(res, name, &outcome.causes));
        }
        if validation == FieldValidation::Strict && !outcome.unknown.is_empty() {
            let list: Vec<String> = outcome
                .unknown
                .iter()
                .map(|f| format!("unknown field \"{f}\""))
                .collect();
            return Err(ApiError::bad_request(format!(
                "strict decoding error: {}",
                list.join(", ")
            )));
        }
        Ok(if validation == FieldValidation::Warn {
            outcome
                .unknown
                .iter()
                .map(|f| format!("unknown field \"{f}\""))
                .collect()
        } else {
            Vec::new()
        })
    }

    /// Kind-specific normalisation of built-in objects.
    fn normalise_builtin(&self, res: &Resource, obj: &mut Value) -> Result<(), ApiError> {
        match (res.group.as_str(), res.plural.as_str()) {
            ("", "secrets") => {
                // stringData is write-only: merged into data, base64-encoded.
                if let Some(Value::Object(sd)) =
                    obj.as_object_mut().and_then(|o| o.remove("stringData"))
                {
                    let data = obj
                        .as_object_mut()
                        .map(|o| o.entry("data").or_insert_with(|| json!({})))
                        .and_then(Value::as_object_mut);
                    if let Some(data) = data {
                        for (k, v) in sd {
                            let s = v.as_str().unwrap_or_default();
                            data.insert(
                                k,
                                json!(base64::engine::general_purpose::STANDARD.encode(s)),
                            );
                        }
                    }
                }
                if let Some(data) = obj.get("data").and_then(Value::as_object) {
                    for (k, v) in data {
                        let ok = v.as_str().is_some_and(|s| {
                            base64::engine::general_purpose::STANDARD.decode(s).is_ok()
                        });
                        if !ok {
                            return Err(ApiError::invalid(
                                res,
                                meta_str(obj, "name").unwrap_or(""),
                                &[Cause {
                                    reason: "FieldValueInvalid",
                                    field: format!("data[{k}]"),
                                    message: "Invalid value: illegal base64 data".into(),
                                }],
                            ));
                        }
                    }
                }
                if obj.get("type").is_none() {
                    obj["type"] = json!("Opaque");
                }
            }
            ("", "namespaces") => {
                if !is_deleting(obj) {
                    obj["status"] = json!({"phase": "Active"});
                }
                obj["spec"] = json!({"finalizers": ["kubernetes"]});
            }
            _ => {}
        }
        Ok(())
    }

    /// GET one object.
    pub fn get(
        &self,
        key: &ResKey,
        version: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Value, ApiError> {
        let res = self.res(key)?;
        self.objects
            .get(&Self::obj_key(&res, namespace, name))
            .map(|o| Self::present(&res, version, o))
            .ok_or_else(|| ApiError::not_found(&res, name))
    }

    /// LIST with selectors and paging. The continue token carries the last name; a
    /// page reflects the store at the time it is served (not a snapshot).
    #[allow(clippy::too_many_arguments)]
    pub fn list(
        &self,
        key: &ResKey,
        version: &str,
        namespace: Option<&str>,
        labels: &LabelSelector,
        fields: &FieldSelector,
        limit: Option<usize>,
        continue_token: Option<&str>,
    ) -> Result<ListResult, ApiError> {
        let res = self.res(key)?;
        let (start_after, list_rv) = match continue_token {
            None => (None, self.rv),
            Some(token) => {
                let decoded = base64::engine::general_purpose::URL_SAFE_NO_PAD
                    .decode(token)
                    .ok()
                    .and_then(|b| String::from_utf8(b).ok())
                    .and_then(|s| {
                        let v: Value = serde_json::from_str(&s).ok()?;
                        Some((
                            v.get("ns")?.as_str()?.to_owned(),
                            v.get("name")?.as_str()?.to_owned(),
                            v.get("rv")?.as_u64()?,
                        ))
                    })
                    .ok_or_else(|| ApiError::bad_request("invalid continue token"))?;
                if decoded.2 < self.compacted_rv {
                    return Err(ApiError::gone(
                        "The provided continue parameter is too old to display a consistent list result. \
                         You can start a new list without the continue parameter.",
                    ));
                }
                (Some((decoded.0, decoded.1)), decoded.2)
            }
        };
        let rk = res.storage_key();
        let lower = ObjKey {
            res: rk.clone(),
            namespace: match namespace {
                Some(ns) if res.namespaced => ns.to_owned(),
                _ => String::new(),
            },
            name: String::new(),
        };
        // A page starts right after the continue token's key and stops one match past
        // its limit, as etcd's range read does: paging a collection costs its size
        // once, not once per page.
        let start = match start_after {
            Some((namespace, name)) => Bound::Excluded(ObjKey {
                res: rk.clone(),
                namespace,
                name,
            }),
            None => Bound::Included(lower),
        };
        let mut items = Vec::new();
        let mut more = false;
        let mut last: Option<(String, String)> = None;
        for (k, obj) in self.objects.range((start, Bound::Unbounded)) {
            if k.res != rk {
                break;
            }
            if let Some(ns) = namespace
                && res.namespaced
                && k.namespace != ns
            {
                // Keys are ordered by namespace: past ours, nothing more matches.
                break;
            }
            if !labels.matches(obj) || !fields.matches(obj) {
                continue;
            }
            if limit.is_some_and(|l| items.len() >= l) {
                more = true;
                break;
            }
            last = Some((k.namespace.clone(), k.name.clone()));
            items.push(Arc::new(Self::present(&res, version, obj)));
        }
        let continue_token = more.then(|| {
            let (ns, name) = last.unwrap_or_default();
            base64::engine::general_purpose::URL_SAFE_NO_PAD
                .encode(json!({"ns": ns, "name": name, "rv": list_rv}).to_string())
        });
        Ok(ListResult {
            items,
            resource_version: list_rv,
            continue_token,
        })
    }

    /// CREATE. Returns the stored object and warnings.
    pub fn create(
        &mut self,
        key: &ResKey,
        version: &str,
        namespace: Option<&str>,
        mut body: Value,
        opts: &WriteOptions,
    ) -> Result<(Value, Vec<String>), ApiError> {
        let requested = self.res(key)?;
        let res = self.storage_res(&requested)?;
        if !body.is_object() {
            return Err(ApiError::bad_request("the body must be a JSON object"));
        }
        if requested.is_events_alias() {
            body = crate::events::v1_to_core(body);
        }
        if let Some(kind) = body.get("kind").and_then(Value::as_str)
            && kind != res.kind
        {
            return Err(ApiError::bad_request(format!(
                "the kind {kind:?} of the body does not match the resource {}",
                qualified(&res)
            )));
        }
        body["apiVersion"] = json!(res.api_version(version));
        body["kind"] = json!(res.kind);
        if !body.get("metadata").is_some_and(Value::is_object) {
            body["metadata"] = json!({});
        }
        let mut name = meta_str(&body, "name").unwrap_or("").to_owned();
        if name.is_empty() {
            match meta_str(&body, "generateName") {
                Some(prefix) if !prefix.is_empty() => {
                    name = format!("{prefix}{}", self.random_suffix());
                }
                _ => {
                    return Err(ApiError::invalid(
                        &res,
                        "",
                        &[Cause {
                            reason: "FieldValueRequired",
                            field: "metadata.name".into(),
                            message: "Required value: name or generateName is required".into(),
                        }],
                    ));
                }
            }
        }
        if !valid_name(&name) {
            return Err(ApiError::invalid(
                &res,
                &name,
                &[Cause {
                    reason: "FieldValueInvalid",
                    field: "metadata.name".into(),
                    message: format!(
                        "Invalid value: {name:?}: a lowercase RFC 1123 subdomain must consist of lower case \
                         alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character"
                    ),
                }],
            ));
        }
        let meta = body["metadata"]
            .as_object_mut()
            .expect("metadata is an object");
        meta.insert("name".into(), json!(name));
        if res.namespaced {
            let ns = namespace
                .ok_or_else(|| ApiError::bad_request("a namespaced resource needs a namespace"))?;
            if let Some(given) = meta.get("namespace").and_then(Value::as_str)
                && given != ns
            {
                return Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ));
            }
            meta.insert("namespace".into(), json!(ns));
            let ns_res = self.res(&ResKey {
                group: String::new(),
                plural: "namespaces".into(),
            })?;
            match self.objects.get(&Self::obj_key(&ns_res, None, ns)) {
                None => return Err(ApiError::not_found(&ns_res, ns)),
                Some(n) if is_deleting(n) => {
                    return Err(ApiError::new(
                        403,
                        "Forbidden",
                        format!(
                            "{} \"{name}\" is forbidden: unable to create new content in namespace {ns} \
                             because it is being terminated",
                            qualified(&res)
                        ),
                    ));
                }
                Some(_) => {}
            }
        } else {
            meta.remove("namespace");
        }
        for server_owned in [
            "uid",
            "resourceVersion",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
            "selfLink",
            "managedFields",
        ] {
            meta.remove(server_owned);
        }
        let okey = Self::obj_key(&res, namespace, &name);
        if self.objects.contains_key(&okey) {
            let mut e = ApiError::new(
                409,
                "AlreadyExists",
                format!("{} \"{name}\" already exists", qualified(&res)),
            );
            e.details = Some(json!({"name": name, "group": res.group, "kind": res.plural}));
            return Err(e);
        }
        if res.status_subresource && !res.builtin {
            body.as_object_mut().map(|o| o.remove("status"));
        }
        self.normalise_builtin(&res, &mut body)?;
        let warnings = self.check_schema(&res, version, &name, &mut body, opts.field_validation)?;
        let mut crd_resource = None;
        if res.group == "apiextensions.k8s.io" {
            let r = Resource::from_crd(&body).map_err(|m| {
                ApiError::invalid(
                    &res,
                    &name,
                    &[Cause {
                        reason: "FieldValueInvalid",
                        field: String::new(),
                        message: m,
                    }],
                )
            })?;
            body["status"] = crd_status(&r);
            let mut f = finalizers(&body);
            if !f.iter().any(|x| x == FINALIZER_CRD) {
                f.push(FINALIZER_CRD.into());
            }
            set_finalizers(&mut body, f);
            crd_resource = Some(r);
        }
        let uid = self.next_uid();
        let meta = body["metadata"]
            .as_object_mut()
            .expect("metadata is an object");
        meta.insert("uid".into(), json!(uid));
        meta.insert("creationTimestamp".into(), json!(now()));
        meta.insert("generation".into(), json!(1));
        if opts.dry_run {
            return Ok((Self::present(&requested, version, &body), warnings));
        }
        if let Some(r) = crd_resource {
            self.install(r);
        }
        let stored = self.commit(okey, body, EventType::Added);
        Ok((Self::present(&requested, version, &stored), warnings))
    }

    fn install(&mut self, r: Resource) {
        self.resources.insert(r.key(), Arc::new(r));
    }

    /// UPDATE (PUT) of the object or its status.
    #[allow(clippy::too_many_arguments)]
    pub fn update(
        &mut self,
        key: &ResKey,
        version: &str,
        namespace: Option<&str>,
        name: &str,
        body: Value,
        sub: Subresource,
        opts: &WriteOptions,
    ) -> Result<(Value, Vec<String>), ApiError> {
        let requested = self.res(key)?;
        let res = self.storage_res(&requested)?;
        let body = if requested.is_events_alias() {
            crate::events::v1_to_core(body)
        } else {
            body
        };
        let okey = Self::obj_key(&res, namespace, name);
        let old = self
            .objects
            .get(&okey)
            .cloned()
            .ok_or_else(|| ApiError::not_found(&res, name))?;
        if let Some(n) = meta_str(&body, "name")
            && n != name
        {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({n}) does not match the name on the URL ({name})"
            )));
        }
        match meta_str(&body, "resourceVersion") {
            None | Some("") => {
                return Err(ApiError::invalid(
                    &res,
                    name,
                    &[Cause {
                        reason: "FieldValueInvalid",
                        field: "metadata.resourceVersion".into(),
                        message: "Invalid value: 0x0: must be specified for an update".into(),
                    }],
                ));
            }
            Some(rv) if rv != meta_str(&old, "resourceVersion").unwrap_or("") => {
                return Err(ApiError::conflict(&res, name));
            }
            Some(_) => {}
        }
        let (out, warnings) = self.write(&res, version, okey, &old, body, sub, opts)?;
        Ok((Self::present(&requested, version, &out), warnings))
    }

    /// PATCH of the object or its status (apply patches create when missing).
    #[allow(clippy::too_many_arguments)]
    pub fn patch(
        &mut self,
        key: &ResKey,
        version: &str,
        namespace: Option<&str>,
        name: &str,
        ptype: PatchType,
        patch: Value,
        sub: Subresource,
        opts: &WriteOptions,
    ) -> Result<(Value, Vec<String>), ApiError> {
        let requested = self.res(key)?;
        let res = self.storage_res(&requested)?;
        let okey = Self::obj_key(&res, namespace, name);
        let Some(old) = self.objects.get(&okey).cloned() else {
            if ptype == PatchType::Apply && sub == Subresource::Main {
                let mut body = patch;
                if !body.get("metadata").is_some_and(Value::is_object) {
                    body["metadata"] = json!({});
                }
                body["metadata"]["name"] = json!(name);
                return self.create(key, version, namespace, body, opts);
            }
            return Err(ApiError::not_found(&res, name));
        };
        // The patch is in the requested group's terms.
        let mut patched = Self::present(&requested, version, &old);
        match ptype {
            PatchType::Merge | PatchType::StrategicMerge | PatchType::Apply => {
                if !patch.is_object() {
                    return Err(ApiError::bad_request("a merge patch must be a JSON object"));
                }
                json_patch::merge(&mut patched, &patch);
            }
            PatchType::Json => {
                // As the API server's Go library does: `test` for null on a missing
                // path succeeds (kube-rs' finalizer helper relies on it).
                let patch = match patch {
                    Value::Array(ops) => Value::Array(
                        ops.into_iter()
                            .filter(|op| {
                                let null_test = op.get("op").and_then(Value::as_str)
                                    == Some("test")
                                    && op.get("value").is_some_and(Value::is_null);
                                let path = op.get("path").and_then(Value::as_str).unwrap_or("");
                                !(null_test && patched.pointer(path).is_none())
                            })
                            .collect(),
                    ),
                    other => other,
                };
                let ops: json_patch::Patch = serde_json::from_value(patch)
                    .map_err(|e| ApiError::bad_request(format!("invalid JSON patch: {e}")))?;
                json_patch::patch(&mut patched, &ops).map_err(|e| {
                    ApiError::new(
                        422,
                        "Invalid",
                        format!(
                            "the server rejected our request due to an error in our request: {e}"
                        ),
                    )
                })?;
            }
        }
        if let Some(rv) = meta_str(&patched, "resourceVersion")
            && rv != meta_str(&old, "resourceVersion").unwrap_or("")
        {
            return Err(ApiError::conflict(&res, name));
        }
        if requested.is_events_alias() {
            patched = crate::events::v1_to_core(patched);
        }
        let (out, warnings) = self.write(&res, version, okey, &old, patched, sub, opts)?;
        Ok((Self::present(&requested, version, &out), warnings))
    }

    /// The shared tail of update and patch: keep server-owned fields, honour the
    /// status subresource, bump generation on spec changes, validate, and complete a
    /// deletion when the last finalizer is gone.
    #[allow(clippy::too_many_arguments)]
    fn write(
        &mut self,
        res: &Resource,
        version: &str,
        okey: ObjKey,
        old: &Arc<Value>,
        incoming: Value,
        sub: Subresource,
        opts: &WriteOptions,
    ) -> Result<(Value, Vec<String>), ApiError> {
        let name = okey.name.clone();
        let mut new = match sub {
            Subresource::Status => {
                if !res.status_subresource {
                    return Err(ApiError::no_route(&format!("{}/status", res.plural)));
                }
                let mut n = (**old).clone();
                match incoming.get("status") {
                    Some(s) => n["status"] = s.clone(),
                    None => {
                        n.as_object_mut().map(|o| o.remove("status"));
                    }
                }
                n
            }
            Subresource::Main => {
                let mut n = incoming;
                if !n.is_object() {
                    return Err(ApiError::bad_request("the body must be a JSON object"));
                }
                if res.status_subresource {
                    match old.get("status") {
                        Some(s) => n["status"] = s.clone(),
                        None => {
                            n.as_object_mut().map(|o| o.remove("status"));
                        }
                    }
                }
                if !n.get("metadata").is_some_and(Value::is_object) {
                    n["metadata"] = json!({});
                }
                let meta = n["metadata"]
                    .as_object_mut()
                    .expect("metadata is an object");
                let old_meta = old["metadata"].as_object().cloned().unwrap_or_default();
                for keep in [
                    "uid",
                    "creationTimestamp",
                    "generation",
                    "name",
                    "namespace",
                ] {
                    match old_meta.get(keep) {
                        Some(v) => meta.insert(keep.into(), v.clone()),
                        None => meta.remove(keep),
                    };
                }
                for keep in ["deletionTimestamp", "deletionGracePeriodSeconds"] {
                    match old_meta.get(keep) {
                        Some(v) => meta.insert(keep.into(), v.clone()),
                        None => meta.remove(keep),
                    };
                }
                meta.remove("managedFields");
                meta.remove("selfLink");
                n
            }
        };
        new["apiVersion"] = old["apiVersion"].clone();
        new["kind"] = json!(res.kind);
        self.normalise_builtin(res, &mut new)?;
        let warnings = self.check_schema(res, version, &name, &mut new, opts.field_validation)?;
        if res.group == "apiextensions.k8s.io" && sub == Subresource::Main {
            let r = Resource::from_crd(&new).map_err(|m| {
                ApiError::invalid(
                    res,
                    &name,
                    &[Cause {
                        reason: "FieldValueInvalid",
                        field: String::new(),
                        message: m,
                    }],
                )
            })?;
            new["status"] = crd_status(&r);
            if !opts.dry_run && !is_deleting(&new) {
                self.install(r);
            }
        }
        // generation: bumped when anything but metadata and status changes.
        let strip = |v: &Value| {
            let mut m: Map<String, Value> = v.as_object().cloned().unwrap_or_default();
            for k in ["metadata", "status", "apiVersion", "kind"] {
                m.remove(k);
            }
            m
        };
        if strip(&new) != strip(old) {
            let g = old
                .pointer("/metadata/generation")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            new["metadata"]["generation"] = json!(g + 1);
        }
        new["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"].clone();
        if new == **old {
            // No-op writes change nothing and notify nobody.
            return Ok((Self::present(res, version, old), warnings));
        }
        if opts.dry_run {
            return Ok((new, warnings));
        }
        if is_deleting(&new) && finalizers(&new).is_empty() {
            let gone = self.commit(okey, new, EventType::Deleted);
            self.after_removal(res, &gone);
            self.collect_garbage();
            return Ok((Self::present(res, version, &gone), warnings));
        }
        let stored = self.commit(okey, new, EventType::Modified);
        if is_deleting(&stored) {
            self.collect_garbage();
        }
        Ok((Self::present(res, version, &stored), warnings))
    }

    /// Side effects of an object leaving the store.
    fn after_removal(&mut self, res: &Resource, obj: &Value) {
        if res.group == "apiextensions.k8s.io"
            && let Ok(r) = Resource::from_crd(obj)
        {
            self.resources.remove(&r.key());
        }
    }

    /// DELETE.
    pub fn delete(
        &mut self,
        key: &ResKey,
        version: &str,
        namespace: Option<&str>,
        name: &str,
        opts: &DeleteOptions,
    ) -> Result<Value, ApiError> {
        let res = self.res(key)?;
        let okey = Self::obj_key(&res, namespace, name);
        let old = self
            .objects
            .get(&okey)
            .cloned()
            .ok_or_else(|| ApiError::not_found(&res, name))?;
        if let Some(uid) = &opts.uid
            && meta_str(&old, "uid") != Some(uid.as_str())
        {
            return Err(ApiError::conflict(&res, name));
        }
        if let Some(rv) = &opts.resource_version
            && meta_str(&old, "resourceVersion") != Some(rv.as_str())
        {
            return Err(ApiError::conflict(&res, name));
        }
        if opts.dry_run {
            return Ok(Self::present(&res, version, &old));
        }
        let out = self.delete_object(&res, okey, &old, opts.propagation);
        self.collect_garbage();
        Ok(Self::present(&res, version, &out))
    }

    /// Marks or removes one object; returns its last state.
    fn delete_object(
        &mut self,
        res: &Resource,
        okey: ObjKey,
        old: &Arc<Value>,
        propagation: Propagation,
    ) -> Arc<Value> {
        if is_deleting(old) {
            return old.clone();
        }
        let mut obj = (**old).clone();
        let mut f = finalizers(&obj);
        match propagation {
            Propagation::Background => {}
            Propagation::Foreground => f.push(FINALIZER_FOREGROUND.into()),
            Propagation::Orphan => f.push(FINALIZER_ORPHAN.into()),
        }
        if res.group.is_empty() && res.plural == "namespaces" {
            obj["status"] = json!({"phase": "Terminating"});
        }
        let is_namespace = res.group.is_empty() && res.plural == "namespaces";
        if f.is_empty() && !is_namespace {
            let gone = self.commit(okey, obj, EventType::Deleted);
            self.after_removal(res, &gone);
            return gone;
        }
        set_finalizers(&mut obj, f);
        obj["metadata"]["deletionTimestamp"] = json!(now());
        obj["metadata"]["deletionGracePeriodSeconds"] = json!(0);
        self.commit(okey, obj, EventType::Modified)
    }

    /// DELETE of a collection; returns the affected objects.
    pub fn delete_collection(
        &mut self,
        key: &ResKey,
        version: &str,
        namespace: Option<&str>,
        labels: &LabelSelector,
        fields: &FieldSelector,
        opts: &DeleteOptions,
    ) -> Result<Vec<Value>, ApiError> {
        let res = self.res(key)?;
        let listed = self.list(key, version, namespace, labels, fields, None, None)?;
        let mut out = Vec::new();
        for item in listed.items {
            let name = meta_str(&item, "name").unwrap_or("").to_owned();
            let ns = meta_str(&item, "namespace").map(str::to_owned);
            let okey = Self::obj_key(&res, ns.as_deref(), &name);
            if let Some(old) = self.objects.get(&okey).cloned() {
                if opts.dry_run {
                    out.push(Self::present(&res, version, &old));
                } else {
                    let last = self.delete_object(&res, okey, &old, opts.propagation);
                    out.push(Self::present(&res, version, &last));
                }
            }
        }
        self.collect_garbage();
        Ok(out)
    }

    /// Removes one finalizer from a stored object (GC bookkeeping).
    fn drop_finalizer(&mut self, okey: ObjKey, finalizer: &str) {
        let Some(old) = self.objects.get(&okey).cloned() else {
            return;
        };
        let mut obj = (*old).clone();
        let f: Vec<String> = finalizers(&obj)
            .into_iter()
            .filter(|x| x != finalizer)
            .collect();
        set_finalizers(&mut obj, f.clone());
        if f.is_empty() && is_deleting(&obj) {
            let res = self.resources.get(&okey.res).cloned();
            let gone = self.commit(okey, obj, EventType::Deleted);
            if let Some(res) = res {
                self.after_removal(&res, &gone);
            }
        } else {
            self.commit(okey, obj, EventType::Modified);
        }
    }

    /// The garbage collector and namespace controller, run after deletions until
    /// nothing changes: background cascade to dependents whose owners are gone,
    /// foreground and orphan finalizers, terminating namespaces emptied and removed,
    /// deleted CRDs emptied and removed.
    pub fn collect_garbage(&mut self) {
        for _ in 0..64 {
            if !self.gc_pass() {
                return;
            }
        }
    }

    fn gc_pass(&mut self) -> bool {
        let live_uids: BTreeSet<String> = self
            .objects
            .values()
            .filter_map(|o| meta_str(o, "uid").map(str::to_owned))
            .collect();
        let foreground_owners: BTreeSet<String> = self
            .objects
            .values()
            .filter(|o| is_deleting(o) && finalizers(o).iter().any(|f| f == FINALIZER_FOREGROUND))
            .filter_map(|o| meta_str(o, "uid").map(str::to_owned))
            .collect();
        let orphaning: BTreeSet<String> = self
            .objects
            .values()
            .filter(|o| is_deleting(o) && finalizers(o).iter().any(|f| f == FINALIZER_ORPHAN))
            .filter_map(|o| meta_str(o, "uid").map(str::to_owned))
            .collect();
        let terminating_ns: BTreeSet<String> = self
            .objects
            .iter()
            .filter(|(k, o)| {
                k.res.group.is_empty() && k.res.plural == "namespaces" && is_deleting(o)
            })
            .map(|(k, _)| k.name.clone())
            .collect();
        let deleted_crds: Vec<(ObjKey, ResKey)> = self
            .objects
            .iter()
            .filter(|(k, o)| k.res.group == "apiextensions.k8s.io" && is_deleting(o))
            .filter_map(|(k, o)| Resource::from_crd(o).ok().map(|r| (k.clone(), r.key())))
            .collect();

        let mut to_delete: Vec<ObjKey> = Vec::new();
        let mut to_unown: Vec<(ObjKey, BTreeSet<String>)> = Vec::new();
        let mut has_dependents: BTreeSet<String> = BTreeSet::new();
        for (k, o) in &self.objects {
            let owners = owner_uids(o);
            for uid in &owners {
                has_dependents.insert(uid.clone());
            }
            let orphaned_by: BTreeSet<String> = owners
                .iter()
                .filter(|u| orphaning.contains(*u))
                .cloned()
                .collect();
            if !orphaned_by.is_empty() {
                to_unown.push((k.clone(), orphaned_by));
                continue;
            }
            if is_deleting(o) {
                continue;
            }
            let owners_gone = !owners.is_empty() && owners.iter().all(|u| !live_uids.contains(u));
            let owner_in_foreground = owners.iter().any(|u| foreground_owners.contains(u));
            let in_terminating_ns =
                !k.namespace.is_empty() && terminating_ns.contains(&k.namespace);
            let of_deleted_crd = deleted_crds.iter().any(|(_, r)| *r == k.res);
            if owners_gone || owner_in_foreground || in_terminating_ns || of_deleted_crd {
                to_delete.push(k.clone());
            }
        }
        let mut changed = false;
        for (k, uids) in to_unown {
            if let Some(old) = self.objects.get(&k).cloned() {
                let mut obj = (*old).clone();
                if let Some(refs) = obj
                    .pointer_mut("/metadata/ownerReferences")
                    .and_then(Value::as_array_mut)
                {
                    refs.retain(|r| {
                        !r.get("uid")
                            .and_then(Value::as_str)
                            .is_some_and(|u| uids.contains(u))
                    });
                }
                self.commit(k, obj, EventType::Modified);
                changed = true;
            }
        }
        for k in to_delete {
            if let (Some(old), Some(res)) = (
                self.objects.get(&k).cloned(),
                self.resources.get(&k.res).cloned(),
            ) {
                self.delete_object(&res, k, &old, Propagation::Background);
                changed = true;
            }
        }
        // Owners whose foreground/orphan work is done lose those finalizers.
        let done: Vec<(ObjKey, &'static str)> = self
            .objects
            .iter()
            .filter(|(_, o)| is_deleting(o))
            .flat_map(|(k, o)| {
                let uid = meta_str(o, "uid").unwrap_or("").to_owned();
                let f = finalizers(o);
                let mut out = Vec::new();
                if f.iter().any(|x| x == FINALIZER_FOREGROUND) && !has_dependents.contains(&uid) {
                    out.push((k.clone(), FINALIZER_FOREGROUND));
                }
                if f.iter().any(|x| x == FINALIZER_ORPHAN) {
                    out.push((k.clone(), FINALIZER_ORPHAN));
                }
                out
            })
            .collect();
        for (k, f) in done {
            if f == FINALIZER_ORPHAN
                || !self.objects.values().any(|o| {
                    owner_uids(o).iter().any(|u| {
                        Some(u.as_str()) == self.objects.get(&k).and_then(|x| meta_str(x, "uid"))
                    })
                })
            {
                self.drop_finalizer(k, f);
                changed = true;
            }
        }
        // Empty terminating namespaces go away.
        for ns in terminating_ns {
            if !self.objects.keys().any(|k| k.namespace == ns) {
                let k = ObjKey {
                    res: ResKey {
                        group: String::new(),
                        plural: "namespaces".into(),
                    },
                    namespace: String::new(),
                    name: ns,
                };
                if let Some(old) = self.objects.get(&k).cloned() {
                    let mut obj = (*old).clone();
                    obj["spec"] = json!({"finalizers": []});
                    if finalizers(&obj).is_empty() {
                        self.commit(k, obj, EventType::Deleted);
                        changed = true;
                    }
                }
            }
        }
        // Deleted CRDs whose objects are all gone lose their cleanup finalizer.
        for (k, r) in deleted_crds {
            if !self.objects.keys().any(|o| o.res == r) && self.objects.contains_key(&k) {
                self.drop_finalizer(k, FINALIZER_CRD);
                changed = true;
            }
        }
        changed
    }

    /// Starts a watch: the replay and a live receiver, taken atomically.
    ///
    /// `resource_version`: `None` or `"0"` replays the current objects as ADDED (the
    /// Kubernetes "start at most recent / any" semantics); a number replays history
    /// after it, or fails with 410 Gone when the history no longer reaches back.
    pub fn watch(
        &self,
        key: &ResKey,
        namespace: Option<&str>,
        resource_version: Option<&str>,
    ) -> Result<WatchStart, ApiError> {
        let res = self.res(key)?;
        let live = self.events.subscribe();
        let replay = match resource_version {
            None | Some("") | Some("0") => self
                .objects
                .iter()
                .filter(|(k, _)| k.res == res.storage_key())
                .filter(|(k, _)| namespace.is_none_or(|ns| !res.namespaced || k.namespace == ns))
                .map(|(k, o)| {
                    Arc::new(Event {
                        rv: meta_str(o, "resourceVersion")
                            .and_then(|r| r.parse().ok())
                            .unwrap_or(0),
                        res: k.res.clone(),
                        namespace: k.namespace.clone(),
                        etype: EventType::Added,
                        object: o.clone(),
                        prev: None,
                        at: std::time::Instant::now(),
                        encoded: std::sync::OnceLock::new(),
                    })
                })
                .collect(),
            Some(rv) => {
                let rv: u64 = rv.parse().map_err(|_| {
                    ApiError::bad_request(format!("invalid resourceVersion {rv:?}"))
                })?;
                if rv < self.compacted_rv {
                    return Err(ApiError::gone(format!(
                        "too old resource version: {rv} ({})",
                        self.compacted_rv + 1
                    )));
                }
                self.history
                    .iter()
                    .filter(|e| e.rv > rv && e.res == res.storage_key())
                    .filter(|e| namespace.is_none_or(|ns| !res.namespaced || e.namespace == ns))
                    .cloned()
                    .collect()
            }
        };
        Ok(WatchStart {
            replay,
            live,
            resource_version: self.rv,
        })
    }
}

fn crd_status(r: &Resource) -> Value {
    let t = now();
    json!({
        "acceptedNames": r.accepted_names(),
        "conditions": [
            {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts",
             "message": "no conflicts found", "lastTransitionTime": t},
            {"type": "Established", "status": "True", "reason": "InitialNamesAccepted",
             "message": "the initial names have been accepted", "lastTransitionTime": t}
        ],
        "storedVersions": [r.versions.first().cloned().unwrap_or_default()],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cm() -> ResKey {
        ResKey {
            group: String::new(),
            plural: "configmaps".into(),
        }
    }

    fn body(name: &str) -> Value {
        json!({"metadata": {"name": name}, "data": {"k": "v"}})
    }

    #[test]
    fn create_get_conflict_and_generate_name() {
        let mut s = Store::new(100);
        let (o, _) = s
            .create(
                &cm(),
                "v1",
                Some("default"),
                body("a"),
                &WriteOptions::default(),
            )
            .unwrap();
        assert_eq!(o["metadata"]["generation"], 1);
        assert!(o["metadata"]["uid"].as_str().is_some_and(|u| u.len() == 36));
        let e = s
            .create(
                &cm(),
                "v1",
                Some("default"),
                body("a"),
                &WriteOptions::default(),
            )
            .unwrap_err();
        assert_eq!((e.code, e.reason), (409, "AlreadyExists"));
        let (g, _) = s
            .create(
                &cm(),
                "v1",
                Some("default"),
                json!({"metadata": {"generateName": "x-"}}),
                &WriteOptions::default(),
            )
            .unwrap();
        assert!(g["metadata"]["name"].as_str().unwrap().starts_with("x-"));
        let e = s
            .create(
                &cm(),
                "v1",
                Some("nope"),
                body("a"),
                &WriteOptions::default(),
            )
            .unwrap_err();
        assert_eq!(e.code, 404);
    }

    #[test]
    fn stale_update_conflicts_and_noop_does_not_bump() {
        let mut s = Store::new(100);
        let (o, _) = s
            .create(
                &cm(),
                "v1",
                Some("default"),
                body("a"),
                &WriteOptions::default(),
            )
            .unwrap();
        let mut newer = o.clone();
        newer["data"]["k"] = json!("w");
        let (u, _) = s
            .update(
                &cm(),
                "v1",
                Some("default"),
                "a",
                newer,
                Subresource::Main,
                &WriteOptions::default(),
            )
            .unwrap();
        assert_eq!(u["metadata"]["generation"], 2);
        let e = s
            .update(
                &cm(),
                "v1",
                Some("default"),
                "a",
                o,
                Subresource::Main,
                &WriteOptions::default(),
            )
            .unwrap_err();
        assert_eq!(e.code, 409);
        let rv = s.resource_version();
        s.update(
            &cm(),
            "v1",
            Some("default"),
            "a",
            u.clone(),
            Subresource::Main,
            &WriteOptions::default(),
        )
        .unwrap();
        assert_eq!(s.resource_version(), rv, "a no-op update must not bump");
    }

    #[test]
    fn finalizers_hold_deletion_and_owner_gc_cascades() {
        let mut s = Store::new(100);
        let (owner, _) = s
            .create(
                &cm(),
                "v1",
                Some("default"),
                body("owner"),
                &WriteOptions::default(),
            )
            .unwrap();
        let mut dep = body("dep");
        dep["metadata"]["ownerReferences"] = json!([{"apiVersion": "v1", "kind": "ConfigMap",
            "name": "owner", "uid": owner["metadata"]["uid"]}]);
        dep["metadata"]["finalizers"] = json!(["test/hold"]);
        s.create(&cm(), "v1", Some("default"), dep, &WriteOptions::default())
            .unwrap();
        s.delete(
            &cm(),
            "v1",
            Some("default"),
            "owner",
            &DeleteOptions::default(),
        )
        .unwrap();
        // The dependent is being deleted but held by its finalizer.
        let d = s.get(&cm(), "v1", Some("default"), "dep").unwrap();
        assert!(is_deleting(&d));
        let patch = json!([{"op": "test", "path": "/metadata/finalizers/0", "value": "test/hold"},
                           {"op": "remove", "path": "/metadata/finalizers/0"}]);
        s.patch(
            &cm(),
            "v1",
            Some("default"),
            "dep",
            PatchType::Json,
            patch,
            Subresource::Main,
            &WriteOptions::default(),
        )
        .unwrap();
        assert_eq!(
            s.get(&cm(), "v1", Some("default"), "dep").unwrap_err().code,
            404
        );
    }

    #[test]
    fn watch_history_expires() {
        let mut s = Store::new(16);
        for i in 0..40 {
            s.create(
                &cm(),
                "v1",
                Some("default"),
                body(&format!("c{i}")),
                &WriteOptions::default(),
            )
            .unwrap();
        }
        assert_eq!(
            s.watch(&cm(), None, Some("1")).err().map(|e| e.code),
            Some(410)
        );
        let recent = s.resource_version() - 3;
        let w = s.watch(&cm(), None, Some(&recent.to_string())).unwrap();
        assert_eq!(w.replay.len(), 3);
    }
}

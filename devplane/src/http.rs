//! The HTTP side of devplane: routing, discovery, OpenAPI v3, content negotiation
//! (JSON and `as=Table`), watch streaming with bookmarks and timeouts, and the
//! server's lifecycle. Does network I/O on loopback.
//!
//! The server runs on its own thread with its own tokio runtime, so a test that
//! blocks its own thread (running kubectl, say) cannot starve it.

use parking_lot::{Mutex, MutexGuard};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, StreamBody, combinators::UnsyncBoxBody};
use hyper::body::{Frame, Incoming};
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::{broadcast, mpsc, oneshot};

use crate::resources::{ResKey, Resource};
use crate::selector::{FieldSelector, LabelSelector};
use crate::store::{
    ApiError, DeleteOptions, Event, EventType, FieldValidation, PatchType, Propagation, Store,
    Subresource, WriteOptions,
};
use crate::table;

/// Server settings.
#[derive(Debug, Clone)]
pub struct Config {
    /// Where to listen (loopback; port 0 picks a free one).
    pub listen: SocketAddr,
    /// How many events the watch history keeps; older resourceVersions get 410 Gone.
    pub history_limit: usize,
    /// How often an idle watch that allows bookmarks gets one.
    pub bookmark_interval: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            history_limit: 100_000,
            bookmark_interval: Duration::from_secs(10),
        }
    }
}

type Body = UnsyncBoxBody<Bytes, Infallible>;

struct Shared {
    store: Mutex<Store>,
    config: Config,
    addr: SocketAddr,
    /// Every (verb, group, resource) asked for, as RBAC would name it.
    audit: Arc<Mutex<BTreeSet<AuditEntry>>>,
    /// Test faults: answers held back or refused on purpose, and request counts.
    delays: Faults,
}

/// A test's faults: how long a LIST of a resource (by plural) waits before it is
/// answered, how long each of its watch events is held back, which requests are
/// refused, and how many of each arrived.
#[derive(Default)]
struct FaultTable {
    lists: BTreeMap<String, Duration>,
    watch_events: BTreeMap<String, Duration>,
    /// (verb, resource) → the status code every such request is answered with.
    refusals: BTreeMap<(String, String), u16>,
    /// (verb, resource) → how many such requests arrived.
    counts: BTreeMap<(String, String), u64>,
    /// resource → how many objects its lists returned (every page).
    listed: BTreeMap<String, u64>,
    /// resource → the signal its open watches end on (see [`DevPlane::break_watches`]).
    breaks: BTreeMap<String, tokio::sync::watch::Sender<Option<WatchBreak>>>,
}

/// How [`DevPlane::break_watches`] ends the open watches of a resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchBreak {
    /// The connection closes, as when an API server restarts or a load balancer
    /// drops it: the client watches again from the last resourceVersion it saw.
    Closed,
    /// The stream ends with an ERROR event, 410 Gone (`Expired`), as when etcd
    /// compacted the version the watch stood at: the client must list again.
    Gone,
}

impl FaultTable {
    /// The signal the watches of `resource` end on (made on first use).
    fn breaker(&mut self, resource: &str) -> &tokio::sync::watch::Sender<Option<WatchBreak>> {
        self.breaks
            .entry(resource.to_owned())
            .or_insert_with(|| tokio::sync::watch::channel(None).0)
    }
}

type Faults = Arc<Mutex<FaultTable>>;

impl Shared {
    fn delay(
        &self,
        table: impl Fn(&FaultTable) -> &BTreeMap<String, Duration>,
        resource: &str,
    ) -> Option<Duration> {
        table(&self.delays.lock()).get(resource).copied()
    }
}

/// One kind of request, as an RBAC rule names it: `verb` (`get`, `list`, `watch`,
/// `create`, `update`, `patch`, `delete`, `deletecollection`), API group and resource
/// (`switchports`, `switchports/status`), and which client asked (its User-Agent up
/// to the first `/`: `kubectl`, `kube-rs`, …).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AuditEntry {
    /// The client.
    pub client: String,
    /// The RBAC verb.
    pub verb: String,
    /// The API group ("" for core).
    pub group: String,
    /// The resource, with `/subresource` when one is addressed.
    pub resource: String,
}

impl Shared {
    fn store(&self) -> MutexGuard<'_, Store> {
        self.store.lock()
    }
}

/// A running devplane. Dropping it stops the server.
pub struct DevPlane {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
    audit: Arc<Mutex<BTreeSet<AuditEntry>>>,
    delays: Faults,
}

impl DevPlane {
    /// Starts a server on its own thread and returns once it is listening.
    pub fn start(config: Config) -> std::io::Result<Self> {
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let audit: Arc<Mutex<BTreeSet<AuditEntry>>> = Arc::default();
        let audit_log = audit.clone();
        let delays = Faults::default();
        let shared_delays = delays.clone();
        let thread = std::thread::Builder::new()
            .name("devplane".into())
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                rt.block_on(async move {
                    let listener = match TcpListener::bind(config.listen).await {
                        Ok(l) => l,
                        Err(e) => {
                            let _ = ready_tx.send(Err(e));
                            return;
                        }
                    };
                    let addr = match listener.local_addr() {
                        Ok(a) => a,
                        Err(e) => {
                            let _ = ready_tx.send(Err(e));
                            return;
                        }
                    };
                    let shared = Arc::new(Shared {
                        store: Mutex::new(Store::new(config.history_limit)),
                        config,
                        addr,
                        audit: audit_log,
                        delays: shared_delays,
                    });
                    let _ = ready_tx.send(Ok(addr));
                    serve(listener, shared, stop_rx).await;
                });
                rt.shutdown_timeout(Duration::from_millis(200));
            })?;
        let addr = ready_rx
            .recv()
            .map_err(|_| std::io::Error::other("devplane thread ended before listening"))??;
        Ok(Self {
            addr,
            stop: Some(stop_tx),
            thread: Some(thread),
            audit,
            delays,
        })
    }

    /// From now on a LIST of `resource` (its plural: `switches`) is answered only
    /// after `delay` (zero: at once again), as a loaded API server answers some: the
    /// cache a client fills from it lists late. Watches and GETs are not delayed.
    pub fn delay_lists(&self, resource: &str, delay: Duration) {
        self.set_delay(|t| &mut t.lists, resource, delay);
    }

    /// From now on each watch event of `resource` reaches its watchers `delay` after
    /// it happened (zero: at once again), in order: the caches that follow it lag as
    /// a loaded API server makes them lag. The writes themselves are not delayed.
    pub fn delay_watch_events(&self, resource: &str, delay: Duration) {
        self.set_delay(|t| &mut t.watch_events, resource, delay);
    }

    fn set_delay(
        &self,
        table: impl Fn(&mut FaultTable) -> &mut BTreeMap<String, Duration>,
        resource: &str,
        delay: Duration,
    ) {
        let mut delays = self.delays.lock();
        let table = table(&mut delays);
        if delay.is_zero() {
            table.remove(resource);
        } else {
            table.insert(resource.to_owned(), delay);
        }
    }

    /// From now on every `verb` request (`get`, `list`, `patch`, …) on `resource`
    /// (`switchports`, `switchports/status`) is refused with `code` (403 as RBAC, 422
    /// as an admission plugin, 429 or 5xx as an overloaded server; see
    /// [`ApiError::refused`]) and changes nothing; `None` lifts the refusal.
    pub fn refuse(&self, verb: &str, resource: &str, code: Option<u16>) {
        let mut t = self.delays.lock();
        let key = (verb.to_owned(), resource.to_owned());
        match code {
            Some(c) => t.refusals.insert(key, c),
            None => t.refusals.remove(&key),
        };
    }

    /// Ends every watch of `resource` (its plural: `switchports`) open now, `how` a
    /// real API server's watches end; watches started afterwards are not affected.
    pub fn break_watches(&self, resource: &str, how: WatchBreak) {
        self.delays.lock().breaker(resource).send_replace(Some(how));
    }

    /// How many objects the lists of `resource` returned so far, every page counted.
    pub fn objects_listed(&self, resource: &str) -> u64 {
        self.delays
            .lock()
            .listed
            .get(resource)
            .copied()
            .unwrap_or(0)
    }

    /// How many `verb` requests on `resource` arrived so far (answered or refused).
    pub fn request_count(&self, verb: &str, resource: &str) -> u64 {
        let t = self.delays.lock();
        t.counts
            .get(&(verb.to_owned(), resource.to_owned()))
            .copied()
            .unwrap_or(0)
    }

    /// How many requests of each (verb, resource) arrived so far: what a benchmark
    /// divides by the objects it drove.
    pub fn request_counts(&self) -> BTreeMap<(String, String), u64> {
        self.delays.lock().counts.clone()
    }

    /// Every kind of request served so far (verb, group, resource), as an RBAC rule
    /// names it: tests check a role covers what a client actually asked.
    pub fn requests(&self) -> BTreeSet<AuditEntry> {
        self.audit.lock().clone()
    }

    /// Forgets the requests recorded so far (a test's own set-up).
    pub fn clear_requests(&self) {
        self.audit.lock().clear();
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A kubeconfig for this server (plain HTTP, no credentials), accepted by kube-rs
    /// and kubectl.
    pub fn kubeconfig_yaml(&self) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: devplane\n  cluster:\n    server: {}\n\
             users:\n- name: devplane\n  user: {{}}\ncontexts:\n- name: devplane\n  context:\n    \
             cluster: devplane\n    user: devplane\n    namespace: default\ncurrent-context: devplane\n",
            self.url()
        )
    }

    /// Writes [`Self::kubeconfig_yaml`] to `path`.
    pub fn write_kubeconfig(&self, path: &Path) -> std::io::Result<()> {
        std::fs::write(path, self.kubeconfig_yaml())
    }

    /// Stops the server and waits for its thread.
    pub fn shutdown(mut self) {
        self.stop_now();
    }

    fn stop_now(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for DevPlane {
    fn drop(&mut self) {
        self.stop_now();
    }
}

async fn serve(listener: TcpListener, shared: Arc<Shared>, mut stop: oneshot::Receiver<()>) {
    loop {
        tokio::select! {
            _ = &mut stop => return,
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                let _ = stream.set_nodelay(true);
                let shared = shared.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |req| {
                        let shared = shared.clone();
                        async move { Ok::<_, Infallible>(handle(shared, req).await) }
                    });
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        }
    }
}

fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into()).boxed_unsync()
}

fn json_response(code: u16, value: &Value, warnings: &[String]) -> Response<Body> {
    let mut resp = Response::new(full(serde_json::to_vec(value).unwrap_or_default()));
    *resp.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::OK);
    resp.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    for w in warnings {
        let text = format!("299 - {:?}", w);
        if let Ok(v) = HeaderValue::from_str(&text) {
            resp.headers_mut().append("warning", v);
        }
    }
    resp
}

fn error_response(e: &ApiError) -> Response<Body> {
    json_response(e.code, &e.to_status(), &[])
}

/// What the request addresses.
enum Route {
    Version,
    Healthz,
    CoreVersions,
    CoreResources,
    Groups,
    Group(String),
    GroupResources(String, String),
    OpenApiRoot,
    OpenApiDoc(String),
    Object(ObjectRoute),
}

struct ObjectRoute {
    group: String,
    version: String,
    plural: String,
    namespace: Option<String>,
    name: Option<String>,
    sub: Option<String>,
}

fn route(path: &str, store: &Store) -> Option<Route> {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let object = |group: &str, version: &str, rest: &[&str]| -> Option<Route> {
        let namespaced = rest.len() >= 3
            && rest[0] == "namespaces"
            && store
                .resource(group, version, rest[2])
                .is_some_and(|r| r.namespaced);
        let (namespace, rest) = if namespaced {
            (Some(rest[1].to_owned()), &rest[2..])
        } else {
            (None, rest)
        };
        if rest.is_empty() || rest.len() > 3 {
            return None;
        }
        Some(Route::Object(ObjectRoute {
            group: group.into(),
            version: version.into(),
            plural: rest[0].into(),
            namespace,
            name: rest.get(1).map(|s| s.to_string()),
            sub: rest.get(2).map(|s| s.to_string()),
        }))
    };
    match segs.as_slice() {
        ["version"] => Some(Route::Version),
        ["healthz"] | ["readyz"] | ["livez"] => Some(Route::Healthz),
        ["api"] => Some(Route::CoreVersions),
        ["api", "v1"] => Some(Route::CoreResources),
        ["api", "v1", rest @ ..] => object("", "v1", rest),
        ["apis"] => Some(Route::Groups),
        ["apis", g] => Some(Route::Group(g.to_string())),
        ["apis", g, v] => Some(Route::GroupResources(g.to_string(), v.to_string())),
        ["apis", g, v, rest @ ..] => object(g, v, rest),
        ["openapi", "v3"] => Some(Route::OpenApiRoot),
        ["openapi", "v3", rest @ ..] => Some(Route::OpenApiDoc(rest.join("/"))),
        _ => None,
    }
}

fn query(req: &Request<Incoming>) -> HashMap<String, String> {
    req.uri()
        .query()
        .map(|q| form_urlencoded::parse(q.as_bytes()).into_owned().collect())
        .unwrap_or_default()
}

async fn read_body(req: Request<Incoming>) -> Result<(Bytes, String), ApiError> {
    let content_type = req
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json")
        .to_owned();
    let bytes = req
        .into_body()
        .collect()
        .await
        .map_err(|e| ApiError::bad_request(format!("reading the body: {e}")))?
        .to_bytes();
    Ok((bytes, content_type))
}

fn parse_body(bytes: &[u8], yaml: bool) -> Result<Value, ApiError> {
    if bytes.is_empty() {
        return Ok(json!({}));
    }
    if yaml {
        serde_saphyr::from_slice_with_options(
            bytes,
            // YAML 1.2 booleans and a one-line error, as patchbay's own reader.
            serde_saphyr::options! { strict_booleans: true, with_snippet: false },
        )
        .map_err(|e| ApiError::bad_request(format!("invalid YAML body: {e}")))
    } else {
        serde_json::from_slice(bytes)
            .map_err(|e| ApiError::bad_request(format!("invalid JSON body: {e}")))
    }
}

async fn handle(shared: Arc<Shared>, req: Request<Incoming>) -> Response<Body> {
    let path = req.uri().path().to_owned();
    let method = req.method().clone();
    if path == "/openapi/v2" {
        // Older kubectl (Debian's 1.20) validates client-side from OpenAPI v2 in
        // protobuf. An empty document is a valid one: kinds it does not describe are
        // not validated client-side, and the server validates them anyway.
        let mut resp = Response::new(full(Bytes::new()));
        resp.headers_mut().insert(
            CONTENT_TYPE,
            HeaderValue::from_static("application/com.github.proto-openapi.spec.v2@v1.0+protobuf"),
        );
        return resp;
    }
    // Parse the route once; discovery documents are built only for discovery paths.
    let routed = route(&path, &shared.store());
    let response = match routed {
        None => Err(ApiError::no_route(&path)),
        Some(Route::Object(o)) => object_request(&shared, req, o).await,
        Some(r) if method == Method::GET => discovery(&shared, &shared.store(), r)
            .map(|doc| json_response(200, &doc, &[]))
            .ok_or_else(|| ApiError::no_route(&path)),
        Some(_) => Err(ApiError::no_route(&path)),
    };
    let response = response.unwrap_or_else(|e| error_response(&e));
    tracing::debug!(%method, %path, status = response.status().as_u16(), "devplane request");
    response
}

/// Discovery and OpenAPI documents; `None` for object routes.
fn discovery(shared: &Shared, store: &Store, route: Route) -> Option<Value> {
    let resources: Vec<&Resource> = store.resources().collect();
    let group_versions = |group: &str| -> Vec<String> {
        let mut vs: Vec<String> = resources
            .iter()
            .filter(|r| r.group == group)
            .flat_map(|r| r.versions.clone())
            .collect();
        vs.dedup();
        vs
    };
    let api_group = |g: &str| {
        let vs = group_versions(g);
        json!({
            "name": g,
            "versions": vs.iter().map(|v| json!({"groupVersion": format!("{g}/{v}"), "version": v})).collect::<Vec<_>>(),
            "preferredVersion": {"groupVersion": format!("{g}/{}", vs.first().cloned().unwrap_or_default()),
                                 "version": vs.first().cloned().unwrap_or_default()},
        })
    };
    let resource_list = |group: &str, version: &str| -> Option<Value> {
        let rs: Vec<&&Resource> = resources
            .iter()
            .filter(|r| r.group == group && r.serves(version))
            .collect();
        if rs.is_empty() {
            return None;
        }
        let mut entries = Vec::new();
        for r in rs {
            entries.push(json!({
                "name": r.plural,
                "singularName": r.singular,
                "namespaced": r.namespaced,
                "kind": r.kind,
                "verbs": ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"],
                "shortNames": r.short_names,
                "categories": r.categories,
            }));
            if r.status_subresource {
                entries.push(json!({
                    "name": format!("{}/status", r.plural),
                    "singularName": "",
                    "namespaced": r.namespaced,
                    "kind": r.kind,
                    "verbs": ["get", "patch", "update"],
                }));
            }
        }
        let gv = if group.is_empty() {
            version.to_owned()
        } else {
            format!("{group}/{version}")
        };
        Some(
            json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": entries}),
        )
    };
    match route {
        Route::Version => Some(json!({
            "major": "1", "minor": "32", "gitVersion": "v1.32.0-devplane", "gitCommit": "devplane",
            "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z", "goVersion": "devplane",
            "compiler": "rustc", "platform": "linux/amd64"
        })),
        Route::Healthz => Some(json!("ok")),
        Route::CoreVersions => Some(json!({
            "kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": shared.addr.to_string()}]
        })),
        Route::CoreResources => resource_list("", "v1"),
        Route::Groups => {
            let mut groups: Vec<String> = resources
                .iter()
                .filter(|r| !r.group.is_empty())
                .map(|r| r.group.clone())
                .collect();
            groups.sort();
            groups.dedup();
            Some(json!({"kind": "APIGroupList", "apiVersion": "v1",
                        "groups": groups.iter().map(|g| api_group(g)).collect::<Vec<_>>()}))
        }
        Route::Group(g) => (!group_versions(&g).is_empty()).then(|| {
            let mut v = api_group(&g);
            v["kind"] = json!("APIGroup");
            v["apiVersion"] = json!("v1");
            v
        }),
        Route::GroupResources(g, v) => resource_list(&g, &v),
        Route::OpenApiRoot => {
            let mut paths = serde_json::Map::new();
            let hash = store.resource_version();
            for r in &resources {
                for v in &r.versions {
                    let key = if r.group.is_empty() {
                        format!("api/{v}")
                    } else {
                        format!("apis/{}/{v}", r.group)
                    };
                    paths.insert(
                        key.clone(),
                        json!({"serverRelativeURL": format!("/openapi/v3/{key}?hash={hash}")}),
                    );
                }
            }
            Some(json!({"paths": paths}))
        }
        Route::OpenApiDoc(gv) => openapi_doc(&resources, &gv),
        Route::Object(_) => None,
    }
}

/// An OpenAPI v3 document for one group-version: a schema per kind (tagged with
/// `x-kubernetes-group-version-kind`, which `kubectl explain` looks up) and a PATCH
/// operation per resource that advertises `fieldValidation`, so kubectl uses
/// server-side field validation.
fn openapi_doc(resources: &[&Resource], gv: &str) -> Option<Value> {
    let (group, version) = match gv.split('/').collect::<Vec<_>>().as_slice() {
        ["api", v] => (String::new(), v.to_string()),
        ["apis", g, v] => (g.to_string(), v.to_string()),
        _ => return None,
    };
    let mut schemas = serde_json::Map::new();
    let mut paths = serde_json::Map::new();
    let mut found = false;
    for r in resources
        .iter()
        .filter(|r| r.group == group && r.serves(&version))
    {
        found = true;
        let gvk = json!({"group": r.group, "version": version, "kind": r.kind});
        let reverse: Vec<&str> = r.group.split('.').rev().collect();
        let schema_name = if r.group.is_empty() {
            format!("io.k8s.api.core.{version}.{}", r.kind)
        } else {
            format!("{}.{version}.{}", reverse.join("."), r.kind)
        };
        let mut schema = r.schemas.get(&version).cloned().unwrap_or_else(|| {
            json!({"type": "object", "description": format!("{} (built into devplane)", r.kind),
                   "x-kubernetes-preserve-unknown-fields": true})
        });
        schema["x-kubernetes-group-version-kind"] = json!([gvk]);
        schemas.insert(schema_name, schema);
        let base = if r.group.is_empty() {
            format!("/api/{version}")
        } else {
            format!("/apis/{}/{version}", r.group)
        };
        let item = if r.namespaced {
            format!("{base}/namespaces/{{namespace}}/{}/{{name}}", r.plural)
        } else {
            format!("{base}/{}/{{name}}", r.plural)
        };
        let params: Vec<Value> = ["fieldValidation", "fieldManager", "dryRun", "force"]
            .iter()
            .map(|p| json!({"name": p, "in": "query", "schema": {"type": "string"}, "uniqueItems": true}))
            .collect();
        paths.insert(
            item,
            json!({"patch": {
                "operationId": format!("patch{}", r.kind),
                "x-kubernetes-group-version-kind": gvk,
                "x-kubernetes-action": "patch",
                "parameters": params,
                "responses": {"200": {"description": "OK"}},
            }}),
        );
    }
    found.then(|| {
        json!({
            "openapi": "3.0.0",
            "info": {"title": "Kubernetes (devplane)", "version": "v1.32.0"},
            "paths": paths,
            "components": {"schemas": schemas},
        })
    })
}

fn accept_table(req: &Request<Incoming>) -> bool {
    req.headers()
        .get_all("accept")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains("as=Table"))
}

fn write_options(q: &HashMap<String, String>) -> WriteOptions {
    WriteOptions {
        dry_run: q.get("dryRun").is_some_and(|v| v == "All"),
        field_validation: match q.get("fieldValidation").map(String::as_str) {
            Some("Strict") => FieldValidation::Strict,
            Some("Ignore") => FieldValidation::Ignore,
            _ => FieldValidation::Warn,
        },
    }
}

fn selectors(
    q: &HashMap<String, String>,
    res: &Resource,
    version: &str,
) -> Result<(LabelSelector, FieldSelector), ApiError> {
    let labels = LabelSelector::parse(q.get("labelSelector").map(String::as_str).unwrap_or(""))
        .map_err(ApiError::bad_request)?;
    let fields = FieldSelector::parse_for(
        q.get("fieldSelector").map(String::as_str).unwrap_or(""),
        &res.group,
        &res.plural,
        res.selectable_fields
            .get(version)
            .map(Vec::as_slice)
            .unwrap_or_default(),
    )
    .map_err(ApiError::bad_request)?;
    Ok((labels, fields))
}

async fn object_request(
    shared: &Arc<Shared>,
    req: Request<Incoming>,
    o: ObjectRoute,
) -> Result<Response<Body>, ApiError> {
    let q = query(&req);
    let method = req.method().clone();
    let res = {
        let store = shared.store();
        store
            .resource(&o.group, &o.version, &o.plural)
            .ok_or_else(|| ApiError::no_route(req.uri().path()))?
    };
    if res.namespaced && o.namespace.is_none() && o.name.is_some() {
        return Err(ApiError::no_route(req.uri().path()));
    }
    let key = res.key();
    let ns = o.namespace.as_deref();
    let sub = match o.sub.as_deref() {
        None => Subresource::Main,
        Some("status") if res.status_subresource => Subresource::Status,
        Some("finalize") if res.group.is_empty() && res.plural == "namespaces" => Subresource::Main,
        Some(other) => return Err(ApiError::no_route(&format!("{}/{other}", res.plural))),
    };
    let table = accept_table(&req);
    let include_object = q
        .get("includeObject")
        .cloned()
        .unwrap_or_else(|| "Metadata".into());
    let watching = q.get("watch").is_some_and(|v| v == "true" || v == "1");
    let verb = match (&method, o.name.is_some()) {
        (&Method::GET, _) if watching => "watch",
        (&Method::GET, true) => "get",
        (&Method::GET, false) => "list",
        (&Method::POST, _) => "create",
        (&Method::PUT, _) => "update",
        (&Method::PATCH, _) => "patch",
        (&Method::DELETE, true) => "delete",
        (&Method::DELETE, false) => "deletecollection",
        _ => "other",
    };
    let audited = match &o.sub {
        Some(sub) => format!("{}/{sub}", res.plural),
        None => res.plural.clone(),
    };
    let refusal = {
        let mut t = shared.delays.lock();
        let key = (verb.to_owned(), audited.clone());
        *t.counts.entry(key.clone()).or_default() += 1;
        t.refusals.get(&key).copied()
    };
    shared.audit.lock().insert(AuditEntry {
        client: req
            .headers()
            .get(hyper::header::USER_AGENT)
            .and_then(|v| v.to_str().ok())
            .and_then(|ua| ua.split('/').next())
            .unwrap_or_default()
            .to_owned(),
        verb: verb.into(),
        group: res.group.clone(),
        resource: audited.clone(),
    });
    if let Some(code) = refusal {
        return Err(ApiError::refused(code, verb, &audited));
    }
    match (method, o.name) {
        (Method::GET, Some(name)) if !watching => {
            let obj = shared.store().get(&key, &o.version, ns, &name)?;
            if table {
                let t = table::table(&res, &o.version, &[&obj], &include_object, true, json!({}));
                return Ok(json_response(200, &t, &[]));
            }
            Ok(json_response(200, &obj, &[]))
        }
        (Method::GET, name) if watching => {
            let mut q = q;
            if let Some(name) = name {
                q.insert("fieldSelector".into(), format!("metadata.name={name}"));
            }
            watch(shared, &res, &o.version, ns, &q, table, &include_object)
        }
        (Method::GET, None) => {
            if let Some(delay) = shared.delay(|t| &t.lists, &res.plural) {
                tokio::time::sleep(delay).await;
            }
            let (labels, fields) = selectors(&q, &res, &o.version)?;
            let limit = q
                .get("limit")
                .and_then(|l| l.parse::<usize>().ok())
                .filter(|l| *l > 0);
            let list = shared.store().list(
                &key,
                &o.version,
                ns,
                &labels,
                &fields,
                limit,
                q.get("continue")
                    .map(String::as_str)
                    .filter(|c| !c.is_empty()),
            )?;
            *shared
                .delays
                .lock()
                .listed
                .entry(res.plural.clone())
                .or_default() += list.items.len() as u64;
            let mut meta = json!({"resourceVersion": list.resource_version.to_string()});
            if let Some(c) = &list.continue_token {
                meta["continue"] = json!(c);
            }
            if table {
                let refs: Vec<&Value> = list.items.iter().map(|a| a.as_ref()).collect();
                let t = table::table(&res, &o.version, &refs, &include_object, true, meta);
                return Ok(json_response(200, &t, &[]));
            }
            let body = json!({
                "apiVersion": res.api_version(&o.version),
                "kind": res.list_kind,
                "metadata": meta,
                "items": list.items.iter().map(|a| a.as_ref()).collect::<Vec<_>>(),
            });
            Ok(json_response(200, &body, &[]))
        }
        (Method::POST, None) => {
            let opts = write_options(&q);
            let (bytes, ct) = read_body(req).await?;
            let body = parse_body(&bytes, ct.contains("yaml"))?;
            let name = body
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            let admission = admitted(
                shared,
                &res,
                &o.version,
                ns,
                &name,
                "CREATE",
                sub,
                opts.dry_run,
                |store, dry| store.create(&key, &o.version, ns, body.clone(), dry),
            )
            .await?;
            let (obj, warnings) = shared.store().create(&key, &o.version, ns, body, &opts)?;
            Ok(json_response(201, &obj, &[admission, warnings].concat()))
        }
        (Method::PUT, Some(name)) => {
            let opts = write_options(&q);
            let (bytes, ct) = read_body(req).await?;
            let body = parse_body(&bytes, ct.contains("yaml"))?;
            let admission = admitted(
                shared,
                &res,
                &o.version,
                ns,
                &name,
                "UPDATE",
                sub,
                opts.dry_run,
                |store, dry| store.update(&key, &o.version, ns, &name, body.clone(), sub, dry),
            )
            .await?;
            let (obj, warnings) = shared
                .store()
                .update(&key, &o.version, ns, &name, body, sub, &opts)?;
            Ok(json_response(200, &obj, &[admission, warnings].concat()))
        }
        (Method::PATCH, Some(name)) => {
            let opts = write_options(&q);
            let (bytes, ct) = read_body(req).await?;
            let ptype = if ct.starts_with("application/merge-patch+json") {
                PatchType::Merge
            } else if ct.starts_with("application/strategic-merge-patch+json") {
                PatchType::StrategicMerge
            } else if ct.starts_with("application/json-patch+json") {
                PatchType::Json
            } else if ct.starts_with("application/apply-patch+yaml") {
                if q.get("fieldManager").is_none_or(|f| f.is_empty()) {
                    return Err(ApiError::bad_request(
                        "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: \
                         is required for apply patch",
                    ));
                }
                PatchType::Apply
            } else {
                return Err(ApiError {
                    code: 415,
                    reason: "UnsupportedMediaType",
                    message: format!(
                        "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml ({ct})"
                    ),
                    details: None,
                });
            };
            let body = parse_body(&bytes, ptype == PatchType::Apply)?;
            // A patch that creates (server-side apply of a new object) is a CREATE.
            let exists = shared.store().get(&key, &o.version, ns, &name).is_ok();
            let operation = if exists { "UPDATE" } else { "CREATE" };
            let admission = admitted(
                shared,
                &res,
                &o.version,
                ns,
                &name,
                operation,
                sub,
                opts.dry_run,
                |store, dry| {
                    store.patch(&key, &o.version, ns, &name, ptype, body.clone(), sub, dry)
                },
            )
            .await?;
            let (obj, warnings) = shared
                .store()
                .patch(&key, &o.version, ns, &name, ptype, body, sub, &opts)?;
            Ok(json_response(200, &obj, &[admission, warnings].concat()))
        }
        (Method::DELETE, name) => {
            let (bytes, _) = read_body(req).await?;
            let body = parse_body(&bytes, false).unwrap_or(json!({}));
            let policy = q.get("propagationPolicy").cloned().or_else(|| {
                body.get("propagationPolicy")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            });
            let orphan = body.get("orphanDependents").and_then(Value::as_bool) == Some(true)
                || q.get("orphanDependents").is_some_and(|v| v == "true");
            let opts = DeleteOptions {
                propagation: match policy.as_deref() {
                    Some("Foreground") => Propagation::Foreground,
                    Some("Orphan") => Propagation::Orphan,
                    _ if orphan => Propagation::Orphan,
                    _ => Propagation::Background,
                },
                uid: body
                    .pointer("/preconditions/uid")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
                resource_version: body
                    .pointer("/preconditions/resourceVersion")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
                dry_run: q.get("dryRun").is_some_and(|v| v == "All")
                    || body
                        .get("dryRun")
                        .and_then(Value::as_array)
                        .is_some_and(|a| !a.is_empty()),
            };
            match name {
                Some(name) => {
                    let admission = admitted(
                        shared,
                        &res,
                        &o.version,
                        ns,
                        &name,
                        "DELETE",
                        sub,
                        opts.dry_run,
                        |_, _| Err(ApiError::bad_request("a DELETE has no object to review")),
                    )
                    .await?;
                    let obj = shared.store().delete(&key, &o.version, ns, &name, &opts)?;
                    Ok(json_response(200, &obj, &admission))
                }
                None => {
                    let (labels, fields) = selectors(&q, &res, &o.version)?;
                    let items = shared
                        .store()
                        .delete_collection(&key, &o.version, ns, &labels, &fields, &opts)?;
                    let body = json!({"apiVersion": res.api_version(&o.version), "kind": res.list_kind,
                                      "metadata": {}, "items": items});
                    Ok(json_response(200, &body, &[]))
                }
            }
        }
        (m, _) => Err(ApiError::method_not_allowed(format!(
            "{m} is not supported here"
        ))),
    }
}

/// Calls the validating webhooks that match a write (see [`crate::admission`]):
/// `dry` makes the write without storing it, so the webhooks see the object as it
/// would be stored; `dry_run` says the request itself is a dry run (the review's
/// `dryRun`, as kube-apiserver sends it). Status writes are not sent (no rule names a subresource here).
/// The write itself follows separately, as in kube-apiserver the stored object can
/// differ from the reviewed one only by a concurrent write in between.
#[allow(clippy::too_many_arguments)]
async fn admitted(
    shared: &Arc<Shared>,
    res: &Resource,
    version: &str,
    ns: Option<&str>,
    name: &str,
    operation: &str,
    sub: Subresource,
    dry_run: bool,
    dry: impl FnOnce(&mut Store, &WriteOptions) -> Result<(Value, Vec<String>), ApiError>,
) -> Result<Vec<String>, ApiError> {
    if sub != Subresource::Main {
        return Ok(Vec::new());
    }
    let (hooks, candidate, old, namespace_labels) = {
        let mut store = shared.store();
        let everything = LabelSelector::parse("").map_err(ApiError::bad_request)?;
        let fields = FieldSelector::parse("").map_err(ApiError::bad_request)?;
        let webhooks = ResKey {
            group: "admissionregistration.k8s.io".into(),
            plural: "validatingwebhookconfigurations".into(),
        };
        let configs: Vec<Value> = store
            .list(&webhooks, "v1", None, &everything, &fields, None, None)
            .map(|l| l.items.iter().map(|v| (**v).clone()).collect())
            .unwrap_or_default();
        if configs.is_empty() {
            return Ok(Vec::new());
        }
        let namespace_labels = ns
            .and_then(|n| {
                let key = ResKey {
                    group: String::new(),
                    plural: "namespaces".into(),
                };
                store.get(&key, "v1", None, n).ok()
            })
            .and_then(|n| n.pointer("/metadata/labels").cloned())
            .and_then(|l| serde_json::from_value(l).ok())
            .unwrap_or_default();
        let probe = crate::admission::Attributes {
            group: &res.group,
            version,
            kind: &res.kind,
            resource: &res.plural,
            namespace: ns,
            name,
            operation,
            object: None,
            old_object: None,
            namespace_labels,
            dry_run: false,
        };
        let hooks = crate::admission::matching(&configs, &probe);
        if hooks.is_empty() {
            return Ok(Vec::new());
        }
        let old = store.get(&res.key(), version, ns, name).ok();
        // A DELETE is reviewed with the stored object as `oldObject` and no object.
        let candidate = if operation == "DELETE" {
            None
        } else {
            let dry_opts = WriteOptions {
                dry_run: true,
                field_validation: FieldValidation::Ignore,
            };
            Some(dry(&mut store, &dry_opts)?.0)
        };
        (hooks, candidate, old, probe.namespace_labels)
    };
    let attributes = crate::admission::Attributes {
        group: &res.group,
        version,
        kind: &res.kind,
        resource: &res.plural,
        namespace: ns,
        name,
        operation,
        object: candidate.as_ref(),
        old_object: old.as_ref(),
        namespace_labels,
        dry_run,
    };
    crate::admission::admit(&hooks, &attributes).await
}

/// Starts a watch stream: replay, then live events, bookmarks when allowed, until
/// `timeoutSeconds` or the client goes away.
/// How a watch with these selectors sees `e`: as it is when the object matches
/// before and after; a change that makes it match is ADDED, one that makes it stop
/// matching is DELETED (kube-apiserver's watch cache); `None` when it matches
/// neither before nor after.
fn seen_as(e: &Event, labels: &LabelSelector, fields: &FieldSelector) -> Option<EventType> {
    let matches = |o: &Value| labels.matches(o) && fields.matches(o);
    let now = matches(&e.object);
    match (e.etype, e.prev.as_deref().map(matches)) {
        (EventType::Modified, Some(false)) => now.then_some(EventType::Added),
        (EventType::Modified, Some(true)) if !now => Some(EventType::Deleted),
        (etype, _) => now.then_some(etype),
    }
}

fn watch(
    shared: &Arc<Shared>,
    res: &Resource,
    version: &str,
    namespace: Option<&str>,
    q: &HashMap<String, String>,
    table: bool,
    include_object: &str,
) -> Result<Response<Body>, ApiError> {
    let (labels, fields) = selectors(q, res, version)?;
    let rv = q.get("resourceVersion").map(String::as_str);
    let start = shared.store().watch(&res.key(), namespace, rv);
    let (tx, rx) = mpsc::channel::<Bytes>(1024);
    let timeout = q
        .get("timeoutSeconds")
        .and_then(|t| t.parse::<u64>().ok())
        .map(Duration::from_secs)
        .unwrap_or(Duration::from_secs(1800));
    let bookmarks = q.get("allowWatchBookmarks").is_some_and(|v| v == "true");
    let bookmark_interval = shared.config.bookmark_interval;
    let res = res.clone();
    let version = version.to_owned();
    let namespace = namespace.map(str::to_owned);
    let include_object = include_object.to_owned();
    let key: ResKey = res.storage_key();
    // Subscribed now: a break asked for before this watch started is not its own.
    let mut broken = shared.delays.lock().breaker(&res.plural).subscribe();
    let shared = shared.clone();
    tokio::spawn(async move {
        let encode = |etype: &str, obj: Value| -> Bytes {
            let mut line =
                serde_json::to_vec(&json!({"type": etype, "object": obj})).unwrap_or_default();
            line.push(b'\n');
            Bytes::from(line)
        };
        let start = match start {
            Ok(s) => s,
            Err(e) => {
                let _ = tx.send(encode("ERROR", e.to_status())).await;
                return;
            }
        };
        let mut headers_sent = false;
        let mut render = |obj: &Value| -> Value {
            let obj = Store::present(&res, &version, obj);
            if table {
                let t = table::table(
                    &res,
                    &version,
                    &[&obj],
                    &include_object,
                    !headers_sent,
                    json!({}),
                );
                headers_sent = true;
                t
            } else {
                obj
            }
        };
        let mut last_rv = start.resource_version;
        let api_version = res.api_version(&version);
        let as_stored = |e: &Event| -> bool {
            !table
                && e.object.get("apiVersion").and_then(Value::as_str) == Some(api_version.as_str())
        };
        for e in &start.replay {
            let Some(etype) = seen_as(e, &labels, &fields) else {
                continue;
            };
            let line = if etype == e.etype && as_stored(e) {
                e.line()
            } else {
                encode(etype.as_str(), render(&e.object))
            };
            if tx.send(line).await.is_err() {
                return;
            }
        }
        let mut live = start.live;
        let deadline = tokio::time::sleep(timeout);
        tokio::pin!(deadline);
        let mut ticker = tokio::time::interval(bookmark_interval);
        ticker.tick().await;
        loop {
            tokio::select! {
                _ = &mut deadline => return,
                _ = tx.closed() => return,
                Ok(()) = broken.changed() => {
                    if *broken.borrow_and_update() == Some(WatchBreak::Gone) {
                        let gone = ApiError::gone(format!(
                            "too old resource version: {last_rv}"
                        ));
                        let _ = tx.send(encode("ERROR", gone.to_status())).await;
                    }
                    return;
                }
                _ = ticker.tick(), if bookmarks => {
                    let bm = json!({"kind": res.kind, "apiVersion": res.api_version(&version),
                                    "metadata": {"resourceVersion": last_rv.to_string()}});
                    if tx.send(encode("BOOKMARK", bm)).await.is_err() { return; }
                }
                event = live.recv() => match event {
                    Ok(e) => {
                        if let Some(delay) = shared.delay(|t| &t.watch_events, &res.plural) {
                            // Due `delay` after it happened; received in order, so the
                            // delays do not add up.
                            tokio::time::sleep_until((e.at + delay).into()).await;
                        }
                        // Subscribed under the store lock at start.resource_version:
                        // anything at or below it was in the replay or before it.
                        if e.res != key || e.rv <= start.resource_version {
                            continue;
                        }
                        last_rv = e.rv;
                        if let Some(ns) = &namespace && res.namespaced && &e.namespace != ns {
                            continue;
                        }
                        let Some(etype) = seen_as(&e, &labels, &fields) else {
                            continue;
                        };
                        let line = if etype == e.etype && as_stored(&e) {
                            e.line()
                        } else {
                            encode(etype.as_str(), render(&e.object))
                        };
                        if tx.send(line).await.is_err() { return; }
                    }
                    Err(broadcast::error::RecvError::Lagged(_)) => {
                        // Too slow: end the stream; the client re-watches from its last
                        // resourceVersion, or relists if that has expired.
                        return;
                    }
                    Err(broadcast::error::RecvError::Closed) => return,
                }
            }
        }
    });
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|b| (Ok::<_, Infallible>(Frame::data(b)), rx))
    });
    let mut resp = Response::new(StreamBody::new(stream).boxed_unsync());
    resp.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    Ok(resp)
}

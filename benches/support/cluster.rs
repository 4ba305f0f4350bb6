//! What the benchmarks that run the operator share: devplane with the CRDs installed,
//! a kubeconfig for `patchbay run`, a process's CPU ticks, and a watch of the
//! SwitchPorts' status.

use std::collections::BTreeMap;
use std::path::PathBuf;

use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, ObjectMeta, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use patchbay::api::{PortStatus, SwitchPort};

/// devplane in this process, with every patchbay CRD.
pub struct BenchCluster {
    /// The server: it serves until this is dropped.
    #[allow(dead_code)]
    pub server: patchbay_devplane::DevPlane,
    /// A scratch directory holding the kubeconfig.
    pub dir: PathBuf,
    /// The kubeconfig for `patchbay run`.
    pub kubeconfig: PathBuf,
    /// A client.
    pub client: Client,
}

impl BenchCluster {
    /// Starts devplane (with a watch history long enough for the run) and installs
    /// the CRDs.
    pub async fn start(tag: &str) -> Self {
        let server = patchbay_devplane::DevPlane::start(patchbay_devplane::Config {
            history_limit: 2_000_000,
            ..Default::default()
        })
        .expect("devplane");
        let dir = std::env::temp_dir().join(format!("patchbay-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let kubeconfig = dir.join("kubeconfig");
        server.write_kubeconfig(&kubeconfig).unwrap();
        let kc = Kubeconfig::read_from(&kubeconfig).unwrap();
        let client = Client::try_from(
            kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
                .await
                .unwrap(),
        )
        .unwrap();
        let crd_api: Api<CustomResourceDefinition> = Api::all(client.clone());
        for (_, crd) in patchbay::api::crds() {
            crd_api.create(&PostParams::default(), &crd).await.unwrap();
        }
        Self {
            server,
            dir,
            kubeconfig,
            client,
        }
    }
}

impl BenchCluster {
    /// Creates namespace `ns` and, in it, Secret `login` with these keys
    /// (`username`, `password`, …).
    pub async fn namespace_with_login(&self, ns: &str, login: &[(&str, &str)]) {
        let namespace = Namespace {
            metadata: ObjectMeta {
                name: Some(ns.into()),
                ..Default::default()
            },
            ..Default::default()
        };
        Api::<Namespace>::all(self.client.clone())
            .create(&PostParams::default(), &namespace)
            .await
            .unwrap();
        let secret = Secret {
            metadata: ObjectMeta {
                name: Some("login".into()),
                ..Default::default()
            },
            string_data: Some(
                login
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect::<BTreeMap<_, _>>(),
            ),
            ..Default::default()
        };
        Api::<Secret>::namespaced(self.client.clone(), ns)
            .create(&PostParams::default(), &secret)
            .await
            .unwrap();
    }
}

/// How many `verb` requests on `resource` two [`patchbay_devplane::DevPlane::request_counts`]
/// readings apart: `after` less `before`.
#[allow(dead_code)]
pub fn requests_between(
    before: &BTreeMap<(String, String), u64>,
    after: &BTreeMap<(String, String), u64>,
    verb: &str,
    resource: &str,
) -> u64 {
    let key = (verb.to_owned(), resource.to_owned());
    after.get(&key).copied().unwrap_or(0) - before.get(&key).copied().unwrap_or(0)
}

/// Requests per (verb, resource) between two [`patchbay_devplane::DevPlane::request_counts`]
/// readings, largest first, as `verb resource: n` (at most `top`).
#[allow(dead_code)]
pub fn request_diff(
    before: &BTreeMap<(String, String), u64>,
    after: &BTreeMap<(String, String), u64>,
    top: usize,
) -> Vec<String> {
    let mut rows: Vec<(u64, String)> = after
        .iter()
        .map(|(k, n)| {
            (
                n - before.get(k).copied().unwrap_or(0),
                format!("{} {}", k.0, k.1),
            )
        })
        .filter(|(n, _)| *n > 0)
        .collect();
    rows.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    rows.into_iter()
        .take(top)
        .map(|(n, k)| format!("{k}: {n}"))
        .collect()
}

impl Drop for BenchCluster {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A `/proc/<pid>/status` figure in KiB (`VmRSS:`, `VmHWM:`).
#[allow(dead_code)]
pub fn proc_kib(pid: u32, key: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with(key))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// User + system CPU ticks (1/100 s) a process has used so far.
#[allow(dead_code)]
pub fn proc_cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    // Fields 14 and 15 (utime, stime) are at 11 and 12 after the command name.
    f.get(11).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0)
        + f.get(12).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0)
}

/// Every SwitchPort's status in a namespace, kept from a watch; the last
/// `status.lastError` seen is kept for progress reports.
#[allow(dead_code)]
pub struct PortWatch {
    seen: std::sync::Arc<std::sync::Mutex<std::collections::HashMap<String, PortStatus>>>,
    /// Per port: the last resourceVersion seen and how many different ones were seen
    /// (every write of the port: spec, status or metadata).
    versions: std::sync::Arc<std::sync::Mutex<std::collections::HashMap<String, (String, u64)>>>,
    error: std::sync::Arc<std::sync::Mutex<Option<String>>>,
    changed: std::sync::Arc<tokio::sync::Notify>,
}

#[allow(dead_code)]
impl PortWatch {
    /// Starts watching the SwitchPorts of `ns`.
    pub fn start(client: Client, ns: &str) -> Self {
        use futures::StreamExt;
        use kube::runtime::{WatchStreamExt, watcher};
        let watch = Self {
            seen: Default::default(),
            versions: Default::default(),
            error: Default::default(),
            changed: Default::default(),
        };
        let (s, v, e, n) = (
            watch.seen.clone(),
            watch.versions.clone(),
            watch.error.clone(),
            watch.changed.clone(),
        );
        let api: Api<SwitchPort> = Api::namespaced(client, ns);
        tokio::spawn(async move {
            let mut w = watcher(api, watcher::Config::default())
                .applied_objects()
                .boxed();
            // An error (a 410 Gone) is followed by the watcher's own relist.
            while let Some(p) = w.next().await {
                let Ok(p) = p else { continue };
                let st = p.status.clone().unwrap_or_default();
                if let Some(err) = &st.last_error {
                    *e.lock().unwrap() = Some(err.clone());
                }
                let name = p.metadata.name.clone().unwrap_or_default();
                {
                    let rv = p.metadata.resource_version.clone().unwrap_or_default();
                    let mut versions = v.lock().unwrap();
                    let entry = versions.entry(name.clone()).or_default();
                    if entry.0 != rv {
                        *entry = (rv, entry.1 + 1);
                    }
                }
                s.lock().unwrap().insert(name, st);
                n.notify_waiters();
            }
        });
        watch
    }

    /// How many versions of each port were seen so far: two readings apart, the
    /// ports written in between.
    pub fn versions(&self) -> std::collections::HashMap<String, u64> {
        self.versions
            .lock()
            .unwrap()
            .iter()
            .map(|(k, (_, n))| (k.clone(), *n))
            .collect()
    }

    /// The status of `port` as last seen (default when not seen yet).
    pub fn status(&self, port: &str) -> PortStatus {
        self.seen
            .lock()
            .unwrap()
            .get(port)
            .cloned()
            .unwrap_or_default()
    }

    /// Waits until `done(port, status)` holds for every port of `ports`; panics after
    /// `limit` naming `what` and up to five ports that are not there, and reports
    /// progress every 30 s.
    pub async fn until(
        &self,
        ports: &[String],
        what: &str,
        limit: std::time::Duration,
        done: impl Fn(&str, &PortStatus) -> bool,
    ) {
        use std::time::{Duration, Instant};
        let deadline = Instant::now() + limit;
        let mut report = Instant::now() + Duration::from_secs(30);
        loop {
            let notified = self.changed.notified();
            let off: Vec<(String, Option<String>)> = {
                let seen = self.seen.lock().unwrap();
                ports
                    .iter()
                    .filter(|p| !seen.get(p.as_str()).is_some_and(|st| done(p, st)))
                    .map(|p| {
                        let state = seen.get(p.as_str()).and_then(|st| st.state);
                        (p.clone(), state.map(|s| s.to_string()))
                    })
                    .collect()
            };
            if off.is_empty() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{} of {} ports not {what}, e.g. {:?}",
                off.len(),
                ports.len(),
                &off[..off.len().min(5)]
            );
            if Instant::now() > report {
                eprintln!(
                    "  (still waiting: {} of {} ports not {what}; last error seen: {:?})",
                    off.len(),
                    ports.len(),
                    self.error.lock().unwrap()
                );
                report += Duration::from_secs(30);
            }
            let _ = tokio::time::timeout(Duration::from_millis(200), notified).await;
        }
    }
}

/// Creates `v` (a whole object of `K`) through `api`.
#[allow(dead_code)]
pub async fn create<K>(api: &Api<K>, v: serde_json::Value)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let obj: K = serde_json::from_value(v).unwrap();
    api.create(&PostParams::default(), &obj).await.unwrap();
}

/// In `ns` (with Secret `login`): `switches` fixture ProviderSwitches and Switches
/// `sw000`, `sw001`, …, each with `ports` entries `swNNN-pMM` on `Gi0/M`. Returns the
/// entries' names (the SwitchPorts the Switch controller creates).
#[allow(dead_code)]
pub async fn fixture_switches(
    client: &Client,
    ns: &str,
    switches: usize,
    ports: usize,
) -> Vec<String> {
    let providers: Api<patchbay::api::ProviderSwitch> = Api::namespaced(client.clone(), ns);
    let switch_api: Api<patchbay::api::Switch> = Api::namespaced(client.clone(), ns);
    let mut keys = Vec::new();
    for s in 0..switches {
        let name = format!("sw{s:03}");
        create(
            &providers,
            serde_json::json!({"apiVersion": "patchbay.dev/v1alpha1", "kind": "ProviderSwitch",
                   "metadata": {"name": name},
                   "spec": {"backend": "fixture", "os": "fixture", "address": "127.0.0.1",
                            "credentialsSecretRef": {"name": "login"}}}),
        )
        .await;
        let entries: serde_json::Map<String, serde_json::Value> = (0..ports)
            .map(|i| {
                keys.push(format!("{name}-p{i:02}"));
                (
                    format!("{name}-p{i:02}"),
                    serde_json::json!({"name": format!("Gi0/{i}")}),
                )
            })
            .collect();
        create(
            &switch_api,
            serde_json::json!({"apiVersion": "patchbay.dev/v1alpha1", "kind": "Switch",
                   "metadata": {"name": name},
                   "spec": {"provider": {"name": name}, "ports": entries}}),
        )
        .await;
    }
    keys
}

/// The sum of every series whose line starts with `name` (a metric's name, or its
/// name and the start of its labels) on an operator's metrics endpoint; `None` when
/// the endpoint does not answer.
#[allow(dead_code)]
pub fn metric_sum(at: std::net::SocketAddr, name: &str) -> Option<f64> {
    use std::io::{Read, Write};
    let mut conn = std::net::TcpStream::connect(at).ok()?;
    conn.write_all(b"GET /metrics HTTP/1.0\r\nHost: bench\r\n\r\n")
        .ok()?;
    let mut body = String::new();
    conn.read_to_string(&mut body).ok()?;
    Some(
        body.lines()
            .filter(|l| l.starts_with(name))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum(),
    )
}

/// Links port `keys[i]` to configuration `cfg-{i % 10}` (32 patches in flight).
#[allow(dead_code)]
pub async fn link_all(ports: &Api<SwitchPort>, keys: &[String]) {
    link_each(ports, keys, |i| format!("cfg-{}", i % 10)).await;
}

/// Links port `keys[i]` to configuration `config(i)` (32 patches in flight).
#[allow(dead_code)]
pub async fn link_each(ports: &Api<SwitchPort>, keys: &[String], config: impl Fn(usize) -> String) {
    use futures::StreamExt;
    // Each patch owns what it uses, so the whole may run on a task of its own.
    let patches: Vec<_> = keys
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let (ports, name, config) = (ports.clone(), name.clone(), config(i));
            async move {
                ports
                    .patch(
                        &name,
                        &kube::api::PatchParams::default(),
                        &kube::api::Patch::Merge(serde_json::json!(
                            {"spec": {"configuration": {"name": config}}}
                        )),
                    )
                    .await
                    .unwrap();
            }
        })
        .collect();
    futures::stream::iter(patches)
        .buffer_unordered(32)
        .collect::<Vec<_>>()
        .await;
}

/// A setting of the benchmark from the environment (`BENCH_SWITCHES`, …), else
/// `default`.
#[allow(dead_code)]
pub fn env_or(key: &str, default: usize) -> usize {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

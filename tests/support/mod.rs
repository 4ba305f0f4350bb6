//! The end-to-end harness: a cluster to test against and a namespace of the test's
//! own. By default it starts devplane in-process on a free loopback port; with
//! `PATCHBAY_E2E_CLUSTER=kubeconfig` it uses the cluster `KUBECONFIG` points at
//! instead (every test then works in a fresh namespace it deletes at the end).

#![allow(dead_code)]

pub mod cycle;
pub mod env;
#[path = "../../providers/tests/support/netns.rs"]
pub mod netns;
pub mod webhooks;

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use patchbay_devplane::DevPlane;
use serde_json::json;

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// A cluster for one test.
pub struct Cluster {
    /// A client for it.
    pub client: Client,
    /// Its kubeconfig file (for kubectl).
    pub kubeconfig: PathBuf,
    /// The test's own namespace.
    pub namespace: String,
    /// A scratch directory, removed on drop.
    pub dir: PathBuf,
    devplane: Option<DevPlane>,
}

/// Whether the tests run against devplane (not a real cluster).
pub fn on_devplane() -> bool {
    std::env::var("PATCHBAY_E2E_CLUSTER").as_deref() != Ok("kubeconfig")
}

impl Cluster {
    /// devplane with test-friendly settings, or the real cluster.
    pub async fn start(test: &str) -> Cluster {
        Self::start_with(
            test,
            patchbay_devplane::Config {
                bookmark_interval: Duration::from_millis(300),
                ..Default::default()
            },
        )
        .await
    }

    /// Like [`Cluster::start`] with explicit devplane settings.
    pub async fn start_with(test: &str, config: patchbay_devplane::Config) -> Cluster {
        // A failing test prints the operator's log with its output: its warnings and
        // what it did (info) unless RUST_LOG says otherwise (RUST_LOG=patchbay=debug
        // for more). Only a failing test's output is shown, so a CI failure that does
        // not reproduce still says what the operator saw.
        let filter = tracing_subscriber::EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,patchbay=info"));
        let _ = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_ansi(false)
            .with_test_writer()
            .try_init();
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let dir = std::env::temp_dir().join(format!("patchbay-{test}-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("scratch dir");
        let (kubeconfig, devplane) = if on_devplane() {
            let server = DevPlane::start(config).expect("devplane starts");
            let path = dir.join("kubeconfig");
            server.write_kubeconfig(&path).expect("kubeconfig written");
            (path, Some(server))
        } else {
            let path = PathBuf::from(std::env::var("KUBECONFIG").expect("KUBECONFIG is set"));
            (path, None)
        };
        let kc = Kubeconfig::read_from(&kubeconfig).expect("kubeconfig parses");
        let config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
            .await
            .expect("kubeconfig usable");
        let client = Client::try_from(config).expect("client");
        let namespace = format!("pb-{}-{n}", test.replace('_', "-"))
            .chars()
            .take(60)
            .collect::<String>()
            .trim_end_matches('-')
            .to_owned();
        let ns = Namespace {
            metadata: kube::api::ObjectMeta {
                name: Some(namespace.clone()),
                ..Default::default()
            },
            ..Default::default()
        };
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .expect("test namespace created");
        Cluster {
            client,
            kubeconfig,
            namespace,
            dir,
            devplane,
        }
    }

    /// The devplane, when the test runs on one.
    pub fn devplane(&self) -> Option<&DevPlane> {
        self.devplane.as_ref()
    }

    /// Installs a CRD (or finds it installed) and waits until it is established.
    pub async fn install_crd(&self, crd: CustomResourceDefinition) {
        let crds: Api<CustomResourceDefinition> = Api::all(self.client.clone());
        let name = crd.metadata.name.clone().expect("CRD name");
        match crds.create(&PostParams::default(), &crd).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => panic!("installing {name}: {e}"),
        }
        let established = kube::runtime::conditions::is_crd_established();
        tokio::time::timeout(
            Duration::from_secs(30),
            kube::runtime::wait::await_condition(crds, &name, established),
        )
        .await
        .expect("CRD established in time")
        .expect("CRD watch");
    }

    /// The machine's kubectl against this cluster, run from the repository root.
    pub fn kubectl_command(&self, args: &[&str]) -> std::process::Command {
        let mut cmd = std::process::Command::new("kubectl");
        cmd.arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .arg("--cache-dir")
            .arg(self.dir.join("kube-cache"))
            .args(args)
            .current_dir(env!("CARGO_MANIFEST_DIR"));
        cmd
    }

    /// Runs kubectl; its output, whatever the exit status.
    pub fn kubectl(&self, args: &[&str]) -> std::process::Output {
        self.kubectl_command(args).output().expect("kubectl runs")
    }

    /// Runs kubectl, which must succeed; its stdout.
    pub fn kubectl_ok(&self, args: &[&str]) -> String {
        let out = self.kubectl(args);
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "kubectl {args:?}: {}\n{stdout}",
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
    }

    /// Deletes the test namespace (only matters on a real cluster).
    pub async fn finish(self) {
        if self.devplane.is_none() {
            let _ = Api::<Namespace>::all(self.client.clone())
                .delete(&self.namespace, &DeleteParams::default())
                .await;
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The Events (events.k8s.io/v1) about the object `name`, of any kind, oldest
/// first.
pub async fn events_about(
    events: &Api<k8s_openapi::api::events::v1::Event>,
    name: &str,
) -> Vec<k8s_openapi::api::events::v1::Event> {
    let mut about: Vec<_> = events
        .list(&kube::api::ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .collect();
    about.sort_by_key(|e| e.event_time.as_ref().map(|t| t.0));
    about
}

/// The Warning Events (events.k8s.io/v1) about the object `name`, of any kind.
pub async fn warnings(
    events: &Api<k8s_openapi::api::events::v1::Event>,
    name: &str,
) -> Vec<k8s_openapi::api::events::v1::Event> {
    let mut about = events_about(events, name).await;
    about.retain(|e| e.type_.as_deref() == Some("Warning"));
    about
}

/// Asserts that no two logged-in sessions switch `name` of `sims` has seen so far
/// were open at once (see `FakeSwitches::overlapping_sessions`).
pub fn assert_one_writer(sims: &patchbay_testbed::FakeSwitches, name: &str) {
    let overlapping = sims.overlapping_sessions(name);
    assert!(
        overlapping.is_empty(),
        "{} pairs of sessions to {name} were open at once (of {} sessions): {overlapping:#?}",
        overlapping.len(),
        sims.sessions(name).len()
    );
}

/// Polls `check` every 50 ms until it returns `Some`, or panics after `secs`.
pub async fn eventually<T, F, Fut>(secs: u64, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    eventually_seen(secs, what, || {
        let attempt = check();
        async move { attempt.await.ok_or_else(String::new) }
    })
    .await
}

/// As [`eventually`], with `check` saying what it saw when it does not hold: a
/// timeout names the last thing seen, so a failure in CI says where it stuck.
pub async fn eventually_seen<T, F, Fut>(secs: u64, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    loop {
        let seen = match check().await {
            Ok(v) => return v,
            Err(seen) => seen,
        };
        if tokio::time::Instant::now() > deadline {
            if seen.is_empty() {
                panic!("timed out after {secs}s waiting for {what}");
            }
            panic!("timed out after {secs}s waiting for {what}; last seen:\n{seen}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A CRD rendition of another project's (`testbed/crds/<file>`).
pub fn rendition(file: &str) -> CustomResourceDefinition {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("testbed/crds")
        .join(file);
    let text = std::fs::read_to_string(&path).expect("the CRD rendition");
    patchbay_providers::yaml::from_str(&text).expect("a CRD")
}

/// Metal3's BareMetalHost CRD as `testbed/crds/metal3.io_baremetalhosts.yaml`
/// renders it (upstream's networkInterfaces exactly, a few other spec fields; a
/// structural schema, so an API server prunes what it does not list).
/// `with_ports` adds seed 003's proposed `spec.ports`.
pub fn bare_metal_host_crd(with_ports: bool) -> CustomResourceDefinition {
    let mut crd = serde_json::to_value(rendition("metal3.io_baremetalhosts.yaml")).expect("a CRD");
    if with_ports {
        crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
            ["ports"] = json!({"type": "array", "items":
                {"type": "object", "x-kubernetes-preserve-unknown-fields": true}});
    }
    serde_json::from_value(crd).expect("a CRD")
}

/// MetalLB's BGPPeer CRD (`metallb.io/v1beta2`), shaped like upstream's for the
/// fields patchbay writes: a structural schema, so an API server prunes and types
/// them as MetalLB's own CRD would.
pub fn metallb_bgp_peer_crd() -> CustomResourceDefinition {
    let selector = json!({"type": "object", "properties": {
        "matchLabels": {"type": "object", "additionalProperties": {"type": "string"}},
        "matchExpressions": {"type": "array", "items":
            {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}});
    serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "bgppeers.metallb.io"},
        "spec": {"group": "metallb.io", "scope": "Namespaced",
            "names": {"plural": "bgppeers", "singular": "bgppeer", "kind": "BGPPeer"},
            "versions": [{"name": "v1beta2", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "apiVersion": {"type": "string"}, "kind": {"type": "string"},
                    "metadata": {"type": "object"},
                    "spec": {"type": "object", "required": ["myASN", "peerASN", "peerAddress"],
                        "properties": {
                            "myASN": {"type": "integer", "format": "int32"},
                            "peerASN": {"type": "integer", "format": "int32"},
                            "peerAddress": {"type": "string"},
                            "sourceAddress": {"type": "string"},
                            "peerPort": {"type": "integer"},
                            "holdTime": {"type": "string"},
                            "keepaliveTime": {"type": "string"},
                            "routerID": {"type": "string"},
                            "password": {"type": "string"},
                            "passwordSecret": {"type": "object", "properties": {
                                "name": {"type": "string"},
                                "namespace": {"type": "string"}}},
                            "ebgpMultiHop": {"type": "boolean"},
                            "nodeSelectors": {"type": "array", "items": selector}}},
                    "status": {"type": "object"}}}}}]}
    }))
    .unwrap()
}

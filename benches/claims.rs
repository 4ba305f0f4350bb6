//! Allocation benchmark: 1,000 Servers over 5 sites, the operator as its own process
//! (`patchbay run`) against devplane. Measures, from watches (not polling):
//! - claim creation → `Allocated=True` (for the new generation), claims of 2–5
//!   Servers created one at a time;
//! - an edit that grows a claim by one Server → `Allocated=True` again;
//! - a deletion → every Server of the claim `Available` (status written by the
//!   Server controller);
//! - 100 claims created at once → all allocated (throughput).
//!
//! The seed's Server operator took 260 / 450 / 305 ms (creation / edit / deletion) for
//! a claim of 2 Servers on a real cluster (seed 000, Table 7.2); the target is p50 ≤
//! 26 ms for each, here on devplane — not like for like. Prints figures, asserts
//! nothing. Run: `make bench` (or `cargo bench --bench claims`); `BENCH_CLAIMS`
//! shrinks the sequential part.

#[path = "support/cluster.rs"]
mod cluster;

use std::collections::HashMap;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cluster::{BenchCluster, proc_kib};
use futures::StreamExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use patchbay::api::{Server, ServerClaim, ServerPhase};
use serde_json::json;
use tokio::sync::Notify;

const NS: &str = "bench";
const SITES: usize = 5;
const SERVERS: usize = 1000;

/// What the watches saw last: claim → (generation allocated, servers listed);
/// server → (phase, claim).
#[derive(Default)]
struct Seen {
    claims: HashMap<String, (Option<i64>, usize)>,
    servers: HashMap<String, (Option<ServerPhase>, Option<String>)>,
}

struct Watches {
    seen: Arc<Mutex<Seen>>,
    changed: Arc<Notify>,
}

impl Watches {
    fn start(client: kube::Client) -> Self {
        let seen: Arc<Mutex<Seen>> = Arc::default();
        let changed = Arc::new(Notify::new());
        let (s, n) = (seen.clone(), changed.clone());
        let claims: Api<ServerClaim> = Api::namespaced(client.clone(), NS);
        tokio::spawn(async move {
            let mut w = watcher(claims, watcher::Config::default())
                .applied_objects()
                .boxed();
            while let Some(Ok(c)) = w.next().await {
                let st = c.status.as_ref();
                let allocated = st
                    .filter(|s| {
                        s.conditions
                            .iter()
                            .any(|k| k.type_ == "Allocated" && k.status == "True")
                    })
                    .and_then(|s| s.observed_generation);
                let listed = st.map_or(0, |s| s.roles.iter().map(|r| r.servers.len()).sum());
                s.lock()
                    .unwrap()
                    .claims
                    .insert(c.metadata.name.clone().unwrap(), (allocated, listed));
                n.notify_waiters();
            }
        });
        let (s, n) = (seen.clone(), changed.clone());
        let servers: Api<Server> = Api::all(client);
        tokio::spawn(async move {
            let mut w = watcher(servers, watcher::Config::default())
                .applied_objects()
                .boxed();
            while let Some(Ok(srv)) = w.next().await {
                let phase = srv.status.as_ref().and_then(|s| s.phase);
                let claim = srv
                    .status
                    .as_ref()
                    .and_then(|s| s.claim.as_ref().map(|c| c.name.clone()));
                s.lock()
                    .unwrap()
                    .servers
                    .insert(srv.metadata.name.clone().unwrap(), (phase, claim));
                n.notify_waiters();
            }
        });
        Watches { seen, changed }
    }

    async fn until(&self, what: &str, check: impl Fn(&Seen) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if check(&self.seen.lock().unwrap()) {
                return;
            }
            if Instant::now() > deadline {
                panic!("gave up waiting for {what}");
            }
            let _ = tokio::time::timeout(Duration::from_millis(200), notified).await;
        }
    }
}

fn claim(name: &str, site: usize, size: i64) -> ServerClaim {
    serde_json::from_value(json!({
        "apiVersion": "patchbay.dev/v1alpha1", "kind": "ServerClaim",
        "metadata": {"name": name},
        "spec": {"site": format!("site-{site}"), "roles": [
            {"name": "control-plane", "count": 1, "requirements": {"minCpus": 16}},
            {"name": "worker", "count": size - 1, "requirements": {"minMemory": "64Gi"}}
        ]}
    }))
    .unwrap()
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

fn report(what: &str, mut ms: Vec<f64>) {
    ms.sort_by(|a, b| a.total_cmp(b));
    println!(
        "  {what:<34} p50 {:>6.1} ms   p99 {:>6.1} ms   max {:>6.1} ms   (n={})",
        percentile(&ms, 0.5),
        percentile(&ms, 0.99),
        ms.last().copied().unwrap_or(f64::NAN),
        ms.len()
    );
}

#[tokio::main]
async fn main() {
    let sequential: usize = std::env::var("BENCH_CLAIMS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100);
    let cluster = BenchCluster::start("claimbench").await;
    let client = cluster.client.clone();
    cluster
        .namespace_with_login(NS, &[("username", "admin"), ("password", "pw")])
        .await;
    let servers: Api<Server> = Api::all(client.clone());
    let sizes = [
        (8, "32Gi"),
        (16, "64Gi"),
        (32, "128Gi"),
        (64, "256Gi"),
        (96, "512Gi"),
    ];
    futures::stream::iter(0..SERVERS)
        .map(|i| {
            let servers = servers.clone();
            let (cpus, mem) = sizes[(i / SITES) % sizes.len()];
            let server: Server = serde_json::from_value(json!({
                "apiVersion": "patchbay.dev/v1alpha1", "kind": "Server",
                "metadata": {"name": format!("srv-{i:04}")},
                "spec": {
                    "bmc": {"address": format!("10.{}.{}.{}", i / 65536, (i / 256) % 256, i % 256),
                            "credentialsSecretRef": {"name": "login", "namespace": NS}},
                    "bootMac": format!("aa:bb:cc:00:{:02x}:{:02x}", i / 256, i % 256),
                    "site": format!("site-{}", i % SITES),
                    "hostAddress": format!("192.168.{}.{}", i / 256, i % 256),
                    "hardware": {"cpus": cpus, "memory": mem},
                }
            }))
            .unwrap();
            async move {
                servers
                    .create(&PostParams::default(), &server)
                    .await
                    .unwrap()
            }
        })
        .buffer_unordered(16)
        .collect::<Vec<_>>()
        .await;
    let watches = Watches::start(client.clone());

    let started = Instant::now();
    let mut operator = Command::new(env!("CARGO_BIN_EXE_patchbay"))
        .args(["run", "--kubeconfig"])
        .arg(&cluster.kubeconfig)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("patchbay run starts");
    watches
        .until("every Server Available", |s| {
            s.servers.len() == SERVERS
                && s.servers
                    .values()
                    .all(|(p, _)| *p == Some(ServerPhase::Available))
        })
        .await;
    println!(
        "claims benchmark: {SERVERS} Servers over {SITES} sites, operator as its own process on devplane"
    );
    println!(
        "  operator start → every Server's status written: {:.2} s",
        started.elapsed().as_secs_f64()
    );

    let claims: Api<ServerClaim> = Api::namespaced(client.clone(), NS);
    let (mut create, mut edit, mut delete) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..sequential {
        let name = format!("seq-{i:03}");
        let size = 2 + (i % 4) as i64;
        let t = Instant::now();
        claims
            .create(&PostParams::default(), &claim(&name, i % SITES, size))
            .await
            .unwrap();
        watches
            .until(&format!("{name} allocated"), |s| {
                s.claims.get(&name).is_some_and(|(g, _)| *g == Some(1))
            })
            .await;
        create.push(t.elapsed().as_secs_f64() * 1e3);

        let t = Instant::now();
        let grown = claim(&name, i % SITES, size + 1);
        claims
            .patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"roles": grown.spec.roles}})),
            )
            .await
            .unwrap();
        watches
            .until(&format!("{name} grown"), |s| {
                s.claims
                    .get(&name)
                    .is_some_and(|(g, n)| *g == Some(2) && *n == size as usize + 1)
            })
            .await;
        edit.push(t.elapsed().as_secs_f64() * 1e3);

        let t = Instant::now();
        claims
            .delete(&name, &DeleteParams::default())
            .await
            .unwrap();
        watches
            .until(&format!("{name}'s servers Available"), |s| {
                !s.servers
                    .values()
                    .any(|(_, c)| c.as_deref() == Some(name.as_str()))
            })
            .await;
        delete.push(t.elapsed().as_secs_f64() * 1e3);
    }
    println!(
        "  {sequential} claims of 2–5 Servers, one at a time (seed 000: 260 / 450 / 305 ms; target p50 ≤ 26 ms):"
    );
    report("creation → Allocated=True", create);
    report("edit (+1 Server) → Allocated=True", edit);
    report("deletion → its Servers Available", delete);

    // 100 at once.
    let t = Instant::now();
    futures::future::join_all((0..100).map(|i| {
        let claims = claims.clone();
        async move {
            claims
                .create(
                    &PostParams::default(),
                    &claim(&format!("burst-{i:03}"), i % SITES, 2 + (i % 4) as i64),
                )
                .await
                .unwrap()
        }
    }))
    .await;
    watches
        .until("100 claims allocated", |s| {
            (0..100).all(|i| {
                s.claims
                    .get(&format!("burst-{i:03}"))
                    .is_some_and(|(g, _)| *g == Some(1))
            })
        })
        .await;
    let all = t.elapsed().as_secs_f64();
    println!(
        "  100 claims (350 Servers) created at once → all Allocated=True: {:.2} s ({:.0} claims/s)",
        all,
        100.0 / all
    );
    println!(
        "  operator RSS at the end: {:.1} MiB",
        proc_kib(operator.id(), "VmRSS:") as f64 / 1024.0
    );
    let _ = operator.kill();
    let _ = operator.wait();
}

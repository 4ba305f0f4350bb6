//! Operator benchmark: 200 switches x 50 ports on fixture devices with 1 ms per
//! device operation. Measures the time from linking a configuration to every port
//! until all 10,000 ports are Active, then the operator's RSS and CPU over 60 s of
//! idling. The operator runs as its own process (`patchbay run`) against devplane,
//! so its figures are its own. Prints figures, asserts nothing.
//!
//! Run: `make bench` (or `cargo bench --bench operator`). Targets (issue 17): <= 10 s
//! to all Active, idle RSS <= 48 MiB, idle CPU <= 0.5 %.
//!
//! `BENCH_TENANCY=1` runs the same fleet with tenancy on (issue 31): the Switches
//! in a tenant namespace (their ports serve it), the infra namespace elsewhere, a
//! VLANPool granting the configurations' VLANs, so every apply of every port passes
//! the grant check (from the caches) and every port is parked when first seen.
//!
//! `BENCH_NEIGHBOR_SECONDS=N` (issue 34) has every Switch read its neighbours every N
//! s (its own fixture device as the source: one made-up LLDP host per port), and
//! prints the reads, the Switch status writes and the idle cost they add.
//!
//! `BENCH_BGP=1` (issue 35) turns BGP on at its defaults on every Switch: its own
//! fixture device as the speaker (in memory), ASN 65000, a `bgpAddress` on every port
//! (a /31 each), `intervalSeconds` 30; no host is bound, so the cost is keeping the
//! speakers (one read per Switch per interval) and the claims' and Servers' checks.
//!
//! `BENCH_BREAK_WATCHES=N` (issue 58) breaks every SwitchPort watch N times while the
//! ports link, once more than half of them are Active and then each time another
//! 1/(2N) of them are: odd breaks close the connection (the operator watches again
//! from where it was), even ones end it 410 Gone (the operator lists again). It
//! prints the lists and objects listed, and how many ports went back from Active
//! (a port acting on a status older than its own write would).

#[path = "support/cluster.rs"]
mod cluster;

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cluster::{BenchCluster, env_or, metric_sum, proc_cpu_ticks, proc_kib, request_diff};
use futures::StreamExt;
use kube::api::{Api, PostParams};
use patchbay::api::{PortState, ProviderSwitch, Switch, SwitchPort, SwitchPortConfiguration};
use serde_json::json;

const NS: &str = "bench";

/// The operator's drift interval in this benchmark.
const DRIFT_INTERVAL_SECONDS: u64 = 300;

/// The drift sweeps the operator counted (`patchbay_drift_sweeps_total`, summed
/// over backends), read from its metrics endpoint.
fn drift_sweeps(at: std::net::SocketAddr) -> Option<f64> {
    metric_sum(at, "patchbay_drift_sweeps_total")
}

/// Writes of Switch status (`switches/status`, any verb but reads) served so far.
fn switch_status_writes(cluster: &BenchCluster) -> u64 {
    cluster
        .server
        .request_counts()
        .iter()
        .filter(|((verb, res), _)| res == "switches/status" && verb != "get")
        .map(|(_, n)| n)
        .sum()
}

/// Port states kept current from one watch (relisting 10,000 ports to count them
/// would load the API server more than the operator does).
/// It also counts the ports seen leaving Active (none of this benchmark's changes
/// takes a port out of Active).
#[derive(Clone, Default)]
struct StateCounter(
    std::sync::Arc<std::sync::Mutex<BTreeMap<String, String>>>,
    std::sync::Arc<std::sync::atomic::AtomicUsize>,
);

impl StateCounter {
    fn start(ports: Api<SwitchPort>) -> Self {
        let counter = StateCounter::default();
        let map = counter.0.clone();
        let left_active = counter.1.clone();
        tokio::spawn(async move {
            let stream = kube::runtime::watcher(ports, kube::runtime::watcher::Config::default());
            let mut stream = std::pin::pin!(stream);
            // An error (a 410 Gone) is followed by the watcher's own relist.
            while let Some(event) = stream.next().await {
                let Ok(event) = event else { continue };
                let record = |p: SwitchPort| {
                    let state = p
                        .status
                        .and_then(|s| s.state)
                        .map(|s| s.to_string())
                        .unwrap_or_else(|| "(none)".into());
                    let before = map
                        .lock()
                        .unwrap()
                        .insert(p.metadata.name.unwrap_or_default(), state.clone());
                    if before.as_deref() == Some("Active") && state != "Active" {
                        left_active.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                };
                match event {
                    kube::runtime::watcher::Event::Apply(p)
                    | kube::runtime::watcher::Event::InitApply(p) => record(p),
                    kube::runtime::watcher::Event::Delete(p) => {
                        map.lock()
                            .unwrap()
                            .remove(&p.metadata.name.unwrap_or_default());
                    }
                    _ => {}
                }
            }
        });
        counter
    }

    fn count(&self, state: &str) -> usize {
        self.0
            .lock()
            .unwrap()
            .values()
            .filter(|s| *s == state)
            .count()
    }

    /// Ports seen going from Active to another state so far.
    fn left_active(&self) -> usize {
        self.1.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// Where a phase's work went: the API requests it made (all clients: the operator's,
/// and this benchmark's own edits and watch) and the CPU of the operator and of this
/// process (devplane and the benchmark's clients).
struct Phase {
    requests: BTreeMap<(String, String), u64>,
    operator_ticks: u64,
    own_ticks: u64,
}

impl Phase {
    fn start(cluster: &BenchCluster, operator: u32) -> Self {
        Phase {
            requests: cluster.server.request_counts(),
            operator_ticks: proc_cpu_ticks(operator),
            own_ticks: proc_cpu_ticks(std::process::id()),
        }
    }

    /// Prints the phase's CPU seconds and its largest request counts.
    fn report(&self, cluster: &BenchCluster, operator: u32, what: &str) {
        let (op, own) = (
            proc_cpu_ticks(operator) - self.operator_ticks,
            proc_cpu_ticks(std::process::id()) - self.own_ticks,
        );
        println!(
            "    {what}: CPU {:.1} s operator, {:.1} s devplane + benchmark; requests: {}",
            op as f64 / 100.0,
            own as f64 / 100.0,
            request_diff(&self.requests, &cluster.server.request_counts(), 8).join(", ")
        );
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let switches_n = env_or("BENCH_SWITCHES", 200);
    let ports_n = env_or("BENCH_PORTS", 50);
    let idle_secs = env_or("BENCH_IDLE_SECONDS", 60) as u64;
    let tenancy = env_or("BENCH_TENANCY", 0) == 1;
    let neighbor_seconds = env_or("BENCH_NEIGHBOR_SECONDS", 0);
    let bgp = env_or("BENCH_BGP", 0) == 1;
    let breaks = env_or("BENCH_BREAK_WATCHES", 0);
    // `BENCH_OPERATOR_LOG=<file>`: the operator's debug log goes there.
    let log = std::env::var_os("BENCH_OPERATOR_LOG");
    let cluster = BenchCluster::start("opbench").await;
    let (client, kubeconfig) = (cluster.client.clone(), cluster.kubeconfig.clone());
    cluster
        .namespace_with_login(NS, &[("username", "u"), ("password", "p")])
        .await;
    let providers: Api<ProviderSwitch> = Api::namespaced(client.clone(), NS);
    let switches: Api<Switch> = Api::namespaced(client.clone(), NS);
    for s in 0..switches_n {
        let name = format!("sw{s:03}");
        let provider: ProviderSwitch = serde_json::from_value(json!({
            "apiVersion": "patchbay.dev/v1alpha1", "kind": "ProviderSwitch", "metadata": {"name": name},
            "spec": {"backend": "fixture", "os": "fixture", "address": "127.0.0.1",
                     "credentialsSecretRef": {"name": "login"}}
        }))
        .unwrap();
        providers
            .create(&PostParams::default(), &provider)
            .await
            .unwrap();
        let ports: serde_json::Map<String, serde_json::Value> = (0..ports_n)
            .map(|i| {
                let mut port = json!({"name": format!("Gi0/{i}")});
                if bgp {
                    // A /24 per Switch, a /31 per port.
                    port["bgpAddress"] = json!(format!("10.{}.{}.{}/31", s / 256, s % 256, 2 * i));
                }
                (format!("{name}-p{i:02}"), port)
            })
            .collect();
        let mut spec = json!({"provider": {"name": name}, "ports": ports});
        if bgp {
            spec["bgp"] = json!({"speaker": {"name": name}, "asn": 65000,
                                 "routerId": format!("10.255.{}.{}", s / 256, s % 256)});
        }
        if neighbor_seconds > 0 {
            spec["neighbors"] = json!({"providers": [{"name": name}],
                                       "intervalSeconds": neighbor_seconds});
        }
        let switch: Switch = serde_json::from_value(json!({
            "apiVersion": "patchbay.dev/v1alpha1", "kind": "Switch", "metadata": {"name": name},
            "spec": spec
        }))
        .unwrap();
        switches
            .create(&PostParams::default(), &switch)
            .await
            .unwrap();
    }
    let configs: Api<SwitchPortConfiguration> = Api::namespaced(client.clone(), NS);
    for c in 0..10 {
        let cfg: SwitchPortConfiguration = serde_json::from_value(json!({
            "apiVersion": "patchbay.dev/v1alpha1", "kind": "SwitchPortConfiguration",
            "metadata": {"name": format!("cfg-{c}")},
            "spec": {"untaggedVLAN": 100 + c, "description": format!("bench {c}")}
        }))
        .unwrap();
        configs.create(&PostParams::default(), &cfg).await.unwrap();
    }

    if tenancy {
        let pool: patchbay::api::VLANPool = serde_json::from_value(json!({
            "apiVersion": "patchbay.dev/v1alpha1", "kind": "VLANPool",
            "metadata": {"name": "bench"},
            "spec": {"vlans": "100-109", "namespaces": [NS]}
        }))
        .unwrap();
        Api::<patchbay::api::VLANPool>::all(client.clone())
            .create(&PostParams::default(), &pool)
            .await
            .unwrap();
    }
    let tenancy_args: &[&str] = if tenancy {
        &["--infra-namespace", "bench-infra", "--parking-vlan", "4000"]
    } else {
        &[]
    };
    // `BENCH_HEAPTRACK=<file prefix>`: the operator runs under heaptrack (Debian
    // `heaptrack`), which writes its allocations there (`heaptrack_print` reads them).
    let heaptrack = std::env::var_os("BENCH_HEAPTRACK");
    let mut operator = match &heaptrack {
        Some(out) => {
            let mut c = Command::new("heaptrack");
            c.arg("-o").arg(out).arg(env!("CARGO_BIN_EXE_patchbay"));
            c
        }
        None => Command::new(env!("CARGO_BIN_EXE_patchbay")),
    };
    // The operator's metrics, for the drift sweeps while idle.
    let metrics_at = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port");
    let mut operator = operator
        .args(["run", "--kubeconfig"])
        .arg(&kubeconfig)
        .arg("--metrics-address")
        .arg(metrics_at.to_string())
        .args(tenancy_args)
        .args([
            "--fixture-latency-ms",
            "1",
            "--drift-interval-seconds",
            &*DRIFT_INTERVAL_SECONDS.to_string(),
        ])
        .env(
            "RUST_LOG",
            if log.is_some() {
                "patchbay=debug,warn"
            } else {
                "warn"
            },
        )
        .stdout(match &log {
            Some(path) => Stdio::from(std::fs::File::create(path).expect("BENCH_OPERATOR_LOG")),
            None => Stdio::null(),
        })
        .stderr(Stdio::null())
        .spawn()
        .expect("patchbay run starts");
    let pid = operator.id();
    let operator_started = Instant::now();
    let phase = Phase::start(&cluster, pid);
    let ports: Api<SwitchPort> = Api::namespaced(client.clone(), NS);
    let total = switches_n * ports_n;
    let created = Instant::now();
    let counter = StateCounter::start(ports.clone());
    while counter.count("Idle") < total {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!(
        "operator benchmark: {switches_n} switches x {ports_n} ports = {total} ports, fixture latency 1 ms{}{}",
        if tenancy {
            ", tenancy on (ports serve a tenant namespace; parked when first seen)"
        } else {
            ""
        },
        if bgp {
            ", BGP on at its defaults (each Switch's fixture device its speaker, a bgpAddress per port, read every 30 s)"
        } else {
            ""
        }
    );
    println!(
        "  SwitchPorts created by the Switch controller and Idle after {:.1} s",
        created.elapsed().as_secs_f64()
    );
    phase.report(&cluster, pid, "creating");

    let phase = Phase::start(&cluster, pid);
    let lists0 = (
        cluster.server.request_count("list", "switchports"),
        cluster.server.objects_listed("switchports"),
        cluster.server.request_count("watch", "switchports"),
    );
    let started = Instant::now();
    // The watch breaks happen while waiting for Active, so linking runs beside them.
    let linking = {
        let ports = ports.clone();
        let keys: Vec<String> = (0..total)
            .map(|i| format!("sw{:03}-p{:02}", i / ports_n, i % ports_n))
            .collect();
        tokio::spawn(async move {
            cluster::link_all(&ports, &keys).await;
            Instant::now()
        })
    };
    let mut broken = 0;
    while counter.count(&PortState::Active.to_string()) < total {
        if started.elapsed() > Duration::from_secs(600) {
            println!("  gave up after 600 s: {} Active", counter.count("Active"));
            break;
        }
        // Break k (1-based) once more than (1/2 + (k-1)/(2N)) of the ports are Active.
        if broken < breaks && counter.count("Active") * 2 * breaks > total * (breaks + broken) {
            broken += 1;
            let how = if broken % 2 == 1 {
                patchbay_devplane::WatchBreak::Closed
            } else {
                patchbay_devplane::WatchBreak::Gone
            };
            println!(
                "  watch break {broken} ({how:?}) at {} Active, {:.1} s after the first link",
                counter.count("Active"),
                started.elapsed().as_secs_f64()
            );
            cluster.server.break_watches("switchports", how);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let to_active = started.elapsed();
    let linked = linking.await.expect("linking") - started;
    println!(
        "  configuration linked to every port in {:.1} s; all {total} ports Active {:.1} s after the first link, {:.1} s after the last",
        linked.as_secs_f64(),
        to_active.as_secs_f64(),
        (to_active - linked).as_secs_f64()
    );
    let now = cluster.server.request_counts();
    println!(
        "  per linked port: {:.2} status writes, {:.2} Events; {} ports went back from Active; SwitchPort lists: {} requests, {} objects, {} watch requests",
        cluster::requests_between(&phase.requests, &now, "patch", "switchports/status") as f64
            / total as f64,
        cluster::requests_between(&phase.requests, &now, "create", "events") as f64 / total as f64,
        counter.left_active(),
        cluster.server.request_count("list", "switchports") - lists0.0,
        cluster.server.objects_listed("switchports") - lists0.1,
        cluster.server.request_count("watch", "switchports") - lists0.2,
    );
    phase.report(&cluster, pid, "linking");
    let phase = Phase::start(&cluster, pid);
    let busy_rss = proc_kib(pid, "VmRSS:");
    let ticks_per_s = 100.0; // USER_HZ on Linux
    let cpu0 = proc_cpu_ticks(pid);
    let sweeps0 = drift_sweeps(metrics_at);
    let reads0 = metric_sum(metrics_at, "patchbay_neighbor_reads_total");
    let writes0 = switch_status_writes(&cluster);
    let switch_reconciles = || {
        metric_sum(
            metrics_at,
            "patchbay_reconciles_total{controller=\"Switch\"",
        )
    };
    let switch_reconciles0 = switch_reconciles();
    let idle_from = Instant::now();
    tokio::time::sleep(Duration::from_secs(idle_secs)).await;
    let cpu1 = proc_cpu_ticks(pid);
    let sweeps1 = drift_sweeps(metrics_at);
    let reads1 = metric_sum(metrics_at, "patchbay_neighbor_reads_total");
    let writes1 = switch_status_writes(&cluster);
    let switch_reconciles1 = switch_reconciles();
    let idle = idle_from.elapsed().as_secs_f64();
    let rss = proc_kib(pid, "VmRSS:");
    let hwm = proc_kib(pid, "VmHWM:");
    println!(
        "  operator RSS: {:.1} MiB right after settling, {:.1} MiB after {idle_secs} s idle (peak {:.1} MiB)",
        busy_rss as f64 / 1024.0,
        rss as f64 / 1024.0,
        hwm as f64 / 1024.0
    );
    // Anonymous memory is the heap (what the caches hold); file-backed is the
    // binary's code and data pages the process has touched.
    println!(
        "  operator RSS after idle: {:.1} MiB anonymous, {:.1} MiB file-backed",
        proc_kib(pid, "RssAnon:") as f64 / 1024.0,
        proc_kib(pid, "RssFile:") as f64 / 1024.0
    );
    println!(
        "  operator CPU while idle: {:.2} % of one core over {:.0} s",
        100.0 * (cpu1 - cpu0) as f64 / ticks_per_s / idle,
        idle
    );
    if let (Some(a), Some(b)) = (sweeps0, sweeps1) {
        // A switch's first check is at its worker's start and the next one drift
        // interval later, so switches whose workers started together sweep together:
        // an idle window shorter than the interval may hold none.
        println!(
            "  drift sweeps while idle: {:.0} in {:.0} s = {:.2} device sessions/s ({switches_n} switches, one sweep each per {DRIFT_INTERVAL_SECONDS} s: {:.2}/s due); {b:.0} since the operator started {:.0} s ago",
            b - a,
            idle,
            (b - a) / idle,
            switches_n as f64 / DRIFT_INTERVAL_SECONDS as f64,
            operator_started.elapsed().as_secs_f64()
        );
    }
    if neighbor_seconds > 0
        && let (Some(a), Some(b)) = (reads0, reads1)
    {
        println!(
            "  neighbour reads while idle: {:.0} in {:.0} s = {:.1} per minute ({switches_n} switches every {neighbor_seconds} s: {:.1}/min due), one session of the switch's source each; Switch status writes: {}",
            b - a,
            idle,
            60.0 * (b - a) / idle,
            60.0 * switches_n as f64 / neighbor_seconds as f64,
            writes1.saturating_sub(writes0)
        );
    }
    if bgp && let (Some(a), Some(b)) = (switch_reconciles0, switch_reconciles1) {
        println!(
            "  BGP while idle: {:.0} Switch reconciles in {:.0} s = {:.1}/s, each one speaker read ({switches_n} switches every 30 s: {:.1}/s due); Switch status writes: {}",
            b - a,
            idle,
            (b - a) / idle,
            switches_n as f64 / 30.0,
            writes1.saturating_sub(writes0)
        );
    }
    {
        // What idling costs the API server: the Lease apart, everything else.
        let now = cluster.server.request_counts();
        let (mut lease, mut other) = (0, 0);
        for (k, n) in &now {
            let d = n - phase.requests.get(k).copied().unwrap_or(0);
            if k.1 == "leases" {
                lease += d;
            } else {
                other += d;
            }
        }
        println!(
            "  API requests while idle: {:.2}/s besides the Lease ({:.2}/s renewing it), every client counted",
            other as f64 / idle,
            lease as f64 / idle
        );
    }
    phase.report(&cluster, pid, "idle");
    // The same binary watching a namespace with nothing in it: what the process
    // holds with no port, so the rest is per port.
    let mut empty = Command::new(env!("CARGO_BIN_EXE_patchbay"))
        .args(["run", "--kubeconfig"])
        .arg(&kubeconfig)
        .args(["--namespace", "bench-empty", "--leader-elect", "false"])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("patchbay run starts");
    tokio::time::sleep(Duration::from_secs(5)).await;
    let empty_rss = proc_kib(empty.id(), "VmRSS:");
    let _ = empty.kill();
    let _ = empty.wait();
    println!(
        "  operator RSS with no ports {:.1} MiB: {:.1} KiB per port beyond it",
        empty_rss as f64 / 1024.0,
        rss.saturating_sub(empty_rss) as f64 / total as f64
    );
    println!(
        "  targets: 10,000 ports all Active <= 5 s after the last link, idle RSS <= 48 MiB, idle CPU <= 0.5 %; 100,000 ports <= 60 s, <= 256 MiB, <= 2 %"
    );
    if heaptrack.is_some() {
        // The operator under heaptrack is a child of its script: stop it gracefully
        // so heaptrack writes its file, then wait for the script.
        let _ = Command::new("pkill")
            .args(["-TERM", "-f"])
            .arg(format!(
                "patchbay run --kubeconfig {}",
                kubeconfig.display()
            ))
            .status();
    } else {
        let _ = operator.kill();
    }
    let _ = operator.wait();
    drop(cluster);
}

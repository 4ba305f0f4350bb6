//! Failover benchmark (issue 58): what losing the operator costs the API server and
//! the devices. `BENCH_SWITCHES` x `BENCH_PORTS` fixture ports (default 2,000 x 50 =
//! 100,000, 1 ms per device operation), every port linked and Active, then:
//!
//! 1. **Takeover.** A second replica waits as the standby; the leader is killed with
//!    SIGKILL, and at once one port's configuration is changed. Printed: when the
//!    standby leads and when it acts on the changed port, both from the moment the
//!    dead leader's Lease expired (its `renewTime` + `leaseDurationSeconds`); then,
//!    over the minute after it leads, the ports written other than the changed one,
//!    the status writes and Events, the device operations (`changed`: a write;
//!    `unchanged`: an apply that found the device as wanted) and the device sessions
//!    (batches and drift sweeps) against what the drift sweep opens in a minute.
//! 2. **Restart.** The replica that took over stops gracefully (SIGTERM: it releases
//!    the Lease) and a new one starts cold: the same figures from its start, and its
//!    time to steady (every port reconciled once, the port queue empty).
//!
//! The fixture devices keep their ports in files every replica shares
//! (`--fixture-state-dir`), so a new leader meets the switches as the old one left
//! them, as it would a real fleet. The standby is cold: it holds the Lease's watch only and starts its caches when
//! it leads. Its memory and the list it does on taking over are printed, which is
//! what a warm standby would trade (the same caches held twice) for the time the
//! list takes. Prints figures, asserts nothing. Run: `make bench`, or
//! `cargo bench --bench failover`.

#[path = "support/cluster.rs"]
mod cluster;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use cluster::{BenchCluster, PortWatch, env_or, metric_sum, proc_cpu_ticks, proc_kib};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, Patch, PatchParams};
use patchbay::api::{PortState, SwitchPort, SwitchPortConfiguration};
use serde_json::json;

const NS: &str = "bench";
/// The operator's drift interval here (its default).
const DRIFT_INTERVAL_SECONDS: u64 = 300;
/// The port whose configuration changes at the takeover.
const CHANGED: &str = "sw000-p00";

/// One `patchbay run` process (leader election on, the Lease `default/patchbay`).
struct Replica {
    child: Child,
    metrics: SocketAddr,
    started: Instant,
}

impl Replica {
    /// Starts one; its fixture devices keep their ports in `devices`, shared by
    /// every replica, so each meets the switches as the last one left them.
    fn start(kubeconfig: &std::path::Path, devices: &std::path::Path) -> Self {
        let metrics = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free loopback port");
        let child = Command::new(env!("CARGO_BIN_EXE_patchbay"))
            .args(["run", "--kubeconfig"])
            .arg(kubeconfig)
            .arg("--metrics-address")
            .arg(metrics.to_string())
            .arg("--fixture-state-dir")
            .arg(devices)
            .args([
                "--fixture-latency-ms",
                "1",
                "--drift-interval-seconds",
                &DRIFT_INTERVAL_SECONDS.to_string(),
            ])
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("patchbay run starts");
        Self {
            child,
            metrics,
            started: Instant::now(),
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn metric(&self, name: &str) -> f64 {
        metric_sum(self.metrics, name).unwrap_or(0.0)
    }

    /// Waits until it leads (its `patchbay_leader` gauge is 1).
    async fn leading(&self) -> Instant {
        loop {
            if metric_sum(self.metrics, "patchbay_leader ") == Some(1.0) {
                return Instant::now();
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits until it has reconciled every port once and its port queue is empty.
    async fn steady(&self, ports: usize) -> Instant {
        loop {
            let reconciled = self.metric("patchbay_reconciles_total{controller=\"SwitchPort\"");
            if reconciled >= ports as f64 && self.metric("patchbay_port_queue_depth ") == 0.0 {
                return Instant::now();
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Device operations so far: (changed, unchanged), and device sessions (batches
    /// and drift sweeps).
    fn device(&self) -> ((f64, f64), (f64, f64)) {
        let ops = |outcome: &str| {
            self.metric(&format!(
                "patchbay_device_operations_total{{backend=\"fixture\",outcome=\"{outcome}\"}}"
            ))
        };
        (
            (ops("changed"), ops("unchanged")),
            (
                self.metric("patchbay_batch_size_count"),
                self.metric("patchbay_drift_sweeps_total"),
            ),
        )
    }
}

/// What the API server and the watch saw at one moment.
struct Reading {
    requests: std::collections::BTreeMap<(String, String), u64>,
    versions: HashMap<String, u64>,
}

impl Reading {
    fn take(cluster: &BenchCluster, watch: &PortWatch) -> Self {
        Self {
            requests: cluster.server.request_counts(),
            versions: watch.versions(),
        }
    }

    /// Prints what happened between `self` and now: ports written (but `CHANGED`),
    /// status writes and Events, and the replica's device work over `window`.
    fn report(&self, cluster: &BenchCluster, watch: &PortWatch, r: &Replica, what: &str) {
        let now = Reading::take(cluster, watch);
        let written = now
            .versions
            .iter()
            .filter(|(k, n)| *k != CHANGED && self.versions.get(*k) != Some(n))
            .count();
        let delta =
            |v: &str, res: &str| cluster::requests_between(&self.requests, &now.requests, v, res);
        let ((changed, unchanged), (batches, sweeps)) = r.device();
        println!(
            "  {what}: {written} ports written besides {CHANGED}; {} SwitchPort status writes, {} Switch status writes, {} Events, {} SwitchPort lists ({} watches); device operations {changed:.0} changed, {unchanged:.0} unchanged; device sessions {:.0} ({batches:.0} batches, {sweeps:.0} drift sweeps)",
            delta("patch", "switchports/status"),
            delta("patch", "switches/status"),
            delta("create", "events"),
            delta("list", "switchports"),
            delta("watch", "switchports"),
            batches + sweeps,
        );
    }
}

/// When the Lease, as last renewed, expires: `renewTime + leaseDurationSeconds`,
/// as an `Instant` of this process.
async fn lease_expiry(client: &kube::Client) -> Instant {
    let lease = Api::<Lease>::namespaced(client.clone(), "default")
        .get("patchbay")
        .await
        .expect("the Lease");
    let spec = lease.spec.expect("a Lease spec");
    let renewed = spec.renew_time.expect("renewTime").0;
    let duration = spec.lease_duration_seconds.expect("leaseDurationSeconds");
    let expires = renewed + jiff::SignedDuration::from_secs(duration as i64);
    let left = expires.duration_since(jiff::Timestamp::now());
    let now = Instant::now();
    if left.is_negative() {
        now - left.unsigned_abs()
    } else {
        now + left.unsigned_abs()
    }
}

/// `t` relative to `origin`, in seconds (negative: before it).
fn since(t: Instant, origin: Instant) -> f64 {
    if t >= origin {
        (t - origin).as_secs_f64()
    } else {
        -(origin - t).as_secs_f64()
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let switches_n = env_or("BENCH_SWITCHES", 2000);
    let ports_n = env_or("BENCH_PORTS", 50);
    let total = switches_n * ports_n;
    let cluster = BenchCluster::start("failover").await;
    let client = cluster.client.clone();
    cluster
        .namespace_with_login(NS, &[("username", "u"), ("password", "p")])
        .await;
    let keys = cluster::fixture_switches(&client, NS, switches_n, ports_n).await;
    let configs: Api<SwitchPortConfiguration> = Api::namespaced(client.clone(), NS);
    for c in 0..10 {
        cluster::create(
            &configs,
            json!({"apiVersion": "patchbay.dev/v1alpha1", "kind": "SwitchPortConfiguration",
                   "metadata": {"name": format!("cfg-{c}")},
                   "spec": {"untaggedVLAN": 100 + c, "description": format!("bench {c}")}}),
        )
        .await;
    }
    let ports: Api<SwitchPort> = Api::namespaced(client.clone(), NS);
    let watch = PortWatch::start(client.clone(), NS);
    // The switches outlive the operator: every replica's fixture devices keep their
    // ports here.
    let devices = cluster.dir.join("devices");
    std::fs::create_dir_all(&devices).unwrap();
    let mut leader = Replica::start(&cluster.kubeconfig, &devices);
    leader.leading().await;
    watch
        .until(&keys, "Idle", Duration::from_secs(900), |_, st| {
            st.state == Some(PortState::Idle)
        })
        .await;
    cluster::link_all(&ports, &keys).await;
    watch
        .until(&keys, "Active", Duration::from_secs(900), |_, st| {
            st.state == Some(PortState::Active)
        })
        .await;
    println!(
        "failover benchmark: {switches_n} switches x {ports_n} ports = {total} ports, fixture latency 1 ms, every port Active; Lease 15 s, renew deadline 10 s, retry 2 s (the defaults); drift interval {DRIFT_INTERVAL_SECONDS} s: {:.0} drift sweeps due per minute",
        60.0 * switches_n as f64 / DRIFT_INTERVAL_SECONDS as f64
    );

    // 1. Takeover.
    let standby = Replica::start(&cluster.kubeconfig, &devices);
    tokio::time::sleep(Duration::from_secs(10)).await;
    println!(
        "  standby (cold) before the takeover: RSS {:.1} MiB; the leader's {:.1} MiB",
        proc_kib(standby.pid(), "VmRSS:") as f64 / 1024.0,
        proc_kib(leader.pid(), "VmRSS:") as f64 / 1024.0
    );
    let before = Reading::take(&cluster, &watch);
    let generation = ports.get(CHANGED).await.unwrap().metadata.generation;
    let _ = leader.child.kill();
    let _ = leader.child.wait();
    let killed = Instant::now();
    let expiry = lease_expiry(&client).await;
    let cpu0 = proc_cpu_ticks(standby.pid());
    let next = ports
        .patch(
            CHANGED,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"configuration": {"name": "cfg-5"}}})),
        )
        .await
        .unwrap()
        .metadata
        .generation;
    assert_ne!(generation, next);
    let led = standby.leading().await;
    let acted = loop {
        let st = watch.status(CHANGED);
        if st.state != Some(PortState::Active) || st.observed_generation == next {
            break Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let done = loop {
        let st = watch.status(CHANGED);
        if st.state == Some(PortState::Active) && st.observed_generation == next {
            break Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let steady = standby.steady(total).await;
    println!(
        "  takeover: leader killed (SIGKILL) {:.1} s before its Lease expired; the standby led {:.1} s after the expiry, acted on the changed port {:.1} s after it (Active {:.1} s after), reconciled every port once {:.1} s after it",
        since(expiry, killed),
        since(led, expiry),
        since(acted, expiry),
        since(done, expiry),
        since(steady, expiry),
    );
    tokio::time::sleep_until((led + Duration::from_secs(60)).into()).await;
    before.report(&cluster, &watch, &standby, "the minute after the takeover");
    println!(
        "    the new leader: CPU {:.1} s in that minute, RSS {:.1} MiB (its caches filled by one list per kind)",
        (proc_cpu_ticks(standby.pid()) - cpu0) as f64 / 100.0,
        proc_kib(standby.pid(), "VmRSS:") as f64 / 1024.0
    );

    // 2. Restart: a graceful stop and a cold start.
    let mut old = standby;
    let _ = Command::new("kill")
        .args(["-TERM", &old.pid().to_string()])
        .status();
    let _ = old.child.wait();
    let before = Reading::take(&cluster, &watch);
    let fresh = Replica::start(&cluster.kubeconfig, &devices);
    let led = fresh.leading().await;
    let steady = fresh.steady(total).await;
    println!(
        "  restart: the old replica stopped (SIGTERM, Lease released); the new one led {:.1} s after starting and reconciled every port once {:.1} s after starting",
        since(led, fresh.started),
        since(steady, fresh.started),
    );
    tokio::time::sleep_until((fresh.started + Duration::from_secs(60)).into()).await;
    before.report(&cluster, &watch, &fresh, "its first minute");
    println!(
        "    the new replica: CPU {:.1} s in that minute, RSS {:.1} MiB",
        proc_cpu_ticks(fresh.pid()) as f64 / 100.0,
        proc_kib(fresh.pid(), "VmRSS:") as f64 / 1024.0
    );
    println!(
        "  targets: the standby acts on a changed port <= 10 s after the Lease expires; 0 device writes and 0 status writes for unchanged Active ports in the minute after a takeover or restart; device sessions in the first minute no more than the drift sweep's ({:.0})",
        60.0 * switches_n as f64 / DRIFT_INTERVAL_SECONDS as f64
    );
    let mut fresh = fresh;
    let _ = fresh.child.kill();
    let _ = fresh.child.wait();
    drop(cluster);
}

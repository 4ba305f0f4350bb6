//! Rollout benchmark (issue 57): one SwitchPortConfiguration carried by
//! `BENCH_SWITCHES` x `BENCH_PORTS` fixture ports (default 200 x 50 = 10,000, 1 ms
//! per device operation), edited three times:
//!
//! 1. **All at once**: `canary.ports` = every port, `maxUnavailable: 100%` (one
//!    wave: what an edit did before rollouts);
//! 2. **The default policy**: a canary of one port, then a quarter of the ports at
//!    a time and at most half a switch's, no minimum wait;
//! 3. **Ten percent at a time**, at most five ports a switch.
//!
//! For each: the time from the edit to every port read back Active on the new
//! revision and to the rollout's `Complete`, the waves, the device sessions (the
//! workers' batches), and the API writes (SwitchPort status, the pins on the
//! SwitchPorts, the configuration's status). One `patchbay run` process against
//! devplane. Prints figures, asserts nothing. Run: `make bench`, or
//! `cargo bench --bench rollout`.

#[path = "support/cluster.rs"]
mod cluster;

use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cluster::{BenchCluster, PortWatch, env_or, metric_sum, proc_cpu_ticks};
use kube::api::{Api, Patch, PatchParams};
use patchbay::api::{PortState, SwitchPort, SwitchPortConfiguration};
use serde_json::json;

const NS: &str = "bench";

/// The configuration's rollout status, read from the API server.
async fn rollout(configs: &Api<SwitchPortConfiguration>) -> patchbay::api::RolloutStatus {
    configs
        .get("shared")
        .await
        .ok()
        .and_then(|c| c.status?.rollout)
        .unwrap_or_default()
}

/// One edit rolled out: prints its figures.
#[allow(clippy::too_many_arguments)]
async fn edit(
    cluster: &BenchCluster,
    configs: &Api<SwitchPortConfiguration>,
    watch: &PortWatch,
    keys: &[String],
    metrics: SocketAddr,
    pid: u32,
    what: &str,
    spec: serde_json::Value,
) {
    let requests = cluster.server.request_counts();
    let batches0 = metric_sum(metrics, "patchbay_batch_size_count").unwrap_or(0.0);
    let cpu0 = proc_cpu_ticks(pid);
    let started = Instant::now();
    let edited = configs
        .patch(
            "shared",
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": spec })),
        )
        .await
        .expect("the edit");
    let hash = edited.spec.content_hash();
    watch
        .until(
            keys,
            "Active on the new revision",
            Duration::from_secs(1800),
            |_, st| {
                st.state == Some(PortState::Active)
                    && st.configuration_hash.as_deref() == Some(hash.as_str())
            },
        )
        .await;
    let active = started.elapsed();
    let r = loop {
        let r = rollout(configs).await;
        if r.phase == "Complete" && r.current_revision == r.update_revision && r.updated_ports > 0 {
            break r;
        }
        assert!(
            started.elapsed() < Duration::from_secs(1800),
            "not complete: {r:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let complete = started.elapsed();
    let now = cluster.server.request_counts();
    let delta = |v: &str, res: &str| cluster::requests_between(&requests, &now, v, res);
    let batches = metric_sum(metrics, "patchbay_batch_size_count").unwrap_or(0.0) - batches0;
    println!(
        "  {what}: every port Active on the new revision {:.1} s after the edit, Complete {:.1} s after it, in {} wave(s); {batches:.0} device sessions ({:.1} ports each); {} SwitchPort status writes, {} pins (SwitchPort patches), {} configuration status writes; operator CPU {:.1} s",
        active.as_secs_f64(),
        complete.as_secs_f64(),
        r.wave,
        keys.len() as f64 / batches.max(1.0),
        delta("patch", "switchports/status"),
        delta("patch", "switchports"),
        delta("patch", "switchportconfigurations/status"),
        (proc_cpu_ticks(pid) - cpu0) as f64 / 100.0,
    );
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let switches_n = env_or("BENCH_SWITCHES", 200);
    let ports_n = env_or("BENCH_PORTS", 50);
    let total = switches_n * ports_n;
    let cluster = BenchCluster::start("rollout").await;
    let client = cluster.client.clone();
    cluster
        .namespace_with_login(NS, &[("username", "u"), ("password", "p")])
        .await;
    let keys = cluster::fixture_switches(&client, NS, switches_n, ports_n).await;
    let configs: Api<SwitchPortConfiguration> = Api::namespaced(client.clone(), NS);
    cluster::create(
        &configs,
        json!({"apiVersion": "patchbay.dev/v1alpha1", "kind": "SwitchPortConfiguration",
               "metadata": {"name": "shared"}, "spec": {"untaggedVLAN": 100}}),
    )
    .await;
    let ports: Api<SwitchPort> = Api::namespaced(client.clone(), NS);
    let watch = PortWatch::start(client.clone(), NS);
    let metrics = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port");
    let mut operator = Command::new(env!("CARGO_BIN_EXE_patchbay"))
        .args(["run", "--kubeconfig"])
        .arg(&cluster.kubeconfig)
        .arg("--metrics-address")
        .arg(metrics.to_string())
        .args(["--fixture-latency-ms", "1"])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("patchbay run starts");
    let pid = operator.id();
    watch
        .until(&keys, "Idle", Duration::from_secs(900), |_, st| {
            st.state == Some(PortState::Idle)
        })
        .await;
    cluster::link_each(&ports, &keys, |_| "shared".to_owned()).await;
    watch
        .until(&keys, "Active", Duration::from_secs(900), |_, st| {
            st.state == Some(PortState::Active)
        })
        .await;
    println!(
        "rollout benchmark: {switches_n} switches x {ports_n} ports = {total} ports on one configuration, fixture latency 1 ms, every port Active"
    );
    let edits = [
        (
            "all at once (one wave)",
            json!({"untaggedVLAN": 101, "rollout": {"canary": {"ports": total},
                   "maxUnavailable": "100%", "maxUnavailablePerSwitch": "100%"}}),
        ),
        (
            "the default policy (canary 1, 25%, 50% a switch)",
            json!({"untaggedVLAN": 102, "rollout": null}),
        ),
        (
            "10% at a time, 5 a switch",
            json!({"untaggedVLAN": 103, "rollout": {"maxUnavailable": "10%",
                   "maxUnavailablePerSwitch": 5}}),
        ),
    ];
    for (what, spec) in edits {
        edit(&cluster, &configs, &watch, &keys, metrics, pid, what, spec).await;
    }
    let _ = operator.kill();
    let _ = operator.wait();
}

//! The cost of a failure that lasts: every port of a fleet refused by its device
//! (fixture devices told to reject each port's change), the operator in this
//! process against devplane, with a short backoff (0.1 s doubling to 1 s) so every
//! port reaches the cap within seconds. Once each port has failed 5 times (its next
//! look is past the cap), counts over a window the device attempts (the fixture
//! devices' own logs) and the requests devplane received, per second:
//! - with the operator's one recheck budget at its default (2 looks a second);
//! - with the budget out of the way (10⁶ a second): what the backoff alone asks, one
//!   look per port per cap.
//!
//! Prints figures, asserts nothing. Run: `cargo bench --bench retry` (in `make
//! bench`); `BENCH_RETRY_SWITCHES` × `BENCH_RETRY_PORTS` ports (default 50 × 40),
//! `BENCH_RETRY_SECONDS` the window (default 30).

#[path = "support/cluster.rs"]
#[allow(dead_code)]
mod cluster;
#[allow(dead_code)]
mod support;

use std::time::{Duration, Instant};

use cluster::{BenchCluster, PortWatch, create, fixture_switches, request_diff};
use kube::api::{Api, Patch, PatchParams};
use patchbay::api::{PortState, SwitchPort, SwitchPortConfiguration};
use patchbay::backends::Backends;
use patchbay::decide::state_machine::Backoff;
use patchbay::settings::Settings;
use patchbay_providers::fixture::{FixtureFailure, LoggedOperation};
use patchbay_providers::values::PortName;
use serde_json::json;
use support::env_usize;

const NS: &str = "bench";

/// What one run measured.
struct Figures {
    ports: usize,
    window: Duration,
    attempts: usize,
    requests: u64,
    top: Vec<String>,
}

async fn run(switches: usize, ports: usize, window: Duration, rechecks: f64) -> Figures {
    let cluster = BenchCluster::start("retrybench").await;
    let client = cluster.client.clone();
    cluster
        .namespace_with_login(NS, &[("username", "u"), ("password", "p")])
        .await;
    let keys = fixture_switches(&client, NS, switches, ports).await;
    create(
        &Api::<SwitchPortConfiguration>::namespaced(client.clone(), NS),
        json!({"apiVersion": "patchbay.dev/v1alpha1", "kind": "SwitchPortConfiguration",
               "metadata": {"name": "cfg"}, "spec": {"untaggedVLAN": 100}}),
    )
    .await;
    let watch = PortWatch::start(client.clone(), NS);
    let backends = Backends::default();
    let fixtures = backends.fixtures.clone();
    let settings = Settings {
        namespace: Some(NS.into()),
        drift_interval: Duration::from_secs(3600),
        backoff: Backoff {
            base: Duration::from_millis(100),
            cap: Duration::from_secs(1),
        },
        rechecks_per_second: rechecks,
        ..Settings::default()
    };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(patchbay::controllers::run(
        client.clone(),
        settings,
        backends,
        patchbay::probes::Probes::default(),
        async move {
            let _ = stopped.await;
        },
    ));
    watch
        .until(&keys, "Idle", Duration::from_secs(300), |_, st| {
            st.state == Some(PortState::Idle)
        })
        .await;
    // Every device refuses every port's change from now on.
    for s in 0..switches {
        let device = fixtures
            .get(NS, &format!("sw{s:03}"))
            .expect("the fixture device");
        for i in 0..ports {
            device.fail_port(
                &PortName::parse(&format!("Gi0/{i}")).unwrap(),
                Some(FixtureFailure::Rejected),
            );
        }
    }
    let port_api: Api<SwitchPort> = Api::namespaced(client.clone(), NS);
    for k in &keys {
        port_api
            .patch(
                k,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"configuration": {"name": "cfg"}}})),
            )
            .await
            .unwrap();
    }
    // Five failures: 0.1 + 0.2 + 0.4 + 0.8 s of backoff behind each port; its next
    // look is at the 1 s cap.
    watch
        .until(&keys, "5 failures", Duration::from_secs(600), |_, st| {
            st.failure_count.unwrap_or(0) >= 5
        })
        .await;
    let attempts = || -> usize {
        (0..switches)
            .filter_map(|s| fixtures.get(NS, &format!("sw{s:03}")))
            .map(|d| {
                d.operations()
                    .iter()
                    .filter(|o| matches!(o, LoggedOperation::Failed { .. }))
                    .count()
            })
            .sum()
    };
    let (a0, r0, t0) = (attempts(), cluster.server.request_counts(), Instant::now());
    tokio::time::sleep(window).await;
    let (a1, r1, window) = (attempts(), cluster.server.request_counts(), t0.elapsed());
    let _ = stop.send(());
    let requests = r1.values().sum::<u64>() - r0.values().sum::<u64>();
    // Watches are long requests counted once: what remains is the operator's calls.
    Figures {
        ports: keys.len(),
        window,
        attempts: a1 - a0,
        requests,
        top: request_diff(&r0, &r1, 4),
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let switches = env_usize("BENCH_RETRY_SWITCHES", 50);
    let ports = env_usize("BENCH_RETRY_PORTS", 40);
    let window = Duration::from_secs(env_usize("BENCH_RETRY_SECONDS", 30) as u64);
    let budget = patchbay::decide::retry::RECHECKS_PER_SECOND;
    println!(
        "a failure that lasts: {} ports on {switches} fixture switches, every change refused by the device, backoff 0.1 s doubling to 1 s; over {} s once each port is at the cap:",
        switches * ports,
        window.as_secs()
    );
    for (what, rate) in [
        (
            format!("the recheck budget at {budget}/s (default)"),
            budget,
        ),
        ("no budget (the backoff alone)".to_owned(), 1e6),
    ] {
        let f = run(switches, ports, window, rate).await;
        let secs = f.window.as_secs_f64();
        println!(
            "  {what}: {:.1} device attempts/s, {:.1} API requests/s ({} ports; most: {})",
            f.attempts as f64 / secs,
            f.requests as f64 / secs,
            f.ports,
            f.top.join(", ")
        );
    }
}

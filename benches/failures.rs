//! Failure-rate benchmark: how often a failing port touches the device, counts a
//! failure and writes a Warning Event, with the operator's default settings (backoff
//! 5 s doubling to 5 min), over a window (60 s; `BENCH_FAILURE_SECONDS` changes it).
//! The operator runs as its own process (`patchbay run`) against devplane; the
//! devices are fake-switches simulators whose launcher logs every TCP connection, so
//! SSH handshakes are counted at the device. Prints figures, asserts nothing.
//!
//! Cases, side by side in one run:
//! - `host-key`: a ProviderSwitch pinned to the wrong host key, one port linked;
//! - `invalid`: a configuration the dialect cannot apply (`mtu: 9000` on `ios`),
//!   one port linked;
//! - `down`: a switch stopped before four of its ports are linked; after the window a
//!   fresh switch is started at the same address and the time until every port is
//!   Active is printed.
//!
//! Run: `cargo bench --bench failures` (in `make bench`).

#[path = "support/cluster.rs"]
mod cluster;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cluster::{BenchCluster, proc_cpu_ticks};
use k8s_openapi::api::events::v1::Event;
use kube::Client;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use patchbay::api::{PortState, ProviderSwitch, Switch, SwitchPort, SwitchPortConfiguration};
use patchbay_testbed::{FakeSwitches, SimSpec, SimSwitch};
use serde_json::json;

const WRONG_PIN: &str = "SHA256:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";

fn window() -> Duration {
    Duration::from_secs(
        std::env::var("BENCH_FAILURE_SECONDS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(60),
    )
}

async fn create<K>(client: &Client, ns: &str, value: serde_json::Value)
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
{
    let obj: K = serde_json::from_value(value).unwrap();
    Api::<K>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &obj)
        .await
        .unwrap();
}

/// Namespace, Secret, ProviderSwitch (pinned to `pin`), Switch with `ports`.
async fn switch(
    cluster: &BenchCluster,
    ns: &str,
    sim: &SimSwitch,
    pin: &str,
    ports: &[(&str, &str)],
) {
    let client = &cluster.client;
    cluster
        .namespace_with_login(
            ns,
            &[
                ("username", &sim.username),
                ("password", &sim.password),
                ("enablePassword", &sim.enable_password),
            ],
        )
        .await;
    create::<ProviderSwitch>(
        client,
        ns,
        json!({"apiVersion": "patchbay.dev/v1alpha1", "kind": "ProviderSwitch",
               "metadata": {"name": "tor"},
               "spec": {"backend": "ssh", "os": "ios", "address": sim.address, "port": sim.port,
                        "credentialsSecretRef": {"name": "login"},
                        "hostKey": {"fingerprint": pin}}}),
    )
    .await;
    let map: serde_json::Map<String, serde_json::Value> = ports
        .iter()
        .map(|(k, d)| (k.to_string(), json!({"name": d})))
        .collect();
    create::<Switch>(
        client,
        ns,
        json!({"apiVersion": "patchbay.dev/v1alpha1", "kind": "Switch",
               "metadata": {"name": "tor"},
               "spec": {"provider": {"name": "tor"}, "ports": map}}),
    )
    .await;
}

async fn configuration(client: &Client, ns: &str, name: &str, spec: serde_json::Value) {
    create::<SwitchPortConfiguration>(
        client,
        ns,
        json!({"apiVersion": "patchbay.dev/v1alpha1", "kind": "SwitchPortConfiguration",
               "metadata": {"name": name}, "spec": spec}),
    )
    .await;
}

async fn port(client: &Client, ns: &str, name: &str) -> Option<SwitchPort> {
    Api::<SwitchPort>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .ok()
        .flatten()
}

async fn wait_state(client: &Client, ns: &str, name: &str, state: PortState) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if port(client, ns, name)
            .await
            .and_then(|p| p.status?.state)
            .is_some_and(|s| s == state)
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{ns}/{name} never reached {state}");
}

async fn link(client: &Client, ns: &str, name: &str, configuration: &str) {
    wait_state(client, ns, name, PortState::Idle).await;
    Api::<SwitchPort>::namespaced(client.clone(), ns)
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"configuration": {"name": configuration}}})),
        )
        .await
        .unwrap();
}

/// Warning Event objects about `port`, and the occurrences they stand for (a series
/// counts as its `series.count`).
async fn warnings(client: &Client, ns: &str, port: &str) -> (usize, i32) {
    let list = Api::<Event>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .unwrap();
    let mine: Vec<&Event> = list
        .items
        .iter()
        .filter(|e| {
            e.type_.as_deref() == Some("Warning")
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(port)
        })
        .collect();
    let occurrences = mine
        .iter()
        .map(|e| e.series.as_ref().map_or(1, |s| s.count))
        .sum();
    (mine.len(), occurrences)
}

fn per_minute(n: f64, window: Duration) -> f64 {
    n * 60.0 / window.as_secs_f64()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let window = window();
    let cluster = BenchCluster::start("failbench").await;
    let (client, kubeconfig) = (cluster.client.clone(), cluster.kubeconfig.clone());
    tokio::time::sleep(Duration::from_millis(200)).await;

    let sims = FakeSwitches::start(&[
        SimSpec::new("hk", "cisco_generic"),
        SimSpec::new("iv", "cisco_generic"),
    ])
    .expect("simulators (make fake-switch)");
    let mut down_sim = FakeSwitches::start(&[SimSpec::new("dn", "cisco_generic")]).unwrap();
    let dn = down_sim.get("dn").clone();

    let (hk, iv) = (sims.get("hk").clone(), sims.get("iv").clone());
    switch(
        &cluster,
        "host-key",
        &hk,
        WRONG_PIN,
        &[("p1", "FastEthernet0/1")],
    )
    .await;
    configuration(&client, "host-key", "access", json!({"untaggedVLAN": 10})).await;
    switch(
        &cluster,
        "invalid",
        &iv,
        &iv.host_key_fingerprint,
        &[("p1", "FastEthernet0/1")],
    )
    .await;
    configuration(
        &client,
        "invalid",
        "jumbo",
        json!({"untaggedVLAN": 10, "mtu": 9000}),
    )
    .await;
    let down_ports = [
        ("p1", "FastEthernet0/1"),
        ("p2", "FastEthernet0/2"),
        ("p3", "FastEthernet0/3"),
        ("p4", "FastEthernet0/4"),
    ];
    switch(&cluster, "down", &dn, &dn.host_key_fingerprint, &down_ports).await;
    configuration(&client, "down", "access", json!({"untaggedVLAN": 20})).await;

    let mut operator = Command::new(env!("CARGO_BIN_EXE_patchbay"))
        .args(["run", "--kubeconfig"])
        .arg(&kubeconfig)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("patchbay run");
    for ns in ["host-key", "invalid", "down"] {
        wait_state(&client, ns, "p1", PortState::Idle).await;
    }
    down_sim.stop();
    let cpu0 = proc_cpu_ticks(operator.id());
    let (hk0, iv0) = (sims.connections("hk"), sims.connections("iv"));
    let start = Instant::now();
    link(&client, "host-key", "p1", "access").await;
    link(&client, "invalid", "p1", "jumbo").await;
    for (k, _) in &down_ports {
        link(&client, "down", k, "access").await;
    }
    tokio::time::sleep(window.saturating_sub(start.elapsed())).await;
    let elapsed = start.elapsed();
    let cpu = (proc_cpu_ticks(operator.id()) - cpu0) as f64 / 100.0;
    let hk_conn = sims.connections("hk") - hk0;
    let iv_conn = sims.connections("iv") - iv0;
    let failures =
        |p: Option<SwitchPort>| p.and_then(|p| p.status?.failure_count).unwrap_or(0).max(0) as f64;
    let hk_fail = failures(port(&client, "host-key", "p1").await);
    let iv_fail = failures(port(&client, "invalid", "p1").await);
    let mut dn_fail = 0.0;
    for (k, _) in &down_ports {
        dn_fail += failures(port(&client, "down", k).await);
    }
    let dn_fail = dn_fail / down_ports.len() as f64;
    let (hk_ev, hk_occ) = warnings(&client, "host-key", "p1").await;
    let (iv_ev, iv_occ) = warnings(&client, "invalid", "p1").await;
    let mut dn_ev = 0;
    for (k, _) in &down_ports {
        dn_ev += warnings(&client, "down", k).await.0;
    }

    // The switch comes back empty at the same address: time until every port is Active.
    let back = Instant::now();
    let _fresh = FakeSwitches::start(&[SimSpec::again(&dn)]).unwrap();
    for (k, _) in &down_ports {
        wait_state(&client, "down", k, PortState::Active).await;
    }
    let recovery = back.elapsed();
    let _ = operator.kill();
    let _ = operator.wait();

    let w = elapsed;
    println!(
        "failure rates with default settings over {:.0} s (operator process, release build)",
        w.as_secs_f64()
    );
    println!(
        "{:<10} {:>22} {:>24} {:>22}",
        "case", "device attempts/min", "failureCount/min/port", "Warning Events/min"
    );
    println!(
        "{:<10} {:>22.1} {:>24.1} {:>22}",
        "host-key",
        per_minute(hk_conn as f64, w),
        per_minute(hk_fail, w),
        format!("{:.1} ({} objects)", per_minute(hk_occ as f64, w), hk_ev)
    );
    println!(
        "{:<10} {:>22.1} {:>24.1} {:>22}",
        "invalid",
        per_minute(iv_conn as f64, w),
        per_minute(iv_fail, w),
        format!("{:.1} ({} objects)", per_minute(iv_occ as f64, w), iv_ev)
    );
    println!(
        "{:<10} {:>22} {:>24.1} {:>22}",
        "down",
        "(switch stopped)",
        per_minute(dn_fail, w),
        format!("{dn_ev} objects, 4 ports")
    );
    println!(
        "operator CPU over the window: {:.1} % of a core",
        cpu * 100.0 / w.as_secs_f64()
    );
    println!(
        "down: a fresh switch at the same address -> all 4 ports Active in {:.2} s",
        recovery.as_secs_f64()
    );
}

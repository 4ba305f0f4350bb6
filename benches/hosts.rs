//! Ports following their host: the operator in this process against devplane.
//! Measures, from a watch on the ports (not polling):
//! - claim created (with the installer's signal already given) → every port of its
//!   Servers Active on the tenant configuration;
//! - claim deleted → every port Active on the provisioning configuration again;
//!
//! for 1 claim of 2 Servers cabled to a simulated Cisco (SSH), and for 50 claims
//! of 2 Servers over 200 fixture switches (1 ms per device operation). The share
//! spent in the device: on the Cisco, the same changes replayed straight through the
//! SSH backend (one verified batch: the device's floor); on the fixtures, the same
//! run with 0 ms device operations (what is left is patchbay's). Prints figures,
//! asserts nothing. Run: `make bench` (or `cargo bench --bench hosts`);
//! `BENCH_HOST_ROUNDS` sets the Cisco rounds (default 10).

#[path = "support/cluster.rs"]
#[allow(dead_code)]
mod cluster;
#[allow(dead_code)]
mod support;

use std::time::{Duration, Instant};

use cluster::{BenchCluster, PortWatch, create, fixture_switches};
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use patchbay::api::{
    PortState, ProviderSwitch, Server, ServerClaim, Switch, SwitchPortConfiguration,
};
use patchbay::backends::Backends;
use patchbay::settings::Settings;
use patchbay_providers::values::PortName;
use patchbay_testbed::{FakeSwitches, SimSpec};
use serde_json::json;
use support::{median, ops, ssh_backend, timed};

/// Waits until every port of `ports` is Active on `configuration`.
async fn on(watch: &PortWatch, ports: &[String], configuration: &str) {
    let what = format!("Active on {configuration}");
    watch
        .until(ports, &what, Duration::from_secs(120), |_, st| {
            st.state == Some(PortState::Active)
                && st
                    .configuration_ref
                    .as_ref()
                    .is_some_and(|c| c.name == configuration)
        })
        .await;
}

fn operator(client: kube::Client, ns: &str, latency: Duration) -> tokio::sync::oneshot::Sender<()> {
    let settings = Settings {
        namespace: Some(ns.into()),
        batch_window: Duration::from_millis(50),
        drift_interval: Duration::from_secs(600),
        fixture_latency: latency,
        ..Settings::default()
    };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(patchbay::controllers::run(
        client,
        settings,
        Backends {
            fixture_latency: latency,
            ..Default::default()
        },
        patchbay::probes::Probes::default(),
        async move {
            let _ = stopped.await;
        },
    ));
    stop
}

async fn configurations(client: &kube::Client, ns: &str) {
    let api: Api<SwitchPortConfiguration> = Api::namespaced(client.clone(), ns);
    for (name, vlan) in [("pxe", 10), ("tenant", 100)] {
        create(
            &api,
            json!({"apiVersion": "patchbay.dev/v1alpha1", "kind": "SwitchPortConfiguration",
                   "metadata": {"name": name}, "spec": {"untaggedVLAN": vlan}}),
        )
        .await;
    }
}

/// A Server of site `site` with one NIC per port, each on PXE while provisioning,
/// with the installer's signal already given.
async fn server(
    servers: &Api<Server>,
    ns: &str,
    name: &str,
    n: usize,
    site: &str,
    ports: &[String],
) {
    let nics: Vec<serde_json::Value> = ports
        .iter()
        .enumerate()
        .map(|(i, p)| {
            json!({"name": format!("eth{i}"), "port": {"name": p, "namespace": ns},
                   "provisioningConfiguration": {"name": "pxe"}})
        })
        .collect();
    create(
        servers,
        json!({"apiVersion": "patchbay.dev/v1alpha1", "kind": "Server",
               "metadata": {"name": name, "annotations": {"patchbay.dev/provisioned": "true"}},
               "spec": {"bmc": {"address": "10.0.0.1",
                                "credentialsSecretRef": {"name": "login", "namespace": ns}},
                        "bootMac": format!("aa:bb:{:02x}:{:02x}:00:01", n / 256, n % 256),
                        "site": site, "nics": nics}}),
    )
    .await;
}

/// A claim on 2 Servers whose NICs `eth0`… `eth<nics-1>` all carry `tenant`.
fn claim(name: &str, site: &str, nics: usize) -> serde_json::Value {
    let network: Vec<serde_json::Value> = (0..nics)
        .map(|i| {
            json!({"configurationRef": {"kind": "SwitchPortConfiguration", "name": "tenant"},
                   "nicHint": {"name": format!("eth{i}")}})
        })
        .collect();
    json!({"apiVersion": "patchbay.dev/v1alpha1", "kind": "ServerClaim",
           "metadata": {"name": name},
           "spec": {"site": site, "roles": [{"name": "worker", "count": 2}],
                    "networkConfiguration": network}})
}

/// The installer's signal again (it is consumed on release).
async fn signal(servers: &Api<Server>, names: &[String]) {
    for n in names {
        servers
            .patch(
                n,
                &PatchParams::default(),
                &Patch::Merge(
                    json!({"metadata": {"annotations": {"patchbay.dev/provisioned": "true"}}}),
                ),
            )
            .await
            .unwrap();
    }
}

async fn gone(claims: &Api<ServerClaim>, names: &[String]) {
    loop {
        let left = claims.list(&Default::default()).await.unwrap().items;
        if !left
            .iter()
            .any(|c| names.contains(&c.metadata.name.clone().unwrap_or_default()))
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

async fn cisco(rounds: usize) {
    let sims = FakeSwitches::start(&[SimSpec::new("tor1", "cisco_generic")])
        .expect("simulator (make fake-switch)");
    let sim = sims.get("tor1").clone();
    let cluster = BenchCluster::start("hostbench-cisco").await;
    let client = cluster.client.clone();
    let ns = "bench";
    cluster
        .namespace_with_login(
            ns,
            &[
                ("username", sim.username.as_str()),
                ("password", sim.password.as_str()),
                ("enablePassword", sim.enable_password.as_str()),
            ],
        )
        .await;
    create(
        &Api::<ProviderSwitch>::namespaced(client.clone(), ns),
        json!({"apiVersion": "patchbay.dev/v1alpha1", "kind": "ProviderSwitch",
               "metadata": {"name": "tor1"},
               "spec": {"backend": "ssh", "os": "ios", "address": sim.address, "port": sim.port,
                        "credentialsSecretRef": {"name": "login"},
                        "hostKey": {"fingerprint": sim.host_key_fingerprint}}}),
    )
    .await;
    create(
        &Api::<Switch>::namespaced(client.clone(), ns),
        json!({"apiVersion": "patchbay.dev/v1alpha1", "kind": "Switch", "metadata": {"name": "tor1"},
               "spec": {"provider": {"name": "tor1"}, "ports": {
                   "p1": {"name": "FastEthernet0/1"}, "p2": {"name": "FastEthernet0/2"}}}}),
    )
    .await;
    configurations(&client, ns).await;
    let servers: Api<Server> = Api::all(client.clone());
    let names = vec!["cisco-a".to_string(), "cisco-b".to_string()];
    server(&servers, ns, &names[0], 1, "cisco", &["p1".into()]).await;
    server(&servers, ns, &names[1], 2, "cisco", &["p2".into()]).await;
    let ports = PortWatch::start(client.clone(), ns);
    let _stop = operator(client.clone(), ns, Duration::ZERO);
    let port_names = vec!["p1".to_string(), "p2".to_string()];
    on(&ports, &port_names, "pxe").await;
    let claims: Api<ServerClaim> = Api::namespaced(client.clone(), ns);
    let (mut bind, mut release) = (Vec::new(), Vec::new());
    for r in 0..rounds {
        let name = format!("c{r}");
        let t = Instant::now();
        create(&claims, claim(&name, "cisco", 1)).await;
        on(&ports, &port_names, "tenant").await;
        bind.push(t.elapsed());
        let t = Instant::now();
        claims
            .delete(&name, &DeleteParams::default())
            .await
            .unwrap();
        on(&ports, &port_names, "pxe").await;
        release.push(t.elapsed());
        gone(&claims, std::slice::from_ref(&name)).await;
        signal(&servers, &names).await;
    }
    // The device's floor: the same two changes as one verified batch, straight
    // through the SSH backend.
    let sw = ssh_backend(&sim, "ios");
    let device_ports = [
        PortName::parse("FastEthernet0/1").unwrap(),
        PortName::parse("FastEthernet0/2").unwrap(),
    ];
    let mut floor = Vec::new();
    for r in 0..rounds {
        floor.push(timed(&sw, &ops(&device_ports, if r % 2 == 0 { 100 } else { 10 })).await);
    }
    let (bind, release, floor) = (median(bind), median(release), median(floor));
    println!(
        "1 claim of 2 Servers, 2 ports on a simulated Cisco (SSH), batch window 50 ms, \
         median of {rounds}:"
    );
    println!(
        "  claim created → both ports Active on the tenant configuration: {:.1} ms \
         (device {:.1} ms = {:.0} %, patchbay {:.0} %)",
        ms(bind),
        ms(floor),
        100.0 * floor.as_secs_f64() / bind.as_secs_f64(),
        100.0 - 100.0 * floor.as_secs_f64() / bind.as_secs_f64()
    );
    println!(
        "  claim deleted → both ports Active on the provisioning configuration: {:.1} ms \
         (device {:.1} ms = {:.0} %, patchbay {:.0} %)",
        ms(release),
        ms(floor),
        100.0 * floor.as_secs_f64() / release.as_secs_f64(),
        100.0 - 100.0 * floor.as_secs_f64() / release.as_secs_f64()
    );
}

/// 50 claims × 2 Servers × 2 NICs over 200 fixture switches; returns (bind, release).
async fn fleet(latency: Duration) -> (Duration, Duration) {
    const SWITCHES: usize = 200;
    const CLAIMS: usize = 50;
    let cluster = BenchCluster::start("hostbench-fleet").await;
    let client = cluster.client.clone();
    let ns = "bench";
    cluster
        .namespace_with_login(ns, &[("username", "u"), ("password", "p")])
        .await;
    fixture_switches(&client, ns, SWITCHES, 1).await;
    configurations(&client, ns).await;
    let servers: Api<Server> = Api::all(client.clone());
    // Server i has NICs on switches 2i and 2i+1 (one NIC per switch: 100 Servers).
    let mut all_ports = Vec::new();
    let mut names = Vec::new();
    let site = format!("fleet-{}", latency.as_millis());
    for i in 0..SWITCHES / 2 {
        let p: Vec<String> = (0..2).map(|k| format!("sw{:03}-p00", 2 * i + k)).collect();
        let name = format!("{site}-{i:03}");
        server(&servers, ns, &name, 1000 + i, &site, &p).await;
        all_ports.extend(p);
        names.push(name);
    }
    let ports = PortWatch::start(client.clone(), ns);
    let _stop = operator(client.clone(), ns, latency);
    on(&ports, &all_ports, "pxe").await;
    let claims: Api<ServerClaim> = Api::namespaced(client.clone(), ns);
    let t = Instant::now();
    for c in 0..CLAIMS {
        create(&claims, claim(&format!("claim-{c:02}"), &site, 2)).await;
    }
    on(&ports, &all_ports, "tenant").await;
    let bind = t.elapsed();
    let t = Instant::now();
    for c in 0..CLAIMS {
        claims
            .delete(&format!("claim-{c:02}"), &DeleteParams::default())
            .await
            .unwrap();
    }
    on(&ports, &all_ports, "pxe").await;
    let release = t.elapsed();
    (bind, release)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let rounds = std::env::var("BENCH_HOST_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    cisco(rounds).await;
    let (bind1, release1) = fleet(Duration::from_millis(1)).await;
    let (bind0, release0) = fleet(Duration::ZERO).await;
    println!("50 claims of 2 Servers (200 ports, one per fixture switch), created at once:");
    for (what, with, without) in [
        (
            "created → all 200 ports Active on the tenant configuration",
            bind1,
            bind0,
        ),
        (
            "deleted → all 200 ports Active on the provisioning configuration",
            release1,
            release0,
        ),
    ] {
        // The device's share is what 1 ms per operation adds; a negative difference
        // is run-to-run noise larger than the device's part.
        let device = with.as_secs_f64() - without.as_secs_f64();
        println!(
            "  claims {what}: {:.2} s with 1 ms device operations, {:.2} s with 0 ms \
             (device {:+.0} % of the time, i.e. {})",
            with.as_secs_f64(),
            without.as_secs_f64(),
            100.0 * device / with.as_secs_f64(),
            if device <= 0.0 {
                "within noise: the time is patchbay's"
            } else {
                "the rest is patchbay's"
            }
        );
    }
}

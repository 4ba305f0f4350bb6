//! devplane benchmark: 10,000 creates of SwitchPortConfigurations (schema-validated)
//! through kube-rs, 16 in flight, while 3 watchers stream the same resource. Prints
//! creates per second and the p50/p99/max delay from sending a create to each
//! watcher receiving its ADDED event. Asserts nothing.
//!
//! Run: `make bench` (or `cargo bench --bench devplane`). Targets on the 2-core
//! machine: >= 2,000 creates/s, p99 delivery <= 10 ms.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ListParams, PostParams, WatchEvent, WatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, CustomResourceExt};
use patchbay::api::{PortSettingsSpec, SwitchPortConfiguration, SwitchPortConfigurationSpec};

const CREATES: usize = 10_000;
const IN_FLIGHT: usize = 16;
const WATCHERS: usize = 3;

fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let server = patchbay_devplane::DevPlane::start(patchbay_devplane::Config::default())
        .expect("devplane starts");
    let dir = std::env::temp_dir().join(format!("patchbay-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = dir.join("kubeconfig");
    server.write_kubeconfig(&kubeconfig).unwrap();
    let kc = Kubeconfig::read_from(&kubeconfig).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .unwrap();
    let client = Client::try_from(config).unwrap();

    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.create(&PostParams::default(), &SwitchPortConfiguration::crd())
        .await
        .unwrap();
    let api: Api<SwitchPortConfiguration> = Api::namespaced(client.clone(), "default");
    let start_rv = api
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();

    let mut watchers = Vec::new();
    for _ in 0..WATCHERS {
        let api = api.clone();
        let rv = start_rv.clone();
        watchers.push(tokio::spawn(async move {
            let mut stream = api
                .watch(&WatchParams::default().timeout(600), &rv)
                .await
                .unwrap()
                .boxed();
            let mut delays = Vec::with_capacity(CREATES);
            while delays.len() < CREATES {
                match stream.try_next().await {
                    Ok(Some(WatchEvent::Added(o))) => {
                        let sent: u128 = o
                            .metadata
                            .annotations
                            .as_ref()
                            .and_then(|a| a.get("bench/sent-ns"))
                            .and_then(|s| s.parse().ok())
                            .unwrap_or(0);
                        delays.push((now_ns() - sent) as f64 / 1e6);
                    }
                    Ok(Some(_)) => {}
                    other => panic!("watch ended early: {other:?}"),
                }
            }
            delays
        }));
    }
    tokio::time::sleep(Duration::from_millis(200)).await;

    let started = Instant::now();
    futures::stream::iter(0..CREATES)
        .map(|i| {
            let api = api.clone();
            async move {
                let mut obj = SwitchPortConfiguration::new(
                    &format!("cfg-{i:05}"),
                    SwitchPortConfigurationSpec {
                        port: PortSettingsSpec {
                            untagged_vlan: Some(100 + (i % 3000) as i64),
                            description: Some(format!("bench port {i}")),
                            ..Default::default()
                        },
                        ..Default::default()
                    },
                );
                obj.metadata.annotations = Some(
                    [("bench/sent-ns".to_string(), now_ns().to_string())]
                        .into_iter()
                        .collect(),
                );
                api.create(&PostParams::default(), &obj).await.unwrap();
            }
        })
        .buffer_unordered(IN_FLIGHT)
        .collect::<Vec<_>>()
        .await;
    let elapsed = started.elapsed();

    let mut delays = Vec::new();
    for w in watchers {
        delays.extend(w.await.unwrap());
    }
    delays.sort_by(|a, b| a.partial_cmp(b).unwrap());
    println!(
        "devplane benchmark ({CREATES} creates, {IN_FLIGHT} in flight, {WATCHERS} watchers, kube-rs client)"
    );
    println!(
        "  creates: {:.0}/s ({:.2} s total)",
        CREATES as f64 / elapsed.as_secs_f64(),
        elapsed.as_secs_f64()
    );
    println!(
        "  watch delivery (send -> ADDED at each watcher, {} samples): p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        delays.len(),
        percentile(&delays, 0.50),
        percentile(&delays, 0.99),
        delays.last().copied().unwrap_or(f64::NAN)
    );
    println!("  targets: >= 2000 creates/s, p99 <= 10 ms");
    server.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}

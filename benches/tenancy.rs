//! Tenancy benchmark (issue 31): what the admission webhook adds to an apply, and
//! what the grant check costs per port. Prints figures, asserts nothing.
//!
//! 1. **Admission latency added per apply**: devplane in this process, 1,000
//!    SwitchPortConfigurations applied (server-side apply, one at a time, as `kubectl
//!    apply` sends them) without a webhook, then 1,000 more with patchbay's webhook
//!    registered (TLS on loopback, its caches filled with 100 VLANPools and the
//!    applied configurations): p50 and p99 of each, and of the difference. And the
//!    webhook's own decision time (`Admit::admit` on the same reviews).
//! 2. **The grant check at 10,000 ports**: the decision the controllers make before
//!    every apply, for 10,000 ports against 100 pools — computing the grants once
//!    (what a pool change costs) and checking every port (what a storm of 10,000
//!    reconciles costs). Reads come from the caches: no request per reconcile. The
//!    end-to-end cost with 10,000 ports is `BENCH_TENANCY=1 cargo bench --bench
//!    operator`.
//!
//! Env: BENCH_APPLIES (1000), BENCH_POOLS (100).

#[path = "support/cluster.rs"]
#[allow(dead_code)]
mod cluster;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine;
use cluster::{BenchCluster, env_or};
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionReview};
use patchbay::api::{SwitchPortConfiguration, VLANPool};
use patchbay::decide::tenancy::{Carrying, Grants, Settings, Tenancy, judge};
use patchbay::serve::Admit;
use patchbay_providers::values::VlanId;
use serde_json::json;

fn pct(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

async fn applies(api: &Api<SwitchPortConfiguration>, n: usize, tag: &str) -> Vec<Duration> {
    let pp = PatchParams::apply("bench").force();
    let mut times = Vec::with_capacity(n);
    for i in 0..n {
        let name = format!("{tag}-{i}");
        let cfg = json!({
            "apiVersion": "patchbay.dev/v1alpha1", "kind": "SwitchPortConfiguration",
            "metadata": {"name": name},
            "spec": {"untaggedVLAN": 200 + (i % 10), "vlans": [{"id": 210 + (i % 5)}]}
        });
        let t = Instant::now();
        api.patch(&name, &pp, &Patch::Apply(cfg)).await.unwrap();
        times.push(t.elapsed());
    }
    times.sort();
    times
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let n = env_or("BENCH_APPLIES", 1000).max(1);
    let n_pools = env_or("BENCH_POOLS", 100).max(1);
    let cluster = BenchCluster::start("tenancybench").await;
    let client = cluster.client.clone();
    let tenancy = Tenancy {
        infra_namespace: "infra".into(),
        parking_vlan: VlanId::new(4000).unwrap(),
        trusted_host_namespaces: BTreeSet::new(),
        allow_bmc_credentials: false,
    };
    for ns in ["without", "with"] {
        let obj: Namespace = serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap();
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &obj)
            .await
            .unwrap();
    }
    // 100 pools: one per tenant namespace, 10 VLANs each; "with" gets 200-219.
    let pools: Vec<VLANPool> = (0..n_pools)
        .map(|i| {
            let (ns, vlans) = if i == 0 {
                ("with".to_owned(), "200-219".to_owned())
            } else {
                (
                    format!("t{i}"),
                    format!("{}-{}", 300 + i * 10, 309 + i * 10),
                )
            };
            serde_json::from_value(json!({
                "apiVersion": "patchbay.dev/v1alpha1", "kind": "VLANPool",
                "metadata": {"name": format!("p{i}")},
                "spec": {"vlans": vlans, "namespaces": [ns]}
            }))
            .unwrap()
        })
        .collect();
    for p in &pools {
        Api::<VLANPool>::all(client.clone())
            .create(&PostParams::default(), p)
            .await
            .unwrap();
    }

    // 1. Without, then with the webhook.
    let without = applies(&Api::namespaced(client.clone(), "without"), n, "c").await;
    let dir = cluster.dir.join("webhook");
    patchbay_testbed::webhook_certificate(&dir, "bench").unwrap();
    let tls = patchbay::serve::tls_acceptor(&dir).unwrap();
    let (hook, caches) =
        patchbay::webhook::Webhook::start(client.clone(), tenancy.clone(), Default::default());
    tokio::spawn(caches);
    while !hook.synced() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (listener, addr) = patchbay::serve::bind("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    tokio::spawn(patchbay::serve::serve(
        listener,
        Some(tls),
        patchbay::serve::Routes {
            ready: Arc::new(|| true),
            metrics: Arc::default(),
            admission: Some(hook.clone()),
            radius: None,
        },
        std::future::pending::<()>(),
    ));
    let ca = std::fs::read(dir.join("tls.crt")).unwrap();
    let config: ValidatingWebhookConfiguration = serde_json::from_value(json!({
        "metadata": {"name": "bench"},
        "webhooks": [{
            "name": "tenancy.patchbay.dev",
            "clientConfig": {"url": format!("https://{addr}/validate"),
                             "caBundle": base64::engine::general_purpose::STANDARD.encode(ca)},
            "rules": [{"apiGroups": ["patchbay.dev"], "apiVersions": ["v1alpha1"],
                       "operations": ["CREATE", "UPDATE"],
                       "resources": ["switchportconfigurations"]}],
            "failurePolicy": "Fail", "sideEffects": "None",
            "admissionReviewVersions": ["v1"], "timeoutSeconds": 5
        }]
    }))
    .unwrap();
    Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .create(&PostParams::default(), &config)
        .await
        .unwrap();
    let with = applies(&Api::namespaced(client.clone(), "with"), n, "c").await;
    // The decision alone, on the same reviews.
    let mut decide = Vec::with_capacity(n);
    for i in 0..n {
        let review = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u", "operation": "CREATE", "namespace": "with",
            "kind": {"group": "patchbay.dev", "version": "v1alpha1", "kind": "SwitchPortConfiguration"},
            "resource": {"group": "patchbay.dev", "version": "v1alpha1", "resource": "switchportconfigurations"},
            "userInfo": {"username": "bench"},
            "object": {"apiVersion": "patchbay.dev/v1alpha1", "kind": "SwitchPortConfiguration",
                       "metadata": {"name": format!("c-{i}"), "namespace": "with"},
                       "spec": {"untaggedVLAN": 200 + (i % 10), "vlans": [{"id": 210 + (i % 5)}]}}}});
        let review: AdmissionReview<DynamicObject> = serde_json::from_value(review).unwrap();
        let request: AdmissionRequest<DynamicObject> = review.try_into().unwrap();
        let t = Instant::now();
        let answer = hook.admit(&request).await;
        decide.push(t.elapsed());
        assert!(answer.allowed, "{answer:?}");
    }
    decide.sort();
    println!("tenancy benchmark: {n} applies each way, {n_pools} VLANPools");
    println!(
        "  apply without a webhook: p50 {:.2} ms, p99 {:.2} ms",
        ms(pct(&without, 0.5)),
        ms(pct(&without, 0.99))
    );
    println!(
        "  apply with patchbay's webhook (TLS, loopback): p50 {:.2} ms, p99 {:.2} ms",
        ms(pct(&with, 0.5)),
        ms(pct(&with, 0.99))
    );
    println!(
        "  added per apply: p50 {:.2} ms, p99 {:.2} ms",
        ms(pct(&with, 0.5).saturating_sub(pct(&without, 0.5))),
        ms(pct(&with, 0.99).saturating_sub(pct(&without, 0.99)))
    );
    println!(
        "  the webhook's decision alone (grants from {n_pools} cached pools, per review): p50 {:.1} µs, p99 {:.1} µs",
        pct(&decide, 0.5).as_secs_f64() * 1e6,
        pct(&decide, 0.99).as_secs_f64() * 1e6
    );

    // 2. The grant check for 10,000 ports.
    let ports = 10_000;
    let t = Instant::now();
    let grants = Grants::new(&pools, Some(tenancy.parking_vlan));
    let computed = t.elapsed();
    let specs: Vec<_> = (0..ports)
        .map(|i| {
            let tenant = i % n_pools;
            let base = if tenant == 0 { 200 } else { 300 + tenant * 10 };
            let ns = if tenant == 0 {
                "with".to_owned()
            } else {
                format!("t{tenant}")
            };
            let port = patchbay::api::configuration::PortSettingsSpec {
                untagged_vlan: Some(base as i64),
                vlans: vec![patchbay::api::VlanSpec {
                    id: base as i64 + 1,
                    name: None,
                }],
                ..Default::default()
            };
            (ns, port)
        })
        .collect();
    let t = Instant::now();
    let mut refused = 0;
    for (ns, port) in &specs {
        let c = Carrying {
            tenant: ns,
            switch: Some("tor-1"),
            reference: None,
            settings: Some(Settings {
                port,
                group: None,
                what: String::new(),
            }),
        };
        refused += usize::from(judge(Some(&tenancy), &grants, &c).refused.is_some());
    }
    let checked = t.elapsed();
    println!(
        "  grants of {n_pools} pools computed in {:.2} ms (once per pool change; reconciles reuse them)",
        ms(computed)
    );
    println!(
        "  grant check of {ports} ports: {:.1} ms in all, {:.2} µs per port ({refused} refused)",
        ms(checked),
        checked.as_secs_f64() * 1e6 / ports as f64
    );
}

//! `patchbay plan` at fleet size, without device reads: 10,000 SwitchPorts on 200
//! switches (Cisco IOS over SSH, 50 ports each), every port linked to one of 20
//! shared configurations. Measures, in-process and in release mode:
//! - one shared configuration edited (600 ports, 3 on every switch, move);
//! - all 20 edited (every port moves);
//!
//! each as the fleet diff (`decide::plan::plan`, the operator's own decision per
//! port) and the rendering of every switch's batch (the dialect's lines from the
//! assumed state). The target (issue 56): ≤ 2 s for the whole plan.
//!
//! Then the blast radius at apply: the same 200 switches on devplane (in this
//! process), every port on one configuration `wide`, and the blast-radius webhook's
//! answer (`patchbay::blast_radius`, called in-process: the API reads, the plan and
//! the wording, without TLS) to an edit of `wide` (every port moves) and of one
//! ProviderSwitch (NETCONF for an IOS switch: its ports refused).
//! Its bound is the webhook's 6 s deadline.
//!
//! And `--read-devices` on the fleet benchmark's simulators: 50 simulated Cisco
//! 2960s x 20 ports (one fake-switches process), every port on one configuration,
//! its edit planned against devplane and every changing port read from its switch
//! (`patchbay::device_reads`: one session per switch, 8 switches at once).
//!
//! Prints figures, asserts nothing. Run: `make bench` (or `cargo bench --bench
//! plan`); `BENCH_SWITCHES` and `BENCH_PORTS` change the size, `BENCH_WEBHOOK=0`
//! skips the devplane part, `BENCH_READ_SWITCHES` (50; 0 skips it) and
//! `BENCH_READ_PORTS` (20) size the reads.

#[path = "support/cluster.rs"]
#[allow(dead_code)]
mod cluster;

use std::time::Instant;

use futures::StreamExt;
use kube::api::{Api, PostParams};
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionReview};

use patchbay::decide::plan::{Carry, Fleet, Rules, plan};
use patchbay_providers::device::PortOperation;
use patchbay_providers::offline::{Assumed, assumed, cli_script};
use serde_json::json;

/// The operator's rules without tenancy (the fleet has no VLANPools).
const UNTENANTED: Rules<'static> = Rules {
    capabilities: &patchbay::backends::capabilities_of,
    tenancy: None,
};

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn obj<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> T {
    serde_json::from_value(v).expect("a valid object")
}

const CONFIGS: usize = 20;

fn fleet(switches: usize, ports: usize) -> Fleet {
    let mut f = Fleet::default();
    for c in 0..CONFIGS {
        f.configurations.push(obj(json!({
            "metadata": {"name": format!("cfg-{c}"), "namespace": "infra"},
            "spec": {"untaggedVLAN": 100 + c}})));
    }
    for s in 0..switches {
        let name = format!("tor-{s}");
        f.providers.push(obj(json!({
            "metadata": {"name": name, "namespace": "infra"},
            "spec": {"backend": "ssh", "os": "ios", "address": "192.0.2.1"}})));
        let entries: serde_json::Map<String, serde_json::Value> = (0..ports)
            .map(|p| {
                (
                    format!("{name}-p{p}"),
                    json!({"name": format!("GigabitEthernet1/0/{}", p + 1)}),
                )
            })
            .collect();
        f.switches.push(obj(json!({
            "metadata": {"name": name, "namespace": "infra"},
            "spec": {"provider": {"name": name}, "ports": entries}})));
        for p in 0..ports {
            f.ports.push(obj(json!({
                "metadata": {"name": format!("{name}-p{p}"), "namespace": "infra",
                             "labels": {"patchbay.dev/switch": name}},
                "spec": {"configuration": {"name": format!("cfg-{}", p % CONFIGS)}}})));
        }
    }
    f
}

/// Plans `manifests` over `before` and renders every switch's batch; prints the
/// figures under `label`.
fn measure(label: &str, before: &Fleet, manifests: &Fleet) {
    let t0 = Instant::now();
    let after = before.with(manifests, "infra");
    let t1 = Instant::now();
    let changes = plan(before, &after, UNTENANTED);
    let t2 = Instant::now();
    let ios = patchbay_providers::cli::dialect::for_os("ios").expect("the ios dialect");
    let mut by_switch: std::collections::BTreeMap<&str, Vec<Assumed>> = Default::default();
    for c in &changes {
        let (Carry::Set(now), Carry::Set(next)) = (&c.before, &c.after) else {
            continue;
        };
        by_switch
            .entry(&c.switch)
            .or_default()
            .push((assumed(Some(now)), PortOperation::Set(next.clone())));
    }
    let lines: usize = by_switch
        .values()
        .map(|batch| cli_script(&ios, true, batch, &[]).len())
        .sum();
    let t3 = Instant::now();
    let ms = |a: Instant, b: Instant| b.duration_since(a).as_secs_f64() * 1000.0;
    println!(
        "{label}: {} ports on {} switches change, {lines} CLI lines; overlay {:.0} ms, \
         fleet diff {:.0} ms, rendering {:.0} ms, total {:.0} ms",
        changes.len(),
        by_switch.len(),
        ms(t0, t1),
        ms(t1, t2),
        ms(t2, t3),
        ms(t0, t3),
    );
}

/// An UPDATE review of `kind` from `old` to `new` (its name and namespace `new`'s).
fn review(
    kind: &str,
    resource: &str,
    old: serde_json::Value,
    new: serde_json::Value,
) -> AdmissionRequest<DynamicObject> {
    let name = new["metadata"]["name"].clone();
    // Cluster-scoped objects (a VLANPool) name no namespace.
    let namespace = new["metadata"]["namespace"].clone();
    let review: AdmissionReview<DynamicObject> = obj(json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": "u", "operation": "UPDATE", "namespace": namespace, "name": name,
            "kind": {"group": "patchbay.dev", "version": "v1alpha1", "kind": kind},
            "resource": {"group": "patchbay.dev", "version": "v1alpha1", "resource": resource},
            "userInfo": {"username": "bench"},
            "object": new, "oldObject": old}}));
    review.try_into().expect("a request")
}

/// devplane in this process with namespace `ns` holding `objects` (each with its
/// apiVersion and kind; created 16 at a time): the cluster, and how long the
/// creates took.
async fn devplane_with(
    tag: &str,
    ns: &str,
    objects: Vec<serde_json::Value>,
) -> (cluster::BenchCluster, std::time::Duration) {
    let cluster = cluster::BenchCluster::start(tag).await;
    let client = cluster.client.clone();
    let namespace: k8s_openapi::api::core::v1::Namespace = obj(json!({"metadata": {"name": ns}}));
    Api::all(client.clone())
        .create(&PostParams::default(), &namespace)
        .await
        .unwrap();
    let t = Instant::now();
    futures::stream::iter(objects)
        .map(|o| {
            let kind = o["kind"].as_str().expect("a kind").to_owned();
            let api_version = o["apiVersion"].as_str().expect("an apiVersion").to_owned();
            let (group, version) = api_version.split_once('/').unwrap_or(("", &api_version));
            let plural = match kind.as_str() {
                "ProviderSwitch" | "Switch" => format!("{}es", kind.to_lowercase()),
                _ => format!("{}s", kind.to_lowercase()),
            };
            let api: Api<DynamicObject> = Api::namespaced_with(
                client.clone(),
                ns,
                &kube::discovery::ApiResource {
                    group: group.into(),
                    version: version.into(),
                    api_version: api_version.clone(),
                    kind,
                    plural,
                },
            );
            async move {
                api.create(&PostParams::default(), &obj(o)).await.unwrap();
            }
        })
        .buffer_unordered(16)
        .collect::<Vec<()>>()
        .await;
    (cluster, t.elapsed())
}

/// The blast-radius webhook's answer on devplane holding `switches` x `ports`.
async fn webhook(switches: usize, ports: usize) {
    let mut objects = vec![
        json!({"apiVersion": "patchbay.dev/v1alpha1", "kind": "SwitchPortConfiguration",
               "metadata": {"name": "wide"}, "spec": {"untaggedVLAN": 100}}),
    ];
    for s in 0..switches {
        let name = format!("tor-{s}");
        objects.push(
            json!({"apiVersion": "patchbay.dev/v1alpha1", "kind": "ProviderSwitch",
            "metadata": {"name": name},
            "spec": {"backend": "ssh", "os": "ios", "address": "192.0.2.1"}}),
        );
        let entries: serde_json::Map<String, serde_json::Value> = (0..ports)
            .map(|p| {
                (
                    format!("{name}-p{p}"),
                    json!({"name": format!("GigabitEthernet1/0/{}", p + 1)}),
                )
            })
            .collect();
        objects.push(
            json!({"apiVersion": "patchbay.dev/v1alpha1", "kind": "Switch",
            "metadata": {"name": name}, "spec": {"provider": {"name": name}, "ports": entries}}),
        );
        for p in 0..ports {
            objects.push(
                json!({"apiVersion": "patchbay.dev/v1alpha1", "kind": "SwitchPort",
                "metadata": {"name": format!("{name}-p{p}"),
                             "labels": {"patchbay.dev/switch": name}},
                "spec": {"configuration": {"name": "wide"}}}),
            );
        }
    }
    let count = objects.len();
    let (cluster, took) = devplane_with("planbench", "infra", objects).await;
    let client = cluster.client.clone();
    println!(
        "devplane: {count} objects created in {:.1} s ({} SwitchPorts on one configuration)",
        took.as_secs_f64(),
        switches * ports
    );
    let radius = patchbay::blast_radius::BlastRadius::new(client.clone(), None);
    // With tenancy on, as deploy/tenancy/ runs it: a pool's edit reads every port.
    let tenanted = patchbay::blast_radius::BlastRadius::new(
        client,
        Some(patchbay::decide::tenancy::Tenancy {
            infra_namespace: "infra".into(),
            parking_vlan: patchbay_providers::values::VlanId::new(999).unwrap(),
            trusted_host_namespaces: Default::default(),
            allow_bmc_credentials: false,
        }),
    );
    let pool = |vlans: &str| {
        json!({"apiVersion": "patchbay.dev/v1alpha1", "kind": "VLANPool",
               "metadata": {"name": "tenant-a"},
               "spec": {"vlans": vlans, "namespaces": ["tenant-a"]}})
    };
    let wide = |vlan: u32| {
        json!({"apiVersion": "patchbay.dev/v1alpha1", "kind": "SwitchPortConfiguration",
                                  "metadata": {"name": "wide", "namespace": "infra"},
                                  "spec": {"untaggedVLAN": vlan}})
    };
    let provider = |backend: &str| {
        json!({"apiVersion": "patchbay.dev/v1alpha1", "kind": "ProviderSwitch",
                                     "metadata": {"name": "tor-0", "namespace": "infra"},
                                     "spec": {"backend": backend, "os": "ios", "address": "192.0.2.1"}})
    };
    for (label, radius, request) in [
        (
            "the configuration every port uses edited",
            &radius,
            review(
                "SwitchPortConfiguration",
                "switchportconfigurations",
                wide(100),
                wide(101),
            ),
        ),
        (
            "one ProviderSwitch moved to a backend with no IOS model",
            &radius,
            review(
                "ProviderSwitch",
                "providerswitches",
                provider("ssh"),
                provider("netconf"),
            ),
        ),
        (
            "a VLANPool edited under tenancy (every port read; none serves its tenant)",
            &tenanted,
            review("VLANPool", "vlanpools", pool("200-209"), pool("200-219")),
        ),
    ] {
        let mut times = Vec::new();
        let mut answer = Vec::new();
        for _ in 0..5 {
            let t = Instant::now();
            answer = radius.warnings(&request).await;
            times.push(t.elapsed().as_secs_f64() * 1000.0);
        }
        times.sort_by(f64::total_cmp);
        println!(
            "blast radius, {label}: p50 {:.0} ms, max {:.0} ms over 5 answers (deadline {} s)",
            times[2],
            times[4],
            patchbay::blast_radius::DEADLINE.as_secs()
        );
        for w in answer {
            println!("  Warning: {w}");
        }
    }
}

/// Every object of kind `K` in the cluster.
async fn all<K>(client: &kube::Client) -> Vec<K>
where
    K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    Api::<K>::all(client.clone())
        .list(&Default::default())
        .await
        .expect("a list")
        .items
}

/// `--read-devices` on `switches` simulated Cisco switches x `ports` ports.
async fn reads(switches: usize, ports: usize) {
    use patchbay::api::{ProviderSwitch, Switch, SwitchPort, SwitchPortConfiguration};
    use patchbay_testbed::{FakeSwitches, SimSpec};
    let specs: Vec<SimSpec> = (0..switches)
        .map(|i| SimSpec::new(&format!("rd{i:02}"), "cisco_2960_24TT_L").with_ios_shims())
        .collect();
    let t = Instant::now();
    let fleet = FakeSwitches::start(&specs).expect("simulators (make fake-switch)");
    println!(
        "simulators: {switches} Cisco 2960s up in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    let mut objects = vec![
        json!({"apiVersion": "patchbay.dev/v1alpha1", "kind": "SwitchPortConfiguration",
               "metadata": {"name": "wide"}, "spec": {"untaggedVLAN": 100}}),
    ];
    for i in 0..switches {
        let sim = fleet.get(&format!("rd{i:02}"));
        objects.push(json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": format!("login-{}", sim.name)},
            "stringData": {"username": sim.username, "password": sim.password,
                           "enablePassword": sim.enable_password}}));
        objects.push(
            json!({"apiVersion": "patchbay.dev/v1alpha1", "kind": "ProviderSwitch",
            "metadata": {"name": sim.name},
            "spec": {"backend": "ssh", "os": "ios", "address": sim.address, "port": sim.port,
                     "credentialsSecretRef": {"name": format!("login-{}", sim.name)},
                     "hostKey": {"fingerprint": sim.host_key_fingerprint},
                     "options": {"maxSessions": 2, "readSessions": 1}}}),
        );
        let entries: serde_json::Map<String, serde_json::Value> = (1..=ports)
            .map(|k| {
                (
                    format!("{}-p{k}", sim.name),
                    json!({"name": format!("FastEthernet0/{k}")}),
                )
            })
            .collect();
        objects.push(
            json!({"apiVersion": "patchbay.dev/v1alpha1", "kind": "Switch",
            "metadata": {"name": sim.name},
            "spec": {"provider": {"name": sim.name}, "ports": entries}}),
        );
        for k in 1..=ports {
            objects.push(
                json!({"apiVersion": "patchbay.dev/v1alpha1", "kind": "SwitchPort",
                "metadata": {"name": format!("{}-p{k}", sim.name),
                             "labels": {"patchbay.dev/switch": sim.name}},
                "spec": {"configuration": {"name": "wide"}}}),
            );
        }
    }
    let (cluster, _) = devplane_with("planreads", "reads", objects).await;
    let client = cluster.client.clone();
    let before = Fleet {
        providers: all::<ProviderSwitch>(&client).await,
        switches: all::<Switch>(&client).await,
        ports: all::<SwitchPort>(&client).await,
        configurations: all::<SwitchPortConfiguration>(&client).await,
        ..Fleet::default()
    };
    let edit = Fleet {
        configurations: vec![obj(json!({
            "metadata": {"name": "wide"}, "spec": {"untaggedVLAN": 101}}))],
        ..Fleet::default()
    };
    let after = before.with(&edit, "reads");
    let changes = plan(&before, &after, UNTENANTED);
    let t = Instant::now();
    let read = patchbay::device_reads::read_devices(&client, &changes).await;
    let took = t.elapsed().as_secs_f64();
    let (mut ok, mut failed, mut not_read) = (0, 0, 0);
    for r in read.values() {
        match r {
            patchbay::device_reads::Read::Ports(p) => {
                ok += p.values().filter(|r| r.is_ok()).count();
                failed += p.values().filter(|r| r.is_err()).count();
            }
            patchbay::device_reads::Read::Not(_) => not_read += 1,
        }
    }
    println!(
        "--read-devices: {} changing ports on {} simulated Cisco switches read in {took:.2} s \
         ({} switches at once, one session each): {ok} read, {failed} failed, {not_read} \
         switches not read",
        changes.len(),
        read.len(),
        patchbay::device_reads::READS_IN_FLIGHT
    );
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let (switches, ports) = (env("BENCH_SWITCHES", 200), env("BENCH_PORTS", 50));
    let t = Instant::now();
    let before = fleet(switches, ports);
    println!(
        "fleet: {} SwitchPorts on {switches} switches, {CONFIGS} shared configurations \
         (built in {:.0} ms)",
        before.ports.len(),
        t.elapsed().as_secs_f64() * 1000.0
    );
    let one = Fleet {
        configurations: vec![obj(json!({
            "metadata": {"name": "cfg-0"}, "spec": {"untaggedVLAN": 200}}))],
        ..Fleet::default()
    };
    let all = Fleet {
        configurations: (0..CONFIGS)
            .map(|c| {
                obj(json!({"metadata": {"name": format!("cfg-{c}")},
                           "spec": {"untaggedVLAN": 200 + c}}))
            })
            .collect(),
        ..Fleet::default()
    };
    measure("one shared configuration edited", &before, &one);
    measure("all 20 configurations edited", &before, &all);
    measure("nothing edited", &before, &Fleet::default());
    if env("BENCH_WEBHOOK", 1) != 0 {
        webhook(switches, ports).await;
    }
    let read_switches = env("BENCH_READ_SWITCHES", 50);
    if read_switches != 0 {
        reads(read_switches, env("BENCH_READ_PORTS", 20)).await;
    }
}

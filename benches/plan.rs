//! `patchbay plan` at fleet size, without device reads: 10,000 SwitchPorts on 200
//! switches (Cisco IOS over SSH, 50 ports each), every port linked to one of 20
//! shared configurations. Measures, in-process and in release mode:
//! - one shared configuration edited (600 ports, 3 on every switch, move);
//! - all 20 edited (every port moves);
//!
//! each as the fleet diff (`decide::plan::plan`, the operator's own decision per
//! port) and the rendering of every switch's batch (the dialect's lines from the
//! assumed state). The target (issue 56): ≤ 2 s for the whole plan. Prints figures,
//! asserts nothing. Run: `make bench` (or `cargo bench --bench plan`);
//! `BENCH_SWITCHES` and `BENCH_PORTS` change the size.

use std::time::Instant;

use patchbay::decide::plan::{Carry, Fleet, plan};
use patchbay_providers::device::PortOperation;
use patchbay_providers::offline::{Assumed, cli_script};
use serde_json::json;

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
    let changes = plan(before, &after, &patchbay::backends::capabilities_of);
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
            .push((Some(now.clone()), PortOperation::Set(next.clone())));
    }
    let lines: usize = by_switch
        .values()
        .map(|batch| cli_script(&ios, true, batch).len())
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

fn main() {
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
}

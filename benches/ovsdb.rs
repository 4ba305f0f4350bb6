//! Open vSwitch backend benchmark against a private Open vSwitch (`fake-switch/ovs.py`,
//! userspace datapath, stopped by PID). Prints figures, asserts nothing.
//!
//! In the same run, on one bridge with 500 internal ports:
//! - patchbay: 500 access-VLAN changes as one `apply_batch_verified` (one read
//!   transaction, one write transaction with `next_cfg += 1`, waiting for
//!   ovs-vswitchd's `cur_cfg`, then the verifying read) — as the switch worker does;
//! - the baseline: 500 `ovs-vsctl set Port pN tag=V` invocations, one after the
//!   other (each also waits for ovs-vswitchd, ovs-vsctl's default);
//! - and one port changed alone, end to end.
//!
//! Env: BENCH_ROUNDS (default 5; the ovs-vsctl baseline runs once), BENCH_PORTS
//! (default 500).

mod support;

use std::time::{Duration, Instant};

use patchbay_providers::ovsdb::{Endpoint, OvsOptions, OvsSwitch};
use patchbay_providers::values::PortName;
use patchbay_testbed::OvsSim;
use support::{median, ops, timed};

fn main() {
    let env = support::env_usize;
    let rounds = env("BENCH_ROUNDS", 5);
    let n = env("BENCH_PORTS", 500);
    let ovs = OvsSim::start(&["brbench"]).expect("Open vSwitch (make ovs)");
    let t = Instant::now();
    let names: Vec<String> = (0..n).map(|i| format!("bp{i}")).collect();
    for chunk in names.chunks(100) {
        let mut args: Vec<String> = Vec::new();
        for name in chunk {
            args.extend(
                [
                    "--",
                    "add-port",
                    "brbench",
                    name,
                    "--",
                    "set",
                    "Interface",
                    name,
                    "type=internal",
                ]
                .map(String::from),
            );
        }
        let refs: Vec<&str> = args.iter().skip(1).map(String::as_str).collect();
        ovs.vsctl(&refs).expect("ports added");
    }
    println!(
        "setup: {n} internal ports on one netdev bridge in {:.1?}",
        t.elapsed()
    );
    let ports: Vec<PortName> = names.iter().map(|n| PortName::parse(n).unwrap()).collect();
    let sw = OvsSwitch::new(OvsOptions {
        endpoint: Endpoint::Tcp(ovs.ovsdb_tcp()),
        bridge: "brbench".into(),
        openflow: None,
        connect_timeout: Duration::from_secs(10),
        command_timeout: Duration::from_secs(60),
        control_socket: None,
    });
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();

    let mut single = Vec::new();
    let mut batch = Vec::new();
    let mut vlan = 100;
    rt.block_on(async {
        for _ in 0..rounds {
            vlan += 1;
            single.push(timed(&sw, &ops(&ports[..1], vlan + 1000)).await);
            batch.push(timed(&sw, &ops(&ports, vlan)).await);
        }
    });

    vlan += 1;
    let t = Instant::now();
    for name in &names {
        ovs.vsctl(&["set", "Port", name, &format!("tag={vlan}")])
            .expect("ovs-vsctl set");
    }
    let vsctl = t.elapsed();

    let single = median(single);
    let batch = median(batch);
    println!("ovsdb backend, {n} ports on one bridge, medians of {rounds}:");
    println!("  one port, apply + verify:              {single:>10.1?}");
    println!(
        "  {n} ports, one batch (apply + verify):  {batch:>10.1?}  ({:.1?}/port)",
        batch / n as u32
    );
    println!("  {n} x `ovs-vsctl set Port`:            {vsctl:>10.1?}");
    println!(
        "  ratio ovs-vsctl / patchbay batch:      {:>9.1}x",
        vsctl.as_secs_f64() / batch.as_secs_f64()
    );
}

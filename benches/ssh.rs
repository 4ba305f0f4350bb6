//! SSH CLI backend benchmark against the Cisco simulator (`cisco_2960_48TT_L`, one
//! simulator process, started and stopped by PID). Prints figures, asserts nothing.
//!
//! - one access-VLAN change end to end: `apply_batch_verified` of one port (session:
//!   read, configure, save; then the read-back session), as the switch worker does;
//! - 48 ports on one switch in one batch, the same way;
//! - in the same run, `bench/paramiko_baseline.py`: one paramiko session per port
//!   (connect, enable, configure, read back, close) for the same 48 ports.
//!
//! Targets (issue 5): the 48-port batch <= 3x the single port; >= 3x faster than the
//! per-port paramiko baseline. Env: BENCH_ROUNDS (default 7).

mod support;

use patchbay_providers::values::PortName;
use patchbay_testbed::{FakeSwitches, SimSpec};
use support::{baseline, median, ops, ssh_backend, timed};

fn main() {
    let rounds: usize = std::env::var("BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(7);
    let sims = FakeSwitches::start(&[SimSpec::new("bench48", "cisco_2960_48TT_L")])
        .expect("simulator (make fake-switch)");
    let sim = sims.get("bench48").clone();
    let ports: Vec<PortName> = sim
        .ports
        .iter()
        .filter(|p| p.starts_with("FastEthernet"))
        .take(48)
        .map(|p| PortName::parse(p).unwrap())
        .collect();
    assert_eq!(ports.len(), 48);
    let sw = ssh_backend(&sim, "ios");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    println!(
        "SSH CLI backend vs the Cisco simulator ({} rounds, release build, save_config on)",
        rounds
    );
    let (single, batch) = rt.block_on(async {
        // Warm up (first VLAN creation, first session).
        timed(&sw, &ops(&ports[..1], 3001)).await;
        let mut single = Vec::new();
        for r in 0..rounds {
            single.push(timed(&sw, &ops(&ports[..1], 100 + (r % 2) as u16)).await);
        }
        let mut batch = Vec::new();
        for r in 0..rounds {
            batch.push(timed(&sw, &ops(&ports, 200 + (r % 2) as u16)).await);
        }
        (median(single), median(batch))
    });
    println!(
        "  one access-VLAN change, end to end (apply + read-back): median {:.1} ms",
        single.as_secs_f64() * 1e3
    );
    println!(
        "  48 ports, one batch (apply + read-back):                median {:.1} ms ({:.2} ms/port)",
        batch.as_secs_f64() * 1e3,
        batch.as_secs_f64() * 1e3 / 48.0
    );
    let ratio = batch.as_secs_f64() / single.as_secs_f64();
    println!(
        "  batch / single: {ratio:.2}x (target <= 3x: {})",
        if ratio <= 3.0 { "met" } else { "NOT met" }
    );

    // The paramiko baseline, same simulator, same run.
    let paramiko = match baseline(
        "paramiko_baseline.py",
        serde_json::json!({
            "address": sim.address, "port": sim.port, "username": sim.username,
            "password": sim.password, "enable_password": sim.enable_password,
            "vlans": [300, 301], "repeat": 3,
        }),
        &[],
        &ports,
    ) {
        Ok(d) => d,
        Err(e) => {
            println!("  paramiko baseline failed: {e}");
            return;
        }
    };
    println!(
        "  paramiko, one session per port, 48 ports:               median {:.1} ms ({:.2} ms/port)",
        paramiko.as_secs_f64() * 1e3,
        paramiko.as_secs_f64() * 1e3 / 48.0
    );
    let speedup = paramiko.as_secs_f64() / batch.as_secs_f64();
    println!(
        "  paramiko per-port / patchbay batch: {speedup:.2}x (target >= 3x: {})",
        if speedup >= 3.0 { "met" } else { "NOT met" }
    );
}

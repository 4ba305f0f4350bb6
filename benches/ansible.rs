//! Ansible backend benchmark against the Cisco simulator (`cisco_2960_48TT_L` with the
//! IOS syntax shims), Ansible from `make ansible`. Prints figures, asserts nothing.
//!
//! - 48 ports in one batch: one apply run, then the verifying read run, as the switch
//!   worker does (`apply_batch_verified`);
//! - the proof of concept's pattern in the same run: 48 runs of one port each
//!   (apply only, no read-back: the pattern's own cost);
//! - the SSH CLI backend's verified 48-port batch on the same simulator.
//!
//! Goal (issue 16): the batch >= 10x faster than a run per port. Env: BENCH_ROUNDS
//! (default 3), BENCH_PER_PORT (how many of the 48 single-port runs to time, default
//! 48; fewer are extrapolated to 48 and labelled so).

mod support;

use std::time::{Duration, Instant};

use patchbay_providers::{Device as _, PortChange};
use patchbay_testbed::{FakeSwitches, SimSpec};
use support::{ansible_backend, median, ops, ssh_backend, timed};

fn main() {
    let env = support::env_usize;
    let rounds = env("BENCH_ROUNDS", 3);
    let per_port = env("BENCH_PER_PORT", 48).clamp(1, 48);
    let sims =
        FakeSwitches::start(&[SimSpec::new("bench48", "cisco_2960_48TT_L").with_ios_shims()])
            .expect("simulator (make fake-switch)");
    let sim = sims.get("bench48").clone();
    let ports = support::fast_ethernet(&sim, 48);
    let sw = ansible_backend(&sim);
    let ssh = ssh_backend(&sim, "ios");
    let rt = support::runtime();
    println!("Ansible backend vs the Cisco simulator ({rounds} rounds, release build)");
    let (batch, per_port_total, sampled, ssh_batch) = rt.block_on(async {
        let mut batch = Vec::new();
        for r in 0..rounds {
            batch.push(timed(&sw, &ops(&ports, 200 + (r % 2) as u16)).await);
        }
        // One run per port, the proof of concept's way.
        let t = Instant::now();
        for (i, p) in ports.iter().take(per_port).enumerate() {
            let r = sw
                .apply_batch(&ops(std::slice::from_ref(p), 300 + (i % 2) as u16))
                .await
                .expect("run");
            assert_eq!(r[0].outcome, Ok(PortChange::Changed), "{p}");
        }
        let sampled = t.elapsed();
        let total = sampled.mul_f64(48.0 / per_port as f64);
        let mut ssh_batch = Vec::new();
        for r in 0..rounds {
            ssh_batch.push(timed(&ssh, &ops(&ports, 400 + (r % 2) as u16)).await);
        }
        (median(batch), total, sampled, median(ssh_batch))
    });
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "  48 ports, one batch (one apply run + one read run):       median {:.0} ms ({:.1} ms/port)",
        ms(batch),
        ms(batch) / 48.0
    );
    if per_port == 48 {
        println!(
            "  48 runs of one port each (apply only):                    {:.0} ms ({:.0} ms/port)",
            ms(per_port_total),
            ms(per_port_total) / 48.0
        );
    } else {
        println!(
            "  48 runs of one port each (apply only): {:.0} ms EXTRAPOLATED from {per_port} runs ({:.0} ms)",
            ms(per_port_total),
            ms(sampled)
        );
    }
    println!(
        "  SSH CLI backend, 48 ports, one batch (+ read-back):       median {:.0} ms",
        ms(ssh_batch)
    );
    let speedup = per_port_total.as_secs_f64() / batch.as_secs_f64();
    println!(
        "  run per port / Ansible batch: {speedup:.1}x (goal >= 10x: {})",
        if speedup >= 10.0 { "met" } else { "NOT met" }
    );
    println!(
        "  Ansible batch / SSH CLI batch: {:.1}x",
        batch.as_secs_f64() / ssh_batch.as_secs_f64()
    );
}

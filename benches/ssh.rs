//! SSH CLI backend benchmark against the Cisco simulator (`cisco_2960_48TT_L`, one
//! simulator process, started and stopped by PID). Prints figures, asserts nothing.
//!
//! - one access-VLAN change end to end: `apply_batch_verified` of one port (session:
//!   read, configure, save; then the read-back session), as the switch worker does;
//! - 48 ports on one switch in one batch, the same way;
//! - in the same run, `bench/paramiko_baseline.py`: one paramiko session per port
//!   (connect, enable, configure, read back, close) for the same 48 ports;
//! - the device floor: one raw SSH session (the same russh transport, no dialect, no
//!   parsing) that logs in and sends, in one write, the minimum lines of the same
//!   change and its proof: `terminal length 0`, `configure terminal`, `vlan N`,
//!   `exit`, per port `interface X` / `switchport access vlan N` / `exit` (the exit
//!   keeps a refused `interface` line from sending the next lines to the previous
//!   port), `exit`, `write memory`, and one `show running-config` to read it back.
//!   What patchbay adds on top is its planning read and its round trips.
//!
//! Targets (issue 17): the 48-port batch within 1.2x of the floor and <= 3x the
//! single port where the device allows it (the floor's own 48/1 ratio says whether
//! it does); >= 3x faster than the per-port paramiko baseline. Env: BENCH_ROUNDS
//! (default 7).

mod support;

use std::time::{Duration, Instant};

use patchbay_providers::cli::transport::Shell;
use patchbay_providers::values::PortName;
use patchbay_testbed::{FakeSwitches, SimSpec, SimSwitch};
use support::{baseline, median, ops, ssh_backend, timed};

/// The floor: one raw session sending the minimum lines of `ports` -> access `vlan`,
/// then one read of the running configuration; timed from connect to the last prompt.
async fn floor(sim: &SimSwitch, ports: &[PortName], vlan: u16) -> Duration {
    let target = support::ssh_target(sim);
    let wait = Duration::from_secs(30);
    let ends = |tail: &'static str| move |b: &str| b.trim_end().ends_with(tail).then_some(b.len());
    let t = Instant::now();
    let mut sh = Shell::open(&target, &Default::default())
        .await
        .expect("login");
    sh.read_until(ends(">"), wait, "login").await.unwrap();
    sh.write("enable\n").await.unwrap();
    sh.read_until(ends("Password:"), wait, "enable")
        .await
        .unwrap();
    sh.write(&format!("{}\n", sim.enable_password))
        .await
        .unwrap();
    sh.read_until(ends("#"), wait, "enable").await.unwrap();
    let mut lines = vec![
        "terminal length 0".to_owned(),
        "configure terminal".into(),
        format!("vlan {vlan}"),
        "exit".into(),
    ];
    for p in ports {
        lines.push(format!("interface {p}"));
        lines.push(format!("switchport access vlan {vlan}"));
        lines.push("exit".into());
    }
    lines.extend(["exit", "write memory", "show running-config"].map(String::from));
    sh.write(&(lines.join("\n") + "\n")).await.unwrap();
    let last = sh
        .read_until(
            |b| {
                let at = b.find("show running-config")?;
                let rest = &b[at..];
                (rest.contains("\nend") && rest.trim_end().ends_with('#')).then_some(b.len())
            },
            wait,
            "the floor script",
        )
        .await
        .unwrap();
    let elapsed = t.elapsed();
    assert!(
        last.contains(&format!("switchport access vlan {vlan}")),
        "the floor did not land"
    );
    sh.close().await;
    elapsed
}

fn main() {
    let rounds = support::env_usize("BENCH_ROUNDS", 7);
    let sims = FakeSwitches::start(&[SimSpec::new("bench48", "cisco_2960_48TT_L")])
        .expect("simulator (make fake-switch)");
    let sim = sims.get("bench48").clone();
    let ports = support::fast_ethernet(&sim, 48);
    assert_eq!(ports.len(), 48);
    let sw = ssh_backend(&sim, "ios");
    let rt = support::runtime();
    println!(
        "SSH CLI backend vs the Cisco simulator ({} rounds, release build, save_config on)",
        rounds
    );
    let (single, batch, floor1, floor48) = rt.block_on(async {
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
        let mut floor1 = Vec::new();
        let mut floor48 = Vec::new();
        for r in 0..rounds {
            floor1.push(floor(&sim, &ports[..1], 400 + (r % 2) as u16).await);
        }
        for r in 0..rounds {
            floor48.push(floor(&sim, &ports, 500 + (r % 2) as u16).await);
        }
        (
            median(single),
            median(batch),
            median(floor1),
            median(floor48),
        )
    });
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "  one access-VLAN change, end to end (apply + read-back): median {:.1} ms",
        single.as_secs_f64() * 1e3
    );
    println!(
        "  48 ports, one batch (apply + read-back):                median {:.1} ms ({:.2} ms/port)",
        batch.as_secs_f64() * 1e3,
        batch.as_secs_f64() * 1e3 / 48.0
    );
    println!(
        "  device floor, one raw session, 1 port / 48 ports:     median {:.1} ms / {:.1} ms",
        ms(floor1),
        ms(floor48)
    );
    let to_floor = batch.as_secs_f64() / floor48.as_secs_f64();
    println!(
        "  48-port batch / floor: {to_floor:.2}x (target <= 1.2x: {}); single / floor: {:.2}x",
        if to_floor <= 1.2 { "met" } else { "NOT met" },
        single.as_secs_f64() / floor1.as_secs_f64()
    );
    let ratio = batch.as_secs_f64() / single.as_secs_f64();
    let device_ratio = floor48.as_secs_f64() / floor1.as_secs_f64();
    println!(
        "  batch / single: {ratio:.2}x (target <= 3x where the device allows it: the floor's own 48/1 is {device_ratio:.2}x, so {})",
        if ratio <= 3.0 {
            "met"
        } else if device_ratio > 3.0 {
            "the device does not allow it"
        } else {
            "NOT met"
        }
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

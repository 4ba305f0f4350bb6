//! NETCONF backend benchmark against netconfd (yuma123, patchbay's YANG module,
//! candidate target: lock, discard, edit, confirmed commit, read-back, confirm,
//! unlock), started and stopped by PID. Prints figures, asserts nothing.
//!
//! - one access-VLAN change end to end: `apply_batch_verified` of one port (the
//!   transaction session, then the verifying read session), as the switch worker
//!   does;
//! - 48 ports in one batch, the same way;
//! - in the same run, `bench/ncclient_baseline.py`: Python ncclient with one session
//!   and one commit per port (connect, lock, edit-config, commit, unlock, read back,
//!   close) for the same 48 ports.
//!
//! - back-to-back one-port batches with a session each, and with the session kept
//!   for the next batch within the operator's default 100 ms window (issue 33).
//!
//! Targets (issue 15): the 48-port batch <= 2x the single port; >= 5x faster than the
//! per-port ncclient baseline. Env: BENCH_ROUNDS (default 7).

#[path = "../providers/tests/support/netconfd.rs"]
mod netconfd;
mod support;

use std::time::Duration;

use patchbay_providers::Device as _;
use patchbay_providers::netconf::{NetconfOptions, NetconfSwitch, model};
use patchbay_providers::values::PortName;
use patchbay_testbed::{NetconfTarget, Netconfd};
use support::{baseline, median, ops, timed};

fn main() {
    let rounds = support::env_usize("BENCH_ROUNDS", 7);
    let nc = Netconfd::start(NetconfTarget::Candidate).expect("netconfd (make netconf)");
    let ports: Vec<PortName> = (1..=48)
        .map(|i| PortName::parse(&format!("eth{i}")).unwrap())
        .collect();
    let target = netconfd::login(&nc);
    let sw = NetconfSwitch::new(
        target.clone(),
        model::for_os("yang", None).unwrap(),
        NetconfOptions::default(),
    );
    // The operator's device: the session kept for a batch that follows within the
    // batch window (issue 33), here the operator's default window of 100 ms.
    let kept = NetconfSwitch::new(
        target,
        model::for_os("yang", None).unwrap(),
        NetconfOptions {
            keep_session: Duration::from_millis(100),
            ..NetconfOptions::default()
        },
    );
    let rt = support::runtime();
    println!(
        "NETCONF backend vs netconfd, candidate + confirmed commit ({rounds} rounds, release build)"
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
    // Batches that follow each other within the window, as a burst of changes cut
    // by the window makes them: one change per batch, the session closed after each
    // (before) or kept for the next (after).
    let (closed_each, kept_each, logins) = rt.block_on(async {
        let mut closed_each = Vec::new();
        let mut kept_each = Vec::new();
        timed(&kept, &ops(&ports[..1], 3002)).await;
        let before = kept.logins();
        for r in 0..rounds * 3 {
            closed_each.push(timed(&sw, &ops(&ports[1..2], 400 + (r % 2) as u16)).await);
        }
        for r in 0..rounds * 3 {
            kept_each.push(timed(&kept, &ops(&ports[2..3], 400 + (r % 2) as u16)).await);
        }
        let logins = kept.logins() - before;
        kept.close_idle().await;
        (median(closed_each), median(kept_each), logins)
    });
    println!(
        "  one access-VLAN change, end to end (transaction + read-back): median {:.1} ms",
        single.as_secs_f64() * 1e3
    );
    println!(
        "  48 ports, one transaction (+ read-back):                     median {:.1} ms ({:.2} ms/port)",
        batch.as_secs_f64() * 1e3,
        batch.as_secs_f64() * 1e3 / 48.0
    );
    println!(
        "  back-to-back one-port batches, a session each:               median {:.1} ms",
        closed_each.as_secs_f64() * 1e3
    );
    println!(
        "  back-to-back one-port batches, session kept (100 ms window): median {:.1} ms ({} logins for {} batches)",
        kept_each.as_secs_f64() * 1e3,
        logins,
        rounds * 3
    );
    let ratio = batch.as_secs_f64() / single.as_secs_f64();
    println!(
        "  batch / single: {ratio:.2}x (target <= 2x: {})",
        if ratio <= 2.0 { "met" } else { "NOT met" }
    );

    // The ncclient baseline, same server, same run (the key in a 0600 file).
    let ncclient = match baseline(
        "ncclient_baseline.py",
        serde_json::json!({
            "address": nc.address, "port": nc.port, "username": nc.username,
            "vlans": [300, 301], "repeat": 3,
        }),
        &[("key_file", nc.client_key.as_bytes())],
        &ports,
    ) {
        Ok(d) => d,
        Err(e) => {
            println!("  ncclient baseline failed: {e}");
            return;
        }
    };
    println!(
        "  ncclient, one session and commit per port, 48 ports:       median {:.1} ms ({:.2} ms/port)",
        ncclient.as_secs_f64() * 1e3,
        ncclient.as_secs_f64() * 1e3 / 48.0
    );
    let speedup = ncclient.as_secs_f64() / batch.as_secs_f64();
    println!(
        "  ncclient per-port / patchbay batch: {speedup:.2}x (target >= 5x: {})",
        if speedup >= 5.0 { "met" } else { "NOT met" }
    );
}

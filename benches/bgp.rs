//! BGP benchmark against real speakers: FRR (zebra + bgpd in a network namespace,
//! vtysh behind a private sshd) as the ToR and one GoBGP with N local addresses as N
//! hosts, joined by a veth pair carrying N point-to-point /31s. Prints figures,
//! asserts nothing.
//!
//! In the same run, N host neighbours put on the empty speaker three ways, each
//! followed by the wait for all N sessions Established, and removed again between:
//! - patchbay: one `bgp_apply` (one SSH session: every neighbour's lines, then the
//!   read-back) — what a Switch's reconcile does when N hosts are provisioned at once;
//! - one SSH session per neighbour (N `bgp_apply` calls of one change each);
//! - N `vtysh -c` invocations on the speaker itself, one per neighbour (no SSH).
//!
//! Timers: keepalive 1 s, hold 3 s, connect retry 1 s on both sides; no MD5 (the
//! baseline's password would be on vtysh's command line). Env: BENCH_HOSTS (default
//! 48).

use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use patchbay_providers::BgpSpeaker;
use patchbay_providers::bgp::{Change, Neighbor, Outbound, Router, Timers, plan};
use patchbay_providers::cli::{Auth, CliOptions, CliSwitch, HostKeyPolicy, SshTarget, dialect};
use patchbay_providers::secret::SecretString;
use patchbay_testbed::bgp::{Frr, Gobgp, GobgpPeer, Link};

fn tor(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 98, i as u8, 0)
}

fn node(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 98, i as u8, 1)
}

fn neighbor(i: usize) -> Neighbor {
    Neighbor {
        address: node(i),
        remote_asn: 65101,
        local_address: tor(i),
        prefixes: vec![format!("192.0.{}.0/28", i % 250).parse().expect("prefix")],
        max_prefix: 8,
        timers: Timers {
            keepalive: 1,
            hold: 3,
            connect_retry: 1,
        },
        outbound: Outbound::Nothing,
        password: None,
        description: format!("bench host {i}"),
    }
}

/// Removes every managed neighbour and waits until FRR has none.
async fn clear(speaker: &CliSwitch, router: &Router, managed: &BTreeSet<Ipv4Addr>, frr: &Frr) {
    let state = speaker.bgp_state().await.expect("read");
    let changes = plan(&[], &state, managed);
    if !changes.is_empty() {
        speaker.bgp_apply(router, &changes).await.expect("cleared");
    }
    wait("all down", 60, || {
        frr.peer_states().unwrap_or_default().is_empty()
    });
}

fn established(frr: &Frr) -> usize {
    frr.peer_states()
        .unwrap_or_default()
        .iter()
        .filter(|(_, s)| s == "Established")
        .count()
}

fn wait(what: &str, secs: u64, mut ok: impl FnMut() -> bool) -> Duration {
    let t = Instant::now();
    while !ok() {
        if t.elapsed() > Duration::from_secs(secs) {
            eprintln!("{what}: not within {secs} s");
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    t.elapsed()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let n = std::env::var("BENCH_HOSTS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(48)
        .clamp(1, 250);
    let link = Link::new().expect("namespaces");
    let (tns, nns) = (link.tor.clone(), link.node.clone());
    for i in 0..n {
        link.address(&tns, &format!("{}/31", tor(i)))
            .expect("address");
        link.address(&nns, &format!("{}/31", node(i)))
            .expect("address");
    }
    let frr = Frr::start(&tns, "bench-tor").expect("FRR (make bgp)");
    let peers: Vec<GobgpPeer> = (0..n)
        .map(|i| GobgpPeer {
            address: tor(i).to_string(),
            asn: 65000,
            local_address: node(i).to_string(),
            password: None,
        })
        .collect();
    let gobgp = Gobgp::start(&nns, 65101, &node(0).to_string(), &peers).expect("GoBGP");
    let speaker = CliSwitch::new(
        SshTarget {
            address: "127.0.0.1".into(),
            port: frr.ssh_port,
            username: frr.username.clone(),
            auth: Auth::PrivateKey {
                pem: SecretString::new(frr.client_key.clone()),
                passphrase: None,
            },
            host_key: HostKeyPolicy::Fingerprint(frr.host_key_fingerprint.clone()),
            connect_timeout: Duration::from_secs(10),
        },
        None,
        dialect::for_os("frr").expect("the frr dialect"),
        CliOptions::default(),
    );
    let router = Router {
        asn: 65000,
        router_id: "10.255.0.1".parse().expect("router id"),
    };
    let want: Vec<Neighbor> = (0..n).map(neighbor).collect();
    let managed: BTreeSet<Ipv4Addr> = (0..n).map(node).collect();
    println!(
        "{n} host neighbours on one FRR ToR (GoBGP as the hosts), timers 1/3 s, connect retry 1 s"
    );

    // patchbay: one session.
    let t = Instant::now();
    let state = speaker.bgp_state().await.expect("read");
    let changes = plan(&want, &state, &managed);
    let after = speaker.bgp_apply(&router, &changes).await.expect("applied");
    let applied = t.elapsed();
    assert!(
        plan(&want, &after, &managed).is_empty(),
        "read back as sent"
    );
    let est = wait("Established", 120, || established(&frr) == n);
    println!(
        "patchbay, one session (read, {n} neighbours, read back): configuration applied {:.2} s, all Established {:.2} s after",
        applied.as_secs_f64(),
        est.as_secs_f64()
    );
    clear(&speaker, &router, &managed, &frr).await;

    // One SSH session per neighbour.
    let t = Instant::now();
    for w in &want {
        speaker
            .bgp_apply(
                &router,
                &[Change::Put {
                    neighbor: w.clone(),
                    stale: vec![],
                }],
            )
            .await
            .expect("applied");
    }
    let applied_each = t.elapsed();
    let est = wait("Established", 120, || established(&frr) == n);
    println!(
        "one SSH session per neighbour ({n} sessions): configuration applied {:.2} s ({:.1}x patchbay), all Established {:.2} s after",
        applied_each.as_secs_f64(),
        applied_each.as_secs_f64() / applied.as_secs_f64(),
        est.as_secs_f64()
    );
    clear(&speaker, &router, &managed, &frr).await;

    // N vtysh -c invocations on the speaker itself.
    let spec = dialect::for_os("frr")
        .and_then(|d| d.bgp.clone())
        .expect("bgp section");
    let t = Instant::now();
    for w in &want {
        let lines = spec.render(
            &router,
            &[Change::Put {
                neighbor: w.clone(),
                stale: vec![],
            }],
        );
        let mut commands = vec!["configure terminal".to_owned()];
        commands.extend(lines.into_iter().map(|l| l.text));
        let refs: Vec<&str> = commands.iter().map(String::as_str).collect();
        frr.vtysh(&refs).expect("vtysh");
    }
    let applied_vtysh = t.elapsed();
    let est = wait("Established", 120, || established(&frr) == n);
    println!(
        "{n} `vtysh -c` runs on the speaker, one per neighbour (no SSH): configuration applied {:.2} s ({:.1}x patchbay), all Established {:.2} s after",
        applied_vtysh.as_secs_f64(),
        applied_vtysh.as_secs_f64() / applied.as_secs_f64(),
        est.as_secs_f64()
    );
    clear(&speaker, &router, &managed, &frr).await;
    drop(gobgp);
    drop(frr);
    drop(link);
}

//! `patchbay run` as a platform team runs it: the real binary against devplane (or
//! the cluster `PATCHBAY_E2E_CLUSTER=kubeconfig` points at) and a simulated Cisco.
//! Its metrics move as ports change, its probes answer, its JSON logs carry the span
//! fields and no secret, and SIGTERM mid-batch lets the batch finish, exits 0 and
//! leaves every port consistent with the device.

mod support;

#[path = "support/ssh_cases.rs"]
mod ssh_cases;

use std::io::{Read as _, Write as _};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use patchbay::api::{PortState, SwitchPort};
use patchbay_providers::{Device as _, VlanMode};
use patchbay_testbed::{FakeSwitches, SimSpec, SimSwitch};
use serde_json::json;
use ssh_cases::{backend, port, vlan};
use support::env::Env;
use support::{Cluster, eventually};

/// The switch, its configuration and ports, without an operator.
async fn fabric(cluster: Cluster, sim: &SimSwitch, ports: usize) -> Env {
    // Env starts an in-process operator; these tests run the binary instead, so
    // they only borrow Env's helpers with the operator switched off.
    let env = Env::without_operator(cluster).await;
    let names: Vec<(String, String)> = (1..=ports)
        .map(|i| (format!("p{i}"), format!("FastEthernet0/{i}")))
        .collect();
    let pairs: Vec<(&str, &str)> = names
        .iter()
        .map(|(a, b)| (a.as_str(), b.as_str()))
        .collect();
    env.switch("tor1", "ios", sim, &sim.host_key_fingerprint, &pairs)
        .await;
    env.configuration("web", json!({"untaggedVLAN": 100})).await;
    env
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `patchbay run` with `extra` flags, its stdout (the logs) into `log`.
fn operator(env: &Env, log: &PathBuf, extra: &[&str]) -> Child {
    let out = std::fs::File::create(log).unwrap();
    Command::new(env!("CARGO_BIN_EXE_patchbay"))
        .arg("run")
        .arg("--kubeconfig")
        .arg(&env.cluster.kubeconfig)
        .args([
            "--namespace",
            &env.cluster.namespace,
            "--batch-window-ms",
            "50",
        ])
        .args(extra)
        .stdout(Stdio::from(out))
        .stderr(Stdio::null())
        .spawn()
        .expect("patchbay run starts")
}

/// GET `path` on 127.0.0.1:`port`: (status code, body).
fn get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let code = text.split_whitespace().nth(1)?.parse().ok()?;
    let body = text.split_once("\r\n\r\n")?.1.to_owned();
    Some((code, body))
}

/// The value of the sample `line_start` (`name{labels}`) in a scrape.
fn sample(scrape: &str, line_start: &str) -> f64 {
    scrape
        .lines()
        .find(|l| l.starts_with(line_start) && l[line_start.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

fn sigterm(child: &Child) {
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

fn wait_exit(child: &mut Child, secs: u64) -> std::process::ExitStatus {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(
            Instant::now() < deadline,
            "patchbay run did not exit in {secs} s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

async fn access(sim: &SimSwitch, p: &str) -> Option<VlanMode> {
    backend("ios", sim).get_port(&port(p)).await.ok()?.vlans
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_move_as_ports_change_the_probes_answer_and_json_logs_hold_no_secret() {
    let sims = FakeSwitches::start(&[SimSpec::new("tor1", "cisco_generic")]).unwrap();
    let sim = sims.get("tor1").clone();
    let env = fabric(Cluster::start("prod-metrics").await, &sim, 2).await;
    let metrics_port = free_port();
    let log = env.cluster.dir.join("operator.log");
    let address = format!("127.0.0.1:{metrics_port}");
    let mut child = operator(
        &env,
        &log,
        &[
            "--metrics-address",
            &address,
            "--log-format",
            "json",
            "--drift-interval-seconds",
            "1",
        ],
    );
    eventually(30, "/healthz", || async {
        (get(metrics_port, "/healthz")?.0 == 200).then_some(())
    })
    .await;
    eventually(30, "/readyz", || async {
        (get(metrics_port, "/readyz")?.0 == 200).then_some(())
    })
    .await;
    assert_eq!(get(metrics_port, "/nothing").unwrap().0, 404);

    env.link("p1", Some("web")).await;
    env.wait_state("p1", PortState::Active).await;
    let scrape = eventually(30, "the port counted Active", || async {
        let body = get(metrics_port, "/metrics")?.1;
        (sample(
            &body,
            "patchbay_ports{kind=\"SwitchPort\",state=\"Active\"}",
        ) == 1.0)
            .then_some(body)
    })
    .await;
    for (line, at_least) in [
        (
            "patchbay_port_transitions_total{from=\"Configuring\",to=\"Active\"}",
            1.0,
        ),
        (
            "patchbay_port_transitions_total{from=\"Idle\",to=\"Configuring\"}",
            1.0,
        ),
        (
            "patchbay_device_operations_total{backend=\"ssh\",outcome=\"changed\"}",
            1.0,
        ),
        ("patchbay_batch_size_count{backend=\"ssh\"}", 1.0),
        (
            "patchbay_reconciles_total{controller=\"SwitchPort\",result=\"ok\"}",
            2.0,
        ),
        (
            "patchbay_reconciles_total{controller=\"Switch\",result=\"ok\"}",
            1.0,
        ),
        ("patchbay_ports{kind=\"SwitchPort\",state=\"Idle\"}", 1.0),
        ("patchbay_leader", 1.0),
    ] {
        assert!(
            sample(&scrape, line) >= at_least,
            "{line} < {at_least} in\n{scrape}"
        );
    }
    assert_eq!(
        sample(&scrape, "patchbay_device_sessions_open{backend=\"ssh\"}"),
        0.0
    );
    // Labels are bounded: no object name, no error text.
    assert!(
        !scrape.contains("p1") && !scrape.contains("tor1"),
        "{scrape}"
    );

    // Somebody changes the port on the device: the sweep finds it, the port repairs it.
    backend("ios", &sim)
        .set_port(&{
            let mut d = patchbay_providers::DesiredPort::clean(port("FastEthernet0/1"));
            d.vlans = VlanMode::Access { vlan: vlan(300) };
            d
        })
        .await
        .unwrap();
    eventually(30, "drift found and repaired", || async {
        let body = get(metrics_port, "/metrics")?.1;
        (sample(&body, "patchbay_drift_found_total{backend=\"ssh\"}") >= 1.0
            && sample(&body, "patchbay_drift_repaired_total{kind=\"SwitchPort\"}") >= 1.0)
            .then_some(())
    })
    .await;
    assert_eq!(
        access(&sim, "FastEthernet0/1").await,
        Some(VlanMode::Access { vlan: vlan(100) })
    );

    sigterm(&child);
    assert!(wait_exit(&mut child, 40).success(), "exit 0 on SIGTERM");
    // Every log line is one JSON object; reconcile lines carry the span's fields;
    // neither password appears anywhere.
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert!(lines.len() > 5, "{text}");
    let with_span = lines
        .iter()
        .find(|l| l.pointer("/span/port").and_then(|v| v.as_str()) == Some("p1"))
        .unwrap_or_else(|| panic!("no line with p1's span in\n{text}"));
    assert_eq!(with_span["span"]["namespace"], json!(env.cluster.namespace));
    assert_eq!(with_span["span"]["name"], json!("switchport"));
    assert_eq!(with_span["span"]["switch"], json!("tor1"));
    assert!(with_span["span"]["device_port"].is_string(), "{with_span}");
    assert!(!text.contains(&sim.password) && !text.contains(&sim.enable_password));
    assert!(text.contains("\"stopping: no new work; in-flight batches finish\""));
    env.cluster.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_mid_batch_finishes_the_batch_exits_0_and_leaves_every_port_consistent() {
    let sims = FakeSwitches::start(&[SimSpec::new("tor1", "cisco_generic")]).unwrap();
    let sim = sims.get("tor1").clone();
    const PORTS: usize = 12;
    let env = fabric(Cluster::start("prod-sigterm").await, &sim, PORTS).await;
    let log = env.cluster.dir.join("operator.log");
    let mut child = operator(&env, &log, &[]);
    let ports = env.api::<SwitchPort>();
    eventually(30, "the ports Idle", || async {
        let list = ports.list(&Default::default()).await.ok()?;
        (list.items.len() == PORTS
            && list
                .items
                .iter()
                .all(|p| p.status.as_ref().and_then(|s| s.state) == Some(PortState::Idle)))
        .then_some(())
    })
    .await;
    for i in 1..=PORTS {
        env.link(&format!("p{i}"), Some("web")).await;
    }
    // SIGTERM as soon as the batch is under way.
    eventually(30, "a port Configuring", || async {
        let list = ports.list(&Default::default()).await.ok()?;
        list.items
            .iter()
            .any(|p| p.status.as_ref().and_then(|s| s.state) == Some(PortState::Configuring))
            .then_some(())
    })
    .await;
    sigterm(&child);
    assert!(wait_exit(&mut child, 40).success(), "exit 0 on SIGTERM");
    // Consistent: a port the status calls Active carries its configuration on the
    // device; none is left Cleaning or unknown.
    let list = ports.list(&Default::default()).await.unwrap();
    let mut active = 0;
    for p in &list.items {
        let state = p.status.as_ref().and_then(|s| s.state);
        let device_port = format!(
            "FastEthernet0/{}",
            &p.metadata.name.as_deref().unwrap()[1..]
        );
        match state {
            Some(PortState::Active) => {
                active += 1;
                assert_eq!(
                    access(&sim, &device_port).await,
                    Some(VlanMode::Access { vlan: vlan(100) }),
                    "{device_port} is Active"
                );
            }
            Some(PortState::Configuring | PortState::Idle) => {}
            other => panic!("{device_port} left {other:?}"),
        }
    }
    assert!(active > 0, "the batch under way when SIGTERM came finished");
    // Started again, the operator finishes what is left, with nothing to undo.
    let mut again = operator(&env, &log, &[]);
    for i in 1..=PORTS {
        env.wait_state(&format!("p{i}"), PortState::Active).await;
        assert_eq!(
            access(&sim, &format!("FastEthernet0/{i}")).await,
            Some(VlanMode::Access { vlan: vlan(100) })
        );
    }
    sigterm(&again);
    assert!(wait_exit(&mut again, 40).success());
    env.cluster.finish().await;
}

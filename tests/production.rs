//! `patchbay run` as a platform team runs it: the real binary against devplane (or
//! the cluster `PATCHBAY_E2E_CLUSTER=kubeconfig` points at) and a simulated Cisco.
//! Its metrics move as ports change, its probes answer, its JSON logs carry the span
//! fields and no secret, and SIGTERM mid-batch lets the batch finish, exits 0 and
//! leaves every port consistent with the device.

mod support;

#[path = "../providers/tests/support/ssh_cases.rs"]
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
use support::{Cluster, assert_one_writer, eventually};

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
            "--lease-namespace",
            &env.cluster.namespace,
        ])
        .args(extra)
        .stdout(Stdio::from(out))
        .stderr(Stdio::from(
            std::fs::File::create(log.with_extension("err")).unwrap(),
        ))
        .spawn()
        .expect("patchbay run starts")
}

/// Prints the end of each operator log when the test panics: a timeout in these
/// tests says what the test waited for, the logs say what the operator was doing.
struct LogsOnPanic(Vec<PathBuf>);

impl Drop for LogsOnPanic {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        for path in &self.0 {
            for file in [path.clone(), path.with_extension("err")] {
                let text = std::fs::read_to_string(&file).unwrap_or_default();
                let lines: Vec<&str> = text.lines().collect();
                let tail = &lines[lines.len().saturating_sub(80)..];
                eprintln!("--- {} (last {} lines)", file.display(), tail.len());
                for line in tail {
                    eprintln!("{line}");
                }
            }
        }
    }
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

/// `patchbay_device_operations_total` of the SSH backend with `outcome` (`changed`,
/// `unchanged`) in `scrape`.
fn ssh_operations(scrape: &str, outcome: &str) -> f64 {
    sample(
        scrape,
        &format!("patchbay_device_operations_total{{backend=\"ssh\",outcome=\"{outcome}\"}}"),
    )
}

/// Waits until a port of the test is Configuring (the work is under way).
async fn some_port_configuring(env: &Env) {
    let ports = env.api::<SwitchPort>();
    eventually(30, "a port Configuring", || async {
        let list = ports.list(&Default::default()).await.ok()?;
        list.items
            .iter()
            .any(|p| p.status.as_ref().and_then(|s| s.state) == Some(PortState::Configuring))
            .then_some(())
    })
    .await;
}

/// Waits until the Switch's `n` ports exist and are all Idle.
async fn all_idle(env: &Env, n: usize) {
    let ports = env.api::<SwitchPort>();
    eventually(30, "the ports Idle", || async {
        let list = ports.list(&Default::default()).await.ok()?;
        (list.items.len() == n
            && list
                .items
                .iter()
                .all(|p| p.status.as_ref().and_then(|s| s.state) == Some(PortState::Idle)))
        .then_some(())
    })
    .await;
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

/// Waits until ports `p{i}` are Active, for each `i`.
async fn all_active(env: &Env, ports: impl IntoIterator<Item = usize>) {
    for i in ports {
        env.wait_state(&format!("p{i}"), PortState::Active).await;
    }
}

/// Asserts FastEthernet0/`i` carries the `web` configuration (access 100), read
/// from the simulator, for each `i`.
async fn on_web(sim: &SimSwitch, ports: impl IntoIterator<Item = usize>) {
    for i in ports {
        assert_eq!(
            access(sim, &format!("FastEthernet0/{i}")).await,
            Some(VlanMode::Access { vlan: vlan(100) }),
            "FastEthernet0/{i}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_move_as_ports_change_the_probes_answer_and_json_logs_hold_no_secret() {
    let sims = FakeSwitches::start(&[SimSpec::new("tor1", "cisco_generic")]).unwrap();
    let sim = sims.get("tor1").clone();
    let env = fabric(Cluster::start("prod-metrics").await, &sim, 2).await;
    let metrics_port = free_port();
    let log = env.cluster.dir.join("operator.log");
    let _logs = LogsOnPanic(vec![log.clone()]);
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
            "--batch-window-ms",
            "50",
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
    let again_log = env.cluster.dir.join("again.log");
    let _logs = LogsOnPanic(vec![log.clone(), again_log.clone()]);
    let mut child = operator(&env, &log, &["--batch-window-ms", "50"]);
    let ports = env.api::<SwitchPort>();
    all_idle(&env, PORTS).await;
    for i in 1..=PORTS {
        env.link(&format!("p{i}"), Some("web")).await;
    }
    // SIGTERM as soon as the batch is under way.
    some_port_configuring(&env).await;
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
    let mut again = operator(&env, &again_log, &["--batch-window-ms", "50"]);
    all_active(&env, 1..=PORTS).await;
    on_web(&sim, 1..=PORTS).await;
    sigterm(&again);
    assert!(wait_exit(&mut again, 40).success());
    env.cluster.finish().await;
}

/// A restart that finds some caches slow to list: the port cache lists first, so
/// every port's reconcile starts and waits for the others together — and every one
/// of them goes on once they have listed. (Waiting on kube's own readiness woke only
/// the last of them: CI caught ports left Configuring for good after a restart.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_while_caches_list_late_leaves_no_port_behind() {
    let sims = FakeSwitches::start(&[SimSpec::new("tor1", "cisco_generic")]).unwrap();
    let sim = sims.get("tor1").clone();
    const PORTS: usize = 12;
    let env = fabric(Cluster::start("prod-late-lists").await, &sim, PORTS).await;
    let (first_log, again_log) = (
        env.cluster.dir.join("first.log"),
        env.cluster.dir.join("again.log"),
    );
    let _logs = LogsOnPanic(vec![first_log.clone(), again_log.clone()]);
    // A first run creates the Switch's ports.
    let mut first = operator(&env, &first_log, &[]);
    all_idle(&env, PORTS).await;
    sigterm(&first);
    assert!(wait_exit(&mut first, 40).success());
    // Linked while no operator runs: the next one finds every port to configure.
    for i in 1..=PORTS {
        env.link(&format!("p{i}"), Some("web")).await;
    }
    if let Some(devplane) = env.cluster.devplane() {
        for resource in ["switches", "providerswitches", "switchportconfigurations"] {
            devplane.delay_lists(resource, Duration::from_secs(2));
        }
    }
    let metrics_port = free_port();
    let address = format!("127.0.0.1:{metrics_port}");
    let mut again = operator(&env, &again_log, &["--metrics-address", &address]);
    all_active(&env, 1..=PORTS).await;
    on_web(&sim, 1..=PORTS).await;
    // Each port was applied once: a trigger queued while its reconcile wrote the
    // status waits for the copy with that write rather than applying again from the
    // copy without it.
    let scrape = get(metrics_port, "/metrics").unwrap().1;
    assert_eq!(ssh_operations(&scrape, "changed"), PORTS as f64, "{scrape}");
    assert_eq!(ssh_operations(&scrape, "unchanged"), 0.0, "{scrape}");
    // Nothing is left in flight: the operator stops at once and exits 0.
    sigterm(&again);
    assert!(wait_exit(&mut again, 40).success());
    env.cluster.finish().await;
}

/// A cache that lags the API server: a port's own status writes reach its cache
/// late, so the reconcile woken by its first write (Configuring) reads a copy from
/// before its last (Active). It waits for the copy with that write instead of
/// applying the port again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_port_read_from_before_its_own_last_write_is_not_applied_again() {
    if !support::on_devplane() {
        return; // a real cluster lags as it will; the fault needs devplane
    }
    let sims = FakeSwitches::start(&[SimSpec::new("tor1", "cisco_generic")]).unwrap();
    let sim = sims.get("tor1").clone();
    let env = fabric(Cluster::start("prod-lagging-cache").await, &sim, 2).await;
    let log = env.cluster.dir.join("operator.log");
    let _logs = LogsOnPanic(vec![log.clone()]);
    let metrics_port = free_port();
    let address = format!("127.0.0.1:{metrics_port}");
    let mut child = operator(&env, &log, &["--metrics-address", &address]);
    all_idle(&env, 2).await;
    let devplane = env.cluster.devplane().unwrap();
    devplane.delay_watch_events("switchports", Duration::from_millis(1500));
    env.link("p1", Some("web")).await;
    env.wait_state("p1", PortState::Active).await;
    // Past the last delayed event of the port, and a reconcile of each.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let scrape = get(metrics_port, "/metrics").unwrap().1;
    assert_eq!(ssh_operations(&scrape, "changed"), 1.0, "{scrape}");
    assert_eq!(
        ssh_operations(&scrape, "unchanged"),
        0.0,
        "applied again\n{scrape}"
    );
    assert_eq!(
        access(&sim, "FastEthernet0/1").await,
        Some(VlanMode::Access { vlan: vlan(100) })
    );
    devplane.delay_watch_events("switchports", Duration::ZERO);
    sigterm(&child);
    assert!(wait_exit(&mut child, 40).success());
    env.cluster.finish().await;
}

/// Killed (-9) while its first batch runs, the operator is started again with every
/// port still Configuring: its reconciles race to the switch's worker at once, and
/// the device still sees one session at a time (maxSessions 1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_with_ports_configuring_opens_one_session_at_a_time() {
    let sims = FakeSwitches::start(&[SimSpec::new("tor1", "cisco_2960_24TT_L")]).unwrap();
    let sim = sims.get("tor1").clone();
    const PORTS: usize = 24;
    let env = fabric(Cluster::start("prod-restart-one-writer").await, &sim, PORTS).await;
    env.cap_sessions("tor1", 1).await;
    let (first_log, again_log) = (
        env.cluster.dir.join("first.log"),
        env.cluster.dir.join("again.log"),
    );
    let _logs = LogsOnPanic(vec![first_log.clone(), again_log.clone()]);
    let no_election = ["--leader-elect", "false"];
    let mut first = operator(&env, &first_log, &no_election);
    all_idle(&env, PORTS).await;
    let before = sims.connections("tor1");
    for i in 1..=PORTS {
        env.link(&format!("p{i}"), Some("web")).await;
    }
    eventually(30, "the first batch's session", || async {
        (sims.connections("tor1") > before).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    Command::new("kill")
        .args(["-9", &first.id().to_string()])
        .status()
        .unwrap();
    first.wait().unwrap();
    let mut again = operator(&env, &again_log, &no_election);
    all_active(&env, 1..=PORTS).await;
    assert_one_writer(&sims, "tor1");
    on_web(&sim, [1, PORTS / 2, PORTS]).await;
    sigterm(&again);
    assert!(wait_exit(&mut again, 40).success());
    env.cluster.finish().await;
}

/// The Lease's holder and its last renewal (Unix seconds).
async fn lease(env: &Env) -> Option<(String, f64)> {
    let l = env
        .api::<k8s_openapi::api::coordination::v1::Lease>()
        .get_opt("patchbay")
        .await
        .ok()??;
    let spec = l.spec?;
    let renewed = spec.renew_time?.0.as_millisecond() as f64 / 1000.0;
    Some((spec.holder_identity.unwrap_or_default(), renewed))
}

fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// A release while the elector renews: the renewal loop renewing every 10 ms (so a
/// renewal between the release's read and its write is likely, as CI once saw at
/// 0.5 s), each of 20 releases lands, and the Lease stays released after it (the
/// loop writes nothing more, where it used to take the free Lease straight back).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_lands_while_the_lease_is_being_renewed_and_stays() {
    use patchbay::lease::{DeviceGate, Elector, Leadership};
    use patchbay_core::decide::lease::Timings;
    let cluster = Cluster::start("lease-release").await;
    let api: kube::Api<k8s_openapi::api::coordination::v1::Lease> =
        kube::Api::namespaced(cluster.client.clone(), &cluster.namespace);
    let timings = Timings {
        lease_duration: Duration::from_millis(600),
        renew_deadline: Duration::from_millis(400),
        retry_period: Duration::from_millis(10),
    };
    for round in 0..20 {
        let name = format!("lease-{round}");
        let gate = DeviceGate::default();
        let elector = std::sync::Arc::new(Elector::new(
            cluster.client.clone(),
            &cluster.namespace,
            &name,
            "me",
            timings,
            gate.clone(),
        ));
        let (tx, mut rx) = tokio::sync::watch::channel(Leadership::default());
        let running = elector.clone();
        let run = tokio::spawn(async move { running.run(tx).await });
        tokio::time::timeout(Duration::from_secs(10), rx.wait_for(|l| l.leading))
            .await
            .expect("leads")
            .unwrap();
        // Some renewals, then the release in the middle of the loop.
        tokio::time::sleep(Duration::from_millis(30 + 7 * round)).await;
        elector.release().await;
        assert!(!gate.allows(), "devices are off limits after the release");
        let holder = |l: k8s_openapi::api::coordination::v1::Lease| {
            l.spec.and_then(|s| s.holder_identity).unwrap_or_default()
        };
        assert_eq!(
            holder(api.get(&name).await.unwrap()),
            "",
            "round {round}: released"
        );
        tokio::time::timeout(Duration::from_secs(5), run)
            .await
            .expect("the loop ends after the release")
            .unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(
            holder(api.get(&name).await.unwrap()),
            "",
            "round {round}: still released"
        );
    }
    cluster.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_one_acts_and_the_other_finishes_when_the_leader_is_killed() {
    let sims = FakeSwitches::start(&[SimSpec::new("tor1", "cisco_generic")]).unwrap();
    let sim = sims.get("tor1").clone();
    let env = fabric(Cluster::start("prod-leader").await, &sim, 12).await;
    env.cap_sessions("tor1", 1).await;
    // A 3 s lease renewed every 0.5 s; a 2 s batch window so that work handed over
    // is still waiting for its batch when the leader dies.
    let lease_flags = [
        "--lease-duration-seconds",
        "3",
        "--renew-deadline-seconds",
        "2",
        "--retry-period-seconds",
        "0.5",
        "--batch-window-ms",
        "2000",
    ];
    let (a_metrics, b_metrics) = (free_port(), free_port());
    let (a_addr, b_addr) = (
        format!("127.0.0.1:{a_metrics}"),
        format!("127.0.0.1:{b_metrics}"),
    );
    let with = |addr: &str| {
        let mut v: Vec<String> = lease_flags.iter().map(|s| s.to_string()).collect();
        v.extend(["--metrics-address".to_string(), addr.to_string()]);
        v
    };
    let _logs = LogsOnPanic(vec![
        env.cluster.dir.join("a.log"),
        env.cluster.dir.join("b.log"),
    ]);
    let a_args = with(&a_addr);
    let mut a = operator(
        &env,
        &env.cluster.dir.join("a.log"),
        &a_args.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    let a_id = format!("_{}", a.id());
    eventually(30, "A holds the lease", || async {
        lease(&env)
            .await
            .filter(|(h, _)| h.ends_with(&a_id))
            .map(|_| ())
    })
    .await;
    let b_args = with(&b_addr);
    let mut b = operator(
        &env,
        &env.cluster.dir.join("b.log"),
        &b_args.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    let b_id = format!("_{}", b.id());
    // B stands by: ready (the leader is known), not leading, no device session.
    eventually(30, "B ready on standby", || async {
        (get(b_metrics, "/readyz")?.0 == 200).then_some(())
    })
    .await;
    let b_scrape = get(b_metrics, "/metrics").unwrap().1;
    assert_eq!(sample(&b_scrape, "patchbay_leader"), 0.0, "{b_scrape}");
    // A configures the first six ports.
    for i in 1..=6 {
        env.link(&format!("p{i}"), Some("web")).await;
    }
    all_active(&env, 1..=6).await;
    // The next six are handed to A's switch worker; A dies before their batch.
    for i in 7..=12 {
        env.link(&format!("p{i}"), Some("web")).await;
    }
    some_port_configuring(&env).await;
    let (_, last_renewal) = lease(&env).await.unwrap();
    Command::new("kill")
        .args(["-9", &a.id().to_string()])
        .status()
        .unwrap();
    let killed = unix_now();
    a.wait().unwrap();
    // B takes over within leaseDuration + retryPeriod of A's last renewal (plus the
    // time to read and write the Lease).
    eventually(30, "B holds the lease", || async {
        lease(&env)
            .await
            .filter(|(h, _)| h.ends_with(&b_id))
            .map(|_| ())
    })
    .await;
    let took_over = unix_now();
    assert!(
        took_over - last_renewal <= 3.0 + 0.5 + 1.0,
        "took over {:.2} s after the last renewal",
        took_over - last_renewal
    );
    // B finishes the in-flight ports, and only those, one session at a time.
    all_active(&env, 1..=12).await;
    assert_one_writer(&sims, "tor1");
    let sessions = sims.sessions("tor1");
    on_web(&sim, 1..=12).await;
    let b_scrape = eventually(30, "B's scrape", || async {
        get(b_metrics, "/metrics").map(|r| r.1)
    })
    .await;
    assert_eq!(
        ssh_operations(&b_scrape, "changed"),
        6.0,
        "B configured the six ports A had not done\n{b_scrape}"
    );
    assert_eq!(
        ssh_operations(&b_scrape, "unchanged"),
        0.0,
        "B sent nothing for the ports A had done"
    );
    assert_eq!(sample(&b_scrape, "patchbay_leader"), 1.0);
    // The two replicas' device sessions never overlap: every session opened before
    // the kill closed before the first one opened after it.
    let before: Vec<_> = sessions.iter().filter(|s| s.opened < killed).collect();
    let after: Vec<_> = sessions.iter().filter(|s| s.opened >= killed).collect();
    assert!(!before.is_empty() && !after.is_empty(), "{sessions:?}");
    let last_close = before
        .iter()
        .map(|s| s.closed.expect("A's sessions are closed"))
        .fold(0.0, f64::max);
    let first_open = after.iter().map(|s| s.opened).fold(f64::MAX, f64::min);
    assert!(last_close <= first_open, "{sessions:?}");
    assert!(
        first_open >= last_renewal + 3.0 - 0.25,
        "B touched the switch early: {sessions:?}"
    );
    // SIGTERM: B stops, releases the Lease, exits 0.
    sigterm(&b);
    assert!(wait_exit(&mut b, 40).success());
    let (holder, _) = lease(&env).await.unwrap();
    assert_eq!(holder, "", "released");
    env.cluster.finish().await;
}

/// Leader election on (its defaults: a 5 s batch bound) and a switch that accepts
/// TCP and never says a word: the port and the Switch say the device did not answer
/// within the bound (DeviceTimeout, not a protocol error), the switch is probed once
/// per backoff step rather than by every port, and a `connectTimeoutSeconds` the
/// bound makes moot is said on the ProviderSwitch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_switch_that_never_answers_is_reported_silent_and_probed_per_backoff_step() {
    use patchbay::api::{ProviderSwitch, Switch};
    use support::env::{condition, find_condition};
    let env = Env::without_operator(Cluster::start("prod-silent").await).await;
    let mute = patchbay_testbed::SilentDevice::start().unwrap();
    let port = mute.port;
    env.device(
        "mute",
        &[("username", "admin"), ("password", "not-used")],
        json!({"backend": "ssh", "os": "ios", "address": "127.0.0.1", "port": port,
               "hostKey": {"fingerprint": "SHA256:v4cRr7ClTTn6CxGK/qsnWEhL7L4H+y3qHDbCyB3xeug"},
               "options": {"connectTimeoutSeconds": 10}}),
        &[
            ("m1", "FastEthernet0/1"),
            ("m2", "FastEthernet0/2"),
            ("m3", "FastEthernet0/3"),
        ],
    )
    .await;
    env.configuration("web", json!({"untaggedVLAN": 100})).await;
    let log = env.cluster.dir.join("operator.log");
    let _logs = LogsOnPanic(vec![log.clone()]);
    let mut child = operator(&env, &log, &[]);
    for p in ["m1", "m2", "m3"] {
        env.link(p, Some("web")).await;
    }
    let said = "no answer from the device within 5.0 s, the batch bound that leader election sets";
    let m1 = env
        .wait_for("m1", "m1 failing as a silent device", |p| {
            condition(p, "Ready").is_some_and(|(s, r, _)| s == "False" && r == "DeviceTimeout")
        })
        .await;
    let status = m1.status.unwrap();
    assert_eq!(status.last_error.as_deref(), Some(said));
    assert_eq!(status.state, Some(PortState::Configuring));
    let switch = env
        .wait_obj::<Switch>("mute", "the Switch down", |s| {
            s.status.as_ref().is_some_and(|st| {
                find_condition(&st.conditions, "DeviceReachable")
                    .is_some_and(|(s, r, _)| s == "False" && r == "DeviceTimeout")
            })
        })
        .await;
    let (_, _, message) =
        find_condition(&switch.status.unwrap().conditions, "DeviceReachable").unwrap();
    assert!(message.contains(said), "{message}");
    let provider = env
        .wait_obj::<ProviderSwitch>("mute", "the ProviderSwitch noted", |p| {
            p.status.as_ref().is_some_and(|st| {
                find_condition(&st.conditions, "Ready").is_some_and(|(_, _, m)| {
                    m.contains("connectTimeoutSeconds (10 s) cannot take effect")
                })
            })
        })
        .await;
    let (ready, _, _) = find_condition(&provider.status.unwrap().conditions, "Ready").unwrap();
    assert_eq!(
        ready, "True",
        "a setting that cannot take effect does not stop it"
    );
    // Over the next 20 s the three ports wait on the switch: it is probed once per
    // backoff step (5 s, then 10 s: at most three more sessions), not by each port.
    let before = mute.connections();
    tokio::time::sleep(Duration::from_secs(20)).await;
    let probes = mute.connections() - before;
    assert!(
        (1..=3).contains(&probes),
        "{probes} connections to a silent switch in 20 s"
    );
    sigterm(&child);
    assert!(wait_exit(&mut child, 40).success());
    env.cluster.finish().await;
}

/// Leader election with a 1 s batch bound, and a switch that answers everything but
/// slowly (a relay holds back each of its answers): the port fails as slow
/// (DeviceSlow) and tries again on its own backoff; the switch is never declared
/// down. Once the device answers promptly, the port is configured and reads back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_switch_that_answers_slowly_is_not_declared_down() {
    use patchbay::api::Switch;
    use support::env::{condition, find_condition};
    let sims = FakeSwitches::start(&[SimSpec::new("tor1", "cisco_generic")]).unwrap();
    let mut sim = sims.get("tor1").clone();
    let relay = patchbay_testbed::SlowRelay::start(sim.port, Duration::from_millis(150)).unwrap();
    sim.port = relay.port;
    let env = fabric(Cluster::start("prod-slow").await, &sim, 1).await;
    let log = env.cluster.dir.join("operator.log");
    let _logs = LogsOnPanic(vec![log.clone()]);
    let mut child = operator(
        &env,
        &log,
        &[
            "--lease-duration-seconds",
            "3",
            "--renew-deadline-seconds",
            "2",
            "--retry-period-seconds",
            "0.5",
        ],
    );
    env.link("p1", Some("web")).await;
    let p1 = env
        .wait_for("p1", "p1 failing as slow", |p| {
            condition(p, "Ready").is_some_and(|(_, r, _)| r == "DeviceSlow")
        })
        .await;
    let error = p1.status.unwrap().last_error.unwrap_or_default();
    assert!(
        error.starts_with("the device was still answering when the session reached 1.0 s"),
        "{error}"
    );
    let switch: Switch = env.api().get("tor1").await.unwrap();
    let reachable = find_condition(&switch.status.unwrap().conditions, "DeviceReachable");
    assert!(
        reachable.as_ref().is_none_or(|(s, _, _)| s != "False"),
        "a slow switch is not down: {reachable:?}"
    );
    relay.set_delay(Duration::ZERO);
    env.wait_state("p1", PortState::Active).await;
    on_web(&sim, [1]).await;
    sigterm(&child);
    assert!(wait_exit(&mut child, 40).success());
    env.cluster.finish().await;
}

/// The metrics table of docs/production.md: (name, type, label names) per row.
fn documented_metrics() -> Vec<(String, String, Vec<String>)> {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/production.md"))
        .unwrap();
    let table = &doc[doc
        .find("| metric | type | labels |")
        .expect("the metrics table")..];
    let backticked = |text: &str| -> Vec<String> {
        text.split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_owned)
            .collect()
    };
    table
        .lines()
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .map(|row| {
            let cells: Vec<&str> = row.trim_matches('|').split(" | ").map(str::trim).collect();
            // The label names: what is in backticks outside the parentheses.
            let mut outside = String::new();
            let mut depth = 0;
            for c in cells[2].chars() {
                match c {
                    '(' => depth += 1,
                    ')' => depth -= 1,
                    c if depth == 0 => outside.push(c),
                    _ => {}
                }
            }
            (
                backticked(cells[0]).remove(0),
                cells[1].to_owned(),
                backticked(&outside),
            )
        })
        .collect()
}

/// The value of the sample `line_start` (`name{labels}`), if the scrape has it.
fn value(scrape: &str, line_start: &str) -> Option<f64> {
    scrape
        .lines()
        .find(|l| l.starts_with(line_start) && l[line_start.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// An idle operator (the leader, the CRDs installed, nothing else) serves every
/// family docs/production.md lists, with the labels it lists, serves no family the
/// table lacks, and exports every closed label set at 0 before anything happens:
/// failure and device error categories, backends, port kinds, states and changes of
/// state, the admission answers, each controller's results; and the standard
/// `process_*` families.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_operator_exports_every_documented_family_with_its_known_series_at_0() {
    use patchbay::api::{Backend, PortState};
    use patchbay::controllers::ControllerError;
    use patchbay::decide::failure::Failure;
    use patchbay_providers::DeviceError;
    let env = Env::without_operator(Cluster::start("prod-idle-metrics").await).await;
    let metrics_port = free_port();
    let log = env.cluster.dir.join("operator.log");
    let _logs = LogsOnPanic(vec![log.clone()]);
    let address = format!("127.0.0.1:{metrics_port}");
    let mut child = operator(&env, &log, &["--metrics-address", &address]);
    eventually(30, "/readyz", || async {
        (get(metrics_port, "/readyz")?.0 == 200).then_some(())
    })
    .await;
    let scrape = get(metrics_port, "/metrics").unwrap().1;

    // The table and the scrape, both ways.
    let documented = documented_metrics();
    assert!(documented.len() >= 22, "{documented:?}");
    for (name, kind, labels) in &documented {
        let family = match kind.as_str() {
            "counter" => name
                .strip_suffix("_total")
                .expect("a counter ends in _total"),
            _ => name.as_str(),
        };
        assert!(
            scrape.contains(&format!("# TYPE {family} {kind}\n")),
            "{name} ({kind}) is documented but not served:\n{scrape}"
        );
        let sample_name = if kind == "histogram" {
            format!("{name}_count")
        } else {
            name.clone()
        };
        let samples: Vec<&str> = scrape
            .lines()
            .filter(|l| {
                l.strip_prefix(sample_name.as_str())
                    .is_some_and(|rest| rest.starts_with(' ') || rest.starts_with('{'))
            })
            .collect();
        assert!(!samples.is_empty(), "{name} has no sample:\n{scrape}");
        for s in &samples {
            let mut served: Vec<String> = s
                .split_once('{')
                .map(|(_, rest)| rest.split_once('}').unwrap().0)
                .unwrap_or_default()
                .split(',')
                .filter(|kv| !kv.is_empty())
                .map(|kv| kv.split_once('=').unwrap().0.to_owned())
                .collect();
            served.sort();
            let mut listed = labels.clone();
            listed.sort();
            assert_eq!(served, listed, "the labels of {s}");
        }
    }
    for line in scrape.lines().filter_map(|l| l.strip_prefix("# TYPE ")) {
        let (family, kind) = line.split_once(' ').unwrap();
        let name = if kind == "counter" {
            format!("{family}_total")
        } else {
            family.to_owned()
        };
        assert!(
            documented.iter().any(|(n, k, _)| *n == name && k == kind),
            "{name} ({kind}) is served but not in docs/production.md's table"
        );
    }

    // Every closed label set, at 0.
    let at_zero = |line: String| {
        assert_eq!(value(&scrape, &line), Some(0.0), "{line} at 0 in\n{scrape}");
    };
    let failures = Failure::categories();
    assert!(failures.contains(&"DeviceTimeout") && failures.contains(&"Forbidden"));
    for c in &failures {
        at_zero(format!("patchbay_failures_total{{category=\"{c}\"}}"));
    }
    for outcome in std::iter::once(&"ok").chain(&failures) {
        at_zero(format!(
            "patchbay_neighbor_reads_total{{outcome=\"{outcome}\"}}"
        ));
        at_zero(format!(
            "patchbay_bgp_speaker_passes_total{{outcome=\"{outcome}\"}}"
        ));
    }
    for backend in Backend::ALL.map(Backend::name) {
        let b = format!("{{backend=\"{backend}\"}}");
        for family in [
            "patchbay_device_batch_duration_seconds_count",
            "patchbay_batch_size_count",
            "patchbay_device_sessions_open",
            "patchbay_drift_sweeps_total",
            "patchbay_drift_found_total",
        ] {
            at_zero(format!("{family}{b}"));
        }
        for outcome in ["changed", "unchanged"]
            .iter()
            .chain(DeviceError::CATEGORIES)
        {
            at_zero(format!(
                "patchbay_device_operations_total{{backend=\"{backend}\",outcome=\"{outcome}\"}}"
            ));
        }
    }
    let states: Vec<String> = std::iter::once("(none)".to_owned())
        .chain(PortState::ALL.iter().map(ToString::to_string))
        .collect();
    at_zero("patchbay_drift_repaired_total{kind=\"BgpSpeaker\"}".to_owned());
    for kind in ["SwitchPort", "SmartNicPort"] {
        at_zero(format!("patchbay_drift_repaired_total{{kind=\"{kind}\"}}"));
        for state in &states {
            at_zero(format!(
                "patchbay_ports{{kind=\"{kind}\",state=\"{state}\"}}"
            ));
        }
    }
    for from in &states {
        for to in states.iter().skip(1).filter(|to| *to != from) {
            at_zero(format!(
                "patchbay_port_transitions_total{{from=\"{from}\",to=\"{to}\"}}"
            ));
        }
    }
    for answer in ["allowed", "denied"] {
        at_zero(format!(
            "patchbay_admission_duration_seconds_count{{answer=\"{answer}\"}}"
        ));
    }
    for controller in [
        "SwitchPort",
        "Switch",
        "ProviderSwitch",
        "SmartNicPort",
        "ServerClaim",
        "Server",
    ] {
        at_zero(format!(
            "patchbay_reconcile_duration_seconds_count{{controller=\"{controller}\"}}"
        ));
        for result in std::iter::once(&"ok").chain(ControllerError::CATEGORIES) {
            at_zero(format!(
                "patchbay_reconciles_total{{controller=\"{controller}\",result=\"{result}\"}}"
            ));
        }
    }
    assert_eq!(value(&scrape, "patchbay_leader"), Some(1.0));
    // The process, as every Prometheus client reports it.
    let pid_start = value(&scrape, "process_start_time_seconds").unwrap();
    assert!((pid_start - unix_now()).abs() < 120.0, "{pid_start}");
    assert!(value(&scrape, "process_resident_memory_bytes").unwrap() > 1e6);
    assert!(value(&scrape, "process_open_fds").unwrap() >= 3.0);
    assert!(value(&scrape, "process_cpu_seconds_total").unwrap() > 0.0);
    sigterm(&child);
    assert!(wait_exit(&mut child, 40).success());
    env.cluster.finish().await;
}

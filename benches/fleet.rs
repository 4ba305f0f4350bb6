//! Fleet benchmark (issue 17): 50 simulated Cisco switches × 20 ports (1,000 port
//! changes: even ports access, odd ports trunk), end to end, against the tools a user
//! would pick instead. Prints a table and writes it with a plot (SVG) into the output
//! directory (`BENCH_OUT`, default `target/bench-fleet/`). Asserts nothing.
//!
//! On the same simulators (one fake-switches process), each variant with its own
//! VLANs so every port really changes:
//! 1. **patchbay, SSH backend**: the operator in this process on devplane, default
//!    settings; from the first of 1,000 SwitchPort edits (linking each port to the
//!    access or the trunk configuration, 16 requests in flight, as `kubectl apply`
//!    does) to all 1,000 ports Active (the operator reports Active only after reading
//!    the port back from the device). The split: when the API had accepted every
//!    edit, batches and their mean size, and how long each switch's device sessions
//!    took on average (the operator's own metrics);
//! 2. **one SSH session per port** (`bench/fleet_paramiko.py`; how
//!    networking-generic-switch works without batching): all switches in parallel,
//!    one session at a time per switch, each port saved and read back;
//! 3. **Ansible, one run per port** (the seed proof of concept's pattern): a sample
//!    of single-port runs of the same playbook, two at a time (the machine's cores),
//!    extrapolated to 1,000 ports and labelled so;
//! 4. **patchbay, Ansible backend**: as 1, with `backend: ansible` (one run per
//!    batch, one read run per verification), on the first 10 switches (200 changes;
//!    the operator runs at most one `ansible-playbook` per core at once, so the
//!    whole fleet would take tens of minutes here), extrapolated to the fleet and
//!    labelled so.
//!
//! Also the latency of one change: a SwitchPortConfiguration used by one port,
//! edited, to the port Active again, against the device time of the same change
//! through the SSH backend alone (a verified one-port batch).
//!
//! Env: BENCH_FLEET_SWITCHES (50), BENCH_FLEET_PORTS (20), BENCH_FLEET_ANSIBLE_SAMPLE
//! (6 single-port runs), BENCH_FLEET_ANSIBLE (switches of variant 4: 10; 0 skips it),
//! BENCH_OUT.

#[path = "support/cluster.rs"]
#[allow(dead_code)]
mod cluster;
#[allow(dead_code)]
mod support;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use cluster::{BenchCluster, PortWatch};
use futures::{StreamExt, TryStreamExt};
use kube::api::{Api, Patch, PatchParams, PostParams};
use patchbay::api::{
    PortState, PortStatus, ProviderSwitch, Switch, SwitchPort, SwitchPortConfiguration,
};
use patchbay::backends::Backends;
use patchbay::settings::Settings;
use patchbay_providers::values::{PortName, VlanId, VlanSet};
use patchbay_providers::{DesiredPort, Device, PortOperation, VlanMode, diff};
use patchbay_testbed::{FakeSwitches, SimSpec, SimSwitch};
use serde_json::json;
use support::{ansible_backend, median, ssh_backend, timed};

use support::env_usize as env;

/// How long any wait on the fleet may take.
const LIMIT: Duration = Duration::from_secs(1800);

fn active(st: &PortStatus) -> bool {
    st.state == Some(PortState::Active)
}

/// The login Secret's entries for the simulators (they share one login).
fn login(sim: &SimSwitch) -> [(&'static str, &str); 3] {
    [
        ("username", sim.username.as_str()),
        ("password", sim.password.as_str()),
        ("enablePassword", sim.enable_password.as_str()),
    ]
}

/// devplane with the fleet of `backend` (namespace of that name) and the operator
/// running, every port Idle and start-up work (first device checks) settled: what
/// the measured phase starts from. The operator stops when the sender is dropped.
async fn running(
    backend: &str,
    sims: &[SimSwitch],
    ports: &[PortName],
    variant: u16,
) -> (
    BenchCluster,
    Vec<(String, String)>,
    PortWatch,
    tokio::sync::oneshot::Sender<()>,
) {
    let cluster = BenchCluster::start(&format!("fleet-{backend}")).await;
    let client = cluster.client.clone();
    cluster
        .namespace_with_login(backend, &login(&sims[0]))
        .await;
    let links = fleet(&client, backend, backend, sims, ports, variant).await;
    let watch = PortWatch::start(client.clone(), backend);
    let stop = operator(client, backend);
    let names: Vec<String> = links.iter().map(|(p, _)| p.clone()).collect();
    watch
        .until(&names, "Idle", LIMIT, |_, st| {
            st.state == Some(PortState::Idle)
        })
        .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    (cluster, links, watch, stop)
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

/// The VLANs of round `r`: (access VLAN, trunk VLANs). Each variant has its own.
fn vlans(r: u16) -> (u16, [u16; 3]) {
    (101 + r, [201 + 10 * r, 202 + 10 * r, 203 + 10 * r])
}

/// What port `k` (0-based) of a switch must hold in round `r`.
fn desired(port: &PortName, k: usize, r: u16) -> DesiredPort {
    let (access, trunk) = vlans(r);
    let mut d = DesiredPort::clean(port.clone());
    d.vlans = if k.is_multiple_of(2) {
        VlanMode::Access {
            vlan: VlanId::new(access).unwrap(),
        }
    } else {
        VlanMode::Trunk {
            native: None,
            allowed: VlanSet::parse(&trunk.map(|v| v.to_string()).join(",")).unwrap(),
        }
    };
    d
}

/// The metrics every operator this benchmark starts shares (their figures add up,
/// as the runs' before/after differences expect).
fn probes() -> &'static patchbay::probes::Probes {
    static PROBES: std::sync::OnceLock<patchbay::probes::Probes> = std::sync::OnceLock::new();
    PROBES.get_or_init(Default::default)
}

/// A figure of the operators' metrics: the value of the line `name{labels}`.
fn metric(line: &str) -> f64 {
    probes()
        .metrics
        .render()
        .lines()
        .find_map(|l| l.strip_prefix(line)?.trim().parse().ok())
        .unwrap_or(0.0)
}

/// One fleet namespace: a ProviderSwitch and a Switch per simulator, 20 ports each,
/// and the configurations of round `r`.
async fn fleet(
    client: &kube::Client,
    ns: &str,
    backend: &str,
    sims: &[SimSwitch],
    ports: &[PortName],
    r: u16,
) -> Vec<(String, String)> {
    let providers: Api<ProviderSwitch> = Api::namespaced(client.clone(), ns);
    let switches: Api<Switch> = Api::namespaced(client.clone(), ns);
    let configurations: Api<SwitchPortConfiguration> = Api::namespaced(client.clone(), ns);
    let (access, trunk) = vlans(r);
    let mut links = Vec::new();
    for (name, spec) in [
        ("access", json!({"untaggedVLAN": access})),
        ("trunk", json!({"vlans": trunk.map(|v| json!({"id": v}))})),
    ] {
        let c: SwitchPortConfiguration = serde_json::from_value(json!({
            "apiVersion": "patchbay.dev/v1alpha1", "kind": "SwitchPortConfiguration",
            "metadata": {"name": name}, "spec": spec}))
        .unwrap();
        configurations
            .create(&PostParams::default(), &c)
            .await
            .unwrap();
    }
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(client.clone(), ns);
    for sim in sims {
        // Every simulator has its own password.
        let login: k8s_openapi::api::core::v1::Secret = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": format!("login-{}", sim.name)},
            "stringData": {"username": sim.username, "password": sim.password,
                           "enablePassword": sim.enable_password}}))
        .unwrap();
        secrets
            .create(&PostParams::default(), &login)
            .await
            .unwrap();
        let p: ProviderSwitch = serde_json::from_value(json!({
            "apiVersion": "patchbay.dev/v1alpha1", "kind": "ProviderSwitch",
            "metadata": {"name": sim.name},
            "spec": {"backend": backend, "os": "ios", "address": sim.address, "port": sim.port,
                     "credentialsSecretRef": {"name": format!("login-{}", sim.name)},
                     "hostKey": {"fingerprint": sim.host_key_fingerprint}}}))
        .unwrap();
        providers.create(&PostParams::default(), &p).await.unwrap();
        let mut entries = serde_json::Map::new();
        for (k, port) in ports.iter().enumerate() {
            let key = format!("{}-p{k}", sim.name);
            entries.insert(key.clone(), json!({"name": port.as_str()}));
            let configuration = if k.is_multiple_of(2) {
                "access"
            } else {
                "trunk"
            };
            links.push((key, configuration.to_owned()));
        }
        let s: Switch = serde_json::from_value(json!({
            "apiVersion": "patchbay.dev/v1alpha1", "kind": "Switch",
            "metadata": {"name": sim.name},
            "spec": {"provider": {"name": sim.name}, "ports": entries}}))
        .unwrap();
        switches.create(&PostParams::default(), &s).await.unwrap();
    }
    links
}

fn operator(client: kube::Client, ns: &str) -> tokio::sync::oneshot::Sender<()> {
    let settings = Settings {
        namespace: Some(ns.into()),
        drift_interval: Duration::from_secs(3600),
        ansible_playbook: patchbay_testbed::ansible_playbook()
            .unwrap_or_else(|_| "ansible-playbook".into()),
        ..Settings::default()
    };
    let backends = Backends {
        ansible_playbook: settings.ansible_playbook.clone(),
        ..Default::default()
    };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(patchbay::controllers::run(
        client,
        settings,
        backends,
        probes().clone(),
        async move {
            let _ = stopped.await;
        },
    ));
    stop
}

/// What a patchbay run measured.
struct Run {
    total: Duration,
    api: Duration,
    batches: f64,
    ports_per_batch: f64,
    device_per_switch: Duration,
    /// The slowest switch's own time in sessions (opened to closed, summed), from
    /// the simulators' connection log.
    slowest_switch: Duration,
}

/// A fleet namespace the operator runs in.
struct Namespace<'a> {
    client: &'a kube::Client,
    ns: &'a str,
    backend: &'a str,
    /// (port object, configuration to link it to).
    links: &'a [(String, String)],
    watch: &'a PortWatch,
}

/// Links every port to its configuration and waits until all are Active; then
/// reads every port back from the simulators to check round `r` landed.
async fn link_all(
    f: Namespace<'_>,
    fleet: &FakeSwitches,
    sims: &[SimSwitch],
    ports: &[PortName],
    r: u16,
) -> Run {
    let Namespace {
        client,
        ns,
        backend,
        links,
        watch,
    } = f;
    let label = format!("{{backend=\"{backend}\"}}");
    let batch_count = || metric(&format!("patchbay_batch_size_count{label}"));
    let batch_ports = || metric(&format!("patchbay_batch_size_sum{label}"));
    let device_sum = || {
        metric(&format!(
            "patchbay_device_batch_duration_seconds_sum{label}"
        ))
    };
    let (c0, p0, d0) = (batch_count(), batch_ports(), device_sum());
    let api: Api<SwitchPort> = Api::namespaced(client.clone(), ns);
    let names: Vec<String> = links.iter().map(|(p, _)| p.clone()).collect();
    let t = Instant::now();
    let unix_start = unix_now();
    futures::stream::iter(links.iter().map(|(port, configuration)| {
        let api = api.clone();
        async move {
            api.patch(
                port,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"configuration": {"name": configuration}}})),
            )
            .await
            .map(|_| ())
        }
    }))
    .buffer_unordered(16)
    .try_collect::<Vec<()>>()
    .await
    .unwrap();
    let accepted = t.elapsed();
    watch
        .until(&names, "Active", LIMIT, |_, st| {
            active(st)
                && st
                    .configuration_hash
                    .as_ref()
                    .is_some_and(|h| !h.is_empty())
        })
        .await;
    let total = t.elapsed();
    let batches = batch_count() - c0;
    let run = Run {
        total,
        api: accepted,
        batches,
        ports_per_batch: (batch_ports() - p0) / batches.max(1.0),
        device_per_switch: Duration::from_secs_f64((device_sum() - d0) / sims.len() as f64),
        slowest_switch: Duration::from_secs_f64(
            sims.iter()
                .map(|sim| {
                    fleet
                        .sessions(&sim.name)
                        .iter()
                        .filter(|s| s.opened >= unix_start)
                        .map(|s| s.closed.unwrap_or_else(unix_now) - s.opened)
                        .sum::<f64>()
                })
                .fold(0.0, f64::max),
        ),
    };
    check(sims, ports, r).await;
    run
}

/// Reads every port of every simulator back (SSH backend) and checks round `r`.
async fn check(sims: &[SimSwitch], ports: &[PortName], r: u16) {
    let reads = sims.iter().map(|sim| async move {
        let sw = ssh_backend(sim, "ios");
        let reads = sw.get_ports(ports).await.expect("read back");
        for (k, (port, read)) in reads.into_iter().enumerate() {
            let want = desired(&port, k, r);
            let got = read.expect("port read");
            let fields = diff(&want, &got);
            assert!(fields.is_empty(), "{} {port}: {fields:?}", sim.name);
        }
    });
    futures::future::join_all(reads).await;
}

/// The latency of one change: configuration `solo` (used by one port) edited, to the
/// port Active on the new hash; median of `rounds`.
async fn one_change(
    client: &kube::Client,
    ns: &str,
    watch: &PortWatch,
    port: &str,
    rounds: usize,
) -> Duration {
    let configurations: Api<SwitchPortConfiguration> = Api::namespaced(client.clone(), ns);
    let c: SwitchPortConfiguration = serde_json::from_value(json!({
        "apiVersion": "patchbay.dev/v1alpha1", "kind": "SwitchPortConfiguration",
        "metadata": {"name": "solo"}, "spec": {"untaggedVLAN": 300}}))
    .unwrap();
    configurations
        .create(&PostParams::default(), &c)
        .await
        .unwrap();
    let ports: Api<SwitchPort> = Api::namespaced(client.clone(), ns);
    let before = watch.status(port).configuration_hash;
    ports
        .patch(
            port,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"configuration": {"name": "solo"}}})),
        )
        .await
        .unwrap();
    let one = [port.to_owned()];
    watch
        .until(&one, "on solo", LIMIT, |_, st| {
            active(st) && st.configuration_hash != before
        })
        .await;
    let mut took = Vec::new();
    for r in 0..rounds {
        let before = watch.status(port).configuration_hash;
        let t = Instant::now();
        configurations
            .patch(
                "solo",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"untaggedVLAN": 301 + (r % 2)}})),
            )
            .await
            .unwrap();
        watch
            .until(&one, "edited", LIMIT, |_, st| {
                active(st) && st.configuration_hash != before
            })
            .await;
        took.push(t.elapsed());
        // Let the next edit start from a quiet operator.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    median(took)
}

/// The figures as an SVG bar chart (log scale, seconds).
fn svg(rows: &[(String, f64, bool)], title: &str) -> String {
    let (w, left, bar_h, gap, top) = (760.0, 300.0, 26.0, 14.0, 56.0);
    let h = top + rows.len() as f64 * (bar_h + gap) + 40.0;
    let max = rows.iter().map(|r| r.1).fold(1.0_f64, f64::max);
    let decades = max.log10().ceil().max(1.0) as i32;
    let lo = -1; // 0.1 s
    let span = (decades - lo) as f64;
    let x = |v: f64| left + (v.max(0.1).log10() - lo as f64) / span * (w - left - 30.0);
    let mut out = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" \
         font-family=\"sans-serif\" font-size=\"13\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"10\" y=\"24\" font-size=\"15\" font-weight=\"bold\">{title}</text>\n"
    );
    for d in lo..=decades {
        let v = 10f64.powi(d);
        let gx = x(v);
        out += &format!(
            "<line x1=\"{gx:.1}\" y1=\"{:.1}\" x2=\"{gx:.1}\" y2=\"{:.1}\" stroke=\"#ddd\"/>\n\
             <text x=\"{gx:.1}\" y=\"{:.1}\" text-anchor=\"middle\" fill=\"#666\">{} s</text>\n",
            top - 8.0,
            h - 30.0,
            h - 14.0,
            if v < 1.0 {
                format!("{v}")
            } else {
                format!("{v:.0}")
            }
        );
    }
    for (i, (label, v, extrapolated)) in rows.iter().enumerate() {
        let y = top + i as f64 * (bar_h + gap);
        let fill = if label.starts_with("patchbay") {
            "#2b6cb0"
        } else {
            "#a0aec0"
        };
        let dash = if *extrapolated {
            " stroke=\"#4a5568\" stroke-dasharray=\"4 3\" fill-opacity=\"0.5\""
        } else {
            ""
        };
        out += &format!(
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>\n\
             <rect x=\"{left}\" y=\"{y:.1}\" width=\"{:.1}\" height=\"{bar_h}\" fill=\"{fill}\"{dash}/>\n\
             <text x=\"{:.1}\" y=\"{:.1}\">{v:.1} s</text>\n",
            left - 8.0,
            y + bar_h * 0.68,
            label.replace('&', "&amp;").replace('<', "&lt;"),
            (x(*v) - left).max(1.0),
            x(*v) + 6.0,
            y + bar_h * 0.68,
        );
    }
    out + "</svg>\n"
}

/// Now, in Unix seconds (the simulators' connection log's clock).
fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

fn main() {
    let n_switches = env("BENCH_FLEET_SWITCHES", 50).max(1);
    let n_ports = env("BENCH_FLEET_PORTS", 20).clamp(2, 24);
    let sample = env("BENCH_FLEET_ANSIBLE_SAMPLE", 6).max(2);
    let ansible_switches = env("BENCH_FLEET_ANSIBLE", 10).min(n_switches);
    let out_dir = std::env::var_os("BENCH_OUT")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/bench-fleet"));
    std::fs::create_dir_all(&out_dir).unwrap();
    let changes = n_switches * n_ports;

    let specs: Vec<SimSpec> = (0..n_switches)
        .map(|i| SimSpec::new(&format!("sw{i:02}"), "cisco_2960_24TT_L").with_ios_shims())
        .collect();
    let fleet = FakeSwitches::start(&specs).expect("simulators (make fake-switch)");
    let sims: Vec<SimSwitch> = (0..n_switches)
        .map(|i| fleet.get(&format!("sw{i:02}")).clone())
        .collect();
    let ports: Vec<PortName> = (1..=n_ports)
        .map(|k| PortName::parse(&format!("FastEthernet0/{k}")).unwrap())
        .collect();
    let rt = support::runtime();
    println!(
        "Fleet: {n_switches} simulated Cisco 2960 switches x {n_ports} ports = {changes} port \
         changes (even ports access, odd ports trunk), one fake-switches process, 2 cores"
    );

    let (ssh, solo, device_solo) = rt.block_on(async {
        let (cluster, links, watch, _stop) = running("ssh", &sims, &ports, 0).await;
        let client = cluster.client.clone();
        let ns = Namespace {
            client: &client,
            ns: "ssh",
            backend: "ssh",
            links: &links,
            watch: &watch,
        };
        let run = link_all(ns, &fleet, &sims, &ports, 0).await;
        let solo = one_change(&client, "ssh", &watch, &links[0].0, 9).await;
        // The same one-port change through the SSH backend alone.
        let sw = ssh_backend(&sims[1], "ios");
        let mut device = Vec::new();
        for r in 0..9u16 {
            let mut d = DesiredPort::clean(ports[0].clone());
            d.vlans = VlanMode::Access {
                vlan: VlanId::new(311 + r % 2).unwrap(),
            };
            device.push(timed(&sw, &[PortOperation::Set(d)]).await);
        }
        // Back to round 0 on that port (the fleet check below expects it).
        timed(&sw, &[PortOperation::Set(desired(&ports[0], 0, 0))]).await;
        (run, solo, median(device))
    });
    println!(
        "  patchbay, SSH backend:            {:.2} s (all edits accepted by the API after {:.2} s; \
         {} batches of {:.1} ports on average; device sessions {:.2} s per switch on average, \
         {:.2} s on the slowest switch: end to end {:.2}x the slowest switch's own session time)",
        secs(ssh.total),
        secs(ssh.api),
        ssh.batches,
        ssh.ports_per_batch,
        secs(ssh.device_per_switch),
        secs(ssh.slowest_switch),
        secs(ssh.total) / secs(ssh.slowest_switch).max(1e-9)
    );
    let overhead = solo.saturating_sub(device_solo);
    println!(
        "  one change (configuration edit -> port Active): {:.1} ms; the device's part {:.1} ms; \
         the operator's {:.1} ms ({:.0} %)",
        solo.as_secs_f64() * 1e3,
        device_solo.as_secs_f64() * 1e3,
        overhead.as_secs_f64() * 1e3,
        100.0 * overhead.as_secs_f64() / solo.as_secs_f64()
    );

    // One SSH session per port, all switches in parallel.
    let (access, trunk) = vlans(1);
    let paramiko = support::run_baseline(
        "fleet_paramiko.py",
        json!({
            "switches": sims.iter().map(|s| json!({
                "address": s.address, "port": s.port, "username": s.username,
                "password": s.password, "enable_password": s.enable_password})).collect::<Vec<_>>(),
            "ports": ports.iter().map(|p| p.as_str()).collect::<Vec<_>>(),
            "access": access, "trunk": trunk,
        }),
        &[],
        &[],
    )
    .map(|v| Duration::from_secs_f64(v["seconds"].as_f64().unwrap_or(f64::NAN)));
    match &paramiko {
        Ok(d) => println!("  one SSH session per port (paramiko): {:.2} s", secs(*d)),
        Err(e) => println!("  paramiko baseline failed: {e}"),
    }
    rt.block_on(check(&sims, &ports, 1));

    // Ansible, one run per port: a sample, two at a time, extrapolated.
    let per_port = rt.block_on(async {
        let lanes = sims.iter().take(2).map(|sim| {
            let sw = ansible_backend(sim);
            let ports = ports.clone();
            async move {
                for (k, port) in ports.iter().enumerate().take(sample / 2) {
                    let op = PortOperation::Set(desired(port, k, 2));
                    let r = sw.apply_batch(&[op]).await.expect("ansible run");
                    assert!(r[0].outcome.is_ok(), "{:?}", r[0].outcome);
                }
            }
        });
        let t = Instant::now();
        futures::future::join_all(lanes).await;
        t.elapsed()
    });
    let sampled = 2 * (sample / 2);
    let ansible_per_port =
        Duration::from_secs_f64(secs(per_port) / sampled as f64 * changes as f64);
    println!(
        "  Ansible, one run per port:        {:.0} s EXTRAPOLATED ({sampled} runs, 2 at a time, \
         took {:.1} s: {:.2} s per port)",
        secs(ansible_per_port),
        secs(per_port),
        secs(per_port) / sampled as f64
    );

    let ansible_sims = &sims[..ansible_switches];
    let ansible = (ansible_switches > 0).then(|| {
        rt.block_on(async {
            let (cluster, links, watch, _stop) = running("ansible", ansible_sims, &ports, 3).await;
            let client = cluster.client.clone();
            let ns = Namespace {
                client: &client,
                ns: "ansible",
                backend: "ansible",
                links: &links,
                watch: &watch,
            };
            link_all(ns, &fleet, ansible_sims, &ports, 3).await
        })
    });
    // Variant 4 ran on part of the fleet: scaled to the whole fleet (the runs are
    // bounded by the cores, so time grows with the number of runs).
    let ansible_scale = n_switches as f64 / ansible_switches.max(1) as f64;
    if let Some(a) = &ansible {
        println!(
            "  patchbay, Ansible backend:        {:.0} s EXTRAPOLATED ({ansible_switches} switches, {} \
             changes, took {:.1} s; all edits accepted after {:.2} s; {} batches of {:.1} ports \
             on average; device runs {:.2} s per switch on average, the slowest switch's \
             sessions {:.2} s)",
            secs(a.total) * ansible_scale,
            ansible_switches * n_ports,
            secs(a.total),
            secs(a.api),
            a.batches,
            a.ports_per_batch,
            secs(a.device_per_switch),
            secs(a.slowest_switch)
        );
    }

    // The table and the plot.
    let base = secs(ssh.total);
    let mut rows: Vec<(String, f64, bool)> = vec![("patchbay, SSH backend".into(), base, false)];
    if let Ok(p) = &paramiko {
        rows.push((
            "one SSH session per port (paramiko)".into(),
            secs(*p),
            false,
        ));
    }
    if let Some(a) = &ansible {
        let label = if ansible_scale > 1.0 {
            "patchbay, Ansible backend (extrapolated)"
        } else {
            "patchbay, Ansible backend"
        };
        rows.push((
            label.into(),
            secs(a.total) * ansible_scale,
            ansible_scale > 1.0,
        ));
    }
    rows.push((
        "Ansible, one run per port (extrapolated)".into(),
        secs(ansible_per_port),
        true,
    ));
    let mut table = format!(
        "| {changes} port changes ({n_switches} switches x {n_ports} ports) | seconds | vs patchbay (SSH) |\n|---|---|---|\n"
    );
    for (label, v, _) in &rows {
        table += &format!("| {label} | {v:.2} | {:.1}x |\n", v / base);
    }
    println!("\n{table}");
    if let Ok(p) = &paramiko {
        let r = secs(*p) / base;
        println!(
            "  patchbay vs one session per port: {r:.1}x (goal >= 3x: {})",
            if r >= 3.0 { "met" } else { "NOT met" }
        );
    }
    let r = secs(ansible_per_port) / base;
    println!(
        "  patchbay vs Ansible per port (extrapolated): {r:.0}x (goal >= 10x: {})",
        if r >= 10.0 { "met" } else { "NOT met" }
    );
    let title = format!(
        "{changes} port changes, {n_switches} simulated switches: CR edit to ports read back"
    );
    std::fs::write(out_dir.join("fleet.svg"), svg(&rows, &title)).unwrap();
    std::fs::write(out_dir.join("fleet.md"), &table).unwrap();
    // Relative to the checkout, so the figures table names no machine's path.
    let shown = out_dir
        .strip_prefix(env!("CARGO_MANIFEST_DIR"))
        .unwrap_or(&out_dir);
    println!("  wrote {}/fleet.svg and fleet.md", shown.display());
}

//! What the backend benchmarks share: the median, a batch of access-VLAN changes and
//! timing one verified batch as the switch worker runs it.

use std::time::{Duration, Instant};

use patchbay_providers::cli::{Auth, CliOptions, CliSwitch, HostKeyPolicy, SshTarget, dialect};
use patchbay_providers::secret::SecretString;
use patchbay_providers::values::{PortName, VlanId};
use patchbay_providers::verify::apply_batch_verified;
use patchbay_providers::{DesiredPort, Device, PortChange, PortOperation, VlanMode};
use patchbay_testbed::SimSwitch;

/// A count from the environment (`BENCH_ROUNDS`, …), else `default`.
#[allow(dead_code)]
pub fn env_usize(key: &str, default: usize) -> usize {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The first `n` FastEthernet ports of a simulated Cisco.
#[allow(dead_code)]
pub fn fast_ethernet(sim: &SimSwitch, n: usize) -> Vec<PortName> {
    sim.ports
        .iter()
        .filter(|p| p.starts_with("FastEthernet"))
        .take(n)
        .map(|p| PortName::parse(p).unwrap())
        .collect()
}

/// The median of `v` (upper middle for even lengths).
pub fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// Every port of `ports` as an access port on `vlan`.
pub fn ops(ports: &[PortName], vlan: u16) -> Vec<PortOperation> {
    ports
        .iter()
        .map(|p| {
            let mut d = DesiredPort::clean(p.clone());
            d.vlans = VlanMode::Access {
                vlan: VlanId::new(vlan).unwrap(),
            };
            PortOperation::Set(d)
        })
        .collect()
}

/// Applies `ops` with `apply_batch_verified` (apply, then one verifying read) and
/// returns how long it took; every port must have changed.
pub async fn timed(sw: &dyn Device, ops: &[PortOperation]) -> Duration {
    let t = Instant::now();
    let results = apply_batch_verified(sw, ops).await.expect("batch");
    let elapsed = t.elapsed();
    for r in results {
        assert_eq!(r.outcome, Ok(PortChange::Changed), "{}", r.port);
    }
    elapsed
}

/// How to log in to a simulated switch: its password, its host key pinned.
#[allow(dead_code)]
pub fn ssh_target(sim: &SimSwitch) -> SshTarget {
    SshTarget {
        address: sim.address.clone(),
        port: sim.port,
        username: sim.username.clone(),
        auth: Auth::Password(SecretString::new(sim.password.clone())),
        host_key: HostKeyPolicy::Fingerprint(sim.host_key_fingerprint.clone()),
        connect_timeout: Duration::from_secs(10),
    }
}

/// The runtime the benchmarks drive their clients on: two worker threads (the
/// machine's cores).
#[allow(dead_code)]
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// The SSH backend for a simulated switch, dialect `os`, its host key pinned.
#[allow(dead_code)]
pub fn ssh_backend(sim: &SimSwitch, os: &str) -> CliSwitch {
    CliSwitch::new(
        ssh_target(sim),
        Some(SecretString::new(sim.enable_password.clone())),
        dialect::for_os(os).unwrap(),
        CliOptions::default(),
    )
}

/// Runs a Python baseline script of `bench/` with the fake-switch venv's Python: its
/// credentials (and any other `files`) written 0600 into a private temporary
/// directory (removed afterwards), `ports` as arguments; returns the median of the
/// `rounds_s` it prints, or why it failed.
#[allow(dead_code)]
pub fn baseline(
    script: &str,
    credentials: serde_json::Value,
    files: &[(&str, &[u8])],
    ports: &[PortName],
) -> Result<Duration, String> {
    let v = run_baseline(script, credentials, files, ports)?;
    let rounds: Vec<Duration> = v["rounds_s"]
        .as_array()
        .ok_or("no rounds_s in the output")?
        .iter()
        .filter_map(|x| x.as_f64().map(Duration::from_secs_f64))
        .collect();
    if rounds.is_empty() {
        return Err("no rounds".into());
    }
    Ok(median(rounds))
}

/// Runs a Python baseline script as [`baseline`] does and returns the JSON line it
/// prints.
#[allow(dead_code)]
pub fn run_baseline(
    script: &str,
    credentials: serde_json::Value,
    files: &[(&str, &[u8])],
    ports: &[PortName],
) -> Result<serde_json::Value, String> {
    let python = patchbay_testbed::python().map_err(|e| e.to_string())?;
    let dir = std::env::temp_dir().join(format!(
        "patchbay-bench-{}-{}",
        script.trim_end_matches(".py"),
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let write = |name: &str, bytes: &[u8]| -> Result<std::path::PathBuf, String> {
        let path = dir.join(name);
        patchbay_testbed::write_private(&path, bytes).map_err(|e| e.to_string())?;
        Ok(path)
    };
    let mut credentials = credentials;
    for (name, bytes) in files {
        let path = write(name, bytes)?;
        credentials[*name] = path.display().to_string().into();
    }
    let creds = write("credentials.json", credentials.to_string().as_bytes());
    let out = creds.and_then(|creds| {
        std::process::Command::new(python)
            .arg(format!("{}/bench/{script}", env!("CARGO_MANIFEST_DIR")))
            .arg(&creds)
            .args(ports.iter().map(|p| p.as_str()))
            .output()
            .map_err(|e| e.to_string())
    });
    let _ = std::fs::remove_dir_all(&dir);
    let out = out?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    serde_json::from_slice(&out.stdout).map_err(|e| e.to_string())
}

/// The Ansible backend (cisco.ios) for a simulated switch started with the IOS
/// syntax shims, its host key given, Ansible from `make ansible`.
#[allow(dead_code)]
pub fn ansible_backend(sim: &SimSwitch) -> patchbay_providers::ansible::AnsibleSwitch {
    use patchbay_providers::ansible::{
        AnsibleAuth, AnsibleHostKey, AnsibleOptions, AnsibleSwitch, AnsibleTarget,
    };
    AnsibleSwitch::new(
        AnsibleTarget {
            address: sim.address.clone(),
            port: sim.port,
            username: sim.username.clone(),
            auth: AnsibleAuth::Password(SecretString::new(sim.password.clone())),
            enable_password: Some(SecretString::new(sim.enable_password.clone())),
            host_key: AnsibleHostKey::Known(
                sim.known_hosts_line
                    .split_whitespace()
                    .skip(1)
                    .collect::<Vec<_>>()
                    .join(" "),
            ),
        },
        patchbay_providers::ansible::contract::platform("ios").unwrap(),
        AnsibleOptions {
            ansible_playbook: patchbay_testbed::ansible_playbook().expect("make ansible"),
            ..AnsibleOptions::default()
        },
    )
}

//! What passes between patchbay and a playbook run: the variables of a batch, the
//! inventory and configuration files of a run, and the JSON the `json` stdout
//! callback prints, parsed into per-port results and observed ports. Pure, no I/O.
//!
//! The contract (playbooks/README.md):
//! - `apply.yml` gets `patchbay_vlans` (`[{vlan_id, name?}]`) and `patchbay_ports`
//!   (`[{name, enabled, description, mtu, mode: none|access|trunk, access_vlan,
//!   native_vlan, allowed_vlans}]`, each port's whole state) and ends with a task
//!   named `patchbay results` whose result carries `patchbay_results`:
//!   `{PORT: {changed, failed, task?, msg?}}`.
//! - `read.yml` gets nothing and ends with a task named `patchbay ports` whose result
//!   carries `patchbay_ports_read`: the ports in the same shape as `patchbay_ports`
//!   (`allowed_vlans` entries may be ranges, `"100-102"`, and may list the native
//!   VLAN, which patchbay removes). A task named `patchbay vlans` before it whose
//!   result carries `patchbay_vlans_read` (the switch's VLAN IDs, entries may be
//!   ranges) has every port checked against the switch's VLAN table; without it the
//!   table is not checked.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;
use serde_json::{Value, json};

use crate::device::PortChange;
use crate::error::{Cause, DeviceError};
use crate::model::{AdminState, DesiredPort, ObservedPort, VlanMode};
use crate::values::{Description, Mtu, PortName, VlanId, VlanSet};

/// The platform patchbay's built-in playbooks drive for an `os`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Platform {
    /// The ProviderSwitch `os`.
    pub os: &'static str,
    /// `ansible_connection`.
    pub connection: &'static str,
    /// `ansible_network_os`.
    pub network_os: &'static str,
    /// The directory of the built-in playbooks under `playbooks/`.
    pub playbooks: &'static str,
    /// The port when the ProviderSwitch gives none.
    pub default_port: u16,
}

/// The platforms with built-in playbooks: Cisco IOS over the CLI (cisco.ios
/// resource modules), Junos over NETCONF (ansible.netcommon's generic NETCONF
/// modules: the `default` NETCONF plugin, which needs nothing Junos-specific from
/// the device).
pub const PLATFORMS: [Platform; 2] = [
    Platform {
        os: "ios",
        connection: "ansible.netcommon.network_cli",
        network_os: "cisco.ios.ios",
        playbooks: "ios",
        default_port: 22,
    },
    Platform {
        os: "junos",
        connection: "ansible.netcommon.netconf",
        network_os: "ansible.netcommon.default",
        playbooks: "junos",
        default_port: 830,
    },
];

/// The platform of `os`.
pub fn platform(os: &str) -> Option<&'static Platform> {
    PLATFORMS.iter().find(|p| p.os == os)
}

/// The built-in playbooks, embedded: (directory, file, text).
pub const PLAYBOOKS: [(&str, &str, &str); 6] = [
    (
        "ios",
        "apply.yml",
        include_str!("../../../playbooks/ios/apply.yml"),
    ),
    (
        "ios",
        "port.yml",
        include_str!("../../../playbooks/ios/port.yml"),
    ),
    (
        "ios",
        "read.yml",
        include_str!("../../../playbooks/ios/read.yml"),
    ),
    (
        "junos",
        "apply.yml",
        include_str!("../../../playbooks/junos/apply.yml"),
    ),
    (
        "junos",
        "port.yml",
        include_str!("../../../playbooks/junos/port.yml"),
    ),
    (
        "junos",
        "read.yml",
        include_str!("../../../playbooks/junos/read.yml"),
    ),
];

fn port_json(d: &DesiredPort) -> Value {
    let (mode, access, native, allowed): (&str, Option<u16>, Option<u16>, Vec<u16>) = match &d.vlans
    {
        VlanMode::Unconfigured => ("none", None, None, Vec::new()),
        VlanMode::Access { vlan } => ("access", Some(vlan.get()), None, Vec::new()),
        VlanMode::Trunk { native, allowed } => (
            "trunk",
            None,
            native.map(VlanId::get),
            allowed.iter().map(VlanId::get).collect(),
        ),
    };
    json!({
        "name": d.port.as_str(),
        "enabled": d.admin == AdminState::Up,
        "description": d.description.as_ref().map(|x| x.as_str()),
        "mtu": d.mtu.map(Mtu::get),
        "mode": mode,
        "access_vlan": access,
        "native_vlan": native,
        "allowed_vlans": allowed,
    })
}

/// The variables of an apply run for these desired ports.
pub fn apply_vars(ports: &[DesiredPort]) -> Value {
    let mut vlans: BTreeMap<VlanId, Option<String>> = BTreeMap::new();
    for d in ports {
        let used: Vec<VlanId> = match &d.vlans {
            VlanMode::Unconfigured => Vec::new(),
            VlanMode::Access { vlan } => vec![*vlan],
            VlanMode::Trunk { native, allowed } => {
                native.iter().copied().chain(allowed.iter()).collect()
            }
        };
        for v in used {
            let slot = vlans.entry(v).or_insert(None);
            if slot.is_none() {
                *slot = d.vlan_names.get(&v).map(|n| n.as_str().to_owned());
            }
        }
    }
    let vlans: Vec<Value> = vlans
        .into_iter()
        .map(|(v, name)| match name {
            Some(n) => json!({"vlan_id": v.get(), "name": n}),
            None => json!({"vlan_id": v.get()}),
        })
        .collect();
    json!({
        "patchbay_vlans": vlans,
        "patchbay_ports": ports.iter().map(port_json).collect::<Vec<_>>(),
    })
}

/// Quotes a YAML scalar (JSON strings are valid YAML).
fn scalar(s: &str) -> String {
    Value::from(s).to_string()
}

/// Where and how Ansible logs in (the inventory's host variables).
#[derive(Debug, Clone)]
pub struct Login<'a> {
    /// Address.
    pub address: &'a str,
    /// SSH port.
    pub port: u16,
    /// Login name.
    pub username: &'a str,
    /// Password (`None` with a key file).
    pub password: Option<&'a str>,
    /// Path of the private key file in the run's directory.
    pub key_file: Option<&'a str>,
    /// Enable password, if any.
    pub enable_password: Option<&'a str>,
    /// Seconds Ansible's persistent connection may wait for one command.
    pub command_timeout: u64,
    /// Seconds it may take to connect.
    pub connect_timeout: u64,
}

/// The inventory of a run (YAML; secrets included, so the file is private).
pub fn inventory(platform: &Platform, login: &Login<'_>) -> String {
    let mut vars = vec![
        ("ansible_host", scalar(login.address)),
        ("ansible_port", login.port.to_string()),
        ("ansible_user", scalar(login.username)),
        ("ansible_connection", scalar(platform.connection)),
        ("ansible_network_os", scalar(platform.network_os)),
        ("ansible_command_timeout", login.command_timeout.to_string()),
        ("ansible_connect_timeout", login.connect_timeout.to_string()),
    ];
    if let Some(p) = login.password {
        vars.push(("ansible_password", scalar(p)));
    }
    if let Some(k) = login.key_file {
        vars.push(("ansible_ssh_private_key_file", scalar(k)));
    }
    if let Some(e) = login
        .enable_password
        .filter(|_| platform.connection.ends_with("network_cli"))
    {
        vars.push(("ansible_become", "true".into()));
        vars.push(("ansible_become_method", scalar("enable")));
        vars.push(("ansible_become_password", scalar(e)));
    }
    let mut out = String::from("all:\n  hosts:\n    device:\n");
    for (k, v) in vars {
        out.push_str(&format!("      {k}: {v}\n"));
    }
    out
}

/// The `ansible.cfg` of a run: the JSON stdout callback, host-key checking on
/// against the run's own known_hosts (through HOME), the persistent connection's
/// control sockets in the run's directory and its timeouts under the hard timeout.
pub fn config(dir: &str, persistent_timeout: u64) -> String {
    format!(
        "[defaults]\nstdout_callback = json\nhost_key_checking = True\nretry_files_enabled = False\n\
         local_tmp = {dir}/tmp\nforks = 1\n\n\
         [paramiko_connection]\nhost_key_checking = True\nrecord_host_keys = False\nlook_for_keys = False\n\n\
         [persistent_connection]\ncontrol_path_dir = {dir}/pc\nconnect_timeout = {persistent_timeout}\n\
         command_timeout = {persistent_timeout}\n"
    )
}

#[derive(Debug, Deserialize)]
struct Output {
    #[serde(default)]
    plays: Vec<Play>,
}

#[derive(Debug, Deserialize)]
struct Play {
    #[serde(default)]
    tasks: Vec<Task>,
}

#[derive(Debug, Deserialize)]
struct Task {
    task: TaskName,
    #[serde(default)]
    hosts: BTreeMap<String, Value>,
}

#[derive(Debug, Deserialize)]
struct TaskName {
    name: String,
}

/// The run's output, parsed.
fn tasks(stdout: &str) -> Result<Vec<Task>, DeviceError> {
    let out: Output = serde_json::from_str(stdout).map_err(|e| DeviceError::Protocol {
        during: "reading ansible-playbook's JSON output".into(),
        cause: Cause::new(e),
    })?;
    Ok(out.plays.into_iter().flat_map(|p| p.tasks).collect())
}

/// The timeouts of Ansible's persistent connection (connect and command) under a
/// run's hard timeout: half of it, 1 to 120 s. A device that never answers is given
/// up on by this timeout first.
pub fn persistent_timeout(run_timeout: Duration) -> Duration {
    Duration::from_secs((run_timeout.as_secs() / 2).clamp(1, 120))
}

/// Why a run produced no results: the first unreachable or failed task, as a
/// session failure classified as the SSH backend classifies it
/// ([`connection_failure`]), or a protocol error naming the task.
fn run_failure(tasks: &[Task], endpoint: &str, timeout: Duration) -> DeviceError {
    for t in tasks {
        for r in t.hosts.values() {
            let msg = r.get("msg").and_then(Value::as_str).unwrap_or_default();
            let unreachable = r.get("unreachable").and_then(Value::as_bool) == Some(true);
            if let Some(e) = connection_failure(msg, unreachable, endpoint, timeout) {
                return e;
            }
            if unreachable {
                return DeviceError::Unreachable {
                    address: endpoint.to_owned(),
                    cause: Cause::msg(format!("task {:?}: {msg}", t.task.name)),
                };
            }
            if r.get("failed").and_then(Value::as_bool) == Some(true) {
                return DeviceError::Protocol {
                    during: format!("running task {:?}", t.task.name),
                    cause: Cause::msg(msg.to_owned()),
                };
            }
        }
    }
    DeviceError::Protocol {
        during: "reading ansible-playbook's output".into(),
        cause: Cause::msg("the playbook reported no results"),
    }
}

/// A task's message that is the connection's failure, not the task's: classified
/// as the SSH backend classifies its own — a refused login (`AuthenticationFailed`,
/// only when the device refused: an authentication that timed out is a timeout),
/// the host key (`HostKeyMismatch`), no answer in time (`Timeout`, after `timeout`,
/// Ansible's persistent connection timeout, or the seconds the message names), and
/// no connection (`Unreachable`: refused, no route, reset, closed, no banner). These
/// are the whole switch's failures: the worker backs off on the switch, once for
/// all its ports. `None` for a task's own failure. `unreachable` is Ansible's flag.
pub fn connection_failure(
    msg: &str,
    unreachable: bool,
    endpoint: &str,
    timeout: Duration,
) -> Option<DeviceError> {
    let lower = msg.to_lowercase();
    let has = |words: &[&str]| words.iter().any(|w| lower.contains(w));
    let timed_out = has(&[
        "timeout triggered",
        "timed out",
        "authentication timeout",
        "connect timeout",
        "timeout waiting",
    ]);
    if timed_out {
        let named = lower
            .split("timeout value is ")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|n| n.parse::<u64>().ok())
            .map(Duration::from_secs);
        return Some(DeviceError::Timeout {
            during: "waiting for the device through Ansible's persistent connection".into(),
            after: named.unwrap_or(timeout),
        });
    }
    if has(&[
        "authentication failed",
        "permission denied",
        "access denied",
        "no authentication methods",
        "failed to authenticate",
    ]) {
        return Some(DeviceError::AuthenticationFailed {
            address: endpoint.to_owned(),
        });
    }
    if lower.contains("host key")
        && has(&[
            "not found",
            "mismatch",
            "verification failed",
            "does not match",
        ])
    {
        return Some(DeviceError::HostKeyMismatch {
            address: endpoint.to_owned(),
            expected: "the pinned key (known_hosts)".into(),
            presented: "another key".into(),
        });
    }
    let no_connection = has(&[
        "unable to connect",
        "connection refused",
        "no route to host",
        "network is unreachable",
        "name or service not known",
        "could not resolve",
        "connection reset",
        "socket is closed",
        "error reading ssh protocol banner",
        "connection closed",
    ]);
    (no_connection || unreachable).then(|| DeviceError::Unreachable {
        address: endpoint.to_owned(),
        cause: Cause::msg(msg.lines().next().unwrap_or_default().to_owned()),
    })
}

/// The value `key` of the last task named `name`, from the host's result.
fn last_value(tasks: &[Task], name: &str, key: &str) -> Option<Value> {
    tasks
        .iter()
        .rev()
        .find(|t| t.task.name == name)
        .and_then(|t| t.hosts.values().next())
        .and_then(|r| r.get(key).cloned())
}

/// Per-port outcomes of an apply run, for `ports` in order. A port the playbook did
/// not report fails (the playbook broke the contract); a failed port is
/// `CommandRejected` naming the task and carrying the module's message.
pub fn apply_results(
    stdout: &str,
    ports: &[PortName],
    endpoint: &str,
    timeout: Duration,
) -> Result<Vec<Result<PortChange, DeviceError>>, DeviceError> {
    let tasks = tasks(stdout)?;
    let Some(results) = last_value(&tasks, "patchbay results", "patchbay_results") else {
        return Err(run_failure(&tasks, endpoint, timeout));
    };
    Ok(ports
        .iter()
        .map(|p| {
            let Some(r) = results.get(p.as_str()) else {
                return Err(DeviceError::Protocol {
                    during: "reading the playbook's results".into(),
                    cause: Cause::msg(format!("no result for port {p}")),
                });
            };
            if r.get("failed").and_then(Value::as_bool) == Some(true) {
                let task = r.get("task").and_then(Value::as_str).unwrap_or("apply");
                let msg = r.get("msg").and_then(Value::as_str).unwrap_or("failed");
                return Err(DeviceError::CommandRejected {
                    command: format!("task {task:?} for {p}"),
                    output: msg.trim().to_owned(),
                });
            }
            Ok(if r.get("changed").and_then(Value::as_bool) == Some(true) {
                PortChange::Changed
            } else {
                PortChange::Unchanged
            })
        })
        .collect())
}

/// One port of a read, in the contract's shape.
#[derive(Debug, Deserialize)]
struct ReadPort {
    name: String,
    #[serde(default = "up")]
    enabled: bool,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    mtu: Option<Value>,
    #[serde(default)]
    mode: Option<String>,
    #[serde(default)]
    access_vlan: Option<Value>,
    #[serde(default)]
    native_vlan: Option<Value>,
    #[serde(default)]
    allowed_vlans: Vec<Value>,
}

fn up() -> bool {
    true
}

fn number(v: &Value) -> Option<i64> {
    v.as_i64()
        .or_else(|| v.as_str().and_then(|s| s.trim().parse().ok()))
}

fn observed(r: ReadPort, port: &PortName) -> Result<ObservedPort, String> {
    let vlan = |v: &Value| -> Result<VlanId, String> {
        number(v)
            .and_then(|n| u16::try_from(n).ok())
            .and_then(|n| VlanId::new(n).ok())
            .ok_or_else(|| format!("{v} is not a VLAN ID"))
    };
    let native = r
        .native_vlan
        .as_ref()
        .filter(|v| !v.is_null())
        .map(vlan)
        .transpose()?;
    let vlans = match r.mode.as_deref().unwrap_or("none") {
        "none" | "" => VlanMode::Unconfigured,
        "access" => VlanMode::Access {
            vlan: match r.access_vlan.as_ref().filter(|v| !v.is_null()) {
                Some(v) => vlan(v)?,
                None => VlanId::new(1).expect("1 is a VLAN"),
            },
        },
        "trunk" => {
            let mut allowed = VlanSet::new();
            for v in &r.allowed_vlans {
                let text = match v {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                let set = VlanSet::parse(&text)
                    .map_err(|e| format!("allowed VLANs {text:?}: {}", e.0))?;
                allowed = set.iter().chain(allowed.iter()).collect();
            }
            if let Some(n) = native {
                allowed = allowed.iter().filter(|v| *v != n).collect();
            }
            VlanMode::Trunk { native, allowed }
        }
        other => return Err(format!("unknown mode {other:?}")),
    };
    let description = match r.description.filter(|d| !d.is_empty()) {
        Some(d) => Some(Description::parse(&d).map_err(|e| format!("description: {}", e.0))?),
        None => None,
    };
    let mtu = match r.mtu.as_ref().filter(|v| !v.is_null()) {
        Some(v) => Some(
            number(v)
                .and_then(|n| Mtu::new(n).ok())
                .ok_or_else(|| format!("MTU {v} is not one"))?,
        ),
        None => None,
    };
    Ok(ObservedPort {
        port: port.clone(),
        admin: Some(if r.enabled {
            AdminState::Up
        } else {
            AdminState::Down
        }),
        vlans: Some(vlans),
        // The built-in playbooks do not manage the MTU; a user playbook that
        // reports one is compared.
        mtu: r.mtu.as_ref().map(|_| mtu),
        description: Some(description),
        acl: None,
        lag: None,
        // Set from the VLAN table the read reports, if it reports one.
        missing_vlans: None,
    })
}

/// The ports of a read run, for `ports` in order. A port the device did not report
/// is `UnknownPort`.
pub fn read_results(
    stdout: &str,
    ports: &[PortName],
    endpoint: &str,
    timeout: Duration,
) -> Result<Vec<Result<ObservedPort, DeviceError>>, DeviceError> {
    let tasks = tasks(stdout)?;
    let Some(read) = last_value(&tasks, "patchbay ports", "patchbay_ports_read") else {
        return Err(run_failure(&tasks, endpoint, timeout));
    };
    let read: Vec<ReadPort> = serde_json::from_value(read).map_err(|e| DeviceError::Protocol {
        during: "reading the playbook's ports".into(),
        cause: Cause::new(e),
    })?;
    let table = match last_value(&tasks, "patchbay vlans", "patchbay_vlans_read") {
        Some(v) => Some(vlan_table(&v).map_err(|e| DeviceError::Protocol {
            during: "reading the playbook's VLAN table".into(),
            cause: Cause::msg(e),
        })?),
        None => None,
    };
    let mut by_name: BTreeMap<String, ReadPort> =
        read.into_iter().map(|r| (r.name.clone(), r)).collect();
    Ok(ports
        .iter()
        .map(|p| match by_name.remove(p.as_str()) {
            None => Err(DeviceError::UnknownPort {
                port: p.as_str().to_owned(),
            }),
            Some(r) => observed(r, p)
                .map(|o| match &table {
                    Some(t) => o.against_vlan_table(t),
                    None => o,
                })
                .map_err(|e| DeviceError::Protocol {
                    during: format!("reading port {p}"),
                    cause: Cause::msg(e),
                }),
        })
        .collect())
}

/// The VLAN IDs of `patchbay_vlans_read`: a list of numbers, or strings of a number
/// or range (`"100-102"`).
fn vlan_table(v: &Value) -> Result<std::collections::BTreeSet<VlanId>, String> {
    let Value::Array(items) = v else {
        return Err(format!("{v} is not a list of VLAN IDs"));
    };
    let mut table = std::collections::BTreeSet::new();
    for item in items {
        let text = match item {
            Value::String(s) => s.clone(),
            Value::Number(n) => n.to_string(),
            other => return Err(format!("{other} is not a VLAN ID")),
        };
        let set = VlanSet::parse(&text).map_err(|e| format!("VLAN {text:?}: {}", e.0))?;
        table.extend(set.iter());
    }
    Ok(table)
}

/// What a check-mode run (`--check --diff`) would send: each task's `commands`,
/// prefixed by the task's name as a comment, in order. Empty when nothing would be.
pub fn check_commands(
    stdout: &str,
    endpoint: &str,
    timeout: Duration,
) -> Result<Vec<String>, DeviceError> {
    let tasks = tasks(stdout)?;
    if last_value(&tasks, "patchbay results", "patchbay_results").is_none() {
        return Err(run_failure(&tasks, endpoint, timeout));
    }
    let mut out = Vec::new();
    for t in &tasks {
        for r in t.hosts.values() {
            let commands: Vec<String> = r
                .get("commands")
                .and_then(Value::as_array)
                .map(|c| {
                    c.iter()
                        .filter_map(|x| x.as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default();
            if !commands.is_empty() {
                out.push(format!("# task {:?}", t.task.name));
                out.extend(commands);
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests;

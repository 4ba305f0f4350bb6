//! ProviderSwitch: how to reach one device (backend, dialect, address, credentials,
//! host-key pin, backend options). Pure data, no I/O.

use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::{ConditionsStatus, SecretRef, pattern};

/// How to reach one network device. Infra teams own these objects; tenants never see
/// them (RBAC). Credentials live in the referenced Secret, never here.
#[derive(CustomResource, Debug, Clone, PartialEq, Serialize, Deserialize, KubeSchema)]
#[kube(
    group = "patchbay.dev",
    version = "v1alpha1",
    kind = "ProviderSwitch",
    namespaced,
    status = "ConditionsStatus",
    shortname = "psw",
    category = "patchbay",
    doc = "How patchbay reaches one network device: backend, dialect, address, credentials Secret and pinned host key.",
    printcolumn(name = "Backend", type_ = "string", json_path = ".spec.backend"),
    printcolumn(name = "OS", type_ = "string", json_path = ".spec.os"),
    printcolumn(name = "Address", type_ = "string", json_path = ".spec.address"),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[x_kube(
    validation = Rule::new(
        "!has(self.hostKey) || !has(self.insecureAcceptAnyHostKey) || !self.insecureAcceptAnyHostKey"
    ).message("insecureAcceptAnyHostKey cannot be true while hostKey pins a key"),
    validation = Rule::new("(self.backend == 'ovsdb') == (self.os == 'ovs')")
        .message("os ovs goes with backend ovsdb, and only with it"),
    validation = Rule::new("(self.backend == 'fixture') == (self.os == 'fixture')")
        .message("os fixture goes with backend fixture, and only with it"),
    validation = Rule::new(
        "!(self.backend in ['ssh', 'netconf', 'ansible']) || has(self.credentialsSecretRef)"
    ).message("backends that log in (ssh, netconf, ansible) need credentialsSecretRef")
)]
#[serde(rename_all = "camelCase")]
pub struct ProviderSwitchSpec {
    /// How patchbay talks to the device: `ssh` (interactive CLI), `netconf`, `ansible`
    /// (ansible-playbook subprocess), `ovsdb` (Open vSwitch JSON-RPC) or `fixture`
    /// (an in-memory device for tests and demos).
    pub backend: Backend,
    /// The device's operating system / CLI dialect. It must suit the backend: `ovs`
    /// needs `ovsdb`, `junos` and `yang` need `netconf`, `fixture` needs `fixture`.
    pub os: DeviceOs,
    /// IP address or DNS name of the device's management interface.
    #[schemars(length(min = 1, max = 253), pattern(pattern::ADDRESS))]
    pub address: String,
    /// TCP port; defaults to 22 for ssh and ansible, 830 for netconf, 6640 for ovsdb.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535))]
    pub port: Option<i64>,
    /// Secret holding the login: keys `username` and `password` or `privateKey`
    /// (optionally `passphrase`), optionally `enablePassword` and `knownHosts`.
    /// Required for ssh, netconf and ansible.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials_secret_ref: Option<SecretRef>,
    /// The pinned host key of the device. Connections are refused when the device
    /// presents another key. May instead come from the Secret's `knownHosts` key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_key: Option<HostKeyPin>,
    /// Accept any host key without checking. For labs only: every connection logs a
    /// warning. Mutually exclusive with `hostKey`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub insecure_accept_any_host_key: bool,
    /// Backend tuning; every field has a safe default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub options: Option<BackendOptions>,
    /// What happens to this device's ports when the cabling cannot be confirmed
    /// (`Permissive` by default; `Strict` on the Server or here wins).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cabling_policy: Option<super::common::CablingPolicy>,
}

/// The protocol patchbay uses to reach the device.
impl ProviderSwitchSpec {
    /// The TCP port the device is reached on: `port`, else the backend's default —
    /// 22 for ssh, 830 for netconf, 6640 for ovsdb; for ansible its platform's (830
    /// for junos, reached over NETCONF; 22 for ios); 0 for the in-memory fixture.
    pub fn port_or_default(&self) -> u16 {
        self.port
            .and_then(|p| u16::try_from(p).ok())
            .unwrap_or(match (self.backend, self.os) {
                (Backend::Netconf, _) | (Backend::Ansible, DeviceOs::Junos) => 830,
                (Backend::Ovsdb, _) => 6640,
                (Backend::Fixture, _) => 0,
                _ => 22,
            })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// Interactive SSH CLI (dialect chosen by `os`).
    Ssh,
    /// NETCONF over SSH.
    Netconf,
    /// `ansible-playbook` as a subprocess.
    Ansible,
    /// Open vSwitch database protocol (RFC 7047).
    Ovsdb,
    /// In-memory fixture device (tests and demos).
    Fixture,
}

impl Backend {
    /// Every backend.
    pub const ALL: [Backend; 5] = [
        Backend::Ssh,
        Backend::Netconf,
        Backend::Ansible,
        Backend::Ovsdb,
        Backend::Fixture,
    ];

    /// The name the API uses (`ssh`, `ovsdb`, …).
    pub fn name(self) -> &'static str {
        match self {
            Backend::Ssh => "ssh",
            Backend::Netconf => "netconf",
            Backend::Ansible => "ansible",
            Backend::Ovsdb => "ovsdb",
            Backend::Fixture => "fixture",
        }
    }
}

/// The device's operating system / CLI dialect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum DeviceOs {
    /// Cisco IOS / IOS-XE.
    Ios,
    /// Cisco NX-OS.
    Nxos,
    /// Arista EOS.
    Eos,
    /// Dell OS10.
    Os10,
    /// Dell PowerConnect.
    Powerconnect,
    /// Dell 10G switches (tengigabitethernet ports).
    Dell10g,
    /// Brocade FastIron.
    Fastiron,
    /// Juniper Junos.
    Junos,
    /// A NETCONF device serving patchbay's own YANG module, `patchbay-ports`
    /// (`providers/yang/`): netconfd in patchbay's tests and demo, or any server a
    /// team loads the module into.
    Yang,
    /// Open vSwitch.
    Ovs,
    /// The in-memory fixture device.
    Fixture,
    /// A Linux-based switch (Cumulus, SONiC, any open NOS running lldpd), over `ssh`
    /// with a POSIX shell: a neighbour source only (a Switch's `spec.neighbors`), it
    /// configures no port.
    Linux,
    /// FRRouting's vtysh (SONiC, Cumulus, most open switches), over `ssh`: a BGP
    /// speaker only (a Switch's `spec.bgp.speaker`), it configures no port.
    Frr,
}

/// A pinned host key: an OpenSSH SHA256 fingerprint or a known_hosts line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HostKeyPin {
    /// OpenSSH fingerprint, `SHA256:` followed by 43 base64 characters (as printed by
    /// `ssh-keygen -lf`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(pattern::FINGERPRINT))]
    pub fingerprint: Option<String>,
    /// One known_hosts line: `[host] key-type base64-key`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 16384), pattern(pattern::ONE_LINE))]
    pub known_hosts_line: Option<String>,
}

/// Backend tuning.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BackendOptions {
    /// Seconds allowed to connect and log in (default 10). With leader election every
    /// session ends within the batch bound (leaseDuration − renewDeadline, 5 s by
    /// default): a value not shorter than the bound cannot take effect (the `Ready`
    /// condition says so) and the bound governs connecting.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 300))]
    pub connect_timeout_seconds: Option<i64>,
    /// Seconds allowed for one command or RPC (default 30); for ansible, for one
    /// whole ansible-playbook run (default 300).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 600))]
    pub command_timeout_seconds: Option<i64>,
    /// Save the running configuration (`write memory` or equivalent) once per batch
    /// (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub save_config: Option<bool>,
    /// Open vSwitch bridge the ports live on (ovsdb only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 15), pattern(pattern::VLAN_NAME))]
    pub bridge: Option<String>,
    /// Where patchbay sends OpenFlow port-mods to take bridge ports down and up
    /// (ovsdb only): `unix:/var/run/openvswitch/BRIDGE.mgmt` when the operator runs
    /// beside Open vSwitch, or `tcp:HOST:PORT` for a `ptcp:` service controller on
    /// the bridge. Without it the ovsdb backend does not manage the admin state and
    /// refuses configurations with `disabled: true`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 6, max = 255), pattern(pattern::OPENFLOW_TARGET))]
    pub openflow: Option<String>,
    /// The NETCONF device model (netconf only): `junos-els` (default for junos:
    /// `interface-mode`, QFX and EX since ELS), `junos-port-mode` (older EX) or
    /// `patchbay-ports` (default for yang).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63), pattern(pattern::VLAN_NAME))]
    pub model: Option<String>,
    /// A directory of the user's own playbooks (ansible only): `apply.yml` and
    /// `read.yml` with the variable contract of patchbay's `playbooks/README.md`, as
    /// an absolute path on the operator's filesystem (a mounted ConfigMap). Without it
    /// the built-in playbooks for `os` run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 2, max = 255), pattern(pattern::ABSOLUTE_PATH))]
    pub playbooks: Option<String>,
    /// ovs-vswitchd's control socket (ovsdb only; the unixctl socket `ovs-appctl -t`
    /// names, e.g. `/var/run/openvswitch/ovs-vswitchd.1234.ctl`) on the operator's
    /// filesystem, when the operator runs beside Open vSwitch: the bridge's learned
    /// MAC addresses are read there (`fdb/show`) when a Switch names this provider
    /// in `spec.neighbors.providers`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 2, max = 255), pattern(pattern::ABSOLUTE_PATH))]
    pub control_socket: Option<String>,
    /// lldpd's control socket on the device (linux only), when not the default
    /// `/run/lldpd.socket`: an absolute path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 2, max = 255), pattern(pattern::ABSOLUTE_PATH))]
    pub lldp_socket: Option<String>,
    /// Most sessions open to this device at once (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 16))]
    pub max_sessions: Option<i64>,
    /// Sessions of `maxSessions` kept for read-only tools (`patchbay plan
    /// --read-devices`, one session each); the operator uses the rest. Default 0:
    /// no tool reads this device. Must leave the operator at least one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 15))]
    pub read_sessions: Option<i64>,
}

impl BackendOptions {
    /// The sessions the operator itself may open to the device: `maxSessions` (else
    /// `default`, the operator's setting) less `readSessions`, at least one.
    pub fn operator_sessions(&self, default: usize) -> usize {
        let max = self
            .max_sessions
            .map(|n| n.clamp(1, 16) as usize)
            .unwrap_or(default);
        max.saturating_sub(self.tool_sessions()).max(1)
    }

    /// The sessions kept for read-only tools (`readSessions`, 0 when unset).
    pub fn tool_sessions(&self) -> usize {
        self.read_sessions
            .map(|n| n.clamp(0, 15) as usize)
            .unwrap_or(0)
    }
}

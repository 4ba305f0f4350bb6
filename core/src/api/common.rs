//! Types shared by several custom resources: references, the port state, port status
//! and the schema patterns. Pure data, no I/O.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Schema patterns. The Rust validator (`crate::decide::validate`) applies the exact grammar of
/// `patchbay_model::values`; these patterns make the API server refuse the
/// obvious cases before an object is ever stored.
pub mod pattern {
    /// A Kubernetes object name (DNS-1123 subdomain).
    pub const OBJECT_NAME: &str = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$";
    /// A device port name: letters, digits, `/ . _ : -`, one inner space.
    pub const PORT_NAME: &str = r"^[A-Za-z][A-Za-z0-9/._:-]*( [A-Za-z0-9/._:-]+)?$";
    /// A VLAN name.
    pub const VLAN_NAME: &str = r"^[A-Za-z0-9_.-]+$";
    /// A port description (no CLI or XML metacharacters, no edge spaces).
    pub const DESCRIPTION: &str =
        r"^[A-Za-z0-9_.,:/@()+=-]([A-Za-z0-9 _.,:/@()+=-]*[A-Za-z0-9_.,:/@()+=-])?$";
    /// The `vlanRange` grammar: `1, 6-10`.
    pub const VLAN_RANGE: &str =
        r"^ *[0-9]{1,4}( *- *[0-9]{1,4})?( *, *[0-9]{1,4}( *- *[0-9]{1,4})?)* *$";
    /// An IPv4 or IPv6 network in CIDR notation.
    pub const CIDR: &str =
        r"^([0-9]{1,3}\.){3}[0-9]{1,3}/[0-9]{1,2}$|^[0-9a-fA-F:.]*:[0-9a-fA-F:.]*/[0-9]{1,3}$";
    /// A TCP/UDP port or range: `22` or `22-30`.
    pub const L4_PORT_RANGE: &str = r"^[0-9]{1,5}(-[0-9]{1,5})?$";
    /// A device address: IP address or host name.
    pub const ADDRESS: &str = r"^[A-Za-z0-9.:-]+$";
    /// An OpenSSH SHA256 host-key fingerprint.
    pub const FINGERPRINT: &str = r"^SHA256:[A-Za-z0-9+/]{43}=?$";
    /// One line of text (no CR or LF).
    pub const ONE_LINE: &str = r"^[^\r\n]+$";
    /// An OpenFlow target: `unix:/absolute/path` or `tcp:HOST:PORT`.
    pub const OPENFLOW_TARGET: &str = r"^(unix:/[A-Za-z0-9._/-]+|tcp:[A-Za-z0-9.-]+:[0-9]{1,5}|tcp:\[[0-9A-Fa-f:.]+\]:[0-9]{1,5})$";
    /// An absolute path (the validator also refuses `..` components).
    pub const ABSOLUTE_PATH: &str = r"^/([A-Za-z0-9._-]+/?)*$";
    /// A MAC address, colon separated.
    pub const MAC: &str = r"^([0-9a-fA-F]{2}:){5}[0-9a-fA-F]{2}$";
    /// A label-value-like token (site, NIC name).
    pub const TOKEN: &str = r"^[A-Za-z0-9]([A-Za-z0-9_.-]*[A-Za-z0-9])?$";
    /// A BMC address: `scheme://host[/path]` or a bare host.
    pub const BMC_ADDRESS: &str = r"^([a-z0-9+.-]+://)?[A-Za-z0-9.:\[\]-]+(/[A-Za-z0-9._~/-]*)?$";
}

/// Where a port is in its lifecycle (seed 003). An absent state means the object was
/// just created and has not been seen by the controller yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum PortState {
    /// Steady, nothing applied; waiting for a configuration reference.
    Idle,
    /// Validating and applying the configuration, then reading it back.
    Configuring,
    /// Steady; the configuration is applied and verified.
    Active,
    /// Removing the configuration from the device (VLANs, ACL, description removed,
    /// port left up).
    Cleaning,
    /// Clean and being deleted; the finalizer is about to be removed.
    Deleting,
}

impl PortState {
    /// Every state, in the order a port meets them.
    pub const ALL: [PortState; 5] = [
        PortState::Idle,
        PortState::Configuring,
        PortState::Active,
        PortState::Cleaning,
        PortState::Deleting,
    ];

    /// Whether the state is work under way (Configuring, Cleaning): the state that
    /// follows says how it ended. A transition into one gets no Event of its own, so
    /// a linked port leaves one Normal Event (`Active`), not two; status, the
    /// transitions metric and the log still show it.
    pub fn is_in_progress(self) -> bool {
        matches!(self, PortState::Configuring | PortState::Cleaning)
    }
}

impl std::fmt::Display for PortState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PortState::Idle => "Idle",
            PortState::Configuring => "Configuring",
            PortState::Active => "Active",
            PortState::Cleaning => "Cleaning",
            PortState::Deleting => "Deleting",
        })
    }
}

/// A reference to a configuration object by name. The namespace defaults to the
/// namespace of the object that holds the reference.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub struct ConfigurationRef {
    /// Name of the configuration object.
    #[schemars(length(min = 1, max = 253), pattern(pattern::OBJECT_NAME))]
    pub name: String,
    /// Namespace of the configuration object; defaults to the referring object's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63), pattern(pattern::OBJECT_NAME))]
    pub namespace: Option<String>,
}

/// A reference to a Secret. The namespace defaults to the referring object's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SecretRef {
    /// Name of the Secret.
    #[schemars(length(min = 1, max = 253), pattern(pattern::OBJECT_NAME))]
    pub name: String,
    /// Namespace of the Secret; defaults to the referring object's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63), pattern(pattern::OBJECT_NAME))]
    pub namespace: Option<String>,
}

/// The status shared by SwitchPort and SmartNicPort.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct PortStatus {
    /// Lifecycle state; absent until the controller has seen the port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<PortState>,
    /// The Switch this port belongs to, as resolved by the controller (absent for a
    /// SmartNicPort, which is on no Switch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub switch: Option<String>,
    /// The ProviderSwitch through which the port's device is reached (a SwitchPort's
    /// Switch's provider; a SmartNicPort's `spec.provider`), as resolved by the
    /// controller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// The port name on the device, as resolved by the controller. While a port
    /// moves (its Switch port entry renamed), the device port it leaves, until that
    /// one reads back clean.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_port: Option<String>,
    /// A SwitchPort's: the Switch port entry its applied configuration was applied
    /// with ([`crate::api::SwitchPortDefinition::entry_hash`]); an entry edited
    /// since is applied again (in waves under the Switch's rollout). Absent when
    /// nothing is applied, and on ports applied before this field existed (recorded
    /// at their next drift check that reads them in sync).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entry_hash: Option<String>,
    /// The configuration currently applied to the device; absent when nothing is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub configuration_ref: Option<ConfigurationRef>,
    /// SHA-256 of the applied configuration's spec, so an edited configuration is
    /// noticed even when the reference is unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub configuration_hash: Option<String>,
    /// The metadata.generation the controller last acted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Conditions: Ready, Drifted, Forbidden (with tenancy: the configuration is not
    /// granted to the namespace the port serves; nothing is sent), … (Kubernetes
    /// conventions).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
    /// The last error, if the last attempt failed (never contains credentials).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// Consecutive failed attempts at the current target (for a switch that does
    /// not answer: the switch's failed probes); drives the backoff and resets when
    /// any input of the port changes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_count: Option<i32>,
    /// The attempt `failureCount` belongs to: the step (`apply`, `clean`, `verify`)
    /// and a digest of the port's inputs (its spec, configuration, Switch port entry,
    /// ProviderSwitch and credentials Secret); a change to any of them starts
    /// counting again, at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_attempt: Option<String>,
    /// When the last failed attempt failed; absent while nothing fails.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_failure_time: Option<Time>,
    /// When the failed attempt is tried again: after the backoff for a failure of
    /// the port, at the switch's next probe for a switch that does not answer.
    /// Absent while failing: not until an input of the port changes (an invalid
    /// configuration is never retried as it is).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_retry_time: Option<Time>,
    /// When `state` last changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Time>,
}

/// What patchbay does with a port whose cabling it cannot confirm (see the README's
/// cabling section): `Permissive` (default) moves a port where nothing is seen and
/// reports a running host's moved cable; `Strict` parks both.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
pub enum CablingPolicy {
    /// Refuse only what is proven wrong before a port moves.
    #[default]
    Permissive,
    /// Also park ports where nothing is seen, and a running host's port found
    /// miscabled.
    Strict,
}

/// The status of an object that has only conditions (ProviderSwitch, Switch).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConditionsStatus {
    /// The metadata.generation the controller last acted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Conditions (Kubernetes conventions).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
}

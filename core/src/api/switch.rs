//! Switch: one device's ports and the constraints on each (which SwitchPort maps to
//! which device port, allowed VLANs, trunking, disabled). Pure data, no I/O.

use std::collections::BTreeMap;

use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

use super::common::pattern;

/// A network device and the ports patchbay may configure on it. The Switch controller
/// keeps one SwitchPort per entry of `ports`, owned by this Switch.
#[derive(CustomResource, Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "patchbay.dev",
    version = "v1alpha1",
    kind = "Switch",
    namespaced,
    status = "SwitchStatus",
    shortname = "sw",
    category = "patchbay",
    doc = "A network device and the ports patchbay may configure on it, with each port's constraints.",
    printcolumn(name = "Provider", type_ = "string", json_path = ".spec.provider.name"),
    printcolumn(name = "Drift", type_ = "string", json_path = ".spec.driftPolicy"),
    printcolumn(name = "Chassis", type_ = "string", json_path = ".status.chassisId"),
    printcolumn(
        name = "Rollout",
        type_ = "string",
        json_path = ".status.rollout.phase"
    ),
    printcolumn(
        name = "Revision",
        type_ = "integer",
        json_path = ".status.rollout.currentRevisionNumber"
    ),
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
#[serde(rename_all = "camelCase")]
pub struct SwitchSpec {
    /// The ProviderSwitch (same namespace) that says how to reach this device.
    pub provider: ProviderRef,
    /// The ports patchbay manages. Key: the SwitchPort object name (a Kubernetes
    /// name); value: the device port and its constraints.
    #[serde(default)]
    #[schemars(extend("maxProperties" = 1024))]
    pub ports: BTreeMap<String, SwitchPortDefinition>,
    /// What to do when a device port no longer matches its applied configuration:
    /// `Reconcile` re-applies it (default); `ReportOnly` sets a Drifted condition and
    /// leaves the device alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drift_policy: Option<DriftPolicy>,
    /// Where patchbay reads what each device port sees (LLDP neighbours), into
    /// `status.neighbors`. Absent: nothing is read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub neighbors: Option<NeighborsSpec>,
    /// The ToR's BGP speaker, which peers with the allocated hosts cabled to this
    /// Switch's ports that have a `bgpAddress` (see docs/bgp.md). Absent: no BGP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bgp: Option<SwitchBgpSpec>,
    /// How an edit of `ports` reaches the ports that carry a configuration: in waves
    /// with health gates, as a SwitchPortConfiguration's edit does (the same fields;
    /// the waves spread over this one switch). Absent: the operator's default policy.
    /// An entry's `bgpAddress` is not rolled (the speaker follows it at once); a
    /// port that carries nothing takes its entry at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<super::RolloutSpec>,
}

impl SwitchSpec {
    /// SHA-256 of what the Switch's ports carry of it: each entry's device-port part
    /// ([`SwitchPortDefinition::port_part`]), keyed by SwitchPort. A revision of a
    /// Switch's rollout is named by it; an edit of anything else (the provider, the
    /// drift policy, neighbours, BGP, a `bgpAddress`) starts no rollout.
    pub fn content_hash(&self) -> String {
        let ports: BTreeMap<&String, SwitchPortDefinition> =
            self.ports.iter().map(|(k, d)| (k, d.port_part())).collect();
        super::configuration_hash(&serde_json::json!({"Switch": ports}))
    }
}

/// The ToR's BGP speaker and its defaults for every host neighbour (infra's).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SwitchBgpSpec {
    /// The ProviderSwitch (same namespace) of the routing daemon: `os: frr` over
    /// `ssh`. The Switch's ports stay with `spec.provider`.
    pub speaker: ProviderRef,
    /// The ToR's ASN (1-4294967294, not a reserved one).
    #[schemars(range(min = 1, max = 4294967294_i64))]
    pub asn: i64,
    /// The speaker's router id (an IPv4 address).
    #[schemars(length(min = 7, max = 15))]
    pub router_id: String,
    /// Keepalive interval in seconds (default 30).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 3600))]
    pub keepalive_seconds: Option<i64>,
    /// Hold time in seconds (default 90; at least three keepalives).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 3, max = 65535))]
    pub hold_seconds: Option<i64>,
    /// Seconds between connection attempts (default 10).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535))]
    pub connect_retry_seconds: Option<i64>,
    /// Accepted prefixes per host beyond which its session is torn down (default 16).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100000))]
    pub max_prefixes: Option<i64>,
    /// What each host is sent: `Nothing` (default) or `DefaultRoute` only. No host
    /// is ever sent another host's routes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outbound: Option<BgpOutbound>,
    /// Seconds between reads of the speaker (drift, session state; default 30).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 2, max = 3600))]
    pub interval_seconds: Option<i64>,
}

/// What a host neighbour is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
pub enum BgpOutbound {
    /// No route.
    #[default]
    Nothing,
    /// A default route only.
    DefaultRoute,
}

/// What the speaker has for this Switch's hosts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SwitchBgpStatus {
    /// When the speaker was last read, as far as the status says: written at once
    /// when what the speaker reports changes, else at most every 300 s (one status
    /// write per Switch per five minutes while nothing changes), so at most 300 s
    /// older than the last successful read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_at: Option<String>,
    /// The host neighbours on the speaker, by address (always written, empty too: a
    /// status merge patch replaces the list whole).
    #[serde(default)]
    #[schemars(length(max = 1024))]
    pub neighbors: Vec<BgpNeighborStatus>,
}

/// One host neighbour on the speaker.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BgpNeighborStatus {
    /// The host's address.
    pub address: String,
    /// The SwitchPort it is reached through.
    pub switch_port: String,
    /// The Server it belongs to (empty: a left-over patchbay is removing).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub server: String,
    /// The host's ASN.
    pub asn: i64,
    /// The session state (`Established`, `Active`, `Idle`, …).
    pub state: String,
    /// Prefixes accepted from it.
    pub accepted_prefixes: i64,
}

/// Where and how often a Switch's neighbours are read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NeighborsSpec {
    /// The ProviderSwitches (same namespace) to read through, their reads merged: an
    /// `os: linux` device running lldpd (LLDP neighbours, read only), an `ovsdb`
    /// provider with `options.controlSocket` (learned MACs). The Switch's ports stay
    /// with `spec.provider`.
    #[schemars(length(min = 1, max = 4))]
    pub providers: Vec<ProviderRef>,
    /// Seconds between reads (default 30).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 5, max = 3600))]
    pub interval_seconds: Option<i64>,
    /// Seconds a neighbour that went quiet still shows in reads: the longer of the
    /// switch's MAC aging time and the hosts' LLDP time-to-live (default 300, the
    /// usual MAC aging time; lldpd's TTL is 120). A rollout's `NeighborSeen` gate
    /// judges a host on a read at least this long after its port's change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 5, max = 3600))]
    pub age_out_seconds: Option<i64>,
    /// The SwitchPortConfiguration (this namespace) a port carries while its cabling
    /// is not confirmed (parked), e.g. `disabled: true` or a quarantine VLAN. Absent:
    /// clean, which with tenancy on is the parking VLAN and without it the device
    /// default (on most switches VLAN 1, on Open vSwitch every VLAN).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253), pattern(pattern::OBJECT_NAME))]
    pub parking_configuration: Option<String>,
}

/// A Switch's status: its conditions, and what its ports see.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct SwitchStatus {
    /// The metadata.generation the controller last acted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Conditions (Kubernetes conventions): `Ready`, `DeviceReachable`,
    /// `NeighborsRead` when `spec.neighbors` is set and `BgpConfigured` when
    /// `spec.bgp` is.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
    /// The switch's own LLDP chassis id (what hosts' LLDP agents name it by), as
    /// its neighbour source last read it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chassis_id: Option<String>,
    /// When the neighbours were last read and found changed, or last refreshed (see
    /// the README's cabling section: a steady fabric is written every few minutes,
    /// a change at the read that sees it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub neighbors_read_at: Option<String>,
    /// What each device port sees, from the last successful read: only ports that
    /// see something, sorted by device port, at most 512 ports.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 512))]
    pub neighbors: Vec<PortNeighborsStatus>,
    /// Whether ports beyond the 512 listed see something too.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub neighbors_truncated: bool,
    /// The BGP neighbours on the speaker, when `spec.bgp` is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bgp: Option<SwitchBgpStatus>,
    /// The rollout of the last edit of `spec.ports`: written by the rollout
    /// controller only (the Switch controller leaves it alone).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<super::RolloutStatus>,
}

/// What one device port sees.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PortNeighborsStatus {
    /// The device port.
    pub port: String,
    /// The SwitchPort managing it, when `spec.ports` lists it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub switch_port: Option<String>,
    /// LLDP neighbours (at most 4).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 4))]
    pub lldp: Vec<LldpNeighborStatus>,
    /// Whether more LLDP neighbours were seen than are listed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub lldp_truncated: bool,
    /// MAC addresses learned on the port, lowercase and colon-separated (at most 16).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub macs: Vec<String>,
    /// Whether more MAC addresses were learned than are listed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub macs_truncated: bool,
    /// MAC addresses still learned on the port that the same switch learned more
    /// recently on another port (a host whose cable moved): stale, not taken as
    /// evidence of where a host is (at most 16).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub stale_macs: Vec<String>,
}

/// One LLDP neighbour of a port.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LldpNeighborStatus {
    /// The neighbour's chassis id (a MAC is lowercase, colon-separated).
    pub chassis_id: String,
    /// What the chassis id is: `mac`, `interfaceName`, `interfaceAlias`,
    /// `networkAddress`, `local` or `other`.
    pub chassis_id_subtype: String,
    /// The neighbour's port id (a MAC is lowercase, colon-separated).
    pub port_id: String,
    /// What the port id is (as for the chassis id).
    pub port_id_subtype: String,
    /// The neighbour's port description, when sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port_description: Option<String>,
    /// The neighbour's system name, when sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_name: Option<String>,
    /// The neighbour's management address, when sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub management_address: Option<String>,
    /// When a read last saw it (RFC 3339; refreshed with `neighborsReadAt`).
    pub last_seen: String,
}

/// A reference to the ProviderSwitch of a Switch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProviderRef {
    /// Kind of the provider object; only `ProviderSwitch` exists today.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<ProviderKind>,
    /// Name of the provider object, in the Switch's namespace.
    #[schemars(length(min = 1, max = 253), pattern(pattern::OBJECT_NAME))]
    pub name: String,
}

/// Kinds that can provide device access.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum ProviderKind {
    /// A ProviderSwitch.
    ProviderSwitch,
}

/// Drift handling for Active ports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema, Default)]
pub enum DriftPolicy {
    /// Re-apply the configuration (the port goes back to Configuring).
    #[default]
    Reconcile,
    /// Set a Drifted condition and leave the device as it is.
    ReportOnly,
}

/// One device port and its constraints.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SwitchPortDefinition {
    /// The port name on the device, as the device spells it (`FastEthernet0/1`,
    /// `ethernet 1/g1`, `Ethernet1`).
    #[schemars(length(min = 1, max = 64), pattern(pattern::PORT_NAME))]
    pub name: String,
    /// True if this port is not available: any configuration is refused.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub disabled: bool,
    /// VLANs this port may carry, e.g. `1, 6-10`. Absent: any VLAN 1-4094.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 512), pattern(pattern::VLAN_RANGE))]
    pub vlan_range: Option<String>,
    /// True if this port must not be a trunk: configurations with tagged VLANs are
    /// refused.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub trunk_disable: bool,
    /// The BGP speaker's address facing this port's host, with its point-to-point
    /// subnet (`10.0.1.0/31` or `10.0.1.1/30`): the host's address is the subnet's
    /// other one, so no host can take another's session. Needs `spec.bgp`; the
    /// address must exist on the speaker, on the tenant network the port carries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 9, max = 18))]
    pub bgp_address: Option<String>,
}

impl SwitchPortDefinition {
    /// What the device port carries of the entry: all of it but `bgpAddress` (the
    /// BGP speaker's, not the port's).
    pub fn port_part(&self) -> SwitchPortDefinition {
        SwitchPortDefinition {
            bgp_address: None,
            ..self.clone()
        }
    }

    /// The first 16 hex digits of the SHA-256 of [`Self::port_part`]: what a
    /// SwitchPort records as the entry its configuration was applied with
    /// (`status.entryHash`).
    pub fn entry_hash(&self) -> String {
        super::configuration_hash(&self.port_part())
            .chars()
            .take(16)
            .collect()
    }
}

//! SwitchPortConfiguration: what a switch port should carry (VLANs, ACL, admin state,
//! MTU, description, link aggregation). Pure data, no I/O.

use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::pattern;
use super::rollout::ConfigurationStatus;

/// What a switch port should carry. Tenants create these and name them in their
/// ServerClaims (the infra team also links them from SwitchPorts); editing one
/// reconfigures every port that uses it. With tenancy, its VLANs must be granted to
/// the namespace of the port's tenant (VLANPool).
///
/// An access port has `untaggedVLAN` and no `vlans`; a trunk lists its tagged VLANs in
/// `vlans` and may carry `untaggedVLAN` as its native VLAN.
#[derive(CustomResource, Debug, Clone, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[kube(
    group = "patchbay.dev",
    version = "v1alpha1",
    kind = "SwitchPortConfiguration",
    namespaced,
    shortname = "swpc",
    category = "patchbay",
    doc = "What a switch port should carry: untagged and tagged VLANs, ACL, admin state, MTU, description, link aggregation.",
    status = "ConfigurationStatus",
    printcolumn(name = "Untagged", type_ = "integer", json_path = ".spec.untaggedVLAN"),
    printcolumn(name = "Disabled", type_ = "boolean", json_path = ".spec.disabled"),
    printcolumn(
        name = "Rollout",
        type_ = "string",
        json_path = ".status.rollout.phase"
    ),
    printcolumn(
        name = "Revision",
        type_ = "integer",
        json_path = ".status.rollout.updateRevisionNumber"
    ),
    printcolumn(
        name = "Updated",
        type_ = "integer",
        json_path = ".status.rollout.updatedPorts"
    ),
    printcolumn(name = "Ports", type_ = "integer", json_path = ".status.rollout.ports"),
    printcolumn(
        name = "Switches",
        type_ = "string",
        json_path = ".status.rollout.switches"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct SwitchPortConfigurationSpec {
    /// ACL rules of the port. Evaluated in order, the first matching rule wins;
    /// traffic no rule matches is ALLOWED (end with a `deny` of protocol `all` for an
    /// allow-list). Rules are stateless: a reply needs its own rule. ARP and IPv6
    /// neighbour discovery always pass, so an ACL cannot cut a host off its gateway.
    /// A backend that cannot implement exactly this refuses the configuration.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256))]
    pub acl: Vec<AclRuleSpec>,
    /// VLANs, admin state, MTU and description (shared with SmartNicConfiguration).
    #[serde(flatten)]
    pub port: PortSettingsSpec,
    /// Membership in a link-aggregation group (port-channel / LAG / bond): every
    /// SwitchPort of the Switch carrying a configuration with this group is a
    /// member. The aggregate interface carries the VLANs and MTU; each member keeps
    /// its own description and admin state. Members must carry the same
    /// configuration otherwise and be cabled to one Server; the group is configured
    /// in one batch once every member's change is there. Not with `acl`. Leave it out
    /// of provisioning configurations (PXE needs single links).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link_aggregation: Option<LinkAggregationSpec>,
    /// How an edit reaches the ports already carrying this configuration: in waves
    /// (a canary, then at most `maxUnavailable` ports at a time), each gated on its
    /// ports reading back Active. Absent: the operator's default policy. Not part of
    /// the configuration's revision: editing it moves no port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<super::rollout::RolloutSpec>,
}

impl SwitchPortConfigurationSpec {
    /// SHA-256 of what a port carries from this spec (everything but `rollout`):
    /// the revision's identity, and what a port's `status.configurationHash` holds.
    pub fn content_hash(&self) -> String {
        if self.rollout.is_none() {
            return super::configuration_hash(self);
        }
        super::configuration_hash(&SwitchPortConfigurationSpec {
            rollout: None,
            ..self.clone()
        })
    }
}

/// What every port configuration carries — a switch port's
/// (SwitchPortConfiguration) and a SmartNIC bridge port's (SmartNicConfiguration):
/// the untagged and tagged VLANs, the admin state, the MTU and the description.
///
/// An access port has `untaggedVLAN` and no `vlans`; a trunk lists its tagged VLANs
/// in `vlans` and may carry `untaggedVLAN` as its native VLAN.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[x_kube(validation = Rule::new(
    "!has(self.untaggedVLAN) || !has(self.vlans) || !self.vlans.exists(v, v.id == self.untaggedVLAN)"
).message("untaggedVLAN must not be listed again in vlans (vlans holds only tagged VLANs)"))]
#[serde(rename_all = "camelCase")]
pub struct PortSettingsSpec {
    /// VLAN carried untagged: the access VLAN, or the native VLAN of a trunk (on a
    /// SmartNIC: the OVS port's `tag`).
    #[serde(
        rename = "untaggedVLAN",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(range(min = 1, max = 4094))]
    pub untagged_vlan: Option<i64>,
    /// Tagged VLANs (makes the port a trunk; on a SmartNIC: OVS `trunks`). Each VLAN at
    /// most once; the untagged VLAN is not repeated here.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 4094))]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["id".into()]))]
    pub vlans: Vec<VlanSpec>,
    /// True to shut the port down administratively (no traffic either way).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub disabled: bool,
    /// Port MTU in bytes, 576-9216; absent leaves the device default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 576, max = 9216))]
    pub mtu: Option<i64>,
    /// Port description (letters, digits, spaces and `_ . , : / @ ( ) + = -`; on a
    /// SmartNIC kept in the OVS port's `external_ids`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 80), pattern(pattern::DESCRIPTION))]
    pub description: Option<String>,
}

/// One VLAN, with an optional name used when patchbay creates it on the device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct VlanSpec {
    /// VLAN id, 1-4094.
    #[schemars(range(min = 1, max = 4094))]
    pub id: i64,
    /// VLAN name (letters, digits, `_ . -`, at most 32 characters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 32), pattern(pattern::VLAN_NAME))]
    pub name: Option<String>,
}

/// IP version an ACL rule matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum AclType {
    /// IPv4.
    Ipv4,
    /// IPv6.
    Ipv6,
}

/// What an ACL rule does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum AclActionSpec {
    /// Let matching traffic through.
    Allow,
    /// Drop matching traffic.
    Deny,
}

/// Protocol an ACL rule matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum AclProtocolSpec {
    /// TCP.
    Tcp,
    /// UDP.
    Udp,
    /// ICMP / ICMPv6.
    Icmp,
    /// Any protocol.
    All,
}

/// Direction an ACL rule applies to, seen from the switch port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum AclDirectionSpec {
    /// From the server into the switch (default).
    Ingress,
    /// From the switch out to the server.
    Egress,
}

/// One ACL rule (seed 003 story 5): matches IPv4 or IPv6 traffic of a protocol,
/// from `src` (and `srcPortRange`) to `dst` (and `dstPortRange`), in one direction;
/// absent fields match anything. The rules of a port are evaluated in order, the
/// first match wins, unmatched traffic is allowed, rules are stateless.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[x_kube(validation = Rule::new(
    "(!has(self.srcPortRange) && !has(self.dstPortRange)) || self.protocol == 'tcp' || self.protocol == 'udp'"
).message("srcPortRange and dstPortRange need protocol tcp or udp"))]
#[serde(rename_all = "camelCase")]
pub struct AclRuleSpec {
    /// `ipv4` or `ipv6`; the CIDRs must be of this family.
    #[serde(rename = "type")]
    pub type_: AclType,
    /// `allow` or `deny`.
    pub action: AclActionSpec,
    /// `tcp`, `udp`, `icmp` or `all`. Port ranges need `tcp` or `udp`.
    pub protocol: AclProtocolSpec,
    /// `ingress` (default): traffic from the host into the switch; `egress`: traffic
    /// from the switch towards the host (on Open vSwitch: unicast to the host NIC's
    /// MAC address, which must be known).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub direction: Option<AclDirectionSpec>,
    /// Source network in CIDR notation (host bits clear); absent (or `/0`) means any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 49), pattern(pattern::CIDR))]
    pub src: Option<String>,
    /// Source port or range (`22` or `22-30`), TCP/UDP only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 11), pattern(pattern::L4_PORT_RANGE))]
    pub src_port_range: Option<String>,
    /// Destination network in CIDR notation (host bits clear); absent (or `/0`) means
    /// any. (Seed 003 calls it `des`.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 49), pattern(pattern::CIDR))]
    pub dst: Option<String>,
    /// Destination port or range (`22` or `22-30`), TCP/UDP only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 11), pattern(pattern::L4_PORT_RANGE))]
    pub dst_port_range: Option<String>,
}

/// LACP mode of a link-aggregation member.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum LagModeSpec {
    /// LACP active (default).
    Active,
    /// LACP passive.
    Passive,
    /// Static bundle without LACP.
    Static,
}

/// Membership in a link-aggregation group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct LinkAggregationSpec {
    /// Group number (port-channel / LAG id), 1-4096.
    #[schemars(range(min = 1, max = 4096))]
    pub group: i64,
    /// `active` (default), `passive` or `static`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<LagModeSpec>,
}

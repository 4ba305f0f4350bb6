//! ServerClaim: a team's request for bare-metal Servers at a site, by role, with the
//! network each role's NICs must carry (seed 000's workload-cluster request, seed
//! 001's roles, seed 003's `networkConfiguration`). Pure data, no I/O.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::pattern;

/// A claim on Servers: how many of each role, at which site, with which hardware and
/// network. Served whole or not at all; the Servers it holds are written into an
/// inventory ConfigMap (`<claim>-inventory`) for the installer.
#[derive(CustomResource, Debug, Clone, PartialEq, Serialize, Deserialize, KubeSchema)]
#[kube(
    group = "patchbay.dev",
    version = "v1alpha1",
    kind = "ServerClaim",
    namespaced,
    status = "ServerClaimStatus",
    shortname = "claim",
    category = "patchbay",
    doc = "A claim on bare-metal Servers of a site, by role and hardware.",
    printcolumn(name = "Site", type_ = "string", json_path = ".spec.site"),
    printcolumn(name = "Allocated", type_ = "string", json_path = ".status.allocation"),
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
pub struct ServerClaimSpec {
    /// Only Servers of this site are candidates.
    #[schemars(length(min = 1, max = 63), pattern(pattern::TOKEN))]
    pub site: String,
    /// The roles and how many Servers each needs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["name".into()]))]
    pub roles: Vec<ClaimRole>,
    /// What the NICs of every Server of the claim must be connected to (applied when
    /// the Servers are provisioned; a role's own list adds to it).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub network_configuration: Vec<NetworkConfiguration>,
    /// The inventory written for the installer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inventory: Option<InventorySpec>,
}

/// One role of a claim.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClaimRole {
    /// Role name (`control-plane`, `worker`, …).
    #[schemars(length(min = 1, max = 63), pattern(pattern::TOKEN))]
    pub name: String,
    /// How many Servers.
    #[schemars(range(min = 0, max = 10000))]
    pub count: i64,
    /// What a Server must offer to take this role.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requirements: Option<RoleRequirements>,
    /// Network for the NICs of this role's Servers, in addition to the claim's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub network_configuration: Vec<NetworkConfiguration>,
    /// BGP between this role's Servers and their ToRs (Switches with `spec.bgp`),
    /// once the Servers carry the claim's network. Absent: no BGP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bgp: Option<RoleBgp>,
}

/// A role's BGP: the hosts' ASN and what they may announce (see docs/bgp.md).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RoleBgp {
    /// The hosts' ASN; absent: the first ASN granted to the namespace (with tenancy)
    /// and refused without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 4294967294_i64))]
    pub asn: Option<i64>,
    /// The IPv4 prefixes the hosts may announce (each, and anything more specific
    /// inside it, e.g. a MetalLB pool): inside the namespace's granted prefixes, never
    /// a default route, never overlapping another claim's or the ToR's own subnets.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub prefixes: Vec<String>,
}

/// Requirements of a role (seed 001's rules: pinned MACs must get the role and, with
/// requirements too, must meet them; requirements alone pick any fitting Server).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RoleRequirements {
    /// At least this many logical CPUs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 65536))]
    pub min_cpus: Option<i64>,
    /// At least this much memory (a Kubernetes quantity, `128Gi`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_memory: Option<Quantity>,
    /// Pins: a Server whose boot MAC or any NIC MAC is listed gets this role.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 1000))]
    pub mac_addresses: Vec<String>,
}

/// What one NIC must be connected to (seed 003's `Metal3Machine.spec.networkConfiguration`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NetworkConfiguration {
    /// The configuration to apply.
    pub configuration_ref: TypedConfigurationRef,
    /// Which NIC takes it.
    #[serde(default)]
    pub nic_hint: NicHint,
}

/// A configuration of either kind.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct TypedConfigurationRef {
    /// `SwitchPortConfiguration` or `SmartNicConfiguration`.
    pub kind: ConfigurationKind,
    /// Name of the configuration.
    #[schemars(length(min = 1, max = 253), pattern(pattern::OBJECT_NAME))]
    pub name: String,
    /// Namespace of the configuration; defaults to the claim's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63), pattern(pattern::OBJECT_NAME))]
    pub namespace: Option<String>,
}

/// The kinds of configuration a NIC's port can carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum ConfigurationKind {
    /// For a NIC cabled to a SwitchPort.
    SwitchPortConfiguration,
    /// For a NIC cabled to a SmartNicPort.
    SmartNicConfiguration,
}

/// Which NIC of a Server a network configuration goes to.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct NicHint {
    /// The NIC's name; absent: the first NIC whose `smartNIC` matches and is cabled
    /// to the right kind of port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63), pattern(pattern::TOKEN))]
    pub name: Option<String>,
    /// True: a NIC cabled to a SmartNicPort.
    #[serde(default, rename = "smartNIC")]
    pub smart_nic: bool,
}

/// The inventory written for the installer.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InventorySpec {
    /// Role → inventory groups. Default: `control-plane` → `kube_control_plane` and
    /// `etcd`, `worker` → `kube_node`; any other role → a group of its own name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub groups: BTreeMap<String, Vec<String>>,
    /// Copy the BMC credentials of the allocated Servers into `<claim>-bmc` in the
    /// claim's namespace (they give power and console control: off by default).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub include_bmc_credentials: bool,
}

/// Observed state of a ServerClaim.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServerClaimStatus {
    /// The Servers allocated, per role.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub roles: Vec<RoleAllocation>,
    /// Allocated / requested, e.g. `3/3`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocation: Option<String>,
    /// The metadata.generation the controller last acted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Allocated`, `Ready`, `Maintenance`, `InventoryComplete`, `Forbidden` (with tenancy: a
    /// held Server's ports refused the claim's network, and why).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
}

/// The Servers of one role.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct RoleAllocation {
    /// The role.
    pub name: String,
    /// How many the claim asks for.
    pub requested: i64,
    /// The Servers holding it, by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub servers: Vec<String>,
}

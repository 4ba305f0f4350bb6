//! Server: a bare-metal machine, its BMC and its NICs cabled to ports (seed 000's
//! Server CRD, with seed 003's per-NIC port references). Pure data, no I/O.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::{ConfigurationRef, pattern};

/// A bare-metal server, defined by the infra team: how to reach its BMC, how it boots
/// and which switch port each NIC is cabled to. Ports follow the server: provisioning
/// configuration while it installs, the tenant's configuration once allocated, clean
/// again on release.
#[derive(CustomResource, Debug, Clone, PartialEq, Serialize, Deserialize, KubeSchema)]
#[kube(
    group = "patchbay.dev",
    version = "v1alpha1",
    kind = "Server",
    status = "ServerStatus",
    shortname = "srv",
    category = "patchbay",
    doc = "A bare-metal server: BMC, boot MAC, site and the switch ports its NICs are cabled to.",
    printcolumn(name = "Site", type_ = "string", json_path = ".spec.site"),
    printcolumn(name = "Allocated", type_ = "boolean", json_path = ".status.allocated"),
    printcolumn(name = "Role", type_ = "string", json_path = ".status.role"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ServerSpec {
    /// The server's baseboard management controller.
    pub bmc: BmcSpec,
    /// MAC address of the NIC the server PXE-boots from.
    #[schemars(pattern(pattern::MAC))]
    pub boot_mac: String,
    /// Physical location (data centre / edge site) of the server.
    #[schemars(length(min = 1, max = 63), pattern(pattern::TOKEN))]
    pub site: String,
    /// The server's NICs and what each is cabled to.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["name".into()]))]
    pub nics: Vec<ServerNic>,
}

/// How to reach a BMC. Credentials are in a Secret, never in the spec.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BmcSpec {
    /// BMC address, e.g. `redfish://10.0.0.5/redfish/v1/Systems/1` or `10.0.0.5`.
    #[schemars(length(min = 1, max = 512), pattern(pattern::BMC_ADDRESS))]
    pub address: String,
    /// Secret with keys `username` and `password` for the BMC.
    pub credentials_secret_ref: NamespacedSecretRef,
}

/// A Secret reference from a cluster-scoped object: the namespace is required.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct NamespacedSecretRef {
    /// Name of the Secret.
    #[schemars(length(min = 1, max = 253), pattern(pattern::OBJECT_NAME))]
    pub name: String,
    /// Namespace of the Secret.
    #[schemars(length(min = 1, max = 63), pattern(pattern::OBJECT_NAME))]
    pub namespace: String,
}

/// One NIC of a server and its cabling.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServerNic {
    /// NIC name as the server's OS sees it (`eth0`, `eno1`).
    #[schemars(length(min = 1, max = 63), pattern(pattern::TOKEN))]
    pub name: String,
    /// MAC address of the NIC.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(pattern::MAC))]
    pub mac: Option<String>,
    /// The port this NIC is cabled to (a SwitchPort, or a SmartNicPort for a
    /// SmartNIC).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<CabledPortRef>,
    /// Configuration the port carries while the server is provisioned (e.g. the PXE
    /// network). Absent: the port stays clean during provisioning.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioning_configuration: Option<ConfigurationRef>,
    /// Configuration the port carries once the server is allocated to a tenant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub configuration: Option<ConfigurationRef>,
}

/// A reference to the port a NIC is cabled to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct CabledPortRef {
    /// `SwitchPort` (default) or `SmartNicPort`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<CabledPortKind>,
    /// Name of the port object.
    #[schemars(length(min = 1, max = 253), pattern(pattern::OBJECT_NAME))]
    pub name: String,
    /// Namespace of the port object.
    #[schemars(length(min = 1, max = 63), pattern(pattern::OBJECT_NAME))]
    pub namespace: String,
}

/// Kinds a NIC can be cabled to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum CabledPortKind {
    /// A switch port.
    SwitchPort,
    /// A SmartNIC port.
    SmartNicPort,
}

/// Observed state of a Server.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServerStatus {
    /// True while the server is allocated to a claim.
    #[serde(default)]
    pub allocated: bool,
    /// Role assigned to the server (e.g. control-plane, worker).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    /// The claim (workload cluster) holding the server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim: Option<ClaimRef>,
    /// Errors found while reconciling (never contains credentials).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<String>,
    /// The metadata.generation the controller last acted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Conditions (Kubernetes conventions).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// A reference to the claim holding a server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ClaimRef {
    /// Name of the claim.
    pub name: String,
    /// Namespace of the claim.
    pub namespace: String,
}

//! Server: a bare-metal machine, its BMC and its NICs cabled to ports (seed 000's
//! Server CRD, with seed 003's per-NIC port references), its hardware for allocation
//! and its binding to a [`ServerClaim`](super::ServerClaim). Pure data, no I/O.

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
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
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(name = "Role", type_ = "string", json_path = ".status.role"),
    printcolumn(name = "Claim", type_ = "string", json_path = ".status.claim.name"),
    printcolumn(name = "Ports", type_ = "string", json_path = ".status.portsReady"),
    printcolumn(
        name = "Cabling",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"CablingVerified\")].reason"
    ),
    printcolumn(name = "BGP", type_ = "string", json_path = ".status.bgp"),
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
    /// CPU and memory, for allocation. For a Server linked to a BareMetalHost, what
    /// is absent here is taken from the host's inspection (`status.hardware`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hardware: Option<HardwareSpec>,
    /// The address the installer reaches the host on (`ansible_host` in the
    /// inventory). Absent: the linked BareMetalHost's address for the boot MAC.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253), pattern(pattern::ADDRESS))]
    pub host_address: Option<String>,
    /// True: never allocated. An allocated Server keeps its claim, which reports it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub maintenance: bool,
    /// What happens to this Server's ports when their cabling cannot be confirmed
    /// (`Permissive` by default; `Strict` here or on the port's ProviderSwitch wins).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cabling_policy: Option<super::common::CablingPolicy>,
    /// The Metal3 BareMetalHost that is this machine, if any (hardware and address
    /// are read from its status).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bare_metal_host_ref: Option<NamespacedObjectRef>,
    /// The claim this Server is bound to. Written only by patchbay's allocator (like
    /// a PersistentVolume's `spec.claimRef`): spec survives backup and restore,
    /// status does not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim_ref: Option<ServerClaimBinding>,
}

/// What a Server offers to allocation.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HardwareSpec {
    /// Number of logical CPUs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65536))]
    pub cpus: Option<i64>,
    /// Memory, a Kubernetes quantity (`512Gi`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<Quantity>,
}

/// A reference to a namespaced object from a cluster-scoped one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct NamespacedObjectRef {
    /// Name of the object.
    #[schemars(length(min = 1, max = 253), pattern(pattern::OBJECT_NAME))]
    pub name: String,
    /// Namespace of the object.
    #[schemars(length(min = 1, max = 63), pattern(pattern::OBJECT_NAME))]
    pub namespace: String,
}

/// The binding of a Server to a claim.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ServerClaimBinding {
    /// Name of the ServerClaim.
    pub name: String,
    /// Namespace of the ServerClaim.
    pub namespace: String,
    /// UID of the ServerClaim (a claim deleted and created again under the same
    /// name is another claim).
    pub uid: String,
    /// The role of the claim this Server serves.
    pub role: String,
    /// When the binding was made (RFC 3339); scale-down releases the newest first.
    pub since: String,
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

impl CabledPortRef {
    /// The kind of port referred to (`SwitchPort` when not given).
    pub fn port_kind(&self) -> CabledPortKind {
        self.kind.unwrap_or(CabledPortKind::SwitchPort)
    }
}

/// Kinds a NIC can be cabled to.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
pub enum CabledPortKind {
    /// A switch port.
    SwitchPort,
    /// A SmartNIC port.
    SmartNicPort,
}

/// Where a Server is in its life (seed 003's provisioning and deprovisioning
/// workflows); each phase decides what its NICs' ports carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum ServerPhase {
    /// Not in use: ports on their provisioning configuration, or clean.
    Available,
    /// Being installed: ports on their provisioning configuration, or clean.
    Provisioning,
    /// Installed: ports on the claim's configuration (else the NIC's own, else
    /// clean).
    Provisioned,
    /// Being returned: ports back on their provisioning configuration, or clean.
    Deprovisioning,
    /// The Server (or its BareMetalHost) is being deleted: every port is cleaned
    /// and released.
    Deleting,
}

impl std::fmt::Display for ServerPhase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self, f)
    }
}

/// Observed state of a Server, written by the Server controller alone. The binding
/// itself is `spec.claimRef` (the allocator's); the phase and the ports are the
/// host controller's.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServerStatus {
    /// `Available`, `Provisioning`, `Provisioned`, `Deprovisioning` or `Deleting`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<ServerPhase>,
    /// True while the server is bound to a claim (`spec.claimRef`).
    #[serde(default)]
    pub allocated: bool,
    /// Role assigned to the server (e.g. control-plane, worker).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    /// The claim whose network the ports carry: the bound claim, and after a
    /// release the claim being left, until the ports are off its configuration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim: Option<ClaimRef>,
    /// Ready ports / ports the phase depends on, e.g. `2/3`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ports_ready: Option<String>,
    /// Each cabled NIC's port and what the phase wants it to carry.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<NicPortStatus>,
    /// The linked Metal3 BareMetalHost (`spec.bareMetalHostRef`, or found by boot
    /// MAC) and its `status.provisioning.state`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bare_metal_host: Option<LinkedHost>,
    /// Established BGP sessions / BGP peers, e.g. `1/1` (absent: no BGP).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bgp: Option<String>,
    /// The host's BGP peers (one per NIC cabled to a ToR with BGP), while its claim's
    /// role has BGP and the ports carry the claim's network: what the host
    /// configures, as in the `patchbay.dev/bgp-peers-{n}-*` annotations.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bgp_peers: Vec<BgpPeer>,
    /// Errors found while reconciling (never contains credentials).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<String>,
    /// The metadata.generation the controller last acted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Conditions: `Valid`, `PortsReady`, `Held`, `PortInUse`, `HostPaused`, `Forbidden`
    /// (with tenancy: claim targets refused by the grants, their ports left as they are).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// One BGP peer of a host: what it needs to peer back, and the session's state.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BgpPeer {
    /// The Switch (ToR), `<namespace>/<name>`.
    pub switch: String,
    /// The host's ASN.
    pub node_asn: i64,
    /// The ToR's ASN.
    pub peer_asn: i64,
    /// The ToR's address.
    pub peer_ip: String,
    /// The host's address (the session's source).
    pub src_ip: String,
    /// The Secret in the claim's namespace holding the MD5 password (key
    /// `password`, MetalLB's `passwordSecret` shape).
    pub password_secret: String,
    /// The session state on the ToR, as last read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
}

/// One NIC's port as the host controller drives it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NicPortStatus {
    /// The NIC.
    pub nic: String,
    /// `SwitchPort` or `SmartNicPort`.
    pub kind: String,
    /// The port object, `<namespace>/<name>`.
    pub port: String,
    /// What the phase wants the port to carry (`<namespace>/<name>`); absent: clean.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub configuration: Option<String>,
    /// Why: `provisioning`, `claim`, `nic` (the NIC's own default) or `clean`.
    pub source: String,
    /// The port's state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// True when the port carries what the phase wants.
    pub ready: bool,
    /// Why it does not (yet): on its way, failing, somebody else's, or refused
    /// before anything reached the port (left as it is).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// A linked BareMetalHost.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LinkedHost {
    /// Namespace of the host.
    pub namespace: String,
    /// Name of the host.
    pub name: String,
    /// Its `status.provisioning.state` (absent: not found, or not reported yet).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
}

/// A reference to the claim holding a server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ClaimRef {
    /// Name of the claim.
    pub name: String,
    /// Namespace of the claim.
    pub namespace: String,
}

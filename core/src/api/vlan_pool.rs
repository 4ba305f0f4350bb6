//! VLANPool: the infra team's grant of VLANs to tenant namespaces (cluster-scoped).
//! Pure data, no I/O; what a set of pools grants is decided in [`crate::decide::tenancy`].

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::pattern;

/// VLANs the infra team grants to tenant namespaces. A port serving a tenant may
/// carry only VLANs a pool grants to that tenant's namespace (on that port's
/// Switch); refused at `kubectl apply` by the admission webhook and again before
/// any device change. Several pools may serve one namespace. A VLAN granted to two
/// namespaces is allowed only when every pool granting it is `shared`; otherwise it
/// is granted to nobody until the overlap is removed.
#[derive(CustomResource, Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "patchbay.dev",
    version = "v1alpha1",
    kind = "VLANPool",
    plural = "vlanpools",
    status = "super::common::ConditionsStatus",
    shortname = "vlp",
    category = "patchbay",
    doc = "VLANs the infra team grants to tenant namespaces, optionally only on some Switches.",
    printcolumn(name = "VLANs", type_ = "string", json_path = ".spec.vlans"),
    printcolumn(name = "Namespaces", type_ = "string", json_path = ".spec.namespaces"),
    printcolumn(name = "Shared", type_ = "boolean", json_path = ".spec.shared"),
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
pub struct VLANPoolSpec {
    /// The VLANs granted, as a `vlanRange`: `200-299, 310`.
    #[schemars(length(min = 1, max = 512), pattern(pattern::VLAN_RANGE))]
    pub vlans: String,
    /// The namespaces these VLANs are granted to. A pool that is not `shared` serves
    /// exactly one namespace (two tenants on one VLAN reach each other).
    #[schemars(length(min = 1, max = 256))]
    pub namespaces: Vec<String>,
    /// The Switches (names in the infra namespace) where the grant holds; absent or
    /// empty: every Switch.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 1024))]
    pub switches: Vec<String>,
    /// True for a VLAN every listed namespace may carry (a common services
    /// network). Only shared pools may list several namespaces or overlap other
    /// pools.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub shared: bool,
    /// Link-aggregation group numbers granted with the VLANs, as a range (`1-16`):
    /// a tenant's configuration may set only a group granted to its namespace, so
    /// tenants never share one Switch's group numbers. A group is granted to one
    /// namespace only (shared pools grant none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 512), pattern(pattern::VLAN_RANGE))]
    pub lag_groups: Option<String>,
    /// The name devices give this pool's VLANs, whatever a tenant's configuration
    /// calls them (letters, digits, `_ . -`). Required for a shared pool: tenants do
    /// not name a VLAN they share.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 32), pattern(pattern::VLAN_NAME))]
    pub vlan_name: Option<String>,
    /// BGP ASNs granted with the VLANs, as ranges (`65100-65199, 4200000000`): a
    /// claim of a granted namespace gives its hosts only these (the first is the
    /// default). Granted to one namespace only (shared pools grant none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 512))]
    pub asns: Option<String>,
    /// IPv4 prefixes granted for BGP announcements (`192.0.2.0/26`): a claim's hosts
    /// may announce only prefixes inside them. Granted to one namespace only.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256))]
    pub prefixes: Vec<String>,
}

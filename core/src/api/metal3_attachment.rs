//! Metal3's HostNetworkAttachment (`metal3.io/v1alpha1`): what a host interface's
//! switch port carries, as the baremetal-operator describes it. patchbay's rendition
//! follows baremetal-operator v0.14.0-rc.0
//! (`apis/metal3.io/v1alpha1/hostnetworkattachment_types.go`): the same field names,
//! types and limits, written here. Not one of patchbay's CRDs: the
//! baremetal-operator installs it (the tests install the rendition in
//! `testbed/crds/`). Pure data, no I/O.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};

use super::metal3::metal3_resource;

/// A Metal3 HostNetworkAttachment.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HostNetworkAttachment {
    /// Standard object metadata.
    pub metadata: ObjectMeta,
    /// The switch port's mode and VLANs.
    #[serde(default)]
    pub spec: HostNetworkAttachmentSpec,
}

/// `spec`: every field upstream has, none it lacks.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HostNetworkAttachmentSpec {
    /// `access` (the default), `trunk` or `hybrid`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// The untagged VLAN (1–4094, required).
    #[serde(rename = "nativeVLAN", default)]
    pub native_vlan: i64,
    /// Tagged VLANs: each an ID (`"100"`) or a range (`"100-200"`).
    #[serde(
        rename = "allowedVLANs",
        default,
        skip_serializing_if = "Vec::is_empty"
    )]
    pub allowed_vlans: Vec<String>,
    /// The MTU (68–9216 upstream).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtu: Option<i64>,
}

metal3_resource!(
    HostNetworkAttachment,
    "HostNetworkAttachment",
    "hostnetworkattachments"
);

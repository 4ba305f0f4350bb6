//! Metal3's BareMetalHost, as far as patchbay reads it: a typed subset (its
//! metadata, `spec.bootMACAddress`, the proposed `spec.ports`, upstream's
//! `spec.networkInterfaces`, and
//! `status.provisioning.state` and `status.hardware`), so that patchbay works with the
//! upstream CRD as it is and keeps only these fields in memory. Not one of
//! patchbay's CRDs: the baremetal-operator installs it. Pure data, no I/O.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};

/// A Metal3 BareMetalHost (`metal3.io/v1alpha1`), the fields patchbay reads.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BareMetalHost {
    /// Standard object metadata.
    pub metadata: ObjectMeta,
    /// What patchbay reads of the spec.
    #[serde(default)]
    pub spec: BareMetalHostSpec,
    /// What patchbay reads of the status.
    #[serde(default)]
    pub status: BareMetalHostStatus,
}

/// The spec fields patchbay reads.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BareMetalHostSpec {
    /// The MAC address the host PXE-boots from.
    #[serde(
        default,
        rename = "bootMACAddress",
        skip_serializing_if = "Option::is_none"
    )]
    pub boot_mac_address: Option<String>,
    /// Seed 003's proposed `spec.ports` (absent from the upstream CRD, which prunes
    /// it): kept as written and checked entry by entry, so that one malformed entry
    /// never hides the host from the watch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ports: Option<serde_json::Value>,
    /// Upstream's `spec.networkInterfaces` (v0.14): each NIC by `name` or
    /// `macAddress`, its `hostNetworkAttachment` and optional `switchPort`. Kept as
    /// written and checked entry by entry, like `ports`.
    #[serde(
        default,
        rename = "networkInterfaces",
        skip_serializing_if = "Option::is_none"
    )]
    pub network_interfaces: Option<serde_json::Value>,
}

/// The status fields patchbay reads.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BareMetalHostStatus {
    /// `status.provisioning`.
    #[serde(default)]
    pub provisioning: Provisioning,
    /// `status.hardware`, the inspection's findings (CPU, RAM, NICs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hardware: Option<serde_json::Value>,
}

/// `status.provisioning`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Provisioning {
    /// The baremetal-operator's state (`registering`, `provisioned`, …); absent or
    /// empty before it has registered the host.
    #[serde(default)]
    pub state: String,
}

/// `kube::Resource` for a Metal3 type patchbay reads but does not define as a CRD
/// (`metal3.io/v1alpha1`, namespaced): its kind and plural.
macro_rules! metal3_resource {
    ($ty:ty, $kind:literal, $plural:literal) => {
        impl kube::Resource for $ty {
            type DynamicType = ();
            type Scope = k8s_openapi::NamespaceResourceScope;

            fn kind(_: &()) -> std::borrow::Cow<'_, str> {
                $kind.into()
            }

            fn group(_: &()) -> std::borrow::Cow<'_, str> {
                "metal3.io".into()
            }

            fn version(_: &()) -> std::borrow::Cow<'_, str> {
                "v1alpha1".into()
            }

            fn plural(_: &()) -> std::borrow::Cow<'_, str> {
                $plural.into()
            }

            fn meta(&self) -> &ObjectMeta {
                &self.metadata
            }

            fn meta_mut(&mut self) -> &mut ObjectMeta {
                &mut self.metadata
            }
        }
    };
}
pub(crate) use metal3_resource;

metal3_resource!(BareMetalHost, "BareMetalHost", "baremetalhosts");

/// A Metal3 HardwareData (`metal3.io/v1alpha1`): what inspection found on the
/// BareMetalHost of the same name and namespace. BMO v0.14 writes it beside the
/// host's `status.hardware`, which its next API version removes in its favour.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HardwareData {
    /// Standard object metadata.
    pub metadata: ObjectMeta,
    /// Its spec.
    #[serde(default)]
    pub spec: HardwareDataSpec,
}

/// `HardwareData.spec`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HardwareDataSpec {
    /// `spec.hardware`: the same shape as a host's `status.hardware` (patchbay
    /// reads its `nics`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hardware: Option<serde_json::Value>,
}

metal3_resource!(HardwareData, "HardwareData", "hardwaredata");

impl BareMetalHost {
    /// The status as the inspection readers take it (`{"hardware": …}`).
    pub fn status_json(&self) -> serde_json::Value {
        serde_json::json!({ "hardware": self.status.hardware })
    }
}

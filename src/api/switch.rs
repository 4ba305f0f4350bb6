//! Switch: one device's ports and the constraints on each (which SwitchPort maps to
//! which device port, allowed VLANs, trunking, disabled). Pure data, no I/O.

use std::collections::BTreeMap;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::{ConditionsStatus, pattern};

/// A network device and the ports patchbay may configure on it. The Switch controller
/// keeps one SwitchPort per entry of `ports`, owned by this Switch.
#[derive(CustomResource, Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "patchbay.dev",
    version = "v1alpha1",
    kind = "Switch",
    namespaced,
    status = "ConditionsStatus",
    shortname = "sw",
    category = "patchbay",
    doc = "A network device and the ports patchbay may configure on it, with each port's constraints.",
    printcolumn(name = "Provider", type_ = "string", json_path = ".spec.provider.name"),
    printcolumn(name = "Drift", type_ = "string", json_path = ".spec.driftPolicy"),
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
}

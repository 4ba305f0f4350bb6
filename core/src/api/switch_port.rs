//! SwitchPort: one port of a Switch and the configuration it should carry. Pure
//! data, no I/O.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::{ConfigurationRef, PortStatus};

/// One port of a Switch. Created and owned by the Switch controller (one per entry of
/// `Switch.spec.ports`); the infra team and the host lifecycle set `spec.configuration`
/// to link a SwitchPortConfiguration, and clear it to return the port to clean
/// (parked, with tenancy). Tenants never write ports: they reach them through
/// ServerClaims.
#[derive(CustomResource, Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "patchbay.dev",
    version = "v1alpha1",
    kind = "SwitchPort",
    namespaced,
    status = "PortStatus",
    shortname = "swp",
    category = "patchbay",
    doc = "One switch port and the configuration it should carry; status.state follows the port state machine.",
    // `kubectl get swp --field-selector spec.configuration.name=web`, and how the
    // blast-radius webhook finds a configuration's ports (Kubernetes >= 1.31).
    selectable = ".spec.configuration.name",
    printcolumn(name = "State", type_ = "string", json_path = ".status.state"),
    printcolumn(name = "Switch", type_ = "string", json_path = ".status.switch"),
    printcolumn(name = "Port", type_ = "string", json_path = ".status.devicePort"),
    printcolumn(
        name = "Configuration",
        type_ = "string",
        json_path = ".spec.configuration.name"
    ),
    printcolumn(
        name = "Host",
        type_ = "string",
        json_path = ".metadata.annotations.patchbay\\.dev/host"
    ),
    printcolumn(
        name = "Reason",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].reason"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct SwitchPortSpec {
    /// The SwitchPortConfiguration this port should carry. Absent: the port is
    /// cleaned and stays Idle.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub configuration: Option<ConfigurationRef>,
}

//! SmartNicPort and SmartNicConfiguration: a port on a SmartNIC's Open vSwitch bridge,
//! chained to the switch port it is cabled to (seed 003 story 3, seed 002). Pure
//! data, no I/O.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::{ConfigurationRef, PortStatus, pattern};
use super::configuration::{AclRuleSpec, PortSettingsSpec};
use super::rollout::{ConfigurationStatus, RolloutSpec};
use super::switch::ProviderRef;

/// A port on a SmartNIC's virtual switch. When configured, the SwitchPort named by
/// `nextPortRef` is configured with what the SmartNicConfiguration's
/// `nextConfigurationRef` names; the SmartNicPort is Active only when both are.
#[derive(CustomResource, Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "patchbay.dev",
    version = "v1alpha1",
    kind = "SmartNicPort",
    namespaced,
    status = "PortStatus",
    shortname = "snp",
    category = "patchbay",
    doc = "A port on a SmartNIC's Open vSwitch bridge, chained to the switch port it is cabled to.",
    // `kubectl get snp --field-selector spec.configuration.name=nic-a`, and how the
    // blast-radius webhook finds a configuration's ports (Kubernetes >= 1.31).
    selectable = ".spec.configuration.name",
    printcolumn(name = "State", type_ = "string", json_path = ".status.state"),
    printcolumn(name = "Provider", type_ = "string", json_path = ".status.provider"),
    printcolumn(name = "Port", type_ = "string", json_path = ".status.devicePort"),
    printcolumn(
        name = "Configuration",
        type_ = "string",
        json_path = ".spec.configuration.name"
    ),
    printcolumn(name = "Next", type_ = "string", json_path = ".spec.nextPortRef.name"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct SmartNicPortSpec {
    /// The ProviderSwitch (backend `ovsdb`, same namespace) of the SmartNIC.
    pub provider: ProviderRef,
    /// The port name on the SmartNIC's bridge.
    #[schemars(length(min = 1, max = 64), pattern(pattern::PORT_NAME))]
    pub port_name: String,
    /// MAC address of the host interface behind this bridge port (the VF or NIC the
    /// host sends from). Egress ACL rules match it as the destination; absent: the
    /// `mac` of the Server NIC cabled to this SmartNicPort, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(pattern::MAC))]
    pub host_mac: Option<String>,
    /// The SmartNicConfiguration this port should carry; absent: clean and Idle.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub configuration: Option<ConfigurationRef>,
    /// The next port on this link: the SwitchPort the SmartNIC is cabled to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_port_ref: Option<NextPortRef>,
}

/// A reference to the next port of a chain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct NextPortRef {
    /// Kind of the next port; only `SwitchPort` today.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<NextPortKind>,
    /// Name of the next port.
    #[schemars(length(min = 1, max = 253), pattern(pattern::OBJECT_NAME))]
    pub name: String,
    /// Namespace of the next port; defaults to the SmartNicPort's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63), pattern(pattern::OBJECT_NAME))]
    pub namespace: Option<String>,
}

/// Kinds a SmartNicPort can chain to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum NextPortKind {
    /// A SwitchPort.
    SwitchPort,
}

/// What a SmartNIC port should carry, and what its next port must carry.
#[derive(CustomResource, Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "patchbay.dev",
    version = "v1alpha1",
    kind = "SmartNicConfiguration",
    namespaced,
    status = "ConfigurationStatus",
    shortname = "snc",
    category = "patchbay",
    doc = "What a SmartNIC port should carry, and which SwitchPortConfiguration its next (switch) port needs.",
    printcolumn(name = "Untagged", type_ = "integer", json_path = ".spec.untaggedVLAN"),
    printcolumn(
        name = "Next",
        type_ = "string",
        json_path = ".spec.nextConfigurationRef.name"
    ),
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
        name = "SmartNICs",
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
pub struct SmartNicConfigurationSpec {
    /// ACL rules of the bridge port, first match wins, unmatched traffic allowed,
    /// stateless, ARP and neighbour discovery always pass (same rules as a
    /// SwitchPortConfiguration's `acl`). Needs the ProviderSwitch's
    /// `options.openflow`; egress rules need the host's MAC address.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256))]
    pub acl: Vec<AclRuleSpec>,
    /// VLANs, admin state, MTU and description of the bridge port (shared with
    /// SwitchPortConfiguration).
    #[serde(flatten)]
    pub port: PortSettingsSpec,
    /// The configuration the next port (the cabled SwitchPort) must carry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_configuration_ref: Option<NextConfigurationRef>,
    /// How an edit reaches the SmartNicPorts already carrying this configuration:
    /// in waves (a canary, then at most `maxUnavailable` ports at a time, at most
    /// `maxUnavailablePerSwitch` on one SmartNIC), each gated on its ports reading
    /// back Active — the bridge port and, where chained, its next SwitchPort — and
    /// on their hosts (Node Ready, `probe`). Absent: the operator's default policy.
    /// Not part of the configuration's revision: editing it moves no port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<RolloutSpec>,
}

impl SmartNicConfigurationSpec {
    /// SHA-256 of what a SmartNicPort carries from this spec (everything but
    /// `rollout`), with the kind: the revision's identity (a SmartNicConfiguration's
    /// ControllerRevision is never named like a SwitchPortConfiguration's of the
    /// same name, even when their specs read alike), and how a SmartNicPort's
    /// `status.configurationHash` begins.
    pub fn content_hash(&self) -> String {
        let spec = SmartNicConfigurationSpec {
            rollout: None,
            ..self.clone()
        };
        super::configuration_hash(&serde_json::json!({"SmartNicConfiguration": spec}))
    }
}

/// A reference to the configuration of the next port of a chain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct NextConfigurationRef {
    /// Kind of the configuration; only `SwitchPortConfiguration` today.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<NextConfigurationKind>,
    /// Name of the configuration.
    #[schemars(length(min = 1, max = 253), pattern(pattern::OBJECT_NAME))]
    pub name: String,
    /// Namespace of the configuration; defaults to the SmartNicConfiguration's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63), pattern(pattern::OBJECT_NAME))]
    pub namespace: Option<String>,
}

/// Kinds a next configuration can be.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum NextConfigurationKind {
    /// A SwitchPortConfiguration.
    SwitchPortConfiguration,
}

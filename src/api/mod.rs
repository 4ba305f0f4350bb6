//! The patchbay API, group `patchbay.dev`, version `v1alpha1`: custom resource types,
//! their CRDs and the configuration hash. Pure data, no I/O.

// kube's `#[kube(printcolumn(...))]` repeats `type_ = "string"` across columns, which
// clippy mistakes for a duplicated attribute.
#![allow(clippy::duplicated_attributes)]

pub mod claim;
pub mod common;
pub mod configuration;
pub mod metal3;
pub mod provider_switch;
pub mod quantity;
pub mod server;
pub mod smartnic;
pub mod switch;
pub mod switch_port;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;
use sha2::{Digest, Sha256};

pub use claim::{
    ClaimRole, ConfigurationKind, InventorySpec, NetworkConfiguration, NicHint, RoleAllocation,
    RoleRequirements, ServerClaim, ServerClaimSpec, ServerClaimStatus, TypedConfigurationRef,
};
pub use common::{ConditionsStatus, ConfigurationRef, PortState, PortStatus, SecretRef};
pub use configuration::{
    AclActionSpec, AclDirectionSpec, AclProtocolSpec, AclRuleSpec, AclType, LagModeSpec,
    LinkAggregationSpec, PortSettingsSpec, SwitchPortConfiguration, SwitchPortConfigurationSpec,
    VlanSpec,
};
pub use provider_switch::{
    Backend, BackendOptions, DeviceOs, HostKeyPin, ProviderSwitch, ProviderSwitchSpec,
};
pub use server::{
    HardwareSpec, NamespacedObjectRef, Server, ServerClaimBinding, ServerPhase, ServerSpec,
    ServerStatus,
};
pub use smartnic::{
    SmartNicConfiguration, SmartNicConfigurationSpec, SmartNicPort, SmartNicPortSpec,
};
pub use switch::{DriftPolicy, ProviderRef, Switch, SwitchPortDefinition, SwitchSpec};
pub use switch_port::{SwitchPort, SwitchPortSpec};

/// The API group.
pub const GROUP: &str = "patchbay.dev";
/// The API version.
pub const VERSION: &str = "v1alpha1";
/// Finalizer the controllers put on the objects whose deletion needs device cleanup.
pub const FINALIZER: &str = "patchbay.dev/cleanup";

/// Every CRD, in a stable order, with the file name it is committed under in `crds/`.
pub fn crds() -> Vec<(&'static str, CustomResourceDefinition)> {
    vec![
        ("providerswitch.yaml", ProviderSwitch::crd()),
        ("switch.yaml", Switch::crd()),
        ("switchport.yaml", SwitchPort::crd()),
        (
            "switchportconfiguration.yaml",
            SwitchPortConfiguration::crd(),
        ),
        ("smartnicport.yaml", SmartNicPort::crd()),
        ("smartnicconfiguration.yaml", SmartNicConfiguration::crd()),
        ("server.yaml", Server::crd()),
        ("serverclaim.yaml", ServerClaim::crd()),
    ]
}

/// The structural schema (`openAPIV3Schema` of the served version) the CRD of
/// `kind` publishes, as JSON; `None` for a kind that is not ours.
pub fn published_schema(kind: &str) -> Option<&'static serde_json::Value> {
    static SCHEMAS: std::sync::OnceLock<std::collections::BTreeMap<String, serde_json::Value>> =
        std::sync::OnceLock::new();
    SCHEMAS
        .get_or_init(|| {
            crds()
                .into_iter()
                .filter_map(|(_, crd)| {
                    let version = crd.spec.versions.first()?;
                    let schema = version.schema.as_ref()?.open_api_v3_schema.as_ref()?;
                    Some((
                        crd.spec.names.kind.clone(),
                        serde_json::to_value(schema).ok()?,
                    ))
                })
                .collect()
        })
        .get(kind)
}

/// Renders one CRD as the YAML committed in `crds/`.
pub fn crd_yaml(crd: &CustomResourceDefinition) -> String {
    // Serialising a CRD cannot fail: it is plain data with string keys.
    serde_yaml::to_string(crd).unwrap_or_default()
}

/// SHA-256 (hex) of a configuration spec's canonical JSON. Stored in port status so an
/// edited configuration is noticed even when the reference did not change.
pub fn configuration_hash<T: serde::Serialize>(spec: &T) -> String {
    let json = serde_json::to_vec(spec).unwrap_or_default();
    let digest = Sha256::digest(&json);
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shared_port_settings_serialise_in_place_so_hashes_stay_as_they_were() {
        // A spec stored before the shared fields moved into PortSettingsSpec: its
        // serialised form (and so its hash in every port's status) is unchanged, so
        // an upgrade does not reconfigure every port.
        let stored = r#"{"acl":[{"type":"ipv4","action":"deny","protocol":"tcp","dstPortRange":"22"}],"untaggedVLAN":100,"vlans":[{"id":101,"name":"web"}],"disabled":true,"mtu":9000,"description":"web","linkAggregation":{"group":7}}"#;
        let spec: SwitchPortConfigurationSpec = serde_json::from_str(stored).unwrap();
        assert_eq!(spec.port.untagged_vlan, Some(100));
        assert_eq!(serde_json::to_string(&spec).unwrap(), stored);
        let snic = r#"{"untaggedVLAN":10,"vlans":[{"id":20}],"mtu":1500,"nextConfigurationRef":{"name":"web"}}"#;
        let spec: SmartNicConfigurationSpec = serde_json::from_str(snic).unwrap();
        assert_eq!(serde_json::to_string(&spec).unwrap(), snic);
    }
}

//! Metal3's BareMetalSwitch (`metal3.io/v1alpha1`, short name `bms`): a top-of-rack
//! switch as the baremetal-operator describes it for Ironic's networking service.
//! patchbay's rendition follows baremetal-operator v0.14.0-rc.0
//! (`apis/metal3.io/v1alpha1/baremetalswitch_types.go`): the same field names,
//! types and limits, written here. Not one of patchbay's CRDs: the
//! baremetal-operator installs it (the tests install the rendition in
//! `testbed/crds/`). Pure data, no I/O.
//!
//! Upstream's open PR #3470 renames the host side's `SwitchPort` and adds status
//! fields to the host; it does not change this type's spec.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta};
use serde::{Deserialize, Serialize};

/// A Metal3 BareMetalSwitch.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BareMetalSwitch {
    /// Standard object metadata.
    pub metadata: ObjectMeta,
    /// What the switch is and how to reach it.
    #[serde(default)]
    pub spec: BareMetalSwitchSpec,
    /// Its conditions (`Valid`).
    #[serde(default, skip_serializing_if = "BareMetalSwitchStatus::is_empty")]
    pub status: BareMetalSwitchStatus,
}

/// `spec`: every field upstream has, none it lacks.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BareMetalSwitchSpec {
    /// The switch's management address: an IP address or a host name (required).
    pub address: String,
    /// The management interface's MAC (`aa:bb:cc:dd:ee:ff`, required): what a host's
    /// LLDP and `switchPort.switchID` name the switch by.
    #[serde(rename = "macAddress")]
    pub mac_address: String,
    /// The driver; upstream knows only `generic-switch` (its default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver: Option<String>,
    /// networking-generic-switch's device type (`netmiko_cisco_ios`, …; required):
    /// what patchbay maps to a backend ([`crate::decide::device_types`]).
    pub device_type: String,
    /// The credentials Secret (`username`, and `password` or `ssh-privatekey`;
    /// optional `admin-password`); its namespace defaults to the switch's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials: Option<SecretReference>,
    /// The management port (1–65535); the device type's default when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<i32>,
    /// Skip TLS certificate checks (HTTPS device types only).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub disable_certificate_verification: bool,
}

/// A Secret by name and namespace (core/v1 SecretReference: both optional).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SecretReference {
    /// The Secret's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Its namespace; the BareMetalSwitch's when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

/// `status`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BareMetalSwitchStatus {
    /// Conditions by type; upstream defines `Valid`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

impl BareMetalSwitchStatus {
    fn is_empty(&self) -> bool {
        self.conditions.is_empty()
    }
}

super::metal3::metal3_resource!(BareMetalSwitch, "BareMetalSwitch", "baremetalswitches");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_upstream_example_reads_and_writes_back_the_same() {
        let doc = serde_json::json!({
            "apiVersion": "metal3.io/v1alpha1", "kind": "BareMetalSwitch",
            "metadata": {"name": "tor-1", "namespace": "infra"},
            "spec": {"address": "192.0.2.10", "macAddress": "aa:bb:cc:00:00:01",
                     "driver": "generic-switch", "deviceType": "netmiko_cisco_ios",
                     "credentials": {"name": "tor-1", "namespace": "infra"}, "port": 22}
        });
        let bms: BareMetalSwitch = serde_json::from_value(doc.clone()).unwrap();
        assert_eq!(bms.spec.device_type, "netmiko_cisco_ios");
        assert_eq!(bms.spec.port, Some(22));
        let mut back = serde_json::to_value(&bms).unwrap();
        back["apiVersion"] = doc["apiVersion"].clone();
        back["kind"] = doc["kind"].clone();
        assert_eq!(back, doc);
    }
}

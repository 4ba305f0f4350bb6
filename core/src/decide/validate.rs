//! The validator: pure checks of every patchbay object, used by the controllers and by
//! `patchbay validate`. No I/O.
//!
//! Each error names the field path (`spec.vlans[1].id`) and the reason. Values are
//! checked with the strict grammar of [`patchbay_model::values`], so a
//! configuration that passes can be turned into a [`DesiredPort`] that no backend can
//! render into an injected command. The schema in `crds/` refuses the obvious cases at
//! the API server; this layer is exact and also checks what a schema cannot: a
//! configuration against the constraints of the port it is linked to (VLAN range,
//! trunking allowed, port disabled) and against what the device's backend can do.

pub mod claim;
mod configuration;
pub mod manifests;
mod provider_switch;
mod server;
mod smartnic;
mod switch;
pub mod unknown_fields;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use patchbay_model::values::{
    BridgeName, Cidr, Description, DeviceAddress, L4PortRange, LagGroup, MacAddress, Mtu, PortName,
    ValueError, VlanId, VlanName, VlanSet, excerpt,
};
use patchbay_model::{
    AclAction, AclDirection, AclProtocol, AclRule, AdminState, Capabilities, Capability,
    DesiredPort, IpVersion, LagMembership, LagMode, VlanMode,
};

use crate::api::{
    AclActionSpec, AclDirectionSpec, AclProtocolSpec, AclRuleSpec, AclType, Backend, DeviceOs,
    LagModeSpec, PortSettingsSpec, ProviderSwitchSpec, ServerSpec, SmartNicConfigurationSpec,
    SmartNicPortSpec, SwitchPortConfigurationSpec, SwitchPortDefinition, SwitchSpec,
};

pub use configuration::{
    LagPeer, PortContext, capability_errors, capability_field, configuration_to_desired,
    desired_for_port, has_egress_rules, lag_members, validate_configuration, with_host_mac,
};
pub use provider_switch::{backend_supports, port_device_role, validate_provider};
pub use server::validate_server;
pub use smartnic::{smartnic_configuration_to_desired, validate_smartnic_port};
pub use switch::validate_switch;

/// One problem: which field, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// Path of the offending field, e.g. `spec.vlans[1].id`.
    pub path: String,
    /// What is wrong with it.
    pub reason: String,
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.reason)
    }
}

/// Decodes a manifest (or part of one) into `T`; a value of the wrong type or an
/// unknown enum word is a [`FieldError`] naming the field's path
/// (`spec.acl[0].protocol`), as the API server names it.
pub fn decode<'de, T, D>(value: D) -> Result<T, FieldError>
where
    T: serde::Deserialize<'de>,
    D: serde::Deserializer<'de>,
    D::Error: fmt::Display,
{
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        FieldError {
            path: if path == "." {
                "(document)".into()
            } else {
                path
            },
            reason: e.into_inner().to_string().chars().take(300).collect(),
        }
    })
}

/// Every problem found in one object (never empty).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ValidationErrors(pub Vec<FieldError>);

impl fmt::Display for ValidationErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.0.iter().map(ToString::to_string).collect();
        f.write_str(&parts.join("; "))
    }
}

impl ValidationErrors {
    /// The first error's path (used for conditions that name one field).
    pub fn first_path(&self) -> &str {
        self.0.first().map(|e| e.path.as_str()).unwrap_or("")
    }
}

/// Collects errors while walking an object.
#[derive(Default)]
struct Errors(Vec<FieldError>);

impl Errors {
    fn push(&mut self, path: impl Into<String>, reason: impl Into<String>) {
        self.0.push(FieldError {
            path: path.into(),
            reason: reason.into(),
        });
    }

    /// Records a value error at `path` and returns the value if it parsed.
    fn check<T>(&mut self, path: impl Into<String>, r: Result<T, ValueError>) -> Option<T> {
        match r {
            Ok(v) => Some(v),
            Err(e) => {
                self.push(path, e.0);
                None
            }
        }
    }

    fn finish<T>(self, value: impl FnOnce() -> T) -> Result<T, ValidationErrors> {
        if self.0.is_empty() {
            Ok(value())
        } else {
            Err(ValidationErrors(self.0))
        }
    }
}

/// A Kubernetes object name (DNS-1123 subdomain, at most 253 characters).
fn object_name(errors: &mut Errors, path: &str, name: &str) {
    let ok = !name.is_empty()
        && name.len() <= 253
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric());
    if !ok {
        errors.push(
            path,
            format!(
                "{:?} is not a valid object name (lower-case letters, digits, '-' and '.', \
                 starting and ending with a letter or digit, at most 253 characters)",
                excerpt(name)
            ),
        );
    }
}

fn optional_namespace(errors: &mut Errors, path: &str, ns: Option<&String>) {
    if let Some(ns) = ns {
        if ns.len() > 63 || ns.contains('.') {
            errors.push(
                path,
                format!("{:?} is not a valid namespace name", excerpt(ns)),
            );
        } else {
            object_name(errors, path, ns);
        }
    }
}

/// The serde spelling of an enum value (`ssh`, `ios`).
fn json_word<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_value(v)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

fn mac(errors: &mut Errors, path: &str, value: &str) {
    let parts: Vec<&str> = value.split(':').collect();
    let ok = parts.len() == 6
        && parts
            .iter()
            .all(|p| p.len() == 2 && p.bytes().all(|b| b.is_ascii_hexdigit()));
    if !ok {
        errors.push(
            path,
            format!(
                "{:?} is not a MAC address (six colon-separated hex pairs)",
                excerpt(value)
            ),
        );
    }
}

fn token(errors: &mut Errors, path: &str, value: &str) {
    let ok = !value.is_empty()
        && value.len() <= 63
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
        && value.starts_with(|c: char| c.is_ascii_alphanumeric())
        && value.ends_with(|c: char| c.is_ascii_alphanumeric());
    if !ok {
        errors.push(
            path,
            format!(
                "{:?} must be 1-63 letters, digits, '_', '.' or '-', starting and ending \
                 with a letter or digit",
                excerpt(value)
            ),
        );
    }
}

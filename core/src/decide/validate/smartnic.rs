//! Validation of smartNIC ports and their configurations (Open vSwitch bridge ports). Pure.

use super::configuration::{acl_rules, port_settings};
use super::*;

/// Validates a SmartNicConfiguration and builds the desired state of the bridge port.
pub fn smartnic_configuration_to_desired(
    spec: &SmartNicConfigurationSpec,
    port: PortName,
) -> Result<DesiredPort, ValidationErrors> {
    let mut errors = Errors::default();
    let mut desired = port_settings(&mut errors, &spec.port, port);
    desired.acl = acl_rules(&mut errors, &spec.acl);
    if let Some(next) = &spec.next_configuration_ref {
        object_name(&mut errors, "spec.nextConfigurationRef.name", &next.name);
        optional_namespace(
            &mut errors,
            "spec.nextConfigurationRef.namespace",
            next.namespace.as_ref(),
        );
    }
    errors.finish(|| desired)
}

/// Validates a SmartNicPort.
pub fn validate_smartnic_port(spec: &SmartNicPortSpec) -> Result<(), ValidationErrors> {
    let mut errors = Errors::default();
    object_name(&mut errors, "spec.provider.name", &spec.provider.name);
    errors.check("spec.portName", PortName::parse(&spec.port_name));
    if let Some(m) = &spec.host_mac {
        mac(&mut errors, "spec.hostMac", m);
    }
    if let Some(c) = &spec.configuration {
        object_name(&mut errors, "spec.configuration.name", &c.name);
        optional_namespace(
            &mut errors,
            "spec.configuration.namespace",
            c.namespace.as_ref(),
        );
    }
    if let Some(n) = &spec.next_port_ref {
        object_name(&mut errors, "spec.nextPortRef.name", &n.name);
        optional_namespace(
            &mut errors,
            "spec.nextPortRef.namespace",
            n.namespace.as_ref(),
        );
    }
    errors.finish(|| ())
}

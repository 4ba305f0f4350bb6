//! Validation of servers: MACs, site, BMC address, NIC names, references. Pure.

use super::*;

/// Validates a Server: MACs, site, BMC address, NIC names unique, references.
pub fn validate_server(spec: &ServerSpec) -> Result<(), ValidationErrors> {
    let mut errors = Errors::default();
    mac(&mut errors, "spec.bootMac", &spec.boot_mac);
    token(&mut errors, "spec.site", &spec.site);
    let addr = &spec.bmc.address;
    let host_part = addr
        .split_once("://")
        .map_or(addr.as_str(), |(_, rest)| rest);
    if addr.is_empty()
        || addr.len() > 512
        || addr.chars().any(|c| c.is_whitespace() || c.is_control())
        || host_part.is_empty()
    {
        errors.push(
            "spec.bmc.address",
            format!("{:?} is not a BMC address", excerpt(addr)),
        );
    }
    object_name(
        &mut errors,
        "spec.bmc.credentialsSecretRef.name",
        &spec.bmc.credentials_secret_ref.name,
    );
    object_name(
        &mut errors,
        "spec.bmc.credentialsSecretRef.namespace",
        &spec.bmc.credentials_secret_ref.namespace,
    );
    if let Some(q) = spec.hardware.as_ref().and_then(|h| h.memory.as_ref())
        && let Err(e) = crate::api::quantity::parse_quantity(&q.0)
    {
        errors.push("spec.hardware.memory", e);
    }
    if let Some(cpus) = spec.hardware.as_ref().and_then(|h| h.cpus)
        && cpus < 1
    {
        errors.push(
            "spec.hardware.cpus",
            format!("{cpus}: a server has at least 1 CPU"),
        );
    }
    if let Some(a) = &spec.host_address {
        errors.check("spec.hostAddress", DeviceAddress::parse(a));
    }
    let mut names = BTreeSet::new();
    for (i, nic) in spec.nics.iter().enumerate() {
        let path = format!("spec.nics[{i}]");
        token(&mut errors, &format!("{path}.name"), &nic.name);
        if !names.insert(nic.name.as_str()) {
            errors.push(
                format!("{path}.name"),
                format!("NIC {:?} is listed twice", excerpt(&nic.name)),
            );
        }
        if let Some(m) = &nic.mac {
            mac(&mut errors, &format!("{path}.mac"), m);
        }
        if let Some(p) = &nic.port {
            object_name(&mut errors, &format!("{path}.port.name"), &p.name);
            object_name(&mut errors, &format!("{path}.port.namespace"), &p.namespace);
        }
        for (field, r) in [
            ("provisioningConfiguration", &nic.provisioning_configuration),
            ("configuration", &nic.configuration),
        ] {
            if let Some(r) = r {
                object_name(&mut errors, &format!("{path}.{field}.name"), &r.name);
                optional_namespace(
                    &mut errors,
                    &format!("{path}.{field}.namespace"),
                    r.namespace.as_ref(),
                );
            }
        }
    }
    errors.finish(|| ())
}

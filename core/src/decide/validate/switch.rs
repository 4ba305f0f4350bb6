//! Validation of switches: the port map (device names, VLAN ranges, constraints). Pure.

use super::*;

/// Validates a Switch: port keys are object names, device port names follow the
/// grammar and are not used twice, VLAN ranges parse.
pub fn validate_switch(spec: &SwitchSpec) -> Result<(), ValidationErrors> {
    let mut errors = Errors::default();
    object_name(&mut errors, "spec.provider.name", &spec.provider.name);
    if spec.ports.len() > 1024 {
        errors.push(
            "spec.ports",
            format!("{} ports; at most 1024 are allowed", spec.ports.len()),
        );
    }
    let mut device_ports: BTreeMap<&str, &str> = BTreeMap::new();
    for (key, def) in &spec.ports {
        let path = format!("spec.ports[{:?}]", excerpt(key));
        object_name(&mut errors, &path, key);
        if errors
            .check(format!("{path}.name"), PortName::parse(&def.name))
            .is_some()
            && let Some(first) = device_ports.insert(&def.name, key)
        {
            errors.push(
                format!("{path}.name"),
                format!(
                    "device port {:?} is already used by spec.ports[{first:?}]",
                    def.name
                ),
            );
        }
        if let Some(r) = &def.vlan_range {
            errors.check(format!("{path}.vlanRange"), VlanSet::parse(r));
        }
    }
    if let Err(bgp) = crate::decide::bgp::switch_bgp(spec) {
        for (field, why) in bgp {
            errors.push(field, why);
        }
    }
    if let Some(b) = &spec.bgp {
        object_name(&mut errors, "spec.bgp.speaker.name", &b.speaker.name);
    }
    for (field, why) in crate::decide::rollout::policy_errors(spec.rollout.as_ref()) {
        errors.push(field, why);
    }
    if let Some(n) = &spec.neighbors {
        if n.providers.is_empty() || n.providers.len() > 4 {
            errors.push("spec.neighbors.providers", "name 1 to 4 ProviderSwitches");
        }
        for (i, p) in n.providers.iter().enumerate() {
            object_name(
                &mut errors,
                &format!("spec.neighbors.providers[{i}].name"),
                &p.name,
            );
        }
        if let Some(c) = &n.parking_configuration {
            object_name(&mut errors, "spec.neighbors.parkingConfiguration", c);
        }
        for (field, value) in [
            ("spec.neighbors.intervalSeconds", n.interval_seconds),
            ("spec.neighbors.ageOutSeconds", n.age_out_seconds),
        ] {
            if let Some(s) = value
                && !(5..=3600).contains(&s)
            {
                errors.push(field, format!("{s} is outside 5-3600"));
            }
        }
    }
    errors.finish(|| ())
}

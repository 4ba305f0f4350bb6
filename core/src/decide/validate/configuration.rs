//! Validation of switch port configurations: a SwitchPortConfiguration (settings, ACL rules, link aggregation) checked and turned into a device-level [`DesiredPort`], against the port it is linked to and what the backend can configure; a group's members checked together. Pure.

use super::*;

/// Checks the port settings both configuration kinds share and builds the
/// device-level state (without ACL and LAG).
pub(super) fn port_settings(
    errors: &mut Errors,
    s: &PortSettingsSpec,
    port: PortName,
) -> DesiredPort {
    let untagged = s
        .untagged_vlan
        .and_then(|v| errors.check("spec.untaggedVLAN", VlanId::from_i64(v)));
    let mut tagged = VlanSet::new();
    let mut names = BTreeMap::new();
    let mut seen: BTreeMap<i64, usize> = BTreeMap::new();
    for (i, vlan) in s.vlans.iter().enumerate() {
        let path = format!("spec.vlans[{i}]");
        if let Some(first) = seen.insert(vlan.id, i) {
            errors.push(
                format!("{path}.id"),
                format!("VLAN {} is already listed at spec.vlans[{first}]", vlan.id),
            );
            continue;
        }
        if s.untagged_vlan == Some(vlan.id) {
            errors.push(
                format!("{path}.id"),
                format!(
                    "VLAN {} is already the untaggedVLAN; list only tagged VLANs here",
                    vlan.id
                ),
            );
            continue;
        }
        let Some(id) = errors.check(format!("{path}.id"), VlanId::from_i64(vlan.id)) else {
            continue;
        };
        tagged.insert(id);
        if let Some(name) = &vlan.name
            && let Some(name) = errors.check(format!("{path}.name"), VlanName::parse(name))
        {
            names.insert(id, name);
        }
    }
    let vlans = match (untagged, tagged.is_empty()) {
        (None, true) => VlanMode::Unconfigured,
        (Some(vlan), true) => VlanMode::Access { vlan },
        (native, false) => VlanMode::Trunk {
            native,
            allowed: tagged,
        },
    };
    let mtu = s.mtu.and_then(|m| errors.check("spec.mtu", Mtu::new(m)));
    let description = s
        .description
        .as_ref()
        .and_then(|d| errors.check("spec.description", Description::parse(d)));
    DesiredPort {
        port,
        admin: if s.disabled {
            AdminState::Down
        } else {
            AdminState::Up
        },
        vlans,
        vlan_names: names,
        mtu,
        description,
        acl: Vec::new(),
        lag: None,
        lag_members: BTreeSet::new(),
        host_mac: None,
    }
}

pub(super) fn acl_rules(errors: &mut Errors, rules: &[AclRuleSpec]) -> Vec<AclRule> {
    if rules.len() > 256 {
        errors.push(
            "spec.acl",
            format!("{} rules; at most 256 are allowed", rules.len()),
        );
    }
    rules
        .iter()
        .enumerate()
        .filter_map(|(i, r)| acl_rule(errors, i, r))
        .collect()
}

/// Whether any of `rules` is an egress rule (which some backends render against the
/// host's MAC address).
pub fn has_egress_rules(rules: &[AclRuleSpec]) -> bool {
    rules
        .iter()
        .any(|r| r.direction == Some(AclDirectionSpec::Egress))
}

/// The host NIC's MAC for `desired` (the cabled Server NIC's, or the SmartNicPort's
/// own), and the error for each egress rule a backend that matches egress by that
/// MAC cannot render without it. `source` says where the MAC would come from.
pub fn with_host_mac(
    mut desired: DesiredPort,
    mac: Option<&str>,
    caps: &Capabilities,
    source: &str,
) -> Result<DesiredPort, ValidationErrors> {
    let mut errors = Errors::default();
    desired.host_mac = mac.and_then(|m| MacAddress::parse(m).ok());
    if caps.egress_needs_host_mac() && desired.host_mac.is_none() {
        for (i, rule) in desired.acl.iter().enumerate() {
            if rule.direction == AclDirection::Egress {
                errors.push(
                    format!("spec.acl[{i}].direction"),
                    format!(
                        "egress rules on this device match the MAC address of the host \
                         behind the port, and none is known: {source}"
                    ),
                );
            }
        }
    }
    errors.finish(|| desired)
}

pub(super) fn acl_rule(errors: &mut Errors, i: usize, rule: &AclRuleSpec) -> Option<AclRule> {
    let path = format!("spec.acl[{i}]");
    let before = errors.0.len();
    let ip_version = match rule.type_ {
        AclType::Ipv4 => IpVersion::V4,
        AclType::Ipv6 => IpVersion::V6,
    };
    let mut cidr = |field: &str, value: &Option<String>| -> Option<Cidr> {
        let value = value.as_ref()?;
        let c = errors.check(format!("{path}.{field}"), Cidr::parse(value))?;
        if c.is_ipv4() != (ip_version == IpVersion::V4) {
            errors.push(
                format!("{path}.{field}"),
                format!(
                    "{c} is not an {} network but the rule's type is {}",
                    if ip_version == IpVersion::V4 {
                        "IPv4"
                    } else {
                        "IPv6"
                    },
                    if ip_version == IpVersion::V4 {
                        "ipv4"
                    } else {
                        "ipv6"
                    },
                ),
            );
            return None;
        }
        Some(c)
    };
    // A /0 network is "any": stored as absent, so every backend renders and reads
    // back the same rule.
    let src = cidr("src", &rule.src).filter(|c| c.prefix() > 0);
    let dst = cidr("dst", &rule.dst).filter(|c| c.prefix() > 0);
    let protocol = match rule.protocol {
        AclProtocolSpec::Tcp => AclProtocol::Tcp,
        AclProtocolSpec::Udp => AclProtocol::Udp,
        AclProtocolSpec::Icmp => AclProtocol::Icmp,
        AclProtocolSpec::All => AclProtocol::All,
    };
    let mut ports = |field: &str, value: &Option<String>| -> Option<L4PortRange> {
        let value = value.as_ref()?;
        if !matches!(protocol, AclProtocol::Tcp | AclProtocol::Udp) {
            errors.push(
                format!("{path}.{field}"),
                "port ranges need protocol tcp or udp",
            );
            return None;
        }
        errors.check(format!("{path}.{field}"), L4PortRange::parse(value))
    };
    let src_ports = ports("srcPortRange", &rule.src_port_range);
    let dst_ports = ports("dstPortRange", &rule.dst_port_range);
    if errors.0.len() != before {
        return None;
    }
    Some(AclRule {
        ip_version,
        action: match rule.action {
            AclActionSpec::Allow => AclAction::Allow,
            AclActionSpec::Deny => AclAction::Deny,
        },
        protocol,
        direction: match rule.direction {
            None | Some(AclDirectionSpec::Ingress) => AclDirection::Ingress,
            Some(AclDirectionSpec::Egress) => AclDirection::Egress,
        },
        src,
        src_ports,
        dst,
        dst_ports,
    })
}

/// Validates a SwitchPortConfiguration on its own and builds the desired state of
/// `port`.
pub fn configuration_to_desired(
    spec: &SwitchPortConfigurationSpec,
    port: PortName,
) -> Result<DesiredPort, ValidationErrors> {
    let mut errors = Errors::default();
    let mut desired = port_settings(&mut errors, &spec.port, port);
    desired.acl = acl_rules(&mut errors, &spec.acl);
    if let Some(lag) = &spec.link_aggregation {
        let group = errors.check("spec.linkAggregation.group", LagGroup::new(lag.group));
        let mode = match lag.mode {
            None | Some(LagModeSpec::Active) => LagMode::Active,
            Some(LagModeSpec::Passive) => LagMode::Passive,
            Some(LagModeSpec::Static) => LagMode::Static,
        };
        desired.lag = group.map(|group| LagMembership { group, mode });
        if !spec.acl.is_empty() {
            errors.push(
                "spec.acl",
                "ACLs on link-aggregation members are not supported: a configuration has \
                 either acl or linkAggregation",
            );
        }
    }
    errors.finish(|| desired)
}

/// Validates a SwitchPortConfiguration on its own (no port context).
pub fn validate_configuration(spec: &SwitchPortConfigurationSpec) -> Result<(), ValidationErrors> {
    // Any valid port name will do: only the configuration's own fields are checked.
    let placeholder = PortName::parse("port").map_err(|e| {
        ValidationErrors(vec![FieldError {
            path: String::new(),
            reason: e.0,
        }])
    })?;
    configuration_to_desired(spec, placeholder).map(|_| ())
}

/// Where a configuration is going: the Switch port it is linked to and, when known,
/// what the device's backend can do.
pub struct PortContext<'a> {
    /// Name of the Switch object.
    pub switch: &'a str,
    /// Key of the port in `Switch.spec.ports` (the SwitchPort name).
    pub port_key: &'a str,
    /// The port's definition in the Switch.
    pub definition: &'a SwitchPortDefinition,
    /// What the backend can configure; `None` skips the capability check.
    pub capabilities: Option<&'a Capabilities>,
}

/// One error per capability `desired` needs and `caps` lacks, at the field that asks
/// for it: "`who` cannot configure …", with `why` the device lacks it where known.
pub fn capability_errors(
    desired: &DesiredPort,
    caps: &Capabilities,
    who: &str,
    why: impl Fn(Capability) -> Option<&'static str>,
) -> Vec<FieldError> {
    caps.missing_for(desired)
        .into_iter()
        .map(|cap| FieldError {
            path: capability_field(cap).into(),
            reason: match why(cap) {
                Some(why) => format!("{who} cannot configure {cap} ({why})"),
                None => format!("{who} cannot configure {cap}"),
            },
        })
        .collect()
}

/// The configuration field that needs `cap` (a configuration needing a capability
/// the device lacks is refused naming it).
pub fn capability_field(cap: Capability) -> &'static str {
    match cap {
        Capability::AccessVlan | Capability::NativeVlan => "spec.untaggedVLAN",
        Capability::Trunk => "spec.vlans",
        Capability::Disable => "spec.disabled",
        Capability::Description => "spec.description",
        Capability::Mtu => "spec.mtu",
        Capability::Acl => "spec.acl",
        Capability::LinkAggregation => "spec.linkAggregation",
        Capability::LacpPassive | Capability::StaticLag => "spec.linkAggregation.mode",
    }
}

/// Validates a configuration against the port it is linked to and returns the desired
/// device state. Nothing may reach a device unless this passes.
///
/// Refused: a disabled port; any VLAN outside the port's `vlanRange`; tagged VLANs on a
/// port with `trunkDisable`; anything the backend cannot configure.
pub fn desired_for_port(
    spec: &SwitchPortConfigurationSpec,
    ctx: &PortContext<'_>,
) -> Result<DesiredPort, ValidationErrors> {
    let mut errors = Errors::default();
    let def = ctx.definition;
    let where_ = format!("port {:?} of Switch {:?}", ctx.port_key, ctx.switch);
    if def.disabled {
        errors.push(
            format!("Switch.spec.ports[{:?}].disabled", ctx.port_key),
            format!("{where_} is disabled; it accepts no configuration"),
        );
        return Err(ValidationErrors(errors.0));
    }
    let port = match PortName::parse(&def.name) {
        Ok(p) => p,
        Err(e) => {
            errors.push(format!("Switch.spec.ports[{:?}].name", ctx.port_key), e.0);
            return Err(ValidationErrors(errors.0));
        }
    };
    let desired = configuration_to_desired(spec, port)?;
    let allowed = match &def.vlan_range {
        None => None,
        Some(r) => match VlanSet::parse(r) {
            Ok(set) => Some(set),
            Err(e) => {
                errors.push(
                    format!("Switch.spec.ports[{:?}].vlanRange", ctx.port_key),
                    e.0,
                );
                return errors.finish(|| desired);
            }
        },
    };
    let range_text = def.vlan_range.as_deref().unwrap_or("");
    if let Some(allowed) = &allowed {
        if let Some(v) = spec.port.untagged_vlan
            && !VlanId::from_i64(v).is_ok_and(|v| allowed.contains(v))
        {
            errors.push(
                "spec.untaggedVLAN",
                format!("VLAN {v} is outside the vlanRange {range_text:?} of {where_}"),
            );
        }
        for (i, vlan) in spec.port.vlans.iter().enumerate() {
            if !VlanId::from_i64(vlan.id).is_ok_and(|v| allowed.contains(v)) {
                errors.push(
                    format!("spec.vlans[{i}].id"),
                    format!(
                        "VLAN {} is outside the vlanRange {range_text:?} of {where_}",
                        vlan.id
                    ),
                );
            }
        }
    }
    if def.trunk_disable && !spec.port.vlans.is_empty() {
        errors.push(
            "spec.vlans",
            format!("{where_} does not allow trunking (trunkDisable); tagged VLANs are refused"),
        );
    }
    if let Some(caps) = ctx.capabilities {
        let who = format!("the device behind Switch {:?}", ctx.switch);
        errors
            .0
            .extend(capability_errors(&desired, caps, &who, |_| None));
    }
    errors.finish(|| desired)
}

/// A SwitchPort as the link-aggregation check sees it: where it is, what it is
/// cabled to and the configuration it carries.
#[derive(Debug, Clone)]
pub struct LagPeer<'a> {
    /// The SwitchPort's name.
    pub name: &'a str,
    /// Its Switch.
    pub switch: &'a str,
    /// Its device port, when the Switch defines it.
    pub device_port: Option<PortName>,
    /// The Server whose NIC is cabled to it, when a Server says so.
    pub server: Option<&'a str>,
    /// The configuration it carries.
    pub spec: &'a SwitchPortConfigurationSpec,
}

/// The top-level fields in which two members' configurations differ, leaving out
/// what stays each member's own (description, disabled).
pub(super) fn group_setting_differences(
    a: &SwitchPortConfigurationSpec,
    b: &SwitchPortConfigurationSpec,
) -> Vec<String> {
    let shared = |s: &SwitchPortConfigurationSpec| {
        let mut v = serde_json::to_value(s).unwrap_or_default();
        if let Some(m) = v.as_object_mut() {
            m.remove("description");
            m.remove("disabled");
        }
        v
    };
    let (a, b) = (shared(a), shared(b));
    let empty = serde_json::Map::new();
    let (a, b) = (
        a.as_object().unwrap_or(&empty),
        b.as_object().unwrap_or(&empty),
    );
    let keys: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    keys.into_iter()
        .filter(|k| a.get(*k) != b.get(*k))
        .cloned()
        .collect()
}

/// Checks a link-aggregation member against the other SwitchPorts (`peers`, any
/// Switch, this port may be among them) and returns the device ports of its group's
/// members, its own included.
///
/// A group is the ports of one Switch whose configurations name the same
/// `linkAggregation.group` and that are cabled to the same Server (ports cabled to
/// no Server form a group among themselves). Refused at
/// `spec.linkAggregation.group`, naming the conflicting port: a member carrying
/// other VLANs, MTU or mode (description and `disabled` stay each member's own); a
/// member cabled to another Server, or to none while this one is cabled (two
/// hosts' links, or a host's and an unknown port, in one bundle); a port of the
/// same Server in the same group on another Switch (patchbay does not configure
/// multi-chassis LAG).
pub fn lag_members(
    this: &LagPeer<'_>,
    peers: &[LagPeer<'_>],
) -> Result<BTreeSet<PortName>, ValidationErrors> {
    let mut errors = Errors::default();
    let mut members: BTreeSet<PortName> = this.device_port.iter().cloned().collect();
    let Some(group) = this.spec.link_aggregation.as_ref().map(|l| l.group) else {
        return Ok(members);
    };
    let field = "spec.linkAggregation.group";
    for peer in peers {
        if peer.name == this.name
            || peer.spec.link_aggregation.as_ref().map(|l| l.group) != Some(group)
        {
            continue;
        }
        if peer.switch != this.switch {
            if this.server.is_some() && peer.server == this.server {
                errors.push(
                    field,
                    format!(
                        "SwitchPort {:?} of the same Server {:?} is in group {group} on \
                         Switch {:?}: a group's members must be on one Switch (multi-chassis \
                         link aggregation is not supported)",
                        peer.name,
                        this.server.unwrap_or_default(),
                        peer.switch
                    ),
                );
            }
            continue;
        }
        if this.server != peer.server {
            let cabled = |s: Option<&str>| match s {
                Some(s) => format!("Server {s:?}"),
                None => "no Server".to_owned(),
            };
            errors.push(
                field,
                format!(
                    "group {group} on Switch {:?} already holds SwitchPort {:?}, cabled to \
                     {}; this port is cabled to {}: a group bundles one host's links",
                    this.switch,
                    peer.name,
                    cabled(peer.server),
                    cabled(this.server)
                ),
            );
            continue;
        }
        let differs = group_setting_differences(this.spec, peer.spec);
        if !differs.is_empty() {
            errors.push(
                field,
                format!(
                    "SwitchPort {:?} in group {group} carries a different configuration \
                     ({}); the members of a group must carry the same VLANs, MTU and mode",
                    peer.name,
                    differs.join(", ")
                ),
            );
            continue;
        }
        members.extend(peer.device_port.clone());
    }
    errors.finish(|| members)
}

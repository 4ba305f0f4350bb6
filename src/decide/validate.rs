//! The validator: pure checks of every patchbay object, used by the controllers and by
//! `patchbay validate`. No I/O.
//!
//! Each error names the field path (`spec.vlans[1].id`) and the reason. Values are
//! checked with the strict grammar of [`patchbay_providers::values`], so a
//! configuration that passes can be turned into a [`DesiredPort`] that no backend can
//! render into an injected command. The schema in `crds/` refuses the obvious cases at
//! the API server; this layer is exact and also checks what a schema cannot: a
//! configuration against the constraints of the port it is linked to (VLAN range,
//! trunking allowed, port disabled) and against what the device's backend can do.

pub mod claim;
pub mod manifests;
pub mod unknown_fields;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use patchbay_providers::values::{
    BridgeName, Cidr, Description, DeviceAddress, L4PortRange, LagGroup, MacAddress, Mtu, PortName,
    ValueError, VlanId, VlanName, VlanSet, excerpt,
};
use patchbay_providers::{
    AclAction, AclDirection, AclProtocol, AclRule, AdminState, Capabilities, Capability,
    DesiredPort, IpVersion, LagMembership, LagMode, VlanMode,
};

use crate::api::{
    AclActionSpec, AclDirectionSpec, AclProtocolSpec, AclRuleSpec, AclType, Backend, DeviceOs,
    LagModeSpec, PortSettingsSpec, ProviderSwitchSpec, ServerSpec, SmartNicConfigurationSpec,
    SmartNicPortSpec, SwitchPortConfigurationSpec, SwitchPortDefinition, SwitchSpec,
};

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

/// Checks the port settings both configuration kinds share and builds the
/// device-level state (without ACL and LAG).
fn port_settings(errors: &mut Errors, s: &PortSettingsSpec, port: PortName) -> DesiredPort {
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

fn acl_rules(errors: &mut Errors, rules: &[AclRuleSpec]) -> Vec<AclRule> {
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

fn acl_rule(errors: &mut Errors, i: usize, rule: &AclRuleSpec) -> Option<AclRule> {
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
fn group_setting_differences(
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
    errors.finish(|| ())
}

/// Which operating systems each backend can drive. Over `ssh` these are the OSes
/// with a dialect in `providers/dialects/`, over `netconf` those with a device model
/// in `providers/models/` (NX-OS, OS10, IOS-XE and EOS have none yet: no simulator
/// here to prove one against), over `ansible` those with built-in playbooks in
/// `playbooks/` (ios, junos).
pub fn backend_supports(backend: Backend, os: DeviceOs) -> bool {
    use DeviceOs::*;
    match backend {
        Backend::Ssh => matches!(os, Ios | Eos | Powerconnect | Dell10g | Fastiron),
        Backend::Netconf => matches!(os, Junos | Yang),
        Backend::Ansible => matches!(os, Ios | Junos),
        Backend::Ovsdb => matches!(os, Ovs),
        Backend::Fixture => matches!(os, Fixture),
    }
}

fn known_hosts_line(line: &str) -> Result<(), ValueError> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    if line.starts_with('@') {
        return Err(ValueError(
            "markers such as @cert-authority or @revoked are not supported".into(),
        ));
    }
    let is_key_type =
        |s: &str| s.starts_with("ssh-") || s.starts_with("ecdsa-sha2-") || s.starts_with("sk-");
    let key_at = match fields.as_slice() {
        [t, _, ..] if is_key_type(t) => 1,
        [_, t, _, ..] if is_key_type(t) => 2,
        _ => {
            return Err(ValueError(
                "expected `[host] key-type base64-key`, e.g. `switch1 ssh-ed25519 AAAA…`".into(),
            ));
        }
    };
    let key = fields[key_at];
    if key.len() < 16
        || !key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'+' || b == b'/' || b == b'=')
    {
        return Err(ValueError("the key is not base64".into()));
    }
    if line.chars().any(|c| c.is_control() && c != '\t') {
        return Err(ValueError("contains control characters".into()));
    }
    Ok(())
}

fn fingerprint(fp: &str) -> Result<(), ValueError> {
    let body = fp.strip_prefix("SHA256:").ok_or_else(|| {
        ValueError("must start with SHA256: (as printed by ssh-keygen -lf)".into())
    })?;
    let body = body.strip_suffix('=').unwrap_or(body);
    if body.len() != 43
        || !body
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'+' || b == b'/')
    {
        return Err(ValueError(
            "must be SHA256: followed by 43 base64 characters".into(),
        ));
    }
    Ok(())
}

/// Validates a ProviderSwitch: backend and OS fit, address and port, credentials for
/// backends that log in, host-key pin grammar, backend options.
pub fn validate_provider(spec: &ProviderSwitchSpec) -> Result<(), ValidationErrors> {
    let mut errors = Errors::default();
    if !backend_supports(spec.backend, spec.os) {
        errors.push(
            "spec.os",
            format!(
                "os {} cannot be driven by backend {}",
                json_word(&spec.os),
                json_word(&spec.backend)
            ),
        );
    }
    errors.check("spec.address", DeviceAddress::parse(&spec.address));
    if let Some(p) = spec.port
        && !(1..=65535).contains(&p)
    {
        errors.push("spec.port", format!("{p} is not a TCP port (1-65535)"));
    }
    let logs_in = matches!(
        spec.backend,
        Backend::Ssh | Backend::Netconf | Backend::Ansible
    );
    match &spec.credentials_secret_ref {
        None if logs_in => errors.push(
            "spec.credentialsSecretRef",
            format!(
                "backend {} logs in to the device and needs a credentials Secret",
                json_word(&spec.backend)
            ),
        ),
        None => {}
        Some(r) => {
            object_name(&mut errors, "spec.credentialsSecretRef.name", &r.name);
            optional_namespace(
                &mut errors,
                "spec.credentialsSecretRef.namespace",
                r.namespace.as_ref(),
            );
        }
    }
    if let Some(pin) = &spec.host_key {
        match (&pin.fingerprint, &pin.known_hosts_line) {
            (Some(_), Some(_)) => errors.push(
                "spec.hostKey",
                "give either fingerprint or knownHostsLine, not both",
            ),
            (None, None) => errors.push(
                "spec.hostKey",
                "give a fingerprint or a knownHostsLine (or leave hostKey out and put \
                 knownHosts in the Secret)",
            ),
            (Some(fp), None) => {
                errors.check("spec.hostKey.fingerprint", fingerprint(fp));
            }
            (None, Some(line)) => {
                errors.check("spec.hostKey.knownHostsLine", known_hosts_line(line));
            }
        }
        if spec.insecure_accept_any_host_key {
            errors.push(
                "spec.insecureAcceptAnyHostKey",
                "cannot be true while hostKey pins a key; remove one of them",
            );
        }
    }
    if let Some(opts) = &spec.options {
        if let Some(t) = opts.connect_timeout_seconds
            && !(1..=300).contains(&t)
        {
            errors.push(
                "spec.options.connectTimeoutSeconds",
                format!("{t} is outside 1-300"),
            );
        }
        if let Some(t) = opts.command_timeout_seconds
            && !(1..=600).contains(&t)
        {
            errors.push(
                "spec.options.commandTimeoutSeconds",
                format!("{t} is outside 1-600"),
            );
        }
        if let Some(n) = opts.max_sessions
            && !(1..=16).contains(&n)
        {
            errors.push("spec.options.maxSessions", format!("{n} is outside 1-16"));
        }
        match (&opts.bridge, spec.backend) {
            (Some(b), Backend::Ovsdb) => {
                errors.check("spec.options.bridge", BridgeName::parse(b));
            }
            (Some(_), _) => {
                errors.push("spec.options.bridge", "only the ovsdb backend has bridges")
            }
            (None, _) => {}
        }
        if let Some(m) = &opts.model {
            let os = json_word(&spec.os);
            if spec.backend != Backend::Netconf {
                errors.push(
                    "spec.options.model",
                    "only the netconf backend has device models",
                );
            } else if patchbay_providers::netconf::model::for_os(&os, Some(m)).is_none() {
                errors.push(
                    "spec.options.model",
                    format!(
                        "no NETCONF model {:?} for os {os}; models: {}",
                        excerpt(m),
                        patchbay_providers::netconf::model::names().join(", ")
                    ),
                );
            }
        }
        if let Some(dir) = &opts.playbooks {
            if spec.backend != Backend::Ansible {
                errors.push(
                    "spec.options.playbooks",
                    "only the ansible backend runs playbooks",
                );
            } else if !dir.starts_with('/')
                || dir.split('/').any(|c| c == "..")
                || !dir
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'/' | b'.' | b'_' | b'-'))
            {
                errors.push(
                    "spec.options.playbooks",
                    format!(
                        "{:?} is not an absolute directory path (letters, digits, '/', '.', '_', '-'; no '..')",
                        excerpt(dir)
                    ),
                );
            }
        }
        if let Some(target) = &opts.openflow {
            if spec.backend != Backend::Ovsdb {
                errors.push(
                    "spec.options.openflow",
                    "only the ovsdb backend uses OpenFlow",
                );
            } else if let Err(e) = openflow_target(target) {
                errors.push("spec.options.openflow", e);
            }
        }
    }
    if spec.backend == Backend::Ovsdb
        && spec
            .options
            .as_ref()
            .and_then(|o| o.bridge.as_ref())
            .is_none()
    {
        errors.push(
            "spec.options.bridge",
            "backend ovsdb needs the bridge the ports live on",
        );
    }
    errors.finish(|| ())
}

/// Checks an OpenFlow target: `unix:/absolute/path` or `tcp:HOST:PORT`.
fn openflow_target(t: &str) -> Result<(), String> {
    if let Some(path) = t.strip_prefix("unix:") {
        let ok = path.starts_with('/')
            && path.len() < 255
            && !path.split('/').any(|c| c == "..")
            && path
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'/' | b'.' | b'_' | b'-'));
        return if ok {
            Ok(())
        } else {
            Err(format!(
                "{:?} is not an absolute socket path (letters, digits, '/', '.', '_', '-'; no '..')",
                excerpt(path)
            ))
        };
    }
    if let Some(rest) = t.strip_prefix("tcp:") {
        let (host, port) = rest.rsplit_once(':').ok_or("tcp: needs HOST:PORT")?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        DeviceAddress::parse(host).map_err(|e| e.0)?;
        return match port.parse::<u16>() {
            Ok(p) if p > 0 => Ok(()),
            _ => Err(format!("{:?} is not a TCP port (1-65535)", excerpt(port))),
        };
    }
    Err(format!(
        "{:?} is neither unix:/PATH nor tcp:HOST:PORT",
        excerpt(t)
    ))
}

/// The serde spelling of an enum value (`ssh`, `ios`).
fn json_word<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_value(v)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

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

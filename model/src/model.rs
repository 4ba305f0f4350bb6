//! The vendor-neutral port model: what a port should be ([`DesiredPort`]), what a
//! device says it is ([`ObservedPort`]), what a backend can do ([`Capabilities`]) and
//! how the two states differ ([`diff`]). Pure, no I/O.
//!
//! Every field is built from the validated values of [`crate::values`], so a backend
//! may render them without re-checking.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::values::{
    Cidr, Description, L4PortRange, LagGroup, MacAddress, Mtu, PortName, VlanId, VlanName, VlanSet,
};

/// Administrative state of a port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
pub enum AdminState {
    /// Port enabled (`no shutdown`). The clean state: LLDP keeps working.
    #[default]
    Up,
    /// Port administratively down (`shutdown`).
    Down,
}

/// How a port carries VLANs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum VlanMode {
    /// No VLAN configuration of ours: the device default (access VLAN 1 on most
    /// switches). The clean definition of seed 003.
    #[default]
    Unconfigured,
    /// Untagged member of exactly one VLAN.
    Access {
        /// The access VLAN.
        vlan: VlanId,
    },
    /// 802.1Q trunk.
    Trunk {
        /// VLAN carried untagged, if any.
        native: Option<VlanId>,
        /// Tagged VLANs the trunk carries (the native VLAN is not listed here;
        /// backends whose devices need it in the allowed list add it themselves).
        allowed: VlanSet,
    },
}

/// IP version an ACL rule matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum IpVersion {
    /// IPv4.
    V4,
    /// IPv6.
    V6,
}

/// What an ACL rule does with matching traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum AclAction {
    /// Let it through.
    Allow,
    /// Drop it.
    Deny,
}

/// Protocol an ACL rule matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum AclProtocol {
    /// TCP (port ranges allowed).
    Tcp,
    /// UDP (port ranges allowed).
    Udp,
    /// ICMP / ICMPv6.
    Icmp,
    /// Any IP protocol.
    All,
}

/// Traffic direction an ACL rule applies to, seen from the switch port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
pub enum AclDirection {
    /// Traffic entering the switch from the server.
    #[default]
    Ingress,
    /// Traffic leaving the switch towards the server.
    Egress,
}

/// One ACL rule, validated (address family matches the CIDRs; ports only for TCP/UDP).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct AclRule {
    /// IP version.
    pub ip_version: IpVersion,
    /// Allow or deny.
    pub action: AclAction,
    /// Protocol.
    pub protocol: AclProtocol,
    /// Direction.
    pub direction: AclDirection,
    /// Source network; `None` means any.
    pub src: Option<Cidr>,
    /// Source ports (TCP/UDP only); `None` means any.
    pub src_ports: Option<L4PortRange>,
    /// Destination network; `None` means any.
    pub dst: Option<Cidr>,
    /// Destination ports (TCP/UDP only); `None` means any.
    pub dst_ports: Option<L4PortRange>,
}

impl AclRule {
    /// A rule matching every packet of `protocol` over `ip_version` in `direction`
    /// (no networks, no ports), doing `action`.
    pub fn matching(
        ip_version: IpVersion,
        protocol: AclProtocol,
        direction: AclDirection,
        action: AclAction,
    ) -> Self {
        Self {
            ip_version,
            action,
            protocol,
            direction,
            src: None,
            src_ports: None,
            dst: None,
            dst_ports: None,
        }
    }

    /// What a backend reads back when the device holds ACL entries it cannot map to
    /// rules (edited or added behind patchbay's back): a rule no configuration
    /// equals (ICMP with ports, which the validator refuses), so it shows as drift.
    pub fn unrecognised() -> Self {
        let any = L4PortRange { low: 1, high: 1 };
        Self {
            src_ports: Some(any),
            dst_ports: Some(any),
            ..Self::matching(
                IpVersion::V4,
                AclProtocol::Icmp,
                AclDirection::Ingress,
                AclAction::Deny,
            )
        }
    }
}

/// LACP behaviour of a link-aggregation member.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum LagMode {
    /// LACP active.
    Active,
    /// LACP passive.
    Passive,
    /// Static bundle, no LACP.
    Static,
}

/// Membership of a port in a link-aggregation group (port-channel / LAG / bond).
///
/// The group's aggregate interface (`Port-channelN`, `aeN`, an OVS bond Port) carries
/// the VLANs and MTU of its members' desired state, which must be equal (the
/// operator's validator and the switch worker see to it); each member keeps its own admin state
/// and description, and joins the aggregate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct LagMembership {
    /// Group number.
    pub group: LagGroup,
    /// LACP mode.
    pub mode: LagMode,
}

/// The complete desired state of one device port. Fields left at `None` / empty are
/// *cleared* on the device (set_port is declarative, not a patch): a port that should
/// have no description gets its description removed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DesiredPort {
    /// Device port name.
    pub port: PortName,
    /// Admin state.
    pub admin: AdminState,
    /// VLAN membership.
    pub vlans: VlanMode,
    /// Names for the VLANs this port uses; VLANs are created on the device (with this
    /// name, if given) before the port is assigned to them.
    pub vlan_names: BTreeMap<VlanId, VlanName>,
    /// MTU; `None` leaves the device default.
    pub mtu: Option<Mtu>,
    /// Description; `None` removes it.
    pub description: Option<Description>,
    /// ACL rules in order; empty removes the port ACL.
    pub acl: Vec<AclRule>,
    /// Link-aggregation membership; `None` removes it.
    pub lag: Option<LagMembership>,
    /// With `lag`: the device ports of every member of the group, this one included,
    /// as the operator knows them. Not compared with the device (each member's `lag`
    /// is); the switch worker holds a member's change until every member's is in
    /// the same batch, and backends whose aggregate lists its members (an OVS bond)
    /// write this list. Empty without `lag`.
    pub lag_members: BTreeSet<PortName>,
    /// MAC address of the host NIC cabled to the port, where known. Not configured
    /// on anything: backends that can only match traffic *towards* a port by its
    /// destination MAC (Open vSwitch) need it for egress ACL rules; the others ignore
    /// it.
    pub host_mac: Option<MacAddress>,
}

impl DesiredPort {
    /// The clean port definition of seed 003: no VLANs, no ACL, no description, no
    /// LAG, default MTU, and the port *up* so LLDP keeps working.
    pub fn clean(port: PortName) -> Self {
        Self {
            port,
            admin: AdminState::Up,
            vlans: VlanMode::Unconfigured,
            vlan_names: BTreeMap::new(),
            mtu: None,
            description: None,
            acl: Vec::new(),
            lag: None,
            lag_members: BTreeSet::new(),
            host_mac: None,
        }
    }

    /// Whether `self` and `other` are members of the same link-aggregation group
    /// with the same group settings: group, mode, VLANs (and their names) and MTU —
    /// what the aggregate interface carries. Admin state and description stay each
    /// member's own.
    pub fn same_group_settings(&self, other: &DesiredPort) -> bool {
        self.lag.is_some()
            && self.lag == other.lag
            && self.vlans == other.vlans
            && self.vlan_names == other.vlan_names
            && self.mtu == other.mtu
    }

    /// The capabilities this desired state needs from a backend.
    pub fn required_capabilities(&self) -> Vec<Capability> {
        let mut need = Vec::new();
        match &self.vlans {
            VlanMode::Unconfigured => {}
            VlanMode::Access { .. } => need.push(Capability::AccessVlan),
            VlanMode::Trunk { native, .. } => {
                need.push(Capability::Trunk);
                if native.is_some() {
                    need.push(Capability::NativeVlan);
                }
            }
        }
        if self.admin == AdminState::Down {
            need.push(Capability::Disable);
        }
        if self.description.is_some() {
            need.push(Capability::Description);
        }
        if self.mtu.is_some() {
            need.push(Capability::Mtu);
        }
        if !self.acl.is_empty() {
            need.push(Capability::Acl);
        }
        if let Some(lag) = &self.lag {
            need.push(Capability::LinkAggregation);
            match lag.mode {
                LagMode::Active => {}
                LagMode::Passive => need.push(Capability::LacpPassive),
                LagMode::Static => need.push(Capability::StaticLag),
            }
        }
        need
    }
}

/// What a device reports about a port. Fields a backend cannot read are `None` and are
/// not compared by [`diff`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObservedPort {
    /// Device port name.
    pub port: PortName,
    /// Admin state, if readable.
    pub admin: Option<AdminState>,
    /// VLAN membership, if readable.
    pub vlans: Option<VlanMode>,
    /// MTU (`Some(None)` = device default), if readable.
    pub mtu: Option<Option<Mtu>>,
    /// Description (`Some(None)` = none set), if readable.
    pub description: Option<Option<Description>>,
    /// ACL rules, if readable.
    pub acl: Option<Vec<AclRule>>,
    /// LAG membership (`Some(None)` = not a member), if readable.
    pub lag: Option<Option<LagMembership>>,
    /// The VLANs this port carries that the switch's VLAN table lacks (`Some` of
    /// an empty set: every one exists), if the backend reads the VLAN table. A
    /// switch may accept a port on a VLAN it does not have (IOS does, silently),
    /// and such a port forwards nothing: it is not configured as desired.
    pub missing_vlans: Option<VlanSet>,
}

impl ObservedPort {
    /// What a device that applied `desired` exactly reports, with every field known.
    pub fn from_desired(desired: &DesiredPort) -> Self {
        Self {
            port: desired.port.clone(),
            admin: Some(desired.admin),
            vlans: Some(desired.vlans.clone()),
            mtu: Some(desired.mtu),
            description: Some(desired.description.clone()),
            acl: Some(desired.acl.clone()),
            lag: Some(desired.lag),
            missing_vlans: Some(VlanSet::new()),
        }
    }

    /// The same port checked against the switch's VLAN table (the VLAN IDs the
    /// switch has): `missing_vlans` is what the port carries that `table` lacks.
    pub fn against_vlan_table(mut self, table: &BTreeSet<VlanId>) -> Self {
        let carried = self.vlans.as_ref().map(VlanMode::vlans).unwrap_or_default();
        self.missing_vlans = Some(carried.into_iter().filter(|v| !table.contains(v)).collect());
        self
    }
}

impl VlanMode {
    /// Every VLAN the mode carries: the access VLAN, or the trunk's native and
    /// allowed VLANs.
    pub fn vlans(&self) -> BTreeSet<VlanId> {
        match self {
            VlanMode::Unconfigured => BTreeSet::new(),
            VlanMode::Access { vlan } => [*vlan].into(),
            VlanMode::Trunk { native, allowed } => {
                allowed.iter().chain(native.iter().copied()).collect()
            }
        }
    }
}

/// One field in which a device differs from the desired state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum PortField {
    /// Admin state.
    Admin,
    /// VLAN membership.
    Vlans,
    /// MTU.
    Mtu,
    /// Description.
    Description,
    /// ACL.
    Acl,
    /// LAG membership.
    Lag,
    /// VLANs the port carries that the switch does not have.
    VlanTable,
}

impl fmt::Display for PortField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PortField::Admin => "admin state",
            PortField::Vlans => "VLANs",
            PortField::Mtu => "MTU",
            PortField::Description => "description",
            PortField::Acl => "ACL",
            PortField::Lag => "link aggregation",
            PortField::VlanTable => "VLANs missing from the switch",
        })
    }
}

/// The fields in which `observed` differs from `desired`. Fields the backend could not
/// read (`None` in `observed`) are skipped: a backend that cannot read the ACL cannot
/// detect ACL drift, and says so through [`Capabilities`].
pub fn diff(desired: &DesiredPort, observed: &ObservedPort) -> Vec<PortField> {
    let mut out = Vec::new();
    if observed.admin.is_some_and(|a| a != desired.admin) {
        out.push(PortField::Admin);
    }
    if observed.vlans.as_ref().is_some_and(|v| *v != desired.vlans) {
        out.push(PortField::Vlans);
    }
    if observed.mtu.is_some_and(|m| m != desired.mtu) {
        out.push(PortField::Mtu);
    }
    if observed
        .description
        .as_ref()
        .is_some_and(|d| *d != desired.description)
    {
        out.push(PortField::Description);
    }
    if observed.acl.as_ref().is_some_and(|a| *a != desired.acl) {
        out.push(PortField::Acl);
    }
    if observed.lag.is_some_and(|l| l != desired.lag) {
        out.push(PortField::Lag);
    }
    if observed
        .missing_vlans
        .as_ref()
        .is_some_and(|m| !m.is_empty())
    {
        out.push(PortField::VlanTable);
    }
    out
}

/// One thing a backend may or may not be able to configure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Capability {
    /// Access (untagged, single) VLAN.
    AccessVlan,
    /// Trunk with a tagged allowed set.
    Trunk,
    /// A native (untagged) VLAN on a trunk.
    NativeVlan,
    /// Administratively disable the port.
    Disable,
    /// Port description.
    Description,
    /// Port MTU.
    Mtu,
    /// Port ACL.
    Acl,
    /// Link-aggregation membership (LACP active).
    LinkAggregation,
    /// A link-aggregation member in LACP passive mode.
    LacpPassive,
    /// A static link-aggregation member (no LACP).
    StaticLag,
}

impl Capability {
    /// Every capability, in declaration order.
    pub const ALL: [Capability; 10] = [
        Capability::AccessVlan,
        Capability::Trunk,
        Capability::NativeVlan,
        Capability::Disable,
        Capability::Description,
        Capability::Mtu,
        Capability::Acl,
        Capability::LinkAggregation,
        Capability::LacpPassive,
        Capability::StaticLag,
    ];
}

impl fmt::Display for Capability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Capability::AccessVlan => "access VLAN",
            Capability::Trunk => "trunk",
            Capability::NativeVlan => "native VLAN",
            Capability::Disable => "disabling the port",
            Capability::Description => "description",
            Capability::Mtu => "MTU",
            Capability::Acl => "ACL",
            Capability::LinkAggregation => "link aggregation",
            Capability::LacpPassive => "LACP passive link aggregation",
            Capability::StaticLag => "static link aggregation (no LACP)",
        })
    }
}

/// What a backend (a dialect on a transport) can configure.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Capabilities {
    supported: Vec<Capability>,
    /// Egress ACL rules match the host NIC's MAC address (Open vSwitch).
    #[serde(default)]
    egress_by_host_mac: bool,
}

impl Capabilities {
    /// A backend that supports exactly `supported`.
    pub fn new(supported: impl IntoIterator<Item = Capability>) -> Self {
        let mut supported: Vec<Capability> = supported.into_iter().collect();
        supported.sort();
        supported.dedup();
        Self {
            supported,
            egress_by_host_mac: false,
        }
    }

    /// The same, for a backend whose egress ACL rules match the MAC address of the
    /// host behind the port (`DesiredPort::host_mac`): it cannot match the port
    /// traffic will leave by.
    pub fn egress_acl_by_host_mac(mut self) -> Self {
        self.egress_by_host_mac = true;
        self
    }

    /// Whether egress ACL rules need the host's MAC address.
    pub fn egress_needs_host_mac(&self) -> bool {
        self.egress_by_host_mac
    }

    /// A backend that supports everything.
    pub fn all() -> Self {
        Self::new(Capability::ALL)
    }

    /// Whether `cap` is supported.
    pub fn supports(&self, cap: Capability) -> bool {
        self.supported.contains(&cap)
    }

    /// The capabilities `desired` needs that this backend lacks.
    pub fn missing_for(&self, desired: &DesiredPort) -> Vec<Capability> {
        desired
            .required_capabilities()
            .into_iter()
            .filter(|c| !self.supports(*c))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn port() -> PortName {
        PortName::parse("Gi0/1").unwrap()
    }

    fn vlan(n: u16) -> VlanId {
        VlanId::new(n).unwrap()
    }

    #[test]
    fn clean_port_is_up_with_nothing_configured() {
        let clean = DesiredPort::clean(port());
        assert_eq!(clean.admin, AdminState::Up);
        assert_eq!(clean.vlans, VlanMode::Unconfigured);
        assert!(clean.required_capabilities().is_empty());
    }

    #[test]
    fn diff_reports_each_differing_field_and_skips_unreadable_ones() {
        let mut desired = DesiredPort::clean(port());
        desired.vlans = VlanMode::Access { vlan: vlan(100) };
        let mut observed = ObservedPort::from_desired(&desired);
        assert!(diff(&desired, &observed).is_empty());

        observed.vlans = Some(VlanMode::Access { vlan: vlan(200) });
        observed.admin = Some(AdminState::Down);
        assert_eq!(
            diff(&desired, &observed),
            vec![PortField::Admin, PortField::Vlans]
        );

        observed.admin = None;
        observed.acl = None;
        assert_eq!(diff(&desired, &observed), vec![PortField::Vlans]);
    }

    #[test]
    fn capabilities_name_what_is_missing() {
        let mut desired = DesiredPort::clean(port());
        desired.vlans = VlanMode::Trunk {
            native: Some(vlan(10)),
            allowed: [vlan(20)].into_iter().collect(),
        };
        desired.admin = AdminState::Down;
        let trunk_only = Capabilities::new([Capability::Trunk]);
        assert_eq!(
            trunk_only.missing_for(&desired),
            vec![Capability::NativeVlan, Capability::Disable]
        );
        assert!(Capabilities::all().missing_for(&desired).is_empty());
    }
}

//! OVSDB rows as this backend reads and writes them: the Port and Interface rows of
//! a bridge (with a bond member's view), the columns a desired state needs, the
//! observed port a row reads as, and the JSON helpers over OVSDB's value encoding
//! (RFC 7047 §5.1: sets, maps, uuids). Pure: the transactions that read and write
//! them are `ovsdb::mod`'s.

use super::*;

/// One interface of a port, as read.
#[derive(Debug, Clone, Default)]
pub(super) struct IfaceRow {
    pub(super) uuid: String,
    pub(super) name: String,
    pub(super) ofport: Option<i64>,
    pub(super) mac: Option<String>,
    pub(super) mtu_request: Option<i64>,
    pub(super) admin_state: Option<String>,
    /// `external_ids:patchbay/description`: a bond member's own description.
    pub(super) description: Option<String>,
}

/// One port, as read. For a bond member (a managed port whose interface sits in a
/// bond Port), the bond's row with only the member's interface in `ifaces`, and
/// the member's description from its interface.
#[derive(Debug, Clone, Default)]
pub(super) struct PortRow {
    pub(super) uuid: String,
    /// The Port row's name (the bond's, for a member).
    pub(super) name: String,
    pub(super) tag: Option<i64>,
    pub(super) trunks: BTreeSet<i64>,
    pub(super) vlan_mode: Option<String>,
    pub(super) description: Option<String>,
    pub(super) ifaces: Vec<IfaceRow>,
    /// Every interface of the Port row (uuids).
    pub(super) all_ifaces: Vec<String>,
    /// `lacp` (`active`, `passive`, `off`).
    pub(super) lacp: Option<String>,
    /// `external_ids:patchbay/lag`: the group of a bond patchbay made.
    pub(super) lag: Option<u16>,
    /// Read through its interface: a member of the bond this row is.
    pub(super) member: bool,
}

/// The OVS columns a desired state needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Columns {
    pub(super) tag: Option<i64>,
    pub(super) trunks: BTreeSet<i64>,
    pub(super) vlan_mode: Option<&'static str>,
}

pub(super) fn columns(vlans: &VlanMode) -> Result<Columns, DeviceError> {
    let ids = |s: &VlanSet| {
        s.iter()
            .map(|v| i64::from(v.get()))
            .collect::<BTreeSet<_>>()
    };
    Ok(match vlans {
        VlanMode::Unconfigured => Columns {
            tag: None,
            trunks: BTreeSet::new(),
            vlan_mode: None,
        },
        VlanMode::Access { vlan } => Columns {
            tag: Some(i64::from(vlan.get())),
            trunks: BTreeSet::new(),
            vlan_mode: Some("access"),
        },
        VlanMode::Trunk {
            native: None,
            allowed,
        } => {
            if allowed.is_empty() {
                // An empty trunks column means every VLAN to OVS: never write it.
                return Err(DeviceError::Protocol {
                    during: "rendering a trunk".into(),
                    cause: Cause::msg("a trunk needs at least one VLAN"),
                });
            }
            Columns {
                tag: None,
                trunks: ids(allowed),
                vlan_mode: Some("trunk"),
            }
        }
        VlanMode::Trunk {
            native: Some(n),
            allowed,
        } => {
            let mut trunks = ids(allowed);
            trunks.insert(i64::from(n.get()));
            Columns {
                tag: Some(i64::from(n.get())),
                trunks,
                vlan_mode: Some("native-untagged"),
            }
        }
    })
}

/// A trunk with no VLANs: what unrecognised VLAN columns read as (no desired state
/// equals it).
pub(super) fn unrecognised() -> VlanMode {
    VlanMode::Trunk {
        native: None,
        allowed: VlanSet::new(),
    }
}

pub(super) fn vlan(v: i64) -> Option<VlanId> {
    VlanId::from_i64(v).ok()
}

pub(super) fn vlans_of(row: &PortRow) -> VlanMode {
    let set = |xs: &BTreeSet<i64>| -> Option<VlanSet> { xs.iter().map(|v| vlan(*v)).collect() };
    match (row.vlan_mode.as_deref(), row.tag, row.trunks.is_empty()) {
        (None, None, true) => VlanMode::Unconfigured,
        (Some("access"), Some(t), true) => {
            vlan(t).map_or_else(unrecognised, |vlan| VlanMode::Access { vlan })
        }
        (Some("trunk"), None, false) => {
            set(&row.trunks).map_or_else(unrecognised, |allowed| VlanMode::Trunk {
                native: None,
                allowed,
            })
        }
        (Some("native-untagged"), Some(t), false) if row.trunks.contains(&t) => {
            let rest: BTreeSet<i64> = row.trunks.iter().copied().filter(|v| *v != t).collect();
            match (vlan(t), set(&rest)) {
                (Some(n), Some(allowed)) => VlanMode::Trunk {
                    native: Some(n),
                    allowed,
                },
                _ => unrecognised(),
            }
        }
        _ => unrecognised(),
    }
}

/// The OpenFlow side of a port: its name (cookie), interfaces' OpenFlow port numbers
/// and the host MAC.
pub(super) fn port_match(
    port: &PortName,
    row: &PortRow,
    host_mac: Option<[u8; 6]>,
) -> acl::PortMatch {
    acl::PortMatch {
        name: port.as_str().to_owned(),
        ofports: row
            .ifaces
            .iter()
            .filter_map(|i| i.ofport.and_then(|p| u32::try_from(p).ok()))
            .filter(|p| (1..0xff00).contains(p))
            .collect(),
        host_mac,
    }
}

/// Patchbay's flows of `port` among `flows` (all of patchbay's flows on the bridge).
pub(super) fn flows_of(flows: &[Flow], port: &PortName) -> Vec<Flow> {
    let cookie = acl::port_cookie(port.as_str());
    flows
        .iter()
        .filter(|f| f.cookie & acl::PORT_MASK == cookie)
        .cloned()
        .collect()
}

pub(super) fn observed(
    port: &PortName,
    row: &PortRow,
    admin_managed: bool,
    acl: Option<Vec<AclRule>>,
) -> ObservedPort {
    let states: Vec<&str> = row
        .ifaces
        .iter()
        .filter_map(|i| i.admin_state.as_deref())
        .collect();
    let admin = if states.is_empty() || !admin_managed {
        None
    } else if states.iter().all(|s| *s == "up") {
        Some(AdminState::Up)
    } else {
        Some(AdminState::Down)
    };
    // A member reads its bond's VLANs and membership; an interface in a Port
    // patchbay did not make reads as VLANs no desired state has.
    let (vlans, lag) = match (row.member, bond::membership(row)) {
        (false, _) => (vlans_of(row), None),
        (true, Some(m)) => (vlans_of(row), Some(m)),
        (true, None) => (unrecognised(), None),
    };
    let mtu =
        row.ifaces.first().and_then(|i| i.mtu_request).map(|m| {
            Mtu::new(m).unwrap_or_else(|_| Mtu::new(m.clamp(576, 9216)).expect("in range"))
        });
    ObservedPort {
        port: port.clone(),
        admin,
        vlans: Some(vlans),
        mtu: Some(mtu),
        description: Some(
            row.description
                .as_deref()
                .map(Description::read_from_device),
        ),
        acl,
        lag: Some(lag),
        // Open vSwitch has no VLAN table: a port's tag or trunks are the VLAN.
        missing_vlans: None,
    }
}

/// The Port columns of `c`.
pub(super) fn vlan_row(c: &Columns) -> serde_json::Map<String, Value> {
    let mut row = serde_json::Map::new();
    row.insert("tag".into(), rpc::set(c.tag.map(Value::from)));
    row.insert(
        "trunks".into(),
        rpc::set(c.trunks.iter().map(|v| Value::from(*v))),
    );
    row.insert("vlan_mode".into(), rpc::set(c.vlan_mode.map(Value::from)));
    row
}

/// The `external_ids` mutations that set the description key to `want` (or
/// remove it), keeping every other key.
pub(super) fn description_mutations(want: Option<&str>) -> Vec<Value> {
    let mut mutations = vec![json!([
        "external_ids",
        "delete",
        rpc::set([Value::from(DESCRIPTION_KEY)])
    ])];
    if let Some(d) = want {
        mutations.push(json!([
            "external_ids",
            "insert",
            ["map", [[DESCRIPTION_KEY, d]]]
        ]));
    }
    mutations
}

pub(super) fn int(v: &Value) -> Option<i64> {
    rpc::atoms(v).first().and_then(Value::as_i64)
}

pub(super) fn string(v: &Value) -> Option<String> {
    rpc::atoms(v)
        .first()
        .and_then(Value::as_str)
        .map(str::to_owned)
}

pub(super) fn rows(result: &Value) -> Vec<Value> {
    result
        .get("rows")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

pub(super) fn iface_row(r: &Value) -> Option<IfaceRow> {
    Some(IfaceRow {
        uuid: rpc::uuid(&r["_uuid"])?.to_owned(),
        name: r["name"].as_str().unwrap_or_default().to_owned(),
        ofport: int(&r["ofport"]),
        mac: string(&r["mac_in_use"]),
        mtu_request: int(&r["mtu_request"]),
        admin_state: string(&r["admin_state"]),
        description: external_id(&r["external_ids"], DESCRIPTION_KEY),
    })
}

pub(super) fn external_id(v: &Value, key: &str) -> Option<String> {
    rpc::string_map(v)
        .into_iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v)
}

/// A Port row as read (its interfaces not yet filled in).
pub(super) fn port_row(r: &Value) -> PortRow {
    PortRow {
        uuid: rpc::uuid(&r["_uuid"]).unwrap_or_default().to_owned(),
        name: r["name"].as_str().unwrap_or_default().to_owned(),
        tag: int(&r["tag"]),
        trunks: rpc::atoms(&r["trunks"])
            .iter()
            .filter_map(Value::as_i64)
            .collect(),
        vlan_mode: string(&r["vlan_mode"]),
        description: external_id(&r["external_ids"], DESCRIPTION_KEY),
        ifaces: Vec::new(),
        all_ifaces: rpc::atoms(&r["interfaces"])
            .iter()
            .filter_map(|u| rpc::uuid(u).map(str::to_owned))
            .collect(),
        lacp: string(&r["lacp"]),
        lag: external_id(&r["external_ids"], bond::LAG_KEY).and_then(|g| g.parse().ok()),
        member: false,
    }
}

pub(super) const PORT_COLUMNS: [&str; 8] = [
    "_uuid",
    "name",
    "tag",
    "trunks",
    "vlan_mode",
    "external_ids",
    "interfaces",
    "lacp",
];
pub(super) const IFACE_COLUMNS: [&str; 7] = [
    "_uuid",
    "name",
    "ofport",
    "mac_in_use",
    "mtu_request",
    "admin_state",
    "external_ids",
];

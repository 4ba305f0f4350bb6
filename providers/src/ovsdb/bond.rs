//! Link aggregation on Open vSwitch: a group is one bond — a Port named
//! `bond<group>` holding the members' Interfaces, marked
//! `external_ids:patchbay/lag=<group>` — that carries the group's VLANs (`tag`,
//! `trunks`, `vlan_mode`), `lacp` (`active`, `passive`, `off` for a static bundle),
//! `bond_mode=balance-slb` and `other_config:lacp-time=fast` (a dead link leaves the
//! bundle within three seconds). A member keeps its own MTU (on its Interface),
//! admin state (OpenFlow, per interface) and description (its Interface's
//! `external_ids:patchbay/description`: the Port is shared).
//!
//! Pure: `plan` turns the batch's members (what they should be, as read) and the
//! group's bond as read into the OVSDB operations of one transaction, so a member
//! moves between its own Port and the bond atomically: joining deletes the member's
//! Port from the bridge (its Interface lives on in the bond), leaving inserts a Port
//! of the member's name with its Interface, and the bond is created with its first
//! member and deleted with its last. A bond's members are those the device holds
//! plus those joining, less those leaving: a member is never removed because the
//! operator's list of members was stale.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};

use super::{DESCRIPTION_KEY, PortRow, columns, description_mutations, rpc, vlan_row};
use crate::error::DeviceError;
use crate::model::{DesiredPort, LagMembership, LagMode};
use crate::values::LagGroup;

/// The `external_ids` key marking a bond patchbay made, with its group number.
pub const LAG_KEY: &str = "patchbay/lag";

/// The bond Port of `group`.
pub fn bond_name(group: u16) -> String {
    format!("bond{group}")
}

pub(super) fn lacp_word(mode: LagMode) -> &'static str {
    match mode {
        LagMode::Active => "active",
        LagMode::Passive => "passive",
        LagMode::Static => "off",
    }
}

/// The membership a bond row reads as: its group and LACP mode, or `None` for a
/// Port patchbay did not make.
pub(super) fn membership(row: &PortRow) -> Option<LagMembership> {
    let group = LagGroup::new(i64::from(row.lag?)).ok()?;
    let mode = match row.lacp.as_deref() {
        Some("active") => LagMode::Active,
        Some("passive") => LagMode::Passive,
        _ => LagMode::Static,
    };
    Some(LagMembership { group, mode })
}

/// One port of the batch that is, or is to be, a bond member.
pub(super) struct Member<'a> {
    /// What it should be.
    pub desired: &'a DesiredPort,
    /// As read: its own Port, or (when `row.member`) its bond.
    pub row: &'a PortRow,
}

/// A bond as it will be.
struct Bond<'a> {
    existing: Option<&'a PortRow>,
    ifaces: BTreeSet<String>,
    /// The settings of its joining or staying members.
    settings: Option<&'a DesiredPort>,
    members: Vec<usize>,
}

fn uuid_set<'a>(uuids: impl IntoIterator<Item = &'a String>) -> Value {
    rpc::set(uuids.into_iter().map(|u| json!(["uuid", u])))
}

fn bridge_ports(bridge: &str, how: &str, refs: Value) -> Value {
    json!({"op": "mutate", "table": "Bridge", "where": [["name", "==", bridge]],
           "mutations": [["ports", how, refs]]})
}

/// The group a member's row says it is in: `Ok(None)` for a port of its own, an
/// error for an interface in a Port patchbay did not make.
fn current_group(row: &PortRow, port: &str) -> Result<Option<u16>, DeviceError> {
    if !row.member {
        return Ok(None);
    }
    row.lag
        .map(Some)
        .ok_or_else(|| DeviceError::CommandRejected {
            command: format!("link aggregation of {port}"),
            output: format!(
                "its interface is in Port {}, which patchbay did not create; remove it there first",
                row.name
            ),
        })
}

/// Group `g`'s bond as read (by name, or as a member's row), refused when a Port
/// of its name is not patchbay's bond of `g`.
fn bond_of<'a>(
    g: u16,
    bonds: &'a BTreeMap<u16, PortRow>,
    row: Option<&'a PortRow>,
) -> Result<Bond<'a>, DeviceError> {
    let existing = bonds.get(&g).or(row);
    if let Some(b) = existing
        && b.lag != Some(g)
    {
        return Err(DeviceError::CommandRejected {
            command: format!("link-aggregation group {g}"),
            output: format!(
                "Port {} exists on the bridge and is not patchbay's bond of group {g}",
                b.name
            ),
        });
    }
    Ok(Bond {
        existing,
        ifaces: existing
            .map(|b| b.all_ifaces.iter().cloned().collect())
            .unwrap_or_default(),
        settings: None,
        members: Vec::new(),
    })
}

/// The operations of one transaction that give `members` their group membership
/// (and, for members and leavers, their own VLANs, MTU and description), and for
/// each member whether anything of it changes. `bonds` holds the bond Ports read
/// by name for the groups being joined.
pub(super) fn plan<'a>(
    bridge: &str,
    members: &[Member<'a>],
    bonds: &'a BTreeMap<u16, PortRow>,
) -> Result<(Vec<Value>, Vec<bool>), DeviceError> {
    let mut ops = Vec::new();
    let mut changed = vec![false; members.len()];
    let mut groups: BTreeMap<u16, Bond<'a>> = BTreeMap::new();
    for (i, m) in members.iter().enumerate() {
        let port = m.desired.port.as_str();
        let from = current_group(m.row, port)?;
        let to = m.desired.lag.map(|l| l.group.get());
        let own: Vec<String> = m.row.ifaces.iter().map(|f| f.uuid.clone()).collect();
        if let Some(c) = from {
            let b = match groups.entry(c) {
                std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
                std::collections::btree_map::Entry::Vacant(e) => {
                    e.insert(bond_of(c, bonds, Some(m.row))?)
                }
            };
            if from != to {
                for u in &own {
                    b.ifaces.remove(u);
                }
                b.members.push(i);
            }
        }
        if let Some(t) = to {
            let b = match groups.entry(t) {
                std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
                std::collections::btree_map::Entry::Vacant(e) => e.insert(bond_of(t, bonds, None)?),
            };
            b.ifaces.extend(own.iter().cloned());
            b.settings = Some(m.desired);
            b.members.push(i);
            if from.is_none() {
                // Its own Port goes; its Interface lives on in the bond.
                ops.push(bridge_ports(bridge, "delete", uuid_set([&m.row.uuid])));
                changed[i] = true;
            }
        } else if from.is_some() {
            // Leaving: a Port of its own again, with its own VLANs.
            let mut row = vlan_row(&columns(&m.desired.vlans)?);
            row.insert("name".into(), json!(port));
            row.insert("interfaces".into(), uuid_set(&own));
            if let Some(d) = &m.desired.description {
                row.insert(
                    "external_ids".into(),
                    json!(["map", [[DESCRIPTION_KEY, d.as_str()]]]),
                );
            }
            let name = format!("leaving{i}");
            ops.push(json!({"op": "insert", "table": "Port", "uuid-name": name, "row": row}));
            ops.push(bridge_ports(
                bridge,
                "insert",
                json!(["set", [["named-uuid", name]]]),
            ));
            changed[i] = true;
        }
        // The member's own interface settings.
        let in_bond = to.is_some();
        let want_mtu = m.desired.mtu.map(|m| i64::from(m.get()));
        let want_desc = if in_bond {
            m.desired
                .description
                .as_ref()
                .map(|d| d.as_str().to_owned())
        } else {
            None
        };
        for f in &m.row.ifaces {
            let mut row = serde_json::Map::new();
            if f.mtu_request != want_mtu {
                row.insert("mtu_request".into(), rpc::set(want_mtu.map(Value::from)));
            }
            if !row.is_empty() {
                ops.push(json!({"op": "update", "table": "Interface",
                    "where": [["_uuid", "==", ["uuid", f.uuid]]], "row": row}));
                changed[i] = true;
            }
            if f.description != want_desc {
                let mutations = description_mutations(want_desc.as_deref());
                ops.push(json!({"op": "mutate", "table": "Interface",
                    "where": [["_uuid", "==", ["uuid", f.uuid]]], "mutations": mutations}));
                changed[i] = true;
            }
        }
    }
    for (g, b) in &groups {
        let touched = match (b.existing, b.ifaces.is_empty()) {
            (Some(e), true) => {
                ops.push(bridge_ports(bridge, "delete", uuid_set([&e.uuid])));
                true
            }
            (None, true) => false,
            (existing, false) => {
                let mut row = serde_json::Map::new();
                if let Some(d) = b.settings {
                    let c = columns(&d.vlans)?;
                    let lacp = lacp_word(d.lag.map_or(LagMode::Active, |l| l.mode));
                    let same = existing.is_some_and(|e| {
                        e.tag == c.tag
                            && e.trunks == c.trunks
                            && e.vlan_mode.as_deref() == c.vlan_mode
                            && e.lacp.as_deref() == Some(lacp)
                    });
                    if !same {
                        row = vlan_row(&c);
                        row.insert("lacp".into(), json!(lacp));
                        row.insert("bond_mode".into(), json!("balance-slb"));
                        row.insert(
                            "other_config".into(),
                            json!(["map", [["lacp-time", "fast"]]]),
                        );
                    }
                }
                let had: BTreeSet<String> = existing
                    .map(|e| e.all_ifaces.iter().cloned().collect())
                    .unwrap_or_default();
                if had != b.ifaces {
                    row.insert("interfaces".into(), uuid_set(&b.ifaces));
                }
                match existing {
                    Some(e) if !row.is_empty() => {
                        ops.push(json!({"op": "update", "table": "Port",
                            "where": [["_uuid", "==", ["uuid", e.uuid]]], "row": row}));
                        true
                    }
                    Some(_) => false,
                    None => {
                        let name = format!("bond{g}");
                        row.insert("name".into(), json!(bond_name(*g)));
                        row.insert(
                            "external_ids".into(),
                            json!(["map", [[LAG_KEY, g.to_string()]]]),
                        );
                        ops.push(
                            json!({"op": "insert", "table": "Port", "uuid-name": name, "row": row}),
                        );
                        ops.push(bridge_ports(
                            bridge,
                            "insert",
                            json!(["set", [["named-uuid", name]]]),
                        ));
                        true
                    }
                }
            }
        };
        if touched {
            for &i in &b.members {
                changed[i] = true;
            }
        }
    }
    Ok((ops, changed))
}

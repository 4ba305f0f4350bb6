//! Planning one port's change: the OVSDB operations (Port and Interface rows, VLAN
//! columns, description, MTU), the admin-state requests, and the OpenFlow adds and
//! deletes, from what was read and what is desired. No I/O.

use super::*;

/// One port's planned change.
pub(super) struct Plan {
    pub(super) ops: Vec<Value>,
    pub(super) admin: Option<(bool, Vec<IfaceRow>)>,
    /// Flow adds and deletes (OpenFlow), in order.
    pub(super) flows: Vec<openflow::Request>,
}

/// The Port and Interface operations that make `row` (and its interfaces) carry
/// `desired`'s VLANs, description and MTU; `port_where` selects the Port row and
/// `iface_where` each interface (the device by `_uuid`, an offline plan by name).
pub(super) fn row_ops(
    desired: &DesiredPort,
    row: &PortRow,
    port_where: &Value,
    iface_where: impl Fn(&IfaceRow) -> Value,
) -> Result<Vec<Value>, DeviceError> {
    let want = columns(&desired.vlans)?;
    let mut ops = Vec::new();
    if want.tag != row.tag
        || want.trunks != row.trunks
        || want.vlan_mode != row.vlan_mode.as_deref()
    {
        ops.push(json!({"op": "update", "table": "Port", "where": port_where,
            "row": vlan_row(&want)}));
    }
    let want_desc = desired.description.as_ref().map(|d| d.as_str().to_owned());
    if want_desc != row.description {
        let mutations = description_mutations(want_desc.as_deref());
        ops.push(
            json!({"op": "mutate", "table": "Port", "where": port_where, "mutations": mutations}),
        );
    }
    let want_mtu = desired.mtu.map(|m| i64::from(m.get()));
    for f in &row.ifaces {
        if f.mtu_request != want_mtu {
            ops.push(
                json!({"op": "update", "table": "Interface", "where": iface_where(f),
                "row": {"mtu_request": rpc::set(want_mtu.map(Value::from))}}),
            );
        }
    }
    Ok(ops)
}

/// The operations that end a batch's transaction: `next_cfg += 1`, and its new value
/// read back (the backend then waits for `cur_cfg` to reach it).
pub(super) fn cfg_ops() -> [Value; 2] {
    [
        json!({"op": "mutate", "table": "Open_vSwitch", "where": [],
            "mutations": [["next_cfg", "+=", 1]]}),
        json!({"op": "select", "table": "Open_vSwitch", "where": [], "columns": ["next_cfg"]}),
    ]
}

/// The transaction (the `transact` params after the database name) a batch sends
/// for `batch` (each port's assumed or read state, and its operation), worked out
/// without the device on bridge `bridge`: each port taken as one Port row with one
/// Interface of its name, a group's members as the bond `bond<group>` holding their
/// Interfaces (`others`: the switch's other group members, as they stay). The
/// device's own planning, rows selected by name where the device selects them by
/// `_uuid`; where an operation references a row (a bridge's `ports`, a bond's
/// `interfaces`) the reference reads `<Port NAME>` or `<Interface NAME>` in place of
/// the row's uuid. Empty when no port changes. OpenFlow (the admin state, ACL flows)
/// is not part of it.
pub fn offline_transaction(
    bridge: &str,
    batch: &[(Option<ObservedPort>, PortOperation)],
    others: &[DesiredPort],
) -> Result<Vec<Value>, DeviceError> {
    let port_ref = |name: &str| format!("<Port {name}>");
    let iface_ref = |name: &str| format!("<Interface {name}>");
    let states: Vec<(ObservedPort, DesiredPort)> = batch
        .iter()
        .map(|(now, op)| {
            let now = now.clone().unwrap_or_else(|| {
                ObservedPort::from_desired(&DesiredPort::clean(op.port().clone()))
            });
            (now, op.target())
        })
        .collect();
    // Each group's bond as the states hold it: its members' interfaces, its VLANs
    // and LACP mode (a member's).
    let mut bonds: BTreeMap<u16, PortRow> = BTreeMap::new();
    let held = states
        .iter()
        .filter_map(|(now, _)| Some((now.lag.flatten()?, now.port.as_str(), now.vlans.clone())))
        .chain(
            others
                .iter()
                .filter_map(|d| Some((d.lag?, d.port.as_str(), Some(d.vlans.clone())))),
        );
    for (m, name, vlans) in held {
        let g = m.group.get();
        let cols = columns(vlans.as_ref().unwrap_or(&VlanMode::Unconfigured))?;
        let bond = bonds.entry(g).or_insert_with(|| PortRow {
            uuid: port_ref(&bond::bond_name(g)),
            name: bond::bond_name(g),
            tag: cols.tag,
            trunks: cols.trunks,
            vlan_mode: cols.vlan_mode.map(str::to_owned),
            lacp: Some(bond::lacp_word(m.mode).to_owned()),
            lag: Some(g),
            ..PortRow::default()
        });
        bond.all_ifaces.push(iface_ref(name));
    }
    let mut ops = Vec::new();
    let mut members: Vec<(usize, PortRow)> = Vec::new();
    for (i, (now, target)) in states.iter().enumerate() {
        let name = now.port.as_str().to_owned();
        let iface = IfaceRow {
            uuid: iface_ref(&name),
            name: name.clone(),
            mtu_request: now.mtu.flatten().map(|m| i64::from(m.get())),
            ..IfaceRow::default()
        };
        let description = now
            .description
            .clone()
            .flatten()
            .map(|d| d.as_str().to_owned());
        let group = now.lag.flatten().map(|m| m.group.get());
        if let Some(g) = group {
            // A member: its bond's row, with only its own interface.
            let bond = &bonds[&g];
            members.push((
                i,
                PortRow {
                    ifaces: vec![IfaceRow {
                        description,
                        ..iface
                    }],
                    member: true,
                    ..bond.clone()
                },
            ));
            continue;
        }
        let cols = columns(now.vlans.as_ref().unwrap_or(&VlanMode::Unconfigured))?;
        let row = PortRow {
            uuid: port_ref(&name),
            name: name.clone(),
            tag: cols.tag,
            trunks: cols.trunks,
            vlan_mode: cols.vlan_mode.map(str::to_owned),
            description,
            all_ifaces: vec![iface.uuid.clone()],
            ifaces: vec![iface],
            ..PortRow::default()
        };
        if target.lag.is_some() {
            members.push((i, row));
            continue;
        }
        ops.extend(row_ops(
            target,
            &row,
            &json!([["name", "==", name]]),
            |f| json!([["name", "==", f.name]]),
        )?);
    }
    if !members.is_empty() {
        let planned: Vec<bond::Member<'_>> = members
            .iter()
            .map(|(i, row)| bond::Member {
                desired: &states[*i].1,
                row,
            })
            .collect();
        let (lag_ops, _) = bond::plan(bridge, &planned, &bonds)?;
        ops.extend(lag_ops.into_iter().map(by_name));
    }
    if !ops.is_empty() {
        ops.extend(cfg_ops());
    }
    Ok(ops)
}

/// `op` with each `_uuid` selection of a named placeholder (`<Port NAME>`,
/// `<Interface NAME>`) turned into a selection by name.
fn by_name(mut op: Value) -> Value {
    if let Some(clauses) = op.get_mut("where").and_then(Value::as_array_mut) {
        for c in clauses {
            let named = c[2][1]
                .as_str()
                .filter(|_| c[0] == "_uuid")
                .and_then(|u| u.strip_suffix('>'))
                .and_then(|u| u.split_once(' '))
                .map(|(_, name)| name.to_owned());
            if let Some(name) = named {
                *c = json!(["name", "==", name]);
            }
        }
    }
    op
}

impl OvsSwitch {
    /// The operations that make `row` (and `flows`, the port's patchbay flows) match
    /// `desired` (empty when they do).
    pub(super) fn plan(
        &self,
        desired: &DesiredPort,
        row: &PortRow,
        flows: &[Flow],
    ) -> Result<Plan, DeviceError> {
        let caps = self.capabilities();
        if let Some(c) = caps.missing_for(desired).first() {
            return Err(DeviceError::Unsupported { capability: *c });
        }
        let ops = row_ops(
            desired,
            row,
            &json!([["_uuid", "==", ["uuid", row.uuid]]]),
            |f| json!([["_uuid", "==", ["uuid", f.uuid]]]),
        )?;
        // Without an OpenFlow listener the admin state is not managed (and not
        // compared, see `observed`): desired Down was refused above.
        let down = desired.admin == AdminState::Down;
        let wrong: Vec<IfaceRow> = row
            .ifaces
            .iter()
            .filter(|f| f.admin_state.as_deref() != Some(if down { "down" } else { "up" }))
            .cloned()
            .collect();
        let admin = (self.opts.openflow.is_some() && !wrong.is_empty()).then_some((down, wrong));
        let flows = if self.opts.openflow.is_some() {
            self.plan_flows(desired, row, flows)?
        } else {
            Vec::new()
        };
        Ok(Plan { ops, admin, flows })
    }

    /// The flow changes that give the port exactly `desired.acl`: the new flows under
    /// the other generation (identical ones are replaced in place), then a delete of
    /// the old generation; a clean port gets one delete of all its flows.
    pub(super) fn plan_flows(
        &self,
        desired: &DesiredPort,
        row: &PortRow,
        current: &[Flow],
    ) -> Result<Vec<openflow::Request>, DeviceError> {
        let port = &desired.port;
        let what = format!("OpenFlow ACL of {port}");
        let generation = !acl::generation(current);
        let wanted = if desired.acl.is_empty() {
            Vec::new()
        } else {
            let pm = port_match(port, row, desired.host_mac.map(|m| m.octets()));
            acl::render(&desired.acl, &pm, generation).map_err(|e| {
                DeviceError::CommandRejected {
                    command: what.clone(),
                    output: e.to_string(),
                }
            })?
        };
        if acl::normalised(&wanted) == acl::normalised(current) {
            return Ok(Vec::new());
        }
        let cookie = acl::port_cookie(port.as_str());
        let mut out: Vec<openflow::Request> = wanted
            .iter()
            .map(|f| openflow::Request {
                what: what.clone(),
                bytes: ofwire::flow_add(f, 0),
            })
            .collect();
        if !current.is_empty() {
            let (cookie, mask) = if wanted.is_empty() {
                (cookie, acl::PORT_MASK)
            } else {
                let old = if generation { 0 } else { acl::GENERATION };
                (cookie | old, acl::PORT_MASK | acl::GENERATION)
            };
            out.push(openflow::Request {
                what,
                bytes: ofwire::flow_delete(cookie, mask, 0),
            });
        }
        Ok(out)
    }
}

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
/// without the device: rows selected by name instead of `_uuid`, each port taken as
/// one Port row with one Interface of its name (a bond member's rows are the
/// bond's and are not worked out here). Empty when no port changes. OpenFlow (the
/// admin state, ACL flows) is not part of it.
pub fn offline_transaction(
    batch: &[(Option<ObservedPort>, PortOperation)],
) -> Result<Vec<Value>, DeviceError> {
    let mut ops = Vec::new();
    for (now, op) in batch {
        let name = op.port().as_str().to_owned();
        let now = now
            .clone()
            .unwrap_or_else(|| ObservedPort::from_desired(&DesiredPort::clean(op.port().clone())));
        let cols = columns(now.vlans.as_ref().unwrap_or(&VlanMode::Unconfigured))?;
        let row = PortRow {
            name: name.clone(),
            tag: cols.tag,
            trunks: cols.trunks,
            vlan_mode: cols.vlan_mode.map(str::to_owned),
            description: now.description.flatten().map(|d| d.as_str().to_owned()),
            ifaces: vec![IfaceRow {
                name: name.clone(),
                mtu_request: now.mtu.flatten().map(|m| i64::from(m.get())),
                ..IfaceRow::default()
            }],
            ..PortRow::default()
        };
        ops.extend(row_ops(
            &op.target(),
            &row,
            &json!([["name", "==", name]]),
            |f| json!([["name", "==", f.name]]),
        )?);
    }
    if !ops.is_empty() {
        ops.extend(cfg_ops());
    }
    Ok(ops)
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

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
        let want = columns(&desired.vlans)?;
        let mut ops = Vec::new();
        let port_where = json!([["_uuid", "==", ["uuid", row.uuid]]]);
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
            ops.push(json!({"op": "mutate", "table": "Port", "where": port_where, "mutations": mutations}));
        }
        let want_mtu = desired.mtu.map(|m| i64::from(m.get()));
        for f in &row.ifaces {
            if f.mtu_request != want_mtu {
                ops.push(json!({"op": "update", "table": "Interface",
                    "where": [["_uuid", "==", ["uuid", f.uuid]]],
                    "row": {"mtu_request": rpc::set(want_mtu.map(Value::from))}}));
            }
        }
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

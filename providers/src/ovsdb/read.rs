//! Reading ports back from the database: the Port, Interface and bond rows of the
//! bridge's ports (and the OpenFlow rules where openflow is on), in one session, into
//! observed ports. OVSDB I/O.

use super::*;

impl OvsSwitch {
    /// Reads `ports` of the bridge in one transaction; a second one finds the
    /// interfaces of Ports named differently from them (bonds), and the bonds of
    /// ports that are bond members (no Port of their name, an Interface of it).
    pub(super) async fn read_rows(
        &self,
        conn: &mut Connection,
        ports: &[PortName],
    ) -> Result<Vec<Result<PortRow, DeviceError>>, DeviceError> {
        let mut ops = vec![json!({
            "op": "select", "table": "Bridge",
            "where": [["name", "==", self.opts.bridge]], "columns": ["ports"],
        })];
        for p in ports {
            ops.push(json!({"op": "select", "table": "Port",
                "where": [["name", "==", p.as_str()]], "columns": PORT_COLUMNS}));
            ops.push(json!({"op": "select", "table": "Interface",
                "where": [["name", "==", p.as_str()]], "columns": IFACE_COLUMNS}));
        }
        let results = conn.transact(DB, &ops).await?;
        let bridge = rows(&results[0]);
        let Some(bridge) = bridge.first() else {
            return Err(DeviceError::CommandRejected {
                command: format!("select Bridge {}", self.opts.bridge),
                output: "there is no bridge of that name".into(),
            });
        };
        let on_bridge: BTreeSet<String> = rpc::atoms(&bridge["ports"])
            .iter()
            .filter_map(|u| rpc::uuid(u).map(str::to_owned))
            .collect();
        let not_here = |p: &PortName| {
            Err(DeviceError::UnknownPort {
                port: format!("{p} (not on bridge {})", self.opts.bridge),
            })
        };
        let mut out: Vec<Result<PortRow, DeviceError>> = Vec::with_capacity(ports.len());
        // Ports read through their interface: (index, the interface).
        let mut members: Vec<(usize, IfaceRow)> = Vec::new();
        for (i, p) in ports.iter().enumerate() {
            let named: Vec<IfaceRow> = rows(&results[2 + 2 * i])
                .iter()
                .filter_map(iface_row)
                .collect();
            let Some(r) = rows(&results[1 + 2 * i]).first().map(port_row) else {
                match named.into_iter().next() {
                    Some(iface) => {
                        members.push((i, iface));
                        out.push(Ok(PortRow::default()));
                    }
                    None => out.push(Err(DeviceError::UnknownPort {
                        port: p.to_string(),
                    })),
                }
                continue;
            };
            if !on_bridge.contains(&r.uuid) {
                out.push(not_here(p));
                continue;
            }
            let ifaces = r
                .all_ifaces
                .iter()
                .map(|u| {
                    named
                        .iter()
                        .find(|f| &f.uuid == u)
                        .cloned()
                        .unwrap_or(IfaceRow {
                            uuid: u.clone(),
                            ..IfaceRow::default()
                        })
                })
                .collect();
            out.push(Ok(PortRow { ifaces, ..r }));
        }
        // Interfaces not named after their port, and the bonds holding members.
        let missing: BTreeSet<String> = out
            .iter()
            .flatten()
            .flat_map(|r| &r.ifaces)
            .filter(|f| f.name.is_empty())
            .map(|f| f.uuid.clone())
            .collect();
        if missing.is_empty() && members.is_empty() {
            return Ok(out);
        }
        let mut ops: Vec<Value> = missing
            .iter()
            .map(|u| {
                json!({"op": "select", "table": "Interface",
                "where": [["_uuid", "==", ["uuid", u]]], "columns": IFACE_COLUMNS})
            })
            .collect();
        ops.extend(members.iter().map(|(_, f)| {
            json!({"op": "select", "table": "Port",
                "where": [["interfaces", "includes", ["uuid", f.uuid]]], "columns": PORT_COLUMNS})
        }));
        let results = conn.transact(DB, &ops).await?;
        let found: HashMap<String, IfaceRow> = results[..missing.len()]
            .iter()
            .flat_map(rows)
            .filter_map(|r| iface_row(&r))
            .map(|f| (f.uuid.clone(), f))
            .collect();
        for row in out.iter_mut().flatten() {
            for f in &mut row.ifaces {
                if let Some(full) = found.get(&f.uuid) {
                    *f = full.clone();
                }
            }
        }
        for ((i, iface), result) in members.into_iter().zip(&results[missing.len()..]) {
            out[i] = match rows(result).first().map(port_row) {
                Some(bond) if on_bridge.contains(&bond.uuid) => Ok(PortRow {
                    description: iface.description.clone(),
                    ifaces: vec![iface],
                    member: true,
                    ..bond
                }),
                _ => not_here(&ports[i]),
            };
        }
        Ok(out)
    }
}

impl OvsSwitch {
    /// The bond Ports of `groups` on the bridge, read by name.
    pub(super) async fn read_bonds(
        &self,
        conn: &mut Connection,
        groups: &BTreeSet<u16>,
    ) -> Result<BTreeMap<u16, PortRow>, DeviceError> {
        if groups.is_empty() {
            return Ok(BTreeMap::new());
        }
        let mut ops = vec![json!({"op": "select", "table": "Bridge",
            "where": [["name", "==", self.opts.bridge]], "columns": ["ports"]})];
        ops.extend(groups.iter().map(|g| {
            json!({"op": "select", "table": "Port",
                "where": [["name", "==", bond::bond_name(*g)]], "columns": PORT_COLUMNS})
        }));
        let results = conn.transact(DB, &ops).await?;
        let on_bridge: BTreeSet<String> = rows(&results[0])
            .first()
            .map(|b| {
                rpc::atoms(&b["ports"])
                    .iter()
                    .filter_map(|u| rpc::uuid(u).map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        Ok(groups
            .iter()
            .zip(&results[1..])
            .filter_map(|(g, r)| {
                let row = rows(r).first().map(port_row)?;
                on_bridge.contains(&row.uuid).then_some((*g, row))
            })
            .collect())
    }

    /// The Interface rows named `names`, read now (a moved interface may have a
    /// new OpenFlow port number).
    pub(super) async fn read_ifaces(
        &self,
        conn: &mut Connection,
        names: &[String],
    ) -> Result<Vec<IfaceRow>, DeviceError> {
        if names.is_empty() {
            return Ok(Vec::new());
        }
        let ops: Vec<Value> = names
            .iter()
            .map(|n| {
                json!({"op": "select", "table": "Interface",
                "where": [["name", "==", n]], "columns": IFACE_COLUMNS})
            })
            .collect();
        Ok(conn
            .transact(DB, &ops)
            .await?
            .iter()
            .flat_map(rows)
            .filter_map(|r| iface_row(&r))
            .collect())
    }
}

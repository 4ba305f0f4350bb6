//! Open vSwitch as a [`Device`]: ports of one bridge, configured over OVSDB
//! (RFC 7047, [`rpc`]) and, for the admin state only, OpenFlow ([`openflow`]).
//!
//! | desired | OVSDB columns written |
//! |---|---|
//! | clean (no VLAN config) | `Port.tag`, `trunks`, `vlan_mode` all empty (OVS's default: a trunk of every VLAN) |
//! | access VLAN v | `vlan_mode=access`, `tag=v`, `trunks=[]` |
//! | trunk of tagged VLANs A | `vlan_mode=trunk`, `tag=[]`, `trunks=A` |
//! | trunk, native n untagged, tagged A | `vlan_mode=native-untagged`, `tag=n`, `trunks=A ∪ {n}` |
//! | MTU m | `Interface.mtu_request=m` on each interface of the port |
//! | description d | `Port.external_ids:patchbay/description=d` (other keys kept) |
//! | disabled | OpenFlow PORT_MOD `OFPPC_PORT_DOWN` (see [`openflow`]); read back from `Interface.admin_state` |
//! | ACL | OpenFlow flows in table 0 marked by patchbay's cookies (see [`acl`]); read back by a cookie-masked dump |
//!
//! The native VLAN is always written into `trunks`: an empty `trunks` means *every*
//! VLAN to OVS, so a native-only trunk must not leave it empty.
//!
//! Admin state and ACL need the bridge's OpenFlow listener (`options.openflow`);
//! without it neither is offered. A batch (and a read) then holds one OpenFlow
//! session as well: one dump of patchbay's flows on the bridge, and after the OVSDB
//! commit every port-mod and flow change followed by one barrier.
//!
//! Reads are one transaction of `select`s; a batch of changes is one transaction for
//! every port plus `next_cfg += 1`, after which the backend waits until
//! ovs-vswitchd reports `cur_cfg` at least that value — the change is then in the
//! datapath, not only in the database. If the transaction is refused (OVSDB rolls it
//! back whole), each changed port is retried alone so the refusal is reported on the
//! port that caused it and the others still apply.
//!
//! Read-back is strict: column combinations patchbay never writes (`native-tagged`,
//! `dot1q-tunnel`, access without a tag, a trunk with no `trunks`) read as a trunk
//! with no VLANs, which no desired state equals, so such a port shows drift and is
//! rewritten.

pub mod acl;
pub mod bond;
pub mod fdb;
pub mod ofwire;
pub mod openflow;
mod rows;
pub mod rpc;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::device::{Device, NeighborSource, PortChange, PortOperation, PortReads, PortResult};
use crate::error::Cause;
use crate::error::DeviceError;
use crate::heard::Heard;
use crate::model::{
    AclRule, AdminState, Capabilities, Capability, DesiredPort, ObservedPort, VlanMode,
};
use crate::values::{Description, Mtu, PortName, VlanId, VlanSet};
use ofwire::Flow;
use rows::{
    IFACE_COLUMNS, IfaceRow, PORT_COLUMNS, PortRow, columns, description_mutations, flows_of,
    iface_row, observed, port_match, port_row, rows, string, vlan_row,
};
pub use rpc::{Connection, Endpoint, OvsdbError};

/// The `external_ids` key that holds a port's description.
pub const DESCRIPTION_KEY: &str = "patchbay/description";
const DB: &str = "Open_vSwitch";

/// How to reach one Open vSwitch.
#[derive(Debug, Clone)]
pub struct OvsOptions {
    /// The OVSDB server.
    pub endpoint: Endpoint,
    /// The bridge whose ports are managed.
    pub bridge: String,
    /// OpenFlow target of the bridge, `unix:PATH` or `tcp:HOST:PORT` (see
    /// [`openflow::Session::open`]); without it the admin state and ACLs are not
    /// managed: ports cannot be disabled or carry ACLs.
    pub openflow: Option<String>,
    /// Connect timeout.
    pub connect_timeout: Duration,
    /// Timeout of one call, and of waiting for ovs-vswitchd.
    pub command_timeout: Duration,
    /// ovs-vswitchd's control socket (the unixctl socket `ovs-appctl -t` names), on
    /// the operator's filesystem: where the learned MAC addresses are read
    /// ([`fdb`]). Without it the bridge is no neighbour source.
    pub control_socket: Option<std::path::PathBuf>,
}

/// An Open vSwitch bridge reached over OVSDB.
pub struct OvsSwitch {
    opts: OvsOptions,
    /// When the server last answered, over every session.
    heard: Heard,
}

#[async_trait]
impl NeighborSource for OvsSwitch {
    /// The bridge's learned MAC addresses per port: the interface names and
    /// OpenFlow port numbers of the bridge's ports from OVSDB (one transaction), then
    /// `fdb/show` on the control socket. Open vSwitch sends no LLDP of its own: an
    /// lldpd beside it is read through an `os: linux` source.
    async fn neighbors(&self) -> Result<crate::neighbors::Neighbors, DeviceError> {
        let Some(socket) = &self.opts.control_socket else {
            return Err(DeviceError::Protocol {
                during: "reading learned MAC addresses".into(),
                cause: Cause::msg("no control socket is configured (options.controlSocket)"),
            });
        };
        let names = self
            .with_session(async |conn| self.ofport_names(conn).await)
            .await?;
        let mut ctl = Connection::connect(
            &Endpoint::Unix(socket.clone()),
            self.opts.connect_timeout,
            self.opts.command_timeout,
        )
        .await?;
        let answer = ctl.call("fdb/show", json!([self.opts.bridge])).await?;
        let text = answer.as_str().unwrap_or_default();
        let learned = fdb::parse(text).map_err(|e| DeviceError::Protocol {
            during: "reading fdb/show".into(),
            cause: Cause::msg(e),
        })?;
        Ok(crate::neighbors::Neighbors::gather_aged(
            None,
            [],
            fdb::by_name(&learned, &names),
        ))
    }
}

/// One port's planned change.
struct Plan {
    ops: Vec<Value>,
    admin: Option<(bool, Vec<IfaceRow>)>,
    /// Flow adds and deletes (OpenFlow), in order.
    flows: Vec<openflow::Request>,
}

impl OvsSwitch {
    /// A backend for `opts` (connects per batch).
    pub fn new(opts: OvsOptions) -> Self {
        Self {
            opts,
            heard: Heard::default(),
        }
    }

    /// The bridge this backend manages.
    pub fn bridge(&self) -> &str {
        &self.opts.bridge
    }

    /// Runs `f` on a new session. One session per batch or read: nothing stale to
    /// recover (ovsdb-server drops idle TCP sessions that miss its probes), and a
    /// connect on the management network costs one round trip.
    async fn with_session<T>(
        &self,
        f: impl AsyncFnOnce(&mut Connection) -> Result<T, DeviceError>,
    ) -> Result<T, DeviceError> {
        let mut conn = Connection::connect(
            &self.opts.endpoint,
            self.opts.connect_timeout,
            self.opts.command_timeout,
        )
        .await?
        .stamping(&self.heard);
        f(&mut conn).await
    }

    /// The bridge's interfaces by OpenFlow port number, in one transaction.
    async fn ofport_names(
        &self,
        conn: &mut Connection,
    ) -> Result<BTreeMap<i64, String>, DeviceError> {
        let ops = [
            json!({"op": "select", "table": "Bridge",
                   "where": [["name", "==", self.opts.bridge]], "columns": ["ports"]}),
            json!({"op": "select", "table": "Port", "where": [], "columns": ["_uuid", "interfaces"]}),
            json!({"op": "select", "table": "Interface", "where": [],
                   "columns": ["_uuid", "name", "ofport"]}),
        ];
        let results = conn.transact(DB, &ops).await?;
        let Some(bridge) = rows(&results[0]).into_iter().next() else {
            return Err(DeviceError::CommandRejected {
                command: format!("select Bridge {}", self.opts.bridge),
                output: "there is no bridge of that name".into(),
            });
        };
        let uuids = |v: &Value| -> BTreeSet<String> {
            rpc::atoms(v)
                .iter()
                .filter_map(|u| rpc::uuid(u).map(str::to_owned))
                .collect()
        };
        let on_bridge = uuids(&bridge["ports"]);
        let ifaces: BTreeSet<String> = rows(&results[1])
            .iter()
            .filter(|p| rpc::uuid(&p["_uuid"]).is_some_and(|u| on_bridge.contains(u)))
            .flat_map(|p| uuids(&p["interfaces"]))
            .collect();
        Ok(rows(&results[2])
            .iter()
            .filter(|i| rpc::uuid(&i["_uuid"]).is_some_and(|u| ifaces.contains(u)))
            .filter_map(|i| Some((i["ofport"].as_i64()?, i["name"].as_str()?.to_owned())))
            .collect())
    }

    /// Reads `ports` of the bridge in one transaction; a second one finds the
    /// interfaces of Ports named differently from them (bonds), and the bonds of
    /// ports that are bond members (no Port of their name, an Interface of it).
    async fn read_rows(
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

    /// The operations that make `row` (and `flows`, the port's patchbay flows) match
    /// `desired` (empty when they do).
    fn plan(
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
    fn plan_flows(
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

    /// Opens the bridge's OpenFlow session and dumps patchbay's flows, when the
    /// bridge has an OpenFlow target.
    async fn open_openflow(&self) -> Result<Option<(openflow::Session, Vec<Flow>)>, DeviceError> {
        let Some(target) = &self.opts.openflow else {
            return Ok(None);
        };
        let mut s = openflow::Session::open(target, self.opts.command_timeout).await?;
        let flows = s.dump_flows(acl::MARK, acl::MARK_MASK).await?;
        Ok(Some((s, flows)))
    }

    /// Commits `ops` with `next_cfg += 1` and waits until ovs-vswitchd applied it.
    async fn commit(&self, conn: &mut Connection, mut ops: Vec<Value>) -> Result<(), DeviceError> {
        ops.push(json!({"op": "mutate", "table": "Open_vSwitch", "where": [],
            "mutations": [["next_cfg", "+=", 1]]}));
        ops.push(
            json!({"op": "select", "table": "Open_vSwitch", "where": [], "columns": ["next_cfg"]}),
        );
        let results = conn.transact(DB, &ops).await?;
        let target = results
            .last()
            .map(rows)
            .and_then(|r| r.first().and_then(|r| r["next_cfg"].as_i64()))
            .ok_or_else(|| DeviceError::Protocol {
                during: "reading next_cfg".into(),
                cause: Cause::msg("no Open_vSwitch row"),
            })?;
        self.wait_cur_cfg(conn, target).await
    }

    /// Polls `cur_cfg` until ovs-vswitchd has caught up with `target`.
    async fn wait_cur_cfg(&self, conn: &mut Connection, target: i64) -> Result<(), DeviceError> {
        let deadline = Instant::now() + self.opts.command_timeout;
        let mut pause = Duration::from_micros(500);
        loop {
            let r = conn
                .transact(DB, &[json!({"op": "select", "table": "Open_vSwitch", "where": [], "columns": ["cur_cfg"]})])
                .await?;
            let cur = rows(&r[0])
                .first()
                .and_then(|r| r["cur_cfg"].as_i64())
                .unwrap_or(0);
            if cur >= target {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(DeviceError::Timeout {
                    during: format!(
                        "waiting for ovs-vswitchd to apply configuration {target} (cur_cfg {cur}); is ovs-vswitchd running?"
                    ),
                    after: self.opts.command_timeout,
                });
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(20));
        }
    }

    /// The port-mods of `changes`.
    fn admin_requests(
        changes: &[(bool, Vec<IfaceRow>)],
    ) -> Result<Vec<(String, bool, openflow::Request)>, DeviceError> {
        let mut mods = Vec::new();
        for (down, ifaces) in changes {
            for f in ifaces {
                let (Some(ofport), Some(mac)) = (
                    f.ofport
                        .and_then(|p| u32::try_from(p).ok())
                        .filter(|p| (1..0xff00).contains(p)),
                    f.mac.as_deref().and_then(ofwire::parse_mac),
                ) else {
                    return Err(DeviceError::CommandRejected {
                        command: format!("OpenFlow port-mod of {}", f.name),
                        output:
                            "the interface has no OpenFlow port number or MAC (is it attached?)"
                                .into(),
                    });
                };
                mods.push((
                    f.name.clone(),
                    *down,
                    openflow::Request {
                        what: format!("OpenFlow port-mod of {}", f.name),
                        bytes: ofwire::port_mod(ofport, mac, *down, 0),
                    },
                ));
            }
        }
        Ok(mods)
    }

    /// Waits until OVSDB reports the admin state the port-mods of `names` asked for
    /// (ovs-vswitchd writes it shortly after), so the read-back that follows sees it.
    async fn wait_admin(
        &self,
        conn: &mut Connection,
        names: &[(String, bool)],
    ) -> Result<(), DeviceError> {
        if names.is_empty() {
            return Ok(());
        }
        let deadline = Instant::now() + self.opts.command_timeout;
        loop {
            let ops: Vec<Value> = names
                .iter()
                .map(|(name, _)| {
                    json!({"op": "select", "table": "Interface",
                    "where": [["name", "==", name]], "columns": ["admin_state"]})
                })
                .collect();
            let r = conn.transact(DB, &ops).await?;
            let pending = names.iter().zip(&r).filter(|((_, down), res)| {
                let state = rows(res)
                    .first()
                    .and_then(|row| string(&row["admin_state"]));
                state.as_deref() != Some(if *down { "down" } else { "up" })
            });
            if pending.count() == 0 {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(DeviceError::Timeout {
                    during: "waiting for ovs-vswitchd to report the new admin state".into(),
                    after: self.opts.command_timeout,
                });
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// The bond Ports of `groups` on the bridge, read by name.
    async fn read_bonds(
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
    async fn read_ifaces(
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

    async fn apply_all(
        &self,
        conn: &mut Connection,
        ops: &[PortOperation],
    ) -> Result<Vec<PortResult>, DeviceError> {
        let ports: Vec<PortName> = ops.iter().map(|o| o.port().clone()).collect();
        let reads = self.read_rows(conn, &ports).await?;
        let mut of = self.open_openflow().await?;
        let mut outcomes: Vec<Option<Result<PortChange, DeviceError>>> =
            Vec::with_capacity(ops.len());
        let mut plans: Vec<Option<Plan>> = Vec::with_capacity(ops.len());
        let targets: Vec<DesiredPort> = ops.iter().map(PortOperation::target).collect();
        // Ports that are, or are to be, bond members: planned together (bond::plan).
        let mut lag_rows: Vec<(usize, PortRow)> = Vec::new();
        let caps = self.capabilities();
        for (i, (op, read)) in ops.iter().zip(reads).enumerate() {
            let current = of
                .as_ref()
                .map(|(_, flows)| flows_of(flows, op.port()))
                .unwrap_or_default();
            let target = &targets[i];
            if let Ok(row) = &read
                && (row.member || target.lag.is_some())
            {
                if let Some(c) = caps.missing_for(target).first() {
                    outcomes.push(Some(Err(DeviceError::Unsupported { capability: *c })));
                    plans.push(None);
                    continue;
                }
                // Its flows go (an ACL and a bond do not mix; the validator
                // refuses both at once).
                let flows = if current.is_empty() || !target.acl.is_empty() {
                    Vec::new()
                } else {
                    vec![openflow::Request {
                        what: format!("OpenFlow ACL of {}", op.port()),
                        bytes: ofwire::flow_delete(
                            acl::port_cookie(op.port().as_str()),
                            acl::PORT_MASK,
                            0,
                        ),
                    }]
                };
                lag_rows.push((i, row.clone()));
                outcomes.push(None);
                plans.push(Some(Plan {
                    ops: Vec::new(),
                    admin: None,
                    flows,
                }));
                continue;
            }
            match read.and_then(|row| self.plan(target, &row, &current)) {
                Err(e) => {
                    outcomes.push(Some(Err(e)));
                    plans.push(None);
                }
                Ok(p) if p.ops.is_empty() && p.admin.is_none() && p.flows.is_empty() => {
                    outcomes.push(Some(Ok(PortChange::Unchanged)));
                    plans.push(None);
                }
                Ok(p) => {
                    outcomes.push(None);
                    plans.push(Some(p));
                }
            }
        }
        // The groups: one unit of the transaction.
        let mut lag_ops: Vec<Value> = Vec::new();
        let mut lag_changed: Vec<(usize, bool)> = Vec::new();
        if !lag_rows.is_empty() {
            let groups: BTreeSet<u16> = lag_rows
                .iter()
                .filter_map(|(i, _)| targets[*i].lag.map(|l| l.group.get()))
                .collect();
            let bonds = self.read_bonds(conn, &groups).await?;
            let members: Vec<bond::Member<'_>> = lag_rows
                .iter()
                .map(|(i, row)| bond::Member {
                    desired: &targets[*i],
                    row,
                })
                .collect();
            match bond::plan(&self.opts.bridge, &members, &bonds) {
                Ok((json_ops, changed)) => {
                    lag_ops = json_ops;
                    lag_changed = lag_rows.iter().map(|(i, _)| *i).zip(changed).collect();
                }
                Err(e) => {
                    for (i, _) in &lag_rows {
                        outcomes[*i] = Some(Err(e.clone()));
                        plans[*i] = None;
                    }
                }
            }
        }
        let mut all: Vec<Value> = plans.iter().flatten().flat_map(|p| p.ops.clone()).collect();
        all.extend(lag_ops.iter().cloned());
        if !all.is_empty() {
            match self.commit(conn, all).await {
                Ok(()) => {}
                Err(DeviceError::CommandRejected { .. })
                    if plans.iter().flatten().filter(|p| !p.ops.is_empty()).count()
                        + usize::from(!lag_ops.is_empty())
                        > 1 =>
                {
                    // Rolled back whole: retry port by port (a group as one) to
                    // find the culprit.
                    for (i, plan) in plans.iter_mut().enumerate() {
                        let Some(p) = plan else { continue };
                        if p.ops.is_empty() {
                            continue;
                        }
                        if let Err(e) = self.commit(conn, p.ops.clone()).await {
                            outcomes[i] = Some(Err(e));
                            *plan = None;
                        }
                    }
                    if !lag_ops.is_empty()
                        && let Err(e) = self.commit(conn, lag_ops.clone()).await
                    {
                        for (i, _) in &lag_changed {
                            outcomes[*i] = Some(Err(e.clone()));
                            plans[*i] = None;
                        }
                    }
                }
                Err(DeviceError::CommandRejected { command, output }) if !lag_ops.is_empty() => {
                    for (i, _) in &lag_changed {
                        outcomes[*i] = Some(Err(DeviceError::CommandRejected {
                            command: command.clone(),
                            output: output.clone(),
                        }));
                        plans[*i] = None;
                    }
                }
                Err(e) => return Err(e),
            }
        }
        // Members' admin state, from their interfaces as they are now.
        let mut untouched: BTreeSet<usize> = lag_changed
            .iter()
            .filter(|(_, changed)| !changed)
            .map(|(i, _)| *i)
            .collect();
        if of.is_some() {
            // One read of every member interface still to be decided.
            let live: Vec<&(usize, PortRow)> = lag_rows
                .iter()
                .filter(|(i, _)| outcomes[*i].is_none())
                .collect();
            let names: Vec<String> = live
                .iter()
                .flat_map(|(_, row)| row.ifaces.iter().map(|f| f.name.clone()))
                .collect();
            let now: HashMap<String, IfaceRow> = self
                .read_ifaces(conn, &names)
                .await?
                .into_iter()
                .map(|f| (f.name.clone(), f))
                .collect();
            for (i, row) in live {
                let down = targets[*i].admin == AdminState::Down;
                let wrong: Vec<IfaceRow> = row
                    .ifaces
                    .iter()
                    .filter_map(|f| now.get(&f.name).cloned())
                    .filter(|f| f.admin_state.as_deref() != Some(if down { "down" } else { "up" }))
                    .collect();
                if let Some(p) = plans[*i].as_mut()
                    && !wrong.is_empty()
                {
                    p.admin = Some((down, wrong));
                }
            }
        }
        for (i, _) in &lag_rows {
            if plans[*i]
                .as_ref()
                .is_some_and(|p| p.admin.is_some() || !p.flows.is_empty())
            {
                untouched.remove(i);
            }
        }
        for i in untouched {
            if outcomes[i].is_none() {
                outcomes[i] = Some(Ok(PortChange::Unchanged));
                plans[i] = None;
            }
        }
        // Then OpenFlow: every port-mod and flow change, one barrier.
        let Some((session, _)) = &mut of else {
            return Ok(results(ops, outcomes));
        };
        let mut requests: Vec<(usize, openflow::Request)> = Vec::new();
        let mut admin_names: Vec<(usize, (String, bool))> = Vec::new();
        for (i, plan) in plans.iter().enumerate() {
            let Some(p) = plan else { continue };
            if outcomes[i].is_some() {
                continue;
            }
            if let Some(change) = &p.admin {
                match Self::admin_requests(std::slice::from_ref(change)) {
                    Ok(mods) => {
                        for (name, down, r) in mods {
                            admin_names.push((i, (name, down)));
                            requests.push((i, r));
                        }
                    }
                    Err(e) => {
                        outcomes[i] = Some(Err(e));
                        continue;
                    }
                }
            }
            requests.extend(p.flows.iter().map(|r| (i, r.clone())));
        }
        if !requests.is_empty() {
            let sent: Vec<openflow::Request> = requests.iter().map(|(_, r)| r.clone()).collect();
            let answers = session.run(&sent).await?;
            for ((i, r), answer) in requests.iter().zip(answers) {
                if let Err(text) = answer
                    && outcomes[*i].is_none()
                {
                    outcomes[*i] = Some(Err(DeviceError::CommandRejected {
                        command: r.what.clone(),
                        output: text,
                    }));
                }
            }
        }
        let waiting: Vec<(String, bool)> = admin_names
            .iter()
            .filter(|(i, _)| outcomes[*i].is_none())
            .map(|(_, n)| n.clone())
            .collect();
        if let Err(e) = self.wait_admin(conn, &waiting).await {
            for (i, _) in &admin_names {
                if outcomes[*i].is_none() {
                    outcomes[*i] = Some(Err(e.clone()));
                }
            }
        }
        Ok(results(ops, outcomes))
    }
}

/// The batch's results: a port with a plan and no error changed.
fn results(
    ops: &[PortOperation],
    outcomes: Vec<Option<Result<PortChange, DeviceError>>>,
) -> Vec<PortResult> {
    let outcomes = outcomes
        .into_iter()
        .map(|o| Some(o.unwrap_or(Ok(PortChange::Changed))))
        .collect();
    crate::device::batch_results(ops, outcomes)
}

#[async_trait]
impl Device for OvsSwitch {
    fn capabilities(&self) -> Capabilities {
        let mut caps = vec![
            Capability::AccessVlan,
            Capability::Trunk,
            Capability::NativeVlan,
            Capability::Description,
            Capability::Mtu,
            Capability::LinkAggregation,
            Capability::LacpPassive,
            Capability::StaticLag,
        ];
        if self.opts.openflow.is_some() {
            caps.push(Capability::Disable);
            caps.push(Capability::Acl);
            return Capabilities::new(caps).egress_acl_by_host_mac();
        }
        Capabilities::new(caps)
    }

    async fn apply_batch(&self, ops: &[PortOperation]) -> Result<Vec<PortResult>, DeviceError> {
        if ops.is_empty() {
            return Ok(Vec::new());
        }
        // Boxed: the batch's state is large, and a debug build's worker thread
        // stack is not.
        self.with_session(async |conn| Box::pin(self.apply_all(conn, ops)).await)
            .await
    }

    async fn get_ports(&self, ports: &[PortName]) -> Result<PortReads, DeviceError> {
        if ports.is_empty() {
            return Ok(Vec::new());
        }
        self.with_session(async |conn| {
            let rows = self.read_rows(conn, ports).await?;
            let flows = self.open_openflow().await?.map(|(_, flows)| flows);
            Ok(ports
                .iter()
                .zip(rows)
                .map(|(p, r)| {
                    let r = r.map(|row| {
                        let acl = flows
                            .as_ref()
                            .map(|all| acl::decode(&flows_of(all, p), &port_match(p, &row, None)));
                        observed(p, &row, flows.is_some(), acl)
                    });
                    (p.clone(), r)
                })
                .collect())
        })
        .await
    }

    fn heard(&self) -> Option<Heard> {
        Some(self.heard.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::rows::{unrecognised, vlans_of};
    use super::*;

    fn row(tag: Option<i64>, trunks: &[i64], mode: Option<&str>) -> PortRow {
        PortRow {
            uuid: "u".into(),
            tag,
            trunks: trunks.iter().copied().collect(),
            vlan_mode: mode.map(str::to_owned),
            description: None,
            ..PortRow::default()
        }
    }

    fn v(n: u16) -> VlanId {
        VlanId::new(n).unwrap()
    }

    #[test]
    fn every_written_form_reads_back_as_itself() {
        let forms = [
            VlanMode::Unconfigured,
            VlanMode::Access { vlan: v(10) },
            VlanMode::Trunk {
                native: None,
                allowed: [v(10), v(20)].into_iter().collect(),
            },
            VlanMode::Trunk {
                native: Some(v(5)),
                allowed: [v(10)].into_iter().collect(),
            },
            VlanMode::Trunk {
                native: Some(v(5)),
                allowed: VlanSet::new(),
            },
        ];
        for f in forms {
            let c = columns(&f).unwrap();
            let trunks: Vec<i64> = c.trunks.iter().copied().collect();
            assert_eq!(vlans_of(&row(c.tag, &trunks, c.vlan_mode)), f, "{c:?}");
        }
        // A native-only trunk names its VLAN in trunks: empty would mean all VLANs.
        let c = columns(&VlanMode::Trunk {
            native: Some(v(5)),
            allowed: VlanSet::new(),
        })
        .unwrap();
        assert_eq!(c.trunks.into_iter().collect::<Vec<_>>(), vec![5]);
        assert!(
            columns(&VlanMode::Trunk {
                native: None,
                allowed: VlanSet::new()
            })
            .is_err()
        );
    }

    #[test]
    fn forms_patchbay_never_writes_read_as_drift() {
        for r in [
            row(Some(5), &[], Some("native-tagged")),
            row(None, &[], Some("access")),
            row(None, &[], Some("trunk")),
            row(Some(5), &[10], Some("native-untagged")),
            row(Some(5), &[10], Some("access")),
            row(None, &[10], None),
            row(Some(4095), &[], Some("access")),
        ] {
            assert_eq!(vlans_of(&r), unrecognised(), "{r:?}");
        }
    }
}

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
//!
//! Why a client of our own: the OVSDB crates on crates.io are early — `ovsdb`
//! 0.0.6 (February 2024) calls itself heavily work in progress and wants Rust
//! models generated from the schema at build time; `ovsdb-client` 0.0.1 (March
//! 2025, ~270 lines) brings jsonrpsee's stack. RFC 7047's JSON-RPC is small
//! ([`rpc`]: one connection, requests by id, `echo` answered) and patchbay needs
//! only `transact` over a few columns. The OpenFlow side is likewise ours
//! ([`ofwire`]): the one OpenFlow crate (rust_ofp) speaks OpenFlow 1.0, without the
//! cookie masks and OXM port masks patchbay's ACL flows need.
//!
//! The rooms: this file (options, the [`Device`] impl); `ovsdb/read.rs` (rows
//! into observed ports); `ovsdb/plan.rs` (a port's operations and flows, pure);
//! `ovsdb/commit.rs` (one transaction per batch, waiting for the datapath);
//! `ovsdb/neighbor_source.rs` (learnt MACs); `rows`, `bond`, `acl`, `fdb` (the
//! tables' shapes), `rpc`, `openflow`, `ofwire` (the wires).

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

mod commit;
mod neighbor_source;
mod plan;
mod read;
pub use plan::offline_transaction;
use plan::*;

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
}

/// What Open vSwitch configures through patchbay: with an OpenFlow endpoint
/// (`openflow`), also disabling and ACLs (egress rules by the host's MAC).
pub fn capabilities_for(openflow: bool) -> Capabilities {
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
    if openflow {
        caps.push(Capability::Disable);
        caps.push(Capability::Acl);
        return Capabilities::new(caps).egress_acl_by_host_mac();
    }
    Capabilities::new(caps)
}

#[async_trait]
impl Device for OvsSwitch {
    fn capabilities(&self) -> Capabilities {
        capabilities_for(self.opts.openflow.is_some())
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

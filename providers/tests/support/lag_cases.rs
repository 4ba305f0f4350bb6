//! What the backend tests of link aggregation (tests/ssh_backend.rs,
//! tests/netconf_backend.rs, tests/ovsdb_backend.rs) build and read alike: a member
//! port of a group, a batch of Set operations, the outcomes of a batch as words.

#![allow(dead_code)]

use patchbay_providers::values::{LagGroup, PortName};
use patchbay_providers::{
    DesiredPort, LagMembership, LagMode, PortOperation, PortResult, VlanMode,
};

/// Port `name` as a member of group `group` in `mode`, carrying `vlans`, in a group
/// whose members are `members`.
pub fn member(
    name: PortName,
    group: i64,
    mode: LagMode,
    vlans: VlanMode,
    members: &[PortName],
) -> DesiredPort {
    let mut d = DesiredPort::clean(name);
    d.vlans = vlans;
    d.lag = Some(LagMembership {
        group: LagGroup::new(group).unwrap(),
        mode,
    });
    d.lag_members = members.iter().cloned().collect();
    d
}

/// One Set operation per port.
pub fn sets(ports: &[&DesiredPort]) -> Vec<PortOperation> {
    ports
        .iter()
        .map(|d| PortOperation::Set((*d).clone()))
        .collect()
}

/// Each port's outcome: `Changed`, `Unchanged`, or `error: …`.
pub fn outcomes(results: Vec<PortResult>) -> Vec<String> {
    results
        .into_iter()
        .map(|r| match r.outcome {
            Ok(c) => format!("{c:?}"),
            Err(e) => format!("error: {e}"),
        })
        .collect()
}

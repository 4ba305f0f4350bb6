//! What a batch would send to a device, worked out without the device: each
//! backend's own planning run against an assumed reading (the state patchbay last
//! established on each port) instead of one read from the switch. `patchbay plan`
//! shows these; what a device really holds differs where someone changed it by hand
//! (a device read shows that). Pure.
//!
//! - SSH CLI: the dialect's plan for each port ([`Dialect::plan`]) and the batch's
//!   script ([`Dialect::script`]): the lines one session types, in order, a
//!   link-aggregation group's aggregate block before its members and its removal
//!   after the last one leaving.
//! - Ansible: the variables the apply playbook is run with
//!   ([`crate::ansible::contract::apply_vars`]).
//! - NETCONF: the `<config>` of the one edit-config a batch sends, by the device
//!   model (each changing port's element, a group's aggregate entry before its first
//!   member and its removal after the last, the VLANs the assumed states do not
//!   carry already); the transaction around it (lock, validate, confirmed commit)
//!   depends on what the device announces and is not shown.
//! - Open vSwitch: the operations of the batch's one OVSDB transaction
//!   ([`crate::ovsdb::offline_transaction`]), a group's members moved in and out of
//!   its bond, rows selected by name where the device selects them by `_uuid`;
//!   OpenFlow (admin state, ACL flows) is not shown.
//!
//! A group's entries depend on the members that stay as well as those that move:
//! each function takes `others`, what the switch's other group members carry.
//!
//! What a batch starts from is the assumed state or, where a plan read the device
//! (`patchbay plan --read-devices`), the reading: the same planning either way.

use std::collections::{BTreeMap, BTreeSet};

use crate::cli::{Aggregates, Dialect, Reading};
use crate::device::PortOperation;
use crate::model::{DesiredPort, ObservedPort};
use crate::netconf::model::Model;
use crate::values::{LagGroup, PortName};

/// One port of a batch: what the device holds now (`None`: clean) — assumed (the
/// state patchbay last established, as a device that applied it reports it:
/// [`assumed`]) or read from the device — and the operation.
pub type Assumed = (Option<ObservedPort>, PortOperation);

/// What a device that carries `state` reports (`None`: clean).
pub fn assumed(state: Option<&DesiredPort>) -> Option<ObservedPort> {
    state.map(ObservedPort::from_desired)
}

/// What the device holds for `op`'s port: `now`, else a clean port.
fn now_of(now: &Option<ObservedPort>, op: &PortOperation) -> ObservedPort {
    now.clone()
        .unwrap_or_else(|| ObservedPort::from_desired(&DesiredPort::clean(op.port().clone())))
}

/// What a batch sends, as far as it is known without the device.
#[derive(Debug, Clone, PartialEq)]
pub enum Operations {
    /// Lines typed in one session, in order (configuration mode, VLANs, ports,
    /// leaving, saving).
    Lines(Vec<String>),
    /// The variables of one playbook run.
    Variables(serde_json::Value),
    /// The `<config>` elements of one NETCONF edit-config, rendered.
    Edit(Vec<String>),
    /// The operations of one OVSDB `transact` on `Open_vSwitch`.
    Transact(Vec<serde_json::Value>),
    /// Not worked out without the device, and why.
    NotRendered(&'static str),
}

/// The SSH CLI script of a batch through `dialect` (`save`: the provider's
/// `saveConfig`), from the assumed states; `others` are what the switch's other
/// group members carry. Planned as the device's batch is: each member line as its
/// state has it, an aggregate taken to exist with its members' VLANs while a member
/// is in it, and removed after the last member leaving it
/// ([`crate::cli::aggregates_to_remove`]).
pub fn cli_script(
    dialect: &Dialect,
    save: bool,
    batch: &[Assumed],
    others: &[DesiredPort],
) -> Vec<String> {
    let readings: Vec<Reading> = batch
        .iter()
        .map(|(now, op)| Reading::assumed(now_of(now, op)))
        .collect();
    // Each group's members before the batch, and the VLANs its aggregate carries.
    let mut on_device: BTreeMap<LagGroup, BTreeSet<PortName>> = BTreeMap::new();
    let mut aggregates = Aggregates::new();
    let held = readings
        .iter()
        .filter_map(|r| {
            Some((
                r.observed.lag.flatten()?,
                &r.observed.port,
                r.observed.vlans.clone(),
            ))
        })
        .chain(
            others
                .iter()
                .filter_map(|d| Some((d.lag?, &d.port, Some(d.vlans.clone())))),
        );
    for (m, port, vlans) in held {
        on_device.entry(m.group).or_default().insert(port.clone());
        aggregates.entry(m.group).or_insert(vlans);
    }
    for (_, op) in batch {
        if let Some(l) = op.target().lag {
            aggregates.entry(l.group).or_insert(None);
        }
    }
    let mut plans: Vec<_> = readings
        .iter()
        .zip(batch)
        .map(|(reading, (_, op))| dialect.plan(reading, &aggregates, &op.target()))
        .collect();
    let moves = |f: fn(&crate::cli::Plan) -> Option<LagGroup>| -> Vec<(PortName, LagGroup)> {
        plans
            .iter()
            .filter_map(|p| Some((p.port.clone()?, f(p)?)))
            .collect()
    };
    let (leaving, joining) = (moves(|p| p.leaves), moves(|p| p.joins));
    for group in crate::cli::aggregates_to_remove(&leaving, &joining, &on_device) {
        for plan in plans.iter_mut().filter(|x| x.leaves == Some(group)) {
            plan.removal = Some((group, dialect.removal_block(group)));
        }
    }
    dialect.script(&plans, save)
}

/// The `<config>` content of the edit-config a NETCONF batch sends through `model`
/// ([`crate::netconf::offline_edit`]: `others`, the switch's other group members),
/// rendered; empty when no port differs from its assumed state.
pub fn netconf_edit(model: &Model, batch: &[Assumed], others: &[DesiredPort]) -> Vec<String> {
    crate::netconf::offline_edit(model, batch, others)
        .iter()
        .map(|e| e.render())
        .collect()
}

/// The OVSDB transaction of a batch on a SmartNIC's Open vSwitch bridge `bridge`
/// (`others`: the bridge's other bond members).
pub fn ovsdb_transaction(bridge: &str, batch: &[Assumed], others: &[DesiredPort]) -> Operations {
    match crate::ovsdb::offline_transaction(bridge, batch, others) {
        Ok(ops) => Operations::Transact(ops),
        Err(_) => Operations::NotRendered("a port's VLANs cannot be written as OVSDB columns"),
    }
}

/// The Ansible apply playbook's variables for a batch.
pub fn ansible_variables(batch: &[Assumed]) -> serde_json::Value {
    let targets: Vec<DesiredPort> = batch.iter().map(|(_, op)| op.target()).collect();
    crate::ansible::contract::apply_vars(&targets)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{LagMembership, LagMode, VlanMode};
    use crate::values::{LagGroup, PortName, VlanId};
    use serde_json::json;

    fn access(port: &str, vlan: u16) -> DesiredPort {
        DesiredPort {
            vlans: VlanMode::Access {
                vlan: VlanId::new(vlan).unwrap(),
            },
            ..DesiredPort::clean(PortName::parse(port).unwrap())
        }
    }

    #[test]
    fn a_cli_batch_is_the_lines_the_dialect_plans_from_the_assumed_state() {
        let ios = crate::cli::dialect::for_os("ios").unwrap();
        let port = "GigabitEthernet1/0/1";
        // Already carrying it: nothing to type.
        let same = [(
            assumed(Some(&access(port, 100))),
            PortOperation::Set(access(port, 100)),
        )];
        assert!(cli_script(&ios, true, &same, &[]).is_empty());
        // Moved from 100 to 101: the port's lines, inside configuration mode, saved.
        let lines = cli_script(
            &ios,
            true,
            &[(
                assumed(Some(&access(port, 100))),
                PortOperation::Set(access(port, 101)),
            )],
            &[],
        );
        let text = lines.join("\n");
        assert!(text.contains("interface GigabitEthernet1/0/1"), "{text}");
        assert!(text.contains("switchport access vlan 101"), "{text}");
        assert!(
            lines
                .last()
                .is_some_and(|l| l.contains("write memory") || l.contains("copy")),
            "{text}"
        );
        // Without saving, no save line.
        let unsaved = cli_script(
            &ios,
            false,
            &[(
                assumed(Some(&access(port, 100))),
                PortOperation::Set(access(port, 101)),
            )],
            &[],
        );
        assert!(unsaved.len() < lines.len(), "{unsaved:?}");
    }

    #[test]
    fn a_netconf_batch_is_the_model_s_edit() {
        let els = crate::netconf::model::for_os("junos", Some("junos-els")).unwrap();
        let port = "ge-0/0/1";
        assert!(
            netconf_edit(
                &els,
                &[(
                    assumed(Some(&access(port, 100))),
                    PortOperation::Set(access(port, 100))
                )],
                &[]
            )
            .is_empty()
        );
        let edit = netconf_edit(
            &els,
            &[(
                assumed(Some(&access(port, 100))),
                PortOperation::Set(access(port, 101)),
            )],
            &[],
        )
        .join("");
        assert!(edit.contains("<name>ge-0/0/1</name>"), "{edit}");
        assert!(edit.contains("101"), "{edit}");
        // VLAN 101 is new to what the batch assumed: it is created in the same edit.
        assert!(edit.matches("101").count() >= 2, "{edit}");
    }

    #[test]
    fn an_ovsdb_batch_is_one_transaction_by_port_name() {
        let same = [(
            assumed(Some(&access("h1", 20))),
            PortOperation::Set(access("h1", 20)),
        )];
        assert_eq!(
            ovsdb_transaction("br0", &same, &[]),
            Operations::Transact(Vec::new())
        );
        let Operations::Transact(ops) = ovsdb_transaction(
            "br0",
            &[(
                assumed(Some(&access("h1", 20))),
                PortOperation::Set(access("h1", 21)),
            )],
            &[],
        ) else {
            panic!("a transaction")
        };
        assert_eq!(
            ops[0],
            serde_json::json!({"op": "update", "table": "Port",
                "where": [["name", "==", "h1"]],
                "row": {"tag": ["set", [21]], "trunks": ["set", []],
                        "vlan_mode": ["set", ["access"]]}})
        );
        // Closed by next_cfg += 1 and its read, as the device's batch is.
        assert_eq!(ops.len(), 3, "{ops:?}");
        assert_eq!(ops[1]["table"], "Open_vSwitch");
    }

    #[test]
    fn an_ansible_batch_is_its_playbook_variables() {
        let vars = ansible_variables(&[(
            None,
            PortOperation::Set(access("GigabitEthernet1/0/1", 100)),
        )]);
        assert_eq!(vars["patchbay_vlans"][0]["vlan_id"], 100, "{vars}");
        assert_eq!(vars["patchbay_ports"][0]["access_vlan"], 100, "{vars}");
    }

    fn member(port: &str, vlan: u16, group: i64) -> DesiredPort {
        DesiredPort {
            lag: Some(LagMembership {
                group: LagGroup::new(group).unwrap(),
                mode: LagMode::Active,
            }),
            ..access(port, vlan)
        }
    }

    /// Each port of `ports` moved from `from` to `to` (`None`: clean).
    fn moves(
        ports: &[&str],
        from: impl Fn(&str) -> Option<DesiredPort>,
        to: impl Fn(&str) -> Option<DesiredPort>,
    ) -> Vec<Assumed> {
        ports
            .iter()
            .map(|p| {
                let op = match to(p) {
                    Some(d) => PortOperation::Set(d),
                    None => PortOperation::Reset(PortName::parse(p).unwrap()),
                };
                (assumed(from(p).as_ref()), op)
            })
            .collect()
    }

    fn position(lines: &[String], what: &str) -> usize {
        lines
            .iter()
            .position(|l| l.trim() == what)
            .unwrap_or_else(|| panic!("{what:?} in {lines:#?}"))
    }

    #[test]
    fn a_cli_group_s_aggregate_comes_before_its_members_and_goes_after_the_last() {
        let ios = crate::cli::dialect::for_os("ios").unwrap();
        let (a, b) = ("GigabitEthernet1/0/1", "GigabitEthernet1/0/2");
        // Both join group 5 from single links: the aggregate first, then each member.
        let lines = cli_script(
            &ios,
            false,
            &moves(&[a, b], |p| Some(access(p, 30)), |p| Some(member(p, 30, 5))),
            &[],
        );
        let agg = position(&lines, "interface Port-channel5");
        assert!(
            agg < position(&lines, &format!("interface {a}")),
            "{lines:#?}"
        );
        assert_eq!(
            lines
                .iter()
                .filter(|l| l.contains("channel-group 5 mode active"))
                .count(),
            2,
            "{lines:#?}"
        );
        // A member already in it, unchanged, and the aggregate carrying the group's
        // VLANs: the joining port's lines only, no aggregate block.
        let lines = cli_script(
            &ios,
            false,
            &moves(&[b], |p| Some(access(p, 30)), |p| Some(member(p, 30, 5))),
            &[member(a, 30, 5)],
        );
        assert!(
            !lines.iter().any(|l| l.contains("Port-channel5")),
            "{lines:#?}"
        );
        // One leaves, the other stays: the aggregate stays.
        let lines = cli_script(
            &ios,
            false,
            &moves(&[b], |p| Some(member(p, 30, 5)), |p| Some(access(p, 30))),
            &[member(a, 30, 5)],
        );
        assert!(
            lines.iter().any(|l| l.contains("no channel-group")),
            "{lines:#?}"
        );
        assert!(
            !lines
                .iter()
                .any(|l| l.contains("no interface Port-channel5")),
            "{lines:#?}"
        );
        // The last ones leave: removed after both members' blocks.
        let lines = cli_script(
            &ios,
            false,
            &moves(&[a, b], |p| Some(member(p, 30, 5)), |_| None),
            &[],
        );
        let removal = position(&lines, "no interface Port-channel5");
        assert!(
            removal > position(&lines, &format!("interface {b}")),
            "{lines:#?}"
        );
    }

    #[test]
    fn a_netconf_group_s_aggregate_entry_comes_first_and_goes_with_the_last_member() {
        let els = crate::netconf::model::for_os("junos", Some("junos-els")).unwrap();
        let (a, b) = ("ge-0/0/1", "ge-0/0/2");
        let edit = netconf_edit(
            &els,
            &moves(&[a, b], |p| Some(access(p, 30)), |p| Some(member(p, 30, 5))),
            &[],
        )
        .join("");
        let at = |what: &str| {
            edit.find(what)
                .unwrap_or_else(|| panic!("{what} in {edit}"))
        };
        assert!(
            at("<name>ae5</name>") < at("<name>ge-0/0/1</name>"),
            "{edit}"
        );
        assert!(edit.contains("<lacp>"), "{edit}");
        // One leaves, one stays (unchanged, outside the batch): ae5 is kept.
        let edit = netconf_edit(
            &els,
            &moves(&[b], |p| Some(member(p, 30, 5)), |p| Some(access(p, 30))),
            &[member(a, 30, 5)],
        )
        .join("");
        assert!(edit.contains("<name>ge-0/0/2</name>"), "{edit}");
        assert!(!edit.contains("<name>ae5</name>"), "{edit}");
        // The last ones leave: ae5 removed, after both members.
        let edit = netconf_edit(
            &els,
            &moves(&[a, b], |p| Some(member(p, 30, 5)), |_| None),
            &[],
        )
        .join("");
        let ae5 = edit.find("<name>ae5</name>").expect(&edit);
        assert!(ae5 > edit.find("<name>ge-0/0/2</name>").unwrap(), "{edit}");
        assert!(
            edit[..ae5].rfind("operation=\"delete\"").is_some(),
            "{edit}"
        );
    }

    #[test]
    fn an_ovs_group_is_its_bond_created_with_the_first_members_and_deleted_with_the_last() {
        let transact = |batch: &[Assumed], others: &[DesiredPort]| {
            let Operations::Transact(ops) = ovsdb_transaction("br0", batch, others) else {
                panic!("a transaction")
            };
            ops
        };
        let ops = transact(
            &moves(
                &["h1", "h2"],
                |p| Some(access(p, 30)),
                |p| Some(member(p, 30, 5)),
            ),
            &[],
        );
        let bond = ops
            .iter()
            .find(|o| o["op"] == "insert" && o["row"]["name"] == "bond5")
            .unwrap_or_else(|| panic!("bond5 inserted: {ops:#?}"));
        assert_eq!(
            bond["row"]["interfaces"],
            json!([
                "set",
                [["uuid", "<Interface h1>"], ["uuid", "<Interface h2>"]]
            ]),
            "{ops:#?}"
        );
        assert_eq!(bond["row"]["tag"], json!(["set", [30]]), "{ops:#?}");
        // Each member's own Port leaves the bridge.
        for p in ["h1", "h2"] {
            assert!(
                ops.iter().any(|o| o["table"] == "Bridge"
                    && o["mutations"][0][1] == "delete"
                    && o["mutations"][0][2] == json!(["set", [["uuid", format!("<Port {p}>")]]])),
                "{p}: {ops:#?}"
            );
        }
        // h2 leaves, h1 stays: bond5 keeps h1's interface, selected by name; h2
        // gets a Port of its own.
        let ops = transact(
            &moves(&["h2"], |p| Some(member(p, 30, 5)), |p| Some(access(p, 30))),
            &[member("h1", 30, 5)],
        );
        let update = ops
            .iter()
            .find(|o| o["op"] == "update" && o["table"] == "Port")
            .unwrap_or_else(|| panic!("bond5 updated: {ops:#?}"));
        assert_eq!(
            update["where"],
            json!([["name", "==", "bond5"]]),
            "{ops:#?}"
        );
        assert_eq!(
            update["row"]["interfaces"],
            json!(["set", [["uuid", "<Interface h1>"]]]),
            "{ops:#?}"
        );
        assert!(
            ops.iter()
                .any(|o| o["op"] == "insert" && o["row"]["name"] == "h2"),
            "{ops:#?}"
        );
        // The last ones leave: the bond leaves the bridge.
        let ops = transact(
            &moves(&["h1", "h2"], |p| Some(member(p, 30, 5)), |_| None),
            &[],
        );
        assert!(
            ops.iter().any(|o| o["table"] == "Bridge"
                && o["mutations"][0][2] == json!(["set", [["uuid", "<Port bond5>"]]])),
            "{ops:#?}"
        );
    }
}

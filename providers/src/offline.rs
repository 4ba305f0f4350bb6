//! What a batch would send to a device, worked out without the device: each
//! backend's own planning run against an assumed reading (the state patchbay last
//! established on each port) instead of one read from the switch. `patchbay plan`
//! shows these; what a device really holds differs where someone changed it by hand
//! (a device read shows that). Pure.
//!
//! - SSH CLI: the dialect's plan for each port ([`Dialect::plan`]) and the batch's
//!   script ([`Dialect::script`]): the lines one session types, in order.
//! - Ansible: the variables the apply playbook is run with
//!   ([`crate::ansible::contract::apply_vars`]).
//! - NETCONF: the `<config>` of the one edit-config a batch sends, by the device
//!   model (each changing port's element, the VLANs it needs that the assumed states
//!   do not carry already); the transaction around it (lock, validate, confirmed
//!   commit) depends on what the device announces and is not shown. A
//!   link-aggregation group's aggregate entry is not worked out offline.
//! - Open vSwitch: the operations of the batch's one OVSDB transaction
//!   ([`crate::ovsdb::offline_transaction`]), rows selected by name where the device
//!   selects them by `_uuid`; OpenFlow (admin state, ACL flows) is not shown.
//!
//! What a batch starts from is the assumed state or, where a plan read the device
//! (`patchbay plan --read-devices`), the reading: the same planning either way.

use std::collections::{BTreeMap, BTreeSet};

use crate::cli::{Aggregates, Dialect, Reading};
use crate::device::PortOperation;
use crate::model::{DesiredPort, ObservedPort, diff};
use crate::netconf::model::Model;
use crate::values::{VlanId, VlanName};

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
/// `saveConfig`), from the assumed states.
pub fn cli_script(dialect: &Dialect, save: bool, batch: &[Assumed]) -> Vec<String> {
    let plans: Vec<_> = batch
        .iter()
        .map(|(now, op)| {
            let reading = Reading::of(now_of(now, op));
            dialect.plan(&reading, &Aggregates::default(), &op.target())
        })
        .collect();
    dialect.script(&plans, save)
}

/// The `<config>` content of the edit-config a NETCONF batch sends through
/// `model`, rendered; empty when no port differs from its assumed state.
pub fn netconf_edit(model: &Model, batch: &[Assumed]) -> Vec<String> {
    let existing: BTreeSet<VlanId> = batch
        .iter()
        .filter_map(|(now, _)| now.as_ref()?.vlans.as_ref())
        .flat_map(|v| v.vlans())
        .collect();
    let mut vlans: BTreeMap<VlanId, Option<VlanName>> = BTreeMap::new();
    let mut elements = Vec::new();
    for (now, op) in batch {
        let target = op.target();
        if diff(&target, &now_of(now, op)).is_empty() {
            continue;
        }
        elements.push(
            model
                .port_element(&target)
                .unwrap_or_else(|| model.remove_element(op.port())),
        );
        for v in target.vlans.vlans() {
            if !existing.contains(&v) {
                let slot = vlans.entry(v).or_insert(None);
                if slot.is_none() {
                    *slot = target.vlan_names.get(&v).cloned();
                }
            }
        }
    }
    if elements.is_empty() {
        return Vec::new();
    }
    let vlans: Vec<(VlanId, Option<VlanName>)> = vlans.into_iter().collect();
    model
        .edit(&vlans, elements)
        .iter()
        .map(|e| e.render())
        .collect()
}

/// The OVSDB transaction of a batch on a SmartNIC's Open vSwitch.
pub fn ovsdb_transaction(batch: &[Assumed]) -> Operations {
    match crate::ovsdb::offline_transaction(batch) {
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
    use crate::model::VlanMode;
    use crate::values::{PortName, VlanId};

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
        assert!(cli_script(&ios, true, &same).is_empty());
        // Moved from 100 to 101: the port's lines, inside configuration mode, saved.
        let lines = cli_script(
            &ios,
            true,
            &[(
                assumed(Some(&access(port, 100))),
                PortOperation::Set(access(port, 101)),
            )],
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
                )]
            )
            .is_empty()
        );
        let edit = netconf_edit(
            &els,
            &[(
                assumed(Some(&access(port, 100))),
                PortOperation::Set(access(port, 101)),
            )],
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
        assert_eq!(ovsdb_transaction(&same), Operations::Transact(Vec::new()));
        let Operations::Transact(ops) = ovsdb_transaction(&[(
            assumed(Some(&access("h1", 20))),
            PortOperation::Set(access("h1", 21)),
        )]) else {
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
}

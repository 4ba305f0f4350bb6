//! The CLI script builder: a batch's plans as the configuration lines a session
//! sends, each with the owner its failure falls on ([`LineOwner`]), grouped into the
//! writes they are sent in (range blocks and aggregates apart), then leaving
//! configuration mode and saving. Pure: what the lines are is the dialect's data
//! ([`Dialect`]); sending them is the session's (`cli/session.rs`). `--dry-run` prints
//! exactly this.

use std::collections::BTreeMap;

use super::{Dialect, Plan};
use crate::values::{LagGroup, PortName, VlanId, VlanName};

/// Whom a configuration line belongs to: a line the device rejects fails its owner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LineOwner {
    /// Entering configuration mode: its failure fails the batch.
    Session,
    /// Creating a VLAN: its failure fails every port that needs the VLAN.
    Vlan(VlanId),
    /// A line of the port at this index of the plans.
    Port(usize),
    /// A line of a range block: of every port at these indexes.
    Ports(Vec<usize>),
}

impl Dialect {
    /// The configuration lines of a batch, each with its owner: enter configuration
    /// mode, create the batch's VLANs once, then each port's blocks (`plans[i]` is the
    /// plan of port `i`; an empty plan adds nothing). Empty when every plan is. This
    /// is what is sent, and what `--dry-run` prints.
    pub fn configuration_lines(&self, plans: &[Plan]) -> Vec<(LineOwner, String)> {
        self.configuration_segments(plans)
            .into_iter()
            .flatten()
            .collect()
    }

    /// [`Self::configuration_lines`] in the writes they are sent in: the first holds
    /// entering configuration mode, the VLANs and every port block of its own; then
    /// one per range block. Where the dialect declares `interface_range`, ports
    /// whose plan is one interface block with identical lines share a range block
    /// (at most `max_ports` each, in the order of the plans); a range block goes in
    /// a write of its own so that a device refusing its first line — which sends
    /// its other lines to the configuration level, and its `exit` out of it — is
    /// set straight before anything else is sent.
    pub fn configuration_segments(&self, plans: &[Plan]) -> Vec<Vec<(LineOwner, String)>> {
        if plans.iter().all(Plan::is_empty) {
            return Vec::new();
        }
        let mut first = vec![(LineOwner::Session, self.session.configure.clone())];
        for (vlan, name) in batch_vlans(plans) {
            for line in self.create_vlan_lines(vlan, name.as_ref()) {
                first.push((LineOwner::Vlan(vlan), line));
            }
        }
        let mut segments = Vec::new();
        // Each aggregate block once, in a write of its own after the VLANs and
        // before every member block, owned by every port that needs it.
        let aggregates = shared_blocks(plans, |p| p.aggregate.as_ref());
        if !aggregates.is_empty() {
            segments.push(std::mem::take(&mut first));
            for (block, members) in aggregates {
                let owner = LineOwner::Ports(members);
                segments.push(block.iter().map(|l| (owner.clone(), l.clone())).collect());
            }
        }
        // Ports with identical interface lines, in order of first appearance.
        let mut groups: Vec<(&[String], Vec<usize>)> = Vec::new();
        if self.interface_range.is_some() {
            for (i, plan) in plans.iter().enumerate() {
                let Some(body) = self.interface_body(plan) else {
                    continue;
                };
                match groups.iter_mut().find(|(b, _)| *b == body) {
                    Some((_, members)) => members.push(i),
                    None => groups.push((body, vec![i])),
                }
            }
            groups.retain(|(_, members)| members.len() > 1);
        }
        let ranged: std::collections::BTreeSet<usize> =
            groups.iter().flat_map(|(_, m)| m.iter().copied()).collect();
        for (i, plan) in plans.iter().enumerate() {
            if ranged.contains(&i) {
                continue;
            }
            for line in plan.blocks.iter().flatten() {
                first.push((LineOwner::Port(i), line.clone()));
            }
        }
        // An aggregate removal once, after its members' blocks.
        for (block, members) in shared_blocks(plans, |p| p.removal.as_ref()) {
            let owner = LineOwner::Ports(members);
            first.extend(block.iter().map(|l| (owner.clone(), l.clone())));
        }
        segments.push(first);
        let max = self.interface_range.as_ref().map_or(1, |r| r.max_ports);
        for (body, members) in groups {
            for chunk in members.chunks(max) {
                let ports: Vec<&PortName> = chunk
                    .iter()
                    .filter_map(|&i| plans[i].port.as_ref())
                    .collect();
                let Some(enter) = self.range_enter(&ports) else {
                    continue;
                };
                let owner = LineOwner::Ports(chunk.to_vec());
                let mut seg = vec![(owner.clone(), enter)];
                seg.extend(body.iter().map(|l| (owner.clone(), l.clone())));
                seg.push((owner, self.session.exit.clone()));
                segments.push(seg);
            }
        }
        segments
    }

    /// The whole script for a batch of plans: [`Dialect::configuration_lines`], then
    /// leaving configuration mode and saving (when `save`). Empty when every plan is.
    pub fn script(&self, plans: &[Plan], save: bool) -> Vec<String> {
        let mut out: Vec<String> = self
            .configuration_lines(plans)
            .into_iter()
            .map(|(_, line)| line)
            .collect();
        if out.is_empty() {
            return out;
        }
        out.push(self.session.exit.clone());
        if save {
            for (step, _) in &self.save {
                out.push(step.command.clone());
                if let Some(a) = &step.answer {
                    out.push(a.clone());
                }
            }
        }
        out
    }
}

/// Blocks plans share by group (an aggregate's creation or removal): each block
/// once, in order of first appearance, with the indexes of the plans that have it.
fn shared_blocks<'p>(
    plans: &'p [Plan],
    block: impl Fn(&'p Plan) -> Option<&'p (LagGroup, Vec<String>)>,
) -> Vec<(&'p [String], Vec<usize>)> {
    let mut out: Vec<(LagGroup, &[String], Vec<usize>)> = Vec::new();
    for (i, plan) in plans.iter().enumerate() {
        let Some((group, lines)) = block(plan) else {
            continue;
        };
        match out.iter_mut().find(|(g, _, _)| g == group) {
            Some((_, _, members)) => members.push(i),
            None => out.push((*group, lines, vec![i])),
        }
    }
    out.into_iter().map(|(_, b, m)| (b, m)).collect()
}

/// The VLANs a batch needs, each once (the first name given wins).
fn batch_vlans(plans: &[Plan]) -> BTreeMap<VlanId, Option<VlanName>> {
    let mut all: BTreeMap<VlanId, Option<VlanName>> = BTreeMap::new();
    for plan in plans {
        for (vlan, name) in &plan.vlans {
            let slot = all.entry(*vlan).or_insert(None);
            if slot.is_none() {
                *slot = name.clone();
            }
        }
    }
    all
}

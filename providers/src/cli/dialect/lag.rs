//! Link aggregation in a CLI dialect (`lag:`), pure: what a port-channel member reads
//! as, which lines join, change and leave a group, when the aggregate interface goes,
//! and what puts a failed group back. Decides; does no I/O.
//!
//! The model is Cisco's, as the simulator here shows it:
//!
//! - The aggregate interface (`Port-channelN`, the `aggregate` template) carries the
//!   group's VLAN configuration; it is read with the dialect's own show commands, and
//!   a show the device refuses means the aggregate does not exist.
//! - A member carries the same VLAN lines as its aggregate (what real IOS shows after
//!   it propagates the aggregate's configuration, and what it needs to bundle a port
//!   at all) and a `channel-group N mode …` line (the `join` template of the mode).
//!   Its description and admin state stay its own.
//! - A member *reads* as a member of N only when its line names N in a known mode,
//!   the aggregate exists and carries exactly the member's VLANs. Anything else (no
//!   aggregate, other VLANs) reads as not a member, which is drift where patchbay
//!   wants a group, and is repaired by writing the aggregate and the member again.
//! - Joining: the aggregate block first (created, or changed to the group's VLANs),
//!   then each member's block: its VLAN lines, then the `join` line. Leaving: the
//!   `leave` line first, then the port's own new VLAN lines; the aggregate is removed
//!   (`remove`) after its last member leaves, which the running configuration tells
//!   (members are found by their `channel-group` lines, `members_from`).
//!
//! A group goes in one batch (the switch worker sees to it). A member that cannot be
//! read or configured fails its whole group before anything is sent; a line the
//! device refuses while the group is sent stops the group's later writes, and the
//! group's ports and aggregate are put back to what was read before the batch.

use std::collections::{BTreeMap, BTreeSet};

use regex::Regex;
use serde::Deserialize;

use super::{Dialect, DialectError, Values, compile, render};
use crate::model::{AdminState, DesiredPort, LagMembership, LagMode, ObservedPort, VlanMode};
use crate::values::{LagGroup, PortName};

/// The `lag:` section of a dialect file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct LagFile {
    /// The aggregate interface's name (`Port-channel{group}`).
    aggregate: String,
    /// The member line per LACP mode; a mode without one is not supported.
    join: JoinTemplates,
    /// Lines that take a member out of its group (`no channel-group`).
    leave: Vec<String>,
    /// Lines that remove the aggregate interface (`no interface Port-channel{group}`).
    remove: Vec<String>,
    /// Mode word the device shows in the member line -> mode.
    modes: BTreeMap<String, LagMode>,
    /// How the running configuration shows each interface's block: a regex whose
    /// first group is the interface name (`^interface (\S+)$`).
    members_from: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct JoinTemplates {
    active: Option<String>,
    passive: Option<String>,
    #[serde(rename = "static")]
    static_: Option<String>,
}

/// The loaded `lag:` section.
#[derive(Debug)]
pub(super) struct LagSpec {
    aggregate: String,
    join: JoinTemplates,
    leave: Vec<String>,
    remove: Vec<String>,
    modes: BTreeMap<String, LagMode>,
    members_from: Regex,
}

impl LagSpec {
    pub(super) fn load(file: &str, f: LagFile) -> Result<Self, DialectError> {
        if !f.aggregate.contains("{group}") {
            return Err(DialectError {
                file: file.into(),
                reason: "lag.aggregate must contain {group}".into(),
            });
        }
        Ok(Self {
            members_from: compile(file, "lag.members_from", &f.members_from)?,
            aggregate: f.aggregate,
            join: f.join,
            leave: f.leave,
            remove: f.remove,
            modes: f.modes,
        })
    }

    /// Whether the dialect has a member line for `mode`.
    pub(super) fn supports(&self, mode: LagMode) -> bool {
        self.join_template(mode).is_some()
    }

    fn join_template(&self, mode: LagMode) -> Option<&String> {
        match mode {
            LagMode::Active => self.join.active.as_ref(),
            LagMode::Passive => self.join.passive.as_ref(),
            LagMode::Static => self.join.static_.as_ref(),
        }
    }
}

/// The aggregates a batch touches, as read: group -> its VLANs, `None` where the
/// aggregate interface does not exist.
pub type Aggregates = BTreeMap<LagGroup, Option<VlanMode>>;

/// One port as the CLI read it: `observed` is what patchbay compares with the
/// desired state; the rest is what planning needs besides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reading {
    /// The port as compared (a member's link aggregation settled against its
    /// aggregate by [`Dialect::settle`]).
    pub observed: ObservedPort,
    /// The port's own VLAN lines.
    pub(super) own_vlans: VlanMode,
    /// The port's member line: group, and mode where the dialect knows the word.
    pub(super) channel: Option<(LagGroup, Option<LagMode>)>,
}

impl Reading {
    /// A reading that is just `observed` (no member line): for dialects and tests
    /// without link aggregation.
    pub fn of(observed: ObservedPort) -> Self {
        Self {
            own_vlans: observed.vlans.clone().unwrap_or(VlanMode::Unconfigured),
            observed,
            channel: None,
        }
    }

    /// The reading of a port that carries `observed` as patchbay leaves it: its VLAN
    /// lines those `observed` gives, and a member line for its group (an offline
    /// plan's assumption).
    pub fn assumed(observed: ObservedPort) -> Self {
        Self {
            own_vlans: observed.vlans.clone().unwrap_or(VlanMode::Unconfigured),
            channel: observed.lag.flatten().map(|m| (m.group, Some(m.mode))),
            observed,
        }
    }

    /// The group the port's member line names.
    pub fn channel_group(&self) -> Option<LagGroup> {
        self.channel.map(|(g, _)| g)
    }

    /// What puts the port back as it was read: its admin state, own VLANs,
    /// description, MTU and member line.
    pub fn restore_target(&self) -> DesiredPort {
        let o = &self.observed;
        let mut d = DesiredPort::clean(o.port.clone());
        d.admin = o.admin.unwrap_or(AdminState::Up);
        d.vlans = self.own_vlans.clone();
        d.mtu = o.mtu.flatten();
        d.description = o.description.clone().flatten();
        d.lag = self.channel.map(|(group, mode)| LagMembership {
            group,
            mode: mode.unwrap_or(LagMode::Active),
        });
        d
    }
}

/// What a port's plan does to link aggregation; the lines go into its interface
/// block (`leave` before the VLAN lines, `join` after them), the aggregate block
/// before every member block, the removal after them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct LagLines {
    pub(super) leave: Vec<String>,
    pub(super) join: Vec<String>,
    /// The aggregate's block, when it is absent or carries other VLANs.
    pub(super) aggregate: Option<(LagGroup, Vec<String>)>,
    /// The group the port leaves.
    pub(super) leaves: Option<LagGroup>,
}

impl Dialect {
    /// The aggregate interface of `group` (`Port-channel3`), where the dialect has
    /// link aggregation.
    pub fn aggregate_name(&self, group: LagGroup) -> Option<PortName> {
        let spec = self.lag.as_ref()?;
        PortName::parse(&render(&spec.aggregate, &Values::group(group))).ok()
    }

    /// The VLANs an aggregate's show output gives.
    pub fn aggregate_vlans(&self, group: LagGroup, output: &str) -> Option<VlanMode> {
        let name = self.aggregate_name(group)?;
        self.read(&name, output).observed.vlans
    }

    /// Settles a member's link aggregation against the aggregates read: a member of
    /// N in a known mode whose aggregate exists with exactly its VLANs; not a member
    /// otherwise. A dialect without link aggregation leaves it unread.
    pub fn settle(&self, reading: &mut Reading, aggregates: &Aggregates) {
        if self.lag.is_none() {
            return;
        }
        let member = match reading.channel {
            Some((group, Some(mode)))
                if aggregates.get(&group) == Some(&Some(reading.own_vlans.clone())) =>
            {
                Some(LagMembership { group, mode })
            }
            _ => None,
        };
        reading.observed.lag = Some(member);
    }

    /// The link-aggregation lines of one port's plan (empty without a `lag:`
    /// section or when nothing about it changes). `vlans_change` says whether the
    /// member's own VLAN lines change.
    pub(super) fn lag_lines(
        &self,
        reading: &Reading,
        aggregates: &Aggregates,
        desired: &DesiredPort,
    ) -> LagLines {
        let mut out = LagLines::default();
        let Some(spec) = &self.lag else {
            return out;
        };
        let want = desired.lag.map(|l| (l.group, Some(l.mode)));
        let line_changes = reading.channel != want;
        if line_changes && let Some((old, _)) = reading.channel {
            out.leave = spec
                .leave
                .iter()
                .map(|t| render(t, &Values::group(old)))
                .collect();
            if want.map(|(g, _)| g) != Some(old) {
                out.leaves = Some(old);
            }
        }
        let Some(lag) = desired.lag else {
            return out;
        };
        if line_changes && let Some(t) = spec.join_template(lag.mode) {
            out.join = vec![render(t, &Values::group(lag.group))];
        }
        let current = aggregates.get(&lag.group).cloned().flatten();
        if current.as_ref() != Some(&desired.vlans)
            && let Some(name) = self.aggregate_name(lag.group)
        {
            out.aggregate = Some((lag.group, self.aggregate_block(&name, current, desired)));
        }
        out
    }

    /// The block that creates (or changes) an aggregate to carry `desired`'s VLANs.
    fn aggregate_block(
        &self,
        name: &PortName,
        current: Option<VlanMode>,
        desired: &DesiredPort,
    ) -> Vec<String> {
        let from = current.unwrap_or(VlanMode::Unconfigured);
        let mut block = vec![render(&self.interface_enter, &Values::port(name))];
        block.extend(self.vlan_lines(&from, &desired.vlans));
        block.push(self.session.exit.clone());
        block
    }

    /// The block that removes `group`'s aggregate.
    pub fn removal_block(&self, group: LagGroup) -> Vec<String> {
        self.lag
            .as_ref()
            .map(|spec| {
                spec.remove
                    .iter()
                    .map(|t| render(t, &Values::group(group)))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The member ports of every group in the running configuration, by their
    /// member lines.
    pub fn channel_members(&self, running_config: &str) -> BTreeMap<LagGroup, BTreeSet<PortName>> {
        let mut out: BTreeMap<LagGroup, BTreeSet<PortName>> = BTreeMap::new();
        let Some(spec) = &self.lag else {
            return out;
        };
        let mut current: Option<PortName> = None;
        for line in running_config.lines().map(|l| l.trim_end_matches('\r')) {
            if let Some(c) = spec.members_from.captures(line) {
                current = c.get(1).and_then(|m| PortName::parse(m.as_str()).ok());
                continue;
            }
            if let Some(port) = &current
                && let Some((group, _)) = self.read(port, line).channel
            {
                out.entry(group).or_default().insert(port.clone());
            }
        }
        out
    }

    /// What puts an aggregate back as it was read before a failed batch: its
    /// removal when it did not exist, its VLANs when it did; nothing when it is as
    /// it was.
    pub fn aggregate_restore(
        &self,
        group: LagGroup,
        before: Option<&VlanMode>,
        now: Option<&VlanMode>,
    ) -> Vec<String> {
        match (before, now) {
            (None, None) => Vec::new(),
            (None, Some(_)) => self.removal_block(group),
            (Some(b), now) if now != Some(b) => {
                let Some(name) = self.aggregate_name(group) else {
                    return Vec::new();
                };
                let mut target = DesiredPort::clean(name.clone());
                target.vlans = b.clone();
                self.aggregate_block(&name, now.cloned(), &target)
            }
            _ => Vec::new(),
        }
    }
}

/// The aggregates to remove after a batch: those a port of the batch leaves and no
/// port stays in. `on_device` is [`Dialect::channel_members`] of the running
/// configuration before the batch; a port of it that does not leave stays, and so
/// does every port joining the group.
pub fn aggregates_to_remove(
    leaving: &[(PortName, LagGroup)],
    joining: &[(PortName, LagGroup)],
    on_device: &BTreeMap<LagGroup, BTreeSet<PortName>>,
) -> BTreeSet<LagGroup> {
    let mut out = BTreeSet::new();
    for (_, group) in leaving {
        let leavers: BTreeSet<&PortName> = leaving
            .iter()
            .filter(|(_, g)| g == group)
            .map(|(p, _)| p)
            .collect();
        let stays = on_device
            .get(group)
            .is_some_and(|m| m.iter().any(|p| !leavers.contains(p)))
            || joining.iter().any(|(_, g)| g == group);
        if !stays {
            out.insert(*group);
        }
    }
    out
}

/// The mode a member line's word names, where the dialect knows it.
pub(super) fn mode_of(spec: &LagSpec, word: &str) -> Option<LagMode> {
    spec.modes.get(word).copied()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::dialect::for_os;
    use crate::values::VlanId;

    fn g(n: i64) -> LagGroup {
        LagGroup::new(n).unwrap()
    }
    fn p(name: &str) -> PortName {
        PortName::parse(name).unwrap()
    }
    fn access(v: u16) -> VlanMode {
        VlanMode::Access {
            vlan: VlanId::new(v).unwrap(),
        }
    }
    const MEMBER: &str =
        " switchport access vlan 30\n switchport mode access\n channel-group 5 mode active\n";

    #[test]
    fn a_member_reads_as_one_only_with_its_aggregate_carrying_its_vlans() {
        let ios = for_os("ios").unwrap();
        let active = Some(LagMembership {
            group: g(5),
            mode: LagMode::Active,
        });
        // (what, member's show output, its aggregate as read, what it reads as)
        type Case<'a> = (
            &'a str,
            &'a str,
            Option<Option<VlanMode>>,
            Option<LagMembership>,
        );
        let cases: [Case; 5] = [
            ("consistent", MEMBER, Some(Some(access(30))), active),
            ("aggregate absent", MEMBER, Some(None), None),
            (
                "aggregate on other VLANs",
                MEMBER,
                Some(Some(access(31))),
                None,
            ),
            (
                "a mode word the dialect does not know",
                " switchport access vlan 30\n switchport mode access\n channel-group 5 mode desirable\n",
                Some(Some(access(30))),
                None,
            ),
            (
                "no member line",
                " switchport access vlan 30\n switchport mode access\n",
                Some(Some(access(30))),
                None,
            ),
        ];
        for (what, text, aggregate, want) in cases {
            let mut r = ios.read(&p("FastEthernet0/1"), text);
            let aggregates: Aggregates = aggregate.map(|a| (g(5), a)).into_iter().collect();
            ios.settle(&mut r, &aggregates);
            assert_eq!(r.observed.lag, Some(want), "{what}");
            assert_eq!(r.observed.vlans, Some(access(30)), "{what}");
        }
        // Dialects without a `lag:` section cannot read it.
        let eos = for_os("eos").unwrap();
        let mut r = eos.read(&p("Ethernet1"), MEMBER);
        eos.settle(&mut r, &Aggregates::new());
        assert_eq!(r.observed.lag, None);
    }

    fn desired(group: Option<i64>, vlans: VlanMode) -> DesiredPort {
        let mut d = DesiredPort::clean(p("FastEthernet0/1"));
        d.vlans = vlans;
        d.lag = group.map(|n| LagMembership {
            group: g(n),
            mode: LagMode::Active,
        });
        d
    }

    #[test]
    fn joining_changing_and_leaving_send_the_lines_in_their_order() {
        let ios = for_os("ios").unwrap();
        let clean = ios.read(&p("FastEthernet0/1"), "");
        let member = |aggregate: Option<VlanMode>| {
            let mut r = ios.read(&p("FastEthernet0/1"), MEMBER);
            let a: Aggregates = [(g(5), aggregate)].into_iter().collect();
            ios.settle(&mut r, &a);
            (r, a)
        };
        // Joining from clean, the aggregate absent: its block (created with the
        // VLANs), the member's VLAN lines, then its member line.
        let absent: Aggregates = [(g(5), None)].into_iter().collect();
        let plan = ios.plan(&clean, &absent, &desired(Some(5), access(30)));
        assert_eq!(
            plan.aggregate,
            Some((
                g(5),
                vec![
                    "interface Port-channel5".into(),
                    "switchport mode access".into(),
                    "switchport access vlan 30".into(),
                    "exit".into()
                ]
            ))
        );
        assert_eq!(
            plan.blocks,
            [[
                "interface FastEthernet0/1",
                "switchport mode access",
                "switchport access vlan 30",
                "channel-group 5 mode active",
                "exit"
            ]]
        );
        assert_eq!((plan.joins, plan.leaves), (Some(g(5)), None));

        // A consistent member: nothing.
        let (r, a) = member(Some(access(30)));
        assert!(ios.plan(&r, &a, &desired(Some(5), access(30))).is_empty());

        // The aggregate drifted: its block alone.
        let (r, a) = member(Some(access(31)));
        let plan = ios.plan(&r, &a, &desired(Some(5), access(30)));
        assert!(plan.blocks.is_empty(), "{plan:?}");
        assert_eq!(
            plan.aggregate.map(|(_, b)| b),
            Some(vec![
                "interface Port-channel5".to_owned(),
                "switchport access vlan 30".into(),
                "exit".into()
            ])
        );

        // Leaving: the member line goes first, then its own VLANs.
        let (r, a) = member(Some(access(30)));
        let plan = ios.plan(&r, &a, &desired(None, VlanMode::Unconfigured));
        assert_eq!(
            plan.blocks,
            [[
                "interface FastEthernet0/1",
                "no channel-group",
                "no switchport access vlan",
                "no switchport mode",
                "exit"
            ]]
        );
        assert_eq!(
            (plan.joins, plan.leaves, plan.aggregate),
            (None, Some(g(5)), None)
        );

        // Moving to another group: leave, then join; the new aggregate first.
        let (r, mut a) = member(Some(access(30)));
        a.insert(g(6), None);
        let plan = ios.plan(&r, &a, &desired(Some(6), access(30)));
        assert_eq!(
            plan.blocks,
            [[
                "interface FastEthernet0/1",
                "no channel-group",
                "channel-group 6 mode active",
                "exit"
            ]]
        );
        assert_eq!(
            (plan.leaves, plan.aggregate.map(|(g, _)| g)),
            (Some(g(5)), Some(g(6)))
        );
    }

    #[test]
    fn an_aggregate_goes_when_no_member_stays_in_it() {
        let ios = for_os("ios").unwrap();
        let running = "interface FastEthernet0/1\n channel-group 5 mode active\n!\n\
                       interface FastEthernet0/2\n channel-group 5 mode active\n!\n\
                       interface FastEthernet0/3\n channel-group 6 mode active\n!\n\
                       interface FastEthernet0/4\n!\nend\n";
        let on_device = ios.channel_members(running);
        assert_eq!(on_device[&g(5)].len(), 2);
        assert_eq!(
            on_device[&g(6)],
            [p("FastEthernet0/3")].into_iter().collect()
        );
        // (what, ports leaving, ports joining, aggregates removed)
        type Moves<'a> = Vec<(&'a str, i64)>;
        let cases: [(&str, Moves, Moves, Vec<i64>); 5] = [
            (
                "one of two leaves",
                vec![("FastEthernet0/1", 5)],
                vec![],
                vec![],
            ),
            (
                "both leave",
                vec![("FastEthernet0/1", 5), ("FastEthernet0/2", 5)],
                vec![],
                vec![5],
            ),
            (
                "the only one leaves",
                vec![("FastEthernet0/3", 6)],
                vec![],
                vec![6],
            ),
            (
                "the only one leaves as another joins",
                vec![("FastEthernet0/3", 6)],
                vec![("FastEthernet0/4", 6)],
                vec![],
            ),
            ("a port in no group leaves nothing", vec![], vec![], vec![]),
        ];
        for (what, leaving, joining, want) in cases {
            let pairs = |v: &[(&str, i64)]| -> Vec<(PortName, LagGroup)> {
                v.iter().map(|(n, k)| (p(n), g(*k))).collect()
            };
            let got = aggregates_to_remove(&pairs(&leaving), &pairs(&joining), &on_device);
            let want: BTreeSet<LagGroup> = want.into_iter().map(g).collect();
            assert_eq!(got, want, "{what}");
        }
        assert_eq!(ios.removal_block(g(5)), ["no interface Port-channel5"]);
    }

    #[test]
    fn putting_back_restores_the_port_and_its_aggregate_as_read() {
        let ios = for_os("ios").unwrap();
        let r = ios.read(&p("FastEthernet0/1"), " description web\n shutdown\n switchport access vlan 30\n switchport mode access\n channel-group 5 mode active\n");
        let t = r.restore_target();
        assert_eq!(t.admin, AdminState::Down);
        assert_eq!(t.vlans, access(30));
        assert_eq!(t.description.as_ref().map(|d| d.as_str()), Some("web"));
        assert_eq!(t.lag.map(|l| l.group), Some(g(5)));
        // An aggregate that did not exist is removed; one that did gets its VLANs back.
        assert_eq!(
            ios.aggregate_restore(g(5), None, Some(&access(30))),
            ["no interface Port-channel5"]
        );
        assert_eq!(
            ios.aggregate_restore(g(5), Some(&access(30)), Some(&access(40))),
            [
                "interface Port-channel5",
                "switchport access vlan 30",
                "exit"
            ]
        );
        assert!(
            ios.aggregate_restore(g(5), Some(&access(30)), Some(&access(30)))
                .is_empty()
        );
        assert!(ios.aggregate_restore(g(5), None, None).is_empty());
    }
}

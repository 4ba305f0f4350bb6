//! The link-aggregation lobby's decisions: when a held group's changes go to the
//! device as one batch, keep waiting, or fail naming the members that never came
//! ([`group_verdict`]), and which members are missing ([`missing`]). Pure: the times
//! are passed in; the switch worker (`crate::worker`, its `Lobby`) holds the changes
//! and acts on the verdicts. Table-tested. The rules are the worker module's
//! "Link aggregation" paragraph.

use std::collections::BTreeSet;
use std::time::Duration;

use patchbay_model::DesiredPort;
use patchbay_model::values::PortName;

/// What the lobby does with one held group now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GroupVerdict {
    /// Every member is there (and a new group has gathered): send it.
    Go,
    /// Keep holding.
    Hold,
    /// Held for the whole hold and still incomplete: fail it, naming these members.
    GiveUp(Vec<String>),
}

/// The verdict on a held group: `missing` members (see [`missing`]), whether the
/// group already has a member on the device (`established`: a tracked member with
/// the group), when its first and latest changes arrived, the time, and the
/// worker's gather and hold (see the module docs). Pure.
pub fn group_verdict<I>(
    missing: &[PortName],
    established: bool,
    since: I,
    last: I,
    now: I,
    gather: Duration,
    hold: Duration,
) -> GroupVerdict
where
    I: Copy + Ord + std::ops::Add<Duration, Output = I>,
{
    let gathered = established || now >= last + gather;
    if missing.is_empty() && gathered {
        GroupVerdict::Go
    } else if now >= since + hold {
        if missing.is_empty() {
            GroupVerdict::Go
        } else {
            GroupVerdict::GiveUp(missing.iter().map(ToString::to_string).collect())
        }
    } else {
        GroupVerdict::Hold
    }
}

/// The members named by the held `targets` of one group (the desired states of its
/// held changes, oldest first) that have neither a change among them nor a tracked
/// desired state with the same group settings as the newest change.
pub fn missing(targets: &[DesiredPort], tracked: &[DesiredPort]) -> Vec<PortName> {
    let Some(newest) = targets.last() else {
        return Vec::new();
    };
    let present: BTreeSet<&PortName> = targets.iter().map(|d| &d.port).collect();
    let named: BTreeSet<&PortName> = targets.iter().flat_map(|d| &d.lag_members).collect();
    named
        .into_iter()
        .filter(|m| !present.contains(m))
        .filter(|m| {
            !tracked
                .iter()
                .any(|d| &&d.port == m && d.same_group_settings(newest))
        })
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use patchbay_model::values::LagGroup;
    use patchbay_model::{LagMembership, LagMode};

    use super::*;

    fn p(n: &str) -> PortName {
        PortName::parse(n).unwrap()
    }

    #[test]
    fn a_held_group_goes_when_complete_and_gathered_and_gives_up_naming_the_missing() {
        let t0 = std::time::Instant::now();
        let s = |ms: u64| t0 + Duration::from_millis(ms);
        let (gather, hold) = (Duration::from_secs(1), Duration::from_secs(30));
        let gi2 = [p("Gi0/2")];
        /// Missing members, established, since, last arrival, now (ms) -> verdict.
        type Row<'a> = (&'a [PortName], bool, u64, u64, u64, GroupVerdict);
        let rows: [Row<'_>; 7] = [
            // A new group waits a gather after its latest change, even complete.
            (&[], false, 0, 0, 500, GroupVerdict::Hold),
            (&[], false, 0, 0, 1000, GroupVerdict::Go),
            (&[], false, 0, 800, 1500, GroupVerdict::Hold),
            // A group already on the device goes as soon as it is complete.
            (&[], true, 0, 0, 0, GroupVerdict::Go),
            // Incomplete: held, then given up naming what is missing.
            (&gi2, true, 0, 0, 29_000, GroupVerdict::Hold),
            (
                &gi2,
                false,
                0,
                0,
                30_000,
                GroupVerdict::GiveUp(vec!["Gi0/2".into()]),
            ),
            // Complete at the end of the hold: it goes, never failed with nothing
            // missing.
            (&[], false, 0, 29_900, 30_000, GroupVerdict::Go),
        ];
        for (i, (missing, established, since, last, now, want)) in rows.into_iter().enumerate() {
            assert_eq!(
                group_verdict(
                    missing,
                    established,
                    s(since),
                    s(last),
                    s(now),
                    gather,
                    hold
                ),
                want,
                "row {i}"
            );
        }
    }

    fn member(name: &str, group: i64, mode: LagMode, members: &[&str]) -> DesiredPort {
        let mut d = DesiredPort::clean(p(name));
        d.lag = Some(LagMembership {
            group: LagGroup::new(group).unwrap(),
            mode,
        });
        d.lag_members = members.iter().map(|m| p(m)).collect();
        d
    }

    #[test]
    fn the_missing_members_are_those_named_with_neither_a_change_nor_a_tracked_twin() {
        let a = LagMode::Active;
        let named = ["Gi0/1", "Gi0/2", "Gi0/3"];
        let g1 = member("Gi0/1", 1, a, &named);
        let g2 = member("Gi0/2", 1, a, &named);
        let tracked_same = member("Gi0/3", 1, a, &named);
        let tracked_other_mode = member("Gi0/3", 1, LagMode::Passive, &named);
        let names = |v: Vec<PortName>| v.iter().map(ToString::to_string).collect::<Vec<_>>();
        // (held changes, tracked, missing)
        let rows: Vec<(Vec<DesiredPort>, Vec<DesiredPort>, Vec<&str>)> = vec![
            (vec![], vec![], vec![]),
            (vec![g1.clone()], vec![], vec!["Gi0/2", "Gi0/3"]),
            (vec![g1.clone(), g2.clone()], vec![], vec!["Gi0/3"]),
            // A member already on the device with the same group settings counts.
            (vec![g1.clone(), g2.clone()], vec![tracked_same], vec![]),
            // One with other settings (another LACP mode) does not.
            (
                vec![g1.clone(), g2.clone()],
                vec![tracked_other_mode],
                vec!["Gi0/3"],
            ),
        ];
        for (i, (held, tracked, want)) in rows.into_iter().enumerate() {
            assert_eq!(names(missing(&held, &tracked)), want, "row {i}");
        }
    }
}

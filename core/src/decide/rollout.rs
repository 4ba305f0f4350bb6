//! Rollouts in waves (issue 57, first part): which ports a change of a shared object
//! reaches in which wave, and whether a tenant's rollout policy stays within the
//! limits the infra team set. Pure, table-tested. Nothing here runs a rollout yet:
//! the controller that commits waves, gates them and rolls them back comes next.
//!
//! The shape follows a Deployment's rolling update, with a port as the unit:
//! - a **canary** first: a number of ports, or the ports of one switch;
//! - then waves of at most `maxUnavailable` ports overall and at most
//!   `maxUnavailablePerSwitch` on any one switch, each a count or a percentage
//!   (Kubernetes' int-or-percent: a percentage of the ports the rollout reaches,
//!   rounded down, and never less than one, so a rollout always moves).
//!
//! Ports are taken in a stable order (switch, then port name) so the same change
//! gives the same waves in every process, which lets an operator killed mid-rollout
//! resume from the wave it stored. A wave takes from the switches in turn, so it
//! spreads over switches instead of emptying one before the next.

use std::collections::BTreeMap;

/// A count of ports, or a percentage of the ports a rollout reaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Amount {
    /// This many ports.
    Count(u32),
    /// This percentage (0–100) of the rollout's ports.
    Percent(u32),
}

impl Amount {
    /// How many ports of `total` this is: rounded down, at least one (a rollout
    /// always moves) and at most `total`.
    pub fn of(self, total: usize) -> usize {
        let n = match self {
            Amount::Count(n) => n as usize,
            Amount::Percent(p) => total * p.min(100) as usize / 100,
        };
        n.clamp(1, total.max(1))
    }

    /// Whether this is more than `limit` of `total` ports.
    fn exceeds(self, limit: Amount, total: usize) -> bool {
        self.of(total) > limit.of(total)
    }

    /// Parses Kubernetes' int-or-percent: `5` or `"25%"`.
    pub fn parse(text: &str) -> Result<Amount, String> {
        let text = text.trim();
        if let Some(p) = text.strip_suffix('%') {
            let p: u32 = p
                .parse()
                .map_err(|_| format!("{text:?} is not a whole percentage"))?;
            if p == 0 || p > 100 {
                return Err(format!("{text:?} is not between 1% and 100%"));
            }
            return Ok(Amount::Percent(p));
        }
        match text.parse::<u32>() {
            Ok(0) => Err("0 would never move a port: at least 1".into()),
            Ok(n) => Ok(Amount::Count(n)),
            Err(_) => Err(format!("{text:?} is neither a count nor a percentage")),
        }
    }
}

/// The first wave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Canary {
    /// This many ports, on as few switches as the order gives.
    Ports(u32),
    /// The ports of the first switch (within the per-switch bound).
    OneSwitch,
}

/// How a change rolls out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// The first wave.
    pub canary: Canary,
    /// The most ports changing at once, overall.
    pub max_unavailable: Amount,
    /// The most ports changing at once on one switch.
    pub max_unavailable_per_switch: Amount,
}

/// One port a rollout reaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Target<'a> {
    /// The port (its SwitchPort's name).
    pub port: &'a str,
    /// Its switch.
    pub switch: &'a str,
}

/// The waves of a rollout: indices into `targets`, the canary first. Every port is in
/// exactly one wave; the same targets and policy give the same waves.
pub fn waves(targets: &[Target<'_>], policy: &Policy) -> Vec<Vec<usize>> {
    let total = targets.len();
    if total == 0 {
        return Vec::new();
    }
    let overall = policy.max_unavailable.of(total);
    let per_switch = policy.max_unavailable_per_switch.of(total);
    // Each switch's ports, in name order; switches in name order.
    let mut by_switch: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, t) in targets.iter().enumerate() {
        by_switch.entry(t.switch).or_default().push(i);
    }
    let mut queues: Vec<std::collections::VecDeque<usize>> = by_switch
        .into_values()
        .map(|mut ports| {
            ports.sort_by(|a, b| targets[*a].port.cmp(targets[*b].port));
            ports.into()
        })
        .collect();
    let mut out = Vec::new();
    // The canary: from the first switch on, a switch at a time.
    let canary_size = match policy.canary {
        Canary::Ports(n) => (n as usize).clamp(1, overall),
        Canary::OneSwitch => queues[0].len().min(per_switch).min(overall),
    };
    let mut canary = Vec::new();
    for queue in &mut queues {
        let take = (canary_size - canary.len())
            .min(per_switch)
            .min(queue.len());
        canary.extend(queue.drain(..take));
        if canary.len() == canary_size || policy.canary == Canary::OneSwitch {
            break;
        }
    }
    out.push(canary);
    // Then waves that take from the switches in turn.
    while queues.iter().any(|q| !q.is_empty()) {
        let mut wave = Vec::new();
        let mut taken = vec![0usize; queues.len()];
        'fill: loop {
            let mut moved = false;
            for (s, queue) in queues.iter_mut().enumerate() {
                if wave.len() == overall {
                    break 'fill;
                }
                if taken[s] < per_switch
                    && let Some(i) = queue.pop_front()
                {
                    wave.push(i);
                    taken[s] += 1;
                    moved = true;
                }
            }
            if !moved {
                break;
            }
        }
        out.push(wave);
    }
    out
}

/// The most a tenant's policy may ask for, set by the infra team.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The most `maxUnavailable` a tenant may set.
    pub max_unavailable: Amount,
    /// The most `maxUnavailablePerSwitch` a tenant may set.
    pub max_unavailable_per_switch: Amount,
}

/// Why a tenant's policy is refused, field by field (`spec.rollout.…`), for a
/// rollout reaching `total` ports: each bound compared as the ports it means.
pub fn check_within(policy: &Policy, limits: &Limits, total: usize) -> Vec<(String, String)> {
    let mut refused = Vec::new();
    let mut check = |field: &str, asked: Amount, limit: Amount| {
        if asked.exceeds(limit, total) {
            refused.push((
                format!("spec.rollout.{field}"),
                format!(
                    "{} ports at once is more than the infra team's limit of {} ({limit:?}) for these {total} ports",
                    asked.of(total),
                    limit.of(total)
                ),
            ));
        }
    };
    check(
        "maxUnavailable",
        policy.max_unavailable,
        limits.max_unavailable,
    );
    check(
        "maxUnavailablePerSwitch",
        policy.max_unavailable_per_switch,
        limits.max_unavailable_per_switch,
    );
    if let Canary::Ports(n) = policy.canary
        && (n as usize) > limits.max_unavailable.of(total)
    {
        refused.push((
            "spec.rollout.canary.ports".into(),
            format!(
                "a canary of {n} ports is more than the infra team's limit of {} at once",
                limits.max_unavailable.of(total)
            ),
        ));
    }
    refused
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fleet(switches: usize, ports: usize) -> Vec<(String, String)> {
        (0..switches)
            .flat_map(|s| (0..ports).map(move |p| (format!("sw{s}"), format!("sw{s}-p{p:02}"))))
            .collect()
    }

    fn targets(f: &[(String, String)]) -> Vec<Target<'_>> {
        f.iter()
            .map(|(switch, port)| Target { port, switch })
            .collect()
    }

    #[test]
    fn amounts_are_counts_or_percentages_rounded_down_and_never_zero() {
        let cases: [(&str, usize, Result<usize, &str>); 7] = [
            ("5", 100, Ok(5)),
            ("25%", 100, Ok(25)),
            ("25%", 3, Ok(1)),
            ("500", 10, Ok(10)),
            ("0", 10, Err("never move")),
            ("0%", 10, Err("between 1% and 100%")),
            ("ten", 10, Err("neither")),
        ];
        for (text, total, want) in cases {
            match (Amount::parse(text), want) {
                (Ok(a), Ok(n)) => assert_eq!(a.of(total), n, "{text} of {total}"),
                (Err(e), Err(why)) => assert!(e.contains(why), "{text}: {e}"),
                (got, want) => panic!("{text}: {got:?}, wanted {want:?}"),
            }
        }
    }

    #[test]
    fn waves_start_with_the_canary_respect_both_bounds_and_cover_every_port_once() {
        let policy = |canary, overall, per_switch| Policy {
            canary,
            max_unavailable: overall,
            max_unavailable_per_switch: per_switch,
        };
        // (switches, ports each, policy, canary size, largest wave, waves)
        let cases = [
            (
                4,
                10,
                policy(Canary::Ports(2), Amount::Count(8), Amount::Count(2)),
                2,
                8,
                6,
            ),
            (
                4,
                10,
                policy(Canary::OneSwitch, Amount::Percent(50), Amount::Count(5)),
                5,
                20,
                3,
            ),
            (
                1,
                48,
                policy(Canary::Ports(1), Amount::Count(100), Amount::Count(12)),
                1,
                12,
                5,
            ),
            (
                3,
                1,
                policy(Canary::Ports(1), Amount::Count(1), Amount::Count(1)),
                1,
                1,
                3,
            ),
        ];
        for (switches, ports, policy, canary, largest, count) in cases {
            let f = fleet(switches, ports);
            let t = targets(&f);
            let w = waves(&t, &policy);
            let what = format!("{switches}x{ports} {policy:?}: {w:?}");
            assert_eq!(w[0].len(), canary, "{what}");
            assert_eq!(w.iter().map(Vec::len).max(), Some(largest), "{what}");
            assert_eq!(w.len(), count, "{what}");
            let mut all: Vec<usize> = w.concat();
            all.sort();
            assert_eq!(all, (0..t.len()).collect::<Vec<_>>(), "{what}");
            let per_switch = policy.max_unavailable_per_switch.of(t.len());
            for wave in &w {
                assert!(wave.len() <= policy.max_unavailable.of(t.len()), "{what}");
                let mut on: BTreeMap<&str, usize> = BTreeMap::new();
                for i in wave {
                    *on.entry(t[*i].switch).or_default() += 1;
                }
                assert!(on.values().all(|n| *n <= per_switch), "{what}");
            }
        }
    }

    #[test]
    fn the_canary_of_one_switch_stays_on_it_and_the_order_is_stable() {
        let f = fleet(3, 4);
        let t = targets(&f);
        let policy = Policy {
            canary: Canary::OneSwitch,
            max_unavailable: Amount::Count(6),
            max_unavailable_per_switch: Amount::Count(4),
        };
        let w = waves(&t, &policy);
        assert!(w[0].iter().all(|i| t[*i].switch == "sw0"), "{w:?}");
        assert_eq!(w[0].len(), 4);
        // Shuffled input, the same ports in the same waves.
        let mut shuffled = t.clone();
        shuffled.reverse();
        let again: Vec<Vec<&str>> = waves(&shuffled, &policy)
            .iter()
            .map(|wave| wave.iter().map(|i| shuffled[*i].port).collect())
            .collect();
        let first: Vec<Vec<&str>> = w
            .iter()
            .map(|wave| wave.iter().map(|i| t[*i].port).collect())
            .collect();
        assert_eq!(again, first);
    }

    #[test]
    fn a_tenant_policy_above_the_infra_limit_is_refused_naming_the_field() {
        let limits = Limits {
            max_unavailable: Amount::Percent(10),
            max_unavailable_per_switch: Amount::Count(4),
        };
        let within = Policy {
            canary: Canary::Ports(2),
            max_unavailable: Amount::Count(10),
            max_unavailable_per_switch: Amount::Percent(2),
        };
        assert_eq!(check_within(&within, &limits, 200), []);
        let above = Policy {
            canary: Canary::Ports(50),
            max_unavailable: Amount::Percent(100),
            max_unavailable_per_switch: Amount::Count(5),
        };
        let refused = check_within(&above, &limits, 200);
        let fields: Vec<&str> = refused.iter().map(|(f, _)| f.as_str()).collect();
        assert_eq!(
            fields,
            [
                "spec.rollout.maxUnavailable",
                "spec.rollout.maxUnavailablePerSwitch",
                "spec.rollout.canary.ports"
            ]
        );
        assert!(refused[0].1.contains("200 ports at once"), "{refused:?}");
        assert!(refused[0].1.contains("limit of 20"), "{refused:?}");
    }
}

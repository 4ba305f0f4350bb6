//! Whether a switch answers, and how that changes: the switch worker's reachability
//! transitions ([`Link::admit`], [`Link::fail`], [`Link::succeed`]). Pure: the time is
//! passed in, nothing is locked or notified here; the worker (`crate::worker`) holds a
//! [`Link`] under its lock and does what the transition returns (notices, wakes).
//! Table-tested.
//!
//! A failure of a whole session puts the switch [`Reachability::Down`]. While it is
//! down, a batch is refused unless the probe is due and none runs, in which case that
//! batch is the probe. A failure of a batch that started before the outage was known
//! belongs to the same step and does not count again; a probe's failure counts and
//! moves the next probe one backoff step further.

use jiff::Timestamp;
use patchbay_model::DeviceError;

use crate::decide::state_machine::{Backoff, SwitchOutage};

/// A switch that does not answer. As an error it reads as its last session failure
/// (its source).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{error}")]
pub struct Outage {
    /// The session failure of the last attempt.
    #[source]
    pub error: DeviceError,
    /// When the first attempt of this outage failed.
    pub since: Timestamp,
    /// Failure count, last failure and next probe (what port decisions mirror).
    pub timing: SwitchOutage,
}

/// Whether the switch answers.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Reachability {
    /// Not tried yet (or nothing to probe).
    #[default]
    Unknown,
    /// The last session worked.
    Reachable,
    /// The last session failed as a whole.
    Down(Outage),
}

/// What to do with a batch that arrives.
#[derive(Debug, Clone, PartialEq)]
pub enum Admission {
    /// Send it (when the switch is down: it is the probe).
    Run,
    /// Refuse it without touching the device.
    Refuse(Outage),
}

/// What a recorded failure changed.
#[derive(Debug, Clone, PartialEq)]
pub struct Failed {
    /// The outage as it stands now.
    pub outage: Outage,
    /// The switch was not down before: the tracked ports must be told too.
    pub went_down: bool,
    /// The failure counted (a new outage or a probe's failure): the probe schedule
    /// changed and the waiting ports and the switch are told.
    pub counted: bool,
}

/// A switch's reachability and whether a probe runs.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Link {
    /// Whether the switch answers.
    pub reach: Reachability,
    /// A probe (or a batch standing in for it) is running.
    pub probing: bool,
}

impl Link {
    /// A new device: whether it answers is not known yet.
    pub fn restart(&mut self) {
        self.reach = Reachability::Unknown;
        self.probing = false;
    }

    /// Whether a batch arriving at `now` runs. A batch run while the switch is down
    /// is the probe (`probing` is set).
    pub fn admit(&mut self, now: Timestamp) -> Admission {
        let outage = match &self.reach {
            Reachability::Down(o) => o.clone(),
            _ => return Admission::Run,
        };
        if self.probing || now < outage.timing.next_probe {
            return Admission::Refuse(outage);
        }
        self.probing = true;
        Admission::Run
    }

    /// When the next probe is due, when the switch is down and none is running.
    pub fn next_probe(&self) -> Option<Timestamp> {
        match &self.reach {
            Reachability::Down(o) if !self.probing => Some(o.timing.next_probe),
            _ => None,
        }
    }

    /// Records a session failure at `now` (`as_probe`: the session was the probe).
    pub fn fail(
        &mut self,
        error: DeviceError,
        as_probe: bool,
        now: Timestamp,
        backoff: &Backoff,
    ) -> Failed {
        let previous = match &self.reach {
            Reachability::Down(o) => Some(o.clone()),
            _ => None,
        };
        if let Some(o) = &previous
            && !as_probe
        {
            return Failed {
                outage: o.clone(),
                went_down: false,
                counted: false,
            };
        }
        let failures = previous.as_ref().map_or(1, |o| o.timing.failures + 1);
        let outage = Outage {
            error,
            since: previous.as_ref().map_or(now, |o| o.since),
            timing: SwitchOutage {
                failures,
                last_failure: now,
                next_probe: backoff.retry_at(now, failures),
            },
        };
        self.reach = Reachability::Down(outage.clone());
        self.probing = false;
        Failed {
            outage,
            went_down: previous.is_none(),
            counted: true,
        }
    }

    /// Records a session that worked; returns what the switch was before.
    pub fn succeed(&mut self) -> Reachability {
        self.probing = false;
        std::mem::replace(&mut self.reach, Reachability::Reachable)
    }
}

/// How a switch's new worker starts (at the operator's start, a takeover, or the
/// first port of a new switch).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkerStart {
    /// Nobody found the switch answering (it is new, or was down when last seen):
    /// whether it answers is not known, and it is checked at once.
    Fresh,
    /// A previous operator found it answering (its Switch says `DeviceReachable=True`):
    /// it is believed to answer still, and its first drift sweep comes when its own
    /// schedule says, `first_sweep` from now — not at once, so a restart or a
    /// takeover opens no session the drift sweep would not have opened anyway.
    Resumed {
        /// How long until its first sweep.
        first_sweep: std::time::Duration,
    },
}

/// How the worker of `device` (`namespace/name`) starts at `now`, the drift interval
/// being `interval`, and whether its Switch last showed it answering.
///
/// Every switch's sweeps keep one phase of the wall clock, taken from its name: they
/// fall at the instants `t` where `t mod interval` is the name's offset. So however
/// often the operator restarts or fails over, a resumed switch is swept once per
/// interval, and the fleet's sweeps stay spread evenly over it.
pub fn worker_start(
    device: &str,
    interval: std::time::Duration,
    now: Timestamp,
    reachable_before: bool,
) -> WorkerStart {
    if !reachable_before {
        return WorkerStart::Fresh;
    }
    let period = interval.as_millis().max(1) as i128;
    let offset = i128::from(fnv1a(device.as_bytes())) % period;
    let phase = i128::from(now.as_millisecond()).rem_euclid(period);
    let wait = (offset - phase).rem_euclid(period);
    WorkerStart::Resumed {
        first_sweep: std::time::Duration::from_millis(wait as u64),
    }
}

/// FNV-1a, 64 bits: the same offset for a name in every process and release.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_worker_starts_fresh_unless_its_switch_answered_and_then_keeps_the_phase_of_its_name() {
        use std::time::Duration;
        let interval = Duration::from_secs(300);
        let at = |ms: i64| Timestamp::from_millisecond(ms).unwrap();
        let first = |name: &str, now: Timestamp| match worker_start(name, interval, now, true) {
            WorkerStart::Resumed { first_sweep } => first_sweep,
            WorkerStart::Fresh => panic!("{name} was answering"),
        };
        let cases: [(&str, bool, bool); 3] = [
            // (device, reachable before, resumed)
            ("bench/sw000", false, false),
            ("bench/sw000", true, true),
            ("infra/tor-1", true, true),
        ];
        for (device, before, resumed) in cases {
            let start = worker_start(device, interval, at(1_700_000_000_000), before);
            assert_eq!(
                matches!(start, WorkerStart::Resumed { .. }),
                resumed,
                "{device} {before}: {start:?}"
            );
        }
        // Started at two moments, the first sweep falls at the same instant, within
        // one interval of either start.
        let (t1, t2) = (1_700_000_000_000, 1_700_000_017_345);
        let due1 = t1 + first("bench/sw000", at(t1)).as_millis() as i64;
        let due2 = t2 + first("bench/sw000", at(t2)).as_millis() as i64;
        assert!(
            due1 == due2 || (due1 - due2).abs() == 300_000,
            "{due1} {due2}"
        );
        assert!(first("bench/sw000", at(t1)) < interval);
        // Names spread: 2,000 switches' offsets cover the interval, none in a
        // second holding more than a handful.
        let mut per_second = std::collections::BTreeMap::<u64, usize>::new();
        for s in 0..2000 {
            let wait = first(&format!("bench/sw{s:03}"), at(t1));
            *per_second.entry(wait.as_secs()).or_default() += 1;
        }
        assert!(per_second.len() > 250, "{} seconds used", per_second.len());
        assert!(per_second.values().all(|n| *n <= 20), "{per_second:?}");
    }

    use std::time::Duration;

    use patchbay_model::Cause;

    use super::*;

    fn backoff() -> Backoff {
        Backoff {
            base: Duration::from_secs(1),
            cap: Duration::from_secs(8),
        }
    }

    fn unreachable() -> DeviceError {
        DeviceError::Unreachable {
            address: "127.0.0.1:22".into(),
            cause: Cause::msg("connection refused"),
        }
    }

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(1_000_000 + s).unwrap()
    }

    /// One row: the step, then the expected `reach` kind, `probing`, failures.
    #[derive(Debug, Clone, Copy)]
    enum Do {
        Admit(i64, bool),
        Fail(i64, bool),
        Succeed,
        Restart,
    }

    fn kind(r: &Reachability) -> &'static str {
        match r {
            Reachability::Unknown => "unknown",
            Reachability::Reachable => "up",
            Reachability::Down(_) => "down",
        }
    }

    #[test]
    fn a_switch_goes_down_is_probed_once_per_step_and_comes_back() {
        // (step, reach after, probing after, failures after (0: not down)).
        let rows: &[(Do, &str, bool, u32)] = &[
            (Do::Admit(0, true), "unknown", false, 0),
            // The first failure: down, next probe one base later.
            (Do::Fail(0, false), "down", false, 1),
            // Before the probe is due: refused.
            (Do::Admit(0, false), "down", false, 1),
            // A batch that started before the outage was known fails: same step.
            (Do::Fail(0, false), "down", false, 1),
            // Due: this batch is the probe; a second one meanwhile is refused.
            (Do::Admit(1, true), "down", true, 1),
            (Do::Admit(1, false), "down", true, 1),
            // The probe fails: the count goes up, the next probe doubles.
            (Do::Fail(1, true), "down", false, 2),
            (Do::Admit(2, false), "down", false, 2),
            (Do::Admit(3, true), "down", true, 2),
            (Do::Succeed, "up", false, 0),
            (Do::Admit(3, true), "up", false, 0),
            (Do::Restart, "unknown", false, 0),
        ];
        let mut link = Link::default();
        for (i, (step, reach, probing, failures)) in rows.iter().enumerate() {
            match *step {
                Do::Admit(t, run) => {
                    let got = link.admit(at(t));
                    assert_eq!(matches!(got, Admission::Run), run, "row {i}: {step:?}");
                }
                Do::Fail(t, probe) => {
                    link.fail(unreachable(), probe, at(t), &backoff());
                }
                Do::Succeed => {
                    link.succeed();
                }
                Do::Restart => link.restart(),
            }
            assert_eq!(kind(&link.reach), *reach, "row {i}: {step:?}");
            assert_eq!(link.probing, *probing, "row {i}: {step:?}");
            let n = match &link.reach {
                Reachability::Down(o) => o.timing.failures,
                _ => 0,
            };
            assert_eq!(n, *failures, "row {i}: {step:?}");
        }
    }

    #[test]
    fn a_failure_says_whether_it_counted_and_whether_the_switch_just_went_down() {
        let mut link = Link::default();
        let first = link.fail(unreachable(), false, at(0), &backoff());
        assert!(first.went_down && first.counted);
        assert_eq!(first.outage.since, at(0));
        assert_eq!(first.outage.timing.next_probe, at(1));
        assert_eq!(link.next_probe(), Some(at(1)));
        let stale = link.fail(unreachable(), false, at(0), &backoff());
        assert!(!stale.went_down && !stale.counted);
        let probe = link.fail(unreachable(), true, at(5), &backoff());
        assert!(!probe.went_down && probe.counted);
        // The outage keeps its start; the probe moves one step further.
        assert_eq!(probe.outage.since, at(0));
        assert_eq!(probe.outage.timing.next_probe, at(7));
        assert!(matches!(link.succeed(), Reachability::Down(_)));
        assert_eq!(link.next_probe(), None);
        assert_eq!(link.succeed(), Reachability::Reachable);
    }
}

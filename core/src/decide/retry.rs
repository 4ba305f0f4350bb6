//! One retry policy for every failure patchbay meets: a device's error, the API
//! server's answer, a step that waits. Each failure falls in one class ([`Retry`]),
//! and the class says when the object is looked at again. Every controller, the
//! port state machine and the switch workers ask this table; the table in
//! docs/architecture.md ("When things go wrong") is checked against [`TABLE`] by
//! `tests/docs.rs`. Pure: no clock (times are handed in), no I/O; table-tested.
//!
//! Looks that nothing asked for (a failure that lasts) are paid from one budget for
//! the whole operator ([`Budget`]): a failure that persists on 10,000 objects costs
//! at most [`RECHECKS_PER_SECOND`] re-looks a second in total, not one per object
//! per backoff cap (~33 a second at 10,000 objects and 5 minutes). A change to any
//! input of the object is not paid from it: it is looked at at once.

use std::time::Duration;

use jiff::Timestamp;
use patchbay_model::DeviceError;

use crate::decide::state_machine::Backoff;

/// How a failure is tried again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Retry {
    /// Not a failure: the object waits for another to finish first (a Switch for
    /// its ports to be cleaned). Looked at again after [`WAITING_REQUEUE`].
    Waiting,
    /// Somebody else wrote first (409): read again almost at once, from 50 ms
    /// doubling to 30 s.
    Conflict,
    /// May pass by itself, or be fixed where patchbay cannot see it: the API server
    /// unreachable, 429, 5xx, a timeout; an object not there yet; a device that
    /// rejects a command, does not know the port, answers something not understood,
    /// reads back differently or is busy (what it refused on is the device's own
    /// state, which no input of the object shows). The backoff, per object; once it
    /// reaches its cap, each look is paid from the [`Budget`].
    Transient,
    /// The switch does not answer, or refuses the session (unreachable, silent,
    /// authentication, host key): its worker probes it once per backoff step for
    /// all its ports, and at once when its ProviderSwitch or Secret changes.
    SwitchDown,
    /// The API server refuses the request, and sending it again will not change
    /// that (403, 400, 404, 422): at once when the object changes; else looked at
    /// again after [`RECHECK_FLOOR`] at the earliest, paid from the [`Budget`] —
    /// what refused it (a Role, an admission webhook) may be fixed without touching
    /// the object.
    Rejected,
    /// The object's own input is invalid (validation, tenancy, a capability the
    /// device lacks, a Secret without a password): only when one of its inputs
    /// changes. Its inputs are watched, so a look without a change would decide the
    /// same.
    Invalid,
}

/// How soon a waiting object is looked at again.
pub const WAITING_REQUEUE: Duration = Duration::from_secs(1);
/// The earliest a rejected object is looked at again when nothing changes it.
pub const RECHECK_FLOOR: Duration = Duration::from_secs(300);
/// The looks a second the whole operator spends on failures that last: 600 objects
/// failing at a 5-minute cap are each looked at every 5 minutes; 10,000 every 83.
pub const RECHECKS_PER_SECOND: f64 = 2.0;
/// A conflict's backoff.
pub const CONFLICT_BACKOFF: Backoff = Backoff {
    base: Duration::from_millis(50),
    cap: Duration::from_secs(30),
};
/// A failed reconcile's backoff (a port's own comes from the settings,
/// `--backoff-base-seconds` and `--backoff-cap-seconds`).
pub const RECONCILE_BACKOFF: Backoff = Backoff {
    base: Duration::from_secs(1),
    cap: Duration::from_secs(60),
};

/// The table, one row a class: the words of docs/architecture.md's "retried"
/// column.
pub const TABLE: &[(Retry, &str)] = &[
    (Retry::Waiting, "after 1 s"),
    (Retry::Conflict, "from 50 ms, doubling to 30 s"),
    (
        Retry::Transient,
        "after the backoff (a port: 5 s doubling to 300 s; a reconcile: 1 s doubling to 60 s), then within the recheck budget",
    ),
    (
        Retry::SwitchDown,
        "by the switch's worker, once per backoff step for the whole switch, and at once when its ProviderSwitch or Secret changes",
    ),
    (
        Retry::Rejected,
        "at once when the object changes, else after 5 min at the earliest, within the recheck budget",
    ),
    (Retry::Invalid, "only when an input changes"),
];

impl Retry {
    /// The class of an API server's answer.
    pub fn of_status(code: u16) -> Self {
        match code {
            409 => Self::Conflict,
            429 | 500..=599 => Self::Transient,
            400..=499 => Self::Rejected,
            _ => Self::Transient,
        }
    }

    /// The class of a device's error: the session's failures are the switch's, a
    /// capability the device lacks is the input's, anything else the port's own.
    pub fn of_device(e: &DeviceError) -> Self {
        match e {
            e if e.is_session_failure() => Self::SwitchDown,
            DeviceError::Unsupported { .. } => Self::Invalid,
            _ => Self::Transient,
        }
    }
}

/// The one budget for looks nobody asked for: each after its own floor at the
/// earliest, and at most `per_second` in any second across the whole operator. Time
/// is cut in one-second slots (longer below one look a second); a look takes the
/// first slot from its earliest time that has room, so a look due in a second is
/// not held behind one due in five minutes. Holds the slots granted from now on.
#[derive(Debug, Clone, PartialEq)]
pub struct Budget {
    /// Looks a second.
    pub per_second: f64,
    /// Looks granted per slot (by slot number), slots before now forgotten.
    used: std::collections::BTreeMap<i64, u32>,
    /// From a full slot, the next slot that may have room (followed and shortened
    /// on each grant, so a run of full slots is crossed in one step).
    skip: std::collections::BTreeMap<i64, i64>,
}

impl Budget {
    /// A budget of `per_second` looks a second.
    pub const fn new(per_second: f64) -> Self {
        Self {
            per_second,
            used: std::collections::BTreeMap::new(),
            skip: std::collections::BTreeMap::new(),
        }
    }

    /// One slot's length in milliseconds, and how many looks it holds.
    fn slot(&self) -> (i64, u32) {
        if self.per_second >= 1.0 {
            (1_000, self.per_second.min(f64::from(u32::MAX)) as u32)
        } else {
            ((1_000.0 / self.per_second.max(1e-6)).ceil() as i64, 1)
        }
    }

    /// The first slot from `from` with room.
    fn free(&mut self, from: i64) -> i64 {
        let mut at = from;
        let mut path = Vec::new();
        while let Some(&next) = self.skip.get(&at) {
            path.push(at);
            at = next;
        }
        for p in path {
            self.skip.insert(p, at);
        }
        at
    }

    /// Grants a look `floor` after `now` at the earliest: when it is, counted.
    pub fn grant(&mut self, now: Timestamp, floor: Duration) -> Timestamp {
        let (width, room) = self.slot();
        let current = now.as_millisecond().div_euclid(width);
        while let Some((&k, _)) = self.used.first_key_value()
            && k < current
        {
            self.used.pop_first();
        }
        while let Some((&k, _)) = self.skip.first_key_value()
            && k < current
        {
            self.skip.pop_first();
        }
        let earliest = now.checked_add(floor).unwrap_or(now);
        let slot = self.free(earliest.as_millisecond().div_euclid(width));
        let used = self.used.entry(slot).or_insert(0);
        let turn = i64::from(*used);
        *used += 1;
        if *used >= room {
            self.skip.insert(slot, slot + 1);
        }
        // Spread within the slot, never before the look's own earliest time.
        let at = slot * width + turn * width / i64::from(room.max(1));
        Timestamp::from_millisecond(at)
            .map(|t| t.max(earliest))
            .unwrap_or(earliest)
    }
}

/// When an object is looked at again after a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Look {
    /// After this delay.
    After(Duration),
    /// After this delay at the earliest, at a time the [`Budget`] grants.
    Paid(Duration),
    /// Only when an input changes (or, for [`Retry::SwitchDown`], when the
    /// switch's worker says).
    OnChange,
}

impl Look {
    /// The time of the look after a failure at `now`, the budget paying where it
    /// must.
    pub fn at(self, now: Timestamp, budget: &mut Budget) -> Option<Timestamp> {
        match self {
            Look::After(d) => Some(now.checked_add(d).unwrap_or(now)),
            Look::Paid(floor) => Some(budget.grant(now, floor)),
            Look::OnChange => None,
        }
    }
}

/// When the `failures`-th failure in a row (≥ 1) of class `retry` is looked at
/// again, with `backoff` the object's backoff. Looks past the backoff's cap, and
/// rejected objects' looks, are paid from the budget.
pub fn look(retry: Retry, failures: u32, backoff: &Backoff) -> Look {
    match retry {
        Retry::Waiting => Look::After(WAITING_REQUEUE),
        Retry::Conflict => Look::After(CONFLICT_BACKOFF.delay(failures)),
        Retry::Transient => {
            let delay = backoff.delay(failures);
            if delay >= backoff.cap {
                Look::Paid(delay)
            } else {
                Look::After(delay)
            }
        }
        Retry::SwitchDown => Look::After(backoff.delay(failures)),
        Retry::Rejected => Look::Paid(RECHECK_FLOOR),
        Retry::Invalid => Look::OnChange,
    }
}

/// [`look`], then its time ([`Look::at`]).
pub fn next_look(
    retry: Retry,
    failures: u32,
    now: Timestamp,
    backoff: &Backoff,
    budget: &mut Budget,
) -> Option<Timestamp> {
    look(retry, failures, backoff).at(now, budget)
}

#[cfg(test)]
mod tests {
    use super::*;
    use patchbay_model::{Capability, Cause, RpcError};

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).unwrap()
    }

    #[test]
    fn every_failure_falls_in_one_class() {
        let rows: Vec<(Retry, DeviceError)> = vec![
            (
                Retry::SwitchDown,
                DeviceError::Unreachable {
                    address: "a:22".into(),
                    cause: Cause::msg("refused"),
                },
            ),
            (
                Retry::SwitchDown,
                DeviceError::AuthenticationFailed {
                    address: "a:22".into(),
                },
            ),
            (
                Retry::Transient,
                DeviceError::CommandRejected {
                    command: "switchport access vlan 5000".into(),
                    output: "% Invalid input".into(),
                },
            ),
            (
                Retry::Transient,
                DeviceError::UnknownPort {
                    port: "Gi9/9".into(),
                },
            ),
            (
                Retry::Transient,
                DeviceError::RpcRejected {
                    operation: "edit-config".into(),
                    ports: vec![],
                    error: Box::new(RpcError::default()),
                },
            ),
            (
                Retry::Transient,
                DeviceError::Protocol {
                    during: "reading".into(),
                    cause: Cause::msg("garbled"),
                },
            ),
            (
                Retry::Invalid,
                DeviceError::Unsupported {
                    capability: Capability::Mtu,
                },
            ),
        ];
        for (class, e) in rows {
            assert_eq!(Retry::of_device(&e), class, "{e}");
        }
        let statuses: &[(u16, Retry)] = &[
            (409, Retry::Conflict),
            (429, Retry::Transient),
            (500, Retry::Transient),
            (503, Retry::Transient),
            (403, Retry::Rejected),
            (404, Retry::Rejected),
            (400, Retry::Rejected),
            (422, Retry::Rejected),
        ];
        for (code, class) in statuses {
            assert_eq!(Retry::of_status(*code), *class, "{code}");
        }
        // Every class has its row, once.
        for r in [
            Retry::Waiting,
            Retry::Conflict,
            Retry::Transient,
            Retry::SwitchDown,
            Retry::Rejected,
            Retry::Invalid,
        ] {
            assert_eq!(TABLE.iter().filter(|(c, _)| *c == r).count(), 1, "{r:?}");
        }
    }

    #[test]
    fn each_class_is_looked_at_on_its_own_schedule() {
        let backoff = Backoff {
            base: Duration::from_secs(5),
            cap: Duration::from_secs(300),
        };
        let mut budget = Budget::new(f64::MAX);
        let mut look = |r, n| {
            next_look(r, n, t(0), &backoff, &mut budget)
                .map(|at| at.duration_since(t(0)).as_secs_f64())
        };
        assert_eq!(look(Retry::Waiting, 9), Some(1.0));
        assert_eq!(look(Retry::Conflict, 1), Some(0.05));
        assert_eq!(look(Retry::Conflict, 20), Some(30.0));
        assert_eq!(look(Retry::Transient, 1), Some(5.0));
        assert_eq!(look(Retry::Transient, 3), Some(20.0));
        assert_eq!(look(Retry::Transient, 30), Some(300.0));
        assert_eq!(look(Retry::SwitchDown, 2), Some(10.0));
        assert_eq!(look(Retry::Rejected, 1), Some(300.0));
        assert_eq!(look(Retry::Rejected, 7), Some(300.0));
        assert_eq!(look(Retry::Invalid, 1), None);
    }

    #[test]
    fn failures_that_last_share_one_budget_however_many_objects_fail() {
        let backoff = Backoff {
            base: Duration::from_secs(5),
            cap: Duration::from_secs(300),
        };
        let mut budget = Budget::new(RECHECKS_PER_SECOND);
        // 10,000 objects rejected at the same second: each gets its own turn, two a
        // second, none sooner than 5 minutes.
        let mut looks: Vec<Timestamp> = (0..10_000)
            .map(|_| next_look(Retry::Rejected, 1, t(0), &backoff, &mut budget).unwrap())
            .collect();
        assert_eq!(looks[0], t(300));
        let last = looks.last().unwrap().duration_since(t(0)).as_secs_f64();
        assert_eq!(last, 5_299.5);
        // In any second, at most RECHECKS_PER_SECOND.
        looks.sort();
        for w in looks.windows(3) {
            assert!(w[2].duration_since(w[0]).as_secs_f64() >= 1.0, "{w:?}");
        }
        // One more due within their span waits for the first slot with room.
        let more = next_look(Retry::Transient, 9, t(10), &backoff, &mut budget).unwrap();
        assert_eq!(more, t(5_300), "{more}");
        // A look due sooner is not held behind a later one.
        let mut quiet = Budget::new(RECHECKS_PER_SECOND);
        let far = quiet.grant(t(0), Duration::from_secs(300));
        let near = quiet.grant(t(0), Duration::from_secs(1));
        assert_eq!((far, near), (t(300), t(1)));
        // A transient failure below its cap is not held back by the budget.
        let below = next_look(Retry::Transient, 2, t(10), &backoff, &mut budget).unwrap();
        assert_eq!(below, t(20));
        // Slots in the past are forgotten.
        quiet.grant(t(1_000), Duration::ZERO);
        assert_eq!(quiet.used.len(), 1);
    }
}

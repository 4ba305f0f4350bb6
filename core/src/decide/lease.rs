//! The leader election's decision: what a replica does with the Lease as it sees it
//! ([`decide`]), the election's timings, and what the batch bound they set means for
//! a device session: the failure of a session that runs into it ([`overrun`]), and
//! how long a backend may take to connect under it ([`connect_timeout_seconds`]).
//! Pure and table-tested; the Lease I/O is `patchbay::lease`, the bound is kept by
//! the switch worker.
//!
//! **A session that runs into the bound.** The device is *silent* when its backend
//! keeps a clock of its answers (`patchbay_providers::Heard`) and the clock did
//! not move since the session began: that is the switch failing, like any timeout
//! (`DeviceTimeout`: the switch goes Down and is probed once per backoff step).
//! Otherwise it is *slow* (`DeviceSlow`): it answered, or the backend cannot tell
//! (Ansible); the switch stays Up and each port tries again after its own backoff.
//!
//! **Connecting under the bound.** With leader election every session, connecting
//! included, ends within the bound. `connectTimeoutSeconds` applies when it is
//! shorter than the bound; otherwise the bound governs (and the backend's own
//! timeout is set past it, so the two never race and the bound's verdict is the one
//! reported). Unset, it is 10 s or the bound, whichever is shorter; set to the bound
//! or longer, the ProviderSwitch's `Ready` message says it cannot take effect
//! ([`connect_timeout_note`]).

use std::time::{Duration, Instant};

use patchbay_model::DeviceError;

/// How errors and messages name the bound.
pub const BATCH_BOUND: &str = "the batch bound that leader election sets";

/// The connect timeout a backend uses when `connectTimeoutSeconds` is not set.
pub const DEFAULT_CONNECT_TIMEOUT_SECONDS: i64 = 10;

/// The failure of a device session that ran into `bound`, begun at `started`.
/// `heard`: when the device last sent anything (`Some(None)`: never), or `None`
/// when the backend cannot tell.
pub fn overrun(bound: Duration, started: Instant, heard: Option<Option<Instant>>) -> DeviceError {
    match heard {
        Some(last) if last.is_none_or(|t| t < started) => DeviceError::Silent {
            within: bound,
            bound: BATCH_BOUND,
        },
        Some(_) => DeviceError::Overran {
            after: bound,
            bound: BATCH_BOUND,
            answering: true,
        },
        None => DeviceError::Overran {
            after: bound,
            bound: BATCH_BOUND,
            answering: false,
        },
    }
}

/// The `connectTimeoutSeconds` a backend is built with, given the ProviderSwitch's
/// (`configured`) and the batch bound: as configured when shorter than the bound
/// (or without one); else past the bound, which then governs connecting.
pub fn connect_timeout_seconds(configured: Option<i64>, bound: Option<Duration>) -> Option<i64> {
    let Some(bound) = bound else {
        return configured;
    };
    let c = configured.unwrap_or(DEFAULT_CONNECT_TIMEOUT_SECONDS);
    if (c as f64) < bound.as_secs_f64() {
        return configured;
    }
    let past = i64::try_from(bound.as_secs()).unwrap_or(i64::MAX - 1) + 1;
    Some(c.max(past))
}

/// What a ProviderSwitch's `Ready` condition adds when its `connectTimeoutSeconds`
/// is set but cannot take effect under the batch bound.
pub fn connect_timeout_note(configured: Option<i64>, bound: Option<Duration>) -> Option<String> {
    let (c, bound) = (configured?, bound?);
    ((c as f64) >= bound.as_secs_f64()).then(|| {
        format!(
            "spec.options.connectTimeoutSeconds ({c} s) cannot take effect: it is not shorter \
             than the {:.1} s batch bound that leader election sets (leaseDuration − \
             renewDeadline), which ends every session first; set it below the bound, or \
             lengthen the lease",
            bound.as_secs_f64()
        )
    })
}

/// The election's timings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timings {
    /// How long a Lease not renewed keeps others out.
    pub lease_duration: Duration,
    /// How long the holder keeps acting without a successful renewal.
    pub renew_deadline: Duration,
    /// How often the holder renews and the others retry.
    pub retry_period: Duration,
}

impl Default for Timings {
    /// client-go's defaults: 15 s, 10 s, 2 s.
    fn default() -> Self {
        Self {
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

impl Timings {
    /// The longest a batch may take: `leaseDuration − renewDeadline`.
    pub fn batch_bound(&self) -> Duration {
        self.lease_duration.saturating_sub(self.renew_deadline)
    }

    /// Whether the timings make sense (the deadline inside the duration, the retry
    /// inside the deadline).
    pub fn check(&self) -> Result<(), String> {
        if self.renew_deadline >= self.lease_duration {
            return Err("renewDeadline must be shorter than leaseDuration".into());
        }
        if self.retry_period >= self.renew_deadline {
            return Err("retryPeriod must be shorter than renewDeadline".into());
        }
        Ok(())
    }
}

/// What to do with the Lease as it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseStep {
    /// No Lease: create it, holding it.
    Create,
    /// Ours: renew it.
    Renew,
    /// Free (no holder) or expired: take it over.
    TakeOver,
    /// Held by someone else, still valid: wait.
    Wait {
        /// The holder.
        holder: String,
    },
}

/// The step for replica `me` given the Lease's holder (`None`: no Lease; `Some("")`:
/// released) and how long it has been unchanged as this replica observed it.
pub fn decide(
    holder: Option<&str>,
    me: &str,
    unchanged_for: Duration,
    lease: Duration,
) -> LeaseStep {
    match holder {
        None => LeaseStep::Create,
        Some(h) if h == me => LeaseStep::Renew,
        Some("") => LeaseStep::TakeOver,
        Some(_) if unchanged_for >= lease => LeaseStep::TakeOver,
        Some(h) => LeaseStep::Wait {
            holder: h.to_owned(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn who_acts_on_the_lease() {
        let lease = Duration::from_secs(15);
        let s = Duration::from_secs;
        let table: &[(Option<&str>, Duration, LeaseStep)] = &[
            (None, s(0), LeaseStep::Create),
            (Some("a"), s(0), LeaseStep::Renew),
            (Some("a"), s(100), LeaseStep::Renew),
            (Some(""), s(0), LeaseStep::TakeOver),
            (Some("b"), s(14), LeaseStep::Wait { holder: "b".into() }),
            (Some("b"), s(15), LeaseStep::TakeOver),
        ];
        for (holder, unchanged, step) in table {
            assert_eq!(
                decide(*holder, "a", *unchanged, lease),
                *step,
                "{holder:?} {unchanged:?}"
            );
        }
    }

    #[test]
    fn a_session_that_runs_into_the_bound_is_silent_or_slow() {
        let bound = Duration::from_secs(5);
        let started = Instant::now();
        let before = started - Duration::from_secs(1);
        let during = started + Duration::from_secs(2);
        let table: &[(Option<Option<Instant>>, &str, bool, &str)] = &[
            // Never answered, or not since the session began: silent, the switch is down.
            (
                Some(None),
                "DeviceTimeout",
                true,
                "no answer from the device within 5.0 s, the batch bound that leader election sets",
            ),
            (
                Some(Some(before)),
                "DeviceTimeout",
                true,
                "no answer from the device within 5.0 s, the batch bound that leader election sets",
            ),
            // Answered during the session: slow, the switch answers.
            (
                Some(Some(during)),
                "DeviceSlow",
                false,
                "the device was still answering when the session reached 5.0 s, the batch \
                 bound that leader election sets: the session was abandoned and its ports \
                 try again after their backoff",
            ),
            // The backend cannot tell (Ansible): not declared down.
            (
                None,
                "DeviceSlow",
                false,
                "the session did not finish within 5.0 s, the batch bound that leader election \
                 sets, and was abandoned (this backend cannot tell a slow device from a silent \
                 one); its ports try again after their backoff",
            ),
        ];
        for (heard, category, down, message) in table {
            let e = overrun(bound, started, *heard);
            assert_eq!(e.category(), *category, "{heard:?}");
            assert_eq!(e.is_session_failure(), *down, "{heard:?}");
            assert!(
                crate::decide::retry::Retry::of_device(&e) != crate::decide::retry::Retry::Invalid,
                "{heard:?}"
            );
            assert_eq!(e.to_string(), *message, "{heard:?}");
        }
    }

    #[test]
    fn connecting_fits_the_bound_or_the_bound_governs() {
        let s = Duration::from_secs;
        // (connectTimeoutSeconds, bound, what the backend is built with, noted)
        type Row = (Option<i64>, Option<Duration>, Option<i64>, bool);
        let table: &[Row] = &[
            // No election: as configured, never a note.
            (None, None, None, false),
            (Some(60), None, Some(60), false),
            // Shorter than the bound: as configured.
            (Some(3), Some(s(5)), Some(3), false),
            (None, Some(s(40)), None, false),
            (Some(20), Some(s(40)), Some(20), false),
            // The default 10 s under the default 5 s bound: the bound governs, and
            // nobody set anything, so nothing to say.
            (None, Some(s(5)), Some(10), false),
            (None, Some(s(10)), Some(11), false),
            // Set, not shorter: past the bound (never racing it), and said.
            (Some(5), Some(s(5)), Some(6), true),
            (Some(20), Some(s(5)), Some(20), true),
            (Some(5), Some(Duration::from_millis(4500)), Some(5), true),
        ];
        for (configured, bound, built, noted) in table {
            assert_eq!(
                connect_timeout_seconds(*configured, *bound),
                *built,
                "{configured:?} {bound:?}"
            );
            assert_eq!(
                connect_timeout_note(*configured, *bound).is_some(),
                *noted,
                "{configured:?} {bound:?}"
            );
        }
        assert_eq!(
            connect_timeout_note(Some(10), Some(s(5))).unwrap(),
            "spec.options.connectTimeoutSeconds (10 s) cannot take effect: it is not shorter than \
             the 5.0 s batch bound that leader election sets (leaseDuration − renewDeadline), \
             which ends every session first; set it below the bound, or lengthen the lease"
        );
    }

    #[test]
    fn timings_are_checked_and_bound_a_batch() {
        let t = Timings::default();
        assert_eq!(t.check(), Ok(()));
        assert_eq!(t.batch_bound(), Duration::from_secs(5));
        let bad = Timings {
            renew_deadline: Duration::from_secs(15),
            ..t
        };
        assert!(bad.check().is_err());
        let bad = Timings {
            retry_period: Duration::from_secs(10),
            ..t
        };
        assert!(bad.check().is_err());
    }
}

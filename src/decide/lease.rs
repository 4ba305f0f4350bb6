//! The leader election's decision: what a replica does with the Lease as it sees it
//! ([`decide`]), and the election's timings. Pure and table-tested; the Lease I/O is
//! [`crate::lease`].

use std::time::Duration;

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

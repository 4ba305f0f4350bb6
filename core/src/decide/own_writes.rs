//! Which watch events of a port are only the echo of this process's own write. A
//! port reconcile writes the port's status (and its finalizer); each write comes back
//! as a watch event of the port, and every event of a port wakes its reconcile. That
//! reconcile finds what the writing one left: nothing to do. At 10,000 linked ports
//! those echoes were half the port reconciles and most of the CPU right after the
//! ports settled.
//!
//! A write's answer carries the object's new `resourceVersion`; an event of that
//! same version is the object exactly as the write left it (any other change has a
//! version of its own, and its event wakes the port as before). So the port's own
//! trigger stream drops an event whose (uid, resourceVersion) a write recorded here.
//! Only that stream: a wake from anything else (the worker's answer, a Server, a
//! configuration) reconciles the port whatever version the cache holds.
//!
//! A relist (the watch restarting) clears every record: a listed object at a
//! recorded version may stand for changes whose own events the relist skipped.
//! Records are few and short-lived (a write's event follows it within the cache's
//! lag); at most [`PER_OBJECT`] per object are kept, and a deleted object's go.
//! A record whose event came before it (the watch can deliver an event before the
//! write's own answer is read) would never be used up: [`OwnWrites::age`], called
//! every [`AGE_PERIOD`], forgets records one to two periods old. (At 10,000 idle
//! ports such strays were ~87 bytes a port.) Forgetting a record early costs at
//! most one reconcile that finds nothing to do.
//!
//! Pure: the controllers feed it under a lock; no I/O, no clock.

use std::collections::HashMap;
use std::time::Duration;

/// Writes remembered per object; an older one's event, if it never came, is
/// forgotten (at worst that event wakes a reconcile that finds nothing to do).
pub const PER_OBJECT: usize = 4;

/// How often the controllers call [`OwnWrites::age`]: a record lives one to two of
/// these, far beyond the cache's lag even while 100,000 ports link.
pub const AGE_PERIOD: Duration = Duration::from_secs(30);

/// The resourceVersions this process's writes produced, by object uid, until their
/// watch events arrive.
#[derive(Debug, Default)]
pub struct OwnWrites {
    by_uid: HashMap<String, Written>,
    /// How many times [`OwnWrites::age`] ran.
    epoch: u64,
}

/// One object's writes awaiting their events.
#[derive(Debug, Default)]
struct Written {
    versions: Vec<String>,
    /// The [`OwnWrites::epoch`] of the latest write.
    epoch: u64,
}

impl OwnWrites {
    /// A write to object `uid` answered with `resource_version`.
    pub fn record(&mut self, uid: &str, resource_version: &str) {
        let written = self.by_uid.entry(uid.to_owned()).or_default();
        written.epoch = self.epoch;
        let versions = &mut written.versions;
        if versions.len() >= PER_OBJECT {
            versions.remove(0);
        }
        versions.push(resource_version.to_owned());
    }

    /// Whether an event of object `uid` at `resource_version` is the echo of a
    /// recorded write; the record is used up.
    pub fn take_echo(&mut self, uid: &str, resource_version: &str) -> bool {
        let Some(Written { versions, .. }) = self.by_uid.get_mut(uid) else {
            return false;
        };
        let Some(at) = versions.iter().position(|v| v == resource_version) else {
            return false;
        };
        versions.remove(at);
        if versions.is_empty() {
            super::slack::remove(&mut self.by_uid, uid);
        }
        true
    }

    /// The object is gone.
    pub fn forget(&mut self, uid: &str) {
        super::slack::remove(&mut self.by_uid, uid);
    }

    /// Forgets the records of objects last written before the previous call: each
    /// record is kept through at least one whole period between two calls.
    pub fn age(&mut self) {
        let epoch = self.epoch;
        self.by_uid.retain(|_, w| w.epoch == epoch);
        super::slack::release(&mut self.by_uid);
        self.epoch += 1;
    }

    /// The watch relisted: no event is known to be an echo any more.
    pub fn clear(&mut self) {
        self.by_uid.clear();
        super::slack::release(&mut self.by_uid);
    }

    /// How many objects have a write awaiting its event.
    pub fn len(&self) -> usize {
        self.by_uid.len()
    }

    /// Whether no write awaits its event.
    pub fn is_empty(&self) -> bool {
        self.by_uid.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_at_a_written_version_is_an_echo_once() {
        let mut w = OwnWrites::default();
        w.record("uid-1", "100");
        w.record("uid-1", "102");
        // Somebody else's change in between (101) is not an echo.
        assert!(!w.take_echo("uid-1", "101"));
        assert!(w.take_echo("uid-1", "100"));
        // Used up: the same version again (a relist's copy) wakes the port.
        assert!(!w.take_echo("uid-1", "100"));
        assert!(w.take_echo("uid-1", "102"));
        assert!(w.is_empty());
        // Another object at the same version: not this one's write.
        w.record("uid-1", "200");
        assert!(!w.take_echo("uid-2", "200"));
        assert_eq!(w.len(), 1);
    }

    #[test]
    fn records_are_bounded_and_go_with_the_object_or_a_relist() {
        let mut w = OwnWrites::default();
        for v in 0..(PER_OBJECT + 2) {
            w.record("uid-1", &v.to_string());
        }
        // The oldest were dropped: their events are not echoes any more.
        assert!(!w.take_echo("uid-1", "0"));
        assert!(!w.take_echo("uid-1", "1"));
        assert!(w.take_echo("uid-1", &(PER_OBJECT + 1).to_string()));
        w.forget("uid-1");
        assert!(!w.take_echo("uid-1", "2"));
        w.record("uid-2", "7");
        w.clear();
        assert!(!w.take_echo("uid-2", "7"));
        assert!(w.is_empty());
    }

    #[test]
    fn a_record_whose_event_never_comes_is_forgotten_after_one_to_two_periods() {
        let mut w = OwnWrites::default();
        // Its event came before the write's answer was read: never used up.
        w.record("stray", "5");
        w.age();
        // Written in the period after: kept through the next call.
        w.record("fresh", "9");
        assert_eq!(w.len(), 2);
        w.age();
        assert!(!w.take_echo("stray", "5"), "two periods old: forgotten");
        assert!(w.take_echo("fresh", "9"), "one period old: still an echo");
        // A later write of an object keeps all its records for another period.
        w.record("busy", "1");
        w.age();
        w.record("busy", "2");
        w.age();
        assert!(w.take_echo("busy", "1") && w.take_echo("busy", "2"));
        w.record("idle", "3");
        w.age();
        w.age();
        assert!(w.is_empty());
    }
}

//! Which port reconciles next: the bookkeeping of patchbay's own port runner
//! (`controllers/port_runner.rs`), which replaced kube's `Controller` for
//! SwitchPorts. Pure: the time is passed in.
//!
//! The rules are kube's controller's, kept:
//! - a woken key is queued once however often it is woken before it runs (woken
//!   keys run in the order they were first woken);
//! - a key runs one reconcile at a time: woken while it runs, it runs again once it
//!   has finished, and the retry its run asked for is dropped (the re-run asks anew);
//! - a finished run that asked to be retried gets a timer; a wake before the timer
//!   is due runs it at once and drops the timer.
//!
//! What differs is the memory. kube-runtime 5.0's scheduler keeps three tables (its
//! scheduled map, its delay queue's slab, its pending set, each entry a request with
//! a whole object reference) at the size a burst grew them to: linking 10,000 ports
//! wakes every port at once, and an idle operator then held ~0.5 KB a port of empty
//! table (heap profile, docs/benchmarks.md). Here every table gives its slack back
//! ([`crate::decide::slack`]) as it empties, and a timer exists only for a key that
//! asked to be retried: an idle, settled fleet holds none.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::hash::Hash;
use std::time::Instant;

use super::slack;

/// The keys waiting to run, running, and waiting for their retry time.
#[derive(Debug)]
pub struct ReconcileQueue<K> {
    /// Woken keys, in the order they were first woken, with when.
    ready: VecDeque<(K, Instant)>,
    /// The keys in `ready`.
    queued: HashSet<K>,
    /// Each running key: whether it was woken while running, and when it started.
    running: HashMap<K, (bool, Instant)>,
    /// Each key waiting for its retry: when, and its place in `timers`.
    due: HashMap<K, (Instant, u64)>,
    /// The same, ordered by time (the second part orders keys due at the same time).
    timers: BTreeMap<(Instant, u64), K>,
    /// The next timer's order number.
    seq: u64,
}

impl<K> Default for ReconcileQueue<K> {
    fn default() -> Self {
        ReconcileQueue {
            ready: VecDeque::new(),
            queued: HashSet::new(),
            running: HashMap::new(),
            due: HashMap::new(),
            timers: BTreeMap::new(),
            seq: 0,
        }
    }
}

impl<K: Clone + Eq + Hash> ReconcileQueue<K> {
    /// Something `key` depends on changed: run it as soon as a slot is free (after
    /// its current run, if it is running).
    pub fn wake(&mut self, key: K, now: Instant) {
        if let Some((again, _)) = self.running.get_mut(&key) {
            *again = true;
            return;
        }
        if self.queued.contains(&key) {
            return;
        }
        self.cancel_timer(&key);
        self.queued.insert(key.clone());
        self.ready.push_back((key, now));
    }

    /// The next key to run at `now`, if any: the first woken, else the earliest
    /// timer due by `now`. It counts as running until [`Self::finished`].
    pub fn next(&mut self, now: Instant) -> Option<K> {
        let key = match self.ready.pop_front() {
            Some((key, _)) => {
                self.queued.remove(&key);
                slack::release_set(&mut self.queued);
                slack::release_deque(&mut self.ready);
                key
            }
            None => {
                let (&(at, _), _) = self.timers.first_key_value()?;
                if at > now {
                    return None;
                }
                let (_, key) = self.timers.pop_first()?;
                slack::remove(&mut self.due, &key);
                key
            }
        };
        self.running.insert(key.clone(), (false, now));
        Some(key)
    }

    /// `key`'s run has finished (or did not start: its object is gone) and asked to
    /// run again at `retry_at`, if given. Returns whether it is queued to run again.
    pub fn finished(&mut self, key: &K, retry_at: Option<Instant>, now: Instant) -> bool {
        let Some((again, _)) = slack::remove(&mut self.running, key) else {
            return false;
        };
        if again {
            self.queued.insert(key.clone());
            self.ready.push_back((key.clone(), now));
            return true;
        }
        if let Some(at) = retry_at {
            self.seq += 1;
            self.due.insert(key.clone(), (at, self.seq));
            self.timers.insert((at, self.seq), key.clone());
        }
        false
    }

    /// When the earliest timer is due, if any key waits for one.
    pub fn next_due(&self) -> Option<Instant> {
        self.timers.first_key_value().map(|(&(at, _), _)| at)
    }

    /// Keys running now.
    pub fn running(&self) -> usize {
        self.running.len()
    }

    /// Keys woken and waiting for a slot.
    pub fn ready(&self) -> usize {
        self.ready.len()
    }

    /// Keys waiting for their retry time.
    pub fn waiting(&self) -> usize {
        self.due.len()
    }

    /// Since when the longest-waiting key has waited for a slot at `now`: the first
    /// woken, or a retry that came due and has not run (every slot taken), whichever
    /// waits longer.
    pub fn oldest_waiting(&self, now: Instant) -> Option<Instant> {
        let woken = self.ready.front().map(|(_, at)| *at);
        let due = self.next_due().filter(|at| *at <= now);
        woken.into_iter().chain(due).min()
    }

    /// Since when the longest-running key runs.
    pub fn longest_running(&self) -> Option<Instant> {
        self.running.values().map(|(_, since)| *since).min()
    }

    /// The slots the tables hold (their capacities), to see that a burst's are given
    /// back.
    pub fn slots(&self) -> usize {
        self.ready.capacity()
            + self.queued.capacity()
            + self.running.capacity()
            + self.due.capacity()
    }

    fn cancel_timer(&mut self, key: &K) {
        if let Some(place) = slack::remove(&mut self.due, key) {
            self.timers.remove(&place);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Runs every key ready at `now`, in order.
    fn drain(q: &mut ReconcileQueue<&'static str>, now: Instant) -> Vec<&'static str> {
        std::iter::from_fn(|| q.next(now)).collect()
    }

    #[test]
    fn a_key_woken_many_times_before_it_runs_runs_once_in_first_woken_order() {
        let now = Instant::now();
        let mut q = ReconcileQueue::default();
        for k in ["a", "b", "a", "c", "b", "a"] {
            q.wake(k, now);
        }
        assert_eq!(q.ready(), 3);
        assert_eq!(drain(&mut q, now), ["a", "b", "c"]);
        assert_eq!(q.running(), 3);
        assert_eq!(drain(&mut q, now), Vec::<&str>::new());
    }

    #[test]
    fn a_key_woken_while_running_runs_again_after_and_drops_the_retry_it_asked() {
        let now = Instant::now();
        let later = now + Duration::from_secs(5);
        let mut q = ReconcileQueue::default();
        q.wake("a", now);
        assert_eq!(q.next(now), Some("a"));
        // Woken twice while running: not run twice at once, and once more after.
        q.wake("a", now);
        q.wake("a", now);
        assert_eq!(q.next(now), None, "one run of a key at a time");
        assert!(q.finished(&"a", Some(later), now), "queued to run again");
        assert_eq!(q.waiting(), 0, "the retry is dropped; the re-run asks anew");
        assert_eq!(q.next(now), Some("a"));
        assert!(!q.finished(&"a", None, now));
        assert_eq!(q.next(later), None);
        assert_eq!(q.running() + q.ready() + q.waiting(), 0);
    }

    #[test]
    fn a_retry_runs_when_due_and_a_wake_before_then_runs_it_at_once_without_the_timer() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let mut q = ReconcileQueue::default();
        for k in ["a", "b", "c"] {
            q.wake(k, t0);
        }
        assert_eq!(drain(&mut q, t0), ["a", "b", "c"]);
        q.finished(&"a", Some(at(10)), t0);
        q.finished(&"b", Some(at(5)), t0);
        q.finished(&"c", None, t0);
        assert_eq!((q.waiting(), q.next_due()), (2, Some(at(5))));
        assert_eq!(q.next(at(4)), None, "nothing due yet");
        assert_eq!(q.next(at(5)), Some("b"));
        q.finished(&"b", None, t0);
        // Woken before its timer: runs now, and the timer is gone.
        q.wake("a", t0);
        assert_eq!((q.waiting(), q.next_due()), (0, None));
        assert_eq!(q.next(at(6)), Some("a"));
        q.finished(&"a", None, t0);
        assert_eq!(q.next(at(20)), None, "the dropped timer does not fire");
    }

    #[test]
    fn woken_keys_go_before_due_timers_and_equal_times_keep_their_order() {
        let t0 = Instant::now();
        let mut q = ReconcileQueue::default();
        for k in ["a", "b", "c"] {
            q.wake(k, t0);
        }
        assert_eq!(drain(&mut q, t0), ["a", "b", "c"]);
        q.finished(&"b", Some(t0), t0);
        q.finished(&"a", Some(t0), t0);
        q.wake("c", t0);
        q.finished(&"c", None, t0);
        assert_eq!(drain(&mut q, t0), ["c", "b", "a"]);
    }

    #[test]
    fn a_key_whose_object_is_gone_is_finished_without_a_retry_and_an_unknown_key_is_ignored() {
        let now = Instant::now();
        let mut q = ReconcileQueue::default();
        q.wake("gone", now);
        assert_eq!(q.next(now), Some("gone"));
        assert!(!q.finished(&"gone", None, now));
        assert!(!q.finished(&"never", Some(now), now));
        assert_eq!(q.running() + q.ready() + q.waiting(), 0);
    }

    #[test]
    fn the_tables_a_burst_grew_are_given_back_once_it_has_run() {
        let now = Instant::now();
        let keys: Vec<String> = (0..10_000).map(|i| format!("port-{i}")).collect();
        let mut q = ReconcileQueue::default();
        for k in &keys {
            q.wake(k.clone(), now);
        }
        assert!(q.slots() >= 20_000, "{} slots while 10,000 wait", q.slots());
        // Run with 64 at a time, as the operator does, one in ten asking a retry.
        let retry = |k: &String| k.ends_with('7').then(|| now + Duration::from_secs(60));
        let mut running = VecDeque::new();
        while let Some(k) = q.next(now) {
            running.push_back(k);
            if running.len() == 64 {
                let k = running.pop_front().unwrap();
                q.finished(&k, retry(&k), now);
            }
        }
        for k in running {
            q.finished(&k, retry(&k), now);
        }
        assert_eq!((q.running(), q.ready(), q.waiting()), (0, 0, 1_000));
        assert!(
            q.slots() <= 4 * 1_000,
            "{} slots kept for 1,000 timers",
            q.slots()
        );
        let later = now + Duration::from_secs(60);
        while let Some(k) = q.next(later) {
            q.finished(&k, None, now);
        }
        assert_eq!(q.slots(), 0, "an empty queue keeps no table");
    }

    #[test]
    fn the_longest_wait_and_the_longest_run_are_known() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let mut q = ReconcileQueue::default();
        assert_eq!((q.oldest_waiting(t0), q.longest_running()), (None, None));
        q.wake("a", at(1));
        q.wake("b", at(2));
        assert_eq!(q.oldest_waiting(at(3)), Some(at(1)));
        assert_eq!(q.next(at(4)), Some("a"));
        assert_eq!(q.oldest_waiting(at(4)), Some(at(2)));
        assert_eq!(q.longest_running(), Some(at(4)));
        assert_eq!(q.next(at(5)), Some("b"));
        assert_eq!(q.oldest_waiting(at(5)), None);
        // A retry that came due waits from its time; one not due yet does not wait.
        q.finished(&"a", Some(at(7)), at(6));
        assert_eq!(q.oldest_waiting(at(6)), None);
        assert_eq!(q.oldest_waiting(at(9)), Some(at(7)));
        assert_eq!(q.longest_running(), Some(at(5)));
        q.finished(&"b", None, at(9));
        assert_eq!(q.longest_running(), None);
    }
}

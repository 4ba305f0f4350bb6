//! patchbay's own runner of SwitchPort reconciles, in place of kube's `Controller`:
//! takes the wakes (object references from every trigger stream), runs each woken
//! port's reconcile on the port as the cache holds it (`store` gives it), at most
//! `concurrency` at once and one per port at a time, and sets a timer for a port
//! whose reconcile asked to be retried. Kubernetes I/O (the cache, the reconcile tasks); which port runs next
//! is decided by [`crate::decide::reconcile_queue`].
//!
//! Why not kube's: its scheduler keeps the tables a burst grew for good (~0.5 KB a
//! port once 10,000 ports were linked at once; see the queue's module), and it takes
//! every trigger as it comes. Everything else is kube's behaviour, kept:
//! - a reconcile runs as a task of its own (both cores compute), aborted if the
//!   runner is dropped (an operator stopped by dropping its future stops whole);
//! - no reconcile starts before `listed` says every cache holds its first list
//!   (patchbay's gate, [`super::context::Synced`], not kube's
//!   `Store::wait_until_ready`, which wakes only the last of several waiters); a
//!   wake for a port the cache does not hold (deleted meanwhile) is dropped;
//! - on `stop`, no new wake is taken and no reconcile starts; the runner ends when
//!   the reconciles running have finished (kube's graceful shutdown);
//! - a panic in a reconcile is raised in the runner (and so stops the operator).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use futures::{FutureExt, Stream, StreamExt};
use kube::runtime::reflector::{Lookup, ObjectRef};

use crate::decide::reconcile_queue::ReconcileQueue;
use crate::metrics::{QueueSnapshot, QueueWatch};

/// A reconcile as the runner runs it: the object, to when to retry it (`None`: only
/// when woken).
pub type Reconcile<K> = Arc<dyn Fn(Arc<K>) -> BoxFuture<'static, Option<Duration>> + Send + Sync>;

/// A spawned reconcile that is aborted when dropped.
struct Task<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for Task<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl<T> Future for Task<T> {
    /// What the reconcile returned; `None` if its task was cancelled (the runtime
    /// shutting down).
    type Output = Option<T>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<T>> {
        self.0.poll_unpin(cx).map(|ended| match ended {
            Ok(out) => Some(out),
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(_) => None,
        })
    }
}

/// How many waiting wakes are taken at once before the runner looks at its
/// reconciles again.
const WAKES_AT_ONCE: usize = 4096;

/// Queues `key`: the reference's version and uid are not part of its identity, and
/// are not kept.
fn wake<K: Lookup<DynamicType = ()>>(
    queue: &mut ReconcileQueue<ObjectRef<K>>,
    mut key: ObjectRef<K>,
) {
    key.extra = Default::default();
    queue.wake(key, tokio::time::Instant::now().into_std());
}

/// Runs `reconcile` for every port `wakes` names, from `store`, once `listed`
/// completes with `true` (`false`: the operator stops before the caches listed),
/// until `stop` completes and the reconciles running then have finished; its queue
/// is published to `watch` at every turn (the metrics read it).
pub async fn run<K>(
    wakes: impl Stream<Item = ObjectRef<K>> + Send,
    store: impl Fn(&ObjectRef<K>) -> Option<Arc<K>> + Send,
    concurrency: usize,
    reconcile: Reconcile<K>,
    listed: impl Future<Output = bool> + Send,
    stop: impl Future<Output = ()> + Send,
    watch: Arc<QueueWatch>,
) where
    K: Lookup<DynamicType = ()> + Clone + Send + Sync + 'static,
{
    let mut queue = ReconcileQueue::<ObjectRef<K>>::default();
    let mut running = FuturesUnordered::new();
    let mut wakes = std::pin::pin!(wakes.fuse());
    let mut stop = std::pin::pin!(stop.fuse());
    let mut listed = std::pin::pin!(listed.fuse());
    let (mut ready, mut stopping) = (false, false);
    loop {
        if ready && !stopping {
            let now = tokio::time::Instant::now().into_std();
            while running.len() < concurrency {
                let Some(key) = queue.next(now) else { break };
                match store(&key) {
                    Some(obj) => {
                        let task = Task(tokio::spawn(reconcile(obj)));
                        running.push(task.map(move |retry| (key, retry.flatten())));
                    }
                    None => {
                        queue.finished(&key, None, now);
                    }
                }
            }
        }
        let now = tokio::time::Instant::now().into_std();
        watch.publish(QueueSnapshot {
            depth: queue.ready(),
            oldest_waiting: queue.oldest_waiting(now),
            longest_running: queue.longest_running(),
        });
        if stopping && running.is_empty() {
            return;
        }
        // A timer is waited for only while a slot is free: one due while every slot
        // is taken would fire at once, again and again, until a slot frees (and a
        // freed slot wakes the runner anyway).
        let due = queue
            .next_due()
            .filter(|_| ready && !stopping && running.len() < concurrency);
        tokio::select! {
            biased;
            () = &mut stop, if !stopping => stopping = true,
            Some((key, retry)) = running.next(), if !running.is_empty() => {
                let now = tokio::time::Instant::now().into_std();
                queue.finished(&key, retry.map(|after| now + after), now);
            }
            listed = &mut listed, if !ready => {
                ready = listed;
                stopping |= !ready;
            }
            Some(key) = wakes.next(), if !stopping => {
                // Every wake already there is taken before a reconcile starts, so a
                // burst's repeated wakes of one port are one run, not one now and
                // one after (bounded: a flood does not hold the finished back).
                wake(&mut queue, key);
                for _ in 0..WAKES_AT_ONCE {
                    match wakes.next().now_or_never() {
                        Some(Some(key)) => wake(&mut queue, key),
                        _ => break,
                    }
                }
            }
            () = tokio::time::sleep_until(due.unwrap_or_else(std::time::Instant::now).into()), if due.is_some() => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::runtime::reflector::Store;
    use kube::runtime::reflector::store::Writer;
    use kube::runtime::watcher;
    use parking_lot::Mutex;
    use std::collections::HashMap;

    fn cm(name: &str) -> ConfigMap {
        let mut c = ConfigMap::default();
        c.metadata.name = Some(name.into());
        c.metadata.namespace = Some("ns".into());
        c
    }

    fn key(name: &str) -> ObjectRef<ConfigMap> {
        ObjectRef::new(name).within("ns")
    }

    /// A store holding `names`, listed.
    fn store(names: &[&str]) -> (Writer<ConfigMap>, Store<ConfigMap>) {
        let mut w = Writer::<ConfigMap>::default();
        w.apply_watcher_event(&watcher::Event::Init);
        for n in names {
            w.apply_watcher_event(&watcher::Event::InitApply(cm(n)));
        }
        w.apply_watcher_event(&watcher::Event::InitDone);
        let s = w.as_reader();
        (w, s)
    }

    /// What the reconciles saw: runs per name, the most at once, and at once now.
    #[derive(Default)]
    struct Seen {
        runs: HashMap<String, u32>,
        most: usize,
        now: usize,
        per_key_overlap: bool,
        busy: std::collections::HashSet<String>,
    }

    /// A reconcile that takes `ms` of (paused) time and asks a retry per `retry`.
    fn recording(
        seen: &Arc<Mutex<Seen>>,
        ms: u64,
        retry: fn(&str, u32) -> Option<Duration>,
    ) -> Reconcile<ConfigMap> {
        let seen = seen.clone();
        Arc::new(move |obj: Arc<ConfigMap>| {
            let seen = seen.clone();
            let name = obj.metadata.name.clone().unwrap_or_default();
            async move {
                let n = {
                    let mut s = seen.lock();
                    s.now += 1;
                    s.most = s.most.max(s.now);
                    if !s.busy.insert(name.clone()) {
                        s.per_key_overlap = true;
                    }
                    let n = s.runs.entry(name.clone()).or_default();
                    *n += 1;
                    *n
                };
                tokio::time::sleep(Duration::from_millis(ms)).await;
                let mut s = seen.lock();
                s.now -= 1;
                s.busy.remove(&name);
                retry(&name, n)
            }
            .boxed()
        })
    }

    #[tokio::test(start_paused = true)]
    async fn runs_each_woken_port_once_at_most_the_limit_at_once_and_skips_the_deleted() {
        let names: Vec<String> = (0..40).map(|i| format!("p{i}")).collect();
        let held: Vec<&str> = names.iter().map(String::as_str).collect();
        let (_w, s) = store(&held);
        let seen = Arc::new(Mutex::new(Seen::default()));
        let (tx, rx) = futures::channel::mpsc::unbounded();
        for n in &names {
            for _ in 0..3 {
                tx.unbounded_send(key(n)).unwrap();
            }
        }
        tx.unbounded_send(key("deleted")).unwrap();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let runner = tokio::spawn(run(
            rx,
            move |k| s.get(k),
            8,
            recording(&seen, 10, |_, _| None),
            futures::future::ready(true),
            stop_rx.map(|_| ()),
            Arc::default(),
        ));
        tokio::time::sleep(Duration::from_secs(1)).await;
        {
            let s = seen.lock();
            assert_eq!(s.runs.len(), 40, "every port ran: {:?}", s.runs);
            assert!(s.runs.values().all(|n| *n == 1), "each once: {:?}", s.runs);
            assert_eq!(s.most, 8, "at most the limit at once, and that many");
            assert!(!s.runs.contains_key("deleted"));
        }
        stop_tx.send(()).unwrap();
        runner.await.unwrap();
    }

    /// A runner whose only slot is held by a reconcile that never returns: its
    /// queue shows the port waiting behind it, and both ages grow.
    #[tokio::test(start_paused = true)]
    async fn a_stuck_runner_shows_its_waiting_port_and_its_longest_run() {
        let (_w, s) = store(&["a", "b"]);
        let (tx, rx) = futures::channel::mpsc::unbounded();
        let (_stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let watch = Arc::new(QueueWatch::default());
        let hangs: Reconcile<ConfigMap> = Arc::new(|_| futures::future::pending().boxed());
        tokio::spawn(run(
            rx,
            move |k| s.get(k),
            1,
            hangs,
            futures::future::ready(true),
            stop_rx.map(|_| ()),
            watch.clone(),
        ));
        let t0 = tokio::time::Instant::now().into_std();
        tx.unbounded_send(key("a")).unwrap();
        tx.unbounded_send(key("b")).unwrap();
        tokio::time::sleep(Duration::from_secs(30)).await;
        let q = watch.read();
        assert_eq!(q.depth, 1, "b waits behind a: {q:?}");
        let now = tokio::time::Instant::now().into_std();
        let age = |since: Option<std::time::Instant>| since.map(|s| now - s);
        assert!(
            age(q.oldest_waiting).is_some_and(|a| a >= Duration::from_secs(29)),
            "{q:?}"
        );
        assert!(
            age(q.longest_running).is_some_and(|a| a >= Duration::from_secs(29)),
            "{q:?}"
        );
        assert!(q.oldest_waiting.is_some_and(|s| s >= t0));
    }

    #[tokio::test(start_paused = true)]
    async fn a_port_woken_while_running_runs_again_after_never_twice_at_once() {
        let (_w, s) = store(&["a"]);
        let seen = Arc::new(Mutex::new(Seen::default()));
        let (tx, rx) = futures::channel::mpsc::unbounded();
        let (_stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(run(
            rx,
            move |k| s.get(k),
            8,
            recording(&seen, 100, |_, _| None),
            futures::future::ready(true),
            stop_rx.map(|_| ()),
            Arc::default(),
        ));
        tx.unbounded_send(key("a")).unwrap();
        tokio::time::sleep(Duration::from_millis(10)).await;
        tx.unbounded_send(key("a")).unwrap();
        tx.unbounded_send(key("a")).unwrap();
        tokio::time::sleep(Duration::from_secs(1)).await;
        let s = seen.lock();
        assert_eq!(
            s.runs["a"], 2,
            "once, then once more for the wakes meanwhile"
        );
        assert!(!s.per_key_overlap, "never two runs of a port at once");
    }

    #[tokio::test(start_paused = true)]
    async fn a_retry_runs_when_due_and_a_port_that_asked_none_runs_only_when_woken() {
        let (_w, s) = store(&["retry", "quiet"]);
        let seen = Arc::new(Mutex::new(Seen::default()));
        let (tx, rx) = futures::channel::mpsc::unbounded();
        let (_stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(run(
            rx,
            move |k| s.get(k),
            8,
            // `retry` asks to run again 5 s after each of its first three runs.
            recording(&seen, 1, |name, n| {
                (name == "retry" && n <= 3).then_some(Duration::from_secs(5))
            }),
            futures::future::ready(true),
            stop_rx.map(|_| ()),
            Arc::default(),
        ));
        tx.unbounded_send(key("retry")).unwrap();
        tx.unbounded_send(key("quiet")).unwrap();
        tokio::time::sleep(Duration::from_millis(4_900)).await;
        assert_eq!(seen.lock().runs["retry"], 1, "not before its time");
        tokio::time::sleep(Duration::from_secs(60)).await;
        let s = seen.lock();
        assert_eq!(s.runs["retry"], 4, "three retries, then no timer");
        assert_eq!(s.runs["quiet"], 1);
    }

    #[tokio::test(start_paused = true)]
    async fn nothing_runs_before_the_caches_are_listed() {
        let mut w = Writer::<ConfigMap>::default();
        let s = w.as_reader();
        let seen = Arc::new(Mutex::new(Seen::default()));
        let (tx, rx) = futures::channel::mpsc::unbounded();
        let (_stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let (listed_tx, listed_rx) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(run(
            rx,
            move |k| s.get(k),
            8,
            recording(&seen, 1, |_, _| None),
            listed_rx.map(|r| r.is_ok()),
            stop_rx.map(|_| ()),
            Arc::default(),
        ));
        tx.unbounded_send(key("a")).unwrap();
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(seen.lock().runs.is_empty(), "ran before the list");
        w.apply_watcher_event(&watcher::Event::Init);
        w.apply_watcher_event(&watcher::Event::InitApply(cm("a")));
        w.apply_watcher_event(&watcher::Event::InitDone);
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(seen.lock().runs.is_empty(), "ran before the gate opened");
        listed_tx.send(()).unwrap();
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(seen.lock().runs.get("a"), Some(&1), "the wake waited");
    }

    /// Real time: a runner that spun would never let paused time advance.
    #[tokio::test]
    async fn an_overdue_retry_while_every_slot_is_taken_does_not_spin_the_runner() {
        let (_w, s) = store(&["a", "b"]);
        let (tx, rx) = futures::channel::mpsc::unbounded();
        // Counts how often the runner looks at its wakes: once per turn of its loop.
        let turns = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = {
            let turns = turns.clone();
            let mut rx = rx;
            futures::stream::poll_fn(move |cx| {
                turns.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                rx.poll_next_unpin(cx)
            })
        };
        // `b` asks to be retried 1 ms after its run; `a` holds the only slot until
        // `release` fires.
        let (release, held) = tokio::sync::watch::channel(false);
        let reconcile: Reconcile<ConfigMap> = Arc::new(move |obj: Arc<ConfigMap>| {
            let mut held = held.clone();
            async move {
                if obj.metadata.name.as_deref() == Some("a") {
                    let _ = held.wait_for(|released| *released).await;
                    None
                } else {
                    Some(Duration::from_millis(1))
                }
            }
            .boxed()
        });
        let (_stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(run(
            counted,
            move |k| s.get(k),
            1,
            reconcile,
            futures::future::ready(true),
            stop_rx.map(|_| ()),
            Arc::default(),
        ));
        tx.unbounded_send(key("b")).unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
        tx.unbounded_send(key("a")).unwrap();
        // `b`'s retry is due 1 ms later, while `a` holds the slot.
        tokio::time::sleep(Duration::from_millis(20)).await;
        let before = turns.load(std::sync::atomic::Ordering::Relaxed);
        tokio::time::sleep(Duration::from_millis(100)).await;
        let idle = turns.load(std::sync::atomic::Ordering::Relaxed) - before;
        assert!(
            idle <= 2,
            "{idle} turns of the runner while it had nothing to do"
        );
        release.send_replace(true);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    #[tokio::test(start_paused = true)]
    async fn on_stop_the_running_reconciles_finish_and_nothing_new_starts() {
        let (_w, s) = store(&["a", "b", "c"]);
        let seen = Arc::new(Mutex::new(Seen::default()));
        let (tx, rx) = futures::channel::mpsc::unbounded();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        // One slot: `a` runs, `b` waits.
        let runner = tokio::spawn(run(
            rx,
            move |k| s.get(k),
            1,
            recording(&seen, 1_000, |_, _| Some(Duration::from_millis(1))),
            futures::future::ready(true),
            stop_rx.map(|_| ()),
            Arc::default(),
        ));
        tx.unbounded_send(key("a")).unwrap();
        tx.unbounded_send(key("b")).unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        stop_tx.send(()).unwrap();
        tokio::time::sleep(Duration::from_millis(10)).await;
        tx.unbounded_send(key("c")).unwrap();
        assert!(!runner.is_finished(), "waits for the running reconcile");
        runner.await.unwrap();
        let s = seen.lock();
        assert_eq!(s.now, 0, "the running reconcile finished");
        assert_eq!(s.runs.get("a"), Some(&1));
        assert!(!s.runs.contains_key("b") && !s.runs.contains_key("c"));
    }
}

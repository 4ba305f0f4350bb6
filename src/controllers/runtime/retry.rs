//! The retry table and the error policy: how long a controller waits after a failed
//! reconcile (per object, growing with each failure in a row, reset by success), and
//! what its next wake is. No I/O: state and timings.

use super::*;
use crate::decide::retry::{
    Budget, RECHECK_FLOOR, RECHECKS_PER_SECOND, RECONCILE_BACKOFF, next_look,
};

/// A stream of what arrives on `rx`.
pub(super) fn notices<T: Send + 'static>(
    mut rx: mpsc::UnboundedReceiver<T>,
) -> impl futures::Stream<Item = T> + Send + 'static {
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

pub(super) fn log_errors<T, E: std::fmt::Display>(
    kind: &'static str,
) -> impl Fn(Result<T, E>) -> futures::future::Ready<()> {
    move |r| {
        if let Err(e) = r {
            tracing::debug!(error = %e, kind, "reconcile failed");
        }
        futures::future::ready(())
    }
}

/// The operator's one budget for looks at failures that last (past their backoff's
/// cap, or refused by the API server): every controller and every port draws on it
/// ([`crate::decide::retry::Budget`]).
pub(crate) static RECHECKS: std::sync::Mutex<Budget> =
    std::sync::Mutex::new(Budget::new(RECHECKS_PER_SECOND));

/// Each object's consecutive failed reconciles (keyed by controller and object): what the
/// error policy backs off by ([`next_look`]). A reconcile that succeeds
/// (or waits) clears its object's count.
#[derive(Default)]
pub(super) struct Retries(pub(super) parking_lot::Mutex<std::collections::HashMap<String, u32>>);

/// `namespace/name` of `obj`.
pub(super) fn object_key<K: kube::Resource>(obj: &K) -> String {
    format!(
        "{}/{}",
        obj.meta().namespace.as_deref().unwrap_or_default(),
        obj.meta().name.as_deref().unwrap_or_default()
    )
}

impl Retries {
    pub(super) fn key<K: kube::Resource>(controller: &str, obj: &K) -> String {
        format!("{controller}/{}", object_key(obj))
    }

    pub(super) fn table(
        &self,
    ) -> parking_lot::MutexGuard<'_, std::collections::HashMap<String, u32>> {
        self.0.lock()
    }

    /// Forgets `obj`'s failures; nothing to look up (no key made) while no object
    /// of any controller is failing, the usual case.
    pub(super) fn clear<K: kube::Resource>(&self, controller: &str, obj: &K) {
        let mut table = self.table();
        if !table.is_empty() {
            table.remove(&Self::key(controller, obj));
        }
    }

    pub(super) fn bump(&self, key: &str) {
        *self.table().entry(key.to_owned()).or_default() += 1;
    }

    pub(super) fn count(&self, key: &str) -> u32 {
        self.table().get(key).copied().unwrap_or(1).max(1)
    }
}

/// How long after `e` the object `obj` of `controller` is retried: per object, by the
/// error's class in the one retry policy ([`next_look`], the reconcile backoff),
/// looks past the cap paid from [`RECHECKS`]. An error that retries only on a change
/// is still looked at after the recheck floor: a reconcile error is the API
/// server's, and what refused it may change without the object.
pub(super) fn retry_after_error<K: kube::Resource>(
    controller: &'static str,
    retries: &Retries,
    obj: &K,
    e: &ControllerError,
) -> Duration {
    let class = e.retry();
    let now = jiff::Timestamp::now();
    let at = next_look(
        class,
        retries.count(&Retries::key(controller, obj)),
        now,
        &RECONCILE_BACKOFF,
        &mut RECHECKS.lock().unwrap_or_else(|p| p.into_inner()),
    );
    let after = at
        .and_then(|at| Duration::try_from(at.duration_since(now)).ok())
        .unwrap_or(RECHECK_FLOOR);
    tracing::debug!(error = %e, category = e.category(), ?class, ?after, controller, "reconcile error");
    after
}

/// The error policy of `controller` for kube's `Controller` ([`retry_after_error`]).
pub(super) fn error_policy<K, C>(
    controller: &'static str,
    retries: Arc<Retries>,
) -> impl Fn(Arc<K>, &ControllerError, Arc<C>) -> Action
where
    K: kube::Resource,
{
    move |obj, e, _| Action::requeue(retry_after_error(controller, &retries, obj.as_ref(), e))
}

/// What a reconcile asks for next, in its runner's terms: kube's [`Action`] for the
/// controllers kube runs, `Option<Duration>` (retry after; `None` only when woken)
/// for the [`port_runner`].
pub(super) trait Next: Send + 'static {
    /// Retry after `after`.
    fn retry(after: Duration) -> Self;
    /// Run again only when woken.
    fn when_woken() -> Self;
}

impl Next for Action {
    fn retry(after: Duration) -> Self {
        Action::requeue(after)
    }
    fn when_woken() -> Self {
        Action::await_change()
    }
}

impl Next for Option<Duration> {
    fn retry(after: Duration) -> Self {
        Some(after)
    }
    fn when_woken() -> Self {
        None
    }
}

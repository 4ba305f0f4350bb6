//! The switch's health as the worker tracks it (reachability, the ports waiting for
//! it), and the operations ports handed off, with their results until each port takes
//! its own. State only.

use super::*;

#[derive(Default)]
pub(super) struct HealthState {
    /// Reachability and the probe (the pure transitions).
    pub(super) link: Link,
    /// A drift sweep is running.
    pub(super) sweeping: bool,
    /// Ports that were refused (or failed) because the switch is down.
    pub(super) waiting: BTreeSet<PortKey>,
    /// The device ports to read when no port is tracked.
    pub(super) probe_ports: Vec<PortName>,
}

/// Operations handed off by ports (see "Hand-offs" above), by port.
#[derive(Default)]
pub(super) struct HandOffs {
    pub(super) by_port: HashMap<PortKey, HandedOff>,
    /// Numbers hand-offs, so a late answer to a replaced one is recognised.
    pub(super) next: u64,
    /// Hand-offs not answered yet.
    pub(super) in_flight: usize,
    /// The operator is stopping: nothing new is sent (see
    /// [`SwitchWorker::close_hand_offs`]).
    pub(super) closed: bool,
    /// When answers nobody took were last forgotten ([`ANSWER_KEPT`]).
    pub(super) swept: Option<tokio::time::Instant>,
}

/// How long an answer waits for its port to take it. A port takes its answer on the
/// wake the answer sends, within seconds; one that never does is gone (deleted with
/// its finalizer removed by hand, so nothing told the worker), and its answer is
/// forgotten at the next sweep, at most once a sweep interval.
pub(super) const ANSWER_KEPT: Duration = Duration::from_secs(600);

impl HandOffs {
    /// Forgets the answers no port took within [`ANSWER_KEPT`], at most once per
    /// [`ANSWER_KEPT`].
    pub(super) fn sweep(&mut self, now: tokio::time::Instant) {
        if self
            .swept
            .is_some_and(|t| now.duration_since(t) < ANSWER_KEPT)
        {
            return;
        }
        self.swept = Some(now);
        self.by_port.retain(|_, e| {
            e.answered
                .is_none_or(|at| now.duration_since(at) < ANSWER_KEPT)
        });
        self.by_port.shrink_to_fit();
    }
}

pub(super) struct HandedOff {
    pub(super) op: PortOperation,
    pub(super) id: u64,
    /// The switch's [`Shared::comebacks`] when the operation was sent.
    pub(super) sent_in: u64,
    /// The worker's answer, once it came.
    pub(super) result: Option<Result<PortChange, WorkerError>>,
    /// When it came.
    pub(super) answered: Option<tokio::time::Instant>,
}

/// Where a handed-off operation is.
#[derive(Debug)]
pub enum HandOff {
    /// Handed to the worker, not answered yet: the answer wakes the port.
    InFlight,
    /// The worker's answer (taken: the next hand-off of the operation sends it
    /// again).
    Done(Result<PortChange, WorkerError>),
}

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
}

pub(super) struct HandedOff {
    pub(super) op: PortOperation,
    pub(super) id: u64,
    /// The switch's [`Shared::comebacks`] when the operation was sent.
    pub(super) sent_in: u64,
    /// The worker's answer, once it came.
    pub(super) result: Option<Result<PortChange, WorkerError>>,
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

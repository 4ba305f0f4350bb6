//! The [`Device`] trait every backend implements, and the batch types. The trait is
//! the only way the operator touches a device.
//!
//! Contract for implementors:
//! - `set_port` is declarative and idempotent: it takes the complete desired state,
//!   sends nothing when the device already matches, and returns whether it changed
//!   anything.
//! - `reset_port` returns the port to [`DesiredPort::clean`].
//! - `apply_batch` applies many operations in one session / one commit where the
//!   device allows it and reports a result per port; an `Err` means the session
//!   itself failed and nothing can be assumed applied.
//! - `apply_batch` and `get_ports` are required; the per-port methods default to a
//!   batch of one (a backend whose unit of work is the port overrides them).
//! - Nothing here validates: values arrive already validated (see [`crate::values`]).
//! - A backend that talks to its device itself stamps a [`Heard`] clock whenever the
//!   device sends anything, and returns it from `heard`, so a session cut short can be
//!   told silent (the device is down) from slow (it answers).

use async_trait::async_trait;
use serde::Serialize;

use crate::error::DeviceError;
use crate::heard::Heard;
use crate::model::{Capabilities, DesiredPort, ObservedPort};
use crate::values::PortName;

/// Whether an operation changed the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum PortChange {
    /// The device already matched; nothing was sent.
    Unchanged,
    /// Configuration was sent.
    Changed,
}

/// One operation in a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PortOperation {
    /// Make the port match this desired state.
    Set(DesiredPort),
    /// Return the port to the clean definition.
    Reset(PortName),
}

impl PortOperation {
    /// The port the operation is for.
    pub fn port(&self) -> &PortName {
        match self {
            PortOperation::Set(d) => &d.port,
            PortOperation::Reset(p) => p,
        }
    }

    /// The complete state the port must end in.
    pub fn target(&self) -> DesiredPort {
        match self {
            PortOperation::Set(d) => d.clone(),
            PortOperation::Reset(p) => DesiredPort::clean(p.clone()),
        }
    }
}

/// The result of one operation of a batch.
#[derive(Debug)]
pub struct PortResult {
    /// The port.
    pub port: PortName,
    /// What happened to it.
    pub outcome: Result<PortChange, DeviceError>,
}

/// What `get_ports` returns: each port with its read, in request order.
pub type PortReads = Vec<(PortName, Result<ObservedPort, DeviceError>)>;

/// A rollout wave's batch, to be held on the device until the rollout's gate says
/// (see [`Device::apply_and_read_held`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hold {
    /// Names the hold on the device (RFC 6241 `persist`): the wave's pin, so that any
    /// later session — another process's too — can confirm or cancel it.
    pub token: String,
    /// How long the device keeps the change unconfirmed before it takes it back by
    /// itself (the rollout's progress deadline and a margin).
    pub timeout: std::time::Duration,
    /// A hold with this token is already pending on the device: this batch joins it
    /// (a follow-up confirmed commit) instead of starting one.
    pub follow_up: bool,
}

/// Who keeps a held batch's way back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeldBy {
    /// The device: a persisted confirmed commit, confirmed or cancelled by token, and
    /// taken back by the device itself when nobody confirms it in time.
    Device,
    /// Nothing on the device: the change is committed like any other, and going
    /// back is the previous state applied again and read back.
    Nothing,
}

/// What settling a hold found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settled {
    /// The held change is confirmed: it stays.
    Confirmed,
    /// The held change is cancelled: the device took it back.
    Cancelled,
    /// The device can hold changes but holds nothing under the token: it took the
    /// change back by itself (its timeout passed), or it was settled before. The
    /// device's words.
    Gone(String),
    /// Nothing was held: the backend or the device cannot hold a change (or the
    /// wave changed nothing there), so the change was committed like any other.
    NeverHeld,
}

/// A device that can read and configure ports.
#[cfg_attr(any(test, feature = "mocks"), mockall::automock)]
#[async_trait]
pub trait Device: Send + Sync {
    /// What this backend can configure on this device.
    fn capabilities(&self) -> Capabilities;

    /// Reads one port from the device. The default is a `get_ports` of one port;
    /// backends whose unit of work is the port override it.
    async fn get_port(&self, port: &PortName) -> Result<ObservedPort, DeviceError> {
        let reads = self.get_ports(std::slice::from_ref(port)).await?;
        reads.into_iter().next().map(|(_, r)| r).unwrap_or_else(|| {
            Err(DeviceError::UnknownPort {
                port: port.to_string(),
            })
        })
    }

    /// Makes one port match `desired`; sends nothing when it already does. The
    /// default is a batch of one.
    async fn set_port(&self, desired: &DesiredPort) -> Result<PortChange, DeviceError> {
        one_result(
            self.apply_batch(&[PortOperation::Set(desired.clone())])
                .await,
        )
    }

    /// Returns one port to the clean definition. The default is a batch of one.
    async fn reset_port(&self, port: &PortName) -> Result<PortChange, DeviceError> {
        one_result(
            self.apply_batch(&[PortOperation::Reset(port.clone())])
                .await,
        )
    }

    /// Applies many operations in one session / one commit where the device allows
    /// it, reporting a result per port (in input order).
    async fn apply_batch(&self, ops: &[PortOperation]) -> Result<Vec<PortResult>, DeviceError>;

    /// Applies a batch and reads back the ports it applied (those whose outcome is
    /// `Ok`, in result order), in one session where the backend can. The default is
    /// `apply_batch`, then `get_ports`. An `Err` means the session failed.
    async fn apply_and_read(
        &self,
        ops: &[PortOperation],
    ) -> Result<(Vec<PortResult>, PortReads), DeviceError> {
        let results = self.apply_batch(ops).await?;
        let applied = applied_ports(&results);
        let reads = if applied.is_empty() {
            Vec::new()
        } else {
            self.get_ports(&applied).await?
        };
        Ok((results, reads))
    }

    /// Like [`Device::apply_and_read`], for a rollout wave's batch: where the device
    /// can hold a change until told (NETCONF with `:confirmed-commit:1.1`), the batch
    /// is committed as a persisted confirmed commit named `hold.token` and left
    /// unconfirmed ([`HeldBy::Device`]): [`Device::settle_hold`] confirms or cancels
    /// it later, from any session, and the device takes it back by itself after
    /// `hold.timeout`. The default commits it like any other batch
    /// ([`HeldBy::Nothing`]).
    async fn apply_and_read_held(
        &self,
        ops: &[PortOperation],
        hold: &Hold,
    ) -> Result<(Vec<PortResult>, PortReads, HeldBy), DeviceError> {
        let _ = hold;
        let (results, reads) = self.apply_and_read(ops).await?;
        Ok((results, reads, HeldBy::Nothing))
    }

    /// Confirms (`confirm`) or cancels the change held under `token`. An `Err`
    /// means the session failed. The default: [`Settled::NeverHeld`] (nothing is
    /// ever held).
    async fn settle_hold(&self, token: &str, confirm: bool) -> Result<Settled, DeviceError> {
        let _ = (token, confirm);
        Ok(Settled::NeverHeld)
    }

    /// Reads many ports, with one read of the whole switch where the backend can.
    /// Drift checks use this.
    async fn get_ports(&self, ports: &[PortName]) -> Result<PortReads, DeviceError>;

    /// Closes a session the backend kept open for the next batch, if it keeps one
    /// (NETCONF, [`crate::netconf::NetconfOptions::keep_session`]): the worker calls
    /// it when this replica loses the leader lease and before a replacement device
    /// opens its first session. The default keeps none.
    async fn close_idle(&self) {}

    /// The clock this backend stamps whenever its device sends anything (a prompt, a
    /// command's output, a NETCONF or OVSDB message), over all its sessions: the
    /// switch worker tells a silent device (down) from a slow one (answering) by it
    /// when a session overruns the bound leader election sets. `None` (the default):
    /// this backend cannot tell (Ansible: the device is behind ansible-playbook).
    fn heard(&self) -> Option<Heard> {
        None
    }
}

/// A device that reports what its ports see (LLDP neighbours, learned MACs): read
/// only, one session per read.
#[cfg_attr(any(test, feature = "mocks"), mockall::automock)]
#[async_trait]
pub trait NeighborSource: Send + Sync {
    /// Reads the device's chassis id and what each port sees, in one session.
    async fn neighbors(&self) -> Result<crate::neighbors::Neighbors, DeviceError>;
}

/// A BGP speaker (a ToR's routing daemon) whose neighbours patchbay keeps: read and
/// change in one session each.
#[cfg_attr(any(test, feature = "mocks"), mockall::automock)]
#[async_trait]
pub trait BgpSpeaker: Send + Sync {
    /// Reads the speaker's BGP instance and every neighbour it has.
    async fn bgp_state(&self) -> Result<crate::bgp::SpeakerState, DeviceError>;

    /// Sends `changes` under `router` (created when absent) and reads the speaker
    /// back, in one session. An error never carries a password.
    async fn bgp_apply(
        &self,
        router: &crate::bgp::Router,
        changes: &[crate::bgp::Change],
    ) -> Result<crate::bgp::SpeakerState, DeviceError>;
}

/// The ports of `results` that were applied (outcome `Ok`), in order: what
/// [`Device::apply_and_read`] reads back.
pub fn applied_ports(results: &[PortResult]) -> Vec<PortName> {
    results
        .iter()
        .filter(|r| r.outcome.is_ok())
        .map(|r| r.port.clone())
        .collect()
}

/// The outcome of a batch of one (no result: nothing had to be sent).
fn one_result(results: Result<Vec<PortResult>, DeviceError>) -> Result<PortChange, DeviceError> {
    results?
        .into_iter()
        .next()
        .map(|r| r.outcome)
        .unwrap_or(Ok(PortChange::Unchanged))
}

/// The results of a batch from each operation's outcome, in input order; an
/// operation with no outcome (nothing had to be sent) is `Unchanged`.
pub fn batch_results(
    ops: &[PortOperation],
    outcomes: Vec<Option<Result<PortChange, DeviceError>>>,
) -> Vec<PortResult> {
    ops.iter()
        .zip(outcomes)
        .map(|(op, o)| PortResult {
            port: op.port().clone(),
            outcome: o.unwrap_or(Ok(PortChange::Unchanged)),
        })
        .collect()
}

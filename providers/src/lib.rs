//! patchbay's device layer: the vendor-neutral port model, the strict value grammar,
//! the [`Device`] trait every backend implements, and the backends themselves.
//!
//! This crate has no Kubernetes dependency. The operator turns custom resources into a
//! [`DesiredPort`] (through the validated values of [`values`]) and hands it to a
//! [`Device`]; backends render it for their device and read the device back into an
//! [`ObservedPort`].
//!
//! Backends: [`fixture`] (in memory, for tests and the demo), [`cli`] (vendor
//! CLIs over SSH, dialects as data), [`netconf`] (NETCONF over SSH, device models as
//! data, every change one transaction), [`ansible`] (ansible-playbook, one run per
//! batch) and [`ovsdb`] (Open vSwitch bridges over OVSDB). What ports see (LLDP
//! neighbours) is read through a [`NeighborSource`]: [`linux`] (lldpd over SSH). A
//! ToR's BGP neighbours are kept through a [`BgpSpeaker`] ([`bgp`]: the model; the
//! SSH CLI backend with a dialect's `bgp` section: FRR's vtysh).

// The device vocabulary lives in `patchbay-model` (pure, shared with the core);
// its modules are this crate's too.
pub use patchbay_model::{bgp, catalogue, error, model, neighbors, secret, values, yaml};

pub mod ansible;
pub mod cli;
pub mod device;
pub mod fixture;
pub mod heard;
pub mod linux;
pub mod netconf;
pub mod offline;
pub mod ovsdb;
pub mod verify;

pub use device::{
    BgpSpeaker, Device, HeldBy, Hold, NeighborSource, PortChange, PortOperation, PortReads,
    PortResult, Settled,
};
#[cfg(any(test, feature = "mocks"))]
pub use device::{MockBgpSpeaker, MockDevice, MockNeighborSource};
pub use error::{Cause, DeviceError, RpcError};
pub use heard::Heard;
pub use model::{
    AclAction, AclDirection, AclProtocol, AclRule, AdminState, Capabilities, Capability,
    DesiredPort, IpVersion, LagMembership, LagMode, ObservedPort, PortField, VlanMode, diff,
};

//! patchbay's device vocabulary, shared by the pure core (`patchbay-core`) and the
//! device backends (`patchbay-providers`): the strict value grammar every
//! device-bound value passes ([`values`]), the vendor-neutral port model
//! ([`model`]), what a device can fail with ([`error`]), the BGP ([`bgp`]) and
//! neighbour ([`neighbors`]) models, secrets that never print ([`secret`]), YAML
//! ([`yaml`]) and the catalogue of built-in device models ([`catalogue`]).
//!
//! Pure by construction: this crate's dependencies are serde, serde_json,
//! serde-saphyr and thiserror — no runtime, no sockets, no Kubernetes client.

pub mod bgp;
pub mod catalogue;
pub mod error;
pub mod model;
pub mod neighbors;
pub mod secret;
pub mod values;
pub mod yaml;

pub use error::{Cause, DeviceError, RpcError};
pub use model::{
    AclAction, AclDirection, AclProtocol, AclRule, AdminState, Capabilities, Capability,
    DesiredPort, IpVersion, LagMembership, LagMode, ObservedPort, PortField, VlanMode, diff,
};

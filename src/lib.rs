//! patchbay: a Kubernetes operator that configures switch and SmartNIC ports from
//! custom resources.
//!
//! - [`api`]: the custom resource types and their CRDs.
//! - [`validate`]: the pure validator (field paths and reasons) used by the controllers
//!   and the CLI; it also turns a configuration into a device-level
//!   [`patchbay_providers::DesiredPort`].
//! - [`state_machine`]: the pure SwitchPort state machine.

pub mod api;
pub mod backends;
pub mod controllers;
pub mod settings;
pub mod state_machine;
pub mod validate;
pub mod worker;

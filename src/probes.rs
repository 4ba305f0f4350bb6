//! What the controllers, the switch workers and the HTTP server report through and
//! are fenced by: the metrics registry with its known series, and the gate leader
//! election closes on devices. Made once by whoever starts the operator. Process
//! state, no I/O of its own.

/// What the controllers report through and are fenced by, made once by whoever
/// starts the operator and shared with the switch workers and the HTTP server: the
/// metrics (and readiness), and the gate leader election closes on devices.
#[derive(Debug, Clone)]
pub struct Probes {
    /// The metrics registry and readiness.
    pub metrics: std::sync::Arc<crate::metrics::Metrics>,
    /// Whether device sessions may be opened (leader election).
    pub devices: crate::lease::DeviceGate,
}

impl Default for Probes {
    /// Metrics with every label set known in advance at 0 ([`known_series`]), the
    /// gate open.
    fn default() -> Self {
        Self {
            metrics: std::sync::Arc::new(crate::metrics::Metrics::with_known(&known_series())),
            devices: crate::lease::DeviceGate::default(),
        }
    }
}

/// The label values of the operator's metrics known before anything happens: every
/// failure and device error category, backend, port kind and state, and what drift
/// is repaired on.
pub fn known_series() -> crate::metrics::Known {
    use crate::api::{Backend, PortState};
    let port_kinds = vec!["SwitchPort", "SmartNicPort"];
    crate::metrics::Known {
        failure_categories: crate::decide::failure::Failure::categories(),
        device_categories: patchbay_providers::DeviceError::CATEGORIES.to_vec(),
        backends: Backend::ALL.iter().map(|b| b.name()).collect(),
        port_states: std::iter::once("(none)".to_owned())
            .chain(PortState::ALL.iter().map(ToString::to_string))
            .collect(),
        drift_kinds: port_kinds
            .iter()
            .copied()
            .chain([crate::decide::bgp::DRIFT_KIND])
            .collect(),
        port_kinds,
    }
}

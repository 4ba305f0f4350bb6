//! What can go wrong with a port, a Switch or a ProviderSwitch: one failure type for
//! every controller, with a bounded [`Failure::category`] (the condition reason, the
//! Event reason, a metric label) and its class in the one retry policy
//! ([`Failure::retry`], [`crate::decide::retry`]). Device, backend, validation and
//! Kubernetes errors are kept as the failure's `source()`. Pure data, no I/O.

use std::time::Duration;

use patchbay_model::values::ValueError;
use patchbay_model::{Cause, DeviceError};

use crate::api::keys::SKIP_CLEANUP_ANNOTATION;
use crate::decide::reachability::Outage;
use crate::decide::retry::Retry;
use crate::decide::state_machine::PortTarget;
use crate::decide::validate::ValidationErrors;

/// Why a step, or a check of a Switch or ProviderSwitch, failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Failure {
    /// The device failed the step for this port (a rejected command, a read-back
    /// that differs, an unknown port).
    #[error("{0}")]
    Device(#[source] DeviceError),
    /// The switch does not answer; its worker probes it again later.
    #[error("{0}")]
    SwitchDown(#[source] Box<Outage>),
    /// No backend can be built from the ProviderSwitch and its Secret as they are.
    #[error("{0}")]
    Backend(#[source] BackendError),
    /// The configuration is invalid, or invalid for this port or device.
    #[error("{0}")]
    InvalidConfiguration(#[source] ValidationErrors),
    /// The ProviderSwitch is invalid.
    #[error("ProviderSwitch {name}: {errors}")]
    InvalidProvider {
        /// Its name.
        name: String,
        /// What is wrong.
        #[source]
        errors: ValidationErrors,
    },
    /// A SmartNicPort's provider is not an Open vSwitch.
    #[error("spec.provider: ProviderSwitch {name} is not an Open vSwitch (backend ovsdb)")]
    ProviderNotOvs {
        /// Its name.
        name: String,
    },
    /// A Switch names a ProviderSwitch for a role its OS cannot play: an `os: linux`
    /// neighbour source as the device of its ports, or a device that cannot be read
    /// for neighbours as its neighbour source.
    #[error("{field}: ProviderSwitch {name} {why}")]
    ProviderRole {
        /// Where it is named.
        field: &'static str,
        /// Its name.
        name: String,
        /// Why it cannot play the role.
        why: &'static str,
    },
    /// The Switch is invalid.
    #[error("{0}")]
    InvalidSwitch(#[source] ValidationErrors),
    /// The SmartNicPort is invalid.
    #[error("{0}")]
    InvalidSmartNicPort(#[source] ValidationErrors),
    /// The port's device name does not follow the grammar.
    #[error("{}{error}", .field.map(|f| format!("{f}: ")).unwrap_or_default())]
    InvalidPortName {
        /// The field holding it, when it is the port's own.
        field: Option<&'static str>,
        /// Why.
        #[source]
        error: ValueError,
    },
    /// The Switch has no entry for this port.
    #[error("Switch.spec.ports has no entry {port:?}")]
    PortNotDefined {
        /// The SwitchPort's name.
        port: String,
    },
    /// The port's Switch does not exist.
    #[error(
        "the Switch of this port was not found; to delete the port without cleaning the \
         device, annotate it {SKIP_CLEANUP_ANNOTATION}=true"
    )]
    SwitchNotFound,
    /// The ProviderSwitch does not exist (yet).
    #[error("ProviderSwitch {name:?} ({field}) not found")]
    ProviderNotFound {
        /// Its name.
        name: String,
        /// Where it is named.
        field: &'static str,
    },
    /// The linked configuration does not exist (yet).
    #[error("{kind} {name} not found (spec.configuration)")]
    ConfigurationNotFound {
        /// `SwitchPortConfiguration` or `SmartNicConfiguration`.
        kind: &'static str,
        /// `namespace/name`.
        name: String,
    },
    /// A SmartNicPort's next SwitchPort does not exist (yet).
    #[error("SwitchPort {port} (spec.nextPortRef) not found")]
    NextPortNotFound {
        /// `namespace/name`.
        port: String,
    },
    /// A SmartNicPort's next SwitchPort is claimed by another SmartNicPort.
    #[error("spec.nextPortRef: SwitchPort {port} is already chained from SmartNicPort {by}")]
    NextPortClaimed {
        /// `namespace/name`.
        port: String,
        /// The other SmartNicPort, `namespace/name`.
        by: String,
    },
    /// A SmartNicPort's next SwitchPort carries a configuration set by somebody else.
    #[error(
        "spec.nextPortRef: SwitchPort {port} carries SwitchPortConfiguration {configuration} \
         set outside this SmartNicPort; clear it first"
    )]
    NextPortInUse {
        /// `namespace/name`.
        port: String,
        /// The configuration it carries.
        configuration: String,
    },
    /// A link-aggregation member's change waited for the rest of its group in vain.
    #[error("{0}")]
    GroupIncomplete(#[source] WorkerError),
    /// This replica may not touch devices now (it lost the leader lease): nothing was
    /// sent; the leader applies it.
    #[error("{}", WorkerError::NotLeading)]
    NotLeading,
    /// The switch worker stopped before it answered; the step is tried again.
    #[error("{}", WorkerError::WorkerStopped)]
    WorkerStopped,
    /// The port serves a tenant namespace that may not carry this configuration
    /// (a VLAN not granted to it, a configuration of another namespace): nothing is
    /// sent to the device. One message per refusal.
    #[error("forbidden: {}", .0.join("; "))]
    Forbidden(Vec<String>),
    /// The API server refused or failed a request made on the port's behalf.
    #[error("{error}")]
    Kubernetes {
        /// The client's error.
        #[source]
        error: std::sync::Arc<dyn std::error::Error + Send + Sync>,
        /// The API server's status code, when it answered.
        status: Option<u16>,
    },
}

impl Failure {
    /// The linked configuration (`kind`) of `target` does not exist (yet).
    pub fn configuration_not_found(kind: &'static str, target: Option<&PortTarget>) -> Self {
        let name = target
            .map(|t| {
                let r = &t.configuration;
                format!("{}/{}", r.namespace.as_deref().unwrap_or_default(), r.name)
            })
            .unwrap_or_default();
        Failure::ConfigurationNotFound { kind, name }
    }

    /// The categories of a failure's own (a device's and a backend's are
    /// [`DeviceError::CATEGORIES`] and [`BackendError::CATEGORIES`]).
    const OWN_CATEGORIES: &'static [&'static str] = &[
        "InvalidConfiguration",
        "InvalidProvider",
        "InvalidSwitch",
        "InvalidSmartNicPort",
        "InvalidPortName",
        "PortNotDefined",
        "SwitchNotFound",
        "ProviderNotFound",
        "ConfigurationNotFound",
        "NextPortNotFound",
        "NextPortClaimed",
        "NextPortInUse",
        "LagGroupIncomplete",
        "NotLeader",
        "WorkerStopped",
        "Forbidden",
        "KubernetesError",
    ];

    /// Every value [`Failure::category`] takes, each once (the metrics export each
    /// at 0).
    pub fn categories() -> Vec<&'static str> {
        let mut all: Vec<&'static str> = Self::OWN_CATEGORIES
            .iter()
            .chain(DeviceError::CATEGORIES)
            .chain(BackendError::CATEGORIES)
            .copied()
            .collect();
        all.sort_unstable();
        all.dedup();
        all
    }

    /// A short, bounded category: the condition reason, the Event reason and a metric
    /// label. Never an object name or an error message.
    pub fn category(&self) -> &'static str {
        match self {
            Failure::Device(e) => e.category(),
            Failure::SwitchDown(o) => o.error.category(),
            Failure::Backend(e) => e.category(),
            Failure::InvalidConfiguration(_) => "InvalidConfiguration",
            Failure::InvalidProvider { .. }
            | Failure::ProviderNotOvs { .. }
            | Failure::ProviderRole { .. } => "InvalidProvider",
            Failure::InvalidSwitch(_) => "InvalidSwitch",
            Failure::InvalidSmartNicPort(_) => "InvalidSmartNicPort",
            Failure::InvalidPortName { .. } => "InvalidPortName",
            Failure::PortNotDefined { .. } => "PortNotDefined",
            Failure::SwitchNotFound => "SwitchNotFound",
            Failure::ProviderNotFound { .. } => "ProviderNotFound",
            Failure::ConfigurationNotFound { .. } => "ConfigurationNotFound",
            Failure::NextPortNotFound { .. } => "NextPortNotFound",
            Failure::NextPortClaimed { .. } => "NextPortClaimed",
            Failure::NextPortInUse { .. } => "NextPortInUse",
            Failure::GroupIncomplete(_) => "LagGroupIncomplete",
            Failure::NotLeading => "NotLeader",
            Failure::WorkerStopped => "WorkerStopped",
            Failure::Forbidden(_) => "Forbidden",
            Failure::Kubernetes { .. } => "KubernetesError",
        }
    }

    /// Its class in the one retry policy ([`crate::decide::retry`]): the switch's
    /// (it does not answer), the input's (invalid, forbidden, a capability the
    /// device lacks: only when an input changes), the API server's by its status
    /// code, and otherwise the port's own (after the backoff: a device's refusal, an
    /// object not there yet, a group still incomplete, this replica not leading).
    pub fn retry(&self) -> Retry {
        match self {
            Failure::SwitchDown(_) => Retry::SwitchDown,
            Failure::Device(e) => Retry::of_device(e),
            Failure::Kubernetes { status, .. } => status.map_or(Retry::Transient, Retry::of_status),
            Failure::SwitchNotFound
            | Failure::ProviderNotFound { .. }
            | Failure::ConfigurationNotFound { .. }
            | Failure::NextPortNotFound { .. }
            | Failure::GroupIncomplete(_)
            | Failure::NotLeading
            | Failure::WorkerStopped => Retry::Transient,
            Failure::Backend(_)
            | Failure::InvalidConfiguration(_)
            | Failure::InvalidProvider { .. }
            | Failure::ProviderNotOvs { .. }
            | Failure::ProviderRole { .. }
            | Failure::InvalidSwitch(_)
            | Failure::InvalidSmartNicPort(_)
            | Failure::InvalidPortName { .. }
            | Failure::PortNotDefined { .. }
            | Failure::NextPortClaimed { .. }
            | Failure::NextPortInUse { .. }
            | Failure::Forbidden(_) => Retry::Invalid,
        }
    }

    /// The switch's outage, when the switch does not answer.
    pub fn outage(&self) -> Option<&Outage> {
        match self {
            Failure::SwitchDown(o) => Some(o),
            _ => None,
        }
    }
}

impl From<WorkerError> for Failure {
    fn from(e: WorkerError) -> Self {
        match e {
            WorkerError::Device(e) => Failure::Device(e),
            WorkerError::SwitchDown(o) => Failure::SwitchDown(o),
            e @ WorkerError::GroupIncomplete { .. } => Failure::GroupIncomplete(e),
            WorkerError::NotLeading => Failure::NotLeading,
            WorkerError::WorkerStopped => Failure::WorkerStopped,
        }
    }
}

impl From<BackendError> for Failure {
    fn from(e: BackendError) -> Self {
        Failure::Backend(e)
    }
}

impl Failure {
    /// A request to the API server failed (the client's error, kept as the
    /// source, and the status code it answered with, if it did): this crate has no
    /// client, so the operator hands its errors in.
    pub fn kubernetes(
        e: impl std::error::Error + Send + Sync + 'static,
        status: Option<u16>,
    ) -> Self {
        Failure::Kubernetes {
            error: std::sync::Arc::new(e),
            status,
        }
    }
}

/// Why no backend could be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BackendError {
    /// The credentials Secret is missing or lacks keys.
    #[error("credentials: {0}")]
    Credentials(String),
    /// The backend is not available in this build.
    #[error("backend {0} is not available yet in this build of patchbay")]
    Unsupported(&'static str),
    /// No dialect (ssh) or device model (netconf) for this os over this backend.
    #[error(
        "spec.os: no {backend} dialect for os {os:?} (ssh supports ios, powerconnect, dell10g, fastiron, eos; netconf supports junos, yang; ansible supports ios, junos)"
    )]
    NoDialect {
        /// The backend.
        backend: &'static str,
        /// The os value.
        os: String,
    },
    /// A backend option cannot be used (the validator refuses it first; this is the
    /// builder's own check).
    #[error("{field}: {reason}")]
    BadOption {
        /// The option's field path.
        field: &'static str,
        /// Why.
        reason: String,
    },
    /// No host key is pinned at all.
    #[error(
        "host key: no host key pinned: set spec.hostKey (fingerprint or knownHostsLine), put \
         knownHosts in the Secret, or (labs only) spec.insecureAcceptAnyHostKey"
    )]
    HostKeyNotPinned,
    /// A pin is given but cannot be used.
    #[error("host key: {pin}: {cause}")]
    HostKeyUnusable {
        /// Which pin (`spec.hostKey.knownHostsLine`, `the Secret's knownHosts`).
        pin: &'static str,
        /// Why it cannot be used.
        #[source]
        cause: Cause,
    },
}

impl BackendError {
    /// Every value [`BackendError::category`] takes.
    pub const CATEGORIES: &'static [&'static str] = &[
        "CredentialsInvalid",
        "BackendUnsupported",
        "HostKeyNotPinned",
        "InvalidProvider",
        "HostKeyUnusable",
    ];

    /// A bounded category for conditions, events and metrics.
    pub fn category(&self) -> &'static str {
        match self {
            BackendError::Credentials(_) => "CredentialsInvalid",
            BackendError::Unsupported(_) | BackendError::NoDialect { .. } => "BackendUnsupported",
            BackendError::HostKeyNotPinned => "HostKeyNotPinned",
            BackendError::BadOption { .. } => "InvalidProvider",
            BackendError::HostKeyUnusable { .. } => "HostKeyUnusable",
        }
    }
}

/// Why the worker could not do an operation.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum WorkerError {
    /// The device failed the operation (the port's own failure).
    #[error(transparent)]
    Device(DeviceError),
    /// The switch does not answer; nothing was sent. It is probed again at
    /// `timing.next_probe`.
    #[error("{}", .0.error)]
    SwitchDown(Box<Outage>),
    /// A link-aggregation member's change waited `patchbay::worker::WorkerConfig::group_hold` for
    /// the group's other members and was not sent.
    #[error(
        "link-aggregation group {group} waited {:.0} s for {} and sent nothing: every member \
         of a group is configured in one batch, and these members' changes did not arrive \
         (is their configuration valid and ready?)",
        waited.as_secs_f64(),
        missing.join(", ")
    )]
    GroupIncomplete {
        /// The group number.
        group: u16,
        /// The device ports whose change did not arrive.
        missing: Vec<String>,
        /// How long the change waited.
        waited: Duration,
    },
    /// This replica may not touch devices (it lost, or never held, the leader
    /// lease): nothing was sent.
    #[error("this replica does not hold the leader lease: nothing was sent to the device")]
    NotLeading,
    /// The switch worker stopped (its ProviderSwitch was removed or replaced, or the
    /// operator is stopping) before it answered: nothing is known sent.
    #[error(
        "the switch's worker stopped before it answered (its ProviderSwitch was removed or \
         replaced, or the operator is stopping)"
    )]
    WorkerStopped,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decide::state_machine::SwitchOutage;
    use crate::decide::validate::FieldError;
    use patchbay_model::Cause;
    use std::error::Error as _;

    fn errors(path: &str, reason: &str) -> ValidationErrors {
        ValidationErrors(vec![FieldError {
            path: path.into(),
            reason: reason.into(),
        }])
    }

    /// One failure of each kind (each backend error too); a new variant fails to
    /// compile in `covered` until it has an example here, whose category is then
    /// checked against [`Failure::categories`].
    fn one_of_each() -> Vec<Failure> {
        let s = String::new;
        let device = DeviceError::UnknownPort { port: s() };
        let outage = Outage {
            error: DeviceError::AuthenticationFailed { address: s() },
            since: jiff::Timestamp::UNIX_EPOCH,
            timing: SwitchOutage {
                failures: 1,
                last_failure: jiff::Timestamp::UNIX_EPOCH,
                next_probe: jiff::Timestamp::UNIX_EPOCH,
            },
        };
        let backend = [
            BackendError::Credentials(s()),
            BackendError::Unsupported("x"),
            BackendError::NoDialect {
                backend: "ssh",
                os: s(),
            },
            BackendError::BadOption {
                field: "f",
                reason: s(),
            },
            BackendError::HostKeyNotPinned,
            BackendError::HostKeyUnusable {
                pin: "p",
                cause: Cause::msg(""),
            },
        ];
        let mut all = vec![
            Failure::Device(device),
            Failure::SwitchDown(Box::new(outage)),
            Failure::InvalidConfiguration(errors("a", "b")),
            Failure::InvalidProvider {
                name: s(),
                errors: errors("a", "b"),
            },
            Failure::ProviderNotOvs { name: s() },
            Failure::ProviderRole {
                field: "f",
                name: s(),
                why: "w",
            },
            Failure::InvalidSwitch(errors("a", "b")),
            Failure::InvalidSmartNicPort(errors("a", "b")),
            Failure::InvalidPortName {
                field: None,
                error: patchbay_model::values::ValueError(s()),
            },
            Failure::PortNotDefined { port: s() },
            Failure::SwitchNotFound,
            Failure::ProviderNotFound {
                name: s(),
                field: "f",
            },
            Failure::ConfigurationNotFound {
                kind: "k",
                name: s(),
            },
            Failure::NextPortNotFound { port: s() },
            Failure::NextPortClaimed { port: s(), by: s() },
            Failure::NextPortInUse {
                port: s(),
                configuration: s(),
            },
            Failure::GroupIncomplete(WorkerError::NotLeading),
            Failure::NotLeading,
            Failure::WorkerStopped,
            Failure::Forbidden(vec![]),
            Failure::kubernetes(std::io::Error::other("the API server went away"), None),
        ];
        all.extend(backend.into_iter().map(Failure::Backend));
        fn covered(f: &Failure) {
            match f {
                Failure::Device(_)
                | Failure::SwitchDown(_)
                | Failure::Backend(_)
                | Failure::InvalidConfiguration(_)
                | Failure::InvalidProvider { .. }
                | Failure::ProviderNotOvs { .. }
                | Failure::ProviderRole { .. }
                | Failure::InvalidSwitch(_)
                | Failure::InvalidSmartNicPort(_)
                | Failure::InvalidPortName { .. }
                | Failure::PortNotDefined { .. }
                | Failure::SwitchNotFound
                | Failure::ProviderNotFound { .. }
                | Failure::ConfigurationNotFound { .. }
                | Failure::NextPortNotFound { .. }
                | Failure::NextPortClaimed { .. }
                | Failure::NextPortInUse { .. }
                | Failure::GroupIncomplete(_)
                | Failure::NotLeading
                | Failure::WorkerStopped
                | Failure::Forbidden(_)
                | Failure::Kubernetes { .. } => {}
            }
            if let Failure::Backend(b) = f {
                match b {
                    BackendError::Credentials(_)
                    | BackendError::Unsupported(_)
                    | BackendError::NoDialect { .. }
                    | BackendError::BadOption { .. }
                    | BackendError::HostKeyNotPinned
                    | BackendError::HostKeyUnusable { .. } => {}
                }
            }
        }
        all.iter().for_each(covered);
        all
    }

    #[test]
    fn the_category_list_is_every_category_a_failure_has() {
        let listed = Failure::categories();
        for f in one_of_each() {
            assert!(
                listed.contains(&f.category()),
                "{} not listed",
                f.category()
            );
        }
        // Each own and backend category is one some failure has (the device's are
        // checked in the providers crate).
        let made: Vec<&str> = one_of_each().iter().map(Failure::category).collect();
        for c in Failure::OWN_CATEGORIES
            .iter()
            .chain(BackendError::CATEGORIES)
        {
            assert!(made.contains(c), "{c} listed but no failure has it");
        }
    }

    #[test]
    fn each_failure_has_a_category_a_retry_policy_and_words() {
        let unreachable = DeviceError::Unreachable {
            address: "10.0.0.1:22".into(),
            cause: Cause::msg("connection refused"),
        };
        let now = jiff::Timestamp::UNIX_EPOCH;
        let outage = Outage {
            error: unreachable.clone(),
            since: now,
            timing: SwitchOutage {
                failures: 2,
                last_failure: now,
                next_probe: now,
            },
        };
        let rows: Vec<(Failure, &str, Retry, &str)> = vec![
            (
                Failure::Device(DeviceError::CommandRejected {
                    command: "switchport access vlan 10".into(),
                    output: "% Invalid input".into(),
                }),
                "CommandRejected",
                Retry::Transient,
                "the device rejected `switchport access vlan 10`: % Invalid input",
            ),
            (
                Failure::SwitchDown(Box::new(outage)),
                "DeviceUnreachable",
                Retry::SwitchDown,
                "cannot reach the device at 10.0.0.1:22: connection refused",
            ),
            (
                Failure::Backend(BackendError::HostKeyNotPinned),
                "HostKeyNotPinned",
                Retry::Invalid,
                "host key: no host key pinned",
            ),
            (
                Failure::InvalidConfiguration(errors("spec.mtu", "too big")),
                "InvalidConfiguration",
                Retry::Invalid,
                "spec.mtu: too big",
            ),
            (
                Failure::InvalidProvider {
                    name: "tor-1".into(),
                    errors: errors("spec.address", "bad"),
                },
                "InvalidProvider",
                Retry::Invalid,
                "ProviderSwitch tor-1: spec.address: bad",
            ),
            (
                Failure::InvalidPortName {
                    field: Some("spec.portName"),
                    error: ValueError("bad name".into()),
                },
                "InvalidPortName",
                Retry::Invalid,
                "spec.portName: bad name",
            ),
            (
                Failure::ProviderNotFound {
                    name: "tor-1".into(),
                    field: "spec.provider",
                },
                "ProviderNotFound",
                Retry::Transient,
                "ProviderSwitch \"tor-1\" (spec.provider) not found",
            ),
            (
                Failure::ConfigurationNotFound {
                    kind: "SwitchPortConfiguration",
                    name: "ns/web".into(),
                },
                "ConfigurationNotFound",
                Retry::Transient,
                "SwitchPortConfiguration ns/web not found (spec.configuration)",
            ),
            (
                Failure::NextPortInUse {
                    port: "ns/p1".into(),
                    configuration: "web".into(),
                },
                "NextPortInUse",
                Retry::Invalid,
                "spec.nextPortRef: SwitchPort ns/p1 carries SwitchPortConfiguration web",
            ),
            (
                Failure::SwitchNotFound,
                "SwitchNotFound",
                Retry::Transient,
                "annotate it patchbay.dev/skip-device-cleanup=true",
            ),
        ];
        for (failure, category, kind, words) in rows {
            assert_eq!(failure.category(), category, "{failure}");
            assert_eq!(failure.retry(), kind, "{failure}");
            let text = failure.to_string();
            assert!(
                text.starts_with(words) || text.contains(words),
                "{text:?} lacks {words:?}"
            );
        }
    }

    #[test]
    fn device_causes_stay_reachable_through_source() {
        let f = Failure::Device(DeviceError::Unreachable {
            address: "a:22".into(),
            cause: Cause::during("sending", std::io::Error::other("broken pipe")),
        });
        let device = f.source().expect("the device error");
        let cause = device.source().expect("its cause");
        assert_eq!(cause.to_string(), "sending: broken pipe");
        assert_eq!(cause.source().unwrap().to_string(), "broken pipe");
    }
}

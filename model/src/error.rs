//! Typed device errors shared by every backend. Pure, no I/O.
//!
//! Messages name the operation or command that failed and never contain credentials:
//! backends build them from the command text and device output only, and the
//! credential-bearing parts of a session never enter an error.

use std::sync::Arc;
use std::time::Duration;

use crate::model::{Capability, PortField};

/// The underlying error of a [`DeviceError`] (an I/O error, a protocol library's
/// error, or a message where the cause is only words), kept as the error's
/// `source()` so the chain survives. Cheap to clone; equal when it reads the same.
#[derive(Clone)]
pub struct Cause(Arc<dyn std::error::Error + Send + Sync + 'static>);

impl Cause {
    /// Wraps an error.
    pub fn new(e: impl std::error::Error + Send + Sync + 'static) -> Self {
        Self(Arc::new(e))
    }

    /// A cause that is only a message.
    pub fn msg(text: impl Into<String>) -> Self {
        Self(Arc::new(Message(text.into())))
    }

    /// `error`, which happened while doing `what`.
    pub fn during(
        what: impl Into<String>,
        error: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        Self(Arc::new(During {
            what: what.into(),
            source: Box::new(error),
        }))
    }
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct Message(String);

#[derive(Debug, thiserror::Error)]
#[error("{what}: {source}")]
struct During {
    what: String,
    #[source]
    source: Box<dyn std::error::Error + Send + Sync + 'static>,
}

impl std::fmt::Debug for Cause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&self.0, f)
    }
}

impl std::fmt::Display for Cause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(&self.0, f)
    }
}

impl std::error::Error for Cause {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        // The wrapped error is the cause itself; its own chain follows it.
        self.0.source()
    }
}

impl PartialEq for Cause {
    fn eq(&self, other: &Self) -> bool {
        self.to_string() == other.to_string()
    }
}

impl Eq for Cause {}

/// One `<rpc-error>` of a NETCONF reply (RFC 6241 §4.3), as the device sent it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RpcError {
    /// `transport`, `rpc`, `protocol` or `application`.
    pub error_type: String,
    /// `invalid-value`, `lock-denied`, `data-missing`, …
    pub tag: String,
    /// `error` or `warning`.
    pub severity: String,
    /// The device's own finer tag, if any.
    pub app_tag: Option<String>,
    /// The XPath of the offending node, if the device says.
    pub path: Option<String>,
    /// The device's message.
    pub message: Option<String>,
    /// The session holding a lock (`lock-denied`), if the device says.
    pub session_id: Option<String>,
}

impl RpcError {
    /// Whether this is a lock held by someone else (or the datastore busy).
    pub fn is_busy(&self) -> bool {
        matches!(
            self.tag.as_str(),
            "lock-denied" | "in-use" | "resource-denied"
        )
    }
}

impl std::fmt::Display for RpcError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({} {})", self.tag, self.error_type, self.severity)?;
        if let Some(p) = &self.path {
            write!(f, " at {p}")?;
        }
        if let Some(m) = &self.message {
            write!(f, ": {m}")?;
        }
        if let Some(s) = &self.session_id {
            write!(f, " (held by NETCONF session {s})")?;
        }
        Ok(())
    }
}

/// A duration as people read it: `5.0 s`.
fn secs(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}

fn overran(after: Duration, bound: &str, answering: bool) -> String {
    if answering {
        format!(
            "the device was still answering when the session reached {}, {bound}: the \
             session was abandoned and its ports try again after their backoff",
            secs(after)
        )
    } else {
        format!(
            "the session did not finish within {}, {bound}, and was abandoned (this backend \
             cannot tell a slow device from a silent one); its ports try again after their \
             backoff",
            secs(after)
        )
    }
}

fn for_ports(ports: &[String]) -> String {
    match ports {
        [] => String::new(),
        [one] => format!(" for port {one}"),
        many => format!(" for ports {}", many.join(", ")),
    }
}

/// Why a device operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeviceError {
    /// The device could not be reached (connection refused, no route, closed).
    #[error("cannot reach the device at {address}: {cause}")]
    Unreachable {
        /// Address and port that were dialled.
        address: String,
        /// What the transport said.
        #[source]
        cause: Cause,
    },
    /// An operation took longer than its timeout: the device did not answer it
    /// (or did not finish answering) in time.
    #[error("no answer from the device within {} while {during}", secs(*after))]
    Timeout {
        /// What was being done.
        during: String,
        /// The timeout that expired.
        after: Duration,
    },
    /// A session ran into a bound the operator sets on every session (leader
    /// election's batch bound) and the device had sent nothing since the session
    /// began: it is silent, which is the switch failing, like a timeout.
    #[error("no answer from the device within {}, {bound}", secs(*within))]
    Silent {
        /// The bound.
        within: Duration,
        /// Which bound, in words (`the batch bound that leader election sets`).
        bound: &'static str,
    },
    /// A session ran into a bound the operator sets on every session while the device
    /// was still answering, or the backend cannot tell (Ansible): the session was
    /// abandoned and its ports try again after their backoff. The switch is not
    /// down: it answers, slowly.
    #[error("{}", overran(*after, bound, *answering))]
    Overran {
        /// The bound.
        after: Duration,
        /// Which bound, in words.
        bound: &'static str,
        /// Whether the device sent something during the session (`false`: the
        /// backend cannot tell).
        answering: bool,
    },
    /// The device refused the credentials from the Secret.
    #[error(
        "authentication to {address} failed: the device refused the credentials from the Secret"
    )]
    AuthenticationFailed {
        /// Address and port that were dialled.
        address: String,
    },
    /// The device presented a host key other than the pinned one.
    #[error(
        "host key of {address} does not match the pin: expected {expected}, presented {presented}"
    )]
    HostKeyMismatch {
        /// Address and port that were dialled.
        address: String,
        /// Pinned fingerprint.
        expected: String,
        /// Fingerprint the device presented.
        presented: String,
    },
    /// The device rejected a command or an edit.
    #[error("the device rejected `{command}`: {output}")]
    CommandRejected {
        /// The command (or RPC) that failed.
        command: String,
        /// What the device printed, trimmed.
        output: String,
    },
    /// The device answered a NETCONF operation with an `<rpc-error>`.
    #[error("the device refused {operation}{}: {error}", for_ports(ports))]
    RpcRejected {
        /// The operation (`edit-config`, `lock`, `commit`, …).
        operation: String,
        /// The ports the error concerns (empty: the whole batch).
        ports: Vec<String>,
        /// The error as the device reported it.
        error: Box<RpcError>,
    },
    /// The port does not exist on the device.
    #[error("port {port} does not exist on the device")]
    UnknownPort {
        /// Device port name.
        port: String,
    },
    /// The backend cannot configure something the desired state needs.
    #[error("this backend cannot configure {capability}")]
    Unsupported {
        /// The missing capability.
        capability: Capability,
    },
    /// After applying, the device reads back differently from what was applied.
    #[error("port {port} reads back differently after apply: {}", fields.iter().map(ToString::to_string).collect::<Vec<_>>().join(", "))]
    VerificationFailed {
        /// Device port name.
        port: String,
        /// Fields that differ.
        fields: Vec<PortField>,
    },
    /// The device answered something the backend could not understand.
    #[error("unexpected answer from the device while {during}: {cause}")]
    Protocol {
        /// What was being done.
        during: String,
        /// What was wrong with the answer.
        #[source]
        cause: Cause,
    },
}

impl DeviceError {
    /// Whether the failure is the whole device's rather than one port's: it could not
    /// be reached, did not answer in time (or at all), or refused the session
    /// (credentials, host key). Such a failure says nothing about the port; the
    /// operator backs off on the switch, once for all its ports. A device that
    /// answers but is slow ([`DeviceError::Overran`]) is not one.
    pub fn is_session_failure(&self) -> bool {
        matches!(
            self,
            DeviceError::Unreachable { .. }
                | DeviceError::Timeout { .. }
                | DeviceError::Silent { .. }
                | DeviceError::AuthenticationFailed { .. }
                | DeviceError::HostKeyMismatch { .. }
        )
    }

    /// Every value [`DeviceError::category`] takes (the metrics export each at 0).
    pub const CATEGORIES: &'static [&'static str] = &[
        "DeviceUnreachable",
        "DeviceTimeout",
        "DeviceSlow",
        "AuthenticationFailed",
        "HostKeyMismatch",
        "CommandRejected",
        "LockDenied",
        "RpcRejected",
        "UnknownPort",
        "Unsupported",
        "VerificationFailed",
        "ProtocolError",
    ];

    /// A short, bounded category: used as a metric label and an Event reason.
    pub fn category(&self) -> &'static str {
        match self {
            DeviceError::Unreachable { .. } => "DeviceUnreachable",
            DeviceError::Timeout { .. } | DeviceError::Silent { .. } => "DeviceTimeout",
            DeviceError::Overran { .. } => "DeviceSlow",
            DeviceError::AuthenticationFailed { .. } => "AuthenticationFailed",
            DeviceError::HostKeyMismatch { .. } => "HostKeyMismatch",
            DeviceError::CommandRejected { .. } => "CommandRejected",
            DeviceError::RpcRejected { error, .. } if error.is_busy() => "LockDenied",
            DeviceError::RpcRejected { .. } => "RpcRejected",
            DeviceError::UnknownPort { .. } => "UnknownPort",
            DeviceError::Unsupported { .. } => "Unsupported",
            DeviceError::VerificationFailed { .. } => "VerificationFailed",
            DeviceError::Protocol { .. } => "ProtocolError",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    /// One error of each kind; a new variant fails to compile in `covered` until it
    /// has an example here, and its category is then checked against the list.
    fn one_of_each() -> Vec<DeviceError> {
        let s = String::new;
        let rpc = |tag: &str| {
            Box::new(RpcError {
                tag: tag.into(),
                ..Default::default()
            })
        };
        let all = vec![
            DeviceError::Unreachable {
                address: s(),
                cause: Cause::msg(""),
            },
            DeviceError::Timeout {
                during: s(),
                after: Duration::ZERO,
            },
            DeviceError::Silent {
                within: Duration::ZERO,
                bound: "",
            },
            DeviceError::Overran {
                after: Duration::ZERO,
                bound: "",
                answering: true,
            },
            DeviceError::AuthenticationFailed { address: s() },
            DeviceError::HostKeyMismatch {
                address: s(),
                expected: s(),
                presented: s(),
            },
            DeviceError::CommandRejected {
                command: s(),
                output: s(),
            },
            DeviceError::RpcRejected {
                operation: s(),
                ports: vec![],
                error: rpc("lock-denied"),
            },
            DeviceError::RpcRejected {
                operation: s(),
                ports: vec![],
                error: rpc("invalid-value"),
            },
            DeviceError::UnknownPort { port: s() },
            DeviceError::Unsupported {
                capability: Capability::Mtu,
            },
            DeviceError::VerificationFailed {
                port: s(),
                fields: vec![],
            },
            DeviceError::Protocol {
                during: s(),
                cause: Cause::msg(""),
            },
        ];
        fn covered(e: &DeviceError) {
            match e {
                DeviceError::Unreachable { .. }
                | DeviceError::Timeout { .. }
                | DeviceError::Silent { .. }
                | DeviceError::Overran { .. }
                | DeviceError::AuthenticationFailed { .. }
                | DeviceError::HostKeyMismatch { .. }
                | DeviceError::CommandRejected { .. }
                | DeviceError::RpcRejected { .. }
                | DeviceError::UnknownPort { .. }
                | DeviceError::Unsupported { .. }
                | DeviceError::VerificationFailed { .. }
                | DeviceError::Protocol { .. } => {}
            }
        }
        all.iter().for_each(covered);
        all
    }

    #[test]
    fn the_category_list_is_every_category_an_error_has() {
        let mut made: Vec<&str> = one_of_each().iter().map(DeviceError::category).collect();
        made.sort_unstable();
        made.dedup();
        let mut listed = DeviceError::CATEGORIES.to_vec();
        listed.sort_unstable();
        assert_eq!(made, listed);
    }

    #[test]
    fn a_device_error_keeps_its_cause_chain() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        let e = DeviceError::Unreachable {
            address: "10.0.0.1:22".into(),
            cause: Cause::during("opening a session channel", io),
        };
        assert_eq!(
            e.to_string(),
            "cannot reach the device at 10.0.0.1:22: opening a session channel: refused"
        );
        let cause = e.source().expect("the cause");
        assert_eq!(cause.to_string(), "opening a session channel: refused");
        assert_eq!(
            cause.source().expect("the I/O error").to_string(),
            "refused"
        );
        assert!(e.is_session_failure());
        // Clones compare equal: batch replies hand the same error to many ports.
        assert_eq!(e.clone(), e);
    }
}

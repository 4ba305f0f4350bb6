//! NETCONF messages (RFC 6241): the hello, the RPCs patchbay sends, and replies
//! parsed into [`Reply`] with typed [`RpcError`]s. Pure, no I/O.

use crate::error::RpcError;

use super::xml::Element;

/// The base namespace.
pub const BASE_NS: &str = "urn:ietf:params:xml:ns:netconf:base:1.0";
/// base:1.0.
pub const BASE_1_0: &str = "urn:ietf:params:netconf:base:1.0";
/// base:1.1 (chunked framing).
pub const BASE_1_1: &str = "urn:ietf:params:netconf:base:1.1";

/// The client hello: base 1.0 and 1.1.
pub fn client_hello() -> String {
    let caps = Element::new("capabilities")
        .child(Element::leaf("capability", BASE_1_0))
        .child(Element::leaf("capability", BASE_1_1));
    let hello = Element::new("hello").attr("xmlns", BASE_NS).child(caps);
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>{}",
        hello.render()
    )
}

/// What the device announced in its hello.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DeviceCapabilities {
    /// Every capability URI, as sent.
    pub uris: Vec<String>,
    /// The session id the device gave this session.
    pub session_id: Option<String>,
}

impl DeviceCapabilities {
    /// Parses the device's hello.
    pub fn from_hello(xml: &str) -> Result<Self, String> {
        let root = Element::parse(xml)?;
        if root.name != "hello" {
            return Err(format!("expected <hello>, got <{}>", root.name));
        }
        let uris = root
            .get("capabilities")
            .map(|c| {
                c.children
                    .iter()
                    .filter(|e| e.name == "capability")
                    .map(|e| e.text.clone())
                    .collect()
            })
            .unwrap_or_default();
        Ok(Self {
            uris,
            session_id: root.get("session-id").map(|e| e.text.clone()),
        })
    }

    /// Whether the device announced capability `name` (`candidate`,
    /// `confirmed-commit`, `validate`, `writable-running`, `rollback-on-error`), in
    /// either the RFC's `urn:ietf:params:netconf:capability:NAME:1.x` form or the
    /// `urn:ietf:params:xml:ns:netconf:capability:NAME:1.x` form older Junos
    /// releases (and the simulator) send.
    pub fn has(&self, name: &str) -> bool {
        self.uris.iter().any(|u| {
            let u = u.split('?').next().unwrap_or(u);
            [
                "urn:ietf:params:netconf:capability:",
                "urn:ietf:params:xml:ns:netconf:capability:",
            ]
            .iter()
            .any(|p| {
                u.strip_prefix(p)
                    .and_then(|rest| rest.strip_prefix(name))
                    .is_some_and(|v| v.starts_with(":1."))
            })
        })
    }

    /// Whether the device can hold a change until told, from any session: a
    /// persisted confirmed commit (RFC 6241 `persist`, `persist-id`,
    /// `cancel-commit`) needs `:confirmed-commit:1.1` and a base:1.1 session
    /// (netconfd refuses `<persist>` as an unknown element over base:1.0).
    pub fn holds(&self) -> bool {
        self.base_1_1()
            && self.has("candidate")
            && self.uris.iter().any(|u| {
                let u = u.split('?').next().unwrap_or(u);
                u == "urn:ietf:params:netconf:capability:confirmed-commit:1.1"
            })
    }

    /// Whether the device speaks base:1.1 (chunked framing).
    pub fn base_1_1(&self) -> bool {
        self.uris.iter().any(|u| u == BASE_1_1)
    }
}

/// A datastore.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Datastore {
    /// `<running/>`.
    Running,
    /// `<candidate/>`.
    Candidate,
}

impl Datastore {
    fn element(self) -> Element {
        Element::new(match self {
            Datastore::Running => "running",
            Datastore::Candidate => "candidate",
        })
    }
}

/// The RPCs patchbay sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Operation {
    /// `<get-config>` with a subtree filter.
    GetConfig {
        /// The datastore.
        source: Datastore,
        /// The filter's content.
        filter: Vec<Element>,
    },
    /// `<edit-config>`.
    EditConfig {
        /// The datastore.
        target: Datastore,
        /// `rollback-on-error` (when announced).
        rollback_on_error: bool,
        /// The `<config>` content.
        config: Vec<Element>,
    },
    /// `<lock>`.
    Lock(Datastore),
    /// `<unlock>`.
    Unlock(Datastore),
    /// `<discard-changes/>`.
    DiscardChanges,
    /// `<validate>` of a datastore.
    Validate(Datastore),
    /// `<commit>`; with `Some(seconds)` a confirmed commit with that timeout.
    Commit {
        /// Confirm timeout for a confirmed commit.
        confirm_timeout: Option<u32>,
        /// `<persist>`: the confirmed commit is held under this token, past the
        /// session's end, until a commit or cancel-commit names it.
        persist: Option<String>,
        /// `<persist-id>`: confirms (or, with `confirm_timeout`, follows up) the
        /// commit held under this token.
        persist_id: Option<String>,
    },
    /// `<cancel-commit>` of the commit held under `persist_id`: the device takes
    /// it back.
    CancelCommit {
        /// The token the commit is held under.
        persist_id: String,
    },
    /// A device-specific RPC given as its body (an inventory read).
    Custom(Element),
    /// `<close-session/>`.
    CloseSession,
}

impl Operation {
    /// The operation's name, for messages (`edit-config`, `commit`, …).
    pub fn name(&self) -> String {
        match self {
            Operation::GetConfig { .. } => "get-config".into(),
            Operation::EditConfig { .. } => "edit-config".into(),
            Operation::Lock(_) => "lock".into(),
            Operation::Unlock(_) => "unlock".into(),
            Operation::DiscardChanges => "discard-changes".into(),
            Operation::Validate(_) => "validate".into(),
            Operation::Commit {
                confirm_timeout: Some(_),
                ..
            } => "confirmed commit".into(),
            Operation::Commit {
                persist_id: Some(_),
                ..
            } => "confirming commit".into(),
            Operation::Commit { .. } => "commit".into(),
            Operation::CancelCommit { .. } => "cancel-commit".into(),
            Operation::Custom(e) => e.name.clone(),
            Operation::CloseSession => "close-session".into(),
        }
    }

    /// The RPC's body element.
    pub fn body(&self) -> Element {
        match self {
            Operation::GetConfig { source, filter } => {
                let mut f = Element::new("filter").attr("type", "subtree");
                f.children = filter.clone();
                Element::new("get-config")
                    .child(Element::new("source").child(source.element()))
                    .child(f)
            }
            Operation::EditConfig {
                target,
                rollback_on_error,
                config,
            } => {
                let mut e = Element::new("edit-config")
                    .child(Element::new("target").child(target.element()));
                if *rollback_on_error {
                    e = e.child(Element::leaf("error-option", "rollback-on-error"));
                }
                let mut c = Element::new("config").attr("xmlns:nc", BASE_NS);
                c.children = config.clone();
                e.child(c)
            }
            Operation::Lock(t) => {
                Element::new("lock").child(Element::new("target").child(t.element()))
            }
            Operation::Unlock(t) => {
                Element::new("unlock").child(Element::new("target").child(t.element()))
            }
            Operation::DiscardChanges => Element::new("discard-changes"),
            Operation::Validate(s) => {
                Element::new("validate").child(Element::new("source").child(s.element()))
            }
            Operation::Commit {
                confirm_timeout,
                persist,
                persist_id,
            } => {
                let mut e = Element::new("commit");
                if let Some(t) = confirm_timeout {
                    e = e
                        .child(Element::new("confirmed"))
                        .child(Element::leaf("confirm-timeout", t.to_string()));
                }
                if let Some(p) = persist {
                    e = e.child(Element::leaf("persist", p.clone()));
                }
                if let Some(p) = persist_id {
                    e = e.child(Element::leaf("persist-id", p.clone()));
                }
                e
            }
            Operation::CancelCommit { persist_id } => {
                Element::new("cancel-commit").child(Element::leaf("persist-id", persist_id.clone()))
            }
            Operation::Custom(body) => body.clone(),
            Operation::CloseSession => Element::new("close-session"),
        }
    }

    /// The whole `<rpc>` message with `message_id`.
    pub fn message(&self, message_id: u64) -> String {
        Element::new("rpc")
            .attr("message-id", message_id.to_string())
            .attr("xmlns", BASE_NS)
            .child(self.body())
            .render()
    }
}

/// A parsed `<rpc-reply>`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Reply {
    /// The `<data>` element, if any.
    pub data: Option<Element>,
    /// The whole reply (device-specific RPCs answer without `<data>`).
    pub root: Element,
    /// `<rpc-error>`s of severity `error`.
    pub errors: Vec<RpcError>,
    /// `<rpc-error>`s of severity `warning`.
    pub warnings: Vec<RpcError>,
}

impl Reply {
    /// Parses a reply and checks it answers `message_id`.
    pub fn parse(xml: &str, message_id: u64) -> Result<Reply, String> {
        let root = Element::parse(xml)?;
        if root.name != "rpc-reply" {
            return Err(format!("expected <rpc-reply>, got <{}>", root.name));
        }
        let id = root.attribute("message-id").unwrap_or_default();
        if id != message_id.to_string() {
            return Err(format!(
                "a reply to message-id {id:?} arrived while waiting for {message_id}"
            ));
        }
        let mut reply = Reply {
            data: root.get("data").cloned(),
            ..Reply::default()
        };
        for e in root.children.iter().filter(|c| c.name == "rpc-error") {
            let text = |n: &str| e.get(n).map(|x| x.text.clone()).filter(|t| !t.is_empty());
            let err = RpcError {
                error_type: text("error-type").unwrap_or_default(),
                tag: text("error-tag").unwrap_or_default(),
                severity: text("error-severity").unwrap_or_else(|| "error".into()),
                app_tag: text("error-app-tag"),
                path: text("error-path"),
                message: text("error-message"),
                session_id: e
                    .get("error-info")
                    .and_then(|i| i.get("session-id"))
                    .map(|s| s.text.clone())
                    .filter(|s| !s.is_empty()),
            };
            if err.severity == "warning" {
                reply.warnings.push(err);
            } else {
                reply.errors.push(err);
            }
        }
        reply.root = root;
        Ok(reply)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capabilities_are_recognised_in_both_uri_forms() {
        let hello = r#"<hello xmlns="urn:ietf:params:xml:ns:netconf:base:1.0"><capabilities>
<capability>urn:ietf:params:netconf:base:1.0</capability>
<capability>urn:ietf:params:netconf:base:1.1</capability>
<capability>urn:ietf:params:netconf:capability:candidate:1.0</capability>
<capability>urn:ietf:params:netconf:capability:confirmed-commit:1.1</capability>
<capability>urn:ietf:params:xml:ns:netconf:capability:validate:1.0</capability>
<capability>urn:ietf:params:netconf:capability:url:1.0?scheme=file</capability>
</capabilities><session-id>4</session-id></hello>"#;
        let caps = DeviceCapabilities::from_hello(hello).unwrap();
        assert!(caps.base_1_1());
        assert!(caps.has("candidate") && caps.has("confirmed-commit") && caps.has("validate"));
        assert!(caps.has("url"));
        assert!(!caps.has("writable-running") && !caps.has("rollback-on-error"));
        assert!(!caps.has("confirmed"));
        assert_eq!(caps.session_id.as_deref(), Some("4"));
        // A persisted hold needs :confirmed-commit:1.1 and base:1.1 (the Juniper
        // simulator announces 1.0 of both).
        assert!(caps.holds());
        let old = hello
            .replace("confirmed-commit:1.1", "confirmed-commit:1.0")
            .replace(
                "<capability>urn:ietf:params:netconf:base:1.1</capability>",
                "",
            );
        assert!(!DeviceCapabilities::from_hello(&old).unwrap().holds());
    }

    #[test]
    fn rpc_errors_are_typed_and_warnings_kept_apart() {
        let xml = r#"<rpc-reply message-id="3" xmlns="urn:ietf:params:xml:ns:netconf:base:1.0">
  <rpc-error><error-type>protocol</error-type><error-tag>lock-denied</error-tag>
    <error-severity>error</error-severity>
    <error-info><session-id>9</session-id></error-info>
    <error-message xml:lang="en">lock denied</error-message></rpc-error>
  <rpc-error><error-severity>warning</error-severity><error-message>statement not found</error-message></rpc-error>
</rpc-reply>"#;
        let r = Reply::parse(xml, 3).unwrap();
        assert_eq!(r.errors.len(), 1);
        assert_eq!(r.warnings.len(), 1);
        let e = &r.errors[0];
        assert!(e.is_busy());
        assert_eq!(
            e.to_string(),
            "lock-denied (protocol error): lock denied (held by NETCONF session 9)"
        );
        assert!(Reply::parse(xml, 4).is_err(), "a reply to another message");
    }

    #[test]
    fn rpcs_render_with_their_options() {
        let commit = Operation::Commit {
            confirm_timeout: Some(90),
            persist: None,
            persist_id: None,
        };
        assert_eq!(
            commit.message(5),
            "<rpc message-id=\"5\" xmlns=\"urn:ietf:params:xml:ns:netconf:base:1.0\"><commit><confirmed/><confirm-timeout>90</confirm-timeout></commit></rpc>"
        );
        let held = Operation::Commit {
            confirm_timeout: Some(660),
            persist: Some("web-0a1b2c3d4e.1.2".into()),
            persist_id: None,
        };
        assert_eq!(
            held.body().render(),
            "<commit><confirmed/><confirm-timeout>660</confirm-timeout><persist>web-0a1b2c3d4e.1.2</persist></commit>"
        );
        let confirming = Operation::Commit {
            confirm_timeout: None,
            persist: None,
            persist_id: Some("web-0a1b2c3d4e.1.2".into()),
        };
        assert_eq!(confirming.name(), "confirming commit");
        assert_eq!(
            confirming.body().render(),
            "<commit><persist-id>web-0a1b2c3d4e.1.2</persist-id></commit>"
        );
        assert_eq!(
            Operation::CancelCommit {
                persist_id: "t".into()
            }
            .body()
            .render(),
            "<cancel-commit><persist-id>t</persist-id></cancel-commit>"
        );
        let edit = Operation::EditConfig {
            target: Datastore::Running,
            rollback_on_error: true,
            config: vec![Element::leaf("x", "1")],
        };
        let body = edit.body().render();
        assert!(
            body.contains(
                "<target><running/></target><error-option>rollback-on-error</error-option>"
            ),
            "{body}"
        );
        assert!(body.contains("<x>1</x>"));
    }
}

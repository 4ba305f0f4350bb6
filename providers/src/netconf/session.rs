//! One NETCONF session over the SSH `netconf` subsystem: the hello exchange, the
//! framing both sides announced, and RPCs with message-id matching and a deadline on
//! every reply. I/O only; messages come from [`super::rpc`].
//!
//! Every message is its own channel write, and the next RPC is written only after
//! the reply to the previous one arrived (the Juniper simulator reads one message
//! per SSH data packet: a hello and an RPC written together lose the RPC).
//!
//! netconfd goes further: its ssh relay may hand it the client's hello and the first
//! RPC in one read, and it then drops the RPC without an answer, even when they were
//! written separately. So a session opens with a read-only probe (a get-config whose
//! filter selects nothing) sent [`HELLO_SETTLE`] after the hello, and sent again
//! (with a new message-id) when no answer comes within [`PROBE_WAIT`]; answers to
//! earlier probes are skipped. A device that never answers fails after the command
//! timeout, like any RPC.

use parking_lot::Mutex;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::cli::SshTarget;
use crate::cli::transport::Subsystem;
use crate::error::{Cause, DeviceError};
use crate::heard::Heard;

use super::framing::Framing;
use super::rpc::{DeviceCapabilities, Operation, Reply, client_hello};

/// Pause between the client hello and the first probe.
pub const HELLO_SETTLE: Duration = Duration::from_millis(10);
/// How long one probe waits for its answer before it is sent again.
pub const PROBE_WAIT: Duration = Duration::from_millis(300);

/// A record of the RPCs sent (operation names), for tests and `patchbay device`.
pub type Journal = Arc<Mutex<Vec<String>>>;

/// An open NETCONF session.
pub struct Session {
    channel: Subsystem,
    buf: Vec<u8>,
    framing: Framing,
    next_id: u64,
    timeout: Duration,
    /// What the device announced.
    pub capabilities: DeviceCapabilities,
    journal: Option<Journal>,
}

impl Session {
    /// Connects, exchanges hellos and chooses the framing (chunked when both sides
    /// announced base:1.1).
    pub async fn open(
        target: &SshTarget,
        timeout: Duration,
        journal: Option<Journal>,
    ) -> Result<Self, DeviceError> {
        Self::open_heard(target, timeout, journal, &Heard::default()).await
    }

    /// [`Session::open`], stamping `heard` whenever the device sends anything.
    pub async fn open_heard(
        target: &SshTarget,
        timeout: Duration,
        journal: Option<Journal>,
        heard: &Heard,
    ) -> Result<Self, DeviceError> {
        let channel = Subsystem::open(target, "netconf", heard).await?;
        let mut s = Self {
            channel,
            buf: Vec::new(),
            framing: Framing::EndOfMessage,
            next_id: 1,
            timeout,
            capabilities: DeviceCapabilities::default(),
            journal,
        };
        let hello = s.read_message("waiting for the device's hello").await?;
        s.capabilities =
            DeviceCapabilities::from_hello(&hello).map_err(|e| DeviceError::Protocol {
                during: "reading the device's hello".into(),
                cause: Cause::msg(e),
            })?;
        let ours = Framing::EndOfMessage
            .encode(&client_hello())
            .expect("the hello has no marker");
        s.channel.write(&ours).await?;
        if s.capabilities.base_1_1() {
            s.framing = Framing::Chunked;
        }
        tokio::time::sleep(HELLO_SETTLE).await;
        s.probe().await?;
        Ok(s)
    }

    /// Sends read-only probes until one is answered (see the module docs).
    async fn probe(&mut self) -> Result<(), DeviceError> {
        let during = "waiting for the device's first answer";
        let give_up = Instant::now() + self.timeout;
        let probe = Operation::GetConfig {
            source: super::rpc::Datastore::Running,
            filter: vec![
                super::xml::Element::new("patchbay-probe").attr("xmlns", "urn:patchbay:probe"),
            ],
        };
        let first = self.next_id;
        loop {
            let id = self.next_id;
            self.next_id += 1;
            let wire = self.framing.encode(&probe.message(id)).expect("no marker");
            self.channel.write(&wire).await?;
            let wait = (Instant::now() + PROBE_WAIT).min(give_up);
            loop {
                match self.read_message_until(during, wait).await {
                    Ok(text) => {
                        let answered = super::xml::Element::parse(&text)
                            .ok()
                            .and_then(|r| r.attribute("message-id").map(str::to_owned))
                            .and_then(|m| m.parse::<u64>().ok());
                        match answered {
                            Some(m) if m == id => return Ok(()),
                            // An earlier probe's late answer.
                            Some(m) if (first..id).contains(&m) => continue,
                            _ => {
                                return Err(DeviceError::Protocol {
                                    during: during.into(),
                                    cause: Cause::msg("an answer to no probe"),
                                });
                            }
                        }
                    }
                    Err(DeviceError::Timeout { .. }) if Instant::now() < give_up => break,
                    Err(DeviceError::Timeout { .. }) => {
                        return Err(DeviceError::Timeout {
                            during: during.into(),
                            after: self.timeout,
                        });
                    }
                    Err(e) => return Err(e),
                }
            }
        }
    }

    /// The framing in use.
    pub fn framing(&self) -> Framing {
        self.framing
    }

    async fn read_message(&mut self, during: &str) -> Result<String, DeviceError> {
        let deadline = Instant::now() + self.timeout;
        self.read_message_until(during, deadline).await
    }

    async fn read_message_until(
        &mut self,
        during: &str,
        deadline: Instant,
    ) -> Result<String, DeviceError> {
        loop {
            let decoded = self
                .framing
                .decode(&self.buf)
                .map_err(|e| DeviceError::Protocol {
                    during: during.to_owned(),
                    cause: Cause::new(e),
                })?;
            if let Some((message, used)) = decoded {
                self.buf.drain(..used);
                return Ok(message);
            }
            match self.channel.read(deadline).await {
                Ok(Some(bytes)) => self.buf.extend_from_slice(&bytes),
                Ok(None) => {
                    return Err(DeviceError::Unreachable {
                        address: self.channel.endpoint().to_owned(),
                        cause: Cause::msg(format!("the device closed the session while {during}")),
                    });
                }
                Err(()) => {
                    return Err(DeviceError::Timeout {
                        during: during.to_owned(),
                        after: self.timeout,
                    });
                }
            }
        }
    }

    /// Sends `op` and waits for its reply. The reply may carry `<rpc-error>`s: the
    /// caller decides what they mean.
    pub async fn rpc(&mut self, op: &Operation) -> Result<Reply, DeviceError> {
        let id = self.next_id;
        self.next_id += 1;
        let name = op.name();
        if let Some(j) = &self.journal {
            j.lock().push(name.clone());
        }
        let wire = self
            .framing
            .encode(&op.message(id))
            .map_err(|e| DeviceError::Protocol {
                during: format!("framing {name}"),
                cause: Cause::new(e),
            })?;
        self.channel.write(&wire).await?;
        let during = format!("waiting for the reply to {name}");
        let text = self.read_message(&during).await?;
        Reply::parse(&text, id).map_err(|e| DeviceError::Protocol {
            during,
            cause: Cause::msg(e),
        })
    }

    /// Ends the session politely (close-session, then the connection); errors are
    /// irrelevant at this point.
    pub async fn close(mut self) {
        let _ =
            tokio::time::timeout(Duration::from_secs(2), self.rpc(&Operation::CloseSession)).await;
        self.channel.close().await;
    }

    /// Drops the connection without a goodbye: the device ends the session (and
    /// rolls back an unconfirmed commit).
    pub fn abandon(self) {
        self.channel.abandon();
    }
}

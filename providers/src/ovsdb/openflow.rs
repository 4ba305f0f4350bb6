//! One OpenFlow 1.3 session with a bridge (I/O; the bytes are [`super::ofwire`]'s):
//! port admin state (PORT_MOD) and patchbay's flows (cookie-masked dump, add, delete),
//! each exchange closed by a BARRIER so ovs-vswitchd has acted on everything sent
//! when a call returns.
//!
//! Why OpenFlow for the admin state: OVSDB has no writable admin-state column
//! (`Interface.admin_state` is status that ovs-vswitchd reports), and every
//! OVSDB-only trick (a parking VLAN, policing) either leaks traffic to some other port
//! or only drops one direction. A PORT_MOD down is what `ovs-ofctl mod-port BR P down`
//! does: ovs-vswitchd sets the interface down, the host behind it loses carrier, no
//! frame passes either way, and `Interface.admin_state` reads `down` in OVSDB, where
//! patchbay reads it back.
//!
//! Neither is persistent: ovs-vswitchd brings ports up and forgets every flow when it
//! restarts. The port then reads back `up` and without its ACL while the
//! configuration says otherwise, which the drift check sees and repairs, like any
//! other drift; a read that finds the OpenFlow listener gone fails the switch's
//! session, and the worker re-checks every Active port as soon as it answers again.

use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::time::Instant;

use super::ofwire::{self, Flow, kind};
use super::rpc::OvsdbError;
use crate::error::Cause;

trait Stream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Stream for T {}

/// One message to send, and what it is for (named in its error).
#[derive(Debug, Clone)]
pub struct Request {
    /// What the message does, e.g. "OpenFlow port-mod of p1".
    pub what: String,
    /// The message; its xid is replaced by the session's.
    pub bytes: Vec<u8>,
}

/// An OpenFlow session with one bridge.
pub struct Session {
    s: Box<dyn Stream>,
    endpoint: String,
    deadline: Instant,
    timeout: Duration,
    buf: Vec<u8>,
    xid: u32,
}

impl Session {
    /// Connects to `target` — `unix:PATH` (the bridge's `<rundir>/<bridge>.mgmt`
    /// socket) or `tcp:HOST:PORT` (a `ptcp:` service-controller listener) — and says
    /// HELLO. Every exchange of the session must finish within `timeout` of now.
    pub async fn open(target: &str, timeout: Duration) -> Result<Self, OvsdbError> {
        let endpoint = format!("openflow {target}");
        let deadline = Instant::now() + timeout;
        let dial = async {
            Ok::<Box<dyn Stream>, std::io::Error>(match target.strip_prefix("unix:") {
                Some(path) => Box::new(tokio::net::UnixStream::connect(path).await?),
                None => {
                    let addr = target.strip_prefix("tcp:").unwrap_or(target);
                    let s = tokio::net::TcpStream::connect(addr).await?;
                    let _ = s.set_nodelay(true);
                    Box::new(s)
                }
            })
        };
        let s = tokio::time::timeout_at(deadline, dial)
            .await
            .map_err(|_| OvsdbError::Timeout {
                during: "connecting to the OpenFlow listener".into(),
                after: timeout,
            })?
            .map_err(|e| OvsdbError::Io {
                endpoint: endpoint.clone(),
                cause: Cause::new(e),
            })?;
        let mut session = Self {
            s,
            endpoint,
            deadline,
            timeout,
            buf: Vec::new(),
            xid: 1,
        };
        session.write(&ofwire::empty(kind::HELLO, 1)).await?;
        Ok(session)
    }

    fn io(&self, e: std::io::Error) -> OvsdbError {
        OvsdbError::Io {
            endpoint: self.endpoint.clone(),
            cause: Cause::new(e),
        }
    }

    async fn write(&mut self, bytes: &[u8]) -> Result<(), OvsdbError> {
        let r = tokio::time::timeout_at(self.deadline, self.s.write_all(bytes)).await;
        match r {
            Err(_) => Err(OvsdbError::Timeout {
                during: "writing to the OpenFlow listener".into(),
                after: self.timeout,
            }),
            Ok(Err(e)) => Err(self.io(e)),
            Ok(Ok(())) => Ok(()),
        }
    }

    /// The next message (answering ECHO requests on the way); a version mismatch
    /// in the switch's HELLO is an error.
    async fn next(&mut self, waiting_for: &str) -> Result<Vec<u8>, OvsdbError> {
        loop {
            while self.buf.len() < 8
                || self.buf.len() < usize::from(u16::from_be_bytes([self.buf[2], self.buf[3]]))
            {
                let mut chunk = [0u8; 8192];
                let n = tokio::time::timeout_at(self.deadline, self.s.read(&mut chunk))
                    .await
                    .map_err(|_| OvsdbError::Timeout {
                        during: format!("waiting for {waiting_for}"),
                        after: self.timeout,
                    })?
                    .map_err(|e| self.io(e))?;
                if n == 0 {
                    return Err(OvsdbError::Io {
                        endpoint: self.endpoint.clone(),
                        cause: Cause::msg("the switch closed the OpenFlow connection"),
                    });
                }
                self.buf.extend_from_slice(&chunk[..n]);
            }
            let len = usize::from(u16::from_be_bytes([self.buf[2], self.buf[3]])).max(8);
            let msg: Vec<u8> = self.buf.drain(..len).collect();
            match msg[1] {
                kind::ECHO_REQUEST => {
                    let mut reply = msg.clone();
                    reply[1] = kind::ECHO_REPLY;
                    self.write(&reply).await?;
                }
                kind::HELLO if msg[0] < ofwire::VERSION => {
                    return Err(OvsdbError::Operation {
                        op: "OpenFlow hello".into(),
                        error: format!(
                            "the bridge speaks OpenFlow version {} at most; patchbay needs 1.3 \
                             (set the bridge's protocols to include OpenFlow13)",
                            msg[0]
                        ),
                        details: String::new(),
                    });
                }
                kind::HELLO => {}
                _ => return Ok(msg),
            }
        }
    }

    fn take_xid(&mut self) -> u32 {
        self.xid += 1;
        self.xid
    }

    /// Sends `requests` and a barrier; returns one result per request (the switch's
    /// error for the ones it refused). A failed session is the `Err`.
    pub async fn run(
        &mut self,
        requests: &[Request],
    ) -> Result<Vec<Result<(), String>>, OvsdbError> {
        let first = self.xid + 1;
        let mut out = Vec::new();
        for r in requests {
            let xid = self.take_xid();
            let mut bytes = r.bytes.clone();
            bytes[4..8].copy_from_slice(&xid.to_be_bytes());
            out.extend(bytes);
        }
        let barrier = self.take_xid();
        out.extend(ofwire::empty(kind::BARRIER_REQUEST, barrier));
        self.write(&out).await?;
        let mut results: Vec<Result<(), String>> = vec![Ok(()); requests.len()];
        loop {
            let msg = self.next("the OpenFlow barrier").await?;
            let xid = u32::from_be_bytes([msg[4], msg[5], msg[6], msg[7]]);
            match msg[1] {
                kind::ERROR => {
                    let (t, c) = error_code(&msg);
                    let text = ofwire::error_text(t, c);
                    match xid.checked_sub(first).map(|i| i as usize) {
                        Some(i) if i < requests.len() => results[i] = Err(text),
                        _ => {
                            return Err(OvsdbError::Operation {
                                op: "OpenFlow".into(),
                                error: text,
                                details: String::new(),
                            });
                        }
                    }
                }
                kind::BARRIER_REPLY if xid == barrier => return Ok(results),
                _ => {}
            }
        }
    }

    /// The flows of every table whose cookie matches `cookie` under `mask`.
    pub async fn dump_flows(&mut self, cookie: u64, mask: u64) -> Result<Vec<Flow>, OvsdbError> {
        let xid = self.take_xid();
        self.write(&ofwire::flow_stats_request(cookie, mask, xid))
            .await?;
        let mut flows = Vec::new();
        loop {
            let msg = self.next("the OpenFlow flow dump").await?;
            let this = u32::from_be_bytes([msg[4], msg[5], msg[6], msg[7]]);
            if this != xid {
                continue;
            }
            match msg[1] {
                kind::ERROR => {
                    let (t, c) = error_code(&msg);
                    return Err(OvsdbError::Operation {
                        op: "OpenFlow flow dump".into(),
                        error: ofwire::error_text(t, c),
                        details: String::new(),
                    });
                }
                kind::MULTIPART_REPLY if msg.len() >= 16 => {
                    let more = u16::from_be_bytes([msg[10], msg[11]]) & ofwire::OFPMPF_REPLY_MORE;
                    let batch = ofwire::decode_flow_stats(&msg[16..]).map_err(|e| {
                        OvsdbError::Operation {
                            op: "OpenFlow flow dump".into(),
                            error: e.to_string(),
                            details: String::new(),
                        }
                    })?;
                    flows.extend(batch);
                    if more == 0 {
                        return Ok(flows);
                    }
                }
                _ => {}
            }
        }
    }
}

fn error_code(msg: &[u8]) -> (u16, u16) {
    if msg.len() >= 12 {
        (
            u16::from_be_bytes([msg[8], msg[9]]),
            u16::from_be_bytes([msg[10], msg[11]]),
        )
    } else {
        (0, 0)
    }
}

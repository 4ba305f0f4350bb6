//! Just enough OpenFlow 1.0 to take a bridge port administratively down or up:
//! HELLO, PORT_MOD with `OFPPC_PORT_DOWN`, BARRIER, answering ECHO.
//!
//! Why OpenFlow: OVSDB has no writable admin-state column (`Interface.admin_state` is
//! status that ovs-vswitchd reports), and every OVSDB-only trick (a parking VLAN,
//! policing) either leaks traffic to some other port or only drops one direction.
//! A PORT_MOD down is what `ovs-ofctl mod-port BR P down` does: ovs-vswitchd sets the
//! interface down, the host behind it loses carrier, no frame passes either way, and
//! `Interface.admin_state` reads `down` in OVSDB, where patchbay reads it back.
//!
//! It is not persistent: ovs-vswitchd brings ports up again when it restarts. The
//! port then reads back `up` while the configuration says disabled, which the drift
//! check sees and repairs (or reports), like any other drift.

use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::time::Instant;

use super::rpc::OvsdbError;
use crate::error::Cause;

const VERSION: u8 = 0x01;
const OFPT_HELLO: u8 = 0;
const OFPT_ERROR: u8 = 1;
const OFPT_ECHO_REQUEST: u8 = 2;
const OFPT_ECHO_REPLY: u8 = 3;
const OFPT_PORT_MOD: u8 = 15;
const OFPT_BARRIER_REQUEST: u8 = 18;
const OFPT_BARRIER_REPLY: u8 = 19;
const OFPPC_PORT_DOWN: u32 = 1;

/// One port to take down or bring up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortMod {
    /// Port name (for error messages).
    pub name: String,
    /// OpenFlow port number (`Interface.ofport`).
    pub ofport: u16,
    /// Hardware address (`Interface.mac_in_use`); OVS refuses a PORT_MOD whose
    /// address does not match the port's.
    pub mac: [u8; 6],
    /// True for down.
    pub down: bool,
}

/// Parses `aa:bb:cc:dd:ee:ff`.
pub fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let mut out = [0u8; 6];
    let mut parts = s.split(':');
    for b in &mut out {
        *b = u8::from_str_radix(parts.next()?, 16).ok()?;
    }
    parts.next().is_none().then_some(out)
}

fn header(kind: u8, len: u16, xid: u32) -> Vec<u8> {
    let mut m = Vec::with_capacity(len as usize);
    m.push(VERSION);
    m.push(kind);
    m.extend_from_slice(&len.to_be_bytes());
    m.extend_from_slice(&xid.to_be_bytes());
    m
}

/// The OFPT_PORT_MOD message (OpenFlow 1.0, 32 bytes).
pub fn port_mod_message(p: &PortMod, xid: u32) -> Vec<u8> {
    let mut m = header(OFPT_PORT_MOD, 32, xid);
    m.extend_from_slice(&p.ofport.to_be_bytes());
    m.extend_from_slice(&p.mac);
    let config = if p.down { OFPPC_PORT_DOWN } else { 0 };
    m.extend_from_slice(&config.to_be_bytes());
    m.extend_from_slice(&OFPPC_PORT_DOWN.to_be_bytes()); // mask: only PORT_DOWN
    m.extend_from_slice(&0u32.to_be_bytes()); // advertise: unchanged
    m.extend_from_slice(&[0u8; 4]);
    m
}

trait Stream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Stream for T {}

/// Sends the port changes over one OpenFlow session to `target` and waits for the
/// barrier, so ovs-vswitchd has acted on every one of them when this returns.
/// `target` is `unix:PATH` (the bridge's `<rundir>/<bridge>.mgmt` socket) or
/// `tcp:HOST:PORT` (a `ptcp:` service-controller listener on the bridge).
pub async fn set_ports_down(
    target: &str,
    mods: &[PortMod],
    timeout: Duration,
) -> Result<(), OvsdbError> {
    if mods.is_empty() {
        return Ok(());
    }
    let endpoint = format!("openflow {target}");
    let io = |e: std::io::Error| OvsdbError::Io {
        endpoint: endpoint.clone(),
        cause: Cause::new(e),
    };
    let deadline = Instant::now() + timeout;
    let timed_out = |during: &str| OvsdbError::Timeout {
        during: during.into(),
        after: timeout,
    };
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
    let mut s = tokio::time::timeout_at(deadline, dial)
        .await
        .map_err(|_| timed_out("connecting to the OpenFlow listener"))?
        .map_err(io)?;
    let mut out = header(OFPT_HELLO, 8, 1);
    for (i, m) in mods.iter().enumerate() {
        out.extend(port_mod_message(m, 100 + i as u32));
    }
    let barrier_xid = 99;
    out.extend(header(OFPT_BARRIER_REQUEST, 8, barrier_xid));
    s.write_all(&out).await.map_err(io)?;
    let mut buf = Vec::new();
    loop {
        // Read one whole message.
        while buf.len() < 8 || buf.len() < u16::from_be_bytes([buf[2], buf[3]]) as usize {
            let mut chunk = [0u8; 4096];
            let n = tokio::time::timeout_at(deadline, s.read(&mut chunk))
                .await
                .map_err(|_| timed_out("waiting for the OpenFlow barrier"))?
                .map_err(io)?;
            if n == 0 {
                return Err(OvsdbError::Io {
                    endpoint: endpoint.clone(),
                    cause: Cause::msg("the switch closed the OpenFlow connection"),
                });
            }
            buf.extend_from_slice(&chunk[..n]);
        }
        let len = (u16::from_be_bytes([buf[2], buf[3]]) as usize).max(8);
        let msg: Vec<u8> = buf.drain(..len).collect();
        let xid = u32::from_be_bytes([msg[4], msg[5], msg[6], msg[7]]);
        match msg[1] {
            OFPT_ERROR => {
                let (kind, code) = if msg.len() >= 12 {
                    (
                        u16::from_be_bytes([msg[8], msg[9]]),
                        u16::from_be_bytes([msg[10], msg[11]]),
                    )
                } else {
                    (0, 0)
                };
                let port = xid
                    .checked_sub(100)
                    .and_then(|i| mods.get(i as usize))
                    .map(|m| m.name.clone())
                    .unwrap_or_else(|| "?".into());
                return Err(OvsdbError::Operation {
                    op: format!("OpenFlow port-mod of {port}"),
                    error: format!("OpenFlow error type {kind} code {code}"),
                    details: match (kind, code) {
                        (4, 0) => "bad port number".into(),
                        (4, 1) => "hardware address does not match the port".into(),
                        _ => String::new(),
                    },
                });
            }
            OFPT_ECHO_REQUEST => {
                let mut reply = msg.clone();
                reply[1] = OFPT_ECHO_REPLY;
                s.write_all(&reply).await.map_err(io)?;
            }
            OFPT_BARRIER_REPLY if xid == barrier_xid => return Ok(()),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_mod_is_the_openflow_1_0_layout() {
        let m = port_mod_message(
            &PortMod {
                name: "p1".into(),
                ofport: 3,
                mac: [0xaa, 0xbb, 0xcc, 0, 1, 2],
                down: true,
            },
            7,
        );
        assert_eq!(
            m,
            vec![
                1, 15, 0, 32, 0, 0, 0, 7, // header
                0, 3, 0xaa, 0xbb, 0xcc, 0, 1, 2, // port, hw_addr
                0, 0, 0, 1, 0, 0, 0, 1, // config, mask
                0, 0, 0, 0, 0, 0, 0, 0, // advertise, pad
            ]
        );
        assert_eq!(
            parse_mac("aa:bb:cc:00:01:02"),
            Some([0xaa, 0xbb, 0xcc, 0, 1, 2])
        );
        assert_eq!(parse_mac("aa:bb"), None);
        assert_eq!(parse_mac("aa:bb:cc:00:01:02:03"), None);
    }
}

//! The OpenFlow 1.3 wire format patchbay speaks to a bridge: the messages it sends
//! (HELLO, PORT_MOD, FLOW_MOD add and cookie-masked delete, the flow-stats request,
//! BARRIER, ECHO reply) and the ones it reads (ERROR, flow-stats reply). Pure: bytes
//! in, bytes out, table-tested here and proven against ovs-vswitchd in
//! `tests/ovsdb_backend.rs`.
//!
//! Why 1.3 and not 1.0: patchbay marks its flows with cookies and must delete and
//! dump exactly those (`cookie_mask` exists from 1.1), and ACL port ranges become
//! masked TCP/UDP port matches (OXM, from 1.2; ovs-vswitchd accepts masks on them).
//! That is also why the wire format is written here: the maintained OpenFlow crate
//! (rust_ofp) speaks 1.0 only.
//!
//! A match is a sorted list of [`Oxm`] fields (OpenFlow basic class), a mask equal to
//! all ones is stored as no mask, so what patchbay writes and what ovs-vswitchd dumps
//! compare equal field by field.

/// OpenFlow 1.3.
pub const VERSION: u8 = 0x04;
/// Message types used here.
pub mod kind {
    /// HELLO.
    pub const HELLO: u8 = 0;
    /// ERROR.
    pub const ERROR: u8 = 1;
    /// ECHO_REQUEST.
    pub const ECHO_REQUEST: u8 = 2;
    /// ECHO_REPLY.
    pub const ECHO_REPLY: u8 = 3;
    /// FLOW_MOD.
    pub const FLOW_MOD: u8 = 14;
    /// PORT_MOD.
    pub const PORT_MOD: u8 = 16;
    /// MULTIPART_REQUEST.
    pub const MULTIPART_REQUEST: u8 = 18;
    /// MULTIPART_REPLY.
    pub const MULTIPART_REPLY: u8 = 19;
    /// BARRIER_REQUEST.
    pub const BARRIER_REQUEST: u8 = 20;
    /// BARRIER_REPLY.
    pub const BARRIER_REPLY: u8 = 21;
}

const OFPPC_PORT_DOWN: u32 = 1;
const OFPP_NORMAL: u32 = 0xffff_fffa;
const OFPP_ANY: u32 = 0xffff_ffff;
const OFPG_ANY: u32 = 0xffff_ffff;
const OFPTT_ALL: u8 = 0xff;
const OFP_NO_BUFFER: u32 = 0xffff_ffff;
const OFPFC_ADD: u8 = 0;
const OFPFC_DELETE: u8 = 3;
const OFPMT_OXM: u16 = 1;
const OFPIT_APPLY_ACTIONS: u16 = 4;
const OFPAT_OUTPUT: u16 = 0;
const OFPMP_FLOW: u16 = 1;
/// Multipart reply flag: more replies follow.
pub const OFPMPF_REPLY_MORE: u16 = 1;
const OXM_CLASS_BASIC: u16 = 0x8000;

/// OXM field numbers (OpenFlow basic class) patchbay matches on.
pub mod field {
    /// Ingress port (u32).
    pub const IN_PORT: u8 = 0;
    /// Ethernet destination (6 bytes).
    pub const ETH_DST: u8 = 3;
    /// Ethernet type (u16).
    pub const ETH_TYPE: u8 = 5;
    /// IP protocol (u8).
    pub const IP_PROTO: u8 = 10;
    /// IPv4 source (u32, maskable).
    pub const IPV4_SRC: u8 = 11;
    /// IPv4 destination (u32, maskable).
    pub const IPV4_DST: u8 = 12;
    /// TCP source port (u16, maskable on Open vSwitch).
    pub const TCP_SRC: u8 = 13;
    /// TCP destination port.
    pub const TCP_DST: u8 = 14;
    /// UDP source port.
    pub const UDP_SRC: u8 = 15;
    /// UDP destination port.
    pub const UDP_DST: u8 = 16;
    /// IPv6 source (16 bytes, maskable).
    pub const IPV6_SRC: u8 = 26;
    /// IPv6 destination (16 bytes, maskable).
    pub const IPV6_DST: u8 = 27;
    /// ICMPv6 type (u8).
    pub const ICMPV6_TYPE: u8 = 29;
}

/// One match field. `mask` is `None` for an exact match (a mask of all ones is
/// normalised to `None`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Oxm {
    /// Field number (OpenFlow basic class), or 0x80 + field for another class (kept
    /// so an unexpected field makes a dumped flow differ).
    pub field: u8,
    /// The value, big-endian.
    pub value: Vec<u8>,
    /// The mask, big-endian; `None` = exact.
    pub mask: Option<Vec<u8>>,
}

impl Oxm {
    /// An exact match.
    pub fn exact(field: u8, value: &[u8]) -> Self {
        Self {
            field,
            value: value.to_vec(),
            mask: None,
        }
    }

    /// A masked match (an all-ones mask becomes exact; value bits outside the mask
    /// are cleared, as ovs-vswitchd does).
    pub fn masked(field: u8, value: &[u8], mask: &[u8]) -> Self {
        if mask.iter().all(|b| *b == 0xff) {
            return Self::exact(field, value);
        }
        Self {
            field,
            value: value.iter().zip(mask).map(|(v, m)| v & m).collect(),
            mask: Some(mask.to_vec()),
        }
    }
}

/// What a flow does with what it matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FlowAction {
    /// `actions=NORMAL`: the bridge's normal (VLAN-aware learning) forwarding.
    Normal,
    /// No actions: drop.
    Drop,
    /// Anything else (patchbay never writes it; a dumped flow with it differs).
    Other,
}

/// One flow of table 0.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Flow {
    /// Priority.
    pub priority: u16,
    /// Cookie.
    pub cookie: u64,
    /// Match fields, sorted by field number.
    pub matches: Vec<Oxm>,
    /// What it does.
    pub action: FlowAction,
}

fn header(kind: u8, len: usize, xid: u32) -> Vec<u8> {
    let mut m = Vec::with_capacity(len);
    m.push(VERSION);
    m.push(kind);
    m.extend_from_slice(&(len as u16).to_be_bytes());
    m.extend_from_slice(&xid.to_be_bytes());
    m
}

fn set_len(m: &mut [u8]) {
    let len = m.len() as u16;
    m[2..4].copy_from_slice(&len.to_be_bytes());
}

/// A message with no body (HELLO, BARRIER_REQUEST).
pub fn empty(kind: u8, xid: u32) -> Vec<u8> {
    header(kind, 8, xid)
}

/// OFPT_PORT_MOD: port `ofport` (hardware address `mac`, which OVS checks) down or up.
pub fn port_mod(ofport: u32, mac: [u8; 6], down: bool, xid: u32) -> Vec<u8> {
    let mut m = header(kind::PORT_MOD, 40, xid);
    m.extend_from_slice(&ofport.to_be_bytes());
    m.extend_from_slice(&[0; 4]);
    m.extend_from_slice(&mac);
    m.extend_from_slice(&[0; 2]);
    let config = if down { OFPPC_PORT_DOWN } else { 0 };
    m.extend_from_slice(&config.to_be_bytes());
    m.extend_from_slice(&OFPPC_PORT_DOWN.to_be_bytes()); // mask: only PORT_DOWN
    m.extend_from_slice(&0u32.to_be_bytes()); // advertise: unchanged
    m.extend_from_slice(&[0; 4]);
    m
}

/// An `ofp_match` of OXM fields, padded to 8 bytes.
fn encode_match(out: &mut Vec<u8>, fields: &[Oxm]) {
    let start = out.len();
    out.extend_from_slice(&OFPMT_OXM.to_be_bytes());
    out.extend_from_slice(&[0, 0]);
    for f in fields {
        out.extend_from_slice(&OXM_CLASS_BASIC.to_be_bytes());
        let has_mask = f.mask.is_some();
        out.push((f.field << 1) | u8::from(has_mask));
        let len = f.value.len() + f.mask.as_ref().map_or(0, Vec::len);
        out.push(len as u8);
        out.extend_from_slice(&f.value);
        if let Some(m) = &f.mask {
            out.extend_from_slice(m);
        }
    }
    let len = (out.len() - start) as u16;
    out[start + 2..start + 4].copy_from_slice(&len.to_be_bytes());
    while !(out.len() - start).is_multiple_of(8) {
        out.push(0);
    }
}

/// OFPT_FLOW_MOD adding `flow` to table 0 (an identical match and priority is
/// replaced, cookie included).
pub fn flow_add(flow: &Flow, xid: u32) -> Vec<u8> {
    let mut m = header(kind::FLOW_MOD, 0, xid);
    m.extend_from_slice(&flow.cookie.to_be_bytes());
    m.extend_from_slice(&0u64.to_be_bytes()); // cookie_mask: unused by ADD
    m.push(0); // table 0
    m.push(OFPFC_ADD);
    m.extend_from_slice(&[0; 4]); // idle, hard timeout: none
    m.extend_from_slice(&flow.priority.to_be_bytes());
    m.extend_from_slice(&OFP_NO_BUFFER.to_be_bytes());
    m.extend_from_slice(&OFPP_ANY.to_be_bytes());
    m.extend_from_slice(&OFPG_ANY.to_be_bytes());
    m.extend_from_slice(&[0; 4]); // flags, pad
    encode_match(&mut m, &flow.matches);
    match flow.action {
        FlowAction::Normal => {
            m.extend_from_slice(&OFPIT_APPLY_ACTIONS.to_be_bytes());
            m.extend_from_slice(&24u16.to_be_bytes());
            m.extend_from_slice(&[0; 4]);
            m.extend_from_slice(&OFPAT_OUTPUT.to_be_bytes());
            m.extend_from_slice(&16u16.to_be_bytes());
            m.extend_from_slice(&OFPP_NORMAL.to_be_bytes());
            m.extend_from_slice(&0u16.to_be_bytes()); // max_len
            m.extend_from_slice(&[0; 6]);
        }
        FlowAction::Drop | FlowAction::Other => {}
    }
    set_len(&mut m);
    m
}

/// OFPT_FLOW_MOD deleting, from every table, every flow whose cookie matches
/// `cookie` under `mask` (and nothing else).
pub fn flow_delete(cookie: u64, mask: u64, xid: u32) -> Vec<u8> {
    let mut m = header(kind::FLOW_MOD, 0, xid);
    m.extend_from_slice(&cookie.to_be_bytes());
    m.extend_from_slice(&mask.to_be_bytes());
    m.push(OFPTT_ALL);
    m.push(OFPFC_DELETE);
    m.extend_from_slice(&[0; 6]); // timeouts, priority
    m.extend_from_slice(&OFP_NO_BUFFER.to_be_bytes());
    m.extend_from_slice(&OFPP_ANY.to_be_bytes());
    m.extend_from_slice(&OFPG_ANY.to_be_bytes());
    m.extend_from_slice(&[0; 4]);
    encode_match(&mut m, &[]);
    set_len(&mut m);
    m
}

/// OFPMP_FLOW request: the flows of every table whose cookie matches `cookie` under
/// `mask`.
pub fn flow_stats_request(cookie: u64, mask: u64, xid: u32) -> Vec<u8> {
    let mut m = header(kind::MULTIPART_REQUEST, 0, xid);
    m.extend_from_slice(&OFPMP_FLOW.to_be_bytes());
    m.extend_from_slice(&[0; 6]); // flags, pad
    m.push(OFPTT_ALL);
    m.extend_from_slice(&[0; 3]);
    m.extend_from_slice(&OFPP_ANY.to_be_bytes());
    m.extend_from_slice(&OFPG_ANY.to_be_bytes());
    m.extend_from_slice(&[0; 4]);
    m.extend_from_slice(&cookie.to_be_bytes());
    m.extend_from_slice(&mask.to_be_bytes());
    encode_match(&mut m, &[]);
    set_len(&mut m);
    m
}

/// Why a message could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed OpenFlow message: {0}")]
pub struct Malformed(pub &'static str);

fn u16_at(b: &[u8], at: usize) -> Result<u16, Malformed> {
    b.get(at..at + 2)
        .map(|s| u16::from_be_bytes([s[0], s[1]]))
        .ok_or(Malformed("truncated"))
}

fn u64_at(b: &[u8], at: usize) -> Result<u64, Malformed> {
    b.get(at..at + 8)
        .map(|s| u64::from_be_bytes(s.try_into().expect("8 bytes")))
        .ok_or(Malformed("truncated"))
}

/// Decodes an `ofp_match` at the start of `b`; returns the fields (sorted) and the
/// padded length it takes.
fn decode_match(b: &[u8]) -> Result<(Vec<Oxm>, usize), Malformed> {
    if u16_at(b, 0)? != OFPMT_OXM {
        return Err(Malformed("match is not OXM"));
    }
    let len = usize::from(u16_at(b, 2)?);
    if len < 4 || b.len() < len {
        return Err(Malformed("match length"));
    }
    let mut fields = Vec::new();
    let mut at = 4;
    while at + 4 <= len {
        let class = u16_at(b, at)?;
        let fh = b[at + 2];
        let flen = usize::from(b[at + 3]);
        let body = b
            .get(at + 4..at + 4 + flen)
            .ok_or(Malformed("OXM length"))?;
        let (field, has_mask) = (fh >> 1, fh & 1 == 1);
        let field = if class == OXM_CLASS_BASIC {
            field
        } else {
            0x80 | field
        };
        fields.push(if has_mask {
            let half = flen / 2;
            Oxm::masked(field, &body[..half], &body[half..])
        } else {
            Oxm::exact(field, body)
        });
        at += 4 + flen;
    }
    fields.sort();
    Ok((fields, len.div_ceil(8) * 8))
}

fn decode_action(instructions: &[u8]) -> FlowAction {
    if instructions.is_empty() {
        return FlowAction::Drop;
    }
    // Exactly one APPLY_ACTIONS holding exactly OUTPUT:NORMAL; an APPLY_ACTIONS
    // with no actions is a drop too.
    let Ok(kind) = u16_at(instructions, 0) else {
        return FlowAction::Other;
    };
    let Ok(len) = u16_at(instructions, 2) else {
        return FlowAction::Other;
    };
    if kind != OFPIT_APPLY_ACTIONS || usize::from(len) != instructions.len() {
        return FlowAction::Other;
    }
    let actions = &instructions[8..];
    if actions.is_empty() {
        return FlowAction::Drop;
    }
    if actions.len() == 16
        && u16_at(actions, 0) == Ok(OFPAT_OUTPUT)
        && actions[4..8] == OFPP_NORMAL.to_be_bytes()
    {
        FlowAction::Normal
    } else {
        FlowAction::Other
    }
}

/// The flows of one OFPMP_FLOW reply body (after the 16-byte multipart header).
pub fn decode_flow_stats(body: &[u8]) -> Result<Vec<Flow>, Malformed> {
    let mut flows = Vec::new();
    let mut at = 0;
    while at < body.len() {
        let len = usize::from(u16_at(body, at)?);
        let entry = body
            .get(at..at + len)
            .ok_or(Malformed("flow stats length"))?;
        if len < 56 {
            return Err(Malformed("flow stats entry too short"));
        }
        let priority = u16_at(entry, 12)?;
        let cookie = u64_at(entry, 24)?;
        let (matches, mlen) = decode_match(&entry[48..])?;
        let instructions = entry.get(48 + mlen..).ok_or(Malformed("instructions"))?;
        flows.push(Flow {
            priority,
            cookie,
            matches,
            action: decode_action(instructions),
        });
        at += len;
    }
    Ok(flows)
}

/// What an OFPT_ERROR means, in words, for the errors patchbay can cause.
pub fn error_text(kind: u16, code: u16) -> String {
    let what = match (kind, code) {
        (1, _) => "bad request",
        (4, _) => "bad match (a field or mask the switch does not accept)",
        (5, 0) => "unknown flow-mod error",
        (5, 1) => "the flow table is full",
        (5, _) => "the switch refused the flow",
        (7, 0) => "bad port number",
        (7, 1) => "hardware address does not match the port",
        _ => "",
    };
    if what.is_empty() {
        format!("OpenFlow error type {kind} code {code}")
    } else {
        format!("OpenFlow error type {kind} code {code}: {what}")
    }
}

/// Parses `aa:bb:cc:dd:ee:ff`.
pub fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let mut out = [0u8; 6];
    let mut parts = s.split(':');
    for b in &mut out {
        let p = parts.next()?;
        if p.len() != 2 {
            return None;
        }
        *b = u8::from_str_radix(p, 16).ok()?;
    }
    parts.next().is_none().then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_mod_is_the_openflow_1_3_layout() {
        let m = port_mod(3, [0xaa, 0xbb, 0xcc, 0, 1, 2], true, 7);
        assert_eq!(
            m,
            vec![
                4, 16, 0, 40, 0, 0, 0, 7, // header
                0, 0, 0, 3, 0, 0, 0, 0, // port_no, pad
                0xaa, 0xbb, 0xcc, 0, 1, 2, 0, 0, // hw_addr, pad
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
        assert_eq!(parse_mac("aa:bb:cc:00:01:2"), None);
    }

    fn flow(action: FlowAction) -> Flow {
        Flow {
            priority: 0xe000,
            cookie: 0x7062_1234_5678_0001,
            matches: vec![
                Oxm::exact(field::IN_PORT, &3u32.to_be_bytes()),
                Oxm::exact(field::ETH_TYPE, &0x0800u16.to_be_bytes()),
                Oxm::exact(field::IP_PROTO, &[6]),
                Oxm::masked(field::IPV4_SRC, &[10, 1, 2, 3], &[255, 0, 0, 0]),
                Oxm::masked(field::TCP_DST, &[0, 16], &[0xff, 0xf0]),
            ],
            action,
        }
    }

    /// A flow-stats entry as ovs-vswitchd sends it for `flow` (the FLOW_MOD's match
    /// and instructions behind the 48-byte stats header).
    fn stats_entry(flow: &Flow) -> Vec<u8> {
        let add = flow_add(flow, 1);
        let tail = &add[48..];
        let mut e = Vec::new();
        e.extend_from_slice(&((48 + tail.len()) as u16).to_be_bytes());
        e.extend_from_slice(&[0, 0]); // table, pad
        e.extend_from_slice(&[0; 8]); // duration
        e.extend_from_slice(&flow.priority.to_be_bytes());
        e.extend_from_slice(&[0; 10]); // timeouts, flags, pad
        e.extend_from_slice(&flow.cookie.to_be_bytes());
        e.extend_from_slice(&[0; 16]); // counters
        e.extend_from_slice(tail);
        e
    }

    #[test]
    fn flows_written_decode_as_themselves() {
        let allow = flow(FlowAction::Normal);
        let deny = flow(FlowAction::Drop);
        let m = flow_add(&allow, 9);
        assert_eq!(&m[..4], &[4, 14, 0, m.len() as u8]);
        assert_eq!(m.len() % 8, 0);
        // The masked source keeps only its network bits.
        assert_eq!(allow.matches[3].value, vec![10, 0, 0, 0]);
        let mut body = stats_entry(&allow);
        body.extend(stats_entry(&deny));
        let mut back = decode_flow_stats(&body).unwrap();
        assert_eq!(back.remove(0), allow);
        assert_eq!(back.remove(0), deny);
        assert!(decode_flow_stats(&body[..30]).is_err());
    }

    #[test]
    fn deletes_and_dumps_are_cookie_masked_over_every_table() {
        let d = flow_delete(0x7062_0000_0000_0000, 0xffff_0000_0000_0000, 5);
        assert_eq!(d.len(), 56);
        assert_eq!(&d[8..16], &0x7062_0000_0000_0000u64.to_be_bytes());
        assert_eq!(&d[16..24], &0xffff_0000_0000_0000u64.to_be_bytes());
        assert_eq!((d[24], d[25]), (0xff, 3));
        let r = flow_stats_request(1, 2, 6);
        assert_eq!(r.len(), 56);
        assert_eq!(&r[8..10], &[0, 1]);
        assert_eq!(&r[32..40], &1u64.to_be_bytes());
        assert_eq!(&r[40..48], &2u64.to_be_bytes());
    }
}

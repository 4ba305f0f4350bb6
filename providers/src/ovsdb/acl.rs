//! A port's ACL as OpenFlow flows on its bridge, and back. Pure, table-tested;
//! proven with traffic in `tests/ovs_acl.rs`.
//!
//! The semantics every backend implements (README, "ACL semantics"): rules in order,
//! first match wins, unmatched traffic allowed, stateless, ARP and IPv6 neighbour
//! discovery always pass. On a bridge that is:
//!
//! - rule *i* (0-based) becomes flows of priority `RULE_PRIORITY - i` in table 0, so
//!   an earlier rule wins; `allow` is `actions=NORMAL` (the bridge's own forwarding,
//!   which is also what gives `tag`/`trunks` their meaning), `deny` is no action;
//! - traffic no rule matches meets no patchbay flow and takes the bridge's own
//!   (priority 0, `NORMAL`) flow: allowed;
//! - rules match only IPv4 or IPv6 frames (`eth_type`), so ARP never meets them; for
//!   a direction with an IPv6 rule, ICMPv6 types 133–137 (router and neighbour
//!   discovery, redirect) get a `NORMAL` flow at `PASS_PRIORITY`, above every rule;
//! - ingress (from the host) matches `in_port` (every interface of the port, so a
//!   bond's members too); egress (towards the host) cannot match the port NORMAL
//!   will choose, so it matches the host NIC's MAC as `eth_dst` — unicast to that
//!   host; broadcast and multicast towards it are not filtered. Without a known MAC
//!   an egress rule is refused ([`AclError::NoHostMac`]);
//! - a port range becomes the fewest masked port matches that cover it exactly
//!   ([`port_blocks`]); a rule with ranges on both sides is their cross product.
//!
//! Cookies mark the flows: `MARK` in the top 16 bits, a 32-bit hash of the port
//! name, one generation bit and the rule number (1-based; 0 for the pass flows).
//! Deleting or dumping "this port's flows" is a cookie-masked operation, so flows
//! patchbay did not write are never touched. A change adds the new flows under the
//! other generation (an identical match and priority is replaced in place) and then
//! deletes what is left of the old generation: the port is never without its ACL.
//!
//! Reading back decodes the dumped flows into rules and renders those rules again;
//! only if that reproduces exactly the dumped flows is the ACL reported as those
//! rules. Anything else (a flow edited, added or removed behind patchbay's back)
//! reads as [`AclRule::unrecognised`], which no configuration equals: drift.

use std::collections::BTreeSet;
use std::net::IpAddr;

use super::ofwire::{Flow, FlowAction, Oxm, field};
use crate::model::{AclAction, AclDirection, AclProtocol, AclRule, IpVersion};
use crate::values::{Cidr, L4PortRange};

/// The top 16 bits of every patchbay cookie ("pb").
pub const MARK: u64 = 0x7062 << 48;
/// Mask selecting patchbay's flows on a bridge.
pub const MARK_MASK: u64 = 0xffff << 48;
/// Mask selecting one port's flows (mark and port hash).
pub const PORT_MASK: u64 = 0xffff_ffff_ffff_0000;
/// The generation bit.
pub const GENERATION: u64 = 0x8000;
/// Priority of the neighbour-discovery pass flows.
pub const PASS_PRIORITY: u16 = 0xf000;
/// Priority of the first rule's flows; rule i has `RULE_PRIORITY - i`.
pub const RULE_PRIORITY: u16 = 0xe000;

const ETH_IPV4: u16 = 0x0800;
const ETH_IPV6: u16 = 0x86dd;
const PROTO_ICMP: u8 = 1;
const PROTO_TCP: u8 = 6;
const PROTO_UDP: u8 = 17;
const PROTO_ICMPV6: u8 = 58;
/// Router solicitation/advertisement, neighbour solicitation/advertisement, redirect.
const ND_TYPES: [u8; 5] = [133, 134, 135, 136, 137];

/// Why a port's ACL cannot be rendered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AclError {
    /// An egress rule, and no MAC address known for the host behind the port.
    #[error("egress rules match the MAC address of the host behind the port, and none is known")]
    NoHostMac,
    /// The port has no OpenFlow port number (not attached to the datapath).
    #[error("the port has no OpenFlow port number (is its interface attached?)")]
    NoOfport,
}

/// Where a port's flows apply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortMatch {
    /// The port name (hashed into the cookie).
    pub name: String,
    /// OpenFlow port numbers of the port's interfaces.
    pub ofports: Vec<u32>,
    /// MAC address of the host behind the port (egress rules).
    pub host_mac: Option<[u8; 6]>,
}

/// FNV-1a of the port name: the port's part of the cookie.
pub fn port_hash(name: &str) -> u32 {
    name.bytes().fold(0x811c_9dc5u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

/// The cookie of `port`'s flows (generation 0, rule 0).
pub fn port_cookie(name: &str) -> u64 {
    MARK | (u64::from(port_hash(name)) << 16)
}

/// The generation `flows` were written under (false when none).
pub fn generation(flows: &[Flow]) -> bool {
    flows.first().is_some_and(|f| f.cookie & GENERATION != 0)
}

/// The fewest `(value, mask)` blocks covering exactly `low..=high`.
pub fn port_blocks(range: L4PortRange) -> Vec<(u16, u16)> {
    let (mut low, high) = (u32::from(range.low), u32::from(range.high));
    let mut out = Vec::new();
    while low <= high {
        // The largest aligned block starting at `low` that stays within `high`.
        let mut size = if low == 0 {
            1 << 16
        } else {
            1u32 << low.trailing_zeros()
        };
        while low + size - 1 > high {
            size >>= 1;
        }
        out.push((low as u16, !((size - 1) as u16)));
        low += size;
    }
    out
}

fn cidr_field(f: u8, c: &Cidr) -> Option<Oxm> {
    if c.prefix() == 0 {
        return None;
    }
    Some(match c.addr() {
        IpAddr::V4(a) => {
            let mask = u32::MAX << (32 - u32::from(c.prefix()));
            Oxm::masked(f, &a.octets(), &mask.to_be_bytes())
        }
        IpAddr::V6(a) => {
            let mask = u128::MAX << (128 - u32::from(c.prefix()));
            Oxm::masked(f, &a.octets(), &mask.to_be_bytes())
        }
    })
}

fn port_fields(f: u8, range: Option<L4PortRange>) -> Vec<Option<Oxm>> {
    match range {
        None => vec![None],
        Some(r) => port_blocks(r)
            .into_iter()
            .map(|(v, m)| (m != 0).then(|| Oxm::masked(f, &v.to_be_bytes(), &m.to_be_bytes())))
            .collect(),
    }
}

/// Where a flow of `direction` applies: one match per ingress interface, or the host
/// MAC.
fn anchors(direction: AclDirection, port: &PortMatch) -> Result<Vec<Oxm>, AclError> {
    match direction {
        AclDirection::Ingress => {
            if port.ofports.is_empty() {
                return Err(AclError::NoOfport);
            }
            Ok(port
                .ofports
                .iter()
                .map(|p| Oxm::exact(field::IN_PORT, &p.to_be_bytes()))
                .collect())
        }
        AclDirection::Egress => {
            let mac = port.host_mac.ok_or(AclError::NoHostMac)?;
            Ok(vec![Oxm::exact(field::ETH_DST, &mac)])
        }
    }
}

fn sorted(mut v: Vec<Oxm>) -> Vec<Oxm> {
    v.sort();
    v
}

/// The flows of `rules` on `port`, under generation `gen`.
pub fn render(
    rules: &[AclRule],
    port: &PortMatch,
    generation: bool,
) -> Result<Vec<Flow>, AclError> {
    let base = port_cookie(&port.name) | if generation { GENERATION } else { 0 };
    let mut flows = BTreeSet::new();
    for direction in [AclDirection::Ingress, AclDirection::Egress] {
        if !rules
            .iter()
            .any(|r| r.direction == direction && r.ip_version == IpVersion::V6)
        {
            continue;
        }
        for anchor in anchors(direction, port)? {
            for t in ND_TYPES {
                flows.insert(Flow {
                    priority: PASS_PRIORITY,
                    cookie: base,
                    matches: sorted(vec![
                        anchor.clone(),
                        Oxm::exact(field::ETH_TYPE, &ETH_IPV6.to_be_bytes()),
                        Oxm::exact(field::IP_PROTO, &[PROTO_ICMPV6]),
                        Oxm::exact(field::ICMPV6_TYPE, &[t]),
                    ]),
                    action: FlowAction::Normal,
                });
            }
        }
    }
    for (i, rule) in rules.iter().enumerate() {
        let cookie = base | (i as u64 + 1);
        let priority = RULE_PRIORITY - i as u16;
        let v4 = rule.ip_version == IpVersion::V4;
        let mut common = vec![Oxm::exact(
            field::ETH_TYPE,
            &if v4 { ETH_IPV4 } else { ETH_IPV6 }.to_be_bytes(),
        )];
        let proto = match rule.protocol {
            AclProtocol::Tcp => Some(PROTO_TCP),
            AclProtocol::Udp => Some(PROTO_UDP),
            AclProtocol::Icmp => Some(if v4 { PROTO_ICMP } else { PROTO_ICMPV6 }),
            AclProtocol::All => None,
        };
        if let Some(p) = proto {
            common.push(Oxm::exact(field::IP_PROTO, &[p]));
        }
        let (src_f, dst_f) = if v4 {
            (field::IPV4_SRC, field::IPV4_DST)
        } else {
            (field::IPV6_SRC, field::IPV6_DST)
        };
        common.extend(rule.src.as_ref().and_then(|c| cidr_field(src_f, c)));
        common.extend(rule.dst.as_ref().and_then(|c| cidr_field(dst_f, c)));
        let (sp, dp) = match rule.protocol {
            AclProtocol::Udp => (field::UDP_SRC, field::UDP_DST),
            _ => (field::TCP_SRC, field::TCP_DST),
        };
        let action = match rule.action {
            AclAction::Allow => FlowAction::Normal,
            AclAction::Deny => FlowAction::Drop,
        };
        for anchor in anchors(rule.direction, port)? {
            for s in port_fields(sp, rule.src_ports) {
                for d in port_fields(dp, rule.dst_ports) {
                    let mut m = common.clone();
                    m.push(anchor.clone());
                    m.extend(s.clone());
                    m.extend(d.clone());
                    flows.insert(Flow {
                        priority,
                        cookie,
                        matches: sorted(m),
                        action,
                    });
                }
            }
        }
    }
    Ok(flows.into_iter().collect())
}

/// `flows` with the generation bit cleared, as a set (for comparing).
pub fn normalised(flows: &[Flow]) -> BTreeSet<Flow> {
    flows
        .iter()
        .map(|f| Flow {
            cookie: f.cookie & !GENERATION,
            ..f.clone()
        })
        .collect()
}

fn prefix_of(mask: &[u8]) -> Option<u8> {
    let ones: u32 = mask.iter().map(|b| b.count_ones()).sum();
    let full = ones as usize / 8;
    let contiguous = mask.iter().enumerate().all(|(i, b)| {
        if i < full {
            *b == 0xff
        } else if i == full {
            b.leading_ones() == ones % 8 && b.count_ones() == ones % 8
        } else {
            *b == 0
        }
    });
    contiguous.then_some(ones as u8)
}

fn cidr_of(o: &Oxm) -> Option<Cidr> {
    let addr: IpAddr = match o.value.len() {
        4 => IpAddr::from(<[u8; 4]>::try_from(o.value.as_slice()).ok()?),
        16 => IpAddr::from(<[u8; 16]>::try_from(o.value.as_slice()).ok()?),
        _ => return None,
    };
    let prefix = match &o.mask {
        None => (o.value.len() * 8) as u8,
        Some(m) => prefix_of(m)?,
    };
    Cidr::parse(&format!("{addr}/{prefix}")).ok()
}

/// Merges port blocks back into one range (they must tile it exactly).
fn range_of(blocks: &BTreeSet<(u16, u16)>) -> Option<L4PortRange> {
    let mut next: Option<u32> = None;
    let mut low = None;
    for (v, m) in blocks {
        let (v, size) = (u32::from(*v), u32::from(!*m) + 1);
        if next.is_some_and(|n| n != v) {
            return None;
        }
        low.get_or_insert(v);
        next = Some(v + size);
    }
    let (low, high) = (low?, next? - 1);
    L4PortRange::parse(&if low == high {
        low.to_string()
    } else {
        format!("{low}-{high}")
    })
    .ok()
}

fn get(flow: &Flow, f: u8) -> Option<&Oxm> {
    flow.matches.iter().find(|o| o.field == f)
}

fn u16_block(o: Option<&Oxm>) -> Option<(u16, u16)> {
    o.map(|o| {
        let v = u16::from_be_bytes([o.value[0], *o.value.get(1).unwrap_or(&0)]);
        let m = o.mask.as_ref().map_or(0xffff, |m| {
            u16::from_be_bytes([m[0], *m.get(1).unwrap_or(&0)])
        });
        (v, m)
    })
}

/// Decodes one rule from its flows (all with the same rule number).
fn decode_rule(flows: &[&Flow]) -> Option<(AclRule, Option<[u8; 6]>)> {
    let first = flows.first()?;
    let ip_version = match get(first, field::ETH_TYPE)?.value.as_slice() {
        [0x08, 0x00] => IpVersion::V4,
        [0x86, 0xdd] => IpVersion::V6,
        _ => return None,
    };
    let protocol = match get(first, field::IP_PROTO).map(|o| o.value.as_slice()) {
        None => AclProtocol::All,
        Some([PROTO_TCP]) => AclProtocol::Tcp,
        Some([PROTO_UDP]) => AclProtocol::Udp,
        Some([PROTO_ICMP] | [PROTO_ICMPV6]) => AclProtocol::Icmp,
        Some(_) => return None,
    };
    let (direction, mac) = match get(first, field::ETH_DST) {
        Some(o) => (
            AclDirection::Egress,
            Some(<[u8; 6]>::try_from(o.value.as_slice()).ok()?),
        ),
        None => (AclDirection::Ingress, None),
    };
    let action = match first.action {
        FlowAction::Normal => AclAction::Allow,
        FlowAction::Drop => AclAction::Deny,
        FlowAction::Other => return None,
    };
    let (src_f, dst_f) = match ip_version {
        IpVersion::V4 => (field::IPV4_SRC, field::IPV4_DST),
        IpVersion::V6 => (field::IPV6_SRC, field::IPV6_DST),
    };
    let src = get(first, src_f).map(cidr_of);
    let dst = get(first, dst_f).map(cidr_of);
    let (sp, dp) = match protocol {
        AclProtocol::Udp => (field::UDP_SRC, field::UDP_DST),
        _ => (field::TCP_SRC, field::TCP_DST),
    };
    let src_blocks: BTreeSet<(u16, u16)> =
        flows.iter().filter_map(|f| u16_block(get(f, sp))).collect();
    let dst_blocks: BTreeSet<(u16, u16)> =
        flows.iter().filter_map(|f| u16_block(get(f, dp))).collect();
    // A range covering every port is rendered as no match at all.
    let ports = |blocks: &BTreeSet<(u16, u16)>| -> Option<Option<L4PortRange>> {
        if blocks.is_empty() {
            Some(None)
        } else {
            range_of(blocks).map(Some)
        }
    };
    let rule = AclRule {
        ip_version,
        action,
        protocol,
        direction,
        src: match src {
            None => None,
            Some(c) => Some(c?),
        },
        src_ports: ports(&src_blocks)?,
        dst: match dst {
            None => None,
            Some(c) => Some(c?),
        },
        dst_ports: ports(&dst_blocks)?,
    };
    Some((rule, mac))
}

/// The rules `flows` (one port's patchbay flows) encode, checked by rendering them
/// again; [`AclRule::unrecognised`] when they do not reproduce `flows` exactly.
pub fn decode(flows: &[Flow], port: &PortMatch) -> Vec<AclRule> {
    if flows.is_empty() {
        return Vec::new();
    }
    let mut by_rule: std::collections::BTreeMap<u64, Vec<&Flow>> = Default::default();
    for f in flows {
        let n = f.cookie & 0x7fff;
        if n != 0 {
            by_rule.entry(n).or_default().push(f);
        }
    }
    let mut rules = Vec::new();
    let mut mac = None;
    for (expect, (n, group)) in (1u64..).zip(&by_rule) {
        if *n != expect {
            return vec![AclRule::unrecognised()];
        }
        match decode_rule(group) {
            Some((rule, m)) => {
                if m.is_some() {
                    if mac.is_some() && mac != m {
                        return vec![AclRule::unrecognised()];
                    }
                    mac = m;
                }
                rules.push(rule);
            }
            None => return vec![AclRule::unrecognised()],
        }
    }
    let again = PortMatch {
        host_mac: mac,
        ..port.clone()
    };
    match render(&rules, &again, false) {
        Ok(r) if normalised(&r) == normalised(flows) => rules,
        _ => vec![AclRule::unrecognised()],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(s: &str) -> L4PortRange {
        L4PortRange::parse(s).unwrap()
    }

    #[test]
    fn port_ranges_become_the_fewest_exact_blocks() {
        let cases: &[(&str, &[(u16, u16)])] = &[
            ("22", &[(22, 0xffff)]),
            ("16-31", &[(16, 0xfff0)]),
            ("20-23", &[(20, 0xfffc)]),
            ("22-25", &[(22, 0xfffe), (24, 0xfffe)]),
            ("1-7", &[(1, 0xffff), (2, 0xfffe), (4, 0xfffc)]),
            (
                "1024-65535",
                &[
                    (1024, 0xfc00),
                    (2048, 0xf800),
                    (4096, 0xf000),
                    (8192, 0xe000),
                    (16384, 0xc000),
                    (32768, 0x8000),
                ],
            ),
        ];
        for (text, want) in cases {
            let got = port_blocks(range(text));
            assert_eq!(&got, want, "{text}");
            // Every port of the range is covered exactly once, and nothing else.
            for p in 0..=u16::MAX {
                let hits = got.iter().filter(|(v, m)| p & m == *v).count();
                let inside = (range(text).low..=range(text).high).contains(&p);
                assert_eq!(hits, usize::from(inside), "{text}: port {p}");
            }
        }
        assert_eq!(port_blocks(range("1-65535")).len(), 16);
    }

    fn port() -> PortMatch {
        PortMatch {
            name: "p1".into(),
            ofports: vec![3],
            host_mac: Some([2, 0, 0, 0, 0, 1]),
        }
    }

    fn rule(text: &str) -> AclRule {
        // "v4 deny tcp in src=10.0.0.0/8 sp=22 dst=… dp=20-30"
        let mut r = AclRule::matching(
            IpVersion::V4,
            AclProtocol::All,
            AclDirection::Ingress,
            AclAction::Deny,
        );
        for w in text.split_whitespace() {
            match w {
                "v6" => r.ip_version = IpVersion::V6,
                "allow" => r.action = AclAction::Allow,
                "tcp" => r.protocol = AclProtocol::Tcp,
                "udp" => r.protocol = AclProtocol::Udp,
                "icmp" => r.protocol = AclProtocol::Icmp,
                "out" => r.direction = AclDirection::Egress,
                _ => match w.split_once('=') {
                    Some(("src", c)) => r.src = Some(Cidr::parse(c).unwrap()),
                    Some(("dst", c)) => r.dst = Some(Cidr::parse(c).unwrap()),
                    Some(("sp", p)) => r.src_ports = Some(range(p)),
                    Some(("dp", p)) => r.dst_ports = Some(range(p)),
                    _ => panic!("{w}"),
                },
            }
        }
        r
    }

    #[test]
    fn every_rule_form_reads_back_as_itself() {
        let lists: Vec<Vec<AclRule>> = vec![
            vec![],
            vec![rule("tcp dp=22")],
            vec![rule("allow tcp src=10.1.0.0/16 dp=80"), rule("tcp")],
            vec![
                rule("udp sp=1000-2000 dp=53"),
                rule("allow icmp out"),
                rule("out"),
            ],
            vec![
                rule("v6 tcp dst=2001:db8::/32 dp=22-30"),
                rule("v6 allow icmp"),
                rule("v6 out"),
            ],
            vec![rule("allow src=10.0.0.0/8"), rule("tcp dp=1-65535")],
        ];
        // (A /0 network never reaches here: the validator turns it into "any".)
        for rules in lists {
            let flows = render(&rules, &port(), true).unwrap();
            assert_eq!(decode(&flows, &port()), rules, "{flows:#?}");
        }
    }

    #[test]
    fn first_match_wins_by_priority_and_nd_always_passes() {
        let rules = vec![rule("v6 allow tcp dp=22"), rule("v6")];
        let flows = render(&rules, &port(), false).unwrap();
        let pass: Vec<&Flow> = flows
            .iter()
            .filter(|f| f.priority == PASS_PRIORITY)
            .collect();
        assert_eq!(
            pass.len(),
            5,
            "one NORMAL flow per neighbour-discovery type"
        );
        assert!(pass.iter().all(|f| f.action == FlowAction::Normal));
        let p = |n: u64| {
            flows
                .iter()
                .find(|f| f.cookie & 0x7fff == n)
                .unwrap()
                .priority
        };
        assert!(PASS_PRIORITY > p(1) && p(1) > p(2));
        // IPv4-only rules need no pass flows: ARP has its own ethertype.
        assert!(
            render(&[rule("tcp")], &port(), false)
                .unwrap()
                .iter()
                .all(|f| f.priority != PASS_PRIORITY)
        );
    }

    #[test]
    fn egress_needs_the_host_mac_and_ingress_every_interface() {
        let no_mac = PortMatch {
            host_mac: None,
            ..port()
        };
        assert_eq!(
            render(&[rule("out")], &no_mac, false),
            Err(AclError::NoHostMac)
        );
        assert!(render(&[rule("tcp")], &no_mac, false).is_ok());
        let bond = PortMatch {
            ofports: vec![3, 4],
            ..port()
        };
        assert_eq!(render(&[rule("tcp dp=22")], &bond, false).unwrap().len(), 2);
        let flows = render(&[rule("out tcp")], &port(), false).unwrap();
        assert!(
            flows[0]
                .matches
                .contains(&Oxm::exact(field::ETH_DST, &[2, 0, 0, 0, 0, 1]))
        );
    }

    #[test]
    fn flows_edited_behind_our_back_read_as_drift() {
        let rules = vec![rule("tcp dp=22-25"), rule("allow udp")];
        let flows = render(&rules, &port(), false).unwrap();
        assert_eq!(decode(&flows, &port()), rules);
        let of_rule = |n: u64| flows.iter().position(|f| f.cookie & 0x7fff == n).unwrap();
        // One block of the range removed: a narrower rule, which differs.
        let mut fewer = flows.clone();
        fewer.remove(of_rule(1));
        assert_eq!(decode(&fewer, &port())[0].dst_ports, Some(range("24-25")));
        // A whole rule removed reads as the shorter list.
        let mut shorter = flows.clone();
        shorter.remove(of_rule(2));
        assert_eq!(decode(&shorter, &port()), rules[..1].to_vec());
        // An action changed.
        let mut changed = flows.clone();
        changed[of_rule(1)].action = FlowAction::Normal;
        assert_eq!(decode(&changed, &port()), vec![AclRule::unrecognised()]);
        // A priority changed (the order would differ).
        let mut moved = flows.clone();
        moved[of_rule(1)].priority -= 5;
        assert_eq!(decode(&moved, &port()), vec![AclRule::unrecognised()]);
        // The other generation reads the same.
        let other = render(&rules, &port(), true).unwrap();
        assert_eq!(decode(&other, &port()), rules);
        assert!(generation(&other) && !generation(&flows));
        // Cookies of one port never match another's mask.
        assert_ne!(port_cookie("p1") & PORT_MASK, port_cookie("p2") & PORT_MASK);
    }
}

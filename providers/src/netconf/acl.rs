//! A port's ACL as the `acl` subtree of patchbay's YANG module
//! (`providers/yang/patchbay-ports.yang`), and back. Pure, table-tested; proven
//! against netconfd in `tests/netconf_backend.rs`.
//!
//! The entries have the shape of RFC 8519's `ace` (`matches/ipv4|ipv6` with
//! `protocol` and the networks, `matches/tcp|udp` with `source-port` and
//! `destination-port` as `lower-port`/`upper-port`, `actions/forwarding`
//! accept|drop), keyed by `sequence` — the rule's position in the configuration,
//! counted across both directions — and filed under `ingress` or `egress`. Reading
//! merges both lists by sequence, which gives back the configuration's order; a
//! sequence gap, a duplicate or an entry patchbay cannot express is an error naming
//! it (the port then reads as drift).

use super::xml::Element;
use crate::model::{AclAction, AclDirection, AclProtocol, AclRule, IpVersion};
use crate::values::{Cidr, L4PortRange};

fn family(rule: &AclRule) -> (&'static str, &'static str, &'static str) {
    match rule.ip_version {
        IpVersion::V4 => ("ipv4", "source-ipv4-network", "destination-ipv4-network"),
        IpVersion::V6 => ("ipv6", "source-ipv6-network", "destination-ipv6-network"),
    }
}

fn protocol_number(rule: &AclRule) -> Option<u8> {
    match (rule.protocol, rule.ip_version) {
        (AclProtocol::Tcp, _) => Some(6),
        (AclProtocol::Udp, _) => Some(17),
        (AclProtocol::Icmp, IpVersion::V4) => Some(1),
        (AclProtocol::Icmp, IpVersion::V6) => Some(58),
        (AclProtocol::All, _) => None,
    }
}

fn range_element(name: &str, r: &L4PortRange) -> Element {
    Element::new(name)
        .child(Element::leaf("lower-port", r.low.to_string()))
        .child(Element::leaf("upper-port", r.high.to_string()))
}

fn ace(sequence: usize, rule: &AclRule) -> Element {
    let (l3, src, dst) = family(rule);
    let mut ip = Element::new(l3);
    if let Some(p) = protocol_number(rule) {
        ip = ip.child(Element::leaf("protocol", p.to_string()));
    }
    if let Some(c) = &rule.src {
        ip = ip.child(Element::leaf(src, c.to_string()));
    }
    if let Some(c) = &rule.dst {
        ip = ip.child(Element::leaf(dst, c.to_string()));
    }
    let mut matches = Element::new("matches").child(ip);
    let l4 = match rule.protocol {
        AclProtocol::Tcp => Some("tcp"),
        AclProtocol::Udp => Some("udp"),
        _ => None,
    };
    if let Some(l4) = l4 {
        let mut e = Element::new(l4);
        if let Some(r) = &rule.src_ports {
            e = e.child(range_element("source-port", r));
        }
        if let Some(r) = &rule.dst_ports {
            e = e.child(range_element("destination-port", r));
        }
        matches = matches.child(e);
    }
    let forwarding = match rule.action {
        AclAction::Allow => "accept",
        AclAction::Deny => "drop",
    };
    Element::new("ace")
        .child(Element::leaf("sequence", sequence.to_string()))
        .child(matches)
        .child(Element::new("actions").child(Element::leaf("forwarding", forwarding)))
}

/// The `acl` element (named `name`) for `rules`; `None` for no rules.
pub fn element(name: &str, rules: &[AclRule]) -> Option<Element> {
    if rules.is_empty() {
        return None;
    }
    let mut acl = Element::new(name);
    for direction in [AclDirection::Ingress, AclDirection::Egress] {
        let entries: Vec<Element> = rules
            .iter()
            .enumerate()
            .filter(|(_, r)| r.direction == direction)
            .map(|(i, r)| ace(i + 1, r))
            .collect();
        if entries.is_empty() {
            continue;
        }
        let mut d = Element::new(match direction {
            AclDirection::Ingress => "ingress",
            AclDirection::Egress => "egress",
        });
        d.children = entries;
        acl = acl.child(d);
    }
    Some(acl)
}

fn text<'a>(e: &'a Element, path: &[&str]) -> Option<&'a str> {
    let path: Vec<String> = path.iter().map(|s| (*s).to_owned()).collect();
    e.text_at(&path)
}

fn read_range(e: Option<&Element>, what: &str) -> Result<Option<L4PortRange>, String> {
    let Some(e) = e else { return Ok(None) };
    let low = text(e, &["lower-port"]).ok_or_else(|| format!("{what} has no lower-port"))?;
    let text = match text(e, &["upper-port"]) {
        Some(high) if high != low => format!("{low}-{high}"),
        _ => low.to_owned(),
    };
    L4PortRange::parse(&text)
        .map(Some)
        .map_err(|err| format!("{what} {text:?}: {err}"))
}

fn read_ace(e: &Element, direction: AclDirection) -> Result<(usize, AclRule), String> {
    let seq: usize = text(e, &["sequence"])
        .and_then(|s| s.parse().ok())
        .ok_or("an ace without a sequence")?;
    let what = format!("ace {seq}");
    let matches = e.get("matches").ok_or(format!("{what} has no matches"))?;
    let (ip_version, ip) = match (matches.get("ipv4"), matches.get("ipv6")) {
        (Some(ip), None) => (IpVersion::V4, ip),
        (None, Some(ip)) => (IpVersion::V6, ip),
        _ => return Err(format!("{what} matches neither ipv4 nor ipv6 alone")),
    };
    let action = match text(e, &["actions", "forwarding"]) {
        Some("accept") => AclAction::Allow,
        Some("drop") => AclAction::Deny,
        other => return Err(format!("{what} forwarding {other:?}")),
    };
    let mut rule = AclRule::matching(ip_version, AclProtocol::All, direction, action);
    let (_, src, dst) = family(&rule);
    rule.protocol = match (text(ip, &["protocol"]), ip_version) {
        (None, _) => AclProtocol::All,
        (Some("6"), _) => AclProtocol::Tcp,
        (Some("17"), _) => AclProtocol::Udp,
        (Some("1"), IpVersion::V4) | (Some("58"), IpVersion::V6) => AclProtocol::Icmp,
        (Some(p), _) => return Err(format!("{what} protocol {p} is not one patchbay writes")),
    };
    let cidr = |leaf: &str| -> Result<Option<Cidr>, String> {
        text(ip, &[leaf])
            .map(|t| Cidr::parse(t).map_err(|err| format!("{what} {leaf} {t:?}: {err}")))
            .transpose()
    };
    rule.src = cidr(src)?;
    rule.dst = cidr(dst)?;
    let l4 = match rule.protocol {
        AclProtocol::Tcp => matches.get("tcp"),
        AclProtocol::Udp => matches.get("udp"),
        _ => None,
    };
    if (matches.get("tcp").is_some() || matches.get("udp").is_some()) && l4.is_none() {
        return Err(format!(
            "{what} has a port match that disagrees with its protocol"
        ));
    }
    if let Some(l4) = l4 {
        rule.src_ports = read_range(l4.get("source-port"), &format!("{what} source-port"))?;
        rule.dst_ports = read_range(
            l4.get("destination-port"),
            &format!("{what} destination-port"),
        )?;
    }
    Ok((seq, rule))
}

/// The rules of an `acl` element (`None`: no element, no rules), in sequence order.
pub fn read(acl: Option<&Element>) -> Result<Vec<AclRule>, String> {
    let Some(acl) = acl else {
        return Ok(Vec::new());
    };
    let mut all = Vec::new();
    for (name, direction) in [
        ("ingress", AclDirection::Ingress),
        ("egress", AclDirection::Egress),
    ] {
        for d in acl.children.iter().filter(|c| c.name == name) {
            for e in d.children.iter().filter(|c| c.name == "ace") {
                all.push(read_ace(e, direction)?);
            }
        }
    }
    all.sort_by_key(|(seq, _)| *seq);
    for (expect, (seq, _)) in (1..).zip(&all) {
        if *seq != expect {
            return Err(format!(
                "ACL sequence {seq} where {expect} was expected (a rule missing or repeated)"
            ));
        }
    }
    Ok(all.into_iter().map(|(_, r)| r).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules() -> Vec<AclRule> {
        let base = AclRule {
            dst_ports: Some(L4PortRange::parse("22").unwrap()),
            ..AclRule::matching(
                IpVersion::V4,
                AclProtocol::Tcp,
                AclDirection::Ingress,
                AclAction::Deny,
            )
        };
        vec![
            base.clone(),
            AclRule {
                direction: AclDirection::Egress,
                protocol: AclProtocol::Udp,
                action: AclAction::Allow,
                src: Some(Cidr::parse("10.0.0.0/8").unwrap()),
                src_ports: Some(L4PortRange::parse("1000-2000").unwrap()),
                dst_ports: None,
                ..base.clone()
            },
            AclRule {
                ip_version: IpVersion::V6,
                protocol: AclProtocol::Icmp,
                dst: Some(Cidr::parse("2001:db8::/32").unwrap()),
                dst_ports: None,
                ..base.clone()
            },
            AclRule {
                protocol: AclProtocol::All,
                dst_ports: None,
                ..base
            },
        ]
    }

    #[test]
    fn rules_render_as_aces_and_read_back_in_order() {
        let rules = rules();
        let e = element("acl", &rules).unwrap();
        let xml = e.render();
        assert!(
            xml.contains("<ingress><ace><sequence>1</sequence>"),
            "{xml}"
        );
        assert!(
            xml.contains("<destination-port><lower-port>22</lower-port><upper-port>22</upper-port></destination-port>"),
            "{xml}"
        );
        assert!(xml.contains("<egress><ace><sequence>2</sequence>"), "{xml}");
        assert!(xml.contains("<ipv6><protocol>58</protocol>"), "{xml}");
        assert!(xml.contains("<forwarding>accept</forwarding>"), "{xml}");
        let back = Element::parse(&xml).unwrap();
        assert_eq!(read(Some(&back)).unwrap(), rules);
        assert_eq!(element("acl", &[]), None);
        assert_eq!(read(None).unwrap(), Vec::new());
    }

    #[test]
    fn entries_patchbay_cannot_express_are_errors_naming_them() {
        let xml = element("acl", &rules()).unwrap().render();
        for (from, to, says) in [
            (
                "<sequence>2</sequence>",
                "<sequence>7</sequence>",
                "sequence",
            ),
            (
                "<protocol>6</protocol>",
                "<protocol>47</protocol>",
                "ace 1 protocol 47",
            ),
            (
                "<forwarding>drop</forwarding>",
                "<forwarding>reject</forwarding>",
                "forwarding",
            ),
            (
                "<lower-port>22</lower-port>",
                "<lower-port>x</lower-port>",
                "ace 1 destination-port",
            ),
        ] {
            let bad = xml.replacen(from, to, 1);
            let e = Element::parse(&bad).unwrap();
            let err = read(Some(&e)).unwrap_err();
            assert!(err.contains(says), "{from} -> {to}: {err}");
        }
    }
}

//! BGP to allocated hosts (seed 004): which ASNs and prefixes a namespace is
//! granted, whether a claim role's BGP is allowed, each host's peers (what it is told
//! to configure: annotations, inventory variables, status), and the neighbours a
//! ToR's speaker must have. Pure: no client, no clock; table-tested.
//!
//! The rules:
//! - An ASN is 1-4294967294 and none of the reserved ones (23456, 64496-64511,
//!   65535, 65552-131071); a host's ASN is never its ToR's.
//! - A role's prefixes are IPv4 prefixes, never the default route, never
//!   overlapping a ToR's own subnets (its router id, the point-to-point subnets of
//!   its ports). With tenancy, a tenant role's ASN and prefixes must be granted to
//!   its namespace by a VLANPool; an ASN or prefix granted to two namespaces is
//!   granted to neither. Two claims' prefixes never overlap: the older claim keeps
//!   them, the other is refused.
//! - A host has one peer per NIC cabled to a Switch port with a `bgpAddress` on a
//!   Switch with `spec.bgp`; its address is the other one of that port's
//!   point-to-point subnet.
//! - The neighbour is on the ToR while the Server is bound to a claim whose role has
//!   BGP (allowed) and the Server is `Provisioned` (its ports carry the claim's
//!   network); otherwise it is not, and a Server leaving `Provisioned` waits until
//!   its neighbours are gone ([`crate::decide::phases`]).
//!
//! Messages name the field and the tenant's own values — never another tenant's
//! namespace, claim or prefix.
//!
//! A speaker's drift: a change a pass makes is a repair ([`repairs`]) when it puts
//! back what patchbay had established there and nothing since asked for — a
//! neighbour missing (a speaker restarted empty) or changed by hand, counted when
//! its desired state is the one patchbay last saw in place ([`established`]) — or
//! when it removes a route-map clause patchbay did not write (or writes back a map
//! that went). A put because the desired state changed is not one.
//!
//! A Switch's `status.bgp` ([`bgp_status`]): written when what the speaker has
//! changes, else at most every [`REFRESH`] — the budget of the neighbour reads —
//! so `readAt` is the last read, or at most [`REFRESH`] older than it.
//!
//! The rooms: this file (ASNs, a Switch's BGP settings, the ToRs' subnets);
//! `bgp/grants.rs` (grants, a claim's BGP); `bgp/peers.rs` (a host's peers);
//! `bgp/speaker.rs` (a ToR's neighbours, drift, status).

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;
use std::sync::Arc;

use kube::ResourceExt;
use patchbay_model::bgp::{
    Change, Neighbor, Outbound, PeerLink, Prefix, SpeakerState, Timers, differences, entries,
};
use patchbay_model::secret::SecretString;

pub use super::neighbors::REFRESH;
use crate::api::{
    BgpNeighborStatus, BgpOutbound, BgpPeer, CabledPortKind, RoleBgp, Server, ServerClaim,
    ServerPhase, Switch, SwitchBgpSpec, SwitchBgpStatus, VLANPool,
};

mod grants;
mod peers;
mod speaker;
pub use grants::*;
pub use peers::*;
pub use speaker::*;

/// The annotation prefix of a host's peers (`patchbay.dev/bgp-peers-{n}-…`).
pub const ANNOTATION_PREFIX: &str = "patchbay.dev/bgp-peers-";

/// Why an ASN is refused, if it is.
pub fn check_asn(asn: i64) -> Result<u32, String> {
    let reserved = |a: i64| match a {
        0 => Some("0 is reserved"),
        23456 => Some("23456 is AS_TRANS (RFC 6793)"),
        64496..=64511 => Some("64496-64511 are for documentation (RFC 5398)"),
        65535 => Some("65535 is reserved (RFC 7300)"),
        65552..=131071 => Some("65552-131071 are reserved (RFC 5398)"),
        4294967295 => Some("4294967295 is reserved (RFC 7300)"),
        _ => None,
    };
    if !(0..=4294967295).contains(&asn) {
        return Err(format!("{asn} is not an ASN (1-4294967294)"));
    }
    match reserved(asn) {
        Some(why) => Err(why.to_owned()),
        None => Ok(asn as u32),
    }
}

/// Parses ASN ranges (`65100-65199, 4200000000`); each end a valid ASN.
pub fn parse_asns(text: &str) -> Result<Vec<(u32, u32)>, String> {
    let mut out = Vec::new();
    for part in text.split(',').map(str::trim) {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        let num = |s: &str| {
            s.trim()
                .parse::<i64>()
                .map_err(|_| format!("{:?} is not a number", s.trim()))
                .and_then(check_asn)
        };
        let (a, b) = (num(a)?, num(b)?);
        if a > b {
            return Err(format!("{part}: the range runs backwards"));
        }
        out.push((a, b));
    }
    Ok(out)
}

/// Which Switch a [`SwitchBgp`] belongs to: what a fleet of them keeps of the
/// object (its spec is parsed into the [`SwitchBgp`]; its status is read from the
/// cache when needed), so the fleet holds no second copy of each Switch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SwitchId {
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// Its uid.
    pub uid: Option<String>,
    /// The generation its settings were parsed from.
    pub generation: Option<i64>,
}

impl SwitchId {
    /// `switch`'s identity.
    pub fn of(switch: &Switch) -> Self {
        SwitchId {
            namespace: switch.namespace().unwrap_or_default(),
            name: switch.name_any(),
            uid: switch.metadata.uid.clone(),
            generation: switch.metadata.generation,
        }
    }

    /// Whether it is `switch` as it is now (same object, same generation).
    pub fn is_current(&self, switch: &Switch) -> bool {
        self.uid == switch.metadata.uid && self.generation == switch.metadata.generation
    }
}

/// A Switch's BGP, checked: the speaker's instance, the neighbour defaults, and the
/// point-to-point link of each SwitchPort with a `bgpAddress`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SwitchBgp {
    /// The ToR's ASN.
    pub asn: u32,
    /// Its router id.
    pub router_id: Ipv4Addr,
    /// Neighbour timers.
    pub timers: Timers,
    /// Accepted prefixes per host.
    pub max_prefix: u32,
    /// What a host is sent.
    pub outbound: Outbound,
    /// SwitchPort name → its link.
    pub links: BTreeMap<String, PeerLink>,
}

impl SwitchBgp {
    /// The addresses whose neighbours patchbay keeps on this speaker.
    pub fn managed(&self) -> BTreeSet<Ipv4Addr> {
        self.links.values().map(PeerLink::node).collect()
    }

    /// Whether `prefix` overlaps the ToR's own addresses.
    pub fn owns(&self, prefix: &Prefix) -> bool {
        prefix.contains_address(self.router_id)
            || self.links.values().any(|l| l.subnet.overlaps(prefix))
    }
}

/// The ports of `me` whose point-to-point subnet overlaps one of `others`' (the
/// Switches that keep theirs: older ones), as (field, reason): two ToRs handing out
/// the same node address would give two hosts one identity.
pub fn overlaps_elsewhere(me: &SwitchBgp, others: &[(String, SwitchBgp)]) -> Vec<(String, String)> {
    let mut index = SubnetIndex::default();
    for (name, o) in others {
        index.insert(name, o);
    }
    index.overlaps(me)
}

/// The point-to-point subnets of the Switches kept so far, by first address, for a
/// check in log time: a fleet's every Switch checked against every older one costs
/// ports × log(ports), not ports².
#[derive(Debug, Clone, Default)]
pub struct SubnetIndex {
    /// First address → (last address, the Switch's name).
    by_start: BTreeMap<u32, (u32, String)>,
}

impl SubnetIndex {
    fn range(p: &Prefix) -> (u32, u32) {
        let start = u32::from(p.network());
        let size = u32::MAX.checked_shr(u32::from(p.length())).unwrap_or(0);
        (start, start.saturating_add(size))
    }

    /// The name of a Switch with a subnet overlapping `p`. Kept subnets never overlap
    /// one another, so only the last one starting at or before `p`'s end can.
    fn overlapping(&self, p: &Prefix) -> Option<&str> {
        let (start, end) = Self::range(p);
        self.by_start
            .range(..=end)
            .next_back()
            .filter(|(_, (last, _))| *last >= start)
            .map(|(_, (_, name))| name.as_str())
    }

    /// Adds Switch `name`'s subnets (checked with [`Self::overlaps`] first).
    pub fn insert(&mut self, name: &str, b: &SwitchBgp) {
        for l in b.links.values() {
            let (start, end) = Self::range(&l.subnet);
            self.by_start.insert(start, (end, name.to_owned()));
        }
    }

    /// The ports of `me` whose subnet overlaps a kept one, as (field, reason).
    pub fn overlaps(&self, me: &SwitchBgp) -> Vec<(String, String)> {
        me.links
            .iter()
            .filter_map(|(key, link)| {
                let name = self.overlapping(&link.subnet)?;
                Some((
                    format!("spec.ports[{key:?}].bgpAddress"),
                    format!("{} overlaps a port of Switch {name}", link.subnet),
                ))
            })
            .collect()
    }
}

/// What every ToR keeps for itself, indexed: its ASN, its router id, its ports'
/// subnets (a claim may use none of them). Built once per set of Switches; each
/// check is a lookup, not a pass over the fleet.
#[derive(Debug, Clone, Default)]
pub struct Tors {
    asns: BTreeSet<u32>,
    router_ids: BTreeSet<u32>,
    links: SubnetIndex,
}

impl Tors {
    /// The ToRs `switches`, by name (whose subnets do not overlap one another's).
    pub fn new<'a>(switches: impl IntoIterator<Item = (&'a str, &'a SwitchBgp)>) -> Self {
        let mut me = Self::default();
        for (name, b) in switches {
            me.asns.insert(b.asn);
            me.router_ids.insert(u32::from(b.router_id));
            me.links.insert(name, b);
        }
        me
    }

    /// The ports of `me` whose subnet overlaps a ToR's, as (field, reason naming
    /// that ToR).
    pub fn overlaps(&self, me: &SwitchBgp) -> Vec<(String, String)> {
        self.links.overlaps(me)
    }

    /// Whether `asn` is a ToR's own.
    pub fn has_asn(&self, asn: u32) -> bool {
        self.asns.contains(&asn)
    }

    /// Whether `prefix` overlaps a ToR's own addresses.
    pub fn owns(&self, prefix: &Prefix) -> bool {
        let (start, end) = SubnetIndex::range(prefix);
        self.router_ids.range(start..=end).next().is_some()
            || self.links.overlapping(prefix).is_some()
    }
}

/// Checks `switch`'s BGP settings (its `spec.bgp` and the ports' `bgpAddress`).
/// `Ok(None)`: the Switch has no BGP. Errors name the field.
pub fn switch_bgp(
    spec: &crate::api::SwitchSpec,
) -> Result<Option<SwitchBgp>, Vec<(String, String)>> {
    let mut errors = Vec::new();
    let Some(b) = &spec.bgp else {
        for (key, def) in &spec.ports {
            if def.bgp_address.is_some() {
                errors.push((
                    format!("spec.ports[{key:?}].bgpAddress"),
                    "needs spec.bgp (the speaker that peers on it)".to_owned(),
                ));
            }
        }
        return if errors.is_empty() {
            Ok(None)
        } else {
            Err(errors)
        };
    };
    let asn = check_asn(b.asn)
        .map_err(|e| errors.push(("spec.bgp.asn".into(), e)))
        .ok();
    let router_id = b
        .router_id
        .parse::<Ipv4Addr>()
        .map_err(|_| {
            errors.push((
                "spec.bgp.routerId".into(),
                format!("{:?} is not an IPv4 address", b.router_id),
            ))
        })
        .ok();
    let timers = timers(b, &mut errors);
    let mut links: BTreeMap<String, PeerLink> = BTreeMap::new();
    let mut seen: Vec<(PeerLink, String)> = Vec::new();
    for (key, def) in &spec.ports {
        let Some(a) = &def.bgp_address else { continue };
        let field = format!("spec.ports[{key:?}].bgpAddress");
        match PeerLink::parse(a) {
            Ok(link) => {
                if let Some((_, other)) = seen.iter().find(|(l, _)| l.subnet.overlaps(&link.subnet))
                {
                    errors.push((
                        field,
                        format!("{} overlaps spec.ports[{other:?}].bgpAddress", link.subnet),
                    ));
                } else if router_id.is_some_and(|r| link.subnet.contains_address(r)) {
                    errors.push((field, "contains spec.bgp.routerId".to_owned()));
                } else {
                    seen.push((link, key.clone()));
                    links.insert(key.clone(), link);
                }
            }
            Err(e) => errors.push((field, e)),
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    Ok(Some(SwitchBgp {
        asn: asn.expect("checked"),
        router_id: router_id.expect("checked"),
        timers: timers.expect("checked"),
        max_prefix: b.max_prefixes.unwrap_or(16).clamp(1, 100_000) as u32,
        outbound: match b.outbound.unwrap_or_default() {
            BgpOutbound::Nothing => Outbound::Nothing,
            BgpOutbound::DefaultRoute => Outbound::DefaultRoute,
        },
        links,
    }))
}

fn timers(b: &SwitchBgpSpec, errors: &mut Vec<(String, String)>) -> Option<Timers> {
    let keepalive = b.keepalive_seconds.unwrap_or(30);
    let hold = b.hold_seconds.unwrap_or(90);
    let connect_retry = b.connect_retry_seconds.unwrap_or(10);
    let mut ok = true;
    for (field, v, lo, hi) in [
        ("spec.bgp.keepaliveSeconds", keepalive, 1, 3600),
        ("spec.bgp.holdSeconds", hold, 3, 65535),
        ("spec.bgp.connectRetrySeconds", connect_retry, 1, 65535),
    ] {
        if !(lo..=hi).contains(&v) {
            errors.push((field.into(), format!("{v} is outside {lo}-{hi}")));
            ok = false;
        }
    }
    if ok && hold < 3 * keepalive {
        errors.push((
            "spec.bgp.holdSeconds".into(),
            format!("{hold} is less than three keepalives ({keepalive} s each)"),
        ));
        ok = false;
    }
    ok.then_some(Timers {
        keepalive: keepalive as u16,
        hold: hold as u16,
        connect_retry: connect_retry as u16,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{
        ClaimRole, ProviderRef, ServerClaimSpec, SwitchPortDefinition, SwitchSpec, VLANPoolSpec,
    };

    fn host_neighbor(address: &str) -> Neighbor {
        Neighbor {
            address: address.parse().unwrap(),
            remote_asn: 65101,
            local_address: "10.0.1.1".parse().unwrap(),
            prefixes: vec!["192.0.2.0/28".parse().unwrap()],
            max_prefix: 8,
            timers: Timers {
                keepalive: 3,
                hold: 9,
                connect_retry: 2,
            },
            outbound: Outbound::Nothing,
            password: Some(SecretString::new("")),
            description: "patchbay t/c s".into(),
        }
    }

    #[test]
    fn a_put_is_a_repair_only_when_it_puts_back_what_was_in_place() {
        use patchbay_model::bgp::{Observed, Policy};
        let a = host_neighbor("10.0.1.2");
        let state = SpeakerState {
            neighbors: [(a.address, Observed::configured(&a, "Established"))].into(),
            ..Default::default()
        };
        let had = established(std::slice::from_ref(&a), &state);
        assert_eq!(had, [(a.address, digest(&a))].into());
        // The password's value is not part of it (it is read just before sending).
        let mut with_secret = a.clone();
        with_secret.password = Some(SecretString::new("s3cret"));
        assert_eq!(digest(&with_secret), digest(&a));
        let put = |n: &Neighbor| Change::Put {
            neighbor: n.clone(),
            stale: vec![],
        };
        // The speaker lost it (restarted empty, removed by hand): a repair.
        assert_eq!(
            repairs(&[put(&with_secret)], &had),
            ["neighbour 10.0.1.2 put back as patchbay had it"]
        );
        // The claim's prefixes changed: a put, not a repair; a new neighbour neither.
        let mut wider = a.clone();
        wider.prefixes.push("198.51.100.0/28".parse().unwrap());
        assert!(repairs(&[put(&wider)], &had).is_empty());
        assert!(repairs(&[put(&host_neighbor("10.0.1.6"))], &had).is_empty());
        assert!(
            repairs(
                &[Change::Remove {
                    address: a.address,
                    filters: true
                }],
                &had
            )
            .is_empty()
        );
        // A clause patchbay did not write, a map gone: repairs whatever was in place.
        assert_eq!(
            repairs(
                &[
                    Change::Policy {
                        map: Policy::Inbound(a.address),
                        remove: vec![("permit".into(), 65000)]
                    },
                    Change::Policy {
                        map: Policy::Outbound,
                        remove: vec![]
                    }
                ],
                &BTreeMap::new()
            ),
            [
                "route-map PB-IN-10-0-1-2: removed permit 65000 patchbay did not write",
                "route-map PB-OUT-NOTHING written back"
            ]
        );
        // A neighbour the speaker has otherwise than wanted is not in place.
        let mut changed = Observed::configured(&a, "Established");
        changed.remote_asn = 1;
        let state = SpeakerState {
            neighbors: [(a.address, changed)].into(),
            ..Default::default()
        };
        assert!(established(&[a], &state).is_empty());
    }

    #[test]
    fn the_bgp_status_is_written_when_it_changes_or_every_five_minutes() {
        let t = |s: i64| jiff::Timestamp::from_second(1_800_000_000 + s).unwrap();
        let n = |state: &str| BgpNeighborStatus {
            address: "10.0.1.2".into(),
            switch_port: "p1".into(),
            server: "s1".into(),
            asn: 65101,
            state: state.into(),
            accepted_prefixes: 1,
        };
        let first = bgp_status(None, vec![n("Established")], t(0), None);
        assert_eq!(first.read_at, Some(t(0).to_string()));
        // Read again and again, unchanged: the status stays (no write) ...
        for s in [2, 60, 299] {
            assert_eq!(
                bgp_status(Some(first.clone()), vec![n("Established")], t(s), None),
                first
            );
        }
        // ... until it is five minutes old; then readAt moves to the read.
        let refreshed = bgp_status(Some(first.clone()), vec![n("Established")], t(300), None);
        assert_eq!(refreshed.read_at, Some(t(300).to_string()));
        // A change is written at once.
        let changed = bgp_status(Some(first.clone()), vec![n("Active")], t(5), None);
        assert_eq!(changed.read_at, Some(t(5).to_string()));
        assert_eq!(changed.neighbors, vec![n("Active")]);
        // A status without a readAt gets one.
        let bare = SwitchBgpStatus {
            read_at: None,
            neighbors: vec![],
        };
        assert_eq!(
            bgp_status(Some(bare), vec![], t(1), None).read_at,
            Some(t(1).to_string())
        );
        // A rollout waiting on evidence read after t(10): the first read at or after
        // it is written, unchanged as it is; one before it, or once written, not.
        let after = Some(t(10));
        assert_eq!(
            bgp_status(Some(first.clone()), vec![n("Established")], t(9), after),
            first
        );
        let evidence = bgp_status(Some(first.clone()), vec![n("Established")], t(11), after);
        assert_eq!(evidence.read_at, Some(t(11).to_string()));
        assert_eq!(
            bgp_status(Some(evidence.clone()), vec![n("Established")], t(13), after),
            evidence
        );
    }

    #[test]
    fn a_host_leaves_provisioned_only_once_its_neighbours_are_off() {
        use crate::decide::phases::{Hold, PhaseStep, hold_for_bgp};
        let leaving = PhaseStep {
            phase: ServerPhase::Deprovisioning,
            hold: None,
        };
        let held = hold_for_bgp(leaving.clone(), Some(ServerPhase::Provisioned), true);
        assert_eq!(
            (held.phase, held.hold),
            (ServerPhase::Provisioned, Some(Hold::BgpPeers))
        );
        assert_eq!(
            hold_for_bgp(leaving.clone(), Some(ServerPhase::Provisioned), false),
            leaving
        );
        // Only leaving Provisioned is held.
        let installing = PhaseStep {
            phase: ServerPhase::Provisioned,
            hold: None,
        };
        assert_eq!(
            hold_for_bgp(installing.clone(), Some(ServerPhase::Provisioning), true),
            installing
        );
        // A held host is not allocated again.
        let mut s: Server = serde_json::from_value(serde_json::json!({
            "apiVersion": "patchbay.dev/v1alpha1", "kind": "Server",
            "metadata": {"name": "n1"},
            "spec": {"bmc": {"address": "10.0.0.1",
                             "credentialsSecretRef": {"name": "b", "namespace": "i"}},
                     "bootMac": "52:54:00:00:00:01", "site": "s"},
            "status": {"phase": "Provisioned", "conditions": [{"type": "Held",
                "status": "True", "reason": "BgpPeersRemaining", "message": "",
                "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
        }))
        .unwrap();
        assert!(held_for_peers(&s));
        assert!(crate::decide::validate::claim::candidate(&s, Default::default()).maintenance);
        s.status.as_mut().unwrap().conditions[0].reason = "Ports".into();
        assert!(!held_for_peers(&s));
    }

    #[test]
    fn asns_refused_by_rule() {
        for (asn, ok) in [
            (0, false),
            (1, true),
            (23456, false),
            (64495, true),
            (64496, false),
            (64511, false),
            (64512, true),
            (65534, true),
            (65535, false),
            (65551, true),
            (65552, false),
            (131071, false),
            (131072, true),
            (4294967294, true),
            (4294967295, false),
            (4294967296, false),
            (-1, false),
        ] {
            assert_eq!(check_asn(asn).is_ok(), ok, "{asn}");
        }
        assert_eq!(
            parse_asns("65100-65199, 4200000000").unwrap(),
            vec![(65100, 65199), (4200000000, 4200000000)]
        );
        assert!(parse_asns("65199-65100").unwrap_err().contains("backwards"));
        assert!(parse_asns("64500").unwrap_err().contains("documentation"));
    }

    fn switch(asn: i64, ports: &[(&str, &str)]) -> SwitchSpec {
        SwitchSpec {
            provider: ProviderRef {
                kind: None,
                name: "p".into(),
            },
            ports: ports
                .iter()
                .enumerate()
                .map(|(i, (k, a))| {
                    (
                        k.to_string(),
                        SwitchPortDefinition {
                            name: format!("eth{i}"),
                            disabled: false,
                            vlan_range: None,
                            trunk_disable: false,
                            bgp_address: (!a.is_empty()).then(|| a.to_string()),
                        },
                    )
                })
                .collect(),
            drift_policy: None,
            neighbors: None,
            bgp: Some(SwitchBgpSpec {
                speaker: ProviderRef {
                    kind: None,
                    name: "frr".into(),
                },
                asn,
                router_id: "10.255.0.1".into(),
                keepalive_seconds: None,
                hold_seconds: None,
                connect_retry_seconds: None,
                max_prefixes: None,
                outbound: None,
                interval_seconds: None,
            }),
            rollout: None,
        }
    }

    #[test]
    fn a_switch_gives_each_port_one_node_address_and_refuses_overlaps() {
        let b = switch_bgp(&switch(
            65000,
            &[("p1", "10.0.1.1/30"), ("p2", "10.0.1.4/31"), ("p3", "")],
        ))
        .unwrap()
        .unwrap();
        assert_eq!(
            b.managed(),
            ["10.0.1.2".parse().unwrap(), "10.0.1.5".parse().unwrap()].into()
        );
        let e = switch_bgp(&switch(
            65000,
            &[("p1", "10.0.1.1/30"), ("p2", "10.0.1.2/31")],
        ))
        .unwrap_err();
        assert!(
            e.iter()
                .any(|(f, w)| f.contains("p2") && w.contains("overlaps")),
            "{e:?}"
        );
        let e = switch_bgp(&switch(0, &[("p1", "10.0.1.1/24")])).unwrap_err();
        assert!(e.iter().any(|(f, _)| f == "spec.bgp.asn"), "{e:?}");
        assert!(
            e.iter()
                .any(|(f, w)| f.contains("p1") && w.contains("point-to-point")),
            "{e:?}"
        );
        let mut no_bgp = switch(65000, &[("p1", "10.0.1.1/30")]);
        no_bgp.bgp = None;
        assert!(
            switch_bgp(&no_bgp).unwrap_err()[0]
                .1
                .contains("needs spec.bgp")
        );
    }

    #[test]
    fn a_switch_overlapping_an_older_switchs_subnets_is_refused_naming_the_port() {
        let older = switch_bgp(&switch(65000, &[("p1", "10.0.1.1/30")]))
            .unwrap()
            .unwrap();
        let me = switch_bgp(&switch(
            65000,
            &[("q1", "10.0.1.2/31"), ("q2", "10.0.2.0/31")],
        ))
        .unwrap()
        .unwrap();
        assert_eq!(
            overlaps_elsewhere(&me, &[("leaf-1".into(), older)]),
            vec![(
                "spec.ports[\"q1\"].bgpAddress".to_owned(),
                "10.0.1.2/31 overlaps a port of Switch leaf-1".to_owned()
            )]
        );
        assert!(overlaps_elsewhere(&me, &[]).is_empty());
        // The index against every neighbour of a kept subnet: before, after, inside,
        // around, at the address space's ends.
        let kept = switch_bgp(&switch(
            65000,
            &[
                ("a", "10.0.1.1/30"),
                ("b", "10.0.1.8/31"),
                ("c", "0.0.0.0/31"),
                ("d", "255.255.255.254/31"),
            ],
        ))
        .unwrap()
        .unwrap();
        let mut index = SubnetIndex::default();
        index.insert("leaf-1", &kept);
        for (probe, overlaps) in [
            ("10.0.0.254/31", false),
            ("10.0.1.0/31", true),
            ("10.0.1.2/31", true),
            ("10.0.1.4/31", false),
            ("10.0.1.6/31", false),
            ("10.0.1.9/31", true),
            ("10.0.1.10/31", false),
            ("0.0.0.0/31", true),
            ("0.0.0.2/31", false),
            ("255.255.255.254/31", true),
            ("255.255.255.252/31", false),
        ] {
            let me = switch_bgp(&switch(65000, &[("x", probe)]))
                .unwrap()
                .unwrap();
            assert_eq!(!index.overlaps(&me).is_empty(), overlaps, "{probe}");
        }
    }

    fn pool(name: &str, ns: &str, asns: Option<&str>, prefixes: &[&str]) -> VLANPool {
        VLANPool::new(
            name,
            VLANPoolSpec {
                vlans: "100".into(),
                namespaces: vec![ns.into()],
                asns: asns.map(str::to_owned),
                prefixes: prefixes.iter().map(|s| s.to_string()).collect(),
                ..Default::default()
            },
        )
    }

    #[test]
    fn grants_overlapping_between_namespaces_go_to_neither() {
        let pools = [
            pool(
                "a",
                "tenant-a",
                Some("65100-65199"),
                &["192.0.2.0/26", "198.51.100.0/24"],
            ),
            pool(
                "b",
                "tenant-b",
                Some("65150-65250"),
                &["192.0.2.64/26", "198.51.100.128/25"],
            ),
        ];
        let g = BgpGrants::new(&pools);
        assert_eq!(g.of("tenant-a").asns, Vec::<(u32, u32)>::new());
        assert_eq!(
            g.of("tenant-a").prefixes,
            vec!["192.0.2.0/26".parse().unwrap()]
        );
        assert_eq!(
            g.of("tenant-b").prefixes,
            vec!["192.0.2.64/26".parse().unwrap()]
        );
        assert!(
            g.problems("a")
                .iter()
                .any(|p| p.contains("198.51.100.0/24"))
        );
        assert!(g.problems("b").iter().any(|p| p.contains("65150-65250")));
        assert_eq!(g.of("tenant-c"), Granted::default());
    }

    fn claim(name: &str, created: i64, asn: Option<i64>, prefixes: &[&str]) -> ServerClaim {
        let mut c = ServerClaim::new(
            name,
            ServerClaimSpec {
                site: "s".into(),
                roles: vec![ClaimRole {
                    name: "worker".into(),
                    count: 1,
                    requirements: None,
                    network_configuration: vec![],
                    bgp: Some(RoleBgp {
                        asn,
                        prefixes: prefixes.iter().map(|s| s.to_string()).collect(),
                    }),
                }],
                network_configuration: vec![],
                inventory: None,
            },
        );
        c.metadata.namespace = Some("tenant-a".into());
        c.metadata.uid = Some(name.into());
        c.metadata.creation_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            jiff::Timestamp::from_second(created).unwrap(),
        ));
        c
    }

    #[test]
    fn a_role_announces_only_granted_space_no_default_no_tor_subnet_no_older_claims() {
        let tor = switch_bgp(&switch(65000, &[("p1", "10.0.1.1/30")]))
            .unwrap()
            .unwrap();
        let tors = Tors::new([("tor", &tor)]);
        let granted = Granted {
            asns: vec![(65100, 65199)],
            prefixes: vec![
                "192.0.2.0/24".parse().unwrap(),
                "10.0.0.0/16".parse().unwrap(),
            ],
        };
        let ok = claim("c", 10, None, &["192.0.2.16/28"]);
        let allowed = claim_bgp(&ok, &|_| Some(granted.clone()), &tors, &[]).unwrap();
        assert_eq!(allowed["worker"].asn, 65100, "the first granted ASN");
        for (asn, prefixes, field, why) in [
            (Some(65300), vec!["192.0.2.0/28"], "asn", "not granted"),
            (Some(65000), vec!["192.0.2.0/28"], "asn", "not granted"),
            (Some(0), vec!["192.0.2.0/28"], "asn", "reserved"),
            (None, vec!["0.0.0.0/0"], "prefixes[0]", "default route"),
            (None, vec!["192.0.0.0/16"], "prefixes[0]", "not inside"),
            (None, vec!["10.0.1.0/24"], "prefixes[0]", "ToR's own"),
            (
                None,
                vec!["192.0.2.0/28", "192.0.2.8/29"],
                "prefixes[1]",
                "overlaps",
            ),
            (None, vec!["192.0.2.1/28"], "prefixes[0]", "host bits"),
        ] {
            let c = claim("d", 20, asn, &prefixes);
            let e = claim_bgp(&c, &|_| Some(granted.clone()), &tors, &[]).unwrap_err();
            let want = format!("spec.roles[0].bgp.{field}");
            assert!(
                e.iter().any(|(f, w)| *f == want && w.contains(why)),
                "{asn:?} {prefixes:?}: {e:?}"
            );
        }
        // Without tenancy grants, the ToR's ASN is still refused.
        let e = claim_bgp(
            &claim("d", 20, Some(65000), &["192.0.2.0/28"]),
            &|_| None,
            &tors,
            &[],
        )
        .unwrap_err();
        assert!(e[0].1.contains("ToR's own ASN"), "{e:?}");
        // The older claim keeps its prefixes; the younger one is refused, whoever asks.
        let old = Arc::new(claim("old", 5, None, &["192.0.2.0/27"]));
        let young = claim("young", 50, None, &["192.0.2.16/28"]);
        let e = claim_bgp(
            &young,
            &|_| Some(granted.clone()),
            &tors,
            std::slice::from_ref(&old),
        )
        .unwrap_err();
        assert!(e[0].1.contains("another claim"), "{e:?}");
        assert!(
            !e[0].1.contains("old"),
            "never names the other claim: {e:?}"
        );
        assert!(
            claim_bgp(
                &old,
                &|_| Some(granted.clone()),
                &tors,
                &[Arc::new(young.clone())]
            )
            .is_ok()
        );
        // An older claim of another tenant asking for this tenant's space (refused
        // there: not its grant), or for a default route, holds nothing.
        let mut hostile = claim("hostile", 1, None, &["192.0.2.0/24"]);
        hostile.metadata.namespace = Some("tenant-b".into());
        let everything = claim("everything", 2, None, &["0.0.0.0/0"]);
        let by_namespace = |ns: &str| {
            Some(if ns == "tenant-b" {
                Granted {
                    asns: vec![(65200, 65200)],
                    prefixes: vec!["198.51.100.0/24".parse().unwrap()],
                }
            } else {
                granted.clone()
            })
        };
        let older = [Arc::new(hostile.clone()), Arc::new(everything)];
        assert!(claim_bgp(&young, &by_namespace, &tors, &older).is_ok());
        // Without tenancy (nothing checked), the same older claim does hold it.
        assert!(claim_bgp(&young, &|_| None, &tors, &[Arc::new(hostile)]).is_err());
    }
}

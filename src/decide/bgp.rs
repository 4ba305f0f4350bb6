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

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;
use std::sync::Arc;

use kube::ResourceExt;
use patchbay_providers::bgp::{
    Change, Neighbor, Outbound, PeerLink, Prefix, SpeakerState, Timers, differences, entries,
};
use patchbay_providers::secret::SecretString;

pub use super::neighbors::REFRESH;
use crate::api::{
    BgpNeighborStatus, BgpOutbound, BgpPeer, CabledPortKind, RoleBgp, Server, ServerClaim,
    ServerPhase, Switch, SwitchBgpSpec, SwitchBgpStatus, VLANPool,
};

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

/// The field checks of one role's BGP that need nothing but the role (what
/// `kubectl apply` and `patchbay validate` refuse): ASN, prefix grammar, no default
/// route, no two overlapping prefixes.
pub fn role_fields(path: &str, bgp: &RoleBgp) -> Vec<(String, String)> {
    let mut errors = Vec::new();
    if let Some(asn) = bgp.asn
        && let Err(e) = check_asn(asn)
    {
        errors.push((format!("{path}.asn"), e));
    }
    if bgp.prefixes.is_empty() {
        errors.push((
            format!("{path}.prefixes"),
            "name at least one prefix the hosts announce".to_owned(),
        ));
    }
    let mut seen: Vec<Prefix> = Vec::new();
    for (j, p) in bgp.prefixes.iter().enumerate() {
        let field = format!("{path}.prefixes[{j}]");
        match p.parse::<Prefix>() {
            Ok(p) if p.is_default() => errors.push((
                field,
                "0.0.0.0/0 is the default route: a host may not announce it".to_owned(),
            )),
            Ok(p) => {
                if let Some(o) = seen.iter().find(|o| o.overlaps(&p)) {
                    errors.push((field, format!("{p} overlaps {o}, listed before")));
                }
                seen.push(p);
            }
            Err(e) => errors.push((field, e)),
        }
    }
    errors
}

/// What a namespace is granted for BGP.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Granted {
    /// ASN ranges, in pool order (the first ASN is the default).
    pub asns: Vec<(u32, u32)>,
    /// Prefixes.
    pub prefixes: Vec<Prefix>,
}

/// The BGP grants of every pool: per namespace, and per pool what is wrong with it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BgpGrants {
    by_namespace: BTreeMap<String, Granted>,
    problems: BTreeMap<String, Vec<String>>,
}

impl BgpGrants {
    /// The grants of `pools` (sorted by name, so the first ASN is stable). An ASN or
    /// prefix granted to two namespaces is granted to neither, and both pools say so.
    pub fn new<'a>(pools: impl IntoIterator<Item = &'a VLANPool>) -> Self {
        let mut pools: Vec<&VLANPool> = pools.into_iter().collect();
        pools.sort_by_key(|p| p.name_any());
        let mut me = Self::default();
        // (pool, namespace, asns, prefixes), the parse errors recorded.
        let mut parsed = Vec::new();
        for p in pools {
            let name = p.name_any();
            let has = p.spec.asns.is_some() || !p.spec.prefixes.is_empty();
            if !has {
                continue;
            }
            if p.spec.shared || p.spec.namespaces.len() != 1 {
                me.problem(
                    &name,
                    "spec.asns/spec.prefixes: a pool granting BGP serves exactly one namespace \
                     and is not shared"
                        .into(),
                );
                continue;
            }
            let asns = match p.spec.asns.as_deref().map(parse_asns).transpose() {
                Ok(a) => a.unwrap_or_default(),
                Err(e) => {
                    me.problem(&name, format!("spec.asns: {e}"));
                    Vec::new()
                }
            };
            let mut prefixes = Vec::new();
            for (j, text) in p.spec.prefixes.iter().enumerate() {
                match text.parse::<Prefix>() {
                    Ok(x) if x.is_default() => me.problem(
                        &name,
                        format!("spec.prefixes[{j}]: the default route is never granted"),
                    ),
                    Ok(x) => prefixes.push(x),
                    Err(e) => me.problem(&name, format!("spec.prefixes[{j}]: {e}")),
                }
            }
            parsed.push((name, p.spec.namespaces[0].clone(), asns, prefixes));
        }
        // Overlaps between namespaces: granted to neither.
        let mut void_asn: BTreeSet<(usize, usize)> = BTreeSet::new();
        let mut void_prefix: BTreeSet<(usize, usize)> = BTreeSet::new();
        for a in 0..parsed.len() {
            for b in a + 1..parsed.len() {
                if parsed[a].1 == parsed[b].1 {
                    continue;
                }
                for (i, x) in parsed[a].2.iter().enumerate() {
                    for (j, y) in parsed[b].2.iter().enumerate() {
                        if x.0 <= y.1 && y.0 <= x.1 {
                            void_asn.insert((a, i));
                            void_asn.insert((b, j));
                        }
                    }
                }
                for (i, x) in parsed[a].3.iter().enumerate() {
                    for (j, y) in parsed[b].3.iter().enumerate() {
                        if x.overlaps(y) {
                            void_prefix.insert((a, i));
                            void_prefix.insert((b, j));
                        }
                    }
                }
            }
        }
        for (k, (name, ns, asns, prefixes)) in parsed.into_iter().enumerate() {
            let g = me.by_namespace.entry(ns).or_default();
            for (i, r) in asns.into_iter().enumerate() {
                if void_asn.contains(&(k, i)) {
                    me.problems.entry(name.clone()).or_default().push(format!(
                        "spec.asns: {}-{} is also granted to another namespace: granted to \
                         neither",
                        r.0, r.1
                    ));
                } else {
                    g.asns.push(r);
                }
            }
            for (i, p) in prefixes.into_iter().enumerate() {
                if void_prefix.contains(&(k, i)) {
                    me.problems.entry(name.clone()).or_default().push(format!(
                        "spec.prefixes: {p} overlaps a prefix granted to another namespace: \
                         granted to neither"
                    ));
                } else {
                    g.prefixes.push(p);
                }
            }
        }
        me
    }

    fn problem(&mut self, pool: &str, why: String) {
        self.problems.entry(pool.to_owned()).or_default().push(why);
    }

    /// What `namespace` is granted.
    pub fn of(&self, namespace: &str) -> Granted {
        self.by_namespace
            .get(namespace)
            .cloned()
            .unwrap_or_default()
    }

    /// What is wrong with pool `name`'s BGP grants.
    pub fn problems(&self, name: &str) -> &[String] {
        self.problems.get(name).map_or(&[], Vec::as_slice)
    }
}

/// One role's BGP, allowed: the hosts' ASN and prefixes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allowed {
    /// The hosts' ASN.
    pub asn: u32,
    /// What they may announce.
    pub prefixes: Vec<Prefix>,
}

/// What a claim's roles may do, role by role (`None`: no BGP), or why not.
pub type ClaimBgp = Result<BTreeMap<String, Allowed>, Vec<(String, String)>>;

/// Decides `claim`'s BGP against the grants (`grants_of(namespace)`: `Some` with
/// tenancy for a tenant's namespace, `None` where nothing is checked), every ToR's
/// own addresses, and the older claims' prefixes (`others`: every claim; older ones
/// win, by creation time then namespace/name).
///
/// An older claim holds only the prefixes it could be given: inside its own
/// namespace's grants, not a default route, not a ToR's. So a tenant's claim that
/// asks for another tenant's space (refused) never keeps that tenant from it, and
/// one asking for `0.0.0.0/0` never blocks everyone.
pub fn claim_bgp(
    claim: &ServerClaim,
    grants_of: &dyn Fn(&str) -> Option<Granted>,
    tors: &Tors,
    others: &[Arc<ServerClaim>],
) -> ClaimBgp {
    let grants = grants_of(&claim.namespace().unwrap_or_default());
    let grants = grants.as_ref();
    let mut errors = Vec::new();
    let mut out = BTreeMap::new();
    let older = |o: &ServerClaim| {
        let key = |c: &ServerClaim| {
            (
                c.metadata.creation_timestamp.as_ref().map(|t| t.0),
                c.namespace().unwrap_or_default(),
                c.name_any(),
            )
        };
        o.uid() != claim.uid() && key(o) < key(claim)
    };
    let taken: Vec<Prefix> = others
        .iter()
        .filter(|o| older(o))
        .flat_map(|o| {
            let theirs = grants_of(&o.namespace().unwrap_or_default());
            o.spec
                .roles
                .iter()
                .filter_map(|r| r.bgp.as_ref())
                .flat_map(|b| b.prefixes.iter().filter_map(|p| p.parse::<Prefix>().ok()))
                .filter(move |p| {
                    p.length() > 0
                        && !tors.owns(p)
                        && theirs
                            .as_ref()
                            .is_none_or(|g| g.prefixes.iter().any(|x| x.covers(p)))
                })
                .collect::<Vec<_>>()
        })
        .collect();
    for (i, role) in claim.spec.roles.iter().enumerate() {
        let Some(b) = &role.bgp else { continue };
        let path = format!("spec.roles[{i}].bgp");
        let fields = role_fields(&path, b);
        if !fields.is_empty() {
            errors.extend(fields);
            continue;
        }
        let asn = match (b.asn, grants) {
            (Some(a), None) => Some(a as u32),
            (Some(a), Some(g)) => {
                let a = a as u32;
                if g.asns.iter().any(|r| r.0 <= a && a <= r.1) {
                    Some(a)
                } else {
                    errors.push((
                        format!("{path}.asn"),
                        format!("{a} is not granted to this namespace"),
                    ));
                    None
                }
            }
            (None, Some(g)) if !g.asns.is_empty() => Some(g.asns[0].0),
            (None, _) => {
                errors.push((
                    format!("{path}.asn"),
                    "no ASN given and none granted to this namespace".to_owned(),
                ));
                None
            }
        };
        if let Some(a) = asn
            && tors.has_asn(a)
        {
            errors.push((
                format!("{path}.asn"),
                format!("{a} is a ToR's own ASN; a host peers over eBGP"),
            ));
        }
        let mut prefixes = Vec::new();
        for (j, text) in b.prefixes.iter().enumerate() {
            let field = format!("{path}.prefixes[{j}]");
            let p: Prefix = text.parse().expect("checked by role_fields");
            if let Some(g) = grants
                && !g.prefixes.iter().any(|x| x.covers(&p))
            {
                errors.push((
                    field,
                    format!("{p} is not inside a prefix granted to this namespace"),
                ));
            } else if tors.owns(&p) {
                errors.push((field, format!("{p} overlaps a ToR's own addresses")));
            } else if taken.iter().any(|t| t.overlaps(&p)) {
                errors.push((
                    field,
                    format!("{p} overlaps a prefix another claim announces"),
                ));
            } else {
                prefixes.push(p);
            }
        }
        if let Some(asn) = asn {
            out.insert(role.name.clone(), Allowed { asn, prefixes });
        }
    }
    if errors.is_empty() {
        Ok(out)
    } else {
        Err(errors)
    }
}

/// One peer of a host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    /// The Switch's namespace.
    pub switch_namespace: String,
    /// The Switch.
    pub switch: String,
    /// The SwitchPort.
    pub switch_port: String,
    /// The host's ASN.
    pub node_asn: u32,
    /// The ToR's ASN.
    pub peer_asn: u32,
    /// The ToR's address.
    pub peer_ip: Ipv4Addr,
    /// The host's address.
    pub src_ip: Ipv4Addr,
    /// The password Secret's name (in the claim's namespace).
    pub password_secret: String,
}

/// The name of the Secret holding the password of peer `n` of `server` under `claim`.
pub fn password_secret(claim: &str, server: &str, n: usize) -> String {
    format!("{claim}-bgp-{server}-{n}")
}

/// `server`'s peers as the host of `claim` with ASN `node_asn`: one per NIC cabled to
/// a SwitchPort with a `bgpAddress` on a Switch with valid BGP, in NIC order.
pub fn peers_of(
    server: &Server,
    claim: &str,
    node_asn: u32,
    switches: &[(SwitchId, SwitchBgp)],
) -> Vec<Peer> {
    let mut out = Vec::new();
    for nic in &server.spec.nics {
        let Some(port) = &nic.port else { continue };
        if port.port_kind() != CabledPortKind::SwitchPort {
            continue;
        }
        for (sw, b) in switches {
            if sw.namespace != port.namespace {
                continue;
            }
            let Some(link) = b.links.get(&port.name) else {
                continue;
            };
            out.push(Peer {
                switch_namespace: port.namespace.clone(),
                switch: sw.name.clone(),
                switch_port: port.name.clone(),
                node_asn,
                peer_asn: b.asn,
                peer_ip: link.local,
                src_ip: link.node(),
                password_secret: password_secret(claim, &server.name_any(), out.len()),
            });
        }
    }
    out
}

/// The `patchbay.dev/bgp-peers-{n}-*` annotations of `peers` (the seed's four keys,
/// and where the password is; never the password).
pub fn annotations(peers: &[Peer]) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for (n, p) in peers.iter().enumerate() {
        let k = |what: &str| format!("{ANNOTATION_PREFIX}{n}-{what}");
        out.insert(k("node-asn"), p.node_asn.to_string());
        out.insert(k("peer-asn"), p.peer_asn.to_string());
        out.insert(k("peer-ip"), p.peer_ip.to_string());
        out.insert(k("src-ip"), p.src_ip.to_string());
        out.insert(k("password-secret"), p.password_secret.clone());
    }
    out
}

/// The status form of `peers`, with each session's state from its Switch's status.
pub fn peer_status(peers: &[Peer], switches: &[Arc<Switch>]) -> Vec<BgpPeer> {
    peers
        .iter()
        .map(|p| {
            let state = switches
                .iter()
                .find(|s| {
                    s.name_any() == p.switch
                        && s.namespace().as_deref() == Some(p.switch_namespace.as_str())
                })
                .and_then(|s| s.status.as_ref()?.bgp.as_ref())
                .and_then(|b| {
                    b.neighbors
                        .iter()
                        .find(|n| n.address == p.src_ip.to_string())
                })
                .map(|n| n.state.clone());
            BgpPeer {
                switch: format!("{}/{}", p.switch_namespace, p.switch),
                node_asn: i64::from(p.node_asn),
                peer_asn: i64::from(p.peer_asn),
                peer_ip: p.peer_ip.to_string(),
                src_ip: p.src_ip.to_string(),
                password_secret: p.password_secret.clone(),
                state,
            }
        })
        .collect()
}

/// `established/all` for the printer column; `None` without peers.
pub fn summary(peers: &[BgpPeer]) -> Option<String> {
    (!peers.is_empty()).then(|| {
        let up = peers
            .iter()
            .filter(|p| p.state.as_deref() == Some("Established"))
            .count();
        format!("{up}/{}", peers.len())
    })
}

/// Whether `server`'s neighbours belong on its ToRs now: bound, `Provisioned`, not
/// being deleted (a host held for its neighbours is not allocated again, see
/// [`held_for_peers`], so a `Provisioned` bound host carries its claim's network).
pub fn peering(server: &Server) -> bool {
    server.metadata.deletion_timestamp.is_none()
        && server.spec.claim_ref.is_some()
        && server.status.as_ref().and_then(|s| s.phase) == Some(ServerPhase::Provisioned)
}

/// Whether `server` is held in `Provisioned` for its BGP neighbours (released, its
/// ports still on the last claim's network): not allocated again until it moves on.
pub fn held_for_peers(server: &Server) -> bool {
    server.status.as_ref().is_some_and(|s| {
        s.conditions
            .iter()
            .any(|c| c.type_ == "Held" && c.status == "True" && c.reason == "BgpPeersRemaining")
    })
}

/// Whether a Switch status still lists a neighbour of `server` (its phase may not
/// leave `Provisioned` until none does).
pub fn still_peered(server: &str, switches: &[Arc<Switch>]) -> bool {
    switches.iter().any(|s| {
        s.status
            .as_ref()
            .and_then(|st| st.bgp.as_ref())
            .is_some_and(|b| b.neighbors.iter().any(|n| n.server == server))
    })
}

/// One neighbour the speaker must have, with who it is for.
#[derive(Debug, Clone)]
pub struct Wanted {
    /// The neighbour (its password a placeholder until it is sent).
    pub neighbor: Neighbor,
    /// The Server.
    pub server: String,
    /// The SwitchPort.
    pub switch_port: String,
    /// The claim's namespace (where the password Secret is).
    pub namespace: String,
    /// The password Secret.
    pub password_secret: String,
}

/// The neighbour of `peer` for host `server` of `claim` (namespace `namespace`)
/// allowed `allowed`, under the Switch's `b`.
pub fn neighbor(
    b: &SwitchBgp,
    peer: &Peer,
    allowed: &Allowed,
    server: &str,
    namespace: &str,
    claim: &str,
) -> Wanted {
    Wanted {
        neighbor: Neighbor {
            address: peer.src_ip,
            remote_asn: peer.node_asn,
            local_address: peer.peer_ip,
            prefixes: allowed.prefixes.clone(),
            max_prefix: b.max_prefix,
            timers: b.timers,
            outbound: b.outbound,
            // A placeholder: the plan compares only whether one is set; the real one
            // is read from the Secret just before it is sent.
            password: Some(SecretString::new("")),
            description: format!("patchbay {namespace}/{claim} {server}"),
        },
        server: server.to_owned(),
        switch_port: peer.switch_port.clone(),
        namespace: namespace.to_owned(),
        password_secret: peer.password_secret.clone(),
    }
}

/// What of `n` the speaker is compared on, as a number: equal for two neighbours
/// the plan would treat alike (the password only as present or not).
pub fn digest(n: &Neighbor) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (
        n.address,
        n.remote_asn,
        n.local_address,
        entries(n),
        n.max_prefix,
        n.timers,
        n.outbound,
        n.password.is_some(),
        &n.description,
    )
        .hash(&mut h);
    h.finish()
}

/// The neighbours patchbay has in place on a speaker after a pass that read
/// `state`: each of `desired` the speaker has as wanted, by address, with its
/// [`digest`].
pub fn established(desired: &[Neighbor], state: &SpeakerState) -> BTreeMap<Ipv4Addr, u64> {
    desired
        .iter()
        .filter(|n| {
            state
                .neighbors
                .get(&n.address)
                .is_some_and(|seen| differences(n, seen).is_empty())
        })
        .map(|n| (n.address, digest(n)))
        .collect()
}

/// Which of a pass's `changes` repair drift, in words (see the module docs), given
/// what patchbay had `established` on the speaker before it.
pub fn repairs(changes: &[Change], established: &BTreeMap<Ipv4Addr, u64>) -> Vec<String> {
    changes
        .iter()
        .filter_map(|c| match c {
            Change::Put { neighbor, .. }
                if established.get(&neighbor.address) == Some(&digest(neighbor)) =>
            {
                Some(format!(
                    "neighbour {} put back as patchbay had it",
                    neighbor.address
                ))
            }
            Change::Put { .. } | Change::Remove { .. } => None,
            Change::Policy { map, remove } if remove.is_empty() => {
                Some(format!("route-map {} written back", map.name()))
            }
            Change::Policy { map, remove } => Some(format!(
                "route-map {}: removed {} patchbay did not write",
                map.name(),
                remove
                    .iter()
                    .map(|(action, seq)| format!("{action} {seq}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
        })
        .collect()
}

/// A Switch's `status.bgp` after a read at `now` that found `neighbors`: the old
/// one while nothing changed and it is younger than [`REFRESH`], else the read
/// with `readAt` = `now`.
pub fn bgp_status(
    old: Option<SwitchBgpStatus>,
    neighbors: Vec<BgpNeighborStatus>,
    now: jiff::Timestamp,
) -> SwitchBgpStatus {
    match old {
        Some(old)
            if old.neighbors == neighbors
                && super::neighbors::is_fresh(old.read_at.as_deref(), now) =>
        {
            old
        }
        _ => SwitchBgpStatus {
            read_at: Some(now.to_string()),
            neighbors,
        },
    }
}

/// What BGP repairs count as in `patchbay_drift_repaired_total{kind}`.
pub const DRIFT_KIND: &str = "BgpSpeaker";

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
        use patchbay_providers::bgp::{Observed, Policy};
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
        let first = bgp_status(None, vec![n("Established")], t(0));
        assert_eq!(first.read_at, Some(t(0).to_string()));
        // Read again and again, unchanged: the status stays (no write) ...
        for s in [2, 60, 299] {
            assert_eq!(
                bgp_status(Some(first.clone()), vec![n("Established")], t(s)),
                first
            );
        }
        // ... until it is five minutes old; then readAt moves to the read.
        let refreshed = bgp_status(Some(first.clone()), vec![n("Established")], t(300));
        assert_eq!(refreshed.read_at, Some(t(300).to_string()));
        // A change is written at once.
        let changed = bgp_status(Some(first.clone()), vec![n("Active")], t(5));
        assert_eq!(changed.read_at, Some(t(5).to_string()));
        assert_eq!(changed.neighbors, vec![n("Active")]);
        // A status without a readAt gets one.
        let bare = SwitchBgpStatus {
            read_at: None,
            neighbors: vec![],
        };
        assert_eq!(
            bgp_status(Some(bare), vec![], t(1)).read_at,
            Some(t(1).to_string())
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

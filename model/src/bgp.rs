//! BGP neighbours on a speaker (the ToR's routing daemon): what patchbay wants each
//! neighbour to be ([`Neighbor`]), what the speaker reports ([`Observed`]), and the
//! changes between them ([`plan`]). Pure, no I/O; a dialect renders the changes
//! (`cli::dialect::bgp`) and a `BgpSpeaker` (`patchbay-providers`) sends them.
//!
//! Ownership: patchbay touches only neighbours at the addresses it is given as
//! *managed* (the node side of every Switch port with a BGP address), and only the
//! prefix-lists and route-maps named after them ([`filter_name`]) and the outbound
//! route-map every neighbour uses ([`OUTBOUND_MAP`]). Anything else on the speaker
//! is left alone. Under a name it owns, patchbay owns every entry: an entry or a
//! route-map clause it did not write (a `permit` that lets everything in, a `set`,
//! a `deny` entry) is drift, removed by the next pass, like a missing one.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::Ipv4Addr;
use std::str::FromStr;

use crate::secret::SecretString;

/// An IPv4 prefix with no host bits set (`192.0.2.0/24`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Prefix {
    network: Ipv4Addr,
    len: u8,
}

impl Prefix {
    /// The prefix of `address` with `len` bits (host bits cleared).
    pub fn of(address: Ipv4Addr, len: u8) -> Self {
        let len = len.min(32);
        Self {
            network: Ipv4Addr::from(u32::from(address) & mask(len)),
            len,
        }
    }

    /// The network address.
    pub fn network(&self) -> Ipv4Addr {
        self.network
    }

    /// The prefix length.
    pub fn length(&self) -> u8 {
        self.len
    }

    /// Whether this is `0.0.0.0/0`, the default route.
    pub fn is_default(&self) -> bool {
        self.len == 0
    }

    /// Whether `address` is inside.
    pub fn contains_address(&self, address: Ipv4Addr) -> bool {
        u32::from(address) & mask(self.len) == u32::from(self.network)
    }

    /// Whether `other` lies wholly inside this prefix (or is it).
    pub fn covers(&self, other: &Prefix) -> bool {
        other.len >= self.len && self.contains_address(other.network)
    }

    /// Whether the two share any address.
    pub fn overlaps(&self, other: &Prefix) -> bool {
        self.covers(other) || other.covers(self)
    }
}

fn mask(len: u8) -> u32 {
    if len == 0 {
        0
    } else {
        u32::MAX << (32 - u32::from(len))
    }
}

impl FromStr for Prefix {
    type Err = String;

    /// `a.b.c.d/len` with no host bits set; the error says why not.
    fn from_str(s: &str) -> Result<Self, String> {
        let (a, l) = s
            .split_once('/')
            .ok_or_else(|| format!("{s:?} is not a prefix (expected a.b.c.d/len)"))?;
        let address: Ipv4Addr = a
            .parse()
            .map_err(|_| format!("{a:?} is not an IPv4 address"))?;
        let len: u8 = l
            .parse()
            .ok()
            .filter(|l| *l <= 32)
            .ok_or_else(|| format!("{l:?} is not a prefix length (0-32)"))?;
        let p = Prefix::of(address, len);
        if p.network != address {
            return Err(format!(
                "{s} has host bits set (the network is {})",
                p.network
            ));
        }
        Ok(p)
    }
}

impl fmt::Display for Prefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.network, self.len)
    }
}

/// A point-to-point interface address (`10.0.1.1/31` or `/30`): the speaker's side
/// of one port, and the single node address it implies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PeerLink {
    /// The speaker's address.
    pub local: Ipv4Addr,
    /// The subnet.
    pub subnet: Prefix,
}

impl PeerLink {
    /// Parses `a.b.c.d/30` or `/31` whose address is usable on a point-to-point link
    /// (a /30's network and broadcast addresses are not).
    pub fn parse(s: &str) -> Result<Self, String> {
        let (a, l) = s
            .split_once('/')
            .ok_or_else(|| format!("{s:?} is not an interface address (expected a.b.c.d/31)"))?;
        let local: Ipv4Addr = a
            .parse()
            .map_err(|_| format!("{a:?} is not an IPv4 address"))?;
        let len: u8 = match l {
            "30" => 30,
            "31" => 31,
            _ => {
                return Err(format!(
                    "/{l} is not a point-to-point subnet: use /31 or /30 (one node per port)"
                ));
            }
        };
        let subnet = Prefix::of(local, len);
        let host = u32::from(local) - u32::from(subnet.network);
        if len == 30 && (host == 0 || host == 3) {
            return Err(format!(
                "{local} is the network or broadcast address of {subnet}"
            ));
        }
        Ok(Self { local, subnet })
    }

    /// The other usable address of the subnet: the node's.
    pub fn node(&self) -> Ipv4Addr {
        let base = u32::from(self.subnet.network);
        let me = u32::from(self.local) - base;
        Ipv4Addr::from(
            base + if self.subnet.len == 31 {
                1 - me
            } else {
                3 - me
            },
        )
    }
}

/// The speaker's own BGP instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Router {
    /// Its ASN.
    pub asn: u32,
    /// Its router id.
    pub router_id: Ipv4Addr,
}

/// What a neighbour is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Outbound {
    /// No route at all.
    Nothing,
    /// Only a default route (`0.0.0.0/0`, originated by the speaker).
    DefaultRoute,
}

/// BGP timers, in seconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Timers {
    /// Keepalive interval.
    pub keepalive: u16,
    /// Hold time.
    pub hold: u16,
    /// Seconds between connection attempts.
    pub connect_retry: u16,
}

/// One neighbour as patchbay wants it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Neighbor {
    /// The node's address.
    pub address: Ipv4Addr,
    /// The node's ASN.
    pub remote_asn: u32,
    /// The speaker's address facing it (the session's source).
    pub local_address: Ipv4Addr,
    /// What the node may announce: each prefix and anything more specific inside it.
    pub prefixes: Vec<Prefix>,
    /// At most this many accepted prefixes; beyond, the session is torn down.
    pub max_prefix: u32,
    /// The session's timers.
    pub timers: Timers,
    /// What the node is sent.
    pub outbound: Outbound,
    /// The TCP MD5 password (RFC 2385), when set.
    pub password: Option<SecretString>,
    /// A description for people reading the speaker (letters, digits, `._-/`).
    pub description: String,
}

/// One neighbour as the speaker reports it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Observed {
    /// The node's address.
    pub address: Option<Ipv4Addr>,
    /// Its configured ASN.
    pub remote_asn: u32,
    /// The configured source address.
    pub local_address: Option<Ipv4Addr>,
    /// The entries of its inbound prefix-list shaped as patchbay writes them
    /// ([`written_entry`]), as (sequence, prefix).
    pub prefixes: Vec<(u32, Prefix)>,
    /// The sequence numbers of the list's other entries: a `deny`, a `ge`, an `le`
    /// patchbay would not write. Patchbay never writes one, so each is drift.
    pub foreign_entries: Vec<u32>,
    /// The configured maximum of accepted prefixes.
    pub max_prefix: Option<u32>,
    /// Configured timers, when the speaker reports them.
    pub timers: Option<Timers>,
    /// Whether an MD5 password is configured.
    pub authenticated: bool,
    /// The inbound and outbound route-maps.
    pub route_map_in: Option<String>,
    /// See `route_map_in`.
    pub route_map_out: Option<String>,
    /// The session state (`Established`, `Active`, `Idle`, …).
    pub state: String,
    /// Prefixes accepted from it.
    pub accepted: u32,
    /// The description.
    pub description: Option<String>,
    /// Whether it is sent a default route (`default-originate`), when the speaker
    /// reports it.
    pub default_originate: Option<bool>,
    /// What this speaker's read cannot show (its dialect configures no such thing),
    /// so [`differences`] does not compare it.
    pub unseen: Unseen,
}

impl Observed {
    /// `n` as a speaker that took every line reports it (the session's `state` and
    /// accepted count aside).
    pub fn configured(n: &Neighbor, state: &str) -> Self {
        Self {
            address: Some(n.address),
            remote_asn: n.remote_asn,
            local_address: Some(n.local_address),
            prefixes: entries(n),
            foreign_entries: Vec::new(),
            max_prefix: Some(n.max_prefix),
            timers: Some(n.timers),
            authenticated: n.password.is_some(),
            route_map_in: Some(filter_name(n.address)),
            route_map_out: Some(OUTBOUND_MAP.into()),
            state: state.into(),
            accepted: 0,
            description: Some(n.description.clone()),
            default_originate: Some(n.outbound == Outbound::DefaultRoute),
            unseen: Unseen::default(),
        }
    }
}

/// Settings a dialect neither configures nor reads (IOS sets no source address and
/// no connect-retry timer per neighbour: the connected interface is the source).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Unseen {
    /// The source address.
    pub source_address: bool,
    /// The connect-retry timer (keepalive and hold are still compared).
    pub connect_retry: bool,
}

/// What the speaker reports.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SpeakerState {
    /// Its BGP instance's ASN, when one runs.
    pub asn: Option<u32>,
    /// Its router id, when one runs.
    pub router_id: Option<Ipv4Addr>,
    /// Every neighbour it has (managed or not), by address.
    pub neighbors: BTreeMap<Ipv4Addr, Observed>,
    /// The route-maps under names patchbay owns ([`owns_map`]), each clause as the
    /// speaker shows it; `None` when the speaker's read does not show route-maps
    /// (then they are not compared).
    pub route_maps: Option<BTreeMap<String, Vec<Clause>>>,
}

/// One clause of a route-map, as the speaker shows it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Clause {
    /// `permit` or `deny`.
    pub action: String,
    /// Its sequence number.
    pub seq: u32,
    /// Its lines, as the configuration writes them (`match ip address prefix-list
    /// …`, `set …`, `call …`, `on-match …`, `description …`), in the order shown.
    pub body: Vec<String>,
}

/// Whether patchbay owns the route-map `name` (a neighbour's inbound map, or the
/// outbound map).
pub fn owns_map(name: &str) -> bool {
    name.starts_with("PB-IN-") || name == OUTBOUND_MAP
}

/// Whether a prefix-list entry is one patchbay writes: a `permit` of the prefix,
/// with `le 32` when it is shorter than a /32, and nothing else.
pub fn written_entry(permit: bool, prefix: &Prefix, ge: Option<u8>, le: Option<u8>) -> bool {
    permit && ge.is_none() && le == (prefix.length() < 32).then_some(32)
}

/// The clauses of the inbound route-map of the neighbour at `address`: its
/// prefix-list, nothing else.
pub fn inbound_clauses(address: Ipv4Addr) -> Vec<Clause> {
    vec![Clause {
        action: "permit".into(),
        seq: 10,
        body: vec![format!(
            "match ip address prefix-list {}",
            filter_name(address)
        )],
    }]
}

/// The clauses of [`OUTBOUND_MAP`]: one that denies everything.
pub fn outbound_clauses() -> Vec<Clause> {
    vec![Clause {
        action: "deny".into(),
        seq: 10,
        body: Vec::new(),
    }]
}

/// A route-map patchbay owns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// The inbound map of the neighbour at this address.
    Inbound(Ipv4Addr),
    /// [`OUTBOUND_MAP`].
    Outbound,
}

impl Policy {
    /// The route-map's name.
    pub fn name(&self) -> String {
        match self {
            Policy::Inbound(address) => filter_name(*address),
            Policy::Outbound => OUTBOUND_MAP.to_owned(),
        }
    }

    /// Its clauses as patchbay writes them.
    pub fn clauses(&self) -> Vec<Clause> {
        match self {
            Policy::Inbound(address) => inbound_clauses(*address),
            Policy::Outbound => outbound_clauses(),
        }
    }
}

/// The name of the prefix-list and inbound route-map of the neighbour at `address`
/// (`PB-IN-10-0-1-2`): patchbay owns every list and map of this name.
pub fn filter_name(address: Ipv4Addr) -> String {
    format!("PB-IN-{}", address.to_string().replace('.', "-"))
}

/// The outbound route-map every neighbour has: it sends nothing. A default route,
/// where one is wanted, goes by `default-originate`, which the route-map does not
/// filter (and which FRR's JSON does not report: not compared).
pub const OUTBOUND_MAP: &str = "PB-OUT-NOTHING";

/// One change to the speaker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// Configure the neighbour (new, or some of it differs): every neighbour line is
    /// sent again (each is idempotent); `stale` are the prefix-list entries
    /// (sequence numbers) to remove.
    Put {
        /// The neighbour.
        neighbor: Neighbor,
        /// Prefix-list entries to remove first.
        stale: Vec<u32>,
    },
    /// Remove the neighbour, and its prefix-list and route-map when it uses them.
    Remove {
        /// The neighbour's address.
        address: Ipv4Addr,
        /// Whether its filters exist (its inbound route-map is patchbay's).
        filters: bool,
    },
    /// Make a route-map patchbay owns what patchbay writes: remove the clauses it
    /// did not write (or that differ from its own), then write its own again.
    Policy {
        /// Which route-map.
        map: Policy,
        /// The clauses to remove, as (action, sequence).
        remove: Vec<(String, u32)>,
    },
}

impl Change {
    /// The neighbour's address (`None`: the outbound route-map, every neighbour's).
    pub fn address(&self) -> Option<Ipv4Addr> {
        match self {
            Change::Put { neighbor, .. } => Some(neighbor.address),
            Change::Remove { address, .. } => Some(*address),
            Change::Policy {
                map: Policy::Inbound(address),
                ..
            } => Some(*address),
            Change::Policy {
                map: Policy::Outbound,
                ..
            } => None,
        }
    }

    /// What it does, for logs: `put 10.0.1.2`, `remove 10.0.1.2`, `policy PB-OUT-NOTHING`.
    pub fn describe(&self) -> String {
        match self {
            Change::Put { neighbor, .. } => format!("put {}", neighbor.address),
            Change::Remove { address, .. } => format!("remove {address}"),
            Change::Policy { map, .. } => format!("policy {}", map.name()),
        }
    }
}

/// The sequence number of the `i`th prefix of a neighbour's list (sorted order).
pub fn sequence(i: usize) -> u32 {
    10 * (i as u32 + 1)
}

/// The desired prefix-list entries of `n`: sorted, deduplicated, numbered.
pub fn entries(n: &Neighbor) -> Vec<(u32, Prefix)> {
    let set: BTreeSet<Prefix> = n.prefixes.iter().copied().collect();
    set.into_iter()
        .enumerate()
        .map(|(i, p)| (sequence(i), p))
        .collect()
}

/// What differs between `want` and `seen` (empty: nothing), for status and logs.
/// Never mentions a password's value.
pub fn differences(want: &Neighbor, seen: &Observed) -> Vec<&'static str> {
    let mut d = Vec::new();
    if seen.remote_asn != want.remote_asn {
        d.push("remote ASN");
    }
    if !seen.unseen.source_address && seen.local_address != Some(want.local_address) {
        d.push("source address");
    }
    if seen.prefixes != entries(want) || !seen.foreign_entries.is_empty() {
        d.push("inbound prefixes");
    }
    if seen.max_prefix != Some(want.max_prefix) {
        d.push("maximum prefixes");
    }
    let timers_differ = |t: Timers| {
        if seen.unseen.connect_retry {
            (t.keepalive, t.hold) != (want.timers.keepalive, want.timers.hold)
        } else {
            t != want.timers
        }
    };
    if seen.timers.is_some_and(timers_differ) {
        d.push("timers");
    }
    if seen.authenticated != want.password.is_some() {
        d.push("password");
    }
    if seen.route_map_in.as_deref() != Some(filter_name(want.address).as_str()) {
        d.push("inbound policy");
    }
    if seen.route_map_out.as_deref() != Some(OUTBOUND_MAP) {
        d.push("outbound policy");
    }
    if seen
        .default_originate
        .is_some_and(|sent| sent != (want.outbound == Outbound::DefaultRoute))
    {
        d.push("outbound default route");
    }
    d
}

/// The changes that make the speaker's managed neighbours `desired`: neighbours at a
/// managed address that are not desired are removed; desired ones that are missing
/// or differ are put. Neighbours at unmanaged addresses are never touched (a desired
/// neighbour outside `managed` is a caller's bug and is skipped).
pub fn plan(
    desired: &[Neighbor],
    observed: &SpeakerState,
    managed: &BTreeSet<Ipv4Addr>,
) -> Vec<Change> {
    let want: BTreeMap<Ipv4Addr, &Neighbor> = desired
        .iter()
        .filter(|n| managed.contains(&n.address))
        .map(|n| (n.address, n))
        .collect();
    let mut changes: Vec<Change> = observed
        .neighbors
        .iter()
        .filter(|(a, _)| managed.contains(a) && !want.contains_key(a))
        .map(|(a, seen)| Change::Remove {
            address: *a,
            filters: seen.route_map_in.as_deref() == Some(filter_name(*a).as_str()),
        })
        .collect();
    for (address, n) in &want {
        match observed.neighbors.get(address) {
            Some(seen) if differences(n, seen).is_empty() => {}
            seen => {
                let keep = entries(n);
                let stale = seen
                    .map(|s| {
                        let mut stale: Vec<u32> = s
                            .prefixes
                            .iter()
                            .filter(|e| !keep.contains(e))
                            .map(|(seq, _)| *seq)
                            .chain(s.foreign_entries.iter().copied())
                            .collect();
                        stale.sort_unstable();
                        stale
                    })
                    .unwrap_or_default();
                changes.push(Change::Put {
                    neighbor: (*n).clone(),
                    stale,
                });
            }
        }
    }
    // The route-maps, where the speaker shows them: each wanted neighbour's inbound
    // map, and the outbound map while any neighbour is wanted. A put writes its
    // neighbour's map and the outbound one: a map it writes needs a change of its
    // own only to remove clauses.
    if let Some(maps) = &observed.route_maps {
        let put = |a: Option<Ipv4Addr>| {
            changes.iter().any(|c| {
                matches!(c, Change::Put { neighbor, .. } if a.is_none_or(|a| neighbor.address == a))
            })
        };
        let policies: Vec<Policy> = want
            .keys()
            .map(|a| Policy::Inbound(*a))
            .chain((!want.is_empty()).then_some(Policy::Outbound))
            .collect();
        let mut fixes = Vec::new();
        for map in policies {
            let written_by_a_put = put(match map {
                Policy::Inbound(a) => Some(a),
                Policy::Outbound => None,
            });
            match policy_fix(maps.get(&map.name()), &map.clauses()) {
                Some(remove) if !(remove.is_empty() && written_by_a_put) => {
                    fixes.push(Change::Policy { map, remove });
                }
                _ => {}
            }
        }
        changes.extend(fixes);
    }
    changes
}

/// The clauses to remove from a route-map shown as `seen` (absent: missing) for it
/// to be `wanted`, or `None` when it already is: every clause not exactly one of
/// `wanted`.
fn policy_fix(seen: Option<&Vec<Clause>>, wanted: &[Clause]) -> Option<Vec<(String, u32)>> {
    let seen = seen.map(Vec::as_slice).unwrap_or_default();
    if seen == wanted {
        return None;
    }
    Some(
        seen.iter()
            .filter(|c| !wanted.contains(c))
            .map(|c| (c.action.clone(), c.seq))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> Ipv4Addr {
        s.parse().unwrap()
    }

    fn p(s: &str) -> Prefix {
        s.parse().unwrap()
    }

    #[test]
    fn prefixes_parse_strictly_and_compare_by_containment() {
        assert_eq!(p("192.0.2.0/24").to_string(), "192.0.2.0/24");
        for (bad, why) in [
            ("192.0.2.1/24", "host bits"),
            ("192.0.2.0", "not a prefix"),
            ("192.0.2.0/33", "prefix length"),
            ("192.0.2/24", "not an IPv4 address"),
            ("::/0", "not an IPv4 address"),
        ] {
            let e = bad.parse::<Prefix>().unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
        assert!(p("0.0.0.0/0").is_default());
        assert!(p("192.0.2.0/24").covers(&p("192.0.2.16/28")));
        assert!(!p("192.0.2.16/28").covers(&p("192.0.2.0/24")));
        assert!(p("192.0.2.16/28").overlaps(&p("192.0.2.0/24")));
        assert!(!p("192.0.2.0/25").overlaps(&p("192.0.2.128/25")));
    }

    #[test]
    fn a_peer_link_names_exactly_one_node_address() {
        for (link, node) in [
            ("10.0.1.0/31", "10.0.1.1"),
            ("10.0.1.1/31", "10.0.1.0"),
            ("10.0.1.1/30", "10.0.1.2"),
            ("10.0.1.2/30", "10.0.1.1"),
        ] {
            assert_eq!(PeerLink::parse(link).unwrap().node(), ip(node), "{link}");
        }
        for (bad, why) in [
            ("10.0.1.0/30", "network or broadcast"),
            ("10.0.1.3/30", "network or broadcast"),
            ("10.0.1.1/24", "point-to-point"),
            ("10.0.1.1", "interface address"),
        ] {
            let e = PeerLink::parse(bad).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    fn neighbor(address: &str, prefixes: &[&str]) -> Neighbor {
        Neighbor {
            address: ip(address),
            remote_asn: 65101,
            local_address: ip("10.0.1.1"),
            prefixes: prefixes.iter().map(|s| p(s)).collect(),
            max_prefix: 8,
            timers: Timers {
                keepalive: 3,
                hold: 9,
                connect_retry: 2,
            },
            outbound: Outbound::Nothing,
            password: Some(SecretString::new("pw")),
            description: "patchbay".into(),
        }
    }

    fn seen(n: &Neighbor) -> Observed {
        Observed {
            accepted: 1,
            ..Observed::configured(n, "Established")
        }
    }

    #[test]
    fn the_plan_touches_only_what_differs_and_only_managed_addresses() {
        let a = neighbor("10.0.1.2", &["192.0.2.0/28"]);
        let b = neighbor("10.0.1.6", &["192.0.2.16/28", "192.0.2.64/32"]);
        let managed: BTreeSet<_> = [ip("10.0.1.2"), ip("10.0.1.6"), ip("10.0.1.10")].into();
        let mut state = SpeakerState::default();
        // Empty speaker: both put, nothing stale.
        let changes = plan(&[a.clone(), b.clone()], &state, &managed);
        assert_eq!(changes.len(), 2);
        assert!(matches!(&changes[0], Change::Put { stale, .. } if stale.is_empty()));
        // In place: nothing.
        state.neighbors.insert(a.address, seen(&a));
        state.neighbors.insert(b.address, seen(&b));
        // An unmanaged neighbour someone else runs, and a managed one left over.
        state
            .neighbors
            .insert(ip("10.9.9.9"), seen(&neighbor("10.9.9.9", &[])));
        state
            .neighbors
            .insert(ip("10.0.1.10"), seen(&neighbor("10.0.1.10", &[])));
        let changes = plan(&[a.clone(), b.clone()], &state, &managed);
        assert_eq!(
            changes,
            vec![Change::Remove {
                address: ip("10.0.1.10"),
                filters: true
            }]
        );
        // One prefix fewer: put, its entry stale.
        let b2 = neighbor("10.0.1.6", &["192.0.2.64/32"]);
        let changes = plan(&[a.clone(), b2.clone()], &state, &[ip("10.0.1.6")].into());
        assert_eq!(
            changes,
            vec![Change::Put {
                neighbor: b2.clone(),
                stale: vec![10, 20]
            }]
        );
        // A password removed on the device is a difference; its value never shows.
        let mut s = seen(&a);
        s.authenticated = false;
        assert_eq!(differences(&a, &s), vec!["password"]);
        // A desired neighbour outside the managed set is never sent.
        assert!(
            plan(
                &[neighbor("10.7.7.7", &[])],
                &SpeakerState::default(),
                &managed
            )
            .is_empty()
        );
    }

    #[test]
    fn route_maps_are_patchbays_alone_and_a_put_writes_its_own() {
        let a = neighbor("10.0.1.2", &["192.0.2.0/28"]);
        let managed = [a.address].into();
        let own = |maps: &[Policy]| -> BTreeMap<String, Vec<Clause>> {
            maps.iter().map(|m| (m.name(), m.clauses())).collect()
        };
        // A new neighbour on a speaker with none of its maps: the put writes them.
        let empty = SpeakerState {
            route_maps: Some(BTreeMap::new()),
            ..Default::default()
        };
        assert!(matches!(
            &plan(std::slice::from_ref(&a), &empty, &managed)[..],
            [Change::Put { .. }]
        ));
        // In place with its maps: nothing.
        let mut state = SpeakerState {
            neighbors: [(a.address, seen(&a))].into(),
            route_maps: Some(own(&[Policy::Inbound(a.address), Policy::Outbound])),
            ..Default::default()
        };
        assert!(plan(std::slice::from_ref(&a), &state, &managed).is_empty());
        // A clause permitting everything, a set on the outbound map, patchbay's own
        // clause with a line more: each goes, and patchbay's clauses are written again.
        let maps = state.route_maps.as_mut().unwrap();
        maps.get_mut(&filter_name(a.address)).unwrap().push(Clause {
            action: "permit".into(),
            seq: 65000,
            body: vec![],
        });
        maps.get_mut(OUTBOUND_MAP).unwrap()[0]
            .body
            .push("set community 65000:1".into());
        assert_eq!(
            plan(std::slice::from_ref(&a), &state, &managed),
            [
                Change::Policy {
                    map: Policy::Inbound(a.address),
                    remove: vec![("permit".into(), 65000)]
                },
                Change::Policy {
                    map: Policy::Outbound,
                    remove: vec![("deny".into(), 10)]
                }
            ]
        );
        // No neighbour wanted: the outbound map is nobody's business any more.
        assert!(
            plan(
                &[],
                &SpeakerState {
                    neighbors: BTreeMap::new(),
                    ..state.clone()
                },
                &managed
            )
            .is_empty()
        );
        // A speaker whose read shows no route-maps is not judged on them.
        state.route_maps = None;
        assert!(plan(&[a], &state, &managed).is_empty());
    }
}

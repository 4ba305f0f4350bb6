//! A dialect's `bgp:` section: the configuration lines that put and remove a BGP
//! neighbour with its inbound prefix filter and outbound policy, and the show commands
//! whose answers say what the speaker has (FRR's JSON, or IOS-style configuration
//! text and the `show ip bgp summary` table). Pure: templates in, lines out; answers
//! in, [`SpeakerState`] out.
//!
//! Placeholders: `{asn}`, `{router_id}` (the speaker), `{peer}`, `{remote_asn}`,
//! `{local}`, `{keepalive}`, `{hold}`, `{connect_retry}`, `{max_prefix}`,
//! `{description}`, `{list}` (the neighbour's prefix-list and route-map,
//! [`filter_name`]), `{out_map}`, `{seq}`, `{prefix}`, `{password}`, and in
//! `route_map_clause_remove` `{map}`, `{action}`, `{seq}`. Every value is
//! an address, a number or a name patchbay builds; the password is the only free
//! text and is checked by the operator (letters and digits only) before it gets here.
//! A line carrying the password is marked, so the session keeps it out of the
//! journal and of error text.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use serde::Deserialize;
use serde_json::Value;

use super::DialectError;
use crate::bgp::{
    Change, Clause, Neighbor, OUTBOUND_MAP, Observed, Outbound, Policy, Prefix, Router,
    SpeakerState, Timers, Unseen, entries, filter_name, owns_map, written_entry,
};

/// The file format of `bgp:` (see the module docs for the placeholders).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BgpSpec {
    /// Enters (and creates) the BGP instance: `router bgp {asn}`.
    pub router_enter: String,
    /// Lines inside the instance, sent with every change (`bgp router-id …`).
    #[serde(default)]
    pub router: Vec<String>,
    /// Leaves the instance.
    pub router_exit: String,
    /// A neighbour's own lines, inside the instance.
    pub neighbor: Vec<String>,
    /// Sets its password.
    pub password_set: String,
    /// Clears its password.
    pub password_clear: String,
    /// Enters the IPv4 unicast family, inside the instance.
    pub family_enter: String,
    /// A neighbour's lines in the family (filters, maximum prefixes).
    pub family: Vec<String>,
    /// A neighbour that gets a default route, in the family.
    pub default_originate: String,
    /// A neighbour that gets no default route, in the family.
    pub default_originate_clear: String,
    /// Leaves the family.
    pub family_exit: String,
    /// Removes a neighbour, inside the instance.
    pub neighbor_remove: Vec<String>,
    /// One prefix-list entry, exactly the prefix (configuration mode).
    pub prefix_entry: String,
    /// One prefix-list entry, the prefix and anything more specific.
    pub prefix_entry_longer: String,
    /// Removes one entry.
    pub prefix_entry_remove: String,
    /// The neighbour's inbound route-map (matching its prefix-list).
    pub route_map_in: Vec<String>,
    /// The outbound route-map every neighbour uses (it sends nothing; a default
    /// route goes by `default_originate`).
    pub route_map_out: Vec<String>,
    /// Removes the neighbour's prefix-list and route-map.
    pub filters_remove: Vec<String>,
    /// Removes one clause of a route-map patchbay owns (one it did not write).
    pub route_map_clause_remove: String,
    /// How to read the speaker.
    pub read: BgpRead,
}

/// How a speaker is read.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BgpRead {
    /// The answers' format.
    pub format: BgpReadFormat,
    /// Every neighbour, with its configuration (and, for `frr_json`, its state).
    pub neighbors: String,
    /// Every prefix-list.
    pub prefix_lists: String,
    /// Every route-map (`frr_json`: `show route-map json`; `ios_config`: the
    /// configuration's `route-map` blocks); without it route-maps are not read,
    /// and a clause added by hand is not seen.
    #[serde(default)]
    pub route_maps: Option<String>,
    /// The sessions' states (`ios_config`: `show ip bgp summary`); without it
    /// every state reads `Unknown`.
    #[serde(default)]
    pub state: Option<String>,
    /// What this dialect neither configures nor can read (`source_address`,
    /// `connect_retry`): not compared, so never "repaired" in a loop.
    #[serde(default)]
    pub unseen: Vec<UnseenField>,
}

/// Formats a speaker's answers come in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BgpReadFormat {
    /// FRR's `show … json`.
    FrrJson,
    /// IOS-style configuration text (`router bgp` section, `ip prefix-list` lines)
    /// and the `show ip bgp summary` table.
    IosConfig,
}

/// A setting a dialect cannot see ([`Unseen`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UnseenField {
    /// The neighbour's source address.
    SourceAddress,
    /// Its connect-retry timer.
    ConnectRetry,
}

/// One line to send; `secret` when it carries the password.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    /// The line.
    pub text: String,
    /// Whether it carries a password (never journalled or shown).
    pub secret: bool,
}

impl BgpSpec {
    /// Checks the section.
    pub fn load(file: &str, spec: BgpSpec) -> Result<Self, DialectError> {
        let need = |what: &str, line: &str, key: &str| {
            if line.contains(key) {
                Ok(())
            } else {
                Err(DialectError {
                    file: file.into(),
                    reason: format!("bgp.{what} must contain {key}"),
                })
            }
        };
        need("router_enter", &spec.router_enter, "{asn}")?;
        need("password_set", &spec.password_set, "{password}")?;
        need("prefix_entry", &spec.prefix_entry, "{prefix}")?;
        need("prefix_entry_longer", &spec.prefix_entry_longer, "{prefix}")?;
        need("prefix_entry_remove", &spec.prefix_entry_remove, "{seq}")?;
        for key in ["{map}", "{action}", "{seq}"] {
            need(
                "route_map_clause_remove",
                &spec.route_map_clause_remove,
                key,
            )?;
        }
        Ok(spec)
    }

    /// The configuration-mode lines that make `changes` under `router`. Global
    /// objects (filters) are written before the neighbours that use them and removed
    /// after the neighbours that used them.
    pub fn render(&self, router: &Router, changes: &[Change]) -> Vec<Line> {
        let plain = |text: String| Line {
            text,
            secret: false,
        };
        let base: Vec<(&str, String)> = vec![
            ("{asn}", router.asn.to_string()),
            ("{router_id}", router.router_id.to_string()),
        ];
        let mut before = Vec::new();
        let mut inside = Vec::new();
        let mut after = Vec::new();
        let puts = changes.iter().any(|c| matches!(c, Change::Put { .. }));
        if puts {
            before.extend(self.route_map_out.iter().map(|t| plain(fill(t, &base))));
        }
        for change in changes {
            match change {
                Change::Put { neighbor, stale } => {
                    let vars = vars(router, neighbor);
                    let list = filter_name(neighbor.address);
                    for seq in stale {
                        let mut v = vars.clone();
                        v.push(("{seq}", seq.to_string()));
                        before.push(plain(fill(&self.prefix_entry_remove, &v)));
                    }
                    for (seq, prefix) in entries(neighbor) {
                        let mut v = vars.clone();
                        v.push(("{seq}", seq.to_string()));
                        v.push(("{prefix}", prefix.to_string()));
                        let t = if prefix.length() < 32 {
                            &self.prefix_entry_longer
                        } else {
                            &self.prefix_entry
                        };
                        before.push(plain(fill(t, &v)));
                    }
                    debug_assert!(!list.is_empty());
                    before.extend(self.route_map_in.iter().map(|t| plain(fill(t, &vars))));
                    inside.extend(self.neighbor.iter().map(|t| plain(fill(t, &vars))));
                    match &neighbor.password {
                        Some(pw) => {
                            let mut v = vars.clone();
                            v.push(("{password}", pw.expose().to_owned()));
                            inside.push(Line {
                                text: fill(&self.password_set, &v),
                                secret: true,
                            });
                        }
                        None => inside.push(plain(fill(&self.password_clear, &vars))),
                    }
                    inside.push(plain(fill(&self.family_enter, &vars)));
                    inside.extend(self.family.iter().map(|t| plain(fill(t, &vars))));
                    let originate = match neighbor.outbound {
                        Outbound::DefaultRoute => &self.default_originate,
                        Outbound::Nothing => &self.default_originate_clear,
                    };
                    inside.push(plain(fill(originate, &vars)));
                    inside.push(plain(fill(&self.family_exit, &vars)));
                }
                Change::Remove { address, filters } => {
                    let v = vec![
                        ("{peer}", address.to_string()),
                        ("{list}", filter_name(*address)),
                    ];
                    inside.extend(self.neighbor_remove.iter().map(|t| plain(fill(t, &v))));
                    if *filters {
                        after.extend(self.filters_remove.iter().map(|t| plain(fill(t, &v))));
                    }
                }
                Change::Policy { map, remove } => {
                    for (action, seq) in remove {
                        let v = vec![
                            ("{map}", map.name()),
                            ("{action}", action.clone()),
                            ("{seq}", seq.to_string()),
                        ];
                        before.push(plain(fill(&self.route_map_clause_remove, &v)));
                    }
                    let own = match map {
                        Policy::Inbound(address) => {
                            let v = vec![("{list}", filter_name(*address))];
                            self.route_map_in
                                .iter()
                                .map(|t| plain(fill(t, &v)))
                                .collect::<Vec<_>>()
                        }
                        Policy::Outbound => self
                            .route_map_out
                            .iter()
                            .map(|t| plain(fill(t, &base)))
                            .collect(),
                    };
                    before.extend(own);
                }
            }
        }
        let mut lines = before;
        if !inside.is_empty() {
            lines.push(plain(fill(&self.router_enter, &base)));
            lines.extend(self.router.iter().map(|t| plain(fill(t, &base))));
            lines.extend(inside);
            lines.push(plain(fill(&self.router_exit, &base)));
        }
        lines.extend(after);
        lines
    }

    /// The command that reads the sessions' states, when the dialect has one and
    /// `neighbors` (the answer to `read.neighbors`) shows a neighbour: without one
    /// a speaker may answer it with an error (IOS `% BGP not active`, FRR `% No BGP
    /// neighbors found`).
    pub fn state_command(&self, neighbors: &str) -> Option<&str> {
        let command = self.read.state.as_deref()?;
        neighbors
            .lines()
            .any(|l| l.trim_start().starts_with("neighbor ") && l.contains(" remote-as "))
            .then_some(command)
    }

    /// Reads the answers to `read.neighbors`, `read.prefix_lists` and (when the
    /// dialect has them) `read.state` and `read.route_maps`.
    pub fn parse(
        &self,
        neighbors: &str,
        prefix_lists: &str,
        state: Option<&str>,
        route_maps: Option<&str>,
    ) -> Result<SpeakerState, String> {
        let mut read = match self.read.format {
            BgpReadFormat::FrrJson => frr::state(neighbors, prefix_lists)?,
            BgpReadFormat::IosConfig => ios::state(neighbors, prefix_lists, state)?,
        };
        read.route_maps = route_maps
            .map(|text| match self.read.format {
                BgpReadFormat::FrrJson => frr::route_maps(text),
                BgpReadFormat::IosConfig => Ok(ios::route_maps(text)),
            })
            .transpose()?;
        let unseen = Unseen {
            source_address: self.read.unseen.contains(&UnseenField::SourceAddress),
            connect_retry: self.read.unseen.contains(&UnseenField::ConnectRetry),
        };
        for n in read.neighbors.values_mut() {
            n.unseen = unseen;
        }
        Ok(read)
    }
}

fn vars(router: &Router, n: &Neighbor) -> Vec<(&'static str, String)> {
    vec![
        ("{asn}", router.asn.to_string()),
        ("{router_id}", router.router_id.to_string()),
        ("{peer}", n.address.to_string()),
        ("{remote_asn}", n.remote_asn.to_string()),
        ("{local}", n.local_address.to_string()),
        ("{keepalive}", n.timers.keepalive.to_string()),
        ("{hold}", n.timers.hold.to_string()),
        ("{connect_retry}", n.timers.connect_retry.to_string()),
        ("{max_prefix}", n.max_prefix.to_string()),
        ("{description}", n.description.clone()),
        ("{list}", filter_name(n.address)),
        ("{out_map}", OUTBOUND_MAP.to_owned()),
    ]
}

fn fill(template: &str, vars: &[(&str, String)]) -> String {
    let mut s = template.to_owned();
    for (k, v) in vars {
        s = s.replace(k, v);
    }
    s
}

/// FRR's JSON answers (`show bgp neighbors json`, `show ip prefix-list json`).
mod frr {
    use super::*;

    fn u32_of(v: &Value, key: &str) -> Option<u32> {
        v.get(key)?.as_u64().and_then(|n| u32::try_from(n).ok())
    }

    fn seconds(v: &Value, key: &str) -> Option<u16> {
        v.get(key)?
            .as_u64()
            .and_then(|ms| u16::try_from(ms / 1000).ok())
    }

    /// The prefix-lists of bgpd (the `BGP` daemon's view), by name.
    fn prefix_lists(text: &str) -> Result<BTreeMap<String, Listed>, String> {
        let mut out = BTreeMap::new();
        if text.trim().is_empty() {
            return Ok(out);
        }
        // vtysh prints one JSON object per daemon, one after the other.
        for doc in serde_json::Deserializer::from_str(text).into_iter::<Value>() {
            let doc = doc.map_err(|e| format!("the prefix-lists are not JSON: {e}"))?;
            let Some(lists) = doc.get("BGP").and_then(Value::as_object) else {
                continue;
            };
            for (name, list) in lists {
                let mut got = Listed::default();
                for e in list
                    .get("entries")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    let Some(seq) = u32_of(e, "sequenceNumber") else {
                        continue;
                    };
                    let length = |k: &str| u32_of(e, k).and_then(|n| u8::try_from(n).ok());
                    got.add(
                        seq,
                        e.get("type").and_then(Value::as_str) == Some("permit"),
                        e.get("prefix")
                            .and_then(Value::as_str)
                            .and_then(|p| p.parse::<Prefix>().ok()),
                        length("minimumPrefixLength"),
                        length("maximumPrefixLength"),
                    );
                }
                out.insert(name.clone(), got);
            }
        }
        Ok(out)
    }

    pub(super) fn state(neighbors: &str, lists: &str) -> Result<SpeakerState, String> {
        let lists = prefix_lists(lists)?;
        let doc: Value = if neighbors.trim().is_empty() {
            Value::Object(Default::default())
        } else {
            serde_json::from_str(neighbors)
                .map_err(|e| format!("the neighbours are not JSON: {e}"))?
        };
        let all = doc
            .as_object()
            .ok_or("the neighbours are not a JSON object")?;
        let mut state = SpeakerState::default();
        for (key, n) in all {
            let Ok(address) = key.parse::<Ipv4Addr>() else {
                continue; // an interface (unnumbered) or IPv6 neighbour: not ours
            };
            state.asn = state.asn.or(u32_of(n, "localAs"));
            state.router_id = state.router_id.or(n
                .get("localRouterId")
                .and_then(Value::as_str)
                .and_then(|s| s.parse().ok()));
            let family = n
                .get("addressFamilyInfo")
                .and_then(|f| f.get("ipv4Unicast"));
            let fam_str = |k: &str| {
                family
                    .and_then(|f| f.get(k))
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            };
            let route_map_in = fam_str("routeMapForIncomingAdvertisements");
            let timers = match (
                seconds(n, "bgpTimerConfiguredKeepAliveIntervalMsecs"),
                seconds(n, "bgpTimerConfiguredHoldTimeMsecs"),
                n.get("connectRetryTimer")
                    .and_then(Value::as_u64)
                    .and_then(|s| u16::try_from(s).ok()),
            ) {
                (Some(keepalive), Some(hold), Some(connect_retry)) => Some(Timers {
                    keepalive,
                    hold,
                    connect_retry,
                }),
                _ => None,
            };
            let observed = Observed {
                address: Some(address),
                remote_asn: u32_of(n, "remoteAs").unwrap_or(0),
                local_address: n
                    .get("updateSource")
                    .and_then(Value::as_str)
                    .and_then(|s| s.parse().ok()),
                prefixes: Vec::new(),
                foreign_entries: Vec::new(),
                max_prefix: family.and_then(|f| u32_of(f, "prefixAllowedMax")),
                timers,
                authenticated: n
                    .get("authenticationEnabled")
                    .and_then(Value::as_u64)
                    .is_some_and(|a| a != 0),
                route_map_in,
                route_map_out: fam_str("routeMapForOutgoingAdvertisements"),
                state: n
                    .get("bgpState")
                    .and_then(Value::as_str)
                    .unwrap_or("Unknown")
                    .to_owned(),
                accepted: family
                    .and_then(|f| u32_of(f, "acceptedPrefixCounter"))
                    .unwrap_or(0),
                description: n.get("nbrDesc").and_then(Value::as_str).map(str::to_owned),
                // FRR names whether the default went only when default-originate is on.
                default_originate: Some(
                    family.is_some_and(|f| f.get("defaultSent").is_some())
                        || family.is_some_and(|f| f.get("defaultNotSent").is_some()),
                ),
                unseen: Unseen::default(),
            };
            state.neighbors.insert(address, observed);
        }
        for n in state.neighbors.values_mut() {
            lists_of(n, &lists);
        }
        Ok(state)
    }

    /// The route-maps patchbay owns in `show route-map json` (bgpd's view): each
    /// rule's match, set and call clauses, its description and any action other
    /// than leaving the map, as the configuration writes them.
    pub(super) fn route_maps(text: &str) -> Result<BTreeMap<String, Vec<Clause>>, String> {
        let mut out = BTreeMap::new();
        for doc in serde_json::Deserializer::from_str(text).into_iter::<Value>() {
            let doc = doc.map_err(|e| format!("the route-maps are not JSON: {e}"))?;
            let Some(maps) = doc.get("BGP").and_then(Value::as_object) else {
                continue;
            };
            for (name, map) in maps.iter().filter(|(name, _)| owns_map(name)) {
                let mut clauses = Vec::new();
                for rule in map
                    .get("rules")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    let text = |k: &str| rule.get(k).and_then(Value::as_str);
                    let lines = |k: &str, word: &str| {
                        rule.get(k)
                            .and_then(Value::as_array)
                            .into_iter()
                            .flatten()
                            .filter_map(Value::as_str)
                            .map(|c| format!("{word} {c}"))
                            .collect::<Vec<_>>()
                    };
                    let mut body = lines("matchClauses", "match");
                    body.extend(lines("setClauses", "set"));
                    body.extend(text("callClause").map(|c| format!("call {c}")));
                    body.extend(text("description").map(|d| format!("description {d}")));
                    body.extend(
                        text("action")
                            .filter(|a| *a != "Exit routemap")
                            .map(|a| format!("on-match {}", a.to_lowercase())),
                    );
                    clauses.push(Clause {
                        action: text("type").unwrap_or("unknown").to_owned(),
                        seq: u32_of(rule, "sequenceNumber").unwrap_or(0),
                        body,
                    });
                }
                out.insert(name.clone(), clauses);
            }
        }
        Ok(out)
    }
}

/// A prefix-list as read: the entries patchbay writes, and the sequence numbers of
/// the others.
#[derive(Debug, Clone, Default)]
struct Listed {
    written: Vec<(u32, Prefix)>,
    foreign: Vec<u32>,
}

impl Listed {
    /// Takes one entry (`prefix` `None`: one that is not an IPv4 prefix).
    fn add(
        &mut self,
        seq: u32,
        permit: bool,
        prefix: Option<Prefix>,
        ge: Option<u8>,
        le: Option<u8>,
    ) {
        match prefix {
            Some(p) if written_entry(permit, &p, ge, le) => self.written.push((seq, p)),
            _ => self.foreign.push(seq),
        }
    }
}

/// `n`'s prefixes and foreign entries, from the list its inbound route-map names.
fn lists_of(n: &mut Observed, lists: &BTreeMap<String, Listed>) {
    if let Some(list) = n.route_map_in.as_ref().and_then(|m| lists.get(m)) {
        n.prefixes = list.written.clone();
        n.foreign_entries = list.foreign.clone();
    }
}

/// IOS-style answers: the running configuration's `router bgp` section and
/// `ip prefix-list` lines (any other text around them is skipped, so a whole
/// `show running-config` reads too), and the `show ip bgp summary` table. A
/// password is only noted as present: its text (clear or type 7) is never kept.
mod ios {
    use super::*;

    /// `ip prefix-list NAME seq N permit|deny PREFIX [ge N] [le N]` lines, by name.
    fn prefix_lists(text: &str) -> BTreeMap<String, Listed> {
        let mut out: BTreeMap<String, Listed> = BTreeMap::new();
        for line in text.lines() {
            let w: Vec<&str> = line.split_whitespace().collect();
            if let [
                "ip",
                "prefix-list",
                name,
                "seq",
                seq,
                action,
                prefix,
                ref rest @ ..,
            ] = w[..]
                && let Ok(seq) = seq.parse()
            {
                let bound = |word: &str| {
                    rest.iter()
                        .position(|w| *w == word)
                        .and_then(|i| rest.get(i + 1))
                        .and_then(|n| n.parse().ok())
                };
                // Anything after the prefix other than `ge N` / `le N` is not ours.
                let known =
                    rest.len() % 2 == 0 && rest.chunks(2).all(|c| matches!(c[0], "ge" | "le"));
                out.entry(name.to_owned()).or_default().add(
                    seq,
                    action == "permit" && known,
                    prefix.parse().ok(),
                    bound("ge"),
                    bound("le"),
                );
            }
        }
        out
    }

    /// The `route-map NAME permit|deny SEQ` blocks of a configuration text, with
    /// their indented lines, for the names patchbay owns.
    pub(super) fn route_maps(text: &str) -> BTreeMap<String, Vec<Clause>> {
        let mut out: BTreeMap<String, Vec<Clause>> = BTreeMap::new();
        let mut open: Option<&mut Clause> = None;
        for line in text.lines() {
            if line.starts_with(' ') {
                if let Some(c) = open.as_mut()
                    && !line.trim().is_empty()
                {
                    c.body.push(line.trim().to_owned());
                }
                continue;
            }
            open = None;
            let w: Vec<&str> = line.split_whitespace().collect();
            if let ["route-map", name, action, seq] = w[..]
                && owns_map(name)
                && let Ok(seq) = seq.parse()
            {
                let clauses = out.entry(name.to_owned()).or_default();
                clauses.push(Clause {
                    action: action.to_owned(),
                    seq,
                    body: Vec::new(),
                });
                open = clauses.last_mut();
            }
        }
        out
    }

    /// The sessions in a `show ip bgp summary` table: address → (state, accepted).
    fn summary(text: &str) -> BTreeMap<Ipv4Addr, (String, u32)> {
        let mut out = BTreeMap::new();
        let mut in_table = false;
        for line in text.lines() {
            if line.starts_with("Neighbor") && line.contains("State/PfxRcd") {
                in_table = true;
                continue;
            }
            if !in_table {
                continue;
            }
            let w: Vec<&str> = line.split_whitespace().collect();
            let (Some(address), Some(state)) =
                (w.first().and_then(|a| a.parse::<Ipv4Addr>().ok()), w.get(9))
            else {
                continue;
            };
            let read = match state.parse::<u32>() {
                Ok(n) => ("Established".to_owned(), n),
                Err(_) => ((*state).to_owned(), 0),
            };
            out.insert(address, read);
        }
        out
    }

    pub(super) fn state(
        config: &str,
        lists: &str,
        sessions: Option<&str>,
    ) -> Result<SpeakerState, String> {
        if config.lines().any(|l| l.starts_with("% ")) {
            return Err(format!(
                "the configuration read failed: {}",
                config.lines().find(|l| l.starts_with("% ")).unwrap_or("")
            ));
        }
        let mut all_lists = prefix_lists(config);
        all_lists.extend(prefix_lists(lists));
        let sessions = sessions.map(summary).unwrap_or_default();
        let mut state = SpeakerState::default();
        let mut in_bgp = false;
        for line in config.lines() {
            if !line.starts_with(' ') {
                in_bgp = false;
                if let Some(asn) = line.trim_end().strip_prefix("router bgp ") {
                    // `router bgp N` (a `vrf` instance is not the default one).
                    if let Ok(asn) = asn.trim().parse() {
                        in_bgp = true;
                        state.asn = Some(asn);
                    }
                }
                continue;
            }
            if !in_bgp {
                continue;
            }
            let w: Vec<&str> = line.split_whitespace().collect();
            match w[..] {
                ["bgp", "router-id", id] => state.router_id = id.parse().ok(),
                ["neighbor", address, ref rest @ ..] => {
                    let Ok(address) = address.parse::<Ipv4Addr>() else {
                        continue; // a peer-group, an interface or IPv6: not ours
                    };
                    let n = state.neighbors.entry(address).or_insert_with(|| Observed {
                        address: Some(address),
                        state: "Unknown".into(),
                        // The configuration lists default-originate when it is on.
                        default_originate: Some(false),
                        ..Default::default()
                    });
                    match rest {
                        ["remote-as", asn] => n.remote_asn = asn.parse().unwrap_or(0),
                        ["description", ..] => {
                            n.description = Some(rest[1..].join(" "));
                        }
                        ["password", ..] => n.authenticated = true,
                        ["update-source", source] => n.local_address = source.parse().ok(),
                        ["timers", "connect", secs] => {
                            let t = n.timers.get_or_insert_with(Timers::default);
                            t.connect_retry = secs.parse().unwrap_or(0);
                        }
                        ["timers", keepalive, hold, ..] => {
                            let t = n.timers.get_or_insert_with(Timers::default);
                            t.keepalive = keepalive.parse().unwrap_or(0);
                            t.hold = hold.parse().unwrap_or(0);
                        }
                        ["route-map", map, "in"] => n.route_map_in = Some((*map).to_owned()),
                        ["route-map", map, "out"] => n.route_map_out = Some((*map).to_owned()),
                        ["maximum-prefix", max, ..] => n.max_prefix = max.parse().ok(),
                        ["default-originate", ..] => n.default_originate = Some(true),
                        _ => {}
                    }
                }
                _ => {}
            }
        }
        // A neighbour line without `remote-as` is not a neighbour (a stray
        // family line); each one's prefixes are those of its inbound route-map's list.
        state.neighbors.retain(|_, n| n.remote_asn != 0);
        for (address, n) in state.neighbors.iter_mut() {
            lists_of(n, &all_lists);
            if let Some((s, accepted)) = sessions.get(address) {
                n.state = s.clone();
                n.accepted = *accepted;
            }
        }
        Ok(state)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bgp::plan;
    use crate::cli::dialect::for_os;
    use crate::secret::SecretString;

    fn spec() -> BgpSpec {
        for_os("frr").unwrap().bgp.clone().unwrap()
    }

    fn router() -> Router {
        Router {
            asn: 65000,
            router_id: "10.0.0.1".parse().unwrap(),
        }
    }

    fn neighbor() -> Neighbor {
        Neighbor {
            address: "10.0.1.2".parse().unwrap(),
            remote_asn: 65101,
            local_address: "10.0.1.1".parse().unwrap(),
            prefixes: vec![
                "192.0.2.10/32".parse().unwrap(),
                "198.51.100.0/28".parse().unwrap(),
            ],
            max_prefix: 8,
            timers: Timers {
                keepalive: 3,
                hold: 9,
                connect_retry: 2,
            },
            outbound: Outbound::Nothing,
            password: Some(SecretString::new("Sup3rSecret")),
            description: "patchbay/tenant-a/rack-1-a".into(),
        }
    }

    #[test]
    fn a_new_neighbour_gets_its_filters_before_itself_and_only_one_line_carries_the_password() {
        let lines = spec().render(
            &router(),
            &[Change::Put {
                neighbor: neighbor(),
                stale: vec![],
            }],
        );
        let text: Vec<&str> = lines.iter().map(|l| l.text.as_str()).collect();
        let at = |s: &str| {
            text.iter()
                .position(|l| l.trim() == s)
                .unwrap_or_else(|| panic!("{s:?} not in {text:#?}"))
        };
        assert!(
            at("ip prefix-list PB-IN-10-0-1-2 seq 10 permit 192.0.2.10/32")
                < at("router bgp 65000")
        );
        assert!(
            at("ip prefix-list PB-IN-10-0-1-2 seq 20 permit 198.51.100.0/28 le 32")
                < at("router bgp 65000")
        );
        assert!(at("route-map PB-IN-10-0-1-2 permit 10") < at("router bgp 65000"));
        assert!(at("neighbor 10.0.1.2 remote-as 65101") > at("router bgp 65000"));
        assert!(
            at("neighbor 10.0.1.2 route-map PB-IN-10-0-1-2 in") > at("address-family ipv4 unicast")
        );
        at("neighbor 10.0.1.2 ttl-security hops 1");
        at("neighbor 10.0.1.2 maximum-prefix 8");
        let secret: Vec<_> = lines
            .iter()
            .filter(|l| l.text.contains("Sup3rSecret"))
            .collect();
        assert_eq!(secret.len(), 1);
        assert!(secret[0].secret);
        assert!(lines.iter().filter(|l| l.secret).count() == 1);
    }

    #[test]
    fn a_removed_neighbour_goes_before_its_filters() {
        let lines = spec().render(
            &router(),
            &[Change::Remove {
                address: "10.0.1.2".parse().unwrap(),
                filters: true,
            }],
        );
        let text: Vec<&str> = lines.iter().map(|l| l.text.trim()).collect();
        let n = text
            .iter()
            .position(|l| *l == "no neighbor 10.0.1.2")
            .unwrap();
        let f = text
            .iter()
            .position(|l| *l == "no ip prefix-list PB-IN-10-0-1-2")
            .unwrap();
        assert!(n < f, "{text:#?}");
    }

    /// FRR 8.4's answers, captured from the test bed with one neighbour configured
    /// as rendered above and Established.
    const NEIGHBORS: &str = r#"{"10.0.1.2":{"remoteAs":65101,"localAs":65000,"nbrDesc":"patchbay/tenant-a/rack-1-a","localRouterId":"10.0.0.1","bgpState":"Established","bgpTimerConfiguredHoldTimeMsecs":9000,"bgpTimerConfiguredKeepAliveIntervalMsecs":3000,"updateSource":"10.0.1.1","connectRetryTimer":2,"authenticationEnabled":1,"addressFamilyInfo":{"ipv4Unicast":{"routeMapForIncomingAdvertisements":"PB-IN-10-0-1-2","routeMapForOutgoingAdvertisements":"PB-OUT-NOTHING","acceptedPrefixCounter":1,"prefixAllowedMax":8}}},"swp7":{"remoteAs":65999}}"#;
    const LISTS: &str = r#"{"ZEBRA":{}}
{"BGP":{"PB-IN-10-0-1-2":{"addressFamily":"IPv4","entries":[{"sequenceNumber":10,"type":"permit","prefix":"192.0.2.10/32"},{"sequenceNumber":20,"type":"permit","prefix":"198.51.100.0/28","maximumPrefixLength":32}]}}}"#;

    #[test]
    fn frr_answers_read_back_into_what_was_rendered() {
        let state = spec().parse(NEIGHBORS, LISTS, None, None).unwrap();
        assert_eq!(state.asn, Some(65000));
        assert_eq!(
            state.neighbors.len(),
            1,
            "the unnumbered neighbour is not ours"
        );
        let seen = &state.neighbors[&"10.0.1.2".parse().unwrap()];
        assert_eq!(seen.state, "Established");
        assert_eq!(seen.accepted, 1);
        assert_eq!(
            crate::bgp::differences(&neighbor(), seen),
            Vec::<&str>::new()
        );
        let managed = ["10.0.1.2".parse().unwrap()].into();
        assert!(plan(&[neighbor()], &state, &managed).is_empty());
        // An outbound changed to a default route after the neighbour was put is seen.
        assert_eq!(seen.default_originate, Some(false));
        let wants_default = Neighbor {
            outbound: Outbound::DefaultRoute,
            ..neighbor()
        };
        assert_eq!(
            crate::bgp::differences(&wants_default, seen),
            ["outbound default route"]
        );
        let sent = NEIGHBORS.replace(
            r#""prefixAllowedMax":8"#,
            r#""prefixAllowedMax":8,"defaultSent":true"#,
        );
        let state = spec().parse(&sent, LISTS, None, None).unwrap();
        let seen = &state.neighbors[&"10.0.1.2".parse().unwrap()];
        assert!(crate::bgp::differences(&wants_default, seen).is_empty());
        assert_eq!(
            crate::bgp::differences(&neighbor(), seen),
            ["outbound default route"]
        );
        assert_eq!(
            spec().parse("{}", "", None, None).unwrap(),
            SpeakerState::default()
        );
        assert!(
            spec()
                .parse("% BGP instance not found", "", None, None)
                .is_err()
        );
    }

    const DOCS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/documented/");

    fn doc(name: &str) -> String {
        std::fs::read_to_string(format!("{DOCS}{name}")).unwrap()
    }

    fn ios() -> BgpSpec {
        for_os("ios")
            .unwrap()
            .bgp
            .clone()
            .expect("ios keeps BGP neighbours")
    }

    #[test]
    fn the_ios_form_sets_no_source_address_or_connect_timer_and_activates_the_family() {
        let lines = ios().render(
            &router(),
            &[Change::Put {
                neighbor: neighbor(),
                stale: vec![],
            }],
        );
        let text: Vec<&str> = lines.iter().map(|l| l.text.as_str()).collect();
        assert!(
            !text.iter().any(|l| l.contains("update-source")),
            "{text:#?}"
        );
        assert!(
            !text.iter().any(|l| l.contains("timers connect")),
            "{text:#?}"
        );
        for want in [
            "neighbor 10.0.1.2 timers 3 9",
            "neighbor 10.0.1.2 activate",
            "neighbor 10.0.1.2 ttl-security hops 1",
            "ip prefix-list PB-IN-10-0-1-2 seq 20 permit 198.51.100.0/28 le 32",
        ] {
            assert!(text.contains(&want), "{want:?} not in {text:#?}");
        }
        assert_eq!(lines.iter().filter(|l| l.secret).count(), 1);
    }

    #[test]
    fn documented_ios_text_reads_back_into_what_the_ios_form_renders() {
        let state = ios()
            .parse(
                &doc("cisco_ios_running_config_router_bgp.txt"),
                &doc("cisco_ios_running_config_prefix_lists.txt"),
                Some(&doc("cisco_ios_show_ip_bgp_summary.txt")),
                None,
            )
            .unwrap();
        assert_eq!(state.asn, Some(65000));
        assert_eq!(state.router_id, Some("10.0.0.1".parse().unwrap()));
        assert_eq!(
            ios().state_command(&doc("cisco_ios_running_config_router_bgp.txt")),
            Some("show ip bgp summary")
        );
        assert_eq!(
            ios().state_command("router bgp 65000\n bgp router-id 10.0.0.1\n"),
            None,
            "no neighbour: the summary is not asked for (IOS answers % BGP not active)"
        );
        let addresses: Vec<String> = state.neighbors.keys().map(|a| a.to_string()).collect();
        assert_eq!(
            addresses,
            ["10.0.1.2", "10.0.1.6", "172.16.0.1"],
            "peer-groups and IPv6 neighbours are skipped"
        );
        let a = &state.neighbors[&"10.0.1.2".parse().unwrap()];
        assert_eq!((a.state.as_str(), a.accepted), ("Established", 1));
        assert!(a.authenticated, "a type-7 password counts as set");
        assert_eq!(a.description.as_deref(), Some("patchbay/tenant-a/rack-1-a"));
        assert!(a.unseen.source_address && a.unseen.connect_retry);
        // What the IOS form renders for neighbor() reads back the same: nothing to do.
        assert_eq!(
            crate::bgp::differences(&neighbor(), a),
            Vec::<&str>::new(),
            "{a:#?}"
        );
        let managed = ["10.0.1.2".parse().unwrap()].into();
        assert!(plan(&[neighbor()], &state, &managed).is_empty());
        let b = &state.neighbors[&"10.0.1.6".parse().unwrap()];
        assert_eq!((b.state.as_str(), b.accepted), ("Active", 0));
        assert_eq!(
            (a.default_originate, b.default_originate),
            (Some(false), Some(true))
        );
        assert!(!b.authenticated);
        assert_eq!(b.max_prefix, Some(16));
        assert_eq!(b.prefixes, vec![(10, "203.0.113.0/29".parse().unwrap())]);
        // Drift is seen: other timers, another list entry.
        let mut other = neighbor();
        other.timers.hold = 30;
        other.prefixes.push("192.0.2.99/32".parse().unwrap());
        assert_eq!(
            crate::bgp::differences(&other, a),
            ["inbound prefixes", "timers"]
        );
        // A read the device refused is an error, not an empty speaker.
        let e = ios()
            .parse("% Invalid input detected at '^' marker.", "", None, None)
            .unwrap_err();
        assert!(e.contains("Invalid input"), "{e}");
        assert_eq!(
            ios().parse("", "", None, None).unwrap(),
            SpeakerState::default()
        );
    }

    /// FRR 8.4's `show route-map json` (bgpd's part), captured from the test bed
    /// after clauses were added by hand beside patchbay's: a permit-everything at
    /// 65000 under the inbound map, a permit with a `set` under the outbound one.
    const ROUTE_MAPS: &str = r#"{"ZEBRA":{}}
{"BGP":{"PB-IN-10-0-1-2":{"invoked":0,"disabledOptimization":false,"processedChange":true,"rules":[{"sequenceNumber":10,"type":"permit","invoked":0,"matchClauses":["ip address prefix-list PB-IN-10-0-1-2"],"setClauses":[],"action":"Exit routemap"},{"sequenceNumber":30,"type":"permit","invoked":0,"description":"hello world","matchClauses":[],"setClauses":[],"callClause":"PB-OUT-NOTHING","action":"Continue to next entry"},{"sequenceNumber":65000,"type":"permit","invoked":0,"matchClauses":[],"setClauses":[],"action":"Exit routemap"}]},"PB-OUT-NOTHING":{"invoked":0,"disabledOptimization":false,"processedChange":true,"rules":[{"sequenceNumber":10,"type":"deny","invoked":0,"matchClauses":[],"setClauses":[],"action":"Exit routemap"},{"sequenceNumber":20,"type":"permit","invoked":0,"matchClauses":[],"setClauses":["local-preference 5"],"action":"Exit routemap"}]},"OTHER":{"rules":[]}}}"#;

    #[test]
    fn clauses_and_entries_patchbay_did_not_write_are_read_and_removed() {
        let lists = LISTS.replace(
            r#""entries":[{"sequenceNumber":10"#,
            r#""entries":[{"sequenceNumber":5,"type":"deny","prefix":"10.0.0.0/8","minimumPrefixLength":16,"maximumPrefixLength":24},{"sequenceNumber":7,"type":"permit","prefix":"0.0.0.0/0","maximumPrefixLength":32},{"sequenceNumber":10"#,
        );
        let state = spec()
            .parse(NEIGHBORS, &lists, None, Some(ROUTE_MAPS))
            .unwrap();
        let seen = &state.neighbors[&"10.0.1.2".parse().unwrap()];
        // A deny is not an entry patchbay writes; a permit of everything is shaped
        // like one, and is not one of the neighbour's: both go.
        assert_eq!(seen.foreign_entries, [5]);
        assert!(seen.prefixes.contains(&(7, "0.0.0.0/0".parse().unwrap())));
        assert_eq!(
            crate::bgp::differences(&neighbor(), seen),
            ["inbound prefixes"]
        );
        let maps = state.route_maps.as_ref().unwrap();
        assert!(!maps.contains_key("OTHER"), "not patchbay's: not read");
        assert_eq!(
            maps["PB-IN-10-0-1-2"][1].body,
            [
                "call PB-OUT-NOTHING",
                "description hello world",
                "on-match continue to next entry"
            ]
        );
        let managed = ["10.0.1.2".parse().unwrap()].into();
        let changes = plan(&[neighbor()], &state, &managed);
        assert_eq!(changes.len(), 3, "{changes:#?}");
        let text: Vec<String> = spec()
            .render(&router(), &changes)
            .into_iter()
            .map(|l| l.text)
            .collect();
        let at = |s: &str| {
            text.iter()
                .position(|l| l == s)
                .unwrap_or_else(|| panic!("{s:?} not in {text:#?}"))
        };
        at("no ip prefix-list PB-IN-10-0-1-2 seq 5");
        at("no ip prefix-list PB-IN-10-0-1-2 seq 7");
        assert!(
            at("no route-map PB-IN-10-0-1-2 permit 65000") < at("router bgp 65000"),
            "{text:#?}"
        );
        at("no route-map PB-IN-10-0-1-2 permit 30");
        at("no route-map PB-OUT-NOTHING permit 20");
        assert!(
            !text
                .iter()
                .any(|l| l == "no route-map PB-IN-10-0-1-2 permit 10")
        );
        assert!(
            !text
                .iter()
                .any(|l| l == "no route-map PB-OUT-NOTHING deny 10")
        );
        // Once only patchbay's clauses are there, nothing is left to do.
        let mut clean = state.clone();
        clean.route_maps = Some(
            [
                Policy::Inbound("10.0.1.2".parse().unwrap()),
                Policy::Outbound,
            ]
            .into_iter()
            .map(|m| (m.name(), m.clauses()))
            .collect(),
        );
        let n = clean
            .neighbors
            .get_mut(&"10.0.1.2".parse().unwrap())
            .unwrap();
        n.foreign_entries.clear();
        n.prefixes = entries(&neighbor());
        assert!(plan(&[neighbor()], &clean, &managed).is_empty());
        // A map missing altogether is written again.
        clean.route_maps.as_mut().unwrap().remove(OUTBOUND_MAP);
        assert_eq!(
            plan(&[neighbor()], &clean, &managed),
            [Change::Policy {
                map: Policy::Outbound,
                remove: vec![]
            }]
        );
    }

    #[test]
    fn documented_ios_route_maps_are_read_and_what_is_not_patchbays_removed() {
        let state = ios()
            .parse(
                &doc("cisco_ios_running_config_router_bgp.txt"),
                &doc("cisco_ios_running_config_prefix_lists.txt"),
                None,
                Some(&doc("cisco_ios_running_config_route_maps.txt")),
            )
            .unwrap();
        let maps = state.route_maps.as_ref().unwrap();
        assert_eq!(
            maps.keys().collect::<Vec<_>>(),
            ["PB-IN-10-0-1-2", "PB-OUT-NOTHING"],
            "UPLINKS-IN is not patchbay's"
        );
        assert_eq!(maps["PB-OUT-NOTHING"][1].body, ["set local-preference 5"]);
        let managed = ["10.0.1.2".parse().unwrap()].into();
        let changes = plan(&[neighbor()], &state, &managed);
        assert_eq!(
            changes,
            [
                Change::Policy {
                    map: Policy::Inbound("10.0.1.2".parse().unwrap()),
                    remove: vec![("permit".into(), 65000)]
                },
                Change::Policy {
                    map: Policy::Outbound,
                    remove: vec![("permit".into(), 20)]
                }
            ]
        );
        // A hand-made entry under patchbay's list, in IOS's own words.
        let lists = doc("cisco_ios_running_config_prefix_lists.txt")
            + "ip prefix-list PB-IN-10-0-1-2 seq 30 permit 0.0.0.0/0 le 32\n\
               ip prefix-list PB-IN-10-0-1-2 seq 40 deny 10.0.0.0/8 ge 9\n";
        let state = ios()
            .parse(
                &doc("cisco_ios_running_config_router_bgp.txt"),
                &lists,
                None,
                None,
            )
            .unwrap();
        assert_eq!(state.route_maps, None, "not asked for: not compared");
        let n = &state.neighbors[&"10.0.1.2".parse().unwrap()];
        assert_eq!(n.foreign_entries, [40]);
        assert_eq!(
            plan(&[neighbor()], &state, &managed),
            [Change::Put {
                neighbor: neighbor(),
                stale: vec![30, 40]
            }]
        );
    }

    #[test]
    fn the_ios_read_never_keeps_a_password() {
        let config = "router bgp 65000\n neighbor 10.0.1.2 remote-as 65101\n \
                      neighbor 10.0.1.2 password Cl34rT3xt\n";
        let state = ios().parse(config, "", None, None).unwrap();
        let n = &state.neighbors[&"10.0.1.2".parse().unwrap()];
        assert!(n.authenticated);
        assert!(!format!("{state:?}").contains("Cl34rT3xt"));
    }
}

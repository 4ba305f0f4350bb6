//! A dialect's `bgp:` section: the configuration lines that put and remove a BGP
//! neighbour with its inbound prefix filter and outbound policy, and the show commands
//! whose answers say what the speaker has (FRR's JSON). Pure: templates in, lines
//! out; JSON in, [`SpeakerState`] out.
//!
//! Placeholders: `{asn}`, `{router_id}` (the speaker), `{peer}`, `{remote_asn}`,
//! `{local}`, `{keepalive}`, `{hold}`, `{connect_retry}`, `{max_prefix}`,
//! `{description}`, `{list}` (the neighbour's prefix-list and route-map,
//! [`filter_name`]), `{out_map}`, `{seq}`, `{prefix}`, `{password}`. Every value is
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
    Change, Neighbor, OUTBOUND_MAP, Observed, Outbound, Prefix, Router, SpeakerState, Timers,
    entries, filter_name,
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
    /// How to read the speaker.
    pub read: BgpRead,
}

/// How a speaker is read.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BgpRead {
    /// The answers' format: only `frr_json` exists.
    pub format: BgpReadFormat,
    /// Every neighbour, with its configuration and state.
    pub neighbors: String,
    /// Every prefix-list.
    pub prefix_lists: String,
}

/// Formats a speaker's answers come in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BgpReadFormat {
    /// FRR's `show … json`.
    FrrJson,
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

    /// Reads the answers to `read.neighbors` and `read.prefix_lists`.
    pub fn parse(&self, neighbors: &str, prefix_lists: &str) -> Result<SpeakerState, String> {
        match self.read.format {
            BgpReadFormat::FrrJson => frr::state(neighbors, prefix_lists),
        }
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

    /// The prefix-lists of bgpd (the `BGP` daemon's view), by name: their permit
    /// entries, each with `le 32` or exact.
    fn prefix_lists(text: &str) -> Result<BTreeMap<String, Vec<(u32, Prefix)>>, String> {
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
                let mut got = Vec::new();
                for e in list
                    .get("entries")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    if e.get("type").and_then(Value::as_str) != Some("permit") {
                        continue;
                    }
                    let (Some(seq), Some(prefix)) = (
                        u32_of(e, "sequenceNumber"),
                        e.get("prefix")
                            .and_then(Value::as_str)
                            .and_then(|p| p.parse::<Prefix>().ok()),
                    ) else {
                        continue;
                    };
                    got.push((seq, prefix));
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
                prefixes: route_map_in
                    .as_ref()
                    .and_then(|m| lists.get(m))
                    .cloned()
                    .unwrap_or_default(),
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
            };
            state.neighbors.insert(address, observed);
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
        let state = spec().parse(NEIGHBORS, LISTS).unwrap();
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
        assert_eq!(spec().parse("{}", "").unwrap(), SpeakerState::default());
        assert!(spec().parse("% BGP instance not found", "").is_err());
    }
}

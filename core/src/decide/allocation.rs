//! Which Servers a claim gets: candidates, claims and current bindings in, the
//! bindings to add and release out. Pure: no client, no clock; table-tested.
//!
//! The rules (seed 001 and the claims issue):
//! - a candidate is a Server of the claim's site, not in maintenance, not bound to
//!   another claim;
//! - a Server fits a role when it meets the role's `minCpus`/`minMemory` (unknown
//!   hardware meets no minimum), is pinned to no other role of the claim, and has a
//!   distinct NIC for every `networkConfiguration` entry of the claim and the role
//!   (named entries first, then the first unused NIC cabled to the right kind of
//!   port);
//! - pins first: a Server whose boot or NIC MAC a role lists must get that role (and
//!   must fit it); then roles with the fewest fitting candidates first; within a
//!   role the smallest fitting hardware first (CPUs, then memory, unknown last), ties
//!   by name — large machines stay free for the roles that need them;
//! - stable: a bound Server that still fits stays; scale-down releases the newest
//!   binding first; a reconcile with nothing changed plans nothing;
//! - whole or nothing: a claim (or its growth) is served completely or not at all.
//!   A claim that cannot be served releases what it bound beyond its last complete
//!   allocation (`committed`, from its status) and keeps the rest — so two waiting
//!   claims never each hold part of what they need;
//! - claims are served in creation order: a waiting claim's share is reserved before
//!   a later claim picks, so freed Servers go to the oldest claim they can serve;
//! - a bound Server that no longer fits (requirements raised, a pin moved) is
//!   replaced only when the replacement can be served; until then it stays and the
//!   claim says so;
//! - a Server in maintenance is never picked; one already bound stays and is
//!   reported.

use std::collections::{BTreeMap, BTreeSet};

use crate::api::ConfigurationKind;
use crate::api::quantity::format_bytes;
use crate::api::server::CabledPortKind;

/// A claim's identity.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ClaimKey {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
}

impl std::fmt::Display for ClaimKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// A Server's binding to a claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binding {
    /// The claim.
    pub claim: ClaimKey,
    /// The claim's uid when bound.
    pub uid: String,
    /// The role served.
    pub role: String,
    /// When bound (RFC 3339, compared as text).
    pub since: String,
}

/// One NIC as allocation sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CandidateNic {
    /// Its name.
    pub name: String,
    /// The kind of port it is cabled to; `None` when not cabled.
    pub port: Option<CabledPortKind>,
}

impl CandidateNic {
    /// A Server's NIC as allocation sees it.
    pub fn of(nic: &crate::api::server::ServerNic) -> Self {
        Self {
            name: nic.name.clone(),
            port: nic.port.as_ref().map(|p| p.port_kind()),
        }
    }
}

/// A Server as allocation sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    /// Server name.
    pub name: String,
    /// Its site.
    pub site: String,
    /// Logical CPUs, if known.
    pub cpus: Option<u64>,
    /// Memory in bytes, if known.
    pub memory: Option<u128>,
    /// Boot MAC and NIC MACs, lower case.
    pub macs: BTreeSet<String>,
    /// NICs in spec order.
    pub nics: Vec<CandidateNic>,
    /// `spec.maintenance`.
    pub maintenance: bool,
    /// `spec.claimRef`.
    pub binding: Option<Binding>,
}

/// One `networkConfiguration` entry a Server must be able to carry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NicNeed {
    /// Where it is written (`spec.networkConfiguration[0]`), for messages.
    pub path: String,
    /// The configuration's kind.
    pub kind: ConfigurationKind,
    /// `nicHint.name`.
    pub nic_name: Option<String>,
    /// `nicHint.smartNIC`.
    pub smart_nic: bool,
}

/// One role of a claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoleRequest {
    /// Role name.
    pub name: String,
    /// How many Servers.
    pub count: usize,
    /// Minimum CPUs.
    pub min_cpus: Option<u64>,
    /// Minimum memory in bytes.
    pub min_memory: Option<u128>,
    /// Pinned MACs, lower case.
    pub pins: BTreeSet<String>,
    /// The claim's and the role's network entries.
    pub nics: Vec<NicNeed>,
}

/// A claim as allocation sees it (already validated).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimRequest {
    /// Its identity.
    pub key: ClaimKey,
    /// Its uid.
    pub uid: String,
    /// Creation time (RFC 3339); with the key, the serving order.
    pub created: String,
    /// The site.
    pub site: String,
    /// Roles.
    pub roles: Vec<RoleRequest>,
    /// The Servers of its last complete allocation (from its status).
    pub committed: BTreeSet<String>,
}

/// What one claim should do.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClaimPlan {
    /// Servers to bind, with their role (a bound Server may be re-bound to another
    /// role of the same claim).
    pub bind: Vec<(String, String)>,
    /// Servers to release.
    pub release: Vec<String>,
    /// The allocation once the plan is carried out: role → Servers (sorted).
    pub roles: BTreeMap<String, Vec<String>>,
    /// Whether every role has its count.
    pub served: bool,
    /// What is missing, when not served (one line per role).
    pub missing: Vec<String>,
    /// Bound Servers in maintenance.
    pub in_maintenance: Vec<String>,
    /// Bound Servers that no longer fit their role and wait for a replacement.
    pub misfits: Vec<String>,
}

impl ClaimPlan {
    /// True when the plan changes no Server.
    pub fn is_noop(&self) -> bool {
        self.bind.is_empty() && self.release.is_empty()
    }
}

/// Which NIC takes each of `needs`: distinct NICs, a named hint first, then the
/// others in order, each to the first free NIC whose `smartNIC` matches and that is
/// cabled to the kind of port its configuration needs. Returns the NIC's index per
/// need, or which need finds none. One rule for allocation (can this Server carry
/// the claim?) and for the host controller (which port carries what).
pub fn match_nics(nics: &[CandidateNic], needs: &[NicNeed]) -> Result<Vec<usize>, String> {
    let mut used = vec![false; nics.len()];
    let mut picks = vec![0; needs.len()];
    let wants = |nic: &CandidateNic, need: &NicNeed| {
        let want = match need.kind {
            ConfigurationKind::SwitchPortConfiguration => CabledPortKind::SwitchPort,
            ConfigurationKind::SmartNicConfiguration => CabledPortKind::SmartNicPort,
        };
        nic.port == Some(want) && (nic.port == Some(CabledPortKind::SmartNicPort)) == need.smart_nic
    };
    let named = needs
        .iter()
        .enumerate()
        .filter(|(_, n)| n.nic_name.is_some());
    let anon = needs
        .iter()
        .enumerate()
        .filter(|(_, n)| n.nic_name.is_none());
    for (k, need) in named.chain(anon) {
        let pick = nics.iter().enumerate().position(|(i, nic)| {
            !used[i] && need.nic_name.as_ref().is_none_or(|n| *n == nic.name) && wants(nic, need)
        });
        match pick {
            Some(i) => {
                used[i] = true;
                picks[k] = i;
            }
            None => return Err(format!("without a NIC for {}", need.path)),
        }
    }
    Ok(picks)
}

/// Why `c` does not fit `role` of `claim` (ignoring availability), or `Ok`.
fn fits(c: &Candidate, claim: &ClaimRequest, role: &RoleRequest) -> Result<(), String> {
    if c.site != claim.site {
        return Err("at another site".into());
    }
    if let Some(min) = role.min_cpus
        && c.cpus.is_none_or(|n| n < min)
    {
        return Err(if c.cpus.is_none() {
            "CPUs unknown".into()
        } else {
            "too few CPUs".into()
        });
    }
    if let Some(min) = role.min_memory
        && c.memory.is_none_or(|m| m < min)
    {
        return Err(if c.memory.is_none() {
            "memory unknown".into()
        } else {
            "too little memory".into()
        });
    }
    if claim
        .roles
        .iter()
        .any(|r| r.name != role.name && !r.pins.is_disjoint(&c.macs))
    {
        return Err("pinned to another role".into());
    }
    match_nics(&c.nics, &role.nics).map(|_| ())
}

/// Best fit: smallest hardware first, unknown last, ties by name.
fn size_key(c: &Candidate) -> (bool, u64, bool, u128, &str) {
    (
        c.cpus.is_none(),
        c.cpus.unwrap_or(0),
        c.memory.is_none(),
        c.memory.unwrap_or(0),
        c.name.as_str(),
    )
}

fn describe_role(claim: &ClaimRequest, role: &RoleRequest) -> String {
    let mut with = Vec::new();
    if let Some(n) = role.min_cpus {
        with.push(format!("≥{n} CPUs"));
    }
    if let Some(m) = role.min_memory {
        with.push(format!("≥{}", format_bytes(m)));
    }
    let plural = if role.count == 1 { "" } else { "s" };
    let mut s = format!(
        "role {}: needs {} server{plural} at site {}",
        role.name, role.count, claim.site
    );
    if !with.is_empty() {
        s.push_str(" with ");
        s.push_str(&with.join(" and "));
    }
    s
}

/// Plans every claim, in creation order, against one pool. The plan of a claim
/// depends only on the claims created before it.
pub fn plan(candidates: &[Candidate], claims: &[ClaimRequest]) -> BTreeMap<ClaimKey, ClaimPlan> {
    plan_until(candidates, claims, None)
}

/// Like [`plan`], stopping after claim `until` (the claims created after it cannot
/// change its plan).
pub fn plan_until(
    candidates: &[Candidate],
    claims: &[ClaimRequest],
    until: Option<&ClaimKey>,
) -> BTreeMap<ClaimKey, ClaimPlan> {
    let mut order: Vec<&ClaimRequest> = claims.iter().collect();
    order.sort_by(|a, b| (&a.created, &a.key).cmp(&(&b.created, &b.key)));
    if let Some(k) = until
        && let Some(i) = order.iter().position(|c| c.key == *k)
    {
        order.truncate(i + 1);
    }
    // Free: not bound, not in maintenance.
    let mut free: BTreeSet<&str> = candidates
        .iter()
        .filter(|c| c.binding.is_none() && !c.maintenance)
        .map(|c| c.name.as_str())
        .collect();
    let mut by_site: BTreeMap<&str, Vec<&Candidate>> = BTreeMap::new();
    for c in candidates {
        by_site.entry(c.site.as_str()).or_default().push(c);
    }
    let none = Vec::new();
    let mut plans = BTreeMap::new();
    for claim in order {
        let site = by_site.get(claim.site.as_str()).unwrap_or(&none);
        let p = plan_claim(site, &mut free, claim);
        plans.insert(claim.key.clone(), p);
    }
    plans
}

fn plan_claim<'a>(
    candidates: &[&'a Candidate],
    free: &mut BTreeSet<&'a str>,
    claim: &ClaimRequest,
) -> ClaimPlan {
    let mut p = ClaimPlan::default();
    let held: Vec<&Candidate> = candidates
        .iter()
        .filter(|c| {
            c.binding
                .as_ref()
                .is_some_and(|b| b.claim == claim.key && b.uid == claim.uid)
        })
        .copied()
        .collect();
    let role_of = |name: &str| claim.roles.iter().find(|r| r.name == name);

    // What stays: held Servers that still fit their role, oldest first, up to count.
    let mut kept: BTreeMap<&str, Vec<&Candidate>> = BTreeMap::new();
    let mut surplus: Vec<&str> = Vec::new();
    let mut misfits: Vec<&Candidate> = Vec::new();
    for c in &held {
        let b = c.binding.as_ref().expect("held Servers are bound");
        if c.maintenance {
            p.in_maintenance.push(c.name.clone());
        }
        match role_of(&b.role) {
            Some(r) if fits(c, claim, r).is_ok() => {
                kept.entry(r.name.as_str()).or_default().push(c)
            }
            Some(_) => misfits.push(c),
            None => surplus.push(c.name.as_str()),
        }
    }
    for role in &claim.roles {
        let list = kept.entry(role.name.as_str()).or_default();
        let since = |c: &Candidate| c.binding.as_ref().map(|b| b.since.clone());
        list.sort_by(|a, b| (since(a), &a.name).cmp(&(since(b), &b.name)));
        while list.len() > role.count {
            if let Some(c) = list.pop() {
                surplus.push(c.name.as_str());
            }
        }
    }

    // Fill what is missing from the free pool and from this claim's own misfits.
    let mut taken: BTreeSet<&str> = BTreeSet::new();
    let mut picks: Vec<(&str, &str)> = Vec::new();
    let own_misfits: BTreeSet<&str> = misfits.iter().map(|c| c.name.as_str()).collect();
    let available = |name: &str, taken: &BTreeSet<&str>| {
        (free.contains(name) || own_misfits.contains(name)) && !taken.contains(name)
    };
    let need =
        |role: &RoleRequest, picks: &Vec<(&str, &str)>, kept: &BTreeMap<&str, Vec<&Candidate>>| {
            let have = kept.get(role.name.as_str()).map_or(0, Vec::len)
                + picks.iter().filter(|(_, r)| *r == role.name).count();
            role.count.saturating_sub(have)
        };
    let kept_names: BTreeSet<&str> = kept.values().flatten().map(|c| c.name.as_str()).collect();
    let mut missing: Vec<String> = Vec::new();

    // Pins first.
    for role in &claim.roles {
        for mac in &role.pins {
            let Some(c) = candidates
                .iter()
                .find(|c| c.site == claim.site && c.macs.contains(mac))
            else {
                missing.push(format!(
                    "role {}: no Server at site {} has pinned MAC {mac}",
                    role.name, claim.site
                ));
                continue;
            };
            let name = c.name.as_str();
            if kept
                .get(role.name.as_str())
                .is_some_and(|l| l.iter().any(|k| k.name == name))
                || picks.iter().any(|(n, _)| *n == name)
            {
                continue;
            }
            if need(role, &picks, &kept) == 0 {
                missing.push(format!(
                    "role {}: pinned Server {name} does not fit in a count of {}",
                    role.name, role.count
                ));
                continue;
            }
            if let Err(why) = fits(c, claim, role) {
                missing.push(format!(
                    "role {}: pinned Server {name} does not meet the role ({why})",
                    role.name
                ));
            } else if c.maintenance {
                missing.push(format!(
                    "role {}: pinned Server {name} is in maintenance",
                    role.name
                ));
            } else if kept_names.contains(name) || !available(name, &taken) {
                let holder = c
                    .binding
                    .as_ref()
                    .filter(|b| b.claim != claim.key)
                    .map_or_else(
                        || "another role".to_owned(),
                        |b| format!("claim {}", b.claim),
                    );
                missing.push(format!(
                    "role {}: pinned Server {name} is held by {holder}",
                    role.name
                ));
            } else {
                taken.insert(name);
                picks.push((name, role.name.as_str()));
            }
        }
    }

    // Then by requirements, the most constrained role first.
    let eligible = |role: &RoleRequest, taken: &BTreeSet<&str>| -> Vec<&'a Candidate> {
        let mut v: Vec<&Candidate> = candidates
            .iter()
            .filter(|c| available(&c.name, taken) && !c.maintenance && fits(c, claim, role).is_ok())
            .copied()
            .collect();
        v.sort_by(|a, b| size_key(a).cmp(&size_key(b)));
        v
    };
    let mut roles: Vec<&RoleRequest> = claim
        .roles
        .iter()
        .filter(|r| need(r, &picks, &kept) > 0)
        .collect();
    roles.sort_by_cached_key(|r| (eligible(r, &taken).len(), r.name.clone()));
    for role in roles {
        let wanted = need(role, &picks, &kept);
        if wanted == 0 {
            continue;
        }
        let fitting = eligible(role, &taken);
        if fitting.len() < wanted {
            missing.push(format!(
                "{}; {} eligible{}",
                describe_role(claim, role),
                fitting.len()
                    + kept.get(role.name.as_str()).map_or(0, Vec::len)
                    + picks.iter().filter(|(_, r)| *r == role.name).count(),
                why_not(candidates, free, claim, role)
            ));
            continue;
        }
        for c in fitting.into_iter().take(wanted) {
            taken.insert(c.name.as_str());
            picks.push((c.name.as_str(), role.name.as_str()));
        }
    }

    p.misfits = misfits.iter().map(|c| c.name.clone()).collect();
    if missing.is_empty() {
        // Served: bind the picks, release surplus and the misfits not re-used.
        for (name, role) in &picks {
            free.remove(name);
            p.bind.push(((*name).to_owned(), (*role).to_owned()));
        }
        let rebound: BTreeSet<&str> = picks.iter().map(|(n, _)| *n).collect();
        p.release.extend(surplus.iter().map(|s| (*s).to_owned()));
        p.release.extend(
            misfits
                .iter()
                .filter(|c| !rebound.contains(c.name.as_str()))
                .map(|c| c.name.clone()),
        );
        p.misfits.clear();
        for (role, list) in &kept {
            let names = p.roles.entry((*role).to_owned()).or_default();
            names.extend(list.iter().map(|c| c.name.clone()));
        }
        for (name, role) in &picks {
            p.roles
                .entry((*role).to_owned())
                .or_default()
                .push((*name).to_owned());
        }
        p.served = true;
    } else {
        // Not served: keep the last complete allocation, release what was bound
        // beyond it (surplus is still released: scaling down needs no Servers).
        p.missing = missing;
        for c in &held {
            let name = c.name.as_str();
            let role = c
                .binding
                .as_ref()
                .map(|b| b.role.clone())
                .unwrap_or_default();
            if surplus.contains(&name) || !claim.committed.contains(name) {
                p.release.push(name.to_owned());
            } else {
                p.roles.entry(role).or_default().push(name.to_owned());
            }
        }
    }
    for names in p.roles.values_mut() {
        names.sort();
    }
    for role in &claim.roles {
        p.roles.entry(role.name.clone()).or_default();
    }
    p.release.sort();
    p.release.dedup();
    p.in_maintenance.sort();
    p.misfits.sort();
    p
}

/// Why the Servers of the site that are not eligible for `role` are not, counted by
/// reason: ` (2 too few CPUs, 1 held by other claims)`.
fn why_not(
    candidates: &[&Candidate],
    free: &BTreeSet<&str>,
    claim: &ClaimRequest,
    role: &RoleRequest,
) -> String {
    let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
    for c in candidates.iter().filter(|c| c.site == claim.site) {
        let own = c
            .binding
            .as_ref()
            .is_some_and(|b| b.claim == claim.key && b.uid == claim.uid);
        let reason = if c.maintenance {
            Some("in maintenance".to_owned())
        } else if let Err(why) = fits(c, claim, role) {
            Some(why)
        } else if !own && c.binding.is_some() {
            Some("held by other claims".to_owned())
        } else if !own && !free.contains(c.name.as_str()) {
            Some("reserved for older claims".to_owned())
        } else {
            None
        };
        if let Some(r) = reason {
            *reasons.entry(r).or_default() += 1;
        }
    }
    if reasons.is_empty() {
        return String::new();
    }
    let parts: Vec<String> = reasons.iter().map(|(r, n)| format!("{n} {r}")).collect();
    format!(" ({})", parts.join(", "))
}

#[cfg(test)]
mod tests;

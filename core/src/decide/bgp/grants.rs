//! BGP grants and a claim's BGP: which ASNs and prefixes VLANPools grant each namespace
//! (a value granted to two namespaces goes to neither), a role's BGP fields checked,
//! and whether each role of a claim may announce what it asks (granted, not overlapping
//! a ToR's subnets or an older claim's prefixes). Pure, like the rest of
//! `crate::decide::bgp`.

use super::*;

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
    pub(super) by_namespace: BTreeMap<String, Granted>,
    pub(super) problems: BTreeMap<String, Vec<String>>,
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

    pub(super) fn problem(&mut self, pool: &str, why: String) {
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

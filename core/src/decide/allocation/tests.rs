//! Table tests of the allocation rules.

use super::*;

const GI: u128 = 1 << 30;

fn server(name: &str, cpus: u64, mem_gi: u128) -> Candidate {
    Candidate {
        name: name.into(),
        site: "dc1".into(),
        cpus: Some(cpus),
        memory: Some(mem_gi * GI),
        macs: [format!(
            "aa:00:00:00:00:{:02x}",
            name.len() + name.as_bytes()[name.len() - 1] as usize
        )]
        .into(),
        nics: vec![CandidateNic {
            name: "eth0".into(),
            port: Some(CabledPortKind::SwitchPort),
        }],
        maintenance: false,
        binding: None,
    }
}

fn with_mac(mut c: Candidate, mac: &str) -> Candidate {
    c.macs = [mac.to_owned()].into();
    c
}

fn key(name: &str) -> ClaimKey {
    ClaimKey {
        namespace: "team".into(),
        name: name.into(),
    }
}

fn role(name: &str, count: usize) -> RoleRequest {
    RoleRequest {
        name: name.into(),
        count,
        min_cpus: None,
        min_memory: None,
        pins: BTreeSet::new(),
        nics: Vec::new(),
    }
}

fn claim(name: &str, created: &str, roles: Vec<RoleRequest>) -> ClaimRequest {
    ClaimRequest {
        key: key(name),
        uid: format!("uid-{name}"),
        created: created.into(),
        site: "dc1".into(),
        roles,
        committed: BTreeSet::new(),
    }
}

/// Carries out `plans` on the candidates and records complete allocations as
/// committed, like the controller does.
fn apply(
    servers: &mut [Candidate],
    claims: &mut [ClaimRequest],
    plans: &BTreeMap<ClaimKey, ClaimPlan>,
    at: &str,
) {
    for c in claims.iter_mut() {
        let p = &plans[&c.key];
        for s in servers.iter_mut() {
            if p.release.contains(&s.name) {
                s.binding = None;
            }
            if let Some((_, r)) = p.bind.iter().find(|(n, _)| *n == s.name) {
                s.binding = Some(Binding {
                    claim: c.key.clone(),
                    uid: c.uid.clone(),
                    role: r.clone(),
                    since: at.into(),
                });
            }
        }
        if p.served {
            c.committed = p.roles.values().flatten().cloned().collect();
        }
    }
}

fn held(servers: &[Candidate], claim: &str) -> Vec<String> {
    servers
        .iter()
        .filter(|s| s.binding.as_ref().is_some_and(|b| b.claim.name == claim))
        .map(|s| s.name.clone())
        .collect()
}

#[test]
fn best_fit_takes_the_smallest_fitting_server_and_ties_go_by_name() {
    let servers = vec![
        server("big", 64, 512),
        server("mid-b", 32, 128),
        server("mid-a", 32, 128),
        server("small", 8, 32),
    ];
    let mut r = role("worker", 2);
    r.min_cpus = Some(16);
    let plans = plan(&servers, &[claim("c", "1", vec![r])]);
    let p = &plans[&key("c")];
    assert!(p.served);
    assert_eq!(
        p.bind,
        vec![
            ("mid-a".to_owned(), "worker".to_owned()),
            ("mid-b".to_owned(), "worker".to_owned())
        ]
    );
    assert_eq!(p.roles["worker"], vec!["mid-a", "mid-b"]);
}

#[test]
fn a_second_pass_with_nothing_changed_plans_nothing() {
    let mut servers = vec![server("a", 8, 32), server("b", 8, 32), server("c", 8, 32)];
    let mut claims = vec![claim("c", "1", vec![role("worker", 2), role("cp", 1)])];
    let first = plan(&servers, &claims);
    apply(&mut servers, &mut claims, &first, "t1");
    let second = plan(&servers, &claims);
    assert!(second[&key("c")].is_noop(), "{:?}", second);
    assert!(second[&key("c")].served);
}

#[test]
fn editing_requirements_keeps_servers_that_still_fit_and_replaces_the_others_only_with_a_replacement()
 {
    let mut servers = vec![server("a", 16, 64), server("b", 32, 64)];
    let mut claims = vec![claim("c", "1", vec![role("worker", 1)])];
    let p = plan(&servers, &claims);
    apply(&mut servers, &mut claims, &p, "t1");
    assert_eq!(held(&servers, "c"), vec!["a"]);

    // Lowered requirements: a still fits, nothing moves.
    claims[0].roles[0].min_cpus = Some(8);
    assert!(plan(&servers, &claims)[&key("c")].is_noop());

    // Raised beyond a: b replaces it, in one plan.
    claims[0].roles[0].min_cpus = Some(32);
    let p = plan(&servers, &claims);
    let cp = &p[&key("c")];
    assert_eq!(cp.bind, vec![("b".to_owned(), "worker".to_owned())]);
    assert_eq!(cp.release, vec!["a"]);
    apply(&mut servers, &mut claims, &p, "t2");

    // Raised beyond everything: b stays (no replacement), reported as a misfit.
    claims[0].roles[0].min_cpus = Some(64);
    let p = plan(&servers, &claims);
    let cp = &p[&key("c")];
    assert!(cp.is_noop(), "{cp:?}");
    assert!(!cp.served);
    assert_eq!(cp.misfits, vec!["b"]);
    assert_eq!(cp.roles["worker"], vec!["b"]);
}

#[test]
fn scale_up_adds_and_scale_down_releases_the_newest_binding_first() {
    let mut servers = vec![server("a", 8, 32), server("b", 8, 32), server("c", 8, 32)];
    let mut claims = vec![claim("c", "1", vec![role("worker", 1)])];
    let p = plan(&servers, &claims);
    apply(&mut servers, &mut claims, &p, "t1");
    claims[0].roles[0].count = 3;
    let p = plan(&servers, &claims);
    assert_eq!(p[&key("c")].bind.len(), 2);
    assert!(p[&key("c")].release.is_empty());
    // Bound later than "a": b and c.
    apply(&mut servers, &mut claims, &p, "t2");
    servers[1].binding.as_mut().unwrap().since = "t3".into();
    claims[0].roles[0].count = 1;
    let p = plan(&servers, &claims);
    let cp = &p[&key("c")];
    assert_eq!(cp.release, vec!["b", "c"]);
    assert_eq!(cp.roles["worker"], vec!["a"]);
    assert!(cp.served);
}

#[test]
fn the_most_constrained_role_is_served_first() {
    // Best fit alone would give the small SmartNIC host to "any" and leave "offload"
    // with nothing.
    let mut snic = server("small-snic", 8, 32);
    snic.nics.push(CandidateNic {
        name: "p0".into(),
        port: Some(CabledPortKind::SmartNicPort),
    });
    let servers = vec![snic, server("large", 64, 512)];
    let mut offload = role("offload", 1);
    offload.nics.push(NicNeed {
        path: "spec.roles[1].networkConfiguration[0]".into(),
        kind: ConfigurationKind::SmartNicConfiguration,
        nic_name: None,
        smart_nic: true,
    });
    let plans = plan(&servers, &[claim("c", "1", vec![role("any", 1), offload])]);
    let p = &plans[&key("c")];
    assert!(p.served, "{p:?}");
    assert_eq!(p.roles["offload"], vec!["small-snic"]);
    assert_eq!(p.roles["any"], vec!["large"]);
}

#[test]
fn pins_take_their_server_and_keep_it_from_other_roles() {
    let servers = vec![
        with_mac(server("s1", 8, 32), "aa:00:00:00:00:01"),
        with_mac(server("s2", 64, 512), "aa:00:00:00:00:02"),
        with_mac(server("s3", 16, 64), "aa:00:00:00:00:03"),
    ];
    // Rule 1: pinned, no requirements. The pin takes the large s2 for cp although
    // workers would fit it first by size.
    let mut cp = role("cp", 1);
    cp.pins.insert("aa:00:00:00:00:02".into());
    let claims = vec![claim("c", "1", vec![cp.clone(), role("worker", 2)])];
    let p = &plan(&servers, &claims)[&key("c")];
    assert!(p.served, "{p:?}");
    assert_eq!(p.roles["cp"], vec!["s2"]);
    assert_eq!(p.roles["worker"], vec!["s1", "s3"]);

    // Rule 3: pinned plus requirements the host does not meet.
    let mut cp3 = role("cp", 1);
    cp3.pins.insert("aa:00:00:00:00:01".into());
    cp3.min_cpus = Some(32);
    let p = &plan(&servers, &[claim("c", "1", vec![cp3])])[&key("c")];
    assert!(!p.served);
    assert!(p.bind.is_empty());
    assert_eq!(
        p.missing,
        vec!["role cp: pinned Server s1 does not meet the role (too few CPUs)"]
    );

    // A pin that matches no Server of the site.
    let mut ghost = role("cp", 1);
    ghost.pins.insert("aa:00:00:00:00:99".into());
    let p = &plan(&servers, &[claim("c", "1", vec![ghost])])[&key("c")];
    assert_eq!(
        p.missing,
        vec!["role cp: no Server at site dc1 has pinned MAC aa:00:00:00:00:99"]
    );
}

#[test]
fn a_claim_that_cannot_be_served_holds_nothing_and_says_what_is_missing() {
    let mut servers = vec![
        server("a", 64, 256),
        server("b", 8, 32),
        server("c", 16, 64),
    ];
    servers[2].maintenance = true;
    let mut r = role("worker", 3);
    r.min_cpus = Some(32);
    r.min_memory = Some(128 * GI);
    let p = &plan(&servers, &[claim("c", "1", vec![r])])[&key("c")];
    assert!(!p.served);
    assert!(p.is_noop());
    assert_eq!(
        p.missing,
        vec![
            "role worker: needs 3 servers at site dc1 with ≥32 CPUs and ≥128Gi; 1 eligible \
             (1 in maintenance, 1 too few CPUs)"
        ]
    );
}

#[test]
fn bindings_beyond_the_last_complete_allocation_are_released_when_the_claim_cannot_be_served() {
    // A crash in the middle of an increment left "b" bound; the claim now cannot be
    // completed: it keeps its committed "a" and lets "b" go.
    let mut servers = vec![server("a", 8, 32), server("b", 8, 32)];
    let c = claim("c", "1", vec![role("worker", 3)]);
    for (s, since) in servers.iter_mut().zip(["t1", "t2"]) {
        s.binding = Some(Binding {
            claim: c.key.clone(),
            uid: c.uid.clone(),
            role: "worker".into(),
            since: since.into(),
        });
    }
    let mut c = c;
    c.committed = ["a".to_owned()].into();
    let p = &plan(&servers, &[c.clone()])[&key("c")];
    assert_eq!(p.release, vec!["b"]);
    assert_eq!(p.roles["worker"], vec!["a"]);
    // A new claim (nothing committed) keeps nothing.
    c.committed.clear();
    let p = &plan(&servers, &[c])[&key("c")];
    assert_eq!(p.release, vec!["a", "b"]);
}

#[test]
fn older_claims_are_served_first_and_a_waiting_one_does_not_block_younger_ones_that_fit() {
    let mut servers: Vec<Candidate> = (0..4).map(|i| server(&format!("s{i}"), 8, 32)).collect();
    let mut claims = vec![
        claim("young", "3", vec![role("worker", 2)]),
        claim("old", "1", vec![role("worker", 2)]),
        claim("middle", "2", vec![role("worker", 3)]),
    ];
    let p = plan(&servers, &claims);
    assert!(p[&key("old")].served);
    assert!(!p[&key("middle")].served, "needs 3, 2 are left");
    assert!(p[&key("middle")].bind.is_empty());
    assert!(
        p[&key("young")].served,
        "served from what middle cannot use"
    );
    apply(&mut servers, &mut claims, &p, "t1");

    // "old" goes: its two Servers free up, and "middle" (older than any waiting
    // claim) needs three: still waiting. One more Server arrives: middle is served.
    for s in servers.iter_mut() {
        if s.binding.as_ref().is_some_and(|b| b.claim.name == "old") {
            s.binding = None;
        }
    }
    claims.retain(|c| c.key.name != "old");
    assert!(!plan(&servers, &claims)[&key("middle")].served);
    servers.push(server("s9", 8, 32));
    let p = plan(&servers, &claims);
    assert!(p[&key("middle")].served);
    assert!(p[&key("young")].is_noop());
}

#[test]
fn a_waiting_older_claim_reserves_its_share_before_a_younger_claim_picks() {
    let servers: Vec<Candidate> = (0..3).map(|i| server(&format!("s{i}"), 8, 32)).collect();
    let claims = vec![
        claim("old", "1", vec![role("worker", 2)]),
        claim("young", "2", vec![role("worker", 2)]),
    ];
    let p = plan(&servers, &claims);
    assert!(p[&key("old")].served);
    assert!(!p[&key("young")].served);
    let old: BTreeSet<_> = p[&key("old")].bind.iter().map(|(n, _)| n.clone()).collect();
    assert_eq!(old.len(), 2);
}

#[test]
fn no_server_is_ever_planned_for_two_claims() {
    // Many claims over few Servers, in every creation order.
    let servers: Vec<Candidate> = (0..7)
        .map(|i| server(&format!("s{i}"), 8 + i, 32))
        .collect();
    let sizes = [3, 2, 4, 1, 2];
    for rotation in 0..sizes.len() {
        let claims: Vec<ClaimRequest> = sizes
            .iter()
            .enumerate()
            .map(|(i, n)| {
                claim(
                    &format!("c{i}"),
                    &format!("{}", (i + rotation) % sizes.len()),
                    vec![role("w", *n)],
                )
            })
            .collect();
        let p = plan(&servers, &claims);
        let mut seen = BTreeSet::new();
        for cp in p.values() {
            assert!(cp.served || cp.bind.is_empty());
            for (n, _) in &cp.bind {
                assert!(seen.insert(n.clone()), "{n} planned twice");
            }
        }
    }
}

#[test]
fn maintenance_other_sites_and_other_claims_servers_are_never_picked() {
    let mut servers = vec![
        server("m", 8, 32),
        server("far", 8, 32),
        server("other", 8, 32),
    ];
    servers[0].maintenance = true;
    servers[1].site = "dc2".into();
    servers[2].binding = Some(Binding {
        claim: key("someone-else"),
        uid: "u".into(),
        role: "w".into(),
        since: "t0".into(),
    });
    let p = &plan(&servers, &[claim("c", "1", vec![role("w", 1)])])[&key("c")];
    assert!(!p.served);
    assert_eq!(
        p.missing,
        vec![
            "role w: needs 1 server at site dc1; 0 eligible (1 held by other claims, 1 in maintenance)"
        ]
    );
}

#[test]
fn a_bound_server_in_maintenance_stays_and_is_reported() {
    let mut servers = vec![server("a", 8, 32)];
    let mut claims = vec![claim("c", "1", vec![role("w", 1)])];
    let p = plan(&servers, &claims);
    apply(&mut servers, &mut claims, &p, "t1");
    servers[0].maintenance = true;
    let p = &plan(&servers, &claims)[&key("c")];
    assert!(p.is_noop());
    assert!(p.served);
    assert_eq!(p.in_maintenance, vec!["a"]);
}

#[test]
fn a_binding_to_an_earlier_claim_of_the_same_name_is_not_this_claims() {
    let mut servers = vec![server("a", 8, 32)];
    servers[0].binding = Some(Binding {
        claim: key("c"),
        uid: "uid-of-a-deleted-claim".into(),
        role: "w".into(),
        since: "t0".into(),
    });
    let p = &plan(&servers, &[claim("c", "1", vec![role("w", 1)])])[&key("c")];
    assert!(!p.served);
    assert!(
        p.release.is_empty(),
        "the orphan sweep releases it, not this claim"
    );
}

#[test]
fn nic_hints_match_by_name_then_by_kind_and_each_entry_needs_its_own_nic() {
    let mut s = server("s", 8, 32);
    s.nics = vec![
        CandidateNic {
            name: "eth0".into(),
            port: Some(CabledPortKind::SwitchPort),
        },
        CandidateNic {
            name: "eth1".into(),
            port: None,
        },
        CandidateNic {
            name: "p0".into(),
            port: Some(CabledPortKind::SmartNicPort),
        },
    ];
    let need = |name: Option<&str>, kind, smart_nic| NicNeed {
        path: "spec.networkConfiguration[0]".into(),
        kind,
        nic_name: name.map(Into::into),
        smart_nic,
    };
    use ConfigurationKind::{SmartNicConfiguration as Snic, SwitchPortConfiguration as Sw};
    for (needs, ok) in [
        (vec![need(Some("eth0"), Sw, false)], true),
        (vec![need(Some("eth1"), Sw, false)], false), // not cabled
        (vec![need(Some("p0"), Sw, false)], false),   // wrong kind of port
        (vec![need(None, Snic, true)], true),
        (vec![need(None, Sw, false), need(None, Sw, false)], false), // one SwitchPort NIC
        (
            vec![need(None, Sw, false), need(Some("eth0"), Sw, false)],
            false,
        ),
        (vec![need(None, Sw, false), need(None, Snic, true)], true),
    ] {
        assert_eq!(match_nics(&s.nics, &needs).is_ok(), ok, "{needs:?}");
    }
}

#[test]
fn servers_without_a_nic_for_the_claims_network_are_ineligible_and_the_message_says_so() {
    let servers = vec![server("a", 8, 32), server("b", 8, 32)];
    let mut r = role("w", 1);
    r.nics.push(NicNeed {
        path: "spec.networkConfiguration[0]".into(),
        kind: ConfigurationKind::SmartNicConfiguration,
        nic_name: None,
        smart_nic: true,
    });
    let p = &plan(&servers, &[claim("c", "1", vec![r])])[&key("c")];
    assert_eq!(
        p.missing,
        vec![
            "role w: needs 1 server at site dc1; 0 eligible (2 without a NIC for \
             spec.networkConfiguration[0])"
        ]
    );
}

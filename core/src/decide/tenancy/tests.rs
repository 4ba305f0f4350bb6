use super::*;
use crate::api::keys::SHARED_LABEL;
use crate::api::{VLANPoolSpec, VlanSpec};

fn pool(name: &str, vlans: &str, namespaces: &[&str]) -> VLANPool {
    let mut p = VLANPool::new(
        name,
        VLANPoolSpec {
            vlans: vlans.into(),
            namespaces: namespaces.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        },
    );
    p.metadata.name = Some(name.into());
    p
}

fn shared(mut p: VLANPool, vlan_name: &str) -> VLANPool {
    p.spec.shared = true;
    p.spec.vlan_name = Some(vlan_name.into());
    p
}

fn on(mut p: VLANPool, switches: &[&str]) -> VLANPool {
    p.spec.switches = switches.iter().map(|s| s.to_string()).collect();
    p
}

fn tenancy() -> Tenancy {
    Tenancy {
        infra_namespace: "infra".into(),
        parking_vlan: VlanId::new(4000).unwrap(),
        trusted_host_namespaces: BTreeSet::new(),
        allow_bmc_credentials: false,
    }
}

fn v(n: u16) -> VlanId {
    VlanId::new(n).unwrap()
}

#[test]
fn lookups_follow_the_pools() {
    let pools = [
        pool("a", "200-209", &["tenant-a"]),
        on(pool("a-tor2", "210", &["tenant-a"]), &["tor-2"]),
        pool("b", "300-309", &["tenant-b"]),
        shared(
            pool("services", "42", &["tenant-a", "tenant-b"]),
            "services",
        ),
        // Two pools, not shared, two namespaces: VLAN 500 goes to nobody.
        pool("c1", "500", &["tenant-a"]),
        pool("c2", "500", &["tenant-b"]),
        // The same namespace twice (per Switch) is no overlap.
        on(pool("a-tor1", "600", &["tenant-a"]), &["tor-1"]),
        on(pool("a-tor3", "600", &["tenant-a"]), &["tor-3"]),
    ];
    let g = Grants::new(&pools, Some(v(4000)));
    type Row<'a> = (
        &'a str,
        Option<&'a str>,
        u16,
        Result<Option<&'a str>, Missing>,
    );
    let table: &[Row<'_>] = &[
        ("tenant-a", Some("tor-1"), 200, Ok(None)),
        ("tenant-a", None, 209, Ok(None)),
        ("tenant-b", Some("tor-1"), 200, Err(Missing::NotGranted)),
        ("tenant-a", Some("tor-1"), 300, Err(Missing::NotGranted)),
        ("tenant-a", Some("tor-2"), 210, Ok(None)),
        ("tenant-a", Some("tor-1"), 210, Err(Missing::OtherSwitches)),
        ("tenant-a", None, 210, Ok(None)),
        ("tenant-a", Some("tor-1"), 42, Ok(Some("services"))),
        ("tenant-b", Some("tor-9"), 42, Ok(Some("services"))),
        ("tenant-c", Some("tor-1"), 42, Err(Missing::NotGranted)),
        ("tenant-a", Some("tor-1"), 500, Err(Missing::Contested)),
        ("tenant-b", Some("tor-1"), 500, Err(Missing::Contested)),
        ("tenant-a", Some("tor-1"), 600, Ok(None)),
        ("tenant-a", Some("tor-3"), 600, Ok(None)),
        ("tenant-a", Some("tor-2"), 600, Err(Missing::OtherSwitches)),
        ("tenant-a", Some("tor-1"), 4000, Err(Missing::Parking)),
    ];
    for (ns, switch, vlan, want) in table {
        assert_eq!(
            &g.lookup(ns, *switch, v(*vlan)),
            want,
            "{ns} {switch:?} VLAN {vlan}"
        );
    }
    assert!(g.problems("a").is_empty());
    assert!(g.problems("services").is_empty());
    assert_eq!(g.problems("c1").len(), 1, "{:?}", g.problems("c1"));
    assert!(
        g.problems("c1")[0].contains("VLANs 500 are also granted by c2"),
        "{:?}",
        g.problems("c1")
    );
    assert!(g.problems("a-tor1").is_empty());
    assert_eq!(g.granted_to("tenant-b").to_range_string(), "42,300-309");
}

#[test]
fn pools_that_would_join_tenants_or_grant_the_parking_vlan_grant_nothing() {
    let pools = [
        pool("two", "700", &["tenant-a", "tenant-b"]),
        pool("parking", "3999-4000", &["tenant-a"]),
        shared(pool("nameless", "800", &["tenant-a"]), "x"),
        pool("bad", "1-", &["tenant-a"]),
    ];
    let mut pools = pools.to_vec();
    pools[2].spec.vlan_name = None;
    let g = Grants::new(&pools, Some(v(4000)));
    for (name, word) in [
        ("two", "spec.namespaces"),
        ("parking", "parking VLAN"),
        ("nameless", "spec.vlanName"),
        ("bad", "spec.vlans"),
    ] {
        let p = g.problems(name);
        assert!(p.iter().any(|m| m.contains(word)), "{name}: {p:?}");
    }
    for vlan in [700, 3999, 800] {
        assert_eq!(
            g.lookup("tenant-a", None, v(vlan)),
            Err(Missing::NotGranted),
            "VLAN {vlan}"
        );
    }
}

#[test]
fn a_configuration_is_refused_per_vlan_with_its_field_and_without_other_tenants() {
    let pools = [
        pool("a", "200-209", &["tenant-a"]),
        pool("b", "300-309", &["tenant-b"]),
    ];
    let g = Grants::new(&pools, Some(v(4000)));
    let spec = PortSettingsSpec {
        untagged_vlan: Some(200),
        vlans: vec![
            VlanSpec {
                id: 300,
                name: None,
            },
            VlanSpec {
                id: 201,
                name: None,
            },
        ],
        ..Default::default()
    };
    let vlans = vlans_of(&spec);
    let u = Use {
        tenant: "tenant-a",
        switch: Some("tor-1"),
        vlans: &vlans,
        what: "SwitchPortConfiguration tenant-a/web",
    };
    let refused = check_vlans(&tenancy(), &g, &u).unwrap_err();
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert!(
        refused[0].contains(
            "spec.vlans[0].id: VLAN 300 is not granted to namespace tenant-a on Switch tor-1"
        ),
        "{}",
        refused[0]
    );
    assert!(
        !refused[0].contains("tenant-b") && !refused[0].contains(" b "),
        "{}",
        refused[0]
    );
    // The infra namespace is not checked; B is granted its own.
    let infra = Use {
        tenant: "infra",
        ..u.clone()
    };
    assert!(check_vlans(&tenancy(), &g, &infra).is_ok());
    let b = vlans_of(&PortSettingsSpec {
        untagged_vlan: Some(305),
        ..Default::default()
    });
    let ub = Use {
        tenant: "tenant-b",
        vlans: &b,
        ..u
    };
    assert!(check_vlans(&tenancy(), &g, &ub).is_ok());
}

#[test]
fn references_stay_in_the_namespace_or_name_shared_infra_configurations() {
    let t = tenancy();
    let table = [
        ("tenant-a", "tenant-a", false, true),
        ("tenant-a", "tenant-b", false, false),
        ("tenant-a", "tenant-b", true, false),
        ("tenant-a", "infra", false, false),
        ("tenant-a", "infra", true, true),
        ("infra", "tenant-a", false, true),
    ];
    for (tenant, ns, shared, ok) in table {
        let r = check_reference(
            &t,
            tenant,
            ns,
            shared,
            "spec.networkConfiguration[0].configurationRef",
        );
        assert_eq!(r.is_ok(), ok, "{tenant} → {ns} shared={shared}: {r:?}");
        if let Err(m) = r {
            assert!(
                m.starts_with("spec.networkConfiguration[0].configurationRef: "),
                "{m}"
            );
        }
    }
    let mut labels = BTreeMap::new();
    assert!(!is_shared(Some(&labels)));
    labels.insert(SHARED_LABEL.to_owned(), "true".to_owned());
    assert!(is_shared(Some(&labels)));
}

#[test]
fn link_aggregation_groups_are_granted_to_one_namespace_each() {
    let mut a = pool("a", "200-209", &["tenant-a"]);
    a.spec.lag_groups = Some("1-8".into());
    let mut b = pool("b", "300-309", &["tenant-b"]);
    b.spec.lag_groups = Some("9-16".into());
    let mut c = pool("c", "400", &["tenant-c"]);
    c.spec.lag_groups = Some("8-9".into());
    let mut s = shared(pool("svc", "42", &["tenant-a", "tenant-b"]), "services");
    s.spec.lag_groups = Some("20".into());
    let g = Grants::new(&[a, b, c, s], None);
    assert_eq!(g.lookup_group("tenant-a", Some("tor-1"), v(1)), Ok(()));
    assert_eq!(
        g.lookup_group("tenant-b", Some("tor-1"), v(1)),
        Err(Missing::NotGranted)
    );
    // 8 and 9 are granted twice: to nobody.
    assert_eq!(
        g.lookup_group("tenant-a", None, v(8)),
        Err(Missing::Contested)
    );
    assert_eq!(
        g.lookup_group("tenant-c", None, v(9)),
        Err(Missing::Contested)
    );
    assert!(
        g.problems("c").iter().any(|m| m.contains("group 8")),
        "{:?}",
        g.problems("c")
    );
    assert!(
        g.problems("svc")
            .iter()
            .any(|m| m.starts_with("spec.lagGroups: a shared pool"))
    );
    let vlans = vlans_of(&PortSettingsSpec::default());
    let u = Use {
        tenant: "tenant-b",
        switch: Some("tor-1"),
        vlans: &vlans,
        what: "",
    };
    let m = check_group(&tenancy(), &g, &u, Some(3)).unwrap_err();
    assert_eq!(
        m,
        "spec.linkAggregation.group: link-aggregation group 3 is not granted to namespace \
         tenant-b on Switch tor-1: no VLANPool grants it (spec.lagGroups)"
    );
    assert!(check_group(&tenancy(), &g, &u, Some(10)).is_ok());
    assert!(check_group(&tenancy(), &g, &u, None).is_ok());
}

/// The one rule, every caller's shape of question: the webhook (no Switch, the
/// object's own namespace), a port (its Switch), a host's NIC (a default
/// configuration: no reference of the tenant's), a chain (a reference only).
#[test]
fn judge_is_the_one_tenancy_rule() {
    let pools = [
        pool("a", "200-209", &["tenant-a"]),
        on(pool("a-tor2", "210", &["tenant-a"]), &["tor-2"]),
        shared(
            pool("services", "42", &["tenant-a", "tenant-b"]),
            "services",
        ),
    ];
    let g = Grants::new(&pools, Some(v(4000)));
    let t = tenancy();
    let carrying = |untagged: i64| PortSettingsSpec {
        untagged_vlan: Some(untagged),
        ..Default::default()
    };
    let (p200, p210, p42, p300, p4000) = (
        carrying(200),
        carrying(210),
        carrying(42),
        carrying(300),
        carrying(4000),
    );
    let reference = |namespace, shared| Reference {
        namespace,
        shared,
        field: "spec.configuration.namespace".into(),
    };
    let settings = |port| Settings {
        port,
        group: None,
        what: String::new(),
    };
    // (tenant, switch, reference, settings, refusals expected (substrings), names)
    type Row<'a> = (
        &'a str,
        Option<&'a str>,
        Option<Reference<'a>>,
        Option<Settings<'a>>,
        &'a [&'a str],
        &'a [(u16, &'a str)],
    );
    let table: Vec<Row<'_>> = vec![
        // A tenant's own configuration with its own VLAN: granted.
        (
            "tenant-a",
            Some("tor-1"),
            Some(reference("tenant-a", false)),
            Some(settings(&p200)),
            &[],
            &[],
        ),
        // Another tenant's configuration: refused, whatever it carries.
        (
            "tenant-a",
            None,
            Some(reference("tenant-b", false)),
            None,
            &["may name configurations of its own namespace"],
            &[],
        ),
        // The infra namespace's, unshared, then shared.
        (
            "tenant-a",
            None,
            Some(reference("infra", false)),
            None,
            &["not shared with tenants"],
            &[],
        ),
        (
            "tenant-a",
            None,
            Some(reference("infra", true)),
            None,
            &[],
            &[],
        ),
        // A VLAN granted on another Switch only, then on that Switch.
        (
            "tenant-a",
            Some("tor-1"),
            None,
            Some(settings(&p210)),
            &["VLAN 210 is not granted to namespace tenant-a on Switch tor-1"],
            &[],
        ),
        (
            "tenant-a",
            Some("tor-2"),
            None,
            Some(settings(&p210)),
            &[],
            &[],
        ),
        // At admission (no Switch yet) a VLAN granted on some Switch is admitted.
        ("tenant-a", None, None, Some(settings(&p210)), &[], &[]),
        // Nobody's VLAN, the parking VLAN.
        (
            "tenant-a",
            Some("tor-1"),
            None,
            Some(settings(&p300)),
            &["VLAN 300 is not granted"],
            &[],
        ),
        (
            "tenant-a",
            Some("tor-1"),
            None,
            Some(settings(&p4000)),
            &["VLAN 4000 is not granted"],
            &[],
        ),
        // A shared pool's VLAN carries the pool's name.
        (
            "tenant-b",
            Some("tor-1"),
            None,
            Some(settings(&p42)),
            &[],
            &[(42, "services")],
        ),
        // Both a bad reference and a VLAN not granted: both said.
        (
            "tenant-a",
            Some("tor-1"),
            Some(reference("tenant-b", false)),
            Some(settings(&p300)),
            &["namespace tenant-b", "VLAN 300"],
            &[],
        ),
        // The infra namespace is trusted: nothing is checked.
        (
            "infra",
            Some("tor-1"),
            Some(reference("tenant-b", false)),
            Some(settings(&p300)),
            &[],
            &[],
        ),
    ];
    for (tenant, switch, reference, settings, refusals, names) in table {
        let c = Carrying {
            tenant,
            switch,
            reference,
            settings,
        };
        let verdict = judge(Some(&t), &g, &c);
        assert_eq!(
            verdict.refusals().len(),
            refusals.len(),
            "{c:?}: {verdict:?}"
        );
        for r in refusals {
            assert!(
                verdict.refusals().iter().any(|m| m.contains(r)),
                "{c:?}: {r:?} not in {verdict:?}"
            );
        }
        let want: BTreeMap<VlanId, String> = names
            .iter()
            .map(|(id, n)| (v(*id), n.to_string()))
            .collect();
        assert_eq!(verdict.names, want, "{c:?}");
        // Tenancy off: everything is granted.
        assert_eq!(judge(None, &g, &c), TenancyVerdict::default());
    }
}

/// Whom a port serves: the claim of the Server that drives it (not while it
/// carries the NIC's provisioning configuration), for a BareMetalHost the namespace
/// of what it carries (the host's while nothing), the SmartNicPort it is chained
/// from, else its own namespace.
#[test]
fn a_port_serves_its_hosts_claim_its_chain_or_its_own_namespace() {
    let server: Arc<Server> = Arc::new(
        serde_json::from_value(serde_json::json!({
            "apiVersion": "patchbay.dev/v1alpha1", "kind": "Server",
            "metadata": {"name": "s1"},
            "spec": {"bmc": {"address": "10.0.0.1", "credentialsSecretRef": {"name": "bmc", "namespace": "infra"}},
                     "bootMac": "aa:bb:cc:dd:ee:01", "site": "dc1",
                     "nics": [{"name": "eth0", "port": {"name": "tor1-p1", "namespace": "infra"},
                               "provisioningConfiguration": {"name": "pxe", "namespace": "infra"}}]},
            "status": {"claim": {"name": "web", "namespace": "tenant-a", "uid": "u",
                                 "role": "worker", "since": "2026-01-01T00:00:00Z"}}
        }))
        .expect("a Server"),
    );
    let snp: Arc<SmartNicPort> = Arc::new(
        serde_json::from_value(serde_json::json!({
            "apiVersion": "patchbay.dev/v1alpha1", "kind": "SmartNicPort",
            "metadata": {"name": "snic-1", "namespace": "infra",
                         "annotations": {HOST_ANNOTATION: "BareMetalHost/tenant-c/host-1"}},
            "spec": {"provider": {"name": "ovs"}, "portName": "pf0"}
        }))
        .expect("a SmartNicPort"),
    );
    let look = Lookups {
        server: &|name| (name == "s1").then(|| server.clone()),
        smartnic: &|ns, name| (ns == "infra" && name == "snic-1").then(|| snp.clone()),
    };
    let meta = |annotation: Option<(&str, &str)>| ObjectMeta {
        name: Some("tor1-p1".into()),
        namespace: Some("infra".into()),
        annotations: annotation.map(|(k, v)| [(k.to_owned(), v.to_owned())].into()),
        ..Default::default()
    };
    let cfg = |name: &str| ConfigurationRef {
        name: name.into(),
        namespace: Some("infra".into()),
    };
    let sp = CabledPortKind::SwitchPort;
    let table = [
        (meta(None), Some(cfg("web")), "infra"),
        (
            meta(Some((HOST_ANNOTATION, "Server/s1"))),
            Some(cfg("web")),
            "tenant-a",
        ),
        // The NIC's provisioning configuration is the infra team's network.
        (
            meta(Some((HOST_ANNOTATION, "Server/s1"))),
            Some(cfg("pxe")),
            "infra",
        ),
        // A Server not (or no longer) cached: the port's own namespace.
        (
            meta(Some((HOST_ANNOTATION, "Server/gone"))),
            Some(cfg("web")),
            "infra",
        ),
        (
            meta(Some((HOST_ANNOTATION, "BareMetalHost/tenant-b/host-9"))),
            None,
            "tenant-b",
        ),
        // A BareMetalHost's port serves the namespace of what it carries: a
        // tenant's HostNetworkAttachment its tenant, the infra team's network infra.
        (
            meta(Some((HOST_ANNOTATION, "BareMetalHost/metal3/host-9"))),
            Some(ConfigurationRef {
                name: "web".into(),
                namespace: Some("tenant-a".into()),
            }),
            "tenant-a",
        ),
        (
            meta(Some((HOST_ANNOTATION, "BareMetalHost/metal3/host-9"))),
            Some(cfg("pxe")),
            "infra",
        ),
        // Chained from a SmartNicPort: whom that port serves (its host's namespace).
        (
            meta(Some((CHAINED_FROM_ANNOTATION, "infra/snic-1"))),
            None,
            "tenant-c",
        ),
        (
            meta(Some((CHAINED_FROM_ANNOTATION, "infra/missing"))),
            None,
            "infra",
        ),
    ];
    for (m, c, want) in table {
        assert_eq!(
            serving_namespace(sp, &m, c.as_ref(), &look),
            want,
            "{:?} carrying {c:?}",
            m.annotations
        );
    }
    // A chain mark on a SmartNicPort itself means nothing.
    let m = meta(Some((CHAINED_FROM_ANNOTATION, "infra/snic-1")));
    assert_eq!(
        serving_namespace(CabledPortKind::SmartNicPort, &m, None, &look),
        "infra"
    );
}

/// The Forbidden condition: True while refused, False once granted again, absent
/// on a port never refused; set at the time it is given.
#[test]
fn forbidden_is_reported_then_withdrawn() {
    let now = Timestamp::from_second(1_800_000_000).unwrap();
    let mut status = PortStatus::default();
    report_forbidden(&mut status, &TenancyVerdict::default(), Some(1), now);
    assert!(status.conditions.is_empty());
    let refused = TenancyVerdict {
        refused: Some(vec!["spec.untaggedVLAN: VLAN 300 is not granted".into()]),
        ..Default::default()
    };
    report_forbidden(&mut status, &refused, Some(2), now);
    let c = find_condition(&status.conditions, "Forbidden").unwrap();
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("True", "Forbidden")
    );
    assert!(c.message.contains("VLAN 300") && c.message.contains("nothing is sent"));
    report_forbidden(&mut status, &TenancyVerdict::default(), Some(3), now);
    let c = find_condition(&status.conditions, "Forbidden").unwrap();
    assert_eq!((c.status.as_str(), c.reason.as_str()), ("False", "Granted"));
}

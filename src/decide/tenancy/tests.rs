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

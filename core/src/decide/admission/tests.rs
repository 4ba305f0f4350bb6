use std::collections::BTreeSet;

use patchbay_model::values::VlanId;
use serde_json::json;

use super::*;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse};

fn tenancy() -> Tenancy {
    Tenancy {
        infra_namespace: "infra".into(),
        parking_vlan: VlanId::new(4000).unwrap(),
        trusted_host_namespaces: BTreeSet::new(),
        allow_bmc_credentials: false,
    }
}

fn pools() -> Vec<VLANPool> {
    serde_json::from_value(json!([
        {"metadata": {"name": "a"}, "spec": {"vlans": "200-209", "namespaces": ["tenant-a"]}},
        {"metadata": {"name": "b"}, "spec": {"vlans": "300-309", "namespaces": ["tenant-b"]}},
        {"metadata": {"name": "svc"}, "spec": {"vlans": "42", "namespaces": ["tenant-a", "tenant-b"],
                                               "shared": true, "vlanName": "services"}},
    ]))
    .unwrap()
}

fn configuration(ns: &str, name: &str) -> Option<SwitchPortConfiguration> {
    let (vlan, shared) = match (ns, name) {
        ("infra", "services") => (42, true),
        ("infra", "pxe") => (10, false),
        ("tenant-a", "web") => (200, false),
        ("tenant-a", "evil") => (300, false),
        _ => return None,
    };
    let labels = if shared {
        json!({"patchbay.dev/shared": "true"})
    } else {
        json!({})
    };
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {"untaggedVLAN": vlan}
    }))
    .ok()
}

fn run(kind: &str, ns: &str, object: serde_json::Value) -> Vec<String> {
    let pools = pools();
    let grants = Grants::new(&pools, Some(VlanId::new(4000).unwrap()));
    let look = Lookups {
        grants: &grants,
        pools: &pools,
        switch_port_configuration: &configuration,
        smartnic_configuration: &|_, _| None,
        rollout: &crate::decide::rollout::Defaults::default(),
    };
    review(&tenancy(), kind, ns, &object, &look)
}

#[test]
fn configurations_carry_only_granted_vlans() {
    let ok = run(
        "SwitchPortConfiguration",
        "tenant-a",
        json!({"metadata": {"name": "web"}, "spec": {"untaggedVLAN": 200, "vlans": [{"id": 42}]}}),
    );
    assert!(ok.is_empty(), "{ok:?}");
    let refused = run(
        "SwitchPortConfiguration",
        "tenant-a",
        json!({"metadata": {"name": "evil"}, "spec": {"untaggedVLAN": 200, "vlans": [{"id": 301}, {"id": 4000}]}}),
    );
    assert_eq!(refused.len(), 2, "{refused:?}");
    assert!(
        refused[0].starts_with(
            "spec.vlans[0].id: VLAN 301 is not granted to namespace tenant-a: no VLANPool grants it"
        ),
        "{}",
        refused[0]
    );
    assert!(
        refused[1].contains("VLAN 4000") && refused[1].contains("parking"),
        "{}",
        refused[1]
    );
    assert!(
        refused.iter().all(|m| !m.contains("tenant-b")),
        "{refused:?}"
    );
    // The infra namespace writes what it wants.
    let infra = run(
        "SwitchPortConfiguration",
        "infra",
        json!({"metadata": {"name": "pxe"}, "spec": {"untaggedVLAN": 10}}),
    );
    assert!(infra.is_empty());
    let snic = run(
        "SmartNicConfiguration",
        "tenant-a",
        json!({"metadata": {"name": "s"}, "spec": {"untaggedVLAN": 305,
               "nextConfigurationRef": {"name": "web", "namespace": "tenant-b"}}}),
    );
    assert_eq!(snic.len(), 2, "{snic:?}");
    assert!(
        snic[0].starts_with("spec.untaggedVLAN: VLAN 305"),
        "{}",
        snic[0]
    );
    assert!(
        snic[1].starts_with("spec.nextConfigurationRef.namespace: "),
        "{}",
        snic[1]
    );
}

#[test]
fn claims_name_their_own_or_shared_infra_configurations_with_granted_vlans() {
    let claim = |refs: serde_json::Value| {
        json!({"metadata": {"name": "c"}, "spec": {"site": "s", "roles": [
            {"name": "worker", "count": 1, "networkConfiguration": refs}]}})
    };
    let entry = |name: &str, ns: Option<&str>| {
        let mut r = json!({"kind": "SwitchPortConfiguration", "name": name});
        if let Some(ns) = ns {
            r["namespace"] = json!(ns);
        }
        json!({"configurationRef": r})
    };
    let ok = run(
        "ServerClaim",
        "tenant-a",
        claim(json!([
            entry("web", None),
            entry("services", Some("infra"))
        ])),
    );
    assert!(ok.is_empty(), "{ok:?}");
    let refused = run(
        "ServerClaim",
        "tenant-a",
        claim(json!([
            entry("web", Some("tenant-b")),
            entry("pxe", Some("infra")),
            entry("evil", None),
            entry("not-there-yet", None),
        ])),
    );
    assert_eq!(refused.len(), 3, "{refused:?}");
    assert!(refused[0].starts_with("spec.roles[0].networkConfiguration[0].configurationRef.namespace: namespace tenant-a may name"), "{}", refused[0]);
    assert!(refused[1].starts_with("spec.roles[0].networkConfiguration[1].configurationRef.namespace: the infra namespace's configuration is not shared"), "{}", refused[1]);
    assert!(refused[2].starts_with("spec.roles[0].networkConfiguration[2].configurationRef (SwitchPortConfiguration tenant-a/evil) spec.untaggedVLAN: VLAN 300 is not granted"), "{}", refused[2]);
    // A reference into another namespace is refused the same whether it exists.
    let missing = run(
        "ServerClaim",
        "tenant-a",
        claim(json!([entry("nothing", Some("tenant-b"))])),
    );
    assert_eq!(missing.len(), 1);
    assert_eq!(missing[0].replace("nothing", "web"), refused[0]);
    let bmc = run(
        "ServerClaim",
        "tenant-a",
        json!({"metadata": {"name": "c"}, "spec": {"site": "s", "inventory": {"includeBmcCredentials": true}}}),
    );
    assert!(
        bmc.len() == 1 && bmc[0].starts_with("spec.inventory.includeBmcCredentials: "),
        "{bmc:?}"
    );
    let bgp = run(
        "ServerClaim",
        "tenant-a",
        json!({"metadata": {"name": "c"}, "spec": {"site": "s", "roles": [{"name": "w",
            "count": 1, "bgp": {"asn": 23456, "prefixes": ["0.0.0.0/0", "192.0.2.1/24"]}}]}}),
    );
    assert_eq!(
        bgp,
        vec![
            "spec.roles[0].bgp.asn: 23456 is AS_TRANS (RFC 6793)".to_owned(),
            "spec.roles[0].bgp.prefixes[0]: 0.0.0.0/0 is the default route: a host may not \
             announce it"
                .to_owned(),
            "spec.roles[0].bgp.prefixes[1]: 192.0.2.1/24 has host bits set (the network is \
             192.0.2.0)"
                .to_owned(),
        ]
    );
}

#[test]
fn ports_and_pools_are_checked_too() {
    let port = run(
        "SwitchPort",
        "tenant-a",
        json!({"metadata": {"name": "p"}, "spec": {"configuration": {"name": "web", "namespace": "tenant-b"}}}),
    );
    assert_eq!(port.len(), 1);
    assert!(
        port[0].starts_with("spec.configuration.namespace: "),
        "{}",
        port[0]
    );
    let overlap = run(
        "VLANPool",
        "",
        json!({"metadata": {"name": "c"}, "spec": {"vlans": "205-210", "namespaces": ["tenant-c"]}}),
    );
    assert_eq!(overlap.len(), 1, "{overlap:?}");
    assert!(
        overlap[0].contains("VLANs 205-209 are also granted by a "),
        "{}",
        overlap[0]
    );
    let fine = run(
        "VLANPool",
        "",
        json!({"metadata": {"name": "a"}, "spec": {"vlans": "200-219", "namespaces": ["tenant-a"]}}),
    );
    assert!(
        fine.is_empty(),
        "an edit of a pool is judged against the others: {fine:?}"
    );
}

/// kube-core's typed request from an AdmissionReview's JSON, as the HTTP server
/// parses it.
fn typed(review: &Value) -> AdmissionRequest<DynamicObject> {
    let review: kube::core::admission::AdmissionReview<DynamicObject> =
        serde_json::from_value(review.clone()).expect("an AdmissionReview");
    review.try_into().expect("with a request")
}

/// The response as the HTTP server sends it back (the review around it).
fn sent(response: AdmissionResponse) -> Value {
    serde_json::to_value(response.into_review()).expect("serialises")
}

#[test]
fn the_review_envelope_carries_the_uid_and_a_403_with_the_fields() {
    let review = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": "u-1", "operation": "CREATE", "namespace": "tenant-a",
            "kind": {"group": "patchbay.dev", "version": "v1alpha1", "kind": "SwitchPortConfiguration"},
            "resource": {"group": "patchbay.dev", "version": "v1alpha1", "resource": "switchportconfigurations"},
            "userInfo": {"username": "tenant"},
            "object": {"apiVersion": "patchbay.dev/v1alpha1", "kind": "SwitchPortConfiguration",
                "metadata": {"name": "evil", "namespace": "tenant-a"}, "spec": {"untaggedVLAN": 300}}}});
    let out = sent(answer(&typed(&review), |kind, ns, obj| {
        run(kind, ns, obj.clone())
    }));
    assert_eq!(out["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(out["kind"], "AdmissionReview");
    assert_eq!(out["response"]["uid"], "u-1");
    assert_eq!(out["response"]["allowed"], false);
    assert_eq!(out["response"]["status"]["code"], 403);
    assert_eq!(out["response"]["status"]["reason"], "Forbidden");
    let m = out["response"]["status"]["message"].as_str().unwrap();
    assert!(
        m.starts_with("spec.untaggedVLAN: VLAN 300 is not granted to namespace tenant-a"),
        "{m}"
    );
    let mut delete = review.clone();
    delete["request"]["operation"] = json!("DELETE");
    let out = sent(answer(&typed(&delete), |_, _, _| vec!["no".into()]));
    assert_eq!(out["response"]["allowed"], true);
    assert_eq!(out["response"]["uid"], "u-1");
}

#[test]
fn a_tenant_smartnic_configuration_is_held_to_the_rollout_limits_like_a_switch_ports() {
    use crate::decide::rollout::{Amount, Defaults, Limits};
    let pools = pools();
    let grants = Grants::new(&pools, Some(VlanId::new(4000).unwrap()));
    let defaults = Defaults {
        limits: Some(Limits {
            max_unavailable: Amount::Percent(10),
            max_unavailable_per_switch: Amount::Count(2),
        }),
        ..Defaults::default()
    };
    let look = Lookups {
        grants: &grants,
        pools: &pools,
        switch_port_configuration: &configuration,
        smartnic_configuration: &|_, _| None,
        rollout: &defaults,
    };
    let object = |rollout: serde_json::Value| {
        json!({"metadata": {"name": "s"},
               "spec": {"untaggedVLAN": 200, "rollout": rollout}})
    };
    let over = object(json!({"maxUnavailable": "50%", "maxUnavailablePerSwitch": 3}));
    for kind in ["SmartNicConfiguration", "SwitchPortConfiguration"] {
        let refused = review(&tenancy(), kind, "tenant-a", &over, &look);
        assert_eq!(refused.len(), 2, "{kind}: {refused:?}");
        assert!(
            refused[0].starts_with("spec.rollout.maxUnavailable: ") && refused[0].contains("(10%)"),
            "{kind}: {}",
            refused[0]
        );
        assert!(
            refused[1].starts_with("spec.rollout.maxUnavailablePerSwitch: "),
            "{kind}: {}",
            refused[1]
        );
        // The infra namespace is not reviewed (a malformed policy of its own is
        // refused by the rollout controller: phase Refused); within limits, admitted.
        let malformed = object(json!({"maxUnavailable": "ten"}));
        assert_eq!(
            review(&tenancy(), kind, "infra", &malformed, &look).len(),
            0
        );
        let within = object(json!({"maxUnavailable": "5%"}));
        assert!(review(&tenancy(), kind, "tenant-a", &within, &look).is_empty());
    }
}

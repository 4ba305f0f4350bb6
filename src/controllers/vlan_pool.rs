//! VLANPools: each pool's `Ready` condition (what it grants less than it says, and
//! why: see [`crate::decide::tenancy::Grants::problems`]) for the infra team, and for each
//! namespace a pool serves, a ConfigMap `patchbay-grants` in that namespace saying
//! which VLANs it is granted — what a tenant reads instead of the pools, which name
//! every tenant's namespace. Kubernetes I/O (status patches, server-side apply);
//! recomputed whole after any pool change, written only where it changed.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::Store;
use kube::{Client, ResourceExt};
use serde_json::json;

use crate::api::VLANPool;
use crate::api::common::ConditionsStatus;
use crate::api::keys::{GRANTS_CONFIGMAP, MANAGER};
use crate::decide::bgp::BgpGrants;
use crate::decide::status::{Truth, set_condition};
use crate::decide::tenancy::{Grants, Tenancy};

/// What was written last, so that an unchanged pool writes nothing.
#[derive(Default)]
pub struct Written {
    summaries: BTreeMap<String, BTreeMap<String, String>>,
}

/// One namespace's summary: `vlans` (every VLAN it may carry, as a range), `shared`
/// (those of shared pools, with their names), `lagGroups` (the link-aggregation
/// groups it may use), and for BGP `asns` and `prefixes`.
pub fn summary(
    grants: &Grants,
    bgp: &BgpGrants,
    pools: &[VLANPool],
    namespace: &str,
) -> BTreeMap<String, String> {
    let vlans = grants.granted_to(namespace);
    let shared: Vec<String> = pools
        .iter()
        .filter(|p| p.spec.shared && p.spec.namespaces.iter().any(|n| n == namespace))
        .filter(|p| grants.problems(&p.name_any()).is_empty())
        .map(|p| {
            format!(
                "{} ({})",
                p.spec.vlans.replace(' ', ""),
                p.spec.vlan_name.clone().unwrap_or_default()
            )
        })
        .collect();
    let b = bgp.of(namespace);
    let asns: Vec<String> = b
        .asns
        .iter()
        .map(|(a, z)| {
            if a == z {
                a.to_string()
            } else {
                format!("{a}-{z}")
            }
        })
        .collect();
    let prefixes: Vec<String> = b.prefixes.iter().map(ToString::to_string).collect();
    BTreeMap::from([
        ("vlans".to_owned(), vlans.to_range_string()),
        ("shared".to_owned(), shared.join(", ")),
        (
            "lagGroups".to_owned(),
            grants.groups_granted_to(namespace).to_range_string(),
        ),
        ("asns".to_owned(), asns.join(", ")),
        ("prefixes".to_owned(), prefixes.join(", ")),
    ])
}

/// Writes every pool's condition and every served namespace's summary that
/// changed. A namespace no pool serves any more gets an empty summary.
pub async fn sync(
    client: &Client,
    tenancy: &Tenancy,
    pools: &Store<VLANPool>,
    written: &mut Written,
) -> Result<(), kube::Error> {
    let all: Vec<VLANPool> = pools.state().iter().map(|p| (**p).clone()).collect();
    let grants = Grants::new(&all, Some(tenancy.parking_vlan));
    let bgp = BgpGrants::new(&all);
    let api: Api<VLANPool> = Api::all(client.clone());
    let now = jiff::Timestamp::now();
    for pool in &all {
        let problems: Vec<String> = grants
            .problems(&pool.name_any())
            .iter()
            .chain(bgp.problems(&pool.name_any()))
            .cloned()
            .collect();
        let old = pool.status.clone().unwrap_or_default();
        let mut new = ConditionsStatus {
            observed_generation: pool.metadata.generation,
            ..old.clone()
        };
        let (truth, reason, message) = if problems.is_empty() {
            (
                Truth::True,
                "Granted",
                "every VLAN of the pool is granted as it says".to_owned(),
            )
        } else {
            (Truth::False, "GrantsLess", problems.join("; "))
        };
        set_condition(
            &mut new.conditions,
            "Ready",
            truth,
            reason,
            message,
            pool.metadata.generation,
            now,
        );
        super::write_status(&api, &pool.name_any(), &old, &new).await?;
    }
    let served: BTreeSet<String> = all
        .iter()
        .flat_map(|p| p.spec.namespaces.iter().cloned())
        .filter(|n| !tenancy.is_infra(n))
        .chain(written.summaries.keys().cloned())
        .collect();
    for ns in served {
        let data = summary(&grants, &bgp, &all, &ns);
        if written.summaries.get(&ns) == Some(&data) {
            continue;
        }
        let cm = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": GRANTS_CONFIGMAP, "namespace": ns,
                         "labels": {"app.kubernetes.io/managed-by": "patchbay"}},
            "data": data,
        });
        match Api::<ConfigMap>::namespaced(client.clone(), &ns)
            .patch(
                GRANTS_CONFIGMAP,
                &PatchParams::apply(MANAGER).force(),
                &Patch::Apply(cm),
            )
            .await
        {
            Ok(_) => {}
            // The namespace is gone (or not made yet): nothing to tell it.
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(e),
        }
        written.summaries.insert(ns, data);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_namespace_reads_its_own_grants_and_nobody_else_s() {
        let pools: Vec<VLANPool> = serde_json::from_value(json!([
            {"metadata": {"name": "a"}, "spec": {"vlans": "200-209, 220", "namespaces": ["tenant-a"],
                                                 "lagGroups": "1-4, 9",
                                                 "asns": "65100-65109", "prefixes": ["192.0.2.0/26"]}},
            {"metadata": {"name": "b"}, "spec": {"vlans": "300-309", "namespaces": ["tenant-b"],
                                                 "lagGroups": "5",
                                                 "asns": "65300", "prefixes": ["198.51.100.0/24"]}},
            {"metadata": {"name": "svc"}, "spec": {"vlans": "42", "namespaces": ["tenant-a", "tenant-b"],
                                                   "shared": true, "vlanName": "services"}},
        ]))
        .unwrap();
        let grants = Grants::new(&pools, None);
        let bgp = BgpGrants::new(&pools);
        let a = summary(&grants, &bgp, &pools, "tenant-a");
        assert_eq!(a["vlans"], "42,200-209,220");
        assert_eq!(a["shared"], "42 (services)");
        assert_eq!(a["lagGroups"], "1-4,9");
        assert_eq!(summary(&grants, &bgp, &pools, "tenant-b")["lagGroups"], "5");
        assert_eq!(a["asns"], "65100-65109");
        assert_eq!(a["prefixes"], "192.0.2.0/26");
        assert!(
            !a.values()
                .any(|v| v.contains("300") || v.contains("tenant-b") || v.contains("198.51"))
        );
        let c = summary(&grants, &bgp, &pools, "tenant-c");
        assert_eq!((c["vlans"].as_str(), c["lagGroups"].as_str()), ("", ""));
    }
}

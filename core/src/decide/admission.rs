//! Admission: what the validating webhook answers for one object a tenant (or the
//! infra team) writes, so that a refusal shows at `kubectl apply`, naming the field
//! and the grant that is missing. Pure: the caller hands in the object and lookups
//! into its caches; [`crate::decide::tenancy`] makes every decision, the same ones the
//! controllers make again before any device change. The review is kube-core's typed
//! `AdmissionReview` (its `admission` feature); the operator's HTTP server
//! (`patchbay::serve`) carries it over HTTPS.
//!
//! What is checked, by kind (objects of the infra namespace are not checked, except
//! VLANPools, which are cluster-scoped):
//! - SwitchPortConfiguration, SmartNicConfiguration: every VLAN is granted to the
//!   object's namespace (on some Switch: the port is not known yet);
//!   `nextConfigurationRef` stays in the namespace or names a shared infra one;
//!   `spec.rollout` is well formed and asks for no more than the infra team's
//!   limits on a tenant's whatever the number of ports
//!   ([`crate::decide::rollout::admission_refusals`]).
//! - ServerClaim: every `configurationRef` stays in the namespace or names a shared
//!   infra configuration, and the VLANs of the configurations it names are granted;
//!   `inventory.includeBmcCredentials` only where the settings allow it.
//! - SwitchPort, SmartNicPort: `spec.configuration` stays in the namespace or names
//!   a shared infra configuration.
//! - VLANPool: a pool that would grant nothing it says (two namespaces on one VLAN
//!   without `shared`, a shared pool without a name, the parking VLAN, an overlap
//!   with another tenant's pool) is refused.

use kube::core::admission::{AdmissionRequest, AdmissionResponse, Operation};
use kube::core::{DynamicObject, Status};
use serde_json::Value;

use crate::api::{SmartNicConfiguration, SwitchPortConfiguration, VLANPool};
use crate::decide::tenancy::{Carrying, Grants, Reference, Settings, Tenancy, is_shared, judge};

/// What the webhook reads besides the object: the caches' contents.
pub struct Lookups<'a> {
    /// The grants of the pools as they are.
    pub grants: &'a Grants,
    /// Every VLANPool as it is (to judge a new or edited one among them).
    pub pools: &'a [VLANPool],
    /// A SwitchPortConfiguration by namespace and name.
    pub switch_port_configuration: &'a dyn Fn(&str, &str) -> Option<SwitchPortConfiguration>,
    /// A SmartNicConfiguration by namespace and name.
    pub smartnic_configuration: &'a dyn Fn(&str, &str) -> Option<SmartNicConfiguration>,
    /// The operator's rollout defaults and the infra team's limits on a tenant's.
    pub rollout: &'a crate::decide::rollout::Defaults,
}

/// The refusals for `object` of `kind` in `namespace` (empty: admitted). Objects
/// that do not parse are left to the API server's schema validation.
pub fn review(
    t: &Tenancy,
    kind: &str,
    namespace: &str,
    object: &Value,
    look: &Lookups<'_>,
) -> Vec<String> {
    if kind == "VLANPool" {
        return review_pool(t, object, look);
    }
    if t.is_infra(namespace) {
        return Vec::new();
    }
    let mut refused = Vec::new();
    let vlans_granted = |port: &crate::api::configuration::PortSettingsSpec,
                         group: Option<i64>,
                         what: &str,
                         refused: &mut Vec<String>| {
        let verdict = judge(
            Some(t),
            look.grants,
            &Carrying {
                tenant: namespace,
                switch: None,
                reference: None,
                settings: Some(Settings {
                    port,
                    group,
                    what: what.to_owned(),
                }),
            },
        );
        refused.extend(verdict.refused.unwrap_or_default());
    };
    let shared_of = |kind: &str, ns: &str, name: &str| match kind {
        "SmartNicConfiguration" => (look.smartnic_configuration)(ns, name)
            .is_some_and(|c| is_shared(c.metadata.labels.as_ref())),
        _ => (look.switch_port_configuration)(ns, name)
            .is_some_and(|c| is_shared(c.metadata.labels.as_ref())),
    };
    let reference = |field: &str, kind: &str, r: &Value, refused: &mut Vec<String>| {
        let name = r.get("name").and_then(Value::as_str)?;
        let ns = r
            .get("namespace")
            .and_then(Value::as_str)
            .unwrap_or(namespace);
        let shared = t.is_infra(ns) && shared_of(kind, ns, name);
        let verdict = judge(
            Some(t),
            look.grants,
            &Carrying {
                tenant: namespace,
                switch: None,
                reference: Some(Reference {
                    namespace: ns,
                    shared,
                    field: format!("{field}.namespace"),
                }),
                settings: None,
            },
        );
        match verdict.refused {
            None => Some((ns.to_owned(), name.to_owned())),
            Some(e) => {
                refused.extend(e);
                None
            }
        }
    };
    // A configuration's rollout policy, held to the infra team's limits.
    let policy_refused = |policy: Option<&crate::api::RolloutSpec>, refused: &mut Vec<String>| {
        refused.extend(
            crate::decide::rollout::admission_refusals(policy, look.rollout, true)
                .into_iter()
                .map(|(field, why)| format!("{field}: {why}")),
        );
    };
    match kind {
        "SwitchPortConfiguration" => {
            if let Ok(c) = serde_json::from_value::<SwitchPortConfiguration>(object.clone()) {
                let group = c.spec.link_aggregation.as_ref().map(|l| l.group);
                vlans_granted(&c.spec.port, group, "", &mut refused);
                policy_refused(c.spec.rollout.as_ref(), &mut refused);
            }
        }
        "SmartNicConfiguration" => {
            if let Ok(c) = serde_json::from_value::<SmartNicConfiguration>(object.clone()) {
                vlans_granted(&c.spec.port, None, "", &mut refused);
                policy_refused(c.spec.rollout.as_ref(), &mut refused);
            }
            if let Some(r) = object.pointer("/spec/nextConfigurationRef") {
                reference(
                    "spec.nextConfigurationRef",
                    "SwitchPortConfiguration",
                    r,
                    &mut refused,
                );
            }
        }
        "SwitchPort" | "SmartNicPort" => {
            let kind = if kind == "SwitchPort" {
                "SwitchPortConfiguration"
            } else {
                "SmartNicConfiguration"
            };
            if let Some(r) = object.pointer("/spec/configuration") {
                reference("spec.configuration", kind, r, &mut refused);
            }
        }
        "ServerClaim" => review_claim(t, object, look, &mut refused, &reference, &vlans_granted),
        _ => {}
    }
    refused
}

type CheckReference<'a> =
    dyn Fn(&str, &str, &Value, &mut Vec<String>) -> Option<(String, String)> + 'a;
type VlansGranted<'a> =
    dyn Fn(&crate::api::configuration::PortSettingsSpec, Option<i64>, &str, &mut Vec<String>) + 'a;

fn review_claim(
    t: &Tenancy,
    object: &Value,
    look: &Lookups<'_>,
    refused: &mut Vec<String>,
    reference: &CheckReference<'_>,
    vlans_granted: &VlansGranted<'_>,
) {
    let mut entries: Vec<(String, &Value)> = Vec::new();
    let list = |v: Option<&Value>| v.and_then(Value::as_array).cloned().unwrap_or_default();
    for i in 0..list(object.pointer("/spec/networkConfiguration")).len() {
        if let Some(r) = object.pointer(&format!("/spec/networkConfiguration/{i}/configurationRef"))
        {
            entries.push((
                format!("spec.networkConfiguration[{i}].configurationRef"),
                r,
            ));
        }
    }
    for (j, role) in list(object.pointer("/spec/roles")).iter().enumerate() {
        for k in 0..list(role.get("networkConfiguration")).len() {
            if let Some(r) = object.pointer(&format!(
                "/spec/roles/{j}/networkConfiguration/{k}/configurationRef"
            )) {
                entries.push((
                    format!("spec.roles[{j}].networkConfiguration[{k}].configurationRef"),
                    r,
                ));
            }
        }
    }
    // BGP: the checks that need nothing but the claim (the grants, the ToRs' own
    // addresses and other claims' prefixes are checked by the claim controller).
    for (j, role) in list(object.pointer("/spec/roles")).iter().enumerate() {
        let Some(b) = role.get("bgp") else { continue };
        match serde_json::from_value::<crate::api::RoleBgp>(b.clone()) {
            Ok(b) => refused.extend(
                crate::decide::bgp::role_fields(&format!("spec.roles[{j}].bgp"), &b)
                    .into_iter()
                    .map(|(f, why)| format!("{f}: {why}")),
            ),
            Err(e) => refused.push(format!("spec.roles[{j}].bgp: {e}")),
        }
    }
    for (field, r) in entries {
        let kind = r
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or("SwitchPortConfiguration");
        let Some((ns, name)) = reference(&field, kind, r, refused) else {
            continue;
        };
        let what = format!("{field} ({kind} {ns}/{name})");
        match kind {
            "SmartNicConfiguration" => {
                if let Some(c) = (look.smartnic_configuration)(&ns, &name) {
                    vlans_granted(&c.spec.port, None, &what, refused);
                }
            }
            _ => {
                if let Some(c) = (look.switch_port_configuration)(&ns, &name) {
                    let group = c.spec.link_aggregation.as_ref().map(|l| l.group);
                    vlans_granted(&c.spec.port, group, &what, refused);
                }
            }
        }
    }
    if object
        .pointer("/spec/inventory/includeBmcCredentials")
        .and_then(Value::as_bool)
        == Some(true)
        && !t.allow_bmc_credentials
    {
        refused.push(
            "spec.inventory.includeBmcCredentials: BMC credentials stay with the infra team \
             (a Server's next holder would share power control with this claim); the operator \
             is run without --allow-bmc-credentials=true"
                .into(),
        );
    }
}

fn review_pool(t: &Tenancy, object: &Value, look: &Lookups<'_>) -> Vec<String> {
    let Ok(pool) = serde_json::from_value::<VLANPool>(object.clone()) else {
        return Vec::new();
    };
    let name = pool.metadata.name.clone().unwrap_or_default();
    let mut all: Vec<VLANPool> = look
        .pools
        .iter()
        .filter(|p| p.metadata.name.as_deref() != Some(name.as_str()))
        .cloned()
        .collect();
    all.push(pool);
    let grants = Grants::new(&all, Some(t.parking_vlan));
    grants.problems(&name).to_vec()
}

/// The answer to one admission request (kube-core's typed AdmissionReview): allowed,
/// or denied with a 403 whose message joins every refusal. Only creations and
/// updates are judged; `refusals` gets the object's kind, namespace and JSON.
pub fn answer(
    request: &AdmissionRequest<DynamicObject>,
    refusals: impl Fn(&str, &str, &Value) -> Vec<String>,
) -> AdmissionResponse {
    let response = AdmissionResponse::from(request);
    let refused = match (&request.operation, &request.object) {
        (Operation::Create | Operation::Update, Some(object)) => {
            let object = serde_json::to_value(object).unwrap_or_default();
            refusals(
                &request.kind.kind,
                request.namespace.as_deref().unwrap_or_default(),
                &object,
            )
        }
        _ => Vec::new(),
    };
    if refused.is_empty() {
        return response;
    }
    let mut response = response.deny(refused.join("; "));
    response.result = Status::failure(&refused.join("; "), "Forbidden").with_code(403);
    response
}

#[cfg(test)]
mod tests;

//! Metal3 BareMetalSwitches (with `--metal3-switches`): each becomes the
//! ProviderSwitch patchbay derives from it ([`crate::decide::metal3_switch`]) —
//! written with server-side apply, owned by the BareMetalSwitch, labelled
//! [`DERIVED_LABEL`] — and its `Valid` condition says whether it was taken in and,
//! once it was, what the ProviderSwitch's check found (its Secret, its settings)
//! and what the Switches declaring its ports found on the device (a refused login,
//! a host key that does not match, no answer).
//! The ports stay the infra team's: a patchbay Switch naming the BareMetalSwitch as
//! its provider declares them. Kubernetes I/O.
//!
//! A BareMetalSwitch refused (its device type, its Secret's namespace, another
//! writer on its device) gets no ProviderSwitch; one edited into a refusal keeps
//! the one derived before, and its ports what they carry, while `Valid` says why.

use std::sync::Arc;
use std::time::Duration;

use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use serde_json::json;

use super::ControllerError;
use super::context::{Context, api_for};
use crate::api::metal3_switch::{BareMetalSwitch, BareMetalSwitchStatus};
use crate::decide::conditions::{find_condition, set_condition};
use crate::decide::metal3_switch::{DERIVED_LABEL, Existing, Reached, derive, valid};
use crate::decide::status::status_merge_patch;

/// The field manager of the derived ProviderSwitches.
const MANAGER: &str = "patchbay-metal3-switches";

/// The ProviderSwitches `providers` as the one-writer check reads them.
fn existing(providers: &[Arc<crate::api::ProviderSwitch>]) -> Vec<Existing<'_>> {
    providers
        .iter()
        .map(|p| Existing {
            namespace: p.metadata.namespace.as_deref().unwrap_or_default(),
            name: p.metadata.name.as_deref().unwrap_or_default(),
            address: &p.spec.address,
            port: p.spec.port_or_default(),
            derived_from: p.labels().get(DERIVED_LABEL).map(String::as_str),
        })
        .collect()
}

/// Reconciles one BareMetalSwitch.
pub(super) async fn reconcile(
    bms: Arc<BareMetalSwitch>,
    ctx: Arc<Context>,
) -> Result<Action, ControllerError> {
    let ns = bms.namespace().unwrap_or_default();
    let name = bms.name_any();
    let providers = ctx.stores.providers.state();
    let mut derived = derive(&bms, &existing(&providers));
    // The ProviderSwitch derived from it before, as the cache holds it.
    let mine = providers.iter().find(|p| {
        p.namespace().as_deref() == Some(ns.as_str())
            && p.name_any() == name
            && p.labels().get(DERIVED_LABEL) == Some(&name)
    });
    // A new device for this BareMetalSwitch (none derived yet, or another address or
    // port): the cache may not hold a ProviderSwitch written a moment ago for the
    // same device, so the one-writer check is made again on a fresh list. Reconciles
    // run one at a time (see the wiring), so no two BareMetalSwitches pass it
    // together.
    if let Ok(spec) = &derived {
        let same_device = mine.is_some_and(|p| {
            p.spec.address == spec.address && p.spec.port_or_default() == spec.port_or_default()
        });
        if !same_device {
            let all: Api<crate::api::ProviderSwitch> =
                api_for(&ctx.client, ctx.settings.namespace.as_deref());
            let fresh = all.list(&ListParams::default()).await?;
            let fresh: Vec<Arc<crate::api::ProviderSwitch>> =
                fresh.items.into_iter().map(Arc::new).collect();
            derived = derive(&bms, &existing(&fresh));
        }
    }
    if let Ok(spec) = &derived {
        apply_derived::<crate::api::ProviderSwitch, _>(
            &ctx.client,
            bms.as_ref(),
            (MANAGER, DERIVED_LABEL),
            serde_json::to_value(spec).unwrap_or_default(),
        )
        .await?;
    }
    // What the derived ProviderSwitch's own check found (from the cache: its status
    // change wakes this BareMetalSwitch, which owns it).
    let ready = mine.and_then(|p| {
        let status = p.status.as_ref()?;
        let c = find_condition(&status.conditions, "Ready")?;
        Some((c.status == "True", c.reason.clone(), c.message.clone()))
    });
    // What the Switches declaring ports on it found on the device (their status
    // changes wake this BareMetalSwitch: see the wiring).
    let switches = ctx.stores.switches.state();
    let reached: Vec<Reached<'_>> = switches
        .iter()
        .filter(|s| s.namespace().as_deref() == Some(ns.as_str()) && s.spec.provider.name == name)
        .filter_map(|s| {
            let c = find_condition(&s.status.as_ref()?.conditions, "Ready")?;
            Some(Reached {
                switch: s.metadata.name.as_deref().unwrap_or_default(),
                status: &c.status,
                reason: &c.reason,
                message: &c.message,
            })
        })
        .collect();
    let (ok, reason, message) = valid(
        &derived,
        ready.as_ref().map(|(t, r, m)| (*t, r.as_str(), m.as_str())),
        &reached,
    );
    let old = bms.status.clone();
    let mut status: BareMetalSwitchStatus = old.clone();
    set_condition(
        &mut status.conditions,
        "Valid",
        ok,
        &reason,
        message,
        bms.metadata.generation,
        jiff::Timestamp::now(),
    );
    if status != old {
        let bmss: Api<BareMetalSwitch> = Api::namespaced(ctx.client.clone(), &ns);
        bmss.patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(status_merge_patch(&old, &status)),
        )
        .await?;
    }
    Ok(Action::requeue(Duration::from_secs(300)))
}

/// Applies (server-side, as `manager`) the patchbay object of kind `K` that
/// patchbay derives from the Metal3 object `owner`: the same name and namespace,
/// labelled `label` with the owner's name, owned by it (so deleting the owner
/// deletes it), carrying `spec`. Used for BareMetalSwitches' ProviderSwitches and
/// HostNetworkAttachments' SwitchPortConfigurations.
pub(super) async fn apply_derived<K, O>(
    client: &kube::Client,
    owner: &O,
    (manager, label): (&str, &str),
    spec: serde_json::Value,
) -> Result<(), ControllerError>
where
    K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
    O: kube::Resource<DynamicType = ()>,
{
    let (ns, name) = (owner.namespace().unwrap_or_default(), owner.name_any());
    let body = json!({
        "apiVersion": K::api_version(&()), "kind": K::kind(&()),
        "metadata": {"name": name, "namespace": ns,
                     "labels": {label: name},
                     "ownerReferences": [{
                         "apiVersion": O::api_version(&()), "kind": O::kind(&()),
                         "name": name, "uid": owner.uid().unwrap_or_default(),
                         "controller": true, "blockOwnerDeletion": true}]},
        "spec": spec,
    });
    Api::<K>::namespaced(client.clone(), &ns)
        .patch(
            &name,
            &PatchParams::apply(manager).force(),
            &Patch::Apply(body),
        )
        .await?;
    Ok(())
}

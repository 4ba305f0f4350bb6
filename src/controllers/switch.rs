//! The Switch controller: checks the Switch, its ProviderSwitch and credentials,
//! starts the switch's worker and shows whether the device answers as the worker last
//! found (`DeviceReachable`, one Warning when it stops answering, one Normal when it
//! answers again); keeps exactly one SwitchPort per `spec.ports` entry (owned,
//! labelled, adopted when created ahead); on deletion, withdraws its hosts' BGP
//! neighbours (best effort), deletes its ports (each cleaned on the device first)
//! and goes when none is left; reads the Switch's
//! neighbour source when one is named and a read is due ([`super::neighbors`]); keeps
//! its BGP speaker's host neighbours when `spec.bgp` is set ([`super::bgp`]).
//! Kubernetes I/O; no device I/O of its own (the worker probes; the neighbour
//! source is read by [`super::neighbors`]).

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::finalizer::{Event as FinalizerEvent, finalizer};
use kube::runtime::reflector::ObjectRef;
use serde_json::json;

use super::context::{Context, device_key, switch_device_ports};
use super::{ControllerError, write_status_at};
use crate::api::keys::{FINALIZER, SWITCH_LABEL};
use crate::api::{Switch, SwitchPort, SwitchPortSpec};
use crate::backends::check_credentials;
use crate::decide::failure::Failure;
use crate::decide::reachability::Reachability;
use crate::decide::status::{Severity, find_condition, reachability_event, switch_status};
use crate::decide::validate::{port_device_role, validate_provider, validate_switch};
use patchbay_providers::values::PortName;

/// The Switches whose spec passed [`validate_switch`], uid → (generation, its
/// device ports): a reconcile of a generation already checked (most are the
/// periodic neighbour or speaker reads) neither checks nor parses every port again.
/// Measured with BGP on 200 Switches × 50 ports: the check was the largest part of
/// an idle Switch reconcile.
#[derive(Default)]
pub struct CheckedSpecs(parking_lot::Mutex<std::collections::HashMap<String, Checked>>);

/// A generation of a Switch that passed, and its device ports.
type Checked = (i64, Arc<[PortName]>);

impl CheckedSpecs {
    /// [`validate_switch`] of `switch`'s spec and its device ports, the check
    /// skipped when this generation passed (an object without a uid or generation
    /// is checked every time).
    fn check(&self, switch: &Switch) -> Result<Arc<[PortName]>, Failure> {
        let key = switch.uid().zip(switch.metadata.generation);
        if let Some((uid, generation)) = &key
            && let Some((g, ports)) = self.0.lock().get(uid)
            && g == generation
        {
            return Ok(ports.clone());
        }
        validate_switch(&switch.spec).map_err(Failure::InvalidSwitch)?;
        let ports: Arc<[PortName]> = switch_device_ports(switch).into();
        if let Some((uid, generation)) = key {
            self.0.lock().insert(uid, (generation, ports.clone()));
        }
        Ok(ports)
    }

    /// Forgets `switch` (it is gone).
    fn forget(&self, switch: &Switch) {
        crate::decide::slack::remove(&mut self.0.lock(), &switch.uid().unwrap_or_default());
    }
}

/// What the Switch controller keeps between reconciles, its own: the specs that
/// checked out, when each neighbour source was read, each BGP speaker's failures
/// and what it had in place. Forgotten with the Switch.
#[derive(Default)]
pub struct SwitchState {
    /// The Switch generations whose spec checked out.
    checked: CheckedSpecs,
    /// When each Switch's neighbour source was last read.
    neighbor_reads: super::neighbors::ReadTimes,
    /// Each Switch's BGP speaker.
    speakers: super::bgp::Speakers,
}

impl SwitchState {
    fn forget(&self, switch: &Switch) {
        self.checked.forget(switch);
        self.neighbor_reads.forget(switch);
        self.speakers.forget(switch);
    }
}

/// The Switch controller's context: the shared one, and its own state.
pub struct SwitchContext {
    /// What every controller shares.
    pub shared: Arc<Context>,
    /// The Switch controller's own.
    pub own: SwitchState,
}

/// Reconciles one Switch.
pub(super) async fn reconcile(
    switch: Arc<Switch>,
    sc: Arc<SwitchContext>,
) -> Result<Action, ControllerError> {
    let (ctx, own) = (&sc.shared, &sc.own);
    let ns = switch.namespace().unwrap_or_default();
    let api: Api<Switch> = Api::namespaced(ctx.client.clone(), &ns);
    finalizer(&api, FINALIZER, switch, |event| async {
        match event {
            FinalizerEvent::Apply(s) => apply_switch(&s, ctx, own).await,
            FinalizerEvent::Cleanup(s) => cleanup_switch(&s, ctx, own).await,
        }
    })
    .await
    .map_err(|e| ControllerError::Finalizer(Box::new(e)))
}

/// Whether the Switch can be used and what its worker found.
async fn check(
    switch: &Switch,
    ctx: &Context,
    checked: &CheckedSpecs,
) -> Result<Reachability, Failure> {
    let device_ports = checked.check(switch)?;
    let ns = switch.namespace().unwrap_or_default();
    let provider = ctx
        .stores
        .provider(&ns, &switch.spec.provider.name)
        .ok_or_else(|| Failure::ProviderNotFound {
            name: switch.spec.provider.name.clone(),
            field: "spec.provider",
        })?;
    port_device_role(&provider.spec).map_err(|why| Failure::ProviderRole {
        field: "spec.provider",
        name: provider.name_any(),
        why,
    })?;
    validate_provider(&provider.spec).map_err(|errors| Failure::InvalidProvider {
        name: provider.name_any(),
        errors,
    })?;
    let secret = ctx
        .secrets
        .of_provider(&ctx.client, &provider)
        .await
        .map_err(super::kube_failure)?;
    check_credentials(&provider, secret.as_deref())?;
    let entry = ctx.ensure_worker(&provider, secret.as_deref(), &device_ports)?;
    Ok(entry.worker.reachability())
}

async fn apply_switch(
    switch: &Switch,
    ctx: &Context,
    own: &SwitchState,
) -> Result<Action, ControllerError> {
    let ns = switch.namespace().unwrap_or_default();
    let name = switch.name_any();
    let old = switch.status.clone().unwrap_or_default();
    let mut status = old.clone();
    let verdict = check(switch, ctx, &own.checked).await;
    let was_reachable =
        find_condition(&old.conditions, "DeviceReachable").map(|c| c.status.clone());
    switch_status(
        &mut status,
        &verdict,
        switch.spec.ports.len(),
        switch.metadata.generation,
        jiff::Timestamp::now(),
    );
    if let Some(e) = reachability_event(was_reachable.as_deref(), &status, &verdict) {
        ctx.events
            .publish(switch, e.severity, e.reason, &e.note)
            .await;
    }
    ensure_ports(switch, ctx).await?;
    let next_read = super::neighbors::refresh(switch, &mut status, ctx, &own.neighbor_reads).await;
    let next_bgp = if verdict.is_ok() {
        super::bgp::sync(switch, &mut status, ctx, &own.speakers).await
    } else {
        None
    };
    // Guarded by the resourceVersion read: a reconcile that ran on a cache behind
    // this controller's own last write would otherwise write its conditions over
    // that write's (a merge patch replaces the whole list). A 409 is tried again
    // after the short conflict backoff (50 ms first), from a cache that holds it.
    write_status_at(
        &Api::<Switch>::namespaced(ctx.client.clone(), &ns),
        &name,
        switch.resource_version(),
        &old,
        &status,
    )
    .await?;
    // The worker tells this controller when reachability changes; a Switch that
    // cannot be used is looked at again after the backoff base.
    let again = match verdict {
        Ok(_) => ctx.settings.drift_interval,
        Err(_) => ctx.settings.backoff.base,
    };
    let next = [next_read, next_bgp]
        .into_iter()
        .flatten()
        .fold(again, Duration::min);
    Ok(Action::requeue(next))
}

/// Keeps one SwitchPort per `spec.ports` entry. The Switch's ports come from the port
/// index, not a scan of the cache; a port missing there is created (one request;
/// a 409 means it exists: read it and adopt it unless another controller owns it)
/// and recorded in the index at once, so a reconcile that runs before the create's
/// watch event does not create or read it again.
async fn ensure_ports(switch: &Switch, ctx: &Context) -> Result<(), ControllerError> {
    let ns = switch.namespace().unwrap_or_default();
    let name = switch.name_any();
    let api: Api<SwitchPort> = Api::namespaced(ctx.client.clone(), &ns);
    let owner = OwnerReference {
        api_version: "patchbay.dev/v1alpha1".into(),
        kind: "Switch".into(),
        name: name.clone(),
        uid: switch.uid().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    };
    let known: std::collections::BTreeSet<Arc<str>> = ctx
        .port_index
        .read()
        .of_switch(&ns, &name)
        .into_iter()
        .collect();
    for key in switch.spec.ports.keys() {
        if known.contains(key.as_str()) {
            continue;
        }
        let port = SwitchPort {
            metadata: ObjectMeta {
                name: Some(key.clone()),
                namespace: Some(ns.clone()),
                labels: Some([(SWITCH_LABEL.to_string(), name.clone())].into()),
                owner_references: Some(vec![owner.clone()]),
                ..Default::default()
            },
            spec: SwitchPortSpec::default(),
            status: None,
        };
        match api.create(&PostParams::default(), &port).await {
            Ok(_) => {
                ctx.port_index.write().apply(&ns, key, Some(&name));
                continue;
            }
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
        // Created ahead of time by a user: adopt it, unless another controller owns
        // it. (Gone again since the 409: the next reconcile creates it.)
        let Some(p) = api.get_opt(key).await? else {
            continue;
        };
        let foreign = p
            .owner_references()
            .iter()
            .any(|o| o.controller == Some(true) && o.uid != owner.uid);
        let owned = p.owner_references().iter().any(|o| o.uid == owner.uid);
        let labelled = p.labels().get(SWITCH_LABEL) == Some(&name);
        if !(foreign || owned && labelled) {
            let mut refs = p.owner_references().to_vec();
            if !owned {
                refs.push(owner.clone());
            }
            api.patch(
                key,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {
                    "labels": {SWITCH_LABEL: name},
                    "ownerReferences": refs,
                }})),
            )
            .await?;
            ctx.port_index.write().apply(&ns, key, Some(&name));
        }
    }
    // Labelled for this Switch but not in its spec: deleted (as the cache shows it,
    // still labelled for this Switch; a port only this process's create recorded is
    // one of the spec's).
    for port in known {
        if switch.spec.ports.contains_key(&*port) {
            continue;
        }
        let Some(p) = ctx.ports.get(&ObjectRef::new(&port).within(&ns)) else {
            continue;
        };
        if super::switch_port::switch_name(&p, &ctx.port_index).as_deref() == Some(name.as_str())
            && p.metadata.deletion_timestamp.is_none()
        {
            api.delete(&port, &DeleteParams::default()).await?;
        }
    }
    Ok(())
}

async fn cleanup_switch(
    switch: &Switch,
    ctx: &Context,
    own: &SwitchState,
) -> Result<Action, ControllerError> {
    let ns = switch.namespace().unwrap_or_default();
    let name = switch.name_any();
    // Its hosts' BGP neighbours go before the ports leave their networks.
    super::bgp::withdraw(switch, ctx).await;
    let api: Api<SwitchPort> = Api::namespaced(ctx.client.clone(), &ns);
    let ours: Vec<SwitchPort> = api
        .list(&ListParams::default().labels(&format!("{SWITCH_LABEL}={name}")))
        .await?
        .items;
    for p in &ours {
        if p.metadata.deletion_timestamp.is_none() {
            api.delete(&p.name_any(), &DeleteParams::default()).await?;
        }
    }
    if !ours.is_empty() {
        return Err(ControllerError::PortsRemaining(ours.len()));
    }
    if let Some(provider) = ctx.stores.provider(&ns, &switch.spec.provider.name) {
        ctx.quiet_worker_if_unused(&device_key(&provider));
    }
    ctx.events.forget(&switch.uid().unwrap_or_default());
    own.forget(switch);
    ctx.events
        .publish(
            switch,
            Severity::Normal,
            "Deleted",
            "every port was cleaned and deleted",
        )
        .await;
    Ok(Action::await_change())
}

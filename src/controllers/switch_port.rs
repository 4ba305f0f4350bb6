//! The SwitchPort controller, in four stages: `dereference` reads what a port
//! refers to (its Switch and port entry, the ProviderSwitch, the credentials Secret,
//! the linked SwitchPortConfiguration) from the caches; `validate` checks it (no
//! I/O); `acquire_device` finds or starts the Switch's worker (`prepare` makes the
//! three one [`PreparedPort`]); the shared state-machine loop
//! ([`super::port_loop`]) drives it with steps that go through that worker.
//! Kubernetes I/O (reads, through the loop's record writes) and device I/O (through
//! the worker).
//!
//! Nothing reaches a device before the configuration has been validated against the
//! port's constraints (`vlanRange`, `trunkDisable`, `disabled`) and the backend's
//! capabilities.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::Api;
use patchbay_providers::values::PortName;
use patchbay_providers::{Capabilities, DesiredPort, Hold};
use serde_json::json;
use tracing::Instrument;

use super::context::{Context, SharedPortIndex, switch_device_ports};
use super::port_loop::{
    DeviceHandle, DriveInput, PortRecord, PortSteps, PreparedPort, Progress, drive_port,
};
use super::port_record::KubeRecord;
use super::{ControllerError, inputs_digest, is_true, requeue_after};
use crate::api::keys::{
    ROLLOUT_ANNOTATION, SKIP_CLEANUP_ANNOTATION, SWITCH_LABEL, SWITCH_ROLLOUT_ANNOTATION,
};
use crate::api::{
    CabledPortKind, ConfigurationRef, ProviderSwitch, Switch, SwitchPort, SwitchPortConfiguration,
    SwitchPortConfigurationSpec, SwitchPortDefinition,
};
use crate::decide::failure::Failure;
use crate::decide::plan::{PortInputs, port_desired};
use crate::decide::port_move::{MoveFacts, Moving, place};
use crate::decide::state_machine::PortTarget;
use crate::decide::status::{Truth, set_condition};
use crate::decide::tenancy::Carried;
use crate::decide::tenancy::{TenancyVerdict, report_forbidden};
use crate::decide::validate::{LagPeer, has_egress_rules, port_device_role, validate_provider};
use crate::worker::PortKey;

/// What a SwitchPort refers to, read once per reconcile.
struct PortWorld {
    switch: Option<Arc<Switch>>,
    definition: Option<SwitchPortDefinition>,
    provider: Option<Arc<ProviderSwitch>>,
    secret: Option<Arc<Secret>>,
    desired: Option<PortTarget>,
    config: Option<SwitchPortConfiguration>,
    device_port: Option<String>,
    /// The cabled Server NIC's MAC, looked up only for egress ACL rules.
    host_mac: Option<String>,
    /// For a link-aggregation member: this port and every SwitchPort carrying a
    /// link-aggregation configuration, as [`lag_members`] checks them.
    lag: Option<(GroupPeer, Vec<GroupPeer>)>,
    /// The tenancy check of the linked configuration.
    tenancy: TenancyVerdict,
    /// See [`inputs_digest`].
    inputs: String,
    /// The rollout wave its change belongs to, if the wave is under way.
    hold: Option<Hold>,
}

/// The Switch a port belongs to: its Switch label (as the object carries it, else as
/// `index` recorded it: a cached port keeps no labels), else its owner.
pub(super) fn switch_name(port: &SwitchPort, index: &SharedPortIndex) -> Option<String> {
    port.labels()
        .get(SWITCH_LABEL)
        .cloned()
        .or_else(|| {
            let ns = port.metadata.namespace.as_deref().unwrap_or_default();
            let name = port.metadata.name.as_deref().unwrap_or_default();
            index.read().switch_of(ns, name).map(|s| s.to_string())
        })
        .or_else(|| {
            port.owner_references()
                .iter()
                .find(|o| o.kind == "Switch")
                .map(|o| o.name.clone())
        })
}

async fn dereference(port: &SwitchPort, ctx: &Context) -> Result<PortWorld, ControllerError> {
    let ns = port.namespace().unwrap_or_default();
    let client = &ctx.client;
    let stores = &ctx.stores;
    let switch = switch_name(port, &ctx.port_index).and_then(|n| stores.switch(&ns, &n));
    // The rollout pins it carries: its configuration's, its Switch's.
    let pin_of = |key: &str| port.annotations().get(key).map(String::as_str);
    let (pin, switch_pin) = (
        pin_of(ROLLOUT_ANNOTATION),
        pin_of(SWITCH_ROLLOUT_ANNOTATION),
    );
    // A port carrying a configuration takes its entry at the revision its Switch's
    // rollout gives it; one carrying nothing, as it stands.
    let definition = match &switch {
        None => None,
        Some(s) if port.spec.configuration.is_none() => s.spec.ports.get(&port.name_any()).cloned(),
        Some(s) => stores
            .switch_entry_carried(s, &port.name_any(), switch_pin)
            .map_err(ControllerError::Waiting)?,
    };
    // The Switch rollout's wave under way is held on the device until its gate.
    let switch_hold = switch.as_ref().and_then(|s| {
        let status = s.status.as_ref().and_then(|s| s.rollout.as_ref());
        let token = crate::decide::rollout::hold_of(switch_pin, status)?;
        let deadline = s
            .spec
            .rollout
            .as_ref()
            .and_then(|r| r.progress_deadline_seconds)
            .unwrap_or(ctx.settings.rollout.progress_deadline_seconds);
        Some(wave_hold(token, deadline))
    });
    let provider = switch
        .as_ref()
        .and_then(|s| stores.provider(&ns, &s.spec.provider.name));
    let secret = match &provider {
        Some(p) => ctx.secrets.of_provider(client, p).await?,
        None => None,
    };
    let mut hold = None;
    let (desired, config) = match &port.spec.configuration {
        None => (None, None),
        Some(r) => {
            let cns = r.namespace.clone().unwrap_or_else(|| ns.clone());
            // The configuration at the revision its rollout gives this port.
            let cfg = stores
                .configuration_carried(&cns, &r.name, pin)
                .map_err(ControllerError::Waiting)?;
            // The wave under way's change is held on the device until its gate.
            hold = cfg.as_ref().and_then(|c| {
                let status = c.status.as_ref().and_then(|s| s.rollout.as_ref());
                let token = crate::decide::rollout::hold_of(pin, status)?;
                // The policy is the live spec's (a revision keeps none).
                let deadline = stores
                    .configuration(&cns, &r.name)
                    .and_then(|live| live.spec.rollout.as_ref()?.progress_deadline_seconds)
                    .unwrap_or(ctx.settings.rollout.progress_deadline_seconds);
                Some(wave_hold(token, deadline))
            });
            let hash = cfg
                .as_ref()
                .map(|c| c.spec.content_hash())
                .unwrap_or_else(|| "missing".into());
            let configuration = ConfigurationRef {
                name: r.name.clone(),
                namespace: Some(cns),
            };
            (
                Some(PortTarget {
                    configuration,
                    hash,
                }),
                cfg,
            )
        }
    };
    // A port in a wave of its configuration's rollout and of its Switch's at once
    // (a rare overlap) is held under the configuration's; a cancelled hold is put
    // right by the re-apply of what each pin then gives.
    let hold = hold.or(switch_hold);
    let device_port = definition
        .as_ref()
        .map(|d| d.name.clone())
        .or_else(|| port.status.as_ref().and_then(|s| s.device_port.clone()));
    let host_mac = match &config {
        Some(c) if has_egress_rules(&c.spec.acl) => {
            ctx.stores
                .cabled_host_mac(CabledPortKind::SwitchPort, &ns, &port.name_any())
        }
        _ => None,
    };
    let lag = match &config {
        Some(c) if c.spec.link_aggregation.is_some() => {
            // Boxed: the peers would otherwise sit in every
            // reconcile's future.
            Some(Box::pin(group_peers(port, ctx, &ns, &c.spec)).await?)
        }
        _ => None,
    };
    let tenancy = match (&config, &desired) {
        (Some(c), Some(d)) => stores.tenancy_verdict(
            ctx.settings.tenancy.as_ref(),
            CabledPortKind::SwitchPort,
            &port.metadata,
            switch.as_ref().map(|s| s.name_any()).as_deref(),
            &Carried {
                kind: "SwitchPortConfiguration",
                reference: &d.configuration,
                labels: c.metadata.labels.as_ref(),
                port: &c.spec.port,
                group: c.spec.link_aggregation.as_ref().map(|l| l.group),
            },
        ),
        _ => TenancyVerdict::default(),
    };
    let digest = inputs_digest(&json!({
        "tenancy": {"refused": tenancy.refused, "names": tenancy.names},
        "spec": port.spec,
        "hostMac": host_mac,
        "configuration": config.as_ref().map(|c| &c.spec),
        "definition": definition,
        "provider": provider.as_ref().map(|p| json!({"uid": p.uid(), "spec": p.spec})),
        "secret": secret.as_ref().map(|s| json!({"uid": s.uid(), "version": s.resource_version()})),
    }));
    // The pins it acts under, readable by the rollouts (whose wave a failure is).
    let inputs = crate::decide::rollout::pinned_attempt(
        digest,
        &[
            (
                pin,
                config
                    .as_ref()
                    .and_then(|c| c.status.as_ref()?.rollout.as_ref()),
            ),
            (
                switch_pin,
                switch
                    .as_ref()
                    .and_then(|s| s.status.as_ref()?.rollout.as_ref()),
            ),
        ],
    );
    Ok(PortWorld {
        switch,
        definition,
        provider,
        secret,
        desired,
        config,
        device_port,
        host_mac,
        lag,
        tenancy,
        inputs,
        hold,
    })
}

/// A rollout wave's hold under `token`, for a rollout whose progress deadline is
/// `deadline` seconds.
fn wave_hold(token: String, deadline: i64) -> Hold {
    Hold {
        token,
        timeout: Duration::from_secs(crate::decide::rollout::hold_timeout(deadline).max(1) as u64),
        follow_up: false,
    }
}

/// A SwitchPort as [`lag_members`] sees it, owned.
struct GroupPeer {
    name: String,
    switch: String,
    device_port: Option<PortName>,
    server: Option<String>,
    spec: SwitchPortConfigurationSpec,
}

impl GroupPeer {
    fn view(&self) -> LagPeer<'_> {
        LagPeer {
            name: &self.name,
            switch: &self.switch,
            device_port: self.device_port.clone(),
            server: self.server.as_deref(),
            spec: &self.spec,
        }
    }
}

/// This port and the SwitchPorts of its namespace whose configuration has link
/// aggregation, from the shared caches (the Servers' for the cabling): what the
/// group check needs. Only for a link-aggregation member.
async fn group_peers(
    port: &SwitchPort,
    ctx: &Context,
    ns: &str,
    spec: &SwitchPortConfigurationSpec,
) -> Result<(GroupPeer, Vec<GroupPeer>), ControllerError> {
    let cabled = ctx.stores.cabled_nics(CabledPortKind::SwitchPort);
    let describe = |q: &SwitchPort, spec: SwitchPortConfigurationSpec| {
        let switch = switch_name(q, &ctx.port_index).unwrap_or_default();
        let device_port = ctx
            .stores
            .switch(ns, &switch)
            .and_then(|s| s.spec.ports.get(&q.name_any()).cloned())
            .and_then(|d| PortName::parse(&d.name).ok());
        GroupPeer {
            name: q.name_any(),
            server: cabled
                .get(&(ns.to_owned(), q.name_any()))
                .map(|(server, _)| server.clone()),
            switch,
            device_port,
            spec,
        }
    };
    let peers = ctx
        .ports
        .state()
        .iter()
        .filter(|q| q.namespace() == ns)
        .filter_map(|q| {
            let (name, in_ns) = q.configuration()?;
            let cfg = ctx.stores.configuration(in_ns.unwrap_or(ns), name)?;
            cfg.spec
                .link_aggregation
                .is_some()
                .then(|| describe(&q.to_port(), cfg.spec))
        })
        .collect();
    Ok((describe(port, spec.clone()), peers))
}

/// A port's Switch and its ProviderSwitch, once validated.
type Provided<'w> = (&'w Switch, &'w ProviderSwitch);

/// Validates what [`dereference`] read: the device port's name, the Switch and its
/// ProviderSwitch (its settings, and that it configures switch ports). Nothing is
/// built or dialled here.
fn validate<'w>(
    port: &SwitchPort,
    world: &'w PortWorld,
) -> (Result<PortName, Failure>, Result<Provided<'w>, Failure>) {
    let device_port = world
        .device_port
        .as_deref()
        .ok_or_else(|| Failure::PortNotDefined {
            port: port.name_any(),
        })
        .and_then(|name| {
            PortName::parse(name).map_err(|error| Failure::InvalidPortName { field: None, error })
        });
    let device = (|| {
        let Some(switch) = &world.switch else {
            return Err(Failure::SwitchNotFound);
        };
        let Some(provider) = &world.provider else {
            return Err(Failure::ProviderNotFound {
                name: switch.spec.provider.name.clone(),
                field: "Switch.spec.provider",
            });
        };
        validate_provider(&provider.spec).map_err(|errors| Failure::InvalidProvider {
            name: provider.name_any(),
            errors,
        })?;
        port_device_role(&provider.spec).map_err(|why| Failure::ProviderRole {
            field: "Switch.spec.provider",
            name: provider.name_any(),
            why,
        })?;
        Ok((switch.as_ref(), provider.as_ref()))
    })();
    (device_port, device)
}

/// Acquires the port's device: finds the switch's worker, or starts it (building
/// the backend from the ProviderSwitch and its Secret), or replaces it when the
/// provider changed.
fn acquire_device(
    ctx: &Context,
    switch: &Switch,
    provider: &ProviderSwitch,
    secret: Option<&Secret>,
    device_port: Option<&PortName>,
) -> Result<DeviceHandle, Failure> {
    let entry = ctx.port_worker(provider, secret, device_port, || {
        switch_device_ports(switch)
    })?;
    Ok(entry.handle())
}

/// A reconcile's inputs made ready for the loop: validated, the device acquired
/// (only for a valid provider), the desired state checked against its capabilities.
fn prepare(ctx: &Context, port: &SwitchPort, world: &PortWorld) -> PreparedPort {
    let (device_port, device) = validate(port, world);
    let device = device.and_then(|(switch, provider)| {
        acquire_device(
            ctx,
            switch,
            provider,
            world.secret.as_deref(),
            device_port.as_ref().ok(),
        )
    });
    PreparedPort::new(device_port, device, |capabilities| {
        desired(port, world, capabilities)
    })
    .held(world.hold.clone())
}

/// The desired device state of the linked configuration on this port: the one
/// decision `patchbay plan` takes too ([`port_desired`]).
fn desired(
    port: &SwitchPort,
    world: &PortWorld,
    capabilities: &Capabilities,
) -> Result<DesiredPort, Failure> {
    let switch_name = world
        .switch
        .as_ref()
        .map(|s| s.name_any())
        .unwrap_or_default();
    let port_key = port.name_any();
    let lag = world
        .lag
        .as_ref()
        .map(|(this, peers)| (this.view(), peers.iter().map(GroupPeer::view).collect()));
    port_desired(&PortInputs {
        switch: &switch_name,
        port_key: &port_key,
        definition: world.definition.as_ref(),
        wanted: world.desired.as_ref(),
        configuration: world.config.as_ref().map(|c| &c.spec),
        capabilities,
        host_mac: world.host_mac.as_deref(),
        lag,
        tenancy: &world.tenancy,
    })
}

/// A SwitchPort's steps, through its Switch's worker.
struct SwitchPortSteps<'a> {
    ctx: &'a Context,
    validated: PreparedPort,
    key: PortKey,
    /// The move under way, when its entry names another device port.
    moving: Option<Moving>,
    /// Whether the move is done this reconcile: the device port it left reads back
    /// clean (or is another port's to write).
    moved: std::sync::atomic::AtomicBool,
}

impl PortSteps for SwitchPortSteps<'_> {
    fn validated(&self) -> &PreparedPort {
        &self.validated
    }

    fn key(&self) -> &PortKey {
        &self.key
    }

    fn parking(&self) -> Option<patchbay_providers::values::VlanId> {
        self.ctx.settings.tenancy.as_ref().map(|t| t.parking_vlan)
    }

    fn move_off(&self) -> Result<Progress, Failure> {
        let Some(moving) = &self.moving else {
            return Ok(Progress::Done);
        };
        if self.moved.load(Ordering::Relaxed) {
            return Ok(Progress::Done);
        }
        if let Some(from) = &moving.clean {
            let from = PortName::parse(from).map_err(|error| Failure::InvalidPortName {
                field: Some("status.devicePort"),
                error,
            })?;
            if self.reset_device_port(from)? == Progress::HandedOff {
                return Ok(Progress::HandedOff);
            }
        }
        self.moved.store(true, Ordering::Relaxed);
        Ok(Progress::Done)
    }

    fn moved_to(&self) -> Option<String> {
        self.moved
            .load(Ordering::Relaxed)
            .then(|| {
                self.validated
                    .device_port
                    .as_ref()
                    .ok()
                    .map(|p| p.to_string())
            })
            .flatten()
    }
}

/// Whether a SwitchPort other than `me` whose entry in `switch` names `device_port`
/// writes that device port anyway: it carries a configuration, or is parked
/// ([`crate::decide::port_move::MoveFacts::taken`]).
fn taken_by_another(
    ctx: &Context,
    switch: &Switch,
    ns: &str,
    me: &str,
    device_port: &str,
    parking: bool,
) -> bool {
    switch.spec.ports.iter().any(|(name, entry)| {
        name != me
            && entry.name == device_port
            && (parking
                || ctx
                    .ports
                    .record(&kube::runtime::reflector::ObjectRef::new(name).within(ns))
                    .is_some_and(|p| p.configuration().is_some()))
    })
}

/// Reconciles one SwitchPort. Its span carries namespace, port (the object), switch and device
/// port.
/// Returns when to run it again without a wake (`None`: only when woken).
pub(super) async fn reconcile(
    port: Arc<SwitchPort>,
    ctx: Arc<Context>,
) -> Result<Option<Duration>, ControllerError> {
    let span = tracing::info_span!(
        "switchport",
        namespace = %port.namespace().unwrap_or_default(),
        port = %port.name_any(),
        switch = %switch_name(&port, &ctx.port_index).unwrap_or_default(),
        device_port = tracing::field::Empty,
    );
    reconcile_in(port, ctx, span.clone()).instrument(span).await
}

async fn reconcile_in(
    port: Arc<SwitchPort>,
    ctx: Arc<Context>,
    span: tracing::Span,
) -> Result<Option<Duration>, ControllerError> {
    let ns = port.namespace().unwrap_or_default();
    let name = port.name_any();
    let api: Api<SwitchPort> = Api::namespaced(ctx.client.clone(), &ns);
    let world = dereference(&port, &ctx).await?;
    if let Some(device_port) = &world.device_port {
        span.record("device_port", device_port.as_str());
    }
    let record = KubeRecord {
        api,
        obj: port.as_ref(),
        events: &ctx.events,
        own_writes: &ctx.own_writes,
        cache: &ctx.ports,
    };
    let old_status = port.status.clone().unwrap_or_default();
    let mut status = old_status.clone();
    if world.switch.is_none()
        && old_status.state.is_none()
        && port.metadata.deletion_timestamp.is_none()
    {
        // Created ahead of its Switch (or by hand): nothing to manage until a Switch
        // lists it; the Switch watch brings us back.
        set_condition(
            &mut status.conditions,
            "Ready",
            Truth::False,
            "WaitingForSwitch",
            "no Switch lists this port in spec.ports yet".into(),
            port.metadata.generation,
            jiff::Timestamp::now(),
        );
        status.observed_generation = port.metadata.generation;
        record.write_status(&old_status, &status).await?;
        return Ok(None);
    }
    status.switch = world
        .switch
        .as_ref()
        .map(|s| s.name_any())
        .or(status.switch);
    status.provider = world
        .switch
        .as_ref()
        .map(|s| s.spec.provider.name.clone())
        .or(status.provider);
    // Where the port stands when its entry was renamed: it moves, and its status
    // names the device port it leaves until that one is clean.
    let parking = ctx.settings.tenancy.is_some();
    let entry = world.definition.as_ref().map(|d| d.name.as_str());
    let shown = old_status.device_port.as_deref();
    let placement = place(&MoveFacts {
        state: old_status.state,
        shown,
        entry,
        entry_valid: entry.is_some_and(|e| PortName::parse(e).is_ok()),
        parking,
        taken: match (&world.switch, shown) {
            (Some(switch), Some(from)) if entry != Some(from) => {
                taken_by_another(&ctx, switch, &ns, &name, from, parking)
            }
            _ => false,
        },
    });
    status.device_port = placement.shown;
    report_forbidden(
        &mut status,
        &world.tenancy,
        port.metadata.generation,
        jiff::Timestamp::now(),
    );
    let drift_policy = world
        .switch
        .as_ref()
        .and_then(|s| s.spec.drift_policy)
        .unwrap_or_default();
    let skip_cleanup = is_true(port.annotations(), SKIP_CLEANUP_ANNOTATION)
        || world
            .switch
            .as_ref()
            .is_some_and(|s| is_true(s.annotations(), SKIP_CLEANUP_ANNOTATION));
    let key = PortKey {
        kind: CabledPortKind::SwitchPort,
        namespace: ns.clone(),
        name,
    };
    let worker = ctx.running_worker(world.provider.as_deref(), world.secret.as_deref());
    let drift_notice = worker.as_ref().and_then(|e| e.worker.drift_notice(&key));
    let outage = worker.as_ref().and_then(|e| e.worker.outage());
    let input = DriveInput {
        meta: record.meta(),
        old_status,
        status,
        desired: world.desired.clone(),
        inputs: world.inputs.clone(),
        outage,
        drift_policy,
        skip_cleanup,
        drift_check_due: drift_notice.is_some(),
        moving: placement.moving.is_some(),
        entry: world.definition.as_ref().map(|d| d.entry_hash()),
        config_kind: "SwitchPortConfiguration",
        backoff: ctx.settings.backoff,
    };
    let steps = SwitchPortSteps {
        ctx: &ctx,
        validated: prepare(&ctx, &port, &world),
        key,
        moving: placement.moving,
        moved: std::sync::atomic::AtomicBool::new(false),
    };
    let requeue = drive_port(input, &steps, &record, &ctx.ledger, &ctx.probes.metrics).await?;
    Ok(requeue_after(requeue))
}

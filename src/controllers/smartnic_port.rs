//! The SmartNicPort controller (seed 003 story 3, seed 002's chaining): a port on a
//! SmartNIC's Open vSwitch bridge, cabled to a switch port. Kubernetes I/O (reads,
//! the next SwitchPort's claim) and device I/O through the provider's worker.
//!
//! A SmartNicPort runs the same stages as a SwitchPort — `dereference`, `validate`,
//! `acquire_device` (together `prepare`, a [`PreparedPort`]), drive
//! ([`super::port_loop::drive_port`]) — and writes
//! the same status; what differs is what "apply" and "clean" mean:
//!
//! - **Apply**: the SmartNicConfiguration is validated (and checked against the OVS
//!   backend's capabilities) before anything is written anywhere. If it names a
//!   `nextConfigurationRef` and the port a `nextPortRef`, the next SwitchPort is
//!   *claimed* — annotated `patchbay.dev/chained-from: <namespace>/<name>` — and its
//!   `spec.configuration` set to that SwitchPortConfiguration; the SwitchPort
//!   controller then configures the physical switch as for any port. The bridge port
//!   is applied (verified by read-back) through the provider's worker. The
//!   SmartNicPort becomes Active only when the next SwitchPort is Active with exactly
//!   that configuration (same reference, same spec hash); until then it stays
//!   Configuring with `Ready=False, reason WaitingForNextPort` naming the SwitchPort
//!   and its state or last error. No failure is counted for waiting.
//! - **Clean**: the bridge port is reset to clean, every SwitchPort this SmartNicPort
//!   claimed gets its `spec.configuration` cleared, and once each is Idle its claim
//!   annotation is removed; then the SmartNicPort is Idle (or deleted).
//!
//! The target hash covers the SmartNicConfiguration, the next port and the next
//! configuration's spec, so editing any of them reconfigures; its first 16 hex
//! digits are the SmartNicConfiguration's own content hash, so a rollout reads
//! which revision a port carries from its status.
//!
//! Rollouts: a SmartNicConfiguration's edit reaches its ports in waves, like a
//! SwitchPortConfiguration's (`super::rollout`): a port carries the revision its
//! `patchbay.dev/rollout` pin and the configuration's `status.rollout` give it
//! ([`super::context::Stores::carried`]). The next SwitchPort's configuration is
//! judged at the revision that port's own pin gives it, so a chain waits on what its
//! next port is meant to carry while that configuration rolls out, not on its
//! newest spec. An Active SmartNicPort
//! whose next port stops carrying the configuration (edited by hand, failed) is
//! treated as drift: back to Configuring until both are in place again.
//!
//! Refusals (no device touched): a next SwitchPort claimed by another SmartNicPort
//! (`NextPortClaimed`) or carrying a configuration somebody else set
//! (`NextPortInUse`); a provider that is not `ovsdb`. A SmartNicPort without
//! `nextPortRef` is not cabled to a managed switch: its configuration's
//! `nextConfigurationRef` does not apply to it.

use parking_lot::Mutex;
use std::sync::Arc;

use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use patchbay_providers::values::PortName;
use serde_json::json;
use tracing::Instrument;

use super::context::Context;
use super::port_loop::{DeviceHandle, DriveInput, PortSteps, PreparedPort, Progress, drive_port};
use super::port_record::KubeRecord;
use super::{ControllerError, inputs_digest, is_true, requeue_action};
use crate::api::keys::{CHAINED_FROM_ANNOTATION, ROLLOUT_ANNOTATION, SKIP_CLEANUP_ANNOTATION};
use crate::api::{
    Backend, CabledPortKind, ConfigurationRef, DriftPolicy, PortState, ProviderSwitch,
    SmartNicConfiguration, SmartNicPort, SwitchPort, SwitchPortConfiguration, configuration_hash,
};
use crate::decide::failure::Failure;
use crate::decide::plan::{NextPortClaim, SmartNicInputs, claim_next_port, smartnic_desired};
use crate::decide::state_machine::{Outcome, PortTarget};
use crate::decide::tenancy::Carried;
use crate::decide::tenancy::{TenancyVerdict, report_forbidden};
use crate::decide::tenancy::{is_shared, judge_next_reference};
use crate::decide::validate::{has_egress_rules, validate_provider, validate_smartnic_port};
use crate::worker::PortKey;

/// How many hex digits of a SmartNicPort's `status.configurationHash` are its
/// SmartNicConfiguration's own content hash: more than a revision's name keeps
/// ([`crate::decide::rollout::revision_name`]).
const REVISION_PREFIX: usize = 16;

/// The next port of a chain and what it must carry.
struct Chain {
    port_ns: String,
    port_name: String,
    config: ConfigurationRef,
    config_obj: Option<SwitchPortConfiguration>,
    port: Option<SwitchPort>,
}

struct World {
    provider: Option<Arc<ProviderSwitch>>,
    config: Option<SmartNicConfiguration>,
    desired: Option<PortTarget>,
    chain: Option<Chain>,
    /// The host's MAC: `spec.hostMac`, else the cabled Server NIC's (looked up only
    /// for egress ACL rules).
    host_mac: Option<String>,
    /// The tenancy check of the configuration (and of its nextConfigurationRef).
    tenancy: TenancyVerdict,
    /// See [`super::inputs_digest`]: the spec, the provider, the configuration and
    /// the chained port's claim and configuration.
    inputs: String,
}

async fn dereference(port: &SmartNicPort, ctx: &Context) -> Result<World, ControllerError> {
    let ns = port.namespace().unwrap_or_default();
    let client = &ctx.client;
    let provider = ctx.stores.provider(&ns, &port.spec.provider.name);
    let provider_input = provider
        .as_ref()
        .map(|p| json!({"uid": p.uid(), "spec": p.spec}));
    let Some(r) = &port.spec.configuration else {
        return Ok(World {
            inputs: inputs_digest(&json!({"spec": port.spec, "provider": provider_input})),
            provider,
            config: None,
            desired: None,
            chain: None,
            host_mac: None,
            tenancy: TenancyVerdict::default(),
        });
    };
    let cns = r.namespace.clone().unwrap_or_else(|| ns.clone());
    // The configuration at the revision its rollout gives this port.
    let pin = port
        .annotations()
        .get(ROLLOUT_ANNOTATION)
        .map(String::as_str);
    let config = match ctx
        .stores
        .smartnic_configurations
        .get(&kube::runtime::reflector::ObjectRef::new(&r.name).within(&cns))
    {
        Some(c) => Some(
            ctx.stores
                .carried(c.as_ref().clone(), pin)
                .map_err(ControllerError::Waiting)?,
        ),
        None => None,
    };
    let next_cfg = config
        .as_ref()
        .and_then(|c| c.spec.next_configuration_ref.clone());
    let chain = match (&port.spec.next_port_ref, next_cfg) {
        (Some(np), Some(nc)) => {
            let port_ns = np.namespace.clone().unwrap_or_else(|| ns.clone());
            let config_ns = nc.namespace.clone().unwrap_or_else(|| cns.clone());
            let next = Api::<SwitchPort>::namespaced(client.clone(), &port_ns)
                .get_opt(&np.name)
                .await?;
            // What the next port carries of its configuration: the revision its
            // own pin gives it, while that configuration rolls out.
            let next_pin = next
                .as_ref()
                .and_then(|p| p.annotations().get(ROLLOUT_ANNOTATION))
                .map(String::as_str);
            let config_obj = ctx
                .stores
                .configuration_carried(&config_ns, &nc.name, next_pin)
                .map_err(ControllerError::Waiting)?;
            Some(Chain {
                port_ns,
                port_name: np.name.clone(),
                config: ConfigurationRef {
                    name: nc.name,
                    namespace: Some(config_ns),
                },
                config_obj,
                port: next,
            })
        }
        // A SmartNicPort without nextPortRef is not cabled to a managed switch: the
        // configuration's nextConfigurationRef does not apply to it.
        _ => None,
    };
    let hash = match &config {
        None => "missing".to_owned(),
        Some(c) => {
            let own = c.spec.content_hash();
            let whole = configuration_hash(&json!({
                "smartNic": own,
                "nextPort": chain.as_ref().map(|c| format!("{}/{}", c.port_ns, c.port_name)),
                "next": chain.as_ref().map(|c| c.config_obj.as_ref().map_or_else(
                    || "missing".to_owned(),
                    |o| o.spec.content_hash(),
                )),
            }));
            // Begins with the configuration's own hash: the revision it names
            // (what its rollout reads back of the port).
            format!("{}{}", &own[..REVISION_PREFIX], &whole[REVISION_PREFIX..])
        }
    };
    let host_mac = match (&port.spec.host_mac, &config) {
        (Some(m), _) => Some(m.clone()),
        (None, Some(c)) if has_egress_rules(&c.spec.acl) => {
            ctx.stores
                .cabled_host_mac(CabledPortKind::SmartNicPort, &ns, &port.name_any())
        }
        _ => None,
    };
    let reference = ConfigurationRef {
        name: r.name.clone(),
        namespace: Some(cns.clone()),
    };
    let mut tenancy = match &config {
        Some(c) => ctx.stores.tenancy_verdict(
            ctx.settings.tenancy.as_ref(),
            CabledPortKind::SmartNicPort,
            &port.metadata,
            Some(&port.spec.provider.name),
            &Carried {
                kind: "SmartNicConfiguration",
                reference: &reference,
                labels: c.metadata.labels.as_ref(),
                port: &c.spec.port,
                group: None,
            },
        ),
        None => TenancyVerdict::default(),
    };
    // The next port's configuration is named by the SmartNicConfiguration: it
    // stays in the namespace the port serves (or is a shared infra one).
    if let (Some(t), Some(c)) = (ctx.settings.tenancy.as_ref(), &chain) {
        let tenant = ctx.stores.serving_namespace(
            CabledPortKind::SmartNicPort,
            &port.metadata,
            Some(&reference),
        );
        let shared = is_shared(
            c.config_obj
                .as_ref()
                .and_then(|o| o.metadata.labels.as_ref()),
        );
        tenancy.merge(judge_next_reference(
            t,
            &ctx.stores.grants(Some(t.parking_vlan)),
            &tenant,
            c.config.namespace.as_deref().unwrap_or_default(),
            shared,
            format!(
                "SmartNicConfiguration {cns}/{} spec.nextConfigurationRef",
                r.name
            ),
        ));
    }
    let digest = inputs_digest(&json!({
        "tenancy": {"refused": tenancy.refused, "names": tenancy.names},
        "spec": port.spec,
        "hostMac": host_mac,
        "provider": provider_input,
        "configuration": config.as_ref().map(|c| &c.spec),
        "next": chain.as_ref().map(|c| json!({
            // Its appearing is a new input: a SmartNicPort that found no next port
            // tries again at once when it is created, not after its backoff.
            "uid": c.port.as_ref().and_then(|p| p.uid()),
            "claim": c.port.as_ref().and_then(|p| p.annotations().get(CHAINED_FROM_ANNOTATION)),
            "carries": c.port.as_ref().map(|p| &p.spec.configuration),
            "configuration": c.config_obj.as_ref().map(|o| &o.spec),
        })),
    }));
    // The pin it acts under, readable by the rollout (whose wave a failure is).
    let rollout = config
        .as_ref()
        .and_then(|c| c.status.as_ref()?.rollout.as_ref());
    let inputs = crate::decide::rollout::pinned_attempt(digest, &[(pin, rollout)]);
    Ok(World {
        inputs,
        provider,
        config,
        desired: Some(PortTarget {
            configuration: reference,
            hash,
        }),
        chain,
        host_mac,
        tenancy,
    })
}

/// Validates what [`dereference`] read: the SmartNicPort's own fields, the bridge
/// port's name and its ProviderSwitch (an Open vSwitch, with valid settings).
/// Nothing is built or dialled here.
fn validate<'w>(
    port: &SmartNicPort,
    world: &'w World,
) -> (
    Result<PortName, Failure>,
    Result<&'w ProviderSwitch, Failure>,
) {
    let device_port =
        PortName::parse(&port.spec.port_name).map_err(|error| Failure::InvalidPortName {
            field: Some("spec.portName"),
            error,
        });
    let provider = (|| {
        validate_smartnic_port(&port.spec).map_err(Failure::InvalidSmartNicPort)?;
        let Some(provider) = &world.provider else {
            return Err(Failure::ProviderNotFound {
                name: port.spec.provider.name.clone(),
                field: "spec.provider",
            });
        };
        if provider.spec.backend != Backend::Ovsdb {
            return Err(Failure::ProviderNotOvs {
                name: provider.name_any(),
            });
        }
        validate_provider(&provider.spec).map_err(|errors| Failure::InvalidProvider {
            name: provider.name_any(),
            errors,
        })?;
        Ok(provider.as_ref())
    })();
    (device_port, provider)
}

/// Acquires the bridge: finds the provider's worker, or starts (or replaces) it.
fn acquire_device(
    ctx: &Context,
    provider: &ProviderSwitch,
    port: &PortName,
) -> Result<DeviceHandle, Failure> {
    Ok(ctx
        .ensure_worker(provider, None, std::slice::from_ref(port))?
        .handle())
}

/// A reconcile's inputs made ready for the loop: validated, the bridge acquired
/// (only for a valid provider and port name), the desired state checked against
/// what the SmartNIC can configure.
fn prepare(ctx: &Context, port: &SmartNicPort, world: &World) -> PreparedPort {
    let (device_port, provider) = validate(port, world);
    let device = provider.and_then(|provider| {
        let name = device_port.clone()?;
        acquire_device(ctx, provider, &name)
    });
    PreparedPort::new(device_port.clone(), device, |capabilities| {
        smartnic_desired(&SmartNicInputs {
            device_port: device_port.clone()?,
            wanted: world.desired.as_ref(),
            configuration: world.config.as_ref().map(|c| &c.spec),
            capabilities,
            host_mac: world.host_mac.as_deref(),
            tenancy: &world.tenancy,
        })
    })
}

/// A SmartNicPort's steps: its bridge port through the provider's worker, and the
/// chain to its next SwitchPort.
struct SmartNicSteps<'a> {
    ctx: &'a Context,
    port: &'a SmartNicPort,
    world: World,
    validated: PreparedPort,
    key: PortKey,
    waiting: Mutex<Option<String>>,
}

impl SmartNicSteps<'_> {
    fn me(&self) -> String {
        format!(
            "{}/{}",
            self.port.namespace().unwrap_or_default(),
            self.port.name_any()
        )
    }

    fn wait(&self, why: String) -> Result<Outcome, Failure> {
        *self.waiting.lock() = Some(why);
        Ok(Outcome::Waiting)
    }

    /// Claims the next SwitchPort and sets its configuration. Refuses a port
    /// claimed by another SmartNicPort or configured by somebody else.
    async fn claim(&self, chain: &Chain) -> Result<bool, Failure> {
        let me = self.me();
        match claim_next_port(
            chain.port.as_ref(),
            &me,
            (&chain.port_ns, &chain.port_name),
            &chain.config,
        )? {
            NextPortClaim::Held => return Ok(false),
            NextPortClaim::Claim => {}
        }
        let api: Api<SwitchPort> = Api::namespaced(self.ctx.client.clone(), &chain.port_ns);
        api.patch(
            &chain.port_name,
            &PatchParams::default(),
            &Patch::Merge(json!({
                "metadata": {"annotations": {CHAINED_FROM_ANNOTATION: me}},
                "spec": {"configuration": chain.config},
            })),
        )
        .await
        .map_err(super::kube_failure)?;
        Ok(true)
    }

    /// Why the next port does not (yet) carry the chain's configuration.
    fn next_not_ready(&self, chain: &Chain) -> Option<String> {
        let next = chain.port.as_ref()?;
        let status = next.status.clone().unwrap_or_default();
        let hash = chain.config_obj.as_ref().map(|o| o.spec.content_hash());
        let ready = status.state == Some(PortState::Active)
            && status.configuration_ref.as_ref() == Some(&chain.config)
            && hash.is_some()
            && status.configuration_hash == hash
            && status.observed_generation == next.meta().generation;
        if ready {
            return None;
        }
        let state = status.state.map_or_else(
            || "not yet seen by its controller".to_owned(),
            |s| s.to_string(),
        );
        let error = status
            .last_error
            .map(|e| format!("; last error: {e}"))
            .unwrap_or_default();
        Some(format!(
            "waiting for SwitchPort {}/{} (nextPortRef) to carry SwitchPortConfiguration {}: it is {state}{error}",
            chain.port_ns, chain.port_name, chain.config.name
        ))
    }

    /// Releases every SwitchPort claimed by this SmartNicPort except `keep`. Returns
    /// what is still pending.
    async fn release(&self, keep: Option<(&str, &str)>) -> Result<Vec<String>, Failure> {
        let me = self.me();
        let mut pending = Vec::new();
        let claimed: Vec<Arc<SwitchPort>> = self
            .ctx
            .ports
            .state()
            .into_iter()
            .filter(|p| p.annotation(CHAINED_FROM_ANNOTATION) == Some(me.as_str()))
            .filter(|p| keep.is_none_or(|(ns, n)| p.namespace() != ns || p.name() != n))
            .map(|p| Arc::new(p.to_port()))
            .collect();
        for p in claimed {
            let ns = p.namespace().unwrap_or_default();
            let name = p.name_any();
            let api: Api<SwitchPort> = Api::namespaced(self.ctx.client.clone(), &ns);
            let status = p.status.clone().unwrap_or_default();
            let patch = if p.spec.configuration.is_some() {
                pending.push(format!("{ns}/{name}"));
                json!({"spec": {"configuration": null}})
            } else if matches!(status.state, None | Some(PortState::Idle))
                && status.configuration_ref.is_none()
            {
                json!({"metadata": {"annotations": {CHAINED_FROM_ANNOTATION: null}}})
            } else {
                pending.push(format!("{ns}/{name}"));
                continue;
            };
            match api
                .patch(&name, &PatchParams::default(), &Patch::Merge(patch))
                .await
            {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(super::kube_failure(e)),
            }
        }
        Ok(pending)
    }
}

impl PortSteps for SmartNicSteps<'_> {
    fn validated(&self) -> &PreparedPort {
        &self.validated
    }

    fn key(&self) -> &PortKey {
        &self.key
    }

    fn parking(&self) -> Option<patchbay_providers::values::VlanId> {
        self.ctx.settings.tenancy.as_ref().map(|t| t.parking_vlan)
    }

    async fn apply(&self) -> Result<Outcome, Failure> {
        let (device, desired) = self.device_and_desired()?;
        // Nothing is written anywhere before both ends are validated.
        let chain = self.world.chain.as_ref();
        let claimed = match chain {
            Some(c) => self.claim(c).await?,
            None => false,
        };
        let keep = chain.map(|c| (c.port_ns.as_str(), c.port_name.as_str()));
        self.release(keep).await?;
        let progress = self.set_on_device(&device, desired)?;
        match chain {
            Some(c) if claimed => self.wait(format!(
                "waiting for SwitchPort {}/{} (nextPortRef) to carry SwitchPortConfiguration {}",
                c.port_ns, c.port_name, c.config.name
            )),
            // What the chain waits for is said first; then the bridge port's change,
            // with the worker until its answer wakes the port.
            Some(c) => match self.next_not_ready(c) {
                Some(why) => self.wait(why),
                None => Ok(progress.outcome(Outcome::Applied)),
            },
            None => Ok(progress.outcome(Outcome::Applied)),
        }
    }

    async fn clean(&self) -> Result<Outcome, Failure> {
        if self.reset_on_device()? == Progress::HandedOff {
            return Ok(Outcome::HandedOff);
        }
        let pending = self.release(None).await?;
        if pending.is_empty() {
            Ok(Outcome::Cleaned)
        } else {
            self.wait(format!(
                "waiting for SwitchPort {} (chained) to be cleaned",
                pending.join(", ")
            ))
        }
    }

    async fn verify(&self) -> Result<Outcome, Failure> {
        let next_ok = self
            .world
            .chain
            .as_ref()
            .is_none_or(|c| self.next_not_ready(c).is_none());
        Ok(if self.device_matches().await? && next_ok {
            Outcome::InSync
        } else {
            Outcome::Drifted
        })
    }

    fn waiting(&self) -> Option<String> {
        self.waiting.lock().take()
    }
}

/// Reconciles one SmartNicPort. Its span carries namespace, port (the object), provider and
/// device port.
pub(super) async fn reconcile(
    port: Arc<SmartNicPort>,
    ctx: Arc<Context>,
) -> Result<Action, ControllerError> {
    let span = tracing::info_span!(
        "smartnicport",
        namespace = %port.namespace().unwrap_or_default(),
        port = %port.name_any(),
        provider = %port.spec.provider.name,
        device_port = %port.spec.port_name,
    );
    reconcile_in(port, ctx).instrument(span).await
}

async fn reconcile_in(
    port: Arc<SmartNicPort>,
    ctx: Arc<Context>,
) -> Result<Action, ControllerError> {
    let ns = port.namespace().unwrap_or_default();
    let world = dereference(&port, &ctx).await?;
    let key = PortKey {
        kind: CabledPortKind::SmartNicPort,
        namespace: ns.clone(),
        name: port.name_any(),
    };
    let old_status = port.status.clone().unwrap_or_default();
    let mut status = old_status.clone();
    // A SmartNicPort is on no Switch: its device is the provider's bridge.
    status.switch = None;
    status.provider = Some(port.spec.provider.name.clone());
    status.device_port = Some(port.spec.port_name.clone());
    report_forbidden(
        &mut status,
        &world.tenancy,
        port.metadata.generation,
        jiff::Timestamp::now(),
    );
    let worker = ctx.running_worker(world.provider.as_deref(), None);
    let drift_notice = worker.as_ref().and_then(|e| e.worker.drift_notice(&key));
    let outage = worker.as_ref().and_then(|e| e.worker.outage());
    let steps = SmartNicSteps {
        ctx: &ctx,
        port: &port,
        validated: prepare(&ctx, &port, &world),
        world,
        key,
        waiting: Mutex::new(None),
    };
    // An Active port whose next port stopped carrying the configuration is drift:
    // check it now rather than at the next sweep.
    let next_lost = old_status.state == Some(PortState::Active)
        && steps
            .world
            .desired
            .as_ref()
            .is_some_and(|d| old_status.configuration_hash.as_deref() == Some(d.hash.as_str()))
        && steps
            .world
            .chain
            .as_ref()
            .is_some_and(|c| steps.next_not_ready(c).is_some());
    let record = KubeRecord {
        api: Api::namespaced(ctx.client.clone(), &ns),
        obj: port.as_ref(),
        events: &ctx.events,
        own_writes: &ctx.own_writes,
        cache: &ctx.stores.smartnics,
    };
    let input = DriveInput {
        meta: record.meta(),
        old_status,
        status,
        desired: steps.world.desired.clone(),
        inputs: steps.world.inputs.clone(),
        outage,
        drift_policy: DriftPolicy::Reconcile,
        skip_cleanup: is_true(port.annotations(), SKIP_CLEANUP_ANNOTATION),
        drift_check_due: drift_notice.is_some() || next_lost,
        moving: false,
        entry: None,
        config_kind: "SmartNicConfiguration",
        backoff: ctx.settings.backoff,
    };
    let requeue = drive_port(input, &steps, &record, &ctx.ledger, &ctx.probes.metrics).await?;
    Ok(requeue_action(requeue))
}

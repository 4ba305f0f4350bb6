//! The demo: walks one port through every state of the state machine on the fixture
//! backend, printing each state and what the device holds. Does device I/O only on the
//! in-memory fixture; no cluster needed.
//!
//! It plays the controller's part by hand — the same [`decide`] loop the SwitchPort
//! controller runs — so a reader can see the seed workflows happen: configure,
//! update, drift corrected, deprovision, delete.

use std::fmt::Write as _;
use std::time::Duration;

use anyhow::{Context, Result};
use patchbay_providers::fixture::FixtureSwitch;
use patchbay_providers::values::PortName;
use patchbay_providers::verify::{apply_verified, reset_verified};
use patchbay_providers::{AdminState, Device, DeviceError, ObservedPort, VlanMode, diff};

use patchbay::api::{
    ConfigurationRef, DriftPolicy, PortState, SwitchPortConfiguration, SwitchPortDefinition,
    configuration_hash,
};
use patchbay::state_machine::{
    AppliedChange, Backoff, FailureKind, Outcome, PortFacts, PortTarget, Step, decide,
};
use patchbay::validate::{PortContext, desired_for_port};

const PROVISIONING: &str = include_str!("../../../examples/configuration-provisioning.yaml");
const TENANT: &str = include_str!("../../../examples/configuration-tenant-web.yaml");

/// One line per device read: admin state, VLANs, description.
pub fn describe(port: &ObservedPort) -> String {
    let mut out = String::new();
    match port.admin {
        Some(AdminState::Up) => out.push_str("up"),
        Some(AdminState::Down) => out.push_str("DOWN"),
        None => out.push('?'),
    }
    match &port.vlans {
        Some(VlanMode::Unconfigured) | None => out.push_str(", no VLANs"),
        Some(VlanMode::Access { vlan }) => {
            let _ = write!(out, ", access {vlan}");
        }
        Some(VlanMode::Trunk { native, allowed }) => {
            let _ = write!(out, ", trunk {allowed}");
            if let Some(n) = native {
                let _ = write!(out, " native {n}");
            }
        }
    }
    if let Some(Some(d)) = &port.description {
        let _ = write!(out, ", \"{d}\"");
    }
    if let Some(acl) = &port.acl
        && !acl.is_empty()
    {
        let _ = write!(out, ", {} ACL rules", acl.len());
    }
    out
}

struct Walk {
    switch: FixtureSwitch,
    definition: SwitchPortDefinition,
    state: Option<PortState>,
    has_finalizer: bool,
    applied: Option<PortTarget>,
    failures: u32,
    last_attempt: Option<String>,
    last_failure: Option<jiff::Timestamp>,
    next_retry: Option<jiff::Timestamp>,
}

impl Walk {
    fn port(&self) -> Result<PortName> {
        Ok(PortName::parse(&self.definition.name)?)
    }

    fn show(&self, step: &str) -> Result<()> {
        let state = self.state.map_or("(none)".to_owned(), |s| s.to_string());
        let device = self
            .switch
            .port_state(&self.port()?)
            .map(|p| describe(&p))
            .unwrap_or_default();
        println!("  {step:<44} {state:<12} {device}");
        Ok(())
    }

    async fn perform(
        &self,
        step: Step,
        config: Option<&SwitchPortConfiguration>,
    ) -> Result<Outcome> {
        let port = self.port()?;
        let failed = |e: DeviceError| {
            println!("    device error: {e}");
            Outcome::Failed(FailureKind::Transient)
        };
        Ok(match step {
            Step::None => unreachable!("perform is not called for Step::None"),
            Step::AddFinalizer => Outcome::FinalizerAdded,
            Step::RemoveFinalizer => Outcome::FinalizerRemoved,
            Step::Apply => {
                let config = config.context("Apply without a configuration")?;
                let caps = self.switch.capabilities();
                let ctx = PortContext {
                    switch: "tor-1",
                    port_key: "server-7-eth0",
                    definition: &self.definition,
                    capabilities: Some(&caps),
                };
                match desired_for_port(&config.spec, &ctx) {
                    Err(e) => {
                        println!("    refused: {e}");
                        Outcome::Failed(FailureKind::Invalid)
                    }
                    Ok(desired) => match apply_verified(&self.switch, &desired).await {
                        Ok(_) => Outcome::Applied,
                        Err(e) => failed(e),
                    },
                }
            }
            Step::Clean => match reset_verified(&self.switch, &port).await {
                Ok(_) => Outcome::Cleaned,
                Err(e) => failed(e),
            },
            Step::Verify => {
                let config = config.context("Verify without a configuration")?;
                let ctx = PortContext {
                    switch: "tor-1",
                    port_key: "server-7-eth0",
                    definition: &self.definition,
                    capabilities: None,
                };
                let desired = desired_for_port(&config.spec, &ctx)?;
                match self.switch.get_port(&port).await {
                    Ok(observed) if diff(&desired, &observed).is_empty() => Outcome::InSync,
                    Ok(observed) => {
                        println!(
                            "    drift: device has {:?} different",
                            diff(&desired, &observed)
                                .iter()
                                .map(ToString::to_string)
                                .collect::<Vec<_>>()
                        );
                        Outcome::Drifted
                    }
                    Err(e) => failed(e),
                }
            }
        })
    }

    /// One reconcile: decide, act, feed the outcome back, until nothing is left to do.
    async fn reconcile(
        &mut self,
        step: &str,
        config: Option<&SwitchPortConfiguration>,
        deletion: bool,
        drift_check_due: bool,
    ) -> Result<()> {
        let target = config.map(|c| PortTarget {
            configuration: ConfigurationRef {
                name: c.metadata.name.clone().unwrap_or_default(),
                namespace: Some("default".into()),
            },
            hash: configuration_hash(&c.spec),
        });
        let mut outcome = None;
        let mut printed = false;
        let inputs = target
            .as_ref()
            .map_or("none".to_owned(), |t| t.hash.clone());
        for _ in 0..16 {
            let facts = PortFacts {
                state: self.state,
                has_finalizer: self.has_finalizer,
                deletion_requested: deletion,
                skip_device_cleanup: false,
                desired: target.as_ref(),
                applied: self.applied.as_ref(),
                inputs: &inputs,
                failures: self.failures,
                last_attempt: self.last_attempt.as_deref(),
                last_failure: self.last_failure,
                next_retry: self.next_retry,
                switch_outage: None,
                now: jiff::Timestamp::now(),
                drift_check_due: drift_check_due && outcome.is_none(),
                drift_reported: false,
                drift_policy: DriftPolicy::Reconcile,
                backoff: Backoff::default(),
                outcome,
            };
            let decision = decide(&facts);
            let changed = self.state != Some(decision.state);
            self.state = Some(decision.state);
            self.failures = decision.failures;
            self.last_attempt = decision.attempt.clone();
            self.last_failure = decision.last_failure;
            self.next_retry = decision.next_retry;
            match decision.applied {
                AppliedChange::Keep => {}
                AppliedChange::SetToDesired => self.applied = target.clone(),
                AppliedChange::Clear => self.applied = None,
            }
            if changed || !printed {
                self.show(if printed { "" } else { step })?;
                printed = true;
            }
            if decision.step == Step::None {
                return Ok(());
            }
            outcome = Some(self.perform(decision.step, config).await?);
            match decision.step {
                Step::AddFinalizer => self.has_finalizer = true,
                Step::RemoveFinalizer => self.has_finalizer = false,
                _ => {}
            }
        }
        anyhow::bail!("the state machine did not settle")
    }
}

/// Prints every CRD's name, then walks one port through its lifecycle.
pub async fn run() -> Result<()> {
    println!("patchbay demo — the port state machine on the fixture backend\n");
    println!("CRDs (full YAML: `patchbay crds`):");
    for (file, crd) in patchbay::api::crds() {
        println!(
            "  {:<36} crds/{file}",
            crd.metadata.name.unwrap_or_default()
        );
    }
    let provisioning: SwitchPortConfiguration =
        serde_yaml::from_str(PROVISIONING).context("examples/configuration-provisioning.yaml")?;
    let mut tenant: SwitchPortConfiguration =
        serde_yaml::from_str(TENANT).context("examples/configuration-tenant-web.yaml")?;

    let definition = SwitchPortDefinition {
        name: "FastEthernet0/7".into(),
        disabled: false,
        vlan_range: Some("10, 100-199".into()),
        trunk_disable: false,
    };
    let switch = FixtureSwitch::new("tor-1", [PortName::parse(&definition.name)?]);
    switch.set_latency(Duration::from_millis(20));
    let mut walk = Walk {
        switch: switch.clone(),
        definition,
        state: None,
        has_finalizer: false,
        applied: None,
        failures: 0,
        last_attempt: None,
        last_failure: None,
        next_retry: None,
    };

    println!(
        "\nSwitchPort server-7-eth0 -> fixture switch tor-1, port {} (vlanRange 10, 100-199)\n",
        walk.definition.name
    );
    println!("  {:<44} {:<12} device", "step", "state");
    walk.show("SwitchPort created")?;
    walk.reconcile("controller sees it", None, false, false)
        .await?;
    walk.reconcile(
        "provisioning configuration linked",
        Some(&provisioning),
        false,
        false,
    )
    .await?;
    walk.reconcile("tenant configuration linked", Some(&tenant), false, false)
        .await?;
    tenant.spec.vlans.push(patchbay::api::VlanSpec {
        id: 120,
        name: Some("web-backup".into()),
    });
    walk.reconcile(
        "tenant configuration edited (+VLAN 120)",
        Some(&tenant),
        false,
        false,
    )
    .await?;
    let port = walk.port()?;
    switch.tamper(&port, |p| p.vlans = Some(VlanMode::Unconfigured));
    walk.show("someone wipes the port's VLANs by hand")?;
    walk.reconcile("periodic drift check", Some(&tenant), false, true)
        .await?;
    let mut bad = tenant.clone();
    bad.spec.vlans.push(patchbay::api::VlanSpec {
        id: 300,
        name: None,
    });
    let writes = switch.write_count();
    walk.reconcile(
        "VLAN 300 (outside vlanRange) requested",
        Some(&bad),
        false,
        false,
    )
    .await?;
    println!(
        "    device writes during the refused attempt: {}",
        switch.write_count() - writes
    );
    walk.reconcile("configuration fixed again", Some(&tenant), false, false)
        .await?;
    walk.reconcile("host released: configuration cleared", None, false, false)
        .await?;
    walk.reconcile("SwitchPort deleted", None, true, false)
        .await?;
    println!(
        "\nDevice operations: {} ({} writes). Every write was read back and verified.",
        switch.operations().len(),
        switch.write_count()
    );
    Ok(())
}

//! `patchbay demo --walk`: one SwitchPort through every state of the state machine,
//! on an in-memory fixture switch, without a cluster — printing each state and what
//! the device holds. Device I/O only on the fixture.
//!
//! It runs the operator's own loop ([`drive_port`]): the same decisions, the same switch
//! worker, the same validation and read-back. Only the port object lives in memory
//! instead of an API server ([`MemoryRecord`]), so a reader sees the seed workflows
//! happen exactly as the operator runs them: configure, update, drift corrected, an
//! invalid configuration refused, deprovision, delete.

use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result};
use patchbay::api::{
    ConfigurationRef, DriftPolicy, PortStatus, SwitchPortConfiguration, SwitchPortDefinition,
};
use patchbay::controllers::ControllerError;
use patchbay::controllers::port_loop::{
    DeviceHandle, DriveInput, PortMeta, PortRecord, PortSteps, PreparedPort, StatusLedger,
    drive_port,
};
use patchbay::decide::failure::Failure;
use patchbay::decide::state_machine::{Backoff, PortTarget};
use patchbay::decide::status::Severity;
use patchbay::decide::validate::{PortContext, desired_for_port};
use patchbay::worker::{PortKey, SwitchWorker, WorkerConfig};
use patchbay_providers::fixture::FixtureSwitch;
use patchbay_providers::values::PortName;
use patchbay_providers::{AdminState, ObservedPort, VlanMode, diff};

const PROVISIONING: &str = include_str!("../../../examples/configuration-provisioning.yaml");
const TENANT: &str = include_str!("../../../examples/configuration-tenant-web.yaml");

/// One line per device read: admin state, VLANs, description.
fn describe(port: &ObservedPort) -> String {
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

/// The port object, in memory: its status and finalizer. Prints every state the
/// loop writes, with what the device holds at that moment.
struct MemoryRecord {
    status: Mutex<PortStatus>,
    finalizer: Mutex<bool>,
    switch: FixtureSwitch,
    port: PortName,
    /// The walk step being printed (printed once, on its first line).
    step: Mutex<Option<String>>,
}

impl MemoryRecord {
    fn show(&self, state: &str) {
        let step = self.step.lock().unwrap().take().unwrap_or_default();
        let device = self
            .switch
            .port_state(&self.port)
            .map(|p| describe(&p))
            .unwrap_or_default();
        println!("  {step:<44} {state:<12} {device}");
    }
}

impl PortRecord for MemoryRecord {
    async fn write_status(
        &self,
        _old: &PortStatus,
        new: &PortStatus,
    ) -> Result<(), ControllerError> {
        let mut status = self.status.lock().unwrap();
        let changed = status.state != new.state;
        *status = new.clone();
        drop(status);
        if changed {
            self.show(&new.state.map(|s| s.to_string()).unwrap_or_default());
        }
        Ok(())
    }

    async fn set_finalizer(&self, present: bool) -> Result<(), ControllerError> {
        *self.finalizer.lock().unwrap() = present;
        if !present {
            // The object goes with its finalizer; no status is written for it.
            self.show("Deleting");
        }
        Ok(())
    }

    async fn publish(&self, severity: Severity, reason: &str, note: &str) {
        if severity == Severity::Warning {
            println!("    {reason}: {note}");
        }
    }

    fn forget_events(&self) {}
}

/// The port's steps on the fixture switch, through a switch worker as the operator
/// runs them.
struct WalkSteps {
    validated: PreparedPort,
    key: PortKey,
}

impl WalkSteps {
    /// Validates the walk's port once, as a controller does per reconcile.
    fn new(
        device: DeviceHandle,
        definition: &SwitchPortDefinition,
        config: Option<&SwitchPortConfiguration>,
        key: PortKey,
    ) -> Self {
        let device_port = PortName::parse(&definition.name)
            .map_err(|error| Failure::InvalidPortName { field: None, error });
        let validated = PreparedPort::new(device_port, Ok(device), |capabilities| {
            let config = config.ok_or(Failure::ConfigurationNotFound {
                kind: "SwitchPortConfiguration",
                name: "(none)".into(),
            })?;
            desired_for_port(
                &config.spec,
                &PortContext {
                    switch: "tor-1",
                    port_key: "server-7-eth0",
                    definition,
                    capabilities: Some(capabilities),
                },
            )
            .map_err(Failure::InvalidConfiguration)
        });
        Self { validated, key }
    }
}

impl PortSteps for WalkSteps {
    fn validated(&self) -> &PreparedPort {
        &self.validated
    }

    fn key(&self) -> &PortKey {
        &self.key
    }
}

struct Walk {
    record: MemoryRecord,
    device: DeviceHandle,
    definition: SwitchPortDefinition,
    ledger: StatusLedger,
}

impl Walk {
    /// One reconcile, as the controller runs it after `step` happened.
    async fn reconcile(
        &self,
        step: &str,
        config: Option<&SwitchPortConfiguration>,
        deletion: bool,
        drift_check_due: bool,
    ) -> Result<()> {
        *self.record.step.lock().unwrap() = Some(step.to_owned());
        let desired = config.map(|c| PortTarget {
            configuration: ConfigurationRef {
                name: c.metadata.name.clone().unwrap_or_default(),
                namespace: Some("network-infra".into()),
            },
            hash: c.spec.content_hash(),
        });
        let status = self.record.status.lock().unwrap().clone();
        let input = DriveInput {
            meta: PortMeta {
                kind: "SwitchPort",
                uid: "walk".into(),
                generation: Some(1),
                has_finalizer: *self.record.finalizer.lock().unwrap(),
                deletion_requested: deletion,
            },
            old_status: status.clone(),
            status,
            inputs: desired.as_ref().map_or("none".into(), |d| d.hash.clone()),
            desired,
            outage: None,
            drift_policy: DriftPolicy::Reconcile,
            skip_cleanup: false,
            drift_check_due,
            moving: false,
            entry: None,
            config_kind: "SwitchPortConfiguration",
            backoff: Backoff::default(),
        };
        let steps = WalkSteps::new(
            self.device.clone(),
            &self.definition,
            config,
            PortKey {
                kind: patchbay::api::CabledPortKind::SwitchPort,
                namespace: "network-infra".into(),
                name: "server-7-eth0".into(),
            },
        );
        let metrics = patchbay::metrics::Metrics::default();
        drive_port(input.clone(), &steps, &self.record, &self.ledger, &metrics).await?;
        // A change handed to the worker: its answer wakes the port, as in the
        // operator — here, the walk reconciles again once the worker answered.
        for _ in 0..4 {
            let before = self.record.status.lock().unwrap().clone();
            if before.state != Some(patchbay::api::PortState::Configuring)
                && before.state != Some(patchbay::api::PortState::Cleaning)
            {
                break;
            }
            self.device.worker.hand_offs_settled().await;
            let input = DriveInput {
                meta: PortMeta {
                    has_finalizer: *self.record.finalizer.lock().unwrap(),
                    ..input.meta.clone()
                },
                old_status: before.clone(),
                status: before.clone(),
                drift_check_due: false,
                ..input.clone()
            };
            drive_port(input, &steps, &self.record, &self.ledger, &metrics).await?;
            if *self.record.status.lock().unwrap() == before {
                break;
            }
        }
        // A step that changed no state still gets its line.
        if self.record.step.lock().unwrap().is_some() {
            let state = self.record.status.lock().unwrap().state;
            self.record
                .show(&state.map_or("(none)".to_owned(), |s| s.to_string()));
        }
        Ok(())
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
    let provisioning: SwitchPortConfiguration = patchbay_providers::yaml::from_str(PROVISIONING)
        .context("examples/configuration-provisioning.yaml")?;
    let mut tenant: SwitchPortConfiguration = patchbay_providers::yaml::from_str(TENANT)
        .context("examples/configuration-tenant-web.yaml")?;

    let definition = SwitchPortDefinition {
        name: "FastEthernet0/7".into(),
        disabled: false,
        vlan_range: Some("10, 100-199".into()),
        trunk_disable: false,
        bgp_address: None,
    };
    let port = PortName::parse(&definition.name)?;
    let switch = FixtureSwitch::new("tor-1", [port.clone()]);
    switch.set_latency(Duration::from_millis(20));
    let device: Arc<dyn patchbay_providers::Device> = Arc::new(switch.clone());
    let worker = SwitchWorker::spawn(
        device.clone(),
        WorkerConfig {
            batch_window: Duration::from_millis(10),
            batch_quiet: Duration::from_millis(10),
            drift_interval: Duration::from_secs(3600),
            start: patchbay::decide::reachability::WorkerStart::Fresh,
            max_sessions: 1,
            probes: patchbay::probes::Probes::default(),
            backoff: Backoff::default(),
            backend: "fixture",
            batch_timeout: None,
            group_hold: patchbay::worker::GROUP_HOLD,
            group_gather: patchbay::worker::GROUP_GATHER,
        },
        vec![port.clone()],
        Arc::new(|_| {}),
    );
    let walk = Walk {
        record: MemoryRecord {
            status: Mutex::new(PortStatus::default()),
            finalizer: Mutex::new(false),
            switch: switch.clone(),
            port: port.clone(),
            step: Mutex::new(None),
        },
        device: DeviceHandle {
            worker: Arc::new(worker),
            capabilities: device.capabilities(),
        },
        definition,
        ledger: StatusLedger::default(),
    };

    println!(
        "\nSwitchPort server-7-eth0 -> fixture switch tor-1, port {} (vlanRange 10, 100-199)\n",
        walk.definition.name
    );
    println!("  {:<44} {:<12} device", "step", "state");
    walk.record
        .step
        .lock()
        .unwrap()
        .replace("SwitchPort created".into());
    walk.record.show("(none)");
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
    tenant.spec.port.vlans.push(patchbay::api::VlanSpec {
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
    switch.tamper(&port, |p| p.vlans = Some(VlanMode::Unconfigured));
    walk.record
        .step
        .lock()
        .unwrap()
        .replace("someone wipes the port's VLANs by hand".into());
    walk.record.show("Active");
    if let (Some(observed), Ok(desired)) = (
        switch.port_state(&port),
        patchbay::decide::validate::configuration_to_desired(&tenant.spec, port.clone()),
    ) {
        let fields: Vec<String> = diff(&desired, &observed)
            .iter()
            .map(ToString::to_string)
            .collect();
        println!("    drift: device has {fields:?} different");
    }
    walk.reconcile("periodic drift check", Some(&tenant), false, true)
        .await?;
    let mut bad = tenant.clone();
    bad.spec.port.vlans.push(patchbay::api::VlanSpec {
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

//! The port cycle every backend's operator test walks, against a real device read
//! back through `device` (another path than the backend under test where one
//! exists): link the `tenant-web` configuration, edit it, undo a change made behind
//! patchbay's back, unlink.

use kube::api::{Patch, PatchParams};
use patchbay::api::{PortState, SwitchPortConfiguration};
use patchbay_providers::values::{PortName, VlanId};
use patchbay_providers::{AdminState, DesiredPort, Device, ObservedPort, VlanMode};
use serde_json::json;

use super::env::Env;
use super::eventually;

fn port(name: &str) -> PortName {
    PortName::parse(name).unwrap()
}

fn vlan(n: u16) -> VlanId {
    VlanId::new(n).unwrap()
}

/// What the edited configuration reads as: access VLAN 300, no description.
fn edited(o: &ObservedPort) -> bool {
    o.vlans == Some(VlanMode::Access { vlan: vlan(300) }) && o.description == Some(None)
}

/// Links `tenant-web` (untagged 100, VLAN 200 "storage", a description) to
/// `port_key` and checks the device carries it while `untouched` stays clean; then
/// edits the configuration to access VLAN 300 without a description and waits for
/// the device and the port to follow.
pub async fn configure_then_edit(
    env: &Env,
    port_key: &str,
    device: &dyn Device,
    device_port: &str,
    untouched: &str,
) {
    env.configuration(
        "tenant-web",
        json!({"untaggedVLAN": 100, "vlans": [{"id": 200, "name": "storage"}],
               "description": "tenant web"}),
    )
    .await;
    env.link(port_key, Some("tenant-web")).await;
    env.wait_state_within(port_key, PortState::Active, 90).await;
    let observed = device.get_port(&port(device_port)).await.unwrap();
    assert_eq!(
        observed.vlans,
        Some(VlanMode::Trunk {
            native: Some(vlan(100)),
            allowed: [vlan(200)].into_iter().collect(),
        })
    );
    assert_eq!(observed.admin, Some(AdminState::Up));
    assert_eq!(
        observed.description.flatten().map(|d| d.to_string()),
        Some("tenant web".into())
    );
    assert_eq!(
        device.get_port(&port(untouched)).await.unwrap().vlans,
        Some(VlanMode::Unconfigured)
    );

    env.api::<SwitchPortConfiguration>()
        .patch(
            "tenant-web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"untaggedVLAN": 300, "vlans": [], "description": null}})),
        )
        .await
        .unwrap();
    eventually(90, "the device to carry access VLAN 300", || async {
        edited(&device.get_port(&port(device_port)).await.ok()?).then_some(())
    })
    .await;
    env.wait_state_within(port_key, PortState::Active, 90).await;
}

/// Another client puts the port on another VLAN through `device`, `rounds` times in
/// a row, each as soon as the last change was undone; the operator's drift sweep
/// must put it back to the edited configuration every time (a drift repaired once
/// is not let go the next time), and from the third repair on the port carries a
/// `DriftRepeated` Warning: something keeps fighting over it.
///
/// The intruder's change is not read back before the repair is waited for: the
/// sweep (every second or two in these tests) may already have undone it, and that
/// read failed when it had. That the operator repaired it is read from its own
/// count of repaired drift (the process's metrics) and from the device.
pub async fn drift_is_undone(
    env: &Env,
    port_key: &str,
    device: &dyn Device,
    device_port: &str,
    rounds: u16,
) {
    let repaired = || env.probes.metrics.drift_repaired("SwitchPort");
    for round in 1..=rounds {
        let before = repaired();
        let mut intruder = DesiredPort::clean(port(device_port));
        intruder.vlans = VlanMode::Access {
            vlan: vlan(990 + round),
        };
        device.set_port(&intruder).await.unwrap();
        eventually(90, &format!("drift {round} to be repaired"), || async {
            (repaired() > before && edited(&device.get_port(&port(device_port)).await.ok()?))
                .then_some(())
        })
        .await;
    }
    if rounds >= 3 {
        eventually(30, "the DriftRepeated Warning", || async {
            env.warnings(port_key)
                .await
                .iter()
                .any(|e| e.reason.as_deref() == Some("DriftRepeated"))
                .then_some(())
        })
        .await;
    }
}

/// Unlinks `port_key` and checks the device port is clean.
pub async fn unlink_and_clean(env: &Env, port_key: &str, device: &dyn Device, device_port: &str) {
    env.link(port_key, None).await;
    env.wait_state_within(port_key, PortState::Idle, 90).await;
    let clean = device.get_port(&port(device_port)).await.unwrap();
    assert_eq!(clean.vlans, Some(VlanMode::Unconfigured));
    assert_eq!(clean.admin, Some(AdminState::Up));
    assert_eq!(clean.description, Some(None));
}

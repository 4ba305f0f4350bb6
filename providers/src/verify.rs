//! Apply-then-read-back: the one way the operator changes a port. Does device I/O only
//! through the [`Device`] it is given.
//!
//! A backend's word that it applied something is not enough: every change is read back
//! and compared with [`diff`], and a mismatch is a [`DeviceError::VerificationFailed`].
//! A desired state that needs a capability the backend lacks is refused before
//! anything is sent.

use crate::device::{Device, HeldBy, Hold, PortChange, PortOperation, PortResult};
use crate::error::DeviceError;
use crate::model::{DesiredPort, diff};

/// Refuses `desired` when the backend lacks a capability it needs.
pub fn check_capabilities(switch: &dyn Device, desired: &DesiredPort) -> Result<(), DeviceError> {
    match switch.capabilities().missing_for(desired).first() {
        Some(&capability) => Err(DeviceError::Unsupported { capability }),
        None => Ok(()),
    }
}

/// Applies `desired` to its port and proves it by reading the port back.
pub async fn apply_verified(
    switch: &dyn Device,
    desired: &DesiredPort,
) -> Result<PortChange, DeviceError> {
    check_capabilities(switch, desired)?;
    let change = switch.set_port(desired).await?;
    verify(switch, desired).await?;
    Ok(change)
}

/// Resets the port and proves it is clean by reading it back.
pub async fn reset_verified(
    switch: &dyn Device,
    port: &crate::values::PortName,
) -> Result<PortChange, DeviceError> {
    let change = switch.reset_port(port).await?;
    verify(switch, &DesiredPort::clean(port.clone())).await?;
    Ok(change)
}

/// Applies a batch and verifies every port that reported success with one read
/// ([`Device::apply_and_read`]: the same session where the backend can). Ports that fail the capability check are not sent at all.
pub async fn apply_batch_verified(
    switch: &dyn Device,
    ops: &[PortOperation],
) -> Result<Vec<PortResult>, DeviceError> {
    Ok(apply_held_verified(switch, ops, None).await?.0)
}

/// [`apply_batch_verified`], for a rollout wave's batch held on the device
/// (`hold`, [`Device::apply_and_read_held`]) when one is given: also says who keeps
/// the batch's way back.
pub async fn apply_held_verified(
    switch: &dyn Device,
    ops: &[PortOperation],
    hold: Option<&Hold>,
) -> Result<(Vec<PortResult>, HeldBy), DeviceError> {
    let mut refused = Vec::new();
    let mut sendable = Vec::new();
    for op in ops {
        match check_capabilities(switch, &op.target()) {
            Ok(()) => sendable.push(op.clone()),
            Err(e) => refused.push(PortResult {
                port: op.port().clone(),
                outcome: Err(e),
            }),
        }
    }
    let (mut results, observed, held) = match hold {
        _ if sendable.is_empty() => (Vec::new(), Vec::new(), HeldBy::Nothing),
        Some(hold) => switch.apply_and_read_held(&sendable, hold).await?,
        None => {
            let (results, reads) = switch.apply_and_read(&sendable).await?;
            (results, reads, HeldBy::Nothing)
        }
    };
    for (port, read) in observed {
        let Some(result) = results.iter_mut().find(|r| r.port == port) else {
            continue;
        };
        let Some(op) = sendable.iter().find(|op| *op.port() == port) else {
            continue;
        };
        match read {
            Err(e) => result.outcome = Err(e),
            Ok(obs) => {
                let fields = diff(&op.target(), &obs);
                if !fields.is_empty() {
                    result.outcome = Err(DeviceError::VerificationFailed {
                        port: port.to_string(),
                        fields,
                    });
                }
            }
        }
    }
    results.extend(refused);
    // Report in input order.
    results.sort_by_key(|r| ops.iter().position(|op| *op.port() == r.port));
    Ok((results, held))
}

async fn verify(switch: &dyn Device, desired: &DesiredPort) -> Result<(), DeviceError> {
    let observed = switch.get_port(&desired.port).await?;
    let fields = diff(desired, &observed);
    if fields.is_empty() {
        Ok(())
    } else {
        Err(DeviceError::VerificationFailed {
            port: desired.port.to_string(),
            fields,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::MockDevice;
    use crate::model::{Capabilities, Capability, ObservedPort, PortField, VlanMode};
    use crate::values::{PortName, VlanId};

    fn desired_access(vlan: u16) -> DesiredPort {
        let mut d = DesiredPort::clean(PortName::parse("Gi0/1").unwrap());
        d.vlans = VlanMode::Access {
            vlan: VlanId::new(vlan).unwrap(),
        };
        d
    }

    #[tokio::test]
    async fn a_matching_read_back_confirms_the_change() {
        let desired = desired_access(100);
        let mut sw = MockDevice::new();
        sw.expect_capabilities().return_const(Capabilities::all());
        sw.expect_set_port()
            .times(1)
            .returning(|_| Ok(PortChange::Changed));
        let echo = ObservedPort::from_desired(&desired);
        sw.expect_get_port()
            .times(1)
            .returning(move |_| Ok(echo.clone()));
        assert_eq!(
            apply_verified(&sw, &desired).await.unwrap(),
            PortChange::Changed
        );
    }

    #[tokio::test]
    async fn a_device_that_silently_ignores_the_change_is_caught() {
        let desired = desired_access(100);
        let mut sw = MockDevice::new();
        sw.expect_capabilities().return_const(Capabilities::all());
        sw.expect_set_port().returning(|_| Ok(PortChange::Changed));
        let mut stale = ObservedPort::from_desired(&desired);
        stale.vlans = Some(VlanMode::Access {
            vlan: VlanId::new(1).unwrap(),
        });
        sw.expect_get_port().returning(move |_| Ok(stale.clone()));
        match apply_verified(&sw, &desired).await {
            Err(DeviceError::VerificationFailed { fields, .. }) => {
                assert_eq!(fields, vec![PortField::Vlans])
            }
            other => panic!("expected a verification failure, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn a_missing_capability_sends_nothing() {
        let desired = desired_access(100);
        let mut sw = MockDevice::new();
        sw.expect_capabilities()
            .return_const(Capabilities::new([Capability::Trunk]));
        sw.expect_set_port().never();
        sw.expect_get_port().never();
        let err = apply_verified(&sw, &desired).await.unwrap_err();
        assert!(matches!(
            err,
            DeviceError::Unsupported {
                capability: Capability::AccessVlan
            }
        ));
    }

    #[tokio::test]
    async fn a_failed_set_is_not_read_back() {
        let desired = desired_access(100);
        let mut sw = MockDevice::new();
        sw.expect_capabilities().return_const(Capabilities::all());
        sw.expect_set_port().returning(|_| {
            Err(DeviceError::CommandRejected {
                command: "switchport access vlan 100".into(),
                output: "% Invalid input".into(),
            })
        });
        sw.expect_get_port().never();
        let err = apply_verified(&sw, &desired).await.unwrap_err();
        assert!(matches!(err, DeviceError::CommandRejected { .. }), "{err}");
        assert!(err.to_string().contains("switchport access vlan 100"));
    }
}

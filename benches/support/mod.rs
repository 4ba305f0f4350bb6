//! What the backend benchmarks share: the median, a batch of access-VLAN changes and
//! timing one verified batch as the switch worker runs it.

use std::time::{Duration, Instant};

use patchbay_providers::cli::{Auth, CliOptions, CliSwitch, HostKeyPolicy, SshTarget, dialect};
use patchbay_providers::secret::SecretString;
use patchbay_providers::values::{PortName, VlanId};
use patchbay_providers::verify::apply_batch_verified;
use patchbay_providers::{DesiredPort, Device, PortChange, PortOperation, VlanMode};
use patchbay_testbed::SimSwitch;

/// The median of `v` (upper middle for even lengths).
pub fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// Every port of `ports` as an access port on `vlan`.
pub fn ops(ports: &[PortName], vlan: u16) -> Vec<PortOperation> {
    ports
        .iter()
        .map(|p| {
            let mut d = DesiredPort::clean(p.clone());
            d.vlans = VlanMode::Access {
                vlan: VlanId::new(vlan).unwrap(),
            };
            PortOperation::Set(d)
        })
        .collect()
}

/// Applies `ops` with `apply_batch_verified` (apply, then one verifying read) and
/// returns how long it took; every port must have changed.
pub async fn timed(sw: &dyn Device, ops: &[PortOperation]) -> Duration {
    let t = Instant::now();
    let results = apply_batch_verified(sw, ops).await.expect("batch");
    let elapsed = t.elapsed();
    for r in results {
        assert_eq!(r.outcome, Ok(PortChange::Changed), "{}", r.port);
    }
    elapsed
}

/// The SSH backend for a simulated switch, dialect `os`, its host key pinned.
#[allow(dead_code)]
pub fn ssh_backend(sim: &SimSwitch, os: &str) -> CliSwitch {
    CliSwitch::new(
        SshTarget {
            address: sim.address.clone(),
            port: sim.port,
            username: sim.username.clone(),
            auth: Auth::Password(SecretString::new(sim.password.clone())),
            host_key: HostKeyPolicy::Fingerprint(sim.host_key_fingerprint.clone()),
            connect_timeout: Duration::from_secs(10),
        },
        Some(SecretString::new(sim.enable_password.clone())),
        dialect::for_os(os).unwrap(),
        CliOptions::default(),
    )
}

//! The drift sweep and the probe: one read of every tracked port (or the probe ports
//! while the switch is down), compared with what each port established; reachability
//! transitions. Device I/O.

use super::*;

/// The drift sweep and reachability check in one read: every tracked port (or one
/// probe port when none is tracked). Notifies ports whose drift verdict changed and
/// records whether the switch answered.
pub(super) async fn check(switch: &dyn Device, shared: &Shared) {
    if !shared.probes.devices.allows() {
        shared.health.lock().link.probing = false;
        return;
    }
    let tracked: Vec<(PortKey, DesiredPort)> = shared
        .tracking
        .lock()
        .desired
        .iter()
        .map(|(k, t)| (k.clone(), t.desired()))
        .collect();
    let mut names: Vec<PortName> = tracked.iter().map(|(_, d)| d.port.clone()).collect();
    if names.is_empty() {
        names.extend(shared.health.lock().probe_ports.first().cloned());
    }
    if names.is_empty() {
        // Nothing to read: reachability stays as it is.
        shared.health.lock().link.probing = false;
        return;
    }
    names.sort();
    names.dedup();
    let observed = match bounded(shared, switch, switch.get_ports(&names)).await {
        Ok(o) => o,
        Err(e) if e.is_session_failure() => {
            shared.fail(e, true);
            return;
        }
        Err(e) => {
            tracing::debug!(error = %e, "the drift sweep could not read the switch");
            shared.health.lock().link.probing = false;
            return;
        }
    };
    if let Some(e) = observed
        .iter()
        .filter_map(|(_, r)| r.as_ref().err())
        .find(|e| e.is_session_failure())
    {
        shared.fail(e.clone(), true);
        return;
    }
    shared
        .probes
        .metrics
        .drift_sweeps
        .get_or_create(&BackendLabel {
            backend: shared.backend(),
        })
        .inc();
    let observed: HashMap<PortName, ObservedPort> = observed
        .into_iter()
        .filter_map(|(p, r)| r.ok().map(|o| (p, o)))
        .collect();
    let mut changed = Vec::new();
    tracing::debug!(ports = names.len(), "drift sweep read the switch");
    {
        let mut t = shared.tracking.lock();
        for (key, desired) in tracked {
            let Some(obs) = observed.get(&desired.port) else {
                continue;
            };
            let drifted = !diff(&desired, obs).is_empty();
            tracing::debug!(port = %desired.port, drifted, "drift verdict");
            let told = t.pending.get(&key).copied();
            if t.sweep_verdict(&key, drifted) {
                if drifted && told != Some(true) {
                    shared
                        .probes
                        .metrics
                        .drift_found
                        .get_or_create(&BackendLabel {
                            backend: shared.backend(),
                        })
                        .inc();
                }
                changed.push(key);
            }
        }
    }
    shared.succeed();
    for key in changed {
        (shared.notify)(Notice::Port(key));
    }
}

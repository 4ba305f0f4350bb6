//! One batch on the device, within the bound leader election sets: one session, every
//! port's change in the order the backend needs, each port answered with its own
//! result, a silent device told from a slow one (`crate::decide::lease::overrun`).
//! Device I/O.

use super::*;

/// `f`, a session of `switch`, within the batch bound if there is one, counted as
/// an open session.
pub(super) async fn bounded<T>(
    shared: &Shared,
    switch: &dyn Device,
    f: impl std::future::Future<Output = Result<T, DeviceError>>,
) -> Result<T, DeviceError> {
    let open = BackendLabel {
        backend: shared.backend(),
    };
    shared.probes.metrics.sessions.get_or_create(&open).inc();
    let result = within_bound(shared, switch, f).await;
    shared.probes.metrics.sessions.get_or_create(&open).dec();
    result
}

/// A session that runs into the bound is abandoned; whether the device was silent
/// (the switch fails) or slow (its ports retry) is [`lease::overrun`]'s to say,
/// from when the device last answered.
pub(super) async fn within_bound<T>(
    shared: &Shared,
    switch: &dyn Device,
    f: impl std::future::Future<Output = Result<T, DeviceError>>,
) -> Result<T, DeviceError> {
    match shared.batch_timeout {
        None => f.await,
        Some(limit) => {
            let started = std::time::Instant::now();
            match tokio::time::timeout(limit, f).await {
                Ok(r) => r,
                Err(_) => Err(lease::overrun(
                    limit,
                    started,
                    switch.heard().map(|h| h.last()),
                )),
            }
        }
    }
}

/// Runs one batch: all writes in one `apply_batch` (split into rounds only if a port
/// appears twice), all reads in one `get_ports`. A session failure marks the switch
/// down (once for the batch) and the operations it hit are answered with the outage.
/// Refused (`NotLeading`) while this replica may not touch devices (it lost, or
/// never held, the leader lease): [`crate::lease::DeviceGate`].
pub(super) async fn run_batch(switch: &dyn Device, shared: &Shared, batch: Vec<Job>) {
    if !shared.probes.devices.allows() {
        for job in batch {
            match job {
                Job::Apply { reply, .. } => {
                    let _ = reply.send(Err(WorkerError::NotLeading));
                }
                Job::Read { reply, .. } => {
                    let _ = reply.send(Err(WorkerError::NotLeading));
                }
            }
        }
        return;
    }
    let as_probe = shared.health.lock().link.probing;
    let outage: Mutex<Option<Outage>> = Mutex::new(None);
    let port_error = |e: DeviceError, key: Option<&PortKey>| {
        if !e.is_session_failure() {
            return WorkerError::Device(e);
        }
        shared.wait_for_switch(key);
        let mut recorded = outage.lock();
        let o = recorded
            .get_or_insert_with(|| shared.fail(e, as_probe))
            .clone();
        WorkerError::SwitchDown(Box::new(o))
    };
    let mut writes = Vec::new();
    let mut reads = Vec::new();
    for job in batch {
        match job {
            Job::Apply { key, op, reply } => writes.push((key, op, reply)),
            Job::Read { key, port, reply } => reads.push((key, port, reply)),
        }
    }
    while !writes.is_empty() {
        let mut seen = std::collections::HashSet::new();
        let (round, rest): (Vec<_>, Vec<_>) = writes
            .into_iter()
            .partition(|(_, op, _)| seen.insert(op.port().clone()));
        writes = rest;
        let ops: Vec<PortOperation> = round.iter().map(|(_, op, _)| op.clone()).collect();
        let backend = shared.backend();
        let metrics = &shared.probes.metrics;
        metrics
            .batch_size
            .get_or_create(&BackendLabel { backend })
            .observe(ops.len() as f64);
        let started = std::time::Instant::now();
        let applied = bounded(shared, switch, apply_batch_verified(switch, &ops)).await;
        metrics
            .device_seconds
            .get_or_create(&BackendLabel { backend })
            .observe(started.elapsed().as_secs_f64());
        match &applied {
            Ok(results) => {
                for r in results {
                    let outcome = match &r.outcome {
                        Ok(PortChange::Changed) => "changed",
                        Ok(PortChange::Unchanged) => "unchanged",
                        Err(e) => e.category(),
                    };
                    metrics
                        .device_operations
                        .get_or_create(&OperationLabels { backend, outcome })
                        .inc();
                }
            }
            Err(e) => {
                metrics
                    .device_operations
                    .get_or_create(&OperationLabels {
                        backend,
                        outcome: e.category(),
                    })
                    .inc_by(ops.len() as u64);
            }
        }
        match applied {
            Ok(results) => {
                let mut by_port: HashMap<PortName, Result<PortChange, DeviceError>> =
                    results.into_iter().map(|r| (r.port, r.outcome)).collect();
                if !by_port
                    .values()
                    .any(|r| r.as_ref().is_err_and(DeviceError::is_session_failure))
                {
                    shared.succeed();
                }
                for (key, op, reply) in round {
                    let outcome = by_port.remove(op.port()).unwrap_or_else(|| {
                        Err(DeviceError::Protocol {
                            during: format!("configuring {}", op.port()),
                            cause: Cause::msg("the batch reported no result for this port"),
                        })
                    });
                    let _ = reply.send(outcome.map_err(|e| port_error(e, key.as_ref())));
                }
            }
            Err(e) => {
                // The session itself failed: nothing is known applied.
                for (key, _, reply) in round {
                    let _ = reply.send(Err(port_error(e.clone(), key.as_ref())));
                }
            }
        }
    }
    if !reads.is_empty() {
        let mut names: Vec<PortName> = reads.iter().map(|(_, p, _)| p.clone()).collect();
        names.sort();
        names.dedup();
        match bounded(shared, switch, switch.get_ports(&names)).await {
            Ok(observed) => {
                let by_port: HashMap<PortName, Result<ObservedPort, DeviceError>> =
                    observed.into_iter().collect();
                if !by_port
                    .values()
                    .any(|r| r.as_ref().is_err_and(DeviceError::is_session_failure))
                {
                    shared.succeed();
                }
                for (key, port, reply) in reads {
                    let r = by_port.get(&port).cloned().unwrap_or_else(|| {
                        Err(DeviceError::UnknownPort {
                            port: port.to_string(),
                        })
                    });
                    let _ = reply.send(r.map_err(|e| port_error(e, key.as_ref())));
                }
            }
            Err(e) => {
                for (key, _, reply) in reads {
                    let _ = reply.send(Err(port_error(e.clone(), key.as_ref())));
                }
            }
        }
    }
    if as_probe {
        // A probe that ended without a verdict (a protocol error) must not block
        // the next one.
        shared.health.lock().link.probing = false;
    }
}

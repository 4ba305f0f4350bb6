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

/// A write of a batch: the port, its operation, its hold, where to answer.
type Write = (
    Option<PortKey>,
    PortOperation,
    Option<Hold>,
    oneshot::Sender<Result<PortChange, WorkerError>>,
);

/// Runs one batch: the writes in one `apply_batch` per hold (none, or a rollout
/// wave's: see "Held waves"; split into rounds only if a port appears twice), all
/// reads in one `get_ports`, then the holds to settle. A session failure marks the switch
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
                Job::Settle { reply, .. } => {
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
    let mut writes: Vec<Write> = Vec::new();
    let mut reads = Vec::new();
    let mut settles = Vec::new();
    for job in batch {
        match job {
            Job::Apply {
                key,
                op,
                hold,
                reply,
            } => writes.push((key, op, hold, reply)),
            Job::Read { key, port, reply } => reads.push((key, port, reply)),
            Job::Settle {
                token,
                confirm,
                reply,
            } => settles.push((token, confirm, reply)),
        }
    }
    // A wave's writes go in a transaction of their own: the writes outside any
    // wave first, then each wave's (see "Held waves").
    let mut groups: Vec<(Option<Hold>, Vec<Write>)> = Vec::new();
    for w in writes {
        match groups
            .iter_mut()
            .find(|(h, _)| h.as_ref().map(|h| &h.token) == w.2.as_ref().map(|h| &h.token))
        {
            Some((_, ws)) => ws.push(w),
            None => groups.push((w.2.clone(), vec![w])),
        }
    }
    groups.sort_by_key(|(h, _)| h.is_some());
    for (hold, group) in groups {
        let token = hold.as_ref().map(|h| h.token.as_str());
        let Some(follow_up) = shared.may_commit(token) else {
            shared.keep_behind(
                group
                    .into_iter()
                    .map(|(key, op, hold, reply)| Job::Apply {
                        key,
                        op,
                        hold,
                        reply,
                    })
                    .collect(),
            );
            continue;
        };
        let hold = hold.map(|h| Hold { follow_up, ..h });
        write_group(switch, shared, group, hold.as_ref(), &port_error).await;
    }
    for (token, confirm, reply) in settles {
        if let Some(before) = shared.settled_before(&token, confirm) {
            let _ = reply.send(Ok(before));
            continue;
        }
        let settled = if shared.settle_needs_device(&token) {
            bounded(shared, switch, switch.settle_hold(&token, confirm)).await
        } else {
            Ok(Settled::NeverHeld)
        };
        match &settled {
            Ok(s) => {
                tracing::info!(token = %token, confirm, settled = ?s, "held wave settled on the device");
                shared.hold_settled(&token, confirm, s);
            }
            Err(e) => tracing::warn!(token = %token, confirm, error = %e, "held wave not settled"),
        }
        let _ = reply.send(settled.map_err(|e| port_error(e, None)));
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

/// One group of writes under the same hold (or none), in rounds of distinct ports,
/// each answered with its own result.
async fn write_group(
    switch: &dyn Device,
    shared: &Shared,
    mut writes: Vec<Write>,
    hold: Option<&Hold>,
    port_error: &(dyn Fn(DeviceError, Option<&PortKey>) -> WorkerError + Sync),
) {
    while !writes.is_empty() {
        let mut seen = std::collections::HashSet::new();
        let (round, rest): (Vec<_>, Vec<_>) = writes
            .into_iter()
            .partition(|(_, op, _, _)| seen.insert(op.port().clone()));
        writes = rest;
        let ops: Vec<PortOperation> = round.iter().map(|(_, op, _, _)| op.clone()).collect();
        let backend = shared.backend();
        let metrics = &shared.probes.metrics;
        metrics
            .batch_size
            .get_or_create(&BackendLabel { backend })
            .observe(ops.len() as f64);
        let started = std::time::Instant::now();
        let applied = bounded(shared, switch, apply_held_verified(switch, &ops, hold)).await;
        metrics
            .device_seconds
            .get_or_create(&BackendLabel { backend })
            .observe(started.elapsed().as_secs_f64());
        match &applied {
            Ok((results, _)) => {
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
            Ok((results, held)) => {
                if let Some(h) = hold {
                    shared.wrote_under(h, held == HeldBy::Device);
                }
                let mut by_port: HashMap<PortName, Result<PortChange, DeviceError>> =
                    results.into_iter().map(|r| (r.port, r.outcome)).collect();
                if !by_port
                    .values()
                    .any(|r| r.as_ref().is_err_and(DeviceError::is_session_failure))
                {
                    shared.succeed();
                }
                for (key, op, _, reply) in round {
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
                for (key, _, _, reply) in round {
                    let _ = reply.send(Err(port_error(e.clone(), key.as_ref())));
                }
            }
        }
    }
}

//! The worker's task: receives jobs, gathers them into batches by the batch window,
//! replaces the device when the ProviderSwitch changed (after the old one's last
//! session), and closes idle sessions when this replica stops leading. Device I/O
//! through the batch and sweep steps.

use super::*;

/// A new device for the worker (its ProviderSwitch or credentials changed).
pub(super) struct Replacement {
    pub(super) device: Arc<dyn Device>,
    pub(super) max_sessions: usize,
    pub(super) backend: &'static str,
}

/// The device the worker drives now and the sessions it may open to it.
pub(super) struct Driver {
    pub(super) device: Arc<dyn Device>,
    pub(super) sessions: Arc<Semaphore>,
    pub(super) max: u32,
}

impl Driver {
    pub(super) fn new(device: Arc<dyn Device>, max_sessions: usize) -> Self {
        let max = max_sessions.clamp(1, Semaphore::MAX_PERMITS) as u32;
        Self {
            device,
            sessions: Arc::new(Semaphore::new(max as usize)),
            max,
        }
    }

    /// Waits for every session of this driver to end (none opens afterwards).
    pub(super) async fn drain(&self) {
        let _ = self.sessions.acquire_many(self.max).await;
    }
}

pub(super) async fn run(
    device: Arc<dyn Device>,
    config: WorkerConfig,
    mut rx: mpsc::UnboundedReceiver<Box<Job>>,
    mut replacements: mpsc::UnboundedReceiver<Replacement>,
    shared: Arc<Shared>,
) {
    let mut driver = Driver::new(device, config.max_sessions);
    // A fresh switch's first tick is immediate: the first reachability check. A
    // resumed one's comes on its own schedule.
    let first = match config.start {
        WorkerStart::Fresh => Duration::ZERO,
        WorkerStart::Resumed { first_sweep } => first_sweep,
    };
    let mut sweep =
        tokio::time::interval_at(tokio::time::Instant::now() + first, config.drift_interval);
    sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_arrival: Option<tokio::time::Instant> = None;
    let mut lobby = Lobby::default();
    let mut gate = shared.probes.devices.subscribe();
    loop {
        let probe_in = shared.probe_wait();
        let group_due = lobby.next_deadline(&config);
        let hold_due = shared.hold_due();
        tokio::select! {
            biased;
            replacement = replacements.recv() => {
                let Some(r) = replacement else { return };
                // One writer: every session of the old device ends (a kept one
                // too) before the first one of the new opens.
                driver.drain().await;
                driver.device.close_idle().await;
                driver = Driver::new(r.device, r.max_sessions);
                *shared.backend.lock() = r.backend;
                shared.restart();
                sweep.reset_immediately();
            }
            Ok(()) = gate.changed() => {
                // The lease is lost: a session kept for the next batch ends now.
                if !*gate.borrow_and_update() {
                    driver.device.close_idle().await;
                }
            }
            job = rx.recv() => {
                let Some(first) = job else { return };
                if matches!(*first, Job::Settle { .. }) {
                    // Settling a held wave writes no port: it goes at once, and is
                    // no arrival that makes the next write wait for a burst.
                    if !dispatch(&driver, &shared, vec![*first], &mut rx, &mut lobby, &mut last_arrival).await {
                        return;
                    }
                    continue;
                }
                let mut batch = vec![*first];
                let now = tokio::time::Instant::now();
                // A change after a quiet spell of a whole window goes at once; one in
                // a burst gathers the others.
                let burst = last_arrival.is_some_and(|t| now - t < config.batch_window);
                last_arrival = Some(now);
                let cap = now + config.batch_window;
                if burst {
                    loop {
                        let until = cap.min(tokio::time::Instant::now() + config.batch_quiet);
                        match tokio::time::timeout_at(until, rx.recv()).await {
                            Ok(Some(job)) => {
                                last_arrival = Some(tokio::time::Instant::now());
                                batch.push(*job);
                            }
                            _ => break,
                        }
                    }
                }
                let mut batch = lobby.admit(shared.hold_back(batch));
                batch.extend(lobby.release(&config, &shared));
                if !dispatch(&driver, &shared, batch, &mut rx, &mut lobby, &mut last_arrival).await {
                    return;
                }
            }
            _ = tokio::time::sleep_until(group_due.unwrap_or_else(tokio::time::Instant::now)), if group_due.is_some() => {
                let batch = lobby.release(&config, &shared);
                if !dispatch(&driver, &shared, batch, &mut rx, &mut lobby, &mut last_arrival).await {
                    return;
                }
            }
            _ = tokio::time::sleep_until(hold_due.unwrap_or_else(tokio::time::Instant::now)), if hold_due.is_some() => {
                // The held wave timed out: the device took it back by itself, and
                // commits again.
                let batch = lobby.admit(shared.release_held_back());
                if !dispatch(&driver, &shared, batch, &mut rx, &mut lobby, &mut last_arrival).await {
                    return;
                }
            }
            _ = tokio::time::sleep(probe_in.unwrap_or_default()), if probe_in.is_some() => {
                shared.health.lock().link.probing = true;
                let Ok(permit) = driver.sessions.clone().acquire_owned().await else { return };
                let (device, shared) = (driver.device.clone(), shared.clone());
                tokio::spawn(async move {
                    check(device.as_ref(), &shared).await;
                    close_idle_if_not_leading(device.as_ref(), &shared).await;
                    drop(permit);
                });
            }
            _ = sweep.tick() => {
                {
                    let mut h = shared.health.lock();
                    // While the switch is down, the probe schedule does the checking.
                    if matches!(h.link.reach, Reachability::Down(_)) || h.sweeping {
                        continue;
                    }
                    h.sweeping = true;
                }
                let Ok(permit) = driver.sessions.clone().acquire_owned().await else { return };
                let (device, shared) = (driver.device.clone(), shared.clone());
                tokio::spawn(async move {
                    check(device.as_ref(), &shared).await;
                    close_idle_if_not_leading(device.as_ref(), &shared).await;
                    shared.health.lock().sweeping = false;
                    drop(permit);
                });
            }
            _ = shared.changed.notified() => {
                // Tracking or the probe schedule changed: a held group may go; a
                // held wave was settled: the writes behind it may.
                let mut batch = lobby.admit(shared.release_held_back());
                batch.extend(lobby.release(&config, &shared));
                if !dispatch(&driver, &shared, batch, &mut rx, &mut lobby, &mut last_arrival).await {
                    return;
                }
            }
        }
    }
}

/// Runs `batch` on a session of its own, or refuses it at once while the switch is
/// down and no probe is due. What arrived while it waited for a session joins it
/// (members of a group go back to the lobby). False when the worker is stopping.
pub(super) async fn dispatch(
    driver: &Driver,
    shared: &Arc<Shared>,
    mut batch: Vec<Job>,
    rx: &mut mpsc::UnboundedReceiver<Box<Job>>,
    lobby: &mut Lobby,
    last_arrival: &mut Option<tokio::time::Instant>,
) -> bool {
    if batch.is_empty() {
        return true;
    }
    match shared.admit() {
        Admission::Refuse(outage) => {
            for job in batch {
                shared.wait_for_switch(job.key());
                job.refuse(&outage);
            }
            true
        }
        Admission::Run => {
            let Ok(permit) = driver.sessions.clone().acquire_owned().await else {
                return false;
            };
            let mut late = Vec::new();
            while let Ok(job) = rx.try_recv() {
                *last_arrival = Some(tokio::time::Instant::now());
                late.push(*job);
            }
            batch.extend(lobby.admit(shared.hold_back(late)));
            let (device, shared) = (driver.device.clone(), shared.clone());
            tokio::spawn(async move {
                run_batch(device.as_ref(), &shared, batch).await;
                close_idle_if_not_leading(device.as_ref(), &shared).await;
                drop(permit);
            });
            true
        }
    }
}

/// Closes the session a backend kept for the next batch when the lease was lost
/// while the session ran (the gate's change found nothing kept then).
pub(super) async fn close_idle_if_not_leading(device: &dyn Device, shared: &Shared) {
    if !shared.probes.devices.allows() {
        device.close_idle().await;
    }
}

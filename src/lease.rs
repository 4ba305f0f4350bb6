//! Leader election on a `coordination.k8s.io/v1` Lease, the way client-go's
//! leaderelection does it: one replica holds the Lease and acts; the others retry
//! every `retryPeriod` and take it over once it has not been renewed for
//! `leaseDuration`, measured on their own clock from when they last saw it change
//! (never from the holder's timestamps, so clock skew between nodes does not
//! matter). Every write carries the Lease's resourceVersion, so two replicas never
//! both win.
//!
//! Election does not fence: a holder cut off from the API server still believes it
//! leads until it notices. So the holder stops touching devices as soon as it could
//! not renew for `renewDeadline` ([`DeviceGate`], checked by the switch
//! workers before every session), and every batch is bounded by
//! `leaseDuration − renewDeadline`: a batch started just before the deadline ends
//! before another replica can take the Lease over.
//!
//! The decision ([`crate::decide::lease::decide`]) is pure and table-tested;
//! [`Elector`] does the Kubernetes I/O.
//!
//! **Why not `kube-lease-manager`** (re-evaluated for issue 32 at 0.13.1, which does
//! support kube 5 and would add one crate to the build — measured with `cargo tree`):
//! it decides that a Lease expired from the holder's `renewTime` plus the duration,
//! compared with this node's wall clock (`SystemTime::now() > expiry`, its
//! `state.rs`), so two nodes whose clocks differ by more than the grace both act as
//! leader; this module measures on its own monotonic clock from when it last saw the
//! Lease change, as client-go does. Its durations are whole seconds, and it has no
//! renew deadline after which the holder fences itself (here: no device session
//! after `renewDeadline` without a renewal), which is what keeps two replicas off
//! one switch.

use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, PostParams};
use tokio::sync::watch;

use crate::decide::lease::{LeaseStep, Timings, decide};

/// Whether this replica may open device sessions: always without leader election;
/// with it, only while it holds the Lease and has renewed it within the deadline.
/// One per operator: the elector sets it, the switch workers check it before every
/// session and close a session kept for the next batch as soon as it closes
/// ([`DeviceGate::subscribe`]). Clones share it.
#[derive(Debug, Clone)]
pub struct DeviceGate(Arc<watch::Sender<bool>>);

impl Default for DeviceGate {
    /// Open: no election, devices allowed.
    fn default() -> Self {
        Self(Arc::new(watch::Sender::new(true)))
    }
}

impl DeviceGate {
    /// Whether device sessions may be opened now.
    pub fn allows(&self) -> bool {
        *self.0.borrow()
    }

    /// Opens or closes the gate.
    pub fn set(&self, allowed: bool) {
        self.0
            .send_if_modified(|now| std::mem::replace(now, allowed) != allowed);
    }

    /// Follows the gate: each change is seen once (`changed`).
    pub fn subscribe(&self) -> watch::Receiver<bool> {
        self.0.subscribe()
    }
}

/// What the elector reports.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Leadership {
    /// This replica leads.
    pub leading: bool,
    /// Whoever holds the Lease, as last seen (empty while nobody is known).
    pub holder: String,
}

/// One replica's side of the election.
pub struct Elector {
    api: Api<Lease>,
    name: String,
    identity: String,
    timings: Timings,
    devices: DeviceGate,
    /// Held across each of the run loop's read-and-write steps and across
    /// [`Elector::release`]; `true` once released. So a renewal never lands between
    /// the release's read and its write (the write would fail on the
    /// resourceVersion), and the loop writes nothing after it (it would take the
    /// released Lease straight back).
    released: tokio::sync::Mutex<bool>,
}

fn micro_now() -> MicroTime {
    MicroTime(jiff::Timestamp::now())
}

impl Elector {
    /// An elector for Lease `namespace/name`, as `identity` (the pod name), that
    /// opens and closes `devices`.
    pub fn new(
        client: kube::Client,
        namespace: &str,
        name: &str,
        identity: &str,
        timings: Timings,
        devices: DeviceGate,
    ) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            name: name.to_owned(),
            identity: identity.to_owned(),
            timings,
            devices,
            released: tokio::sync::Mutex::new(false),
        }
    }

    /// Tries for the Lease every retry period, renews it while held, and reports
    /// through `report`: `leading` turns true when this replica takes the Lease and
    /// false once it could not renew for the renew deadline (then devices are off
    /// limits at once, and the loop ends: the process should stop). Runs until
    /// `report` has no receiver left.
    pub async fn run(&self, report: watch::Sender<Leadership>) {
        self.devices.set(false);
        let mut seen: Option<(String, Option<String>)> = None;
        let mut seen_at = Instant::now();
        let mut renewed_at: Option<Instant> = None;
        loop {
            if report.is_closed() {
                return;
            }
            // Held until the step's outcome is acted on: a release waits for it,
            // and nothing here reopens the device gate after a release.
            let released = self.released.lock().await;
            if *released {
                return;
            }
            let result = self.try_once(&mut seen, &mut seen_at).await;
            let now = Instant::now();
            match result {
                Ok(Some(holder)) if holder == self.identity => {
                    renewed_at = Some(now);
                    self.devices.set(true);
                    report.send_if_modified(|l| {
                        let changed = !l.leading || l.holder != holder;
                        *l = Leadership {
                            leading: true,
                            holder: holder.clone(),
                        };
                        changed
                    });
                }
                Ok(Some(other)) if renewed_at.is_some() && !other.is_empty() => {
                    // Somebody else holds what this replica led with: stop at once.
                    self.devices.set(false);
                    tracing::error!(holder = %other, "lease: taken over by another replica; this replica stops touching devices");
                    report.send_modify(|l| {
                        l.leading = false;
                        l.holder = other.clone();
                    });
                    return;
                }
                Ok(holder) => {
                    let holder = holder.unwrap_or_default();
                    report.send_if_modified(|l| {
                        let changed = l.holder != holder;
                        l.holder = holder.clone();
                        changed
                    });
                }
                Err(e) => tracing::debug!(error = %e, "lease: could not read or write"),
            }
            if let Some(at) = renewed_at
                && now.duration_since(at) >= self.timings.renew_deadline
            {
                self.devices.set(false);
                tracing::error!(
                    deadline_seconds = self.timings.renew_deadline.as_secs_f64(),
                    "lease: not renewed within the deadline; this replica stops touching devices"
                );
                report.send_modify(|l| l.leading = false);
                return;
            }
            drop(released);
            tokio::time::sleep(self.timings.retry_period).await;
        }
    }

    /// One read and, when the step calls for it, one write. Returns the holder after.
    async fn try_once(
        &self,
        seen: &mut Option<(String, Option<String>)>,
        seen_at: &mut Instant,
    ) -> Result<Option<String>, kube::Error> {
        let lease = self.api.get_opt(&self.name).await?;
        let spec = lease
            .as_ref()
            .and_then(|l| l.spec.clone())
            .unwrap_or_default();
        let holder = lease
            .as_ref()
            .map(|_| spec.holder_identity.clone().unwrap_or_default());
        // A change of holder or renewal restarts this replica's clock for it.
        let record = (
            holder.clone().unwrap_or_default(),
            spec.renew_time.as_ref().map(|t| t.0.to_string()),
        );
        if seen.as_ref() != Some(&record) {
            *seen = Some(record);
            *seen_at = Instant::now();
        }
        let step = decide(
            holder.as_deref(),
            &self.identity,
            seen_at.elapsed(),
            self.timings.lease_duration,
        );
        let duration_secs =
            i32::try_from(self.timings.lease_duration.as_secs().max(1)).unwrap_or(15);
        let mine = |transitions: i32, acquired: Option<MicroTime>| LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(duration_secs),
            acquire_time: acquired.or_else(|| Some(micro_now())),
            renew_time: Some(micro_now()),
            lease_transitions: Some(transitions),
            ..Default::default()
        };
        let transitions = spec.lease_transitions.unwrap_or(0);
        match step {
            LeaseStep::Wait { holder } => Ok(Some(holder)),
            LeaseStep::Create => {
                let new = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.name.clone()),
                        ..Default::default()
                    },
                    spec: Some(mine(0, None)),
                };
                match self.api.create(&PostParams::default(), &new).await {
                    Ok(_) => {
                        tracing::info!(identity = %self.identity, "lease: acquired (created)");
                        Ok(Some(self.identity.clone()))
                    }
                    Err(kube::Error::Api(e)) if e.code == 409 => Ok(None),
                    Err(e) => Err(e),
                }
            }
            LeaseStep::Renew | LeaseStep::TakeOver => {
                let Some(mut lease) = lease else {
                    return Ok(None);
                };
                let taking = step == LeaseStep::TakeOver;
                lease.spec = Some(if taking {
                    mine(transitions + 1, None)
                } else {
                    mine(transitions, spec.acquire_time.clone())
                });
                // The resourceVersion read is the precondition: one winner.
                match self
                    .api
                    .replace(&self.name, &PostParams::default(), &lease)
                    .await
                {
                    Ok(_) => {
                        if taking {
                            tracing::info!(identity = %self.identity, previous = %record_holder(seen), "lease: acquired (taken over)");
                        }
                        Ok(Some(self.identity.clone()))
                    }
                    Err(kube::Error::Api(e)) if e.code == 409 => Ok(None),
                    Err(e) => Err(e),
                }
            }
        }
    }

    /// Gives the Lease up (on a graceful stop), so another replica takes over at its
    /// next retry instead of after the lease duration. Devices are off limits from
    /// here on, and [`Elector::run`] writes the Lease no more.
    pub async fn release(&self) {
        self.devices.set(false);
        let mut released = self.released.lock().await;
        *released = true;
        // Closed again: a step that ended while this waited for its turn may have
        // renewed and reopened the gate.
        self.devices.set(false);
        let Ok(Some(mut lease)) = self.api.get_opt(&self.name).await else {
            return;
        };
        let Some(spec) = lease.spec.as_mut() else {
            return;
        };
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return;
        }
        spec.holder_identity = Some(String::new());
        spec.renew_time = Some(micro_now());
        match self
            .api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => tracing::info!(identity = %self.identity, "lease: released"),
            Err(e) => tracing::warn!(error = %e, "lease: could not release"),
        }
    }
}

fn record_holder(seen: &Option<(String, Option<String>)>) -> String {
    seen.as_ref().map(|(h, _)| h.clone()).unwrap_or_default()
}

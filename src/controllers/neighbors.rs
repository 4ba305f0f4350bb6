//! Reads a Switch's neighbour sources (`spec.neighbors`) when a read is due and takes
//! the answer into the Switch's status ([`crate::decide::neighbors`] decides what is
//! written). Called by the Switch controller within its reconcile; device I/O (one
//! session per read, through the source's own login) and cache reads.
//!
//! When reads happen: at the first reconcile of a Switch that names a source (and
//! at every operator start), then every `intervalSeconds` (default 30) — the Switch
//! controller requeues for it — whatever else wakes the Switch in between. A read
//! that fails is tried again at the next interval, not sooner: a source that is down
//! costs one login attempt per interval. A rollout whose `NeighborSeen` gate waits on
//! this Switch asks for a read after a time
//! ([`crate::api::keys::NEIGHBORS_READ_AFTER_ANNOTATION`]): the Switch is read then,
//! not up to an interval later, and that read is written even when it found nothing
//! new, so `neighborsReadAt` is the gate's evidence. The source is a device of its own (an
//! `os: linux` ProviderSwitch), so its reads never hold a session of the switch
//! worker that configures the ports.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use kube::ResourceExt;

use super::context::Context;
use crate::api::{Backend, DeviceOs, Switch, SwitchStatus};
use crate::decide::failure::Failure;
use crate::decide::neighbors;

/// When each Switch (`namespace/name`) was last read (as a monotonic instant, for
/// the interval, and as a time, for a rollout's read-after): reads follow this, not
/// the status (which is written only when something changed).
#[derive(Default)]
pub struct ReadTimes(
    parking_lot::Mutex<std::collections::HashMap<String, (Instant, jiff::Timestamp)>>,
);

impl ReadTimes {
    /// Forgets `switch` (it is gone, or reads no neighbours any more).
    pub fn forget(&self, switch: &Switch) {
        crate::decide::slack::remove(&mut self.0.lock(), &key(switch));
    }

    /// How long until `switch`'s next read at `now`, reading `every` and when a
    /// rollout asks for a read after `read_after`; `None`: a read is due now, and it
    /// is recorded as started. A read that started after the asked time answers
    /// it, whether it succeeded or not: a source that is down is not tried again
    /// sooner for being asked.
    fn wait_or_start(
        &self,
        switch: &Switch,
        every: Duration,
        read_after: Option<jiff::Timestamp>,
        now: jiff::Timestamp,
    ) -> Option<Duration> {
        let mut times = self.0.lock();
        let key = key(switch);
        if let Some((since, started)) = times.get(&key).map(|(i, t)| (i.elapsed(), *t)) {
            let asked = read_after.is_some_and(|after| after <= now && started < after);
            if since < every && !asked {
                return Some(until_asked(every - since, read_after, now));
            }
        }
        times.insert(key, (Instant::now(), now));
        None
    }
}

/// `wait`, or less when a rollout asks for a read after `read_after`, still ahead
/// of `now`.
fn until_asked(
    wait: Duration,
    read_after: Option<jiff::Timestamp>,
    now: jiff::Timestamp,
) -> Duration {
    read_after
        .filter(|after| *after > now)
        .and_then(|after| Duration::try_from(after.duration_since(now)).ok())
        .map_or(wait, |d| d.min(wait))
}

/// The time a rollout asks `switch`'s neighbours to be read after, if one does
/// ([`crate::api::keys::NEIGHBORS_READ_AFTER_ANNOTATION`]).
fn read_after(switch: &Switch) -> Option<jiff::Timestamp> {
    switch
        .annotations()
        .get(crate::api::keys::NEIGHBORS_READ_AFTER_ANNOTATION)
        .and_then(|t| t.parse::<jiff::Timestamp>().ok())
}

/// A Switch's key in the per-Switch timing tables (`namespace/name`).
pub(super) fn key(switch: &Switch) -> String {
    format!(
        "{}/{}",
        switch.namespace().unwrap_or_default(),
        switch.name_any()
    )
}

/// Reads `switch`'s neighbour source into `status` when a read is due. Returns when
/// the next read is due (`None`: the Switch names no source; its neighbour status is
/// cleared).
pub(super) async fn refresh(
    switch: &Switch,
    status: &mut SwitchStatus,
    ctx: &Context,
    reads: &ReadTimes,
) -> Option<Duration> {
    let Some(spec) = &switch.spec.neighbors else {
        neighbors::forget(status);
        reads.forget(switch);
        return None;
    };
    let every = neighbors::interval(spec);
    let (asked, now) = (read_after(switch), jiff::Timestamp::now());
    if let Some(wait) = reads.wait_or_start(switch, every, asked, now) {
        return Some(wait);
    }
    let generation = switch.metadata.generation;
    let managed: BTreeMap<String, String> = switch
        .spec
        .ports
        .iter()
        .map(|(sp, def)| (def.name.clone(), sp.clone()))
        .collect();
    let result = read(switch, ctx).await;
    let outcome = match &result {
        Ok(_) => "ok",
        Err(f) => f.category(),
    };
    ctx.probes
        .metrics
        .neighbor_reads
        .get_or_create(&crate::metrics::OutcomeLabel { outcome })
        .inc();
    match result {
        Ok(read) => {
            let now = jiff::Timestamp::now();
            neighbors::record(status, &read, &managed, generation, now, asked);
        }
        Err(f) => {
            tracing::warn!(switch = %switch.name_any(), error = %f, "neighbour read failed");
            neighbors::failed(
                status,
                f.category(),
                f.to_string(),
                generation,
                jiff::Timestamp::now(),
            );
        }
    }
    Some(until_asked(every, asked, jiff::Timestamp::now()))
}

/// One read of every source `switch.spec.neighbors` names, merged: the first chassis
/// id any source reports, every LLDP neighbour and learned MAC (an address learned
/// younger on another port stale: [`patchbay_providers::neighbors::Neighbors::without_stale_macs`]).
/// A source that fails fails the read (what the ports saw at the last good read stays).
async fn read(
    switch: &Switch,
    ctx: &Context,
) -> Result<patchbay_providers::neighbors::Neighbors, Failure> {
    let spec = switch.spec.neighbors.as_ref().expect("checked by refresh");
    let mut chassis = None;
    let (mut lldp, mut macs) = (Vec::new(), Vec::new());
    for (i, reference) in spec.providers.iter().enumerate() {
        let read = read_one(switch, ctx, i, &reference.name).await?;
        chassis = chassis.or(read.chassis_id);
        for p in read.ports {
            lldp.extend(p.lldp.into_iter().map(|n| (p.port.clone(), n)));
            let ages = p.mac_ages;
            macs.extend(p.macs.into_iter().map(|m| {
                let age = ages.get(&m).copied();
                (p.port.clone(), m, age)
            }));
        }
    }
    Ok(
        patchbay_providers::neighbors::Neighbors::gather_aged(chassis, lldp, macs)
            .without_stale_macs(),
    )
}

/// One read of source `name`, `spec.neighbors.providers[i]`.
async fn read_one(
    switch: &Switch,
    ctx: &Context,
    i: usize,
    name: &str,
) -> Result<patchbay_providers::neighbors::Neighbors, Failure> {
    const FIELDS: [&str; 4] = [
        "spec.neighbors.providers[0]",
        "spec.neighbors.providers[1]",
        "spec.neighbors.providers[2]",
        "spec.neighbors.providers[3]",
    ];
    let field = FIELDS.get(i).copied().unwrap_or("spec.neighbors.providers");
    let ns = switch.namespace().unwrap_or_default();
    let (provider, secret) = ctx.checked_provider(&ns, name, field).await?;
    let source = ctx
        .backends
        .neighbor_source(&provider, secret.as_deref())
        .map_err(Failure::Backend)?
        .ok_or_else(|| Failure::ProviderRole {
            field,
            name: provider.name_any(),
            why: match (provider.spec.backend, provider.spec.os) {
                (_, DeviceOs::Linux) => {
                    "is os linux over a backend other than ssh; lldpd is read over ssh"
                }
                (Backend::Ovsdb, _) => {
                    "is an Open vSwitch without options.controlSocket, where its learned \
                     MAC addresses are read"
                }
                _ => {
                    "cannot be read for neighbours: patchbay reads lldpd on os linux (backend \
                     ssh), learned MACs on ovsdb (options.controlSocket), and LLDP and MAC \
                     tables on ssh os ios and eos"
                }
            },
        })?;
    source.neighbors().await.map_err(Failure::Device)
}

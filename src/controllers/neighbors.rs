//! Reads a Switch's neighbour source (`spec.neighbors`) when a read is due and takes
//! the answer into the Switch's status ([`crate::decide::neighbors`] decides what is
//! written). Called by the Switch controller within its reconcile; device I/O (one
//! session per read, through the source's own login) and cache reads.
//!
//! When reads happen: at the first reconcile of a Switch that names a source (and
//! at every operator start), then every `intervalSeconds` (default 30) — the Switch
//! controller requeues for it — whatever else wakes the Switch in between. A read
//! that fails is tried again at the next interval, not sooner: a source that is down
//! costs one login attempt per interval. The source is a device of its own (an
//! `os: linux` ProviderSwitch), so its reads never hold a session of the switch
//! worker that configures the ports.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use kube::ResourceExt;

use super::context::Context;
use crate::api::{DeviceOs, Switch, SwitchStatus};
use crate::backends::neighbor_source;
use crate::decide::failure::Failure;
use crate::decide::neighbors;
use crate::decide::validate::validate_provider;

/// When each Switch (`namespace/name`) was last read: reads follow this, not the
/// status (which is written only when something changed).
#[derive(Default)]
pub struct ReadTimes(parking_lot::Mutex<std::collections::HashMap<String, Instant>>);

impl ReadTimes {
    /// Forgets `key` (its Switch is gone).
    pub fn forget(&self, key: &str) {
        crate::decide::slack::remove(&mut self.0.lock(), key);
    }
}

fn key(switch: &Switch) -> String {
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
) -> Option<Duration> {
    let Some(spec) = &switch.spec.neighbors else {
        neighbors::forget(status);
        ctx.neighbor_reads.forget(&key(switch));
        return None;
    };
    let every = neighbors::interval(spec);
    let key = key(switch);
    if let Some(last) = ctx.neighbor_reads.0.lock().get(&key).copied() {
        let since = last.elapsed();
        if since < every {
            return Some(every - since);
        }
    }
    ctx.neighbor_reads.0.lock().insert(key, Instant::now());
    let generation = switch.metadata.generation;
    let managed: BTreeMap<String, String> = switch
        .spec
        .ports
        .iter()
        .map(|(sp, def)| (def.name.clone(), sp.clone()))
        .collect();
    match read(switch, ctx).await {
        Ok(read) => {
            neighbors::record(status, &read, &managed, generation, jiff::Timestamp::now());
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
    Some(every)
}

/// One read of the source `switch.spec.neighbors` names.
async fn read(
    switch: &Switch,
    ctx: &Context,
) -> Result<patchbay_providers::neighbors::Neighbors, Failure> {
    const FIELD: &str = "spec.neighbors.provider";
    let spec = switch.spec.neighbors.as_ref().expect("checked by refresh");
    let ns = switch.namespace().unwrap_or_default();
    let provider = ctx
        .stores
        .provider(&ns, &spec.provider.name)
        .ok_or_else(|| Failure::ProviderNotFound {
            name: spec.provider.name.clone(),
            field: FIELD,
        })?;
    validate_provider(&provider.spec).map_err(|errors| Failure::InvalidProvider {
        name: provider.name_any(),
        errors,
    })?;
    let secret = ctx.secrets.of_provider(&ctx.client, &provider).await?;
    let source = neighbor_source(&provider, secret.as_deref())
        .map_err(Failure::Backend)?
        .ok_or_else(|| Failure::ProviderRole {
            field: FIELD,
            name: provider.name_any(),
            why: if provider.spec.os == DeviceOs::Linux {
                "is os linux over a backend other than ssh; lldpd is read over ssh"
            } else {
                "cannot be read for neighbours: today patchbay reads lldpd on os linux \
                 (backend ssh)"
            },
        })?;
    source.neighbors().await.map_err(Failure::Device)
}

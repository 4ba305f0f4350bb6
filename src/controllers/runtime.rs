//! The wiring: one kube-rs `Controller` per kind (SwitchPorts: patchbay's own
//! [`port_runner`], same rules, tables given back after a burst), the watches that wake each
//! (through [`crate::triggers`]), the streams the switch workers' notices arrive on,
//! the error policies, and a graceful shutdown of all of them together. Kubernetes
//! I/O (watches).
//!
//! How to read it: [`run`] builds the `Watches` value once (every kind the
//! controllers read, one cache each), then one function per controller subscribes
//! to the watches that wake it (`switch_ports`, `switches`, `provider_switches`,
//! `smartnic_ports`, `hosts_and_claims`); `Watches::start` then runs every watch
//! with its deletion hooks, and `Harness::run` runs each controller behind the
//! cache gate with its timing, counting and error policy. Each controller, watch
//! and background loop is a task of its own (`run_parts`), so a wake polls only
//! the part it concerns.
//!
//! The rooms: this file ([`run`]: what is built, in which order, and the graceful
//! stop); `runtime/retry.rs` (the retry table and error policy);
//! `runtime/watches.rs` (the shared watches and their hooks); `runtime/wiring.rs`
//! (which watches wake which controller); `runtime/harness.rs` (running a
//! controller: the cache gate, timing, the wake channels, tasks);
//! `runtime/background.rs` (the periodic loops).

use std::sync::Arc;
use std::time::Duration;

use futures::{FutureExt, StreamExt};
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::{Node, Secret};
use kube::core::PartialObjectMeta;
use kube::runtime::controller::{Action, Config, Controller};
use kube::runtime::events::Reporter;
use kube::runtime::reflector::store::Writer;
use kube::runtime::reflector::{ObjectRef, ReflectHandle, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use tokio::sync::mpsc;

use super::context::{
    Context, Listed, Notices, PortCache, SharedOwnWrites, SharedPortIndex, Stores, Synced, api_for,
};
use super::events::EventPublisher;
use super::host::HostWorld;
use super::server_claim::Allocator;
use super::{
    ControllerError, bare_metal_host, metal3, metal3_attachment, metal3_switch, port_runner,
    provider_switch, rollout, server, server_claim, smartnic_port, switch, switch_port, vlan_pool,
};
use crate::api::server::CabledPortKind;
use crate::api::{Cached, PortState};
use crate::api::{
    ProviderSwitch, Server, ServerClaim, SmartNicConfiguration, SmartNicPort, Switch, SwitchPort,
    SwitchPortConfiguration, VLANPool,
};
use crate::backends::Backends;
use crate::compact_port::CompactPort;
use crate::decide::retry::{Retry, WAITING_REQUEUE};
use crate::metrics::{ControllerLabel, Metrics, ReconcileLabels};
use crate::settings::Settings;
use crate::triggers;

/// `parts![a, b, …]`: the futures, boxed as [`Part`]s.
macro_rules! parts {
    ($($part:expr),+ $(,)?) => {
        vec![$(Box::pin($part) as Part),+]
    };
}

mod background;
mod harness;
mod retry;
mod watches;
pub use watches::watch_config;
mod wiring;
use background::*;
use harness::*;
pub(crate) use retry::RECHECKS;
use retry::*;
use watches::*;
use wiring::*;

/// SwitchPort reconciles at once (see where it is used for the trade-off).
const PORT_RECONCILES: u16 = 64;

/// On a graceful stop, how long the ports whose changes were in flight get to take
/// the answers and record them before the controllers stop.
const HAND_OFF_TAKE: Duration = Duration::from_secs(5);

/// Runs the controllers until `shutdown` completes.
pub async fn run(
    client: Client,
    settings: Settings,
    backends: Backends,
    probes: crate::probes::Probes,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let ns = settings.namespace.clone();
    let ns = ns.as_deref();
    // The process's one recheck budget, at the rate this operator was given.
    *RECHECKS.lock().unwrap_or_else(|p| p.into_inner()) =
        crate::decide::retry::Budget::new(settings.rechecks_per_second);
    let wc = watches::watch_config();
    // Every reconcile waits for every cache's first list; see `Synced`.
    let (sync_gate, synced) = Synced::new();
    let (stop, _) = tokio::sync::broadcast::channel::<()>(1);
    let harness = Harness {
        synced,
        retries: Arc::new(Retries::default()),
        metrics: probes.metrics.clone(),
        stop,
    };
    let (wakes, woken) = wakes();
    let watches = Watches::new(&client, ns, &wc, &harness);
    let metal3 = Metal3Watches::new(&client, ns, &wc, &harness, settings.metal3_switches);
    // Metal3's watches are not in the gate: a CRD of BMO's that is not installed
    // must not hold every reconcile (the hosts' reads wait for them themselves).
    let listed = watches.listed();
    let ctx = Arc::new(
        Context::new(
            client.clone(),
            settings.clone(),
            backends,
            EventPublisher::new(client.clone(), reporter()),
            Notices {
                ports: wakes.ports.clone(),
                smartnics: wakes.smartnics.clone(),
                switches: wakes.switches.clone(),
            },
            watches.ports.cache(),
            watches.stores(),
        )
        .with_port_index(watches.port_index.clone())
        .with_probes(probes),
    );
    // The Secret metadata watch wakes the ports a credentials change concerns and
    // tells the Secret cache which versions are current.
    let secret_versions = ctx.secrets.clone();
    let secrets = watcher(
        api_for::<PartialObjectMeta<Secret>>(&client, ns),
        wc.clone(),
    )
    // Backed off on errors, as kube's `Controller` did with its triggers.
    .default_backoff()
    .inspect(move |e| {
        if let Ok(e) = e {
            secret_versions.observe(e);
        }
    })
    .touched_objects();
    let port_ctl = switch_ports(&watches, &harness, &ctx, secrets, woken.ports);
    let switch_ctl = switches(&watches, &harness, &ctx, woken.switches);
    let provider_ctl = provider_switches(&watches, &harness, &ctx, woken.providers);
    let snic_ctl = smartnic_ports(&watches, &harness, &ctx, woken.smartnics);
    let (hosts, bare_metal_hosts) = hosts_and_claims(
        &settings,
        &watches,
        &harness,
        &ctx,
        &wc,
        woken.claims,
        metal3.as_ref(),
    );
    let rollout_ctl = rollouts(&watches, &harness, &ctx, &bare_metal_hosts);
    let bms_ctl = metal3_switches(&settings, &watches, metal3.as_ref(), &harness, &ctx);
    let metal3_watched: Part = match metal3 {
        Some(m) => Box::pin(m.start()),
        None => Box::pin(async {}),
    };
    let pools_changed = watches.pools.subscribe();
    let background = background(
        &client,
        &settings,
        &watches,
        &harness,
        pools_changed,
        &ctx.own_writes,
    );
    let pool_deleted = background.pool_deleted.clone();
    let watched = watches.start(
        &wakes,
        pool_deleted,
        &ctx.port_index,
        &ctx.own_writes,
        ctx.stores.bgp_switches.clone(),
    );
    let stopper = {
        let stop = harness.stop.clone();
        let ctx = ctx.clone();
        async move {
            shutdown.await;
            // Changes already with a worker finish and their ports record the
            // answers before the controllers stop.
            ctx.finish_hand_offs(HAND_OFF_TAKE).await;
            let _ = stop.send(());
        }
    };
    run_parts(parts![
        sync_gate.open_when(listed),
        port_ctl,
        switch_ctl,
        rollout_ctl,
        provider_ctl,
        snic_ctl,
        hosts,
        bms_ctl,
        metal3_watched,
        watched,
        background.run,
        stopper
    ])
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn port(uid: &str, rv: &str) -> Arc<SwitchPort> {
        let mut p = SwitchPort::new("p", Default::default());
        p.metadata.namespace = Some("infra".into());
        p.metadata.uid = Some(uid.into());
        p.metadata.resource_version = Some(rv.into());
        Arc::new(p)
    }

    #[test]
    fn spec_changes_pass_new_generations_and_forget_deleted_objects() {
        let server = |name: &str, uid: &str, generation: i64| {
            let mut s = Server::new(name, serde_json::from_value(serde_json::json!({
                "bmc": {"address": "10.0.0.1", "credentialsSecretRef": {"name": "b", "namespace": "n"}},
                "bootMac": "aa:bb:cc:dd:ee:01", "site": "dc1"})).unwrap());
            s.metadata.uid = Some(uid.into());
            s.metadata.generation = Some(generation);
            s
        };
        let mut seen = Generations::default();
        let none = std::collections::HashSet::new;
        assert!(seen.changed(&server("web-1", "u1", 1), 1, none));
        // A status write (same generation) passes nothing; a spec edit does.
        assert!(!seen.changed(&server("web-1", "u1", 1), 1, none));
        assert!(seen.changed(&server("web-1", "u1", 2), 1, none));
        // Deleted and created again under its name: a new object.
        assert!(seen.changed(&server("web-1", "u2", 1), 1, none));
        // 1,000 Servers come and go while the cache holds 10: remembered stays
        // bounded by the cache, not by history.
        for i in 0..1_000 {
            let held: std::collections::HashSet<String> =
                ((i.max(10) - 10)..i).map(|k| format!("s{k}")).collect();
            seen.changed(
                &server(&format!("web-{i}"), &format!("s{i}"), 1),
                10,
                || held,
            );
            assert!(seen.len() <= 2 * 10 + 64 + 1, "{}", seen.len());
        }
    }

    #[test]
    fn a_cached_port_keeps_no_labels_and_its_owners_only_when_no_label_names_its_switch() {
        let owner = k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
            kind: "Switch".into(),
            name: "leaf1".into(),
            ..Default::default()
        };
        let mut labelled = SwitchPort::new("p", Default::default());
        labelled.metadata.namespace = Some("infra".into());
        labelled.metadata.labels = Some(
            [
                (
                    crate::api::keys::SWITCH_LABEL.to_owned(),
                    "leaf1".to_owned(),
                ),
                ("team".to_owned(), "blue".to_owned()),
            ]
            .into(),
        );
        labelled.metadata.owner_references = Some(vec![owner.clone()]);
        let mut unlabelled = labelled.clone();
        unlabelled.metadata.name = Some("q".into());
        unlabelled.metadata.labels = None;
        let index = SharedPortIndex::default();
        let mut arrive = port_arrival(index.clone());
        let mut events = [
            watcher::Event::Apply(labelled.clone()),
            watcher::Event::Apply(unlabelled),
        ];
        for e in &mut events {
            arrive(e);
        }
        let [
            watcher::Event::Apply(cached),
            watcher::Event::Apply(cached_unlabelled),
        ] = &events
        else {
            unreachable!()
        };
        assert_eq!(cached.metadata.labels, None);
        assert_eq!(cached.metadata.owner_references, None);
        assert_eq!(
            cached_unlabelled.metadata.owner_references,
            Some(vec![owner])
        );
        // Either way the port's Switch is still known: from the index, from the owner.
        let switch_of = |p: &SwitchPort| switch_port::switch_name(p, &index);
        assert_eq!(switch_of(cached).as_deref(), Some("leaf1"));
        assert_eq!(switch_of(cached_unlabelled).as_deref(), Some("leaf1"));
        // Without the index, the compacted port would have lost it.
        let empty = SharedPortIndex::default();
        assert_eq!(switch_port::switch_name(cached, &empty), None);
        // A deleted port keeps its labels (the deletion hook reads its Switch) and
        // leaves the index.
        let mut gone = watcher::Event::Delete(labelled);
        arrive(&mut gone);
        let watcher::Event::Delete(gone) = gone else {
            unreachable!()
        };
        assert!(gone.metadata.labels.is_some());
        assert_eq!(index.read().switch_of("infra", "p"), None);
        assert_eq!(switch_of(&gone).as_deref(), Some("leaf1"));
    }

    #[tokio::test]
    async fn a_port_is_not_woken_by_the_echo_of_its_own_write_but_by_anything_else() {
        let own = SharedOwnWrites::default();
        own.lock().record("u1", "11");
        own.lock().record("u1", "13");
        let echoes = Arc::new(parking_lot::Mutex::new(Vec::new()));
        let seen = echoes.clone();
        let events = [
            port("u1", "10"), // before the write: wakes
            port("u1", "11"), // the write's own event: dropped
            port("u1", "12"), // somebody else's change after it: wakes
            port("u2", "13"), // another port at a written version: wakes
            port("u1", "13"), // the second write, waited for: wakes
            port("u1", "11"), // the same version again (a relist's copy): wakes
        ];
        let woken: Vec<String> =
            without_own_echoes(futures::stream::iter(events), own.clone(), move |uid, p| {
                let rv = p.metadata.resource_version.as_deref().unwrap_or_default();
                seen.lock().push(format!("{uid}@{rv}"));
                // A reconcile waits for the write of version 13: it wakes the port.
                rv == "13"
            })
            .map(|p| {
                format!(
                    "{}@{}",
                    p.metadata.uid.as_deref().unwrap_or_default(),
                    p.metadata.resource_version.as_deref().unwrap_or_default()
                )
            })
            .collect()
            .await;
        assert_eq!(woken, ["u1@10", "u1@12", "u2@13", "u1@13", "u1@11"]);
        assert_eq!(*echoes.lock(), ["u1@11", "u1@13"]);
        assert!(own.lock().is_empty());
    }

    #[test]
    fn a_relist_or_a_deletion_forgets_the_writes() {
        let own = SharedOwnWrites::default();
        own.lock().record("u1", "11");
        own.lock().record("u2", "12");
        let deleted = CompactPort::from_port((*port("u1", "11")).clone());
        note_relist_or_delete(&own, &watcher::Event::Delete(deleted), CompactPort::uid);
        assert_eq!(own.lock().len(), 1);
        note_relist_or_delete(&own, &watcher::Event::<CompactPort>::Init, CompactPort::uid);
        assert!(own.lock().is_empty());
    }
}

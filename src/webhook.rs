//! The validating webhook's I/O: its own caches (VLANPools, SwitchPortConfigurations
//! and SmartNicConfigurations, watched by every replica whether it leads or not, so
//! any replica behind the Service answers) and the [`Admit`] the HTTP server calls.
//! Every decision is [`crate::decide::admission`]'s.
//!
//! Until the caches hold their first lists the webhook denies tenants' writes ("try
//! again"): an empty cache would read as "nothing is granted" or, worse, "nothing
//! is shared", and a webhook that fails closed is what `failurePolicy: Fail` asks
//! for.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::StreamExt;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};

use crate::api::{Cached, SmartNicConfiguration, SwitchPortConfiguration, VLANPool};
use crate::decide::admission::{Lookups, answer, review};
use crate::decide::tenancy::Tenancy;
use crate::grants::GrantsCache;
use crate::serve::Admit;

/// The webhook: tenancy settings and caches.
pub struct Webhook {
    tenancy: Tenancy,
    pools: Store<VLANPool>,
    configurations: Store<SwitchPortConfiguration>,
    smartnics: Store<SmartNicConfiguration>,
    synced: Arc<AtomicBool>,
    grants: GrantsCache,
    /// The rollout defaults and the limits on a tenant's policy.
    rollout: crate::decide::rollout::Defaults,
}

fn cache<K: Cached>(api: Api<K>) -> (Store<K>, futures::future::BoxFuture<'static, ()>) {
    let (store, writer) = reflector::store();
    let run = reflector::reflector(
        writer,
        watcher(api, crate::controllers::runtime::watch_config()),
    )
    .default_backoff()
    .applied_objects()
    .for_each(|_| async {});
    (store, Box::pin(run))
}

impl Webhook {
    /// The webhook and the future that keeps its caches (run it until shutdown).
    pub fn start(
        client: Client,
        tenancy: Tenancy,
        rollout: crate::decide::rollout::Defaults,
    ) -> (Arc<Webhook>, futures::future::BoxFuture<'static, ()>) {
        let (pools, p) = cache(Api::<VLANPool>::all(client.clone()));
        let (configurations, c) = cache(Api::<SwitchPortConfiguration>::all(client.clone()));
        let (smartnics, s) = cache(Api::<SmartNicConfiguration>::all(client));
        let synced = Arc::new(AtomicBool::new(false));
        let webhook = Arc::new(Webhook {
            tenancy,
            pools: pools.clone(),
            configurations: configurations.clone(),
            smartnics: smartnics.clone(),
            synced: synced.clone(),
            grants: GrantsCache::default(),
            rollout,
        });
        let ready = async move {
            let _ = pools.wait_until_ready().await;
            let _ = configurations.wait_until_ready().await;
            let _ = smartnics.wait_until_ready().await;
            synced.store(true, Ordering::SeqCst);
            std::future::pending::<()>().await;
        };
        let run = async move {
            tokio::join!(p, c, s, ready);
        };
        (webhook, Box::pin(run))
    }

    /// Whether the caches hold their first lists.
    pub fn synced(&self) -> bool {
        self.synced.load(Ordering::SeqCst)
    }
}

impl Admit for Webhook {
    fn admit<'a>(
        &'a self,
        request: &'a AdmissionRequest<DynamicObject>,
    ) -> futures::future::BoxFuture<'a, AdmissionResponse> {
        Box::pin(std::future::ready(self.answer(request)))
    }
}

impl Webhook {
    /// The answer to `request`, from the caches.
    fn answer(&self, request: &AdmissionRequest<DynamicObject>) -> AdmissionResponse {
        let state = self.pools.state();
        let grants = self.grants.get(&state, Some(self.tenancy.parking_vlan));
        // Only a VLANPool's review judges pools anew (among all the others).
        let pools: Vec<VLANPool> = if request.kind.kind == "VLANPool" {
            state.iter().map(|p| (**p).clone()).collect()
        } else {
            Vec::new()
        };
        let configuration = |ns: &str, name: &str| {
            self.configurations
                .get(&ObjectRef::new(name).within(ns))
                .map(|c| (*c).clone())
        };
        let smartnic = |ns: &str, name: &str| {
            self.smartnics
                .get(&ObjectRef::new(name).within(ns))
                .map(|c| (*c).clone())
        };
        let look = Lookups {
            grants: &grants,
            pools: &pools,
            switch_port_configuration: &configuration,
            smartnic_configuration: &smartnic,
            rollout: &self.rollout,
        };
        let synced = self.synced();
        answer(request, |kind, namespace, object| {
            if !synced && !self.tenancy.is_infra(namespace) {
                return vec![
                    "patchbay's webhook is starting (its caches are not listed yet); try again"
                        .into(),
                ];
            }
            review(&self.tenancy, kind, namespace, object, &look)
        })
    }
}

//! The credentials Secrets the controllers read, cached by version: a ProviderSwitch's
//! Secret is fetched once and served from memory for as long as the Secret metadata
//! watch (which the SwitchPort controller already runs to be woken by credential
//! changes) reports the same `resourceVersion` for it. Kubernetes I/O (one GET on a
//! miss).
//!
//! What it holds: the version of every Secret the metadata watch has seen (name and
//! `resourceVersion` only, never data), and the data of the Secrets a reconcile asked
//! for — the ones a ProviderSwitch names. A cached Secret is served only while the
//! watch's version for it equals the cached one, so it is never older than what the
//! watch last reported: a change, a deletion, or a watch that restarts (a relist
//! clears the versions until it lists them again) sends the next read to the API
//! server. A Secret in a namespace the operator does not watch is read with a GET
//! every time (no version to trust).

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Secret;
use kube::core::PartialObjectMeta;
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use parking_lot::Mutex;

use crate::api::ProviderSwitch;

type Key = (String, String);

/// See the module documentation.
#[derive(Default)]
pub struct SecretCache {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    /// The watch's latest `resourceVersion` per Secret.
    versions: HashMap<Key, String>,
    /// While the watch relists: the versions seen so far in the new list.
    relisting: Option<HashMap<Key, String>>,
    /// Secrets read on a reconcile's behalf.
    held: HashMap<Key, Arc<Secret>>,
}

/// (namespace, name) of `provider`'s credentials Secret, if it names one (its
/// namespace defaults to the provider's).
fn credentials_key(provider: &ProviderSwitch) -> Option<Key> {
    let r = provider.spec.credentials_secret_ref.as_ref()?;
    Some((
        r.namespace
            .clone()
            .or_else(|| provider.namespace())
            .unwrap_or_default(),
        r.name.clone(),
    ))
}

/// The credentials Secret of `provider`, read from the API server without the cache
/// (the CLI's one-off reads).
pub async fn fetch_secret(
    client: &Client,
    provider: &ProviderSwitch,
) -> Result<Option<Secret>, kube::Error> {
    match credentials_key(provider) {
        Some(key) => get(client, &key).await,
        None => Ok(None),
    }
}

/// Secret `key` as the API server has it now.
async fn get(client: &Client, (ns, name): &Key) -> Result<Option<Secret>, kube::Error> {
    Api::<Secret>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
}

fn key_of<K: kube::Resource>(o: &K) -> Option<(Key, String)> {
    let meta = o.meta();
    Some((
        (meta.namespace.clone()?, meta.name.clone()?),
        meta.resource_version.clone()?,
    ))
}

impl SecretCache {
    /// Takes in one event of the Secret metadata watch.
    pub fn observe(&self, event: &watcher::Event<PartialObjectMeta<Secret>>) {
        let mut inner = self.inner.lock();
        let inner = &mut *inner;
        match event {
            watcher::Event::Apply(o) => {
                if let Some((k, rv)) = key_of(o) {
                    // A held copy of another version is never served again.
                    if inner
                        .held
                        .get(&k)
                        .is_some_and(|s| s.metadata.resource_version.as_ref() != Some(&rv))
                    {
                        inner.held.remove(&k);
                    }
                    inner.versions.insert(k, rv);
                }
            }
            watcher::Event::Delete(o) => {
                if let Some((k, _)) = key_of(o) {
                    inner.versions.remove(&k);
                    inner.held.remove(&k);
                }
            }
            watcher::Event::Init => {
                // What was missed while the watch was down is unknown: read through
                // until the new list is complete.
                inner.versions.clear();
                inner.relisting = Some(HashMap::new());
            }
            watcher::Event::InitApply(o) => {
                if let (Some((k, rv)), Some(list)) = (key_of(o), inner.relisting.as_mut()) {
                    list.insert(k, rv);
                }
            }
            watcher::Event::InitDone => {
                let versions = inner.relisting.take().unwrap_or_default();
                inner.held.retain(|k, s| {
                    versions.get(k).map(String::as_str) == s.metadata.resource_version.as_deref()
                });
                inner.versions = versions;
            }
        }
    }

    /// The cached Secret `key` if the watch's version for it is the cached one.
    fn current(&self, key: &Key) -> Option<Arc<Secret>> {
        let inner = self.inner.lock();
        let held = inner.held.get(key)?;
        let version = inner.versions.get(key)?;
        (held.metadata.resource_version.as_ref() == Some(version)).then(|| held.clone())
    }

    /// The credentials Secret of `provider`, if it names one: from the cache when
    /// current, else read from the API server (and kept). The one place the
    /// controllers read Secrets.
    pub async fn of_provider(
        &self,
        client: &Client,
        provider: &ProviderSwitch,
    ) -> Result<Option<Arc<Secret>>, kube::Error> {
        let Some(key) = credentials_key(provider) else {
            return Ok(None);
        };
        if let Some(s) = self.current(&key) {
            return Ok(Some(s));
        }
        let read = get(client, &key).await?.map(Arc::new);
        let mut inner = self.inner.lock();
        match &read {
            Some(s) => {
                inner.held.insert(key, s.clone());
            }
            None => {
                inner.held.remove(&key);
            }
        }
        Ok(read)
    }

    /// How many Secrets' data it holds.
    #[cfg(test)]
    fn held(&self) -> usize {
        self.inner.lock().held.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(ns: &str, name: &str, rv: &str) -> PartialObjectMeta<Secret> {
        let mut m = PartialObjectMeta::<Secret>::default();
        m.metadata.namespace = Some(ns.into());
        m.metadata.name = Some(name.into());
        m.metadata.resource_version = Some(rv.into());
        m
    }

    fn secret(ns: &str, name: &str, rv: &str) -> Arc<Secret> {
        let mut s = Secret::default();
        s.metadata.namespace = Some(ns.into());
        s.metadata.name = Some(name.into());
        s.metadata.resource_version = Some(rv.into());
        Arc::new(s)
    }

    fn hold(cache: &SecretCache, s: Arc<Secret>) {
        let k = key_of(s.as_ref()).unwrap().0;
        cache.inner.lock().held.insert(k, s);
    }

    fn key(ns: &str, name: &str) -> Key {
        (ns.into(), name.into())
    }

    #[test]
    fn a_secret_is_served_only_while_the_watch_reports_its_version() {
        let cache = SecretCache::default();
        hold(&cache, secret("a", "login", "5"));
        // The watch has not reported it: read through.
        assert!(cache.current(&key("a", "login")).is_none());
        cache.observe(&watcher::Event::Apply(meta("a", "login", "5")));
        assert!(cache.current(&key("a", "login")).is_some());
        // Changed: the held copy is dropped and the next read goes to the server.
        cache.observe(&watcher::Event::Apply(meta("a", "login", "6")));
        assert!(cache.current(&key("a", "login")).is_none());
        assert_eq!(cache.held(), 0);
        // A GET that returned an older version than the watch reported is not served.
        hold(&cache, secret("a", "login", "5"));
        assert!(cache.current(&key("a", "login")).is_none());
        hold(&cache, secret("a", "login", "6"));
        assert!(cache.current(&key("a", "login")).is_some());
        // Deleted: gone.
        cache.observe(&watcher::Event::Delete(meta("a", "login", "6")));
        assert!(cache.current(&key("a", "login")).is_none());
        assert_eq!(cache.held(), 0);
    }

    #[test]
    fn a_relist_reads_through_until_it_is_complete_and_drops_what_it_no_longer_lists() {
        let cache = SecretCache::default();
        cache.observe(&watcher::Event::Apply(meta("a", "login", "5")));
        cache.observe(&watcher::Event::Apply(meta("a", "other", "7")));
        hold(&cache, secret("a", "login", "5"));
        hold(&cache, secret("a", "other", "7"));
        cache.observe(&watcher::Event::Init);
        assert!(cache.current(&key("a", "login")).is_none());
        cache.observe(&watcher::Event::InitApply(meta("a", "login", "5")));
        assert!(cache.current(&key("a", "login")).is_none());
        cache.observe(&watcher::Event::InitDone);
        assert!(cache.current(&key("a", "login")).is_some());
        // `other` was deleted while the watch was down.
        assert!(cache.current(&key("a", "other")).is_none());
        assert_eq!(cache.held(), 1);
    }
}

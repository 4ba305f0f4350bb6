//! A port object in the API server as the state-machine loop records on it: status
//! written as a merge patch (only when it changed), the cleanup finalizer added with
//! the object's resourceVersion as precondition and removed, Events published. Each
//! write's resourceVersion is noted so its watch event does not wake the port again.
//! Kubernetes I/O.

use kube::api::{Api, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use serde_json::json;

use super::ControllerError;
use super::context::SharedOwnWrites;
use super::events::EventPublisher;
use super::port_loop::{PortMeta, PortRecord};
use crate::api::PortStatus;
use crate::api::keys::FINALIZER;
use crate::decide::status::Severity;

/// The port object `obj` (a SwitchPort or SmartNicPort) in the API server.
pub struct KubeRecord<'a, K: kube::runtime::reflector::Lookup<DynamicType = ()> + Clone + 'static> {
    /// The API of its kind in its namespace.
    pub api: Api<K>,
    /// The object as this reconcile read it.
    pub obj: &'a K,
    /// Where Events go.
    pub events: &'a EventPublisher,
    /// Where each write's resourceVersion is noted, so that its watch event does
    /// not wake the port again ([`crate::decide::own_writes`]).
    pub own_writes: &'a SharedOwnWrites,
    /// The cache `obj` was read from: whether it holds a newer copy now
    /// ([`PortRecord::superseded`]).
    pub cache: &'a (dyn Copies<K> + Sync),
}

/// A cache of port objects: whether it holds a copy of an object other than the one
/// given (another resourceVersion).
pub trait Copies<K> {
    /// Whether the cache holds a copy of `obj` at another version than `obj`'s.
    fn holds_other_than(&self, obj: &K) -> bool;
}

impl<K> Copies<K> for kube::runtime::reflector::Store<K>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    fn holds_other_than(&self, obj: &K) -> bool {
        self.get(&kube::runtime::reflector::ObjectRef::from_obj(obj))
            .is_some_and(|now| now.meta().resource_version != obj.meta().resource_version)
    }
}

impl Copies<crate::api::SwitchPort> for super::context::PortCache {
    fn holds_other_than(&self, obj: &crate::api::SwitchPort) -> bool {
        self.record(&kube::runtime::reflector::ObjectRef::from_obj(obj))
            .is_some_and(|now| now.resource_version() != obj.metadata.resource_version.as_deref())
    }
}

impl<K> KubeRecord<'_, K>
where
    K: Resource<DynamicType = ()> + ResourceExt + Clone + 'static,
{
    /// Notes the resourceVersion a write of this reconcile produced.
    fn note_write(&self, resource_version: Option<&str>) {
        if let (Some(uid), Some(rv)) = (self.obj.meta().uid.as_deref(), resource_version) {
            self.own_writes.lock().record(uid, rv);
        }
    }

    /// What the loop needs to know about the object.
    pub fn meta(&self) -> PortMeta {
        PortMeta {
            kind: match K::kind(&()) {
                std::borrow::Cow::Borrowed(k) => k,
                std::borrow::Cow::Owned(_) => "port",
            },
            uid: self.obj.uid().unwrap_or_default(),
            generation: self.obj.meta().generation,
            has_finalizer: self.obj.finalizers().iter().any(|f| f == FINALIZER),
            deletion_requested: self.obj.meta().deletion_timestamp.is_some(),
        }
    }
}

impl<K> PortRecord for KubeRecord<'_, K>
where
    K: Resource<DynamicType = ()>
        + ResourceExt
        + Clone
        + 'static
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
{
    async fn write_status(
        &self,
        old: &PortStatus,
        new: &PortStatus,
    ) -> Result<(), ControllerError> {
        let written =
            super::write_status_at(&self.api, &self.obj.name_any(), None, old, new).await?;
        self.note_write(written.as_deref());
        Ok(())
    }

    async fn set_finalizer(&self, present: bool) -> Result<(), ControllerError> {
        let mut finalizers: Vec<String> = self
            .obj
            .finalizers()
            .iter()
            .filter(|f| *f != FINALIZER)
            .cloned()
            .collect();
        let patch = if present {
            finalizers.push(FINALIZER.into());
            // Against the version read: a concurrent writer makes this a conflict
            // and the reconcile starts over with what it wrote.
            json!({"metadata": {
                "finalizers": finalizers,
                "resourceVersion": self.obj.resource_version(),
            }})
        } else {
            json!({"metadata": {"finalizers": finalizers}})
        };
        let written = self
            .api
            .patch(
                &self.obj.name_any(),
                &PatchParams::default(),
                &Patch::Merge(patch),
            )
            .await?;
        self.note_write(written.meta().resource_version.as_deref());
        Ok(())
    }

    async fn publish(&self, severity: Severity, reason: &str, note: &str) {
        self.events.publish(self.obj, severity, reason, note).await;
    }

    fn forget_events(&self) {
        self.events.forget(&self.obj.uid().unwrap_or_default());
    }

    fn superseded(&self) -> bool {
        self.cache.holds_other_than(self.obj)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{SwitchPort, SwitchPortSpec};
    use crate::compact_port::CompactPort;
    use crate::controllers::context::PortCache;
    use kube::runtime::reflector::store::Writer;
    use kube::runtime::watcher;

    fn port(rv: &str) -> SwitchPort {
        let mut p = SwitchPort::new("p1", SwitchPortSpec::default());
        p.metadata.namespace = Some("ns".into());
        p.metadata.uid = Some("uid-1".into());
        p.metadata.resource_version = Some(rv.into());
        p
    }

    /// What a reconcile that read version 10 finds by [`PortRecord::superseded`]:
    /// with the port not in `cache` (deleted meanwhile), then with `put` giving the
    /// cache version 10 (the copy read), then 11 (the echo of the port's own write,
    /// arriving while the reconcile runs).
    async fn superseded_as(
        cache: &(dyn Copies<SwitchPort> + Sync),
        mut put: impl FnMut(&str),
    ) -> [bool; 3] {
        // A client that is never called.
        let client =
            kube::Client::try_from(kube::Config::new("http://127.0.0.1:9".parse().unwrap()))
                .unwrap();
        let events = EventPublisher::new(
            client.clone(),
            kube::runtime::events::Reporter {
                controller: "test".into(),
                instance: None,
            },
        );
        let own_writes = SharedOwnWrites::default();
        let read = port("10");
        let record = KubeRecord {
            api: Api::namespaced(client, "ns"),
            obj: &read,
            events: &events,
            own_writes: &own_writes,
            cache,
        };
        let absent = record.superseded();
        put("10");
        let same = record.superseded();
        put("11");
        [absent, same, record.superseded()]
    }

    #[tokio::test]
    async fn a_reconcile_s_copy_is_superseded_once_the_cache_holds_a_newer_one() {
        let mut writer = Writer::<SwitchPort>::default();
        let cache = writer.as_reader();
        let seen = superseded_as(&cache, |rv| {
            writer.apply_watcher_event(&watcher::Event::Apply(port(rv)))
        })
        .await;
        assert_eq!(seen, [false, false, true]);
        // The same in the SwitchPort cache, which holds a record per port.
        let mut writer = Writer::<CompactPort>::default();
        let cache = PortCache(writer.as_reader());
        let seen = superseded_as(&cache, |rv| {
            writer.apply_watcher_event(&watcher::Event::Apply(CompactPort::from_port(port(rv))))
        })
        .await;
        assert_eq!(seen, [false, false, true]);
    }
}

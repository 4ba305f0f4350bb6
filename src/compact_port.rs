//! The SwitchPort cache's record of a port: every field the operator keeps of a
//! SwitchPort, laid out for 100,000 of them. No I/O; its strings are interned in a
//! process-wide table under a lock, which is why it lives here and not in the pure
//! core.
//!
//! A `SwitchPort` as kube deserialises it is ~0.75 KB before its strings: its
//! `ObjectMeta` alone is 360 bytes of mostly absent fields, its status 320. Cached
//! whole, a port cost ~1.4 KB (heaptrack, 10,000 ports), and 100,000 ports did not
//! fit one replica's memory target. A [`CompactPort`] keeps the same information in
//! ~0.8 KB (heaptrack, the same run):
//! - the metadata the controllers read as fields of their own (name, namespace,
//!   uid, resourceVersion, generation, the timestamps, finalizers, annotations);
//!   any other metadata field a port carries (rare: owner references of a port with
//!   no Switch label, a `generateName`) in a boxed `ObjectMeta` of its own;
//! - the status with its repeated strings (namespace, Switch, provider,
//!   configuration and its hash, the conditions' type, status, reason and message)
//!   interned: the ports of one Switch and configuration share one copy;
//!   the fields only a failing port sets are boxed apart.
//!
//! A reader that needs a `SwitchPort` (a reconcile, a trigger's mapper) gets one
//! made from the record ([`CompactPort::to_port`]); the conversion is lossless
//! (`from_port` then `to_port` gives the port back, tested below). The cache's
//! key (kube's `ObjectRef`) is the name and namespace only: [`CompactPort`]'s
//! `Lookup` gives no uid or resourceVersion for it to copy; the record has them.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, LazyLock};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta, Time};
use kube::runtime::reflector::{Lookup, ObjectRef};
use parking_lot::Mutex;

use crate::api::{ConfigurationRef, PortState, PortStatus, SwitchPort, SwitchPortSpec};

/// A string shared by every record that holds it ([`intern`]).
type Shared = Arc<str>;

/// The strings records share. Every [`PURGE_EVERY`] new strings, those no record
/// holds any more (a message with a time in it, a deleted namespace's name) go.
struct Interner {
    strings: HashSet<Shared>,
    added: usize,
}

/// How many new strings the interner takes between two purges of unused ones.
const PURGE_EVERY: usize = 4096;

static STRINGS: LazyLock<Mutex<Interner>> = LazyLock::new(|| {
    Mutex::new(Interner {
        strings: HashSet::new(),
        added: 0,
    })
});

/// The one shared copy of `s`.
fn intern(s: &str) -> Shared {
    let mut i = STRINGS.lock();
    if let Some(shared) = i.strings.get(s) {
        return shared.clone();
    }
    i.added += 1;
    if i.added >= PURGE_EVERY.max(i.strings.len()) {
        i.added = 0;
        i.strings.retain(|s| Arc::strong_count(s) > 1);
        i.strings.shrink_to_fit();
    }
    let shared = Shared::from(s);
    i.strings.insert(shared.clone());
    shared
}

fn intern_opt(s: Option<String>) -> Option<Shared> {
    s.as_deref().map(intern)
}

fn owned(s: &Option<Shared>) -> Option<String> {
    s.as_deref().map(str::to_owned)
}

/// A configuration reference with shared strings.
#[derive(Debug, Clone, PartialEq)]
struct CachedRef {
    name: Shared,
    namespace: Option<Shared>,
}

impl CachedRef {
    fn new(r: ConfigurationRef) -> Self {
        CachedRef {
            name: intern(&r.name),
            namespace: intern_opt(r.namespace),
        }
    }

    fn to_ref(&self) -> ConfigurationRef {
        ConfigurationRef {
            name: self.name.to_string(),
            namespace: owned(&self.namespace),
        }
    }
}

/// A condition with shared strings.
#[derive(Debug, Clone, PartialEq)]
struct CachedCondition {
    type_: Shared,
    status: Shared,
    reason: Shared,
    message: Shared,
    last_transition_time: Time,
    observed_generation: Option<i64>,
}

/// The status fields only a failing port sets.
#[derive(Debug, Clone, Default, PartialEq)]
struct Failing {
    last_error: Option<String>,
    failure_count: Option<i32>,
    last_attempt: Option<String>,
    last_failure_time: Option<Time>,
    next_retry_time: Option<Time>,
}

#[derive(Debug, Clone, PartialEq)]
struct CachedStatus {
    state: Option<PortState>,
    switch: Option<Shared>,
    provider: Option<Shared>,
    device_port: Option<Box<str>>,
    configuration_ref: Option<CachedRef>,
    configuration_hash: Option<Shared>,
    /// Distinct per port (it hashes the port's own entry): not interned.
    entry_hash: Option<Box<str>>,
    observed_generation: Option<i64>,
    conditions: Box<[CachedCondition]>,
    last_transition_time: Option<Time>,
    failing: Option<Box<Failing>>,
}

impl CachedStatus {
    fn new(s: PortStatus) -> Self {
        let failing = Failing {
            last_error: s.last_error,
            failure_count: s.failure_count,
            last_attempt: s.last_attempt,
            last_failure_time: s.last_failure_time,
            next_retry_time: s.next_retry_time,
        };
        CachedStatus {
            state: s.state,
            switch: intern_opt(s.switch),
            provider: intern_opt(s.provider),
            device_port: s.device_port.map(String::into_boxed_str),
            configuration_ref: s.configuration_ref.map(CachedRef::new),
            configuration_hash: intern_opt(s.configuration_hash),
            entry_hash: s.entry_hash.map(String::into_boxed_str),
            observed_generation: s.observed_generation,
            conditions: s
                .conditions
                .into_iter()
                .map(|c| CachedCondition {
                    type_: intern(&c.type_),
                    status: intern(&c.status),
                    reason: intern(&c.reason),
                    message: intern(&c.message),
                    last_transition_time: c.last_transition_time,
                    observed_generation: c.observed_generation,
                })
                .collect(),
            last_transition_time: s.last_transition_time,
            failing: (failing != Failing::default()).then(|| Box::new(failing)),
        }
    }

    fn to_status(&self) -> PortStatus {
        let failing = self.failing.as_deref();
        PortStatus {
            state: self.state,
            switch: owned(&self.switch),
            provider: owned(&self.provider),
            device_port: self.device_port.as_deref().map(str::to_owned),
            configuration_ref: self.configuration_ref.as_ref().map(CachedRef::to_ref),
            configuration_hash: owned(&self.configuration_hash),
            entry_hash: self.entry_hash.as_deref().map(str::to_owned),
            observed_generation: self.observed_generation,
            conditions: self
                .conditions
                .iter()
                .map(|c| Condition {
                    type_: c.type_.to_string(),
                    status: c.status.to_string(),
                    reason: c.reason.to_string(),
                    message: c.message.to_string(),
                    last_transition_time: c.last_transition_time.clone(),
                    observed_generation: c.observed_generation,
                })
                .collect(),
            last_error: failing.and_then(|f| f.last_error.clone()),
            failure_count: failing.and_then(|f| f.failure_count),
            last_attempt: failing.and_then(|f| f.last_attempt.clone()),
            last_failure_time: failing.and_then(|f| f.last_failure_time.clone()),
            next_retry_time: failing.and_then(|f| f.next_retry_time.clone()),
            last_transition_time: self.last_transition_time.clone(),
        }
    }
}

/// Annotations as (key, value) pairs, in key order.
type Annotations = Box<[(Box<str>, Box<str>)]>;

/// One cached SwitchPort (see the module doc).
#[derive(Debug, Clone, PartialEq)]
pub struct CompactPort {
    name: Box<str>,
    namespace: Option<Shared>,
    uid: Option<Box<str>>,
    resource_version: Option<Box<str>>,
    generation: Option<i64>,
    creation_timestamp: Option<Time>,
    deletion_timestamp: Option<Time>,
    finalizers: Option<Box<[Shared]>>,
    annotations: Option<Annotations>,
    /// Every other metadata field, when the port has any.
    rest: Option<Box<ObjectMeta>>,
    configuration: Option<CachedRef>,
    status: Option<Box<CachedStatus>>,
}

impl CompactPort {
    /// The record of `port`.
    pub fn from_port(port: SwitchPort) -> Self {
        let SwitchPort {
            mut metadata,
            spec,
            status,
        } = port;
        let name = metadata.name.take().unwrap_or_default().into_boxed_str();
        let namespace = intern_opt(metadata.namespace.take());
        let uid = metadata.uid.take().map(String::into_boxed_str);
        let resource_version = metadata.resource_version.take().map(String::into_boxed_str);
        let generation = metadata.generation.take();
        let creation_timestamp = metadata.creation_timestamp.take();
        let deletion_timestamp = metadata.deletion_timestamp.take();
        let finalizers = metadata
            .finalizers
            .take()
            .map(|f| f.iter().map(|f| intern(f)).collect());
        let annotations = metadata.annotations.take().map(|a| {
            a.into_iter()
                .map(|(k, v)| (k.into_boxed_str(), v.into_boxed_str()))
                .collect()
        });
        let rest = (metadata != ObjectMeta::default()).then(|| Box::new(metadata));
        CompactPort {
            name,
            namespace,
            uid,
            resource_version,
            generation,
            creation_timestamp,
            deletion_timestamp,
            finalizers,
            annotations,
            rest,
            configuration: spec.configuration.map(CachedRef::new),
            status: status.map(|s| Box::new(CachedStatus::new(s))),
        }
    }

    /// The port this is the record of.
    pub fn to_port(&self) -> SwitchPort {
        SwitchPort {
            metadata: self.metadata(),
            spec: SwitchPortSpec {
                configuration: self.configuration.as_ref().map(CachedRef::to_ref),
            },
            status: self.status(),
        }
    }

    /// The port's metadata.
    pub fn metadata(&self) -> ObjectMeta {
        let mut meta = self.rest.as_deref().cloned().unwrap_or_default();
        meta.name = Some(self.name.to_string());
        meta.namespace = owned(&self.namespace);
        meta.uid = self.uid.as_deref().map(str::to_owned);
        meta.resource_version = self.resource_version.as_deref().map(str::to_owned);
        meta.generation = self.generation;
        meta.creation_timestamp = self.creation_timestamp.clone();
        meta.deletion_timestamp = self.deletion_timestamp.clone();
        meta.finalizers = self
            .finalizers
            .as_ref()
            .map(|f| f.iter().map(|f| f.to_string()).collect());
        meta.annotations = self.annotations.as_ref().map(|a| {
            a.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>()
        });
        meta
    }

    /// The port's status.
    pub fn status(&self) -> Option<PortStatus> {
        self.status.as_ref().map(|s| s.to_status())
    }

    /// `metadata.name`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `metadata.namespace` (empty when absent).
    pub fn namespace(&self) -> &str {
        self.namespace.as_deref().unwrap_or_default()
    }

    /// `metadata.uid`.
    pub fn uid(&self) -> Option<&str> {
        self.uid.as_deref()
    }

    /// `metadata.resourceVersion`.
    pub fn resource_version(&self) -> Option<&str> {
        self.resource_version.as_deref()
    }

    /// Whether the port has a status.
    pub fn has_status(&self) -> bool {
        self.status.is_some()
    }

    /// `status.state`.
    pub fn state(&self) -> Option<PortState> {
        self.status.as_ref().and_then(|s| s.state)
    }

    /// The annotation `key`.
    pub fn annotation(&self, key: &str) -> Option<&str> {
        let a = self.annotations.as_deref()?;
        a.iter().find(|(k, _)| &**k == key).map(|(_, v)| &**v)
    }

    /// `spec.configuration`: its name and namespace.
    pub fn configuration(&self) -> Option<(&str, Option<&str>)> {
        let c = self.configuration.as_ref()?;
        Some((&c.name, c.namespace.as_deref()))
    }

    /// The reference to the SwitchPort this is the record of.
    pub fn object_ref(&self) -> ObjectRef<SwitchPort> {
        ObjectRef::new(&self.name).within(self.namespace())
    }
}

impl Lookup for CompactPort {
    type DynamicType = ();

    fn kind(dt: &()) -> Cow<'_, str> {
        <SwitchPort as kube::Resource>::kind(dt)
    }

    fn group(dt: &()) -> Cow<'_, str> {
        <SwitchPort as kube::Resource>::group(dt)
    }

    fn version(dt: &()) -> Cow<'_, str> {
        <SwitchPort as kube::Resource>::version(dt)
    }

    fn plural(dt: &()) -> Cow<'_, str> {
        <SwitchPort as kube::Resource>::plural(dt)
    }

    fn name(&self) -> Option<Cow<'_, str>> {
        Some(Cow::Borrowed(&self.name))
    }

    fn namespace(&self) -> Option<Cow<'_, str>> {
        self.namespace.as_deref().map(Cow::Borrowed)
    }

    /// None: the cache's key is the name and namespace (see the module doc).
    fn resource_version(&self) -> Option<Cow<'_, str>> {
        None
    }

    /// None: the cache's key is the name and namespace (see the module doc).
    fn uid(&self) -> Option<Cow<'_, str>> {
        None
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

    use super::*;

    fn time(s: &str) -> Time {
        Time(s.parse().unwrap())
    }

    fn condition(type_: &str, message: &str) -> Condition {
        Condition {
            type_: type_.into(),
            status: "True".into(),
            reason: "Active".into(),
            message: message.into(),
            last_transition_time: time("2026-11-27T21:00:00Z"),
            observed_generation: Some(3),
        }
    }

    /// Ports with every field the record keeps apart set, and with none.
    fn ports() -> Vec<SwitchPort> {
        let mut full = SwitchPort::new(
            "sw-1-p1",
            SwitchPortSpec {
                configuration: Some(ConfigurationRef {
                    name: "web".into(),
                    namespace: Some("tenant-a".into()),
                }),
            },
        );
        full.metadata = ObjectMeta {
            name: Some("sw-1-p1".into()),
            namespace: Some("infra".into()),
            uid: Some("0f6a2c1e-3b7d-4e1a-9c55-2d8f1e7a6b3c".into()),
            resource_version: Some("4711".into()),
            generation: Some(3),
            creation_timestamp: Some(time("2026-11-27T20:00:00Z")),
            deletion_timestamp: Some(time("2026-11-27T22:00:00Z")),
            finalizers: Some(vec!["patchbay.dev/cleanup".into()]),
            annotations: Some(BTreeMap::from([
                ("patchbay.dev/host".into(), "infra/host-1".into()),
                ("patchbay.dev/skip-cleanup".into(), "true".into()),
            ])),
            owner_references: Some(vec![OwnerReference {
                api_version: "patchbay.dev/v1alpha1".into(),
                kind: "Switch".into(),
                name: "sw-1".into(),
                uid: "u".into(),
                ..Default::default()
            }]),
            generate_name: Some("sw-".into()),
            // Kept whole, as a deleted port's are (the deletion hook reads them).
            labels: Some(BTreeMap::from([(
                crate::api::keys::SWITCH_LABEL.into(),
                "sw-1".into(),
            )])),
            ..Default::default()
        };
        full.status = Some(PortStatus {
            state: Some(PortState::Active),
            switch: Some("sw-1".into()),
            provider: Some("lab".into()),
            device_port: Some("Ethernet1/1".into()),
            configuration_ref: Some(ConfigurationRef {
                name: "web".into(),
                namespace: None,
            }),
            configuration_hash: Some("ab".repeat(32)),
            entry_hash: Some("0123456789abcdef".into()),
            observed_generation: Some(3),
            conditions: vec![
                condition("Ready", "the device carries SwitchPortConfiguration web"),
                condition("Drifted", "the device matches the applied configuration"),
            ],
            last_error: Some("timed out".into()),
            failure_count: Some(2),
            last_attempt: Some("apply:1234".into()),
            last_failure_time: Some(time("2026-11-27T21:01:00Z")),
            next_retry_time: Some(time("2026-11-27T21:02:00Z")),
            last_transition_time: Some(time("2026-11-27T21:00:00Z")),
        });
        let mut failing_only_count = full.clone();
        failing_only_count.status = Some(PortStatus {
            failure_count: Some(1),
            ..Default::default()
        });
        let mut empty_collections = SwitchPort::new("p", SwitchPortSpec::default());
        empty_collections.metadata.finalizers = Some(vec![]);
        empty_collections.metadata.annotations = Some(BTreeMap::new());
        empty_collections.status = Some(PortStatus::default());
        vec![
            full,
            failing_only_count,
            empty_collections,
            SwitchPort::new("bare", SwitchPortSpec::default()),
        ]
    }

    #[test]
    fn a_port_comes_back_from_its_record_as_it_was() {
        for port in ports() {
            let record = CompactPort::from_port(port.clone());
            assert_eq!(
                serde_json::to_value(record.to_port()).unwrap(),
                serde_json::to_value(&port).unwrap()
            );
            assert_eq!(record.status(), port.status);
        }
    }

    #[test]
    fn the_record_answers_what_readers_ask_without_a_port() {
        let record = CompactPort::from_port(ports().remove(0));
        assert_eq!(record.name(), "sw-1-p1");
        assert_eq!(record.namespace(), "infra");
        assert_eq!(record.resource_version(), Some("4711"));
        assert_eq!(record.state(), Some(PortState::Active));
        assert_eq!(record.annotation("patchbay.dev/host"), Some("infra/host-1"));
        assert_eq!(record.annotation("other"), None);
        assert_eq!(record.configuration(), Some(("web", Some("tenant-a"))));
        assert_eq!(
            record.object_ref(),
            ObjectRef::<SwitchPort>::new("sw-1-p1").within("infra")
        );
        // The cache's key: name and namespace, nothing to copy besides.
        let key = record.to_object_ref(());
        assert_eq!((key.extra.uid, key.extra.resource_version), (None, None));
    }

    #[test]
    fn ports_share_their_repeated_strings() {
        let (a, b) = (
            CompactPort::from_port(ports().remove(0)),
            CompactPort::from_port(ports().remove(0)),
        );
        let (sa, sb) = (a.status.unwrap(), b.status.unwrap());
        assert!(Arc::ptr_eq(
            sa.configuration_hash.as_ref().unwrap(),
            sb.configuration_hash.as_ref().unwrap()
        ));
        assert!(Arc::ptr_eq(
            &sa.conditions[0].message,
            &sb.conditions[0].message
        ));
        assert!(Arc::ptr_eq(
            a.namespace.as_ref().unwrap(),
            b.namespace.as_ref().unwrap()
        ));
    }

    #[test]
    fn strings_no_record_holds_are_purged() {
        let held = intern("held by a record in this test");
        for i in 0..2 * PURGE_EVERY {
            drop(intern(&format!("message {i} with a time in it")));
        }
        let strings = STRINGS.lock();
        assert!(strings.strings.contains("held by a record in this test"));
        assert!(
            strings.strings.len() <= PURGE_EVERY + 64,
            "{} strings kept",
            strings.strings.len()
        );
        drop(held);
    }
}

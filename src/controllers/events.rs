//! Publishing `events.k8s.io/v1` Events about the objects the controllers own. Does
//! Kubernetes I/O (create and patch Events).
//!
//! Normal Events (state transitions) are created one by one: they do not repeat.
//! Warning Events repeat while a failure lasts; each repetition of the same failure
//! (same object, reason and note) is folded into one Event **series**, as
//! `events.k8s.io/v1` defines it and kube's `Recorder` does: the first occurrence
//! creates the Event, later ones patch its `series.count` and
//! `series.lastObservedTime`. `kubectl describe` then shows one line with a count
//! instead of one line per attempt.
//!
//! Unlike the `Recorder`, which keeps every Event it published for six minutes and
//! scans that cache on every publish (tens of MiB at 10,000 ports), only the open
//! Warning series are remembered: an object's series are forgotten as soon as it is
//! healthy again ([`EventPublisher::forget`]) or deleted, and the map is bounded
//! ([`MAX_SERIES`], oldest dropped first). A forgotten or expired series simply
//! starts a new Event.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::time::{Duration, Instant};

use k8s_openapi::api::events::v1::{Event as K8sEvent, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::events::Reporter;
use kube::{Client, ResourceExt};
use serde_json::json;

use crate::decide::status::Severity;

/// Most open Warning series remembered at once.
pub const MAX_SERIES: usize = 4096;
/// A series not seen for this long starts a new Event (the API server's Event TTL
/// is one hour).
const SERIES_TTL: Duration = Duration::from_secs(30 * 60);
/// Events carry at most this many characters of note (the API allows 1 kB).
const NOTE_LIMIT: usize = 1000;

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct SeriesKey {
    uid: String,
    reason: String,
    note: u64,
}

#[derive(Debug, Clone)]
struct Series {
    name: String,
    count: i32,
    last: Instant,
}

/// Publishes Events for one reporting controller. See the module documentation.
pub struct EventPublisher {
    client: Client,
    reporter: Reporter,
    series: Mutex<HashMap<SeriesKey, Series>>,
}

impl EventPublisher {
    /// A publisher reporting as `reporter`.
    pub fn new(client: Client, reporter: Reporter) -> Self {
        Self {
            client,
            reporter,
            series: Mutex::new(HashMap::new()),
        }
    }

    fn series(&self) -> parking_lot::MutexGuard<'_, HashMap<SeriesKey, Series>> {
        self.series.lock()
    }

    /// Publishes an Event about `obj`. A Warning that repeats an open series is
    /// counted on its Event. Failures to publish are logged, never returned: Events
    /// are best effort.
    pub async fn publish(
        &self,
        obj: &impl ResourceExt<DynamicType = ()>,
        severity: Severity,
        reason: &str,
        note: &str,
    ) {
        let regarding = obj.object_ref(&());
        let note: String = note.chars().take(NOTE_LIMIT).collect();
        let reason: String = reason.chars().take(128).collect();
        let ns = regarding
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into());
        let events: Api<K8sEvent> = Api::namespaced(self.client.clone(), &ns);
        let key = (severity == Severity::Warning).then(|| SeriesKey {
            uid: regarding.uid.clone().unwrap_or_default(),
            reason: reason.clone(),
            note: digest(&note),
        });
        if let Some(key) = &key
            && let Some(series) = self.next_in_series(key)
        {
            let patch = json!({"series": EventSeries {
                count: series.count,
                last_observed_time: MicroTime(jiff::Timestamp::now()),
            }});
            match events
                .patch(&series.name, &PatchParams::default(), &Patch::Merge(patch))
                .await
            {
                Ok(_) => return,
                // Expired or deleted on the server: start a new Event.
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => {
                    tracing::warn!(error = %e, "updating an event series failed");
                    return;
                }
            }
        }
        let now = jiff::Timestamp::now();
        let name = format!(
            "{}.{:x}",
            regarding.name.as_deref().unwrap_or("object"),
            now.as_nanosecond()
        );
        let event = K8sEvent {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(ns.clone()),
                ..Default::default()
            },
            event_time: Some(MicroTime(now)),
            type_: Some(
                match severity {
                    Severity::Normal => "Normal",
                    Severity::Warning => "Warning",
                }
                .into(),
            ),
            reason: Some(reason),
            note: Some(note),
            action: Some("Reconcile".into()),
            reporting_controller: Some(self.reporter.controller.clone()),
            reporting_instance: Some(
                self.reporter
                    .instance
                    .clone()
                    .unwrap_or_else(|| self.reporter.controller.clone()),
            ),
            regarding: Some(regarding),
            ..Default::default()
        };
        match events.create(&PostParams::default(), &event).await {
            Ok(_) => {
                if let Some(key) = key {
                    self.open(key, name);
                }
            }
            Err(e) => tracing::warn!(error = %e, "publishing an event failed"),
        }
    }

    /// Forgets the open series of the object with this uid (it is healthy again, or
    /// gone): its next failure starts a new Event.
    pub fn forget(&self, uid: &str) {
        let mut series = self.series();
        if !series.is_empty() {
            series.retain(|k, _| k.uid != uid);
        }
    }

    /// The open series `key` belongs to, counted one more; `None` to start one.
    fn next_in_series(&self, key: &SeriesKey) -> Option<Series> {
        let mut series = self.series();
        let entry = series.get_mut(key)?;
        if entry.last.elapsed() > SERIES_TTL {
            series.remove(key);
            return None;
        }
        entry.count += 1;
        entry.last = Instant::now();
        Some(entry.clone())
    }

    fn open(&self, key: SeriesKey, name: String) {
        let mut series = self.series();
        if series.len() >= MAX_SERIES {
            let expired: Vec<SeriesKey> = series
                .iter()
                .filter(|(_, s)| s.last.elapsed() > SERIES_TTL)
                .map(|(k, _)| k.clone())
                .collect();
            for k in expired {
                series.remove(&k);
            }
        }
        if series.len() >= MAX_SERIES
            && let Some(oldest) = series
                .iter()
                .min_by_key(|(_, s)| s.last)
                .map(|(k, _)| k.clone())
        {
            series.remove(&oldest);
        }
        series.insert(
            key,
            Series {
                name,
                count: 1,
                last: Instant::now(),
            },
        );
    }
}

fn digest(text: &str) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    text.hash(&mut h);
    h.finish()
}

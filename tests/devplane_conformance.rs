//! The API conventions the operator relies on, exercised through kube-rs exactly as
//! the operator uses them. Runs on devplane by default; with
//! `PATCHBAY_E2E_CLUSTER=kubeconfig` the same tests run against a real cluster
//! (the few that need devplane's small watch history say so and skip).

mod support;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use k8s_openapi::api::events::v1::Event as K8sEvent;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{
    Api, DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams, WatchEvent,
    WatchParams,
};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::finalizer::{Event as FinalizerEvent, finalizer};
use kube::{CustomResource, CustomResourceExt, Resource, ResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;
use support::{Cluster, eventually, on_devplane};

/// A test resource with a status subresource and a validated spec.
#[derive(CustomResource, Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "conformance.patchbay.dev",
    version = "v1",
    kind = "Widget",
    namespaced,
    status = "WidgetStatus",
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase")
)]
struct WidgetSpec {
    /// A VLAN-like number.
    #[schemars(range(min = 1, max = 4094))]
    size: i64,
    /// A safe name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(r"^[a-z]+$"))]
    label: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
struct WidgetStatus {
    /// Where the widget is.
    phase: Option<String>,
}

fn widget(name: &str, size: i64) -> Widget {
    Widget::new(name, WidgetSpec { size, label: None })
}

async fn setup(test: &str) -> (Cluster, Api<Widget>) {
    let cluster = Cluster::start(test).await;
    cluster.install_crd(Widget::crd()).await;
    let api = Api::namespaced(cluster.client.clone(), &cluster.namespace);
    (cluster, api)
}

/// The collection's resourceVersion now (where a watch starts).
async fn list_rv(api: &Api<Widget>) -> String {
    api.list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap()
}

fn rv(obj: &impl Resource) -> u64 {
    obj.meta()
        .resource_version
        .as_deref()
        .and_then(|r| r.parse().ok())
        .expect("numeric resourceVersion")
}

#[tokio::test]
async fn watch_sees_create_update_delete_in_order_with_increasing_resource_versions() {
    let (cluster, api) = setup("watch_order").await;
    let list = api.list(&ListParams::default()).await.unwrap();
    let start = list.metadata.resource_version.unwrap();
    let stream = api
        .watch(&WatchParams::default().timeout(10), &start)
        .await
        .unwrap();
    let mut stream = stream.boxed();
    let created = api
        .create(&PostParams::default(), &widget("w1", 10))
        .await
        .unwrap();
    api.patch(
        "w1",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"size": 11}})),
    )
    .await
    .unwrap();
    api.delete("w1", &DeleteParams::default()).await.unwrap();
    let mut seen = Vec::new();
    while seen.len() < 3 {
        match stream.try_next().await.unwrap().expect("stream open") {
            WatchEvent::Added(o) => seen.push(("ADDED", rv(&o))),
            WatchEvent::Modified(o) => seen.push(("MODIFIED", rv(&o))),
            WatchEvent::Deleted(o) => seen.push(("DELETED", rv(&o))),
            WatchEvent::Bookmark(_) => {}
            WatchEvent::Error(e) => panic!("watch error {e:?}"),
        }
    }
    let kinds: Vec<&str> = seen.iter().map(|s| s.0).collect();
    assert_eq!(kinds, ["ADDED", "MODIFIED", "DELETED"]);
    assert_eq!(seen[0].1, rv(&created));
    assert!(seen[0].1 < seen[1].1 && seen[1].1 < seen[2].1, "{seen:?}");
    cluster.finish().await;
}

/// A watch with a label selector sees an object that starts matching as ADDED and
/// one that stops matching as DELETED (kube-apiserver's watch cache does; a
/// controller watching a selection relies on it to notice an object leaving it).
#[tokio::test]
async fn a_selector_watch_sees_objects_enter_and_leave_the_selection() {
    let (cluster, api) = setup("watch_selection").await;
    let start = list_rv(&api).await;
    let stream = api
        .watch(&WatchParams::default().labels("team=a").timeout(10), &start)
        .await
        .unwrap();
    let mut stream = stream.boxed();
    let label = |team: &str| Patch::Merge(json!({"metadata": {"labels": {"team": team}}}));
    api.create(&PostParams::default(), &widget("w1", 1))
        .await
        .unwrap();
    for (team, size) in [("a", 1), ("a", 2), ("b", 2), ("b", 3), ("a", 3)] {
        api.patch("w1", &PatchParams::default(), &label(team))
            .await
            .unwrap();
        api.patch(
            "w1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"size": size}})),
        )
        .await
        .unwrap();
    }
    api.delete("w1", &DeleteParams::default()).await.unwrap();
    let mut seen = Vec::new();
    while seen.last() != Some(&("DELETED", 3)) {
        match stream.try_next().await.unwrap().expect("stream open") {
            WatchEvent::Added(o) => seen.push(("ADDED", o.spec.size)),
            WatchEvent::Modified(o) => seen.push(("MODIFIED", o.spec.size)),
            WatchEvent::Deleted(o) => seen.push(("DELETED", o.spec.size)),
            WatchEvent::Bookmark(_) => {}
            WatchEvent::Error(e) => panic!("watch error {e:?}"),
        }
    }
    // Writes that change nothing make no event (as kube-apiserver).
    assert_eq!(
        seen,
        [
            ("ADDED", 1),    // labelled a: enters the selection
            ("MODIFIED", 2), // a change inside it
            ("DELETED", 2),  // labelled b: leaves it (size 3 is not seen)
            ("ADDED", 3),    // labelled a again
            ("DELETED", 3),  // deleted
        ]
    );
    cluster.finish().await;
}

/// The faults a test may ask for: watch events held back (in order) and slow
/// LISTs; the writes themselves are not delayed.
#[tokio::test]
async fn delayed_watch_events_arrive_late_and_in_order_and_slow_lists_answer_late() {
    if !on_devplane() {
        eprintln!("skipped: faults of devplane's");
        return;
    }
    let (cluster, api) = setup("delays").await;
    let devplane = cluster.devplane().unwrap();
    let start = api.list(&ListParams::default()).await.unwrap();
    let mut stream = api
        .watch(
            &WatchParams::default().timeout(10),
            &start.metadata.resource_version.unwrap(),
        )
        .await
        .unwrap()
        .boxed();
    let delay = Duration::from_millis(600);
    devplane.delay_watch_events("widgets", delay);
    let written = std::time::Instant::now();
    let created = api
        .create(&PostParams::default(), &widget("w1", 10))
        .await
        .unwrap();
    let patched = api
        .patch(
            "w1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"size": 11}})),
        )
        .await
        .unwrap();
    // Written at once: a GET sees the change before any watcher does.
    assert_eq!(api.get("w1").await.unwrap().spec.size, 11);
    let mut seen = Vec::new();
    while seen.len() < 2 {
        match stream.try_next().await.unwrap().expect("stream open") {
            WatchEvent::Added(o) | WatchEvent::Modified(o) => {
                assert!(written.elapsed() >= delay, "{:?}", written.elapsed());
                seen.push(rv(&o));
            }
            WatchEvent::Bookmark(_) => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(seen, [rv(&created), rv(&patched)]);
    devplane.delay_watch_events("widgets", Duration::ZERO);
    devplane.delay_lists("widgets", delay);
    let asked = std::time::Instant::now();
    let list = api.list(&ListParams::default()).await.unwrap();
    assert!(asked.elapsed() >= delay, "{:?}", asked.elapsed());
    assert_eq!(list.items.len(), 1);
    devplane.delay_lists("widgets", Duration::ZERO);
    cluster.finish().await;
}

#[tokio::test]
async fn watches_broken_on_demand_close_or_end_gone_and_lists_count_their_objects() {
    if !on_devplane() {
        eprintln!("skipped: faults of devplane's");
        return;
    }
    let (cluster, api) = setup("breaks").await;
    let devplane = cluster.devplane().unwrap();
    for i in 0..5 {
        api.create(&PostParams::default(), &widget(&format!("w{i}"), 1))
            .await
            .unwrap();
    }
    let listed = devplane.objects_listed("widgets");
    let pages = api.list(&ListParams::default().limit(2)).await.unwrap();
    assert_eq!(pages.items.len(), 2);
    assert_eq!(
        devplane.objects_listed("widgets") - listed,
        2,
        "a page counts its own"
    );
    let now = list_rv(&api).await;
    let open = |rv: String| {
        let api = api.clone();
        async move {
            api.watch(&WatchParams::default().timeout(30), &rv)
                .await
                .unwrap()
                .boxed()
        }
    };
    // Closed: the stream ends with no event; watching again from the same version
    // works (nothing expired).
    let mut closed = open(now.clone()).await;
    devplane.break_watches("widgets", patchbay_devplane::WatchBreak::Closed);
    let ended = tokio::time::timeout(Duration::from_secs(5), closed.try_next()).await;
    assert!(matches!(ended, Ok(Ok(None))), "{ended:?}");
    let mut again = open(now.clone()).await;
    api.create(&PostParams::default(), &widget("w5", 1))
        .await
        .unwrap();
    match again.try_next().await.unwrap() {
        Some(WatchEvent::Added(w)) => assert_eq!(w.name_any(), "w5"),
        other => panic!("the watch started after the break is open: {other:?}"),
    }
    // Gone: the stream ends with 410, as for a compacted version.
    devplane.break_watches("widgets", patchbay_devplane::WatchBreak::Gone);
    match tokio::time::timeout(Duration::from_secs(5), again.try_next()).await {
        Ok(Ok(Some(WatchEvent::Error(e)))) => {
            assert_eq!((e.code, e.reason.as_str()), (410, "Expired"))
        }
        other => panic!("expected 410 Gone, got {other:?}"),
    }
    cluster.finish().await;
}

#[tokio::test]
async fn a_stale_update_conflicts_and_generate_name_creates_unique_names() {
    let (cluster, api) = setup("conflict").await;
    let first = api
        .create(&PostParams::default(), &widget("w1", 10))
        .await
        .unwrap();
    let mut newer = first.clone();
    newer.spec.size = 20;
    api.replace("w1", &PostParams::default(), &newer)
        .await
        .unwrap();
    let mut stale = first.clone();
    stale.spec.size = 30;
    match api.replace("w1", &PostParams::default(), &stale).await {
        Err(kube::Error::Api(e)) => assert_eq!((e.code, e.reason.as_str()), (409, "Conflict")),
        other => panic!("a stale update must conflict, got {other:?}"),
    }
    match api.create(&PostParams::default(), &widget("w1", 10)).await {
        Err(kube::Error::Api(e)) => assert_eq!((e.code, e.reason.as_str()), (409, "AlreadyExists")),
        other => panic!("a duplicate create must fail, got {other:?}"),
    }
    let mut generated = widget("", 5);
    generated.metadata.name = None;
    generated.metadata.generate_name = Some("gen-".into());
    let a = api
        .create(&PostParams::default(), &generated)
        .await
        .unwrap();
    let b = api
        .create(&PostParams::default(), &generated)
        .await
        .unwrap();
    assert!(a.name_any().starts_with("gen-") && b.name_any().starts_with("gen-"));
    assert_ne!(a.name_any(), b.name_any());
    assert!(a.uid().is_some() && a.creation_timestamp().is_some());
    assert_eq!(a.metadata.generation, Some(1));
    cluster.finish().await;
}

#[tokio::test]
async fn a_finalizer_holds_deletion_until_it_is_removed() {
    let (cluster, api) = setup("finalizer").await;
    let mut w = widget("held", 10);
    w.metadata.finalizers = Some(vec!["conformance.patchbay.dev/hold".into()]);
    api.create(&PostParams::default(), &w).await.unwrap();
    api.delete("held", &DeleteParams::default()).await.unwrap();
    let still = api
        .get("held")
        .await
        .expect("still there while the finalizer is on");
    assert!(still.metadata.deletion_timestamp.is_some());
    api.patch(
        "held",
        &PatchParams::default(),
        &Patch::Json::<()>(
            serde_json::from_value(json!([
                {"op": "test", "path": "/metadata/finalizers/0", "value": "conformance.patchbay.dev/hold"},
                {"op": "remove", "path": "/metadata/finalizers"}
            ]))
            .unwrap(),
        ),
    )
    .await
    .unwrap();
    eventually(5, "the object to disappear", || async {
        api.get_opt("held").await.unwrap().is_none().then_some(())
    })
    .await;
    cluster.finish().await;
}

#[tokio::test]
async fn generation_counts_spec_changes_and_the_status_subresource_is_separate() {
    let (cluster, api) = setup("generation").await;
    api.create(&PostParams::default(), &widget("g", 10))
        .await
        .unwrap();
    let pp = PatchParams::default();
    let s = api
        .patch_status(
            "g",
            &pp,
            &Patch::Merge(json!({"status": {"phase": "Ready"}, "spec": {"size": 99}})),
        )
        .await
        .unwrap();
    assert_eq!(
        s.metadata.generation,
        Some(1),
        "a status write does not bump generation"
    );
    assert_eq!(s.spec.size, 10, "spec changes through /status are ignored");
    assert_eq!(s.status.as_ref().unwrap().phase.as_deref(), Some("Ready"));
    let m = api
        .patch(
            "g",
            &pp,
            &Patch::Merge(json!({"spec": {"size": 12}, "status": {"phase": "Bogus"}})),
        )
        .await
        .unwrap();
    assert_eq!(m.metadata.generation, Some(2));
    assert_eq!(
        m.status.as_ref().unwrap().phase.as_deref(),
        Some("Ready"),
        "status changes on the main resource are ignored"
    );
    let before = rv(&m);
    let again = api
        .patch("g", &pp, &Patch::Merge(json!({"spec": {"size": 12}})))
        .await
        .unwrap();
    assert_eq!(rv(&again), before, "a no-op patch changes nothing");
    let labelled = api
        .patch(
            "g",
            &pp,
            &Patch::Merge(json!({"metadata": {"labels": {"a": "b"}}})),
        )
        .await
        .unwrap();
    assert_eq!(
        labelled.metadata.generation,
        Some(2),
        "metadata changes do not bump generation"
    );
    cluster.finish().await;
}

fn owned_config_map(name: &str, owner: &Widget) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            owner_references: Some(vec![OwnerReference {
                api_version: "conformance.patchbay.dev/v1".into(),
                kind: "Widget".into(),
                name: owner.name_any(),
                uid: owner.uid().unwrap(),
                block_owner_deletion: Some(true),
                controller: Some(true),
            }]),
            ..Default::default()
        },
        data: Some(BTreeMap::from([("k".to_string(), "v".to_string())])),
        ..Default::default()
    }
}

#[tokio::test]
async fn owner_references_cascade_background_foreground_and_orphan() {
    let (cluster, api) = setup("gc").await;
    let cms: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), &cluster.namespace);
    for (owner, policy) in [
        ("bg", "Background"),
        ("fg", "Foreground"),
        ("orphan", "Orphan"),
    ] {
        let w = api
            .create(&PostParams::default(), &widget(owner, 1))
            .await
            .unwrap();
        cms.create(
            &PostParams::default(),
            &owned_config_map(&format!("{owner}-dep"), &w),
        )
        .await
        .unwrap();
        let dp = match policy {
            "Foreground" => DeleteParams::foreground(),
            "Orphan" => DeleteParams::orphan(),
            _ => DeleteParams::background(),
        };
        api.delete(owner, &dp).await.unwrap();
        eventually(10, "the owner to go", || async {
            api.get_opt(owner).await.unwrap().is_none().then_some(())
        })
        .await;
    }
    eventually(
        10,
        "background and foreground dependents to be collected",
        || async {
            let bg = cms.get_opt("bg-dep").await.unwrap();
            let fg = cms.get_opt("fg-dep").await.unwrap();
            (bg.is_none() && fg.is_none()).then_some(())
        },
    )
    .await;
    let orphan = cms
        .get("orphan-dep")
        .await
        .expect("an orphaned dependent stays");
    assert!(
        orphan
            .metadata
            .owner_references
            .unwrap_or_default()
            .is_empty(),
        "and loses its ownerReference"
    );
    cluster.finish().await;
}

#[tokio::test]
async fn an_invalid_object_is_refused_with_422_naming_the_field() {
    let (cluster, api) = setup("invalid").await;
    let mut bad = widget("bad", 5000);
    bad.spec.label = Some("UPPER;case".into());
    match api.create(&PostParams::default(), &bad).await {
        Err(kube::Error::Api(e)) => {
            assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"));
            assert!(e.message.contains("spec.size"), "{}", e.message);
            assert!(
                e.message.contains("less than or equal to 4094"),
                "{}",
                e.message
            );
            assert!(e.message.contains("spec.label"), "{}", e.message);
        }
        other => panic!("expected 422, got {other:?}"),
    }
    assert!(api.get_opt("bad").await.unwrap().is_none());
    // Unknown fields are pruned, or refused under strict field validation.
    let raw: Api<kube::api::DynamicObject> = Api::namespaced_with(
        cluster.client.clone(),
        &cluster.namespace,
        &kube::api::ApiResource::erase::<Widget>(&()),
    );
    let with_extra: kube::api::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "conformance.patchbay.dev/v1", "kind": "Widget",
        "metadata": {"name": "extra"}, "spec": {"size": 3, "bogus": true}
    }))
    .unwrap();
    let created = raw
        .create(&PostParams::default(), &with_extra)
        .await
        .unwrap();
    assert!(
        created.data["spec"].get("bogus").is_none(),
        "unknown fields are pruned"
    );
    cluster.finish().await;
}

#[tokio::test]
async fn secrets_config_maps_and_leases() {
    let cluster = Cluster::start("builtins").await;
    let ns = &cluster.namespace;
    let secrets: Api<Secret> = Api::namespaced(cluster.client.clone(), ns);
    let s = Secret {
        metadata: ObjectMeta {
            name: Some("login".into()),
            ..Default::default()
        },
        string_data: Some(BTreeMap::from([(
            "password".to_string(),
            "s3cret".to_string(),
        )])),
        ..Default::default()
    };
    secrets.create(&PostParams::default(), &s).await.unwrap();
    let got = secrets.get("login").await.unwrap();
    assert_eq!(
        got.data.unwrap()["password"].0,
        b"s3cret".to_vec(),
        "stringData lands in data"
    );
    assert!(got.string_data.is_none());

    let leases: Api<Lease> = Api::namespaced(cluster.client.clone(), ns);
    let lease = Lease {
        metadata: ObjectMeta {
            name: Some("patchbay-leader".into()),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some("a".into()),
            lease_duration_seconds: Some(15),
            ..Default::default()
        }),
    };
    let created = leases.create(&PostParams::default(), &lease).await.unwrap();
    let mut taken = created.clone();
    taken.spec.as_mut().unwrap().holder_identity = Some("b".into());
    leases
        .replace("patchbay-leader", &PostParams::default(), &taken)
        .await
        .unwrap();
    let mut late = created;
    late.spec.as_mut().unwrap().holder_identity = Some("c".into());
    let err = leases
        .replace("patchbay-leader", &PostParams::default(), &late)
        .await;
    assert!(
        matches!(err, Err(kube::Error::Api(e)) if e.code == 409),
        "a second taker conflicts"
    );
    cluster.finish().await;
}

#[tokio::test]
async fn list_selectors_and_paging() {
    let (cluster, api) = setup("selectors").await;
    for (i, tier) in ["web", "web", "db", "cache", "db"].iter().enumerate() {
        let mut w = widget(&format!("w{i}"), 1);
        w.metadata.labels = Some(BTreeMap::from([("tier".to_string(), tier.to_string())]));
        api.create(&PostParams::default(), &w).await.unwrap();
    }
    let names = |l: kube::api::ObjectList<Widget>| {
        let mut n: Vec<String> = l.items.iter().map(|w| w.name_any()).collect();
        n.sort();
        n
    };
    let lp = |s: &str| ListParams::default().labels(s);
    assert_eq!(
        names(api.list(&lp("tier=web")).await.unwrap()),
        ["w0", "w1"]
    );
    assert_eq!(
        names(api.list(&lp("tier in (db,cache)")).await.unwrap()),
        ["w2", "w3", "w4"]
    );
    assert_eq!(
        names(api.list(&lp("tier notin (web),tier")).await.unwrap()),
        ["w2", "w3", "w4"]
    );
    assert_eq!(
        names(api.list(&lp("!tier")).await.unwrap()),
        Vec::<String>::new()
    );
    let by_name = api
        .list(&ListParams::default().fields("metadata.name=w3"))
        .await
        .unwrap();
    assert_eq!(names(by_name), ["w3"]);
    // Paging: two at a time.
    let mut all = Vec::new();
    let mut token: Option<String> = None;
    let mut pages = 0;
    loop {
        let mut p = ListParams::default().limit(2);
        if let Some(t) = &token {
            p = p.continue_token(t);
        }
        let page = api.list(&p).await.unwrap();
        pages += 1;
        all.extend(page.items.iter().map(|w| w.name_any()));
        token = page.metadata.continue_.filter(|c| !c.is_empty());
        if token.is_none() {
            break;
        }
    }
    assert_eq!(pages, 3);
    all.sort();
    assert_eq!(all, ["w0", "w1", "w2", "w3", "w4"]);
    cluster.finish().await;
}

#[tokio::test]
async fn an_expired_resource_version_is_gone_and_bookmarks_and_timeouts_work() {
    if !on_devplane() {
        eprintln!("skipped: needs devplane's small watch history");
        return;
    }
    let cluster = Cluster::start_with(
        "gone",
        patchbay_devplane::Config {
            history_limit: 20,
            bookmark_interval: Duration::from_millis(200),
            ..Default::default()
        },
    )
    .await;
    cluster.install_crd(Widget::crd()).await;
    let api: Api<Widget> = Api::namespaced(cluster.client.clone(), &cluster.namespace);
    let first = api
        .create(&PostParams::default(), &widget("w0", 1))
        .await
        .unwrap();
    for i in 1..40 {
        api.create(&PostParams::default(), &widget(&format!("w{i}"), 1))
            .await
            .unwrap();
    }
    let old = rv(&first).to_string();
    let mut stream = api
        .watch(&WatchParams::default(), &old)
        .await
        .unwrap()
        .boxed();
    match stream.try_next().await {
        Ok(Some(WatchEvent::Error(e))) => assert_eq!(e.code, 410),
        Err(kube::Error::Api(e)) => assert_eq!(e.code, 410),
        other => panic!("expected 410 Gone, got {other:?}"),
    }
    // A fresh watch with bookmarks allowed gets one, and ends at its timeout.
    let now = list_rv(&api).await;
    let started = std::time::Instant::now();
    let events: Vec<_> = api
        .watch(&WatchParams::default().timeout(1), &now)
        .await
        .unwrap()
        .collect()
        .await;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the stream ends at timeoutSeconds"
    );
    assert!(
        events
            .iter()
            .any(|e| matches!(e, Ok(WatchEvent::Bookmark(_)))),
        "no BOOKMARK in {events:?}"
    );
    cluster.finish().await;
}

#[tokio::test]
async fn namespace_deletion_removes_everything_in_it() {
    let (cluster, api) = setup("nsdelete").await;
    api.create(&PostParams::default(), &widget("w", 1))
        .await
        .unwrap();
    let namespaces: Api<Namespace> = Api::all(cluster.client.clone());
    namespaces
        .delete(&cluster.namespace, &DeleteParams::default())
        .await
        .unwrap();
    eventually(30, "the namespace and its objects to go", || async {
        let ns_gone = namespaces
            .get_opt(&cluster.namespace)
            .await
            .unwrap()
            .is_none();
        let w_gone = api.get_opt("w").await.unwrap().is_none();
        (ns_gone && w_gone).then_some(())
    })
    .await;
}

#[tokio::test]
async fn apply_patches_create_and_update_and_a_failed_test_op_is_refused() {
    let (cluster, api) = setup("apply").await;
    let ssa = PatchParams::apply("conformance-test").force();
    let applied = api
        .patch(
            "a",
            &ssa,
            &Patch::Apply(
                json!({"apiVersion": "conformance.patchbay.dev/v1", "kind": "Widget",
                                 "metadata": {"name": "a"}, "spec": {"size": 7}}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(applied.spec.size, 7);
    let updated = api
        .patch(
            "a",
            &ssa,
            &Patch::Apply(
                json!({"apiVersion": "conformance.patchbay.dev/v1", "kind": "Widget",
                                 "metadata": {"name": "a"}, "spec": {"size": 8}}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(
        (updated.spec.size, updated.metadata.generation),
        (8, Some(2))
    );
    let failing_test: json_patch_ops::Ops = serde_json::from_value(json!([
        {"op": "test", "path": "/spec/size", "value": 1},
        {"op": "replace", "path": "/spec/size", "value": 2}
    ]))
    .unwrap();
    let err = api
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Json::<()>(failing_test),
        )
        .await;
    assert!(matches!(err, Err(kube::Error::Api(_))), "{err:?}");
    assert_eq!(api.get("a").await.unwrap().spec.size, 8);
    cluster.finish().await;
}

/// kube's JSON patch type, named once.
mod json_patch_ops {
    pub type Ops = json_patch::Patch;
}

#[tokio::test]
async fn the_events_recorder_publishes_events() {
    let (cluster, api) = setup("events").await;
    let w = api
        .create(&PostParams::default(), &widget("w", 1))
        .await
        .unwrap();
    let recorder = Recorder::new(
        cluster.client.clone(),
        Reporter {
            controller: "patchbay-test".into(),
            instance: None,
        },
    );
    let ev = Event {
        type_: EventType::Normal,
        reason: "Configured".into(),
        note: Some("port configured".into()),
        action: "Apply".into(),
        secondary: None,
    };
    recorder.publish(&ev, &w.object_ref(&())).await.unwrap();
    recorder.publish(&ev, &w.object_ref(&())).await.unwrap(); // a series: patched
    let events: Api<K8sEvent> = Api::namespaced(cluster.client.clone(), &cluster.namespace);
    let list = events.list(&ListParams::default()).await.unwrap();
    let ours: Vec<_> = list
        .items
        .iter()
        .filter(|e| e.reason.as_deref() == Some("Configured"))
        .collect();
    assert_eq!(ours.len(), 1);
    assert_eq!(ours[0].series.as_ref().map(|s| s.count), Some(2));
    cluster.finish().await;
}

#[derive(Debug, thiserror::Error)]
#[error(transparent)]
struct ReconcileError(#[from] Box<kube::runtime::finalizer::Error<kube::Error>>);

struct Ctx {
    api: Api<Widget>,
    cleaned: Mutex<Vec<String>>,
}

async fn reconcile(w: Arc<Widget>, ctx: Arc<Ctx>) -> Result<Action, ReconcileError> {
    let api = ctx.api.clone();
    finalizer(&api, "conformance.patchbay.dev/cleanup", w, |event| async {
        match event {
            FinalizerEvent::Apply(w) => {
                api.patch_status(
                    &w.name_any(),
                    &PatchParams::default(),
                    &Patch::Merge(
                        json!({"status": {"phase": format!("Reconciled-{}", w.spec.size)}}),
                    ),
                )
                .await?;
                Ok(Action::await_change())
            }
            FinalizerEvent::Cleanup(w) => {
                ctx.cleaned.lock().unwrap().push(w.name_any());
                Ok(Action::await_change())
            }
        }
    })
    .await
    .map_err(|e| ReconcileError(Box::new(e)))
}

fn error_policy(_: Arc<Widget>, _: &ReconcileError, _: Arc<Ctx>) -> Action {
    Action::requeue(Duration::from_millis(200))
}

#[tokio::test]
async fn a_controller_with_the_finalizer_helper_reconciles_end_to_end() {
    let (cluster, api) = setup("controller").await;
    let ctx = Arc::new(Ctx {
        api: api.clone(),
        cleaned: Mutex::new(Vec::new()),
    });
    let controller = tokio::spawn(
        Controller::new(api.clone(), kube::runtime::watcher::Config::default())
            .run(reconcile, error_policy, ctx.clone())
            .for_each(|_| async {}),
    );
    api.create(&PostParams::default(), &widget("c", 3))
        .await
        .unwrap();
    eventually(15, "the controller to reconcile", || async {
        let w = api.get("c").await.ok()?;
        let phase = w.status.as_ref()?.phase.clone()?;
        (phase == "Reconciled-3" && w.finalizers().len() == 1).then_some(())
    })
    .await;
    api.patch(
        "c",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"size": 4}})),
    )
    .await
    .unwrap();
    eventually(15, "the controller to see the change", || async {
        let w = api.get("c").await.ok()?;
        (w.status?.phase? == "Reconciled-4").then_some(())
    })
    .await;
    api.delete("c", &DeleteParams::default()).await.unwrap();
    eventually(15, "cleanup and removal", || async {
        api.get_opt("c").await.unwrap().is_none().then_some(())
    })
    .await;
    assert_eq!(*ctx.cleaned.lock().unwrap(), ["c"]);
    controller.abort();
    cluster.finish().await;
}

#[tokio::test]
async fn events_are_served_through_both_groups_with_their_field_selectors() {
    use k8s_openapi::api::core::v1::{Event as CoreEvent, ObjectReference};
    let (cluster, widgets) = setup("events-two-groups").await;
    let ns = cluster.namespace.clone();
    let w = widgets
        .create(&PostParams::default(), &widget("w1", 10))
        .await
        .unwrap();
    // Published through events.k8s.io/v1, as the operator does (kube's Recorder
    // folds the repetition into a series).
    let recorder = Recorder::new(
        cluster.client.clone(),
        Reporter {
            controller: "patchbay-test".into(),
            instance: None,
        },
    );
    let warning = Event {
        type_: EventType::Warning,
        reason: "DeviceUnreachable".into(),
        note: Some("cannot reach the device".into()),
        action: "Reconcile".into(),
        secondary: None,
    };
    for _ in 0..3 {
        recorder
            .publish(&warning, &w.object_ref(&()))
            .await
            .unwrap();
    }
    let core: Api<CoreEvent> = Api::namespaced(cluster.client.clone(), &ns);
    let v1: Api<K8sEvent> = Api::namespaced(cluster.client.clone(), &ns);
    // The core face, with the selectors `kubectl describe` and `kubectl events` use.
    let lp = ListParams::default().fields(&format!(
        "involvedObject.kind=Widget,involvedObject.name=w1,involvedObject.namespace={ns},involvedObject.uid={}",
        w.uid().unwrap()
    ));
    let listed = core.list(&lp).await.unwrap().items;
    assert_eq!(listed.len(), 1, "{listed:?}");
    let e = &listed[0];
    assert_eq!(e.message.as_deref(), Some("cannot reach the device"));
    assert_eq!(e.reason.as_deref(), Some("DeviceUnreachable"));
    assert_eq!(e.involved_object.name.as_deref(), Some("w1"));
    assert_eq!(e.reporting_component.as_deref(), Some("patchbay-test"));
    assert_eq!(e.series.as_ref().map(|s| s.count), Some(Some(3)));
    // The events.k8s.io face, with its own labels, is the same object.
    let same = v1
        .list(&ListParams::default().fields("regarding.kind=Widget,regarding.name=w1,type=Warning"))
        .await
        .unwrap()
        .items;
    assert_eq!(same.len(), 1);
    assert_eq!(same[0].metadata.name, e.metadata.name);
    assert_eq!(same[0].note.as_deref(), Some("cannot reach the device"));
    assert_eq!(same[0].series.as_ref().map(|s| s.count), Some(3));
    // Written through core/v1, read through events.k8s.io/v1.
    let legacy = CoreEvent {
        metadata: ObjectMeta {
            name: Some("w1.legacy".into()),
            ..Default::default()
        },
        involved_object: ObjectReference {
            kind: Some("Widget".into()),
            name: Some("w1".into()),
            namespace: Some(ns.clone()),
            ..Default::default()
        },
        message: Some("hello from core".into()),
        reason: Some("Legacy".into()),
        type_: Some("Normal".into()),
        count: Some(2),
        ..Default::default()
    };
    core.create(&PostParams::default(), &legacy).await.unwrap();
    let read = v1.get("w1.legacy").await.unwrap();
    assert_eq!(read.note.as_deref(), Some("hello from core"));
    assert_eq!(read.deprecated_count, Some(2));
    assert_eq!(read.regarding.and_then(|r| r.name).as_deref(), Some("w1"));
    let both = core
        .list(&ListParams::default().fields("involvedObject.name=w1"))
        .await
        .unwrap();
    assert_eq!(both.items.len(), 2);
    // Each group refuses the other's labels, as the API server does.
    let err = core
        .list(&ListParams::default().fields("regarding.name=w1"))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 400 && s.message.contains("field label not supported")),
        "{err}"
    );
    cluster.finish().await;
}

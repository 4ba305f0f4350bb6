//! Allocation end to end: the operator on devplane (or the cluster
//! `PATCHBAY_E2E_CLUSTER=kubeconfig` points at) binds Servers to ServerClaims applied
//! with the real kubectl, writes the inventory, releases on deletion and for
//! orphans, and never gives one Server to two claims — checked from a watch over the
//! whole run. Servers are cluster-scoped: each test names its Servers and its site
//! after its namespace, so tests sharing a real cluster never see each other's.

mod support;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use patchbay::api::{Server, ServerClaim, ServerPhase};
use serde_json::json;
use support::env::{Env, find_condition};
use support::{Cluster, eventually, on_devplane};

/// Every binding change of a Server: (server, claim now).
type Changes = Arc<Mutex<Vec<(String, Option<String>)>>>;

struct Lab {
    env: Env,
    /// Site and Server-name prefix: the test's namespace.
    site: String,
}

impl Lab {
    async fn start(test: &str) -> Lab {
        Self::on(Cluster::start(test).await).await
    }

    async fn on(cluster: Cluster) -> Lab {
        let env = Env::start_on(cluster, |_| {}).await;
        let site = env.cluster.namespace.clone();
        let secret: Secret = serde_json::from_value(json!({
            "metadata": {"name": "bmc", "namespace": site},
            "stringData": {"username": "admin", "password": "s3cret-bmc"}
        }))
        .unwrap();
        env.api::<Secret>()
            .create(&PostParams::default(), &secret)
            .await
            .unwrap();
        Lab { env, site }
    }

    fn ns(&self) -> &str {
        &self.env.cluster.namespace
    }

    fn server_name(&self, short: &str) -> String {
        format!("{}-{short}", self.site)
    }

    fn servers(&self) -> Api<Server> {
        Api::all(self.env.cluster.client.clone())
    }

    fn claims(&self) -> Api<ServerClaim> {
        self.env.api()
    }

    /// A Server of the test's site: `cpus`/`mem` (absent: unknown), a boot MAC
    /// derived from `n`, an address unless `address` is false.
    async fn server(&self, short: &str, n: u8, hw: Option<(i64, &str)>, extra: serde_json::Value) {
        let mut spec = json!({
            "bmc": {"address": format!("redfish://10.0.0.{n}/redfish/v1/Systems/1"),
                    "credentialsSecretRef": {"name": "bmc", "namespace": self.ns()}},
            "bootMac": format!("aa:bb:cc:00:00:{n:02x}"),
            "site": self.site,
            "hostAddress": format!("192.168.10.{n}"),
            "nics": [{"name": "eth0", "mac": format!("aa:bb:cc:00:00:{n:02x}"),
                      "port": {"name": "p1", "namespace": self.ns()}}],
        });
        if let Some((cpus, mem)) = hw {
            spec["hardware"] = json!({"cpus": cpus, "memory": mem});
        }
        if let (Some(s), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
            for (k, v) in e {
                if v.is_null() {
                    s.remove(k);
                } else {
                    s.insert(k.clone(), v.clone());
                }
            }
        }
        let server: Server = serde_json::from_value(json!({
            "apiVersion": "patchbay.dev/v1alpha1", "kind": "Server",
            "metadata": {"name": self.server_name(short)},
            "spec": spec,
        }))
        .unwrap();
        self.servers()
            .create(&PostParams::default(), &server)
            .await
            .unwrap();
    }

    /// `kubectl apply -f` of `yaml` in the test's namespace.
    fn apply(&self, file: &str, yaml: &str) -> std::process::Output {
        let path = self.env.cluster.dir.join(file);
        std::fs::write(&path, yaml).unwrap();
        self.env
            .cluster
            .kubectl(&["apply", "-n", self.ns(), "-f", path.to_str().unwrap()])
    }

    async fn wait_claim(
        &self,
        name: &str,
        what: &str,
        check: impl Fn(&ServerClaim) -> bool,
    ) -> ServerClaim {
        self.env.wait_obj::<ServerClaim>(name, what, check).await
    }

    async fn allocated(&self, name: &str, truth: &str) -> ServerClaim {
        self.wait_claim(name, &format!("{name} Allocated={truth}"), |c| {
            c.status.as_ref().is_some_and(|s| {
                s.observed_generation == c.metadata.generation
                    && find_condition(&s.conditions, "Allocated")
                        .is_some_and(|(t, _, _)| t == truth)
            })
        })
        .await
    }

    /// Role → Server short names, from the Servers' own bindings.
    async fn bound_to(&self, claim: &str) -> BTreeMap<String, Vec<String>> {
        let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for s in self.servers().list(&Default::default()).await.unwrap() {
            let name = s.metadata.name.clone().unwrap();
            let Some(short) = name.strip_prefix(&format!("{}-", self.site)) else {
                continue;
            };
            if let Some(b) = s.spec.claim_ref.as_ref().filter(|b| b.name == claim) {
                out.entry(b.role.clone())
                    .or_default()
                    .push(short.to_owned());
            }
        }
        out
    }

    async fn inventory(&self, claim: &str) -> Option<String> {
        let cm = self
            .env
            .api::<ConfigMap>()
            .get_opt(&format!("{claim}-inventory"))
            .await
            .unwrap()?;
        cm.data?.get("hosts.ini").cloned()
    }
}

fn roles(pairs: &[(&str, &[&str])]) -> BTreeMap<String, Vec<String>> {
    pairs
        .iter()
        .map(|(r, names)| {
            (
                (*r).to_owned(),
                names.iter().map(|n| (*n).to_owned()).collect(),
            )
        })
        .collect()
}

#[tokio::test]
async fn a_claim_applied_with_kubectl_gets_the_best_fitting_servers_an_inventory_and_lets_them_go_on_delete()
 {
    let lab = Lab::start("claim_lifecycle").await;
    lab.server("big", 1, Some((64, "256Gi")), json!({})).await;
    lab.server("small-a", 2, Some((8, "32Gi")), json!({})).await;
    lab.server(
        "small-b",
        3,
        Some((8, "32Gi")),
        json!({"hostAddress": null}),
    )
    .await;
    lab.server("mid", 4, Some((16, "64Gi")), json!({})).await;
    lab.server(
        "resting",
        5,
        Some((8, "16Gi")),
        json!({"maintenance": true}),
    )
    .await;

    let claim = |workers: i64, extra: &str| {
        format!(
            "apiVersion: patchbay.dev/v1alpha1\nkind: ServerClaim\nmetadata:\n  name: web\n\
             spec:\n  site: {}\n  roles:\n  - name: control-plane\n    count: 1\n    \
             requirements: {{minCpus: 32, minMemory: 128Gi}}\n  - name: worker\n    count: \
             {workers}\n    requirements: {{minCpus: 4}}\n{extra}",
            lab.site
        )
    };
    let out = lab.apply("claim.yaml", &claim(2, ""));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let c = lab.allocated("web", "True").await;
    // Best fit: the two small machines, not "mid"; never the one in maintenance.
    assert_eq!(
        lab.bound_to("web").await,
        roles(&[
            ("control-plane", &["big"]),
            ("worker", &["small-a", "small-b"])
        ])
    );
    assert_eq!(
        c.status.as_ref().unwrap().allocation.as_deref(),
        Some("3/3")
    );
    let events = claim_events(&lab, "web").await;
    let big_cp = format!("{} (control-plane)", lab.server_name("big"));
    assert!(
        matches!(events.as_slice(), [(reason, note)] if reason == "Bound" && note.contains(&big_cp)),
        "one Bound Event naming every Server: {events:?}"
    );

    // What kubectl shows.
    let servers = lab.env.cluster.kubectl_ok(&["get", "servers"]);
    let line = servers
        .lines()
        .find(|l| l.starts_with(&lab.server_name("big")))
        .unwrap_or_else(|| panic!("{servers}"));
    let cols: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(
        &cols[1..6],
        // Bound, but its NIC is cabled to a SwitchPort that does not exist here: the
        // Server is held in Available (the ports issue's e2e tests drive real ports).
        &[
            lab.site.as_str(),
            "Available",
            "control-plane",
            "web",
            "0/1"
        ],
        "{servers}"
    );
    let free = servers
        .lines()
        .find(|l| l.starts_with(&lab.server_name("mid")))
        .unwrap();
    assert!(free.contains("Available"), "{servers}");
    let claims = lab
        .env
        .cluster
        .kubectl_ok(&["get", "serverclaims", "-n", lab.ns()]);
    let cols: Vec<&str> = claims.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(&cols[..3], &["web", lab.site.as_str(), "3/3"], "{claims}");

    // The inventory: kubespray's layout; the host without an address is listed
    // without one and the claim says so.
    let ini = lab.inventory("web").await.expect("inventory written");
    let (big, sa, sb) = (
        lab.server_name("big"),
        lab.server_name("small-a"),
        lab.server_name("small-b"),
    );
    for want in [
        format!("[all]\n{big} ansible_host=192.168.10.1 boot_mac=aa:bb:cc:00:00:01\n"),
        format!("{sa} ansible_host=192.168.10.2 boot_mac=aa:bb:cc:00:00:02\n"),
        format!("{sb} boot_mac=aa:bb:cc:00:00:03\n"),
        format!("[kube_control_plane]\n{big}\n\n[etcd]\n{big}\n\n[kube_node]\n{sa}\n{sb}\n"),
        "[k8s_cluster:children]\nkube_control_plane\nkube_node\n".to_owned(),
    ] {
        assert!(ini.contains(&want), "want {want:?} in\n{ini}");
    }
    let complete = find_condition(&c.status.as_ref().unwrap().conditions, "InventoryComplete");
    assert_eq!(
        complete.as_ref().map(|c| c.1.as_str()),
        Some("AddressMissing")
    );
    assert!(complete.unwrap().2.contains(&sb));
    assert!(
        lab.env
            .api::<Secret>()
            .get_opt("web-bmc")
            .await
            .unwrap()
            .is_none(),
        "credentials are copied only on request"
    );

    // A reconcile with nothing changed writes nothing.
    let rv = c.metadata.resource_version.clone();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let later = lab.claims().get("web").await.unwrap();
    // On a failure, what changed (seen once under a loaded CI run: 41 → 42).
    assert_eq!(
        later.metadata.resource_version,
        rv,
        "the claim was written again:\nbefore {}\nafter {}",
        serde_json::to_string(&c.status).unwrap_or_default(),
        serde_json::to_string(&later.status).unwrap_or_default()
    );

    // Grow by one: "mid" joins; the others stay where they are.
    assert!(lab.apply("claim.yaml", &claim(3, "")).status.success());
    lab.allocated("web", "True").await;
    assert_eq!(
        lab.bound_to("web").await,
        roles(&[
            ("control-plane", &["big"]),
            ("worker", &["mid", "small-a", "small-b"])
        ])
    );
    let ini = lab.inventory("web").await.unwrap();
    assert!(ini.contains(&lab.server_name("mid")), "{ini}");

    // Grow beyond the site: nothing is added, nothing already held is let go — not
    // by this reconcile, nor by the next ones.
    assert!(lab.apply("claim.yaml", &claim(9, "")).status.success());
    let c = lab.allocated("web", "False").await;
    let (_, reason, message) =
        find_condition(&c.status.as_ref().unwrap().conditions, "Allocated").unwrap();
    assert_eq!(reason, "InsufficientServers");
    assert!(
        message.starts_with("role worker: needs 9 servers at site"),
        "{message}"
    );
    lab.claims()
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"nudge": "1"}}})),
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        lab.bound_to("web").await,
        roles(&[
            ("control-plane", &["big"]),
            ("worker", &["mid", "small-a", "small-b"])
        ])
    );

    // Shrink to one: the newest binding ("mid") goes first.
    assert!(lab.apply("claim.yaml", &claim(1, "")).status.success());
    lab.wait_claim("web", "one worker", |c| {
        c.status
            .as_ref()
            .is_some_and(|s| s.allocation.as_deref() == Some("2/2"))
    })
    .await;
    let bound = lab.bound_to("web").await;
    assert_eq!(bound["worker"].len(), 1);
    assert!(!bound["worker"].contains(&"mid".to_owned()), "{bound:?}");

    // The credentials copy, on request, and gone when no longer asked for.
    let with_copy = claim(1, "  inventory:\n    includeBmcCredentials: true\n");
    assert!(lab.apply("claim.yaml", &with_copy).status.success());
    let copy = eventually(30, "web-bmc", || async {
        lab.env.api::<Secret>().get_opt("web-bmc").await.ok()?
    })
    .await;
    let data = copy.data.unwrap_or_default();
    assert_eq!(
        data.get(&format!("{big}-password")).map(|v| v.0.clone()),
        Some(b"s3cret-bmc".to_vec())
    );
    // The password is in the copy and nowhere else: not in the claim (spec or
    // status), the inventory, or any Event.
    let everything = [
        lab.env
            .cluster
            .kubectl_ok(&["get", "serverclaim", "web", "-n", lab.ns(), "-o", "yaml"]),
        lab.env.cluster.kubectl_ok(&[
            "get",
            "configmap",
            "web-inventory",
            "-n",
            lab.ns(),
            "-o",
            "yaml",
        ]),
        lab.env
            .cluster
            .kubectl_ok(&["get", "events.events.k8s.io", "-n", lab.ns(), "-o", "yaml"]),
    ]
    .join("\n");
    assert!(everything.contains("web-bmc"), "{everything}");
    assert!(!everything.contains("s3cret-bmc"));
    assert!(!everything.contains("czNjcmV0LWJtYw"), "nor base64-encoded");
    assert!(lab.apply("claim.yaml", &claim(1, "")).status.success());
    eventually(30, "web-bmc to go", || async {
        lab.env
            .api::<Secret>()
            .get_opt("web-bmc")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;

    // Deletion releases every Server; the inventory goes with its owner.
    lab.claims()
        .delete("web", &DeleteParams::default())
        .await
        .unwrap();
    eventually(30, "servers Available", || async {
        let all = lab.servers().list(&Default::default()).await.ok()?;
        all.items
            .iter()
            .filter(|s| s.spec.site == lab.site)
            .all(|s| {
                s.spec.claim_ref.is_none()
                    && s.status.as_ref().and_then(|st| st.phase) == Some(ServerPhase::Available)
            })
            .then_some(())
    })
    .await;
    eventually(30, "inventory collected", || async {
        lab.inventory("web").await.is_none().then_some(())
    })
    .await;
    lab.env.cluster.finish().await;
}

/// The claim's Events as (reason, note), oldest first.
async fn claim_events(lab: &Lab, claim: &str) -> Vec<(String, String)> {
    support::events_about(&lab.env.api(), claim)
        .await
        .into_iter()
        .map(|e| (e.reason.unwrap_or_default(), e.note.unwrap_or_default()))
        .collect()
}

/// Something else keeps writing the Servers (here annotations, as a CMDB sync or
/// `kubectl annotate` would; the Server controller's own status writes do the same
/// after every binding): each write moves the resourceVersion the allocator's
/// bindings are conditioned on. The claim is still bound whole, in one go (one
/// Bound Event naming every Server, never a part of them), and released whole.
#[tokio::test]
async fn a_claim_is_bound_and_released_whole_while_other_writers_touch_its_servers() {
    let lab = Lab::start("claim_churn").await;
    for (i, short) in ["a", "b", "c"].into_iter().enumerate() {
        lab.server(short, i as u8 + 1, Some((8, "32Gi")), json!({}))
            .await;
    }
    let writes = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let churn = tokio::spawn({
        let (servers, writes) = (lab.servers(), writes.clone());
        let names: Vec<String> = ["a", "b", "c"].iter().map(|s| lab.server_name(s)).collect();
        async move {
            loop {
                for name in &names {
                    let n = writes.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let patch = json!({"metadata": {"annotations": {"cmdb/seen": n.to_string()}}});
                    servers
                        .patch(name, &PatchParams::default(), &Patch::Merge(patch))
                        .await
                        .unwrap();
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    });
    let written = || writes.load(std::sync::atomic::Ordering::Relaxed);
    let claim = format!(
        "apiVersion: patchbay.dev/v1alpha1\nkind: ServerClaim\nmetadata:\n  name: web\n\
         spec:\n  site: {}\n  roles:\n  - name: worker\n    count: 3\n",
        lab.site
    );
    let out = lab.apply("claim.yaml", &claim);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    lab.allocated("web", "True").await;
    let by_binding = written();
    assert_eq!(
        lab.bound_to("web").await,
        roles(&[("worker", &["a", "b", "c"])])
    );
    let all = ["a", "b", "c"].map(|s| format!("{} (worker)", lab.server_name(s)));
    let events = eventually(10, "the Bound Event", || async {
        let events = claim_events(&lab, "web").await;
        (!events.is_empty()).then_some(events)
    })
    .await;
    assert_eq!(
        events,
        [("Bound".to_owned(), format!("bound {}", all.join(", ")))],
        "one binding, of every Server"
    );

    lab.claims()
        .delete("web", &DeleteParams::default())
        .await
        .unwrap();
    eventually(30, "the claim released and gone", || async {
        let gone = lab.claims().get_opt("web").await.ok()?.is_none();
        (gone && lab.bound_to("web").await.is_empty()).then_some(())
    })
    .await;
    // The other writer was at work through both (not a proof of overlap, which the
    // Events above give, but a guard against a writer that never ran).
    assert!(
        by_binding >= 3 && written() > by_binding,
        "the Servers were written {by_binding} times by the binding, {} in all",
        written()
    );
    let released: Vec<_> = claim_events(&lab, "web")
        .await
        .into_iter()
        .filter(|(reason, _)| reason == "Released")
        .collect();
    let names = ["a", "b", "c"].map(|s| lab.server_name(s)).join(", ");
    assert_eq!(
        released,
        [(
            "Released".to_owned(),
            format!("claim deleted: released {names}")
        )]
    );
    churn.abort();
    lab.env.cluster.finish().await;
}

#[tokio::test]
async fn competing_claims_never_share_a_server_hold_all_or_nothing_and_wait_in_creation_order() {
    let lab = Lab::start("claim_race").await;
    for i in 0..6u8 {
        lab.server(&format!("s{i}"), 10 + i, Some((8, "32Gi")), json!({}))
            .await;
    }
    // Every binding change of every Server over the whole run.
    let changes: Changes = Arc::default();
    let watch = {
        let (api, changes, site) = (lab.servers(), changes.clone(), lab.site.clone());
        tokio::spawn(async move {
            let mut last: BTreeMap<String, Option<String>> = BTreeMap::new();
            let mut stream = watcher(api, watcher::Config::default())
                .applied_objects()
                .boxed();
            while let Some(Ok(s)) = stream.next().await {
                if s.spec.site != site {
                    continue;
                }
                let name = s.metadata.name.clone().unwrap();
                let now = s.spec.claim_ref.as_ref().map(|b| b.name.clone());
                if last.get(&name) != Some(&now) {
                    last.insert(name.clone(), now.clone());
                    changes.lock().unwrap().push((name, now));
                }
            }
        })
    };
    // Five claims at once, for 11 Servers of 6.
    let sizes = [("c1", 3), ("c2", 3), ("c3", 2), ("c4", 2), ("c5", 1)];
    let creates = sizes.iter().map(|(name, n)| {
        let claim: ServerClaim = serde_json::from_value(json!({
            "apiVersion": "patchbay.dev/v1alpha1", "kind": "ServerClaim",
            "metadata": {"name": name},
            "spec": {"site": lab.site, "roles": [{"name": "worker", "count": n}]}
        }))
        .unwrap();
        let api = lab.claims();
        async move { api.create(&PostParams::default(), &claim).await.unwrap() }
    });
    futures::future::join_all(creates).await;
    // Created within the same second, they are served by name: c1 and c2 take all
    // six; the others wait, holding nothing.
    lab.allocated("c1", "True").await;
    lab.allocated("c2", "True").await;
    for name in ["c3", "c4", "c5"] {
        let c = lab.allocated(name, "False").await;
        let (_, reason, message) =
            find_condition(&c.status.as_ref().unwrap().conditions, "Allocated").unwrap();
        assert_eq!(reason, "InsufficientServers");
        assert!(
            message.contains("0 eligible (6 held by other claims)"),
            "{message}"
        );
        assert!(lab.bound_to(name).await.is_empty());
    }

    // A waiting claim is not rewritten while it waits, however often the Servers of
    // its site change (each change wakes it).
    let rv = lab
        .claims()
        .get("c4")
        .await
        .unwrap()
        .metadata
        .resource_version;
    for i in 0..3 {
        lab.servers()
            .patch(
                &lab.server_name(&format!("s{i}")),
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"labels": {"touched": format!("{i}")}}})),
            )
            .await
            .unwrap();
    }
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert_eq!(
        lab.claims()
            .get("c4")
            .await
            .unwrap()
            .metadata
            .resource_version,
        rv
    );

    // c1 goes: its three go to c3 (the oldest waiting claim that fits) and c5 —
    // not c4, which needs two and finds one.
    lab.claims()
        .delete("c1", &DeleteParams::default())
        .await
        .unwrap();
    lab.allocated("c3", "True").await;
    lab.allocated("c5", "True").await;
    assert_eq!(lab.bound_to("c4").await.len(), 0);
    lab.claims()
        .delete("c2", &DeleteParams::default())
        .await
        .unwrap();
    lab.allocated("c4", "True").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    watch.abort();

    // Over the whole run: a Server only ever went from free to one claim and back.
    let changes = changes.lock().unwrap().clone();
    let mut holder: BTreeMap<String, Option<String>> = BTreeMap::new();
    for (server, now) in &changes {
        let before = holder.get(server).cloned().flatten();
        if let (Some(b), Some(n)) = (&before, now) {
            assert_eq!(
                b, n,
                "{server} went from claim {b} to {n} without being released: {changes:?}"
            );
        }
        holder.insert(server.clone(), now.clone());
    }
    // And every claim holds all it asked for or nothing.
    for (name, n) in sizes {
        let held: usize = lab.bound_to(name).await.values().map(Vec::len).sum();
        assert!(held == 0 || held == n, "{name} holds {held} of {n}");
    }
    lab.env.cluster.finish().await;
}

#[tokio::test]
async fn a_bad_claim_is_refused_or_reported_by_field_and_touches_no_server() {
    let lab = Lab::start("claim_invalid").await;
    lab.server("a", 1, Some((8, "32Gi")), json!({})).await;
    let head = format!(
        "apiVersion: patchbay.dev/v1alpha1\nkind: ServerClaim\nmetadata:\n  name: bad\nspec:\n  site: {}\n",
        lab.site
    );
    // The API server refuses what the schema can see, naming the field.
    for (body, field) in [
        ("  roles: [{name: w, count: -1}]\n", "spec.roles[0].count"),
        (
            "  networkConfiguration: [{configurationRef: {kind: Secret, name: x}}]\n",
            "kind",
        ),
    ] {
        let out = lab.apply("bad.yaml", &format!("{head}{body}"));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains(field),
            "{body}: {err}"
        );
    }
    // What it cannot see, the operator reports, naming the field, and allocates
    // nothing.
    for (body, want) in [
        (
            "  roles: [{name: w, count: 1, requirements: {minMemory: 12GB}}]\n",
            "spec.roles[0].requirements.minMemory: \"12GB\": unknown suffix",
        ),
        (
            "  roles:\n  - {name: a, count: 1, requirements: {macAddresses: ['aa:bb:cc:00:00:01']}}\n  \
             - {name: b, count: 1, requirements: {macAddresses: ['aa:bb:cc:00:00:01']}}\n",
            "spec.roles[1].requirements.macAddresses[0]: aa:bb:cc:00:00:01 is already pinned to role \"a\"",
        ),
        (
            "  roles: [{name: w, count: 1}]\n  networkConfiguration: [{configurationRef: {kind: \
             SmartNicConfiguration, name: x}, nicHint: {smartNIC: false}}]\n",
            "spec.networkConfiguration[0].nicHint.smartNIC",
        ),
    ] {
        let out = lab.apply("bad.yaml", &format!("{head}{body}"));
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let c = lab
            .wait_claim("bad", want, |c| {
                c.status.as_ref().is_some_and(|s| {
                    s.observed_generation == c.metadata.generation
                        && find_condition(&s.conditions, "Allocated")
                            .is_some_and(|(_, r, m)| r == "InvalidSpec" && m.contains(want))
                })
            })
            .await;
        assert!(c.status.is_some());
        assert!(lab.bound_to("bad").await.is_empty());
    }
    // `patchbay validate` says the same before anything is applied.
    let file = lab.env.cluster.dir.join("bad.yaml");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_patchbay"))
        .args(["validate", file.to_str().unwrap()])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success());
    assert!(
        text.contains("spec.networkConfiguration[0].nicHint.smartNIC"),
        "{text}"
    );
    lab.env.cluster.finish().await;
}

#[tokio::test]
async fn orphans_are_released_pins_win_and_maintenance_is_reported() {
    let lab = Lab::start("claim_orphans").await;
    // Bound to a claim that does not exist: released without anyone asking.
    lab.server(
        "orphan",
        1,
        Some((8, "32Gi")),
        json!({"claimRef": {"name": "gone", "namespace": lab.ns(), "uid": "0000",
                             "role": "w", "since": "2026-01-01T00:00:00Z"}}),
    )
    .await;
    let s = eventually(30, "the orphan released", || async {
        let s = lab.servers().get(&lab.server_name("orphan")).await.ok()?;
        (s.spec.claim_ref.is_none()
            && s.status.as_ref().and_then(|st| st.phase) == Some(ServerPhase::Available))
        .then_some(s)
    })
    .await;
    assert!(s.spec.claim_ref.is_none());

    // A pin takes the large machine for the control plane although best fit would
    // give it to nobody; the worker gets the orphan.
    lab.server("large", 2, Some((64, "512Gi")), json!({})).await;
    let out = lab.apply(
        "pinned.yaml",
        &format!(
            "apiVersion: patchbay.dev/v1alpha1\nkind: ServerClaim\nmetadata:\n  name: pinned\n\
             spec:\n  site: {}\n  roles:\n  - name: control-plane\n    count: 1\n    \
             requirements: {{macAddresses: ['AA:BB:CC:00:00:02']}}\n  - name: worker\n    count: 1\n",
            lab.site
        ),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    lab.allocated("pinned", "True").await;
    assert_eq!(
        lab.bound_to("pinned").await,
        roles(&[("control-plane", &["large"]), ("worker", &["orphan"])])
    );
    // An allocated Server put in maintenance stays with its claim, which says so.
    lab.servers()
        .patch(
            &lab.server_name("orphan"),
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"maintenance": true}})),
        )
        .await
        .unwrap();
    let c = lab
        .wait_claim("pinned", "Maintenance=True", |c| {
            c.status.as_ref().is_some_and(|s| {
                find_condition(&s.conditions, "Maintenance").is_some_and(|(t, _, _)| t == "True")
            })
        })
        .await;
    let (_, _, message) = find_condition(&c.status.unwrap().conditions, "Maintenance").unwrap();
    assert!(message.contains(&lab.server_name("orphan")), "{message}");
    assert_eq!(lab.bound_to("pinned").await["worker"], vec!["orphan"]);

    // A bound Server deleted: the claim takes a free one in its place.
    lab.server("spare", 3, Some((8, "32Gi")), json!({})).await;
    lab.servers()
        .delete(&lab.server_name("orphan"), &DeleteParams::default())
        .await
        .unwrap();
    eventually(30, "the spare to replace the deleted Server", || async {
        (lab.bound_to("pinned").await.get("worker") == Some(&vec!["spare".to_owned()]))
            .then_some(())
    })
    .await;
    lab.allocated("pinned", "True").await;
    lab.env.cluster.finish().await;
}

#[tokio::test]
async fn a_server_linked_to_a_baremetalhost_is_sized_and_addressed_by_its_inspection() {
    if !on_devplane() {
        return;
    }
    let cluster = Cluster::start("claim_bmh").await;
    cluster
        .install_crd(support::bare_metal_host_crd(false))
        .await;
    let lab = Lab::on(cluster).await;
    let ar = kube::discovery::ApiResource {
        group: "metal3.io".into(),
        version: "v1alpha1".into(),
        api_version: "metal3.io/v1alpha1".into(),
        kind: "BareMetalHost".into(),
        plural: "baremetalhosts".into(),
    };
    let hosts: Api<kube::api::DynamicObject> =
        Api::namespaced_with(lab.env.cluster.client.clone(), lab.ns(), &ar);
    let mut bmh = kube::api::DynamicObject::new("host-1", &ar).within(lab.ns());
    bmh.data = json!({"spec": {"online": true, "bootMACAddress": "aa:bb:cc:00:00:07"}});
    hosts.create(&PostParams::default(), &bmh).await.unwrap();
    hosts
        .patch_status(
            "host-1",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"hardware": {
                "cpu": {"count": 48}, "ramMebibytes": 262144,
                "nics": [{"name": "eno1", "mac": "aa:bb:cc:00:00:07", "ip": "192.168.111.7"}]}}})),
        )
        .await
        .unwrap();
    // No hardware and no address of its own: both come from the host.
    lab.server(
        "metal",
        7,
        None,
        json!({"hostAddress": null,
               "bareMetalHostRef": {"name": "host-1", "namespace": lab.ns()}}),
    )
    .await;
    lab.server("tiny", 8, Some((4, "8Gi")), json!({})).await;
    let out = lab.apply(
        "claim.yaml",
        &format!(
            "apiVersion: patchbay.dev/v1alpha1\nkind: ServerClaim\nmetadata:\n  name: big\n\
             spec:\n  site: {}\n  roles:\n  - name: worker\n    count: 1\n    \
             requirements: {{minCpus: 32, minMemory: 200Gi}}\n",
            lab.site
        ),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    lab.allocated("big", "True").await;
    assert_eq!(lab.bound_to("big").await, roles(&[("worker", &["metal"])]));
    let ini = lab.inventory("big").await.unwrap();
    assert!(
        ini.contains(&format!(
            "{} ansible_host=192.168.111.7 boot_mac=aa:bb:cc:00:00:07",
            lab.server_name("metal")
        )),
        "{ini}"
    );
}

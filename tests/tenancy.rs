//! Tenancy end to end, as two tenants would act: the operator on devplane (or the
//! cluster `PATCHBAY_E2E_CLUSTER=kubeconfig` points at, run alone: the operator
//! watches every namespace) with an infra namespace and two tenant namespaces, the
//! admission webhook served by patchbay over TLS and called by the API server, a
//! simulated Cisco read back over SSH after every tenant action, and an Open vSwitch
//! with hosts in network namespaces sending tagged frames at a parked port.

mod support;

#[path = "../providers/tests/support/ssh_cases.rs"]
mod ssh_cases;

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use patchbay::api::{
    PortState, Server, ServerClaim, SmartNicConfiguration, SmartNicPort, SwitchPort,
    SwitchPortConfiguration, VLANPool,
};
use patchbay::decide::tenancy::Tenancy;
use patchbay_providers::VlanMode;
use patchbay_providers::values::{VlanId, VlanSet};
use patchbay_testbed::{FakeSwitches, OvsSim, SimSpec, SimSwitch};
use serde_json::json;
use ssh_cases::{access, backend, vlan};
use support::env::{Env, condition, find_condition};
use support::netns::Hosts;
use support::{Cluster, eventually};

const PARKING: u16 = 999;

/// The infra namespace (the test's own) and the two tenants'.
struct Fabric {
    env: Env,
    a: String,
    b: String,
}

impl Fabric {
    fn infra(&self) -> &str {
        &self.env.cluster.namespace
    }

    fn client(&self) -> kube::Client {
        self.env.cluster.client.clone()
    }

    fn api<K>(&self, ns: &str) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        Api::namespaced(self.client(), ns)
    }

    async fn create<K>(&self, ns: &str, value: serde_json::Value)
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
            + Clone
            + serde::de::DeserializeOwned
            + serde::Serialize
            + std::fmt::Debug,
    {
        let obj: K = serde_json::from_value(value).unwrap();
        self.api::<K>(ns)
            .create(&PostParams::default(), &obj)
            .await
            .unwrap();
    }

    async fn pool(&self, name: &str, vlans: &str, namespaces: &[&str], shared: Option<&str>) {
        let mut spec = json!({"vlans": vlans, "namespaces": namespaces});
        if let Some(n) = shared {
            spec["shared"] = json!(true);
            spec["vlanName"] = json!(n);
        }
        let pool: VLANPool = serde_json::from_value(json!({
            "apiVersion": "patchbay.dev/v1alpha1", "kind": "VLANPool",
            "metadata": {"name": self.pool_name(name)}, "spec": spec
        }))
        .unwrap();
        Api::<VLANPool>::all(self.client())
            .create(&PostParams::default(), &pool)
            .await
            .unwrap();
    }

    /// Pools are cluster-scoped: named after the test's namespace.
    fn pool_name(&self, short: &str) -> String {
        format!("{}-{short}", self.infra())
    }

    /// `kubectl apply -f` of `yaml` in `ns`.
    fn apply(&self, ns: &str, file: &str, yaml: &str) -> std::process::Output {
        let path = self.env.cluster.dir.join(file);
        std::fs::write(&path, yaml).unwrap();
        self.env
            .cluster
            .kubectl(&["apply", "-n", ns, "-f", path.to_str().unwrap()])
    }

    fn server_name(&self, short: &str) -> String {
        format!("{}-{short}", self.infra())
    }

    async fn server(&self, short: &str, n: u8, port_name: &str) {
        let infra = self.infra();
        let server: Server = serde_json::from_value(json!({
            "apiVersion": "patchbay.dev/v1alpha1", "kind": "Server",
            "metadata": {"name": self.server_name(short)},
            "spec": {
                "bmc": {"address": format!("10.0.0.{n}"),
                        "credentialsSecretRef": {"name": "bmc", "namespace": infra}},
                "bootMac": format!("aa:bb:cc:00:07:{n:02x}"),
                "site": format!("{infra}-{short}"),
                "nics": [{"name": "eth0", "port": {"name": port_name, "namespace": infra},
                          "provisioningConfiguration": {"name": "pxe"}}],
            }
        }))
        .unwrap();
        Api::<Server>::all(self.client())
            .create(&PostParams::default(), &server)
            .await
            .unwrap();
    }

    async fn installed(&self, short: &str) {
        Api::<Server>::all(self.client())
            .patch(
                &self.server_name(short),
                &PatchParams::default(),
                &Patch::Merge(
                    json!({"metadata": {"annotations": {"patchbay.dev/provisioned": "true"}}}),
                ),
            )
            .await
            .unwrap();
    }

    fn claim_yaml(&self, name: &str, site: &str, configuration: &str, ns: Option<&str>) -> String {
        let ns_line = ns
            .map(|n| format!("\n          namespace: {n}"))
            .unwrap_or_default();
        format!(
            "apiVersion: patchbay.dev/v1alpha1\nkind: ServerClaim\nmetadata:\n  name: {name}\n\
             spec:\n  site: {}-{site}\n  roles:\n    - name: worker\n      count: 1\n  \
             networkConfiguration:\n    - configurationRef:\n          kind: SwitchPortConfiguration\n          \
             name: {configuration}{ns_line}\n",
            self.infra()
        )
    }

    async fn claim_condition(&self, ns: &str, name: &str, type_: &str, truth: &str) -> ServerClaim {
        let api: Api<ServerClaim> = self.api(ns);
        eventually(
            60,
            &format!("claim {ns}/{name} {type_}={truth}"),
            || async {
                let c = api.get_opt(name).await.ok()??;
                let st = c.status.as_ref()?;
                find_condition(&st.conditions, type_)
                    .is_some_and(|(t, _, _)| t == truth)
                    .then_some(c)
            },
        )
        .await
    }

    async fn port_where(
        &self,
        name: &str,
        what: &str,
        check: impl Fn(&SwitchPort) -> bool,
    ) -> SwitchPort {
        let api: Api<SwitchPort> = self.api(self.infra());
        eventually(60, &format!("{name}: {what}"), || async {
            let p = api.get_opt(name).await.ok()??;
            check(&p).then_some(p)
        })
        .await
    }
}

/// The VLANs a Cisco port carries, read from the simulator.
async fn cisco(sim: &SimSwitch, p: &str) -> Option<VlanMode> {
    ssh_cases::cisco_vlans(sim, p).await
}

fn trunk(native: u16, tagged: &[u16]) -> Option<VlanMode> {
    Some(VlanMode::Trunk {
        native: Some(vlan(native)),
        allowed: tagged.iter().map(|v| vlan(*v)).collect::<VlanSet>(),
    })
}

async fn expect_cisco(sim: &SimSwitch, p: &str, want: Option<VlanMode>, what: &str) {
    eventually(60, &format!("{p} to carry {what}"), || async {
        (cisco(sim, p).await == want).then_some(())
    })
    .await;
}

/// `p` carries `want` now and for `secs` seconds more (read every half second).
async fn stays(sim: &SimSwitch, p: &str, want: &Option<VlanMode>, secs: u64, what: &str) {
    let until = std::time::Instant::now() + Duration::from_secs(secs);
    while std::time::Instant::now() < until {
        let now = cisco(sim, p).await;
        assert_eq!(&now, want, "{p}: {what}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

fn tenancy(infra: &str) -> Tenancy {
    Tenancy {
        infra_namespace: infra.into(),
        parking_vlan: VlanId::new(PARKING).unwrap(),
        trusted_host_namespaces: BTreeSet::new(),
        allow_bmc_credentials: false,
    }
}

/// patchbay's webhook on a free loopback port, served from `dir`'s certificate;
/// its address once its caches are listed.
async fn webhook(client: kube::Client, t: Tenancy, dir: &Path) -> std::net::SocketAddr {
    // The infra team allows a tenant's rollout at most 10 % at once, 2 a switch.
    let rollout = patchbay::decide::rollout::Defaults {
        limits: Some(patchbay::decide::rollout::Limits {
            max_unavailable: patchbay::decide::rollout::Amount::Percent(10),
            max_unavailable_per_switch: patchbay::decide::rollout::Amount::Count(2),
        }),
        ..Default::default()
    };
    let (hook, caches) = patchbay::webhook::Webhook::start(client, t, rollout);
    tokio::spawn(caches);
    let routes = patchbay::serve::Routes {
        ready: Arc::new(|| true),
        metrics: Arc::default(),
        admission: Some(hook.clone()),
        radius: None,
    };
    let addr = support::webhooks::serve(routes, dir).await;
    eventually(30, "webhook caches listed", || async {
        hook.synced().then_some(())
    })
    .await;
    addr
}

/// The tenancy ValidatingWebhookConfiguration `name` calling `url` (as deploy/ has
/// it, with a URL instead of a Service), `policy` Fail or Ignore.
async fn register(client: kube::Client, name: &str, url: &str, ca: &[u8], policy: &str) {
    support::webhooks::register(
        client,
        &support::webhooks::Registration {
            name,
            webhook: "tenancy.patchbay.dev",
            url,
            ca,
            policy,
            operations: &["CREATE", "UPDATE"],
            resources: &[
                "switchportconfigurations",
                "smartnicconfigurations",
                "serverclaims",
                "vlanpools",
            ],
        },
    )
    .await
}

async fn namespace(client: kube::Client, name: &str) {
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    Api::<Namespace>::all(client)
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
}

async fn fabric(test: &str, sim: &SimSwitch) -> Fabric {
    let cluster = Cluster::start(test).await;
    if support::on_devplane() {
        // Seed 003's BareMetalHost spec.ports (the upstream CRD prunes it).
        cluster
            .install_crd(support::bare_metal_host_crd(true))
            .await;
    }
    let infra = cluster.namespace.clone();
    let (a, b) = (format!("{infra}-a"), format!("{infra}-b"));
    for ns in [&a, &b] {
        namespace(cluster.client.clone(), ns).await;
    }
    let t = tenancy(&infra);
    let env = Env::start_on(cluster, move |s| {
        s.namespace = None;
        s.tenancy = Some(t);
    })
    .await;
    let f = Fabric { env, a, b };
    f.env
        .switch(
            "tor1",
            "ios",
            sim,
            &sim.host_key_fingerprint,
            &[
                ("tor1-p1", "FastEthernet0/1"),
                ("tor1-p2", "FastEthernet0/2"),
                ("tor1-p3", "FastEthernet0/3"),
            ],
        )
        .await;
    f.env
        .configuration("pxe", json!({"untaggedVLAN": 10}))
        .await;
    f.create::<SwitchPortConfiguration>(
        f.infra(),
        json!({"apiVersion": "patchbay.dev/v1alpha1", "kind": "SwitchPortConfiguration",
               "metadata": {"name": "services", "labels": {"patchbay.dev/shared": "true"}},
               "spec": {"untaggedVLAN": 42}}),
    )
    .await;
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "bmc"}, "stringData": {"username": "admin", "password": "bmc-pw"}
    }))
    .unwrap();
    f.api::<Secret>(f.infra())
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    let (a, b) = (f.a.clone(), f.b.clone());
    f.pool("a", "200-209", &[&a], None).await;
    f.pool("b", "300-309", &[&b], None).await;
    f.pool("services", "42", &[&a, &b], Some("services")).await;
    f
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_tenants_on_one_switch_never_reach_each_others_vlans() {
    let sims = FakeSwitches::start(&[SimSpec::new("tor1", "cisco_generic")]).unwrap();
    let sim = sims.get("tor1").clone();
    let f = fabric("tenancy", &sim).await;
    let (infra, a, b) = (f.infra().to_owned(), f.a.clone(), f.b.clone());
    let dir = f.env.cluster.dir.join("webhook");
    patchbay_testbed::webhook_certificate(&dir, "patchbay-webhook").unwrap();
    let addr = webhook(f.client(), tenancy(&infra), &dir).await;
    let url = format!("https://{addr}/validate");
    let ca = std::fs::read(dir.join("tls.crt")).unwrap();
    let hook_name = format!("{infra}-tenancy");
    register(f.client(), &hook_name, &url, &ca, "Fail").await;

    // Each tenant reads what it is granted in its own namespace, and nothing of the
    // other's; the infra team reads each pool's condition.
    let grants: Api<k8s_openapi::api::core::v1::ConfigMap> = f.api(&a);
    let summary = eventually(30, "A's patchbay-grants", || async {
        grants.get_opt("patchbay-grants").await.ok()?
    })
    .await
    .data
    .unwrap_or_default();
    assert_eq!(
        summary.get("vlans").map(String::as_str),
        Some("42,200-209"),
        "{summary:?}"
    );
    assert!(!format!("{summary:?}").contains(&b), "{summary:?}");
    eventually(30, "pool a Ready", || async {
        let p = Api::<VLANPool>::all(f.client())
            .get(&f.pool_name("a"))
            .await
            .ok()?;
        let c = p.status?.conditions;
        c.iter()
            .any(|c| c.type_ == "Ready" && c.status == "True")
            .then_some(())
    })
    .await;

    // A port nothing governs is parked at first sight: access on the parking VLAN.
    f.server("a", 1, "tor1-p1").await;
    f.server("b", 2, "tor1-p2").await;
    expect_cisco(&sim, "FastEthernet0/3", access(PARKING), "the parking VLAN").await;
    expect_cisco(
        &sim,
        "FastEthernet0/1",
        access(10),
        "the provisioning network",
    )
    .await;
    expect_cisco(
        &sim,
        "FastEthernet0/2",
        access(10),
        "the provisioning network",
    )
    .await;

    // 1. Tenant B: its own VLAN and the shared one, through kubectl and the webhook.
    let out = f.apply(
        &b,
        "b-web.yaml",
        "apiVersion: patchbay.dev/v1alpha1\nkind: SwitchPortConfiguration\nmetadata:\n  name: web\n\
         spec:\n  untaggedVLAN: 300\n  vlans:\n    - id: 42\n      name: b-calls-it-this\n",
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let out = f.apply(&b, "b-claim.yaml", &f.claim_yaml("web", "b", "web", None));
    assert!(out.status.success(), "{}", stderr(&out));
    f.claim_condition(&b, "web", "Allocated", "True").await;
    f.installed("b").await;
    let b_port = trunk(300, &[42]);
    expect_cisco(&sim, "FastEthernet0/2", b_port.clone(), "B's network").await;
    f.claim_condition(&b, "web", "Ready", "True").await;

    // 2. Tenant A asks for B's VLAN: refused at apply, the field and the grant named,
    // B not named; nothing stored.
    let evil = "apiVersion: patchbay.dev/v1alpha1\nkind: SwitchPortConfiguration\nmetadata:\n  name: evil\n\
                spec:\n  untaggedVLAN: 300\n";
    let out = f.apply(&a, "a-evil.yaml", evil);
    let err = stderr(&out);
    assert!(!out.status.success(), "B's VLAN admitted for A");
    assert!(
        err.contains("Error from server (Forbidden)")
            && err.contains("admission webhook \"tenancy.patchbay.dev\" denied the request")
            && err.contains(&format!(
                "spec.untaggedVLAN: VLAN 300 is not granted to namespace {a}: no VLANPool grants it"
            )),
        "{err}"
    );
    assert!(
        !err.contains(&b),
        "the refusal names the other tenant: {err}"
    );
    assert!(
        f.api::<SwitchPortConfiguration>(&a)
            .get_opt("evil")
            .await
            .unwrap()
            .is_none()
    );
    // A's own VLAN with a rollout above the infra team's limits: refused at apply,
    // each field named with the limit; within them, admitted.
    let greedy = "apiVersion: patchbay.dev/v1alpha1\nkind: SwitchPortConfiguration\nmetadata:\n  name: greedy\n\
                  spec:\n  untaggedVLAN: 200\n  rollout:\n    maxUnavailable: 100%\n    maxUnavailablePerSwitch: 5\n";
    let out = f.apply(&a, "a-greedy.yaml", greedy);
    let err = stderr(&out);
    assert!(!out.status.success(), "a rollout above the limits admitted");
    assert!(
        err.contains("spec.rollout.maxUnavailable: asks for more ports at once than the infra team allows a tenant's configuration (10%)")
            && err.contains("spec.rollout.maxUnavailablePerSwitch: asks for more ports at once than the infra team allows a tenant's configuration (2)"),
        "{err}"
    );
    let modest = greedy
        .replace("100%", "10%")
        .replace("maxUnavailablePerSwitch: 5", "maxUnavailablePerSwitch: 1");
    let out = f.apply(&a, "a-modest.yaml", &modest);
    assert!(out.status.success(), "{}", stderr(&out));
    // A claim naming B's configuration: refused, whether or not it exists.
    let out = f.apply(
        &a,
        "a-steal.yaml",
        &f.claim_yaml("steal", "a", "web", Some(&b)),
    );
    let err = stderr(&out);
    assert!(
        !out.status.success()
            && err.contains("spec.networkConfiguration[0].configurationRef.namespace: namespace"),
        "{err}"
    );
    // A pool that would give B's VLAN to A too: refused to the infra team.
    let overlap: VLANPool = serde_json::from_value(json!({
        "apiVersion": "patchbay.dev/v1alpha1", "kind": "VLANPool",
        "metadata": {"name": f.pool_name("grab")}, "spec": {"vlans": "305", "namespaces": [a]}
    }))
    .unwrap();
    let refused = Api::<VLANPool>::all(f.client())
        .create(&PostParams::default(), &overlap)
        .await
        .unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("VLANs 305 are also granted by"),
        "{refused}"
    );

    // 3. The webhook down with Ignore: A's configuration is admitted, and the
    // operator refuses to move A's port; nothing reaches the switch.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead_url = format!("https://{}/validate", dead.local_addr().unwrap());
    drop(dead);
    register(f.client(), &hook_name, &dead_url, &ca, "Ignore").await;
    let out = f.apply(&a, "a-evil.yaml", evil);
    assert!(out.status.success(), "Ignore admits: {}", stderr(&out));
    let out = f.apply(&a, "a-claim.yaml", &f.claim_yaml("web", "a", "evil", None));
    assert!(out.status.success(), "{}", stderr(&out));
    f.claim_condition(&a, "web", "Allocated", "True").await;
    f.installed("a").await;
    let claim = f.claim_condition(&a, "web", "Forbidden", "True").await;
    let (_, reason, message) =
        find_condition(&claim.status.unwrap().conditions, "Forbidden").unwrap();
    assert_eq!(reason, "Forbidden");
    assert!(
        message.contains(&format!(
            "VLAN 300 is not granted to namespace {a} on Switch tor1"
        )),
        "{message}"
    );
    assert!(!message.contains(&b), "{message}");
    // The Server still lists its NIC: not ready, its port, and the refusal.
    let server = support::eventually_seen(30, "the refused NIC listed", || async {
        let s = Api::<Server>::all(f.client())
            .get(&f.server_name("a"))
            .await
            .map_err(|e| e.to_string())?;
        let st = s.status.clone().unwrap_or_default();
        if st.ports_ready.as_deref() == Some("0/1") && st.ports.len() == 1 {
            Ok(st)
        } else {
            Err(format!("{:?} {:?}", st.ports_ready, st.ports))
        }
    })
    .await;
    let nic = &server.ports[0];
    assert!(!nic.ready && nic.source == "claim", "{nic:?}");
    assert_eq!(nic.port, format!("{}/tor1-p1", f.infra()));
    let why = nic.message.as_deref().unwrap_or_default();
    assert!(
        why.starts_with("forbidden: ") && why.contains("VLAN 300 is not granted"),
        "{why}"
    );
    let warnings = support::warnings(&f.api(&a), "web").await;
    assert!(
        warnings
            .iter()
            .any(|e| e.reason.as_deref() == Some("Forbidden")),
        "a Warning Event in the tenant's namespace: {warnings:?}"
    );
    stays(
        &sim,
        "FastEthernet0/1",
        &access(10),
        4,
        "A's port is not moved",
    )
    .await;
    stays(&sim, "FastEthernet0/2", &b_port, 1, "B's port untouched").await;

    // 4. A's own VLAN, and the shared one under the pool's name: granted.
    f.api::<SwitchPortConfiguration>(&a)
        .patch(
            "evil",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"spec": {"untaggedVLAN": 200, "vlans": [{"id": 42, "name": "a-name"}]}}),
            ),
        )
        .await
        .unwrap();
    let a_port = trunk(200, &[42]);
    expect_cisco(&sim, "FastEthernet0/1", a_port.clone(), "A's network").await;
    f.claim_condition(&a, "web", "Forbidden", "False").await;
    let names = vlan_names(&sim).await;
    assert_eq!(
        names.get(&42).map(String::as_str),
        Some("services"),
        "{names:?}"
    );
    stays(&sim, "FastEthernet0/2", &b_port, 1, "B's port untouched").await;

    // 5. A's grant revoked while in use: reported on the port and the claim; the
    // live tenant stays on its network (nothing is sent while it holds).
    Api::<VLANPool>::all(f.client())
        .delete(&f.pool_name("a"), &DeleteParams::default())
        .await
        .unwrap();
    let p1 = f
        .port_where("tor1-p1", "Forbidden=True", |p| {
            condition(p, "Forbidden").is_some_and(|c| c.0 == "True")
        })
        .await;
    let (_, _, message) = condition(&p1, "Forbidden").unwrap();
    assert!(
        message.contains(&format!("VLAN 200 is not granted to namespace {a}")),
        "{message}"
    );
    f.claim_condition(&a, "web", "Forbidden", "True").await;
    stays(
        &sim,
        "FastEthernet0/1",
        &a_port,
        3,
        "a revoked grant does not rip A off",
    )
    .await;
    // Granted again: the condition clears.
    f.pool("a", "200-209", &[&a], None).await;
    f.port_where("tor1-p1", "Forbidden=False", |p| {
        condition(p, "Forbidden").is_some_and(|c| c.0 == "False")
    })
    .await;
    f.claim_condition(&a, "web", "Forbidden", "False").await;

    // 6. A releases its Server: back to the provisioning network; B untouched
    // through all of it.
    f.api::<ServerClaim>(&a)
        .delete("web", &DeleteParams::default())
        .await
        .unwrap();
    expect_cisco(
        &sim,
        "FastEthernet0/1",
        access(10),
        "the provisioning network",
    )
    .await;
    assert_eq!(
        cisco(&sim, "FastEthernet0/2").await,
        b_port,
        "B's port untouched"
    );
    let p2 = f
        .port_where("tor1-p2", "Active", |p| {
            p.status.as_ref().and_then(|s| s.state) == Some(PortState::Active)
        })
        .await;
    assert!(
        condition(&p2, "Forbidden").is_none(),
        "B's port was never refused"
    );
    f.env.cluster.finish().await;
}

/// The simulated Cisco's VLAN table: id → name.
async fn vlan_names(sim: &SimSwitch) -> std::collections::BTreeMap<u16, String> {
    let cli = backend("ios", sim);
    let out = cli.run_raw(&["show vlan brief"]).await.unwrap();
    let text = out[0].as_ref().unwrap().clone();
    text.lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            let id = w.next()?.parse::<u16>().ok()?;
            Some((id, w.next()?.to_owned()))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_smartnic_port_receives_no_tenants_tagged_frames() {
    const BRIDGE: &str = "br-park";
    let ovs = OvsSim::start(&[BRIDGE]).expect("Open vSwitch starts");
    let hosts = Hosts::create(&ovs, BRIDGE, 2);
    let cluster = Cluster::start("tenancy-parking").await;
    let infra = cluster.namespace.clone();
    let t = tenancy(&infra);
    let env = Env::start_on(cluster, move |s| s.tenancy = Some(t)).await;
    env.create::<patchbay::api::ProviderSwitch>(json!({
        "apiVersion": "patchbay.dev/v1alpha1", "kind": "ProviderSwitch",
        "metadata": {"name": "snic"},
        "spec": {"backend": "ovsdb", "os": "ovs", "address": "127.0.0.1",
                 "port": ovs.info.ovsdb_port, "options": {"bridge": BRIDGE}}
    }))
    .await;
    // Host 0: a tenant's trunk carrying VLAN 300 tagged. Host 1: a port nothing
    // governs (linked, then released).
    env.create::<SmartNicConfiguration>(json!({
        "apiVersion": "patchbay.dev/v1alpha1", "kind": "SmartNicConfiguration",
        "metadata": {"name": "b-trunk"}, "spec": {"untaggedVLAN": 301, "vlans": [{"id": 300}]}
    }))
    .await;
    for (i, config) in [(0, Some("b-trunk")), (1, Some("b-trunk"))] {
        env.create::<SmartNicPort>(json!({
            "apiVersion": "patchbay.dev/v1alpha1", "kind": "SmartNicPort",
            "metadata": {"name": format!("h{i}")},
            "spec": {"provider": {"name": "snic"}, "portName": hosts.ports[i],
                     "configuration": config.map(|c| json!({"name": c}))}
        }))
        .await;
    }
    let active = |name: &'static str| {
        let api: Api<SmartNicPort> = env.api();
        async move {
            eventually(60, &format!("{name} Active"), || async {
                let p = api.get_opt(name).await.ok()??;
                (p.status.as_ref()?.state == Some(PortState::Active)).then_some(())
            })
            .await
        }
    };
    active("h0").await;
    active("h1").await;
    // Frames tagged 300 each way between host 0 and host 1: (to 1, to 0).
    let frames = |hosts: &Hosts| {
        tokio::task::block_in_place(|| {
            (
                hosts.tagged_frames_arriving(0, 1, 300, 10),
                hosts.tagged_frames_arriving(1, 0, 300, 10),
            )
        })
    };
    assert_eq!(
        frames(&hosts),
        (10, 10),
        "both carry VLAN 300: tagged frames pass"
    );
    // Released: parked, not open.
    env.api::<SmartNicPort>()
        .patch(
            "h1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"configuration": null}})),
        )
        .await
        .unwrap();
    let api: Api<SmartNicPort> = env.api();
    eventually(60, "h1 Idle", || async {
        let p = api.get_opt("h1").await.ok()??;
        (p.status.as_ref()?.state == Some(PortState::Idle)).then_some(())
    })
    .await;
    let tag = ovs.vsctl(&["get", "Port", &hosts.ports[1], "tag"]).unwrap();
    let trunks = ovs
        .vsctl(&["get", "Port", &hosts.ports[1], "trunks"])
        .unwrap();
    assert_eq!(
        (tag.as_str(), trunks.as_str()),
        ("999", "[]"),
        "parked: access on the parking VLAN"
    );
    assert_eq!(
        frames(&hosts),
        (0, 0),
        "a parked port exchanges no frame tagged 300"
    );
    // What clean used to leave (no tag, no trunks: OVS trunks every VLAN) lets the
    // tagged frames through — the danger parking removes.
    ovs.vsctl(&["clear", "Port", &hosts.ports[1], "tag", "vlan_mode"])
        .unwrap();
    assert_eq!(
        frames(&hosts),
        (10, 10),
        "an empty tag and trunks carry every VLAN"
    );
    env.cluster.finish().await;
}

/// A pool's edit, seen before it is made (issue 56): tenant B's claim runs on VLAN
/// 300 on tor1-p2; the infra team narrows B's pool so that 300 leaves it. With the
/// operator's tenancy settings `patchbay plan` shows the port refused, with the
/// claim and the operator's reason (without them it says grants were not checked);
/// `kubectl apply --dry-run=server` warns of the refused port and whose host it is,
/// and the switch is untouched; the real edit is refused by the operator as planned
/// (the port Forbidden with the same reason) and the switch keeps VLAN 300 (a grant
/// revoked under a live tenant is reported, never ripped off).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_edit_is_planned_and_warned_as_the_operator_refuses_it() {
    let sims = FakeSwitches::start(&[SimSpec::new("tor1", "cisco_generic")]).unwrap();
    let sim = sims.get("tor1").clone();
    let f = fabric("tenancy-plan", &sim).await;
    let (infra, b) = (f.infra().to_owned(), f.b.clone());
    support::webhooks::blast_radius(
        f.client(),
        &f.env.cluster.dir.join("webhook"),
        Some(tenancy(&infra)),
    )
    .await;
    f.server("b", 2, "tor1-p2").await;
    let out = f.apply(
        &b,
        "b-web.yaml",
        "apiVersion: patchbay.dev/v1alpha1\nkind: SwitchPortConfiguration\nmetadata:\n  name: web\n\
         spec:\n  untaggedVLAN: 300\n",
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let out = f.apply(&b, "b-claim.yaml", &f.claim_yaml("web", "b", "web", None));
    assert!(out.status.success(), "{}", stderr(&out));
    f.claim_condition(&b, "web", "Allocated", "True").await;
    f.installed("b").await;
    expect_cisco(&sim, "FastEthernet0/2", access(300), "B's network").await;

    let pool = f.env.cluster.dir.join("pool-b.yaml");
    std::fs::write(
        &pool,
        format!(
            "apiVersion: patchbay.dev/v1alpha1\nkind: VLANPool\nmetadata:\n  name: {}\n\
             spec:\n  vlans: \"301-309\"\n  namespaces: [{b}]\n",
            f.pool_name("b")
        ),
    )
    .unwrap();
    let why = format!(
        "SwitchPortConfiguration {b}/web spec.untaggedVLAN: VLAN 300 is not granted to \
         namespace {b} on Switch tor1: no VLANPool grants it"
    );
    let plan = |tenancy: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_patchbay"))
            .args(["plan", "--kubeconfig"])
            .arg(&f.env.cluster.kubeconfig)
            .args(tenancy)
            .arg(&pool)
            .env_remove("PATCHBAY_INFRA_NAMESPACE")
            .env_remove("PATCHBAY_PARKING_VLAN")
            .env_remove("PATCHBAY_CONFIG")
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    // 1. The plan with the operator's settings: tor1-p2 refused, claim and reason.
    let (code, table) = plan(&["--infra-namespace", &infra, "--parking-vlan", "999"]);
    println!(
        "$ patchbay plan --kubeconfig … --infra-namespace {infra} --parking-vlan 999 pool-b.yaml\n{table}"
    );
    assert_eq!(code, Some(2), "{table}");
    let row = table
        .lines()
        .find(|l| l.contains("tor1-p2"))
        .unwrap_or_else(|| panic!("{table}"));
    assert!(row.contains(&format!("{b}/web")), "the claim: {row}");
    assert!(row.contains("refused (Forbidden: "), "{row}");
    assert!(row.contains(&why), "{row}");
    assert!(table.contains("VLANPool grants checked"), "{table}");
    assert!(
        table.contains("1 port(s) on 1 switch(es) change, 1 of them refused"),
        "{table}"
    );
    // Without them: nothing is refused, and the plan says grants went unchecked.
    let (code, table) = plan(&[]);
    assert_eq!(code, Some(0), "{table}");
    assert!(table.contains("VLANPool grants NOT checked"), "{table}");

    // 2. The dry run warns of the refused port and whose host it is; nothing moves.
    let out = f
        .env
        .cluster
        .kubectl(&["apply", "--dry-run=server", "-f", pool.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let warned = stderr(&out);
    println!("$ kubectl apply --dry-run=server -f pool-b.yaml\n{warned}");
    assert!(
        warned
            .contains("Warning: patchbay: this changes 1 port on 1 switch (1 refused by patchbay)"),
        "{warned}"
    );
    assert!(warned.contains(&format!("of claim {b}/web")), "{warned}");
    stays(
        &sim,
        "FastEthernet0/2",
        &access(300),
        2,
        "after the dry run",
    )
    .await;

    // 3. The edit made: the operator refuses exactly as planned, and keeps VLAN 300.
    let out = f
        .env
        .cluster
        .kubectl(&["apply", "-f", pool.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let port = f
        .port_where("tor1-p2", "Forbidden", |p| {
            p.status.as_ref().is_some_and(|s| {
                find_condition(&s.conditions, "Forbidden").is_some_and(|(t, _, _)| t == "True")
            })
        })
        .await;
    let (_, _, message) = condition(&port, "Forbidden").unwrap();
    assert!(message.contains(&why), "{message}");
    stays(
        &sim,
        "FastEthernet0/2",
        &access(300),
        2,
        "a revoked grant is kept",
    )
    .await;
    f.env.cluster.finish().await;
}

/// With tenancy on, a port whose entry is renamed parks the device port it leaves
/// (never back to the device default, open to every VLAN): an Active port's old
/// device port and a parked Idle port's new one both end on the parking VLAN.
#[tokio::test]
async fn a_moved_port_parks_the_device_port_it_leaves() {
    let sims = FakeSwitches::start(&[SimSpec::new("tor1", "cisco_generic")]).unwrap();
    let sim = sims.get("tor1").clone();
    let f = fabric("tenancy-move", &sim).await;
    f.env.link("tor1-p1", Some("pxe")).await;
    expect_cisco(&sim, "FastEthernet0/1", access(10), "pxe").await;
    expect_cisco(&sim, "FastEthernet0/3", access(PARKING), "the parking VLAN").await;
    f.env.wait_carrying("tor1-p1", "pxe").await;
    f.env.wait_state("tor1-p3", PortState::Idle).await;
    f.env
        .api::<patchbay::api::Switch>()
        .patch(
            "tor1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"ports": {
                "tor1-p1": {"name": "FastEthernet0/5"},
                "tor1-p3": {"name": "FastEthernet0/6"},
            }}})),
        )
        .await
        .unwrap();
    expect_cisco(&sim, "FastEthernet0/5", access(10), "pxe, moved").await;
    expect_cisco(&sim, "FastEthernet0/6", access(PARKING), "parked, moved").await;
    f.env
        .wait_for("tor1-p3", "Idle on FastEthernet0/6", |p| {
            let st = p.status.as_ref();
            st.and_then(|s| s.state) == Some(PortState::Idle)
                && st.and_then(|s| s.device_port.as_deref()) == Some("FastEthernet0/6")
        })
        .await;
    assert_eq!(
        cisco(&sim, "FastEthernet0/1").await,
        access(PARKING),
        "the device port tor1-p1 left is parked"
    );
    assert_eq!(cisco(&sim, "FastEthernet0/3").await, access(PARKING));
}

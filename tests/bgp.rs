//! BGP to an allocated host, end to end with real speakers: an Open vSwitch bridge
//! whose host port patchbay configures; FRRouting (zebra + bgpd) in one network
//! namespace as the ToR's speaker on the tenant VLAN, reached over SSH with vtysh as
//! patchbay reaches any switch; GoBGP in another namespace as the node's speaker
//! (what MetalLB or kube-vip would run), configured only from what patchbay
//! published — the Server's `patchbay.dev/bgp-peers-0-*` annotations and the password
//! Secret in the claim's namespace.
//!
//! Proven: a claim allocated and its host provisioned → the neighbour on FRR (read
//! with `show bgp summary json`) and on GoBGP Established; the node's /32 inside the
//! claim's prefixes installed on the ToR, one outside them not; the Server's status,
//! the Switch's status and the claim's inventory say so; the password nowhere but its
//! Secret; FRR restarted empty → the neighbour put back within an interval (drift);
//! release → the neighbour gone before the port leaves the tenant VLAN, annotations
//! and Secret gone. Opted in (`--bgp-node-selector`, `--metallb-namespace`): the
//! selected Node that is the Server gets its annotations and MetalLB a `BGPPeer` with
//! a copy of the password, an unselected one nothing, and release removes them. A claim that announces a ToR's own subnet or uses the ToR's ASN
//! is refused, naming the field, and nothing reaches FRR.

mod support;

use std::process::Command;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Event, Namespace, Node, Secret};
use kube::ResourceExt;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch,
    PatchParams, PostParams,
};
use patchbay::api::{
    ProviderSwitch, Server, ServerClaim, ServerPhase, Switch, SwitchPortConfiguration,
};
use patchbay::decide::bgp_nodes::BgpNodes;
use patchbay::decide::tenancy::Tenancy;
use patchbay_providers::values::VlanId;
use patchbay_testbed::OvsSim;
use patchbay_testbed::bgp::{Frr, Gobgp, GobgpPeer};
use serde_json::json;
use support::env::{Env, find_condition};
use support::netns::Hosts;

/// The tenant's VLAN (the claim's network, and the speaker's uplink).
const TENANT_VLAN: &str = "100";
/// The speaker's address facing the host's port.
const TOR_ADDRESS: &str = "10.99.0.1/30";

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().unwrap();
    assert!(
        out.status.success(),
        "ip {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Whether FRR has a neighbour at `address` (in any state).
fn has_neighbour(frr: &Frr, address: &str) -> bool {
    frr.peer_states().unwrap().iter().any(|(a, _)| a == address)
}

/// The world of one test: the bridge, the two namespaces, FRR, the operator.
struct Bed {
    ovs: OvsSim,
    hosts: Hosts,
    frr: Frr,
    env: Env,
}

impl Bed {
    /// Host 0 is the ToR's routing daemon (its bridge port an infra uplink on the
    /// tenant VLAN, address [`TOR_ADDRESS`]); host 1 the server. Switch `tor` manages
    /// the server's port `tor-n1` with BGP through ProviderSwitch `tor-frr`.
    async fn start(test: &str) -> Bed {
        Self::start_with(test, false, false).await
    }

    /// Like [`Bed::start`]; with `nodes`, the operator is opted in to Nodes and
    /// MetalLB (`--bgp-node-selector patchbay.dev/bgp=on`, MetalLB's namespace the
    /// test's own, MetalLB's BGPPeer CRD installed); with `tenants`, tenancy is on
    /// (the test's namespace is the infra one, tenants `<ns>-a` and `<ns>-b` exist,
    /// the operator watches every namespace).
    async fn start_with(test: &str, nodes: bool, tenants: bool) -> Bed {
        let ovs = OvsSim::start(&["br0"]).expect("Open vSwitch starts");
        let hosts = Hosts::create(&ovs, "br0", 2);
        ovs.vsctl(&[
            "set",
            "Port",
            &hosts.ports[0],
            &format!("tag={TENANT_VLAN}"),
        ])
        .unwrap();
        ip(&[
            "-n",
            &hosts.namespaces[0],
            "addr",
            "add",
            TOR_ADDRESS,
            "dev",
            "eth0",
        ]);
        let frr = Frr::start(&hosts.namespaces[0], "tor").expect("FRR starts");
        let cluster = support::Cluster::start(test).await;
        cluster.install_crd(support::metallb_bgp_peer_crd()).await;
        let metallb = cluster.namespace.clone();
        if tenants {
            for t in ["a", "b"] {
                Api::<Namespace>::all(cluster.client.clone())
                    .create(
                        &PostParams::default(),
                        &serde_json::from_value(
                            json!({"metadata": {"name": format!("{}-{t}", cluster.namespace)}}),
                        )
                        .unwrap(),
                    )
                    .await
                    .unwrap();
            }
        }
        let infra = cluster.namespace.clone();
        let env = Env::start_on(cluster, |s| {
            if tenants {
                s.namespace = None;
                s.tenancy = Some(Tenancy {
                    infra_namespace: infra,
                    parking_vlan: VlanId::new(999).unwrap(),
                    trusted_host_namespaces: Default::default(),
                    allow_bmc_credentials: false,
                });
            }
            if nodes {
                s.bgp_nodes = Some(BgpNodes {
                    selector: "patchbay.dev/bgp=on".into(),
                    metallb_namespace: Some(metallb),
                });
            }
        })
        .await;
        env.api::<Secret>()
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({
                    "metadata": {"name": "tor-frr-login"},
                    "stringData": {"username": frr.username, "privateKey": frr.client_key}
                }))
                .unwrap(),
            )
            .await
            .unwrap();
        env.create::<ProviderSwitch>(json!({
            "apiVersion": "patchbay.dev/v1alpha1", "kind": "ProviderSwitch",
            "metadata": {"name": "tor-frr"},
            "spec": {"backend": "ssh", "os": "frr", "address": "127.0.0.1", "port": frr.ssh_port,
                     "hostKey": {"fingerprint": frr.host_key_fingerprint},
                     "credentialsSecretRef": {"name": "tor-frr-login"}}
        }))
        .await;
        env.create::<ProviderSwitch>(json!({
            "apiVersion": "patchbay.dev/v1alpha1", "kind": "ProviderSwitch",
            "metadata": {"name": "tor"},
            "spec": {"backend": "ovsdb", "os": "ovs", "address": "127.0.0.1",
                     "port": ovs.info.ovsdb_port, "options": {"bridge": "br0"}}
        }))
        .await;
        env.create::<Switch>(json!({
            "apiVersion": "patchbay.dev/v1alpha1", "kind": "Switch",
            "metadata": {"name": "tor"},
            "spec": {"provider": {"name": "tor"},
                     "ports": {"tor-n1": {"name": hosts.ports[1], "bgpAddress": TOR_ADDRESS}},
                     "bgp": {"speaker": {"name": "tor-frr"}, "asn": 65000,
                             "routerId": "10.255.0.1", "keepaliveSeconds": 1,
                             "holdSeconds": 3, "connectRetrySeconds": 1,
                             "intervalSeconds": 2}}
        }))
        .await;
        env.configuration("provisioning", json!({"untaggedVLAN": 10}))
            .await;
        env.configuration("tenant", json!({"untaggedVLAN": 100}))
            .await;
        let ns = env.cluster.namespace.clone();
        let server: Server = serde_json::from_value(json!({
            "apiVersion": "patchbay.dev/v1alpha1", "kind": "Server",
            "metadata": {"name": format!("{ns}-n1")},
            "spec": {
                "bmc": {"address": "10.0.0.1", "credentialsSecretRef": {"name": "bmc", "namespace": ns}},
                "bootMac": hosts.mac(1),
                "site": ns,
                "nics": [{"name": "eth0", "mac": hosts.mac(1),
                          "port": {"kind": "SwitchPort", "name": "tor-n1", "namespace": ns},
                          "provisioningConfiguration": {"name": "provisioning"}}],
            }
        }))
        .unwrap();
        Api::<Server>::all(env.cluster.client.clone())
            .create(&PostParams::default(), &server)
            .await
            .unwrap();
        Bed {
            ovs,
            hosts,
            frr,
            env,
        }
    }

    fn server_name(&self) -> String {
        format!("{}-n1", self.env.cluster.namespace)
    }

    async fn claim(&self, name: &str, bgp: serde_json::Value) {
        let site = self.env.cluster.namespace.clone();
        self.claim_in(&self.env.cluster.namespace, &site, name, bgp)
            .await;
    }

    /// A claim in namespace `ns` at `site` (the test's namespace is the Server's),
    /// with configuration `tenant` of `ns`.
    async fn claim_in(&self, ns: &str, site: &str, name: &str, bgp: serde_json::Value) {
        let claim: ServerClaim = serde_json::from_value(json!({
            "apiVersion": "patchbay.dev/v1alpha1", "kind": "ServerClaim",
            "metadata": {"name": name},
            "spec": {"site": site,
                     "roles": [{"name": "worker", "count": 1, "bgp": bgp}],
                     "networkConfiguration": [{"configurationRef":
                         {"kind": "SwitchPortConfiguration", "name": "tenant"}}]}
        }))
        .unwrap();
        Api::<ServerClaim>::namespaced(self.env.cluster.client.clone(), ns)
            .create(&PostParams::default(), &claim)
            .await
            .unwrap();
    }

    async fn server(&self, what: &str, check: impl Fn(&Server) -> bool) -> Server {
        let api = Api::<Server>::all(self.env.cluster.client.clone());
        let name = self.server_name();
        support::eventually_seen(60, what, || async {
            match api.get_opt(&name).await {
                Ok(Some(s)) if check(&s) => Ok(s),
                Ok(Some(s)) => Err(format!("{:#?} {:#?}", s.annotations(), s.status)),
                other => Err(format!("{other:?}")),
            }
        })
        .await
    }

    /// Claim `web` (ASN 65101, 192.0.2.0/28) bound to the Server, provisioned:
    /// the Server once its peer is published.
    async fn bound_host(&self) -> Server {
        self.claim("web", json!({"asn": 65101, "prefixes": ["192.0.2.0/28"]}))
            .await;
        self.provision().await;
        self.server("its peer published", |s| {
            s.annotations()
                .contains_key("patchbay.dev/bgp-peers-0-src-ip")
        })
        .await
    }

    /// Binds the claim's Server and says it is installed: Provisioned.
    async fn provision(&self) {
        self.server("bound", |s| s.spec.claim_ref.is_some()).await;
        Api::<Server>::all(self.env.cluster.client.clone())
            .patch(
                &self.server_name(),
                &PatchParams::default(),
                &Patch::Merge(
                    json!({"metadata": {"annotations": {"patchbay.dev/provisioned": "true"}}}),
                ),
            )
            .await
            .unwrap();
    }

    /// Polls `ok` (off the runtime) until it holds, at most `secs`; returns how long
    /// it took. On timeout, panics with [`Bed::explain`]'s account of the world.
    async fn until(&self, what: &str, secs: u64, mut ok: impl FnMut() -> bool) -> Duration {
        let start = Instant::now();
        while !tokio::task::block_in_place(&mut ok) {
            if start.elapsed() >= Duration::from_secs(secs) {
                panic!("{what} within {secs} s\n{}", self.explain().await);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        start.elapsed()
    }

    /// The Switch's and the Servers' conditions and BGP status, and the end of FRR's
    /// logs, for a failure's message (the operator's own log is printed with the
    /// test's output).
    async fn explain(&self) -> String {
        let client = self.env.cluster.client.clone();
        let switch = Api::<Switch>::namespaced(client.clone(), &self.env.cluster.namespace)
            .get_opt("tor")
            .await;
        let servers = Api::<Server>::all(client).list(&Default::default()).await;
        let switch = match switch {
            Ok(Some(s)) => format!("{:#?}", s.status),
            other => format!("{other:?}"),
        };
        let servers = match servers {
            Ok(l) => l
                .items
                .iter()
                .map(|s| format!("{}: {:#?} {:#?}", s.name_any(), s.annotations(), s.status))
                .collect::<Vec<_>>()
                .join("\n"),
            Err(e) => e.to_string(),
        };
        format!(
            "Switch tor: {switch}\nServers:\n{servers}\nFRR:\n{}",
            self.frr.log_tail(30)
        )
    }

    /// The node's speaker, configured only from what patchbay published on Server
    /// `s` (and the password of its Secret): its address and a route to the ToR on
    /// its NIC, GoBGP with the peer. Returns it, its address and the peer's.
    fn node_speaker(&self, s: &Server, password: &str) -> (Gobgp, String, String) {
        let node_ns = &self.hosts.namespaces[1];
        let (src, peer) = (annotation(s, "src-ip"), annotation(s, "peer-ip"));
        ip(&[
            "-n",
            node_ns,
            "addr",
            "add",
            &format!("{src}/32"),
            "dev",
            "eth0",
        ]);
        ip(&[
            "-n",
            node_ns,
            "route",
            "add",
            &format!("{peer}/32"),
            "dev",
            "eth0",
        ]);
        let node = Gobgp::start(
            node_ns,
            annotation(s, "node-asn").parse().unwrap(),
            &src,
            &[GobgpPeer {
                address: peer.clone(),
                asn: annotation(s, "peer-asn").parse().unwrap(),
                local_address: src.clone(),
                password: Some(password.to_owned()),
            }],
        )
        .expect("GoBGP starts");
        (node, src, peer)
    }

    fn tag(&self) -> String {
        self.ovs
            .vsctl(&["get", "Port", &self.hosts.ports[1], "tag"])
            .unwrap()
    }
}

fn annotation(s: &Server, key: &str) -> String {
    s.annotations()
        .get(&format!("patchbay.dev/bgp-peers-0-{key}"))
        .cloned()
        .unwrap_or_else(|| panic!("annotation {key} on {:?}", s.annotations()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_allocated_host_peers_with_its_tor_announces_only_its_prefixes_and_is_removed_on_release()
 {
    let mut bed = Bed::start_with("bgp", true, false).await;
    let ns = bed.env.cluster.namespace.clone();
    let created = Instant::now();
    let s = bed.bound_host().await;
    // What patchbay published is all the node gets.
    assert_eq!(annotation(&s, "node-asn"), "65101");
    assert_eq!(annotation(&s, "peer-asn"), "65000");
    assert_eq!(annotation(&s, "peer-ip"), "10.99.0.1");
    assert_eq!(annotation(&s, "src-ip"), "10.99.0.2");
    let secret_name = annotation(&s, "password-secret");
    assert_eq!(secret_name, format!("web-bgp-{}-0", bed.server_name()));
    let secret = bed.env.api::<Secret>().get(&secret_name).await.unwrap();
    assert_eq!(secret.type_.as_deref(), Some("kubernetes.io/basic-auth"));
    let password = String::from_utf8(secret.data.unwrap()["password"].0.clone()).unwrap();
    assert_eq!(password.len(), 24);

    // The node configures its speaker from that: its address and a route to the
    // ToR on its NIC, GoBGP with the peer and the password.
    let (node, src, peer) = bed.node_speaker(&s, &password);
    node.announce("192.0.2.5/32").unwrap();
    node.announce("203.0.113.7/32").unwrap();

    let configured = bed
        .until("the neighbour on FRR", 60, || has_neighbour(&bed.frr, &src))
        .await;
    let established = bed
        .until("Established on FRR", 60, || {
            bed.frr.peer_states().unwrap() == vec![(src.clone(), "Established".to_owned())]
        })
        .await;
    eprintln!(
        "claim created → neighbour configured on FRR {:?} (from the check), Established {:?} \
         later; {:?} after the claim",
        configured,
        established,
        created.elapsed()
    );
    bed.until("Established on GoBGP", 30, || node.established(&peer))
        .await;
    bed.until("only the claim's prefix accepted", 30, || {
        bed.frr.routes().unwrap() == ["192.0.2.5/32"]
    })
    .await;

    // Clauses and entries added by hand under names patchbay owns: a route-map
    // clause that lets everything in, one that would send routes out, a deny in the
    // host's prefix-list. Each is removed within an interval (2 s) or so, counted as
    // drift repaired, told in a Warning Event; the host's foreign prefix never stays.
    let list = format!("PB-IN-{}", src.replace('.', "-"));
    let running = || bed.frr.vtysh(&["show running-config"]).unwrap();
    let repaired_before = bed.env.probes.metrics.drift_repaired("BgpSpeaker");
    bed.frr
        .vtysh(&[
            "configure terminal",
            &format!("route-map {list} permit 65000"),
            "exit",
            "route-map PB-OUT-NOTHING permit 20",
            "exit",
            &format!("ip prefix-list {list} seq 5 deny 192.0.2.0/24 le 32"),
        ])
        .unwrap();
    assert!(running().contains(&format!("route-map {list} permit 65000")));
    let cleaned = bed
        .until("the hand-made clauses and entry removed", 30, || {
            let text = running();
            !text.contains(&format!("route-map {list} permit 65000"))
                && !text.contains("route-map PB-OUT-NOTHING permit 20")
                && !text.contains(&format!("ip prefix-list {list} seq 5 deny"))
        })
        .await;
    eprintln!("hand-made route-map clauses and prefix-list entry removed after {cleaned:?}");
    let text = running();
    assert!(
        text.contains(&format!("route-map {list} permit 10"))
            && text.contains("route-map PB-OUT-NOTHING deny 10"),
        "patchbay's own clauses stay:\n{text}"
    );
    bed.until("only the claim's prefix accepted again", 30, || {
        bed.frr.routes().unwrap() == ["192.0.2.5/32"]
    })
    .await;
    let repaired = bed.env.probes.metrics.drift_repaired("BgpSpeaker") - repaired_before;
    assert!(repaired >= 2, "{repaired} BGP repairs counted");
    let warnings = bed.env.warnings("tor").await;
    let note = warnings
        .iter()
        .find(|e| e.reason.as_deref() == Some("BgpDriftRepaired"))
        .and_then(|e| e.note.clone())
        .expect("a BgpDriftRepaired Warning on the Switch");
    assert!(note.contains("permit 65000"), "{note}");
    assert_eq!(bed.tag(), TENANT_VLAN, "the port carries the tenant's VLAN");

    // Status: the Switch lists the neighbour, the Server its peer, the inventory the
    // host variables; the password is nowhere but its Secret.
    let sw = bed
        .env
        .wait_obj::<Switch>("tor", "the neighbour Established in the status", |sw| {
            sw.status
                .as_ref()
                .and_then(|s| s.bgp.as_ref())
                .is_some_and(|b| {
                    b.neighbors.len() == 1
                        && b.neighbors[0].state == "Established"
                        && b.neighbors[0].accepted_prefixes == 1
                })
        })
        .await;
    let st = sw.status.clone().unwrap();
    assert_eq!(
        find_condition(&st.conditions, "BgpConfigured").unwrap().0,
        "True"
    );
    let n = &st.bgp.as_ref().unwrap().neighbors[0];
    assert_eq!(
        (n.address.as_str(), n.switch_port.as_str()),
        ("10.99.0.2", "tor-n1")
    );
    assert_eq!(n.server, bed.server_name());
    let s = bed
        .server("its peer Established", |s| {
            s.status.as_ref().and_then(|st| st.bgp.as_deref()) == Some("1/1")
        })
        .await;
    let peers = &s.status.as_ref().unwrap().bgp_peers;
    assert_eq!(peers[0].switch, format!("{ns}/tor"));
    assert_eq!(peers[0].state.as_deref(), Some("Established"));
    let inventory = bed
        .env
        .api::<ConfigMap>()
        .get("web-inventory")
        .await
        .unwrap();
    let ini = &inventory.data.as_ref().unwrap()["hosts.ini"];
    assert!(
        ini.contains("bgp_peer_0_src_ip=10.99.0.2") && ini.contains("bgp_peer_0_peer_asn=65000"),
        "{ini}"
    );
    let everywhere = format!(
        "{:?} {:?} {:?} {:?} {:?}",
        s.annotations(),
        s.status,
        st,
        inventory.data,
        bed.env
            .api::<Event>()
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .iter()
            .map(|e| e.message.clone())
            .collect::<Vec<_>>()
    );
    assert!(!everywhere.contains(&password), "the password leaked");

    // Opted in: the node joins the cluster as a Kubernetes Node that is this Server
    // (providerID patchbay://<server>) and the selector selects; it gets the same
    // annotations, and MetalLB a BGPPeer for it with a copy of the password where
    // MetalLB reads it. A Node the selector does not select is never touched.
    let nodes = Api::<Node>::all(bed.env.cluster.client.clone());
    let (selected, unselected) = (format!("{ns}-node-1"), format!("{ns}-node-2"));
    for (name, labels) in [
        (
            &selected,
            json!({"patchbay.dev/bgp": "on", "kubernetes.io/hostname": selected}),
        ),
        (&unselected, json!({"kubernetes.io/hostname": unselected})),
    ] {
        nodes
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({
                    "metadata": {"name": name, "labels": labels},
                    "spec": {"providerID": format!("patchbay://{}", bed.server_name())}
                }))
                .unwrap(),
            )
            .await
            .unwrap();
    }
    let bgp_peers: Api<DynamicObject> = Api::namespaced_with(
        bed.env.cluster.client.clone(),
        &ns,
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("metallb.io", "v1beta2", "BGPPeer"),
            "bgppeers",
        ),
    );
    let metallb_name = format!("patchbay-{}-0", bed.server_name());
    let peer_object = support::eventually_seen(30, "the BGPPeer", || async {
        bgp_peers
            .get_opt(&metallb_name)
            .await
            .map_err(|e| e.to_string())?
            .ok_or_else(|| "none yet".to_owned())
    })
    .await;
    assert_eq!(
        peer_object.data["spec"],
        json!({"myASN": 65101, "peerASN": 65000, "peerAddress": "10.99.0.1",
               "sourceAddress": "10.99.0.2", "holdTime": "3s", "keepaliveTime": "1s",
               "passwordSecret": {"name": metallb_name, "namespace": ns},
               "nodeSelectors": [{"matchLabels": {"kubernetes.io/hostname": selected}}]})
    );
    // A Node's peers' annotations (the Server's own keys; which Server they are for
    // is checked apart).
    let node_annotations = |n: &Node| -> Vec<(String, String)> {
        n.annotations()
            .iter()
            .filter(|(k, _)| {
                k.starts_with("patchbay.dev/bgp-peers-") && *k != "patchbay.dev/bgp-peers-server"
            })
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    };
    let server_annotations: Vec<(String, String)> = s
        .annotations()
        .iter()
        .filter(|(k, _)| k.starts_with("patchbay.dev/bgp-peers-"))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    assert_eq!(server_annotations.len(), 5);
    let joined = support::eventually_seen(30, "the Node's annotations", || async {
        let n = nodes.get(&selected).await.map_err(|e| e.to_string())?;
        if node_annotations(&n) == server_annotations {
            Ok(n)
        } else {
            Err(format!("{:?}", n.annotations()))
        }
    })
    .await;
    let copy = bed.env.api::<Secret>().get(&metallb_name).await.unwrap();
    assert_eq!(
        String::from_utf8(copy.data.unwrap()["password"].0.clone()).unwrap(),
        password,
        "MetalLB's copy holds the same password"
    );
    assert!(
        node_annotations(&nodes.get(&unselected).await.unwrap()).is_empty(),
        "a Node the selector does not select is not touched"
    );
    assert_eq!(
        joined.annotations().get("patchbay.dev/bgp-peers-server"),
        Some(&bed.server_name())
    );
    assert_eq!(
        joined
            .labels()
            .get("patchbay.dev/bgp-annotated")
            .map(String::as_str),
        Some("true")
    );
    // The Node leaves the selection: its annotations, mark and BGPPeer go; back in
    // it, they come back.
    let select = |on: bool| {
        let nodes = nodes.clone();
        let name = selected.clone();
        async move {
            let value = if on {
                json!("on")
            } else {
                serde_json::Value::Null
            };
            nodes
                .patch(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"metadata": {"labels": {"patchbay.dev/bgp": value}}})),
                )
                .await
                .unwrap();
        }
    };
    select(false).await;
    support::eventually_seen(30, "the deselected Node cleared", || async {
        let n = nodes.get(&selected).await.map_err(|e| e.to_string())?;
        let peer = bgp_peers
            .get_opt(&metallb_name)
            .await
            .map_err(|e| e.to_string())?;
        let clear = !n
            .annotations()
            .keys()
            .any(|k| k.starts_with("patchbay.dev/bgp-peers-"))
            && !n.labels().contains_key("patchbay.dev/bgp-annotated");
        if clear && peer.is_none() {
            Ok(())
        } else {
            Err(format!("{:?} {:?} {peer:?}", n.annotations(), n.labels()))
        }
    })
    .await;
    select(true).await;
    support::eventually_seen(30, "the reselected Node annotated again", || async {
        let n = nodes.get(&selected).await.map_err(|e| e.to_string())?;
        let peer = bgp_peers
            .get_opt(&metallb_name)
            .await
            .map_err(|e| e.to_string())?;
        if node_annotations(&n) == server_annotations && peer.is_some() {
            Ok(())
        } else {
            Err(format!("{:?} {peer:?}", n.annotations()))
        }
    })
    .await;
    let seen = format!("{:?} {:?}", joined.metadata, peer_object.data);
    assert!(!seen.contains(&password), "the password leaked: {seen}");

    // FRR restarted without its configuration: put back within an interval, and
    // counted as drift repaired.
    let repaired_before = bed.env.probes.metrics.drift_repaired("BgpSpeaker");
    bed.frr.restart_empty().expect("FRR restarts");
    let repaired = bed
        .until("the neighbour put back by drift", 30, || {
            has_neighbour(&bed.frr, &src)
        })
        .await;
    bed.until("Established again", 60, || {
        bed.frr.peer_states().unwrap() == vec![(src.clone(), "Established".to_owned())]
    })
    .await;
    eprintln!("FRR restarted empty → neighbour back after {repaired:?}");
    assert!(
        bed.env.probes.metrics.drift_repaired("BgpSpeaker") > repaired_before,
        "the neighbour put back counts as drift repaired"
    );

    // Release with the ToR's bgpd stuck: the host is held, its port keeps the tenant
    // VLAN, for as long as the neighbour cannot be taken off.
    bed.frr.pause();
    bed.env
        .api::<ServerClaim>()
        .delete("web", &DeleteParams::default())
        .await
        .unwrap();
    let held = |s: &Server| {
        s.status
            .as_ref()
            .and_then(|st| find_condition(&st.conditions, "Held"))
            .is_some_and(|(t, r, _)| t == "True" && r == "BgpPeersRemaining")
    };
    bed.server("held for its BGP neighbour", held).await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    let s = bed.server("still held", held).await;
    assert_eq!(s.status.unwrap().phase, Some(ServerPhase::Provisioned));
    assert_eq!(
        bed.tag(),
        TENANT_VLAN,
        "the port keeps the tenant VLAN meanwhile"
    );
    // bgpd goes on: the neighbour comes off, then the port leaves the tenant VLAN.
    bed.frr.resume();
    bed.until("the neighbour off FRR", 60, || {
        bed.frr.peer_states().unwrap().is_empty()
    })
    .await;
    bed.until("the port back on the provisioning VLAN", 60, || {
        bed.tag() == "10"
    })
    .await;
    bed.until("the session down on the node", 30, || {
        !node.established(&peer)
    })
    .await;
    bed.server("annotations gone, Available", |s| {
        !s.annotations()
            .keys()
            .any(|k| k.starts_with("patchbay.dev/bgp-peers-"))
            && s.status.as_ref().is_some_and(|st| {
                st.bgp_peers.is_empty() && st.phase == Some(ServerPhase::Available)
            })
    })
    .await;
    assert!(
        bed.env
            .api::<Secret>()
            .get_opt(&secret_name)
            .await
            .unwrap()
            .is_none(),
        "the password Secret is deleted"
    );
    // Released: the Node's annotations, the BGPPeer and MetalLB's copy go too.
    support::eventually_seen(30, "the Node, BGPPeer and copy cleared", || async {
        let n = nodes.get(&selected).await.map_err(|e| e.to_string())?;
        let peer = bgp_peers
            .get_opt(&metallb_name)
            .await
            .map_err(|e| e.to_string())?;
        let copy = bed
            .env
            .api::<Secret>()
            .get_opt(&metallb_name)
            .await
            .map_err(|e| e.to_string())?;
        if node_annotations(&n).is_empty() && peer.is_none() && copy.is_none() {
            Ok(())
        } else {
            Err(format!("{:?} {peer:?} {}", n.annotations(), copy.is_some()))
        }
    })
    .await;
    for name in [&selected, &unselected] {
        nodes.delete(name, &DeleteParams::default()).await.unwrap();
    }
    bed.env.cluster.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_announcing_the_tors_subnet_or_using_its_asn_is_refused_and_nothing_reaches_frr() {
    let bed = Bed::start("bgp-refused").await;
    bed.claim("bad", json!({"asn": 65000, "prefixes": ["10.99.0.0/24"]}))
        .await;
    let (reason, message) =
        bgp_accepted(&bed.env, &bed.env.cluster.namespace, "bad", "False").await;
    assert_eq!(reason, "Refused");
    assert!(
        message.contains("spec.roles[0].bgp.asn: 65000 is a ToR's own ASN"),
        "{message}"
    );
    assert!(
        message.contains("spec.roles[0].bgp.prefixes[0]: 10.99.0.0/24 overlaps a ToR's own"),
        "{message}"
    );
    // A second Switch handing out an address of the first one's port: refused,
    // naming the port.
    bed.env
        .create::<Switch>(json!({
            "apiVersion": "patchbay.dev/v1alpha1", "kind": "Switch",
            "metadata": {"name": "tor2"},
            "spec": {"provider": {"name": "tor"},
                     "ports": {"tor2-n1": {"name": "pbnone0", "bgpAddress": "10.99.0.2/31"}},
                     "bgp": {"speaker": {"name": "tor-frr"}, "asn": 65000,
                             "routerId": "10.255.0.2", "intervalSeconds": 2}}
        }))
        .await;
    let tor2 = bed
        .env
        .wait_obj::<Switch>("tor2", "tor2's overlap refused", |s| {
            s.status
                .as_ref()
                .and_then(|st| find_condition(&st.conditions, "BgpConfigured"))
                .is_some_and(|c| c.0 == "False")
        })
        .await;
    let (_, reason, message) =
        find_condition(&tor2.status.unwrap().conditions, "BgpConfigured").unwrap();
    assert_eq!(reason, "AddressOverlap");
    assert!(
        message.starts_with(
            "spec.ports[\"tor2-n1\"].bgpAddress: 10.99.0.2/31 overlaps a port of Switch tor"
        ),
        "{message}"
    );
    bed.provision().await;
    bed.server("provisioned", |s| {
        s.status.as_ref().and_then(|st| st.phase) == Some(ServerPhase::Provisioned)
    })
    .await;
    // Several of the Switch's intervals pass: FRR never gets a neighbour.
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert!(bed.frr.peer_states().unwrap().is_empty());
    let s = bed.server("no peers", |_| true).await;
    assert!(s.status.unwrap().bgp_peers.is_empty());
    bed.env.cluster.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_switch_takes_its_hosts_neighbours_off_the_speaker() {
    let bed = Bed::start("bgp-switch-gone").await;
    bed.claim("web", json!({"asn": 65101, "prefixes": ["192.0.2.0/28"]}))
        .await;
    bed.provision().await;
    bed.until("the neighbour on FRR", 60, || {
        has_neighbour(&bed.frr, "10.99.0.2")
    })
    .await;
    bed.env
        .api::<Switch>()
        .delete("tor", &DeleteParams::default())
        .await
        .unwrap();
    bed.until("the neighbour off FRR", 60, || {
        bed.frr.peer_states().unwrap().is_empty()
    })
    .await;
    let lists = bed.frr.vtysh(&["show ip prefix-list json"]).unwrap();
    assert!(!lists.contains("PB-IN-10-99-0-2"), "{lists}");
    bed.env.cluster.finish().await;
}

/// The reason and message of the claim's `BgpAccepted` condition once its status is
/// `truth`.
async fn bgp_accepted(env: &Env, ns: &str, name: &str, truth: &str) -> (String, String) {
    let api = Api::<ServerClaim>::namespaced(env.cluster.client.clone(), ns);
    support::eventually_seen(60, &format!("{ns}/{name} BgpAccepted={truth}"), || async {
        let c = api
            .get_opt(name)
            .await
            .map_err(|e| e.to_string())?
            .ok_or("no claim")?;
        match c
            .status
            .as_ref()
            .and_then(|st| find_condition(&st.conditions, "BgpAccepted"))
        {
            Some((t, r, m)) if t == truth => Ok((r, m)),
            other => Err(format!("{other:?}")),
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_tenancy_a_tenant_peers_only_within_its_grants_and_never_with_anothers() {
    let bed = Bed::start_with("bgp-tenants", false, true).await;
    let infra = bed.env.cluster.namespace.clone();
    let (a, b) = (format!("{infra}-a"), format!("{infra}-b"));
    let client = bed.env.cluster.client.clone();
    for (t, vlan, asns, prefix) in [
        (&a, 100, "65101-65102", "192.0.2.0/28"),
        (&b, 200, "65201", "198.51.100.0/28"),
    ] {
        let pool: patchbay::api::VLANPool = serde_json::from_value(json!({
            "apiVersion": "patchbay.dev/v1alpha1", "kind": "VLANPool",
            "metadata": {"name": t},
            "spec": {"vlans": vlan.to_string(), "namespaces": [t], "asns": asns,
                     "prefixes": [prefix]}
        }))
        .unwrap();
        Api::<patchbay::api::VLANPool>::all(client.clone())
            .create(&PostParams::default(), &pool)
            .await
            .unwrap();
        let config: patchbay::api::SwitchPortConfiguration = serde_json::from_value(json!({
            "apiVersion": "patchbay.dev/v1alpha1", "kind": "SwitchPortConfiguration",
            "metadata": {"name": "tenant"}, "spec": {"untaggedVLAN": vlan}
        }))
        .unwrap();
        Api::<patchbay::api::SwitchPortConfiguration>::namespaced(client.clone(), t)
            .create(&PostParams::default(), &config)
            .await
            .unwrap();
    }

    // Tenant B, hostile, first: claims for A's prefix and for a default route (at a
    // site with no Server, so they bind nothing). Refused naming the field; being
    // older, they still hold nothing A could be refused for.
    let refused =
        |bgp: serde_json::Value, field: &'static str, reason: &'static str| (bgp, field, reason);
    let hostile_first = [
        (
            "take-prefix",
            refused(
                json!({"prefixes": ["192.0.2.0/28"]}),
                "prefixes[0]",
                "192.0.2.0/28",
            ),
        ),
        (
            "default",
            refused(
                json!({"prefixes": ["0.0.0.0/0"]}),
                "prefixes[0]",
                "default route",
            ),
        ),
    ];
    let hostile_then = [
        (
            "take-asn",
            refused(
                json!({"asn": 65101, "prefixes": ["198.51.100.16/28"]}),
                "asn",
                "65101",
            ),
        ),
        (
            "ungranted",
            refused(
                json!({"prefixes": ["203.0.113.0/24"]}),
                "prefixes[0]",
                "203.0.113.0/24",
            ),
        ),
    ];
    let refuse =
        |name: &'static str,
         (bgp, field, reason): (serde_json::Value, &'static str, &'static str)| {
            let (bed, b, a) = (&bed, &b, &a);
            async move {
                bed.claim_in(b, "nowhere", name, bgp).await;
                let (_, message) = bgp_accepted(&bed.env, b, name, "False").await;
                assert!(
                    message.contains(field) && message.contains(reason),
                    "{name}: {message}"
                );
                assert!(
                    !message.contains(a.as_str()),
                    "never names the other tenant: {message}"
                );
            }
        };
    for (name, case) in hostile_first {
        refuse(name, case).await;
    }
    // Creation times have a second's resolution: B's claims are strictly older.
    tokio::time::sleep(Duration::from_millis(1100)).await;

    // Tenant A, within its grants (its first ASN by default): accepted, peered,
    // filtered to exactly its prefix.
    bed.claim_in(&a, &infra, "web", json!({"prefixes": ["192.0.2.0/28"]}))
        .await;
    bgp_accepted(&bed.env, &a, "web", "True").await;
    bed.provision().await;
    let s = bed
        .server("its peer published", |s| {
            s.annotations()
                .contains_key("patchbay.dev/bgp-peers-0-src-ip")
        })
        .await;
    assert_eq!(annotation(&s, "node-asn"), "65101", "A's first granted ASN");
    bed.until("A's neighbour on FRR", 60, || {
        bed.frr.peer_states().unwrap().len() == 1
    })
    .await;
    let lists = |frr: &Frr| frr.vtysh(&["show ip prefix-list json"]).unwrap();
    let a_lists = lists(&bed.frr);
    assert!(a_lists.contains("192.0.2.0/28"), "{a_lists}");

    // B again: A's ASN, space nobody granted. Refused; then B within its own grants:
    // accepted (it waits for a Server). FRR keeps only A's neighbour and A's filter,
    // over several of the Switch's intervals.
    for (name, case) in hostile_then {
        refuse(name, case).await;
    }
    bed.claim_in(
        &b,
        "nowhere",
        "own",
        json!({"prefixes": ["198.51.100.0/28"]}),
    )
    .await;
    bgp_accepted(&bed.env, &b, "own", "True").await;
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert_eq!(
        bed.frr.peer_states().unwrap().len(),
        1,
        "only A's neighbour"
    );
    assert_eq!(lists(&bed.frr), a_lists, "A's filter unchanged, no other");
    assert_eq!(bed.tag(), "100", "the host's port still carries A's VLAN");
    bed.env.cluster.finish().await;
}

/// A rollout's BGP gate, on real speakers: the tenant configuration edited so that
/// the host's port leaves its peering VLAN. The canary (that port) goes Active on
/// the bridge, the session drops within the hold time, FRR's read says so → the
/// port goes back to the peering VLAN, the session is Established again, the
/// rollout stops (`RolledBack`, naming the gate, the port and the host), and the
/// other switch's port carrying the same configuration is never written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollout_that_breaks_a_hosts_bgp_fails_its_gate_and_goes_back() {
    let bed = Bed::start("bgp-rollout").await;
    let ns = bed.env.cluster.namespace.clone();
    // Another switch (a fixture device, after "tor" in name order), one port on the
    // same tenant configuration.
    bed.env
        .device(
            "zz-spare",
            &[("username", "patchbay"), ("password", "unused")],
            json!({"backend": "fixture", "os": "fixture", "address": "127.0.0.1"}),
            &[("zz-p1", "Gi0/1")],
        )
        .await;
    bed.env.link("zz-p1", Some("tenant")).await;
    bed.env
        .wait_state("zz-p1", patchbay::api::PortState::Active)
        .await;
    let s = bed.bound_host().await;
    let secret = bed
        .env
        .api::<Secret>()
        .get(&annotation(&s, "password-secret"))
        .await
        .unwrap();
    let password = String::from_utf8(secret.data.unwrap()["password"].0.clone()).unwrap();
    let (node, src, peer) = bed.node_speaker(&s, &password);
    let established =
        || bed.frr.peer_states().unwrap() == vec![(src.clone(), "Established".to_owned())];
    bed.until("Established on FRR", 60, established).await;
    bed.until("Established on GoBGP", 30, || node.established(&peer))
        .await;
    assert_eq!(bed.tag(), TENANT_VLAN);
    // The Switch's status has read the session (the gate's evidence).
    bed.env
        .wait_obj::<Switch>("tor", "the session in the Switch's status", |sw| {
            sw.status
                .as_ref()
                .and_then(|s| s.bgp.as_ref())
                .is_some_and(|b| b.neighbors.iter().any(|n| n.state == "Established"))
        })
        .await;
    let spare = bed.env.fixtures.get(&ns, "zz-spare").unwrap();
    spare.clear_log();

    // The edit: off the peering VLAN, one port at a time.
    bed.env
        .api::<SwitchPortConfiguration>()
        .patch(
            "tenant",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"untaggedVLAN": 101,
                "rollout": {"canary": {"ports": 1}, "maxUnavailable": 1}}})),
        )
        .await
        .unwrap();
    bed.until("the host's port moved off the peering VLAN", 30, || {
        bed.tag() == "101"
    })
    .await;
    let config = bed
        .env
        .wait_obj::<SwitchPortConfiguration>("tenant", "the rollout rolled back", |c| {
            c.status
                .as_ref()
                .and_then(|s| s.rollout.as_ref())
                .is_some_and(|r| r.phase == "RolledBack")
        })
        .await;
    let r = config.status.unwrap().rollout.unwrap();
    assert!(
        r.message.contains("gate BgpEstablished failed"),
        "{}",
        r.message
    );
    assert!(r.message.contains("tor-n1"), "{}", r.message);
    assert!(r.message.contains(&bed.server_name()), "{}", r.message);
    assert_eq!((r.wave, r.current_revision_number), (1, 1), "{r:?}");
    // Back on the peering VLAN; the session comes back.
    bed.until("the port back on the peering VLAN", 30, || {
        bed.tag() == TENANT_VLAN
    })
    .await;
    bed.until("Established on FRR again", 60, established).await;
    // The other switch never reached: nothing written there.
    let writes: Vec<_> = spare
        .operations()
        .into_iter()
        .filter(|o| o.is_write())
        .collect();
    assert!(writes.is_empty(), "{writes:?}");
    let warned = bed.env.warnings("tenant").await;
    assert!(
        warned
            .iter()
            .any(|e| e.reason.as_deref() == Some("RolledBack")),
        "{warned:?}"
    );
}

//! The demo's BGP host: FRR (zebra + bgpd in a network namespace, vtysh behind a
//! private sshd) as leaf-8's speaker, Server `rack-2-a` on leaf-8's port `p1` (a
//! fixture device: the port's VLANs are not on the wire here; a veth pair joins the
//! speaker's namespace to the host's), claimed by `lb-cluster` with BGP. Once the
//! host is provisioned, GoBGP starts in the host's namespace configured only from
//! what patchbay published (the Server's annotations and the password Secret), and
//! the demo prints the session as FRR reports it. Starts processes and namespaces
//! (the test bed's); talks to its own devplane only.

use anyhow::{Context as _, Result};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, PostParams};
use kube::{Client, ResourceExt};
use patchbay::api::{ProviderSwitch, Server, ServerClaim, ServerPhase, Switch};
use patchbay_testbed::bgp::{Frr, Gobgp, GobgpPeer, Link};
use serde_json::json;

const NS: &str = "network-infra";
/// The Server that peers.
pub const HOST: &str = "rack-2-a";
/// What the host announces: one address inside its claim's prefix, one outside.
const ANNOUNCED: [&str; 2] = ["192.0.2.17/32", "203.0.113.9/32"];

/// Where the demo's BGP host is.
pub struct BgpHost {
    link: Link,
    frr: Frr,
    node: Option<Gobgp>,
    stage: u8,
}

async fn create<K>(api: Api<K>, doc: serde_json::Value) -> Result<()>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let obj: K = serde_json::from_value(doc)?;
    api.create(&PostParams::default(), &obj).await?;
    Ok(())
}

impl BgpHost {
    /// Starts the namespaces and FRR.
    pub fn start() -> Result<Self> {
        let link = Link::new().context("network namespaces for the BGP host")?;
        link.address(&link.tor, "10.99.0.0/31")?;
        let frr = Frr::start(&link.tor, "leaf-8")
            .context("starting FRR (make bgp installs frr and gobgpd)")?;
        Ok(Self {
            link,
            frr,
            node: None,
            stage: 0,
        })
    }

    /// A line for the start-up list.
    pub fn describe(&self) -> String {
        format!(
            "  leaf-8 FRR (zebra + bgpd) in netns {}, vtysh over ssh 127.0.0.1:{}; host rack-2-a in netns {}",
            self.link.tor, self.frr.ssh_port, self.link.node
        )
    }

    /// leaf-8 (a fixture switch whose port p1 peers through FRR), its speaker, the
    /// Server and the claim.
    pub async fn apply(&self, client: &Client) -> Result<()> {
        let c = client.clone();
        create(
            Api::<Secret>::namespaced(c.clone(), NS),
            json!({"metadata": {"name": "leaf-8-frr-login"},
                   "stringData": {"username": self.frr.username, "privateKey": self.frr.client_key}}),
        )
        .await?;
        for spec in [
            json!({"name": "leaf-8-frr", "spec": {"backend": "ssh", "os": "frr",
                "address": "127.0.0.1", "port": self.frr.ssh_port,
                "hostKey": {"fingerprint": self.frr.host_key_fingerprint},
                "credentialsSecretRef": {"name": "leaf-8-frr-login"}}}),
            json!({"name": "leaf-8", "spec": {"backend": "fixture", "os": "fixture",
                "address": "127.0.0.1"}}),
        ] {
            create(
                Api::<ProviderSwitch>::namespaced(c.clone(), NS),
                json!({"apiVersion": "patchbay.dev/v1alpha1", "kind": "ProviderSwitch",
                       "metadata": {"name": spec["name"]}, "spec": spec["spec"]}),
            )
            .await?;
        }
        create(
            Api::<Switch>::namespaced(c.clone(), NS),
            json!({"apiVersion": "patchbay.dev/v1alpha1", "kind": "Switch",
                "metadata": {"name": "leaf-8"},
                "spec": {"provider": {"name": "leaf-8"},
                         "ports": {"leaf-8-p1": {"name": "p1", "bgpAddress": "10.99.0.0/31"}},
                         "bgp": {"speaker": {"name": "leaf-8-frr"}, "asn": 65000,
                                 "routerId": "10.255.0.8", "keepaliveSeconds": 1,
                                 "holdSeconds": 3, "connectRetrySeconds": 1,
                                 "intervalSeconds": 5}}}),
        )
        .await?;
        create(
            Api::<Server>::all(c.clone()),
            json!({"apiVersion": "patchbay.dev/v1alpha1", "kind": "Server",
                "metadata": {"name": HOST},
                "spec": {"bmc": {"address": "10.0.0.29",
                                 "credentialsSecretRef": {"name": "bmc-login", "namespace": NS}},
                         "bootMac": "52:54:00:2a:00:01", "site": "dc1-bgp",
                         "nics": [{"name": "eth0",
                                   "port": {"kind": "SwitchPort", "name": "leaf-8-p1", "namespace": NS},
                                   "provisioningConfiguration": {"name": "provisioning"}}]}}),
        )
        .await?;
        create(
            Api::<ServerClaim>::namespaced(c, NS),
            json!({"apiVersion": "patchbay.dev/v1alpha1", "kind": "ServerClaim",
                "metadata": {"name": "lb-cluster"},
                "spec": {"site": "dc1-bgp",
                         "roles": [{"name": "worker", "count": 1,
                                    "bgp": {"asn": 65101, "prefixes": ["192.0.2.16/28"]}}],
                         "networkConfiguration": [{"configurationRef":
                             {"kind": "SwitchPortConfiguration", "name": "tenant-web"}}]}}),
        )
        .await?;
        println!(
            "  applied leaf-8 (BGP speaker leaf-8-frr), Server {HOST}, ServerClaim {NS}/lb-cluster (BGP, 192.0.2.16/28)"
        );
        Ok(())
    }

    /// Whether the host's session is up and shown.
    pub fn done(&self) -> bool {
        self.stage == 3
    }

    /// One step towards the session: the installer's signal once the host is
    /// bound, the node's speaker once its peers are published, the session as FRR
    /// reports it once Established.
    pub async fn step(&mut self, client: &Client, servers: &[Server]) -> Result<()> {
        let Some(s) = servers.iter().find(|s| s.name_any() == HOST) else {
            return Ok(());
        };
        let phase = s.status.as_ref().and_then(|st| st.phase);
        match self.stage {
            0 if phase == Some(ServerPhase::Provisioning) => {
                super::set_provisioned(client, HOST).await?;
                self.stage = 1;
            }
            1 if phase == Some(ServerPhase::Provisioned) => {
                let a = |k: &str| {
                    s.annotations()
                        .get(&format!("patchbay.dev/bgp-peers-0-{k}"))
                        .cloned()
                };
                let (Some(node_asn), Some(peer_asn), Some(peer_ip), Some(src_ip), Some(secret)) = (
                    a("node-asn"),
                    a("peer-asn"),
                    a("peer-ip"),
                    a("src-ip"),
                    a("password-secret"),
                ) else {
                    return Ok(());
                };
                let password = Api::<Secret>::namespaced(client.clone(), NS)
                    .get(&secret)
                    .await?
                    .data
                    .and_then(|d| d.get("password").map(|p| p.0.clone()))
                    .and_then(|p| String::from_utf8(p).ok())
                    .context("the password Secret")?;
                println!(
                    "{HOST} is Provisioned; patchbay published its BGP peer: node ASN {node_asn}, \
                     peer {peer_ip} AS {peer_asn}, source {src_ip}, password in Secret {NS}/{secret}; \
                     the host's speaker (GoBGP) is configured from that and announces {}",
                    ANNOUNCED.join(" and ")
                );
                self.link
                    .address(&self.link.node, &format!("{src_ip}/32"))?;
                self.link.route(&self.link.node, &format!("{peer_ip}/32"))?;
                let node = Gobgp::start(
                    &self.link.node,
                    node_asn.parse()?,
                    &src_ip,
                    &[GobgpPeer {
                        address: peer_ip,
                        asn: peer_asn.parse()?,
                        local_address: src_ip.clone(),
                        password: Some(password),
                    }],
                )
                .context("starting GoBGP")?;
                for p in ANNOUNCED {
                    node.announce(p)?;
                }
                self.node = Some(node);
                self.stage = 2;
            }
            2 => {
                let up = self
                    .frr
                    .peer_states()?
                    .iter()
                    .any(|(_, state)| state == "Established");
                let routes = self.frr.routes()?;
                if up && !routes.is_empty() {
                    println!(
                        "leaf-8's FRR reports (vtysh show bgp summary json, show ip bgp json):"
                    );
                    for (peer, state) in self.frr.peer_states()? {
                        println!("  neighbour {peer}: {state}");
                    }
                    println!(
                        "  routes learned: {} (of {} announced: only the claim's prefix is accepted)",
                        routes.join(", "),
                        ANNOUNCED.join(", ")
                    );
                    self.stage = 3;
                }
            }
            _ => {}
        }
        Ok(())
    }
}

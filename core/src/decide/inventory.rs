//! The installer's inventory for a claim: `hosts.ini` in the layout kubespray reads
//! and `hosts.yaml` with BareMetalHost-shaped values for a Helm chart (seeds 000 and
//! 001). Pure: allocated hosts in, file contents out.
//!
//! Every value written here has passed a strict grammar (object names, MACs,
//! addresses, group names), so no value can add a line or a section to `hosts.ini`.

use std::collections::BTreeMap;

use serde_json::json;

/// One allocated Server, as the inventory shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InventoryHost {
    /// Server name (the inventory host name).
    pub name: String,
    /// Its role in the claim.
    pub role: String,
    /// Boot MAC.
    pub boot_mac: String,
    /// Where the installer reaches it, if known.
    pub address: Option<String>,
    /// BMC address.
    pub bmc_address: String,
    /// The BMC credentials Secret (namespace, name) on the Server.
    pub bmc_secret: (String, String),
    /// Its BGP peers (what the host configures to peer with its ToRs), as the Server's
    /// status lists them.
    pub bgp_peers: Vec<crate::api::BgpPeer>,
}

/// A host's BGP peers as `hosts.ini` variables: `bgp_peer_{n}_node_asn`, `_peer_asn`,
/// `_peer_ip`, `_src_ip`, `_password_secret` (numbers, addresses and an object name:
/// nothing that can end the line).
fn bgp_vars(peers: &[crate::api::BgpPeer]) -> String {
    peers
        .iter()
        .enumerate()
        .map(|(n, p)| {
            format!(
                " bgp_peer_{n}_node_asn={} bgp_peer_{n}_peer_asn={} bgp_peer_{n}_peer_ip={} \
                 bgp_peer_{n}_src_ip={} bgp_peer_{n}_password_secret={}",
                p.node_asn, p.peer_asn, p.peer_ip, p.src_ip, p.password_secret
            )
        })
        .collect()
}

/// The rendered inventory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inventory {
    /// `hosts.ini`.
    pub hosts_ini: String,
    /// `hosts.yaml`.
    pub hosts_yaml: String,
    /// Hosts listed without an address.
    pub without_address: Vec<String>,
}

/// The key names of a Server's credentials in the `<claim>-bmc` copy.
pub fn bmc_copy_keys(server: &str) -> (String, String) {
    (format!("{server}-username"), format!("{server}-password"))
}

/// Renders the inventory of claim `namespace/name`. `groups` gives each role's
/// groups; `bmc_copy` the name of the credentials copy in the claim's namespace,
/// when the claim asks for one.
pub fn render(
    namespace: &str,
    name: &str,
    hosts: &[InventoryHost],
    groups: &dyn Fn(&str) -> Vec<String>,
    bmc_copy: Option<&str>,
) -> Inventory {
    let mut hosts: Vec<&InventoryHost> = hosts.iter().collect();
    hosts.sort_by(|a, b| (&a.role, &a.name).cmp(&(&b.role, &b.name)));
    let mut ini = format!(
        "# Inventory of ServerClaim {namespace}/{name}, written by patchbay; regenerated \
         whenever the allocation changes.\n[all]\n"
    );
    let mut without_address = Vec::new();
    for h in &hosts {
        match &h.address {
            Some(a) => ini.push_str(&format!(
                "{} ansible_host={a} boot_mac={}{}\n",
                h.name,
                h.boot_mac,
                bgp_vars(&h.bgp_peers)
            )),
            None => {
                ini.push_str(&format!(
                    "# {}: no address known (set spec.hostAddress on the Server)\n{} boot_mac={}{}\n",
                    h.name,
                    h.name,
                    h.boot_mac,
                    bgp_vars(&h.bgp_peers)
                ));
                without_address.push(h.name.clone());
            }
        }
    }
    let mut members: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    for h in &hosts {
        for g in groups(&h.role) {
            members.entry(g).or_default().push(&h.name);
        }
    }
    // kubespray's order first, then the others by name.
    let known = ["kube_control_plane", "etcd", "kube_node"];
    let mut order: Vec<&String> = known
        .iter()
        .filter_map(|k| members.keys().find(|g| g.as_str() == *k))
        .collect();
    order.extend(members.keys().filter(|g| !known.contains(&g.as_str())));
    for g in &order {
        ini.push_str(&format!("\n[{g}]\n"));
        for h in &members[*g] {
            ini.push_str(h);
            ini.push('\n');
        }
    }
    ini.push_str("\n[k8s_cluster:children]\n");
    for g in order.iter().filter(|g| g.as_str() != "etcd") {
        ini.push_str(g);
        ini.push('\n');
    }

    let list: Vec<serde_json::Value> = hosts
        .iter()
        .map(|h| {
            let mut bmc = json!({ "address": h.bmc_address });
            match bmc_copy {
                Some(copy) => {
                    let (user, pass) = bmc_copy_keys(&h.name);
                    bmc["credentialsName"] = json!(copy);
                    bmc["credentialsKeys"] = json!({ "username": user, "password": pass });
                }
                None => {
                    bmc["credentialsName"] = json!(h.bmc_secret.1);
                    bmc["credentialsNamespace"] = json!(h.bmc_secret.0);
                }
            }
            let mut v = json!({
                "name": h.name,
                "role": h.role,
                "groups": groups(&h.role),
                "spec": { "bootMACAddress": h.boot_mac, "bmc": bmc, "online": true },
            });
            if let Some(a) = &h.address {
                v["hostAddress"] = json!(a);
            }
            if !h.bgp_peers.is_empty() {
                v["bgpPeers"] = json!(
                    h.bgp_peers
                        .iter()
                        .map(|p| json!({
                            "nodeASN": p.node_asn,
                            "peerASN": p.peer_asn,
                            "peerAddress": p.peer_ip,
                            "sourceAddress": p.src_ip,
                            "passwordSecret": p.password_secret,
                        }))
                        .collect::<Vec<_>>()
                );
            }
            v
        })
        .collect();
    let doc = json!({
        "claim": { "namespace": namespace, "name": name },
        "baremetalHosts": list,
    });
    Inventory {
        hosts_ini: ini,
        hosts_yaml: patchbay_model::yaml::to_string(&doc).unwrap_or_default(),
        without_address,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decide::validate::claim::default_groups;

    fn host(name: &str, role: &str, address: Option<&str>) -> InventoryHost {
        InventoryHost {
            name: name.into(),
            role: role.into(),
            boot_mac: "aa:bb:cc:dd:ee:01".into(),
            address: address.map(Into::into),
            bmc_address: "redfish://10.0.0.5/redfish/v1/Systems/1".into(),
            bmc_secret: ("infra".into(), "srv-bmc".into()),
            bgp_peers: Vec::new(),
        }
    }

    #[test]
    fn a_hosts_bgp_peers_are_host_variables_in_both_files() {
        let mut h = host("n1", "worker", Some("10.0.0.21"));
        h.bgp_peers = vec![crate::api::BgpPeer {
            switch: "infra/leaf-1".into(),
            node_asn: 65101,
            peer_asn: 65000,
            peer_ip: "10.0.1.1".into(),
            src_ip: "10.0.1.2".into(),
            password_secret: "web-bgp-n1-0".into(),
            state: None,
        }];
        let inv = render("team", "web", &[h], &default_groups, None);
        assert!(
            inv.hosts_ini.contains(
                "n1 ansible_host=10.0.0.21 boot_mac=aa:bb:cc:dd:ee:01 bgp_peer_0_node_asn=65101 \
                 bgp_peer_0_peer_asn=65000 bgp_peer_0_peer_ip=10.0.1.1 bgp_peer_0_src_ip=10.0.1.2 \
                 bgp_peer_0_password_secret=web-bgp-n1-0\n"
            ),
            "{}",
            inv.hosts_ini
        );
        assert!(
            inv.hosts_yaml.contains("peerASN: 65000"),
            "{}",
            inv.hosts_yaml
        );
        assert!(
            inv.hosts_yaml.contains("passwordSecret: web-bgp-n1-0"),
            "{}",
            inv.hosts_yaml
        );
    }

    #[test]
    fn hosts_ini_has_kubesprays_layout() {
        let inv = render(
            "team",
            "web",
            &[
                host("w2", "worker", Some("10.0.0.12")),
                host("cp1", "control-plane", Some("10.0.0.10")),
                host("w1", "worker", None),
            ],
            &default_groups,
            None,
        );
        assert_eq!(
            inv.hosts_ini,
            "# Inventory of ServerClaim team/web, written by patchbay; regenerated whenever \
             the allocation changes.\n\
             [all]\n\
             cp1 ansible_host=10.0.0.10 boot_mac=aa:bb:cc:dd:ee:01\n\
             # w1: no address known (set spec.hostAddress on the Server)\n\
             w1 boot_mac=aa:bb:cc:dd:ee:01\n\
             w2 ansible_host=10.0.0.12 boot_mac=aa:bb:cc:dd:ee:01\n\
             \n[kube_control_plane]\ncp1\n\
             \n[etcd]\ncp1\n\
             \n[kube_node]\nw1\nw2\n\
             \n[k8s_cluster:children]\nkube_control_plane\nkube_node\n"
        );
        assert_eq!(inv.without_address, vec!["w1"]);
    }

    #[test]
    fn hosts_yaml_has_baremetalhost_shaped_values_and_names_the_credentials_only() {
        let inv = render(
            "team",
            "web",
            &[host("cp1", "control-plane", Some("10.0.0.10"))],
            &default_groups,
            None,
        );
        let v: serde_json::Value = patchbay_model::yaml::from_str(&inv.hosts_yaml).unwrap();
        let h = &v["baremetalHosts"][0];
        assert_eq!(h["spec"]["bootMACAddress"], "aa:bb:cc:dd:ee:01");
        assert_eq!(h["spec"]["bmc"]["credentialsName"], "srv-bmc");
        assert_eq!(h["spec"]["bmc"]["credentialsNamespace"], "infra");
        assert_eq!(h["groups"], json!(["kube_control_plane", "etcd"]));
        let with_copy = render(
            "team",
            "web",
            &[host("cp1", "control-plane", None)],
            &default_groups,
            Some("web-bmc"),
        );
        let v: serde_json::Value = patchbay_model::yaml::from_str(&with_copy.hosts_yaml).unwrap();
        let bmc = &v["baremetalHosts"][0]["spec"]["bmc"];
        assert_eq!(bmc["credentialsName"], "web-bmc");
        assert_eq!(bmc["credentialsKeys"]["password"], "cp1-password");
        assert!(v["baremetalHosts"][0].get("hostAddress").is_none());
    }

    #[test]
    fn custom_groups_join_the_cluster_and_an_empty_claim_renders_empty_groups() {
        let groups = |r: &str| {
            if r == "gpu" {
                vec!["kube_node".to_owned(), "gpu_nodes".to_owned()]
            } else {
                default_groups(r)
            }
        };
        let inv = render(
            "t",
            "c",
            &[host("g1", "gpu", Some("10.1.0.1"))],
            &groups,
            None,
        );
        assert!(inv.hosts_ini.ends_with(
            "\n[kube_node]\ng1\n\n[gpu_nodes]\ng1\n\n[k8s_cluster:children]\nkube_node\ngpu_nodes\n"
        ));
        let empty = render("t", "c", &[], &default_groups, None);
        assert!(
            empty
                .hosts_ini
                .ends_with("[all]\n\n[k8s_cluster:children]\n")
        );
    }
}

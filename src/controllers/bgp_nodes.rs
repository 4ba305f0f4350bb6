//! The opted-in side of a Server's BGP peers ([`crate::decide::bgp_nodes`] decides):
//! the Kubernetes Nodes that are the Server get its `patchbay.dev/bgp-peers-*`
//! annotations and, with a MetalLB namespace, one `BGPPeer` per peer there with a
//! copy of its password Secret (MetalLB reads `passwordSecret` from its own
//! namespace). Kubernetes I/O, called from the Server's reconcile after
//! `super::bgp::publish`, and woken by the selected Nodes' watch.
//!
//! Cost per Server reconcile when opted in: one LIST of the selected Nodes, one of
//! the Nodes patchbay marked (label `patchbay.dev/bgp-annotated`) and, with MetalLB,
//! one LIST of `BGPPeer`s and one of Secrets by label and a GET of each peer's
//! password Secret (to compare its copy); a write only for what differs. Released: annotations removed, `BGPPeer`s and copies deleted. A Node no
//! longer selected (or no longer the Server) loses its annotations and mark.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Node, Secret};
use kube::ResourceExt;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
};
use serde_json::{Value, json};

use super::ControllerError;
use super::bgp::{Published, password_bytes};
use crate::decide::bgp;
use crate::decide::bgp_nodes::{
    BgpNodes, METALLB_SERVER_LABEL, NODE_MARK_LABEL, NODE_SERVER_ANNOTATION, metallb_name,
    metallb_peer, node_hostname, node_patch, server_of_node,
};

/// The field manager of patchbay's server-side applies here.
const MANAGER: &str = "patchbay";

fn bgp_peers(client: &kube::Client, namespace: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("metallb.io", "v1beta2", "BGPPeer");
    Api::namespaced_with(
        client.clone(),
        namespace,
        &ApiResource::from_gvk_with_plural(&gvk, "bgppeers"),
    )
}

fn list_params(selector: &str) -> ListParams {
    if selector.is_empty() {
        ListParams::default()
    } else {
        ListParams::default().labels(selector)
    }
}

/// Puts `server`'s peers on the selected Nodes that are it (and on MetalLB), and
/// takes them off when it has none.
pub(super) async fn sync(
    client: &kube::Client,
    opts: &BgpNodes,
    server: &str,
    published: &Published,
) -> Result<(), ControllerError> {
    let nodes: Vec<Node> = Api::<Node>::all(client.clone())
        .list(&list_params(&opts.selector))
        .await?
        .items
        .into_iter()
        .filter(|n| {
            server_of_node(
                n.labels(),
                n.spec.as_ref().and_then(|s| s.provider_id.as_deref()),
            ) == Some(server)
        })
        .collect();
    let want = bgp::annotations(&published.peers);
    let api = Api::<Node>::all(client.clone());
    let patch = |node: &Node, want: &BTreeMap<String, String>| {
        node_patch(node.annotations(), node.labels(), want, server)
    };
    for node in &nodes {
        if let Some(p) = patch(node, &want) {
            api.patch(&node.name_any(), &PatchParams::default(), &Patch::Merge(p))
                .await?;
        }
    }
    // Nodes annotated for this Server that no longer are it, or are no longer
    // selected: their annotations and mark go.
    let marked = api
        .list(&ListParams::default().labels(&format!("{NODE_MARK_LABEL}=true")))
        .await?
        .items;
    for node in marked.iter().filter(|n| {
        n.annotations()
            .get(NODE_SERVER_ANNOTATION)
            .map(String::as_str)
            == Some(server)
            && !nodes.iter().any(|m| m.name_any() == n.name_any())
    }) {
        if let Some(p) = patch(node, &BTreeMap::new()) {
            api.patch(&node.name_any(), &PatchParams::default(), &Patch::Merge(p))
                .await?;
        }
    }
    let Some(namespace) = &opts.metallb_namespace else {
        return Ok(());
    };
    let hostnames: Vec<String> = nodes
        .iter()
        .map(|n| node_hostname(n.metadata.name.as_deref().unwrap_or(""), n.labels()).to_owned())
        .collect();
    let hostnames: Vec<&str> = hostnames.iter().map(String::as_str).collect();
    // Wanted: name → (BGPPeer, password), for peers whose password exists.
    let mut wanted: BTreeMap<String, (Value, ByteString)> = BTreeMap::new();
    if !hostnames.is_empty()
        && let Some(claim_ns) = &published.claim_namespace
    {
        for (n, p) in published.peers.iter().enumerate() {
            let Some(password) = password_bytes(client, claim_ns, &p.password_secret).await? else {
                continue; // published with the annotations; the next reconcile has it
            };
            let timers = published.timers.get(n).and_then(Option::as_ref);
            let peer = metallb_peer(server, n, p, timers, &hostnames, namespace);
            wanted.insert(metallb_name(server, n), (peer, password));
        }
    }
    let by_server = ListParams::default().labels(&format!("{METALLB_SERVER_LABEL}={server}"));
    let secrets = Api::<Secret>::namespaced(client.clone(), namespace);
    let peers = bgp_peers(client, namespace);
    // Passwords before the peers that name them.
    let copies: BTreeMap<String, Secret> = secrets
        .list(&by_server)
        .await?
        .items
        .into_iter()
        .map(|s| (s.name_any(), s))
        .collect();
    for (name, (_, password)) in &wanted {
        let same = copies
            .get(name)
            .and_then(|s| s.data.as_ref()?.get("password"))
            .is_some_and(|p| p == password);
        if !same {
            let copy = json!({
                "apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": name, "namespace": namespace,
                             "labels": {METALLB_SERVER_LABEL: server}},
                "type": "kubernetes.io/basic-auth",
                "data": {"password": password},
            });
            secrets
                .patch(
                    name,
                    &PatchParams::apply(MANAGER).force(),
                    &Patch::Apply(copy),
                )
                .await?;
        }
    }
    let have: BTreeMap<String, DynamicObject> = peers
        .list(&by_server)
        .await?
        .items
        .into_iter()
        .map(|p| (p.name_any(), p))
        .collect();
    for (name, (peer, _)) in &wanted {
        let same = have.get(name).is_some_and(|o| {
            o.data.get("spec") == peer.get("spec")
                && o.labels().get(METALLB_SERVER_LABEL).map(String::as_str) == Some(server)
        });
        if !same {
            peers
                .patch(
                    name,
                    &PatchParams::apply(MANAGER).force(),
                    &Patch::Apply(peer),
                )
                .await?;
        }
    }
    // What no peer wants any more: the BGPPeers first, then their passwords.
    for name in have.keys().filter(|n| !wanted.contains_key(*n)) {
        delete(&peers, name).await?;
    }
    for name in copies.keys().filter(|n| !wanted.contains_key(*n)) {
        delete(&secrets, name).await?;
    }
    Ok(())
}

async fn delete<K>(api: &Api<K>, name: &str) -> Result<(), ControllerError>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

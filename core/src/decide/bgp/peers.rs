//! A host's peers: one per NIC cabled to a Switch port with a `bgpAddress`, what the
//! host is told (annotations, the password Secret's name, status), and whether a Server
//! is peered, held for its peers or still peered anywhere. Pure.

use super::*;

/// One peer of a host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    /// The Switch's namespace.
    pub switch_namespace: String,
    /// The Switch.
    pub switch: String,
    /// The SwitchPort.
    pub switch_port: String,
    /// The host's ASN.
    pub node_asn: u32,
    /// The ToR's ASN.
    pub peer_asn: u32,
    /// The ToR's address.
    pub peer_ip: Ipv4Addr,
    /// The host's address.
    pub src_ip: Ipv4Addr,
    /// The password Secret's name (in the claim's namespace).
    pub password_secret: String,
}

/// The name of the Secret holding the password of peer `n` of `server` under `claim`.
pub fn password_secret(claim: &str, server: &str, n: usize) -> String {
    format!("{claim}-bgp-{server}-{n}")
}

/// `server`'s peers as the host of `claim` with ASN `node_asn`: one per NIC cabled to
/// a SwitchPort with a `bgpAddress` on a Switch with valid BGP, in NIC order.
pub fn peers_of(
    server: &Server,
    claim: &str,
    node_asn: u32,
    switches: &[(SwitchId, SwitchBgp)],
) -> Vec<Peer> {
    let mut out = Vec::new();
    for nic in &server.spec.nics {
        let Some(port) = &nic.port else { continue };
        if port.port_kind() != CabledPortKind::SwitchPort {
            continue;
        }
        for (sw, b) in switches {
            if sw.namespace != port.namespace {
                continue;
            }
            let Some(link) = b.links.get(&port.name) else {
                continue;
            };
            out.push(Peer {
                switch_namespace: port.namespace.clone(),
                switch: sw.name.clone(),
                switch_port: port.name.clone(),
                node_asn,
                peer_asn: b.asn,
                peer_ip: link.local,
                src_ip: link.node(),
                password_secret: password_secret(claim, &server.name_any(), out.len()),
            });
        }
    }
    out
}

/// The `patchbay.dev/bgp-peers-{n}-*` annotations of `peers` (the seed's four keys,
/// and where the password is; never the password).
pub fn annotations(peers: &[Peer]) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for (n, p) in peers.iter().enumerate() {
        let k = |what: &str| format!("{ANNOTATION_PREFIX}{n}-{what}");
        out.insert(k("node-asn"), p.node_asn.to_string());
        out.insert(k("peer-asn"), p.peer_asn.to_string());
        out.insert(k("peer-ip"), p.peer_ip.to_string());
        out.insert(k("src-ip"), p.src_ip.to_string());
        out.insert(k("password-secret"), p.password_secret.clone());
    }
    out
}

/// The status form of `peers`, with each session's state from its Switch's status.
pub fn peer_status(peers: &[Peer], switches: &[Arc<Switch>]) -> Vec<BgpPeer> {
    peers
        .iter()
        .map(|p| {
            let state = switches
                .iter()
                .find(|s| {
                    s.name_any() == p.switch
                        && s.namespace().as_deref() == Some(p.switch_namespace.as_str())
                })
                .and_then(|s| s.status.as_ref()?.bgp.as_ref())
                .and_then(|b| {
                    b.neighbors
                        .iter()
                        .find(|n| n.address == p.src_ip.to_string())
                })
                .map(|n| n.state.clone());
            BgpPeer {
                switch: format!("{}/{}", p.switch_namespace, p.switch),
                node_asn: i64::from(p.node_asn),
                peer_asn: i64::from(p.peer_asn),
                peer_ip: p.peer_ip.to_string(),
                src_ip: p.src_ip.to_string(),
                password_secret: p.password_secret.clone(),
                state,
            }
        })
        .collect()
}

/// `established/all` for the printer column; `None` without peers.
pub fn summary(peers: &[BgpPeer]) -> Option<String> {
    (!peers.is_empty()).then(|| {
        let up = peers
            .iter()
            .filter(|p| p.state.as_deref() == Some("Established"))
            .count();
        format!("{up}/{}", peers.len())
    })
}

/// Whether `server`'s neighbours belong on its ToRs now: bound, `Provisioned`, not
/// being deleted (a host held for its neighbours is not allocated again, see
/// [`held_for_peers`], so a `Provisioned` bound host carries its claim's network).
pub fn peering(server: &Server) -> bool {
    server.metadata.deletion_timestamp.is_none()
        && server.spec.claim_ref.is_some()
        && server.status.as_ref().and_then(|s| s.phase) == Some(ServerPhase::Provisioned)
}

/// Whether `server` is held in `Provisioned` for its BGP neighbours (released, its
/// ports still on the last claim's network): not allocated again until it moves on.
pub fn held_for_peers(server: &Server) -> bool {
    server.status.as_ref().is_some_and(|s| {
        s.conditions
            .iter()
            .any(|c| c.type_ == "Held" && c.status == "True" && c.reason == "BgpPeersRemaining")
    })
}

/// Whether a Switch status still lists a neighbour of `server` (its phase may not
/// leave `Provisioned` until none does).
pub fn still_peered(server: &str, switches: &[Arc<Switch>]) -> bool {
    switches.iter().any(|s| {
        s.status
            .as_ref()
            .and_then(|st| st.bgp.as_ref())
            .is_some_and(|b| b.neighbors.iter().any(|n| n.server == server))
    })
}

//! A ToR's speaker: the neighbour each peer becomes, what a pass found in place and
//! which changes are repairs of drift, and the Switch's `status.bgp`. Pure.

use super::*;

/// One neighbour the speaker must have, with who it is for.
#[derive(Debug, Clone)]
pub struct Wanted {
    /// The neighbour (its password a placeholder until it is sent).
    pub neighbor: Neighbor,
    /// The Server.
    pub server: String,
    /// The SwitchPort.
    pub switch_port: String,
    /// The claim's namespace (where the password Secret is).
    pub namespace: String,
    /// The password Secret.
    pub password_secret: String,
}

/// The neighbour of `peer` for host `server` of `claim` (namespace `namespace`)
/// allowed `allowed`, under the Switch's `b`.
pub fn neighbor(
    b: &SwitchBgp,
    peer: &Peer,
    allowed: &Allowed,
    server: &str,
    namespace: &str,
    claim: &str,
) -> Wanted {
    Wanted {
        neighbor: Neighbor {
            address: peer.src_ip,
            remote_asn: peer.node_asn,
            local_address: peer.peer_ip,
            prefixes: allowed.prefixes.clone(),
            max_prefix: b.max_prefix,
            timers: b.timers,
            outbound: b.outbound,
            // A placeholder: the plan compares only whether one is set; the real one
            // is read from the Secret just before it is sent.
            password: Some(SecretString::new("")),
            description: format!("patchbay {namespace}/{claim} {server}"),
        },
        server: server.to_owned(),
        switch_port: peer.switch_port.clone(),
        namespace: namespace.to_owned(),
        password_secret: peer.password_secret.clone(),
    }
}

/// What of `n` the speaker is compared on, as a number: equal for two neighbours
/// the plan would treat alike (the password only as present or not).
pub fn digest(n: &Neighbor) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (
        n.address,
        n.remote_asn,
        n.local_address,
        entries(n),
        n.max_prefix,
        n.timers,
        n.outbound,
        n.password.is_some(),
        &n.description,
    )
        .hash(&mut h);
    h.finish()
}

/// The neighbours patchbay has in place on a speaker after a pass that read
/// `state`: each of `desired` the speaker has as wanted, by address, with its
/// [`digest`].
pub fn established(desired: &[Neighbor], state: &SpeakerState) -> BTreeMap<Ipv4Addr, u64> {
    desired
        .iter()
        .filter(|n| {
            state
                .neighbors
                .get(&n.address)
                .is_some_and(|seen| differences(n, seen).is_empty())
        })
        .map(|n| (n.address, digest(n)))
        .collect()
}

/// Which of a pass's `changes` repair drift, in words (see the module docs), given
/// what patchbay had `established` on the speaker before it.
pub fn repairs(changes: &[Change], established: &BTreeMap<Ipv4Addr, u64>) -> Vec<String> {
    changes
        .iter()
        .filter_map(|c| match c {
            Change::Put { neighbor, .. }
                if established.get(&neighbor.address) == Some(&digest(neighbor)) =>
            {
                Some(format!(
                    "neighbour {} put back as patchbay had it",
                    neighbor.address
                ))
            }
            Change::Put { .. } | Change::Remove { .. } => None,
            Change::Policy { map, remove } if remove.is_empty() => {
                Some(format!("route-map {} written back", map.name()))
            }
            Change::Policy { map, remove } => Some(format!(
                "route-map {}: removed {} patchbay did not write",
                map.name(),
                remove
                    .iter()
                    .map(|(action, seq)| format!("{action} {seq}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
        })
        .collect()
}

/// A Switch's `status.bgp` after a read at `now` that found `neighbors`: the old
/// one while nothing changed and it is younger than [`REFRESH`] and than
/// `read_after` (a rollout waiting on evidence read after that time), else the read
/// with `readAt` = `now`.
pub fn bgp_status(
    old: Option<SwitchBgpStatus>,
    neighbors: Vec<BgpNeighborStatus>,
    now: jiff::Timestamp,
    read_after: Option<jiff::Timestamp>,
) -> SwitchBgpStatus {
    let wanted = |old: &SwitchBgpStatus| {
        super::super::neighbors::asked_for(old.read_at.as_deref(), read_after, now)
    };
    match old {
        Some(old)
            if old.neighbors == neighbors
                && super::super::neighbors::is_fresh(old.read_at.as_deref(), now)
                && !wanted(&old) =>
        {
            old
        }
        _ => SwitchBgpStatus {
            read_at: Some(now.to_string()),
            neighbors,
        },
    }
}

/// What BGP repairs count as in `patchbay_drift_repaired_total{kind}`.
pub const DRIFT_KIND: &str = "BgpSpeaker";

//! What a Switch's status says its ports see, from a read of its neighbour source
//! (`spec.neighbors`): the read turned into status entries (each naming the SwitchPort
//! that manages its device port), whether a read is worth a status write, and how
//! often reads happen. Pure: no client, no device.
//!
//! Writes: a read that finds what the status already says (ignoring `lastSeen`)
//! writes nothing until the status is [`REFRESH`] old, so a steady fabric costs one
//! status write per Switch per five minutes however short the interval; a changed
//! read is written at once. `lastSeen` is therefore "seen at that read or later",
//! at most [`REFRESH`] stale while the neighbour stays.

use std::collections::BTreeMap;
use std::time::Duration;

use patchbay_model::neighbors::{IdSubtype, Neighbors};

use super::status::{Truth, set_condition};
use crate::api::{LldpNeighborStatus, NeighborsSpec, PortNeighborsStatus, SwitchStatus};

/// Seconds between reads when `spec.neighbors.intervalSeconds` is not given.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(30);

/// How old a status may grow before a read that changed nothing rewrites it.
pub const REFRESH: Duration = Duration::from_secs(300);

/// Most device ports listed in `status.neighbors`: with 4 neighbours and 16 MACs
/// per port at most, this keeps a Switch's status well under the API server's
/// object size limit (~1.5 MB).
pub const MAX_PORTS: usize = 512;

/// Longest text kept of a field a neighbour sends (system name, port description,
/// ids): what the neighbour chooses cannot grow the status.
pub const MAX_TEXT: usize = 128;

/// The condition a Switch with `spec.neighbors` carries.
pub const CONDITION: &str = "NeighborsRead";

/// Seconds a neighbour that went quiet still shows when `spec.neighbors.ageOutSeconds`
/// is not given: the usual MAC aging time (lldpd's LLDP TTL is 120 s).
pub const DEFAULT_AGE_OUT: i64 = 300;

/// How long a neighbour that went quiet still shows in `spec`'s reads (seconds).
pub fn age_out(spec: &NeighborsSpec) -> i64 {
    spec.age_out_seconds
        .filter(|s| *s > 0)
        .unwrap_or(DEFAULT_AGE_OUT)
}

/// How often `spec` asks for reads.
pub fn interval(spec: &NeighborsSpec) -> Duration {
    spec.interval_seconds
        .and_then(|s| u64::try_from(s).ok())
        .filter(|s| *s > 0)
        .map_or(DEFAULT_INTERVAL, Duration::from_secs)
}

fn subtype_word(s: IdSubtype) -> String {
    match s {
        IdSubtype::Mac => "mac",
        IdSubtype::InterfaceName => "interfaceName",
        IdSubtype::InterfaceAlias => "interfaceAlias",
        IdSubtype::NetworkAddress => "networkAddress",
        IdSubtype::Local => "local",
        IdSubtype::Other => "other",
    }
    .to_owned()
}

fn clip(text: &str) -> String {
    text.chars()
        .filter(|c| !c.is_control())
        .take(MAX_TEXT)
        .collect()
}

/// The status entries of `read`: every port that sees something, with the
/// SwitchPort that manages it (`managed`: device port → SwitchPort name), each
/// neighbour last seen `now`.
pub fn entries(
    read: &Neighbors,
    managed: &BTreeMap<String, String>,
    now: &str,
) -> (Vec<PortNeighborsStatus>, bool) {
    let truncated = read.ports.len() > MAX_PORTS;
    let ports = read
        .ports
        .iter()
        .take(MAX_PORTS)
        .map(|p| PortNeighborsStatus {
            port: p.port.clone(),
            switch_port: managed.get(&p.port).cloned(),
            lldp: p
                .lldp
                .iter()
                .map(|n| LldpNeighborStatus {
                    chassis_id: clip(&n.chassis_id),
                    chassis_id_subtype: subtype_word(n.chassis_id_subtype),
                    port_id: clip(&n.port_id),
                    port_id_subtype: subtype_word(n.port_id_subtype),
                    port_description: n.port_description.as_deref().map(clip),
                    system_name: n.system_name.as_deref().map(clip),
                    management_address: n.management_address.as_deref().map(clip),
                    last_seen: now.to_owned(),
                })
                .collect(),
            lldp_truncated: p.lldp_truncated,
            macs: p.macs.clone(),
            macs_truncated: p.macs_truncated,
            stale_macs: p.stale_macs.clone(),
        })
        .collect();
    (ports, truncated)
}

/// `ports` with every `lastSeen` blanked: what two reads are compared by.
fn without_times(ports: &[PortNeighborsStatus]) -> Vec<PortNeighborsStatus> {
    let mut ports = ports.to_vec();
    for n in ports.iter_mut().flat_map(|p| p.lldp.iter_mut()) {
        n.last_seen.clear();
    }
    ports
}

/// Whether a status read at `read_at` is younger than [`REFRESH`] at `now`: a read
/// that changed nothing need not write it again yet.
pub fn is_fresh(read_at: Option<&str>, now: jiff::Timestamp) -> bool {
    read_at
        .and_then(|t| t.parse::<jiff::Timestamp>().ok())
        .is_some_and(|at| now.duration_since(at).unsigned_abs() < REFRESH)
}

/// Whether a rollout asks for a read at `now` that a status read at `read_at` is
/// not: it asks for one at or after `read_after` (a time now past), and the status
/// was read before it. Such a read is written even when nothing changed, so that
/// its time is the rollout's evidence.
pub fn asked_for(
    read_at: Option<&str>,
    read_after: Option<jiff::Timestamp>,
    now: jiff::Timestamp,
) -> bool {
    read_after.is_some_and(|after| {
        after <= now
            && read_at
                .and_then(|t| t.parse::<jiff::Timestamp>().ok())
                .is_none_or(|at| at < after)
    })
}

/// Takes a successful read at `now` into `status`: the entries, the chassis id and
/// `neighborsReadAt` when they changed, the status is [`REFRESH`] old or a rollout
/// asks for a read after `read_after` ([`asked_for`]) (else the status keeps what it
/// says), and `NeighborsRead=True`.
pub fn record(
    status: &mut SwitchStatus,
    read: &Neighbors,
    managed: &BTreeMap<String, String>,
    generation: Option<i64>,
    now: jiff::Timestamp,
    read_after: Option<jiff::Timestamp>,
) {
    let stamp = now.to_string();
    let (ports, truncated) = entries(read, managed, &stamp);
    let chassis = read.chassis_id.as_deref().map(clip);
    let same = without_times(&ports) == without_times(&status.neighbors)
        && truncated == status.neighbors_truncated
        && chassis == status.chassis_id;
    let fresh = is_fresh(status.neighbors_read_at.as_deref(), now)
        && !asked_for(status.neighbors_read_at.as_deref(), read_after, now);
    if !(same && fresh) {
        status.neighbors = ports;
        status.neighbors_truncated = truncated;
        status.chassis_id = chassis;
        status.neighbors_read_at = Some(stamp);
    }
    let seen = status
        .neighbors
        .iter()
        .filter(|p| !p.lldp.is_empty())
        .count();
    let learned = status
        .neighbors
        .iter()
        .filter(|p| !p.macs.is_empty())
        .count();
    set_condition(
        &mut status.conditions,
        CONDITION,
        Truth::True,
        "Read",
        format!("{seen} ports see an LLDP neighbour, {learned} have learned MAC addresses"),
        generation,
        now,
    );
}

/// Takes a failed read into `status`: `NeighborsRead=False` with why (`reason`, a
/// failure category, and `message`, which carries no credential); what the ports
/// saw at the last good read stays, with its `lastSeen`.
pub fn failed(
    status: &mut SwitchStatus,
    reason: &str,
    message: String,
    generation: Option<i64>,
    now: jiff::Timestamp,
) {
    set_condition(
        &mut status.conditions,
        CONDITION,
        Truth::False,
        reason,
        message,
        generation,
        now,
    );
}

/// Clears everything a neighbour source wrote (the Switch no longer names one).
pub fn forget(status: &mut SwitchStatus) {
    status.neighbors.clear();
    status.neighbors_truncated = false;
    status.chassis_id = None;
    status.neighbors_read_at = None;
    status.conditions.retain(|c| c.type_ != CONDITION);
}

#[cfg(test)]
mod tests {
    use super::*;
    use patchbay_model::neighbors::LldpNeighbor;

    fn read(hosts: &[(&str, &str)]) -> Neighbors {
        Neighbors::gather(
            Some("3a:d3:90:41:d3:d4".into()),
            hosts.iter().map(|(port, mac)| {
                (
                    (*port).to_owned(),
                    LldpNeighbor {
                        chassis_id: (*mac).to_owned(),
                        chassis_id_subtype: IdSubtype::Mac,
                        port_id: "eth0".into(),
                        port_id_subtype: IdSubtype::InterfaceName,
                        port_description: Some("eth0".into()),
                        system_name: Some(format!("host\u{7}{}", "x".repeat(400))),
                        management_address: None,
                    },
                )
            }),
            [],
        )
    }

    fn t(s: i64) -> jiff::Timestamp {
        jiff::Timestamp::from_second(1_800_000_000 + s).unwrap()
    }

    #[test]
    fn a_read_names_the_switch_port_and_clips_what_the_neighbour_chose() {
        let managed = BTreeMap::from([("swp1".to_owned(), "rack1-a".to_owned())]);
        let mut s = SwitchStatus::default();
        record(
            &mut s,
            &read(&[("swp1", "52:54:00:0a:00:01"), ("swp9", "52:54:00:0b:00:01")]),
            &managed,
            Some(3),
            t(0),
            None,
        );
        assert_eq!(s.chassis_id.as_deref(), Some("3a:d3:90:41:d3:d4"));
        assert_eq!(s.neighbors.len(), 2);
        assert_eq!(s.neighbors[0].switch_port.as_deref(), Some("rack1-a"));
        assert_eq!(
            s.neighbors[1].switch_port, None,
            "an unmanaged port is listed too"
        );
        let name = s.neighbors[0].lldp[0].system_name.clone().unwrap();
        assert_eq!(name.chars().count(), MAX_TEXT);
        assert!(
            name.starts_with("hostx"),
            "control characters dropped: {name:?}"
        );
        assert_eq!(s.neighbors[0].lldp[0].chassis_id_subtype, "mac");
        let c = &s.conditions[0];
        assert_eq!(
            (c.type_.as_str(), c.status.as_str(), c.reason.as_str()),
            (CONDITION, "True", "Read")
        );
        assert_eq!(
            c.message,
            "2 ports see an LLDP neighbour, 0 have learned MAC addresses"
        );
    }

    #[test]
    fn a_steady_fabric_is_rewritten_only_every_refresh_and_a_change_at_once() {
        let managed = BTreeMap::new();
        let same = read(&[("swp1", "52:54:00:0a:00:01")]);
        let mut s = SwitchStatus::default();
        record(&mut s, &same, &managed, None, t(0), None);
        let first = s.clone();
        record(&mut s, &same, &managed, None, t(30), None);
        assert_eq!(s, first, "nothing to write 30 s later");
        record(&mut s, &same, &managed, None, t(300), None);
        assert_ne!(s, first, "refreshed after REFRESH");
        assert_eq!(s.neighbors[0].lldp[0].last_seen, t(300).to_string());
        let refreshed = s.clone();
        let moved = read(&[("swp2", "52:54:00:0a:00:01")]);
        record(&mut s, &moved, &managed, None, t(330), None);
        assert_ne!(s, refreshed, "a moved cable is written at the next read");
        assert_eq!(s.neighbors[0].port, "swp2");
        assert_eq!(
            s.neighbors_read_at.as_deref(),
            Some(t(330).to_string().as_str())
        );
        // A rollout asking for a read after t(340): the read at t(345) is written
        // though nothing changed; the next one is not (the status is after it).
        let asked = s.clone();
        record(&mut s, &moved, &managed, None, t(335), Some(t(340)));
        assert_eq!(s, asked, "a read before the asked time is not evidence");
        record(&mut s, &moved, &managed, None, t(345), Some(t(340)));
        assert_eq!(
            s.neighbors_read_at.as_deref(),
            Some(t(345).to_string().as_str())
        );
        let evidence = s.clone();
        record(&mut s, &moved, &managed, None, t(350), Some(t(340)));
        assert_eq!(s, evidence, "asked for once");
    }

    #[test]
    fn a_failed_read_keeps_what_was_seen_and_says_why() {
        let mut s = SwitchStatus::default();
        record(
            &mut s,
            &read(&[("swp1", "52:54:00:0a:00:01")]),
            &BTreeMap::new(),
            None,
            t(0),
            None,
        );
        failed(
            &mut s,
            "DeviceUnreachable",
            "cannot reach the device at 10.0.0.1:22: refused".into(),
            None,
            t(30),
        );
        assert_eq!(s.neighbors.len(), 1);
        assert_eq!(s.neighbors[0].lldp[0].last_seen, t(0).to_string());
        assert_eq!(s.conditions[0].status, "False");
        assert_eq!(s.conditions[0].reason, "DeviceUnreachable");
        forget(&mut s);
        assert_eq!(s, SwitchStatus::default());
    }

    #[test]
    fn the_interval_defaults_and_a_bounded_port_list() {
        let spec = |s| NeighborsSpec {
            providers: vec![crate::api::ProviderRef {
                kind: None,
                name: "lldp".into(),
            }],
            parking_configuration: None,
            interval_seconds: s,
            age_out_seconds: s,
        };
        assert_eq!(age_out(&spec(None)), DEFAULT_AGE_OUT);
        assert_eq!(age_out(&spec(Some(15))), 15);
        assert_eq!(interval(&spec(None)), DEFAULT_INTERVAL);
        assert_eq!(interval(&spec(Some(10))), Duration::from_secs(10));
        assert_eq!(interval(&spec(Some(0))), DEFAULT_INTERVAL);
        let many: Vec<(String, String)> = (0..MAX_PORTS + 3)
            .map(|i| (format!("swp{i:04}"), "02:00:00:00:00:01".to_owned()))
            .collect();
        let n = Neighbors::gather(None, [], many);
        let (ports, truncated) = entries(&n, &BTreeMap::new(), "now");
        assert_eq!(ports.len(), MAX_PORTS);
        assert!(truncated);
    }
}

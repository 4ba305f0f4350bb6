//! Which of a plan's port changes an edit's rollout moves, and in which waves
//! (`patchbay plan`). Pure; table-tested.
//!
//! A SwitchPort that names the same SwitchPortConfiguration before and after (a
//! SmartNicPort the same SmartNicConfiguration), whose revision (its spec without
//! `spec.rollout`) the manifests change, moves in that configuration's rollout: in waves under its `spec.rollout` over the operator's
//! defaults ([`crate::decide::rollout::rollout_of`], a tenant's held to the infra
//! team's limits), in the order the rollout controller takes them (port key order,
//! the switches in turn; a SmartNicPort's "switch" is its SmartNIC, its
//! ProviderSwitch). A SwitchPort carrying the same configuration before and after
//! whose Switch port entry the manifests change moves in its Switch's rollout, under
//! the Switch's `spec.rollout`. Any other change (a port newly linked, one moved to
//! another configuration) reaches its device at once. The waves are planned over the
//! ports the edit changes; the controller plans them over every port carrying the
//! configuration, so a port whose outcome the edit leaves as it was (refused before
//! and after) is in its waves too.

use std::collections::BTreeMap;

use super::{Fleet, PortChange, PortKind};
use crate::api::RolloutSpec;
use crate::decide::rollout::{Defaults, Target, next_wave, rollout_of};

/// One configuration's rollout, as a plan shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedRollout {
    /// Its kind: `SwitchPortConfiguration`, `SmartNicConfiguration` or `Switch` (an
    /// edit of its port entries, moving the ports that carry a configuration whose
    /// entry it changes).
    pub kind: &'static str,
    /// The configuration (or Switch), `namespace/name`.
    pub configuration: String,
    /// Its waves, each the ports (`namespace/name`) it moves, the canary first.
    pub waves: Vec<Vec<String>>,
    /// The switches those ports are on (of a SmartNicConfiguration: SmartNICs).
    pub switches: usize,
    /// What its policy asks that the operator refuses (field, why): nothing moves.
    pub refused: Vec<(String, String)>,
}

/// The rollouts the change from `before` to `after` starts, of the ports in
/// `changes`, with the operator's `defaults` and infra namespace (`infra`, with
/// tenancy on: a configuration elsewhere is a tenant's).
pub fn rollouts(
    before: &Fleet,
    after: &Fleet,
    changes: &[PortChange],
    defaults: &Defaults,
    infra: Option<&str>,
) -> Vec<PlannedRollout> {
    let mut moved: BTreeMap<(PortKind, &str), Vec<(String, String)>> = BTreeMap::new();
    // A Switch's port-entry edits: `namespace/switch` → the ports they move.
    let mut entries: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
    for c in changes {
        let (Some(was), Some(now)) = (&c.configuration.0, &c.configuration.1) else {
            continue;
        };
        if was != now {
            continue;
        }
        if c.kind == PortKind::SwitchPort {
            let entry = |fleet: &Fleet| {
                fleet
                    .switches
                    .iter()
                    .find(|s| {
                        s.metadata.namespace.as_deref() == Some(c.namespace.as_str())
                            && s.metadata.name.as_deref() == Some(c.switch.as_str())
                    })
                    .and_then(|s| s.spec.ports.get(&c.port))
                    .map(|d| d.port_part())
            };
            if let (Some(a), Some(b)) = (entry(before), entry(after))
                && a != b
            {
                let switch = format!("{}/{}", c.namespace, c.switch);
                let port = format!("{}/{}", c.namespace, c.port);
                entries
                    .entry(switch.clone())
                    .or_default()
                    .push((port, switch));
            }
        }
        let edited = match (revision(before, c.kind, was), revision(after, c.kind, now)) {
            (Some(a), Some(b)) => a.hash != b.hash,
            _ => false,
        };
        if edited {
            moved.entry((c.kind, now.as_str())).or_default().push((
                format!("{}/{}", c.namespace, c.port),
                format!("{}/{}", c.namespace, c.switch),
            ));
        }
    }
    moved
        .into_iter()
        .filter_map(|((kind, key), mut ports)| {
            let old = revision(before, kind, key)?;
            let new = revision(after, kind, key)?;
            ports.sort();
            let switches = ports
                .iter()
                .map(|(_, s)| s.as_str())
                .collect::<std::collections::BTreeSet<_>>()
                .len();
            let ns = key.split('/').next().unwrap_or_default();
            let tenant = infra.is_some_and(|i| i != ns);
            let rollout = match rollout_of(new.policy, defaults, tenant, ports.len()) {
                Ok(r) => r,
                Err(refused) => {
                    return Some(PlannedRollout {
                        kind: new.kind,
                        configuration: key.to_owned(),
                        waves: Vec::new(),
                        switches,
                        refused,
                    });
                }
            };
            let whole = old.aggregated || new.aggregated;
            Some(PlannedRollout {
                kind: new.kind,
                configuration: key.to_owned(),
                waves: in_waves(&ports, &rollout.policy, whole),
                switches,
                refused: Vec::new(),
            })
        })
        .chain(entries.into_iter().map(|(switch, mut ports)| {
            ports.sort();
            let (ns, name) = switch.split_once('/').unwrap_or_default();
            let policy = after
                .switches
                .iter()
                .find(|s| {
                    s.metadata.namespace.as_deref() == Some(ns)
                        && s.metadata.name.as_deref() == Some(name)
                })
                .and_then(|s| s.spec.rollout.as_ref());
            // A link-aggregation group's members change together.
            let whole = changes.iter().any(|c| {
                c.kind == PortKind::SwitchPort
                    && format!("{}/{}", c.namespace, c.switch) == switch
                    && c.configuration.1.as_deref().is_some_and(|k| {
                        revision(after, PortKind::SwitchPort, k).is_some_and(|r| r.aggregated)
                    })
            });
            // A Switch is the infra team's: no tenant limits.
            let (waves, refused) = match rollout_of(policy, defaults, false, ports.len()) {
                Ok(r) => (in_waves(&ports, &r.policy, whole), Vec::new()),
                Err(refused) => (Vec::new(), refused),
            };
            PlannedRollout {
                kind: "Switch",
                configuration: switch,
                waves,
                switches: 1,
                refused,
            }
        }))
        .collect()
}

/// What a plan reads of a configuration's revision.
struct Revision<'f> {
    kind: &'static str,
    hash: String,
    policy: Option<&'f RolloutSpec>,
    /// A link-aggregation group's (whose waves take whole switches).
    aggregated: bool,
}

/// The configuration `key` (`namespace/name`) of the kind ports of `kind` carry,
/// in `fleet`.
fn revision<'f>(fleet: &'f Fleet, kind: PortKind, key: &str) -> Option<Revision<'f>> {
    let named = |m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
        let (ns, name) = key.split_once('/').unwrap_or_default();
        m.namespace.as_deref().unwrap_or_default() == ns
            && m.name.as_deref().unwrap_or_default() == name
    };
    match kind {
        PortKind::SwitchPort => fleet
            .configurations
            .iter()
            .find(|c| named(&c.metadata))
            .map(|c| Revision {
                kind: "SwitchPortConfiguration",
                hash: c.spec.content_hash(),
                policy: c.spec.rollout.as_ref(),
                aggregated: c.spec.link_aggregation.is_some(),
            }),
        PortKind::SmartNicPort => fleet
            .smartnic_configurations
            .iter()
            .find(|c| named(&c.metadata))
            .map(|c| Revision {
                kind: "SmartNicConfiguration",
                hash: c.spec.content_hash(),
                policy: c.spec.rollout.as_ref(),
                aggregated: false,
            }),
    }
}

/// `ports` ((port, switch), in key order) in the waves the controller takes them in.
fn in_waves(
    ports: &[(String, String)],
    policy: &crate::decide::rollout::Policy,
    whole_switches: bool,
) -> Vec<Vec<String>> {
    let mut remaining: Vec<usize> = (0..ports.len()).collect();
    let mut waves = Vec::new();
    while !remaining.is_empty() {
        let targets: Vec<Target<'_>> = remaining
            .iter()
            .map(|i| Target {
                port: &ports[*i].0,
                switch: &ports[*i].1,
            })
            .collect();
        let picked = next_wave(
            &targets,
            ports.len(),
            policy,
            waves.is_empty(),
            whole_switches,
        );
        if picked.is_empty() {
            break;
        }
        let wave: Vec<usize> = picked.iter().map(|j| remaining[*j]).collect();
        remaining.retain(|i| !wave.contains(i));
        waves.push(wave.iter().map(|i| ports[*i].0.clone()).collect());
    }
    waves
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decide::plan::{Carry, plan};
    use serde_json::json;

    fn obj<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> T {
        serde_json::from_value(v).unwrap()
    }

    /// Two switches of three ports each, every port carrying `web` (namespace
    /// `ns`), ProviderSwitches without a backend patchbay checks here.
    fn fleet(ns: &str, web: serde_json::Value) -> Fleet {
        let mut f = Fleet::default();
        for sw in ["tor1", "tor2"] {
            f.providers.push(obj(json!({
                "metadata": {"name": sw, "namespace": ns},
                "spec": {"backend": "ssh", "os": "ios", "address": "192.0.2.1"}})));
            f.switches.push(obj(json!({
                "metadata": {"name": sw, "namespace": ns},
                "spec": {"provider": {"name": sw}, "ports": {
                    format!("{sw}-p1"): {"name": "Gi1/0/1"},
                    format!("{sw}-p2"): {"name": "Gi1/0/2"},
                    format!("{sw}-p3"): {"name": "Gi1/0/3"}}}})));
            for p in 1..=3 {
                f.ports.push(obj(json!({
                    "metadata": {"name": format!("{sw}-p{p}"), "namespace": ns,
                                 "labels": {"patchbay.dev/switch": sw}},
                    "spec": {"configuration": {"name": "web"}}})));
            }
        }
        f.configurations.push(obj(json!({
            "metadata": {"name": "web", "namespace": ns}, "spec": web})));
        f
    }

    fn rules() -> crate::decide::plan::Rules<'static> {
        crate::decide::plan::Rules {
            capabilities: &|_| Some(patchbay_model::Capabilities::all()),
            tenancy: None,
        }
    }

    #[test]
    fn an_edit_is_planned_in_the_waves_its_policy_gives_and_a_rollout_edit_moves_nothing() {
        let before = fleet("infra", json!({"untaggedVLAN": 10}));
        let after = fleet(
            "infra",
            json!({"untaggedVLAN": 11, "rollout": {"canary": {"ports": 1}, "maxUnavailable": 2,
                   "maxUnavailablePerSwitch": 1}}),
        );
        let changes = plan(&before, &after, rules());
        assert_eq!(changes.len(), 6);
        assert!(changes.iter().all(|c| matches!(c.after, Carry::Set(_))));
        let got = rollouts(&before, &after, &changes, &Defaults::default(), None);
        let waves: Vec<Vec<&str>> = got[0]
            .waves
            .iter()
            .map(|w| w.iter().map(String::as_str).collect())
            .collect();
        assert_eq!(
            waves,
            [
                vec!["infra/tor1-p1"],
                vec!["infra/tor1-p2", "infra/tor2-p1"],
                vec!["infra/tor1-p3", "infra/tor2-p2"],
                vec!["infra/tor2-p3"],
            ]
        );
        assert_eq!(
            (got[0].configuration.as_str(), got[0].switches),
            ("infra/web", 2)
        );

        // Only the policy edited: the revision is the same, no rollout, no port.
        let policy_only = fleet(
            "infra",
            json!({"untaggedVLAN": 10, "rollout": {"maxUnavailable": 1}}),
        );
        let changes = plan(&before, &policy_only, rules());
        assert!(changes.is_empty());
        assert!(rollouts(&before, &policy_only, &changes, &Defaults::default(), None).is_empty());
    }

    #[test]
    fn a_tenant_policy_above_the_limits_is_shown_refused() {
        let before = fleet("team", json!({"untaggedVLAN": 10}));
        let after = fleet(
            "team",
            json!({"untaggedVLAN": 11, "rollout": {"maxUnavailable": "100%"}}),
        );
        let changes = plan(&before, &after, rules());
        let defaults = Defaults {
            limits: Some(crate::decide::rollout::Limits {
                max_unavailable: crate::decide::rollout::Amount::Percent(25),
                max_unavailable_per_switch: crate::decide::rollout::Amount::Percent(50),
            }),
            ..Defaults::default()
        };
        let got = rollouts(&before, &after, &changes, &defaults, Some("infra"));
        assert!(got[0].waves.is_empty());
        assert_eq!(got[0].refused[0].0, "spec.rollout.maxUnavailable");
        // The infra team's own configuration is not held to them.
        let before = fleet("infra", json!({"untaggedVLAN": 10}));
        let after = fleet(
            "infra",
            json!({"untaggedVLAN": 11, "rollout": {"maxUnavailable": "100%"}}),
        );
        let changes = plan(&before, &after, rules());
        let got = rollouts(&before, &after, &changes, &defaults, Some("infra"));
        assert!(got[0].refused.is_empty());
        assert_eq!(got[0].waves.len(), 2, "the canary, then the rest: {got:?}");
    }

    #[test]
    fn a_smartnic_configuration_edit_is_planned_in_waves_over_its_smartnics() {
        let fleet = |spec: serde_json::Value| {
            let mut f = Fleet::default();
            for nic in ["nic1", "nic2"] {
                f.providers.push(obj(json!({
                    "metadata": {"name": nic, "namespace": "infra"},
                    "spec": {"backend": "ovsdb", "os": "ovs", "address": "192.0.2.1",
                             "options": {"bridge": "br0"}}})));
                for p in 1..=2 {
                    f.smartnic_ports.push(obj(json!({
                        "metadata": {"name": format!("{nic}-p{p}"), "namespace": "infra"},
                        "spec": {"provider": {"name": nic}, "portName": format!("p{p}"),
                                 "configuration": {"name": "web"}}})));
                }
            }
            f.smartnic_configurations.push(obj(json!({
                "metadata": {"name": "web", "namespace": "infra"}, "spec": spec})));
            f
        };
        let before = fleet(json!({"untaggedVLAN": 10}));
        let after = fleet(
            json!({"untaggedVLAN": 11, "rollout": {"canary": {"ports": 1},
                                 "maxUnavailable": 2, "maxUnavailablePerSwitch": 1}}),
        );
        let changes = plan(&before, &after, rules());
        assert_eq!(changes.len(), 4, "{changes:?}");
        let got = rollouts(&before, &after, &changes, &Defaults::default(), None);
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(
            (got[0].kind, got[0].configuration.as_str(), got[0].switches),
            ("SmartNicConfiguration", "infra/web", 2)
        );
        assert_eq!(
            got[0].waves,
            [
                vec!["infra/nic1-p1".to_owned()],
                vec!["infra/nic1-p2".to_owned(), "infra/nic2-p1".to_owned()],
                vec!["infra/nic2-p2".to_owned()],
            ]
        );
    }

    #[test]
    fn a_switch_entry_edit_is_planned_in_the_switchs_waves() {
        let before = fleet("infra", json!({"untaggedVLAN": 10}));
        let mut after = before.clone();
        // tor1 re-cabled (every entry renamed) under its own policy; tor2 only
        // given a policy (no entry edited: no rollout, no port).
        let tor1 = &mut after.switches[0];
        tor1.spec.rollout = Some(obj(json!({"canary": {"ports": 1}, "maxUnavailable": 1})));
        for (i, entry) in tor1.spec.ports.values_mut().enumerate() {
            entry.name = format!("Gi1/0/{}", i + 11);
        }
        after.switches[1].spec.rollout = Some(obj(json!({"maxUnavailable": 3})));
        let changes = plan(&before, &after, rules());
        assert_eq!(changes.len(), 3, "{changes:?}");
        let got = rollouts(&before, &after, &changes, &Defaults::default(), None);
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(
            (got[0].kind, got[0].configuration.as_str(), got[0].switches),
            ("Switch", "infra/tor1", 1)
        );
        assert_eq!(
            got[0].waves,
            [
                vec!["infra/tor1-p1".to_owned()],
                vec!["infra/tor1-p2".to_owned()],
                vec!["infra/tor1-p3".to_owned()],
            ]
        );
        // A malformed policy: shown refused, nothing moves.
        after.switches[0].spec.rollout = Some(obj(json!({"maxUnavailable": "0%"})));
        let got = rollouts(&before, &after, &changes, &Defaults::default(), None);
        assert!(got[0].waves.is_empty());
        assert_eq!(got[0].refused[0].0, "spec.rollout.maxUnavailable");
    }
}

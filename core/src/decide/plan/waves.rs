//! Which of a plan's port changes an edit's rollout moves, and in which waves
//! (`patchbay plan`). Pure; table-tested.
//!
//! A SwitchPort that names the same SwitchPortConfiguration before and after, whose
//! revision (its spec without `spec.rollout`) the manifests change, moves in that
//! configuration's rollout: in waves under its `spec.rollout` over the operator's
//! defaults ([`crate::decide::rollout::rollout_of`], a tenant's held to the infra
//! team's limits), in the order the rollout controller takes them (port key order,
//! the switches in turn). Any other change (a port newly linked, one moved to
//! another configuration) reaches its device at once. The waves are planned over the
//! ports the edit changes; the controller plans them over every port carrying the
//! configuration, so a port whose outcome the edit leaves as it was (refused before
//! and after) is in its waves too.

use std::collections::BTreeMap;

use super::{Fleet, PortChange, PortKind};
use crate::decide::rollout::{Defaults, Target, next_wave, rollout_of};

/// One configuration's rollout, as a plan shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedRollout {
    /// The configuration, `namespace/name`.
    pub configuration: String,
    /// Its waves, each the ports (`namespace/name`) it moves, the canary first.
    pub waves: Vec<Vec<String>>,
    /// The switches those ports are on.
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
    fn revision<'f>(
        fleet: &'f Fleet,
        key: &str,
    ) -> Option<(String, &'f crate::api::SwitchPortConfiguration)> {
        fleet
            .configurations
            .iter()
            .find(|c| {
                format!(
                    "{}/{}",
                    c.metadata.namespace.as_deref().unwrap_or_default(),
                    c.metadata.name.as_deref().unwrap_or_default()
                ) == key
            })
            .map(|c| (c.spec.content_hash(), c))
    }
    let mut moved: BTreeMap<&str, Vec<(String, String)>> = BTreeMap::new();
    for c in changes.iter().filter(|c| c.kind == PortKind::SwitchPort) {
        let (Some(was), Some(now)) = (&c.configuration.0, &c.configuration.1) else {
            continue;
        };
        if was != now {
            continue;
        }
        let edited = match (revision(before, was), revision(after, now)) {
            (Some((a, _)), Some((b, _))) => a != b,
            _ => false,
        };
        if edited {
            moved.entry(now.as_str()).or_default().push((
                format!("{}/{}", c.namespace, c.port),
                format!("{}/{}", c.namespace, c.switch),
            ));
        }
    }
    moved
        .into_iter()
        .filter_map(|(key, mut ports)| {
            let (_, old) = revision(before, key)?;
            let (_, new) = revision(after, key)?;
            ports.sort();
            let switches = ports
                .iter()
                .map(|(_, s)| s.as_str())
                .collect::<std::collections::BTreeSet<_>>()
                .len();
            let ns = key.split('/').next().unwrap_or_default();
            let tenant = infra.is_some_and(|i| i != ns);
            let rollout = match rollout_of(new.spec.rollout.as_ref(), defaults, tenant, ports.len())
            {
                Ok(r) => r,
                Err(refused) => {
                    return Some(PlannedRollout {
                        configuration: key.to_owned(),
                        waves: Vec::new(),
                        switches,
                        refused,
                    });
                }
            };
            let whole = old.spec.link_aggregation.is_some() || new.spec.link_aggregation.is_some();
            Some(PlannedRollout {
                configuration: key.to_owned(),
                waves: in_waves(&ports, &rollout.policy, whole),
                switches,
                refused: Vec::new(),
            })
        })
        .collect()
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
}

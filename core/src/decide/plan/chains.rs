//! A SmartNIC chain in the plan: what the SmartNicPort controller writes on the
//! SwitchPort behind a SmartNicPort (its `nextPortRef`), worked out on a fleet
//! before each port is decided. Pure; table-tested with the plan.
//!
//! As the controller does it: a SmartNicPort that applies (its own outcome is a
//! state, not a refusal) and chains (`nextPortRef`, and its SmartNicConfiguration's
//! `nextConfigurationRef`) claims the next SwitchPort ([`claim_next_port`]) and sets
//! its `spec.configuration`; then every other SwitchPort it claimed is released (its
//! configuration cleared). A SmartNicPort that is cleaned (no configuration) or
//! deleted releases every port it claimed. A claim refused (the next port missing,
//! claimed by another SmartNicPort, or carrying somebody else's configuration)
//! refuses the SmartNicPort, and nothing is written. SmartNicPorts are taken in
//! namespace and name order, so of two claiming one port the first wins, here as
//! on a live operator where one of them does.

use std::collections::{BTreeMap, BTreeSet};

use crate::api::keys::CHAINED_FROM_ANNOTATION;
use crate::api::{ConfigurationRef, SwitchPort};
use crate::decide::failure::Failure;

use super::{Fleet, Key, key};

/// What claiming a chain's next SwitchPort comes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NextPortClaim {
    /// It carries the chain's configuration under this SmartNicPort's claim already:
    /// nothing to write.
    Held,
    /// Write the claim (the `patchbay.dev/chained-from` annotation) and the
    /// configuration.
    Claim,
}

/// Whether SmartNicPort `me` (`namespace/name`) may claim `next`, the SwitchPort
/// `port_ns/port_name`, to carry `config`: the SmartNicPort controller's decision,
/// and the plan's.
pub fn claim_next_port(
    next: Option<&SwitchPort>,
    me: &str,
    (port_ns, port_name): (&str, &str),
    config: &ConfigurationRef,
) -> Result<NextPortClaim, Failure> {
    let at = format!("{port_ns}/{port_name}");
    let Some(next) = next else {
        return Err(Failure::NextPortNotFound { port: at });
    };
    let claimed_by = next
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(CHAINED_FROM_ANNOTATION));
    if let Some(other) = claimed_by
        && other != me
    {
        return Err(Failure::NextPortClaimed {
            port: at,
            by: other.clone(),
        });
    }
    let carries = next.spec.configuration.as_ref().map(|r| ConfigurationRef {
        name: r.name.clone(),
        namespace: Some(r.namespace.clone().unwrap_or_else(|| port_ns.to_owned())),
    });
    if claimed_by.is_none()
        && let Some(c) = &carries
        && c != config
    {
        return Err(Failure::NextPortInUse {
            port: at,
            configuration: c.name.clone(),
        });
    }
    if claimed_by.is_some() && carries.as_ref() == Some(config) {
        return Ok(NextPortClaim::Held);
    }
    Ok(NextPortClaim::Claim)
}

/// What the SmartNicPort controller does with a SmartNicPort, as far as its chain
/// goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Step {
    /// It is applied: it claims its next port, if it chains, and releases the rest.
    Applies,
    /// It is cleaned: it releases every port it claimed.
    Cleans,
    /// It is refused: nothing is written, what it claimed stays.
    Holds,
}

/// The next SwitchPort of SmartNicPort `port` of namespace `ns` and the
/// configuration it must carry, when it chains.
fn chain_of(
    ns: &str,
    port: &crate::api::SmartNicPort,
    configurations: &BTreeMap<Key, &crate::api::SmartNicConfiguration>,
) -> Option<(Key, ConfigurationRef)> {
    let next = port.spec.next_port_ref.as_ref()?;
    let r = port.spec.configuration.as_ref()?;
    let cns = r.namespace.clone().unwrap_or_else(|| ns.to_owned());
    let nc = configurations
        .get(&(cns.clone(), r.name.clone()))?
        .spec
        .next_configuration_ref
        .as_ref()?;
    Some((
        (
            next.namespace.clone().unwrap_or_else(|| ns.to_owned()),
            next.name.clone(),
        ),
        ConfigurationRef {
            name: nc.name.clone(),
            namespace: Some(nc.namespace.clone().unwrap_or(cns)),
        },
    ))
}

/// Who claimed SwitchPort `p` (its `patchbay.dev/chained-from`), if anybody.
fn claimant(p: &SwitchPort) -> Option<&String> {
    p.metadata
        .annotations
        .as_ref()?
        .get(CHAINED_FROM_ANNOTATION)
}

/// `fleet` with the SmartNicPorts' chains written on their next SwitchPorts as the
/// controller writes them, and the SmartNicPorts whose claim is refused, with why.
/// `step` says what the controller does with each SmartNicPort (by namespace and
/// name). `None` when no SmartNicPort chains and no SwitchPort is claimed: the
/// fleet as it is.
pub(super) fn project(
    fleet: &Fleet,
    step: impl Fn(&str, &str) -> Step,
) -> Option<(Fleet, BTreeMap<Key, Failure>)> {
    if !fleet.ports.iter().any(|p| claimant(p).is_some())
        && !fleet
            .smartnic_ports
            .iter()
            .any(|p| p.spec.next_port_ref.is_some())
    {
        return None;
    }
    let mut out = fleet.clone();
    let index: BTreeMap<Key, usize> = out
        .ports
        .iter()
        .enumerate()
        .map(|(i, p)| (key(&p.metadata), i))
        .collect();
    let configurations: BTreeMap<Key, &crate::api::SmartNicConfiguration> = fleet
        .smartnic_configurations
        .iter()
        .map(|c| (key(&c.metadata), c))
        .collect();
    let mut smartnics: Vec<&crate::api::SmartNicPort> = fleet.smartnic_ports.iter().collect();
    smartnics.sort_by_key(|p| key(&p.metadata));
    let mut refused = BTreeMap::new();
    // Per SmartNicPort that applies or is cleaned: the one port it keeps claimed.
    let mut keeps: BTreeMap<String, Option<Key>> = BTreeMap::new();
    for sp in smartnics {
        let (ns, name) = key(&sp.metadata);
        let me = format!("{ns}/{name}");
        match step(&ns, &name) {
            Step::Holds => {}
            Step::Cleans => {
                keeps.insert(me, None);
            }
            Step::Applies => {
                let Some((at, config)) = chain_of(&ns, sp, &configurations) else {
                    keeps.insert(me, None);
                    continue;
                };
                let next = index.get(&at).map(|&i| &out.ports[i]);
                match claim_next_port(next, &me, (&at.0, &at.1), &config) {
                    Err(f) => {
                        refused.insert((ns, name), f);
                    }
                    Ok(claim) => {
                        if claim == NextPortClaim::Claim {
                            let p = &mut out.ports[index[&at]];
                            p.metadata
                                .annotations
                                .get_or_insert_with(Default::default)
                                .insert(CHAINED_FROM_ANNOTATION.to_owned(), me.clone());
                            p.spec.configuration = Some(config);
                        }
                        keeps.insert(me, Some(at));
                    }
                }
            }
        }
    }
    // Released: a claimed port its SmartNicPort no longer keeps, or whose
    // SmartNicPort is gone (deleted: cleaned on its way out).
    let present: BTreeSet<String> = fleet
        .smartnic_ports
        .iter()
        .map(|p| {
            let (ns, name) = key(&p.metadata);
            format!("{ns}/{name}")
        })
        .collect();
    for p in &mut out.ports {
        let Some(by) = claimant(p).cloned() else {
            continue;
        };
        let released = match keeps.get(&by) {
            Some(keep) => keep.as_ref() != Some(&key(&p.metadata)),
            None => !present.contains(&by),
        };
        if released {
            p.spec.configuration = None;
        }
    }
    Some((out, refused))
}

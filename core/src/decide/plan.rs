//! What a change does to the fleet's ports before it is applied (`patchbay plan`),
//! and what one port must carry on its device (`port_desired`, the decision the
//! SwitchPort controller acts on: the plan and the operator share it, so a plan
//! refuses exactly what the operator would). Pure; table-tested.
//!
//! A plan compares two fleets, the objects as they are ("before": the live cluster,
//! or nothing) and as they would be with the manifests applied ("after"), port by
//! port: what each SwitchPort carries on its device in each (clean, a device-level
//! port state, or refused with the operator's reason). Only ports whose outcome
//! differs are listed. "Before" is what patchbay last established from the objects
//! before; what the device really holds is a device read (`--read-devices`).
//!
//! What it follows, written down:
//! - a SwitchPort's `spec.configuration`, the SwitchPortConfigurations, the Switch's
//!   port entries (a new entry is a new SwitchPort, carrying nothing; a removed
//!   entry's SwitchPort is deleted, its port cleaned) and the ProviderSwitch's
//!   capabilities;
//! - a Server NIC's MAC where an egress ACL needs it, as the operator looks it up;
//! - with the operator's tenancy settings ([`Rules::tenancy`]), the VLANPools: a port
//!   serving a tenant ([`crate::decide::tenancy::serving_namespace`]: its claim's
//!   namespace) may carry only what the pools grant that namespace, asked through
//!   the same [`crate::decide::tenancy::judge_carried`] as the operator's.
//!
//! - a link-aggregation member's group: checked against the namespace's other
//!   members (one Switch, one configuration, one Server), as the operator checks it.
//!
//! - a SmartNicPort's chain: the SwitchPort behind it (`nextPortRef`) carries what
//!   its SmartNicConfiguration's `nextConfigurationRef` names, claimed and released
//!   as the SmartNicPort controller does it (`chains`).
//!
//! - a configuration's rollout: which changed ports follow an edit in its waves
//!   (`waves`).
//!
//! Not followed, by decision (shown as they are before): a host's phases. A Server,
//! ServerClaim or BareMetalHost edit moves its ports through the host controller,
//! on facts no manifest holds (the provisioning state, the installer's signal, the
//! cabling confirmed on the wire, the BGP session).
//!
//! A switch's batch plans a link-aggregation group's entries from the members that
//! move and those that stay ([`unchanged_members`]).

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::api::server::CabledPortKind;
use crate::api::{
    ConfigurationRef, ProviderSwitch, Server, SmartNicConfiguration, SmartNicConfigurationSpec,
    SmartNicPort, Switch, SwitchPort, SwitchPortConfiguration, SwitchPortConfigurationSpec,
    SwitchPortDefinition, VLANPool,
};
use crate::decide::failure::Failure;
use crate::decide::state_machine::PortTarget;
use crate::decide::tenancy::{
    Carried, Grants, Lookups, Tenancy, TenancyVerdict, is_shared, judge_carried,
    judge_next_reference, serving_namespace, with_pool_names,
};
use crate::decide::validate::{
    LagPeer, PortContext, ValidationErrors, capability_errors, desired_for_port, lag_members,
    smartnic_configuration_to_desired, with_host_mac,
};
use patchbay_model::values::PortName;
use patchbay_model::{Capabilities, Capability, DesiredPort};

mod chains;
pub mod waves;
pub use chains::{NextPortClaim, claim_next_port};

/// What one SwitchPort's device state is decided from.
pub struct PortInputs<'a> {
    /// Its Switch's name.
    pub switch: &'a str,
    /// Its name (the Switch's port key).
    pub port_key: &'a str,
    /// The Switch's entry for it, if the Switch has one.
    pub definition: Option<&'a SwitchPortDefinition>,
    /// The configuration it names, for messages.
    pub wanted: Option<&'a PortTarget>,
    /// That configuration's spec, if it exists.
    pub configuration: Option<&'a SwitchPortConfigurationSpec>,
    /// What the port's device can configure.
    pub capabilities: &'a Capabilities,
    /// The MAC of the Server NIC cabled to it (for egress ACL rules).
    pub host_mac: Option<&'a str>,
    /// For a link-aggregation member: itself and every port carrying a
    /// link-aggregation configuration.
    pub lag: Option<(LagPeer<'a>, Vec<LagPeer<'a>>)>,
    /// The tenancy check of the configuration.
    pub tenancy: &'a TenancyVerdict,
}

/// The configuration (of `kind`) a port names, once it exists and tenancy grants it:
/// the first two checks of both ports' decisions.
fn granted<'s, S>(
    configuration: Option<&'s S>,
    kind: &'static str,
    wanted: Option<&PortTarget>,
    tenancy: &TenancyVerdict,
) -> Result<&'s S, Failure> {
    let Some(spec) = configuration else {
        return Err(Failure::configuration_not_found(kind, wanted));
    };
    if let Some(refused) = &tenancy.refused {
        return Err(Failure::Forbidden(refused.clone()));
    }
    Ok(spec)
}

/// The device-level state a SwitchPort linked to a configuration must reach, or why
/// it must not be sent.
pub fn port_desired(i: &PortInputs<'_>) -> Result<DesiredPort, Failure> {
    let spec = granted(
        i.configuration,
        "SwitchPortConfiguration",
        i.wanted,
        i.tenancy,
    )?;
    let Some(definition) = i.definition else {
        return Err(Failure::PortNotDefined {
            port: i.port_key.to_owned(),
        });
    };
    let desired = desired_for_port(
        spec,
        &PortContext {
            switch: i.switch,
            port_key: i.port_key,
            definition,
            capabilities: Some(i.capabilities),
        },
    )
    .map_err(Failure::InvalidConfiguration)?;
    let mut desired = with_host_mac(
        desired,
        i.host_mac,
        i.capabilities,
        "give the Server NIC cabled to this SwitchPort a `mac`",
    )
    .map_err(Failure::InvalidConfiguration)?;
    if let Some((this, peers)) = &i.lag {
        desired.lag_members = lag_members(this, peers).map_err(Failure::InvalidConfiguration)?;
    }
    with_pool_names(&mut desired, i.tenancy);
    Ok(desired)
}

/// What one SmartNicPort's bridge-port state is decided from.
pub struct SmartNicInputs<'a> {
    /// Its bridge port (`spec.portName`).
    pub device_port: PortName,
    /// The configuration it names, for messages.
    pub wanted: Option<&'a PortTarget>,
    /// That SmartNicConfiguration's spec, if it exists.
    pub configuration: Option<&'a SmartNicConfigurationSpec>,
    /// What its SmartNIC can configure.
    pub capabilities: &'a Capabilities,
    /// `spec.hostMac`, else the MAC of the Server NIC cabled to it.
    pub host_mac: Option<&'a str>,
    /// The tenancy check of the configuration.
    pub tenancy: &'a TenancyVerdict,
}

/// The state a SmartNicPort linked to a configuration must reach on its bridge, or
/// why it must not be sent (the SmartNicPort controller's decision, and the plan's).
pub fn smartnic_desired(i: &SmartNicInputs<'_>) -> Result<DesiredPort, Failure> {
    let spec = granted(
        i.configuration,
        "SmartNicConfiguration",
        i.wanted,
        i.tenancy,
    )?;
    let mut desired = smartnic_configuration_to_desired(spec, i.device_port.clone())
        .and_then(|d| {
            with_host_mac(
                d,
                i.host_mac,
                i.capabilities,
                "set the SmartNicPort's spec.hostMac, or the `mac` of the Server NIC \
                 cabled to it",
            )
        })
        .map_err(Failure::InvalidConfiguration)?;
    let missing = capability_errors(&desired, i.capabilities, "this SmartNIC", |c| {
        matches!(c, Capability::Disable | Capability::Acl)
            .then_some("the ProviderSwitch has no options.openflow")
    });
    if !missing.is_empty() {
        return Err(Failure::InvalidConfiguration(ValidationErrors(missing)));
    }
    with_pool_names(&mut desired, i.tenancy);
    Ok(desired)
}

/// The objects a plan reads, as one side of the comparison.
#[derive(Debug, Clone, Default)]
pub struct Fleet {
    /// ProviderSwitches.
    pub providers: Vec<ProviderSwitch>,
    /// Switches.
    pub switches: Vec<Switch>,
    /// SwitchPorts.
    pub ports: Vec<SwitchPort>,
    /// SwitchPortConfigurations.
    pub configurations: Vec<SwitchPortConfiguration>,
    /// Servers (cluster-scoped): the NIC MACs egress rules need.
    pub servers: Vec<Server>,
    /// SmartNicPorts.
    pub smartnic_ports: Vec<SmartNicPort>,
    /// SmartNicConfigurations.
    pub smartnic_configurations: Vec<SmartNicConfiguration>,
    /// VLANPools (cluster-scoped): what tenants may carry, with tenancy on.
    pub pools: Vec<VLANPool>,
}

fn key(meta: &ObjectMeta) -> (String, String) {
    (
        meta.namespace.clone().unwrap_or_default(),
        meta.name.clone().unwrap_or_default(),
    )
}

/// `base` with each object of `over` replacing the one of its kind, namespace and
/// name (or added); `namespace` fills a namespaced object that names none.
fn overlay<T: Clone>(
    base: &[T],
    over: &[T],
    meta: impl Fn(&T) -> &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    set_namespace: impl Fn(&mut T),
) -> Vec<T> {
    let mut all: BTreeMap<(String, String), T> =
        base.iter().map(|o| (key(meta(o)), o.clone())).collect();
    for o in over {
        let mut o = o.clone();
        set_namespace(&mut o);
        all.insert(key(meta(&o)), o);
    }
    all.into_values().collect()
}

impl Fleet {
    /// This fleet with `manifests` applied (as `kubectl apply` would: each object
    /// replaces the one of its name), a namespaced object without a namespace going
    /// into `namespace`.
    pub fn with(&self, manifests: &Fleet, namespace: &str) -> Fleet {
        fn ns(m: &mut k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta, ns: &str) {
            if m.namespace.as_deref().unwrap_or_default().is_empty() {
                m.namespace = Some(ns.to_owned());
            }
        }
        Fleet {
            providers: overlay(
                &self.providers,
                &manifests.providers,
                |o| &o.metadata,
                |o| ns(&mut o.metadata, namespace),
            ),
            switches: overlay(
                &self.switches,
                &manifests.switches,
                |o| &o.metadata,
                |o| ns(&mut o.metadata, namespace),
            ),
            ports: overlay(
                &self.ports,
                &manifests.ports,
                |o| &o.metadata,
                |o| ns(&mut o.metadata, namespace),
            ),
            configurations: overlay(
                &self.configurations,
                &manifests.configurations,
                |o| &o.metadata,
                |o| ns(&mut o.metadata, namespace),
            ),
            servers: overlay(&self.servers, &manifests.servers, |o| &o.metadata, |_| {}),
            smartnic_ports: overlay(
                &self.smartnic_ports,
                &manifests.smartnic_ports,
                |o| &o.metadata,
                |o| ns(&mut o.metadata, namespace),
            ),
            smartnic_configurations: overlay(
                &self.smartnic_configurations,
                &manifests.smartnic_configurations,
                |o| &o.metadata,
                |o| ns(&mut o.metadata, namespace),
            ),
            pools: overlay(&self.pools, &manifests.pools, |o| &o.metadata, |_| {}),
        }
    }
}

/// What decides a port besides the objects: the rules the operator runs with.
#[derive(Clone, Copy)]
pub struct Rules<'a> {
    /// What a ProviderSwitch's device can configure (`None`: no backend patchbay has).
    pub capabilities: &'a dyn Fn(&ProviderSwitch) -> Option<Capabilities>,
    /// The operator's tenancy settings (`--infra-namespace`, `--parking-vlan`, …);
    /// `None`: tenancy off, no grant checked.
    pub tenancy: Option<&'a Tenancy>,
}

/// What a port carries on its device, as decided.
#[derive(Debug, Clone, PartialEq)]
pub enum Carry {
    /// Nothing: the port's clean definition (no SwitchPort, or no configuration).
    Clean,
    /// This state.
    Set(DesiredPort),
    /// Refused, with the operator's reason (category: message); nothing is sent.
    Refused(String),
}

impl Carry {
    /// `clean`, `set`, `refused`: for tables.
    pub fn word(&self) -> &'static str {
        match self {
            Carry::Clean => "clean",
            Carry::Set(_) => "set",
            Carry::Refused(_) => "refused",
        }
    }
}

/// The kind of a port object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum PortKind {
    /// A SwitchPort (a Switch's port).
    SwitchPort,
    /// A SmartNicPort (a bridge port of a SmartNIC's Open vSwitch).
    SmartNicPort,
}

/// One port a change touches.
#[derive(Debug, Clone)]
pub struct PortChange {
    /// SwitchPort or SmartNicPort.
    pub kind: PortKind,
    /// The SwitchPort's namespace and name.
    pub namespace: String,
    /// Its name.
    pub port: String,
    /// Its Switch; for a SmartNicPort, its ProviderSwitch.
    pub switch: String,
    /// The device port (the Switch's entry's `name`), when known.
    pub device_port: Option<String>,
    /// The ProviderSwitch its Switch configures through.
    pub provider: Option<ProviderSwitch>,
    /// The host driving it (its `patchbay.dev/host` mark), if any.
    pub host: Option<String>,
    /// The claim holding that host (`namespace/name`, a Server's `status.claim`),
    /// after the change, else before.
    pub claim: Option<String>,
    /// The configuration it names, before and after (`namespace/name`).
    pub configuration: (Option<String>, Option<String>),
    /// What it carries before.
    pub before: Carry,
    /// What it carries after.
    pub after: Carry,
}

type Key = (String, String);

fn index<T>(objects: &[T], meta: impl Fn(&T) -> &ObjectMeta) -> BTreeMap<Key, &T> {
    objects.iter().map(|o| (key(meta(o)), o)).collect()
}

/// One side of the comparison, indexed by namespace and name.
struct Side<'a> {
    switches: BTreeMap<Key, &'a Switch>,
    providers: BTreeMap<Key, &'a ProviderSwitch>,
    ports: BTreeMap<Key, &'a SwitchPort>,
    configurations: BTreeMap<Key, &'a SwitchPortConfiguration>,
    smartnic_ports: BTreeMap<Key, &'a SmartNicPort>,
    smartnic_configurations: BTreeMap<Key, &'a SmartNicConfiguration>,
    /// The MAC of the Server NIC cabled to each SwitchPort.
    host_macs: BTreeMap<Key, String>,
    /// The MAC of the Server NIC cabled to each SmartNicPort.
    smartnic_host_macs: BTreeMap<Key, String>,
    /// Servers by name (shared: the tenancy lookups hand them out).
    servers: BTreeMap<String, std::sync::Arc<Server>>,
    rules: Rules<'a>,
    /// What the pools grant (empty with tenancy off).
    grants: Grants,
    /// The Server whose NIC is cabled to each SwitchPort.
    cabled: BTreeMap<Key, &'a str>,
    /// Per namespace: its SwitchPorts carrying a link-aggregation configuration
    /// (what the operator checks a group member against).
    lag_peers: BTreeMap<String, Vec<LagMember<'a>>>,
    /// SmartNicPorts whose chain's claim is refused ([`chains::project`]).
    chain_refusals: BTreeMap<Key, Failure>,
}

/// A SwitchPort carrying a link-aggregation configuration, as the group check
/// reads it ([`LagPeer`], owned where the fleet does not hold the value).
struct LagMember<'a> {
    name: &'a str,
    switch: String,
    device_port: Option<PortName>,
    server: Option<&'a str>,
    spec: &'a SwitchPortConfigurationSpec,
}

impl LagMember<'_> {
    fn view(&self) -> LagPeer<'_> {
        LagPeer {
            name: self.name,
            switch: &self.switch,
            device_port: self.device_port.clone(),
            server: self.server,
            spec: self.spec,
        }
    }
}

impl<'a> Side<'a> {
    fn new(fleet: &'a Fleet, rules: Rules<'a>) -> Self {
        let macs = |kind: CabledPortKind| -> BTreeMap<Key, String> {
            fleet
                .servers
                .iter()
                .flat_map(|s| s.spec.nics.iter())
                .filter_map(|n| {
                    let port = n.port.as_ref()?;
                    (port.port_kind() == kind)
                        .then(|| ((port.namespace.clone(), port.name.clone()), n.mac.clone()))
                })
                .filter_map(|(k, mac)| Some((k, mac?)))
                .collect()
        };
        let host_macs = macs(CabledPortKind::SwitchPort);
        let smartnic_host_macs = macs(CabledPortKind::SmartNicPort);
        let cabled: BTreeMap<Key, &'a str> = fleet
            .servers
            .iter()
            .flat_map(|s| {
                let server = s.metadata.name.as_deref().unwrap_or_default();
                s.spec.nics.iter().filter_map(move |n| {
                    let port = n.port.as_ref()?;
                    (port.port_kind() == CabledPortKind::SwitchPort)
                        .then(|| ((port.namespace.clone(), port.name.clone()), server))
                })
            })
            .collect();
        let switches = index(&fleet.switches, |o| &o.metadata);
        let configurations = index(&fleet.configurations, |o| &o.metadata);
        let mut lag_peers: BTreeMap<String, Vec<LagMember<'a>>> = BTreeMap::new();
        for p in &fleet.ports {
            let (ns, name) = key(&p.metadata);
            let Some(r) = &p.spec.configuration else {
                continue;
            };
            let cns = r.namespace.clone().unwrap_or_else(|| ns.clone());
            let Some(c) = configurations.get(&(cns, r.name.clone())) else {
                continue;
            };
            if c.spec.link_aggregation.is_none() {
                continue;
            }
            let switch = switch_of(p).unwrap_or_default();
            let device_port = switches
                .get(&(ns.clone(), switch.clone()))
                .and_then(|s| s.spec.ports.get(&name))
                .and_then(|d| PortName::parse(&d.name).ok());
            lag_peers.entry(ns.clone()).or_default().push(LagMember {
                name: p.metadata.name.as_deref().unwrap_or_default(),
                switch,
                device_port,
                server: cabled.get(&(ns, name)).copied(),
                spec: &c.spec,
            });
        }
        Side {
            switches,
            providers: index(&fleet.providers, |o| &o.metadata),
            ports: index(&fleet.ports, |o| &o.metadata),
            configurations,
            smartnic_ports: index(&fleet.smartnic_ports, |o| &o.metadata),
            smartnic_configurations: index(&fleet.smartnic_configurations, |o| &o.metadata),
            host_macs,
            smartnic_host_macs,
            servers: fleet
                .servers
                .iter()
                .map(|s| {
                    (
                        s.metadata.name.clone().unwrap_or_default(),
                        std::sync::Arc::new(s.clone()),
                    )
                })
                .collect(),
            rules,
            grants: match rules.tenancy {
                Some(t) => Grants::new(&fleet.pools, Some(t.parking_vlan)),
                None => Grants::default(),
            },
            cabled,
            lag_peers,
            chain_refusals: BTreeMap::new(),
        }
    }

    /// What the SmartNicPort controller does with SmartNicPort `ns/name`, as far as
    /// its chain goes.
    fn chain_step(&self, ns: &str, name: &str) -> chains::Step {
        match self.smartnic_carry(ns, name).0 {
            Carry::Set(_) => chains::Step::Applies,
            Carry::Clean => chains::Step::Cleans,
            Carry::Refused(_) => chains::Step::Holds,
        }
    }

    /// Whom a port (`kind`, `meta`, carrying `reference`) serves, as the operator
    /// works it out.
    fn serving(
        &self,
        kind: CabledPortKind,
        meta: &ObjectMeta,
        reference: &ConfigurationRef,
    ) -> String {
        serving_namespace(
            kind,
            meta,
            Some(reference),
            &Lookups {
                server: &|name| self.servers.get(name).cloned(),
                smartnic: &|ns, name| {
                    self.smartnic_ports
                        .get(&(ns.to_owned(), name.to_owned()))
                        .map(|p| std::sync::Arc::new((*p).clone()))
                },
            },
        )
    }

    /// Whether a port (`kind`, `meta`) on `switch` may carry `carried`, as the
    /// operator's tenancy check says (granted with tenancy off).
    fn tenancy_verdict(
        &self,
        kind: CabledPortKind,
        meta: &ObjectMeta,
        switch: &str,
        carried: &Carried<'_>,
    ) -> TenancyVerdict {
        let Some(t) = self.rules.tenancy else {
            return TenancyVerdict::default();
        };
        let tenant = self.serving(kind, meta, carried.reference);
        judge_carried(t, &self.grants, &tenant, Some(switch), carried)
    }

    /// The claim holding the host of mark `host` (`Server/name`), if any.
    fn claim_of(&self, host: Option<&str>) -> Option<String> {
        let server = self.servers.get(host?.strip_prefix("Server/")?)?;
        let claim = server.status.as_ref()?.claim.as_ref()?;
        Some(format!("{}/{}", claim.namespace, claim.name))
    }

    /// The capabilities of ProviderSwitch `ns/name`, or why a port of it is refused.
    fn capabilities_of(&self, ns: &str, name: &str) -> Result<Capabilities, String> {
        let Some(provider) = self.provider(ns, name) else {
            return Err(format!(
                "ProviderNotFound: ProviderSwitch {ns}/{name} does not exist"
            ));
        };
        (self.rules.capabilities)(provider).ok_or_else(|| {
            format!(
                "InvalidProvider: ProviderSwitch {ns}/{name} names no backend patchbay has \
                 (backend {:?}, os {:?})",
                provider.spec.backend, provider.spec.os
            )
        })
    }

    /// SmartNicPort `ns/name`: what it carries on its bridge, and the configuration
    /// it names.
    fn smartnic_carry(&self, ns: &str, name: &str) -> (Carry, Option<String>) {
        let Some(port) = self.smartnic_ports.get(&(ns.to_owned(), name.to_owned())) else {
            return (Carry::Clean, None);
        };
        let Some(reference) = port.spec.configuration.clone() else {
            return (Carry::Clean, None);
        };
        let cns = reference.namespace.clone().unwrap_or_else(|| ns.to_owned());
        let words = format!("{cns}/{}", reference.name);
        let capabilities = match self.capabilities_of(ns, &port.spec.provider.name) {
            Ok(c) => c,
            Err(why) => return (Carry::Refused(why), Some(words)),
        };
        let device_port = match PortName::parse(&port.spec.port_name) {
            Ok(p) => p,
            Err(e) => {
                return (
                    Carry::Refused(format!("InvalidPortName: spec.portName: {e}")),
                    Some(words),
                );
            }
        };
        let target = PortTarget {
            configuration: ConfigurationRef {
                namespace: Some(cns.clone()),
                ..reference.clone()
            },
            hash: String::new(),
        };
        let host_mac = port.spec.host_mac.as_deref().or_else(|| {
            self.smartnic_host_macs
                .get(&(ns.to_owned(), name.to_owned()))
                .map(String::as_str)
        });
        let configuration = self
            .smartnic_configurations
            .get(&(cns.clone(), reference.name.clone()));
        let tenancy = match configuration {
            Some(c) => self.tenancy_verdict(
                CabledPortKind::SmartNicPort,
                &port.metadata,
                &port.spec.provider.name,
                &Carried {
                    kind: "SmartNicConfiguration",
                    reference: &target.configuration,
                    labels: c.metadata.labels.as_ref(),
                    port: &c.spec.port,
                    group: None,
                },
            ),
            None => TenancyVerdict::default(),
        };
        let mut tenancy = tenancy;
        // The next port's configuration stays in the namespace the port serves (or
        // is a shared infra one), as the controller checks it.
        if let (Some(t), Some(c), Some(_)) = (
            self.rules.tenancy,
            configuration,
            port.spec.next_port_ref.as_ref(),
        ) && let Some(next) = &c.spec.next_configuration_ref
        {
            let next_ns = next.namespace.clone().unwrap_or_else(|| cns.clone());
            let shared = self
                .configurations
                .get(&(next_ns.clone(), next.name.clone()))
                .is_some_and(|o| is_shared(o.metadata.labels.as_ref()));
            let tenant = self.serving(
                CabledPortKind::SmartNicPort,
                &port.metadata,
                &target.configuration,
            );
            tenancy.merge(judge_next_reference(
                t,
                &self.grants,
                &tenant,
                &next_ns,
                shared,
                format!(
                    "SmartNicConfiguration {cns}/{} spec.nextConfigurationRef",
                    reference.name
                ),
            ));
        }
        let carry = match smartnic_desired(&SmartNicInputs {
            device_port,
            wanted: Some(&target),
            configuration: configuration.map(|c| &c.spec),
            capabilities: &capabilities,
            host_mac,
            tenancy: &tenancy,
        }) {
            Ok(_)
                if self
                    .chain_refusals
                    .contains_key(&(ns.to_owned(), name.to_owned())) =>
            {
                Carry::Refused(refusal(
                    &self.chain_refusals[&(ns.to_owned(), name.to_owned())],
                ))
            }
            Ok(d) => Carry::Set(d),
            Err(f) => Carry::Refused(refusal(&f)),
        };
        (carry, Some(words))
    }

    fn switch(&self, ns: &str, name: &str) -> Option<&'a Switch> {
        self.switches
            .get(&(ns.to_owned(), name.to_owned()))
            .copied()
    }

    fn provider(&self, ns: &str, name: &str) -> Option<&'a ProviderSwitch> {
        self.providers
            .get(&(ns.to_owned(), name.to_owned()))
            .copied()
    }

    /// The SwitchPort `ns/name` of Switch `switch` (the object, or the one the
    /// Switch controller would create for an entry): what it carries, and the
    /// configuration it names.
    fn carry(&self, ns: &str, name: &str, switch: &str) -> (Carry, Option<String>) {
        let Some(sw) = self.switch(ns, switch) else {
            return (Carry::Clean, None);
        };
        let Some(definition) = sw.spec.ports.get(name) else {
            return (Carry::Clean, None);
        };
        let Some(object) = self.ports.get(&(ns.to_owned(), name.to_owned())) else {
            return (Carry::Clean, None);
        };
        let Some(reference) = object.spec.configuration.clone() else {
            return (Carry::Clean, None);
        };
        let reference = ConfigurationRef {
            namespace: Some(reference.namespace.clone().unwrap_or_else(|| ns.to_owned())),
            ..reference
        };
        let cns = reference.namespace.clone().unwrap_or_default();
        let words = format!("{cns}/{}", reference.name);
        let capabilities = match self.capabilities_of(ns, &sw.spec.provider.name) {
            Ok(c) => c,
            Err(why) => return (Carry::Refused(why), Some(words)),
        };
        let configuration = self
            .configurations
            .get(&(cns.clone(), reference.name.clone()));
        let target = PortTarget {
            configuration: reference.clone(),
            hash: String::new(),
        };
        let host_mac = self.host_macs.get(&(ns.to_owned(), name.to_owned()));
        let tenancy = match configuration {
            Some(c) => self.tenancy_verdict(
                CabledPortKind::SwitchPort,
                &object.metadata,
                switch,
                &Carried {
                    kind: "SwitchPortConfiguration",
                    reference: &reference,
                    labels: c.metadata.labels.as_ref(),
                    port: &c.spec.port,
                    group: c.spec.link_aggregation.as_ref().map(|l| l.group),
                },
            ),
            None => TenancyVerdict::default(),
        };
        // A group member is checked against the namespace's other members, as the
        // operator checks it.
        let lag = configuration
            .filter(|c| c.spec.link_aggregation.is_some())
            .map(|c| {
                let me = LagPeer {
                    name,
                    switch,
                    device_port: PortName::parse(&definition.name).ok(),
                    server: self.cabled.get(&(ns.to_owned(), name.to_owned())).copied(),
                    spec: &c.spec,
                };
                let peers: Vec<LagPeer<'_>> = self
                    .lag_peers
                    .get(ns)
                    .into_iter()
                    .flatten()
                    .map(LagMember::view)
                    .collect();
                (me, peers)
            });
        let inputs = PortInputs {
            switch,
            port_key: name,
            definition: Some(definition),
            wanted: Some(&target),
            configuration: configuration.map(|c| &c.spec),
            capabilities: &capabilities,
            host_mac: host_mac.map(String::as_str),
            lag,
            tenancy: &tenancy,
        };
        let carry = match port_desired(&inputs) {
            Ok(d) => Carry::Set(d),
            Err(f) => Carry::Refused(refusal(&f)),
        };
        (carry, Some(words))
    }
}

/// How a plan words the operator's refusal: its category, then its message (the
/// message's own leading category word left out: `Forbidden: SwitchPortConfiguration
/// …`, not `Forbidden: forbidden: …`).
fn refusal(f: &Failure) -> String {
    let category = f.category();
    let message = f.to_string();
    let message = message
        .strip_prefix(&format!("{}: ", category.to_lowercase()))
        .unwrap_or(&message);
    format!("{category}: {message}")
}

/// A port's `patchbay.dev/host` mark.
fn host_mark(meta: &ObjectMeta) -> Option<String> {
    meta.annotations
        .as_ref()
        .and_then(|a| a.get(crate::api::keys::HOST_ANNOTATION).cloned())
}

/// The Switch a SwitchPort object belongs to: its Switch label, else its owner.
fn switch_of(p: &SwitchPort) -> Option<String> {
    p.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(crate::api::keys::SWITCH_LABEL).cloned())
        .or_else(|| {
            p.metadata
                .owner_references
                .iter()
                .flatten()
                .find(|o| o.kind == "Switch")
                .map(|o| o.name.clone())
        })
}

/// `unchained`, or when chains were written ([`chains::project`]) the side of the
/// fleet with them.
fn chained<'s>(
    unchained: Side<'s>,
    projected: &'s Option<(Fleet, BTreeMap<Key, Failure>)>,
    rules: Rules<'s>,
) -> Side<'s> {
    match projected {
        None => unchained,
        Some((fleet, refusals)) => {
            let mut side = Side::new(fleet, rules);
            side.chain_refusals = refusals.clone();
            side
        }
    }
}

/// Every port whose outcome differs between `before` and `after`, in namespace,
/// Switch and port order, each decided under `rules` as the operator decides it.
pub fn plan(before: &Fleet, after: &Fleet, rules: Rules<'_>) -> Vec<PortChange> {
    // Each side as the SmartNicPort controller would leave it: chains written on
    // the SwitchPorts behind them.
    let (b0, a0) = (Side::new(before, rules), Side::new(after, rules));
    let before_chained = chains::project(before, |ns, n| b0.chain_step(ns, n));
    let after_chained = chains::project(after, |ns, n| a0.chain_step(ns, n));
    let (b, a) = (
        chained(b0, &before_chained, rules),
        chained(a0, &after_chained, rules),
    );
    let before = before_chained.as_ref().map_or(before, |(f, _)| f);
    let after = after_chained.as_ref().map_or(after, |(f, _)| f);
    // Every SwitchPort either side has: the objects, and the entries of Switches
    // (a SwitchPort of the entry's name, in the Switch's namespace).
    let mut ports: BTreeSet<(String, String, String)> = BTreeSet::new();
    for fleet in [before, after] {
        for sw in &fleet.switches {
            let (ns, name) = key(&sw.metadata);
            for entry in sw.spec.ports.keys() {
                ports.insert((ns.clone(), name.clone(), entry.clone()));
            }
        }
        for p in &fleet.ports {
            let (ns, name) = key(&p.metadata);
            if let Some(sw) = switch_of(p) {
                ports.insert((ns, sw, name));
            }
        }
    }
    let mut changes = Vec::new();
    for (ns, switch, port) in ports {
        let (was, was_cfg) = b.carry(&ns, &port, &switch);
        let (will, will_cfg) = a.carry(&ns, &port, &switch);
        // The same outcome (refused alike included): nothing this change does.
        if was == will {
            continue;
        }
        let sw = a.switch(&ns, &switch).or_else(|| b.switch(&ns, &switch));
        // Named after, else before (an entry removed by the change).
        let device_port = [a.switch(&ns, &switch), b.switch(&ns, &switch)]
            .into_iter()
            .flatten()
            .find_map(|s| s.spec.ports.get(&port))
            .map(|d| d.name.clone());
        let provider = sw.and_then(|s| {
            a.provider(&ns, &s.spec.provider.name)
                .or_else(|| b.provider(&ns, &s.spec.provider.name))
                .cloned()
        });
        let at = (ns.clone(), port.clone());
        let host = a
            .ports
            .get(&at)
            .or_else(|| b.ports.get(&at))
            .and_then(|p| host_mark(&p.metadata));
        changes.push(PortChange {
            kind: PortKind::SwitchPort,
            namespace: ns,
            port,
            switch,
            device_port,
            provider,
            claim: a
                .claim_of(host.as_deref())
                .or_else(|| b.claim_of(host.as_deref())),
            host,
            configuration: (was_cfg, will_cfg),
            before: was,
            after: will,
        });
    }
    // SmartNicPorts: each is its own object (no Switch entries); its "switch" is
    // its ProviderSwitch.
    let mut smartnics: BTreeSet<Key> = BTreeSet::new();
    for fleet in [before, after] {
        smartnics.extend(fleet.smartnic_ports.iter().map(|p| key(&p.metadata)));
    }
    for (ns, name) in smartnics {
        let (was, was_cfg) = b.smartnic_carry(&ns, &name);
        let (will, will_cfg) = a.smartnic_carry(&ns, &name);
        if was == will {
            continue;
        }
        let at = (ns.clone(), name.clone());
        let Some(port) = a
            .smartnic_ports
            .get(&at)
            .or_else(|| b.smartnic_ports.get(&at))
        else {
            continue;
        };
        let provider = &port.spec.provider.name;
        let host = host_mark(&port.metadata);
        changes.push(PortChange {
            kind: PortKind::SmartNicPort,
            namespace: ns.clone(),
            port: name,
            switch: provider.clone(),
            device_port: Some(port.spec.port_name.clone()),
            provider: a
                .provider(&ns, provider)
                .or_else(|| b.provider(&ns, provider))
                .cloned(),
            claim: a
                .claim_of(host.as_deref())
                .or_else(|| b.claim_of(host.as_deref())),
            host,
            configuration: (was_cfg, will_cfg),
            before: was,
            after: will,
        });
    }
    changes
}

/// Where a port is: its namespace, its Switch (a SmartNicPort's ProviderSwitch) and
/// its kind; a switch's batch holds the changes of one place.
pub type Place = (String, String, PortKind);

/// The place of `c`'s port.
pub fn place_of(c: &PortChange) -> Place {
    (c.namespace.clone(), c.switch.clone(), c.kind)
}

/// The link-aggregation members `changes` leave as they are: for each place where a
/// change joins or leaves a group, what every other port there that carries a group
/// carries in `after` (a device batch plans an aggregate's entry, or an Open
/// vSwitch bond's rows, from the group's members that stay as well as those that
/// move). Empty when no change touches a group.
pub fn unchanged_members(
    after: &Fleet,
    rules: Rules<'_>,
    changes: &[PortChange],
) -> BTreeMap<Place, Vec<DesiredPort>> {
    let grouped = |c: &Carry| matches!(c, Carry::Set(d) if d.lag.is_some());
    let places: BTreeSet<Place> = changes
        .iter()
        .filter(|c| grouped(&c.before) || grouped(&c.after))
        .map(place_of)
        .collect();
    if places.is_empty() {
        return BTreeMap::new();
    }
    let changing: BTreeSet<(Place, &str)> = changes
        .iter()
        .map(|c| (place_of(c), c.port.as_str()))
        .collect();
    let a0 = Side::new(after, rules);
    let projected = chains::project(after, |ns, n| a0.chain_step(ns, n));
    let a = chained(a0, &projected, rules);
    let after = projected.as_ref().map_or(after, |(f, _)| f);
    let mut out: BTreeMap<Place, Vec<DesiredPort>> = BTreeMap::new();
    let mut keep = |place: Place, name: &str, carry: Carry| {
        if let Carry::Set(d) = carry
            && d.lag.is_some()
            && !changing.contains(&(place.clone(), name))
        {
            out.entry(place).or_default().push(d);
        }
    };
    for p in &after.ports {
        let (ns, name) = key(&p.metadata);
        let Some(switch) = switch_of(p) else {
            continue;
        };
        let place = (ns, switch, PortKind::SwitchPort);
        if places.contains(&place) {
            let carry = a.carry(&place.0, &name, &place.1).0;
            keep(place, &name, carry);
        }
    }
    for p in &after.smartnic_ports {
        let (ns, name) = key(&p.metadata);
        let place = (ns, p.spec.provider.name.clone(), PortKind::SmartNicPort);
        if places.contains(&place) {
            let carry = a.smartnic_carry(&place.0, &name).0;
            keep(place, &name, carry);
        }
    }
    out
}

#[cfg(test)]
mod tests;

//! Tenancy: which namespace may carry which VLAN where, and which configuration a
//! tenant may name. Pure: no client, no clock; table-tested. The admission webhook
//! ([`crate::decide::admission`]) and the port, host and claim controllers ask it the same
//! questions, so `kubectl apply` and the last check before a device change agree.
//!
//! The rules:
//! - The infra namespace (`--infra-namespace`) is trusted: its configurations and
//!   the ports that serve it are not checked (infra owns the whole switch).
//! - A port serves a tenant namespace: the namespace of the claim holding the
//!   Server cabled to it (the claim's network, and a NIC's default configuration
//!   applied under the claim), else the port's own namespace.
//! - Every VLAN a port carries for a tenant must be granted to that namespace by a
//!   [`VLANPool`] (on the port's Switch, when the pool names Switches).
//! - A VLAN that pools grant to two namespaces is granted to nobody unless every
//!   pool granting it is `shared`; the parking VLAN is granted to nobody.
//! - A tenant names configurations of its own namespace, or of the infra namespace
//!   labelled [`SHARED_LABEL`]`=true`; nothing else, whether it exists or not.
//!
//! Messages name the field, the VLAN and the tenant's own namespace — never another
//! tenant's namespace or objects.
//!
//! One verdict, one place: [`judge`] answers whether a use of a configuration
//! ([`Carrying`]) is granted; the webhook, the SwitchPort and SmartNicPort
//! controllers and the host lifecycle all call it (with the grants and the facts
//! their caches hold), and [`serving_namespace`] says whom a port serves.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use jiff::Timestamp;
use kube::core::ObjectMeta;
use patchbay_model::DesiredPort;
use patchbay_model::values::{VlanId, VlanName, VlanSet};

use crate::api::configuration::PortSettingsSpec;
use crate::api::keys::{CHAINED_FROM_ANNOTATION, HOST_ANNOTATION, SHARED_LABEL};
use crate::api::{CabledPortKind, ConfigurationRef, PortStatus, Server, SmartNicPort, VLANPool};
use crate::decide::status::{Truth, find_condition, set_condition};

/// What the operator's settings say about tenancy. `None` in the settings: one
/// tenant, nothing checked (the behaviour before tenancy existed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tenancy {
    /// The infra team's namespace (Switches, provisioning and shared configurations).
    pub infra_namespace: String,
    /// The VLAN a port no configuration governs is parked on; granted to no namespace.
    pub parking_vlan: VlanId,
    /// Namespaces whose BareMetalHosts' `spec.ports` are honoured (the infra
    /// namespace always is).
    pub trusted_host_namespaces: BTreeSet<String>,
    /// Whether tenant claims may copy their Servers' BMC credentials
    /// (`inventory.includeBmcCredentials`); off by default: a Server's next holder
    /// would share power control with the last one until the infra team rotates them.
    pub allow_bmc_credentials: bool,
}

impl Tenancy {
    /// Whether `namespace` is the infra namespace.
    pub fn is_infra(&self, namespace: &str) -> bool {
        namespace == self.infra_namespace
    }

    /// Whether a BareMetalHost of `namespace` may drive ports with its `spec.ports`.
    pub fn trusts_hosts_of(&self, namespace: &str) -> bool {
        self.is_infra(namespace) || self.trusted_host_namespaces.contains(namespace)
    }
}

/// One pool as the grants use it.
#[derive(Debug, Clone)]
struct Pool {
    name: String,
    namespaces: BTreeSet<String>,
    switches: BTreeSet<String>,
    shared: bool,
    vlan_name: Option<String>,
}

impl Pool {
    fn on(&self, switch: Option<&str>) -> bool {
        match switch {
            _ if self.switches.is_empty() => true,
            Some(s) => self.switches.contains(s),
            None => true,
        }
    }
}

/// Why a VLAN is not granted to a namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Missing {
    /// It is the parking VLAN.
    Parking,
    /// No pool grants it to the namespace.
    NotGranted,
    /// Pools grant it to the namespace, on other Switches only.
    OtherSwitches,
    /// Pools grant it to several namespaces and not every one of them is shared.
    Contested,
}

impl Missing {
    fn words(self) -> &'static str {
        match self {
            Missing::Parking => "it is the parking VLAN, granted to no namespace",
            Missing::NotGranted => "no VLANPool grants it",
            Missing::OtherSwitches => "VLANPools grant it on other Switches only",
            Missing::Contested => {
                "VLANPools that are not all shared grant it to several namespaces, so it \
                 is granted to none until the infra team removes the overlap"
            }
        }
    }
}

/// What a set of VLANPools grants, and what is wrong with each pool.
#[derive(Debug, Clone, Default)]
pub struct Grants {
    pools: Vec<Pool>,
    /// VLAN → indexes into `pools` of the valid pools granting it.
    by_vlan: BTreeMap<VlanId, Vec<usize>>,
    /// VLANs granted to nobody (overlap of pools not all shared).
    contested: BTreeSet<VlanId>,
    /// Link-aggregation group → indexes of the valid pools granting it.
    by_group: BTreeMap<VlanId, Vec<usize>>,
    /// Groups granted to several namespaces: granted to none.
    contested_groups: BTreeSet<VlanId>,
    parking: Option<VlanId>,
    /// Per pool name: why it grants less than it says (empty: it grants what it says).
    problems: BTreeMap<String, Vec<String>>,
}

impl Grants {
    /// The grants of `pools`, with `parking` (when tenancy is on) granted to nobody.
    pub fn new<'a>(pools: impl IntoIterator<Item = &'a VLANPool>, parking: Option<VlanId>) -> Self {
        let mut g = Grants {
            parking,
            ..Default::default()
        };
        let mut all: Vec<&VLANPool> = pools.into_iter().collect();
        all.sort_by_key(|p| p.metadata.name.clone().unwrap_or_default());
        for p in all {
            let name = p.metadata.name.clone().unwrap_or_default();
            let mut problems = Vec::new();
            let vlans = match VlanSet::parse(&p.spec.vlans) {
                Ok(v) => v,
                Err(e) => {
                    problems.push(format!("spec.vlans: {e}"));
                    VlanSet::new()
                }
            };
            if !p.spec.shared && p.spec.namespaces.len() > 1 {
                problems.push(
                    "spec.namespaces: a pool that is not shared serves exactly one namespace \
                     (tenants on one VLAN reach each other); set spec.shared for a common \
                     services network"
                        .into(),
                );
            }
            if p.spec.shared && p.spec.vlan_name.is_none() {
                problems.push(
                    "spec.vlanName: a shared pool names its VLANs (tenants do not name a \
                     VLAN they share)"
                        .into(),
                );
            }
            let groups = match p.spec.lag_groups.as_deref().map(VlanSet::parse) {
                None => VlanSet::new(),
                Some(Ok(g)) => g,
                Some(Err(e)) => {
                    problems.push(format!("spec.lagGroups: {e}"));
                    VlanSet::new()
                }
            };
            if p.spec.shared && !groups.is_empty() {
                problems.push(
                    "spec.lagGroups: a shared pool grants no link-aggregation group (a group \
                     is one tenant's)"
                        .into(),
                );
            }
            if let Some(parking) = parking
                && vlans.contains(parking)
            {
                problems.push(format!(
                    "spec.vlans: VLAN {parking} is the parking VLAN, granted to no namespace"
                ));
            }
            let valid = problems.is_empty();
            g.problems.insert(name.clone(), problems);
            if !valid {
                continue;
            }
            let i = g.pools.len();
            g.pools.push(Pool {
                name,
                namespaces: p.spec.namespaces.iter().cloned().collect(),
                switches: p.spec.switches.iter().cloned().collect(),
                shared: p.spec.shared,
                vlan_name: p.spec.vlan_name.clone(),
            });
            for v in vlans.iter() {
                g.by_vlan.entry(v).or_default().push(i);
            }
            for n in groups.iter() {
                g.by_group.entry(n).or_default().push(i);
            }
        }
        for (group, idx) in &g.by_group {
            let namespaces: BTreeSet<&String> =
                idx.iter().flat_map(|&i| &g.pools[i].namespaces).collect();
            if namespaces.len() > 1 {
                g.contested_groups.insert(*group);
                for &i in idx {
                    if let Some(p) = g.problems.get_mut(&g.pools[i].name) {
                        p.push(format!(
                            "spec.lagGroups: group {group} is granted to another namespace too: \
                             granted to none"
                        ));
                    }
                }
            }
        }
        for (vlan, idx) in &g.by_vlan {
            let namespaces: BTreeSet<&String> =
                idx.iter().flat_map(|&i| &g.pools[i].namespaces).collect();
            let all_shared = idx.iter().all(|&i| g.pools[i].shared);
            if namespaces.len() > 1 && !all_shared {
                g.contested.insert(*vlan);
            }
        }
        // Per pool: the contested VLANs, grouped by the other pools granting them.
        let mut overlaps: BTreeMap<(String, Vec<String>), VlanSet> = BTreeMap::new();
        for vlan in &g.contested {
            let names: Vec<String> = g.by_vlan[vlan]
                .iter()
                .map(|&i| g.pools[i].name.clone())
                .collect();
            for n in &names {
                let others: Vec<String> = names.iter().filter(|o| *o != n).cloned().collect();
                let set = overlaps.entry((n.clone(), others)).or_default();
                *set = set.iter().chain([*vlan]).collect();
            }
        }
        for ((name, others), vlans) in overlaps {
            if let Some(p) = g.problems.get_mut(&name) {
                p.push(format!(
                    "spec.vlans: VLANs {vlans} are also granted by {} to another namespace, and \
                     not every pool granting them is shared: they are granted to none",
                    others.join(", ")
                ));
            }
        }
        g
    }

    /// Why pool `name` grants less than it says; empty when it grants all of it.
    pub fn problems(&self, name: &str) -> &[String] {
        self.problems.get(name).map(Vec::as_slice).unwrap_or(&[])
    }

    /// Whether `vlan` is granted to `namespace` on `switch` (`None`: on some
    /// Switch — what admission can check before a port is known), and the name the
    /// device gives it when a shared pool names it.
    pub fn lookup(
        &self,
        namespace: &str,
        switch: Option<&str>,
        vlan: VlanId,
    ) -> Result<Option<&str>, Missing> {
        if self.parking == Some(vlan) {
            return Err(Missing::Parking);
        }
        let p = self.granting(&self.by_vlan, &self.contested, namespace, switch, vlan)?;
        Ok(if p.shared {
            p.vlan_name.as_deref()
        } else {
            None
        })
    }

    /// Whether link-aggregation group `group` is granted to `namespace` on `switch`
    /// (`None`: on some Switch).
    pub fn lookup_group(
        &self,
        namespace: &str,
        switch: Option<&str>,
        group: VlanId,
    ) -> Result<(), Missing> {
        self.granting(
            &self.by_group,
            &self.contested_groups,
            namespace,
            switch,
            group,
        )
        .map(|_| ())
    }

    /// The pool of `index` (VLANs or groups) that grants `id` to `namespace` on
    /// `switch`, or why none does.
    fn granting(
        &self,
        index: &BTreeMap<VlanId, Vec<usize>>,
        contested: &BTreeSet<VlanId>,
        namespace: &str,
        switch: Option<&str>,
        id: VlanId,
    ) -> Result<&Pool, Missing> {
        if contested.contains(&id) {
            return Err(Missing::Contested);
        }
        let mut serving = index
            .get(&id)
            .into_iter()
            .flatten()
            .map(|&i| &self.pools[i])
            .filter(|p| p.namespaces.contains(namespace))
            .peekable();
        if serving.peek().is_none() {
            return Err(Missing::NotGranted);
        }
        serving.find(|p| p.on(switch)).ok_or(Missing::OtherSwitches)
    }

    /// The link-aggregation groups granted to `namespace` (on some Switch).
    pub fn groups_granted_to(&self, namespace: &str) -> VlanSet {
        self.by_group
            .keys()
            .copied()
            .filter(|g| self.lookup_group(namespace, None, *g).is_ok())
            .collect()
    }

    /// The VLANs granted to `namespace` (on some Switch), as a range string.
    pub fn granted_to(&self, namespace: &str) -> VlanSet {
        self.by_vlan
            .keys()
            .copied()
            .filter(|v| self.lookup(namespace, None, *v).is_ok())
            .collect()
    }
}

/// The VLANs a port configuration carries, each with the field that sets it.
fn vlans_of(port: &PortSettingsSpec) -> Vec<(String, i64)> {
    port.untagged_vlan
        .map(|v| ("spec.untaggedVLAN".to_owned(), v))
        .into_iter()
        .chain(
            port.vlans
                .iter()
                .enumerate()
                .map(|(i, v)| (format!("spec.vlans[{i}].id"), v.id)),
        )
        .collect()
}

/// A configuration about to serve a tenant.
#[derive(Debug, Clone)]
struct Use<'a> {
    /// The namespace the port serves.
    pub tenant: &'a str,
    /// The port's Switch (its name in the infra namespace); `None` at admission.
    pub switch: Option<&'a str>,
    /// The configuration's VLANs ([`vlans_of`]).
    pub vlans: &'a [(String, i64)],
    /// Where the fields are (`SwitchPortConfiguration tenant-a/web`), for messages;
    /// empty when the message is about the object itself.
    pub what: &'a str,
}

/// Whether every VLAN of `u` is granted to its tenant: one message per VLAN that is
/// not, naming the field, the VLAN, the namespace and why.
fn check_vlans(t: &Tenancy, grants: &Grants, u: &Use<'_>) -> Result<(), Vec<String>> {
    if t.is_infra(u.tenant) {
        return Ok(());
    }
    let refusals: Vec<String> = u
        .vlans
        .iter()
        .filter_map(|(field, id)| {
            let why = match VlanId::from_i64(*id) {
                Ok(v) => grants.lookup(u.tenant, u.switch, v).err()?,
                Err(_) => Missing::NotGranted,
            };
            let on = u
                .switch
                .map(|s| format!(" on Switch {s}"))
                .unwrap_or_default();
            let at = if u.what.is_empty() {
                field.clone()
            } else {
                format!("{} {field}", u.what)
            };
            Some(format!(
                "{at}: VLAN {id} is not granted to namespace {}{on}: {}",
                u.tenant,
                why.words()
            ))
        })
        .collect();
    if refusals.is_empty() {
        Ok(())
    } else {
        Err(refusals)
    }
}

/// Whether the link-aggregation group a configuration sets (`group`, at
/// `spec.linkAggregation.group`) is granted to the tenant of `u`.
fn check_group(
    t: &Tenancy,
    grants: &Grants,
    u: &Use<'_>,
    group: Option<i64>,
) -> Result<(), String> {
    let Some(group) = group else { return Ok(()) };
    if t.is_infra(u.tenant) {
        return Ok(());
    }
    let why = match u16::try_from(group).ok().and_then(|g| VlanId::new(g).ok()) {
        Some(g) => match grants.lookup_group(u.tenant, u.switch, g) {
            Ok(()) => return Ok(()),
            Err(Missing::Contested) => {
                "VLANPools grant it to several namespaces, so it is granted to none"
            }
            Err(Missing::OtherSwitches) => "VLANPools grant it on other Switches only",
            Err(_) => "no VLANPool grants it (spec.lagGroups)",
        },
        None => "no VLANPool grants it (spec.lagGroups)",
    };
    let at = if u.what.is_empty() {
        "spec.linkAggregation.group".to_owned()
    } else {
        format!("{} spec.linkAggregation.group", u.what)
    };
    let on = u
        .switch
        .map(|s| format!(" on Switch {s}"))
        .unwrap_or_default();
    Err(format!(
        "{at}: link-aggregation group {group} is not granted to namespace {}{on}: {why}",
        u.tenant
    ))
}

/// Whether a tenant (`tenant`) may name a configuration of `namespace`; `shared`:
/// the configuration carries [`SHARED_LABEL`]`=true` (look it up only in the infra
/// namespace). `field` names the reference. The answer does not depend on whether
/// the configuration exists, so a refusal tells nothing about other namespaces.
fn check_reference(
    t: &Tenancy,
    tenant: &str,
    namespace: &str,
    shared: bool,
    field: &str,
) -> Result<(), String> {
    if t.is_infra(tenant) || namespace == tenant || (t.is_infra(namespace) && shared) {
        return Ok(());
    }
    Err(if t.is_infra(namespace) {
        format!(
            "{field}: the infra namespace's configuration is not shared with tenants \
             (the infra team labels shared ones {SHARED_LABEL}=true)"
        )
    } else {
        format!(
            "{field}: namespace {tenant} may name configurations of its own namespace, \
             or shared ones of the infra namespace, not of namespace {namespace}"
        )
    })
}

/// Whether a configuration's labels mark it shared.
pub fn is_shared(labels: Option<&BTreeMap<String, String>>) -> bool {
    labels
        .and_then(|l| l.get(SHARED_LABEL))
        .is_some_and(|v| v == "true")
}

/// A tenant's use of a configuration, as the caches show it: what [`judge`] rules on.
#[derive(Debug, Clone)]
pub struct Carrying<'a> {
    /// The namespace served: the port's ([`serving_namespace`]), or the object's at
    /// admission.
    pub tenant: &'a str,
    /// The port's Switch (its name in the infra namespace); `None` at admission,
    /// where the port is not known yet.
    pub switch: Option<&'a str>,
    /// The configuration the tenant names; `None` when naming it was not the
    /// tenant's choice (a NIC's default configuration is the infra team's).
    pub reference: Option<Reference<'a>>,
    /// What the configuration carries; `None` where it is not known (not found) or
    /// checked elsewhere.
    pub settings: Option<Settings<'a>>,
}

/// A configuration named by a tenant.
#[derive(Debug, Clone)]
pub struct Reference<'a> {
    /// The configuration's namespace (resolved: the referrer's when unset).
    pub namespace: &'a str,
    /// It carries [`SHARED_LABEL`]`=true` ([`is_shared`]).
    pub shared: bool,
    /// The reference, for the message (`spec.configuration.namespace`).
    pub field: String,
}

/// The VLANs and group a configuration carries.
#[derive(Debug, Clone)]
pub struct Settings<'a> {
    /// Its port settings (the untagged VLAN and the tagged ones).
    pub port: &'a PortSettingsSpec,
    /// Its link-aggregation group (`spec.linkAggregation.group`).
    pub group: Option<i64>,
    /// Where the fields are, for messages (`SwitchPortConfiguration tenant-a/web`);
    /// empty when the message is about the object itself.
    pub what: String,
}

/// The tenancy verdict on a [`Carrying`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TenancyVerdict {
    /// Why it may not be carried (one message per reference, VLAN or group);
    /// `None`: it may.
    pub refused: Option<Vec<String>>,
    /// Names shared pools give the VLANs carried (they replace the configuration's
    /// own).
    pub names: BTreeMap<VlanId, String>,
}

impl TenancyVerdict {
    /// Adds `other`'s refusals and names to this verdict.
    pub fn merge(&mut self, other: TenancyVerdict) {
        if let Some(r) = other.refused {
            self.refused.get_or_insert_with(Vec::new).extend(r);
        }
        self.names.extend(other.names);
    }

    /// The refusals, empty when granted.
    pub fn refusals(&self) -> &[String] {
        self.refused.as_deref().unwrap_or_default()
    }
}

/// Whether `c` is granted under `tenancy` (`None`: tenancy is off, everything is),
/// with the pools' `grants`: the one tenancy rule the webhook and every controller
/// apply. The infra namespace is trusted; a tenant names its own configurations or
/// shared infra ones; every VLAN and group carried is granted to the tenant (on the
/// port's Switch when known).
pub fn judge(tenancy: Option<&Tenancy>, grants: &Grants, c: &Carrying<'_>) -> TenancyVerdict {
    let Some(t) = tenancy else {
        return TenancyVerdict::default();
    };
    if t.is_infra(c.tenant) {
        return TenancyVerdict::default();
    }
    let mut refused = Vec::new();
    if let Some(r) = &c.reference
        && let Err(e) = check_reference(t, c.tenant, r.namespace, r.shared, &r.field)
    {
        refused.push(e);
    }
    let mut names = BTreeMap::new();
    if let Some(settings) = &c.settings {
        let vlans = vlans_of(settings.port);
        let u = Use {
            tenant: c.tenant,
            switch: c.switch,
            vlans: &vlans,
            what: &settings.what,
        };
        if let Err(e) = check_vlans(t, grants, &u) {
            refused.extend(e);
        }
        if let Err(e) = check_group(t, grants, &u, settings.group) {
            refused.push(e);
        }
        names = vlans
            .iter()
            .filter_map(|(_, id)| {
                let v = VlanId::from_i64(*id).ok()?;
                let name = grants.lookup(c.tenant, c.switch, v).ok()??;
                Some((v, name.to_owned()))
            })
            .collect();
    }
    TenancyVerdict {
        refused: (!refused.is_empty()).then_some(refused),
        names,
    }
}

/// A configuration a port is to carry, as the tenancy check reads it.
#[derive(Debug, Clone, Copy)]
pub struct Carried<'a> {
    /// Its kind, for messages.
    pub kind: &'static str,
    /// Its reference, namespace resolved.
    pub reference: &'a ConfigurationRef,
    /// Its labels ([`SHARED_LABEL`]).
    pub labels: Option<&'a BTreeMap<String, String>>,
    /// Its VLANs.
    pub port: &'a PortSettingsSpec,
    /// Its link-aggregation group (`spec.linkAggregation.group`).
    pub group: Option<i64>,
}

/// Whether a port serving `tenant` ([`serving_namespace`]) on `switch` (its Switch;
/// a SmartNicPort's ProviderSwitch) may carry `carried`: [`judge`] with the port's
/// reference and settings. The SwitchPort and SmartNicPort controllers and
/// `patchbay plan` ask this, each with its own view of the objects.
pub fn judge_carried(
    tenancy: &Tenancy,
    grants: &Grants,
    tenant: &str,
    switch: Option<&str>,
    carried: &Carried<'_>,
) -> TenancyVerdict {
    let cns = carried.reference.namespace.as_deref().unwrap_or_default();
    let what = format!("{} {cns}/{}", carried.kind, carried.reference.name);
    judge(
        Some(tenancy),
        grants,
        &Carrying {
            tenant,
            switch,
            reference: Some(Reference {
                namespace: cns,
                shared: is_shared(carried.labels),
                field: format!("the port serves namespace {tenant}; {what}"),
            }),
            settings: Some(Settings {
                port: carried.port,
                group: carried.group,
                what,
            }),
        },
    )
}

/// Whether a SmartNicConfiguration's `nextConfigurationRef` (to a configuration of
/// `namespace`, labelled shared or not; `field` words where) may be named for a
/// SmartNicPort serving `tenant`: the reference alone (the next SwitchPort's own
/// check judges what it carries). The SmartNicPort controller and the plan ask this.
pub fn judge_next_reference(
    tenancy: &Tenancy,
    grants: &Grants,
    tenant: &str,
    namespace: &str,
    shared: bool,
    field: String,
) -> TenancyVerdict {
    judge(
        Some(tenancy),
        grants,
        &Carrying {
            tenant,
            switch: None,
            reference: Some(Reference {
                namespace,
                shared,
                field,
            }),
            settings: None,
        },
    )
}

/// What [`serving_namespace`] looks up in the caches.
pub struct Lookups<'a> {
    /// A Server by name.
    pub server: &'a dyn Fn(&str) -> Option<Arc<Server>>,
    /// A SmartNicPort by namespace and name.
    pub smartnic: &'a dyn Fn(&str, &str) -> Option<Arc<SmartNicPort>>,
}

/// The namespace a port (`kind`, `meta`, carrying `configuration`) serves: for a
/// port a Server drives, its claim's namespace unless the port carries the NIC's
/// provisioning configuration (infra's network); for a port a BareMetalHost drives,
/// the namespace of the configuration it carries (the host's while it carries
/// none); for a SwitchPort chained from a SmartNicPort, whom that
/// port serves; else the port's own namespace.
pub fn serving_namespace(
    kind: CabledPortKind,
    meta: &ObjectMeta,
    configuration: Option<&ConfigurationRef>,
    look: &Lookups<'_>,
) -> String {
    let ns = meta.namespace.clone().unwrap_or_default();
    let annotations = meta.annotations.as_ref();
    let annotation = |key: &str| annotations.and_then(|a| a.get(key));
    if let Some(mark) = annotation(HOST_ANNOTATION) {
        if let Some(name) = mark.strip_prefix("Server/") {
            let Some(server) = (look.server)(name) else {
                return ns;
            };
            let port_name = meta.name.clone().unwrap_or_default();
            let provisioning = server
                .spec
                .nics
                .iter()
                .filter(|n| {
                    n.port.as_ref().is_some_and(|p| {
                        p.port_kind() == kind && p.namespace == ns && p.name == port_name
                    })
                })
                .filter_map(|n| n.provisioning_configuration.as_ref())
                .any(|r| {
                    Some(r.name.as_str()) == configuration.map(|c| c.name.as_str())
                        && r.namespace.as_deref().unwrap_or(&ns)
                            == configuration
                                .and_then(|c| c.namespace.as_deref())
                                .unwrap_or(&ns)
                });
            let claim = server.status.as_ref().and_then(|s| s.claim.as_ref());
            return match claim {
                Some(c) if !provisioning => c.namespace.clone(),
                _ => ns,
            };
        }
        if let Some(rest) = mark.strip_prefix("BareMetalHost/") {
            // The namespace of what it carries (a tenant's HostNetworkAttachment
            // serves that tenant, whose grants then apply); the host's own while it
            // carries nothing. Only hosts of trusted namespaces drive ports, and it
            // is their author, the infra team, who chose the configuration.
            let host_ns = rest.split('/').next().unwrap_or(&ns);
            return configuration.map_or_else(
                || host_ns.to_owned(),
                |c| c.namespace.clone().unwrap_or_else(|| ns.clone()),
            );
        }
    }
    if kind == CabledPortKind::SwitchPort
        && let Some(from) = annotation(CHAINED_FROM_ANNOTATION)
        && let Some((sns, sname)) = from.split_once('/')
        && let Some(snp) = (look.smartnic)(sns, sname)
    {
        return serving_namespace(
            CabledPortKind::SmartNicPort,
            &snp.metadata,
            snp.spec.configuration.as_ref(),
            look,
        );
    }
    ns
}

/// The `Forbidden` condition of a port, set at `now`: True with the refusals while
/// its configuration is refused (an Active port keeps what the device carries — a
/// grant revoked under a live tenant is reported, never ripped off), False once
/// granted again; absent on a port never refused.
pub fn report_forbidden(
    status: &mut PortStatus,
    verdict: &TenancyVerdict,
    generation: Option<i64>,
    now: Timestamp,
) {
    match &verdict.refused {
        Some(refused) => set_condition(
            &mut status.conditions,
            "Forbidden",
            Truth::True,
            "Forbidden",
            format!(
                "{}; nothing is sent to the device while this holds",
                refused.join("; ")
            ),
            generation,
            now,
        ),
        None if find_condition(&status.conditions, "Forbidden").is_some() => set_condition(
            &mut status.conditions,
            "Forbidden",
            Truth::False,
            "Granted",
            "the configuration is granted to the namespace the port serves".into(),
            generation,
            now,
        ),
        None => {}
    }
}

/// Gives the VLANs shared pools name their pool's name (a tenant does not name a
/// VLAN it shares).
pub fn with_pool_names(desired: &mut DesiredPort, verdict: &TenancyVerdict) {
    for (vlan, name) in &verdict.names {
        if let Ok(n) = VlanName::parse(name) {
            desired.vlan_names.insert(*vlan, n);
        }
    }
}

#[cfg(test)]
mod tests;

//! NETCONF device models as data, and the pure engine that uses them.
//!
//! A model is a YAML document under `providers/models/` (embedded at build time): where
//! a device keeps its ports and VLANs in the configuration tree, which leaf carries
//! which part of a port (description, admin state, MTU, VLAN mode, access VLAN, trunk
//! members, native VLAN), what the port names look like, and how to list the ports
//! the device has. Adding a YANG model means adding a file, not code, as long as it
//! keeps ports in a keyed list.
//!
//! One list of `leaves` serves both directions: [`Model::port_element`] writes the
//! leaves a desired port needs (the port's subtree is sent with
//! `operation="replace"`, so nothing of an older configuration survives), and
//! [`Model::read_port`] reads the same leaves back into an [`ObservedPort`]. A port
//! with no entry in the list is clean; cleaning removes the entry.
//!
//! Everything here is pure; values come from the validated types of
//! [`crate::values`] and reach XML only through [`Element`], which escapes them.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, OnceLock};

use regex::Regex;
use serde::Deserialize;

use crate::model::{
    AdminState, Capabilities, Capability, DesiredPort, LagMembership, LagMode, ObservedPort,
    VlanMode,
};
use crate::values::{Description, LagGroup, Mtu, PortName, VlanId, VlanName, VlanSet};

use super::xml::Element;

/// The model files, embedded: (file name, text).
pub const MODEL_FILES: [(&str, &str); 3] = [
    (
        "junos_els.yaml",
        include_str!("../../models/junos_els.yaml"),
    ),
    (
        "junos_port_mode.yaml",
        include_str!("../../models/junos_port_mode.yaml"),
    ),
    (
        "patchbay_ports.yaml",
        include_str!("../../models/patchbay_ports.yaml"),
    ),
];

/// patchbay's own YANG module (what the `patchbay-ports` model speaks), embedded so
/// tests and the demo can hand it to netconfd.
pub const PATCHBAY_YANG: &str = include_str!("../../yang/patchbay-ports.yang");

/// A model file that does not load: names the file and the problem.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("NETCONF model {file}: {reason}")]
pub struct ModelError {
    /// The file.
    pub file: String,
    /// What is wrong.
    pub reason: String,
}

/// Every embedded model, loaded once. Panics only if an embedded file is broken,
/// which the unit tests rule out.
pub fn builtin() -> &'static [Arc<Model>] {
    static ALL: OnceLock<Vec<Arc<Model>>> = OnceLock::new();
    ALL.get_or_init(|| {
        MODEL_FILES
            .iter()
            .map(|(file, text)| Arc::new(Model::load(file, text).expect("embedded model")))
            .collect()
    })
}

/// The model for a ProviderSwitch: `name` when given (`spec.options.model`), else the
/// default model of `os` (the first file for it). `None` when there is none, or the
/// named model is for another os.
pub fn for_os(os: &str, name: Option<&str>) -> Option<Arc<Model>> {
    builtin()
        .iter()
        .find(|m| m.os == os && name.is_none_or(|n| m.name == n))
        .cloned()
}

/// Every model's name and os (for messages).
pub fn names() -> Vec<String> {
    builtin()
        .iter()
        .map(|m| format!("{} (os {})", m.name, m.os))
        .collect()
}

// ---------------------------------------------------------------------------------
// The file format.

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ModelFile {
    name: String,
    os: String,
    capabilities: Vec<Capability>,
    #[serde(default)]
    namespace: Option<String>,
    port_name: String,
    ports: Vec<String>,
    key: String,
    operation_attribute: String,
    replace: String,
    remove: String,
    leaves: Vec<LeafFile>,
    modes: Modes,
    #[serde(default)]
    native_in_allowed: bool,
    vlans: VlanList,
    #[serde(default)]
    inventory: Option<Inventory>,
    #[serde(default = "yes")]
    validate: bool,
    #[serde(default)]
    lag: Option<LagFile>,
}

/// Where a model keeps link aggregation: an aggregate entry in the port list
/// (`ae<group>` on Junos) carrying the group's VLAN leaves, MTU and LACP mode, and
/// a leaf in each member's entry naming it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct LagFile {
    /// The aggregate entry's key, `{group}` the group number (`ae{group}`).
    aggregate: String,
    /// Path of the member's leaf naming its aggregate (`ether-options/ieee-802.3ad/bundle`).
    bundle: String,
    /// Path of the aggregate's LACP container, holding an empty `active` or
    /// `passive`; absent for a static bundle.
    lacp: String,
}

/// A loaded [`LagFile`].
#[derive(Debug, Clone)]
struct Lag {
    prefix: String,
    suffix: String,
    bundle: Vec<String>,
    lacp: Vec<String>,
}

impl Lag {
    fn aggregate(&self, group: u16) -> String {
        format!("{}{group}{}", self.prefix, self.suffix)
    }

    fn group_of(&self, aggregate: &str) -> Option<u16> {
        aggregate
            .strip_prefix(self.prefix.as_str())?
            .strip_suffix(self.suffix.as_str())?
            .parse()
            .ok()
    }
}

fn yes() -> bool {
    true
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LeafFile {
    path: String,
    field: Field,
    #[serde(default)]
    value: Option<String>,
}

/// What a leaf carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Field {
    /// The description.
    Description,
    /// The MTU.
    Mtu,
    /// Admin state: an empty element present when the port is down (`<disable/>`).
    DisablePresence,
    /// Admin state: a boolean that is `false` when the port is down (`<enabled>`);
    /// written only then.
    Enabled,
    /// The VLAN mode (values from `modes`).
    Mode,
    /// VLAN members in either mode: the access VLAN, or the trunk's allowed VLANs.
    Members,
    /// The access VLAN only.
    AccessVlan,
    /// The trunk's allowed VLANs only.
    AllowedVlans,
    /// The trunk's native VLAN.
    NativeVlan,
    /// A fixed value, written when its parent element is written (Junos `unit 0`).
    Constant,
    /// The port's ACL: a container of RFC 8519-shaped entries (see
    /// [`super::acl`]), named by the leaf's last path step.
    Acl,
}

/// The values of the mode leaf.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Modes {
    /// Access mode.
    pub access: String,
    /// Trunk mode.
    pub trunk: String,
    /// The mode a port with members but no mode leaf is in (`access` on Junos).
    #[serde(default)]
    pub absent: Option<String>,
}

/// Where VLANs are defined.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VlanList {
    /// Path of the list entries from the top of the configuration.
    pub list: Vec<String>,
    /// The key leaf of an entry.
    pub key: String,
    /// The leaf holding the VLAN ID.
    pub id: String,
    /// The leaf holding the name.
    pub name: String,
    /// The name given to a VLAN created without one (`{vlan}` is the ID); none
    /// leaves the name out.
    #[serde(default)]
    pub default_name: Option<String>,
}

/// How to list the ports the device has.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Inventory {
    /// The RPC body as a path of nested elements (`[get-interface-information, terse]`).
    pub rpc: Vec<String>,
    /// Path of the port names in the reply, from `<rpc-reply>`.
    pub names: Vec<String>,
}

/// One leaf of a port.
#[derive(Debug, Clone)]
pub struct Leaf {
    /// Path below the port element.
    pub path: Vec<String>,
    /// What it carries.
    pub field: Field,
    /// The value of a constant.
    pub value: Option<String>,
}

/// A loaded device model.
#[derive(Debug, Clone)]
pub struct Model {
    /// Model name (`junos-els`).
    pub name: String,
    /// The ProviderSwitch `os` it serves.
    pub os: String,
    capabilities: Vec<Capability>,
    namespace: Option<String>,
    port_name: Regex,
    ports: Vec<String>,
    key: String,
    operation_attribute: String,
    replace: String,
    remove: String,
    leaves: Vec<Leaf>,
    modes: Modes,
    native_in_allowed: bool,
    vlans: VlanList,
    inventory: Option<Inventory>,
    validate: bool,
    lag: Option<Lag>,
}

fn path(text: &str) -> Vec<String> {
    text.split('/').map(str::to_owned).collect()
}

impl Model {
    /// Loads and checks a model file.
    pub fn load(file: &str, text: &str) -> Result<Self, ModelError> {
        let err = |reason: String| ModelError {
            file: file.to_owned(),
            reason,
        };
        let f: ModelFile = crate::yaml::from_str(text).map_err(|e| err(e.to_string()))?;
        let port_name = Regex::new(&f.port_name).map_err(|e| err(format!("port_name: {e}")))?;
        if f.ports.len() < 2 || f.vlans.list.len() < 2 {
            return Err(err(
                "ports and vlans.list need a container and the list entry".into(),
            ));
        }
        let mut leaves = Vec::new();
        for l in f.leaves {
            if l.path.is_empty() || l.path.split('/').any(str::is_empty) {
                return Err(err(format!("leaf path {:?} has an empty step", l.path)));
            }
            if (l.field == Field::Constant) != l.value.is_some() {
                return Err(err(format!(
                    "leaf {}: a value goes with field constant, and only with it",
                    l.path
                )));
            }
            leaves.push(Leaf {
                path: path(&l.path),
                field: l.field,
                value: l.value,
            });
        }
        let has = |fields: &[Field]| leaves.iter().any(|l| fields.contains(&l.field));
        let needs: [(Capability, &[Field]); 7] = [
            (Capability::Acl, &[Field::Acl]),
            (Capability::AccessVlan, &[Field::Members, Field::AccessVlan]),
            (Capability::Trunk, &[Field::Members, Field::AllowedVlans]),
            (Capability::NativeVlan, &[Field::NativeVlan]),
            (
                Capability::Disable,
                &[Field::DisablePresence, Field::Enabled],
            ),
            (Capability::Description, &[Field::Description]),
            (Capability::Mtu, &[Field::Mtu]),
        ];
        for cap in &f.capabilities {
            if matches!(
                cap,
                Capability::LinkAggregation | Capability::LacpPassive | Capability::StaticLag
            ) {
                continue;
            }
            match needs.iter().find(|(c, _)| c == cap) {
                Some((_, fields)) if !has(fields) => {
                    return Err(err(format!("capability {cap:?} declared without its leaf")));
                }
                None => return Err(err(format!("capability {cap:?} is not modelled"))),
                _ => {}
            }
        }
        let lag = match f.lag {
            Some(l) => {
                let (prefix, suffix) = l
                    .aggregate
                    .split_once("{group}")
                    .ok_or_else(|| err("lag.aggregate needs {group}".into()))?;
                Some(Lag {
                    prefix: prefix.to_owned(),
                    suffix: suffix.to_owned(),
                    bundle: path(&l.bundle),
                    lacp: path(&l.lacp),
                })
            }
            None => None,
        };
        if lag.is_none()
            && f.capabilities.iter().any(|c| {
                matches!(
                    c,
                    Capability::LinkAggregation | Capability::LacpPassive | Capability::StaticLag
                )
            })
        {
            return Err(err(
                "link-aggregation capabilities need a lag section".into()
            ));
        }
        if (f.capabilities.contains(&Capability::AccessVlan)
            || f.capabilities.contains(&Capability::Trunk))
            && !has(&[Field::Mode])
        {
            return Err(err("VLAN capabilities need a mode leaf".into()));
        }
        Ok(Self {
            name: f.name,
            os: f.os,
            capabilities: f.capabilities,
            namespace: f.namespace,
            port_name,
            ports: f.ports,
            key: f.key,
            operation_attribute: f.operation_attribute,
            replace: f.replace,
            remove: f.remove,
            leaves,
            modes: f.modes,
            native_in_allowed: f.native_in_allowed,
            vlans: f.vlans,
            inventory: f.inventory,
            validate: f.validate,
            lag,
        })
    }

    /// What this model can configure.
    pub fn capabilities(&self) -> Capabilities {
        Capabilities::new(self.capabilities.iter().copied())
    }

    /// Whether to send a separate `<validate>` when the device announces it.
    pub fn validate(&self) -> bool {
        self.validate
    }

    /// How to list the device's ports, if the model says.
    pub fn inventory(&self) -> Option<&Inventory> {
        self.inventory.as_ref()
    }

    /// Whether `port` looks like a port of this kind of device (names that do not
    /// are refused before anything is sent: the simulator closes its session on
    /// them, a real device would refuse them).
    pub fn port_name_fits(&self, port: &PortName) -> bool {
        self.port_name.is_match(port.as_str())
    }

    /// A top-level element of the configuration tree, with the model's namespace.
    fn top(&self, name: &str) -> Element {
        let e = Element::new(name);
        match &self.namespace {
            Some(ns) => e.attr("xmlns", ns.as_str()),
            None => e,
        }
    }

    /// Inserts `leaf` at `path` below `root` (intermediate elements shared).
    fn insert(root: &mut Element, path: &[String], leaf: Element) {
        let mut at = root;
        for step in &path[..path.len() - 1] {
            at = at.get_or_insert(step);
        }
        at.children.push(leaf);
    }

    /// The top-level elements holding `entries` at `list_path` (a container path
    /// ending in the list entry's name), merged into `tops`.
    fn place(&self, tops: &mut Vec<Element>, list_path: &[String], entries: Vec<Element>) {
        let (first, rest) = list_path.split_first().expect("checked at load");
        let at = match tops.iter().position(|t| &t.name == first) {
            Some(i) => i,
            None => {
                tops.push(self.top(first));
                tops.len() - 1
            }
        };
        let mut node = &mut tops[at];
        for step in &rest[..rest.len() - 1] {
            node = node.get_or_insert(step);
        }
        node.children.extend(entries);
    }

    /// The subtree filter reading every port entry and VLAN of the device.
    pub fn filter(&self) -> Vec<Element> {
        // Without entries, `place` builds the containers down to the lists' parents:
        // those containers are what the filter selects.
        let mut tops = Vec::new();
        self.place(&mut tops, &self.ports, vec![]);
        self.place(&mut tops, &self.vlans.list, vec![]);
        tops
    }

    /// The port's element for `desired`: the key, then every leaf the desired state
    /// sets, with the replace operation. `None` for a clean port (no entry).
    pub fn port_element(&self, desired: &DesiredPort) -> Option<Element> {
        if let (Some(lag), Some(m)) = (&self.lag, desired.lag) {
            return Some(self.member_element(lag, desired, m.group.get()));
        }
        let mut port = Element::new(self.ports.last().expect("checked").as_str())
            .attr(self.operation_attribute.as_str(), self.replace.as_str())
            .child(Element::leaf(self.key.as_str(), desired.port.as_str()));
        let mut any = false;
        let (mode, access, allowed, native) = match &desired.vlans {
            VlanMode::Unconfigured => (None, None, Vec::new(), None),
            VlanMode::Access { vlan } => (Some(&self.modes.access), Some(*vlan), Vec::new(), None),
            VlanMode::Trunk { native, allowed } => {
                let mut all: Vec<VlanId> = allowed.iter().collect();
                if self.native_in_allowed
                    && let Some(n) = native
                    && !all.contains(n)
                {
                    all.push(*n);
                    all.sort();
                }
                (Some(&self.modes.trunk), None, all, *native)
            }
        };
        for leaf in &self.leaves {
            let values: Vec<String> = match leaf.field {
                Field::Description => desired
                    .description
                    .iter()
                    .map(|d| d.as_str().to_owned())
                    .collect(),
                Field::Mtu => desired.mtu.iter().map(|m| m.get().to_string()).collect(),
                Field::DisablePresence if desired.admin == AdminState::Down => vec![String::new()],
                Field::Enabled if desired.admin == AdminState::Down => vec!["false".into()],
                Field::DisablePresence | Field::Enabled => vec![],
                Field::Mode => mode.iter().map(|m| (*m).clone()).collect(),
                Field::Members => access
                    .into_iter()
                    .chain(allowed.iter().copied())
                    .map(|v| v.to_string())
                    .collect(),
                Field::AccessVlan => access.iter().map(ToString::to_string).collect(),
                Field::AllowedVlans => allowed.iter().map(ToString::to_string).collect(),
                Field::NativeVlan => native.iter().map(ToString::to_string).collect(),
                Field::Constant => continue,
                Field::Acl => {
                    let name = leaf.path.last().expect("checked");
                    if let Some(acl) = super::acl::element(name, &desired.acl) {
                        any = true;
                        Self::insert(&mut port, &leaf.path, acl);
                    }
                    continue;
                }
            };
            for v in values {
                any = true;
                let name = leaf.path.last().expect("checked").clone();
                Self::insert(&mut port, &leaf.path, Element::leaf(name, v));
            }
        }
        if !any {
            return None;
        }
        // Constants go first in their parent (Junos wants `unit`'s name first), and
        // only where something else was written.
        for leaf in self.leaves.iter().filter(|l| l.field == Field::Constant) {
            let parent_path = &leaf.path[..leaf.path.len() - 1];
            let mut node = Some(&mut port);
            for step in parent_path {
                node = node.and_then(|n| n.children.iter_mut().find(|c| &c.name == step));
            }
            if let Some(parent) = node {
                let name = leaf.path.last().expect("checked").clone();
                parent.children.insert(
                    0,
                    Element::leaf(name, leaf.value.clone().unwrap_or_default()),
                );
            }
        }
        Some(port)
    }

    /// A link-aggregation member's entry: its own description and admin state, and
    /// the leaf naming its aggregate (the VLANs and MTU are the aggregate's).
    fn member_element(&self, lag: &Lag, desired: &DesiredPort, group: u16) -> Element {
        let own = DesiredPort {
            admin: desired.admin,
            description: desired.description.clone(),
            ..DesiredPort::clean(desired.port.clone())
        };
        let mut port = self.port_element(&own).unwrap_or_else(|| {
            Element::new(self.ports.last().expect("checked").as_str())
                .attr(self.operation_attribute.as_str(), self.replace.as_str())
                .child(Element::leaf(self.key.as_str(), desired.port.as_str()))
        });
        let name = lag.bundle.last().expect("checked").clone();
        Self::insert(
            &mut port,
            &lag.bundle,
            Element::leaf(name, lag.aggregate(group)),
        );
        port
    }

    /// The aggregate entry of `desired`'s group (replacing what it held): the
    /// group's VLANs and MTU, and its LACP mode. `None` without `lag`.
    pub fn aggregate_element(&self, desired: &DesiredPort) -> Option<Element> {
        let (lag, m) = (self.lag.as_ref()?, desired.lag?);
        let name = PortName::parse(&lag.aggregate(m.group.get())).ok()?;
        let settings = DesiredPort {
            vlans: desired.vlans.clone(),
            vlan_names: desired.vlan_names.clone(),
            mtu: desired.mtu,
            ..DesiredPort::clean(name.clone())
        };
        let mut e = self.port_element(&settings).unwrap_or_else(|| {
            Element::new(self.ports.last().expect("checked").as_str())
                .attr(self.operation_attribute.as_str(), self.replace.as_str())
                .child(Element::leaf(self.key.as_str(), name.as_str()))
        });
        let word = match m.mode {
            LagMode::Active => Some("active"),
            LagMode::Passive => Some("passive"),
            LagMode::Static => None,
        };
        if let Some(word) = word {
            let mut lacp = Element::new(lag.lacp.last().expect("checked").as_str());
            lacp.children.push(Element::new(word));
            Self::insert(&mut e, &lag.lacp, lacp);
        }
        Some(e)
    }

    /// The aggregate entry's key for `group`, when the model has link aggregation.
    pub fn aggregate_name(&self, group: u16) -> Option<String> {
        self.lag.as_ref().map(|l| l.aggregate(group))
    }

    /// The aggregate a member's entry names, if any.
    pub fn bundle_of(&self, entry: &Element) -> Option<String> {
        entry.text_at(&self.lag.as_ref()?.bundle).map(str::to_owned)
    }

    /// Reads `port` among the port `entries` of one get-config: [`Self::read_port`]
    /// of its entry, and for a link-aggregation member the group, its LACP mode,
    /// and the VLANs and MTU of its aggregate. A member whose own entry carries
    /// VLANs as well reads as not a member (drift: it is rewritten).
    pub fn read_port_in(
        &self,
        port: &PortName,
        entries: &BTreeMap<String, &Element>,
    ) -> Result<ObservedPort, String> {
        let entry = entries.get(port.as_str()).copied();
        let mut observed = self.read_port(port, entry)?;
        let Some(lag) = &self.lag else {
            return Ok(observed);
        };
        observed.lag = Some(None);
        let Some(bundle) = entry.and_then(|e| self.bundle_of(e)) else {
            return Ok(observed);
        };
        let group = lag
            .group_of(&bundle)
            .and_then(|g| LagGroup::new(i64::from(g)).ok())
            .ok_or_else(|| format!("{} {bundle:?} names no aggregate", lag.bundle.join("/")))?;
        let agg_entry = entries.get(bundle.as_str()).copied();
        let name = PortName::parse(&bundle).map_err(|e| e.0)?;
        let agg = self.read_port(&name, agg_entry)?;
        let lacp = agg_entry.and_then(|e| e.all_at(&lag.lacp).into_iter().next());
        let has = |w: &str| lacp.is_some_and(|l| l.children.iter().any(|c| c.name == w));
        let mode = if has("active") {
            LagMode::Active
        } else if has("passive") {
            LagMode::Passive
        } else {
            LagMode::Static
        };
        let own_vlans = observed.vlans.take();
        observed.vlans = agg.vlans;
        observed.mtu = agg.mtu;
        observed.lag = Some(
            (own_vlans == Some(VlanMode::Unconfigured)).then_some(LagMembership { group, mode }),
        );
        Ok(observed)
    }

    /// The element removing the port's entry (the port becomes clean).
    pub fn remove_element(&self, port: &PortName) -> Element {
        Element::new(self.ports.last().expect("checked").as_str())
            .attr(self.operation_attribute.as_str(), self.remove.as_str())
            .child(Element::leaf(self.key.as_str(), port.as_str()))
    }

    /// The element creating VLAN `vlan` (named `name`, else the default name).
    fn vlan_element(&self, vlan: VlanId, name: Option<&VlanName>) -> Element {
        let v = &self.vlans;
        let name = name.map(|n| n.as_str().to_owned()).or_else(|| {
            v.default_name
                .as_ref()
                .map(|d| d.replace("{vlan}", &vlan.to_string()))
        });
        let mut leaves: Vec<Element> = Vec::new();
        leaves.push(Element::leaf(v.id.as_str(), vlan.to_string()));
        if let Some(n) = name {
            leaves.push(Element::leaf(v.name.as_str(), n));
        }
        // The key leaf first.
        leaves.sort_by_key(|l| l.name != v.key);
        let mut e = Element::new(v.list.last().expect("checked").as_str());
        e.children = leaves;
        e
    }

    /// The `<config>` content of one edit: the VLANs to create (merged), then each
    /// port's element. Empty when there is nothing to send.
    pub fn edit(&self, vlans: &[(VlanId, Option<VlanName>)], ports: Vec<Element>) -> Vec<Element> {
        let mut tops = Vec::new();
        if !vlans.is_empty() {
            let entries = vlans
                .iter()
                .map(|(v, n)| self.vlan_element(*v, n.as_ref()))
                .collect();
            self.place(&mut tops, &self.vlans.list, entries);
        }
        if !ports.is_empty() {
            self.place(&mut tops, &self.ports, ports);
        }
        tops
    }

    /// The VLAN IDs defined in `data` (a `<data>` element).
    pub fn read_vlans(&self, data: &Element) -> BTreeSet<VlanId> {
        data.all_at(&self.vlans.list)
            .into_iter()
            .filter_map(|e| e.text_at(std::slice::from_ref(&self.vlans.id)))
            .filter_map(|t| t.parse::<u16>().ok())
            .filter_map(|n| VlanId::new(n).ok())
            .collect()
    }

    /// Every port entry in `data`, by name (`<data>` element).
    pub fn entries<'a>(&self, data: &'a Element) -> BTreeMap<String, &'a Element> {
        data.all_at(&self.ports)
            .into_iter()
            .filter_map(|e| Some((e.text_at(std::slice::from_ref(&self.key))?.to_owned(), e)))
            .collect()
    }

    /// Reads `port` from its entry (`None`: no entry, a clean port). A value the
    /// model cannot parse is an error naming the leaf.
    pub fn read_port(
        &self,
        port: &PortName,
        entry: Option<&Element>,
    ) -> Result<ObservedPort, String> {
        let mut observed = ObservedPort::from_desired(&DesiredPort::clean(port.clone()));
        // ACLs are read where the model has them; LAG membership by `read_port_in`.
        let acl_path = self
            .leaves
            .iter()
            .find(|l| l.field == Field::Acl)
            .map(|l| l.path.clone());
        observed.acl = acl_path.as_ref().map(|_| Vec::new());
        observed.lag = None;
        let Some(entry) = entry else {
            return Ok(observed);
        };
        if let Some(path) = &acl_path {
            let e = entry.all_at(path).into_iter().next();
            observed.acl =
                Some(super::acl::read(e).map_err(|e| format!("{}: {e}", path.join("/")))?);
        }
        let texts = |field: Field| -> Vec<(String, String)> {
            self.leaves
                .iter()
                .filter(|l| l.field == field)
                .flat_map(|l| {
                    entry
                        .all_at(&l.path)
                        .into_iter()
                        .map(|e| (l.path.join("/"), e.text.clone()))
                        .collect::<Vec<_>>()
                })
                .collect()
        };
        let vlans_of = |field: Field| -> Result<Vec<VlanId>, String> {
            let mut out = Vec::new();
            for (p, t) in texts(field) {
                let set = VlanSet::parse(&t).map_err(|e| format!("{p} {t:?}: {e}"))?;
                out.extend(set.iter());
            }
            Ok(out)
        };
        if let Some((p, t)) = texts(Field::Description).into_iter().next() {
            observed.description = Some(Some(
                Description::parse(&t).map_err(|e| format!("{p} {t:?}: {e}"))?,
            ));
        }
        if let Some((p, t)) = texts(Field::Mtu).into_iter().next() {
            let n: i64 = t
                .parse()
                .map_err(|_| format!("{p} {t:?} is not a number"))?;
            observed.mtu = Some(Some(Mtu::new(n).map_err(|e| format!("{p} {t:?}: {e}"))?));
        }
        let down = !texts(Field::DisablePresence).is_empty()
            || texts(Field::Enabled).iter().any(|(_, t)| t == "false");
        observed.admin = Some(if down {
            AdminState::Down
        } else {
            AdminState::Up
        });
        let members = vlans_of(Field::Members)?;
        let access = vlans_of(Field::AccessVlan)?;
        let allowed = vlans_of(Field::AllowedVlans)?;
        let native = vlans_of(Field::NativeVlan)?.first().copied();
        let mode = texts(Field::Mode)
            .into_iter()
            .next()
            .map(|(_, t)| t)
            .or_else(|| {
                (!members.is_empty() || !access.is_empty())
                    .then(|| self.modes.absent.clone())
                    .flatten()
            });
        observed.vlans = Some(match mode {
            None => VlanMode::Unconfigured,
            Some(m) if m == self.modes.access => VlanMode::Access {
                vlan: access
                    .first()
                    .or(members.first())
                    .copied()
                    .unwrap_or(VlanId::new(1).expect("1 is a VLAN")),
            },
            Some(m) if m == self.modes.trunk => {
                let mut set: BTreeSet<VlanId> = members.into_iter().chain(allowed).collect();
                if self.native_in_allowed
                    && let Some(n) = native
                {
                    set.remove(&n);
                }
                VlanMode::Trunk {
                    native,
                    allowed: set.into_iter().collect(),
                }
            }
            Some(other) => return Err(format!("unknown VLAN mode {other:?}")),
        });
        Ok(observed)
    }

    /// The XPath-ish key predicates of an error path that name a port or a VLAN:
    /// (ports named, VLAN IDs named).
    pub fn named_in(&self, text: &str) -> (Vec<String>, Vec<u16>) {
        static PRED: OnceLock<Regex> = OnceLock::new();
        let pred = PRED.get_or_init(|| {
            Regex::new(r#"\[(?:[\w.-]+:)?([\w.-]+)\s*=\s*['"]([^'"]*)['"]\]"#).expect("valid regex")
        });
        let mut ports = Vec::new();
        let mut vlans = Vec::new();
        for c in pred.captures_iter(text) {
            if c[1] == self.key {
                ports.push(c[2].to_owned());
            } else if (c[1] == self.vlans.key || c[1] == self.vlans.id)
                && let Ok(n) = c[2].parse()
            {
                vlans.push(n);
            }
        }
        (ports, vlans)
    }
}

#[cfg(test)]
mod tests;

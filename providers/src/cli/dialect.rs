//! Vendor CLI dialects as data, and the pure engine that uses them.
//!
//! A dialect is a YAML document under `providers/dialects/` (embedded at build time):
//! how to get to privileged and configuration mode, which output lines are errors,
//! one command template per operation, and line rules that parse the device's own
//! `show` output back into an [`ObservedPort`]. Adding a vendor means adding a file,
//! not code, as long as its CLI fits one of the two VLAN styles:
//!
//! - `interface`: VLAN membership is configured inside `interface X` (Cisco, Dell,
//!   Arista). A port is in one *kind* — unconfigured, access, trunk, or trunk with a
//!   native VLAN (`trunk_native`, for devices that need another mode for it, such as
//!   Dell's general mode). Changing kind clears the old kind's settings, enters the
//!   new one and sets everything; staying in the same kind sends only the deltas.
//! - `vlan`: membership is configured inside `vlan N` (`untagged` / `tagged` port,
//!   Brocade). Memberships to drop are removed first (tagged, then untagged), then new
//!   ones added (tagged, then untagged).
//!
//! Two optional parts serve large batches: `read.batch` (one command whose output
//! holds every port's block, cut by [`Dialect::split_batch`], used from
//! `from_ports` ports on) and `interface_range` (identical port blocks as one
//! `interface range` block, [`Dialect::interface_body`] / [`Dialect::range_enter`]).
//! A dialect declares them only where a device here shows they work.
//!
//! An optional `neighbors:` section reads what the ports see (LLDP neighbours, the
//! MAC table; the `neighbors` submodule).
//!
//! An optional `lag:` section gives link aggregation (aggregate interface name,
//! member line per LACP mode, leave and removal lines): how a member reads and what
//! a group's plan sends are in the `lag` submodule.
//!
//! The rooms — every `impl Dialect` block is in this folder, one concern each:
//!
//! | file | what of [`Dialect`] |
//! |---|---|
//! | `dialect.rs` | the file format, [`Dialect::load`], the template renderer, `capabilities`, `error_in` |
//! | `dialect/read.rs` | show output → an observed port (`parse`, `split_batch`, the VLAN table) |
//! | `dialect/plan.rs` | (read, desired) → a port's lines (`plan`, `interface_body`, `range_enter`) |
//! | `dialect/script.rs` | a batch's plans → the lines a session sends, with their owners (`script`, `configuration_lines`) |
//! | `dialect/lag.rs` | link aggregation: aggregate names, member lines, removal, put-back |
//! | `dialect/neighbors.rs` | the `neighbors:` section (its own type, [`neighbors::NeighborSpec`]) |
//! | `dialect/bgp.rs` | the `bgp:` section (its own type, [`bgp::BgpSpec`]) |
//!
//! Everything here is pure: [`Dialect::plan`] turns (observed, desired) into the exact
//! command lines, [`Dialect::parse`] turns show output into an observed port, and
//! [`Dialect::error_in`] finds an error line in a command's output. Rendered values
//! come from the validated types of [`crate::values`]; `render` still refuses a
//! line with a control character, so nothing can smuggle a second command.

pub mod bgp;
mod lag;
pub mod neighbors;
mod plan;
mod read;
pub mod script;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, OnceLock};

use regex::Regex;
use serde::Deserialize;

use crate::model::{
    AdminState, Capabilities, Capability, DesiredPort, LagMode, ObservedPort, PortField, VlanMode,
    diff,
};
use crate::values::{Description, LagGroup, Mtu, PortName, VlanId, VlanName, VlanSet};

pub use lag::{Aggregates, Reading, aggregates_to_remove};
pub use plan::Plan;

/// The dialect files, embedded: (file name, text).
pub const DIALECT_FILES: [(&str, &str); 6] = [
    (
        "cisco_ios.yaml",
        include_str!("../../dialects/cisco_ios.yaml"),
    ),
    (
        "dell_powerconnect.yaml",
        include_str!("../../dialects/dell_powerconnect.yaml"),
    ),
    ("dell10g.yaml", include_str!("../../dialects/dell10g.yaml")),
    (
        "brocade_fastiron.yaml",
        include_str!("../../dialects/brocade_fastiron.yaml"),
    ),
    (
        "arista_eos.yaml",
        include_str!("../../dialects/arista_eos.yaml"),
    ),
    ("frr.yaml", include_str!("../../dialects/frr.yaml")),
];

/// A dialect file that does not load: names the file and the problem.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("dialect {file}: {reason}")]
pub struct DialectError {
    /// The file.
    pub file: String,
    /// What is wrong.
    pub reason: String,
}

/// Every embedded dialect, loaded once. Panics only if an embedded file is broken,
/// which the unit tests rule out.
pub fn builtin() -> &'static [Arc<Dialect>] {
    static ALL: OnceLock<Vec<Arc<Dialect>>> = OnceLock::new();
    ALL.get_or_init(|| {
        DIALECT_FILES
            .iter()
            .map(|(file, text)| Arc::new(Dialect::load(file, text).expect("embedded dialect")))
            .collect()
    })
}

/// The embedded dialect for an `os` value of the ProviderSwitch (`ios`, `powerconnect`,
/// `dell10g`, `fastiron`, `eos`).
pub fn for_os(os: &str) -> Option<Arc<Dialect>> {
    builtin().iter().find(|d| d.os == os).cloned()
}

// ---------------------------------------------------------------------------------
// The file format.

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DialectFile {
    name: String,
    os: String,
    capabilities: Vec<Capability>,
    session: SessionSpec,
    errors: Vec<String>,
    // The port sections: all required unless the dialect configures no port
    // (`capabilities: []`, a BGP speaker such as FRR), which has none of them.
    #[serde(default)]
    vlan_create: Vec<String>,
    #[serde(default)]
    vlan_create_named: Vec<String>,
    #[serde(default)]
    interface_enter: String,
    #[serde(default)]
    interface_range: Option<InterfaceRange>,
    #[serde(default)]
    port: PortTemplates,
    #[serde(default)]
    vlans: Option<VlanTemplates>,
    #[serde(default)]
    read: Option<ReadFile>,
    #[serde(default)]
    lag: Option<lag::LagFile>,
    #[serde(default)]
    save: Vec<SaveStep>,
    #[serde(default)]
    neighbors: Option<neighbors::NeighborsFile>,
    #[serde(default)]
    bgp: Option<bgp::BgpSpec>,
}

/// One configuration block for many ports with identical lines (`interface range`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InterfaceRange {
    /// The line that enters the ports (`interface range {ports}`).
    pub enter: String,
    /// What joins the port names in `{ports}` (`, `).
    pub separator: String,
    /// Most ports in one line (IOS takes five ranges).
    pub max_ports: usize,
}

/// Reading many ports with one command: `read.batch`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct BatchReadFile {
    command: String,
    start: String,
    end: String,
    from_ports: usize,
}

/// Reading many ports with one command whose output holds every port's block (the
/// running configuration), instead of one show command per port.
#[derive(Debug, Clone)]
pub struct BatchRead {
    /// The command (`show running-config`).
    pub command: String,
    /// The line that opens a port's block (`interface {port}`), compared trimmed and
    /// case-insensitively.
    start: String,
    /// The first line after a block (`^\S`: the next unindented line).
    end: Regex,
    /// Used when a read needs at least this many ports: below it, the ports' own
    /// commands cost the device less than the whole configuration.
    pub from_ports: usize,
}

/// How a session gets to configuration mode.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionSpec {
    /// How to reach privileged mode, when the login lands in user mode.
    pub enable: Option<EnableSpec>,
    /// Commands that turn paging off (sent once after enable).
    #[serde(default)]
    pub paging_off: Vec<String>,
    /// Command that enters configuration mode.
    pub configure: String,
    /// Command that leaves one configuration level.
    pub exit: String,
    /// A device whose paging cannot be turned off: its page-full prompt and the key
    /// for the next page (used for the one-command reads that may page, such as
    /// the VLAN table).
    #[serde(default)]
    pub pager: Option<PagerSpec>,
}

/// A pager in a dialect file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PagerSpec {
    /// Regex of the page-full prompt (matched at the end of what has arrived).
    pub prompt: String,
    /// What to type for the next page.
    pub key: String,
}

/// How to reach privileged mode.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnableSpec {
    /// The command (`enable`).
    pub command: String,
    /// Regex matching the end of the password prompt.
    pub password_prompt: String,
}

/// One step of saving the configuration.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SaveStep {
    /// The command (`write memory`).
    pub command: String,
    /// Regex of a confirmation question the device may ask.
    #[serde(default)]
    pub confirm: Option<String>,
    /// What to answer to it.
    #[serde(default)]
    pub answer: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct PortTemplates {
    description_set: Option<String>,
    description_clear: Option<String>,
    admin_up: Option<String>,
    admin_down: Option<String>,
    mtu_set: Option<String>,
    mtu_clear: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "style", rename_all = "snake_case", deny_unknown_fields)]
enum VlanTemplates {
    Interface(Box<InterfaceVlans>),
    Vlan(VlanCentric),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
enum WithoutAllowed {
    All,
    #[default]
    None,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct InterfaceVlans {
    native_in_allowed: bool,
    trunk_without_allowed: WithoutAllowed,
    unconfigured: KindTemplates,
    #[serde(default)]
    access: Option<KindTemplates>,
    #[serde(default)]
    trunk: Option<KindTemplates>,
    #[serde(default)]
    trunk_native: Option<KindTemplates>,
    /// Device mode word (`switchport mode X`) -> kind.
    modes: BTreeMap<String, Kind>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct KindTemplates {
    #[serde(default)]
    enter: Vec<String>,
    #[serde(default)]
    clear: Vec<String>,
    set: Option<String>,
    allowed_replace: Option<String>,
    allowed_none: Option<String>,
    allowed_add: Option<String>,
    allowed_remove: Option<String>,
    native_set: Option<String>,
    native_clear: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct VlanCentric {
    default_vlan: u16,
    vlan_enter: String,
    untagged_add: String,
    untagged_remove: String,
    tagged_add: String,
    tagged_remove: String,
}

/// The kind of VLAN configuration a port is in (interface style).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Kind {
    Unconfigured,
    Access,
    Trunk,
    TrunkNative,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ReadFile {
    commands: Vec<String>,
    #[serde(default)]
    running_config: Option<String>,
    #[serde(default)]
    batch: Option<BatchReadFile>,
    #[serde(default)]
    vlan_table: Option<VlanTableFile>,
    admin_default: AdminWord,
    rules: Vec<RuleFile>,
}

/// Reading the switch's VLAN table: `read.vlan_table`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct VlanTableFile {
    command: String,
    /// A regex whose first group is the VLAN ID of a table line.
    #[serde(rename = "match")]
    pattern: String,
}

/// The command that lists the switch's VLANs and the lines that name one.
#[derive(Debug, Clone)]
pub struct VlanTable {
    /// The command (`show vlan brief`).
    pub command: String,
    pattern: Regex,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
enum AdminWord {
    Up,
    Down,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleFile {
    #[serde(rename = "match")]
    pattern: String,
    field: Field,
}

/// What a matching line says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Field {
    Description,
    Mode,
    AccessVlan,
    NativeVlan,
    AllowedVlans,
    AllowedVlansAdd,
    UntaggedVlan,
    TaggedVlan,
    Mtu,
    AdminDown,
    AdminUp,
    /// The group a link-aggregation member line names.
    ChannelGroup,
    /// The mode word of a member line.
    ChannelMode,
}

// ---------------------------------------------------------------------------------
// The loaded dialect.

/// A loaded, checked dialect.
#[derive(Debug)]
pub struct Dialect {
    /// Dialect name (`cisco_ios`).
    pub name: String,
    /// The ProviderSwitch `os` value it serves.
    pub os: String,
    capabilities: Capabilities,
    /// Session handling.
    pub session: SessionSpec,
    /// Regex of the enable password prompt, compiled.
    pub enable_password_prompt: Option<Regex>,
    /// The device's pager, compiled.
    pub pager: Option<crate::cli::transport::Pager>,
    errors: Vec<Regex>,
    vlan_create: Vec<String>,
    vlan_create_named: Vec<String>,
    interface_enter: String,
    /// Identical port blocks as one range block, where the dialect and the device
    /// have it.
    pub interface_range: Option<InterfaceRange>,
    port: PortTemplates,
    vlans: VlanTemplates,
    read_commands: Vec<String>,
    batch_read: Option<BatchRead>,
    /// How to read the switch's VLAN table, where the dialect's VLANs exist apart
    /// from their ports (interface style): read with every port read, so a port on
    /// a VLAN the switch lacks is not taken as configured.
    pub vlan_table: Option<VlanTable>,
    /// The command that prints the whole running configuration, if the device has a
    /// usable one.
    pub running_config: Option<String>,
    admin_default: AdminState,
    rules: Vec<(Regex, Field)>,
    lag: Option<lag::LagSpec>,
    /// Steps that save the configuration, with compiled confirmation regexes.
    pub save: Vec<(SaveStep, Option<Regex>)>,
    /// How to read what the ports see (LLDP neighbours, learned MACs), where the
    /// dialect says.
    pub neighbors: Option<neighbors::NeighborSpec>,
    /// How to keep BGP neighbours, where the dialect is a BGP speaker's.
    pub bgp: Option<bgp::BgpSpec>,
}

fn compile(file: &str, what: &str, pattern: &str) -> Result<Regex, DialectError> {
    Regex::new(pattern).map_err(|e| DialectError {
        file: file.into(),
        reason: format!("{what} {pattern:?} is not a valid regex: {e}"),
    })
}

impl Dialect {
    /// Loads and checks a dialect document.
    pub fn load(file: &str, text: &str) -> Result<Self, DialectError> {
        let f: DialectFile = crate::yaml::from_str(text).map_err(|e| DialectError {
            file: file.into(),
            reason: e.to_string(),
        })?;
        let err = |reason: String| DialectError {
            file: file.into(),
            reason,
        };
        let caps = Capabilities::new(f.capabilities.iter().copied());
        let (vlans, read) = match (f.vlans, f.read) {
            (Some(v), Some(r)) => (v, r),
            (None, None) if f.capabilities.is_empty() => (
                VlanTemplates::Interface(Box::default()),
                ReadFile {
                    commands: Vec::new(),
                    running_config: None,
                    batch: None,
                    vlan_table: None,
                    admin_default: AdminWord::Up,
                    rules: Vec::new(),
                },
            ),
            _ => {
                return Err(err(
                    "a dialect that configures ports needs both vlans and read; one that \
                     configures none (capabilities: []) has neither"
                        .into(),
                ));
            }
        };
        let bgp = match f.bgp {
            Some(b) => Some(bgp::BgpSpec::load(file, b)?),
            None => None,
        };
        // Every declared capability needs its templates.
        let p = &f.port;
        let need = |cap: Capability, ok: bool, what: &str| {
            if caps.supports(cap) && !ok {
                Err(err(format!("declares {cap} but has no {what}")))
            } else {
                Ok(())
            }
        };
        need(
            Capability::Description,
            p.description_set.is_some() && p.description_clear.is_some(),
            "port.description_set/description_clear",
        )?;
        need(
            Capability::Disable,
            p.admin_up.is_some() && p.admin_down.is_some(),
            "port.admin_up/admin_down",
        )?;
        need(
            Capability::Mtu,
            p.mtu_set.is_some() && p.mtu_clear.is_some(),
            "port.mtu_set/mtu_clear",
        )?;
        need(
            Capability::Acl,
            false,
            "templates for it (not supported by the CLI engine)",
        )?;
        let neighbors = match f.neighbors {
            Some(n) => Some(neighbors::NeighborSpec::load(file, n)?),
            None => None,
        };
        let lag = match f.lag {
            Some(l) => Some(lag::LagSpec::load(file, l)?),
            None => None,
        };
        let has_lag = |mode: LagMode| lag.as_ref().is_some_and(|l| l.supports(mode));
        need(
            Capability::LinkAggregation,
            has_lag(LagMode::Active),
            "lag.join.active",
        )?;
        need(
            Capability::LacpPassive,
            has_lag(LagMode::Passive),
            "lag.join.passive",
        )?;
        need(
            Capability::StaticLag,
            has_lag(LagMode::Static),
            "lag.join.static",
        )?;
        if lag.is_some()
            && (!matches!(vlans, VlanTemplates::Interface(_)) || read.running_config.is_none())
        {
            return Err(err(
                "lag needs vlans.style interface and read.running_config".into(),
            ));
        }
        if let VlanTemplates::Interface(iv) = &vlans {
            need(
                Capability::AccessVlan,
                iv.access.as_ref().is_some_and(|a| a.set.is_some()),
                "vlans.access.set",
            )?;
            let allowed_ok = |k: &KindTemplates| {
                k.allowed_replace.is_some()
                    || (k.allowed_add.is_some() && k.allowed_remove.is_some())
            };
            need(
                Capability::Trunk,
                iv.trunk.as_ref().is_some_and(allowed_ok),
                "vlans.trunk.allowed_replace or allowed_add/allowed_remove",
            )?;
            let native = iv.trunk_native.as_ref().or(iv.trunk.as_ref());
            need(
                Capability::NativeVlan,
                native.is_some_and(|k| {
                    k.native_set.is_some() && k.native_clear.is_some() && allowed_ok(k)
                }),
                "vlans.trunk(_native).native_set/native_clear",
            )?;
        }
        let errors = f
            .errors
            .iter()
            .map(|e| compile(file, "error pattern", e))
            .collect::<Result<Vec<_>, _>>()?;
        let rules = read
            .rules
            .iter()
            .map(|r| Ok((compile(file, "read rule", &r.pattern)?, r.field)))
            .collect::<Result<Vec<_>, DialectError>>()?;
        let batch_read = match &read.batch {
            Some(b) => {
                if !b.start.contains("{port}") {
                    return Err(DialectError {
                        file: file.into(),
                        reason: "read.batch.start must contain {port}".into(),
                    });
                }
                Some(BatchRead {
                    command: b.command.clone(),
                    start: b.start.clone(),
                    end: compile(file, "read.batch.end", &b.end)?,
                    from_ports: b.from_ports.max(1),
                })
            }
            None => None,
        };
        let vlan_table = match &read.vlan_table {
            Some(_) if !matches!(vlans, VlanTemplates::Interface(_)) => {
                return Err(err(
                    "read.vlan_table is for vlans.style interface (a vlan-style port's \
                     membership is inside its VLAN)"
                        .into(),
                ));
            }
            Some(t) => {
                let pattern = compile(file, "read.vlan_table.match", &t.pattern)?;
                if pattern.captures_len() < 2 {
                    return Err(err(
                        "read.vlan_table.match needs a group capturing the VLAN ID".into(),
                    ));
                }
                Some(VlanTable {
                    command: t.command.clone(),
                    pattern,
                })
            }
            None => None,
        };
        let pager = match &f.session.pager {
            Some(p) => Some(crate::cli::transport::Pager {
                prompt: compile(
                    file,
                    "session.pager.prompt",
                    &format!("(?:{}) ?$", p.prompt),
                )?,
                key: p.key.clone(),
            }),
            None => None,
        };
        let enable_password_prompt = match &f.session.enable {
            Some(e) => Some(compile(file, "password prompt", &e.password_prompt)?),
            None => None,
        };
        let save = f
            .save
            .into_iter()
            .map(|s| {
                let re = match &s.confirm {
                    Some(c) => Some(compile(file, "save confirmation", c)?),
                    None => None,
                };
                Ok((s, re))
            })
            .collect::<Result<Vec<_>, DialectError>>()?;
        Ok(Self {
            name: f.name,
            os: f.os,
            capabilities: caps,
            session: f.session,
            enable_password_prompt,
            pager,
            errors,
            vlan_create: f.vlan_create,
            vlan_create_named: f.vlan_create_named,
            interface_enter: f.interface_enter,
            interface_range: match f.interface_range {
                Some(r) if !r.enter.contains("{ports}") || r.max_ports < 2 => {
                    return Err(DialectError {
                        file: file.into(),
                        reason:
                            "interface_range.enter must contain {ports} and max_ports be 2 or more"
                                .into(),
                    });
                }
                other => other,
            },
            port: f.port,
            vlans,
            read_commands: read.commands,
            batch_read,
            vlan_table,
            running_config: read.running_config,
            admin_default: match read.admin_default {
                AdminWord::Up => AdminState::Up,
                AdminWord::Down => AdminState::Down,
            },
            rules,
            lag,
            save,
            neighbors,
            bgp,
        })
    }

    /// What this dialect can configure (and read back).
    pub fn capabilities(&self) -> Capabilities {
        self.capabilities.clone()
    }

    /// The first line of `output` that matches an error pattern, if any.
    pub fn error_in(&self, output: &str) -> Option<String> {
        output
            .lines()
            .map(|l| l.trim_end_matches('\r'))
            .find(|l| self.errors.iter().any(|re| re.is_match(l)))
            .map(|l| l.trim().to_owned())
    }
}

// ---------------------------------------------------------------------------------
// Rendering.

/// Values a template may use: `{port} {vlan} {vlans} {name} {description} {mtu}
/// {group}`.
#[derive(Debug, Clone, Default)]
struct Values<'a> {
    port: Option<&'a str>,
    vlan: Option<VlanId>,
    vlans: Option<String>,
    name: Option<&'a str>,
    description: Option<&'a str>,
    mtu: Option<Mtu>,
    group: Option<LagGroup>,
}

impl<'a> Values<'a> {
    fn port(port: &'a PortName) -> Self {
        Self {
            port: Some(port.as_str()),
            ..Self::default()
        }
    }
    fn vlan(vlan: VlanId) -> Self {
        Self {
            vlan: Some(vlan),
            ..Self::default()
        }
    }
    fn group(group: LagGroup) -> Self {
        Self {
            group: Some(group),
            ..Self::default()
        }
    }
    fn vlans(set: &VlanSet) -> Self {
        Self {
            vlans: Some(set.to_range_string()),
            ..Self::default()
        }
    }
}

/// Fills a template. A placeholder without a value renders empty (the dialect
/// loader's tests render every template). Control characters never reach the
/// output: values are validated types, and any that slipped through are dropped.
fn render(template: &str, v: &Values<'_>) -> String {
    let mut out = template.to_owned();
    let pairs: [(&str, Option<String>); 7] = [
        ("{port}", v.port.map(str::to_owned)),
        ("{vlan}", v.vlan.map(|x| x.get().to_string())),
        ("{vlans}", v.vlans.clone()),
        ("{name}", v.name.map(str::to_owned)),
        ("{description}", v.description.map(str::to_owned)),
        ("{mtu}", v.mtu.map(|m| m.get().to_string())),
        ("{group}", v.group.map(|g| g.get().to_string())),
    ];
    for (key, value) in pairs {
        if out.contains(key) {
            out = out.replace(key, value.as_deref().unwrap_or(""));
        }
    }
    out.retain(|c| !c.is_control());
    out
}

#[cfg(test)]
mod tests {
    use super::read::device_vlan_list;
    use super::*;

    #[test]
    fn every_embedded_dialect_loads_with_a_distinct_os() {
        let all = builtin();
        assert_eq!(all.len(), DIALECT_FILES.len());
        let oses: BTreeSet<&str> = all.iter().map(|d| d.os.as_str()).collect();
        assert_eq!(oses.len(), all.len());
        assert!(for_os("ios").is_some() && for_os("junos").is_none());
    }

    #[test]
    fn the_batch_read_cuts_each_ports_block_and_never_reads_absence_as_clean() {
        let ios = for_os("ios").unwrap();
        let port = |p: &str| PortName::parse(p).unwrap();
        let ports = [
            port("FastEthernet0/1"),
            port("FastEthernet0/10"),
            port("FastEthernet0/2"),
            port("GigabitEthernet0/9"),
        ];
        let text = "show running-config\r\nBuilding configuration...\r\n!\r\nvlan 10\r\n!\r\n\
            interface FastEthernet0/1\r\n!\r\n\
            interface FastEthernet0/10\r\n description ten\r\n switchport mode access\r\n \
            switchport access vlan 10\r\n!\r\n\
            interface fastethernet0/2\r\n shutdown\r\n!\r\nend\r\n";
        let blocks = ios.split_batch(text, &ports);
        assert_eq!(blocks[0].as_deref(), Some(""));
        assert_eq!(
            blocks[1].as_deref(),
            Some(" description ten\n switchport mode access\n switchport access vlan 10\n")
        );
        // Case-insensitive header; the block ends at `!`.
        assert_eq!(blocks[2].as_deref(), Some(" shutdown\n"));
        // Not in the output: not read (the caller asks the port itself).
        assert_eq!(blocks[3], None);
        let ten = ios.parse(&ports[1], blocks[1].as_deref().unwrap());
        assert_eq!(
            ten.vlans,
            Some(VlanMode::Access {
                vlan: VlanId::new(10).unwrap()
            })
        );
        assert_eq!(
            ios.parse(&ports[2], " shutdown\n").admin,
            Some(AdminState::Down)
        );
        // Small reads use the ports' own commands; dialects without it never batch.
        assert_eq!(ios.batch_read_command(2), None);
        assert_eq!(ios.batch_read_command(3), Some("show running-config"));
        assert_eq!(for_os("eos").unwrap().batch_read_command(48), None);
        assert!(
            for_os("eos")
                .unwrap()
                .split_batch(text, &ports)
                .iter()
                .all(Option::is_none)
        );
    }

    #[test]
    fn a_capability_without_templates_is_refused_naming_the_file() {
        let (_, text) = DIALECT_FILES[0];
        let broken = text.replace("  description_set: \"description {description}\"\n", "");
        let err = Dialect::load("broken.yaml", &broken).unwrap_err();
        assert_eq!(err.file, "broken.yaml");
        assert!(err.reason.contains("description"), "{err}");
        let bad_regex = text.replace("'^% '", "'(['");
        assert!(
            Dialect::load("x.yaml", &bad_regex)
                .unwrap_err()
                .reason
                .contains("regex")
        );
    }

    #[test]
    fn rendering_drops_control_characters() {
        let v = Values {
            name: Some("a\nreload"),
            ..Values::default()
        };
        assert_eq!(render("name {name}", &v), "name areload");
    }

    #[test]
    fn device_vlan_lists_parse_ranges_none_and_4095() {
        assert!(device_vlan_list("none").is_empty());
        assert_eq!(device_vlan_list("10,20-22").to_range_string(), "10,20-22");
        assert_eq!(device_vlan_list("1-4095").len(), 4094);
    }

    #[test]
    fn the_vlan_table_is_read_per_dialect_and_a_missing_vlan_is_made_again() {
        let vlan = |n: u16| VlanId::new(n).unwrap();
        // Each dialect's table, as its device prints it (the simulators' output).
        let tables = [
            (
                "ios",
                "\r\nVLAN Name                             Status    Ports\r\n\
                 ---- -------------------------------- --------- --------------\r\n\
                 1    default                          active    Fa0/2, Fa0/3\r\n\
                 \x20                                               Fa0/6, Fa0/7\r\n\
                 10   VLAN10                           active\r\n\
                 20   web                              active\r\n",
            ),
            (
                "powerconnect",
                "\r\nVLAN       Name                         Ports          Type\r\n\
                 -----  ---------------                  -------------  -----\r\n\
                 1      Default                                         Default\r\n\
                 10     web                                             Static\r\n\
                 20                                      1/g1           Static\r\n",
            ),
        ];
        for (os, text) in tables {
            let d = for_os(os).unwrap();
            assert_eq!(
                d.parse_vlan_table(text),
                [vlan(1), vlan(10), vlan(20)].into(),
                "{os}"
            );
        }
        // A vlan-style dialect (membership inside the VLAN) has no table to read.
        assert!(for_os("fastiron").unwrap().vlan_table.is_none());
        let (_, brocade) = DIALECT_FILES[3];
        let with_table = brocade.replace(
            "  admin_default:",
            "  vlan_table: { command: show vlan, match: '^(\\d+)' }\n  admin_default:",
        );
        assert!(
            Dialect::load("b.yaml", &with_table)
                .unwrap_err()
                .reason
                .contains("vlan_table")
        );

        // The port carries its VLAN but the switch lacks it: only the VLAN is made
        // (named as configured), the interface is left as it is.
        let ios = for_os("ios").unwrap();
        let port = PortName::parse("FastEthernet0/1").unwrap();
        let mut desired = DesiredPort::clean(port.clone());
        desired.vlans = VlanMode::Access { vlan: vlan(10) };
        desired
            .vlan_names
            .insert(vlan(10), VlanName::parse("web").unwrap());
        let mut reading = ios.read(
            &port,
            " switchport mode access\n switchport access vlan 10\n",
        );
        reading.observed = reading
            .observed
            .clone()
            .against_vlan_table(&[vlan(1)].into());
        let plan = ios.plan(&reading, &Aggregates::new(), &desired);
        assert_eq!(
            plan.vlans,
            [(vlan(10), Some(VlanName::parse("web").unwrap()))].into()
        );
        assert!(plan.blocks.is_empty(), "{plan:?}");
        // With the VLAN there: nothing to do.
        reading.observed = reading
            .observed
            .clone()
            .against_vlan_table(&[vlan(1), vlan(10)].into());
        assert!(ios.plan(&reading, &Aggregates::new(), &desired).is_empty());
    }
}

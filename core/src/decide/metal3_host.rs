//! Metal3's host half (baremetal-operator v0.14.0-rc.0): a BareMetalHost's
//! `spec.networkInterfaces` as the NICs patchbay drives, and a
//! HostNetworkAttachment as the SwitchPortConfiguration its ports carry. Pure;
//! table-tested.
//!
//! The decisions, written down:
//! - **Which port.** An interface's `switchPort` when given, else the LLDP its NIC
//!   reported at inspection (`status.hardware.nics[].lldp`). Either names a switch
//!   by `switchID` (a BareMetalSwitch's `macAddress`) and a port by `portID` (the
//!   port's name on the device). The port is then looked up among the ports the
//!   infra team **declared** on that BareMetalSwitch: the entries of the patchbay
//!   Switches that name it as their provider, matched on `name`
//!   (case-insensitive). Anything else (an uplink, a typo) is refused with the
//!   reason, and nothing is sent.
//!   Third, patchbay's own neighbour reads: a NIC with neither is looked for by its
//!   MAC on the ports the Switches' neighbour sources read
//!   ([`crate::decide::cabling::discover`], only while the host is not yet
//!   provisioned, never on another host's port), and the port found is kept in the
//!   host's `patchbay.dev/discovered-ports` annotation ([`DISCOVERED_ANNOTATION`]):
//!   a link once made stays until the infra team removes it, so nothing a host's OS
//!   sends later moves it.
//! - **Which NIC.** `macAddress` names it; `name` is matched to its MAC through
//!   inspection (the host's HardwareData `spec.hardware`, else its
//!   `status.hardware`). A NIC inspection has not reported yet waits, saying so.
//! - **What it carries.** The provisioning configuration the infra team set
//!   (`--metal3-provisioning-configuration`) while the host is being inspected,
//!   prepared, provisioned and deprovisioned; once `provisioned`, the
//!   SwitchPortConfiguration derived from its HostNetworkAttachment (same name,
//!   same namespace: [`attachment_configuration`]). The lifecycle is the one every
//!   host follows (`phases`).
//! - **The webhook's rules, here too.** A cluster may run without BMO's webhook, so
//!   its rules (one of `name` / `macAddress`, no duplicates; no `allowedVLANs` in
//!   access mode, a range's start below its end) are checked before any device
//!   change.

use std::collections::BTreeSet;

use serde_json::Value;

use crate::api::configuration::{PortSettingsSpec, SwitchPortConfigurationSpec, VlanSpec};
use crate::api::metal3::BareMetalHost;
use crate::api::metal3_attachment::HostNetworkAttachmentSpec;
use crate::api::server::{CabledPortRef, ServerNic};
use crate::api::{CabledPortKind, ConfigurationRef};
use crate::decide::metal3_switch::{is_mac, rendition_schema};
use crate::decide::validate::FieldError;

/// The label on a SwitchPortConfiguration patchbay derived from a
/// HostNetworkAttachment (its value: the attachment's name).
pub const ATTACHMENT_LABEL: &str = "patchbay.dev/host-network-attachment";

/// The annotation on a BareMetalHost where patchbay keeps the ports it discovered
/// for the host's interfaces: a JSON object, MAC (lower case) to
/// `namespace/SwitchPort`.
pub const DISCOVERED_ANNOTATION: &str = "patchbay.dev/discovered-ports";

/// The smallest MTU a patchbay configuration carries (upstream allows 68).
const MIN_MTU: i64 = 576;

/// The SwitchPortConfiguration a HostNetworkAttachment stands for, or what is wrong
/// with it (each naming its field):
/// - `access`: `nativeVLAN` untagged, nothing tagged (`allowedVLANs` refused, as
///   BMO's webhook refuses it);
/// - `trunk`: `nativeVLAN` untagged (the trunk's native VLAN) and `allowedVLANs`
///   tagged;
/// - `hybrid`: the same port state. Hybrid ports (Huawei, H3C) carry untagged and
///   tagged VLANs side by side; with one untagged VLAN that is what a trunk with a
///   native VLAN carries on every dialect and model patchbay drives, so it is
///   applied as that. A dialect that cannot carry a native VLAN (Arista EOS)
///   refuses both, by its capabilities.
///
/// Ranges are expanded (at most 4094 VLANs); the native VLAN listed again among
/// the tagged ones is dropped there (it is carried untagged).
pub fn attachment_configuration(
    spec: &HostNetworkAttachmentSpec,
) -> Result<SwitchPortConfigurationSpec, Vec<FieldError>> {
    let mut errors = Vec::new();
    let error = |path: &str, reason: String| FieldError {
        path: path.into(),
        reason,
    };
    let mode = spec.mode.as_deref().unwrap_or("access");
    if !matches!(mode, "access" | "trunk" | "hybrid") {
        errors.push(error(
            "spec.mode",
            format!(
                "unsupported value {mode:?}: supported values: \"access\", \"trunk\", \"hybrid\""
            ),
        ));
    }
    if !(1..=4094).contains(&spec.native_vlan) {
        errors.push(error(
            "spec.nativeVLAN",
            format!("VLAN {} is outside 1-4094", spec.native_vlan),
        ));
    }
    if mode == "access" && !spec.allowed_vlans.is_empty() {
        errors.push(error(
            "spec.allowedVLANs",
            "an access port carries only its nativeVLAN: leave allowedVLANs out, or use mode trunk"
                .into(),
        ));
    }
    let mut tagged = BTreeSet::new();
    for (i, entry) in spec.allowed_vlans.iter().enumerate() {
        let path = format!("spec.allowedVLANs[{i}]");
        let bound = |s: &str| s.parse::<i64>().ok().filter(|v| (1..=4094).contains(v));
        let (start, end) = match entry.split_once('-') {
            Some((a, b)) => (bound(a), bound(b)),
            None => (bound(entry), bound(entry)),
        };
        match (start, end) {
            (Some(a), Some(b)) if entry.contains('-') && a >= b => errors.push(error(
                &path,
                format!("range {entry:?}: its start must be below its end"),
            )),
            (Some(a), Some(b)) => tagged.extend(a..=b),
            _ => errors.push(error(
                &path,
                format!("{entry:?} is not a VLAN ID or range within 1-4094 (\"100\", \"100-200\")"),
            )),
        }
    }
    if let Some(mtu) = spec.mtu
        && !(MIN_MTU..=9216).contains(&mtu)
    {
        errors.push(error(
            "spec.mtu",
            format!("{mtu} is outside {MIN_MTU}-9216, the MTUs patchbay configures"),
        ));
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    tagged.remove(&spec.native_vlan);
    Ok(SwitchPortConfigurationSpec {
        port: PortSettingsSpec {
            untagged_vlan: Some(spec.native_vlan),
            vlans: tagged
                .into_iter()
                .map(|id| VlanSpec { id, name: None })
                .collect(),
            mtu: spec.mtu,
            ..Default::default()
        },
        ..Default::default()
    })
}

/// Upstream's HostNetworkAttachment CRD at the pinned version, as patchbay's
/// rendition has it (the tests install the same file).
const CRD_RENDITION: &str =
    include_str!("../../../testbed/crds/metal3.io_hostnetworkattachments.yaml");

/// `patchbay validate` on one HostNetworkAttachment document: what upstream's CRD
/// refuses at `kubectl apply` (field names, types, the mode enum, the item
/// pattern, `nativeVLAN` required), then [`attachment_configuration`]'s refusals.
pub fn check_attachment(doc: &Value) -> Result<SwitchPortConfigurationSpec, Vec<FieldError>> {
    static SCHEMA: std::sync::OnceLock<Value> = std::sync::OnceLock::new();
    let schema = rendition_schema(CRD_RENDITION, &SCHEMA);
    let mut errors = crate::decide::validate::unknown_fields::schema_errors(schema, doc);
    if doc["spec"].get("nativeVLAN").is_none_or(Value::is_null) {
        errors.push(FieldError {
            path: "spec.nativeVLAN".into(),
            reason: "Required value".into(),
        });
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    let spec: HostNetworkAttachmentSpec =
        serde_json::from_value(doc["spec"].clone()).map_err(|e| {
            vec![FieldError {
                path: "spec".into(),
                reason: e.to_string(),
            }]
        })?;
    attachment_configuration(&spec)
}

/// `patchbay validate` on a BareMetalHost's `networkInterfaces`: each refusal of
/// [`network_interfaces`] as a field error (a switch not in `fabric` is not looked
/// up: it is `partial`).
pub fn check_host(host: &BareMetalHost, fabric: &Fabric<'_>) -> Vec<FieldError> {
    network_interfaces(host, fabric, None)
        .refused
        .into_iter()
        .map(|r| match r.split_once(": ") {
            Some((path, reason)) if path.starts_with("spec.") => FieldError {
                path: path.into(),
                reason: reason.into(),
            },
            _ => FieldError {
                path: "spec.networkInterfaces".into(),
                reason: r,
            },
        })
        .collect()
}

/// A BareMetalSwitch as the port lookup needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KnownSwitch<'a> {
    /// Its namespace.
    pub namespace: &'a str,
    /// Its name.
    pub name: &'a str,
    /// Its `macAddress`: what `switchID` names.
    pub mac: &'a str,
}

/// A port the infra team declared: an entry of a Switch whose provider is a
/// BareMetalSwitch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeclaredPort<'a> {
    /// The Switch's namespace (the SwitchPort's).
    pub namespace: &'a str,
    /// The Switch's provider: the BareMetalSwitch's name.
    pub provider: &'a str,
    /// The port's key (the SwitchPort's name).
    pub key: &'a str,
    /// The port's name on the device: what `portID` names.
    pub device_port: &'a str,
}

/// What the lookup reads: the BareMetalSwitches and the ports declared on them.
#[derive(Debug, Clone, Copy, Default)]
pub struct Fabric<'a> {
    /// Every BareMetalSwitch.
    pub switches: &'a [KnownSwitch<'a>],
    /// Every port declared on one.
    pub declared: &'a [DeclaredPort<'a>],
    /// Only some of the switches are known (`patchbay validate` on files): an
    /// interface on a switch not among them is not looked up, rather than refused.
    pub partial: bool,
    /// The host's inspection data: its HardwareData's `spec.hardware`. `None`: the
    /// host's own `status.hardware` (BMO writes both in v0.14).
    pub inspection: Option<&'a Value>,
}

impl Fabric<'_> {
    /// Whether SwitchPort `namespace/name` is a port declared on a BareMetalSwitch.
    pub fn declares(&self, namespace: &str, name: &str) -> bool {
        self.declared
            .iter()
            .any(|d| d.namespace == namespace && d.key == name)
    }
}

/// An interface whose port neither its `switchPort` nor inspection names, and
/// that patchbay has not discovered yet: what discovery looks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unplaced {
    /// The interface's field (`spec.networkInterfaces[i]`).
    pub field: String,
    /// The NIC's name (its MAC when inspection gave none).
    pub nic: String,
    /// Its MAC, lower case.
    pub mac: String,
}

/// The ports patchbay discovered for `host`'s interfaces
/// ([`DISCOVERED_ANNOTATION`]): MAC to (namespace, SwitchPort). An annotation that
/// does not parse counts as none.
pub fn discovered(host: &BareMetalHost) -> std::collections::BTreeMap<String, (String, String)> {
    host.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(DISCOVERED_ANNOTATION))
        .and_then(|v| serde_json::from_str::<std::collections::BTreeMap<String, String>>(v).ok())
        .into_iter()
        .flatten()
        .filter_map(|(mac, port)| {
            let (ns, name) = port.split_once('/')?;
            Some((mac_key(&mac), (ns.to_owned(), name.to_owned())))
        })
        .collect()
}

/// The [`DISCOVERED_ANNOTATION`] value with `found` (MAC, namespace, SwitchPort)
/// added to what `host` has.
pub fn with_discovered(host: &BareMetalHost, found: &[(String, String, String)]) -> String {
    let mut all: std::collections::BTreeMap<String, String> = discovered(host)
        .into_iter()
        .map(|(mac, (ns, name))| (mac, format!("{ns}/{name}")))
        .collect();
    for (mac, ns, name) in found {
        all.insert(mac_key(mac), format!("{ns}/{name}"));
    }
    serde_json::to_string(&all).unwrap_or_default()
}

/// The host's `spec.networkInterfaces` as NICs.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Interfaces {
    /// The NICs to drive.
    pub nics: Vec<ServerNic>,
    /// Interfaces refused, each naming its field and why (nothing is sent for
    /// them).
    pub refused: Vec<String>,
    /// Interfaces waiting (their NIC not inspected yet, no switch port known yet).
    pub waiting: Vec<String>,
    /// The waiting interfaces whose MAC is known but no port: for discovery.
    pub unplaced: Vec<Unplaced>,
}

/// One entry as written.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct Entry {
    #[serde(default)]
    name: Option<String>,
    #[serde(default, rename = "macAddress")]
    mac_address: Option<String>,
    #[serde(default)]
    host_network_attachment: Option<AttachmentRef>,
    #[serde(default)]
    switch_port: Option<SwitchPortId>,
}

#[derive(serde::Deserialize)]
struct AttachmentRef {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    namespace: Option<String>,
}

#[derive(serde::Deserialize, Clone)]
#[serde(rename_all = "camelCase")]
struct SwitchPortId {
    #[serde(default, rename = "switchID")]
    switch_id: String,
    #[serde(default, rename = "portID")]
    port_id: String,
}

/// A NIC inspection reported: its name, MAC and LLDP neighbour.
struct Inspected {
    name: String,
    mac: String,
    lldp: Option<SwitchPortId>,
}

fn inspected(hardware: Option<&Value>) -> Vec<Inspected> {
    let nics = hardware
        .and_then(|h| h.get("nics"))
        .and_then(Value::as_array);
    nics.into_iter()
        .flatten()
        .filter_map(|n| {
            let text = |k: &str| n.get(k).and_then(Value::as_str).map(str::to_owned);
            Some(Inspected {
                name: text("name").unwrap_or_default(),
                mac: mac_key(&text("mac")?),
                lldp: n
                    .get("lldp")
                    .and_then(|l| serde_json::from_value::<SwitchPortId>(l.clone()).ok())
                    .filter(|l| !l.switch_id.is_empty() && !l.port_id.is_empty()),
            })
        })
        .collect()
}

/// A MAC compared: lower case, colons.
fn mac_key(mac: &str) -> String {
    mac.trim().to_ascii_lowercase().replace('-', ":")
}

/// Every MAC address `host` is known by, lower case, once each, in order: its
/// `bootMACAddress`, the `mac` of each entry of seed 003's `spec.ports`, the
/// `macAddress` of each `spec.networkInterfaces` entry, and the `mac` of each NIC
/// its inspection reported (`inspection`: its HardwareData's `spec.hardware`, else
/// its own `status.hardware`). Entries that are not objects, or carry no string
/// there, are skipped.
pub fn host_macs(host: &BareMetalHost, inspection: Option<&Value>) -> Vec<String> {
    let listed = |list: Option<&Value>, field: &'static str| {
        list.and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(move |e| e.get(field).and_then(Value::as_str))
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    let hardware = inspection.or(host.status.hardware.as_ref());
    let mut out: Vec<String> = Vec::new();
    for mac in host
        .spec
        .boot_mac_address
        .iter()
        .cloned()
        .chain(listed(host.spec.ports.as_ref(), "mac"))
        .chain(listed(host.spec.network_interfaces.as_ref(), "macAddress"))
        .chain(listed(hardware.and_then(|h| h.get("nics")), "mac"))
    {
        let mac = mac_key(&mac);
        if !mac.is_empty() && !out.contains(&mac) {
            out.push(mac);
        }
    }
    out
}

/// The host's `spec.networkInterfaces` as the NICs patchbay drives: each cabled to
/// the declared port its `switchPort` (else its inspection's LLDP) names,
/// provisioned with `provisioning` (the infra team's), carrying the configuration
/// derived from its HostNetworkAttachment once provisioned. Entries that break
/// upstream's rules or name no declared port are refused; NICs inspection has not
/// reported wait.
pub fn network_interfaces(
    host: &BareMetalHost,
    fabric: &Fabric<'_>,
    provisioning: Option<&ConfigurationRef>,
) -> Interfaces {
    let mut out = Interfaces::default();
    let Some(entries) = host.spec.network_interfaces.as_ref() else {
        return out;
    };
    let Some(entries) = entries.as_array() else {
        out.refused
            .push("spec.networkInterfaces: not a list".into());
        return out;
    };
    let ns = host.metadata.namespace.as_deref().unwrap_or_default();
    let hardware = inspected(fabric.inspection.or(host.status.hardware.as_ref()));
    let found = discovered(host);
    let mut seen = BTreeSet::new();
    for (i, raw) in entries.iter().enumerate() {
        let at = format!("spec.networkInterfaces[{i}]");
        let entry = match serde_json::from_value::<Entry>(raw.clone()) {
            Ok(e) => e,
            Err(e) => {
                out.refused.push(format!("{at}: {e}"));
                continue;
            }
        };
        // Upstream's patterns (its CRD refuses these at `kubectl apply`).
        let name_ok = |n: &str| {
            n.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        };
        if let Some(n) = entry
            .name
            .as_deref()
            .filter(|n| !n.is_empty() && !name_ok(n))
        {
            out.refused.push(format!(
                "{at}.name: {n:?} is not a NIC name (letters, digits, '.', '_', '-')"
            ));
            continue;
        }
        if let Some(m) = entry
            .mac_address
            .as_deref()
            .filter(|m| !m.is_empty() && !is_mac(m))
        {
            out.refused.push(format!(
                "{at}.macAddress: {m:?} is not a MAC (aa:bb:cc:dd:ee:ff)"
            ));
            continue;
        }
        if let Some(p) = entry.switch_port.as_ref().filter(|p| !is_mac(&p.switch_id)) {
            out.refused.push(format!(
                "{at}.switchPort.switchID: {:?} is not a MAC (the BareMetalSwitch's macAddress)",
                p.switch_id
            ));
            continue;
        }
        let name = entry.name.filter(|n| !n.is_empty());
        let mac = entry
            .mac_address
            .filter(|m| !m.is_empty())
            .map(|m| mac_key(&m));
        let key = match (&name, &mac) {
            (Some(_), Some(_)) => {
                out.refused.push(format!(
                    "{at}: name and macAddress are mutually exclusive: name the NIC by one"
                ));
                continue;
            }
            (None, None) => {
                out.refused
                    .push(format!("{at}: one of name or macAddress is required"));
                continue;
            }
            (Some(n), None) => format!("name {n}"),
            (None, Some(m)) => format!("macAddress {m}"),
        };
        if !seen.insert(key.clone()) {
            out.refused.push(format!("{at}: {key} is listed twice"));
            continue;
        }
        let Some(attachment) = entry
            .host_network_attachment
            .and_then(|a| Some((a.name.filter(|n| !n.is_empty())?, a.namespace)))
        else {
            out.refused.push(format!(
                "{at}.hostNetworkAttachment.name: names no HostNetworkAttachment"
            ));
            continue;
        };
        // The NIC: by MAC as given, or by name through inspection.
        let nic = match (&name, &mac) {
            (_, Some(m)) => hardware.iter().find(|h| &h.mac == m),
            (Some(n), _) => hardware.iter().find(|h| &h.name == n),
            _ => None,
        };
        let nic_mac = match (&mac, nic) {
            (Some(m), _) => m.clone(),
            (None, Some(h)) => h.mac.clone(),
            (None, None) => {
                out.waiting.push(format!(
                    "{at}: NIC {} has not been reported by inspection yet",
                    name.as_deref().unwrap_or_default()
                ));
                continue;
            }
        };
        let nic_name = name
            .clone()
            .or_else(|| nic.map(|h| h.name.clone()).filter(|n| !n.is_empty()))
            .unwrap_or_else(|| nic_mac.clone());
        let cabled = |namespace: &str, name: &str| ServerNic {
            name: nic_name.clone(),
            mac: Some(nic_mac.clone()),
            port: Some(CabledPortRef {
                kind: Some(CabledPortKind::SwitchPort),
                name: name.to_owned(),
                namespace: namespace.to_owned(),
            }),
            provisioning_configuration: provisioning.cloned(),
            configuration: Some(ConfigurationRef {
                name: attachment.0.clone(),
                namespace: Some(attachment.1.clone().unwrap_or_else(|| ns.to_owned())),
            }),
        };
        // The switch port: as given, else the inspection's LLDP, else where
        // patchbay found the NIC's MAC (while still declared).
        let (switch_port, field) = match (entry.switch_port, nic.and_then(|h| h.lldp.clone())) {
            (Some(given), _) => (given, format!("{at}.switchPort")),
            (None, Some(lldp)) => (lldp, format!("the LLDP inspection found on NIC {nic_name}")),
            (None, None) => {
                match found
                    .get(&nic_mac)
                    .filter(|(pns, name)| fabric.declares(pns, name))
                {
                    Some((pns, name)) => out.nics.push(cabled(pns, name)),
                    None => {
                        out.waiting.push(format!(
                            "{at}: no switchPort, inspection has reported no LLDP neighbour for \
                             NIC {nic_name}, and its MAC {nic_mac} has not been found on a \
                             declared port"
                        ));
                        out.unplaced.push(Unplaced {
                            field: at.clone(),
                            nic: nic_name.clone(),
                            mac: nic_mac.clone(),
                        });
                    }
                }
                continue;
            }
        };
        let switch_id = mac_key(&switch_port.switch_id);
        let Some(bms) = fabric.switches.iter().find(|s| mac_key(s.mac) == switch_id) else {
            if fabric.partial {
                continue;
            }
            out.refused.push(format!(
                "{field}: switchID {switch_id} is no BareMetalSwitch's macAddress"
            ));
            continue;
        };
        let declared: Vec<&DeclaredPort<'_>> = fabric
            .declared
            .iter()
            .filter(|d| d.namespace == bms.namespace && d.provider == bms.name)
            .collect();
        let Some(port) = declared.iter().find(|d| {
            d.device_port
                .eq_ignore_ascii_case(switch_port.port_id.trim())
        }) else {
            let names: Vec<&str> = declared.iter().map(|d| d.device_port).collect();
            out.refused.push(format!(
                "{field}: portID {:?} is not declared on BareMetalSwitch {}/{} (declared: {}); \
                 nothing is configured on it",
                switch_port.port_id,
                bms.namespace,
                bms.name,
                if names.is_empty() {
                    "none: no Switch names it as its provider".to_owned()
                } else {
                    names.join(", ")
                }
            ));
            continue;
        };
        out.nics.push(cabled(port.namespace, port.key));
    }
    out
}

#[cfg(test)]
mod tests;

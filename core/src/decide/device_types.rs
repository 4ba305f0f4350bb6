//! Which patchbay backend drives a switch that Metal3 describes by a
//! networking-generic-switch (NGS) device type (`BareMetalSwitch.spec.deviceType`).
//! The map is data (`device_types.yaml` beside this file, embedded): each NGS name
//! is mapped to a backend, an os (and a NETCONF model), what `spec.port` means for
//! it and what such a switch refuses — or refused with its reason. A name neither
//! mapped nor refused is not an NGS device type and is refused listing the
//! supported ones. Never a guess. Pure; table-tested.

use std::sync::OnceLock;

use serde::Deserialize;

use crate::api::{Backend, DeviceOs};

/// The map, as written in `device_types.yaml`.
const MAP: &str = include_str!("device_types.yaml");

/// What `BareMetalSwitch.spec.port` means for a device type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PortMeaning {
    /// The SSH port of the switch's CLI (22 when absent), as NGS uses it.
    Ssh,
    /// The NETCONF-over-SSH port (830 when absent): patchbay speaks NETCONF where
    /// NGS uses the CLI, so NGS's port is not this one.
    Netconf,
}

impl PortMeaning {
    /// The port when `spec.port` is absent.
    pub fn default_port(self) -> u16 {
        match self {
            PortMeaning::Ssh => 22,
            PortMeaning::Netconf => 830,
        }
    }
}

/// How patchbay drives a mapped device type.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Mapped {
    /// NGS's name.
    #[serde(rename = "type")]
    pub name: String,
    /// Other spellings users write for it.
    #[serde(default)]
    pub aliases: Vec<String>,
    /// The backend.
    pub backend: Backend,
    /// The dialect (ssh) or os (netconf).
    pub os: DeviceOs,
    /// The NETCONF device model.
    #[serde(default)]
    pub model: Option<String>,
    /// What `spec.port` means.
    pub port: PortMeaning,
    /// What a configuration on such a switch may not ask for.
    #[serde(default)]
    pub refuses: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Refused {
    #[serde(rename = "type")]
    name: String,
    why: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Map {
    mapped: Vec<Mapped>,
    refused: Vec<Refused>,
}

fn map() -> &'static Map {
    static LOADED: OnceLock<Map> = OnceLock::new();
    LOADED.get_or_init(|| patchbay_model::yaml::from_str(MAP).expect("device_types.yaml loads"))
}

/// How patchbay drives device type `name`, or why it does not (a message naming
/// the type and, for a name NGS does not have, the supported ones).
pub fn device_type(name: &str) -> Result<&'static Mapped, String> {
    let m = map();
    if let Some(found) = m
        .mapped
        .iter()
        .find(|d| d.name == name || d.aliases.iter().any(|a| a == name))
    {
        return Ok(found);
    }
    if let Some(r) = m.refused.iter().find(|r| r.name == name) {
        return Err(format!(
            "deviceType {name} is not driven by patchbay: {}; supported: {}",
            r.why,
            supported().join(", ")
        ));
    }
    Err(format!(
        "deviceType {:?} is not a networking-generic-switch device type; supported: {}",
        patchbay_model::values::excerpt(name),
        supported().join(", ")
    ))
}

/// The device types patchbay drives (aliases after their name).
pub fn supported() -> Vec<String> {
    map()
        .mapped
        .iter()
        .flat_map(|d| std::iter::once(d.name.clone()).chain(d.aliases.iter().cloned()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_map_loads_and_names_each_type_once() {
        let m = map();
        let mut all: Vec<&str> = m
            .mapped
            .iter()
            .flat_map(|d| {
                std::iter::once(d.name.as_str()).chain(d.aliases.iter().map(|a| a.as_str()))
            })
            .chain(m.refused.iter().map(|r| r.name.as_str()))
            .collect();
        let n = all.len();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), n, "a device type is listed twice");
    }

    /// Every device type NGS registers (its pyproject.toml at 42c5979) is either
    /// mapped or refused with a reason: none falls to "not an NGS type".
    #[test]
    fn every_ngs_device_type_is_mapped_or_refused_with_its_reason() {
        let ngs = [
            "netmiko_ovs_linux",
            "netmiko_cisco_ios",
            "netmiko_cisco_nxos",
            "netmiko_cisco_s300",
            "netmiko_huawei",
            "netmiko_huawei_vrpv8",
            "netmiko_arista_eos",
            "netmiko_dell_os10",
            "netmiko_dell_force10",
            "netmiko_dell_powerconnect",
            "netmiko_brocade_fastiron",
            "netmiko_ruijie",
            "netmiko_hpe_comware",
            "netmiko_hp_comware",
            "netmiko_juniper",
            "netmiko_mellanox_mlnxos",
            "netmiko_cumulus",
            "netmiko_cumulus_nvue",
            "netmiko_sonic",
            "netmiko_dell_enterprise_sonic",
            "netmiko_supermicro_smis",
            "netmiko_nokia_srl",
            "netmiko_pluribus",
            "netmiko_aruba_aoscx",
            "netmiko_fake",
            "netconf_openconfig",
        ];
        for name in ngs {
            match device_type(name) {
                Ok(_) => {}
                Err(e) => assert!(
                    e.contains("is not driven by patchbay: ") && !e.contains("not a networking"),
                    "{name}: {e}"
                ),
            }
        }
    }

    #[test]
    fn each_mapped_type_names_its_backend_os_and_port() {
        type Row<'a> = (&'a str, Backend, DeviceOs, Option<&'a str>, u16, bool);
        let table: [Row<'_>; 6] = [
            (
                "netmiko_cisco_ios",
                Backend::Ssh,
                DeviceOs::Ios,
                None,
                22,
                false,
            ),
            (
                "netmiko_dell_powerconnect",
                Backend::Ssh,
                DeviceOs::Powerconnect,
                None,
                22,
                false,
            ),
            (
                "netmiko_brocade_fastiron",
                Backend::Ssh,
                DeviceOs::Fastiron,
                None,
                22,
                false,
            ),
            (
                "netmiko_arista_eos",
                Backend::Ssh,
                DeviceOs::Eos,
                None,
                22,
                true,
            ),
            (
                "netmiko_juniper",
                Backend::Netconf,
                DeviceOs::Junos,
                Some("junos-els"),
                830,
                false,
            ),
            // The spelling of baremetal-operator's own comment.
            (
                "netmiko_juniper_junos",
                Backend::Netconf,
                DeviceOs::Junos,
                Some("junos-els"),
                830,
                false,
            ),
        ];
        for (name, backend, os, model, port, refuses) in table {
            let d = device_type(name).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(d.backend, backend, "{name}");
            assert_eq!(d.os, os, "{name}");
            assert_eq!(d.model.as_deref(), model, "{name}");
            assert_eq!(d.port.default_port(), port, "{name}");
            assert_eq!(d.refuses.is_some(), refuses, "{name}");
        }
    }

    #[test]
    fn refusals_say_why_and_list_what_is_supported() {
        let ovs = device_type("netmiko_ovs_linux").unwrap_err();
        assert!(
            ovs.contains("OVSDB") && ovs.contains("ProviderSwitch"),
            "{ovs}"
        );
        assert!(ovs.contains("supported: netmiko_cisco_ios"), "{ovs}");
        let os10 = device_type("netmiko_dell_os10").unwrap_err();
        assert!(os10.contains("dell10g"), "{os10}");
        let typo = device_type("netmiko_cisco_iso").unwrap_err();
        assert!(
            typo.starts_with("deviceType \"netmiko_cisco_iso\" is not a networking-generic-switch device type; supported: "),
            "{typo}"
        );
        assert!(typo.contains("netmiko_juniper_junos"), "{typo}");
    }

    /// Each mapped os is one the backend drives, and a NETCONF model exists for it.
    #[test]
    fn every_mapping_is_one_the_backends_have() {
        for d in &map().mapped {
            if let Some(model) = &d.model {
                assert!(
                    patchbay_model::catalogue::netconf_model_exists(
                        serde_json::to_value(d.os).unwrap().as_str().unwrap(),
                        Some(model)
                    ),
                    "{}: no NETCONF model {model}",
                    d.name
                );
            }
            assert_eq!(
                d.backend == Backend::Netconf,
                d.port == PortMeaning::Netconf,
                "{}: the port's meaning follows the backend",
                d.name
            );
        }
    }

    /// docs/metal3-switches.md names every device type of the map, so the page and
    /// the data cannot part.
    #[test]
    fn the_docs_page_names_every_device_type() {
        let doc = include_str!("../../../docs/metal3-switches.md");
        let m = map();
        let names = m
            .mapped
            .iter()
            .flat_map(|d| std::iter::once(&d.name).chain(d.aliases.iter()))
            .chain(m.refused.iter().map(|r| &r.name));
        for name in names {
            assert!(
                doc.contains(&format!("`{name}`")),
                "docs/metal3-switches.md does not name {name}"
            );
        }
    }
}

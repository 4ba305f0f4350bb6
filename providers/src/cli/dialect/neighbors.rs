//! A dialect's `neighbors:` section: the show commands that list a switch's LLDP
//! neighbours and learned MAC addresses, and the line rules that read them, with the
//! device's port-name abbreviations (`Gi1/0/1` → `GigabitEthernet1/0/1`) so what it
//! prints compares with the Switch's port names. Pure.
//!
//! The LLDP answer is cut into records: a line matching `record` starts one; a line
//! matching `section` (where the device names the local port once above its
//! neighbours, as EOS does) sets the local port for the records that follow. In a
//! record each field takes the first line its rule matches (capture group 1, quotes
//! stripped). A chassis or port id that reads as a MAC is a MAC; otherwise a chassis
//! id is `local` and a port id an interface name.
//!
//! The MAC table answer is read row by row: `row` captures the MAC and the port by
//! name (`mac`, `port`); other lines are skipped.

use std::collections::BTreeMap;

use regex::Regex;
use serde::Deserialize;

use super::{DialectError, compile};
use crate::neighbors::{IdSubtype, LldpNeighbor, normalise_mac};

/// The file format of `neighbors:`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NeighborsFile {
    lldp: LldpFile,
    #[serde(default)]
    macs: Option<MacsFile>,
    #[serde(default)]
    abbreviations: BTreeMap<String, String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LldpFile {
    command: String,
    record: String,
    #[serde(default)]
    section: Option<String>,
    local_port: Option<String>,
    chassis_id: String,
    port_id: String,
    #[serde(default)]
    port_description: Option<String>,
    #[serde(default)]
    system_name: Option<String>,
    #[serde(default)]
    management_address: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct MacsFile {
    command: String,
    row: String,
}

/// A loaded `neighbors:` section.
#[derive(Debug)]
pub struct NeighborSpec {
    /// The command that lists the LLDP neighbours.
    pub lldp_command: String,
    /// The command that lists the learned MAC addresses, if the dialect reads them.
    pub macs_command: Option<String>,
    record: Regex,
    section: Option<Regex>,
    local_port: Option<Regex>,
    chassis_id: Regex,
    port_id: Regex,
    port_description: Option<Regex>,
    system_name: Option<Regex>,
    management_address: Option<Regex>,
    row: Option<Regex>,
    abbreviations: Vec<(String, String)>,
}

impl NeighborSpec {
    /// Compiles `f` (errors name the file and the rule).
    pub fn load(file: &str, f: NeighborsFile) -> Result<Self, DialectError> {
        let opt = |what: &str, p: &Option<String>| {
            p.as_deref().map(|p| compile(file, what, p)).transpose()
        };
        let l = &f.lldp;
        if l.local_port.is_none() && l.section.is_none() {
            return Err(DialectError {
                file: file.into(),
                reason: "neighbors.lldp needs local_port or section".into(),
            });
        }
        let row = match &f.macs {
            Some(m) => {
                let r = compile(file, "neighbors.macs.row", &m.row)?;
                let has = |name: &str| r.capture_names().flatten().any(|n| n == name);
                if !(has("mac") && has("port")) {
                    return Err(DialectError {
                        file: file.into(),
                        reason: "neighbors.macs.row needs the groups (?P<mac>…) and (?P<port>…)"
                            .into(),
                    });
                }
                Some(r)
            }
            None => None,
        };
        // Longest abbreviation first, so `Te` is not read as `T…`.
        let mut abbreviations: Vec<(String, String)> = f.abbreviations.into_iter().collect();
        abbreviations.sort_by_key(|(short, _)| std::cmp::Reverse(short.len()));
        Ok(Self {
            lldp_command: l.command.clone(),
            macs_command: f.macs.as_ref().map(|m| m.command.clone()),
            record: compile(file, "neighbors.lldp.record", &l.record)?,
            section: opt("neighbors.lldp.section", &l.section)?,
            local_port: opt("neighbors.lldp.local_port", &l.local_port)?,
            chassis_id: compile(file, "neighbors.lldp.chassis_id", &l.chassis_id)?,
            port_id: compile(file, "neighbors.lldp.port_id", &l.port_id)?,
            port_description: opt("neighbors.lldp.port_description", &l.port_description)?,
            system_name: opt("neighbors.lldp.system_name", &l.system_name)?,
            management_address: opt("neighbors.lldp.management_address", &l.management_address)?,
            row,
            abbreviations,
        })
    }

    /// `port` with the device's abbreviation expanded (`Gi1/0/1` →
    /// `GigabitEthernet1/0/1`, `Et1` → `Ethernet1`); a full name is kept.
    pub fn port_name(&self, port: &str) -> String {
        for (short, long) in &self.abbreviations {
            if let Some(rest) = port.strip_prefix(short.as_str())
                && rest.starts_with(|c: char| c.is_ascii_digit())
            {
                return format!("{long}{rest}");
            }
        }
        port.to_owned()
    }

    /// The LLDP neighbours in the answer to [`NeighborSpec::lldp_command`], by local
    /// port (expanded).
    pub fn lldp(&self, text: &str) -> Vec<(String, LldpNeighbor)> {
        let mut found = Vec::new();
        let mut section_port: Option<String> = None;
        let mut record: Vec<&str> = Vec::new();
        let mut flush = |record: &mut Vec<&str>, section_port: &Option<String>| {
            if !record.is_empty() {
                if let Some(n) = self.record(record, section_port.as_deref()) {
                    found.push(n);
                }
                record.clear();
            }
        };
        for line in text.lines() {
            let line = line.trim_end_matches('\r');
            if let Some(c) = self.section.as_ref().and_then(|s| s.captures(line)) {
                flush(&mut record, &section_port);
                section_port = c.get(1).map(|m| m.as_str().to_owned());
                continue;
            }
            if self.record.is_match(line) {
                flush(&mut record, &section_port);
            }
            record.push(line);
        }
        flush(&mut record, &section_port);
        found
    }

    fn record(&self, lines: &[&str], section_port: Option<&str>) -> Option<(String, LldpNeighbor)> {
        let field = |r: &Regex| {
            lines.iter().find_map(|l| {
                let c = r.captures(l)?;
                let v = c.get(1)?.as_str().trim().trim_matches('"').trim();
                (!v.is_empty()).then(|| v.to_owned())
            })
        };
        let opt = |r: &Option<Regex>| r.as_ref().and_then(field);
        let local = opt(&self.local_port).or_else(|| section_port.map(str::to_owned))?;
        let chassis = field(&self.chassis_id)?;
        let port = field(&self.port_id)?;
        let (chassis_id_subtype, chassis_id) = match normalise_mac(&chassis) {
            Some(m) => (IdSubtype::Mac, m),
            None => (IdSubtype::Local, chassis),
        };
        let (port_id_subtype, port_id) = match normalise_mac(&port) {
            Some(m) => (IdSubtype::Mac, m),
            None => (IdSubtype::InterfaceName, port),
        };
        Some((
            self.port_name(&local),
            LldpNeighbor {
                chassis_id,
                chassis_id_subtype,
                port_id,
                port_id_subtype,
                port_description: opt(&self.port_description),
                system_name: opt(&self.system_name),
                management_address: opt(&self.management_address),
            },
        ))
    }

    /// The learned MAC addresses in the answer to [`NeighborSpec::macs_command`], as
    /// (port, MAC), ports expanded, MACs normalised.
    pub fn macs(&self, text: &str) -> Vec<(String, String)> {
        let Some(row) = &self.row else {
            return Vec::new();
        };
        text.lines()
            .filter_map(|l| {
                let c = row.captures(l.trim_end_matches('\r'))?;
                let mac = normalise_mac(c.name("mac")?.as_str())?;
                Some((self.port_name(c.name("port")?.as_str()), mac))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::super::for_os;
    use crate::neighbors::IdSubtype;

    const DOCS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/documented/");

    fn doc(name: &str) -> String {
        std::fs::read_to_string(format!("{DOCS}{name}")).unwrap()
    }

    #[test]
    fn cisco_ios_lldp_and_mac_table_as_documented() {
        let ios = for_os("ios").unwrap();
        let spec = ios.neighbors.as_ref().expect("ios reads neighbours");
        assert_eq!(spec.lldp_command, "show lldp neighbors detail");
        let found = spec.lldp(&doc("cisco_ios_lldp_neighbors_detail.txt"));
        assert_eq!(found.len(), 2, "{found:#?}");
        let (port, host) = &found[0];
        assert_eq!(port, "GigabitEthernet1/0/7");
        assert_eq!(
            (host.chassis_id.as_str(), host.chassis_id_subtype),
            ("52:54:00:0a:00:01", IdSubtype::Mac)
        );
        assert_eq!(
            (host.port_id.as_str(), host.port_id_subtype),
            ("52:54:00:0a:00:01", IdSubtype::Mac)
        );
        assert_eq!(host.system_name.as_deref(), Some("rack-1-a"));
        assert_eq!(host.port_description.as_deref(), Some("eth0"));
        assert_eq!(host.management_address.as_deref(), Some("10.10.10.7"));
        let (port, switch) = &found[1];
        assert_eq!(port, "TenGigabitEthernet1/1/1");
        assert_eq!(
            (switch.port_id.as_str(), switch.port_id_subtype),
            ("Gi0/1", IdSubtype::InterfaceName)
        );
        assert_eq!(
            switch.system_name.as_deref(),
            Some("access-sw-2.example.com")
        );
        let macs = spec.macs(&doc("cisco_ios_mac_address_table.txt"));
        assert_eq!(
            macs,
            [
                ("GigabitEthernet1/0/7", "52:54:00:0a:00:01"),
                ("GigabitEthernet1/0/8", "52:54:00:0b:00:01"),
                ("TenGigabitEthernet1/1/1", "00:50:56:ab:cd:ef"),
            ]
            .map(|(p, m)| (p.to_owned(), m.to_owned()))
        );
    }

    #[test]
    fn arista_eos_lldp_sections_and_mac_table_as_documented() {
        let eos = for_os("eos").unwrap();
        let spec = eos.neighbors.as_ref().expect("eos reads neighbours");
        let found = spec.lldp(&doc("arista_eos_lldp_neighbors_detail.txt"));
        assert_eq!(found.len(), 2, "Ethernet2 sees nobody: {found:#?}");
        let (port, host) = &found[0];
        assert_eq!(port, "Ethernet1");
        assert_eq!(host.port_id, "52:54:00:0a:00:01");
        assert_eq!(
            host.system_name.as_deref(),
            Some("rack-1-a"),
            "quotes stripped"
        );
        assert_eq!(host.management_address.as_deref(), Some("10.10.10.7"));
        let (port, spine) = &found[1];
        assert_eq!(port, "Ethernet49/1");
        assert_eq!(
            (spine.port_id.as_str(), spine.port_id_subtype),
            ("Ethernet7", IdSubtype::InterfaceName)
        );
        assert_eq!(spine.port_description.as_deref(), Some("uplink to leaf-3"));
        let macs = spec.macs(&doc("arista_eos_mac_address_table.txt"));
        assert_eq!(
            macs,
            [
                ("Ethernet1", "52:54:00:0a:00:01"),
                ("Ethernet2", "52:54:00:0b:00:01")
            ]
            .map(|(p, m)| (p.to_owned(), m.to_owned()))
        );
        // A full name stays; an abbreviation is expanded only before a digit.
        assert_eq!(spec.port_name("Ethernet3"), "Ethernet3");
        assert_eq!(spec.port_name("Et3/1"), "Ethernet3/1");
        assert_eq!(spec.port_name("Etx"), "Etx");
    }
}

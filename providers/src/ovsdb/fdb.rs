//! Open vSwitch's learned MAC addresses (the `NORMAL` action's MAC table), which
//! neither OVSDB (no FDB table) nor OpenFlow exposes: read with the `fdb/show BRIDGE`
//! command of ovs-vswitchd's control socket (the unixctl JSON-RPC that `ovs-appctl`
//! speaks), whose answer is a text table of OpenFlow port numbers. This module
//! parses it and maps port numbers to names. Pure.

use std::collections::BTreeMap;

use crate::neighbors::normalise_mac;

/// One learned address: the OpenFlow port number, the VLAN, the MAC (normalised).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Learned {
    /// OpenFlow port number.
    pub ofport: i64,
    /// VLAN it was learned on (0: untagged on an access-less port).
    pub vlan: u16,
    /// The MAC address, normalised.
    pub mac: String,
    /// Seconds since a frame from it was last seen on the port.
    pub age: Option<u32>,
}

/// The rows of `fdb/show`'s answer:
///
/// ```text
///  port  VLAN  MAC                Age
///     1     0  52:54:00:aa:00:01    0
/// LOCAL     0  3a:d3:90:41:d3:d4    3
/// ```
///
/// Rows of the bridge's own port (`LOCAL`) and lines that are not rows are skipped;
/// an answer without the header is refused (not an FDB).
pub fn parse(text: &str) -> Result<Vec<Learned>, String> {
    let mut lines = text.lines();
    let header = lines.next().unwrap_or_default();
    if !header.split_whitespace().eq(["port", "VLAN", "MAC", "Age"]) {
        return Err(format!(
            "fdb/show answered {:?}, not a MAC table",
            header.chars().take(80).collect::<String>()
        ));
    }
    Ok(lines
        .filter_map(|line| {
            let cols: Vec<&str> = line.split_whitespace().collect();
            let [port, vlan, mac, age] = cols.as_slice() else {
                return None;
            };
            Some(Learned {
                ofport: port.parse().ok()?,
                vlan: vlan.parse().ok()?,
                mac: normalise_mac(mac)?,
                age: age.parse().ok(),
            })
        })
        .collect())
}

/// `learned` as (port name, MAC, age) through `names` (OpenFlow port number →
/// interface name); addresses on ports without a name are dropped.
pub fn by_name(
    learned: &[Learned],
    names: &BTreeMap<i64, String>,
) -> Vec<(String, String, Option<u32>)> {
    learned
        .iter()
        .filter_map(|l| Some((names.get(&l.ofport)?.clone(), l.mac.clone(), l.age)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mac_table_is_read_per_port() {
        let text = " port  VLAN  MAC                Age\n    1     0  52:54:00:AA:00:01    0\n    \
                    2    10  52:54:00:aa:00:02  117\nLOCAL     0  3a:d3:90:41:d3:d4    3\n";
        let learned = parse(text).unwrap();
        assert_eq!(
            learned,
            vec![
                Learned {
                    ofport: 1,
                    vlan: 0,
                    mac: "52:54:00:aa:00:01".into(),
                    age: Some(0),
                },
                Learned {
                    ofport: 2,
                    vlan: 10,
                    mac: "52:54:00:aa:00:02".into(),
                    age: Some(117),
                },
            ]
        );
        let names = BTreeMap::from([(1, "tv1".to_owned())]);
        assert_eq!(
            by_name(&learned, &names),
            vec![("tv1".to_owned(), "52:54:00:aa:00:01".to_owned(), Some(0))]
        );
        assert_eq!(
            parse(" port  VLAN  MAC                Age\n").unwrap(),
            vec![]
        );
        let e = parse("\"fdb/show\" is not a valid command").unwrap_err();
        assert!(e.contains("not a MAC table"), "{e}");
    }
}

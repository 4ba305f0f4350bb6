//! The per-dialect cases shared by the simulator tests (tests/ssh_backend.rs) and the
//! golden-file tests (tests/ssh_golden.rs): which simulator model, which ports, and
//! the desired port states each dialect is proven with.

#![allow(dead_code)]

use std::collections::BTreeMap;

use patchbay_providers::cli::{CliOptions, CliSwitch, Dialect, HostKeyPolicy, SshTarget, dialect};
use patchbay_providers::secret::SecretString;
use patchbay_providers::values::{Description, Mtu, PortName, VlanId, VlanName, VlanSet};
use patchbay_providers::{AdminState, Capability, DesiredPort, VlanMode};

use patchbay_testbed::SimSwitch;

/// One dialect under test.
pub struct DialectCase {
    /// ProviderSwitch `os`.
    pub os: &'static str,
    /// fake-switches model.
    pub model: &'static str,
    /// Two ports of the model.
    pub ports: [&'static str; 2],
    /// A port the model does not have (None where the simulator drops the session).
    pub missing_port: Option<&'static str>,
}

pub const DIALECTS: [DialectCase; 5] = [
    DialectCase {
        os: "ios",
        model: "cisco_generic",
        ports: ["FastEthernet0/1", "FastEthernet0/2"],
        missing_port: Some("FastEthernet0/99"),
    },
    DialectCase {
        os: "powerconnect",
        model: "dell_generic",
        ports: ["ethernet 1/g1", "ethernet 1/g2"],
        missing_port: Some("ethernet 1/g9"),
    },
    DialectCase {
        os: "dell10g",
        model: "dell10g_generic",
        ports: ["tengigabitethernet 0/0/1", "tengigabitethernet 0/0/2"],
        missing_port: Some("tengigabitethernet 0/0/9"),
    },
    DialectCase {
        os: "fastiron",
        model: "brocade_generic",
        ports: ["ethernet 1/1", "ethernet 1/2"],
        missing_port: Some("ethernet 1/9"),
    },
    DialectCase {
        os: "eos",
        model: "arista_generic",
        ports: ["Ethernet1", "Ethernet2"],
        missing_port: None,
    },
];

pub fn case(os: &str) -> &'static DialectCase {
    DIALECTS.iter().find(|c| c.os == os).expect("dialect case")
}

pub fn dialect_of(os: &str) -> std::sync::Arc<Dialect> {
    dialect::for_os(os).expect("dialect")
}

pub fn port(name: &str) -> PortName {
    PortName::parse(name).expect("port name")
}

pub fn vlan(n: u16) -> VlanId {
    VlanId::new(n).expect("vlan")
}

pub fn vlan_name(name: &str) -> VlanName {
    VlanName::parse(name).expect("VLAN name")
}

fn named(pairs: &[(u16, &str)]) -> BTreeMap<VlanId, VlanName> {
    pairs
        .iter()
        .map(|(v, n)| (vlan(*v), VlanName::parse(n).expect("name")))
        .collect()
}

/// The named desired states a dialect is proven with, filtered by what it supports.
pub fn states(os: &str, port_name: &str) -> Vec<(&'static str, DesiredPort)> {
    let caps = dialect_of(os).capabilities();
    let p = port(port_name);
    let mut out = Vec::new();
    let described = caps.supports(Capability::Description);
    if caps.supports(Capability::AccessVlan) {
        let mut d = DesiredPort::clean(p.clone());
        d.vlans = VlanMode::Access { vlan: vlan(100) };
        d.vlan_names = named(&[(100, "web")]);
        if described {
            d.description = Some(Description::parse("web server 1 (rack 4)").expect("desc"));
        }
        out.push(("access", d));
    }
    if caps.supports(Capability::NativeVlan) {
        let mut d = DesiredPort::clean(p.clone());
        d.vlans = VlanMode::Trunk {
            native: Some(vlan(100)),
            allowed: VlanSet::parse("200-201,300").expect("set"),
        };
        d.vlan_names = named(&[(100, "web"), (200, "storage")]);
        out.push(("trunk_native", d));
    }
    if caps.supports(Capability::Trunk) {
        let mut d = DesiredPort::clean(p.clone());
        d.vlans = VlanMode::Trunk {
            native: None,
            allowed: VlanSet::parse("200,300-302").expect("set"),
        };
        out.push(("trunk", d));
    }
    if caps.supports(Capability::Disable) && caps.supports(Capability::AccessVlan) {
        let mut d = DesiredPort::clean(p.clone());
        d.vlans = VlanMode::Access { vlan: vlan(200) };
        d.admin = AdminState::Down;
        out.push(("disabled", d));
    }
    if caps.supports(Capability::Mtu) {
        let mut d = DesiredPort::clean(p.clone());
        d.vlans = VlanMode::Access { vlan: vlan(100) };
        d.mtu = Some(Mtu::new(9000).expect("mtu"));
        out.push(("mtu", d));
    }
    out.push(("clean", DesiredPort::clean(p)));
    out
}

/// A backend for a simulated switch, pinned to its real host key, journalling.
pub fn backend(os: &str, sim: &SimSwitch) -> CliSwitch {
    backend_with(
        os,
        sim,
        HostKeyPolicy::Fingerprint(sim.host_key_fingerprint.clone()),
        &sim.password,
    )
}

pub fn backend_with(
    os: &str,
    sim: &SimSwitch,
    host_key: HostKeyPolicy,
    password: &str,
) -> CliSwitch {
    backend_speaking(dialect_of(os), sim, host_key, password)
}

/// A journalling backend for a simulated switch speaking `dialect`.
pub fn backend_speaking(
    dialect: std::sync::Arc<Dialect>,
    sim: &SimSwitch,
    host_key: HostKeyPolicy,
    password: &str,
) -> CliSwitch {
    CliSwitch::new(
        SshTarget {
            address: sim.address.clone(),
            port: sim.port,
            username: sim.username.clone(),
            auth: patchbay_providers::cli::Auth::Password(SecretString::new(password)),
            host_key,
            connect_timeout: std::time::Duration::from_secs(10),
        },
        Some(SecretString::new(sim.enable_password.clone())),
        dialect,
        CliOptions {
            save_config: true,
            command_timeout: std::time::Duration::from_secs(10),
        },
    )
    .with_journal()
}

/// Golden-file directory of a dialect.
pub fn golden_dir(os: &str) -> std::path::PathBuf {
    let d = dialect_of(os);
    // Under providers/ whichever crate's tests include this file.
    let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let providers = if root.ends_with("providers") {
        root
    } else {
        root.join("providers")
    };
    providers.join("tests/data").join(&d.name)
}

/// An access port on `v`.
pub fn access_port(p: &str, v: u16) -> DesiredPort {
    let mut d = DesiredPort::clean(port(p));
    d.vlans = VlanMode::Access { vlan: vlan(v) };
    d
}

/// A trunk port with `native` and `allowed`.
pub fn trunk_port(p: &str, native: Option<u16>, allowed: &[u16]) -> DesiredPort {
    let mut d = DesiredPort::clean(port(p));
    d.vlans = VlanMode::Trunk {
        native: native.map(vlan),
        allowed: allowed.iter().map(|v| vlan(*v)).collect(),
    };
    d
}

/// Ports whose VLANs a Cisco switch must end up having, named and not: access 10
/// and 20, a trunk with native 100 and named 101 (`web`) and 102 (`db`), a trunk
/// 200–202, on FastEthernet0/1–4. Every VLAN they carry: [`VLAN_TABLE_CASE_VLANS`].
pub fn vlan_table_case() -> Vec<DesiredPort> {
    let mut named = trunk_port("FastEthernet0/3", Some(100), &[101, 102]);
    named.vlan_names = [(vlan(101), vlan_name("web")), (vlan(102), vlan_name("db"))].into();
    vec![
        access_port("FastEthernet0/1", 10),
        access_port("FastEthernet0/2", 20),
        named,
        trunk_port("FastEthernet0/4", None, &[200, 201, 202]),
    ]
}

/// The VLANs [`vlan_table_case`]'s ports carry.
pub const VLAN_TABLE_CASE_VLANS: [u16; 8] = [10, 20, 100, 101, 102, 200, 201, 202];

/// The VLAN IDs a Cisco simulator's own `show vlan brief` lists.
pub async fn cisco_vlan_table(cli: &CliSwitch) -> Vec<u16> {
    let out = cli.run_raw(&["show vlan brief"]).await.unwrap();
    out[0]
        .as_ref()
        .unwrap()
        .lines()
        .filter_map(|l| l.split_whitespace().next()?.parse().ok())
        .collect()
}

/// Deletes VLAN `v` on a Cisco simulator as someone at its console would.
pub async fn delete_cisco_vlan_by_hand(cli: &CliSwitch, v: u16) {
    let typed = cli
        .run_raw(&["configure terminal", &format!("no vlan {v}"), "exit"])
        .await
        .unwrap();
    assert!(typed.iter().all(Result::is_ok), "{typed:?}");
}

/// The VLANs a Cisco simulator's port carries, read back through the SSH backend.
pub async fn cisco_vlans(sim: &SimSwitch, p: &str) -> Option<VlanMode> {
    use patchbay_providers::Device as _;
    backend("ios", sim).get_port(&port(p)).await.ok()?.vlans
}

/// An access port on VLAN `n`, as [`cisco_vlans`] reads it.
pub fn access(n: u16) -> Option<VlanMode> {
    Some(VlanMode::Access { vlan: vlan(n) })
}

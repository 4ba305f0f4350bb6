use super::*;
use crate::model::ObservedPort;

fn model(name: &str) -> Arc<Model> {
    builtin().iter().find(|m| m.name == name).cloned().unwrap()
}

fn vlan(n: u16) -> VlanId {
    VlanId::new(n).unwrap()
}

fn port(name: &str) -> PortName {
    PortName::parse(name).unwrap()
}

/// The port states every model must write and read back unchanged.
fn states(name: &str) -> Vec<DesiredPort> {
    let clean = DesiredPort::clean(port(name));
    let mut access = clean.clone();
    access.vlans = VlanMode::Access { vlan: vlan(100) };
    let mut trunk = clean.clone();
    trunk.vlans = VlanMode::Trunk {
        native: None,
        allowed: [vlan(200), vlan(201)].into_iter().collect(),
    };
    let mut native = clean.clone();
    native.vlans = VlanMode::Trunk {
        native: Some(vlan(10)),
        allowed: [vlan(20), vlan(30)].into_iter().collect(),
    };
    let mut everything = access.clone();
    everything.admin = AdminState::Down;
    everything.description = Some(Description::parse("rack 4 (db) a+b=c").unwrap());
    everything.mtu = Some(Mtu::new(9000).unwrap());
    everything.acl = vec![crate::model::AclRule {
        ip_version: crate::model::IpVersion::V4,
        action: crate::model::AclAction::Deny,
        protocol: crate::model::AclProtocol::Tcp,
        direction: crate::model::AclDirection::Egress,
        src: Some(crate::values::Cidr::parse("10.0.0.0/8").unwrap()),
        src_ports: None,
        dst: None,
        dst_ports: Some(crate::values::L4PortRange::parse("22-30").unwrap()),
    }];
    vec![clean, access, trunk, native, everything]
}

/// What `m` reads back after writing `d`: everything, except the ACL where the model
/// has none (not read: `None`) and LAG membership (no model has it).
fn expected(m: &Model, d: &DesiredPort) -> ObservedPort {
    let mut o = ObservedPort::from_desired(d);
    if !m.capabilities().supports(crate::model::Capability::Acl) {
        o.acl = None;
    }
    o.lag = None;
    o
}

#[test]
fn every_embedded_model_loads_and_finds_its_os() {
    assert_eq!(builtin().len(), MODEL_FILES.len());
    assert_eq!(for_os("junos", None).unwrap().name, "junos-els");
    assert_eq!(
        for_os("junos", Some("junos-port-mode")).unwrap().name,
        "junos-port-mode"
    );
    assert_eq!(for_os("yang", None).unwrap().name, "patchbay-ports");
    assert!(for_os("junos", Some("patchbay-ports")).is_none());
    assert!(for_os("ios", None).is_none());
    assert!(PATCHBAY_YANG.contains("module patchbay-ports"));
}

#[test]
fn every_port_state_written_by_a_model_reads_back_the_same() {
    for m in builtin() {
        for d in states("ge-0/0/1") {
            let written = m.port_element(&d);
            // Parse what goes on the wire, as the device would see it.
            let entry = written.map(|e| Element::parse(&e.render()).unwrap());
            let observed = m.read_port(&d.port, entry.as_ref()).unwrap();
            assert_eq!(observed, expected(m, &d), "model {} state {:?}", m.name, d);
        }
    }
}

#[test]
fn junos_els_writes_the_vendor_shape() {
    let m = model("junos-els");
    let mut d = DesiredPort::clean(port("ge-0/0/2"));
    d.vlans = VlanMode::Trunk {
        native: Some(vlan(10)),
        allowed: [vlan(20)].into_iter().collect(),
    };
    d.admin = AdminState::Down;
    assert_eq!(
        m.port_element(&d).unwrap().render(),
        "<interface operation=\"replace\"><name>ge-0/0/2</name><disable/>\
         <unit><name>0</name><family><ethernet-switching><interface-mode>trunk</interface-mode>\
         <vlan><members>10</members><members>20</members></vlan></ethernet-switching></family></unit>\
         <native-vlan-id>10</native-vlan-id></interface>"
    );
    assert!(
        m.port_element(&DesiredPort::clean(port("ge-0/0/2")))
            .is_none()
    );
    assert_eq!(
        m.remove_element(&port("ge-0/0/2")).render(),
        "<interface operation=\"delete\"><name>ge-0/0/2</name></interface>"
    );
    let edit = m.edit(
        &[(vlan(10), None)],
        vec![m.remove_element(&port("ge-0/0/2"))],
    );
    assert_eq!(
        edit.iter().map(Element::render).collect::<String>(),
        "<configuration><vlans><vlan><name>vlan10</name><vlan-id>10</vlan-id></vlan></vlans>\
         <interfaces><interface operation=\"delete\"><name>ge-0/0/2</name></interface></interfaces>\
         </configuration>"
    );
    assert_eq!(
        m.filter().iter().map(Element::render).collect::<String>(),
        "<configuration><interfaces/><vlans/></configuration>"
    );
    assert!(m.port_name_fits(&port("xe-0/0/47")));
    assert!(!m.port_name_fits(&port("FastEthernet0/1")));
    assert!(!m.port_name_fits(&port("ge-0/0/1.0")));
}

#[test]
fn the_patchbay_model_qualifies_operations_and_names_its_namespace() {
    let m = model("patchbay-ports");
    let mut d = DesiredPort::clean(port("eth1"));
    d.vlans = VlanMode::Access { vlan: vlan(100) };
    let edit = m.edit(
        &[(vlan(100), Some(VlanName::parse("web").unwrap()))],
        vec![m.port_element(&d).unwrap()],
    );
    assert_eq!(
        edit.iter().map(Element::render).collect::<String>(),
        "<vlans xmlns=\"urn:patchbay:yang:patchbay-ports\"><vlan><id>100</id><name>web</name></vlan></vlans>\
         <ports xmlns=\"urn:patchbay:yang:patchbay-ports\"><port nc:operation=\"replace\"><name>eth1</name>\
         <mode>access</mode><access-vlan>100</access-vlan></port></ports>"
    );
}

#[test]
fn junos_reads_members_ranges_and_an_access_port_without_a_mode() {
    let m = model("junos-port-mode");
    let entry = Element::parse(
        "<interface><name>ge-0/0/3</name><unit><name>0</name><family><ethernet-switching>\
         <vlan><members>300</members></vlan></ethernet-switching></family></unit></interface>",
    )
    .unwrap();
    let o = m.read_port(&port("ge-0/0/3"), Some(&entry)).unwrap();
    assert_eq!(o.vlans, Some(VlanMode::Access { vlan: vlan(300) }));
    let entry = Element::parse(
        "<interface><name>ge-0/0/3</name><unit><name>0</name><family><ethernet-switching>\
         <port-mode>trunk</port-mode><vlan><members>100-102</members><members>7</members></vlan>\
         </ethernet-switching></family></unit></interface>",
    )
    .unwrap();
    let o = m.read_port(&port("ge-0/0/3"), Some(&entry)).unwrap();
    assert_eq!(
        o.vlans,
        Some(VlanMode::Trunk {
            native: None,
            allowed: [7, 100, 101, 102].map(vlan).into_iter().collect()
        })
    );
    let bad = Element::parse("<interface><name>ge-0/0/3</name><mtu>big</mtu></interface>").unwrap();
    let e = m.read_port(&port("ge-0/0/3"), Some(&bad)).unwrap_err();
    assert!(e.contains("mtu") && e.contains("big"), "{e}");
}

#[test]
fn error_paths_name_ports_and_vlans() {
    let m = model("patchbay-ports");
    assert_eq!(
        m.named_in("/pbp:ports/pbp:port[pbp:name='eth1']/pbp:access-vlan"),
        (vec!["eth1".to_owned()], vec![])
    );
    assert_eq!(
        m.named_in("/nc:rpc/nc:edit-config/nc:config/pbp:vlans/pbp:vlan[pbp:id='1002']/pbp:id"),
        (vec![], vec![1002])
    );
    assert_eq!(m.named_in("/pbp:ports"), (vec![], vec![]));
}

#[test]
fn broken_model_files_are_refused_with_the_reason() {
    let base = MODEL_FILES[2].1;
    let cases = [
        (
            base.replace("key: name", "key: name\nextra: 1"),
            "unknown field",
        ),
        (base.replace("  - { path: mtu, field: mtu }\n", ""), "Mtu"),
        (base.replace("path: mtu,", "path: a//b,"), "empty step"),
        (base.replace("port_name: '^", "port_name: '(^"), "port_name"),
    ];
    for (text, want) in cases {
        let e = Model::load("x.yaml", &text).unwrap_err();
        assert!(e.to_string().contains(want), "{e} should mention {want}");
    }
}

/// The catalogue validation reads (`patchbay_model::catalogue`) lists exactly the
/// embedded models, in their order.
#[test]
fn the_catalogue_names_every_embedded_model() {
    let embedded: Vec<(String, String)> = builtin()
        .iter()
        .map(|m| (m.name.clone(), m.os.clone()))
        .collect();
    let listed: Vec<(String, String)> = crate::catalogue::NETCONF_MODELS
        .iter()
        .map(|(n, o)| (n.to_string(), o.to_string()))
        .collect();
    assert_eq!(embedded, listed);
}

//! The `patchbay` command as a user runs it: `crds` prints every CRD, `validate`
//! accepts the examples and refuses a bad file naming the field, `demo` walks a port
//! through every state on the fixture backend.

use std::io::Write;
use std::process::{Command, Stdio};

fn patchbay(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_patchbay"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("patchbay runs")
}

#[test]
fn crds_prints_every_kind_as_yaml() {
    let out = patchbay(&["crds"]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let kinds: Vec<String> = patchbay_providers::yaml::documents(&text)
        .unwrap()
        .into_iter()
        .map(|v| v["spec"]["names"]["kind"].as_str().unwrap().to_owned())
        .collect();
    // Every kind, each validated by `patchbay validate`.
    assert_eq!(
        kinds,
        patchbay::decide::validate::manifests::VALIDATED_KINDS
    );
}

#[test]
fn the_examples_are_valid() {
    let files: Vec<String> = std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/examples"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .map(|p| p.display().to_string())
        .collect();
    assert!(files.len() >= 6);
    let mut args = vec!["validate"];
    args.extend(files.iter().map(String::as_str));
    let out = patchbay(&args);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("0 invalid"), "{text}");
    // The SwitchPort link was checked against the Switch's port constraints.
    assert!(
        text.contains("valid    link: SwitchPort network-infra/server-7-eth1"),
        "{text}"
    );
}

/// `patchbay validate -` with `yaml` on standard input: its exit code and report.
fn validate_stdin(yaml: &str) -> (Option<i32>, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_patchbay"))
        .args(["validate", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(yaml.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[test]
fn validate_refuses_a_bad_configuration_naming_the_field() {
    let bad = "\
apiVersion: patchbay.dev/v1alpha1
kind: SwitchPortConfiguration
metadata: {name: bad, namespace: network-infra}
spec:
  untaggedVLAN: 4095
  description: \"up\\nreload\"
";
    let (code, text) = validate_stdin(bad);
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("spec.untaggedVLAN: VLAN 4095 is outside 1-4094"),
        "{text}"
    );
    assert!(
        text.contains("spec.description: description contains \"\\\\n\""),
        "{text}"
    );
}

/// Metal3's BareMetalSwitch: refused where upstream's CRD or patchbay would refuse
/// it, naming the field; two on one device, the second refused. A
/// HostNetworkAttachment breaking BMO's webhook rule, and a host's interface on a
/// port nobody declared, each refused naming the field.
#[test]
fn validate_checks_a_bare_metal_switch_as_upstream_and_patchbay_would() {
    let bms = |name: &str, spec: &str| {
        format!(
            "apiVersion: metal3.io/v1alpha1\nkind: BareMetalSwitch\nmetadata: {{name: {name}, namespace: infra}}\nspec:\n{spec}---\n"
        )
    };
    let text = [
        bms(
            "ovs",
            "  address: 192.0.2.1\n  macAddress: aa:bb:cc:00:00:01\n  deviceType: netmiko_ovs_linux\n  credentials: {name: c}\n",
        ),
        bms(
            "typo",
            "  address: 192.0.2.2\n  macAdress: aa:bb:cc:00:00:02\n  deviceType: netmiko_cisco_ios\n",
        ),
        bms(
            "elsewhere",
            "  address: 192.0.2.3\n  macAddress: aa:bb:cc:00:00:03\n  deviceType: netmiko_cisco_ios\n  credentials: {name: c, namespace: kube-system}\n",
        ),
        bms(
            "twice",
            "  address: 192.0.2.3\n  port: 22\n  macAddress: aa:bb:cc:00:00:04\n  deviceType: netmiko_dell_powerconnect\n  credentials: {name: c}\n",
        ),
        bms(
            "twice-again",
            "  address: 192.0.2.3\n  macAddress: aa:bb:cc:00:00:05\n  deviceType: netmiko_cisco_ios\n  credentials: {name: c}\n",
        ),
        // The host half: an attachment breaking BMO's webhook rule, and a host
        // whose interface names a port no Switch declares on BareMetalSwitch twice.
        "apiVersion: metal3.io/v1alpha1\nkind: HostNetworkAttachment\nmetadata: {name: web, namespace: infra}\nspec: {mode: access, nativeVLAN: 100, allowedVLANs: [\"200\"]}\n---\n".into(),
        "apiVersion: patchbay.dev/v1alpha1\nkind: Switch\nmetadata: {name: twice, namespace: infra}\nspec:\n  provider: {name: twice}\n  ports:\n    host-1-eth0: {name: ethernet 1/g1}\n---\n".into(),
        "apiVersion: metal3.io/v1alpha1\nkind: BareMetalHost\nmetadata: {name: host-1, namespace: infra}\nspec:\n  networkInterfaces:\n  - {macAddress: \"52:54:00:00:00:01\", hostNetworkAttachment: {name: web}, switchPort: {switchID: \"aa:bb:cc:00:00:04\", portID: ethernet 1/g1}}\n  - {macAddress: \"52:54:00:00:00:02\", hostNetworkAttachment: {name: web}, switchPort: {switchID: \"aa:bb:cc:00:00:04\", portID: ethernet 1/g9}}\n".into(),
    ]
    .concat();
    let (code, report) = validate_stdin(&text);
    assert_eq!(code, Some(1), "{report}");
    for line in [
        "spec.deviceType: deviceType netmiko_ovs_linux is not driven by patchbay",
        "spec.macAdress: unknown field, did you mean \"macAddress\"?",
        "spec.macAddress: Required value",
        "spec.credentials.namespace: patchbay reads a switch's Secret from the switch's own namespace",
        "spec.address: ProviderSwitch infra/twice already drives 192.0.2.3:22",
        "spec.allowedVLANs: an access port carries only its nativeVLAN",
        "spec.networkInterfaces[1].switchPort: portID \"ethernet 1/g9\" is not declared on BareMetalSwitch infra/twice (declared: ethernet 1/g1)",
    ] {
        assert!(report.contains(line), "{line:?} not in\n{report}");
    }
    assert!(!report.contains("networkInterfaces[0]"), "{report}");
    assert!(report.contains("6 invalid"), "{report}");
}

/// A Switch whose ports would be configured through a BGP speaker or a neighbour
/// source (`os: frr`, `os: linux`) named in the same files is refused by
/// `validate`, with the operator's own words (it refused this only at runtime).
#[test]
fn validate_refuses_a_switch_whose_provider_configures_no_port() {
    for (os, hint) in [
        ("frr", "spec.bgp.speaker"),
        ("linux", "spec.neighbors.providers"),
    ] {
        let text = format!(
            "\
apiVersion: patchbay.dev/v1alpha1
kind: ProviderSwitch
metadata: {{name: speaker, namespace: infra}}
spec:
  backend: ssh
  os: {os}
  address: 192.0.2.1
  credentialsSecretRef: {{name: login}}
  hostKey: {{fingerprint: \"SHA256:v4cRr7ClTTn6CxGK/qsnWEhL7L4H+y3qHDbCyB3xeug\"}}
---
apiVersion: patchbay.dev/v1alpha1
kind: Switch
metadata: {{name: tor-1, namespace: infra}}
spec:
  provider: {{name: speaker}}
  ports:
    p1: {{name: Gi0/1}}
"
        );
        let (code, report) = validate_stdin(&text);
        assert_eq!(code, Some(1), "{os}: {report}");
        assert!(
            report.contains("INVALID  link: Switch infra/tor-1 -> ProviderSwitch infra/speaker"),
            "{report}"
        );
        assert!(
            report.contains(&format!(
                "spec.provider: ProviderSwitch speaker is os {os}, "
            )) && report.contains(hint),
            "{report}"
        );
    }
}

/// `patchbay validate --help` names every kind it validates, and it validates every
/// kind patchbay has.
#[test]
fn validate_help_names_every_kind_it_checks() {
    use patchbay::decide::validate::manifests::{OTHER_VALIDATED_KINDS, VALIDATED_KINDS};
    let out = patchbay(&["validate", "--help"]);
    let help = String::from_utf8_lossy(&out.stdout);
    for kind in VALIDATED_KINDS.iter().chain(OTHER_VALIDATED_KINDS) {
        assert!(help.contains(kind), "{kind} not in\n{help}");
    }
    for (_, crd) in patchbay::api::crds() {
        let kind = crd.spec.names.kind;
        assert!(
            VALIDATED_KINDS.contains(&kind.as_str()),
            "{kind} is not validated"
        );
        // And validate knows it: a document of the kind is not refused as unknown.
        let report = patchbay::decide::validate::manifests::validate_manifests(&[(
            "k.yaml".into(),
            format!("apiVersion: patchbay.dev/v1alpha1\nkind: {kind}\nmetadata: {{name: x}}\n"),
        )]);
        assert!(
            !report.to_string().contains("is not a patchbay kind"),
            "{kind}: {report}"
        );
    }
}

#[test]
fn validate_checks_a_link_against_the_port_constraints() {
    let dir = std::env::temp_dir().join(format!("patchbay-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("link.yaml");
    std::fs::write(
        &file,
        "\
apiVersion: patchbay.dev/v1alpha1
kind: Switch
metadata: {name: tor-1, namespace: infra}
spec:
  provider: {name: tor-1}
  ports:
    server-8-eth0: {name: Gi0/9, vlanRange: \"10\", trunkDisable: true}
---
apiVersion: patchbay.dev/v1alpha1
kind: SwitchPortConfiguration
metadata: {name: tenant, namespace: infra}
spec:
  untaggedVLAN: 100
  vlans: [{id: 101}]
---
apiVersion: patchbay.dev/v1alpha1
kind: SwitchPort
metadata: {name: server-8-eth0, namespace: infra}
spec:
  configuration: {name: tenant}
",
    )
    .unwrap();
    let out = patchbay(&["validate", file.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&out.stdout);
    std::fs::remove_dir_all(&dir).ok();
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("spec.untaggedVLAN: VLAN 100 is outside the vlanRange \"10\""),
        "{text}"
    );
    assert!(
        text.contains(
            "spec.vlans: port \"server-8-eth0\" of Switch \"tor-1\" does not allow trunking"
        ),
        "{text}"
    );
}

#[test]
fn the_demo_runs_the_operator_until_every_example_port_is_active() {
    // A bound on settling, not a speed goal: ~36 s alone on 2 cores, over 60 s with
    // the cores busy (the Ansible switch's runs are the slowest part).
    let out = patchbay(&["demo", "--exit-when-settled", "--timeout-seconds", "180"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("kubeconfig: "), "{text}");
    assert!(text.contains("the example ports are Active"), "{text}");
    // The cabling example, on real LLDP: one Server verified and moved, one whose
    // declared port sees another machine (parked, nothing sent), one found by MAC.
    for expected in [
        "rack-1-a: Verified: 1 NIC seen where declared",
        "rack-1-b: CablingMismatch: NIC eth0 (52:54:00:0b:00:01) is declared on SwitchPort \
         network-infra/leaf-7-swp2 (Switch leaf-7, swp2), which sees LLDP chassis \
         52:54:00:ee:00:01 (unknown-host) port 52:54:00:ee:00:01; the NIC is seen on Switch \
         network-infra/leaf-7 port swp3 (SwitchPort leaf-7-swp3); the port is parked",
        "rack-1-c: Verified: 1 NIC seen where declared",
        r#"leaf-7 swp1             {"port":"swp1","admin":"up","mode":"access","accessVlan":10"#,
        r#"leaf-7 swp2             {"port":"swp2","admin":"up","mode":"unconfigured"}"#,
        r#"leaf-7 swp4             {"port":"swp4","admin":"up","mode":"access","accessVlan":10"#,
        // The Metal3 host, walked through BMO's states: its port carries its
        // HostNetworkAttachment once provisioned, read from the simulated Cisco.
        "BareMetalHost server-51 is provisioned",
        r#"tor-5  FastEthernet0/1  {"port":"FastEthernet0/1","admin":"up","mode":"trunk","nativeVlan":100,"allowedVlans":"150-151"}"#,
    ] {
        assert!(text.contains(expected), "{expected}\nnot in\n{text}");
    }
    // The BGP host: its peer published, the session Established on FRR, only the
    // claim's prefix accepted.
    for expected in [
        "rack-2-a is Provisioned; patchbay published its BGP peer: node ASN 65101, peer \
         10.99.0.0 AS 65000, source 10.99.0.1, password in Secret \
         network-infra/lb-cluster-bgp-rack-2-a-0",
        "  neighbour 10.99.0.1: Established",
        "  routes learned: 192.0.2.17/32 (of 192.0.2.17/32, 203.0.113.9/32 announced",
    ] {
        assert!(text.contains(expected), "{expected}\nnot in\n{text}");
    }
    // The SmartNicPort waited for the switch port it is chained to.
    assert!(text.contains("WaitingForNextPort"), "{text}");
    // The live table showed the ports moving through Configuring.
    assert!(text.contains("Configuring"), "{text}");
    let before_devices = text.split("example ports are Active").next().unwrap_or("");
    let last_table = before_devices.rsplit("[").next().unwrap_or("");
    for port in [
        "server-7-eth0",
        "server-7-eth1",
        "server-8-eth0",
        "server-9-eth0",
        "server-10-eth0",
        "server-11-eth0",
        "server-11-snic0",
        "leaf-1-ge1",
        "tor-4-fa1",
    ] {
        let row = last_table
            .lines()
            .find(|l| l.contains(port))
            .unwrap_or_else(|| panic!("{port} in {last_table}"));
        assert!(row.contains("Active") && row.contains("True"), "{row}");
    }
    // Then the simulated switches themselves (Cisco, Dell, Brocade) report the ports
    // as configured, read back over SSH, the Juniper over NETCONF, the Cisco driven
    // through Ansible with Ansible's read playbook, and Open vSwitch
    // the SmartNIC port, over OVSDB; the switch port behind the SmartNIC carries the
    // chained configuration.
    for expected in [
        r#"snic-1 snic0p0          {"port":"snic0p0","admin":"up","mode":"trunk","nativeVlan":100,"allowedVlans":"101-102","description":"tenant web, server-11 SmartNIC"}"#,
        r#"tor-1  FastEthernet0/10 {"port":"FastEthernet0/10","admin":"up","mode":"trunk","nativeVlan":100,"allowedVlans":"101-102""#,
        // server-7's port, on the provisioning network while server-7 installs.
        r#"tor-1  FastEthernet0/7  {"port":"FastEthernet0/7","admin":"up","mode":"access","accessVlan":10"#,
        r#"tor-2  ethernet 1/g1    {"port":"ethernet 1/g1","admin":"up","mode":"trunk","nativeVlan":100"#,
        r#"tor-3  ethernet 1/1     {"port":"ethernet 1/1","admin":"up","mode":"access","accessVlan":10"#,
        r#"leaf-1 ge-0/0/1         {"port":"ge-0/0/1","admin":"up","mode":"trunk","nativeVlan":100,"allowedVlans":"101-102","description":"tenant web, server-7"}"#,
        r#"tor-4  FastEthernet0/1  {"port":"FastEthernet0/1","admin":"up","mode":"trunk","nativeVlan":100,"allowedVlans":"101-102","description":"tenant web, server-7"}"#,
    ] {
        assert!(text.contains(expected), "{expected}\nnot in\n{text}");
    }
    // The example claim holds both Servers, by role, and its inventory lists them.
    for expected in [
        "server-7   dc1-row4   Provisioning   control-plane  network-infra/web-cluster",
        "server-8   dc1-row4   Provisioning   worker         network-infra/web-cluster",
        "[kube_control_plane]\nserver-7\n",
        "[kube_node]\nserver-8\n",
        "server-7 ansible_host=192.0.2.107 boot_mac=52:54:00:12:34:07",
    ] {
        assert!(text.contains(expected), "{expected}\nnot in\n{text}");
    }
    // Then server-7 is walked through every phase, its port following, as the
    // switch reports it: the claim's network once Provisioned, the provisioning
    // network again once released; the live table showed each phase.
    let walk = text
        .split("annotating patchbay.dev/provisioned=true")
        .nth(1)
        .unwrap_or_else(|| panic!("no walk in\n{text}"));
    let provisioned = walk.split("releasing:").next().unwrap_or_default();
    assert!(
        provisioned.contains(r#"tor-1  FastEthernet0/7  {"port":"FastEthernet0/7","admin":"up","mode":"trunk","nativeVlan":100,"allowedVlans":"101-102""#),
        "{provisioned}"
    );
    let released = walk.split("is Available again").nth(1).unwrap_or_default();
    assert!(
        released.contains(r#"tor-1  FastEthernet0/7  {"port":"FastEthernet0/7","admin":"up","mode":"access","accessVlan":10"#),
        "{released}"
    );
    assert!(
        text.contains(
            "server-7 went Available → Provisioning → Provisioned → Deprovisioning → Available"
        ),
        "{text}"
    );
    for phase in ["Available", "Provisioning", "Provisioned"] {
        assert!(
            text.lines()
                .any(|l| l.starts_with("server-7 ") && l.contains(phase)),
            "the live table shows server-7 {phase}"
        );
    }
}

#[test]
fn the_demo_walk_takes_a_port_through_every_state() {
    let out = patchbay(&["demo", "--walk"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    let states: Vec<&str> = text
        .lines()
        .filter_map(|l| {
            [
                "(none)",
                "Idle",
                "Configuring",
                "Active",
                "Cleaning",
                "Deleting",
            ]
            .into_iter()
            .find(|s| l.split_whitespace().any(|w| w == *s))
        })
        .collect();
    for s in [
        "(none)",
        "Idle",
        "Configuring",
        "Active",
        "Cleaning",
        "Deleting",
    ] {
        assert!(states.contains(&s), "the demo never shows {s}:\n{text}");
    }
    // The drift was corrected and the refused configuration never reached the device.
    assert!(
        text.contains("drift: device has [\"VLANs\"] different"),
        "{text}"
    );
    assert!(
        text.contains("device writes during the refused attempt: 0"),
        "{text}"
    );
}

#[test]
fn misspelt_fields_are_refused_with_the_nearest_known_name() {
    let dir = std::env::temp_dir().join(format!("patchbay-cli-typos-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let manifests = dir.join("typos.yaml");
    std::fs::write(
        &manifests,
        "\
apiVersion: patchbay.dev/v1alpha1
kind: SwitchPortConfiguration
metadata: {name: shut, namespace: tenant-a}
spec:
  untaggedVLAN: 10
  disabeld: true
  descripton: web
---
apiVersion: patchbay.dev/v1alpha1
kind: Switch
metadata: {name: tor-1, namespace: network-infra}
spec:
  provider: {name: tor-1}
  ports:
    server-7-eth0: {name: Gi0/7, vlanrange: \"10, 100-199\"}
",
    )
    .unwrap();
    let out = patchbay(&["validate", manifests.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&out.stdout);
    // Invalid like any other invalid field: the verdict, exit 1.
    assert_eq!(out.status.code(), Some(1), "{text}");
    for line in [
        "spec.disabeld: unknown field, did you mean \"disabled\"?",
        "spec.descripton: unknown field, did you mean \"description\"?",
        "spec.ports.server-7-eth0.vlanrange: unknown field, did you mean \"vlanRange\"?",
    ] {
        assert!(text.contains(line), "{line} in:\n{text}");
    }
    assert!(text.contains("2 checked, 2 invalid"), "{text}");

    // The operator's own settings file: refused before anything connects.
    let config = dir.join("patchbay.yaml");
    std::fs::write(&config, "batchWindowMs: 50\ndriftIntervalSecond: 60\n").unwrap();
    let out = patchbay(&[
        "run",
        "--kubeconfig",
        "/nonexistent/kubeconfig",
        "--config",
        config.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("driftIntervalSecond: unknown field, did you mean \"driftIntervalSeconds\"?"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// A value of the wrong type or an enum word the API does not have names the field's
/// path, as the API server would (`spec.acl[0].protocol`), not only serde's words.
#[test]
fn a_bad_enum_word_or_type_names_the_fields_path() {
    let dir = std::env::temp_dir().join(format!("patchbay-cli-enums-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (field, value, path) in bad_enum_cases() {
        let file = dir.join("bad.yaml");
        std::fs::write(
            &file,
            format!(
                "apiVersion: patchbay.dev/v1alpha1\nkind: SwitchPortConfiguration\n\
                 metadata: {{name: web, namespace: tenant-a}}\nspec:\n{}\n",
                enum_case_spec(field, value)
            ),
        )
        .unwrap();
        let out = patchbay(&["validate", file.to_str().unwrap()]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(1), "{field}: {text}");
        assert!(text.contains(&format!("{path}: ")), "{path} in:\n{text}");
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// (field, value, the path an error must name): every enum of a configuration's
/// ACL rule and a number given as a word.
pub fn bad_enum_cases() -> [(&'static str, &'static str, &'static str); 5] {
    [
        ("protocol", "\"TCP; reload\"", "spec.acl[0].protocol"),
        ("protocol", "sctp", "spec.acl[0].protocol"),
        ("direction", "sideways", "spec.acl[0].direction"),
        ("action", "reject", "spec.acl[0].action"),
        ("untaggedVLAN", "ten", "spec.untaggedVLAN"),
    ]
}

/// The `spec:` body of a configuration with `field: value` (an ACL rule's field, or
/// `untaggedVLAN`), indented two spaces.
pub fn enum_case_spec(field: &str, value: &str) -> String {
    if field == "untaggedVLAN" {
        return format!("  untaggedVLAN: {value}");
    }
    let mut rule = vec![
        ("type", "ipv4"),
        ("action", "deny"),
        ("protocol", "tcp"),
        ("direction", "ingress"),
    ];
    for r in &mut rule {
        if r.0 == field {
            r.1 = value;
        }
    }
    let body: Vec<String> = rule.iter().map(|(k, v)| format!("{k}: {v}")).collect();
    format!("  acl:\n  - {{{}}}", body.join(", "))
}

//! `patchbay device` against a simulated Cisco switch and, over NETCONF, a simulated
//! Juniper (the real binary, the YAML a user would apply), and the injection-safety
//! proof: the hostile corpus, pushed
//! through every text field the backend renders, is refused before anything is
//! dialled, and the simulator's own running configuration is unchanged afterwards.

#[path = "support/hostile.rs"]
mod hostile;
#[path = "../providers/tests/support/ssh_cases.rs"]
mod ssh_cases;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use patchbay_testbed::{FakeSwitches, SimSpec, SimSwitch};
use serde_json::json;

struct Files {
    dir: PathBuf,
}

impl Files {
    fn new(tag: &str) -> Self {
        let dir =
            std::env::temp_dir().join(format!("patchbay-device-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        Self { dir }
    }
    fn write(&self, name: &str, value: &serde_json::Value) -> PathBuf {
        let p = self.dir.join(name);
        std::fs::write(&p, patchbay_providers::yaml::to_string(value).unwrap()).unwrap();
        p
    }
}

impl Files {
    /// A SwitchPortConfiguration manifest with this spec.
    fn configuration(&self, file: &str, name: &str, spec: serde_json::Value) -> PathBuf {
        self.write(
            file,
            &json!({"apiVersion": "patchbay.dev/v1alpha1", "kind": "SwitchPortConfiguration",
                    "metadata": {"name": name}, "spec": spec}),
        )
    }
}

impl Drop for Files {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn manifests(files: &Files, sim: &SimSwitch) -> (PathBuf, PathBuf) {
    manifests_for(files, sim, "ssh", "ios")
}

/// A ProviderSwitch (`backend`, `os`, the simulator's known_hosts line) and its Secret.
fn manifests_for(files: &Files, sim: &SimSwitch, backend: &str, os: &str) -> (PathBuf, PathBuf) {
    let provider = files.write(
        "provider.yaml",
        &json!({
            "apiVersion": "patchbay.dev/v1alpha1", "kind": "ProviderSwitch",
            "metadata": {"name": "tor1", "namespace": "infra"},
            "spec": {
                "backend": backend, "os": os, "address": sim.address, "port": sim.port,
                "credentialsSecretRef": {"name": "tor1-login"},
                "hostKey": {"knownHostsLine": sim.known_hosts_line},
            }
        }),
    );
    let secret = files.write(
        "secret.yaml",
        &json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "tor1-login", "namespace": "infra"},
            "stringData": {
                "username": sim.username, "password": sim.password,
                "enablePassword": sim.enable_password,
            }
        }),
    );
    (provider, secret)
}

fn device(provider: &Path, secret: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_patchbay"))
        .arg("device")
        .arg("--provider")
        .arg(provider)
        .arg("--secret")
        .arg(secret)
        .args(args)
        .output()
        .unwrap()
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn show_dry_run_apply_and_reset_a_port() {
    let sims = FakeSwitches::start(&[SimSpec::new("tor1", "cisco_generic")]).unwrap();
    let sim = sims.get("tor1");
    let files = Files::new("cycle");
    let (provider, secret) = manifests(&files, sim);
    let config = files.configuration(
        "config.yaml",
        "tenant-web",
        json!({"untaggedVLAN": 300, "vlans": [], "description": "tenant web 7"}),
    );
    let port = "FastEthernet0/5";

    let o = device(&provider, &secret, &["show-port", port]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    assert!(out.contains("mode: unconfigured"), "{out}");

    let cfg = config.to_str().unwrap();
    let o = device(
        &provider,
        &secret,
        &["apply-port", port, "--config", cfg, "--dry-run"],
    );
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    assert_eq!(
        out,
        "configure terminal\nvlan 300\nexit\ninterface FastEthernet0/5\ndescription tenant web 7\n\
         switchport mode access\nswitchport access vlan 300\nexit\nexit\nwrite memory\n"
    );
    // The dry run changed nothing.
    let (out, _) = text(&device(&provider, &secret, &["show-port", port]));
    assert!(out.contains("mode: unconfigured"), "{out}");

    let o = device(&provider, &secret, &["apply-port", port, "--config", cfg]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    assert!(
        out.contains("# changed") && out.contains("accessVlan: 300"),
        "{out}"
    );
    assert!(out.contains("description: tenant web 7"), "{out}");

    let (out, _) = text(&device(
        &provider,
        &secret,
        &["apply-port", port, "--config", cfg, "--dry-run"],
    ));
    assert!(out.contains("nothing would be sent"), "{out}");
    let (out, _) = text(&device(
        &provider,
        &secret,
        &["apply-port", port, "--config", cfg],
    ));
    assert!(out.contains("# unchanged"), "{out}");

    let o = device(&provider, &secret, &["reset-port", port]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    assert!(
        out.contains("mode: unconfigured") && !out.contains("description"),
        "{out}"
    );

    // Secrets never reach the output.
    for o in [
        device(&provider, &secret, &["show-port", port]),
        device(&provider, &secret, &["show-port", "FastEthernet0/99"]),
    ] {
        let (out, err) = text(&o);
        for s in [&sim.password, &sim.enable_password] {
            assert!(!out.contains(s.as_str()) && !err.contains(s.as_str()));
        }
    }
    // A port the device lacks: exit 1, the command and the device's words.
    let o = device(&provider, &secret, &["show-port", "FastEthernet0/99"]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("show running-config interface FastEthernet0/99"),
        "{err}"
    );
    assert!(err.contains("% Invalid input"), "{err}");
}

#[test]
fn a_capability_the_dialect_lacks_is_refused_before_dialling() {
    let sims = FakeSwitches::start(&[SimSpec::new("tor1", "cisco_generic")]).unwrap();
    let files = Files::new("caps");
    let (provider, secret) = manifests(&files, sims.get("tor1"));
    let config = files.configuration(
        "mtu.yaml",
        "jumbo",
        json!({"untaggedVLAN": 10, "mtu": 9000}),
    );
    let o = device(
        &provider,
        &secret,
        &[
            "apply-port",
            "FastEthernet0/1",
            "--config",
            config.to_str().unwrap(),
        ],
    );
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("cisco_ios dialect cannot configure: MTU"),
        "{err}"
    );
    assert_eq!(sims.connections("tor1"), 0, "nothing was dialled");
}

#[test]
fn misspelt_fields_are_refused_with_the_nearest_name_and_nothing_is_dialled() {
    let sims = FakeSwitches::start(&[SimSpec::new("tor1", "cisco_generic")]).unwrap();
    let sim = sims.get("tor1");
    let files = Files::new("typos");
    let (provider, secret) = manifests(&files, sim);
    // Meant: shut the port down. Read as written, the port would stay up.
    let config = files.configuration(
        "typo.yaml",
        "shut",
        json!({"untaggedVLAN": 10, "disabeld": true, "descripton": "x"}),
    );
    let apply = |provider: &Path, secret: &Path| {
        device(
            provider,
            secret,
            &[
                "apply-port",
                "FastEthernet0/1",
                "--config",
                config.to_str().unwrap(),
            ],
        )
    };
    let o = apply(&provider, &secret);
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(out.is_empty(), "{out}");
    assert!(
        err.contains("spec.disabeld: unknown field, did you mean \"disabled\"?"),
        "{err}"
    );
    assert!(
        err.contains("spec.descripton: unknown field, did you mean \"description\"?"),
        "{err}"
    );
    // The same for the ProviderSwitch and the Secret a user hands over.
    let bad_provider = files.write(
        "provider-typo.yaml",
        &json!({
            "apiVersion": "patchbay.dev/v1alpha1", "kind": "ProviderSwitch",
            "metadata": {"name": "tor1"},
            "spec": {"backend": "ssh", "os": "ios", "address": sim.address, "port": sim.port,
                     "credentialsSecretRef": {"name": "tor1-login"},
                     "hostkey": {"fingerprint": sim.host_key_fingerprint},
                     "insecureAcceptAnyHostKey": false}
        }),
    );
    let o = device(&bad_provider, &secret, &["show-port", "FastEthernet0/1"]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("spec.hostkey: unknown field, did you mean \"hostKey\"?"),
        "{err}"
    );
    let bad_secret = files.write(
        "secret-typo.yaml",
        &json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "tor1-login"},
                "stringdata": {"username": sim.username, "password": sim.password}}),
    );
    let o = device(&provider, &bad_secret, &["show-port", "FastEthernet0/1"]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("stringdata: unknown field, did you mean \"stringData\"?"),
        "{err}"
    );
    assert!(!err.contains(&sim.password), "{err}");
    assert_eq!(sims.connections("tor1"), 0, "nothing was dialled");
    // The port is as it was: up, no VLAN.
    let o = device(&provider, &secret, &["show-port", "FastEthernet0/1"]);
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(out.contains("admin: up"), "{out}");
    assert!(out.contains("mode: unconfigured"), "{out}");
}

#[tokio::test]
async fn the_hostile_corpus_never_reaches_the_device() {
    let sims = FakeSwitches::start(&[SimSpec::new("tor1", "cisco_generic")]).unwrap();
    let sim = sims.get("tor1");
    let sw = ssh_cases::backend("ios", sim);
    let before = sw.running_config().await.unwrap().expect("cisco has one");
    assert!(before.contains("interface FastEthernet0/1"), "{before}");

    let files = Files::new("hostile");
    let (provider, secret) = manifests(&files, sim);
    let mut attempts = 0;
    for (what, s) in hostile::hostile_strings() {
        let cases = [
            (
                "spec.description",
                json!({"untaggedVLAN": 10, "description": s}),
            ),
            (
                "spec.vlans[0].name",
                json!({"vlans": [{"id": 20, "name": s}], "untaggedVLAN": 10}),
            ),
        ];
        for (field, spec) in cases {
            let config = files.configuration("hostile.yaml", "x", spec);
            let o = device(
                &provider,
                &secret,
                &[
                    "apply-port",
                    "FastEthernet0/1",
                    "--config",
                    config.to_str().unwrap(),
                ],
            );
            let (_, err) = text(&o);
            assert_eq!(o.status.code(), Some(2), "{what} in {field}: {err}");
            assert!(err.contains(field), "{what} in {field}: {err}");
            assert!(
                !err.chars().any(|c| c.is_control() && c != '\n'),
                "{what}: the error echoes a control character: {err:?}"
            );
            attempts += 1;
        }
        // The port name itself (from a Switch, or the PORT argument).
        if !s.contains('\0') {
            let o = device(&provider, &secret, &["show-port", &s]);
            let (_, err) = text(&o);
            assert_eq!(o.status.code(), Some(2), "{what} as PORT: {err}");
            assert!(err.contains("PORT"), "{what} as PORT: {err}");
            attempts += 1;
        }
    }
    assert!(attempts >= 40, "{attempts}");
    let after = sw.running_config().await.unwrap().unwrap();
    assert_eq!(before, after, "the running configuration changed");
    // The only lines this test's backend sent are its two reads of the running
    // configuration: no session reached configuration mode.
    assert!(sw.journal().iter().all(|s| !s.configures));
}

#[test]
fn netconf_dry_run_prints_the_transaction_and_apply_reads_back() {
    let sims = FakeSwitches::start(&[SimSpec::new("leaf1", "juniper_qfx_copper_generic")]).unwrap();
    let sim = sims.get("leaf1");
    let files = Files::new("netconf");
    let (provider, secret) = manifests_for(&files, sim, "netconf", "junos");
    let config = files.configuration(
        "config.yaml",
        "tenant-web",
        json!({"untaggedVLAN": 300, "vlans": [], "description": "tenant web 7"}),
    );
    let cfg = config.to_str().unwrap();
    let port = "ge-0/0/2";
    let o = device(
        &provider,
        &secret,
        &["apply-port", port, "--config", cfg, "--dry-run"],
    );
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    let rpcs: Vec<&str> = out.lines().collect();
    let body = |i: usize| {
        rpcs[i]
            .split_once("base:1.0\">")
            .map(|x| x.1)
            .unwrap_or_default()
    };
    assert!(body(0).starts_with("<lock><target><candidate/>"), "{out}");
    assert!(body(1).starts_with("<discard-changes/>"), "{out}");
    assert!(
        body(2).starts_with(
            "<edit-config><target><candidate/></target><config xmlns:nc=\"urn:ietf:params:xml:ns:netconf:base:1.0\">\
             <configuration><vlans><vlan><name>vlan300</name><vlan-id>300</vlan-id></vlan></vlans>\
             <interfaces><interface operation=\"replace\"><name>ge-0/0/2</name><description>tenant web 7</description>\
             <unit><name>0</name><family><ethernet-switching><interface-mode>access</interface-mode>\
             <vlan><members>300</members></vlan>"
        ),
        "{out}"
    );
    assert!(body(3).starts_with("<validate>"), "{out}");
    assert!(body(4).starts_with("<commit><confirmed/>"), "{out}");
    assert_eq!(rpcs.len(), 8, "{out}");
    // The dry run changed nothing; applying does, and reads back.
    let (out, _) = text(&device(&provider, &secret, &["show-port", port]));
    assert!(out.contains("mode: unconfigured"), "{out}");
    let o = device(&provider, &secret, &["apply-port", port, "--config", cfg]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    assert!(out.starts_with("# changed; read back:"), "{out}");
    assert!(
        out.contains("accessVlan: 300") && out.contains("tenant web 7"),
        "{out}"
    );
    assert!(!out.contains(&sim.password) && !err.contains(&sim.password));
}

#[test]
fn ansible_dry_run_runs_check_mode_and_apply_reads_back() {
    let sims =
        FakeSwitches::start(&[SimSpec::new("tor1", "cisco_generic").with_ios_shims()]).unwrap();
    let sim = sims.get("tor1");
    let files = Files::new("ansible");
    let (provider, secret) = manifests_for(&files, sim, "ansible", "ios");
    let config = files.configuration(
        "config.yaml",
        "tenant-web",
        json!({"untaggedVLAN": 300, "vlans": [], "description": "tenant web 7"}),
    );
    let cfg = config.to_str().unwrap();
    let port = "FastEthernet0/5";
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_patchbay"))
            .arg("device")
            .arg("--provider")
            .arg(&provider)
            .arg("--secret")
            .arg(&secret)
            .args(args)
            .env(
                "PATCHBAY_ANSIBLE_PLAYBOOK",
                patchbay_testbed::ansible_playbook().unwrap(),
            )
            .output()
            .unwrap()
    };
    let o = run(&["apply-port", port, "--config", cfg, "--dry-run"]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    for line in [
        "# task \"l2 batch\"",
        "interface FastEthernet0/5",
        "switchport access vlan 300",
        "description tenant web 7",
    ] {
        assert!(out.lines().any(|l| l == line), "{line} not in\n{out}");
    }
    let (out, _) = text(&run(&["show-port", port]));
    assert!(
        out.contains("mode: unconfigured"),
        "the dry run changed the device: {out}"
    );
    let o = run(&["apply-port", port, "--config", cfg]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    assert!(out.starts_with("# changed; read back:"), "{out}");
    assert!(
        out.contains("accessVlan: 300") && out.contains("tenant web 7"),
        "{out}"
    );
    assert!(!out.contains(&sim.password) && !err.contains(&sim.password));
}

/// `apply-port` with an enum word the API does not have (or a word for a number)
/// exits 2 naming the field's path, as the API server and `patchbay validate` do, and
/// dials nothing.
#[test]
fn a_bad_enum_word_or_type_is_refused_by_its_path_before_dialling() {
    let sims = FakeSwitches::start(&[SimSpec::new("tor1", "cisco_generic")]).unwrap();
    let files = Files::new("enums");
    let (provider, secret) = manifests(&files, sims.get("tor1"));
    let rule = |field: &str, value: serde_json::Value| {
        let mut r = json!({"type": "ipv4", "action": "deny", "protocol": "tcp",
                           "direction": "ingress"});
        r[field] = value;
        json!({"acl": [r]})
    };
    for (spec, path) in [
        (
            rule("protocol", json!("TCP; reload")),
            "spec.acl[0].protocol",
        ),
        (rule("protocol", json!("sctp")), "spec.acl[0].protocol"),
        (
            rule("direction", json!("sideways")),
            "spec.acl[0].direction",
        ),
        (rule("action", json!("reject")), "spec.acl[0].action"),
        (json!({"untaggedVLAN": "ten"}), "spec.untaggedVLAN"),
    ] {
        let config = files.configuration("bad.yaml", "bad", spec);
        let cfg = config.to_str().unwrap();
        let o = device(
            &provider,
            &secret,
            &["apply-port", "FastEthernet0/1", "--config", cfg],
        );
        let (_, err) = text(&o);
        assert_eq!(o.status.code(), Some(2), "{path}: {err}");
        assert!(err.contains(&format!("{path}: ")), "{path} in: {err}");
    }
    assert_eq!(sims.connections("tor1"), 0, "nothing was dialled");
}

//! `patchbay plan` as a user runs it: against the examples alone (every port starts
//! clean; tor-1's batch is the IOS lines, in order), and against a live cluster
//! (devplane with the CRDs) whose objects the manifests edit: a shared
//! configuration's edit lists every port it moves, with before and after; a link
//! the operator would refuse (a VLAN outside the port's vlanRange) is listed as
//! refused with the operator's reason and is absent from the switch's lines;
//! nothing to change exits 0, changes exit 2, an unreadable file exits 1. Nothing
//! is written to the cluster. And the plan is what happens: an edit planned, then
//! applied by the operator, compared with what a simulated Cisco (SSH) and a
//! simulated Juniper QFX (NETCONF) were sent, from the simulators' own logs, and
//! with what an Ansible-driven Cisco's apply playbook was given and the OVSDB
//! transactions a SmartNIC's Open vSwitch received. And the
//! blast radius at `kubectl apply`: the webhook's warning, printed by the real
//! kubectl, for an edit (dry run and real), a no-op, a port's deletion and a
//! Switch's entry removed, with the device read back unchanged by the dry runs.

#[path = "../providers/tests/support/ssh_cases.rs"]
mod ssh_cases;
mod support;

use std::process::Command;

use kube::api::Api;
use patchbay::api::{SwitchPort, SwitchPortConfiguration};
use serde_json::json;
use support::Cluster;
use support::env::Env;

fn plan(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_patchbay"))
        .arg("plan")
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("patchbay runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn the_examples_alone_plan_every_linked_port_from_clean() {
    let files: Vec<String> = std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/examples"))
        .unwrap()
        .map(|e| e.unwrap().path().display().to_string())
        .filter(|p| p.ends_with(".yaml"))
        .collect();
    let args: Vec<&str> = files.iter().map(String::as_str).collect();
    let (code, out, err) = plan(&args);
    assert_eq!(code, 2, "{out}{err}");
    assert!(
        out.starts_with("No cluster given: every port starts clean."),
        "{out}"
    );
    let row = out
        .lines()
        .find(|l| l.contains(" server-7-eth1 "))
        .unwrap_or_default();
    assert!(
        row.contains("FastEthernet0/8")
            && row.contains("clean")
            && row.contains("network-infra/provisioning: access 10"),
        "{out}"
    );
    // tor-1's batch: the lines one session types, in order, saved at the end.
    let batch: Vec<&str> = out
        .split("Switch network-infra/tor-1 (ssh ios)")
        .nth(1)
        .unwrap_or_default()
        .split("\n\n")
        .next()
        .unwrap_or_default()
        .lines()
        .skip(1)
        .map(str::trim)
        .collect();
    assert_eq!(batch.first(), Some(&"configure terminal"), "{out}");
    assert_eq!(batch.last(), Some(&"write memory"), "{out}");
    let at = |line: &str| batch.iter().position(|l| *l == line);
    assert!(
        at("interface FastEthernet0/8") < at("interface FastEthernet0/9")
            && at("switchport access vlan 10").is_some(),
        "{batch:?}"
    );
    // leaf-1 (Junos over NETCONF): the content of its one edit-config, by the
    // device model: the VLANs, then the port's element.
    let leaf = out
        .split("Switch network-infra/leaf-1 (netconf junos)")
        .nth(1)
        .unwrap_or_default();
    assert!(
        leaf.contains("one edit-config of the candidate with:")
            && leaf.contains("<vlan-id>101</vlan-id>")
            && leaf.contains("<interface operation=\"replace\"><name>ge-0/0/1</name>"),
        "{out}"
    );
    // The other kinds are said to be left out, not silently dropped.
    assert!(
        err.contains("not planned:") && err.contains("Secret"),
        "{err}"
    );
    // An unreadable file is an error, not an empty plan.
    let (code, _, err) = plan(&["examples/no-such-file.yaml"]);
    assert_eq!(code, 1, "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edit_is_planned_against_the_live_cluster_and_refusals_say_why() {
    if !support::on_devplane() {
        return; // installs the CRDs
    }
    let env = Env::without_operator(Cluster::start("plan").await).await;
    let ns = env.cluster.namespace.clone();
    env.create::<patchbay::api::ProviderSwitch>(json!({
        "apiVersion": "patchbay.dev/v1alpha1", "kind": "ProviderSwitch",
        "metadata": {"name": "tor"},
        "spec": {"backend": "ssh", "os": "ios", "address": "192.0.2.1",
                 "credentialsSecretRef": {"name": "tor-login"}}
    }))
    .await;
    env.create::<patchbay::api::Switch>(json!({
        "apiVersion": "patchbay.dev/v1alpha1", "kind": "Switch",
        "metadata": {"name": "tor"},
        "spec": {"provider": {"name": "tor"}, "ports": {
            "p1": {"name": "FastEthernet0/1"},
            "p2": {"name": "FastEthernet0/2", "vlanRange": "1-200"},
            "p3": {"name": "FastEthernet0/3"}}}
    }))
    .await;
    env.configuration("pxe", json!({"untaggedVLAN": 10})).await;
    for (port, cfg) in [("p1", Some("pxe")), ("p2", Some("pxe")), ("p3", None)] {
        let spec = cfg.map_or_else(|| json!({}), |c| json!({"configuration": {"name": c}}));
        env.create::<SwitchPort>(json!({
            "apiVersion": "patchbay.dev/v1alpha1", "kind": "SwitchPort",
            "metadata": {"name": port, "labels": {"patchbay.dev/switch": "tor"}},
            "spec": spec
        }))
        .await;
    }
    let write = |name: &str, text: String| {
        let path = env.cluster.dir.join(name);
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    };
    let kubeconfig = env.cluster.kubeconfig.display().to_string();

    // The same objects again: nothing to change.
    let same = write(
        "same.yaml",
        "apiVersion: patchbay.dev/v1alpha1\nkind: SwitchPortConfiguration\n\
         metadata: {name: pxe}\nspec: {untaggedVLAN: 10}\n"
            .into(),
    );
    let (code, out, err) = plan(&["--kubeconfig", &kubeconfig, "-n", &ns, &same]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("Plan: 0 port(s)"), "{out}");

    // The shared configuration moved to VLAN 11 (p1 follows), and p2 (limited to
    // VLANs 1-200) linked to a configuration on VLAN 300: refused there. p3 carries
    // nothing before and after.
    let edit = write(
        "edit.yaml",
        "\
apiVersion: patchbay.dev/v1alpha1
kind: SwitchPortConfiguration
metadata: {name: pxe}
spec: {untaggedVLAN: 11}
---
apiVersion: patchbay.dev/v1alpha1
kind: SwitchPortConfiguration
metadata: {name: far}
spec: {untaggedVLAN: 300}
---
apiVersion: patchbay.dev/v1alpha1
kind: SwitchPort
metadata: {name: p2}
spec: {configuration: {name: far}}
"
        .into(),
    );
    let (code, out, err) = plan(&["--kubeconfig", &kubeconfig, "-n", &ns, &edit]);
    assert_eq!(code, 2, "{out}{err}");
    let row = |port: &str| {
        out.lines()
            .find(|l| l.split_whitespace().nth(1) == Some(port))
            .unwrap_or_default()
            .to_owned()
    };
    assert!(
        row("p1").contains(&format!("{ns}/pxe: access 10"))
            && row("p1").contains(&format!("{ns}/pxe: access 11")),
        "{out}"
    );
    assert!(
        row("p2").contains(&format!("{ns}/far: refused (InvalidConfiguration:"))
            && row("p2").contains("300"),
        "{out}"
    );
    assert!(row("p3").is_empty(), "p3 carries nothing either way: {out}");
    assert!(out.contains("switchport access vlan 11"), "{out}");
    // p1 follows pxe's edit in pxe's rollout; p2, linked to another configuration,
    // moves at once.
    assert!(
        out.contains(&format!(
            "Rollout of SwitchPortConfiguration {ns}/pxe: 1 port(s) on 1 switch(es) in 1 wave(s)"
        )) && out.contains(&format!("  wave 1 (canary): {ns}/p1\n")),
        "{out}"
    );
    assert!(
        !out.contains(&format!("Rollout of SwitchPortConfiguration {ns}/far")),
        "{out}"
    );
    assert!(
        !out.contains("interface FastEthernet0/2"),
        "nothing is sent for a refused port: {out}"
    );
    // The same as JSON.
    let (code, json_out, _) = plan(&["--kubeconfig", &kubeconfig, "-n", &ns, "-o", "json", &edit]);
    assert_eq!(code, 2);
    let doc: serde_json::Value = serde_json::from_str(&json_out).unwrap();
    assert_eq!(doc["ports"].as_array().unwrap().len(), 2, "{doc}");
    assert_eq!(doc["ports"][1]["after"]["carries"], "refused", "{doc}");
    assert_eq!(doc["switches"][0]["ports"], 2, "{doc}");
    assert_eq!(
        doc["rollouts"],
        json!([{"kind": "SwitchPortConfiguration", "configuration": format!("{ns}/pxe"), "switches": 1,
                "waves": [[format!("{ns}/p1")]], "refused": []}]),
        "{doc}"
    );

    // Nothing was written: the cluster still holds the objects as they were.
    let pxe = env
        .api::<SwitchPortConfiguration>()
        .get("pxe")
        .await
        .unwrap();
    assert_eq!(pxe.spec.port.untagged_vlan, Some(10));
    let p2: SwitchPort = Api::namespaced(env.cluster.client.clone(), &ns)
        .get("p2")
        .await
        .unwrap();
    assert_eq!(
        p2.spec.configuration.map(|c| c.name).as_deref(),
        Some("pxe")
    );
    env.cluster.finish().await;
}

/// The plan is what happens: a shared configuration's edit planned against the live
/// cluster, then applied by the operator to a simulated Cisco IOS switch. The lines
/// the switch's shells were sent (the simulator's command log, reads and the login
/// left out) are the plan's lines for that switch: each batch framed as planned,
/// each port's block as planned and sent once (the worker may split one planned
/// batch in two: it sends a lone first change at once).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_plan_is_what_the_switch_is_sent() {
    use patchbay::api::PortState;
    if !support::on_devplane() {
        return; // reads the simulator's log beside the operator
    }
    let (sims, env) = cisco_on_pxe("plan-device", &[], |_| {}).await;
    let mark = sims.commands("tor1").len();
    let doc = plan_the_edit(&env);
    let planned: Vec<String> = doc["switches"][0]["operations"]["lines"]
        .as_array()
        .expect("tor1's lines")
        .iter()
        .map(|l| l.as_str().unwrap().to_owned())
        .collect();

    // Apply it as the plan said, and wait for the switch to be sent the save.
    apply_the_edit(&env).await;
    let is_config = |l: &String| {
        let l = l.trim();
        !(l.is_empty()
            || l == "<hidden>"
            || l == "enable"
            || l.starts_with("show ")
            || l.starts_with("terminal "))
    };
    let received = support::eventually(60, "the edit sent and saved", || async {
        let sent: Vec<String> = sims.commands("tor1")[mark..]
            .iter()
            .filter(|l| is_config(l))
            .cloned()
            .collect();
        let count = |what: &str| sent.iter().filter(|l| l.as_str() == what).count();
        // Both ports sent, and every batch opened is saved.
        let done = count("switchport access vlan 11") == 2
            && count("write memory") == count("configure terminal");
        done.then_some(sent)
    })
    .await;
    for p in ["p1", "p2"] {
        env.wait_state(p, PortState::Active).await;
    }
    // The worker sends the first change after a quiet spell at once and gathers the
    // rest, so one planned batch may reach the switch as several. Each batch is
    // framed as the plan shows (the same VLAN lines before, the same leaving and
    // saving after), and every port's block is the plan's, each sent once.
    let plan_shape = Shape::of(&planned);
    let batches = split_batches(&received);
    let mut sent_ports = Vec::new();
    for batch in &batches {
        let shape = Shape::of(batch);
        assert_eq!(
            (&shape.head, &shape.tail),
            (&plan_shape.head, &plan_shape.tail),
            "framed as planned: {batch:?} against {planned:?}"
        );
        for (port, block) in shape.ports {
            assert_eq!(
                plan_shape.ports.get(&port),
                Some(&block),
                "{port}'s lines as planned"
            );
            sent_ports.push(port);
        }
    }
    sent_ports.sort();
    let planned_ports: Vec<String> = plan_shape.ports.keys().cloned().collect();
    assert_eq!(sent_ports, planned_ports, "each planned port sent once");
    println!(
        "planned one batch of {} lines; the switch was sent {} batch(es)",
        planned.len(),
        batches.len()
    );
    env.cluster.finish().await;
}

/// The blast radius at apply: patchbay's webhook (served with TLS, registered as
/// deploy/blast-radius/ registers it) answers every edit and deletion of a
/// configuration, Switch or SwitchPort with a warning kubectl prints: how many ports
/// on how many switches it moves and how. A dry run shows it and changes nothing on
/// the switch; an edit that moves no port says nothing; the real edit says the same
/// and the switch moves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_apply_warns_how_many_ports_an_edit_moves() {
    use ssh_cases::{access, cisco_vlans};
    if !support::on_devplane() {
        return; // registers a webhook on this machine's loopback
    }
    let (sims, env) = cisco_on_pxe("plan-radius", &[("p3", "FastEthernet0/3")], |_| {}).await;
    let sim = sims.get("tor1");
    blast_radius_webhook(&env).await;
    let ns = env.cluster.namespace.clone();
    // The selectable field the webhook finds a configuration's ports by.
    let selected = env.cluster.kubectl_ok(&[
        "get",
        "swp",
        "-n",
        &ns,
        "--field-selector",
        "spec.configuration.name=pxe",
        "-o",
        "name",
    ]);
    assert_eq!(
        selected.lines().collect::<Vec<_>>(),
        ["switchport.patchbay.dev/p1", "switchport.patchbay.dev/p2"]
    );
    let kubectl = |args: &[&str]| {
        let out = env.cluster.kubectl(&[args, &["-n", &ns]].concat());
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "kubectl {args:?}: {stderr}");
        println!(
            "$ kubectl {}\n{stderr}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout)
        );
        stderr
            .lines()
            .filter(|l| l.starts_with("Warning: patchbay:"))
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    let file = |name: &str, text: &str| {
        let path = env.cluster.dir.join(name);
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    };
    let moved = |n: &str, how: &str| {
        vec![format!(
            "Warning: patchbay: this changes {n} on 1 switch ({how}); `patchbay plan` lists them"
        )]
    };
    let (fe1, fe2) = ("FastEthernet0/1", "FastEthernet0/2");

    // 1. A dry run of the edit: the warning, and nothing changes on the switch.
    let edit = file(
        "edit.yaml",
        "apiVersion: patchbay.dev/v1alpha1\nkind: SwitchPortConfiguration\n\
         metadata: {name: pxe}\nspec: {untaggedVLAN: 11}\n",
    );
    let warned = kubectl(&["apply", "--dry-run=server", "-f", &edit]);
    assert_eq!(warned, moved("2 ports", "2 reconfigured"));
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    for p in [fe1, fe2] {
        assert_eq!(
            cisco_vlans(sim, p).await,
            access(10),
            "{p} after the dry run"
        );
    }
    // 2. An edit that moves no port (a label): no warning.
    let label = file(
        "label.yaml",
        "apiVersion: patchbay.dev/v1alpha1\nkind: SwitchPortConfiguration\n\
         metadata: {name: pxe, labels: {team: web}}\nspec: {untaggedVLAN: 10}\n",
    );
    assert_eq!(kubectl(&["apply", "-f", &label]), Vec::<String>::new());
    // 3. A port's deletion (dry run): cleaned, the one port.
    let warned = kubectl(&["delete", "swp", "p2", "--dry-run=server"]);
    assert_eq!(warned, moved("1 port", "1 cleaned"));
    // 3b. A port relinked to another configuration (dry run): that configuration
    // is read too, so the port is reconfigured (not refused as "not found").
    let web = file(
        "web.yaml",
        "apiVersion: patchbay.dev/v1alpha1\nkind: SwitchPortConfiguration\n\
         metadata: {name: web}\nspec: {untaggedVLAN: 12}\n",
    );
    kubectl(&["apply", "-f", &web]);
    let warned = kubectl(&[
        "patch",
        "swp",
        "p2",
        "--dry-run=server",
        "--type=merge",
        "-p",
        r#"{"spec": {"configuration": {"name": "web"}}}"#,
    ]);
    assert_eq!(warned, moved("1 port", "1 reconfigured"));
    // 4. The Switch's entry for p1 removed (dry run): its port cleaned.
    let warned = kubectl(&[
        "patch",
        "switch",
        "tor1",
        "--dry-run=server",
        "--type=json",
        "-p",
        r#"[{"op": "remove", "path": "/spec/ports/p1"}]"#,
    ]);
    assert_eq!(warned, moved("1 port", "1 cleaned"));
    for p in [fe1, fe2] {
        assert_eq!(
            cisco_vlans(sim, p).await,
            access(10),
            "{p} after the dry runs"
        );
    }
    // 5. The edit itself: the same warning, and the switch moves.
    let warned = kubectl(&["apply", "-f", &edit]);
    assert_eq!(warned, moved("2 ports", "2 reconfigured"));
    for p in [fe1, fe2] {
        support::eventually(60, "the port on VLAN 11", || async {
            (cisco_vlans(sim, p).await == access(11)).then_some(())
        })
        .await;
    }
    env.cluster.finish().await;
}

/// The same for Ansible, on the Cisco simulator driven through the built-in IOS
/// playbooks: the variables every apply run received (`ansible-playbook` behind a
/// wrapper that keeps each run's `-e @vars.json`, which holds ports and VLANs only)
/// are the plan's: every port's entry as planned and sent once, each run's VLANs as
/// planned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_plan_is_what_an_ansible_run_is_given() {
    use patchbay::api::PortState;
    use patchbay_testbed::{FakeSwitches, SimSpec};
    use std::os::unix::fs::PermissionsExt;
    if !support::on_devplane() {
        return; // runs the operator in this process, with its wrapper
    }
    let real = patchbay_testbed::ansible_playbook().expect("make ansible");
    let sims =
        FakeSwitches::start(&[SimSpec::new("tor1", "cisco_generic").with_ios_shims()]).unwrap();
    let sim = sims.get("tor1");
    let dir = std::env::temp_dir().join(format!("patchbay-plan-ansible-{}", std::process::id()));
    let runs = dir.join("runs");
    std::fs::create_dir_all(&runs).unwrap();
    let wrapper = dir.join("ansible-playbook");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\n\
             for a in \"$@\"; do case \"$a\" in @*) cp \"${{a#@}}\" \"{}/$(date +%s%N).json\";; esac; done\n\
             exec {} \"$@\"\n",
            runs.display(),
            real.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    let w = wrapper.clone();
    let env = Env::start_with("plan-ansible", move |s| {
        s.ansible_playbook = w;
        s.drift_interval = std::time::Duration::from_secs(3600);
    })
    .await;
    env.ansible_switch(
        "tor1",
        sim,
        &[("p1", "FastEthernet0/1"), ("p2", "FastEthernet0/2")],
    )
    .await;
    on_pxe(&env).await;
    // The apply runs' variables from `since` on (read runs are given none).
    let applies = |since: usize| -> (usize, Vec<serde_json::Value>) {
        let mut files: Vec<_> = std::fs::read_dir(&runs)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        files.sort();
        let vars = files[since.min(files.len())..]
            .iter()
            .map(|f| {
                serde_json::from_slice::<serde_json::Value>(&std::fs::read(f).unwrap()).unwrap()
            })
            .filter(|v| v.get("patchbay_ports").is_some())
            .collect();
        (files.len(), vars)
    };
    let (mark, _) = applies(0);
    let doc = plan_the_edit(&env);
    let planned = doc["switches"][0]["operations"]["variables"].clone();
    assert!(planned["patchbay_ports"].is_array(), "{doc}");

    apply_the_edit(&env).await;
    let received = support::eventually(120, "both ports' apply runs", || async {
        let (_, vars) = applies(mark);
        let sent: usize = vars
            .iter()
            .map(|v| v["patchbay_ports"].as_array().map_or(0, Vec::len))
            .sum();
        (sent >= 2).then_some(vars)
    })
    .await;
    // The read-back is an ansible-playbook run of its own: under a loaded suite
    // (nine tests, 2 cores) it took longer than 30 s once.
    for p in ["p1", "p2"] {
        env.wait_state_within(p, PortState::Active, 120).await;
    }
    // Every port's entry is the plan's, sent once; every run's VLANs are the plan's.
    let by_name = |v: &serde_json::Value| -> Vec<(String, serde_json::Value)> {
        v["patchbay_ports"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| (p["name"].as_str().unwrap().to_owned(), p.clone()))
            .collect()
    };
    let plan_ports: std::collections::BTreeMap<String, serde_json::Value> =
        by_name(&planned).into_iter().collect();
    let mut sent = Vec::new();
    for run in &received {
        assert_eq!(run["patchbay_vlans"], planned["patchbay_vlans"], "{run}");
        for (name, entry) in by_name(run) {
            assert_eq!(
                plan_ports.get(&name),
                Some(&entry),
                "{name}'s variables as planned"
            );
            sent.push(name);
        }
    }
    sent.sort();
    assert_eq!(
        sent,
        plan_ports.keys().cloned().collect::<Vec<_>>(),
        "each planned port sent once"
    );
    println!(
        "planned one run for {} ports; the switch's apply playbook ran {} time(s)",
        plan_ports.len(),
        received.len()
    );
    let _ = std::fs::remove_dir_all(&dir);
    env.cluster.finish().await;
}

/// The same for a SmartNIC's Open vSwitch: the plan of a SmartNicConfiguration's
/// edit shows the batch's OVSDB transaction, and the `transact` requests
/// ovsdb-server received (its own JSON-RPC log, turned on for the edit) carry the
/// plan's Port operations, each once, closed by the plan's `next_cfg` operations.
/// The plan selects rows by name, the device by `_uuid`: the `where` is left out
/// of the comparison. `kubectl apply --dry-run=server` of the edit warns of the
/// same two ports.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_plan_is_what_an_open_vswitch_is_sent() {
    use patchbay::api::{PortState, SmartNicPort};
    use patchbay_testbed::OvsSim;
    if !support::on_devplane() {
        return; // reads ovsdb-server's log beside the operator
    }
    let ovs = OvsSim::start(&["br0"]).expect("Open vSwitch starts");
    ovs.add_internal_ports("br0", &["h1", "h2"]).unwrap();
    let env = Env::start("plan-ovs").await;
    env.create::<patchbay::api::ProviderSwitch>(json!({
        "apiVersion": "patchbay.dev/v1alpha1", "kind": "ProviderSwitch",
        "metadata": {"name": "snic"},
        "spec": {"backend": "ovsdb", "os": "ovs", "address": "127.0.0.1",
                 "port": ovs.info.ovsdb_port, "options": {"bridge": "br0"}}}))
        .await;
    env.create::<patchbay::api::SmartNicConfiguration>(json!({
        "apiVersion": "patchbay.dev/v1alpha1", "kind": "SmartNicConfiguration",
        "metadata": {"name": "nic"}, "spec": {"untaggedVLAN": 20}}))
        .await;
    for p in ["h1", "h2"] {
        env.create::<SmartNicPort>(json!({
            "apiVersion": "patchbay.dev/v1alpha1", "kind": "SmartNicPort",
            "metadata": {"name": p},
            "spec": {"provider": {"name": "snic"}, "portName": p,
                     "configuration": {"name": "nic"}}}))
            .await;
    }
    let active = |p: &SmartNicPort| {
        p.status.as_ref().and_then(|s| s.state) == Some(PortState::Active)
            && p.status
                .as_ref()
                .and_then(|s| s.configuration_hash.clone())
                .is_some()
    };
    for p in ["h1", "h2"] {
        env.wait_obj::<SmartNicPort>(p, "Active on nic", active)
            .await;
    }
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    // ovsdb-server logs every JSON-RPC message from here on.
    let log = ovs.info.dir.join("ovsdb-server.log");
    let mark = log_jsonrpc(&ovs);

    let edit = env.cluster.dir.join("edit.yaml");
    std::fs::write(
        &edit,
        "apiVersion: patchbay.dev/v1alpha1\nkind: SmartNicConfiguration\n\
         metadata: {name: nic}\nspec: {untaggedVLAN: 21}\n",
    )
    .unwrap();
    let kubeconfig = env.cluster.kubeconfig.display().to_string();
    let ns = env.cluster.namespace.clone();
    // The blast radius of the same edit at `kubectl apply --dry-run=server`.
    blast_radius_webhook(&env).await;
    let out = env.cluster.kubectl(&[
        "apply",
        "--dry-run=server",
        "-n",
        &ns,
        "-f",
        &edit.display().to_string(),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(
            "Warning: patchbay: this changes 2 ports on 1 switch (2 reconfigured); \
             `patchbay plan` lists them"
        ),
        "{stderr}"
    );
    let planned = planned_transaction(&kubeconfig, &ns, &edit);
    // The ports follow the edit in the configuration's rollout: under the default
    // policy, a canary of one port, then the other.
    let (code, out, err) = plan(&[
        "--kubeconfig",
        &kubeconfig,
        "-n",
        &ns,
        &edit.display().to_string(),
    ]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(
        out.contains(&format!(
            "Rollout of SmartNicConfiguration {ns}/nic: 2 port(s) on 1 SmartNIC(s) in 2 wave(s)"
        )) && out.contains(&format!("  wave 1 (canary): {ns}/h1\n"))
            && out.contains(&format!("  wave 2: {ns}/h2\n")),
        "{out}"
    );

    env.api::<patchbay::api::SmartNicConfiguration>()
        .patch(
            "nic",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"untaggedVLAN": 21}})),
        )
        .await
        .unwrap();
    for p in ["h1", "h2"] {
        support::eventually(60, "the bridge port on VLAN 21", || async {
            (ovs.vsctl(&["get", "Port", p, "tag"]).ok()?.trim() == "21").then_some(())
        })
        .await;
    }
    let (text, transacts) = transacts_since(&log, mark);
    // Port and Interface writes, without the row selection.
    let writes = |ops: &[serde_json::Value]| -> Vec<String> {
        let mut w: Vec<String> = ops
            .iter()
            .filter(|o| matches!(o["table"].as_str(), Some("Port" | "Interface")))
            .filter(|o| o["op"] != "select")
            .map(|o| {
                let mut o = o.clone();
                o.as_object_mut().unwrap().remove("where");
                o.to_string()
            })
            .collect();
        w.sort();
        w
    };
    let batches: Vec<&Vec<serde_json::Value>> =
        transacts.iter().filter(|t| !writes(t).is_empty()).collect();
    assert!(!batches.is_empty(), "no write received: {text}");
    let mut sent = Vec::new();
    for t in &batches {
        assert_eq!(
            &t[t.len() - 2..],
            &planned[planned.len() - 2..],
            "closed by next_cfg as planned: {t:?}"
        );
        sent.extend(writes(t));
    }
    sent.sort();
    assert_eq!(sent, writes(&planned), "the plan's writes, each once");
    println!(
        "planned one transaction of {} operations; ovsdb-server received {} transaction(s) with writes",
        planned.len(),
        batches.len()
    );
    env.cluster.finish().await;
}

/// The one OVSDB transaction `patchbay plan -o json` plans for `edit` against the
/// cluster (changes: exit 2).
fn planned_transaction(
    kubeconfig: &str,
    ns: &str,
    edit: &std::path::Path,
) -> Vec<serde_json::Value> {
    let (code, out, err) = plan(&[
        "--kubeconfig",
        kubeconfig,
        "-n",
        ns,
        "-o",
        "json",
        &edit.display().to_string(),
    ]);
    assert_eq!(code, 2, "{out}{err}");
    let doc: serde_json::Value = serde_json::from_str(&out).unwrap();
    doc["switches"][0]["operations"]["transact"]
        .as_array()
        .unwrap_or_else(|| panic!("a transaction: {doc}"))
        .clone()
}

/// Has `ovs`'s ovsdb-server log every JSON-RPC message from here on: the log's length
/// now (where [`transacts_since`] starts).
fn log_jsonrpc(ovs: &patchbay_testbed::OvsSim) -> usize {
    let out = std::process::Command::new("ovs-appctl")
        .arg("-t")
        .arg(ovs.info.dir.join("ovsdb-server.ctl"))
        .args(["vlog/set", "jsonrpc:file:dbg"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    std::fs::read(ovs.info.dir.join("ovsdb-server.log"))
        .unwrap()
        .len()
}

/// The log's text from `mark`, and the operations of each `transact` request
/// ovsdb-server received in it.
fn transacts_since(log: &std::path::Path, mark: usize) -> (String, Vec<Vec<serde_json::Value>>) {
    let text = String::from_utf8_lossy(&std::fs::read(log).unwrap()[mark..]).into_owned();
    let transacts = text
        .lines()
        .filter(|l| l.contains("received request, method=\"transact\""))
        .filter_map(|l| {
            let params = l.split_once("params=")?.1;
            let params = &params[..params.rfind(", id=")?];
            let v: serde_json::Value = serde_json::from_str(params).ok()?;
            Some(v.as_array()?[1..].to_vec())
        })
        .collect();
    (text, transacts)
}

/// A group's plan on Open vSwitch is what the bridge is sent: two ports of an
/// `ovsdb` Switch carrying VLAN 30 alone, their configuration edited to bundle them
/// in group 5. The plan's one transaction (each member's Port off the bridge, bond5
/// inserted holding both Interfaces) against the transactions ovsdb-server logged,
/// the device's row uuids read as the plan names them (`<Port l1t>`,
/// `<Interface l1t>`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_plan_of_a_group_is_what_an_open_vswitch_bridge_is_sent() {
    use patchbay::api::PortState;
    use patchbay_testbed::OvsSim;
    if !support::on_devplane() {
        return; // reads ovsdb-server's log beside the operator
    }
    let ovs = OvsSim::start(&["br-tor"]).expect("Open vSwitch starts");
    ovs.add_internal_ports("br-tor", &["l1t", "l2t"]).unwrap();
    let env = Env::start("plan-ovs-lag").await;
    env.device(
        "tor",
        &[],
        json!({"backend": "ovsdb", "os": "ovs", "address": "127.0.0.1",
               "port": ovs.info.ovsdb_port, "options": {"bridge": "br-tor"}}),
        &[("p1", "l1t"), ("p2", "l2t")],
    )
    .await;
    env.configuration("uplink", json!({"untaggedVLAN": 30}))
        .await;
    for p in ["p1", "p2"] {
        env.link(p, Some("uplink")).await;
    }
    for p in ["p1", "p2"] {
        env.wait_state(p, PortState::Active).await;
    }
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    // The device's uuids, named as the plan names its rows.
    let mut names = std::collections::BTreeMap::new();
    for table in ["Port", "Interface"] {
        let out = ovs
            .vsctl(&["--format=json", "--columns=_uuid,name", "list", table])
            .unwrap();
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        for row in v["data"].as_array().unwrap() {
            let uuid = row[0][1].as_str().unwrap().to_owned();
            names.insert(uuid, format!("<{table} {}>", row[1].as_str().unwrap()));
        }
    }
    let mark = log_jsonrpc(&ovs);

    let edit = env.cluster.dir.join("group.yaml");
    std::fs::write(
        &edit,
        "apiVersion: patchbay.dev/v1alpha1\nkind: SwitchPortConfiguration\n\
         metadata: {name: uplink}\nspec: {untaggedVLAN: 30, linkAggregation: {group: 5}}\n",
    )
    .unwrap();
    let kubeconfig = env.cluster.kubeconfig.display().to_string();
    let ns = env.cluster.namespace.clone();
    let planned = planned_transaction(&kubeconfig, &ns, &edit);
    assert!(
        planned
            .iter()
            .any(|o| o["op"] == "insert" && o["row"]["name"] == "bond5"),
        "bond5 planned: {planned:#?}"
    );

    env.api::<SwitchPortConfiguration>()
        .patch(
            "uplink",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"linkAggregation": {"group": 5}}})),
        )
        .await
        .unwrap();
    support::eventually(60, "bond5 holding both members", || async {
        let ifaces = ovs.vsctl(&["get", "Port", "bond5", "interfaces"]).ok()?;
        (ifaces.matches(',').count() == 1).then_some(())
    })
    .await;
    for p in ["p1", "p2"] {
        env.wait_state(p, PortState::Active).await;
    }
    let (text, transacts) = transacts_since(&ovs.info.dir.join("ovsdb-server.log"), mark);
    // A device uuid as the plan names its row, and a selection of a named row by
    // its name.
    fn named(
        v: &serde_json::Value,
        names: &std::collections::BTreeMap<String, String>,
    ) -> serde_json::Value {
        match v {
            serde_json::Value::Array(a)
                if a.len() == 2
                    && a[0] == "uuid"
                    && a[1].as_str().is_some_and(|u| names.contains_key(u)) =>
            {
                json!(["uuid", names[a[1].as_str().unwrap()]])
            }
            serde_json::Value::Array(a) => {
                let a: Vec<serde_json::Value> = a.iter().map(|x| named(x, names)).collect();
                match (a.first(), a.get(2).and_then(|r| r[1].as_str())) {
                    // A set's members in one order (the device's follows its uuids).
                    (Some(f), _) if f == "set" && a.len() == 2 && a[1].is_array() => {
                        let mut members = a[1].as_array().unwrap().clone();
                        members.sort_by_key(|m| m.to_string());
                        json!(["set", members])
                    }
                    (Some(f), Some(row)) if f == "_uuid" && a.len() == 3 => {
                        let name = row.trim_end_matches('>').split_once(' ').map(|(_, n)| n);
                        name.map_or(json!(a), |n| json!(["name", "==", n]))
                    }
                    _ => json!(a),
                }
            }
            serde_json::Value::Object(o) => {
                json!(
                    o.iter()
                        .map(|(k, x)| (k.clone(), named(x, names)))
                        .collect::<serde_json::Map<_, _>>()
                )
            }
            other => other.clone(),
        }
    }
    // The writes to the bridge's ports and their rows.
    let writes = |ops: &[serde_json::Value]| -> Vec<String> {
        let mut w: Vec<String> = ops
            .iter()
            .filter(|o| matches!(o["table"].as_str(), Some("Port" | "Interface" | "Bridge")))
            .filter(|o| o["op"] != "select")
            .map(|o| named(o, &names).to_string())
            .collect();
        w.sort();
        w
    };
    // patchbay's transactions (closed by `next_cfg += 1`; ovs-vswitchd writes its
    // own, without it).
    let batches: Vec<Vec<String>> = transacts
        .iter()
        .filter(|t| {
            t.iter()
                .any(|o| o["table"] == "Open_vSwitch" && o["op"] == "mutate")
        })
        .map(|t| writes(t))
        .filter(|w| !w.is_empty())
        .collect();
    assert_eq!(
        batches.len(),
        1,
        "the group in one transaction: {batches:#?}\n{text}"
    );
    assert_eq!(batches[0], writes(&planned), "the plan's writes");
    println!(
        "planned {} writes for group 5; ovsdb-server received them in one transaction",
        batches[0].len()
    );
    env.cluster.finish().await;
}

/// `--read-devices`: the plan reads a switch only where its ProviderSwitch keeps a
/// session for tools (`options.readSessions`), with one session that sends no
/// configuration, and plans from what the switch holds: a port someone moved by
/// hand shows as differing, and a port already carrying the target gets no lines.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_devices_plans_from_what_the_switch_holds() {
    use patchbay_providers::Device as _;
    if !support::on_devplane() {
        return; // reads the simulator's log beside the operator
    }
    // No drift repair during the test: the hand edit below stays on the switch.
    let (sims, env) = cisco_on_pxe("plan-read", &[], |s| {
        s.drift_interval = std::time::Duration::from_secs(3600)
    })
    .await;
    let sim = sims.get("tor1");
    let edit = env.cluster.dir.join("edit.yaml");
    std::fs::write(
        &edit,
        "apiVersion: patchbay.dev/v1alpha1\nkind: SwitchPortConfiguration\n\
         metadata: {name: pxe}\nspec: {untaggedVLAN: 11}\n",
    )
    .unwrap();
    let kubeconfig = env.cluster.kubeconfig.display().to_string();
    let ns = env.cluster.namespace.clone();
    let edit = edit.display().to_string();
    let read_plan = || {
        let (code, out, err) = plan(&[
            "--kubeconfig",
            &kubeconfig,
            "-n",
            &ns,
            "-o",
            "json",
            "--read-devices",
            &edit,
        ]);
        assert_eq!(code, 2, "{out}{err}");
        serde_json::from_str::<serde_json::Value>(&out).unwrap()
    };
    let port_of = |doc: &serde_json::Value, name: &str| {
        doc["ports"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["port"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("{name} in {doc}"))
    };

    // 1. The ProviderSwitch keeps no session for tools: not read, nothing dialled.
    let mark = sims.commands("tor1").len();
    let doc = read_plan();
    assert_eq!(port_of(&doc, "p1")["device"]["read"], false, "{doc}");
    assert!(
        port_of(&doc, "p1")["device"]["why"]
            .as_str()
            .unwrap()
            .contains("options.readSessions is 0"),
        "{doc}"
    );
    assert_eq!(
        sims.commands("tor1").len(),
        mark,
        "nothing sent to the switch"
    );

    // 2. One session of two kept for tools: read, one session, no configuration.
    env.api::<patchbay::api::ProviderSwitch>()
        .patch(
            "tor1",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(
                json!({"spec": {"options": {"maxSessions": 2, "readSessions": 1}}}),
            ),
        )
        .await
        .unwrap();
    // The operator takes the new settings (its ports are looked at again): wait
    // until the switch hears nothing for 3 s.
    let mut seen = sims.commands("tor1").len();
    for _ in 0..20 {
        tokio::time::sleep(std::time::Duration::from_secs(3)).await;
        let now = sims.commands("tor1").len();
        if now == seen {
            break;
        }
        seen = now;
    }
    // Someone moves p2 to VLAN 11 on the switch by hand.
    ssh_cases::backend("ios", sim)
        .set_port(&ssh_cases::access_port("FastEthernet0/2", 11))
        .await
        .unwrap();
    let mark = sims.commands("tor1").len();
    let doc = read_plan();
    let sent: Vec<String> = sims.commands("tor1")[mark..].to_vec();
    assert_eq!(
        sent.iter().filter(|l| *l == "terminal length 0").count(),
        1,
        "one session: {sent:?}"
    );
    let (p1, p2) = (port_of(&doc, "p1"), port_of(&doc, "p2"));
    assert_eq!(
        (
            p1["device"]["state"].as_str(),
            p1["device"]["differs"].as_bool()
        ),
        (Some("access 10"), Some(false)),
        "{p1}"
    );
    assert_eq!(
        (
            p2["device"]["state"].as_str(),
            p2["device"]["differs"].as_bool()
        ),
        (Some("access 11"), Some(true)),
        "{p2}"
    );
    // Planned from the reading: p2 already carries VLAN 11, so only p1 is sent.
    let lines: Vec<&str> = doc["switches"][0]["operations"]["lines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_str().unwrap())
        .collect();
    assert!(lines.contains(&"interface FastEthernet0/1"), "{lines:?}");
    assert!(!lines.contains(&"interface FastEthernet0/2"), "{lines:?}");
    assert!(
        !sent
            .iter()
            .any(|l| l.starts_with("configure") || l.starts_with("interface")),
        "the read sends no configuration: {sent:?}"
    );
    // The table says it too.
    let (code, table, err) = plan(&[
        "--kubeconfig",
        &kubeconfig,
        "-n",
        &ns,
        "--read-devices",
        &edit,
    ]);
    assert_eq!(code, 2, "{table}{err}");
    println!("$ patchbay plan --kubeconfig kubeconfig -n {ns} --read-devices edit.yaml\n{table}");
    assert!(table.contains("access 11 (DIFFERS)"), "{table}");
    assert!(table.contains("1 port(s) differ on the device"), "{table}");
    env.cluster.finish().await;
}

/// patchbay's blast-radius webhook (tenancy off), registered as deploy/blast-radius/
/// registers it.
async fn blast_radius_webhook(env: &Env) {
    support::webhooks::blast_radius(
        env.cluster.client.clone(),
        &env.cluster.dir.join("webhook"),
        None,
    )
    .await;
}

/// A simulated Cisco IOS switch `tor1` behind ProviderSwitch and Switch `tor1`
/// with ports p1 and p2 (and `more`), the operator running with `edit` made to the
/// test settings, and `pxe` Active on p1 and p2 ([`on_pxe`]).
async fn cisco_on_pxe(
    test: &str,
    more: &[(&str, &str)],
    edit: impl FnOnce(&mut patchbay::settings::Settings),
) -> (patchbay_testbed::FakeSwitches, Env) {
    use patchbay_testbed::{FakeSwitches, SimSpec};
    let sims = FakeSwitches::start(&[SimSpec::new("tor1", "cisco_generic")]).unwrap();
    let env = Env::start_with(test, edit).await;
    let sim = sims.get("tor1");
    let mut ports = vec![("p1", "FastEthernet0/1"), ("p2", "FastEthernet0/2")];
    ports.extend_from_slice(more);
    env.switch("tor1", "ios", sim, &sim.host_key_fingerprint, &ports)
        .await;
    on_pxe(&env).await;
    (sims, env)
}

/// Configuration `pxe` (access VLAN 10) on ports p1 and p2, both Active, and the
/// batch's read-back over (what follows in the device's log is the edit's).
async fn on_pxe(env: &Env) {
    use patchbay::api::PortState;
    env.configuration("pxe", json!({"untaggedVLAN": 10})).await;
    for p in ["p1", "p2"] {
        env.link(p, Some("pxe")).await;
    }
    for p in ["p1", "p2"] {
        env.wait_state(p, PortState::Active).await;
    }
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
}

/// `patchbay plan -o json` of moving `pxe` to VLAN 11, against the live cluster:
/// the document (the plan lists changes: exit 2).
fn plan_the_edit(env: &Env) -> serde_json::Value {
    let edit = env.cluster.dir.join("edit.yaml");
    std::fs::write(
        &edit,
        "apiVersion: patchbay.dev/v1alpha1\nkind: SwitchPortConfiguration\n\
         metadata: {name: pxe}\nspec: {untaggedVLAN: 11}\n",
    )
    .unwrap();
    let kubeconfig = env.cluster.kubeconfig.display().to_string();
    let ns = env.cluster.namespace.clone();
    let edit = edit.display().to_string();
    let (code, out, err) = plan(&["--kubeconfig", &kubeconfig, "-n", &ns, "-o", "json", &edit]);
    assert_eq!(code, 2, "{out}{err}");
    serde_json::from_str(&out).unwrap()
}

/// The planned edit applied: `pxe` moved to VLAN 11.
async fn apply_the_edit(env: &Env) {
    env.api::<SwitchPortConfiguration>()
        .patch(
            "pxe",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"untaggedVLAN": 11}})),
        )
        .await
        .unwrap();
}

/// A CLI batch taken apart: the lines before the first `interface` block (entering
/// configuration mode, VLANs), each `interface` block by its port, and the lines
/// after the last block (leaving, saving).
#[derive(Debug)]
struct Shape {
    head: Vec<String>,
    ports: std::collections::BTreeMap<String, Vec<String>>,
    tail: Vec<String>,
}

impl Shape {
    fn of(lines: &[String]) -> Shape {
        let mut shape = Shape {
            head: Vec::new(),
            ports: Default::default(),
            tail: Vec::new(),
        };
        let mut current: Option<String> = None;
        let mut seen_port = false;
        for line in lines {
            if let Some(port) = line.strip_prefix("interface ") {
                current = Some(port.to_owned());
                seen_port = true;
                shape.ports.insert(port.to_owned(), vec![line.clone()]);
                continue;
            }
            match &current {
                Some(port) => {
                    shape.ports.get_mut(port).unwrap().push(line.clone());
                    if line == "exit" {
                        current = None;
                    }
                }
                None if seen_port => shape.tail.push(line.clone()),
                None => shape.head.push(line.clone()),
            }
        }
        shape
    }
}

/// The configuration lines split into the batches that sent them (each opens
/// with `configure terminal`).
fn split_batches(lines: &[String]) -> Vec<Vec<String>> {
    let mut batches: Vec<Vec<String>> = Vec::new();
    for line in lines {
        if line == "configure terminal" || batches.is_empty() {
            batches.push(Vec::new());
        }
        batches.last_mut().unwrap().push(line.clone());
    }
    batches
}

/// The same for NETCONF, on a simulated Juniper QFX (Junos ELS): the content of each
/// edit-config the switch received (the simulator's NETCONF log) is the plan's —
/// every port's element as planned and sent once; the VLAN the edit needs created
/// as planned, in the first edit (a second batch finds it on the device already).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_plan_is_what_a_netconf_switch_is_sent() {
    use patchbay::api::PortState;
    use patchbay_testbed::{FakeSwitches, SimSpec};
    if !support::on_devplane() {
        return; // reads the simulator's log beside the operator
    }
    let sims = FakeSwitches::start(&[SimSpec::new("qfx1", "juniper_qfx_copper_generic")]).unwrap();
    let sim = sims.get("qfx1");
    let env = Env::start("plan-netconf").await;
    env.device(
        "qfx1",
        &[("username", &sim.username), ("password", &sim.password)],
        json!({"backend": "netconf", "os": "junos", "address": sim.address, "port": sim.port,
               "hostKey": {"fingerprint": sim.host_key_fingerprint},
               "options": {"model": "junos-els"}}),
        &[("p1", "ge-0/0/1"), ("p2", "ge-0/0/2")],
    )
    .await;
    on_pxe(&env).await;
    let mark = sims.rpcs("qfx1").len();
    let doc = plan_the_edit(&env);
    let planned = doc["switches"][0]["operations"]["editConfig"]
        .as_array()
        .expect("qfx1's edit")
        .iter()
        .map(|e| e.as_str().unwrap())
        .collect::<String>();

    apply_the_edit(&env).await;
    // Each edit-config's <config> content, once both ports were sent and every edit
    // committed.
    let edits = support::eventually(60, "the edit sent and committed", || async {
        let rpcs = sims.rpcs("qfx1")[mark..].to_vec();
        let edits: Vec<String> = rpcs
            .iter()
            .filter_map(|m| {
                let (_, rest) = m.split_once("<config")?;
                let (_, inner) = rest.split_once('>')?;
                let (inner, _) = inner.rsplit_once("</config>")?;
                Some(inner.to_owned())
            })
            .collect();
        let ports: usize = edits
            .iter()
            .map(|e| e.matches("<interface operation=").count())
            .sum();
        let commits = rpcs.iter().filter(|m| m.contains("<commit")).count();
        (ports == 2 && commits >= edits.len()).then_some(edits)
    })
    .await;
    for p in ["p1", "p2"] {
        env.wait_state(p, PortState::Active).await;
    }
    let elements = |xml: &str| -> Vec<String> {
        xml.split("<interface operation=")
            .skip(1)
            .map(|e| {
                let end = e.find("</interface>").map_or(e.len(), |i| i + 12);
                format!("<interface operation={}", &e[..end])
            })
            .collect()
    };
    let vlans = |xml: &str| -> Option<String> {
        let start = xml.find("<vlans>")?;
        let end = xml.find("</vlans>")? + 8;
        Some(xml[start..end].to_owned())
    };
    let mut sent: Vec<String> = edits.iter().flat_map(|e| elements(e)).collect();
    let mut want = elements(&planned);
    sent.sort();
    want.sort();
    assert_eq!(sent, want, "each port's element as planned, sent once");
    assert_eq!(
        vlans(&edits[0]),
        vlans(&planned),
        "the VLAN created as planned: {edits:?}"
    );
    // One edit is the plan's whole: the same frame around the same elements (the
    // worker orders a batch's ports by arrival, the plan by name).
    let frame = |xml: &str| -> String {
        elements(xml)
            .iter()
            .fold(xml.to_owned(), |x, e| x.replacen(e.as_str(), "", 1))
    };
    if edits.len() == 1 {
        assert_eq!(
            frame(&edits[0]),
            frame(&planned),
            "one edit: the plan's, whole"
        );
    }
    println!(
        "planned one edit; the switch was sent {} edit(s)",
        edits.len()
    );
    env.cluster.finish().await;
}

//! The SSH CLI backend against the fake-switches simulators (`make fake-switch`), one
//! simulator process per test, stopped by PID at the end.
//!
//! Per dialect: every desired state of tests/support/ssh_cases.rs is applied from a
//! clean port and read back from the device; the lines sent equal the dry run;
//! re-applying sends no configuration command; transitions between states (without a
//! reset in between) read back right; reset returns the clean port; a port the device
//! does not have fails alone in a batch, naming the command. On Cisco, a batch is read
//! with one `show running-config` before and after, in one session, and reads every
//! state as each port's own command does. Host-key and password
//! failures are refused with clear errors. The simulator's own running configuration
//! proves the hostile corpus never reached it.
//!
//! With `PATCHBAY_UPDATE_GOLDEN=1` the tests rewrite tests/data/<dialect>/ from the
//! simulators (the golden files tests/ssh_golden.rs checks); otherwise the live
//! outputs must equal them.

#[path = "support/lag_cases.rs"]
mod lag_cases;
#[path = "support/ssh_cases.rs"]
mod ssh_cases;

use lag_cases::sets;

use patchbay_providers::cli::HostKeyPolicy;
use patchbay_providers::{
    AdminState, DesiredPort, Device, DeviceError, PortChange, PortOperation, VlanMode, diff,
};
use patchbay_testbed::{FakeSwitches, SimSpec};
use ssh_cases::*;

fn updating_golden() -> bool {
    std::env::var("PATCHBAY_UPDATE_GOLDEN").is_ok_and(|v| v == "1")
}

fn golden(os: &str, file: &str, live: &str) {
    let path = golden_dir(os).join(file);
    if updating_golden() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, live).unwrap();
        return;
    }
    let stored = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (regenerate with PATCHBAY_UPDATE_GOLDEN=1)",
            path.display()
        )
    });
    assert_eq!(
        stored,
        live,
        "{} differs from the simulator (regenerate with PATCHBAY_UPDATE_GOLDEN=1 if intended)",
        path.display()
    );
}

fn config_lines(sw: &patchbay_providers::cli::CliSwitch) -> Vec<String> {
    sw.journal()
        .into_iter()
        .filter(|s| s.configures)
        .map(|s| s.line)
        .collect()
}

async fn reads_as(sw: &patchbay_providers::cli::CliSwitch, desired: &DesiredPort, what: &str) {
    let observed = sw.get_port(&desired.port).await.unwrap();
    let fields = diff(desired, &observed);
    assert!(
        fields.is_empty(),
        "{what}: {} reads back differently in {fields:?}: {observed:?}",
        desired.port
    );
}

async fn prove_dialect(os: &str) {
    let c = case(os);
    let sims = FakeSwitches::start(&[SimSpec::new("sw1", c.model)]).unwrap();
    let sim = sims.get("sw1");
    let sw = backend(os, sim);
    let states = states(os, c.ports[0]);
    assert!(states.len() >= 2, "{os}: nothing to prove");

    // Each state from a clean port: dry run == what is sent, read-back, idempotence,
    // golden files.
    for (name, desired) in &states {
        sw.reset_port(&desired.port).await.unwrap();
        let script = sw
            .dry_run(&[PortOperation::Set(desired.clone())])
            .await
            .unwrap();
        sw.clear_journal();
        let change = sw.set_port(desired).await.unwrap();
        let expected = if *name == "clean" {
            PortChange::Unchanged
        } else {
            PortChange::Changed
        };
        assert_eq!(change, expected, "{os} {name}");
        assert_eq!(config_lines(&sw), script, "{os} {name}: sent != dry run");
        reads_as(&sw, desired, &format!("{os} {name}")).await;

        sw.clear_journal();
        assert_eq!(
            sw.set_port(desired).await.unwrap(),
            PortChange::Unchanged,
            "{os} {name}: re-apply"
        );
        let again = config_lines(&sw);
        assert!(again.is_empty(), "{os} {name}: re-apply sent {again:?}");

        golden(os, &format!("{name}.commands"), &(script.join("\n") + "\n"));
        let raw = sw.show_port_raw(&desired.port).await.unwrap();
        golden(os, &format!("{name}.show"), &raw);
    }

    // Transitions without a reset in between, forwards and backwards.
    let mut order: Vec<&DesiredPort> = states.iter().map(|(_, d)| d).collect();
    let back: Vec<&DesiredPort> = order.iter().rev().skip(1).copied().collect();
    order.extend(back);
    for desired in order {
        sw.set_port(desired).await.unwrap();
        reads_as(
            &sw,
            desired,
            &format!("{os} transition to {:?}", desired.vlans),
        )
        .await;
    }

    // Disable and re-enable keep the VLANs.
    if let Some((_, access)) = states.iter().find(|(n, _)| *n == "access")
        && sw
            .capabilities()
            .supports(patchbay_providers::Capability::Disable)
    {
        let mut down = access.clone();
        down.admin = AdminState::Down;
        sw.set_port(&down).await.unwrap();
        reads_as(&sw, &down, &format!("{os} disabled")).await;
        sw.set_port(access).await.unwrap();
        reads_as(&sw, access, &format!("{os} re-enabled")).await;
    }

    // Reset returns the clean port.
    let (_, last) = &states[0];
    sw.set_port(last).await.unwrap();
    assert_eq!(
        sw.reset_port(&last.port).await.unwrap(),
        PortChange::Changed
    );
    reads_as(
        &sw,
        &DesiredPort::clean(last.port.clone()),
        &format!("{os} reset"),
    )
    .await;

    // A port the device lacks fails alone; the other port of the batch is applied.
    if let Some(missing) = c.missing_port {
        let mut good = states[0].1.clone();
        good.port = port(c.ports[1]);
        let mut bad = good.clone();
        bad.port = port(missing);
        let results = sw
            .apply_batch(&[PortOperation::Set(bad), PortOperation::Set(good.clone())])
            .await
            .unwrap();
        match &results[0].outcome {
            Err(DeviceError::CommandRejected { command, output }) => {
                assert!(command.contains(missing), "{os}: {command}");
                golden(os, "error.txt", &format!("{output}\n"));
            }
            other => panic!("{os}: missing port gave {other:?}"),
        }
        assert_eq!(results[1].outcome, Ok(PortChange::Changed), "{os}");
        reads_as(&sw, &good, &format!("{os} good port of a failed batch")).await;
    }
}

#[tokio::test]
async fn cisco_ios_against_the_simulator() {
    prove_dialect("ios").await;
}

#[tokio::test]
async fn dell_powerconnect_against_the_simulator() {
    prove_dialect("powerconnect").await;
}

#[tokio::test]
async fn dell10g_against_the_simulator() {
    prove_dialect("dell10g").await;
}

#[tokio::test]
async fn brocade_fastiron_against_the_simulator() {
    prove_dialect("fastiron").await;
}

#[tokio::test]
async fn arista_eos_against_the_simulator() {
    prove_dialect("eos").await;
}

#[tokio::test]
async fn a_batch_is_read_with_one_command_and_verified_in_the_same_session() {
    let sims = FakeSwitches::start(&[SimSpec::new("sw1", "cisco_2960_48TT_L")]).unwrap();
    let sim = sims.get("sw1");
    let sw = backend("ios", sim);
    // Every proven state, each on its own port, in one batch.
    let names: Vec<String> = (1..=6).map(|i| format!("FastEthernet0/{i}")).collect();
    let ops: Vec<PortOperation> = states("ios", &names[0])
        .into_iter()
        .zip(&names)
        .map(|((_, mut d), name)| {
            d.port = port(name);
            PortOperation::Set(d)
        })
        .collect();
    assert!(ops.len() >= 4, "{ops:?}");
    let before = sims.connections("sw1");
    sw.clear_journal();
    let results = patchbay_providers::verify::apply_batch_verified(&sw, &ops)
        .await
        .unwrap();
    for r in &results {
        assert!(r.outcome.is_ok(), "{}: {:?}", r.port, r.outcome);
    }
    // One login for plan, configuration, save and the verifying read; the ports are
    // read with one command before and one after (each with the VLAN table), never
    // one show per port.
    assert_eq!(sims.connections("sw1") - before, 1);
    let shows: Vec<String> = sw
        .journal()
        .into_iter()
        .filter(|s| !s.configures && s.line.starts_with("show"))
        .map(|s| s.line)
        .collect();
    assert_eq!(
        shows,
        [
            "show running-config",
            "show vlan brief",
            "show running-config",
            "show vlan brief"
        ]
    );

    // The batch read and each port's own command read every state the same way.
    let ports: Vec<_> = ops.iter().map(|op| op.port().clone()).collect();
    let batch = sw.get_ports(&ports).await.unwrap();
    for ((p, read), op) in batch.iter().zip(&ops) {
        let read = read.as_ref().unwrap();
        assert_eq!(read, &sw.get_port(p).await.unwrap(), "{p}");
        assert!(diff(&op.target(), read).is_empty(), "{p}: {read:?}");
    }

    // A port the output does not show is asked itself: the device's own error, and
    // the others still read.
    let mut with_missing = ports.clone();
    with_missing.insert(1, port("FastEthernet0/99"));
    let reads = sw.get_ports(&with_missing).await.unwrap();
    assert!(
        matches!(reads[1].1, Err(DeviceError::CommandRejected { ref command, .. })
            if command == "show running-config interface FastEthernet0/99"),
        "{:?}",
        reads[1].1
    );
    assert!(
        reads
            .iter()
            .enumerate()
            .all(|(i, (_, r))| i == 1 || r.is_ok())
    );
}

#[tokio::test]
async fn a_refused_range_block_fails_exactly_its_ports_and_the_session_recovers() {
    // No shipped dialect declares `interface range`: the Cisco simulator answers it
    // with `% Invalid input`. A dialect that declares it anyway shows what a device
    // refusing a range does to a batch.
    let (_, text) = patchbay_providers::cli::dialect::DIALECT_FILES[0];
    let text = text.replace(
        "interface_enter: \"interface {port}\"\n",
        "interface_enter: \"interface {port}\"\n\
         interface_range: { enter: \"interface range {ports}\", separator: \", \", max_ports: 5 }\n",
    );
    let ranged = patchbay_providers::cli::Dialect::load("ranged.yaml", &text).unwrap();
    let sims = FakeSwitches::start(&[SimSpec::new("sw1", "cisco_generic")]).unwrap();
    let sim = sims.get("sw1");
    let sw = backend_speaking(
        std::sync::Arc::new(ranged),
        sim,
        HostKeyPolicy::Fingerprint(sim.host_key_fingerprint.clone()),
        &sim.password,
    );
    let mut ops = Vec::new();
    for i in 1..=3 {
        let mut d = DesiredPort::clean(port(&format!("FastEthernet0/{i}")));
        d.vlans = VlanMode::Access { vlan: vlan(100) };
        ops.push(PortOperation::Set(d));
    }
    let (_, trunk) = states("ios", "FastEthernet0/4")
        .into_iter()
        .find(|(n, _)| *n == "trunk")
        .unwrap();
    ops.push(PortOperation::Set(trunk.clone()));
    let results = patchbay_providers::verify::apply_batch_verified(&sw, &ops)
        .await
        .unwrap();
    let range = "interface range FastEthernet0/1, FastEthernet0/2, FastEthernet0/3";
    for r in &results[..3] {
        match &r.outcome {
            Err(DeviceError::CommandRejected { command, output }) => {
                assert_eq!(command, range, "{}", r.port);
                assert!(output.starts_with('%'), "{output}");
            }
            other => panic!("{}: {other:?}", r.port),
        }
    }
    // The other port landed and was read back in the same session, after the
    // session went back into configuration mode and saved.
    assert_eq!(results[3].outcome, Ok(PortChange::Changed));
    let sent: Vec<String> = config_lines(&sw);
    assert!(sent.contains(&range.to_owned()), "{sent:?}");
    assert_eq!(
        sent.iter().filter(|l| *l == "configure terminal").count(),
        2,
        "{sent:?}"
    );
    assert_eq!(sent.last().map(String::as_str), Some("write memory"));
    reads_as(&sw, &trunk, "the port outside the range").await;
    for op in &ops[..3] {
        reads_as(
            &sw,
            &DesiredPort::clean(op.port().clone()),
            "a refused range port",
        )
        .await;
    }
}

#[tokio::test]
async fn a_command_the_device_rejects_is_a_typed_error_naming_it() {
    // The PowerConnect refuses MTUs below 1518; patchbay accepts 576-9216, so this
    // reaches the device and the device's own error must come back.
    let sims = FakeSwitches::start(&[SimSpec::new("sw1", "dell_generic")]).unwrap();
    let sw = backend("powerconnect", sims.get("sw1"));
    let mut d = DesiredPort::clean(port("ethernet 1/g1"));
    d.vlans = VlanMode::Access { vlan: vlan(100) };
    d.mtu = Some(patchbay_providers::values::Mtu::new(1500).unwrap());
    let err = sw.set_port(&d).await.unwrap_err();
    match &err {
        DeviceError::CommandRejected { command, output } => {
            assert_eq!(command, "mtu 1500");
            assert!(output.contains("out of range"), "{output}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(err.category(), "CommandRejected");
    // The commands before the failing one ran (the VLAN is set); the port reads back
    // as what it is, so the operator sees the difference and retries.
    let observed = sw.get_port(&d.port).await.unwrap();
    assert_eq!(observed.mtu, Some(None));
}

#[tokio::test]
async fn wrong_host_key_is_refused_naming_both_fingerprints() {
    let sims = FakeSwitches::start(&[SimSpec::new("sw1", "cisco_generic")]).unwrap();
    let sim = sims.get("sw1");
    let pinned = "SHA256:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA".to_owned();
    let sw = backend_with(
        "ios",
        sim,
        HostKeyPolicy::Fingerprint(pinned.clone()),
        &sim.password,
    );
    let err = sw.get_port(&port("FastEthernet0/1")).await.unwrap_err();
    match &err {
        DeviceError::HostKeyMismatch {
            expected,
            presented,
            ..
        } => {
            assert_eq!(expected, &pinned);
            assert_eq!(presented, &sim.host_key_fingerprint);
        }
        other => panic!("{other:?}"),
    }
    let text = err.to_string();
    assert!(
        text.contains(&pinned) && text.contains(&sim.host_key_fingerprint),
        "{text}"
    );
    assert!(
        sw.journal().is_empty(),
        "nothing may be sent to an unverified host"
    );

    // The known_hosts line of the launcher pins the same key.
    let line_policy = HostKeyPolicy::from_known_hosts_line(&sim.known_hosts_line).unwrap();
    assert_eq!(
        line_policy,
        HostKeyPolicy::Fingerprint(sim.host_key_fingerprint.clone())
    );
    let ok = backend_with("ios", sim, line_policy, &sim.password);
    ok.get_port(&port("FastEthernet0/1")).await.unwrap();
}

#[tokio::test]
async fn wrong_password_is_refused_without_echoing_it() {
    let sims = FakeSwitches::start(&[SimSpec::new("sw1", "cisco_generic")]).unwrap();
    let sim = sims.get("sw1");
    let wrong = "not-the-password-4711";
    let sw = backend_with(
        "ios",
        sim,
        HostKeyPolicy::Fingerprint(sim.host_key_fingerprint.clone()),
        wrong,
    );
    let err = sw.get_port(&port("FastEthernet0/1")).await.unwrap_err();
    assert!(
        matches!(err, DeviceError::AuthenticationFailed { .. }),
        "{err:?}"
    );
    let text = format!("{err} {err:?}");
    assert!(!text.contains(wrong), "{text}");
    assert!(text.contains("authentication"), "{text}");
}

#[tokio::test]
async fn accept_any_host_key_connects() {
    let sims = FakeSwitches::start(&[SimSpec::new("sw1", "brocade_generic")]).unwrap();
    let sim = sims.get("sw1");
    let sw = backend_with("fastiron", sim, HostKeyPolicy::AcceptAny, &sim.password);
    sw.get_port(&port("ethernet 1/1")).await.unwrap();
}

/// A member of Cisco link-aggregation group `group` (LACP active) with `vlans`.
fn member(name: &str, group: i64, vlans: VlanMode) -> DesiredPort {
    let members = [port("FastEthernet0/1"), port("FastEthernet0/2")];
    lag_cases::member(
        port(name),
        group,
        patchbay_providers::LagMode::Active,
        vlans,
        &members,
    )
}

/// The simulator's own answer for an aggregate: `None` when it has no such
/// interface (it answers `% Invalid input`).
async fn aggregate(sw: &patchbay_providers::cli::CliSwitch, name: &str) -> Option<String> {
    let raw = sw.show_port_raw(&port(name)).await.ok()?;
    (!raw.contains("% Invalid input")).then_some(raw)
}

#[tokio::test]
async fn cisco_port_channels_are_formed_changed_and_removed_with_their_last_member() {
    let sims = FakeSwitches::start(&[SimSpec::new("sw1", "cisco_generic")]).unwrap();
    let sim = sims.get("sw1");
    let sw = backend("ios", sim);
    let trunk = VlanMode::Trunk {
        native: Some(vlan(100)),
        allowed: [vlan(200), vlan(201)].into_iter().collect(),
    };
    let m1 = member("FastEthernet0/1", 2, trunk.clone());
    let mut m2 = member("FastEthernet0/2", 2, trunk);
    m2.description = Some(patchbay_providers::values::Description::parse("host-7 eth1").unwrap());

    // Formed: the aggregate first, then each member with the same switchport lines
    // and its channel-group line; read back as members of group 2.
    sw.clear_journal();
    let results = patchbay_providers::verify::apply_batch_verified(&sw, &sets(&[&m1, &m2]))
        .await
        .unwrap();
    for r in &results {
        assert_eq!(r.outcome, Ok(PortChange::Changed), "{}", r.port);
    }
    let sent = config_lines(&sw);
    let at = |l: &str| sent.iter().position(|x| x == l).unwrap_or(usize::MAX);
    assert!(
        at("interface Port-channel2") < at("interface FastEthernet0/1")
            && at("interface FastEthernet0/1") < at("interface FastEthernet0/2")
            && at("interface FastEthernet0/2") < usize::MAX,
        "{sent:?}"
    );
    assert_eq!(
        sent.iter()
            .filter(|l| *l == "interface Port-channel2")
            .count(),
        1,
        "one aggregate block for the group: {sent:?}"
    );
    let po = aggregate(&sw, "Port-channel2")
        .await
        .expect("Port-channel2 exists");
    for line in [
        " switchport trunk native vlan 100",
        " switchport trunk allowed vlan 100,200,201",
        " switchport mode trunk",
    ] {
        assert!(po.contains(line), "{line:?} in {po}");
    }
    for m in [&m1, &m2] {
        let raw = sw.show_port_raw(&m.port).await.unwrap();
        assert!(raw.contains(" channel-group 2 mode active"), "{raw}");
        assert!(raw.contains(" switchport mode trunk"), "{raw}");
        let read = sw.get_port(&m.port).await.unwrap();
        assert_eq!(read.lag, Some(m.lag), "{}", m.port);
        reads_as(&sw, m, "formed").await;
    }
    let raw2 = sw.show_port_raw(&m2.port).await.unwrap();
    assert!(raw2.contains(" description host-7 eth1"), "{raw2}");

    // Applied again: nothing sent.
    sw.clear_journal();
    let again = sw.apply_batch(&sets(&[&m1, &m2])).await.unwrap();
    assert!(again.iter().all(|r| r.outcome == Ok(PortChange::Unchanged)));
    assert!(config_lines(&sw).is_empty(), "{:?}", config_lines(&sw));

    // The group's VLANs change: the aggregate and both members, read back.
    let m1b = member("FastEthernet0/1", 2, VlanMode::Access { vlan: vlan(300) });
    let mut m2b = member("FastEthernet0/2", 2, VlanMode::Access { vlan: vlan(300) });
    m2b.description = m2.description.clone();
    let results = patchbay_providers::verify::apply_batch_verified(&sw, &sets(&[&m1b, &m2b]))
        .await
        .unwrap();
    assert!(results.iter().all(|r| r.outcome == Ok(PortChange::Changed)));
    let po = aggregate(&sw, "Port-channel2").await.unwrap();
    assert!(
        po.contains(" switchport access vlan 300")
            && po.contains(" switchport mode access")
            && !po.contains("trunk"),
        "{po}"
    );

    // The aggregate drifts (someone set it back to a trunk): its members no longer
    // read as members, and applying repairs the aggregate alone.
    let mut drift = DesiredPort::clean(port("Port-channel2"));
    drift.vlans = VlanMode::Trunk {
        native: None,
        allowed: [vlan(300)].into_iter().collect(),
    };
    sw.set_port(&drift).await.unwrap();
    assert_eq!(sw.get_port(&m1b.port).await.unwrap().lag, Some(None));
    sw.clear_journal();
    let repaired = patchbay_providers::verify::apply_batch_verified(&sw, &sets(&[&m1b, &m2b]))
        .await
        .unwrap();
    assert!(
        repaired
            .iter()
            .all(|r| r.outcome == Ok(PortChange::Changed))
    );
    let sent = config_lines(&sw);
    assert!(
        sent.contains(&"interface Port-channel2".to_owned())
            && !sent.iter().any(|l| l.starts_with("interface FastEthernet")),
        "{sent:?}"
    );

    // One member leaves: it sheds its channel-group line first, the aggregate stays
    // for the other.
    let alone = DesiredPort::clean(m2b.port.clone());
    sw.clear_journal();
    let left =
        patchbay_providers::verify::apply_batch_verified(&sw, &[PortOperation::Set(alone.clone())])
            .await
            .unwrap();
    assert_eq!(left[0].outcome, Ok(PortChange::Changed));
    let sent = config_lines(&sw);
    assert!(
        at_in(&sent, "no channel-group") < at_in(&sent, "no switchport access vlan"),
        "{sent:?}"
    );
    assert!(
        !sent.iter().any(|l| l.starts_with("no interface")),
        "{sent:?}"
    );
    reads_as(&sw, &alone, "left").await;
    assert!(aggregate(&sw, "Port-channel2").await.is_some());
    reads_as(&sw, &m1b, "the member that stays").await;

    // The last member leaves (reset): the aggregate goes after it.
    sw.clear_journal();
    assert_eq!(sw.reset_port(&m1b.port).await.unwrap(), PortChange::Changed);
    let sent = config_lines(&sw);
    assert!(
        at_in(&sent, "no channel-group") < at_in(&sent, "no interface Port-channel2"),
        "{sent:?}"
    );
    assert_eq!(aggregate(&sw, "Port-channel2").await, None);
    let running = sw.running_config().await.unwrap().unwrap();
    assert!(!running.contains("channel-group"), "{running}");
    reads_as(&sw, &DesiredPort::clean(m1b.port.clone()), "reset").await;
}

fn at_in(lines: &[String], line: &str) -> usize {
    lines.iter().position(|l| l == line).unwrap_or(usize::MAX)
}

#[tokio::test]
async fn a_group_the_device_refuses_is_put_back_as_it_was() {
    // A dialect whose description line the simulator does not know: the member with
    // a description is refused after the aggregate was made and the other member
    // joined it.
    let (_, text) = patchbay_providers::cli::dialect::DIALECT_FILES[0];
    let text = text.replace(
        "description_set: \"description {description}\"",
        "description_set: \"describe {description}\"",
    );
    let broken = patchbay_providers::cli::Dialect::load("broken.yaml", &text).unwrap();
    let sims = FakeSwitches::start(&[SimSpec::new("sw1", "cisco_generic")]).unwrap();
    let sim = sims.get("sw1");
    let sw = backend_speaking(
        std::sync::Arc::new(broken),
        sim,
        HostKeyPolicy::Fingerprint(sim.host_key_fingerprint.clone()),
        &sim.password,
    );
    // Before: one port on access VLAN 100 (so the VLANs exist), one clean.
    let mut before1 = DesiredPort::clean(port("FastEthernet0/1"));
    before1.vlans = VlanMode::Access { vlan: vlan(100) };
    let mut spare = DesiredPort::clean(port("FastEthernet0/3"));
    spare.vlans = VlanMode::Access { vlan: vlan(200) };
    sw.apply_batch(&sets(&[&before1, &spare])).await.unwrap();
    let running = sw.running_config().await.unwrap().unwrap();

    let m1 = member("FastEthernet0/1", 3, VlanMode::Access { vlan: vlan(200) });
    let mut m2 = member("FastEthernet0/2", 3, VlanMode::Access { vlan: vlan(200) });
    m2.description = Some(patchbay_providers::values::Description::parse("refused").unwrap());
    sw.clear_journal();
    let results = sw.apply_batch(&sets(&[&m1, &m2])).await.unwrap();
    for r in &results {
        match &r.outcome {
            Err(DeviceError::CommandRejected { command, output }) => {
                assert_eq!(command, "describe refused", "{}", r.port);
                assert!(
                    output.starts_with("No such command")
                        && output.ends_with("; link-aggregation group 3 was put back"),
                    "{}: {output}",
                    r.port
                );
            }
            other => panic!("{}: {other:?}", r.port),
        }
    }
    // The group's lines did go out (the aggregate, the member that joined), and were
    // taken back: the running configuration is as it was, with no Port-channel3.
    let sent = config_lines(&sw);
    assert!(
        sent.contains(&"channel-group 3 mode active".to_owned())
            && sent.contains(&"no interface Port-channel3".to_owned()),
        "{sent:?}"
    );
    assert_eq!(sw.running_config().await.unwrap().unwrap(), running);
    assert_eq!(aggregate(&sw, "Port-channel3").await, None);
    reads_as(&sw, &before1, "put back").await;
    reads_as(
        &sw,
        &DesiredPort::clean(port("FastEthernet0/2")),
        "put back",
    )
    .await;
}

/// IOS (and the simulator) takes `switchport access vlan N` for a VLAN it does not
/// have: every VLAN a port carries is created, named or not, and the read checks
/// the switch's VLAN table — a VLAN deleted by hand reads as a difference and the
/// next apply makes it again.
#[tokio::test]
async fn every_vlan_a_port_carries_exists_and_one_deleted_by_hand_is_made_again() {
    let sims = FakeSwitches::start(&[SimSpec::new("sw1", "cisco_generic")]).unwrap();
    let sw = backend("ios", sims.get("sw1"));
    let ports = vlan_table_case();
    let ops: Vec<PortOperation> = ports.iter().cloned().map(PortOperation::Set).collect();
    let results = patchbay_providers::verify::apply_batch_verified(&sw, &ops)
        .await
        .unwrap();
    assert!(results.iter().all(|r| r.outcome.is_ok()), "{results:?}");
    let table = cisco_vlan_table(&sw).await;
    for v in VLAN_TABLE_CASE_VLANS {
        assert!(table.contains(&v), "VLAN {v} missing from {table:?}");
    }

    // Deleted by hand: the port still names it, and reads as not configured.
    delete_cisco_vlan_by_hand(&sw, 10).await;
    assert!(!cisco_vlan_table(&sw).await.contains(&10));
    let read = sw.get_port(&port("FastEthernet0/1")).await.unwrap();
    assert_eq!(read.vlans, Some(VlanMode::Access { vlan: vlan(10) }));
    assert_eq!(read.missing_vlans, Some([vlan(10)].into_iter().collect()));
    assert_eq!(
        diff(&ports[0], &read),
        [patchbay_providers::PortField::VlanTable]
    );
    // Applied again: the VLAN is made, the port reads configured.
    assert_eq!(sw.set_port(&ports[0]).await.unwrap(), PortChange::Changed);
    assert!(cisco_vlan_table(&sw).await.contains(&10));
    assert!(
        diff(
            &ports[0],
            &sw.get_port(&port("FastEthernet0/1")).await.unwrap()
        )
        .is_empty()
    );
}

/// PowerConnect's `show vlan` pages every 18 VLANs and has no paging switch: the
/// VLAN table is read through its pager, whole.
#[tokio::test]
async fn a_vlan_table_longer_than_a_page_is_read_whole() {
    let c = case("powerconnect");
    let sims = FakeSwitches::start(&[SimSpec::new("sw1", c.model)]).unwrap();
    let sw = backend("powerconnect", sims.get("sw1"));
    let mut d = DesiredPort::clean(port(c.ports[0]));
    d.vlans = VlanMode::Trunk {
        native: None,
        allowed: (100..=140).map(vlan).collect(),
    };
    let results =
        patchbay_providers::verify::apply_batch_verified(&sw, &[PortOperation::Set(d.clone())])
            .await
            .unwrap();
    assert!(results[0].outcome.is_ok(), "{results:?}");
    let read = sw.get_port(&d.port).await.unwrap();
    assert_eq!(read.missing_vlans, Some(Default::default()));
    // The last page's VLAN is there too: deleted by hand, it is missed.
    let typed = sw
        .run_raw(&["configure", "vlan database", "no vlan 140", "exit", "exit"])
        .await
        .unwrap();
    assert!(typed.iter().all(Result::is_ok), "{typed:?}");
    let read = sw.get_port(&d.port).await.unwrap();
    assert_eq!(read.missing_vlans, Some([vlan(140)].into_iter().collect()));
}

/// A connection cut while it logs in (a relay that shuts it down 2–60 ms after
/// accepting it) is never reported as refused credentials: an operator paging on
/// `AuthenticationFailed` must be able to trust it. A wrong password through the same
/// relay, uncut, still is.
#[tokio::test]
async fn a_connection_cut_while_logging_in_is_never_refused_credentials() {
    let sims = FakeSwitches::start(&[SimSpec::new("sw1", "cisco_generic")]).unwrap();
    let sim = sims.get("sw1");
    let mut seen = std::collections::BTreeMap::new();
    for cut_ms in (2..=60).step_by(2) {
        let relay = patchbay_testbed::CuttingRelay::start(
            sim.port,
            std::time::Duration::from_millis(cut_ms),
        )
        .unwrap();
        let mut through = sim.clone();
        through.port = relay.port;
        let sw = backend("ios", &through);
        let outcome = match sw.get_port(&port("FastEthernet0/1")).await {
            Ok(_) => "read",
            Err(e) => {
                assert!(
                    !matches!(e, DeviceError::AuthenticationFailed { .. }),
                    "cut after {cut_ms} ms: {e}"
                );
                e.category()
            }
        };
        *seen.entry(outcome).or_insert(0) += 1;
    }
    // Every cut is a dead session, never a refusal.
    assert!(
        seen.keys()
            .all(|k| ["DeviceUnreachable", "DeviceTimeout", "read"].contains(k)),
        "{seen:?}"
    );
    let relay = patchbay_testbed::CuttingRelay::start(sim.port, std::time::Duration::from_secs(60))
        .unwrap();
    let mut through = sim.clone();
    through.port = relay.port;
    through.password = "not-the-password".into();
    assert!(matches!(
        backend("ios", &through)
            .get_port(&port("FastEthernet0/1"))
            .await,
        Err(DeviceError::AuthenticationFailed { .. })
    ));
}

#[tokio::test]
async fn a_switch_cli_neighbour_read_is_one_session_of_show_commands() {
    // The dialects' neighbour rules come from vendor documentation (the parsers are
    // proven on documented output only); the simulator has no LLDP and answers both
    // commands with nothing. What this proves on the real peer: the read is one
    // login running the dialect's two show commands, nothing configures, an empty
    // answer is "nothing seen", and the switch is usable after.
    use patchbay_providers::NeighborSource;
    let sims = FakeSwitches::start(&[SimSpec::new("sw1", "cisco_generic")]).unwrap();
    let sw = backend("ios", sims.get("sw1")).with_journal();
    let n = sw.neighbors().await.unwrap();
    assert!(n.ports.is_empty(), "{n:?}");
    let journal = sw.journal();
    let shows: Vec<&str> = journal
        .iter()
        .filter(|s| s.line.starts_with("show "))
        .map(|s| s.line.as_str())
        .collect();
    assert_eq!(
        shows,
        [
            "show lldp neighbors detail",
            "show mac address-table dynamic"
        ]
    );
    assert!(
        !journal.iter().any(|s| s.configures),
        "a read configures nothing: {journal:?}"
    );
    assert!(sw.get_port(&port("FastEthernet0/1")).await.is_ok());
}

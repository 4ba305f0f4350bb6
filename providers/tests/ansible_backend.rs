//! The Ansible backend against the Cisco simulator (fake-switches `cisco_generic`
//! with the IOS syntax shims cisco.ios needs), Ansible from `make ansible`.
//!
//! Every port state is applied through Ansible in one run per batch and read back
//! twice: with the SSH CLI backend (an independent path) and with the read playbook;
//! the same for a Juniper simulator through Ansible's NETCONF modules, read back with
//! patchbay's own NETCONF backend, where a value the device refuses at commit (a
//! trunk without members) fails its port alone with the device's words.
//! Re-applying reports no change; a port the device does not have fails alone with
//! the playbook's message; a wrong password and a wrong host key are refused. A
//! device that accepts TCP and never answers: the run ends by the hard timeout and no
//! process it started survives, and while it is in flight the password is in no
//! process's command line or environment. A playbook that hangs and daemonizes a
//! child is killed at the timeout, child included.

#[path = "support/ssh_cases.rs"]
mod ssh_cases;

use std::os::unix::fs::PermissionsExt as _;
use std::time::{Duration, Instant};

use patchbay_providers::ansible::contract::platform;
use patchbay_providers::ansible::{
    AnsibleAuth, AnsibleHostKey, AnsibleOptions, AnsibleSwitch, AnsibleTarget,
};
use patchbay_providers::secret::SecretString;
use patchbay_providers::values::{PortName, VlanId};
use patchbay_providers::{
    DesiredPort, Device, DeviceError, PortChange, PortOperation, VlanMode, diff,
};
use patchbay_testbed::{FakeSwitches, SilentDevice, SimSpec, SimSwitch, ansible_playbook};

/// A host key no device here has.
const STRANGER_KEY: &str =
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJdD7y3aLq454yWBdwLWbieU1ebz9/cu7/QEXn9OIeZJ";

fn port(name: &str) -> PortName {
    PortName::parse(name).unwrap()
}

fn vlan(n: u16) -> VlanId {
    VlanId::new(n).unwrap()
}

fn key_of(sim: &SimSwitch) -> String {
    sim.known_hosts_line
        .split_whitespace()
        .skip(1)
        .collect::<Vec<_>>()
        .join(" ")
}

fn target(sim: &SimSwitch, password: &str) -> AnsibleTarget {
    AnsibleTarget {
        address: sim.address.clone(),
        port: sim.port,
        username: sim.username.clone(),
        auth: AnsibleAuth::Password(SecretString::new(password.to_owned())),
        enable_password: Some(SecretString::new(sim.enable_password.clone())),
        host_key: AnsibleHostKey::Known(key_of(sim)),
    }
}

fn options(timeout: Duration) -> AnsibleOptions {
    AnsibleOptions {
        ansible_playbook: ansible_playbook().unwrap(),
        playbooks: None,
        run_timeout: timeout,
        connect_timeout: Duration::from_secs(10),
    }
}

fn switch(sim: &SimSwitch) -> AnsibleSwitch {
    AnsibleSwitch::new(
        target(sim, &sim.password),
        platform("ios").unwrap(),
        options(Duration::from_secs(120)),
    )
}

/// Every state of `states` lands on `ports[0]` (while `ports[1]` takes the state
/// before it) in one run per batch, reads back the same through `independent` and
/// through Ansible, and re-applying reports no change.
async fn prove(
    sw: &AnsibleSwitch,
    independent: &dyn Device,
    states: Vec<(&'static str, DesiredPort)>,
    ports: [&str; 2],
) {
    for (k, (what, desired)) in states.iter().enumerate() {
        let mut desired = desired.clone();
        desired.port = port(ports[0]);
        let mut other = states[(k + states.len() - 1) % states.len()].1.clone();
        other.port = port(ports[1]);
        let ops = [
            PortOperation::Set(desired.clone()),
            PortOperation::Set(other.clone()),
        ];
        let before = sw.runs().len();
        let results = sw.apply_batch(&ops).await.unwrap();
        assert_eq!(
            sw.runs()[before..],
            ["apply.yml"],
            "{what}: one run per batch"
        );
        assert!(
            results.iter().all(|r| r.outcome.is_ok()),
            "{what}: {results:?}"
        );
        let reads = sw
            .get_ports(&[desired.port.clone(), other.port.clone()])
            .await
            .unwrap();
        for ((_, read), d) in reads.into_iter().zip([&desired, &other]) {
            let elsewhere = independent.get_port(&d.port).await.unwrap();
            assert!(
                diff(d, &elsewhere).is_empty(),
                "{what}: {} read elsewhere: {elsewhere:?}",
                d.port
            );
            let read = read.unwrap();
            assert!(
                diff(d, &read).is_empty(),
                "{what}: {} through Ansible: {read:?}",
                d.port
            );
        }
        let again = sw.apply_batch(&ops).await.unwrap();
        assert!(
            again.iter().all(|r| r.outcome == Ok(PortChange::Unchanged)),
            "{what}: re-applying: {again:?}"
        );
    }
    assert!(sw.leftovers().is_empty());
}

#[tokio::test]
async fn every_port_state_through_ansible_reads_back_over_ssh() {
    let sims =
        FakeSwitches::start(&[SimSpec::new("sw1", "cisco_generic").with_ios_shims()]).unwrap();
    let sim = sims.get("sw1");
    let cli = ssh_cases::backend("ios", sim);
    let states = ssh_cases::states("ios", "FastEthernet0/1");
    prove(
        &switch(sim),
        &cli,
        states,
        ["FastEthernet0/1", "FastEthernet0/2"],
    )
    .await;
}

#[tokio::test]
async fn junos_over_netconf_through_ansible_reads_back_with_the_netconf_backend() {
    let sims = FakeSwitches::start(&[SimSpec::new("qfx1", "juniper_qfx_copper_generic")]).unwrap();
    let sim = sims.get("qfx1");
    let mut t = target(sim, &sim.password);
    t.enable_password = None;
    let sw = AnsibleSwitch::new(
        t,
        platform("junos").unwrap(),
        options(Duration::from_secs(120)),
    );
    // The native NETCONF backend reads the device: another path than Ansible's.
    let netconf = patchbay_providers::netconf::NetconfSwitch::new(
        patchbay_providers::cli::SshTarget {
            address: sim.address.clone(),
            port: sim.port,
            username: sim.username.clone(),
            auth: patchbay_providers::cli::Auth::Password(SecretString::new(sim.password.clone())),
            host_key: patchbay_providers::cli::HostKeyPolicy::Fingerprint(
                sim.host_key_fingerprint.clone(),
            ),
            connect_timeout: Duration::from_secs(10),
        },
        patchbay_providers::netconf::model::for_os("junos", None).unwrap(),
        patchbay_providers::netconf::NetconfOptions::default(),
    );
    // The ios states: the junos playbooks keep to the same capabilities.
    let states = ssh_cases::states("ios", "ge-0/0/1");
    prove(&sw, &netconf, states, ["ge-0/0/1", "ge-0/0/2"]).await;
    // A value the device itself refuses: the QFX refuses to commit a trunk without
    // members. The batch's commit fails, the rescue applies the ports one by one, and
    // only that port fails, with the module's message; the other lands.
    let mut bare_trunk = DesiredPort::clean(port("ge-0/0/3"));
    bare_trunk.vlans = VlanMode::Trunk {
        native: None,
        allowed: Default::default(),
    };
    let mut fine = DesiredPort::clean(port("ge-0/0/4"));
    fine.vlans = VlanMode::Access { vlan: vlan(100) };
    let results = sw
        .apply_batch(&[
            PortOperation::Set(bare_trunk),
            PortOperation::Set(fine.clone()),
        ])
        .await
        .unwrap();
    match &results[0].outcome {
        Err(DeviceError::CommandRejected { command, output }) => {
            assert!(
                command.contains("configuration port") && command.contains("ge-0/0/3"),
                "{command}"
            );
            // The device's own words, through the module.
            assert!(output.contains("vlan members"), "{output}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(results[1].outcome, Ok(PortChange::Changed));
    assert!(diff(&fine, &netconf.get_port(&fine.port).await.unwrap()).is_empty());
    assert_eq!(
        netconf.get_port(&port("ge-0/0/3")).await.unwrap().vlans,
        Some(VlanMode::Unconfigured),
        "the refused port is not half-configured"
    );

    let mut d = DesiredPort::clean(port("ge-0/0/9"));
    d.vlans = VlanMode::Access { vlan: vlan(100) };
    let err = sw.set_port(&d).await.unwrap_err();
    assert!(
        matches!(&err, DeviceError::CommandRejected { output, .. } if output.contains("does not exist")),
        "{err:?}"
    );
    assert!(sw.leftovers().is_empty());
}

#[tokio::test]
async fn a_port_the_device_lacks_fails_alone_and_credentials_stay_secret() {
    let sims =
        FakeSwitches::start(&[SimSpec::new("sw1", "cisco_generic").with_ios_shims()]).unwrap();
    let sim = sims.get("sw1");
    let sw = switch(sim);
    let set = |p: &str| {
        let mut d = DesiredPort::clean(port(p));
        d.vlans = VlanMode::Access { vlan: vlan(300) };
        PortOperation::Set(d)
    };
    let results = sw
        .apply_batch(&[set("FastEthernet0/99"), set("FastEthernet0/3")])
        .await
        .unwrap();
    match &results[0].outcome {
        Err(DeviceError::CommandRejected { command, output }) => {
            assert!(command.contains("FastEthernet0/99"), "{command}");
            assert!(output.contains("does not exist"), "{output}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(results[1].outcome, Ok(PortChange::Changed));

    // A wrong password, and a host key other than the pinned one.
    let wrong = "not-the-password-4711";
    let bad = AnsibleSwitch::new(
        target(sim, wrong),
        platform("ios").unwrap(),
        options(Duration::from_secs(60)),
    );
    let err = bad.get_port(&port("FastEthernet0/1")).await.unwrap_err();
    assert!(
        matches!(err, DeviceError::AuthenticationFailed { .. }),
        "{err:?}"
    );
    assert!(!format!("{err} {err:?}").contains(wrong));
    let mut other_key = target(sim, &sim.password);
    other_key.host_key = AnsibleHostKey::Known(STRANGER_KEY.into());
    let pinned = AnsibleSwitch::new(
        other_key,
        platform("ios").unwrap(),
        options(Duration::from_secs(60)),
    );
    let err = pinned.get_port(&port("FastEthernet0/1")).await.unwrap_err();
    assert!(err.is_session_failure(), "{err:?}");
    assert!(bad.leftovers().is_empty() && pinned.leftovers().is_empty());

    // A playbook directory that does not exist: ansible-playbook's own error, with
    // no secret in it.
    let mut opts = options(Duration::from_secs(60));
    opts.playbooks = Some("/nonexistent/patchbay-playbooks".into());
    let missing = AnsibleSwitch::new(target(sim, &sim.password), platform("ios").unwrap(), opts);
    let err = missing
        .get_port(&port("FastEthernet0/1"))
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(text.contains("could not be found"), "{text}");
    assert!(
        !text.contains(&sim.password) && !text.contains(&sim.enable_password),
        "{text}"
    );

    // Pinned by fingerprint only: the key is read from the device and checked first.
    let mut by_fp = target(sim, &sim.password);
    by_fp.host_key = AnsibleHostKey::Verify(patchbay_providers::cli::HostKeyPolicy::Fingerprint(
        sim.host_key_fingerprint.clone(),
    ));
    let ok = AnsibleSwitch::new(
        by_fp.clone(),
        platform("ios").unwrap(),
        options(Duration::from_secs(60)),
    );
    ok.get_port(&port("FastEthernet0/1")).await.unwrap();
    by_fp.host_key = AnsibleHostKey::Verify(patchbay_providers::cli::HostKeyPolicy::Fingerprint(
        "SHA256:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA".into(),
    ));
    let refused = AnsibleSwitch::new(
        by_fp,
        platform("ios").unwrap(),
        options(Duration::from_secs(60)),
    );
    let err = refused
        .get_port(&port("FastEthernet0/1"))
        .await
        .unwrap_err();
    assert!(
        matches!(err, DeviceError::HostKeyMismatch { .. }),
        "{err:?}"
    );
    assert!(refused.runs().len() == 1 && refused.leftovers().is_empty());
}

/// The files of every Ansible run directory in flight (this process's runs and
/// others'): `patchbay-ansible-{pid}-{run}-{nanos}`, not the scratch directories of
/// the operator tests' clusters (`patchbay-ansible-{pid}-{n}`, with a kubeconfig).
fn run_files() -> Vec<std::path::PathBuf> {
    let Ok(dirs) = std::fs::read_dir(std::env::temp_dir()) else {
        return Vec::new();
    };
    dirs.flatten()
        .filter(|d| {
            let name = d.file_name().to_string_lossy().into_owned();
            name.strip_prefix("patchbay-ansible-")
                .is_some_and(|marker| marker.split('-').count() == 3)
        })
        .flat_map(|d| std::fs::read_dir(d.path()).into_iter().flatten().flatten())
        .map(|f| f.path())
        .filter(|p| p.is_file())
        .collect()
}

/// A device that lets Ansible log in and then never answers a command: the same
/// timeout of the whole switch.
#[tokio::test]
async fn a_device_that_hangs_after_login_is_a_timeout_of_the_switch() {
    let hang = patchbay_testbed::HangingShell::start().unwrap();
    let sw = AnsibleSwitch::new(
        sw_target(&hang),
        platform("ios").unwrap(),
        options(Duration::from_secs(8)),
    );
    let err = sw.get_port(&port("FastEthernet0/1")).await.unwrap_err();
    assert!(matches!(err, DeviceError::Timeout { .. }), "{err:?}");
    assert_eq!(err.category(), "DeviceTimeout");
    let refused = AnsibleSwitch::new(
        AnsibleTarget {
            port: {
                let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
                free.local_addr().unwrap().port()
            },
            ..sw_target(&hang)
        },
        platform("ios").unwrap(),
        options(Duration::from_secs(8)),
    );
    let err = refused
        .get_port(&port("FastEthernet0/1"))
        .await
        .unwrap_err();
    assert_eq!(err.category(), "DeviceUnreachable", "{err:?}");
    assert!(sw.leftovers().is_empty() && refused.leftovers().is_empty());
}

fn sw_target(hang: &patchbay_testbed::HangingShell) -> AnsibleTarget {
    AnsibleTarget {
        address: "127.0.0.1".into(),
        port: hang.port,
        username: hang.username.clone(),
        auth: AnsibleAuth::PrivateKey(SecretString::new(hang.client_key.clone())),
        enable_password: None,
        host_key: AnsibleHostKey::Known(hang.host_key.clone()),
    }
}

#[tokio::test]
async fn a_silent_device_is_cut_off_at_the_timeout_and_nothing_survives() {
    let silent = SilentDevice::start().unwrap();
    let password = format!("pw-silent-{}", std::process::id());
    let t = AnsibleTarget {
        address: "127.0.0.1".into(),
        port: silent.port,
        username: "netops".into(),
        auth: AnsibleAuth::Password(SecretString::new(password.clone())),
        enable_password: Some(SecretString::new("en-secret-x".to_owned())),
        host_key: AnsibleHostKey::Known(STRANGER_KEY.into()),
    };
    let hard = Duration::from_secs(8);
    let sw = AnsibleSwitch::new(t, platform("ios").unwrap(), options(hard));
    let started = Instant::now();
    let run = tokio::spawn({
        let sw = sw.clone();
        async move { sw.get_port(&port("FastEthernet0/1")).await }
    });
    // While the run is in flight, no process shows the password, and every file of
    // a run's private directory is its owner's only.
    let mut seen_processes = 0;
    while !run.is_finished() {
        for file in run_files() {
            let mode = std::fs::metadata(&file).map(|m| m.permissions().mode());
            if let Ok(mode) = mode {
                assert_eq!(mode & 0o077, 0, "{} is {mode:o}", file.display());
            }
        }
        for pid in sw.leftovers() {
            seen_processes += 1;
            for file in ["cmdline", "environ"] {
                let bytes = std::fs::read(format!("/proc/{pid}/{file}")).unwrap_or_default();
                let text = String::from_utf8_lossy(&bytes);
                assert!(
                    !text.contains(&password),
                    "the password is in /proc/{pid}/{file}"
                );
                assert!(
                    !text.contains("en-secret-x"),
                    "the enable password is in /proc/{pid}/{file}"
                );
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(seen_processes > 0, "the run was observed");
    let err = run.await.unwrap().unwrap_err();
    let took = started.elapsed();
    assert!(took < hard + Duration::from_secs(5), "took {took:?}");
    // A device that never sends its banner is a timeout of the whole switch, as the
    // SSH backend says it, not a protocol error of one task.
    assert!(matches!(err, DeviceError::Timeout { .. }), "{err:?}");
    assert!(err.is_session_failure());
    assert!(!format!("{err} {err:?}").contains(&password));
    // Nothing the run started is left, ansible-connection included.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(sw.leftovers(), Vec::<u32>::new());
}

#[tokio::test]
async fn a_hanging_run_is_killed_with_the_daemon_it_started() {
    // A stand-in for ansible-playbook that daemonizes a child out of its process
    // group (as ansible-connection does) and never returns.
    let dir = std::env::temp_dir().join(format!("patchbay-hang-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let script = dir.join("ansible-playbook");
    std::fs::write(
        &script,
        "#!/bin/sh\nsetsid sleep 600 </dev/null >/dev/null 2>&1 &\nexec sleep 600\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let sims = FakeSwitches::start(&[SimSpec::new("sw1", "cisco_generic")]).unwrap();
    let mut opts = options(Duration::from_secs(2));
    opts.ansible_playbook = script;
    let sw = AnsibleSwitch::new(target(sims.get("sw1"), "x"), platform("ios").unwrap(), opts);
    let started = Instant::now();
    let err = sw.get_port(&port("FastEthernet0/1")).await.unwrap_err();
    assert!(matches!(err, DeviceError::Timeout { .. }), "{err:?}");
    assert!(started.elapsed() < Duration::from_secs(5));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(sw.leftovers(), Vec::<u32>::new());
    // A run cancelled from outside (the worker's batch bound under leader election)
    // leaves nothing either.
    let cancelled = tokio::time::timeout(
        Duration::from_millis(800),
        sw.get_port(&port("FastEthernet0/1")),
    )
    .await;
    assert!(cancelled.is_err(), "the run was still going");
    assert_eq!(sw.runs().len(), 2);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(sw.leftovers(), Vec::<u32>::new());
    let _ = std::fs::remove_dir_all(&dir);
}

/// Six ports in one run — access 10 and 20 (twice), a trunk with native 100 and
/// named 101 and 102, a plain trunk 200–202, a trunk on native 20 — leave every VLAN they carry on the switch, named
/// or not (cisco.ios's ios_vlans makes nothing of an entry with only an ID), and the
/// read playbook checks the VLAN table: a VLAN deleted by hand reads as missing and
/// the next run makes it again.
#[tokio::test]
async fn every_vlan_a_batch_needs_exists_after_it_and_the_read_checks_the_table() {
    let sims =
        FakeSwitches::start(&[SimSpec::new("sw1", "cisco_generic").with_ios_shims()]).unwrap();
    let sim = sims.get("sw1");
    let sw = switch(sim);
    let cli = ssh_cases::backend("ios", sim);
    let mut ports = ssh_cases::vlan_table_case();
    ports.extend([
        ssh_cases::access_port("FastEthernet0/5", 10),
        ssh_cases::trunk_port("FastEthernet0/6", Some(20), &[201]),
    ]);
    let ops: Vec<PortOperation> = ports.iter().cloned().map(PortOperation::Set).collect();
    let results = patchbay_providers::verify::apply_batch_verified(&sw, &ops)
        .await
        .unwrap();
    assert!(results.iter().all(|r| r.outcome.is_ok()), "{results:?}");
    let table = ssh_cases::cisco_vlan_table(&cli).await;
    for v in ssh_cases::VLAN_TABLE_CASE_VLANS {
        assert!(table.contains(&v), "VLAN {v} missing from {table:?}");
    }

    ssh_cases::delete_cisco_vlan_by_hand(&cli, 10).await;
    let read = sw.get_port(&port("FastEthernet0/1")).await.unwrap();
    assert_eq!(read.missing_vlans, Some([vlan(10)].into_iter().collect()));
    assert_eq!(
        diff(&ports[0], &read),
        [patchbay_providers::PortField::VlanTable]
    );
    let again = patchbay_providers::verify::apply_batch_verified(&sw, &ops[..1])
        .await
        .unwrap();
    // Only the VLAN was sent, and that is a change of the port that carries it.
    assert!(
        matches!(again[0].outcome, Ok(PortChange::Changed)),
        "{again:?}"
    );
    assert!(ssh_cases::cisco_vlan_table(&cli).await.contains(&10));
    let settled = patchbay_providers::verify::apply_batch_verified(&sw, &ops[..1])
        .await
        .unwrap();
    assert!(
        matches!(settled[0].outcome, Ok(PortChange::Unchanged)),
        "{settled:?}"
    );
    assert!(sw.leftovers().is_empty());
}

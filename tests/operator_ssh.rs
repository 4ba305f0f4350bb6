//! The operator driving simulated switches over SSH: ProviderSwitch (backend ssh, a
//! Secret, a pinned host key) + Switch + SwitchPortConfiguration on devplane (or a real
//! cluster with `PATCHBAY_E2E_CLUSTER=kubeconfig`), fake-switches simulators started
//! and stopped by PID. Device state is read back from the simulator itself.

#[path = "../providers/tests/support/ssh_cases.rs"]
mod ssh_cases;
mod support;

use patchbay::api::PortState;
use patchbay_providers::{Device as _, VlanMode};
use patchbay_testbed::{FakeSwitches, SimSpec};
use serde_json::json;
use ssh_cases::{backend, port, vlan};
use support::cycle;
use support::env::{Env, condition};

#[tokio::test]
async fn the_operator_configures_and_cleans_a_simulated_cisco_port() {
    let sims = FakeSwitches::start(&[SimSpec::new("tor1", "cisco_generic")]).unwrap();
    let sim = sims.get("tor1");
    let env = Env::start("ssh-cisco").await;
    env.switch(
        "tor1",
        "ios",
        sim,
        &sim.host_key_fingerprint,
        &[
            ("tor1-p1", "FastEthernet0/1"),
            ("tor1-p2", "FastEthernet0/2"),
        ],
    )
    .await;
    let device = backend("ios", sim);
    cycle::configure_then_edit(
        &env,
        "tor1-p1",
        &device,
        "FastEthernet0/1",
        "FastEthernet0/2",
    )
    .await;
    // Changed on the switch behind patchbay's back three times in a row: put back
    // each time.
    cycle::drift_is_undone(&env, "tor1-p1", &device, "FastEthernet0/1", 3).await;
    // The port's VLAN deleted by hand: the port still names it but forwards nothing.
    // The drift sweep reads the VLAN table with the port and makes the VLAN again.
    let repaired = env.probes.metrics.drift_repaired("SwitchPort");
    let typed = device
        .run_raw(&["configure terminal", "no vlan 300", "exit"])
        .await
        .unwrap();
    assert!(typed.iter().all(Result::is_ok), "{typed:?}");
    support::eventually(60, "VLAN 300 made again", || async {
        let shown = device.run_raw(&["show vlan brief"]).await.ok()?;
        let text = shown.into_iter().next()?.ok()?;
        (env.probes.metrics.drift_repaired("SwitchPort") > repaired
            && text.lines().any(|l| l.starts_with("300 ")))
        .then_some(())
    })
    .await;
    env.wait_state("tor1-p1", PortState::Active).await;
    cycle::unlink_and_clean(&env, "tor1-p1", &device, "FastEthernet0/1").await;
}

#[tokio::test]
async fn capabilities_and_host_keys_are_enforced_by_the_operator() {
    let sims = FakeSwitches::start(&[
        SimSpec::new("eos1", "arista_generic"),
        SimSpec::new("tor2", "cisco_generic"),
    ])
    .unwrap();
    let env = Env::start("ssh-refusals").await;

    // Arista over SSH carries trunks only: an access configuration is refused at
    // validation, naming the field, and nothing reaches the device.
    let eos = sims.get("eos1");
    env.switch(
        "eos1",
        "eos",
        eos,
        &eos.host_key_fingerprint,
        &[("eos1-p1", "Ethernet1")],
    )
    .await;
    env.configuration("access-only", json!({"untaggedVLAN": 100}))
        .await;
    env.link("eos1-p1", Some("access-only")).await;
    let p = env
        .wait_for("eos1-p1", "the capability refusal", |p| {
            condition(p, "Ready")
                .is_some_and(|(s, _, m)| s == "False" && m.contains("spec.untaggedVLAN"))
        })
        .await;
    let (_, _, message) = condition(&p, "Ready").unwrap();
    assert!(
        message.contains("cannot configure access VLAN"),
        "{message}"
    );
    let device = backend("eos", eos);
    assert_eq!(
        device.get_port(&port("Ethernet1")).await.unwrap().vlans,
        Some(VlanMode::Unconfigured)
    );
    // A trunk is fine.
    env.configuration("trunk", json!({"vlans": [{"id": 10}, {"id": 20}]}))
        .await;
    env.link("eos1-p1", Some("trunk")).await;
    env.wait_state("eos1-p1", PortState::Active).await;
    assert_eq!(
        device.get_port(&port("Ethernet1")).await.unwrap().vlans,
        Some(VlanMode::Trunk {
            native: None,
            allowed: [vlan(10), vlan(20)].into_iter().collect()
        })
    );

    // A wrong pin: the port never configures and the status names both keys.
    let tor2 = sims.get("tor2");
    let wrong = "SHA256:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";
    env.switch(
        "tor2",
        "ios",
        tor2,
        wrong,
        &[("tor2-p1", "FastEthernet0/1")],
    )
    .await;
    env.link("tor2-p1", Some("trunk")).await;
    let p = env
        .wait_for("tor2-p1", "the host-key refusal", |p| {
            p.status
                .as_ref()
                .and_then(|s| s.last_error.as_deref())
                .is_some_and(|e| e.contains("host key"))
        })
        .await;
    let err = p.status.unwrap().last_error.unwrap();
    assert!(
        err.contains(wrong) && err.contains(&tor2.host_key_fingerprint),
        "{err}"
    );
    assert!(!err.contains(&tor2.password));
    let tor2_device = backend("ios", tor2);
    assert_eq!(
        tor2_device
            .get_port(&port("FastEthernet0/1"))
            .await
            .unwrap()
            .vlans,
        Some(VlanMode::Unconfigured)
    );
}

#[tokio::test]
async fn the_operator_bundles_cisco_ports_into_a_port_channel_and_dissolves_it() {
    let sims = FakeSwitches::start(&[SimSpec::new("tor3", "cisco_generic")]).unwrap();
    let sim = sims.get("tor3");
    let env = Env::start("ssh-lag").await;
    env.switch(
        "tor3",
        "ios",
        sim,
        &sim.host_key_fingerprint,
        &[
            ("tor3-p1", "FastEthernet0/1"),
            ("tor3-p2", "FastEthernet0/2"),
        ],
    )
    .await;
    env.configuration(
        "bundled",
        json!({"untaggedVLAN": 30, "linkAggregation": {"group": 5}}),
    )
    .await;
    env.link("tor3-p1", Some("bundled")).await;
    env.link("tor3-p2", Some("bundled")).await;
    env.wait_state("tor3-p1", PortState::Active).await;
    env.wait_state("tor3-p2", PortState::Active).await;

    // Read back from the simulator: Port-channel5 carries the VLAN, both ports are
    // its members.
    let device = backend("ios", sim);
    let po = device.show_port_raw(&port("Port-channel5")).await.unwrap();
    assert!(po.contains(" switchport access vlan 30"), "{po}");
    for p in ["FastEthernet0/1", "FastEthernet0/2"] {
        let read = device.get_port(&port(p)).await.unwrap();
        assert_eq!(read.lag.flatten().map(|l| l.group.get()), Some(5), "{p}");
        assert_eq!(read.vlans, Some(VlanMode::Access { vlan: vlan(30) }), "{p}");
    }

    // One leaves: clean, the channel stays for the other; the last leaves: the
    // channel is gone.
    cycle::unlink_and_clean(&env, "tor3-p1", &device, "FastEthernet0/1").await;
    let fa1 = device.get_port(&port("FastEthernet0/1")).await.unwrap();
    assert_eq!(fa1.lag, Some(None));
    device
        .show_port_raw(&port("Port-channel5"))
        .await
        .expect("Port-channel5 stays while a member is in it");
    cycle::unlink_and_clean(&env, "tor3-p2", &device, "FastEthernet0/2").await;
    let po = device.show_port_raw(&port("Port-channel5")).await;
    assert!(
        matches!(&po, Err(patchbay_providers::DeviceError::CommandRejected { output, .. })
            if output.contains("Invalid input")),
        "{po:?}"
    );
    let running = device.running_config().await.unwrap().unwrap();
    assert!(!running.contains("channel-group"), "{running}");
}

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

    // A member's entry renamed: it leaves the channel on the old device port and
    // joins it on the new one.
    rename_entry(&env, "tor3", "tor3-p2", "FastEthernet0/3").await;
    wait_active_on(&env, "tor3-p2", "FastEthernet0/3").await;
    let fa3 = device.get_port(&port("FastEthernet0/3")).await.unwrap();
    assert_eq!(fa3.lag.flatten().map(|l| l.group.get()), Some(5));
    assert_eq!(fa3.vlans, Some(VlanMode::Access { vlan: vlan(30) }));
    let fa2 = device.get_port(&port("FastEthernet0/2")).await.unwrap();
    assert_eq!(
        (fa2.lag, fa2.vlans),
        (Some(None), Some(VlanMode::Unconfigured))
    );

    // One leaves: clean, the channel stays for the other; the last leaves: the
    // channel is gone.
    cycle::unlink_and_clean(&env, "tor3-p1", &device, "FastEthernet0/1").await;
    let fa1 = device.get_port(&port("FastEthernet0/1")).await.unwrap();
    assert_eq!(fa1.lag, Some(None));
    device
        .show_port_raw(&port("Port-channel5"))
        .await
        .expect("Port-channel5 stays while a member is in it");
    cycle::unlink_and_clean(&env, "tor3-p2", &device, "FastEthernet0/3").await;
    let po = device.show_port_raw(&port("Port-channel5")).await;
    assert!(
        matches!(&po, Err(patchbay_providers::DeviceError::CommandRejected { output, .. })
            if output.contains("Invalid input")),
        "{po:?}"
    );
    let running = device.running_config().await.unwrap().unwrap();
    assert!(!running.contains("channel-group"), "{running}");
}

/// Patches the entry `key` of Switch `switch` to name `device_port`.
async fn rename_entry(env: &support::env::Env, switch: &str, key: &str, device_port: &str) {
    env.api::<patchbay::api::Switch>()
        .patch(
            switch,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"ports": {key: {"name": device_port}}}})),
        )
        .await
        .unwrap();
}

/// Waits for `key` to read back Active on `device_port`.
async fn wait_active_on(env: &support::env::Env, key: &str, device_port: &str) {
    env.wait_for(key, &format!("Active on {device_port}"), |p| {
        let st = p.status.as_ref();
        st.and_then(|s| s.state) == Some(PortState::Active)
            && st.and_then(|s| s.device_port.as_deref()) == Some(device_port)
    })
    .await;
}

/// A Switch port entry renamed (the cable moved, or a typo fixed) while its port
/// carries a VLAN: the port moves. The device port it leaves is cleaned and read
/// back before the new one is configured — with the drift policy ReportOnly, so the
/// drift sweep does none of it — and two entries swapped trade their VLANs without
/// one's clean undoing the other's change.
#[tokio::test]
async fn a_renamed_port_entry_moves_its_vlans_and_cleans_the_port_it_left() {
    let sims = FakeSwitches::start(&[SimSpec::new("tor4", "cisco_generic")]).unwrap();
    let sim = sims.get("tor4");
    let env = Env::start("ssh-move").await;
    env.switch(
        "tor4",
        "ios",
        sim,
        &sim.host_key_fingerprint,
        &[
            ("tor4-p1", "FastEthernet0/1"),
            ("tor4-p2", "FastEthernet0/3"),
        ],
    )
    .await;
    env.api::<patchbay::api::Switch>()
        .patch(
            "tor4",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"driftPolicy": "ReportOnly"}})),
        )
        .await
        .unwrap();
    env.configuration("ten", json!({"untaggedVLAN": 10})).await;
    env.configuration("twenty", json!({"untaggedVLAN": 20}))
        .await;
    env.link("tor4-p1", Some("ten")).await;
    env.link("tor4-p2", Some("twenty")).await;
    wait_active_on(&env, "tor4-p1", "FastEthernet0/1").await;
    wait_active_on(&env, "tor4-p2", "FastEthernet0/3").await;
    let device = backend("ios", sim);
    let access = |n| Some(VlanMode::Access { vlan: vlan(n) });
    let vlans = |p: &'static str| {
        let device = &device;
        async move { device.get_port(&port(p)).await.unwrap().vlans }
    };
    assert_eq!(vlans("FastEthernet0/1").await, access(10));

    // Moved: the old device port clean, the new one on VLAN 10, an Event saying so.
    rename_entry(&env, "tor4", "tor4-p1", "FastEthernet0/2").await;
    wait_active_on(&env, "tor4-p1", "FastEthernet0/2").await;
    assert_eq!(vlans("FastEthernet0/2").await, access(10));
    assert_eq!(
        vlans("FastEthernet0/1").await,
        Some(VlanMode::Unconfigured),
        "the device port left behind keeps the tenant's VLAN"
    );
    let events = support::events_about(&env.api(), "tor4-p1").await;
    assert!(
        events.iter().any(|e| e.reason.as_deref() == Some("Moved")
            && e.note.as_deref()
                == Some("moved from device port FastEthernet0/1 to FastEthernet0/2")),
        "{events:?}"
    );

    // Swapped: each takes the other's device port with its own VLAN.
    env.api::<patchbay::api::Switch>()
        .patch(
            "tor4",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"ports": {
                "tor4-p1": {"name": "FastEthernet0/3"},
                "tor4-p2": {"name": "FastEthernet0/2"},
            }}})),
        )
        .await
        .unwrap();
    wait_active_on(&env, "tor4-p1", "FastEthernet0/3").await;
    wait_active_on(&env, "tor4-p2", "FastEthernet0/2").await;
    // A drift sweep (ReportOnly: read, never written) after the swap settled.
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    assert_eq!(vlans("FastEthernet0/3").await, access(10));
    assert_eq!(vlans("FastEthernet0/2").await, access(20));
    for key in ["tor4-p1", "tor4-p2"] {
        let p = env.wait_state(key, PortState::Active).await;
        assert_eq!(
            condition(&p, "Drifted").map(|c| c.0),
            Some("False".into()),
            "{key}"
        );
    }
}

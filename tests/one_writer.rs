//! One writer per device, counted by the device itself: a simulated Cisco with
//! `maxSessions: 1` logs every SSH connection it accepts, and no two may be open at
//! once — not when a Secret is rotated while a batch runs (the device is rebuilt with
//! the new credentials), not when two Switches name one ProviderSwitch (one device).
//! The restart and leader-takeover cases run the real binary (`tests/production.rs`).

mod support;

#[path = "../providers/tests/support/ssh_cases.rs"]
mod ssh_cases;

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Patch, PatchParams};
use patchbay::api::{PortState, Switch};
use patchbay_providers::{Device as _, VlanMode};
use patchbay_testbed::{FakeSwitches, SimSpec};
use serde_json::json;
use ssh_cases::{backend, port, vlan};
use support::env::Env;
use support::{assert_one_writer, eventually};

/// The ProviderSwitch `tor` of `sim` capped at one session, a Switch `tor` with
/// ports `a1..=a{n}` on FastEthernet0/1.., and the configuration `web` (access 100).
async fn one_session_switch(env: &Env, sim: &patchbay_testbed::SimSwitch, n: usize) {
    let names: Vec<(String, String)> = (1..=n)
        .map(|i| (format!("a{i}"), format!("FastEthernet0/{i}")))
        .collect();
    let pairs: Vec<(&str, &str)> = names
        .iter()
        .map(|(a, b)| (a.as_str(), b.as_str()))
        .collect();
    env.switch("tor", "ios", sim, &sim.host_key_fingerprint, &pairs)
        .await;
    env.cap_sessions("tor", 1).await;
    env.configuration("web", json!({"untaggedVLAN": 100})).await;
}

/// Asserts FastEthernet0/`i` of `sim` is on access VLAN 100 for each `i`, read over
/// SSH.
async fn on_vlan_100(sim: &patchbay_testbed::SimSwitch, ports: &[usize]) {
    let device = backend("ios", sim);
    for i in ports {
        assert_eq!(
            device
                .get_port(&port(&format!("FastEthernet0/{i}")))
                .await
                .unwrap()
                .vlans,
            Some(VlanMode::Access { vlan: vlan(100) }),
            "FastEthernet0/{i}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_rotated_mid_batch_never_opens_a_second_session() {
    let sims = FakeSwitches::start(&[SimSpec::new("tor", "cisco_2960_24TT_L")]).unwrap();
    let sim = sims.get("tor").clone();
    let env = Env::start_with("one-writer-secret", |s| {
        s.batch_window = std::time::Duration::from_millis(200);
        s.batch_quiet = std::time::Duration::from_millis(200);
    })
    .await;
    const PORTS: usize = 24;
    one_session_switch(&env, &sim, PORTS).await;
    for i in 1..=PORTS {
        env.wait_state(&format!("a{i}"), PortState::Idle).await;
    }
    let before = sims.connections("tor");
    for i in 1..=PORTS {
        env.link(&format!("a{i}"), Some("web")).await;
    }
    eventually(30, "the batch's session", || async {
        (sims.connections("tor") > before).then_some(())
    })
    .await;
    // Rotated while the batch runs: a new version of the Secret (the device accepts
    // the same login, as after a rotation pushed to the switch first).
    env.api::<Secret>()
        .patch(
            "tor-login",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"rotated": "1"}},
                                 "stringData": {"password": sim.password}})),
        )
        .await
        .unwrap();
    for i in 1..=PORTS {
        env.wait_state(&format!("a{i}"), PortState::Active).await;
    }
    assert_one_writer(&sims, "tor");
    on_vlan_100(&sim, &[1, PORTS]).await;
    env.cluster.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_switches_on_one_provider_switch_share_its_one_session() {
    let sims = FakeSwitches::start(&[SimSpec::new("tor", "cisco_2960_24TT_L")]).unwrap();
    let sim = sims.get("tor").clone();
    let env = Env::start("one-writer-two-switches").await;
    one_session_switch(&env, &sim, 12).await;
    // A second Switch (say, the other half of the chassis) naming the same
    // ProviderSwitch: the same device.
    let ports: serde_json::Map<String, serde_json::Value> = (13..=24)
        .map(|i| {
            (
                format!("b{i}"),
                json!({"name": format!("FastEthernet0/{i}")}),
            )
        })
        .collect();
    env.create::<Switch>(json!({
        "apiVersion": "patchbay.dev/v1alpha1", "kind": "Switch",
        "metadata": {"name": "tor-b"},
        "spec": {"provider": {"name": "tor"}, "ports": ports}
    }))
    .await;
    let keys: Vec<String> = (1..=12)
        .map(|i| format!("a{i}"))
        .chain((13..=24).map(|i| format!("b{i}")))
        .collect();
    for k in &keys {
        env.wait_state(k, PortState::Idle).await;
    }
    // Both Switches' ports at once, interleaved.
    for (a, b) in keys[..12].iter().zip(&keys[12..]) {
        env.link(a, Some("web")).await;
        env.link(b, Some("web")).await;
    }
    for k in &keys {
        env.wait_state(k, PortState::Active).await;
    }
    assert_one_writer(&sims, "tor");
    // Both Switches show the device answering (the worker's notices reach both).
    for name in ["tor", "tor-b"] {
        env.wait_obj::<Switch>(name, "the device reachable", |s| {
            s.status.as_ref().is_some_and(|st| {
                st.conditions
                    .iter()
                    .any(|c| c.type_ == "DeviceReachable" && c.status == "True")
            })
        })
        .await;
    }
    on_vlan_100(&sim, &[1, 12, 13, 24]).await;
    env.cluster.finish().await;
}

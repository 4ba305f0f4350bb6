//! The operator driving a switch through Ansible: a ProviderSwitch with backend
//! ansible (os ios, the Secret's login, the host key pinned by fingerprint) for the
//! Cisco simulator with the IOS syntax shims, a Switch and a SwitchPortConfiguration
//! on devplane; configure, edit, drift made over SSH restored, clean, each one
//! ansible-playbook run per batch, the device read back over SSH (another path than
//! Ansible's).

#[path = "../providers/tests/support/ssh_cases.rs"]
mod ssh_cases;
mod support;

use std::time::Duration;

use patchbay_testbed::{FakeSwitches, SimSpec};
use serde_json::json;
use ssh_cases::backend;
use support::cycle;
use support::env::Env;

#[tokio::test]
async fn the_operator_configures_edits_and_cleans_a_port_through_ansible() {
    let sims =
        FakeSwitches::start(&[SimSpec::new("tor1", "cisco_generic").with_ios_shims()]).unwrap();
    let sim = sims.get("tor1");
    let env = Env::start_with("ansible", |s| s.drift_interval = Duration::from_secs(2)).await;
    env.ansible_switch(
        "tor1",
        sim,
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
    // A change made on the switch behind patchbay's back (over SSH) is found by the
    // drift sweep (one read-playbook run per switch) and undone through Ansible.
    cycle::drift_is_undone(&env, "tor1-p1", &device, "FastEthernet0/1", 2).await;
    cycle::unlink_and_clean(&env, "tor1-p1", &device, "FastEthernet0/1").await;
}

/// A switch that lets Ansible log in and then never answers: its Ansible runs time
/// out (Ansible's own persistent-connection timeout fires first), which is the whole
/// switch's failure, as over SSH — the Switch says `DeviceTimeout`, its ports say
/// why, and the switch is probed once per backoff step, not once per port.
#[tokio::test]
async fn a_switch_that_hangs_through_ansible_goes_down_as_one_and_is_probed_per_backoff_step() {
    let hang = patchbay_testbed::HangingShell::start().unwrap();
    let backoff = Duration::from_secs(10);
    let env = Env::start_with("ansible-hang", |s| {
        s.backoff = patchbay::decide::state_machine::Backoff {
            base: backoff,
            cap: backoff,
        };
    })
    .await;
    env.device(
        "tor9",
        &[
            ("username", &hang.username),
            ("privateKey", &hang.client_key),
        ],
        json!({"backend": "ansible", "os": "ios", "address": "127.0.0.1", "port": hang.port,
               "hostKey": {"knownHostsLine": hang.known_hosts_line()},
               "options": {"commandTimeoutSeconds": 8}}),
        &[
            ("tor9-p1", "FastEthernet0/1"),
            ("tor9-p2", "FastEthernet0/2"),
            ("tor9-p3", "FastEthernet0/3"),
        ],
    )
    .await;
    env.configuration("web", json!({"untaggedVLAN": 100})).await;
    let started = std::time::Instant::now();
    for p in ["tor9-p1", "tor9-p2", "tor9-p3"] {
        env.link(p, Some("web")).await;
    }
    env.wait_obj::<patchbay::api::Switch>("tor9", "the switch down on a timeout", |s| {
        s.status.as_ref().is_some_and(|st| {
            st.conditions.iter().any(|c| {
                c.type_ == "DeviceReachable" && c.status == "False" && c.reason == "DeviceTimeout"
            })
        })
    })
    .await;
    for p in ["tor9-p1", "tor9-p2", "tor9-p3"] {
        env.wait_for(p, "the port naming the switch's timeout", |sp| {
            support::env::condition(sp, "Ready")
                .is_some_and(|(s, r, _)| s == "False" && r == "DeviceTimeout")
        })
        .await;
    }
    tokio::time::sleep(Duration::from_secs(25)).await;
    // One run at the start, then one probe per backoff step for the three ports.
    let steps = started.elapsed().as_secs() / backoff.as_secs();
    let logins = hang.logins() as u64;
    assert!(
        logins <= 2 + steps,
        "{logins} logins in {:?} (backoff {backoff:?})",
        started.elapsed()
    );
    env.cluster.finish().await;
}

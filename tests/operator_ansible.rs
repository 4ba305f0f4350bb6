//! The operator driving a switch through Ansible: a ProviderSwitch with backend
//! ansible (os ios, the Secret's login, the host key pinned by fingerprint) for the
//! Cisco simulator with the IOS syntax shims, a Switch and a SwitchPortConfiguration
//! on devplane; configure, edit, drift made over SSH restored, clean, each one
//! ansible-playbook run per batch, the device read back over SSH (another path than
//! Ansible's).

#[path = "support/ssh_cases.rs"]
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
    env.device(
        "tor1",
        &[
            ("username", &sim.username),
            ("password", &sim.password),
            ("enablePassword", &sim.enable_password),
        ],
        json!({"backend": "ansible", "os": "ios", "address": sim.address, "port": sim.port,
               "hostKey": {"fingerprint": sim.host_key_fingerprint}}),
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

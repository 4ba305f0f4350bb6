//! The operator driving a switch through Ansible: a ProviderSwitch with backend
//! ansible (os ios, the Secret's login, the host key pinned by fingerprint) for the
//! Cisco simulator with the IOS syntax shims, a Switch and a SwitchPortConfiguration
//! on devplane; configure, edit, drift made over SSH restored, clean, each one
//! ansible-playbook run per batch, the device read back over SSH (another path than
//! Ansible's).

#[path = "support/ssh_cases.rs"]
mod ssh_cases;
mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use patchbay::api::{PortState, ProviderSwitch, Switch, SwitchPortConfiguration};
use patchbay_providers::{AdminState, Device as _, VlanMode};
use patchbay_testbed::{FakeSwitches, SimSpec};
use serde_json::json;
use ssh_cases::{backend, port, vlan};
use support::env::Env;
use support::eventually;

#[tokio::test]
async fn the_operator_configures_edits_and_cleans_a_port_through_ansible() {
    let sims =
        FakeSwitches::start(&[SimSpec::new("tor1", "cisco_generic").with_ios_shims()]).unwrap();
    let sim = sims.get("tor1");
    let env = Env::start_with("ansible", |s| s.drift_interval = Duration::from_secs(2)).await;
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some("tor1-login".into()),
            ..Default::default()
        },
        string_data: Some(BTreeMap::from([
            ("username".to_string(), sim.username.clone()),
            ("password".to_string(), sim.password.clone()),
            ("enablePassword".to_string(), sim.enable_password.clone()),
        ])),
        ..Default::default()
    };
    env.api::<Secret>()
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    env.create::<ProviderSwitch>(json!({
        "apiVersion": "patchbay.dev/v1alpha1", "kind": "ProviderSwitch",
        "metadata": {"name": "tor1"},
        "spec": {"backend": "ansible", "os": "ios", "address": sim.address, "port": sim.port,
                 "credentialsSecretRef": {"name": "tor1-login"},
                 "hostKey": {"fingerprint": sim.host_key_fingerprint}}
    }))
    .await;
    env.create::<Switch>(json!({
        "apiVersion": "patchbay.dev/v1alpha1", "kind": "Switch",
        "metadata": {"name": "tor1"},
        "spec": {"provider": {"name": "tor1"},
                 "ports": {"tor1-p1": {"name": "FastEthernet0/1"}, "tor1-p2": {"name": "FastEthernet0/2"}}}
    }))
    .await;
    env.configuration(
        "tenant-web",
        json!({"untaggedVLAN": 100, "vlans": [{"id": 200, "name": "storage"}],
               "description": "tenant web"}),
    )
    .await;
    env.link("tor1-p1", Some("tenant-web")).await;
    env.wait_state("tor1-p1", PortState::Active).await;

    let device = backend("ios", sim);
    let observed = device.get_port(&port("FastEthernet0/1")).await.unwrap();
    assert_eq!(
        observed.vlans,
        Some(VlanMode::Trunk {
            native: Some(vlan(100)),
            allowed: [vlan(200)].into_iter().collect(),
        })
    );
    assert_eq!(observed.admin, Some(AdminState::Up));
    assert_eq!(
        observed.description.flatten().map(|d| d.to_string()),
        Some("tenant web".into())
    );
    assert_eq!(
        device
            .get_port(&port("FastEthernet0/2"))
            .await
            .unwrap()
            .vlans,
        Some(VlanMode::Unconfigured)
    );

    env.api::<SwitchPortConfiguration>()
        .patch(
            "tenant-web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"untaggedVLAN": 300, "vlans": [], "description": null}})),
        )
        .await
        .unwrap();
    eventually(90, "the device to carry access VLAN 300", || async {
        let o = device.get_port(&port("FastEthernet0/1")).await.ok()?;
        (o.vlans == Some(VlanMode::Access { vlan: vlan(300) }) && o.description == Some(None))
            .then_some(())
    })
    .await;
    env.wait_state("tor1-p1", PortState::Active).await;

    // A change made on the switch behind patchbay's back (over SSH) is found by the
    // drift sweep (one read-playbook run per switch) and restored through Ansible.
    let mut intruder = patchbay_providers::DesiredPort::clean(port("FastEthernet0/1"));
    intruder.vlans = VlanMode::Access { vlan: vlan(999) };
    device.set_port(&intruder).await.unwrap();
    eventually(90, "the drift to be repaired", || async {
        let o = device.get_port(&port("FastEthernet0/1")).await.ok()?;
        (o.vlans == Some(VlanMode::Access { vlan: vlan(300) })).then_some(())
    })
    .await;

    env.link("tor1-p1", None).await;
    env.wait_state("tor1-p1", PortState::Idle).await;
    let clean = device.get_port(&port("FastEthernet0/1")).await.unwrap();
    assert_eq!(clean.vlans, Some(VlanMode::Unconfigured));
    assert_eq!(clean.admin, Some(AdminState::Up));
    assert_eq!(clean.description, Some(None));
}

//! The operator driving a NETCONF switch: a real NETCONF server (netconfd with
//! patchbay's YANG module, behind a private sshd, started and stopped by PID) as a
//! ProviderSwitch (backend netconf, os yang, a key login in a Secret, a pinned host
//! key) + Switch + SwitchPortConfiguration on devplane. Configure, edit, drift made
//! by another NETCONF session (restored at the next sweep), a candidate lock held by
//! another session (reported as LockDenied naming it, applied once released), a
//! capability the model lacks (refused at validation), clean; the device is read
//! back on sessions of the test's own.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use patchbay::api::{PortState, ProviderSwitch, Switch, SwitchPortConfiguration};
use patchbay_providers::cli::{Auth, HostKeyPolicy, SshTarget};
use patchbay_providers::netconf::rpc::{Datastore, Operation};
use patchbay_providers::netconf::session::Session;
use patchbay_providers::netconf::{NetconfOptions, NetconfSwitch, model};
use patchbay_providers::secret::SecretString;
use patchbay_providers::values::{PortName, VlanId};
use patchbay_providers::{AdminState, DesiredPort, Device as _, VlanMode};
use patchbay_testbed::{NetconfTarget, Netconfd};
use serde_json::json;
use support::env::{Env, condition};
use support::eventually;

fn port(name: &str) -> PortName {
    PortName::parse(name).unwrap()
}

fn vlan(n: u16) -> VlanId {
    VlanId::new(n).unwrap()
}

/// How the test logs in to the device itself (another NETCONF client).
fn login(nc: &Netconfd) -> SshTarget {
    SshTarget {
        address: nc.address.clone(),
        port: nc.port,
        username: nc.username.clone(),
        auth: Auth::PrivateKey {
            pem: SecretString::new(nc.client_key.clone()),
            passphrase: None,
        },
        host_key: HostKeyPolicy::Fingerprint(nc.host_key_fingerprint.clone()),
        connect_timeout: Duration::from_secs(10),
    }
}

/// The test's own view of the device.
fn own_session(nc: &Netconfd) -> NetconfSwitch {
    NetconfSwitch::new(
        login(nc),
        model::for_os("yang", None).unwrap(),
        NetconfOptions::default(),
    )
}

#[tokio::test]
async fn the_operator_configures_edits_restores_and_cleans_a_netconf_port() {
    let nc = Netconfd::start(NetconfTarget::Candidate).unwrap();
    let env = Env::start_with("netconf", |s| s.drift_interval = Duration::from_secs(1)).await;
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some("leaf1-login".into()),
            ..Default::default()
        },
        string_data: Some(BTreeMap::from([
            ("username".to_string(), nc.username.clone()),
            ("privateKey".to_string(), nc.client_key.clone()),
        ])),
        ..Default::default()
    };
    env.api::<Secret>()
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    env.create::<ProviderSwitch>(json!({
        "apiVersion": "patchbay.dev/v1alpha1", "kind": "ProviderSwitch",
        "metadata": {"name": "leaf1"},
        "spec": {"backend": "netconf", "os": "yang", "address": nc.address, "port": nc.port,
                 "credentialsSecretRef": {"name": "leaf1-login"},
                 "hostKey": {"fingerprint": nc.host_key_fingerprint}}
    }))
    .await;
    env.create::<Switch>(json!({
        "apiVersion": "patchbay.dev/v1alpha1", "kind": "Switch",
        "metadata": {"name": "leaf1"},
        "spec": {"provider": {"name": "leaf1"},
                 "ports": {"leaf1-p1": {"name": "eth1"}, "leaf1-p2": {"name": "eth2"}}}
    }))
    .await;
    env.configuration(
        "tenant-web",
        json!({"untaggedVLAN": 100, "vlans": [{"id": 200, "name": "storage"}],
               "description": "tenant web"}),
    )
    .await;
    env.link("leaf1-p1", Some("tenant-web")).await;
    env.wait_state("leaf1-p1", PortState::Active).await;

    let device = own_session(&nc);
    let observed = device.get_port(&port("eth1")).await.unwrap();
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
        device.get_port(&port("eth2")).await.unwrap().vlans,
        Some(VlanMode::Unconfigured)
    );

    // Editing the configuration reconfigures the device.
    env.api::<SwitchPortConfiguration>()
        .patch(
            "tenant-web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"untaggedVLAN": 300, "vlans": [], "description": null}})),
        )
        .await
        .unwrap();
    let wanted = |o: &patchbay_providers::ObservedPort| {
        o.vlans == Some(VlanMode::Access { vlan: vlan(300) }) && o.description == Some(None)
    };
    eventually(30, "the device to carry access VLAN 300", || async {
        wanted(&device.get_port(&port("eth1")).await.ok()?).then_some(())
    })
    .await;
    env.wait_state("leaf1-p1", PortState::Active).await;

    // Another NETCONF client changes the port: the next drift sweep restores it.
    let mut intruder = DesiredPort::clean(port("eth1"));
    intruder.vlans = VlanMode::Access { vlan: vlan(999) };
    device.set_port(&intruder).await.unwrap();
    assert!(!wanted(&device.get_port(&port("eth1")).await.unwrap()));
    eventually(30, "the drift to be repaired", || async {
        wanted(&device.get_port(&port("eth1")).await.ok()?).then_some(())
    })
    .await;

    // Another client holds the candidate lock for a while: the port says who, keeps
    // its old configuration on the device, and is applied once the lock is gone.
    let mut holder = Session::open(&login(&nc), Duration::from_secs(10), None)
        .await
        .unwrap();
    assert!(
        holder
            .rpc(&Operation::Lock(Datastore::Candidate))
            .await
            .unwrap()
            .errors
            .is_empty()
    );
    let holder_id = holder.capabilities.session_id.clone().unwrap();
    env.api::<SwitchPortConfiguration>()
        .patch(
            "tenant-web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"untaggedVLAN": 301}})),
        )
        .await
        .unwrap();
    let p = env
        .wait_for("leaf1-p1", "the lock to be reported", |p| {
            condition(p, "Ready")
                .is_some_and(|(s, reason, _)| s == "False" && reason == "LockDenied")
        })
        .await;
    let (_, _, message) = condition(&p, "Ready").unwrap();
    assert!(
        message.contains(&format!("session {holder_id}")) && message.contains("lock-denied"),
        "{message}"
    );
    assert!(wanted(&device.get_port(&port("eth1")).await.unwrap()));
    holder
        .rpc(&Operation::Unlock(Datastore::Candidate))
        .await
        .unwrap();
    holder.close().await;
    eventually(
        60,
        "the change to land once the lock is released",
        || async {
            let o = device.get_port(&port("eth1")).await.ok()?;
            (o.vlans == Some(VlanMode::Access { vlan: vlan(301) })).then_some(())
        },
    )
    .await;
    env.wait_state("leaf1-p1", PortState::Active).await;

    // What the device model cannot configure is refused at validation, naming the
    // field, and nothing reaches the device.
    env.configuration(
        "with-acl",
        json!({"untaggedVLAN": 100, "acl": [{"type": "ipv4", "action": "deny",
               "protocol": "tcp", "dstPortRange": "22"}]}),
    )
    .await;
    env.link("leaf1-p2", Some("with-acl")).await;
    let p = env
        .wait_for("leaf1-p2", "the capability refusal", |p| {
            condition(p, "Ready").is_some_and(|(s, _, m)| s == "False" && m.contains("spec.acl"))
        })
        .await;
    let (_, _, message) = condition(&p, "Ready").unwrap();
    assert!(message.contains("cannot configure ACL"), "{message}");
    assert_eq!(
        device.get_port(&port("eth2")).await.unwrap().vlans,
        Some(VlanMode::Unconfigured)
    );

    // Unlinking cleans the port on the device: its entry is gone.
    env.link("leaf1-p1", None).await;
    env.wait_state("leaf1-p1", PortState::Idle).await;
    let clean = device.get_port(&port("eth1")).await.unwrap();
    assert_eq!(clean.vlans, Some(VlanMode::Unconfigured));
    assert_eq!(clean.description, Some(None));
}

//! The operator driving a NETCONF switch: a real NETCONF server (netconfd with
//! patchbay's YANG module, behind a private sshd, started and stopped by PID) as a
//! ProviderSwitch (backend netconf, os yang, a key login in a Secret, a pinned host
//! key) + Switch + SwitchPortConfiguration on devplane. Configure, edit, drift made
//! by another NETCONF session (restored at the next sweep), a candidate lock held by
//! another session (reported as LockDenied naming it, applied once released), an
//! ACL, a capability the model lacks (refused at validation), clean; the device is read
//! back on sessions of the test's own.

mod support;

/// How the test logs in to the device itself (another NETCONF client).
#[path = "../providers/tests/support/netconfd.rs"]
mod netconfd;

use std::time::Duration;

use kube::api::{Patch, PatchParams};
use patchbay::api::{PortState, SwitchPortConfiguration};
use patchbay_providers::netconf::rpc::{Datastore, Operation};
use patchbay_providers::netconf::session::Session;
use patchbay_providers::netconf::{NetconfOptions, NetconfSwitch, model};
use patchbay_providers::values::{PortName, VlanId};
use patchbay_providers::{Device as _, VlanMode};
use patchbay_testbed::{NetconfTarget, Netconfd};
use serde_json::json;
use support::cycle;
use support::env::{Env, condition};
use support::eventually;

fn port(name: &str) -> PortName {
    PortName::parse(name).unwrap()
}

fn vlan(n: u16) -> VlanId {
    VlanId::new(n).unwrap()
}

/// The test's own view of the device.
fn own_session(nc: &Netconfd) -> NetconfSwitch {
    NetconfSwitch::new(
        netconfd::login(nc),
        model::for_os("yang", None).unwrap(),
        NetconfOptions::default(),
    )
}

#[tokio::test]
async fn the_operator_configures_edits_restores_and_cleans_a_netconf_port() {
    let nc = Netconfd::start(NetconfTarget::Candidate).unwrap();
    let env = Env::start_with("netconf", |s| s.drift_interval = Duration::from_secs(1)).await;
    env.netconfd_switch("leaf1", &nc, &[("leaf1-p1", "eth1"), ("leaf1-p2", "eth2")])
        .await;
    let device = own_session(&nc);
    cycle::configure_then_edit(&env, "leaf1-p1", &device, "eth1", "eth2").await;
    // Another NETCONF client changes the port, three commits in a row: the next
    // drift sweep (one get-config per switch) restores it each time.
    cycle::drift_is_undone(&env, "leaf1-p1", &device, "eth1", 3).await;

    // Another client holds the candidate lock for a while: the port says who, keeps
    // its old configuration on the device, and is applied once the lock is gone.
    let mut holder = Session::open(&netconfd::login(&nc), Duration::from_secs(10), None)
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
    assert_eq!(
        device.get_port(&port("eth1")).await.unwrap().vlans,
        Some(VlanMode::Access { vlan: vlan(300) }),
        "the old configuration stays while the lock is held"
    );
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

    // An ACL becomes the port's RFC 8519-shaped entries and is read back.
    env.configuration(
        "with-acl",
        json!({"untaggedVLAN": 100, "acl": [{"type": "ipv4", "action": "deny",
               "protocol": "tcp", "dstPortRange": "22"}]}),
    )
    .await;
    env.link("leaf1-p2", Some("with-acl")).await;
    env.wait_state("leaf1-p2", PortState::Active).await;
    let with_acl = device.get_port(&port("eth2")).await.unwrap();
    let rules = with_acl.acl.expect("the model reads ACLs");
    assert_eq!(rules.len(), 1);
    assert_eq!(rules[0].dst_ports.map(|r| (r.low, r.high)), Some((22, 22)));

    // What the device model cannot configure is refused at validation, naming the
    // field, and nothing reaches the device.
    env.configuration(
        "with-lag",
        json!({"untaggedVLAN": 100, "linkAggregation": {"group": 1}}),
    )
    .await;
    env.link("leaf1-p2", Some("with-lag")).await;
    let p = env
        .wait_for("leaf1-p2", "the capability refusal", |p| {
            condition(p, "Ready")
                .is_some_and(|(s, _, m)| s == "False" && m.contains("spec.linkAggregation"))
        })
        .await;
    let (_, _, message) = condition(&p, "Ready").unwrap();
    assert!(
        message.contains("cannot configure link aggregation"),
        "{message}"
    );
    let unchanged = device.get_port(&port("eth2")).await.unwrap();
    assert_eq!(
        unchanged.acl.map(|a| a.len()),
        Some(1),
        "the refused edit touched eth2"
    );

    // Unlinking cleans the port on the device: its entry is gone.
    cycle::unlink_and_clean(&env, "leaf1-p1", &device, "eth1").await;
}

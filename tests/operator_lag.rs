//! A link-aggregation group goes to the device whole, whatever order its members'
//! links arrive in: an `ovsdb` Switch (Open vSwitch) with six ports, three groups
//! linked in different orders — one `kubectl apply`-like burst, the reverse order,
//! and with devplane holding the SwitchPort watch events back (a cache that lags).
//! The device's own history (`ovsdb-client monitor` of the Port table) must never
//! show a bond with one member, and each group is Active well before the worker's
//! 30 s hold would have given up on it.

mod support;

use std::time::Duration;

use patchbay::api::PortState;
use patchbay_testbed::OvsSim;
use serde_json::json;
use support::env::Env;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_goes_to_the_device_whole_in_any_link_order_and_with_a_lagging_cache() {
    let ovs = OvsSim::start(&["br-tor"]).expect("Open vSwitch starts");
    let devices = ["l1t", "l2t", "l3t", "l4t", "l5t", "l6t"];
    ovs.add_internal_ports("br-tor", &devices).unwrap();
    let history = ovs.monitor_ports().unwrap();
    let env = Env::start("lag-order").await;
    let keys = ["p1", "p2", "p3", "p4", "p5", "p6"];
    let pairs: Vec<(&str, &str)> = keys.iter().copied().zip(devices).collect();
    env.device(
        "tor",
        &[],
        json!({"backend": "ovsdb", "os": "ovs", "address": "127.0.0.1",
               "port": ovs.info.ovsdb_port, "options": {"bridge": "br-tor"}}),
        &pairs,
    )
    .await;
    for (group, vlan) in [(1, 10), (2, 20), (3, 30)] {
        env.configuration(
            &format!("group-{group}"),
            json!({"untaggedVLAN": vlan, "linkAggregation": {"group": group}}),
        )
        .await;
    }
    for k in keys {
        env.wait_state(k, PortState::Idle).await;
    }
    // Within the hold (30 s) with room to spare: a group that waited for it failed.
    let env_ref = &env;
    let active = |port: &'static str| async move {
        env_ref.wait_state_within(port, PortState::Active, 20).await;
    };

    // In one burst, first member first; then the reverse order.
    env.link("p1", Some("group-1")).await;
    env.link("p2", Some("group-1")).await;
    env.link("p4", Some("group-2")).await;
    env.link("p3", Some("group-2")).await;
    for p in ["p1", "p2", "p3", "p4"] {
        active(p).await;
    }
    // A cache that lags: every SwitchPort event reaches the operator 1.5 s late.
    if let Some(devplane) = env.cluster.devplane() {
        devplane.delay_watch_events("switchports", Duration::from_millis(1500));
    }
    env.link("p6", Some("group-3")).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    env.link("p5", Some("group-3")).await;
    for p in ["p5", "p6"] {
        active(p).await;
    }
    if let Some(devplane) = env.cluster.devplane() {
        devplane.delay_watch_events("switchports", Duration::ZERO);
    }

    // On the device: each bond holds its two members, and never held one.
    for (bond, members) in [("bond1", 2), ("bond2", 2), ("bond3", 2)] {
        let ifaces = ovs.vsctl(&["get", "Port", bond, "interfaces"]).unwrap();
        assert_eq!(ifaces.matches(',').count() + 1, members, "{bond}: {ifaces}");
    }
    let rows = history.rows();
    let halves: Vec<&(String, usize)> = rows
        .iter()
        .filter(|(name, n)| name.starts_with("bond") && *n < 2)
        .collect();
    assert!(halves.is_empty(), "a bond went half: {halves:?}\n{rows:?}");
    assert!(
        rows.iter().any(|(name, n)| name == "bond3" && *n == 2),
        "{rows:?}"
    );
    // No member's change failed for an incomplete group.
    for k in keys {
        assert!(
            env.warnings(k)
                .await
                .iter()
                .all(|e| e.reason.as_deref() != Some("LagGroupIncomplete")),
            "{k}"
        );
    }
    env.cluster.finish().await;
}

//! What a Switch's ports see, end to end: the operator on devplane (or a real
//! cluster) reads a Linux switch's lldpd (real LLDP between network namespaces, read
//! over a private sshd with a key login and a pinned host key) into the Switch's
//! status — each port's neighbour, the SwitchPort managing it, the switch's own
//! chassis id — and a swapped pair of cables shows up swapped within one interval
//! plus LLDP's hold time. A source that is not one, and a neighbour source named as
//! a Switch's port device, are refused with the field and the reason.

mod support;

use std::time::{Duration, Instant};

use patchbay::api::{ProviderSwitch, Switch, SwitchStatus};
use patchbay_testbed::lldp::LldpFabric;
use serde_json::json;
use support::env::{Env, find_condition};

const HOST_A: &str = "52:54:00:0a:00:01";
const HOST_B: &str = "52:54:00:0b:00:01";

/// The neighbour (chassis id) the status shows on `port`, and the SwitchPort it names.
fn seen(s: &SwitchStatus, port: &str) -> Option<(String, Option<String>)> {
    let p = s.neighbors.iter().find(|p| p.port == port)?;
    Some((p.lldp.first()?.chassis_id.clone(), p.switch_port.clone()))
}

fn status(sw: &Switch) -> SwitchStatus {
    sw.status.clone().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_switch_shows_what_each_port_sees_and_a_swap_within_one_interval() {
    let mut fabric = LldpFabric::start("leaf1").expect("the fabric starts");
    fabric.add_host("server-a", HOST_A, "swp1").unwrap();
    fabric.add_host("server-b", HOST_B, "swp2").unwrap();
    let env = Env::start("cabling").await;

    // The Linux side of the switch, read only: a key login and a pinned host key.
    env.device(
        "leaf1-lldp",
        &[
            ("username", &fabric.username),
            ("privateKey", &fabric.client_key),
        ],
        json!({"backend": "ssh", "os": "linux", "address": "127.0.0.1",
               "port": fabric.ssh_port,
               "hostKey": {"fingerprint": fabric.host_key_fingerprint},
               "options": {"lldpSocket": fabric.switch_socket}}),
        &[],
    )
    .await;
    // The Switch a linux source was created with above has it as its port device:
    // refused, naming the field.
    let refused = env
        .wait_obj::<Switch>("leaf1-lldp", "a linux provider refused for ports", |s| {
            find_condition(&status(s).conditions, "Ready").is_some_and(|(truth, _, message)| {
                truth == "False"
                    && message
                        == "spec.provider: ProviderSwitch leaf1-lldp is os linux, a neighbour \
                            source that configures no port: name it in spec.neighbors.provider"
            })
        })
        .await;
    assert!(status(&refused).neighbors.is_empty());

    // The fixture switch whose ports are managed, reading its neighbours through it.
    env.create::<ProviderSwitch>(json!({
        "apiVersion": "patchbay.dev/v1alpha1", "kind": "ProviderSwitch",
        "metadata": {"name": "leaf1"},
        "spec": {"backend": "fixture", "os": "fixture", "address": "127.0.0.1"}
    }))
    .await;
    let interval = 5;
    env.create::<Switch>(json!({
        "apiVersion": "patchbay.dev/v1alpha1", "kind": "Switch",
        "metadata": {"name": "leaf1"},
        "spec": {"provider": {"name": "leaf1"},
                 "ports": {"leaf1-a": {"name": "swp1"}, "leaf1-b": {"name": "swp2"}},
                 "neighbors": {"provider": {"name": "leaf1-lldp"},
                               "intervalSeconds": interval}}
    }))
    .await;
    let sw = env
        .wait_obj::<Switch>("leaf1", "each port's neighbour in the status", |s| {
            let s = status(s);
            seen(&s, "swp1") == Some((HOST_A.into(), Some("leaf1-a".into())))
                && seen(&s, "swp2") == Some((HOST_B.into(), Some("leaf1-b".into())))
        })
        .await;
    let s = status(&sw);
    let a = &s.neighbors[0].lldp[0];
    assert_eq!(a.system_name.as_deref(), Some("server-a"));
    assert_eq!(a.chassis_id_subtype, "mac");
    assert_eq!(a.port_description.as_deref(), Some("eth0"));
    let (truth, reason, _) = find_condition(&s.conditions, "NeighborsRead").expect("NeighborsRead");
    assert_eq!((truth.as_str(), reason.as_str()), ("True", "Read"));
    // The chassis id is the switch's own: what the hosts' LLDP agents see it as.
    let chassis = s.chassis_id.clone().expect("the switch's chassis id");
    let host_view = fabric.host_neighbors_json(0).unwrap();
    assert!(
        host_view.contains(&chassis),
        "{chassis} not in what server-a sees: {host_view}"
    );

    // Swap the two cables: the status follows within one interval plus LLDP's hold
    // time (4 s here), never naming a neighbour on a port that no longer sees it.
    let swapped_at = Instant::now();
    fabric.swap_cables(0, 1).unwrap();
    env.wait_obj::<Switch>("leaf1", "the swap in the status", |s| {
        let s = status(s);
        seen(&s, "swp1") == Some((HOST_B.into(), Some("leaf1-a".into())))
            && seen(&s, "swp2") == Some((HOST_A.into(), Some("leaf1-b".into())))
    })
    .await;
    let took = swapped_at.elapsed();
    println!("swap reported after {took:?} (interval {interval} s, LLDP hold 4 s)");
    assert!(
        took < Duration::from_secs(interval + 4 + 5),
        "a swap is reported within an interval and a hold time: {took:?}"
    );

    // A source that cannot be read for neighbours: the condition names the field.
    env.create::<ProviderSwitch>(json!({
        "apiVersion": "patchbay.dev/v1alpha1", "kind": "ProviderSwitch",
        "metadata": {"name": "not-lldp"},
        "spec": {"backend": "fixture", "os": "fixture", "address": "127.0.0.1"}
    }))
    .await;
    env.api::<Switch>()
        .patch(
            "leaf1",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(
                json!({"spec": {"neighbors": {"provider": {"name": "not-lldp"}}}}),
            ),
        )
        .await
        .unwrap();
    let sw = env
        .wait_obj::<Switch>("leaf1", "the wrong source refused", |s| {
            find_condition(&status(s).conditions, "NeighborsRead").is_some_and(|(truth, _, message)| {
                truth == "False"
                    && message.starts_with(
                        "spec.neighbors.provider: ProviderSwitch not-lldp cannot be read for neighbours",
                    )
            })
        })
        .await;
    assert_eq!(
        find_condition(&status(&sw).conditions, "NeighborsRead")
            .unwrap()
            .1,
        "InvalidProvider"
    );
    // The last good read stays, with its time.
    assert!(seen(&status(&sw), "swp1").is_some());
    env.cluster.finish().await;
}

//! The Linux neighbour source against real LLDP: a switch namespace running lldpd,
//! hosts in namespaces of their own running lldpd, veth cables between them, read
//! over a private sshd the way patchbay reads a Linux-based switch. What each port
//! sees is read back, a swapped pair of cables shows up swapped, a wrong host key is
//! refused, and a socket with no lldpd behind it is a clear error.

use std::time::{Duration, Instant};

use patchbay_providers::cli::{Auth, HostKeyPolicy, SshTarget};
use patchbay_providers::linux::{LinuxLldp, LldpSocket};
use patchbay_providers::neighbors::{IdSubtype, Neighbors};
use patchbay_providers::secret::SecretString;
use patchbay_providers::{DeviceError, NeighborSource};
use patchbay_testbed::lldp::LldpFabric;

fn source(fabric: &LldpFabric, socket: &str, host_key: HostKeyPolicy) -> LinuxLldp {
    LinuxLldp::new(
        SshTarget {
            address: "127.0.0.1".into(),
            port: fabric.ssh_port,
            username: fabric.username.clone(),
            auth: Auth::PrivateKey {
                pem: SecretString::new(fabric.client_key.clone()),
                passphrase: None,
            },
            host_key,
            connect_timeout: Duration::from_secs(10),
        },
        Some(LldpSocket::parse(socket).unwrap()),
        Duration::from_secs(10),
    )
}

/// Reads until `done` holds (LLDP needs a transmit interval or two), at most 20 s.
async fn read_until(src: &LinuxLldp, done: impl Fn(&Neighbors) -> bool) -> Neighbors {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let n = src.neighbors().await.expect("the read succeeds");
        if done(&n) {
            return n;
        }
        assert!(
            Instant::now() < deadline,
            "never got there; last read: {n:#?}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

fn sees(n: &Neighbors, port: &str, mac: &str) -> bool {
    n.port(port)
        .is_some_and(|p| p.lldp.len() == 1 && p.lldp[0].chassis_id == mac)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_port_shows_the_host_cabled_to_it_and_a_swap_shows_up_swapped() {
    let mut fabric = LldpFabric::start("leaf1").expect("the fabric starts");
    fabric
        .add_host("server-a", "52:54:00:0a:00:01", "swp1")
        .unwrap();
    fabric
        .add_host("server-b", "52:54:00:0b:00:01", "swp2")
        .unwrap();
    let src = source(
        &fabric,
        &fabric.switch_socket,
        HostKeyPolicy::Fingerprint(fabric.host_key_fingerprint.clone()),
    );

    let n = read_until(&src, |n| {
        sees(n, "swp1", "52:54:00:0a:00:01") && sees(n, "swp2", "52:54:00:0b:00:01")
    })
    .await;
    let a = &n.port("swp1").unwrap().lldp[0];
    assert_eq!(a.system_name.as_deref(), Some("server-a"));
    assert_eq!(a.chassis_id_subtype, IdSubtype::Mac);
    assert_eq!(a.port_description.as_deref(), Some("eth0"));
    assert_eq!(n.ports.len(), 2, "only ports that see something: {n:#?}");
    // The switch's own chassis id is what its lldpd sends: the hosts see it as that.
    let chassis = n.chassis_id.clone().expect("the switch has a chassis id");
    let host_view = fabric.host_neighbors_json(0).unwrap();
    assert!(host_view.contains(&chassis), "{chassis} not in {host_view}");

    fabric.swap_cables(0, 1).unwrap();
    let n = read_until(&src, |n| {
        sees(n, "swp1", "52:54:00:0b:00:01") && sees(n, "swp2", "52:54:00:0a:00:01")
    })
    .await;
    assert_eq!(
        n.port("swp1").unwrap().lldp[0].system_name.as_deref(),
        Some("server-b")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_host_key_and_a_missing_lldpd_are_clear_errors() {
    let fabric = LldpFabric::start("leaf2").expect("the fabric starts");
    let wrong = source(
        &fabric,
        &fabric.switch_socket,
        HostKeyPolicy::Fingerprint("SHA256:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA".into()),
    );
    let e = wrong.neighbors().await.unwrap_err();
    assert!(matches!(e, DeviceError::HostKeyMismatch { .. }), "{e}");

    let nowhere = source(
        &fabric,
        "/nonexistent/lldpd.socket",
        HostKeyPolicy::Fingerprint(fabric.host_key_fingerprint.clone()),
    );
    let e = nowhere.neighbors().await.unwrap_err();
    let text = e.to_string();
    assert!(matches!(e, DeviceError::CommandRejected { .. }), "{text}");
    assert!(
        text.contains("lldpcli -u /nonexistent/lldpd.socket"),
        "{text}"
    );
    assert!(
        !text.contains("BEGIN OPENSSH"),
        "no key material in errors: {text}"
    );
}

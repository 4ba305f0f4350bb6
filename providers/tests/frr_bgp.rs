//! The FRR dialect against a real BGP session: FRRouting (zebra + bgpd) in one network
//! namespace as the ToR, reached over SSH as patchbay reaches a switch (a private
//! sshd whose forced command is vtysh); GoBGP in another namespace as the node,
//! joined by a veth pair on a /30. Proven: neighbours put in one session and read back
//! (FRR's JSON), the session Established, only the allowed prefixes accepted, a wrong
//! password never establishing, a removed neighbour gone with its filters, passwords
//! absent from the journal and from error text. And the IOS form (`cisco_ios.yaml`'s
//! `bgp:` section, its lines and its text read) on vtysh, whose CLI and `show
//! running-config` / `show ip bgp summary` layouts are IOS's: the nearest thing to
//! a Cisco device here (none runs BGP).

use std::time::{Duration, Instant};

use patchbay_providers::bgp::{Change, Neighbor, Outbound, Router, Timers, plan};
use patchbay_providers::cli::{Auth, CliOptions, CliSwitch, HostKeyPolicy, SshTarget, dialect};
use patchbay_providers::secret::SecretString;
use patchbay_providers::{BgpSpeaker, DeviceError};
use patchbay_testbed::bgp::{Frr, Gobgp, GobgpPeer, Link};

const TOR: &str = "10.0.1.1";
const NODE: &str = "10.0.1.2";
const PASSWORD: &str = "Xk3cret77abc";

/// The pair, the ToR at [`TOR`], the node at [`NODE`], on a /30.
fn link() -> Link {
    let link = Link::new().unwrap();
    link.address(&link.tor, &format!("{TOR}/30")).unwrap();
    link.address(&link.node, &format!("{NODE}/30")).unwrap();
    link
}

/// GoBGP as the node (AS 65101) peering with the ToR with `password`.
fn node(link: &Link, password: &str) -> Gobgp {
    Gobgp::start(
        &link.node,
        65101,
        NODE,
        &[GobgpPeer {
            address: TOR.into(),
            asn: 65000,
            local_address: NODE.into(),
            password: Some(password.into()),
        }],
    )
    .unwrap()
}

fn speaker(frr: &Frr) -> CliSwitch {
    speaker_with(frr, dialect::for_os("frr").unwrap())
}

fn speaker_with(frr: &Frr, dialect: std::sync::Arc<dialect::Dialect>) -> CliSwitch {
    CliSwitch::new(
        SshTarget {
            address: "127.0.0.1".into(),
            port: frr.ssh_port,
            username: frr.username.clone(),
            auth: Auth::PrivateKey {
                pem: SecretString::new(frr.client_key.clone()),
                passphrase: None,
            },
            host_key: HostKeyPolicy::Fingerprint(frr.host_key_fingerprint.clone()),
            connect_timeout: Duration::from_secs(10),
        },
        None,
        dialect,
        CliOptions::default(),
    )
    .with_journal()
}

fn router() -> Router {
    Router {
        asn: 65000,
        router_id: "10.255.0.1".parse().unwrap(),
    }
}

fn neighbor(password: &str) -> Neighbor {
    Neighbor {
        address: NODE.parse().unwrap(),
        remote_asn: 65101,
        local_address: TOR.parse().unwrap(),
        prefixes: vec![
            "192.0.2.10/32".parse().unwrap(),
            "198.51.100.0/28".parse().unwrap(),
        ],
        max_prefix: 8,
        timers: Timers {
            keepalive: 3,
            hold: 9,
            connect_retry: 1,
        },
        outbound: Outbound::Nothing,
        password: Some(SecretString::new(password)),
        description: "patchbay/tenant-a/rack-1-a".into(),
    }
}

fn until(what: &str, secs: u64, mut ok: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !ok() {
        assert!(
            start.elapsed() < Duration::from_secs(secs),
            "{what} within {secs} s"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    start.elapsed()
}

#[tokio::test(flavor = "multi_thread")]
async fn frr_takes_a_filtered_md5_neighbour_and_a_node_peers_with_it() {
    let link = link();
    let frr = Frr::start(&link.tor, "tor1").unwrap();
    let node = node(&link, PASSWORD);
    for p in ["192.0.2.10/32", "198.51.100.4/32", "203.0.113.0/24"] {
        node.announce(p).unwrap();
    }
    let sw = speaker(&frr);
    let managed = [NODE.parse().unwrap()].into();
    // This neighbour is sent a default route (and nothing else).
    let want = [Neighbor {
        outbound: Outbound::DefaultRoute,
        ..neighbor(PASSWORD)
    }];

    // Empty speaker: one Put; applied and read back in one session.
    let before = sw.bgp_state().await.unwrap();
    let changes = plan(&want, &before, &managed);
    assert_eq!(changes.len(), 1);
    let after = sw.bgp_apply(&router(), &changes).await.unwrap();
    assert!(
        plan(&want, &after, &managed).is_empty(),
        "read back as applied: {after:?}"
    );
    assert_eq!(after.asn, Some(65000));
    let journal: String = sw.journal().iter().map(|s| s.line.clone() + "\n").collect();
    assert!(!journal.contains(PASSWORD), "{journal}");
    assert!(journal.contains("password ***"), "{journal}");

    // Established; only the allowed prefixes accepted.
    let t = tokio::task::block_in_place(|| {
        until("Established", 30, || {
            frr.peer_states().unwrap() == vec![(NODE.to_owned(), "Established".to_owned())]
        })
    });
    eprintln!("established {t:?} after the configuration was applied");
    tokio::task::block_in_place(|| {
        until("the node's routes", 15, || {
            let mut r = frr.routes().unwrap();
            r.sort();
            r == ["192.0.2.10/32", "198.51.100.4/32"]
        })
    });
    assert!(node.established(TOR));
    // The node got the default route, and no other route, from the ToR.
    tokio::task::block_in_place(|| {
        until("the default route on the node", 15, || {
            let rib = node.gobgp(&["neighbor", TOR, "adj-in"]).unwrap_or_default();
            rib.contains("0.0.0.0/0") && rib.lines().filter(|l| l.contains('/')).count() == 1
        })
    });
    let seen = sw.bgp_state().await.unwrap();
    assert_eq!(seen.neighbors[&NODE.parse().unwrap()].accepted, 2);

    // Applying again changes nothing.
    assert!(plan(&want, &seen, &managed).is_empty());

    // The outbound policy changed to nothing: seen on the neighbour already there,
    // put again, and the node's default route withdrawn.
    let nothing = [neighbor(PASSWORD)];
    let changes = plan(&nothing, &seen, &managed);
    assert_eq!(changes.len(), 1, "the default route is seen: {seen:?}");
    let after = sw.bgp_apply(&router(), &changes).await.unwrap();
    assert!(plan(&nothing, &after, &managed).is_empty(), "{after:?}");
    tokio::task::block_in_place(|| {
        until("the default route withdrawn on the node", 15, || {
            node.established(TOR)
                && node
                    .gobgp(&["neighbor", TOR, "adj-in"])
                    .is_ok_and(|rib| !rib.contains("0.0.0.0/0"))
        })
    });
    let seen = sw.bgp_state().await.unwrap();

    // Removed: neighbour and its filters gone; the node's session goes down.
    let changes = plan(&[], &seen, &managed);
    let gone = sw.bgp_apply(&router(), &changes).await.unwrap();
    assert!(gone.neighbors.is_empty(), "{gone:?}");
    let lists = frr.vtysh(&["show ip prefix-list json"]).unwrap();
    assert!(!lists.contains("PB-IN-10-0-1-2"), "{lists}");
    tokio::task::block_in_place(|| until("down on the node", 15, || !node.established(TOR)));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_wrong_password_never_establishes_and_never_shows() {
    let link = link();
    let frr = Frr::start(&link.tor, "tor2").unwrap();
    let node = node(&link, "not-the-password");
    let sw = speaker(&frr);
    let managed = [NODE.parse().unwrap()].into();
    let want = [neighbor(PASSWORD)];
    let changes = plan(&want, &sw.bgp_state().await.unwrap(), &managed);
    sw.bgp_apply(&router(), &changes).await.unwrap();
    tokio::time::sleep(Duration::from_secs(8)).await;
    assert_ne!(
        frr.peer_states().unwrap(),
        vec![(NODE.to_owned(), "Established".to_owned())]
    );
    assert!(!node.established(TOR));

    // A rejected line that carried the password: the error shows `***`. (A
    // different ASN than the running instance is refused by FRR.)
    let other = Router {
        asn: 65001,
        ..router()
    };
    let e = sw
        .bgp_apply(
            &other,
            &[Change::Put {
                neighbor: neighbor(PASSWORD),
                stale: vec![],
            }],
        )
        .await
        .unwrap_err();
    assert!(matches!(e, DeviceError::CommandRejected { .. }), "{e:?}");
    let text = format!("{e} {e:?}");
    assert!(text.contains("already running"), "{text}");
    assert!(!text.contains(PASSWORD), "{text}");
}

/// The `bgp:` section of `cisco_ios.yaml` on FRR's session settings, reading the
/// whole `show running-config` (vtysh has no `| section` or `| include`).
fn ios_form_on_vtysh() -> std::sync::Arc<dialect::Dialect> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/dialects/");
    let frr = std::fs::read_to_string(format!("{dir}frr.yaml")).unwrap();
    let ios = std::fs::read_to_string(format!("{dir}cisco_ios.yaml")).unwrap();
    let head = &frr[..frr.find("\nbgp:\n").unwrap()];
    let bgp = &ios[ios.find("\nbgp:\n").unwrap()..]
        .replace(
            "show running-config | section router bgp",
            "show running-config",
        )
        .replace(
            "show running-config | include ^ip prefix-list",
            "show running-config",
        )
        .replace(
            "show running-config | section ^route-map",
            "show running-config",
        );
    let text = format!("{head}{bgp}").replace("name: frr", "name: ios_form_on_vtysh");
    std::sync::Arc::new(dialect::Dialect::load("ios_form_on_vtysh", &text).unwrap())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_ios_form_runs_on_vtysh_and_reads_back_from_its_text() {
    let link = link();
    let frr = Frr::start(&link.tor, "tor3").unwrap();
    let node = node(&link, PASSWORD);
    for p in ["192.0.2.10/32", "203.0.113.0/24"] {
        node.announce(p).unwrap();
    }
    let sw = speaker_with(&frr, ios_form_on_vtysh());
    let managed = [NODE.parse().unwrap()].into();
    let want = [neighbor(PASSWORD)];
    let changes = plan(&want, &sw.bgp_state().await.unwrap(), &managed);
    assert_eq!(changes.len(), 1);
    let after = sw.bgp_apply(&router(), &changes).await.unwrap();
    assert!(
        plan(&want, &after, &managed).is_empty(),
        "read back from the configuration text as applied: {after:?}"
    );
    let journal: String = sw.journal().iter().map(|s| s.line.clone() + "\n").collect();
    assert!(!journal.contains("update-source"), "{journal}");
    assert!(journal.contains("password ***") && !journal.contains(PASSWORD));
    tokio::task::block_in_place(|| {
        until("Established", 30, || {
            frr.peer_states().unwrap() == vec![(NODE.to_owned(), "Established".to_owned())]
        })
    });
    // The session state and the accepted count come from `show ip bgp summary`;
    // the configuration text shows the password in clear, the read keeps none.
    let seen = tokio::time::timeout(Duration::from_secs(15), async {
        loop {
            let s = sw.bgp_state().await.unwrap();
            let n = &s.neighbors[&NODE.parse().unwrap()];
            if n.state == "Established" && n.accepted == 1 {
                return s;
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    })
    .await
    .expect("Established with one accepted prefix, read from the text");
    assert!(
        frr.vtysh(&["show running-config"])
            .unwrap()
            .contains(PASSWORD)
    );
    assert!(!format!("{seen:?}").contains(PASSWORD));
    assert!(seen.neighbors[&NODE.parse().unwrap()].authenticated);
    assert_eq!(frr.routes().unwrap(), ["192.0.2.10/32"]);

    // Drift, then removal, in the same form.
    frr.vtysh(&[
        "configure terminal",
        "no ip prefix-list PB-IN-10-0-1-2 seq 10",
    ])
    .unwrap();
    let drifted = sw.bgp_state().await.unwrap();
    let fix = plan(&want, &drifted, &managed);
    assert_eq!(fix.len(), 1, "the missing entry is seen: {drifted:?}");
    let fixed = sw.bgp_apply(&router(), &fix).await.unwrap();
    assert!(plan(&want, &fixed, &managed).is_empty());
    // A clause added by hand under the outbound map (it would send routes) and one
    // under the inbound map (it would take everything): read from the text, removed.
    frr.vtysh(&[
        "configure terminal",
        "route-map PB-OUT-NOTHING permit 20",
        "exit",
        "route-map PB-IN-10-0-1-2 permit 65000",
    ])
    .unwrap();
    let drifted = sw.bgp_state().await.unwrap();
    let fix = plan(&want, &drifted, &managed);
    assert_eq!(fix.len(), 2, "both clauses are seen: {fix:?}");
    let fixed = sw.bgp_apply(&router(), &fix).await.unwrap();
    assert!(plan(&want, &fixed, &managed).is_empty(), "{fixed:?}");
    let text = frr.vtysh(&["show running-config"]).unwrap();
    assert!(
        !text.contains("permit 20") && !text.contains("permit 65000"),
        "{text}"
    );
    assert!(text.contains("route-map PB-OUT-NOTHING deny 10"), "{text}");
    let gone = sw
        .bgp_apply(&router(), &plan(&[], &fixed, &managed))
        .await
        .unwrap();
    assert!(gone.neighbors.is_empty(), "{gone:?}");
    tokio::task::block_in_place(|| until("down on the node", 15, || !node.established(TOR)));
}

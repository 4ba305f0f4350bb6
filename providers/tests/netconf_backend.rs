//! The NETCONF backend against real peers: netconfd (yuma123, Debian) serving
//! patchbay's YANG module behind a private sshd, with the candidate and with the
//! running target, and the Juniper simulators of fake-switches (both Junos models).
//!
//! What each peer can prove (README, "NETCONF"): netconfd validates, locks and rolls
//! back for real; the simulator has Junos's shape but no validation, an advisory lock
//! and no confirm timer. On every peer: each port state written and read back
//! (through the backend, and in the device's own XML), re-applying sends no
//! edit-config, a batch is one transaction, a wrong host key and a wrong password are
//! refused. On netconfd: a server-side validation error fails its port only and
//! leaves running without it, a lock held by another session is a transient error
//! naming that session, and a session lost between commit and confirm is rolled back
//! by the server.

#[path = "support/lag_cases.rs"]
mod lag_cases;
#[path = "support/netconfd.rs"]
mod netconfd;

use lag_cases::{outcomes, sets};

use std::sync::Arc;
use std::time::Duration;

use patchbay_providers::cli::{Auth, HostKeyPolicy, SshTarget};
use patchbay_providers::netconf::model::{self, Model};
use patchbay_providers::netconf::rpc::{Datastore, Operation};
use patchbay_providers::netconf::session::Session;
use patchbay_providers::netconf::xml::Element;
use patchbay_providers::netconf::{Fault, NetconfOptions, NetconfSwitch};
use patchbay_providers::secret::SecretString;
use patchbay_providers::values::{Cidr, Description, L4PortRange, Mtu, PortName, VlanId};
use patchbay_providers::{
    AclAction, AclDirection, AclProtocol, AclRule, AdminState, Capability, DesiredPort, Device,
    DeviceError, IpVersion, LagMode, PortChange, PortField, PortOperation, VlanMode, diff,
};
use patchbay_testbed::{FakeSwitches, NetconfTarget, Netconfd, SimSpec, SimSwitch};

fn port(name: &str) -> PortName {
    PortName::parse(name).unwrap()
}

fn vlan(n: u16) -> VlanId {
    VlanId::new(n).unwrap()
}

fn netconfd_target(nc: &Netconfd, auth: Auth, host_key: HostKeyPolicy) -> SshTarget {
    SshTarget {
        address: nc.address.clone(),
        port: nc.port,
        username: nc.username.clone(),
        auth,
        host_key,
        connect_timeout: Duration::from_secs(10),
    }
}

fn key(pem: &str) -> Auth {
    Auth::PrivateKey {
        pem: SecretString::new(pem.to_owned()),
        passphrase: None,
    }
}

fn on_netconfd(nc: &Netconfd) -> NetconfSwitch {
    NetconfSwitch::new(
        netconfd::login(nc),
        model::for_os("yang", None).unwrap(),
        options(),
    )
    .with_journal()
}

fn options() -> NetconfOptions {
    NetconfOptions {
        command_timeout: Duration::from_secs(10),
        confirm_timeout: Duration::from_secs(30),
        keep_session: Duration::ZERO,
    }
}

fn sim_target(sim: &SimSwitch, password: &str, host_key: HostKeyPolicy) -> SshTarget {
    SshTarget {
        address: sim.address.clone(),
        port: sim.port,
        username: sim.username.clone(),
        auth: Auth::Password(SecretString::new(password.to_owned())),
        host_key,
        connect_timeout: Duration::from_secs(10),
    }
}

fn on_sim(sim: &SimSwitch, model: Arc<Model>) -> NetconfSwitch {
    let target = sim_target(
        sim,
        &sim.password,
        HostKeyPolicy::Fingerprint(sim.host_key_fingerprint.clone()),
    );
    NetconfSwitch::new(target, model, options()).with_journal()
}

/// The port states every peer must hold: (what, desired).
fn states(name: &str) -> Vec<(&'static str, DesiredPort)> {
    let clean = DesiredPort::clean(port(name));
    let mut access = clean.clone();
    access.vlans = VlanMode::Access { vlan: vlan(100) };
    let mut trunk = clean.clone();
    trunk.vlans = VlanMode::Trunk {
        native: None,
        allowed: [vlan(200), vlan(201)].into_iter().collect(),
    };
    let mut native = clean.clone();
    native.vlans = VlanMode::Trunk {
        native: Some(vlan(10)),
        allowed: [vlan(20), vlan(30)].into_iter().collect(),
    };
    let mut all = access.clone();
    all.admin = AdminState::Down;
    all.description = Some(Description::parse("rack 4 (db) a+b=c").unwrap());
    all.mtu = Some(Mtu::new(9000).unwrap());
    vec![
        ("access", access),
        ("trunk", trunk),
        ("trunk with native", native),
        ("down, description, MTU", all),
        ("clean", clean),
    ]
}

fn edits(sw: &NetconfSwitch) -> usize {
    sw.journal()
        .iter()
        .filter(|op| *op == "edit-config")
        .count()
}

/// The device's own running configuration, read on a session of the test's own.
/// Sends `xml` as it is (no backend in between) as an edit-config of the candidate.
async fn edit_candidate(s: &mut Session, xml: &str) -> patchbay_providers::netconf::rpc::Reply {
    s.rpc(&Operation::EditConfig {
        target: Datastore::Candidate,
        rollback_on_error: false,
        config: vec![Element::parse(xml).unwrap()],
    })
    .await
    .unwrap()
}

async fn running_xml(target: &SshTarget, model: &Model) -> String {
    let mut s = Session::open(target, Duration::from_secs(10), None)
        .await
        .unwrap();
    let reply = s
        .rpc(&Operation::GetConfig {
            source: Datastore::Running,
            filter: model.filter(),
        })
        .await
        .unwrap();
    s.close().await;
    assert!(reply.errors.is_empty(), "{:?}", reply.errors);
    reply.data.unwrap_or_default().render()
}

/// Every state written, read back, re-applied without an edit; a batch is one edit.
/// `shapes` are (state, a fragment its XML must contain on this device).
async fn prove(sw: &NetconfSwitch, target: &SshTarget, ports: [&str; 3], shapes: &[(&str, &str)]) {
    for (what, desired) in states(ports[0]) {
        sw.clear_journal();
        let change = sw
            .set_port(&desired)
            .await
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        let observed = sw.get_port(&desired.port).await.unwrap();
        assert!(
            diff(&desired, &observed).is_empty(),
            "{what}: reads back as {observed:?}"
        );
        if let Some((_, fragment)) = shapes.iter().find(|(w, _)| *w == what) {
            let xml = running_xml(target, sw.model()).await;
            assert!(
                xml.contains(fragment),
                "{what}: running lacks {fragment}: {xml}"
            );
        }
        assert_eq!(change, PortChange::Changed, "{what}");
        assert_eq!(edits(sw), 1, "{what}: one edit-config: {:?}", sw.journal());
        sw.clear_journal();
        assert_eq!(
            sw.set_port(&desired).await.unwrap(),
            PortChange::Unchanged,
            "{what}"
        );
        assert_eq!(
            sw.journal(),
            vec!["get-config", "close-session"],
            "{what}: re-applying"
        );
    }
    // A batch of three ports: one transaction.
    let ops: Vec<PortOperation> = ports
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let mut d = DesiredPort::clean(port(p));
            d.vlans = VlanMode::Access {
                vlan: vlan(300 + i as u16),
            };
            PortOperation::Set(d)
        })
        .collect();
    sw.clear_journal();
    let results = sw.apply_batch(&ops).await.unwrap();
    for r in &results {
        assert_eq!(r.outcome, Ok(PortChange::Changed), "{}", r.port);
    }
    assert_eq!(edits(sw), 1, "{:?}", sw.journal());
    // Reading many ports (the drift sweep) is one get-config.
    sw.clear_journal();
    for (op, (_, read)) in ops.iter().zip(
        sw.get_ports(&ops.iter().map(|o| o.port().clone()).collect::<Vec<_>>())
            .await
            .unwrap(),
    ) {
        assert!(diff(&op.target(), &read.unwrap()).is_empty());
    }
    assert_eq!(sw.journal(), ["get-config", "close-session"]);
    let resets: Vec<PortOperation> = ports
        .iter()
        .map(|p| PortOperation::Reset(port(p)))
        .collect();
    for r in sw.apply_batch(&resets).await.unwrap() {
        assert_eq!(r.outcome, Ok(PortChange::Changed), "{}", r.port);
    }
    let xml = running_xml(target, sw.model()).await;
    for p in ports {
        assert!(
            !xml.contains(&format!(">{p}<")),
            "{p} still configured: {xml}"
        );
    }
}

#[tokio::test]
async fn netconfd_with_the_candidate_holds_every_port_state() {
    let nc = Netconfd::start(NetconfTarget::Candidate).unwrap();
    // netconfd's work directory (~/.yuma of the password database's home) is the
    // test's own: its home is mounted over in netconfd's mount namespace.
    assert!(nc.dir.join("home/.yuma").is_dir(), "{}", nc.dir.display());
    let sw = on_netconfd(&nc);
    // What Debian's netconfd announces with --target=candidate.
    let caps = sw.capabilities_announced().await.unwrap();
    for c in [
        "candidate:1.0",
        "confirmed-commit:1.1",
        "validate:1.1",
        "base:1.1",
    ] {
        assert!(caps.iter().any(|u| u.contains(c)), "{c} not in {caps:#?}");
    }
    assert!(
        !caps
            .iter()
            .any(|u| u.contains("capability:writable-running"))
    );
    let target = netconfd_target(&nc, key(&nc.client_key), HostKeyPolicy::AcceptAny);
    prove(
        &sw,
        &target,
        ["eth1", "eth2", "eth3"],
        &[
            (
                "access",
                "<mode>access</mode><access-vlan>100</access-vlan>",
            ),
            ("trunk with native", "<native-vlan>10</native-vlan>"),
            ("down, description, MTU", "<enabled>false</enabled>"),
        ],
    )
    .await;
    sw.clear_journal();
    let mut d = DesiredPort::clean(port("eth1"));
    d.vlans = VlanMode::Access { vlan: vlan(42) };
    sw.set_port(&d).await.unwrap();
    assert_eq!(
        sw.journal(),
        [
            "get-config",
            "lock",
            "discard-changes",
            "edit-config",
            "confirmed commit",
            "get-config",
            "commit",
            "unlock",
            "close-session"
        ],
        "the candidate transaction"
    );
    // A verified batch, as the operator's worker sends it: the read-back goes over
    // the session that committed (one login, one close).
    sw.clear_journal();
    d.vlans = VlanMode::Access { vlan: vlan(43) };
    let results = patchbay_providers::verify::apply_batch_verified(
        &sw,
        &[patchbay_providers::PortOperation::Set(d.clone())],
    )
    .await
    .unwrap();
    assert!(results.iter().all(|r| r.outcome.is_ok()), "{results:?}");
    let journal = sw.journal();
    assert_eq!(
        journal.iter().filter(|r| *r == "close-session").count(),
        1,
        "one session for edit, commit and read-back: {journal:?}"
    );
    assert_eq!(
        journal[journal.len() - 3..],
        ["unlock", "get-config", "close-session"],
        "{journal:?}"
    );
}

#[tokio::test]
async fn netconfd_with_running_only_edits_running_with_rollback_on_error() {
    let nc = Netconfd::start(NetconfTarget::Running).unwrap();
    let sw = on_netconfd(&nc);
    let caps = sw.capabilities_announced().await.unwrap();
    assert!(
        caps.iter()
            .any(|u| u.contains("capability:writable-running")),
        "{caps:#?}"
    );
    assert!(
        !caps.iter().any(|u| u.contains("capability:candidate")),
        "{caps:#?}"
    );
    let target = netconfd_target(&nc, key(&nc.client_key), HostKeyPolicy::AcceptAny);
    prove(&sw, &target, ["eth1", "eth2", "eth3"], &[]).await;
    sw.clear_journal();
    let mut d = DesiredPort::clean(port("eth1"));
    d.vlans = VlanMode::Access { vlan: vlan(42) };
    sw.set_port(&d).await.unwrap();
    assert_eq!(sw.journal(), ["get-config", "edit-config", "close-session"]);
}

#[tokio::test]
async fn juniper_simulators_hold_every_port_state_in_both_junos_shapes() {
    let sims = FakeSwitches::start(&[
        SimSpec::new("qfx", "juniper_qfx_copper_generic"),
        SimSpec::new("ex", "juniper_generic"),
    ])
    .unwrap();
    for (name, model_name, mode_tag, native) in [
        (
            "qfx",
            "junos-els",
            "interface-mode",
            "</unit><native-vlan-id>10</native-vlan-id>",
        ),
        (
            "ex",
            "junos-port-mode",
            "port-mode",
            "<native-vlan-id>10</native-vlan-id></ethernet-switching>",
        ),
    ] {
        let sim = sims.get(name);
        let sw = on_sim(sim, model::for_os("junos", Some(model_name)).unwrap());
        let target = sim_target(sim, &sim.password, HostKeyPolicy::AcceptAny);
        let access = format!("<{mode_tag}>access</{mode_tag}><vlan><members>100</members></vlan>");
        prove(
            &sw,
            &target,
            ["ge-0/0/1", "ge-0/0/2", "ge-0/0/3"],
            &[
                ("access", access.as_str()),
                ("trunk with native", native),
                ("down, description, MTU", "<disable/>"),
            ],
        )
        .await;
        // VLANs the ports needed were created with their IDs.
        let xml = running_xml(&target, sw.model()).await;
        assert!(
            xml.contains("<vlan><name>vlan100</name><vlan-id>100</vlan-id></vlan>"),
            "{xml}"
        );
    }
}

#[tokio::test]
async fn the_juniper_simulator_never_sees_a_port_it_does_not_have() {
    let sims = FakeSwitches::start(&[SimSpec::new("qfx", "juniper_qfx_copper_generic")]).unwrap();
    let sim = sims.get("qfx");
    let sw = on_sim(sim, model::for_os("junos", None).unwrap());
    let set = |p: &str| {
        let mut d = DesiredPort::clean(port(p));
        d.vlans = VlanMode::Access { vlan: vlan(100) };
        PortOperation::Set(d)
    };
    // ge-0/0/9 is not on the switch, FastEthernet0/1 is no Junos name: either would
    // close the simulator's session. Both fail alone; ge-0/0/1 is applied.
    let results = sw
        .apply_batch(&[set("ge-0/0/9"), set("ge-0/0/1"), set("FastEthernet0/1")])
        .await
        .unwrap();
    assert!(
        matches!(&results[0].outcome, Err(DeviceError::UnknownPort { port }) if port == "ge-0/0/9"),
        "{:?}",
        results[0]
    );
    assert_eq!(results[1].outcome, Ok(PortChange::Changed));
    assert!(
        matches!(&results[2].outcome, Err(DeviceError::UnknownPort { .. })),
        "{:?}",
        results[2]
    );
    let xml = running_xml(
        &sim_target(sim, &sim.password, HostKeyPolicy::AcceptAny),
        sw.model(),
    )
    .await;
    assert!(
        xml.contains("ge-0/0/1") && !xml.contains("ge-0/0/9"),
        "{xml}"
    );
    // The simulator announces :validate without implementing it: the answer
    // `operation-not-supported` is passed over (the commit validates), nothing else.
    let journal = sw.journal();
    assert!(journal.contains(&"validate".to_owned()), "{journal:?}");
    assert!(journal.contains(&"commit".to_owned()), "{journal:?}");
}

#[tokio::test]
async fn a_value_the_server_refuses_fails_its_port_only_and_running_never_holds_it() {
    let nc = Netconfd::start(NetconfTarget::Candidate).unwrap();
    let sw = on_netconfd(&nc);
    let target = netconfd_target(&nc, key(&nc.client_key), HostKeyPolicy::AcceptAny);
    // The server validates: VLAN 5000 is out of the module's range (sent raw; the
    // backend cannot even build it).
    let mut s = Session::open(&target, Duration::from_secs(10), None)
        .await
        .unwrap();
    let reply = edit_candidate(
        &mut s,
        "<ports xmlns=\"urn:patchbay:yang:patchbay-ports\"><port><name>eth9</name>\
         <mtu>5000000</mtu></port></ports>",
    )
    .await;
    assert_eq!(
        reply.errors.first().map(|e| e.tag.as_str()),
        Some("invalid-value"),
        "{reply:?}"
    );
    let reply = edit_candidate(
        &mut s,
        "<vlans xmlns=\"urn:patchbay:yang:patchbay-ports\"><vlan><id>5000</id></vlan></vlans>",
    )
    .await;
    assert_eq!(
        reply.errors.first().map(|e| e.tag.as_str()),
        Some("invalid-value"),
        "{reply:?}"
    );
    s.rpc(&Operation::DiscardChanges).await.unwrap();
    s.close().await;

    // Through the backend: VLAN 1002 is valid to patchbay but reserved by the device.
    let set = |p: &str, v: u16| {
        let mut d = DesiredPort::clean(port(p));
        d.vlans = VlanMode::Access { vlan: vlan(v) };
        PortOperation::Set(d)
    };
    let results = sw
        .apply_batch(&[set("eth1", 1002), set("eth2", 100)])
        .await
        .unwrap();
    match &results[0].outcome {
        Err(DeviceError::RpcRejected {
            operation,
            ports,
            error,
        }) => {
            assert_eq!(operation, "edit-config");
            assert_eq!(ports, &["eth1"]);
            assert_eq!(error.tag, "invalid-value");
            let text = results[0].outcome.as_ref().unwrap_err().to_string();
            assert!(
                text.contains("eth1") && text.contains("invalid-value"),
                "{text}"
            );
            assert!(matches!(
                results[0].outcome.as_ref().unwrap_err(),
                DeviceError::RpcRejected { error, .. } if !error.is_busy()
            ));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(results[1].outcome, Ok(PortChange::Changed));
    let xml = running_xml(&target, sw.model()).await;
    assert!(
        xml.contains("<name>eth2</name>") && !xml.contains("eth1") && !xml.contains("1002"),
        "{xml}"
    );
}

#[tokio::test]
async fn a_lock_held_by_another_session_is_transient_and_names_it() {
    let nc = Netconfd::start(NetconfTarget::Candidate).unwrap();
    let sw = on_netconfd(&nc);
    let target = netconfd_target(&nc, key(&nc.client_key), HostKeyPolicy::AcceptAny);
    let mut holder = Session::open(&target, Duration::from_secs(10), None)
        .await
        .unwrap();
    let reply = holder
        .rpc(&Operation::Lock(Datastore::Candidate))
        .await
        .unwrap();
    assert!(reply.errors.is_empty(), "{reply:?}");
    let holder_id = holder.capabilities.session_id.clone().unwrap();

    let mut d = DesiredPort::clean(port("eth1"));
    d.vlans = VlanMode::Access { vlan: vlan(100) };
    let err = sw.set_port(&d).await.unwrap_err();
    match &err {
        DeviceError::RpcRejected {
            operation, error, ..
        } => {
            assert_eq!(operation, "lock");
            assert_eq!(error.tag, "lock-denied");
            assert_eq!(error.session_id.as_deref(), Some(holder_id.as_str()));
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(&err, DeviceError::RpcRejected { error, .. } if error.is_busy()));
    assert_eq!(err.category(), "LockDenied");
    assert!(
        err.to_string().contains(&format!("session {holder_id}")),
        "{err}"
    );
    assert!(!running_xml(&target, sw.model()).await.contains("eth1"));

    holder
        .rpc(&Operation::Unlock(Datastore::Candidate))
        .await
        .unwrap();
    holder.close().await;
    assert_eq!(sw.set_port(&d).await.unwrap(), PortChange::Changed);
}

#[tokio::test]
async fn a_session_lost_before_the_confirm_is_rolled_back_by_the_server() {
    let nc = Netconfd::start(NetconfTarget::Candidate).unwrap();
    let sw = on_netconfd(&nc);
    let target = netconfd_target(&nc, key(&nc.client_key), HostKeyPolicy::AcceptAny);
    let mut before = DesiredPort::clean(port("eth1"));
    before.vlans = VlanMode::Access { vlan: vlan(100) };
    sw.set_port(&before).await.unwrap();

    let mut after = before.clone();
    after.vlans = VlanMode::Access { vlan: vlan(200) };
    let dying = on_netconfd(&nc).with_fault(Fault::DropBeforeConfirm);
    let err = dying.set_port(&after).await.unwrap_err();
    assert!(err.is_session_failure(), "{err:?}");
    // The confirmed commit reached running (it was read back) …
    assert!(dying.journal().contains(&"confirmed commit".to_owned()));
    assert!(!dying.journal().contains(&"commit".to_owned()));
    // … and the server restored the old configuration when the session ended.
    let mut restored = false;
    for _ in 0..50 {
        let observed = sw.get_port(&before.port).await.unwrap();
        if diff(&before, &observed).is_empty() {
            restored = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(restored, "running still holds the unconfirmed change");
    assert!(
        !running_xml(&target, sw.model())
            .await
            .contains("<id>200</id>")
    );
    // The next attempt (what the operator's retry does) applies it.
    assert_eq!(sw.set_port(&after).await.unwrap(), PortChange::Changed);
    assert!(diff(&after, &sw.get_port(&after.port).await.unwrap()).is_empty());
}

/// A rollout wave's batch held on netconfd (a persisted confirmed commit, RFC 6241
/// `persist`): on running at once, left unconfirmed after its session ends;
/// cancelled or confirmed from another session by its token; taken back by the
/// server itself when nobody confirms it in time; meanwhile the server commits
/// nothing else (why the switch worker keeps other writes back).
#[tokio::test]
async fn a_held_wave_stays_until_confirmed_or_cancelled_and_the_server_takes_it_back_in_time() {
    use patchbay_providers::{HeldBy, Hold, Settled};
    let nc = Netconfd::start(NetconfTarget::Candidate).unwrap();
    let sw = on_netconfd(&nc);
    let access = |name: &str, id: u16| {
        let mut d = DesiredPort::clean(port(name));
        d.vlans = VlanMode::Access { vlan: vlan(id) };
        d
    };
    // The access VLAN of port `name` in running (netconfd's own words).
    let vlan_of = |xml: &str, name: &str| {
        let start = xml.find(&format!("<name>{name}</name>"))?;
        let entry = &xml[start..start + xml[start..].find("</port>")?];
        entry
            .split("<access-vlan>")
            .nth(1)?
            .split('<')
            .next()
            .map(str::to_owned)
    };
    sw.set_port(&access("eth1", 100)).await.unwrap();
    sw.set_port(&access("eth2", 100)).await.unwrap();
    let hold = |token: &str, secs: u64| Hold {
        token: token.to_owned(),
        timeout: Duration::from_secs(secs),
        follow_up: false,
    };
    let held = |ops: Vec<PortOperation>, h: Hold| {
        let sw = on_netconfd(&nc);
        async move {
            let (results, reads, by) = sw.apply_and_read_held(&ops, &h).await.unwrap();
            assert!(results.iter().all(|r| r.outcome.is_ok()), "{results:?}");
            assert!(reads.iter().all(|(_, r)| r.is_ok()));
            (by, sw.journal())
        }
    };

    // Held, then cancelled from another session: running goes back.
    let (by, journal) = held(
        vec![PortOperation::Set(access("eth1", 200))],
        hold("cfg-a.1.1", 600),
    )
    .await;
    assert_eq!(by, HeldBy::Device);
    assert!(
        journal.contains(&"confirmed commit".to_owned()),
        "{journal:?}"
    );
    assert!(
        !journal.contains(&"commit".to_owned()),
        "never confirmed: {journal:?}"
    );
    let running = running_xml(&netconfd::login(&nc), sw.model()).await;
    assert_eq!(
        vlan_of(&running, "eth1").as_deref(),
        Some("200"),
        "{running}"
    );
    // Another port's batch meanwhile: the server refuses to commit it.
    let other = sw
        .apply_batch(&[PortOperation::Set(access("eth2", 300))])
        .await;
    let refused = match other {
        Ok(results) => results.into_iter().any(|r| r.outcome.is_err()),
        Err(_) => true,
    };
    assert!(
        refused,
        "a commit went through while a confirmed commit was pending"
    );
    assert_eq!(
        on_netconfd(&nc)
            .settle_hold("cfg-a.1.1", false)
            .await
            .unwrap(),
        Settled::Cancelled
    );
    let running = running_xml(&netconfd::login(&nc), sw.model()).await;
    assert_eq!(
        vlan_of(&running, "eth1").as_deref(),
        Some("100"),
        "{running}"
    );
    assert_eq!(
        vlan_of(&running, "eth2").as_deref(),
        Some("100"),
        "{running}"
    );

    // Held, then confirmed: it stays past its timeout; settling it again finds
    // nothing held.
    held(
        vec![PortOperation::Set(access("eth1", 201))],
        hold("cfg-a.1.2", 2),
    )
    .await;
    assert_eq!(
        on_netconfd(&nc)
            .settle_hold("cfg-a.1.2", true)
            .await
            .unwrap(),
        Settled::Confirmed
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    let running = running_xml(&netconfd::login(&nc), sw.model()).await;
    assert_eq!(
        vlan_of(&running, "eth1").as_deref(),
        Some("201"),
        "{running}"
    );
    assert!(matches!(
        on_netconfd(&nc)
            .settle_hold("cfg-a.1.2", true)
            .await
            .unwrap(),
        Settled::Gone(_)
    ));

    // Held and never settled (the operator died): the server takes it back by
    // itself at the timeout, and a late confirm finds it gone.
    held(
        vec![
            PortOperation::Set(access("eth1", 202)),
            PortOperation::Set(access("eth2", 202)),
        ],
        hold("cfg-a.1.3", 2),
    )
    .await;
    let running = running_xml(&netconfd::login(&nc), sw.model()).await;
    assert_eq!(
        vlan_of(&running, "eth2").as_deref(),
        Some("202"),
        "{running}"
    );
    let mut back = false;
    let mut seen = (None, None);
    // netconfd runs its timers when it has been idle a while: a session every
    // 100 ms keeps a held commit past its timeout, one every 1.5 s does not.
    for _ in 0..12 {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let running = running_xml(&netconfd::login(&nc), sw.model()).await;
        seen = (vlan_of(&running, "eth1"), vlan_of(&running, "eth2"));
        if seen == (Some("201".into()), Some("100".into())) {
            back = true;
            break;
        }
    }
    assert!(
        back,
        "the server kept a held change past its timeout: {seen:?}\n{}",
        std::fs::read_to_string(nc.dir.join("netconfd.log")).unwrap_or_default()
    );
    match on_netconfd(&nc)
        .settle_hold("cfg-a.1.3", true)
        .await
        .unwrap()
    {
        Settled::Gone(why) => assert!(why.contains("not active"), "{why}"),
        other => panic!("{other:?}"),
    }
    // Outside a rollout the same batch is committed and confirmed in its session.
    let plain = on_netconfd(&nc);
    plain.set_port(&access("eth1", 203)).await.unwrap();
    assert!(
        plain.journal().iter().any(|op| op == "commit"),
        "{:?}",
        plain.journal()
    );
}

#[tokio::test]
async fn wrong_host_key_and_wrong_credentials_are_refused_on_both_peers() {
    let nc = Netconfd::start(NetconfTarget::Candidate).unwrap();
    let sims = FakeSwitches::start(&[SimSpec::new("qfx", "juniper_qfx_copper_generic")]).unwrap();
    let sim = sims.get("qfx");
    let pinned = "SHA256:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA".to_owned();
    let wrong_pw = "not-the-password-4711";
    let yang = model::for_os("yang", None).unwrap();
    let junos = model::for_os("junos", None).unwrap();
    let cases: Vec<(&str, SshTarget, Arc<Model>)> = vec![
        (
            "netconfd host key",
            netconfd_target(
                &nc,
                key(&nc.client_key),
                HostKeyPolicy::Fingerprint(pinned.clone()),
            ),
            yang.clone(),
        ),
        (
            "netconfd stranger key",
            netconfd_target(&nc, key(&nc.stranger_key), HostKeyPolicy::AcceptAny),
            yang.clone(),
        ),
        (
            "netconfd password",
            netconfd_target(
                &nc,
                Auth::Password(SecretString::new(wrong_pw.to_owned())),
                HostKeyPolicy::AcceptAny,
            ),
            yang,
        ),
        (
            "simulator host key",
            sim_target(
                sim,
                &sim.password,
                HostKeyPolicy::Fingerprint(pinned.clone()),
            ),
            junos.clone(),
        ),
        (
            "simulator password",
            sim_target(sim, wrong_pw, HostKeyPolicy::AcceptAny),
            junos,
        ),
    ];
    for (what, target, m) in cases {
        let sw = NetconfSwitch::new(target, m, options()).with_journal();
        let err = sw.get_port(&port("ge-0/0/1")).await.unwrap_err();
        match (what.ends_with("host key"), &err) {
            (true, DeviceError::HostKeyMismatch { expected, .. }) => assert_eq!(expected, &pinned),
            (false, DeviceError::AuthenticationFailed { .. }) => {}
            _ => panic!("{what}: {err:?}"),
        }
        let text = format!("{err} {err:?}");
        assert!(!text.contains(wrong_pw), "{what}: {text}");
        assert!(
            sw.journal().is_empty(),
            "{what}: nothing is sent before the login"
        );
    }
}

#[tokio::test]
async fn dry_run_prints_the_transaction_and_changes_nothing() {
    let nc = Netconfd::start(NetconfTarget::Candidate).unwrap();
    let sw = on_netconfd(&nc);
    let mut d = DesiredPort::clean(port("eth1"));
    d.vlans = VlanMode::Access { vlan: vlan(100) };
    let rpcs = sw.dry_run(&[PortOperation::Set(d.clone())]).await.unwrap();
    let names: Vec<String> = rpcs
        .iter()
        .map(|m| Element::parse(m).unwrap().children[0].name.clone())
        .collect();
    assert_eq!(
        names,
        [
            "lock",
            "discard-changes",
            "edit-config",
            "commit",
            "get-config",
            "commit",
            "unlock"
        ]
    );
    assert!(
        rpcs[2].contains("<port nc:operation=\"replace\"><name>eth1</name>"),
        "{}",
        rpcs[2]
    );
    assert!(
        rpcs[3].contains("<confirmed/><confirm-timeout>30</confirm-timeout>"),
        "{}",
        rpcs[3]
    );
    assert!(sw.get_port(&d.port).await.unwrap().vlans == Some(VlanMode::Unconfigured));
    assert!(!sw.journal().contains(&"edit-config".to_owned()));
}

fn acl_rule(direction: AclDirection, protocol: AclProtocol) -> AclRule {
    AclRule::matching(IpVersion::V4, protocol, direction, AclAction::Deny)
}

/// Seed 003 story 5 over NETCONF: the rules become RFC 8519-shaped entries of the
/// port in patchbay's YANG module, netconfd validates them (a raw entry breaking the
/// module's musts is refused), patchbay reads them back in order, an entry changed
/// behind its back is drift and is rewritten, and cleaning removes them.
#[tokio::test]
async fn acls_are_entries_the_server_validates_and_patchbay_reads_back() {
    let nc = Netconfd::start(NetconfTarget::Candidate).unwrap();
    let sw = on_netconfd(&nc);
    assert!(sw.capabilities().supports(Capability::Acl));
    let target = netconfd_target(&nc, key(&nc.client_key), HostKeyPolicy::AcceptAny);

    let mut d = DesiredPort::clean(port("eth1"));
    d.vlans = VlanMode::Access { vlan: vlan(100) };
    d.acl = vec![
        AclRule {
            dst_ports: Some(L4PortRange::parse("22").unwrap()),
            ..acl_rule(AclDirection::Ingress, AclProtocol::Tcp)
        },
        AclRule {
            action: AclAction::Allow,
            src: Some(Cidr::parse("10.0.0.0/8").unwrap()),
            src_ports: Some(L4PortRange::parse("1000-2000").unwrap()),
            ..acl_rule(AclDirection::Egress, AclProtocol::Udp)
        },
        AclRule {
            ip_version: IpVersion::V6,
            dst: Some(Cidr::parse("2001:db8::/32").unwrap()),
            ..acl_rule(AclDirection::Ingress, AclProtocol::Icmp)
        },
        acl_rule(AclDirection::Ingress, AclProtocol::All),
    ];
    assert_eq!(sw.set_port(&d).await.unwrap(), PortChange::Changed);
    let observed = sw.get_port(&d.port).await.unwrap();
    assert_eq!(observed.acl.as_ref(), Some(&d.acl));
    let xml = running_xml(&target, sw.model()).await;
    for fragment in [
        "<ingress><ace><sequence>1</sequence>",
        "<tcp><destination-port><lower-port>22</lower-port><upper-port>22</upper-port>",
        "<egress><ace><sequence>2</sequence>",
        "<source-ipv4-network>10.0.0.0/8</source-ipv4-network>",
        "<ipv6><protocol>58</protocol><destination-ipv6-network>2001:db8::/32",
        "<forwarding>accept</forwarding>",
    ] {
        assert!(xml.contains(fragment), "running lacks {fragment}: {xml}");
    }
    assert_eq!(sw.set_port(&d).await.unwrap(), PortChange::Unchanged);

    // The server validates the entries: a TCP match on a UDP entry breaks the
    // module's must, and the candidate does not validate.
    let mut s = Session::open(&target, Duration::from_secs(10), None)
        .await
        .unwrap();
    let edit = edit_candidate(
        &mut s,
        "<ports xmlns=\"urn:patchbay:yang:patchbay-ports\"><port><name>eth9</name><acl><ingress>\
         <ace><sequence>1</sequence><matches><ipv4><protocol>17</protocol></ipv4>\
         <tcp><destination-port><lower-port>22</lower-port></destination-port></tcp></matches>\
         <actions><forwarding>drop</forwarding></actions></ace></ingress></acl></port></ports>",
    )
    .await;
    let check = s
        .rpc(&Operation::Validate(Datastore::Candidate))
        .await
        .unwrap();
    let refused: Vec<_> = edit.errors.iter().chain(&check.errors).collect();
    assert!(
        refused.iter().any(|e| e
            .message
            .as_deref()
            .is_some_and(|m| m.contains("a tcp match needs protocol 6"))),
        "{edit:?} {check:?}"
    );
    s.rpc(&Operation::DiscardChanges).await.unwrap();

    // Drift: an entry's action changed behind patchbay's back.
    let raw = Element::parse(
        "<ports xmlns=\"urn:patchbay:yang:patchbay-ports\"><port><name>eth1</name><acl><ingress>\
         <ace><sequence>1</sequence><actions><forwarding>accept</forwarding></actions></ace>\
         </ingress></acl></port></ports>",
    )
    .unwrap();
    for op in [
        Operation::EditConfig {
            target: Datastore::Candidate,
            rollback_on_error: false,
            config: vec![raw],
        },
        Operation::Commit {
            confirm_timeout: None,
            persist: None,
            persist_id: None,
        },
    ] {
        let r = s.rpc(&op).await.unwrap();
        assert!(r.errors.is_empty(), "{r:?}");
    }
    s.close().await;
    let drifted = sw.get_port(&d.port).await.unwrap();
    assert_eq!(diff(&d, &drifted), vec![PortField::Acl]);
    assert_eq!(sw.set_port(&d).await.unwrap(), PortChange::Changed);
    assert!(diff(&d, &sw.get_port(&d.port).await.unwrap()).is_empty());

    // A shorter ACL replaces the entries whole; cleaning removes them.
    let mut shorter = d.clone();
    shorter.acl.truncate(1);
    sw.set_port(&shorter).await.unwrap();
    assert_eq!(
        sw.get_port(&d.port).await.unwrap().acl,
        Some(shorter.acl.clone())
    );
    assert!(
        !running_xml(&target, sw.model())
            .await
            .contains("<sequence>2</sequence>")
    );
    sw.reset_port(&d.port).await.unwrap();
    assert_eq!(sw.get_port(&d.port).await.unwrap().acl, Some(Vec::new()));
    assert!(!running_xml(&target, sw.model()).await.contains("<ace>"));
}

/// The `<interface>` entry named `name` in running, as XML.
fn entry_of(xml: &str, name: &str) -> Option<String> {
    let start = xml.find(&format!("<interface><name>{name}</name>"))?;
    let end = xml[start..].find("</interface>")? + start + "</interface>".len();
    Some(xml[start..end].to_owned())
}

#[tokio::test]
async fn junos_ae_bundles_are_formed_changed_and_removed_in_one_commit_each() {
    let sims = FakeSwitches::start(&[SimSpec::new("qfx", "juniper_qfx_copper_generic")]).unwrap();
    let sim = sims.get("qfx");
    let sw = on_sim(sim, model::for_os("junos", Some("junos-els")).unwrap());
    let target = sim_target(sim, &sim.password, HostKeyPolicy::AcceptAny);
    let caps = sw.capabilities();
    assert!(caps.supports(Capability::LinkAggregation) && caps.supports(Capability::StaticLag));
    assert!(
        !caps.supports(Capability::LacpPassive),
        "the simulator keeps no passive"
    );
    let member = |name: &str, vlans: VlanMode, mode: LagMode| {
        let members = [port("ge-0/0/1"), port("ge-0/0/2")];
        lag_cases::member(port(name), 2, mode, vlans, &members)
    };
    let trunk = VlanMode::Trunk {
        native: None,
        allowed: [vlan(200), vlan(201)].into_iter().collect(),
    };
    let mut a = member("ge-0/0/1", trunk.clone(), LagMode::Active);
    a.description = Some(Description::parse("to server 7, nic 1").unwrap());
    a.mtu = Some(Mtu::new(9000).unwrap());
    let mut b = member("ge-0/0/2", trunk.clone(), LagMode::Active);
    b.mtu = a.mtu;
    b.admin = AdminState::Down;

    // Formed: ae2 carries the trunk, the MTU and LACP active; the members name it.
    sw.clear_journal();
    let r = sw.apply_batch(&sets(&[&a, &b])).await.unwrap();
    assert_eq!(outcomes(r), ["Changed", "Changed"]);
    assert_eq!(edits(&sw), 1, "one transaction for the group");
    let xml = running_xml(&target, sw.model()).await;
    let ae = entry_of(&xml, "ae2").expect("ae2 in running");
    for part in [
        "<mtu>9000</mtu>",
        "<aggregated-ether-options><lacp><active/></lacp></aggregated-ether-options>",
        "<interface-mode>trunk</interface-mode>",
        "<members>200</members>",
    ] {
        assert!(ae.contains(part), "{part} missing from {ae}");
    }
    for (name, own) in [
        ("ge-0/0/1", "<description>to server 7, nic 1</description>"),
        ("ge-0/0/2", "<disable/>"),
    ] {
        let e = entry_of(&xml, name).expect("member in running");
        assert!(
            e.contains(
                "<ether-options><ieee-802.3ad><bundle>ae2</bundle></ieee-802.3ad></ether-options>"
            ) && e.contains(own)
                && !e.contains("ethernet-switching"),
            "{e}"
        );
    }
    for d in [&a, &b] {
        let seen = sw.get_port(&d.port).await.unwrap();
        assert!(diff(d, &seen).is_empty(), "{seen:?}");
    }
    sw.clear_journal();
    let r = sw.apply_batch(&sets(&[&a, &b])).await.unwrap();
    assert_eq!(outcomes(r), ["Unchanged", "Unchanged"]);
    assert_eq!(edits(&sw), 0);

    // Changed to a static bundle on access VLAN 300: the aggregate is replaced whole.
    let sa = member(
        "ge-0/0/1",
        VlanMode::Access { vlan: vlan(300) },
        LagMode::Static,
    );
    let sb = member(
        "ge-0/0/2",
        VlanMode::Access { vlan: vlan(300) },
        LagMode::Static,
    );
    let r = sw.apply_batch(&sets(&[&sa, &sb])).await.unwrap();
    assert_eq!(outcomes(r), ["Changed", "Changed"]);
    let xml = running_xml(&target, sw.model()).await;
    let ae = entry_of(&xml, "ae2").unwrap();
    assert!(
        !ae.contains("<lacp>") && ae.contains("<members>300</members>"),
        "{ae}"
    );
    assert!(!ae.contains("<mtu>"), "{ae}");

    // One member leaves: it is a port of its own again; ae2 stays for the other.
    let r = sw
        .apply_batch(&[PortOperation::Reset(port("ge-0/0/1"))])
        .await
        .unwrap();
    assert_eq!(outcomes(r), ["Changed"]);
    let xml = running_xml(&target, sw.model()).await;
    assert!(
        !xml.contains("<name>ge-0/0/1</name><ether-options>"),
        "{xml}"
    );
    assert!(entry_of(&xml, "ae2").is_some_and(|e| e.contains("<members>300</members>")));
    assert_eq!(
        sw.get_port(&port("ge-0/0/1")).await.unwrap().lag,
        Some(None)
    );
    // The last one leaves: ae2 goes with it, in the same commit.
    sw.clear_journal();
    let r = sw
        .apply_batch(&[PortOperation::Reset(port("ge-0/0/2"))])
        .await
        .unwrap();
    assert_eq!(outcomes(r), ["Changed"]);
    assert_eq!(edits(&sw), 1);
    let xml = running_xml(&target, sw.model()).await;
    assert!(
        entry_of(&xml, "ae2").is_none_or(|e| !e.contains("ethernet-switching")),
        "{xml}"
    );
    assert!(!xml.contains("<bundle>ae2</bundle>"), "{xml}");
}

/// Junos keeps the VLAN table consistent itself: a commit deleting a VLAN a port
/// still names is refused (as the patchbay-ports YANG module's leafref refuses it on
/// netconfd), so a port read over NETCONF — whose VLANs come with the same
/// get-config — never misses one.
#[tokio::test]
async fn junos_refuses_to_delete_a_vlan_a_port_still_names() {
    let sims = FakeSwitches::start(&[SimSpec::new("qfx", "juniper_qfx_copper_generic")]).unwrap();
    let sim = sims.get("qfx");
    let sw = on_sim(sim, model::for_os("junos", Some("junos-els")).unwrap());
    let mut d = DesiredPort::clean(port("ge-0/0/1"));
    d.vlans = VlanMode::Access { vlan: vlan(100) };
    assert_eq!(sw.set_port(&d).await.unwrap(), PortChange::Changed);
    let read = sw.get_port(&d.port).await.unwrap();
    assert_eq!(read.missing_vlans, Some(Default::default()));

    let target = sim_target(sim, &sim.password, HostKeyPolicy::AcceptAny);
    let mut s = Session::open(&target, Duration::from_secs(10), None)
        .await
        .unwrap();
    let r = edit_candidate(
        &mut s,
        "<configuration><vlans><vlan operation=\"delete\"><name>vlan100</name></vlan>\
         </vlans></configuration>",
    )
    .await;
    assert!(r.errors.is_empty(), "{r:?}");
    let r = s
        .rpc(&Operation::Commit {
            confirm_timeout: None,
            persist: None,
            persist_id: None,
        })
        .await
        .unwrap();
    let refusal = r
        .errors
        .first()
        .and_then(|e| e.message.clone())
        .unwrap_or_default();
    assert!(refusal.contains("No vlan matches vlan tag 100"), "{r:?}");
    s.rpc(&Operation::DiscardChanges).await.unwrap();
    s.close().await;
    assert!(
        running_xml(&target, sw.model())
            .await
            .contains("<vlan-id>100</vlan-id>")
    );
    assert!(diff(&d, &sw.get_port(&d.port).await.unwrap()).is_empty());
}

/// NETCONF logs in through the same transport: a connection cut while it logs in
/// (2–60 ms after the relay accepted it) is never refused credentials.
#[tokio::test]
async fn a_netconf_connection_cut_while_logging_in_is_never_refused_credentials() {
    let sims = FakeSwitches::start(&[SimSpec::new("qfx", "juniper_qfx_copper_generic")]).unwrap();
    let sim = sims.get("qfx");
    for cut_ms in (2..=60).step_by(2) {
        let relay =
            patchbay_testbed::CuttingRelay::start(sim.port, Duration::from_millis(cut_ms)).unwrap();
        let mut through = sim.clone();
        through.port = relay.port;
        let sw = on_sim(&through, model::for_os("junos", Some("junos-els")).unwrap());
        if let Err(e) = sw.get_port(&port("ge-0/0/1")).await {
            assert!(
                !matches!(e, DeviceError::AuthenticationFailed { .. }),
                "cut after {cut_ms} ms: {e}"
            );
            assert!(
                e.is_session_failure() || e.category() == "ProtocolError",
                "{e}"
            );
        }
    }
}

/// A session kept for the next call (the operator keeps it for its batch window):
/// a verified batch, a drift read and a second batch within the window share one
/// login and send no close-session; the device holds what each committed; the
/// session is closed at once on `close_idle` (the worker's call on losing the
/// lease), and by itself when the window passes with no call.
#[tokio::test]
async fn a_session_is_kept_for_the_next_call_within_the_window_and_closed_after() {
    let nc = Netconfd::start(NetconfTarget::Candidate).unwrap();
    let target = netconfd::login(&nc);
    let sw = NetconfSwitch::new(
        target.clone(),
        model::for_os("yang", None).unwrap(),
        NetconfOptions {
            keep_session: Duration::from_secs(2),
            ..options()
        },
    )
    .with_journal();
    let set = |v: u16| {
        let mut d = DesiredPort::clean(port("eth1"));
        d.vlans = VlanMode::Access { vlan: vlan(v) };
        [patchbay_providers::PortOperation::Set(d)]
    };
    let closes = |sw: &NetconfSwitch| {
        sw.journal()
            .iter()
            .filter(|r| *r == "close-session")
            .count()
    };
    for (v, read) in [(51, true), (52, false)] {
        let results = patchbay_providers::verify::apply_batch_verified(&sw, &set(v))
            .await
            .unwrap();
        assert!(results.iter().all(|r| r.outcome.is_ok()), "{results:?}");
        if read {
            sw.get_ports(&[port("eth1")]).await.unwrap();
        }
    }
    assert_eq!(sw.logins(), 1, "{:?}", sw.journal());
    assert_eq!(closes(&sw), 0, "{:?}", sw.journal());
    let running = running_xml(&target, sw.model()).await;
    assert!(
        running.contains("<access-vlan>52</access-vlan>"),
        "{running}"
    );
    // Closed at once when asked.
    sw.close_idle().await;
    assert_eq!(closes(&sw), 1);
    // The next call logs in again; with no call after it, its session is closed
    // when the window has passed.
    sw.get_ports(&[port("eth1")]).await.unwrap();
    assert_eq!(sw.logins(), 2);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(closes(&sw), 1, "kept within the window");
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert_eq!(closes(&sw), 2, "closed after it: {:?}", sw.journal());
}

//! Table tests of the status module: every port health, the Switch and
//! ProviderSwitch conditions, reachability Events, status patches.
use super::*;
use crate::api::{ConfigurationRef, ServerClaimBinding};
use crate::decide::failure::BackendError;
use crate::decide::state_machine::{Retry, SwitchOutage};
use crate::decide::validate::{FieldError, ValidationErrors};
use patchbay_model::{Cause, DeviceError};
use serde_json::json;

fn t(s: i64) -> jiff::Timestamp {
    jiff::Timestamp::from_second(1_800_000_000 + s).unwrap()
}

fn outage() -> Outage {
    Outage {
        error: DeviceError::Unreachable {
            address: "10.0.0.1:22".into(),
            cause: Cause::msg("connection refused"),
        },
        since: t(0),
        timing: SwitchOutage {
            failures: 3,
            last_failure: t(30),
            next_probe: t(70),
        },
    }
}

fn target() -> PortTarget {
    PortTarget {
        configuration: ConfigurationRef {
            name: "tenant-web".into(),
            namespace: Some("ns".into()),
        },
        hash: "h".into(),
    }
}

fn ready(s: &PortStatus) -> (String, String, String) {
    let c = find_condition(&s.conditions, "Ready").expect("Ready");
    (c.status.clone(), c.reason.clone(), c.message.clone())
}

#[test]
fn port_status_table() {
    let applied = target();
    let invalid = Failure::InvalidConfiguration(ValidationErrors(vec![FieldError {
        path: "spec.mtu".into(),
        reason: "this switch cannot configure MTU".into(),
    }]));
    let down = outage();
    let none: Option<String> = None;
    let attempt = Some("apply/abc".to_owned());
    struct Row<'a> {
        name: &'static str,
        state: PortState,
        facts: StatusFacts<'a>,
        ready: (&'static str, &'static str, &'static str),
        last_error: Option<&'static str>,
        failure_count: Option<i32>,
    }
    let base = |state_health: Health| StatusFacts {
        generation: Some(4),
        applied: None,
        failures: 0,
        last_attempt: &none,
        last_failure: None,
        next_retry: None,
        health: state_health,
        failure: None,
        waiting: None,
        outage: None,
        drift_policy: DriftPolicy::Reconcile,
        kind: "SwitchPortConfiguration",
        now: t(100),
    };
    let rows = vec![
        Row {
            name: "Active and in sync",
            state: PortState::Active,
            facts: StatusFacts {
                applied: Some(&applied),
                ..base(Health::Steady)
            },
            ready: (
                "True",
                "Active",
                "the device carries SwitchPortConfiguration tenant-web",
            ),
            last_error: None,
            failure_count: None,
        },
        Row {
            name: "Idle and clean",
            state: PortState::Idle,
            facts: base(Health::Steady),
            ready: ("True", "Idle", "the port is clean"),
            last_error: None,
            failure_count: None,
        },
        Row {
            name: "Configuring, on its way",
            state: PortState::Configuring,
            facts: base(Health::Progressing),
            ready: ("False", "Configuring", "the port is Configuring"),
            last_error: None,
            failure_count: None,
        },
        Row {
            name: "a SmartNicPort waiting for its next port",
            state: PortState::Configuring,
            facts: StatusFacts {
                waiting: Some("waiting for SwitchPort ns/p1"),
                ..base(Health::Progressing)
            },
            ready: (
                "False",
                "WaitingForNextPort",
                "waiting for SwitchPort ns/p1",
            ),
            last_error: None,
            failure_count: None,
        },
        Row {
            name: "an invalid configuration",
            state: PortState::Configuring,
            facts: StatusFacts {
                failures: 1,
                last_attempt: &attempt,
                last_failure: Some(t(99)),
                failure: Some(&invalid),
                ..base(Health::Failed(Retry::Invalid))
            },
            ready: (
                "False",
                "InvalidConfiguration",
                "spec.mtu: this switch cannot configure MTU",
            ),
            last_error: Some("spec.mtu: this switch cannot configure MTU"),
            failure_count: Some(1),
        },
        Row {
            name: "a port waiting for a switch that does not answer",
            state: PortState::Configuring,
            facts: StatusFacts {
                failures: 3,
                last_attempt: &attempt,
                last_failure: Some(t(30)),
                next_retry: Some(t(70)),
                outage: Some(&down),
                ..base(Health::SwitchDown)
            },
            ready: (
                "False",
                "DeviceUnreachable",
                "cannot reach the device at 10.0.0.1:22: connection refused; the switch \
                 does not answer since 2027-01-15T08:00:00Z (3 failed attempts) and is \
                 tried again at 2027-01-15T08:01:10Z; this port waits for it",
            ),
            last_error: Some("cannot reach the device at 10.0.0.1:22: connection refused"),
            failure_count: Some(3),
        },
        Row {
            name: "an Active port on a switch that went away",
            state: PortState::Active,
            facts: StatusFacts {
                applied: Some(&applied),
                outage: Some(&down),
                ..base(Health::SwitchDown)
            },
            ready: (
                "Unknown",
                "DeviceUnreachable",
                "the switch does not answer (since 2027-01-15T08:00:00Z): cannot reach the \
                 device at 10.0.0.1:22: connection refused; the configuration is believed \
                 to be still on the device, and is checked when it answers",
            ),
            last_error: None,
            failure_count: None,
        },
        Row {
            name: "drift reported, not repaired",
            state: PortState::Active,
            facts: StatusFacts {
                applied: Some(&applied),
                drift_policy: DriftPolicy::ReportOnly,
                ..base(Health::Drifted)
            },
            ready: (
                "False",
                "Drifted",
                "the device differs from the applied configuration",
            ),
            last_error: None,
            failure_count: None,
        },
    ];
    for row in rows {
        let mut s = PortStatus {
            state: Some(row.state),
            ..Default::default()
        };
        port_status(&mut s, &row.facts);
        let (status, reason, message) = ready(&s);
        assert_eq!(
            (status.as_str(), reason.as_str(), message.as_str()),
            row.ready,
            "{}",
            row.name
        );
        assert_eq!(s.last_error.as_deref(), row.last_error, "{}", row.name);
        assert_eq!(s.failure_count, row.failure_count, "{}", row.name);
        assert_eq!(s.observed_generation, Some(4), "{}", row.name);
        let ready_since = &find_condition(&s.conditions, "Ready")
            .unwrap()
            .last_transition_time;
        assert_eq!(ready_since.0, t(100), "{}", row.name);
    }
}

#[test]
fn backing_off_leaves_the_failure_as_it_was_and_times_move_only_on_change() {
    let mut s = PortStatus {
        state: Some(PortState::Configuring),
        last_error: Some("the device rejected `x`: no".into()),
        ..Default::default()
    };
    set_condition(
        &mut s.conditions,
        "Ready",
        false,
        "CommandRejected",
        "the device rejected `x`: no".into(),
        Some(1),
        t(0),
    );
    let before = s.clone();
    let attempt = Some("apply/abc".to_owned());
    port_status(
        &mut s,
        &StatusFacts {
            generation: Some(1),
            applied: None,
            failures: 2,
            last_attempt: &attempt,
            last_failure: Some(t(0)),
            next_retry: Some(t(10)),
            health: Health::BackingOff,
            failure: None,
            waiting: None,
            outage: None,
            drift_policy: DriftPolicy::Reconcile,
            kind: "SwitchPortConfiguration",
            now: t(5),
        },
    );
    assert_eq!(s.conditions, before.conditions);
    assert_eq!(s.last_error, before.last_error);
    assert_eq!(s.next_retry_time, Some(Time(t(10))));
    // Same status again: lastTransitionTime stays; another status: it moves.
    set_condition(
        &mut s.conditions,
        "Ready",
        false,
        "X",
        "y".into(),
        None,
        t(7),
    );
    assert_eq!(s.conditions[0].last_transition_time, Time(t(0)));
    set_condition(
        &mut s.conditions,
        "Ready",
        true,
        "X",
        "y".into(),
        None,
        t(8),
    );
    assert_eq!(s.conditions[0].last_transition_time, Time(t(8)));
}

#[test]
fn switch_status_and_its_events() {
    let down: Result<Reachability, Failure> = Ok(Reachability::Down(outage()));
    let up: Result<Reachability, Failure> = Ok(Reachability::Reachable);
    let mut s = crate::api::SwitchStatus::default();
    switch_status(&mut s, &up, 3, Some(2), t(0));
    let c = |s: &crate::api::SwitchStatus, ty: &str| {
        let c = find_condition(&s.conditions, ty).unwrap();
        (c.status.clone(), c.reason.clone(), c.message.clone())
    };
    assert_eq!(c(&s, "Ready").2, "3 ports managed");
    assert_eq!(c(&s, "DeviceReachable").0, "True");
    assert_eq!(reachability_event(None, &s, &up), None);
    // It goes away: one Warning, then none while it stays away.
    switch_status(&mut s, &down, 3, Some(2), t(40));
    let (status, reason, message) = c(&s, "DeviceReachable");
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "DeviceUnreachable")
    );
    assert!(
        message.ends_with(
            "(since 2027-01-15T08:00:00Z, 3 failed attempts; tried again at 2027-01-15T08:01:10Z)"
        ),
        "{message}"
    );
    let warning = reachability_event(Some("True"), &s, &down).unwrap();
    assert_eq!(
        (warning.severity, warning.reason),
        (Severity::Warning, "DeviceUnreachable")
    );
    assert_eq!(reachability_event(Some("False"), &s, &down), None);
    // Back: one Normal.
    switch_status(&mut s, &up, 3, Some(2), t(80));
    let back = reachability_event(Some("False"), &s, &up).unwrap();
    assert_eq!(
        (back.severity, back.reason),
        (Severity::Normal, "Reachable")
    );
    // Not tried yet, and a Switch that cannot be used.
    let mut fresh = crate::api::SwitchStatus::default();
    switch_status(&mut fresh, &Ok(Reachability::Unknown), 0, None, t(0));
    assert_eq!(c(&fresh, "Ready").0, "Unknown");
    let unusable = Err(Failure::Backend(BackendError::HostKeyNotPinned));
    switch_status(&mut fresh, &unusable, 0, None, t(1));
    assert_eq!(c(&fresh, "Ready").1, "HostKeyNotPinned");
    assert_eq!(c(&fresh, "DeviceReachable").0, "Unknown", "untouched");
}

#[test]
fn provider_status_says_why_it_is_not_ready() {
    let mut s = ConditionsStatus::default();
    provider_status(&mut s, &Ok(()), None, Some(1), t(0));
    assert_eq!(s.conditions[0].reason, "Valid");
    assert_eq!(
        s.conditions[0].message,
        "specification and credentials are valid"
    );
    // A setting that cannot take effect is said, and the provider stays Ready.
    provider_status(
        &mut s,
        &Ok(()),
        Some("connectTimeoutSeconds …"),
        Some(1),
        t(0),
    );
    assert_eq!(
        (
            s.conditions[0].status.as_str(),
            s.conditions[0].message.as_str()
        ),
        (
            "True",
            "specification and credentials are valid; connectTimeoutSeconds …"
        )
    );
    let missing = Err(Failure::Backend(BackendError::Credentials(
        "Secret \"login\" (spec.credentialsSecretRef) not found".into(),
    )));
    provider_status(&mut s, &missing, None, Some(2), t(1));
    assert_eq!(
        (
            s.conditions[0].status.as_str(),
            s.conditions[0].reason.as_str()
        ),
        ("False", "CredentialsInvalid")
    );
    assert_eq!(s.observed_generation, Some(2));
}

#[test]
fn a_status_patch_clears_what_the_new_status_no_longer_has() {
    let old = PortStatus {
        state: Some(PortState::Configuring),
        last_error: Some("boom".into()),
        failure_count: Some(2),
        ..Default::default()
    };
    let new = PortStatus {
        state: Some(PortState::Active),
        ..Default::default()
    };
    assert_eq!(
        status_merge_patch(&old, &new),
        json!({"status": {"state": "Active", "lastError": null, "failureCount": null}})
    );
}

fn claim_spec() -> ServerClaimSpec {
    serde_json::from_value(serde_json::json!({
        "site": "dc1",
        "roles": [{"name": "control-plane", "count": 1}, {"name": "worker", "count": 2}]
    }))
    .unwrap()
}

fn claim_plan(served: bool, roles: &[(&str, &[&str])]) -> ClaimPlan {
    ClaimPlan {
        served,
        roles: roles
            .iter()
            .map(|(r, n)| ((*r).to_owned(), n.iter().map(|s| (*s).to_owned()).collect()))
            .collect(),
        ..Default::default()
    }
}

fn claim_condition(s: &ServerClaimStatus, type_: &str) -> (String, String, String) {
    let c = find_condition(&s.conditions, type_).unwrap();
    (c.status.clone(), c.reason.clone(), c.message.clone())
}

#[test]
fn a_served_claim_lists_its_servers_and_counts_them() {
    let plan = claim_plan(true, &[("control-plane", &["a"]), ("worker", &["b", "c"])]);
    let (s, held) = claim_status(
        &claim_spec(),
        Some(2),
        &Ok(plan),
        &ServerClaimStatus::default(),
        t(0),
    );
    assert_eq!(s.allocation.as_deref(), Some("3/3"));
    assert_eq!(s.observed_generation, Some(2));
    assert_eq!(s.roles[1].servers, vec!["b", "c"]);
    assert_eq!(s.roles[1].requested, 2);
    assert_eq!(held.len(), 3);
    assert_eq!(
        claim_condition(&s, "Allocated"),
        (
            "True".into(),
            "Allocated".into(),
            "3/3 servers allocated".into()
        )
    );
    assert_eq!(claim_condition(&s, "Maintenance").0, "False");
    // The same step again: the same status, so nothing is written.
    let plan = claim_plan(true, &[("control-plane", &["a"]), ("worker", &["b", "c"])]);
    let (again, _) = claim_status(&claim_spec(), Some(2), &Ok(plan), &s, t(60));
    assert_eq!(again, s);
}

#[test]
fn a_claim_that_cannot_be_served_says_what_is_missing_and_which_servers_wait() {
    let mut plan = claim_plan(false, &[("control-plane", &["a"]), ("worker", &["b"])]);
    plan.missing = vec!["role worker: needs 2 servers at site dc1; 1 eligible".into()];
    plan.misfits = vec!["b".into()];
    plan.in_maintenance = vec!["a".into()];
    let (s, _) = claim_status(
        &claim_spec(),
        Some(1),
        &Ok(plan),
        &ServerClaimStatus::default(),
        t(0),
    );
    assert_eq!(s.allocation.as_deref(), Some("2/3"));
    let (truth, reason, message) = claim_condition(&s, "Allocated");
    assert_eq!(
        (truth.as_str(), reason.as_str()),
        ("False", "InsufficientServers")
    );
    assert_eq!(
        message,
        "role worker: needs 2 servers at site dc1; 1 eligible; no longer fit their role, \
         kept until a replacement can be allocated: b"
    );
    assert_eq!(
        claim_condition(&s, "Maintenance"),
        (
            "True".into(),
            "ServersInMaintenance".into(),
            "in maintenance: a".into()
        )
    );
}

#[test]
fn an_invalid_claim_keeps_its_servers_and_names_every_field() {
    let before = ServerClaimStatus {
        roles: vec![RoleAllocation {
            name: "worker".into(),
            requested: 2,
            servers: vec!["b".into(), "c".into()],
        }],
        ..Default::default()
    };
    let errors = ValidationErrors(vec![
        FieldError {
            path: "spec.roles[0].count".into(),
            reason: "-1 is negative".into(),
        },
        FieldError {
            path: "spec.site".into(),
            reason: "\"d c\" is not a site".into(),
        },
    ]);
    let (s, held) = claim_status(&claim_spec(), Some(4), &Err(errors), &before, t(0));
    assert_eq!(s.roles, before.roles);
    assert_eq!(held.len(), 2);
    assert_eq!(
        claim_condition(&s, "Allocated"),
        (
            "False".into(),
            "InvalidSpec".into(),
            "spec.roles[0].count: -1 is negative; spec.site: \"d c\" is not a site".into()
        )
    );
}

fn server(bound: bool) -> Server {
    let mut s: Server = serde_json::from_value(serde_json::json!({
        "apiVersion": "patchbay.dev/v1alpha1", "kind": "Server",
        "metadata": {"name": "s1", "generation": 3},
        "spec": {"bmc": {"address": "10.0.0.5", "credentialsSecretRef":
            {"name": "bmc", "namespace": "infra"}},
            "bootMac": "aa:bb:cc:dd:ee:01", "site": "dc1"}
    }))
    .unwrap();
    if bound {
        s.spec.claim_ref = Some(ServerClaimBinding {
            name: "web".into(),
            namespace: "team".into(),
            uid: "u".into(),
            role: "worker".into(),
            since: "2026-11-23T00:00:00Z".into(),
        });
    }
    s
}

fn facts(phase: ServerPhase, hold: Option<Hold>, ports: Vec<(Verdict, Option<&str>)>) -> HostFacts {
    use crate::api::server::CabledPortKind;
    use crate::decide::phases::{PortId, Source};
    HostFacts {
        step: PhaseStep { phase, hold },
        ports: ports
            .into_iter()
            .enumerate()
            .map(|(i, (v, cfg))| {
                (
                    NicTarget {
                        nic: format!("eth{i}"),
                        port: PortId {
                            kind: CabledPortKind::SwitchPort,
                            namespace: "infra".into(),
                            name: format!("tor1-p{i}"),
                        },
                        configuration: cfg.map(|c| ConfigurationRef {
                            name: c.into(),
                            namespace: Some("team".into()),
                        }),
                        source: if cfg.is_some() {
                            Source::Claim
                        } else {
                            Source::Clean
                        },
                    },
                    v,
                    Some(PortState::Active),
                )
            })
            .collect(),
        unmatched: vec![],
        refused: vec![],
        forbidden: Vec::new(),
        cabling: Vec::new(),
        miscabled: Vec::new(),
        host: None,
        gate: None,
    }
}

fn server_condition(s: &ServerStatus, type_: &str) -> (String, String, String) {
    let c = find_condition(&s.conditions, type_).unwrap_or_else(|| panic!("no {type_}"));
    (c.status.clone(), c.reason.clone(), c.message.clone())
}

#[test]
fn the_status_mirrors_the_binding_and_the_phase() {
    let now = jiff::Timestamp::UNIX_EPOCH;
    let f = facts(
        ServerPhase::Provisioned,
        None,
        vec![(Verdict::Settled, Some("web"))],
    );
    let st = server_status(&server(true), &ServerStatus::default(), &f, now);
    assert_eq!(st.phase, Some(ServerPhase::Provisioned));
    assert!(st.allocated);
    assert_eq!(st.role.as_deref(), Some("worker"));
    assert_eq!(st.claim.as_ref().map(|c| c.name.as_str()), Some("web"));
    assert_eq!(st.ports_ready.as_deref(), Some("1/1"));
    assert_eq!(st.ports[0].configuration.as_deref(), Some("team/web"));
    assert_eq!(st.ports[0].source, "claim");
    assert_eq!(server_condition(&st, "PortsReady").0, "True");
    assert_eq!(server_condition(&st, "Held").0, "False");
    assert_eq!(st.ports[0].message, None);
    // A NIC whose claim configuration was refused is still listed, with why.
    let mut f = facts(
        ServerPhase::Provisioned,
        None,
        vec![(
            Verdict::Refused("forbidden: VLAN 300 is not granted".into()),
            Some("web"),
        )],
    );
    f.forbidden = vec!["VLAN 300 is not granted".into()];
    let refused = server_status(&server(true), &ServerStatus::default(), &f, now);
    assert_eq!(refused.ports_ready.as_deref(), Some("0/1"));
    assert!(!refused.ports[0].ready);
    assert_eq!(
        refused.ports[0].message.as_deref(),
        Some("forbidden: VLAN 300 is not granted")
    );
    let (truth, reason, message) = server_condition(&refused, "PortsReady");
    assert_eq!((truth.as_str(), reason.as_str()), ("False", "Forbidden"));
    assert_eq!(
        message.matches("VLAN 300 is not granted").count(),
        1,
        "said once: {message}"
    );
    // Released: the claim stays named while the ports are on their way back…
    let f = facts(
        ServerPhase::Deprovisioning,
        None,
        vec![(Verdict::Pending("Configuring".into()), Some("pxe"))],
    );
    let leaving = server_status(&server(false), &st, &f, now);
    assert!(!leaving.allocated && leaving.role.is_none());
    assert_eq!(leaving.claim.as_ref().map(|c| c.name.as_str()), Some("web"));
    assert_eq!(leaving.ports_ready.as_deref(), Some("0/1"));
    // …and is dropped once they are back and the Server is Available.
    let f = facts(
        ServerPhase::Available,
        None,
        vec![(Verdict::Settled, Some("pxe"))],
    );
    let released = server_status(&server(false), &leaving, &f, now);
    assert_eq!(released.phase, Some(ServerPhase::Available));
    assert!(released.claim.is_none());
    assert_eq!(released.observed_generation, Some(3));
    // Nothing changed: the same status, so nothing is written.
    assert_eq!(server_status(&server(false), &released, &f, now), released);
}

#[test]
fn the_conditions_name_the_port_that_holds_the_host() {
    let now = jiff::Timestamp::UNIX_EPOCH;
    let f = facts(
        ServerPhase::Provisioning,
        Some(Hold::Ports),
        vec![
            (Verdict::Settled, Some("pxe")),
            (
                Verdict::Failing("Configuring, last error: % Invalid input".into()),
                Some("pxe"),
            ),
        ],
    );
    let st = server_status(&server(true), &ServerStatus::default(), &f, now);
    let (truth, reason, message) = server_condition(&st, "PortsReady");
    assert_eq!((truth.as_str(), reason.as_str()), ("False", "PortFailed"));
    assert_eq!(
        message,
        "SwitchPort infra/tor1-p1 (eth1): Configuring, last error: % Invalid input"
    );
    let (truth, reason, message) = server_condition(&st, "Held");
    assert_eq!((truth.as_str(), reason.as_str()), ("True", "PortFailed"));
    assert!(message.starts_with("Provisioning cannot move on: SwitchPort infra/tor1-p1"));
    assert_eq!(server_condition(&st, "PortInUse").0, "False");
    // A port somebody else configured: PortInUse names it and whose it is.
    let f = facts(
        ServerPhase::Available,
        Some(Hold::Ports),
        vec![(Verdict::InUse("driven by Server/other".into()), Some("pxe"))],
    );
    let st = server_status(&server(true), &st, &f, now);
    assert_eq!(
        server_condition(&st, "PortInUse"),
        (
            "True".into(),
            "PortInUse".into(),
            "left untouched: SwitchPort infra/tor1-p0 (eth0): driven by Server/other".into()
        )
    );
    assert_eq!(server_condition(&st, "PortsReady").1, "PortInUse");
    // A refused provisioning configuration: named first, its port not driven.
    let mut f = facts(
        ServerPhase::Available,
        Some(Hold::Ports),
        vec![(Verdict::Settled, Some("pxe"))],
    );
    f.refused = vec!["spec.nics[1].provisioningConfiguration: SwitchPortConfiguration pxe-lag sets linkAggregation (group 7)".into()];
    let st = server_status(&server(true), &st, &f, now);
    let (truth, reason, message) = server_condition(&st, "PortsReady");
    assert_eq!(
        (truth.as_str(), reason.as_str()),
        ("False", "ConfigurationRefused")
    );
    assert!(
        message.contains("spec.nics[1].provisioningConfiguration"),
        "{message}"
    );
    assert_eq!(server_condition(&st, "Held").1, "ConfigurationRefused");
    // Waiting for the installer.
    let f = facts(
        ServerPhase::Provisioning,
        Some(Hold::NotInstalled),
        vec![(Verdict::Settled, Some("pxe"))],
    );
    let st = server_status(&server(true), &st, &f, now);
    let (truth, reason, message) = server_condition(&st, "Held");
    assert_eq!(
        (truth.as_str(), reason.as_str()),
        ("True", "WaitingForInstaller")
    );
    assert!(
        message.contains("patchbay.dev/provisioned=true"),
        "{message}"
    );
    // A signal that is not exactly "true" is named, not taken.
    let mut typo = server(true);
    typo.metadata.annotations =
        Some([("patchbay.dev/provisioned".to_string(), "True".to_string())].into());
    let held = server_status(&typo, &st, &f, now);
    assert_eq!(
        server_condition(&held, "Held").2,
        "patchbay.dev/provisioned is \"True\", which is not the signal: the tenant's network \
         follows when it is \"true\""
    );
    // A Metal3 host: the gate is reported; an unknown state holds.
    let mut f = facts(
        ServerPhase::Provisioned,
        Some(Hold::UnknownState("detached".into())),
        vec![],
    );
    f.host = Some(LinkedHost {
        namespace: "metal3".into(),
        name: "bmh-1".into(),
        state: Some("detached".into()),
    });
    f.gate = Some(Gate::Foreign("metal3.io/capm3".into()));
    let st = server_status(&server(true), &st, &f, now);
    assert_eq!(server_condition(&st, "Held").1, "UnknownHostState");
    let (truth, reason, message) = server_condition(&st, "HostPaused");
    assert_eq!((truth.as_str(), reason.as_str()), ("True", "PausedByOther"));
    assert!(
        message.contains("metal3/bmh-1") && message.contains("capm3"),
        "{message}"
    );
    f.gate = None;
    let st = server_status(&server(true), &st, &f, now);
    assert!(find_condition(&st.conditions, "HostPaused").is_none());
}

fn held_server(name: &str, phase: ServerPhase, ports_ready: bool, cfg: &str) -> Server {
    let mut s: Server = serde_json::from_value(serde_json::json!({
        "apiVersion": "patchbay.dev/v1alpha1", "kind": "Server",
        "metadata": {"name": name, "generation": 2},
        "spec": {"bmc": {"address": "10.0.0.5", "credentialsSecretRef":
            {"name": "bmc", "namespace": "infra"}},
            "bootMac": "aa:bb:cc:dd:ee:01", "site": "dc1",
            "nics": [{"name": "eth0", "port": {"name": "tor1-p0", "namespace": "infra"}}]}
    }))
    .unwrap();
    let f = facts(
        phase,
        None,
        vec![(
            if ports_ready {
                Verdict::Settled
            } else {
                Verdict::Pending("Configuring".into())
            },
            Some(cfg),
        )],
    );
    s.spec.claim_ref = Some(ServerClaimBinding {
        name: "web".into(),
        namespace: "team".into(),
        uid: "u".into(),
        role: "worker".into(),
        since: "2026-11-23T00:00:00Z".into(),
    });
    s.status = Some(server_status(&s, &ServerStatus::default(), &f, t(0)));
    s
}

#[test]
fn a_claim_is_ready_when_every_server_is_provisioned_on_its_network() {
    let claim: ServerClaim = serde_json::from_value(serde_json::json!({
        "apiVersion": "patchbay.dev/v1alpha1", "kind": "ServerClaim",
        "metadata": {"name": "web", "namespace": "team", "generation": 1},
        "spec": {"site": "dc1", "roles": [{"name": "worker", "count": 2}],
                 "networkConfiguration": [{"configurationRef":
                    {"kind": "SwitchPortConfiguration", "name": "web"}}]}
    }))
    .unwrap();
    let mut status = ServerClaimStatus::default();
    set_condition(
        &mut status.conditions,
        "Allocated",
        true,
        "Allocated",
        String::new(),
        Some(1),
        t(0),
    );
    let held = vec![
        ("a".to_string(), "worker".to_string()),
        ("b".to_string(), "worker".to_string()),
    ];
    let check = |servers: Vec<Server>| {
        claim_ready(&claim, &status, &held, |n| {
            servers
                .iter()
                .find(|s| s.metadata.name.as_deref() == Some(n))
        })
    };
    let a = held_server("a", ServerPhase::Provisioned, true, "web");
    let (ready, reason, _) = check(vec![
        a.clone(),
        held_server("b", ServerPhase::Provisioned, true, "web"),
    ]);
    assert_eq!((ready, reason), (true, "ServersProvisioned"));
    let (ready, _, message) = check(vec![
        a.clone(),
        held_server("b", ServerPhase::Provisioning, true, "pxe"),
    ]);
    assert!(!ready);
    assert_eq!(message, "b: Provisioning");
    let (ready, _, message) = check(vec![
        a.clone(),
        held_server("b", ServerPhase::Provisioned, false, "web"),
    ]);
    assert!(!ready);
    assert_eq!(
        message,
        "b: PortsConfiguring (SwitchPort infra/tor1-p0 (eth0): Configuring)"
    );
    // A Server still on an older network of the claim (just edited) is not ready.
    let (ready, _, message) = check(vec![
        a.clone(),
        held_server("b", ServerPhase::Provisioned, true, "old"),
    ]);
    assert!(!ready);
    assert_eq!(message, "b: taking the claim's current network");
    let (ready, _, message) = check(vec![a]);
    assert!(!ready);
    assert_eq!(message, "b: not found");
    // Not allocated for this generation: not ready, whatever the Servers say.
    let (ready, reason, _) = claim_ready(&claim, &ServerClaimStatus::default(), &held, |_| None);
    assert_eq!((ready, reason), (false, "NotAllocated"));
}

#[test]
fn a_bad_spec_is_reported_by_field() {
    let mut s = server(false);
    s.spec.boot_mac = "nope".into();
    let f = facts(ServerPhase::Available, None, vec![]);
    let st = server_status(
        &s,
        &ServerStatus::default(),
        &f,
        jiff::Timestamp::UNIX_EPOCH,
    );
    assert_eq!(st.errors.len(), 1);
    assert!(st.errors[0].starts_with("spec.bootMac:"), "{:?}", st.errors);
    let valid = st.conditions.iter().find(|c| c.type_ == "Valid").unwrap();
    assert_eq!(valid.status, "False");
}

#[test]
fn a_linked_host_not_found_is_named() {
    let s = server(false);
    let f = facts(
        ServerPhase::Provisioned,
        Some(Hold::HostNotFound("metal3/host-7".into())),
        vec![],
    );
    let st = server_status(
        &s,
        &ServerStatus::default(),
        &f,
        jiff::Timestamp::UNIX_EPOCH,
    );
    let held = st.conditions.iter().find(|c| c.type_ == "Held").unwrap();
    assert_eq!(
        (held.status.as_str(), held.reason.as_str()),
        ("True", "HostNotFound")
    );
    assert_eq!(
        held.message,
        "the linked BareMetalHost metal3/host-7 is not found; holding Provisioned"
    );
}

#[test]
fn without_metal3_a_linked_server_holds_and_keeps_the_host_it_was_linked_to() {
    let s = server(false);
    let f = facts(
        ServerPhase::Provisioned,
        Some(Hold::Metal3Absent("metal3/host-7".into())),
        vec![],
    );
    let old = ServerStatus {
        bare_metal_host: Some(crate::api::server::LinkedHost {
            namespace: "metal3".into(),
            name: "host-7".into(),
            state: Some("provisioned".into()),
        }),
        ..Default::default()
    };
    let st = server_status(&s, &old, &f, jiff::Timestamp::UNIX_EPOCH);
    let held = st.conditions.iter().find(|c| c.type_ == "Held").unwrap();
    assert_eq!(held.reason, "Metal3NotInstalled");
    assert!(
        held.message.contains("metal3/host-7")
            && held
                .message
                .contains("holding Provisioned with its ports as they are"),
        "{}",
        held.message
    );
    // Linked by its boot MAC: remembered, so the next reconcile still holds.
    assert_eq!(st.bare_metal_host, old.bare_metal_host);
}

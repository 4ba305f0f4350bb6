use super::*;
use crate::api::claim::{NicHint, TypedConfigurationRef};
use crate::api::keys::PAUSED_BY_PATCHBAY;
use crate::api::server::CabledPortRef;
use ServerPhase::*;

fn installer(bound: bool, installed: bool) -> Driver<'static> {
    Driver::Installer { bound, installed }
}

fn metal3(state: Option<&'static str>) -> Driver<'static> {
    Driver::Metal3 {
        host: "metal3/host-7",
        state,
    }
}

/// (current, bound, installed, deleting, settled, phase, hold).
type InstallerRow = (
    Option<ServerPhase>,
    bool,
    bool,
    bool,
    bool,
    ServerPhase,
    Option<Hold>,
);

#[test]
fn the_installer_driven_phase_machine() {
    // (current, bound, installed, deleting, settled) -> (phase, hold)
    let table: &[InstallerRow] = &[
        // A new Server starts Available, whatever else holds.
        (None, false, false, false, false, Available, None),
        (None, true, true, false, true, Available, None),
        (None, true, false, true, false, Deleting, None),
        // Available: bound moves on only once the provisioning network is in place.
        (Some(Available), false, false, false, false, Available, None),
        (Some(Available), false, false, false, true, Available, None),
        (
            Some(Available),
            true,
            false,
            false,
            false,
            Available,
            Some(Hold::Ports),
        ),
        (
            Some(Available),
            true,
            false,
            false,
            true,
            Provisioning,
            None,
        ),
        // The installer's signal alone does not skip Provisioning.
        (Some(Available), true, true, false, true, Provisioning, None),
        // Provisioning: needs the signal and settled ports; a release goes at once.
        (
            Some(Provisioning),
            true,
            false,
            false,
            true,
            Provisioning,
            Some(Hold::NotInstalled),
        ),
        (
            Some(Provisioning),
            true,
            false,
            false,
            false,
            Provisioning,
            Some(Hold::Ports),
        ),
        (
            Some(Provisioning),
            true,
            true,
            false,
            false,
            Provisioning,
            Some(Hold::Ports),
        ),
        (
            Some(Provisioning),
            true,
            true,
            false,
            true,
            Provisioned,
            None,
        ),
        (
            Some(Provisioning),
            false,
            false,
            false,
            false,
            Deprovisioning,
            None,
        ),
        (
            Some(Provisioning),
            false,
            true,
            false,
            true,
            Deprovisioning,
            None,
        ),
        // Provisioned: stays while bound (ports settled or not); released at once.
        (
            Some(Provisioned),
            true,
            true,
            false,
            true,
            Provisioned,
            None,
        ),
        (
            Some(Provisioned),
            true,
            true,
            false,
            false,
            Provisioned,
            None,
        ),
        (
            Some(Provisioned),
            false,
            true,
            false,
            false,
            Deprovisioning,
            None,
        ),
        (
            Some(Provisioned),
            false,
            false,
            false,
            true,
            Deprovisioning,
            None,
        ),
        // Deprovisioning: back to Available once the ports are back, bound or not.
        (
            Some(Deprovisioning),
            false,
            false,
            false,
            false,
            Deprovisioning,
            Some(Hold::Ports),
        ),
        (
            Some(Deprovisioning),
            false,
            false,
            false,
            true,
            Available,
            None,
        ),
        (
            Some(Deprovisioning),
            true,
            false,
            false,
            false,
            Deprovisioning,
            Some(Hold::Ports),
        ),
        (
            Some(Deprovisioning),
            true,
            false,
            false,
            true,
            Available,
            None,
        ),
        // Deletion goes at once from every phase.
        (Some(Available), false, false, true, false, Deleting, None),
        (Some(Provisioning), true, false, true, false, Deleting, None),
        (Some(Provisioned), true, true, true, false, Deleting, None),
        (
            Some(Deprovisioning),
            false,
            false,
            true,
            false,
            Deleting,
            None,
        ),
        (Some(Deleting), false, false, true, false, Deleting, None),
    ];
    for (current, bound, installed, deleting, settled, phase, hold) in table {
        let step = next_phase(*current, installer(*bound, *installed), *deleting, *settled);
        assert_eq!(
            step,
            PhaseStep {
                phase: *phase,
                hold: hold.clone()
            },
            "{current:?} bound={bound} installed={installed} deleting={deleting} settled={settled}"
        );
    }
}

#[test]
fn every_metal3_state_has_a_phase_and_an_unknown_one_holds() {
    let table = [
        ("", Available),
        ("unmanaged", Available),
        ("registering", Available),
        ("match profile", Available),
        ("inspecting", Available),
        ("preparing", Available),
        ("ready", Available),
        ("available", Available),
        ("provisioning", Provisioning),
        ("provisioned", Provisioned),
        ("externally provisioned", Provisioned),
        ("deprovisioning", Deprovisioning),
        ("powering off before delete", Deleting),
        ("deleting", Deleting),
    ];
    for (state, phase) in table {
        assert_eq!(metal3_phase(state), Some(phase), "{state:?}");
    }
    assert_eq!(metal3_phase("detached"), None);
    assert_eq!(
        metal3_phase("Provisioned"),
        None,
        "states are case-sensitive"
    );
    // No state yet: a new host starts Available; one past it holds where it is.
    let step = next_phase(Some(Available), metal3(Some("")), false, true);
    assert_eq!((step.phase, step.hold), (Available, None));
    for current in [Provisioning, Provisioned, Deprovisioning] {
        let step = next_phase(Some(current), metal3(Some("")), false, true);
        assert_eq!(step.phase, current);
        assert_eq!(
            step.hold,
            Some(Hold::StateNotReported("metal3/host-7".into()))
        );
    }
    let step = next_phase(Some(Provisioned), metal3(Some("detached")), false, true);
    assert_eq!(step.phase, Provisioned);
    assert_eq!(step.hold, Some(Hold::UnknownState("detached".into())));
    let step = next_phase(Some(Provisioning), metal3(None), false, true);
    assert_eq!(
        step,
        PhaseStep {
            phase: Provisioning,
            hold: Some(Hold::HostNotFound("metal3/host-7".into()))
        }
    );
    // Metal3 not installed (removed under a running operator): every phase stays,
    // settled or not, deleting aside — a CRD going away moves no port.
    for phase in [Available, Provisioning, Provisioned, Deprovisioning] {
        for settled in [false, true] {
            let step = next_phase(
                Some(phase),
                Driver::Metal3Absent {
                    host: "metal3/host-7",
                },
                false,
                settled,
            );
            assert_eq!(
                step,
                PhaseStep {
                    phase,
                    hold: Some(Hold::Metal3Absent("metal3/host-7".into()))
                },
                "{phase:?} settled={settled}"
            );
        }
    }
}

#[test]
fn a_metal3_host_is_followed_with_the_same_gates() {
    // (current, state, settled) -> (phase, hold)
    let table: &[(ServerPhase, &str, bool, ServerPhase, Option<Hold>)] = &[
        (Available, "inspecting", false, Available, None),
        (
            Available,
            "provisioning",
            false,
            Available,
            Some(Hold::Ports),
        ),
        (Available, "provisioning", true, Provisioning, None),
        (
            Provisioning,
            "provisioned",
            false,
            Provisioning,
            Some(Hold::Ports),
        ),
        (Provisioning, "provisioned", true, Provisioned, None),
        (Available, "externally provisioned", true, Provisioned, None),
        (Provisioned, "provisioned", false, Provisioned, None),
        (Provisioned, "deprovisioning", false, Deprovisioning, None),
        (Provisioned, "available", false, Available, None),
        (
            Deprovisioning,
            "available",
            false,
            Deprovisioning,
            Some(Hold::Ports),
        ),
        (Deprovisioning, "available", true, Available, None),
        (Provisioning, "deprovisioning", false, Deprovisioning, None),
        (Provisioned, "deleting", false, Deleting, None),
        (
            Available,
            "powering off before delete",
            false,
            Deleting,
            None,
        ),
        (Deleting, "registering", false, Deleting, Some(Hold::Ports)),
        (Deleting, "registering", true, Available, None),
    ];
    for (current, state, settled, phase, hold) in table {
        let step = next_phase(Some(*current), metal3(Some(state)), false, *settled);
        assert_eq!(
            step,
            PhaseStep {
                phase: *phase,
                hold: hold.clone()
            },
            "{current:?} state={state:?} settled={settled}"
        );
    }
}

fn cfg(ns: &str, name: &str) -> ConfigurationRef {
    ConfigurationRef {
        name: name.into(),
        namespace: Some(ns.into()),
    }
}

fn nic(
    name: &str,
    kind: Option<CabledPortKind>,
    prov: Option<&str>,
    own: Option<&str>,
) -> ServerNic {
    ServerNic {
        name: name.into(),
        mac: None,
        port: kind.map(|k| CabledPortRef {
            kind: Some(k),
            name: format!("port-{name}"),
            namespace: "infra".into(),
        }),
        provisioning_configuration: prov.map(|n| ConfigurationRef {
            name: n.into(),
            namespace: None,
        }),
        configuration: own.map(|n| ConfigurationRef {
            name: n.into(),
            namespace: None,
        }),
    }
}

fn entry(kind: ConfigurationKind, name: &str, hint: Option<&str>) -> NetworkConfiguration {
    NetworkConfiguration {
        configuration_ref: TypedConfigurationRef {
            kind,
            name: name.into(),
            namespace: None,
        },
        nic_hint: NicHint {
            name: hint.map(Into::into),
            smart_nic: kind == ConfigurationKind::SmartNicConfiguration,
        },
    }
}

const SW: Option<CabledPortKind> = Some(CabledPortKind::SwitchPort);
const SN: Option<CabledPortKind> = Some(CabledPortKind::SmartNicPort);
const SPC: ConfigurationKind = ConfigurationKind::SwitchPortConfiguration;
const SNC: ConfigurationKind = ConfigurationKind::SmartNicConfiguration;

/// (nic, configuration as `ns/name` or "-", source) per driven port.
fn table_of(targets: &[NicTarget]) -> Vec<(String, String, &'static str)> {
    targets
        .iter()
        .map(|t| {
            (
                t.nic.clone(),
                t.configuration.as_ref().map_or("-".into(), |c| {
                    format!("{}/{}", c.namespace.as_deref().unwrap_or("?"), c.name)
                }),
                t.source.as_str(),
            )
        })
        .collect()
}

fn row(n: &str, c: &str, s: &'static str) -> (String, String, &'static str) {
    (n.into(), c.into(), s)
}

#[test]
fn what_each_port_carries_in_every_phase() {
    let nics = vec![
        nic("eth0", SW, Some("pxe"), None),
        nic("eth1", SW, None, Some("infra-default")),
        nic("eth2", SW, Some("pxe"), Some("infra-default")),
        nic("eth3", SN, None, None),
        nic("ipmi", None, Some("pxe"), Some("x")),
    ];
    let e0 = entry(SPC, "tenant-web", Some("eth2"));
    let e1 = entry(SNC, "tenant-snic", None);
    let e2 = entry(SPC, "tenant-storage", None);
    let entries = [&e0, &e1, &e2];
    let net = ClaimNetwork {
        entries: &entries,
        namespace: "team-a",
    };
    for phase in [Available, Provisioning, Deprovisioning] {
        for network in [None, Some(net)] {
            let (t, errors) = port_targets(phase, &nics, network);
            assert!(errors.is_empty());
            assert_eq!(
                table_of(&t),
                vec![
                    row("eth0", "infra/pxe", "provisioning"),
                    row("eth1", "-", "clean"),
                    row("eth2", "infra/pxe", "provisioning"),
                    row("eth3", "-", "clean"),
                ],
                "{phase:?}, the claim's network never before Provisioned"
            );
        }
    }
    // Provisioned: the named hint first (eth2), then the unnamed ones in NIC order
    // (the first SwitchPort NIC free is eth0; the SmartNIC entry takes eth3); the
    // claim wins over eth2's own default; eth1 keeps the infra team's default.
    let (t, errors) = port_targets(Provisioned, &nics, Some(net));
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(
        table_of(&t),
        vec![
            row("eth0", "team-a/tenant-storage", "claim"),
            row("eth1", "infra/infra-default", "nic"),
            row("eth2", "team-a/tenant-web", "claim"),
            row("eth3", "team-a/tenant-snic", "claim"),
        ]
    );
    // Provisioned without a claim: the NICs' own defaults, else clean.
    let (t, _) = port_targets(Provisioned, &nics, None);
    assert_eq!(
        table_of(&t),
        vec![
            row("eth0", "-", "clean"),
            row("eth1", "infra/infra-default", "nic"),
            row("eth2", "infra/infra-default", "nic"),
            row("eth3", "-", "clean"),
        ]
    );
    // Deleting: everything clean.
    let (t, _) = port_targets(Deleting, &nics, Some(net));
    assert!(
        t.iter()
            .all(|t| t.configuration.is_none() && t.source == Source::Clean)
    );
    assert_eq!(t.len(), 4, "a NIC without a port is never driven");
}

#[test]
fn a_provisioning_configuration_with_a_link_aggregation_group_is_refused_and_its_port_left_alone() {
    // pxe-lag sets group 7; "pxe" and the tenant's "bond" none / group 9. A
    // SmartNicConfiguration of the same name as a grouped one is not a
    // SwitchPortConfiguration: never refused.
    let nics = vec![
        nic("eth0", SW, Some("pxe-lag"), Some("bond")),
        nic("eth1", SW, Some("pxe"), Some("bond")),
        nic("eth2", SN, Some("pxe-lag"), None),
    ];
    let group_of = |c: &ConfigurationRef| match c.name.as_str() {
        "pxe-lag" => Some(7),
        "bond" => Some(9),
        _ => None,
    };
    let field_of = |name: &str| {
        let i = nics.iter().position(|n| n.name == name).unwrap();
        format!("spec.nics[{i}]")
    };
    for phase in [Available, Provisioning, Deprovisioning] {
        let (targets, _) = port_targets(phase, &nics, None);
        let (kept, refused) = refuse_grouped_provisioning(targets, group_of, field_of);
        assert_eq!(
            table_of(&kept),
            vec![
                row("eth1", "infra/pxe", "provisioning"),
                row("eth2", "infra/pxe-lag", "provisioning"),
            ],
            "{phase:?}: eth0's port is not driven at all"
        );
        // The refused target is kept, with why, to be listed on the Server.
        assert_eq!(
            refused
                .iter()
                .map(|(t, _)| t.nic.as_str())
                .collect::<Vec<_>>(),
            ["eth0"]
        );
        let refused: Vec<String> = refused.into_iter().map(|(_, why)| why).collect();
        assert_eq!(
            refused,
            vec![
                "spec.nics[0].provisioningConfiguration: SwitchPortConfiguration pxe-lag sets \
                 linkAggregation (group 7); a provisioning configuration carries no \
                 link-aggregation group (PXE boots over the individual links): the group \
                 belongs in the tenant's configuration"
            ],
            "{phase:?}"
        );
    }
    // The tenant's network may carry a group; a clean port carries none.
    for phase in [Provisioned, Deleting] {
        let (targets, _) = port_targets(phase, &nics, None);
        let before = table_of(&targets);
        let (kept, refused) = refuse_grouped_provisioning(targets, group_of, field_of);
        assert_eq!(table_of(&kept), before, "{phase:?}");
        assert!(refused.is_empty(), "{phase:?}");
    }
}

#[test]
fn claim_entries_that_no_nic_can_take_are_named_and_the_rest_still_apply() {
    let nics = vec![
        nic("eth0", SW, None, None),
        nic("eth1", SW, None, Some("dflt")),
    ];
    let e_sn = entry(SNC, "snic", None);
    let e_named = entry(SPC, "web", Some("eth9"));
    let e_ok = entry(SPC, "storage", None);
    let e_kind = {
        // A SwitchPortConfiguration hinted to a NIC cabled to a SmartNicPort.
        let mut e = entry(SPC, "wrong", Some("eth0"));
        e.nic_hint.smart_nic = true;
        e
    };
    let entries = [&e_sn, &e_named, &e_ok, &e_kind];
    let (t, errors) = port_targets(
        Provisioned,
        &nics,
        Some(ClaimNetwork {
            entries: &entries,
            namespace: "team-a",
        }),
    );
    assert_eq!(errors.len(), 3, "{errors:?}");
    assert!(
        errors[0].contains("SmartNicConfiguration snic"),
        "{errors:?}"
    );
    assert!(errors[1].contains("NIC eth9"), "{errors:?}");
    assert!(errors[2].contains("wrong"), "{errors:?}");
    assert_eq!(
        table_of(&t),
        vec![
            row("eth0", "team-a/storage", "claim"),
            row("eth1", "infra/dflt", "nic"),
        ]
    );
    // Two entries for one named NIC: the second finds it taken.
    let a = entry(SPC, "a", Some("eth0"));
    let b = entry(SPC, "b", Some("eth0"));
    let entries = [&a, &b];
    let (t, errors) = port_targets(
        Provisioned,
        &nics,
        Some(ClaimNetwork {
            entries: &entries,
            namespace: "team-a",
        }),
    );
    assert_eq!(errors.len(), 1);
    assert_eq!(t[0].configuration, Some(cfg("team-a", "a")));
}

#[test]
fn references_keep_an_explicit_namespace() {
    let mut n = nic("eth0", SW, Some("pxe"), None);
    n.provisioning_configuration.as_mut().unwrap().namespace = Some("shared".into());
    let (t, _) = port_targets(Available, &[n], None);
    assert_eq!(t[0].configuration, Some(cfg("shared", "pxe")));
    let mut e = entry(SPC, "web", None);
    e.configuration_ref.namespace = Some("other".into());
    let entries = [&e];
    let (t, _) = port_targets(
        Provisioned,
        &[nic("eth0", SW, None, None)],
        Some(ClaimNetwork {
            entries: &entries,
            namespace: "team-a",
        }),
    );
    assert_eq!(t[0].configuration, Some(cfg("other", "web")));
}

const ME: &str = "Server/srv-1";

fn obs(
    configuration: Option<ConfigurationRef>,
    host: Option<&str>,
    state: Option<PortState>,
    applied: Option<ConfigurationRef>,
) -> CachedPort {
    CachedPort {
        configuration,
        host: host.map(Into::into),
        chained_from: None,
        state,
        applied,
        seen: true,
        last_error: None,
        not_ready: None,
    }
}

/// (target, observed, write, verdict).
type PortRow<'a> = (
    Option<&'a ConfigurationRef>,
    Option<CachedPort>,
    Option<PortWrite>,
    Verdict,
);

#[test]
fn how_a_port_is_driven_and_judged() {
    use PortState::*;
    let pxe = cfg("infra", "pxe");
    let web = cfg("team-a", "web");
    let set = |c: &ConfigurationRef| Some(PortWrite::Set(Some(c.clone())));
    let pending = |s: &str| Verdict::Pending(s.into());
    // (target, observed, write, verdict)
    let table: Vec<PortRow<'_>> = vec![
        // Missing port object.
        (Some(&pxe), None, None, Verdict::Missing),
        // A free port: marked and set.
        (
            Some(&pxe),
            Some(obs(None, None, Some(Idle), None)),
            set(&pxe),
            pending("being set"),
        ),
        // Already carrying exactly the target, unmarked (set by the infra team): adopted.
        (
            Some(&pxe),
            Some(obs(
                Some(pxe.clone()),
                None,
                Some(Active),
                Some(pxe.clone()),
            )),
            set(&pxe),
            pending("being set"),
        ),
        // Ours, on its way, then settled.
        (
            Some(&pxe),
            Some(obs(Some(pxe.clone()), Some(ME), Some(Configuring), None)),
            None,
            pending("Configuring"),
        ),
        (
            Some(&pxe),
            Some(obs(
                Some(pxe.clone()),
                Some(ME),
                Some(Active),
                Some(pxe.clone()),
            )),
            None,
            Verdict::Settled,
        ),
        // Ours, retargeted (phase change).
        (
            Some(&web),
            Some(obs(
                Some(pxe.clone()),
                Some(ME),
                Some(Active),
                Some(pxe.clone()),
            )),
            set(&web),
            pending("being set"),
        ),
        // Ours, Active but on the old configuration still (controller not caught up).
        (
            Some(&web),
            Some(obs(
                Some(web.clone()),
                Some(ME),
                Some(Active),
                Some(pxe.clone()),
            )),
            None,
            pending("Active"),
        ),
        // Somebody else's configuration, or another host's mark: never written.
        (
            Some(&pxe),
            Some(obs(
                Some(web.clone()),
                None,
                Some(Active),
                Some(web.clone()),
            )),
            None,
            Verdict::InUse("carries web, set by someone else".into()),
        ),
        (
            None,
            Some(obs(
                Some(web.clone()),
                None,
                Some(Active),
                Some(web.clone()),
            )),
            None,
            Verdict::InUse("carries web, set by someone else".into()),
        ),
        (
            Some(&pxe),
            Some(obs(
                Some(pxe.clone()),
                Some("Server/srv-2"),
                Some(Active),
                Some(pxe.clone()),
            )),
            None,
            Verdict::InUse("driven by Server/srv-2".into()),
        ),
        // Clean wanted: ours with a configuration is cleared, then unmarked once Idle.
        (
            None,
            Some(obs(
                Some(pxe.clone()),
                Some(ME),
                Some(Active),
                Some(pxe.clone()),
            )),
            Some(PortWrite::Set(None)),
            pending("being set"),
        ),
        (
            None,
            Some(obs(None, Some(ME), Some(Cleaning), Some(pxe.clone()))),
            None,
            pending("Cleaning"),
        ),
        (
            None,
            Some(obs(None, Some(ME), Some(Idle), None)),
            Some(PortWrite::Unmark),
            Verdict::Settled,
        ),
        // Clean wanted, a free clean port: nothing to write, settled.
        (
            None,
            Some(obs(None, None, Some(Idle), None)),
            None,
            Verdict::Settled,
        ),
        (
            None,
            Some(obs(None, None, None, None)),
            None,
            pending("not yet seen by its controller"),
        ),
    ];
    for (i, (target, observed, write, verdict)) in table.into_iter().enumerate() {
        assert_eq!(
            port_step(target, observed.as_ref(), ME),
            (write, verdict),
            "row {i}"
        );
    }
    // A failing port says its last error; one not yet caught up is never settled.
    let mut o = obs(Some(pxe.clone()), Some(ME), Some(Configuring), None);
    o.last_error = Some("device said % Invalid input".into());
    assert_eq!(
        port_step(Some(&pxe), Some(&o), ME).1,
        Verdict::Failing("Configuring, last error: device said % Invalid input".into())
    );
    let mut o = obs(Some(pxe.clone()), Some(ME), Some(Active), Some(pxe.clone()));
    o.seen = false;
    assert!(!port_step(Some(&pxe), Some(&o), ME).1.settled());
    // Active on target, but its switch does not answer: failing, not settled.
    let mut o = obs(Some(pxe.clone()), Some(ME), Some(Active), Some(pxe.clone()));
    o.not_ready = Some("Unreachable: the switch does not answer".into());
    assert_eq!(
        port_step(Some(&pxe), Some(&o), ME).1,
        Verdict::Failing("Active, Unreachable: the switch does not answer".into())
    );
    let mut o = obs(None, None, Some(Idle), None);
    o.chained_from = Some("infra/snp-1".into());
    assert_eq!(
        port_step(Some(&pxe), Some(&o), ME),
        (
            None,
            Verdict::InUse("chained from SmartNicPort infra/snp-1".into())
        )
    );
}

#[test]
fn the_metal3_gate_holds_only_patchbay_s_pause() {
    let table: &[(Option<ServerPhase>, bool, Option<&str>, Gate)] = &[
        (Some(Available), false, None, Gate::Hold),
        (
            Some(Available),
            false,
            Some(PAUSED_BY_PATCHBAY),
            Gate::Holding,
        ),
        (
            Some(Available),
            true,
            Some(PAUSED_BY_PATCHBAY),
            Gate::Release,
        ),
        (Some(Available), true, None, Gate::Open),
        (Some(Provisioning), false, None, Gate::Hold),
        (Some(Deprovisioning), false, None, Gate::Hold),
        (
            Some(Deprovisioning),
            true,
            Some(PAUSED_BY_PATCHBAY),
            Gate::Release,
        ),
        // The tenant's network and deletion never hold the host.
        (Some(Provisioned), false, None, Gate::Open),
        (
            Some(Provisioned),
            false,
            Some(PAUSED_BY_PATCHBAY),
            Gate::Release,
        ),
        (
            Some(Deleting),
            false,
            Some(PAUSED_BY_PATCHBAY),
            Gate::Release,
        ),
        // Unknown state: patchbay does not hold what it does not understand.
        (None, false, None, Gate::Open),
        // Somebody else's pause is left alone, whatever patchbay wants.
        (
            Some(Available),
            false,
            Some("metal3.io/capm3"),
            Gate::Foreign("metal3.io/capm3".into()),
        ),
        (
            Some(Available),
            true,
            Some(""),
            Gate::Foreign(String::new()),
        ),
    ];
    for (goal, settled, paused, gate) in table {
        assert_eq!(
            metal3_gate(*goal, *settled, *paused),
            *gate,
            "{goal:?} settled={settled} paused={paused:?}"
        );
    }
    assert_eq!(metal3_goal(Some("inspecting")), Some(Available));
    assert_eq!(metal3_goal(None), None);
}

#[test]
fn a_baremetalhost_s_ports_become_nics_and_a_bad_entry_is_named() {
    let host: BareMetalHost = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "bmh-1", "namespace": "metal3"},
        "spec": {"ports": [
            {"name": "eth0", "mac": "aa:bb:cc:dd:ee:01",
             "port": {"name": "tor1-p1", "kind": "SwitchPort", "namespace": "infra"},
             "provisioningConfiguration": {"name": "pxe", "kind": "SwitchportConfiguration"},
             "configuration": {"name": "web", "namespace": "team"}},
            {"name": "eth1", "port": {"name": "snic-1", "kind": "SmartNicPort"}},
            {"name": "eth2"},
            {"name": "eth3", "port": {"name": "x", "kind": "Router"}}
        ]}
    }))
    .unwrap();
    let (nics, errors) = bare_metal_host_nics(&host);
    assert_eq!(nics.len(), 2);
    let (targets, _) = port_targets(Available, &nics, None);
    assert_eq!(
        table_of(&targets),
        vec![
            row("eth0", "metal3/pxe", "provisioning"),
            row("eth1", "-", "clean")
        ]
    );
    assert_eq!(
        targets[1].port.namespace, "metal3",
        "the host's namespace by default"
    );
    assert_eq!(targets[1].port.kind, CabledPortKind::SmartNicPort);
    let (targets, _) = port_targets(Provisioned, &nics, None);
    assert_eq!(targets[0].configuration, Some(cfg("team", "web")));
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert!(
        errors[0].starts_with("spec.ports[2]: missing field `port`"),
        "{errors:?}"
    );
    assert!(
        errors[1].starts_with("spec.ports[3].port.kind: \"Router\""),
        "{errors:?}"
    );
    assert_eq!(bare_metal_host_mark(&host), "BareMetalHost/metal3/bmh-1");
    let none = BareMetalHost::default();
    assert_eq!(bare_metal_host_nics(&none), (vec![], vec![]));
}

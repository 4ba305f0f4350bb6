//! The statuses of the host side: a ServerClaim's from its allocation plan and its
//! Servers' phases, a Server's from its binding, and the host conditions (cabling,
//! ports, phase) a Server or BareMetalHost shows. Pure, like the rest of
//! [`crate::decide::status`].

use super::*;

/// A ServerClaim's status after an allocation step: the Servers per role (kept as
/// they were when the spec is invalid), `allocation` (`held/requested`) and the
/// conditions `Allocated` (`Allocated`, `InsufficientServers` with what is missing
/// and which bound Servers wait for a replacement, or `InvalidSpec` with every field
/// and reason) and `Maintenance` (`Ready` is [`claim_ready`]'s). Returns the status
/// and the held Servers as (name, role).
pub fn claim_status(
    spec: &ServerClaimSpec,
    generation: Option<i64>,
    outcome: &Result<ClaimPlan, ValidationErrors>,
    old: &ServerClaimStatus,
    now: jiff::Timestamp,
) -> (ServerClaimStatus, Vec<(String, String)>) {
    let mut status = old.clone();
    status.observed_generation = generation;
    let requested: i64 = spec.roles.iter().map(|r| r.count.max(0)).sum();
    match outcome {
        Err(errors) => set_condition(
            &mut status.conditions,
            "Allocated",
            false,
            "InvalidSpec",
            errors.to_string(),
            generation,
            now,
        ),
        Ok(plan) => {
            status.roles = spec
                .roles
                .iter()
                .map(|r| RoleAllocation {
                    name: r.name.clone(),
                    requested: r.count,
                    servers: plan.roles.get(&r.name).cloned().unwrap_or_default(),
                })
                .collect();
            let held: usize = status.roles.iter().map(|r| r.servers.len()).sum();
            let (reason, message) = if plan.served {
                ("Allocated", format!("{held}/{requested} servers allocated"))
            } else {
                let mut lines = plan.missing.clone();
                if !plan.misfits.is_empty() {
                    lines.push(format!(
                        "no longer fit their role, kept until a replacement can be \
                         allocated: {}",
                        plan.misfits.join(", ")
                    ));
                }
                ("InsufficientServers", lines.join("; "))
            };
            set_condition(
                &mut status.conditions,
                "Allocated",
                plan.served,
                reason,
                message,
                generation,
                now,
            );
            let (reason, message) = if plan.in_maintenance.is_empty() {
                ("NoneInMaintenance", String::new())
            } else {
                (
                    "ServersInMaintenance",
                    format!("in maintenance: {}", plan.in_maintenance.join(", ")),
                )
            };
            set_condition(
                &mut status.conditions,
                "Maintenance",
                !plan.in_maintenance.is_empty(),
                reason,
                message,
                generation,
                now,
            );
        }
    }
    let held: Vec<(String, String)> = status
        .roles
        .iter()
        .flat_map(|r| r.servers.iter().map(|n| (n.clone(), r.name.clone())))
        .collect();
    status.allocation = Some(format!("{}/{requested}", held.len()));
    (status, held)
}

/// A claim's `Ready` condition: True when it is fully allocated and every Server it
/// holds is `Provisioned` with every port Active on the claim's current
/// configuration (the Server's status lists, per NIC, exactly what the claim's
/// `networkConfiguration` gives it now). Otherwise False, naming each Server that is
/// not and why. `server` looks a Server up by name.
pub fn claim_ready<'a>(
    claim: &ServerClaim,
    status: &ServerClaimStatus,
    held: &[(String, String)],
    server: impl Fn(&str) -> Option<&'a Server>,
) -> (bool, &'static str, String) {
    let allocated = find_condition(&status.conditions, "Allocated")
        .is_some_and(|c| c.status == "True" && c.observed_generation == claim.metadata.generation);
    if !allocated {
        return (
            false,
            "NotAllocated",
            "waiting for the allocation to complete".into(),
        );
    }
    let ns = claim.metadata.namespace.as_deref().unwrap_or_default();
    let name = claim.metadata.name.as_deref().unwrap_or_default();
    let mut waiting = Vec::new();
    for (n, role) in held {
        let Some(s) = server(n) else {
            waiting.push(format!("{n}: not found"));
            continue;
        };
        let st = s.status.clone().unwrap_or_default();
        let cond = |t: &str| find_condition(&st.conditions, t).cloned();
        let phase = st
            .phase
            .map(|p| p.to_string())
            .unwrap_or_else(|| "new".into());
        let ours = st
            .claim
            .as_ref()
            .is_some_and(|c| c.namespace == ns && c.name == name);
        if st.phase != Some(ServerPhase::Provisioned) || !ours {
            let why = cond("Held")
                .filter(|c| c.status == "True")
                .map(|c| format!(" ({}: {})", c.reason, c.message))
                .unwrap_or_default();
            waiting.push(format!("{n}: {phase}{why}"));
            continue;
        }
        let entries = claim_entries(&claim.spec, role);
        let (targets, _) = port_targets(
            ServerPhase::Provisioned,
            &s.spec.nics,
            Some(ClaimNetwork {
                entries: &entries,
                namespace: ns,
            }),
        );
        let want: Vec<(String, Option<String>)> = targets
            .iter()
            .map(|t| (t.nic.clone(), t.configuration.as_ref().map(reference_text)))
            .collect();
        let have: Vec<(String, Option<String>)> = st
            .ports
            .iter()
            .filter(|p| want.iter().any(|(nic, _)| *nic == p.nic))
            .map(|p| (p.nic.clone(), p.configuration.clone()))
            .collect();
        let current = st.observed_generation == s.metadata.generation && have == want;
        let ports = cond("PortsReady");
        match ports {
            _ if !current => waiting.push(format!("{n}: taking the claim's current network")),
            Some(c) if c.status == "True" => {}
            Some(c) => waiting.push(format!("{n}: {} ({})", c.reason, c.message)),
            None => waiting.push(format!("{n}: ports not reported yet")),
        }
    }
    if waiting.is_empty() {
        (
            true,
            "ServersProvisioned",
            format!(
                "{} server(s) provisioned, every port on the claim's network",
                held.len()
            ),
        )
    } else {
        (false, "ServersNotReady", waiting.join("; "))
    }
}

/// `namespace/name`, as `status.ports[].configuration` shows a reference.
fn reference_text(r: &crate::api::ConfigurationRef) -> String {
    format!("{}/{}", r.namespace.as_deref().unwrap_or_default(), r.name)
}

/// What the host controller found for a Server (or a BareMetalHost carrying its
/// own ports): the phase step, each driven port with its target and verdict, the
/// claim entries no NIC can take, the linked BareMetalHost and its gate.
#[derive(Debug, Clone, PartialEq)]
pub struct HostFacts {
    /// The phase step taken.
    pub step: PhaseStep,
    /// The ports of the phase stepped to: target, verdict, the port's state.
    pub ports: Vec<(NicTarget, Verdict, Option<PortState>)>,
    /// Claim entries no NIC can take.
    pub unmatched: Vec<String>,
    /// Targets refused, their ports left as they are (a provisioning configuration
    /// with a link-aggregation group), one message each naming the NIC's field.
    pub refused: Vec<String>,
    /// Targets the tenancy check refused (a VLAN not granted to the claim's
    /// namespace, a configuration of another namespace), their ports left as they
    /// are, one message each.
    pub forbidden: Vec<String>,
    /// Each NIC's cabling, checked against what its port sees
    /// ([`crate::decide::cabling`]).
    pub cabling: Vec<crate::decide::cabling::NicCabling>,
    /// Ports parked for their cabling, one message each (they hold the phase).
    pub miscabled: Vec<String>,
    /// The linked BareMetalHost, if any.
    pub host: Option<LinkedHost>,
    /// The Metal3 gate, when a BareMetalHost is linked.
    pub gate: Option<Gate>,
}

impl HostFacts {
    /// True when every port carries what the phase wants, every claim entry has a
    /// NIC and nothing is refused.
    pub fn settled(&self) -> bool {
        self.unmatched.is_empty()
            && self.refused.is_empty()
            && self.forbidden.is_empty()
            && self.miscabled.is_empty()
            && self.ports.iter().all(|(_, v, _)| v.settled())
    }

    /// Each port not settled, `kind ns/name (nic): why`.
    fn unsettled(&self) -> Vec<String> {
        self.ports
            .iter()
            .filter_map(|(t, v, _)| {
                let why = match v {
                    // Said below, with the refusals.
                    Verdict::Settled | Verdict::Refused(_) => return None,
                    Verdict::Pending(s) | Verdict::Failing(s) | Verdict::InUse(s) => s.clone(),
                    Verdict::Missing => "not found".into(),
                };
                Some(format!("{} ({}): {why}", t.port, t.nic))
            })
            .chain(self.unmatched.iter().cloned())
            .chain(self.refused.iter().cloned())
            .chain(self.forbidden.iter().cloned())
            .chain(self.miscabled.iter().cloned())
            .collect()
    }

    /// `PortsReady`'s reason: the worst verdict.
    fn ports_reason(&self) -> &'static str {
        let has = |f: fn(&Verdict) -> bool| self.ports.iter().any(|(_, v, _)| f(v));
        if !self.miscabled.is_empty() {
            "CablingMismatch"
        } else if !self.forbidden.is_empty() {
            "Forbidden"
        } else if !self.refused.is_empty() {
            "ConfigurationRefused"
        } else if has(|v| matches!(v, Verdict::InUse(_))) {
            "PortInUse"
        } else if has(|v| matches!(v, Verdict::Failing(_))) {
            "PortFailed"
        } else if has(|v| matches!(v, Verdict::Missing)) {
            "PortNotFound"
        } else if !self.unmatched.is_empty() {
            "NicHintUnmatched"
        } else {
            "PortsConfiguring"
        }
    }
}

/// The status of a host's ports and phase (shared by Servers and the annotations
/// of BareMetalHosts that carry their own ports): `PortsReady`, `Held` (naming what
/// holds the phase back), `PortInUse`, `HostPaused`.
pub fn host_conditions(
    conditions: &mut Vec<Condition>,
    facts: &HostFacts,
    generation: Option<i64>,
    now: jiff::Timestamp,
) {
    let mut set = |type_: &str, truth: Truth, reason: &str, message: String| {
        set_condition(conditions, type_, truth, reason, message, generation, now)
    };
    let unsettled = facts.unsettled();
    if facts.settled() {
        set("PortsReady", Truth::True, "PortsReady", String::new());
    } else {
        set(
            "PortsReady",
            Truth::False,
            facts.ports_reason(),
            unsettled.join("; "),
        );
    }
    let phase = facts.step.phase;
    match &facts.step.hold {
        None => set("Held", Truth::False, "NotHeld", String::new()),
        Some(Hold::Ports) => set(
            "Held",
            Truth::True,
            facts.ports_reason(),
            format!("{phase} cannot move on: {}", unsettled.join("; ")),
        ),
        Some(Hold::NotInstalled) => set(
            "Held",
            Truth::True,
            "WaitingForInstaller",
            format!(
                "the provisioning network is in place; the tenant's network follows when the \
                 installer sets the annotation {PROVISIONED_ANNOTATION}=true"
            ),
        ),
        Some(Hold::HostNotFound(host)) => set(
            "Held",
            Truth::True,
            "HostNotFound",
            format!("the linked BareMetalHost {host} is not found; holding {phase}"),
        ),
        Some(Hold::Metal3Absent(host)) => set(
            "Held",
            Truth::True,
            "Metal3NotInstalled",
            format!(
                "Metal3's BareMetalHost CRD is not installed, so the linked BareMetalHost \
                 {host} cannot be read; holding {phase} with its ports as they are"
            ),
        ),
        Some(Hold::StateNotReported(host)) => set(
            "Held",
            Truth::True,
            "HostStateNotReported",
            format!(
                "the linked BareMetalHost {host} has no provisioning state yet; holding \
                 {phase} with its ports as they are until Metal3 reports one"
            ),
        ),
        Some(Hold::BgpPeers) => set(
            "Held",
            Truth::True,
            "BgpPeersRemaining",
            format!(
                "leaving {phase}: the host's BGP neighbours come off its ToRs first; the \
                 ports keep the tenant's network until they are gone"
            ),
        ),
        Some(Hold::UnknownState(s)) => set(
            "Held",
            Truth::True,
            "UnknownHostState",
            format!(
                "the BareMetalHost is in state {s:?}, which patchbay does not know; holding {phase}"
            ),
        ),
    }
    let cabling = crate::decide::cabling::condition(&facts.cabling);
    if let Some((truth, reason, message)) = &cabling {
        set("CablingVerified", *truth, reason, message.clone());
    }
    let in_use: Vec<String> = facts
        .ports
        .iter()
        .filter_map(|(t, v, _)| match v {
            Verdict::InUse(why) => Some(format!("{} ({}): {why}", t.port, t.nic)),
            _ => None,
        })
        .collect();
    if in_use.is_empty() {
        set("PortInUse", Truth::False, "NoConflict", String::new());
    } else {
        set(
            "PortInUse",
            Truth::True,
            "PortInUse",
            format!("left untouched: {}", in_use.join("; ")),
        );
    }
    let host = facts
        .host
        .as_ref()
        .map(|h| format!("BareMetalHost {}/{}", h.namespace, h.name))
        .unwrap_or_default();
    match &facts.gate {
        None => conditions.retain(|c| c.type_ != "HostPaused"),
        Some(Gate::Hold | Gate::Holding) => set(
            "HostPaused",
            Truth::True,
            "PausedByPatchbay",
            format!(
                "{host} is paused ({PAUSED_ANNOTATION}) until its ports carry the provisioning network"
            ),
        ),
        Some(Gate::Foreign(v)) => set(
            "HostPaused",
            Truth::True,
            "PausedByOther",
            format!(
                "{host} is paused by someone else ({PAUSED_ANNOTATION}={v:?}); patchbay leaves the pause alone and waits"
            ),
        ),
        Some(Gate::Release | Gate::Open) => {
            set("HostPaused", Truth::False, "NotPaused", String::new())
        }
    }
    if cabling.is_none() {
        conditions.retain(|c| c.type_ != "CablingVerified");
    }
    if facts.forbidden.is_empty() {
        conditions.retain(|c| c.type_ != "Forbidden");
    } else {
        set_condition(
            conditions,
            "Forbidden",
            Truth::True,
            "Forbidden",
            format!("left as they are: {}", facts.forbidden.join("; ")),
            generation,
            now,
        );
    }
}

/// The status a Server should have: its binding, its phase and ports (from the
/// host controller's facts), its spec's errors. `status.claim` names the bound
/// claim, and after a release the claim being left while its network may still be
/// on the ports (`Deprovisioning`, or a still-provisioned Metal3 host whose ports
/// are not settled yet).
pub fn server_status(
    server: &Server,
    old: &ServerStatus,
    facts: &HostFacts,
    now: jiff::Timestamp,
) -> ServerStatus {
    let mut status = old.clone();
    let b = server.spec.claim_ref.as_ref();
    status.phase = Some(facts.step.phase);
    status.allocated = b.is_some();
    status.role = b.map(|b| b.role.clone());
    status.claim = match b {
        Some(b) => Some(ClaimRef {
            name: b.name.clone(),
            namespace: b.namespace.clone(),
        }),
        // Released: the claim's network may still be on the ports while the Server
        // deprovisions, or (a Metal3 host still provisioned) until its ports are
        // settled on the NICs' own configuration.
        None => match facts.step.phase {
            ServerPhase::Deprovisioning => old.claim.clone(),
            ServerPhase::Provisioned if !facts.settled() => old.claim.clone(),
            _ => None,
        },
    };
    let ready = facts.ports.iter().filter(|(_, v, _)| v.settled()).count();
    status.ports_ready = Some(format!("{ready}/{}", facts.ports.len()));
    status.ports = facts
        .ports
        .iter()
        .map(|(t, v, state)| NicPortStatus {
            nic: t.nic.clone(),
            kind: format!("{:?}", t.port.kind),
            port: format!("{}/{}", t.port.namespace, t.port.name),
            configuration: t.configuration.as_ref().map(reference_text),
            source: t.source.as_str().into(),
            state: state.map(|s| s.to_string()),
            ready: v.settled(),
            message: v.reason(),
        })
        .collect();
    // The linked host as found, else (not found) the one the spec names, else —
    // while Metal3 is not installed — the one last found (a host linked by its boot
    // MAC stays linked until Metal3 can say otherwise).
    let remembered = matches!(facts.step.hold, Some(Hold::Metal3Absent(_)))
        .then(|| old.bare_metal_host.clone())
        .flatten();
    status.bare_metal_host = facts
        .host
        .clone()
        .or_else(|| {
            server
                .spec
                .bare_metal_host_ref
                .as_ref()
                .map(|r| LinkedHost {
                    namespace: r.namespace.clone(),
                    name: r.name.clone(),
                    state: None,
                })
        })
        .or(remembered);
    status.observed_generation = server.metadata.generation;
    status.errors = validate_server(&server.spec)
        .err()
        .map(|e| e.0.iter().map(ToString::to_string).collect())
        .unwrap_or_default();
    let (truth, reason, message) = if status.errors.is_empty() {
        (true, "Valid", String::new())
    } else {
        (false, "InvalidSpec", status.errors.join("; "))
    };
    set_condition(
        &mut status.conditions,
        "Valid",
        truth,
        reason,
        message,
        server.metadata.generation,
        now,
    );
    host_conditions(
        &mut status.conditions,
        facts,
        server.metadata.generation,
        now,
    );
    // A signal that is not exactly "true" (`True`, `yes`) is not taken: say so.
    if facts.step.hold == Some(Hold::NotInstalled)
        && let Some(v) = server
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(PROVISIONED_ANNOTATION))
        && let Some(held) = status.conditions.iter_mut().find(|c| c.type_ == "Held")
    {
        held.message = format!(
            "{PROVISIONED_ANNOTATION} is {v:?}, which is not the signal: the tenant's network \
             follows when it is \"true\""
        );
    }
    status
}

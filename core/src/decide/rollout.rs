//! Rollouts in waves (issue 57): which ports a change of a shared object reaches in
//! which wave, whether a tenant's rollout policy stays within the limits the infra
//! team set, and each step of a rollout under way — the wave's gates judged from
//! what its ports and hosts show (read back Active; BGP Established; Node Ready;
//! the host still seen on its port; its answer to an HTTP probe), wait, pass or
//! roll back. Pure, table-tested; `src/controllers/rollout.rs` does the I/O.
//!
//! The shape follows a Deployment's rolling update, with a port as the unit:
//! - a **canary** first: a number of ports, or the ports of one switch;
//! - then waves of at most `maxUnavailable` ports overall and at most
//!   `maxUnavailablePerSwitch` on any one switch, each a count or a percentage
//!   (Kubernetes' int-or-percent: a percentage of the ports the rollout reaches,
//!   rounded down, and never less than one, so a rollout always moves).
//!
//! Ports are taken in a stable order (switch, then port name) so the same change
//! gives the same waves in every process, which lets an operator killed mid-rollout
//! resume from the wave it stored. A wave takes from the switches in turn, so it
//! spreads over switches instead of emptying one before the next.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::api::{PortNeighborsStatus, RolloutProbeSpec, RolloutSpec, RolloutStatus};

/// A count of ports, or a percentage of the ports a rollout reaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Amount {
    /// This many ports.
    Count(u32),
    /// This percentage (0–100) of the rollout's ports.
    Percent(u32),
}

impl std::fmt::Display for Amount {
    /// As a policy writes it: `5` or `25%`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Amount::Count(n) => write!(f, "{n}"),
            Amount::Percent(p) => write!(f, "{p}%"),
        }
    }
}

impl Amount {
    /// How many ports of `total` this is: rounded down, at least one (a rollout
    /// always moves) and at most `total`.
    pub fn of(self, total: usize) -> usize {
        let n = match self {
            Amount::Count(n) => n as usize,
            Amount::Percent(p) => total * p.min(100) as usize / 100,
        };
        n.clamp(1, total.max(1))
    }

    /// Whether this is more than `limit` of `total` ports.
    fn exceeds(self, limit: Amount, total: usize) -> bool {
        self.of(total) > limit.of(total)
    }

    /// Parses Kubernetes' int-or-percent: `5` or `"25%"`.
    pub fn parse(text: &str) -> Result<Amount, String> {
        let text = text.trim();
        if let Some(p) = text.strip_suffix('%') {
            let p: u32 = p
                .parse()
                .map_err(|_| format!("{text:?} is not a whole percentage"))?;
            if p == 0 || p > 100 {
                return Err(format!("{text:?} is not between 1% and 100%"));
            }
            return Ok(Amount::Percent(p));
        }
        match text.parse::<u32>() {
            Ok(0) => Err("0 would never move a port: at least 1".into()),
            Ok(n) => Ok(Amount::Count(n)),
            Err(_) => Err(format!("{text:?} is neither a count nor a percentage")),
        }
    }
}

/// The first wave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Canary {
    /// This many ports, on as few switches as the order gives.
    Ports(u32),
    /// The ports of the first switch (within the per-switch bound).
    OneSwitch,
}

/// How a change rolls out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// The first wave.
    pub canary: Canary,
    /// The most ports changing at once, overall.
    pub max_unavailable: Amount,
    /// The most ports changing at once on one switch.
    pub max_unavailable_per_switch: Amount,
}

/// One port a rollout reaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Target<'a> {
    /// The port (its SwitchPort's name).
    pub port: &'a str,
    /// Its switch.
    pub switch: &'a str,
}

/// Each switch's ports (indices into `targets`), in port-name order; switches in
/// name order.
fn queues(targets: &[Target<'_>]) -> Vec<VecDeque<usize>> {
    let mut by_switch: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, t) in targets.iter().enumerate() {
        by_switch.entry(t.switch).or_default().push(i);
    }
    by_switch
        .into_values()
        .map(|mut ports| {
            ports.sort_by(|a, b| targets[*a].port.cmp(targets[*b].port));
            ports.into()
        })
        .collect()
}

/// The canary, taken from the queues: from the first switch on, a switch at a time.
fn take_canary(
    queues: &mut [VecDeque<usize>],
    canary: Canary,
    overall: usize,
    per_switch: usize,
) -> Vec<usize> {
    let Some(first) = queues.first() else {
        return Vec::new();
    };
    let size = match canary {
        Canary::Ports(n) => (n as usize).clamp(1, overall),
        Canary::OneSwitch => first.len().min(per_switch).min(overall),
    };
    let mut out = Vec::new();
    for queue in queues.iter_mut() {
        let take = (size - out.len()).min(per_switch).min(queue.len());
        out.extend(queue.drain(..take));
        if out.len() == size || canary == Canary::OneSwitch {
            break;
        }
    }
    out
}

/// A wave taken from the queues: from the switches in turn, within both bounds.
fn take_wave(queues: &mut [VecDeque<usize>], overall: usize, per_switch: usize) -> Vec<usize> {
    let mut wave = Vec::new();
    let mut taken = vec![0usize; queues.len()];
    loop {
        let mut moved = false;
        for (s, queue) in queues.iter_mut().enumerate() {
            if wave.len() == overall {
                return wave;
            }
            if taken[s] < per_switch
                && let Some(i) = queue.pop_front()
            {
                wave.push(i);
                taken[s] += 1;
                moved = true;
            }
        }
        if !moved {
            return wave;
        }
    }
}

/// The waves of a rollout: indices into `targets`, the canary first. Every port is in
/// exactly one wave; the same targets and policy give the same waves.
pub fn waves(targets: &[Target<'_>], policy: &Policy) -> Vec<Vec<usize>> {
    let total = targets.len();
    if total == 0 {
        return Vec::new();
    }
    let overall = policy.max_unavailable.of(total);
    let per_switch = policy.max_unavailable_per_switch.of(total);
    let mut queues = queues(targets);
    let mut out = vec![take_canary(&mut queues, policy.canary, overall, per_switch)];
    while queues.iter().any(|q| !q.is_empty()) {
        out.push(take_wave(&mut queues, overall, per_switch));
    }
    out
}

/// The next wave of a rollout under way: indices into `remaining` (the ports not
/// moved yet), bounded as a share of `total` (every port the rollout reaches, so a
/// percentage keeps its size as the rollout goes); the canary when `first`.
///
/// With `whole_switches` (a configuration with a link-aggregation group, before or
/// after the edit: every port carrying it on a switch is a member, and a group's
/// members change in one batch), a switch's ports move together: whole switches,
/// as many as `maxUnavailable` holds and at least one; the canary is one switch.
pub fn next_wave(
    remaining: &[Target<'_>],
    total: usize,
    policy: &Policy,
    first: bool,
    whole_switches: bool,
) -> Vec<usize> {
    let total = total.max(remaining.len());
    let overall = policy.max_unavailable.of(total);
    let per_switch = policy.max_unavailable_per_switch.of(total);
    let mut queues = queues(remaining);
    if whole_switches {
        let mut wave = Vec::new();
        for queue in queues {
            if !wave.is_empty() && (first || wave.len() + queue.len() > overall) {
                break;
            }
            wave.extend(queue);
        }
        return wave;
    }
    if first {
        take_canary(&mut queues, policy.canary, overall, per_switch)
    } else {
        take_wave(&mut queues, overall, per_switch)
    }
}

/// The most a tenant's policy may ask for, set by the infra team.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The most `maxUnavailable` a tenant may set.
    pub max_unavailable: Amount,
    /// The most `maxUnavailablePerSwitch` a tenant may set.
    pub max_unavailable_per_switch: Amount,
}

/// Why a tenant's policy is refused, field by field (`spec.rollout.…`), for a
/// rollout reaching `total` ports: each bound compared as the ports it means.
pub fn check_within(policy: &Policy, limits: &Limits, total: usize) -> Vec<(String, String)> {
    let mut refused = Vec::new();
    let mut check = |field: &str, asked: Amount, limit: Amount| {
        if asked.exceeds(limit, total) {
            refused.push((
                format!("spec.rollout.{field}"),
                format!(
                    "{} ports at once is more than the infra team's limit of {} ({limit}) for these {total} ports",
                    asked.of(total),
                    limit.of(total)
                ),
            ));
        }
    };
    check(
        "maxUnavailable",
        policy.max_unavailable,
        limits.max_unavailable,
    );
    check(
        "maxUnavailablePerSwitch",
        policy.max_unavailable_per_switch,
        limits.max_unavailable_per_switch,
    );
    if let Canary::Ports(n) = policy.canary
        && (n as usize) > limits.max_unavailable.of(total)
    {
        refused.push((
            "spec.rollout.canary.ports".into(),
            format!(
                "a canary of {n} ports is more than the infra team's limit of {} at once",
                limits.max_unavailable.of(total)
            ),
        ));
    }
    refused
}

/// What is wrong with a policy whatever the operator's settings: its malformed
/// fields (`patchbay validate` reports them; the controller refuses the rollout
/// with them).
pub fn policy_errors(spec: Option<&RolloutSpec>) -> Vec<(String, String)> {
    rollout_of(spec, &Defaults::default(), false, 100)
        .err()
        .unwrap_or_default()
}

/// What the admission webhook refuses of a policy: its malformed fields and, for a
/// tenant's configuration (`tenant`), what asks for more than the infra team's
/// limits whatever the number of ports — refused for a rollout of 100 ports and of
/// 10,000 alike. A count asked against a percentage limit (or the reverse) depends
/// on how many ports carry the configuration: the controller judges it against
/// them (`phase: Refused`).
pub fn admission_refusals(
    spec: Option<&RolloutSpec>,
    defaults: &Defaults,
    tenant: bool,
) -> Vec<(String, String)> {
    let at = |total| {
        rollout_of(spec, defaults, tenant, total)
            .err()
            .unwrap_or_default()
    };
    let (small, large) = (at(100), at(10_000));
    small
        .into_iter()
        .filter(|(f, _)| large.iter().any(|(g, _)| g == f))
        .map(|(field, why)| {
            if large.iter().any(|(g, w)| *g == field && *w == why) {
                return (field, why);
            }
            // A limit, whose words name a number of ports.
            let limit = defaults.limits.map(|l| {
                if field.ends_with("PerSwitch") {
                    l.max_unavailable_per_switch
                } else {
                    l.max_unavailable
                }
            });
            let limit = limit.map(|l| l.to_string()).unwrap_or_default();
            (
                field,
                format!(
                    "asks for more ports at once than the infra team allows a tenant's configuration ({limit}), whether 100 or 10,000 ports carry it"
                ),
            )
        })
        .collect()
}

/// The operator's default for each policy field a configuration leaves out, and
/// the infra team's limits on what a tenant's configuration may ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Defaults {
    /// The policy of a configuration without `spec.rollout`.
    pub policy: Policy,
    /// Seconds a wave's ports must read back Active before the next wave.
    pub min_wait_seconds: i64,
    /// Seconds a wave may take to pass its gate.
    pub progress_deadline_seconds: i64,
    /// The most a tenant's (a namespace other than the infra team's) policy may ask
    /// for; `None`: no limit.
    pub limits: Option<Limits>,
    /// The cluster's node-monitor grace period, when the Node Ready gate is on
    /// (`None`: off): how long after a host's port changed before a Node that lost
    /// its connection shows NotReady.
    pub node_grace_seconds: Option<i64>,
}

impl Default for Defaults {
    /// One port first, then a quarter of the ports at a time and at most half a
    /// switch's; a wave passes once its ports read back Active; ten minutes each.
    fn default() -> Self {
        Defaults {
            policy: Policy {
                canary: Canary::Ports(1),
                max_unavailable: Amount::Percent(25),
                max_unavailable_per_switch: Amount::Percent(50),
            },
            min_wait_seconds: 0,
            progress_deadline_seconds: 600,
            limits: None,
            node_grace_seconds: None,
        }
    }
}

/// A configuration's rollout: its policy and timing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rollout {
    /// The waves' shape.
    pub policy: Policy,
    /// Seconds a wave's ports must read back Active before the next wave.
    pub min_wait_seconds: i64,
    /// Seconds a wave may take to pass its gate.
    pub progress_deadline_seconds: i64,
    /// Whether a switch's ports move together (see [`next_wave`]).
    pub whole_switches: bool,
}

/// An int-or-percent field of `spec.rollout`.
fn amount(value: &IntOrString) -> Result<Amount, String> {
    match value {
        IntOrString::Int(n) if *n > 0 => Ok(Amount::Count(*n as u32)),
        IntOrString::Int(n) => Amount::parse(&n.to_string()),
        IntOrString::String(s) => Amount::parse(s),
    }
}

/// The rollout of a configuration with `spec` (its fields over `defaults`), held to
/// the infra team's limits when `tenant` for `total` ports; every field refused is
/// named (`spec.rollout.…`) with why.
pub fn rollout_of(
    spec: Option<&RolloutSpec>,
    defaults: &Defaults,
    tenant: bool,
    total: usize,
) -> Result<Rollout, Vec<(String, String)>> {
    let mut refused = Vec::new();
    let mut policy = defaults.policy;
    let Some(spec) = spec else {
        return Ok(Rollout {
            policy,
            min_wait_seconds: defaults.min_wait_seconds,
            progress_deadline_seconds: defaults.progress_deadline_seconds,
            whole_switches: false,
        });
    };
    let mut field = |name: &str, value: &Option<IntOrString>, into: &mut Amount| {
        if let Some(v) = value {
            match amount(v) {
                Ok(a) => *into = a,
                Err(why) => refused.push((format!("spec.rollout.{name}"), why)),
            }
        }
    };
    field(
        "maxUnavailable",
        &spec.max_unavailable,
        &mut policy.max_unavailable,
    );
    field(
        "maxUnavailablePerSwitch",
        &spec.max_unavailable_per_switch,
        &mut policy.max_unavailable_per_switch,
    );
    if let Some(c) = &spec.canary {
        match (c.ports, c.one_switch) {
            (Some(_), true) => refused.push((
                "spec.rollout.canary".into(),
                "ports and oneSwitch are two canaries: name one".into(),
            )),
            (Some(n), false) if n >= 1 => policy.canary = Canary::Ports(n as u32),
            (Some(n), false) => refused.push((
                "spec.rollout.canary.ports".into(),
                format!("{n} would never move a port: at least 1"),
            )),
            (None, true) => policy.canary = Canary::OneSwitch,
            (None, false) => {}
        }
    }
    if let Some(probe) = &spec.probe {
        refused.extend(probe_errors(probe));
    }
    if tenant && let Some(limits) = &defaults.limits {
        // Only what the tenant wrote: a field left out is the infra team's own
        // default (as a configuration without `spec.rollout` has all of them).
        let written = |field: &str| match field {
            "spec.rollout.maxUnavailable" => spec.max_unavailable.is_some(),
            "spec.rollout.maxUnavailablePerSwitch" => spec.max_unavailable_per_switch.is_some(),
            _ => spec.canary.is_some(),
        };
        refused.extend(
            check_within(&policy, limits, total)
                .into_iter()
                .filter(|(f, _)| written(f)),
        );
    }
    if !refused.is_empty() {
        return Err(refused);
    }
    Ok(Rollout {
        policy,
        min_wait_seconds: spec.min_wait_seconds.unwrap_or(defaults.min_wait_seconds),
        progress_deadline_seconds: spec
            .progress_deadline_seconds
            .unwrap_or(defaults.progress_deadline_seconds),
        whole_switches: false,
    })
}

/// The name of a configuration's ControllerRevision for the content hash `hash`
/// (`<configuration>-<first 10 hex digits>`, as a StatefulSet names its own).
pub fn revision_name(configuration: &str, hash: &str) -> String {
    let base: String = configuration.chars().take(242).collect();
    format!("{base}-{}", &hash[..hash.len().min(10)])
}

/// What a port moved by wave `wave` of the rollout of `status` carries as its
/// [`crate::api::keys::ROLLOUT_ANNOTATION`]: `<updateRevision>.<attempt>.<wave>`.
pub fn pin(status: &RolloutStatus, wave: i64) -> String {
    format!("{}.{}.{wave}", status.update_revision, status.attempt)
}

/// The wave of the rollout of `status` that moved a port pinned `pin`; `None` when
/// this rollout did not move it (no pin, or an earlier rollout's).
pub fn moved_by(pin: Option<&str>, status: &RolloutStatus) -> Option<i64> {
    let rest = pin?
        .strip_prefix(status.update_revision.as_str())?
        .strip_prefix('.')?;
    let (attempt, wave) = rest.split_once('.')?;
    if attempt != status.attempt.to_string() {
        return None;
    }
    wave.parse().ok()
}

/// Whether a port's failed attempt, by its category (its Ready condition's reason),
/// fails the wave: the device refused or mis-applied the change (a rejected
/// command or RPC, a read-back that differs, a port or capability it lacks). A
/// failure of the switch or the session (unreachable, timeout, slow, login, host
/// key), a lock another session holds, this replica not leading, the API server:
/// not the change's — the wave waits for it, within its progress deadline.
pub fn fails_the_wave(category: &str) -> bool {
    !matches!(
        category,
        "DeviceUnreachable"
            | "DeviceTimeout"
            | "DeviceSlow"
            | "AuthenticationFailed"
            | "HostKeyMismatch"
            | "LockDenied"
            | "NotLeader"
            | "WorkerStopped"
            | "KubernetesError"
    )
}

/// Seconds a held wave's change stays unconfirmed on its device before the device
/// takes it back by itself: twice the rollout's progress deadline. The rollout
/// settles it at its gate, within the deadline; the device's own timeout is for an
/// operator that died and did not come back in time.
pub fn hold_timeout(deadline_seconds: i64) -> i64 {
    deadline_seconds.saturating_mul(2)
}

/// The hold a port's change is made under (its token): the port's pin, while it
/// names the wave under way of the rollout under way (a wave passed or put back
/// holds nothing; nor does drift repair of an earlier wave's port).
pub fn hold_of(pin: Option<&str>, status: Option<&RolloutStatus>) -> Option<String> {
    let status = status?;
    let pin = pin?;
    (status.wave_committed_at.is_some()
        && status.current_revision != status.update_revision
        && moved_by(Some(pin), status) == Some(status.wave))
    .then(|| pin.to_owned())
}

/// A port's attempt key with the rollout pins it was made under: `inputs`, then
/// `@<pin>` for each pin the port carries (its configuration's rollout's, its
/// Switch's) that names the rollout under way as the port read it (`status`): a port
/// that sees its pin before the rollout's status that gives it meaning still carries
/// the previous revision, and its failure then is not the wave's. A rollout reads
/// from `status.lastAttempt` whether a failure was its wave's ([`attempted_under`]):
/// statuses keep whole seconds, and a failure in the second a wave was committed may
/// be the previous revision's.
pub fn pinned_attempt(inputs: String, pins: &[(Option<&str>, Option<&RolloutStatus>)]) -> String {
    pins.iter()
        .filter_map(|(pin, status)| {
            let pin = (*pin)?;
            moved_by(Some(pin), (*status)?).map(|_| pin)
        })
        .fold(inputs, |key, pin| format!("{key}@{pin}"))
}

/// Whether the attempt `last_attempt` ([`pinned_attempt`]) was made under the pin
/// `token`.
pub fn attempted_under(last_attempt: Option<&str>, token: &str) -> bool {
    last_attempt.is_some_and(|a| a.split('@').skip(1).any(|p| p == token))
}

/// The ControllerRevision a port with the pin `pin` carries of a configuration
/// whose rollout stands at `status`: the update revision when the rollout under way
/// moved it (a rolled-back wave's ports lose their pin; the waves before it keep
/// theirs), else the current one. `None`: no rollout yet, the spec as it is.
pub fn revision_of<'a>(pin: Option<&str>, status: Option<&'a RolloutStatus>) -> Option<&'a str> {
    let status = status?;
    Some(if moved_by(pin, status).is_some() {
        &status.update_revision
    } else {
        &status.current_revision
    })
}

/// What one port carrying the configuration shows the rollout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortFacts<'a> {
    /// The port, `namespace/name`.
    pub key: &'a str,
    /// Its switch.
    pub switch: &'a str,
    /// The wave of the rollout under way that moved it (its pin), if one did.
    pub moved: Option<i64>,
    /// Since when it reads back Active with the update revision applied (Unix
    /// seconds: its last state change), if it does.
    pub active_on_update: Option<i64>,
    /// When its last attempt failed (Unix seconds), if it failed.
    pub failed_at: Option<i64>,
    /// Whether its failing attempt was made under this wave's pin
    /// ([`attempted_under`]): a failure in the commit's own second is then this
    /// wave's.
    pub failed_in_wave: bool,
    /// Its host's BGP sessions, where its Switch speaks BGP to it.
    pub bgp: Option<Signal>,
    /// Its host's Kubernetes Node's Ready condition, where the Node gate is on and
    /// the host is a Node.
    pub node: Option<Signal>,
    /// Its host's NIC seen on the port ([`neighbor_signal`]), where its Switch reads
    /// neighbours and the NIC was seen just before the port moved.
    pub neighbor: Option<Signal>,
    /// Its host's answers to the rollout's probe ([`Probed::signal`]), where the
    /// configuration asks for one and the port has a host.
    pub probe: Option<Signal>,
}

/// A health signal about a port's host, as last read (its BGP sessions).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Signal {
    /// Whether the signal says healthy (every session Established).
    pub healthy: bool,
    /// When it was read (Unix seconds); `None`: never, the gate cannot be evaluated
    /// yet.
    pub observed_at: Option<i64>,
    /// Seconds after the port's change reached its device before the signal can
    /// show a failure (BGP's hold time, and a second): only a read that late is
    /// evidence.
    pub settle: i64,
}

/// What the stored progress says of the wave under way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// Waves committed so far (the one under way included; the canary is 1).
    pub wave: i64,
    /// When the wave under way was committed (Unix seconds); `None` between waves.
    pub committed_at: Option<i64>,
}

/// The gates a wave passes, by the names a rolled-back rollout reports.
pub mod gate {
    /// Every port of the wave read back Active with the update revision, and none
    /// refused by its device since the wave's commit ([`super::fails_the_wave`]).
    pub const PORTS_ACTIVE: &str = "PortsActive";
    /// The wave passed its gates within `progressDeadlineSeconds`.
    pub const PROGRESS_DEADLINE: &str = "ProgressDeadline";
    /// Every BGP session of the wave's hosts Established, read at least a hold time
    /// after the commit.
    pub const BGP_ESTABLISHED: &str = "BgpEstablished";
    /// Every wave host that is a Kubernetes Node still Ready, read at least the
    /// node-monitor grace period (and its 5 s monitor period) after its port's
    /// change reached the device.
    pub const NODE_READY: &str = "NodeReady";
    /// Every wave host whose NIC its port's Switch saw just before the change (by
    /// LLDP, by its learned MAC) seen the same ways again, on a read at least the
    /// Switch's `spec.neighbors.ageOutSeconds` after its port's change reached the
    /// device.
    pub const NEIGHBOR_SEEN: &str = "NeighborSeen";
    /// With `spec.rollout.probe`: every wave host answers the probe (a status
    /// 200-399), probed from `initialDelaySeconds` after its port's change; one
    /// that fails `failureThreshold` probes in a row fails the wave.
    pub const HTTP_PROBE: &str = "HttpProbe";
    /// Where the wave's change is held on its device (a persisted confirmed
    /// commit), the device still held it when the other gates passed: one that
    /// took it back by itself (its timeout passed while no operator confirmed it)
    /// fails the wave.
    pub const DEVICE_HELD: &str = "DeviceHeld";
}

/// What the rollout does next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Commit the next wave (its ports: [`wave_members`] once it is stored).
    Commit,
    /// The wave's gate has not passed yet: look again after this many seconds.
    Wait {
        /// Seconds until the next look.
        after: i64,
        /// What it waits on.
        message: String,
    },
    /// The wave under way passed its gates.
    Passed,
    /// Every port is on the update revision.
    Complete,
    /// Held between waves (`spec.rollout.paused`).
    Paused,
    /// A gate failed: the wave's ports go back to the previous revision and the
    /// rollout stops.
    RollBack {
        /// The gate that failed.
        gate: &'static str,
        /// What it saw.
        message: String,
    },
}

/// The ports of the wave under way (indices into `ports`): the wave as planned at
/// its commit — the same plan over the same ports (those not moved by an earlier
/// wave) gives the same wave, whether some of it is pinned already or not — with
/// every port it pinned. So the status stores the wave's number, not its ports
/// (10,000 names would be a quarter megabyte; 100,000 more than etcd takes), and a
/// process killed mid-commit pins the rest.
pub fn wave_members(rollout: &Rollout, progress: &Progress, ports: &[PortFacts<'_>]) -> Vec<usize> {
    let this = Some(progress.wave);
    let candidates: Vec<usize> = (0..ports.len())
        .filter(|i| ports[*i].moved.is_none() || ports[*i].moved == this)
        .collect();
    let targets: Vec<Target<'_>> = candidates
        .iter()
        .map(|i| Target {
            port: ports[*i].key,
            switch: ports[*i].switch,
        })
        .collect();
    let planned = next_wave(
        &targets,
        ports.len(),
        &rollout.policy,
        progress.wave == 1,
        rollout.whole_switches,
    );
    let mut members: BTreeSet<usize> = planned.into_iter().map(|i| candidates[i]).collect();
    members.extend((0..ports.len()).filter(|i| ports[*i].moved == this));
    members.into_iter().collect()
}

/// The next step of a rollout at `now` (Unix seconds), from its stored `progress`
/// and what every port carrying the configuration shows.
pub fn step(
    now: i64,
    rollout: &Rollout,
    progress: &Progress,
    ports: &[PortFacts<'_>],
    paused: bool,
) -> Step {
    if progress.committed_at.is_some() {
        let members = wave_members(rollout, progress, ports);
        return judge_wave(now, rollout, progress, ports, &members);
    }
    if ports.iter().all(|p| p.moved.is_some()) {
        return Step::Complete;
    }
    if paused {
        return Step::Paused;
    }
    Step::Commit
}

/// Up to eight of `keys`, then how many more.
pub fn some_of(keys: &[&str]) -> String {
    let shown = keys.iter().take(8).copied().collect::<Vec<_>>().join(", ");
    match keys.len() {
        0..=8 => shown,
        n => format!("{shown} and {} more", n - 8),
    }
}

/// When a port's change reached its device, if it has (Unix seconds): when it went
/// Active on the update revision, or the commit if that reads earlier. The clocks of
/// the minimum wait and of a host's signal start there, not at the commit: a slow
/// device would otherwise spend them before the change is even on it.
fn landed(p: &PortFacts<'_>, committed: i64) -> Option<i64> {
    p.active_on_update.map(|t| t.max(committed))
}

/// Whether signal `s` of `p`'s host was read late enough after `p`'s change (its
/// wave committed at `committed`) to be evidence.
fn evidence(p: &PortFacts<'_>, s: &Signal, committed: i64) -> bool {
    landed(p, committed).is_some_and(|at| s.observed_at.is_some_and(|t| t >= at + s.settle))
}

/// For each switch whose hosts of the wave under way (`members`) give the signal
/// `of` (a Switch's read: BGP, neighbours), the time (Unix seconds) after which a
/// read of it is evidence for each of them whose change has landed: what the
/// rollout asks the Switch to read after.
pub fn read_after<'a>(
    progress: &Progress,
    ports: &[PortFacts<'a>],
    members: &[usize],
    of: SignalOf,
) -> BTreeMap<&'a str, i64> {
    let mut out = BTreeMap::new();
    let Some(committed) = progress.committed_at else {
        return out;
    };
    for p in members.iter().map(|i| &ports[*i]) {
        if let (Some(s), Some(at)) = (of(p), landed(p, committed)) {
            let e = out.entry(p.switch).or_insert(i64::MIN);
            *e = (*e).max(at + s.settle);
        }
    }
    out
}

/// A port's signal for one gate.
pub type SignalOf = fn(&PortFacts<'_>) -> Option<Signal>;

/// A gate on a host's signal.
struct SignalGate {
    gate: &'static str,
    of: SignalOf,
    /// What a failure says; `{ports}` and `{wave}` filled in.
    down: &'static str,
    /// What a wait for evidence says; `{n}` filled in.
    unproven: &'static str,
    /// Why a host's signal cannot be evaluated yet when it has no evidence at all.
    never: &'static str,
}

/// The gates on a host's signals, in the order they are judged.
const SIGNALS: [SignalGate; 4] = [
    SignalGate {
        gate: gate::BGP_ESTABLISHED,
        of: |p| p.bgp,
        down: "BGP of the host(s) on {ports} not Established a hold time after wave {wave}'s change reached them",
        unproven: "BGP of {n} host(s) not yet read a hold time after the change reached them",
        never: "the Switch's speaker not read yet",
    },
    SignalGate {
        gate: gate::NODE_READY,
        of: |p| p.node,
        down: "the Node(s) of the host(s) on {ports} not Ready a grace period after wave {wave}'s change reached them",
        unproven: "the Node(s) of {n} host(s) not yet read a grace period after the change reached them",
        never: "their Node not read yet",
    },
    SignalGate {
        gate: gate::NEIGHBOR_SEEN,
        of: |p| p.neighbor,
        down: "the host(s) on {ports} no longer seen on their port (LLDP, learned MAC) an age-out time after wave {wave}'s change reached them",
        unproven: "the neighbours of {n} host(s) not yet read an age-out time after the change reached them",
        never: "the Switch's neighbours not read yet",
    },
    SignalGate {
        gate: gate::HTTP_PROBE,
        of: |p| p.probe,
        down: "the host(s) on {ports} failed spec.rollout.probe failureThreshold times in a row after wave {wave}'s change reached them",
        unproven: "{n} host(s) not yet answered spec.rollout.probe after the change reached them",
        never: "no answer yet and fewer failures in a row than failureThreshold, or no address known",
    },
];

/// A rollout's probe of each wave host, its fields resolved
/// ([`crate::api::RolloutProbeSpec`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    /// The host's TCP port.
    pub port: u16,
    /// The path asked for.
    pub path: String,
    /// Seconds after the port's change before the first probe.
    pub initial_delay: i64,
    /// Seconds between probes of a host.
    pub period: i64,
    /// Seconds a probe may take.
    pub timeout: i64,
    /// Failed probes in a row that fail the gate.
    pub failure_threshold: u32,
}

/// What is wrong with a probe, field by field (`spec.rollout.probe.…`).
pub fn probe_errors(spec: &RolloutProbeSpec) -> Vec<(String, String)> {
    let mut errors = Vec::new();
    let mut range = |field: &str, value: Option<i64>, low: i64, high: i64| {
        if let Some(v) = value
            && !(low..=high).contains(&v)
        {
            errors.push((
                format!("spec.rollout.probe.{field}"),
                format!("{v} is outside {low}-{high}"),
            ));
        }
    };
    range("httpGet.port", Some(spec.http_get.port), 1, 65535);
    range("initialDelaySeconds", spec.initial_delay_seconds, 0, 600);
    range("periodSeconds", spec.period_seconds, 1, 60);
    range("timeoutSeconds", spec.timeout_seconds, 1, 30);
    range("failureThreshold", spec.failure_threshold, 1, 10);
    if let Some(path) = &spec.http_get.path
        && (!path.starts_with('/')
            || path.len() > 256
            || !path.bytes().all(|b| b.is_ascii_graphic()))
    {
        errors.push((
            "spec.rollout.probe.httpGet.path".into(),
            "a path from / of at most 256 printable characters without spaces".into(),
        ));
    }
    errors
}

/// The probe `spec` asks for, if it asks for one that is well formed.
pub fn probe_of(spec: Option<&RolloutSpec>) -> Option<Probe> {
    let p = spec?.probe.as_ref()?;
    if !probe_errors(p).is_empty() {
        return None;
    }
    Some(Probe {
        port: u16::try_from(p.http_get.port).ok()?,
        path: p.http_get.path.clone().unwrap_or_else(|| "/".into()),
        initial_delay: p.initial_delay_seconds.unwrap_or(5),
        period: p.period_seconds.unwrap_or(2),
        timeout: p.timeout_seconds.unwrap_or(2),
        failure_threshold: p.failure_threshold.unwrap_or(3) as u32,
    })
}

impl Probe {
    /// The request for host `address` (an IPv6 literal bracketed in `Host`).
    pub fn request(&self, address: &str) -> String {
        let host = if address.contains(':') {
            format!("[{address}]")
        } else {
            address.to_owned()
        };
        format!(
            "GET {} HTTP/1.1\r\nHost: {host}:{}\r\nUser-Agent: patchbay-rollout-probe\r\nAccept: */*\r\nConnection: close\r\n\r\n",
            self.path, self.port
        )
    }

    /// Whether a response whose first line is `status_line` is an answer: HTTP/1.x
    /// with a status from 200 to 399 (as a kubelet's HTTP probe).
    pub fn answered(status_line: &str) -> bool {
        let mut words = status_line.split_ascii_whitespace();
        let version = words.next().unwrap_or_default();
        let code = words.next().and_then(|c| c.parse::<u16>().ok());
        version.starts_with("HTTP/1.") && code.is_some_and(|c| (200..400).contains(&c))
    }

    /// Whether a host whose port's change landed at `landed` (Unix seconds), probed
    /// as `probed` says, is due a probe at `now`.
    pub fn due(&self, probed: &Probed, landed: Option<i64>, now: i64) -> bool {
        landed.is_some_and(|at| now >= at + self.initial_delay)
            && probed.last_at.is_none_or(|t| now - t >= self.period)
    }
}

/// What the probes of one host showed since its port moved.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Probed {
    /// When it was last probed (Unix seconds).
    pub last_at: Option<i64>,
    /// Whether that probe was answered.
    pub answered: bool,
    /// Failed probes in a row, up to the last.
    pub failures: u32,
}

impl Probed {
    /// Takes in that the host had no address to probe at `at`: not a failure (the
    /// gate cannot be evaluated for it), looked for again a period later.
    pub fn unaddressed(&mut self, at: i64) {
        self.last_at = Some(at);
        self.answered = false;
    }

    /// Takes a probe at `at` in.
    pub fn record(&mut self, at: i64, answered: bool) {
        self.last_at = Some(at);
        self.answered = answered;
        self.failures = if answered { 0 } else { self.failures + 1 };
    }

    /// The `HttpProbe` signal: healthy on an answer; evidence once answered or
    /// failed `failure_threshold` times in a row (fewer failures are not yet
    /// evidence either way); probes start `initial_delay` after the change.
    pub fn signal(&self, probe: &Probe) -> Signal {
        let evidence = self.answered || self.failures >= probe.failure_threshold;
        Signal {
            healthy: self.answered,
            observed_at: self.last_at.filter(|_| evidence),
            settle: probe.initial_delay,
        }
    }
}

/// When the change of a port landed, as the gates count it (its clock starts), for
/// the wave committed at `progress.committed_at`.
pub fn landed_at(p: &PortFacts<'_>, progress: &Progress) -> Option<i64> {
    landed(p, progress.committed_at?)
}

/// The BGP signal, for [`read_after`].
pub const BGP: SignalOf = |p| p.bgp;
/// The neighbour signal, for [`read_after`].
pub const NEIGHBOR: SignalOf = |p| p.neighbor;

/// How a host's NIC shows on its port in a read of the port's Switch's neighbours.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Seen {
    /// An LLDP neighbour names the NIC ([`crate::decide::cabling::named_by_lldp`]).
    pub lldp: bool,
    /// The NIC's MAC is learned on the port.
    pub mac: bool,
}

impl Seen {
    /// How the NIC `mac` of a host whose NICs are `host_macs` shows on a port that
    /// sees `seen` (`None`: nothing).
    pub fn on(seen: Option<&PortNeighborsStatus>, mac: &str, host_macs: &[&str]) -> Seen {
        seen.map_or(Seen::default(), |seen| Seen {
            lldp: crate::decide::cabling::named_by_lldp(seen, mac, host_macs),
            mac: seen
                .macs
                .iter()
                .any(|m| crate::decide::cabling::same_mac(m, mac)),
        })
    }

    /// How a host known by the MACs `host_macs` shows on a port that sees `seen`,
    /// when which of its NICs is on the port is not known (a BareMetalHost's): by
    /// LLDP naming any of them, by any of them learned on the port.
    pub fn of_host(seen: Option<&PortNeighborsStatus>, host_macs: &[&str]) -> Seen {
        host_macs
            .iter()
            .map(|mac| Seen::on(seen, mac, host_macs))
            .fold(Seen::default(), |a, b| Seen {
                lldp: a.lldp || b.lldp,
                mac: a.mac || b.mac,
            })
    }

    /// As [`crate::api::keys::ROLLOUT_SEEN_ANNOTATION`] writes it; `None`: not seen.
    pub fn annotation(self) -> Option<&'static str> {
        match (self.lldp, self.mac) {
            (true, true) => Some("lldp,mac"),
            (true, false) => Some("lldp"),
            (false, true) => Some("mac"),
            (false, false) => None,
        }
    }

    /// The annotation read back (words it does not know are ignored).
    pub fn parse(text: Option<&str>) -> Seen {
        let words: Vec<&str> = text.unwrap_or_default().split(',').map(str::trim).collect();
        Seen {
            lldp: words.contains(&"lldp"),
            mac: words.contains(&"mac"),
        }
    }
}

/// The `NeighborSeen` signal of a port whose host's NIC showed `before` just before
/// the port moved and `now` on the Switch's read at `read_at` (Unix seconds), on a
/// Switch whose neighbours age out after `age_out` seconds: healthy when it shows
/// every way it showed before (a host that sent LLDP and traffic still does both:
/// LLDP alone survives a VLAN change that drops the host's traffic). `None`: not
/// seen before (a host that is off is not judged by the wire).
pub fn neighbor_signal(
    before: Seen,
    now: Seen,
    read_at: Option<i64>,
    age_out: i64,
) -> Option<Signal> {
    (before != Seen::default()).then_some(Signal {
        healthy: (!before.lldp || now.lldp) && (!before.mac || now.mac),
        observed_at: read_at,
        settle: age_out + 1,
    })
}

/// Seconds after a host's port changed before its Node's Ready is evidence: the
/// node-monitor grace period, and the 5 s monitor period the node lifecycle
/// controller looks at leases with.
pub fn node_settle(grace_seconds: i64) -> i64 {
    grace_seconds + 5
}

/// The host (`Server/<name>` or `BareMetalHost/<namespace>/<name>`, as the port's
/// [`crate::api::keys::HOST_ANNOTATION`] names it) a Kubernetes Node is: a Server by
/// its `patchbay.dev/server` label or `patchbay://<server>` provider id
/// ([`crate::decide::bgp_nodes::server_of_node`]); a BareMetalHost by Cluster API
/// Provider Metal3's `metal3://<namespace>/<name>[/<machine>]` provider id.
pub fn node_host(
    labels: &std::collections::BTreeMap<String, String>,
    provider_id: Option<&str>,
) -> Option<String> {
    if let Some(server) = crate::decide::bgp_nodes::server_of_node(labels, provider_id) {
        return Some(format!("Server/{server}"));
    }
    let rest = provider_id?.strip_prefix("metal3://")?;
    let mut parts = rest.split('/');
    let (ns, name) = (parts.next()?, parts.next()?);
    (!ns.is_empty() && !name.is_empty()).then(|| format!("BareMetalHost/{ns}/{name}"))
}

/// The gates of the wave under way, whose ports are `members`.
fn judge_wave(
    now: i64,
    rollout: &Rollout,
    progress: &Progress,
    ports: &[PortFacts<'_>],
    members: &[usize],
) -> Step {
    let committed = progress.committed_at.unwrap_or(now);
    let wave: Vec<&PortFacts<'_>> = members.iter().map(|i| &ports[*i]).collect();
    let failed: Vec<&str> = wave
        .iter()
        // Statuses keep whole seconds: a failure in the commit's second may be the
        // previous revision's, unless its attempt was made under this wave's pin
        // (a failure that is never retried, an invalid entry or configuration,
        // would otherwise wait for the deadline).
        .filter(|p| {
            p.failed_at
                .is_some_and(|t| t > committed || (t == committed && p.failed_in_wave))
        })
        .map(|p| p.key)
        .collect();
    if !failed.is_empty() {
        return Step::RollBack {
            gate: gate::PORTS_ACTIVE,
            message: format!(
                "{} of the {} port(s) of wave {} failed to apply the update revision: {}",
                failed.len(),
                wave.len(),
                progress.wave,
                some_of(&failed)
            ),
        };
    }
    for g in &SIGNALS {
        let down: Vec<&str> = wave
            .iter()
            .filter(|p| (g.of)(p).is_some_and(|s| evidence(p, &s, committed) && !s.healthy))
            .map(|p| p.key)
            .collect();
        if !down.is_empty() {
            return Step::RollBack {
                gate: g.gate,
                message: g
                    .down
                    .replace("{ports}", &some_of(&down))
                    .replace("{wave}", &progress.wave.to_string()),
            };
        }
    }
    match still_waiting(now, rollout, progress, &wave, committed) {
        None => Step::Passed,
        // Past the deadline, what the wave still waits on is why it goes back.
        Some((_, waiting)) if now - committed > rollout.progress_deadline_seconds => {
            Step::RollBack {
                gate: gate::PROGRESS_DEADLINE,
                message: format!(
                    "wave {} did not pass its gates within {} s; at the deadline {waiting}",
                    progress.wave, rollout.progress_deadline_seconds,
                ),
            }
        }
        Some((after, message)) => Step::Wait { after, message },
    }
}

/// What the wave (`wave`, committed at `committed`), none of whose ports failed and
/// none of whose hosts' signals is down, still waits on at `now`: when to look again
/// and what it waits on; `None`: its gates passed.
fn still_waiting(
    now: i64,
    rollout: &Rollout,
    progress: &Progress,
    wave: &[&PortFacts<'_>],
    committed: i64,
) -> Option<(i64, String)> {
    let landed = |p: &PortFacts<'_>| landed(p, committed);
    let pending: Vec<&str> = wave
        .iter()
        .filter(|p| p.active_on_update.is_none())
        .map(|p| p.key)
        .collect();
    if !pending.is_empty() {
        return Some((
            2,
            format!(
                "wave {}: {} of {} port(s) not yet read back Active on the update revision ({})",
                progress.wave,
                pending.len(),
                wave.len(),
                some_of(&pending)
            ),
        ));
    }
    for g in &SIGNALS {
        let unproven: Vec<(&PortFacts<'_>, Signal)> = wave
            .iter()
            .filter_map(|p| (g.of)(p).map(|s| (*p, s)))
            .filter(|(p, s)| !evidence(p, s, committed))
            .collect();
        if let Some(ready_at) = unproven
            .iter()
            .filter_map(|(p, s)| landed(p).map(|at| at + s.settle))
            .max()
        {
            let never = unproven
                .iter()
                .filter(|(_, s)| s.observed_at.is_none())
                .count();
            return Some((
                (ready_at - now).clamp(1, 5),
                format!(
                    "wave {}: Active; {}{}",
                    progress.wave,
                    g.unproven.replace("{n}", &unproven.len().to_string()),
                    if never > 0 {
                        format!(" ({never} cannot be evaluated yet: {})", g.never)
                    } else {
                        String::new()
                    }
                ),
            ));
        }
    }
    // Every port landed: the wave landed with its last.
    let since = wave
        .iter()
        .filter_map(|p| landed(p))
        .max()
        .unwrap_or(committed);
    let elapsed = now - since;
    (elapsed < rollout.min_wait_seconds).then(|| {
        (
            rollout.min_wait_seconds - elapsed,
            format!(
                "wave {}: Active; waiting {} s more (minWaitSeconds {}, counted from when the wave's last port went Active)",
                progress.wave,
                rollout.min_wait_seconds - elapsed,
                rollout.min_wait_seconds
            ),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fleet(switches: usize, ports: usize) -> Vec<(String, String)> {
        (0..switches)
            .flat_map(|s| (0..ports).map(move |p| (format!("sw{s}"), format!("sw{s}-p{p:02}"))))
            .collect()
    }

    fn targets(f: &[(String, String)]) -> Vec<Target<'_>> {
        f.iter()
            .map(|(switch, port)| Target { port, switch })
            .collect()
    }

    #[test]
    fn amounts_are_counts_or_percentages_rounded_down_and_never_zero() {
        let cases: [(&str, usize, Result<usize, &str>); 7] = [
            ("5", 100, Ok(5)),
            ("25%", 100, Ok(25)),
            ("25%", 3, Ok(1)),
            ("500", 10, Ok(10)),
            ("0", 10, Err("never move")),
            ("0%", 10, Err("between 1% and 100%")),
            ("ten", 10, Err("neither")),
        ];
        for (text, total, want) in cases {
            match (Amount::parse(text), want) {
                (Ok(a), Ok(n)) => assert_eq!(a.of(total), n, "{text} of {total}"),
                (Err(e), Err(why)) => assert!(e.contains(why), "{text}: {e}"),
                (got, want) => panic!("{text}: {got:?}, wanted {want:?}"),
            }
        }
    }

    #[test]
    fn waves_start_with_the_canary_respect_both_bounds_and_cover_every_port_once() {
        let policy = |canary, overall, per_switch| Policy {
            canary,
            max_unavailable: overall,
            max_unavailable_per_switch: per_switch,
        };
        // (switches, ports each, policy, canary size, largest wave, waves)
        let cases = [
            (
                4,
                10,
                policy(Canary::Ports(2), Amount::Count(8), Amount::Count(2)),
                2,
                8,
                6,
            ),
            (
                4,
                10,
                policy(Canary::OneSwitch, Amount::Percent(50), Amount::Count(5)),
                5,
                20,
                3,
            ),
            (
                1,
                48,
                policy(Canary::Ports(1), Amount::Count(100), Amount::Count(12)),
                1,
                12,
                5,
            ),
            (
                3,
                1,
                policy(Canary::Ports(1), Amount::Count(1), Amount::Count(1)),
                1,
                1,
                3,
            ),
        ];
        for (switches, ports, policy, canary, largest, count) in cases {
            let f = fleet(switches, ports);
            let t = targets(&f);
            let w = waves(&t, &policy);
            let what = format!("{switches}x{ports} {policy:?}: {w:?}");
            assert_eq!(w[0].len(), canary, "{what}");
            assert_eq!(w.iter().map(Vec::len).max(), Some(largest), "{what}");
            assert_eq!(w.len(), count, "{what}");
            let mut all: Vec<usize> = w.concat();
            all.sort();
            assert_eq!(all, (0..t.len()).collect::<Vec<_>>(), "{what}");
            let per_switch = policy.max_unavailable_per_switch.of(t.len());
            for wave in &w {
                assert!(wave.len() <= policy.max_unavailable.of(t.len()), "{what}");
                let mut on: BTreeMap<&str, usize> = BTreeMap::new();
                for i in wave {
                    *on.entry(t[*i].switch).or_default() += 1;
                }
                assert!(on.values().all(|n| *n <= per_switch), "{what}");
            }
        }
    }

    #[test]
    fn the_canary_of_one_switch_stays_on_it_and_the_order_is_stable() {
        let f = fleet(3, 4);
        let t = targets(&f);
        let policy = Policy {
            canary: Canary::OneSwitch,
            max_unavailable: Amount::Count(6),
            max_unavailable_per_switch: Amount::Count(4),
        };
        let w = waves(&t, &policy);
        assert!(w[0].iter().all(|i| t[*i].switch == "sw0"), "{w:?}");
        assert_eq!(w[0].len(), 4);
        // Shuffled input, the same ports in the same waves.
        let mut shuffled = t.clone();
        shuffled.reverse();
        let again: Vec<Vec<&str>> = waves(&shuffled, &policy)
            .iter()
            .map(|wave| wave.iter().map(|i| shuffled[*i].port).collect())
            .collect();
        let first: Vec<Vec<&str>> = w
            .iter()
            .map(|wave| wave.iter().map(|i| t[*i].port).collect())
            .collect();
        assert_eq!(again, first);
    }

    #[test]
    fn a_tenant_policy_above_the_infra_limit_is_refused_naming_the_field() {
        let limits = Limits {
            max_unavailable: Amount::Percent(10),
            max_unavailable_per_switch: Amount::Count(4),
        };
        let within = Policy {
            canary: Canary::Ports(2),
            max_unavailable: Amount::Count(10),
            max_unavailable_per_switch: Amount::Percent(2),
        };
        assert_eq!(check_within(&within, &limits, 200), []);
        let above = Policy {
            canary: Canary::Ports(50),
            max_unavailable: Amount::Percent(100),
            max_unavailable_per_switch: Amount::Count(5),
        };
        let refused = check_within(&above, &limits, 200);
        let fields: Vec<&str> = refused.iter().map(|(f, _)| f.as_str()).collect();
        assert_eq!(
            fields,
            [
                "spec.rollout.maxUnavailable",
                "spec.rollout.maxUnavailablePerSwitch",
                "spec.rollout.canary.ports"
            ]
        );
        assert!(refused[0].1.contains("200 ports at once"), "{refused:?}");
        assert!(refused[0].1.contains("limit of 20"), "{refused:?}");
    }

    fn spec(json: serde_json::Value) -> RolloutSpec {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn a_spec_overrides_the_defaults_field_by_field_and_a_bad_field_is_named() {
        let limits = Limits {
            max_unavailable: Amount::Percent(10),
            max_unavailable_per_switch: Amount::Count(2),
        };
        let defaults = Defaults {
            limits: Some(limits),
            ..Defaults::default()
        };
        // (spec, tenant, outcome: Ok(policy fields) or the fields refused)
        type Want = Result<(Canary, Amount, Amount, i64), Vec<&'static str>>;
        let cases: Vec<(Option<serde_json::Value>, bool, Want)> = vec![
            (
                None,
                true,
                Ok((
                    Canary::Ports(1),
                    Amount::Percent(25),
                    Amount::Percent(50),
                    0,
                )),
            ),
            (
                Some(serde_json::json!({"maxUnavailable": 5, "minWaitSeconds": 30})),
                false,
                Ok((Canary::Ports(1), Amount::Count(5), Amount::Percent(50), 30)),
            ),
            (
                Some(
                    serde_json::json!({"canary": {"oneSwitch": true}, "maxUnavailablePerSwitch": "10%"}),
                ),
                false,
                Ok((
                    Canary::OneSwitch,
                    Amount::Percent(25),
                    Amount::Percent(10),
                    0,
                )),
            ),
            (
                Some(
                    serde_json::json!({"maxUnavailable": 0, "canary": {"ports": 2, "oneSwitch": true}}),
                ),
                false,
                Err(vec!["spec.rollout.maxUnavailable", "spec.rollout.canary"]),
            ),
            (
                Some(
                    serde_json::json!({"maxUnavailable": "100%", "maxUnavailablePerSwitch": "150%"}),
                ),
                false,
                Err(vec!["spec.rollout.maxUnavailablePerSwitch"]),
            ),
            // Within infra's limits for the infra team, above them for a tenant.
            (
                Some(serde_json::json!({"maxUnavailable": "100%", "maxUnavailablePerSwitch": 1})),
                false,
                Ok((Canary::Ports(1), Amount::Percent(100), Amount::Count(1), 0)),
            ),
            (
                Some(serde_json::json!({"maxUnavailable": "100%", "maxUnavailablePerSwitch": 1})),
                true,
                Err(vec!["spec.rollout.maxUnavailable"]),
            ),
        ];
        for (json, tenant, want) in cases {
            let s = json.clone().map(spec);
            let got = rollout_of(s.as_ref(), &defaults, tenant, 100);
            match (got, want) {
                (Ok(r), Ok((canary, overall, per_switch, wait))) => {
                    assert_eq!(
                        (
                            r.policy.canary,
                            r.policy.max_unavailable,
                            r.policy.max_unavailable_per_switch,
                            r.min_wait_seconds
                        ),
                        (canary, overall, per_switch, wait),
                        "{json:?}"
                    );
                }
                (Err(refused), Err(fields)) => {
                    let got: Vec<&str> = refused.iter().map(|(f, _)| f.as_str()).collect();
                    assert_eq!(got, fields, "{json:?}: {refused:?}");
                }
                (got, want) => panic!("{json:?}: {got:?}, wanted {want:?}"),
            }
        }
    }

    /// Facts of `keys`: `moved` (index, wave), `active` indices (Active on the
    /// update since long before any commit), `failed` (index, when).
    fn facts<'a>(
        keys: &'a [(String, String)],
        moved: &[(usize, i64)],
        active: &[usize],
        failed: &[(usize, i64)],
    ) -> Vec<PortFacts<'a>> {
        keys.iter()
            .enumerate()
            .map(|(i, (switch, key))| PortFacts {
                key,
                switch,
                moved: moved.iter().find(|(j, _)| *j == i).map(|(_, w)| *w),
                active_on_update: active.contains(&i).then_some(0),
                failed_at: failed.iter().find(|(j, _)| *j == i).map(|(_, t)| *t),
                failed_in_wave: false,
                bgp: None,
                node: None,
                neighbor: None,
                probe: None,
            })
            .collect()
    }

    #[test]
    fn a_rollout_steps_canary_waves_gates_and_completes_or_rolls_back() {
        let keys = fleet(2, 4); // sw0-p00..03 (0-3), sw1-p00..03 (4-7)
        let rollout = Rollout {
            policy: Policy {
                canary: Canary::Ports(1),
                max_unavailable: Amount::Count(4),
                max_unavailable_per_switch: Amount::Count(2),
            },
            min_wait_seconds: 10,
            progress_deadline_seconds: 60,
            whole_switches: false,
        };
        let between = |wave| Progress {
            wave,
            committed_at: None,
        };
        let under_way = |wave| Progress {
            wave,
            committed_at: Some(100),
        };
        // Nothing moved: commit; the canary (wave 1) is one port.
        let none = facts(&keys, &[], &[], &[]);
        assert_eq!(step(100, &rollout, &between(0), &none, false), Step::Commit);
        assert_eq!(wave_members(&rollout, &under_way(1), &none), [0]);
        // After it: a wave of 4, 2 per switch, the same before and after it is
        // pinned (in part or whole).
        let after_canary = facts(&keys, &[(0, 1)], &[0], &[]);
        assert_eq!(
            wave_members(&rollout, &under_way(2), &after_canary),
            [1, 2, 4, 5]
        );
        let half_pinned = facts(&keys, &[(0, 1), (1, 2), (4, 2)], &[0], &[]);
        assert_eq!(
            wave_members(&rollout, &under_way(2), &half_pinned),
            [1, 2, 4, 5]
        );
        // Paused between waves; every port moved: complete.
        assert_eq!(
            step(100, &rollout, &between(1), &after_canary, true),
            Step::Paused
        );
        let all: Vec<(usize, i64)> = (0..8).map(|i| (i, 1)).collect();
        let every: Vec<usize> = (0..8).collect();
        assert_eq!(
            step(
                100,
                &rollout,
                &between(3),
                &facts(&keys, &all, &every, &[]),
                false
            ),
            Step::Complete
        );
        // Wave 2 under way (ports 1, 2, 4, 5), committed at 100.
        let moved = [(0, 1), (1, 2), (2, 2), (4, 2), (5, 2)];
        let wave2 = under_way(2);
        // Not Active yet: wait; Active but inside the minimum wait: wait the rest.
        assert!(matches!(
            step(
                103,
                &rollout,
                &wave2,
                &facts(&keys, &moved, &[0, 1], &[]),
                false
            ),
            Step::Wait { after: 2, .. }
        ));
        let active = [0, 1, 2, 4, 5];
        assert!(matches!(
            step(
                104,
                &rollout,
                &wave2,
                &facts(&keys, &moved, &active, &[]),
                false
            ),
            Step::Wait { after: 6, .. }
        ));
        assert_eq!(
            step(
                110,
                &rollout,
                &wave2,
                &facts(&keys, &moved, &active, &[]),
                false
            ),
            Step::Passed
        );
        // The minimum wait counts from when the wave's last port went Active (a
        // slow device's 7 s are not part of it).
        let mut late = facts(&keys, &moved, &active, &[]);
        late[4].active_on_update = Some(107);
        assert!(matches!(
            step(110, &rollout, &wave2, &late, false),
            Step::Wait { after: 7, .. }
        ));
        assert_eq!(step(117, &rollout, &wave2, &late, false), Step::Passed);
        // Paused mid-wave: the wave still finishes its gate.
        assert_eq!(
            step(
                110,
                &rollout,
                &wave2,
                &facts(&keys, &moved, &active, &[]),
                true
            ),
            Step::Passed
        );
        // A failure since the commit rolls the wave back (one before it, or in
        // its second, is the previous revision's).
        match step(
            104,
            &rollout,
            &wave2,
            &facts(&keys, &moved, &[0], &[(4, 101), (0, 102)]),
            false,
        ) {
            Step::RollBack { gate, message } => {
                assert_eq!(gate, gate::PORTS_ACTIVE);
                // The canary's port failing is not this wave's.
                assert!(
                    message.contains("sw1-p00") && !message.contains("sw0-p00"),
                    "{message}"
                );
            }
            other => panic!("{other:?}"),
        }
        for before in [90, 100] {
            assert!(matches!(
                step(
                    104,
                    &rollout,
                    &wave2,
                    &facts(&keys, &moved, &[0], &[(1, before)]),
                    false
                ),
                Step::Wait { .. }
            ));
        }
        // In the commit's second: this wave's only when its attempt was made under
        // the wave's pin.
        let mut same_second = facts(&keys, &moved, &[0], &[(1, 100)]);
        assert!(matches!(
            step(104, &rollout, &wave2, &same_second, false),
            Step::Wait { .. }
        ));
        same_second[1].failed_in_wave = true;
        assert!(matches!(
            step(104, &rollout, &wave2, &same_second, false),
            Step::RollBack {
                gate: gate::PORTS_ACTIVE,
                ..
            }
        ));
        // Past the deadline without passing.
        assert!(matches!(
            step(
                161,
                &rollout,
                &wave2,
                &facts(&keys, &moved, &[0, 1], &[]),
                false
            ),
            Step::RollBack {
                gate: gate::PROGRESS_DEADLINE,
                ..
            }
        ));
    }

    #[test]
    fn a_port_carries_the_update_revision_only_with_the_pin_of_the_rollout_under_way() {
        let status = RolloutStatus {
            current_revision: "web-aaaaaaaaaa".into(),
            update_revision: "web-bbbbbbbbbb".into(),
            attempt: 3,
            ..RolloutStatus::default()
        };
        assert_eq!(pin(&status, 2), "web-bbbbbbbbbb.3.2");
        let cases = [
            (None, None),
            (Some("web-bbbbbbbbbb.3.2"), Some(2)),
            (Some("web-bbbbbbbbbb.3.17"), Some(17)),
            // An earlier rollout of the same content, or of another revision.
            (Some("web-bbbbbbbbbb.2.1"), None),
            (Some("web-bbbbbbbbbb.33.1"), None),
            (Some("web-cccccccccc.3.1"), None),
            (Some("web-bbbbbbbbbb.3"), None),
        ];
        for (p, want) in cases {
            assert_eq!(moved_by(p, &status), want, "{p:?}");
            let revision = if want.is_some() {
                "web-bbbbbbbbbb"
            } else {
                "web-aaaaaaaaaa"
            };
            assert_eq!(revision_of(p, Some(&status)), Some(revision), "{p:?}");
        }
        assert_eq!(revision_of(Some("web-bbbbbbbbbb.3.1"), None), None);
        assert_eq!(revision_name("web", &"ab".repeat(32)), "web-ababababab");
    }

    #[test]
    fn a_refused_change_fails_its_wave_and_a_busy_or_absent_switch_does_not() {
        for category in [
            "RpcRejected",
            "CommandRejected",
            "VerificationFailed",
            "Unsupported",
            "UnknownPort",
            "ProtocolError",
            "InvalidConfiguration",
        ] {
            assert!(fails_the_wave(category), "{category}");
        }
        for category in [
            "LockDenied",
            "DeviceUnreachable",
            "DeviceTimeout",
            "DeviceSlow",
            "AuthenticationFailed",
            "NotLeader",
        ] {
            assert!(!fails_the_wave(category), "{category}");
        }
    }

    #[test]
    fn admission_refuses_malformed_fields_and_a_tenant_above_the_limits_at_any_size() {
        let defaults = Defaults {
            limits: Some(Limits {
                max_unavailable: Amount::Percent(10),
                max_unavailable_per_switch: Amount::Count(2),
            }),
            ..Defaults::default()
        };
        let spec = |v: serde_json::Value| serde_json::from_value::<RolloutSpec>(v).unwrap();
        // (policy, tenant) → the fields refused at admission
        let cases: [(serde_json::Value, bool, &[&str]); 6] = [
            (
                serde_json::json!({"maxUnavailable": "ten"}),
                false,
                &["spec.rollout.maxUnavailable"],
            ),
            (
                serde_json::json!({"canary": {"ports": 2, "oneSwitch": true}}),
                false,
                &["spec.rollout.canary"],
            ),
            // Above the limits whatever the size: percent against percent, count
            // against count.
            (
                serde_json::json!({"maxUnavailable": "50%", "maxUnavailablePerSwitch": 3}),
                true,
                &[
                    "spec.rollout.maxUnavailable",
                    "spec.rollout.maxUnavailablePerSwitch",
                ],
            ),
            // The infra team's own configurations are not held to the limits.
            (serde_json::json!({"maxUnavailable": "50%"}), false, &[]),
            // 500 ports against 10 %: over at 100 ports, under at 10,000: the
            // controller judges it against the ports that carry it.
            (serde_json::json!({"maxUnavailable": 500}), true, &[]),
            (serde_json::json!({"maxUnavailable": "5%"}), true, &[]),
        ];
        for (json, tenant, want) in cases {
            let s = spec(json.clone());
            let got = admission_refusals(Some(&s), &defaults, tenant);
            let fields: Vec<&str> = got.iter().map(|(f, _)| f.as_str()).collect();
            assert_eq!(fields, want, "{json}: {got:?}");
            for (_, why) in &got {
                assert!(!why.contains("Percent("), "{why}");
            }
        }
        let over = admission_refusals(
            Some(&spec(serde_json::json!({"maxUnavailable": "50%"}))),
            &defaults,
            true,
        );
        assert!(over[0].1.contains("(10%)"), "{over:?}");
        assert_eq!(
            policy_errors(Some(&spec(
                serde_json::json!({"maxUnavailablePerSwitch": "0%"})
            )))[0]
                .0,
            "spec.rollout.maxUnavailablePerSwitch"
        );
        assert!(policy_errors(None).is_empty());
    }

    #[test]
    fn only_the_wave_under_way_is_held_on_the_device() {
        let under_way = RolloutStatus {
            current_revision: "web-aaaaaaaaaa".into(),
            update_revision: "web-bbbbbbbbbb".into(),
            attempt: 2,
            wave: 3,
            wave_committed_at: Some("2026-11-29T12:00:00Z".into()),
            ..RolloutStatus::default()
        };
        let between = RolloutStatus {
            wave_committed_at: None,
            ..under_way.clone()
        };
        let complete = RolloutStatus {
            current_revision: "web-bbbbbbbbbb".into(),
            ..under_way.clone()
        };
        let cases = [
            (Some("web-bbbbbbbbbb.2.3"), &under_way, true),
            // An earlier wave's port (drift repair), an earlier attempt's, no pin.
            (Some("web-bbbbbbbbbb.2.2"), &under_way, false),
            (Some("web-bbbbbbbbbb.1.3"), &under_way, false),
            (None, &under_way, false),
            // The wave passed (or was put back), or the rollout is complete.
            (Some("web-bbbbbbbbbb.2.3"), &between, false),
            (Some("web-bbbbbbbbbb.2.3"), &complete, false),
        ];
        for (pin, status, held) in cases {
            let got = hold_of(pin, Some(status));
            assert_eq!(got.is_some(), held, "{pin:?} {status:?}");
            if let Some(token) = got {
                assert_eq!(token, "web-bbbbbbbbbb.2.3");
            }
        }
        assert_eq!(hold_of(Some("web-bbbbbbbbbb.2.3"), None), None);
        assert_eq!(hold_timeout(600), 1200);
    }

    /// The default policy without a minimum wait, and its canary (wave 1)
    /// committed at 100.
    fn canary_under_way() -> (Rollout, Progress) {
        (
            Rollout {
                policy: Defaults::default().policy,
                min_wait_seconds: 0,
                progress_deadline_seconds: 600,
                whole_switches: false,
            },
            Progress {
                wave: 1,
                committed_at: Some(100),
            },
        )
    }

    #[test]
    fn a_bgp_gate_waits_a_hold_time_for_evidence_then_passes_or_rolls_back() {
        let keys = fleet(1, 2);
        let (rollout, under_way) = canary_under_way();
        let with = |healthy, observed_at| {
            let mut f = facts(&keys, &[(0, 1)], &[0], &[]);
            f[0].bgp = Some(Signal {
                healthy,
                observed_at,
                settle: 4,
            });
            f
        };
        // (healthy, read at, the port Active since, now) → the step's kind: a read
        // is evidence a hold time (4) after the change reached the port (at the
        // commit, 100, or later).
        let cases = [
            (true, None, 90, 110, "wait"),
            (true, Some(103), 90, 110, "wait"),
            (false, Some(103), 90, 110, "wait"),
            (true, Some(104), 90, 110, "passed"),
            (false, Some(104), 90, 105, "back"),
            (false, Some(104), 102, 105, "wait"),
            (false, Some(106), 102, 107, "back"),
            (true, Some(106), 102, 107, "passed"),
        ];
        for (healthy, read, since, now, want) in cases {
            let mut f = with(healthy, read);
            f[0].active_on_update = Some(since);
            let got = step(now, &rollout, &under_way, &f, false);
            let kind = match &got {
                Step::Wait { message, .. } => {
                    if read.is_none() {
                        assert!(message.contains("cannot be evaluated"), "{message}");
                    }
                    "wait"
                }
                Step::Passed => "passed",
                Step::RollBack { gate, .. } => {
                    assert_eq!(*gate, gate::BGP_ESTABLISHED);
                    "back"
                }
                other => panic!("{other:?}"),
            };
            assert_eq!(kind, want, "{healthy} {read:?} {since} {now}: {got:?}");
        }
    }

    #[test]
    fn a_switch_is_asked_for_a_read_a_hold_time_after_its_last_host_landed() {
        let keys = fleet(2, 2); // sw0-p00, sw0-p01, sw1-p00, sw1-p01
        let signal = Signal {
            healthy: true,
            observed_at: None,
            settle: 4,
        };
        let mut f = facts(&keys, &[(0, 1), (1, 1), (2, 1)], &[], &[]);
        f[0].bgp = Some(signal);
        f[1].bgp = Some(signal);
        f[2].bgp = Some(signal);
        let under_way = Progress {
            wave: 1,
            committed_at: Some(100),
        };
        let members = [0, 1, 2];
        // Nothing landed: nothing to ask yet; between waves: never.
        assert!(read_after(&under_way, &f, &members, BGP).is_empty());
        // sw0's ports landed at 90 (before the commit: counted from it) and 107,
        // sw1's at 103; port 3 gives no signal.
        f[0].active_on_update = Some(90);
        f[1].active_on_update = Some(107);
        f[2].active_on_update = Some(103);
        f[3].active_on_update = Some(120);
        let got = read_after(&under_way, &f, &members, BGP);
        assert_eq!(got, BTreeMap::from([("sw0", 111), ("sw1", 107)]));
        let between = Progress {
            wave: 1,
            committed_at: None,
        };
        assert!(read_after(&between, &f, &members, BGP).is_empty());
    }

    #[test]
    fn a_node_gate_waits_a_grace_period_then_passes_or_rolls_back_and_finds_its_host() {
        let keys = fleet(1, 2);
        let (rollout, under_way) = canary_under_way();
        let with = |healthy, observed_at| {
            let mut f = facts(&keys, &[(0, 1)], &[0], &[]);
            f[0].active_on_update = Some(102);
            f[0].node = Some(Signal {
                healthy,
                observed_at,
                settle: node_settle(40),
            });
            f
        };
        // Landed at 102: a read from 147 on is evidence.
        let kind = |got: Step| match got {
            Step::Wait { .. } => "wait",
            Step::Passed => "passed",
            Step::RollBack { gate, message } => {
                assert_eq!(gate, gate::NODE_READY);
                assert!(message.contains("Node"), "{message}");
                "back"
            }
            other => panic!("{other:?}"),
        };
        assert_eq!(
            kind(step(
                146,
                &rollout,
                &under_way,
                &with(false, Some(146)),
                false
            )),
            "wait"
        );
        assert_eq!(
            kind(step(
                147,
                &rollout,
                &under_way,
                &with(false, Some(147)),
                false
            )),
            "back"
        );
        assert_eq!(
            kind(step(
                147,
                &rollout,
                &under_way,
                &with(true, Some(147)),
                false
            )),
            "passed"
        );
        // BGP is judged first, and both must pass.
        let mut both = with(true, Some(147));
        both[0].bgp = Some(Signal {
            healthy: false,
            observed_at: Some(147),
            settle: 4,
        });
        assert!(matches!(
            step(147, &rollout, &under_way, &both, false),
            Step::RollBack {
                gate: gate::BGP_ESTABLISHED,
                ..
            }
        ));

        let labels = |kv: &[(&str, &str)]| {
            kv.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<std::collections::BTreeMap<_, _>>()
        };
        let cases = [
            (
                labels(&[("patchbay.dev/server", "s1")]),
                None,
                Some("Server/s1"),
            ),
            (labels(&[]), Some("patchbay://s2"), Some("Server/s2")),
            (
                labels(&[]),
                Some("metal3://infra/bmh-3/m-1"),
                Some("BareMetalHost/infra/bmh-3"),
            ),
            (
                labels(&[]),
                Some("metal3://infra/bmh-4"),
                Some("BareMetalHost/infra/bmh-4"),
            ),
            (labels(&[]), Some("metal3://5e3c-uid"), None),
            (labels(&[]), Some("aws:///us-east-1a/i-0"), None),
            (labels(&[]), None, None),
        ];
        for (l, provider, want) in cases {
            assert_eq!(
                node_host(&l, provider).as_deref(),
                want,
                "{l:?} {provider:?}"
            );
        }
    }

    #[test]
    fn a_host_seen_before_the_change_must_be_seen_the_same_ways_an_age_out_after_it() {
        let mac = "52:54:00:0a:00:01";
        let lldp = |port_id: &str| crate::api::LldpNeighborStatus {
            chassis_id: "52:54:00:0a:00:00".into(),
            chassis_id_subtype: "mac".into(),
            port_id: port_id.into(),
            port_id_subtype: "mac".into(),
            ..Default::default()
        };
        let port = |lldp_of: &[&str], macs: &[&str]| PortNeighborsStatus {
            port: "swp1".into(),
            lldp: lldp_of.iter().map(|p| lldp(p)).collect(),
            macs: macs.iter().map(|m| m.to_string()).collect(),
            ..Default::default()
        };
        let both = Seen {
            lldp: true,
            mac: true,
        };
        let only_lldp = Seen {
            lldp: true,
            mac: false,
        };
        // What a port shows of the NIC; the annotation round-trips.
        let cases = [
            (Some(port(&[mac], &[mac])), both, Some("lldp,mac")),
            (Some(port(&[mac], &[])), only_lldp, Some("lldp")),
            (
                Some(port(&[], &["52:54:00:0A:00:01"])),
                Seen {
                    lldp: false,
                    mac: true,
                },
                Some("mac"),
            ),
            (
                Some(port(&["52:54:00:0b:00:01"], &["52:54:00:0b:00:01"])),
                Seen::default(),
                None,
            ),
            (None, Seen::default(), None),
        ];
        for (seen, want, text) in cases {
            let got = Seen::on(seen.as_ref(), mac, &[mac]);
            assert_eq!(got, want, "{seen:?}");
            assert_eq!(got.annotation(), text);
            assert_eq!(Seen::parse(text), want);
        }
        assert!(Seen::parse(Some(" mac , bogus")).mac);
        // A host known only by its MACs (which NIC is on the port unknown): any
        // of them, either way.
        let host = ["52:54:00:0c:00:01", mac];
        assert_eq!(
            Seen::of_host(Some(&port(&[], &[mac])), &host).annotation(),
            Some("mac")
        );
        assert_eq!(
            Seen::of_host(Some(&port(&["52:54:00:0c:00:01"], &[mac])), &host),
            both
        );
        assert_eq!(
            Seen::of_host(
                Some(&port(&["52:54:00:0b:00:01"], &["52:54:00:0b:00:01"])),
                &host
            ),
            Seen::default(),
            "another host's NIC"
        );
        assert_eq!(
            Seen::of_host(Some(&port(&[mac], &[mac])), &[]),
            Seen::default()
        );
        // Not seen before: not judged. Seen both ways, then LLDP alone: down.
        assert_eq!(neighbor_signal(Seen::default(), both, Some(1), 30), None);
        let s = neighbor_signal(both, only_lldp, Some(140), 30).unwrap();
        assert!(!s.healthy);
        assert_eq!(s.settle, 31);
        assert!(
            neighbor_signal(only_lldp, both, Some(140), 30)
                .unwrap()
                .healthy
        );

        // Judged like the other signals: a read an age-out (31) after the port
        // landed (102) is evidence; the Switch is asked for a read then.
        let keys = fleet(1, 2);
        let (rollout, under_way) = canary_under_way();
        let with = |now: Seen, read_at| {
            let mut f = facts(&keys, &[(0, 1)], &[0], &[]);
            f[0].active_on_update = Some(102);
            f[0].neighbor = neighbor_signal(both, now, Some(read_at), 30);
            f
        };
        let f = with(only_lldp, 132);
        assert!(matches!(
            step(132, &rollout, &under_way, &f, false),
            Step::Wait { ref message, .. } if message.contains("age-out")
        ));
        assert_eq!(
            read_after(&under_way, &f, &[0], NEIGHBOR),
            BTreeMap::from([("sw0", 133)])
        );
        assert!(read_after(&under_way, &f, &[0], BGP).is_empty());
        match step(133, &rollout, &under_way, &with(only_lldp, 133), false) {
            Step::RollBack { gate, message } => {
                assert_eq!(gate, gate::NEIGHBOR_SEEN);
                assert!(message.contains("sw0-p00"), "{message}");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            step(133, &rollout, &under_way, &with(both, 133), false),
            Step::Passed
        );
        // The Switch's source down: no read after the age-out. At the deadline
        // (600 s after the commit at 100) the rollback says what it waited on.
        match step(701, &rollout, &under_way, &with(both, 120), false) {
            Step::RollBack { gate, message } => {
                assert_eq!(gate, gate::PROGRESS_DEADLINE);
                assert_eq!(
                    message,
                    "wave 1 did not pass its gates within 600 s; at the deadline wave 1: \
                     Active; the neighbours of 1 host(s) not yet read an age-out time after \
                     the change reached them"
                );
            }
            other => panic!("{other:?}"),
        }
        // Evidence complete at a look past the deadline: the gates passed.
        assert_eq!(
            step(701, &rollout, &under_way, &with(both, 700), false),
            Step::Passed
        );
    }

    #[test]
    fn a_probe_is_checked_field_by_field_asks_the_host_and_fails_only_in_a_row() {
        let with = |probe: serde_json::Value| spec(serde_json::json!({ "probe": probe }));
        let good = with(serde_json::json!({"httpGet": {"port": 8080, "path": "/healthz"}}));
        assert!(policy_errors(Some(&good)).is_empty());
        let p = probe_of(Some(&good)).unwrap();
        assert_eq!(
            (
                p.port,
                p.path.as_str(),
                p.initial_delay,
                p.period,
                p.timeout
            ),
            (8080, "/healthz", 5, 2, 2)
        );
        assert_eq!(p.failure_threshold, 3);
        assert_eq!(
            p.request("10.0.0.5"),
            "GET /healthz HTTP/1.1\r\nHost: 10.0.0.5:8080\r\nUser-Agent: patchbay-rollout-probe\r\nAccept: */*\r\nConnection: close\r\n\r\n"
        );
        assert!(p.request("fd00::5").contains("Host: [fd00::5]:8080\r\n"));
        // Each malformed field named; a path that would smuggle a header refused.
        let bad = with(
            serde_json::json!({"httpGet": {"port": 0, "path": "/a\r\nX: y"},
                              "failureThreshold": 11, "periodSeconds": 0}),
        );
        let errors = policy_errors(Some(&bad));
        let fields: Vec<&str> = errors.iter().map(|(f, _)| f.as_str()).collect();
        assert_eq!(
            fields,
            [
                "spec.rollout.probe.httpGet.port",
                "spec.rollout.probe.periodSeconds",
                "spec.rollout.probe.failureThreshold",
                "spec.rollout.probe.httpGet.path"
            ],
            "{errors:?}"
        );
        assert_eq!(probe_of(Some(&bad)), None);
        assert!(
            !policy_errors(Some(&with(
                serde_json::json!({"httpGet": {"port": 80, "path": "healthz"}})
            )))
            .is_empty()
        );
        assert!(
            !policy_errors(Some(&with(
                serde_json::json!({"httpGet": {"port": 80, "path": "/a b"}})
            )))
            .is_empty()
        );

        for (line, answered) in [
            ("HTTP/1.1 200 OK", true),
            ("HTTP/1.0 302 Found", true),
            ("HTTP/1.1 404 Not Found", false),
            ("HTTP/1.1 500 Internal Server Error", false),
            ("SSH-2.0-OpenSSH_9.2", false),
            ("", false),
        ] {
            assert_eq!(Probe::answered(line), answered, "{line}");
        }
        // Due from the initial delay after landing, then every period.
        let mut seen = Probed::default();
        assert!(!p.due(&seen, None, 200));
        assert!(!p.due(&seen, Some(100), 104));
        assert!(p.due(&seen, Some(100), 105));
        seen.record(105, false);
        assert!(!p.due(&seen, Some(100), 106));
        assert!(p.due(&seen, Some(100), 107));
        // Fewer failures in a row than the threshold are no evidence; an answer
        // resets them.
        assert_eq!(seen.signal(&p).observed_at, None);
        seen.record(107, false);
        seen.record(109, true);
        assert_eq!(
            seen.signal(&p),
            Signal {
                healthy: true,
                observed_at: Some(109),
                settle: 5
            }
        );
        for t in [111, 113] {
            seen.record(t, false);
            assert_eq!(seen.signal(&p).observed_at, None);
        }
        seen.record(115, false);
        assert_eq!(
            seen.signal(&p),
            Signal {
                healthy: false,
                observed_at: Some(115),
                settle: 5
            }
        );

        // Judged as a gate: failed in a row → rolled back, answered → passed.
        let keys = fleet(1, 2);
        let (rollout, under_way) = canary_under_way();
        let mut f = facts(&keys, &[(0, 1)], &[0], &[]);
        f[0].active_on_update = Some(100);
        f[0].probe = Some(seen.signal(&p));
        match step(115, &rollout, &under_way, &f, false) {
            Step::RollBack { gate, message } => {
                assert_eq!(gate, gate::HTTP_PROBE);
                assert!(message.contains("sw0-p00"), "{message}");
            }
            other => panic!("{other:?}"),
        }
        // A host without an address is never evidence, however long.
        let mut nowhere = Probed::default();
        for t in [105, 107, 109, 111] {
            nowhere.unaddressed(t);
        }
        assert_eq!(nowhere.signal(&p).observed_at, None);
        assert!(
            !p.due(&nowhere, Some(100), 112),
            "looked for again a period later"
        );
        let mut unanswered = Probed::default();
        unanswered.record(105, false);
        f[0].probe = Some(unanswered.signal(&p));
        assert!(matches!(
            step(105, &rollout, &under_way, &f, false),
            Step::Wait { ref message, .. } if message.contains("not yet answered")
        ));
        unanswered.record(107, true);
        f[0].probe = Some(unanswered.signal(&p));
        assert_eq!(step(107, &rollout, &under_way, &f, false), Step::Passed);
    }

    #[test]
    fn a_link_aggregation_groups_ports_move_together_a_switch_at_a_time() {
        let f = fleet(3, 2);
        let t = targets(&f);
        let policy = Policy {
            canary: Canary::Ports(1),
            max_unavailable: Amount::Count(4),
            max_unavailable_per_switch: Amount::Count(1),
        };
        // The canary: one whole switch, whatever the canary's size.
        assert_eq!(next_wave(&t, 6, &policy, true, true), [0, 1]);
        // Then as many whole switches as maxUnavailable holds (two of two ports).
        assert_eq!(next_wave(&t[2..], 6, &policy, false, true), [0, 1, 2, 3]);
        // A switch larger than maxUnavailable still moves whole, alone.
        let big = fleet(2, 6);
        assert_eq!(next_wave(&targets(&big), 12, &policy, false, true).len(), 6);
    }

    #[test]
    fn an_attempt_says_which_pins_it_was_made_under() {
        let rollout = |update: &str, attempt| RolloutStatus {
            current_revision: "old".into(),
            update_revision: update.into(),
            attempt,
            ..RolloutStatus::default()
        };
        let web = rollout("web-1", 1);
        let key = pinned_attempt(
            "apply/ab12".into(),
            &[(Some("web-1.1.2"), Some(&web)), (None, None)],
        );
        assert_eq!(key, "apply/ab12@web-1.1.2");
        assert!(attempted_under(Some(&key), "web-1.1.2"));
        assert!(!attempted_under(Some(&key), "web-1.1.1"));
        assert!(!attempted_under(Some("apply/ab12"), "web-1.1.2"));
        assert!(!attempted_under(None, "web-1.1.2"));
        let tor = rollout("tor-9", 3);
        let both = pinned_attempt(
            "i".into(),
            &[
                (Some("web-1.1.2"), Some(&web)),
                (Some("tor-9.3.1"), Some(&tor)),
            ],
        );
        assert!(attempted_under(Some(&both), "tor-9.3.1"));
        assert_eq!(
            pinned_attempt("i".into(), &[(None, None), (None, None)]),
            "i"
        );
        // The pin seen before the rollout status that gives it meaning (the port's
        // cache still shows the previous attempt, or no rollout): not in the key.
        let before = rollout("web-1", 0);
        assert_eq!(
            pinned_attempt("i".into(), &[(Some("web-1.1.2"), Some(&before))]),
            "i"
        );
        assert_eq!(
            pinned_attempt("i".into(), &[(Some("web-1.1.2"), None)]),
            "i"
        );
    }
}

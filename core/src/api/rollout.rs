//! A configuration's rollout policy (`spec.rollout`) and its progress
//! (`status.rollout`): how an edit of a SwitchPortConfiguration (or of a
//! SmartNicConfiguration) reaches the ports already carrying it, and what both kinds
//! give a rollout ([`Revisioned`]). Pure data, no I/O; what the fields mean for the
//! waves is [`crate::decide::rollout`]'s.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// How an edit rolls out. Every field is optional: what is left out comes from the
/// operator's default policy. With tenancy on, a tenant's policy may ask for no more
/// at once than the infra team's limits (the configuration is refused field by
/// field otherwise, and nothing moves).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutSpec {
    /// The first wave: `ports: N` (N ports, on as few switches as the order gives)
    /// or `oneSwitch: true` (the first switch's ports).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canary: Option<CanarySpec>,
    /// The most ports changing at once: a count, or a percentage of the ports the
    /// rollout reaches (rounded down, at least one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_unavailable: Option<IntOrString>,
    /// The most ports changing at once on any one switch (count or percentage).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_unavailable_per_switch: Option<IntOrString>,
    /// Seconds a wave's ports must have read back Active before the next wave
    /// starts (the gate's minimum wait), counted from when the last of them went
    /// Active on the new revision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 3600))]
    pub min_wait_seconds: Option<i64>,
    /// Seconds a wave may take to pass its gate; past it the wave is rolled back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 10, max = 86400))]
    pub progress_deadline_seconds: Option<i64>,
    /// True holds the rollout after the wave under way (resume: false).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub paused: bool,
    /// The revision number (`status.rollout.updateRevisionNumber`) to abort: every
    /// port it reached goes back to the previous revision, and it is not tried again
    /// (a later edit is a new revision and rolls out).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub abort_revision: Option<i64>,
    /// A check of each host of a wave after its port's change, like a Pod's HTTP
    /// probe: the gate `HttpProbe` passes once every such host answers, fails when
    /// one fails `failureThreshold` times in a row. Sent to the host's own address
    /// (a Server's `hostAddress`, else its BareMetalHost's inspected address of its
    /// boot MAC): the policy names only a port and a path, never a host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probe: Option<RolloutProbeSpec>,
}

/// A rollout's check of each host of a wave (Kubernetes probe field names).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutProbeSpec {
    /// An HTTP GET to the host: a status from 200 to 399 is an answer.
    pub http_get: HttpGetSpec,
    /// Seconds after the host's port went Active on the new revision before the
    /// first probe (default 5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 600))]
    pub initial_delay_seconds: Option<i64>,
    /// Seconds between probes of a host (default 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 60))]
    pub period_seconds: Option<i64>,
    /// Seconds a probe may take, connection included (default 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 30))]
    pub timeout_seconds: Option<i64>,
    /// Probes in a row that must fail before the gate fails (default 3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 10))]
    pub failure_threshold: Option<i64>,
}

/// Where on the host an HTTP probe goes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HttpGetSpec {
    /// The TCP port, 1-65535.
    #[schemars(range(min = 1, max = 65535))]
    pub port: i64,
    /// The path, from `/` (default `/`): at most 256 printable characters, no
    /// spaces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256), pattern(r"^/[!-~]*$"))]
    pub path: Option<String>,
}

/// The first wave of a rollout.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CanarySpec {
    /// This many ports first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 10000))]
    pub ports: Option<i64>,
    /// True: the ports of one switch first (within maxUnavailablePerSwitch).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub one_switch: bool,
}

/// A configuration's status.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConfigurationStatus {
    /// The metadata.generation the rollout controller last acted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Where its last edit stands on the ports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<RolloutStatus>,
    /// Conditions (Kubernetes conventions): `Progressing` (True while a rollout
    /// moves, waits on a gate or puts ports back; False with reason `RolledBack`,
    /// `Aborted`, `Paused` or `Refused`), `Complete`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// A rollout's progress, stored so that an operator killed mid-rollout resumes it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutStatus {
    /// The ControllerRevision ports carry unless the rollout moved them (the last
    /// revision that completed).
    pub current_revision: String,
    /// Its number.
    pub current_revision_number: i64,
    /// The ControllerRevision of the spec (the one rolling out, or done).
    pub update_revision: String,
    /// Its number.
    pub update_revision_number: i64,
    /// Which rollout of this configuration this is (counts up): a port moved by its
    /// wave N carries `patchbay.dev/rollout: <updateRevision>.<attempt>.<N>`.
    pub attempt: i64,
    /// `Progressing`, `Paused`, `Complete`, `RollingBack` then `RolledBack` (a
    /// gate failed: the wave goes back), `Aborting` then `Aborted`
    /// (spec.rollout.abortRevision: every port moved goes back), `Refused` (the
    /// policy is above the infra team's limits).
    pub phase: String,
    /// Waves committed so far (the canary is wave 1); while rolling back, the wave
    /// going back. A wave's ports are its pins, not listed here.
    pub wave: i64,
    /// When the wave under way was committed (RFC 3339). Written as null between
    /// waves, so a merge patch removes it.
    #[serde(default)]
    pub wave_committed_at: Option<String>,
    /// Ports carrying this configuration.
    pub ports: i64,
    /// Of those, on the update revision and read back Active with it.
    pub updated_ports: i64,
    /// Switches with a port on the update revision, of the switches with ports
    /// carrying this configuration (`2/4`); of a SmartNicConfiguration, SmartNICs
    /// (their ProviderSwitches).
    pub switches: String,
    /// What the rollout waits on, or why it stopped.
    #[serde(default)]
    pub message: String,
}

/// A configuration whose edits roll out: what a rollout reads of it and what a
/// port carrying a revision of it needs. Implemented by SwitchPortConfiguration and
/// SmartNicConfiguration.
pub trait Revisioned: kube::Resource<DynamicType = ()> + Clone {
    /// Its spec (what a ControllerRevision stores, without `rollout`).
    type Spec: Serialize + serde::de::DeserializeOwned + Clone;
    /// The label on its ControllerRevisions besides its name's: `None` for a
    /// SwitchPortConfiguration (the first kind, whose revisions carry only the
    /// name), the kind for the others.
    const REVISION_KIND: Option<&'static str>;
    /// Its spec, to put a revision's in its place.
    fn spec_mut(&mut self) -> &mut Self::Spec;
    /// SHA-256 of what a port carries of it (everything but `rollout`): its
    /// revision's identity.
    fn content_hash(&self) -> String;
    /// Its spec without `rollout`: a revision's data.
    fn revision_spec(&self) -> Self::Spec;
    /// Its rollout policy.
    fn policy(&self) -> Option<&RolloutSpec>;
    /// Its rollout's progress (`status.rollout`).
    fn rollout_status(&self) -> Option<&RolloutStatus>;
}

/// Implements [`Revisioned`] for a kind whose spec has `rollout` and
/// `content_hash()`, and whose status has `rollout`.
macro_rules! revisioned {
    ($kind:ty, $spec:ty, $label:expr) => {
        impl Revisioned for $kind {
            type Spec = $spec;
            const REVISION_KIND: Option<&'static str> = $label;
            fn spec_mut(&mut self) -> &mut Self::Spec {
                &mut self.spec
            }
            fn content_hash(&self) -> String {
                self.spec.content_hash()
            }
            fn revision_spec(&self) -> Self::Spec {
                Self::Spec {
                    rollout: None,
                    ..self.spec.clone()
                }
            }
            fn policy(&self) -> Option<&RolloutSpec> {
                self.spec.rollout.as_ref()
            }
            fn rollout_status(&self) -> Option<&RolloutStatus> {
                self.status.as_ref()?.rollout.as_ref()
            }
        }
    };
}

revisioned!(
    super::SwitchPortConfiguration,
    super::SwitchPortConfigurationSpec,
    None
);
revisioned!(
    super::SmartNicConfiguration,
    super::SmartNicConfigurationSpec,
    Some("SmartNicConfiguration")
);

// A Switch's revisions are of its port entries (`SwitchSpec::content_hash`); a
// revision stores the whole spec but `rollout`, and a port reads only its own
// entry from it.
revisioned!(super::Switch, super::SwitchSpec, Some("Switch"));

//! The names patchbay writes on objects and reads back: finalizers, labels,
//! annotations, field managers and well-known object names. One place, so every
//! controller, the webhook and the CLI agree on them. Constants only.

/// Annotation on a SwitchPort claimed by a SmartNicPort: `<namespace>/<name>`.
pub const CHAINED_FROM_ANNOTATION: &str = "patchbay.dev/chained-from";

/// The host's phase, as patchbay last moved it.
pub const PHASE_ANNOTATION: &str = "patchbay.dev/phase";

/// How its ports stand: `ready/total`, then what holds them back.
pub const PORTS_ANNOTATION: &str = "patchbay.dev/ports";

/// Annotation (on a SwitchPort or its Switch): delete without touching the device,
/// for devices that are gone for good.
pub const SKIP_CLEANUP_ANNOTATION: &str = "patchbay.dev/skip-device-cleanup";

/// Label on every SwitchPort: the Switch it belongs to.
pub const SWITCH_LABEL: &str = "patchbay.dev/switch";

/// The ConfigMap, in each served namespace, listing what it is granted.
pub const GRANTS_CONFIGMAP: &str = "patchbay-grants";

/// The annotation a host puts on each port it drives: `Server/<name>` or
/// `BareMetalHost/<namespace>/<name>`.
pub const HOST_ANNOTATION: &str = "patchbay.dev/host";

/// The installer's signal on a Server without a BareMetalHost: `"true"` once the
/// host is installed. Consumed (removed) when the Server is released.
pub const PROVISIONED_ANNOTATION: &str = "patchbay.dev/provisioned";

/// Metal3's pause annotation: while present, the baremetal-operator leaves the host
/// alone.
pub const PAUSED_ANNOTATION: &str = "baremetalhost.metal3.io/paused";

/// The value patchbay's own pause carries (CAPM3's, say, carries another).
pub const PAUSED_BY_PATCHBAY: &str = "patchbay.dev/waiting-for-ports";

/// The label the infra team puts on a configuration of the infra namespace that
/// tenants may name (`"true"`).
pub const SHARED_LABEL: &str = "patchbay.dev/shared";

/// Finalizer the controllers put on the objects whose deletion needs device cleanup.
pub const FINALIZER: &str = "patchbay.dev/cleanup";

/// The field manager of patchbay's server-side applies.
pub const MANAGER: &str = "patchbay";

/// Annotation on a SwitchPort (or SmartNicPort) a rollout moved: `<updateRevision>.<attempt>.<wave>`
/// of its configuration's `status.rollout`. While it names the rollout under way,
/// the port carries the update revision; otherwise the configuration's current
/// revision.
pub const ROLLOUT_ANNOTATION: &str = "patchbay.dev/rollout";

/// Annotation on a SwitchPort a rollout of its Switch's port entries moved:
/// `<updateRevision>.<attempt>.<wave>` of the Switch's `status.rollout`. While it
/// names the rollout under way, the port's entry is the update revision's; otherwise
/// the current revision's (a port that carries nothing takes its entry at once).
pub const SWITCH_ROLLOUT_ANNOTATION: &str = "patchbay.dev/switch-rollout";

/// [`ROLLOUT_SEEN_ANNOTATION`] of a Switch's rollout.
pub const SWITCH_ROLLOUT_SEEN_ANNOTATION: &str = "patchbay.dev/switch-rollout-seen";

/// Label on the ControllerRevisions of a configuration (SwitchPortConfiguration
/// or SmartNicConfiguration) or of a Switch's port entries: its name.
pub const CONFIGURATION_LABEL: &str = "patchbay.dev/configuration";

/// Label on the ControllerRevisions of a SmartNicConfiguration or a Switch, besides
/// [`CONFIGURATION_LABEL`]: `SmartNicConfiguration` or `Switch` (a
/// SwitchPortConfiguration's carry none, as they did before the other kinds rolled
/// out).
pub const CONFIGURATION_KIND_LABEL: &str = "patchbay.dev/configuration-kind";

/// How many revisions of a configuration are kept (the current and update ones
/// always), like a Deployment's default `revisionHistoryLimit`.
pub const REVISION_HISTORY: usize = 10;

/// Annotation on a Switch a rollout waits on for BGP evidence: an RFC 3339 time. The
/// first read of its speaker at or after it writes `status.bgp` (with `readAt`)
/// even when nothing changed.
pub const BGP_READ_AFTER_ANNOTATION: &str = "patchbay.dev/bgp-read-after";

/// Annotation on a Switch a rollout waits on for neighbour evidence: an RFC 3339
/// time. The first read of its neighbour sources at or after it writes
/// `status.neighbors` (with `neighborsReadAt`) even when nothing changed.
pub const NEIGHBORS_READ_AFTER_ANNOTATION: &str = "patchbay.dev/neighbors-read-after";

/// Annotation on a SwitchPort a rollout pinned, written with the pin: how its host's
/// NIC was seen on the port just before the port moved (`lldp`, `mac` or
/// `lldp,mac`; absent: not seen, or its Switch reads no neighbours). The
/// `NeighborSeen` gate asks for the same after the change.
pub const ROLLOUT_SEEN_ANNOTATION: &str = "patchbay.dev/rollout-seen";

//! The operator's metrics and readiness: one [`Metrics`] value per operator, made by
//! whoever starts it and handed to the controllers, the switch workers and the HTTP
//! server (no process-wide registry: two operators in one test process count apart).
//! prometheus-client families with typed label sets, so a label can be neither
//! missing nor misplaced; label values are bounded (controller names, port states,
//! backends, error categories — never object names or error text). State only, no
//! I/O (the endpoint is [`crate::serve`]; the `process_*` families are read by
//! [`crate::process_metrics`] at each scrape).
//!
//! **Known series at 0.** As Prometheus advises (and controller-runtime does for its
//! reconcile counters), every label set known in advance is exported at 0 before its
//! first event, so dashboards show 0 rather than "no data" and `rate()` sees the
//! first event: the ones [`Known`] lists, given by whoever makes the metrics
//! ([`crate::probes::Probes`]), and each controller's `controller` × `result`
//! when it starts ([`Metrics::controller_started`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

const SECONDS: [f64; 14] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];
const SIZES: [f64; 9] = [1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0];

/// `controller`, `result` (`ok`, or the error's category).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReconcileLabels {
    /// The controller (`SwitchPort`, `Switch`, …).
    pub controller: &'static str,
    /// `ok` or the error's category.
    pub result: &'static str,
}

/// `controller`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabel {
    /// The controller.
    pub controller: &'static str,
}

/// `kind`, `state`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PortStateLabels {
    /// `SwitchPort` or `SmartNicPort`.
    pub kind: String,
    /// The state, `(none)` before the controller has seen the port.
    pub state: String,
}

/// `from`, `to`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TransitionLabels {
    /// The state left (`(none)` for a new port).
    pub from: String,
    /// The state entered.
    pub to: String,
}

/// `backend`, `outcome` (`changed`, `unchanged`, or the error's category).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OperationLabels {
    /// The backend.
    pub backend: &'static str,
    /// What the operation did.
    pub outcome: &'static str,
}

/// `backend`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BackendLabel {
    /// The backend.
    pub backend: &'static str,
}

/// `outcome`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabel {
    /// `ok` or a failure category.
    pub outcome: &'static str,
}

/// `kind`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabel {
    /// `SwitchPort` or `SmartNicPort`.
    pub kind: &'static str,
}

/// `category`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CategoryLabel {
    /// The failure's category.
    pub category: &'static str,
}

/// `answer` (`allowed` or `denied`).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AnswerLabel {
    /// The webhook's answer.
    pub answer: &'static str,
}

type Seconds<L> = Family<L, Histogram, fn() -> Histogram>;
type GaugeF<L> = Family<L, Gauge<f64, AtomicU64>>;

fn seconds() -> Histogram {
    Histogram::new(SECONDS)
}

fn sizes() -> Histogram {
    Histogram::new(SIZES)
}

/// The label values known in advance, each exported at 0 ([`Metrics::with_known`]).
#[derive(Debug, Clone, Default)]
pub struct Known {
    /// Every failure category (`patchbay_failures_total`, and with `ok` the
    /// outcomes of neighbour reads and BGP speaker passes).
    pub failure_categories: Vec<&'static str>,
    /// Every device error category (with `changed` and `unchanged`, the outcomes of
    /// `patchbay_device_operations_total`).
    pub device_categories: Vec<&'static str>,
    /// Every backend.
    pub backends: Vec<&'static str>,
    /// The port kinds (`SwitchPort`, `SmartNicPort`).
    pub port_kinds: Vec<&'static str>,
    /// The port states, `(none)` first.
    pub port_states: Vec<String>,
    /// What drift is repaired on (the port kinds, and BGP neighbours).
    pub drift_kinds: Vec<&'static str>,
}

/// Every family, registered once, and whether the operator is ready.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    /// Reconciles, by controller and result.
    pub reconciles: Family<ReconcileLabels, Counter>,
    /// How long reconciles take, by controller.
    pub reconcile_seconds: Seconds<ControllerLabel>,
    /// Ports by kind and state.
    pub ports: GaugeF<PortStateLabels>,
    /// Port state transitions.
    pub transitions: Family<TransitionLabels, Counter>,
    /// Port operations sent to devices, by backend and outcome.
    pub device_operations: Family<OperationLabels, Counter>,
    /// How long one batch takes on the device.
    pub device_seconds: Seconds<BackendLabel>,
    /// Port operations per batch.
    pub batch_size: Family<BackendLabel, Histogram, fn() -> Histogram>,
    /// Device sessions open now.
    pub sessions: Family<BackendLabel, Gauge>,
    /// Drift sweeps that read their switch (one device session each).
    pub drift_sweeps: Family<BackendLabel, Counter>,
    /// Drift found by sweeps.
    pub drift_found: Family<BackendLabel, Counter>,
    /// Neighbour reads of Switches (one session of each source), by result.
    pub neighbor_reads: Family<OutcomeLabel, Counter>,
    /// Passes over a Switch's BGP speaker (a read, and a change when one is due), by
    /// result.
    pub bgp_passes: Family<OutcomeLabel, Counter>,
    /// Drift repaired.
    pub drift_repaired: Family<KindLabel, Counter>,
    /// Failed port steps, by category.
    pub failures: Family<CategoryLabel, Counter>,
    /// 1 while this replica leads.
    pub leader: Gauge,
    /// The SwitchPort runner's queue, as the runner last left it (read at each
    /// scrape: [`QueueCollector`]).
    pub port_queue: Arc<QueueWatch>,
    /// How long the admission webhook takes to answer.
    pub admission_seconds: Seconds<AnswerLabel>,
    /// The port gauge's label sets last set (see [`Metrics::set_ports`]).
    port_states: parking_lot::Mutex<Vec<PortStateLabels>>,
    /// The port gauge's label sets known in advance: kept at 0, never removed.
    known_ports: Vec<PortStateLabels>,
    ready: AtomicBool,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Every family registered, nothing counted, not ready.
    pub fn new() -> Self {
        let mut m = Metrics {
            registry: Registry::default(),
            reconciles: Family::default(),
            reconcile_seconds: Family::new_with_constructor(seconds),
            ports: Family::default(),
            transitions: Family::default(),
            device_operations: Family::default(),
            device_seconds: Family::new_with_constructor(seconds),
            batch_size: Family::new_with_constructor(sizes),
            sessions: Family::default(),
            drift_sweeps: Family::default(),
            neighbor_reads: Family::default(),
            bgp_passes: Family::default(),
            drift_found: Family::default(),
            drift_repaired: Family::default(),
            failures: Family::default(),
            leader: Gauge::default(),
            port_queue: Default::default(),
            admission_seconds: Family::new_with_constructor(seconds),
            port_states: parking_lot::Mutex::default(),
            known_ports: Vec::new(),
            ready: AtomicBool::new(false),
        };
        let r = &mut m.registry;
        r.register(
            "patchbay_reconciles",
            "Reconciles, by controller and result (ok or the error category)",
            m.reconciles.clone(),
        );
        r.register(
            "patchbay_reconcile_duration_seconds",
            "How long a reconcile takes, by controller",
            m.reconcile_seconds.clone(),
        );
        r.register(
            "patchbay_ports",
            "Ports by kind (SwitchPort, SmartNicPort) and state ((none) before the controller has seen one)",
            m.ports.clone(),
        );
        r.register(
            "patchbay_port_transitions",
            "Port state transitions, by from and to state",
            m.transitions.clone(),
        );
        r.register(
            "patchbay_device_operations",
            "Port operations sent to devices, by backend and outcome (changed, unchanged, or the error category)",
            m.device_operations.clone(),
        );
        r.register(
            "patchbay_device_batch_duration_seconds",
            "How long one batch (one device session: apply and verifying read) takes, by backend",
            m.device_seconds.clone(),
        );
        r.register(
            "patchbay_batch_size",
            "Port operations per batch, by backend",
            m.batch_size.clone(),
        );
        r.register(
            "patchbay_device_sessions_open",
            "Device sessions (batches or drift sweeps) running now, by backend",
            m.sessions.clone(),
        );
        r.register(
            "patchbay_drift_sweeps",
            "Drift sweeps (and reachability checks) that read their switch, one device session each, by backend",
            m.drift_sweeps.clone(),
        );
        r.register(
            "patchbay_neighbor_reads",
            "Reads of a Switch's neighbour sources (spec.neighbors), one session of each source, by outcome (ok or a failure category)",
            m.neighbor_reads.clone(),
        );
        r.register(
            "patchbay_bgp_speaker_passes",
            "Passes over a Switch's BGP speaker (spec.bgp.speaker: one session to read, one more when something changes), by outcome (ok or a failure category); a speaker that failed is tried again after intervalSeconds, whatever wakes its Switch",
            m.bgp_passes.clone(),
        );
        r.register(
            "patchbay_drift_found",
            "Drift found by sweeps: each time a port in sync (or just repaired) is found differing from its applied configuration",
            m.drift_found.clone(),
        );
        r.register(
            "patchbay_drift_repaired",
            "Drift repaired: each time a drifted port was applied again successfully",
            m.drift_repaired.clone(),
        );
        r.register(
            "patchbay_failures",
            "Failed port steps, by category",
            m.failures.clone(),
        );
        r.register(
            "patchbay_leader",
            "1 while this replica holds the leader lease (or runs without leader election)",
            m.leader.clone(),
        );
        r.register(
            "patchbay_admission_duration_seconds",
            "How long a validating webhook takes to answer one AdmissionReview, by answer (allowed, denied, or warned: allowed with warnings)",
            m.admission_seconds.clone(),
        );
        r.register_collector(Box::new(crate::process_metrics::ProcessCollector));
        r.register_collector(Box::new(QueueCollector(m.port_queue.clone())));
        for answer in ["allowed", "denied", "warned"] {
            let _ = m.admission_seconds.get_or_create(&AnswerLabel { answer });
        }
        m
    }

    /// [`Metrics::new`] with every label set of `known` exported at 0.
    pub fn with_known(known: &Known) -> Self {
        let mut m = Self::new();
        m.known_ports = known
            .port_kinds
            .iter()
            .flat_map(|kind| {
                known.port_states.iter().map(|state| PortStateLabels {
                    kind: (*kind).to_owned(),
                    state: state.clone(),
                })
            })
            .collect();
        for labels in &m.known_ports {
            m.ports.get_or_create(labels).set(0.0);
        }
        // Every change of state, (none) to each state and each state to another.
        for from in &known.port_states {
            for to in known.port_states.iter().skip(1).filter(|to| *to != from) {
                let _ = m.transitions.get_or_create(&TransitionLabels {
                    from: from.clone(),
                    to: to.clone(),
                });
            }
        }
        for &backend in &known.backends {
            let b = BackendLabel { backend };
            let _ = m.device_seconds.get_or_create(&b);
            let _ = m.batch_size.get_or_create(&b);
            let _ = m.sessions.get_or_create(&b);
            let _ = m.drift_sweeps.get_or_create(&b);
            let _ = m.drift_found.get_or_create(&b);
            for &outcome in ["changed", "unchanged"]
                .iter()
                .chain(&known.device_categories)
            {
                let _ = m
                    .device_operations
                    .get_or_create(&OperationLabels { backend, outcome });
            }
        }
        for &category in &known.failure_categories {
            let _ = m.failures.get_or_create(&CategoryLabel { category });
        }
        for &outcome in std::iter::once(&"ok").chain(&known.failure_categories) {
            let _ = m.neighbor_reads.get_or_create(&OutcomeLabel { outcome });
            let _ = m.bgp_passes.get_or_create(&OutcomeLabel { outcome });
        }
        for &kind in &known.drift_kinds {
            let _ = m.drift_repaired.get_or_create(&KindLabel { kind });
        }
        m
    }

    /// Controller `controller` started: its reconcile count for `ok` and for each of
    /// `errors` (the error categories it may count), and its duration, at 0.
    pub fn controller_started(&self, controller: &'static str, errors: &[&'static str]) {
        for &result in std::iter::once(&"ok").chain(errors) {
            let _ = self
                .reconciles
                .get_or_create(&ReconcileLabels { controller, result });
        }
        let _ = self
            .reconcile_seconds
            .get_or_create(&ControllerLabel { controller });
    }

    /// Every family in the OpenMetrics text format (which Prometheus reads; served
    /// as `application/openmetrics-text`).
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }

    /// Replaces every value of the port gauge (the counts, computed whole): the
    /// new counts are set first, then the states no port is in any more go, so a
    /// scrape in between never sees the ports missing.
    pub fn set_ports(&self, counts: impl IntoIterator<Item = ((String, String), f64)>) {
        let mut shown = self.port_states.lock();
        let now: Vec<PortStateLabels> = counts
            .into_iter()
            .map(|((kind, state), n)| {
                let labels = PortStateLabels { kind, state };
                self.ports.get_or_create(&labels).set(n);
                labels
            })
            .collect();
        for gone in shown.iter().filter(|l| !now.contains(l)) {
            if self.known_ports.contains(gone) {
                self.ports.get_or_create(gone).set(0.0);
            } else {
                self.ports.remove(gone);
            }
        }
        *shown = now;
    }

    /// Drift repairs of ports of `kind` so far (tests).
    pub fn drift_repaired(&self, kind: &'static str) -> u64 {
        self.drift_repaired
            .get(&KindLabel { kind })
            .map_or(0, |c| c.get())
    }

    /// Marks the caches synced (the operator is ready) or not.
    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::SeqCst);
    }

    /// Whether the caches are synced.
    pub fn ready(&self) -> bool {
        self.ready.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_render_in_the_openmetrics_text_format() {
        let m = Metrics::new();
        let ok = ReconcileLabels {
            controller: "TestKind",
            result: "ok",
        };
        m.reconciles.get_or_create(&ok).inc();
        m.reconciles.get_or_create(&ok).inc();
        let c = ControllerLabel {
            controller: "TestKind",
        };
        m.reconcile_seconds.get_or_create(&c).observe(0.003);
        m.reconcile_seconds.get_or_create(&c).observe(2.0);
        m.sessions
            .get_or_create(&BackendLabel {
                backend: "test\"backend",
            })
            .set(1);
        let text = m.render();
        assert!(
            text.contains("patchbay_reconciles_total{controller=\"TestKind\",result=\"ok\"} 2\n"),
            "{text}"
        );
        assert!(text.contains(
            "patchbay_reconcile_duration_seconds_bucket{le=\"0.005\",controller=\"TestKind\"} 1\n"
        ), "{text}");
        assert!(text.contains(
            "patchbay_reconcile_duration_seconds_bucket{le=\"+Inf\",controller=\"TestKind\"} 2\n"
        ));
        assert!(
            text.contains("patchbay_reconcile_duration_seconds_count{controller=\"TestKind\"} 2\n")
        );
        assert!(
            text.contains("patchbay_device_sessions_open{backend=\"test\\\"backend\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("# TYPE patchbay_device_sessions_open gauge\n"),
            "{text}"
        );
        assert!(!text.contains(".."), "help ends with one period: {text}");
        assert!(text.ends_with("# EOF\n"));
        m.set_ports([(("TestPort".into(), "Idle".into()), 3.0)]);
        m.set_ports([(("TestPort".into(), "Active".into()), 3.0)]);
        let text = m.render();
        assert!(!text.contains("state=\"Idle\""), "replaced whole: {text}");
        assert!(
            text.contains("patchbay_ports{kind=\"TestPort\",state=\"Active\"} 3.0\n"),
            "{text}"
        );
        // Two operators in one process count apart.
        assert!(!Metrics::new().render().contains("TestKind"));
    }

    #[test]
    fn known_series_are_at_0_from_the_start_and_a_known_port_state_goes_back_to_0() {
        let m = Metrics::with_known(&Known {
            failure_categories: vec!["Boom"],
            device_categories: vec!["DeviceTimeout"],
            backends: vec!["ssh"],
            port_kinds: vec!["SwitchPort"],
            port_states: vec!["(none)".into(), "Idle".into(), "Active".into()],
            drift_kinds: vec!["SwitchPort"],
        });
        m.controller_started("Switch", &["KubernetesError"]);
        let text = m.render();
        for line in [
            "patchbay_failures_total{category=\"Boom\"} 0\n",
            "patchbay_neighbor_reads_total{outcome=\"ok\"} 0\n",
            "patchbay_bgp_speaker_passes_total{outcome=\"Boom\"} 0\n",
            "patchbay_device_operations_total{backend=\"ssh\",outcome=\"DeviceTimeout\"} 0\n",
            "patchbay_device_operations_total{backend=\"ssh\",outcome=\"unchanged\"} 0\n",
            "patchbay_batch_size_count{backend=\"ssh\"} 0\n",
            "patchbay_drift_repaired_total{kind=\"SwitchPort\"} 0\n",
            "patchbay_port_transitions_total{from=\"(none)\",to=\"Idle\"} 0\n",
            "patchbay_port_transitions_total{from=\"Active\",to=\"Idle\"} 0\n",
            "patchbay_ports{kind=\"SwitchPort\",state=\"Active\"} 0.0\n",
            "patchbay_reconciles_total{controller=\"Switch\",result=\"KubernetesError\"} 0\n",
            "patchbay_reconcile_duration_seconds_count{controller=\"Switch\"} 0\n",
            "patchbay_admission_duration_seconds_count{answer=\"denied\"} 0\n",
            "patchbay_admission_duration_seconds_count{answer=\"warned\"} 0\n",
        ] {
            assert!(text.contains(line), "{line} in\n{text}");
        }
        assert!(
            !text.contains("to=\"(none)\""),
            "nothing goes back to (none)"
        );
        // A known state no port is in any more reads 0; another one goes.
        m.set_ports([(("SwitchPort".into(), "Active".into()), 2.0)]);
        m.set_ports([(("SwitchPort".into(), "Weird".into()), 1.0)]);
        m.set_ports([(("SwitchPort".into(), "Idle".into()), 1.0)]);
        let text = m.render();
        assert!(text.contains("patchbay_ports{kind=\"SwitchPort\",state=\"Active\"} 0.0\n"));
        assert!(!text.contains("Weird"), "{text}");
    }
}

/// What a reconcile runner's queue holds, as the runner last left it: how many keys
/// wait for a slot, since when the longest-waiting one waits, since when the
/// longest-running reconcile runs. Ages are taken at the scrape, so a runner that
/// stopped turning shows them growing.
#[derive(Debug, Default)]
pub struct QueueWatch(parking_lot::Mutex<QueueSnapshot>);

/// One [`QueueWatch`] reading.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct QueueSnapshot {
    /// Keys woken and waiting for a slot.
    pub depth: usize,
    /// Since when the longest-waiting key waits.
    pub oldest_waiting: Option<std::time::Instant>,
    /// Since when the longest-running reconcile runs.
    pub longest_running: Option<std::time::Instant>,
}

impl QueueWatch {
    /// The runner's queue as it is now.
    pub fn publish(&self, snapshot: QueueSnapshot) {
        *self.0.lock() = snapshot;
    }

    /// The last reading.
    pub fn read(&self) -> QueueSnapshot {
        *self.0.lock()
    }
}

/// The SwitchPort runner's queue families, computed at each scrape from its
/// [`QueueWatch`] (controller-runtime's workqueue families, by the same meaning:
/// `workqueue_depth`, `workqueue_longest_running_processor_seconds`; the oldest wait
/// in place of its `workqueue_unfinished_work_seconds` sum).
#[derive(Debug)]
pub struct QueueCollector(pub Arc<QueueWatch>);

impl prometheus_client::collector::Collector for QueueCollector {
    fn encode(
        &self,
        mut encoder: prometheus_client::encoding::DescriptorEncoder,
    ) -> Result<(), std::fmt::Error> {
        use prometheus_client::encoding::EncodeMetric;
        use prometheus_client::metrics::gauge::ConstGauge;
        let q = self.0.read();
        let now = std::time::Instant::now();
        let age = |since: Option<std::time::Instant>| {
            since.map_or(0.0, |s| now.saturating_duration_since(s).as_secs_f64())
        };
        let depth = ConstGauge::new(q.depth as i64);
        depth.encode(encoder.encode_descriptor(
            "patchbay_port_queue_depth",
            "SwitchPorts woken and waiting for a reconcile slot",
            None,
            depth.metric_type(),
        )?)?;
        for (name, help, value) in [
            (
                "patchbay_port_queue_oldest_wait_seconds",
                "How long the SwitchPort waiting longest for a reconcile slot has waited (a woken port, or a retry that came due); 0 when none waits",
                age(q.oldest_waiting),
            ),
            (
                "patchbay_port_queue_longest_running_seconds",
                "How long the longest-running SwitchPort reconcile has run; 0 when none runs",
                age(q.longest_running),
            ),
        ] {
            let g = ConstGauge::new(value);
            g.encode(encoder.encode_descriptor(name, help, None, g.metric_type())?)?;
        }
        Ok(())
    }
}

//! The operator's metrics: a small registry of counters, gauges and histograms
//! whose label values are bounded (controller names, port states, backends, error
//! categories — never object names or error text), rendered in the Prometheus text
//! format. State only, no I/O (the endpoint is [`crate::serve`]). Process-wide, like
//! a Prometheus default registry: the controllers, the loop every port runs and the
//! switch workers record into it from wherever they are.

use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

/// A metric family: its name, type and help.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Family {
    /// The name (`patchbay_…`).
    pub name: &'static str,
    /// `counter`, `gauge` or `histogram`.
    pub kind: Kind,
    /// One line of help.
    pub help: &'static str,
    /// The label names, in order.
    pub labels: &'static [&'static str],
}

/// The type of a family.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Kind {
    /// Only goes up.
    Counter,
    /// Goes up and down.
    Gauge,
    /// Observations in buckets (seconds, or a size).
    Histogram(&'static [f64]),
}

const SECONDS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];
const SIZES: &[f64] = &[1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0];

/// Reconciles per controller and result (`ok`, or the error's category).
pub const RECONCILES: Family = Family {
    name: "patchbay_reconciles_total",
    kind: Kind::Counter,
    help: "Reconciles, by controller and result (ok or the error category).",
    labels: &["controller", "result"],
};
/// How long reconciles take, per controller.
pub const RECONCILE_SECONDS: Family = Family {
    name: "patchbay_reconcile_duration_seconds",
    kind: Kind::Histogram(SECONDS),
    help: "How long a reconcile takes, by controller.",
    labels: &["controller"],
};
/// Ports per kind and state.
pub const PORTS: Family = Family {
    name: "patchbay_ports",
    kind: Kind::Gauge,
    help: "Ports by kind (SwitchPort, SmartNicPort) and state ((none) before the controller has seen one).",
    labels: &["kind", "state"],
};
/// Port state transitions.
pub const TRANSITIONS: Family = Family {
    name: "patchbay_port_transitions_total",
    kind: Kind::Counter,
    help: "Port state transitions, by from and to state.",
    labels: &["from", "to"],
};
/// Device operations per backend and outcome.
pub const DEVICE_OPERATIONS: Family = Family {
    name: "patchbay_device_operations_total",
    kind: Kind::Counter,
    help: "Port operations sent to devices, by backend and outcome (changed, unchanged, or the error category).",
    labels: &["backend", "outcome"],
};
/// How long a batch takes on the device.
pub const DEVICE_SECONDS: Family = Family {
    name: "patchbay_device_batch_duration_seconds",
    kind: Kind::Histogram(SECONDS),
    help: "How long one batch (one device session: apply and verifying read) takes, by backend.",
    labels: &["backend"],
};
/// Ports per batch.
pub const BATCH_SIZE: Family = Family {
    name: "patchbay_batch_size",
    kind: Kind::Histogram(SIZES),
    help: "Port operations per batch, by backend.",
    labels: &["backend"],
};
/// Device sessions open now.
pub const SESSIONS: Family = Family {
    name: "patchbay_device_sessions_open",
    kind: Kind::Gauge,
    help: "Device sessions (batches or drift sweeps) running now, by backend.",
    labels: &["backend"],
};
/// Drift found by sweeps.
pub const DRIFT_FOUND: Family = Family {
    name: "patchbay_drift_found_total",
    kind: Kind::Counter,
    help: "Drift found by sweeps: each time a port in sync (or just repaired) is found differing from its applied configuration.",
    labels: &["backend"],
};
/// Drift repaired.
pub const DRIFT_REPAIRED: Family = Family {
    name: "patchbay_drift_repaired_total",
    kind: Kind::Counter,
    help: "Drift repaired: each time a drifted port was applied again successfully.",
    labels: &["kind"],
};
/// Port step failures.
pub const FAILURES: Family = Family {
    name: "patchbay_failures_total",
    kind: Kind::Counter,
    help: "Failed port steps, by category.",
    labels: &["category"],
};
/// Whether this replica leads.
pub const LEADER: Family = Family {
    name: "patchbay_leader",
    kind: Kind::Gauge,
    help: "1 while this replica holds the leader lease (or runs without leader election).",
    labels: &[],
};

/// How long the admission webhook takes to answer, by answer.
pub const ADMISSION_SECONDS: Family = Family {
    name: "patchbay_admission_duration_seconds",
    kind: Kind::Histogram(SECONDS),
    help: "How long the validating webhook takes to answer one AdmissionReview, by answer (allowed or denied).",
    labels: &["answer"],
};

/// Every family, in the order they are rendered.
pub const FAMILIES: &[Family] = &[
    RECONCILES,
    RECONCILE_SECONDS,
    PORTS,
    TRANSITIONS,
    DEVICE_OPERATIONS,
    DEVICE_SECONDS,
    BATCH_SIZE,
    SESSIONS,
    DRIFT_FOUND,
    DRIFT_REPAIRED,
    FAILURES,
    LEADER,
    ADMISSION_SECONDS,
];

#[derive(Debug, Clone, Default)]
struct Histogram {
    buckets: Vec<u64>,
    sum: f64,
    count: u64,
}

#[derive(Default)]
struct Registry {
    values: BTreeMap<(&'static str, Vec<String>), f64>,
    histograms: BTreeMap<(&'static str, Vec<String>), Histogram>,
}

fn registry() -> parking_lot::MutexGuard<'static, Registry> {
    static REGISTRY: OnceLock<Mutex<Registry>> = OnceLock::new();
    REGISTRY.get_or_init(Mutex::default).lock()
}

fn key(family: Family, labels: &[&str]) -> (&'static str, Vec<String>) {
    debug_assert_eq!(family.labels.len(), labels.len(), "{}", family.name);
    (
        family.name,
        labels.iter().map(|l| (*l).to_owned()).collect(),
    )
}

/// Adds 1 to a counter.
pub fn inc(family: Family, labels: &[&str]) {
    add(family, labels, 1.0);
}

/// Adds `by` to a counter or gauge.
pub fn add(family: Family, labels: &[&str], by: f64) {
    *registry().values.entry(key(family, labels)).or_default() += by;
}

/// Sets a gauge.
pub fn set(family: Family, labels: &[&str], value: f64) {
    registry().values.insert(key(family, labels), value);
}

/// Replaces every value of a gauge family (the port counts, computed whole).
pub fn set_all(family: Family, values: &[(Vec<String>, f64)]) {
    let mut r = registry();
    r.values.retain(|(name, _), _| *name != family.name);
    for (labels, v) in values {
        r.values.insert((family.name, labels.clone()), *v);
    }
}

/// Records one observation of a histogram.
pub fn observe(family: Family, labels: &[&str], value: f64) {
    let Kind::Histogram(bounds) = family.kind else {
        return;
    };
    let mut r = registry();
    let h = r.histograms.entry(key(family, labels)).or_default();
    if h.buckets.is_empty() {
        h.buckets = vec![0; bounds.len()];
    }
    for (i, b) in bounds.iter().enumerate() {
        if value <= *b {
            h.buckets[i] += 1;
        }
    }
    h.sum += value;
    h.count += 1;
}

/// The value of a counter or gauge (tests and the health endpoint).
pub fn value(family: Family, labels: &[&str]) -> f64 {
    registry()
        .values
        .get(&key(family, labels))
        .copied()
        .unwrap_or(0.0)
}

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn label_text(names: &[&str], values: &[String], extra: Option<(&str, String)>) -> String {
    let mut parts: Vec<String> = names
        .iter()
        .zip(values)
        .map(|(n, v)| format!("{n}=\"{}\"", escape(v)))
        .collect();
    if let Some((n, v)) = extra {
        parts.push(format!("{n}=\"{v}\""));
    }
    if parts.is_empty() {
        String::new()
    } else {
        format!("{{{}}}", parts.join(","))
    }
}

fn number(v: f64) -> String {
    if v.is_infinite() {
        "+Inf".into()
    } else {
        format!("{v}")
    }
}

/// Every family in the Prometheus text format (version 0.0.4).
pub fn render() -> String {
    let r = registry();
    let mut out = String::new();
    for f in FAMILIES {
        let kind = match f.kind {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram(_) => "histogram",
        };
        let _ = writeln!(out, "# HELP {} {}", f.name, f.help);
        let _ = writeln!(out, "# TYPE {} {kind}", f.name);
        match f.kind {
            Kind::Histogram(bounds) => {
                for ((name, labels), h) in r.histograms.iter().filter(|((n, _), _)| *n == f.name) {
                    for (b, c) in bounds.iter().zip(&h.buckets) {
                        let l = label_text(f.labels, labels, Some(("le", number(*b))));
                        let _ = writeln!(out, "{name}_bucket{l} {c}");
                    }
                    let l = label_text(f.labels, labels, Some(("le", "+Inf".into())));
                    let _ = writeln!(out, "{name}_bucket{l} {}", h.count);
                    let l = label_text(f.labels, labels, None);
                    let _ = writeln!(out, "{name}_sum{l} {}", h.sum);
                    let _ = writeln!(out, "{name}_count{l} {}", h.count);
                }
            }
            _ => {
                for ((name, labels), v) in r.values.iter().filter(|((n, _), _)| *n == f.name) {
                    let l = label_text(f.labels, labels, None);
                    let _ = writeln!(out, "{name}{l} {}", number(*v));
                }
            }
        }
    }
    out
}

static READY: AtomicBool = AtomicBool::new(false);

/// Marks the caches synced (the operator is ready) or not.
pub fn set_ready(ready: bool) {
    READY.store(ready, Ordering::SeqCst);
}

/// Whether the caches are synced.
pub fn ready() -> bool {
    READY.load(Ordering::SeqCst)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_render_in_the_prometheus_text_format() {
        inc(RECONCILES, &["TestKind", "ok"]);
        inc(RECONCILES, &["TestKind", "ok"]);
        observe(RECONCILE_SECONDS, &["TestKind"], 0.003);
        observe(RECONCILE_SECONDS, &["TestKind"], 2.0);
        set(SESSIONS, &["test\"backend"], 1.0);
        let text = render();
        assert!(
            text.contains("patchbay_reconciles_total{controller=\"TestKind\",result=\"ok\"} 2\n"),
            "{text}"
        );
        assert!(text.contains(
            "patchbay_reconcile_duration_seconds_bucket{controller=\"TestKind\",le=\"0.005\"} 1\n"
        ));
        assert!(text.contains(
            "patchbay_reconcile_duration_seconds_bucket{controller=\"TestKind\",le=\"+Inf\"} 2\n"
        ));
        assert!(
            text.contains("patchbay_reconcile_duration_seconds_count{controller=\"TestKind\"} 2\n")
        );
        assert!(text.contains("patchbay_device_sessions_open{backend=\"test\\\"backend\"} 1\n"));
        assert!(text.contains("# TYPE patchbay_ports gauge\n"));
        assert_eq!(value(RECONCILES, &["TestKind", "ok"]), 2.0);
        set_all(PORTS, &[(vec!["TestPort".into(), "Idle".into()], 3.0)]);
        set_all(PORTS, &[(vec!["TestPort".into(), "Active".into()], 3.0)]);
        assert_eq!(value(PORTS, &["TestPort", "Idle"]), 0.0, "replaced whole");
        assert_eq!(value(PORTS, &["TestPort", "Active"]), 3.0);
    }
}

//! The fixture backend: an in-memory switch with injectable latency and failures and
//! an operation log (seed 003's "fixture switchProvider"). No real I/O; it sleeps on
//! the tokio clock to model latency.
//!
//! A [`FixtureSwitch`] is a cheap handle: clones share one device, so a test keeps a
//! clone to inject failures, tamper with a port behind the operator's back (drift) and
//! read the [operation log](FixtureSwitch::operations) that proves what was, or was
//! not, sent.

use parking_lot::{Mutex, MutexGuard};
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::device::{Device, PortChange, PortOperation, PortReads, PortResult};
use crate::error::Cause;
use crate::error::DeviceError;
use crate::heard::Heard;
use crate::model::{Capabilities, DesiredPort, ObservedPort};
use crate::values::PortName;

/// A failure the fixture can be told to produce.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FixtureFailure {
    /// Connection refused.
    Unreachable,
    /// The operation times out.
    Timeout,
    /// The device rejects the command.
    Rejected,
    /// The device refuses the credentials.
    AuthenticationFailed,
    /// The device accepts the change but does not apply it (read-back differs).
    SilentlyIgnored,
}

/// What the fixture was asked to do, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoggedOperation {
    /// A port was read.
    Get {
        /// Port.
        port: PortName,
    },
    /// A port was set; `changed` says whether anything differed.
    Set {
        /// The desired state that was applied.
        desired: DesiredPort,
        /// Whether the device changed.
        changed: bool,
    },
    /// A port was reset; `changed` says whether anything differed.
    Reset {
        /// Port.
        port: PortName,
        /// Whether the device changed.
        changed: bool,
    },
    /// A batch (one session) of this many operations started.
    Batch {
        /// Number of operations.
        size: usize,
    },
    /// An operation failed because of an injected failure.
    Failed {
        /// The failure.
        failure: FixtureFailure,
    },
}

impl LoggedOperation {
    /// Whether this entry changed device configuration.
    pub fn is_write(&self) -> bool {
        matches!(
            self,
            LoggedOperation::Set { changed: true, .. }
                | LoggedOperation::Reset { changed: true, .. }
        )
    }
}

#[derive(Debug)]
struct FixtureState {
    ports: BTreeMap<PortName, ObservedPort>,
    capabilities: Capabilities,
    latency: Duration,
    unreachable: bool,
    next_failures: VecDeque<FixtureFailure>,
    port_failures: BTreeMap<PortName, FixtureFailure>,
    log: VecDeque<LoggedOperation>,
    /// At most this many entries are kept (the oldest go first); `None`: all.
    log_limit: Option<usize>,
    sessions_open: usize,
    max_sessions_seen: usize,
    /// What the ports see, when a test set it; `None`: one made-up host per port.
    wire: Option<crate::neighbors::Neighbors>,
    neighbor_reads: usize,
    /// Its BGP speaker's neighbours, when it is one.
    bgp: crate::bgp::SpeakerState,
    bgp_sessions: usize,
    /// BGP sessions asked of it, served or failed.
    bgp_attempts: usize,
    /// Where its ports' configuration is kept across processes (see
    /// [`FixtureSwitch::keep_in`]): the last configuration written to each port, and
    /// whether a write changed one since it was saved.
    file: Option<std::path::PathBuf>,
    kept: BTreeMap<PortName, DesiredPort>,
    unsaved: bool,
}

impl FixtureState {
    /// Logs `op`, dropping the oldest entries beyond the limit.
    fn record(&mut self, op: LoggedOperation) {
        if self.log_limit == Some(0) {
            return;
        }
        self.log.push_back(op);
        self.trim_log();
    }

    fn trim_log(&mut self) {
        if let Some(limit) = self.log_limit {
            while self.log.len() > limit {
                self.log.pop_front();
            }
        }
    }
}

/// An in-memory switch. See the module documentation.
#[derive(Debug, Clone)]
pub struct FixtureSwitch {
    name: String,
    state: Arc<Mutex<FixtureState>>,
    /// When it last answered an operation (after its latency).
    heard: Heard,
}

impl FixtureSwitch {
    /// A switch called `name` with these ports, all clean, supporting every capability,
    /// with no latency.
    pub fn new(name: impl Into<String>, ports: impl IntoIterator<Item = PortName>) -> Self {
        let ports = ports
            .into_iter()
            .map(|p| {
                (
                    p.clone(),
                    ObservedPort::from_desired(&DesiredPort::clean(p)),
                )
            })
            .collect();
        Self {
            name: name.into(),
            state: Arc::new(Mutex::new(FixtureState {
                ports,
                capabilities: Capabilities::all(),
                latency: Duration::ZERO,
                unreachable: false,
                next_failures: VecDeque::new(),
                port_failures: BTreeMap::new(),
                log: VecDeque::new(),
                log_limit: None,
                sessions_open: 0,
                max_sessions_seen: 0,
                wire: None,
                neighbor_reads: 0,
                bgp: crate::bgp::SpeakerState::default(),
                bgp_sessions: 0,
                bgp_attempts: 0,
                file: None,
                kept: BTreeMap::new(),
                unsaved: false,
            })),
            heard: Heard::default(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, FixtureState> {
        // A panic while holding the lock only happens in a failing test; keep going.
        self.state.lock()
    }

    /// Sets what the ports see (`None`: one made-up host per port, see
    /// [`NeighborSource`](crate::device::NeighborSource) below).
    pub fn set_neighbors(&self, wire: Option<crate::neighbors::Neighbors>) {
        self.lock().wire = wire;
    }

    /// How many neighbour reads the device answered.
    pub fn neighbor_reads(&self) -> usize {
        self.lock().neighbor_reads
    }

    /// Adds ports (clean) that the device does not have yet (a port it has is not
    /// copied: a Switch's every reconcile names all its ports).
    pub fn add_ports<P: std::borrow::Borrow<PortName>>(&self, ports: impl IntoIterator<Item = P>) {
        let mut st = self.lock();
        for p in ports {
            let p = p.borrow();
            if !st.ports.contains_key(p) {
                let seen = ObservedPort::from_desired(&DesiredPort::clean(p.clone()));
                st.ports.insert(p.clone(), seen);
            }
        }
    }

    /// The device's name (used in error messages as its address).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Restricts what the device can configure.
    pub fn set_capabilities(&self, caps: Capabilities) {
        self.lock().capabilities = caps;
    }

    /// Sets the latency of every device operation (and of opening a batch session).
    pub fn set_latency(&self, latency: Duration) {
        self.lock().latency = latency;
    }

    /// Makes every operation fail as unreachable until called with `false`.
    pub fn set_unreachable(&self, unreachable: bool) {
        self.lock().unreachable = unreachable;
    }

    /// Queues a failure for the next operation (each queued failure is used once).
    pub fn fail_next(&self, failure: FixtureFailure) {
        self.lock().next_failures.push_back(failure);
    }

    /// Makes every write to `port` fail with `failure` (or clears it with `None`).
    pub fn fail_port(&self, port: &PortName, failure: Option<FixtureFailure>) {
        let mut st = self.lock();
        match failure {
            Some(f) => st.port_failures.insert(port.clone(), f),
            None => st.port_failures.remove(port),
        };
    }

    /// Changes a port behind the operator's back (drift), without logging it.
    pub fn tamper(&self, port: &PortName, change: impl FnOnce(&mut ObservedPort)) {
        if let Some(p) = self.lock().ports.get_mut(port) {
            change(p);
        }
    }

    /// The port as the device holds it now.
    pub fn port_state(&self, port: &PortName) -> Option<ObservedPort> {
        self.lock().ports.get(port).cloned()
    }

    /// Every operation so far, in order.
    pub fn operations(&self) -> Vec<LoggedOperation> {
        self.lock().log.iter().cloned().collect()
    }

    /// Keeps only the last `limit` operations from now on (`None`: every one, the
    /// default that tests read). A long-running operator on fixture devices (demos,
    /// benchmarks) bounds it: every batch and read adds entries.
    pub fn set_log_limit(&self, limit: Option<usize>) {
        let mut st = self.lock();
        st.log_limit = limit;
        st.trim_log();
    }

    /// Number of operations that changed configuration.
    pub fn write_count(&self) -> usize {
        self.lock().log.iter().filter(|o| o.is_write()).count()
    }

    /// Empties the operation log.
    pub fn clear_log(&self) {
        self.lock().log.clear();
    }

    /// Keeps its ports' configuration in `path` (JSON), as a real switch keeps its
    /// own across the operator's restarts: what `path` holds is taken now (over the
    /// ports it has), and every session that changes a port writes it back when it
    /// ends. A benchmark of a restart or a takeover gives every process the same
    /// files, so the next operator meets the devices as the last one left them.
    pub fn keep_in(&self, path: std::path::PathBuf) -> std::io::Result<()> {
        // What was written, not what was read: a read-back's "known to be absent"
        // (`Some(None)`) does not survive JSON, a configuration does.
        let kept: Vec<(PortName, DesiredPort)> = match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(std::io::Error::other)?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(e),
        };
        let mut st = self.lock();
        for (port, desired) in kept {
            st.ports
                .insert(port.clone(), ObservedPort::from_desired(&desired));
            st.kept.insert(port, desired);
        }
        st.file = Some(path);
        Ok(())
    }

    /// Writes its ports to its file (see [`FixtureSwitch::keep_in`]) when a write
    /// changed one since the last save.
    fn save(&self) {
        let (path, ports) = {
            let mut st = self.lock();
            let Some(path) = st.file.clone().filter(|_| st.unsaved) else {
                return;
            };
            st.unsaved = false;
            let ports: Vec<(PortName, DesiredPort)> = st
                .kept
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            (path, ports)
        };
        let tmp = path.with_extension("tmp");
        let written = serde_json::to_vec(&ports)
            .map_err(std::io::Error::other)
            .and_then(|bytes| std::fs::write(&tmp, bytes))
            .and_then(|()| std::fs::rename(&tmp, &path));
        if let Err(e) = written {
            tracing::warn!(device = %self.name, error = %e, "fixture: its ports could not be kept");
        }
    }

    /// The largest number of sessions that were open at the same time.
    pub fn max_concurrent_sessions(&self) -> usize {
        self.lock().max_sessions_seen
    }

    fn open_session(&self) -> Session<'_> {
        let mut st = self.lock();
        st.sessions_open += 1;
        st.max_sessions_seen = st.max_sessions_seen.max(st.sessions_open);
        Session { switch: self }
    }

    /// Waits the injected latency, then answers (stamps [`Device::heard`]'s
    /// clock) unless the device is unreachable.
    async fn delay(&self) {
        let latency = self.lock().latency;
        if !latency.is_zero() {
            tokio::time::sleep(latency).await;
        }
        if !self.lock().unreachable {
            self.heard.stamp();
        }
    }

    /// Takes the failure that applies to this operation, if any, and logs it.
    fn injected_failure(&self, port: Option<&PortName>, write: bool) -> Option<FixtureFailure> {
        let mut st = self.lock();
        let failure = if st.unreachable {
            Some(FixtureFailure::Unreachable)
        } else if let Some(f) = st.next_failures.pop_front() {
            Some(f)
        } else if write {
            port.and_then(|p| st.port_failures.get(p).copied())
        } else {
            None
        };
        // SilentlyIgnored is not an error of the operation itself.
        if let Some(f) = failure.filter(|f| *f != FixtureFailure::SilentlyIgnored) {
            st.record(LoggedOperation::Failed { failure: f });
        }
        failure
    }

    fn error_for(&self, failure: FixtureFailure, during: &str) -> DeviceError {
        match failure {
            FixtureFailure::Unreachable => DeviceError::Unreachable {
                address: self.name.clone(),
                cause: Cause::msg("connection refused (injected)"),
            },
            FixtureFailure::Timeout => DeviceError::Timeout {
                during: during.to_owned(),
                after: Duration::from_secs(10),
            },
            FixtureFailure::Rejected => DeviceError::CommandRejected {
                command: during.to_owned(),
                output: "% Invalid input detected (injected)".into(),
            },
            FixtureFailure::AuthenticationFailed => DeviceError::AuthenticationFailed {
                address: self.name.clone(),
            },
            FixtureFailure::SilentlyIgnored => DeviceError::Protocol {
                during: during.to_owned(),
                cause: Cause::msg("silently ignored (injected)"),
            },
        }
    }

    async fn write(&self, target: DesiredPort, reset: bool) -> Result<PortChange, DeviceError> {
        self.delay().await;
        let during = if reset {
            format!("resetting {}", target.port)
        } else {
            format!("configuring {}", target.port)
        };
        let failure = self.injected_failure(Some(&target.port), true);
        if let Some(f) = failure.filter(|f| *f != FixtureFailure::SilentlyIgnored) {
            return Err(self.error_for(f, &during));
        }
        let mut st = self.lock();
        let caps = st.capabilities.clone();
        let Some(current) = st.ports.get_mut(&target.port) else {
            return Err(DeviceError::UnknownPort {
                port: target.port.to_string(),
            });
        };
        if let Some(&capability) = caps.missing_for(&target).first() {
            return Err(DeviceError::Unsupported { capability });
        }
        let wanted = ObservedPort::from_desired(&target);
        let changed = *current != wanted;
        if changed && failure.is_none() {
            *current = wanted;
            if st.file.is_some() {
                st.kept.insert(target.port.clone(), target.clone());
                st.unsaved = true;
            }
        }
        let entry = if reset {
            LoggedOperation::Reset {
                port: target.port.clone(),
                changed,
            }
        } else {
            LoggedOperation::Set {
                desired: target,
                changed,
            }
        };
        st.record(entry);
        Ok(if changed {
            PortChange::Changed
        } else {
            PortChange::Unchanged
        })
    }
}

struct Session<'a> {
    switch: &'a FixtureSwitch,
}

impl Drop for Session<'_> {
    fn drop(&mut self) {
        self.switch.lock().sessions_open -= 1;
    }
}

#[async_trait]
impl Device for FixtureSwitch {
    fn capabilities(&self) -> Capabilities {
        self.lock().capabilities.clone()
    }

    async fn get_port(&self, port: &PortName) -> Result<ObservedPort, DeviceError> {
        let _session = self.open_session();
        self.delay().await;
        if let Some(f) = self.injected_failure(Some(port), false) {
            return Err(self.error_for(f, &format!("reading {port}")));
        }
        let mut st = self.lock();
        st.record(LoggedOperation::Get { port: port.clone() });
        st.ports
            .get(port)
            .cloned()
            .ok_or_else(|| DeviceError::UnknownPort {
                port: port.to_string(),
            })
    }

    async fn set_port(&self, desired: &DesiredPort) -> Result<PortChange, DeviceError> {
        let _session = self.open_session();
        let change = self.write(desired.clone(), false).await;
        self.save();
        change
    }

    async fn reset_port(&self, port: &PortName) -> Result<PortChange, DeviceError> {
        let _session = self.open_session();
        let change = self.write(DesiredPort::clean(port.clone()), true).await;
        self.save();
        change
    }

    async fn apply_batch(&self, ops: &[PortOperation]) -> Result<Vec<PortResult>, DeviceError> {
        let _session = self.open_session();
        if self.lock().unreachable {
            // An unreachable device fails the session once, not each port of it.
            self.delay().await;
            let f = FixtureFailure::Unreachable;
            self.lock().record(LoggedOperation::Failed { failure: f });
            return Err(self.error_for(f, "opening a session"));
        }
        self.lock()
            .record(LoggedOperation::Batch { size: ops.len() });
        let mut results = Vec::with_capacity(ops.len());
        for op in ops {
            let outcome = self
                .write(op.target(), matches!(op, PortOperation::Reset(_)))
                .await;
            results.push(PortResult {
                port: op.port().clone(),
                outcome,
            });
        }
        self.save();
        Ok(results)
    }

    async fn get_ports(&self, ports: &[PortName]) -> Result<PortReads, DeviceError> {
        let _session = self.open_session();
        // One read of the whole device, like `show running-config` on a real switch.
        self.delay().await;
        if let Some(f) = self.injected_failure(None, false) {
            return Err(self.error_for(f, "reading the running configuration"));
        }
        let mut st = self.lock();
        let out = ports
            .iter()
            .map(|p| {
                let read = st
                    .ports
                    .get(p)
                    .cloned()
                    .ok_or_else(|| DeviceError::UnknownPort {
                        port: p.to_string(),
                    });
                (p.clone(), read)
            })
            .collect();
        for p in ports {
            st.record(LoggedOperation::Get { port: p.clone() });
        }
        Ok(out)
    }

    fn heard(&self) -> Option<Heard> {
        Some(self.heard.clone())
    }
}

impl FixtureSwitch {
    /// A session of its own beside the port batches (a neighbour read, a BGP read or
    /// change): fails while unreachable, counts with the device's sessions, takes its
    /// latency; returns the state, locked, at its end.
    async fn side_session(&self) -> Result<MutexGuard<'_, FixtureState>, DeviceError> {
        let latency = {
            let mut st = self.lock();
            if st.unreachable {
                return Err(DeviceError::Unreachable {
                    address: self.name.clone(),
                    cause: crate::error::Cause::msg("fixture device set unreachable"),
                });
            }
            st.sessions_open += 1;
            st.max_sessions_seen = st.max_sessions_seen.max(st.sessions_open);
            st.latency
        };
        if !latency.is_zero() {
            tokio::time::sleep(latency).await;
        }
        let mut st = self.lock();
        st.sessions_open -= 1;
        Ok(st)
    }

    /// The BGP sessions (reads and changes) it served.
    pub fn bgp_sessions(&self) -> usize {
        self.lock().bgp_sessions
    }

    /// The BGP sessions asked of it, served or failed (unreachable).
    pub fn bgp_attempts(&self) -> usize {
        self.lock().bgp_attempts
    }
}

/// A BGP speaker in memory (benchmarks, demos): what it is told is what it reports,
/// every neighbour `Established` with nothing accepted. A read or a change is a
/// session of its own.
#[async_trait::async_trait]
impl crate::device::BgpSpeaker for FixtureSwitch {
    async fn bgp_state(&self) -> Result<crate::bgp::SpeakerState, DeviceError> {
        self.lock().bgp_attempts += 1;
        let mut st = self.side_session().await?;
        st.bgp_sessions += 1;
        Ok(st.bgp.clone())
    }

    async fn bgp_apply(
        &self,
        router: &crate::bgp::Router,
        changes: &[crate::bgp::Change],
    ) -> Result<crate::bgp::SpeakerState, DeviceError> {
        self.lock().bgp_attempts += 1;
        let mut st = self.side_session().await?;
        st.bgp_sessions += 1;
        st.bgp.asn = Some(router.asn);
        st.bgp.router_id = Some(router.router_id);
        let mut maps = st.bgp.route_maps.take().unwrap_or_default();
        for change in changes {
            use crate::bgp::{Change, Policy};
            match change {
                Change::Put { neighbor, .. } => {
                    let seen = crate::bgp::Observed::configured(neighbor, "Established");
                    st.bgp.neighbors.insert(neighbor.address, seen);
                    for map in [Policy::Inbound(neighbor.address), Policy::Outbound] {
                        maps.insert(map.name(), map.clauses());
                    }
                }
                Change::Remove { address, .. } => {
                    st.bgp.neighbors.remove(address);
                    maps.remove(&Policy::Inbound(*address).name());
                }
                Change::Policy { map, .. } => {
                    maps.insert(map.name(), map.clauses());
                }
            }
        }
        st.bgp.route_maps = Some(maps);
        Ok(st.bgp.clone())
    }
}

/// What a fixture device's ports see: what [`FixtureSwitch::set_neighbors`] set, else
/// on every port one LLDP neighbour with a locally administered MAC made from the
/// device's and the port's names (a plausible fabric for benchmarks and demos). A
/// read is a session (counted with the device's sessions), takes the device's
/// latency, and fails while the device is unreachable.
#[async_trait::async_trait]
impl crate::device::NeighborSource for FixtureSwitch {
    async fn neighbors(&self) -> Result<crate::neighbors::Neighbors, DeviceError> {
        let mut st = self.side_session().await?;
        st.neighbor_reads += 1;
        if let Some(w) = &st.wire {
            return Ok(w.clone());
        }
        let made_up = st.ports.keys().map(|p| {
            use std::hash::{Hash, Hasher};
            let mut h = std::collections::hash_map::DefaultHasher::new();
            (&self.name, p.as_str()).hash(&mut h);
            let b = h.finish().to_be_bytes();
            let mac = format!(
                "02:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
                b[0], b[1], b[2], b[3], b[4]
            );
            (
                p.as_str().to_owned(),
                crate::neighbors::LldpNeighbor {
                    chassis_id: mac.clone(),
                    chassis_id_subtype: crate::neighbors::IdSubtype::Mac,
                    port_id: mac,
                    port_id_subtype: crate::neighbors::IdSubtype::Mac,
                    port_description: Some("eth0".into()),
                    system_name: Some(format!("host-{}", p.as_str())),
                    management_address: None,
                },
            )
        });
        Ok(crate::neighbors::Neighbors::gather(None, made_up, []))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{AdminState, Capability, VlanMode};
    use crate::values::VlanId;
    use crate::verify::{apply_batch_verified, apply_verified, reset_verified};

    fn p(name: &str) -> PortName {
        PortName::parse(name).unwrap()
    }

    fn access(port: &str, vlan: u16) -> DesiredPort {
        let mut d = DesiredPort::clean(p(port));
        d.vlans = VlanMode::Access {
            vlan: VlanId::new(vlan).unwrap(),
        };
        d
    }

    #[tokio::test]
    async fn set_is_idempotent_and_logged() {
        let sw = FixtureSwitch::new("tor1", [p("Gi0/1")]);
        let d = access("Gi0/1", 100);
        assert_eq!(apply_verified(&sw, &d).await.unwrap(), PortChange::Changed);
        assert_eq!(
            apply_verified(&sw, &d).await.unwrap(),
            PortChange::Unchanged
        );
        assert_eq!(sw.write_count(), 1);
        assert_eq!(
            sw.port_state(&p("Gi0/1")).unwrap().vlans,
            Some(d.vlans.clone())
        );
        assert_eq!(
            reset_verified(&sw, &p("Gi0/1")).await.unwrap(),
            PortChange::Changed
        );
        assert_eq!(
            sw.port_state(&p("Gi0/1")).unwrap().vlans,
            Some(VlanMode::Unconfigured)
        );
    }

    #[tokio::test]
    async fn a_device_kept_in_a_file_is_met_again_as_it_was_left() {
        let path =
            std::env::temp_dir().join(format!("patchbay-fixture-{}.json", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let first = FixtureSwitch::new("tor1", [p("Gi0/1"), p("Gi0/2")]);
        first.keep_in(path.clone()).unwrap();
        let batch = [PortOperation::Set(access("Gi0/1", 100))];
        apply_batch_verified(&first, &batch).await.unwrap();
        // Another process's device of the same switch: Gi0/1 as the first left it.
        let second = FixtureSwitch::new("tor1", [p("Gi0/1"), p("Gi0/2")]);
        second.keep_in(path.clone()).unwrap();
        assert_eq!(
            second.port_state(&p("Gi0/1")).unwrap().vlans,
            Some(access("Gi0/1", 100).vlans)
        );
        assert_eq!(
            apply_verified(&second, &access("Gi0/1", 100))
                .await
                .unwrap(),
            PortChange::Unchanged
        );
        // A reset is kept too.
        reset_verified(&second, &p("Gi0/1")).await.unwrap();
        let third = FixtureSwitch::new("tor1", Vec::<PortName>::new());
        third.keep_in(path.clone()).unwrap();
        assert_eq!(
            third.port_state(&p("Gi0/1")).unwrap().vlans,
            Some(VlanMode::Unconfigured)
        );
        let _ = std::fs::remove_file(&path);
    }

    #[tokio::test]
    async fn injected_failures_are_typed_and_leave_the_port_untouched() {
        let sw = FixtureSwitch::new("tor1", [p("Gi0/1")]);
        sw.fail_next(FixtureFailure::Timeout);
        let err = sw.set_port(&access("Gi0/1", 100)).await.unwrap_err();
        assert!(err.is_session_failure(), "{err}");
        sw.set_unreachable(true);
        assert!(matches!(
            sw.get_port(&p("Gi0/1")).await,
            Err(DeviceError::Unreachable { .. })
        ));
        sw.set_unreachable(false);
        assert_eq!(
            sw.port_state(&p("Gi0/1")).unwrap().vlans,
            Some(VlanMode::Unconfigured)
        );
        assert_eq!(sw.write_count(), 0);
    }

    #[tokio::test]
    async fn a_silently_ignored_change_fails_verification() {
        let sw = FixtureSwitch::new("tor1", [p("Gi0/1")]);
        sw.fail_port(&p("Gi0/1"), Some(FixtureFailure::SilentlyIgnored));
        let err = apply_verified(&sw, &access("Gi0/1", 100))
            .await
            .unwrap_err();
        assert!(
            matches!(err, DeviceError::VerificationFailed { .. }),
            "{err}"
        );
    }

    #[tokio::test]
    async fn a_batch_reports_per_port_and_uses_one_session() {
        let sw = FixtureSwitch::new("tor1", [p("Gi0/1"), p("Gi0/2"), p("Gi0/3")]);
        sw.fail_port(&p("Gi0/2"), Some(FixtureFailure::Rejected));
        let mut lagged = access("Gi0/3", 30);
        lagged.admin = AdminState::Down;
        sw.set_capabilities(Capabilities::new([Capability::AccessVlan]));
        let ops = vec![
            PortOperation::Set(access("Gi0/1", 10)),
            PortOperation::Set(access("Gi0/2", 20)),
            PortOperation::Set(lagged),
            PortOperation::Set(access("Gi9/9", 10)),
        ];
        let results = apply_batch_verified(&sw, &ops).await.unwrap();
        let ports: Vec<_> = results.iter().map(|r| r.port.to_string()).collect();
        assert_eq!(ports, ["Gi0/1", "Gi0/2", "Gi0/3", "Gi9/9"]);
        assert!(results[0].outcome.is_ok());
        assert!(matches!(
            results[1].outcome,
            Err(DeviceError::CommandRejected { .. })
        ));
        assert!(matches!(
            results[2].outcome,
            Err(DeviceError::Unsupported {
                capability: Capability::Disable
            })
        ));
        assert!(matches!(
            results[3].outcome,
            Err(DeviceError::UnknownPort { .. })
        ));
        let batches = sw
            .operations()
            .iter()
            .filter(|o| matches!(o, LoggedOperation::Batch { .. }))
            .count();
        assert_eq!(batches, 1);
        assert_eq!(sw.max_concurrent_sessions(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn latency_is_applied_per_operation() {
        let sw = FixtureSwitch::new("tor1", [p("Gi0/1")]);
        sw.set_latency(Duration::from_millis(5));
        let start = tokio::time::Instant::now();
        sw.set_port(&access("Gi0/1", 100)).await.unwrap();
        sw.get_port(&p("Gi0/1")).await.unwrap();
        assert_eq!(start.elapsed(), Duration::from_millis(10));
    }

    #[tokio::test]
    async fn as_a_bgp_speaker_it_reports_what_it_was_told_and_the_plan_settles() {
        use crate::bgp::{Change, Neighbor, Outbound, Router, Timers, plan};
        use crate::device::BgpSpeaker;
        let sw = FixtureSwitch::new("tor", Vec::<PortName>::new());
        let n = Neighbor {
            address: "10.0.1.2".parse().unwrap(),
            remote_asn: 65101,
            local_address: "10.0.1.1".parse().unwrap(),
            prefixes: vec!["192.0.2.0/28".parse().unwrap()],
            max_prefix: 8,
            timers: Timers {
                keepalive: 30,
                hold: 90,
                connect_retry: 10,
            },
            outbound: Outbound::Nothing,
            password: None,
            description: "patchbay".into(),
        };
        let managed = [n.address].into();
        let router = Router {
            asn: 65000,
            router_id: "10.255.0.1".parse().unwrap(),
        };
        let empty = sw.bgp_state().await.unwrap();
        let changes = plan(std::slice::from_ref(&n), &empty, &managed);
        assert_eq!(changes.len(), 1);
        let after = sw.bgp_apply(&router, &changes).await.unwrap();
        assert!(plan(std::slice::from_ref(&n), &after, &managed).is_empty());
        assert_eq!(after.neighbors[&n.address].state, "Established");
        let gone = sw
            .bgp_apply(
                &router,
                &[Change::Remove {
                    address: n.address,
                    filters: true,
                }],
            )
            .await
            .unwrap();
        assert!(gone.neighbors.is_empty());
        assert_eq!(sw.bgp_sessions(), 3);
        sw.set_unreachable(true);
        assert!(sw.bgp_state().await.is_err());
    }
}

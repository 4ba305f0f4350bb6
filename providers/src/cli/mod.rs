//! The SSH CLI backend: a [`Device`] that drives a vendor CLI over an interactive SSH
//! shell, with the vendor's commands, prompts, errors and show-output parsers taken
//! from a [`dialect::Dialect`] (data, under `providers/dialects/`).
//!
//! One session per call: `apply_batch` reads every port of the batch (the dialect's
//! one batch command where it has one and the batch is large enough, otherwise the
//! ports' show commands pipelined in one write), plans the commands (nothing for a port that already
//! matches), then sends in one pipelined write: enter configuration mode, create the
//! VLANs the batch needs, each port's lines. It then leaves configuration mode and
//! saves once (unless `save_config` is off). A line whose answer matches one of the
//! dialect's error patterns fails its port (or, for a VLAN, the ports needing it) with
//! [`DeviceError::CommandRejected`] naming the command; that port's later lines were
//! already queued and still run, the other ports are applied, and the session returns
//! to configuration mode. A transport failure fails the whole batch.
//! `apply_and_read` (what the operator uses) reads the applied ports back in the
//! same session, after saving.
//!
//! Prompt handling: the first prompt gives the hostname; from then on a prompt is the
//! hostname, an optional `(context)` and `>` or `#`, found after the echo of the line
//! it answers and followed by a line end, the end of what arrived, or the echo of the
//! next pipelined line (so a late duplicate prompt cannot end an answer early). Every
//! read has the command timeout (scaled for long pipelines).
//!
//! The rooms: this file (the [`CliSwitch`] device, its options and journal, the
//! [`Device`] impl); `cli/session.rs` (one shell session: prompts, commands, reads,
//! saving); `cli/apply.rs` (a batch: read, plan, send, put back); `cli/speaker.rs`
//! (the BGP speaker); `cli/neighbor_source.rs` (LLDP and MAC reads);
//! `cli/transport.rs` (SSH itself); `cli/dialect.rs` (the vendor's data and the pure
//! engine over it).

pub mod dialect;

pub mod transport;

use parking_lot::Mutex;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use regex::Regex;

use crate::device::{
    Device, PortChange, PortOperation, PortReads, PortResult, applied_ports, batch_results,
};
use crate::error::Cause;
use crate::error::DeviceError;
use crate::heard::Heard;
use crate::model::{Capabilities, DesiredPort, ObservedPort};
use crate::secret::SecretString;
use crate::values::{LagGroup, PortName, VlanId};

pub use dialect::script::LineOwner;
pub use dialect::{Aggregates, Dialect, Plan, Reading, aggregates_to_remove};
pub use transport::{Auth, HostKeyPolicy, SshTarget};

use transport::Shell;

mod apply;
mod neighbor_source;
mod session;
mod speaker;
use apply::*;
use session::*;

/// Backend options.
#[derive(Debug, Clone)]
pub struct CliOptions {
    /// Save the configuration once per batch that changed something.
    pub save_config: bool,
    /// Time allowed for each command's answer.
    pub command_timeout: Duration,
}

impl Default for CliOptions {
    fn default() -> Self {
        Self {
            save_config: true,
            command_timeout: Duration::from_secs(30),
        }
    }
}

/// One line sent to a device (passwords are never recorded).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sent {
    /// The line.
    pub line: String,
    /// Whether it changes configuration (sent in or to enter configuration mode, or
    /// saving), as opposed to session setup and show commands.
    pub configures: bool,
}

/// A switch driven over its SSH CLI.
#[derive(Clone)]
pub struct CliSwitch {
    target: SshTarget,
    enable_password: Option<SecretString>,
    dialect: Arc<Dialect>,
    options: CliOptions,
    journal: Option<Arc<Mutex<Vec<Sent>>>>,
    /// When the device last answered, over every session.
    heard: Heard,
}

impl std::fmt::Debug for CliSwitch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CliSwitch")
            .field("endpoint", &self.target.endpoint())
            .field("dialect", &self.dialect.name)
            .finish_non_exhaustive()
    }
}

impl CliSwitch {
    /// A backend for `target` speaking `dialect`.
    pub fn new(
        target: SshTarget,
        enable_password: Option<SecretString>,
        dialect: Arc<Dialect>,
        options: CliOptions,
    ) -> Self {
        Self {
            target,
            enable_password,
            dialect,
            options,
            journal: None,
            heard: Heard::default(),
        }
    }

    /// Records every line sent from now on (tests, `patchbay device`).
    pub fn with_journal(mut self) -> Self {
        self.journal = Some(Arc::new(Mutex::new(Vec::new())));
        self
    }

    /// The lines sent so far (empty without [`Self::with_journal`]).
    pub fn journal(&self) -> Vec<Sent> {
        self.journal
            .as_ref()
            .map(|j| j.lock().clone())
            .unwrap_or_default()
    }

    /// Forgets the journal.
    pub fn clear_journal(&self) {
        if let Some(j) = &self.journal {
            j.lock().clear();
        }
    }

    /// The dialect.
    pub fn dialect(&self) -> &Dialect {
        &self.dialect
    }

    async fn session(&self) -> Result<Session<'_>, DeviceError> {
        Session::start(self).await
    }

    /// Reads the ports and returns, per operation, the commands that would be sent
    /// (the whole script: entering configuration mode, VLANs, ports, leaving, saving).
    /// Sends nothing that changes the device.
    pub async fn dry_run(&self, ops: &[PortOperation]) -> Result<Vec<String>, DeviceError> {
        let mut s = self.session().await?;
        let prepared = self.prepare(&mut s, ops).await;
        s.close().await;
        let prepared = prepared?;
        if let Some(Some(Err(e))) = prepared
            .outcomes
            .into_iter()
            .find(|o| matches!(o, Some(Err(_))))
        {
            return Err(e);
        }
        Ok(self.script(&prepared.plans))
    }

    /// The device's own answer to the dialect's show commands for `port` (what
    /// [`Dialect::parse`] reads), concatenated.
    pub async fn show_port_raw(&self, port: &PortName) -> Result<String, DeviceError> {
        let mut s = self.session().await?;
        let answers = s.run_many(&self.dialect.read_commands(port), false).await;
        s.close().await;
        let mut all = String::new();
        for answer in answers? {
            all.push_str(&answer?);
            all.push('\n');
        }
        Ok(all)
    }

    /// The device's whole running configuration (the dialect's `running_config`
    /// command), or `None` when the dialect has none.
    pub async fn running_config(&self) -> Result<Option<String>, DeviceError> {
        let Some(cmd) = self.dialect.running_config.clone() else {
            return Ok(None);
        };
        let mut s = self.session().await?;
        let r = s.run(&cmd, false).await;
        s.close().await;
        r.map(Some)
    }

    /// The device's own answers to `lines`, typed one after the other in privileged
    /// mode in one session (configuration lines too, after the dialect's
    /// `configure` line). For tests and troubleshooting only: the lines go as
    /// given, unchecked, so nothing that carries user input may call this.
    pub async fn run_raw(
        &self,
        lines: &[&str],
    ) -> Result<Vec<Result<String, DeviceError>>, DeviceError> {
        let mut s = self.session().await?;
        let mut out = Vec::with_capacity(lines.len());
        for line in lines {
            match s.run(line, true).await {
                Err(e) if e.is_session_failure() => {
                    s.close().await;
                    return Err(e);
                }
                r => out.push(r),
            }
        }
        s.close().await;
        Ok(out)
    }

    fn script(&self, plans: &[Plan]) -> Vec<String> {
        self.dialect.script(plans, self.options.save_config)
    }
}

#[async_trait]
impl Device for CliSwitch {
    fn capabilities(&self) -> Capabilities {
        self.dialect.capabilities()
    }

    async fn apply_batch(&self, ops: &[PortOperation]) -> Result<Vec<PortResult>, DeviceError> {
        if ops.is_empty() {
            return Ok(Vec::new());
        }
        self.apply(ops).await
    }

    async fn apply_and_read(
        &self,
        ops: &[PortOperation],
    ) -> Result<(Vec<PortResult>, PortReads), DeviceError> {
        if ops.is_empty() {
            return Ok((Vec::new(), Vec::new()));
        }
        self.apply_then_read(ops).await
    }

    async fn get_ports(&self, ports: &[PortName]) -> Result<PortReads, DeviceError> {
        let mut s = self.session().await?;
        let reads = s.observe(ports).await;
        s.close().await;
        Ok(ports.iter().cloned().zip(reads?).collect())
    }

    fn heard(&self) -> Option<Heard> {
        Some(self.heard.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{DesiredPort, ObservedPort};

    fn access(port: &str, vlan: u16) -> (ObservedPort, DesiredPort) {
        let p = PortName::parse(port).unwrap();
        let clean = ObservedPort::from_desired(&DesiredPort::clean(p.clone()));
        let mut d = DesiredPort::clean(p);
        d.vlans = crate::model::VlanMode::Access {
            vlan: VlanId::new(vlan).unwrap(),
        };
        (clean, d)
    }

    /// The Cisco dialect with `interface range` declared (no shipped dialect has it:
    /// no simulator here accepts it).
    pub(crate) fn ranged_ios() -> Dialect {
        let (_, text) = dialect::DIALECT_FILES[0];
        let text = text.replace(
            "interface_enter: \"interface {port}\"\n",
            "interface_enter: \"interface {port}\"\n\
             interface_range: { enter: \"interface range {ports}\", separator: \", \", max_ports: 5 }\n",
        );
        Dialect::load("ranged.yaml", &text).unwrap()
    }

    #[test]
    fn identical_port_blocks_share_range_blocks_of_at_most_max_ports() {
        let dialect = ranged_ios();
        let mut plans = Vec::new();
        for i in 1..=6 {
            let (o, d) = access(&format!("FastEthernet0/{i}"), 10);
            plans.push(dialect.plan(&Reading::of(o), &Aggregates::new(), &d));
        }
        let (o, d) = access("FastEthernet0/7", 20);
        plans.push(dialect.plan(&Reading::of(o), &Aggregates::new(), &d));
        let segments = dialect.configuration_segments(&plans);
        assert_eq!(segments.len(), 3, "{segments:#?}");
        // The first write: configuration mode, both VLANs, the lone port's block.
        let first: Vec<&str> = segments[0].iter().map(|(_, l)| l.as_str()).collect();
        assert_eq!(first[0], "configure terminal");
        assert!(first.contains(&"interface FastEthernet0/7"), "{first:?}");
        assert!(!first.iter().any(|l| l.contains("0/1")), "{first:?}");
        // Then ranges of 5 and 1, each its own write, owned by exactly its ports.
        let lines =
            |k: usize| -> Vec<String> { segments[k].iter().map(|(_, l)| l.clone()).collect() };
        assert_eq!(
            lines(1),
            [
                "interface range FastEthernet0/1, FastEthernet0/2, FastEthernet0/3, \
                 FastEthernet0/4, FastEthernet0/5",
                "switchport mode access",
                "switchport access vlan 10",
                "exit"
            ]
        );
        assert!(
            segments[1]
                .iter()
                .all(|(o, _)| *o == LineOwner::Ports(vec![0, 1, 2, 3, 4]))
        );
        assert_eq!(lines(2)[0], "interface range FastEthernet0/6");
        assert!(
            segments[2]
                .iter()
                .all(|(o, _)| *o == LineOwner::Ports(vec![5]))
        );
        // The shipped dialect has no ranges: one block per port.
        let plain = dialect::for_os("ios").unwrap();
        assert_eq!(plain.configuration_segments(&plans).len(), 1);
    }

    #[test]
    fn what_is_sent_and_what_dry_run_prints_come_from_one_builder() {
        let dialect = dialect::for_os("ios").unwrap();
        let (o1, d1) = access("FastEthernet0/1", 10);
        let (o2, d2) = access("FastEthernet0/2", 10);
        let (o3, _) = access("FastEthernet0/3", 20);
        let plans = vec![
            dialect.plan(&Reading::of(o1), &Aggregates::new(), &d1),
            dialect.plan(&Reading::of(o2), &Aggregates::new(), &d2),
            // A port that already matches: nothing of it is sent.
            dialect.plan(
                &Reading::of(o3.clone()),
                &Aggregates::new(),
                &DesiredPort::clean(o3.port.clone()),
            ),
        ];
        let lines = dialect.configuration_lines(&plans);
        assert_eq!(lines[0], (LineOwner::Session, "configure terminal".into()));
        let owners: Vec<LineOwner> = lines.iter().map(|(o, _)| o.clone()).collect();
        // VLAN 10 is created once for both ports, before any port line.
        let vlan_lines = owners
            .iter()
            .filter(|o| **o == LineOwner::Vlan(VlanId::new(10).unwrap()))
            .count();
        assert!(vlan_lines >= 1);
        let first_port = owners
            .iter()
            .position(|o| matches!(o, LineOwner::Port(_)))
            .unwrap();
        assert!(
            owners[first_port..]
                .iter()
                .all(|o| matches!(o, LineOwner::Port(_)))
        );
        assert!(owners.contains(&LineOwner::Port(0)) && owners.contains(&LineOwner::Port(1)));
        assert!(!owners.contains(&LineOwner::Port(2)));
        // The dry-run script is exactly these lines, then leaving and saving.
        let script = dialect.script(&plans, true);
        let sent: Vec<String> = lines.into_iter().map(|(_, l)| l).collect();
        assert_eq!(script[..sent.len()], sent[..]);
        assert_eq!(script[sent.len()], dialect.session.exit);
        assert!(dialect.script(&plans[2..], true).is_empty());
    }
}

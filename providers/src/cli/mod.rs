//! The SSH CLI backend: a [`Switch`] that drives a vendor CLI over an interactive SSH
//! shell, with the vendor's commands, prompts, errors and show-output parsers taken
//! from a [`dialect::Dialect`] (data, under `providers/dialects/`).
//!
//! One session per call: `apply_batch` reads every port of the batch, plans the
//! commands (nothing for a port that already matches), enters configuration mode once,
//! creates the VLANs the batch needs, configures each port, leaves configuration mode
//! and saves once (unless `save_config` is off). A command whose output matches one of
//! the dialect's error patterns fails its port with [`DeviceError::CommandRejected`]
//! naming the command; the rest of that port's commands are not sent, the session
//! returns to configuration mode and the batch goes on. A transport failure fails the
//! whole batch.
//!
//! Prompt handling: the first prompt gives the hostname; from then on a prompt is the
//! hostname, an optional `(context)` and `>` or `#` at the very end of what arrived,
//! after the echo of the command just sent (so a late duplicate prompt cannot end an
//! answer early). Every read has the command timeout.

pub mod dialect;
pub mod transport;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use regex::Regex;

use crate::error::DeviceError;
use crate::model::{Capabilities, DesiredPort, ObservedPort};
use crate::secret::SecretString;
use crate::switch::{PortChange, PortOperation, PortReads, PortResult, Switch};
use crate::values::{PortName, VlanId, VlanName};

pub use dialect::{Dialect, Plan};
pub use transport::{Auth, HostKeyPolicy, SshTarget};

use transport::Shell;

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
            .map(|j| j.lock().unwrap_or_else(|e| e.into_inner()).clone())
            .unwrap_or_default()
    }

    /// Forgets the journal.
    pub fn clear_journal(&self) {
        if let Some(j) = &self.journal {
            j.lock().unwrap_or_else(|e| e.into_inner()).clear();
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
        let mut plans = Vec::new();
        for op in ops {
            let observed = s.read_port(op.port()).await?;
            plans.push(self.dialect.plan(&observed, &op.target()));
        }
        s.close().await;
        Ok(self.script(&plans))
    }

    /// The device's own answer to the dialect's show commands for `port` (what
    /// [`Dialect::parse`] reads), concatenated.
    pub async fn show_port_raw(&self, port: &PortName) -> Result<String, DeviceError> {
        let mut s = self.session().await?;
        let mut all = String::new();
        let mut result = Ok(());
        for cmd in self.dialect.read_commands(port) {
            match s.run(&cmd, false).await {
                Ok(out) => {
                    all.push_str(&out);
                    all.push('\n');
                }
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        s.close().await;
        result.map(|()| all)
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

    fn script(&self, plans: &[Plan]) -> Vec<String> {
        self.dialect.script(plans, self.options.save_config)
    }
}

impl Dialect {
    /// The whole script for a batch of plans: enter configuration mode, create the
    /// batch's VLANs once, each port's blocks, leave, save (when `save`). Empty when
    /// every plan is.
    pub fn script(&self, plans: &[Plan], save: bool) -> Vec<String> {
        if plans.iter().all(Plan::is_empty) {
            return Vec::new();
        }
        let mut out = vec![self.session.configure.clone()];
        for (vlan, name) in batch_vlans(plans) {
            out.extend(self.create_vlan_lines(vlan, name.as_ref()));
        }
        for plan in plans {
            for block in &plan.blocks {
                out.extend(block.iter().cloned());
            }
        }
        out.push(self.session.exit.clone());
        if save {
            for (step, _) in &self.save {
                out.push(step.command.clone());
                if let Some(a) = &step.answer {
                    out.push(a.clone());
                }
            }
        }
        out
    }
}

/// The VLANs a batch needs, each once (the first name given wins).
fn batch_vlans(plans: &[Plan]) -> BTreeMap<VlanId, Option<VlanName>> {
    let mut all: BTreeMap<VlanId, Option<VlanName>> = BTreeMap::new();
    for plan in plans {
        for (vlan, name) in &plan.vlans {
            let slot = all.entry(*vlan).or_insert(None);
            if slot.is_none() {
                *slot = name.clone();
            }
        }
    }
    all
}

fn is_transport(e: &DeviceError) -> bool {
    matches!(
        e,
        DeviceError::Unreachable { .. }
            | DeviceError::Timeout { .. }
            | DeviceError::Protocol { .. }
    )
}

/// The prompt before the hostname is known: at the start of a line.
fn first_prompt() -> &'static Regex {
    static RE: std::sync::OnceLock<Regex> = std::sync::OnceLock::new();
    RE.get_or_init(|| {
        Regex::new(
            r"(?:^|[\r\n])(?:SSH@)?(?P<host>[A-Za-z0-9_.\-]+)(?:\((?P<ctx>[^)\r\n]*)\))?(?P<level>[>#]) ?$",
        )
        .expect("valid regex")
    })
}

struct Session<'a> {
    sw: &'a CliSwitch,
    shell: Shell,
    prompt: Regex,
    /// Context of the last prompt (`config`, `config-if`, …), `None` outside
    /// configuration mode.
    ctx: Option<String>,
    privileged: bool,
}

impl<'a> Session<'a> {
    async fn start(sw: &'a CliSwitch) -> Result<Self, DeviceError> {
        let mut shell = Shell::open(&sw.target).await?;
        let timeout = sw.options.command_timeout;
        let banner = shell
            .read_until(
                |b| first_prompt().find(b).map(|m| m.end()),
                timeout,
                "waiting for the first prompt",
            )
            .await?;
        let caps = first_prompt()
            .captures(&banner)
            .ok_or_else(|| DeviceError::Protocol {
                during: "logging in".into(),
                detail: "no prompt".into(),
            })?;
        let host = caps["host"].to_owned();
        let prompt = Regex::new(&format!(
            r"(?:SSH@)?{}(?:\((?P<ctx>[^)\r\n]*)\))?(?P<level>[>#]) ?$",
            regex::escape(&host)
        ))
        .map_err(|e| DeviceError::Protocol {
            during: "logging in".into(),
            detail: format!("unusable hostname in prompt: {e}"),
        })?;
        let mut s = Self {
            sw,
            shell,
            prompt,
            ctx: None,
            privileged: &caps["level"] == "#",
        };
        if !s.privileged {
            s.enable().await?;
        }
        for cmd in &sw.dialect.session.paging_off.clone() {
            s.run(cmd, false).await?;
        }
        Ok(s)
    }

    fn record(&self, line: &str, configures: bool) {
        if let Some(j) = &self.sw.journal {
            j.lock().unwrap_or_else(|e| e.into_inner()).push(Sent {
                line: line.to_owned(),
                configures,
            });
        }
    }

    fn note_prompt(&mut self, text: &str) {
        if let Some(c) = self.prompt.captures(text) {
            self.ctx = c.name("ctx").map(|m| m.as_str().to_owned());
            self.privileged = &c["level"] == "#";
        }
    }

    async fn enable(&mut self) -> Result<(), DeviceError> {
        let dialect = &self.sw.dialect;
        let Some(spec) = &dialect.session.enable else {
            return Err(DeviceError::Protocol {
                during: "logging in".into(),
                detail: "the login landed in user mode and the dialect has no enable command"
                    .into(),
            });
        };
        let timeout = self.sw.options.command_timeout;
        self.record(&spec.command, false);
        self.shell.write(&format!("{}\n", spec.command)).await?;
        let pw_prompt = dialect.enable_password_prompt.clone();
        let prompt = self.prompt.clone();
        let answer = self
            .shell
            .read_until(
                |b| {
                    pw_prompt
                        .as_ref()
                        .and_then(|re| re.find(b))
                        .or_else(|| prompt.find(b))
                        .map(|m| m.end())
                },
                timeout,
                "entering privileged mode",
            )
            .await?;
        if !self.prompt.is_match(&answer) {
            // The password prompt: send the enable password (never journalled).
            let pw = self
                .sw
                .enable_password
                .as_ref()
                .map(SecretString::expose)
                .unwrap_or("")
                .to_owned();
            self.shell.write(&format!("{pw}\n")).await?;
            let prompt = self.prompt.clone();
            let after = self
                .shell
                .read_until(
                    |b| prompt.find(b).map(|m| m.end()),
                    timeout,
                    "entering privileged mode",
                )
                .await?;
            self.note_prompt(&after);
        } else {
            self.note_prompt(&answer);
        }
        if !self.privileged {
            return Err(DeviceError::AuthenticationFailed {
                address: self.shell.endpoint().to_owned(),
            });
        }
        Ok(())
    }

    /// Sends one command and returns its output (without echo and prompt). An output
    /// line matching the dialect's error patterns fails it.
    async fn run(&mut self, cmd: &str, configures: bool) -> Result<String, DeviceError> {
        self.record(cmd, configures);
        self.shell.write(&format!("{cmd}\n")).await?;
        let prompt = self.prompt.clone();
        let echo = cmd.to_owned();
        let text = self
            .shell
            .read_until(
                |b| {
                    let at = b.find(&echo)? + echo.len();
                    prompt.find(&b[at..]).map(|m| at + m.end())
                },
                self.sw.options.command_timeout,
                &format!("waiting for the answer to `{cmd}`"),
            )
            .await?;
        self.note_prompt(&text);
        let start = text.find(cmd).map(|i| i + cmd.len()).unwrap_or(0);
        let end = self
            .prompt
            .find(&text[start..])
            .map(|m| start + m.start())
            .unwrap_or(text.len());
        let output = text[start..end].to_owned();
        if let Some(line) = self.sw.dialect.error_in(&output) {
            return Err(DeviceError::CommandRejected {
                command: cmd.to_owned(),
                output: line,
            });
        }
        Ok(output)
    }

    async fn read_port(&mut self, port: &PortName) -> Result<ObservedPort, DeviceError> {
        let mut all = String::new();
        for cmd in self.sw.dialect.read_commands(port) {
            all.push_str(&self.run(&cmd, false).await?);
            all.push('\n');
        }
        Ok(self.sw.dialect.parse(port, &all))
    }

    /// Back to the top configuration level after a failed command.
    async fn back_to_config_level(&mut self) -> Result<(), DeviceError> {
        let exit = self.sw.dialect.session.exit.clone();
        let mut guard = 0;
        while self.ctx.as_deref().is_some_and(|c| c != "config") && guard < 8 {
            self.run(&exit, true).await?;
            guard += 1;
        }
        Ok(())
    }

    async fn leave_config(&mut self) -> Result<(), DeviceError> {
        let exit = self.sw.dialect.session.exit.clone();
        let mut guard = 0;
        while self.ctx.is_some() && guard < 8 {
            self.run(&exit, true).await?;
            guard += 1;
        }
        Ok(())
    }

    async fn save(&mut self) -> Result<(), DeviceError> {
        let timeout = self.sw.options.command_timeout;
        for (step, confirm) in &self.sw.dialect.save {
            let cmd = step.command.clone();
            self.record(&cmd, true);
            self.shell.write(&format!("{cmd}\n")).await?;
            let prompt = self.prompt.clone();
            let confirm = confirm.clone();
            let echo = cmd.clone();
            let text = self
                .shell
                .read_until(
                    |b| {
                        let at = b.find(&echo)? + echo.len();
                        let rest = &b[at..];
                        confirm
                            .as_ref()
                            .and_then(|c| c.find(rest))
                            .or_else(|| prompt.find(rest))
                            .map(|m| at + m.end())
                    },
                    timeout,
                    &format!("waiting for the answer to `{cmd}`"),
                )
                .await?;
            let mut output = text.clone();
            if !self.prompt.is_match(&text)
                && let Some(answer) = &step.answer
            {
                self.record(answer, true);
                self.shell.write(&format!("{answer}\n")).await?;
                let prompt = self.prompt.clone();
                output = self
                    .shell
                    .read_until(
                        |b| prompt.find(b).map(|m| m.end()),
                        timeout,
                        &format!("waiting for `{cmd}` to finish"),
                    )
                    .await?;
            }
            self.note_prompt(&output);
            if let Some(line) = self.sw.dialect.error_in(&output) {
                return Err(DeviceError::CommandRejected {
                    command: cmd,
                    output: line,
                });
            }
        }
        Ok(())
    }

    async fn close(self) {
        self.shell.close().await;
    }
}

impl CliSwitch {
    async fn apply(&self, ops: &[PortOperation]) -> Result<Vec<PortResult>, DeviceError> {
        let mut s = self.session().await?;
        let result = self.apply_in(&mut s, ops).await;
        s.close().await;
        result
    }

    async fn apply_in(
        &self,
        s: &mut Session<'_>,
        ops: &[PortOperation],
    ) -> Result<Vec<PortResult>, DeviceError> {
        let mut outcomes: Vec<Option<Result<PortChange, DeviceError>>> = vec![None; ops.len()];
        let mut plans: Vec<Plan> = vec![Plan::default(); ops.len()];
        let caps = self.dialect.capabilities();
        for (i, op) in ops.iter().enumerate() {
            // Defence in depth: the validator refuses these before they get here.
            if let Some(&capability) = caps.missing_for(&op.target()).first() {
                outcomes[i] = Some(Err(DeviceError::Unsupported { capability }));
                continue;
            }
            match s.read_port(op.port()).await {
                Ok(observed) => {
                    let plan = self.dialect.plan(&observed, &op.target());
                    if plan.is_empty() {
                        outcomes[i] = Some(Ok(PortChange::Unchanged));
                    }
                    plans[i] = plan;
                }
                Err(e) if is_transport(&e) => return Err(e),
                Err(e) => outcomes[i] = Some(Err(e)),
            }
        }
        if outcomes.iter().all(Option::is_some) {
            return Ok(results(ops, outcomes));
        }
        s.run(&self.dialect.session.configure.clone(), true).await?;
        let mut vlan_errors: BTreeMap<VlanId, DeviceError> = BTreeMap::new();
        let todo: Vec<Plan> = plans
            .iter()
            .zip(&outcomes)
            .filter(|(_, o)| o.is_none())
            .map(|(p, _)| p.clone())
            .collect();
        for (vlan, name) in batch_vlans(&todo) {
            for line in self.dialect.create_vlan_lines(vlan, name.as_ref()) {
                match s.run(&line, true).await {
                    Ok(_) => {}
                    Err(e) if is_transport(&e) => return Err(e),
                    Err(e) => {
                        vlan_errors.insert(vlan, e);
                        s.back_to_config_level().await?;
                        break;
                    }
                }
            }
        }
        let mut changed = false;
        for (i, plan) in plans.iter().enumerate() {
            if outcomes[i].is_some() {
                continue;
            }
            if let Some(e) = plan.vlans.keys().find_map(|v| vlan_errors.get(v)) {
                outcomes[i] = Some(Err(e.clone()));
                continue;
            }
            let mut outcome = Ok(PortChange::Changed);
            'blocks: for block in &plan.blocks {
                for line in block {
                    match s.run(line, true).await {
                        Ok(_) => {}
                        Err(e) if is_transport(&e) => return Err(e),
                        Err(e) => {
                            outcome = Err(e);
                            s.back_to_config_level().await?;
                            break 'blocks;
                        }
                    }
                }
            }
            // A port whose commands partly ran has changed too: save it.
            changed = true;
            outcomes[i] = Some(outcome);
        }
        s.leave_config().await?;
        if changed && self.options.save_config {
            s.save().await?;
        }
        Ok(results(ops, outcomes))
    }
}

fn results(
    ops: &[PortOperation],
    outcomes: Vec<Option<Result<PortChange, DeviceError>>>,
) -> Vec<PortResult> {
    ops.iter()
        .zip(outcomes)
        .map(|(op, o)| PortResult {
            port: op.port().clone(),
            outcome: o.unwrap_or(Ok(PortChange::Unchanged)),
        })
        .collect()
}

#[async_trait]
impl Switch for CliSwitch {
    fn capabilities(&self) -> Capabilities {
        self.dialect.capabilities()
    }

    async fn get_port(&self, port: &PortName) -> Result<ObservedPort, DeviceError> {
        let mut s = self.session().await?;
        let r = s.read_port(port).await;
        s.close().await;
        r
    }

    async fn set_port(&self, desired: &DesiredPort) -> Result<PortChange, DeviceError> {
        let mut r = self.apply(&[PortOperation::Set(desired.clone())]).await?;
        r.remove(0).outcome
    }

    async fn reset_port(&self, port: &PortName) -> Result<PortChange, DeviceError> {
        let mut r = self.apply(&[PortOperation::Reset(port.clone())]).await?;
        r.remove(0).outcome
    }

    async fn apply_batch(&self, ops: &[PortOperation]) -> Result<Vec<PortResult>, DeviceError> {
        if ops.is_empty() {
            return Ok(Vec::new());
        }
        self.apply(ops).await
    }

    async fn get_ports(&self, ports: &[PortName]) -> Result<PortReads, DeviceError> {
        let mut s = self.session().await?;
        let mut out = Vec::with_capacity(ports.len());
        for p in ports {
            match s.read_port(p).await {
                Err(e) if is_transport(&e) => {
                    s.close().await;
                    return Err(e);
                }
                r => out.push((p.clone(), r)),
            }
        }
        s.close().await;
        Ok(out)
    }
}

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

pub mod dialect;
pub mod script;
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

pub use dialect::{Aggregates, Dialect, Plan, Reading, aggregates_to_remove};
pub use script::LineOwner;
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

/// The first prompt in `b` after `from`: (start, end). With pipelined input the
/// device prints a prompt and then echoes the next line on the same line, so a prompt
/// counts when it is followed by a line end, the end of what arrived, or `next`.
fn prompt_after(body: &Regex, b: &str, from: usize, next: Option<&str>) -> Option<(usize, usize)> {
    body.find_iter(&b[from..]).find_map(|m| {
        let end = from + m.end();
        let after = b[end..].strip_prefix(' ').unwrap_or(&b[end..]);
        let ok = after.is_empty()
            || after.starts_with('\r')
            || after.starts_with('\n')
            || next.is_some_and(|n| after.starts_with(n));
        ok.then_some((from + m.start(), end))
    })
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
    /// The prompt without the end anchor (pipelined answers).
    prompt_body: Regex,
    /// Context of the last prompt (`config`, `config-if`, …), `None` outside
    /// configuration mode.
    ctx: Option<String>,
    privileged: bool,
    /// Values replaced by `***` wherever this session records or reports a line
    /// (a BGP password).
    hide: Vec<String>,
}

/// `text` with every value of `hide` replaced by `***`.
fn redact(text: &str, hide: &[String]) -> String {
    hide.iter()
        .filter(|h| !h.is_empty())
        .fold(text.to_owned(), |t, h| t.replace(h.as_str(), "***"))
}

impl<'a> Session<'a> {
    async fn start(sw: &'a CliSwitch) -> Result<Self, DeviceError> {
        let mut shell = Shell::open(&sw.target, &sw.heard).await?;
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
                cause: Cause::msg("no prompt"),
            })?;
        let host = caps["host"].to_owned();
        let body = format!(
            r"(?:SSH@)?{}(?:\((?P<ctx>[^)\r\n]*)\))?(?P<level>[>#])",
            regex::escape(&host)
        );
        let unusable = |e: regex::Error| DeviceError::Protocol {
            during: "logging in".into(),
            cause: Cause::during("unusable hostname in prompt", e),
        };
        let prompt = Regex::new(&format!("{body} ?$")).map_err(unusable)?;
        let prompt_body = Regex::new(&body).map_err(unusable)?;
        let mut s = Self {
            sw,
            shell,
            prompt,
            prompt_body,
            ctx: None,
            privileged: &caps["level"] == "#",
            hide: Vec::new(),
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
            j.lock().push(Sent {
                line: redact(line, &self.hide),
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
                cause: Cause::msg(
                    "the login landed in user mode and the dialect has no enable command",
                ),
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
        let mut answers = self.run_many(&[cmd.to_owned()], configures).await?;
        answers.remove(0)
    }

    /// Sends `lines` in one write (pipelined) and returns each line's outcome, in
    /// order: its output, or `CommandRejected` when the output matches an error
    /// pattern. The answer is split at each line's echo and the prompt after it, so
    /// every output is attributed to its own command. A transport failure fails all.
    async fn run_many(
        &mut self,
        lines: &[String],
        configures: bool,
    ) -> Result<Vec<Result<String, DeviceError>>, DeviceError> {
        if lines.is_empty() {
            return Ok(Vec::new());
        }
        let mut input = String::new();
        for l in lines {
            self.record(l, configures);
            input.push_str(l);
            input.push('\n');
        }
        self.shell.write(&input).await?;
        let body = self.prompt_body.clone();
        // (output start, output end, prompt end) per line, found incrementally: what
        // has arrived only grows until the answer is complete, so each call resumes
        // where the last one stopped instead of rescanning every line.
        let mut found: Vec<(usize, usize, usize)> = Vec::with_capacity(lines.len());
        let spans = |b: &str| -> Option<usize> {
            let mut at = found.last().map_or(0, |x| x.2);
            for (k, l) in lines.iter().enumerate().skip(found.len()) {
                let echo = b[at..].find(l.as_str())? + at + l.len();
                // The first prompt after the echo ends this line's answer.
                let next = lines.get(k + 1).map(String::as_str);
                let m = prompt_after(&body, b, echo, next)?;
                found.push((echo, m.0, m.1));
                at = m.1;
            }
            found.last().map(|x| x.2)
        };
        let timeout = self.sw.options.command_timeout * (1 + lines.len() as u32 / 50);
        // A pager's key would eat the next pipelined line: only a lone command pages.
        let pager = match lines {
            [_] => self.sw.dialect.pager.as_ref(),
            _ => None,
        };
        let text = self
            .shell
            .read_paged(
                spans,
                pager,
                timeout,
                &format!("waiting for the answers to {} commands", lines.len()),
            )
            .await?;
        let spans = found;
        self.note_prompt(&text);
        Ok(lines
            .iter()
            .zip(spans)
            .map(|(l, (start, end, _))| {
                let output = text[start..end].to_owned();
                match self.sw.dialect.error_in(&output) {
                    Some(line) => Err(DeviceError::CommandRejected {
                        command: redact(l, &self.hide),
                        output: redact(&line, &self.hide),
                    }),
                    None => Ok(output),
                }
            })
            .collect())
    }

    /// Reads many ports: with the dialect's batch command when it has one and the
    /// read is large enough (one command, cut into each port's block), and with one
    /// pipelined write of the ports' own show commands for the rest (all of them
    /// otherwise, and any port the batch output does not show). Where the dialect
    /// has link aggregation, the aggregates of the groups the ports are in, and of
    /// `also`, are then read with one more pipelined write, and each member settled
    /// against its aggregate. Where it has a VLAN table read, the table is read once
    /// and each port checked against it (`ObservedPort::missing_vlans`).
    async fn read_ports(
        &mut self,
        ports: &[PortName],
        also: &BTreeSet<LagGroup>,
    ) -> Result<(Vec<Result<Reading, DeviceError>>, Aggregates), DeviceError> {
        let dialect = Arc::clone(&self.sw.dialect);
        let mut out: Vec<Option<Result<String, DeviceError>>> = vec![None; ports.len()];
        if let Some(cmd) = dialect.batch_read_command(ports.len()) {
            // A rejected batch command is not a port's failure: the ports' own
            // commands still run below.
            if let Ok(text) = self.run(cmd, false).await {
                for (slot, block) in out.iter_mut().zip(dialect.split_batch(&text, ports)) {
                    *slot = block.map(Ok);
                }
            }
        }
        let rest: Vec<usize> = (0..ports.len()).filter(|&i| out[i].is_none()).collect();
        let names: Vec<PortName> = rest.iter().map(|&i| ports[i].clone()).collect();
        for (i, read) in rest.into_iter().zip(self.read_each(&names).await?) {
            out[i] = Some(read);
        }
        let mut readings: Vec<Result<Reading, DeviceError>> = out
            .into_iter()
            .zip(ports)
            .map(|(text, port)| Ok(dialect.read(port, &text.expect("every port read")?)))
            .collect();
        let mut groups = also.clone();
        groups.extend(readings.iter().flatten().filter_map(Reading::channel_group));
        let aggregates = self.read_aggregates(&groups).await?;
        for r in readings.iter_mut().flatten() {
            dialect.settle(r, &aggregates);
        }
        if let Some(table) = &dialect.vlan_table {
            let defined = dialect.parse_vlan_table(&self.run(&table.command, false).await?);
            for r in readings.iter_mut().flatten() {
                r.observed = r.observed.clone().against_vlan_table(&defined);
            }
        }
        Ok((readings, aggregates))
    }

    /// Reads the aggregates of `groups` with their own show commands, in one write;
    /// an aggregate whose show the device refuses does not exist.
    async fn read_aggregates(
        &mut self,
        groups: &BTreeSet<LagGroup>,
    ) -> Result<Aggregates, DeviceError> {
        let dialect = Arc::clone(&self.sw.dialect);
        let named: Vec<(LagGroup, PortName)> = groups
            .iter()
            .filter_map(|g| Some((*g, dialect.aggregate_name(*g)?)))
            .collect();
        let names: Vec<PortName> = named.iter().map(|(_, n)| n.clone()).collect();
        let texts = self.read_each(&names).await?;
        Ok(named
            .into_iter()
            .zip(texts)
            .map(|((g, _), text)| (g, text.ok().and_then(|t| dialect.aggregate_vlans(g, &t))))
            .collect())
    }

    /// Reads ports with one pipelined write of all their own show commands: each
    /// port's outputs, concatenated.
    async fn read_each(
        &mut self,
        ports: &[PortName],
    ) -> Result<Vec<Result<String, DeviceError>>, DeviceError> {
        let per_port: Vec<Vec<String>> = ports
            .iter()
            .map(|p| self.sw.dialect.read_commands(p))
            .collect();
        let all: Vec<String> = per_port.iter().flatten().cloned().collect();
        let mut outcomes = self.run_many(&all, false).await?.into_iter();
        let mut out = Vec::with_capacity(ports.len());
        for cmds in &per_port {
            let mut text = String::new();
            let mut failed = None;
            for _ in cmds {
                match outcomes.next().expect("one outcome per command") {
                    Ok(o) => {
                        text.push_str(&o);
                        text.push('\n');
                    }
                    Err(e) => {
                        failed.get_or_insert(e);
                    }
                }
            }
            out.push(match failed {
                Some(e) => Err(e),
                None => Ok(text),
            });
        }
        Ok(out)
    }

    /// The ports as compared with their desired state.
    async fn observe(
        &mut self,
        ports: &[PortName],
    ) -> Result<Vec<Result<ObservedPort, DeviceError>>, DeviceError> {
        let (reads, _) = self.read_ports(ports, &BTreeSet::new()).await?;
        Ok(reads.into_iter().map(|r| r.map(|r| r.observed)).collect())
    }

    /// Sends the configuration of `plans` ([`Dialect::configuration_segments`], one
    /// write each) and collects what the device refused. Once a line of a
    /// link-aggregation group is refused, the group's lines in later writes are not
    /// sent. After a write with a refusal the session goes back to the top
    /// configuration level (a refused `interface` line sends its block's `exit` out
    /// of configuration mode) before the next.
    async fn send(&mut self, plans: &[Plan]) -> Result<SendReport, DeviceError> {
        let dialect = Arc::clone(&self.sw.dialect);
        let mut r = SendReport::default();
        let groups_of = |owner: &LineOwner| -> Vec<LagGroup> {
            let of = |i: &usize| plans.get(*i).and_then(Plan::group);
            match owner {
                LineOwner::Port(i) => of(i).into_iter().collect(),
                LineOwner::Ports(members) => members.iter().filter_map(of).collect(),
                LineOwner::Session | LineOwner::Vlan(_) => Vec::new(),
            }
        };
        for segment in dialect.configuration_segments(plans) {
            let (owners, lines): (Vec<LineOwner>, Vec<String>) = segment
                .into_iter()
                .filter(|(owner, _)| {
                    let groups = groups_of(owner);
                    groups.is_empty() || groups.iter().any(|g| !r.failed_groups.contains(g))
                })
                .unzip();
            let answers = self.run_many(&lines, true).await?;
            let mut refused = false;
            for (owner, answer) in owners.iter().zip(answers) {
                let Err(e) = answer else { continue };
                refused = true;
                for g in groups_of(owner) {
                    r.failed_groups.insert(g);
                    r.group_errors.entry(g).or_insert_with(|| e.clone());
                }
                match owner {
                    LineOwner::Session => return Err(e),
                    LineOwner::Vlan(v) => {
                        r.vlan_errors.entry(*v).or_insert(e);
                    }
                    LineOwner::Port(i) => {
                        r.port_errors.entry(*i).or_insert(e);
                    }
                    LineOwner::Ports(members) => {
                        for i in members {
                            r.port_errors.entry(*i).or_insert_with(|| e.clone());
                        }
                    }
                }
            }
            // A VLAN a group needs that could not be made fails the group.
            for plan in plans {
                if let Some(g) = plan.group()
                    && let Some(e) = plan.vlans.keys().find_map(|v| r.vlan_errors.get(v))
                {
                    r.failed_groups.insert(g);
                    r.group_errors.entry(g).or_insert_with(|| e.clone());
                }
            }
            if refused {
                if self.ctx.is_none() {
                    self.run(&dialect.session.configure, true).await?;
                } else {
                    self.back_to_config_level().await?;
                }
            }
        }
        Ok(r)
    }

    /// Sends `exit` while `stay` holds for the current context (at most 8 times).
    async fn exit_while(&mut self, stay: impl Fn(Option<&str>) -> bool) -> Result<(), DeviceError> {
        let exit = self.sw.dialect.session.exit.clone();
        for _ in 0..8 {
            if !stay(self.ctx.as_deref()) {
                break;
            }
            self.run(&exit, true).await?;
        }
        Ok(())
    }

    /// Back to the top configuration level after a failed command.
    async fn back_to_config_level(&mut self) -> Result<(), DeviceError> {
        self.exit_while(|ctx| ctx.is_some_and(|c| c != "config"))
            .await
    }

    /// Out of configuration mode.
    async fn leave_config(&mut self) -> Result<(), DeviceError> {
        self.exit_while(|ctx| ctx.is_some()).await
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

    /// The batch, then the read-back of the ports it applied, in the same session
    /// (after saving): one login instead of two.
    async fn apply_then_read(
        &self,
        ops: &[PortOperation],
    ) -> Result<(Vec<PortResult>, PortReads), DeviceError> {
        let mut s = self.session().await?;
        let result = async {
            let results = self.apply_in(&mut s, ops).await?;
            let applied = applied_ports(&results);
            let reads = if applied.is_empty() {
                Vec::new()
            } else {
                applied
                    .iter()
                    .cloned()
                    .zip(s.observe(&applied).await?)
                    .collect()
            };
            Ok((results, reads))
        }
        .await;
        s.close().await;
        result
    }

    /// Reads the ports of a batch and plans each (nothing for a port that already
    /// matches, or that is decided already: refused, unreadable, or a member of a
    /// group one of whose members is). Where ports leave a group, the running
    /// configuration says whether any member stays; the aggregate of a group none
    /// stays in is removed after them.
    async fn prepare(
        &self,
        s: &mut Session<'_>,
        ops: &[PortOperation],
    ) -> Result<Prepared, DeviceError> {
        let n = ops.len();
        let mut p = Prepared {
            targets: ops.iter().map(PortOperation::target).collect(),
            outcomes: vec![None; n],
            readings: vec![None; n],
            aggregates: Aggregates::new(),
            plans: vec![Plan::default(); n],
        };
        let caps = self.dialect.capabilities();
        let mut to_read = Vec::new();
        for (i, target) in p.targets.iter().enumerate() {
            // Defence in depth: the validator refuses these before they get here.
            if let Some(&capability) = caps.missing_for(target).first() {
                p.outcomes[i] = Some(Err(DeviceError::Unsupported { capability }));
            } else {
                to_read.push(i);
            }
        }
        let names: Vec<PortName> = to_read.iter().map(|&i| ops[i].port().clone()).collect();
        let joins: BTreeSet<LagGroup> = to_read
            .iter()
            .filter_map(|&i| p.targets[i].lag.map(|l| l.group))
            .collect();
        let (reads, aggregates) = s.read_ports(&names, &joins).await?;
        p.aggregates = aggregates;
        for (&i, read) in to_read.iter().zip(reads) {
            match read {
                Ok(r) => p.readings[i] = Some(r),
                Err(e) => p.outcomes[i] = Some(Err(e)),
            }
        }
        p.fail_incomplete_groups();
        for i in 0..n {
            let (None, Some(reading)) = (&p.outcomes[i], &p.readings[i]) else {
                continue;
            };
            let plan = self.dialect.plan(reading, &p.aggregates, &p.targets[i]);
            if plan.is_empty() {
                p.outcomes[i] = Some(Ok(PortChange::Unchanged));
            } else {
                p.plans[i] = plan;
            }
        }
        let leaving: Vec<(PortName, LagGroup)> = p
            .plans
            .iter()
            .filter_map(|plan| Some((plan.port.clone()?, plan.leaves?)))
            .collect();
        if !leaving.is_empty()
            && let Some(cmd) = self.dialect.running_config.clone()
        {
            let on_device = self.dialect.channel_members(&s.run(&cmd, false).await?);
            let joining: Vec<(PortName, LagGroup)> = p
                .plans
                .iter()
                .filter_map(|plan| Some((plan.port.clone()?, plan.joins?)))
                .collect();
            for group in aggregates_to_remove(&leaving, &joining, &on_device) {
                for plan in p.plans.iter_mut().filter(|x| x.leaves == Some(group)) {
                    plan.removal = Some((group, self.dialect.removal_block(group)));
                }
            }
        }
        Ok(p)
    }

    async fn apply_in(
        &self,
        s: &mut Session<'_>,
        ops: &[PortOperation],
    ) -> Result<Vec<PortResult>, DeviceError> {
        let mut p = self.prepare(s, ops).await?;
        if p.outcomes.iter().all(Option::is_some) {
            return Ok(batch_results(ops, p.outcomes));
        }
        // The whole configuration in one pipelined write (and one per aggregate or
        // range block), the same lines `--dry-run` prints (ports already decided
        // have empty plans). Every port in it was just read in this session, so
        // entering it cannot fail; each line's answer is still checked and a
        // failure fails the port (or the VLAN's ports, or the range's ports, or the
        // link-aggregation group) it belongs to.
        let sent = s.send(&p.plans).await?;
        let mut notes: BTreeMap<LagGroup, String> = BTreeMap::new();
        if !sent.failed_groups.is_empty() {
            // Read again out of configuration mode; each put-back write enters it.
            s.leave_config().await?;
            for group in &sent.failed_groups {
                let note = match self.put_back(s, &p, *group).await {
                    Ok(()) => format!("; link-aggregation group {} was put back", group.get()),
                    Err(e) => format!(
                        "; putting link-aggregation group {} back failed: {e}",
                        group.get()
                    ),
                };
                notes.insert(*group, note);
            }
        }
        let mut changed = false;
        let mut port_errors = sent.port_errors;
        for (i, plan) in p.plans.iter().enumerate() {
            if p.outcomes[i].is_some() {
                continue;
            }
            // A port whose commands ran, even partly, has changed: save it.
            changed = true;
            let vlan_error = plan.vlans.keys().find_map(|v| sent.vlan_errors.get(v));
            let group_error = plan
                .group()
                .and_then(|g| Some((sent.group_errors.get(&g)?, notes.get(&g)?)));
            p.outcomes[i] = Some(match (port_errors.remove(&i), vlan_error, group_error) {
                (Some(e), _, Some((_, note))) => Err(noted(e, note)),
                (Some(e), _, None) => Err(e),
                (None, Some(e), _) => Err(e.clone()),
                (None, None, Some((e, note))) => Err(noted(e.clone(), note)),
                (None, None, None) => Ok(PortChange::Changed),
            });
        }
        if !sent.failed_groups.is_empty() || !port_errors.is_empty() || !sent.vlan_errors.is_empty()
        {
            s.back_to_config_level().await?;
        }
        s.leave_config().await?;
        if changed && self.options.save_config {
            s.save().await?;
        }
        Ok(batch_results(ops, p.outcomes))
    }

    /// Puts the ports of a group whose configuration the device refused back as
    /// they were read before the batch, and its aggregate too (removed where it did
    /// not exist): read again, planned back, sent.
    async fn put_back(
        &self,
        s: &mut Session<'_>,
        p: &Prepared,
        group: LagGroup,
    ) -> Result<(), DeviceError> {
        let members: Vec<usize> = (0..p.plans.len())
            .filter(|&i| p.outcomes[i].is_none() && p.plans[i].group() == Some(group))
            .collect();
        let names: Vec<PortName> = members
            .iter()
            .filter_map(|&i| p.plans[i].port.clone())
            .collect();
        let mut groups: BTreeSet<LagGroup> = BTreeSet::from([group]);
        groups.extend(
            members
                .iter()
                .filter_map(|&i| p.readings[i].as_ref()?.channel_group()),
        );
        let (reads, now) = s.read_ports(&names, &groups).await?;
        let mut plans = Vec::new();
        for (&i, read) in members.iter().zip(reads) {
            let Some(before) = &p.readings[i] else {
                continue;
            };
            let mut plan = self.dialect.plan(&read?, &now, &before.restore_target());
            plan.aggregate = None;
            plan.removal = None;
            plans.push(plan);
        }
        for g in groups {
            let Some(before) = p.aggregates.get(&g) else {
                continue;
            };
            let lines = self.dialect.aggregate_restore(
                g,
                before.as_ref(),
                now.get(&g).and_then(Option::as_ref),
            );
            if lines.is_empty() {
                continue;
            }
            let mut plan = Plan::default();
            if before.is_some() {
                plan.aggregate = Some((g, lines));
            } else {
                plan.removal = Some((g, lines));
            }
            plans.push(plan);
        }
        let sent = s.send(&plans).await?;
        match sent
            .port_errors
            .into_values()
            .chain(sent.vlan_errors.into_values())
            .next()
        {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

/// A batch read and planned: per operation its target, its outcome where already
/// decided, what was read and its plan; and the aggregates read.
struct Prepared {
    targets: Vec<DesiredPort>,
    outcomes: Vec<Option<Result<PortChange, DeviceError>>>,
    readings: Vec<Option<Reading>>,
    aggregates: Aggregates,
    plans: Vec<Plan>,
}

impl Prepared {
    /// A group goes whole or not at all: a member that is refused or cannot be read
    /// fails the other members of its group before anything is sent.
    fn fail_incomplete_groups(&mut self) {
        for i in 0..self.targets.len() {
            let (Some(Err(e)), Some(lag)) = (&self.outcomes[i], self.targets[i].lag) else {
                continue;
            };
            let note = format!(
                "; not sent: {} of link-aggregation group {} failed",
                self.targets[i].port,
                lag.group.get()
            );
            let e = noted(e.clone(), &note);
            for j in 0..self.targets.len() {
                if self.outcomes[j].is_none()
                    && self.targets[j].lag.map(|l| l.group) == Some(lag.group)
                {
                    self.outcomes[j] = Some(Err(e.clone()));
                }
            }
        }
    }
}

/// A refusal with a note on what it did to the rest of its group.
fn noted(e: DeviceError, note: &str) -> DeviceError {
    match e {
        DeviceError::CommandRejected { command, output } => DeviceError::CommandRejected {
            command,
            output: format!("{output}{note}"),
        },
        other => other,
    }
}

/// What sending a batch's configuration met: refusals by port, by VLAN and by
/// link-aggregation group (the first of each group), and the groups that failed.
#[derive(Default)]
struct SendReport {
    port_errors: BTreeMap<usize, DeviceError>,
    vlan_errors: BTreeMap<VlanId, DeviceError>,
    group_errors: BTreeMap<LagGroup, DeviceError>,
    failed_groups: BTreeSet<LagGroup>,
}

/// What the ports see, through the dialect's `neighbors:` section: one session, the
/// LLDP command then the MAC table command. The session is its own (not a batch's,
/// not a drift sweep's): a Switch reads it only when it names this device in
/// `spec.neighbors.providers`. The device's own chassis id is not read.
impl CliSwitch {
    fn bgp_spec(&self) -> Result<&crate::cli::dialect::bgp::BgpSpec, DeviceError> {
        self.dialect
            .bgp
            .as_ref()
            .ok_or_else(|| DeviceError::Protocol {
                during: "configuring BGP".into(),
                cause: Cause::msg(format!("dialect {} has no bgp section", self.dialect.name)),
            })
    }

    /// Reads the speaker in session `s`.
    async fn bgp_read(&self, s: &mut Session<'_>) -> Result<crate::bgp::SpeakerState, DeviceError> {
        let spec = self.bgp_spec()?;
        let neighbors = s.run(&spec.read.neighbors, false).await?;
        let lists = s.run(&spec.read.prefix_lists, false).await?;
        let sessions = match spec.state_command(&neighbors) {
            Some(command) => Some(s.run(command, false).await?),
            None => None,
        };
        let route_maps = match &spec.read.route_maps {
            Some(command) => Some(s.run(command, false).await?),
            None => None,
        };
        spec.parse(
            &neighbors,
            &lists,
            sessions.as_deref(),
            route_maps.as_deref(),
        )
        .map_err(|why| DeviceError::Protocol {
            during: "reading the BGP neighbours".into(),
            cause: Cause::msg(why),
        })
    }

    async fn bgp_apply_in(
        &self,
        s: &mut Session<'_>,
        router: &crate::bgp::Router,
        changes: &[crate::bgp::Change],
    ) -> Result<crate::bgp::SpeakerState, DeviceError> {
        let spec = self.bgp_spec()?;
        let lines = spec.render(router, changes);
        if !lines.is_empty() {
            s.hide = changes
                .iter()
                .filter_map(|c| match c {
                    crate::bgp::Change::Put { neighbor, .. } => neighbor.password.as_ref(),
                    crate::bgp::Change::Remove { .. } | crate::bgp::Change::Policy { .. } => None,
                })
                .map(|p| p.expose().to_owned())
                .collect();
            let configure = self.dialect.session.configure.clone();
            s.run(&configure, true).await?;
            let text: Vec<String> = lines.into_iter().map(|l| l.text).collect();
            let answers = s.run_many(&text, true).await?;
            // Back to privileged mode whatever level a failed line left.
            let exit = self.dialect.session.exit.clone();
            for _ in 0..4 {
                if s.ctx.is_none() {
                    break;
                }
                s.run(&exit, true).await?;
            }
            if let Some(e) = answers.into_iter().find_map(Result::err) {
                return Err(e);
            }
        }
        self.bgp_read(s).await
    }
}

#[async_trait]
impl crate::device::BgpSpeaker for CliSwitch {
    async fn bgp_state(&self) -> Result<crate::bgp::SpeakerState, DeviceError> {
        self.bgp_spec()?;
        let mut s = self.session().await?;
        let r = self.bgp_read(&mut s).await;
        s.close().await;
        r
    }

    async fn bgp_apply(
        &self,
        router: &crate::bgp::Router,
        changes: &[crate::bgp::Change],
    ) -> Result<crate::bgp::SpeakerState, DeviceError> {
        self.bgp_spec()?;
        let mut s = self.session().await?;
        let r = self.bgp_apply_in(&mut s, router, changes).await;
        s.close().await;
        r
    }
}

#[async_trait]
impl crate::device::NeighborSource for CliSwitch {
    async fn neighbors(&self) -> Result<crate::neighbors::Neighbors, DeviceError> {
        let Some(spec) = &self.dialect.neighbors else {
            return Err(DeviceError::Protocol {
                during: "reading neighbours".into(),
                cause: Cause::msg(format!(
                    "dialect {} has no neighbors section",
                    self.dialect.name
                )),
            });
        };
        let mut s = self.session().await?;
        let lldp = s.run(&spec.lldp_command, false).await;
        let macs = match (&lldp, &spec.macs_command) {
            (Ok(_), Some(c)) => Some(s.run(c, false).await),
            _ => None,
        };
        s.close().await;
        let lldp = spec.lldp(&lldp?);
        let macs = macs.transpose()?.map(|t| spec.macs(&t)).unwrap_or_default();
        Ok(crate::neighbors::Neighbors::gather(None, lldp, macs))
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

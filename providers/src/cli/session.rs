//! One SSH shell session on a vendor CLI: the prompt (learnt from the first one, then
//! found after each answer's echo), enable, pipelined commands with their timeouts, the
//! dialect's error patterns, show reads, sending planned lines, leaving configuration
//! mode and saving. Device I/O over the transport's shell; passwords redacted from
//! everything recorded.

use super::*;

/// The first prompt in `b` after `from`: (start, end). With pipelined input the
/// device prints a prompt and then echoes the next line on the same line, so a prompt
/// counts when it is followed by a line end, the end of what arrived, or `next`.
pub(super) fn prompt_after(
    body: &Regex,
    b: &str,
    from: usize,
    next: Option<&str>,
) -> Option<(usize, usize)> {
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
pub(super) fn first_prompt() -> &'static Regex {
    static RE: std::sync::OnceLock<Regex> = std::sync::OnceLock::new();
    RE.get_or_init(|| {
        Regex::new(
            r"(?:^|[\r\n])(?:SSH@)?(?P<host>[A-Za-z0-9_.\-]+)(?:\((?P<ctx>[^)\r\n]*)\))?(?P<level>[>#]) ?$",
        )
        .expect("valid regex")
    })
}

pub(super) struct Session<'a> {
    pub(super) sw: &'a CliSwitch,
    pub(super) shell: Shell,
    pub(super) prompt: Regex,
    /// The prompt without the end anchor (pipelined answers).
    pub(super) prompt_body: Regex,
    /// Context of the last prompt (`config`, `config-if`, …), `None` outside
    /// configuration mode.
    pub(super) ctx: Option<String>,
    pub(super) privileged: bool,
    /// Values replaced by `***` wherever this session records or reports a line
    /// (a BGP password).
    pub(super) hide: Vec<String>,
}

/// `text` with every value of `hide` replaced by `***`.
pub(super) fn redact(text: &str, hide: &[String]) -> String {
    hide.iter()
        .filter(|h| !h.is_empty())
        .fold(text.to_owned(), |t, h| t.replace(h.as_str(), "***"))
}

impl<'a> Session<'a> {
    pub(super) async fn start(sw: &'a CliSwitch) -> Result<Self, DeviceError> {
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

    pub(super) fn record(&self, line: &str, configures: bool) {
        if let Some(j) = &self.sw.journal {
            j.lock().push(Sent {
                line: redact(line, &self.hide),
                configures,
            });
        }
    }

    pub(super) fn note_prompt(&mut self, text: &str) {
        if let Some(c) = self.prompt.captures(text) {
            self.ctx = c.name("ctx").map(|m| m.as_str().to_owned());
            self.privileged = &c["level"] == "#";
        }
    }

    pub(super) async fn enable(&mut self) -> Result<(), DeviceError> {
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
    pub(super) async fn run(&mut self, cmd: &str, configures: bool) -> Result<String, DeviceError> {
        let mut answers = self.run_many(&[cmd.to_owned()], configures).await?;
        answers.remove(0)
    }

    /// Sends `lines` in one write (pipelined) and returns each line's outcome, in
    /// order: its output, or `CommandRejected` when the output matches an error
    /// pattern. The answer is split at each line's echo and the prompt after it, so
    /// every output is attributed to its own command. A transport failure fails all.
    pub(super) async fn run_many(
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
    pub(super) async fn read_ports(
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
    pub(super) async fn read_aggregates(
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
    pub(super) async fn read_each(
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
    pub(super) async fn observe(
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
    pub(super) async fn send(&mut self, plans: &[Plan]) -> Result<SendReport, DeviceError> {
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
    pub(super) async fn exit_while(
        &mut self,
        stay: impl Fn(Option<&str>) -> bool,
    ) -> Result<(), DeviceError> {
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
    pub(super) async fn back_to_config_level(&mut self) -> Result<(), DeviceError> {
        self.exit_while(|ctx| ctx.is_some_and(|c| c != "config"))
            .await
    }

    /// Out of configuration mode.
    pub(super) async fn leave_config(&mut self) -> Result<(), DeviceError> {
        self.exit_while(|ctx| ctx.is_some()).await
    }

    pub(super) async fn save(&mut self) -> Result<(), DeviceError> {
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

    pub(super) async fn close(self) {
        self.shell.close().await;
    }
}

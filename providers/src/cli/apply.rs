//! Applying a batch: read the ports, plan each one's lines (nothing for a port that
//! already matches), send them in one pipelined write, save once, and put back what a
//! failed link-aggregation group had changed; the read-back in the same session. Device
//! I/O through a session.

use super::*;

impl CliSwitch {
    pub(super) async fn apply(
        &self,
        ops: &[PortOperation],
    ) -> Result<Vec<PortResult>, DeviceError> {
        let mut s = self.session().await?;
        let result = self.apply_in(&mut s, ops).await;
        s.close().await;
        result
    }

    /// The batch, then the read-back of the ports it applied, in the same session
    /// (after saving): one login instead of two.
    pub(super) async fn apply_then_read(
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
    pub(super) async fn prepare(
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

    pub(super) async fn apply_in(
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
    pub(super) async fn put_back(
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
pub(super) struct Prepared {
    pub(super) targets: Vec<DesiredPort>,
    pub(super) outcomes: Vec<Option<Result<PortChange, DeviceError>>>,
    pub(super) readings: Vec<Option<Reading>>,
    pub(super) aggregates: Aggregates,
    pub(super) plans: Vec<Plan>,
}

impl Prepared {
    /// A group goes whole or not at all: a member that is refused or cannot be read
    /// fails the other members of its group before anything is sent.
    pub(super) fn fail_incomplete_groups(&mut self) {
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
pub(super) fn noted(e: DeviceError, note: &str) -> DeviceError {
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
pub(super) struct SendReport {
    pub(super) port_errors: BTreeMap<usize, DeviceError>,
    pub(super) vlan_errors: BTreeMap<VlanId, DeviceError>,
    pub(super) group_errors: BTreeMap<LagGroup, DeviceError>,
    pub(super) failed_groups: BTreeSet<LagGroup>,
}

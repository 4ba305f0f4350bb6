//! Committing a batch: one OVSDB transaction for every port's operations, waiting until
//! ovs-vswitchd reports the configuration in the datapath (cur_cfg), the admin state
//! and OpenFlow rules after; a refused transaction retried port by port so the refusal
//! lands on the port that caused it. OVSDB and OpenFlow I/O.

use super::*;

impl OvsSwitch {
    /// Opens the bridge's OpenFlow session and dumps patchbay's flows, when the
    /// bridge has an OpenFlow target.
    pub(super) async fn open_openflow(
        &self,
    ) -> Result<Option<(openflow::Session, Vec<Flow>)>, DeviceError> {
        let Some(target) = &self.opts.openflow else {
            return Ok(None);
        };
        let mut s = openflow::Session::open(target, self.opts.command_timeout).await?;
        let flows = s.dump_flows(acl::MARK, acl::MARK_MASK).await?;
        Ok(Some((s, flows)))
    }

    /// Commits `ops` with `next_cfg += 1` and waits until ovs-vswitchd applied it.
    pub(super) async fn commit(
        &self,
        conn: &mut Connection,
        mut ops: Vec<Value>,
    ) -> Result<(), DeviceError> {
        ops.extend(cfg_ops());
        let results = conn.transact(DB, &ops).await?;
        let target = results
            .last()
            .map(rows)
            .and_then(|r| r.first().and_then(|r| r["next_cfg"].as_i64()))
            .ok_or_else(|| DeviceError::Protocol {
                during: "reading next_cfg".into(),
                cause: Cause::msg("no Open_vSwitch row"),
            })?;
        self.wait_cur_cfg(conn, target).await
    }

    /// Polls `cur_cfg` until ovs-vswitchd has caught up with `target`.
    pub(super) async fn wait_cur_cfg(
        &self,
        conn: &mut Connection,
        target: i64,
    ) -> Result<(), DeviceError> {
        let deadline = Instant::now() + self.opts.command_timeout;
        let mut pause = Duration::from_micros(500);
        loop {
            let r = conn
                .transact(DB, &[json!({"op": "select", "table": "Open_vSwitch", "where": [], "columns": ["cur_cfg"]})])
                .await?;
            let cur = rows(&r[0])
                .first()
                .and_then(|r| r["cur_cfg"].as_i64())
                .unwrap_or(0);
            if cur >= target {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(DeviceError::Timeout {
                    during: format!(
                        "waiting for ovs-vswitchd to apply configuration {target} (cur_cfg {cur}); is ovs-vswitchd running?"
                    ),
                    after: self.opts.command_timeout,
                });
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(20));
        }
    }

    /// The port-mods of `changes`.
    pub(super) fn admin_requests(
        changes: &[(bool, Vec<IfaceRow>)],
    ) -> Result<Vec<(String, bool, openflow::Request)>, DeviceError> {
        let mut mods = Vec::new();
        for (down, ifaces) in changes {
            for f in ifaces {
                let (Some(ofport), Some(mac)) = (
                    f.ofport
                        .and_then(|p| u32::try_from(p).ok())
                        .filter(|p| (1..0xff00).contains(p)),
                    f.mac.as_deref().and_then(ofwire::parse_mac),
                ) else {
                    return Err(DeviceError::CommandRejected {
                        command: format!("OpenFlow port-mod of {}", f.name),
                        output:
                            "the interface has no OpenFlow port number or MAC (is it attached?)"
                                .into(),
                    });
                };
                mods.push((
                    f.name.clone(),
                    *down,
                    openflow::Request {
                        what: format!("OpenFlow port-mod of {}", f.name),
                        bytes: ofwire::port_mod(ofport, mac, *down, 0),
                    },
                ));
            }
        }
        Ok(mods)
    }

    /// Waits until OVSDB reports the admin state the port-mods of `names` asked for
    /// (ovs-vswitchd writes it shortly after), so the read-back that follows sees it.
    pub(super) async fn wait_admin(
        &self,
        conn: &mut Connection,
        names: &[(String, bool)],
    ) -> Result<(), DeviceError> {
        if names.is_empty() {
            return Ok(());
        }
        let deadline = Instant::now() + self.opts.command_timeout;
        loop {
            let ops: Vec<Value> = names
                .iter()
                .map(|(name, _)| {
                    json!({"op": "select", "table": "Interface",
                    "where": [["name", "==", name]], "columns": ["admin_state"]})
                })
                .collect();
            let r = conn.transact(DB, &ops).await?;
            let pending = names.iter().zip(&r).filter(|((_, down), res)| {
                let state = rows(res)
                    .first()
                    .and_then(|row| string(&row["admin_state"]));
                state.as_deref() != Some(if *down { "down" } else { "up" })
            });
            if pending.count() == 0 {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(DeviceError::Timeout {
                    during: "waiting for ovs-vswitchd to report the new admin state".into(),
                    after: self.opts.command_timeout,
                });
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

impl OvsSwitch {
    pub(super) async fn apply_all(
        &self,
        conn: &mut Connection,
        ops: &[PortOperation],
    ) -> Result<Vec<PortResult>, DeviceError> {
        let ports: Vec<PortName> = ops.iter().map(|o| o.port().clone()).collect();
        let reads = self.read_rows(conn, &ports).await?;
        let mut of = self.open_openflow().await?;
        let mut outcomes: Vec<Option<Result<PortChange, DeviceError>>> =
            Vec::with_capacity(ops.len());
        let mut plans: Vec<Option<Plan>> = Vec::with_capacity(ops.len());
        let targets: Vec<DesiredPort> = ops.iter().map(PortOperation::target).collect();
        // Ports that are, or are to be, bond members: planned together (bond::plan).
        let mut lag_rows: Vec<(usize, PortRow)> = Vec::new();
        let caps = self.capabilities();
        for (i, (op, read)) in ops.iter().zip(reads).enumerate() {
            let current = of
                .as_ref()
                .map(|(_, flows)| flows_of(flows, op.port()))
                .unwrap_or_default();
            let target = &targets[i];
            if let Ok(row) = &read
                && (row.member || target.lag.is_some())
            {
                if let Some(c) = caps.missing_for(target).first() {
                    outcomes.push(Some(Err(DeviceError::Unsupported { capability: *c })));
                    plans.push(None);
                    continue;
                }
                // Its flows go (an ACL and a bond do not mix; the validator
                // refuses both at once).
                let flows = if current.is_empty() || !target.acl.is_empty() {
                    Vec::new()
                } else {
                    vec![openflow::Request {
                        what: format!("OpenFlow ACL of {}", op.port()),
                        bytes: ofwire::flow_delete(
                            acl::port_cookie(op.port().as_str()),
                            acl::PORT_MASK,
                            0,
                        ),
                    }]
                };
                lag_rows.push((i, row.clone()));
                outcomes.push(None);
                plans.push(Some(Plan {
                    ops: Vec::new(),
                    admin: None,
                    flows,
                }));
                continue;
            }
            match read.and_then(|row| self.plan(target, &row, &current)) {
                Err(e) => {
                    outcomes.push(Some(Err(e)));
                    plans.push(None);
                }
                Ok(p) if p.ops.is_empty() && p.admin.is_none() && p.flows.is_empty() => {
                    outcomes.push(Some(Ok(PortChange::Unchanged)));
                    plans.push(None);
                }
                Ok(p) => {
                    outcomes.push(None);
                    plans.push(Some(p));
                }
            }
        }
        // The groups: one unit of the transaction.
        let mut lag_ops: Vec<Value> = Vec::new();
        let mut lag_changed: Vec<(usize, bool)> = Vec::new();
        if !lag_rows.is_empty() {
            let groups: BTreeSet<u16> = lag_rows
                .iter()
                .filter_map(|(i, _)| targets[*i].lag.map(|l| l.group.get()))
                .collect();
            let bonds = self.read_bonds(conn, &groups).await?;
            let members: Vec<bond::Member<'_>> = lag_rows
                .iter()
                .map(|(i, row)| bond::Member {
                    desired: &targets[*i],
                    row,
                })
                .collect();
            match bond::plan(&self.opts.bridge, &members, &bonds) {
                Ok((json_ops, changed)) => {
                    lag_ops = json_ops;
                    lag_changed = lag_rows.iter().map(|(i, _)| *i).zip(changed).collect();
                }
                Err(e) => {
                    for (i, _) in &lag_rows {
                        outcomes[*i] = Some(Err(e.clone()));
                        plans[*i] = None;
                    }
                }
            }
        }
        let mut all: Vec<Value> = plans.iter().flatten().flat_map(|p| p.ops.clone()).collect();
        all.extend(lag_ops.iter().cloned());
        if !all.is_empty() {
            match self.commit(conn, all).await {
                Ok(()) => {}
                Err(DeviceError::CommandRejected { .. })
                    if plans.iter().flatten().filter(|p| !p.ops.is_empty()).count()
                        + usize::from(!lag_ops.is_empty())
                        > 1 =>
                {
                    // Rolled back whole: retry port by port (a group as one) to
                    // find the culprit.
                    for (i, plan) in plans.iter_mut().enumerate() {
                        let Some(p) = plan else { continue };
                        if p.ops.is_empty() {
                            continue;
                        }
                        if let Err(e) = self.commit(conn, p.ops.clone()).await {
                            outcomes[i] = Some(Err(e));
                            *plan = None;
                        }
                    }
                    if !lag_ops.is_empty()
                        && let Err(e) = self.commit(conn, lag_ops.clone()).await
                    {
                        for (i, _) in &lag_changed {
                            outcomes[*i] = Some(Err(e.clone()));
                            plans[*i] = None;
                        }
                    }
                }
                Err(DeviceError::CommandRejected { command, output }) if !lag_ops.is_empty() => {
                    for (i, _) in &lag_changed {
                        outcomes[*i] = Some(Err(DeviceError::CommandRejected {
                            command: command.clone(),
                            output: output.clone(),
                        }));
                        plans[*i] = None;
                    }
                }
                Err(e) => return Err(e),
            }
        }
        // Members' admin state, from their interfaces as they are now.
        let mut untouched: BTreeSet<usize> = lag_changed
            .iter()
            .filter(|(_, changed)| !changed)
            .map(|(i, _)| *i)
            .collect();
        if of.is_some() {
            // One read of every member interface still to be decided.
            let live: Vec<&(usize, PortRow)> = lag_rows
                .iter()
                .filter(|(i, _)| outcomes[*i].is_none())
                .collect();
            let names: Vec<String> = live
                .iter()
                .flat_map(|(_, row)| row.ifaces.iter().map(|f| f.name.clone()))
                .collect();
            let now: HashMap<String, IfaceRow> = self
                .read_ifaces(conn, &names)
                .await?
                .into_iter()
                .map(|f| (f.name.clone(), f))
                .collect();
            for (i, row) in live {
                let down = targets[*i].admin == AdminState::Down;
                let wrong: Vec<IfaceRow> = row
                    .ifaces
                    .iter()
                    .filter_map(|f| now.get(&f.name).cloned())
                    .filter(|f| f.admin_state.as_deref() != Some(if down { "down" } else { "up" }))
                    .collect();
                if let Some(p) = plans[*i].as_mut()
                    && !wrong.is_empty()
                {
                    p.admin = Some((down, wrong));
                }
            }
        }
        for (i, _) in &lag_rows {
            if plans[*i]
                .as_ref()
                .is_some_and(|p| p.admin.is_some() || !p.flows.is_empty())
            {
                untouched.remove(i);
            }
        }
        for i in untouched {
            if outcomes[i].is_none() {
                outcomes[i] = Some(Ok(PortChange::Unchanged));
                plans[i] = None;
            }
        }
        // Then OpenFlow: every port-mod and flow change, one barrier.
        let Some((session, _)) = &mut of else {
            return Ok(results(ops, outcomes));
        };
        let mut requests: Vec<(usize, openflow::Request)> = Vec::new();
        let mut admin_names: Vec<(usize, (String, bool))> = Vec::new();
        for (i, plan) in plans.iter().enumerate() {
            let Some(p) = plan else { continue };
            if outcomes[i].is_some() {
                continue;
            }
            if let Some(change) = &p.admin {
                match Self::admin_requests(std::slice::from_ref(change)) {
                    Ok(mods) => {
                        for (name, down, r) in mods {
                            admin_names.push((i, (name, down)));
                            requests.push((i, r));
                        }
                    }
                    Err(e) => {
                        outcomes[i] = Some(Err(e));
                        continue;
                    }
                }
            }
            requests.extend(p.flows.iter().map(|r| (i, r.clone())));
        }
        if !requests.is_empty() {
            let sent: Vec<openflow::Request> = requests.iter().map(|(_, r)| r.clone()).collect();
            let answers = session.run(&sent).await?;
            for ((i, r), answer) in requests.iter().zip(answers) {
                if let Err(text) = answer
                    && outcomes[*i].is_none()
                {
                    outcomes[*i] = Some(Err(DeviceError::CommandRejected {
                        command: r.what.clone(),
                        output: text,
                    }));
                }
            }
        }
        let waiting: Vec<(String, bool)> = admin_names
            .iter()
            .filter(|(i, _)| outcomes[*i].is_none())
            .map(|(_, n)| n.clone())
            .collect();
        if let Err(e) = self.wait_admin(conn, &waiting).await {
            for (i, _) in &admin_names {
                if outcomes[*i].is_none() {
                    outcomes[*i] = Some(Err(e.clone()));
                }
            }
        }
        Ok(results(ops, outcomes))
    }
}

/// The batch's results: a port with a plan and no error changed.
pub(super) fn results(
    ops: &[PortOperation],
    outcomes: Vec<Option<Result<PortChange, DeviceError>>>,
) -> Vec<PortResult> {
    let outcomes = outcomes
        .into_iter()
        .map(|o| Some(o.unwrap_or(Ok(PortChange::Changed))))
        .collect();
    crate::device::batch_results(ops, outcomes)
}

//! Applying a batch: the steps of one transaction as `transaction.rs` chose them
//! (on the candidate: lock, edit-config, validate, commit, unlock; or running with
//! rollback-on-error), each failing step reported on the ports it touched, the
//! inventory checked, the read-back; `dry_run` renders the same edits without
//! sending them. Device I/O.

use super::*;

impl NetconfSwitch {
    /// Runs one transaction. On failure it has already cleaned up (discard, unlock)
    /// or ended the session on purpose.
    pub(super) async fn transaction(
        &self,
        s: &mut Session,
        steps: &[Step],
        pending: &[Pending],
        existing: &BTreeSet<VlanId>,
        hold: Option<&Hold>,
    ) -> Result<(), Refused> {
        let ops = self.operations(steps, pending, existing, hold);
        for (k, (step, op)) in ops.iter().enumerate() {
            if *step == Step::Confirm && self.fault == Some(Fault::DropBeforeConfirm) {
                return Err(Refused {
                    error: DeviceError::Unreachable {
                        address: self.target.endpoint(),
                        cause: Cause::msg(
                            "the session was dropped before the commit was confirmed (injected fault)",
                        ),
                    },
                    rpc: None,
                    session_gone: true,
                });
            }
            let failure = match s.rpc(op).await {
                Err(e) => {
                    return Err(Refused {
                        error: e,
                        rpc: None,
                        session_gone: true,
                    });
                }
                Ok(reply) => self.check_step(*step, op, &reply, pending),
            };
            let Some((error, rpc)) = failure else {
                continue;
            };
            if *step == Step::Unlock {
                // The change is committed (and confirmed); a failed unlock is the
                // device's to clean up when the session ends.
                debug!(endpoint = %self.target.endpoint(), %error, "unlock refused after commit");
                return Ok(());
            }
            let session_gone = transaction::awaiting_confirmation(steps, k);
            if !session_gone {
                for cleanup in transaction::cleanup(steps, k) {
                    let (_, op) = &self.operations(&[cleanup], &[], existing, hold)[0];
                    if let Err(e) = s.rpc(op).await {
                        return Err(Refused {
                            error: e,
                            rpc: None,
                            session_gone: true,
                        });
                    }
                }
            }
            return Err(Refused {
                error,
                rpc,
                session_gone,
            });
        }
        Ok(())
    }

    /// What went wrong with `step`'s reply, if anything.
    pub(super) fn check_step(
        &self,
        step: Step,
        op: &Operation,
        reply: &Reply,
        pending: &[Pending],
    ) -> Option<(DeviceError, Option<RpcError>)> {
        if let Some(e) = reply
            .errors
            .iter()
            .find(|e| !transaction::tolerable(step, e))
        {
            return Some((rejected(op, Vec::new(), e.clone()), Some(e.clone())));
        }
        if step != Step::ReadBack {
            return None;
        }
        let data = reply.data.clone().unwrap_or_default();
        let entries = self.model.entries(&data);
        let vlans = self.model.read_vlans(&data);
        for p in pending {
            let fields = match self.read_one(&entries, &vlans, &p.target.port) {
                Ok(o) => diff(&p.target, &o),
                Err(e) => return Some((e, None)),
            };
            if !fields.is_empty() {
                return Some((
                    DeviceError::VerificationFailed {
                        port: p.target.port.as_str().to_owned(),
                        fields,
                    },
                    None,
                ));
            }
        }
        None
    }

    /// Refuses pending ports the device does not have (the model's inventory RPC).
    pub(super) async fn check_inventory(
        &self,
        s: &mut Session,
        pending: &mut Vec<Pending>,
        outcomes: &mut [Option<Result<PortChange, DeviceError>>],
    ) -> Result<(), DeviceError> {
        let Some(inv) = self.model.inventory() else {
            return Ok(());
        };
        let mut body: Option<Element> = None;
        for step in inv.rpc.iter().rev() {
            let mut e = Element::new(step.as_str());
            if let Some(inner) = body.take() {
                e = e.child(inner);
            }
            body = Some(e);
        }
        let op = Operation::Custom(body.unwrap_or_default());
        let reply = s.rpc(&op).await?;
        if let Some(e) = reply.errors.first() {
            return Err(rejected(&op, Vec::new(), e.clone()));
        }
        let names: BTreeSet<&str> = reply
            .root
            .all_at(&inv.names)
            .into_iter()
            .map(|e| e.text.as_str())
            .collect();
        pending.retain(|p| {
            let known = names.contains(p.target.port.as_str());
            if !known {
                outcomes[p.index] = Some(Err(DeviceError::UnknownPort {
                    port: p.target.port.as_str().to_owned(),
                }));
            }
            known
        });
        Ok(())
    }

    /// Applies `ops` (see the module header) and hands back the session when it is
    /// still usable, for the read-back ([`Device::apply_and_read`]) to use, and
    /// whether a change is left held on the device under `hold`'s token.
    pub(super) async fn apply(
        &self,
        ops: &[PortOperation],
        hold: Option<&Hold>,
    ) -> Result<(Vec<PortResult>, Option<Session>, HeldBy), DeviceError> {
        let (mut s, data) = self.session_and_running().await?;
        let steps = match transaction::steps(&s.capabilities, self.model.validate(), hold.is_some())
        {
            Ok(steps) => steps,
            Err(why) => {
                s.close().await;
                return Err(DeviceError::Protocol {
                    during: "reading the device's capabilities".into(),
                    cause: Cause::msg(why),
                });
            }
        };
        let (mut outcomes, mut pending) = self.plan(&data, ops);
        if !pending.is_empty()
            && let Err(e) = self
                .check_inventory(&mut s, &mut pending, &mut outcomes)
                .await
        {
            s.close().await;
            return Err(e);
        }
        let existing = self.model.read_vlans(&data);
        let mut session = Some(s);
        let mut held = HeldBy::Nothing;
        // A second transaction of the same batch (after some ports were refused)
        // joins the hold the first one left.
        let mut hold = hold.cloned();
        while !pending.is_empty() {
            let s = match session.as_mut() {
                Some(s) => s,
                None => session.insert(self.session().await?),
            };
            match self
                .transaction(s, &steps, &pending, &existing, hold.as_ref())
                .await
            {
                Ok(()) => {
                    if transaction::holds(&steps) {
                        held = HeldBy::Device;
                        if let Some(h) = hold.as_mut() {
                            h.follow_up = true;
                        }
                    }
                    for p in pending.drain(..) {
                        outcomes[p.index] = Some(Ok(PortChange::Changed));
                    }
                }
                Err(refused) => {
                    if refused.session_gone {
                        if let Some(s) = session.take() {
                            s.abandon();
                        }
                        if refused.error.is_session_failure() {
                            return Err(refused.error);
                        }
                    }
                    let named: Vec<(String, Vec<u16>)> = pending
                        .iter()
                        .map(|p| {
                            (
                                p.target.port.as_str().to_owned(),
                                vlans_of(&p.target).iter().map(|v| v.get()).collect(),
                            )
                        })
                        .collect();
                    let hit = match (&refused.error, &refused.rpc) {
                        (DeviceError::VerificationFailed { port, .. }, _) => named
                            .iter()
                            .position(|(n, _)| n == port)
                            .into_iter()
                            .collect(),
                        (_, Some(rpc)) => {
                            transaction::attribute(rpc, |p| self.model.named_in(p), &named)
                        }
                        _ => Vec::new(),
                    };
                    let whole_batch = hit.is_empty() || hit.len() == pending.len();
                    let mut k = 0;
                    let names: Vec<String> = hit.iter().map(|&i| named[i].0.clone()).collect();
                    pending.retain(|p| {
                        let this = k;
                        k += 1;
                        if whole_batch || hit.contains(&this) {
                            outcomes[p.index] = Some(Err(with_ports(&refused.error, &names)));
                            false
                        } else {
                            true
                        }
                    });
                }
            }
        }
        Ok((batch_results(ops, outcomes), session, held))
    }

    /// Reads the ports and returns the RPCs one transaction would send for `ops`
    /// (each rendered as sent, framing aside). Sends nothing that changes the device.
    pub async fn dry_run(&self, ops: &[PortOperation]) -> Result<Vec<String>, DeviceError> {
        let mut s = self.session().await?;
        let read = self.read_running(&mut s).await;
        let caps = s.capabilities.clone();
        s.close().await;
        let data = read?;
        let steps = transaction::steps(&caps, self.model.validate(), false).map_err(|why| {
            DeviceError::Protocol {
                during: "reading the device's capabilities".into(),
                cause: Cause::msg(why),
            }
        })?;
        let (outcomes, pending) = self.plan(&data, ops);
        for o in outcomes.into_iter().flatten() {
            o?;
        }
        if pending.is_empty() {
            return Ok(Vec::new());
        }
        let existing = self.model.read_vlans(&data);
        Ok(self
            .operations(&steps, &pending, &existing, None)
            .into_iter()
            .enumerate()
            .map(|(i, (_, op))| op.message(i as u64 + 1))
            .collect())
    }
}

pub(super) fn rejected(op: &Operation, ports: Vec<String>, error: RpcError) -> DeviceError {
    DeviceError::RpcRejected {
        operation: op.name(),
        ports,
        error: Box::new(error),
    }
}

/// `e`, naming `ports` when it is the device's refusal.
pub(super) fn with_ports(e: &DeviceError, ports: &[String]) -> DeviceError {
    match e {
        DeviceError::RpcRejected {
            operation, error, ..
        } => DeviceError::RpcRejected {
            operation: operation.clone(),
            ports: ports.to_vec(),
            error: error.clone(),
        },
        other => other.clone(),
    }
}

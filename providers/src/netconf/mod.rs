//! The NETCONF backend: a [`Device`] that configures ports over NETCONF (RFC 6241)
//! on the SSH `netconf` subsystem (RFC 6242), with the device's YANG shape taken
//! from a [`model::Model`] (data, under `providers/models/`).
//!
//! One session per call — a verified batch included: `apply_and_read` reads the
//! batch back over the session that committed it (edit, commit, confirm where a
//! confirmed commit is used, read-back: one login), and opens a second only when the
//! device dropped the first.
//!
//! **A session kept for the next batch.** With [`NetconfOptions::keep_session`]
//! (the operator sets it to its batch window), the session that ended a call is
//! kept open that long, idle — no lock held, every commit confirmed — and the next
//! call within it (a batch, a drift sweep, a probe) uses it instead of logging in
//! again; it is closed (close-session) when the time is up, when another call's
//! session is already kept, and at once by [`Device::close_idle`], which the worker
//! calls when the replica loses the leader lease and before a replaced device
//! opens its first session. A kept session the device has dropped meanwhile is
//! noticed by the call's first RPC (the read of running, which changes nothing),
//! and the call logs in again. `apply_batch` reads every port and VLAN of the device with
//! one `get-config` of running, plans each port (nothing for a port that already
//! matches: re-applying sends no edit-config and takes no lock), refuses ports the
//! device does not have (the model's inventory RPC, one per batch that changes
//! something), then runs one [`transaction`] for the whole batch: one edit-config
//! holding each changed port's subtree with the replace operation (cleaning removes
//! the port's entry) and the VLANs the batch needs that the device lacks.
//!
//! A transaction is all or nothing. When the device refuses it with an
//! `<rpc-error>` that names ports (by its error path or message), those ports fail
//! with [`DeviceError::RpcRejected`] naming the operation, and the transaction is run
//! again without them, so one bad port does not hold back the rest of the batch. An
//! error naming no port fails the whole batch. A lock held by another session is a
//! transient error (the operator backs off) naming the holder's session when the
//! device says it. A transport failure fails the batch.
//!
//! **Why a session of our own and not `rustnetconf`** (re-evaluated for issue 32 at
//! 0.19.1, which now uses the same russh 0.65 and would add 7 crates — measured with
//! `cargo tree`; it has chunked framing, confirmed commit and fingerprint pins): it
//! authenticates with a password, an agent or a private key *file*, and checks a
//! known_hosts *file* — a ProviderSwitch's private key and known_hosts live in a
//! Secret, and this backend never writes them to disk (the CLI backend's
//! [`crate::cli::Auth`] keeps the key in memory; Ansible's run directories are the
//! one exception, 0600 and removed). It is 18,100 lines against this module's
//! session, framing, RPC and XML code (~1,000 of the backend's 3,200; the rest — device
//! models, the transaction and its put-back — would stay either way).

pub mod acl;
pub mod framing;
pub mod model;
pub mod rpc;
pub mod session;
pub mod transaction;
pub mod xml;

use parking_lot::Mutex;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tracing::debug;

use crate::cli::SshTarget;
use crate::device::{Device, PortChange, PortOperation, PortReads, PortResult, batch_results};
use crate::error::{Cause, DeviceError, RpcError};
use crate::heard::Heard;
use crate::model::{Capabilities, DesiredPort, ObservedPort, VlanMode, diff};
use crate::values::{PortName, VlanId, VlanName};

use model::Model;
use rpc::{Datastore, Operation, Reply};
use session::{Journal, Session};
use transaction::Step;
use xml::Element;

/// Backend options.
#[derive(Debug, Clone)]
pub struct NetconfOptions {
    /// Time allowed for each RPC's reply.
    pub command_timeout: Duration,
    /// The confirm timeout of a confirmed commit: the device rolls the commit back
    /// when it is not confirmed in time (and at once when the session ends).
    pub confirm_timeout: Duration,
    /// How long the session that ended a call is kept for the next one (zero:
    /// closed at once). See the module docs.
    pub keep_session: Duration,
}

impl Default for NetconfOptions {
    fn default() -> Self {
        Self {
            command_timeout: Duration::from_secs(30),
            confirm_timeout: Duration::from_secs(60),
            keep_session: Duration::ZERO,
        }
    }
}

/// The session kept for the next call, until `until`; `id` tells a timer whether
/// the session it was set for is still the one kept.
struct Kept {
    session: Session,
    until: tokio::time::Instant,
    id: u64,
}

/// Where a switch's kept session waits (shared by the clones of one switch).
#[derive(Default)]
struct KeptSlot {
    kept: Option<Kept>,
    next_id: u64,
}

/// A fault to inject, for tests that prove what the device does when patchbay dies
/// mid-transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Drop the connection after the confirmed commit was read back, before
    /// confirming it (what a crashed operator looks like to the device).
    DropBeforeConfirm,
}

/// A switch configured over NETCONF.
#[derive(Clone)]
pub struct NetconfSwitch {
    target: SshTarget,
    model: Arc<Model>,
    options: NetconfOptions,
    journal: Option<Journal>,
    fault: Option<Fault>,
    kept: Arc<Mutex<KeptSlot>>,
    logins: Arc<std::sync::atomic::AtomicU64>,
    /// When the device last answered, over every session.
    heard: Heard,
}

impl std::fmt::Debug for NetconfSwitch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NetconfSwitch")
            .field("endpoint", &self.target.endpoint())
            .field("model", &self.model.name)
            .finish_non_exhaustive()
    }
}

/// A port the batch changes.
struct Pending {
    /// Index into the batch.
    index: usize,
    /// The state it must end in.
    target: DesiredPort,
    /// What goes into the edit (`None`: nothing to remove, already clean).
    element: Element,
    /// Entries that go into the edit just before it (the aggregate of a group it
    /// joins or stays in) and just after it (the aggregate of a group it is the
    /// last to leave).
    before: Vec<Element>,
    after: Vec<Element>,
    /// The group this port leaves, if any.
    leaves: Option<u16>,
}

/// Why a transaction did not commit.
struct Refused {
    error: DeviceError,
    /// The device's error, when it sent one (to attribute it to ports).
    rpc: Option<RpcError>,
    /// The session is no longer usable (ended, or ended on purpose so the device
    /// rolls an unconfirmed commit back).
    session_gone: bool,
}

impl NetconfSwitch {
    /// A backend for `target` speaking `model`.
    pub fn new(target: SshTarget, model: Arc<Model>, options: NetconfOptions) -> Self {
        Self {
            target,
            model,
            options,
            journal: None,
            fault: None,
            kept: Arc::default(),
            logins: Arc::default(),
            heard: Heard::default(),
        }
    }

    /// Records the operation name of every RPC sent from now on.
    pub fn with_journal(mut self) -> Self {
        self.journal = Some(Arc::new(Mutex::new(Vec::new())));
        self
    }

    /// Injects `fault` (tests).
    pub fn with_fault(mut self, fault: Fault) -> Self {
        self.fault = Some(fault);
        self
    }

    /// The RPCs sent so far (empty without [`Self::with_journal`]).
    pub fn journal(&self) -> Vec<String> {
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

    /// The device model.
    pub fn model(&self) -> &Model {
        &self.model
    }

    /// How many sessions this switch (and its clones) opened.
    pub fn logins(&self) -> u64 {
        self.logins.load(std::sync::atomic::Ordering::Relaxed)
    }

    async fn session(&self) -> Result<Session, DeviceError> {
        self.logins
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Session::open_heard(
            &self.target,
            self.options.command_timeout,
            self.journal.clone(),
            &self.heard,
        )
        .await
    }

    /// The kept session, if one is kept and its time is not up.
    fn take_kept(&self) -> Option<Session> {
        let kept = self.kept.lock().kept.take()?;
        if kept.until > tokio::time::Instant::now() {
            return Some(kept.session);
        }
        tokio::spawn(kept.session.close());
        None
    }

    /// Ends a call's session: kept for the next call (see the module docs), or
    /// closed.
    async fn release(&self, s: Session) {
        if self.options.keep_session.is_zero() {
            return s.close().await;
        }
        let kept = {
            let mut slot = self.kept.lock();
            if slot.kept.is_some() {
                Err(s)
            } else {
                slot.next_id += 1;
                let (id, until) = (
                    slot.next_id,
                    tokio::time::Instant::now() + self.options.keep_session,
                );
                slot.kept = Some(Kept {
                    session: s,
                    until,
                    id,
                });
                Ok((id, until))
            }
        };
        // Another call's session is kept already: this one is closed.
        let (id, until) = match kept {
            Ok(kept) => kept,
            Err(s) => return s.close().await,
        };
        let slot = self.kept.clone();
        tokio::spawn(async move {
            tokio::time::sleep_until(until).await;
            let expired = {
                let mut slot = slot.lock();
                match &slot.kept {
                    Some(k) if k.id == id => slot.kept.take(),
                    _ => None,
                }
            };
            if let Some(k) = expired {
                k.session.close().await;
            }
        });
    }

    /// A session and running's `<data>` (the first RPC of every call that
    /// reads): over the kept session when there is one and it still answers,
    /// else over a new one.
    async fn session_and_running(&self) -> Result<(Session, Element), DeviceError> {
        if let Some(mut s) = self.take_kept() {
            match self.read_running(&mut s).await {
                Ok(data) => return Ok((s, data)),
                Err(e) => {
                    debug!(error = %e, "the kept NETCONF session no longer answers; logging in again");
                    s.abandon();
                }
            }
        }
        let mut s = self.session().await?;
        match self.read_running(&mut s).await {
            Ok(data) => Ok((s, data)),
            Err(e) => {
                s.close().await;
                Err(e)
            }
        }
    }

    /// Opens a session and returns what the device announced (capability URIs).
    pub async fn capabilities_announced(&self) -> Result<Vec<String>, DeviceError> {
        let s = self.session().await?;
        let uris = s.capabilities.uris.clone();
        s.close().await;
        Ok(uris)
    }

    /// The `<data>` of running: every port entry and VLAN the model knows.
    async fn read_running(&self, s: &mut Session) -> Result<Element, DeviceError> {
        let op = Operation::GetConfig {
            source: Datastore::Running,
            filter: self.model.filter(),
        };
        let reply = s.rpc(&op).await?;
        if let Some(e) = reply.errors.first() {
            return Err(rejected(&op, Vec::new(), e.clone()));
        }
        Ok(reply.data.unwrap_or_default())
    }

    /// Reads `port` from the port entries of one get-config (`Model::entries`),
    /// checked against the VLANs the same get-config lists (`Model::read_vlans`).
    fn read_one(
        &self,
        entries: &BTreeMap<String, &Element>,
        vlans: &BTreeSet<VlanId>,
        port: &PortName,
    ) -> Result<ObservedPort, DeviceError> {
        if !self.model.port_name_fits(port) {
            return Err(DeviceError::UnknownPort {
                port: port.as_str().to_owned(),
            });
        }
        self.model
            .read_port_in(port, entries)
            .map(|o| o.against_vlan_table(vlans))
            .map_err(|e| DeviceError::Protocol {
                during: format!("reading port {port}"),
                cause: Cause::msg(e),
            })
    }

    /// Reads `ports` from one get-config's `data`.
    fn read_all(&self, data: &Element, ports: &[PortName]) -> PortReads {
        let entries = self.model.entries(data);
        let vlans = self.model.read_vlans(data);
        ports
            .iter()
            .map(|p| (p.clone(), self.read_one(&entries, &vlans, p)))
            .collect()
    }

    /// Plans `ops` against what `data` says: outcomes decided already (unchanged,
    /// refused) and the ports to change.
    fn plan(
        &self,
        data: &Element,
        ops: &[PortOperation],
    ) -> (Vec<Option<Result<PortChange, DeviceError>>>, Vec<Pending>) {
        let caps = self.model.capabilities();
        let entries = self.model.entries(data);
        let vlans = self.model.read_vlans(data);
        let mut outcomes: Vec<Option<Result<PortChange, DeviceError>>> = vec![None; ops.len()];
        let mut pending = Vec::new();
        for (i, op) in ops.iter().enumerate() {
            let target = op.target();
            // Defence in depth: the validator refuses these before they get here.
            if let Some(&capability) = caps.missing_for(&target).first() {
                outcomes[i] = Some(Err(DeviceError::Unsupported { capability }));
                continue;
            }
            let observed = match self.read_one(&entries, &vlans, op.port()) {
                Ok(o) => o,
                Err(e) => {
                    outcomes[i] = Some(Err(e));
                    continue;
                }
            };
            if diff(&target, &observed).is_empty() {
                outcomes[i] = Some(Ok(PortChange::Unchanged));
                continue;
            }
            let element = match self.model.port_element(&target) {
                Some(e) => e,
                None if entries.contains_key(op.port().as_str()) => {
                    self.model.remove_element(op.port())
                }
                // Reads clean without an entry, yet differs: cannot happen; say so.
                None => {
                    outcomes[i] = Some(Err(DeviceError::Protocol {
                        during: format!("planning port {}", op.port()),
                        cause: Cause::msg("the port differs from clean but has no entry"),
                    }));
                    continue;
                }
            };
            let left = observed
                .lag
                .flatten()
                .map(|m| m.group.get())
                .filter(|g| target.lag.map(|l| l.group.get()) != Some(*g));
            pending.push(Pending {
                index: i,
                target,
                element,
                before: Vec::new(),
                after: Vec::new(),
                leaves: left,
            });
        }
        self.order_groups(ops, &entries, &mut pending);
        (outcomes, pending)
    }

    /// Link aggregation in the edit: each group's aggregate entry goes before its
    /// first changing member; an aggregate is removed after the last member leaving
    /// it, and only when no member remains (on the device and not leaving, or
    /// joining in this batch).
    fn order_groups(
        &self,
        ops: &[PortOperation],
        entries: &BTreeMap<String, &Element>,
        pending: &mut [Pending],
    ) {
        let mut placed = BTreeSet::new();
        for p in pending.iter_mut() {
            if let Some(m) = p.target.lag
                && placed.insert(m.group.get())
            {
                p.before.extend(self.model.aggregate_element(&p.target));
            }
        }
        let group_in_batch = |port: &str| {
            ops.iter()
                .find(|op| op.port().as_str() == port)
                .map(|op| op.target().lag.map(|l| l.group.get()))
        };
        let mut removed = BTreeSet::new();
        for p in pending.iter_mut().rev() {
            let Some(name) = p.leaves.and_then(|g| self.model.aggregate_name(g)) else {
                continue;
            };
            let kept = placed
                .iter()
                .any(|g| self.model.aggregate_name(*g).as_deref() == Some(name.as_str()))
                || entries.iter().any(|(port, e)| {
                    self.model.bundle_of(e).as_deref() == Some(name.as_str())
                        && match group_in_batch(port) {
                            None => true,
                            Some(g) => {
                                g.and_then(|g| self.model.aggregate_name(g)).as_deref()
                                    == Some(name.as_str())
                            }
                        }
                });
            if !kept
                && let Ok(aggregate) = PortName::parse(&name)
                && removed.insert(name)
            {
                p.after.push(self.model.remove_element(&aggregate));
            }
        }
    }

    /// The VLANs `pending` needs that `existing` lacks, with their names.
    fn vlans_to_create(
        pending: &[Pending],
        existing: &BTreeSet<VlanId>,
    ) -> Vec<(VlanId, Option<VlanName>)> {
        let mut out: BTreeMap<VlanId, Option<VlanName>> = BTreeMap::new();
        for p in pending {
            for v in vlans_of(&p.target) {
                if !existing.contains(&v) {
                    let slot = out.entry(v).or_insert(None);
                    if slot.is_none() {
                        *slot = p.target.vlan_names.get(&v).cloned();
                    }
                }
            }
        }
        out.into_iter().collect()
    }

    /// The operations of one transaction for `pending` (what is sent, and what
    /// `--dry-run` prints).
    fn operations(
        &self,
        steps: &[Step],
        pending: &[Pending],
        existing: &BTreeSet<VlanId>,
    ) -> Vec<(Step, Operation)> {
        let config = self.model.edit(
            &Self::vlans_to_create(pending, existing),
            pending
                .iter()
                .flat_map(|p| p.before.iter().chain([&p.element]).chain(&p.after).cloned())
                .collect(),
        );
        let confirm = u32::try_from(self.options.confirm_timeout.as_secs())
            .unwrap_or(u32::MAX)
            .max(1);
        steps
            .iter()
            .map(|&step| {
                let op = match step {
                    Step::Lock => Operation::Lock(Datastore::Candidate),
                    Step::DiscardChanges => Operation::DiscardChanges,
                    Step::Edit {
                        target,
                        rollback_on_error,
                    } => Operation::EditConfig {
                        target,
                        rollback_on_error,
                        config: config.clone(),
                    },
                    Step::Validate => Operation::Validate(Datastore::Candidate),
                    Step::Commit { confirmed } => Operation::Commit {
                        confirm_timeout: confirmed.then_some(confirm),
                    },
                    Step::ReadBack => Operation::GetConfig {
                        source: Datastore::Running,
                        filter: self.model.filter(),
                    },
                    Step::Confirm => Operation::Commit {
                        confirm_timeout: None,
                    },
                    Step::Unlock => Operation::Unlock(Datastore::Candidate),
                };
                (step, op)
            })
            .collect()
    }

    /// Runs one transaction. On failure it has already cleaned up (discard, unlock)
    /// or ended the session on purpose.
    async fn transaction(
        &self,
        s: &mut Session,
        steps: &[Step],
        pending: &[Pending],
        existing: &BTreeSet<VlanId>,
    ) -> Result<(), Refused> {
        let ops = self.operations(steps, pending, existing);
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
                    let (_, op) = &self.operations(&[cleanup], &[], existing)[0];
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
    fn check_step(
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
    async fn check_inventory(
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
    /// still usable, for the read-back ([`Device::apply_and_read`]) to use.
    async fn apply(
        &self,
        ops: &[PortOperation],
    ) -> Result<(Vec<PortResult>, Option<Session>), DeviceError> {
        let (mut s, data) = self.session_and_running().await?;
        let steps = match transaction::steps(&s.capabilities, self.model.validate()) {
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
        while !pending.is_empty() {
            let s = match session.as_mut() {
                Some(s) => s,
                None => session.insert(self.session().await?),
            };
            match self.transaction(s, &steps, &pending, &existing).await {
                Ok(()) => {
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
        Ok((batch_results(ops, outcomes), session))
    }

    /// Reads the ports and returns the RPCs one transaction would send for `ops`
    /// (each rendered as sent, framing aside). Sends nothing that changes the device.
    pub async fn dry_run(&self, ops: &[PortOperation]) -> Result<Vec<String>, DeviceError> {
        let mut s = self.session().await?;
        let read = self.read_running(&mut s).await;
        let caps = s.capabilities.clone();
        s.close().await;
        let data = read?;
        let steps = transaction::steps(&caps, self.model.validate()).map_err(|why| {
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
            .operations(&steps, &pending, &existing)
            .into_iter()
            .enumerate()
            .map(|(i, (_, op))| op.message(i as u64 + 1))
            .collect())
    }
}

/// The VLANs a desired port uses.
fn vlans_of(d: &DesiredPort) -> Vec<VlanId> {
    match &d.vlans {
        VlanMode::Unconfigured => Vec::new(),
        VlanMode::Access { vlan } => vec![*vlan],
        VlanMode::Trunk { native, allowed } => {
            native.iter().copied().chain(allowed.iter()).collect()
        }
    }
}

fn rejected(op: &Operation, ports: Vec<String>, error: RpcError) -> DeviceError {
    DeviceError::RpcRejected {
        operation: op.name(),
        ports,
        error: Box::new(error),
    }
}

/// `e`, naming `ports` when it is the device's refusal.
fn with_ports(e: &DeviceError, ports: &[String]) -> DeviceError {
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

#[async_trait]
impl Device for NetconfSwitch {
    fn capabilities(&self) -> Capabilities {
        self.model.capabilities()
    }

    async fn apply_batch(&self, ops: &[PortOperation]) -> Result<Vec<PortResult>, DeviceError> {
        if ops.is_empty() {
            return Ok(Vec::new());
        }
        let (results, session) = self.apply(ops).await?;
        if let Some(s) = session {
            self.release(s).await;
        }
        Ok(results)
    }

    /// One session for the change and its read-back: the get-config that verifies
    /// the batch goes over the session that committed it (a second login only when
    /// the device dropped that one).
    async fn apply_and_read(
        &self,
        ops: &[PortOperation],
    ) -> Result<(Vec<PortResult>, PortReads), DeviceError> {
        if ops.is_empty() {
            return Ok((Vec::new(), Vec::new()));
        }
        let (results, session) = self.apply(ops).await?;
        let applied = crate::device::applied_ports(&results);
        if applied.is_empty() {
            if let Some(s) = session {
                self.release(s).await;
            }
            return Ok((results, Vec::new()));
        }
        let mut s = match session {
            Some(s) => s,
            None => self.session().await?,
        };
        match self.read_running(&mut s).await {
            Ok(data) => {
                self.release(s).await;
                Ok((results, self.read_all(&data, &applied)))
            }
            Err(e) => {
                s.close().await;
                Err(e)
            }
        }
    }

    /// One get-config for all the ports.
    async fn get_ports(&self, ports: &[PortName]) -> Result<PortReads, DeviceError> {
        let (s, data) = self.session_and_running().await?;
        self.release(s).await;
        Ok(self.read_all(&data, ports))
    }

    async fn close_idle(&self) {
        let kept = self.kept.lock().kept.take();
        if let Some(k) = kept {
            k.session.close().await;
        }
    }

    fn heard(&self) -> Option<Heard> {
        Some(self.heard.clone())
    }
}

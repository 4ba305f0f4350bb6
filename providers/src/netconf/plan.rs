//! Reading and planning: each port read from the running configuration by the device
//! model, and a batch planned as model operations — groups before members, the VLANs to
//! create, each port's edit — with what a port's plan refused. No I/O.

use super::*;

/// A port the batch changes.
pub(super) struct Pending {
    /// Index into the batch.
    pub(super) index: usize,
    /// The state it must end in.
    pub(super) target: DesiredPort,
    /// What goes into the edit (`None`: nothing to remove, already clean).
    pub(super) element: Element,
    /// Entries that go into the edit just before it (the aggregate of a group it
    /// joins or stays in) and just after it (the aggregate of a group it is the
    /// last to leave).
    pub(super) before: Vec<Element>,
    pub(super) after: Vec<Element>,
    /// The group this port leaves, if any.
    pub(super) leaves: Option<u16>,
}

/// Why a transaction did not commit.
pub(super) struct Refused {
    pub(super) error: DeviceError,
    /// The device's error, when it sent one (to attribute it to ports).
    pub(super) rpc: Option<RpcError>,
    /// The session is no longer usable (ended, or ended on purpose so the device
    /// rolls an unconfirmed commit back).
    pub(super) session_gone: bool,
}

impl NetconfSwitch {
    /// Reads `port` from the port entries of one get-config (`Model::entries`),
    /// checked against the VLANs the same get-config lists (`Model::read_vlans`).
    pub(super) fn read_one(
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
    pub(super) fn read_all(&self, data: &Element, ports: &[PortName]) -> PortReads {
        let entries = self.model.entries(data);
        let vlans = self.model.read_vlans(data);
        ports
            .iter()
            .map(|p| (p.clone(), self.read_one(&entries, &vlans, p)))
            .collect()
    }

    /// Plans `ops` against what `data` says: outcomes decided already (unchanged,
    /// refused) and the ports to change.
    pub(super) fn plan(
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
            let left = leaves(&observed, &target);
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

    /// Link aggregation in the edit ([`order_groups`]): an aggregate stays while a
    /// port the device holds in it stays (not in the batch, or staying in it).
    pub(super) fn order_groups(
        &self,
        ops: &[PortOperation],
        entries: &BTreeMap<String, &Element>,
        pending: &mut [Pending],
    ) {
        let group_in_batch = |port: &str| {
            ops.iter()
                .find(|op| op.port().as_str() == port)
                .map(|op| op.target().lag.map(|l| l.group.get()))
        };
        let model = &self.model;
        order_groups(model, pending, |name| {
            entries.iter().any(|(port, e)| {
                model.bundle_of(e).as_deref() == Some(name)
                    && match group_in_batch(port) {
                        None => true,
                        Some(g) => g.and_then(|g| model.aggregate_name(g)).as_deref() == Some(name),
                    }
            })
        });
    }

    /// The VLANs `pending` needs that `existing` lacks, with their names.
    pub(super) fn vlans_to_create(
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
    /// `--dry-run` prints); `hold` names and times the held commit, if the steps
    /// have one.
    pub(super) fn operations(
        &self,
        steps: &[Step],
        pending: &[Pending],
        existing: &BTreeSet<VlanId>,
        hold: Option<&Hold>,
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
                        persist: None,
                        persist_id: None,
                    },
                    Step::HeldCommit => Operation::Commit {
                        confirm_timeout: Some(hold.map_or(confirm, |h| {
                            u32::try_from(h.timeout.as_secs())
                                .unwrap_or(u32::MAX)
                                .max(1)
                        })),
                        persist: hold.map(|h| h.token.clone()),
                        // Joining a hold already pending under the same token: a
                        // follow-up confirmed commit (RFC 6241 §8.4.5.1).
                        persist_id: hold.filter(|h| h.follow_up).map(|h| h.token.clone()),
                    },
                    Step::CancelHeld => Operation::CancelCommit {
                        persist_id: hold.map(|h| h.token.clone()).unwrap_or_default(),
                    },
                    Step::ReadBack => Operation::GetConfig {
                        source: Datastore::Running,
                        filter: self.model.filter(),
                    },
                    Step::Confirm => Operation::Commit {
                        confirm_timeout: None,
                        persist: None,
                        persist_id: None,
                    },
                    Step::Unlock => Operation::Unlock(Datastore::Candidate),
                };
                (step, op)
            })
            .collect()
    }
}

/// The group a port in `observed` leaves to become `target`, if any.
fn leaves(observed: &ObservedPort, target: &DesiredPort) -> Option<u16> {
    observed
        .lag
        .flatten()
        .map(|m| m.group.get())
        .filter(|g| target.lag.map(|l| l.group.get()) != Some(*g))
}

/// Link aggregation in an edit: each group's aggregate entry goes before its first
/// changing member; an aggregate is removed after the last member leaving it, and
/// only when no member remains — none joins or stays among the changing ports, and
/// `stays(aggregate name)` says no other port is left in it.
pub(super) fn order_groups(model: &Model, pending: &mut [Pending], stays: impl Fn(&str) -> bool) {
    let mut placed = BTreeSet::new();
    for p in pending.iter_mut() {
        if let Some(m) = p.target.lag
            && placed.insert(m.group.get())
        {
            p.before.extend(model.aggregate_element(&p.target));
        }
    }
    let mut removed = BTreeSet::new();
    for p in pending.iter_mut().rev() {
        let Some(name) = p.leaves.and_then(|g| model.aggregate_name(g)) else {
            continue;
        };
        let kept = placed
            .iter()
            .any(|g| model.aggregate_name(*g).as_deref() == Some(name.as_str()))
            || stays(&name);
        if !kept
            && let Ok(aggregate) = PortName::parse(&name)
            && removed.insert(name)
        {
            p.after.push(model.remove_element(&aggregate));
        }
    }
}

/// The `<config>` content of the edit-config a batch sends through `model`, worked
/// out without the device: `batch` holds each port's state (assumed, or read) and
/// operation, `others` what the switch's other group members carry (an aggregate
/// stays while one of them is in it). The device's own planning: each changing
/// port's element, its group's aggregate before the first member and removed after
/// the last leaving one, the VLANs the batch's states do not carry already. Empty
/// when no port differs from its state.
pub fn offline_edit(
    model: &Model,
    batch: &[(Option<ObservedPort>, PortOperation)],
    others: &[DesiredPort],
) -> Vec<Element> {
    let mut existing = BTreeSet::new();
    let mut pending = Vec::new();
    for (index, (now, op)) in batch.iter().enumerate() {
        let target = op.target();
        let now = now
            .clone()
            .unwrap_or_else(|| ObservedPort::from_desired(&DesiredPort::clean(op.port().clone())));
        existing.extend(now.vlans.iter().flat_map(|v| v.vlans()));
        if diff(&target, &now).is_empty() {
            continue;
        }
        let element = model
            .port_element(&target)
            .unwrap_or_else(|| model.remove_element(op.port()));
        let leaves = leaves(&now, &target);
        pending.push(Pending {
            index,
            target,
            element,
            before: Vec::new(),
            after: Vec::new(),
            leaves,
        });
    }
    if pending.is_empty() {
        return Vec::new();
    }
    let in_group = |d: &DesiredPort, name: &str| {
        d.lag
            .and_then(|l| model.aggregate_name(l.group.get()))
            .as_deref()
            == Some(name)
    };
    order_groups(model, &mut pending, |name| {
        batch.iter().any(|(_, op)| in_group(&op.target(), name))
            || others.iter().any(|d| in_group(d, name))
    });
    model.edit(
        &NetconfSwitch::vlans_to_create(&pending, &existing),
        pending
            .iter()
            .flat_map(|p| p.before.iter().chain([&p.element]).chain(&p.after).cloned())
            .collect(),
    )
}

/// The VLANs a desired port uses.
pub(super) fn vlans_of(d: &DesiredPort) -> Vec<VlanId> {
    match &d.vlans {
        VlanMode::Unconfigured => Vec::new(),
        VlanMode::Access { vlan } => vec![*vlan],
        VlanMode::Trunk { native, allowed } => {
            native.iter().copied().chain(allowed.iter()).collect()
        }
    }
}

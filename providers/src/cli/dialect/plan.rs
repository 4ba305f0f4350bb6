//! Planning a port through a dialect: the lines that take a port from what was read
//! to what is desired, grouped into blocks per configuration context (interface or
//! VLAN-centric), the VLANs a port needs, range blocks. Pure: the dialect's templates
//! decide; `cli::script` orders a batch's plans into the writes a session sends.

use super::*;

impl Dialect {
    /// The commands that take a port from what was read to `desired`, grouped into
    /// one block per configuration context; empty when nothing differs. VLANs the
    /// port needs are created (and named) first. Lines are exact device input, run
    /// from configuration mode; each block returns to it. `aggregates` holds the
    /// aggregates of the groups the port is in or joins (see the `lag` module).
    pub fn plan(&self, reading: &Reading, aggregates: &Aggregates, desired: &DesiredPort) -> Plan {
        let observed = &reading.observed;
        let fields = diff(desired, observed);
        let lag = self.lag_lines(reading, aggregates, desired);
        let vlans_change = reading.own_vlans != desired.vlans;
        let mut plan = Plan::default();
        if fields.is_empty() && !vlans_change && lag == lag::LagLines::default() {
            return plan;
        }
        plan.port = Some(desired.port.clone());
        plan.joins = desired.lag.map(|l| l.group);
        plan.leaves = lag.leaves;
        plan.aggregate = lag.aggregate;
        if vlans_change || plan.aggregate.is_some() || fields.contains(&PortField::VlanTable) {
            for vlan in vlans_of(&desired.vlans) {
                plan.vlans
                    .insert(vlan, desired.vlan_names.get(&vlan).cloned());
            }
        }
        let mut iface: Vec<String> = Vec::new();
        let v = Values::port(&desired.port);
        let p = &self.port;
        let put = |out: &mut Vec<String>, t: &Option<String>, vals: &Values| {
            if let Some(t) = t {
                out.push(render(t, vals));
            }
        };
        if fields.contains(&PortField::Description) {
            match &desired.description {
                Some(d) => {
                    let vals = Values {
                        description: Some(d.as_str()),
                        ..v.clone()
                    };
                    put(&mut iface, &p.description_set, &vals);
                }
                None => put(&mut iface, &p.description_clear, &v),
            }
        }
        if fields.contains(&PortField::Mtu) {
            match desired.mtu {
                Some(m) => {
                    let vals = Values {
                        mtu: Some(m),
                        ..v.clone()
                    };
                    put(&mut iface, &p.mtu_set, &vals);
                }
                None => put(&mut iface, &p.mtu_clear, &v),
            }
        }
        // A member leaves its group before its own VLANs change, and joins after.
        iface.extend(lag.leave);
        if vlans_change {
            match &self.vlans {
                VlanTemplates::Interface(_) => {
                    iface.extend(self.vlan_lines(&reading.own_vlans, &desired.vlans));
                }
                VlanTemplates::Vlan(vc) => {
                    plan.blocks.extend(vlan_centric_blocks(
                        vc,
                        &self.session.exit,
                        &desired.port,
                        &reading.own_vlans,
                        &desired.vlans,
                    ));
                }
            }
        }
        iface.extend(lag.join);
        // Admin state last, so a port comes up with its final VLANs.
        if fields.contains(&PortField::Admin) {
            match desired.admin {
                AdminState::Up => put(&mut iface, &p.admin_up, &v),
                AdminState::Down => put(&mut iface, &p.admin_down, &v),
            }
        }
        if !iface.is_empty() {
            let mut block = vec![render(&self.interface_enter, &v)];
            block.extend(iface);
            block.push(self.session.exit.clone());
            // The interface block goes after the VLAN-context blocks: memberships
            // are settled before the port is enabled.
            plan.blocks.push(block);
        }
        plan
    }

    /// The interface-style VLAN lines from one VLAN mode to another (none for a
    /// vlan-centric dialect, whose memberships are blocks of their own).
    pub(super) fn vlan_lines(&self, from: &VlanMode, to: &VlanMode) -> Vec<String> {
        match &self.vlans {
            VlanTemplates::Interface(iv) => interface_vlan_lines(iv, from, to),
            VlanTemplates::Vlan(_) => Vec::new(),
        }
    }

    /// The body of `plan`'s block when it is exactly one interface block of `port`
    /// (enter, lines, exit) and nothing else: what a range block can carry.
    pub fn interface_body<'p>(&self, plan: &'p Plan) -> Option<&'p [String]> {
        let port = plan.port.as_ref()?;
        if plan.aggregate.is_some() || plan.joins.is_some() || plan.leaves.is_some() {
            return None;
        }
        match plan.blocks.as_slice() {
            [block]
                if block.len() > 2
                    && block[0] == render(&self.interface_enter, &Values::port(port))
                    && block.last() == Some(&self.session.exit) =>
            {
                Some(&block[1..block.len() - 1])
            }
            _ => None,
        }
    }

    /// The line that enters `ports` at once (`interface range …`).
    pub fn range_enter(&self, ports: &[&PortName]) -> Option<String> {
        let r = self.interface_range.as_ref()?;
        let list: Vec<&str> = ports.iter().map(|p| p.as_str()).collect();
        Some(r.enter.replace("{ports}", &list.join(&r.separator)))
            .map(|l| l.chars().filter(|c| !c.is_control()).collect())
    }

    /// The lines that create (and name) one VLAN, from configuration mode.
    pub fn create_vlan_lines(&self, vlan: VlanId, name: Option<&VlanName>) -> Vec<String> {
        let vals = Values {
            vlan: Some(vlan),
            name: name.map(VlanName::as_str),
            ..Values::default()
        };
        let templates = if name.is_some() {
            &self.vlan_create_named
        } else {
            &self.vlan_create
        };
        templates.iter().map(|t| render(t, &vals)).collect()
    }
}

/// What one port needs: VLANs to create (with their names) and blocks of lines, each
/// entered from and returning to configuration mode.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// The port (none for the empty plan of a port that needs nothing).
    pub port: Option<PortName>,
    /// VLANs to create before the blocks run.
    pub vlans: BTreeMap<VlanId, Option<VlanName>>,
    /// Command blocks, in order.
    pub blocks: Vec<Vec<String>>,
    /// The link-aggregation group the port is to be in.
    pub joins: Option<LagGroup>,
    /// The group the port leaves.
    pub leaves: Option<LagGroup>,
    /// The block that creates or changes the aggregate of `joins`: sent once per
    /// group, before every member's block.
    pub aggregate: Option<(LagGroup, Vec<String>)>,
    /// The block that removes the aggregate of `leaves` after its last member left
    /// (set for the batch by [`aggregates_to_remove`]): sent once, after the
    /// members' blocks.
    pub removal: Option<(LagGroup, Vec<String>)>,
}

impl Plan {
    /// Whether the port already matches.
    pub fn is_empty(&self) -> bool {
        self.blocks.is_empty() && self.vlans.is_empty() && self.aggregate.is_none()
    }

    /// The link-aggregation group the plan is part of: the one it joins, else the
    /// one it leaves. A line of it refused fails the whole group.
    pub fn group(&self) -> Option<LagGroup> {
        self.joins.or(self.leaves)
    }
}

pub(super) fn vlans_of(mode: &VlanMode) -> Vec<VlanId> {
    match mode {
        VlanMode::Unconfigured => Vec::new(),
        VlanMode::Access { vlan } => vec![*vlan],
        VlanMode::Trunk { native, allowed } => {
            let mut all: BTreeSet<VlanId> = allowed.iter().collect();
            all.extend(native.iter().copied());
            all.into_iter().collect()
        }
    }
}

pub(super) fn kind_of(iv: &InterfaceVlans, mode: &VlanMode) -> Kind {
    match mode {
        VlanMode::Unconfigured => Kind::Unconfigured,
        VlanMode::Access { .. } => Kind::Access,
        VlanMode::Trunk {
            native: Some(_), ..
        } if iv.trunk_native.is_some() => Kind::TrunkNative,
        VlanMode::Trunk { .. } => Kind::Trunk,
    }
}

pub(super) fn templates(iv: &InterfaceVlans, kind: Kind) -> KindTemplates {
    match kind {
        Kind::Unconfigured => Some(iv.unconfigured.clone()),
        Kind::Access => iv.access.clone(),
        Kind::Trunk => iv.trunk.clone(),
        Kind::TrunkNative => iv.trunk_native.clone(),
    }
    .unwrap_or_default()
}

/// The allowed list as the device holds it.
pub(super) fn device_allowed(
    iv: &InterfaceVlans,
    native: Option<VlanId>,
    allowed: &VlanSet,
) -> VlanSet {
    let mut set = allowed.clone();
    if iv.native_in_allowed
        && let Some(n) = native
    {
        set.insert(n);
    }
    set
}

pub(super) fn interface_vlan_lines(
    iv: &InterfaceVlans,
    observed: &VlanMode,
    desired: &VlanMode,
) -> Vec<String> {
    let mut out = Vec::new();
    let from = kind_of(iv, observed);
    let to = kind_of(iv, desired);
    let t = templates(iv, to);
    let none = Values::default();
    let same_kind = from == to;
    if !same_kind {
        for line in &templates(iv, from).clear {
            out.push(render(line, &none));
        }
        for line in &t.enter {
            out.push(render(line, &none));
        }
    }
    match desired {
        VlanMode::Unconfigured => {}
        VlanMode::Access { vlan } => {
            if let Some(set) = &t.set {
                out.push(render(set, &Values::vlan(*vlan)));
            }
        }
        VlanMode::Trunk { native, allowed } => {
            let want = device_allowed(iv, *native, allowed);
            let (had, had_native) = match (same_kind, observed) {
                (true, VlanMode::Trunk { native, allowed }) => {
                    (Some(device_allowed(iv, *native, allowed)), *native)
                }
                _ => (None, None),
            };
            if had.as_ref() != Some(&want) {
                if let Some(replace) = &t.allowed_replace {
                    if want.is_empty() {
                        if let Some(none_line) = &t.allowed_none {
                            out.push(render(none_line, &Values::default()));
                        }
                    } else {
                        out.push(render(replace, &Values::vlans(&want)));
                    }
                } else if let (Some(add), Some(remove)) = (&t.allowed_add, &t.allowed_remove) {
                    let had = had.unwrap_or_default();
                    let drop: VlanSet = had.iter().filter(|v| !want.contains(*v)).collect();
                    let gain: VlanSet = want.iter().filter(|v| !had.contains(*v)).collect();
                    if !drop.is_empty() {
                        out.push(render(remove, &Values::vlans(&drop)));
                    }
                    if !gain.is_empty() {
                        out.push(render(add, &Values::vlans(&gain)));
                    }
                }
            }
            if *native != had_native || !same_kind {
                match native {
                    Some(n) => {
                        if let Some(set) = &t.native_set {
                            out.push(render(set, &Values::vlan(*n)));
                        }
                    }
                    None if same_kind && had_native.is_some() => {
                        if let Some(clear) = &t.native_clear {
                            out.push(render(clear, &none));
                        }
                    }
                    None => {}
                }
            }
        }
    }
    out
}

/// (untagged, tagged) memberships of a VLAN mode on a vlan-centric device.
pub(super) fn memberships(vc: &VlanCentric, mode: &VlanMode) -> (Option<VlanId>, BTreeSet<VlanId>) {
    match mode {
        VlanMode::Unconfigured => (None, BTreeSet::new()),
        VlanMode::Access { vlan } => (Some(*vlan), BTreeSet::new()),
        VlanMode::Trunk { native, allowed } => (
            native.filter(|n| n.get() != vc.default_vlan),
            allowed.iter().collect(),
        ),
    }
}

pub(super) fn vlan_centric_blocks(
    vc: &VlanCentric,
    exit: &str,
    port: &PortName,
    observed: &VlanMode,
    desired: &VlanMode,
) -> Vec<Vec<String>> {
    let (u_old, t_old) = memberships(vc, observed);
    let (u_new, t_new) = memberships(vc, desired);
    let u_old = u_old.filter(|v| v.get() != vc.default_vlan);
    let u_new_eff = u_new.filter(|v| v.get() != vc.default_vlan);
    let mut blocks = Vec::new();
    let block = |vlan: VlanId, template: &str| {
        let vals = Values {
            vlan: Some(vlan),
            port: Some(port.as_str()),
            ..Values::default()
        };
        vec![
            render(&vc.vlan_enter, &vals),
            render(template, &vals),
            exit.to_owned(),
        ]
    };
    for v in t_old.difference(&t_new) {
        blocks.push(block(*v, &vc.tagged_remove));
    }
    if let Some(u) = u_old
        && u_new_eff != Some(u)
    {
        blocks.push(block(u, &vc.untagged_remove));
    }
    for v in t_new.difference(&t_old) {
        blocks.push(block(*v, &vc.tagged_add));
    }
    if let Some(u) = u_new_eff
        && u_old != Some(u)
    {
        blocks.push(block(u, &vc.untagged_add));
    }
    blocks
}

//! Reading a port through a dialect: the show commands, the batch read cut into
//! each port's block, the VLAN table, and the show output parsed into what the port
//! carries (`Seen` → [`ObservedPort`], with the port's own VLANs and group for
//! planning). Pure: the dialect's patterns decide; the session sends the commands.

use super::*;

impl Dialect {
    /// The show commands that read `port`.
    pub fn read_commands(&self, port: &PortName) -> Vec<String> {
        self.read_commands
            .iter()
            .map(|t| render(t, &Values::port(port)))
            .collect()
    }

    /// The VLAN IDs of the switch's VLAN table as `output` (the dialect's
    /// `read.vlan_table.command`) lists them.
    pub fn parse_vlan_table(&self, output: &str) -> BTreeSet<VlanId> {
        let Some(t) = &self.vlan_table else {
            return BTreeSet::new();
        };
        output
            .lines()
            .filter_map(|l| t.pattern.captures(l.trim_end_matches('\r')))
            .filter_map(|c| c.get(1)?.as_str().parse::<u16>().ok())
            .filter_map(|n| VlanId::new(n).ok())
            .collect()
    }

    /// The one command that reads `ports` ports at once, when the dialect has one and
    /// the read is large enough to be worth it.
    pub fn batch_read_command(&self, ports: usize) -> Option<&str> {
        self.batch_read
            .as_ref()
            .filter(|b| ports >= b.from_ports)
            .map(|b| b.command.as_str())
    }

    /// Cuts the output of the batch read command into each port's block (what
    /// [`Self::parse`] reads), in the order of `ports`; `None` for a port whose block
    /// is not in the output (the caller reads it with its own commands: absence alone
    /// never means clean).
    pub fn split_batch(&self, output: &str, ports: &[PortName]) -> Vec<Option<String>> {
        let mut blocks: Vec<Option<String>> = vec![None; ports.len()];
        let Some(b) = &self.batch_read else {
            return blocks;
        };
        let starts: BTreeMap<String, usize> = ports
            .iter()
            .enumerate()
            .map(|(i, p)| (render(&b.start, &Values::port(p)).to_lowercase(), i))
            .collect();
        let mut current: Option<usize> = None;
        for line in output.lines().map(|l| l.trim_end_matches('\r')) {
            if let Some(i) = current {
                if b.end.is_match(line) {
                    current = None;
                } else {
                    let text = blocks[i].get_or_insert_with(String::new);
                    text.push_str(line);
                    text.push('\n');
                    continue;
                }
            }
            if let Some(&i) = starts.get(&line.trim().to_lowercase()) {
                blocks[i].get_or_insert_with(String::new);
                current = Some(i);
            }
        }
        blocks
    }

    /// Parses the outputs of [`Self::read_commands`] (concatenated) into the observed
    /// port. Fields the dialect cannot read (ACL, LAG where it has no `lag:`
    /// section, and MTU where it has no MTU capability) stay unknown; a member's link
    /// aggregation reads as no membership until [`Self::settle`]d against its
    /// aggregate.
    pub fn parse(&self, port: &PortName, output: &str) -> ObservedPort {
        self.read(port, output).observed
    }

    /// [`Self::parse`], keeping what planning needs besides (the port's own VLAN
    /// lines and its member line).
    pub fn read(&self, port: &PortName, output: &str) -> Reading {
        let mut seen = Seen::default();
        for line in output.lines().map(|l| l.trim_end_matches('\r')) {
            for (re, field) in &self.rules {
                if let Some(c) = re.captures(line) {
                    let text = c.get(1).map(|m| m.as_str()).unwrap_or("");
                    seen.record(*field, text);
                }
            }
        }
        let admin = seen.admin.unwrap_or(self.admin_default);
        let vlans = match &self.vlans {
            VlanTemplates::Interface(iv) => seen.interface_vlans(iv),
            VlanTemplates::Vlan(vc) => seen.vlan_centric(vc),
        };
        let supports = |c| self.capabilities.supports(c);
        let channel = match (&self.lag, seen.channel_group) {
            (Some(spec), Some(group)) => LagGroup::new(i64::from(group)).ok().map(|g| {
                let mode = seen
                    .channel_mode
                    .as_deref()
                    .and_then(|w| lag::mode_of(spec, w));
                (g, mode)
            }),
            _ => None,
        };
        Reading {
            observed: ObservedPort {
                port: port.clone(),
                admin: Some(admin),
                vlans: Some(vlans.clone()),
                mtu: supports(Capability::Mtu).then_some(seen.mtu),
                description: Some(seen.description.map(|d| Description::read_from_device(&d))),
                acl: None,
                lag: self.lag.as_ref().map(|_| None),
                // Set from the dialect's VLAN table read, where it has one.
                missing_vlans: None,
            },
            own_vlans: vlans,
            channel,
        }
    }
}

#[derive(Default)]
pub(super) struct Seen {
    description: Option<String>,
    mode: Option<String>,
    access: Option<VlanId>,
    native: Option<VlanId>,
    allowed: Option<VlanSet>,
    untagged: Option<VlanId>,
    tagged: BTreeSet<VlanId>,
    mtu: Option<Mtu>,
    admin: Option<AdminState>,
    channel_group: Option<u16>,
    channel_mode: Option<String>,
}

/// Parses a device VLAN list (`10,20-22`, `none`); unparsable parts are skipped
/// (the read then differs from any desired state, which is the safe outcome).
pub(super) fn device_vlan_list(text: &str) -> VlanSet {
    if text == "none" {
        return VlanSet::new();
    }
    let mut set = VlanSet::new();
    for part in text.split(',') {
        if let Ok(s) = VlanSet::parse(part) {
            for v in s.iter() {
                set.insert(v);
            }
        } else if let Some((a, b)) = part.split_once('-') {
            // Devices print ranges reaching 4095 (`1-4095`): clamp to usable VLANs.
            if let (Ok(a), Ok(b)) = (a.parse::<u16>(), b.parse::<u16>()) {
                for n in a.max(1)..=b.min(4094) {
                    if let Ok(v) = VlanId::new(n) {
                        set.insert(v);
                    }
                }
            }
        }
    }
    set
}

pub(super) fn all_vlans() -> VlanSet {
    (1..=4094).filter_map(|n| VlanId::new(n).ok()).collect()
}

impl Seen {
    fn record(&mut self, field: Field, text: &str) {
        let vlan = || text.parse::<u16>().ok().and_then(|n| VlanId::new(n).ok());
        match field {
            Field::Description => self.description = Some(text.to_owned()),
            Field::Mode => self.mode = Some(text.to_owned()),
            Field::AccessVlan => self.access = vlan(),
            Field::NativeVlan => self.native = vlan(),
            Field::AllowedVlans => self.allowed = Some(device_vlan_list(text)),
            Field::AllowedVlansAdd => {
                let set = self.allowed.get_or_insert_with(VlanSet::new);
                for v in device_vlan_list(text).iter() {
                    set.insert(v);
                }
            }
            Field::UntaggedVlan => self.untagged = vlan(),
            Field::TaggedVlan => {
                if let Some(v) = vlan() {
                    self.tagged.insert(v);
                }
            }
            Field::Mtu => self.mtu = text.parse::<i64>().ok().and_then(|n| Mtu::new(n).ok()),
            Field::AdminDown => self.admin = Some(AdminState::Down),
            Field::AdminUp => self.admin = Some(AdminState::Up),
            Field::ChannelGroup => self.channel_group = text.parse().ok(),
            Field::ChannelMode => self.channel_mode = Some(text.to_owned()),
        }
    }

    fn interface_vlans(&self, iv: &InterfaceVlans) -> VlanMode {
        let kind = match &self.mode {
            Some(m) => iv.modes.get(m).copied().unwrap_or(Kind::Unconfigured),
            None if self.access.is_some() => Kind::Access,
            None => Kind::Unconfigured,
        };
        match kind {
            Kind::Unconfigured => VlanMode::Unconfigured,
            Kind::Access => VlanMode::Access {
                vlan: self.access.unwrap_or(VlanId::new(1).expect("1 is a VLAN")),
            },
            Kind::Trunk | Kind::TrunkNative => {
                let mut allowed = match (&self.allowed, iv.trunk_without_allowed) {
                    (Some(a), _) => a.clone(),
                    (None, WithoutAllowed::All) => all_vlans(),
                    (None, WithoutAllowed::None) => VlanSet::new(),
                };
                if let Some(n) = self.native
                    && (iv.native_in_allowed || kind == Kind::TrunkNative)
                {
                    allowed = allowed.iter().filter(|v| *v != n).collect();
                }
                VlanMode::Trunk {
                    native: self.native,
                    allowed,
                }
            }
        }
    }

    fn vlan_centric(&self, vc: &VlanCentric) -> VlanMode {
        let untagged = self.untagged.filter(|v| v.get() != vc.default_vlan);
        if !self.tagged.is_empty() {
            VlanMode::Trunk {
                native: untagged,
                allowed: self.tagged.iter().copied().collect(),
            }
        } else if let Some(u) = untagged {
            VlanMode::Access { vlan: u }
        } else {
            VlanMode::Unconfigured
        }
    }
}

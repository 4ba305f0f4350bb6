//! What the worker knows each port established, and what drift sweeps found: the ports
//! tracked (Active, with their desired state), the drift notices a sweep posts and a
//! port settles, and when a drifted port is repaired. State only; the sweep that feeds
//! it is `sweep.rs`.

use super::*;

/// The drift bookkeeping of the tracked (Active) ports. See [`SwitchWorker::settle`]
/// for how a port and the sweeps share it.
#[derive(Default)]
pub(super) struct Tracking {
    /// Active ports and what they should be.
    pub(super) desired: BTreeMap<PortKey, Tracked>,
    /// The desired states the tracked ports share (see [`Tracked`]).
    pub(super) shapes: Vec<Arc<DesiredPort>>,
    /// The ports that last established their device port as drifted themselves
    /// (read it drifted and left it so, ReportOnly); a port that applied it or read
    /// it in sync is not here. Only the drifted are kept: a port in sync holds no
    /// entry (an entry each was ~0.1 KB of each of 10,000 idle Active ports,
    /// heaptrack).
    pub(super) known: HashSet<PortKey>,
    /// Sweep verdicts that differ from `known` and that the port has not confirmed
    /// yet: its drift check is due.
    pub(super) pending: HashMap<PortKey, bool>,
    /// When each port's drift was repaired lately (see [`REPAIR_WINDOW`]).
    pub(super) repairs: HashMap<PortKey, VecDeque<tokio::time::Instant>>,
}

/// Takes `key` out of the drifted ports, giving back the slack ([`slack`]).
pub(super) fn forget_drifted(known: &mut HashSet<PortKey>, key: &PortKey) {
    if known.remove(key) {
        slack::release_set(known);
    }
}

/// How far back [`SwitchWorker::record_repair`] counts a port's repairs.
pub const REPAIR_WINDOW: Duration = Duration::from_secs(600);

impl Tracking {
    /// Takes a sweep's verdict for `key`: `true` when the port must be told (the
    /// verdict differs from what the port established, whether or not it was told
    /// already — a port that could not act yet is told again at every sweep).
    pub(super) fn sweep_verdict(&mut self, key: &PortKey, drifted: bool) -> bool {
        if self.known.contains(key) == drifted {
            slack::remove(&mut self.pending, key);
            return false;
        }
        self.pending.insert(key.clone(), drifted);
        true
    }

    /// Tracks `key` as `desired`; whether its desired state changed.
    pub(super) fn put(&mut self, key: PortKey, desired: DesiredPort) -> bool {
        if self.desired.get(&key).is_some_and(|t| t.is(&desired)) {
            return false;
        }
        let port = desired.port.clone();
        let shape = match self.shapes.iter().find(|s| alike(s, &desired)) {
            Some(s) => s.clone(),
            None => {
                let s = Arc::new(desired);
                self.shapes.push(s.clone());
                s
            }
        };
        let old = self.desired.insert(key, Tracked { port, shape });
        self.release(old);
        true
    }

    /// Drops a shape no tracked port holds any more.
    pub(super) fn release(&mut self, old: Option<Tracked>) {
        if let Some(old) = old
            && Arc::strong_count(&old.shape) == 2
        {
            self.shapes.retain(|s| !Arc::ptr_eq(s, &old.shape));
        }
    }

    pub(super) fn forget(&mut self, key: &PortKey) {
        let old = self.desired.remove(key);
        self.release(old);
        forget_drifted(&mut self.known, key);
        slack::remove(&mut self.pending, key);
        slack::remove(&mut self.repairs, key);
    }
}

/// A tracked port's desired state. Ports that should look alike (one configuration
/// on one switch) share one copy of it, the shape, which differs from each port's
/// own only in `port` (the shape's is whichever port had it first, and is ignored).
/// At 10,000 Active ports a copy per port was ~0.3 KB of each (heaptrack of an idle
/// operator).
pub(super) struct Tracked {
    pub(super) port: PortName,
    pub(super) shape: Arc<DesiredPort>,
}

impl Tracked {
    /// The port's desired state.
    pub(super) fn desired(&self) -> DesiredPort {
        DesiredPort {
            port: self.port.clone(),
            ..(*self.shape).clone()
        }
    }

    /// Whether the port's desired state is `d`.
    pub(super) fn is(&self, d: &DesiredPort) -> bool {
        self.port == d.port && alike(&self.shape, d)
    }
}

/// Whether `a` and `b` are the same desired state but for the device port.
pub(super) fn alike(a: &DesiredPort, b: &DesiredPort) -> bool {
    // Every field named, so that a new one is compared too.
    let DesiredPort {
        port: _,
        admin,
        vlans,
        vlan_names,
        mtu,
        description,
        acl,
        lag,
        lag_members,
        host_mac,
    } = a;
    *admin == b.admin
        && *vlans == b.vlans
        && *mtu == b.mtu
        && *lag == b.lag
        && *host_mac == b.host_mac
        && *description == b.description
        && *vlan_names == b.vlan_names
        && *acl == b.acl
        && *lag_members == b.lag_members
}

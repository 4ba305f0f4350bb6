//! The fleet of Switches that speak BGP, as the caches hold them: each Switch with
//! valid `spec.bgp`, parsed once per spec change and kept in a cache the Switch
//! watch invalidates. Reads the Switch cache (a reflector store); shared by the BGP
//! passes, the claim allocator and the Server controller.

use std::sync::Arc;

use kube::ResourceExt;
use kube::runtime::reflector::Store;

use crate::api::Switch;
use crate::decide::bgp::{self, SwitchBgp, SwitchId, switch_bgp};

/// The Switches with valid BGP, oldest first, with their settings, and what they
/// keep for themselves, indexed.
#[derive(Debug, Default)]
pub(super) struct BgpFleet {
    /// The Switches and their settings.
    pub switches: Vec<(SwitchId, SwitchBgp)>,
    /// Their ASNs, router ids and subnets.
    pub tors: bgp::Tors,
    /// Their namespaces and names → their places in `switches`, to find one
    /// without a pass over the fleet.
    kept: std::collections::HashMap<(String, String), usize>,
}

impl BgpFleet {
    /// `switch`'s settings when it is kept and the fleet was computed from its
    /// current generation.
    pub(super) fn of(&self, switch: &Switch) -> Option<&SwitchBgp> {
        let key = (switch.namespace().unwrap_or_default(), switch.name_any());
        let i = *self.kept.get(&key)?;
        self.switches
            .get(i)
            .filter(|(s, _)| s.is_current(switch))
            .map(|(_, b)| b)
    }

    /// The settings of Switch `name` of `namespace`, when it is kept.
    pub(super) fn named(&self, namespace: &str, name: &str) -> Option<&SwitchBgp> {
        let i = *self.kept.get(&(namespace.to_owned(), name.to_owned()))?;
        self.switches.get(i).map(|(_, b)| b)
    }

    /// Whether `switch` is one of the fleet's (not left out for an overlap).
    pub(super) fn keeps(&self, switch: &Switch) -> bool {
        let me = (switch.namespace().unwrap_or_default(), switch.name_any());
        self.kept.contains_key(&me)
    }
}

/// See [`BgpFleet`].
pub(super) type BgpSwitches = Arc<BgpFleet>;

/// [`bgp_switches`] last computed, and the key (each Switch with `spec.bgp`: its
/// namespace, name, uid and generation) it was computed from: a fleet's reconciles
/// pay for parsing and checking every Switch once per spec change, not once each
/// (a status write does not count; statuses are read from the cache where needed).
///
/// The Switch watch calls [`BgpSwitchesCache::switches_changed`] on every event, so
/// a reconcile with no Switch event since the last one takes the cached fleet without
/// looking at any other Switch (measured: at 200 Switches reading their speakers every
/// 30 s, the key over the whole fleet at every reconcile was most of the idle CPU).
#[derive(Debug, Default)]
pub(super) struct BgpSwitchesCache {
    /// Bumped at every Switch event; 0 while nothing feeds it (then every read
    /// checks the key).
    epoch: std::sync::atomic::AtomicU64,
    /// The epoch, the key and the fleet last computed.
    cached: parking_lot::Mutex<Option<(u64, u64, BgpSwitches)>>,
}

impl BgpSwitchesCache {
    /// A Switch came, went or changed (called once the Switch cache holds it).
    pub(super) fn switches_changed(&self) {
        self.epoch.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    }
}

/// Every Switch with valid BGP settings, with them, oldest first; a Switch whose
/// ports' subnets overlap an older one's is left out (see [`refused_overlaps`]).
/// Cached until a Switch with `spec.bgp` comes, goes or changes its spec; the fleet
/// holds each Switch's identity and parsed settings, not the object (read statuses
/// from the Switch cache).
pub(super) fn bgp_switches(cache: &BgpSwitchesCache, switches: &Store<Switch>) -> BgpSwitches {
    use std::hash::{Hash, Hasher};
    // Read before the cache: an event after this read makes the next call look again.
    let epoch = cache.epoch.load(std::sync::atomic::Ordering::Acquire);
    if epoch != 0
        && let Some((e, _, v)) = cache.cached.lock().as_ref()
        && *e == epoch
    {
        return v.clone();
    }
    let state = switches.state();
    let mut with_bgp: Vec<&Arc<Switch>> = state.iter().filter(|s| s.spec.bgp.is_some()).collect();
    with_bgp.sort_by(|a, b| {
        (a.metadata.namespace.as_deref(), a.metadata.name.as_deref())
            .cmp(&(b.metadata.namespace.as_deref(), b.metadata.name.as_deref()))
    });
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for s in &with_bgp {
        (
            s.metadata.namespace.as_deref(),
            s.metadata.name.as_deref(),
            s.metadata.uid.as_deref(),
            s.metadata.generation,
        )
            .hash(&mut h);
    }
    let key = h.finish();
    let mut cached = cache.cached.lock();
    if let Some((e, k, v)) = cached.as_mut()
        && *k == key
    {
        *e = epoch;
        return v.clone();
    }
    let mut all: Vec<(&Arc<Switch>, SwitchBgp)> = with_bgp
        .into_iter()
        .filter_map(|s| match switch_bgp(&s.spec) {
            Ok(Some(b)) => Some((s, b)),
            _ => None,
        })
        .collect();
    all.sort_by(|(a, _), (b, _)| {
        let at = |s: &Switch| s.metadata.creation_timestamp.as_ref().map(|t| t.0);
        (at(a), &a.metadata.namespace, &a.metadata.name).cmp(&(
            at(b),
            &b.metadata.namespace,
            &b.metadata.name,
        ))
    });
    let mut subnets = bgp::SubnetIndex::default();
    let mut kept: Vec<(SwitchId, SwitchBgp)> = Vec::with_capacity(all.len());
    for (s, b) in all {
        if subnets.overlaps(&b).is_empty() {
            subnets.insert(&s.name_any(), &b);
            kept.push((SwitchId::of(s), b));
        }
    }
    let fleet = Arc::new(BgpFleet {
        tors: bgp::Tors::new(kept.iter().map(|(s, b)| (s.name.as_str(), b))),
        kept: kept
            .iter()
            .enumerate()
            .map(|(i, (s, _))| ((s.namespace.clone(), s.name.clone()), i))
            .collect(),
        switches: kept,
    });
    *cached = Some((epoch, key, fleet.clone()));
    fleet
}

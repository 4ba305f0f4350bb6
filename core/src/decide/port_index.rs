//! The SwitchPorts of each Switch: port names by (namespace, Switch), kept from the
//! port watch's events (the Switch label), so neither the Switch controller nor a
//! Switch's or ProviderSwitch's wake scans every cached port; and each port's Switch,
//! which the SwitchPort cache does not keep (its label map alone was ~0.6 KB of each
//! cached port). At 100,000 ports those
//! scans were what limited one replica first (measured: a Switch reconcile and a
//! Switch event each walked the whole cache). Pure: the runtime feeds it the watch's
//! events under a lock and the readers ask it; no I/O, no lock of its own.
//!
//! A relist (the watch restarting) builds a new index beside the old one, which keeps
//! answering until the list is complete and then replaces it. A port this process
//! has just created is recorded at once ([`PortIndex::apply`]), before its watch event
//! arrives, so a Switch whose cache lags its own creates does not create (or read)
//! the port again.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use kube::ResourceExt;

use crate::api::SwitchPort;
use crate::api::keys::SWITCH_LABEL;

/// A name shared by the entries that hold it (a namespace, a Switch, a port).
type Name = Arc<str>;

#[derive(Debug, Default)]
struct Entries {
    /// Port names by (namespace, Switch).
    by_switch: HashMap<(Name, Name), BTreeSet<Name>>,
    /// The Switch each port is indexed under, by (namespace, port).
    of_port: HashMap<(Name, Name), Name>,
}

impl Entries {
    fn remove(&mut self, ns: &str, name: &str) {
        let Some(((ns_key, _), switch)) = self.of_port.remove_entry(&key(ns, name)) else {
            return;
        };
        let group = (ns_key, switch);
        if let Some(names) = self.by_switch.get_mut(&group) {
            names.remove(name);
            if names.is_empty() {
                self.by_switch.remove(&group);
            }
        }
    }

    fn apply(&mut self, ns: &str, name: &str, switch: Option<&str>) {
        if self.of_port.get(&key(ns, name)).map(|s| &**s) == switch {
            return;
        }
        self.remove(ns, name);
        let Some(switch) = switch else {
            return;
        };
        // One allocation per namespace and Switch, shared by its ports.
        let group = match self.by_switch.get_key_value(&key(ns, switch)) {
            Some((group, _)) => group.clone(),
            None => (Name::from(ns), Name::from(switch)),
        };
        let name: Name = Name::from(name);
        self.by_switch
            .entry(group.clone())
            .or_default()
            .insert(name.clone());
        self.of_port.insert((group.0, name), group.1);
    }
}

fn key(ns: &str, name: &str) -> (Name, Name) {
    (Name::from(ns), Name::from(name))
}

/// The ports of each Switch (see the module doc).
#[derive(Debug, Default)]
pub struct PortIndex {
    current: Entries,
    /// The index a relist is building, until its list is complete.
    relisting: Option<Entries>,
}

impl PortIndex {
    /// Port `ns/name` is labelled for `switch` (or for none): from a watch event, or
    /// from this process's own create.
    pub fn apply(&mut self, ns: &str, name: &str, switch: Option<&str>) {
        match &mut self.relisting {
            Some(next) => next.apply(ns, name, switch),
            None => self.current.apply(ns, name, switch),
        }
    }

    /// `port` as a watch event shows it.
    pub fn put(&mut self, port: &SwitchPort) {
        self.apply(
            port.metadata.namespace.as_deref().unwrap_or_default(),
            port.metadata.name.as_deref().unwrap_or_default(),
            port.labels().get(SWITCH_LABEL).map(String::as_str),
        );
    }

    /// Port `ns/name` is gone.
    pub fn remove(&mut self, ns: &str, name: &str) {
        self.current.remove(ns, name);
        if let Some(next) = &mut self.relisting {
            next.remove(ns, name);
        }
    }

    /// The watch restarts its list: what follows builds a new index.
    pub fn begin_relist(&mut self) {
        self.relisting = Some(Entries::default());
    }

    /// The list is complete: it replaces the index.
    pub fn end_relist(&mut self) {
        if let Some(next) = self.relisting.take() {
            self.current = next;
        }
    }

    /// The Switch port `ns/name` is labelled for, as the index knows it: a list in
    /// progress first (it is newer), else the current index. The SwitchPort cache
    /// keeps no labels, so this is where a cached port's Switch is read.
    pub fn switch_of(&self, ns: &str, name: &str) -> Option<Arc<str>> {
        let k = key(ns, name);
        self.relisting
            .as_ref()
            .and_then(|next| next.of_port.get(&k))
            .or_else(|| self.current.of_port.get(&k))
            .cloned()
    }

    /// The ports of Switch `ns/switch`, by name.
    pub fn of_switch(&self, ns: &str, switch: &str) -> Vec<Arc<str>> {
        self.current
            .by_switch
            .get(&key(ns, switch))
            .map(|names| names.iter().cloned().collect())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl PortIndex {
        fn len(&self) -> usize {
            self.current.of_port.len()
        }
    }

    fn names(index: &PortIndex, ns: &str, switch: &str) -> Vec<String> {
        index
            .of_switch(ns, switch)
            .iter()
            .map(|n| n.to_string())
            .collect()
    }

    #[test]
    fn ports_are_found_by_their_switch_and_namespace_and_follow_their_label() {
        let mut index = PortIndex::default();
        index.apply("infra", "p1", Some("tor-1"));
        index.apply("infra", "p2", Some("tor-1"));
        index.apply("lab", "p1", Some("tor-1"));
        index.apply("infra", "loose", None);
        assert_eq!(names(&index, "infra", "tor-1"), ["p1", "p2"]);
        assert_eq!(index.switch_of("infra", "p2").as_deref(), Some("tor-1"));
        assert_eq!(index.switch_of("lab", "p2"), None);
        assert_eq!(index.switch_of("infra", "loose"), None);
        assert_eq!(names(&index, "lab", "tor-1"), ["p1"]);
        assert!(names(&index, "infra", "tor-2").is_empty());
        assert_eq!(index.len(), 3);
        // Relabelled: it leaves its old Switch.
        index.apply("infra", "p2", Some("tor-2"));
        assert_eq!(names(&index, "infra", "tor-1"), ["p1"]);
        assert_eq!(names(&index, "infra", "tor-2"), ["p2"]);
        // The same event twice changes nothing.
        index.apply("infra", "p2", Some("tor-2"));
        assert_eq!(names(&index, "infra", "tor-2"), ["p2"]);
        // Label removed, then deleted; a Switch with no port left is gone.
        index.apply("infra", "p2", None);
        assert!(names(&index, "infra", "tor-2").is_empty());
        index.remove("infra", "p1");
        index.remove("infra", "never-seen");
        assert!(names(&index, "infra", "tor-1").is_empty());
        assert!(index.current.by_switch.keys().all(|(ns, _)| &**ns == "lab"));
        assert_eq!(index.len(), 1);
    }

    #[test]
    fn a_relist_answers_from_the_old_index_until_the_new_list_is_complete() {
        let mut index = PortIndex::default();
        index.apply("infra", "p1", Some("tor-1"));
        index.apply("infra", "gone", Some("tor-1"));
        index.begin_relist();
        index.apply("infra", "p1", Some("tor-1"));
        index.apply("infra", "new", Some("tor-1"));
        assert_eq!(names(&index, "infra", "tor-1"), ["gone", "p1"]);
        // A port's Switch: the list in progress knows it first.
        index.apply("infra", "p1", Some("tor-2"));
        assert_eq!(index.switch_of("infra", "p1").as_deref(), Some("tor-2"));
        assert_eq!(index.switch_of("infra", "gone").as_deref(), Some("tor-1"));
        index.apply("infra", "p1", Some("tor-1"));
        index.end_relist();
        assert_eq!(index.switch_of("infra", "gone"), None);
        // What the new list does not hold is gone.
        assert_eq!(names(&index, "infra", "tor-1"), ["new", "p1"]);
        index.end_relist();
        assert_eq!(index.len(), 2);
    }
}

//! The blast radius at `kubectl apply`: which ports an edit or a deletion of a
//! SwitchPortConfiguration, Switch, ProviderSwitch, SwitchPort, SmartNicConfiguration,
//! SmartNicPort or (with tenancy on) VLANPool may move (where the
//! webhook looks for them), and the admission warnings that say what it changes
//! ("patchbay: this changes 212 ports on 9 switches (209 reconfigured, 3 refused by
//! patchbay)…", "patchbay: 3 hosts on those ports: 3 Provisioned of claim
//! web/web"). Pure: the webhook (`patchbay::blast_radius`) reads the objects, [`crate::decide::plan`]
//! decides each port (the operator's own decision), and this module words it.
//!
//! Warnings, never refusals: an edit patchbay can carry out is the infra team's to
//! make; the warning is the moment they see how far it reaches. Each warning keeps
//! to kube-core's advice (120 characters where it can, never past 256, which
//! kube-apiserver cuts at).

use std::collections::{BTreeMap, BTreeSet};

use crate::decide::plan::{Carry, PortChange};

/// Where the ports a reviewed object may move are found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reach {
    /// The SwitchPorts whose `spec.configuration` names this SwitchPortConfiguration
    /// (a port's reference without a namespace is in the port's own).
    Configuration {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
    },
    /// The SwitchPorts of this Switch (its `patchbay.dev/switch` label).
    Switch {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
    },
    /// The SmartNicPorts whose `spec.configuration` names this
    /// SmartNicConfiguration.
    SmartNicConfiguration {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
    },
    /// This SmartNicPort (the review's object: nothing to look up).
    SmartNicPort,
    /// The Switches configured through this ProviderSwitch, and their ports; and
    /// the SmartNicPorts on it.
    Provider {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
    },
    /// This SwitchPort.
    Port {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
    },
    /// Every port: a VLANPool's grants apply to whomever a port serves (its claim's
    /// namespace), which only the Servers say.
    Everywhere,
}

/// Where to look for the ports an object of `kind` may move; `None` for a kind the
/// blast radius does not cover (a VLANPool with `tenancy` off: pools grant nothing
/// then).
pub fn reach(kind: &str, namespace: &str, name: &str, tenancy: bool) -> Option<Reach> {
    let (namespace, name) = (namespace.to_owned(), name.to_owned());
    Some(match kind {
        "VLANPool" if tenancy => Reach::Everywhere,
        "SwitchPortConfiguration" => Reach::Configuration { namespace, name },
        "Switch" => Reach::Switch { namespace, name },
        "ProviderSwitch" => Reach::Provider { namespace, name },
        "SwitchPort" => Reach::Port { namespace, name },
        "SmartNicConfiguration" => Reach::SmartNicConfiguration { namespace, name },
        "SmartNicPort" => Reach::SmartNicPort,
        _ => return None,
    })
}

/// Whether an UPDATE from `old` to `new` can move no port whatever the fleet holds:
/// the spec and the labels (a SwitchPort's Switch label says which Switch it is of)
/// are as they were. The operator's own writes of finalizers, marks and other
/// annotations are such updates; the webhook answers them without reading anything.
pub fn moves_nothing(old: &serde_json::Value, new: &serde_json::Value) -> bool {
    old.get("spec") == new.get("spec")
        && old.pointer("/metadata/labels") == new.pointer("/metadata/labels")
}

/// What the warning says of one host (by its `patchbay.dev/host` mark); the claim
/// holding it is the plan's ([`PortChange::claim`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostFacts {
    /// Its phase (`Provisioned`), when known.
    pub phase: Option<String>,
}

/// The longest warning written (kube-apiserver cuts a warning at 256 characters).
const LONGEST: usize = 240;

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// The warnings an admission review answers with for `changes` (the plan of the
/// reviewed write); `hosts` holds what is known of each host mark. None when the
/// write moves no port.
pub fn warnings(changes: &[PortChange], hosts: &BTreeMap<String, HostFacts>) -> Vec<String> {
    if changes.is_empty() {
        return Vec::new();
    }
    let switches: BTreeSet<(&str, &str)> = changes
        .iter()
        .map(|c| (c.namespace.as_str(), c.switch.as_str()))
        .collect();
    let count = |f: fn(&Carry) -> bool| changes.iter().filter(|c| f(&c.after)).count();
    let set = count(|c| matches!(c, Carry::Set(_)));
    let clean = count(|c| matches!(c, Carry::Clean));
    let refused = count(|c| matches!(c, Carry::Refused(_)));
    let mut how = Vec::new();
    if set > 0 {
        how.push(format!("{set} reconfigured"));
    }
    if clean > 0 {
        how.push(format!("{clean} cleaned"));
    }
    if refused > 0 {
        how.push(format!("{refused} refused by patchbay"));
    }
    let mut out = vec![format!(
        "patchbay: this changes {} on {} ({}); `patchbay plan` lists them",
        plural(changes.len(), "port", "ports"),
        plural(switches.len(), "switch", "switches"),
        how.join(", ")
    )];
    // Hosts, grouped by what they are: kind, phase, claim.
    let marks: BTreeMap<&str, Option<&str>> = changes
        .iter()
        .filter_map(|c| Some((c.host.as_deref()?, c.claim.as_deref())))
        .collect();
    if marks.is_empty() {
        return out;
    }
    let mut groups: BTreeMap<String, usize> = BTreeMap::new();
    for (mark, claim) in &marks {
        let kind = mark.split('/').next().unwrap_or_default();
        let facts = hosts.get(*mark).cloned().unwrap_or_default();
        let mut what = match (kind, facts.phase) {
            ("Server", Some(p)) => p,
            ("Server", None) => "Server".to_owned(),
            (other, Some(p)) => format!("{other} {p}"),
            (other, None) => other.to_owned(),
        };
        if let Some(claim) = claim {
            what.push_str(&format!(" of claim {claim}"));
        }
        *groups.entry(what).or_default() += 1;
    }
    // The largest groups first.
    let mut groups: Vec<(String, usize)> = groups.into_iter().collect();
    groups.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    let mut line = format!(
        "patchbay: {} on those ports:",
        plural(marks.len(), "host", "hosts")
    );
    for (i, (what, n)) in groups.iter().enumerate() {
        let part = format!("{} {n} {what}", if i == 0 { "" } else { "," });
        let rest = groups.len() - i;
        // Room for ", and N more" after it.
        if line.len() + part.len() + 16 > LONGEST && rest > 1 {
            line.push_str(&format!(", and {rest} more"));
            break;
        }
        line.push_str(&part);
    }
    out.push(line);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decide::plan::Carry;
    use patchbay_model::values::PortName;
    use patchbay_model::{DesiredPort, VlanMode};

    fn change(switch: &str, port: &str, host: Option<&str>, after: Carry) -> PortChange {
        PortChange {
            kind: crate::decide::plan::PortKind::SwitchPort,
            namespace: "infra".into(),
            port: port.into(),
            switch: switch.into(),
            device_port: None,
            provider: None,
            host: host.map(str::to_owned),
            claim: None,
            configuration: (None, None),
            before: Carry::Clean,
            after,
        }
    }

    fn set() -> Carry {
        let mut d = DesiredPort::clean(PortName::parse("Gi1/0/1").unwrap());
        d.vlans = VlanMode::Unconfigured;
        Carry::Set(d)
    }

    #[test]
    fn the_kinds_it_looks_at() {
        assert_eq!(
            reach("SwitchPortConfiguration", "t", "web", false),
            Some(Reach::Configuration {
                namespace: "t".into(),
                name: "web".into()
            })
        );
        assert!(matches!(
            reach("Switch", "i", "tor", false),
            Some(Reach::Switch { .. })
        ));
        assert!(matches!(
            reach("ProviderSwitch", "i", "tor", false),
            Some(Reach::Provider { .. })
        ));
        assert!(matches!(
            reach("SwitchPort", "i", "p", false),
            Some(Reach::Port { .. })
        ));
        // A pool moves ports only under tenancy, and then any port.
        assert_eq!(reach("VLANPool", "", "p", false), None);
        assert_eq!(reach("VLANPool", "", "p", true), Some(Reach::Everywhere));
        assert_eq!(reach("ServerClaim", "t", "c", true), None);
    }

    #[test]
    fn metadata_only_updates_move_nothing() {
        let port = serde_json::json!({"metadata": {"name": "p1",
            "labels": {"patchbay.dev/switch": "tor"}}, "spec": {"configuration": {"name": "web"}}});
        let mut marked = port.clone();
        marked["metadata"]["annotations"] = serde_json::json!({"patchbay.dev/host": "Server/a"});
        marked["metadata"]["finalizers"] = serde_json::json!(["patchbay.dev/cleanup"]);
        assert!(moves_nothing(&port, &marked));
        let mut relinked = port.clone();
        relinked["spec"]["configuration"]["name"] = "db".into();
        assert!(!moves_nothing(&port, &relinked));
        let mut moved = port.clone();
        moved["metadata"]["labels"]["patchbay.dev/switch"] = "tor-2".into();
        assert!(!moves_nothing(&port, &moved));
    }

    #[test]
    fn nothing_moved_says_nothing() {
        assert!(warnings(&[], &BTreeMap::new()).is_empty());
    }

    #[test]
    fn ports_switches_and_hosts_are_counted() {
        let of_web = |mut c: PortChange| {
            c.claim = Some("web/web".into());
            c
        };
        let changes = vec![
            of_web(change("tor-1", "p1", Some("Server/a"), set())),
            of_web(change("tor-1", "p2", Some("Server/a"), set())),
            of_web(change("tor-2", "p1", Some("Server/b"), set())),
            change("tor-2", "p2", Some("Server/c"), Carry::Clean),
            change("tor-3", "p1", None, Carry::Refused("Invalid: no".into())),
            change("tor-3", "p2", Some("BareMetalHost/m/h1"), set()),
        ];
        let web = HostFacts {
            phase: Some("Provisioned".into()),
        };
        let hosts = BTreeMap::from([
            ("Server/a".to_owned(), web.clone()),
            ("Server/b".to_owned(), web),
            (
                "Server/c".to_owned(),
                HostFacts {
                    phase: Some("Available".into()),
                },
            ),
        ]);
        let w = warnings(&changes, &hosts);
        assert_eq!(
            w,
            [
                "patchbay: this changes 6 ports on 3 switches (4 reconfigured, 1 cleaned, \
                 1 refused by patchbay); `patchbay plan` lists them",
                "patchbay: 4 hosts on those ports: 2 Provisioned of claim web/web, \
                 1 Available, 1 BareMetalHost"
            ]
        );
        // One port, one switch: singular words; no host, no second warning.
        let one = warnings(&[change("tor-1", "p1", None, set())], &hosts);
        assert_eq!(
            one,
            [
                "patchbay: this changes 1 port on 1 switch (1 reconfigured); `patchbay plan` lists them"
            ]
        );
    }

    #[test]
    fn many_kinds_of_host_stay_within_a_warning() {
        let changes: Vec<PortChange> = (0..40)
            .map(|i| {
                let mut c = change(
                    "tor",
                    &format!("p{i}"),
                    Some(&format!("Server/s{i}")),
                    set(),
                );
                c.claim = Some(format!("tenant-{i}/claim-{i}"));
                c
            })
            .collect();
        let hosts: BTreeMap<String, HostFacts> = (0..40)
            .map(|i| {
                (
                    format!("Server/s{i}"),
                    HostFacts {
                        phase: Some("Provisioned".into()),
                    },
                )
            })
            .collect();
        let w = warnings(&changes, &hosts);
        assert!(w[1].len() <= 256, "{}", w[1]);
        assert!(w[1].starts_with("patchbay: 40 hosts on those ports: 1 Provisioned of claim"));
        assert!(w[1].ends_with(", and 36 more"), "{}", w[1]);
    }
}

//! Whether each NIC of a host is plugged into the port its host says it is, from
//! what that port's Switch reads on the wire (`Switch.status.neighbors`, see
//! [`super::neighbors`]), and what the host controller does about it. Pure: table-
//! tested, no client.
//!
//! The verdict for one NIC ([`check`]) before anything is read:
//!
//! | the Switch of the declared port | verdict |
//! |---|---|
//! | reads no neighbours | [`Cabling::NoSource`]: nothing to check |
//! | names sources, not read yet | [`Cabling::NotYetRead`] |
//! | names sources never read successfully | [`Cabling::Unreadable`] |
//! | (the NIC declares no MAC) | [`Cabling::NoMac`] |
//!
//! Once read, from the evidence and whose it is. Evidence is the NIC named by LLDP
//! (a neighbour whose port id is the NIC's MAC, or whose port id is not a MAC and
//! whose chassis id is a MAC of this host) or its MAC among a port's learned MACs.
//! Evidence on another port counts only when that port does not serve another host
//! that is **allocated**: a tenant's OS can send any MAC or LLDP it likes, so what it
//! sends is reported, never used to park or hold anybody's port ([`Elsewhere`]). A
//! learned MAC an older entry of (the same switch learned it since on another port)
//! is stale and is no evidence at all (`patchbay_model::neighbors`). LLDP is
//! fresh by construction (an agent's neighbour expires after its hold time), so the
//! NIC's LLDP on another port outweighs its MAC learned on the declared one: the
//! cable moved and the switch has not aged the entry out. This is docs/cabling.md's
//! table (a test holds the two equal):
//!
//! | the declared port sees | elsewhere | verdict | Permissive | Permissive, host running | Strict |
//! |---|---|---|---|---|---|
//! | the NIC by LLDP | — | verified | moves | moves | moves |
//! | the NIC by LLDP | the NIC's MAC from an allocated host's port (spoofed) | verified | moves | moves | moves |
//! | the NIC's MAC learned | — | verified | moves | moves | moves |
//! | the NIC's MAC learned | the NIC by LLDP on another port (its cable moved) | mismatch | parked | reported | parked |
//! | the NIC's MAC learned | the NIC by LLDP from an allocated host's port (spoofed) | verified | moves | moves | moves |
//! | something else | — | mismatch | parked | reported | parked |
//! | nothing | the NIC's MAC on another port | mismatch | parked | reported | parked |
//! | nothing | the NIC's MAC from an allocated host's port (spoofed) | not seen | moves | moves | parked |
//! | nothing | the NIC by LLDP from an allocated host's port (spoofed) | not seen | moves | moves | parked |
//! | nothing | — | not seen | moves | moves | parked |
//!
//! ("host running": the host is Provisioned and the port already carries its
//! network; "parked" holds the phase too.)
//!
//! Two NICs of one host swapped between their ports are caught when the host's
//! agent sends MACs as port ids (lldpd's default) or the Switch learns MACs; with
//! interface names as port ids only the host is known, not which NIC.
//!
//! A NIC seen nowhere on the wire may still be placed by a Metal3 inspection
//! ([`inspected`], [`by_inspection`]); the switch side wins whenever it saw something.
//!
//! What happens to the port ([`action`]), by the policy (`cablingPolicy`, on the
//! Server or the port's ProviderSwitch; `Strict` when either says so):
//!
//! | verdict | Permissive (default) | Strict |
//! |---|---|---|
//! | Verified, NoSource | proceed | proceed |
//! | NotYetRead | wait: the port is left as it is, the phase held | wait |
//! | Unreadable | proceed | park, hold the phase |
//! | NotSeen, NoMac | proceed | park, hold the phase |
//! | Mismatch, the port about to change, or the host not Provisioned | park, hold the phase | park, hold the phase |
//! | Mismatch, a Provisioned host's port already on its target | report only | park, hold the phase |
//!
//! Parking is the clean target: the tenancy parking VLAN when tenancy is on (a VLAN
//! no namespace is granted), the device default otherwise. Permissive is the default
//! because a host that is off, or whose firmware speaks no LLDP while it PXE-boots,
//! shows nothing, and refusing it would stop every new rack until each host sent
//! LLDP; what is proven wrong (a neighbour that is not the NIC) is never moved. A
//! running host whose cable is found moved is reported, not cut off, unless the
//! policy says Strict: a false alarm (a hub, an agent that changed its ids) would
//! otherwise take a tenant's production host off the network.

use crate::api::{CablingPolicy, PortNeighborsStatus};

/// The verdict for one NIC.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cabling {
    /// The port's Switch names no neighbour source.
    NoSource,
    /// The port's Switch names sources that have not been read yet (the operator
    /// just started, the Switch is new): nothing moves until they are.
    NotYetRead,
    /// The port's Switch names sources that were never read successfully.
    Unreadable,
    /// The NIC declares no MAC to compare with.
    NoMac,
    /// The declared port sees nothing.
    NotSeen,
    /// The declared port sees this NIC.
    Verified,
    /// The declared port sees something else: what it sees, in words.
    Mismatch(String),
    /// A NIC with a MAC and no declared port, not linked: why, in words (seen
    /// nowhere, seen on several ports, seen only where it may not be linked from).
    Undiscovered(String),
}

/// Where a NIC's MAC is seen besides its declared port: one piece of evidence and
/// whose it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Elsewhere {
    /// `Switch ns/name port P (SwitchPort S)`, for messages.
    pub words: String,
    /// Named by LLDP there (a neighbour's chassis or port id), not only learned.
    pub by_lldp: bool,
    /// The allocated host the port serves, if it serves another host that is
    /// allocated: then it is reported, and not evidence.
    pub allocated_host: Option<String>,
}

impl Elsewhere {
    /// Whether it counts as evidence of where the NIC is.
    pub fn trusted(&self) -> bool {
        self.allocated_host.is_none()
    }

    fn sentence(&self) -> String {
        match &self.allocated_host {
            None => self.words.clone(),
            Some(host) => format!(
                "{} (a port of {host}, which is allocated: a tenant's OS may send any MAC or \
                 LLDP, so this is not taken as evidence)",
                self.words
            ),
        }
    }
}

/// What the host controller does with the port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Drive it as the phase says.
    Proceed,
    /// Park it (clean) and hold the phase.
    Park,
    /// Leave it as it is and report.
    ReportOnly,
    /// Leave it as it is and hold the phase until the neighbours are read.
    Wait,
}

/// Whether the Switch of a port reads its neighbours, and how far it got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reading {
    /// It names no source.
    None,
    /// It names sources, not read yet.
    NotYet,
    /// It names sources; none was read successfully yet, and the last read failed.
    Failed,
    /// Its status holds a successful read.
    Read,
}

/// Whether two MAC addresses are the same (case aside).
pub fn same_mac(a: &str, b: &str) -> bool {
    a.eq_ignore_ascii_case(b)
}

/// Whether `seen` names the NIC with MAC `mac` (of a host whose MACs are
/// `host_macs`) by LLDP: a port id that is a MAC names the NIC exactly; one that is
/// not (an interface name) leaves only the chassis id, which names the host.
pub fn named_by_lldp(seen: &PortNeighborsStatus, mac: &str, host_macs: &[&str]) -> bool {
    seen.lldp.iter().any(|n| {
        if n.port_id_subtype == "mac" {
            same_mac(&n.port_id, mac)
        } else {
            same_mac(&n.chassis_id, mac) || host_macs.iter().any(|m| same_mac(&n.chassis_id, m))
        }
    })
}

/// The verdict for a NIC with MAC `mac` (of a host whose MACs are `host_macs`),
/// declared on a port that sees `seen` (`None`: nothing), on a Switch whose reading
/// stands as `reading`; `elsewhere`: where else its MAC is seen, and whose (see the
/// module docs' table).
pub fn check(
    mac: Option<&str>,
    host_macs: &[&str],
    seen: Option<&PortNeighborsStatus>,
    reading: Reading,
    elsewhere: &[Elsewhere],
) -> Cabling {
    match reading {
        Reading::None => return Cabling::NoSource,
        Reading::NotYet => return Cabling::NotYetRead,
        Reading::Failed => return Cabling::Unreadable,
        Reading::Read => {}
    }
    let Some(mac) = mac else {
        return Cabling::NoMac;
    };
    let mut trusted = elsewhere.iter().filter(|e| e.trusted()).peekable();
    let Some(seen) = seen.filter(|s| !s.lldp.is_empty() || !s.macs.is_empty()) else {
        return if trusted.peek().is_some() {
            Cabling::Mismatch("nothing".into())
        } else {
            Cabling::NotSeen
        };
    };
    if named_by_lldp(seen, mac, host_macs) {
        return Cabling::Verified;
    }
    if seen.macs.iter().any(|m| same_mac(m, mac)) {
        // Learned here; named by LLDP on another port now: the entry here is what
        // the switch has not aged out since the cable moved.
        return match trusted.find(|e| e.by_lldp) {
            None => Cabling::Verified,
            Some(e) => Cabling::Mismatch(format!(
                "{} (the NIC's MAC is an entry the switch has not aged out: its LLDP is \
                 seen on {} now)",
                describe(seen),
                e.words
            )),
        };
    }
    Cabling::Mismatch(describe(seen))
}

/// What a port sees, in words: its LLDP neighbours, then its learned MACs.
pub fn describe(seen: &PortNeighborsStatus) -> String {
    let mut parts: Vec<String> = seen
        .lldp
        .iter()
        .map(|n| {
            let name = n
                .system_name
                .as_deref()
                .map(|s| format!(" ({s})"))
                .unwrap_or_default();
            format!("LLDP chassis {}{name} port {}", n.chassis_id, n.port_id)
        })
        .collect();
    if !seen.macs.is_empty() {
        let more = if seen.macs_truncated { " and more" } else { "" };
        parts.push(format!("MAC {}{more}", seen.macs.join(", ")));
    }
    parts.join("; ")
}

/// Whether a port that sees `mac` sees it (LLDP ids or learned MACs).
pub fn sees_mac(seen: &PortNeighborsStatus, mac: &str) -> bool {
    seen.lldp
        .iter()
        .any(|n| same_mac(&n.chassis_id, mac) || same_mac(&n.port_id, mac))
        || seen.macs.iter().any(|m| same_mac(m, mac))
}

/// What to do with a port whose NIC's verdict is `verdict`, under `policy`;
/// `running`: the host is Provisioned (a tenant's workload runs on it) and the port
/// already carries what the phase wants of it. Whatever is plugged into a mismatched
/// port must not land on the provisioning network, so only a running host's port is
/// ever left as it is.
pub fn action(verdict: &Cabling, policy: CablingPolicy, running: bool) -> Action {
    let strict = policy == CablingPolicy::Strict;
    match verdict {
        Cabling::NoSource | Cabling::Verified => Action::Proceed,
        Cabling::NotYetRead => Action::Wait,
        Cabling::NotSeen | Cabling::NoMac | Cabling::Unreadable if strict => Action::Park,
        Cabling::NotSeen | Cabling::NoMac | Cabling::Unreadable => Action::Proceed,
        Cabling::Mismatch(_) if strict || !running => Action::Park,
        Cabling::Mismatch(_) | Cabling::Undiscovered(_) => Action::ReportOnly,
    }
}

/// One NIC's cabling, as the host's status reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NicCabling {
    /// The NIC.
    pub nic: String,
    /// Its declared MAC.
    pub mac: Option<String>,
    /// The declared port, in words (`SwitchPort ns/name (Switch leaf1, swp1)`).
    pub port: String,
    /// The verdict.
    pub verdict: Cabling,
    /// What was done.
    pub action: Action,
    /// Where else the NIC's MAC is seen, when it is not verified by LLDP where
    /// declared.
    pub seen_on: Vec<Elsewhere>,
}

impl NicCabling {
    /// The sentence for this NIC, when it is not simply verified.
    fn sentence(&self) -> Option<String> {
        let mac = self.mac.as_deref().unwrap_or("no MAC");
        let nic = format!("NIC {} ({mac})", self.nic);
        let elsewhere = if self.seen_on.is_empty() {
            "the NIC is not seen on any port".to_owned()
        } else {
            let on: Vec<String> = self.seen_on.iter().map(Elsewhere::sentence).collect();
            format!("the NIC is seen on {}", on.join(", "))
        };
        let done = match self.action {
            Action::Park => "; the port is parked",
            Action::ReportOnly => "; the port is left as it is (cablingPolicy Permissive)",
            Action::Wait => "; the port is left as it is until then",
            Action::Proceed => "",
        };
        match &self.verdict {
            Cabling::NoSource | Cabling::Verified => None,
            Cabling::NotYetRead => Some(format!(
                "{nic}: waiting for the first read of what {} sees{done}",
                self.port
            )),
            Cabling::Unreadable => Some(format!(
                "{nic}: what {} sees could not be read (the Switch's NeighborsRead says why){done}",
                self.port
            )),
            Cabling::NoMac => Some(format!(
                "{nic} declares no MAC, so {} cannot be checked{done}",
                self.port
            )),
            Cabling::NotSeen => Some(format!(
                "{nic}: nothing is seen on {}; {elsewhere}{done}",
                self.port
            )),
            Cabling::Mismatch(sees) => Some(format!(
                "{nic} is declared on {}, which sees {sees}; {elsewhere}{done}",
                self.port
            )),
            Cabling::Undiscovered(why) => Some(format!("{nic} declares no port: {why}")),
        }
    }
}

/// The host's `CablingVerified` condition: (status, reason, message), or `None`
/// when no NIC's port is on a Switch that reads neighbours (nothing to say).
pub fn condition(nics: &[NicCabling]) -> Option<(super::conditions::Truth, &'static str, String)> {
    use super::conditions::Truth;
    let checked: Vec<&NicCabling> = nics
        .iter()
        .filter(|n| n.verdict != Cabling::NoSource)
        .collect();
    if checked.is_empty() {
        return None;
    }
    let sentences: Vec<String> = checked.iter().filter_map(|n| n.sentence()).collect();
    let mismatched = checked
        .iter()
        .any(|n| matches!(n.verdict, Cabling::Mismatch(_)));
    let undiscovered = checked
        .iter()
        .any(|n| matches!(n.verdict, Cabling::Undiscovered(_)));
    let unread = checked
        .iter()
        .any(|n| matches!(n.verdict, Cabling::NotYetRead | Cabling::Unreadable));
    Some(if mismatched {
        (Truth::False, "CablingMismatch", sentences.join("; "))
    } else if unread {
        (Truth::Unknown, "NotRead", sentences.join("; "))
    } else if undiscovered {
        (Truth::Unknown, "NotDiscovered", sentences.join("; "))
    } else if sentences.is_empty() {
        let n = checked.len();
        (
            Truth::True,
            "Verified",
            format!(
                "{n} NIC{} seen where declared",
                if n == 1 { "" } else { "s" }
            ),
        )
    } else {
        (Truth::Unknown, "NotSeen", sentences.join("; "))
    })
}

/// What a Metal3 inspection recorded of the NIC with MAC `mac` in a BareMetalHost's
/// `status.hardware` (`nics[].lldp`: `switchID`, `portID`, `switchSystemName`): the
/// switch's chassis id (normalised when a MAC), the port id, the switch's name.
pub fn inspected(
    hardware: &serde_json::Value,
    mac: &str,
) -> Option<(String, String, Option<String>)> {
    let nic = hardware["nics"]
        .as_array()?
        .iter()
        .find(|n| n["mac"].as_str().is_some_and(|m| same_mac(m, mac)))?;
    let lldp = &nic["lldp"];
    let switch = lldp["switchID"].as_str()?.trim();
    let port = lldp["portID"].as_str()?.trim();
    if switch.is_empty() || port.is_empty() {
        return None;
    }
    let switch =
        patchbay_model::neighbors::normalise_mac(switch).unwrap_or_else(|| switch.to_owned());
    let name = lldp["switchSystemName"].as_str().map(str::to_owned);
    Some((switch, port.to_owned(), name))
}

/// The verdict Metal3's inspection gives a NIC the switch side saw nowhere: the
/// inspection's switch and port (`inspected`) against the declared port's Switch
/// (its chassis id, as its own source read it) and device port. `None` when it
/// cannot say (no inspection data, the Switch's chassis id unknown). The switch side
/// wins whenever it has seen something (it is read continuously; an inspection is a
/// snapshot of the day the host was inspected), so this is asked only then.
pub fn by_inspection(
    inspected: Option<&(String, String, Option<String>)>,
    chassis: Option<&str>,
    device_port: &str,
) -> Option<Cabling> {
    let (switch, port, name) = inspected?;
    let chassis = chassis?;
    if same_mac(switch, chassis) && port == device_port {
        return Some(Cabling::Verified);
    }
    let name = name
        .as_deref()
        .map(|n| format!(" ({n})"))
        .unwrap_or_default();
    Some(Cabling::Mismatch(format!(
        "nothing now, and Metal3's inspection found the NIC on switch {switch}{name} port {port}"
    )))
}

/// A port where a MAC is seen, as discovery and verification weigh it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sighting {
    /// `Switch ns/name port P`, for messages.
    pub words: String,
    /// The Switch (`ns/name`) and its device port.
    pub at: (String, String),
    /// Named by LLDP there, not only learned.
    pub by_lldp: bool,
    /// The SwitchPort managing the device port (`namespace`, `name`); `None`: no
    /// SwitchPort manages it.
    pub port: Option<(String, String)>,
    /// The host that already has this port (declared on it, or driving it), and
    /// whether that host is allocated: a Server bound to a claim, a BareMetalHost
    /// BMO has provisioned (either runs its user's OS).
    pub taken_by: Option<(String, bool)>,
}

impl Sighting {
    /// As evidence for a NIC declared elsewhere.
    pub fn elsewhere(&self) -> Elsewhere {
        let managed = self
            .port
            .as_ref()
            .map(|(_, sp)| format!(" (SwitchPort {sp})"))
            .unwrap_or_default();
        Elsewhere {
            words: format!("{}{managed}", self.words),
            by_lldp: self.by_lldp,
            allocated_host: self
                .taken_by
                .as_ref()
                .filter(|(_, allocated)| *allocated)
                .map(|(host, _)| host.clone()),
        }
    }
}

/// Whether the host whose mark a port carries (`Server/<name>`,
/// `BareMetalHost/<namespace>/<name>`) is allocated, running its user's OS (which
/// may send any MAC or LLDP): a Server `claimed` says is bound to a claim; a
/// BareMetalHost whose BMO state (`host_state`) is `provisioned` or `externally
/// provisioned`. Anything else is not.
pub fn allocated_mark(
    mark: &str,
    claimed: impl Fn(&str) -> bool,
    host_state: impl Fn(&str, &str) -> Option<String>,
) -> bool {
    if let Some(name) = mark.strip_prefix("Server/") {
        return claimed(name);
    }
    mark.strip_prefix("BareMetalHost/")
        .and_then(|h| h.split_once('/'))
        .and_then(|(ns, name)| host_state(ns, name))
        .is_some_and(|state| {
            crate::decide::phases::metal3_goal(Some(&state))
                == Some(crate::api::ServerPhase::Provisioned)
        })
}

/// Where a NIC that declares only its MAC is plugged in, from every port its MAC is
/// seen on: the one SwitchPort, when it is seen on exactly one port and that port is
/// free; otherwise why not ([`Cabling::Undiscovered`]). `may_discover`: the host is
/// Available or Provisioning (an allocated host runs a tenant's OS, which can send
/// any MAC or LLDP it likes, so nothing is learnt from it).
pub fn discover(sightings: &[Sighting], may_discover: bool) -> Result<(String, String), Cabling> {
    let all = |s: &[Sighting]| {
        s.iter()
            .map(|s| s.words.clone())
            .collect::<Vec<_>>()
            .join(", ")
    };
    if !may_discover {
        return Err(Cabling::Undiscovered(
            "discovery runs only while the host is Available or Provisioning".into(),
        ));
    }
    match sightings {
        [] => Err(Cabling::Undiscovered(
            "its MAC is not seen on any port".into(),
        )),
        [one] => match (&one.port, &one.taken_by) {
            (None, _) => Err(Cabling::Undiscovered(format!(
                "its MAC is seen on {}, which no SwitchPort manages",
                one.words
            ))),
            (Some(_), Some((host, true))) => Err(Cabling::Undiscovered(format!(
                "its MAC is seen on {}, a port of {host}, which is allocated: a tenant's \
                 host may send any MAC, so nothing is linked from its ports",
                one.words
            ))),
            (Some(_), Some((host, false))) => Err(Cabling::Undiscovered(format!(
                "its MAC is seen on {}, which {host} is cabled to",
                one.words
            ))),
            (Some(port), None) => Ok(port.clone()),
        },
        several => Err(Cabling::Undiscovered(format!(
            "its MAC is seen on {} ports ({}): ambiguous, nothing is linked",
            several.len(),
            all(several)
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::LldpNeighborStatus;

    const A: &str = "52:54:00:0a:00:01";
    const A2: &str = "52:54:00:0a:00:02";
    const B: &str = "52:54:00:0b:00:01";

    fn lldp(chassis: &str, subtype: &str, port: &str) -> PortNeighborsStatus {
        PortNeighborsStatus {
            port: "swp1".into(),
            lldp: vec![LldpNeighborStatus {
                chassis_id: chassis.into(),
                chassis_id_subtype: "mac".into(),
                port_id: port.into(),
                port_id_subtype: subtype.into(),
                system_name: Some("server-b".into()),
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    fn macs(list: &[&str]) -> PortNeighborsStatus {
        PortNeighborsStatus {
            port: "swp1".into(),
            macs: list.iter().map(|m| (*m).to_owned()).collect(),
            ..Default::default()
        }
    }

    /// What, the NIC's MAC, what its port sees, how the Switch reads, the verdict.
    type Case = (
        &'static str,
        Option<&'static str>,
        Option<PortNeighborsStatus>,
        Reading,
        Cabling,
    );

    #[test]
    fn a_claimed_server_and_a_provisioned_bare_metal_host_are_allocated() {
        let claimed = |name: &str| name == "web-1";
        let state = |ns: &str, name: &str| match (ns, name) {
            ("hosts", "up") => Some("provisioned".to_owned()),
            ("hosts", "ext") => Some("externally provisioned".to_owned()),
            ("hosts", "new") => Some("provisioning".to_owned()),
            ("hosts", "gone") => Some("deprovisioning".to_owned()),
            _ => None,
        };
        for (mark, allocated) in [
            ("Server/web-1", true),
            ("Server/spare", false),
            ("BareMetalHost/hosts/up", true),
            ("BareMetalHost/hosts/ext", true),
            ("BareMetalHost/hosts/new", false),
            ("BareMetalHost/hosts/gone", false),
            ("BareMetalHost/hosts/unknown", false),
            ("BareMetalHost/no-name", false),
            ("someone-else", false),
        ] {
            assert_eq!(allocated_mark(mark, claimed, state), allocated, "{mark}");
        }
    }

    #[test]
    fn verdicts() {
        let host = [A, A2];
        let cases: Vec<Case> = vec![
            ("no source", Some(A), None, Reading::None, Cabling::NoSource),
            (
                "not read yet",
                Some(A),
                None,
                Reading::NotYet,
                Cabling::NotYetRead,
            ),
            (
                "never read",
                Some(A),
                None,
                Reading::Failed,
                Cabling::Unreadable,
            ),
            (
                "no MAC",
                None,
                Some(lldp(A, "mac", A)),
                Reading::Read,
                Cabling::NoMac,
            ),
            (
                "nothing seen",
                Some(A),
                None,
                Reading::Read,
                Cabling::NotSeen,
            ),
            (
                "an empty entry",
                Some(A),
                Some(macs(&[])),
                Reading::Read,
                Cabling::NotSeen,
            ),
            (
                "LLDP port id is the NIC",
                Some(A2),
                Some(lldp(A, "mac", A2)),
                Reading::Read,
                Cabling::Verified,
            ),
            (
                "chassis id is the NIC",
                Some(A),
                Some(lldp(A, "interfaceName", "eth0")),
                Reading::Read,
                Cabling::Verified,
            ),
            (
                "the MAC is learned there",
                Some(A),
                Some(macs(&[B, A])),
                Reading::Read,
                Cabling::Verified,
            ),
            (
                "upper case from the device",
                Some(A),
                Some(macs(&["52:54:00:0A:00:01"])),
                Reading::Read,
                Cabling::Verified,
            ),
            (
                "same host, port named not by MAC",
                Some(A2),
                Some(lldp(A, "interfaceName", "eth1")),
                Reading::Read,
                Cabling::Verified,
            ),
            (
                "the NIC's MAC as chassis, another NIC's as port id: the other NIC",
                Some(A),
                Some(lldp(A, "mac", A2)),
                Reading::Read,
                Cabling::Mismatch(format!("LLDP chassis {A} (server-b) port {A2}")),
            ),
            (
                "same host's chassis but another NIC's MAC as port id",
                Some(A2),
                Some(lldp(A, "mac", A)),
                Reading::Read,
                Cabling::Mismatch(format!("LLDP chassis {A} (server-b) port {A}")),
            ),
            (
                "another host",
                Some(A),
                Some(lldp(B, "mac", B)),
                Reading::Read,
                Cabling::Mismatch(format!("LLDP chassis {B} (server-b) port {B}")),
            ),
            (
                "another MAC",
                Some(A),
                Some(macs(&[B])),
                Reading::Read,
                Cabling::Mismatch(format!("MAC {B}")),
            ),
        ];
        for (what, mac, seen, source, want) in cases {
            assert_eq!(
                check(mac, &host, seen.as_ref(), source, &[]),
                want,
                "{what}"
            );
        }
    }

    fn elsewhere(by_lldp: bool, allocated: bool) -> Elsewhere {
        Elsewhere {
            words: "Switch t/leaf1 port swp6 (SwitchPort leaf1-f)".into(),
            by_lldp,
            allocated_host: allocated.then(|| "Server/tenant-web-1".to_owned()),
        }
    }

    /// One row of the module docs' (and docs/cabling.md's) verdict table: what the
    /// declared port sees, what is seen elsewhere, and the verdict, in the table's
    /// words.
    struct Row {
        here: &'static str,
        seen: Option<PortNeighborsStatus>,
        there: &'static str,
        elsewhere: Vec<Elsewhere>,
        verdict: &'static str,
    }

    fn rows() -> Vec<Row> {
        let nothing = || None;
        vec![
            Row {
                here: "the NIC by LLDP",
                seen: Some(lldp(A, "mac", A)),
                there: "—",
                elsewhere: vec![],
                verdict: "verified",
            },
            Row {
                here: "the NIC by LLDP",
                seen: Some(lldp(A, "mac", A)),
                there: "the NIC's MAC from an allocated host's port (spoofed)",
                elsewhere: vec![elsewhere(false, true)],
                verdict: "verified",
            },
            Row {
                here: "the NIC's MAC learned",
                seen: Some(macs(&[A])),
                there: "—",
                elsewhere: vec![],
                verdict: "verified",
            },
            Row {
                here: "the NIC's MAC learned",
                seen: Some(macs(&[A])),
                there: "the NIC by LLDP on another port (its cable moved)",
                elsewhere: vec![elsewhere(true, false)],
                verdict: "mismatch",
            },
            Row {
                here: "the NIC's MAC learned",
                seen: Some(macs(&[A])),
                there: "the NIC by LLDP from an allocated host's port (spoofed)",
                elsewhere: vec![elsewhere(true, true)],
                verdict: "verified",
            },
            Row {
                here: "something else",
                seen: Some(lldp(B, "mac", B)),
                there: "—",
                elsewhere: vec![],
                verdict: "mismatch",
            },
            Row {
                here: "nothing",
                seen: nothing(),
                there: "the NIC's MAC on another port",
                elsewhere: vec![elsewhere(false, false)],
                verdict: "mismatch",
            },
            Row {
                here: "nothing",
                seen: nothing(),
                there: "the NIC's MAC from an allocated host's port (spoofed)",
                elsewhere: vec![elsewhere(false, true)],
                verdict: "not seen",
            },
            Row {
                here: "nothing",
                seen: nothing(),
                there: "the NIC by LLDP from an allocated host's port (spoofed)",
                elsewhere: vec![elsewhere(true, true)],
                verdict: "not seen",
            },
            Row {
                here: "nothing",
                seen: nothing(),
                there: "—",
                elsewhere: vec![],
                verdict: "not seen",
            },
        ]
    }

    fn words(a: Action) -> &'static str {
        match a {
            Action::Proceed => "moves",
            Action::Park => "parked",
            Action::ReportOnly => "reported",
            Action::Wait => "waits",
        }
    }

    /// The table's rows as markdown, each verdict computed by [`check`] and each
    /// action by [`action`].
    fn table() -> Vec<String> {
        rows()
            .into_iter()
            .map(|r| {
                let v = check(
                    Some(A),
                    &[A, A2],
                    r.seen.as_ref(),
                    Reading::Read,
                    &r.elsewhere,
                );
                let word = match &v {
                    Cabling::Verified => "verified",
                    Cabling::Mismatch(_) => "mismatch",
                    Cabling::NotSeen => "not seen",
                    other => panic!("{other:?}"),
                };
                assert_eq!(word, r.verdict, "{} / {}", r.here, r.there);
                format!(
                    "| {} | {} | {} | {} | {} | {} |",
                    r.here,
                    r.there,
                    word,
                    words(action(&v, CablingPolicy::Permissive, false)),
                    words(action(&v, CablingPolicy::Permissive, true)),
                    words(action(&v, CablingPolicy::Strict, false)),
                )
            })
            .collect()
    }

    #[test]
    fn evidence_counts_by_whose_port_it_is_and_lldp_outweighs_an_old_learned_mac() {
        let table = table();
        // The module docs show this table, and so does docs/cabling.md.
        let module: Vec<String> = include_str!("cabling.rs")
            .lines()
            .filter_map(|l| l.strip_prefix("//! "))
            .filter(|l| {
                l.starts_with("| the NIC")
                    || l.starts_with("| nothing")
                    || l.starts_with("| something")
            })
            .map(str::to_owned)
            .collect();
        assert_eq!(module, table, "the module docs' table");
        let doc = include_str!("../../../docs/cabling.md");
        let page: Vec<String> = doc
            .lines()
            .filter(|l| {
                l.starts_with("| the NIC")
                    || l.starts_with("| nothing |")
                    || l.starts_with("| something else |")
            })
            .map(str::to_owned)
            .collect();
        assert_eq!(page, table, "docs/cabling.md's table");
        // The mismatch of a moved cable says where the NIC's LLDP is now.
        let v = check(
            Some(A),
            &[A],
            Some(&macs(&[A])),
            Reading::Read,
            &[elsewhere(true, false)],
        );
        let Cabling::Mismatch(sees) = v else {
            panic!("{v:?}")
        };
        assert!(
            sees.contains("its LLDP is seen on Switch t/leaf1 port swp6"),
            "{sees}"
        );
    }

    #[test]
    fn actions_by_policy_and_whether_the_host_runs() {
        use Action::*;
        use CablingPolicy::*;
        let mismatch = Cabling::Mismatch("x".into());
        let cases = [
            (Cabling::Verified, Strict, false, Proceed),
            (Cabling::NoSource, Strict, false, Proceed),
            (Cabling::NotYetRead, Permissive, false, Wait),
            (Cabling::Unreadable, Permissive, false, Proceed),
            (Cabling::Unreadable, Strict, false, Park),
            (Cabling::NotSeen, Permissive, false, Proceed),
            (Cabling::NotSeen, Strict, true, Park),
            (Cabling::NoMac, Strict, false, Park),
            (mismatch.clone(), Permissive, false, Park),
            (mismatch.clone(), Permissive, true, ReportOnly),
            (mismatch, Strict, true, Park),
        ];
        for (verdict, policy, on_target, want) in cases {
            assert_eq!(
                action(&verdict, policy, on_target),
                want,
                "{verdict:?} {policy:?} {on_target}"
            );
        }
    }

    #[test]
    fn metal3_inspection_speaks_only_when_the_switch_saw_nothing() {
        let hw = serde_json::json!({"nics": [
            {"mac": "52:54:00:0A:00:01", "lldp": {"switchID": "82:4A:B3:C4:7F:77",
                                                   "portID": "swp1", "switchSystemName": "leaf-7"}},
            {"mac": "52:54:00:0a:00:02"},
        ]});
        let seen = inspected(&hw, A).unwrap();
        assert_eq!(
            seen,
            (
                "82:4a:b3:c4:7f:77".into(),
                "swp1".into(),
                Some("leaf-7".into())
            )
        );
        assert_eq!(inspected(&hw, A2), None, "no LLDP recorded for it");
        assert_eq!(inspected(&serde_json::json!({}), A), None);
        let chassis = Some("82:4a:b3:c4:7f:77");
        assert_eq!(
            by_inspection(Some(&seen), chassis, "swp1"),
            Some(Cabling::Verified)
        );
        assert_eq!(
            by_inspection(Some(&seen), chassis, "swp2"),
            Some(Cabling::Mismatch(
                "nothing now, and Metal3's inspection found the NIC on switch \
                 82:4a:b3:c4:7f:77 (leaf-7) port swp1"
                    .into()
            ))
        );
        assert_eq!(
            by_inspection(Some(&seen), None, "swp1"),
            None,
            "the chassis is unknown"
        );
        assert_eq!(by_inspection(None, chassis, "swp1"), None);
    }

    #[test]
    fn discovery_links_only_one_free_port_of_a_host_that_may_be_discovered() {
        let at = |n: u8, port: Option<&str>, taken: Option<(&str, bool)>| Sighting {
            words: format!("Switch t/leaf1 port swp{n}"),
            at: ("t/leaf1".into(), format!("swp{n}")),
            by_lldp: false,
            port: port.map(|p| ("t".to_owned(), p.to_owned())),
            taken_by: taken.map(|(h, a)| (h.to_owned(), a)),
        };
        let free = at(1, Some("leaf1-a"), None);
        assert_eq!(
            discover(std::slice::from_ref(&free), true),
            Ok(("t".into(), "leaf1-a".into()))
        );
        let why = |r: Result<(String, String), Cabling>| match r {
            Err(Cabling::Undiscovered(w)) => w,
            other => panic!("{other:?}"),
        };
        assert!(
            why(discover(std::slice::from_ref(&free), false))
                .contains("only while the host is Available")
        );
        assert_eq!(why(discover(&[], true)), "its MAC is not seen on any port");
        assert_eq!(
            why(discover(
                &[free.clone(), at(2, Some("leaf1-b"), None)],
                true
            )),
            "its MAC is seen on 2 ports (Switch t/leaf1 port swp1, Switch t/leaf1 port swp2): \
             ambiguous, nothing is linked"
        );
        assert!(why(discover(&[at(3, None, None)], true)).contains("no SwitchPort manages"));
        assert!(
            why(discover(
                &[at(1, Some("leaf1-a"), Some(("Server/web-1", true)))],
                true
            ))
            .contains("a port of Server/web-1, which is allocated")
        );
        assert!(
            why(discover(
                &[at(1, Some("leaf1-a"), Some(("Server/spare", false)))],
                true
            ))
            .contains("which Server/spare is cabled to")
        );
    }

    #[test]
    fn the_condition_names_the_port_what_it_sees_and_where_the_nic_is() {
        use super::super::conditions::Truth;
        let nic = |verdict, action, seen_on: &[&str]| NicCabling {
            nic: "eth0".into(),
            mac: Some(A.into()),
            port: "SwitchPort t/leaf1-a (Switch leaf1, swp1)".into(),
            verdict,
            action,
            seen_on: seen_on
                .iter()
                .map(|s| Elsewhere {
                    words: (*s).to_owned(),
                    by_lldp: false,
                    allocated_host: None,
                })
                .collect(),
        };
        assert_eq!(
            condition(&[nic(Cabling::NoSource, Action::Proceed, &[])]),
            None
        );
        assert_eq!(
            condition(&[nic(Cabling::Verified, Action::Proceed, &[])]),
            Some((Truth::True, "Verified", "1 NIC seen where declared".into()))
        );
        let (truth, reason, message) = condition(&[
            nic(Cabling::Verified, Action::Proceed, &[]),
            nic(
                Cabling::Mismatch(format!("LLDP chassis {B} (server-b) port {B}")),
                Action::Park,
                &["Switch t/leaf1 port swp2 (SwitchPort leaf1-b)"],
            ),
        ])
        .unwrap();
        assert_eq!((truth, reason), (Truth::False, "CablingMismatch"));
        assert_eq!(
            message,
            format!(
                "NIC eth0 ({A}) is declared on SwitchPort t/leaf1-a (Switch leaf1, swp1), which \
                 sees LLDP chassis {B} (server-b) port {B}; the NIC is seen on Switch t/leaf1 \
                 port swp2 (SwitchPort leaf1-b); the port is parked"
            )
        );
        let (truth, reason, message) =
            condition(&[nic(Cabling::NotSeen, Action::Proceed, &[])]).unwrap();
        assert_eq!((truth, reason), (Truth::Unknown, "NotSeen"));
        assert!(
            message.contains("nothing is seen on SwitchPort t/leaf1-a"),
            "{message}"
        );
        // A tenant's spoofed MAC is reported, as what it is.
        let mut spoofed = nic(Cabling::NotSeen, Action::Proceed, &[]);
        spoofed.seen_on = vec![elsewhere(false, true)];
        let (_, reason, message) = condition(&[spoofed]).unwrap();
        assert_eq!(reason, "NotSeen");
        assert!(
            message.contains(
                "the NIC is seen on Switch t/leaf1 port swp6 (SwitchPort leaf1-f) (a port of \
                 Server/tenant-web-1, which is allocated: a tenant's OS may send any MAC or \
                 LLDP, so this is not taken as evidence)"
            ),
            "{message}"
        );
    }
}

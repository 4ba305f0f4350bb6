//! Where a SwitchPort stands on its device when its Switch port entry is renamed
//! (its `name`, the device port, changes): whether the port **moves**, which device
//! port its status shows meanwhile, and whether the device port it leaves is
//! cleaned. Pure, table-tested; the SwitchPort controller acts on the answer.
//!
//! A port carries something on the device port its status names (`status.devicePort`)
//! while it is Configuring, Active or Cleaning, or Idle and parked (tenancy on). When
//! its entry names another device port, what it carries must go with it: the old
//! device port is cleaned first (parked, with tenancy on), read back, then the new one
//! is configured, whatever the Switch's drift policy. Until the old device port reads
//! back clean, the status keeps naming it: an operator restarted mid-move still knows
//! where the tenant's VLANs are. Without the move the old device port would keep a
//! tenant's VLANs for whatever is cabled there next.
//!
//! The old device port is **not** cleaned when another entry of the same Switch now
//! names it and that entry's port writes it anyway (it carries a configuration, or is
//! parked): two entries swapped, or a port taking over a freed device port. A clean
//! racing that port's own change could undo it.
//!
//! A port whose new name is not a valid device port name keeps its old one in status
//! (the port fails on the name; fixing it moves the port then). A port that carries
//! nothing (Idle, tenancy off) just takes the new name.

use crate::api::PortState;

/// What the controller knows of a port and its entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MoveFacts<'a> {
    /// `status.state`.
    pub state: Option<PortState>,
    /// `status.devicePort`: where the port's last change went.
    pub shown: Option<&'a str>,
    /// The entry's device port name (absent: the entry is gone).
    pub entry: Option<&'a str>,
    /// Whether the entry's name is a valid device port name.
    pub entry_valid: bool,
    /// Whether an Idle port is parked (tenancy on).
    pub parking: bool,
    /// Whether another entry of the Switch names the shown device port, and that
    /// entry's port writes it (carries a configuration, or is parked).
    pub taken: bool,
}

/// The answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// The device port the status names now.
    pub shown: Option<String>,
    /// The move, when the port must move.
    pub moving: Option<Moving>,
}

/// A port moving to its entry's new device port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Moving {
    /// The device port it leaves, to clean (park) and read back before the new one
    /// is configured; `None` when another port's change writes it
    /// ([`MoveFacts::taken`]).
    pub clean: Option<String>,
}

/// Whether the port carries something on its shown device port.
fn carries(state: Option<PortState>, parking: bool) -> bool {
    match state {
        Some(PortState::Configuring | PortState::Active | PortState::Cleaning) => true,
        Some(PortState::Idle) => parking,
        None | Some(PortState::Deleting) => false,
    }
}

/// Where the port stands. See the module documentation.
pub fn place(f: &MoveFacts<'_>) -> Placement {
    let stay = |shown: Option<&str>| Placement {
        shown: shown.map(str::to_owned),
        moving: None,
    };
    let (Some(from), Some(to)) = (f.shown, f.entry) else {
        // No entry (the port is being removed): it stays where it was. First sight:
        // the entry's.
        return stay(f.entry.or(f.shown));
    };
    if from == to || !carries(f.state, f.parking) {
        return stay(Some(to));
    }
    if !f.entry_valid {
        return stay(Some(from));
    }
    Placement {
        shown: Some(from.to_owned()),
        moving: Some(Moving {
            clean: (!f.taken).then(|| from.to_owned()),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use PortState::*;

    fn facts(state: Option<PortState>, shown: Option<&'static str>) -> MoveFacts<'static> {
        MoveFacts {
            state,
            shown,
            entry: Some("Fa0/2"),
            entry_valid: true,
            parking: false,
            taken: false,
        }
    }

    fn moving(clean: Option<&str>) -> Placement {
        Placement {
            shown: Some("Fa0/1".into()),
            moving: Some(Moving {
                clean: clean.map(str::to_owned),
            }),
        }
    }

    fn at(port: &str) -> Placement {
        Placement {
            shown: Some(port.into()),
            moving: None,
        }
    }

    #[test]
    fn a_port_that_carries_something_moves_and_cleans_the_port_it_leaves() {
        for state in [Configuring, Active, Cleaning] {
            assert_eq!(
                place(&facts(Some(state), Some("Fa0/1"))),
                moving(Some("Fa0/1")),
                "{state}"
            );
        }
    }

    #[test]
    fn an_idle_port_moves_only_when_it_is_parked() {
        assert_eq!(place(&facts(Some(Idle), Some("Fa0/1"))), at("Fa0/2"));
        let parked = MoveFacts {
            parking: true,
            ..facts(Some(Idle), Some("Fa0/1"))
        };
        assert_eq!(place(&parked), moving(Some("Fa0/1")));
    }

    #[test]
    fn a_new_deleting_or_unmoved_port_takes_its_entry() {
        assert_eq!(place(&facts(None, None)), at("Fa0/2"));
        assert_eq!(place(&facts(None, Some("Fa0/1"))), at("Fa0/2"));
        assert_eq!(place(&facts(Some(Deleting), Some("Fa0/1"))), at("Fa0/2"));
        assert_eq!(place(&facts(Some(Active), Some("Fa0/2"))), at("Fa0/2"));
    }

    #[test]
    fn a_port_whose_entry_is_gone_stays_where_it_was() {
        let gone = MoveFacts {
            entry: None,
            ..facts(Some(Active), Some("Fa0/1"))
        };
        assert_eq!(place(&gone), at("Fa0/1"));
    }

    #[test]
    fn a_device_port_another_port_writes_is_left_to_it() {
        let swapped = MoveFacts {
            taken: true,
            ..facts(Some(Active), Some("Fa0/1"))
        };
        assert_eq!(place(&swapped), moving(None));
    }

    #[test]
    fn an_invalid_new_name_keeps_the_old_one_until_it_is_fixed() {
        let typo = MoveFacts {
            entry: Some("Fa 0 /2"),
            entry_valid: false,
            ..facts(Some(Active), Some("Fa0/1"))
        };
        assert_eq!(place(&typo), at("Fa0/1"));
        // Carrying nothing, there is nothing to lose track of.
        let idle = MoveFacts {
            state: Some(Idle),
            ..typo
        };
        assert_eq!(place(&idle), at("Fa 0 /2"));
    }
}

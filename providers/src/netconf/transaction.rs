//! The shape of one NETCONF transaction, chosen from what the device announced, and
//! which ports an `<rpc-error>` concerns. Pure; `super` runs the steps.
//!
//! With `:candidate`: lock the candidate → discard-changes (start from running) →
//! one edit-config for the whole batch → validate (when `:validate` is announced
//! and the device model does not turn it off) →
//! commit — with `:confirmed-commit` a confirmed commit with a timeout, then the
//! ports are read back from running and the commit is confirmed only if they match →
//! unlock. Any failure: discard-changes and unlock; an unconfirmed commit is rolled
//! back by the device when the session ends (RFC 6241 §8.4.1), so the session is
//! ended at once.
//!
//! A rollout wave's batch on a device that can hold a change ([`DeviceCapabilities::holds`]:
//! `:confirmed-commit:1.1`): the same, but the commit is a persisted confirmed commit
//! ([`Step::HeldCommit`], `<persist>` the wave's token) read back and *not*
//! confirmed: the rollout confirms it after the wave's gate (`<commit><persist-id>`)
//! or cancels it (`<cancel-commit>`), from a later session, and the device takes it
//! back by itself when neither comes in time. A failure after it cancels it
//! ([`Step::CancelHeld`]): the session's end does not.
//!
//! With `:writable-running` only: one edit-config of running, with
//! `rollback-on-error` when announced.

use crate::error::RpcError;

use super::rpc::{Datastore, DeviceCapabilities};

/// One step of a transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Lock the candidate.
    Lock,
    /// Discard uncommitted candidate changes.
    DiscardChanges,
    /// The batch's edit-config.
    Edit {
        /// Datastore edited.
        target: Datastore,
        /// Ask for rollback-on-error.
        rollback_on_error: bool,
    },
    /// Validate the candidate.
    Validate,
    /// Commit; `confirmed` asks for a confirmed commit.
    Commit {
        /// A confirmed commit (confirmed later by [`Step::Confirm`]).
        confirmed: bool,
    },
    /// Read the ports back from running and compare.
    ReadBack,
    /// Confirm the confirmed commit.
    Confirm,
    /// A persisted confirmed commit, held for a rollout's gate (never confirmed in
    /// this transaction).
    HeldCommit,
    /// Cancel the held commit (a failure after it).
    CancelHeld,
    /// Unlock the candidate.
    Unlock,
}

/// The steps for a device with `caps`, or why it cannot be configured. `validate`
/// is false for device models whose servers mishandle a separate `<validate>` (they
/// still validate at commit). `held`: a rollout wave's batch, held on the device
/// where it can be.
pub fn steps(caps: &DeviceCapabilities, validate: bool, held: bool) -> Result<Vec<Step>, String> {
    if caps.has("candidate") {
        let mut s = vec![
            Step::Lock,
            Step::DiscardChanges,
            Step::Edit {
                target: Datastore::Candidate,
                rollback_on_error: false,
            },
        ];
        if validate && caps.has("validate") {
            s.push(Step::Validate);
        }
        if held && caps.holds() {
            s.extend([Step::HeldCommit, Step::ReadBack]);
        } else if caps.has("confirmed-commit") {
            s.extend([
                Step::Commit { confirmed: true },
                Step::ReadBack,
                Step::Confirm,
            ]);
        } else {
            s.push(Step::Commit { confirmed: false });
        }
        s.push(Step::Unlock);
        Ok(s)
    } else if caps.has("writable-running") {
        Ok(vec![Step::Edit {
            target: Datastore::Running,
            rollback_on_error: caps.has("rollback-on-error"),
        }])
    } else {
        Err("the device announces neither :candidate nor :writable-running, so it cannot be configured over NETCONF".into())
    }
}

/// What to send after step `failed` of `steps` failed: discard-changes and unlock
/// once the lock was taken (the unlock itself failing needs nothing more).
pub fn cleanup(steps: &[Step], failed: usize) -> Vec<Step> {
    let locked = steps[..failed].contains(&Step::Lock);
    if !locked || steps[failed] == Step::Unlock {
        return Vec::new();
    }
    if steps[..failed].contains(&Step::HeldCommit) {
        // Held past the session: only a cancel takes it back.
        return vec![Step::CancelHeld, Step::DiscardChanges, Step::Unlock];
    }
    vec![Step::DiscardChanges, Step::Unlock]
}

/// Whether the transaction left a change held on the device (it ran
/// [`Step::HeldCommit`]).
pub fn holds(steps: &[Step]) -> bool {
    steps.contains(&Step::HeldCommit)
}

/// Whether the transaction has a commit awaiting confirmation after step `failed`
/// failed: the session must then end so the device rolls it back.
pub fn awaiting_confirmation(steps: &[Step], failed: usize) -> bool {
    steps[..failed].contains(&Step::Commit { confirmed: true })
        && !steps[..failed].contains(&Step::Confirm)
}

/// Whether an error of `step` may be passed over: a device that announces
/// `:validate` but answers `operation-not-supported` (the Juniper simulator) still
/// validates at commit.
pub fn tolerable(step: Step, error: &RpcError) -> bool {
    step == Step::Validate && error.tag == "operation-not-supported"
}

/// The ports (indices into `ports`) an error concerns: named by a key predicate of
/// its path (`port[name='eth1']`), needing a VLAN named by one (`vlan[id='1002']`),
/// or named as a word in its message (`… for interface ge-0/0/1.0`). Empty when it
/// names none (the error is the whole batch's).
pub fn attribute(
    error: &RpcError,
    named: impl Fn(&str) -> (Vec<String>, Vec<u16>),
    ports: &[(String, Vec<u16>)],
) -> Vec<usize> {
    let (by_path, vlans) = error.path.as_deref().map(&named).unwrap_or_default();
    let message = error.message.as_deref().unwrap_or_default();
    ports
        .iter()
        .enumerate()
        .filter(|(_, (name, needs))| {
            by_path.contains(name)
                || needs.iter().any(|v| vlans.contains(v))
                || mentions(message, name)
        })
        .map(|(i, _)| i)
        .collect()
}

/// Whether `name` appears in `text` as a whole port name (not as the start of a
/// longer one: `ge-0/0/1` is not in `ge-0/0/10`).
fn mentions(text: &str, name: &str) -> bool {
    let part = |c: char| c.is_ascii_alphanumeric() || matches!(c, '/' | '-' | '_' | ':');
    text.match_indices(name).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + name.len()..].chars().next();
        !before.is_some_and(part) && !after.is_some_and(part)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caps(names: &[&str]) -> DeviceCapabilities {
        DeviceCapabilities {
            uris: names
                .iter()
                .map(|n| format!("urn:ietf:params:netconf:capability:{n}:1.0"))
                .collect(),
            session_id: None,
        }
    }

    #[test]
    fn the_transaction_follows_the_announced_capabilities() {
        use Step::*;
        let cand = Edit {
            target: Datastore::Candidate,
            rollback_on_error: false,
        };
        type Row<'a> = (Vec<&'a str>, Result<Vec<Step>, ()>);
        let rows: Vec<Row> = vec![
            (
                vec![
                    "candidate",
                    "validate",
                    "confirmed-commit",
                    "writable-running",
                ],
                Ok(vec![
                    Lock,
                    DiscardChanges,
                    cand,
                    Validate,
                    Commit { confirmed: true },
                    ReadBack,
                    Confirm,
                    Unlock,
                ]),
            ),
            (
                vec!["candidate", "confirmed-commit"],
                Ok(vec![
                    Lock,
                    DiscardChanges,
                    cand,
                    Commit { confirmed: true },
                    ReadBack,
                    Confirm,
                    Unlock,
                ]),
            ),
            (
                vec!["candidate"],
                Ok(vec![
                    Lock,
                    DiscardChanges,
                    cand,
                    Commit { confirmed: false },
                    Unlock,
                ]),
            ),
            (
                vec!["writable-running", "rollback-on-error", "validate"],
                Ok(vec![Edit {
                    target: Datastore::Running,
                    rollback_on_error: true,
                }]),
            ),
            (
                vec!["writable-running"],
                Ok(vec![Edit {
                    target: Datastore::Running,
                    rollback_on_error: false,
                }]),
            ),
            (vec!["validate"], Err(())),
        ];
        for (announced, want) in rows {
            assert_eq!(
                steps(&caps(&announced), true, false).map_err(|_| ()),
                want,
                "{announced:?}"
            );
        }
        // A model that turns validate off keeps the rest.
        assert_eq!(
            steps(&caps(&["candidate", "validate"]), false, false).unwrap(),
            vec![
                Lock,
                DiscardChanges,
                cand,
                Commit { confirmed: false },
                Unlock
            ]
        );
    }

    #[test]
    fn a_failure_discards_and_unlocks_once_locked_and_ends_an_unconfirmed_commit() {
        let s = steps(
            &caps(&["candidate", "validate", "confirmed-commit"]),
            true,
            false,
        )
        .unwrap();
        let at = |step: Step| s.iter().position(|x| *x == step).unwrap();
        assert!(
            cleanup(&s, at(Step::Lock)).is_empty(),
            "the lock was refused"
        );
        assert_eq!(
            cleanup(&s, at(Step::Validate)),
            vec![Step::DiscardChanges, Step::Unlock]
        );
        assert!(cleanup(&s, at(Step::Unlock)).is_empty());
        assert!(!awaiting_confirmation(&s, at(Step::Validate)));
        assert!(!awaiting_confirmation(
            &s,
            at(Step::Commit { confirmed: true })
        ));
        assert!(awaiting_confirmation(&s, at(Step::ReadBack)));
        assert!(awaiting_confirmation(&s, at(Step::Confirm)));
        assert!(!awaiting_confirmation(&s, at(Step::Unlock)));
    }

    #[test]
    fn a_wave_is_held_only_where_the_device_can_hold_it_and_cancelled_on_failure() {
        let mut held_caps = caps(&["candidate", "validate"]);
        held_caps.uris.extend([
            "urn:ietf:params:netconf:capability:confirmed-commit:1.1".to_owned(),
            "urn:ietf:params:netconf:base:1.1".to_owned(),
        ]);
        let s = steps(&held_caps, true, true).unwrap();
        assert_eq!(
            s,
            vec![
                Step::Lock,
                Step::DiscardChanges,
                Step::Edit {
                    target: Datastore::Candidate,
                    rollback_on_error: false,
                },
                Step::Validate,
                Step::HeldCommit,
                Step::ReadBack,
                Step::Unlock,
            ]
        );
        assert!(holds(&s));
        let at = |step: Step| s.iter().position(|x| *x == step).unwrap();
        // Refused at the commit: nothing held, discard as ever; a read-back that
        // differs after it: cancelled (the session's end would not take it back).
        assert_eq!(
            cleanup(&s, at(Step::HeldCommit)),
            vec![Step::DiscardChanges, Step::Unlock]
        );
        assert_eq!(
            cleanup(&s, at(Step::ReadBack)),
            vec![Step::CancelHeld, Step::DiscardChanges, Step::Unlock]
        );
        assert!(!awaiting_confirmation(&s, at(Step::ReadBack)));
        // The same batch outside a rollout, and a wave on a device without 1.1:
        // committed and confirmed in the session, as any batch.
        assert!(!holds(&steps(&held_caps, true, false).unwrap()));
        let old = steps(&caps(&["candidate", "confirmed-commit"]), true, true).unwrap();
        assert!(!holds(&old) && old.contains(&Step::Confirm));
    }

    #[test]
    fn errors_are_attributed_by_path_vlan_or_message() {
        let named = |p: &str| {
            let ports: Vec<String> = if p.contains("eth2") {
                vec!["eth2".to_owned()]
            } else {
                vec![]
            };
            let vlans: Vec<u16> = if p.contains("1002") {
                vec![1002]
            } else {
                vec![]
            };
            (ports, vlans)
        };
        let ports = vec![
            ("eth1".to_owned(), vec![100]),
            ("eth2".to_owned(), vec![200]),
            ("eth3".to_owned(), vec![1002]),
            ("ge-0/0/1".to_owned(), vec![]),
            ("ge-0/0/10".to_owned(), vec![]),
        ];
        let err = |path: Option<&str>, message: &str| RpcError {
            path: path.map(str::to_owned),
            message: Some(message.to_owned()),
            ..RpcError::default()
        };
        assert_eq!(
            attribute(&err(Some("/port[name='eth2']"), "x"), named, &ports),
            vec![1]
        );
        assert_eq!(
            attribute(&err(Some("/vlan[id='1002']"), "x"), named, &ports),
            vec![2]
        );
        assert_eq!(
            attribute(
                &err(None, "No vlan matches vlan tag 5 for interface ge-0/0/1.0"),
                named,
                &ports
            ),
            vec![3]
        );
        assert!(attribute(&err(None, "syntax error"), named, &ports).is_empty());
        assert!(tolerable(
            Step::Validate,
            &RpcError {
                tag: "operation-not-supported".into(),
                ..RpcError::default()
            }
        ));
        assert!(!tolerable(
            Step::Commit { confirmed: false },
            &RpcError {
                tag: "operation-not-supported".into(),
                ..RpcError::default()
            }
        ));
    }
}

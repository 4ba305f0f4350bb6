//! Link aggregation: the changes held until every member of a new group can go in one
//! batch (the lobby), and when a group that stays incomplete is failed. The verdict is
//! `crate::decide::lobby`'s; this is its state.

use super::*;

/// Link-aggregation members' changes held until their group can go whole.
#[derive(Default)]
pub(super) struct Lobby {
    pub(super) groups: BTreeMap<u16, Held>,
}

pub(super) struct Held {
    /// When the group's first held change arrived.
    pub(super) since: tokio::time::Instant,
    /// When its latest held change arrived.
    pub(super) last: tokio::time::Instant,
    pub(super) jobs: Vec<Job>,
}

/// The group a job makes its port a member of.
pub(super) fn joining_group(job: &Job) -> Option<u16> {
    match job {
        Job::Apply {
            op: PortOperation::Set(d),
            ..
        } => d.lag.map(|l| l.group.get()),
        _ => None,
    }
}

impl Lobby {
    /// Takes a batch: holds every job that joins a group, returns the others.
    pub(super) fn admit(&mut self, batch: Vec<Job>) -> Vec<Job> {
        let now = tokio::time::Instant::now();
        let mut runnable = Vec::new();
        for job in batch {
            match joining_group(&job) {
                Some(g) => {
                    let held = self.groups.entry(g).or_insert_with(|| Held {
                        since: now,
                        last: now,
                        jobs: Vec::new(),
                    });
                    held.last = now;
                    held.jobs.push(job);
                }
                None => runnable.push(job),
            }
        }
        runnable
    }

    /// Releases the groups that may go now (their jobs, to run as one batch) and
    /// fails those held too long, naming their missing members.
    pub(super) fn release(&mut self, config: &WorkerConfig, shared: &Shared) -> Vec<Job> {
        if self.groups.is_empty() {
            return Vec::new();
        }
        let now = tokio::time::Instant::now();
        let tracked: Vec<DesiredPort> = shared
            .tracking
            .lock()
            .desired
            .values()
            .map(Tracked::desired)
            .collect();
        let mut runnable = Vec::new();
        let groups: Vec<u16> = self.groups.keys().copied().collect();
        for g in groups {
            let Some(held) = self.groups.get(&g) else {
                continue;
            };
            let established = tracked
                .iter()
                .any(|d| d.lag.map(|l| l.group.get()) == Some(g));
            let verdict = group_verdict(
                &missing(&held_targets(&held.jobs), &tracked),
                established,
                held.since,
                held.last,
                now,
                config.group_gather,
                config.group_hold,
            );
            match verdict {
                GroupVerdict::Hold => {}
                GroupVerdict::Go => {
                    if let Some(held) = self.groups.remove(&g) {
                        runnable.extend(held.jobs);
                    }
                }
                GroupVerdict::GiveUp(missing) => {
                    let Some(held) = self.groups.remove(&g) else {
                        continue;
                    };
                    tracing::warn!(group = g, missing = ?missing, "link-aggregation group incomplete; its changes were not sent");
                    for job in held.jobs {
                        if let Job::Apply { reply, .. } = job {
                            let _ = reply.send(Err(WorkerError::GroupIncomplete {
                                group: g,
                                missing: missing.clone(),
                                waited: now - held.since,
                            }));
                        }
                    }
                }
            }
        }
        runnable
    }

    /// When a held group's verdict may change by time alone: the end of its gather
    /// or of its hold.
    pub(super) fn next_deadline(&self, config: &WorkerConfig) -> Option<tokio::time::Instant> {
        let now = tokio::time::Instant::now();
        self.groups
            .values()
            .flat_map(|h| [h.last + config.group_gather, h.since + config.group_hold])
            .filter(|t| *t > now)
            .min()
    }
}

/// The desired states the held `jobs` set, in arrival order.
pub(super) fn held_targets(jobs: &[Job]) -> Vec<DesiredPort> {
    jobs.iter()
        .filter_map(|j| match j {
            Job::Apply {
                op: PortOperation::Set(d),
                ..
            } => Some(d.clone()),
            _ => None,
        })
        .collect()
}

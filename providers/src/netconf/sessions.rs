//! The sessions a NETCONF device is reached through: one kept open between batches
//! (with its slot and expiry), opened when none is, released after; the running
//! datastore read in the same session. Device I/O over SSH.

use super::*;

/// The session kept for the next call, until `until`; `id` tells a timer whether
/// the session it was set for is still the one kept.
pub(super) struct Kept {
    pub(super) session: Session,
    pub(super) until: tokio::time::Instant,
    pub(super) id: u64,
}

/// Where a switch's kept session waits (shared by the clones of one switch).
#[derive(Default)]
pub(super) struct KeptSlot {
    pub(super) kept: Option<Kept>,
    pub(super) next_id: u64,
}

impl NetconfSwitch {
    pub(super) async fn session(&self) -> Result<Session, DeviceError> {
        self.logins
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Session::open_heard(
            &self.target,
            self.options.command_timeout,
            self.journal.clone(),
            &self.heard,
        )
        .await
    }

    /// The kept session, if one is kept and its time is not up.
    pub(super) fn take_kept(&self) -> Option<Session> {
        let kept = self.kept.lock().kept.take()?;
        if kept.until > tokio::time::Instant::now() {
            return Some(kept.session);
        }
        tokio::spawn(kept.session.close());
        None
    }

    /// Ends a call's session: kept for the next call (see the module docs), or
    /// closed.
    pub(super) async fn release(&self, s: Session) {
        if self.options.keep_session.is_zero() {
            return s.close().await;
        }
        let kept = {
            let mut slot = self.kept.lock();
            if slot.kept.is_some() {
                Err(s)
            } else {
                slot.next_id += 1;
                let (id, until) = (
                    slot.next_id,
                    tokio::time::Instant::now() + self.options.keep_session,
                );
                slot.kept = Some(Kept {
                    session: s,
                    until,
                    id,
                });
                Ok((id, until))
            }
        };
        // Another call's session is kept already: this one is closed.
        let (id, until) = match kept {
            Ok(kept) => kept,
            Err(s) => return s.close().await,
        };
        let slot = self.kept.clone();
        tokio::spawn(async move {
            tokio::time::sleep_until(until).await;
            let expired = {
                let mut slot = slot.lock();
                match &slot.kept {
                    Some(k) if k.id == id => slot.kept.take(),
                    _ => None,
                }
            };
            if let Some(k) = expired {
                k.session.close().await;
            }
        });
    }

    /// A session and running's `<data>` (the first RPC of every call that
    /// reads): over the kept session when there is one and it still answers,
    /// else over a new one.
    pub(super) async fn session_and_running(&self) -> Result<(Session, Element), DeviceError> {
        if let Some(mut s) = self.take_kept() {
            match self.read_running(&mut s).await {
                Ok(data) => return Ok((s, data)),
                Err(e) => {
                    debug!(error = %e, "the kept NETCONF session no longer answers; logging in again");
                    s.abandon();
                }
            }
        }
        let mut s = self.session().await?;
        match self.read_running(&mut s).await {
            Ok(data) => Ok((s, data)),
            Err(e) => {
                s.close().await;
                Err(e)
            }
        }
    }

    /// Opens a session and returns what the device announced (capability URIs).
    pub async fn capabilities_announced(&self) -> Result<Vec<String>, DeviceError> {
        let s = self.session().await?;
        let uris = s.capabilities.uris.clone();
        s.close().await;
        Ok(uris)
    }

    /// The `<data>` of running: every port entry and VLAN the model knows.
    pub(super) async fn read_running(&self, s: &mut Session) -> Result<Element, DeviceError> {
        let op = Operation::GetConfig {
            source: Datastore::Running,
            filter: self.model.filter(),
        };
        let reply = s.rpc(&op).await?;
        if let Some(e) = reply.errors.first() {
            return Err(rejected(&op, Vec::new(), e.clone()));
        }
        Ok(reply.data.unwrap_or_default())
    }
}

//! When a device last sent anything: a clock each backend stamps whenever bytes or a
//! message arrive from its device (a prompt, a command's output, a NETCONF or OVSDB
//! message). The switch worker reads it when a session overruns the bound leader
//! election sets, to tell a device that said nothing (it is down) from one that is
//! answering and merely slow ([`crate::Device::heard`]). State only (one atomic),
//! no I/O.

use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The instant every clock counts from (the first use in this process).
fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// When the device last answered. Clones share one clock; a backend holds one and
/// hands it to each of its sessions.
#[derive(Debug, Clone, Default)]
pub struct Heard(Arc<AtomicU64>);

impl Heard {
    /// The device answered just now.
    pub fn stamp(&self) {
        // Nanoseconds since the epoch, plus one so that 0 means "never".
        let since = u64::try_from(epoch().elapsed().as_nanos()).unwrap_or(u64::MAX - 1) + 1;
        self.0.fetch_max(since, Ordering::Relaxed);
    }

    /// When the device last answered, if ever.
    pub fn last(&self) -> Option<Instant> {
        match self.0.load(Ordering::Relaxed) {
            0 => None,
            n => Some(epoch() + Duration::from_nanos(n - 1)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clock_tells_when_the_device_last_answered() {
        let heard = Heard::default();
        assert_eq!(heard.last(), None, "never answered");
        let before = Instant::now();
        heard.clone().stamp();
        let first = heard.last().expect("answered");
        assert!(first >= before - Duration::from_millis(1) && first <= Instant::now());
        std::thread::sleep(Duration::from_millis(2));
        heard.stamp();
        assert!(
            heard.last().expect("answered") > first,
            "a later answer moves it"
        );
    }
}

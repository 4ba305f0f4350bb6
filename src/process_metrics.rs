//! The standard `process_*` metrics every Prometheus client exports, under their
//! standard names: CPU time, resident and virtual memory, open and maximum file
//! descriptors, and start time. Read from `/proc/self` at each scrape (I/O, Linux
//! only; elsewhere the families are left out); the parsing is pure and tested on
//! captured text.
//!
//! As in Prometheus's own procfs library, `/proc`'s clock ticks are taken as 100 a
//! second (the kernel's fixed `USER_HZ` for user space).

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

/// Clock ticks a second in `/proc` (`USER_HZ`).
const TICKS: f64 = 100.0;

/// What one scrape reads of the process.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct ProcessSample {
    /// User and system CPU time, seconds.
    pub cpu_seconds: f64,
    /// Resident memory, bytes.
    pub resident_bytes: f64,
    /// Virtual memory, bytes.
    pub virtual_bytes: f64,
    /// Start time, seconds since the Unix epoch.
    pub start_time_seconds: f64,
    /// Open file descriptors.
    pub open_fds: f64,
    /// The soft limit on open file descriptors.
    pub max_fds: f64,
}

/// The fields of `/proc/self/stat` this needs: (CPU seconds, start time in seconds
/// after boot, virtual bytes, resident pages).
pub fn parse_stat(stat: &str) -> Option<(f64, f64, f64, f64)> {
    // The command name (field 2) is in parentheses and may hold spaces: the fields
    // after it start after the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (state): field n is f[n - 3].
    let num = |n: usize| f.get(n - 3)?.parse::<f64>().ok();
    let cpu = (num(14)? + num(15)?) / TICKS;
    Some((cpu, num(22)? / TICKS, num(23)?, num(24)?))
}

/// The boot time (`btime`, seconds since the epoch) from `/proc/stat`.
pub fn parse_boot_time(proc_stat: &str) -> Option<f64> {
    proc_stat
        .lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

/// The soft limit of "Max open files" from `/proc/self/limits` (`unlimited`: none).
pub fn parse_max_fds(limits: &str) -> Option<f64> {
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    let soft = line["Max open files".len()..].split_whitespace().next()?;
    soft.parse().ok()
}

/// Reads the process as it is now.
fn sample() -> Option<ProcessSample> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let (cpu_seconds, started_after_boot, virtual_bytes, resident_pages) = parse_stat(&stat)?;
    let boot = parse_boot_time(&std::fs::read_to_string("/proc/stat").ok()?)?;
    let open_fds = std::fs::read_dir("/proc/self/fd").ok()?.count() as f64;
    let max_fds = std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|l| parse_max_fds(&l))
        .unwrap_or(f64::INFINITY);
    Some(ProcessSample {
        cpu_seconds,
        resident_bytes: resident_pages * page_size(),
        virtual_bytes,
        start_time_seconds: boot + started_after_boot,
        open_fds,
        max_fds,
    })
}

/// The memory page size: the auxiliary vector's `AT_PAGESZ` (4096 if unreadable).
fn page_size() -> f64 {
    const AT_PAGESZ: u64 = 6;
    std::fs::read("/proc/self/auxv")
        .ok()
        .and_then(|auxv| {
            auxv.chunks_exact(16).find_map(|pair| {
                let key = u64::from_ne_bytes(pair[..8].try_into().ok()?);
                let value = u64::from_ne_bytes(pair[8..].try_into().ok()?);
                (key == AT_PAGESZ).then_some(value as f64)
            })
        })
        .unwrap_or(4096.0)
}

/// The `process_*` families, read at each scrape.
#[derive(Debug)]
pub struct ProcessCollector;

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some(s) = sample() else {
            return Ok(());
        };
        let cpu = ConstCounter::new(s.cpu_seconds);
        cpu.encode(encoder.encode_descriptor(
            "process_cpu_seconds",
            "Total user and system CPU time spent in seconds",
            None,
            cpu.metric_type(),
        )?)?;
        for (name, help, value) in [
            (
                "process_resident_memory_bytes",
                "Resident memory size in bytes",
                s.resident_bytes,
            ),
            (
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes",
                s.virtual_bytes,
            ),
            (
                "process_start_time_seconds",
                "Start time of the process since unix epoch in seconds",
                s.start_time_seconds,
            ),
            (
                "process_open_fds",
                "Number of open file descriptors",
                s.open_fds,
            ),
            (
                "process_max_fds",
                "Maximum number of open file descriptors",
                s.max_fds,
            ),
        ] {
            let gauge = ConstGauge::new(value);
            gauge.encode(encoder.encode_descriptor(name, help, None, gauge.metric_type())?)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_files_are_read_as_prometheus_reads_them() {
        // A process named with spaces and parentheses, as the kernel prints it.
        let stat = "4242 (patch (bay) x) S 1 4242 4242 0 -1 4194560 2375 0 0 0 \
                    150 25 0 0 20 0 9 0 123456 734003200 12345 18446744073709551615 \
                    1 1 0 0 0 0 0 4096 17638 0 0 0 17 1 0 0 0 0 0";
        let (cpu, started, virt, rss) = parse_stat(stat).unwrap();
        assert_eq!(cpu, 1.75, "150 + 25 ticks");
        assert_eq!(started, 1234.56);
        assert_eq!(virt, 734_003_200.0);
        assert_eq!(rss, 12_345.0);
        assert_eq!(parse_stat("garbage"), None);
        assert_eq!(
            parse_boot_time("cpu  1 2 3\nintr 5\nbtime 1800000000\nprocesses 9\n"),
            Some(1_800_000_000.0)
        );
        let limits = "Limit                     Soft Limit           Hard Limit           Units     \n\
                      Max cpu time              unlimited            unlimited            seconds   \n\
                      Max open files            1048576              1048576              files     \n";
        assert_eq!(parse_max_fds(limits), Some(1_048_576.0));
    }

    #[test]
    fn this_process_is_sampled() {
        let s = sample().expect("Linux /proc");
        assert!(s.resident_bytes > 1e6, "{s:?}");
        assert!(s.virtual_bytes >= s.resident_bytes, "{s:?}");
        assert!(s.open_fds >= 3.0 && s.max_fds >= s.open_fds, "{s:?}");
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        assert!(
            s.start_time_seconds <= now + 1.0 && s.start_time_seconds > now - 86_400.0,
            "{s:?}"
        );
    }
}

//! The tree keeps deciding apart from doing: no file under `src/decide/` may reach a
//! module or crate that does I/O. Read as text, so it runs without building
//! anything else; a line that names a forbidden path fails with the file and line.

use std::path::{Path, PathBuf};

/// Paths a pure module may not name (in a `use` or in code), and why.
const FORBIDDEN: &[(&str, &str)] = &[
    ("crate::controllers", "the controllers do Kubernetes I/O"),
    ("crate::worker", "the switch worker does device I/O"),
    ("crate::backends", "the backends build device sessions"),
    ("crate::lease::", "the elector does Lease I/O"),
    ("crate::serve", "the HTTP server"),
    ("crate::webhook", "the webhook's caches"),
    ("crate::metrics", "process state"),
    ("tokio::", "tasks, timers and locks"),
    ("kube::Api", "a kube client"),
    ("kube::Client", "a kube client"),
    ("kube::api::", "a kube client"),
    ("kube::runtime::reflector::Store", "a cache"),
    ("std::fs", "files"),
    ("std::net", "sockets"),
    ("std::process", "processes"),
    ("std::sync::Mutex", "locks"),
    ("Timestamp::now()", "the clock: the time is passed in"),
    ("Instant::now()", "the clock: the time is passed in"),
];

/// Paths inside a forbidden one that are plain values, not I/O: an IP address type
/// names `std::net` but opens no socket.
const VALUES: &[&str] = &[
    "std::net::Ipv4Addr",
    "std::net::Ipv6Addr",
    "std::net::IpAddr",
];

/// The forbidden paths `line` names (value paths excepted).
fn offends(line: &str) -> Vec<&'static (&'static str, &'static str)> {
    let line = VALUES
        .iter()
        .fold(line.to_owned(), |l, value| l.replace(value, ""));
    FORBIDDEN.iter().filter(|(p, _)| line.contains(p)).collect()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src/decide") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn the_decide_modules_reach_nothing_that_does_io() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/decide");
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    files.sort();
    assert!(files.len() >= 13, "src/decide holds {} files", files.len());
    let mut found = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).expect("read");
        // The tests below a module may use what they like (a clock, a tokio test).
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        let is_tests_file = file.file_name().is_some_and(|n| n == "tests.rs");
        if is_tests_file {
            continue;
        }
        for (n, line) in code.lines().enumerate() {
            let trimmed = line.trim_start();
            if trimmed.starts_with("//") {
                continue;
            }
            for (path, why) in offends(line) {
                found.push(format!(
                    "{}:{}: names {path} ({why}): {}",
                    file.strip_prefix(&root).unwrap_or(file).display(),
                    n + 1,
                    trimmed
                ));
            }
        }
    }
    assert!(
        found.is_empty(),
        "src/decide is pure; these lines reach I/O:\n{}",
        found.join("\n")
    );
}

/// The rule is not vacuous: a line like the ones it looks for is caught.
#[test]
fn the_rule_catches_a_client_import() {
    assert!(!offends("use kube::Api;").is_empty());
    assert!(!offends("use crate::worker::SwitchWorker;").is_empty());
    // A socket is I/O; an address is a value.
    assert!(!offends("use std::net::{Ipv4Addr, TcpStream};").is_empty());
    assert!(!offends("use std::net::TcpStream;").is_empty());
    assert!(offends("use std::net::Ipv4Addr;").is_empty());
}

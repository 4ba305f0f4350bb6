//! The fence between deciding and doing is Cargo's: the pure core
//! (`patchbay-core`: the API types and every decision) and the device vocabulary
//! (`patchbay-model`) are crates whose dependencies cannot reach a Kubernetes
//! client, a runtime, a socket or a process; what Cargo cannot keep out (the clock,
//! locks, threads, files) clippy refuses there (`core/clippy.toml`). These tests
//! hold that in place: each crate's direct dependencies are an allowed list, its
//! whole tree (`cargo tree`) holds none of the crates that do I/O, and the clippy
//! list names the clock and the locks.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The names in a Cargo.toml's `[dependencies]` table.
fn dependencies(manifest: &str) -> BTreeSet<String> {
    let text = std::fs::read_to_string(root().join(manifest)).expect("read manifest");
    let mut out = BTreeSet::new();
    let mut inside = false;
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            inside = line == "[dependencies]";
            continue;
        }
        if inside
            && !line.starts_with('#')
            && let Some((name, _)) = line.split_once('=')
        {
            // `serde.workspace = true` names serde.
            let name = name.trim();
            out.insert(name.strip_suffix(".workspace").unwrap_or(name).to_owned());
        }
    }
    out
}

/// Crates that do I/O or run tasks: none may be in a pure crate's tree.
const IO_CRATES: &[&str] = &[
    "tokio",
    "mio",
    "socket2",
    "hyper",
    "hyper-util",
    "kube-client",
    "kube-runtime",
    "tower",
    "russh",
    "rustls",
    "parking_lot",
    "patchbay-providers",
];

/// The packages in `package`'s normal dependency tree.
fn tree(package: &str) -> BTreeSet<String> {
    let out = Command::new(env!("CARGO"))
        .current_dir(root())
        .args([
            "tree",
            "--offline",
            "--locked",
            "-e",
            "normal",
            "--prefix",
            "none",
            "-p",
        ])
        .arg(package)
        .output()
        .expect("run cargo tree");
    assert!(
        out.status.success(),
        "cargo tree -p {package}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .collect()
}

fn check(package: &str, manifest: &str, allowed: &[&str]) {
    let direct = dependencies(manifest);
    let extra: Vec<_> = direct
        .iter()
        .filter(|d| !allowed.contains(&d.as_str()))
        .collect();
    assert!(
        extra.is_empty(),
        "{manifest} may depend only on {allowed:?}; it also names {extra:?}"
    );
    let all = tree(package);
    assert!(
        all.contains(package),
        "cargo tree printed nothing for {package}"
    );
    let io: Vec<_> = IO_CRATES.iter().filter(|c| all.contains(**c)).collect();
    assert!(
        io.is_empty(),
        "{package} reaches crates that do I/O: {io:?}"
    );
}

#[test]
fn the_pure_core_reaches_no_client_runtime_or_socket() {
    check(
        "patchbay-core",
        "core/Cargo.toml",
        &[
            "patchbay-model",
            "kube",
            "k8s-openapi",
            "jiff",
            "schemars",
            "serde",
            "serde_json",
            "serde_path_to_error",
            "sha2",
            "thiserror",
        ],
    );
    // `kube` there is the facade of kube-core and kube-derive, not kube.
    let manifest = std::fs::read_to_string(root().join("core/Cargo.toml")).expect("read");
    assert!(
        manifest.contains(r#"kube = { package = "patchbay-kube-facade""#),
        "core/Cargo.toml's kube must be patchbay-kube-facade"
    );
    check(
        "patchbay-kube-facade",
        "kube-facade/Cargo.toml",
        &["kube-core", "kube-derive"],
    );
}

#[test]
fn the_device_vocabulary_reaches_no_runtime_or_socket() {
    check(
        "patchbay-model",
        "model/Cargo.toml",
        &["serde", "serde_json", "serde-saphyr", "thiserror"],
    );
}

/// What Cargo cannot keep out is clippy's: the clock and the locks are on the
/// core's disallowed lists, and its lib allows them only under cfg(test).
#[test]
fn clippy_refuses_the_clock_and_locks_in_the_core() {
    let conf = std::fs::read_to_string(root().join("core/clippy.toml")).expect("core/clippy.toml");
    for path in [
        "std::time::Instant::now",
        "std::time::SystemTime::now",
        "jiff::Timestamp::now",
        "std::sync::Mutex",
        "std::sync::RwLock",
        "std::thread::spawn",
        "std::fs::File",
        "std::net::TcpStream",
    ] {
        assert!(
            conf.contains(&format!("path = \"{path}\"")),
            "core/clippy.toml does not disallow {path}"
        );
    }
    let lib = std::fs::read_to_string(root().join("core/src/lib.rs")).expect("core lib");
    assert!(
        lib.contains(
            "#![cfg_attr(test, allow(clippy::disallowed_methods, clippy::disallowed_types))]"
        ),
        "core/src/lib.rs may allow the disallowed only under cfg(test)"
    );
    assert!(
        !lib.contains("#![allow(clippy::disallowed"),
        "core/src/lib.rs must not allow the disallowed everywhere"
    );
}

/// The dependency reader is not vacuous.
#[test]
fn the_dependency_reader_reads_a_manifest() {
    let deps = dependencies("core/Cargo.toml");
    assert!(
        deps.contains("patchbay-model") && deps.contains("kube"),
        "{deps:?}"
    );
    assert!(!deps.contains("patchbay-core"), "{deps:?}");
}

//! The `make` targets install what they start: for every peer of the test bed
//! (`patchbay_testbed::peers::PEERS`) and every target that starts it (`make test`,
//! `make bench`, `make demo`), the target's dry run (`make -n -B`: every recipe,
//! installed or not, printed and not run) looks for it — so a fresh machine gets it
//! from the target itself, and a peer added to the test bed cannot be forgotten.

use std::process::Command;

use patchbay_testbed::peers::PEERS;

/// What `make -n -B target` would run.
fn dry_run(target: &str) -> String {
    let out = Command::new("make")
        .args(["-n", "-B", target])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("make runs");
    assert!(
        out.status.success(),
        "make -n -B {target}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn every_target_installs_each_peer_it_starts() {
    let mut missing = Vec::new();
    for target in ["test", "bench", "demo"] {
        let recipe = dry_run(target);
        for peer in PEERS.iter().filter(|p| p.needed_by.contains(&target)) {
            if !recipe.contains(peer.check) {
                missing.push(format!(
                    "make {target} starts {} ({}) but never looks for it (`{}`)",
                    peer.program, peer.from, peer.check
                ));
            }
        }
    }
    assert!(missing.is_empty(), "{}", missing.join("\n"));
}

/// The demo starts sshds in front of lldpd and FRR: `make demo` on a fresh machine
/// stopped at "starting sshd (apt-get install openssh-server)" until it installed
/// it (the check above, on the peer that was missing).
#[test]
fn the_demo_installs_sshd_and_its_help_says_what_it_runs() {
    assert!(dry_run("demo").contains("openssh-server"));
    let out = Command::new("make")
        .arg("help")
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("make runs");
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(!help.contains("fixture switch"), "{help}");
    for part in [
        "simulated switches",
        "Open vSwitch",
        "LLDP",
        "FRR",
        "operator",
    ] {
        assert!(help.contains(part), "make help names {part}:\n{help}");
    }
}

//! Golden files of the CLI dialects, no simulator needed: tests/data/<dialect>/ holds
//! outputs captured from the fake-switches simulators by tests/ssh_backend.rs
//! (`PATCHBAY_UPDATE_GOLDEN=1`). Here every dialect must
//! - parse each captured `<state>.show` into exactly the state it was captured for;
//! - render, from the captured clean port, exactly the captured `<state>.commands`;
//! - recognise the captured `error.txt` as an error, and the clean show as none.

#[path = "support/ssh_cases.rs"]
mod ssh_cases;

use patchbay_providers::cli::Aggregates;
use patchbay_providers::{DesiredPort, diff};
use ssh_cases::*;

fn read(os: &str, file: &str) -> String {
    let path = golden_dir(os).join(file);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn every_dialect_parses_and_renders_its_golden_files() {
    for c in &DIALECTS {
        let d = dialect_of(c.os);
        let port = port(c.ports[0]);
        let clean = d.read(&port, &read(c.os, "clean.show"));
        assert!(
            diff(&DesiredPort::clean(port.clone()), &clean.observed).is_empty(),
            "{}: clean.show parses as {clean:?}",
            d.name
        );
        for (name, desired) in states(c.os, c.ports[0]) {
            let observed = d.read(&port, &read(c.os, &format!("{name}.show")));
            assert!(
                diff(&desired, &observed.observed).is_empty(),
                "{} {name}: parsed {observed:?}, captured for {desired:?}",
                d.name
            );
            let none = Aggregates::new();
            let plan = d.plan(&clean, &none, &desired);
            let mut rendered = d.script(&[plan], true).join("\n");
            rendered.push('\n');
            assert_eq!(
                rendered,
                read(c.os, &format!("{name}.commands")),
                "{} {name}: rendering differs from the golden commands",
                d.name
            );
            // A port that already matches needs nothing.
            assert!(
                d.plan(&observed, &none, &desired).is_empty(),
                "{} {name}",
                d.name
            );
        }
        if c.missing_port.is_some() {
            let error = read(c.os, "error.txt");
            assert!(d.error_in(&error).is_some(), "{}: {error:?}", d.name);
        }
        assert_eq!(d.error_in(&read(c.os, "clean.show")), None, "{}", d.name);
    }
}

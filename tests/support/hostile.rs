//! The hostile corpus: strings that must never reach a device (shared by
//! tests/validation.rs and tests/device_cli.rs).

#![allow(dead_code)]

/// Strings that must never reach a device CLI.
pub fn hostile_strings() -> Vec<(&'static str, String)> {
    vec![
        ("newline", "uplink\nreload".into()),
        ("carriage return", "uplink\r".into()),
        ("semicolon", "a;reload".into()),
        ("pipe", "a | include".into()),
        ("bang (IOS comment)", "a!b".into()),
        ("hash", "a#b".into()),
        ("question mark (CLI help)", "a?".into()),
        ("BEL control", "a\u{7}b".into()),
        ("escape sequence", "a\u{1b}[2J".into()),
        ("NUL", "a\u{0}b".into()),
        ("non-ASCII letter", "réseau".into()),
        ("full-width letter", "ｆｏｏ".into()),
        ("XML metacharacter", "a<b>".into()),
        ("300 characters", "a".repeat(300)),
    ]
}

//! What the backends have built in, as names: the NETCONF device models (their
//! files are `providers/models/*.yaml`, loaded by the NETCONF backend). Validation
//! checks a ProviderSwitch's `options.model` against this list without loading a
//! backend; `providers/src/netconf/model.rs` tests that the list and the embedded
//! files agree.

/// Every built-in NETCONF device model: (name, os), in the order the backend loads
/// them (the first of an os is its default).
pub const NETCONF_MODELS: &[(&str, &str)] = &[
    ("junos-els", "junos"),
    ("junos-port-mode", "junos"),
    ("patchbay-ports", "yang"),
];

/// Whether a NETCONF model exists for `os` (named `name`, or any).
pub fn netconf_model_exists(os: &str, name: Option<&str>) -> bool {
    NETCONF_MODELS
        .iter()
        .any(|(n, o)| *o == os && name.is_none_or(|want| *n == want))
}

/// Every NETCONF model's name and os, for messages: `junos-els (os junos)`.
pub fn netconf_model_names() -> Vec<String> {
    NETCONF_MODELS
        .iter()
        .map(|(n, o)| format!("{n} (os {o})"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_model_exists_for_its_os_only() {
        assert!(netconf_model_exists("junos", None));
        assert!(netconf_model_exists("junos", Some("junos-port-mode")));
        assert!(!netconf_model_exists("yang", Some("junos-els")));
        assert!(!netconf_model_exists("eos", None));
        assert_eq!(netconf_model_names()[0], "junos-els (os junos)");
    }
}

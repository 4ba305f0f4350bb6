//! The committed CRDs in `crds/` are exactly what the Rust types generate, and they
//! carry what users rely on: a description on every field (`kubectl explain`),
//! printer columns, short names, the `patchbay` category, the status subresource.
//!
//! Regenerate after changing a type: `make crds`.

use std::path::Path;

use patchbay::api::{crd_yaml, crds};
use serde_json::Value;

#[test]
fn committed_crds_match_the_types() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("crds");
    let mut stale = Vec::new();
    for (file, crd) in crds() {
        let committed = std::fs::read_to_string(dir.join(file)).unwrap_or_default();
        if committed != crd_yaml(&crd) {
            stale.push(file);
        }
    }
    let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
        .expect("crds/ exists")
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    on_disk.sort();
    let mut expected: Vec<String> = crds().iter().map(|(f, _)| f.to_string()).collect();
    expected.push("Kustomization".into());
    expected.sort();
    assert_eq!(
        on_disk, expected,
        "crds/ holds exactly one file per kind and their kustomization"
    );
    if std::fs::read_to_string(dir.join("Kustomization")).unwrap_or_default()
        != patchbay::api::crds_kustomization()
    {
        stale.push("Kustomization");
    }
    assert!(
        stale.is_empty(),
        "crds/ is stale for {stale:?}: run `make crds` and commit the result"
    );
}

/// Every property at every depth has a non-empty description.
fn undocumented(schema: &Value, path: &str, out: &mut Vec<String>) {
    if let Some(props) = schema.get("properties").and_then(Value::as_object) {
        for (name, prop) in props {
            let p = format!("{path}.{name}");
            let has_doc = prop
                .get("description")
                .and_then(Value::as_str)
                .is_some_and(|d| !d.trim().is_empty());
            // apiVersion/kind/metadata are documented by Kubernetes itself.
            if !has_doc && !matches!(name.as_str(), "apiVersion" | "kind" | "metadata") {
                out.push(p.clone());
            }
            undocumented(prop, &p, out);
        }
    }
    if let Some(items) = schema.get("items") {
        undocumented(items, &format!("{path}[]"), out);
    }
    if let Some(add) = schema.get("additionalProperties") {
        undocumented(add, &format!("{path}{{}}"), out);
    }
}

#[test]
fn every_field_has_a_description() {
    let mut missing = Vec::new();
    for (_, crd) in crds() {
        let json = serde_json::to_value(&crd).unwrap();
        let schema = &json["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
        undocumented(schema, crd.spec.names.kind.as_str(), &mut missing);
    }
    assert!(
        missing.is_empty(),
        "fields without a description: {missing:#?}"
    );
}

#[test]
fn switchport_prints_state_switch_port_configuration_host_reason_age() {
    let (_, crd) = crds()
        .into_iter()
        .find(|(_, c)| c.spec.names.kind == "SwitchPort")
        .unwrap();
    let version = &crd.spec.versions[0];
    let columns: Vec<String> = version
        .additional_printer_columns
        .as_ref()
        .unwrap()
        .iter()
        .map(|c| c.name.to_uppercase())
        .collect();
    assert_eq!(
        columns,
        [
            "STATE",
            "SWITCH",
            "PORT",
            "CONFIGURATION",
            "HOST",
            "REASON",
            "AGE"
        ]
    );
    assert!(version.subresources.as_ref().unwrap().status.is_some());
}

#[test]
fn every_kind_is_in_the_patchbay_category_with_a_short_name() {
    for (_, crd) in crds() {
        let names = &crd.spec.names;
        assert_eq!(crd.spec.group, "patchbay.dev");
        assert_eq!(crd.spec.versions[0].name, "v1alpha1");
        assert_eq!(
            names.categories.as_deref(),
            Some(&["patchbay".to_string()][..]),
            "{}",
            names.kind
        );
        assert!(
            names.short_names.as_ref().is_some_and(|s| !s.is_empty()),
            "{} has no short name",
            names.kind
        );
    }
    let scopes: Vec<(String, String)> = crds()
        .into_iter()
        .map(|(_, c)| (c.spec.names.kind, c.spec.scope))
        .collect();
    assert!(scopes.contains(&("Server".into(), "Cluster".into())));
    assert!(scopes.contains(&("SwitchPort".into(), "Namespaced".into())));
}

#[test]
fn the_seed_fields_are_spelled_as_the_seed_spells_them() {
    let json = |kind: &str| {
        let (_, crd) = crds()
            .into_iter()
            .find(|(_, c)| c.spec.names.kind == kind)
            .unwrap();
        serde_json::to_value(&crd.spec.versions[0].schema).unwrap()
    };
    let spc = json("SwitchPortConfiguration");
    let spec = &spc["openAPIV3Schema"]["properties"]["spec"]["properties"];
    for field in [
        "acl",
        "untaggedVLAN",
        "vlans",
        "disabled",
        "mtu",
        "description",
        "linkAggregation",
    ] {
        assert!(
            spec.get(field).is_some(),
            "SwitchPortConfiguration.spec.{field}"
        );
    }
    let sw = json("Switch");
    let port = &sw["openAPIV3Schema"]["properties"]["spec"]["properties"]["ports"]["additionalProperties"]
        ["properties"];
    for field in ["name", "disabled", "vlanRange", "trunkDisable"] {
        assert!(port.get(field).is_some(), "Switch.spec.ports{{}}.{field}");
    }
    let snp = json("SmartNicPort");
    assert!(snp["openAPIV3Schema"]["properties"]["spec"]["properties"]["nextPortRef"].is_object());
    let snc = json("SmartNicConfiguration");
    assert!(
        snc["openAPIV3Schema"]["properties"]["spec"]["properties"]["nextConfigurationRef"]
            .is_object()
    );
    let srv = json("Server");
    let srv_spec = &srv["openAPIV3Schema"]["properties"]["spec"]["properties"];
    for field in ["bmc", "bootMac", "site", "nics"] {
        assert!(srv_spec.get(field).is_some(), "Server.spec.{field}");
    }
}

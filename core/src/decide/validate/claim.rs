//! ServerClaims and the hardware of Servers: checked field by field and turned into
//! what the allocator works with ([`ClaimRequest`], [`Candidate`]). Pure.

use std::collections::{BTreeMap, BTreeSet};

use patchbay_model::values::excerpt;

use super::{Errors, ValidationErrors, mac, object_name, optional_namespace, token};
use crate::api::quantity::parse_quantity;
use crate::api::{ConfigurationKind, NetworkConfiguration, Server, ServerClaimSpec};
use crate::decide::allocation::{
    Binding, Candidate, CandidateNic, ClaimKey, ClaimRequest, NicNeed, RoleRequest,
};

/// The default role → inventory groups (kubespray's group names).
pub fn default_groups(role: &str) -> Vec<String> {
    match role {
        "control-plane" => vec!["kube_control_plane".into(), "etcd".into()],
        "worker" => vec!["kube_node".into()],
        other => vec![other.replace(['-', '.'], "_")],
    }
}

/// An inventory group name: letters, digits and `_`, not starting with a digit
/// (Ansible's rule; anything else could break the `hosts.ini` layout).
fn group_name(errors: &mut Errors, path: &str, g: &str) {
    let ok = !g.is_empty()
        && g.len() <= 63
        && g.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        && !g.starts_with(|c: char| c.is_ascii_digit());
    if !ok {
        errors.push(
            path,
            format!(
                "{:?} is not an inventory group name (letters, digits and '_', not starting \
                 with a digit)",
                excerpt(g)
            ),
        );
    }
}

fn nic_needs(
    errors: &mut Errors,
    path: &str,
    entries: &[NetworkConfiguration],
    out: &mut Vec<NicNeed>,
) {
    for (i, e) in entries.iter().enumerate() {
        let p = format!("{path}[{i}]");
        let r = &e.configuration_ref;
        object_name(errors, &format!("{p}.configurationRef.name"), &r.name);
        optional_namespace(
            errors,
            &format!("{p}.configurationRef.namespace"),
            r.namespace.as_ref(),
        );
        if let Some(n) = &e.nic_hint.name {
            token(errors, &format!("{p}.nicHint.name"), n);
        }
        let snic = r.kind == ConfigurationKind::SmartNicConfiguration;
        if snic != e.nic_hint.smart_nic {
            errors.push(
                format!("{p}.nicHint.smartNIC"),
                if snic {
                    "a SmartNicConfiguration goes on a NIC cabled to a SmartNicPort; set \
                     smartNIC: true"
                } else {
                    "a SwitchPortConfiguration goes on a NIC cabled to a SwitchPort; set \
                     smartNIC: false or use a SmartNicConfiguration"
                },
            );
        }
        out.push(NicNeed {
            path: p,
            kind: r.kind,
            nic_name: e.nic_hint.name.clone(),
            smart_nic: e.nic_hint.smart_nic,
        });
    }
}

/// Checks a claim's spec and turns it into the allocator's request. `committed` is
/// the last complete allocation (from the status).
pub fn claim_request(
    key: ClaimKey,
    uid: String,
    created: String,
    spec: &ServerClaimSpec,
    committed: BTreeSet<String>,
) -> Result<ClaimRequest, ValidationErrors> {
    let mut errors = Errors::default();
    token(&mut errors, "spec.site", &spec.site);
    let mut shared = Vec::new();
    nic_needs(
        &mut errors,
        "spec.networkConfiguration",
        &spec.network_configuration,
        &mut shared,
    );
    let mut roles = Vec::new();
    let mut names: BTreeSet<&str> = BTreeSet::new();
    let mut pinned: BTreeMap<String, String> = BTreeMap::new();
    for (i, r) in spec.roles.iter().enumerate() {
        let path = format!("spec.roles[{i}]");
        token(&mut errors, &format!("{path}.name"), &r.name);
        if !names.insert(r.name.as_str()) {
            errors.push(
                format!("{path}.name"),
                format!("role {:?} is listed twice", excerpt(&r.name)),
            );
        }
        if r.count < 0 {
            errors.push(
                format!("{path}.count"),
                format!("{} is negative; a role needs 0 or more servers", r.count),
            );
        }
        let req = r.requirements.clone().unwrap_or_default();
        if let Some(n) = req.min_cpus
            && n < 0
        {
            errors.push(
                format!("{path}.requirements.minCpus"),
                format!("{n} is negative"),
            );
        }
        let min_memory = req.min_memory.as_ref().and_then(|q| {
            parse_quantity(&q.0)
                .map_err(|e| errors.push(format!("{path}.requirements.minMemory"), e))
                .ok()
        });
        let mut pins = BTreeSet::new();
        for (j, m) in req.mac_addresses.iter().enumerate() {
            let p = format!("{path}.requirements.macAddresses[{j}]");
            mac(&mut errors, &p, m);
            let m = m.to_ascii_lowercase();
            match pinned.get(&m) {
                Some(other) if *other != r.name => errors.push(
                    p,
                    format!("{m} is already pinned to role {other:?}; a Server has one role"),
                ),
                Some(_) => errors.push(p, format!("{m} is listed twice")),
                None => {
                    pinned.insert(m.clone(), r.name.clone());
                }
            }
            pins.insert(m);
        }
        if r.count >= 0 && pins.len() > r.count as usize {
            errors.push(
                format!("{path}.requirements.macAddresses"),
                format!(
                    "{} pinned MACs but count is {}; each pin takes one of the role's servers",
                    pins.len(),
                    r.count
                ),
            );
        }
        if let Some(b) = &r.bgp {
            for (field, why) in crate::decide::bgp::role_fields(&format!("{path}.bgp"), b) {
                errors.push(field, why);
            }
        }
        let mut nics = shared.clone();
        nic_needs(
            &mut errors,
            &format!("{path}.networkConfiguration"),
            &r.network_configuration,
            &mut nics,
        );
        roles.push(RoleRequest {
            name: r.name.clone(),
            count: r.count.max(0) as usize,
            min_cpus: req.min_cpus.map(|n| n.max(0) as u64),
            min_memory,
            pins,
            nics,
        });
    }
    if let Some(inv) = &spec.inventory {
        for (role, groups) in &inv.groups {
            let path = format!("spec.inventory.groups.{role}");
            if !names.contains(role.as_str()) {
                errors.push(
                    path.clone(),
                    format!("no role {:?} in spec.roles", excerpt(role)),
                );
            }
            for (k, g) in groups.iter().enumerate() {
                group_name(&mut errors, &format!("{path}[{k}]"), g);
            }
        }
    }
    errors.finish(|| ClaimRequest {
        key,
        uid,
        created,
        site: spec.site.clone(),
        roles,
        committed,
    })
}

/// Checks a claim's spec (for `patchbay validate`).
pub fn validate_claim(spec: &ServerClaimSpec) -> Result<(), ValidationErrors> {
    claim_request(
        ClaimKey {
            namespace: String::new(),
            name: String::new(),
        },
        String::new(),
        String::new(),
        spec,
        BTreeSet::new(),
    )
    .map(|_| ())
}

/// Hardware a BareMetalHost's inspection found (`status.hardware`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct InspectedHardware {
    /// `status.hardware.cpu.count`.
    pub cpus: Option<u64>,
    /// `status.hardware.ramMebibytes`, in bytes.
    pub memory: Option<u128>,
}

/// The hardware a Metal3 BareMetalHost's inspection found, from its `status`.
pub fn inspected_hardware(bmh_status: Option<&serde_json::Value>) -> InspectedHardware {
    let hw = bmh_status.and_then(|s| s.get("hardware"));
    InspectedHardware {
        cpus: hw
            .and_then(|h| h.pointer("/cpu/count"))
            .and_then(serde_json::Value::as_u64)
            .filter(|n| *n > 0),
        memory: hw
            .and_then(|h| h.get("ramMebibytes"))
            .and_then(serde_json::Value::as_u64)
            .map(|mib| u128::from(mib) << 20),
    }
}

/// The address a BareMetalHost's inspection found on the NIC with MAC `mac`, if it
/// is a plain address (anything else is not written into an inventory).
pub fn inspected_address(bmh_status: Option<&serde_json::Value>, mac: &str) -> Option<String> {
    let nics = bmh_status?.pointer("/hardware/nics")?.as_array()?;
    nics.iter()
        .find(|n| {
            n.get("mac")
                .and_then(serde_json::Value::as_str)
                .is_some_and(|m| m.eq_ignore_ascii_case(mac))
        })
        .and_then(|n| n.get("ip").and_then(serde_json::Value::as_str))
        .filter(|ip| patchbay_model::values::DeviceAddress::parse(ip).is_ok())
        .map(str::to_owned)
}

/// A Server as the allocator sees it: the spec's hardware, else the inspected
/// hardware of its BareMetalHost. A memory quantity that does not parse counts as
/// unknown (the Server's own validation reports it).
pub fn candidate(server: &Server, inspected: InspectedHardware) -> Candidate {
    let hw = server.spec.hardware.clone().unwrap_or_default();
    let mut macs: BTreeSet<String> = [server.spec.boot_mac.to_ascii_lowercase()].into();
    macs.extend(
        server
            .spec
            .nics
            .iter()
            .filter_map(|n| n.mac.as_ref().map(|m| m.to_ascii_lowercase())),
    );
    Candidate {
        name: server.metadata.name.clone().unwrap_or_default(),
        site: server.spec.site.clone(),
        cpus: hw
            .cpus
            .and_then(|n| u64::try_from(n).ok())
            .or(inspected.cpus),
        memory: hw
            .memory
            .as_ref()
            .and_then(|q| parse_quantity(&q.0).ok())
            .or(inspected.memory),
        macs,
        nics: server.spec.nics.iter().map(CandidateNic::of).collect(),
        // A host held for its BGP neighbours still carries its last claim's network.
        maintenance: server.spec.maintenance || crate::decide::bgp::held_for_peers(server),
        binding: server.spec.claim_ref.as_ref().map(|b| Binding {
            claim: ClaimKey {
                namespace: b.namespace.clone(),
                name: b.name.clone(),
            },
            uid: b.uid.clone(),
            role: b.role.clone(),
            since: b.since.clone(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(yaml: &str) -> ServerClaimSpec {
        patchbay_model::yaml::from_str(yaml).unwrap()
    }

    fn errors(yaml: &str) -> Vec<String> {
        validate_claim(&spec(yaml))
            .err()
            .map(|e| e.0.iter().map(ToString::to_string).collect())
            .unwrap_or_default()
    }

    #[test]
    fn a_good_claim_passes_and_becomes_a_request() {
        let s = spec(
            "site: dc1\nroles:\n- name: control-plane\n  count: 1\n  requirements:\n    \
             minCpus: 16\n    minMemory: 64Gi\n    macAddresses: ['AA:BB:CC:DD:EE:01']\n\
             - name: worker\n  count: 2\n  networkConfiguration:\n  - configurationRef: \
             {kind: SmartNicConfiguration, name: offload}\n    nicHint: {smartNIC: true}\n\
             networkConfiguration:\n- configurationRef: {kind: SwitchPortConfiguration, \
             name: web}\n  nicHint: {name: eth0}\ninventory:\n  groups:\n    worker: \
             [kube_node, gpu_nodes]\n",
        );
        let r = claim_request(
            ClaimKey {
                namespace: "t".into(),
                name: "c".into(),
            },
            "u".into(),
            "t0".into(),
            &s,
            BTreeSet::new(),
        )
        .unwrap();
        assert_eq!(r.roles[0].min_memory, Some(64 << 30));
        assert_eq!(r.roles[0].pins, ["aa:bb:cc:dd:ee:01".to_owned()].into());
        assert_eq!(r.roles[0].nics.len(), 1, "the claim's entry");
        assert_eq!(r.roles[1].nics.len(), 2, "the claim's and the role's");
        assert_eq!(
            r.roles[1].nics[1].path,
            "spec.roles[1].networkConfiguration[0]"
        );
    }

    #[test]
    fn every_bad_field_is_named_with_its_reason() {
        for (yaml, want) in [
            (
                "site: dc1\nroles: [{name: w, count: -1}]",
                "spec.roles[0].count: -1 is negative",
            ),
            (
                "site: dc1\nroles: [{name: w, count: 1}, {name: w, count: 2}]",
                "spec.roles[1].name: role \"w\" is listed twice",
            ),
            (
                "site: dc1\nroles: [{name: w, count: 1, requirements: {minMemory: 12GB}}]",
                "spec.roles[0].requirements.minMemory: \"12GB\": unknown suffix",
            ),
            (
                "site: dc1\nroles: [{name: w, count: 1, requirements: {minCpus: -4}}]",
                "spec.roles[0].requirements.minCpus: -4 is negative",
            ),
            (
                "site: dc1\nroles:\n- {name: a, count: 1, requirements: {macAddresses: \
                 ['aa:bb:cc:dd:ee:01']}}\n- {name: b, count: 1, requirements: \
                 {macAddresses: ['AA:BB:CC:DD:EE:01']}}",
                "spec.roles[1].requirements.macAddresses[0]: aa:bb:cc:dd:ee:01 is already \
                 pinned to role \"a\"",
            ),
            (
                "site: dc1\nroles: [{name: w, count: 1, requirements: {macAddresses: [nope]}}]",
                "spec.roles[0].requirements.macAddresses[0]: \"nope\" is not a MAC address",
            ),
            (
                "site: dc1\nroles: [{name: w, count: 1, requirements: {macAddresses: \
                 ['aa:bb:cc:dd:ee:01', 'aa:bb:cc:dd:ee:02']}}]",
                "spec.roles[0].requirements.macAddresses: 2 pinned MACs but count is 1",
            ),
            (
                "site: dc1\nnetworkConfiguration: [{configurationRef: {kind: \
                 SmartNicConfiguration, name: x}}]",
                "spec.networkConfiguration[0].nicHint.smartNIC: a SmartNicConfiguration goes \
                 on a NIC cabled to a SmartNicPort",
            ),
            (
                "site: dc1\nroles: [{name: w, count: 1}]\ninventory: {groups: {gpu: [x]}}",
                "spec.inventory.groups.gpu: no role \"gpu\" in spec.roles",
            ),
            (
                "site: dc1\nroles: [{name: w, count: 1}]\ninventory: {groups: {w: ['a]b']}}",
                "spec.inventory.groups.w[0]: \"a]b\" is not an inventory group name",
            ),
            ("site: 'd c'", "spec.site: \"d c\" must be 1-63 letters"),
        ] {
            let got = errors(yaml);
            assert!(
                got.iter().any(|e| e.starts_with(want)),
                "{yaml}\nwant {want}\ngot {got:?}"
            );
        }
    }

    #[test]
    fn a_baremetalhosts_inspection_gives_hardware_and_the_boot_nics_address() {
        let status = serde_json::json!({"hardware": {
            "cpu": {"count": 32}, "ramMebibytes": 131072,
            "nics": [{"mac": "aa:bb:cc:dd:ee:02", "ip": "10.0.0.9"},
                     {"mac": "AA:BB:CC:DD:EE:01", "ip": "192.168.111.20"},
                     {"mac": "aa:bb:cc:dd:ee:03", "ip": "10.0.0.1\n[all]"}]}});
        assert_eq!(
            inspected_hardware(Some(&status)),
            InspectedHardware {
                cpus: Some(32),
                memory: Some(128 << 30)
            }
        );
        assert_eq!(
            inspected_address(Some(&status), "aa:bb:cc:dd:ee:01").as_deref(),
            Some("192.168.111.20")
        );
        assert_eq!(inspected_address(Some(&status), "aa:bb:cc:dd:ee:03"), None);
        assert_eq!(inspected_hardware(None), InspectedHardware::default());
    }

    #[test]
    fn a_configuration_of_an_unknown_kind_is_refused_by_the_type() {
        let e = patchbay_model::yaml::from_str::<ServerClaimSpec>(
            "site: dc1\nnetworkConfiguration: [{configurationRef: {kind: Secret, name: x}}]",
        )
        .unwrap_err()
        .to_string();
        // The YAML reader names the place by line and column (`validate` names it by
        // path, through `decode`).
        assert!(
            e.contains("unknown variant `Secret`") && e.contains("line 2, column 50"),
            "{e}"
        );
    }
}

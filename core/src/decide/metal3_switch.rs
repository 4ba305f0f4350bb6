//! A Metal3 BareMetalSwitch as patchbay drives it: the ProviderSwitch patchbay
//! derives from it (backend and os from the device-type map, address, port, the
//! credentials Secret, the pinned host key), or why none is derived — and the
//! BareMetalSwitch's `Valid` condition. Pure; table-tested.
//!
//! The decisions, written down:
//! - **One object, one name.** The derived ProviderSwitch has the BareMetalSwitch's
//!   name and namespace, so a patchbay Switch declares the BareMetalSwitch's ports
//!   with `spec.provider.name: <the BareMetalSwitch>` — with every per-port limit
//!   a Switch has. A port no Switch declares is never configured.
//! - **One owner per device.** A ProviderSwitch of that name that patchbay did not
//!   derive, or any other ProviderSwitch on the same address and port, refuses the
//!   BareMetalSwitch (`Conflict`): two writers never share a device.
//! - **Credentials stay in the switch's namespace.** Upstream lets `credentials`
//!   name another namespace; patchbay refuses that (`CredentialError`), so a
//!   BareMetalSwitch cannot point patchbay at a Secret of a namespace it does not
//!   own. The Secret's keys are Metal3's (`username`, `password` or
//!   `ssh-privatekey`, optional `admin-password` as the enable secret); the
//!   backends read them as they read patchbay's own names.
//! - **The host key is pinned.** A BareMetalSwitch has no host-key field: the
//!   annotation [`HOST_KEY_ANNOTATION`] carries it (`SHA256:…` fingerprint, or a
//!   known_hosts line), else the Secret's `knownHosts`. Without either the
//!   ProviderSwitch reports the missing pin and nothing is dialled; trust on first
//!   use is not offered.

use crate::api::metal3_switch::BareMetalSwitch;
use crate::api::{BackendOptions, HostKeyPin, ProviderSwitchSpec, SecretRef};
use crate::decide::device_types::device_type;
use crate::decide::validate::unknown_fields::schema_errors;
use crate::decide::validate::{FieldError, validate_provider};

/// The annotation on a BareMetalSwitch that pins its SSH host key.
pub const HOST_KEY_ANNOTATION: &str = "patchbay.dev/host-key";

/// The label patchbay puts on a ProviderSwitch it derived (its value: the
/// BareMetalSwitch's name).
pub const DERIVED_LABEL: &str = "patchbay.dev/bare-metal-switch";

/// Why no ProviderSwitch is derived: the `Valid` condition's reason and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// `UnsupportedDeviceType`, `CredentialError` or `Conflict`.
    pub reason: &'static str,
    /// What to change, naming the field.
    pub message: String,
}

/// A ProviderSwitch as the caches hold it, for the one-owner check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Existing<'a> {
    /// Its namespace and name.
    pub namespace: &'a str,
    /// Its name.
    pub name: &'a str,
    /// Its address.
    pub address: &'a str,
    /// Its port ([`ProviderSwitchSpec::port_or_default`]).
    pub port: u16,
    /// The BareMetalSwitch it was derived from ([`DERIVED_LABEL`]), if any.
    pub derived_from: Option<&'a str>,
}

/// The ProviderSwitch spec patchbay derives from `bms`, or why none. `existing`:
/// every cached ProviderSwitch.
pub fn derive(
    bms: &BareMetalSwitch,
    existing: &[Existing<'_>],
) -> Result<ProviderSwitchSpec, Refusal> {
    let ns = bms.metadata.namespace.as_deref().unwrap_or_default();
    let name = bms.metadata.name.as_deref().unwrap_or_default();
    let mapped = device_type(&bms.spec.device_type).map_err(|message| Refusal {
        reason: "UnsupportedDeviceType",
        message: format!("spec.deviceType: {message}"),
    })?;
    let credential = |message: String| Refusal {
        reason: "CredentialError",
        message,
    };
    let secret = match &bms.spec.credentials {
        Some(c) => match (&c.name, c.namespace.as_deref()) {
            (None, _) => {
                return Err(credential("spec.credentials.name: names no Secret".into()));
            }
            (Some(_), Some(other)) if other != ns => {
                return Err(credential(format!(
                    "spec.credentials.namespace: patchbay reads a switch's Secret from the \
                     switch's own namespace ({ns}), not from {other:?}"
                )));
            }
            (Some(n), _) => SecretRef {
                name: n.clone(),
                namespace: None,
            },
        },
        None => {
            return Err(credential(
                "spec.credentials: a Secret with username and password or ssh-privatekey \
                 is needed to log in"
                    .into(),
            ));
        }
    };
    let port = bms
        .spec
        .port
        .and_then(|p| u16::try_from(p).ok())
        .filter(|p| *p > 0)
        .unwrap_or_else(|| mapped.port.default_port());
    if let Some(other) = existing.iter().find(|e| {
        e.derived_from != Some(name)
            && ((e.namespace == ns && e.name == name)
                || (e.address.eq_ignore_ascii_case(&bms.spec.address) && e.port == port))
    }) {
        return Err(Refusal {
            reason: "Conflict",
            message: format!(
                "ProviderSwitch {}/{} already drives {}:{port}{}: one device, one writer",
                other.namespace,
                other.name,
                bms.spec.address,
                if other.derived_from.is_some() {
                    " (derived from another BareMetalSwitch)"
                } else {
                    ""
                }
            ),
        });
    }
    let host_key = bms
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(HOST_KEY_ANNOTATION))
        .map(|pin| {
            let pin = pin.trim();
            if pin.starts_with("SHA256:") {
                HostKeyPin {
                    fingerprint: Some(pin.to_owned()),
                    known_hosts_line: None,
                }
            } else {
                HostKeyPin {
                    fingerprint: None,
                    known_hosts_line: Some(pin.to_owned()),
                }
            }
        });
    Ok(ProviderSwitchSpec {
        backend: mapped.backend,
        os: mapped.os,
        address: bms.spec.address.clone(),
        port: Some(i64::from(port)),
        credentials_secret_ref: Some(secret),
        host_key,
        insecure_accept_any_host_key: false,
        options: mapped.model.as_ref().map(|m| BackendOptions {
            model: Some(m.clone()),
            ..Default::default()
        }),
        cabling_policy: None,
    })
}

/// What a Switch declaring ports on the BareMetalSwitch says of the device: its
/// name and its `Ready` condition (status `True`/`False`/`Unknown`, reason,
/// message).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reached<'a> {
    /// The Switch.
    pub switch: &'a str,
    /// Its `Ready` status.
    pub status: &'a str,
    /// Its reason (a device error's category when the device is down).
    pub reason: &'a str,
    /// Its message.
    pub message: &'a str,
}

/// The BareMetalSwitch's `Valid` condition (status, reason, message): from the
/// refusal; else from the derived ProviderSwitch's `Ready` condition (`None`: not
/// checked yet); once that passed, from what the Switches declaring its ports found
/// on the device (a refused login, a host key that does not match, no answer), the
/// first failing one. Upstream's reasons where they fit: `Reconciled` when the
/// switch checked out, `CredentialError` when the login or its Secret is at fault;
/// the finding's own category otherwise.
pub fn valid(
    derived: &Result<ProviderSwitchSpec, Refusal>,
    ready: Option<(bool, &str, &str)>,
    reached: &[Reached<'_>],
) -> (bool, String, String) {
    let reason_of = |reason: &str| match reason {
        // A Secret without the keys, and a login the device refused.
        "CredentialsInvalid" | "AuthenticationFailed" => "CredentialError".to_owned(),
        other => other.to_owned(),
    };
    match (derived, ready) {
        (Err(r), _) => (false, r.reason.to_owned(), r.message.clone()),
        (Ok(_), None) => (
            false,
            "Pending".into(),
            "the ProviderSwitch patchbay derived has not been checked yet".into(),
        ),
        (Ok(_), Some((false, reason, message))) => (false, reason_of(reason), message.to_owned()),
        (Ok(_), Some((true, _, message))) => match reached.iter().find(|r| r.status == "False") {
            Some(r) => (
                false,
                reason_of(r.reason),
                format!("Switch {}: {}", r.switch, r.message),
            ),
            None => (true, "Reconciled".into(), message.to_owned()),
        },
    }
}

/// Upstream's CRD at the pinned version, as patchbay's rendition has it (the tests
/// install the same file): what `patchbay validate` checks a BareMetalSwitch's
/// fields, types and enums against.
const CRD_RENDITION: &str = include_str!("../../../testbed/crds/metal3.io_baremetalswitches.yaml");

/// The `openAPIV3Schema` of a CRD rendition's (the YAML `text`), parsed once into
/// `cell`.
pub(crate) fn rendition_schema(
    text: &str,
    cell: &'static std::sync::OnceLock<serde_json::Value>,
) -> &'static serde_json::Value {
    cell.get_or_init(|| {
        let crd: serde_json::Value =
            patchbay_model::yaml::from_str(text).expect("the CRD rendition parses");
        crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone()
    })
}

/// The rendition's `openAPIV3Schema`.
fn schema() -> &'static serde_json::Value {
    static SCHEMA: std::sync::OnceLock<serde_json::Value> = std::sync::OnceLock::new();
    rendition_schema(CRD_RENDITION, &SCHEMA)
}

/// `patchbay validate` on one BareMetalSwitch document (`metal3.io/v1alpha1`):
/// first what a cluster with upstream's CRD refuses at `kubectl apply` (field
/// names, types, the driver enum, the required fields, the MAC pattern, the port's
/// range), then, on a document that passes, what patchbay refuses before any device
/// change (the device type, the credentials, the one-writer check against
/// `existing`, the host-key annotation's form). The derived ProviderSwitch spec when
/// nothing is wrong.
pub fn check_document(
    doc: &serde_json::Value,
    existing: &[Existing<'_>],
) -> Result<ProviderSwitchSpec, Vec<FieldError>> {
    let mut errors = schema_errors(schema(), doc);
    let spec = &doc["spec"];
    let error = |path: &str, reason: &str| FieldError {
        path: path.into(),
        reason: reason.into(),
    };
    for field in ["address", "deviceType", "macAddress"] {
        if spec.get(field).is_none_or(serde_json::Value::is_null) {
            errors.push(error(&format!("spec.{field}"), "Required value"));
        }
    }
    if let Some(mac) = spec.get("macAddress").and_then(serde_json::Value::as_str)
        && !is_mac(mac)
    {
        errors.push(error(
            "spec.macAddress",
            "must be six hexadecimal pairs separated by colons (aa:bb:cc:dd:ee:ff)",
        ));
    }
    if let Some(port) = spec.get("port").and_then(serde_json::Value::as_i64)
        && !(1..=65535).contains(&port)
    {
        errors.push(error("spec.port", "must be between 1 and 65535"));
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    let bms: BareMetalSwitch = match serde_json::from_value(doc.clone()) {
        Ok(b) => b,
        Err(e) => return Err(vec![error("spec", &e.to_string())]),
    };
    let derived = derive(&bms, existing).map_err(|r| {
        let (path, reason) = match r.message.split_once(": ") {
            Some((path, reason)) if path.starts_with("spec.") => (path, reason),
            _ => ("spec.address", r.message.as_str()),
        };
        vec![error(path, &format!("{reason} ({})", r.reason))]
    })?;
    // The derived ProviderSwitch's own checks; the host key is the annotation's.
    validate_provider(&derived).map_err(|e| {
        e.0.into_iter()
            .map(|f| FieldError {
                path: if f.path.starts_with("spec.hostKey") {
                    format!("metadata.annotations[{HOST_KEY_ANNOTATION}]")
                } else {
                    f.path
                },
                reason: f.reason,
            })
            .collect::<Vec<_>>()
    })?;
    Ok(derived)
}

/// Upstream's MAC pattern, `^[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}$`.
pub(crate) fn is_mac(mac: &str) -> bool {
    let pairs: Vec<&str> = mac.split(':').collect();
    pairs.len() == 6
        && pairs
            .iter()
            .all(|p| p.len() == 2 && p.bytes().all(|b| b.is_ascii_hexdigit()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{Backend, DeviceOs};

    fn bms(ns: &str, name: &str, spec: serde_json::Value) -> BareMetalSwitch {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": ns},
            "spec": spec,
        }))
        .unwrap()
    }

    fn cisco(extra: serde_json::Value) -> serde_json::Value {
        let mut s = serde_json::json!({"address": "192.0.2.10", "macAddress": "aa:bb:cc:00:00:01",
            "deviceType": "netmiko_cisco_ios", "credentials": {"name": "tor-1"}});
        for (k, v) in extra.as_object().unwrap() {
            s[k] = v.clone();
        }
        s
    }

    #[test]
    fn a_mapped_switch_becomes_its_provider_switch() {
        let d = derive(&bms("infra", "tor-1", cisco(serde_json::json!({}))), &[]).unwrap();
        assert_eq!((d.backend, d.os), (Backend::Ssh, DeviceOs::Ios));
        assert_eq!(d.address, "192.0.2.10");
        assert_eq!(d.port, Some(22));
        assert_eq!(d.credentials_secret_ref.unwrap().name, "tor-1");
        assert!(d.host_key.is_none() && !d.insecure_accept_any_host_key);
        // Juniper: NETCONF, its port 830 unless given, the junos-els model.
        let j = derive(
            &bms(
                "infra",
                "tor-2",
                cisco(serde_json::json!({"deviceType": "netmiko_juniper_junos"})),
            ),
            &[],
        )
        .unwrap();
        assert_eq!(
            (j.backend, j.os, j.port),
            (Backend::Netconf, DeviceOs::Junos, Some(830))
        );
        assert_eq!(j.options.unwrap().model.as_deref(), Some("junos-els"));
        let given = derive(
            &bms("infra", "tor-3", cisco(serde_json::json!({"port": 2222}))),
            &[],
        );
        assert_eq!(given.unwrap().port, Some(2222));
    }

    #[test]
    fn the_host_key_annotation_pins_a_fingerprint_or_a_line() {
        let mut b = bms("infra", "tor-1", cisco(serde_json::json!({})));
        let fp = "SHA256:47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU";
        b.metadata.annotations = Some([(HOST_KEY_ANNOTATION.to_owned(), fp.to_owned())].into());
        let pin = derive(&b, &[]).unwrap().host_key.unwrap();
        assert_eq!(pin.fingerprint.as_deref(), Some(fp));
        let line = "192.0.2.10 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl";
        b.metadata.annotations = Some([(HOST_KEY_ANNOTATION.to_owned(), line.to_owned())].into());
        assert_eq!(
            derive(&b, &[])
                .unwrap()
                .host_key
                .unwrap()
                .known_hosts_line
                .as_deref(),
            Some(line)
        );
    }

    #[test]
    fn refusals_name_the_field_and_the_reason() {
        type Row<'a> = (serde_json::Value, &'a str, &'a str);
        let table: Vec<Row<'_>> = vec![
            (
                serde_json::json!({"deviceType": "netmiko_ovs_linux"}),
                "UnsupportedDeviceType",
                "spec.deviceType: deviceType netmiko_ovs_linux is not driven by patchbay",
            ),
            (
                serde_json::json!({"deviceType": "netmiko_cisco_iso"}),
                "UnsupportedDeviceType",
                "is not a networking-generic-switch device type",
            ),
            (
                serde_json::json!({"credentials": {"name": "tor-1", "namespace": "kube-system"}}),
                "CredentialError",
                "spec.credentials.namespace: patchbay reads a switch's Secret from the switch's own namespace (infra)",
            ),
            (
                serde_json::json!({"credentials": {}}),
                "CredentialError",
                "spec.credentials.name",
            ),
            (
                serde_json::json!({"credentials": null}),
                "CredentialError",
                "spec.credentials: a Secret",
            ),
        ];
        for (extra, reason, message) in table {
            let mut spec = cisco(serde_json::json!({}));
            for (k, v) in extra.as_object().unwrap() {
                if v.is_null() {
                    spec.as_object_mut().unwrap().remove(k);
                } else {
                    spec[k] = v.clone();
                }
            }
            let r = derive(&bms("infra", "tor-1", spec.clone()), &[]).unwrap_err();
            assert_eq!(r.reason, reason, "{spec}");
            assert!(r.message.contains(message), "{spec}: {}", r.message);
        }
        // The credentials' own namespace, spelt out, is fine.
        let same =
            cisco(serde_json::json!({"credentials": {"name": "tor-1", "namespace": "infra"}}));
        assert!(derive(&bms("infra", "tor-1", same), &[]).is_ok());
    }

    #[test]
    fn a_device_has_one_writer() {
        let b = bms("infra", "tor-1", cisco(serde_json::json!({})));
        let other = |name, address, port, derived_from| Existing {
            namespace: "infra",
            name,
            address,
            port,
            derived_from,
        };
        // Its own derived ProviderSwitch is no conflict.
        assert!(derive(&b, &[other("tor-1", "192.0.2.10", 22, Some("tor-1"))]).is_ok());
        // A hand-written one of the same name, or any other on the same address and port.
        let r = derive(&b, &[other("tor-1", "198.51.100.1", 22, None)]).unwrap_err();
        assert_eq!(r.reason, "Conflict");
        let r = derive(&b, &[other("cisco-a", "192.0.2.10", 22, None)]).unwrap_err();
        assert!(
            r.message
                .contains("ProviderSwitch infra/cisco-a already drives 192.0.2.10:22"),
            "{}",
            r.message
        );
        let r = derive(&b, &[other("tor-9", "192.0.2.10", 22, Some("tor-9"))]).unwrap_err();
        assert!(
            r.message.contains("derived from another BareMetalSwitch"),
            "{}",
            r.message
        );
        // The same address on another port is another device (a relay, a second CLI).
        assert!(derive(&b, &[other("cisco-a", "192.0.2.10", 2222, None)]).is_ok());
    }

    #[test]
    fn valid_follows_the_refusal_or_the_provider_switch() {
        let ok = derive(&bms("infra", "tor-1", cisco(serde_json::json!({}))), &[]);
        assert_eq!(valid(&ok, None, &[]).1, "Pending");
        assert_eq!(
            valid(&ok, Some((true, "Ready", "checked")), &[]),
            (true, "Reconciled".into(), "checked".into())
        );
        assert_eq!(
            valid(&ok, Some((false, "CredentialsInvalid", "no username")), &[]).1,
            "CredentialError"
        );
        assert_eq!(
            valid(&ok, Some((false, "InvalidProvider", "bad")), &[]).1,
            "InvalidProvider"
        );
        // What the Switches on it found on the device.
        let reached = |status, reason| Reached {
            switch: "tor-1",
            status,
            reason,
            message: "what the device said",
        };
        let checked = Some((true, "Ready", "checked"));
        let (ok_, reason, message) =
            valid(&ok, checked, &[reached("False", "AuthenticationFailed")]);
        assert!(!ok_ && reason == "CredentialError", "{reason}");
        assert_eq!(message, "Switch tor-1: what the device said");
        assert_eq!(
            valid(
                &ok,
                checked,
                &[
                    reached("True", "Ready"),
                    reached("False", "HostKeyMismatch")
                ]
            )
            .1,
            "HostKeyMismatch"
        );
        assert_eq!(
            valid(&ok, checked, &[reached("False", "DeviceTimeout")]).1,
            "DeviceTimeout"
        );
        assert!(
            valid(
                &ok,
                checked,
                &[reached("True", "Ready"), reached("Unknown", "Probing")]
            )
            .0
        );
        let refused = derive(
            &bms(
                "infra",
                "tor-1",
                cisco(serde_json::json!({"deviceType": "netmiko_sonic"})),
            ),
            &[],
        );
        let (ok, reason, message) = valid(&refused, Some((true, "Ready", "")), &[]);
        assert!(
            !ok && reason == "UnsupportedDeviceType" && message.contains("SONiC"),
            "{message}"
        );
    }

    /// `patchbay validate`: upstream's schema first (as `kubectl apply` would refuse),
    /// then patchbay's refusals, each naming the field.
    #[test]
    fn check_document_refuses_what_upstream_and_patchbay_refuse() {
        let doc = |spec: serde_json::Value, annotations: serde_json::Value| {
            serde_json::json!({"apiVersion": "metal3.io/v1alpha1", "kind": "BareMetalSwitch",
                "metadata": {"name": "tor-1", "namespace": "infra", "annotations": annotations},
                "spec": spec})
        };
        let pin = serde_json::json!({HOST_KEY_ANNOTATION:
            "SHA256:47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU"});
        let good = check_document(&doc(cisco(serde_json::json!({})), pin.clone()), &[]).unwrap();
        assert_eq!((good.backend, good.port), (Backend::Ssh, Some(22)));
        let rows: Vec<(serde_json::Value, serde_json::Value, &str, &str)> = vec![
            (
                cisco(serde_json::json!({"vlan": 5})),
                pin.clone(),
                "spec.vlan",
                "unknown field",
            ),
            (
                serde_json::json!({"address": "192.0.2.10", "deviceType": "netmiko_cisco_ios"}),
                pin.clone(),
                "spec.macAddress",
                "Required value",
            ),
            (
                cisco(serde_json::json!({"macAddress": "aa:bb:cc:00:00"})),
                pin.clone(),
                "spec.macAddress",
                "six hexadecimal pairs",
            ),
            (
                cisco(serde_json::json!({"port": 70000})),
                pin.clone(),
                "spec.port",
                "between 1 and 65535",
            ),
            (
                cisco(serde_json::json!({"driver": "ironic"})),
                pin.clone(),
                "spec.driver",
                "generic-switch",
            ),
            (
                cisco(serde_json::json!({"port": "22"})),
                pin.clone(),
                "spec.port",
                "",
            ),
            (
                cisco(serde_json::json!({"deviceType": "netmiko_ovs_linux"})),
                pin.clone(),
                "spec.deviceType",
                "(UnsupportedDeviceType)",
            ),
            (
                cisco(
                    serde_json::json!({"credentials": {"name": "x", "namespace": "kube-system"}}),
                ),
                pin.clone(),
                "spec.credentials.namespace",
                "(CredentialError)",
            ),
            (
                cisco(serde_json::json!({})),
                serde_json::json!({HOST_KEY_ANNOTATION: "SHA256:short"}),
                "metadata.annotations[patchbay.dev/host-key]",
                "43 base64",
            ),
        ];
        for (spec, annotations, path, says) in rows {
            let errors = check_document(&doc(spec.clone(), annotations), &[]).unwrap_err();
            assert!(
                errors
                    .iter()
                    .any(|e| e.path == path && e.reason.contains(says)),
                "{spec}: {errors:?}"
            );
        }
        // Another writer on the device, among the files' ProviderSwitches.
        let other = Existing {
            namespace: "infra",
            name: "by-hand",
            address: "192.0.2.10",
            port: 22,
            derived_from: None,
        };
        let errors = check_document(&doc(cisco(serde_json::json!({})), pin), &[other]).unwrap_err();
        assert_eq!(errors[0].path, "spec.address");
        assert!(errors[0].reason.contains("(Conflict)"), "{errors:?}");
    }
}

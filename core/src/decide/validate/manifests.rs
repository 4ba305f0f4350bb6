//! Validation of whole manifest files, as `patchbay validate` does it: every patchbay
//! object on its own, then every link that can be resolved inside the given files
//! (SwitchPort → Switch port constraints, Server NIC → SwitchPort, Switch → the
//! ProviderSwitch its ports are configured through). Pure: the caller reads the
//! files.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::DeserializeOwned;

use super::{
    FieldError, PortContext, ValidationErrors, configuration_to_desired, decode, desired_for_port,
    validate_provider, validate_server, validate_smartnic_port, validate_switch,
};
use crate::api::metal3::BareMetalHost;
use crate::api::{
    ProviderSwitch, Server, ServerClaim, SmartNicConfiguration, SmartNicPort, Switch, SwitchPort,
    SwitchPortConfiguration, SwitchPortConfigurationSpec,
};
use crate::decide::metal3_host::{DeclaredPort, Fabric, KnownSwitch, check_attachment, check_host};
use crate::decide::metal3_switch::{DERIVED_LABEL, Existing, check_document};
use patchbay_model::values::{PortName, excerpt};

/// Every patchbay kind, each of which `patchbay validate` checks.
pub const VALIDATED_KINDS: &[&str] = &[
    "ProviderSwitch",
    "Switch",
    "SwitchPort",
    "SwitchPortConfiguration",
    "SmartNicPort",
    "SmartNicConfiguration",
    "Server",
    "ServerClaim",
    "VLANPool",
];

/// The other projects' kinds `patchbay validate` checks too: Metal3's
/// BareMetalSwitch, HostNetworkAttachment and BareMetalHost's `networkInterfaces`
/// (`metal3.io/v1alpha1`), as upstream's CRD and patchbay would take them in.
pub const OTHER_VALIDATED_KINDS: &[&str] =
    &["BareMetalSwitch", "HostNetworkAttachment", "BareMetalHost"];

/// The verdict on one object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectVerdict {
    /// File (or `-`) and document index.
    pub source: String,
    /// `Kind namespace/name`.
    pub object: String,
    /// Problems; empty when valid.
    pub errors: Vec<FieldError>,
    /// True when the document is not a patchbay object and was skipped.
    pub skipped: bool,
}

/// The verdicts on every object of the given files.
#[derive(Debug, Clone, Default)]
pub struct ValidationReport {
    /// One verdict per document and per checked link.
    pub verdicts: Vec<ObjectVerdict>,
}

impl ValidationReport {
    /// Whether nothing was invalid.
    pub fn is_ok(&self) -> bool {
        self.verdicts.iter().all(|v| v.errors.is_empty())
    }

    /// Number of invalid objects.
    pub fn invalid(&self) -> usize {
        self.verdicts
            .iter()
            .filter(|v| !v.errors.is_empty())
            .count()
    }
}

impl fmt::Display for ValidationReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for v in &self.verdicts {
            if v.skipped {
                writeln!(f, "skip     {}: {}", v.source, v.object)?;
            } else if v.errors.is_empty() {
                writeln!(f, "valid    {}: {}", v.source, v.object)?;
            } else {
                writeln!(f, "INVALID  {}: {}", v.source, v.object)?;
                for e in &v.errors {
                    writeln!(f, "           {e}")?;
                }
            }
        }
        let checked = self.verdicts.iter().filter(|v| !v.skipped).count();
        writeln!(f, "{} checked, {} invalid", checked, self.invalid())
    }
}

const API_VERSION: &str = "patchbay.dev/v1alpha1";

/// Metal3's API: its BareMetalSwitches are checked too.
const METAL3_API_VERSION: &str = "metal3.io/v1alpha1";

fn typed<T: DeserializeOwned>(value: &serde_json::Value) -> Result<T, Vec<FieldError>> {
    decode(value.clone()).map_err(|e| {
        vec![FieldError {
            reason: format!("does not match the schema: {}", e.reason),
            ..e
        }]
    })
}

fn errs(r: Result<(), ValidationErrors>) -> Vec<FieldError> {
    r.err().map(|e| e.0).unwrap_or_default()
}

/// Validates the documents of `files` (`(name, text)` pairs).
pub fn validate_manifests(files: &[(String, String)]) -> ValidationReport {
    let mut report = ValidationReport::default();
    let mut switches: Vec<Switch> = Vec::new();
    let mut ports: Vec<(String, SwitchPort)> = Vec::new();
    let mut servers: Vec<(String, Server)> = Vec::new();
    let mut configs: BTreeMap<(String, String), SwitchPortConfigurationSpec> = BTreeMap::new();
    let mut providers: BTreeMap<(String, String), ProviderSwitch> = BTreeMap::new();
    let mut metal3_docs: Vec<(usize, String, String, serde_json::Value)> = Vec::new();

    for (file, text) in files {
        // A syntax error anywhere makes the whole file one verdict: a YAML parser
        // cannot say where the next document starts once one is broken.
        let documents = match patchbay_model::yaml::documents(text) {
            Ok(documents) => documents,
            Err(e) => {
                report.verdicts.push(ObjectVerdict {
                    source: file.clone(),
                    object: "(unparsable YAML)".into(),
                    errors: vec![FieldError {
                        path: "(document)".into(),
                        reason: e.to_string(),
                    }],
                    skipped: false,
                });
                continue;
            }
        };
        // Numbered among the non-empty documents.
        for (i, value) in documents.into_iter().enumerate() {
            let source = format!("{file}#{}", i + 1);
            let kind = value.get("kind").and_then(|k| k.as_str()).unwrap_or("");
            let api_version = value
                .get("apiVersion")
                .and_then(|k| k.as_str())
                .unwrap_or("");
            let meta = value.get("metadata");
            let name = meta
                .and_then(|m| m.get("name"))
                .and_then(|n| n.as_str())
                .unwrap_or("");
            let ns = meta
                .and_then(|m| m.get("namespace"))
                .and_then(|n| n.as_str())
                .unwrap_or("default")
                .to_owned();
            let object = if kind == "Server" {
                // Cluster-scoped.
                format!("{kind} {}", excerpt(name))
            } else {
                format!("{kind} {}/{}", excerpt(&ns), excerpt(name))
            };
            if api_version == METAL3_API_VERSION && OTHER_VALIDATED_KINDS.contains(&kind) {
                // Judged once every file is read: a BareMetalSwitch's one-writer
                // check needs the ProviderSwitches of all of them, a host's
                // interfaces the BareMetalSwitches and Switches.
                metal3_docs.push((report.verdicts.len(), kind.to_owned(), ns.clone(), value));
                report.verdicts.push(ObjectVerdict {
                    source,
                    object,
                    errors: Vec::new(),
                    skipped: false,
                });
                continue;
            }
            if !api_version.starts_with("patchbay.dev/") {
                report.verdicts.push(ObjectVerdict {
                    source,
                    object: format!("{} {}", excerpt(kind), excerpt(name)),
                    errors: Vec::new(),
                    skipped: true,
                });
                continue;
            }
            let mut errors = Vec::new();
            // Misspelt fields, wrong types and enum words first, by path: typed
            // parsing would drop the first and cannot name the others inside a
            // flattened struct.
            if let Some(schema) = crate::api::published_schema(kind)
                && let Ok(json) = serde_json::to_value(&value)
            {
                let shape = super::unknown_fields::schema_errors(schema, &json);
                let misfits = shape.iter().any(|e| !e.reason.starts_with("unknown field"));
                errors.extend(shape);
                if misfits {
                    report.verdicts.push(ObjectVerdict {
                        source,
                        object,
                        errors,
                        skipped: false,
                    });
                    continue;
                }
            }
            if api_version != API_VERSION {
                errors.push(FieldError {
                    path: "apiVersion".into(),
                    reason: format!(
                        "{:?} is not served; use {API_VERSION}",
                        excerpt(api_version)
                    ),
                });
            }
            match kind {
                "ProviderSwitch" => match typed::<ProviderSwitch>(&value) {
                    Ok(o) => {
                        errors.extend(errs(validate_provider(&o.spec)));
                        providers.insert((ns.clone(), name.to_owned()), o);
                    }
                    Err(e) => errors.extend(e),
                },
                "Switch" => match typed::<Switch>(&value) {
                    Ok(o) => {
                        errors.extend(errs(validate_switch(&o.spec)));
                        switches.push(o);
                    }
                    Err(e) => errors.extend(e),
                },
                "SwitchPort" => match typed::<SwitchPort>(&value) {
                    Ok(o) => ports.push((ns.clone(), o)),
                    Err(e) => errors.extend(e),
                },
                "SwitchPortConfiguration" => match typed::<SwitchPortConfiguration>(&value) {
                    Ok(o) => {
                        errors.extend(errs(super::validate_configuration(&o.spec)));
                        errors.extend(
                            crate::decide::rollout::policy_errors(o.spec.rollout.as_ref())
                                .into_iter()
                                .map(|(path, reason)| FieldError { path, reason }),
                        );
                        configs.insert((ns.clone(), name.to_owned()), o.spec);
                    }
                    Err(e) => errors.extend(e),
                },
                "SmartNicPort" => match typed::<SmartNicPort>(&value) {
                    Ok(o) => errors.extend(errs(validate_smartnic_port(&o.spec))),
                    Err(e) => errors.extend(e),
                },
                "SmartNicConfiguration" => match typed::<SmartNicConfiguration>(&value) {
                    Ok(o) => {
                        let placeholder = PortName::parse("port").ok();
                        if let Some(p) = placeholder {
                            errors.extend(errs(
                                super::smartnic_configuration_to_desired(&o.spec, p).map(|_| ()),
                            ));
                        }
                        errors.extend(
                            crate::decide::rollout::policy_errors(o.spec.rollout.as_ref())
                                .into_iter()
                                .map(|(path, reason)| FieldError { path, reason }),
                        );
                    }
                    Err(e) => errors.extend(e),
                },
                "ServerClaim" => match typed::<ServerClaim>(&value) {
                    Ok(o) => errors.extend(errs(super::claim::validate_claim(&o.spec))),
                    Err(e) => errors.extend(e),
                },
                // Checked alone here (two namespaces, a shared pool without a
                // name, a bad range); overlaps with the cluster's other pools are
                // the webhook's and the pool's Ready condition's to report.
                "VLANPool" => match typed::<crate::api::VLANPool>(&value) {
                    Ok(o) => {
                        let grants = crate::decide::tenancy::Grants::new([&o], None);
                        errors.extend(grants.problems(name).iter().map(|p| {
                            let (path, reason) = p.split_once(": ").unwrap_or(("spec", p));
                            FieldError {
                                path: path.into(),
                                reason: reason.into(),
                            }
                        }));
                    }
                    Err(e) => errors.extend(e),
                },
                "Server" => match typed::<Server>(&value) {
                    Ok(o) => {
                        errors.extend(errs(validate_server(&o.spec)));
                        servers.push((source.clone(), o));
                    }
                    Err(e) => errors.extend(e),
                },
                _ => errors.push(FieldError {
                    path: "kind".into(),
                    reason: format!("{:?} is not a patchbay kind", excerpt(kind)),
                }),
            }
            report.verdicts.push(ObjectVerdict {
                source,
                object,
                errors,
                skipped: false,
            });
        }
    }

    // BareMetalSwitches (`metal3.io`): upstream's schema, then patchbay's refusals,
    // one writer per device among the files' ProviderSwitches and the
    // BareMetalSwitches before it; each taken in stands for the ProviderSwitch
    // patchbay would derive from it.
    for (at, _, ns, value) in metal3_docs.iter().filter(|d| d.1 == "BareMetalSwitch") {
        let (at, ns, value) = (*at, ns.clone(), value);
        let name = value["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let verdict = {
            let existing: Vec<Existing<'_>> = providers
                .values()
                .map(|p| Existing {
                    namespace: p.metadata.namespace.as_deref().unwrap_or("default"),
                    name: p.metadata.name.as_deref().unwrap_or_default(),
                    address: &p.spec.address,
                    port: p.spec.port_or_default(),
                    derived_from: p
                        .metadata
                        .labels
                        .as_ref()
                        .and_then(|l| l.get(DERIVED_LABEL))
                        .map(String::as_str),
                })
                .collect();
            check_document(value, &existing)
        };
        match verdict {
            Ok(spec) => {
                let derived = ProviderSwitch {
                    metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                        name: Some(name.clone()),
                        namespace: Some(ns.clone()),
                        labels: Some([(DERIVED_LABEL.to_owned(), name.clone())].into()),
                        ..Default::default()
                    },
                    spec,
                    status: None,
                };
                providers.entry((ns, name)).or_insert(derived);
            }
            Err(errors) => report.verdicts[at].errors = errors,
        }
    }

    // HostNetworkAttachments: upstream's schema, then BMO's webhook rules and
    // patchbay's limits. BareMetalHosts: their networkInterfaces, looked up among
    // the files' BareMetalSwitches and the ports their Switches declare.
    let bms_docs: Vec<(String, String, String)> = metal3_docs
        .iter()
        .filter(|d| d.1 == "BareMetalSwitch")
        .map(|(_, _, ns, v)| {
            (
                ns.clone(),
                v["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                v["spec"]["macAddress"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            )
        })
        .collect();
    let known: Vec<KnownSwitch<'_>> = bms_docs
        .iter()
        .map(|(ns, name, mac)| KnownSwitch {
            namespace: ns,
            name,
            mac,
        })
        .collect();
    let declared: Vec<DeclaredPort<'_>> = switches
        .iter()
        .flat_map(|s| {
            let ns = s.metadata.namespace.as_deref().unwrap_or("default");
            s.spec.ports.iter().map(move |(key, p)| DeclaredPort {
                namespace: ns,
                provider: &s.spec.provider.name,
                key,
                device_port: &p.name,
            })
        })
        .collect();
    let fabric = Fabric {
        switches: &known,
        declared: &declared,
        partial: true,
        inspection: None,
    };
    for (at, kind, ns, value) in &metal3_docs {
        let errors = match kind.as_str() {
            "HostNetworkAttachment" => check_attachment(value).err().unwrap_or_default(),
            "BareMetalHost" => match serde_json::from_value::<BareMetalHost>(value.clone()) {
                Ok(mut host) => {
                    host.metadata.namespace = Some(ns.clone());
                    check_host(&host, &fabric)
                }
                Err(e) => vec![FieldError {
                    path: "spec".into(),
                    reason: e.to_string(),
                }],
            },
            _ => continue,
        };
        report.verdicts[*at].errors = errors;
    }

    // Links: a Switch's ports are configured through its provider, which must be a
    // device that configures ports.
    for switch in &switches {
        let ns = switch.metadata.namespace.as_deref().unwrap_or("default");
        let p = &switch.spec.provider.name;
        let Some(provider) = providers.get(&(ns.to_owned(), p.clone())) else {
            continue;
        };
        let derived = provider
            .metadata
            .labels
            .as_ref()
            .is_some_and(|l| l.contains_key(DERIVED_LABEL));
        report.verdicts.push(ObjectVerdict {
            source: "link".into(),
            object: format!(
                "Switch {ns}/{} -> {} {ns}/{p}",
                switch.metadata.name.as_deref().unwrap_or_default(),
                if derived {
                    "BareMetalSwitch"
                } else {
                    "ProviderSwitch"
                }
            ),
            errors: super::port_device_role(&provider.spec)
                .err()
                .map(|why| FieldError {
                    path: "spec.provider".into(),
                    reason: format!("ProviderSwitch {p} {why}"),
                })
                .into_iter()
                .collect(),
            skipped: false,
        });
    }

    // Links: a configuration checked against the port it is linked to.
    let mut links: Vec<(String, String, String, String, String)> = Vec::new();
    for (ns, port) in &ports {
        if let Some(c) = &port.spec.configuration {
            let port_name = port.metadata.name.clone().unwrap_or_default();
            let cns = c.namespace.clone().unwrap_or_else(|| ns.clone());
            links.push((
                format!("SwitchPort {ns}/{port_name}"),
                ns.clone(),
                port_name,
                cns,
                c.name.clone(),
            ));
        }
    }
    for (_, server) in &servers {
        let sname = server.metadata.name.clone().unwrap_or_default();
        for nic in &server.spec.nics {
            let Some(p) = &nic.port else { continue };
            for (field, r) in [
                ("provisioningConfiguration", &nic.provisioning_configuration),
                ("configuration", &nic.configuration),
            ] {
                if let Some(c) = r {
                    links.push((
                        format!("Server {sname} NIC {} {field}", nic.name),
                        p.namespace.clone(),
                        p.name.clone(),
                        c.namespace.clone().unwrap_or_else(|| p.namespace.clone()),
                        c.name.clone(),
                    ));
                }
            }
        }
    }
    for (what, port_ns, port_name, cns, cname) in links {
        let Some(spec) = configs.get(&(cns.clone(), cname.clone())) else {
            continue;
        };
        let Some((switch, def)) = switches.iter().find_map(|s| {
            let sns = s.metadata.namespace.as_deref().unwrap_or("default");
            (sns == port_ns)
                .then(|| s.spec.ports.get(&port_name).map(|d| (s, d)))
                .flatten()
        }) else {
            continue;
        };
        let switch_name = switch.metadata.name.clone().unwrap_or_default();
        let ctx = PortContext {
            switch: &switch_name,
            port_key: &port_name,
            definition: def,
            capabilities: None,
        };
        // Self-contained errors of the configuration were reported with it already.
        if configuration_to_desired(spec, PortName::parse("port").expect("valid")).is_err() {
            continue;
        }
        report.verdicts.push(ObjectVerdict {
            source: "link".into(),
            object: format!("{what} -> SwitchPortConfiguration {cns}/{cname}"),
            errors: desired_for_port(spec, &ctx)
                .err()
                .map(|e| e.0)
                .unwrap_or_default(),
            skipped: false,
        });
    }
    report
}

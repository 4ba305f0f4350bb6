//! `patchbay device`: direct device access for network engineers, from the same YAML
//! a user applies (ProviderSwitch, Secret, SwitchPortConfiguration), without a
//! cluster.
//!
//! - `show-port PORT`: reads the port and prints what patchbay sees (YAML).
//! - `apply-port PORT --config FILE`: validates the configuration (the same validator
//!   as the operator, plus the dialect's or device model's capabilities), applies it
//!   and proves it by reading the port back. `--dry-run` reads the port and prints
//!   the exact commands (ssh) or RPCs (netconf: the whole transaction) that would be
//!   sent, or (ansible) runs the apply playbook in check mode with diff and prints
//!   the commands each task would send; nothing changes. Ansible runs
//!   `$PATCHBAY_ANSIBLE_PLAYBOOK`, else `ansible-playbook` from PATH.
//! - `reset-port PORT`: returns the port to the clean definition and reads it back.
//!
//! Bad input is refused before anything is dialled (exit 2, the field and the reason);
//! device failures exit 1. The Secret may use `data` (base64) or `stringData`; its
//! values never reach the output.

use std::collections::BTreeMap;
use std::path::Path;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use patchbay_providers::ansible::AnsibleSwitch;
use patchbay_providers::cli::CliSwitch;
use patchbay_providers::netconf::NetconfSwitch;
use patchbay_providers::values::PortName;
use patchbay_providers::verify::{apply_verified, reset_verified};
use patchbay_providers::{
    AdminState, DeviceError, ObservedPort, PortChange, PortOperation, VlanMode,
};
use serde::Serialize;

use patchbay::api::{Backend, ProviderSwitch, SwitchPortConfiguration};
use patchbay::backends::{ansible_switch, cli_switch, netconf_switch};
use patchbay::decide::validate::unknown_fields::{SECRET_FIELDS, schema_errors, unknown_top_level};
use patchbay::decide::validate::{FieldError, configuration_to_desired, validate_provider};

/// What to do.
#[derive(Debug, Clone)]
pub enum DeviceCommand {
    /// Read a port.
    Show,
    /// Apply a configuration file.
    Apply {
        /// SwitchPortConfiguration YAML.
        config: std::path::PathBuf,
        /// Print the commands only.
        dry_run: bool,
    },
    /// Reset a port.
    Reset,
}

/// Why a `patchbay device` command failed.
#[derive(Debug, thiserror::Error)]
pub enum DeviceCommandError {
    /// The input is refused (exit 2): nothing was dialled.
    #[error("invalid input: {0}")]
    InvalidInput(String),
    /// A file could not be read (exit 2).
    #[error("reading {path}: {source}")]
    Read {
        /// The file.
        path: std::path::PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The device failed (exit 1).
    #[error(transparent)]
    Device(#[from] DeviceError),
}

impl DeviceCommandError {
    /// The process exit code: 2 for input refused before dialling, 1 for a device
    /// failure.
    pub fn exit_code(&self) -> u8 {
        match self {
            DeviceCommandError::InvalidInput(_) | DeviceCommandError::Read { .. } => 2,
            DeviceCommandError::Device(_) => 1,
        }
    }
}

type Result<T> = std::result::Result<T, DeviceCommandError>;

fn invalid(message: String) -> DeviceCommandError {
    DeviceCommandError::InvalidInput(message)
}

fn read(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).map_err(|source| DeviceCommandError::Read {
        path: path.to_owned(),
        source,
    })
}

/// Refuses the document when it has fields the schema does not know (they would be
/// dropped silently and the opposite of what the user meant applied).
fn refuse_unknown(path: &Path, errors: Vec<FieldError>) -> Result<()> {
    if errors.is_empty() {
        return Ok(());
    }
    let list: Vec<String> = errors.iter().map(ToString::to_string).collect();
    Err(invalid(format!("{}: {}", path.display(), list.join("; "))))
}

/// Reads a manifest of `kind`, refusing fields its CRD's schema does not know and
/// values of the wrong type or outside an enum, each named by its path.
fn load_manifest<T: serde::de::DeserializeOwned>(path: &Path, kind: &str) -> Result<T> {
    let text = read(path)?;
    let value: serde_json::Value = patchbay_providers::yaml::from_str(&text)
        .map_err(|e| invalid(format!("{} ({kind}): {e}", path.display())))?;
    if let Some(schema) = patchbay::api::published_schema(kind) {
        refuse_unknown(path, schema_errors(schema, &value))?;
    }
    patchbay::decide::validate::decode(value)
        .map_err(|e| invalid(format!("{} ({kind}): {e}", path.display())))
}

/// Reads a Secret manifest, folding `stringData` into `data` as the API server does.
pub fn load_secret(path: &Path) -> Result<Secret> {
    let text = read(path)?;
    let raw: serde_json::Value = patchbay_providers::yaml::from_str(&text)
        .map_err(|e| invalid(format!("{} (Secret): {e}", path.display())))?;
    refuse_unknown(path, unknown_top_level(SECRET_FIELDS, &raw))?;
    let string_data: BTreeMap<String, String> = match raw.get("stringData") {
        Some(v) => serde_json::from_value(v.clone()).map_err(|_| {
            invalid(format!(
                "{}: stringData must map keys to strings",
                path.display()
            ))
        })?,
        None => BTreeMap::new(),
    };
    let mut secret: Secret = serde_json::from_value(raw).map_err(|_| {
        invalid(format!(
            "{}: not a Secret (data values must be base64)",
            path.display()
        ))
    })?;
    let data = secret.data.get_or_insert_with(BTreeMap::new);
    for (k, v) in string_data {
        data.insert(k, ByteString(v.into_bytes()));
    }
    secret.string_data = None;
    Ok(secret)
}

/// A device `patchbay device` can drive.
pub enum DeviceBackend {
    /// An SSH CLI device.
    Cli(CliSwitch),
    /// A NETCONF device.
    Netconf(NetconfSwitch),
    /// A device driven by ansible-playbook.
    Ansible(AnsibleSwitch),
}

impl DeviceBackend {
    /// The device.
    pub fn device(&self) -> &dyn patchbay_providers::Device {
        match self {
            DeviceBackend::Cli(s) => s,
            DeviceBackend::Netconf(s) => s,
            DeviceBackend::Ansible(s) => s,
        }
    }

    /// `the ios dialect`, `the junos-els model`.
    pub fn described(&self) -> String {
        match self {
            DeviceBackend::Cli(s) => format!("the {} dialect", s.dialect().name),
            DeviceBackend::Netconf(s) => format!("the {} model", s.model().name),
            DeviceBackend::Ansible(s) => format!("the {} playbooks", s.platform().playbooks),
        }
    }

    /// What would be sent for `ops`: command lines, or whole RPCs.
    pub async fn dry_run(
        &self,
        ops: &[PortOperation],
    ) -> std::result::Result<Vec<String>, DeviceError> {
        match self {
            DeviceBackend::Cli(s) => s.dry_run(ops).await,
            DeviceBackend::Netconf(s) => s.dry_run(ops).await,
            DeviceBackend::Ansible(s) => s.dry_run(ops).await,
        }
    }
}

/// The device of a ProviderSwitch file (and its Secret file).
pub fn device(provider: &Path, secret: Option<&Path>) -> Result<(ProviderSwitch, DeviceBackend)> {
    let provider: ProviderSwitch = load_manifest(provider, "ProviderSwitch")?;
    validate_provider(&provider.spec).map_err(|e| invalid(e.to_string()))?;
    let secret = secret.map(load_secret).transpose()?;
    let sw = match provider.spec.backend {
        Backend::Ssh => DeviceBackend::Cli(
            cli_switch(&provider, secret.as_ref()).map_err(|e| invalid(e.to_string()))?,
        ),
        Backend::Netconf => DeviceBackend::Netconf(
            netconf_switch(&provider, secret.as_ref(), std::time::Duration::ZERO)
                .map_err(|e| invalid(e.to_string()))?,
        ),
        Backend::Ansible => {
            let playbook = std::env::var_os("PATCHBAY_ANSIBLE_PLAYBOOK")
                .map(std::path::PathBuf::from)
                .unwrap_or_else(|| "ansible-playbook".into());
            DeviceBackend::Ansible(
                ansible_switch(&provider, secret.as_ref(), &playbook)
                    .map_err(|e| invalid(e.to_string()))?,
            )
        }
        _ => {
            return Err(invalid(
                "spec.backend: `patchbay device` drives ssh, netconf and ansible devices".into(),
            ));
        }
    };
    Ok((provider, sw))
}

/// What `show-port` prints.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PortView {
    /// Device port name.
    pub port: String,
    /// `up` or `down`.
    pub admin: Option<&'static str>,
    /// `unconfigured`, `access` or `trunk`.
    pub mode: Option<&'static str>,
    /// Access VLAN.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub access_vlan: Option<u16>,
    /// Native VLAN of a trunk.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub native_vlan: Option<u16>,
    /// Tagged VLANs of a trunk.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allowed_vlans: Option<String>,
    /// Description.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// MTU, when the dialect reads it and it is set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mtu: Option<u32>,
    /// VLANs the port carries that the switch's VLAN table lacks (the port forwards
    /// nothing on them), when there are any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub missing_vlans: Option<String>,
}

impl From<&ObservedPort> for PortView {
    fn from(o: &ObservedPort) -> Self {
        let (mode, access_vlan, native_vlan, allowed_vlans) = match &o.vlans {
            None => (None, None, None, None),
            Some(VlanMode::Unconfigured) => (Some("unconfigured"), None, None, None),
            Some(VlanMode::Access { vlan }) => (Some("access"), Some(vlan.get()), None, None),
            Some(VlanMode::Trunk { native, allowed }) => (
                Some("trunk"),
                None,
                native.map(|n| n.get()),
                Some(if allowed.is_empty() {
                    "none".to_owned()
                } else {
                    allowed.to_range_string()
                }),
            ),
        };
        Self {
            port: o.port.to_string(),
            admin: o.admin.map(|a| match a {
                AdminState::Up => "up",
                AdminState::Down => "down",
            }),
            mode,
            access_vlan,
            native_vlan,
            allowed_vlans,
            description: o.description.clone().flatten().map(|d| d.to_string()),
            mtu: o.mtu.flatten().map(|m| m.get()),
            missing_vlans: o
                .missing_vlans
                .as_ref()
                .filter(|m| !m.is_empty())
                .map(|m| m.to_range_string()),
        }
    }
}

/// Runs one `patchbay device` action; returns what to print.
pub async fn run(
    provider: &Path,
    secret: Option<&Path>,
    port: &str,
    command: DeviceCommand,
) -> Result<String> {
    let port = PortName::parse(port).map_err(|e| invalid(format!("PORT {port:?}: {}", e.0)))?;
    // Parse everything before dialling.
    let desired = match &command {
        DeviceCommand::Apply { config, .. } => {
            let c: SwitchPortConfiguration = load_manifest(config, "SwitchPortConfiguration")?;
            let d = configuration_to_desired(&c.spec, port.clone())
                .map_err(|e| invalid(format!("{}: {e}", config.display())))?;
            Some(d)
        }
        _ => None,
    };
    let (_, backend) = device(provider, secret)?;
    let sw = backend.device();
    if let Some(d) = &desired {
        let missing = sw.capabilities().missing_for(d);
        if !missing.is_empty() {
            let names: Vec<String> = missing.iter().map(ToString::to_string).collect();
            return Err(invalid(format!(
                "{} cannot configure: {}",
                backend.described(),
                names.join(", ")
            )));
        }
    }
    let view = |o: &ObservedPort| {
        patchbay_providers::yaml::to_string(&PortView::from(o)).unwrap_or_default()
    };
    let changed = |c: PortChange| match c {
        PortChange::Changed => "changed",
        PortChange::Unchanged => "unchanged (the device already matched; nothing was sent)",
    };
    Ok(match command {
        DeviceCommand::Show => view(&sw.get_port(&port).await?),
        DeviceCommand::Apply { dry_run: true, .. } => {
            let d = desired.expect("parsed above");
            let lines = backend.dry_run(&[PortOperation::Set(d)]).await?;
            if lines.is_empty() {
                "# the device already matches; nothing would be sent\n".to_owned()
            } else {
                lines.join("\n") + "\n"
            }
        }
        DeviceCommand::Apply { .. } => {
            let d = desired.expect("parsed above");
            let c = apply_verified(sw, &d).await?;
            format!(
                "# {}; read back:\n{}",
                changed(c),
                view(&sw.get_port(&port).await?)
            )
        }
        DeviceCommand::Reset => {
            let c = reset_verified(sw, &port).await?;
            format!(
                "# {}; read back:\n{}",
                changed(c),
                view(&sw.get_port(&port).await?)
            )
        }
    })
}

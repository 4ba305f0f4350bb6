//! Operator settings, from flags, environment variables and a config file, in that
//! precedence (seed 004's convention), with a default for each. Pure apart from
//! reading the config file.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::decide::state_machine::Backoff;

/// The settings `patchbay run` works with.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// Only watch this namespace (all when `None`).
    pub namespace: Option<String>,
    /// The longest a switch worker gathers port operations into one batch, from the
    /// first one.
    pub batch_window: Duration,
    /// In a burst, a batch closes earlier once no operation arrived for this long (a
    /// lone change, after a quiet spell of a whole window, does not wait at all).
    pub batch_quiet: Duration,
    /// How often Active ports are read back for drift (one read per switch).
    pub drift_interval: Duration,
    /// Most device sessions per switch at once (a ProviderSwitch may lower or raise it
    /// with `options.maxSessions`).
    pub max_sessions: usize,
    /// Retry backoff after failures.
    pub backoff: Backoff,
    /// Looks a second the whole operator spends on failures that last
    /// ([`crate::decide::retry::Budget`]).
    pub rechecks_per_second: f64,
    /// Latency of every operation on fixture devices (demos and benchmarks).
    pub fixture_latency: Duration,
    /// Where fixture devices keep their ports across processes (benchmarks of a
    /// restart or a takeover); `None`: in memory only.
    pub fixture_state_dir: Option<PathBuf>,
    /// The longest a device batch may take (set from the leader election's timings:
    /// `leaseDuration − renewDeadline`); `None`: unbounded.
    pub batch_timeout: Option<Duration>,
    /// The `ansible-playbook` the Ansible backend runs.
    pub ansible_playbook: PathBuf,
    /// Tenancy (VLANPool grants checked, ports parked); `None` without
    /// `--infra-namespace`: one tenant, nothing checked.
    pub tenancy: Option<crate::decide::tenancy::Tenancy>,
    /// Kubernetes Nodes (and MetalLB `BGPPeer`s) given their Server's BGP peers;
    /// `None` without `--bgp-node-selector`: no Node is touched.
    pub bgp_nodes: Option<crate::decide::bgp_nodes::BgpNodes>,
    /// Drive Metal3 BareMetalSwitches and BareMetalHosts' `networkInterfaces`
    /// (`--metal3-switches`): off by default.
    pub metal3_switches: bool,
    /// The SwitchPortConfiguration a Metal3 host's interfaces carry while it is
    /// inspected, prepared, provisioned and deprovisioned
    /// (`--metal3-provisioning-configuration namespace/name`); `None`: clean.
    pub metal3_provisioning: Option<crate::api::ConfigurationRef>,
    /// How a configuration's edit rolls out when its `spec.rollout` leaves a field
    /// out, and the limits a tenant's policy stays within.
    pub rollout: crate::decide::rollout::Defaults,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            namespace: None,
            batch_window: Duration::from_millis(100),
            batch_quiet: Duration::from_millis(20),
            drift_interval: Duration::from_secs(300),
            max_sessions: 1,
            backoff: Backoff::default(),
            rechecks_per_second: crate::decide::retry::RECHECKS_PER_SECOND,
            fixture_latency: Duration::ZERO,
            fixture_state_dir: None,
            batch_timeout: None,
            ansible_playbook: PathBuf::from("ansible-playbook"),
            tenancy: None,
            bgp_nodes: None,
            metal3_switches: false,
            metal3_provisioning: None,
            rollout: crate::decide::rollout::Defaults::default(),
        }
    }
}

/// Every setting as the user gives it: one struct for the flags, their environment
/// variables and the config file (same names, camelCase in the file). Each field is
/// optional; [`Settings::resolve`] takes a flag (or its environment variable) over
/// the file, the file over the default.
#[derive(
    Debug,
    Default,
    Clone,
    PartialEq,
    clap::Args,
    serde::Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SettingsArgs {
    /// Only watch this namespace [default: all namespaces].
    #[arg(long, env = "PATCHBAY_NAMESPACE")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Longest a switch worker gathers port changes into one batch, in milliseconds
    /// from the first change [default: 100].
    #[arg(long, env = "PATCHBAY_BATCH_WINDOW_MS")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_window_ms: Option<u64>,
    /// In a burst, a batch closes once no change arrived for this many milliseconds
    /// (at most batchWindowMs) [default: 20].
    #[arg(long, env = "PATCHBAY_BATCH_QUIET_MS")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_quiet_ms: Option<u64>,
    /// Seconds between drift checks of Active ports (one read per switch) [default: 300].
    #[arg(long, env = "PATCHBAY_DRIFT_INTERVAL_SECONDS")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drift_interval_seconds: Option<u64>,
    /// Most device sessions per switch at once; a ProviderSwitch's options.maxSessions
    /// overrides it [default: 1].
    #[arg(long, env = "PATCHBAY_MAX_SESSIONS")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_sessions: Option<usize>,
    /// Seconds of backoff after a first failure; doubles per failure [default: 5].
    #[arg(long, env = "PATCHBAY_BACKOFF_BASE_SECONDS")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff_base_seconds: Option<f64>,
    /// Longest backoff in seconds [default: 300].
    #[arg(long, env = "PATCHBAY_BACKOFF_CAP_SECONDS")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff_cap_seconds: Option<f64>,
    /// Looks a second the whole operator spends on failures that last: retries past
    /// the backoff's cap and the API server's refusals, each no sooner than its own
    /// time [default: 2].
    #[arg(long, env = "PATCHBAY_RECHECKS_PER_SECOND")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rechecks_per_second: Option<f64>,
    /// Latency of every fixture-device operation, in milliseconds [default: 0].
    #[arg(long, env = "PATCHBAY_FIXTURE_LATENCY_MS")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fixture_latency_ms: Option<u64>,
    /// A directory where fixture devices keep their ports' configuration, so the
    /// next operator process meets them as this one left them (benchmarks of a
    /// restart or a takeover) [default: none, in memory].
    #[arg(long, env = "PATCHBAY_FIXTURE_STATE_DIR")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fixture_state_dir: Option<PathBuf>,
    /// The `ansible-playbook` executable of the Ansible backend [default:
    /// ansible-playbook, from PATH].
    #[arg(long, env = "PATCHBAY_ANSIBLE_PLAYBOOK")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ansible_playbook: Option<PathBuf>,
    /// The infra team's namespace: turns tenancy on (VLANPool grants are checked
    /// for every other namespace, free ports are parked) [default: none, tenancy off].
    #[arg(long, env = "PATCHBAY_INFRA_NAMESPACE")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub infra_namespace: Option<String>,
    /// The VLAN ports no configuration governs are parked on (access, granted to no
    /// namespace); required with infraNamespace.
    #[arg(long, env = "PATCHBAY_PARKING_VLAN")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parking_vlan: Option<u16>,
    /// Namespaces (comma-separated) whose BareMetalHosts' spec.ports are honoured
    /// besides the infra namespace [default: none].
    #[arg(long, env = "PATCHBAY_TRUSTED_HOST_NAMESPACES", value_delimiter = ',')]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trusted_host_namespaces: Option<Vec<String>>,
    /// Let tenant claims copy their Servers' BMC credentials
    /// (inventory.includeBmcCredentials) under tenancy [default: false].
    #[arg(long, env = "PATCHBAY_ALLOW_BMC_CREDENTIALS")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_bmc_credentials: Option<bool>,
    /// Give the Kubernetes Nodes this label selector selects (`key=value,…`; empty:
    /// every Node) their Server's BGP peers as `patchbay.dev/bgp-peers-*`
    /// annotations; a Node is a Server's by its label patchbay.dev/server or its
    /// providerID patchbay://SERVER [default: none, no Node touched].
    #[arg(long, env = "PATCHBAY_BGP_NODE_SELECTOR")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bgp_node_selector: Option<String>,
    /// Also write a MetalLB BGPPeer per peer (and a copy of its password Secret) in
    /// this namespace, for the selected Nodes; needs bgpNodeSelector [default: none].
    #[arg(long, env = "PATCHBAY_METALLB_NAMESPACE")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metallb_namespace: Option<String>,
    /// Drive Metal3 BareMetalSwitches: each becomes a ProviderSwitch of the same
    /// name that a patchbay Switch declares ports on. Needs the baremetal-operator's
    /// BareMetalSwitch CRD, and Ironic's networking off (BMO without
    /// IRONIC_NETWORKING_ENABLED): one writer per switch [default: false].
    #[arg(long, env = "PATCHBAY_METAL3_SWITCHES")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metal3_switches: Option<bool>,
    /// With metal3Switches: the SwitchPortConfiguration (namespace/name) a
    /// BareMetalHost's networkInterfaces carry while the host is inspected,
    /// prepared, provisioned or deprovisioned (Ironic's provisioning network)
    /// [default: none: those ports are clean].
    #[arg(long, env = "PATCHBAY_METAL3_PROVISIONING_CONFIGURATION")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metal3_provisioning_configuration: Option<String>,
    /// A configuration edit's first wave when its spec.rollout names none: this
    /// many ports [default: 1].
    #[arg(long, env = "PATCHBAY_ROLLOUT_CANARY_PORTS")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout_canary_ports: Option<u32>,
    /// The most ports a configuration edit changes at once, a count or a
    /// percentage, when its spec.rollout says nothing [default: 25%].
    #[arg(long, env = "PATCHBAY_ROLLOUT_MAX_UNAVAILABLE")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout_max_unavailable: Option<String>,
    /// The same, on any one switch [default: 50%].
    #[arg(long, env = "PATCHBAY_ROLLOUT_MAX_UNAVAILABLE_PER_SWITCH")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout_max_unavailable_per_switch: Option<String>,
    /// Seconds a wave's ports must read back Active before the next wave, when
    /// spec.rollout says nothing [default: 0].
    #[arg(long, env = "PATCHBAY_ROLLOUT_MIN_WAIT_SECONDS")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout_min_wait_seconds: Option<u32>,
    /// Seconds a wave may take to pass its gates before it is rolled back, when
    /// spec.rollout says nothing [default: 600].
    #[arg(long, env = "PATCHBAY_ROLLOUT_PROGRESS_DEADLINE_SECONDS")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout_progress_deadline_seconds: Option<u32>,
    /// With tenancy: the most maxUnavailable a tenant's configuration may ask for
    /// (count or percentage) [default: no limit].
    #[arg(long, env = "PATCHBAY_ROLLOUT_TENANT_MAX_UNAVAILABLE")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout_tenant_max_unavailable: Option<String>,
    /// With tenancy: the most maxUnavailablePerSwitch a tenant's configuration may
    /// ask for [default: no limit].
    #[arg(long, env = "PATCHBAY_ROLLOUT_TENANT_MAX_UNAVAILABLE_PER_SWITCH")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout_tenant_max_unavailable_per_switch: Option<String>,
    /// Turns the Node Ready gate on: a wave's hosts that are Kubernetes Nodes must
    /// still be Ready this many seconds (the controller manager's
    /// --node-monitor-grace-period) and 5 more after their port changed; needs list
    /// on nodes [default: off].
    #[arg(long, env = "PATCHBAY_ROLLOUT_NODE_GRACE_SECONDS")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout_node_grace_seconds: Option<u32>,
}

impl SettingsArgs {
    /// These settings, with `fallback`'s where these have none (field by field, via
    /// their serialised form: no field list to keep in step).
    pub fn or(&self, fallback: &SettingsArgs) -> SettingsArgs {
        let mut merged = serde_json::to_value(fallback).unwrap_or_default();
        if let (Some(m), Ok(serde_json::Value::Object(mine))) =
            (merged.as_object_mut(), serde_json::to_value(self))
        {
            m.extend(mine);
        }
        serde_json::from_value(merged).unwrap_or_else(|_| self.clone())
    }

    /// Reads a config file, refusing keys no setting has with the nearest known one.
    pub fn from_file(path: &Path) -> Result<SettingsArgs, SettingsError> {
        let text = std::fs::read_to_string(path).map_err(|source| SettingsError::Read {
            path: path.to_owned(),
            source,
        })?;
        let value: serde_json::Value =
            patchbay_providers::yaml::from_str(&text).map_err(|source| SettingsError::Parse {
                path: path.to_owned(),
                source,
            })?;
        let schema = serde_json::to_value(schemars::schema_for!(SettingsArgs)).unwrap_or_default();
        let errors = crate::decide::validate::unknown_fields::unknown_fields(&schema, &value);
        if !errors.is_empty() {
            return Err(SettingsError::Unknown {
                path: path.to_owned(),
                errors,
            });
        }
        if value.is_null() {
            return Ok(SettingsArgs::default());
        }
        // Read again into the typed settings so a wrong value's error names its line.
        patchbay_providers::yaml::from_str(&text).map_err(|source| SettingsError::Parse {
            path: path.to_owned(),
            source,
        })
    }
}

/// Why settings could not be built.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    /// The config file could not be read.
    #[error("reading the config file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The config file is not valid.
    #[error("config file {path}: {source}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: patchbay_providers::yaml::Error,
    },
    /// The config file has keys no setting has (misspelt).
    #[error("config file {path}: {}", .errors.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Unknown {
        /// The file.
        path: PathBuf,
        /// Each unknown key, with the nearest known one.
        errors: Vec<crate::decide::validate::FieldError>,
    },
    /// A value is out of range.
    #[error("{field}: {reason}")]
    Invalid {
        /// The setting.
        field: &'static str,
        /// Why.
        reason: String,
    },
}

impl Settings {
    /// Flags/environment first, then the file, then the defaults.
    pub fn resolve(args: &SettingsArgs, file: Option<&Path>) -> Result<Self, SettingsError> {
        let args = match file {
            None => args.clone(),
            Some(path) => args.or(&SettingsArgs::from_file(path)?),
        };
        let d = Settings::default();
        let secs = |v: f64, field: &'static str| {
            if v.is_finite() && v > 0.0 && v <= 86_400.0 {
                Ok(Duration::from_secs_f64(v))
            } else {
                Err(SettingsError::Invalid {
                    field,
                    reason: format!("{v} is not a duration in (0, 86400] seconds"),
                })
            }
        };
        let max_sessions = args.max_sessions.unwrap_or(d.max_sessions);
        if !(1..=16).contains(&max_sessions) {
            return Err(SettingsError::Invalid {
                field: "maxSessions",
                reason: format!("{max_sessions} is outside 1-16"),
            });
        }
        let drift = args
            .drift_interval_seconds
            .map(|s| secs(s as f64, "driftIntervalSeconds"))
            .transpose()?
            .unwrap_or(d.drift_interval);
        let base = args
            .backoff_base_seconds
            .map(|s| secs(s, "backoffBaseSeconds"))
            .transpose()?
            .unwrap_or(d.backoff.base);
        let cap = args
            .backoff_cap_seconds
            .map(|s| secs(s, "backoffCapSeconds"))
            .transpose()?
            .unwrap_or(d.backoff.cap);
        if cap < base {
            return Err(SettingsError::Invalid {
                field: "backoffCapSeconds",
                reason: "must not be below backoffBaseSeconds".into(),
            });
        }
        let rechecks = args
            .rechecks_per_second
            .unwrap_or(crate::decide::retry::RECHECKS_PER_SECOND);
        if !(rechecks.is_finite() && rechecks > 0.0) {
            return Err(SettingsError::Invalid {
                field: "rechecksPerSecond",
                reason: format!("{rechecks} is not a positive number"),
            });
        }
        let window = args.batch_window_ms.unwrap_or(100);
        if window > 10_000 {
            return Err(SettingsError::Invalid {
                field: "batchWindowMs",
                reason: format!("{window} is above 10000"),
            });
        }
        let quiet = args.batch_quiet_ms.unwrap_or(20);
        if args.batch_quiet_ms.is_some() && quiet > window {
            return Err(SettingsError::Invalid {
                field: "batchQuietMs",
                reason: format!("{quiet} is above batchWindowMs ({window})"),
            });
        }
        let tenancy = match (&args.infra_namespace, args.parking_vlan) {
            (None, None) => None,
            (None, Some(_)) => {
                return Err(SettingsError::Invalid {
                    field: "parkingVlan",
                    reason: "needs infraNamespace (tenancy is off without it)".into(),
                });
            }
            (Some(_), None) => {
                return Err(SettingsError::Invalid {
                    field: "parkingVlan",
                    reason: "is required with infraNamespace: ports no configuration governs \
                             are parked on it"
                        .into(),
                });
            }
            (Some(infra), Some(vlan)) => Some(crate::decide::tenancy::Tenancy {
                infra_namespace: infra.clone(),
                parking_vlan: patchbay_providers::values::VlanId::new(vlan).map_err(|e| {
                    SettingsError::Invalid {
                        field: "parkingVlan",
                        reason: e.to_string(),
                    }
                })?,
                trusted_host_namespaces: args
                    .trusted_host_namespaces
                    .iter()
                    .flatten()
                    .filter(|n| !n.is_empty())
                    .cloned()
                    .collect(),
                allow_bmc_credentials: args.allow_bmc_credentials.unwrap_or(false),
            }),
        };
        let bgp_nodes = match (&args.bgp_node_selector, &args.metallb_namespace) {
            (None, None) => None,
            (None, Some(_)) => {
                return Err(SettingsError::Invalid {
                    field: "metallbNamespace",
                    reason: "needs bgpNodeSelector (no Node is touched without it)".into(),
                });
            }
            (Some(selector), metallb) => Some(crate::decide::bgp_nodes::BgpNodes {
                selector: crate::decide::bgp_nodes::check_selector(selector).map_err(|reason| {
                    SettingsError::Invalid {
                        field: "bgpNodeSelector",
                        reason,
                    }
                })?,
                metallb_namespace: metallb.clone().filter(|n| !n.is_empty()),
            }),
        };
        let rollout = rollout_defaults(&args)?;
        Ok(Settings {
            rollout,
            namespace: args.namespace.clone(),
            batch_window: Duration::from_millis(window),
            batch_quiet: Duration::from_millis(quiet.min(window)),
            drift_interval: drift,
            max_sessions,
            backoff: Backoff { base, cap },
            rechecks_per_second: rechecks,
            fixture_latency: Duration::from_millis(args.fixture_latency_ms.unwrap_or(0)),
            fixture_state_dir: args.fixture_state_dir.clone(),
            batch_timeout: None,
            ansible_playbook: args
                .ansible_playbook
                .clone()
                .unwrap_or_else(|| PathBuf::from("ansible-playbook")),
            tenancy,
            bgp_nodes,
            metal3_switches: args.metal3_switches.unwrap_or(false),
            metal3_provisioning: match args.metal3_provisioning_configuration.as_deref() {
                None => None,
                Some(r) => match r.split_once('/') {
                    Some((ns, name))
                        if !ns.is_empty() && !name.is_empty() && !name.contains('/') =>
                    {
                        Some(crate::api::ConfigurationRef {
                            name: name.to_owned(),
                            namespace: Some(ns.to_owned()),
                        })
                    }
                    _ => {
                        return Err(SettingsError::Invalid {
                            field: "metal3ProvisioningConfiguration",
                            reason: format!("{r:?} is not namespace/name"),
                        });
                    }
                },
            },
        })
    }
}

/// The rollout settings: the default policy and a tenant's limits.
fn rollout_defaults(
    args: &SettingsArgs,
) -> Result<crate::decide::rollout::Defaults, SettingsError> {
    use crate::decide::rollout::{Amount, Canary, Defaults, Limits};
    let d = Defaults::default();
    let amount = |value: &Option<String>, field: &'static str, default: Amount| {
        value
            .as_deref()
            .map(|v| Amount::parse(v).map_err(|reason| SettingsError::Invalid { field, reason }))
            .transpose()
            .map(|a| a.unwrap_or(default))
    };
    let mut policy = d.policy;
    if let Some(n) = args.rollout_canary_ports {
        if n == 0 {
            return Err(SettingsError::Invalid {
                field: "rolloutCanaryPorts",
                reason: "0 would never move a port: at least 1".into(),
            });
        }
        policy.canary = Canary::Ports(n);
    }
    policy.max_unavailable = amount(
        &args.rollout_max_unavailable,
        "rolloutMaxUnavailable",
        policy.max_unavailable,
    )?;
    policy.max_unavailable_per_switch = amount(
        &args.rollout_max_unavailable_per_switch,
        "rolloutMaxUnavailablePerSwitch",
        policy.max_unavailable_per_switch,
    )?;
    let limits = match (
        &args.rollout_tenant_max_unavailable,
        &args.rollout_tenant_max_unavailable_per_switch,
    ) {
        (None, None) => None,
        (overall, per_switch) => Some(Limits {
            max_unavailable: amount(overall, "rolloutTenantMaxUnavailable", Amount::Percent(100))?,
            max_unavailable_per_switch: amount(
                per_switch,
                "rolloutTenantMaxUnavailablePerSwitch",
                Amount::Percent(100),
            )?,
        }),
    };
    let deadline = args
        .rollout_progress_deadline_seconds
        .map_or(d.progress_deadline_seconds, i64::from);
    if deadline < 10 {
        return Err(SettingsError::Invalid {
            field: "rolloutProgressDeadlineSeconds",
            reason: format!("{deadline} is below 10"),
        });
    }
    Ok(Defaults {
        policy,
        min_wait_seconds: args
            .rollout_min_wait_seconds
            .map_or(d.min_wait_seconds, i64::from),
        progress_deadline_seconds: deadline,
        limits,
        node_grace_seconds: args.rollout_node_grace_seconds.map(i64::from),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_beat_the_file_which_beats_the_defaults() {
        let dir = std::env::temp_dir().join(format!("pb-settings-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("patchbay.yaml");
        std::fs::write(
            &file,
            "batchWindowMs: 250\ndriftIntervalSeconds: 60\nmaxSessions: 2\n",
        )
        .unwrap();
        let args = SettingsArgs {
            batch_window_ms: Some(20),
            ..Default::default()
        };
        let s = Settings::resolve(&args, Some(&file)).unwrap();
        assert_eq!(s.batch_window, Duration::from_millis(20));
        assert_eq!(s.drift_interval, Duration::from_secs(60));
        assert_eq!(s.max_sessions, 2);
        assert_eq!(s.backoff, Backoff::default());
        std::fs::write(&file, "batchWindow: 1\n").unwrap();
        let err = Settings::resolve(&SettingsArgs::default(), Some(&file)).unwrap_err();
        assert!(
            err.to_string()
                .ends_with("batchWindow: unknown field, did you mean \"batchWindowMs\"?"),
            "{err}"
        );
        let bad = SettingsArgs {
            max_sessions: Some(0),
            ..Default::default()
        };
        assert!(
            Settings::resolve(&bad, None)
                .unwrap_err()
                .to_string()
                .starts_with("maxSessions")
        );
        // The quiet gap is at most the window; a short window shortens the default.
        let loud = SettingsArgs {
            batch_window_ms: Some(50),
            batch_quiet_ms: Some(60),
            ..Default::default()
        };
        let err = Settings::resolve(&loud, None).unwrap_err().to_string();
        assert!(
            err.starts_with("batchQuietMs") && err.contains("above"),
            "{err}"
        );
        let short = SettingsArgs {
            batch_window_ms: Some(5),
            ..Default::default()
        };
        let s = Settings::resolve(&short, None).unwrap();
        assert_eq!(
            (s.batch_window, s.batch_quiet),
            (Duration::from_millis(5), Duration::from_millis(5))
        );
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn tenancy_needs_an_infra_namespace_and_a_parking_vlan() {
        let on = SettingsArgs {
            infra_namespace: Some("infra".into()),
            parking_vlan: Some(4000),
            trusted_host_namespaces: Some(vec!["metal3".into()]),
            ..Default::default()
        };
        let t = Settings::resolve(&on, None).unwrap().tenancy.unwrap();
        assert_eq!(t.infra_namespace, "infra");
        assert!(t.trusts_hosts_of("metal3") && t.trusts_hosts_of("infra"));
        assert!(!t.trusts_hosts_of("tenant-a"));
        assert_eq!(
            Settings::resolve(&SettingsArgs::default(), None)
                .unwrap()
                .tenancy,
            None
        );
        for (infra, vlan, word) in [
            (Some("infra"), None, "is required"),
            (None, Some(4000), "needs infraNamespace"),
            (Some("infra"), Some(5000), "4094"),
        ] {
            let args = SettingsArgs {
                infra_namespace: infra.map(Into::into),
                parking_vlan: vlan,
                ..Default::default()
            };
            let err = Settings::resolve(&args, None).unwrap_err().to_string();
            assert!(
                err.starts_with("parkingVlan: ") && err.contains(word),
                "{err}"
            );
        }
    }

    #[test]
    fn the_recheck_budget_is_a_positive_rate() {
        let rate = |r: Option<f64>| {
            Settings::resolve(
                &SettingsArgs {
                    rechecks_per_second: r,
                    ..Default::default()
                },
                None,
            )
            .map(|s| s.rechecks_per_second)
            .map_err(|e| e.to_string())
        };
        assert_eq!(rate(None), Ok(crate::decide::retry::RECHECKS_PER_SECOND));
        assert_eq!(rate(Some(0.5)), Ok(0.5));
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            let err = rate(Some(bad)).unwrap_err();
            assert!(err.starts_with("rechecksPerSecond: "), "{err}");
        }
    }

    #[test]
    fn nodes_are_touched_only_with_a_valid_node_selector() {
        let off = Settings::resolve(&SettingsArgs::default(), None).unwrap();
        assert_eq!(off.bgp_nodes, None);
        let on = SettingsArgs {
            bgp_node_selector: Some("patchbay.dev/bgp = on".into()),
            metallb_namespace: Some("metallb-system".into()),
            ..Default::default()
        };
        let b = Settings::resolve(&on, None).unwrap().bgp_nodes.unwrap();
        assert_eq!(b.selector, "patchbay.dev/bgp=on");
        assert_eq!(b.metallb_namespace.as_deref(), Some("metallb-system"));
        let every = SettingsArgs {
            bgp_node_selector: Some(String::new()),
            ..Default::default()
        };
        let b = Settings::resolve(&every, None).unwrap().bgp_nodes.unwrap();
        assert_eq!((b.selector.as_str(), b.metallb_namespace), ("", None));
        for (selector, metallb, says) in [
            (
                None,
                Some("metallb-system"),
                "metallbNamespace: needs bgpNodeSelector",
            ),
            (Some("zone in (a)"), None, "bgpNodeSelector: "),
        ] {
            let args = SettingsArgs {
                bgp_node_selector: selector.map(Into::into),
                metallb_namespace: metallb.map(Into::into),
                ..Default::default()
            };
            let err = Settings::resolve(&args, None).unwrap_err().to_string();
            assert!(err.starts_with(says), "{err}");
        }
    }
}

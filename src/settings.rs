//! Operator settings, from flags, environment variables and a config file, in that
//! precedence (seed 004's convention), with a default for each. Pure apart from
//! reading the config file.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::state_machine::Backoff;

/// The settings `patchbay run` works with.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// Only watch this namespace (all when `None`).
    pub namespace: Option<String>,
    /// How long a switch worker gathers port operations into one batch.
    pub batch_window: Duration,
    /// How often Active ports are read back for drift (one read per switch).
    pub drift_interval: Duration,
    /// Most device sessions per switch at once (a ProviderSwitch may lower or raise it
    /// with `options.maxSessions`).
    pub max_sessions: usize,
    /// Retry backoff after failures.
    pub backoff: Backoff,
    /// Latency of every operation on fixture devices (demos and benchmarks).
    pub fixture_latency: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            namespace: None,
            batch_window: Duration::from_millis(100),
            drift_interval: Duration::from_secs(300),
            max_sessions: 1,
            backoff: Backoff::default(),
            fixture_latency: Duration::ZERO,
        }
    }
}

/// The config file: every key optional, same names as the flags without dashes.
#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SettingsFile {
    /// See [`Settings::namespace`].
    pub namespace: Option<String>,
    /// Milliseconds; see [`Settings::batch_window`].
    pub batch_window_ms: Option<u64>,
    /// Seconds; see [`Settings::drift_interval`].
    pub drift_interval_seconds: Option<u64>,
    /// See [`Settings::max_sessions`].
    pub max_sessions: Option<usize>,
    /// Seconds; see [`Backoff::base`].
    pub backoff_base_seconds: Option<f64>,
    /// Seconds; see [`Backoff::cap`].
    pub backoff_cap_seconds: Option<f64>,
    /// Milliseconds; see [`Settings::fixture_latency`].
    pub fixture_latency_ms: Option<u64>,
}

/// The same keys as given on the command line or in the environment (`None` = not
/// given there).
#[derive(Debug, Default, Clone)]
pub struct SettingsArgs {
    /// `--namespace` / `PATCHBAY_NAMESPACE`.
    pub namespace: Option<String>,
    /// `--batch-window-ms` / `PATCHBAY_BATCH_WINDOW_MS`.
    pub batch_window_ms: Option<u64>,
    /// `--drift-interval-seconds` / `PATCHBAY_DRIFT_INTERVAL_SECONDS`.
    pub drift_interval_seconds: Option<u64>,
    /// `--max-sessions` / `PATCHBAY_MAX_SESSIONS`.
    pub max_sessions: Option<usize>,
    /// `--backoff-base-seconds` / `PATCHBAY_BACKOFF_BASE_SECONDS`.
    pub backoff_base_seconds: Option<f64>,
    /// `--backoff-cap-seconds` / `PATCHBAY_BACKOFF_CAP_SECONDS`.
    pub backoff_cap_seconds: Option<f64>,
    /// `--fixture-latency-ms` / `PATCHBAY_FIXTURE_LATENCY_MS`.
    pub fixture_latency_ms: Option<u64>,
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
        source: serde_yaml::Error,
    },
    /// The config file has keys no setting has (misspelt).
    #[error("config file {path}: {}", .errors.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Unknown {
        /// The file.
        path: PathBuf,
        /// Each unknown key, with the nearest known one.
        errors: Vec<crate::validate::FieldError>,
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
        let file: SettingsFile = match file {
            None => SettingsFile::default(),
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|source| SettingsError::Read {
                    path: path.to_owned(),
                    source,
                })?;
                let value: serde_yaml::Value =
                    serde_yaml::from_str(&text).map_err(|source| SettingsError::Parse {
                        path: path.to_owned(),
                        source,
                    })?;
                let schema =
                    serde_json::to_value(schemars::schema_for!(SettingsFile)).unwrap_or_default();
                let json = serde_json::to_value(&value).unwrap_or_default();
                let errors = crate::validate::unknown_fields::unknown_fields(&schema, &json);
                if !errors.is_empty() {
                    return Err(SettingsError::Unknown {
                        path: path.to_owned(),
                        errors,
                    });
                }
                serde_yaml::from_value(value).map_err(|source| SettingsError::Parse {
                    path: path.to_owned(),
                    source,
                })?
            }
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
        let max_sessions = args
            .max_sessions
            .or(file.max_sessions)
            .unwrap_or(d.max_sessions);
        if !(1..=16).contains(&max_sessions) {
            return Err(SettingsError::Invalid {
                field: "maxSessions",
                reason: format!("{max_sessions} is outside 1-16"),
            });
        }
        let drift = args
            .drift_interval_seconds
            .or(file.drift_interval_seconds)
            .map(|s| secs(s as f64, "driftIntervalSeconds"))
            .transpose()?
            .unwrap_or(d.drift_interval);
        let base = args
            .backoff_base_seconds
            .or(file.backoff_base_seconds)
            .map(|s| secs(s, "backoffBaseSeconds"))
            .transpose()?
            .unwrap_or(d.backoff.base);
        let cap = args
            .backoff_cap_seconds
            .or(file.backoff_cap_seconds)
            .map(|s| secs(s, "backoffCapSeconds"))
            .transpose()?
            .unwrap_or(d.backoff.cap);
        if cap < base {
            return Err(SettingsError::Invalid {
                field: "backoffCapSeconds",
                reason: "must not be below backoffBaseSeconds".into(),
            });
        }
        let window = args.batch_window_ms.or(file.batch_window_ms).unwrap_or(100);
        if window > 10_000 {
            return Err(SettingsError::Invalid {
                field: "batchWindowMs",
                reason: format!("{window} is above 10000"),
            });
        }
        Ok(Settings {
            namespace: args.namespace.clone().or(file.namespace),
            batch_window: Duration::from_millis(window),
            drift_interval: drift,
            max_sessions,
            backoff: Backoff { base, cap },
            fixture_latency: Duration::from_millis(
                args.fixture_latency_ms
                    .or(file.fixture_latency_ms)
                    .unwrap_or(0),
            ),
        })
    }
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
        std::fs::remove_dir_all(&dir).ok();
    }
}

//! Turns a ProviderSwitch (and its Secret) into a [`Switch`] backend. Pure apart from
//! the in-memory fixture registry.
//!
//! Fixture devices live in this process: one per ProviderSwitch (namespace/name),
//! created on first use with the Switch's device ports, kept across operator
//! restarts within the process (like a real switch keeps its configuration), and
//! reachable through [`FixtureRegistry`] by tests. The SSH CLI, NETCONF, Ansible and
//! OVSDB backends are separate issues; until they land such a ProviderSwitch is
//! reported as not supported, and nothing is sent anywhere.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use patchbay_providers::Switch;
use patchbay_providers::fixture::FixtureSwitch;
use patchbay_providers::values::PortName;

use crate::api::{Backend, ProviderSwitch};

/// The in-memory fixture devices of this process.
#[derive(Clone, Default)]
pub struct FixtureRegistry(Arc<Mutex<HashMap<String, FixtureSwitch>>>);

impl FixtureRegistry {
    /// The fixture device of ProviderSwitch `namespace/name`, if it exists yet.
    pub fn get(&self, namespace: &str, name: &str) -> Option<FixtureSwitch> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&format!("{namespace}/{name}"))
            .cloned()
    }

    fn get_or_create(&self, key: String, ports: &[PortName], latency: Duration) -> FixtureSwitch {
        let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let device = map.entry(key.clone()).or_insert_with(|| {
            let d = FixtureSwitch::new(key, Vec::<PortName>::new());
            d.set_latency(latency);
            d
        });
        device.add_ports(ports.iter().cloned());
        device.clone()
    }
}

/// Why no backend could be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BackendError {
    /// The credentials Secret is missing or lacks keys.
    #[error("credentials: {0}")]
    Credentials(String),
    /// The backend is not available in this build.
    #[error("backend {0} is not available yet in this build of patchbay")]
    Unsupported(&'static str),
}

impl BackendError {
    /// A bounded category for conditions, events and metrics.
    pub fn category(&self) -> &'static str {
        match self {
            BackendError::Credentials(_) => "CredentialsInvalid",
            BackendError::Unsupported(_) => "BackendUnsupported",
        }
    }
}

/// Checks the credentials Secret has what the backend needs. Never reads values into
/// messages.
pub fn check_credentials(
    provider: &ProviderSwitch,
    secret: Option<&Secret>,
) -> Result<(), BackendError> {
    let Some(reference) = &provider.spec.credentials_secret_ref else {
        return Ok(());
    };
    let Some(secret) = secret else {
        return Err(BackendError::Credentials(format!(
            "Secret {:?} (spec.credentialsSecretRef) not found",
            reference.name
        )));
    };
    let data: BTreeMap<String, usize> = secret
        .data
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.0.len()))
        .collect();
    let has = |k: &str| data.get(k).is_some_and(|n| *n > 0);
    if !has("username") {
        return Err(BackendError::Credentials(format!(
            "Secret {:?} has no non-empty key \"username\"",
            reference.name
        )));
    }
    if !has("password") && !has("privateKey") {
        return Err(BackendError::Credentials(format!(
            "Secret {:?} has neither \"password\" nor \"privateKey\"",
            reference.name
        )));
    }
    Ok(())
}

/// Builds backends.
#[derive(Clone, Default)]
pub struct Backends {
    /// The fixture devices.
    pub fixtures: FixtureRegistry,
    /// Latency of every fixture operation.
    pub fixture_latency: Duration,
}

impl Backends {
    /// The backend for `provider`, serving `ports`.
    pub fn build(
        &self,
        provider: &ProviderSwitch,
        secret: Option<&Secret>,
        ports: &[PortName],
    ) -> Result<Arc<dyn Switch>, BackendError> {
        check_credentials(provider, secret)?;
        match provider.spec.backend {
            Backend::Fixture => {
                let key = format!(
                    "{}/{}",
                    provider.metadata.namespace.as_deref().unwrap_or("default"),
                    provider.metadata.name.as_deref().unwrap_or_default()
                );
                Ok(Arc::new(self.fixtures.get_or_create(
                    key,
                    ports,
                    self.fixture_latency,
                )))
            }
            Backend::Ssh => Err(BackendError::Unsupported("ssh")),
            Backend::Netconf => Err(BackendError::Unsupported("netconf")),
            Backend::Ansible => Err(BackendError::Unsupported("ansible")),
            Backend::Ovsdb => Err(BackendError::Unsupported("ovsdb")),
        }
    }
}

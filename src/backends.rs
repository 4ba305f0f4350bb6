//! Turns a ProviderSwitch (and its Secret) into a [`Device`] backend. Pure apart from
//! the in-memory fixture registry.
//!
//! Fixture devices live in this process: one per ProviderSwitch (namespace/name),
//! created on first use with the Switch's device ports, kept across operator
//! restarts within the process (like a real switch keeps its configuration), and
//! reachable through [`FixtureRegistry`] by tests.
//!
//! `ssh` builds a [`CliSwitch`] with the dialect of `spec.os` (ios, powerconnect,
//! dell10g, fastiron, eos) and the credentials of the Secret: `username`, `password`
//! or `privateKey` (+ `passphrase`), optional `enablePassword` (default: none) and
//! `knownHosts`; a Metal3 BareMetalSwitch's Secret names two of them its own way,
//! `ssh-privatekey` and `admin-password`, read where patchbay's are absent
//! ([`METAL3_KEYS`]). The host key is pinned by, in order: `spec.hostKey.fingerprint`,
//! `spec.hostKey.knownHostsLine`, the Secret's `knownHosts` (the line naming the
//! address, `[address]:port`, or the only line); `insecureAcceptAnyHostKey: true`
//! accepts any key and warns on every connect; with none of these the backend is
//! refused (`HostKeyNotPinned`; an unreadable pin is `HostKeyUnusable`) and nothing
//! is dialled.
//!
//! `ovsdb` builds an [`OvsSwitch`] for the bridge `spec.options.bridge`: OVSDB over
//! TCP at `address:port` (default 6640; plain TCP, no login — OVSDB has none, so no
//! Secret is read), and OpenFlow for the admin state at `spec.options.openflow` when
//! given.
//!
//! `netconf` builds a [`NetconfSwitch`] with the device model of `spec.os` (or
//! `spec.options.model`) and the same SSH login, credentials and host-key pin as
//! `ssh` (default port 830). The confirm timeout of its confirmed commits is twice
//! the command timeout.
//!
//! `ansible` builds an [`AnsibleSwitch`]: the built-in playbooks of `spec.os` (ios
//! over the CLI; junos over NETCONF, default port 830)
//! or the directory `spec.options.playbooks`, the Secret's login, and the host key
//! written to each run's known_hosts — the key of `spec.hostKey.knownHostsLine` or
//! the Secret's `knownHosts`, else the key the device presents, checked against
//! `spec.hostKey.fingerprint` before each run (or, labs only, accepted). The hard
//! timeout of a run is `options.commandTimeoutSeconds` (default 300).
//!
//! A neighbour source ([`Backends::neighbor_source`], a Switch's `spec.neighbors`) is built for
//! `os: linux` over `ssh`: a [`LinuxLldp`] with the same login and host-key pin as
//! `ssh`, reading lldpd through `spec.options.lldpSocket` when given; and for an
//! `ovsdb` provider with `spec.options.controlSocket`: its bridge's learned MACs; and
//! for an `ssh` provider whose dialect has a `neighbors:` section (ios, eos): the
//! device's own `show lldp neighbors detail` and MAC table, in a session of its own.
//!
//! A BGP speaker ([`Backends::bgp_speaker`], a Switch's `spec.bgp.speaker`) is an
//! `ssh` provider whose dialect has a `bgp:` section (`os: frr`, and `ios`, whose form
//! is proven only on vtysh and documented output; or a fixture device, which keeps
//! what it is told in memory, for benchmarks): the same login and
//! host-key pin as `ssh`, one session per read or change.

use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use crate::decide::failure::BackendError;
use crate::decide::lease;
use k8s_openapi::api::core::v1::Secret;
use patchbay_providers::ansible::{
    AnsibleAuth, AnsibleHostKey, AnsibleOptions, AnsibleSwitch, AnsibleTarget,
};
use patchbay_providers::cli::transport::check_private_key;
use patchbay_providers::cli::{Auth, CliOptions, CliSwitch, HostKeyPolicy, SshTarget, dialect};
use patchbay_providers::fixture::FixtureSwitch;
use patchbay_providers::linux::{LinuxLldp, LldpSocket};
use patchbay_providers::netconf::{NetconfOptions, NetconfSwitch, model};
use patchbay_providers::ovsdb::{Endpoint, OvsOptions, OvsSwitch};
use patchbay_providers::secret::SecretString;
use patchbay_providers::values::PortName;
use patchbay_providers::{BgpSpeaker, Cause, Device, NeighborSource};

use crate::api::{Backend, BackendOptions, DeviceOs, ProviderSwitch};

/// The in-memory fixture devices of this process, each kept in a file of `dir`
/// when one is given.
#[derive(Clone, Default)]
pub struct FixtureRegistry {
    devices: Arc<Mutex<HashMap<String, FixtureSwitch>>>,
    dir: Option<std::path::PathBuf>,
}

impl FixtureRegistry {
    /// Fixture devices that keep their ports' configuration in `dir`, one file per
    /// ProviderSwitch (`namespace_name.json`): the next process meets them as this
    /// one left them, as a real fleet outlives the operator
    /// ([`FixtureSwitch::keep_in`]; `--fixture-state-dir`, for benchmarks).
    pub fn kept_in(dir: std::path::PathBuf) -> Self {
        Self {
            devices: Arc::default(),
            dir: Some(dir),
        }
    }

    /// The fixture device of ProviderSwitch `namespace/name`, if it exists yet.
    pub fn get(&self, namespace: &str, name: &str) -> Option<FixtureSwitch> {
        self.devices
            .lock()
            .get(&format!("{namespace}/{name}"))
            .cloned()
    }

    fn get_or_create(
        &self,
        key: String,
        ports: &[PortName],
        latency: Duration,
        log_limit: Option<usize>,
    ) -> FixtureSwitch {
        let mut map = self.devices.lock();
        let device = map.entry(key.clone()).or_insert_with(|| {
            let file = self
                .dir
                .as_ref()
                .map(|dir| dir.join(format!("{}.json", key.replace('/', "_"))));
            let d = FixtureSwitch::new(key, Vec::<PortName>::new());
            d.set_latency(latency);
            d.set_log_limit(log_limit);
            if let Some(file) = file
                && let Err(e) = d.keep_in(file.clone())
            {
                tracing::warn!(file = %file.display(), error = %e, "fixture: its kept ports could not be read");
            }
            d
        });
        device.add_ports(ports);
        device.clone()
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
    if provider.spec.backend == Backend::Ovsdb {
        // OVSDB has no login; a Secret, if named, is not read.
        return Ok(());
    }
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
    let has = |k: &str| {
        let alias = METAL3_KEYS
            .iter()
            .find(|(ours, _)| *ours == k)
            .map(|(_, m)| *m);
        [Some(k), alias]
            .into_iter()
            .flatten()
            .any(|k| data.get(k).is_some_and(|n| *n > 0))
    };
    if !has("username") {
        return Err(BackendError::Credentials(format!(
            "Secret {:?} has no non-empty key \"username\"",
            reference.name
        )));
    }
    if !has("password") && !has("privateKey") {
        return Err(BackendError::Credentials(format!(
            "Secret {:?} has neither \"password\" nor \"privateKey\" (nor Metal3's \"ssh-privatekey\")",
            reference.name
        )));
    }
    Ok(())
}

/// Operations each fixture device of the operator binary keeps in its log: none. The
/// log is read only by tests in the same process as the devices, never by anything
/// of the operator binary; unbounded it grew with every batch and read (heaptrack:
/// ~49 MB in a 10,000-port run whose cache lagged), and at 64 entries a device it
/// still held ~4.8 MB of desired states at 10,000 ports (heaptrack of an idle
/// operator, 200 devices).
pub const FIXTURE_LOG_LIMIT: usize = 0;

/// Builds backends.
#[derive(Clone)]
pub struct Backends {
    /// The fixture devices.
    pub fixtures: FixtureRegistry,
    /// Latency of every fixture operation.
    pub fixture_latency: Duration,
    /// How many operations each fixture device logs (`None`: all, for tests that
    /// read the log; the operator binary keeps [`FIXTURE_LOG_LIMIT`]).
    pub fixture_log_limit: Option<usize>,
    /// The `ansible-playbook` the Ansible backend runs.
    pub ansible_playbook: std::path::PathBuf,
    /// How long a NETCONF session is kept for the next batch
    /// ([`NetconfOptions::keep_session`]); the controllers set it to the batch
    /// window.
    pub netconf_keep_session: Duration,
    /// The bound leader election sets on every device session, if any: a
    /// `connectTimeoutSeconds` not shorter than it is built past it, so the bound
    /// governs connecting ([`lease::connect_timeout_seconds`]); the controllers set
    /// it from the settings.
    pub session_bound: Option<Duration>,
}

impl Default for Backends {
    fn default() -> Self {
        Self {
            fixtures: FixtureRegistry::default(),
            fixture_latency: Duration::ZERO,
            fixture_log_limit: None,
            ansible_playbook: "ansible-playbook".into(),
            netconf_keep_session: Duration::ZERO,
            session_bound: None,
        }
    }
}

impl Backends {
    /// The Switch of `provider` now lists `ports`: an in-memory fixture device grows
    /// them (a real device has its ports already; nothing is built or dialled).
    pub fn add_ports(&self, provider: &ProviderSwitch, ports: &[PortName]) {
        if provider.spec.backend == Backend::Fixture {
            let _ = self.fixtures.get_or_create(
                fixture_key(provider),
                ports,
                self.fixture_latency,
                self.fixture_log_limit,
            );
        }
    }

    /// The fixture device of `provider` (created, with no ports, when this process
    /// has none yet): a neighbour source and a BGP speaker besides its ports.
    fn fixture_device(&self, provider: &ProviderSwitch) -> FixtureSwitch {
        self.fixtures.get_or_create(
            fixture_key(provider),
            &[],
            self.fixture_latency,
            self.fixture_log_limit,
        )
    }

    /// Builds the neighbour source of `provider` (validated) from its Secret: `Ok(None)`
    /// when it is not one patchbay reads neighbours from (`linux` over `ssh`, `ovsdb` with
    /// a control socket, `ssh` with a dialect that reads them, or a fixture device).
    /// Reads no value into an error message.
    pub fn neighbor_source(
        &self,
        provider: &ProviderSwitch,
        secret: Option<&Secret>,
    ) -> Result<Option<Arc<dyn NeighborSource>>, BackendError> {
        let spec = &provider.spec;
        if spec.backend == Backend::Fixture {
            return Ok(Some(Arc::new(self.fixture_device(provider))));
        }
        if spec.backend == Backend::Ovsdb {
            let reads = spec
                .options
                .as_ref()
                .is_some_and(|o| o.control_socket.is_some());
            return Ok(reads.then(|| Arc::new(ovs_switch(provider)) as Arc<dyn NeighborSource>));
        }
        if spec.backend == Backend::Ssh && spec.os != DeviceOs::Linux {
            let reads = dialect::for_os(&os_word(provider)).is_some_and(|d| d.neighbors.is_some());
            return Ok(if reads {
                Some(Arc::new(cli_switch(provider, secret)?) as Arc<dyn NeighborSource>)
            } else {
                None
            });
        }
        if (spec.backend, spec.os) != (Backend::Ssh, DeviceOs::Linux) {
            return Ok(None);
        }
        check_credentials(provider, secret)?;
        let target = ssh_target(provider, secret)?;
        let options = provider.spec.options.clone().unwrap_or_default();
        let socket = options
            .lldp_socket
            .as_deref()
            .map(LldpSocket::parse)
            .transpose()
            .map_err(|reason| BackendError::BadOption {
                field: "spec.options.lldpSocket",
                reason,
            })?;
        Ok(Some(Arc::new(LinuxLldp::new(
            target,
            socket,
            seconds(options.command_timeout_seconds, 30),
        ))))
    }

    /// Builds the BGP speaker of `provider` (validated) from its Secret: `Ok(None)` when
    /// it is not one (an `ssh` provider whose dialect keeps BGP neighbours: `frr`,
    /// `ios`; or a fixture device, in memory, for benchmarks and demos).
    /// Reads no value into an error message.
    pub fn bgp_speaker(
        &self,
        provider: &ProviderSwitch,
        secret: Option<&Secret>,
    ) -> Result<Option<Arc<dyn BgpSpeaker>>, BackendError> {
        let spec = &provider.spec;
        if spec.backend == Backend::Fixture {
            return Ok(Some(Arc::new(self.fixture_device(provider))));
        }
        let speaks = spec.backend == Backend::Ssh
            && dialect::for_os(&os_word(provider)).is_some_and(|d| d.bgp.is_some());
        if !speaks {
            return Ok(None);
        }
        Ok(Some(Arc::new(cli_switch(provider, secret)?)))
    }

    /// `provider` as its device backend is built under the session bound, when its
    /// connect timeout changes.
    fn bounded(&self, provider: &ProviderSwitch) -> Option<ProviderSwitch> {
        let configured = provider
            .spec
            .options
            .as_ref()
            .and_then(|o| o.connect_timeout_seconds);
        let built = lease::connect_timeout_seconds(configured, self.session_bound);
        (built != configured).then(|| {
            let mut p = provider.clone();
            p.spec
                .options
                .get_or_insert_with(Default::default)
                .connect_timeout_seconds = built;
            p
        })
    }

    /// The backend for `provider`, serving `ports`; under a session bound, connecting
    /// is bounded by it or by a shorter `connectTimeoutSeconds`.
    pub fn build(
        &self,
        provider: &ProviderSwitch,
        secret: Option<&Secret>,
        ports: &[PortName],
    ) -> Result<Arc<dyn Device>, BackendError> {
        check_credentials(provider, secret)?;
        let bounded;
        let provider = match self.bounded(provider) {
            Some(p) => {
                bounded = p;
                &bounded
            }
            None => provider,
        };
        match provider.spec.backend {
            Backend::Fixture => Ok(Arc::new(self.fixtures.get_or_create(
                fixture_key(provider),
                ports,
                self.fixture_latency,
                self.fixture_log_limit,
            ))),
            Backend::Ssh => Ok(Arc::new(cli_switch(provider, secret)?)),
            Backend::Netconf => Ok(Arc::new(netconf_switch(
                provider,
                secret,
                self.netconf_keep_session,
            )?)),
            Backend::Ansible => Ok(Arc::new(ansible_switch(
                provider,
                secret,
                &self.ansible_playbook,
            )?)),
            Backend::Ovsdb => Ok(Arc::new(ovs_switch(provider))),
        }
    }
}

/// The fixture registry's key of a ProviderSwitch: `namespace/name`.
fn fixture_key(provider: &ProviderSwitch) -> String {
    format!(
        "{}/{}",
        provider.metadata.namespace.as_deref().unwrap_or("default"),
        provider.metadata.name.as_deref().unwrap_or_default()
    )
}

fn secret_value(secret: Option<&Secret>, key: &str) -> Option<SecretString> {
    let raw = |key: &str| {
        let bytes = secret?.data.as_ref()?.get(key)?;
        let text = String::from_utf8(bytes.0.clone()).ok()?;
        (!text.is_empty()).then(|| SecretString::new(text))
    };
    raw(key).or_else(|| {
        METAL3_KEYS
            .iter()
            .find(|(ours, _)| *ours == key)
            .and_then(|(_, theirs)| raw(theirs))
    })
}

/// The keys of a Metal3 BareMetalSwitch's Secret (baremetal-operator v0.14.0-rc.0)
/// that stand for patchbay's own, read when patchbay's is absent: (patchbay's key,
/// Metal3's key). `username` and `password` are the same in both.
pub const METAL3_KEYS: &[(&str, &str)] = &[
    ("privateKey", "ssh-privatekey"),
    ("enablePassword", "admin-password"),
];

/// The known_hosts line of `text` for `address:port`: the line whose host field names
/// it (`address`, `[address]:port`, in a comma list), else the only line.
fn known_hosts_for(text: &str, address: &str, port: u16) -> Option<String> {
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    let bracketed = format!("[{address}]:{port}");
    let named = lines.iter().find(|l| {
        l.split_whitespace().next().is_some_and(|hosts| {
            hosts
                .split(',')
                .any(|h| h == bracketed || (port == 22 && h == address))
        })
    });
    match (named, lines.as_slice()) {
        (Some(l), _) => Some((*l).to_owned()),
        (None, [only]) => Some((*only).to_owned()),
        _ => None,
    }
}

/// `connectTimeoutSeconds`, or its default.
fn connect_timeout(options: &BackendOptions) -> Duration {
    seconds(
        options.connect_timeout_seconds,
        lease::DEFAULT_CONNECT_TIMEOUT_SECONDS.unsigned_abs(),
    )
}

fn seconds(v: Option<i64>, default: u64) -> Duration {
    Duration::from_secs(v.and_then(|v| u64::try_from(v).ok()).unwrap_or(default))
}

/// Builds the Open vSwitch backend for `provider` (validated: ovsdb with a bridge).
pub fn ovs_switch(provider: &ProviderSwitch) -> OvsSwitch {
    let spec = &provider.spec;
    let options = spec.options.clone().unwrap_or_default();
    let port = spec.port_or_default();
    let host = if spec.address.contains(':') {
        format!("[{}]", spec.address)
    } else {
        spec.address.clone()
    };
    OvsSwitch::new(OvsOptions {
        endpoint: Endpoint::Tcp(format!("{host}:{port}")),
        connect_timeout: connect_timeout(&options),
        bridge: options.bridge.unwrap_or_default(),
        openflow: options.openflow,
        command_timeout: seconds(options.command_timeout_seconds, 30),
        control_socket: options.control_socket.map(Into::into),
    })
}

/// What `provider`'s device can configure, as the backend built for it would say,
/// without building it (no Secret, nothing dialled): `patchbay plan`'s view. `None`
/// when patchbay has no backend for it. A fixture switch configures everything.
pub fn capabilities_of(provider: &ProviderSwitch) -> Option<patchbay_providers::Capabilities> {
    let os = os_word(provider);
    let options = provider.spec.options.clone().unwrap_or_default();
    match provider.spec.backend {
        Backend::Fixture => Some(patchbay_providers::Capabilities::all()),
        Backend::Ssh => dialect::for_os(&os).map(|d| d.capabilities()),
        Backend::Netconf => model::for_os(&os, options.model.as_deref()).map(|m| m.capabilities()),
        Backend::Ansible => Some(patchbay_providers::ansible::builtin_capabilities()),
        Backend::Ovsdb => Some(patchbay_providers::ovsdb::capabilities_for(
            options.openflow.is_some(),
        )),
    }
}

/// The os word of `provider` (`ios`, `junos`, …).
pub fn os_word(provider: &ProviderSwitch) -> String {
    serde_json::to_value(provider.spec.os)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

/// Where and how to log in over SSH (ssh and netconf): address, port
/// ([`ProviderSwitchSpec::port_or_default`]), the Secret's login and the pinned host
/// key. Reads no value into an error message.
fn ssh_target(
    provider: &ProviderSwitch,
    secret: Option<&Secret>,
) -> Result<SshTarget, BackendError> {
    let spec = &provider.spec;
    let port = spec.port_or_default();
    let username = secret_value(secret, "username")
        .map(|s| s.expose().to_owned())
        .ok_or_else(|| BackendError::Credentials("no username".into()))?;
    let auth = match (
        secret_value(secret, "privateKey"),
        secret_value(secret, "password"),
    ) {
        (Some(pem), _) => {
            let passphrase = secret_value(secret, "passphrase");
            check_private_key(&pem, passphrase.as_ref()).map_err(|why| {
                BackendError::Credentials(format!(
                    "Secret {:?} key \"privateKey\": {why}",
                    spec.credentials_secret_ref
                        .as_ref()
                        .map(|r| r.name.as_str())
                        .unwrap_or_default()
                ))
            })?;
            Auth::PrivateKey { pem, passphrase }
        }
        (None, Some(pw)) => Auth::Password(pw),
        (None, None) => {
            return Err(BackendError::Credentials(
                "neither \"password\" nor \"privateKey\"".into(),
            ));
        }
    };
    let host_key = match (&spec.host_key, secret_value(secret, "knownHosts")) {
        (Some(pin), _) if pin.fingerprint.is_some() => {
            HostKeyPolicy::Fingerprint(pin.fingerprint.clone().unwrap_or_default())
        }
        (Some(pin), _) if pin.known_hosts_line.is_some() => HostKeyPolicy::from_known_hosts_line(
            pin.known_hosts_line.as_deref().unwrap_or_default(),
        )
        .map_err(|e| BackendError::HostKeyUnusable {
            pin: "spec.hostKey.knownHostsLine",
            cause: Cause::msg(e),
        })?,
        (_, Some(known)) => {
            let pin = "the Secret's knownHosts";
            let line = known_hosts_for(known.expose(), &spec.address, port).ok_or_else(|| {
                BackendError::HostKeyUnusable {
                    pin,
                    cause: Cause::msg(format!(
                        "no line for {} or [{}]:{port}",
                        spec.address, spec.address
                    )),
                }
            })?;
            HostKeyPolicy::from_known_hosts_line(&line).map_err(|e| {
                BackendError::HostKeyUnusable {
                    pin,
                    cause: Cause::msg(e),
                }
            })?
        }
        _ if spec.insecure_accept_any_host_key => HostKeyPolicy::AcceptAny,
        _ => {
            return Err(BackendError::HostKeyNotPinned);
        }
    };
    let options = spec.options.clone().unwrap_or_default();
    Ok(SshTarget {
        address: spec.address.clone(),
        port,
        username,
        auth,
        host_key,
        connect_timeout: connect_timeout(&options),
    })
}

/// Builds the SSH CLI backend for `provider` from its Secret. Reads no value into an
/// error message.
pub fn cli_switch(
    provider: &ProviderSwitch,
    secret: Option<&Secret>,
) -> Result<CliSwitch, BackendError> {
    check_credentials(provider, secret)?;
    let os = os_word(provider);
    let dialect = dialect::for_os(&os).ok_or(BackendError::NoDialect {
        backend: "ssh",
        os: os.clone(),
    })?;
    let target = ssh_target(provider, secret)?;
    let options = provider.spec.options.clone().unwrap_or_default();
    Ok(CliSwitch::new(
        target,
        secret_value(secret, "enablePassword"),
        dialect,
        CliOptions {
            save_config: options.save_config.unwrap_or(true),
            command_timeout: seconds(options.command_timeout_seconds, 30),
        },
    ))
}

/// Builds the Ansible backend for `provider` from its Secret, running
/// `ansible_playbook`. Reads no value into an error message.
pub fn ansible_switch(
    provider: &ProviderSwitch,
    secret: Option<&Secret>,
    ansible_playbook: &std::path::Path,
) -> Result<AnsibleSwitch, BackendError> {
    check_credentials(provider, secret)?;
    let os = os_word(provider);
    let platform =
        patchbay_providers::ansible::contract::platform(&os).ok_or(BackendError::NoDialect {
            backend: "ansible",
            os: os.clone(),
        })?;
    let ssh = ssh_target(provider, secret)?;
    let spec = &provider.spec;
    let known_line = spec
        .host_key
        .as_ref()
        .and_then(|p| p.known_hosts_line.clone())
        .or_else(|| {
            secret_value(secret, "knownHosts")
                .and_then(|k| known_hosts_for(k.expose(), &spec.address, ssh.port))
        });
    let host_key = match known_line {
        // The key itself, from the line (already checked by ssh_target).
        Some(line) => {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let at = fields
                .iter()
                .position(|f| {
                    f.starts_with("ssh-") || f.starts_with("ecdsa-") || f.starts_with("sk-")
                })
                .unwrap_or(0);
            AnsibleHostKey::Known(
                fields[at..]
                    .iter()
                    .take(2)
                    .copied()
                    .collect::<Vec<_>>()
                    .join(" "),
            )
        }
        None => AnsibleHostKey::Verify(ssh.host_key.clone()),
    };
    let auth = match ssh.auth {
        Auth::Password(p) => AnsibleAuth::Password(p),
        Auth::PrivateKey {
            pem,
            passphrase: None,
        } => AnsibleAuth::PrivateKey(pem),
        Auth::PrivateKey { .. } => {
            return Err(BackendError::Credentials(
                "the ansible backend cannot use a key with a passphrase; give an unencrypted \"privateKey\" or a \"password\"".into(),
            ));
        }
    };
    let options = spec.options.clone().unwrap_or_default();
    Ok(AnsibleSwitch::new(
        AnsibleTarget {
            address: ssh.address,
            port: ssh.port,
            username: ssh.username,
            auth,
            enable_password: secret_value(secret, "enablePassword"),
            host_key,
        },
        platform,
        AnsibleOptions {
            ansible_playbook: ansible_playbook.to_owned(),
            playbooks: options.playbooks.map(Into::into),
            run_timeout: seconds(options.command_timeout_seconds, 300),
            connect_timeout: ssh.connect_timeout,
        },
    ))
}

/// Builds the NETCONF backend for `provider` from its Secret, keeping a session
/// `keep_session` for the next call. Reads no value into an error message.
pub fn netconf_switch(
    provider: &ProviderSwitch,
    secret: Option<&Secret>,
    keep_session: Duration,
) -> Result<NetconfSwitch, BackendError> {
    check_credentials(provider, secret)?;
    let os = os_word(provider);
    let options = provider.spec.options.clone().unwrap_or_default();
    let device_model =
        model::for_os(&os, options.model.as_deref()).ok_or(BackendError::NoDialect {
            backend: "netconf",
            os: os.clone(),
        })?;
    let target = ssh_target(provider, secret)?;
    let command_timeout = seconds(options.command_timeout_seconds, 30);
    Ok(NetconfSwitch::new(
        target,
        device_model,
        NetconfOptions {
            command_timeout,
            confirm_timeout: command_timeout * 2,
            keep_session,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_hosts_line_is_chosen_by_address_and_port() {
        let text = "# comment\n[10.0.0.1]:2222 ssh-ed25519 AAAA1\nsw2,10.0.0.2 ssh-rsa AAAA2\n";
        assert_eq!(
            known_hosts_for(text, "10.0.0.1", 2222).as_deref(),
            Some("[10.0.0.1]:2222 ssh-ed25519 AAAA1")
        );
        assert_eq!(
            known_hosts_for(text, "10.0.0.2", 22).as_deref(),
            Some("sw2,10.0.0.2 ssh-rsa AAAA2")
        );
        assert_eq!(known_hosts_for(text, "10.0.0.3", 22), None);
        assert_eq!(
            known_hosts_for("x ssh-rsa AAAA", "10.0.0.3", 22).as_deref(),
            Some("x ssh-rsa AAAA")
        );
    }

    fn provider_with_key(backend: &str, os: &str) -> ProviderSwitch {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "patchbay.dev/v1alpha1", "kind": "ProviderSwitch",
            "metadata": {"name": "tor", "namespace": "infra"},
            "spec": {"backend": backend, "os": os, "address": "127.0.0.1",
                     "credentialsSecretRef": {"name": "tor-login"},
                     "hostKey": {"fingerprint": "SHA256:AAAA"}},
        }))
        .unwrap()
    }

    fn secret(pairs: &[(&str, &str)]) -> Secret {
        Secret {
            data: Some(
                pairs
                    .iter()
                    .map(|(k, v)| {
                        (
                            k.to_string(),
                            k8s_openapi::ByteString(v.as_bytes().to_vec()),
                        )
                    })
                    .collect(),
            ),
            ..Default::default()
        }
    }

    #[test]
    fn a_private_key_that_does_not_decode_is_the_secrets_fault_named_and_unquoted() {
        let garbage = "-----BEGIN OPENSSH PRIVATE KEY-----\nbm90IGEga2V5\n-----END OPENSSH PRIVATE KEY-----\n";
        for (backend, os) in [("ssh", "ios"), ("netconf", "junos"), ("ansible", "ios")] {
            let built = Backends::default().build(
                &provider_with_key(backend, os),
                Some(&secret(&[("username", "netops"), ("privateKey", garbage)])),
                &[],
            );
            let Err(e) = built else {
                panic!("{backend}: a key that does not decode was accepted");
            };
            assert_eq!(e.category(), "CredentialsInvalid", "{backend}: {e}");
            let text = e.to_string();
            assert!(
                text.contains("Secret \"tor-login\" key \"privateKey\"")
                    && text.contains("does not decode"),
                "{backend}: {text}"
            );
            assert!(!text.contains("bm90IGEga2V5"), "{text}");
        }
    }

    /// A Metal3 BareMetalSwitch's Secret (`ssh-privatekey`, `admin-password`) is read
    /// as patchbay's own names; patchbay's win where both are given.
    #[test]
    fn metal3_secret_keys_stand_for_patchbays() {
        let p = provider_with_key("ssh", "ios");
        let metal3 = secret(&[
            ("username", "admin"),
            ("ssh-privatekey", "KEY"),
            ("admin-password", "ENABLE"),
        ]);
        assert!(check_credentials(&p, Some(&metal3)).is_ok());
        let value = |s: &Secret, k: &str| secret_value(Some(s), k).map(|v| v.expose().to_owned());
        assert_eq!(value(&metal3, "privateKey").as_deref(), Some("KEY"));
        assert_eq!(value(&metal3, "enablePassword").as_deref(), Some("ENABLE"));
        let both = secret(&[
            ("username", "admin"),
            ("enablePassword", "OURS"),
            ("admin-password", "THEIRS"),
        ]);
        assert_eq!(value(&both, "enablePassword").as_deref(), Some("OURS"));
        let neither = secret(&[("username", "admin")]);
        let e = check_credentials(&p, Some(&neither))
            .unwrap_err()
            .to_string();
        assert!(e.contains("ssh-privatekey") && !e.contains("admin"), "{e}");
    }

    /// The ports the ansible platforms use by default are the ones
    /// `ProviderSwitchSpec::port_or_default` says.
    #[test]
    fn ansible_platform_ports_are_the_specs_defaults() {
        for platform in patchbay_providers::ansible::contract::PLATFORMS {
            let p = provider_with_key("ansible", platform.os);
            assert_eq!(
                p.spec.port_or_default(),
                platform.default_port,
                "{}",
                platform.os
            );
        }
    }
}

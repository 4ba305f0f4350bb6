//! The SSH transport: the only module that touches russh (its API moves between minor
//! versions; keep it here).
//!
//! [`Shell::open`] connects with a timeout, verifies the host key against the pin
//! (or, with [`HostKeyPolicy::AcceptAny`], logs a warning on every connect), logs in
//! with a password or a private key, and opens a pty + interactive shell (switch CLIs,
//! and the simulators, refuse exec channels) or, for NETCONF, a [`Subsystem`]. [`Shell::read_until`] reads with a
//! deadline until a caller-supplied predicate finds the end of an answer.
//!
//! Errors are [`DeviceError`]s built from the address and what the transport said;
//! credentials never enter them.

use parking_lot::Mutex;
use std::sync::Arc;
use std::time::Duration;

use russh::client::{self, AuthResult, Handle, Msg};
use russh::keys::{HashAlg, PrivateKeyWithHashAlg, PublicKey, PublicKeyOrCertificate};
use russh::{Channel, ChannelMsg, Disconnect};
use tokio::time::Instant;
use tracing::warn;

use crate::error::{Cause, DeviceError};
use crate::heard::Heard;
use crate::secret::SecretString;

/// How to log in.
#[derive(Debug, Clone)]
pub enum Auth {
    /// Password authentication.
    Password(SecretString),
    /// Public-key authentication with an OpenSSH / PEM private key.
    PrivateKey {
        /// The key text.
        pem: SecretString,
        /// Its passphrase, if encrypted.
        passphrase: Option<SecretString>,
    },
}

/// How to check the device's host key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostKeyPolicy {
    /// Accept only the key with this OpenSSH SHA256 fingerprint (`SHA256:…`).
    Fingerprint(String),
    /// Accept any host key: labs only; warns on every connect.
    AcceptAny,
}

impl HostKeyPolicy {
    /// The policy for a known_hosts line (`[host] key-type base64-key`): its key's
    /// fingerprint.
    pub fn from_known_hosts_line(line: &str) -> Result<Self, String> {
        fingerprint_of_known_hosts_line(line).map(Self::Fingerprint)
    }
}

/// The SHA256 fingerprint of the key in a known_hosts line.
pub fn fingerprint_of_known_hosts_line(line: &str) -> Result<String, String> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    let at = fields
        .iter()
        .position(|f| f.starts_with("ssh-") || f.starts_with("ecdsa-") || f.starts_with("sk-"))
        .ok_or_else(|| "the known_hosts line has no key type (ssh-…, ecdsa-…)".to_owned())?;
    let blob = fields
        .get(at + 1)
        .ok_or_else(|| "the known_hosts line has no key after its type".to_owned())?;
    let key = PublicKey::from_openssh(&format!("{} {}", fields[at], blob))
        .map_err(|e| format!("the known_hosts key does not parse: {e}"))?;
    Ok(key.fingerprint(HashAlg::Sha256).to_string())
}

/// A device's pager: the prompt it shows when a page is full (a regex anchored at
/// the end of what has arrived) and the key that shows the next page.
#[derive(Debug, Clone)]
pub struct Pager {
    /// The page-full prompt, ending with `$`.
    pub prompt: regex::Regex,
    /// What to type for the next page.
    pub key: String,
}

/// Where and how to connect.
#[derive(Debug, Clone)]
pub struct SshTarget {
    /// Address (IP or DNS name).
    pub address: String,
    /// TCP port.
    pub port: u16,
    /// Login name.
    pub username: String,
    /// Credentials.
    pub auth: Auth,
    /// Host-key check.
    pub host_key: HostKeyPolicy,
    /// Time allowed to connect, verify and log in.
    pub connect_timeout: Duration,
}

/// `address:port` for messages (`[address]:port` for IPv6).
pub fn endpoint(address: &str, port: u16) -> String {
    if address.contains(':') {
        format!("[{address}]:{port}")
    } else {
        format!("{address}:{port}")
    }
}

impl SshTarget {
    /// `address:port`, for messages.
    pub fn endpoint(&self) -> String {
        endpoint(&self.address, self.port)
    }
}

struct Verifier {
    policy: HostKeyPolicy,
    endpoint: String,
    presented: Arc<Mutex<Option<String>>>,
    /// The presented key in OpenSSH form, once verified.
    key: Arc<Mutex<Option<String>>>,
    /// Stamped when the device presents its key (it answered the key exchange).
    heard: Heard,
}

impl client::Handler for Verifier {
    type Error = russh::Error;

    async fn check_server_key(
        &mut self,
        key: &PublicKeyOrCertificate,
    ) -> Result<bool, Self::Error> {
        self.heard.stamp();
        let fingerprint = match key {
            PublicKeyOrCertificate::PublicKey { key, .. } => {
                key.fingerprint(HashAlg::Sha256).to_string()
            }
            PublicKeyOrCertificate::Certificate(cert) => {
                cert.public_key().fingerprint(HashAlg::Sha256).to_string()
            }
        };
        *self.presented.lock() = Some(fingerprint.clone());
        let public = match key {
            PublicKeyOrCertificate::PublicKey { key, .. } => key.to_openssh().ok(),
            PublicKeyOrCertificate::Certificate(cert) => {
                PublicKey::from(cert.public_key().clone()).to_openssh().ok()
            }
        };
        let accepted = match &self.policy {
            HostKeyPolicy::Fingerprint(expected) => *expected == fingerprint,
            HostKeyPolicy::AcceptAny => {
                warn!(
                    endpoint = %self.endpoint,
                    presented = %fingerprint,
                    "host key NOT verified (insecureAcceptAnyHostKey): pin it in the ProviderSwitch"
                );
                true
            }
        };
        if accepted {
            *self.key.lock() = public;
        }
        Ok(accepted)
    }
}

/// An interactive shell on the device.
pub struct Shell {
    handle: Handle<Verifier>,
    channel: Channel<Msg>,
    buf: String,
    endpoint: String,
    heard: Heard,
}

fn unreachable(endpoint: &str, cause: Cause) -> DeviceError {
    DeviceError::Unreachable {
        address: endpoint.to_owned(),
        cause,
    }
}

/// The device's host key in OpenSSH form (`ssh-rsa AAAA…`), verified against the
/// target's pin (key exchange only; no login). For tools that check host keys
/// themselves against a known_hosts file (the Ansible backend).
pub async fn verified_host_key(target: &SshTarget) -> Result<String, DeviceError> {
    let endpoint = target.endpoint();
    let during = format!("reading the host key of {endpoint}");
    let fetch = async {
        let (verifier, presented, key) = verifier(target, &Heard::default());
        let connected = client::connect(
            Arc::new(client::Config::default()),
            (target.address.as_str(), target.port),
            verifier,
        )
        .await;
        match connected {
            Ok(handle) => {
                let _ = handle.disconnect(Disconnect::ByApplication, "", "en").await;
                key.lock()
                    .clone()
                    .ok_or_else(|| unreachable(&endpoint, Cause::msg("no usable host key")))
            }
            Err(e) => Err(connect_error(target, &endpoint, &presented, e)),
        }
    };
    match tokio::time::timeout(target.connect_timeout, fetch).await {
        Ok(r) => r,
        Err(_) => Err(DeviceError::Timeout {
            during,
            after: target.connect_timeout,
        }),
    }
}

type Seen = Arc<Mutex<Option<String>>>;

fn verifier(target: &SshTarget, heard: &Heard) -> (Verifier, Seen, Seen) {
    let presented = Arc::new(Mutex::new(None));
    let key = Arc::new(Mutex::new(None));
    (
        Verifier {
            policy: target.host_key.clone(),
            endpoint: target.endpoint(),
            presented: presented.clone(),
            key: key.clone(),
            heard: heard.clone(),
        },
        presented,
        key,
    )
}

/// A failed connect: a host-key mismatch when the pin was not met, else unreachable.
fn connect_error(
    target: &SshTarget,
    endpoint: &str,
    presented: &Seen,
    e: russh::Error,
) -> DeviceError {
    let seen = presented.lock().clone();
    match (&target.host_key, seen, &e) {
        (HostKeyPolicy::Fingerprint(expected), Some(seen), russh::Error::UnknownKey)
            if *expected != seen =>
        {
            DeviceError::HostKeyMismatch {
                address: endpoint.to_owned(),
                expected: expected.clone(),
                presented: seen,
            }
        }
        _ => unreachable(endpoint, Cause::new(e)),
    }
}

/// Connects with the target's timeout, verifies the host key and logs in.
async fn login(
    target: &SshTarget,
    heard: &Heard,
) -> Result<(Handle<Verifier>, String), DeviceError> {
    let endpoint = target.endpoint();
    let during = format!("connecting to {endpoint}");
    match tokio::time::timeout(target.connect_timeout, login_inner(target, heard)).await {
        Ok(r) => r.map(|h| (h, endpoint)),
        Err(_) => Err(DeviceError::Timeout {
            during,
            after: target.connect_timeout,
        }),
    }
}

async fn login_inner(target: &SshTarget, heard: &Heard) -> Result<Handle<Verifier>, DeviceError> {
    let endpoint = target.endpoint();
    let (verifier, presented, _) = verifier(target, heard);
    let config = Arc::new(client::Config {
        nodelay: true,
        ..client::Config::default()
    });
    let connected = client::connect(config, (target.address.as_str(), target.port), verifier).await;
    let mut handle = match connected {
        Ok(h) => h,
        Err(e) => return Err(connect_error(target, &endpoint, &presented, e)),
    };
    let auth = match &target.auth {
        Auth::Password(p) => handle
            .authenticate_password(target.username.clone(), p.expose())
            .await
            .map_err(|e| unreachable(&endpoint, Cause::during("during authentication", e)))?,
        Auth::PrivateKey { pem, passphrase } => {
            // Checked when the backend was built (`check_private_key`); a key that
            // does not decode is the Secret's fault, never the device's refusal.
            let key = decode_private_key(pem, passphrase.as_ref()).map_err(|why| {
                DeviceError::Protocol {
                    during: "reading the Secret's privateKey".into(),
                    cause: Cause::msg(why),
                }
            })?;
            let hash = handle
                .best_supported_rsa_hash()
                .await
                .map_err(|e| unreachable(&endpoint, Cause::new(e)))?
                .flatten();
            handle
                .authenticate_publickey(
                    target.username.clone(),
                    PrivateKeyWithHashAlg::new(Arc::new(key), hash),
                )
                .await
                .map_err(|e| unreachable(&endpoint, Cause::during("during authentication", e)))?
        }
    };
    match auth {
        AuthResult::Success => {
            heard.stamp();
            Ok(handle)
        }
        // A refusal is the device's answer: a failure message, on a session that
        // lives on (a failure listing the methods that can continue is one even if
        // the device then hangs up). russh reports a session that died while
        // authenticating as a failure with no methods: that is no refusal.
        AuthResult::Failure {
            remaining_methods, ..
        } if !remaining_methods.is_empty() || !handle.is_closed() => {
            Err(DeviceError::AuthenticationFailed { address: endpoint })
        }
        AuthResult::Failure { .. } => Err(unreachable(
            &endpoint,
            Cause::msg("the connection closed during authentication, before the device answered"),
        )),
    }
}

/// Decodes an OpenSSH or PEM private key (with its passphrase, if any); the error
/// says why in words that carry nothing of the key.
fn decode_private_key(
    pem: &SecretString,
    passphrase: Option<&SecretString>,
) -> Result<russh::keys::PrivateKey, String> {
    russh::keys::decode_secret_key(pem.expose(), passphrase.map(SecretString::expose)).map_err(
        |e| match (e, passphrase) {
            (russh::keys::Error::KeyIsEncrypted, None) => {
                "it is encrypted and there is no passphrase".to_owned()
            }
            (_, Some(_)) => {
                "it does not decode as an OpenSSH or PEM private key with the given passphrase"
                    .to_owned()
            }
            (e, None) => format!("it does not decode as an OpenSSH or PEM private key ({e})"),
        },
    )
}

/// Checks that a private key decodes (with its passphrase), before anything is
/// dialled: the reason on failure names nothing of the key.
pub fn check_private_key(
    pem: &SecretString,
    passphrase: Option<&SecretString>,
) -> Result<(), String> {
    decode_private_key(pem, passphrase).map(|_| ())
}

/// Opens a session channel on a logged-in connection.
async fn session_channel(
    handle: &Handle<Verifier>,
    endpoint: &str,
) -> Result<Channel<Msg>, DeviceError> {
    handle
        .channel_open_session()
        .await
        .map_err(|e| unreachable(endpoint, Cause::during("opening a session channel", e)))
}

/// Waits for the next data on `channel` until `deadline`: `Ok(Some(bytes))` (and
/// `heard` stamped), or `Ok(None)` when the device closed the channel.
async fn next_data(
    channel: &mut Channel<Msg>,
    deadline: Instant,
    heard: &Heard,
) -> Result<Option<Vec<u8>>, ()> {
    loop {
        match tokio::time::timeout_at(deadline, channel.wait()).await {
            Err(_) => return Err(()),
            Ok(Some(ChannelMsg::Data { data }))
            | Ok(Some(ChannelMsg::ExtendedData { data, .. })) => {
                heard.stamp();
                return Ok(Some(data.to_vec()));
            }
            Ok(Some(ChannelMsg::Eof)) | Ok(Some(ChannelMsg::Close)) | Ok(None) => return Ok(None),
            Ok(Some(_)) => {}
        }
    }
}

/// Closes the channel and the connection, and waits (briefly) until the connection
/// is gone: a session is over for the device when this returns, so the switch
/// worker's next session never overlaps it, even by the milliseconds the transport
/// would otherwise take to close.
async fn close_all(handle: Handle<Verifier>, channel: Channel<Msg>) {
    let _ = channel.eof().await;
    let _ = channel.close().await;
    drop(channel);
    let _ = handle.disconnect(Disconnect::ByApplication, "", "en").await;
    let _ = tokio::time::timeout(CLOSE_WAIT, handle).await;
}

/// The longest [`close_all`] waits for the connection to end after the disconnect.
const CLOSE_WAIT: Duration = Duration::from_secs(2);

impl Shell {
    /// Connects, verifies the host key, logs in and opens the shell; every answer
    /// of the device stamps `heard`.
    pub async fn open(target: &SshTarget, heard: &Heard) -> Result<Self, DeviceError> {
        let (handle, endpoint) = login(target, heard).await?;
        let channel = session_channel(&handle, &endpoint).await?;
        // A wide terminal so long commands and show lines are not wrapped.
        channel
            .request_pty(false, "vt100", 511, 200, 0, 0, &[])
            .await
            .map_err(|e| unreachable(&endpoint, Cause::during("requesting a pty", e)))?;
        channel
            .request_shell(false)
            .await
            .map_err(|e| unreachable(&endpoint, Cause::during("requesting a shell", e)))?;
        Ok(Self {
            handle,
            channel,
            buf: String::new(),
            endpoint,
            heard: heard.clone(),
        })
    }

    /// The `address:port` of this session.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Sends text as typed input.
    pub async fn write(&mut self, text: &str) -> Result<(), DeviceError> {
        self.channel
            .data_bytes(text.as_bytes().to_vec())
            .await
            .map_err(|e| unreachable(&self.endpoint, Cause::during("sending", e)))
    }

    /// Reads until `done` finds the end of the answer in what has arrived (it returns
    /// the byte offset just past it); returns that text and keeps the rest. Fails with
    /// a timeout after `timeout`, or when the device closes the session.
    pub async fn read_until(
        &mut self,
        done: impl FnMut(&str) -> Option<usize>,
        timeout: Duration,
        during: &str,
    ) -> Result<String, DeviceError> {
        self.read_paged(done, None, timeout, during).await
    }

    /// [`Shell::read_until`] through a pager: whenever what has arrived ends with
    /// the pager's prompt (`--More--`), the prompt is cut out and its key sent, so
    /// the answer arrives whole. Only for one command at a time: a device that
    /// pages takes the next typed character as the key.
    pub async fn read_paged(
        &mut self,
        mut done: impl FnMut(&str) -> Option<usize>,
        pager: Option<&Pager>,
        timeout: Duration,
        during: &str,
    ) -> Result<String, DeviceError> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(end) = done(&self.buf) {
                let rest = self.buf.split_off(end);
                return Ok(std::mem::replace(&mut self.buf, rest));
            }
            if let Some(p) = pager
                && let Some(m) = p.prompt.find(&self.buf)
            {
                self.buf.truncate(m.start());
                self.write(&p.key).await?;
            }
            match next_data(&mut self.channel, deadline, &self.heard).await {
                Ok(Some(data)) => self.buf.push_str(&String::from_utf8_lossy(&data)),
                Ok(None) => {
                    return Err(unreachable(
                        &self.endpoint,
                        Cause::msg(format!("the device closed the session while {during}")),
                    ));
                }
                Err(()) => {
                    return Err(DeviceError::Timeout {
                        during: during.to_owned(),
                        after: timeout,
                    });
                }
            }
        }
    }

    /// Closes the shell and the connection; errors are irrelevant at this point.
    pub async fn close(self) {
        close_all(self.handle, self.channel).await;
    }
}

/// What one command run on an exec channel printed, and how it exited.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecOutput {
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
    /// The exit status (`None` when the device sent none).
    pub status: Option<u32>,
}

/// Runs each of `commands` on its own exec channel (no pty) of one login, in order,
/// each within `timeout`, and closes the connection: for devices with a POSIX shell
/// (Linux-based switches reading lldpd), where answers are whole programs' outputs
/// rather than prompts to wait for. Switch CLIs (and the simulators) refuse exec
/// channels; they use [`Shell`].
pub async fn exec(
    target: &SshTarget,
    commands: &[String],
    timeout: Duration,
) -> Result<Vec<ExecOutput>, DeviceError> {
    let (handle, endpoint) = login(target, &Heard::default()).await?;
    let mut outputs = Vec::with_capacity(commands.len());
    let mut last = None;
    for command in commands {
        let mut channel = session_channel(&handle, &endpoint).await?;
        channel
            .exec(true, command.as_bytes())
            .await
            .map_err(|e| unreachable(&endpoint, Cause::during("starting a command", e)))?;
        let deadline = Instant::now() + timeout;
        let (mut stdout, mut stderr, mut status) = (Vec::new(), Vec::new(), None);
        loop {
            match tokio::time::timeout_at(deadline, channel.wait()).await {
                Err(_) => {
                    close_all(handle, channel).await;
                    return Err(DeviceError::Timeout {
                        during: format!("running `{command}`"),
                        after: timeout,
                    });
                }
                Ok(Some(ChannelMsg::Data { data })) => stdout.extend_from_slice(&data),
                Ok(Some(ChannelMsg::ExtendedData { data, .. })) => stderr.extend_from_slice(&data),
                Ok(Some(ChannelMsg::ExitStatus { exit_status })) => status = Some(exit_status),
                Ok(Some(ChannelMsg::Close)) | Ok(None) => break,
                Ok(Some(_)) => {}
            }
        }
        outputs.push(ExecOutput {
            stdout: String::from_utf8_lossy(&stdout).into_owned(),
            stderr: String::from_utf8_lossy(&stderr).into_owned(),
            status,
        });
        last = Some(channel);
    }
    match last {
        Some(channel) => close_all(handle, channel).await,
        None => {
            let _ = handle.disconnect(Disconnect::ByApplication, "", "en").await;
        }
    }
    Ok(outputs)
}

/// An SSH subsystem channel (NETCONF's `netconf`): raw bytes both ways, no pty.
pub struct Subsystem {
    handle: Handle<Verifier>,
    channel: Channel<Msg>,
    endpoint: String,
    heard: Heard,
}

impl Subsystem {
    /// Connects, verifies the host key, logs in and starts subsystem `name`; every
    /// answer of the device stamps `heard`.
    pub async fn open(target: &SshTarget, name: &str, heard: &Heard) -> Result<Self, DeviceError> {
        let (handle, endpoint) = login(target, heard).await?;
        let channel = session_channel(&handle, &endpoint).await?;
        channel.request_subsystem(true, name).await.map_err(|e| {
            unreachable(
                &endpoint,
                Cause::during(format!("starting the {name} subsystem"), e),
            )
        })?;
        Ok(Self {
            handle,
            channel,
            endpoint,
            heard: heard.clone(),
        })
    }

    /// The `address:port` of this session.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Sends bytes as one channel write (one SSH data message when it fits).
    pub async fn write(&mut self, bytes: &[u8]) -> Result<(), DeviceError> {
        self.channel
            .data_bytes(bytes.to_vec())
            .await
            .map_err(|e| unreachable(&self.endpoint, Cause::during("sending", e)))
    }

    /// The next bytes from the device, waiting until `deadline`: `Ok(None)` when it
    /// closed the channel, `Err(())` when the deadline passed.
    pub async fn read(&mut self, deadline: Instant) -> Result<Option<Vec<u8>>, ()> {
        next_data(&mut self.channel, deadline, &self.heard).await
    }

    /// Drops the connection at once, without a goodbye (what a crash looks like to
    /// the device).
    pub fn abandon(self) {
        drop(self.channel);
        drop(self.handle);
    }

    /// Closes the channel and the connection; errors are irrelevant at this point.
    pub async fn close(self) {
        close_all(self.handle, self.channel).await;
    }
}

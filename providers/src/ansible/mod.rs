//! The Ansible backend: a [`Device`] that runs `ansible-playbook` once per batch
//! (never per port or per line) with patchbay's playbooks (embedded from
//! `playbooks/`) or a directory of the user's own with the same contract
//! ([`contract`]).
//!
//! Every run gets a private temporary directory (0700; files 0600; removed
//! afterwards) holding the inventory with the credentials, the variables, a
//! known_hosts with the pinned host key (HOME points there, and host-key checking is
//! on; a key pinned only by its fingerprint is read from the device first and checked
//! against the pin), `ansible.cfg` (JSON stdout callback, persistent-connection sockets in the
//! directory, their timeouts under the hard timeout) and the playbooks. Nothing
//! secret is on a command line or in an environment variable.
//!
//! At most one run per core runs at once, over all switches of the process.
//!
//! A hard timeout ends a run: the process group is killed, then every process that
//! carries the run's marker in its environment (`PATCHBAY_ANSIBLE_RUN`, inherited
//! by every descendant, including `ansible-connection`, which daemonizes out of the
//! process group) is killed too. The same sweep runs when the run's directory is
//! dropped — after every run, and when the run is cancelled (the switch worker's
//! batch bound under leader election) — so nothing a run started outlives it.

pub mod contract;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::io::AsyncReadExt as _;

use crate::cli::transport::verified_host_key;
use crate::cli::{Auth, HostKeyPolicy, SshTarget};
use crate::device::{Device, PortChange, PortOperation, PortReads, PortResult, batch_results};
use crate::error::{Cause, DeviceError};
use crate::model::{Capabilities, Capability, DesiredPort};
use crate::secret::SecretString;
use crate::values::PortName;

use contract::{Login, Platform};

/// The process-wide bound on `ansible-playbook` runs at once: the machine's cores.
fn run_slots() -> &'static tokio::sync::Semaphore {
    static SLOTS: std::sync::OnceLock<tokio::sync::Semaphore> = std::sync::OnceLock::new();
    SLOTS.get_or_init(|| {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        tokio::sync::Semaphore::new(cores)
    })
}

/// How Ansible logs in.
#[derive(Debug, Clone)]
pub enum AnsibleAuth {
    /// A password.
    Password(SecretString),
    /// An OpenSSH private key (unencrypted).
    PrivateKey(SecretString),
}

/// Where the device is and how to log in.
#[derive(Debug, Clone)]
pub struct AnsibleTarget {
    /// Address.
    pub address: String,
    /// SSH port.
    pub port: u16,
    /// Login name.
    pub username: String,
    /// Credentials.
    pub auth: AnsibleAuth,
    /// Enable password, if the login lands in user mode.
    pub enable_password: Option<SecretString>,
    /// The device's host key, written to the run's known_hosts: Ansible refuses any
    /// other key.
    pub host_key: AnsibleHostKey,
}

/// Where the run's known_hosts entry comes from.
#[derive(Debug, Clone)]
pub enum AnsibleHostKey {
    /// The key itself, OpenSSH form (`ssh-rsa AAAA…`), from a known_hosts line.
    Known(String),
    /// Read the key from the device before each run and check it against this pin
    /// (a fingerprint; or, for labs, any key).
    Verify(HostKeyPolicy),
}

impl AnsibleTarget {
    /// `address:port`, for messages.
    pub fn endpoint(&self) -> String {
        crate::cli::transport::endpoint(&self.address, self.port)
    }
}

/// Backend options.
#[derive(Debug, Clone)]
pub struct AnsibleOptions {
    /// The `ansible-playbook` executable.
    pub ansible_playbook: PathBuf,
    /// A directory with the user's own `apply.yml` and `read.yml` (the contract of
    /// playbooks/README.md); `None` uses patchbay's built-in playbooks.
    pub playbooks: Option<PathBuf>,
    /// The hard timeout of one run.
    pub run_timeout: Duration,
    /// Seconds to connect.
    pub connect_timeout: Duration,
}

impl Default for AnsibleOptions {
    fn default() -> Self {
        Self {
            ansible_playbook: PathBuf::from("ansible-playbook"),
            playbooks: None,
            run_timeout: Duration::from_secs(300),
            connect_timeout: Duration::from_secs(10),
        }
    }
}

/// A switch driven by ansible-playbook.
#[derive(Clone)]
pub struct AnsibleSwitch {
    target: AnsibleTarget,
    platform: &'static Platform,
    options: AnsibleOptions,
    runs: Arc<parking_lot::Mutex<Vec<(String, String)>>>,
}

impl std::fmt::Debug for AnsibleSwitch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AnsibleSwitch")
            .field("endpoint", &self.target.endpoint())
            .field("platform", &self.platform.os)
            .finish_non_exhaustive()
    }
}

/// A finished run: its stdout.
struct Ran {
    stdout: String,
}

impl AnsibleSwitch {
    /// A backend for `target` on `platform`.
    pub fn new(
        target: AnsibleTarget,
        platform: &'static Platform,
        options: AnsibleOptions,
    ) -> Self {
        Self {
            target,
            platform,
            options,
            runs: Arc::default(),
        }
    }

    /// The playbooks run so far (`apply.yml`, `read.yml`), in order.
    pub fn runs(&self) -> Vec<String> {
        let runs = self.runs.lock();
        runs.iter().map(|(p, _)| p.clone()).collect()
    }

    /// The processes still alive from any run of this backend (tests: nothing a
    /// run started may outlive it).
    pub fn leftovers(&self) -> Vec<u32> {
        let runs = self.runs.lock().clone();
        runs.iter().flat_map(|(_, m)| marked(m)).collect()
    }

    /// The platform.
    pub fn platform(&self) -> &'static Platform {
        self.platform
    }

    /// Runs `playbook` with `vars` (and `extra_args`, e.g. `--check --diff`).
    async fn run(
        &self,
        playbook: &str,
        vars: Option<serde_json::Value>,
        extra_args: &[&str],
    ) -> Result<Ran, DeviceError> {
        // At most one run per core at once, over every switch: each run is a Python
        // process busy for seconds, and past that its persistent connection misses
        // its own timeouts ("socket path does not exist", measured with 50 runs on 2
        // cores). Waiting ports join the switch's next batch meanwhile.
        let _slot = run_slots()
            .acquire()
            .await
            .map_err(|_| self.local("waiting for a run slot", std::io::Error::other("closed")))?;
        let dir = RunDir::create().map_err(|e| self.local("creating the run's directory", e))?;
        self.runs
            .lock()
            .push((playbook.to_owned(), dir.marker.clone()));
        // Dropping the directory sweeps the run's processes, also when this future
        // is cancelled (the worker's batch bound).
        self.run_in(&dir, playbook, vars, extra_args).await
    }

    fn local(&self, what: &str, e: std::io::Error) -> DeviceError {
        DeviceError::Protocol {
            during: what.to_owned(),
            cause: Cause::new(e),
        }
    }

    async fn run_in(
        &self,
        dir: &RunDir,
        playbook: &str,
        vars: Option<serde_json::Value>,
        extra_args: &[&str],
    ) -> Result<Ran, DeviceError> {
        let io = |what: &'static str| move |e: std::io::Error| self.local(what, e);
        let path = dir.path.to_string_lossy().into_owned();
        // The persistent connection's timeouts stay under the hard timeout.
        let persistent = contract::persistent_timeout(self.options.run_timeout).as_secs();
        let key_file = match &self.target.auth {
            AnsibleAuth::PrivateKey(pem) => {
                let mut text = pem.expose().to_owned();
                if !text.ends_with('\n') {
                    text.push('\n');
                }
                dir.write("device_key", text.as_bytes())
                    .map_err(io("writing the key"))?;
                Some(dir.path.join("device_key").to_string_lossy().into_owned())
            }
            AnsibleAuth::Password(_) => None,
        };
        let login = Login {
            address: &self.target.address,
            port: self.target.port,
            username: &self.target.username,
            password: match &self.target.auth {
                AnsibleAuth::Password(p) => Some(p.expose()),
                AnsibleAuth::PrivateKey(_) => None,
            },
            key_file: key_file.as_deref(),
            enable_password: self
                .target
                .enable_password
                .as_ref()
                .map(SecretString::expose),
            command_timeout: persistent,
            connect_timeout: self.options.connect_timeout.as_secs().max(1),
        };
        dir.write(
            "inventory.yml",
            contract::inventory(self.platform, &login).as_bytes(),
        )
        .map_err(io("writing the inventory"))?;
        dir.write(
            "ansible.cfg",
            contract::config(&path, persistent).as_bytes(),
        )
        .map_err(io("writing ansible.cfg"))?;
        let host = if self.target.port == 22 {
            self.target.address.clone()
        } else {
            format!("[{}]:{}", self.target.address, self.target.port)
        };
        let key = match &self.target.host_key {
            AnsibleHostKey::Known(k) => k.clone(),
            AnsibleHostKey::Verify(policy) => {
                verified_host_key(&SshTarget {
                    address: self.target.address.clone(),
                    port: self.target.port,
                    username: self.target.username.clone(),
                    auth: Auth::Password(SecretString::new(String::new())),
                    host_key: policy.clone(),
                    connect_timeout: self.options.connect_timeout,
                })
                .await?
            }
        };
        std::fs::create_dir_all(dir.path.join(".ssh")).map_err(io("creating .ssh"))?;
        dir.write(
            ".ssh/known_hosts",
            format!("{host} {}\n", key.trim()).as_bytes(),
        )
        .map_err(io("writing known_hosts"))?;
        let vars_file = dir.path.join("vars.json");
        dir.write(
            "vars.json",
            vars.unwrap_or_else(|| serde_json::json!({}))
                .to_string()
                .as_bytes(),
        )
        .map_err(io("writing the variables"))?;
        let book_dir = match &self.options.playbooks {
            Some(user) => user.clone(),
            None => {
                let d = dir.path.join("playbooks");
                std::fs::create_dir_all(&d).map_err(io("creating the playbooks"))?;
                for (platform, file, text) in contract::PLAYBOOKS {
                    if platform == self.platform.playbooks {
                        dir.write(&format!("playbooks/{file}"), text.as_bytes())
                            .map_err(io("writing the playbooks"))?;
                    }
                }
                d
            }
        };
        let mut cmd = tokio::process::Command::new(&self.options.ansible_playbook);
        cmd.arg("-i")
            .arg(dir.path.join("inventory.yml"))
            .arg(book_dir.join(playbook))
            .arg("-e")
            .arg(format!("@{}", vars_file.display()))
            .args(extra_args)
            .current_dir(&dir.path)
            .env("HOME", &dir.path)
            .env("ANSIBLE_CONFIG", dir.path.join("ansible.cfg"))
            .env(MARKER, &dir.marker)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(
                dir.create_file("stderr.log")
                    .map(std::process::Stdio::from)
                    .map_err(io("creating the run's log"))?,
            )
            .process_group(0)
            .kill_on_drop(true);
        let mut child = cmd.spawn().map_err(|e| {
            self.local(
                "starting ansible-playbook (make ansible installs it into .venv/ansible)",
                e,
            )
        })?;
        let mut stdout = child.stdout.take().expect("piped");
        let timeout = self.options.run_timeout;
        let waited = tokio::time::timeout(timeout, async {
            let mut out = String::new();
            stdout.read_to_string(&mut out).await?;
            child.wait().await.map(|_| out)
        })
        .await;
        match waited {
            Ok(Ok(out)) if out.trim().is_empty() => Err(DeviceError::Protocol {
                during: format!("running {playbook}"),
                cause: Cause::msg(self.stderr_errors(dir)),
            }),
            Ok(Ok(out)) => Ok(Ran { stdout: out }),
            Ok(Err(e)) => Err(self.local("reading ansible-playbook", e)),
            Err(_) => {
                if let Some(pid) = child.id() {
                    kill_group(pid);
                }
                let _ = child.kill().await;
                Err(DeviceError::Timeout {
                    during: format!("running {playbook} against {}", self.target.endpoint()),
                    after: timeout,
                })
            }
        }
    }

    /// The `ERROR!` lines ansible-playbook printed (at most three), with every secret
    /// of the target replaced by `***`.
    fn stderr_errors(&self, dir: &RunDir) -> String {
        let text = std::fs::read_to_string(dir.path.join("stderr.log")).unwrap_or_default();
        let mut secrets: Vec<&str> = Vec::new();
        match &self.target.auth {
            AnsibleAuth::Password(p) | AnsibleAuth::PrivateKey(p) => secrets.push(p.expose()),
        }
        if let Some(e) = &self.target.enable_password {
            secrets.push(e.expose());
        }
        let lines: Vec<String> = text
            .lines()
            .filter_map(|l| l.find("ERROR!").map(|at| &l[at..]))
            .take(3)
            .map(|l| {
                secrets
                    .iter()
                    .filter(|s| !s.is_empty())
                    .fold(l.to_owned(), |l, s| l.replace(s, "***"))
            })
            .collect();
        if lines.is_empty() {
            "ansible-playbook printed no results".into()
        } else {
            lines.join("; ")
        }
    }

    /// Runs the apply playbook in check mode with diff and returns what it would
    /// send, per task (`--dry-run`).
    pub async fn dry_run(&self, ops: &[PortOperation]) -> Result<Vec<String>, DeviceError> {
        let targets: Vec<DesiredPort> = ops.iter().map(PortOperation::target).collect();
        let ran = self
            .run(
                "apply.yml",
                Some(contract::apply_vars(&targets)),
                &["--check", "--diff"],
            )
            .await?;
        contract::check_commands(
            &ran.stdout,
            &self.target.endpoint(),
            contract::persistent_timeout(self.options.run_timeout),
        )
    }
}

/// What the built-in playbooks write and read back, whatever the switch (for ios,
/// the cisco_ios SSH dialect's set: the simulator has no per-port MTU; the junos
/// playbooks keep to the same set).
pub fn builtin_capabilities() -> Capabilities {
    Capabilities::new([
        Capability::AccessVlan,
        Capability::Trunk,
        Capability::NativeVlan,
        Capability::Disable,
        Capability::Description,
    ])
}

/// The environment variable marking every process of one run.
pub const MARKER: &str = "PATCHBAY_ANSIBLE_RUN";

/// A run's private directory.
struct RunDir {
    path: PathBuf,
    marker: String,
}

impl RunDir {
    fn create() -> std::io::Result<Self> {
        use std::os::unix::fs::DirBuilderExt as _;
        static RUNS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let marker = format!(
            "{}-{}-{:x}",
            std::process::id(),
            RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .as_nanos()
        );
        let path = std::env::temp_dir().join(format!("patchbay-ansible-{marker}"));
        std::fs::DirBuilder::new().mode(0o700).create(&path)?;
        Ok(Self { path, marker })
    }

    /// A new file of the run, readable by its owner only (0600), like every file
    /// here: the run's stderr may echo what a module was sent.
    fn create_file(&self, name: &str) -> std::io::Result<std::fs::File> {
        use std::os::unix::fs::OpenOptionsExt as _;
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(self.path.join(name))
    }

    fn write(&self, name: &str, bytes: &[u8]) -> std::io::Result<()> {
        use std::io::Write as _;
        self.create_file(name)?.write_all(bytes)
    }
}

impl Drop for RunDir {
    /// Kills every process of the run, then removes the directory.
    fn drop(&mut self) {
        sweep(&self.marker);
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// SIGKILL to a process group this backend started.
fn kill_group(pgid: u32) {
    let _ = std::process::Command::new("kill")
        .args(["-KILL", "--", &format!("-{pgid}")])
        .stderr(std::process::Stdio::null())
        .status();
}

/// The PIDs of processes whose environment carries `marker` (readable ones: the
/// operator's own user's).
pub fn marked(marker: &str) -> Vec<u32> {
    let needle = format!("{MARKER}={marker}");
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .map(|env| env.split(|b| *b == 0).any(|kv| kv == needle.as_bytes()))
                .unwrap_or(false)
        })
        .collect()
}

/// Kills every process of the run marked `marker`, and waits (at most a second)
/// until none is left: a process sent SIGKILL lives on for a moment, and a run
/// that returned while its processes were still dying would outlive itself.
fn sweep(marker: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
    loop {
        let left = marked(marker);
        if left.is_empty() || std::time::Instant::now() >= deadline {
            return;
        }
        for pid in left {
            let _ = std::process::Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .stderr(std::process::Stdio::null())
                .status();
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

#[async_trait]
impl Device for AnsibleSwitch {
    fn capabilities(&self) -> Capabilities {
        builtin_capabilities()
    }

    /// One run for the whole batch.
    async fn apply_batch(&self, ops: &[PortOperation]) -> Result<Vec<PortResult>, DeviceError> {
        if ops.is_empty() {
            return Ok(Vec::new());
        }
        let caps = self.capabilities();
        let mut results: Vec<Option<Result<PortChange, DeviceError>>> = vec![None; ops.len()];
        let mut send = Vec::new();
        for (i, op) in ops.iter().enumerate() {
            match caps.missing_for(&op.target()).first() {
                Some(&capability) => {
                    results[i] = Some(Err(DeviceError::Unsupported { capability }))
                }
                None => send.push(i),
            }
        }
        if !send.is_empty() {
            let targets: Vec<DesiredPort> = send.iter().map(|&i| ops[i].target()).collect();
            let names: Vec<PortName> = targets.iter().map(|d| d.port.clone()).collect();
            let ran = self
                .run("apply.yml", Some(contract::apply_vars(&targets)), &[])
                .await?;
            let outcomes = contract::apply_results(
                &ran.stdout,
                &names,
                &self.target.endpoint(),
                contract::persistent_timeout(self.options.run_timeout),
            )?;
            for (&i, o) in send.iter().zip(outcomes) {
                results[i] = Some(o);
            }
        }
        Ok(batch_results(ops, results))
    }

    /// One run reads every port of the switch.
    async fn get_ports(&self, ports: &[PortName]) -> Result<PortReads, DeviceError> {
        if ports.is_empty() {
            return Ok(Vec::new());
        }
        let ran = self.run("read.yml", None, &[]).await?;
        let reads = contract::read_results(
            &ran.stdout,
            ports,
            &self.target.endpoint(),
            contract::persistent_timeout(self.options.run_timeout),
        )?;
        Ok(ports.iter().cloned().zip(reads).collect())
    }
}

//! The test bed: the real peers patchbay's tests, benchmarks and `make demo` start
//! and stop — never part of the operator. Starts processes and reads their files
//! (I/O); talks to nothing but 127.0.0.1 and the network namespace Open vSwitch
//! runs in.
//!
//! - [`FakeSwitches`]: the switch simulators of `fake-switch/` (fake-switches 1.5.0
//!   in a Python venv, `make fake-switch`): N switches of given models in one Python
//!   process, each on a free (or a given) 127.0.0.1 port, described in a JSON file
//!   the launcher writes once every switch listens. Passwords travel in a 0600 spec
//!   file, never on a command line; the process is stopped by the PID this crate
//!   started (on drop, too).
//! - [`OvsSim`]: a private Open vSwitch (`fake-switch/ovs.py`).
//! - [`Netconfd`]: a real NETCONF server (Debian netconfd) with patchbay's YANG module
//!   behind a private sshd.
//! - [`lldp::LldpFabric`]: a switch and hosts in network namespaces speaking real LLDP
//!   (Debian lldpd), the switch's lldpd readable over a private sshd.
//! - [`bgp::Frr`] and [`bgp::Gobgp`]: real BGP speakers (Debian frr, gobgpd) in network
//!   namespaces, FRR's vtysh behind a private sshd.
//! - [`SilentDevice`], [`CuttingRelay`], [`SlowRelay`]: a device that never answers,
//!   a link that dies, a device that answers slowly.
//!
//! [`peers::PEERS`] lists every program these start, and the `make` targets that
//! must install each.

pub mod bgp;
pub mod lldp;
pub mod peers;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// Why a peer could not be started or used.
#[derive(Debug, thiserror::Error)]
pub enum TestbedError {
    /// A file or process operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A launcher wrote a description that does not parse.
    #[error("{what}: {source}")]
    Description {
        /// Which description.
        what: &'static str,
        /// The cause.
        #[source]
        source: serde_json::Error,
    },
    /// A peer did not start, or a command against it failed.
    #[error("{0}")]
    Failed(String),
}

/// This crate's results.
pub type Result<T> = std::result::Result<T, TestbedError>;

/// Runs `cmd` (shown as `what` in errors): its stdout, trimmed; fails with its stderr.
fn stdout_of(mut cmd: Command, what: &str) -> Result<String> {
    let out = cmd.output().map_err(io(format!(
        "running {}",
        cmd.get_program().to_string_lossy()
    )))?;
    if !out.status.success() {
        return Err(TestbedError::Failed(format!(
            "{what}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> TestbedError {
    let what = what.into();
    move |source| TestbedError::Io { what, source }
}

/// One switch to start.
#[derive(Debug, Clone, Serialize)]
pub struct SimSpec {
    /// Hostname (appears in the prompt).
    pub name: String,
    /// fake-switches model (`cisco_generic`, `dell_generic`, `dell10g_generic`,
    /// `brocade_generic`, `arista_generic`, `cisco_2960_48TT_L`, …).
    pub model: String,
    /// Login name.
    pub username: String,
    /// Login password.
    pub password: String,
    /// Enable password.
    pub enable_password: String,
    /// Listen on this 127.0.0.1 port (0: a free port the kernel picks). A fixed port
    /// lets a test stop a switch and start a fresh, empty one at the same address;
    /// every simulator presents the same host key.
    pub port: u16,
    /// Cisco only: the real IOS syntax Ansible's cisco.ios needs and the simulator
    /// lacks (`end` in configuration mode, `show privilege`, `| section`); see
    /// `fake-switch/launch.py`.
    pub ios_shims: bool,
}

impl SimSpec {
    /// A switch with generated passwords on a free port.
    pub fn new(name: &str, model: &str) -> Self {
        let salt = rand_u32();
        Self {
            name: name.to_owned(),
            model: model.to_owned(),
            username: "netops".to_owned(),
            password: format!("pw-{name}-{salt:x}"),
            enable_password: format!("en-{name}-{salt:x}"),
            port: 0,
            ios_shims: false,
        }
    }

    /// The same switch with the IOS syntax shims Ansible's cisco.ios needs.
    pub fn with_ios_shims(mut self) -> Self {
        self.ios_shims = true;
        self
    }

    /// The same switch (name, model, credentials, port) as `running`: a fresh,
    /// unconfigured device where the operator expects the old one.
    pub fn again(running: &SimSwitch) -> Self {
        Self {
            name: running.name.clone(),
            model: running.model.clone(),
            username: running.username.clone(),
            password: running.password.clone(),
            enable_password: running.enable_password.clone(),
            port: running.port,
            ios_shims: false,
        }
    }
}

/// One connection to a simulated switch, from its connection log.
#[derive(Debug, Clone, PartialEq)]
pub struct Session {
    /// When it opened (Unix seconds).
    pub opened: f64,
    /// When its user had logged in; `None` if it never did.
    pub logged_in: Option<f64>,
    /// When it closed; `None` while open.
    pub closed: Option<f64>,
    /// The client's TCP port.
    pub client_port: u16,
}

/// A running simulated switch, as the launcher describes it.
#[derive(Debug, Clone, Deserialize)]
pub struct SimSwitch {
    /// Hostname.
    pub name: String,
    /// Model.
    pub model: String,
    /// Always 127.0.0.1.
    pub address: String,
    /// SSH port.
    pub port: u16,
    /// Login name.
    pub username: String,
    /// Login password.
    pub password: String,
    /// Enable password.
    pub enable_password: String,
    /// The host key's OpenSSH SHA256 fingerprint.
    pub host_key_fingerprint: String,
    /// A known_hosts line for it.
    pub known_hosts_line: String,
    /// The device's port names.
    pub ports: Vec<String>,
}

#[derive(Deserialize)]
struct Description {
    switches: Vec<SimSwitch>,
}

/// The launcher process and its switches. Dropping it stops the process.
pub struct FakeSwitches {
    child: Child,
    dir: PathBuf,
    /// The switches, in the order asked for.
    pub switches: Vec<SimSwitch>,
}

/// The repository root (where `fake-switch/` lives).
fn repo_root() -> PathBuf {
    let here = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    here.parent().map(Path::to_path_buf).unwrap_or(here)
}

/// The venv Python that has fake-switches: `PATCHBAY_FAKE_SWITCH_PYTHON`, else
/// `.venv/fake-switch/bin/python` in the repository (made by `make fake-switch`).
pub fn python() -> Result<PathBuf> {
    if let Ok(p) = std::env::var("PATCHBAY_FAKE_SWITCH_PYTHON") {
        return Ok(PathBuf::from(p));
    }
    let p = repo_root().join(".venv/fake-switch/bin/python");
    if !p.exists() {
        return Err(TestbedError::Failed(format!(
            "the switch simulators are not installed: run `make fake-switch` (creates {})",
            p.display()
        )));
    }
    Ok(p)
}

impl FakeSwitches {
    /// Starts the switches and waits (up to 30 s) until they all listen.
    pub fn start(specs: &[SimSpec]) -> Result<Self> {
        let python = python()?;
        let dir = std::env::temp_dir().join(format!(
            "patchbay-fake-switch-{}-{}",
            std::process::id(),
            rand_u32()
        ));
        std::fs::create_dir_all(&dir).map_err(io(format!("creating {}", dir.display())))?;
        let spec_path = dir.join("spec.json");
        let out_path = dir.join("switches.json");
        let connection_log = dir.join("connections.log");
        write_private(
            &spec_path,
            serde_json::json!({
                "switches": specs,
                "connection_log": connection_log,
                "command_log": dir.join("commands.log"),
                "rpc_log": dir.join("rpcs.log"),
            })
            .to_string()
            .as_bytes(),
        )?;
        let child = Command::new(&python)
            .arg(repo_root().join("fake-switch/launch.py"))
            .arg(&spec_path)
            .arg(&out_path)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(
                std::fs::File::create(dir.join("launcher.log"))
                    .map_err(io("creating the launcher's log"))?,
            ))
            .spawn()
            .map_err(io(format!("starting {}", python.display())))?;
        let mut me = Self {
            child,
            dir,
            switches: Vec::new(),
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(text) = std::fs::read(&out_path) {
                let d: Description =
                    serde_json::from_slice(&text).map_err(|source| TestbedError::Description {
                        what: "the launcher's description",
                        source,
                    })?;
                me.switches = d.switches;
                return Ok(me);
            }
            if let Some(status) = me
                .child
                .try_wait()
                .map_err(io("waiting for the launcher"))?
            {
                let log = std::fs::read_to_string(me.dir.join("launcher.log")).unwrap_or_default();
                return Err(TestbedError::Failed(format!(
                    "the simulator launcher exited ({status}):\n{log}"
                )));
            }
            if Instant::now() > deadline {
                return Err(TestbedError::Failed(
                    "the simulators did not start within 30 s".into(),
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The switch named `name`.
    pub fn get(&self, name: &str) -> &SimSwitch {
        self.switches
            .iter()
            .find(|s| s.name == name)
            .unwrap_or_else(|| panic!("no simulated switch {name:?}"))
    }

    /// Every line switch `name`'s SSH shells were sent so far, in order (a line
    /// typed at a hidden prompt, a password, is `<hidden>`).
    pub fn commands(&self, name: &str) -> Vec<String> {
        self.logged("commands.log", name)
    }

    /// Every NETCONF message switch `name` was sent after the hello so far, in
    /// order, each on one line.
    pub fn rpcs(&self, name: &str) -> Vec<String> {
        self.logged("rpcs.log", name)
    }

    /// Switch `name`'s entries of the launcher's log `file` (`<switch>\t<entry>`).
    fn logged(&self, file: &str, name: &str) -> Vec<String> {
        std::fs::read_to_string(self.dir.join(file))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.split_once('\t'))
            .filter(|(switch, _)| *switch == name)
            .map(|(_, entry)| entry.to_owned())
            .collect()
    }

    /// The launcher's PID.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// How many TCP connections (SSH handshakes attempted) switch `name` accepted
    /// so far.
    pub fn connections(&self, name: &str) -> usize {
        self.sessions(name).len()
    }

    /// Every connection switch `name` accepted: when it opened and closed (Unix
    /// seconds; no close while it is open) and the client's port, in opening order.
    pub fn sessions(&self, name: &str) -> Vec<Session> {
        let log = std::fs::read_to_string(self.dir.join("connections.log")).unwrap_or_default();
        let mut sessions: Vec<Session> = Vec::new();
        for line in log.lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            let [sw, event, time, port] = f[..] else {
                continue;
            };
            let (Ok(time), Ok(port)) = (time.parse::<f64>(), port.parse::<u16>()) else {
                continue;
            };
            if sw != name {
                continue;
            }
            match event {
                "open" => sessions.push(Session {
                    opened: time,
                    logged_in: None,
                    closed: None,
                    client_port: port,
                }),
                "login" => {
                    if let Some(s) = sessions
                        .iter_mut()
                        .rev()
                        .find(|s| s.client_port == port && s.closed.is_none())
                    {
                        s.logged_in = Some(time);
                    }
                }
                "close" => {
                    if let Some(s) = sessions
                        .iter_mut()
                        .rev()
                        .find(|s| s.client_port == port && s.closed.is_none())
                    {
                        s.closed = Some(time);
                    }
                }
                _ => {}
            }
        }
        sessions
    }

    /// The pairs of switch `name`'s logged-in sessions that were open at the same
    /// time — a session counts from its login (before it, a connection cannot change
    /// the device) to its close (still open: until now): empty when the device
    /// never had two writers at once. From the log of every connection, the test's
    /// own reads included.
    pub fn overlapping_sessions(&self, name: &str) -> Vec<(Session, Session)> {
        let mut sessions: Vec<Session> = self
            .sessions(name)
            .into_iter()
            .filter(|s| s.logged_in.is_some())
            .collect();
        let login = |s: &Session| s.logged_in.unwrap_or_default();
        sessions.sort_by(|a, b| login(a).total_cmp(&login(b)));
        let mut out = Vec::new();
        for (i, a) in sessions.iter().enumerate() {
            for b in &sessions[i + 1..] {
                if a.closed.is_none_or(|closed| closed > login(b)) {
                    out.push((a.clone(), b.clone()));
                }
            }
        }
        out
    }

    /// Stops the launcher (the PID this process started) and removes its directory.
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Drop for FakeSwitches {
    fn drop(&mut self) {
        self.stop();
    }
}

fn rand_u32() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.finish() as u32
}

/// Writes a new file readable by its owner only (0600); fails if it exists.
pub fn write_private(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(io(format!("creating {}", path.display())))?;
    f.write_all(bytes)
        .map_err(io(format!("writing {}", path.display())))
}

/// A self-signed EC certificate for 127.0.0.1 (CN `cn`, not a CA, server auth) in
/// `dir` as `tls.crt` and `tls.key`, made with the machine's openssl and swapped in
/// whole, as kubelet swaps a mounted Secret's files (what the admission webhook
/// reads, and reads again when it changes).
pub fn webhook_certificate(dir: &Path, cn: &str) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(io(format!("creating {}", dir.display())))?;
    let out = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
        ])
        .args(["-nodes", "-days", "2", "-subj", &format!("/CN={cn}")])
        .args(["-addext", "subjectAltName=IP:127.0.0.1"])
        .args(["-addext", "basicConstraints=critical,CA:FALSE"])
        .args(["-addext", "extendedKeyUsage=serverAuth"])
        .arg("-keyout")
        .arg(dir.join("tls.key.new"))
        .arg("-out")
        .arg(dir.join("tls.crt.new"))
        .output()
        .map_err(io("running openssl"))?;
    if !out.status.success() {
        return Err(TestbedError::Failed(format!(
            "openssl req: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    for f in ["tls.key", "tls.crt"] {
        std::fs::rename(dir.join(format!("{f}.new")), dir.join(f))
            .map_err(io(format!("renaming {f}")))?;
    }
    Ok(())
}

/// A running `ovsdb-client monitor` of the Port table (see
/// [`OvsSim::monitor_ports`]).
pub struct PortMonitor {
    child: Child,
    file: PathBuf,
}

impl PortMonitor {
    /// Every Port row the monitor printed so far, in order: (name, number of
    /// interfaces). A modification prints the row as it became.
    pub fn rows(&self) -> Vec<(String, usize)> {
        let text = std::fs::read_to_string(&self.file).unwrap_or_default();
        text.lines()
            .filter(|l| !l.is_empty() && !l.starts_with("row,"))
            .filter_map(|l| {
                // uuid,action,name,"[a, b]" or [a]
                let mut fields = l.splitn(4, ',');
                let (_, action, name, ifaces) = (
                    fields.next()?,
                    fields.next()?,
                    fields.next()?,
                    fields.next()?,
                );
                if action == "old" || action == "delete" {
                    return None;
                }
                let list = ifaces.trim_matches('"').trim_matches(['[', ']']);
                let n = list.split(',').filter(|x| !x.trim().is_empty()).count();
                Some((name.to_owned(), n))
            })
            .collect()
    }
}

impl Drop for PortMonitor {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.file);
    }
}

/// A private Open vSwitch started by `fake-switch/ovs.py`: ovsdb-server and
/// ovs-vswitchd in a temporary directory, OVSDB on a free 127.0.0.1 port, bridges
/// with the userspace datapath, ovs-vswitchd in a network namespace of its own (the
/// userspace datapath's tap devices have fixed names, so instances would collide).
/// Dropping it stops the launcher and both daemons by the PIDs started here.
pub struct OvsSim {
    child: Child,
    out: PathBuf,
    /// The launcher's description.
    pub info: OvsInfo,
}

/// What `fake-switch/ovs.py` reports.
#[derive(Debug, Clone, Deserialize)]
pub struct OvsInfo {
    /// The temporary directory (OVS_RUNDIR).
    pub dir: PathBuf,
    /// The network namespace ovs-vswitchd (and so every bridge port) lives in.
    pub netns: String,
    /// The OVSDB unix socket.
    pub db_socket: PathBuf,
    /// Always 127.0.0.1.
    pub ovsdb_address: String,
    /// The OVSDB TCP port.
    pub ovsdb_port: u16,
    /// PID of ovsdb-server.
    pub ovsdb_server_pid: u32,
    /// PID of ovs-vswitchd.
    pub ovs_vswitchd_pid: u32,
    /// Bridges and their OpenFlow listener port.
    pub bridges: std::collections::BTreeMap<String, OvsBridge>,
}

/// One bridge of an [`OvsSim`].
#[derive(Debug, Clone, Deserialize)]
pub struct OvsBridge {
    /// The bridge's OpenFlow management socket, `unix:<dir>/<bridge>.mgmt`.
    pub openflow: String,
}

impl OvsSim {
    /// Starts Open vSwitch with `bridges`; waits up to 30 s.
    pub fn start(bridges: &[&str]) -> Result<Self> {
        let out = std::env::temp_dir().join(format!(
            "patchbay-ovs-{}-{}.json",
            std::process::id(),
            rand_u32()
        ));
        let mut cmd = Command::new("python3");
        cmd.arg(repo_root().join("fake-switch/ovs.py")).arg(&out);
        for b in bridges {
            cmd.arg("--bridge").arg(b);
        }
        let log = out.with_extension("log");
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(
                std::fs::File::create(&log).map_err(io(format!("creating {}", log.display())))?,
            ))
            .spawn()
            .map_err(io("starting fake-switch/ovs.py"))?;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(text) = std::fs::read(&out) {
                let info: OvsInfo =
                    serde_json::from_slice(&text).map_err(|source| TestbedError::Description {
                        what: "ovs.py's description",
                        source,
                    })?;
                let _ = std::fs::remove_file(&log);
                return Ok(Self { child, out, info });
            }
            if let Some(status) = child.try_wait().map_err(io("waiting for ovs.py"))? {
                let text = std::fs::read_to_string(&log).unwrap_or_default();
                return Err(TestbedError::Failed(format!(
                    "fake-switch/ovs.py exited ({status}):\n{text}"
                )));
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                return Err(TestbedError::Failed(
                    "Open vSwitch did not start within 30 s".into(),
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `host:port` of OVSDB.
    pub fn ovsdb_tcp(&self) -> String {
        format!("{}:{}", self.info.ovsdb_address, self.info.ovsdb_port)
    }

    /// The OpenFlow target of `bridge` (`unix:<dir>/<bridge>.mgmt`).
    pub fn openflow(&self, bridge: &str) -> Option<String> {
        self.info.bridges.get(bridge).map(|b| b.openflow.clone())
    }

    /// Runs `ovs-vsctl` against this OVSDB (tests and benchmarks; patchbay itself
    /// never does). Returns stdout; fails with stderr.
    pub fn vsctl(&self, args: &[&str]) -> Result<String> {
        let mut cmd = Command::new("ovs-vsctl");
        cmd.arg(format!("--db=unix:{}", self.info.db_socket.display()))
            .arg("--timeout=20")
            .args(args)
            .env("OVS_RUNDIR", &self.info.dir);
        stdout_of(cmd, &format!("ovs-vsctl {}", args.join(" ")))
    }

    /// Adds an internal port of each of `names` to `bridge` (a port patchbay can
    /// configure, with no link behind it).
    pub fn add_internal_ports(&self, bridge: &str, names: &[&str]) -> Result<()> {
        for n in names {
            self.vsctl(&[
                "add-port",
                bridge,
                n,
                "--",
                "set",
                "Interface",
                n,
                "type=internal",
            ])?;
        }
        Ok(())
    }

    /// Starts recording every change to the Port table's names and interfaces
    /// (`ovsdb-client monitor`, tests only): what a test reads afterwards is the
    /// history, not only the end state. Stopped (by its PID) when dropped.
    pub fn monitor_ports(&self) -> Result<PortMonitor> {
        let file = self.info.dir.join(format!("ports-{}.csv", rand_u32()));
        let child = Command::new("ovsdb-client")
            .arg("monitor")
            .arg(format!("unix:{}", self.info.db_socket.display()))
            .args(["Open_vSwitch", "Port", "name,interfaces", "--format=csv"])
            .stdin(Stdio::null())
            .stdout(Stdio::from(
                std::fs::File::create(&file).map_err(io("creating the monitor's file"))?,
            ))
            .stderr(Stdio::null())
            .spawn()
            .map_err(io("starting ovsdb-client monitor"))?;
        let monitor = PortMonitor { child, file };
        // Its first answer (the initial rows) says it is watching.
        let deadline = Instant::now() + Duration::from_secs(10);
        while monitor.rows().is_empty() {
            if Instant::now() > deadline {
                return Err(TestbedError::Failed(
                    "ovsdb-client monitor printed nothing within 10 s".into(),
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(monitor)
    }

    /// Runs `ovs-appctl ARGS…` against this ovs-vswitchd (tests only: LACP and bond
    /// state). Returns stdout; fails with stderr.
    pub fn appctl(&self, args: &[&str]) -> Result<String> {
        let mut cmd = Command::new("ovs-appctl");
        cmd.arg("-t")
            .arg(self.info.dir.join("ovs-vswitchd.ctl"))
            .args(args);
        stdout_of(cmd, &format!("ovs-appctl {}", args.join(" ")))
    }

    /// Runs `ovs-ofctl -O OpenFlow13 COMMAND <bridge's OpenFlow target> ARGS…` (tests
    /// only: to look at and tamper with flows). Returns stdout; fails with stderr.
    pub fn ofctl(&self, command: &str, bridge: &str, args: &[&str]) -> Result<String> {
        let target = self
            .openflow(bridge)
            .ok_or_else(|| TestbedError::Failed(format!("no bridge {bridge}")))?;
        let mut cmd = Command::new("ovs-ofctl");
        cmd.args(["-O", "OpenFlow13", command, &target]).args(args);
        stdout_of(cmd, &format!("ovs-ofctl {command} {}", args.join(" ")))
    }

    /// Stops the launcher and both daemons (by PID) and removes the directory.
    pub fn stop(&mut self) {
        terminate(self.child.id());
        let _ = self.child.wait();
        // The launcher stops its daemons; if it could not, stop them here, by the
        // PIDs it reported, only while they are still Open vSwitch processes.
        for pid in [self.info.ovs_vswitchd_pid, self.info.ovsdb_server_pid] {
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            if comm.starts_with("ovs") {
                terminate(pid);
            }
        }
        let _ = Command::new("ip")
            .args(["netns", "del", &self.info.netns])
            .stderr(Stdio::null())
            .status();
        let _ = std::fs::remove_dir_all(&self.info.dir);
        let _ = std::fs::remove_file(&self.out);
    }
}

impl Drop for OvsSim {
    fn drop(&mut self) {
        self.stop();
    }
}

/// SIGTERM to a PID this module started (via `kill(1)`, to stay free of libc).
fn terminate(pid: u32) {
    let _ = Command::new("kill")
        .arg(pid.to_string())
        .stderr(Stdio::null())
        .status();
}

/// Which datastore netconfd edits: `candidate` (announces `:candidate`,
/// `:confirmed-commit`, `:validate`) or `running` (`:writable-running`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NetconfTarget {
    /// `--target=candidate`.
    Candidate,
    /// `--target=running`.
    Running,
}

/// A real NETCONF server: Debian's netconfd (yuma123) with patchbay's YANG module
/// (`providers/yang/patchbay-ports.yang`), behind a private sshd whose `netconf`
/// subsystem connects to it; both in a temporary directory, sshd on a free
/// 127.0.0.1 port. Logins are by key (the one in [`Netconfd::client_key`]); password
/// logins are enabled but no password works, which is what the wrong-password test
/// needs. Dropping it stops both by the PIDs started here.
pub struct Netconfd {
    netconfd: Child,
    sshd: Child,
    /// The temporary directory.
    pub dir: PathBuf,
    /// Always 127.0.0.1.
    pub address: String,
    /// sshd's port.
    pub port: u16,
    /// The login (the user running the tests, netconfd's superuser).
    pub username: String,
    /// The private key that logs in (OpenSSH PEM).
    pub client_key: String,
    /// A private key sshd does not accept.
    pub stranger_key: String,
    /// sshd's host key fingerprint (`SHA256:…`).
    pub host_key_fingerprint: String,
}

/// Runs `args[0]` with the rest; its stdout, or what it said on stderr when it failed.
pub(crate) fn run(args: &[&str]) -> Result<String> {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .map_err(io(format!("running {}", args[0])))?;
    if !out.status.success() {
        return Err(TestbedError::Failed(format!(
            "{}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn ssh_keygen(path: &Path) -> Result<()> {
    let out = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-f"])
        .arg(path)
        .output()
        .map_err(io("running ssh-keygen"))?;
    if !out.status.success() {
        return Err(TestbedError::Failed(format!(
            "ssh-keygen: {}",
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    Ok(())
}

fn free_port() -> Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(io("finding a free port"))?;
    Ok(l.local_addr().map_err(io("finding a free port"))?.port())
}

fn wait_for(what: &str, child: &mut Child, log: &Path, ready: impl Fn() -> bool) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !ready() {
        if let Some(status) = child
            .try_wait()
            .map_err(io(format!("waiting for {what}")))?
        {
            let text = std::fs::read_to_string(log).unwrap_or_default();
            return Err(TestbedError::Failed(format!(
                "{what} exited ({status}):\n{text}"
            )));
        }
        if Instant::now() > deadline {
            return Err(TestbedError::Failed(format!(
                "{what} did not start within 20 s"
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

impl Netconfd {
    /// Starts netconfd editing `target`, and its sshd; waits up to 20 s each.
    pub fn start(target: NetconfTarget) -> Result<Self> {
        let dir = std::env::temp_dir().join(format!(
            "patchbay-netconfd-{}-{:x}",
            std::process::id(),
            rand_u32()
        ));
        std::fs::create_dir_all(dir.join("home")).map_err(io("creating netconfd's directory"))?;
        let yang = repo_root().join("providers/yang");
        for name in ["hostkey", "client", "stranger"] {
            ssh_keygen(&dir.join(name))?;
        }
        let read = |name: &str| {
            std::fs::read_to_string(dir.join(name)).map_err(io(format!("reading {name}")))
        };
        std::fs::copy(dir.join("client.pub"), dir.join("authorized_keys"))
            .map_err(io("writing authorized_keys"))?;
        let username = current_user()?;
        let port = free_port()?;
        let sock = dir.join("ncx.sock");
        let log = dir.join("netconfd.log");
        // netconfd writes ~/.yuma in the password database's home directory whatever
        // HOME says: it runs in a mount namespace of its own with the test's
        // directory mounted over that home, so nothing lands outside the test's
        // directory (and parallel servers do not share one ~/.yuma).
        let real_home = home_of(&username)?;
        let mut netconfd = Command::new("setsid")
            .args(["unshare", "--mount", "--propagation", "private", "sh", "-c"])
            .arg(r#"mount --bind "$0" "$1" && shift && exec netconfd "$@""#)
            .arg(dir.join("home"))
            .arg(&real_home)
            .arg(format!("--port={port}"))
            .arg("--no-startup")
            .arg(format!(
                "--target={}",
                match target {
                    NetconfTarget::Candidate => "candidate",
                    NetconfTarget::Running => "running",
                }
            ))
            .arg(format!("--ncxserver-sockname={}", sock.display()))
            .arg(format!("--superuser={username}"))
            .arg("--access-control=off")
            .arg(format!(
                "--modpath={}:/usr/share/yuma/modules",
                yang.display()
            ))
            .arg("--module=patchbay-ports")
            .arg(format!("--log={}", log.display()))
            .arg("--log-level=info")
            .env("HOME", dir.join("home"))
            // netconfd writes backup-cfg.xml into its working directory.
            .current_dir(&dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(io(
                "starting netconfd (apt-get install netconfd; unshare and mount from util-linux)",
            ))?;
        let started = wait_for("netconfd", &mut netconfd, &log, || sock.exists());
        if let Err(e) = started {
            let _ = netconfd.kill();
            return Err(e);
        }
        let subsystem = format!(
            "Subsystem netconf \"/usr/sbin/netconf-subsystem --ncxserver-sockname={port}@{}\"\n",
            sock.display()
        );
        let (sshd, host_key_fingerprint) = match start_sshd(&dir, port, &subsystem) {
            Ok(started) => started,
            Err(e) => {
                let _ = netconfd.kill();
                return Err(e);
            }
        };
        let me = Self {
            netconfd,
            sshd,
            address: "127.0.0.1".into(),
            port,
            username,
            client_key: read("client")?,
            stranger_key: read("stranger")?,
            host_key_fingerprint,
            dir,
        };
        Ok(me)
    }

    /// PID of netconfd.
    pub fn netconfd_pid(&self) -> u32 {
        self.netconfd.id()
    }

    /// Stops sshd and netconfd and removes the directory.
    pub fn stop(&mut self) {
        terminate(self.sshd.id());
        let _ = self.sshd.wait();
        terminate(self.netconfd.id());
        let _ = self.netconfd.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Drop for Netconfd {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Starts a private sshd on 127.0.0.1:`port` with the host key, `authorized_keys`
/// and logs in `dir` (key logins; password logins enabled, but no password works),
/// and `extra` config lines; waits until it listens. Returns it and its host key's
/// fingerprint.
fn start_sshd(dir: &Path, port: u16, extra: &str) -> Result<(Child, String)> {
    std::fs::create_dir_all("/run/sshd").map_err(io("creating /run/sshd"))?;
    let config = format!(
        "Port {port}\nListenAddress 127.0.0.1\nHostKey {d}/hostkey\nPidFile {d}/sshd.pid\n\
         AuthorizedKeysFile {d}/authorized_keys\nStrictModes no\nUsePAM no\n\
         PermitRootLogin yes\nPasswordAuthentication yes\nKbdInteractiveAuthentication no\n{extra}",
        d = dir.display(),
    );
    std::fs::write(dir.join("sshd_config"), config).map_err(io("writing sshd_config"))?;
    let sshd_log = dir.join("sshd.log");
    let mut sshd = Command::new("/usr/sbin/sshd")
        .arg("-D")
        .arg("-f")
        .arg(dir.join("sshd_config"))
        .arg("-E")
        .arg(&sshd_log)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(io("starting sshd (apt-get install openssh-server)"))?;
    if let Err(e) = wait_for("sshd", &mut sshd, &sshd_log, || {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    }) {
        let _ = sshd.kill();
        return Err(e);
    }
    let fp = Command::new("ssh-keygen")
        .arg("-lf")
        .arg(dir.join("hostkey.pub"))
        .output()
        .map_err(io("running ssh-keygen -lf"))?;
    let fingerprint = String::from_utf8_lossy(&fp.stdout)
        .split_whitespace()
        .nth(1)
        .unwrap_or_default()
        .to_owned();
    Ok((sshd, fingerprint))
}

/// `user`'s home directory in the password database.
fn home_of(user: &str) -> Result<PathBuf> {
    let out = Command::new("getent")
        .args(["passwd", user])
        .output()
        .map_err(io("running getent"))?;
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .split(':')
        .nth(5)
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
        .ok_or_else(|| TestbedError::Failed(format!("no home directory for {user}")))
}

/// The user running the tests (the login of the private sshds here).
fn current_user() -> Result<String> {
    Ok(String::from_utf8_lossy(
        &Command::new("id")
            .arg("-un")
            .output()
            .map_err(io("running id"))?
            .stdout,
    )
    .trim()
    .to_owned())
}

/// A device that lets you log in and then never answers: a private sshd whose every
/// session runs `sleep` (no prompt, no output) — what a switch whose CLI hangs looks
/// like. Logins by key ([`HangingShell::client_key`]). Dropping it stops sshd by its
/// PID and removes the directory.
pub struct HangingShell {
    sshd: Child,
    dir: PathBuf,
    /// sshd's port on 127.0.0.1.
    pub port: u16,
    /// The login.
    pub username: String,
    /// The private key that logs in (OpenSSH PEM).
    pub client_key: String,
    /// sshd's host key fingerprint (`SHA256:…`).
    pub host_key_fingerprint: String,
    /// sshd's host key as a known_hosts key (`ssh-ed25519 AAAA…`).
    pub host_key: String,
}

impl HangingShell {
    /// Starts it; waits up to 20 s.
    pub fn start() -> Result<Self> {
        let dir = std::env::temp_dir().join(format!(
            "patchbay-hanging-shell-{}-{:x}",
            std::process::id(),
            rand_u32()
        ));
        std::fs::create_dir_all(&dir).map_err(io("creating the shell's directory"))?;
        for name in ["hostkey", "client"] {
            ssh_keygen(&dir.join(name))?;
        }
        std::fs::copy(dir.join("client.pub"), dir.join("authorized_keys"))
            .map_err(io("writing authorized_keys"))?;
        let port = free_port()?;
        let (sshd, host_key_fingerprint) =
            start_sshd(&dir, port, "ForceCommand /bin/sleep 3600\n")?;
        let read = |name: &str| {
            std::fs::read_to_string(dir.join(name)).map_err(io(format!("reading {name}")))
        };
        let host_key = read("hostkey.pub")?
            .split_whitespace()
            .take(2)
            .collect::<Vec<_>>()
            .join(" ");
        Ok(Self {
            username: current_user()?,
            client_key: read("client")?,
            host_key_fingerprint,
            host_key,
            sshd,
            port,
            dir,
        })
    }
}

impl HangingShell {
    /// How many logins sshd accepted so far (its log's `Accepted` lines).
    pub fn logins(&self) -> usize {
        std::fs::read_to_string(self.dir.join("sshd.log"))
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("Accepted "))
            .count()
    }

    /// A known_hosts line for it (`[127.0.0.1]:port key`).
    pub fn known_hosts_line(&self) -> String {
        format!("[127.0.0.1]:{} {}", self.port, self.host_key)
    }
}

impl Drop for HangingShell {
    fn drop(&mut self) {
        terminate(self.sshd.id());
        let _ = self.sshd.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The `ansible-playbook` of the test bed: `PATCHBAY_ANSIBLE_PLAYBOOK`, else
/// `.venv/ansible/bin/ansible-playbook` in the repository (made by `make ansible`).
pub fn ansible_playbook() -> Result<PathBuf> {
    if let Ok(p) = std::env::var("PATCHBAY_ANSIBLE_PLAYBOOK") {
        return Ok(PathBuf::from(p));
    }
    let p = repo_root().join(".venv/ansible/bin/ansible-playbook");
    if p.exists() {
        Ok(p)
    } else {
        Err(TestbedError::Failed(format!(
            "{} not found: run `make ansible`",
            p.display()
        )))
    }
}

/// A TCP listener on 127.0.0.1 that accepts connections and never answers (a
/// device that hangs, before even an SSH banner). Connections are held until it is
/// dropped.
pub struct SilentDevice {
    /// Its port.
    pub port: u16,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    accepted: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl SilentDevice {
    /// Starts listening.
    pub fn start() -> Result<Self> {
        use std::sync::atomic::{AtomicBool, Ordering};
        let listener =
            std::net::TcpListener::bind("127.0.0.1:0").map_err(io("binding a silent device"))?;
        listener
            .set_nonblocking(true)
            .map_err(io("binding a silent device"))?;
        let port = listener
            .local_addr()
            .map_err(io("binding a silent device"))?
            .port();
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (flag, count) = (stop.clone(), accepted.clone());
        std::thread::spawn(move || {
            let mut held = Vec::new();
            while !flag.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((s, _)) => {
                        count.fetch_add(1, Ordering::SeqCst);
                        held.push(s);
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(20)),
                }
            }
        });
        Ok(Self {
            port,
            stop,
            accepted,
        })
    }

    /// How many connections it accepted so far.
    pub fn connections(&self) -> usize {
        self.accepted.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl Drop for SilentDevice {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// A TCP relay on 127.0.0.1 to `upstream` that cuts every connection `cut_after` it
/// accepted it (both directions shut down): a link that dies while a session logs
/// in, or later. Stopped when dropped.
pub struct CuttingRelay {
    /// Its port.
    pub port: u16,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl CuttingRelay {
    /// Starts relaying to 127.0.0.1:`upstream`.
    pub fn start(upstream: u16, cut_after: Duration) -> Result<Self> {
        let (port, stop) = relay(move |client| relay_until_cut(client, upstream, cut_after))?;
        Ok(Self { port, stop })
    }
}

/// Listens on a free 127.0.0.1 port and hands each connection to `each` on a thread
/// of its own, until the returned flag is set: the relays' common part.
fn relay(
    each: impl Fn(std::net::TcpStream) -> std::io::Result<()> + Send + 'static,
) -> Result<(u16, std::sync::Arc<std::sync::atomic::AtomicBool>)> {
    use std::sync::atomic::{AtomicBool, Ordering};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(io("binding a relay"))?;
    listener
        .set_nonblocking(true)
        .map_err(io("binding a relay"))?;
    let port = listener.local_addr().map_err(io("binding a relay"))?.port();
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    std::thread::spawn(move || {
        while !flag.load(Ordering::Relaxed) {
            let Ok((client, _)) = listener.accept() else {
                std::thread::sleep(Duration::from_millis(2));
                continue;
            };
            let _ = each(client);
        }
    });
    Ok((port, stop))
}

/// Relays one connection both ways and shuts both sides down `cut_after` after it
/// was accepted.
fn relay_until_cut(
    client: std::net::TcpStream,
    upstream: u16,
    cut_after: Duration,
) -> std::io::Result<()> {
    let accepted = Instant::now();
    client.set_nonblocking(false)?;
    let server = std::net::TcpStream::connect(("127.0.0.1", upstream))?;
    for (from, to) in [
        (client.try_clone()?, server.try_clone()?),
        (server.try_clone()?, client.try_clone()?),
    ] {
        std::thread::spawn(move || {
            let (mut from, mut to) = (from, to);
            let _ = std::io::copy(&mut from, &mut to);
        });
    }
    std::thread::spawn(move || {
        std::thread::sleep(cut_after.saturating_sub(accepted.elapsed()));
        let _ = client.shutdown(std::net::Shutdown::Both);
        let _ = server.shutdown(std::net::Shutdown::Both);
    });
    Ok(())
}

impl Drop for CuttingRelay {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// A TCP relay on 127.0.0.1 to `upstream` that holds back every chunk the device
/// sends by a delay that can be changed while it runs ([`SlowRelay::set_delay`]): a
/// device that answers everything, slowly. Stopped when dropped.
pub struct SlowRelay {
    /// Its port.
    pub port: u16,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    delay_ms: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl SlowRelay {
    /// Starts relaying to 127.0.0.1:`upstream`, holding back each answer by `delay`.
    pub fn start(upstream: u16, delay: Duration) -> Result<Self> {
        let delay_ms =
            std::sync::Arc::new(std::sync::atomic::AtomicU64::new(delay.as_millis() as u64));
        let held_back = delay_ms.clone();
        let (port, stop) = relay(move |client| relay_slowly(client, upstream, held_back.clone()))?;
        Ok(Self {
            port,
            stop,
            delay_ms,
        })
    }

    /// Holds back each answer by `delay` from now on.
    pub fn set_delay(&self, delay: Duration) {
        self.delay_ms.store(
            delay.as_millis() as u64,
            std::sync::atomic::Ordering::SeqCst,
        );
    }
}

/// Relays one connection: what the client sends at once, what the device sends
/// after the delay, chunk by chunk.
fn relay_slowly(
    client: std::net::TcpStream,
    upstream: u16,
    delay_ms: std::sync::Arc<std::sync::atomic::AtomicU64>,
) -> std::io::Result<()> {
    use std::io::{Read as _, Write as _};
    client.set_nonblocking(false)?;
    let device = std::net::TcpStream::connect(("127.0.0.1", upstream))?;
    let _ = (client.set_nodelay(true), device.set_nodelay(true));
    let (mut up_from, mut up_to) = (client.try_clone()?, device.try_clone()?);
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut up_from, &mut up_to);
        let _ = up_to.shutdown(std::net::Shutdown::Write);
    });
    let (mut down_from, mut down_to) = (device, client);
    std::thread::spawn(move || {
        let mut buf = [0u8; 16 * 1024];
        while let Ok(n @ 1..) = down_from.read(&mut buf) {
            let ms = delay_ms.load(std::sync::atomic::Ordering::SeqCst);
            std::thread::sleep(Duration::from_millis(ms));
            if down_to.write_all(&buf[..n]).is_err() {
                break;
            }
        }
        let _ = down_to.shutdown(std::net::Shutdown::Write);
    });
    Ok(())
}

impl Drop for SlowRelay {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

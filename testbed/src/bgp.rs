//! Real BGP speakers in network namespaces: [`Frr`] as a ToR (FRRouting's zebra and
//! bgpd, Debian `frr`, with their own configuration and socket directory, behind a
//! private sshd whose forced command is `vtysh`, so patchbay reaches it as an SSH CLI
//! device) and [`Gobgp`] as a node's speaker (Debian `gobgpd`, what MetalLB or
//! kube-vip would run), configured from a file in its own directory. Starts processes
//! (I/O); every daemon runs in the foreground and is stopped by the PID started here
//! (on drop, too). The namespaces are the caller's.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use super::{
    Result, TestbedError, current_user, free_port, io, rand_u32, run, ssh_keygen, start_sshd,
    terminate, write_private,
};

static SEQ: AtomicU32 = AtomicU32::new(0);

fn scratch(kind: &str) -> Result<PathBuf> {
    let seq = SEQ.fetch_add(1, Ordering::SeqCst);
    let dir = std::env::temp_dir().join(format!(
        "patchbay-{kind}-{}-{seq}-{:x}",
        std::process::id(),
        rand_u32()
    ));
    std::fs::create_dir_all(&dir).map_err(io("creating a BGP speaker's directory"))?;
    // The FRR daemons drop to user `frr` and write their sockets here.
    let _ = Command::new("chmod").arg("777").arg(&dir).status();
    Ok(dir)
}

fn stop_all(children: &mut Vec<Child>) {
    for mut c in children.drain(..) {
        terminate(c.id());
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if c.try_wait().ok().flatten().is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = c.kill();
        let _ = c.wait();
    }
}

/// Two network namespaces, a ToR's and a node's, joined by a veth pair (`eth0` on
/// each side, up, no address); deleted on drop.
pub struct Link {
    /// The ToR's namespace.
    pub tor: String,
    /// The node's namespace.
    pub node: String,
}

fn ip(args: &[&str]) -> Result<()> {
    let mut all = vec!["ip"];
    all.extend_from_slice(args);
    run(&all).map(drop)
}

impl Link {
    /// Creates the pair (names `pbb<pid><seq>t` and `…n`).
    pub fn new() -> Result<Self> {
        let tag = format!(
            "{}{}",
            std::process::id() % 100_000,
            SEQ.fetch_add(1, Ordering::SeqCst)
        );
        let me = Link {
            tor: format!("pbb{tag}t"),
            node: format!("pbb{tag}n"),
        };
        for ns in [&me.tor, &me.node] {
            ip(&["netns", "add", ns])?;
            ip(&["-n", ns, "link", "set", "lo", "up"])?;
        }
        ip(&[
            "-n", &me.tor, "link", "add", "eth0", "type", "veth", "peer", "name", "eth0", "netns",
            &me.node,
        ])?;
        for ns in [&me.tor, &me.node] {
            ip(&["-n", ns, "link", "set", "eth0", "up"])?;
        }
        Ok(me)
    }

    /// Adds `cidr` to `eth0` in namespace `ns`.
    pub fn address(&self, ns: &str, cidr: &str) -> Result<()> {
        ip(&["-n", ns, "addr", "add", cidr, "dev", "eth0"])
    }

    /// Adds a route to `destination` through `eth0` in namespace `ns`.
    pub fn route(&self, ns: &str, destination: &str) -> Result<()> {
        ip(&["-n", ns, "route", "add", destination, "dev", "eth0"])
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        for ns in [&self.tor, &self.node] {
            let _ = Command::new("ip")
                .args(["netns", "del", ns])
                .stderr(Stdio::null())
                .status();
        }
    }
}

/// FRRouting as a ToR: see the module docs.
pub struct Frr {
    dir: PathBuf,
    netns: String,
    daemons: Vec<Child>,
    sshd: Option<Child>,
    /// sshd's port on 127.0.0.1.
    pub ssh_port: u16,
    /// The login.
    pub username: String,
    /// The private key that logs in (OpenSSH PEM).
    pub client_key: String,
    /// sshd's host key fingerprint (`SHA256:…`).
    pub host_key_fingerprint: String,
}

impl Frr {
    /// Starts zebra and bgpd in `netns` with an empty configuration (hostname
    /// `hostname`), and the sshd in front of vtysh; waits until vtysh answers.
    pub fn start(netns: &str, hostname: &str) -> Result<Self> {
        let dir = scratch("frr")?;
        let mut me = Self {
            dir,
            netns: netns.to_owned(),
            daemons: Vec::new(),
            sshd: None,
            ssh_port: 0,
            username: current_user()?,
            client_key: String::new(),
            host_key_fingerprint: String::new(),
        };
        std::fs::write(me.dir.join("frr.conf"), format!("hostname {hostname}\n"))
            .map_err(io("writing frr.conf"))?;
        me.start_daemons()?;
        for name in ["hostkey", "client"] {
            ssh_keygen(&me.dir.join(name))?;
        }
        std::fs::copy(me.dir.join("client.pub"), me.dir.join("authorized_keys"))
            .map_err(io("writing authorized_keys"))?;
        me.client_key =
            std::fs::read_to_string(me.dir.join("client")).map_err(io("reading the client key"))?;
        let shell = me.dir.join("vtysh-login");
        std::fs::write(
            &shell,
            format!("#!/bin/sh\nexec vtysh --vty_socket {}\n", me.dir.display()),
        )
        .map_err(io("writing the vtysh login"))?;
        let _ = Command::new("chmod").arg("755").arg(&shell).status();
        me.ssh_port = free_port()?;
        let (sshd, fingerprint) = start_sshd(
            &me.dir,
            me.ssh_port,
            &format!("ForceCommand {}\n", shell.display()),
        )?;
        me.sshd = Some(sshd);
        me.host_key_fingerprint = fingerprint;
        Ok(me)
    }

    fn daemon(&self, name: &str) -> Result<Child> {
        let d = self.dir.display().to_string();
        let log = std::fs::File::create(self.dir.join(format!("{name}.out")))
            .map_err(io("creating a daemon's log"))?;
        Command::new("ip")
            .args([
                "netns",
                "exec",
                &self.netns,
                &format!("/usr/lib/frr/{name}"),
            ])
            .args(["--vty_socket", &d, "-z", &format!("{d}/zserv.api")])
            .args(["-i", &format!("{d}/{name}.pid")])
            .args(["-f", &format!("{d}/frr.conf")])
            .args(["-u", "frr", "-g", "frr", "-A", "127.0.0.1", "-P", "0"])
            .args(["--log", &format!("file:{d}/{name}.log")])
            .stdin(Stdio::null())
            .stdout(Stdio::from(log.try_clone().map_err(io("a daemon's log"))?))
            .stderr(Stdio::from(log))
            .spawn()
            .map_err(io(format!("starting {name} (apt-get install frr)")))
    }

    fn start_daemons(&mut self) -> Result<()> {
        for name in ["zebra", "bgpd"] {
            let child = self.daemon(name)?;
            self.daemons.push(child);
            let socket = self.dir.join(format!("{name}.vty"));
            let deadline = Instant::now() + Duration::from_secs(10);
            while !socket.exists() {
                if Instant::now() > deadline {
                    return Err(TestbedError::Failed(format!(
                        "{name} did not open its vty within 10 s: {}",
                        std::fs::read_to_string(self.dir.join(format!("{name}.out")))
                            .unwrap_or_default()
                    )));
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        // Answers once both daemons are up.
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.vtysh(&["show bgp summary json"]).is_err() {
            if Instant::now() > deadline {
                return Err(TestbedError::Failed(
                    "vtysh did not answer within 10 s".into(),
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    }

    /// Runs `commands` in one vtysh (each a `-c`), returns what it printed.
    pub fn vtysh(&self, commands: &[&str]) -> Result<String> {
        let mut cmd = Command::new("vtysh");
        cmd.arg("--vty_socket").arg(&self.dir);
        for c in commands {
            cmd.arg("-c").arg(c);
        }
        let out = cmd.output().map_err(io("running vtysh"))?;
        if !out.status.success() {
            return Err(TestbedError::Failed(format!(
                "vtysh {commands:?}: {}{}",
                String::from_utf8_lossy(&out.stdout).trim(),
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// `show bgp summary json`'s peers: address → state.
    pub fn peer_states(&self) -> Result<Vec<(String, String)>> {
        let text = self.vtysh(&["show bgp summary json"])?;
        let v: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| TestbedError::Failed(format!("show bgp summary json: {e}: {text}")))?;
        Ok(v.pointer("/ipv4Unicast/peers")
            .and_then(|p| p.as_object())
            .map(|peers| {
                peers
                    .iter()
                    .map(|(a, p)| {
                        (
                            a.clone(),
                            p.get("state")
                                .and_then(|s| s.as_str())
                                .unwrap_or_default()
                                .to_owned(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default())
    }

    /// The prefixes in bgpd's IPv4 table (`show ip bgp json`).
    pub fn routes(&self) -> Result<Vec<String>> {
        let text = self.vtysh(&["show ip bgp json"])?;
        let v: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| TestbedError::Failed(format!("show ip bgp json: {e}: {text}")))?;
        Ok(v.get("routes")
            .and_then(|r| r.as_object())
            .map(|r| r.keys().cloned().collect())
            .unwrap_or_default())
    }

    /// The last `lines` lines of each daemon's log and output, and of sshd's, for a
    /// failing test's message.
    pub fn log_tail(&self, lines: usize) -> String {
        let mut out = String::new();
        for name in ["zebra.log", "zebra.out", "bgpd.log", "bgpd.out", "sshd.log"] {
            let text = std::fs::read_to_string(self.dir.join(name)).unwrap_or_default();
            let all: Vec<&str> = text.lines().collect();
            let tail = &all[all.len().saturating_sub(lines)..];
            out.push_str(&format!("--- {name} (last {} lines)\n", tail.len()));
            for l in tail {
                out.push_str(l);
                out.push('\n');
            }
        }
        out
    }

    /// Stops bgpd (SIGSTOP): the speaker hangs, as a ToR whose routing daemon is
    /// stuck; vtysh (the test's too) waits until [`Frr::resume`].
    pub fn pause(&self) {
        self.signal("STOP");
    }

    /// Lets a paused bgpd go on (SIGCONT).
    pub fn resume(&self) {
        self.signal("CONT");
    }

    fn signal(&self, which: &str) {
        if let Some(bgpd) = self.daemons.get(1) {
            let _ = Command::new("kill")
                .args([&format!("-{which}"), &bgpd.id().to_string()])
                .status();
        }
    }

    /// Kills both daemons and starts them again with the empty configuration they
    /// began with (a ToR that rebooted without saving).
    pub fn restart_empty(&mut self) -> Result<()> {
        stop_all(&mut self.daemons);
        for name in ["zebra", "bgpd"] {
            let _ = std::fs::remove_file(self.dir.join(format!("{name}.vty")));
        }
        self.start_daemons()
    }

    /// Stops the daemons and the sshd, removes the directory.
    pub fn stop(&mut self) {
        self.resume();
        stop_all(&mut self.daemons);
        if let Some(s) = self.sshd.take() {
            stop_all(&mut vec![s]);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Drop for Frr {
    fn drop(&mut self) {
        self.stop();
    }
}

/// One peer of a [`Gobgp`], as the node would configure it from what it was told.
#[derive(Debug, Clone)]
pub struct GobgpPeer {
    /// The ToR's address.
    pub address: String,
    /// The ToR's ASN.
    pub asn: u32,
    /// The node's own address (the session's source).
    pub local_address: String,
    /// The MD5 password.
    pub password: Option<String>,
}

/// GoBGP as a node's speaker: see the module docs.
pub struct Gobgp {
    dir: PathBuf,
    child: Option<Child>,
    /// Its gRPC API port on 127.0.0.1 of its namespace.
    pub api_port: u16,
    netns: String,
}

impl Gobgp {
    /// Starts gobgpd in `netns` as `asn` with `peers` (timers 3/9 s, connect retry
    /// 1 s, TTL security on); waits until its API answers.
    pub fn start(netns: &str, asn: u32, router_id: &str, peers: &[GobgpPeer]) -> Result<Self> {
        let dir = scratch("gobgp")?;
        let mut conf =
            format!("[global.config]\n  as = {asn}\n  router-id = \"{router_id}\"\n  port = 179\n");
        for p in peers {
            conf.push_str(&format!(
                "[[neighbors]]\n  [neighbors.config]\n    neighbor-address = \"{}\"\n    peer-as = {}\n",
                p.address, p.asn
            ));
            if let Some(pw) = &p.password {
                conf.push_str(&format!("    auth-password = \"{pw}\"\n"));
            }
            conf.push_str(&format!(
                "  [neighbors.timers.config]\n    connect-retry = 1\n    hold-time = 9\n    keepalive-interval = 3\n  \
                 [neighbors.transport.config]\n    local-address = \"{}\"\n  \
                 [neighbors.ttl-security.config]\n    enabled = true\n    ttl-min = 255\n",
                p.local_address
            ));
        }
        // The password is in this file only (0600), never on a command line.
        write_private(&dir.join("gobgpd.toml"), conf.as_bytes())?;
        let api_port = free_port()?;
        let log = std::fs::File::create(dir.join("gobgpd.log")).map_err(io("gobgpd's log"))?;
        let child = Command::new("ip")
            .args(["netns", "exec", netns, "gobgpd", "-f"])
            .arg(dir.join("gobgpd.toml"))
            .args(["--api-hosts", &format!("127.0.0.1:{api_port}")])
            .args(["--log-level", "info"])
            .stdin(Stdio::null())
            .stdout(Stdio::from(log.try_clone().map_err(io("gobgpd's log"))?))
            .stderr(Stdio::from(log))
            .spawn()
            .map_err(io("starting gobgpd (apt-get install gobgpd)"))?;
        let me = Self {
            dir,
            child: Some(child),
            api_port,
            netns: netns.to_owned(),
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while me.gobgp(&["global"]).is_err() {
            if Instant::now() > deadline {
                return Err(TestbedError::Failed(format!(
                    "gobgpd did not answer within 10 s: {}",
                    std::fs::read_to_string(me.dir.join("gobgpd.log")).unwrap_or_default()
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(me)
    }

    /// Runs the `gobgp` client against this daemon.
    pub fn gobgp(&self, args: &[&str]) -> Result<String> {
        let out = Command::new("ip")
            .args(["netns", "exec", &self.netns, "gobgp", "--port"])
            .arg(self.api_port.to_string())
            .args(args)
            .output()
            .map_err(io("running gobgp"))?;
        if !out.status.success() {
            return Err(TestbedError::Failed(format!(
                "gobgp {args:?}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Announces `prefix` (next hop: itself).
    pub fn announce(&self, prefix: &str) -> Result<()> {
        self.gobgp(&["global", "rib", "add", prefix]).map(drop)
    }

    /// Whether the session with `address` is Established.
    pub fn established(&self, address: &str) -> bool {
        self.gobgp(&["-j", "neighbor", address])
            .ok()
            .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
            .and_then(|v| v.pointer("/state/session_state").and_then(|s| s.as_u64()))
            == Some(6)
    }

    /// Its log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("gobgpd.log")).unwrap_or_default()
    }

    /// Stops gobgpd, removes the directory.
    pub fn stop(&mut self) {
        if let Some(c) = self.child.take() {
            stop_all(&mut vec![c]);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Drop for Gobgp {
    fn drop(&mut self) {
        self.stop();
    }
}

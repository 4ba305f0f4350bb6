//! A cabled fabric that speaks real LLDP: a "switch" network namespace running lldpd
//! (Debian `lldpd`, its own control socket), hosts in namespaces of their own each
//! running lldpd, joined to the switch by veth pairs whose switch ends are named like
//! switch ports, and a private sshd on 127.0.0.1 through which patchbay reads the
//! switch's lldpd (`lldpcli -u SOCKET`), as it would a Linux-based switch. Starts
//! processes and namespaces (I/O); dropping it stops every lldpd and the sshd by the
//! PIDs started here and deletes only the namespaces it created.
//!
//! LLDP runs with a 1 s transmit interval (TTL 4 s), so a neighbour appears within
//! about a second and a moved cable's old neighbour is gone within ~4 s.
//!
//! The switch side can also be a namespace that exists already ([`LldpFabric::start_in`]:
//! Open vSwitch's, whose bridge ports are the veth ends lldpd listens on), and a host
//! one cabled by someone else ([`LldpFabric::speak`]); those namespaces are left as
//! they are on stop.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use super::{
    Result, TestbedError, current_user, free_port, io, rand_u32, run, ssh_keygen, start_sshd,
    terminate,
};

static SEQ: AtomicU32 = AtomicU32::new(0);

/// One host of the fabric.
#[derive(Debug, Clone)]
pub struct LldpHost {
    /// Its network namespace.
    pub netns: String,
    /// The MAC address of its `eth0`.
    pub mac: String,
    /// The LLDP system name it sends.
    pub name: String,
    /// The switch port its cable is in.
    pub port: String,
}

/// The fabric: see the module docs.
pub struct LldpFabric {
    dir: PathBuf,
    tag: String,
    daemons: Vec<Child>,
    sshd: Option<Child>,
    /// The namespaces created here (deleted on stop).
    created: Vec<String>,
    /// The switch's network namespace.
    pub switch_netns: String,
    /// The switch lldpd's control socket (what `lldpSocket` names).
    pub switch_socket: String,
    /// The hosts, in the order added.
    pub hosts: Vec<LldpHost>,
    /// sshd's port on 127.0.0.1.
    pub ssh_port: u16,
    /// The login.
    pub username: String,
    /// The private key that logs in (OpenSSH PEM).
    pub client_key: String,
    /// sshd's host key fingerprint (`SHA256:…`).
    pub host_key_fingerprint: String,
}

impl LldpFabric {
    /// Starts the switch's namespace and lldpd (system name `switch_name`) and the
    /// sshd; waits until both answer.
    pub fn start(switch_name: &str) -> Result<Self> {
        Self::starting(None, switch_name)
    }

    /// Like [`LldpFabric::start`], with the switch's lldpd in namespace `netns`, which
    /// exists already (Open vSwitch's) and is left as it is on stop, speaking only on
    /// the interfaces `pattern` names (lldpd's `-I`: the bridge's ports, not the
    /// datapath's own devices, a send on which can stall lldpd).
    pub fn start_in(netns: &str, switch_name: &str, pattern: &str) -> Result<Self> {
        Self::starting(Some((netns, pattern)), switch_name)
    }

    fn starting(existing: Option<(&str, &str)>, switch_name: &str) -> Result<Self> {
        let seq = SEQ.fetch_add(1, Ordering::SeqCst);
        let tag = format!("{}{seq}", std::process::id() % 100_000);
        let dir = std::env::temp_dir().join(format!("patchbay-lldp-{tag}-{:x}", rand_u32()));
        std::fs::create_dir_all(&dir).map_err(io("creating the fabric's directory"))?;
        let mut me = Self {
            switch_netns: existing.map_or_else(|| format!("pbl{tag}s"), |(ns, _)| ns.to_owned()),
            switch_socket: dir.join("switch.sock").display().to_string(),
            dir,
            tag,
            daemons: Vec::new(),
            sshd: None,
            created: Vec::new(),
            hosts: Vec::new(),
            ssh_port: 0,
            username: current_user()?,
            client_key: String::new(),
            host_key_fingerprint: String::new(),
        };
        if existing.is_none() {
            run(&["ip", "netns", "add", &me.switch_netns])?;
            me.created.push(me.switch_netns.clone());
            run(&["ip", "-n", &me.switch_netns, "link", "set", "lo", "up"])?;
        }
        let (netns, socket) = (me.switch_netns.clone(), me.switch_socket.clone());
        me.lldpd(&netns, &socket, switch_name, existing.map(|(_, p)| p))?;
        for name in ["hostkey", "client"] {
            ssh_keygen(&me.dir.join(name))?;
        }
        std::fs::copy(me.dir.join("client.pub"), me.dir.join("authorized_keys"))
            .map_err(io("writing authorized_keys"))?;
        me.client_key =
            std::fs::read_to_string(me.dir.join("client")).map_err(io("reading the client key"))?;
        me.ssh_port = free_port()?;
        let (sshd, fingerprint) = start_sshd(&me.dir, me.ssh_port, "")?;
        me.sshd = Some(sshd);
        me.host_key_fingerprint = fingerprint;
        Ok(me)
    }

    /// Starts lldpd in `netns` with control socket `socket`, sending `name` as its
    /// system name every second; waits until it answers. The settings are lldpd's
    /// start-up configuration (`-O`): applied before it first speaks (set after,
    /// a daemon that found its interfaces already there sometimes sent once and
    /// never again).
    fn lldpd(
        &mut self,
        netns: &str,
        socket: &str,
        name: &str,
        pattern: Option<&str>,
    ) -> Result<()> {
        let log = format!("{socket}.log");
        let conf = format!("{socket}.conf");
        std::fs::write(
            &conf,
            format!("configure lldp tx-interval 1\nconfigure system hostname {name}\n"),
        )
        .map_err(io("writing lldpd's configuration"))?;
        let child = Command::new("ip")
            .args(["netns", "exec", netns, "lldpd", "-d", "-u", socket])
            .args(["-p", &format!("{socket}.pid"), "-O", &conf])
            .args(pattern.map(|p| ["-I", p]).into_iter().flatten())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(
                std::fs::File::create(&log).map_err(io("creating lldpd's log"))?,
            ))
            .spawn()
            .map_err(io("starting lldpd (apt-get install lldpd)"))?;
        self.daemons.push(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let configured = Command::new("lldpcli")
                .args(["-u", socket, "show", "configuration"])
                .stderr(Stdio::null())
                .output()
                .is_ok_and(|o| {
                    let text = String::from_utf8_lossy(&o.stdout);
                    o.status.success()
                        && text.contains("Transmit delay: 1\n")
                        && text.contains(&format!("Override system name with: {name}"))
                });
            if configured {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(TestbedError::Failed(format!(
                    "lldpd in {netns} did not answer within 10 s: {}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Adds a host sending LLDP as `name` from an `eth0` with MAC `mac`, cabled to
    /// switch port `port`. Returns its index once the switch's lldpd sees every host
    /// on its port (so a test never races a busy machine's first LLDP frames).
    pub fn add_host(&mut self, name: &str, mac: &str, port: &str) -> Result<usize> {
        let i = self.hosts.len();
        let netns = format!("pbl{}h{i}", self.tag);
        run(&["ip", "netns", "add", &netns])?;
        self.created.push(netns.clone());
        let host = LldpHost {
            netns: netns.clone(),
            mac: mac.to_owned(),
            name: name.to_owned(),
            port: port.to_owned(),
        };
        self.hosts.push(host);
        run(&["ip", "-n", &netns, "link", "set", "lo", "up"])?;
        self.cable(i, port)?;
        let socket = self.dir.join(format!("h{i}.sock")).display().to_string();
        self.lldpd(&netns, &socket, name, None)?;
        self.wait_until_switch_sees_all()?;
        Ok(i)
    }

    /// Makes the host in namespace `netns` (which exists, its `eth0` with MAC `mac`
    /// cabled by someone else to switch port `port`) send LLDP as `name`. Returns
    /// its index once the switch's lldpd sees it.
    pub fn speak(&mut self, netns: &str, name: &str, mac: &str, port: &str) -> Result<usize> {
        let i = self.hosts.len();
        self.hosts.push(LldpHost {
            netns: netns.to_owned(),
            mac: mac.to_owned(),
            name: name.to_owned(),
            port: port.to_owned(),
        });
        let socket = self.dir.join(format!("h{i}.sock")).display().to_string();
        self.lldpd(netns, &socket, name, None)?;
        self.poke();
        self.wait_until_switch_sees_all()?;
        Ok(i)
    }

    /// Host `i`'s cable is now in switch port `port` (moved by someone else): returns
    /// once the switch's lldpd sees it there.
    pub fn recabled(&mut self, i: usize, port: &str) -> Result<()> {
        self.hosts[i].port = port.to_owned();
        self.poke();
        self.wait_until_switch_sees_all()
    }

    /// Plugs host `i`'s cable into switch port `port` (a new veth pair).
    fn cable(&mut self, i: usize, port: &str) -> Result<()> {
        let host = &self.hosts[i];
        run(&[
            "ip",
            "-n",
            &self.switch_netns,
            "link",
            "add",
            port,
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "netns",
            &host.netns,
        ])?;
        run(&[
            "ip",
            "-n",
            &host.netns,
            "link",
            "set",
            "eth0",
            "address",
            &host.mac,
        ])?;
        run(&["ip", "-n", &host.netns, "link", "set", "eth0", "up"])?;
        run(&["ip", "-n", &self.switch_netns, "link", "set", port, "up"])?;
        self.hosts[i].port = port.to_owned();
        self.poke();
        Ok(())
    }

    /// Asks every running lldpd to look at its interfaces again and send at once
    /// (`lldpcli update`): a new veth end is then seen without waiting for lldpd's
    /// own rescan (which a busy machine can delay).
    fn poke(&self) {
        let sockets = std::iter::once(self.switch_socket.clone()).chain(
            (0..self.hosts.len())
                .map(|i| self.dir.join(format!("h{i}.sock")).display().to_string()),
        );
        for s in sockets.filter(|s| std::path::Path::new(s).exists()) {
            let _ = Command::new("lldpcli")
                .args(["-u", &s, "update"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
    }

    /// Moves host `i`'s cable to switch port `port` (the old port disappears); returns
    /// once the switch's lldpd sees it there.
    pub fn move_cable(&mut self, i: usize, port: &str) -> Result<()> {
        let old = self.hosts[i].port.clone();
        run(&["ip", "-n", &self.switch_netns, "link", "del", &old])?;
        self.cable(i, port)?;
        self.wait_until_switch_sees_all()
    }

    /// Swaps the cables of hosts `a` and `b`; returns once the switch's lldpd sees
    /// both on their new ports.
    pub fn swap_cables(&mut self, a: usize, b: usize) -> Result<()> {
        let (pa, pb) = (self.hosts[a].port.clone(), self.hosts[b].port.clone());
        for p in [&pa, &pb] {
            run(&["ip", "-n", &self.switch_netns, "link", "del", p])?;
        }
        self.cable(a, &pb)?;
        self.cable(b, &pa)?;
        self.wait_until_switch_sees_all()
    }

    /// `lldpcli -f json0 show neighbors details` on the switch, as the test sees it.
    pub fn switch_neighbors_json(&self) -> Result<String> {
        run(&[
            "lldpcli",
            "-u",
            &self.switch_socket,
            "-f",
            "json0",
            "show",
            "neighbors",
            "details",
        ])
    }

    /// Waits (up to 20 s) until the switch's lldpd sees every host on its port;
    /// every 2 s it asks every lldpd to look at its interfaces again and send
    /// (`lldpcli update`), in case one missed a new interface on a busy machine.
    fn wait_until_switch_sees_all(&self) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut poke = Instant::now() + Duration::from_secs(2);
        loop {
            if Instant::now() > poke {
                self.poke();
                poke = Instant::now() + Duration::from_secs(2);
            }
            let seen = self.switch_neighbors_json()?;
            let json: serde_json::Value =
                serde_json::from_str(&seen).map_err(|source| TestbedError::Description {
                    what: "lldpcli's neighbours",
                    source,
                })?;
            let ports: Vec<&str> = json["lldp"]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|s| s["interface"].as_array().into_iter().flatten())
                .filter_map(|i| i["name"].as_str())
                .collect();
            if self.hosts.iter().all(|h| ports.contains(&h.port.as_str())) {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(TestbedError::Failed(format!(
                    "the switch's lldpd sees {ports:?} after 20 s; {}",
                    self.lldpd_state()
                )));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// What the lldpds say, for a failure's message (seen once in a full run, never
    /// again in a loop of them): the switch's interfaces as lldpd sees them, and
    /// every lldpd's log.
    fn lldpd_state(&self) -> String {
        let interfaces = run(&["lldpcli", "-u", &self.switch_socket, "show", "statistics"])
            .unwrap_or_else(|e| format!("({e})"));
        let hosts: Vec<String> = (0..self.hosts.len())
            .map(|i| {
                let socket = self.dir.join(format!("h{i}.sock")).display().to_string();
                let stats = run(&["lldpcli", "-u", &socket, "show", "statistics"])
                    .unwrap_or_else(|e| format!("({e})"));
                format!("host {i} ({}): {}", self.hosts[i].port, stats.trim())
            })
            .collect();
        let interfaces = format!("{}; {}", interfaces.trim(), hosts.join("; "));
        let mut logs: Vec<String> = std::fs::read_dir(&self.dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.to_string_lossy().ends_with(".sock.log"))
            .map(|p| {
                let log = std::fs::read_to_string(&p).unwrap_or_default();
                format!("{}: {}", p.display(), log.trim())
            })
            .collect();
        logs.sort();
        format!(
            "the switch's interfaces: {}; lldpd logs: {}",
            interfaces.trim(),
            logs.join(" | ")
        )
    }

    /// `lldpcli -f json0 show neighbors` on host `i`: what it sees of the switch.
    pub fn host_neighbors_json(&self, i: usize) -> Result<String> {
        let socket = self.dir.join(format!("h{i}.sock")).display().to_string();
        run(&["lldpcli", "-u", &socket, "-f", "json0", "show", "neighbors"])
    }

    /// Stops every lldpd and the sshd (by the PIDs started here), deletes the
    /// namespaces created here and the directory.
    pub fn stop(&mut self) {
        for mut d in self.daemons.drain(..) {
            terminate(d.id());
            let _ = d.wait();
        }
        if let Some(mut sshd) = self.sshd.take() {
            terminate(sshd.id());
            let _ = sshd.wait();
        }
        for ns in self.created.drain(..) {
            let _ = Command::new("ip")
                .args(["netns", "del", &ns])
                .stderr(Stdio::null())
                .status();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Drop for LldpFabric {
    fn drop(&mut self) {
        self.stop();
    }
}

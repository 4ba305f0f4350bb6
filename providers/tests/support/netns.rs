//! Hosts for traffic tests: network namespaces joined by veth pairs to an Open vSwitch
//! bridge. Each host gets `eth0` with 10.77.<net>.<i>/24 inside its namespace,
//! transmit checksum offload off (TCP over the userspace datapath needs it), and the
//! other end of its veth, moved into the switch's namespace, on the bridge as a port
//! named after the link. Drop deletes only the namespaces (and so the links) this
//! helper created.

#![allow(dead_code)]

use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

use patchbay_testbed::OvsSim;

static SEQ: AtomicU32 = AtomicU32::new(0);

/// A ping running in a host's namespace ([`Hosts::chatter`]), stopped on drop.
pub struct Chatter(std::process::Child);

impl Drop for Chatter {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A link from the root namespace onto a bridge ([`Hosts::reach_from_root`]),
/// deleted on drop.
pub struct RootLink(String);

impl Drop for RootLink {
    fn drop(&mut self) {
        let _ = run(&["ip", "link", "del", &self.0]);
    }
}

/// An HTTP server in a host's namespace ([`Hosts::serve_http`]).
pub struct HttpServer {
    _child: Chatter,
    dir: std::path::PathBuf,
}

impl HttpServer {
    /// The request lines it logged so far (`GET /healthz HTTP/1.1`, with the
    /// client's address first).
    pub fn requests(&self) -> Vec<String> {
        std::fs::read_to_string(self.dir.join("requests.log"))
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("\"GET "))
            .map(str::to_owned)
            .collect()
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Namespaced hosts on one bridge.
pub struct Hosts {
    /// Namespace names, one per host.
    pub namespaces: Vec<String>,
    /// The bridge-side veth names (the OVS port names), one per host.
    pub ports: Vec<String>,
    net: u32,
    tag: String,
}

fn run(args: &[&str]) -> Result<String, String> {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .map_err(|e| format!("{}: {e}", args[0]))?;
    if !out.status.success() {
        return Err(format!(
            "{}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

impl Hosts {
    /// Creates `n` hosts attached to `bridge` of `ovs`.
    pub fn create(ovs: &OvsSim, bridge: &str, n: usize) -> Hosts {
        Self::create_on(ovs, &vec![bridge; n])
    }

    /// Creates one host per entry of `bridges`, attached to that bridge of `ovs`
    /// (all in one subnet).
    pub fn create_on(ovs: &OvsSim, bridges: &[&str]) -> Hosts {
        let seq = SEQ.fetch_add(1, Ordering::SeqCst);
        let tag = format!("{}{}", std::process::id() % 100_000, seq);
        let mut hosts = Hosts {
            namespaces: Vec::new(),
            ports: Vec::new(),
            net: (std::process::id() + seq * 7) % 250 + 1,
            tag: tag.clone(),
        };
        for (i, bridge) in (1..).zip(bridges) {
            let ns = format!("pb{tag}h{i}");
            let link = format!("pb{tag}v{i}");
            run(&["ip", "netns", "add", &ns]).expect("netns add");
            hosts.namespaces.push(ns.clone());
            run(&[
                "ip", "link", "add", &link, "type", "veth", "peer", "name", "eth0", "netns", &ns,
            ])
            .expect("veth pair");
            hosts.ports.push(link.clone());
            run(&["ip", "link", "set", &link, "netns", &ovs.info.netns]).expect("into the switch");
            run(&["ip", "-n", &ovs.info.netns, "link", "set", &link, "up"]).expect("link up");
            let addr = format!("10.77.{}.{i}/24", hosts.net);
            run(&["ip", "-n", &ns, "addr", "add", &addr, "dev", "eth0"]).expect("address");
            run(&["ip", "-n", &ns, "link", "set", "eth0", "up"]).expect("eth0 up");
            run(&["ip", "-n", &ns, "link", "set", "lo", "up"]).expect("lo up");
            run(&[
                "ip", "netns", "exec", &ns, "ethtool", "-K", "eth0", "tx", "off",
            ])
            .expect("tx checksum offload off");
            ovs.vsctl(&["add-port", bridge, &link]).expect("add-port");
            // add-port exits 0 even when the port failed: wait for an ofport, and
            // report the interface's error column if none comes.
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
            loop {
                let ofport = ovs
                    .vsctl(&["get", "Interface", &link, "ofport"])
                    .expect("ofport");
                if ofport.parse::<i64>().is_ok_and(|p| p > 0) {
                    break;
                }
                assert!(
                    std::time::Instant::now() < deadline && ofport != "-1",
                    "{link} did not attach (ofport {ofport}): {:?}",
                    ovs.vsctl(&["get", "Interface", &link, "error"])
                );
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        }
        hosts
    }

    /// Host `from` pinging host `to` five times a second until the returned guard
    /// drops: traffic that keeps the bridge learning `from`'s MAC while its port
    /// lets its frames in.
    pub fn chatter(&self, from: usize, to: usize) -> Chatter {
        let child = Command::new("ip")
            .args(["netns", "exec", &self.namespaces[from], "ping", "-q", "-n"])
            .args(["-i", "0.2", "-W", "1"])
            .arg(self.ip(to))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("ping runs");
        Chatter(child)
    }

    /// A veth from the root namespace onto `bridge` of `ovs` as an access port of
    /// VLAN `vlan`, the root side addressed 10.77.<net>.250/24: what runs in the root
    /// namespace (the operator) reaches the hosts on that VLAN through the switch,
    /// and only them. Removed on drop.
    pub fn reach_from_root(&self, ovs: &OvsSim, bridge: &str, vlan: u16) -> RootLink {
        let (root, far) = (format!("pb{}r", self.tag), format!("pb{}o", self.tag));
        run(&[
            "ip", "link", "add", &root, "type", "veth", "peer", "name", &far,
        ])
        .expect("veth");
        let link = RootLink(root.clone());
        run(&["ip", "link", "set", &far, "netns", &ovs.info.netns]).expect("into the switch");
        run(&["ip", "-n", &ovs.info.netns, "link", "set", &far, "up"]).expect("far up");
        ovs.vsctl(&["add-port", bridge, &far, &format!("tag={vlan}")])
            .expect("add-port");
        let addr = format!("10.77.{}.250/24", self.net);
        run(&["ip", "addr", "add", &addr, "dev", &root]).expect("address");
        run(&["ip", "link", "set", &root, "up"]).expect("root up");
        run(&["ethtool", "-K", &root, "tx", "off"]).expect("tx checksum offload off");
        link
    }

    /// An HTTP server on port `port` of host `i`, serving `/healthz` (200), its
    /// requests logged to the returned guard's [`HttpServer::requests`]; stopped on
    /// drop.
    pub fn serve_http(&self, i: usize, port: u16) -> HttpServer {
        let dir = std::env::temp_dir().join(format!("pb-http-{}-{i}", self.tag));
        std::fs::create_dir_all(&dir).expect("web root");
        std::fs::write(dir.join("healthz"), "ok\n").expect("healthz");
        let log = std::fs::File::create(dir.join("requests.log")).expect("log");
        let child = Command::new("ip")
            .args([
                "netns",
                "exec",
                &self.namespaces[i],
                "python3",
                "-m",
                "http.server",
            ])
            .arg(port.to_string())
            .args(["--bind", &self.ip(i), "--directory"])
            .arg(&dir)
            .stdout(std::process::Stdio::null())
            .stderr(log)
            .spawn()
            .expect("http.server runs");
        HttpServer {
            _child: Chatter(child),
            dir,
        }
    }

    /// The IPv4 address of host `i` (0-based).
    pub fn ip(&self, i: usize) -> String {
        format!("10.77.{}.{}", self.net, i + 1)
    }

    /// Packet loss in percent of `count` pings from host `from` to host `to`.
    pub fn loss(&self, from: usize, to: usize, count: u32) -> u32 {
        let out = Command::new("ip")
            .args(["netns", "exec", &self.namespaces[from], "ping", "-q", "-n"])
            .args(["-c", &count.to_string(), "-i", "0.2", "-W", "1"])
            .arg(self.ip(to))
            .output()
            .expect("ping runs");
        let text = String::from_utf8_lossy(&out.stdout);
        text.split(", ")
            .find_map(|part| part.strip_suffix("% packet loss"))
            .and_then(|p| p.trim().parse::<f32>().ok())
            .map(|p| p.round() as u32)
            .unwrap_or_else(|| panic!("no ping summary in {text:?}"))
    }

    /// How many of `count` raw Ethernet frames tagged with VLAN `vlan` (802.1Q,
    /// broadcast, a marker payload) sent from host `from`'s eth0 arrive at host
    /// `to`'s eth0, tagged or not. Raw AF_PACKET sockets in Python: this kernel has no
    /// 802.1Q module for VLAN subinterfaces.
    pub fn tagged_frames_arriving(&self, from: usize, to: usize, vlan: u16, count: u32) -> u32 {
        const RECEIVE: &str = r#"
import socket, sys, time
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
s.bind(("eth0", 0))
s.settimeout(0.1)
print("ready", flush=True)
end = time.time() + float(sys.argv[2])
n = 0
while time.time() < end:
    try:
        d = s.recv(65535)
    except socket.timeout:
        continue
    n += sys.argv[1].encode() in d
print(n)
"#;
        const SEND: &str = r#"
import socket, struct, sys, time
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind(("eth0", 0))
src = bytes.fromhex(open("/sys/class/net/eth0/address").read().strip().replace(":", ""))
f = b"\xff" * 6 + src + struct.pack("!HHH", 0x8100, int(sys.argv[2]), 0x88B5)
f += sys.argv[1].encode().ljust(46, b".")
for _ in range(int(sys.argv[3])):
    s.send(f)
    time.sleep(0.02)
"#;
        use std::io::BufRead;
        let marker = format!("patchbay-{}-{from}-{to}-{vlan}", std::process::id());
        let mut receiver = Command::new("ip")
            .args([
                "netns",
                "exec",
                &self.namespaces[to],
                "python3",
                "-c",
                RECEIVE,
            ])
            .args([&marker, "3"])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("receiver runs");
        let mut lines = std::io::BufReader::new(receiver.stdout.take().expect("stdout")).lines();
        assert_eq!(lines.next().and_then(Result::ok).as_deref(), Some("ready"));
        let sent = Command::new("ip")
            .args([
                "netns",
                "exec",
                &self.namespaces[from],
                "python3",
                "-c",
                SEND,
            ])
            .args([&marker, &vlan.to_string(), &count.to_string()])
            .output()
            .expect("sender runs");
        assert!(
            sent.status.success(),
            "{}",
            String::from_utf8_lossy(&sent.stderr)
        );
        let n = lines.next().and_then(Result::ok).unwrap_or_default();
        let _ = receiver.wait();
        n.trim()
            .parse()
            .unwrap_or_else(|_| panic!("receiver said {n:?}"))
    }

    /// The MAC address of host `i`'s eth0.
    pub fn mac(&self, i: usize) -> String {
        let out = run(&["ip", "-n", &self.namespaces[i], "link", "show", "eth0"]).expect("link");
        out.split_whitespace()
            .skip_while(|w| *w != "link/ether")
            .nth(1)
            .expect("a MAC address")
            .to_owned()
    }

    /// Starts TCP listeners on `ports` in host `i` (accepting and closing every
    /// connection); they stop when the returned child is dropped.
    pub fn listen(&self, i: usize, ports: &[u16]) -> Listener {
        let list = ports
            .iter()
            .map(u16::to_string)
            .collect::<Vec<_>>()
            .join(",");
        let script = format!(
            "import socket, select, sys\n\
             socks = []\n\
             for p in [{list}]:\n\
             \x20   s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n\
             \x20   s.bind(('0.0.0.0', p)); s.listen(64); socks.append(s)\n\
             print('ready', flush=True)\n\
             while True:\n\
             \x20   for s in select.select(socks, [], [])[0]:\n\
             \x20       s.accept()[0].close()\n"
        );
        let mut child = Command::new("ip")
            .args([
                "netns",
                "exec",
                &self.namespaces[i],
                "python3",
                "-c",
                &script,
            ])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("python3 listener starts");
        let mut line = String::new();
        let stdout = child.stdout.take().expect("stdout");
        std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line)
            .expect("listener says ready");
        assert_eq!(line.trim(), "ready", "listener on {ports:?} did not start");
        Listener(child)
    }

    /// Whether host `from` can open a TCP connection to host `to` on `port` (one
    /// attempt, 1.5 s).
    pub fn tcp_connects(&self, from: usize, to: usize, port: u16) -> bool {
        let script = format!(
            "import socket\nsocket.create_connection(('{}', {port}), timeout=1.5).close()",
            self.ip(to)
        );
        Command::new("ip")
            .args([
                "netns",
                "exec",
                &self.namespaces[from],
                "python3",
                "-c",
                &script,
            ])
            .stderr(std::process::Stdio::null())
            .status()
            .expect("python3 runs")
            .success()
    }

    /// A veth pair `a`–`b` inside the switch's namespace, both ends up: a cable
    /// between two bridges.
    pub fn cable(ovs: &OvsSim, a: &str, b: &str) {
        let ns = &ovs.info.netns;
        run(&[
            "ip", "-n", ns, "link", "add", a, "type", "veth", "peer", "name", b,
        ])
        .expect("veth pair");
        for end in [a, b] {
            run(&["ip", "-n", ns, "link", "set", end, "up"]).expect("link up");
        }
    }

    /// Takes link `name` of the switch's namespace down (`up` false) or up.
    pub fn set_link(ovs: &OvsSim, name: &str, up: bool) {
        let state = if up { "up" } else { "down" };
        run(&["ip", "-n", &ovs.info.netns, "link", "set", name, state]).expect("link state");
    }

    /// Whether host `i`'s eth0 has carrier.
    pub fn has_carrier(&self, i: usize) -> bool {
        let out = run(&["ip", "-n", &self.namespaces[i], "link", "show", "eth0"]).expect("link");
        !out.contains("NO-CARRIER")
    }
}

/// TCP listeners in a host (see [`Hosts::listen`]), stopped by the PID started.
pub struct Listener(std::process::Child);

impl Drop for Listener {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for ns in &self.namespaces {
            // Deleting the namespace deletes eth0 and with it the veth peer.
            let _ = run(&["ip", "netns", "del", ns]);
        }
    }
}

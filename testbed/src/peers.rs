//! Every program this crate starts or runs that is not part of Debian's base system,
//! where it comes from, and which `make` targets start it (through the tests, the
//! benchmarks or the demo). Each of those targets must install it: `tests/make.rs`
//! reads the targets' dry runs (`make -n -B`) and fails when one does not look for a
//! peer it starts. A new peer goes here with the code that starts it. Data only.

/// A program the test bed starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peer {
    /// What is started (a command on `PATH`, or a path).
    pub program: &'static str,
    /// What provides it: a Debian package, or a venv of the project's.
    pub from: &'static str,
    /// The text by which a target's recipe looks for it (`command -v lldpd`): a
    /// target whose dry run lacks it does not install it.
    pub check: &'static str,
    /// The `make` targets that start it (kubectl: that the demo tells its user to
    /// run).
    pub needed_by: &'static [&'static str],
}

/// The targets that run the test bed's code: the tests, the benchmarks, the demo.
const ALL: &[&str] = &["test", "bench", "demo"];
/// The tests and the benchmarks, not the demo.
const TESTS_AND_BENCH: &[&str] = &["test", "bench"];

/// Every peer (see the module docs).
pub const PEERS: &[Peer] = &[
    Peer {
        program: ".venv/fake-switch/bin/python",
        from: "fake-switch/requirements.txt (make fake-switch)",
        check: "python3 -m venv .venv/fake-switch",
        needed_by: ALL,
    },
    Peer {
        program: "ovs-vswitchd",
        from: "Debian openvswitch-switch",
        check: "command -v ovs-vswitchd",
        needed_by: ALL,
    },
    Peer {
        program: "ovsdb-server",
        from: "Debian openvswitch-switch",
        check: "command -v ovsdb-server",
        needed_by: ALL,
    },
    Peer {
        program: "ip",
        from: "Debian iproute2",
        check: "command -v ip ",
        needed_by: ALL,
    },
    Peer {
        program: "ethtool",
        from: "Debian ethtool",
        check: "command -v ethtool",
        needed_by: ALL,
    },
    Peer {
        program: "ping",
        from: "Debian iputils-ping",
        check: "command -v ping",
        needed_by: ALL,
    },
    Peer {
        program: "/usr/sbin/sshd",
        from: "Debian openssh-server",
        check: "test -x /usr/sbin/sshd",
        needed_by: ALL,
    },
    Peer {
        program: "ssh-keygen",
        from: "Debian openssh-client",
        check: "command -v ssh-keygen",
        needed_by: ALL,
    },
    Peer {
        program: "netconfd",
        from: "Debian netconfd",
        check: "command -v netconfd",
        needed_by: TESTS_AND_BENCH,
    },
    Peer {
        program: "/usr/sbin/netconf-subsystem",
        from: "Debian netconfd",
        check: "test -x /usr/sbin/netconf-subsystem",
        needed_by: TESTS_AND_BENCH,
    },
    Peer {
        program: "openssl",
        from: "Debian openssl",
        check: "command -v openssl",
        needed_by: TESTS_AND_BENCH,
    },
    Peer {
        program: "lldpd",
        from: "Debian lldpd",
        check: "command -v lldpd",
        needed_by: ALL,
    },
    Peer {
        program: "lldpcli",
        from: "Debian lldpd",
        check: "command -v lldpcli",
        needed_by: ALL,
    },
    Peer {
        program: "/usr/lib/frr/bgpd",
        from: "Debian frr",
        check: "test -x /usr/lib/frr/bgpd",
        needed_by: ALL,
    },
    Peer {
        program: "vtysh",
        from: "Debian frr",
        check: "command -v vtysh",
        needed_by: ALL,
    },
    Peer {
        program: "gobgpd",
        from: "Debian gobgpd",
        check: "command -v gobgpd",
        needed_by: ALL,
    },
    Peer {
        program: "gobgp",
        from: "Debian gobgpd",
        check: "command -v gobgp ",
        needed_by: ALL,
    },
    Peer {
        program: ".venv/ansible/bin/ansible-playbook",
        from: "playbooks/requirements.txt (make ansible)",
        check: "python3 -m venv .venv/ansible",
        needed_by: ALL,
    },
    Peer {
        program: "kubectl",
        from: "Debian kubernetes-client",
        check: "command -v kubectl",
        needed_by: &["test", "demo"],
    },
];

#!/usr/bin/env python3
"""Starts a private Open vSwitch (ovsdb-server + ovs-vswitchd) by hand, no systemd.

Usage: ovs.py OUT.json [--bridge NAME ...]

Everything lives in a fresh temporary directory (OVS_RUNDIR/LOGDIR/DBDIR point
there): a database created from the installed vswitch.ovsschema, ovsdb-server
listening on a unix socket in that directory and on 127.0.0.1:<free port>, and
ovs-vswitchd on that database. Bridges are created with the userspace datapath
(datapath_type=netdev; this kernel has no OVS module).

ovs-vswitchd runs in a network namespace of its own (`pbovs-…`): the userspace
datapath creates tap devices with fixed names (`ovs-netdev`, one per bridge), so two
instances in one namespace collide. Ports are veth ends moved into that namespace.
Each bridge's OpenFlow management socket is `<dir>/<bridge>.mgmt` (a unix socket,
reachable from any namespace through the file system).

When all is up, OUT.json is written atomically: dir, netns, db_socket,
ovsdb_address, ovsdb_port, ovsdb_server_pid, ovs_vswitchd_pid, bridges
{name: {openflow}}. The launcher then waits for SIGTERM/SIGINT, stops both daemons
by the PIDs it started, deletes its namespace and removes the directory. If the
launcher is killed outright, the caller stops the daemons by the PIDs in OUT.json.
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

SCHEMA = "/usr/share/openvswitch/vswitch.ovsschema"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(path, what, timeout=10.0):
    deadline = time.time() + timeout
    while not os.path.exists(path):
        if time.time() > deadline:
            sys.exit(f"{what} did not come up within {timeout} s")
        time.sleep(0.01)


def main():
    args = sys.argv[1:]
    if not args or args[0].startswith("-"):
        sys.exit(__doc__)
    out_path = args[0]
    bridges, i = [], 1
    while i < len(args):
        if args[i] == "--bridge":
            bridges.append(args[i + 1])
            i += 2
        else:
            sys.exit(f"unknown argument {args[i]!r}\n{__doc__}")
    for tool in ("ovsdb-tool", "ovsdb-server", "ovs-vswitchd", "ovs-vsctl"):
        if shutil.which(tool) is None:
            sys.exit(f"{tool} not found: install Debian openvswitch-switch (make ovs)")

    d = tempfile.mkdtemp(prefix="patchbay-ovs-")
    netns = "pbovs-" + os.path.basename(d).rsplit("-", 1)[-1]
    env = dict(os.environ, OVS_RUNDIR=d, OVS_LOGDIR=d, OVS_DBDIR=d, OVS_SYSCONFDIR=d)
    db, sock = os.path.join(d, "conf.db"), os.path.join(d, "db.sock")
    subprocess.run(["ovsdb-tool", "create", db, SCHEMA], check=True, env=env)
    port = free_port()
    log = open(os.path.join(d, "daemons.log"), "ab")
    server = subprocess.Popen(
        ["ovsdb-server", db, f"--remote=punix:{sock}", f"--remote=ptcp:{port}:127.0.0.1",
         "--remote=db:Open_vSwitch,Open_vSwitch,manager_options",
         f"--pidfile={d}/ovsdb-server.pid", f"--log-file={d}/ovsdb-server.log",
         f"--unixctl={d}/ovsdb-server.ctl", "--no-chdir"],
        env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    procs = [server]

    def stop(*_, code=0):
        for p in reversed(procs):
            if p.poll() is None:
                p.terminate()
        for p in procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
        subprocess.run(["ip", "netns", "del", netns], stderr=subprocess.DEVNULL)
        shutil.rmtree(d, ignore_errors=True)
        sys.exit(code)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        wait_for(sock, "ovsdb-server")
        vsctl = ["ovs-vsctl", f"--db=unix:{sock}", "--timeout=10"]
        # The socket's file exists once bound, a moment before ovsdb-server listens
        # on it (a connection then is refused): --retry tries again until --timeout.
        subprocess.run(vsctl + ["--retry", "--no-wait", "init"], check=True, env=env)
        subprocess.run(["ip", "netns", "add", netns], check=True)
        vswitchd = subprocess.Popen(
            ["ip", "netns", "exec", netns, "ovs-vswitchd", f"unix:{sock}", f"--pidfile={d}/ovs-vswitchd.pid",
             f"--log-file={d}/ovs-vswitchd.log", f"--unixctl={d}/ovs-vswitchd.ctl",
             "--no-chdir"],
            env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        procs.append(vswitchd)
        described = {}
        for br in bridges:
            cmd = vsctl + ["add-br", br, "--", "set", "bridge", br, "datapath_type=netdev"]
            subprocess.run(cmd, check=True, env=env)  # waits for ovs-vswitchd
            described[br] = {"openflow": f"unix:{d}/{br}.mgmt"}
        info = {
            "dir": d,
            "netns": netns,
            "db_socket": sock,
            "ovsdb_address": "127.0.0.1",
            "ovsdb_port": port,
            "ovsdb_server_pid": server.pid,
            "ovs_vswitchd_pid": vswitchd.pid,
            "bridges": described,
        }
        tmp = out_path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(info, f)
        os.rename(tmp, out_path)
    except BaseException as e:  # noqa: BLE001 - clean up whatever was started
        print(f"starting Open vSwitch failed: {e}", file=sys.stderr)
        stop(code=1)
    while True:
        signal.pause()


if __name__ == "__main__":
    main()

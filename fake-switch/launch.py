#!/usr/bin/env python3
"""Starts simulated switches (fake-switches 1.5.0) on free loopback ports, in one process.

Usage: launch.py SPEC.json OUT.json

SPEC.json: {"switches": [{"name": "sw1", "model": "cisco_generic",
                          "username": "admin", "password": "...",
                          "enable_password": "...", "auto_enabled": false,
                          "port": 0, "ios_shims": false}, ...],
            "connection_log": "/path/connections.log"}

"ios_shims": true gives a Cisco switch three pieces of real IOS syntax the simulator
lacks and Ansible's cisco.ios (network_cli) needs: `end` in configuration mode (back
to privileged mode from any configuration level), `show privilege` ("Current
privilege level is 15" once enabled), and the `| section REGEX` output filter (each
top-level line matching REGEX with the indented lines under it). Syntax only: no
command changes what the simulated device does. Other switches are unchanged.

Each switch listens on 127.0.0.1 on its "port", or on a port the kernel picks when it
is 0 or absent (a fixed port lets a test stop a switch and start a fresh, empty one
where the operator expects it; every simulator has the same host key). With
"connection_log", a line `<switch> open <time> <peer port>` is appended to that file for
every TCP connection it accepts, `<switch> login …` once the connection has
authenticated, and `<switch> close …` when it ends: tests count the operator's attempts
(SSH handshakes) and its sessions (logins) from it. With "command_log", every line a
shell session receives is appended as `<switch>\t<line>` (a line typed where the
device hides input, a password, as `<hidden>`): what the device was sent, in order.
With "rpc_log", every NETCONF message after the client's hello is appended as
`<switch>\t<message>` (on one line). They observe; the simulated device behaves the
same. When every switch listens,
OUT.json is written (atomically) with, per switch: name, model, address, port,
username, password, enable_password, host_key_fingerprint (OpenSSH SHA256 form),
known_hosts_line and ports (the device's port names). The process then serves until
SIGTERM/SIGINT. Passwords arrive in a file, never on the command line.
"""
import base64
import hashlib
import json
import logging
import time
import os
import signal
import sys

from twisted.conch.ssh import keys
from twisted.internet import reactor

from fake_switches.switch_factory import SwitchFactory
from fake_switches.transports.ssh_service import SwitchSshService, getRSAKeys


def host_key():
    public, _ = getRSAKeys()
    blob = keys.Key.fromString(data=public.encode()).blob()
    fingerprint = "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")
    return fingerprint, "ssh-rsa " + base64.b64encode(blob).decode()


IOS_SHIMMED = set()


def install_ios_shims():
    """The `ios_shims` syntax (see the module docs), for the hostnames in IOS_SHIMMED."""
    import re

    from fake_switches.cisco.command_processor.config import ConfigCommandProcessor
    from fake_switches.cisco.command_processor.enabled import EnabledCommandProcessor
    from fake_switches.cisco.command_processor.piping import PipingProcessor

    def name_of(processor):
        config = getattr(processor, "switch_configuration", None)
        if config is not None:
            return config.name
        # The piping processor only has the session's logger:
        # fake_switches.cisco.<hostname>.<connection>.<protocol>.
        parts = processor.logger.name.split(".")
        return parts[2] if len(parts) > 2 else None

    def gate(cls, names):
        original = cls.get_command_func

        def get_command_func(self, line):
            func, args = original(self, line)
            if func is not None and getattr(func, "__name__", "") in names \
                    and name_of(self) not in IOS_SHIMMED:
                return None, []
            return func, args

        cls.get_command_func = get_command_func

    def do_end(self, *_):
        self.sub_processor = None
        self.is_done = True

    ConfigCommandProcessor.do_end = do_end
    gate(ConfigCommandProcessor, {"do_end"})

    show = EnabledCommandProcessor.do_show

    def do_show(self, *args):
        if list(args) == ["privilege"] and self.switch_configuration.name in IOS_SHIMMED:
            self.write_line("Current privilege level is 15")
            return
        return show(self, *args)

    EnabledCommandProcessor.do_show = do_show

    class Section(object):
        def __init__(self, pattern):
            self.pattern = re.compile(pattern)
            self.inside = False

        def pipe(self, data):
            kept = []
            for line in data.splitlines(True):
                text = line.rstrip("\r\n")
                if text and not text[0].isspace():
                    self.inside = bool(self.pattern.search(text))
                if self.inside:
                    kept.append(line)
            return "".join(kept) if kept else False

    def do_section(self, *args):
        return Section(" ".join(args))

    PipingProcessor.do_section = do_section
    gate(PipingProcessor, {"do_section"})


def write_event(log, event, port):
    """Appends `<name> <event> <unix time> <peer port>` to the connection log."""
    name, path = log
    with open(path, "a") as f:
        f.write("%s %s %.6f %d\n" % (name, event, time.time(), port))


def log_connections(ssh_factory, name, path):
    """Appends `<name> open <unix time> <peer port>` to `path` for each connection
    the factory accepts, `<name> login …` once it has authenticated, and
    `<name> close …` when it ends: tests count the operator's sessions and check
    when they were open."""
    build = ssh_factory.buildProtocol
    ssh_factory.patchbay_log = (name, path)

    def logged(addr):
        write_event(ssh_factory.patchbay_log, "open", addr.port)
        protocol = build(addr)
        lost = protocol.connectionLost

        def closed(reason):
            write_event(ssh_factory.patchbay_log, "close", addr.port)
            return lost(reason)

        protocol.connectionLost = closed
        return protocol

    ssh_factory.buildProtocol = logged


def log_logins():
    """The `login` line of the connection log: written when a connection's user has
    authenticated (before that, a connection cannot change the device)."""
    from twisted.conch.ssh.userauth import SSHUserAuthServer

    finished = SSHUserAuthServer._cbFinishedAuth

    def logged(self, result):
        log = getattr(self.transport.factory, "patchbay_log", None)
        if log is not None:
            write_event(log, "login", self.transport.transport.getPeer().port)
        return finished(self, result)

    SSHUserAuthServer._cbFinishedAuth = logged


def log_commands(path):
    """Appends every line an SSH shell session receives to `path` (see the module
    docs), before the device processes it."""
    from fake_switches.terminal.ssh import SwitchSSHShell

    out = open(path, "a", buffering=1)
    received = SwitchSSHShell.lineReceived

    def logged(self, line):
        hidden = self.get_actual_processor().replace_input is not False
        name = self.switch_core.switch_configuration.name
        text = "<hidden>" if hidden else line.decode(errors="replace")
        out.write("%s\t%s\n" % (name, text))
        return received(self, line)

    SwitchSSHShell.lineReceived = logged


def log_rpcs(path):
    """Appends every NETCONF message a session receives after the hello to `path`
    (see the module docs), before the device processes it."""
    from fake_switches.netconf.netconf_protocol import NetconfProtocol

    out = open(path, "a", buffering=1)
    process = NetconfProtocol.process

    def logged(self, data):
        if self.been_greeted:
            # fake_switches.juniper.<hostname>.<connection>.netconf
            parts = self.logger.name.split(".")
            name = parts[2] if len(parts) > 2 else "?"
            out.write("%s\t%s\n" % (name, data.replace("\r", " ").replace("\n", " ")))
        return process(self, data)

    NetconfProtocol.process = logged


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    spec_path, out_path = sys.argv[1], sys.argv[2]
    with open(spec_path) as f:
        spec = json.load(f)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    fingerprint, key_line = host_key()
    factory = SwitchFactory()
    connection_log = spec.get("connection_log")
    described = []
    if connection_log:
        log_logins()
    if spec.get("command_log"):
        log_commands(spec["command_log"])
    if spec.get("rpc_log"):
        log_rpcs(spec["rpc_log"])
    if any(sw.get("ios_shims") for sw in spec["switches"]):
        install_ios_shims()
    for sw in spec["switches"]:
        if sw.get("ios_shims"):
            IOS_SHIMMED.add(sw["name"])
        core = factory.get(
            sw["model"],
            hostname=sw["name"],
            password=sw.get("enable_password", ""),
            auto_enabled=bool(sw.get("auto_enabled", False)),
        )
        service = SwitchSshService(
            ip="127.0.0.1",
            port=int(sw.get("port") or 0),
            switch_core=core,
            users={sw["username"]: sw["password"].encode()},
        )
        listening = service.hook_to_reactor(reactor)
        if connection_log:
            log_connections(listening.factory, sw["name"], connection_log)
        port = listening.getHost().port
        described.append({
            "name": sw["name"],
            "model": sw["model"],
            "address": "127.0.0.1",
            "port": port,
            "username": sw["username"],
            "password": sw["password"],
            "enable_password": sw.get("enable_password", ""),
            "host_key_fingerprint": fingerprint,
            "known_hosts_line": "[127.0.0.1]:%d %s" % (port, key_line),
            "ports": [p.name for p in core.switch_configuration.ports],
        })
    tmp = out_path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump({"pid": os.getpid(), "switches": described}, f, indent=2)
    os.rename(tmp, out_path)

    def stop(*_):
        reactor.callFromThread(reactor.stop)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    reactor.run(installSignalHandlers=False)


if __name__ == "__main__":
    main()

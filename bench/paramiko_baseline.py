#!/usr/bin/env python3
"""Per-port paramiko baseline for benches/ssh.rs (printed, never asserted).

Usage: paramiko_baseline.py CREDENTIALS.json PORT_NAME... 

CREDENTIALS.json: {"address", "port", "username", "password", "enable_password",
"vlans": [a, b], "repeat": N}. For every port: one SSH session (connect, enable,
configure, create the VLAN, set the access VLAN, leave, read the port back, close) --
the way a per-port script does it. Each round alternates between the two VLANs so
every round really changes the device. Prints one JSON line: {"rounds_s": [...]},
the wall-clock seconds of each round over all ports.
"""
import json
import re
import sys
import time

import paramiko

PROMPT = re.compile(rb"[\w.-]+(\([\w./-]+\))?[>#] ?$")


def read_until(chan, pattern, timeout=10.0):
    buf = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if chan.recv_ready():
            buf += chan.recv(65536)
            if pattern.search(buf):
                return buf
        else:
            time.sleep(0.0005)
    raise TimeoutError(buf[-200:])


def send(chan, line, pattern=PROMPT):
    chan.send(line + "\n")
    return read_until(chan, pattern)


def login(c):
    """One SSH session to switch `c`, enabled, paging off: (client, channel)."""
    client = paramiko.SSHClient()
    client.set_missing_host_key_policy(paramiko.AutoAddPolicy())
    client.connect(c["address"], port=c["port"], username=c["username"],
                   password=c["password"], look_for_keys=False, allow_agent=False)
    chan = client.invoke_shell(width=511)
    read_until(chan, PROMPT)
    send(chan, "enable", re.compile(rb"Password: ?$"))
    send(chan, c["enable_password"])
    send(chan, "terminal length 0")
    return client, chan


def one_port(c, port, vlan):
    client, chan = login(c)
    send(chan, "configure terminal")
    send(chan, "vlan %d" % vlan)
    send(chan, "exit")
    send(chan, "interface " + port)
    send(chan, "switchport mode access")
    send(chan, "switchport access vlan %d" % vlan)
    send(chan, "exit")
    send(chan, "exit")
    out = send(chan, "show running-config interface " + port)
    if ("switchport access vlan %d" % vlan).encode() not in out:
        raise RuntimeError("read-back of %s does not show VLAN %d" % (port, vlan))
    client.close()


def main():
    with open(sys.argv[1]) as f:
        c = json.load(f)
    ports = sys.argv[2:]
    rounds = []
    for r in range(c.get("repeat", 3)):
        vlan = c["vlans"][r % 2]
        t = time.monotonic()
        for p in ports:
            one_port(c, p, vlan)
        rounds.append(time.monotonic() - t)
    print(json.dumps({"rounds_s": rounds}))


if __name__ == "__main__":
    main()

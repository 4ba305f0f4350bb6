#!/usr/bin/env python3
"""Fleet baseline for benches/fleet.rs (printed, never asserted): one SSH session per
port, the way networking-generic-switch works without batching.

Usage: fleet_paramiko.py CREDENTIALS.json

CREDENTIALS.json: {"switches": [{"address", "port", "username", "password",
"enable_password"}], "ports": [port names], "access": VLAN, "trunk": [VLAN, ...]}.
Every switch gets its own thread (all switches in parallel), one session at a time
per switch. Port i of every switch: even i an access port on "access", odd i a
trunk carrying "trunk". Per port: connect, enable, create the VLANs, configure the
port, leave, save (`write memory`), read the port back and check it, close.
Prints one JSON line: {"seconds": wall clock over all switches, "ports": count}.
"""
import json
import sys
import threading
import time

from paramiko_baseline import login, send


def one_port(sw, port, lines, expect):
    client, chan = login(sw)
    send(chan, "configure terminal")
    for line in lines:
        send(chan, line)
    send(chan, "exit")
    send(chan, "write memory")
    out = send(chan, "show running-config interface " + port)
    if expect.encode() not in out:
        raise RuntimeError("read-back of %s does not show %r" % (port, expect))
    client.close()


def main():
    with open(sys.argv[1]) as f:
        c = json.load(f)
    access, trunk = c["access"], c["trunk"]
    allowed = ",".join(str(v) for v in trunk)
    errors = []

    def switch(sw):
        try:
            for i, port in enumerate(c["ports"]):
                if i % 2 == 0:
                    lines = ["vlan %d" % access, "exit", "interface " + port,
                             "switchport mode access", "switchport access vlan %d" % access,
                             "exit"]
                    expect = "switchport access vlan %d" % access
                else:
                    lines = []
                    for v in trunk:
                        lines += ["vlan %d" % v, "exit"]
                    lines += ["interface " + port, "switchport mode trunk",
                              "switchport trunk allowed vlan " + allowed, "exit"]
                    expect = "switchport trunk allowed vlan"
                one_port(sw, port, lines, expect)
        except Exception as e:  # reported, the run fails
            errors.append("%s:%s: %s" % (sw["address"], sw["port"], e))

    t = time.monotonic()
    threads = [threading.Thread(target=switch, args=(sw,)) for sw in c["switches"]]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    seconds = time.monotonic() - t
    if errors:
        sys.exit("\n".join(errors[:5]))
    print(json.dumps({"seconds": seconds,
                      "ports": len(c["ports"]) * len(c["switches"])}))


if __name__ == "__main__":
    main()

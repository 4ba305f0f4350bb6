#!/usr/bin/env python3
"""Per-port ncclient baseline for benches/netconf.rs (printed, never asserted).

Usage: ncclient_baseline.py CREDENTIALS.json PORT_NAME...

CREDENTIALS.json: {"address", "port", "username", "key_file", "vlans": [a, b],
"repeat": N}. For every port: one NETCONF session (connect, lock the candidate, one
edit-config with the VLAN and the port, commit, unlock, read the port back, close) --
the way a per-port script does it with ncclient. Each round alternates between the
two VLANs so every round really changes the device. Prints one JSON line:
{"rounds_s": [...]}, the wall-clock seconds of each round over all ports.
"""
import json
import sys
import time

from ncclient import manager

NS = "urn:patchbay:yang:patchbay-ports"


def config(port, vlan):
    return (
        '<config xmlns="urn:ietf:params:xml:ns:netconf:base:1.0" '
        'xmlns:nc="urn:ietf:params:xml:ns:netconf:base:1.0">'
        f'<vlans xmlns="{NS}"><vlan><id>{vlan}</id></vlan></vlans>'
        f'<ports xmlns="{NS}"><port nc:operation="replace"><name>{port}</name>'
        f"<mode>access</mode><access-vlan>{vlan}</access-vlan></port></ports></config>"
    )


def one_port(creds, port, vlan):
    with manager.connect(
        host=creds["address"],
        port=creds["port"],
        username=creds["username"],
        key_filename=creds["key_file"],
        hostkey_verify=False,
        allow_agent=False,
        look_for_keys=False,
        timeout=30,
    ) as m:
        with m.locked("candidate"):
            m.edit_config(target="candidate", config=config(port, vlan))
            m.commit()
        reply = m.get_config(
            source="running",
            filter=("subtree", f'<ports xmlns="{NS}"><port><name>{port}</name></port></ports>'),
        )
        if f"<access-vlan>{vlan}</access-vlan>" not in reply.data_xml:
            raise RuntimeError(f"{port} does not read back VLAN {vlan}")


def main():
    creds = json.load(open(sys.argv[1]))
    ports = sys.argv[2:]
    rounds = []
    for r in range(creds.get("repeat", 3)):
        vlan = creds["vlans"][r % 2]
        t = time.monotonic()
        for p in ports:
            one_port(creds, p, vlan)
        rounds.append(time.monotonic() - t)
    print(json.dumps({"rounds_s": rounds}))


if __name__ == "__main__":
    main()

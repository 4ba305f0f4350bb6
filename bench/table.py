#!/usr/bin/env python3
"""Writes the figures table of docs/benchmarks.md from the benchmarks' own output.

bench/run.sh keeps what each benchmark printed in target/bench-out/<name>.txt, headed
by the commit, the time and the command. This script puts every kept run into the
table between the `figures:start` and `figures:end` markers, the printed lines as
they were printed (cargo's own lines left out), so no figure in that table is typed
by hand. A benchmark with no kept run keeps its row from the last time.

    python3 bench/table.py [target/bench-out] [docs/benchmarks.md]
"""

import pathlib
import re
import sys

ORDER = [
    "devplane", "operator", "operator-tenancy", "operator-bgp", "operator-100k", "operator-100k-relists", "failover", "rollout", "operator-neighbors",
    "operator-neighbors-off", "ssh", "ovsdb",
    "failures", "retry", "claims", "hosts", "netconf", "ansible", "fleet", "tenancy", "bgp", "plan",
]
START = "<!-- figures:start (bench/table.py writes this table from target/bench-out; do not edit) -->"
END = "<!-- figures:end -->"
CARGO = re.compile(r"^\s*(Compiling|Finished|Running|Blocking|Updating|Downloaded|Downloading|warning)\b")
# Progress lines a benchmark prints while it waits: not figures.
PROGRESS = re.compile(r"^\s*\(still waiting: ")
# The checkout's own path, wherever it is: paths in the table are relative to it.
ROOT = str(pathlib.Path(__file__).resolve().parent.parent) + "/"


def tidy(row_line: str) -> str:
    """A kept row without progress lines and with paths relative to the checkout."""
    cells = row_line.split("<br>")
    cells = [c for c in cells if not PROGRESS.match(c.replace("&nbsp;", " "))]
    return "<br>".join(cells).replace(ROOT, "")


def indent(line: str) -> str:
    """The line with its leading spaces kept (markdown drops them)."""
    body = line.lstrip(" ")
    return "&nbsp;" * (len(line) - len(body)) + body


def row(text: str) -> tuple[str, str]:
    head = {}
    printed = []
    for line in text.splitlines():
        m = re.match(r"^# (commit|date|command) (.*)$", line)
        if m and not printed:
            head[m.group(1)] = m.group(2)
        elif line.strip() and not CARGO.match(line) and not PROGRESS.match(line):
            printed.append(line.rstrip().replace(ROOT, ""))
    cell = "<br>".join(indent(l).replace("|", "\\|") for l in printed)
    run = f"{head.get('date', '?')}, `{head.get('commit', '?')}`"
    return f"| `{head.get('command', '?')}` | {run} | {cell} |", head.get("command", "")


def main() -> None:
    out = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "target/bench-out")
    doc = pathlib.Path(sys.argv[2] if len(sys.argv) > 2 else "docs/benchmarks.md")
    text = doc.read_text()
    if START not in text or END not in text:
        sys.exit(f"{doc}: no {START!r} … {END!r} markers")
    before, rest = text.split(START, 1)
    old, after = rest.split(END, 1)
    # Rows of the last time, by name (the first cell's command), kept for benchmarks
    # that did not run now.
    kept = {}
    for line in old.splitlines():
        m = re.match(r"^\| `[^`]*` \| .*<!-- (\S+) -->$", line)
        if m:
            kept[m.group(1)] = tidy(line)
    runs = {p.stem: p.read_text() for p in out.glob("*.txt")}
    rows = []
    for name in ORDER + sorted(set(runs) - set(ORDER)):
        if name in runs:
            line, _ = row(runs[name])
            rows.append(f"{line} <!-- {name} -->")
        elif name in kept:
            rows.append(kept[name])
    table = "\n".join(
        ["", "| command | run | what it printed |", "|---|---|---|", *rows, ""]
    )
    doc.write_text(before + START + table + END + after)
    print(f"{doc}: {len(rows)} rows ({len(runs)} from {out})")


if __name__ == "__main__":
    main()

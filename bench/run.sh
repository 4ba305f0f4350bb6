#!/usr/bin/env bash
# Runs one benchmark and keeps what it printed for bench/table.py:
#   bench/run.sh <output name> [VAR=value ...] -- <cargo bench name>
# The output goes to target/bench-out/<output name>.txt, headed by the commit, the
# UTC time and the command; a failing benchmark fails the call.
set -euo pipefail
name=$1
shift
envs=()
while [[ $# -gt 0 && $1 != -- ]]; do
	envs+=("$1")
	shift
done
shift
bench=$1
out=target/bench-out
mkdir -p "$out"
cmd="${envs[*]:+${envs[*]} }cargo bench --bench $bench"
{
	echo "# commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo '+changes')"
	echo "# date $(date -u '+%Y-%m-%d %H:%M UTC')"
	echo "# command $cmd"
} >"$out/$name.txt.new"
env "${envs[@]}" "${CARGO:-cargo}" bench --locked --bench "$bench" 2>&1 | tee -a "$out/$name.txt.new"
mv "$out/$name.txt.new" "$out/$name.txt"

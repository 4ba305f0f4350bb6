# patchbay — the two commands that matter: `make demo` and `make test`.
# Each installs what it needs itself and is safe to run again.

CARGO ?= cargo
export CARGO_TERM_COLOR ?= never
# A clean CI build gains nothing from incremental state (9 GB of it for the tests).
ifdef CI
export CARGO_INCREMENTAL ?= 0
endif

.PHONY: all demo test fmt-check clippy doc-check unit crds build deps kubectl fake-switch ovs sshd netconf lldp bgp ansible bench help

all: test

help:
	@echo "make demo   - the demo: devplane, simulated switches (SSH, NETCONF, Ansible), Open vSwitch,"
	@echo "              LLDP hosts, FRR and GoBGP in namespaces, the operator and examples/"
	@echo "make test   - formatting, clippy -D warnings, rustdoc -D warnings, every test"
	@echo "make crds   - regenerate crds/ from the Rust types"
	@echo "make bench  - benchmarks (print figures, assert nothing)"

# Toolchain check: the machine ships one rustup toolchain with rustfmt and clippy.
deps:
	@command -v $(CARGO) >/dev/null || { echo "cargo is required (rustup toolchain)"; exit 1; }
	@$(CARGO) fmt --version >/dev/null 2>&1 || rustup component add rustfmt
	@$(CARGO) clippy --version >/dev/null 2>&1 || rustup component add clippy

# The kubectl tests use the machine's kubectl; install Debian's when there is none.
kubectl:
	@command -v kubectl >/dev/null 2>&1 || { \
		echo "installing kubectl (Debian kubernetes-client)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq kubernetes-client; }

# The switch simulators (fake-switch/): fake-switches 1.5.0 and its pinned
# dependencies in a venv. `--no-deps` because the release pins a Twisted that does
# not build on Python 3.11 (see fake-switch/requirements.txt).
FAKE_SWITCH_VENV := .venv/fake-switch
fake-switch: $(FAKE_SWITCH_VENV)/.installed

$(FAKE_SWITCH_VENV)/.installed: fake-switch/requirements.txt
	@python3 -c 'import ensurepip' 2>/dev/null || { \
		echo "installing python3-venv"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv; }
	python3 -m venv $(FAKE_SWITCH_VENV)
	$(FAKE_SWITCH_VENV)/bin/pip install -q --disable-pip-version-check --no-deps -r fake-switch/requirements.txt
	touch $@

# Open vSwitch (started by hand by fake-switch/ovs.py, never through systemd) and the
# tools the traffic tests use in network namespaces: ip, ethtool, ping.
ovs:
	@command -v ovs-vswitchd >/dev/null 2>&1 && command -v ovsdb-server >/dev/null 2>&1 \
		&& command -v ethtool >/dev/null 2>&1 && command -v ping >/dev/null 2>&1 \
		&& command -v ip >/dev/null 2>&1 || { \
		echo "installing openvswitch-switch, ethtool, iputils-ping, iproute2"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
			openvswitch-switch ethtool iputils-ping iproute2; }

# Private sshds (started by hand by the test bed, never through systemd) in front of
# netconfd, lldpd's lldpcli, FRR's vtysh and a hanging shell; ssh-keygen for their
# keys. A freshly installed package's own service is stopped and disabled: nothing
# listens on the host's port 22 because of this.
sshd:
	@test -x /usr/sbin/sshd && command -v ssh-keygen >/dev/null 2>&1 || { \
		echo "installing openssh-server, openssh-client"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
			openssh-server openssh-client; \
		{ systemctl disable --now ssh >/dev/null 2>&1 || service ssh stop >/dev/null 2>&1 || true; }; }

# A real NETCONF server for the NETCONF tests and benchmark: Debian's netconfd
# (yuma123) behind a private sshd, and openssl for the admission webhook's test
# certificates.
netconf: sshd
	@command -v netconfd >/dev/null 2>&1 && test -x /usr/sbin/netconf-subsystem \
		&& command -v openssl >/dev/null 2>&1 || { \
		echo "installing netconfd, openssl"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
			netconfd openssl; }

# LLDP peers for the cabling tests and the demo: Debian's lldpd (one per network
# namespace, each with its own control socket, started by the test bed, never through
# systemd; the package's own service is stopped and disabled so it does not speak on
# the host); the switch's lldpcli is read over a private sshd.
lldp: sshd
	@command -v lldpd >/dev/null 2>&1 && command -v lldpcli >/dev/null 2>&1 || { \
		echo "installing lldpd"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq lldpd; \
		{ systemctl disable --now lldpd >/dev/null 2>&1 || service lldpd stop >/dev/null 2>&1 || true; }; }

# BGP peers for the BGP tests and the demo: FRRouting (zebra + bgpd + vtysh, the ToR,
# its vtysh behind a private sshd) and GoBGP (the node), both started by the test bed
# in network namespaces with their own directories, never through systemd (the frr
# service is stopped and disabled).
bgp: sshd
	@test -x /usr/lib/frr/bgpd && command -v vtysh >/dev/null 2>&1 \
		&& command -v gobgpd >/dev/null 2>&1 && command -v gobgp >/dev/null 2>&1 || { \
		echo "installing frr, gobgpd"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq frr gobgpd; \
		{ systemctl disable --now frr >/dev/null 2>&1 || service frr stop >/dev/null 2>&1 || true; }; }

# Ansible (pinned, playbooks/requirements.txt) in its own venv for the Ansible
# backend's tests, benchmark and demo; patchbay runs .venv/ansible/bin/ansible-playbook.
ANSIBLE_VENV := .venv/ansible
ansible: $(ANSIBLE_VENV)/.installed

$(ANSIBLE_VENV)/.installed: playbooks/requirements.txt
	@python3 -c 'import ensurepip' 2>/dev/null || { \
		echo "installing python3-venv"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv; }
	python3 -m venv $(ANSIBLE_VENV)
	$(ANSIBLE_VENV)/bin/pip install -q --disable-pip-version-check -r playbooks/requirements.txt
	touch $@

build: deps
	$(CARGO) build --workspace --all-targets --locked

# Every peer the demo starts (testbed/src/peers.rs; tests/make.rs checks it), and
# kubectl to watch it with.
demo: deps kubectl fake-switch ovs sshd lldp bgp ansible
	$(CARGO) run --quiet --locked -- demo $(DEMO_ARGS)

fmt-check: deps
	$(CARGO) fmt --all -- --check

clippy: deps
	$(CARGO) clippy --workspace --all-targets --locked -- -D warnings
	$(CARGO) clippy --locked --no-default-features --bin patchbay -- -D warnings

# Doc comments that point at a missing or private item fail the build.
doc-check: deps
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc --workspace --no-deps --lib --locked

unit: deps kubectl fake-switch ovs sshd netconf lldp bgp ansible
	$(CARGO) test --workspace --locked

test: fmt-check clippy doc-check unit

# Each run's output is kept in target/bench-out/ (bench/run.sh) and the figures
# table of docs/benchmarks.md is written from it (bench/table.py).
bench: deps fake-switch ovs sshd netconf lldp bgp ansible
	bench/run.sh devplane -- devplane
	bench/run.sh operator -- operator
	bench/run.sh ssh -- ssh
	bench/run.sh ovsdb -- ovsdb
	bench/run.sh failures -- failures
	bench/run.sh retry -- retry
	bench/run.sh claims -- claims
	bench/run.sh hosts -- hosts
	bench/run.sh netconf -- netconf
	bench/run.sh ansible -- ansible
	bench/run.sh fleet -- fleet
	bench/run.sh tenancy -- tenancy
	bench/run.sh bgp -- bgp
	bench/run.sh plan -- plan
	bench/run.sh operator-tenancy BENCH_TENANCY=1 -- operator
	bench/run.sh operator-bgp BENCH_BGP=1 -- operator
	bench/run.sh operator-100k BENCH_SWITCHES=2000 BENCH_PORTS=50 BENCH_IDLE_SECONDS=30 -- operator
	bench/run.sh operator-100k-relists BENCH_SWITCHES=2000 BENCH_PORTS=50 BENCH_IDLE_SECONDS=30 BENCH_BREAK_WATCHES=2 -- operator
	bench/run.sh failover -- failover
	bench/run.sh rollout -- rollout
	bench/run.sh operator-neighbors BENCH_SWITCHES=50 BENCH_PORTS=48 BENCH_NEIGHBOR_SECONDS=10 BENCH_IDLE_SECONDS=60 -- operator
	bench/run.sh operator-neighbors-off BENCH_SWITCHES=50 BENCH_PORTS=48 BENCH_IDLE_SECONDS=60 -- operator
	python3 bench/table.py target/bench-out docs/benchmarks.md

crds: deps
	$(CARGO) run --quiet --locked -- crds --out crds

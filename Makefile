# patchbay — the two commands that matter: `make demo` and `make test`.
# Each installs what it needs itself and is safe to run again.

CARGO ?= cargo
export CARGO_TERM_COLOR ?= never

.PHONY: all demo test fmt-check clippy unit crds build deps help

all: test

help:
	@echo "make demo   - run the demo on the embedded default (fixture switch)"
	@echo "make test   - formatting, clippy -D warnings, every test"
	@echo "make crds   - regenerate crds/ from the Rust types"

# Toolchain check: the machine ships one rustup toolchain with rustfmt and clippy.
deps:
	@command -v $(CARGO) >/dev/null || { echo "cargo is required (rustup toolchain)"; exit 1; }
	@$(CARGO) fmt --version >/dev/null 2>&1 || rustup component add rustfmt
	@$(CARGO) clippy --version >/dev/null 2>&1 || rustup component add clippy

build: deps
	$(CARGO) build --workspace --all-targets --locked

demo: deps
	$(CARGO) run --quiet --locked -- demo $(DEMO_ARGS)

fmt-check: deps
	$(CARGO) fmt --all -- --check

clippy: deps
	$(CARGO) clippy --workspace --all-targets --locked -- -D warnings

unit: deps
	$(CARGO) test --workspace --locked

test: fmt-check clippy unit

crds: deps
	$(CARGO) run --quiet --locked -- crds --out crds

# xferlab — `make demo` runs the demo on the built-in simulator, `make test` runs the tests.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(VENV)/bin/pip
STAMP  := $(VENV)/.deps-installed

.PHONY: demo test install build lint bench clean xfer-static

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q "maturin>=1.7,<2"
	touch $(STAMP)

# Builds the Rust extension in release mode and installs xferlab (editable) into .venv,
# with its dependencies and the test extras (pyproject.toml).
build: $(STAMP)
	PIP_QUIET=1 PIP_DISABLE_PIP_VERSION_CHECK=1 $(VENV)/bin/maturin develop --release -q --extras test
	cargo build --release -q -p xferlab-delayline -p xfer   # target/release/{xferlab-delay,xfer} (netns backend)

install: build

# A statically linked xfer (musl) for remote hosts of any Linux: the ssh backend deploys it
# when it exists (docs/ssh.md). Needs the musl target: `rustup target add x86_64-unknown-linux-musl`.
xfer-static:
	cargo build --release -q --target x86_64-unknown-linux-musl -p xfer

demo: build
	$(PY) -m xferlab.demo scenarios results/demo

test: build lint
	bash .ci/deps
	cargo test --release --workspace --exclude xferlab-py
	$(PY) -m pytest -q -n 2 -m "not alone" tests   # two workers; the tests on this machine's network one at a time (tests/conftest.py)
	$(PY) -m pytest -q -m alone tests               # then those that need the machine to themselves

# rustfmt, clippy, ruff, and the import contract of docs/architecture.md (import-linter).
lint: build
	cargo fmt --all --check
	cargo clippy --release --workspace --all-targets -- -D warnings
	$(VENV)/bin/ruff check python tests benches
	$(VENV)/bin/ruff format --check python tests benches
	$(VENV)/bin/lint-imports

bench: build
	$(PY) benches/reference.py   # today against the fixed reference build (BENCHMARKS.md, first table)

clean:
	rm -rf target $(VENV) results

# ns-3 as a second reference (docs/ns3.md): builds benches/ns3/dumbbell.cc against the `ns3`
# wheel from PyPI and compares it with the simulator; rewrites docs/validation/ns3.md (VALIDATION.md §4).
.PHONY: ns3
ns3: build
	benches/ns3/build.sh
	$(PY) benches/ns3_compare.py --jobs 2

# Every table of VALIDATION.md in one command (root, a quiet machine, many hours: the
# simulator's tables, seed 001's Tables 2 and 3 (hours), the netns tables and the fidelity
# matrix's kernel run (70 min), ns-3 with the kernel beside it (about an hour), then the
# matrix judged against every archived unobserved kernel run (KERNEL_RUNS) with the seeds'
# median and the controls (the simulator's flows start as in the last run named). Stored
# results under results/ are reused where a script allows.
KERNEL_RUNS = $(foreach r,2026-11-28b 2026-11-28c 2026-11-28d 2026-11-28e 2026-11-29 2026-11-29b \
	2026-12-01 2026-12-02 2026-12-06,benches/fidelity-runs/$(r).json.gz)
.PHONY: validation
validation: build
	$(PY) benches/validate.py --all
	benches/ns3/build.sh
	$(PY) benches/ns3_compare.py dumbbell --jobs 2 --reuse --kernel
	$(PY) benches/fidelity.py --kernel-runs $(KERNEL_RUNS) --seeds 1 2 3 4 5 --jobs 2 --controls
	$(PY) benches/advise_error.py   # the advisor's band on Linux, from the matrix's table
	$(PY) benches/advise_netns.py   # the advisor against Linux (about 50 minutes)

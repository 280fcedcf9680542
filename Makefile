# c4 — the two commands a newcomer runs: `make demo` and `make test`.
# The Makefile owns .venv; `make test` also installs the Debian packages the tests use
# (as root, with apt-get) and starts a throw-away PostgreSQL server on loopback.

PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
DEB_PACKAGES := postgresql snmpd snmp chromium iproute2 nftables libibverbs-dev gcc make prometheus
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: demo demo-testbed test lint test-shim test-py test-e2e testbed bench bench-topology bench-plan bench-diagnosis bench-shim bench-agent bench-agent-testbed bench-hardening bench-testbed bench-testbed-oscillating bench-switch-agents bench-rebalance bench-console console-vendor system-deps venv clean

# Debian's own python3.11 needs python3.11-venv for `-m venv`; install it when missing.
$(BIN)/python:
	@$(PYTHON) -m venv $(VENV) 2>/dev/null || { rm -rf $(VENV); \
	  if [ "$$(id -u)" = "0" ] && command -v apt-get >/dev/null; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3.11-venv >/dev/null; fi; \
	  $(PYTHON) -m venv $(VENV); }

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	touch $@

venv: $(VENV)/.installed

# Debian packages: installed only when missing, so a warm machine pays nothing.
system-deps:
	@missing=""; for p in $(DEB_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" != "0" ]; then echo "need root to apt-get install:$$missing" >&2; exit 1; fi; \
	  echo "apt-get install$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi

demo: venv
	@if [ "$${C4_DEMO_TESTBED:-0}" = "1" ]; then $(MAKE) --no-print-directory demo-testbed; \
	else $(BIN)/c4 demo --host $${C4_DEMO_HOST:-127.0.0.1} --port $${C4_DEMO_PORT:-8000}; fi

# `C4_DEMO_TESTBED=1 make demo` (root): the whole loop on a testbed fabric, real packets (testbed/README.md).
demo-testbed: system-deps venv testbed
	@trap '$(BIN)/c4-testbed down --prefix c4demo' EXIT; \
	$(BIN)/c4-testbed up --prefix c4demo --leaves 2 --spines 2 --hosts-per-leaf 2 --rate-mbit 50 && \
	$(BIN)/c4-testbed run demo --prefix c4demo

lint: venv
	$(BIN)/ruff check controller node_agent switch_agents testbed tests bench migrations
	$(BIN)/mypy controller node_agent switch_agents testbed
	$(BIN)/lint-imports

# The shim's C suites (normal, ASan+UBSan) and its netns ECMP test run under pytest
# (tests/shim); this target builds the library first so a compile error stops early.
test-shim: system-deps
	$(MAKE) -C nccl_shim all

test-py: system-deps venv
	@url=$$(scripts/test-postgres.sh start) && echo "test PostgreSQL: $$url" && \
	C4_TEST_DATABASE_URL=$$url $(BIN)/pytest -q tests

# The testbed tier alone (root; also part of test-py): namespaces, kernel ECMP, snmpd, the shim.
test-e2e: system-deps venv testbed
	$(BIN)/pytest -q tests/e2e

# The NCCL-like workload the testbed runs (and the shim library it loads).
testbed:
	$(MAKE) -C nccl_shim build/libnccl-net-c4.so
	$(MAKE) -C testbed/workload

test: system-deps venv lint test-shim test-py

bench: bench-topology bench-plan bench-diagnosis bench-shim bench-agent bench-hardening bench-testbed bench-testbed-oscillating bench-switch-agents bench-rebalance bench-console bench-load

bench-topology: venv
	$(BIN)/python -m bench.topology

# bench/load: planner churn and assignment reads, then telemetry with 1 and 2 replicas, on a throw-away PostgreSQL
# (scripts/test-postgres.sh; C4_TEST_PG_PORT/C4_TEST_PG_DIR choose it), uvicorn workers, real HTTP.
bench-load: system-deps venv
	$(BIN)/python -m bench.load churn && $(BIN)/python -m bench.load telemetry && $(BIN)/python -m bench.load mix

bench-plan: venv
	$(BIN)/python -m bench.plan
	$(BIN)/python -m bench.plan.api
	$(BIN)/python -m bench.plan.parts

bench-diagnosis: venv
	$(BIN)/python -m bench.diagnosis
	$(BIN)/python -m bench.diagnosis.ingest

bench-hardening: venv
	$(BIN)/python -m bench.hardening

bench-shim: system-deps
	$(MAKE) -C bench/shim bench

# The node agent: lookups and forwarding on this host; the testbed part (probing, weight
# changes on a live connection) needs root.
bench-agent: venv
	$(BIN)/python -m bench.agent

bench-agent-testbed: system-deps venv
	$(BIN)/python -m bench.agent.testbed

# Root: brings testbeds up and down (prefix bt<pid>); figures in bench/README.md `## testbed`.
bench-testbed: system-deps venv testbed
	$(BIN)/python -m bench.testbed --shapes 4x4x4,8x2x2 --seeds 5
	$(BIN)/python -m bench.testbed.loop

# Issue 13's oscillating load on the testbed (root; 11 minutes): flaps of the closed loop.
bench-testbed-oscillating: system-deps venv testbed
	$(BIN)/python -m bench.testbed.oscillating

bench-switch-agents: venv
	$(BIN)/python -m bench.switch_agents

bench-rebalance: venv
	$(BIN)/python -m bench.rebalance

bench-console: system-deps venv
	$(BIN)/python -m bench.console

# Refresh the console's vendored Preact and htm (needs npm); the result is committed.
console-vendor:
	scripts/console-vendor.sh

clean:
	rm -rf $(VENV) .c4 .mypy_cache .ruff_cache .pytest_cache
	-scripts/test-postgres.sh stop

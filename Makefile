# Two entry points a new machine needs: `make demo` and `make test` (README "Set up").
# Both need only Python 3.11+: `make test` starts a throwaway PostgreSQL when none answers
# at LEDGER_TEST_PG (tests/pgserver.py) and finds or installs Chromium for the browser test
# (scripts/ensure-chromium.sh).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
DEMO_HOME ?= demo-ledger

.PHONY: demo serve-demo test test-fast lint bench startup clean

# The runtime alone (what `make demo` and a user of the CLI need) ...
$(VENV)/.runtime: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -e .
	touch $@

# ... and the dev extra on top of it (tests, linters, playwright, PostgreSQL binaries).
$(VENV)/.dev: $(VENV)/.runtime
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[dev]'
	touch $@

demo: $(VENV)/.runtime
	$(BIN)/python -m cli.demo $(DEMO_HOME)

# `ledger serve` on loopback, used over HTTP and from an MCP client, then stopped.
serve-demo: $(VENV)/.runtime
	$(BIN)/python -m server.demo serve-demo-ledger

test: $(VENV)/.dev
	LEDGER_CHROMIUM="$$(scripts/ensure-chromium.sh)" $(BIN)/python -m pytest -q -n 2 --dist loadfile

# The slow tests (tests/conftest.py SLOW, @pytest.mark.slow) left out, the browser tests
# among them: no Chromium needed. Under 3 minutes on 2 cores (README "Set up").
test-fast: $(VENV)/.dev
	$(BIN)/python -m pytest -q -n 2 --dist loadfile -m "not slow"

lint: $(VENV)/.dev
	$(BIN)/ruff check cli ledger keys rawfiles projections governance service server tests benchmarks
	$(BIN)/mypy
	$(BIN)/lint-imports

bench: $(VENV)/.dev
	$(BIN)/python benchmarks/append.py

startup: $(VENV)/.runtime
	$(BIN)/python benchmarks/startup.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache .cache $(DEMO_HOME) serve-demo-ledger

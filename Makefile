# Two entry points a new machine needs: `make demo` and `make test` (README "Set up").
# Both need only Python 3.11+: `make test` starts a throwaway PostgreSQL when none answers
# at LEDGER_TEST_PG (tests/pgserver.py) and finds or installs Chromium for the browser test
# (scripts/ensure-chromium.sh).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
DEMO_HOME ?= demo-ledger
# pytest-xdist: three test processes on this project's two cores (the suite waits on
# servers, subprocesses and PostgreSQL a third of the time), each taking whole files,
# the longest first (tests/conftest.py HEAVY_FILES; ADR 0081)
TEST_WORKERS ?= 3
XDIST = -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

.PHONY: demo serve-demo test test-hsm test-fast lint bench startup clean i18n

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

# The keystore and erasure suites, again with every ledger's KEK in a SoftHSM2 token
# (tests/conftest.py KEK_MODE, ADR 0044), on SQLite: the KEK is in the token whichever
# database holds the wrapped data keys, and the first pass ran them on PostgreSQL.
HSM_SUITES := tests/test_keys.py tests/test_crypto_shred.py tests/test_keystore_residue.py \
	tests/test_erasure_crash.py tests/test_erasure_duplicates.py tests/test_erasure_readers.py \
	tests/test_erasure_scope.py tests/test_governance.py tests/test_residue_repair.py

test: $(VENV)/.dev
	LEDGER_CHROMIUM="$$(scripts/ensure-chromium.sh)" $(BIN)/python -m pytest -q $(XDIST)
	$(MAKE) --no-print-directory test-hsm

test-hsm: $(VENV)/.dev
	@if [ -n "$$CI" ] || [ -f "$${LEDGER_SOFTHSM_MODULE:-/usr/lib/softhsm/libsofthsm2.so}" ]; then \
	  LEDGER_TEST_KEK=softhsm $(BIN)/python -m pytest -q $(XDIST) \
	    -k "not postgres" $(HSM_SUITES); \
	else echo "test-hsm: softhsm2 is not installed here (apt-get install softhsm2): the"; \
	  echo "keystore and erasure suites' pass with the KEK in a token is left to CI"; fi

# The slow tests (tests/conftest.py SLOW, @pytest.mark.slow) left out, the browser tests
# among them: no Chromium needed. About half of `make test`'s time (README "Set up").
test-fast: $(VENV)/.dev
	$(BIN)/python -m pytest -q $(XDIST) -m "not slow"

# The message template of documents for people, extracted again from the code; then
# each governance/locale/<lang>/LC_MESSAGES/messages.po gets the new ids to translate
# (governance/i18n.py says how to add a language; tests/test_receipt_people.py checks).
I18N_SOURCES := governance/i18n.py governance/receipt.py governance/copies.py
i18n: $(VENV)/.runtime
	$(BIN)/pybabel extract --no-default-keywords -k _ -k ngettext:1,2 --no-location \
	  --omit-header --sort-output --width 88 -o governance/locale/messages.pot $(I18N_SOURCES)
	for po in governance/locale/*/LC_MESSAGES/messages.po; do \
	  $(BIN)/pybabel update --no-fuzzy-matching --ignore-obsolete \
	    --width 88 -i governance/locale/messages.pot -o $$po -l $$(basename $$(dirname $$(dirname $$po))); done

lint: $(VENV)/.dev
	$(BIN)/ruff check cli ledger portability keys rawfiles projections governance service credentials server stores tests benchmarks
	$(BIN)/mypy
	$(BIN)/lint-imports

bench: $(VENV)/.dev
	$(BIN)/python benchmarks/append.py

startup: $(VENV)/.runtime
	$(BIN)/python benchmarks/startup.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache .cache $(DEMO_HOME) serve-demo-ledger

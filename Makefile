# Two entry points a new machine needs: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: demo test lint bench clean

$(BIN)/ledger: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(BIN)/ledger

demo: $(BIN)/ledger
	$(BIN)/python -m ledger.demo

test: $(BIN)/ledger
	$(BIN)/python -m pytest -q

lint: $(BIN)/ledger
	$(BIN)/ruff check ledger keys projections governance tests benchmarks
	$(BIN)/mypy

bench: $(BIN)/ledger
	$(BIN)/python benchmarks/append.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache

# `make demo`: the simulated GPU host, live.  `make test`: the whole test suite.
# Each creates .venv and installs what it needs (again only when pyproject.toml changes).

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test lint bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(VENV)/.demo-installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[demo]'
	touch $@

$(VENV)/.test-installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[test]'
	touch $@ $(VENV)/.demo-installed

demo: $(VENV)/.demo-installed
	$(BIN)/mlcost-top --demo

# The import contracts (pyproject.toml [tool.importlinter]) are part of the test suite.
# Most of the suite's time is waiting on daemons, so more workers than the 2 CI cores pay:
# on the 2-core machine 4 workers kept the CPUs 148% busy (5:42), 6 kept them 174% (4:32).
# TEST_WORKERS=0: one process. The 15 slowest tests are listed at the end.
TEST_WORKERS ?= 6

test: $(VENV)/.test-installed
	$(BIN)/lint-imports
	$(BIN)/pytest -n $(TEST_WORKERS) --durations=15

lint: $(VENV)/.test-installed
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/mypy bench/
	$(BIN)/lint-imports

bench: $(VENV)/.test-installed
	$(BIN)/python bench/collector.py

clean:
	rm -rf $(VENV) .demo .pytest_cache

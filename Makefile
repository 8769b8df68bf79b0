# Each target sets up what it needs: a fresh machine only needs python3 and pip (and, on Debian, apt
# for the console test's Chromium: the browser target).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-fast bench install clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet -e ".[train,test]"
	touch $(STAMP)

# The console's test (tests/integration/test_console.py) renders both consoles in Debian's
# headless Chromium; it installs nothing itself, so install and test get the browser here.
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: browser
browser:
	@command -v chromium >/dev/null 2>&1 || { $(SUDO) apt-get update && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y chromium; }

install: $(STAMP) browser

demo: $(STAMP)
	$(BIN)/labeldp demo

# Lint, types and import layers first (make check), then the suite.
test: $(STAMP) browser check
	$(BIN)/python -m pytest -q

test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "not integration"

# Code health: lint, static types, and the import layers of docs/architecture.md ("Layers").
.PHONY: check
check: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/lint-imports

# Rewrite each service's initial Alembic revision from its models (after changing a store.py;
# right only while no database is deployed: afterwards, add revisions instead).
.PHONY: migrations
migrations: $(STAMP)
	$(BIN)/python -m labeldp_tools.migrations regenerate

BENCH_STAMP := $(VENV)/.installed-bench

$(BENCH_STAMP): $(STAMP)
	$(BIN)/pip install --quiet -e ".[train,test,bench]"
	touch $(BENCH_STAMP)

# The privacy-utility protocol of research/ (never installed: it runs from the tree). Every other
# table has its own command: PYTHONPATH=research python -m labeldp_research.tables --list.
bench: $(BENCH_STAMP)
	PYTHONPATH=research $(BIN)/python -m labeldp_research utility --data-dir ../shared/data --out research/results

clean:
	rm -rf $(VENV) var .pytest_cache

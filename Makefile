# The two commands of the README, and what they need. Only Python 3.11+ and pip are assumed.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: demo simulate test lint check bench clean

$(BIN)/kubus: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	$(BIN)/pip install --quiet -e tests/plugins/kubus-test-plugins
	$(BIN)/pip install --quiet -e tests/reference
	# Bytecode for the editable sources, as a pip install of the wheel compiles them: without it,
	# under PYTHONDONTWRITEBYTECODE every service would compile kubus again at each start.
	$(BIN)/python -m compileall -q shared services tests/reference > /dev/null
	touch $(BIN)/kubus

# Run kubus end to end on the embedded default: local NATS and Redis-compatible servers, every
# service, simulated GPU nodes and a sample workload; prints a summary and stops everything.
demo: $(BIN)/kubus
	$(BIN)/kubus up --demo --fresh --data-dir .kubus/demo

# Offline what-if scheduling of the example workload onto the example cluster (no servers).
simulate: $(BIN)/kubus
	$(BIN)/kubus simulate -f deploy/examples/cluster.yaml -f deploy/examples/pods.yaml \
		--config deploy/examples/scheduler-config.yaml

# import-linter, like mypy, cannot follow the editable install's import hook: it reads the package
# through .mypy-path/kubus, the installed layout as symlinks.
LINT_IMPORTS := PYTHONPATH=.mypy-path $(BIN)/lint-imports --no-cache

# Lint, type-check (strict, the packages [tool.mypy] lists), check the layers ([tool.importlinter]),
# then every test (unit, integration, e2e; GPU tests skip visibly without a GPU).
test: $(BIN)/kubus
	$(BIN)/ruff check shared services tests bench
	$(BIN)/mypy
	$(LINT_IMPORTS)
	$(BIN)/pytest -q

lint: $(BIN)/kubus
	$(BIN)/ruff check shared services tests bench
	$(BIN)/mypy
	$(LINT_IMPORTS)

# Before a commit (the pre-commit hooks run the first three): lint, types, layers and the unit
# tests but the slow ones, in about a minute (under 90 s). No servers needed.
check: $(BIN)/kubus
	$(BIN)/ruff check shared services tests bench
	$(BIN)/mypy
	$(LINT_IMPORTS)
	$(BIN)/pytest -q -x -p no:cacheprovider -m "not slow" tests/unit

bench: $(BIN)/kubus
	$(BIN)/python bench/scheduling.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache .mypy_cache .hypothesis .kubus

# Entry points for developers and CI; `make test` is what .ci/run runs.
VENV ?= $(or $(AGENTHUB_VENV),.venv)
BIN := $(VENV)/bin
PYTEST_ARGS ?=
TRAIN_ARGS ?=
export AGENTHUB_VENV := $(VENV)
# Material for MkDocs prints a boxed notice about its successor at every build.
export NO_MKDOCS_2_WARNING := 1

.DEFAULT_GOAL := help
# Prerequisites run in the order written: the venv must exist before lint and pytest use it.
.NOTPARALLEL:
.PHONY: help setup lint docs test test-serial test-gpu test-unit train clean

help: ## list the targets
	@awk 'BEGIN { FS = ":.*## " } /^[a-z-]+:.*## / { printf "  %-10s %s\n", $$1, $$2 }' $(MAKEFILE_LIST)

setup: ## Debian packages, a running dockerd, the venv (AGENTHUB_SETUP=light: no torch/vLLM)
	bash scripts/setup.sh

lint: ## ruff check, ruff format --check, mypy, the manual built with --strict
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/mkdocs build --strict --quiet

# `mkdocs serve` (from the venv) serves it with a live reload instead.
docs: ## build the manual from docs/ into build/docs
	$(BIN)/mkdocs build --strict
	@echo "the manual: build/docs/index.html"

# Two pytest-xdist workers (tests/_machine_turn.py): most integration tests wait on one process
# at a time, so two run at once; tests marked `alone` run by themselves.
# pytest exits 5 when it collects nothing; that fails here like any other non-zero code.
# It prints the 25 slowest tests, then the time since make started (tests/conftest.py), then
# its own summary line (with its own time), which stays the log's last line: CI reads it.
PARALLEL := -n 2 --dist loadgroup --no-loadscope-reorder
test: export AGENTHUB_MAKE_TEST_STARTED := $(shell date +%s)
test: setup lint ## setup, lint, then every test, two at a time (PYTEST_ARGS=... to narrow)
	$(BIN)/python -m pytest $(PARALLEL) --durations=25 $(PYTEST_ARGS) \
		|| { rc=$$?; [ $$rc -ne 5 ] || echo "pytest collected no tests" >&2; exit $$rc; }

# One test at a time, in one process: for a failure that only shows beside other tests.
test-serial: export AGENTHUB_MAKE_TEST_STARTED := $(shell date +%s)
test-serial: setup lint ## every test, one at a time (PYTEST_ARGS=... to narrow)
	$(BIN)/python -m pytest --durations=25 $(PYTEST_ARGS)

# On a machine with a CUDA GPU (deselected from `make test`: CI has none).
test-gpu: ## the GPU tests (needs CUDA; PYTEST_ARGS=... to narrow)
	$(BIN)/python -m pytest -m gpu $(PYTEST_ARGS)

test-unit: setup ## unit tests only, no integration or smoke tests
	$(BIN)/python -m pytest -m "not integration and not smoke" $(PYTEST_ARGS)

train: setup ## train on the code_exec environment (TRAIN_ARGS=... for more options)
	$(BIN)/agenthub train --env code_exec $(TRAIN_ARGS)

clean: ## remove caches and build outputs (keeps the venv and runs/)
	rm -rf build dist *.egg-info .pytest_cache .mypy_cache .ruff_cache
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +

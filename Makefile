# The two commands the README promises: `make run` and `make test`. `make` alone lists
# every target: each is documented by the `## target: description` line above it.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
ARGS ?=
NODE_RUNTIME := runtimes/node
TSX_STAMP := $(NODE_RUNTIME)/node_modules/.installed

.DEFAULT_GOAL := help
.PHONY: help run test lint bench runtimes

## help: list these targets
help:
	@awk '/^## [^:]+: / { sub(/^## /, ""); i = index($$0, ":"); \
		printf "  make %-8s %s\n", substr($$0, 1, i - 1), substr($$0, i + 2) }' $(MAKEFILE_LIST)

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(VENV)/.run-deps: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e .
	touch $@

$(VENV)/.dev-deps: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@ $(VENV)/.run-deps

# The pinned tsx (TypeScript jobs) from the committed lock file, when npm is here; without
# it (or offline) TypeScript jobs are left out, and `zilean up` says so. No install script
# runs: esbuild's binary comes as an ordinary package. The stamp follows the lock file.
$(TSX_STAMP): $(NODE_RUNTIME)/package.json $(NODE_RUNTIME)/package-lock.json
	@if ! command -v npm >/dev/null 2>&1; then \
		echo "npm not found: tsx not installed, so TypeScript jobs will not run (see README)"; \
	elif npm ci --prefix $(NODE_RUNTIME) --ignore-scripts --no-audit --no-fund --loglevel=error; then \
		touch $@; \
	else \
		echo "npm ci failed: tsx not installed, so TypeScript jobs will not run"; \
	fi

## runtimes: install the pinned tsx for TypeScript jobs into runtimes/node (needs npm)
runtimes: $(TSX_STAMP)

## run: install Zilean into .venv and run everything on http://127.0.0.1:8090
run: $(VENV)/.run-deps $(TSX_STAMP)
	$(BIN)/zilean up $(ARGS)

## lint: ruff (lint and format) and mypy
lint: $(VENV)/.dev-deps
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks
	$(BIN)/mypy

## test: lint, then the whole test suite
test: lint $(TSX_STAMP)
	$(BIN)/pytest

## bench: the benchmark suite (issue 7), e.g. make bench ARGS="--quick --json /tmp/bench.json"
bench: $(VENV)/.dev-deps
	$(BIN)/python -m benchmarks $(ARGS)

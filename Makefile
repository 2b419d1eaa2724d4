# The two commands the README promises: `make run` and `make test`. `make` alone lists
# every target: each is documented by the `## target: description` line above it.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
ARGS ?=

.DEFAULT_GOAL := help
.PHONY: help run test lint bench

## help: list these targets
help:
	@awk '/^## [^:]+: / { sub(/^## /, ""); i = index($$0, ":"); \
		printf "  make %-6s %s\n", substr($$0, 1, i - 1), substr($$0, i + 2) }' $(MAKEFILE_LIST)

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(VENV)/.run-deps: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e .
	touch $@

$(VENV)/.dev-deps: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@ $(VENV)/.run-deps

## run: install Zilean into .venv and run everything on http://127.0.0.1:8090
run: $(VENV)/.run-deps
	$(BIN)/zilean up $(ARGS)

## lint: ruff (lint and format) and mypy
lint: $(VENV)/.dev-deps
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks
	$(BIN)/mypy

## test: lint, then the whole test suite
test: lint
	$(BIN)/pytest

## bench: the benchmark suite (issue 7), e.g. make bench ARGS="--quick --json /tmp/bench.json"
bench: $(VENV)/.dev-deps
	$(BIN)/python -m benchmarks $(ARGS)

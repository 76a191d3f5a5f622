PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
HASH := $(shell md5sum pyproject.toml | cut -c1-8)
# Two install stamps: `make serve` installs only what serving needs; `make test`/`lint` add the
# test extras (SDK clients, linters, ...) on top. Each is redone when pyproject.toml changes.
SERVE_STAMP := $(VENV)/.serve-$(HASH)
TEST_STAMP := $(VENV)/.test-$(HASH)
# `make serve PORT=9000 HOST=0.0.0.0`; unset, the configuration decides (127.0.0.1:8080 by default).
PORT ?=
HOST ?=
SERVE_ARGS := $(if $(PORT),--port $(PORT)) $(if $(HOST),--host $(HOST))

.PHONY: install serve test lint clients-latest fuzz bench bench-edge bench-ab bench-profile bench-affinity screenshots clean

$(BIN)/python:
	$(PY) -m venv $(VENV)

$(SERVE_STAMP): pyproject.toml | $(BIN)/python
	@echo "installing modelgate and what serving needs into $(VENV) (the first time takes a minute or two)"
	$(BIN)/pip install --progress-bar on -e .
	touch $@

$(TEST_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[test]'
	touch $@ $(SERVE_STAMP)

install: $(TEST_STAMP)

serve: $(SERVE_STAMP)
	$(BIN)/modelgate serve $(SERVE_ARGS)

lint: $(TEST_STAMP)
	bash scripts/lint.sh

test: $(TEST_STAMP)
	bash scripts/test.sh

# The coding-CLI suite (tests/clients) with the newest published Claude Code and Codex instead of
# the versions pinned in clients/package-lock.json, so drift shows before users meet it.
clients-latest: $(TEST_STAMP)
	bash scripts/clients.sh latest
	MODELGATE_CLIENTS=latest $(BIN)/pytest -q -p no:cacheprovider tests/clients

# 20,000 hostile requests against a real gateway (tests/fuzz; make test sends 2,000); SEED=N repeats
# a run, COUNT=N changes its size.
COUNT ?= 20000
SEED ?=
fuzz: $(TEST_STAMP)
	MODELGATE_TEST_FUZZ_COUNT=$(COUNT) MODELGATE_TEST_FUZZ_SEED=$(SEED) $(BIN)/pytest -q -s -p no:cacheprovider tests/fuzz

# Gateway cost vs a fast fake upstream (docs/bench.md); ARGS="--peer litellm" adds LiteLLM.
bench: $(TEST_STAMP)
	bash bench/run.sh $(ARGS)

# Normal requests while 2,000 connections trickle and 2,000 idle for 60 s (bench/edge.py).
bench-edge: $(TEST_STAMP)
	$(BIN)/python -m bench.edge $(ARGS)

# This tree against another commit, both on the gateway's core in alternating slices (bench/ab.py):
# make bench-ab REF=HEAD~3 [THIS=<commit>] [ARGS="--endpoints chat --seconds 15 --store postgresql"]
bench-ab: $(TEST_STAMP)
	BENCH_MODULE=bench.ab bash bench/run.sh --ref $(REF) $(if $(THIS),--this $(THIS)) $(ARGS)

# Claude-Code-shaped sessions through a credential pool and two deployments against a fake upstream
# with a prompt cache per credential: cache-read share and cost, affinity vs round-robin (bench/affinity.py).
bench-affinity: $(TEST_STAMP)
	BENCH_MODULE=bench.affinity bash bench/run.sh $(ARGS)

bench-profile: $(TEST_STAMP)
	BENCH_MODULE=bench.profile bash bench/run.sh $(ARGS)

# The dashboard screenshots in docs/screenshots/, taken by headless Chromium (docs/admin-api.md).
screenshots: $(TEST_STAMP)
	bash scripts/screenshots.sh

clean:
	rm -rf $(VENV) data .pytest_cache

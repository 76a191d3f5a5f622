PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | md5sum | cut -c1-8)

.PHONY: serve test lint bench bench-profile clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

serve: $(STAMP)
	$(BIN)/modelgate serve

lint: $(STAMP)
	bash scripts/lint.sh

test: $(STAMP)
	bash scripts/test.sh

# Gateway cost vs a fast fake upstream (docs/bench.md); ARGS="--peer litellm" adds LiteLLM.
bench: $(STAMP)
	bash bench/run.sh $(ARGS)

bench-profile: $(STAMP)
	$(BIN)/python -m bench.profile $(ARGS)

clean:
	rm -rf $(VENV) data .pytest_cache

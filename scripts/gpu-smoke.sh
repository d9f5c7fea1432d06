#!/usr/bin/env bash
# GPU smoke test: the CUDA tests, then two rounds of the demo config with SmolLM2 on the GPU (bf16, the
# in-process transformers engine: no vLLM, no network). Writes timings to $OUT (default ./gpu-smoke).
#   scripts/gpu-smoke.sh            # after `make venv` (or with a venv that has the project installed)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu-smoke}
PY=${PY:-.venv/bin/python}
COEVOLVE=${COEVOLVE:-.venv/bin/coevolve}
mkdir -p "$OUT"
"$PY" - <<'PYEOF' | tee "$OUT/device.txt"
import torch
assert torch.cuda.is_available(), "no CUDA device visible to torch"
print(torch.__version__, torch.version.cuda, torch.cuda.get_device_name(0))
PYEOF
"$PY" -m pytest -q -m gpu tests/unit/test_gpu.py | tee "$OUT/pytest-gpu.txt"
start=$(date +%s)
PREFECT_SERVER_ANALYTICS_ENABLED=false "$COEVOLVE" run configs/toolworld-smollm2.yaml --rounds 2 \
  --run gpu-smoke --root "$OUT/runs" --force \
  --set model.device=cuda --set model.dtype=bfloat16 --set model.generation_batch_size=64 \
  2>&1 | tee "$OUT/run.txt"
echo "two rounds: $(( $(date +%s) - start )) s" | tee -a "$OUT/run.txt"
"$COEVOLVE" sql --root "$OUT/runs" "SELECT round, seconds, tokens, round(tokens / seconds, 1) AS update_tok_s FROM updates ORDER BY round" | tee "$OUT/updates.txt"

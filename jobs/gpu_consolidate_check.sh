#!/usr/bin/env bash
# The consolidation learner on an NVIDIA GPU: its tests (CPU and CUDA paths side by side) and
# `bench consolidate` on cuda, with the JSON, the log and the plots written to $OUT.
#
# The GPU machine has no embedding model, so the bench reads MiniLM embeddings from the cache a
# run here wrote (out/cache/consolidate-embeddings.pt, ~24 MB). Prepare once, here:
#     .venv/bin/python -m memstack.cli bench consolidate --json     # fills out/cache
# then on the lent machine (device tool):
#     run(command="bash jobs/gpu_consolidate_check.sh", carry=["out/cache"], timeout_s=540)
# Pass --quick as the first argument for the small run. Python: $PYTHON, else the repo's .venv
# when it has torch, else python3 (the GPU image's, which has torch, numpy, matplotlib).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-out/gpu}"
MODE="${1:-}"
mkdir -p "$OUT"
PY="${PYTHON:-python3}"
if [ -z "${PYTHON:-}" ] && .venv/bin/python -c 'import torch' 2>/dev/null; then PY=.venv/bin/python; fi
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 MEMSTACK_BENCH_DEVICE="${MEMSTACK_BENCH_DEVICE:-cuda}"

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv >"$OUT/gpu.txt" 2>&1
"$PY" -c 'import torch, sys; print(sys.version.split()[0], torch.__version__, torch.cuda.is_available())' \
    | tee -a "$OUT/gpu.txt"
if [ ! -f out/cache/consolidate-embeddings.pt ]; then
    echo "out/cache/consolidate-embeddings.pt is missing: run the bench here first, carry out/cache" >&2
    exit 2
fi

# The unit tests: the device test compares the CPU and CUDA paths when CUDA is present.
"$PY" -m pytest -q --noconftest tests/operators/test_consolidation_learner.py \
    tests/operators/test_consolidation_checkpoint.py tests/operators/test_consolidation_teacher.py \
    2>&1 | tail -n 20 | tee "$OUT/tests.txt"
tests_rc=${PIPESTATUS[0]}

# The bench, called directly (no CLI discovery, so no Kafka/DuckDB imports are needed there).
"$PY" - "$MODE" >"$OUT/bench.json" 2>"$OUT/bench.log" <<'PY'
import sys
from memstack.jobs.measure import Report
from memstack.jobs.bench.consolidate import run
result = run(sys.argv[1] == "--quick", Report("bench consolidate"))
print(result.to_json(), flush=True)
PY
bench_rc=$?
tail -n 25 "$OUT/bench.log"
cat "$OUT/bench.json"
cp out/plots/consolidate_*.png "$OUT/" 2>/dev/null || true
echo "tests rc=$tests_rc bench rc=$bench_rc"
exit $(( tests_rc != 0 || bench_rc != 0 ))

#!/usr/bin/env bash
# `memstack bench scale` on a machine with more cores (the lent 16-core host, or any box where
# the project is installed): the same benchmark as here, in one go, JSON and logs to $OUT.
#
# On 2 cores the curve is bounded by the cores (every worker shares them); the design goal
# (scaling_w2 >= 1.8) is stated for >= 4 cores. Needs what `make demo` needs: Python with the
# project installed ($PYTHON, else .venv/bin/python, else python3), Java 17 and Kafka's jars
# (`infra/kafka/lib`, resolved once by Maven: carry them if the host has no network), and the
# MiniLM model package. A broker is started on loopback for the run unless MEMSTACK_BOOTSTRAP
# names one. Usage:
#     bash jobs/scale_bench_device.sh [--quick]
# On the device tool: run(command="bash jobs/scale_bench_device.sh", timeout_s=580) with the
# venv and the Kafka jars present on that host (carry cannot move the ~3 GB venv).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-out/scale}"
MODE="${1:-}"
mkdir -p "$OUT"
PY="${PYTHON:-}"
if [ -z "$PY" ]; then
    if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
export MEMSTACK_HOME="${MEMSTACK_HOME:-$(mktemp -d /tmp/memstack-scale-XXXX)}"

{ nproc; uname -a; "$PY" -c 'import os, sys; print(sys.version.split()[0], len(os.sched_getaffinity(0)))'; } \
    >"$OUT/machine.txt" 2>&1
if ! "$PY" -c 'import memstack.jobs.bench.scale' 2>"$OUT/import.log"; then
    echo "memstack is not importable with $PY (see $OUT/import.log): install the project first" >&2
    exit 2
fi
uptime >"$OUT/load.txt"
# `bench scale` starts a loopback broker itself when none answers (jobs/bench/broker_env.py).
"$PY" -m memstack.cli bench scale $MODE --json >"$OUT/bench.json" 2>"$OUT/bench.log"
rc=$?
uptime >>"$OUT/load.txt"
tail -n 20 "$OUT/bench.log"
cat "$OUT/machine.txt" "$OUT/load.txt" "$OUT/bench.json"
exit $rc

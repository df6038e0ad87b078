#!/usr/bin/env bash
# Both cluster runs at a larger scale, in one go, for a lent 16-core host (docs/clusters.md):
#   1. the replay of one log on the mini-cluster and on a standalone Flink cluster of
#      $TASKMANAGERS TaskManagers x $SLOTS slots at parallelism $PARALLELISM; verify equal;
#   2. consolidation on a Ray cluster (a head and $RAY_WORKERS worker nodes, $RAY_ACTORS actors),
#      uninterrupted and with worker node w1 killed after the first round; digests equal.
# Each prints one JSON line into $OUT (replay.json, ray.json), logs beside it.
#
# Needs what the development machine has: Java 17 on PATH, a Python with this project's stack
# (pyflink, ray, torch, kafka-python, duckdb, lancedb: $PYTHON, else .venv/bin/python) and the
# jars resolved once with Maven (infra/kafka/lib, infra/flink/lib: carry them, the host may
# have no network). It checks all of that first and stops, naming what is missing. The venv is
# ~3 GB, over what the device tool carries (64 MiB): on a lent accelerator host, the image must
# hold the stack (or PYTHON name one that does); on any bigger machine with `make demo` done,
# run it as is:
#     bash jobs/cluster_device_check.sh            # OUT=out/clusters
# Pass --quick as the first argument for a small run (2 TaskManagers, 1 worker node).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-out/clusters}"
mkdir -p "$OUT"
PY="${PYTHON:-.venv/bin/python}"
CORES="$(nproc)"
if [ "${1:-}" = "--quick" ]; then
    EVENTS=1000 TASKMANAGERS=2 SLOTS=1 PARALLELISM=2 RAY_WORKERS=1 RAY_ACTORS=2 USERS=120
else
    EVENTS="${EVENTS:-20000}" TASKMANAGERS="${TASKMANAGERS:-4}" SLOTS="${SLOTS:-2}"
    PARALLELISM="${PARALLELISM:-8}" RAY_WORKERS="${RAY_WORKERS:-3}" RAY_ACTORS="${RAY_ACTORS:-8}"
    USERS="${USERS:-2000}"
fi

missing=()
command -v java >/dev/null || missing+=("java (Java 17 on PATH)")
"$PY" -c 'import pyflink, ray, torch, duckdb, lancedb, kafka' 2>/dev/null \
    || missing+=("$PY with pyflink, ray, torch, duckdb, lancedb, kafka-python (set PYTHON)")
ls infra/kafka/lib/kafka_2.13-*.jar >/dev/null 2>&1 || missing+=("infra/kafka/lib (carry it)")
ls infra/flink/lib/flink-sql-connector-kafka-*.jar >/dev/null 2>&1 \
    || missing+=("infra/flink/lib (carry it)")
if [ "${#missing[@]}" -gt 0 ]; then
    printf 'cluster_device_check: missing %s\n' "${missing[@]}" | tee "$OUT/missing.txt" >&2
    exit 2
fi

export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export MEMSTACK_HOME="${MEMSTACK_HOME:-$PWD/out/clusters-home}"
# a broker of its own on free ports, unless MEMSTACK_BOOTSTRAP names one
read -r KPORT KCPORT < <("$PY" -c 'from memstack.infra.net import free_port_pair as f; print(*f())')
export MEMSTACK_KAFKA_PORT="${MEMSTACK_KAFKA_PORT:-$KPORT}" \
    MEMSTACK_KAFKA_CONTROLLER_PORT="${MEMSTACK_KAFKA_CONTROLLER_PORT:-$KCPORT}"
{ echo "cores $CORES"; uptime; java -version 2>&1 | head -1; } | tee "$OUT/host.txt"

"$PY" -m memstack.jobs.bench.cluster_check replay --events "$EVENTS" --taskmanagers "$TASKMANAGERS" \
    --slots "$SLOTS" --parallelism "$PARALLELISM" >"$OUT/replay.json" 2>"$OUT/replay.log"
replay_rc=$?
"$PY" -m memstack.jobs.bench.cluster_check ray --users "$USERS" --workers "$RAY_WORKERS" \
    --actors "$RAY_ACTORS" --cpus 2 --window 256 --dim 2048 --round-s 0.5 \
    >"$OUT/ray.json" 2>"$OUT/ray.log"
ray_rc=$?
uptime | tee -a "$OUT/host.txt"
echo "replay (rc $replay_rc): $(cat "$OUT/replay.json")"
echo "ray (rc $ray_rc): $(cat "$OUT/ray.json")"
[ "$replay_rc" -eq 0 ] && [ "$ray_rc" -eq 0 ]

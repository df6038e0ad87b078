#!/usr/bin/env bash
# `make test`: the whole suite in two pytest processes at once.
#
# Most of the suite's time is spent waiting (broker round trips, group joins, services and
# JVMs starting, nemeses' pauses), so on 2 cores the CPU sits about half idle under one
# pytest. The "side" lane takes the long self-contained suites (the fault suite's quick
# history with its own broker, the crash loops, the sharded workers); the "main" lane runs the
# rest. Each lane starts its own test broker. The tests that start a Ray driver in the pytest
# process (tests/consolidation/test_ray_*.py) run in the side lane too: the main lane runs
# PyFlink's loopback replay, which serves Beam's gRPC inside the pytest process, and a CI run
# of the main lane died once of a segfault in that test after the Ray tests (Ray's driver had
# replaced the crash handler, so no stack came out: tests/conftest.py now puts it back). Ray
# bundles its own gRPC; the two in one process are the suspect, not proven.
# The side lane's output is printed after the main lane's; the exit status is the first
# failing lane's (pytest's own codes).
#
# Usage: tests/lanes.sh PYTHON [PYTEST_ARGS...]   With PYTEST_ARGS, one plain pytest run.
set -uo pipefail
py=$1
shift
if [ $# -gt 0 ]; then
    exec "$py" -m pytest -q "$@"
fi
side=(tests/faults tests/recovery tests/shards
      tests/consolidation/test_ray_resume.py tests/consolidation/test_ray_cluster.py)
ignore=()
for path in "${side[@]}"; do ignore+=("--ignore=$path"); done
side_log=$(mktemp -t memstack-side-lane.XXXXXX)
trap 'rm -f "$side_log"' EXIT
"$py" -m pytest -q "${side[@]}" >"$side_log" 2>&1 &
side_pid=$!
"$py" -m pytest -q "${ignore[@]}"
main_status=$?
wait "$side_pid"
side_status=$?
echo "----- side lane: ${side[*]} -----"
cat "$side_log"
if [ "$main_status" -ne 0 ]; then exit "$main_status"; fi
exit "$side_status"

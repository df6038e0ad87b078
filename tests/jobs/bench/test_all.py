"""``memstack bench all``: what it runs, how it checks each run's stdout, the doc it rewrites."""

from __future__ import annotations

import sys
from datetime import UTC, datetime

import pytest

from memstack.jobs.bench.all import (
    BEGIN,
    END,
    Run,
    measurements,
    parse_stdout,
    render,
    replace_section,
    run_one,
)


def test_every_benchmark_and_evaluation_is_found_and_helpers_are_not() -> None:
    found = measurements()
    for wanted in (("bench", "ingest"), ("bench", "pipeline"), ("bench", "replay"),
                   ("bench", "query"), ("bench", "state"), ("eval", "stale"),
                   ("eval", "locomo"), ("bench", "forget"), ("eval", "forget")):
        assert wanted in found
    names = {name for _, name in found}
    assert not names & {"all", "exact", "workload", "locomo_data", "actor", "worker", "oracle",
                        "scopes", "consolidate.actor", "forget.worker"}
    assert found.index(("bench", "ingest")) < found.index(("eval", "stale"))


def test_stdout_must_be_exactly_one_result_line() -> None:
    assert parse_stdout('{"name": "x", "figures": {}}\n') == {"name": "x", "figures": {}}
    for bad in ('\x1b[?25h{"name": "x", "figures": {}}', 'noise\n{"name": "x", "figures": {}}',
                "", '{"name": "x"}'):
        with pytest.raises(ValueError):
            parse_stdout(bad)


def test_run_one_fails_a_process_that_writes_more_than_its_line() -> None:
    noisy = run_one([sys.executable, "-c", "print('progress'); print('{\"figures\": {}}')"],
                    "noisy", 60)
    assert noisy.error is not None and "2 lines" in noisy.error
    clean = run_one([sys.executable, "-c", "print('{\"ratio\": 0.9, \"figures\": {}}')"],
                    "clean", 60)
    assert clean.error is None and clean.result == {"ratio": 0.9, "figures": {}}
    failed = run_one([sys.executable, "-c", "raise SystemExit('no data | set X')"], "failed",
                     60)
    assert failed.error == "exit status 1: no data / set X"  # the reason, safe in a table


def test_the_generated_section_replaces_only_itself() -> None:
    runs = [Run("memstack bench ingest --json", 12.3,
                {"ratio": 0.91, "figures": {"sdk_events_per_s": 13000.0, "x": 1.0}}),
            Run("memstack eval stale --json", 40.0, None, "exit status 2")]
    section = render(runs, False, datetime(2026, 12, 1, 4, 0, tzinfo=UTC))
    assert "| `memstack bench ingest --json` | 0.91 | sdk_events_per_s 1.3e+04 |" in section
    assert "exit status 2" in section
    doc = f"# Title\n\nhand table\n\n{BEGIN}\nold\n{END}\n\nafter\n"
    new = replace_section(doc, section)
    assert new.startswith("# Title\n\nhand table\n\n") and new.endswith("\n\nafter\n")
    assert "old" not in new and new.count(BEGIN) == 1
    appended = replace_section("# Title\n", section)
    assert appended.count(BEGIN) == 1 and appended.startswith("# Title\n")

"""``memstack query`` against the scenario's stores: read-only local, and ``--url`` over HTTP."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from memstack.cli import main
from memstack.pipelines.embedding import MiniLMEncoder
from memstack.pipelines.stores.bundle import Stores
from tests.view.serving import served_stores

KEY = "cli-test-key-1"


def query(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(["query", *argv]) == 0
    return capsys.readouterr().out


def facts_json(capsys: pytest.CaptureFixture[str], where: list[str], valid: str,
               known: str) -> list[str]:
    out = query(capsys, "facts", "--tenant", "acme", *where, "--subject", "ana",
                "--valid", valid, "--known", known, "--json")
    return [f["object"] for f in json.loads(out)["facts"]]


CASES = [
    ("2024-02-15", "2025-02-20T00:00:00Z", ["Porto"]),   # before the correction arrived
    ("2024-02-15", "2025-03-20T00:00:00Z", ["Braga"]),
    ("2024-01-20", "2025-03-20T00:00:00Z", ["Lisbon"]),  # before the late fact was known
    ("2024-01-20", "0:7", ["Faro"]),
    ("2024-01-10", "now", ["Lisbon"]),                   # valid before the late fact
]


@pytest.mark.parametrize(("valid", "known", "expected"), CASES)
def test_cli_facts_local(capsys: pytest.CaptureFixture[str], scenario_dir: Path, valid: str,
                         known: str, expected: list[str]) -> None:
    assert facts_json(capsys, ["--stores", str(scenario_dir)], valid, known) == expected


def test_cli_tables(capsys: pytest.CaptureFixture[str], scenario_dir: Path) -> None:
    where = ["--tenant", "acme", "--stores", str(scenario_dir)]
    table = query(capsys, "history", *where, "--subject", "ana", "--known", "0:5")
    lines = table.splitlines()
    assert lines[0].endswith("known=0:5") and lines[1].startswith("subject")
    assert len(lines) == 3 + 4 and sum("Porto" in line for line in lines) == 1
    table = query(capsys, "records", *where, "--session", "s1", "--limit", "2")
    assert "Ana moved to Porto" in table and "Braga" not in table
    table = query(capsys, "search", "Faro", *where, "-k", "2", "--mode", "bm25")
    assert table.splitlines()[3].split()[0] == "1" and "Faro" in table.splitlines()[3]
    table = query(capsys, "context", "Where does Ana live?", *where, "--session", "s1",
                  "--budget", "100")
    assert "## Current facts" in table and "ana lives_in Braga" in table


def test_cli_reports_bad_input(capsys: pytest.CaptureFixture[str], scenario_dir: Path) -> None:
    code = main(["query", "facts", "--tenant", "acme", "--stores", str(scenario_dir),
                 "--valid", "soon"])
    assert code == 2 and "RFC 3339" in capsys.readouterr().err


@pytest.fixture(scope="module")
def server(stores: Stores, encoder: MiniLMEncoder) -> Iterator[str]:
    with served_stores(stores, encoder, KEY) as url:
        yield url


@pytest.mark.parametrize(("valid", "known", "expected"), CASES)
def test_cli_facts_over_http(capsys: pytest.CaptureFixture[str], server: str, valid: str,
                             known: str, expected: list[str]) -> None:
    where = ["--url", server, "--api-key", KEY]
    assert facts_json(capsys, where, valid, known) == expected


def test_cli_over_http_needs_a_key_for_the_tenant(capsys: pytest.CaptureFixture[str],
                                                  server: str) -> None:
    assert main(["query", "facts", "--tenant", "acme", "--url", server]) == 2
    assert "401" in capsys.readouterr().err
    assert main(["query", "facts", "--tenant", "other", "--url", server,
                 "--api-key", KEY]) == 2
    assert "403" in capsys.readouterr().err

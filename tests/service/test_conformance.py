"""Schemathesis against the live service: generated requests from docs/openapi.json's operations
(valid and invalid ones) to ``memstack serve`` on the real broker; no answer is a server error,
every status answered is one the spec lists for the operation, and every answer has the content
type and matches the schema the spec gives for its status.

The service is this test's own (a forget of the whole tenant is a request it may generate), with
a short ``--after-timeout`` so that a generated position that is never reached answers 504 in a
second. ``MEMSTACK_CONFORMANCE_EXAMPLES`` (default 10) is Schemathesis's ``--max-examples``;
the long run of docs/service.md sets it to 500 (10,025 cases, under 5 min).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import KafkaUnderTest
from tests.service.conftest import KEYS, fresh_settings, running_service

ROOT = Path(__file__).resolve().parents[2]
CONFIG = Path(__file__).parent / "conformance" / "schemathesis.toml"
EXAMPLES = int(os.environ.get("MEMSTACK_CONFORMANCE_EXAMPLES", "10"))
CHECKS = ("not_a_server_error,response_schema_conformance,content_type_conformance,"
          "status_code_conformance")


def schemathesis(url: str, examples: int, reports: Path, *, tenant: str = "acme",
                 timeout_s: float = 3600.0) -> subprocess.CompletedProcess[str]:
    """``schemathesis run`` over the live service's own spec; the JSON report goes to
    ``reports/report.json``."""
    argv = [str(Path(sys.executable).parent / "schemathesis"), "--config-file", str(CONFIG),
            "run", f"{url}/openapi.json", "--checks", CHECKS, "--max-examples", str(examples),
            "--seed", os.environ.get("MEMSTACK_CONFORMANCE_SEED", "28"), "--no-color",
            "--workers", os.environ.get("MEMSTACK_CONFORMANCE_WORKERS", "1"),
            "--report", "json", "--report-json-path", str(reports / "report.json")]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MEMSTACK_CONFORMANCE_TENANT": tenant,
           "MEMSTACK_CONFORMANCE_KEY": KEYS[tenant]}
    log = reports / "schemathesis.log"  # its progress, as it goes (tail it on a long run)
    print(f"schemathesis: {' '.join(argv[1:])} > {log}")
    with log.open("w") as out:
        code = subprocess.run(argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                              timeout=timeout_s, check=False).returncode
    return subprocess.CompletedProcess(argv, code, log.read_text(errors="replace"), "")


@pytest.mark.timeout(max(600, 3 * EXAMPLES))  # 500 examples ran in 284 s
def test_no_server_errors_and_every_answer_as_documented(
        kafka: KafkaUnderTest, tmp_path_factory: pytest.TempPathFactory, tmp_path: Path) -> None:
    settings = fresh_settings(kafka, tmp_path_factory)
    with running_service(settings, tmp_path / "serve.log", "--after-timeout", "1") as service:
        run = schemathesis(service.url, EXAMPLES, tmp_path, timeout_s=3 * EXAMPLES + 500)
        tail = run.stdout[-12000:] + run.stderr[-3000:]
        assert run.returncode == 0, tail + service.log_tail()
    cases = json.loads((tmp_path / "report.json").read_text())["test_cases"]
    print(f"schemathesis: {cases}")
    assert cases["generated"] >= 10 * EXAMPLES, tail
    assert cases["with_failures"] == 0 and cases["errored"] == 0, tail

"""The light client imports nothing of the server stack (a core install has none of it)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from memstack.cli import SERVER_EXTRA, missing_server_extra

HEAVY = ("torch", "faust", "duckdb", "lancedb", "pyflink", "ray", "numpy", "pyarrow", "pandas",
         "aiokafka", "fastapi", "mcp", "sentence_transformers")

CLIENT_USE = """
import json, sys
from memstack import AsyncMemoryClient, MemoryClient, MemoryService, AsyncMemoryService
from memstack.service.types import WriteReceipt
from memstack.view.types import FactsAnswer
from memstack.cli import build_parser
build_parser()
print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in HEAVY)))
"""


def test_importing_the_clients_pulls_in_no_server_module() -> None:
    code = f"HEAVY = {HEAVY!r}\n" + CLIENT_USE
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []


@pytest.mark.parametrize("name", ["torch", "duckdb.typing", "mcp.server"])
def test_a_missing_server_module_names_the_extra(name: str) -> None:
    message = missing_server_extra(ModuleNotFoundError(f"No module named {name!r}", name=name))
    assert message is not None and SERVER_EXTRA in message
    assert repr(name.split(".")[0]) in message


def test_other_missing_modules_are_not_blamed_on_the_extra() -> None:
    assert missing_server_extra(ModuleNotFoundError("x", name="not_a_memstack_dep")) is None

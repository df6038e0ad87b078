"""The official MCP Inspector's CLI (``@modelcontextprotocol/inspector --cli``, pinned in
tests/mcp/inspector/package.json) against ``memstack mcp`` over stdio, beside the live service:
it lists the tools and calls one, as any MCP host would.

The Inspector is installed with ``npm ci`` (the committed lock file) into memstack's cache,
once per version; the test skips, saying why, only when npm is missing or cannot install it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from memstack.jobs.run import worker_env
from memstack.schemas.ids import uuid7
from tests.mcp.driver import TOOLS
from tests.service.conftest import KEYS, Service

PINNED = Path(__file__).resolve().parents[1] / "mcp" / "inspector"


def inspector_bin() -> Path:
    """The pinned Inspector's executable, installed on first use (or ``pytest.skip``)."""
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip("npm is not installed: the MCP Inspector CLI test needs Node and npm")
    version = json.loads((PINNED / "package.json").read_text())["dependencies"][
        "@modelcontextprotocol/inspector"]
    cache = Path(os.environ.get("MEMSTACK_CACHE", Path.home() / ".cache" / "memstack"))
    home = cache / "npm" / f"mcp-inspector-{version}"
    binary = home / "node_modules" / ".bin" / "mcp-inspector"
    if binary.exists():
        return binary
    home.mkdir(parents=True, exist_ok=True)
    for name in ("package.json", "package-lock.json"):
        shutil.copyfile(PINNED / name, home / name)
    run = subprocess.run([npm, "ci", "--ignore-scripts", "--no-audit", "--no-fund"], cwd=home,
                         capture_output=True, text=True, timeout=600, check=False)
    if run.returncode != 0 or not binary.exists():
        pytest.skip(f"npm could not install @modelcontextprotocol/inspector@{version}: "
                    + (run.stderr or run.stdout)[-800:])
    return binary


def inspect(service: Service, tmp_path: Path, *method: str) -> Any:
    """``mcp-inspector --cli --format json ... -- python -m memstack.cli mcp``: the result.
    Empty variables are left out: the Inspector refuses ``-e NAME=`` (an unset
    MEMSTACK_KAFKA_* reads the same as an empty one to memstack)."""
    env = worker_env(service.settings) | {"MEMSTACK_API_KEY": KEYS["acme"],
                                          "MEMSTACK_TENANT": "acme"}
    server_env = [arg for key, value in env.items() if key.startswith("MEMSTACK_") and value
                  for arg in ("-e", f"{key}={value}")]
    argv = [str(inspector_bin()), "--cli", "--format", "json", "--quiet", *server_env,
            *method, "--", sys.executable, "-m", "memstack.cli", "mcp"]
    own = {"MCP_CATALOG_PATH": str(tmp_path / "catalog.json"),
           "MCP_CLIENT_CONFIG_PATH": str(tmp_path / "client.json")}
    run = subprocess.run(argv, env={**os.environ, **own}, capture_output=True, text=True,
                         timeout=180, check=False)
    assert run.returncode == 0, f"exit {run.returncode}\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    answer = json.loads(run.stdout)
    assert "result" in answer, run.stdout[-3000:]
    return answer["result"]


def test_inspector_lists_the_tools_and_calls_one(service: Service, tmp_path: Path) -> None:
    listed = inspect(service, tmp_path, "--method", "tools/list")
    tools = {tool["name"]: tool for tool in listed["tools"]}
    assert set(tools) == TOOLS
    assert "subject" in tools["assert_fact"]["inputSchema"]["properties"]

    subject = f"user:inspector-{uuid7()}"
    arguments = {"subject": subject, "relation": "lives_in", "object": "Porto"}
    called = inspect(service, tmp_path, "--method", "tools/call", "--tool-name", "assert_fact",
                     "--tool-args-json", json.dumps(arguments))
    assert not called.get("isError"), called
    written = called["structuredContent"]
    assert len(written["event_ids"]) == 1 and written["position"], called

    read = inspect(service, tmp_path, "--method", "tools/call", "--tool-name", "facts",
                   "--tool-args-json", json.dumps({"subject": subject,
                                                   "after": written["position"]}))
    facts = read["structuredContent"]["facts"]
    assert [(f["relation"], f["object"]) for f in facts] == [("lives_in", "Porto")], read

"""Every HTTP server of the service parses HTTP/1.1 with httptools (docs/service.md, "The HTTP
parser"): on h11 a facts read cost the service ~0.55 ms of CPU against ~0.32 ms."""

from __future__ import annotations

import ast
from pathlib import Path

import uvicorn

from memstack.jobs.service.listen import HTTP_PARSER

ROOT = Path(__file__).resolve().parents[2]


async def _app(scope: object, receive: object, send: object) -> None:  # pragma: no cover
    raise AssertionError("not served")


def test_the_parser_named_is_installed_and_is_httptools() -> None:
    config = uvicorn.Config(_app, http=HTTP_PARSER, lifespan="off", log_config=None)
    config.load()
    assert config.http_protocol_class.__name__ == "HttpToolsProtocol"


def test_every_uvicorn_server_of_the_project_names_the_parser() -> None:
    """A server started without ``http=HTTP_PARSER`` would fall back to h11 silently when
    httptools is missing: each ``uvicorn.Config(...)`` and ``uvicorn.run(...)`` names it."""
    calls, missing = 0, []
    for path in sorted([*ROOT.glob("jobs/**/*.py"), *ROOT.glob("memstack/**/*.py"),
                        *ROOT.glob("pipelines/**/*.py")]):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "uvicorn"
                    and node.func.attr in ("Config", "run")):
                calls += 1
                named = {k.arg: k.value for k in node.keywords}
                value = named.get("http")
                if not (isinstance(value, ast.Name) and value.id == "HTTP_PARSER"):
                    missing.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert calls >= 5, f"found {calls} uvicorn servers; the scan lost them"
    assert not missing, f"uvicorn servers without http=HTTP_PARSER: {missing}"

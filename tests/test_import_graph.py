"""The import graph of the package, computed from the code (``ast``, no imports run).

- no cycle between modules, counting imports inside functions too (only ``TYPE_CHECKING``
  blocks are left out: they never run);
- every module has a layer, and imports go downwards or sideways only (docs/architecture.md):

  0 foundation   ``schemas``, ``memstack.foundation`` (settings, errors, builders, keys)
  1 light        the light clients (``memstack.client``, ``aio``, ``service``), ``operators``,
                 ``infra``, and ``memstack.view.types`` (the query vocabulary the view and the
                 HTTP clients share)
  2 engines      ``pipelines``
  3 read side    ``memstack.view``, ``memstack.server`` (HTTP), ``memstack.mcp``,
                 ``memstack.integrations``
  4 jobs         ``jobs``
  5 facade       ``memstack.cli`` and the root package's lazy exports

- the product never imports the lab (``pyproject.toml``'s ``[tool.memstack] lab``: the
  benchmarks and evaluations, which the wheel leaves out): only the lab imports the lab. The
  ``bench`` and ``eval`` commands reach it by name at run time (``memstack.jobs.measure.load``,
  an ``importlib`` call this graph does not see), and say to use a checkout when it is absent.
"""

from __future__ import annotations

import ast
import tomllib
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAYER = {"schemas": 0, "foundation": 0,
         "client": 1, "aio": 1, "service": 1, "operators": 1, "infra": 1,
         "pipelines": 2,
         "view": 3, "server": 3, "mcp": 3, "integrations": 3,
         "jobs": 4,
         "cli": 5}
"""The layer of each part of the package, by the name after ``memstack.``."""
EXACT = {"memstack": 5, "memstack.view.types": 1, "memstack.view.reads": 1}
"""Modules placed apart from their part: the root package (lazy exports of the facade) and the
query vocabulary, which the light HTTP clients decode answers into."""


def modules() -> dict[str, Path]:
    """Every module of the package, by dotted name, as ``pyproject.toml`` maps the folders."""
    mapping = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-dir"]
    out: dict[str, Path] = {}
    for name, folder in mapping.items():
        for path in (ROOT / folder).rglob("*.py"):
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            if "__pycache__" in parts:
                continue
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join([name, *parts])] = path
    return out


def _statements(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    for node in body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            yield from _statements(node.orelse)
            continue
        yield node
        for field in ("body", "orelse", "finalbody", "handlers"):
            inner = getattr(node, field, None)
            if isinstance(inner, list):
                yield from _statements([n for n in inner if isinstance(n, ast.stmt)]
                                       + [s for h in inner if isinstance(h, ast.ExceptHandler)
                                          for s in h.body])


def imports_of(path: Path, known: set[str]) -> set[str]:
    """The package's modules ``path`` imports (``from pkg import submodule`` names the
    submodule; anything else imported from a package names the package)."""
    found: set[str] = set()
    for node in _statements(ast.parse(path.read_text()).body):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name in known}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            subs = {f"{node.module}.{a.name}" for a in node.names} & known
            found |= subs
            if len(subs) < len(node.names) and node.module in known:
                found.add(node.module)
    return found


def graph() -> dict[str, set[str]]:
    mods = modules()
    known = set(mods)
    return {name: imports_of(path, known) - {name} for name, path in mods.items()}


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for root in sorted(g):
        if root in index:
            continue
        work = [(root, iter(sorted(g[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(g[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    out.append(sorted(component))
    return out


def layer(module: str) -> int | None:
    if module in EXACT:
        return EXACT[module]
    parts = module.split(".")
    return LAYER.get(parts[1]) if len(parts) > 1 else None


def test_the_graph_finds_the_package_and_its_imports() -> None:
    g = graph()
    assert len(g) > 200
    assert "memstack.pipelines.stores.duckdb_index" in g["memstack.pipelines.stores.bundle"]


def test_cycles_are_found_when_there_are_some() -> None:
    g = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(g) == [["a", "b", "c"]]


def test_no_import_cycle() -> None:
    assert cycles(graph()) == []


def test_every_module_has_a_layer() -> None:
    assert sorted(m for m in graph() if layer(m) is None) == []


def upward(g: dict[str, set[str]]) -> list[str]:
    """The imports of ``g`` that go from a lower layer to a higher one."""
    return sorted(f"{m} -> {d}" for m, deps in g.items() for d in deps
                  if (lm := layer(m)) is not None and (ld := layer(d)) is not None and ld > lm)


def test_layers_import_downwards() -> None:
    assert upward(graph()) == []


def test_an_upward_import_is_found() -> None:
    """The check above can fail: a module of the engines importing the HTTP server is found."""
    g = {"memstack.pipelines.live_batches": {"memstack.server.app", "memstack.foundation.errors"},
         "memstack.server.app": {"memstack.pipelines.live_batches"}}
    assert upward(g) == ["memstack.pipelines.live_batches -> memstack.server.app"]


def lab() -> tuple[str, ...]:
    """The lab's packages (benchmarks, evaluations): in a checkout, never in the wheel."""
    names: list[str] = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"][
        "memstack"]["lab"]
    return tuple(names)


def _in(module: str, packages: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(f"{p}.") for p in packages)


def into_the_lab(g: dict[str, set[str]], packages: tuple[str, ...]) -> list[str]:
    """The imports of ``g`` from a module outside ``packages`` into one of them."""
    return sorted(f"{m} -> {d}" for m, deps in g.items() if not _in(m, packages)
                  for d in deps if _in(d, packages))


def test_the_lab_is_in_the_graph() -> None:
    g = graph()
    for package in lab():
        assert package in g, f"{package} (pyproject.toml's lab) is no package"


def test_only_the_lab_imports_the_lab() -> None:
    assert into_the_lab(graph(), lab()) == []


def test_an_import_into_the_lab_is_found() -> None:
    """The check above can fail: a command importing a benchmark is found; the lab importing
    itself and the product is not."""
    g = {"memstack.jobs.commands.query": {"memstack.jobs.bench.query", "memstack.view"},
         "memstack.jobs.eval.forget": {"memstack.jobs.bench.broker_env", "memstack.client"},
         "memstack.jobs.bench.query": {"memstack.jobs.measure"}}
    assert into_the_lab(g, ("memstack.jobs.bench", "memstack.jobs.eval")) == [
        "memstack.jobs.commands.query -> memstack.jobs.bench.query"]

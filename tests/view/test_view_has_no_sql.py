"""No SQL in the view: its reads are store primitives, and "known" is rendered from the as-of
rule of :mod:`memstack.schemas.asof` only.

Every string literal of every module under ``memstack/view/`` (docstrings left out) is searched
for SQL statements and for comparisons of the transaction-time columns.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VIEW = ROOT / "memstack" / "view"
STORES = ROOT / "pipelines" / "stores"

SQL = re.compile(r"\b(SELECT|WHERE|QUALIFY|INSERT|DELETE FROM|UPDATE)\b|\bFROM fact_|"
                 r"\btt_?\w*\)?\s*[<>]=?\s*[?(]")
KNOWN = re.compile(r"\btt_(from|to)\w*\)?\s*[<>]=?")
"""A comparison of a transaction-time column: a rendering of "known"."""

ALLOWED_SQL = {
    "catalog.py": "the inspector's reads (subjects with counts, an event's lineage) have no "
                  "store primitive yet (docs/queries.md, Store requests: EventIndex.subjects, "
                  "EventIndex.lineage)",
    "recall.py": "the recall reader's vocabulary (relations, objects ever known) has no store "
                 "primitive yet; outside the as-of primitives' scope (issue #34, item 3)",
}


def _literals(path: Path) -> list[str]:
    """The module's string literals (f-strings' constant parts too), docstrings left out."""
    tree = ast.parse(path.read_text())
    docs: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            first = node.body[0] if node.body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docs.add(id(first.value))
    return [n.value for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs]


def _hits(path: Path, pattern: re.Pattern[str]) -> list[str]:
    return [s for s in _literals(path) if pattern.search(s)]


def test_no_module_of_the_view_holds_sql() -> None:
    found = {p.name: _hits(p, SQL) for p in sorted(VIEW.rglob("*.py"))
             if p.name not in ALLOWED_SQL}
    assert {name: hits for name, hits in found.items() if hits} == {}


def test_the_allowed_modules_still_need_their_exception() -> None:
    for name in ALLOWED_SQL:  # drop an exception once its module has no SQL left
        assert _hits(VIEW / name, SQL), f"{name} has no SQL left: remove it from ALLOWED_SQL"


def test_the_detector_sees_sql() -> None:
    assert SQL.search("SELECT * FROM fact_versions v WHERE v.tenant = ?")
    assert SQL.search("(v.tt_from, v.tt_from_partition) < (u.f_tt, u.f_p)")
    assert not SQL.search("the fact values valid at valid as memory knew them")


def test_the_stores_render_known_from_the_rule_only() -> None:
    # DuckDB's fact reads compare tt_from / tt_to only through memstack.schemas.asof
    found = {p.name: _hits(p, KNOWN) for p in sorted(STORES.glob("duckdb*.py"))}
    assert {name: hits for name, hits in found.items() if hits} == {}
    assert (VIEW / "sql.py").exists()  # only its SqlReader is left (the catalog's reads)
    assert not _hits(VIEW / "sql.py", SQL)

"""Log coordinates: one module defines them, and the offset arithmetic lives there only.

- the cut's arithmetic (advance only rises, merge is the larger offset per partition, covers,
  knows) and the position token's round trip, by example and as properties;
- an ``ast`` scan of the package: a class that looks like a log coordinate (named like one, or
  a dataclass / pydantic model with both a ``partition`` and an ``offset`` field) defined
  anywhere but :mod:`memstack.foundation.log_coordinates` fails the test;
- a text scan: "offset + 1" is written in that module only.
"""

from __future__ import annotations

import ast
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memstack.foundation.log_coordinates import (
    InvalidPositionError,
    LogCut,
    LogPosition,
    Position,
    Written,
    WrittenOut,
    advance,
    after,
    merged,
)

ROOT = Path(__file__).resolve().parents[1]
HOME = ROOT / "memstack" / "foundation" / "log_coordinates.py"
SCANNED = ("memstack", "operators", "pipelines", "schemas", "jobs", "infra")
T0 = datetime(2024, 5, 1, tzinfo=UTC)

offsets = st.dictionaries(st.integers(0, 63), st.integers(0, 10**12), max_size=6)
places = st.lists(st.tuples(st.integers(0, 7), st.integers(0, 10**6)), max_size=20)


# -- the arithmetic -------------------------------------------------------------------------

def test_a_cut_advances_past_a_position_and_never_back() -> None:
    cut = LogCut.of({0: 5})
    assert cut.advance(0, 7) == {0: 8}
    assert cut.advance(0, 2) is cut  # a lower offset does not move it back
    assert cut.advance(3, 0) == {0: 5, 3: 1}
    assert cut.knows(0, 4) and not cut.knows(0, 5) and not cut.knows(1, 0)


def test_the_mutable_form_is_the_same_arithmetic() -> None:
    seen: dict[int, int] = {}
    assert advance(seen, 1, 9) and not advance(seen, 1, 3) and seen == {1: 10}
    assert after([LogPosition(T0, 0, 4), LogPosition(T0, 0, 2), LogPosition(T0, 2, 0)]) == {
        0: 5, 2: 1}


def test_a_cut_is_a_read_only_mapping_equal_to_its_items() -> None:
    cut = LogCut.of({1: 3, 0: 2})
    assert cut == {0: 2, 1: 3} and dict(cut) == {0: 2, 1: 3} and list(cut) == [0, 1]
    assert cut.offsets == ((0, 2), (1, 3)) and str(cut) == "0:2,1:3"
    assert hash(cut) == hash(LogCut.of({0: 2, 1: 3}))
    assert cut.behind({0: 5, 1: 1, 2: 1}) == {0: 3, 2: 1} and cut.unknown({2: 0}) == {2}
    with pytest.raises(ValueError, match="non-negative"):
        LogCut.of({0: -1})


@given(places, places)
def test_merge_is_the_larger_offset_per_partition(a: list[tuple[int, int]],
                                                  b: list[tuple[int, int]]) -> None:
    ca = LogCut.after(LogPosition(T0, p, o) for p, o in a)
    cb = LogCut.after(LogPosition(T0, p, o) for p, o in b)
    both = ca.merge(cb)
    assert both.covers(ca) and both.covers(cb) and both == cb.merge(ca)
    assert both == LogCut.after(LogPosition(T0, p, o) for p, o in a + b)
    assert all(both.knows(p, o) for p, o in a + b)
    assert both == merged(ca, cb)


@given(places)
def test_advancing_in_any_order_reaches_the_same_cut(placed: list[tuple[int, int]]) -> None:
    forward, backward = LogCut(), LogCut()
    for p, o in placed:
        forward = forward.advance(p, o)
    for p, o in reversed(placed):
        backward = backward.advance(p, o)
    assert forward == backward == LogCut.after(LogPosition(T0, p, o) for p, o in placed)


@given(offsets, offsets)
def test_the_token_round_trips(events: dict[int, int], forgets: dict[int, int]) -> None:
    position = Position(events, forgets)
    assert Position.parse(position.token) == position
    assert position.events == events and position.forgets == forgets


def test_a_write_and_a_forget_answer_the_position_after_them() -> None:
    written = [Written("a", 0, 4, T0, "memstack.events"), Written("b", 2, 9, T0),
               Written("c", 0, 1, T0)]
    assert Position.after_events(written).token == "e0-5.e2-10"
    assert Position.after_forgets(written[1:2]).token == "f2-10"
    assert Position.merge_tokens("e0-3.e1-9", "e0-5.f0-1") == "e0-5.e1-9.f0-1"
    assert Position.merge_tokens(None, "e0-3") == "e0-3"
    assert Position.merge_tokens(None, None) is None
    with pytest.raises(InvalidPositionError):
        Position.parse("e0-1;e1-2")


def test_one_receipt_for_the_client_the_service_and_http() -> None:
    from memstack.client import Written as ClientWritten
    from memstack.service.types import EventWritten, WriteReceipt

    assert ClientWritten is Written and EventWritten is Written
    w = Written("e1", 3, 41, T0, "memstack.events")
    assert w == Written("e1", 3, 41, T0)  # the topic takes no part in comparisons
    assert w.position == LogPosition(T0, 3, 41) and w.next_offset == 42
    out = WrittenOut.of(w)
    assert out.model_dump() == w.to_json() and set(w.to_json()) == {
        "event_id", "partition", "offset", "log_time"}
    receipt = WriteReceipt.model_validate({"written": [w.to_json()], "position": "e3-42"})
    assert receipt.written == (w,) and receipt.written[0].log_time == T0


# -- one module defines them -----------------------------------------------------------------

NAME = re.compile(r"^(Log|Event|Kafka)?(Position|Cut|Record|Written|Logged|Offsets?|Tracking|"
                  r"Checkpoint|Coordinates?)[A-Z]?\w*$")
"""Names of log coordinates (``LogCut``, ``WrittenEvent``, ``Offsets``...); error classes and
the names below are no coordinates."""
NOT_COORDINATES = {
    # (path, class): why it is no log coordinate although it is named or shaped like one
    ("operators/mutations.py", "RecordRow"):
        "a raw record's row in the stores: its event's place is two of its columns",
    ("operators/mutations.py", "MemoryRow"):
        "a memory's row in the stores: its event's place is two of its columns",
    ("pipelines/session_state/items.py", "StateItem"):
        "a session state's term, stored flat with its event's place",
    ("pipelines/contracts.py", "DeadLetter"):
        "a dead letter as the dead-letter topic stores it (where the bad record was)",
    ("infra/console.py", "ConsoleRecord"):
        "Kafka's console consumer's printout, parsed as text (infra tooling)",
    ("schemas/asof.py", "Columns"): "the names of the columns the as-of rule reads",
    ("memstack/view/neighbours.py", "Placed"):
        "where a memory row lies for the neighbour rule: its event's place, two of its row's "
        "columns, orders rows of one valid time",
    ("schemas/asof.py", "At"): "the names of the three columns of a position the rule reads",
    ("schemas/asof.py", "InCut"): "a clause of the as-of rule; it holds a LogCut",
    ("memstack/view/types.py", "RecordsAnswer"): "a query's answer (raw records)",
    ("memstack/view/reads.py", "RecordsParams"): "the parameters of the records read",
    ("pipelines/consolidation/checkpoints.py", "CheckpointStore"):
        "where the consolidation actors save their state",
}


def _fields(node: ast.ClassDef) -> set[str]:
    return {t.target.id for t in node.body
            if isinstance(t, ast.AnnAssign) and isinstance(t.target, ast.Name)}


def _is_model(node: ast.ClassDef) -> bool:
    decorated = any("dataclass" in ast.unparse(d) for d in node.decorator_list)
    return decorated or any(ast.unparse(b).endswith(("BaseModel", "_Answer", "NamedTuple",
                                                     "TypedDict")) for b in node.bases)


def coordinate_classes() -> list[tuple[str, str]]:
    """``(path, class)`` for every class of the package that looks like a log coordinate."""
    found = []
    for top in SCANNED:
        for path in sorted((ROOT / top).rglob("*.py")):
            if "__pycache__" in path.parts:
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if not isinstance(node, ast.ClassDef) or node.name.endswith(("Error", "Warning")):
                    continue
                where = (path.relative_to(ROOT).as_posix(), node.name)
                placed = _is_model(node) and {"partition", "offset"} <= _fields(node)
                if (NAME.match(node.name) or placed) and where not in NOT_COORDINATES:
                    found.append(where)
    return found


def test_log_coordinates_are_defined_in_one_module() -> None:
    home = HOME.relative_to(ROOT).as_posix()
    found = coordinate_classes()
    assert {name for path, name in found if path == home} >= {
        "LogPosition", "LogRecord", "LoggedEvent", "LoggedAt", "LogCut", "Position", "Written",
        "WrittenOut"}
    assert sorted((p, n) for p, n in found if p != home) == []


def test_the_scan_finds_a_coordinate_defined_elsewhere(tmp_path: Path) -> None:
    """The check above can fail: both a name and a shape are caught."""
    tree = ast.parse("from dataclasses import dataclass\n"
                     "@dataclass\nclass Receipt:\n    partition: int\n    offset: int\n"
                     "class Checkpoint:\n    pass\n")
    classes = [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]
    assert [n.name for n in classes if _is_model(n) and {"partition", "offset"} <= _fields(n)
            ] == ["Receipt"]
    assert [n.name for n in classes if NAME.match(n.name)] == ["Checkpoint"]


# -- the offset arithmetic lives there only --------------------------------------------------

ARITHMETIC_ALLOWED = {
    # path: why
    "jobs/eval/faults/fuzz_run.py": "builds a token by hand in a fault-injection harness (owned "
                                    "elsewhere; it should use Position.after_events)",
}


def _is_offset_plus_one(node: ast.AST) -> bool:
    """``<an offset> + 1`` (``pos.offset + 1``, ``max(offsets) + 1``); a window's number
    (``offset // size + 1``) is no offset. ``o + 1`` with ``o`` read from an offsets map is
    beyond a scan: review keeps it out."""
    if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add)):
        return False
    for one, other in ((node.right, node.left), (node.left, node.right)):
        if (isinstance(one, ast.Constant) and one.value == 1 and not isinstance(other, ast.BinOp)
                and "offset" in ast.unparse(other).lower()):
            return True
    return False


def arithmetic_sites(paths: list[Path] | None = None) -> list[str]:
    """Every ``offset + 1`` of the package's code (docstrings and comments are no code)."""
    out = []
    for path in paths or [p for top in SCANNED for p in sorted((ROOT / top).rglob("*.py"))]:
        rel = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else str(path)
        if path == HOME or rel in ARITHMETIC_ALLOWED or "__pycache__" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if _is_offset_plus_one(node):
                out.append(f"{rel}:{node.lineno}: {ast.unparse(node)}")
    return out


def test_the_offset_arithmetic_is_written_once() -> None:
    assert arithmetic_sites() == []
    assert any(_is_offset_plus_one(n) for n in ast.walk(ast.parse(HOME.read_text())))


def test_the_arithmetic_scan_finds_a_copy(tmp_path: Path) -> None:
    copy = tmp_path / "copy.py"
    copy.write_text('"""offset + 1 in a docstring is no code."""\n'
                    "def f(pos, offsets, o):\n"
                    "    return (pos.offset + 1, max(offsets) + 1, 1 + pos.offset, o + 2,\n"
                    "            pos.offset // 8 + 1)\n")
    assert [s.split(": ", 1)[1] for s in arithmetic_sites([copy])] == [
        "pos.offset + 1", "max(offsets) + 1", "1 + pos.offset"]

"""docs/ is reference: no commit hash, no work-session number, no temporary path.

History (measurements by date, bug narratives, the commits that changed a figure) lives in
CHANGELOG.md. A doc line that names a commit, one of our work sessions ("session 8",
"this session") or a scratch path (``/tmp/...``) fails here, with its file, line and match.
The domain noun "session" (an agent's conversation: "session s1", "a session's state",
"per session", "the tenant's last session") is not a work session and passes.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[1] / "docs"

PENDING: set[str] = set()
"""Docs (names relative to docs/) another change still has to clean; skipped until then.
Remove a name here once its doc passes."""

_COMMIT = re.compile(
    r"(?<![\w.#-])"  # not inside a word (0x...), a decimal, a #colour, a UUID
    r"(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}"  # hex with a digit and a letter
    r"(?![\w-])")  # not the head of a longer word, a sha256 or a UUID part
_QUOTED = re.compile(r'"[0-9a-f]{7,40}"')
"""An example id as a JSON string value (``"id": "3f2a9c1e"``): not a commit."""

_SESSION_NUMBER = re.compile(r"\bsessions?[ \t-]*#?[ \t]*\d+\b", re.IGNORECASE)
"""``session 8``, ``session-8``, ``sessions 3-4``; a data key such as ``session_1`` passes."""
_OUR_SESSION = re.compile(
    r"(?<!'s )\b(?:this|previous|last)[ \t]+session\b(?!'s)", re.IGNORECASE)
"""``this session``, ``the previous session``; not ``the tenant's last session`` (whose) or
``this session's state`` (a conversation's)."""

_TEMP_PATH = re.compile(r"(?<![\w.-])(?:/tmp/|/work/|/var/folders/|/private/var/folders/)"
                        r"|\$\{?TMPDIR\}?/")


def offences(line: str) -> list[str]:
    """What in one doc line reads as lab notebook rather than reference, as matched."""
    found: list[str] = []
    quoted = {m.span() for m in _QUOTED.finditer(line)}
    for match in _COMMIT.finditer(line):
        if (match.start() - 1, match.end() + 1) not in quoted:
            found.append(f"commit hash {match.group()!r}")
    found += [f"session number {m.group()!r}" for m in _SESSION_NUMBER.finditer(line)]
    found += [f"work session {m.group()!r}" for m in _OUR_SESSION.finditer(line)]
    found += [f"temporary path {m.group()!r}" for m in _TEMP_PATH.finditer(line)]
    return found


@pytest.mark.parametrize("line", [
    "full runs on 845fae7 at 1M",
    "the base (`5c92876`, before) and the new code",
    "see commit 9af3872e1c0b4d2a8f6e7d5c4b3a2918f7e6d5c4",
    "Measured in session 8, physical p99 5.49 s",
    "the session-8 failure",
    "Session 9's quick runs",
    "sessions 3 and 4",
    "Not diagnosed in this session.",
    "as in the previous session",
    "measured last session",
    "MEMSTACK_HOME=/tmp/fe9/home memstack eval forget",
    "MEMSTACK_EVAL_DIR=/work/shared/eval memstack eval openproblems",
    "the cache in /var/folders/x1/T/",
    "written to $TMPDIR/memstack",
])
def test_the_matcher_flags_notebook_lines(line: str) -> None:
    assert offences(line), line


@pytest.mark.parametrize("line", [
    "a session's state is fixed-size",
    "session s1 and session s2, per session",
    "the tenant's last session, which they must keep",
    "this session's state is read at query time",
    "LoCoMo keys such as session_1 and session_1_date_time",
    'the event {"event_id": "3f2a9c1e", "tenant": "acme"}',
    "colour #a1b2c3d4 and 0xdeadbeef12",
    "an id 123e4567-e89b-12d3-a456-426614174000 (a UUID)",
    "a sha256 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
    "1.183e+04 events/s, 3,418 ev/s, 2026-12-02, 10,025 cases",
    "words such as decade, facade, accede and deadbeef have no digit",
    "memstack replay --from earliest --into rebuilt/as-of-10h",
    "https://example.com/work/notes and src/tmp/cache",
])
def test_the_matcher_passes_reference_lines(line: str) -> None:
    assert offences(line) == [], line


def _docs() -> list[Path]:
    return sorted(DOCS.rglob("*.md"))


def test_docs_are_found_queries_included() -> None:
    names = {p.relative_to(DOCS).as_posix() for p in _docs()}
    assert {"benchmarks.md", "forget.md", "queries.md"} <= names


@pytest.mark.parametrize("doc", _docs(), ids=lambda p: p.relative_to(DOCS).as_posix())
def test_doc_is_reference_not_lab_notebook(doc: Path) -> None:
    name = doc.relative_to(DOCS).as_posix()
    if name in PENDING:
        pytest.skip(f"{name} is pending its owner's clean-up (PENDING)")
    bad = [f"docs/{name}:{number}: {what}"
           for number, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1)
           for what in offences(line)]
    assert not bad, ("history belongs in CHANGELOG.md, not in docs/:\n" + "\n".join(bad))

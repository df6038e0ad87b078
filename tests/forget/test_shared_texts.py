"""The shared-text search of a purge's audit probes: texts as RE2 literals in DuckDB, and the
groups that bound a pattern's size."""

from __future__ import annotations

import duckdb

from memstack.pipelines.forgetting.shared import alternations, literal

AWKWARD = ["a.b*c+d?(e)|[f]{2}^$", "back\\slash \\E end \\Q start", "line\nbreak\ttab",
           "café ☕ 東京", "100% of $5 -> #1 & ~2", "\\E", "trailing \\"]


def test_every_text_matches_itself_as_a_literal_and_nothing_looser() -> None:
    con = duckdb.connect()
    for text in AWKWARD:
        pattern = literal(text)
        assert con.execute("SELECT regexp_matches(?, ?)", [f"<{text}>", pattern]).fetchone() \
            == (True,), text
        altered = text[:-1] + ("x" if text[-1] != "x" else "y")
        assert con.execute("SELECT regexp_matches(?, ?)", [altered, pattern]).fetchone() \
            == (False,), text


def test_an_alternation_matches_any_of_its_texts_and_groups_stay_bounded() -> None:
    con = duckdb.connect()
    texts = [f"text {i} {AWKWARD[i % len(AWKWARD)]}" for i in range(50)]
    groups = list(alternations(texts, max_chars=300))
    assert [t for group, _ in groups for t in group] == texts  # every text, in order, once
    assert len(groups) > 1 and all(len(p) <= 300 for g, p in groups if len(g) > 1)
    for group, pattern in groups:
        for text in group:
            assert con.execute("SELECT regexp_matches(?, ?)", [f"..{text}..", pattern]) \
                .fetchone() == (True,)
        assert con.execute("SELECT regexp_matches('none of them', ?)", [pattern]).fetchone() \
            == (False,)
    [(alone, _)] = list(alternations(["x" * 1000], max_chars=300))  # a long text goes alone
    assert alone == ["x" * 1000]

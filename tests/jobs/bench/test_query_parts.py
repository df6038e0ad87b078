"""``MEMSTACK_BENCH_QUERY_PARTS`` picks the parts of ``memstack bench query``; a search-only run
draws the same corpus and queries as a whole run."""

from __future__ import annotations

import numpy as np
import pytest

from memstack.jobs.bench.query import parts, query_facts_draws


def test_parts_named_or_both() -> None:
    assert parts(None) == parts("") == {"facts", "search"}
    assert parts("search") == {"search"}
    assert parts(" facts , search ") == {"facts", "search"}
    with pytest.raises(ValueError, match="unknown parts"):
        parts("serch")


def test_search_only_sees_the_random_stream_of_a_whole_run() -> None:
    whole, alone, keys = np.random.default_rng(7), np.random.default_rng(7), 111_111
    for _ in range(1000):  # what query_facts draws
        whole.integers(keys)
        whole.uniform(-10, 150)
        whole.uniform(-1, 5)
    query_facts_draws(alone, keys)
    assert whole.integers(2**62) == alone.integers(2**62)

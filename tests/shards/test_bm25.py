"""The sharded BM25: scores do not depend on how rows are split over shards (pure)."""

from __future__ import annotations

import math
import random
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from memstack.pipelines.shards import bm25

WORDS = ["tomato", "basil", "lisbon", "porto", "violin", "tax", "bike", "oslo", "route"]


def docs_of(texts: list[str]) -> list[Counter[str]]:
    return [Counter(bm25.tokens(t)) for t in texts]


def ranked(shards: list[list[tuple[str, str]]], query: str, n: int) -> list[bm25.Scored]:
    terms = bm25.query_terms(query)
    stats, matches = [], []
    for shard in shards:
        ids, docs = [i for i, _ in shard], docs_of([t for _, t in shard])
        stats.append(bm25.stats_of(docs, terms))
        matches += bm25.matches_of(ids, docs, terms)
    return bm25.rank(bm25.TermStats.total(stats), matches, n)


def test_tokens_lowercase_split_on_punctuation_drop_stop_words_and_stem() -> None:
    assert bm25.tokens("The Tomato-seedlings, in LISBON!") == ["tomato", "seedl", "lisbon"]
    assert bm25.tokens("She paints; he painted paintings") == ["paint"] * 3
    assert bm25.query_terms("tomato Tomato basil") == ["tomato", "basil"]
    assert bm25.tokens("x" * 41 + " ok") == ["ok"]


def test_rank_is_textbook_bm25() -> None:
    rows = [("a", "tomato tomato basil"), ("b", "basil"), ("c", "porto")]
    top = ranked([rows], "tomato", 10)
    assert [s.memory_id for s in top] == ["a"]
    idf = math.log(1 + (3 - 1 + 0.5) / (1 + 0.5))
    mean = (3 + 1 + 1) / 3
    tf = 2
    expected = idf * tf * (bm25.K1 + 1) / (tf + bm25.K1 * (1 - bm25.B + bm25.B * 3 / mean))
    assert math.isclose(top[0].score, expected)
    assert ranked([rows], "nothing here", 10) == []


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.sampled_from(WORDS), min_size=1, max_size=8), min_size=1,
                max_size=30),
       st.integers(1, 6), st.lists(st.sampled_from(WORDS), min_size=1, max_size=3),
       st.integers(0, 2**31))
def test_ranking_is_the_same_for_any_split(texts: list[list[str]], shards: int,
                                           query: list[str], seed: int) -> None:
    rows = [(f"m{i:03d}", " ".join(words)) for i, words in enumerate(texts)]
    one = ranked([rows], " ".join(query), 10)
    rng = random.Random(seed)
    split: list[list[tuple[str, str]]] = [[] for _ in range(shards)]
    for row in rows:
        split[rng.randrange(shards)].append(row)
    many = ranked(split, " ".join(query), 10)
    assert [s.memory_id for s in many] == [s.memory_id for s in one]
    assert all(math.isclose(a.score, b.score) for a, b in zip(many, one, strict=True))


def test_stemming_from_many_threads_at_once_gives_each_word_its_stem() -> None:
    """A Snowball stemmer keeps the word it works on: shared between threads it mixed words
    up (an IndexError in a shard's search under concurrent requests)."""
    import random
    from concurrent.futures import ThreadPoolExecutor

    rng = random.Random(3)
    words = ["".join(rng.choices("abcdefghijklmnoprstuvwy", k=rng.randint(3, 9))) + suffix
             for suffix in ("ing", "ed", "s", "ational", "ings", "ies") for _ in range(2000)]
    bm25.stem.cache_clear()
    with ThreadPoolExecutor(8) as pool:
        stems = list(pool.map(lambda w: bm25.tokens(w + " " + w), words))
    bm25.stem.cache_clear()
    assert stems == [bm25.tokens(w + " " + w) for w in words]


def test_a_run_of_digits_is_its_own_stem_as_the_stemmer_says() -> None:
    """Digits skip the stemmer (its cache is kept for words): the tokens are what the
    stemmer gives, for numbers of every length, with leading zeros, and beside words."""
    import snowballstemmer  # type: ignore[import-untyped]  # pure Python, no stubs

    stemmer = snowballstemmer.stemmer("english")
    rng = random.Random(3)
    numbers = ["0", "00", "007", "1999", "20261207", *(str(rng.randrange(10 ** rng.randint(
        1, 18))) for _ in range(500))]
    for number in numbers:
        assert bm25.tokens(f"turn {number}") == ["turn", stemmer.stemWord(number)]
    before = bm25.stem.cache_info().currsize
    bm25.tokens(" ".join(str(10 ** 12 + i) for i in range(100)))
    assert bm25.stem.cache_info().currsize == before  # numbers take no cache entry
    assert bm25.tokens("running 3rd runs") == ["run", "3rd", "run"]  # digits and letters: stemmed

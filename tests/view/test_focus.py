"""The query's focus: terms common in the searched scope leave the query (pure logic)."""

from __future__ import annotations

from memstack.view.focus import MIN_SAMPLE, ScopeTerms, TermShares, focus, terms


def _chat(n: int = 200) -> list[str]:
    """A two-person chat: every turn names its speaker, some name the other."""
    out = []
    for i in range(n):
        speaker, other = ("Ana", "Ben") if i % 2 == 0 else ("Ben", "Ana")
        out.append(f"{speaker}: turn {i} about topic{i % 17}, {other}!")
    out.append("Ana: I painted a sunrise over the lake")
    return out


def test_terms_are_lowercased_runs_of_letters_and_digits() -> None:
    assert terms("Ana's LGBTQ+ group, 2023!") == ["ana", "s", "lgbtq", "group", "2023"]


def test_the_speakers_names_leave_the_query_and_its_words_stay() -> None:
    shares = TermShares.of(_chat())
    assert focus("What did Ana paint over the lake?", shares) == "What did paint over the lake?"
    assert focus("When did Ana's sunrise painting happen", shares) == \
        "When did sunrise painting happen"


def test_a_query_of_common_terms_only_is_left_whole() -> None:
    shares = TermShares.of(_chat())
    assert focus("Ana Ben turn", shares) == "Ana Ben turn"


def test_a_small_scope_calls_nothing_common() -> None:
    shares = TermShares.of(_chat(MIN_SAMPLE - 2))
    assert shares.rows < MIN_SAMPLE
    assert focus("What did Ana paint?", shares) == "What did Ana paint?"


def test_a_term_is_common_above_its_share_only() -> None:
    texts = ["alpha beta"] * 30 + ["beta"] * 70 + ["gamma"] * 100
    shares = TermShares.of(texts)
    assert shares.common("beta")           # 100 of 200
    assert not shares.common("alpha")      # 30 of 200 = 0.15
    assert shares.common("alpha", share=0.1)


def test_scope_terms_sample_once_per_scope_until_the_ttl() -> None:
    now = [0.0]
    calls: list[int] = []

    def sample(n: int) -> list[str]:
        calls.append(n)
        return _chat()

    cache = ScopeTerms(ttl_s=10.0, clock=lambda: now[0])
    first = cache.shares("t\0s1", sample)
    assert cache.shares("t\0s1", sample) is first and len(calls) == 1
    cache.shares("t\0s2", sample)
    assert len(calls) == 2
    now[0] = 11.0
    cache.shares("t\0s1", sample)
    assert len(calls) == 3

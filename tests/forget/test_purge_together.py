"""``purge_together`` (pure orchestration, so its stores here are stand-ins): the two-phase
stores purge at the same time, inside one ``exclusive()``, and an error in one is raised once
the others have finished. The real stores' purges are tested against real files elsewhere
(test_duckdb_purge.py, test_lance_purge.py, test_contract_stores.py)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext

import pytest

from memstack.pipelines.forgetting.processor import purge_together


class Purging:
    """Records what its purge saw; waits at ``barrier`` so only overlapping purges finish."""

    def __init__(self, barrier: threading.Barrier | None, fail: bool = False) -> None:
        self.barrier, self.fail = barrier, fail
        self.probes: Sequence[bytes] = ()
        self.inside: bool | None = None
        self.finished = False
        self.held: Callable[[], bool] = lambda: False

    def purge(self, probes: Sequence[bytes] = (),
              exclusive: Callable[[], AbstractContextManager[None]] = nullcontext,
              ) -> dict[str, float]:
        with exclusive():
            self.probes, self.inside = probes, self.held()
            if self.barrier is not None:
                self.barrier.wait(timeout=5)  # both purges must be running at once
            if self.fail:
                raise RuntimeError("the purge failed")
            self.finished = True
            return {"s": 1.0}


Exclusive = Callable[[], AbstractContextManager[None]]


def _exclusive(count: list[int], lock: threading.Lock) -> Exclusive:
    @contextmanager
    def held() -> Iterator[None]:
        with lock:
            count[0] += 1
            yield
    return held


def test_stores_purge_at_once_inside_one_exclusive() -> None:
    barrier, lock, entered = threading.Barrier(2), threading.Lock(), [0]
    a, b = Purging(barrier), Purging(barrier)
    for store in (a, b):
        store.held = lock.locked
    got = purge_together([("a", a), ("b", b)], [b"x"], _exclusive(entered, lock))  # type: ignore[list-item]
    assert got == {"a": {"s": 1.0}, "b": {"s": 1.0}}
    assert entered == [1] and a.inside and b.inside  # entered once, held by both purges
    assert list(a.probes) == [b"x"] == list(b.probes)


def test_one_store_purges_under_its_own_exclusive() -> None:
    lock, entered = threading.Lock(), [0]
    only = Purging(None)
    got = purge_together([("only", only)], [], _exclusive(entered, lock))  # type: ignore[list-item]
    assert got == {"only": {"s": 1.0}} and entered == [1]


def test_an_error_is_raised_after_the_other_purge_finished() -> None:
    barrier = threading.Barrier(2)
    failing, other = Purging(barrier, fail=True), Purging(barrier)
    with pytest.raises(RuntimeError, match="the purge failed"):
        purge_together([("failing", failing), ("other", other)], [])  # type: ignore[list-item]
    assert other.finished

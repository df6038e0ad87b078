"""The fault suite's workload generator: the sessions its writers use.

A session forget erases the whole session, and the history credits it with the one doomed
batch the forgetter picked, so a doomed session must hold exactly one batch, across every
stop() and start() of the workload (a first full run reported a doomed batch of an earlier
epoch as lost when its session name came back after a restart).
"""

from __future__ import annotations

from collections import Counter
from typing import Any, cast

from memstack.jobs.eval.faults.history import History
from memstack.jobs.eval.faults.workload import DOOMED_EVERY, Workload, session_of


def test_every_tenth_batch_is_doomed_and_alone_in_its_session() -> None:
    sessions = [session_of("t0", n) for n in range(300)]
    doomed = [name for name, is_doomed in sessions if is_doomed]
    assert len(doomed) == 300 // DOOMED_EVERY
    assert len(set(doomed)) == len(doomed)
    assert all(name.startswith("doom-t0-") for name in doomed)
    kept = Counter(name for name, is_doomed in sessions if not is_doomed)
    assert not set(kept) & set(doomed)
    assert max(kept.values()) > 1  # kept sessions gather several batches


def test_batch_numbers_go_on_across_restarts() -> None:
    # The counter lives on the workload, not in a writer thread (each start() makes new
    # writer threads), so a second epoch's writer goes on where the first stopped.
    workload = Workload(cast(Any, None), History(seed=1), seed=1)  # no thread is started
    first_epoch = [workload._next_batch("t0") for _ in range(25)]
    second_epoch = [workload._next_batch("t0") for _ in range(25)]
    assert first_epoch + second_epoch == list(range(50))
    assert workload._next_batch("t1") == 0  # each tenant numbers its own batches
    names = [session_of("t0", n)[0] for n in first_epoch + second_epoch]
    doomed = [n for n in names if n.startswith("doom-")]
    assert len(doomed) == len(set(doomed)) == 5

"""Neighbour context: a row's score takes a share of the scores of the rows around it.

The evidence for a question is often the turn after the one that matches it: "How was the trip
with your kids?" matches the question's words, "We went camping, they loved it" holds the
answer. So after fusion a row's score becomes

    score + NEIGHBOUR_WEIGHT * (sum of the scores 1 row away + NEAR_DECAY * those 2 rows away)

where "away" counts rows of the same session, in valid-time order (rows of one time in the
order they were logged: partition, then offset), that answer the same query scope and lie
within :data:`WINDOW` of it (a gap longer than that ends the conversation around a row).
Rows next to the best candidates join the candidates this way even when neither retriever
ranked them. The weights were chosen leave-one-conversation-out on LoCoMo
(docs/queries.md, "Ablation"); every held-out choice was the same.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from memstack.schemas.asof import micros

NEIGHBOUR_WEIGHT = 0.5
NEAR_DECAY = 0.5
REACH = 2
"""How many rows on each side of a row share its score."""
WINDOW = timedelta(minutes=10)
"""Rows further apart in valid time than this are not neighbours."""


@dataclass(frozen=True)
class Placed:
    """Where a row lies: its session and valid time, and its log position (which orders rows
    of one time: a turn logged after another of the same time follows it)."""

    memory_id: str
    session: str
    at: datetime
    partition: int
    offset: int


_MICRO = timedelta(microseconds=1)




@dataclass(frozen=True)
class Placements:
    """Rows as columns: ids, sessions, valid times (microseconds since the epoch) and log
    positions."""

    ids: Sequence[str]
    sessions: Sequence[str]
    at: npt.NDArray[np.int64]
    partitions: npt.NDArray[np.int64]
    offsets: npt.NDArray[np.int64]

    @staticmethod
    def of(rows: Sequence[Placed]) -> Placements:
        return Placements([r.memory_id for r in rows], [r.session for r in rows],
                          np.array([micros(r.at) for r in rows], dtype=np.int64),
                          np.array([r.partition for r in rows], dtype=np.int64),
                          np.array([r.offset for r in rows], dtype=np.int64))

    @staticmethod
    def of_table(table: pa.Table) -> Placements:
        """From a table's ``memory_id``, ``session``, ``vt_from`` (UTC microseconds),
        ``partition`` and ``offset``."""
        times = pc.cast(table.column("vt_from"), pa.int64()).to_numpy()
        return Placements(table.column("memory_id").to_pylist(),
                          table.column("session").to_pylist(), times.astype(np.int64),
                          *(table.column(c).to_numpy().astype(np.int64)
                            for c in ("partition", "offset")))

    def plus(self, other: Placements) -> Placements:
        return Placements([*self.ids, *other.ids], [*self.sessions, *other.sessions],
                          *(np.concatenate([a, b]) for a, b in (
                              (self.at, other.at), (self.partitions, other.partitions),
                              (self.offsets, other.offsets))))


def spread(scores: Mapping[str, float], rows: Sequence[Placed] | Placements, *,
           weight: float = NEIGHBOUR_WEIGHT, decay: float = NEAR_DECAY,
           reach: int = REACH, window: timedelta = WINDOW) -> dict[str, float]:
    """The scores of ``rows`` (every row placed; a row without a score counts 0; a row placed
    twice counts once, where it was placed last) after each takes ``weight`` of its
    neighbours' scores. Rows of ``scores`` that were not placed keep their own score."""
    placed = rows if isinstance(rows, Placements) else Placements.of(rows)
    last = {memory_id: i for i, memory_id in enumerate(placed.ids)}
    keep = np.fromiter(last.values(), dtype=np.int64, count=len(last))
    ids = np.array(list(last), dtype=object)
    codes: dict[str, int] = {}
    session = np.array([codes.setdefault(placed.sessions[i], len(codes)) for i in keep.tolist()],
                       dtype=np.int64)
    at = placed.at[keep]
    order = np.lexsort((placed.offsets[keep], placed.partitions[keep], at, session))
    ids, session, at = ids[order], session[order], at[order]
    own = np.array([scores.get(m, 0.0) for m in ids], dtype=np.float64)
    # link i -- i+1 holds when both rows are of one session and no more than window apart
    link = (session[1:] == session[:-1]) & (np.diff(at) <= window // _MICRO)
    broken = np.concatenate([[0], np.cumsum(~link)])
    near = np.zeros(len(ids))
    for step in range(1, reach + 1):
        if step >= len(ids):
            break
        share = decay ** (step - 1)
        joined = broken[step:] == broken[:-step]  # rows i and i+step, every link between held
        near[step:] += share * own[:-step] * joined
        near[:-step] += share * own[step:] * joined
    out = dict(scores)
    for memory_id, mine, extra in zip(ids.tolist(), own.tolist(), near.tolist(), strict=True):
        if extra > 0.0 or memory_id in scores:
            out[memory_id] = mine + weight * extra
    return out


Ints = npt.NDArray[np.int64]
Floats = npt.NDArray[np.float64]


def spread_held(scored: Ints, scores: Floats, rows: Ints, sessions: Ints, at: Ints,
                partitions: Ints, offsets: Ints, *, weight: float = NEIGHBOUR_WEIGHT,
                decay: float = NEAR_DECAY, reach: int = REACH, window: timedelta = WINDOW
                ) -> tuple[Ints, Floats]:
    """:func:`spread` over rows named by integers (a held copy's positions), in numpy: the
    same rule, checked against it (``tests/view/test_neighbours.py``). ``scored`` (distinct)
    have ``scores``; ``rows`` (distinct, ascending) are placed in ``sessions`` (any integer
    code per session) at ``at`` (microseconds), logged at ``partitions`` and ``offsets``.
    Returns the rows :func:`spread` returns (placed rows with a share or a score, and the
    scored rows not placed) and their scores."""
    if not len(rows):
        return scored, scores
    order = np.lexsort((offsets, partitions, at, sessions))
    ordered, session, when = rows[order], sessions[order], at[order]
    own = np.zeros(len(rows))
    where = np.searchsorted(rows, scored)
    placed = (where < len(rows)) & (rows[np.minimum(where, len(rows) - 1)] == scored)
    own[where[placed]] = scores[placed]
    own = own[order]
    link = (session[1:] == session[:-1]) & (np.diff(when) <= window // _MICRO)
    broken = np.concatenate([[0], np.cumsum(~link)])
    near = np.zeros(len(ordered))
    for step in range(1, min(reach, len(ordered) - 1) + 1):
        share = decay ** (step - 1)
        joined = broken[step:] == broken[:-step]
        near[step:] += share * own[:-step] * joined
        near[:-step] += share * own[step:] * joined
    was_scored = np.zeros(len(ordered), dtype=np.bool_)
    was_scored[np.argsort(order)[where[placed]]] = True
    keep = (near > 0.0) | was_scored
    return (np.concatenate([ordered[keep], scored[~placed]]),
            np.concatenate([own[keep] + weight * near[keep], scores[~placed]]))

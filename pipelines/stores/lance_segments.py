"""Index segments of the ``memories`` table: new rows get an index of their own, and a tiered
merge policy keeps the number of index segments small (see docs/stores.md, "Index segments").

A Lance index may be a list of segments (Lance calls them deltas), each covering some
fragments; a search reads every segment. Adding new rows to the existing index
(``optimize_indices()`` as LanceDB's ``optimize`` does it) rewrites that index: measured at 1M
rows (pylance 14.0.2, 2 cores), adding 10,000 rows took 17.0 s for the IVF_PQ index and 1.0 s
for the full-text index, so refreshes were rationed to every 20 % of growth and the rows in
between stayed unindexed (searched by a scan, whose cost grew with the table). A new segment
for the same 10,000 rows took 0.19 s and 0.06 s. Segments are then merged the way Lucene's
tiered policy merges its segments: when the newest :attr:`IndexPolicy.merge_width` segments
of an index are in the same size tier, they become one; a row is merged about
``log_width(table / refresh_rows)`` times, and an index has at most ``width - 1`` segments
per tier. Lance merges the newest segments only, which is what the tiers ask for: newer
segments are the smaller ones.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from memstack.pipelines.stores.lance_files import (
    compact_small,
    index_segments,
    latest,
    retrying,
)

log = logging.getLogger(__name__)


def tier(rows: int, floor: int, width: int) -> int:
    """The size tier of a segment of ``rows`` rows: 0 below ``floor * width``, then one more
    per factor of ``width``."""
    if rows < floor * width:
        return 0
    return int(math.log(rows / floor, width))


def merge_plan(sizes: Sequence[int], floor: int, width: int,
               cap: int | None = None) -> list[int]:
    """The merges to run, in order, as the number of newest segments each one merges.

    ``sizes`` are the segments' row counts, oldest first. While the newest ``width`` segments
    are all in one tier they are merged into one, and the result may complete a run of the
    tier above (the cascade); never into a segment of more than ``cap`` rows (those segments
    stay as they are). Pure: the caller runs the merges."""
    if width < 2:
        raise ValueError(f"merge width must be at least 2, not {width}")
    segments = list(sizes)
    plan: list[int] = []
    while len(segments) >= width:
        newest = segments[-width:]
        if len({tier(s, floor, width) for s in newest}) != 1:
            break
        if cap is not None and sum(newest) > cap:
            break
        plan.append(width)
        segments[-width:] = [sum(newest)]
    return plan


@dataclass(frozen=True)
class Segment:
    """One segment of an index: the fragments it covers and their rows."""

    fragments: frozenset[int]
    rows: int


def segments(dataset: Any) -> dict[str, list[Segment]]:
    """Per index name, its segments, oldest first (by the table version each one indexed:
    the order Lance merges in). Rows count every row of the covered fragments, deleted ones
    included: what a merge reads."""
    rows = {f.fragment_id: int(f.metadata.physical_rows) for f in dataset.get_fragments()}
    indices = index_segments(dataset)
    out: dict[str, list[Segment]] = {}
    for index in sorted(indices, key=lambda i: int(i["version"])):
        covered = frozenset(int(f) for f in index["fragment_ids"])
        out.setdefault(str(index["name"]), []).append(
            Segment(covered, sum(rows.get(f, 0) for f in covered)))
    return out


def segment_rows(dataset: Any) -> dict[str, list[int]]:
    """Per index name, the rows of each of its segments, oldest first."""
    return {name: [s.rows for s in found] for name, found in segments(dataset).items()}


def index_new_rows(uri: str) -> None:
    """A new segment of every index for the rows no segment covers yet (cost: those rows)."""
    retrying("index new rows",
             lambda: latest(uri).optimize.optimize_indices(num_indices_to_merge=0))


def merge_segments(uri: str, floor: int, width: int, fragment_rows: int,
                   cap: int | None = None) -> dict[str, int]:
    """Run the tiered merges every index is due (:func:`merge_plan`), one step at a time;
    returns, per index, the segments it has afterwards.

    After a step merged the newest ``k`` segments of the indexes, the fragments the merged
    segment covers are compacted together (up to ``fragment_rows``, nothing else touched), so
    data files grow with their segments as Lucene's merges grow its segment files. Lance then
    remaps the merged segment only (it compacts only fragments that the same segments cover,
    hence the merge first). Without it the table would keep one small fragment per refresh."""
    for _ in range(MAX_STEPS):
        due = {name: plan[0] for name, listed in segments(latest(uri)).items()
               if (plan := merge_plan([s.rows for s in listed], floor, width, cap))}
        if not due:
            break
        for name, k in due.items():
            _merge_newest(uri, name, k)
        newest = segments(latest(uri))[next(iter(due))][-1]
        compact_small(uri, fragment_rows, _these(newest.fragments))
    return {name: len(listed) for name, listed in segments(latest(uri)).items()}


MAX_STEPS = 32
"""Merge steps per refresh at most (a cascade takes one per tier: ~8 at 1M rows)."""


def _these(fragments: frozenset[int]) -> Callable[[Any], set[int]]:
    def among(_dataset: Any) -> set[int]:
        return set(fragments)
    return among


def _merge_newest(uri: str, name: str, k: int) -> None:
    def attempt() -> None:
        latest(uri).optimize.optimize_indices(index_names=[name], num_indices_to_merge=k)
    retrying(f"merge of {name}", attempt)
    log.debug("merged the newest %d segments of %s", k, name)

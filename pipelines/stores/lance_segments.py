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
import warnings
from collections.abc import Sequence
from typing import Any

from memstack.pipelines.stores.lance_files import latest, retrying

log = logging.getLogger(__name__)


def tier(rows: int, floor: int, width: int) -> int:
    """The size tier of a segment of ``rows`` rows: 0 below ``floor * width``, then one more
    per factor of ``width``."""
    if rows < floor * width:
        return 0
    return int(math.log(rows / floor, width))


def merge_plan(sizes: Sequence[int], floor: int, width: int) -> list[int]:
    """The merges to run, in order, as the number of newest segments each one merges.

    ``sizes`` are the segments' row counts, oldest first. While the newest ``width`` segments
    are all in one tier they are merged into one, and the result may complete a run of the
    tier above (the cascade). Pure: the caller runs the merges."""
    if width < 2:
        raise ValueError(f"merge width must be at least 2, not {width}")
    segments = list(sizes)
    plan: list[int] = []
    while len(segments) >= width:
        newest = segments[-width:]
        if len({tier(s, floor, width) for s in newest}) != 1:
            break
        plan.append(width)
        segments[-width:] = [sum(newest)]
    return plan


def segment_rows(dataset: Any) -> dict[str, list[int]]:
    """Per index name, the rows each of its segments covers, oldest first (by the table version
    it indexed), counting the rows of the fragments it covers, deleted ones included: what a
    merge reads."""
    rows = {f.fragment_id: int(f.metadata.physical_rows) for f in dataset.get_fragments()}
    with warnings.catch_warnings():
        # list_indices is deprecated for describe_indices, which does not list segments
        warnings.simplefilter("ignore", DeprecationWarning)
        indices = dataset.list_indices()
    out: dict[str, list[int]] = {}
    for index in sorted(indices, key=lambda i: int(i["version"])):  # the order Lance merges in
        covered = sum(rows.get(int(f), 0) for f in index["fragment_ids"])
        out.setdefault(str(index["name"]), []).append(covered)
    return out


def index_new_rows(uri: str) -> None:
    """A new segment of every index for the rows no segment covers yet (cost: those rows)."""
    retrying("index new rows",
             lambda: latest(uri).optimize.optimize_indices(num_indices_to_merge=0))


def merge_segments(uri: str, floor: int, width: int) -> dict[str, int]:
    """Run the tiered merges every index is due (:func:`merge_plan`); returns, per index, the
    segments it has afterwards."""
    for name, sizes in segment_rows(latest(uri)).items():
        for k in merge_plan(sizes, floor, width):
            _merge_newest(uri, name, k)
    return {name: len(sizes) for name, sizes in segment_rows(latest(uri)).items()}


def _merge_newest(uri: str, name: str, k: int) -> None:
    def attempt() -> None:
        latest(uri).optimize.optimize_indices(index_names=[name], num_indices_to_merge=k)
    retrying(f"merge of {name}", attempt)
    log.debug("merged the newest %d segments of %s", k, name)

"""Keeping the resident copy at the version a LanceDB table reads, by its fragments.

A Lance table is fragments (data files) plus a deletion file per fragment. A fragment's data
never changes; a delete gives it a new deletion file; a compaction replaces fragments with new
ones holding the same rows. So, when the table's version moved since the last search:

- a fragment not seen before: its ``memory_id`` column is read; rows whose id is held alive
  (moved by a compaction) keep their position, the others are read whole and appended;
- a fragment seen before with another deletion file: its live ids are read, and the rows of
  it that are no longer there die;
- a fragment gone: the rows it still owned (no new fragment took them) die.

This works in any process that reads the table (the writer, a reader process), whoever wrote
it, and its cost is bounded by what changed. It is the same scheme as the metadata index
(:mod:`memstack.view.metadata_index`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from memstack.view.resident.grow import Grow
from memstack.view.resident.rows import Positions

Append = Callable[[pa.Table], Positions]
"""Append whole rows (every column, the vector included); their positions."""
Kill = Callable[[Positions], None]


@dataclass
class _Held:
    number: int
    deletion: str
    positions: Positions


@dataclass(frozen=True)
class Step:
    """What one refresh did."""

    fragments_read: int
    rows_appended: int
    rows_died: int


class FragmentFollower:
    """Which resident positions each live fragment of the table holds."""

    def __init__(self) -> None:
        self.version: int | None = None
        self._held: dict[str, _Held] = {}
        self._owner = Grow(np.int32)
        self._numbers = 0

    def refresh(self, uri: str, version: int, ids: Callable[[str], int | None],
                append: Append, kill: Kill) -> Step:
        """Bring the positions to ``version`` of the dataset at ``uri``; ``ids`` gives the
        position of an id held alive."""
        import lance

        if version == self.version:
            return Step(0, 0, 0)
        dataset = lance.dataset(uri, version=version)
        live: dict[str, tuple[Any, str]] = {}
        for fragment in dataset.get_fragments():
            meta = fragment.metadata
            base = json.dumps([meta.id, [f.path for f in meta.files]])
            d = meta.deletion_file
            live[base] = (fragment, "" if d is None else json.dumps(
                [d.id, d.read_version, d.num_deleted_rows]))
        read = appended = died = 0
        for base, (fragment, deletion) in live.items():
            held = self._held.get(base)
            if held is not None and held.deletion == deletion:
                continue
            read += 1
            names = fragment.to_table(columns=["memory_id"]).column(0).to_pylist()
            if held is not None:  # a new deletion file: the rows it no longer has die
                keep = set(names)
                alive_ids = {p for m in keep if (p := ids(m)) is not None}
                gone = held.positions[[int(p) not in alive_ids for p in held.positions]]
                died += self._kill_owned(gone, held.number, kill)
                held.positions = held.positions[[int(p) in alive_ids for p in held.positions]]
                held.deletion = deletion
                continue
            number = self._numbers
            self._numbers += 1
            positions = np.array([-1 if (p := ids(m)) is None else p for m in names],
                                 dtype=np.int64)
            missing = np.flatnonzero(positions < 0)
            if len(missing):
                rows = (fragment.to_table() if len(missing) == len(names)
                        else fragment.take(missing.tolist()))
                positions[missing] = append(rows)
                appended += len(missing)
            self._own(positions, number)
            self._held[base] = _Held(number, deletion, positions)
        for base in set(self._held) - set(live):
            held = self._held.pop(base)
            died += self._kill_owned(held.positions, held.number, kill)
        self.version = version
        return Step(read, appended, died)

    def _own(self, positions: Positions, number: int) -> None:
        if len(positions) and int(positions.max()) >= self._owner.n:
            self._owner.append(np.full(int(positions.max()) + 1 - self._owner.n, -1, np.int32))
        self._owner[positions] = number

    def _kill_owned(self, positions: Positions, number: int, kill: Kill) -> int:
        """Kill those of ``positions`` still owned by fragment ``number``."""
        if not len(positions):
            return 0
        owned = positions[self._owner.view()[positions] == number]
        kill(owned)
        return len(owned)

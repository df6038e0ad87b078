"""The write log: every live item the learner holds, so removal and rebuild are exact.

A write is recorded as (item id, cue vector, target, weight, log time). The log keeps only
surviving items: a removed or superseded item's row is zeroed at once (forgetting is erasure, so
no readable copy of its cue or target stays behind) and dropped at the next ``compact()``.

Storage is columnar, one chunk per written batch, so a batch of thousands of writes costs one
copy and one dict update rather than thousands of Python objects.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from memstack.operators.consolidation.errors import DuplicateItemError, ShapeError


@dataclass(frozen=True)
class WriteBatch:
    """Items to write (or as read back from the log), row-aligned.

    ``cues`` ``[B, dim_in]`` and ``targets`` ``[B, dim_out]`` are float32; ``weights`` and
    ``log_times`` (seconds since the Unix epoch, from the log) are float64 ``[B]``.
    """

    item_ids: tuple[str, ...]
    cues: torch.Tensor
    targets: torch.Tensor
    weights: torch.Tensor
    log_times: torch.Tensor

    def __post_init__(self) -> None:
        n = len(self.item_ids)
        ranks = [t.ndim for t in self._tensors()]
        if any(tuple(t.shape[:1]) != (n,) for t in self._tensors()) or ranks != [2, 2, 1, 1]:
            raise ShapeError(
                f"a WriteBatch of {n} ids needs cues [n, d], targets [n, d'], weights [n], "
                f"log_times [n]; got {[tuple(t.shape) for t in self._tensors()]}"
            )
        if len(set(self.item_ids)) != n:
            raise DuplicateItemError("item ids repeat inside one batch: write each id once")

    def _tensors(self) -> tuple[torch.Tensor, ...]:
        return (self.cues, self.targets, self.weights, self.log_times)

    def __len__(self) -> int:
        return len(self.item_ids)

    @classmethod
    def of(
        cls,
        item_ids: Sequence[str],
        cues: torch.Tensor,
        targets: torch.Tensor,
        log_times: torch.Tensor | Sequence[float] | float,
        weights: torch.Tensor | Sequence[float] | float = 1.0,
    ) -> WriteBatch:
        """Build a batch, broadcasting a scalar weight or log time and fixing dtypes.

        Weights and log times stay on the CPU (they are tiny): reading the batch's latest log
        time then never waits for the accelerator, so writes queue without a sync.
        """
        n = len(item_ids)

        def column(value: torch.Tensor | Sequence[float] | float) -> torch.Tensor:
            t = torch.as_tensor(value, dtype=torch.float64, device="cpu")
            return t.expand(n).clone() if t.ndim == 0 else t.to("cpu", torch.float64)

        return cls(
            tuple(item_ids),
            cues.to(torch.float32),
            targets.to(cues.device, torch.float32),
            column(weights),
            column(log_times),
        )

    def to(self, device: str | torch.device) -> WriteBatch:
        """The same batch with its tensors on ``device`` (copies, never views of the input)."""
        t = [x.to(device, copy=True) for x in self._tensors()]
        return WriteBatch(self.item_ids, t[0], t[1], t[2], t[3])

    @classmethod
    def empty(cls, dim_in: int, dim_out: int, device: str | torch.device = "cpu") -> WriteBatch:
        z64 = torch.zeros(0, dtype=torch.float64, device=device)
        return cls(
            (),
            torch.zeros(0, dim_in, device=device),
            torch.zeros(0, dim_out, device=device),
            z64,
            z64.clone(),
        )


class WriteLog:
    """Live items in write order, addressable by id."""

    def __init__(self, dim_in: int, dim_out: int, device: str | torch.device = "cpu") -> None:
        self.dim_in = dim_in
        self.dim_out = dim_out
        self.device = torch.device(device)
        self._chunks: list[WriteBatch] = []
        self._alive: list[torch.Tensor] = []
        self._index: dict[str, tuple[int, int]] = {}

    def __len__(self) -> int:
        return len(self._index)

    def __contains__(self, item_id: object) -> bool:
        return item_id in self._index

    def check_new(self, item_ids: Sequence[str]) -> None:
        """Raise if any id is already live (before anything is mutated)."""
        if self._index.keys().isdisjoint(item_ids):
            return
        clash = [i for i in item_ids if i in self._index]
        if clash:
            raise DuplicateItemError(
                f"{len(clash)} item id(s) already live (first: {clash[0]!r}); use supersede() "
                "to replace a fact or remove() it first"
            )

    def append(self, batch: WriteBatch, *, checked: bool = False) -> None:
        """Record a batch (copied onto the log's device; the caller's tensors are untouched).

        ``checked=True`` skips the duplicate check when the caller has just run ``check_new``.
        """
        if not checked:
            self.check_new(batch.item_ids)
        chunk_no = len(self._chunks)
        self._chunks.append(batch.to(self.device))
        self._alive.append(torch.ones(len(batch), dtype=torch.bool))
        rows = zip(itertools.repeat(chunk_no), range(len(batch)))
        self._index.update(zip(batch.item_ids, rows, strict=True))

    def take(self, item_ids: Sequence[str]) -> tuple[WriteBatch, tuple[str, ...]]:
        """Remove these ids: return their records and the ids that were not live.

        The rows are erased (zeroed) in the log at once; the returned batch is the only copy.
        """
        found = [(i, self._index.pop(i)) for i in dict.fromkeys(item_ids) if i in self._index]
        missing = tuple(i for i in item_ids if i not in {f[0] for f in found})
        if not found:
            return WriteBatch.empty(self.dim_in, self.dim_out, self.device), missing
        cols: list[list[torch.Tensor]] = [[], [], [], []]
        for _, (chunk_no, row) in found:
            chunk = self._chunks[chunk_no]
            for col, t in zip(cols, chunk._tensors(), strict=True):
                col.append(t[row].clone())
            chunk.cues[row].zero_()
            chunk.targets[row].zero_()
            self._alive[chunk_no][row] = False
        stacked = [torch.stack(c) for c in cols]
        taken = WriteBatch(tuple(f[0] for f in found), *stacked)
        return taken, missing

    def live(self) -> WriteBatch:
        """All surviving items, in write order, as one batch (a copy)."""
        ids: list[str] = []
        cols: list[list[torch.Tensor]] = [[], [], [], []]
        for chunk, alive in zip(self._chunks, self._alive, strict=True):
            if not bool(alive.any()):
                continue
            mask = alive.to(self.device)
            ids.extend(i for i, keep in zip(chunk.item_ids, alive.tolist(), strict=True) if keep)
            for col, t in zip(cols, chunk._tensors(), strict=True):
                col.append(t[mask])
        if not ids:
            return WriteBatch.empty(self.dim_in, self.dim_out, self.device)
        return WriteBatch(tuple(ids), *(torch.cat(c) for c in cols))

    def compact(self) -> None:
        """Drop erased rows: the log becomes one chunk of the live items."""
        live = self.live()
        self._chunks, self._alive, self._index = [], [], {}
        if len(live):
            self.append(live)

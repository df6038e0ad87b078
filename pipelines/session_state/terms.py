"""What a session state's items become: their embeddings, the sums' terms, the ring's codes.

An item's embeddings are its stored vector when the stores kept it (the forget path), else the
commit path's vectors by text, else the encoder's. The sums take projected unit keys and values
(:class:`~memstack.operators.session_state.arena.Terms`, weight 1); the code ring takes the
turns' sign codes and text lengths (:mod:`memstack.operators.session_state.codes`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt
import torch

from memstack.operators.session_state import StateConfig, _projection, codes
from memstack.operators.session_state.arena import StateArena, Terms
from memstack.operators.session_state.codes import RingConfig
from memstack.operators.session_state.keys import EMBED_DIM, Head, project
from memstack.pipelines.embedding import Encoder
from memstack.pipelines.session_state.items import StateItem

Vectors = Mapping[str, npt.NDArray[np.float32]]
"""Embeddings by text (a plan's :attr:`~memstack.pipelines.contracts.Plan.vectors`)."""


class ItemTerms:
    """Turns items into what the sums (``config``) and the code ring (``ring``) add."""

    def __init__(self, encoder: Encoder, config: StateConfig, ring: RingConfig | None) -> None:
        self.encoder, self.config, self.ring = encoder, config, ring
        self._proj = _projection(config.seed, config.dim, config.torch_dtype)

    def embedded(self, items: Sequence[StateItem],
                 known: Vectors | None = None) -> npt.NDArray[np.float64]:
        """Key then value embeddings (2m, 384): stored vectors where given, then ``known``
        vectors by text (the commit path's), else encoded."""
        m = len(items)
        out = np.empty((2 * m, EMBED_DIM), dtype=np.float64)
        todo = [n for n, item in enumerate(items) if item.vector is None]
        for n, item in enumerate(items):
            if item.vector is not None:
                out[n] = out[m + n] = item.vector
        if todo:
            texts = ([items[n].texts.key_text for n in todo]
                     + [items[n].texts.value_text for n in todo])
            encoded = self._encode(texts, known or {})
            out[todo] = encoded[:len(todo)]
            out[[m + n for n in todo]] = encoded[len(todo):]
        return out

    def _encode(self, texts: list[str], known: Vectors) -> npt.NDArray[np.float64]:
        """``texts``' embeddings: ``known`` ones as given, the others through the encoder."""
        missing = [t for t in texts if t not in known]
        if len(missing) == len(texts):
            return np.asarray(self.encoder.encode(texts), dtype=np.float64)
        found = dict(known)
        if missing:
            found.update(zip(missing, self.encoder.encode(missing), strict=True))
        return np.stack([np.asarray(found[t], dtype=np.float64) for t in texts])

    def terms(self, slots: Sequence[int], items: Sequence[StateItem],
              embedded: npt.NDArray[np.float64]) -> Terms:
        """The items' terms for the sums: projected unit keys/values, weight 1."""
        vectors = torch.from_numpy(embedded)
        n = len(items)
        return Terms(torch.tensor(list(slots), dtype=torch.int64),
                     torch.tensor([int(i.texts.head) for i in items], dtype=torch.int64),
                     project(vectors[:n], self._proj), project(vectors[n:], self._proj),
                     torch.tensor([i.log_time for i in items], dtype=torch.float64),
                     torch.ones(n, dtype=torch.float64))

    def turn_codes(self, items: Sequence[StateItem], embedded: npt.NDArray[np.float64]
                   ) -> tuple[list[int], codes.U8, codes.I64]:
        """Rows of ``items`` that are turns, their ring codes (from the key embeddings) and
        their text lengths."""
        rows = [n for n, item in enumerate(items) if item.texts.head == Head.TURNS]
        if self.ring is None or not rows:
            width = 0 if self.ring is None else self.ring.code_bytes
            return [], np.zeros((0, width), dtype=np.uint8), np.zeros(0, dtype=np.int64)
        return (rows, codes.encode(self.ring, embedded[rows]),
                codes.lengths_of([items[n].texts.key_text for n in rows]))

    def add_codes(self, arena: StateArena, slots: Sequence[int], items: Sequence[StateItem],
                  embedded: npt.NDArray[np.float64]) -> None:
        """Add the turns among ``items`` to the rings of their ``slots``."""
        rows, table, lengths = self.turn_codes(items, embedded)
        by_slot: dict[int, list[int]] = {}
        for at, n in enumerate(rows):
            by_slot.setdefault(slots[n], []).append(at)
        for slot, ats in by_slot.items():
            arena.add_codes(slot, [items[rows[a]].offset for a in ats], table[ats], lengths[ats])

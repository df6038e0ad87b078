"""What the session state stores for each event kind, and the fixed map from embeddings to keys.

Two heads per session, one per kind of association (see docs/session-state.md):

- ``Head.FACTS``: ``fact_asserted`` events. key = embed("subject relation"), value = embed(object):
  a hetero-association, so a question about a subject's relation reads back the object.
- ``Head.TURNS``: messages, notes, observations, tool calls and results. key = value =
  embed(text): an auto-association, so a query reads back the stored turns nearest to it.

Facts get their own head so that chatter, which outnumbers facts many times, does not use up the
capacity that fact recall needs (measured in the bench: ``memstack bench state``).

Embeddings (384-dim, MiniLM) are mapped to ``dim`` by a fixed, seeded random projection with
orthonormal rows, then renormalised. The map depends only on ``(seed, in_dim, dim)``, so the key
of any stored event can be recomputed from the stores at removal time.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

import torch

from memstack.schemas.events import TEXT_KINDS, Event, EventKind, FactAssertedPayload

EMBED_DIM = 384
"""Width of the embeddings the projection accepts (all-MiniLM-L6-v2)."""


class Head(IntEnum):
    """Which memory of a session an item lives in."""

    FACTS = 0
    TURNS = 1


N_HEADS = len(Head)


@dataclass(frozen=True)
class ItemTexts:
    """The texts whose embeddings become an item's key and value, and its head."""

    key_text: str
    value_text: str
    head: Head


def item_texts(event: Event) -> ItemTexts | None:
    """The key/value texts of ``event``, or None for kinds the state does not store.

    ``fact_retracted`` and ``forget_requested`` return None: they become removals, not items.
    """
    if event.kind == EventKind.FACT_ASSERTED:
        payload = event.payload
        assert isinstance(payload, FactAssertedPayload)  # guaranteed by the envelope's kind rule
        return fact_texts(event.subject or "", payload.relation, payload.object)
    if event.kind in TEXT_KINDS:
        return turn_texts(event.text())
    return None


def fact_texts(subject: str, relation: str, obj: str) -> ItemTexts:
    """The item of an asserted fact (also rebuilt from a stored fact entry at forget time)."""
    return ItemTexts(fact_query_text(subject, relation), obj, Head.FACTS)


def turn_texts(text: str | None) -> ItemTexts | None:
    """The item of a turn with ``text`` (a record's ``text`` column), None when it has none."""
    return ItemTexts(text, text, Head.TURNS) if text else None


def fact_query_text(subject: str, relation: str) -> str:
    """The key text of a question about ``subject``'s ``relation`` (same form as the fact key)."""
    return f"{subject} {relation}"


def projection(seed: int, dim: int, in_dim: int = EMBED_DIM) -> torch.Tensor:
    """The fixed ``(in_dim, dim)`` projection with orthonormal columns for ``seed``.

    Generated on the CPU in float64 by a private generator, so it is the same on every machine.
    """
    if not 0 < dim <= in_dim:
        raise ValueError(f"dim must be in 1..{in_dim}, got {dim}")
    gen = torch.Generator().manual_seed(seed)
    gauss = torch.randn(in_dim, dim, generator=gen, dtype=torch.float64)
    q, r = torch.linalg.qr(gauss)
    signed: torch.Tensor = q * torch.sign(torch.diagonal(r))  # unique QR: fixes column signs
    return signed


def project(vectors: torch.Tensor, proj: torch.Tensor) -> torch.Tensor:
    """Map ``(..., in_dim)`` embeddings to unit ``(..., dim)`` keys/values in ``proj``'s dtype."""
    out = vectors.to(proj.dtype) @ proj
    unit: torch.Tensor = out / out.norm(dim=-1, keepdim=True).clamp_min(1e-12)
    return unit

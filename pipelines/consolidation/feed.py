"""The consolidation feed: fact-version mutations in, learner write/removal items out (pure).

A fact version that is **current and open-ended** (``tt_to`` and ``vt_to`` both None: what the
fact says from now on) becomes a write item: item id = the version id (deterministic, so a
replay or a backfill gives the same ids), cue = ``"subject relation"``, lineage = its source
event id. A version that stops being current (re-put with ``tt_to``: superseded, retracted, or
re-cut) or is deleted (out-of-order recompute, forget) becomes a removal item. Versions with a
bounded valid time are history and are never written, so they need no removal either.

A :class:`DeleteFactVersion` names only a version id: its removal item has no shard and is
*broadcast* (to every feed partition; the learner holding the id removes it, the others ignore
it). Items are routed by shard: the tenant, or ``tenant#k`` with ``k = hash(subject) % n`` for
tenants configured as large (:class:`Sharding`).

On the wire (:class:`FeedRecord`) an item carries ids, log time and the distilled vectors, and
no text: the texts stay in the stores, where forgetting erases them.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal

import numpy as np
import numpy.typing as npt

from memstack.foundation.errors import ConfigError
from memstack.operators.consolidation import FactCue
from memstack.operators.mutations import DeleteFactVersion, FactVersion, Mutation, PutFactVersion

FeedOp = Literal["write", "remove"]
Vector = npt.NDArray[np.float32]
WIRE_VERSION = 1
BROADCAST = ""
"""The shard of a removal known only by its item id: every learner checks it."""


@dataclass(frozen=True)
class Sharding:
    """Which tenants are split into ``n`` learners by subject hash (the rest: one per tenant)."""

    big: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self) -> None:
        bad = {t: n for t, n in self.big.items() if n < 1}
        if bad:
            raise ConfigError(f"shard counts must be >= 1, got {bad}")

    @classmethod
    def parse(cls, text: str | None) -> Sharding:
        """``"acme=4,globex=2"`` (MEMSTACK_CONSOLIDATION_BIG_TENANTS) -> a sharding."""
        big: dict[str, int] = {}
        for part in (text or "").split(","):
            if not part.strip():
                continue
            tenant, _, count = part.partition("=")
            if not tenant.strip() or not count.strip().isdigit():
                raise ConfigError(f"big tenant {part!r}: write tenant=shards, like acme=4")
            big[tenant.strip()] = int(count)
        return cls(MappingProxyType(big))

    @classmethod
    def from_env(cls) -> Sharding:
        """From ``MEMSTACK_CONSOLIDATION_BIG_TENANTS`` (the producer and readers must agree)."""
        import os

        return cls.parse(os.environ.get("MEMSTACK_CONSOLIDATION_BIG_TENANTS"))

    def shard_of(self, tenant: str, subject: str) -> str:
        """``tenant``, or ``tenant#k`` with ``k = hash(tenant, subject) % n`` for a big tenant."""
        n = self.big.get(tenant)
        if not n or n == 1:
            return tenant
        digest = hashlib.blake2b(f"{tenant}\x1f{subject}".encode(), digest_size=8).digest()
        return f"{tenant}#{int.from_bytes(digest, 'big') % n}"


def partition_of(shard: str, partitions: int) -> int:
    """The feed partition of a shard's records (Kafka's default partitioner: murmur2 of the key)."""
    from kafka.partitioner.default import murmur2

    hashed: int = murmur2(shard.encode())
    return (hashed & 0x7FFFFFFF) % partitions


@dataclass(frozen=True)
class FeedItem:
    """One learner mutation derived from a fact version (texts kept for distillation only)."""

    op: FeedOp
    item_id: str
    tenant: str | None
    shard: str
    log_time: float
    source_event_id: str | None = None
    subject: str | None = None
    relation: str | None = None
    object: str | None = None

    @property
    def cue(self) -> FactCue:
        if self.subject is None or self.relation is None:
            raise ValueError(f"feed item {self.item_id} ({self.op}) has no cue")
        return FactCue(self.subject, self.relation)


def _seconds(version: FactVersion, *, closed: bool) -> float:
    at = version.tt_to if closed and version.tt_to is not None else version.tt_from
    return at.timestamp()


def feed_items(mutations: Sequence[Mutation], sharding: Sharding | None = None) -> list[FeedItem]:
    """The feed items of one batch of mutations: removals first, then writes.

    The last mutation of a version id in the batch decides (as the stores apply them).
    """
    sharding = sharding or Sharding()
    final: dict[str, FactVersion | None] = {}
    for m in mutations:
        if isinstance(m, PutFactVersion):
            final[m.row.version_id] = m.row
        elif isinstance(m, DeleteFactVersion):
            final[m.version_id] = None
    times = [v.tt_to.timestamp() if v.tt_to else v.tt_from.timestamp()
             for v in final.values() if v is not None]
    batch_time = max(times, default=0.0)
    removals: list[FeedItem] = []
    writes: list[FeedItem] = []
    for vid, v in final.items():
        if v is None:
            removals.append(FeedItem("remove", vid, None, BROADCAST, batch_time))
        elif v.vt_to is not None:
            continue  # bounded validity: history, never written
        elif v.tt_to is not None:
            shard = sharding.shard_of(v.tenant, v.subject)
            removals.append(FeedItem("remove", vid, v.tenant, shard, _seconds(v, closed=True),
                                     v.source_event_id))
        else:
            writes.append(write_item(v, sharding))
    return removals + writes


def write_item(version: FactVersion, sharding: Sharding) -> FeedItem:
    """The write item of a current, open-ended version."""
    return FeedItem("write", version.version_id, version.tenant,
                    sharding.shard_of(version.tenant, version.subject),
                    _seconds(version, closed=False), version.source_event_id,
                    version.subject, version.relation, version.object)


def _b64(vector: Vector) -> str:
    return base64.b64encode(np.ascontiguousarray(vector, dtype="<f4").tobytes()).decode()


def _vec(text: str) -> Vector:
    out: Vector = np.frombuffer(base64.b64decode(text), dtype="<f4").astype(np.float32)
    return out


@dataclass(frozen=True)
class FeedRecord:
    """An item as the feed topic holds it: ids, log time, and (writes) cue and target vectors."""

    op: FeedOp
    item_id: str
    shard: str
    log_time: float
    source_event_id: str | None = None
    cue: Vector | None = field(default=None, compare=False)
    target: Vector | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.op == "write" and (self.cue is None or self.target is None):
            raise ValueError(f"write record {self.item_id} needs a cue and a target vector")

    @classmethod
    def removal(cls, item: FeedItem) -> FeedRecord:
        return cls("remove", item.item_id, item.shard, item.log_time, item.source_event_id)

    @property
    def key(self) -> bytes | None:
        """The Kafka key: the shard (None for a broadcast, sent to every partition)."""
        return self.shard.encode() if self.shard != BROADCAST else None

    def to_bytes(self) -> bytes:
        body: dict[str, object] = {"v": WIRE_VERSION, "op": self.op, "id": self.item_id,
                                   "shard": self.shard, "t": self.log_time,
                                   "src": self.source_event_id}
        if self.cue is not None and self.target is not None:
            body["cue"], body["target"] = _b64(self.cue), _b64(self.target)
        return json.dumps(body, separators=(",", ":")).encode()

    @classmethod
    def from_bytes(cls, raw: bytes) -> FeedRecord:
        try:
            body = json.loads(raw)
            if body.get("v") != WIRE_VERSION:
                raise ValueError(f"feed wire version {body.get('v')!r}, expected {WIRE_VERSION}")
            cue = _vec(body["cue"]) if "cue" in body else None
            target = _vec(body["target"]) if "target" in body else None
            return cls(body["op"], body["id"], body["shard"], float(body["t"]), body.get("src"),
                       cue, target)
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"not a consolidation feed record: {exc}") from exc

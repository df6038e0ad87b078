"""Finding the owner of every partition and asking it, in parallel.

The workers are found through their cards (``<root>/workers/*.json``) or a list of URLs; each
is asked which partitions it owns (``GET /shard/status``). A partition of the events topic
that no worker reports, or whose owner refuses the read (409: it lost the partition in a
rebalance) or does not answer, is *missing*; a shard still replaying the log up to where it
was when it opened is *catching up*. Answers carry both, so no answer is silently partial.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import httpx

from memstack.foundation.errors import MemstackError
from memstack.foundation.log_coordinates import Position

log = logging.getLogger(__name__)

Discover = Callable[[], Sequence[str]]
"""The URLs of the workers' shard APIs now."""


class ShardsBehindError(MemstackError):
    """The shards did not apply a position in time; ``behind`` says by how much."""

    def __init__(self, message: str, behind: dict[str, int], missing: list[int]) -> None:
        super().__init__(message)
        self.behind = behind
        self.missing = missing


@dataclass(frozen=True)
class Coverage:
    """Who owns which partition now, and how far each shard has applied the log."""

    partitions: tuple[int, ...]
    owners: Mapping[int, str]
    applied: Mapping[int, int]
    catching_up: frozenset[int]

    @property
    def missing(self) -> frozenset[int]:
        return frozenset(p for p in self.partitions if p not in self.owners)

    def behind(self, wanted: Position) -> dict[str, int]:
        return {f"e{p}": off - self.applied.get(p, 0) for p, off in wanted.events.items()
                if p not in self.owners or self.applied.get(p, 0) < off}


@dataclass
class Gathered:
    """One read's answers per partition, and the partitions it could not cover."""

    results: dict[int, Any] = field(default_factory=dict)
    missing: set[int] = field(default_factory=set)
    catching_up: set[int] = field(default_factory=set)


class Fanout:
    """Asks the owners of all ``partitions`` (thread-safe)."""

    def __init__(self, discover: Discover, partitions: Sequence[int], *,
                 timeout_s: float = 30.0, status_timeout_s: float = 3.0) -> None:
        self._discover = discover
        self.partitions = tuple(sorted(partitions))
        self._http = httpx.Client(timeout=timeout_s)
        self._status_timeout = status_timeout_s
        self._pool = ThreadPoolExecutor(16, thread_name_prefix="memstack-fanout")

    def coverage(self) -> Coverage:
        owners: dict[int, str] = {}
        applied: dict[int, int] = {}
        catching: set[int] = set()
        for url, status in zip(*self._statuses(), strict=True):
            if status is None:
                continue
            for key, offset in status["partitions"].items():
                owners[int(key)] = url
                applied[int(key)] = int(offset)
            catching.update(int(p) for p in status["catching_up"])
        return Coverage(self.partitions, owners, applied, frozenset(catching))

    def _statuses(self) -> tuple[list[str], list[dict[str, Any] | None]]:
        urls = list(self._discover())
        return urls, list(self._pool.map(self._status, urls))

    def _status(self, url: str) -> dict[str, Any] | None:
        try:
            answer = self._http.get(f"{url}/shard/status", timeout=self._status_timeout)
            answer.raise_for_status()
            found: dict[str, Any] = answer.json()
            return found
        except (httpx.HTTPError, ValueError) as exc:
            log.info("worker %s did not answer its status: %s", url, exc)
            return None

    def wait(self, wanted: Position, timeout_s: float) -> Coverage:
        """The coverage once every partition ``wanted`` names is owned and applied up to it."""
        if wanted.forgets:
            raise ShardsBehindError("a sharded deployment does not apply forget requests yet "
                                    "(docs/scaling.md); wait on an events position only", {}, [])
        deadline = time.monotonic() + timeout_s
        while True:
            coverage = self.coverage()
            behind = coverage.behind(wanted)
            if not behind:
                return coverage
            if time.monotonic() > deadline:
                raise ShardsBehindError(
                    f"the shards did not apply {wanted.token} within {timeout_s:.0f} s",
                    behind, sorted(coverage.missing & set(wanted.events)))
            time.sleep(0.1)

    def gather(self, read: str, body: Mapping[str, Any],
               coverage: Coverage | None = None) -> Gathered:
        """Run ``read`` on every partition's shard; what cannot be read is reported missing."""
        coverage = coverage or self.coverage()
        out = Gathered(missing=set(coverage.missing), catching_up=set(coverage.catching_up))
        owned = sorted(coverage.owners.items())
        answers = self._pool.map(lambda item: self.read(item[1], item[0], read, body), owned)
        for (partition, _), answer in zip(owned, answers, strict=True):
            if answer is None:
                out.missing.add(partition)
            else:
                out.results[partition] = answer
        return out

    def read(self, url: str, partition: int, read: str, body: Mapping[str, Any]) -> Any:
        """``read`` on ``partition``'s shard at ``url``; None when it cannot answer."""
        try:
            answer = self._http.post(f"{url}/shard/{partition}/{read}", json=dict(body))
        except httpx.HTTPError as exc:
            log.info("shard p%d at %s did not answer %s: %s", partition, url, read, exc)
            return None
        if answer.status_code == 409:  # the owner lost the partition since the status
            return None
        if answer.status_code == 422:
            from memstack.view.errors import InvalidQueryError

            raise InvalidQueryError(str(answer.json().get("detail")))
        answer.raise_for_status()
        return answer.json()["result"]

    def close(self) -> None:
        self._http.close()
        self._pool.shutdown(wait=False)

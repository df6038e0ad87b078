"""``memstack reindex --model NAME``: re-embed every memory with another encoder, then switch.

1. **Replay** the log into new stores (``$MEMSTACK_HOME/stores/<model>-<time>`` or
   ``--into``) with ``MEMSTACK_ENCODER=NAME`` (PyFlink, progress and ETA on stderr); the forget
   ledger is honoured and the requests it held are recorded as applied in the new stores.
2. **Verify and switch.** With a service running (``service.json``): point
   ``stores/current`` at the new stores and wait for the service to adopt them - it catches them
   up to its own offsets, applies forgets logged since, compares everything but the vectors with
   its live stores, and swaps under its stores gate (no query fails; docs/replay.md) - or to
   refuse them. Without a service: the replay stops at the live stores' offsets, forgets logged
   since are applied, the two are compared the same way, then the pointer moves; the next
   ``memstack serve`` / ``run`` opens the new stores with their encoder.

The old stores stay where they are: switch back with ``memstack stores switch OLD``, or remove
them with ``rm -r OLD`` once the new ones served well.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memstack.foundation.errors import ConfigError, MemstackError
from memstack.foundation.settings import Settings

if TYPE_CHECKING:
    from memstack.operators.forget import ForgetRequest
    from memstack.pipelines.embedding import Encoder
    from memstack.pipelines.replay.verify import Comparison

log = logging.getLogger(__name__)

WAIT_EVERY_S = 0.5


class ReindexError(MemstackError):
    """The reindex did not switch; the message says where things stand and what to do."""


@dataclass
class ReindexResult:
    model: str
    previous: str
    target: str
    status: str = "replayed"
    replay: dict[str, Any] = field(default_factory=dict)
    switch: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> str:
        return json.dumps({"model": self.model, "status": self.status, "target": self.target,
                           "previous": self.previous, "replay": self.replay,
                           "switch": self.switch,
                           "old_stores": f"kept at {self.previous}; `memstack stores switch "
                                         f"{self.previous}` goes back, `rm -r "
                                         f"{self.previous}` removes them"})


def apply_pending_forgets(settings: Settings, target: Path,
                          requests: list[ForgetRequest], encoder: Encoder | None) -> int:
    """Apply to ``target`` the requests its ``forget_applied.json`` does not list."""
    from memstack.foundation.keystore import FileKeyStore
    from memstack.pipelines.forgetting import ForgetProcessor, ForgetStores, KafkaLineage
    from memstack.pipelines.forgetting.processor import apply_pending

    keys = FileKeyStore(settings.keys_dir)
    with ForgetStores(target) as stores:
        processor = ForgetProcessor(
            stores, keys=keys, encoder=encoder, outcomes_dir=target / ".forget-outcomes",
            lineage=KafkaLineage(settings.bootstrap, settings.events_topic, keys))
        return len(apply_pending(processor, requests))


def _mark_applied(target: Path, request_ids: list[str]) -> None:
    from memstack.pipelines.forgetting.bundle import APPLIED_FILE

    path = target / APPLIED_FILE
    done = set(json.loads(path.read_text())) if path.exists() else set()
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(sorted(done | set(request_ids))))
    os.replace(tmp, path)


def _check_model(model: str, current: Path, target: Path) -> None:
    from memstack.pipelines.embedding import ENCODERS, kind_of, recorded_encoder

    if model not in ENCODERS:
        raise ConfigError(f"--model {model!r} is not one of {', '.join(ENCODERS)}")
    built = recorded_encoder(current)
    if built is not None and kind_of(built) == model:
        raise ConfigError(f"{current} is already embedded by {built!r}; nothing to reindex")
    if target.exists() and any(target.iterdir()):
        raise ConfigError(f"{target} is not empty; give a new directory with --into")


def main(model: str, *, into: Path | None = None, parallelism: int = 1,
         timeout_s: float = 600.0, settings: Settings | None = None) -> ReindexResult:
    from memstack.jobs.service.file import find_service
    from memstack.pipelines.embedding import ENCODER_ENV
    from memstack.pipelines.forgetting.ledger import ForgetLedger
    from memstack.pipelines.replay.switch import current_stores

    settings = settings or Settings.from_env()
    running = find_service(settings)
    current = Path(running["stores"]) if running else current_stores(settings)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    target = (into or settings.stores_dir / f"{model}-{stamp}").resolve()
    _check_model(model, current, target)
    result = ReindexResult(model, str(current), str(target))
    ledger = ForgetLedger.load(settings.bootstrap, settings.forget_topic)
    stop = "end" if running else _offsets_of(current, settings)
    os.environ[ENCODER_ENV] = model  # the replay's workers embed with the new encoder
    print(f"reindex: replaying {settings.events_topic} into {target} with {model} "
          f"(serving {current}{', service running' if running else ''})", file=sys.stderr)
    result.replay = _replay(target, stop, parallelism, settings)
    _mark_applied(target, [r.request_id for r in ledger.requests])
    if running:
        result.switch = _switch_running(settings, target, timeout_s)
    else:
        result.switch = _switch_offline(settings, current, target, model)
    result.status = str(result.switch.get("status"))
    if result.status != "switched":
        raise ReindexError(f"the switch to {target} was refused: {result.switch.get('reason')}; "
                           f"still serving {current}. {result.summary()}")
    return result


def _offsets_of(current: Path, settings: Settings) -> str:
    """The live stores' applied offsets as a replay stop point (``end`` when empty)."""
    from memstack.pipelines.stores.bundle import Stores
    from memstack.pipelines.stores.layout import DUCKDB_FILE

    if not (current / DUCKDB_FILE).exists():
        return "end"
    with Stores.open(current, read_only=True) as stores:
        applied = stores.events.applied_offsets(settings.events_topic)
    return ",".join(f"{p}:{o}" for p, o in sorted(applied.items())) or "end"


def _replay(target: Path, stop: str, parallelism: int, settings: Settings) -> dict[str, Any]:
    from memstack.jobs.replay import main as replay
    from memstack.jobs.replay import summary

    outcome: dict[str, Any] = json.loads(summary(replay(
        start="earliest", stop=stop, into=target, parallelism=parallelism, settings=settings)))
    return outcome


def _switch_running(settings: Settings, target: Path, timeout_s: float) -> dict[str, Any]:
    from memstack.jobs.service.file import service_file
    from memstack.pipelines.replay.switch import switch_stores

    switch_stores(settings, target)
    began = time.monotonic()
    last_note = began
    while time.monotonic() - began < timeout_s:
        try:
            info = json.loads(service_file(settings).read_text())
        except (OSError, ValueError):
            info = {}
        outcome = info.get("switch") or {}
        if outcome.get("target") == str(target) and outcome.get("status") != "later":
            return dict(outcome)
        if time.monotonic() - last_note >= 5.0:
            last_note = time.monotonic()
            print(f"reindex: waiting for the service to catch up, verify and adopt {target} "
                  f"({time.monotonic() - began:.0f}s)", file=sys.stderr, flush=True)
        time.sleep(WAIT_EVERY_S)
    raise ReindexError(f"the service did not adopt {target} within {timeout_s:.0f} s; the "
                       "pointer is set, so it may still do so (see its log), or switch back "
                       "with `memstack stores switch` to the previous stores")


def _switch_offline(settings: Settings, current: Path, target: Path,
                    model: str) -> dict[str, Any]:
    from memstack.pipelines.embedding import make_encoder
    from memstack.pipelines.forgetting.ledger import ForgetLedger
    from memstack.pipelines.replay.portable import compare_reindexed
    from memstack.pipelines.replay.switch import switch_stores
    from memstack.pipelines.stores.bundle import Stores

    began = time.monotonic()
    ledger = ForgetLedger.load(settings.bootstrap, settings.forget_topic)
    forgets = apply_pending_forgets(settings, target, ledger.requests, make_encoder(model))
    with Stores.open(current, read_only=True) as a, Stores.open(target, read_only=True) as b:
        comparison: Comparison = compare_reindexed(a, b)
    hashes = {"equal": comparison.equal, "differing": comparison.differing()}
    if not comparison.equal:
        return {"target": str(target), "status": "refused", "comparison": hashes,
                "reason": f"content differs in {', '.join(comparison.differing())}"}
    switch_stores(settings, target)
    return {"target": str(target), "status": "switched", "forgets_applied": forgets,
            "seconds": round(time.monotonic() - began, 2), "comparison": hashes}

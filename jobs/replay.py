"""The replay deployable: settings + spec + the PyFlink runtime, with terminal progress."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import TextIO

from memstack.foundation.settings import Settings
from memstack.pipelines.forgetting.ledger import ForgetLedger
from memstack.pipelines.replay.bounds import parse_point
from memstack.pipelines.replay.flink_env import WorkerMode
from memstack.pipelines.replay.job import OnProgress, ReplayResult, ReplaySpec, run_replay
from memstack.pipelines.replay.progress import ProgressTracker
from memstack.pipelines.replay.session_cluster import SessionCluster
from memstack.pipelines.replay.wiring import PrepareKey


def printer(stream: TextIO = sys.stderr) -> OnProgress:
    def show(tracker: ProgressTracker, now: float) -> None:
        for line in tracker.render(now):
            print(line, file=stream, flush=True)
    return show


def forget_pending(settings: Settings, into: Path,
                   ledger: ForgetLedger | None = None) -> list[str]:
    """Apply to the stores in ``into`` the forget requests of the ledger they have not applied.

    A replay honours the ledger only for the events it reads; stores caught up by a later
    replay kept every event forgotten since their first pass (found by ``memstack eval
    faults``: a killed-and-rerun replay directory still held forgotten sessions). Only these
    stores are touched (not the live session state, not the consolidated weights).
    """
    from memstack.foundation.keystore import FileKeyStore
    from memstack.pipelines.embedding import shared_encoder
    from memstack.pipelines.forgetting import ForgetProcessor, ForgetStores
    from memstack.pipelines.forgetting.lineage import KafkaLineage
    from memstack.pipelines.forgetting.processor import apply_pending
    from memstack.pipelines.stores.layout import DUCKDB_FILE

    if not (into / DUCKDB_FILE).exists():
        return []
    if ledger is None:
        ledger = ForgetLedger.load(settings.bootstrap, settings.forget_topic)
    done_before = _applied(into)
    if all(r.request_id in done_before for r in ledger.requests):
        return []  # nothing to forget: do not open the stores or load the model
    keys = FileKeyStore(settings.keys_dir)
    with ForgetStores(into) as stores:
        processor = ForgetProcessor(
            stores, keys=keys, lineage=KafkaLineage(settings.bootstrap, settings.events_topic,
                                                    keys), encoder=shared_encoder())
        done = [o.request.request_id for o in apply_pending(processor, ledger.requests)]
    if done:
        print(f"replay: applied {len(done)} forget request(s) to {into} first",
              file=sys.stderr, flush=True)
    return done


def _applied(into: Path) -> set[str]:
    from memstack.pipelines.forgetting.bundle import APPLIED_FILE

    path = into / APPLIED_FILE
    return set(json.loads(path.read_text())) if path.exists() else set()


def mark_applied(into: Path, request_ids: list[str]) -> None:
    """Record requests as applied to ``into``: those the replay honoured, read before it ran
    (a request logged during the replay is applied by the next one). Only the applied file is
    written: the replay's Python workers may still hold the DuckDB file for a moment."""
    from memstack.pipelines.forgetting.bundle import APPLIED_FILE

    path = into / APPLIED_FILE
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(sorted(_applied(into) | set(request_ids))))
    os.replace(tmp, path)


def main(*, start: str, stop: str, into: Path, parallelism: int = 1,
         worker_mode: WorkerMode = "process", send_dead_letters: bool = False,
         honour_forget: bool = True, embed_batch: int = 1024,
         prepare_key: PrepareKey = "record", flink: str | None = None,
         settings: Settings | None = None, on_progress: OnProgress | None = None,
         every_s: float = 2.0, session: SessionCluster | None = None) -> ReplayResult:
    """Apply the forget requests the stores in ``into`` have not applied, run the replay
    (progress to ``on_progress``, default: lines on stderr), then record the requests it
    honoured."""
    settings = settings or Settings.from_env()
    # read once: the requests applied to the stores first, the ones the replay honours, and
    # the ones recorded as applied after it are the same
    ledger = ForgetLedger.load(settings.bootstrap, settings.forget_topic) \
        if honour_forget else None
    honoured = [r.request_id for r in ledger.requests] if ledger is not None else []
    if ledger is not None:
        forget_pending(settings, into, ledger)
    spec = ReplaySpec(into=into.resolve(), start=parse_point(start), stop=parse_point(stop),
                      parallelism=parallelism, worker_mode=worker_mode,
                      send_dead_letters=send_dead_letters, honour_forget=honour_forget,
                      embed_batch=embed_batch, prepare_key=prepare_key, cluster=flink,
                      ledger=ledger, session=session)
    show = on_progress or printer()
    result = run_replay(spec, settings, show, every_s=every_s)
    if honoured:
        mark_applied(into, honoured)
    return result


def summary(result: ReplayResult) -> str:
    p = result.progress
    return json.dumps({
        "offsets": result.events, "applied": p.applied if p else 0,
        "forgotten": p.forgotten if p else 0, "dead_letters": p.dead_letters if p else 0,
        "positions": {str(k): v for k, v in (p.positions if p else result.bounds.stop).items()},
        "seconds": round(result.seconds, 2),
        "processing_events_per_s": round(p.applied / p.processing_s, 1)
        if p and p.processing_s > 0 else None,
        # wall clock (epoch s): processing began (first record read, models ready), last commit
        "first_at": round(p.first_at, 3) if p else None,
        "last_at": round(p.at, 3) if p else None,
    })

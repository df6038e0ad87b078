"""``memstack export``: one tenant's events from the log as JSON Lines, forgotten ones left out.

The log is read with manual assignment (no consumer group) up to its end offsets at start,
optionally between two log (transaction) times. Each record is validated; a sealed payload is
opened with the deployment's key store. An event is **not exported** when

- a forget request of the ledger (``<prefix>.forget``, read fully first) covers it: the same
  rule every replay applies (a request covers its scope's events logged no later than itself);
- its payload was crypto-shredded (its scope's data key destroyed): it cannot be opened;
- it is not the tenant's, is a forget request, or is not a valid event (the live worker sent
  it to the DLQ).

Events are written in log-time order (then partition, offset) in the documented event format
(``schemas/event.v1.json``): the original ``event_id``, ``occurred_at``, ``valid_from``,
``valid_to`` and provenance, payload in the clear. docs/export.md.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from memstack.foundation.settings import Settings
from memstack.jobs.progress_line import ProgressLine
from memstack.schemas.errors import InvalidEventError
from memstack.schemas.events import Envelope, Event, EventKind

if TYPE_CHECKING:
    from memstack.foundation.keystore import KeyStore
    from memstack.pipelines.forgetting.ledger import ForgetLedger
    from memstack.pipelines.log_reader import LogRecord

log = logging.getLogger(__name__)


@dataclass
class ExportResult:
    exported: int = 0
    skipped: Counter[str] = field(default_factory=Counter)
    """Why records were left out: ``forgotten``, ``shredded``, ``other_tenant``, ``invalid``,
    ``outside_window``, ``forget_request``."""
    offsets: int = 0

    def summary(self) -> str:
        return json.dumps({"exported": self.exported, "read": self.offsets,
                           "skipped": dict(sorted(self.skipped.items()))})


def tenant_events(settings: Settings, tenant: str, start: datetime | None = None,
                  stop: datetime | None = None, *,
                  progress: ProgressLine | None = None,
                  result: ExportResult | None = None) -> list[tuple[tuple[int, int, int], Event]]:
    """The tenant's exportable events with their log order key ``(millis, partition, offset)``."""
    from memstack.foundation.keystore import FileKeyStore
    from memstack.pipelines.forgetting.ledger import ForgetLedger
    from memstack.pipelines.log_reader import read_bounded
    from memstack.pipelines.replay.bounds import AtTime, Earliest, End, resolve

    result = result if result is not None else ExportResult()
    verdict = Verdict(tenant, start, stop,
                      ForgetLedger.load(settings.bootstrap, settings.forget_topic),
                      FileKeyStore(settings.keys_dir) if settings.keys_dir.exists() else None)
    bounds = resolve(settings.bootstrap, settings.events_topic,
                     AtTime(start) if start else Earliest(), AtTime(stop) if stop else End())
    if progress is not None:
        progress.total = bounds.total()
    out: list[tuple[tuple[int, int, int], Event]] = []
    for record in read_bounded(settings.bootstrap, settings.events_topic, bounds.start,
                               bounds.stop):
        result.offsets += 1
        if progress is not None:
            progress.update(result.offsets, f"exported {len(out)}")
        event, why = verdict.of(record)
        if event is None:
            result.skipped[why or "empty"] += 1
            continue
        pos = record.position
        out.append(((int(pos.log_time.timestamp() * 1000), pos.partition, pos.offset), event))
    out.sort(key=lambda item: item[0])
    result.exported = len(out)
    return out


@dataclass(frozen=True)
class Verdict:
    """Whether one record of the log is exported, and if not, why."""

    tenant: str
    start: datetime | None
    stop: datetime | None
    ledger: ForgetLedger
    keys: KeyStore | None

    def of(self, record: LogRecord) -> tuple[Event | None, str | None]:
        from memstack.foundation.sealing import Shredded, open_record

        if record.value is None:
            return None, "empty"
        try:
            opened = open_record(record.value, self.keys)
        except InvalidEventError:
            return None, "invalid"
        envelope: Envelope = opened.envelope if isinstance(opened, Shredded) else opened
        log_time = record.position.log_time
        if envelope.tenant != self.tenant:
            return None, "other_tenant"
        if envelope.kind is EventKind.FORGET_REQUESTED:
            return None, "forget_request"
        if (self.start and log_time < self.start) or (self.stop and log_time >= self.stop):
            return None, "outside_window"
        if isinstance(opened, Shredded):
            return None, "shredded"  # its data key was destroyed by a forget request
        if self.ledger.covers(opened, log_time):
            return None, "forgotten"
        return opened, None


def export(settings: Settings, tenant: str, out: TextIO, *, start: datetime | None = None,
           stop: datetime | None = None) -> ExportResult:
    """Write the tenant's exportable events to ``out`` (one JSON object per line)."""
    result = ExportResult()
    progress = ProgressLine(f"export {tenant}:", None, "offsets")
    events = tenant_events(settings, tenant, start, stop, progress=progress, result=result)
    for _, event in events:
        out.write(event.to_json().decode())
        out.write("\n")
    progress.update(result.offsets, f"exported {result.exported}; skipped "
                    f"{dict(result.skipped)}", force=True)
    return result


def main(tenant: str, output: Path | None, start: datetime | None, stop: datetime | None,
         settings: Settings | None = None) -> ExportResult:
    import sys

    from memstack.infra.preflight import require_topics

    settings = settings or Settings.from_env()
    require_topics(settings.bootstrap, [settings.events_topic, settings.forget_topic])
    if output is None:
        return export(settings, tenant, sys.stdout, start=start, stop=stop)
    tmp = output.with_name(f".{output.name}.partial")
    try:
        with tmp.open("w", encoding="utf-8") as fh:
            result = export(settings, tenant, fh, start=start, stop=stop)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    tmp.replace(output)  # a file appears only when complete
    return result

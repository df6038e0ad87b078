"""The forget audit: per store, everything of a forgotten scope a reader could still get.

Checks (each a :class:`Residual` kind): ``rows`` (by event id, every table), ``exact_text``
(the forgotten texts by value and by full-text search), ``near_duplicate`` (vector search with
the embedded texts above a similarity), ``as_of`` (queries at every known time the rows had),
``old_versions`` (LanceDB versions and tags), ``file_bytes`` (the raw files), ``log`` (payloads
in ``<prefix>.events`` still readable), plus whatever a further store (session state,
consolidated weights) reports through :class:`Forgettable.residuals`. Pass: zero residuals.

The texts are held only in memory, by the process that resolved the request: a later audit of
the same request has ids and the log to go on (content that is gone cannot be searched for).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field

from memstack.foundation.settings import SEALING_OFF
from memstack.operators.forget import ForgetRequest
from memstack.pipelines.forgetting.contract import AuditProbe, Forgettable, Residual
from memstack.pipelines.forgetting.lineage import LogEntry

log = logging.getLogger(__name__)

CHECKS = ("rows", "exact_text", "near_duplicate", "as_of", "old_versions", "file_bytes", "log")


@dataclass(frozen=True)
class AuditReport:
    request_id: str
    scope: str
    residuals: tuple[Residual, ...]
    stores: tuple[str, ...]
    notes: dict[str, int] = field(default_factory=dict)
    """Informational counts that are not residuals (e.g. ``log_ledger_only``)."""

    @property
    def passed(self) -> bool:
        return not any(r.count for r in self.residuals)

    def table(self) -> dict[str, dict[str, int]]:
        """Store -> check -> residual count (every check of every store, zeros included)."""
        out = {s: dict.fromkeys(CHECKS, 0) for s in self.stores}
        for r in self.residuals:
            out.setdefault(r.store, dict.fromkeys(CHECKS, 0))
            out[r.store][r.check] = out[r.store].get(r.check, 0) + r.count
        return out

    def to_json(self) -> str:
        return json.dumps({"request_id": self.request_id, "scope": self.scope,
                           "passed": self.passed, "table": self.table(), "notes": self.notes,
                           "residuals": [asdict(r) for r in self.residuals]}, indent=2)

    def render(self) -> str:
        table = self.table()
        width = max(len(s) for s in table) if table else 5
        lines = [f"forget audit {self.request_id} ({self.scope}): "
                 f"{'PASS' if self.passed else 'FAIL'}",
                 "store".ljust(width) + "  " + "  ".join(c.rjust(len(c)) for c in CHECKS)]
        for store, row in table.items():
            lines.append(store.ljust(width) + "  " + "  ".join(
                str(row.get(c, 0)).rjust(len(c)) for c in CHECKS))
        lines += [f"{k}: {v}" for k, v in sorted(self.notes.items())]
        lines += [f"  {r.store}/{r.check}: {r.count} ({r.detail})" for r in self.residuals]
        return "\n".join(lines)


def unsealed_detail(count: int) -> str:
    """The residual of payloads written in the clear (``MEMSTACK_SEAL=0``, or before sealing
    was on: a mixed log)."""
    return (f"{SEALING_OFF} for {count} payload(s) of the scope, written unsealed; no key "
            "destruction reaches them and only retention removes them from the events topic")


def log_residuals(request: ForgetRequest, entries: Iterable[LogEntry]) -> tuple[
    list[Residual], dict[str, int]
]:
    """Readable payloads of the scope in the log.

    Plain (unsealed) events are always residuals: only retention can remove them. Sealed ones
    must be shredded for session/subject/tenant scopes (their keys were destroyed); for event
    and fact scopes the key is shared with unforgotten events, so a readable payload there is
    reported as ``log_ledger_only``: every projector filters it, the bytes stay readable to a
    key holder until retention (docs/forget.md, limits).
    """
    plain = sealed = shredded = 0
    for entry in entries:
        if not request.covers(entry.subject, entry.position.log_time):
            continue
        plain += entry.state == "plain"
        sealed += entry.state == "sealed"
        shredded += entry.state == "shredded"
    residuals = []
    if plain:
        residuals.append(Residual("log", "log", plain, unsealed_detail(plain)))
    notes = {"log_shredded": shredded}
    if sealed and request.destroys_keys:
        residuals.append(Residual("log", "log", sealed, "sealed payloads whose key survived"))
    else:
        notes["log_ledger_only"] = sealed
    return residuals, notes


def audit(probe: AuditProbe, stores: Sequence[Forgettable],
          log_entries: Iterable[LogEntry] | None = None,
          audited: Sequence[tuple[str, Sequence[Residual]]] = ()) -> AuditReport:
    """``audited``: stores audited earlier, on another thread (name, residuals found); the
    live worker audits its session state right after the logical phase, on its store
    thread, where that state lives."""
    residuals: list[Residual] = [r for _, found in audited for r in found]
    names = [name for name, _ in audited]
    for store in stores:
        if store.name not in names:
            residuals += store.residuals(probe)
            names.append(store.name)
    notes: dict[str, int] = {"probe_texts": len(probe.texts),
                             "probe_vectors": 0 if probe.vectors is None else len(probe.vectors)}
    if log_entries is not None:
        found, log_notes = log_residuals(probe.request, log_entries)
        residuals += found
        notes |= log_notes
        names.append("log")
    report = AuditReport(probe.request.request_id, probe.request.describe(), tuple(residuals),
                         tuple(names), notes)
    log.info("audit %s: %s, %d residual kind(s)", report.request_id,
             "pass" if report.passed else "FAIL", len(residuals))
    return report

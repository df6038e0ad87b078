"""``memstack forget SCOPE ...``, ``memstack forget apply`` and ``memstack forget audit ID``."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

SCOPES = ("event", "session", "subject", "tenant", "fact")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("forget", help="forget a scope for good; apply and audit requests")
    actions = p.add_subparsers(dest="forget_command", metavar="SCOPE|apply|audit")
    actions.required = True
    for scope in SCOPES:
        a = actions.add_parser(scope, help=f"emit a request to forget a {scope}")
        if scope in ("event", "session", "subject"):
            kind = "uuid7 id" if scope == "event" else "name"
            a.add_argument("value", help=f"the {scope} ({kind})")
        if scope == "fact":
            a.add_argument("subject")
            a.add_argument("relation")
            a.add_argument("object", nargs="?", help="only this value (default: every value)")
        a.add_argument("--tenant", required=True)
        a.add_argument("--reason", default=None)
        a.set_defaults(func=_request, scope=scope)
    ap = actions.add_parser("apply", help="apply the ledger to offline stores, audit each")
    ap.add_argument("--stores", type=Path, default=None, help="stores dir (default: live)")
    ap.add_argument("--json", action="store_true")
    ap.set_defaults(func=_apply)
    au = actions.add_parser("audit", help="one request's phases (logged, invisible, erased, "
                                          "audited: when each was reached) and its per-store "
                                          "residuals now")
    au.add_argument("request_id")
    au.add_argument("--stores", type=Path, default=None, help="stores dir (default: live)")
    au.add_argument("--json", action="store_true")
    au.set_defaults(func=_audit)


def _scope(args: argparse.Namespace) -> dict[str, Any]:
    scope: dict[str, Any] = {"type": args.scope}
    if args.scope in ("event", "session", "subject"):
        scope["event_id" if args.scope == "event" else args.scope] = args.value
    if args.scope == "fact":
        scope |= {"subject": args.subject, "relation": args.relation, "object": args.object}
    return scope


def _request(args: argparse.Namespace) -> int:
    from memstack.foundation.settings import Settings
    from memstack.jobs.forget import request
    from memstack.schemas.events import ForgetScope

    settings = Settings.from_env()
    event = request(settings, args.tenant, ForgetScope.model_validate(_scope(args)), args.reason)
    print(event.event_id)
    if settings.sealing_warning is not None:  # what this forget cannot erase
        print(f"memstack: warning: {settings.sealing_warning}", file=sys.stderr)
    return 0


def _apply(args: argparse.Namespace) -> int:
    from memstack.foundation.settings import Settings
    from memstack.jobs.forget import apply

    outcomes = apply(Settings.from_env(), args.stores)
    for o in outcomes:
        print(json.dumps(o.summary(), default=str) if args.json else
              f"{o.request.request_id} {o.request.describe()}: {o.events} event(s), "
              f"audit {'PASS' if o.audit.passed else 'FAIL'}, {o.seconds['total']:.2f} s")
        if not args.json:  # what it could not erase, and why
            for r in o.audit.residuals:
                print(f"  {r.store}/{r.check}: {r.count} ({r.detail})")
    return 0 if all(o.audit.passed for o in outcomes) else 1


def _audit(args: argparse.Namespace) -> int:
    from memstack.foundation.settings import Settings
    from memstack.jobs.forget import audit
    from memstack.pipelines.forgetting.phases import Phases, read_status

    settings = Settings.from_env()
    report = audit(settings, args.request_id, args.stores)
    record = read_status(settings.home / "forget", args.request_id)
    phases = Phases.from_json(record) if record is not None else Phases()
    if args.json:
        print(json.dumps({**json.loads(report.to_json()), **phases.to_json()}))
    else:
        seconds = phases.seconds_since_logged()
        print(f"status {phases.current}: " + ", ".join(
            f"{p} {t.isoformat()}" + (f" (+{seconds[p]:.3f} s)" if p in seconds else "")
            for p, t in phases.times.items()))
        print(report.render())
    return 0 if report.passed else 1

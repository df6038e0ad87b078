"""``memstack ingest otel``: turn OpenTelemetry GenAI telemetry on Kafka into memory events."""

from __future__ import annotations

import argparse
import json


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("ingest", help="ingest memory from other systems' records")
    kinds = p.add_subparsers(dest="source", metavar="SOURCE")
    kinds.required = True
    otel = kinds.add_parser(
        "otel", help="OpenTelemetry GenAI spans/logs in OTLP JSON, as an OpenTelemetry "
                     "Collector's Kafka exporter writes them (docs/otel.md)")
    otel.add_argument("--topic", required=True,
                      help="the Collector's topic (created with a short retention if missing)")
    otel.add_argument("--tenant", default=None,
                      help="the tenant of every event (default: the resource attribute "
                           "memstack.tenant; records with neither go to the DLQ)")
    otel.add_argument("--group", default=None,
                      help="consumer group (default <prefix>-ingest-otel)")
    otel.add_argument("--until-caught-up", action="store_true",
                      help="exit once the end offsets seen at start are ingested; print a "
                           "JSON summary")
    otel.add_argument("--retention-ms", type=int, default=None,
                      help="retention of the topic when memstack creates it (default 1 h)")
    otel.set_defaults(func=_otel)


def _otel(args: argparse.Namespace) -> int:
    from memstack.foundation.settings import Settings
    from memstack.jobs.ingest_otel import DEFAULT_RETENTION_MS, IngestOptions, run_ingest

    options = IngestOptions(args.topic, tenant=args.tenant, group=args.group,
                            until_caught_up=args.until_caught_up,
                            retention_ms=args.retention_ms or DEFAULT_RETENTION_MS)
    stats = run_ingest(Settings.from_env(), options)
    if args.until_caught_up:
        print(json.dumps(stats.as_json(), sort_keys=True))
    return 0

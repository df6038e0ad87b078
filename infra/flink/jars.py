"""Flink's Kafka connector, resolved by Maven from ``infra/flink/pom.xml`` into memstack's cache.

PyFlink's wheels ship no Kafka connector; the replay job adds this jar through ``pipeline.jars``.
Resolution runs once, with the same stamp-and-lock scheme as Kafka's jars
(:mod:`memstack.infra.jars`): a folder per pom digest under the cache, whose stamp (the pom's
SHA-256) is written last.
"""

from __future__ import annotations

import logging
from pathlib import Path

from memstack.infra.errors import JarResolutionError
from memstack.infra.jars import STAMP_NAME, resolve_maven

log = logging.getLogger(__name__)

FLINK_DIR = Path(__file__).resolve().parent
"""``infra/flink`` (package data, read only): the pom."""

CONNECTOR_GLOB = "flink-sql-connector-kafka-*.jar"
_MVN_TIMEOUT_S = 600


def resolve_flink_jars(flink_dir: Path = FLINK_DIR, *, force: bool = False) -> Path:
    """Resolve the Kafka SQL connector into the cache; return the folder of its jars.

    Skips Maven when the stamp matches the pom (milliseconds). Needs ``mvn`` and Maven Central
    the first time only.
    """
    return resolve_maven(flink_dir, CONNECTOR_GLOB, "Flink's Kafka connector", force=force)


def connector_jars(flink_dir: Path = FLINK_DIR) -> list[Path]:
    """The jars the replay job adds to Flink's classpath (resolved first if needed)."""
    lib = resolve_flink_jars(flink_dir)
    jars = sorted(lib.glob("*.jar"))
    if not any(j.match(CONNECTOR_GLOB) for j in jars):
        raise JarResolutionError(
            f"no {CONNECTOR_GLOB} in {lib}; delete {lib / STAMP_NAME} and rerun to resolve again"
        )
    return jars


def pipeline_jars(flink_dir: Path = FLINK_DIR) -> str:
    """The ``pipeline.jars`` value: ``file://`` URLs separated by ``;``."""
    return ";".join(j.resolve().as_uri() for j in connector_jars(flink_dir))



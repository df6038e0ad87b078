"""Flink's Kafka connector, resolved by Maven from ``infra/flink/pom.xml`` into ``infra/flink/lib``.

PyFlink's wheels ship no Kafka connector; the replay job adds this jar through ``pipeline.jars``.
Resolution runs once, with the same stamp-and-lock scheme as Kafka's jars
(:mod:`memstack.infra.jars`): a stamp in ``lib/`` holds the pom's SHA-256 and is written last.
"""

from __future__ import annotations

import fcntl
import logging
import shutil
import subprocess
import time
from pathlib import Path

from memstack.infra.errors import JarResolutionError
from memstack.infra.jars import STAMP_NAME, is_resolved, pom_hash

log = logging.getLogger(__name__)

FLINK_DIR = Path(__file__).resolve().parent / "flink"
"""``infra/flink``: the pom and (after resolution) ``lib/``."""

CONNECTOR_GLOB = "flink-sql-connector-kafka-*.jar"
_MVN_TIMEOUT_S = 600


def resolve_flink_jars(flink_dir: Path = FLINK_DIR, *, force: bool = False) -> Path:
    """Fill ``flink_dir/lib`` with the Kafka SQL connector; return that folder.

    Skips Maven when the stamp matches the pom (milliseconds). Needs ``mvn`` and Maven Central
    the first time only.
    """
    lib = flink_dir / "lib"
    if not force and is_resolved(flink_dir):
        return lib
    lib.mkdir(parents=True, exist_ok=True)
    with (lib / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not force and is_resolved(flink_dir):
            return lib
        _run_maven(flink_dir, lib)
        (lib / STAMP_NAME).write_text(pom_hash(flink_dir) + "\n")
    return lib


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


def _run_maven(flink_dir: Path, lib: Path) -> None:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise JarResolutionError(
            "Maven (mvn) is not on PATH; it resolves Flink's Kafka connector once. "
            "Install it with `apt-get install -y maven`."
        )
    for old in lib.glob("*.jar"):  # a changed pom must not leave an old connector behind
        old.unlink()
    cmd = [mvn, "-q", "-B", "-f", str(flink_dir / "pom.xml"), "dependency:copy-dependencies",
           f"-DoutputDirectory={lib}"]
    log.info("resolving Flink's Kafka connector with Maven into %s", lib)
    started = time.monotonic()
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=_MVN_TIMEOUT_S,
                              check=False)
    except subprocess.TimeoutExpired as exc:
        raise JarResolutionError(
            f"Maven did not finish within {_MVN_TIMEOUT_S} s; check access to Maven Central "
            f"and rerun `{' '.join(cmd)}`"
        ) from exc
    if done.returncode != 0 or not any(lib.glob(CONNECTOR_GLOB)):
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-30:])
        raise JarResolutionError(
            f"Maven failed to resolve the Flink Kafka connector (exit {done.returncode}); rerun "
            f"`{' '.join(cmd)}` to see why. Output tail:\n{tail}"
        )
    log.info("resolved the Flink Kafka connector in %.1f s", time.monotonic() - started)

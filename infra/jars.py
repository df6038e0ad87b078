"""Apache Kafka's jars, resolved by Maven from ``infra/kafka/pom.xml`` into memstack's cache.

The jars land in ``jars/kafka-<pom digest>/lib/`` under :func:`memstack.infra.cache.cache_root`
(never inside the package, which is read-only at run time). Resolution runs once per pom: a
stamp file in that folder holds the pom's SHA-256, and a matching stamp means the folder is
complete (the stamp is written last). Concurrent callers serialise on a file lock. Maven runs
on a copy of the pom in the cache (its ``${project.basedir}/lib`` is then the cache's folder,
and whatever else Maven writes beside a pom stays there too).
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import shutil
import subprocess
import time
from pathlib import Path

from memstack.infra.cache import cache_root
from memstack.infra.errors import JarResolutionError, JavaNotFoundError

log = logging.getLogger(__name__)

KAFKA_DIR = Path(__file__).resolve().parent / "kafka"
"""``infra/kafka`` (package data, read only): the pom and the log4j2 configurations."""

STAMP_NAME = ".resolved"
_MVN_TIMEOUT_S = 600


def pom_hash(project_dir: Path = KAFKA_DIR) -> str:
    return hashlib.sha256((project_dir / "pom.xml").read_bytes()).hexdigest()


def lib_dir(project_dir: Path = KAFKA_DIR) -> Path:
    """Where the jars of ``project_dir/pom.xml`` are (or will be) kept: named by the pom's
    digest, so a changed pom resolves into a folder of its own."""
    return cache_root() / "jars" / f"{project_dir.name}-{pom_hash(project_dir)[:16]}" / "lib"


def is_resolved(project_dir: Path = KAFKA_DIR) -> bool:
    """True when the pom's folder was filled completely (its stamp matches the pom's hash)."""
    stamp = lib_dir(project_dir) / STAMP_NAME
    return stamp.is_file() and stamp.read_text().strip() == pom_hash(project_dir)


def resolve_jars(kafka_dir: Path = KAFKA_DIR, *, force: bool = False) -> Path:
    """Resolve Kafka's runtime classpath into the cache; return the folder of its jars.

    Skips Maven when the stamp matches the pom (a few milliseconds). Needs ``mvn`` and Maven
    Central the first time only.
    """
    return resolve_maven(kafka_dir, "kafka_2.13-*.jar", "Kafka's jars", force=force)


def resolve_maven(project_dir: Path, marker_glob: str, what: str, *,
                  force: bool = False) -> Path:
    """Copy the runtime dependencies of ``project_dir/pom.xml`` into :func:`lib_dir`.

    Runs once per pom: a stamp with the pom's hash is written last, and concurrent callers
    serialise on a file lock. ``marker_glob`` names a jar that must be there afterwards.
    """
    lib = lib_dir(project_dir)
    if not force and is_resolved(project_dir):
        return lib
    lib.mkdir(parents=True, exist_ok=True)
    with (lib / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not force and is_resolved(project_dir):  # another process resolved while we waited
            return lib
        _run_maven(project_dir, lib, marker_glob, what)
        (lib / STAMP_NAME).write_text(pom_hash(project_dir) + "\n")
    return lib


def _run_maven(project_dir: Path, lib: Path, marker_glob: str, what: str) -> None:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise JarResolutionError(
            f"Maven (mvn) is not on PATH; it resolves {what} once. "
            "Install it with `apt-get install -y maven`."
        )
    for old in lib.glob("*.jar"):  # a half-finished earlier attempt leaves nothing behind
        old.unlink()
    pom = lib.parent / "pom.xml"  # the pom's basedir is then the cache's folder
    shutil.copyfile(project_dir / "pom.xml", pom)
    cmd = [mvn, "-q", "-B", "-f", str(pom), "dependency:copy-dependencies",
           f"-DoutputDirectory={lib}"]
    log.info("resolving %s with Maven into %s", what, lib)
    started = time.monotonic()
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=_MVN_TIMEOUT_S,
                              check=False)
    except subprocess.TimeoutExpired as exc:
        raise JarResolutionError(
            f"Maven did not finish within {_MVN_TIMEOUT_S} s; check access to Maven Central "
            f"and rerun `{' '.join(cmd)}`"
        ) from exc
    if done.returncode != 0 or not any(lib.glob(marker_glob)):
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-30:])
        raise JarResolutionError(
            f"Maven failed to resolve {what} (exit {done.returncode}); rerun "
            f"`{' '.join(cmd)}` to see why. Output tail:\n{tail}"
        )
    log.info("resolved %d jars in %.1f s", len(list(lib.glob("*.jar"))),
             time.monotonic() - started)


def classpath(lib: Path) -> str:
    """The JVM classpath for every jar in ``lib`` (a Java wildcard entry)."""
    return str(lib / "*")


def java_executable() -> str:
    """``java`` from PATH, or a :class:`JavaNotFoundError` that says how to install it."""
    java = shutil.which("java")
    if java is None:
        raise JavaNotFoundError(
            "`java` is not on PATH; the Kafka broker and its tools need Java 17. "
            "Install it with `apt-get install -y openjdk-17-jre-headless`."
        )
    return java

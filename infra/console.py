"""Kafka's own console producer and consumer, run from the jars of :mod:`memstack.infra.jars`.

Interop checks use them: a record written by Python must read back in Kafka's own tools, and the
other way round. Each call starts a JVM (about 1-2 s).
"""

from __future__ import annotations

import logging
import subprocess
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from memstack.infra import jars
from memstack.infra.errors import ConsoleToolError

log = logging.getLogger(__name__)

CONSOLE_PRODUCER = "org.apache.kafka.tools.ConsoleProducer"
CONSOLE_CONSUMER = "org.apache.kafka.tools.consumer.ConsoleConsumer"
_SEP = "\t"
_NULL = "\u2400"  # how the consumer prints a null key: the "symbol for null" character


@dataclass(frozen=True)
class ConsoleRecord:
    """One record as Kafka's console consumer printed it."""

    timestamp_type: str  # "CreateTime" or "LogAppendTime"
    timestamp_ms: int
    partition: int
    offset: int
    key: str | None
    value: str


def run_tool(main_class: str, args: Sequence[str], *, stdin: str | None = None,
             timeout_s: float = 60.0, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run one of Kafka's tools; with ``check``, :class:`ConsoleToolError` (with its output)
    when it exits non-zero."""
    cmd = [jars.java_executable(), "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
           f"-Dlog4j2.configurationFile={jars.KAFKA_DIR / 'log4j2-tools.properties'}",
           "-cp", jars.classpath(jars.resolve_jars()), main_class, *args]
    try:
        done = subprocess.run(cmd, input=stdin, capture_output=True, text=True,
                              timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired as exc:
        raise ConsoleToolError(f"{main_class} did not finish within {timeout_s:.0f} s") from exc
    if check and done.returncode != 0:
        raise ConsoleToolError(
            f"{main_class} exited with {done.returncode}:\n{(done.stdout + done.stderr)[-3000:]}")
    return done


def console_produce(bootstrap: str, topic: str, values: Sequence[str],
                    keys: Sequence[str] | None = None, *, timeout_s: float = 60.0) -> None:
    """Write ``values`` (one record each, with ``keys`` if given) with the console producer."""
    if keys is not None and len(keys) != len(values):
        raise ValueError(f"{len(keys)} keys for {len(values)} values")
    records = values if keys is None else [f"{k}{_SEP}{v}" for k, v in zip(keys, values,
                                                                           strict=True)]
    if any("\n" in r for r in records):
        raise ValueError("the console producer reads one record per line: no newlines")
    args = ["--bootstrap-server", bootstrap, "--topic", topic,
            "--command-property", "acks=all", "--command-property", "enable.idempotence=true"]
    if keys is not None:
        args += ["--reader-property", "parse.key=true",
                 "--reader-property", f"key.separator={_SEP}"]
    run_tool(CONSOLE_PRODUCER, args, stdin="".join(r + "\n" for r in records),
             timeout_s=timeout_s)
    log.debug("console producer wrote %d records to %s", len(records), topic)


def console_consume(bootstrap: str, topic: str, max_messages: int, *,
                    idle_timeout_s: float = 20.0, timeout_s: float = 60.0,
                    group: str | None = None) -> list[ConsoleRecord]:
    """Read up to ``max_messages`` records from the beginning of ``topic`` with the console
    consumer; it stops early after ``idle_timeout_s`` without a record."""
    args = ["--bootstrap-server", bootstrap, "--topic", topic, "--from-beginning",
            "--max-messages", str(max_messages), "--timeout-ms", str(int(idle_timeout_s * 1000)),
            "--group", group or f"memstack-console-{uuid.uuid4().hex[:12]}",
            "--command-property", "session.timeout.ms=6000"]
    for prop in ("print.timestamp", "print.partition", "print.offset", "print.key"):
        args += ["--formatter-property", f"{prop}=true"]
    args += ["--formatter-property", f"key.separator={_SEP}",
             "--formatter-property", f"null.literal={_NULL}"]
    done = _consume(args, timeout_s)
    return [_parse(line) for line in done.stdout.splitlines() if line]


def _consume(args: list[str], timeout_s: float) -> subprocess.CompletedProcess[str]:
    done = run_tool(CONSOLE_CONSUMER, args, timeout_s=timeout_s, check=False)
    # After --timeout-ms without a record the consumer exits 1 with a TimeoutException: that
    # means "fewer records than asked", which the caller sees in the count, not a failure.
    if done.returncode != 0 and "TimeoutException" not in done.stderr:
        raise ConsoleToolError(
            f"{CONSOLE_CONSUMER} exited with {done.returncode}:\n{done.stderr[-3000:]}")
    return done


def _parse(line: str) -> ConsoleRecord:
    """``<type>:<ms>\\tPartition:<p>\\tOffset:<o>\\t<key>\\t<value>`` as the formatter prints it."""
    fields = line.split(_SEP, 4)
    if len(fields) != 5:
        raise ConsoleToolError(f"unexpected console consumer line: {line!r}")
    ts_type, ts = fields[0].split(":", 1)
    key = None if fields[3] == _NULL else fields[3]
    return ConsoleRecord(ts_type, int(ts), int(fields[1].split(":", 1)[1]),
                         int(fields[2].split(":", 1)[1]), key, fields[4])

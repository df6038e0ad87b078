"""The bounded Kafka source: raw key and value bytes with partition, offset and log time.

PyFlink's DataStream ``KafkaSource`` only offers value-only deserializers, so the source is the
Table API's Kafka connector, whose metadata columns carry ``partition``, ``offset`` and
``timestamp`` (the topic uses ``LogAppendTime``: the transaction time), converted to a
DataStream of rows ``(k, v, p, o, ts_ms)``. Start and stop are explicit per-partition offsets
(``scan.startup/bounded.mode = specific-offsets``), resolved once by the driver.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from memstack.foundation.kafka_connect import security_of
from memstack.operators.log import LogPosition
from memstack.pipelines.log_reader import LogRecord
from memstack.pipelines.replay.bounds import Bounds

if TYPE_CHECKING:
    from pyflink.datastream import DataStream
    from pyflink.table import StreamTableEnvironment

LOG_APPEND_TIME = 1
"""kafka-python's ``timestamp_type`` for LogAppendTime (0 is CreateTime)."""
_TS_TYPES = {"CreateTime": 0, "LogAppendTime": 1}


def offsets_option(offsets: Mapping[int, int]) -> str:
    """``partition:0,offset:42;partition:1,offset:300`` as the connector expects."""
    return ";".join(f"partition:{p},offset:{o}" for p, o in sorted(offsets.items()))


CONNECTOR_SHADED = "org.apache.flink.kafka.shaded."
"""Where flink-sql-connector-kafka relocates Kafka's classes (the JAAS login module's name)."""


def source_ddl(table: str, bootstrap: str, bounds: Bounds) -> str:
    """CREATE TABLE for the bounded, metadata-carrying Kafka source (with the connection's
    security properties: the statement holds the password; never log it)."""
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", table):
        raise ValueError(f"table name {table!r} must be a plain identifier")
    options = {
        "connector": "kafka",
        "topic": bounds.topic,
        "properties.bootstrap.servers": bootstrap,
        "properties.isolation.level": "read_committed",
        "properties.client.id.prefix": "memstack-replay",
        # the one security definition (MEMSTACK_KAFKA_*): holds the password, never logged
        **{f"properties.{k}": v
           for k, v in security_of(None).flink_properties(CONNECTOR_SHADED).items()},
        "scan.startup.mode": "specific-offsets",
        "scan.startup.specific-offsets": offsets_option(bounds.start),
        "scan.bounded.mode": "specific-offsets",
        "scan.bounded.specific-offsets": offsets_option(bounds.stop),
        "key.format": "raw",
        "key.fields": "k",
        "value.format": "raw",
        "value.fields-include": "EXCEPT_KEY",
    }
    with_ = ",\n  ".join(f"'{k}' = '{_quote(v)}'" for k, v in options.items())
    return (f"CREATE TEMPORARY TABLE {table} (\n"
            "  k BYTES,\n  v BYTES,\n"
            "  p INT METADATA FROM 'partition' VIRTUAL,\n"
            "  o BIGINT METADATA FROM 'offset' VIRTUAL,\n"
            "  ts TIMESTAMP_LTZ(3) METADATA FROM 'timestamp' VIRTUAL,\n"
            "  tstype STRING METADATA FROM 'timestamp-type' VIRTUAL\n"
            f") WITH (\n  {with_}\n)")


def _quote(value: str) -> str:
    return value.replace("'", "''")


def bounded_log(tenv: StreamTableEnvironment, bootstrap: str, bounds: Bounds,
                table: str = "memstack_events") -> DataStream:
    """The log between ``bounds`` as a DataStream of rows ``(k, v, p, o, ts, tstype)``."""
    tenv.execute_sql(f"DROP TEMPORARY TABLE IF EXISTS {table}")
    tenv.execute_sql(source_ddl(table, bootstrap, bounds))
    return tenv.to_data_stream(tenv.sql_query(f"SELECT k, v, p, o, ts, tstype FROM {table}"))


def epoch_ms(instant: Any) -> int:
    """Milliseconds of PyFlink's ``Instant`` (or a datetime, in tests)."""
    if isinstance(instant, datetime):
        return int(instant.timestamp() * 1000)
    ms: int = instant.to_epoch_milli()
    return ms


def to_log_record(topic: str, key: bytes | None, value: bytes | None, partition: int,
                  offset: int, ts_ms: int, ts_type: str | None) -> LogRecord:
    """The same :class:`LogRecord` that :mod:`memstack.pipelines.log_reader` builds."""
    position = LogPosition(datetime.fromtimestamp(ts_ms / 1000, UTC), partition, offset)
    return LogRecord(topic, key, value, position, _TS_TYPES.get(ts_type or "", -1))

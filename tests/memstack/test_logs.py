"""Log lines cannot be forged: control characters in messages are escaped (foundation/logs)."""

from __future__ import annotations

import io
import json
import logging

import pytest

from memstack.foundation.errors import ConfigError
from memstack.foundation.logs import (
    TEXT_FORMAT,
    JsonFormatter,
    SafeFormatter,
    escape,
    formatter_from_env,
)

FORGED = "2026-12-04 01:00:00,000 ERROR x: FORGED"


def lines_of(formatter: logging.Formatter, *records: logging.LogRecord) -> list[str]:
    return "\n".join(formatter.format(r) for r in records).split("\n")


def record(msg: str, *args: object, exc: bool = False) -> logging.LogRecord:
    info = None
    if exc:
        try:
            raise ValueError(f"bad id\n{FORGED}")
        except ValueError:
            import sys

            info = sys.exc_info()
    return logging.LogRecord("memstack.t", logging.INFO, __file__, 1, msg, args, info)


def test_escape_writes_control_characters_as_escapes() -> None:
    assert escape("a\nb\rc\x00d\te\x1b\x7f\u2028") == "a\\nb\\rc\\x00d\\te\\x1b\\x7f\\u2028"
    assert escape("plain ünïcode") == "plain ünïcode"


def test_a_client_string_stays_on_its_record_line() -> None:
    lines = lines_of(SafeFormatter(TEXT_FORMAT),
                     record("hid %s (%d)", f"s1\n{FORGED}\r\x00", 3),
                     record("failed %r", "x", exc=True))
    assert not any(c in "\n".join(lines) for c in "\r\x00")
    starts = [line for line in lines if not line.startswith(" ")]
    assert len(starts) == 2 and not any(line.startswith(FORGED) for line in lines)
    assert starts[0].endswith(f"hid s1\\n{FORGED}\\r\\x00 (3)")
    assert any(line.startswith("  ValueError: bad id") for line in lines)


def test_json_lines_hold_one_record_each() -> None:
    out = JsonFormatter().format(record("hid %s", f"s1\n{FORGED}\x00", exc=True))
    assert "\n" not in out and "\x00" not in out
    line = json.loads(out)
    assert line["message"] == f"hid s1\n{FORGED}\x00" and line["level"] == "INFO"
    assert "ValueError" in line["exception"] and line["time"].endswith("+00:00")


def test_the_format_is_chosen_by_the_environment() -> None:
    assert isinstance(formatter_from_env({}), SafeFormatter)
    assert isinstance(formatter_from_env({"MEMSTACK_LOG_FORMAT": "JSON"}), JsonFormatter)
    with pytest.raises(ConfigError, match="MEMSTACK_LOG_FORMAT"):
        formatter_from_env({"MEMSTACK_LOG_FORMAT": "xml"})


def test_the_handler_writes_through_the_safe_formatter() -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(formatter_from_env({}))
    logger = logging.getLogger("memstack.test_logs")
    logger.addHandler(handler)
    try:
        logger.warning("session %s", "a\nb")
    finally:
        logger.removeHandler(handler)
    assert stream.getvalue().count("\n") == 1 and "a\\nb" in stream.getvalue()

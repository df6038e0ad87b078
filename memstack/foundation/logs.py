"""Log lines that cannot be forged: the one logging setup of the command line.

A log line may carry strings a client chose (a session id, an event id, a key's label, a path).
Written raw, a session id holding ``"\\nERROR ..."`` made one forget request print three fake
ERROR lines (found by a hostile test). So the root handler's formatter escapes every control
character of a record's message, the way ``repr`` does (``\\n``, ``\\r``, ``\\x00``); the
lines of a traceback are kept, each indented, so no text inside one starts a line of its own.

``MEMSTACK_LOG_FORMAT=json`` writes one JSON object per record instead (``time``, ``level``,
``logger``, ``message`` and ``exception`` when there is one), for log shippers.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from types import TracebackType
from typing import TextIO

from memstack.foundation.errors import ConfigError

ExcInfo = (tuple[type[BaseException], BaseException, TracebackType | None]
           | tuple[None, None, None])

LOG_FORMAT_ENV = "MEMSTACK_LOG_FORMAT"
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escaped(match: re.Match[str]) -> str:
    char = match.group()
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def escape(text: str) -> str:
    """``text`` with every control character written as its escape (``\\n``, ``\\x00``)."""
    return _CONTROL.sub(_escaped, text)


def _indented(block: str) -> str:
    """A traceback's lines, each escaped and indented under the record's line."""
    return "\n".join("  " + escape(line) for line in block.split("\n"))


class SafeFormatter(logging.Formatter):
    """The text format, with the message escaped and tracebacks indented (one record starts
    exactly one line that is not indented)."""

    def formatMessage(self, record: logging.LogRecord) -> str:  # logging's name
        safe = logging.makeLogRecord(record.__dict__)
        safe.message = escape(record.message)
        return super().formatMessage(safe)

    def formatException(self, ei: ExcInfo) -> str:
        return _indented(super().formatException(ei))

    def formatStack(self, stack_info: str) -> str:
        return _indented(super().formatStack(stack_info))


class JsonFormatter(logging.Formatter):
    """One JSON object per record (control characters escaped by JSON itself)."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname, "logger": record.name, "message": record.getMessage()}
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        return json.dumps(line, ensure_ascii=True)


def formatter_from_env(env: Mapping[str, str] | None = None) -> logging.Formatter:
    """``MEMSTACK_LOG_FORMAT``: ``text`` (default) or ``json``."""
    value = (os.environ if env is None else env).get(LOG_FORMAT_ENV, "").strip().lower()
    if value in ("", "text"):
        return SafeFormatter(TEXT_FORMAT)
    if value == "json":
        return JsonFormatter()
    raise ConfigError(f"{LOG_FORMAT_ENV}={value!r} is neither 'text' nor 'json'")


def setup_logging(level: int, stream: TextIO | None = None) -> None:
    """The root logger writes ``stream`` (stderr) through :func:`formatter_from_env`'s
    formatter; the only handler of the process unless a library adds its own."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(formatter_from_env())
    logging.basicConfig(level=level, handlers=[handler])

"""Logging for every edgewatch process: structured lines on stderr, JSON (containers) or key=value
text (terminals), with the ``extra={...}`` fields of each record kept as keys.

The standard library's ``logging`` alone (two ``logging.Formatter`` subclasses), so an agent does
not load a logging framework: structlog and the rich console it imports cost an agent 3.7 MiB of
RSS (``bench/agent_imports.py``) for what two formatters do.

A JSON line is one object: ``event`` (the message), ``level`` (lower case), ``timestamp`` (RFC 3339,
UTC, microseconds, ``Z``: the writer's clock, for reading, never compared across machines),
``logger``, each ``extra`` field (values JSON cannot hold written as their ``str``), and for a
record with ``exc_info`` the traceback's text under ``exception``.

Limits: configures the root logger of the process (call once, at start); quiets the HTTP client
libraries to WARNING. An ``extra`` key that collides with a ``LogRecord`` attribute is refused by
``logging`` itself (``KeyError``), as always.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from typing import Any, Final

__all__ = ["JsonFormatter", "TextFormatter", "configure_logging", "record_fields"]

_RECORD_ATTRIBUTES: Final = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime", "taskName"}
"""What every ``LogRecord`` has; anything else on a record came from ``extra``."""


def record_fields(record: logging.LogRecord) -> dict[str, Any]:
    """The structured view of ``record``: ``timestamp``, ``level``, ``logger``, ``event`` and its
    ``extra`` fields, in that order (an ``extra`` field does not replace the first four)."""
    fields: dict[str, Any] = {
        "timestamp": dt.datetime.fromtimestamp(record.created, tz=dt.UTC).isoformat(timespec="microseconds")
        .replace("+00:00", "Z"),
        "level": record.levelname.lower(),
        "logger": record.name,
        "event": record.getMessage(),
    }
    for key, value in record.__dict__.items():
        if key not in _RECORD_ATTRIBUTES and key not in fields:
            fields[key] = value
    return fields


class JsonFormatter(logging.Formatter):
    """One JSON object per record (module docstring); never raises for a field's value."""

    def format(self, record: logging.LogRecord) -> str:
        fields = record_fields(record)
        if record.exc_info:
            fields["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            fields["exception"] = record.exc_text
        return json.dumps(fields, default=str, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    """``<timestamp> [<level>] <event>  key=value ...`` per record, the traceback on the lines after."""

    def format(self, record: logging.LogRecord) -> str:
        fields = record_fields(record)
        head = f"{fields.pop('timestamp')} [{fields.pop('level'):<8}] {fields.pop('event')}"
        fields.pop("logger")
        line = head + ("  " + " ".join(f"{k}={v!r}" if isinstance(v, str) and " " in v else f"{k}={v}"
                                       for k, v in fields.items()) if fields else "")
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def configure_logging(*, level: str, json_logs: bool) -> None:
    """Send every log record to stderr as a JSON line (``json_logs``) or as key=value text.

    Args:
        level: the root level name (``"INFO"``, ``"debug"``, ...).
        json_logs: JSON lines (True) or human-readable text (False).

    Raises:
        ValueError: an unknown level name.
    """
    root = logging.getLogger()
    root.setLevel(level.upper())  # first: an unknown name raises before anything changes
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if json_logs else TextFormatter())
    root.handlers[:] = [handler]
    for noisy in ("httpx", "httpx2", "aiohttp.access", "httpcore"):
        logging.getLogger(noisy).setLevel(logging.WARNING)

"""edgewatch.logs: JSON lines keep the fields of ``extra`` and, for a record with ``exc_info``,
the traceback's text (it once came out as the tuple's repr, the stack lost)."""

from __future__ import annotations

import json
import logging

import pytest

from edgewatch.logs import configure_logging


@pytest.fixture
def restore_root_logger():  # type: ignore[no-untyped-def]
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def _fail() -> None:
    raise ZeroDivisionError("division by zero")


def test_a_json_line_carries_the_traceback_and_the_extra_fields(restore_root_logger, capsys) -> None:  # type: ignore[no-untyped-def]
    configure_logging(level="info", json_logs=True)
    try:
        _fail()
    except ZeroDivisionError:
        logging.getLogger("edgewatch.test").exception("boom", extra={"node": "a-1"})
    logging.getLogger("edgewatch.test").info("fine")
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert [line["event"] for line in lines] == ["boom", "fine"]
    boom, fine = lines
    assert boom["level"] == "error" and boom["node"] == "a-1"
    assert "exc_info" not in boom
    assert boom["exception"].startswith("Traceback (most recent call last):")
    assert "in _fail" in boom["exception"] and boom["exception"].endswith("ZeroDivisionError: division by zero")
    assert "exception" not in fine


def test_an_unknown_level_is_refused(restore_root_logger) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError):
        configure_logging(level="loud", json_logs=True)

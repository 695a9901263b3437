"""edgewatch.logs: JSON lines keep the fields of ``extra`` and, for a record with ``exc_info``,
the traceback's text (it once came out as the tuple's repr, the stack lost)."""

from __future__ import annotations

import json
import logging
import re

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


def test_a_json_line_has_its_time_level_and_logger_and_odd_values_as_text(restore_root_logger, capsys) -> None:  # type: ignore[no-untyped-def]
    configure_logging(level="debug", json_logs=True)
    logging.getLogger("edgewatch.x").debug("%s went %s", "a-1", "away",
                                           extra={"when": object, "count": 3, "event": "not this"})
    line = json.loads(capsys.readouterr().err)
    assert line["event"] == "a-1 went away" and line["level"] == "debug" and line["logger"] == "edgewatch.x"
    assert line["count"] == 3 and line["when"] == str(object)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", line["timestamp"]), line["timestamp"]


def test_a_text_line_keeps_the_fields_and_the_traceback(restore_root_logger, capsys) -> None:  # type: ignore[no-untyped-def]
    configure_logging(level="info", json_logs=False)
    try:
        _fail()
    except ZeroDivisionError:
        logging.getLogger("edgewatch.test").exception("boom", extra={"node": "a-1", "why": "two words"})
    head, *rest = capsys.readouterr().err.splitlines()
    assert re.fullmatch(r"\S+Z \[error   \] boom  node=a-1 why='two words'", head), head
    assert rest[0] == "Traceback (most recent call last):" and rest[-1] == "ZeroDivisionError: division by zero"

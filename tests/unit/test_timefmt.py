"""edgewatch.timefmt: the one RFC 3339 / MicroTime formatter and parser, Go durations, and the
controller's monotonic clock."""

from __future__ import annotations

import datetime as dt
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edgewatch.timefmt import (
    MonotonicClock,
    format_micro_time,
    format_rfc3339,
    parse_go_duration,
    parse_rfc3339,
)

T0 = 1_700_000_000.0  # 2023-11-14T22:13:20Z
FAST = settings(deadline=None, max_examples=150, suppress_health_check=[HealthCheck.too_slow])


# ---------------------------------------------------------------------------------------------------
# RFC 3339 and MicroTime
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "ts"),
    [
        ("1970-01-01T00:00:00Z", 0.0),
        ("2023-11-14T22:13:20Z", T0),
        ("2023-11-14T22:13:20z", T0),
        ("2023-11-14t22:13:20Z", T0),
        ("2023-11-15T00:13:20+02:00", T0),
        ("2023-11-14T22:13:20.25Z", T0 + 0.25),
        ("2023-11-14T22:13:20.123456Z", T0 + 0.123456),
    ],
)
def test_parse_rfc3339(text: str, ts: float) -> None:
    assert parse_rfc3339(text) == pytest.approx(ts, abs=1e-6)


def test_parse_rfc3339_truncates_beyond_microseconds() -> None:
    assert parse_rfc3339("2023-11-14T22:13:20.1234567Z") == parse_rfc3339("2023-11-14T22:13:20.123456Z")


@pytest.mark.parametrize(
    "text",
    ["", "2023-11-14", "2023-11-14T22:13:20", "2023-11-14 22:13", "2023-13-14T22:13:20Z", "soon", "1700000000",
     None, 1700000000],
)
def test_parse_rfc3339_invalid(text: object) -> None:
    with pytest.raises(ValueError):
        parse_rfc3339(text)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("when", "rfc3339", "micro"),
    [
        (T0, "2023-11-14T22:13:20Z", "2023-11-14T22:13:20.000000Z"),
        (T0 + 0.5, "2023-11-14T22:13:20Z", "2023-11-14T22:13:20.500000Z"),  # metav1.Time: whole seconds
        (dt.datetime(2023, 11, 15, 0, 13, 20, 7, tzinfo=dt.timezone(dt.timedelta(hours=2))),
         "2023-11-14T22:13:20Z", "2023-11-14T22:13:20.000007Z"),
    ],
)
def test_formatters(when: float | dt.datetime, rfc3339: str, micro: str) -> None:
    assert format_rfc3339(when) == rfc3339
    assert format_micro_time(when) == micro


def test_formatters_refuse_naive_datetimes() -> None:
    with pytest.raises(ValueError):
        format_rfc3339(dt.datetime(2023, 1, 1))
    with pytest.raises(ValueError):
        format_micro_time(dt.datetime(2023, 1, 1))


def test_formatters_default_to_now() -> None:
    before = math.floor(dt.datetime.now(dt.timezone.utc).timestamp())
    assert before <= parse_rfc3339(format_rfc3339()) <= before + 2
    assert before <= parse_rfc3339(format_micro_time()) <= before + 2


@FAST
@given(seconds=st.integers(min_value=0, max_value=4_000_000_000), micros=st.integers(0, 999_999))
def test_round_trips(seconds: int, micros: int) -> None:
    text = format_rfc3339(float(seconds))
    assert text.endswith("Z") and "." not in text
    assert parse_rfc3339(text) == seconds
    moment = dt.datetime.fromtimestamp(seconds, dt.timezone.utc) + dt.timedelta(microseconds=micros)
    micro = format_micro_time(moment)
    assert micro == moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    assert dt.datetime.fromtimestamp(parse_rfc3339(micro), dt.timezone.utc) == moment


# ---------------------------------------------------------------------------------------------------
# Go durations
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("0", 0.0), ("+0", 0.0), ("-0", 0.0), ("0s", 0.0), ("-0s", 0.0), ("90s", 90.0), ("10m", 600.0), ("1h", 3600.0),
        ("1h30m", 5400.0), ("1h30m15s", 5415.0), ("2h45m", 9900.0), ("1.5h", 5400.0), ("300ms", 0.3),
        ("1500ms", 1.5), (".5s", 0.5), ("5.s", 5.0), ("+5s", 5.0), ("1us", 1e-6), ("1\u00b5s", 1e-6),
        ("1\u03bcs", 1e-6), ("1m1m", 120.0), ("5m0.5s", 300.5), ("1ms500us", 0.0015),
    ],
)
def test_parse_go_duration_valid(text: str, seconds: float) -> None:
    assert parse_go_duration(text) == pytest.approx(seconds, abs=1e-9)


@pytest.mark.parametrize(
    "text",
    [
        "", "+", "-", "10", "00", "1.0", "-5s", "-1h30m", "1d", "1w", "1y", "1h 30m", "1h-30m", "1h,30m", "1H",
        "h", ".s", "s", "1.2.3s", "abc", "5s ", " 5s", "\u0665s", "3000000h", "unlimited", None, 5,
    ],
)
def test_parse_go_duration_invalid(text: object) -> None:
    """Go's grammar exactly: the library behind it also takes days, weeks, years, separators between
    components and non-ASCII digits, which Go refuses; and Go refuses more than 2**63-1 ns."""
    with pytest.raises(ValueError):
        parse_go_duration(text)  # type: ignore[arg-type]


UNITS = {"h": 3600, "m": 60, "s": 1, "ms": 1e-3, "us": 1e-6}


@FAST
@given(
    parts=st.lists(st.tuples(st.integers(min_value=0, max_value=10_000), st.sampled_from(sorted(UNITS))),
                   min_size=1, max_size=5),
    plus=st.booleans(),
)
def test_duration_components_add_up(parts: list[tuple[int, str]], plus: bool) -> None:
    text = ("+" if plus else "") + "".join(f"{n}{u}" for n, u in parts)
    expected = sum(n * UNITS[u] for n, u in parts)
    assert parse_go_duration(text) == pytest.approx(expected, rel=1e-12, abs=1e-6)


@FAST
@given(whole=st.integers(min_value=0, max_value=100_000), frac=st.integers(min_value=0, max_value=999),
       unit=st.sampled_from(["h", "m", "s"]))
def test_duration_fractions(whole: int, frac: int, unit: str) -> None:
    assert parse_go_duration(f"{whole}.{frac:03d}{unit}") == pytest.approx((whole + frac / 1000) * UNITS[unit],
                                                                          rel=1e-12, abs=1e-6)


# ---------------------------------------------------------------------------------------------------
# the controller's clock
# ---------------------------------------------------------------------------------------------------


def test_monotonic_clock_is_anchored_to_the_wall_clock_once_and_follows_the_monotonic_one() -> None:
    ticks = iter([100.0, 100.0, 105.5, 104.0])
    clock = MonotonicClock(wall=lambda: T0, monotonic=lambda: next(ticks))
    assert clock.now() == T0  # anchored at construction (monotonic 100)
    assert clock.now() == T0 + 5.5  # the wall clock is not read again: a step of it changes nothing
    assert clock.now() == T0 + 5.5  # never backwards

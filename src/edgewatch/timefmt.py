"""Times and durations as edgewatch writes and reads them: one RFC 3339 formatter (Kubernetes
``metav1.Time``, whole seconds), one MicroTime formatter (Lease ``renewTime``, microseconds), one
parser for both, Go durations, and the controller's monotonic clock.

Purpose: every module that writes a time into the API uses these, so agent, controller, simulator
and tests agree on the text (the delegate mark is current only while two such texts are equal).

Clock rule (docs/clock-skew.md): formatting and parsing never judge a time. A timestamp written by
another machine is only ever compared for equality, never with this machine's clock; freshness is
measured on this machine's monotonic clock from when it *observed* a change (:class:`MonotonicClock`).

Sources and limits:

* RFC 3339 is parsed by the standard library (``datetime.fromisoformat``, which in Python 3.11 takes
  ``Z``); an explicit offset is required. It also takes the other ISO 8601 forms it knows (e.g. the
  basic format), a harmless superset. Fractions beyond microseconds are truncated.
* Go durations (``time.ParseDuration``: ``"90s"``, ``"1h30m"``, ``"1.5h"``, ``"300ms"``) are computed by
  the ``durationpy`` package (the one the official Kubernetes Python client uses), behind Go's
  grammar as a regular expression: durationpy alone also takes days, weeks and years, anything
  between components (``"1h 30m"``, ``"1h-30m"``) and non-ASCII digits, which Go refuses. Resolution
  is a microsecond (``datetime.timedelta``), not Go's nanosecond; edgewatch's durations are seconds
  to hours.
"""

from __future__ import annotations

import datetime as dt
import re
import time
from collections.abc import Callable

import durationpy

__all__ = [
    "MICRO_TIME_PATTERN",
    "MonotonicClock",
    "format_micro_time",
    "format_rfc3339",
    "is_micro_time",
    "parse_go_duration",
    "parse_instant_ns",
    "parse_rfc3339",
]

#: The one spelling of a Kubernetes ``MicroTime`` that edgewatch writes and the apiserver
#: serializes (``2006-01-02T15:04:05.000000Z07:00`` in UTC): six fraction digits, upper-case ``T``
#: and ``Z``. The agent policy ``edgewatch-agent-carry-mark`` (deploy/15-policy-agent.yaml) requires
#: a delegate mark in exactly this form, with this same expression.
MICRO_TIME_PATTERN = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{6}Z$"
_MICRO_TIME = re.compile(MICRO_TIME_PATTERN, re.ASCII)
#: RFC 3339 ``date-time`` (section 5.6), ``T`` and ``Z`` in either case, a fraction of any length.
_RFC3339 = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})[Tt]([0-9]{2}):([0-9]{2}):([0-9]{2})"
                      r"(?:\.([0-9]+))?(?:([Zz])|([+-])([0-9]{2}):([0-9]{2}))", re.ASCII)

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)

#: Go's time.ParseDuration grammar, ASCII digits only: a sign, then one or more number+unit
#: components, or a lone zero.
_GO_DURATION = re.compile(r"[+-]?(?:0|(?:(?:\d+\.?\d*|\.\d+)(?:ns|us|\u00b5s|\u03bcs|ms|s|m|h))+)", re.ASCII)
#: Go refuses durations beyond 2**63-1 nanoseconds (about 292 years).
_GO_MAX = dt.timedelta(microseconds=((1 << 63) - 1) // 1000)


def _as_utc(when: dt.datetime | float | None) -> dt.datetime:
    if when is None:
        return dt.datetime.now(dt.timezone.utc)
    if isinstance(when, dt.datetime):
        if when.tzinfo is None:
            raise ValueError(f"naive datetime {when!r}: a time zone is required")
        return when.astimezone(dt.timezone.utc)
    return _EPOCH + dt.timedelta(seconds=when)


def format_rfc3339(when: dt.datetime | float | None = None) -> str:
    """``when`` (an aware datetime, or seconds since the epoch; None = now) as Kubernetes
    ``metav1.Time``: RFC 3339 in UTC to the second, e.g. ``2023-11-14T22:13:20Z`` (a fraction is
    dropped, as the API does). Raises ValueError for a naive datetime."""
    return _as_utc(when).strftime("%Y-%m-%dT%H:%M:%SZ")


def format_micro_time(when: dt.datetime | float | None = None) -> str:
    """``when`` (an aware datetime, or seconds since the epoch; None = now) as Kubernetes
    ``MicroTime`` (a Lease's ``renewTime``): RFC 3339 in UTC with six fraction digits, e.g.
    ``2023-11-14T22:13:20.123456Z``. Raises ValueError for a naive datetime."""
    return _as_utc(when).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_rfc3339(text: str) -> float:
    """Parse an RFC 3339 time (``Z`` or an offset required; ``t`` and ``z`` may be lower case) to
    seconds since the epoch. Raises ValueError on anything else."""
    if not isinstance(text, str):
        raise ValueError(f"not an RFC 3339 timestamp: {text!r}")
    try:
        moment = dt.datetime.fromisoformat(text.upper())
    except ValueError:
        raise ValueError(f"not an RFC 3339 timestamp: {text!r}") from None
    if moment.tzinfo is None:
        raise ValueError(f"not an RFC 3339 timestamp (no offset): {text!r}")
    return (moment - _EPOCH).total_seconds()


def is_micro_time(text: object) -> bool:
    """True iff ``text`` is a string in the one MicroTime spelling (:data:`MICRO_TIME_PATTERN`)."""
    return isinstance(text, str) and _MICRO_TIME.fullmatch(text) is not None


def parse_instant_ns(text: str) -> int:
    """An RFC 3339 ``date-time`` as integer nanoseconds since the epoch: the instant, whatever the
    spelling (``Z``, ``z`` or an offset; ``T`` or ``t``; a fraction of any length, digits past the
    ninth dropped as Go's ``time.Parse`` drops them). Two spellings of one instant give one number,
    so a comparison of two times is a comparison of instants, as CEL's ``timestamp()`` compares them
    in the apiserver's admission policies — never of texts, and never rounded to a float or to
    Python's microseconds. Raises ValueError for anything else (a leap second, a date that does not
    exist, an offset past 23:59)."""
    match = _RFC3339.fullmatch(text) if isinstance(text, str) else None
    if match is None:
        raise ValueError(f"not an RFC 3339 timestamp: {text!r}")
    year, month, day, hour, minute, second = (int(g) for g in match.groups()[:6])
    fraction, zulu, sign, off_h, off_m = match.groups()[6:]
    try:
        offset = dt.timedelta(0) if zulu else dt.timedelta(hours=int(off_h), minutes=int(off_m))
        if offset >= dt.timedelta(days=1) or (off_m is not None and int(off_m) > 59):
            raise ValueError("offset out of range")
        moment = dt.datetime(year, month, day, hour, minute, second, tzinfo=dt.timezone.utc)
    except ValueError:
        raise ValueError(f"not an RFC 3339 timestamp: {text!r}") from None
    if sign == "-":
        offset = -offset
    seconds = (moment - _EPOCH) // dt.timedelta(seconds=1) - offset // dt.timedelta(seconds=1)
    return seconds * 1_000_000_000 + int((fraction or "0")[:9].ljust(9, "0"))


def parse_go_duration(text: str) -> float:
    """Parse a Go ``time.ParseDuration`` string (e.g. ``"10m"``, ``"1h30m"``, ``"0"``) to seconds,
    refusing negative durations. Raises ValueError on anything Go would refuse, or a negative value."""
    if not isinstance(text, str) or _GO_DURATION.fullmatch(text) is None:
        raise ValueError(f"invalid duration {text!r}")
    try:
        value = durationpy.from_str(text)
    except durationpy.DurationError as exc:
        raise ValueError(f"invalid duration {text!r}: {exc}") from None
    if value < dt.timedelta(0):
        raise ValueError(f"negative duration {text!r}")
    if value > _GO_MAX:
        raise ValueError(f"duration {text!r} overflows")
    return value.total_seconds()


class MonotonicClock:
    """Seconds since the epoch that never jump: the wall clock read once, at construction, plus the
    monotonic clock's progress since then.

    The controller's timestamps (observations, deadlines, the times it writes) come from one such
    clock, so every age it computes is a difference of monotonic readings (a step of the wall
    clock, e.g. by NTP, changes no age), and the times it writes into the API are still close to the
    wall clock. Never goes backwards.

    Args:
        wall: the wall clock (seconds since the epoch), read once.
        monotonic: the monotonic clock (seconds).
    """

    def __init__(self, *, wall: Callable[[], float] = time.time,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self._monotonic = monotonic
        self._start = monotonic()
        self._wall = wall()
        self._last = self._wall

    def now(self) -> float:
        """The current time, seconds since the epoch (monotonic: never less than the last answer)."""
        self._last = max(self._last, self._wall + (self._monotonic() - self._start))
        return self._last

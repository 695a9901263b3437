"""edgewatch.leasemark and edgewatch.timefmt.parse_instant_ns: one meaning of the delegate mark.

The attack these pin down: renewTime ``…:05.000000Z`` with the mark ``…:05Z`` was a carry to the
apiserver's policy (CEL compares instants) and the node's own renewal to the controller (it compared
texts). Every spelling here is written by hand or built from digits, never by the formatter under
test, and the controller's classification must follow the instant, as CEL's does. The same
spellings go through the real policy on the real apiserver in tests/integration/test_policy.py.
"""

from __future__ import annotations

import calendar
import datetime as dt
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edgewatch.leasemark import MARK_ANNOTATIONS, MARK_PREFIX, mark_is_current
from edgewatch.names import DELEGATE_HEARTBEAT_ANNOTATION, DELEGATED_RENEW_TIME_ANNOTATION
from edgewatch.timefmt import MICRO_TIME_PATTERN, format_micro_time, is_micro_time, parse_instant_ns

CANONICAL = "2026-11-28T10:00:05.000000Z"
NS = calendar.timegm((2026, 11, 28, 10, 0, 5)) * 10**9  # the instant, by the standard library
POLICY = Path(__file__).resolve().parents[2] / "deploy" / "15-policy-agent.yaml"


def spellings(seconds: str, fraction_ns: int) -> list[str]:
    """Every RFC 3339 spelling of 2026-11-28T10:00:<seconds>.<fraction_ns> that Go's or Python's
    parsers accept: fraction lengths 0-9 (where exact) and 10-12 (trailing zeros), T/t, Z/z/+00:00/-00:00,
    and an equivalent +02:00 / -01:30 offset."""
    digits = f"{fraction_ns:09d}"
    fractions = [""] if fraction_ns == 0 else []
    for n in range(1, 13):
        kept = digits[:n] if n <= 9 else digits + "0" * (n - 9)
        if int(kept.ljust(9, "0")[:9]) == fraction_ns:
            fractions.append("." + kept)
    out = []
    for frac in fractions:
        for sep in ("T", "t"):
            for zone in ("Z", "z", "+00:00", "-00:00"):
                out.append(f"2026-11-28{sep}10:00:{seconds}{frac}{zone}")
            out.append(f"2026-11-28{sep}12:00:{seconds}{frac}+02:00")
            out.append(f"2026-11-28{sep}08:30:{seconds}{frac}-01:30")
    return out


def mark(text: str) -> dict[str, str]:
    return {DELEGATE_HEARTBEAT_ANNOTATION: "true", DELEGATED_RENEW_TIME_ANNOTATION: text}


def test_every_spelling_of_one_instant_is_one_instant() -> None:
    texts = spellings("05", 0)
    assert len(texts) > 50 and CANONICAL in texts
    assert {parse_instant_ns(t) for t in texts} == {NS}
    assert {parse_instant_ns(t) for t in spellings("05", 120_000_000)} == {NS + 120_000_000}


def test_the_attack_spelling_is_a_carry_to_the_controller() -> None:
    """The measured attack: renewTime …:05.000000Z, mark …:05Z. The same instant, so the renewal is
    carried (and so needs the node's own signed statement naming the carrier), never the node's own."""
    assert mark_is_current(annotations=mark("2026-11-28T10:00:05Z"), renew_time=CANONICAL)
    for text in spellings("05", 0):
        assert mark_is_current(annotations=mark(text), renew_time=CANONICAL), text


@pytest.mark.parametrize("text", [
    "2026-11-28T10:00:05.000001Z",      # one microsecond later
    "2026-11-28T10:00:05.0000001Z",     # 100 ns later: Python's microseconds would call it equal
    "2026-11-28T10:00:04.999999999Z",
    "2026-11-28T11:00:05Z",
    "2026-11-28T10:00:05+01:00",
])
def test_another_instant_is_no_current_mark(text: str) -> None:
    assert not mark_is_current(annotations=mark(text), renew_time=CANONICAL)


@pytest.mark.parametrize("text", [
    "", "later", "2026-11-28 10:00:05Z", "2026-11-28T10:00:05", "2026-11-28T10:00:60Z", "2026-02-30T10:00:05Z",
    "2026-11-28T10:00:05+24:00", "2026-11-28T10:00:05+00:60", "2026-11-28T10:00:05.Z", "２０２６-11-28T10:00:05Z",
    "2026-11-28T10:00:05Z\n", "20261128T100005Z",
])
def test_unparseable_times_are_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_instant_ns(text)
    assert not mark_is_current(annotations=mark(text), renew_time=CANONICAL)


def test_only_the_canonical_spelling_is_a_micro_time() -> None:
    assert [t for t in spellings("05", 0) if is_micro_time(t)] == [CANONICAL]
    assert not is_micro_time(None) and not is_micro_time(CANONICAL + "\n")


@settings(max_examples=300, deadline=None)
@given(st.integers(min_value=0, max_value=4_102_444_799 * 10**6))
def test_format_micro_time_round_trips_as_an_instant(micros: int) -> None:
    text = format_micro_time(dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(microseconds=micros))
    assert is_micro_time(text)
    assert parse_instant_ns(text) == micros * 1000


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=0, max_value=59), st.integers(min_value=0, max_value=999_999_999),
       st.integers(min_value=0, max_value=999_999_999))
def test_current_iff_the_same_instant(second: int, a: int, b: int) -> None:
    """Property: for any two spellings, the mark is current exactly when the instants are equal."""
    for x in spellings(f"{second:02d}", a)[::7]:
        for y in spellings(f"{second:02d}", b)[::11]:
            assert mark_is_current(annotations=mark(x), renew_time=y) is (a == b)


def test_the_mark_needs_delegate_heartbeat_true() -> None:
    for value in ("True", "1", "yes", ""):
        ann = {DELEGATE_HEARTBEAT_ANNOTATION: value, DELEGATED_RENEW_TIME_ANNOTATION: CANONICAL}
        assert not mark_is_current(annotations=ann, renew_time=CANONICAL)
    assert not mark_is_current(annotations=mark(CANONICAL), renew_time=None)


def test_the_policy_spells_the_mark_as_this_module_does() -> None:
    """The admission policies and the controller check one pattern: every regular expression the
    agent policy applies to delegated-renew-time is MICRO_TIME_PATTERN (as a CEL string literal),
    and every mark annotation starts with the prefix the mark-removal policy watches."""
    text = POLICY.read_text()
    literals = re.findall(r"[mM]arkText\.matches\('([^']*)'\)", text)
    assert len(literals) >= 2
    assert {lit.replace("\\\\", "\\") for lit in literals} == {MICRO_TIME_PATTERN}
    assert f"startsWith('{MARK_PREFIX}')" in text
    assert all(k.startswith(MARK_PREFIX) for k in MARK_ANNOTATIONS)

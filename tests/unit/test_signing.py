"""Tests of edgewatch.core.signing: canonical JSON and signature domains (the per-node signer is
tested in test_identity)."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edgewatch.core.signing import MAX_DEPTH, canonical_json, check_domain
from edgewatch.core.types import Health

# --------------------------------------------------------------------------- canonical JSON


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({"b": 1, "a": [True, None, 1.5]}, b'{"a":[true,null,1.5],"b":1}'),
        ({"z": {"y": 2, "x": 1}}, b'{"z":{"x":1,"y":2}}'),
        ({"name": "zürich-é"}, '{"name":"zürich-é"}'.encode()),
        ("a\"b\\c\n", b'"a\\"b\\\\c\\n"'),
        ((1, 2), b"[1,2]"),
        (-0.0, b"-0.0"),
        (10**30, b"1000000000000000000000000000000"),
        (1e-7, b"1e-07"),
        (Health.ALIVE, b'"alive"'),
    ],
)
def test_canonical_json_table(value: object, expected: bytes) -> None:
    assert canonical_json(value) == expected


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, {"a": [math.nan]}, "\ud800"])
def test_canonical_json_refuses_non_finite_and_invalid_unicode(value: object) -> None:
    with pytest.raises(ValueError):
        canonical_json(value)


@pytest.mark.parametrize("value", [{1: "a"}, {("a",): 1}, b"bytes", {"a": {1, 2}}, object()])
def test_canonical_json_refuses_other_types(value: object) -> None:
    with pytest.raises(TypeError):
        canonical_json(value)


def test_canonical_json_depth_limit() -> None:
    ok: object = 1
    for _ in range(MAX_DEPTH):
        ok = [ok]
    canonical_json(ok)
    with pytest.raises(ValueError):
        canonical_json([ok])
    deep: object = 1
    for _ in range(10_000):
        deep = {"a": deep}
    with pytest.raises(ValueError):
        canonical_json(deep)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=150, deadline=None)
@given(json_values)
def test_canonical_json_is_a_fixed_point_of_parsing(value: object) -> None:
    try:
        encoded = canonical_json(value)
    except ValueError:
        return  # lone surrogates from st.text()
    assert canonical_json(json.loads(encoded)) == encoded
    assert json.loads(encoded) == json.loads(json.dumps(value))


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text(max_size=6), st.integers(), max_size=8), st.randoms())
def test_canonical_json_ignores_key_order(d: dict[str, int], rnd) -> None:  # type: ignore[no-untyped-def]
    items = list(d.items())
    rnd.shuffle(items)
    assert canonical_json(dict(items)) == canonical_json(d)
    assert b": " not in canonical_json(d) or any(": " in k for k in d)


@pytest.mark.parametrize("domain", ["", "d\x00x", "dömäin", b"bytes"])
def test_check_domain_refuses(domain: object) -> None:
    with pytest.raises(ValueError):
        check_domain(domain)  # type: ignore[arg-type]


def test_check_domain_prefix() -> None:
    assert check_domain("edgewatch/x/v1") == b"edgewatch/x/v1\x00"

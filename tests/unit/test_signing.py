"""Tests of edgewatch.core.signing: canonical JSON, HMAC keyring with
rotation, and the key file format."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edgewatch.core.signing import (
    MAX_DEPTH,
    MIN_SECRET_BYTES,
    Keyring,
    Verification,
    canonical_json,
    load_keyring,
    parse_keyring,
)
from edgewatch.core.types import Health

OLD = ("k-old", b"o" * 32)
NEW = ("k-new", b"n" * 40)
DOMAIN = "edgewatch/test/v1"

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


# --------------------------------------------------------------------------- keyring


def test_sign_then_verify_and_known_answer() -> None:
    ring = Keyring([NEW, OLD])
    signed = ring.sign({"x": 1, "name": "a"}, domain=DOMAIN)
    assert signed["key_id"] == "k-new"
    assert ring.verify(signed, domain=DOMAIN) is Verification.OK
    # independent computation of the documented construction
    body = b'{"key_id":"k-new","name":"a","x":1}'
    expected = hmac.new(NEW[1], DOMAIN.encode() + b"\x00" + body, hashlib.sha256).hexdigest()
    assert signed["mac"] == expected
    assert len(expected) == 64


def test_rotation() -> None:
    old_ring = Keyring([OLD])
    during = Keyring([NEW, OLD])  # new primary, old still accepted
    after = Keyring([NEW])  # old rotated out
    by_old = old_ring.sign({"x": 1}, domain=DOMAIN)
    by_new = during.sign({"x": 1}, domain=DOMAIN)
    assert during.verify(by_old, domain=DOMAIN) is Verification.OK  # secondary key accepted
    assert during.verify(by_new, domain=DOMAIN) is Verification.OK
    assert after.verify(by_new, domain=DOMAIN) is Verification.OK
    assert after.verify(by_old, domain=DOMAIN) is Verification.UNKNOWN_KEY
    assert old_ring.verify(by_new, domain=DOMAIN) is Verification.UNKNOWN_KEY


def test_same_id_different_secret_is_bad_signature() -> None:
    a = Keyring([("k", b"a" * 32)])
    b = Keyring([("k", b"b" * 32)])
    assert b.verify(a.sign({"x": 1}, domain=DOMAIN), domain=DOMAIN) is Verification.BAD_SIGNATURE


def test_domain_separation() -> None:
    ring = Keyring([NEW])
    signed = ring.sign({"x": 1}, domain="edgewatch/heartbeat/v1")
    assert ring.verify(signed, domain="edgewatch/envelope/v1") is Verification.BAD_SIGNATURE
    with pytest.raises(ValueError):
        ring.sign({"x": 1}, domain="")
    with pytest.raises(ValueError):
        ring.verify(signed, domain="a\x00b")


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (lambda d: d.pop("mac"), Verification.UNSIGNED),
        (lambda d: d.pop("key_id"), Verification.UNSIGNED),
        (lambda d: d.__setitem__("x", 2), Verification.BAD_SIGNATURE),
        (lambda d: d.__setitem__("extra", 0), Verification.BAD_SIGNATURE),
        (lambda d: d.__setitem__("key_id", "k-old"), Verification.BAD_SIGNATURE),
        (lambda d: d.__setitem__("key_id", "nope"), Verification.UNKNOWN_KEY),
        (lambda d: d.__setitem__("mac", d["mac"].upper()), Verification.BAD_SIGNATURE),
        (lambda d: d.__setitem__("mac", "é" * 64), Verification.BAD_SIGNATURE),
        (lambda d: d.__setitem__("mac", ""), Verification.BAD_SIGNATURE),
        (lambda d: d.__setitem__("mac", 5), Verification.MALFORMED),
        (lambda d: d.__setitem__("key_id", None), Verification.MALFORMED),
        (lambda d: d.__setitem__("x", math.nan), Verification.MALFORMED),
        (lambda d: d.__setitem__("x", b"raw"), Verification.MALFORMED),
    ],
)
def test_tampering(mutate, expected: Verification) -> None:  # type: ignore[no-untyped-def]
    ring = Keyring([NEW, OLD])
    signed = ring.sign({"x": 1}, domain=DOMAIN)
    mutate(signed)
    assert ring.verify(signed, domain=DOMAIN) is expected


def test_sign_bytes_known_answer_and_verify_bytes() -> None:
    ring = Keyring([NEW, OLD])
    data = b"any bytes at all \xff\x00 {not json"
    key_id, mac = ring.sign_bytes(data, domain=DOMAIN)
    assert key_id == "k-new"
    assert mac == hmac.new(NEW[1], DOMAIN.encode() + b"\x00" + data, hashlib.sha256).hexdigest()
    assert ring.verify_bytes(key_id=key_id, mac=mac, data=data, domain=DOMAIN) is Verification.OK
    assert ring.verify_bytes(key_id=key_id, mac=mac, data=bytearray(data), domain=DOMAIN) is Verification.OK
    old_id, old_mac = Keyring([OLD]).sign_bytes(data, domain=DOMAIN)
    assert ring.verify_bytes(key_id=old_id, mac=old_mac, data=data, domain=DOMAIN) is Verification.OK  # rotation
    with pytest.raises(TypeError):
        ring.sign_bytes("text", domain=DOMAIN)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        ring.verify_bytes(key_id=key_id, mac=mac, data=data, domain="")


@pytest.mark.parametrize(
    ("key_id", "mac", "data", "expected"),
    [
        ("k-new", None, b"x", Verification.MALFORMED),
        (None, "0" * 64, b"x", Verification.MALFORMED),
        ("k-new", "0" * 64, "x", Verification.MALFORMED),
        ("bad/id", "0" * 64, b"x", Verification.MALFORMED),
        ("k-new", "é" * 64, b"x", Verification.MALFORMED),
        ("nope", "0" * 64, b"x", Verification.UNKNOWN_KEY),
        ("k-new", "0" * 64, b"x", Verification.BAD_SIGNATURE),
        ("k-new", "", b"x", Verification.BAD_SIGNATURE),
        ("k-new", "GOOD", b"y", Verification.BAD_SIGNATURE),  # the right MAC of other bytes
        ("k-old", "GOOD", b"x", Verification.BAD_SIGNATURE),  # the right MAC under another key
        ("k-new", "GOOD", b"x", Verification.OK),
    ],
)
def test_verify_bytes_table(key_id: object, mac: object, data: object, expected: Verification) -> None:
    ring = Keyring([NEW, OLD])
    if mac == "GOOD":
        mac = ring.sign_bytes(b"x", domain=DOMAIN)[1]
    assert ring.verify_bytes(key_id=key_id, mac=mac, data=data, domain=DOMAIN) is expected  # type: ignore[arg-type]


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=70), st.text(max_size=70), st.binary(max_size=200))
def test_verify_bytes_never_raises_on_hostile_input(key_id: str, mac: str, data: bytes) -> None:
    assert Keyring([NEW]).verify_bytes(key_id=key_id, mac=mac, data=data, domain=DOMAIN) in set(Verification)


@pytest.mark.parametrize("value", [None, [], "x", 3, [("key_id", "k")]])
def test_verify_non_objects(value: object) -> None:
    assert Keyring([NEW]).verify(value, domain=DOMAIN) is Verification.MALFORMED


def test_sign_refuses_presigned_payload() -> None:
    with pytest.raises(ValueError):
        Keyring([NEW]).sign({"mac": "x"}, domain=DOMAIN)
    with pytest.raises(ValueError):
        Keyring([NEW]).sign({"key_id": "x"}, domain=DOMAIN)


@pytest.mark.parametrize(
    "keys",
    [
        [],
        [("k", b"short")],
        [("k", b"x" * (MIN_SECRET_BYTES - 1))],
        [("k", b"x" * 32), ("k", b"y" * 32)],
        [("bad id", b"x" * 32)],
        [("", b"x" * 32)],
        [("k" * 65, b"x" * 32)],
        [("k", "x" * 32)],
    ],
)
def test_bad_keyrings(keys: list[tuple[str, bytes]]) -> None:
    with pytest.raises(ValueError):
        Keyring(keys)


def test_keyring_accessors_and_repr_hide_secrets() -> None:
    ring = Keyring([NEW, OLD])
    assert ring.primary_key_id == "k-new"
    assert ring.key_ids == ("k-new", "k-old")
    assert "k-old" in ring and "zz" not in ring and 3 not in ring
    assert "nnnn" not in repr(ring) and "oooo" not in repr(ring)
    with pytest.raises(ValueError):
        ring.mac(key_id="zz", domain=DOMAIN, data=b"")


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(st.text(max_size=8), json_values, max_size=6))
def test_verify_never_raises_on_hostile_objects(obj: dict[str, object]) -> None:
    ring = Keyring([NEW])
    assert ring.verify(obj, domain=DOMAIN) in set(Verification) - {Verification.OK}
    forged = dict(obj, key_id="k-new", mac="0" * 64)
    assert ring.verify(forged, domain=DOMAIN) in {Verification.BAD_SIGNATURE, Verification.MALFORMED}


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(st.text(min_size=1, max_size=8).filter(lambda k: k not in ("mac", "key_id")), json_values, max_size=6))
def test_sign_verify_roundtrip_through_json(obj: dict[str, object]) -> None:
    ring = Keyring([NEW, OLD])
    try:
        signed = ring.sign(obj, domain=DOMAIN)
    except ValueError:
        return  # lone surrogates
    wire = canonical_json(signed)
    assert ring.verify(json.loads(wire), domain=DOMAIN) is Verification.OK


# --------------------------------------------------------------------------- key file


def b64(b: bytes) -> str:
    return base64.b64encode(b).decode()


def test_parse_keyring_file_format() -> None:
    text = f"# rotated 2026-01\n\nk-new:{b64(NEW[1])}\r\n  k-old : {b64(OLD[1])}  \n"
    ring = parse_keyring(text)
    assert ring.key_ids == ("k-new", "k-old")
    assert ring.verify(Keyring([OLD]).sign({"a": 1}, domain=DOMAIN), domain=DOMAIN) is Verification.OK


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("", "no key"),
        ("# only a comment\n", "no key"),
        (f"k1 {b64(b'x' * 32)}", "line 1"),
        (f"bad id:{b64(b'x' * 32)}", "line 1"),
        (f"k1:{b64(b'x' * 31)}", "31 bytes"),
        ("k1:not base64!!", "base64"),
        (f"k1:{b64(b'x' * 32)[:-1]}", "base64"),
        (f"k1:{b64(b'x' * 32)}\nk1:{b64(b'y' * 32)}", "duplicate"),
        (f"#\nk1:{b64(b'x' * 32)}\nk2:", "line 3"),
    ],
)
def test_parse_keyring_refuses(text: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        parse_keyring(text)


def test_errors_never_echo_the_secret() -> None:
    secret = b64(b"s" * 20)
    with pytest.raises(ValueError) as info:
        parse_keyring(f"k1:{secret}")
    assert secret not in str(info.value)


def test_load_keyring(tmp_path: Path) -> None:
    f = tmp_path / "keys"
    f.write_text(f"k-new:{b64(NEW[1])}\nk-old:{b64(OLD[1])}\n", encoding="utf-8")
    assert load_keyring(f).key_ids == ("k-new", "k-old")
    assert load_keyring(str(f)).primary_key_id == "k-new"
    with pytest.raises(ValueError, match="directory"):
        load_keyring(tmp_path)
    with pytest.raises(OSError):
        load_keyring(tmp_path / "missing")
    (tmp_path / "short").write_text(f"k:{b64(b'x' * 16)}\n", encoding="utf-8")
    with pytest.raises(ValueError):
        load_keyring(tmp_path / "short")

"""Tests of edgewatch.core.identity: per-node Ed25519 keys, published key records, the owner
binding the wire relies on, and the key file with rotation."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edgewatch.core.identity import (
    BAD_KEY_PROOF,
    BAD_KEY_RECORD,
    KEY_CONFLICT,
    MAX_KEYS_PER_NODE,
    KeyRecordError,
    NodeKey,
    NodeKeyring,
    PublicKeys,
    format_key_record,
    key_id_of,
    load_or_create_key_file,
    parse_key_record,
    rotate_key_file,
)
from edgewatch.core.signing import Verification
from edgewatch.core.types import NodeName

DOMAIN = "edgewatch/test/v1"
A, B = NodeName("node-a"), NodeName("node-b")


def pair() -> tuple[NodeKeyring, NodeKeyring]:
    public = PublicKeys()
    return (NodeKeyring(node=A, keys=(NodeKey.generate(),), public=public),
            NodeKeyring(node=B, keys=(NodeKey.generate(),), public=public))


def test_sign_then_verify_bytes_and_objects() -> None:
    a, b = pair()
    key_id, sig = a.sign_bytes(b"hello", domain=DOMAIN)
    assert key_id == a.primary_key_id and len(sig) == 128 and len(key_id) == 32
    assert b.verify_bytes(key_id=key_id, mac=sig, data=b"hello", domain=DOMAIN) is Verification.OK
    assert b.owner(key_id) == A and b.owner("0" * 32) is None and b.owner(5) is None
    signed = a.sign({"x": 1, "y": [1, 2]}, domain=DOMAIN)
    assert b.verify(signed, domain=DOMAIN) is Verification.OK
    assert b.verify({**signed, "x": 2}, domain=DOMAIN) is Verification.BAD_SIGNATURE
    assert b.verify({k: v for k, v in signed.items() if k != "mac"}, domain=DOMAIN) is Verification.UNSIGNED
    assert b.verify([1], domain=DOMAIN) is Verification.MALFORMED


def test_domain_separation_and_tampering() -> None:
    a, b = pair()
    key_id, sig = a.sign_bytes(b"data", domain=DOMAIN)
    assert b.verify_bytes(key_id=key_id, mac=sig, data=b"data", domain="edgewatch/other/v1") is Verification.BAD_SIGNATURE
    assert b.verify_bytes(key_id=key_id, mac=sig, data=b"datA", domain=DOMAIN) is Verification.BAD_SIGNATURE
    flipped = ("1" if sig[0] == "0" else "0") + sig[1:]
    assert b.verify_bytes(key_id=key_id, mac=flipped, data=b"data", domain=DOMAIN) is Verification.BAD_SIGNATURE
    assert b.verify_bytes(key_id="f" * 32, mac=sig, data=b"data", domain=DOMAIN) is Verification.UNKNOWN_KEY
    assert b.verify_bytes(key_id=key_id, mac=sig[:-1], data=b"data", domain=DOMAIN) is Verification.MALFORMED
    assert b.verify_bytes(key_id=key_id, mac=sig.upper(), data=b"data", domain=DOMAIN) is Verification.MALFORMED


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(max_size=140), st.none(), st.integers()), st.one_of(st.text(max_size=140), st.binary()),
       st.binary(max_size=200))
def test_verify_bytes_never_raises_on_hostile_input(key_id: object, mac: object, data: bytes) -> None:
    a, _ = pair()
    assert a.verify_bytes(key_id=key_id, mac=mac, data=data, domain=DOMAIN) is not Verification.OK


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(st.text(max_size=8), st.one_of(st.none(), st.integers(), st.text(max_size=140),
                                                     st.floats()), max_size=6))
def test_verify_never_raises_on_hostile_objects(obj: dict[str, object]) -> None:
    a, _ = pair()
    assert a.verify(obj, domain=DOMAIN) is not Verification.OK


def test_key_id_is_the_keys_own() -> None:
    key = NodeKey.generate()
    assert key.key_id == key_id_of(key.public_raw)
    with pytest.raises(ValueError):
        key_id_of(b"short")
    assert "PRIVATE" not in repr(key) and key.key_id in repr(key)


def test_record_roundtrip_and_rotation_in_public_keys() -> None:
    old, new = NodeKey.generate(), NodeKey.generate()
    public = PublicKeys()
    assert public.update(A, format_key_record([old], node=A)) is True
    assert public.update(A, format_key_record([old], node=A)) is False  # unchanged
    assert public.update(A, format_key_record([new, old], node=A)) is True  # rotation: both accepted
    assert public.keys_of(A) == (new.key_id, old.key_id)
    assert public.owner(old.key_id) == A and public.owner(new.key_id) == A
    public.update(A, format_key_record([new], node=A))  # old withdrawn
    assert public.owner(old.key_id) is None
    public.remove(A)
    assert public.owner(new.key_id) is None and len(public) == 0


def test_a_copied_key_keeps_its_first_owner() -> None:
    """A key proven by two nodes (its private key was copied to both) is refused for the later
    one: key ids name keys, and a key has one owner."""
    key = NodeKey.generate()
    public = PublicKeys()
    public.update(A, format_key_record([key], node=A))
    with pytest.raises(KeyRecordError, match="already published by node-a") as refused:
        public.update(B, format_key_record([key], node=B))
    assert refused.value.reason == KEY_CONFLICT
    assert public.owner(key.key_id) == A and public.keys_of(B) == ()


def _line(key_id: str, raw: bytes, proof: str = "") -> str:
    return f"{key_id} {base64.b64encode(raw).decode()} {proof}\n"


@pytest.mark.parametrize(("text", "match", "reason"), [
    (None, "text", BAD_KEY_RECORD),
    ("", "no key", BAD_KEY_RECORD),
    ("x" * 2000, "over", BAD_KEY_RECORD),
    ("abc\n", "each key line", BAD_KEY_RECORD),
    ("0" * 32 + " !!!\n", "not base64", BAD_KEY_RECORD),
    (_line("0" * 32, b"x" * 31), "bytes", BAD_KEY_RECORD),
    (_line("0" * 32, b"x" * 32), "not the key's own", BAD_KEY_RECORD),
    (_line(key_id_of(b"x" * 32), b"x" * 32), "no proof of possession", BAD_KEY_PROOF),
    (_line(key_id_of(b"x" * 32), b"x" * 32, "ab" * 63), "not 128 lower-case hex", BAD_KEY_PROOF),
    (_line(key_id_of(b"x" * 32), b"x" * 32, "AB" * 64), "not 128 lower-case hex", BAD_KEY_PROOF),
    (_line(key_id_of(b"x" * 32), b"x" * 32, "ab" * 64 + " extra"), "each key line", BAD_KEY_RECORD),
])
def test_parse_key_record_refuses(text: object, match: str, reason: str) -> None:
    with pytest.raises(KeyRecordError, match=match) as refused:
        parse_key_record(text)
    assert refused.value.reason == reason


def test_parse_key_record_limits() -> None:
    keys = [NodeKey.generate() for _ in range(MAX_KEYS_PER_NODE + 1)]
    with pytest.raises(ValueError, match="at most"):
        parse_key_record(format_key_record(keys, node=A))
    with pytest.raises(ValueError, match="twice"):
        parse_key_record(format_key_record([keys[0], keys[0]], node=A))
    parsed = parse_key_record("\n" + format_key_record(keys[:2], node=A) + "\n")
    assert [k.key_id for k in parsed] == [keys[0].key_id, keys[1].key_id]
    assert all(len(k.proof) == 128 for k in parsed)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=400))
def test_parse_key_record_never_raises_anything_but_value_error(text: str) -> None:
    """Junk is refused with a message and a reason; a record that parses names each key by its own id."""
    try:
        parsed = parse_key_record(text)
    except KeyRecordError as exc:
        assert str(exc) and exc.reason in (BAD_KEY_RECORD, BAD_KEY_PROOF)
        return
    assert 1 <= len(parsed) <= MAX_KEYS_PER_NODE
    assert all(k.key_id == key_id_of(k.public_raw) for k in parsed)


def test_key_file_create_load_rotate(tmp_path: Path) -> None:
    path = tmp_path / "state" / "identity.key"
    first = load_or_create_key_file(path)
    assert len(first) == 1 and (os.stat(path).st_mode & 0o777) == 0o600
    assert [k.key_id for k in load_or_create_key_file(path)] == [first[0].key_id]  # stable across restarts
    rotated = rotate_key_file(path)
    assert len(rotated) == 2 and rotated[1].key_id == first[0].key_id
    again = rotate_key_file(path)
    assert [k.key_id for k in again][1:] == [rotated[0].key_id]  # only one old key is kept
    assert [k.key_id for k in load_or_create_key_file(path)] == [k.key_id for k in again]
    bad = tmp_path / "bad.key"
    bad.write_text("not a key")
    with pytest.raises(ValueError):
        load_or_create_key_file(bad)


def test_node_keyring_requires_keys_and_publishes_its_record() -> None:
    with pytest.raises(ValueError):
        NodeKeyring(node=A, keys=())
    key = NodeKey.generate()
    ring = NodeKeyring(node=A, keys=(key,))
    assert parse_key_record(ring.record())[0].key_id == key.key_id
    assert PublicKeys().update(A, ring.record()) is True  # its proofs verify for its own name
    assert ring.owner(key.key_id) == A and "PRIVATE" not in repr(ring)
    with pytest.raises(ValueError):
        ring.sign({"mac": "x"}, domain=DOMAIN)

"""The compact form of a signed statement (``edgewatch.core.compactstatement``): it carries the
heartbeat's JSON object whole (the origin's Ed25519 signature verifies over what it unpacks to),
in fewer bytes (less than half in a pool of 5); anything else is ``malformed``, and a changed field fails the
signature."""

from __future__ import annotations

import json

import msgspec
import pytest
from _keys import ring
from hypothesis import given, settings
from hypothesis import strategies as st

from edgewatch.core.compactstatement import pack_statement, unpack_statement
from edgewatch.core.heartbeat import decode_heartbeat, sign_heartbeat
from edgewatch.core.rejection import Rejected
from edgewatch.core.types import NodeName

ORIGIN = NodeName("edge-0007")
NAMES = st.lists(st.from_regex(r"edge-[0-9]{4}", fullmatch=True), max_size=12, unique=True)


@settings(max_examples=60)
@given(alive=NAMES, dead=NAMES, kubelet=st.booleans(), cloud=st.booleans(), seq=st.integers(0, 2**63 - 1),
       beacon=st.sampled_from(["", "0123456789abcdef0123456789abcdef"]), carrier=st.sampled_from(["", "edge-0001"]))
def test_a_statement_unpacks_to_the_object_its_origin_signed(alive: list[str], dead: list[str], kubelet: bool,
                                                             cloud: bool, seq: int, beacon: str, carrier: str) -> None:
    dead = [d for d in dead if d not in alive and d != ORIGIN]
    heartbeat = sign_heartbeat(origin=ORIGIN, incarnation=5, seq=seq, kubelet_ok=kubelet, cloud_ok=cloud,
                               alive=[NodeName(a) for a in alive], dead=[NodeName(d) for d in dead],
                               keyring=ring(ORIGIN), beacon=beacon, carrier=carrier if carrier != ORIGIN else "")
    packed = pack_statement(heartbeat)
    assert unpack_statement(packed) == heartbeat.to_wire()
    assert decode_heartbeat(unpack_statement(packed), keyring=ring(ORIGIN)) == heartbeat
    # the keys, the hex of the signature and key id, and the quotes go; the names stay
    assert len(packed) <= len(json.dumps(heartbeat.to_wire(), separators=(",", ":"))) - 150


def test_a_pool_of_five_statement_is_about_150_bytes() -> None:
    heartbeat = sign_heartbeat(origin=NodeName("a-1"), incarnation=1_795_947_807_373_895_000, seq=40_000,
                               kubelet_ok=True, cloud_ok=True, alive=[NodeName(f"a-{i}") for i in range(1, 6)],
                               dead=[], keyring=ring("a-1"), beacon="0123456789abcdef0123456789abcdef")
    compact, as_json = len(pack_statement(heartbeat)), len(json.dumps(heartbeat.to_wire(), separators=(",", ":")))
    assert compact <= 160 and compact < 0.4 * as_json, (compact, as_json)  # measured: 145 and 390


def test_a_changed_field_fails_the_origins_signature() -> None:
    heartbeat = sign_heartbeat(origin=ORIGIN, incarnation=1, seq=9, kubelet_ok=True, cloud_ok=True, alive=[ORIGIN],
                               dead=[], keyring=ring(ORIGIN))
    fields = msgspec.msgpack.decode(pack_statement(heartbeat))
    fields[7] = ["edge-0001"]  # a-relay names a neighbour dead that the origin did not
    with pytest.raises(Rejected) as refused:
        decode_heartbeat(unpack_statement(msgspec.msgpack.encode(fields)), keyring=ring(ORIGIN))
    assert refused.value.reason.value == "bad_signature"


@pytest.mark.parametrize("raw", [b"", b"\xc1", msgspec.msgpack.encode([4, "x"]), msgspec.msgpack.encode({"v": 4}),
                                 msgspec.msgpack.encode([True] * 12), b"\x91" * 10_000,
                                 # a str field of invalid UTF-8 (msgspec raises UnicodeDecodeError)
                                 b"\x9c\x04\xa3\xed\xa0\x80" + b"\x00" * 10])
def test_anything_else_is_malformed(raw: bytes) -> None:
    with pytest.raises(Rejected) as refused:
        unpack_statement(raw)
    assert refused.value.reason.value == "malformed"

"""edgewatch.core.seal: what the host of the pool coordinator (root on the node running etcd: any
key, any value) can and cannot make a node accept. Every forgery is written as that attacker
would: bytes put under a key of the leader's area, with the keys the attacker holds (a member
node's own, or none). The pool cache's codec on top of it: edgewatch.poolcache.layout."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from edgewatch.core.identity import NodeKey, NodeKeyring, PublicKeys
from edgewatch.core.seal import SealRejected, seal, unseal
from edgewatch.poolcache.feed import ObjectRejected
from edgewatch.poolcache.layout import CacheKeys, decode_marker, encode_marker
from edgewatch.poolcache.resources import ENDPOINTSLICES

PUBLISHED = PublicKeys()
LEADER = NodeKeyring(node="a-1", keys=[NodeKey.generate()], public=PUBLISHED)
#: A compromised pool member: its key is published (it is a real node), it is not the leader.
MEMBER = NodeKeyring(node="a-2", keys=[NodeKey.generate()], public=PUBLISHED)
#: A key nobody published (the coordinator host's own).
STRANGER = NodeKeyring(node="x", keys=[NodeKey.generate()])
#: A reader: holds every published key, not the leader's private key.
READER = NodeKeyring(node="a-3", keys=[NodeKey.generate()], public=PUBLISHED)

AREA = "/edgewatch/pools/a/nodes/a-1/"
KEY = f"{AREA}cache/discovery.k8s.io/v1/endpointslices/o/default/kubernetes-abcde".encode()
PAYLOAD = b'{"kind":"EndpointSlice","endpoints":[{"addresses":["10.0.0.1"]}]}'


def _reason(value: bytes, *, key: bytes = KEY, writer: str = "a-1") -> str:
    with pytest.raises(SealRejected) as err:
        unseal(value, key=key, writer=writer, verifier=READER)
    return err.value.reason


def test_the_leaders_value_is_accepted_under_its_key() -> None:
    assert unseal(seal(PAYLOAD, key=KEY, signer=LEADER), key=KEY, writer="a-1", verifier=READER) == PAYLOAD


def test_a_value_over_the_bound_is_refused_before_its_seal_is_read() -> None:
    sealed = seal(PAYLOAD, key=KEY, signer=LEADER)
    assert unseal(sealed, key=KEY, writer="a-1", verifier=READER, max_bytes=len(sealed)) == PAYLOAD
    for value in (sealed + b" ", b"x" * (len(sealed) + 1)):  # the junk is refused for its size, not its shape
        with pytest.raises(SealRejected) as err:
            unseal(value, key=KEY, writer="a-1", verifier=READER, max_bytes=len(sealed))
        assert err.value.reason == "too_large"


@pytest.mark.parametrize(("forgery", "reason"), [
    (lambda: PAYLOAD, "unsigned"),  # what anyone with etcd access wrote before seals
    (lambda: seal(PAYLOAD, key=KEY, signer=MEMBER), "not_writer"),  # a member's real key, the leader's area
    (lambda: seal(PAYLOAD, key=KEY, signer=STRANGER), "unknown_key"),  # the host's own key
    (lambda: seal(PAYLOAD, key=KEY[:-1] + b"f", signer=LEADER), "bad_signature"),  # moved from another key
    (lambda: seal(PAYLOAD, key=KEY, signer=LEADER)[:-3] + b"2\"}", "bad_signature"),  # one address changed
    (lambda: seal(PAYLOAD, key=KEY, signer=LEADER)[:60], "malformed"),  # cut inside the header
    (lambda: b"ewseal1 " + b"z" * 32 + b" " + b"0" * 128 + b"\n" + PAYLOAD, "malformed"),  # not hex
])
def test_forgeries_by_the_coordinators_host_are_refused(forgery, reason: str) -> None:  # type: ignore[no-untyped-def]
    assert _reason(forgery()) == reason


def test_a_value_of_another_leaders_area_is_not_accepted_in_this_one() -> None:
    """The host copies what a2 legitimately wrote while it led into a1's area (a replay across areas)."""
    other_key = KEY.replace(b"/nodes/a-1/", b"/nodes/a-2/")
    from_a2 = seal(PAYLOAD, key=other_key, signer=MEMBER)
    assert unseal(from_a2, key=other_key, writer="a-2", verifier=READER) == PAYLOAD
    assert _reason(from_a2) == "not_writer"


def test_markers_are_sealed_and_an_rv_must_be_decimal() -> None:
    keys = CacheKeys(AREA, ENDPOINTSLICES, "a-1")
    assert decode_marker(keys, keys.rv, encode_marker("42", key=keys.rv, signer=LEADER), verifier=READER) == "42"
    for value, reason in [(b"42", "unsigned"), (encode_marker("42", key=keys.epoch, signer=LEADER), "bad_signature"),
                          (encode_marker("4x", key=keys.rv, signer=LEADER), "resource_version"),
                          (encode_marker("9" * 600, key=keys.rv, signer=LEADER), "oversized"),
                          (encode_marker("42", key=keys.rv, signer=MEMBER), "not_writer")]:
        with pytest.raises(ObjectRejected) as err:
            decode_marker(keys, keys.rv, value, verifier=READER)
        assert err.value.reason == reason, value[:60]


@given(payload=st.binary(max_size=2_000), key=st.binary(min_size=1, max_size=300))
def test_any_payload_round_trips_under_any_key(payload: bytes, key: bytes) -> None:
    assert unseal(seal(payload, key=key, signer=LEADER), key=key, writer="a-1", verifier=READER) == payload


@given(st.data())
def test_changing_any_byte_of_a_sealed_value_is_refused(data: st.DataObject) -> None:
    sealed = bytearray(seal(PAYLOAD, key=KEY, signer=LEADER))
    i = data.draw(st.integers(0, len(sealed) - 1))
    sealed[i] ^= data.draw(st.integers(1, 255))
    with pytest.raises(SealRejected):
        unseal(bytes(sealed), key=KEY, writer="a-1", verifier=READER)


@given(st.binary(max_size=400))
def test_arbitrary_bytes_are_refused_with_a_reason_never_another_error(value: bytes) -> None:
    with pytest.raises(SealRejected) as err:
        unseal(value, key=KEY, writer="a-1", verifier=READER)
    assert err.value.reason in {"unsigned", "malformed", "unknown_key", "not_writer", "bad_signature"}

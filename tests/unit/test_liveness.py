"""Tests of edgewatch.core.pairkey and edgewatch.core.liveness (peer protocol v6's liveness
datagram): attacks first. Datagrams an attacker sends are built here byte by byte (int.to_bytes and
hmac directly), never with the module's packer; the pair keys the attacks need are derived as the
module docstring says, with cryptography's primitives directly."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from hypothesis import given, settings
from hypothesis import strategies as st

from edgewatch.core.identity import NodeKey
from edgewatch.core.liveness import (
    DATAGRAM_SIZE,
    Liveness,
    PeerSession,
    open_datagram,
    seal,
)
from edgewatch.core.pairkey import (
    ExchangeKey,
    ExchangeRecordError,
    derive_pair_keys,
    format_exchange_record,
    verify_exchange_record,
)
from edgewatch.core.rejection import Rejected, RejectReason
from edgewatch.core.types import NodeName

A, B, M = NodeName("a-1"), NodeName("a-2"), NodeName("a-9")
U32 = st.integers(min_value=1, max_value=2**32 - 1)


def raw_datagram(key: bytes, *, version: int = 6, flags: int = 3, statement: int = 0, epoch: int, seq: int,
                 echo_epoch: int = 0, echo: int = 0) -> bytes:
    """A datagram built from the documented layout, independently of the module's packer."""
    header = (version.to_bytes(1, "big") + flags.to_bytes(1, "big") + statement.to_bytes(2, "big")
              + epoch.to_bytes(4, "big") + seq.to_bytes(4, "big") + echo_epoch.to_bytes(4, "big")
              + echo.to_bytes(4, "big"))
    return header + hmac.new(key, b"edgewatch/liveness/v6\x00" + header, hashlib.sha256).digest()[:16]


def documented_keys(me: str, me_priv: X25519PrivateKey, peer: str, peer_pub: bytes) -> tuple[bytes, bytes]:
    """(send, receive) derived as the pairkey docstring says, with cryptography directly."""
    from cryptography.hazmat.primitives import serialization
    mine = me_priv.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    secret = me_priv.exchange(X25519PublicKey.from_public_bytes(peer_pub))
    (n1, p1), (n2, p2) = sorted([(me, mine), (peer, peer_pub)])
    info = b"edgewatch/pair-keys/v1\x00" + n1.encode() + b"\x00" + n2.encode() + b"\x00" + p1 + p2
    okm = HKDF(algorithm=hashes.SHA256(), length=64, salt=None, info=info).derive(secret)
    return (okm[:32], okm[32:]) if me == n1 else (okm[32:], okm[:32])


@pytest.fixture(scope="module")
def keys() -> dict[str, ExchangeKey]:
    return {n: ExchangeKey.generate() for n in (A, B, M)}


def pair(keys: dict[str, ExchangeKey], me: str, peer: str):  # type: ignore[no-untyped-def]
    return derive_pair_keys(me=me, my_key=keys[me], peer=peer, peer_public_raw=keys[peer].public_raw)


# --------------------------------------------------------------------------- pair keys


def test_two_nodes_derive_the_same_two_directional_keys_and_nobody_else_does(keys: dict[str, ExchangeKey]) -> None:
    ab, ba = pair(keys, A, B), pair(keys, B, A)
    assert ab.send == ba.receive and ab.receive == ba.send and ab.send != ab.receive
    assert len(ab.send) == 32 and "PairKeys(...)" == repr(ab)
    documented = documented_keys(A, keys[A]._key, B, keys[B].public_raw)
    assert (ab.send, ab.receive) == documented
    # M, a member with its own keys, holds every public key and none of a-1's or a-2's private ones
    assert pair(keys, M, A).send not in (ab.send, ab.receive)
    assert pair(keys, M, B).send not in (ab.send, ab.receive)


def test_a_copied_exchange_key_derives_nothing_of_the_real_pair(keys: dict[str, ExchangeKey]) -> None:
    """M publishes a-1's exchange public key under its own name: a-2 derives keys for (a-2, a-9)
    that differ from (a-2, a-1)'s, and M, without a-1's private key, cannot compute them anyway."""
    as_m = derive_pair_keys(me=B, my_key=keys[B], peer=M, peer_public_raw=keys[A].public_raw)
    real = pair(keys, B, A)
    assert {as_m.send, as_m.receive}.isdisjoint({real.send, real.receive})


@pytest.mark.parametrize("bad", [b"\x00" * 32, (1).to_bytes(32, "little")])
def test_a_low_order_point_is_refused(keys: dict[str, ExchangeKey], bad: bytes) -> None:
    with pytest.raises(ValueError):
        derive_pair_keys(me=A, my_key=keys[A], peer=B, peer_public_raw=bad)


def test_pair_keys_need_two_different_node_names(keys: dict[str, ExchangeKey]) -> None:
    for me, peer in ((A, A), ("Not A Name", B), (A, "")):
        with pytest.raises(ValueError):
            derive_pair_keys(me=me, my_key=keys[A], peer=peer, peer_public_raw=keys[B].public_raw)


def test_the_exchange_key_round_trips_through_its_private_bytes(keys: dict[str, ExchangeKey]) -> None:
    again = ExchangeKey.from_raw(keys[A].private_raw())
    assert again.public_raw == keys[A].public_raw and "ExchangeKey(" in repr(again)
    with pytest.raises(ValueError):
        ExchangeKey.from_raw(b"short")


def test_an_exchange_record_binds_the_key_to_its_node_by_an_identity_key(keys: dict[str, ExchangeKey]) -> None:
    a_id, m_id = NodeKey.generate(), NodeKey.generate()
    a_keys = {a_id.key_id: a_id._key.public_key()}
    record = format_exchange_record(keys[A], identity=a_id, node=A)
    assert verify_exchange_record(node=A, text=record, identity_keys=a_keys) == keys[A].public_raw
    # the same record read as another node's, or checked against another node's identity keys
    with pytest.raises(ExchangeRecordError):
        verify_exchange_record(node=M, text=record, identity_keys=a_keys)
    with pytest.raises(ExchangeRecordError):
        verify_exchange_record(node=A, text=record, identity_keys={m_id.key_id: m_id._key.public_key()})
    # M swaps its own exchange key into a-1's record (it cannot sign a-1's binding)
    b64, key_id, proof = record.split()
    swapped = f"{base64.b64encode(keys[M].public_raw).decode()} {key_id} {proof}\n"
    with pytest.raises(ExchangeRecordError):
        verify_exchange_record(node=A, text=swapped, identity_keys=a_keys)
    # M signs a binding of its key to a-1 with its own identity key, listed under a-1's key id
    forged = format_exchange_record(keys[M], identity=m_id, node=A).split()
    with pytest.raises(ExchangeRecordError):
        verify_exchange_record(node=A, text=f"{forged[0]} {key_id} {forged[2]}", identity_keys=a_keys)


@pytest.mark.parametrize("text", [None, 7, "", "x" * 300, "AAAA abc def", "=" * 44 + " " + "0" * 32 + " " + "0" * 128])
def test_a_malformed_exchange_record_is_refused(text: object) -> None:
    with pytest.raises(ExchangeRecordError):
        verify_exchange_record(node=A, text=text, identity_keys={})


# --------------------------------------------------------------------------- the datagram


@settings(max_examples=200, deadline=None)
@given(U32, U32, U32, st.integers(0, 0xFFFF), st.booleans(), st.booleans())
def test_a_datagram_is_the_documented_bytes_and_reads_back(epoch: int, seq: int, echo_epoch: int, statement: int,
                                                            kubelet: bool, cloud: bool) -> None:
    key = b"k" * 32
    echo = seq  # any value; an echo comes with its epoch
    fields = Liveness(epoch=epoch, seq=seq, echo_epoch=echo_epoch if echo else 0, echo=echo, statement=statement,
                      kubelet_ok=kubelet, cloud_ok=cloud)
    data = seal(fields, key=key)
    assert len(data) == DATAGRAM_SIZE == 36
    assert data == raw_datagram(key, flags=int(kubelet) | 2 * int(cloud), statement=statement, epoch=epoch, seq=seq,
                                echo_epoch=fields.echo_epoch, echo=echo)
    assert open_datagram(data, key=key) == fields


@settings(max_examples=100, deadline=None)
@given(st.integers(0, DATAGRAM_SIZE * 8 - 1))
def test_any_flipped_bit_is_refused_before_a_field_is_read(bit: int) -> None:
    key = b"k" * 32
    data = bytearray(raw_datagram(key, epoch=7, seq=9, echo_epoch=3, echo=4))
    data[bit // 8] ^= 1 << (bit % 8)
    with pytest.raises(Rejected) as info:
        open_datagram(bytes(data), key=key)
    assert info.value.reason is RejectReason.BAD_SIGNATURE


def test_a_datagram_reflected_to_its_sender_is_refused(keys: dict[str, ExchangeKey]) -> None:
    """a-1's datagram to a-2, sent back to a-1 as if from a-2: a-1 reads a-2's with its receive key."""
    ab = pair(keys, A, B)
    data = raw_datagram(ab.send, epoch=5, seq=1)
    assert open_datagram(data, key=pair(keys, B, A).receive).seq == 1
    with pytest.raises(Rejected):
        open_datagram(data, key=ab.receive)


def test_a_member_cannot_forge_a_datagram_between_two_others(keys: dict[str, ExchangeKey]) -> None:
    """M, with its own keys and every public key, MACs a datagram 'from a-1' to a-2 with every key it
    can derive: each is refused."""
    receive = pair(keys, B, A).receive
    for key in (pair(keys, M, A).send, pair(keys, M, B).send, pair(keys, M, A).receive, keys[A].public_raw):
        with pytest.raises(Rejected) as info:
            open_datagram(raw_datagram(key, epoch=5, seq=1, echo_epoch=9, echo=1), key=receive)
        assert info.value.reason is RejectReason.BAD_SIGNATURE


@pytest.mark.parametrize(("data", "reason"), [
    (b"", RejectReason.MALFORMED),
    (b"\x06" * 35, RejectReason.MALFORMED),
    (b"\x06" * 37, RejectReason.OVERSIZED),
    (b"\x06" * 1500, RejectReason.OVERSIZED),
])
def test_a_datagram_of_another_size_is_refused(data: bytes, reason: RejectReason) -> None:
    with pytest.raises(Rejected) as info:
        open_datagram(data, key=b"k" * 32)
    assert info.value.reason is reason


@pytest.mark.parametrize(("kwargs", "reason"), [
    ({"version": 5}, RejectReason.VERSION),
    ({"version": 7}, RejectReason.VERSION),
    ({"flags": 0x04}, RejectReason.MALFORMED),
    ({"flags": 0x83}, RejectReason.MALFORMED),
    ({"epoch": 0}, RejectReason.MALFORMED),
    ({"echo_epoch": 0, "echo": 3}, RejectReason.MALFORMED),
    ({"echo_epoch": 3, "echo": 0}, RejectReason.MALFORMED),
    ({"seq": 0}, RejectReason.MALFORMED),
])
def test_an_authentic_datagram_out_of_its_rules_is_refused(kwargs: dict[str, int], reason: RejectReason) -> None:
    fields = {"epoch": 5, "seq": 1, **kwargs}
    with pytest.raises(Rejected) as info:
        open_datagram(raw_datagram(b"k" * 32, **fields), key=b"k" * 32)
    assert info.value.reason is reason


@pytest.mark.parametrize("kwargs", [{"epoch": 0, "seq": 1}, {"epoch": 1, "seq": -1}, {"epoch": 1, "seq": 0}, {"epoch": 2**32, "seq": 1},
                                    {"epoch": 1, "seq": 1, "statement": 2**16}, {"epoch": True, "seq": 1}])
def test_fields_out_of_range_are_refused_on_construction(kwargs: dict[str, int]) -> None:
    with pytest.raises(ValueError):
        Liveness(**kwargs)


# --------------------------------------------------------------------------- sessions


def test_two_sessions_prove_each_other_alive_after_one_round_trip() -> None:
    a, b = PeerSession(peer=B, my_epoch=11), PeerSession(peer=A, my_epoch=22)
    a, to_b = a.next_datagram(statement=1, kubelet_ok=True, cloud_ok=True)
    b, seen = b.admit(to_b)
    assert seen.new and not seen.alive  # a-1 echoes nothing of a-2's yet
    b, to_a = b.next_datagram(statement=1, kubelet_ok=True, cloud_ok=False)
    assert (to_a.echo_epoch, to_a.echo) == (11, 1)
    a, seen = a.admit(to_a)
    assert seen.new and seen.alive
    a, to_b = a.next_datagram(statement=2, kubelet_ok=True, cloud_ok=True)
    b, seen = b.admit(to_b)
    assert seen.new and seen.alive
    b, again = b.admit(to_b)
    assert not again.new and not again.alive  # the same datagram counts once


def test_a_delayed_or_recorded_datagram_never_proves_a_dead_peer_alive() -> None:
    a, b = PeerSession(peer=B, my_epoch=11), PeerSession(peer=A, my_epoch=22)
    recorded = []
    for _ in range(10):  # both alive: a-2's datagrams are recorded by an attacker, some never arrive
        a, to_b = a.next_datagram(statement=0, kubelet_ok=True, cloud_ok=True)
        b, _ = b.admit(to_b)
        b, to_a = b.next_datagram(statement=0, kubelet_ok=True, cloud_ok=True)
        recorded.append(to_a)
        if to_a.seq % 3:
            a, _ = a.admit(to_a)
    for _ in range(5):  # a-2 dies; a-1 goes on sending
        a, _ = a.next_datagram(statement=0, kubelet_ok=True, cloud_ok=True)
    for old in recorded:  # the attacker plays back what it recorded, the lost ones included
        a, seen = a.admit(old)
        assert not seen.alive
    # a-2's agent restarted (new epoch): a recorded datagram of the old epoch is nothing now,
    # and the new epoch must prove itself before it replaces the old one
    assert a.their_epoch == 22
    a, seen = a.admit(Liveness(epoch=33, seq=1))
    assert seen == type(seen)(new=False, alive=False) and a.their_epoch == 22
    a, seen = a.admit(Liveness(epoch=33, seq=2, echo_epoch=11, echo=a.sent))
    assert seen.new and seen.alive and a.their_epoch == 33


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["send", "deliver", "dup", "drop"]), st.integers(0, 20)), max_size=80))
def test_every_datagram_counts_at_most_once_and_alive_only_with_a_recent_echo(ops: list[tuple[str, int]]) -> None:
    """Random sends, late deliveries, duplicates and drops between two sessions: a datagram is new at
    most once, and it proves the peer alive only if it echoes one of the receiver's last 3 sent seqs."""
    a, b = PeerSession(peer=B, my_epoch=11), PeerSession(peer=A, my_epoch=22)
    in_flight: list[Liveness] = []
    counted: set[int] = set()
    for op, pick in ops:
        if op == "send":
            b, to_a = b.next_datagram(statement=0, kubelet_ok=True, cloud_ok=True)
            in_flight.append(to_a)
            a, to_b = a.next_datagram(statement=0, kubelet_ok=True, cloud_ok=True)
            b, _ = b.admit(to_b)
        elif in_flight:
            dgram = in_flight[pick % len(in_flight)]
            if op == "drop":
                in_flight.remove(dgram)
                continue
            if op == "deliver":
                in_flight.remove(dgram)
            sent_before = a.sent
            a, seen = a.admit(dgram)
            if seen.new:
                assert dgram.seq not in counted
                counted.add(dgram.seq)
            if seen.alive:
                assert dgram.echo_epoch == 11 and sent_before - 3 < dgram.echo <= sent_before



def test_a_recorded_old_epoch_replayed_to_a_restarted_node_does_not_lock_the_pair_out() -> None:
    """An attacker records one datagram of a-2's earlier epoch and sprays it at a-1 right after
    a-1's agent restarted (a fresh session): a-1 takes that epoch for now, but a-2's real datagrams
    replace it, and one round trip later each proves the other alive."""
    a = PeerSession(peer=B, my_epoch=11)  # a-1 restarted: its old epoch was 10
    b = PeerSession(peer=A, my_epoch=22, sent=50, their_epoch=10, high=49, seen=1, confirmed=True)
    recorded = Liveness(epoch=21, seq=40, echo_epoch=10, echo=7)  # a-2's old epoch, echoing a-1's old one
    a, seen = a.admit(recorded)
    assert seen.new and not seen.alive and not a.confirmed
    proofs = []
    for _ in range(3):
        a, to_b = a.next_datagram(statement=0, kubelet_ok=True, cloud_ok=True)
        b, seen_b = b.admit(to_b)
        a, _ = a.admit(recorded)  # sprayed again and again
        b, to_a = b.next_datagram(statement=0, kubelet_ok=True, cloud_ok=True)
        a, seen_a = a.admit(to_a)
        proofs.append((seen_a.alive, seen_b.alive))
    assert proofs[-1] == (True, True) and a.their_epoch == 22 and a.confirmed and b.confirmed
    a, seen = a.admit(recorded)  # a confirmed epoch gives way only to a proof
    assert not seen.new and a.their_epoch == 22

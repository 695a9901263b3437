"""Tests of edgewatch.core.wire (protocol v2): round trips, the frame (MAC over
bytes before parsing), every rejection reason, per-heartbeat results,
hostile-input fuzzing, the clock-free replay guard, ages, the heartbeat book
and gossip relay selection."""

from __future__ import annotations

import json
import math
import random
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from _keys import ring

from edgewatch.core.quorum import Vote
from edgewatch.core.signing import Signer, canonical_json
from edgewatch.core.types import NodeName
from edgewatch.core.identity import NodeKey, NodeKeyring, PublicKeys, format_key_record
from edgewatch.core.book import Freshness, HeartbeatBook, select_relays
from edgewatch.core.wire import (
    ENVELOPE_DOMAIN,
    ENVELOPE_MAGIC,
    HEARTBEAT_DOMAIN,
    MAX_AGE_S,
    MAX_HEARTBEATS_PER_ENVELOPE,
    MAX_NAMES_PER_LIST,
    PROTOCOL_VERSION,
    STATEMENT_VERSION,
    Heartbeat,
    Rejected,
    RejectReason,
    ReplayGuard,
    WireConfig,
    decode_envelope,
    decode_heartbeat,
    encode_envelope,
    sign_heartbeat,
)

EPOCH = 1_700_000_000_000_000_000
KID = ring("node-a").primary_key_id.encode()
ZSIG = b"0" * 128


def unpublished(node: str) -> NodeKeyring:
    """A keyring signing as ``node`` with a key nobody published."""
    return NodeKeyring(node=NodeName(node), keys=(NodeKey.generate(),), public=PublicKeys())

A, B, C = NodeName("node-a"), NodeName("node-b"), NodeName("node-c")

_counter = iter(range(1, 10**9))


def fresh_nonce() -> str:
    return f"{next(_counter):032x}"


def hb(
    origin: str = "node-a",
    *,
    seq: int = 1,
    inc: int = 1,
    alive: tuple[str, ...] = ("node-a", "node-b"),
    dead: tuple[str, ...] = ("node-c",),
    keyring: Signer | None = None,
) -> Heartbeat:
    return sign_heartbeat(
        origin=NodeName(origin),
        incarnation=inc,
        seq=seq,
        kubelet_ok=True,
        cloud_ok=False,
        alive=[NodeName(x) for x in alive],
        dead=[NodeName(x) for x in dead],
        keyring=keyring or ring(origin),
    )


def env(
    *,
    sender: str = "node-a",
    receiver: str = "node-b",
    epoch: int = EPOCH,
    seq: int | None = None,
    nonce: str | None = None,
    reply_to: str | None = None,
    own: Heartbeat | None = None,
    own_age: float = 0.0,
    relayed: tuple[Heartbeat, ...] = (),
    relay_age: float = 1.0,
    keyring: Signer | None = None,
) -> bytes:
    keyring = keyring or ring(sender)
    return encode_envelope(
        sender=NodeName(sender),
        receiver=NodeName(receiver),
        epoch=epoch,
        seq=next(_counter) if seq is None else seq,
        nonce=nonce or fresh_nonce(),
        reply_to=reply_to,
        own=own or hb(sender, keyring=keyring),
        own_age_s=own_age,
        relayed=[(h, relay_age) for h in relayed],
        keyring=keyring,
    )


def frame(body: bytes, *, keyring: Signer | None = None, domain: str = ENVELOPE_DOMAIN) -> bytes:
    """Sign raw body bytes into a frame (no checks: a key holder's junk); node-a's key by default."""
    keyring = keyring or ring("node-a")
    key_id, mac = keyring.sign_bytes(body, domain=domain)
    return ENVELOPE_MAGIC + f" {key_id} {mac}\n".encode() + body


def raw_envelope(*, heartbeats: list[object], ages: list[object] | None = None, keyring: Signer | None = None,
                 **overrides: object) -> bytes:
    """An envelope built by hand (signed, but not checked by the encoder)."""
    payload: dict[str, object] = {
        "v": PROTOCOL_VERSION,
        "sender": "node-a",
        "receiver": "node-b",
        "epoch": EPOCH,
        "seq": next(_counter),
        "nonce": fresh_nonce(),
        "reply_to": None,
        "heartbeats": heartbeats,
        "ages": ages if ages is not None else [0.0] * len(heartbeats) if isinstance(heartbeats, list) else [0.0],
        "beacon": "",
        "versions": [4, PROTOCOL_VERSION],
    }
    payload.update(overrides)
    return frame(canonical_json({k: v for k, v in payload.items() if v is not ...}), keyring=keyring)


def split(raw: bytes) -> tuple[bytes, dict[str, Any]]:
    header, body = raw.split(b"\n", 1)
    return header, json.loads(body)


def dec(
    raw: bytes,
    *,
    receiver: str = "node-b",
    guard: ReplayGuard | None = None,
    keyring: Signer | None = None,
    max_bytes: int = 65_536,
    **kw: Any,
):  # type: ignore[no-untyped-def]
    return decode_envelope(
        raw,
        keyring=keyring or ring(receiver),
        receiver=NodeName(receiver),
        max_bytes=max_bytes,
        guard=guard if guard is not None else ReplayGuard(),
        **kw,
    )


def reason_of(fn: Callable[[], object]) -> RejectReason:
    with pytest.raises(Rejected) as info:
        fn()
    assert info.value.detail  # always explained
    assert len(info.value.detail) <= 300
    return info.value.reason


def signed_hb_dict(**overrides: object) -> dict[str, object]:
    payload: dict[str, object] = {
        "v": STATEMENT_VERSION,
        "origin": "node-c",
        "incarnation": 1,
        "seq": 1,
        "kubelet_ok": True,
        "cloud_ok": True,
        "alive": ["node-c"],
        "dead": [],
        "beacon": "",
    }
    payload.update(overrides)
    origin = payload.get("origin")
    signer = ring(origin if isinstance(origin, str) else "node-c")
    return signer.sign({k: v for k, v in payload.items() if v is not ...}, domain=HEARTBEAT_DOMAIN)


# --------------------------------------------------------------------------- round trips


def test_roundtrip_frame_and_canonical_body() -> None:
    own = hb("node-a")
    relay = hb("node-c", alive=("node-c",), dead=())
    nonce = fresh_nonce()
    raw = encode_envelope(sender=A, receiver=B, epoch=EPOCH, seq=7, nonce=nonce, own=own, own_age_s=0.25,
                          relayed=[(relay, 2.5)], keyring=ring("node-a"))
    header, body = raw.split(b"\n", 1)
    words = header.split(b" ")
    assert words[0] == ENVELOPE_MAGIC and words[1] == KID and len(words[2]) == 128
    assert canonical_json(json.loads(body)) == body  # the body is canonical JSON
    assert b"sent_at" not in raw  # no wall-clock time on the wire at all
    d = dec(raw)
    assert (d.sender, d.receiver, d.epoch, d.seq, d.nonce, d.reply_to, d.key_id) == (A, B, EPOCH, 7, nonce, None,
                                                                                      KID.decode())
    assert d.own == own and d.own_age_s == 0.25
    assert [r.accepted for r in d.relayed] == [True]
    assert d.relayed[0].heartbeat == relay and d.relayed[0].index == 1 and d.relayed[0].age_s == 2.5
    assert d.heartbeats == (own, relay)


def test_relayed_heartbeat_still_verifies_after_two_hops() -> None:
    original = hb("node-a", seq=7)
    at_b = dec(env(sender="node-a", receiver="node-b", own=original))
    assert at_b.own == original
    raw = env(sender="node-b", receiver="node-c", relayed=(at_b.own,))
    at_c = dec(raw, receiver="node-c")
    assert at_c.relayed[0].heartbeat == original


def test_secondary_key_is_accepted_and_rotated_out_key_is_not() -> None:
    public = PublicKeys()
    new, old = NodeKey.generate(), NodeKey.generate()
    receiver = NodeKeyring(node=B, keys=(NodeKey.generate(),), public=public)
    public.update(A, format_key_record([new, old], node=A))  # a rotation in progress: both published
    old_signer = NodeKeyring(node=A, keys=(old,))
    old_signer.public.add_own(A, [old])
    raw = env(keyring=old_signer, own=hb("node-a", keyring=old_signer))
    assert dec(raw, keyring=receiver).key_id == old.key_id
    public.update(A, format_key_record([new], node=A))  # the rotation ends: the old key is withdrawn
    assert reason_of(lambda: dec(raw, keyring=receiver)) is RejectReason.UNKNOWN_KEY


def test_a_node_cannot_sign_as_another() -> None:
    """node-c signs an envelope and a heartbeat claiming to be node-a with its own, published key."""
    forged_env = frame(canonical_json({
        "v": PROTOCOL_VERSION, "sender": "node-a", "receiver": "node-b", "epoch": EPOCH, "seq": 1,
        "nonce": fresh_nonce(), "reply_to": None, "heartbeats": [hb("node-a").to_wire()], "ages": [0.0], "beacon": "",
        "versions": [4, PROTOCOL_VERSION]}),
        keyring=ring("node-c"))
    assert reason_of(lambda: dec(forged_env)) is RejectReason.SENDER_MISMATCH
    forged_hb = ring("node-c").sign({"v": STATEMENT_VERSION, "origin": "node-a", "incarnation": 1, "seq": 1,
                                     "kubelet_ok": True, "cloud_ok": True, "alive": ["node-a"], "dead": [], "carrier": "", "beacon": ""},
                                    domain=HEARTBEAT_DOMAIN)
    assert reason_of(lambda: decode_heartbeat(forged_hb, keyring=ring("node-b"))) is RejectReason.SENDER_MISMATCH


heartbeat_strategy = st.builds(
    lambda origin, inc, seq, k, c, names, dead_mask: sign_heartbeat(
        origin=origin,
        incarnation=inc,
        seq=seq,
        kubelet_ok=k,
        cloud_ok=c,
        alive=[n for n, m in zip(names, dead_mask) if not m],
        dead=[n for n, m in zip(names, dead_mask) if m],
        keyring=ring(origin),
    ),
    st.from_regex(r"[a-z0-9]([a-z0-9-]{0,10}[a-z0-9])?(\.[a-z0-9]{1,5})?", fullmatch=True).map(NodeName),
    st.integers(0, 2**63 - 1),
    st.integers(0, 2**63 - 1),
    st.booleans(),
    st.booleans(),
    st.lists(st.from_regex(r"[a-z][a-z0-9-]{0,8}[a-z0-9]", fullmatch=True).map(NodeName), unique=True, max_size=12),
    st.lists(st.booleans(), min_size=12, max_size=12),
)


@settings(max_examples=60, deadline=None)
@given(heartbeat_strategy, st.lists(st.tuples(heartbeat_strategy, st.floats(0, 30)), max_size=5),
       st.integers(0, 2**63 - 1), st.integers(0, 2**63 - 1))
def test_roundtrip_property(own: Heartbeat, relayed: list[tuple[Heartbeat, float]], epoch: int, seq: int) -> None:
    assume(own.origin != "node-z")
    raw = encode_envelope(sender=own.origin, receiver=NodeName("node-z"), epoch=epoch, seq=seq, nonce=fresh_nonce(),
                          own=own, relayed=relayed, keyring=ring(own.origin))
    d = dec(raw, receiver="node-z")
    assert d.own == own and (d.epoch, d.seq) == (epoch, seq)
    assert [(r.heartbeat, r.age_s) for r in d.relayed] == [(h, round(a, 3)) for h, a in relayed]
    for h in [own, *(h for h, _ in relayed)]:
        assert decode_heartbeat(h.to_wire(), keyring=ring("node-z")) == h


# --------------------------------------------------------------------------- encoder and builders


@pytest.mark.parametrize(
    "kwargs",
    [
        {"origin": NodeName("Node-A")},
        {"origin": NodeName("")},
        {"origin": NodeName("a" * 254)},
        {"origin": 5},
        {"incarnation": -1},
        {"incarnation": 2**63},
        {"seq": True},
        {"seq": 1.0},
        {"kubelet_ok": 1},
        {"alive": [NodeName("x")], "dead": [NodeName("x")]},
        {"alive": [NodeName("bad_name")]},
        {"alive": [NodeName(f"n{i}") for i in range(MAX_NAMES_PER_LIST + 1)]},
        {"alive": [1, "a"]},
    ],
)
def test_sign_heartbeat_refuses_bad_input(kwargs: dict[str, object]) -> None:
    args: dict[str, object] = dict(
        origin=A, incarnation=1, seq=1, kubelet_ok=True, cloud_ok=True, alive=[], dead=[], keyring=ring(A)
    )
    args.update(kwargs)
    with pytest.raises(ValueError):
        sign_heartbeat(**args)  # type: ignore[arg-type]


def test_sign_heartbeat_sorts_and_dedups_and_votes() -> None:
    h = hb(alive=("node-b", "node-a", "node-b"), dead=())
    assert h.alive == (A, B)
    assert h.order == (1, 1)
    assert "sent_at" not in h.to_wire()
    assert h.vote(observed_at=5.0) == Vote(observer=A, observed_at=5.0, alive=frozenset({A, B}), dead=frozenset())


@pytest.mark.parametrize(
    "kwargs",
    [
        {"sender": "node-b"},  # == receiver
        {"nonce": "ABCDEF" * 5 + "00"},
        {"nonce": "00"},
        {"reply_to": "00"},
        {"epoch": -1},
        {"epoch": True},
        {"seq": 2**63},
        {"seq": 1.5},
        {"own_age_s": -0.1},
        {"own_age_s": math.nan},
        {"own_age_s": MAX_AGE_S + 1},
        {"own": "other"},
        {"relayed": "too-many"},
        {"receiver": "Bad"},
    ],
)
def test_encode_envelope_refuses_bad_input(kwargs: dict[str, object]) -> None:
    args: dict[str, Any] = dict(sender=A, receiver=B, epoch=EPOCH, seq=1, nonce=fresh_nonce(), own=hb(), relayed=(),
                                keyring=ring(A))
    if kwargs.get("own") == "other":
        kwargs = {"own": hb("node-c")}
    if kwargs.get("relayed") == "too-many":
        kwargs = {"relayed": tuple((hb("node-c", seq=i), 0.0) for i in range(MAX_HEARTBEATS_PER_ENVELOPE))}
    args.update(kwargs)
    with pytest.raises(ValueError):
        encode_envelope(**args)


def test_encode_envelope_respects_max_bytes() -> None:
    raw = env(seq=1)
    with pytest.raises(ValueError):
        encode_envelope(sender=A, receiver=B, epoch=EPOCH, seq=1, nonce=fresh_nonce(), own=hb(), keyring=ring(A),
                        max_bytes=len(raw) - 1)


# --------------------------------------------------------------------------- rejection reasons


def test_oversized_is_refused_before_anything_else() -> None:
    raw = env()
    assert reason_of(lambda: dec(raw, max_bytes=len(raw) - 1)) is RejectReason.OVERSIZED
    assert reason_of(lambda: dec(b"x" * 100, max_bytes=99)) is RejectReason.OVERSIZED
    assert dec(raw, max_bytes=len(raw)).sender == A


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"not json",
        b"\xff\xfe{}",
        b'{"v": 2, "sender": "node-a"}',  # JSON without a frame (a v1 agent)
        b"[1, 2]",
        b"edgewatch-envelope " + KID + b" " + ZSIG + b"\n{}",  # no version in the magic
        b"edgewatch-envelope/vX " + KID + b" " + ZSIG + b"\n{}",  # not a version number
        # an older agent's magic (v2, v3) is VERSION: tests/unit/test_wire_version_policy.py
        ENVELOPE_MAGIC + b" " + KID + b" " + ZSIG + b" extra\n{}",  # too many words
        ENVELOPE_MAGIC + b" " + KID + b" \xff\xfe\n{}",  # not ASCII
        ENVELOPE_MAGIC + b" bad/key " + ZSIG + b"\n{}",  # key id with a slash
        ENVELOPE_MAGIC + b" " + KID + b" " + ZSIG + b" " * 300 + b"\n{}",  # header too long
        ENVELOPE_MAGIC + b"  " + ZSIG + b"\n{}",  # empty key id
    ],
    # fixed ids: KID is a fresh random key id, and pytest-xdist's workers must collect one list
    ids=["empty", "not-json", "not-utf8", "no-frame", "json-list", "no-version", "bad-version",
         "extra-word", "not-ascii", "slash-in-key-id", "header-too-long", "empty-key-id"],
)
def test_malformed_frames(raw: bytes) -> None:
    assert reason_of(lambda: dec(raw, max_bytes=1_000_000)) is RejectReason.MALFORMED


@pytest.mark.parametrize("raw", [ENVELOPE_MAGIC + b"\n{}", ENVELOPE_MAGIC + b" " + KID + b"\n{}"],
                         ids=["no-key-id", "no-signature"])
def test_unsigned(raw: bytes) -> None:
    assert reason_of(lambda: dec(raw)) is RejectReason.UNSIGNED


def test_unknown_key_and_bad_signature() -> None:
    gone = unpublished("node-a")
    assert reason_of(lambda: dec(env(keyring=gone))) is RejectReason.UNKNOWN_KEY
    header, body = env().split(b"\n", 1)
    tampered = body.replace(b'"seq":', b'"seq":1', 1)  # tamper after signing
    assert reason_of(lambda: dec(header + b"\n" + tampered)) is RejectReason.BAD_SIGNATURE
    obj = json.loads(body)
    obj["heartbeats"][0]["seq"] = 99  # tamper a covered heartbeat
    assert reason_of(lambda: dec(header + b"\n" + canonical_json(obj))) is RejectReason.BAD_SIGNATURE
    words = header.split(b" ")
    zero = b" ".join([words[0], words[1], ZSIG])
    assert reason_of(lambda: dec(zero + b"\n" + body)) is RejectReason.BAD_SIGNATURE
    short = b" ".join([words[0], words[1], b"abc"])
    assert reason_of(lambda: dec(short + b"\n" + body)) is RejectReason.MALFORMED
    # a heartbeat-domain MAC does not pass as an envelope MAC (domain separation)
    assert reason_of(lambda: dec(frame(body, domain=HEARTBEAT_DOMAIN))) is RejectReason.BAD_SIGNATURE


@pytest.mark.parametrize("body", [b"not json at all", b"[" * 100_000, b'{"a":' * 50_000, b'{"x": NaN}', b"\xff"])
def test_nothing_is_parsed_before_the_mac_matches(body: bytes) -> None:
    """Unauthenticated bytes are never interpreted: junk with a wrong MAC is
    BAD_SIGNATURE, not MALFORMED (the JSON parser never saw it)."""
    header = ENVELOPE_MAGIC + b" " + KID + b" " + ZSIG
    assert reason_of(lambda: dec(header + b"\n" + body, max_bytes=1_000_000)) is RejectReason.BAD_SIGNATURE
    # with a valid MAC (a key holder) the same junk is MALFORMED
    assert reason_of(lambda: dec(frame(body), max_bytes=1_000_000)) is RejectReason.MALFORMED


GOOD_HB = hb("node-a").to_wire()


@pytest.mark.parametrize(
    "overrides",
    [
        {"v": 1},
        {"v": True},
        {"v": 2.0},
        {"extra": 1},
        {"sender": "Node-A"},
        {"sender": "a" * 254},
        {"receiver": 7},
        {"epoch": -1},
        {"epoch": True},
        {"epoch": 2**63},
        {"seq": 1.5},
        {"seq": "1"},
        {"epoch": ...},
        {"reply_to": ...},
        {"nonce": "A" * 32},
        {"nonce": "0" * 31},
        {"reply_to": "x"},
        {"sent_at": 1.0},  # v1 field: unknown in v2
        {"heartbeats": []},
        {"heartbeats": {"0": GOOD_HB}},
        {"heartbeats": [GOOD_HB] * (MAX_HEARTBEATS_PER_ENVELOPE + 1)},
        {"heartbeats": ["not an object"]},
        {"heartbeats": [{"no": "origin"}]},
        {"heartbeats": [{**GOOD_HB, "origin": 5}]},
        {"ages": []},
        {"ages": [0.0, 0.0]},
        {"ages": [-1.0]},
        {"ages": ["1"]},
        {"ages": [True]},
        {"ages": [None]},
        {"ages": [MAX_AGE_S + 1]},
        {"ages": {"0": 0.0}},
        {"sender": "node-b"},  # sender == receiver
    ],
)
def test_signed_but_malformed_envelopes(overrides: dict[str, object]) -> None:
    """Even a key holder cannot get a malformed envelope accepted."""
    heartbeats = overrides.pop("heartbeats", [GOOD_HB])
    raw = raw_envelope(heartbeats=heartbeats, **overrides)  # type: ignore[arg-type]
    assert reason_of(lambda: dec(raw, max_bytes=1_000_000)) is RejectReason.MALFORMED


@pytest.mark.parametrize("body", [b"[]", b"null", b'"x"', b'{"a": 1, "a": 2}', b'{"x": 1e400}',
                                  b'{"x": "\\ud800"}', b"\xef\xbb\xbf{}"])
def test_signed_junk_bodies(body: bytes) -> None:
    assert reason_of(lambda: dec(frame(body))) is RejectReason.MALFORMED


def test_integer_ages_are_numbers_too() -> None:
    d = dec(raw_envelope(heartbeats=[GOOD_HB], ages=[3]))
    assert d.own_age_s == 3.0


def test_wrong_receiver() -> None:
    raw = env(receiver="node-c")
    assert reason_of(lambda: dec(raw, receiver="node-b")) is RejectReason.WRONG_RECEIVER
    # a reflected message (my own, sent back to me) is also for someone else
    mine = env(sender="node-b", receiver="node-a")
    assert reason_of(lambda: dec(mine, receiver="node-b")) is RejectReason.WRONG_RECEIVER


def test_reply_binding() -> None:
    ours = fresh_nonce()
    answer = env(reply_to=ours)
    # an answer posted as a request (a replay of someone's answer) is refused
    assert reason_of(lambda: dec(answer)) is RejectReason.REPLAYED
    # an answer to another request (a replayed old answer) is refused
    assert reason_of(lambda: dec(answer, reply_to=fresh_nonce())) is RejectReason.REPLAYED
    # a request is not an answer
    assert reason_of(lambda: dec(env(), reply_to=ours)) is RejectReason.REPLAYED
    d = dec(answer, reply_to=ours)
    assert d.reply_to == ours


@pytest.mark.parametrize("offset_s", [-86_400.0, -3600.0, -45.0, 0.0, 45.0, 3600.0, 86_400.0 * 365])
def test_no_wall_clock_anywhere(offset_s: float) -> None:
    """The sender's wall clock only picks its epoch; any value decodes (freshness is not a clock
    comparison)."""
    epoch = int(EPOCH + offset_s * 1e9)
    d = dec(env(epoch=epoch, own=hb(inc=epoch)))
    assert d.epoch == epoch


def test_sender_mismatch() -> None:
    # first heartbeat is someone else's: a relayer cannot speak for the origin
    raw = raw_envelope(heartbeats=[hb("node-c").to_wire()])
    assert reason_of(lambda: dec(raw)) is RejectReason.SENDER_MISMATCH
    # peer-binding hook (e.g. source address is not node-a's InternalIP)
    seen: list[str] = []
    assert reason_of(lambda: dec(env(), sender_allowed=lambda s: seen.append(s) or False)) is RejectReason.SENDER_MISMATCH
    assert seen == ["node-a"]
    assert dec(env(), sender_allowed=lambda s: s == "node-a").sender == A


@pytest.mark.parametrize(
    ("own", "age", "reason"),
    [
        (hb("node-a", keyring=unpublished("node-a")).to_wire(), 0.0, RejectReason.UNKNOWN_KEY),
        ({**hb("node-a").to_wire(), "seq": 2}, 0.0, RejectReason.BAD_SIGNATURE),
        (hb("node-a").to_wire(), 30.5, RejectReason.STALE),
        ({k: v for k, v in hb("node-a").to_wire().items() if k != "mac"}, 0.0, RejectReason.UNSIGNED),
        ({**signed_hb_dict(origin="node-a", sent_at=1.0)}, 0.0, RejectReason.MALFORMED),
    ],
)
def test_sender_own_heartbeat_must_be_valid(own: dict[str, object], age: float, reason: RejectReason) -> None:
    raw = raw_envelope(heartbeats=[own], ages=[age])
    assert reason_of(lambda: dec(raw)) is reason


def test_one_bad_relayed_heartbeat_does_not_drop_the_envelope() -> None:
    good = hb("node-c", alive=("node-c",), dead=())
    tampered = {**hb("node-d", alive=(), dead=()).to_wire(), "kubelet_ok": False}
    unknown = hb("node-e", keyring=unpublished("node-e"), alive=(), dead=()).to_wire()
    stale = hb("node-f", alive=(), dead=()).to_wire()
    extra = signed_hb_dict(extra=1)
    unsorted = signed_hb_dict(alive=["node-z", "node-c"])
    overlap = signed_hb_dict(alive=["node-c"], dead=["node-c"])
    unsigned = {k: v for k, v in good.to_wire().items() if k != "mac"}
    items = [hb("node-a").to_wire(), good.to_wire(), tampered, unknown, stale, extra, unsorted, overlap, unsigned,
             "junk", 5]
    ages = [0.0, 29.9, 0.0, 0.0, 30.1, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    d = dec(raw_envelope(heartbeats=items, ages=ages))
    got = [(r.index, r.reason) for r in d.relayed]
    assert got == [
        (1, None),
        (2, RejectReason.BAD_SIGNATURE),
        (3, RejectReason.UNKNOWN_KEY),
        (4, RejectReason.STALE),
        (5, RejectReason.MALFORMED),
        (6, RejectReason.MALFORMED),
        (7, RejectReason.MALFORMED),
        (8, RejectReason.UNSIGNED),
        (9, RejectReason.MALFORMED),
        (10, RejectReason.MALFORMED),
    ]
    assert d.relayed[0].heartbeat == good and d.relayed[0].age_s == 29.9
    assert d.heartbeats == (d.own, good)
    assert all(r.detail for r in d.relayed)


def test_heartbeat_max_age_can_be_set() -> None:
    relay = hb("node-c", alive=(), dead=())
    d = dec(env(relayed=(relay,), relay_age=10.0), heartbeat_max_age_s=5.0)
    assert d.relayed[0].reason is RejectReason.STALE
    assert reason_of(lambda: dec(env(own_age=6.0), heartbeat_max_age_s=5.0)) is RejectReason.STALE


def test_caller_bugs_are_not_rejections() -> None:
    with pytest.raises(TypeError):
        dec("text")  # type: ignore[arg-type]
    for kwargs in ({"max_bytes": 0}, {"receiver": "Bad"}, {"heartbeat_max_age_s": 0.0}, {"reply_to": "x"},
                   {"heartbeat_max_age_s": math.nan}):
        with pytest.raises(ValueError):
            dec(env(), **kwargs)  # type: ignore[arg-type]


def test_memoryview_and_bytearray_inputs() -> None:
    assert dec(bytearray(env())).sender == A
    assert dec(memoryview(env())).sender == A


# --------------------------------------------------------------------------- hostile input fuzzing

ANY_REASON = set(RejectReason)
FRAME_REASONS = {RejectReason.MALFORMED, RejectReason.UNSIGNED, RejectReason.UNKNOWN_KEY, RejectReason.BAD_SIGNATURE}


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=2048))
def test_fuzz_random_bytes(raw: bytes) -> None:
    assert reason_of(lambda: dec(raw)) in {RejectReason.MALFORMED, RejectReason.UNSIGNED, RejectReason.OVERSIZED}


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=5),
    max_leaves=25,
)
ENVELOPE_KEYS = ["v", "sender", "receiver", "epoch", "seq", "nonce", "reply_to", "heartbeats", "ages"]


def dumps(value: object) -> bytes:
    return json.dumps(value).encode()


@settings(max_examples=150, deadline=None)
@given(json_values)
def test_fuzz_random_json_without_a_frame(value: object) -> None:
    assert reason_of(lambda: dec(dumps(value))) is RejectReason.MALFORMED


@settings(max_examples=150, deadline=None)
@given(st.text(alphabet="0123456789abcdef /x", max_size=200), json_values)
def test_fuzz_random_headers(header: str, value: object) -> None:
    raw = ENVELOPE_MAGIC + b" " + header.encode() + b"\n" + dumps(value)
    assert reason_of(lambda: dec(raw)) in FRAME_REASONS


VALID = env(relayed=(hb("node-c", alive=("node-c",), dead=()),))


@settings(max_examples=300, deadline=None)
@given(st.integers(0, len(VALID) - 1))
def test_fuzz_truncated(cut: int) -> None:
    assert reason_of(lambda: dec(VALID[:cut])) in FRAME_REASONS


@settings(max_examples=500, deadline=None)
@given(st.lists(st.integers(0, len(VALID) * 8 - 1), min_size=1, max_size=4, unique=True))
def test_fuzz_bit_flips(bits: list[int]) -> None:
    """Every bit-flipped message is refused: the MAC covers every body byte and
    the header holds only the key id and the MAC."""
    data = bytearray(VALID)
    for b in bits:
        data[b // 8] ^= 1 << (b % 8)
    assert reason_of(lambda: dec(bytes(data))) in ANY_REASON - {RejectReason.OVERSIZED}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_fuzz_authenticated_junk(data: st.DataObject) -> None:
    """A key holder (compromised node) sends signed junk: any field replaced,
    removed or added, including inside heartbeats. Only Rejected may come
    out, or an accepted envelope whose heartbeats are all well-typed."""
    obj = split(VALID)[1]
    target = obj if data.draw(st.booleans()) else obj["heartbeats"][data.draw(st.integers(0, 1))]
    for _ in range(data.draw(st.integers(1, 3))):
        key = data.draw(st.sampled_from(sorted(target) + ["extra", "origin", "alive", "ages"]))
        if data.draw(st.booleans()) and key in target:
            del target[key]
        else:
            target[key] = data.draw(json_values)
    try:
        raw = frame(canonical_json(obj))
    except (ValueError, TypeError):
        return  # the junk itself has no canonical form (lone surrogate)
    try:
        d = dec(raw)
    except Rejected as exc:
        assert exc.reason in ANY_REASON
        return
    assert isinstance(d.own_age_s, float) and 0 <= d.own_age_s <= MAX_AGE_S
    for h in d.heartbeats:
        assert isinstance(h.seq, int) and all(isinstance(n, str) for n in h.alive)


# --------------------------------------------------------------------------- replay guard


def test_replayed_envelope_is_refused_whatever_the_clocks() -> None:
    guard = ReplayGuard()
    raw = env()
    dec(raw, guard=guard)
    assert reason_of(lambda: dec(raw, guard=guard)) is RejectReason.REPLAYED
    # the same (epoch, seq) from another sender is a different message
    seq = split(raw)[1]["seq"]
    assert dec(env(sender="node-c", seq=seq), guard=guard).sender == C


def test_rejected_envelopes_do_not_change_the_guard() -> None:
    guard = ReplayGuard()
    raw = env(seq=5)
    assert reason_of(lambda: dec(raw, guard=guard, receiver="node-c")) is RejectReason.WRONG_RECEIVER
    assert reason_of(lambda: dec(raw, guard=guard, sender_allowed=lambda s: False)) is RejectReason.SENDER_MISMATCH
    assert reason_of(lambda: dec(env(seq=5, own_age=99.0), guard=guard)) is RejectReason.STALE
    assert len(guard) == 0
    assert dec(raw, guard=guard).seq == 5
    assert len(guard) == 1


def admit(guard: ReplayGuard, epoch: int, seq: int, *, proven: bool = False, sender: str = "s") -> RejectReason | None:
    try:
        guard.admit(sender=sender, epoch=epoch, seq=seq, proven=proven)
    except Rejected as exc:
        return exc.reason
    return None


R, U = RejectReason.REPLAYED, RejectReason.UNCONFIRMED


def test_guard_sequence_window() -> None:
    g = ReplayGuard(window=4)
    assert admit(g, 1, 10, proven=True) is None
    assert admit(g, 1, 10) is R  # duplicate
    assert admit(g, 1, 12) is None
    assert admit(g, 1, 11) is None  # reordered: a request and an answer crossed
    assert admit(g, 1, 11) is R
    assert admit(g, 1, 9) is None  # still inside the window (12 - 9 < 4)
    assert admit(g, 1, 8) is R  # window or more below the highest: refused
    assert admit(g, 1, 100) is None  # a jump forward clears the window
    assert admit(g, 1, 97) is None and admit(g, 1, 96) is R
    state = g.state_of("s")
    assert state is not None and state.high == 100 and state.confirmed


def test_guard_restart_is_accepted_once_then_needs_an_answer() -> None:
    g = ReplayGuard()
    assert admit(g, 1, 1, proven=True) is None
    assert admit(g, 1, 2) is None
    # the sender restarts: a larger epoch is accepted once, unconfirmed
    assert admit(g, 2, 1) is None
    assert admit(g, 2, 2) is U  # its next request waits for our probe's answer
    assert admit(g, 2, 2, proven=True) is None  # the answer confirms the epoch
    assert admit(g, 2, 3) is None
    # a replay from the earlier run never rolls the sender back
    assert admit(g, 1, 3) is R and admit(g, 1, 99) is R
    state = g.state_of("s")
    assert state is not None and state.epoch == 2 and state.retired == (1,)


def test_guard_first_contact_is_the_receiver_restart_tradeoff() -> None:
    g = ReplayGuard()
    assert admit(g, 5, 7) is None  # nothing known: accepted once (may be a replay; bounded by the vote TTL)
    assert admit(g, 5, 8) is U  # but a whole recorded sequence is not
    assert admit(g, 5, 7) is R
    assert admit(g, 5, 9, proven=True) is None
    assert admit(g, 5, 10) is None


def test_guard_clock_went_back_across_a_restart() -> None:
    """A sender whose new epoch is numerically smaller (its clock went back) is refused until an
    answer to our probe proves the new epoch; then its old epoch is retired."""
    g = ReplayGuard()
    assert admit(g, 1000, 1, proven=True) is None
    assert admit(g, 10, 1) is R
    assert admit(g, 10, 2, proven=True) is None
    assert admit(g, 10, 3) is None
    assert admit(g, 1000, 2) is R  # the old (larger) epoch is retired: replays of it stay refused


def test_guard_proof_beats_a_displacing_replay() -> None:
    """Replaying a never-seen larger epoch can displace a live one, but the sender's next answer
    restores it (and retires the replayed one)."""
    g = ReplayGuard()
    assert admit(g, 5, 1, proven=True) is None
    assert admit(g, 9, 1) is None  # attacker: an epoch we never saw
    assert admit(g, 5, 2) is R  # the genuine epoch is now retired ...
    assert admit(g, 5, 3, proven=True) is None  # ... until its answer proves it
    assert admit(g, 5, 4) is None
    assert admit(g, 9, 2) is R


def test_guard_is_bounded() -> None:
    g = ReplayGuard(max_senders=2, retired_epochs=2)
    for sender in ("a", "b", "c"):
        assert admit(g, 1, 1, sender=sender) is None
    assert len(g) == 2 and g.state_of("a") is None  # least recently accepted evicted
    for epoch in range(2, 8):
        assert admit(g, epoch, 1, sender="c") is None
    state = g.state_of("c")
    assert state is not None and state.retired == (5, 6)
    with pytest.raises(ValueError):
        ReplayGuard(window=0)
    with pytest.raises(ValueError):
        ReplayGuard(max_senders=0)
    with pytest.raises(ValueError):
        ReplayGuard(retired_epochs=-1)


def test_guard_rejection_can_be_answered() -> None:
    g = ReplayGuard()
    raw = env(seq=3)
    dec(raw, guard=g)
    with pytest.raises(Rejected) as info:
        dec(raw, guard=g)
    assert info.value.answer_to == (A, split(raw)[1]["nonce"])
    with pytest.raises(Rejected) as info:
        dec(raw, guard=g, receiver="node-c")
    assert info.value.answer_to is None  # only guard refusals of authentic, bound envelopes


def test_guard_brought_back_epoch_keeps_its_watermark() -> None:
    """Regression (found by the model check): an answer that brings back an epoch an unproven newer
    one had displaced must not reopen the seqs accepted in it before."""
    g = ReplayGuard(window=8)
    assert admit(g, 1, 0, proven=True) is None
    assert admit(g, 1, 1) is None            # epoch 1 confirmed, seq 1 accepted
    assert admit(g, 2, 0) is None            # an unproven "restart" displaces epoch 1
    assert admit(g, 1, 0, proven=True) is None  # an answer proves epoch 1 again
    assert admit(g, 1, 1) is R               # the old request stays a replay
    assert admit(g, 1, 2) is None            # new seqs of the epoch go on
    state = g.state_of("s")
    assert state is not None and state.epoch == 1 and state.retired == (2,)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(1, 4), st.integers(0, 12), st.booleans(),
                          st.integers(-1, 40)), max_size=80))
def test_guard_never_accepts_an_unproven_replay(ops: list[tuple[int, int, int, bool, int]]) -> None:
    """Model check: an unproven message (sender, epoch, seq) that was accepted before is never
    accepted again while its sender is remembered, and once an epoch has been confirmed an
    unproven message of an earlier-retired epoch never is."""
    g = ReplayGuard(window=8, max_senders=100, retired_epochs=100)
    accepted: set[tuple[str, int, int]] = set()
    presented: list[tuple[str, int, int]] = []
    for sender, epoch, seq, proven, replay in ops:
        msg = presented[replay] if 0 <= replay < len(presented) else (f"s{sender}", epoch, seq)
        presented.append(msg)
        is_proven = proven and replay < 0  # a replay can never be an answer to a fresh nonce
        before = g.state_of(msg[0])
        reason = admit(g, msg[1], msg[2], proven=is_proven, sender=msg[0])
        if msg in accepted and not is_proven:
            assert reason is not None, "replay accepted"
        if before is not None and msg[1] in before.retired and not is_proven:
            assert reason is R
        if reason is None:
            accepted.add(msg)
        else:
            assert g.state_of(msg[0]) == before  # refusals change nothing


# --------------------------------------------------------------------------- heartbeat book


def test_book_freshness_table() -> None:
    book = HeartbeatBook()
    assert book.offer(hb(seq=5, inc=1), now=1.0) is Freshness.NEW
    assert book.offer(hb(seq=5, inc=1), now=2.0) is Freshness.DUPLICATE
    assert book.offer(hb(seq=4, inc=1), now=3.0) is Freshness.OLDER
    assert book.offer(hb(seq=6, inc=1), now=4.0, age_s=0.5) is Freshness.NEW
    assert book.offer(hb(seq=0, inc=2), now=5.0) is Freshness.NEW  # restart: signed after the last one
    # the old incarnation's late relay: signed (by its age) before the current one
    assert book.offer(hb(seq=99, inc=1), now=6.0, age_s=2.5) is Freshness.OLDER
    entry = book.get(A)
    assert entry is not None and entry.heartbeat.order == (2, 0) and entry.received_at == 5.0
    assert A in book and len(book) == 1 and book.get(B) is None


def test_book_orders_incarnations_by_local_estimate_not_by_number() -> None:
    """An origin whose clock went back across a restart has a smaller incarnation; it is newer by
    what this node observed, at once (no waiting for the old entry to be forgotten)."""
    book = HeartbeatBook()
    book.offer(hb(inc=1000, seq=5), now=10.0)
    assert book.offer(hb(inc=10, seq=1), now=11.0, age_s=0.2) is Freshness.NEW
    assert book.offer(hb(inc=1000, seq=6), now=12.0, age_s=1.5) is Freshness.OLDER  # signed at 10.5 < 10.8
    assert book.offer(hb(inc=1000, seq=5), now=200.0, age_s=190.0) is Freshness.OLDER  # honest age
    entry = book.get(A)
    assert entry is not None and entry.heartbeat.incarnation == 10 and entry.signed_at == pytest.approx(10.8)


def test_book_entry_ages() -> None:
    book = HeartbeatBook()
    book.offer(hb(), now=100.0, age_s=2.0)
    entry = book.get(A)
    assert entry is not None
    assert entry.age_at(103.0) == 5.0 and entry.age_at(99.0) == 2.0 and entry.signed_at == 98.0
    assert book.votes()[A].observed_at == 100.0  # the vote TTL runs from local receipt


def test_book_capacity_evicts_least_recently_refreshed() -> None:
    book = HeartbeatBook(max_origins=2)
    book.offer(hb("node-a"), now=1.0)
    book.offer(hb("node-b"), now=2.0)
    book.offer(hb("node-a", seq=2), now=3.0)
    assert book.offer(hb("node-c"), now=4.0) is Freshness.NEW
    assert sorted(e.heartbeat.origin for e in book.entries()) == [A, C]


def test_book_retain_mark_relayed_and_votes() -> None:
    book = HeartbeatBook()
    for i, name in enumerate(["node-a", "node-b", "node-c"]):
        book.offer(hb(name), now=float(i), age_s=0.5)
    book.retain({A, B})
    assert [e.heartbeat.origin for e in book.entries()] == [A, B]
    book.mark_relayed([hb("node-a"), hb("node-b", seq=0)])  # node-b's seq 0 is not current
    assert book.get(A).relay_count == 1 and book.get(B).relay_count == 0  # type: ignore[union-attr]
    assert book.get(A).age_s == 0.5  # type: ignore[union-attr]  # relaying keeps the age
    book.offer(hb("node-a", seq=2), now=9.0)
    assert book.get(A).relay_count == 0  # type: ignore[union-attr]  # news resets the count
    votes = book.votes()
    assert votes[A].observed_at == 9.0 and votes[B].observed_at == 1.0
    assert votes[A].alive == frozenset({A, B}) and votes[A].dead == frozenset({C})


def test_book_bad_arguments() -> None:
    with pytest.raises(ValueError):
        HeartbeatBook(max_origins=0)
    with pytest.raises(ValueError):
        HeartbeatBook().offer(hb(), now=math.nan)
    with pytest.raises(ValueError):
        HeartbeatBook().offer(hb(), now=1.0, age_s=-1.0)


BOOK_HBS = [hb(o, inc=i, seq=s) for o in ("node-a", "node-b") for i in (1, 2) for s in (0, 1, 2)]


@settings(max_examples=200, deadline=None)
@given(st.permutations(BOOK_HBS), st.integers(0, 2))
def test_book_keeps_the_newest_whatever_the_arrival_order(order: list[Heartbeat], clock_back: int) -> None:
    """Heartbeats arrive in any order with honest ages (arrival time minus signing time); the
    incarnation numbers may even run backwards (clock_back): the book ends with the last signed."""
    def signed_at(h: Heartbeat) -> float:
        return h.incarnation * 10 + h.seq

    def number(inc: int) -> int:
        return 3 - inc if clock_back == 1 else inc

    book = HeartbeatBook()
    news = 0
    for i, h in enumerate(order):
        now = 100.0 + i
        relabelled = hb(h.origin, inc=number(h.incarnation), seq=h.seq)
        news += book.offer(relabelled, now=now, age_s=now - signed_at(h)) is Freshness.NEW
        # relays of anything already seen are harmless
        assert book.offer(relabelled, now=now, age_s=now - signed_at(h)) is not Freshness.NEW
    for origin in (A, B):
        assert book.get(origin).heartbeat.order == (number(2), 2)  # type: ignore[union-attr]
    assert 2 <= news <= len(order)


# --------------------------------------------------------------------------- relay selection


def filled_book(n: int, *, now: float = 100.0) -> HeartbeatBook:
    book = HeartbeatBook()
    for i in range(n):
        book.offer(hb(f"n{i:03d}", alive=(), dead=()), now=now - i * 0.1, age_s=float(i))
    return book


def test_select_relays_filters_and_bounds() -> None:
    book = filled_book(20)
    chosen = select_relays(
        book, for_peer=NodeName("n001"), now=100.0, max_count=5, max_age_s=1.0, rng=random.Random(1),
        exclude={NodeName("n000")},
    )
    origins = [h.origin for h in chosen]
    assert origins == ["n002", "n003", "n004", "n005", "n006"]  # freshest first
    assert "n001" not in origins and "n000" not in origins
    assert all(book.get(o).received_at >= 99.0 for o in origins)  # type: ignore[union-attr]
    assert select_relays(book, for_peer=A, now=100.0, max_count=0, max_age_s=10, rng=random.Random(1)) == []
    assert len(select_relays(book, for_peer=A, now=100.0, max_count=50, max_age_s=0.55, rng=random.Random(1))) == 6
    # too old in total (age it came with + time held) for the receiver: not relayed
    young = select_relays(book, for_peer=A, now=100.0, max_count=50, max_age_s=10, rng=random.Random(1),
                          max_total_age_s=3.4)  # age_at(100) = 1.1 * i
    assert sorted(h.origin for h in young) == ["n000", "n001", "n002", "n003"]


def test_select_relays_rotates_least_relayed_first() -> None:
    book = filled_book(20)
    seen: set[str] = set()
    for _ in range(4):
        chosen = select_relays(book, for_peer=A, now=100.0, max_count=5, max_age_s=10.0, rng=random.Random(0))
        assert not (seen & {h.origin for h in chosen})  # nobody repeats before everyone had a turn
        seen |= {h.origin for h in chosen}
        book.mark_relayed(chosen)
    assert len(seen) == 20


def test_select_relays_is_deterministic_for_a_seed_and_randomises_ties() -> None:
    book = HeartbeatBook()
    for i in range(30):
        book.offer(hb(f"n{i:03d}", alive=(), dead=()), now=5.0)  # all tie on time and count
    pick = lambda seed: [h.origin for h in select_relays(book, for_peer=A, now=5.0, max_count=8, max_age_s=1, rng=random.Random(seed))]  # noqa: E731
    assert pick(7) == pick(7)
    assert len({tuple(pick(s)) for s in range(10)}) > 1


@pytest.mark.parametrize("kwargs", [{"max_count": -1}, {"max_age_s": -1.0}, {"max_age_s": math.nan}, {"now": math.inf},
                                    {"max_total_age_s": -1.0}, {"max_total_age_s": math.nan}])
def test_select_relays_bad_arguments(kwargs: dict[str, float]) -> None:
    args: dict[str, Any] = dict(for_peer=A, now=1.0, max_count=3, max_age_s=5.0, rng=random.Random(0))
    args.update(kwargs)
    with pytest.raises(ValueError):
        select_relays(HeartbeatBook(), **args)


def test_gossip_disseminates_with_fanout_messages_per_node() -> None:
    """20 agents, fanout 3, 8 relays per envelope, real encode/decode with replay guards and ages:
    every agent learns every other agent's heartbeat within a few periods while sending exactly
    `fanout` envelopes per period, and in steady state the heartbeats it holds are on average less
    than 2 periods old — by their seq and by the ages they arrived with."""
    cfg, fanout = WireConfig(max_relays=8), 3
    n, rng = 20, random.Random(42)
    nodes = [NodeName(f"n{i:02d}") for i in range(n)]
    books = {m: HeartbeatBook() for m in nodes}
    guards = {m: ReplayGuard() for m in nodes}
    for m in nodes:  # every pair has had one probe answered: each epoch is confirmed everywhere
        for peer in nodes:
            if peer != m:
                guards[peer].admit(sender=m, epoch=EPOCH, seq=0, proven=True)
    seqs: dict[tuple[str, str], int] = {}
    complete_at = None
    sent = 0
    periods = 15
    for period in range(1, periods + 1):
        now = 1000.0 + period
        own = {m: hb(m, seq=period, alive=(), dead=()) for m in nodes}
        for m in nodes:
            books[m].offer(own[m], now=now)
        for m in nodes:
            for peer in rng.sample([p for p in nodes if p != m], fanout):
                relays = select_relays(
                    books[m], for_peer=peer, now=now, max_count=cfg.max_relays, max_age_s=cfg.relay_max_age_s,
                    rng=rng, exclude={m}, max_total_age_s=cfg.heartbeat_max_age_s,
                )
                seqs[(m, peer)] = seqs.get((m, peer), 0) + 1
                raw = encode_envelope(sender=m, receiver=peer, epoch=EPOCH, seq=seqs[(m, peer)],
                                      nonce=f"{rng.getrandbits(128):032x}", own=own[m],
                                      relayed=[(h, books[m].get(h.origin).age_at(now)) for h in relays],  # type: ignore[union-attr]
                                      keyring=ring(m), max_bytes=cfg.max_bytes)
                books[m].mark_relayed(relays)
                sent += 1
                d = decode_envelope(raw, keyring=ring(peer), receiver=peer, max_bytes=cfg.max_bytes, guard=guards[peer],
                                    heartbeat_max_age_s=cfg.heartbeat_max_age_s)
                assert all(r.accepted for r in d.relayed)
                books[peer].offer(d.own, now=now, age_s=d.own_age_s)
                for r in d.relayed:
                    assert r.heartbeat is not None
                    books[peer].offer(r.heartbeat, now=now, age_s=r.age_s)
        if complete_at is None and all(len(books[m]) == n for m in nodes):
            complete_at = period
    now = 1000.0 + periods
    assert complete_at is not None and complete_at <= 8
    assert sent == n * fanout * periods
    ages = [periods - e.heartbeat.seq for m in nodes for e in books[m].entries()]
    assert sum(ages) / len(ages) < 2.0
    measured = [e.age_at(now) for m in nodes for e in books[m].entries()]
    assert sum(measured) / len(measured) < 2.0
    assert max(measured) == pytest.approx(max(ages))  # ages on the wire match the truth


# --------------------------------------------------------------------------- config


def test_wire_config_defaults_are_consistent() -> None:
    cfg = WireConfig()
    assert cfg.max_bytes == 65_536 and cfg.fallback_probes == 2 and cfg.max_relays == 0
    assert cfg.relay_max_age_s <= cfg.heartbeat_max_age_s and cfg.replay_window == 64


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_bytes": 10},
        {"heartbeat_max_age_s": math.nan},
        {"heartbeat_max_age_s": MAX_AGE_S + 1},
        {"fallback_probes": -1},
        {"max_contacts": 1.5},
        {"max_relays": MAX_HEARTBEATS_PER_ENVELOPE},
        {"max_relays": -1},
        {"relay_max_age_s": 31.0},
        {"replay_window": 0},
        {"replay_max_senders": 0},
        {"replay_retired_epochs": -1},
        {"book_max_origins": True},
    ],
)
def test_wire_config_refuses_nonsense(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        WireConfig(**kwargs)  # type: ignore[arg-type]

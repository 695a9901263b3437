"""Tests of edgewatch.core.wire: round trips, every rejection reason, per-
heartbeat results, hostile-input fuzzing, the nonce cache, the heartbeat
book and gossip relay selection."""

from __future__ import annotations

import json
import math
import random
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from edgewatch.core.quorum import Vote
from edgewatch.core.signing import Keyring, canonical_json
from edgewatch.core.types import NodeName
from edgewatch.core.wire import (
    ENVELOPE_DOMAIN,
    HEARTBEAT_DOMAIN,
    MAX_HEARTBEATS_PER_ENVELOPE,
    MAX_NAMES_PER_LIST,
    Freshness,
    Heartbeat,
    HeartbeatBook,
    NonceCache,
    Rejected,
    RejectReason,
    WireConfig,
    decode_envelope,
    decode_heartbeat,
    encode_envelope,
    select_relays,
    sign_heartbeat,
)

K_NEW = ("k-new", b"N" * 32)
K_OLD = ("k-old", b"O" * 32)
K_GONE = ("k-gone", b"G" * 32)
RING = Keyring([K_NEW, K_OLD])
NOW = 1_700_000_000.0
WINDOW = 30.0
A, B, C = NodeName("node-a"), NodeName("node-b"), NodeName("node-c")

_counter = iter(range(1, 10**9))


def fresh_nonce() -> str:
    return f"{next(_counter):032x}"


def hb(
    origin: str = "node-a",
    *,
    seq: int = 1,
    inc: int = 1,
    sent_at: float = NOW,
    alive: tuple[str, ...] = ("node-a", "node-b"),
    dead: tuple[str, ...] = ("node-c",),
    keyring: Keyring = RING,
) -> Heartbeat:
    return sign_heartbeat(
        origin=NodeName(origin),
        incarnation=inc,
        seq=seq,
        sent_at=sent_at,
        kubelet_ok=True,
        cloud_ok=False,
        alive=[NodeName(x) for x in alive],
        dead=[NodeName(x) for x in dead],
        keyring=keyring,
    )


def env(
    *,
    sender: str = "node-a",
    receiver: str = "node-b",
    nonce: str | None = None,
    sent_at: float = NOW,
    own: Heartbeat | None = None,
    relayed: tuple[Heartbeat, ...] = (),
    keyring: Keyring = RING,
) -> bytes:
    return encode_envelope(
        sender=NodeName(sender),
        receiver=NodeName(receiver),
        nonce=nonce or fresh_nonce(),
        sent_at=sent_at,
        own=own or hb(sender, keyring=keyring),
        relayed=relayed,
        keyring=keyring,
    )


def raw_envelope(
    *,
    heartbeats: list[object],
    keyring: Keyring = RING,
    **overrides: object,
) -> bytes:
    """An envelope built by hand (signed, but not checked by the encoder)."""
    payload: dict[str, object] = {
        "v": 1,
        "sender": "node-a",
        "receiver": "node-b",
        "nonce": fresh_nonce(),
        "sent_at": NOW,
        "heartbeats": heartbeats,
    }
    payload.update(overrides)
    return canonical_json(keyring.sign(payload, domain=ENVELOPE_DOMAIN))


def dec(
    raw: bytes,
    *,
    receiver: str = "node-b",
    now: float = NOW,
    cache: NonceCache | None = None,
    keyring: Keyring = RING,
    max_bytes: int = 65_536,
    **kw: Any,
):  # type: ignore[no-untyped-def]
    return decode_envelope(
        raw,
        keyring=keyring,
        receiver=NodeName(receiver),
        now=now,
        max_bytes=max_bytes,
        replay_window_s=WINDOW,
        nonce_cache=cache if cache is not None else NonceCache(),
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
        "v": 1,
        "origin": "node-c",
        "incarnation": 1,
        "seq": 1,
        "sent_at": NOW,
        "kubelet_ok": True,
        "cloud_ok": True,
        "alive": ["node-c"],
        "dead": [],
    }
    payload.update(overrides)
    return RING.sign({k: v for k, v in payload.items() if v is not ...}, domain=HEARTBEAT_DOMAIN)


# --------------------------------------------------------------------------- round trips


def test_roundtrip_and_canonical_form() -> None:
    own = hb("node-a")
    relay = hb("node-c", alive=("node-c",), dead=(), sent_at=NOW - 2)
    raw = env(own=own, relayed=(relay,))
    assert canonical_json(json.loads(raw)) == raw  # the wire form is canonical JSON
    d = dec(raw)
    assert (d.sender, d.receiver, d.sent_at, d.key_id) == (A, B, NOW, "k-new")
    assert d.own == own
    assert [r.accepted for r in d.relayed] == [True]
    assert d.relayed[0].heartbeat == relay and d.relayed[0].index == 1
    assert d.heartbeats == (own, relay)


def test_relayed_heartbeat_still_verifies_after_two_hops() -> None:
    original = hb("node-a", seq=7)
    at_b = dec(env(sender="node-a", receiver="node-b", own=original))
    assert at_b.own == original
    raw = env(sender="node-b", receiver="node-c", relayed=(at_b.own,))
    at_c = dec(raw, receiver="node-c")
    assert at_c.relayed[0].heartbeat == original


def test_secondary_key_is_accepted_and_rotated_out_key_is_not() -> None:
    old_only = Keyring([K_OLD])
    assert dec(env(keyring=old_only)).key_id == "k-old"
    new_only = Keyring([K_NEW])
    assert reason_of(lambda: dec(env(keyring=old_only), keyring=new_only)) is RejectReason.UNKNOWN_KEY


heartbeat_strategy = st.builds(
    lambda origin, inc, seq, dt, k, c, names, dead_mask: sign_heartbeat(
        origin=origin,
        incarnation=inc,
        seq=seq,
        sent_at=NOW + dt,
        kubelet_ok=k,
        cloud_ok=c,
        alive=[n for n, m in zip(names, dead_mask) if not m],
        dead=[n for n, m in zip(names, dead_mask) if m],
        keyring=RING,
    ),
    st.from_regex(r"[a-z0-9]([a-z0-9-]{0,10}[a-z0-9])?(\.[a-z0-9]{1,5})?", fullmatch=True).map(NodeName),
    st.integers(0, 2**63 - 1),
    st.integers(0, 2**63 - 1),
    st.floats(-WINDOW, WINDOW),
    st.booleans(),
    st.booleans(),
    st.lists(st.from_regex(r"[a-z][a-z0-9-]{0,8}[a-z0-9]", fullmatch=True).map(NodeName), unique=True, max_size=12),
    st.lists(st.booleans(), min_size=12, max_size=12),
)


@settings(max_examples=60, deadline=None)
@given(heartbeat_strategy, st.lists(heartbeat_strategy, max_size=5))
def test_roundtrip_property(own: Heartbeat, relayed: list[Heartbeat]) -> None:
    assume(own.origin != "node-z")
    raw = encode_envelope(
        sender=own.origin, receiver=NodeName("node-z"), nonce=fresh_nonce(), sent_at=NOW, own=own,
        relayed=relayed, keyring=RING,
    )
    d = dec(raw, receiver="node-z")
    assert d.own == own
    assert [r.heartbeat for r in d.relayed] == relayed
    for h in [own, *relayed]:
        assert decode_heartbeat(h.to_wire(), keyring=RING, now=NOW, max_age_s=WINDOW, max_future_s=WINDOW) == h


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
        {"sent_at": math.nan},
        {"sent_at": -1.0},
        {"sent_at": "now"},
        {"kubelet_ok": 1},
        {"alive": [NodeName("x")], "dead": [NodeName("x")]},
        {"alive": [NodeName("bad_name")]},
        {"alive": [NodeName(f"n{i}") for i in range(MAX_NAMES_PER_LIST + 1)]},
        {"alive": [1, "a"]},
    ],
)
def test_sign_heartbeat_refuses_bad_input(kwargs: dict[str, object]) -> None:
    args: dict[str, object] = dict(
        origin=A, incarnation=1, seq=1, sent_at=NOW, kubelet_ok=True, cloud_ok=True, alive=[], dead=[], keyring=RING
    )
    args.update(kwargs)
    with pytest.raises(ValueError):
        sign_heartbeat(**args)  # type: ignore[arg-type]


def test_sign_heartbeat_sorts_and_dedups_and_votes() -> None:
    h = hb(alive=("node-b", "node-a", "node-b"), dead=())
    assert h.alive == (A, B)
    assert h.order == (1, 1)
    assert isinstance(h.sent_at, float)
    assert h.vote(observed_at=5.0) == Vote(observer=A, observed_at=5.0, alive=frozenset({A, B}), dead=frozenset())
    assert sign_heartbeat(
        origin=A, incarnation=0, seq=0, sent_at=5, kubelet_ok=True, cloud_ok=True, alive=[], dead=[], keyring=RING
    ).sent_at == 5.0


@pytest.mark.parametrize(
    "kwargs",
    [
        {"sender": "node-b"},  # == receiver
        {"nonce": "ABCDEF" * 5 + "00"},
        {"nonce": "00"},
        {"sent_at": math.inf},
        {"sent_at": -5.0},
        {"own": "other"},
        {"relayed": "too-many"},
        {"receiver": "Bad"},
    ],
)
def test_encode_envelope_refuses_bad_input(kwargs: dict[str, object]) -> None:
    args: dict[str, Any] = dict(sender=A, receiver=B, nonce=fresh_nonce(), sent_at=NOW, own=hb(), relayed=(), keyring=RING)
    if kwargs.get("own") == "other":
        kwargs = {"own": hb("node-c")}
    if kwargs.get("relayed") == "too-many":
        kwargs = {"relayed": tuple(hb("node-c", seq=i) for i in range(MAX_HEARTBEATS_PER_ENVELOPE))}
    args.update(kwargs)
    with pytest.raises(ValueError):
        encode_envelope(**args)


def test_encode_envelope_respects_max_bytes() -> None:
    raw = env()
    with pytest.raises(ValueError):
        encode_envelope(sender=A, receiver=B, nonce=fresh_nonce(), sent_at=NOW, own=hb(), keyring=RING, max_bytes=len(raw) - 1)


# --------------------------------------------------------------------------- rejection reasons


def test_oversized_is_refused_before_parsing() -> None:
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
        b"\xef\xbb\xbf{}",  # UTF-8 BOM
        b"[1, 2]",
        b'"just a string"',
        b"null",
        b'{"a": 1, "a": 2}',  # duplicate keys
        b'{"x": NaN}',
        b'{"x": Infinity}',
        b'{"x": 1e400}',
        b'{"x": ' + b"9" * 5000 + b"}",
        b"[" * 100_000,
        b'{"a":' * 50_000,
        b'{"key_id": "k-new", "mac": "00", "x": "\\ud800"}',  # lone surrogate: no canonical form
    ],
)
def test_malformed_bytes(raw: bytes) -> None:
    assert reason_of(lambda: dec(raw, max_bytes=1_000_000)) is RejectReason.MALFORMED


@pytest.mark.parametrize("raw", [b"{}", b'{"key_id": "k-new"}', b'{"mac": "00"}'])
def test_unsigned(raw: bytes) -> None:
    assert reason_of(lambda: dec(raw)) is RejectReason.UNSIGNED
    obj = json.loads(env())
    del obj["mac"]
    assert reason_of(lambda: dec(canonical_json(obj))) is RejectReason.UNSIGNED


def test_unknown_key_and_bad_signature() -> None:
    gone = Keyring([K_GONE])
    assert reason_of(lambda: dec(env(keyring=gone))) is RejectReason.UNKNOWN_KEY
    obj = json.loads(env())
    obj["sent_at"] = NOW + 1  # tamper after signing
    assert reason_of(lambda: dec(canonical_json(obj))) is RejectReason.BAD_SIGNATURE
    obj = json.loads(env())
    obj["heartbeats"][0]["seq"] = 99  # tamper a covered heartbeat
    assert reason_of(lambda: dec(canonical_json(obj))) is RejectReason.BAD_SIGNATURE
    obj = json.loads(env())
    obj["mac"] = "0" * 64
    assert reason_of(lambda: dec(canonical_json(obj))) is RejectReason.BAD_SIGNATURE
    # a heartbeat MAC does not pass as an envelope MAC (domain separation)
    hb_as_env = canonical_json(RING.sign({"v": 1}, domain=HEARTBEAT_DOMAIN))
    assert reason_of(lambda: dec(hb_as_env)) is RejectReason.BAD_SIGNATURE


GOOD_HB = hb("node-a").to_wire()


@pytest.mark.parametrize(
    "overrides",
    [
        {"v": 2},
        {"v": True},
        {"v": 1.0},
        {"extra": 1},
        {"sender": "Node-A"},
        {"sender": "a" * 254},
        {"receiver": 7},
        {"nonce": "A" * 32},
        {"nonce": "0" * 31},
        {"sent_at": int(NOW)},  # floats only, so relays re-encode identically
        {"sent_at": -1.0},
        {"sent_at": "now"},
        {"heartbeats": []},
        {"heartbeats": {"0": GOOD_HB}},
        {"heartbeats": [GOOD_HB] * (MAX_HEARTBEATS_PER_ENVELOPE + 1)},
        {"heartbeats": ["not an object"]},
        {"heartbeats": [{"no": "origin"}]},
        {"heartbeats": [{**GOOD_HB, "origin": 5}]},
        {"sender": "node-b"},  # sender == receiver
    ],
)
def test_signed_but_malformed_envelopes(overrides: dict[str, object]) -> None:
    """Even a key holder cannot get a malformed envelope accepted."""
    heartbeats = overrides.pop("heartbeats", [GOOD_HB])
    raw = raw_envelope(heartbeats=heartbeats, **overrides)  # type: ignore[arg-type]
    assert reason_of(lambda: dec(raw, max_bytes=1_000_000)) is RejectReason.MALFORMED


def test_wrong_receiver() -> None:
    raw = env(receiver="node-c")
    assert reason_of(lambda: dec(raw, receiver="node-b")) is RejectReason.WRONG_RECEIVER
    # a reflected message (my own, sent back to me) is also for someone else
    mine = env(sender="node-b", receiver="node-a")
    assert reason_of(lambda: dec(mine, receiver="node-b")) is RejectReason.WRONG_RECEIVER


@pytest.mark.parametrize(("offset", "ok"), [(0.0, True), (-WINDOW, True), (WINDOW, True), (-WINDOW - 0.01, False), (WINDOW + 0.01, False), (-3600.0, False), (86400.0, False)])
def test_stale_window(offset: float, ok: bool) -> None:
    # the own heartbeat is fresh: only the envelope's own sent_at is judged here
    raw = env(sent_at=NOW + offset, own=hb("node-a", sent_at=NOW))
    if ok:
        assert dec(raw).sent_at == NOW + offset
    else:
        assert reason_of(lambda: dec(raw)) is RejectReason.STALE


def test_replayed_and_then_stale() -> None:
    cache = NonceCache()
    raw = env()
    dec(raw, cache=cache)
    assert reason_of(lambda: dec(raw, cache=cache)) is RejectReason.REPLAYED
    assert reason_of(lambda: dec(raw, cache=cache, now=NOW + WINDOW)) is RejectReason.REPLAYED
    assert reason_of(lambda: dec(raw, cache=cache, now=NOW + WINDOW + 0.001)) is RejectReason.STALE
    # same nonce from another sender is a different message
    other = env(sender="node-c", nonce=json.loads(raw)["nonce"])
    assert dec(other, cache=cache).sender == C


def test_rejected_envelopes_do_not_consume_their_nonce() -> None:
    cache = NonceCache()
    nonce = fresh_nonce()
    raw = env(nonce=nonce)
    assert reason_of(lambda: dec(raw, cache=cache, receiver="node-c")) is RejectReason.WRONG_RECEIVER
    assert reason_of(lambda: dec(raw, cache=cache, sender_allowed=lambda s: False)) is RejectReason.SENDER_MISMATCH
    assert len(cache) == 0
    assert dec(raw, cache=cache).nonce == nonce
    assert len(cache) == 1


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
    ("own", "reason"),
    [
        (hb("node-a", keyring=Keyring([K_GONE])).to_wire(), RejectReason.UNKNOWN_KEY),
        ({**hb("node-a").to_wire(), "seq": 2}, RejectReason.BAD_SIGNATURE),
        (hb("node-a", sent_at=NOW - 100).to_wire(), RejectReason.STALE),
        ({k: v for k, v in hb("node-a").to_wire().items() if k != "mac"}, RejectReason.UNSIGNED),
    ],
)
def test_sender_own_heartbeat_must_be_valid(own: dict[str, object], reason: RejectReason) -> None:
    raw = raw_envelope(heartbeats=[own])
    assert reason_of(lambda: dec(raw)) is reason


def test_one_bad_relayed_heartbeat_does_not_drop_the_envelope() -> None:
    good = hb("node-c", alive=("node-c",), dead=())
    tampered = {**hb("node-d", alive=(), dead=()).to_wire(), "kubelet_ok": False}
    unknown = hb("node-e", keyring=Keyring([K_GONE]), alive=(), dead=()).to_wire()
    stale = hb("node-f", sent_at=NOW - 31, alive=(), dead=()).to_wire()
    future = hb("node-g", sent_at=NOW + 31, alive=(), dead=()).to_wire()
    extra = signed_hb_dict(extra=1)
    unsorted = signed_hb_dict(alive=["node-z", "node-c"])
    overlap = signed_hb_dict(alive=["node-c"], dead=["node-c"])
    unsigned = {k: v for k, v in good.to_wire().items() if k != "mac"}
    raw = raw_envelope(
        heartbeats=[hb("node-a").to_wire(), good.to_wire(), tampered, unknown, stale, future, extra, unsorted, overlap, unsigned, "junk", 5]
    )
    d = dec(raw)
    got = [(r.index, r.reason) for r in d.relayed]
    assert got == [
        (1, None),
        (2, RejectReason.BAD_SIGNATURE),
        (3, RejectReason.UNKNOWN_KEY),
        (4, RejectReason.STALE),
        (5, RejectReason.STALE),
        (6, RejectReason.MALFORMED),
        (7, RejectReason.MALFORMED),
        (8, RejectReason.MALFORMED),
        (9, RejectReason.UNSIGNED),
        (10, RejectReason.MALFORMED),
        (11, RejectReason.MALFORMED),
    ]
    assert d.relayed[0].heartbeat == good
    assert d.heartbeats == (d.own, good)
    assert all(r.detail for r in d.relayed)


def test_heartbeat_max_age_can_be_set_separately() -> None:
    relay = hb("node-c", sent_at=NOW - 10, alive=(), dead=())
    d = dec(env(relayed=(relay,)), heartbeat_max_age_s=5.0)
    assert d.relayed[0].reason is RejectReason.STALE


def test_caller_bugs_are_not_rejections() -> None:
    with pytest.raises(TypeError):
        dec("text")  # type: ignore[arg-type]
    for kwargs in ({"now": math.nan}, {"max_bytes": 0}, {"receiver": "Bad"}):
        with pytest.raises(ValueError):
            dec(env(), **kwargs)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        decode_envelope(env(), keyring=RING, receiver=B, now=NOW, max_bytes=10_000, replay_window_s=0.0, nonce_cache=NonceCache())
    with pytest.raises(ValueError):
        decode_heartbeat({}, keyring=RING, now=NOW, max_age_s=-1.0, max_future_s=1.0)


def test_memoryview_and_bytearray_inputs() -> None:
    raw = env()
    assert dec(bytearray(raw)).sender == A
    assert dec(memoryview(env())).sender == A


# --------------------------------------------------------------------------- hostile input fuzzing

ANY_REASON = set(RejectReason)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=2048))
def test_fuzz_random_bytes(raw: bytes) -> None:
    assert reason_of(lambda: dec(raw)) in {RejectReason.MALFORMED, RejectReason.UNSIGNED, RejectReason.OVERSIZED}


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=5),
    max_leaves=25,
)
ENVELOPE_KEYS = ["v", "sender", "receiver", "nonce", "sent_at", "heartbeats", "key_id", "mac"]


def dumps(value: object) -> bytes:
    return json.dumps(value).encode()


@settings(max_examples=150, deadline=None)
@given(json_values)
def test_fuzz_random_json(value: object) -> None:
    assert reason_of(lambda: dec(dumps(value))) in {RejectReason.MALFORMED, RejectReason.UNSIGNED}


@settings(max_examples=120, deadline=None)
@given(st.dictionaries(st.sampled_from(ENVELOPE_KEYS + ["extra"]), json_values, min_size=5))
def test_fuzz_random_envelope_shaped_objects(obj: dict[str, object]) -> None:
    r = reason_of(lambda: dec(dumps(obj)))
    assert r in {RejectReason.MALFORMED, RejectReason.UNSIGNED, RejectReason.UNKNOWN_KEY, RejectReason.BAD_SIGNATURE}


VALID = env(relayed=(hb("node-c", alive=("node-c",), dead=()),))


@settings(max_examples=300, deadline=None)
@given(st.integers(0, len(VALID) - 1))
def test_fuzz_truncated(cut: int) -> None:
    assert reason_of(lambda: dec(VALID[:cut])) in {RejectReason.MALFORMED, RejectReason.UNSIGNED}


@settings(max_examples=500, deadline=None)
@given(st.lists(st.integers(0, len(VALID) * 8 - 1), min_size=1, max_size=4, unique=True))
def test_fuzz_bit_flips(bits: list[int]) -> None:
    """A bit-flipped message is refused — unless the flips produced the very
    same JSON value (impossible in canonical form, checked anyway)."""
    data = bytearray(VALID)
    for b in bits:
        data[b // 8] ^= 1 << (b % 8)
    try:
        d = dec(bytes(data))
    except Rejected as exc:
        assert exc.reason in ANY_REASON - {RejectReason.OVERSIZED}
    else:
        assert json.loads(bytes(data)) == json.loads(VALID), d


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_fuzz_authenticated_junk(data: st.DataObject) -> None:
    """A key holder (compromised node) sends signed junk: any field replaced,
    removed or added, including inside heartbeats. Only Rejected may come
    out, or an accepted envelope whose heartbeats are all well-typed."""
    obj = json.loads(VALID)
    del obj["mac"], obj["key_id"]
    target = obj if data.draw(st.booleans()) else obj["heartbeats"][data.draw(st.integers(0, 1))]
    for _ in range(data.draw(st.integers(1, 3))):
        key = data.draw(st.sampled_from(sorted(target) + ["extra", "origin", "alive"]))
        if data.draw(st.booleans()) and key in target:
            del target[key]
        else:
            target[key] = data.draw(json_values)
    try:
        raw = canonical_json(RING.sign(obj, domain=ENVELOPE_DOMAIN))
    except (ValueError, TypeError):
        return  # the junk itself has no canonical form (lone surrogate)
    try:
        d = dec(raw)
    except Rejected as exc:
        assert exc.reason in ANY_REASON
        return
    for h in d.heartbeats:
        assert isinstance(h.seq, int) and isinstance(h.sent_at, float) and all(isinstance(n, str) for n in h.alive)


# --------------------------------------------------------------------------- nonce cache


def test_nonce_cache_remembers_until_expiry() -> None:
    c = NonceCache(max_entries=10)
    assert c.check_and_remember(sender="a", nonce="n1", sent_at=100.0, window_s=30.0, now=100.0)
    assert not c.check_and_remember(sender="a", nonce="n1", sent_at=100.0, window_s=30.0, now=110.0)
    assert ("a", "n1") in c and len(c) == 1
    assert not c.check_and_remember(sender="a", nonce="n1", sent_at=100.0, window_s=30.0, now=130.0)  # boundary
    # past expiry it is purged; the message itself is now too old to be accepted
    assert not c.check_and_remember(sender="a", nonce="n1", sent_at=100.0, window_s=30.0, now=130.5)
    assert len(c) == 0
    assert c.floor == -math.inf


def test_nonce_cache_capacity_never_opens_a_replay() -> None:
    c = NonceCache(max_entries=3)
    for i, t in enumerate([10.0, 11.0, 12.0]):
        assert c.check_and_remember(sender="s", nonce=f"n{i}", sent_at=t, window_s=30.0, now=12.0)
    # a fourth evicts the entry expiring first (n0, expiry 40) and raises the floor
    assert c.check_and_remember(sender="s", nonce="n3", sent_at=13.0, window_s=30.0, now=13.0)
    assert len(c) == 3 and c.floor == 40.0 and ("s", "n0") not in c
    # the evicted one can no longer be proven fresh: refused
    assert not c.check_and_remember(sender="s", nonce="n0", sent_at=10.0, window_s=30.0, now=13.0)
    # a newcomer older than everything in a full cache is refused instead of evicting
    assert not c.check_and_remember(sender="t", nonce="x", sent_at=10.5, window_s=30.0, now=13.0)
    assert len(c) == 3
    assert c.max_entries == 3


@pytest.mark.parametrize(
    "kwargs", [{"sent_at": math.nan}, {"window_s": 0.0}, {"window_s": -1.0}, {"now": math.inf}]
)
def test_nonce_cache_bad_arguments(kwargs: dict[str, float]) -> None:
    args: dict[str, Any] = dict(sender="a", nonce="n", sent_at=1.0, window_s=30.0, now=1.0)
    args.update(kwargs)
    with pytest.raises(ValueError):
        NonceCache().check_and_remember(**args)
    with pytest.raises(ValueError):
        NonceCache(max_entries=0)


@settings(max_examples=200, deadline=None)
@given(
    st.integers(1, 6),
    st.lists(
        st.tuples(st.integers(0, 2), st.integers(0, 5), st.floats(-40, 40), st.floats(0, 5), st.integers(-1, 30)),
        max_size=60,
    ),
)
def test_nonce_cache_never_accepts_a_replay(capacity: int, ops: list[tuple[int, int, float, float, int]]) -> None:
    """Model check: a message (sender, nonce, sent_at — all covered by the
    MAC) presented again while inside its window is always refused, whatever
    else happened in between (evictions included); size stays bounded."""
    c = NonceCache(max_entries=capacity)
    window = 30.0
    now = 0.0
    presented: list[tuple[str, str, float]] = []
    accepted: set[tuple[str, str, float]] = set()
    for sender, nonce, offset, step, replay in ops:
        now += step
        if 0 <= replay < len(presented):
            msg = presented[replay]  # an attacker replays an earlier message
        else:
            msg = (f"s{sender}", f"n{nonce}-{len(presented)}", now + offset)
        presented.append(msg)
        ok = c.check_and_remember(sender=msg[0], nonce=msg[1], sent_at=msg[2], window_s=window, now=now)
        if msg in accepted:
            assert not ok, "replay accepted"
        if ok:
            accepted.add(msg)
        assert len(c) <= capacity


# --------------------------------------------------------------------------- heartbeat book


def test_book_freshness_table() -> None:
    book = HeartbeatBook()
    assert book.offer(hb(seq=5, inc=1), now=1.0) is Freshness.NEW
    assert book.offer(hb(seq=5, inc=1), now=2.0) is Freshness.DUPLICATE
    assert book.offer(hb(seq=4, inc=1), now=3.0) is Freshness.OLDER
    assert book.offer(hb(seq=6, inc=1), now=4.0) is Freshness.NEW
    assert book.offer(hb(seq=0, inc=2), now=5.0) is Freshness.NEW  # restart: new incarnation
    assert book.offer(hb(seq=99, inc=1), now=6.0) is Freshness.OLDER  # old incarnation's late relay
    entry = book.get(A)
    assert entry is not None and entry.heartbeat.order == (2, 0) and entry.received_at == 5.0
    assert A in book and len(book) == 1 and book.get(B) is None


def test_book_forgets_so_a_clock_that_went_back_recovers() -> None:
    book = HeartbeatBook(forget_after_s=90.0)
    book.offer(hb(inc=1000, seq=5), now=0.0)
    assert book.offer(hb(inc=10, seq=1), now=90.0) is Freshness.OLDER
    assert book.offer(hb(inc=1000, seq=5), now=200.0) is Freshness.DUPLICATE  # identical never refreshes
    assert book.offer(hb(inc=10, seq=1), now=90.1) is Freshness.NEW


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
        book.offer(hb(name), now=float(i))
    book.retain({A, B})
    assert [e.heartbeat.origin for e in book.entries()] == [A, B]
    book.mark_relayed([hb("node-a"), hb("node-b", seq=0)])  # node-b's seq 0 is not current
    assert book.get(A).relay_count == 1 and book.get(B).relay_count == 0  # type: ignore[union-attr]
    book.offer(hb("node-a", seq=2), now=9.0)
    assert book.get(A).relay_count == 0  # type: ignore[union-attr]  # news resets the count
    votes = book.votes()
    assert votes[A].observed_at == 9.0 and votes[B].observed_at == 1.0
    assert votes[A].alive == frozenset({A, B}) and votes[A].dead == frozenset({C})


def test_book_bad_arguments() -> None:
    with pytest.raises(ValueError):
        HeartbeatBook(max_origins=0)
    with pytest.raises(ValueError):
        HeartbeatBook(forget_after_s=math.inf)
    with pytest.raises(ValueError):
        HeartbeatBook().offer(hb(), now=math.nan)


BOOK_HBS = [hb(o, inc=i, seq=s) for o in ("node-a", "node-b") for i in (1, 2) for s in (0, 1, 2)]


@settings(max_examples=200, deadline=None)
@given(st.permutations(BOOK_HBS))
def test_book_keeps_the_newest_whatever_the_arrival_order(order: list[Heartbeat]) -> None:
    book = HeartbeatBook()
    news = 0
    for i, h in enumerate(order):
        news += book.offer(h, now=float(i)) is Freshness.NEW
        # relays of anything already seen are harmless
        assert book.offer(h, now=float(i)) is not Freshness.NEW
    for origin in (A, B):
        assert book.get(origin).heartbeat.order == (2, 2)  # type: ignore[union-attr]
    assert 2 <= news <= len(order)


# --------------------------------------------------------------------------- relay selection


def filled_book(n: int, *, now: float = 100.0) -> HeartbeatBook:
    book = HeartbeatBook()
    for i in range(n):
        book.offer(hb(f"n{i:03d}", alive=(), dead=()), now=now - i * 0.1)
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


@pytest.mark.parametrize("kwargs", [{"max_count": -1}, {"max_age_s": -1.0}, {"max_age_s": math.nan}, {"now": math.inf}])
def test_select_relays_bad_arguments(kwargs: dict[str, float]) -> None:
    args: dict[str, Any] = dict(for_peer=A, now=1.0, max_count=3, max_age_s=5.0, rng=random.Random(0))
    args.update(kwargs)
    with pytest.raises(ValueError):
        select_relays(HeartbeatBook(), **args)


def test_gossip_disseminates_with_fanout_messages_per_node() -> None:
    """20 agents, fanout 3, 8 relays per envelope, real encode/decode: every
    agent learns every other agent's heartbeat within a few periods while
    sending exactly `fanout` envelopes per period, and in steady state the
    heartbeats it holds are on average less than 2 periods old."""
    cfg = WireConfig()
    n, rng = 20, random.Random(42)
    nodes = [NodeName(f"n{i:02d}") for i in range(n)]
    books = {m: HeartbeatBook() for m in nodes}
    caches = {m: NonceCache() for m in nodes}
    complete_at = None
    sent = 0
    periods = 15
    for period in range(1, periods + 1):
        now = NOW + period
        own = {m: hb(m, seq=period, sent_at=now, alive=(), dead=()) for m in nodes}
        for m in nodes:
            books[m].offer(own[m], now=now)
        for m in nodes:
            for peer in rng.sample([p for p in nodes if p != m], cfg.fanout):
                relays = select_relays(
                    books[m], for_peer=peer, now=now, max_count=cfg.max_relays, max_age_s=cfg.relay_max_age_s,
                    rng=rng, exclude={m},
                )
                raw = encode_envelope(sender=m, receiver=peer, nonce=f"{rng.getrandbits(128):032x}", sent_at=now,
                                      own=own[m], relayed=relays, keyring=RING, max_bytes=cfg.max_bytes)
                books[m].mark_relayed(relays)
                sent += 1
                d = decode_envelope(raw, keyring=RING, receiver=peer, now=now, max_bytes=cfg.max_bytes,
                                    replay_window_s=cfg.replay_window_s, nonce_cache=caches[peer])
                assert all(r.accepted for r in d.relayed)
                for h in d.heartbeats:
                    books[peer].offer(h, now=now)
        if complete_at is None and all(len(books[m]) == n for m in nodes):
            complete_at = period
    assert complete_at is not None and complete_at <= 8
    assert sent == n * cfg.fanout * periods
    ages = [periods - e.heartbeat.seq for m in nodes for e in books[m].entries()]
    assert sum(ages) / len(ages) < 2.0


# --------------------------------------------------------------------------- config


def test_wire_config_defaults_are_consistent() -> None:
    cfg = WireConfig()
    assert cfg.max_bytes == 262_144 and cfg.replay_window_s == 30.0 and cfg.fanout == 3 and cfg.max_relays == 8
    assert cfg.book_forget_after_s >= cfg.heartbeat_max_age_s + cfg.replay_window_s


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_bytes": 10},
        {"replay_window_s": 0.0},
        {"heartbeat_max_age_s": math.nan},
        {"fanout": 0},
        {"max_relays": MAX_HEARTBEATS_PER_ENVELOPE},
        {"max_relays": -1},
        {"relay_max_age_s": 31.0},
        {"book_forget_after_s": 59.0},
        {"nonce_cache_entries": 0},
        {"book_max_origins": True},
    ],
)
def test_wire_config_refuses_nonsense(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        WireConfig(**kwargs)  # type: ignore[arg-type]

"""Tests of edgewatch.core.beacon and edgewatch.core.evidence: the controller's beacon, signed
evidence lists, and the book that times statements by beacon and refuses replays."""

from __future__ import annotations

import json

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from hypothesis import given, settings
from hypothesis import strategies as st

from _keys import PUBLIC, ring

from edgewatch.core.beacon import Beacon, BeaconHolder, BeaconLog, sign_beacon, verify_beacon
from edgewatch.core.evidence import (
    MAX_EVIDENCE_BYTES,
    MAX_STATEMENTS,
    EvidenceBook,
    decode_evidence,
    encode_evidence,
    verified_decision,
)
from edgewatch.core.identity import NodeKey
from edgewatch.core.types import NodeName, Verdict
from edgewatch.core.wire import Heartbeat, Rejected, RejectReason, sign_heartbeat

N = [NodeName(f"e-{i}") for i in range(1, 6)]
B1, B2, B3 = "1" * 32, "2" * 32, "3" * 32


def stmt(origin: str, *, beacon: str = B1, seq: int = 1, inc: int = 1, alive: tuple[str, ...] = (),
         dead: tuple[str, ...] = (), kubelet_ok: bool = True, cloud_ok: bool = True, signer: str | None = None) -> Heartbeat:
    return sign_heartbeat(origin=NodeName(origin), incarnation=inc, seq=seq, kubelet_ok=kubelet_ok,
                          cloud_ok=cloud_ok, alive=[NodeName(a) for a in alive], dead=[NodeName(d) for d in dead],
                          keyring=ring(signer or origin), beacon=beacon)


# --------------------------------------------------------------------------- beacon


def test_beacon_sign_verify_and_refusals() -> None:
    key = NodeKey.generate()
    pub = Ed25519PublicKey.from_public_bytes(key.public_raw)
    token = sign_beacon(Beacon(7, B1), key)
    assert verify_beacon(token, pub) == Beacon(7, B1)
    other = Ed25519PublicKey.from_public_bytes(NodeKey.generate().public_raw)
    for bad, pk in [(token, other), (token.replace("7.", "8.", 1), pub), ("x", pub), (None, pub),
                    (token + "0", pub), ("7." + B1, pub)]:
        with pytest.raises(ValueError):
            verify_beacon(bad, pk)


def test_beacon_holder_adopts_only_newer_signed_beacons() -> None:
    key = NodeKey.generate()
    holder = BeaconHolder()
    assert holder.offer(sign_beacon(Beacon(1, B1), key)) is False  # no trusted key yet
    holder.trust(key.public_raw)
    assert holder.offer(sign_beacon(Beacon(2, B2), key)) and holder.value == B2
    assert not holder.offer(sign_beacon(Beacon(1, B1), key))  # older
    assert not holder.offer(sign_beacon(Beacon(2, B2), key))  # same
    forger = NodeKey.generate()
    assert not holder.offer(sign_beacon(Beacon(99, B3), forger)) and holder.value == B2  # a peer's fake
    assert not holder.offer("junk") and not holder.offer(None)
    holder.trust(forger.public_raw)  # a new controller key (from the cloud) resets
    assert holder.value == "" and holder.offer(sign_beacon(Beacon(1, B3), forger))
    with pytest.raises(ValueError):
        holder.trust(b"short")


def test_the_beacon_held_is_not_verified_again(monkeypatch: pytest.MonkeyPatch) -> None:
    from edgewatch.core import beacon as beacon_module

    key = NodeKey.generate()
    holder = BeaconHolder()
    holder.trust(key.public_raw)
    token = sign_beacon(Beacon(2, B2), key)
    assert holder.offer(token)
    checks: list[object] = []
    monkeypatch.setattr(beacon_module, "verify_beacon", lambda t, p: checks.append(t) or verify_beacon(t, p))
    for _ in range(20):  # every peer envelope carries it
        assert not holder.offer(token)
    assert checks == []
    assert holder.offer(sign_beacon(Beacon(3, B3), key)) and len(checks) == 1  # a new one is verified
    holder.trust(NodeKey.generate().public_raw)  # a new key: the old token means nothing
    assert not holder.offer(token) and holder.value == ""


def test_beacon_log_is_bounded() -> None:
    log = BeaconLog(max_beacons=2)
    log.record(B1, at=1.0)
    log.record(B2, at=2.0)
    log.record(B3, at=3.0)
    assert log.issued_at(B1) is None and log.issued_at(B2) == 2.0 and log.issued_at(B3) == 3.0 and len(log) == 2
    with pytest.raises(ValueError):
        BeaconLog(max_beacons=0)


# --------------------------------------------------------------------------- evidence lists


def test_evidence_roundtrip_with_carried_statements() -> None:
    own = stmt("e-1", alive=("e-1", "e-2"))
    carried = stmt("e-2", cloud_ok=False, alive=("e-1", "e-2"))
    text = encode_evidence(own, [carried, carried, own])
    accepted, refused = decode_evidence(text, writer=N[0], verifier=PUBLIC)
    assert accepted == [own, carried] and refused == []


def test_evidence_refusals() -> None:
    own = stmt("e-1")
    forged = stmt("e-3", signer="e-1")  # e-1 signs as e-3 with its own key
    tampered = {**stmt("e-4").to_wire(), "kubelet_ok": False}
    items = [own.to_wire(), forged.to_wire(), tampered, "junk", own.to_wire()]
    accepted, refused = decode_evidence(json.dumps(items), writer=N[0], verifier=PUBLIC)
    assert accepted == [own]
    assert [r.reason for r in refused] == [RejectReason.SENDER_MISMATCH, RejectReason.BAD_SIGNATURE,
                                          RejectReason.MALFORMED, RejectReason.MALFORMED]


@pytest.mark.parametrize(("text", "reason"), [
    (None, RejectReason.MALFORMED),
    ("x" * (MAX_EVIDENCE_BYTES + 1), RejectReason.OVERSIZED),
    ("{}", RejectReason.MALFORMED),
    ("[]", RejectReason.MALFORMED),
    ('[{"a": 1, "a": 2}]', RejectReason.MALFORMED),
    ("[NaN]", RejectReason.MALFORMED),
    ("[" * 100_000, RejectReason.MALFORMED),
])
def test_evidence_refused_whole(text: object, reason: RejectReason) -> None:
    with pytest.raises(Rejected) as info:
        decode_evidence(text, writer=N[0], verifier=PUBLIC)
    assert info.value.reason is reason


def test_the_first_statement_must_be_the_writers_own() -> None:
    """A stolen token writes e-1's Lease with e-2's genuine statement first: refused whole."""
    with pytest.raises(Rejected) as info:
        decode_evidence(encode_evidence(stmt("e-2")), writer=N[0], verifier=PUBLIC)
    assert info.value.reason is RejectReason.SENDER_MISMATCH


def test_encode_refuses_too_many() -> None:
    many = [stmt(f"x-{i}") for i in range(MAX_STATEMENTS)]
    with pytest.raises(ValueError):
        encode_evidence(stmt("e-1"), many)


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(max_size=300), st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=15).map(json.dumps)))
def test_decode_evidence_never_raises_anything_but_rejected(text: str) -> None:
    """Junk is refused with an explained reason; anything accepted starts with the writer's own
    statement, verified (no junk here carries a valid signature, so nothing is accepted)."""
    try:
        accepted, refused = decode_evidence(text, writer=N[0], verifier=PUBLIC)
    except Rejected as exc:
        assert exc.reason in set(RejectReason) and 0 < len(exc.detail) <= 300
        return
    assert accepted and accepted[0].origin == N[0]
    assert all(r.reason in set(RejectReason) for r in refused)


# --------------------------------------------------------------------------- the book


def book(times: dict[str, float]) -> EvidenceBook:
    return EvidenceBook(beacon_time=times.get)


def test_book_times_by_beacon_and_refuses_replays() -> None:
    b = book({B1: 10.0, B2: 20.0})
    assert b.offer(stmt("e-1", beacon=B1, seq=5), carrier=N[0]) == "new"
    assert b.offer(stmt("e-1", beacon=B1, seq=5), carrier=N[0]) == "duplicate"
    assert b.offer(stmt("e-1", beacon=B1, seq=4), carrier=N[0]) == "older"
    assert b.offer(stmt("e-1", beacon=B2, seq=1, inc=2), carrier=N[1]) == "new"  # a restart, later beacon
    assert b.offer(stmt("e-1", beacon=B1, seq=99), carrier=N[1]) == "older"  # replay of an old beacon
    assert b.offer(stmt("e-1", beacon=B3), carrier=N[1]) == "unknown_beacon"  # not one we issued
    assert b.offer(stmt("e-1", beacon=""), carrier=N[1]) == "unknown_beacon"
    held = b.get(N[0])
    assert held is not None and held.at == 20.0 and held.carrier == N[1]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 5)), max_size=30))
def test_book_never_goes_back_in_beacon_time(offers: list[tuple[int, int]]) -> None:
    values = [f"{i:032x}" for i in range(4)]
    b = book({v: float(i) for i, v in enumerate(values)})
    best = -1.0
    for beacon, seq in offers:
        b.offer(stmt("e-1", beacon=values[beacon], seq=seq), carrier=N[0])
        held = b.get(N[0])
        assert held is not None and held.at >= best
        best = held.at


def test_own_life_needs_a_fresh_own_statement_with_a_working_kubelet() -> None:
    b = book({B1: 10.0, B2: 20.0})
    b.offer(stmt("e-2", beacon=B1, cloud_ok=False), carrier=N[0])
    assert b.own_life(N[1], now=25.0, ttl_s=30.0) is not None
    assert b.own_life(N[1], now=41.0, ttl_s=30.0) is None  # its beacon is too old
    b.offer(stmt("e-2", beacon=B2, kubelet_ok=False), carrier=N[0])
    assert b.own_life(N[1], now=25.0, ttl_s=30.0) is None
    assert b.own_life(N[2], now=25.0, ttl_s=30.0) is None


def test_verified_majority_and_a_single_liar() -> None:
    """Five members; four honest statements see e-5 dead. One liar (e-1) can only change its own
    vote: it cannot turn 'dead' into 'alive', nor make e-2 unhealthy."""
    group = frozenset(N)
    b = book({B1: 10.0})
    for o in N[:4]:
        b.offer(stmt(o, alive=tuple(N[:4]), dead=("e-5",)), carrier=o)
    d = verified_decision(N[4], group=group, votes=b.votes(), now=12.0, ttl_s=30.0)
    assert d.verdict is Verdict.UNHEALTHY and d.dead_count == 4
    b.offer(stmt("e-1", seq=2, alive=("e-1", "e-5"), dead=("e-2",)), carrier=N[0])  # the liar
    assert verified_decision(N[4], group=group, votes=b.votes(), now=12.0, ttl_s=30.0).verdict is Verdict.UNHEALTHY
    assert verified_decision(N[1], group=group, votes=b.votes(), now=12.0, ttl_s=30.0).verdict is Verdict.HEALTHY
    # everything expires with its beacon
    assert verified_decision(N[4], group=group, votes=b.votes(), now=41.0, ttl_s=30.0).verdict is Verdict.UNKNOWN


@settings(max_examples=200, deadline=None)
@given(st.integers(3, 9), st.data())
def test_one_key_never_decides_against_an_honest_majority(n: int, data: st.DataObject) -> None:
    """Whatever one compromised member signs, a verdict the honest members agree on by a strict
    majority of the group without it stands."""
    nodes = [NodeName(f"p-{i}") for i in range(n)]
    group = frozenset(nodes)
    liar = data.draw(st.sampled_from(nodes))
    subject = data.draw(st.sampled_from(nodes))
    honest_view = data.draw(st.sampled_from(["alive", "dead"]))
    b = book({B1: 1.0})
    for o in nodes:
        if o == liar:
            continue
        alive = tuple(nodes) if honest_view == "alive" else tuple(x for x in nodes if x != subject)
        dead = () if honest_view == "alive" else (subject,)
        b.offer(stmt(o, alive=alive, dead=dead), carrier=o)
    lie = data.draw(st.sampled_from(["alive", "dead", "none"]))
    b.offer(stmt(liar, alive=(subject,) if lie == "alive" else (), dead=(subject,) if lie == "dead" else ()),
            carrier=liar)
    honest = n - 1 - (1 if subject == liar and honest_view == "dead" else 0)
    d = verified_decision(subject, group=group, votes=b.votes(), now=2.0, ttl_s=30.0)
    if honest > n // 2:
        expected = Verdict.HEALTHY if honest_view == "alive" else Verdict.UNHEALTHY
        assert d.verdict is expected


# --------------------------------------------------------------------------- rate limit


def test_rate_limiter_token_bucket_per_source() -> None:
    from edgewatch.core.ratelimit import RateLimiter

    lim = RateLimiter(rate_per_s=2.0, burst=3, max_sources=2)
    assert [lim.allow("a", now=0.0) for _ in range(4)] == [True, True, True, False]
    assert lim.allow("b", now=0.0)  # another source is not affected
    assert not lim.allow("a", now=0.2) and lim.allow("a", now=0.5)  # refills at 2/s
    lim.allow("c", now=1.0)
    assert len(lim) == 2  # bounded: the least recently used source went
    with pytest.raises(ValueError):
        RateLimiter(rate_per_s=0, burst=1)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(0, 0.5), max_size=200))
def test_rate_limiter_never_allows_more_than_burst_plus_rate(gaps: list[float]) -> None:
    from edgewatch.core.ratelimit import RateLimiter

    lim = RateLimiter(rate_per_s=5.0, burst=4)
    now, allowed = 0.0, 0
    for gap in gaps:
        now += gap
        allowed += lim.allow("x", now=now)
    assert allowed <= 4 + 5.0 * now + 1e-9

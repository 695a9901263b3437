"""The version policy of the wire and the evidence (docs/versions.md): N (v5) and N-1 (v4) are read
and written, negotiated per peer; anything else is refused with the reason ``version``; a group
where some members speak only v4 reaches the verdicts of an all-v5 group.

The same codec against release 0.1.0's own code: tests/integration/test_wire_versions.py.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edgewatch.core.evidence import EvidenceBook, decode_evidence, encode_evidence, verified_decisions
from edgewatch.core.protocol import (
    EVIDENCE_WRITE_VERSION,
    MIN_PROTOCOL_VERSION,
    PROTOCOL_VERSION,
    STATEMENT_VERSION,
    envelope_domain,
    envelope_magic,
)
from edgewatch.core.signing import canonical_json
from edgewatch.core.types import NodeName
from edgewatch.core.versions import PeerVersions, negotiate
from edgewatch.core.wire import (
    HEARTBEAT_DOMAIN,
    Heartbeat,
    Rejected,
    RejectReason,
    ReplayGuard,
    decode_envelope,
    decode_heartbeat,
    encode_envelope,
    sign_heartbeat,
)
from _keys import ring

EPOCH = 1_700_000_000_000_000_000
BEACON = "ab" * 16
NOW = 100.0
A, B = NodeName("node-a"), NodeName("node-b")
_V4_ENVELOPE_KEYS = {"v", "sender", "receiver", "epoch", "seq", "nonce", "reply_to", "heartbeats", "ages", "beacon"}


def own(origin: NodeName = A, *, seq: int = 1, alive: tuple[str, ...] = (), dead: tuple[str, ...] = ()) -> Heartbeat:
    return sign_heartbeat(origin=origin, incarnation=1, seq=seq, kubelet_ok=True, cloud_ok=True,
                          alive=[origin, *map(NodeName, alive)], dead=[NodeName(d) for d in dead],
                          keyring=ring(origin), beacon=BEACON)


def envelope(version: int, *, seq: int = 1, nonce: str = "0" * 31 + "1", reply_to: str | None = None) -> bytes:
    return encode_envelope(sender=A, receiver=B, epoch=EPOCH, seq=seq, nonce=nonce, reply_to=reply_to,
                           own=own(), keyring=ring(A), version=version)


def refusal(fn: Any) -> Rejected:
    with pytest.raises(Rejected) as info:
        fn()
    assert info.value.detail
    return info.value


def decode(raw: bytes, *, reply_to: str | None = None, guard: ReplayGuard | None = None) -> Any:
    return decode_envelope(raw, keyring=ring(B), receiver=B, max_bytes=65_536, guard=guard if guard is not None else ReplayGuard(),
                           reply_to=reply_to)


def test_policy_constants() -> None:
    assert (MIN_PROTOCOL_VERSION, PROTOCOL_VERSION) == (4, 5)
    assert STATEMENT_VERSION == 4 and EVIDENCE_WRITE_VERSION == 4
    assert envelope_magic(4) == b"edgewatch-envelope/v4" and envelope_domain(4) == "edgewatch/envelope/v4"


@pytest.mark.parametrize("version", [4, 5])
def test_each_version_round_trips(version: int) -> None:
    decoded = decode(envelope(version))
    assert decoded.version == version
    assert decoded.versions == ((4, 5) if version == 5 else (4, 4))
    assert decoded.own == own() and decoded.sender == A


def test_v4_is_written_exactly_as_0_1_0_writes_it() -> None:
    raw = envelope(4)
    header, body = raw.split(b"\n", 1)
    assert header.split(b" ")[0] == b"edgewatch-envelope/v4"
    obj = json.loads(body)
    assert set(obj) == _V4_ENVELOPE_KEYS and obj["v"] == 4
    assert canonical_json(obj) == body  # canonical, as 0.1.0 signs it
    assert obj["heartbeats"][0]["v"] == 4


def test_v5_adds_only_the_senders_range() -> None:
    obj = json.loads(envelope(5).split(b"\n", 1)[1])
    assert set(obj) == _V4_ENVELOPE_KEYS | {"versions"}
    assert obj["v"] == 5 and obj["versions"] == [4, 5]
    assert obj["heartbeats"][0]["v"] == STATEMENT_VERSION  # statements keep one format


@pytest.mark.parametrize("version", [1, 2, 3, 6, 7, 99])
def test_other_envelope_versions_are_refused_as_version(version: int) -> None:
    body = json.loads(envelope(5).split(b"\n", 1)[1])
    body["v"] = version
    data = canonical_json(body)
    key_id, mac = ring(A).sign_bytes(data, domain=envelope_domain(version))
    raw = envelope_magic(version) + f" {key_id} {mac}\n".encode() + data
    exc = refusal(lambda: decode(raw))
    assert exc.reason is RejectReason.VERSION
    assert f"version {version}" in exc.detail and "4-5" in exc.detail


def _resign(version: int, mutate: Any) -> bytes:
    body = json.loads(envelope(version).split(b"\n", 1)[1])
    mutate(body)
    data = canonical_json(body)
    key_id, mac = ring(A).sign_bytes(data, domain=envelope_domain(version))
    return envelope_magic(version) + f" {key_id} {mac}\n".encode() + data


@pytest.mark.parametrize(("version", "mutate"), [
    (5, lambda b: b.pop("versions")),                       # v5 without its range
    (5, lambda b: b.__setitem__("versions", [6, 7])),       # a range without its own v
    (5, lambda b: b.__setitem__("versions", [4])),
    (5, lambda b: b.__setitem__("versions", ["4", "5"])),
    (5, lambda b: b.__setitem__("v", 4)),                   # body and header disagree
    (4, lambda b: b.__setitem__("versions", [4, 5])),       # v4 has no range (0.1.0 refuses it too)
    (4, lambda b: b.__setitem__("v", 5)),
])
def test_inconsistent_versions_are_malformed(version: int, mutate: Any) -> None:
    assert refusal(lambda: decode(_resign(version, mutate))).reason is RejectReason.MALFORMED


def test_a_v4_signature_does_not_verify_as_v5() -> None:
    """The domain names the version: a v4 body re-framed under the v5 magic does not verify."""
    raw = envelope(4)
    forged = raw.replace(b"edgewatch-envelope/v4", b"edgewatch-envelope/v5", 1)
    assert refusal(lambda: decode(forged)).reason is RejectReason.BAD_SIGNATURE


@pytest.mark.parametrize("version", [3, 5, 6])
def test_other_statement_versions_are_refused_as_version(version: int) -> None:
    statement = ring(A).sign({"v": version, "origin": "node-a", "incarnation": 1, "seq": 1, "kubelet_ok": True,
                              "cloud_ok": True, "alive": ["node-a"], "dead": [], "carrier": "", "beacon": ""},
                             domain=HEARTBEAT_DOMAIN)
    assert refusal(lambda: decode_heartbeat(statement, keyring=ring(B))).reason is RejectReason.VERSION


def test_answers_keep_the_requests_version_under_the_guard() -> None:
    guard = ReplayGuard()
    decode(envelope(4, seq=1), guard=guard)
    exc = refusal(lambda: decode(envelope(4, seq=2, nonce="0" * 31 + "2"), guard=guard))
    assert exc.reason is RejectReason.UNCONFIRMED and exc.answer_version == 4


# -- evidence ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", [4, 5])
def test_evidence_of_both_versions_is_read_alike(version: int) -> None:
    carried = [own(NodeName("node-c")), own(NodeName("node-d"))]
    text = encode_evidence(own(), carried, version=version)
    assert isinstance(json.loads(text), list if version == 4 else dict)
    accepted, refused = decode_evidence(text, writer=A, verifier=ring(B))
    assert accepted == [own(), *carried] and not refused


def test_evidence_is_written_at_n_minus_1_by_default() -> None:
    assert json.loads(encode_evidence(own())) == [own().to_wire()]


@pytest.mark.parametrize("version", [3, 6, 42])
def test_other_evidence_versions_are_refused_as_version(version: int) -> None:
    text = json.dumps({"v": version, "versions": [4, 5], "statements": [own().to_wire()]})
    exc = refusal(lambda: decode_evidence(text, writer=A, verifier=ring(B)))
    assert exc.reason is RejectReason.VERSION and "4-5" in exc.detail


@pytest.mark.parametrize("document", [
    {"v": 4, "statements": []},                                   # v4 is the bare list
    {"v": 5, "statements": []},                                   # no range
    {"v": 5, "versions": [6, 7], "statements": []},
    {"v": 5, "versions": [4, 5], "statements": [], "more": 1},
    {"v": "5", "versions": [4, 5], "statements": []},
    {"v": True, "versions": [4, 5], "statements": []},
    "a string",
])
def test_malformed_evidence_objects(document: object) -> None:
    exc = refusal(lambda: decode_evidence(json.dumps(document), writer=A, verifier=ring(B)))
    assert exc.reason is RejectReason.MALFORMED


def test_a_carried_statement_of_another_version_is_refused_alone() -> None:
    stranger = ring(NodeName("node-c")).sign(
        {"v": 6, "origin": "node-c", "incarnation": 1, "seq": 1, "kubelet_ok": True, "cloud_ok": True,
         "alive": ["node-c"], "dead": [], "carrier": "", "beacon": BEACON}, domain=HEARTBEAT_DOMAIN)
    text = json.dumps({"v": 5, "versions": [4, 5], "statements": [own().to_wire(), stranger]})
    accepted, refused = decode_evidence(text, writer=A, verifier=ring(B))
    assert accepted == [own()]
    assert [r.reason for r in refused] == [RejectReason.VERSION]


# -- negotiation -----------------------------------------------------------------------------------


def test_negotiate() -> None:
    assert negotiate((4, 4)) == 4 and negotiate((4, 5)) == 5 and negotiate((5, 6)) == 5
    assert negotiate((6, 7)) is None and negotiate((1, 3)) is None


def test_peer_versions_follow_the_newest_authenticated_message() -> None:
    table = PeerVersions()
    assert table.version_for(A) == PROTOCOL_VERSION and table.known(A) is None  # unknown: try N
    assert table.heard(A, version=4, versions=(4, 4)) == 4 and table.version_for(A) == 4
    assert table.heard(A, version=5, versions=(4, 5)) == 5 and table.version_for(A) == 5  # upgraded
    assert table.heard(A, version=5, versions=(5, 6)) == 5  # a newer agent still speaking our N
    assert table.heard(A, version=4, versions=(4, 4)) == 4  # rolled back: N-1 at once
    table.forget(A)
    assert table.known(A) is None


def test_a_refusal_falls_back_once() -> None:
    table = PeerVersions()
    assert table.refused(A, PROTOCOL_VERSION) == MIN_PROTOCOL_VERSION
    assert table.version_for(A) == MIN_PROTOCOL_VERSION
    assert table.refused(A, MIN_PROTOCOL_VERSION) is None  # nothing lower to try


def test_peer_versions_are_bounded() -> None:
    table = PeerVersions(max_peers=2)
    for name in ("node-a", "node-b", "node-c"):
        table.heard(NodeName(name), version=4, versions=(4, 4))
    assert len(table) == 2 and table.known(A) is None
    with pytest.raises(ValueError):
        PeerVersions(max_peers=0)


@settings(max_examples=60, deadline=None)
@given(version=st.sampled_from([4, 5]), alive=st.sets(st.sampled_from(["node-b", "node-c", "node-d"])),
       seq=st.integers(min_value=0, max_value=2**63 - 1), age=st.floats(min_value=0, max_value=30))
def test_codec_round_trip_property(version: int, alive: set[str], seq: int, age: float) -> None:
    statement = own(seq=seq, alive=tuple(sorted(alive)))
    raw = encode_envelope(sender=A, receiver=B, epoch=EPOCH, seq=seq, nonce="0" * 31 + "1", own=statement,
                          own_age_s=age, keyring=ring(A), version=version)
    decoded = decode(raw)
    assert (decoded.version, decoded.own, decoded.seq) == (version, statement, seq)
    assert decoded.own_age_s == round(age, 3)


# -- a mixed group reaches the verdicts of a uniform one -------------------------------------------


@dataclass
class _Agent:
    name: NodeName
    v4_only: bool  # release 0.1.0: reads and writes v4 only
    statement: Heartbeat
    versions: PeerVersions = field(default_factory=PeerVersions)
    guard: ReplayGuard = field(default_factory=ReplayGuard)
    held: dict[NodeName, Heartbeat] = field(default_factory=dict)
    sent: int = 0
    fallbacks: int = 0


def _send(src: _Agent, dst: _Agent, *, version: int, nonce: str, reply_to: str | None = None) -> bytes:
    src.sent += 1
    relayed = [(hb, 1.0) for origin, hb in sorted(src.held.items()) if origin != src.name]
    return encode_envelope(sender=src.name, receiver=dst.name, epoch=EPOCH, seq=src.sent, nonce=nonce,
                           reply_to=reply_to, own=src.statement, relayed=relayed, keyring=ring(src.name),
                           version=4 if src.v4_only else version)


def _receive(dst: _Agent, raw: bytes, *, reply_to: str | None = None) -> Any:
    if dst.v4_only and not raw.startswith(envelope_magic(4) + b" "):
        # 0.1.0's decoder: any other magic is MALFORMED (its HTTP answer: 400 "rejected: malformed").
        raise Rejected(RejectReason.MALFORMED, "envelope: header does not start with edgewatch-envelope/v4")
    env = decode_envelope(raw, keyring=ring(dst.name), receiver=dst.name, max_bytes=65_536, guard=dst.guard,
                          reply_to=reply_to)
    if not dst.v4_only:
        dst.versions.heard(env.sender, version=env.version, versions=env.versions)
    for hb in env.heartbeats:
        dst.held[hb.origin] = hb
    return env


def _probe(a: _Agent, b: _Agent, counter: list[int]) -> None:
    """One probe of b by a, as edgewatch.agent.peers does it (fallback to N-1 on a plain refusal)."""
    version: int | None = 4 if a.v4_only else a.versions.version_for(b.name)
    while version is not None:
        counter[0] += 1
        nonce = f"{counter[0]:032x}"
        try:
            request = _receive(b, _send(a, b, version=version, nonce=nonce))
        except Rejected as exc:
            assert exc.reason is RejectReason.MALFORMED and b.v4_only and version == 5
            version = a.versions.refused(b.name, version)
            a.fallbacks += 1
            continue
        counter[0] += 1
        answer = _send(b, a, version=request.version, nonce=f"{counter[0]:032x}", reply_to=nonce)
        _receive(a, answer, reply_to=nonce)
        return
    raise AssertionError("no common version")


def _run_group(statements: dict[NodeName, Heartbeat], old: frozenset[NodeName],
               evidence_versions: dict[NodeName, int]) -> tuple[dict[NodeName, Any], Any, list[_Agent]]:
    agents = {n: _Agent(name=n, v4_only=n in old, statement=hb, held={n: hb}) for n, hb in statements.items()}
    counter = [0]
    names = sorted(agents)
    for _round in range(2):  # the second round carries relays and meets confirmed epochs
        for a in names:
            for b in names:
                if a != b:
                    _probe(agents[a], agents[b], counter)
    group = frozenset(names)
    local = {n: verified_decisions(group=group, votes={o: hb.vote(observed_at=NOW) for o, hb in ag.held.items()},
                                   now=NOW, ttl_s=30.0) for n, ag in agents.items()}
    book = EvidenceBook(beacon_time=lambda b: NOW if b == BEACON else None)
    for n, ag in agents.items():
        carried = [hb for o, hb in sorted(ag.held.items()) if o != n]
        text = encode_evidence(ag.statement, carried, version=4 if ag.v4_only else evidence_versions[n])
        accepted, refused = decode_evidence(text, writer=n, verifier=ring("controller"))
        assert not refused
        for hb in accepted:
            book.offer(hb, carrier=n)
    cloud = verified_decisions(group=group, votes=book.votes(), now=NOW, ttl_s=30.0)
    return local, cloud, list(agents.values())


_VOTE = st.sampled_from(["alive", "dead", "silent"])


@st.composite
def _groups(draw: st.DrawFn) -> tuple[dict[NodeName, Heartbeat], frozenset[NodeName], dict[NodeName, int]]:
    size = draw(st.integers(min_value=2, max_value=6))
    names = [NodeName(f"node-{i}") for i in range(size)]
    statements = {}
    for n in names:
        kubelet = draw(st.booleans())
        votes = {p: draw(_VOTE) for p in names if p != n}
        statements[n] = sign_heartbeat(
            origin=n, incarnation=1, seq=draw(st.integers(min_value=1, max_value=1000)), kubelet_ok=kubelet,
            cloud_ok=draw(st.booleans()), alive=[n] * kubelet + [p for p, v in votes.items() if v == "alive"],
            dead=[n] * (not kubelet) + [p for p, v in votes.items() if v == "dead"], keyring=ring(n), beacon=BEACON)
    old = frozenset(draw(st.sets(st.sampled_from(names))))
    evidence = {n: draw(st.sampled_from([4, 5])) for n in names}
    return statements, old, evidence


@settings(max_examples=40, deadline=None)
@given(case=_groups())
def test_a_mixed_group_reaches_the_verdicts_of_a_uniform_one(
        case: tuple[dict[NodeName, Heartbeat], frozenset[NodeName], dict[NodeName, int]]) -> None:
    statements, old, evidence = case
    mixed_local, mixed_cloud, agents = _run_group(statements, old, evidence)
    uniform_local, uniform_cloud, uniform_agents = _run_group(statements, frozenset(),
                                                              dict.fromkeys(statements, 5))
    assert mixed_cloud == uniform_cloud
    assert mixed_local == uniform_local
    # Negotiation: upgraded pairs speak v5, any pair with a 0.1.0 agent v4; at most one refused
    # probe per (upgraded agent, old peer), then never again.
    for agent in agents:
        if agent.v4_only:
            continue
        for peer in statements:
            if peer != agent.name:
                assert agent.versions.known(peer) == (4 if peer in old else 5)
        assert agent.fallbacks <= len(old - {agent.name})
    assert all(ag.fallbacks == 0 and all(ag.versions.known(p) == 5 for p in statements if p != ag.name)
               for ag in uniform_agents)

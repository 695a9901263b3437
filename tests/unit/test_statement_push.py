"""Statements pushed in one datagram (peer protocol v6): a changed statement and the slow refresh
go one way by UDP instead of an HTTP exchange; a lost push is pulled; what a compromised member
can push is verified like any statement.

Two or three real agents' peer exchanges on loopback (their HTTP servers and UDP endpoints on real
sockets, periods driven as the exchange loop drives them), and :meth:`PeerExchange.statement_received`
with statements signed here (``sign_heartbeat`` with each node's own test key, or the wrong one)."""

from __future__ import annotations

import asyncio
import secrets
import time
from pathlib import Path

import msgspec
import pytest
from _keys import ring
from _peers import FixedMembership, peer_exchange
from prometheus_client import CollectorRegistry
from test_statement_cadence import ADDRESSES, A, B, C, _run, _running

from edgewatch.agent.config import AgentConfig
from edgewatch.agent.metrics import AgentMetrics
from edgewatch.agent.peers import PeerExchange
from edgewatch.core.cadence import ExchangeReason
from edgewatch.core.identity import NodeKey, NodeKeyring, PublicKeys
from edgewatch.core.envelope import encode_envelope
from edgewatch.core.types import Health, NodeName
from edgewatch.core.wire import sign_heartbeat


def _http_ok(agent) -> float:  # type: ignore[no-untyped-def]
    return agent.metrics.registry.get_sample_value("edgewatch_agent_probes_total", {"result": "ok"}) or 0.0


def _received(agent, result: str) -> float:  # type: ignore[no-untyped-def]
    value = agent.metrics.registry.get_sample_value("edgewatch_agent_statement_datagrams_received_total",
                                                    {"result": result})
    return value or 0.0


async def test_a_changed_statement_is_pushed_in_one_datagram_not_an_http_exchange() -> None:
    async with _running((A, B, C)) as (a, b, c):
        await _run([a, b, c], 6)
        assert a.peers.cadence.by_datagram == {B, C}
        pushes, http_b = a.datagrams.statements_sent, _http_ok(b)
        await c.stop()
        for _ in range(25):
            await _run([a, b], 1)
            held = b.peers.book.get(A)
            if held is not None and C in held.heartbeat.dead:
                break
        held = b.peers.book.get(A)
        assert held is not None and C in held.heartbeat.dead  # a-1's vote on a-3 reached a-2 ...
        assert a.datagrams.statements_sent > pushes            # ... pushed by datagram
        assert _received(b, "new") >= 1 and b.datagrams.received["statement"] >= 1
        assert _http_ok(b) == http_b                           # and a-2 opened no HTTP exchange for it
        assert b.peers.decide(now=asyncio.get_running_loop().time())[A].verdict.value == "healthy"


async def test_a_lost_push_is_pulled_over_http_at_the_next_datagram() -> None:
    async with _running((A, B, C)) as (a, b, c):
        await _run([a, b, c], 6)
        assert a.liveness is not None
        a.liveness.push_statement = lambda peer, statement, *, age_s: True  # type: ignore[method-assign]
        pulls = b.exchanges(ExchangeReason.PULL.value)
        await c.stop()
        for _ in range(25):
            await _run([a, b], 1)
            if a.health_of(C) is Health.DEAD:
                break
        await _run([a, b], 2)
        held = b.peers.book.get(A)
        assert held is not None and C in held.heartbeat.dead
        assert b.exchanges(ExchangeReason.PULL.value) > pulls  # a-1's datagram named it; a-2 asked


async def test_the_refresh_goes_by_datagram_too() -> None:
    async with _running((A, B), anti_entropy_s=1.0) as (a, b):
        await _run([a, b], 6)
        pushes, http = a.datagrams.statements_sent + b.datagrams.statements_sent, _http_ok(a) + _http_ok(b)
        await _run([a, b], 15)  # at least 3 s: a refresh a second each way
        assert a.datagrams.statements_sent + b.datagrams.statements_sent - pushes >= 4
        assert _http_ok(a) + _http_ok(b) - http <= 1
        assert _received(a, "duplicate") + _received(b, "duplicate") >= 4  # the same statement again


async def test_a_push_before_the_peer_was_heard_is_not_sent() -> None:
    async with _running((A, B)) as (a, b):
        assert a.liveness is not None
        assert not a.liveness.push_statement(B, b'{"v":4}', age_s=0.0)  # no session yet: HTTP instead
        assert a.datagrams.statements_sent == 0


# -- what a compromised member can push ------------------------------------------------------------------

def _receiver() -> tuple[PeerExchange, AgentMetrics]:
    config = AgentConfig(node=B, identity_file=Path("/nonexistent"), listen_address=ADDRESSES[B])
    metrics = AgentMetrics(CollectorRegistry())
    peers = peer_exchange(config, membership=FixedMembership({A: ADDRESSES[A], B: ADDRESSES[B], C: ADDRESSES[C]}),
                          metrics=metrics)
    return peers, metrics


def _compact(heartbeat) -> bytes:  # type: ignore[no-untyped-def]
    """The heartbeat in the compact form, laid out here as a plain MessagePack list (not with the
    encoder under test)."""
    w = heartbeat.to_wire()
    return msgspec.msgpack.encode([w["v"], w["origin"], w["incarnation"], w["seq"], w["kubelet_ok"], w["cloud_ok"],
                                   w["alive"], w["dead"], w["carrier"], bytes.fromhex(w["beacon"]),
                                   bytes.fromhex(w["key_id"]), bytes.fromhex(w["mac"])])


def _count(metrics: AgentMetrics, result: str) -> float:
    return metrics.registry.get_sample_value("edgewatch_agent_statement_datagrams_received_total",
                                             {"result": result}) or 0.0


def test_a_pushed_statement_is_verified_and_bound_to_its_sender() -> None:
    peers, metrics = _receiver()
    own = sign_heartbeat(origin=A, incarnation=1, seq=9, kubelet_ok=True, cloud_ok=True, alive=[A], dead=[C],
                         keyring=ring(A))
    peers.statement_received(A, _compact(own), age_s=0.5, epoch=77)
    held = peers.book.get(A)
    assert held is not None and list(held.heartbeat.dead) == [C]
    assert _count(metrics, "new") == 1
    peers.statement_received(A, _compact(own), age_s=0.5, epoch=77)  # a copy: held already, nothing refreshed
    assert _count(metrics, "duplicate") == 1

    # a-1 (compromised) pushes a-3's statement as its own, a statement signed with a key not a-3's,
    # one too old, and bytes that are not a statement: each refused, the book unchanged
    other = sign_heartbeat(origin=C, incarnation=1, seq=3, kubelet_ok=True, cloud_ok=True, alive=[C], dead=[],
                           keyring=ring(C))
    forger = NodeKeyring(node=C, keys=(NodeKey.generate(),), public=PublicKeys())
    forged = sign_heartbeat(origin=C, incarnation=1, seq=4, kubelet_ok=True, cloud_ok=True, alive=[C], dead=[B],
                            keyring=forger)
    old = sign_heartbeat(origin=A, incarnation=1, seq=10, kubelet_ok=True, cloud_ok=True, alive=[A], dead=[B],
                         keyring=ring(A))
    peers.statement_received(A, _compact(other), age_s=0.0, epoch=77)
    peers.statement_received(C, _compact(forged), age_s=0.0, epoch=5)
    peers.statement_received(A, _compact(old), age_s=peers.config.wire.heartbeat_max_age_s + 1, epoch=77)
    peers.statement_received(A, b"\x00not msgpack", age_s=0.0, epoch=77)
    peers.statement_received(A, b"\x91" * 5000, age_s=0.0, epoch=77)  # nested one-element arrays
    peers.statement_received(A, _compact(own)[:-1], age_s=0.0, epoch=77)
    peers.statement_received(A, msgspec.msgpack.encode(own.to_wire()), age_s=0.0, epoch=77)  # a map, not the array
    assert _count(metrics, "sender_mismatch") == 1 and _count(metrics, "stale") == 1
    assert _count(metrics, "malformed") == 4
    assert peers.book.get(C) is None and peers.book.get(A).heartbeat.seq == 9


@pytest.mark.parametrize("epoch", [1, 0xFFFFFFFF])
def test_a_push_marks_what_its_epochs_proofs_name_as_held(epoch: int) -> None:
    peers, _ = _receiver()
    own = sign_heartbeat(origin=A, incarnation=1, seq=9, kubelet_ok=True, cloud_ok=True, alive=[A], dead=[],
                         keyring=ring(A))
    peers.statement_received(A, _compact(own), age_s=0.0, epoch=epoch)

    class Proof:
        at, kubelet_ok, statement = 10.0, True, 9

    Proof.epoch = epoch  # type: ignore[attr-defined]
    proofs = type("Proofs", (), {"last_proof": staticmethod(lambda peer: Proof if peer == A else None)})()
    peers.cadence.start_period([A], proofs, now=10.5)
    assert peers.cadence.holds_theirs(A, peers.book)
    Proof.epoch = epoch ^ 1  # type: ignore[attr-defined]  # a restarted agent: an exchange first
    peers.cadence.start_period([A], proofs, now=11.0)
    assert not peers.cadence.holds_theirs(A, peers.book)


class _Proof:
    def __init__(self, at: float, statement: int, epoch: int) -> None:
        self.at, self.kubelet_ok, self.statement, self.epoch = at, True, statement, epoch


def _proofs(table: dict[NodeName, _Proof]):  # type: ignore[no-untyped-def]
    return type("Proofs", (), {"last_proof": staticmethod(lambda peer: table.get(peer))})()


def test_a_push_does_not_take_the_place_of_a_pull() -> None:
    """Our statement changed while we lack the neighbour's newest: the exchange that pushes ours
    would also fetch theirs, so it goes by HTTP, not one way (found by a red team)."""
    peers, _ = _receiver()
    now = time.monotonic()
    peers.book.offer(sign_heartbeat(origin=C, incarnation=1, seq=500, kubelet_ok=True, cloud_ok=True, alive=[C],
                                    dead=[], keyring=ring(C)), now=now)
    peers.cadence.start_period([C], _proofs({C: _Proof(now, 501, 7)}), now=now)  # its proof names 501
    peers.cadence.heard_statement(C, epoch=7, incarnation=1)
    peers.sign_own(now_mono=now)
    due = peers.cadence.due([C], announced=(peers.incarnation, peers.announced), book=peers.book, beacon="", now=now)
    assert due == {C: ExchangeReason.CHANGED}
    pushed: list[NodeName] = []
    pusher = type("Pusher", (), {"push_statement": lambda self, p, s, *, age_s: pushed.append(p) or True})()
    peers._push(due, missed=(), pusher=pusher, now=now)
    assert pushed == [] and due == {C: ExchangeReason.CHANGED}


def test_a_relayed_statement_of_another_incarnation_is_not_what_the_peers_proofs_confirm() -> None:
    """A compromised a-1 relays a-3's statement from before a-3's restart with a claimed age of 0:
    a relay never moves the book to another incarnation, and a-3's own datagrams name the
    statement a-3 gave us itself (its incarnation), so a held statement of another incarnation is
    pulled again, not confirmed (found by two red teams)."""
    peers, _ = _receiver()
    old = sign_heartbeat(origin=C, incarnation=1000, seq=700, kubelet_ok=False, cloud_ok=True, alive=[], dead=[C],
                         keyring=ring(C))
    new = sign_heartbeat(origin=C, incarnation=2000, seq=600, kubelet_ok=True, cloud_ok=True, alive=[C], dead=[],
                         keyring=ring(C))
    peers.statement_received(C, _compact(new), age_s=0.0, epoch=42)
    raw = encode_envelope(sender=A, receiver=B, epoch=1, seq=1, nonce=secrets.token_hex(16),
                          own=sign_heartbeat(origin=A, incarnation=5, seq=1, kubelet_ok=True, cloud_ok=True,
                                             alive=[A], dead=[], keyring=ring(A)),
                          relayed=[(old, 0.0)], keyring=ring(A), version=5)
    peers.absorb(peers.decode(raw, sender_allowed=lambda s: s == A), now_mono=time.monotonic() + 0.5, direct=True)
    later = time.monotonic() + 20
    peers.cadence.start_period([C], _proofs({C: _Proof(later, 600, 42)}), now=later)
    assert peers.book.get(C).heartbeat.incarnation == 2000  # type: ignore[union-attr]  # the relay moved nothing
    assert peers.cadence.holds_theirs(C, peers.book)
    # and were a statement of another incarnation held anyhow, a-3's proofs would not confirm it
    peers.book.offer(old, now=time.monotonic() + 1, age_s=0.0)
    assert peers.book.get(C).heartbeat.incarnation == 1000  # type: ignore[union-attr]
    assert not peers.cadence.holds_theirs(C, peers.book)
    due = peers.cadence.due([C], announced=(peers.incarnation, peers.announced), book=peers.book, beacon="", now=later)
    assert due[C] in (ExchangeReason.PULL, ExchangeReason.CHANGED)  # an exchange (it fetches a-3's own) either way


def test_a_relayed_heartbeat_never_moves_its_origin_to_another_incarnation() -> None:
    from edgewatch.core.book import Freshness, HeartbeatBook

    book = HeartbeatBook()
    current = sign_heartbeat(origin=C, incarnation=2000, seq=5, kubelet_ok=True, cloud_ok=True, alive=[C], dead=[],
                             keyring=ring(C))
    before = sign_heartbeat(origin=C, incarnation=1000, seq=9, kubelet_ok=False, cloud_ok=True, alive=[], dead=[C],
                            keyring=ring(C))
    later = sign_heartbeat(origin=C, incarnation=3000, seq=1, kubelet_ok=True, cloud_ok=True, alive=[C], dead=[],
                           keyring=ring(C))
    assert book.offer(current, now=100.0, age_s=20.0) is Freshness.NEW
    assert book.offer(before, now=101.0, age_s=0.0, relayed=True) is Freshness.OLDER
    assert book.offer(later, now=101.0, age_s=0.0, relayed=True) is Freshness.OLDER  # from the origin only
    assert book.offer(sign_heartbeat(origin=C, incarnation=2000, seq=6, kubelet_ok=True, cloud_ok=True, alive=[C],
                                     dead=[], keyring=ring(C)), now=102.0, relayed=True) is Freshness.NEW
    assert book.offer(later, now=103.0, age_s=0.0) is Freshness.NEW  # the origin itself, after its restart

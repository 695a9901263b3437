"""The agent's liveness datagrams on real UDP sockets (loopback, two addresses, one port): pairs
that know each other's exchange keys prove each other alive within two periods; strangers,
unknown keys, wrong MACs and wrong sizes are counted and change nothing. Attack datagrams are
built here with struct and hmac, not with the sealer under test."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import hashlib
import hmac
import socket
import struct

import pytest

from edgewatch.agent.datagrams import RECEIVE_RESULTS, LivenessEndpoint
from edgewatch.core.identity import NodeKey
from edgewatch.core.pairkey import ExchangeKey
from edgewatch.core.types import NodeName

A, B = NodeName("edge-a"), NodeName("edge-b")
ADDR = {A: "127.0.0.1", B: "127.0.0.2"}


class Keys:
    def __init__(self, known: dict[NodeName, bytes]) -> None:
        self.known = known

    def exchange_key_of(self, node: NodeName) -> bytes | None:
        return self.known.get(node)


class Tally:
    def __init__(self) -> None:
        self.sent = 0
        self.received: collections.Counter[str] = collections.Counter()

    def datagram_sent(self) -> None:
        self.sent += 1

    def datagram_received(self, result: str) -> None:
        assert result in RECEIVE_RESULTS
        self.received[result] += 1


def _free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as other:
        other.bind(("127.0.0.2", port))  # free on both addresses
    return port


async def _pair(*, b_knows_a: bool = True):  # type: ignore[no-untyped-def]
    port = _free_udp_port()
    xa, xb = ExchangeKey.derived_from(NodeKey.generate()), ExchangeKey.derived_from(NodeKey.generate())
    ta, tb = Tally(), Tally()
    a = LivenessEndpoint(me=A, key=xa, keys=Keys({B: xb.public_raw}), host=ADDR[A], port=port, events=ta)
    b = LivenessEndpoint(me=B, key=xb, keys=Keys({A: xa.public_raw} if b_knows_a else {}), host=ADDR[B],
                         port=port, events=tb)
    await a.start()
    await b.start()
    return a, b, ta, tb, port


async def _periods(a: LivenessEndpoint, b: LivenessEndpoint, n: int) -> None:
    for _ in range(n):
        a.send({B: ADDR[B]}, statement=1, kubelet_ok=True, cloud_ok=True)
        b.send({A: ADDR[A]}, statement=1, kubelet_ok=True, cloud_ok=True)
        await asyncio.sleep(0.05)


async def test_two_agents_prove_each_other_alive_within_two_periods() -> None:
    a, b, ta, tb, _ = await _pair()
    try:
        await _periods(a, b, 1)
        # the first datagrams echo nothing yet: authentic and new, no proof of life
        assert ta.received == {"new": 1} and tb.received == {"new": 1}
        assert a.alive_within(10) == frozenset()
        await _periods(a, b, 3)
        assert a.alive_within(10) == {B} and b.alive_within(10) == {A}
        assert ta.received["alive"] == 3 and tb.received["alive"] == 3 and ta.sent == tb.sent == 4
    finally:
        a.close()
        b.close()


async def test_a_peer_without_a_known_key_gets_nothing_and_its_datagrams_count_no_key() -> None:
    a, b, ta, tb, _ = await _pair(b_knows_a=False)
    try:
        await _periods(a, b, 2)
        assert tb.sent == 0 and tb.received == {"no_key": 2}
        assert ta.received == {} and a.alive_within(10) == frozenset()
    finally:
        a.close()
        b.close()


def _forged(key: bytes, *, epoch: int = 7, seq: int = 1, echo_epoch: int = 0, echo: int = 0) -> bytes:
    header = struct.pack(">BBHIIII", 6, 3, 1, epoch, seq, echo_epoch, echo)
    return header + hmac.new(key, b"edgewatch/liveness/v6\x00" + header, hashlib.sha256).digest()[:16]


async def test_strangers_wrong_keys_and_wrong_sizes_are_counted_and_change_nothing() -> None:
    a, b, ta, tb, port = await _pair()
    try:
        await _periods(a, b, 2)
        before = dict(tb.received)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as stranger:
            stranger.bind(("127.0.0.3", 0))
            stranger.sendto(_forged(b"k" * 32), ("127.0.0.2", port))
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as spoof:  # a's address, not a's key
            spoof.bind((ADDR[A], 0))
            spoof.sendto(_forged(b"k" * 32, echo_epoch=5, echo=2), ("127.0.0.2", port))
            spoof.sendto(b"\x06" * 35, ("127.0.0.2", port))
            spoof.sendto(b"\x06" * 1_400, ("127.0.0.2", port))
        await asyncio.sleep(0.1)
        new = {k: tb.received[k] - before.get(k, 0) for k in tb.received if tb.received[k] != before.get(k, 0)}
        assert new == {"unknown_source": 1, "bad_signature": 1, "malformed": 1, "oversized": 1}
        await _periods(a, b, 1)  # the real pair goes on
        assert tb.received["alive"] == before.get("alive", 0) + 1
    finally:
        a.close()
        b.close()


async def test_peers_no_longer_listed_are_forgotten() -> None:
    a, b, ta, tb, _ = await _pair()
    try:
        await _periods(a, b, 3)
        assert a.alive_within(10) == {B}
        a.send({}, statement=1, kubelet_ok=True, cloud_ok=True)
        assert a.alive_within(10) == frozenset()
        b.send({A: ADDR[A]}, statement=1, kubelet_ok=True, cloud_ok=True)
        await asyncio.sleep(0.05)
        assert ta.received["unknown_source"] == 1
    finally:
        a.close()
        b.close()


def test_an_exchange_key_is_derived_from_the_identity_key_alone() -> None:
    identity = NodeKey.generate()
    assert ExchangeKey.derived_from(identity).public_raw == ExchangeKey.derived_from(identity).public_raw
    assert ExchangeKey.derived_from(identity).public_raw != ExchangeKey.derived_from(NodeKey.generate()).public_raw
    assert identity.derive_secret(domain="x") != identity.derive_secret(domain="y")
    with pytest.raises(ValueError):
        identity.derive_secret(domain="")


async def test_a_peer_back_after_a_period_away_is_heard_after_one_round_trip() -> None:
    """Leaving the exchange for one period drops a's session with b; the new one has a new epoch
    of a's, which b takes as a restart after one round trip (not as seqs it has seen)."""
    a, b, ta, tb, _ = await _pair()
    try:
        await _periods(a, b, 30)
        a.send({}, statement=1, kubelet_ok=True, cloud_ok=True)   # b not among a's peers this period
        alive_before = tb.received["alive"]
        await _periods(a, b, 3)
        # a's first datagram in its new epoch is refused until that epoch proves itself (counted
        # with the replays); the next ones echo b and are alive again
        assert tb.received["replayed"] <= 1
        assert tb.received["alive"] >= alive_before + 2 and a.alive_within(0.1) == {B}
    finally:
        a.close()
        b.close()


async def test_a_member_claiming_anothers_address_captures_nothing() -> None:
    """The roster gives b and m one address (m claims b's InternalIP): a tries each one's key, so
    b's datagrams still prove b alive, and m's own datagrams still count for m."""
    port = _free_udp_port()
    xa, xb, xm = (ExchangeKey.derived_from(NodeKey.generate()) for _ in range(3))
    M = NodeName("edge-z")  # sorts after b
    ta, tb = Tally(), Tally()
    a = LivenessEndpoint(me=A, key=xa, keys=Keys({B: xb.public_raw, M: xm.public_raw}), host=ADDR[A], port=port,
                         events=ta)
    b = LivenessEndpoint(me=B, key=xb, keys=Keys({A: xa.public_raw}), host=ADDR[B], port=port, events=tb)
    await a.start()
    await b.start()
    try:
        for _ in range(4):
            a.send({B: ADDR[B], M: ADDR[B]}, statement=1, kubelet_ok=True, cloud_ok=True)
            b.send({A: ADDR[A]}, statement=1, kubelet_ok=True, cloud_ok=True)
            await asyncio.sleep(0.05)
        assert B in a.alive_within(10) and ta.received["alive"] >= 2 and ta.received["bad_signature"] == 0
    finally:
        a.close()
        b.close()


async def test_a_taken_port_is_retried_and_never_fatal(monkeypatch: pytest.MonkeyPatch) -> None:
    import edgewatch.agent.datagrams as datagrams

    monkeypatch.setattr(datagrams, "BIND_RETRY_S", 0.05)
    port = _free_udp_port()
    squatter = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    squatter.bind((ADDR[A], port))
    x = ExchangeKey.derived_from(NodeKey.generate())
    a = LivenessEndpoint(me=A, key=x, keys=Keys({}), host=ADDR[A], port=port, events=Tally())
    task = asyncio.create_task(a.run())
    try:
        await asyncio.sleep(0.2)
        assert not task.done() and a._transport is None  # noqa: SLF001 - still trying, not crashed
        squatter.close()
        async with asyncio.timeout(2):
            while a._transport is None:  # noqa: SLF001
                await asyncio.sleep(0.02)
    finally:
        squatter.close()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert a._transport is None  # noqa: SLF001 - closed on the way out


# -- statement datagrams ---------------------------------------------------------------------------------

class Sink:
    def __init__(self) -> None:
        self.got: list[tuple[NodeName, bytes, float, int]] = []

    def statement_received(self, peer: NodeName, statement: bytes, *, age_s: float, epoch: int) -> None:
        self.got.append((peer, statement, age_s, epoch))


class StatementTally(Tally):
    def __init__(self) -> None:
        super().__init__()
        self.statements_sent = 0

    def statement_datagram_sent(self) -> None:
        self.statements_sent += 1


def _statement(key: bytes, *, epoch: int, echo_epoch: int, echo: int, body: bytes = b'{"v":4}', kind: int = 0x80,
               domain: bytes = b"edgewatch/statement-datagram/v6", age_ms: int = 250) -> bytes:
    """A statement datagram laid out by hand (docs: edgewatch.core.statementdatagram)."""
    head = struct.pack(">BBHIIII", 6, kind, 0, epoch, echo_epoch, echo, age_ms) + body
    return head + hmac.new(key, domain + b"\x00" + head, hashlib.sha256).digest()[:16]


async def test_statement_datagrams_authentic_and_recent_reach_the_sink_and_nothing_else_does() -> None:
    from edgewatch.core.pairkey import derive_pair_keys

    port = _free_udp_port()
    xa, xb = ExchangeKey.derived_from(NodeKey.generate()), ExchangeKey.derived_from(NodeKey.generate())
    ta, tb, sink = StatementTally(), StatementTally(), Sink()
    a = LivenessEndpoint(me=A, key=xa, keys=Keys({B: xb.public_raw}), host=ADDR[A], port=port, events=ta)
    b = LivenessEndpoint(me=B, key=xb, keys=Keys({A: xa.public_raw}), host=ADDR[B], port=port, events=tb,
                         statements=sink)
    await a.start()
    await b.start()
    try:
        assert not a.push_statement(B, b'{"v":4}', age_s=0.0)  # not heard b-2 yet
        await _periods(a, b, 8)
        assert a.push_statement(B, b'{"v":4}', age_s=0.25) and ta.statements_sent == 1
        await asyncio.sleep(0.05)
        assert [(p, s, age) for p, s, age, _ in sink.got] == [(A, b'{"v":4}', 0.25)]
        # a-1 compromised: it holds the a-1 -> b-2 key and b-2's seqs it has heard
        a_to_b = derive_pair_keys(me=A, my_key=xa, peer=B, peer_public_raw=xb.public_raw).send
        b_to_a = derive_pair_keys(me=B, my_key=xb, peer=A, peer_public_raw=xa.public_raw).send
        session = a._sessions[B]  # what a-1 has heard of b-2: its epoch and highest seq
        pushed = {"epoch": session.my_epoch, "echo_epoch": session.their_epoch, "echo": session.high}
        await _periods(a, b, 1)
        session = a._sessions[B]
        recent = {"epoch": session.my_epoch, "echo_epoch": session.their_epoch, "echo": session.high}
        before = dict(tb.received)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.bind((ADDR[A], 0))
            s.sendto(_statement(a_to_b, **{**recent, "echo": session.high - 5}), (ADDR[B], port))  # recorded earlier
            s.sendto(_statement(a_to_b, **{**recent, "echo_epoch": session.their_epoch ^ 1}), (ADDR[B], port))
            s.sendto(_statement(a_to_b, **pushed, body=b'{"v":6}'), (ADDR[B], port))  # a second on one echo
            s.sendto(_statement(a_to_b, **{**recent, "epoch": session.my_epoch ^ 1, "echo": session.high}),
                     (ADDR[B], port))  # not its epoch
            s.sendto(_statement(a_to_b, **recent, domain=b"edgewatch/liveness/v6"), (ADDR[B], port))
            s.sendto(_statement(b_to_a, **recent), (ADDR[B], port))                   # b-2's own, reflected
            s.sendto(_statement(a_to_b, **recent, kind=0x81), (ADDR[B], port))
            s.sendto(_statement(a_to_b, **recent, body=b"x" * 1_200), (ADDR[B], port))
            s.sendto(_statement(a_to_b, **recent, body=b'{"v":5}'), (ADDR[B], port))  # authentic, recent
            s.sendto(_statement(a_to_b, **recent, body=b'{"v":7}'), (ADDR[B], port))  # again on that echo: a flood
        await asyncio.sleep(0.1)
        new = {k: tb.received[k] - before.get(k, 0) for k in tb.received if tb.received[k] != before.get(k, 0)}
        assert new == {"stale_echo": 4, "unconfirmed": 1, "bad_signature": 2, "malformed": 1, "oversized": 1,
                       "statement": 1}
        assert [s for _, s, _, _ in sink.got] == [b'{"v":4}', b'{"v":5}']
        await _periods(a, b, 1)  # liveness goes on
        assert b.alive_within(1) == {A}
    finally:
        a.close()
        b.close()


async def test_a_silent_peer_gets_a_datagram_every_few_seconds_until_it_speaks_again() -> None:
    from edgewatch.agent.datagrams import QUIET_AFTER_S, QUIET_EVERY_S

    now = [1000.0]
    port = _free_udp_port()
    xa, xb = ExchangeKey.derived_from(NodeKey.generate()), ExchangeKey.derived_from(NodeKey.generate())
    ta, tb = Tally(), Tally()
    a = LivenessEndpoint(me=A, key=xa, keys=Keys({B: xb.public_raw}), host=ADDR[A], port=port, events=ta,
                         clock=lambda: now[0])
    b = LivenessEndpoint(me=B, key=xb, keys=Keys({A: xa.public_raw}), host=ADDR[B], port=port, events=tb)
    await a.start()
    await b.start()
    try:
        await _periods(a, b, 3)
        assert a.alive_within(10) == {B}
        sent = ta.sent
        for _ in range(int(QUIET_AFTER_S) + 10):  # b-2 falls silent (its agent died): a-1 alone, a second a period
            now[0] += 1.0
            a.send({B: ADDR[B]}, statement=1, kubelet_ok=True, cloud_ok=True)
        quiet_periods = 10 + 1
        assert ta.sent - sent <= int(QUIET_AFTER_S) + quiet_periods // int(QUIET_EVERY_S) + 1
        assert ta.sent - sent >= int(QUIET_AFTER_S) - 1
        # b-2 speaks again: a-1 sends every period at once, and the echo proves b-2 alive
        sent = ta.sent
        b.send({A: ADDR[A]}, statement=1, kubelet_ok=True, cloud_ok=True)
        await asyncio.sleep(0.05)
        now[0] += 1.0
        await _periods(a, b, 2)
        assert ta.sent - sent == 2 and A in b.alive_within(10) and B in a.alive_within(10)
    finally:
        a.close()
        b.close()

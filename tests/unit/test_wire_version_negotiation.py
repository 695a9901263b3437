"""The agent's per-peer negotiation over real loopback sockets (edgewatch.agent.peers,
docs/versions.md): toward a peer that speaks only v4 (it answers 400 ``rejected: malformed`` to a v5
header, as release 0.1.0 does) one probe falls back to v4 at once and succeeds, and every later
probe is v4 from the start; toward an upgraded peer both sides settle on v5; an answer is written
in its request's version.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from _keys import ring
from _peers import FixedMembership, free_port, peer_exchange

from edgewatch.agent.config import AgentConfig
from edgewatch.agent.exchangeserver import ExchangeServer
from edgewatch.agent.peers import EXCHANGE_PATH, PeerExchange
from edgewatch.core.protocol import envelope_magic
from edgewatch.core.types import NodeName
from edgewatch.core.wire import ReplayGuard, Rejected, decode_envelope, encode_envelope, sign_heartbeat

ME, OLD, NEW = NodeName("a-1"), NodeName("a-2"), NodeName("a-3")
ADDRESSES = {ME: "127.0.0.1", OLD: "127.0.0.2", NEW: "127.0.0.3"}


def _agent(node: NodeName, port: int) -> PeerExchange:
    config = AgentConfig(node=node, identity_file=Path("/nonexistent"), listen_address=ADDRESSES[node], port=port)
    agent = peer_exchange(config, membership=FixedMembership(ADDRESSES))
    agent.sign_own(now_mono=time.monotonic())
    return agent


@dataclass
class OldPeer:
    """A peer of release 0.1.0 as the network sees it: v4 only; anything else is 400 malformed."""

    seen: list[bytes] = field(default_factory=list)
    sent: int = 0

    async def handle(self, request: web.Request) -> web.Response:
        raw = await request.read()
        self.seen.append(raw.split(b" ", 1)[0])
        if not raw.startswith(envelope_magic(4) + b" "):
            return web.Response(status=400, text="rejected: malformed\n")
        try:
            # A fresh guard per request: this fake plays the version check, not the replay guard.
            env = decode_envelope(raw, keyring=ring(OLD), receiver=OLD, max_bytes=65_536, guard=ReplayGuard())
        except Rejected as exc:
            return web.Response(status=400, text=f"rejected: {exc.reason.value}\n")
        assert env.version == 4
        self.sent += 1
        own = sign_heartbeat(origin=OLD, incarnation=1, seq=self.sent, kubelet_ok=True, cloud_ok=True,
                             alive=[OLD, ME], dead=[], keyring=ring(OLD))
        answer = encode_envelope(sender=OLD, receiver=env.sender, epoch=1, seq=self.sent, nonce=f"{self.sent:032x}",
                                 reply_to=env.nonce, own=own, keyring=ring(OLD), version=4)
        return web.Response(body=answer, content_type="application/octet-stream")


@dataclass
class Net:
    me: PeerExchange
    new: PeerExchange
    old: OldPeer
    session: aiohttp.ClientSession


@pytest.fixture
async def net() -> AsyncIterator[Net]:
    port = free_port()
    me, new, old = _agent(ME, port), _agent(NEW, port), OldPeer()
    runners = []
    for address, handler in ((ADDRESSES[NEW], ExchangeServer(peers=new).handle), (ADDRESSES[OLD], old.handle)):
        app = web.Application()
        app.router.add_post(EXCHANGE_PATH, handler)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, host=address, port=port).start()
        runners.append(runner)
    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(local_addr=(ADDRESSES[ME], 0)))
    try:
        yield Net(me=me, new=new, old=old, session=session)
    finally:
        await session.close()
        for runner in runners:
            await runner.cleanup()


async def test_a_v4_peer_is_spoken_v4_after_one_refusal(net: Net, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="edgewatch.agent.peers"):
        assert await net.me.exchange(net.session, OLD)
    assert net.old.seen == [b"edgewatch-envelope/v5", b"edgewatch-envelope/v4"]  # fallback in the same probe
    assert net.me.versions.known(OLD) == 4
    assert any("speaking protocol v4" in r.getMessage() for r in caplog.records)
    assert net.me.book.get(OLD) is not None  # its statement was taken in
    net.me.sign_own(now_mono=time.monotonic())
    assert await net.me.exchange(net.session, OLD)
    assert net.old.seen[2:] == [b"edgewatch-envelope/v4"]  # no more refusals


async def test_two_upgraded_agents_settle_on_v5(net: Net) -> None:
    assert await net.me.exchange(net.session, NEW)
    assert net.me.versions.known(NEW) == 5 and net.new.versions.known(ME) == 5
    assert net.me.metrics.registry.get_sample_value("edgewatch_agent_messages_received_total",
                                                    {"result": "accepted"}) == 1.0


async def test_an_answer_is_written_in_its_requests_version(net: Net) -> None:
    net.me.versions.heard(NEW, version=4, versions=(4, 4))  # e.g. it was last seen rolled back
    assert await net.me.exchange(net.session, NEW)
    assert net.new.versions.known(ME) == 4  # it heard a v4 request ...
    assert net.me.versions.known(NEW) == 4  # ... and answered in v4


async def test_a_version_refusal_is_counted_by_reason(net: Net) -> None:
    raw = b"edgewatch-envelope/v3 " + b"0" * 32 + b" " + b"0" * 128 + b"\n{}"
    async with net.session.post(f"http://{ADDRESSES[NEW]}:{net.new.config.port}{EXCHANGE_PATH}", data=raw) as resp:
        assert resp.status == 400
        assert (await resp.text()).startswith("rejected: version")
    assert net.new.metrics.registry.get_sample_value("edgewatch_agent_messages_received_total",
                                                     {"result": "version"}) == 1.0

"""edgewatch.agent.peerserver over real loopback sockets: the read deadline closes idle, slow-header
and slow-body connections (and counts them), the per-source and strangers' bounds refuse with 503
before a byte is read, known sources get through a strangers' flood, healthy keep-alive clients are
never cut, and a flood makes one log line per kind, not one per connection.

Sources are loopback addresses (127.0.0.0/8 is all local on Linux), so one test plays a peer, a
stranger and an attacker at once. Timeouts are tenths of a second.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace

import aiohttp
import pytest
from aiohttp import web
from prometheus_client import CollectorRegistry

from _keys import ring

from edgewatch.agent.config import AgentConfig
from edgewatch.agent.metrics import AgentMetrics
from edgewatch.agent.exchangeserver import ExchangeServer
from edgewatch.agent.peers import EXCHANGE_PATH, PeerExchange
from edgewatch.agent.peerserver import REFUSED_ANSWER, KnownSources, PeerServer, PeerServerConfig
from edgewatch.core.roster import Roster
from edgewatch.core.types import NodeName

ME = NodeName("a-1")
HOST = "127.0.0.1"


class FakeMembership:
    def group_of(self, node: NodeName) -> frozenset[NodeName]:
        return frozenset({ME})

    def address_of(self, node: NodeName) -> str | None:
        return HOST if node == ME else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


class Lab:
    """A PeerServer with the agent's routes (the real exchange handler, a /healthz)."""

    def __init__(self, config: PeerServerConfig, known: set[str]) -> None:
        self.port = _free_port()
        agent_config = AgentConfig(node=ME, identity_file=Path("/nonexistent"), listen_address=HOST, port=self.port)
        self.metrics = AgentMetrics(CollectorRegistry())
        peers = PeerExchange(me=ME, config=agent_config, keyring=ring(ME), membership=FakeMembership(),  # type: ignore[arg-type]
                             metrics=self.metrics, link=SimpleNamespace(up=True))
        app = web.Application()
        app.router.add_post(EXCHANGE_PATH, ExchangeServer(peers=peers).handle)
        app.router.add_get("/healthz", _ok)
        self.server = PeerServer(app=app, config=config, host=HOST, port=self.port, known=lambda a: a in known,
                                 metrics=self.metrics)

    def value(self, name: str, **labels: str) -> float:
        return self.metrics.registry.get_sample_value(name, labels) or 0.0

    async def connect(self, source: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.open_connection(HOST, self.port, local_addr=(source, 0))

    async def get(self, source: str, path: str = "/healthz") -> int:
        connector = aiohttp.TCPConnector(local_addr=(source, 0))
        async with aiohttp.ClientSession(connector=connector) as session:
            async with session.get(f"http://{HOST}:{self.port}{path}",
                                   timeout=aiohttp.ClientTimeout(total=2)) as resp:
                return resp.status


async def _ok(_request: web.Request) -> web.Response:
    return web.Response(text="ok\n")


@pytest.fixture
async def lab(request: pytest.FixtureRequest) -> AsyncIterator[Lab]:
    config, known = getattr(request, "param", (PeerServerConfig(request_timeout_s=0.3), set()))
    lab = Lab(config, known)
    await lab.server.start()
    try:
        yield lab
    finally:
        await lab.server.close()


async def _closed_within(reader: asyncio.StreamReader, seconds: float) -> tuple[bool, bytes]:
    """(the server closed the connection within ``seconds``, what it sent first)."""
    got = b""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            chunk = await asyncio.wait_for(reader.read(4096), end - time.monotonic())
        except asyncio.TimeoutError:
            break
        except OSError:  # reset, or a broken pipe seen by our own last write
            return True, got
        if not chunk:
            return True, got
        got += chunk
    return False, got


async def test_idle_and_slow_header_connections_are_closed_at_the_deadline(lab: Lab) -> None:
    started = time.monotonic()
    idle_r, _idle_w = await lab.connect("127.0.0.9")
    slow_r, slow_w = await lab.connect("127.0.0.9")
    slow_w.write(b"GET /healthz HTTP/1.1\r\nHo")
    for _ in range(3):  # a header byte every 0.15 s: alive, but never done
        await asyncio.sleep(0.15)
        if not slow_w.is_closing():
            slow_w.write(b"s")
    assert (await _closed_within(idle_r, 1.0))[0]
    assert (await _closed_within(slow_r, 1.0))[0]
    assert time.monotonic() - started < 1.5
    assert lab.value("edgewatch_agent_peer_read_timeouts_total", phase="headers") == 2
    assert lab.server.open_connections == 0
    assert lab.value("edgewatch_agent_peer_connections", source="stranger") == 0


async def test_a_slow_body_is_cut_and_counted_quietly(lab: Lab, caplog: pytest.LogCaptureFixture) -> None:
    reader, writer = await lab.connect("127.0.0.9")
    writer.write(b"POST " + EXCHANGE_PATH.encode() + b" HTTP/1.1\r\nHost: x\r\nContent-Length: 60000\r\n\r\n" + b"y" * 100)
    with caplog.at_level(logging.DEBUG):
        closed, answer = await _closed_within(reader, 1.5)
        await asyncio.sleep(0.05)
    assert closed and answer == b""
    assert lab.value("edgewatch_agent_peer_read_timeouts_total", phase="body") == 1
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], "the handler failed loudly"


async def test_huge_bodies_are_refused_or_cut(lab: Lab) -> None:
    """A terabyte announced: 413 at once (nothing read), then cut at the deadline while trickled."""
    reader, writer = await lab.connect("127.0.0.9")
    writer.write(b"POST " + EXCHANGE_PATH.encode() + b" HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000000000\r\n\r\n")
    closed, answer = await _closed_within(reader, 1.5)
    assert closed and answer.startswith(b"HTTP/1.1 413")
    reader, writer = await lab.connect("127.0.0.9")
    writer.write(b"POST " + EXCHANGE_PATH.encode() + b" HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                 b"e8d4a51000\r\nxx")
    closed, answer = await _closed_within(reader, 1.5)
    assert closed and answer == b""


async def test_keep_alive_clients_are_never_cut_between_requests(lab: Lab) -> None:
    """Requests 0.45 s apart on one keep-alive connection, with a 0.3 s read deadline: the deadline
    runs from a request's first byte, never across the idle time between requests."""
    async with aiohttp.ClientSession() as session:
        for _ in range(4):
            async with session.get(f"http://{HOST}:{lab.port}/healthz") as resp:
                assert resp.status == 200
            assert lab.server.open_connections == 1
            await asyncio.sleep(0.45)
    assert lab.value("edgewatch_agent_peer_read_timeouts_total", phase="headers") == 0
    assert lab.value("edgewatch_agent_peer_read_timeouts_total", phase="body") == 0


BOUNDED = (PeerServerConfig(request_timeout_s=5.0, max_connections_per_source=2, max_stranger_connections=3),
           {"127.0.0.2"})


@pytest.mark.parametrize("lab", [BOUNDED], indirect=True)
async def test_bounds_refuse_with_503_and_log_once_a_minute(lab: Lab, caplog: pytest.LogCaptureFixture) -> None:
    held = [await lab.connect("127.0.0.3"), await lab.connect("127.0.0.3")]
    with caplog.at_level(logging.WARNING, logger="edgewatch.agent.peerserver"):
        for _ in range(5):  # over the per-source bound: refused before a byte is read
            reader, _w = await lab.connect("127.0.0.3")
            closed, answer = await _closed_within(reader, 1.0)
            assert closed and answer == REFUSED_ANSWER
        held.append(await lab.connect("127.0.0.4"))  # the third stranger: the total is reached
        reader, _w = await lab.connect("127.0.0.5")
        assert (await _closed_within(reader, 1.0))[0]
        assert await lab.get("127.0.0.2") == 200  # known: never refused by the strangers' bound
    assert lab.value("edgewatch_agent_peer_connections_refused_total", reason="per_source") == 5
    assert lab.value("edgewatch_agent_peer_connections_refused_total", reason="total") == 1
    assert lab.value("edgewatch_agent_peer_connections", source="stranger") == 3
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2, lines  # one per kind, not one per refusal
    assert "per-source" in lines[0] and "127.0.0.3" in lines[0]
    for _r, writer in held:
        writer.close()
    await asyncio.sleep(0.1)
    assert lab.server.open_connections == 0
    assert await lab.get("127.0.0.3") == 200  # the slots came back


FLOODED = (PeerServerConfig(request_timeout_s=5.0, max_connections_per_source=4, max_stranger_connections=8),
           {"127.0.0.1", "127.0.0.2"})


@pytest.mark.parametrize("lab", [FLOODED], indirect=True)
async def test_probes_and_peers_get_through_a_strangers_flood(lab: Lab) -> None:
    """Strangers from many addresses hold every stranger slot: the node's own probes (its address)
    and a group member still get answers."""
    held = []
    for i in range(10, 30):
        reader, writer = await lab.connect(f"127.0.0.{i}")
        held.append(writer)
    await asyncio.sleep(0.05)
    assert lab.value("edgewatch_agent_peer_connections", source="stranger") == 8
    assert await lab.get("127.0.0.1") == 200
    assert await lab.get("127.0.0.2") == 200
    assert lab.value("edgewatch_agent_peer_connections_refused_total", reason="total") == 12
    for writer in held:
        writer.close()


def test_known_sources_are_loopback_this_node_and_the_roster() -> None:
    membership = SimpleNamespace(roster=Roster(group="g", members={NodeName("a-2"): "198.18.0.12",
                                                                  NodeName("a-3"): None}),
                                 own=SimpleNamespace(address="198.18.0.11"))
    known = KnownSources(membership=membership, extra=("0.0.0.0",))  # type: ignore[arg-type]
    assert known("127.0.0.1") and known("::1") and known("::ffff:127.0.0.1")
    assert known("198.18.0.11") and known("198.18.0.12") and known("::ffff:198.18.0.12")
    assert not known("198.18.0.13") and not known("0.0.0.0") and not known("junk")
    membership.roster = Roster(group="g", members={NodeName("a-4"): "198.18.0.13"})
    assert known("198.18.0.13") and not known("198.18.0.12")  # the new roster, at once


@pytest.mark.parametrize("kwargs", [{"request_timeout_s": 0}, {"idle_timeout_s": -1.0},
                                    {"max_connections_per_source": 0}, {"max_stranger_connections": 0}])
def test_config_refuses_bad_bounds(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        PeerServerConfig(**kwargs)  # type: ignore[arg-type]

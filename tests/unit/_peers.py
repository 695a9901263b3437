"""Real peer exchanges on loopback for the agent's peer tests: a free port, a fixed group, and a
``PeerExchange`` that knows its group and has a healthy kubelet."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import AsyncIterator, Iterable, Mapping
from types import SimpleNamespace

import aiohttp
from aiohttp import web
from prometheus_client import CollectorRegistry

from _keys import ring

from edgewatch.agent.config import AgentConfig
from edgewatch.agent.metrics import AgentMetrics
from edgewatch.agent.exchangeserver import ExchangeServer
from edgewatch.agent.peers import EXCHANGE_PATH, PeerExchange
from edgewatch.core.types import NodeName


class FixedMembership:
    """A group with fixed addresses (what ``Membership`` answers after a sync)."""

    def __init__(self, addresses: Mapping[NodeName, str]) -> None:
        self.addresses = addresses

    def group_of(self, node: NodeName) -> frozenset[NodeName]:
        return frozenset(self.addresses)

    def address_of(self, node: NodeName) -> str | None:
        return self.addresses.get(node)


def free_port() -> int:
    """A TCP port free on 127.0.0.1 just now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def free_port_on(addresses: Iterable[str]) -> int:
    """A TCP port free on every one of ``addresses`` just now."""
    while True:
        port = free_port()
        try:
            for address in addresses:
                with socket.socket() as probe:
                    probe.bind((address, port))
            return port
        except OSError:
            continue


async def _hang_up(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    writer.close()


@contextlib.asynccontextmanager
async def listening(address: str, port: int) -> AsyncIterator[asyncio.Server]:
    """A plain listener on ``address:port`` that hangs up at once (a stand-in for a kubelet's server
    port); closed on exit."""
    server = await asyncio.start_server(_hang_up, address, port)
    try:
        yield server
    finally:
        server.close()
        await server.wait_closed()


def peer_exchange(config: AgentConfig, *, membership: FixedMembership, metrics: AgentMetrics | None = None,
                  link: SimpleNamespace | None = None) -> PeerExchange:
    """The exchange of ``config.node`` (its test key; ``link``, up by default: a ``SimpleNamespace(up=...)``
    the caller may flip), kubelet healthy, knowing its group."""
    peers = PeerExchange(me=config.node, config=config, keyring=ring(config.node), membership=membership,  # type: ignore[arg-type]
                         metrics=metrics or AgentMetrics(CollectorRegistry()),
                         link=link if link is not None else SimpleNamespace(up=True))
    peers.kubelet_ok = True
    peers.refresh_group(now=time.monotonic())  # know the group before the first request
    return peers


async def serve(peers: PeerExchange, address: str, port: int) -> tuple[web.AppRunner, aiohttp.ClientSession]:
    """Serve ``peers``' exchange endpoint on ``address:port`` and open a client session that sends
    from ``address`` (peers bind a sender to its address), as the agent's peer server and exchange
    loop do; close both with :func:`close`."""
    app = web.Application()
    app.router.add_post(EXCHANGE_PATH, ExchangeServer(peers=peers).handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, address, port).start()
    return runner, aiohttp.ClientSession(connector=aiohttp.TCPConnector(local_addr=(address, 0)))


async def close(runner: web.AppRunner | None, session: aiohttp.ClientSession | None) -> None:
    """Close what :func:`serve` opened (either may be None: not started)."""
    if session is not None:
        await session.close()
    if runner is not None:
        await runner.cleanup()

"""An etcd client for a pool coordinator's etcd: aetcd's, plus TLS channel credentials
(:class:`EtcdClient`), with the gRPC channel options every session uses (:data:`CHANNEL_OPTIONS`).
Used by the agents (their node certificate) and the coordinator pod (its root certificate)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

import aetcd
import grpc
from aetcd import rpc as etcd_rpc
from aetcd import watcher as etcd_watcher

__all__ = ["CHANNEL_OPTIONS", "EtcdClient", "keep_sessions"]


CHANNEL_OPTIONS = {
    # Detect a silently dead TCP path under long-lived watches; etcd's server-side minimum ping
    # interval is 5 s (--grpc-keepalive-min-time), so stay above it.
    "grpc.keepalive_time_ms": 10_000,
    "grpc.keepalive_timeout_ms": 5_000,
    "grpc.keepalive_permit_without_calls": 0,
    # We retry at the session level; gRPC's own reconnect backoff would only add delay.
    "grpc.initial_reconnect_backoff_ms": 200,
    "grpc.max_reconnect_backoff_ms": 2_000,
    "grpc.enable_retries": 0,
    # The pool cache reads a resource's whole prefix in one range (gRPC's default cap is 4 MiB).
    "grpc.max_receive_message_length": 256 * 2**20,
}


class EtcdClient(aetcd.Client):
    """aetcd's client, plus TLS channel credentials (aetcd 1.0 only opens insecure channels)."""

    def __init__(self, *, host: str, port: int, timeout: float,
                 credentials: grpc.ChannelCredentials | None) -> None:
        super().__init__(host=host, port=port, timeout=timeout, options=dict(CHANNEL_OPTIONS))  # type: ignore[arg-type]
        self._credentials = credentials

    async def connect(self) -> None:  # same steps as aetcd.Client.connect, with a secure channel
        if self._connected.is_set():
            return
        target = f"{self._host}:{self._port}"
        options = list(self._options.items())
        if self._credentials is None:
            self.channel = etcd_rpc.insecure_channel(target, options=options)
        else:
            self.channel = etcd_rpc.secure_channel(target, self._credentials, options=options)
        self.kvstub = etcd_rpc.KVStub(self.channel)
        self.clusterstub = etcd_rpc.ClusterStub(self.channel)
        self.leasestub = etcd_rpc.LeaseStub(self.channel)
        self.maintenancestub = etcd_rpc.MaintenanceStub(self.channel)
        self._watcher = etcd_watcher.Watcher(etcd_rpc.WatchStub(self.channel), timeout=self._timeout,
                                             metadata=self.metadata)
        self._connected.set()


async def keep_sessions(*, host: str, port: int, timeout_s: float, credentials: Callable[[], grpc.ChannelCredentials],
                        session: Callable[[EtcdClient], Awaitable[None]], on_error: Callable[[Exception], None],
                        pause_s: float) -> None:
    """Run ``session`` with a new client (``credentials()`` called each time, so a rotated
    certificate is used) until cancelled, ``pause_s`` seconds after each. An exception of a session
    (an etcd failure, or a bug) goes to ``on_error`` and never ends the loop; the client is closed
    after each session within ``timeout_s`` seconds. The coordinator pod's root loops
    (``janitor``, ``quota``, ``upkeep``) run this way, so none takes the pod down with it."""
    while True:
        client = EtcdClient(host=host, port=port, timeout=timeout_s, credentials=credentials())
        try:
            await session(client)
        except Exception as exc:  # noqa: BLE001 - reported, and the next session tried
            on_error(exc)
        finally:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(timeout_s):
                    await client.close()
        await asyncio.sleep(pause_s)

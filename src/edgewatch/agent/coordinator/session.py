"""The coordinator session (``Session``, a part of ``PoolCoordinator``): ``run`` keeps one with
the pool's etcd and reconnects after any failure (classified, logged, counted; capped jittered
backoff), ``close`` stops it and releases leadership; a session follows the own cloud link and puts
this node's heartbeat, and runs the leader-key watch, the health probe and the election."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import random

import aetcd
import grpc

from edgewatch.agent.coordinator.backoff import next_backoff
from edgewatch.agent.coordinator.election import Election
from edgewatch.agent.coordinator.errors import CoordinatorError, classify_error
from edgewatch.agent.coordinator.etcd import _EtcdClient
from edgewatch.agent.coordinator.roles import Role
from edgewatch.agent.coordinator.schema import Heartbeat
from edgewatch.waits import apart, bounded, stop_task, wait_event

__all__ = ["Session"]

log = logging.getLogger(__name__)


class Session(Election):
    """The session with the coordinator, its reconnects, the own cloud link and the heartbeat puts."""

    # -- lifecycle -----------------------------------------------------------------------------------

    async def run(self) -> None:
        """Keep a session with the coordinator until cancelled; reconnect after any failure.

        Each session runs in a task of its own (``waits.apart``): a cancellation of ``run()`` always
        ends it, even when it arrives as the session fails (a TaskGroup would report the failure
        and drop the cancellation; the ``except`` below would then reconnect for ever)."""
        if self._closing:
            return
        self._run_task = asyncio.current_task()
        self._hb_wake, self._election_wake, self._stepdown_wake = asyncio.Event(), asyncio.Event(), asyncio.Event()
        loop = asyncio.get_running_loop()
        backoff = 0.0
        while not self._closing:
            started = loop.time()
            try:
                await apart(self._session(), name=f"coordinator-session-{self.pool}")
            except Exception as exc:  # noqa: BLE001 - classified, logged and counted; never escapes
                error = classify_error(exc, url=self.endpoint.url)
                self.last_error = str(error)
                self.metrics.errors.labels(reason=error.reason).inc()
                extra = {"pool": self.pool, "node": self.node, "reason": error.reason, "url": self.endpoint.url}
                if error.reason == "internal":
                    log.error("coordinator session failed: %s", error, exc_info=exc, extra=extra)
                else:
                    log.warning("coordinator session failed: %s", error, extra=extra)
            if loop.time() - started > self.config.connect_backoff_max_s:
                backoff = 0.0  # the session lived a while: this is a new failure, start small
            backoff = next_backoff(backoff, initial=self.config.connect_backoff_initial_s,
                                   cap=self.config.connect_backoff_max_s)
            await asyncio.sleep(backoff * random.uniform(0.5, 1.0))

    async def close(self, graceful: bool = True) -> None:
        """Stop ``run()`` and, if ``graceful``, revoke the leader lease so a follower takes over at
        once (the heartbeat is left to expire: it states this node was alive until then). Never
        raises for coordinator errors; bounded even with the coordinator unreachable or stalled:
        the session ends within ``rpc_timeout_s`` of its cancellation (a task that does not is
        cancelled again, and no longer waited for after ``waits.STOP_GIVE_UP_S``), the release is
        one call under ``rpc_timeout_s``, closing its client at most 2 s."""
        self._closing = True
        task = self._run_task
        if task is not None and not task.done() and task is not asyncio.current_task():
            await stop_task(task)  # its outcome is not ours to raise; our own cancellation still is
        self._set_pending()
        if graceful and self._leader_lease is not None:
            lease, self._leader_lease = self._leader_lease, None
            try:
                client = self._new_client()
            except CoordinatorError as exc:
                log.warning("could not release pool leadership: %s", exc, extra={"pool": self.pool, "node": self.node})
                return
            try:
                await self._rpc(client.revoke_lease(lease))
                log.info("released pool leadership", extra={"pool": self.pool, "node": self.node})
            except Exception as exc:  # noqa: BLE001 - best effort: the lease expires anyway
                gone = "lease not found" in str(exc)
                log.log(logging.INFO if gone else logging.WARNING, "could not release pool leadership: %s",
                        "its lease already expired" if gone else classify_error(exc, url=self.endpoint.url),
                        extra={"pool": self.pool, "node": self.node})
            finally:
                await self._close_client(client)

    # -- session -------------------------------------------------------------------------------------

    def new_client(self) -> aetcd.Client:
        """A new etcd client for this pool's coordinator (same URL and TLS), for other readers of
        the pool's etcd (the pool cache); the caller closes it."""
        return self._new_client()

    def _new_client(self) -> _EtcdClient:
        creds = None
        if self.endpoint.scheme == "https":
            creds = self.tls.credentials() if self.tls is not None else grpc.ssl_channel_credentials()
        host = f"[{self.endpoint.host}]" if ":" in self.endpoint.host else self.endpoint.host  # IPv6 literal
        return _EtcdClient(host=host, port=self.endpoint.port, timeout=self.config.rpc_timeout_s, credentials=creds)

    @staticmethod
    async def _close_client(client: _EtcdClient) -> None:
        # bounded(), not wait_for: aetcd's close drops a cancellation (its watcher shutdown catches
        # CancelledError), which must neither stretch the 2 s nor hide ours.
        with contextlib.suppress(Exception):
            await bounded(client.close(), 2.0)

    async def _session(self) -> None:
        client = self._new_client()
        cancelled = False
        try:
            snapshot = await self._rpc(client.get_prefix(self.keys.leadership))
            self._healthy = True
            self.last_error = None
            self._cloud = self._cloud_ok()
            self._apply_snapshot(snapshot)
            self._set_role(Role.FOLLOWER)
            log.info("coordinator reachable", extra={"pool": self.pool, "node": self.node, "url": self.endpoint.url,
                                                     "leader": self.leader})
            async with asyncio.TaskGroup() as tg:
                tg.create_task(self._cloud_monitor())
                tg.create_task(self._health_probe(client))
                tg.create_task(self._observe_leader(client, snapshot.header.revision))
                tg.create_task(self._heartbeat_loop(client))
                tg.create_task(self._election_loop(client))
        except asyncio.CancelledError:
            cancelled = True
            raise
        finally:
            was_healthy = self._healthy
            self._set_pending()
            if was_healthy:
                log.log(logging.INFO if cancelled else logging.WARNING, "coordinator session ended; role pending",
                        extra={"pool": self.pool, "node": self.node, "cancelled": cancelled})
            await self._close_client(client)

    def _set_pending(self) -> None:
        self._healthy = False
        self._elected = False
        self._candidates.clear()
        self._syncs.clear()
        self._sync_present = False
        self._state_rev = 0
        self._forwarded.clear()
        self.metrics.delegated.set(0)
        self._set_role(Role.PENDING)

    def _cloud_ok(self) -> bool:
        try:
            return bool(self._cloud_ok_fn())
        except Exception:  # noqa: BLE001 - a broken callback must not make us lead blind
            log.exception("cloud_ok() failed; treating the cloud link as down", extra={"node": self.node})
            return False

    def cloud_link_changed(self) -> None:
        """Tell the coordinator that this node's own cloud link may have flipped (the agent's link
        monitor calls it on every change): the heartbeat, the election and a leader's step-down
        react at once instead of at the next :attr:`CoordinatorConfig.cloud_recheck_s`."""
        self._cloud_changed.set()

    async def _cloud_monitor(self) -> None:
        """Follow the own cloud link (on :meth:`cloud_link_changed`, and every ``cloud_recheck_s``);
        on a change wake the heartbeat, the election and the leader."""
        assert self._hb_wake and self._election_wake and self._stepdown_wake
        while True:
            await wait_event(self._cloud_changed, self.config.cloud_recheck_s)
            self._cloud_changed.clear()
            now = self._cloud_ok()
            if now != self._cloud:
                self._cloud = now
                log.info("own cloud link %s", "up" if now else "down",
                         extra={"pool": self.pool, "node": self.node, "cloud_ok": now})
                self._hb_wake.set()
                self._election_wake.set()
                self._stepdown_wake.set()

    # -- heartbeat -----------------------------------------------------------------------------------

    def heartbeat_key(self, node: str) -> bytes:
        """Key of ``node``'s heartbeat."""
        return self.heartbeat_prefix + node.encode()

    async def _ensure_lease(self, client: _EtcdClient, lease_id: int | None, ttl: int) -> int:
        """Reuse ``lease_id`` if etcd still has it (after a reconnect or restart), else grant one."""
        if lease_id is not None:
            reply = await self._rpc(client.refresh_lease(lease_id))
            if reply is not None and reply.TTL > 0:
                return lease_id
        lease = await self._rpc(client.lease(ttl))
        return int(lease.id)

    async def _heartbeat_loop(self, client: _EtcdClient) -> None:
        assert self._hb_wake is not None
        self._hb_lease = await self._ensure_lease(client, self._hb_lease, self.config.heartbeat_ttl_s)
        while True:
            self._hb_wake.clear()
            cloud = self._cloud
            hb = Heartbeat(node=self.node, renew_time=dt.datetime.now(dt.timezone.utc), delegate=not cloud,
                           cloud_ok=cloud, incarnation=self.incarnation)
            await self._rpc(client.put(self.heartbeat_key(self.node), hb.to_json(), lease=self._hb_lease))
            await wait_event(self._hb_wake, self.config.heartbeat_interval_s)
            reply = await self._rpc(client.refresh_lease(self._hb_lease))
            if reply is None or reply.TTL <= 0:
                log.warning("heartbeat lease expired; granting a new one", extra={"pool": self.pool, "node": self.node})
                self._hb_lease = int((await self._rpc(client.lease(self.config.heartbeat_ttl_s))).id)

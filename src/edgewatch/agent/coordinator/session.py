"""The coordinator session (``Session``, a part of ``PoolCoordinator``): ``run`` keeps one with
the pool's etcd and reconnects after any failure (classified, logged, counted; capped jittered
backoff), ``close`` stops it and releases leadership; a session follows the own cloud link and puts
this node's heartbeat, and runs the leader-key watch, the health probe and the election. A session
lives no longer than its client certificate, and one opened before a rotation ends soon after it
(``certlife``; :meth:`Session.certificate_changed`, :meth:`Session.trust_changed`)."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import random
import time

import aetcd
import grpc

from edgewatch.agent.coordinator.backoff import next_backoff
from edgewatch.agent.coordinator.certlife import CERTIFICATE_EXPIRED, CERTIFICATE_ROTATED, session_end
from edgewatch.agent.coordinator.config import ClientTLS
from edgewatch.agent.coordinator.election import Election
from edgewatch.agent.coordinator.errors import CoordinatorError, Reconnect, classify_error, reconnect_of
from edgewatch.agent.coordinator.roles import Role
from edgewatch.agent.coordinator.schema import Heartbeat
from edgewatch.core.seal import seal
from edgewatch.pooletcd.client import EtcdClient
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
            started, on_purpose = loop.time(), False
            try:
                await apart(self._session(), name=f"coordinator-session-{self.pool}")
            except Exception as exc:  # noqa: BLE001 - classified, logged and counted; never escapes
                again = reconnect_of(exc)
                if again is not None:  # on purpose, not an error: reconnect after the smallest backoff
                    self.metrics.reconnects.labels(reason=again.reason).inc()  # (a leader lease survives it)
                    log.info("coordinator session ended to reconnect: %s", again.reason,
                             extra={"pool": self.pool, "node": self.node, "reason": again.reason})
                    on_purpose = True
                else:
                    self._session_failed(exc)
            if on_purpose or loop.time() - started > self.config.connect_backoff_max_s:
                backoff = 0.0  # the session lived a while (or ended on purpose): start small
            backoff = next_backoff(backoff, initial=self.config.connect_backoff_initial_s,
                                   cap=self.config.connect_backoff_max_s)
            await asyncio.sleep(backoff * random.uniform(0.5, 1.0))

    def _session_failed(self, exc: Exception) -> None:
        """Classify, log and count a session's failure."""
        error = classify_error(exc, url=self.endpoint.url)
        self.last_error = str(error)
        self.metrics.errors.labels(reason=error.reason).inc()
        extra = {"pool": self.pool, "node": self.node, "reason": error.reason, "url": self.endpoint.url}
        if error.reason == "internal":
            log.error("coordinator session failed: %s", error, exc_info=exc, extra=extra)
        else:
            log.warning("coordinator session failed: %s", error, extra=extra)

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

    # -- the client certificate's life (certlife) ------------------------------------------------------

    def certificate_changed(self, *, expires_at_s: float | None, reconnect_in_s: float | None = None) -> None:
        """The client certificate in the files is now one that expires at ``expires_at_s`` (our
        monotonic clock, ``time.monotonic()``; None: unknown, no bound). With ``reconnect_in_s`` it
        replaced the one before: a session opened earlier ends that many seconds from now and
        reconnects with it at once. Sessions opened from now on end at ``expires_at_s``."""
        now = time.monotonic()
        self._cert_expires_at = expires_at_s
        if reconnect_in_s is not None:
            self._cert_rotated_at, self._cert_reconnect_at = now, now + max(0.0, reconnect_in_s)
        self._cert_wake.set()

    def trust_changed(self, tls: ClientTLS, *, reconnect_in_s: float) -> None:
        """Use ``tls`` (a new trust root: the pool CA changed) from the next connection on; a
        session opened before ends ``reconnect_in_s`` seconds from now and reconnects with it at
        once (``trust_changed``)."""
        now = time.monotonic()
        self.tls = tls
        self._trust_changed_at, self._trust_reconnect_at = now, now + max(0.0, reconnect_in_s)
        self._cert_wake.set()

    async def _certificate_guard(self, *, connected_at: float, expires_at: float | None) -> None:
        """Ends the session (raises) when the certificate it connected with expires
        (``certificate_expired``, a ``CoordinatorError``) or was replaced, or the trust root changed
        since it connected (``Reconnect``); ``certlife.session_end`` decides."""
        while True:
            self._cert_wake.clear()
            now = time.monotonic()
            reason, wait = session_end(now_s=now, connected_at_s=connected_at, expires_at_s=expires_at,
                                       rotated_at_s=self._cert_rotated_at, reconnect_at_s=self._cert_reconnect_at)
            if reason == CERTIFICATE_EXPIRED:
                raise CoordinatorError(CERTIFICATE_EXPIRED, "this node's coordinator client certificate expired "
                                       "(by our clock since its receipt): session ended; waiting for a new one")
            if reason == CERTIFICATE_ROTATED:
                raise Reconnect(CERTIFICATE_ROTATED)
            trust, trust_wait = session_end(now_s=now, connected_at_s=connected_at, expires_at_s=None,
                                            rotated_at_s=self._trust_changed_at,
                                            reconnect_at_s=self._trust_reconnect_at)
            if trust is not None:
                raise Reconnect("trust_changed")
            await wait_event(self._cert_wake, min(wait, trust_wait, 3600.0))

    # -- session -------------------------------------------------------------------------------------

    def new_client(self) -> aetcd.Client:
        """A new etcd client for this pool's coordinator (same URL and TLS), for other readers of
        the pool's etcd (the pool cache); the caller closes it."""
        return self._new_client()

    def _new_client(self) -> EtcdClient:
        creds = None
        if self.endpoint.scheme == "https":
            creds = self.tls.credentials() if self.tls is not None else grpc.ssl_channel_credentials()
        host = f"[{self.endpoint.host}]" if ":" in self.endpoint.host else self.endpoint.host  # IPv6 literal
        return EtcdClient(host=host, port=self.endpoint.port, timeout=self.config.rpc_timeout_s, credentials=creds)

    @staticmethod
    async def _close_client(client: EtcdClient) -> None:
        # bounded(), not wait_for: aetcd's close drops a cancellation (its watcher shutdown catches
        # CancelledError), which must neither stretch the 2 s nor hide ours.
        with contextlib.suppress(Exception):
            await bounded(client.close(), 2.0)

    async def _session(self) -> None:
        expires_at, connected_at = self._cert_expires_at, time.monotonic()
        if expires_at is not None and connected_at >= expires_at:
            raise CoordinatorError(CERTIFICATE_EXPIRED, "this node's coordinator client certificate expired (by "
                                   "our clock since its receipt): not connecting; waiting for a new one")
        client = self._new_client()  # reads the certificate files now: the one expiring at expires_at
        cancelled = on_purpose = False
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
                tg.create_task(self._certificate_guard(connected_at=connected_at, expires_at=expires_at))
        except asyncio.CancelledError:
            cancelled = True
            raise
        except Exception as exc:
            on_purpose = reconnect_of(exc) is not None
            raise
        finally:
            was_healthy = self._healthy
            self._set_pending()
            if was_healthy:
                log.log(logging.INFO if cancelled or on_purpose else logging.WARNING,
                        "coordinator session ended; role pending",
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

    async def _ensure_lease(self, client: EtcdClient, lease_id: int | None, ttl: int) -> int:
        """Reuse ``lease_id`` if etcd still has it (after a reconnect or restart), else grant one."""
        if lease_id is not None:
            reply = await self._rpc(client.refresh_lease(lease_id))
            if reply is not None and reply.TTL > 0:
                return lease_id
        lease = await self._rpc(client.lease(ttl))
        return int(lease.id)

    async def _heartbeat_loop(self, client: EtcdClient) -> None:
        assert self._hb_wake is not None
        self._hb_lease = await self._ensure_lease(client, self._hb_lease, self.config.heartbeat_ttl_s)
        while True:
            self._hb_wake.clear()
            cloud = self._cloud
            hb = Heartbeat(node=self.node, renew_time=dt.datetime.now(dt.timezone.utc), delegate=not cloud,
                           cloud_ok=cloud, incarnation=self.incarnation)
            key = self.heartbeat_key(self.node)
            await self._rpc(client.put(key, seal(hb.to_json(), key=key, signer=self.signer), lease=self._hb_lease))
            await wait_event(self._hb_wake, self.config.heartbeat_interval_s)
            reply = await self._rpc(client.refresh_lease(self._hb_lease))
            if reply is None or reply.TTL <= 0:
                log.warning("heartbeat lease expired; granting a new one", extra={"pool": self.pool, "node": self.node})
                self._hb_lease = int((await self._rpc(client.lease(self.config.heartbeat_ttl_s))).id)

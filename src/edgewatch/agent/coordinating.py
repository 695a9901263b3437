"""Which pool coordinator this agent runs, and running it: ``CoordinatorRunner``.

What it is for
    Keeps one :class:`edgewatch.agent.coordinator.PoolCoordinator` running for the target
    :meth:`CoordinatorRunner.wanted` names — ``--coordinator URL``, or without it this node's pool's
    entry in the ConfigMap's ``poolCoordinators`` (pool: ``--pool`` or the node label
    ``edgewatch.io/pool``) — and restarts it, live, when the target changes (the entry, the label,
    the pool-scope resources its leader caches): the old session is closed first (leadership
    released), then the new one started.

    It is the agent's one door to the current coordinator: the exchange loop asks it for the pool
    leader and whether the coordinator carries delegated heartbeats (:meth:`pool_leader`,
    :meth:`covers_delegation`), the role publisher and the pool cache for the coordinator itself
    (:meth:`current_coordinator`), and the cloud-link monitor tells it when the link flips
    (:meth:`cloud_link_changed`, passed on at once: the coordinator no longer polls the link).

This node's own certificate (``--coordinator-certificate``, docs/security.md)
    With ``node_certificate`` (the files ``edgewatch.agent.certrequester`` keeps in the state
    folder), the coordinator's client TLS is :class:`~edgewatch.agent.coordinator.NodeCertificateTLS`:
    this node's key and certificate, and as the only trust root its pool's CA certificate, read
    through the agent's API client from the ConfigMap ``names.pool_ca_name(pool)`` (key
    ``ca.crt``, in ``namespace``; agents may read every ConfigMap there) when a coordinator is
    started for a target, and checked (:func:`~edgewatch.agent.coordinator.check_pool_ca`). Never the
    system roots, never ``tls`` (an operator's ``CoordinatorTLS`` is ignored, with a warning).
    No coordinator is started before the requester has told us of a certificate
    (:meth:`CoordinatorRunner.certificate_changed`: a valid stored one at start, or a new one) and
    the pool CA has been read; meanwhile :meth:`current_coordinator` is None, so the peer path
    carries heartbeats exactly as with no coordinator. A missing or bad pool CA is retried every
    ``ca_retry_s`` (10 s), logged once per distinct reason.

    Rotation and expiry (``edgewatch.agent.coordinator.certlife``): the requester writes the new key
    and certificate over the same paths, and the coordinator reads them at every new etcd client.
    etcd checks a client certificate at the TLS handshake only, so on :meth:`certificate_changed`
    the session opened before is ended within ``rotation_jitter_s`` (30 s, a uniform draw: a pool's
    nodes do not all reconnect at once) and reconnects at once with the new one (a leader whose
    lease survives the quick reconnect keeps leading). A session never outlives its certificate:
    its end is the validity the requester recorded on receipt (``<state>/coordinator-client.json``:
    ``valid_s`` and ``received_at`` on this node's own wall clock), counted on our monotonic clock
    from the notice; notAfter is never compared with our clock. It then ends with
    ``certificate_expired`` (logged, counted in ``edgewatch_coordinator_errors_total``), and no
    session is opened until a new certificate is announced.

    Pool CA rotation: while a coordinator runs with this node's certificate, the pool CA ConfigMap is
    re-read every ``ca_refresh_s`` (60 s, one bounded GET; a period rather than a watch: one small
    request a minute is cheaper on a thin uplink than another long-lived watch per node, and a CA
    rotation takes hours, old and new CA trusted together as a bundle). A changed ``ca.crt`` (up to
    ``MAX_POOL_CA_CERTS`` CA certificates, :func:`~edgewatch.agent.coordinator.check_pool_ca`) is the
    new trust root from the next connection on, and the open session reconnects within
    ``rotation_jitter_s`` (same coordinator: leadership kept if the lease survives). A failed or
    unusable re-read keeps the roots in use (logged once per reason, tried again after the period).

What it is handed
    The settings (this node, ``--coordinator``, ``--pool``, TLS, this node's certificate files and
    the namespace of the pool CA ConfigMap), the API client, the agent's
    registry, this node's cloud link (:class:`edgewatch.agent.ports.CloudLinkView`), the local
    verdicts (:class:`Verdicts`: the peer exchange), what the ConfigMap and the own Node say
    (:class:`PoolSettings`: the membership) and the control plane's clock carried renewTimes are
    written in (:class:`ControllerClock`).

Errors
    A coordinator that cannot be built (bad URL or pool name, TLS with http) is logged once per
    target and not run; it is tried again only when the target changes. Nothing here ends the agent.

Limits
    The target is polled every ``poll_s`` (1 s), not pushed. A restarted session registers the same
    metric names: the previous session's collectors are unregistered first (``_TrackingRegistry``).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import random
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Protocol

from cryptography import x509
from prometheus_client import CollectorRegistry

from edgewatch.agent import certstore
from edgewatch.agent.certstore import CertificateFiles
from edgewatch.agent.coordinator import (
    CoordinatorError,
    CoordinatorTLS,
    NodeCertificateTLS,
    check_pool_ca,
)
from edgewatch.agent.coordinator.certlife import ROTATION_JITTER_S, certificate_deadline, reconnect_delay
from edgewatch.agent.coordinator.config import ClientTLS
from edgewatch.agent.membership import NodeInfo
from edgewatch.agent.ports import CloudLinkView
from edgewatch.core.poolconfig import PoolCoordinators
from edgewatch.core.signing import Signer
from edgewatch.core.types import NodeName
from edgewatch.kube.api import ApiError, AsyncClient, ConfigMap
from edgewatch.kube.errors import API_ERRORS, is_not_found
from edgewatch.names import POOL_CA_CONFIGMAP_KEY, POOL_LABEL, pool_ca_name
from edgewatch.poolcache.resources import PoolResource

if TYPE_CHECKING:
    from edgewatch.agent.coordinator.pool import PoolCoordinator

log = logging.getLogger(__name__)

__all__ = ["ControllerClock", "CoordinatorRunner", "PoolSettings", "Target", "Verdicts", "node_tls"]

Target = tuple[str, str, tuple[PoolResource, ...]]
"""A coordinator target: (etcd URL, pool, the pool-scope resources its leader caches)."""


class PoolSettings(Protocol):
    """What the ConfigMap and the own Node say about the pool (``edgewatch.agent.membership``)."""

    config_synced: asyncio.Event
    """Set once the ConfigMap has been read."""

    @property
    def own(self) -> NodeInfo | None:
        """This node's Node (its labels), None while not known."""
        ...

    @property
    def pool_coordinators(self) -> PoolCoordinators:
        """The ConfigMap's ``poolCoordinators``: pool -> etcd URL, and the ``auto`` pools."""
        ...

    @property
    def discovered_coordinators(self) -> Mapping[str, str]:
        """Where each ``auto`` pool's coordinator runs now (the ConfigMap
        ``edgewatch-pool-coordinators``, written by the controller): pool -> ``https://`` URL."""
        ...

    @property
    def pool_resources(self) -> tuple[PoolResource, ...]:
        """The ConfigMap's ``poolScopeResources``."""
        ...


class Verdicts(Protocol):
    """This node's local verdicts on its peers (``edgewatch.agent.peers.PeerExchange``)."""

    def verdict_of(self, node: str) -> str:
        """``healthy``, ``unhealthy`` or ``unknown``."""
        ...


class ControllerClock(Protocol):
    """The control plane's clock as this agent estimates it (``edgewatch.agent.cloudclock``)."""

    def now(self) -> dt.datetime:
        """The controller's current time, an aware UTC datetime."""
        ...


def node_tls(files: CertificateFiles, pool_ca_pem: bytes | str | None) -> NodeCertificateTLS:
    """The coordinator's client TLS from this node's certificate files and its pool's CA certificate
    (the ConfigMap's ``ca.crt``), the only trust root.

    Raises:
        CoordinatorError: (reason ``tls``) the pool CA is missing or not one CA certificate.
    """
    return NodeCertificateTLS(ca_pem=check_pool_ca(pool_ca_pem), cert_file=files.cert_file,
                              key_file=files.key_file)


_WAIT = object()
"""``_tls_for``: not ready to start a coordinator yet (no certificate, or no pool CA)."""


class CoordinatorRunner:
    """Keeps the pool coordinator running for the current target (see the module docstring).

    Args (keyword-only):
        node: this node.
        url: ``--coordinator`` (wins over the ConfigMap), or None.
        pool: ``--pool`` (wins over the node label), or None.
        tls: client certificates for an https coordinator, or None.
        kube: the agent's API client (the leader forwards and caches with it).
        registry: the agent's registry (each session's metrics go there).
        link: this node's cloud link.
        verdicts: the local verdicts (the leader never vouches for an ``unhealthy`` node).
        signer: this node's keyring (seals the pool cache it writes while leading).
        settings: the ConfigMap's pool settings and the own Node (:class:`PoolSettings`).
        clock: the control plane's clock, in which carried renewTimes are written.
        node_certificate: where this node's coordinator client certificate is kept (the state
            folder), or None: then ``tls`` always (module docstring).
        certificate_always: ``--coordinator-certificate``: every coordinator uses the node's own
            certificate. Off, only an ``auto`` pool's does (an edgewatch-run coordinator always
            authenticates nodes by their certificates); an explicit URL then uses ``tls``.
        namespace: where the pool CA ConfigMaps live (the edgewatch namespace).
        api_timeout_s: bound of the pool CA read, seconds.
        ca_retry_s: after a failed pool CA read, the next one is this much later, seconds.
        ca_refresh_s: the pool CA is re-read this often while a coordinator runs with it, seconds.
        rotation_jitter_s: a session opened before a rotation (certificate or pool CA) ends within
            this many seconds of it (uniform), seconds.
        rng: the random source of that jitter.
        wall: our wall clock (the certificate record's ``received_at``), seconds.
    """

    def __init__(self, *, node: NodeName, url: str | None, pool: str | None, tls: CoordinatorTLS | None,
                 kube: AsyncClient, registry: CollectorRegistry, link: CloudLinkView, verdicts: Verdicts,
                 signer: Signer,
                 settings: PoolSettings, clock: ControllerClock, node_certificate: CertificateFiles | None = None,
                 certificate_always: bool = True, namespace: str = "edgewatch", api_timeout_s: float = 10.0,
                 ca_retry_s: float = 10.0, ca_refresh_s: float = 60.0, rotation_jitter_s: float = ROTATION_JITTER_S,
                 rng: random.Random | None = None, wall: Callable[[], float] = time.time) -> None:
        self.node = node
        self.url = url
        self.pool = pool
        self.tls = tls
        self._signer = signer
        self.node_certificate = node_certificate
        self.certificate_always = certificate_always
        self.namespace = namespace
        self.api_timeout_s = api_timeout_s
        self.ca_retry_s = ca_retry_s
        self.ca_refresh_s = ca_refresh_s
        self.rotation_jitter_s = rotation_jitter_s
        self._rng = rng or random.Random()
        self._wall = wall
        self._certificate_ready = False
        self._cert_expires_at: float | None = None  # monotonic, of the certificate in the files (certlife)
        self._ca_refresh_at = 0.0
        self._ca_retry_at = 0.0
        self._waiting_for: str | None = None  # what the last "waiting" log line said (logged once each)
        if node_certificate is not None and certificate_always and tls is not None:
            log.warning("--coordinator-certificate is on: the coordinator uses this node's own certificate and "
                        "the pool CA; the configured coordinator TLS files are ignored")
        self._kube = kube
        self._registry = registry
        self._link = link
        self._verdicts = verdicts
        self._settings = settings
        self._clock = clock
        self.current: PoolCoordinator | None = None
        self.target: Target | None = None
        self._collectors: list[object] = []

    # -- what the other parts read ---------------------------------------------------------------------

    def current_coordinator(self) -> PoolCoordinator | None:
        """The coordinator running now (None: none; the peer path alone carries heartbeats)."""
        return self.current

    def pool_leader(self) -> NodeName | None:
        """The pool leader while the pool coordinator carries heartbeats (the carrier a cut-off node
        names), else None."""
        leader = self.current.leader if self.current is not None else None
        return NodeName(leader) if leader else None

    def covers_delegation(self) -> bool:
        """True while the running coordinator forwards delegated heartbeats (a leader is elected):
        the peer path then stands back."""
        return self.current is not None and self.current.covers_delegation()

    def cloud_link_changed(self, up: bool) -> None:
        """The link monitor's change notice (a ``CloudLinkListener``): the running coordinator
        re-reads the link at once."""
        if self.current is not None:
            self.current.cloud_link_changed()

    def certificate_wanted(self) -> bool:
        """Whether this node needs its coordinator client certificate now: always with
        ``certificate_always``, else while its pool's coordinator is run by edgewatch (``auto``)."""
        if self.node_certificate is None:
            return False
        if self.certificate_always:
            return True
        pool = self.pool_of_node()
        return pool is not None and pool in self._settings.pool_coordinators.auto

    def certificate_changed(self, files: CertificateFiles) -> None:
        """The certificate requester's notice (a ``CertificateListener``): a certificate exists at
        ``files`` (stored and valid at start, or newly issued). The first one lets a coordinator
        start; a later one (a rotation) is read by the next etcd client the coordinator opens, and
        the session open now reconnects within ``rotation_jitter_s`` seconds. Each bounds the
        sessions opened with it by its validity (module docstring, ``certlife``)."""
        if self.node_certificate is None:
            return
        self.node_certificate = files
        first = not self._certificate_ready
        self._certificate_ready = True
        self._cert_expires_at = self._certificate_expiry(files)
        left = "unknown" if self._cert_expires_at is None else f"{self._cert_expires_at - time.monotonic():.0f} s"
        coordinator = self.current
        if first or coordinator is None or not isinstance(coordinator.tls, NodeCertificateTLS):
            log.info("coordinator client certificate %s (valid for %s)", "available" if first else "rotated",
                     left, extra={"node": self.node})
            if coordinator is not None and isinstance(coordinator.tls, NodeCertificateTLS):
                coordinator.certificate_changed(expires_at_s=self._cert_expires_at)
            return
        delay = reconnect_delay(draw=self._rng.random(), jitter_s=self.rotation_jitter_s)
        coordinator.certificate_changed(expires_at_s=self._cert_expires_at, reconnect_in_s=delay)
        log.info("coordinator client certificate rotated (valid for %s): the session reconnects with it in "
                 "%.1f s", left, delay, extra={"node": self.node, "pool": coordinator.pool})

    def _certificate_expiry(self, files: CertificateFiles) -> float | None:
        """When the certificate in ``files`` expires, monotonic seconds: the validity the requester
        recorded on receipt from its receipt (``certlife.certificate_deadline``); without a usable
        record, the certificate's own validity (notAfter - notBefore) from now; None if neither
        can be read (then no bound: the handshake still checks it)."""
        stored = certstore.load(files, node=self.node)
        if stored is not None:
            return certificate_deadline(now_mono_s=time.monotonic(), now_wall_s=self._wall(),
                                        received_at_wall_s=stored.received_at, valid_s=stored.certificate.valid_s)
        try:
            cert = x509.load_pem_x509_certificate(files.cert_file.read_bytes())
        except (OSError, ValueError) as exc:
            log.warning("cannot read this node's coordinator client certificate's validity: %s", exc,
                        extra={"node": self.node})
            return None
        log.info("no usable certificate record: counting the certificate's own validity from now",
                 extra={"node": self.node})
        return time.monotonic() + (cert.not_valid_after_utc - cert.not_valid_before_utc).total_seconds()

    # -- the target ------------------------------------------------------------------------------------

    def pool_of_node(self) -> str | None:
        """This node's pool: ``--pool``, else its ``edgewatch.io/pool`` label (None while the node is
        not known, or has no label)."""
        if self.pool:
            return self.pool
        info = self._settings.own
        return (info.labels.get(POOL_LABEL) or None) if info is not None else None

    def wanted(self) -> Target | None:
        """The (URL, pool, pool-scope resources its leader caches) the coordinator should run for
        now, or None.

        ``--coordinator URL`` wins (pool: ``--pool``, the node's label, or ``default``, once the node
        is known). Otherwise the ConfigMap's ``poolCoordinators`` entry for this node's pool, once
        the ConfigMap has been read; for an ``auto`` pool, where the controller says its
        coordinator runs now (none while it is not Ready: the peer path carries heartbeats).
        """
        settings = self._settings
        if not settings.config_synced.is_set():
            return None  # the ConfigMap names the cached resources
        cached = settings.pool_resources
        if self.url:
            if self.pool:
                return (self.url, self.pool, cached)
            if settings.own is None:
                return None
            return (self.url, self.pool_of_node() or "default", cached)
        pool = self.pool_of_node()
        url = settings.pool_coordinators.url_for(pool)
        if url is None and pool is not None and pool in settings.pool_coordinators.auto:
            url = settings.discovered_coordinators.get(pool)
        return (url, pool, cached) if url and pool else None

    # -- running ---------------------------------------------------------------------------------------

    async def run(self, *, poll_s: float = 1.0) -> None:
        """Keep the coordinator running for :meth:`wanted` until cancelled; restart it when that
        changes (every ``poll_s`` seconds). On cancellation the coordinator is closed (leadership
        released) and its task awaited."""
        refused: Target | None = None
        waiting_logged = False
        async with asyncio.TaskGroup() as tg:
            try:
                while True:
                    want = self.wanted()
                    if want != self.target and (want is None or want != refused):
                        await self._stop()
                        refused = None
                        tls = await self._tls_for(want[1]) if want is not None else None
                        if want is not None and tls is not _WAIT and not self._start(tg, want, tls):  # type: ignore[arg-type]
                            refused = want  # logged once; tried again only if the target changes
                    settings = self._settings
                    if want is None and not self.url and settings.config_synced.is_set() \
                            and settings.own is not None and not waiting_logged:
                        log.info("no pool coordinator for pool %s (ConfigMap key poolCoordinators); peer path only",
                                 self.pool_of_node() or "(node has no edgewatch.io/pool label)")
                        waiting_logged = True
                    if want is not None:
                        waiting_logged = False
                    await self._refresh_pool_ca()
                    await asyncio.sleep(poll_s)
            finally:
                await self._stop()

    async def _tls_for(self, pool: str) -> ClientTLS | None | object:
        """The client TLS a coordinator for ``pool`` is started with, or ``_WAIT``: this node's
        certificate is not there yet, or the pool CA could not be read (retried after
        ``ca_retry_s``). Without ``node_certificate``: ``tls`` as given."""
        files = self.node_certificate
        if files is None or not (self.certificate_always or pool in self._settings.pool_coordinators.auto):
            return self.tls
        if not self._certificate_ready:
            self._waiting("waiting for this node's coordinator client certificate before joining pool "
                          f"{pool}; the peer path carries heartbeats meanwhile")
            return _WAIT
        loop = asyncio.get_running_loop()
        if loop.time() < self._ca_retry_at:
            return _WAIT
        name = pool_ca_name(pool)
        try:
            async with asyncio.timeout(self.api_timeout_s):
                cm = await self._kube.get(ConfigMap, name, namespace=self.namespace)
            tls = node_tls(files, (cm.data or {}).get(POOL_CA_CONFIGMAP_KEY))
        except CoordinatorError as exc:
            why = f"pool CA ConfigMap {self.namespace}/{name} unusable: {exc}"
        except ApiError as exc:
            why = (f"pool CA ConfigMap {self.namespace}/{name} not found (the controller makes it when it first "
                   f"signs for the pool)" if is_not_found(exc) else
                   f"cannot read the pool CA ConfigMap {self.namespace}/{name}: {exc}")
        except API_ERRORS as exc:
            why = f"cannot read the pool CA ConfigMap {self.namespace}/{name}: {type(exc).__name__}: {exc}"
        else:
            self._waiting_for = None
            return tls
        self._ca_retry_at = loop.time() + self.ca_retry_s
        self._waiting(f"not joining pool {pool} yet: {why}; retrying every {self.ca_retry_s:.0f} s, the peer "
                      f"path carries heartbeats meanwhile", warning=True)
        return _WAIT

    async def _refresh_pool_ca(self) -> None:
        """Every ``ca_refresh_s``, while a coordinator runs with this node's certificate: re-read the
        pool CA; if ``ca.crt`` changed, hand the coordinator the new roots (``trust_changed``: its
        session reconnects within ``rotation_jitter_s``). A failed read keeps the roots in use."""
        coordinator = self.current
        if coordinator is None or not isinstance(coordinator.tls, NodeCertificateTLS) or self.node_certificate is None:
            return
        now = time.monotonic()
        if now < self._ca_refresh_at:
            return
        self._ca_refresh_at = now + self.ca_refresh_s
        name = pool_ca_name(coordinator.pool)
        try:
            async with asyncio.timeout(self.api_timeout_s):
                cm = await self._kube.get(ConfigMap, name, namespace=self.namespace)
            tls = node_tls(self.node_certificate, (cm.data or {}).get(POOL_CA_CONFIGMAP_KEY))
        except (CoordinatorError, *API_ERRORS) as exc:
            self._waiting(f"pool CA ConfigMap {self.namespace}/{name} could not be re-read ({type(exc).__name__}: "
                          f"{exc}); keeping the CA in use, retrying in {self.ca_refresh_s:.0f} s", warning=True)
            return
        self._waiting_for = None
        if tls.ca_pem == coordinator.tls.ca_pem or self.current is not coordinator:
            return
        delay = reconnect_delay(draw=self._rng.random(), jitter_s=self.rotation_jitter_s)
        coordinator.trust_changed(tls, reconnect_in_s=delay)
        log.info("pool CA changed (%d certificate(s) now trusted): the coordinator session reconnects with the "
                 "new trust root in %.1f s", tls.ca_pem.count(b"-----BEGIN"), delay,
                 extra={"node": self.node, "pool": coordinator.pool})

    def _waiting(self, message: str, *, warning: bool = False) -> None:
        if message != self._waiting_for:
            self._waiting_for = message
            log.log(logging.WARNING if warning else logging.INFO, message, extra={"node": self.node})

    def _start(self, tg: asyncio.TaskGroup, target: Target, tls: ClientTLS | None) -> bool:
        url, pool, cached = target
        # imported when first started: gRPC, protobuf and aetcd (about 11 MiB) stay out of agents
        # whose pool has no coordinator
        from edgewatch.agent.coordinator.pool import PoolCoordinator  # noqa: PLC0415

        try:
            coordinator = PoolCoordinator(url=url, pool=pool, node=self.node, kube=self._kube,
                                          cloud_ok=self._cloud_ok, verdict_of=self._verdicts.verdict_of,
                                          signer=self._signer, tls=tls, registry=self._session_registry(),
                                          pool_resources=cached, wall=self._clock.now)
        except CoordinatorError as exc:
            log.error("not joining pool %s through %s: %s", pool, url, exc,
                      extra={"kind": "coordinator_config", "pool": pool})
            return False
        if isinstance(tls, NodeCertificateTLS):
            coordinator.certificate_changed(expires_at_s=self._cert_expires_at)  # ends no later than it
            self._ca_refresh_at = time.monotonic() + self.ca_refresh_s  # just read
        self.current = coordinator
        self.target = target
        log.info("joining pool %s through coordinator %s", pool, url, extra={"pool": pool})
        tg.create_task(coordinator.run(), name="pool-coordinator")
        return True

    async def _stop(self) -> None:
        coordinator, self.current, self.target = self.current, None, None
        if coordinator is not None:
            log.info("leaving pool %s", coordinator.pool, extra={"pool": coordinator.pool})
            await coordinator.close(graceful=True)

    def _cloud_ok(self) -> bool:
        """This node's cloud link, as the coordinator reads it (``PoolCoordinator(cloud_ok=...)``)."""
        return self._link.up

    def _session_registry(self) -> CollectorRegistry:
        """Our registry, as seen by a (new) coordinator session: the previous session's collectors
        are unregistered first, since a restarted session registers the same metric names."""
        for collector in self._collectors:
            with contextlib.suppress(KeyError):
                self._registry.unregister(collector)  # type: ignore[arg-type]
        self._collectors = []
        return _TrackingRegistry(self._registry, self._collectors)  # type: ignore[return-value]


class _TrackingRegistry:
    """Forwards ``register``/``unregister`` to a registry and remembers what was registered (the
    only calls prometheus_client's metric constructors make on a registry)."""

    def __init__(self, registry: CollectorRegistry, collectors: list[object]) -> None:
        self._registry = registry
        self._collectors = collectors

    def register(self, collector: object) -> None:
        self._registry.register(collector)  # type: ignore[arg-type]
        self._collectors.append(collector)

    def unregister(self, collector: object) -> None:
        self._registry.unregister(collector)  # type: ignore[arg-type]

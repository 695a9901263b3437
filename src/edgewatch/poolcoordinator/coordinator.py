"""``edgewatch pool-coordinator``: one pool's coordinator pod, wired together (docs/install.md).

What :meth:`PoolCoordinator.run` does, under one TaskGroup (every task is cancelled and awaited
when it is cancelled, e.g. by SIGTERM through ``edgewatch.runtime.run_until_signalled``):

1. serves ``/healthz`` (200 while the process runs), ``/readyz`` and ``/metrics`` on ``ops_port``
   of the node's address and of ``127.0.0.1`` (host network: the kubelet probes the pod's IP, which
   is the node's; not 0.0.0.0, which would also expose the metrics on every other interface of the
   node, e.g. a public one);
2. installs the pool CA (``<data-dir>/tls/ca.crt``, from its ConfigMap, waiting for it), then
   obtains the serving and root certificates through CSRs and keeps rotating them
   (``edgewatch.poolcoordinator.certificates``, ``edgewatch.csr``); reads the CA again every
   ``ca_refresh_s`` and restarts etcd when it changed (etcd loads it only at start);
3. once both are there, runs etcd (``etcdprocess``; on loopback only until the first access-control
   reconcile has switched authentication on, then on the node's address too), probes it
   (``health``), keeps its access
   control equal to the pool's Nodes (``members``) and its election honest: no candidacy in line
   behind a leader, none under a long lease, no keys of former members (``edgewatch.pooletcd.janitor``);
   charges every member's writes to its quota and suspends one over it (``edgewatch.pooletcd.quota``,
   applied by ``members``); compacts, defragments and disarms etcd past half its quota and revokes
   leases with no key or over 600 s (``edgewatch.pooletcd.upkeep``).

``/metrics`` answers only a token the apiserver allows to read it (``edgewatch.metricsauth``).

``/readyz`` is 200 when (a) etcd answered the last probe over TLS with the root certificate,
(b) the access control was reconciled at least once for the current member Nodes and (c) etcd was
opened to the pool after that; else 503 saying which is missing. The controller publishes the coordinator's address to the agents only while the
pod is Ready.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from pathlib import Path

import grpc
from prometheus_client import CollectorRegistry

from edgewatch.csr import CertificateRequester
from edgewatch.certfiles import CertificateFiles
from edgewatch.kube.api import AsyncClient
from edgewatch.kube.informer import InformerConfig
from edgewatch.kube.http import http_client_of
from edgewatch.metricsauth import MetricsGuard
from edgewatch.opsserver import serve_ops
from edgewatch.kube.errors import API_ERRORS
from edgewatch.poolcoordinator.certificates import (TlsFiles, install_pool_ca, read_pool_ca, root_credentials,
                                                     root_spec, serving_spec, write_pool_ca)
from edgewatch.poolcoordinator.etcdprocess import QUOTA_BACKEND_BYTES, EtcdSupervisor, etcd_argv
from edgewatch.poolcoordinator.health import EtcdProbe
from edgewatch.poolcoordinator.members import MembersLoop
from edgewatch.poolcoordinator.metrics import CoordinatorMetrics
from edgewatch.pooletcd.janitor import ElectionJanitor
from edgewatch.pooletcd.quota import QuotaKeeper, QuotaPolicy
from edgewatch.pooletcd.upkeep import StoreUpkeep

__all__ = ["CoordinatorConfig", "PoolCoordinator"]

log = logging.getLogger(__name__)

#: File in the data folder once etcd's access control was first switched on there.
ACL_MARKER = "acl-on"


@dataclass(frozen=True, kw_only=True)
class CoordinatorConfig:
    """What the coordinator runs with.

    Attributes:
        pool: the pool (the value of its Nodes' ``edgewatch.io/pool`` label).
        namespace: edgewatch's namespace (the pool CA's ConfigMap).
        node: the node the pod runs on (``NODE_NAME``).
        host_ip: that node's address (``HOST_IP``).
        port: etcd's client port (peer ``port+2``, metrics ``port+3`` on loopback).
        ops_port: the ops endpoints' port (0: any free port, in tests).
        data_dir: the data folder (``tls/``, ``etcd/``).
        etcd_binary: the etcd executable.
        api_timeout_s: bound of each API call, seconds.
        etcd_timeout_s: bound of each etcd call, seconds.
        certificate_lifetime_s: ``expirationSeconds`` asked for (600 .. 86400).
        csr_poll_s: time between two GETs of a pending CSR, seconds.
        probe_interval_s: time between two etcd probes, seconds.
        debounce_s: quiet time after a membership change before reconciling, seconds.
        ca_refresh_s: how often the pool CA's ConfigMap is read again, seconds (default 60 s, as
            the agents do); a change is written to ``ca.crt`` and etcd is restarted to load it.
        informer: the Node informer's timings.
        quota: each member's write quota (``edgewatch.pooletcd.quota``; defaults: its keys 4 KiB/s
            and 64 KiB at once, its area 128 MiB, 300 s suspensions).
    """

    pool: str
    namespace: str
    node: str
    host_ip: str
    port: int
    ops_port: int
    data_dir: Path
    etcd_binary: str
    api_timeout_s: float = 10.0
    etcd_timeout_s: float = 5.0
    certificate_lifetime_s: int = 86400
    csr_poll_s: float = 2.0
    probe_interval_s: float = 2.0
    debounce_s: float = 1.0
    ca_refresh_s: float = 60.0
    informer: InformerConfig | None = None
    quota: QuotaPolicy = QuotaPolicy()


class _BothIssued:
    """Sets ``event`` once both requesters have a certificate."""

    def __init__(self, event: asyncio.Event) -> None:
        self.event = event
        self.requesters: tuple[CertificateRequester, ...] = ()

    def certificate_changed(self, files: CertificateFiles) -> None:
        if self.requesters and all(r.certificate is not None for r in self.requesters):
            self.event.set()


class PoolCoordinator:
    """One pool's coordinator (module docstring).

    Args (keyword-only):
        client: the API client (the pod's ServiceAccount: ``get`` the pool CA ConfigMap, ``list``
            and ``watch`` Nodes, ``create`` and ``get`` CSRs, ``create`` tokenreviews and
            subjectaccessreviews for ``/metrics``).
        config: :class:`CoordinatorConfig`.
        registry: where the metrics go (a new one by default).

    Attributes:
        tls, serving, root, supervisor, probe, members, metrics: the parts (for tests and logs).
        ops_ports: the ports the ops endpoints listen on, by address, once serving.
    """

    def __init__(self, *, client: AsyncClient, config: CoordinatorConfig,
                 registry: CollectorRegistry | None = None) -> None:
        self.config = c = config
        self._client = client
        self.registry = registry or CollectorRegistry()
        self.tls = TlsFiles.under(c.data_dir)
        self._issued = asyncio.Event()
        both = _BothIssued(self._issued)
        target = f"127.0.0.1:{c.port}"
        self._acl_on = asyncio.Event()  # the access control was reconciled once: etcd may face the pool
        self.opened = False  # etcd listens on the node's address (not only on loopback)
        # per-member write quotas: a member over its quota may only read for a while (pooletcd.quota)
        self.quota = QuotaKeeper(host="127.0.0.1", port=c.port, credentials=self._credentials, pool=c.pool,
                                 policy=c.quota, timeout_s=c.etcd_timeout_s, on_change=self._suspensions_changed,
                                 on_action=lambda action: self.metrics.quota_actions.labels(action).inc())
        # the store within its quota, and no lease without a key (pooletcd.upkeep)
        self.upkeep = StoreUpkeep(host="127.0.0.1", port=c.port, credentials=self._credentials, pool=c.pool,
                                  quota_bytes=QUOTA_BACKEND_BYTES, timeout_s=c.etcd_timeout_s,
                                  on_action=lambda action: self.metrics.store_actions.labels(action).inc())
        self.members = MembersLoop(client=client, pool=c.pool, target=target, credentials=self._credentials,
                                   timeout_s=c.etcd_timeout_s, debounce_s=c.debounce_s, informer_config=c.informer,
                                   on_result=self._acl_result, suspended=self.quota.suspended)
        self.probe = EtcdProbe(target=target, credentials=self._credentials, interval_s=c.probe_interval_s,
                               timeout_s=min(c.etcd_timeout_s, 5.0))
        self.serving = CertificateRequester(
            client=client, spec=serving_spec(node=c.node, host_ip=c.host_ip), files=self.tls.server,
            timeout_s=c.api_timeout_s, lifetime_s=c.certificate_lifetime_s, listeners=[both],
            on_result=lambda result: self.metrics.certificate_requests.labels("serving", result).inc(),
            poll_s=c.csr_poll_s)
        self.root = CertificateRequester(
            client=client, spec=root_spec(node=c.node), files=self.tls.root, timeout_s=c.api_timeout_s,
            lifetime_s=c.certificate_lifetime_s, listeners=[both],
            on_result=lambda result: self.metrics.certificate_requests.labels("root", result).inc(),
            poll_s=c.csr_poll_s)
        both.requesters = (self.serving, self.root)
        self.metrics = CoordinatorMetrics(registry=self.registry, members=lambda: len(self.members.members),
                                          ready=lambda: self.readiness() is None,
                                          expiry={"serving": self.serving.expiry_s, "root": self.root.expiry_s})
        argv = {mode: etcd_argv(binary=c.etcd_binary, node=c.node, host_ip=c.host_ip, port=c.port,
                                data_dir=c.data_dir, cert_file=self.tls.server.cert_file,
                                key_file=self.tls.server.key_file, ca_file=self.tls.ca_file, loopback_only=mode)
                for mode in (True, False)}
        self._open_argv = argv[False]
        self.supervisor = EtcdSupervisor(
            argv=argv[False] if (c.data_dir / ACL_MARKER).exists() else argv[True],
            on_restart=self.metrics.etcd_restarts.inc,
            on_exit=lambda: self.probe.invalidate("etcd exited; the new process is not probed yet"))
        self.janitor = ElectionJanitor(
            host="127.0.0.1", port=c.port, credentials=self._credentials, pool=c.pool,
            members=lambda: self.members.members if self.members.store.synced.is_set() else None,
            timeout_s=c.etcd_timeout_s, on_action=lambda action: self.metrics.election_actions.labels(action).inc())
        self.ops_ports: dict[str, int] = {}
        http = http_client_of(client)  # who may read /metrics: asked of the apiserver (edgewatch.metricsauth)
        self.metrics_guard = MetricsGuard(http=http) if http is not None else None
        if self.metrics_guard is not None:
            self.registry.register(self.metrics_guard.collector)

    def _suspensions_changed(self) -> None:
        self.members.kick()

    def _acl_result(self, result: str) -> None:
        self.metrics.acl_reconciles.labels(result).inc()
        if result == "ok":
            self._acl_on.set()

    @property
    def _acl_marker(self) -> Path:
        """Written once the access control was first switched on in this data folder."""
        return self.config.data_dir / ACL_MARKER

    async def _open_to_the_pool(self) -> None:
        """etcd starts listening on loopback only while its data folder has never had the access
        control on (before it, every certificate of the pool CA may do anything, so no node may
        reach it); after the first reconcile it is restarted listening on the node's address too.
        A data folder that had it (authentication stays on in etcd's data) opens at once."""
        if self._acl_marker.exists():
            self.opened = True
            return
        await self._acl_on.wait()
        self._acl_marker.write_text("authentication on\n")
        self.supervisor.argv = tuple(self._open_argv)
        await self.supervisor.restart("access control is on: listening on the node's address")
        self.opened = True
        log.info("pool coordinator etcd open to the pool", extra={"pool": self.config.pool})

    def _credentials(self) -> grpc.ChannelCredentials:
        return root_credentials(self.tls)

    def readiness(self) -> str | None:
        """None when ready (module docstring), else why not. Reads state only (the ops threads call it)."""
        if not self.probe.ok:
            return f"etcd does not answer over TLS with the root certificate ({self.probe.reason})"
        if not self.members.current():
            return "etcd's access control is not reconciled for the current members yet"
        if not self.opened:
            return "etcd listens on loopback only until its access control is on"
        return None

    async def run(self) -> None:
        """Run until cancelled (module docstring); everything started is stopped and awaited.

        Raises:
            OSError: an ops address cannot be bound, a file cannot be written, etcd cannot be started.
        """
        c = self.config
        addresses = list(dict.fromkeys((c.host_ip, "127.0.0.1")))
        with contextlib.ExitStack() as stack:
            for address in addresses:
                self.ops_ports[address] = stack.enter_context(
                    serve_ops(address=address, port=c.ops_port, registry=self.registry, readiness=self.readiness,
                              guard=self.metrics_guard))
            log.info("pool coordinator starting", extra={"pool": c.pool, "node": c.node, "host_ip": c.host_ip,
                                                         "port": c.port, "ops_ports": self.ops_ports})
            await install_pool_ca(client=self._client, namespace=c.namespace, pool=c.pool, ca_file=self.tls.ca_file,
                                  timeout_s=c.api_timeout_s)
            async with asyncio.TaskGroup() as tg:
                tg.create_task(self.serving.run(), name="serving-certificate")
                tg.create_task(self.root.run(), name="root-certificate")
                await self._issued.wait()
                log.info("pool coordinator certificates in place: starting etcd", extra={"pool": c.pool})
                tg.create_task(self.supervisor.run(), name="etcd")
                tg.create_task(self.probe.run(), name="etcd-probe")
                tg.create_task(self.members.run(), name="members")
                tg.create_task(self.janitor.run(), name="election-janitor")
                tg.create_task(self.quota.run(), name="write-quota")
                tg.create_task(self.upkeep.run(), name="store-upkeep")
                tg.create_task(self._open_to_the_pool(), name="open-to-the-pool")
                tg.create_task(self._follow_pool_ca(), name="pool-ca")

    async def _follow_pool_ca(self) -> None:
        """Every ``ca_refresh_s``: read the pool CA again; when it changed (a rotation: the bundle
        ``new + old``, then ``new``), write it and restart etcd, which loads its client CA pool only
        at start. A failed read keeps the CA in use (logged, counted) and is retried next time."""
        c = self.config
        while True:
            await asyncio.sleep(c.ca_refresh_s)
            try:
                pem = await read_pool_ca(client=self._client, namespace=c.namespace, pool=c.pool,
                                         timeout_s=c.api_timeout_s)
            except (ValueError, *API_ERRORS) as exc:
                self.metrics.ca_reads.labels("error").inc()
                log.warning("pool CA could not be read again (%s: %s); keeping the one in use",
                            type(exc).__name__, exc, extra={"pool": c.pool})
                continue
            if pem == self.tls.ca_file.read_bytes():
                self.metrics.ca_reads.labels("unchanged").inc()
                continue
            write_pool_ca(self.tls.ca_file, pem)
            self.metrics.ca_reads.labels("changed").inc()
            log.info("pool CA changed (%d certificate(s) now trusted): restarting etcd to load it",
                     pem.count(b"-----BEGIN"), extra={"pool": c.pool})
            await self.supervisor.restart("the pool CA changed")

"""``edgewatch controller``: leader election, the reconciler, and the ops endpoints (/healthz, /readyz,
/metrics) until SIGTERM.

Imports nothing of the agent (no etcd or gRPC client, no aiohttp): the Lease code both sides use is
in ``edgewatch.kube.leases``, logging in ``edgewatch.logs``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket

from prometheus_client import CollectorRegistry

from edgewatch.controller.carrywindow import CarryWindow
from edgewatch.controller.coordinators import CoordinatorManager
from edgewatch.controller.leader import ElectionConfig, LeaderElector
from edgewatch.controller.metrics import ControllerMetrics
from edgewatch.controller.model import ControllerConfig, UnknownPolicy
from edgewatch.controller.ops import serve_ops
from edgewatch.controller.observations import Observations
from edgewatch.controller.reconciler import Reconciler
from edgewatch.controller.standby import StandbyWatch
from edgewatch.controller.verified import VerifiedEdge
from edgewatch.kube.client import api_client
from edgewatch.kube.http import http_client_of
from edgewatch.logs import configure_logging
from edgewatch.metricsauth import MetricsGuard
from edgewatch.runtime import run_until_signalled
from edgewatch.timefmt import MonotonicClock

__all__ = ["EVIDENCE_TTL_S", "run_controller", "run_controller_async"]

#: A signed statement counts while its beacon is at most this old, seconds (the reconciler's default).
EVIDENCE_TTL_S = 30.0

log = logging.getLogger(__name__)


async def run_controller_async(*, kubeconfig: str | None, namespace: str, identity: str, config: ControllerConfig,
                               metrics_address: str, metrics_port: int, resync_s: float, workers: int,
                               api_timeout_s: float, election: ElectionConfig, own_pod: str | None = None) -> None:
    """Run until cancelled: serve the ops endpoints, campaign for the controller Lease
    ``namespace/edgewatch-controller``, reconcile while leading (all API calls with ``api_timeout_s``)."""
    client = api_client(kubeconfig, timeout_s=api_timeout_s, component="controller")
    registry = CollectorRegistry()
    metrics = ControllerMetrics(registry)
    http = http_client_of(client)  # who may read /metrics: asked of the apiserver (edgewatch.metricsauth)
    guard = MetricsGuard(http=http) if http is not None else None
    if guard is not None:
        registry.register(guard.collector)
    # A warm standby (edgewatch.controller.standby): while this replica does not lead it keeps the
    # node Leases' renewal sightings and the verified edge view; the reconciler starts from them.
    clock = MonotonicClock().now
    observations = Observations()
    verified = VerifiedEdge(ttl_s=EVIDENCE_TTL_S, on_result=lambda r: metrics.evidence.labels(result=r).inc())
    standby = StandbyWatch(client=client, observations=observations, verified=verified, clock=clock,
                           namespace=namespace, api_timeout_s=api_timeout_s)

    def leading_changed(leading: bool) -> None:
        metrics.leader.set(1 if leading else 0)
        standby.leading_changed(leading)

    elector = LeaderElector(client=client, namespace=namespace, name="edgewatch-controller", identity=identity,
                            config=election, on_change=leading_changed)

    async def work() -> None:
        # Both only while leading: the elector cancels this (and so both) when leadership ends.
        coordinators = CoordinatorManager(client=client, namespace=namespace, image=config.coordinator_image,
                                          own_pod=own_pod, metrics=metrics, api_timeout_s=api_timeout_s)
        async with asyncio.TaskGroup() as tg:
            tg.create_task(coordinators.run())
            # carries stay admitted for CARRY_WINDOW_S past the last move, then no longer (a liar
            # cannot carry a dead node through a long outage of every controller replica)
            tg.create_task(CarryWindow(client=client, namespace=namespace, api_timeout_s=api_timeout_s,
                                       on_clock=lambda readable: metrics.control_plane_clock.set(int(readable))).run())
            tg.create_task(Reconciler(client=client, config=config, metrics=metrics, namespace=namespace,
                                      resync_s=resync_s, workers=workers, api_timeout_s=api_timeout_s,
                                      evidence_ttl_s=EVIDENCE_TTL_S, clock=clock, observations=observations,
                                      verified=verified).run())

    try:
        with serve_ops(address=metrics_address, port=metrics_port, registry=registry,
                       ready=lambda: elector.reachable, guard=guard):
            async with asyncio.TaskGroup() as tg:
                tg.create_task(standby.run(), name="controller-standby")
                tg.create_task(elector.run(work), name="controller-election")
    finally:
        await client.close()


def run_controller(*, kubeconfig: str | None, namespace: str, identity: str | None, confirm: float,
                   edge_ttl: float, unknown_policy: str, autonomy: float, resync: float, workers: int,
                   api_timeout: float, metrics_address: str, metrics_port: int, log_level: str,
                   log_format: str, coordinator_image: str = "", pod_name: str | None = None,
                   node_monitor_grace: float = 40.0, challenge_timeout: float = 1.5) -> int:
    """Run the controller until SIGTERM; returns the exit code (2 for invalid settings).

    Durations in seconds; see ``edgewatch controller --help`` for each setting.
    """
    configure_logging(level=log_level, json_logs=log_format == "json")
    try:
        config = ControllerConfig(confirm_s=confirm, edge_view_ttl_s=edge_ttl,
                                  unknown_policy=UnknownPolicy(unknown_policy), autonomy_s=autonomy,
                                  coordinator_image=coordinator_image, node_monitor_grace_s=node_monitor_grace,
                                  challenge_timeout_s=challenge_timeout)
        if workers < 1:
            raise ValueError(f"--workers must be >= 1, got {workers}")
        if not api_timeout > 0:
            raise ValueError(f"--api-timeout must be > 0 seconds, got {api_timeout}")
    except ValueError as exc:
        log.error("invalid settings: %s", exc)
        return 2
    identity = identity or f"{socket.gethostname()}-{os.getpid()}"

    asyncio.run(run_until_signalled(run_controller_async(
        kubeconfig=kubeconfig, namespace=namespace, identity=identity, config=config,
        metrics_address=metrics_address, metrics_port=metrics_port, resync_s=resync, workers=workers,
        api_timeout_s=api_timeout, election=ElectionConfig(), own_pod=pod_name or None)))
    return 0

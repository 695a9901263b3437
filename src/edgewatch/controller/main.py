"""``edgewatch controller``: leader election, the reconciler, and the ops endpoints
(/healthz, /readyz, /metrics) until SIGTERM."""

from __future__ import annotations

import asyncio
import logging
import os
import socket

from aiohttp import web
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from edgewatch.agent.agent import configure_logging
from edgewatch.controller.decision import ControllerConfig, UnknownPolicy
from edgewatch.controller.leader import ElectionConfig, LeaderElector
from edgewatch.controller.metrics import ControllerMetrics
from edgewatch.controller.reconciler import Reconciler
from edgewatch.runtime import api_client, run_until_signalled

log = logging.getLogger(__name__)


async def serve_ops(*, address: str, port: int, registry: CollectorRegistry) -> web.AppRunner:
    """/healthz, /readyz and /metrics on ``address:port``."""

    async def ok(_req: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def metrics(_req: web.Request) -> web.Response:
        return web.Response(body=generate_latest(registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    app = web.Application()
    app.router.add_get("/healthz", ok)
    app.router.add_get("/readyz", ok)
    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, address, port).start()
    return runner


async def run_controller_async(*, kubeconfig: str | None, namespace: str, identity: str, config: ControllerConfig,
                               metrics_address: str, metrics_port: int, resync_s: float,
                               election: ElectionConfig) -> None:
    """Run until cancelled: campaign for the controller Lease, reconcile while leading."""
    client = api_client(kubeconfig)
    registry = CollectorRegistry()
    metrics = ControllerMetrics(registry)
    runner = await serve_ops(address=metrics_address, port=metrics_port, registry=registry)
    elector = LeaderElector(client=client, namespace=namespace, name="edgewatch-controller", identity=identity,
                            config=election, on_change=lambda leading: metrics.leader.set(1 if leading else 0))

    async def work() -> None:
        await Reconciler(client=client, config=config, metrics=metrics, resync_s=resync_s).run()

    try:
        await elector.run(work)
    finally:
        await runner.cleanup()
        await client.close()


def run_controller(*, kubeconfig: str | None, namespace: str, identity: str | None, confirm: float,
                   edge_ttl: float, unknown_policy: str, autonomy: float, resync: float, metrics_address: str,
                   metrics_port: int, log_level: str, log_format: str) -> int:
    """Run the controller until SIGTERM; returns the exit code (2 for invalid settings)."""
    configure_logging(level=log_level, json_logs=log_format == "json")
    try:
        config = ControllerConfig(confirm_s=confirm, edge_view_ttl_s=edge_ttl,
                                  unknown_policy=UnknownPolicy(unknown_policy), autonomy_s=autonomy)
    except ValueError as exc:
        log.error("invalid settings: %s", exc)
        return 2
    identity = identity or f"{socket.gethostname()}-{os.getpid()}"

    asyncio.run(run_until_signalled(run_controller_async(
        kubeconfig=kubeconfig, namespace=namespace, identity=identity, config=config,
        metrics_address=metrics_address, metrics_port=metrics_port, resync_s=resync, election=ElectionConfig())))
    return 0

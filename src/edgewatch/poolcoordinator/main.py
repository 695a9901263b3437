"""``edgewatch pool-coordinator``'s entry: logging, the arguments checked, the API client, and
:class:`edgewatch.poolcoordinator.coordinator.PoolCoordinator` until SIGTERM/SIGINT.

Exit codes: 0 after a signal, 1 when it stopped on an error, 2 for unusable arguments (no node
name or address, a port out of range, no etcd binary).
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import shutil
from pathlib import Path

from edgewatch.kube.client import api_client
from edgewatch.logs import configure_logging
from edgewatch.poolcoordinator.coordinator import CoordinatorConfig, PoolCoordinator
from edgewatch.runtime import run_until_signalled

__all__ = ["check_arguments", "run_pool_coordinator"]

log = logging.getLogger(__name__)


def check_arguments(*, pool: str, node: str | None, host_ip: str | None, port: int, ops_port: int,
                    etcd_binary: str | None) -> tuple[str | None, str]:
    """The etcd executable (``etcd_binary``, or ``etcd`` on PATH) and None if the arguments are
    usable, else ``(None, why not)``. Pure but for the PATH lookup."""
    if not pool:
        return None, "--pool must not be empty"
    if not node:
        return None, "the node name is unknown: set NODE_NAME (spec.nodeName) or --node"
    try:
        ipaddress.ip_address(host_ip or "")
    except ValueError:
        return None, f"the node address must be an IP address (HOST_IP, status.hostIP), got {host_ip!r}"
    if not 1 <= port <= 65532:
        return None, f"--port must be 1 .. 65532 (etcd also uses port+2 and port+3), got {port}"
    if not 0 <= ops_port <= 65535 or ops_port in (port, port + 2, port + 3):
        return None, f"--ops-port must be a free port other than {port}, {port + 2} and {port + 3}, got {ops_port}"
    binary = etcd_binary or shutil.which("etcd")
    if not binary or not Path(binary).is_file():
        return None, "no etcd binary: put etcd on PATH or pass --etcd-binary"
    return binary, ""


async def _serve(*, kubeconfig: str | None, config: CoordinatorConfig) -> None:
    client = api_client(kubeconfig, timeout_s=config.api_timeout_s, component="pool-coordinator")
    try:
        await PoolCoordinator(client=client, config=config).run()
    finally:
        await client.close()


def run_pool_coordinator(*, kubeconfig: str | None, pool: str, namespace: str, node: str | None,
                         host_ip: str | None, port: int, ops_port: int, data_dir: Path, etcd_binary: str | None,
                         api_timeout: float, log_level: str, log_format: str) -> int:
    """Run the pool coordinator until SIGTERM/SIGINT; the exit code (module docstring)."""
    configure_logging(level=log_level, json_logs=log_format == "json")
    binary, why = check_arguments(pool=pool, node=node, host_ip=host_ip, port=port, ops_port=ops_port,
                                  etcd_binary=etcd_binary)
    if binary is None:
        log.error("pool coordinator not started: %s", why)
        return 2
    assert node is not None and host_ip is not None
    config = CoordinatorConfig(pool=pool, namespace=namespace, node=node, host_ip=host_ip, port=port,
                               ops_port=ops_port, data_dir=data_dir, etcd_binary=binary, api_timeout_s=api_timeout)
    try:
        asyncio.run(run_until_signalled(_serve(kubeconfig=kubeconfig, config=config)))
    except Exception:
        log.exception("pool coordinator stopped on an error", extra={"pool": pool})
        return 1
    log.info("pool coordinator stopped", extra={"pool": pool})
    return 0

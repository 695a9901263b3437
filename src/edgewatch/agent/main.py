"""``edgewatch agent``: build the configuration from flags and run the agent until SIGTERM.

Invalid settings exit with code 2 and one log line saying what is wrong, never a traceback: a bad
flag, a ``--coordinator`` URL that is not ``http(s)://HOST[:PORT]``, or no way to reach the API
(no ``--kubeconfig``/``KUBECONFIG`` and not in a pod: the in-cluster ServiceAccount files under
/var/run/secrets/kubernetes.io/serviceaccount and ``KUBERNETES_SERVICE_HOST``/``PORT`` are
missing). A ``--state-dir`` that cannot be created is not fatal (the agent runs from memory and
says so; see ``edgewatch.agent.membership``).
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from edgewatch.agent.agent import Agent
from edgewatch.agent.cloudlink import CloudLinkConfig
from edgewatch.agent.config import AgentConfig
from edgewatch.agent.coordinator import CoordinatorError, CoordinatorTLS, parse_coordinator_url
from edgewatch.agent.peerserver import PeerServerConfig
from edgewatch.core.quorum import VoteConfig
from edgewatch.core.types import node_name
from edgewatch.kube.api import ConfigError
from edgewatch.logs import configure_logging
from edgewatch.names import DEFAULT_POOL_CACHE_PORT
from edgewatch.kube.client import api_client, cloud_endpoint
from edgewatch.runtime import run_until_signalled

log = logging.getLogger(__name__)


async def _run(config: AgentConfig, client: object, cloud: tuple[str, object] | None) -> None:
    try:
        await run_until_signalled(Agent(config=config, client=client, cloud_endpoint=cloud).run())  # type: ignore[arg-type]
    finally:
        await client.close()  # type: ignore[attr-defined]
    log.info("agent stopped")


def _client(kubeconfig: str | None) -> object | None:
    """The API client (in-cluster when ``kubeconfig`` is None), or None after logging why not."""
    try:
        return api_client(kubeconfig, component="agent")
    except KeyError as exc:
        log.error("cannot reach the API: no --kubeconfig and not in a pod (environment variable %s is not set); "
                  "give --kubeconfig or KUBECONFIG outside a cluster", exc)
    except ConfigError as exc:
        where = f"kubeconfig {kubeconfig}" if kubeconfig else \
            "the in-cluster ServiceAccount (is automountServiceAccountToken off?)"
        log.error("cannot reach the API: %s: %s", where, exc)
    except (OSError, ValueError) as exc:
        log.error("cannot reach the API: %s: %s", type(exc).__name__, exc)
    return None


def run_agent(*, node: str, identity_file: Path, kubeconfig: str | None, listen_address: str, port: int,
              namespace: str, kubelet_healthz_url: str, coordinator_url: str | None, pool: str | None,
              state_dir: Path | None, exchange_period: float, vote_ttl: float, probe_timeout: float,
              log_level: str, log_format: str, coordinator_ca: Path | None = None,
              coordinator_cert: Path | None = None, coordinator_key: Path | None = None,
              cloud_interval: float = 2.0, cloud_timeout: float = 2.0, cloud_down_after: int = 3,
              cloud_up_after: int = 2, pool_cache_address: str = "127.0.0.1",
              pool_cache_port: int = DEFAULT_POOL_CACHE_PORT, peer_request_timeout: float = 3.0,
              peer_idle_timeout: float = 30.0, peer_max_connections_per_source: int = 8,
              peer_max_stranger_connections: int = 64, coordinator_certificate: bool = False,
              peer_kubelet_port: int = 10250) -> int:
    """Run the agent; returns the exit code (2 for invalid settings). ``peer_kubelet_port``: the
    peers' kubelet server port checked before a silent neighbour is voted dead (0 = off;
    ``AgentConfig.peer_kubelet_port``)."""
    configure_logging(level=log_level, json_logs=log_format == "json")
    tls_files = (coordinator_ca, coordinator_cert, coordinator_key)
    if any(tls_files) and not all(tls_files):
        log.error("invalid settings: --coordinator-ca, --coordinator-cert and --coordinator-key go together")
        return 2
    try:
        tls = CoordinatorTLS(ca_file=coordinator_ca, cert_file=coordinator_cert, key_file=coordinator_key) \
            if all(tls_files) else None
        config = AgentConfig(node=node_name(node), identity_file=identity_file, kubeconfig=kubeconfig,
                             listen_address=listen_address, port=port, namespace=namespace,
                             kubelet_healthz_url=kubelet_healthz_url, coordinator_url=coordinator_url, pool=pool,
                             state_dir=state_dir, probe_timeout_s=probe_timeout, peer_kubelet_port=peer_kubelet_port,
                             votes=VoteConfig(exchange_period_s=exchange_period, vote_ttl_s=vote_ttl),
                             cloud_link=CloudLinkConfig(interval_s=cloud_interval, timeout_s=cloud_timeout,
                                                        down_after=cloud_down_after, up_after=cloud_up_after),
                             coordinator_tls=tls, pool_cache_address=pool_cache_address,
                             pool_cache_port=pool_cache_port, coordinator_client_certificate=coordinator_certificate,
                             server=PeerServerConfig(request_timeout_s=peer_request_timeout,
                                                     idle_timeout_s=peer_idle_timeout,
                                                     max_connections_per_source=peer_max_connections_per_source,
                                                     max_stranger_connections=peer_max_stranger_connections))
    except ValueError as exc:
        log.error("invalid settings: %s", exc)
        return 2
    if coordinator_url is not None:
        try:
            parse_coordinator_url(coordinator_url)
        except CoordinatorError as exc:
            log.error("invalid settings: --coordinator: %s", exc)
            return 2
    client = _client(kubeconfig)
    if client is None:
        return 2
    cloud = cloud_endpoint(kubeconfig)  # the pool cache forwards what it does not cache there
    asyncio.run(_run(config, client, cloud))
    return 0

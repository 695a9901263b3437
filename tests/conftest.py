"""Shared fixtures: the real control plane (session-scoped) and API clients.

The binaries are built on first use (cached in ~/.cache/edgewatch) or taken from
KUBEBUILDER_ASSETS; see edgewatch_lab.testing.binaries.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from collections.abc import AsyncIterator, Iterator

import pytest

from edgewatch_lab.testing.binaries import Binaries, ensure_binaries
from edgewatch_lab.testing.controlplane import ClusterTimings, ControlPlane
from edgewatch_lab.testing.etcd import EtcdServer
from edgewatch_lab.testing.kubeletsim import make_client

TEST_TIMINGS = ClusterTimings(node_monitor_grace_s=20, node_monitor_period_s=2,
                              not_ready_toleration_s=30, unreachable_toleration_s=30)


@pytest.fixture(scope="session")
def binaries() -> Binaries:
    """The control-plane binaries (built once per machine)."""
    return ensure_binaries()


@pytest.fixture(scope="session")
def control_plane(binaries: Binaries) -> Iterator[ControlPlane]:
    """One control plane for the session on 127.0.0.1, at the short test timings."""
    with ControlPlane(binaries=binaries, timings=TEST_TIMINGS) as cp:
        yield cp


@pytest.fixture
def metrics_token(control_plane: ControlPlane) -> str:
    """A token of the shipped scraper ServiceAccount (deploy/13-rbac-metrics.yaml applied with its
    namespace): what may read edgewatch's /metrics."""
    deploy = Path(__file__).resolve().parents[1] / "deploy"
    control_plane.kubectl("apply", "-f", str(deploy / "00-namespace.yaml"), "-f", str(deploy / "13-rbac-metrics.yaml"))
    return control_plane.kubectl("create", "token", "edgewatch-metrics-scraper", "--namespace", "edgewatch").strip()


@pytest.fixture
async def kube(control_plane: ControlPlane) -> AsyncIterator:
    """An admin lightkube AsyncClient for the session control plane (one per test)."""
    assert control_plane.kubeconfig is not None
    client = make_client(str(control_plane.kubeconfig), timeout_s=10)
    try:
        yield client
    finally:
        await client.close()


@pytest.fixture
async def etcd(binaries: Binaries) -> AsyncIterator[EtcdServer]:
    """A real single-member etcd on loopback (a pool coordinator), removed after the test."""
    server = EtcdServer(binary=binaries.etcd)
    try:
        await asyncio.to_thread(server.start)
        yield server
    finally:
        await asyncio.to_thread(server.cleanup)

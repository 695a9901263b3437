"""A real kube-proxy (nftables mode) in a lab node's network namespace, fed by the real control
plane: it programs a ClusterIP Service's endpoints and follows EndpointSlice changes, and
changes nothing outside its namespace.

The session control plane listens on 127.0.0.1 of the root namespace; the node namespace (a
NetLab host, so it is removed after the test, also after a failure or a crash) reaches it through
a ``NetnsTcpRelay`` on the namespace's own 127.0.0.1 — the same shape as an edgewatch agent
serving the API on the node's loopback. kube-proxy authenticates with a ServiceAccount bearer
token (``system:node-proxier``).
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from lightkube.models.core_v1 import NodeAddress, NodeStatus, ServicePort, ServiceSpec
from lightkube.models.discovery_v1 import Endpoint, EndpointConditions, EndpointPort
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Namespace, Node, Service
from lightkube.resources.discovery_v1 import EndpointSlice

from edgewatch_lab.testing.controlplane import ControlPlane
from edgewatch_lab.testing.kubeproxy import KubeProxy, NetnsTcpRelay, kube_proxy_credentials
from edgewatch_lab.testing.netlab import Host, NetLab

pytestmark = [pytest.mark.root, pytest.mark.controlplane]

_HOST_SYSCTLS = ("/proc/sys/net/netfilter/nf_conntrack_max", "/proc/sys/net/netfilter/nf_conntrack_tcp_timeout_established",
                 "/proc/sys/net/netfilter/nf_conntrack_tcp_timeout_close_wait",
                 "/proc/sys/net/netfilter/nf_conntrack_tcp_be_liberal", "/proc/sys/net/ipv4/conf/all/route_localnet",
                 "/sys/module/nf_conntrack/parameters/hashsize")


def _read_host_values() -> dict[str, str]:
    values = {}
    for path in _HOST_SYSCTLS:
        try:
            values[path] = Path(path).read_text().strip()
        except OSError:
            values[path] = "(absent)"
    return values


@pytest.fixture
def node_host() -> Iterator[Host]:
    """One lab host (its own network namespace), removed after the test whatever happens."""
    with NetLab.create() as lab:
        yield lab.add_host("kp-1", pool="kp")


def _slice(name: str, ns: str, service: str, addresses: list[str]) -> EndpointSlice:
    return EndpointSlice(
        metadata=ObjectMeta(name=name, namespace=ns, labels={
            "kubernetes.io/service-name": service, "endpointslice.kubernetes.io/managed-by": "test"}),
        addressType="IPv4",
        endpoints=[Endpoint(addresses=[a], conditions=EndpointConditions(ready=True)) for a in addresses],
        ports=[EndpointPort(name="http", port=8080, protocol="TCP")])


async def test_kube_proxy_programs_and_follows_endpointslices(control_plane: ControlPlane, kube, node_host: Host,
                                                              tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    suffix = secrets.token_hex(3)
    ns, node_name, svc = f"kp-{suffix}", f"kp-node-{suffix}", "web"
    assert control_plane.ca_file is not None
    api = urlsplit(control_plane.apiserver_url)
    host_before = _read_host_values()
    await kube.create(Namespace(metadata=ObjectMeta(name=ns)))
    await kube.create(Node(metadata=ObjectMeta(name=node_name, labels={"kubernetes.io/hostname": node_name}),
                           status=NodeStatus(addresses=[NodeAddress(type="InternalIP", address=node_host.address)])))
    try:
        created = await kube.create(Service(metadata=ObjectMeta(name=svc, namespace=ns), spec=ServiceSpec(
            ports=[ServicePort(name="http", port=80, targetPort=8080, protocol="TCP")])))
        cluster_ip = created.spec.clusterIP
        await kube.create(_slice(f"{svc}-a", ns, svc, ["10.244.1.10"]))
        async with NetnsTcpRelay(netns=node_host.netns, target_host=api.hostname or "127.0.0.1",
                                 target_port=api.port or 443) as relay:
            kubeconfig = tmp_path / "kube-proxy.kubeconfig"
            await kube_proxy_credentials(client=kube, server_url=f"https://127.0.0.1:{relay.port}",
                                         ca_pem=control_plane.ca_file.read_bytes(), path=kubeconfig)
            async with KubeProxy(netns=node_host.netns, node_name=node_name, kubeconfig=kubeconfig,
                                 work_dir=tmp_path / "kube-proxy", node_ip=node_host.address) as proxy:
                await proxy.wait_ready(timeout_s=90)
                key = f"{ns}/{svc}:http"
                await proxy.wait_backends(key, {"10.244.1.10:8080"}, timeout_s=60)
                ruleset = await proxy.ruleset()
                assert cluster_ip in ruleset, "the ClusterIP is in the service-ips map"

                # One endpoint more ...
                eps = await kube.get(EndpointSlice, f"{svc}-a", namespace=ns)
                eps.endpoints.append(Endpoint(addresses=["10.244.2.20"], conditions=EndpointConditions(ready=True)))
                await kube.replace(eps)
                await proxy.wait_backends(key, {"10.244.1.10:8080", "10.244.2.20:8080"}, timeout_s=60)
                # ... one less; a not-ready endpoint is no backend ...
                eps = await kube.get(EndpointSlice, f"{svc}-a", namespace=ns)
                eps.endpoints = [Endpoint(addresses=["10.244.2.20"], conditions=EndpointConditions(ready=True)),
                                 Endpoint(addresses=["10.244.3.30"], conditions=EndpointConditions(ready=False))]
                await kube.replace(eps)
                await proxy.wait_backends(key, {"10.244.2.20:8080"}, timeout_s=60)
                # ... and a second slice of the same Service adds to it.
                await kube.create(_slice(f"{svc}-b", ns, svc, ["10.244.4.40"]))
                await proxy.wait_backends(key, {"10.244.2.20:8080", "10.244.4.40:8080"}, timeout_s=60)
                # Session affinity takes the other path (per-endpoint chains behind a vmap).
                await kube.create(Service(metadata=ObjectMeta(name="sticky", namespace=ns), spec=ServiceSpec(
                    sessionAffinity="ClientIP", ports=[ServicePort(name="http", port=80, targetPort=8080)])))
                await kube.create(_slice("sticky-a", ns, "sticky", ["10.244.5.50", "10.244.6.60"]))
                await proxy.wait_backends(f"{ns}/sticky:http", {"10.244.5.50:8080", "10.244.6.60:8080"},
                                          timeout_s=60)
                assert (await proxy.service_backends())[key] == {"10.244.2.20:8080", "10.244.4.40:8080"}

                assert "kube-proxy" not in _root_tables(), "no kube-proxy table in the root namespace"
                assert _read_host_values() == host_before, "host-wide sysctls unchanged"
                assert "Setting nf_conntrack_max" not in proxy.log_path.read_text()
    finally:
        await kube.delete(Namespace, ns)
        await kube.delete(Node, node_name)


def _root_tables() -> str:
    import subprocess

    return subprocess.run(["nft", "list", "tables"], capture_output=True, text=True, timeout=10).stdout

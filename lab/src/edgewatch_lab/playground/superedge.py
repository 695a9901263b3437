"""SuperEdge v0.9.0's edge-health in the playground (``--system superedge``, docs/peers.md): its manifests,
as its own ``deployment/`` says, rendered for one lab.

What runs: the ``edge-health`` DaemonSet (one hostNetwork pod per node that takes it: the edge
nodes and any cloud worker; ``cloud-1`` is tainted) and the ``edge-health-admission`` mutating
webhook (a hostNetwork pod on ``cloud-1``, called by kube-apiserver at that node's address with a
serving certificate from a CA the lab makes). The lab's kubelet simulator runs both images'
binaries (``hack/binaries/build.sh superedge``) as it runs edgewatch's. Every change from
upstream's manifests is marked in ``peers/superedge.yaml`` with its reason.

SuperEdge's verdict is the node annotation ``nodeunhealth: yes`` (written by the edge-health pods'
vote, removed when the majority sees the node healthy again); the webhook then keeps
kube-controller-manager's ``node.kubernetes.io/unreachable:NoExecute`` taint off a node whose
Ready is Unknown and that carries no such annotation (so its pods are not evicted), and moves its
pods' addresses back into v1 Endpoints' ready addresses. What edge-health's flags set is
overwritten by its defaults at start-up (``options.Complete``): results are exchanged every 60 s,
a received result counts for 60 s, checks and votes run every 10 s, whatever the scenario's timings.

Limits: edge-health binds the host port 51005, which edgewatch's agent also uses, so the two never
run in one lab (a superedge run installs no edgewatch). Its binaries are statically linked Go, so
a scenario's clock skew (libfaketime) does not reach them.
"""

from __future__ import annotations

import asyncio
import base64
import secrets
from pathlib import Path
from string import Template
from typing import Final

from lightkube import AsyncClient
from lightkube.resources.apps_v1 import DaemonSet, Deployment

from edgewatch_lab.testing.pki import CertificateAuthority
from edgewatch_lab.testing.smoke import wait_for

#: The images as upstream names them (the lab runs them from the built binaries).
REGISTRY: Final = "superedge.tencentcloudcr.com/superedge"
VERSION: Final = "v0.9.0"
EDGE_HEALTH_IMAGE: Final = f"{REGISTRY}/edge-health:{VERSION}"
ADMISSION_IMAGE: Final = f"{REGISTRY}/edge-health-admission:{VERSION}"
#: What the kubelet simulator runs of SuperEdge (an image whose name starts with it).
IMAGE_PREFIX: Final = f"{REGISTRY}/"
NAMESPACE: Final = "edge-system"
#: The node annotation of SuperEdge's verdict, and its value for "unhealthy".
UNHEALTHY_ANNOTATION: Final = "nodeunhealth"
UNHEALTHY_VALUE: Final = "yes"
#: The webhook's port on the control-plane node's address (upstream's default, 8443).
ADMISSION_PORT: Final = 8443
#: What edge-health's flags cannot change (``options.Complete`` applies these after parsing), in
#: seconds: the result exchange period, a received result's lifetime, the check and vote periods.
EFFECTIVE_PERIODS_S: Final = {"communicate": 60, "result_valid": 60, "check": 10, "vote": 10}


def manifests_template() -> str:
    """The manifests with their ``${...}`` placeholders (``peers/superedge.yaml``)."""
    return (Path(__file__).parent / "peers" / "superedge.yaml").read_text()


def render(*, folder: Path, address: str, hmac_key: str | None = None) -> str:
    """The manifests for one lab: a CA and the webhook's serving certificate (for ``address``, the
    control-plane node's, where kube-apiserver calls it) are made in ``folder``; ``hmac_key`` (default:
    random) is the key the edge-health pods sign their results with.

    Raises:
        OSError: ``folder`` cannot be written.
    """
    folder.mkdir(parents=True, exist_ok=True)
    ca = CertificateAuthority(folder=folder, common_name="superedge-lab-ca")
    pair = ca.issue(name="edge-health-admission", common_name="edge-health-admission",
                    ip_addresses=(address,), server=True)

    def b64(path: Path) -> str:
        return base64.b64encode(path.read_bytes()).decode()

    return Template(manifests_template()).substitute(
        edge_health_image=EDGE_HEALTH_IMAGE, admission_image=ADMISSION_IMAGE,
        hmac_key=hmac_key or secrets.token_hex(16), server_crt=b64(pair.cert), server_key=b64(pair.key),
        ca_bundle=b64(ca.pair.cert), listen_address=f"{address}:{ADMISSION_PORT}")


def node_state(annotations: dict[str, str], ready: str) -> str:
    """A node's state in a superedge run: ``unhealthy`` while SuperEdge's verdict annotation says
    so, else ``normal`` while Ready is True, else ``not_ready`` (pure)."""
    if annotations.get(UNHEALTHY_ANNOTATION) == UNHEALTHY_VALUE:
        return "unhealthy"
    return "normal" if ready == "True" else "not_ready"


async def wait_running(client: AsyncClient, *, nodes: int, timeout_s: float) -> None:
    """Wait until the ``edge-health`` DaemonSet has a Ready pod on each of ``nodes`` nodes and the
    webhook's pod is Ready, then for edge-health's first exchange of results (its fixed period,
    60 s, plus one vote: until then its vote does nothing), so a scenario starts on SuperEdge in
    its steady state as it starts on edgewatch in its own.

    Raises:
        TimeoutError: not running within ``timeout_s`` seconds.
    """

    async def running() -> bool:
        ds = await client.get(DaemonSet, "edge-health", namespace=NAMESPACE)
        dep = await client.get(Deployment, "edge-health-admission", namespace=NAMESPACE)
        return (ds.status is not None and ds.status.numberReady == nodes
                and dep.status is not None and (dep.status.readyReplicas or 0) >= 1)

    await wait_for(running, timeout_s=timeout_s,
                   what="every edge-health pod Ready and the edge-health-admission webhook Ready")
    await asyncio.sleep(EFFECTIVE_PERIODS_S["communicate"] + EFFECTIVE_PERIODS_S["vote"])

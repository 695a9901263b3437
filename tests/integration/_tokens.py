"""Real ServiceAccount tokens on a test control plane: kubeconfigs holding one token, pods that bind
a token to a node, the wait for an earlier module's namespaces to be gone, and the controller
running in-process with its own token."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import subprocess
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import yaml
from prometheus_client import CollectorRegistry

from edgewatch.controller.metrics import ControllerMetrics
from edgewatch.controller.model import ControllerConfig
from edgewatch.controller.reconciler import Reconciler
from edgewatch.kube.client import api_client
from edgewatch_lab.testing.controlplane import ControlPlane


@dataclass(frozen=True)
class Token:
    """kubectl as one real token (a kubeconfig with the CA, the server and only that token)."""

    label: str
    kubeconfig: Path
    kubectl_bin: Path

    def run(self, *args: str, input_text: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(self.kubectl_bin), f"--kubeconfig={self.kubeconfig}", *args],
                              capture_output=True, text=True, timeout=30, input=input_text)


def write_kubeconfig(cp: ControlPlane, folder: Path, label: str, token: str) -> Path:
    """Write ``<folder>/<label>.kubeconfig``: the control plane's server and CA, and only ``token``."""
    assert cp.ca_file is not None
    path = folder / f"{label}.kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "cp", "cluster": {
            "server": cp.apiserver_url,
            "certificate-authority-data": base64.b64encode(cp.ca_file.read_bytes()).decode()}}],
        "users": [{"name": label, "user": {"token": token}}],
        "contexts": [{"name": "cp", "context": {"cluster": "cp", "user": label}}],
        "current-context": "cp",
    }))
    return path


def kubectl_as(cp: ControlPlane, folder: Path, label: str, token: str) -> Token:
    """kubectl as ``token`` (its kubeconfig written into ``folder``)."""
    assert cp.ca_file is not None and cp.binaries is not None
    return Token(label=label, kubeconfig=write_kubeconfig(cp, folder, label, token), kubectl_bin=cp.binaries.kubectl)


def pod_bound_token(cp: ControlPlane, *, pod: str, account: str, node: str = "n1", container: str = "main") -> str:
    """Create Pod ``pod`` (namespace edgewatch) of ``account`` on ``node``; a token bound to it."""
    cp.kubectl("apply", "-f", "-", input_text=json.dumps({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": pod, "namespace": "edgewatch"},
        "spec": {"nodeName": node, "serviceAccountName": account, "tolerations": [{"operator": "Exists"}],
                 "containers": [{"name": container, "image": "ghcr.io/edgewatch/edgewatch:0.1.0"}]}}))
    uid = cp.kubectl("get", "pod", pod, "-n", "edgewatch", "-o", "jsonpath={.metadata.uid}")
    return cp.kubectl("create", "token", account, "-n", "edgewatch", "--bound-object-kind=Pod",
                      f"--bound-object-name={pod}", f"--bound-object-uid={uid}").strip()


def wait_namespaces_settled(cp: ControlPlane, namespaces: tuple[str, ...] = ("edgewatch", "edgewatch-nodes"),
                            timeout_s: float = 120) -> None:
    """Wait until none of ``namespaces`` is Terminating (another module's delete may still be under way)."""
    deadline = time.monotonic() + timeout_s
    for ns in namespaces:
        while cp.kubectl("get", "namespace", ns, "--ignore-not-found", "-o", "jsonpath={.status.phase}") \
                == "Terminating":
            assert time.monotonic() < deadline, f"namespace {ns} still terminating"
            time.sleep(0.5)


@contextlib.asynccontextmanager
async def running_reconciler(kubeconfig: Path) -> AsyncIterator[Reconciler]:
    """The whole controller (the Reconciler) running in-process with the credentials of ``kubeconfig``."""
    client = api_client(str(kubeconfig), timeout_s=10, component="controller")
    reconciler = Reconciler(client=client, config=ControllerConfig(),
                            metrics=ControllerMetrics(CollectorRegistry()), namespace="edgewatch")
    task = asyncio.create_task(reconciler.run())
    try:
        yield reconciler
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await client.close()

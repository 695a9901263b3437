"""Control-plane smoke check: the real binaries, two simulated nodes, a Deployment behind a
Service, and the proof that each part did its job (scheduler bound the pods, the simulated kubelets
ran them, the EndpointSlice controller published them).

It is what ``make demo`` runs until the playground's scenarios land.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

import httpx2 as httpx
from lightkube import ApiError, AsyncClient
from lightkube.resources.core_v1 import Node, Pod
from lightkube.resources.discovery_v1 import EndpointSlice
from rich.console import Console
from rich.table import Table

from edgewatch_lab.testing.controlplane import ControlPlane
from edgewatch_lab.testing.kubeletsim import KubeletFleet, KubeletSimConfig, SimNode, make_client
from edgewatch_lab.testing.workload import sample_deployment, sample_service


async def wait_for(predicate, *, timeout_s: float, interval_s: float = 0.5, what: str,  # type: ignore[no-untyped-def]
                   explain=None):
    """Poll the async ``predicate`` until it returns a truthy value; return that value.

    A transport error inside ``predicate`` (a request timeout while the one machine is busy
    starting dozens of nodes) counts as "not yet" and is polled again; it is re-raised only once
    the deadline has passed, so a dead apiserver still fails the wait with its real cause.

    ``explain``, an optional async callable returning a string, is awaited once on timeout (for at
    most 30 s; its own failure is named instead) and its answer ends the message: what the wait
    was missing (``edgewatch_lab.testing.diagnose``).

    Raises:
        TimeoutError: not true within ``timeout_s`` seconds (the message names ``what``, and what
            ``explain`` found).
        httpx.TransportError: the last poll's error, when polls were still failing at the deadline.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            value = await predicate()
        except httpx.TransportError:
            if time.monotonic() > deadline:
                raise
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout_s} s waiting for {what}"
                               + (f": {await _explanation(explain)}" if explain is not None else ""))
        await asyncio.sleep(interval_s)


async def _explanation(explain) -> str:  # type: ignore[no-untyped-def]
    try:
        async with asyncio.timeout(30):
            return str(await explain())
    except Exception as exc:  # noqa: BLE001 - the message of a failure being raised; never mask it
        return f"(no account: {type(exc).__name__}: {exc})"


async def create_until_done(client: AsyncClient, obj, *, timeout_s: float):  # type: ignore[no-untyped-def]
    """Create ``obj``, retrying transport errors (timeouts under load) for up to ``timeout_s`` seconds.

    A create whose response was lost may have been applied, so the retry's 409 AlreadyExists
    counts as done (the lab creates each object under a name of its own, once).

    Raises:
        httpx.TransportError: still failing at the deadline.
        lightkube.ApiError: any refusal other than AlreadyExists.
    """
    async def attempt() -> bool:
        try:
            await client.create(obj)
        except ApiError as exc:
            if exc.status.code != 409:
                raise
        return True

    what = f"creating {type(obj).__name__} {obj.metadata.name if obj.metadata else ''}"
    return await wait_for(attempt, timeout_s=timeout_s, interval_s=1.0, what=what)


async def ready_endpoints(client: AsyncClient, *, namespace: str, service: str) -> list[str]:
    """Names of the pods that are ready endpoints of ``service`` (from its EndpointSlices)."""
    names = []
    async for sl in client.list(EndpointSlice, namespace=namespace,
                                labels={"kubernetes.io/service-name": service}):
        for ep in sl.endpoints or []:
            if ep.conditions and ep.conditions.ready and ep.targetRef is not None:
                names.append(ep.targetRef.name)
    return sorted(names)


async def _smoke(cp: ControlPlane, console: Console, keep_seconds: float) -> None:
    assert cp.kubeconfig is not None
    client = make_client(str(cp.kubeconfig), timeout_s=5)
    nodes = [SimNode(name=f"smoke-{i}", address="127.0.0.1", index=i) for i in (1, 2)]
    fleet = KubeletFleet(client=client, nodes=nodes, config=KubeletSimConfig(healthz_port=None))
    async with asyncio.TaskGroup() as tg:
        runner = tg.create_task(fleet.run())
        try:
            await fleet.registered.wait()
            await client.create(sample_service(namespace="default"))
            await client.create(sample_deployment(namespace="default", replicas=4))

            async def all_ready() -> list[str]:
                eps = await ready_endpoints(client, namespace="default", service="sample")
                return eps if len(eps) == 4 else []

            endpoints = await wait_for(all_ready, timeout_s=60, what="4 ready endpoints")
            table = Table(title="edgewatch smoke check: real control plane, simulated kubelets")
            for col in ("pod", "node", "phase", "ready endpoint"):
                table.add_column(col)
            async for pod in client.list(Pod, namespace="default"):
                table.add_row(pod.metadata.name, pod.spec.nodeName, pod.status.phase,
                              "yes" if pod.metadata.name in endpoints else "no")
            console.print(table)
            node_names = [n.metadata.name async for n in client.list(Node)]
            console.print(f"nodes: {', '.join(sorted(node_names))}; apiserver {cp.apiserver_url}")
            if keep_seconds:
                console.print(f"kubeconfig: {cp.kubeconfig} (up for {keep_seconds:g} s)")
                await asyncio.sleep(keep_seconds)
        finally:
            runner.cancel()
    with contextlib.suppress(Exception):
        await client.close()


def run_smoke(*, keep_seconds: float = 0.0) -> int:
    """Run the smoke check; returns a process exit code (0 = every part worked)."""
    console = Console()
    with console.status("starting etcd, kube-apiserver, kube-controller-manager, kube-scheduler"):
        cp = ControlPlane().start()
    try:
        asyncio.run(_smoke(cp, console, keep_seconds))
    except TimeoutError as exc:
        console.print(f"[red]smoke check failed:[/red] {exc}")
        return 1
    finally:
        cp.stop()
    console.print("[green]smoke check passed[/green]")
    return 0

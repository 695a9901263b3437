"""``edgewatch status``: every node's pool, whether edgewatch covers it, its heartbeat, its edge verdict,
the state the controller recorded, delegate, coordinator role, taints and age, from what the API
shows (any kubeconfig that reads Nodes, Leases and the edgewatch-config ConfigMap). ``-o json``
prints the same for scripts.

What it does not do: judge freshness. A one-shot command has not watched anything change, and the
Lease's renewTime and the verdict's times were written with other machines' clocks, which must never
be compared with ours (docs/clock-skew.md). So HEARTBEAT says *who* renewed the Lease last (``own``,
``delegated`` by a peer, ``held`` by the controller's autonomy hold, ``none``) and EDGE what the peers
last published; whether either is fresh is the controller's call, whose verdict is STATE (the
``edgewatch.io/state`` annotation). COVERED is from the ConfigMap's ``coverLabel`` (``?`` when it cannot
be read); a node that is not covered gets stock Kubernetes behaviour.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from rich.console import Console
from rich.table import Table

from edgewatch.controller.coverage import CONFIGMAP_NAME, Coverage
from edgewatch.controller.model import STATE_ANNOTATION
from edgewatch.kube.api import ApiError, AsyncClient, ConfigMap, Lease, Node
from edgewatch.kube.errors import is_not_found
from edgewatch.kube.leases import is_marked, lease_renew_text
from edgewatch.names import (
    DEFAULT_GROUP_LABEL,
    DELEGATED_BY_ANNOTATION,
    DELEGATED_VIA_ANNOTATION,
    EDGE_CONDITION_TYPE,
    NODE_LEASE_NAMESPACE,
    POOL_LABEL,
    ROLE_CONDITION_TYPE,
)
from edgewatch.kube.client import api_client

__all__ = ["collect", "heartbeat_of", "render", "role_of", "run_status"]

_EDGE = {"True": "healthy", "False": "unhealthy"}


def role_of(node: Node) -> str | None:
    """The node's pool-coordinator role and the coordinator's state as its agent sees it, from its
    ``EdgePoolCoordinator`` condition: ``leader/ready``, ``follower/healthy`` (reachable, pool cache
    not synced), ``pending/unreachable`` (None: no coordinator)."""
    for cond in (node.status.conditions or []) if node.status else []:
        if cond.type == ROLE_CONDITION_TYPE:
            role = (cond.reason or "").lower()
            state = (cond.message or "").rsplit("coordinator ", 1)[-1].strip() if "coordinator " in (
                cond.message or "") else ""
            if not role:
                return None
            return f"{role}/{state}" if state in ("ready", "healthy", "unreachable") else role
    return None


def heartbeat_of(lease: Lease | None) -> str:
    """Who renewed the Lease last: ``own`` (the node), ``delegated`` (a peer, current mark), ``held``
    (the controller's autonomy hold) or ``none`` (no Lease or no renewal). Judges no time."""
    if lease is None or lease_renew_text(lease) is None:
        return "none"
    if not is_marked(lease):
        return "own"
    via = (lease.metadata.annotations or {}).get(DELEGATED_VIA_ANNOTATION)
    return "held" if via == "autonomy" else "delegated"


def _age(seconds: float) -> str:
    if seconds < 120:
        return f"{int(seconds)}s"
    if seconds < 7200:
        return f"{int(seconds // 60)}m"
    return f"{int(seconds // 3600)}h"


async def _coverage(client: AsyncClient, namespace: str) -> Coverage | None:
    """The coverage in force (None if the ConfigMap cannot be read or is invalid)."""
    coverage = Coverage()
    try:
        cm = await client.get(ConfigMap, CONFIGMAP_NAME, namespace=namespace)
    except ApiError as exc:
        return coverage if is_not_found(exc) else None
    try:
        coverage.apply(cm.data or {})
    except ValueError:
        return None
    return coverage


async def collect(client: AsyncClient, *, namespace: str = "edgewatch") -> list[dict[str, Any]]:
    """One row per node, as plain data (what ``-o json`` prints). ``namespace``: where the
    edgewatch-config ConfigMap lives. Raises API errors."""
    coverage = await _coverage(client, namespace)
    leases = {lease.metadata.name: lease async for lease in client.list(Lease, namespace=NODE_LEASE_NAMESPACE)}
    now = time.time()
    rows = []
    async for node in client.list(Node):
        name = node.metadata.name
        lease = leases.get(name)
        labels = node.metadata.labels or {}
        annotations = node.metadata.annotations or {}
        lease_ann = (lease.metadata.annotations or {}) if lease is not None else {}
        covered = None if coverage is None else coverage.covers(labels)
        heartbeat = heartbeat_of(lease)
        delegate = None
        if heartbeat in ("delegated", "held"):
            delegate = f"{lease_ann.get(DELEGATED_BY_ANNOTATION, '?')} ({lease_ann.get(DELEGATED_VIA_ANNOTATION, '?')})"
        edge, edge_message = "unknown", ""
        for cond in (node.status.conditions or []) if node.status else []:
            if cond.type == EDGE_CONDITION_TYPE:
                edge, edge_message = _EDGE.get(cond.status, "unknown"), cond.message or ""
        ours = ("edgewatch.io/", "node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready")
        taints = [f"{t.key}:{t.effect}" for t in (node.spec.taints or [] if node.spec else [])
                  if t.key.startswith(ours)]
        created = node.metadata.creationTimestamp
        rows.append({
            "node": name,
            "pool": labels.get(POOL_LABEL) or labels.get(DEFAULT_GROUP_LABEL) or "",
            "covered": covered,
            "heartbeat": heartbeat,
            "renew_time": None if lease is None else lease_renew_text(lease),
            "edge": edge,
            "edge_message": edge_message,
            "state": annotations.get(STATE_ANNOTATION, "normal") if covered is not False else None,
            "delegate": delegate,
            "role": role_of(node),
            "taints": taints,
            "age_s": round(now - created.timestamp(), 1) if created else None,
        })
    return sorted(rows, key=lambda r: (r["pool"], r["node"]))


def render(rows: list[dict[str, Any]], console: Console) -> None:
    """Print the rows as a table."""
    table = Table(box=None, header_style="bold")
    for col in ("NODE", "POOL", "COVERED", "HEARTBEAT", "EDGE", "STATE", "DELEGATE", "ROLE", "TAINTS", "AGE"):
        table.add_column(col)
    colour = {"normal": "green", "disconnected": "yellow", "failed": "red", "unknown": "magenta"}
    for r in rows:
        state = r["state"]
        covered = {True: "yes", False: "no", None: "?"}[r["covered"]]
        shown = "-" if state is None else f"[{colour.get(state, 'white')}]{state}[/]"
        table.add_row(r["node"], r["pool"] or "-", covered, r["heartbeat"], r["edge"], shown, r["delegate"] or "-",
                      r["role"] or "-", ",".join(r["taints"]) or "-",
                      _age(r["age_s"]) if r["age_s"] is not None else "-")
    console.print(table)


def run_status(*, kubeconfig: str | None, namespace: str = "edgewatch", output: str) -> int:
    """``edgewatch status``; returns the exit code."""
    async def main() -> list[dict[str, Any]]:
        client = api_client(kubeconfig, component="status")
        try:
            async with asyncio.timeout(60):  # each request has its own 5 s; the whole listing this
                return await collect(client, namespace=namespace)
        finally:
            await client.close()

    rows = asyncio.run(main())
    if output == "json":
        print(json.dumps(rows, indent=2))
    else:
        render(rows, Console())
    return 0

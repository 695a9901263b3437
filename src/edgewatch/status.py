"""``edgewatch status``: every node's pool, cloud view, edge view, state, delegate, coordinator
role, taints and age, from what the API shows (any kubeconfig with read access to Nodes and
Leases). ``-o json`` prints the same for scripts.

The state column is what the controller last recorded (annotation ``edgewatch.io/state``); the
cloud and edge views are computed here from the Lease and the EdgeHealthy condition with the
controller's default settings, so they show the evidence even when the controller is down.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from lightkube import AsyncClient
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import Node
from rich.console import Console
from rich.table import Table

from edgewatch.agent.delegation import is_marked
from edgewatch.controller.decision import ControllerConfig, plan
from edgewatch.controller.snapshots import lease_snapshot, node_snapshot
from edgewatch.runtime import api_client
from edgewatch.names import (
    DEFAULT_GROUP_LABEL,
    DELEGATED_BY_ANNOTATION,
    DELEGATED_VIA_ANNOTATION,
    NODE_LEASE_NAMESPACE,
    POOL_LABEL,
    ROLE_CONDITION_TYPE,
)

STATE_ANNOTATION = "edgewatch.io/state"


def role_of(node: Node) -> str | None:
    """The node's pool-coordinator role from its ``EdgePoolCoordinator`` condition (None: no coordinator)."""
    for cond in (node.status.conditions or []) if node.status else []:
        if cond.type == ROLE_CONDITION_TYPE:
            return (cond.reason or "").lower() or None
    return None


def _age(seconds: float) -> str:
    if seconds < 120:
        return f"{int(seconds)}s"
    if seconds < 7200:
        return f"{int(seconds // 60)}m"
    return f"{int(seconds // 3600)}h"


async def collect(client: AsyncClient, *, config: ControllerConfig | None = None) -> list[dict[str, Any]]:
    """One row per node, as plain data (what ``-o json`` prints)."""
    config = config or ControllerConfig()
    leases = {lease.metadata.name: lease async for lease in client.list(Lease, namespace=NODE_LEASE_NAMESPACE)}
    now = time.time()
    rows = []
    async for node in client.list(Node):
        name = node.metadata.name
        lease = leases.get(name)
        snap = node_snapshot(node)
        p = plan(node=snap, lease=lease_snapshot(lease), now=now, config=config)
        labels = node.metadata.labels or {}
        lease_ann = (lease.metadata.annotations or {}) if lease is not None else {}
        delegate = None
        if lease is not None and is_marked(lease):
            delegate = f"{lease_ann.get(DELEGATED_BY_ANNOTATION, '?')} ({lease_ann.get(DELEGATED_VIA_ANNOTATION, '?')})"
        ours = {"edgewatch.io/", "node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready"}
        taints = [f"{t.key}:{t.effect}" for t in snap.taints if any(t.key.startswith(o) for o in ours)]
        created = node.metadata.creationTimestamp
        rows.append({
            "node": name,
            "pool": labels.get(POOL_LABEL) or labels.get(DEFAULT_GROUP_LABEL) or "",
            "cloud": p.cloud.value,
            "edge": p.edge.value,
            "edge_message": snap.edge_condition.message if snap.edge_condition else "",
            "state": snap.annotations.get(STATE_ANNOTATION, "normal"),
            "computed_state": p.effective_state.value,
            "delegate": delegate,
            "role": role_of(node),
            "taints": taints,
            "age_s": round(now - created.timestamp(), 1) if created else None,
        })
    return sorted(rows, key=lambda r: (r["pool"], r["node"]))


def render(rows: list[dict[str, Any]], console: Console) -> None:
    """Print the rows as a table."""
    table = Table(box=None, header_style="bold")
    for col in ("NODE", "POOL", "CLOUD", "EDGE", "STATE", "DELEGATE", "ROLE", "TAINTS", "AGE"):
        table.add_column(col)
    colour = {"normal": "green", "disconnected": "yellow", "failed": "red", "unknown": "magenta"}
    for r in rows:
        state = r["state"]
        table.add_row(r["node"], r["pool"] or "-", r["cloud"], r["edge"],
                      f"[{colour.get(state, 'white')}]{state}[/]", r["delegate"] or "-", r["role"] or "-",
                      ",".join(r["taints"]) or "-", _age(r["age_s"]) if r["age_s"] is not None else "-")
    console.print(table)


def run_status(*, kubeconfig: str | None, output: str) -> int:
    """``edgewatch status``; returns the exit code."""
    async def main() -> list[dict[str, Any]]:
        client = api_client(kubeconfig)
        try:
            return await collect(client)
        finally:
            await client.close()

    rows = asyncio.run(main())
    if output == "json":
        print(json.dumps(rows, indent=2))
    else:
        render(rows, Console())
    return 0

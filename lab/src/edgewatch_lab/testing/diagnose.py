"""Why a lab wait is not over: a short, readable account of the workload and the nodes, for the
message of a wait that timed out (``edgewatch_lab.testing.smoke.wait_for``'s ``explain``).

A scenario's preparation waits for "50 ready endpoints"; when that times out, the count alone
says nothing of the cause (a node that went NotReady, pods Pending with no node, pods Running but
not Ready, the EndpointSlice controller behind). :func:`explain_workload` says which, by listing
the pods of a label selector grouped by node and state and the nodes that are not Ready.

The pure part, :func:`summarize`, takes plain rows and is unit-tested; :func:`explain_workload`
only reads the API. Limits: the account is capped (``limit`` rows of each kind), it is a snapshot
taken after the deadline, and every read has the client's own timeout.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from lightkube import AsyncClient
from lightkube.resources.core_v1 import Node, Pod

from edgewatch_lab.testing.kubeletsim import pod_ready
from edgewatch_lab.testing.smoke import ready_endpoints


@dataclass(frozen=True)
class PodRow:
    """One pod as the account shows it: ``node`` is ``""`` while unscheduled; ``deleting`` when it
    carries a deletionTimestamp (Terminating)."""

    name: str
    node: str
    phase: str
    ready: bool
    deleting: bool


def summarize(pods: Iterable[PodRow], *, endpoints: int, not_ready_nodes: Mapping[str, str],
              limit: int = 10) -> str:
    """One line: ready endpoints, pods per state, the pods that are not serving (up to ``limit``,
    with their node and the node's state when it is not Ready) and the nodes not Ready.

    ``not_ready_nodes`` maps a node name to its Ready condition (``"False"``, ``"Unknown"``, or
    ``"missing"``).
    """
    rows = sorted(pods, key=lambda p: p.name)
    states = Counter("terminating" if p.deleting else (f"{p.phase}/ready" if p.ready else f"{p.phase}/not-ready")
                     for p in rows)
    parts = [f"{endpoints} ready endpoints", f"{len(rows)} pods ("
             + ", ".join(f"{n} {s}" for s, n in sorted(states.items())) + ")"]
    stuck = [p for p in rows if p.deleting or not p.ready]
    if stuck:
        shown = [f"{p.name}@{p.node or '<unscheduled>'}"
                 + (f"[node Ready={not_ready_nodes[p.node]}]" if p.node in not_ready_nodes else "")
                 for p in stuck[:limit]]
        more = f" and {len(stuck) - limit} more" if len(stuck) > limit else ""
        parts.append("not serving: " + ", ".join(shown) + more)
    if not_ready_nodes:
        names = sorted(not_ready_nodes)
        more = f" and {len(names) - limit} more" if len(names) > limit else ""
        parts.append("nodes not Ready: " + ", ".join(f"{n}={not_ready_nodes[n]}" for n in names[:limit]) + more)
    return "; ".join(parts)


async def explain_workload(client: AsyncClient, *, namespace: str, service: str, labels: Mapping[str, str],
                           limit: int = 10) -> str:
    """:func:`summarize` of ``service``'s ready endpoints, of the pods matching ``labels`` in
    ``namespace`` and of every Node.

    Raises:
        lightkube.ApiError, httpx.HTTPError: a list failed (callers that only decorate a message
        catch them).
    """
    rows = []
    async for pod in client.list(Pod, namespace=namespace, labels=dict(labels)):
        rows.append(PodRow(name=pod.metadata.name if pod.metadata else "?",
                           node=(pod.spec.nodeName or "") if pod.spec else "",
                           phase=(pod.status.phase or "?") if pod.status else "?",
                           ready=pod_ready(pod),
                           deleting=bool(pod.metadata and pod.metadata.deletionTimestamp)))
    not_ready = {}
    async for node in client.list(Node):
        conds = {c.type: c.status for c in (node.status.conditions or [])} if node.status else {}
        if conds.get("Ready") != "True":
            not_ready[node.metadata.name] = conds.get("Ready", "missing")
    endpoints = len(await ready_endpoints(client, namespace=namespace, service=service))
    return summarize(rows, endpoints=endpoints, not_ready_nodes=not_ready, limit=limit)

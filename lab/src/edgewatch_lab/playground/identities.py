"""Who edgewatch's processes were to the apiserver, read from its audit log.

Every edgewatch process names itself in its User-Agent (``edgewatch-<component>/<version>``, see
``edgewatch.kube.client.user_agent``); the apiserver's audit log records, per request, that agent and
the user it authenticated. ``read_identities`` folds the log into one entry per (component,
username), so a report can show — and a test assert — that the agents and the controller used only
the shipped ServiceAccounts, never an admin credential, and that an agent's token is bound to its
node (the ``authentication.kubernetes.io/node-name`` user extra, Kubernetes >= 1.32).

Limits: only requests that reached the apiserver and were audited (Metadata level, every stage but
RequestReceived); a process that does not send edgewatch's User-Agent is not seen here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable

NODE_NAME_EXTRA = "authentication.kubernetes.io/node-name"
UA_PREFIX = "edgewatch-"


ANONYMOUS = "system:anonymous"
"""Who a request without credentials is (the agent's cloud-link probe of ``/readyz`` sends none)."""


def fold_events(lines: Iterable[str]) -> list[dict[str, Any]]:
    """Audit events (JSON lines) -> ``[{"component", "username", "requests", "node_names"}]``,
    sorted, with ``"paths"`` (the request URIs, sorted) for :data:`ANONYMOUS` entries: what was
    asked without a credential. Malformed lines and events with no user at all (cut off before
    authentication) are skipped. Pure."""
    seen: dict[tuple[str, str], dict[str, Any]] = {}
    for line in lines:
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if not isinstance(event, dict):
            continue
        ua = str(event.get("userAgent") or "")
        if not ua.startswith(UA_PREFIX):
            continue
        component = ua[len(UA_PREFIX):].split("/", 1)[0]
        user = event.get("user") or {}
        username = str(user.get("username") or "")
        if not username:
            # Not authenticated at all (e.g. a request cut off mid-way on a lossy link): it used no
            # credential, so it names no identity.
            continue
        entry = seen.setdefault((component, username), {"component": component, "username": username,
                                                        "requests": 0, "node_names": set()})
        entry["requests"] += 1
        if username == ANONYMOUS:
            entry.setdefault("paths", set()).add(str(event.get("requestURI") or ""))
        for node in (user.get("extra") or {}).get(NODE_NAME_EXTRA, []) or []:
            entry["node_names"].add(str(node))
    return [{**e, "node_names": sorted(e["node_names"]), **({"paths": sorted(e["paths"])} if "paths" in e else {})}
            for _k, e in sorted(seen.items())]


def read_identities(audit_log: Path | None) -> list[dict[str, Any]]:
    """``fold_events`` of an audit log file (and its rotated siblings); [] when there is none."""
    if audit_log is None:
        return []
    files = sorted(audit_log.parent.glob(audit_log.name.replace(".log", "") + "*.log"))
    lines: list[str] = []
    for f in files:
        try:
            lines += f.read_text(errors="replace").splitlines()
        except OSError:
            continue
    return fold_events(lines)

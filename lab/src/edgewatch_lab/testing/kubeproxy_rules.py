"""Read back what kube-proxy programmed: pure parsers of its nftables and iptables rulesets.

Both map ``"namespace/service:port-name"`` (``"namespace/service"`` for an unnamed port: the
ServicePortName kube-proxy writes in its logs) to the set of ``"ip:port"`` endpoints the Service's
ClusterIP load-balances to. Used by ``edgewatch_lab.testing.kubeproxy.KubeProxy.service_backends``.

Limits: IPv4 tables only; ClusterIP traffic only (NodePort, external-IP and load-balancer chains
are not followed); a Service port without ready endpoints is absent (kube-proxy points it at a
reject chain that does not name the Service). The formats are kube-proxy v1.36's (nftables chain
names ``service-<HASH>-<ns>/<name>/<proto>/<port>``, iptables comments ``"<ns>/<svc>:<port>
cluster IP"``); other versions may need changes.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

_CHAIN_RE = re.compile(r"^[a-z]+-[A-Z2-7]{8}-(?P<ns>[^/]+)/(?P<name>[^/]+)/(?P<proto>[a-z]+)/(?P<port>[^_]*)$")


def _service_key(chain: str) -> str | None:
    """``namespace/name:port-name`` (kube-proxy's ServicePortName) from a service chain name."""
    m = _CHAIN_RE.match(chain)
    if m is None:
        return None
    return f"{m['ns']}/{m['name']}" + (f":{m['port']}" if m["port"] else "")


def _nft_items(ruleset: Any, kind: str) -> list[dict[str, Any]]:
    return [item[kind] for item in ruleset.get("nftables", []) if isinstance(item, dict) and kind in item]


def _nft_endpoint(expr: Any) -> str | None:
    """``ip:port`` of a ``dnat to ip:port`` statement, else None."""
    if isinstance(expr, dict) and isinstance(expr.get("dnat"), dict):
        dnat = expr["dnat"]
        if isinstance(dnat.get("addr"), str) and "port" in dnat:
            return f"{dnat['addr']}:{dnat['port']}"
    return None


def _nft_map_pairs(data: Any) -> list[Any]:
    """The values of an anonymous nft map (``{"set": [[key, value], ...]}``)."""
    if isinstance(data, dict) and isinstance(data.get("set"), list):
        return [pair[1] for pair in data["set"] if isinstance(pair, list) and len(pair) == 2]
    return []


def parse_nft_ruleset(ruleset: str | Mapping[str, Any]) -> dict[str, set[str]]:
    """What an nftables-mode kube-proxy load-balances, from ``nft -j list table ip kube-proxy``.

    Follows the ``service-ips`` map (ClusterIP . protocol . port -> ``goto`` the Service port's
    chain) to the chain's endpoint choice: either a ``dnat ... numgen random mod N map``
    straight to ``ip . port`` pairs, or a ``numgen ... vmap`` of ``goto endpoint-...`` chains
    each ending in ``dnat to ip:port``. Chains no map element points to (stale ones that
    kube-proxy has flushed but not yet deleted) are ignored.

    Args:
        ruleset: the JSON text or its parsed form.

    Returns:
        ``"namespace/service:port-name"`` (``"namespace/service"`` for an unnamed port, as
        kube-proxy writes it in its logs) -> set of ``"ip:port"`` endpoints.
    """
    data = json.loads(ruleset) if isinstance(ruleset, str) else ruleset
    rules: dict[str, list[list[Any]]] = {}
    for rule in _nft_items(data, "rule"):
        rules.setdefault(str(rule.get("chain")), []).append(list(rule.get("expr", [])))
    targets: list[str] = []
    for nft_map in _nft_items(data, "map"):
        if nft_map.get("name") != "service-ips":
            continue
        for elem in nft_map.get("elem", []):
            verdict = elem[1] if isinstance(elem, list) and len(elem) == 2 else None
            if isinstance(verdict, dict) and isinstance(verdict.get("goto"), dict):
                targets.append(str(verdict["goto"].get("target")))

    def chain_endpoints(chain: str) -> set[str]:
        found: set[str] = set()
        for exprs in rules.get(chain, []):
            for expr in exprs:
                single = _nft_endpoint(expr)
                if single:
                    found.add(single)
                    continue
                dnat = expr.get("dnat") if isinstance(expr, dict) else None
                if isinstance(dnat, dict) and isinstance(dnat.get("addr"), dict):  # dnat ... map
                    for value in _nft_map_pairs(dnat["addr"].get("map", {}).get("data")):
                        concat = value.get("concat") if isinstance(value, dict) else None
                        if isinstance(concat, list) and len(concat) == 2:
                            found.add(f"{concat[0]}:{concat[1]}")
                vmap = expr.get("vmap") if isinstance(expr, dict) else None
                if isinstance(vmap, dict):
                    for value in _nft_map_pairs(vmap.get("data")):
                        if isinstance(value, dict) and isinstance(value.get("goto"), dict):
                            found |= chain_endpoints(str(value["goto"].get("target")))
        return found

    backends: dict[str, set[str]] = {}
    for chain in targets:
        key = _service_key(chain)
        if key is not None:
            backends.setdefault(key, set()).update(chain_endpoints(chain))
    return backends


_IPT_RULE = re.compile(r"^-A (?P<chain>\S+) (?P<rest>.*)$")
_IPT_COMMENT = re.compile(r'--comment (?:"(?P<quoted>[^"]*)"|(?P<bare>\S+))')
_IPT_JUMP = re.compile(r"-j (?P<target>\S+)")
_IPT_DNAT = re.compile(r"--to-destination (?P<dest>\S+)")


def parse_iptables_save(text: str) -> dict[str, set[str]]:
    """What an iptables-mode kube-proxy load-balances, from ``iptables-save -t nat``.

    Follows ``KUBE-SERVICES`` rules commented ``"<ns>/<svc>:<port> cluster IP"`` to their
    ``KUBE-SVC-*`` chain, its jumps to ``KUBE-SEP-*`` chains, and their ``DNAT
    --to-destination``.

    Returns:
        ``"namespace/service:port-name"`` -> set of ``"ip:port"``, as ``parse_nft_ruleset``.
    """
    rules: dict[str, list[str]] = {}
    for line in text.splitlines():
        m = _IPT_RULE.match(line.strip())
        if m:
            rules.setdefault(m["chain"], []).append(m["rest"])

    def jumps(chain: str, prefix: str) -> list[str]:
        out = []
        for rest in rules.get(chain, []):
            j = _IPT_JUMP.search(rest)
            if j and j["target"].startswith(prefix):
                out.append(j["target"])
        return out

    backends: dict[str, set[str]] = {}
    for rest in rules.get("KUBE-SERVICES", []):
        c, j = _IPT_COMMENT.search(rest), _IPT_JUMP.search(rest)
        comment = (c["quoted"] or c["bare"]) if c else ""
        if not j or not j["target"].startswith("KUBE-SVC-") or not comment.endswith(" cluster IP"):
            continue
        found = backends.setdefault(comment.removesuffix(" cluster IP"), set())
        for sep in jumps(j["target"], "KUBE-SEP-"):
            for sep_rest in rules.get(sep, []):
                d = _IPT_DNAT.search(sep_rest)
                if d:
                    found.add(d["dest"])
    return backends

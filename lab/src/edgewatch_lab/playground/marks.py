"""What edgewatch left on a cluster, judged by the lab on its own terms: the marks on a Node and
its Lease, and the objects left after an uninstall (the ``uninstall`` step's ``clean_at_end``).

Deliberately *not* ``edgewatch.uninstall``'s list: a check that reused the product's plan could
never catch a mark the product forgets. A mark here is anything under edgewatch's domain
(``edgewatch.io/``) — a taint key, a Node annotation, a Lease annotation — plus the two things
edgewatch writes outside it: a Node condition that is not one of the kubelet's own, and the
out-of-service taint with the value ``edgewatch`` (an operator's, with another value, is not a
mark). The operator's settings under the domain (the ``edgewatch.io/out-of-service`` and
``edgewatch.io/autonomy-duration`` Node annotations, Node labels) are not marks.

Pure functions over plain values (no API access); ``edgewatch_lab.playground.observer`` feeds
them each poll, ``edgewatch_lab.playground.uninstalling`` the lists it reads at the end.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final

DOMAIN: Final = "edgewatch.io/"
#: The Node annotations an operator sets (docs/configuration.md): settings, not marks.
OPERATOR_ANNOTATIONS: Final = frozenset({"edgewatch.io/out-of-service", "edgewatch.io/autonomy-duration"})
#: The Node conditions the kubelet itself reports (and NetworkUnavailable, a CNI's): everything else is
#: someone else's condition — in the lab, edgewatch's.
KUBELET_CONDITIONS: Final = frozenset({"Ready", "MemoryPressure", "DiskPressure", "PIDPressure",
                                       "NetworkUnavailable"})
OUT_OF_SERVICE_TAINT: Final = "node.kubernetes.io/out-of-service"
#: The namespaces of an install (deploy/): what is left in them after an uninstall is listed.
NAMESPACES: Final = ("edgewatch", "edgewatch-nodes")
#: In those namespaces, objects every namespace has (not edgewatch's).
NAMESPACE_DEFAULTS: Final = frozenset({"ConfigMap/kube-root-ca.crt", "ServiceAccount/default"})


def node_marks(*, taints: Iterable[tuple[str, str]], annotations: Mapping[str, str],
               conditions: Iterable[str]) -> list[str]:
    """The marks on one Node, sorted: ``taint <key>``, ``annotation <key>``, ``condition <type>``.

    Args:
        taints: ``(key, value)`` of each taint (value ``""`` when unset; effects are not told apart).
        annotations: the Node's annotations.
        conditions: the types of the Node's status conditions.
    """
    marks = {f"taint {key}" for key, value in taints
             if key.startswith(DOMAIN) or (key == OUT_OF_SERVICE_TAINT and value == "edgewatch")}
    marks |= {f"annotation {key}" for key in annotations
              if key.startswith(DOMAIN) and key not in OPERATOR_ANNOTATIONS}
    marks |= {f"condition {kind}" for kind in conditions if kind not in KUBELET_CONDITIONS}
    return sorted(marks)


def lease_marks(annotations: Mapping[str, str]) -> list[str]:
    """The marks on a node's Lease (``lease <annotation key>``), sorted."""
    return sorted(f"lease {key}" for key in annotations if key.startswith(DOMAIN))


def left_in_namespace(kind: str, names: Iterable[str]) -> list[str]:
    """``<kind>/<name>`` of each object in one of edgewatch's namespaces that is not a default of every
    namespace, sorted."""
    return sorted(ref for ref in (f"{kind}/{name}" for name in names) if ref not in NAMESPACE_DEFAULTS)


def left_cluster_wide(kind: str, names: Iterable[str]) -> list[str]:
    """``<kind>/<name>`` of each cluster-scoped object named like edgewatch's (``edgewatch*``), sorted."""
    return sorted(f"{kind}/{name}" for name in names if name.startswith("edgewatch"))


def edgewatch_csrs(signers: Mapping[str, str]) -> list[str]:
    """``CertificateSigningRequest/<name>`` of each CSR (name -> signerName) for one of edgewatch's
    signers (``edgewatch.io/...``), sorted."""
    return sorted(f"CertificateSigningRequest/{name}" for name, signer in signers.items()
                  if signer.startswith(DOMAIN))

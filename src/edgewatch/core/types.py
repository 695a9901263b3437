"""Shared vocabulary of edgewatch's functional core: node identities, a
peer's health as one observer sees it, and the group's verdict on a node.

Limits: these are plain value types; they carry no behaviour beyond
validating a node name.

Sources: TKE Edge ("distributed node status determination": each
node checks its peers, all vote, a majority decides); SWIM / Lifeguard
(alive / suspect / dead member states); Kubernetes' DNS-1123 subdomain rule
for node names (``k8s.io/apimachinery/pkg/util/validation``).
"""

from __future__ import annotations

import enum
import re
from typing import Final, NewType

__all__ = [
    "NODE_NAME_MAX_LENGTH",
    "DNS1123_LABEL_PATTERN",
    "DNS1123_SUBDOMAIN_PATTERN",
    "is_decimal",
    "is_dns1123_label",
    "is_dns1123_subdomain",
    "Health",
    "NodeName",
    "Verdict",
    "is_node_name",
    "node_name",
]

NodeName = NewType("NodeName", str)
"""A Kubernetes node name (``metadata.name`` of a Node), a DNS-1123 subdomain."""

NODE_NAME_MAX_LENGTH: Final = 253
"""Longest valid node name in characters (DNS-1123 subdomain limit)."""

DNS1123_SUBDOMAIN_PATTERN: Final = (
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
)
"""The regular expression Kubernetes uses for DNS-1123 subdomains."""

DNS1123_LABEL_PATTERN: Final = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
"""The regular expression Kubernetes uses for DNS-1123 labels (no dots; at most 63 characters)."""

_DNS1123_SUBDOMAIN: Final = re.compile(DNS1123_SUBDOMAIN_PATTERN)
_DNS1123_LABEL: Final = re.compile(DNS1123_LABEL_PATTERN)


def is_dns1123_subdomain(value: object) -> bool:
    """Whether ``value`` is a ``str`` that is a DNS-1123 subdomain of 1..253 ASCII characters (the
    one check edgewatch uses for node names, label prefixes and the like). Never raises."""
    return (isinstance(value, str) and 0 < len(value) <= NODE_NAME_MAX_LENGTH and value.isascii()
            and _DNS1123_SUBDOMAIN.fullmatch(value) is not None)


def is_dns1123_label(value: object) -> bool:
    """Whether ``value`` is a ``str`` that is a DNS-1123 label of 1..63 ASCII characters (pool
    names). Never raises."""
    return (isinstance(value, str) and 0 < len(value) <= 63 and value.isascii()
            and _DNS1123_LABEL.fullmatch(value) is not None)


def is_decimal(value: object, *, max_digits: int = 20) -> bool:
    """Whether ``value`` is a ``str`` of 1..``max_digits`` ASCII digits, so ``int(value)`` cannot
    fail (resourceVersions, generations; 20 digits hold any uint64). ``str.isdigit`` alone is not
    enough for untrusted text: it accepts "²", which ``int`` refuses. Never raises."""
    return isinstance(value, str) and 0 < len(value) <= max_digits and value.isascii() and value.isdigit()


def is_node_name(value: object) -> bool:
    """Return whether ``value`` is a ``str`` that is a valid node name.

    Valid means: 1 to 253 characters, a DNS-1123 subdomain (lower-case
    alphanumerics, ``-`` and ``.``, starting and ending with an alphanumeric
    in every dot-separated label). Never raises.
    """
    return is_dns1123_subdomain(value)


def node_name(value: str) -> NodeName:
    """Validate ``value`` and return it typed as a :data:`NodeName`.

    Raises:
        ValueError: ``value`` is not a valid DNS-1123 subdomain of at most
            253 characters.
    """
    if not is_node_name(value):
        raise ValueError(f"not a valid node name (DNS-1123 subdomain, <= 253 chars): {value!r:.300}")
    return NodeName(value)


class Health(enum.StrEnum):
    """A peer's health as seen by one observer's failure detector.

    In a vote (:class:`edgewatch.core.quorum.Vote`) ALIVE peers are listed
    as alive, DEAD peers as dead, and SUSPECT peers in neither list: a
    suspect observer abstains.
    """

    ALIVE = "alive"
    SUSPECT = "suspect"
    DEAD = "dead"


class Verdict(enum.StrEnum):
    """The group's decision on one node (strict majority of the group)."""

    HEALTHY = "healthy"
    UNHEALTHY = "unhealthy"
    UNKNOWN = "unknown"

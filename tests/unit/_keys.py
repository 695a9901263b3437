"""Per-node test keys: every node of a test gets its own Ed25519 key, registered in one shared
:class:`PublicKeys` (as if every node had read every other's published record)."""

from __future__ import annotations

from functools import cache

from edgewatch.core.identity import NodeKey, NodeKeyring, PublicKeys
from edgewatch.core.types import NodeName

PUBLIC = PublicKeys()


@cache
def ring(node: str) -> NodeKeyring:
    """``node``'s keyring (one key, made on first use), verifying with every test node's key."""
    return NodeKeyring(node=NodeName(node), keys=(NodeKey.generate(),), public=PUBLIC)

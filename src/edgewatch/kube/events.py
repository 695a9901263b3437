"""What an informer hands on: the whole state after a list, one change, or a bookmark.

The pool cache's sources (``edgewatch.poolcache``) emit the same three events, so a consumer
cannot tell (and need not care) whether the cloud, the pool coordinator or a node's own feed
carried them. ``T`` is what an object is to the consumer: a JSON mapping, or a typed model.

Limits
    Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

__all__ = ["Bookmark", "Change", "FeedEvent", "Reset", "Sink"]

T = TypeVar("T")


@dataclass(frozen=True)
class Reset(Generic[T]):
    """The whole current state of one resource (after a list): replaces what the sink had.

    Attributes:
        objects: every object, each with ``metadata.resourceVersion``.
        resource_version: the list's resourceVersion (watch from it to get what follows).
    """

    objects: list[T] = field(repr=False)
    resource_version: str


@dataclass(frozen=True)
class Change(Generic[T]):
    """One watch event: ``type`` ADDED, MODIFIED or DELETED; ``obj`` carries the event's
    resourceVersion (for DELETED: the object's last state, with the deletion's resourceVersion)."""

    type: str
    obj: T = field(repr=False)


@dataclass(frozen=True)
class Bookmark:
    """Every change up to ``resource_version`` has been delivered (Kubernetes watch bookmark)."""

    resource_version: str


FeedEvent = Reset[Any] | Change[Any] | Bookmark
Sink = Callable[[FeedEvent], Awaitable[None]]
"""Consumes a feed's events in order; may raise to end the feed (it is then restarted)."""

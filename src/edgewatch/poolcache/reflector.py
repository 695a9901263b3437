"""List and watch one pool-scope resource on the cloud apiserver: the cloud door's informer
(:class:`edgewatch.kube.informer.Informer`) with the pool cache's own object checks.

What it is for
    The pool leader's informer (cloud -> coordinator etcd) and a node's cloud feed (cloud -> its
    own cache, while the coordinator is not Ready) both need the same loop: list, then watch from
    the list's resourceVersion with bookmarks, re-list on 410 Gone, back off with jitter on errors.
    :class:`CloudReflector` is that informer over all namespaces, handing
    :mod:`edgewatch.poolcache.feed` events to a sink; every object passes
    :func:`~edgewatch.poolcache.feed.check_object` and is stripped of ``managedFields``.

Limits
    As the informer's (JSON only, one resource per reflector).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from edgewatch.kube.api import HttpClient
from edgewatch.kube.backoff import backoff_delay
from edgewatch.kube.informer import Gone, Informer, InformerConfig
from edgewatch.kube.listwatch import HttpListerWatcher
from edgewatch.poolcache.feed import Sink, check_object, strip_object
from edgewatch.poolcache.resources import PoolResource

__all__ = ["CloudReflector", "ReflectorConfig", "Gone", "backoff_delay"]

ReflectorConfig = InformerConfig
"""Timings and limits of a reflector: the informer's (:class:`edgewatch.kube.informer.InformerConfig`)."""


def _ignore(_reason: str) -> None:
    return None


class CloudReflector(Informer[dict[str, Any]]):
    """Lists and watches ``resource`` in all namespaces and feeds ``sink`` checked, stripped objects.

    Args (keyword-only):
        resource: what to list and watch (all namespaces).
        http: the cloud API's HTTP client (base URL, TLS and credentials set).
        sink: receives Reset / Change / Bookmark events in order.
        config: timings and limits.
        on_error: called with a short reason for every error (metrics); must not raise.
        on_rejected: called with a reason for every object dropped as malformed.
        name: who runs it, for logs ("leader", "node").
    """

    def __init__(self, *, resource: PoolResource, http: HttpClient, sink: Sink,
                 config: InformerConfig | None = None, on_error: Callable[[str], None] = _ignore,
                 on_rejected: Callable[[str], None] = _ignore, name: str = "") -> None:
        super().__init__(source=HttpListerWatcher(http=http, resource=resource), sink=sink, config=config,
                         on_error=on_error,
                         on_rejected=on_rejected, name=name,
                         check=lambda obj: strip_object(check_object(obj, resource)))

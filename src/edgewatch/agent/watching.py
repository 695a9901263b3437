"""The agent's watches: every list-then-watch of the agent (its own Node, the ``edgewatch-config``
ConfigMap and its group's roster in ``edgewatch.agent.membership``, the key records in
``edgewatch.agent.identity``, the controller's beacon Lease in ``edgewatch.agent.reporter``) is
the cloud door's informer (:class:`edgewatch.kube.informer.Informer`) with a store
(:class:`edgewatch.kube.store.Store`), built by :func:`follow` with the agent's settings.

What that gives each of them (the informer's behaviour, client-go's reflector): the list is paged
and the watch opened from the list's resourceVersion with bookmarks; a watch that ends is re-opened
from where it was, without a list; a watch silent for ``idle_timeout_s`` is taken as dead (a cut
uplink drops packets without a reset, the connection would hang for ever) and re-opened, without a
list; a 410 re-lists; errors back off with full jitter from the part's ``retry_s`` up to
:data:`AGENT_BACKOFF_MAX_S`. A re-list hands the part exact per-object changes: an object deleted
while the watch was down arrives as ``DELETED``, an unchanged one not at all.

Each watch event (a :class:`~edgewatch.kube.events.Change`; not a list, not a bookmark) is told to
the part's :class:`edgewatch.agent.ports.WatchEvents` (the per-agent API load metric, docs/scaling.md).

Limits
    One resource, one namespace (or cluster-scoped) and one field selector per informer; the
    handler runs inline on the event loop and must not block.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final, TypeVar

from edgewatch.agent.ports import WatchEvents
from edgewatch.kube.events import Change, FeedEvent, Reset
from edgewatch.kube.informer import Informer, InformerConfig
from edgewatch.kube.listwatch import lister_watcher
from edgewatch.kube.resources import ApiResource
from edgewatch.kube.store import Store

__all__ = ["AGENT_BACKOFF_MAX_S", "WATCH_SERVER_TIMEOUT_S", "follow", "informer_config"]

T = TypeVar("T")

AGENT_BACKOFF_MAX_S: Final = 5.0
"""Longest wait between two tries of a failed list or watch of the agent's informers, seconds.

5 s, not client-go's 30 s: a node whose cloud link comes back re-establishes its watches (and
learns a relabel, a new roster, a new beacon key) within seconds. The cost is bounded: before the
informer every agent watch retried after a fixed 2 s, so an apiserver outage now draws fewer
retries per agent than it did, and the jitter (each delay drawn from [cap/2, cap]) spreads them.
The controller caps its informers at the same 5 s (``edgewatch.controller.evidence``)."""

WATCH_SERVER_TIMEOUT_S: Final = 120
"""Server-side timeout of the agent's watches, seconds (the informer draws each from [120 s,
240 s) so re-watches spread out; each costs one request, no list)."""


def informer_config(*, request_timeout_s: float, idle_timeout_s: float, retry_s: float) -> InformerConfig:
    """The informer settings of an agent part.

    Args (keyword-only):
        request_timeout_s: bound of one list page or of opening a watch, seconds.
        idle_timeout_s: a watch silent this long is dead and re-opened, seconds (above the
            apiserver's bookmark period of about 60 s).
        retry_s: first backoff after an error, seconds; it doubles (full jitter) up to
            :data:`AGENT_BACKOFF_MAX_S` (or ``retry_s`` if that is larger).
    """
    return InformerConfig(request_timeout_s=request_timeout_s, watch_timeout_s=WATCH_SERVER_TIMEOUT_S,
                          idle_timeout_s=idle_timeout_s, backoff_initial_s=retry_s,
                          backoff_max_s=max(retry_s, AGENT_BACKOFF_MAX_S))


async def follow(client: object, resource: ApiResource, *, model: Any, name: str,
                 on_event: Callable[[str, T], None], config: InformerConfig, events: WatchEvents,
                 namespace: str | None = None, field_selector: str | None = None,
                 on_list: Callable[[list[T]], None] | None = None) -> None:
    """List and watch ``resource`` through the cloud door's informer until cancelled; never raises
    for API or network errors (see the module docstring).

    Args:
        client: the agent's API client (a lightkube AsyncClient; a test's in-memory one).
        resource: what to list and watch (``edgewatch.kube.resources``).
        model: the lightkube resource class objects are decoded to (``model.from_dict``).
        name: the watch's label: ``events.watch_event_received(name)`` and the informer's logs.
        on_event: called with ``(op, obj)`` for every change (op ``ADDED``, ``MODIFIED``,
            ``DELETED``), from a list as from the watch (:class:`edgewatch.kube.store.Store`).
        config: the informer's settings (:func:`informer_config`).
        events: told of each watch event received.
        namespace / field_selector: as in the API (e.g. ``"metadata.name=a-1"``), or None.
        on_list: called after each list was handed on (its changes made), with every object
            listed, e.g. to say "synced" or to note that nothing was there.
    """
    store: Store[T] = Store(on_event=on_event)

    async def sink(event: FeedEvent) -> None:
        if isinstance(event, Change):
            events.watch_event_received(name)
        await store(event)
        if isinstance(event, Reset) and on_list is not None:
            on_list(list(event.objects))

    informer: Informer[T] = Informer(
        source=lister_watcher(client, resource, namespace=namespace, field_selector=field_selector), sink=sink,
        decode=model.from_dict, config=config, name=name)
    await informer.run()

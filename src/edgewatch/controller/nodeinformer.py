"""The controller's one Node informer: the cloud door's informer
(:class:`edgewatch.kube.informer.Informer`) and store (:class:`edgewatch.kube.store.Store`) over
every Node, whose changes go to several named subscribers (the reconciler and the roster
publisher), as client-go's SharedInformer hands one list-and-watch to every handler registered on
it (k8s.io/client-go/tools/cache/shared_informer.go).

Why one: every Node event (a kubelet's status report, about one per node per minute; every write
of ours) reached the controller twice, over two watches, and every cut cost two LISTs of every
Node, for the same data.

What a subscriber (:class:`NodeSubscriber`) is told, in order:

* a list (at start, after a 410 or a cut): ``nodes_relisting()``, then ``on_node(op, node)`` for
  each Node that changed since the store last saw it (op ``ADDED``, ``MODIFIED``, or ``DELETED``
  for a Node deleted while the watch was down: :class:`edgewatch.kube.store.Store`), then
  ``nodes_listed()`` (every Node the API has is known from here: "synced");
* a watch event: ``on_node(op, node)``.

The store is the controller's cache of every Node: :meth:`SharedNodeInformer.names` gives the
names the reconciler's resync looks at (as client-go's informers resync from their cache; no LIST).

Limits
    Subscribers are fixed when it is built; they run inline, in the order given, and must not
    block. An exception from one ends :meth:`SharedNodeInformer.run` (a bug; a note names the
    subscriber), as an exception from a watch handler always did.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from edgewatch.kube.api import Node
from edgewatch.kube.events import FeedEvent, Reset
from edgewatch.kube.informer import Informer, InformerConfig
from edgewatch.kube.listwatch import lister_watcher
from edgewatch.kube.resources import NODES
from edgewatch.kube.store import Store

__all__ = ["NodeSubscriber", "SharedNodeInformer"]


class NodeSubscriber(Protocol):
    """One consumer of the shared Node informer (see the module docstring)."""

    def nodes_relisting(self) -> None:
        """A list's changes come next: drop what only an unbroken watch could keep up to date
        (e.g. the reconciler's wait for its own writes, ``edgewatch.controller.seen``)."""

    def on_node(self, op: str, node: Node) -> None:
        """One Node changed: ``op`` is ``ADDED``, ``MODIFIED`` or ``DELETED`` (``node``: its last
        state)."""

    def nodes_listed(self) -> None:
        """A list's changes were all handed on: every Node the API has is known."""


class SharedNodeInformer:
    """One list-and-watch of every Node, fanned out to named subscribers (see the module docstring).

    Args (keyword-only):
        client: the controller's API client (lightkube ``AsyncClient``; a test's in-memory one).
        subscribers: name -> subscriber, told in this order; the name is for diagnostics.
        config: the informer's timings: the controller's ``api_timeout_s`` as
            ``request_timeout_s``, its ``watch_timeout_s`` as ``idle_timeout_s``, backoff up to
            ``edgewatch.controller.evidence.CONTROLLER_BACKOFF_MAX_S`` seconds.
        name: who runs it, for the informer's logs.

    Attributes:
        informer: the informer (``lists`` and ``watches`` count what it opened).
        store: every Node it delivered, by name.
    """

    def __init__(self, *, client: object, subscribers: Mapping[str, NodeSubscriber], config: InformerConfig,
                 name: str = "controller") -> None:
        if not subscribers:
            raise ValueError("a shared Node informer needs at least one subscriber")
        self.subscribers = dict(subscribers)
        self.store: Store[Node] = Store(on_event=self._on_node)
        self.informer: Informer[Node] = Informer(source=lister_watcher(client, NODES), sink=self._sink,
                                                 decode=Node.from_dict, config=config, name=name)

    @property
    def synced(self) -> bool:
        """True once the first list was handed on."""
        return self.store.synced.is_set()

    def names(self) -> list[str]:
        """The name of every Node in the store (Nodes are cluster-scoped: the key is the name)."""
        return list(self.store.objects)

    async def run(self) -> None:
        """List and watch every Node until cancelled; never raises for API or network errors."""
        await self.informer.run()

    async def _sink(self, event: FeedEvent) -> None:
        listing = isinstance(event, Reset)
        if listing:
            for subscriber in self.subscribers.values():
                subscriber.nodes_relisting()
        await self.store(event)
        if listing:
            for subscriber in self.subscribers.values():
                subscriber.nodes_listed()

    def _on_node(self, op: str, node: Node) -> None:
        for name, subscriber in self.subscribers.items():
            try:
                subscriber.on_node(op, node)
            except Exception as exc:
                exc.add_note(f"in Node subscriber {name!r} ({op} {node.metadata.name})")
                raise

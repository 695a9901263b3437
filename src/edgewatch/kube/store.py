"""The informer's store and event handler (client-go's Store + ResourceEventHandler, small): keeps
the objects an informer delivered, by namespace/name, and turns its events into one call per
object change, so every consumer sees the same thing after a re-list as after a watch.

* A :class:`~edgewatch.kube.events.Reset` (a list, after start, a 410 or a cut) becomes
  ``DELETED`` for every object that is gone, ``ADDED`` for every new one and ``MODIFIED`` for
  every one whose resourceVersion moved; unchanged objects cause no call. Then ``synced`` is set.
* A :class:`~edgewatch.kube.events.Change` is applied and passed on as it came.
* A :class:`~edgewatch.kube.events.Bookmark` changes nothing.

Objects are either JSON mappings or lightkube models (``metadata.name`` etc. as attributes).

Limits
    One handler per store; the handler runs inline (a slow handler slows this informer only).
    Single-threaded (one event loop).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

from edgewatch.kube.events import Change, FeedEvent, Reset

__all__ = ["Store", "object_key", "object_version"]

T = TypeVar("T")

Handler = Callable[[str, T], Awaitable[None] | None]
"""Called with ``(op, obj)``: op ``ADDED``, ``MODIFIED`` or ``DELETED``; may be async."""


def _meta(obj: object, field: str) -> str:
    if isinstance(obj, dict):
        meta = obj.get("metadata")
        value = meta.get(field) if isinstance(meta, dict) else None
    else:
        value = getattr(getattr(obj, "metadata", None), field, None)
    return value if isinstance(value, str) else ""


def object_key(obj: object) -> str:
    """``namespace/name``, or ``name`` for a cluster-scoped object (client-go's MetaNamespaceKeyFunc)."""
    namespace, name = _meta(obj, "namespace"), _meta(obj, "name")
    return f"{namespace}/{name}" if namespace else name


def object_version(obj: object) -> str:
    """The object's ``metadata.resourceVersion`` ("" if it has none)."""
    return _meta(obj, "resourceVersion")


class Store(Generic[T]):
    """The objects an informer delivered, and the handler their changes go to.

    Args (keyword-only):
        on_event: the handler, called with ``(op, obj)`` for every change (see the module
            docstring); may be a coroutine function.

    Use an instance as the informer's ``sink``. ``objects`` maps :func:`object_key` to the
    newest object; ``synced`` is set after the first list was handed on.
    """

    def __init__(self, *, on_event: Handler[T]) -> None:
        self.on_event = on_event
        self.objects: dict[str, T] = {}
        self.synced = asyncio.Event()

    async def _emit(self, op: str, obj: T) -> None:
        result = self.on_event(op, obj)
        if inspect.isawaitable(result):
            await result

    async def __call__(self, event: FeedEvent) -> None:
        """Apply one informer event."""
        if isinstance(event, Reset):
            listed = {object_key(obj): obj for obj in event.objects}
            for key in [k for k in self.objects if k not in listed]:
                await self._emit("DELETED", self.objects.pop(key))
            for key, obj in listed.items():
                before = self.objects.get(key)
                self.objects[key] = obj
                if before is None:
                    await self._emit("ADDED", obj)
                elif object_version(before) != object_version(obj):
                    await self._emit("MODIFIED", obj)
            self.synced.set()
        elif isinstance(event, Change):
            key = object_key(event.obj)
            if event.type == "DELETED":
                self.objects.pop(key, None)
            else:
                self.objects[key] = event.obj
            await self._emit(event.type, event.obj)


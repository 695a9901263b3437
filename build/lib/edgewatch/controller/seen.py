"""The controller's copy of the objects its watches delivered, so a reconcile reads no API (the
informer cache of client-go, reduced to what the reconciler needs).

Why: the reconciler used to GET the Node and its Lease on every reconcile, and a node is
reconciled on each Lease renewal (every 10 s), each resync (30 s) and each verdict change: at
1,000 nodes that was ≈ 500 GETs per second on the cloud apiserver (bench/api_scale.py). A watch
already delivers every version of those objects, in order.

Our own writes: a write returns resourceVersion X, and the watch may still deliver versions older
than X afterwards (they were in flight). Until the watch delivers X itself, the entry is left
empty, so a reconcile in between reads the API (a GET is linearizable: it returns X or newer).
Only equality of resourceVersions is used (they are opaque strings, API conventions); a
re-established watch starts with every object as it is now, so :meth:`SeenObjects.restart` drops
the waits. Every write still carries a resourceVersion precondition where it matters (taints), so
a stale copy can cost a 409 and a re-read, never a lost update.

Limits: memory is one object per node (client-go's informers keep the same).
"""

from __future__ import annotations

from collections import deque
from typing import Generic, Protocol, TypeVar


class _Meta(Protocol):
    resourceVersion: str | None


class _Object(Protocol):
    @property
    def metadata(self) -> _Meta | None: ...


T = TypeVar("T", bound=_Object)

__all__ = ["SeenObjects"]


class SeenObjects(Generic[T]):
    """name -> the newest object a watch delivered (see the module docstring)."""

    RECENT = 8
    """Versions remembered per object: the watch may deliver our write before the write's response
    arrives, and a few more writes after it."""

    def __init__(self) -> None:
        self._objects: dict[str, T] = {}
        self._awaiting: dict[str, str] = {}  # name -> resourceVersion of our write, not yet seen
        self._recent: dict[str, deque[str]] = {}  # name -> the last versions the watch delivered

    def __len__(self) -> int:
        return len(self._objects)

    def get(self, name: str) -> T | None:
        """The object to reconcile from, or None: read it from the API."""
        return self._objects.get(name)

    def seen(self, name: str, obj: T | None) -> None:
        """A watch event: ``obj`` (None = deleted). Versions before our own pending write are not
        kept."""
        if obj is None:
            self._objects.pop(name, None)
            self._awaiting.pop(name, None)
            self._recent.pop(name, None)
            return
        version = _version(obj)
        if version:
            self._recent.setdefault(name, deque(maxlen=self.RECENT)).append(version)
        awaited = self._awaiting.get(name)
        if awaited is not None:
            if version != awaited:
                return  # older than what we wrote, or we cannot tell: read the API meanwhile
            del self._awaiting[name]
        self._objects[name] = obj

    def wrote(self, name: str, response: T | None) -> None:
        """We wrote ``name``; ``response`` is what the API returned (its resourceVersion is awaited,
        unless the watch has delivered it already)."""
        version = _version(response) if response is not None else None
        if version and version in self._recent.get(name, ()):
            self._awaiting.pop(name, None)
            return  # the watch was quicker than the response: the copy is our write or newer
        self._objects.pop(name, None)
        if version:
            self._awaiting[name] = version
        else:
            self._awaiting.pop(name, None)

    def forget(self, name: str) -> None:
        """Drop ``name``'s copy (after a 409: it was stale); the next watch event refills it."""
        self._objects.pop(name, None)

    def restart(self) -> None:
        """A watch is (re-)established: it starts with every object as it is now."""
        self._awaiting.clear()


def _version(obj: _Object) -> str | None:
    meta = getattr(obj, "metadata", None)
    return getattr(meta, "resourceVersion", None) if meta is not None else None

"""An in-memory stand-in for lightkube's AsyncClient, for unit tests of the controller's plumbing
(work queue, observations, coverage) where the real apiserver would make a test slow or
non-deterministic (a stuck eviction, a skewed clock). The real apiserver is used in
tests/integration; this fake only keeps what those behaviours need:

- objects by (kind, namespace, name), with a resourceVersion bumped on every write; a Lease's times
  stored as MicroTime text, as the apiserver does;
- get / list / watch (events to every open watch, ADDED for what exists when a watch opens);
- patch (JSON merge; ``metadata.resourceVersion`` in the body is a precondition: 409 on mismatch),
  replace (409 on a stale resourceVersion), create (Events, Pod.Eviction, anything else), delete;
- ``hooks``: an async callable per operation name, awaited before the operation runs, to make one
  call slow or fail (``hooks["evict"] = ...``).

Limits: no field selectors except ``metadata.name`` and ``spec.nodeName``, label selectors in
``list`` only (equality), no strategic merge (a patch of ``status.conditions`` merges by ``type`` as the apiserver does).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from lightkube import ApiError
from lightkube.models.meta_v1 import Status

from edgewatch.kube.listwatch import ApiUnavailable, Gone, WatchIdle
from edgewatch.timefmt import format_micro_time, parse_rfc3339


def api_error(code: int, message: str = "") -> ApiError:
    """An ApiError as lightkube raises it for an HTTP status ``code``."""
    return ApiError(status=Status(code=code, message=message or f"HTTP {code}"))


def _kind(res: Any) -> str:
    name = getattr(res, "__name__", type(res).__name__)
    return "Eviction" if name == "Eviction" else name


def _merge(target: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        else:
            target[key] = copy.deepcopy(value)
    return target


class FakeKube:
    """See the module docstring. ``objects[(kind, namespace or "", name)]`` holds plain dicts."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.rv = 0
        self.watchers: list[tuple[str, str | None, dict[str, str] | None, asyncio.Queue[tuple[str, dict]]]] = []
        self.hooks: dict[str, Callable[..., Awaitable[None]]] = {}
        self.calls: list[tuple[str, str, str]] = []
        self.evictions: list[str] = []
        self.events: list[dict[str, Any]] = []
        self.log: list[tuple[int, str, str, dict[str, Any]]] = []  # (resourceVersion, kind, op, object)

    # -- helpers for tests ----------------------------------------------------------------------

    def put(self, kind: str, obj: dict[str, Any]) -> dict[str, Any]:
        """Create or overwrite ``obj`` (a dict with metadata.name) and notify watches."""
        meta = obj.setdefault("metadata", {})
        if kind == "Lease":  # MicroTime, as the apiserver stores it (lightkube drops a zero fraction)
            for field in ("renewTime", "acquireTime"):
                if (obj.get("spec") or {}).get(field):
                    obj["spec"][field] = format_micro_time(parse_rfc3339(obj["spec"][field]))
        key = (kind, meta.get("namespace") or "", meta["name"])
        op = "MODIFIED" if key in self.objects else "ADDED"
        self.rv += 1
        meta["resourceVersion"] = str(self.rv)
        self.objects[key] = obj
        self._notify(kind, op, obj)
        return obj

    def obj(self, kind: str, name: str, namespace: str = "") -> dict[str, Any]:
        return self.objects[(kind, namespace, name)]

    def _notify(self, kind: str, op: str, obj: dict[str, Any]) -> None:
        self.log.append((self.rv, kind, op, copy.deepcopy(obj)))
        for wkind, wns, fields, queue in self.watchers:
            if wkind == kind and self._matches(obj, wns, fields):
                queue.put_nowait((op, copy.deepcopy(obj)))

    @staticmethod
    def _matches(obj: dict[str, Any], namespace: str | None, fields: dict[str, str] | None) -> bool:
        meta = obj["metadata"]
        if namespace not in (None, "*") and (meta.get("namespace") or "") != namespace:
            return False
        for field, value in (fields or {}).items():
            if field == "metadata.name" and meta["name"] != value:
                return False
            if field == "spec.nodeName" and (obj.get("spec") or {}).get("nodeName") != value:
                return False
        return True

    async def _hook(self, op: str, *args: Any) -> None:
        self.calls.append((op, *[str(a) for a in args]))
        hook = self.hooks.get(op)
        if hook is not None:
            await hook(*args)

    # -- the AsyncClient surface ----------------------------------------------------------------

    async def get(self, res: Any, name: str, *, namespace: str | None = None) -> Any:
        kind = _kind(res)
        await self._hook("get", kind, name)
        obj = self.objects.get((kind, namespace or "", name))
        if obj is None:
            raise api_error(404, f"{kind} {name} not found")
        return res.from_dict(copy.deepcopy(obj))

    def list(self, res: Any, *, namespace: str | None = None, fields: dict[str, str] | None = None,
             labels: dict[str, str] | None = None, **_: Any) -> AsyncIterator[Any]:
        kind = _kind(res)

        async def items() -> AsyncIterator[Any]:
            await self._hook("list", kind)
            for (k, _ns, _n), obj in list(self.objects.items()):
                have = obj["metadata"].get("labels") or {}
                if k == kind and self._matches(obj, namespace, fields) and \
                        all(have.get(key) == value for key, value in (labels or {}).items()):
                    yield res.from_dict(copy.deepcopy(obj))

        return items()

    def watch(self, res: Any, *, namespace: str | None = None, fields: dict[str, str] | None = None,
              **_: Any) -> AsyncIterator[tuple[str, Any]]:
        kind = _kind(res)

        async def events() -> AsyncIterator[tuple[str, Any]]:
            queue: asyncio.Queue[tuple[str, dict]] = asyncio.Queue()
            entry = (kind, namespace, fields, queue)
            for (k, _ns, _n), obj in list(self.objects.items()):
                if k == kind and self._matches(obj, namespace, fields):
                    queue.put_nowait(("ADDED", copy.deepcopy(obj)))
            self.watchers.append(entry)
            try:
                while True:
                    op, obj = await queue.get()
                    yield op, res.from_dict(obj)
            finally:
                self.watchers.remove(entry)

        return events()

    async def patch(self, res: Any, name: str, obj: Any, *, namespace: str | None = None, **_: Any) -> Any:
        kind = _kind(res)
        if kind in ("Status", "NodeStatus"):  # Node.Status
            kind = "Node"
        await self._hook("patch", kind, name)
        key = (kind, namespace or "", name)
        current = self.objects.get(key)
        if current is None:
            raise api_error(404)
        body = copy.deepcopy(obj)
        want_rv = (body.get("metadata") or {}).pop("resourceVersion", None)
        if want_rv is not None and want_rv != current["metadata"]["resourceVersion"]:
            raise api_error(409, "the object has been modified")
        conditions = ((body.get("status") or {}).pop("conditions", None))
        updated = _merge(copy.deepcopy(current), body)
        if conditions is not None:
            merged = {c["type"]: c for c in (updated.get("status") or {}).get("conditions") or []}
            merged.update({c["type"]: c for c in conditions})
            updated.setdefault("status", {})["conditions"] = list(merged.values())
        self.put(kind, updated)
        return res.from_dict(copy.deepcopy(updated)) if hasattr(res, "from_dict") else updated

    async def replace(self, obj: Any, name: str | None = None, *, namespace: str | None = None, **_: Any) -> Any:
        data = obj.to_dict()
        kind = data["kind"]
        meta = data["metadata"]
        await self._hook("replace", kind, meta["name"])
        key = (kind, meta.get("namespace") or "", meta["name"])
        current = self.objects.get(key)
        if current is None:
            raise api_error(404)
        if meta.get("resourceVersion") and meta["resourceVersion"] != current["metadata"]["resourceVersion"]:
            raise api_error(409, "the object has been modified")
        self.put(kind, data)
        return type(obj).from_dict(copy.deepcopy(data))

    async def create(self, obj: Any, name: str | None = None, *, namespace: str | None = None, **_: Any) -> Any:
        data = obj.to_dict()
        kind = data.get("kind") or type(obj).__name__
        if kind == "Eviction":
            pod = name or data["metadata"]["name"]
            await self._hook("evict", pod, namespace)
            key = ("Pod", namespace or "", pod)
            if key not in self.objects:
                raise api_error(404)
            self.evictions.append(f"{namespace}/{pod}")
            self.objects[key]["metadata"]["deletionTimestamp"] = "2030-01-01T00:00:00Z"
            self.put("Pod", self.objects[key])
            return obj
        await self._hook("create", kind, data["metadata"].get("name", ""))
        if kind == "Event":
            self.events.append(data)
            return obj
        key = (kind, data["metadata"].get("namespace") or namespace or "", data["metadata"]["name"])
        if key in self.objects:
            raise api_error(409, "already exists")
        self.put(kind, data)
        return type(obj).from_dict(copy.deepcopy(data))

    async def delete(self, res: Any, name: str, *, namespace: str | None = None, **_: Any) -> None:
        kind = _kind(res)
        await self._hook("delete", kind, name)
        obj = self.objects.pop((kind, namespace or "", name), None)
        if obj is None:
            raise api_error(404)
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        self._notify(kind, "DELETED", obj)

    def lister_watcher(self, resource: Any, *, namespace: str | None = None, label_selector: str | None = None,
                       field_selector: str | None = None) -> FakeListerWatcher:
        """What edgewatch.kube.listwatch.lister_watcher asks an in-memory client for."""
        assert label_selector is None, "the fake lister-watcher has no label selectors"
        fields = dict(term.split("=", 1) for term in field_selector.split(",")) if field_selector else None
        return FakeListerWatcher(self, resource, namespace=namespace, fields=fields)

    async def close(self) -> None:
        return None


class FakeListerWatcher:
    """edgewatch.kube.listwatch.ListerWatcher over a FakeKube: one page; a watch replays what
    happened after its resourceVersion, then follows live changes, and raises WatchIdle when nothing
    comes for its ``idle_timeout_s`` (as the HTTP one does on a silent connection);
    ``hooks["list"]`` and ``hooks["watch"]`` can make either slow or fail."""

    def __init__(self, kube: FakeKube, resource: Any, *, namespace: str | None,
                 fields: dict[str, str] | None) -> None:
        self.kube, self.resource, self.namespace, self.fields = kube, resource, namespace, fields

    async def _hook(self, op: str, kind: str) -> None:
        """A hook's ApiError as the HTTP lister-watcher reports it (410: Gone; others: unavailable)."""
        try:
            await self.kube._hook(op, kind)
        except ApiError as exc:
            if exc.status.code == 410:
                raise Gone() from None
            raise ApiUnavailable("server" if (exc.status.code or 500) >= 500 else "refused", str(exc)) from None

    async def list_page(self, *, limit: int, continue_token: str | None, timeout_s: float) -> dict[str, Any]:
        kind = self.resource.kind
        await self._hook("list", kind)
        items = [copy.deepcopy(obj) for (k, _ns, _n), obj in list(self.kube.objects.items())
                 if k == kind and self.kube._matches(obj, self.namespace, self.fields)]
        return {"items": items, "metadata": {"resourceVersion": str(self.kube.rv)}}

    @contextlib.asynccontextmanager
    async def watch(self, *, resource_version: str, server_timeout_s: int, open_timeout_s: float,
                    idle_timeout_s: float) -> AsyncIterator[AsyncIterator[dict[str, Any]]]:
        kind = self.resource.kind
        await self._hook("watch", kind)
        queue: asyncio.Queue[tuple[str, dict]] = asyncio.Queue()
        for rv, k, op, obj in self.kube.log:  # no await from here to registering: nothing is missed
            if rv > int(resource_version) and k == kind and self.kube._matches(obj, self.namespace, self.fields):
                queue.put_nowait((op, copy.deepcopy(obj)))
        entry = (kind, self.namespace, self.fields, queue)
        self.kube.watchers.append(entry)

        async def events() -> AsyncIterator[dict[str, Any]]:
            while True:
                try:  # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancellation (gh-86296)
                    async with asyncio.timeout(idle_timeout_s):
                        op, obj = await queue.get()
                except TimeoutError:
                    raise WatchIdle() from None
                yield {"type": op, "object": obj}

        try:
            yield events()
        finally:
            self.kube.watchers.remove(entry)

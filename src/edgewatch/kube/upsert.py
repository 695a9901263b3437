"""Create an object or update it in place, under optimistic concurrency: one helper for every
"make this object say this" write, in the spirit of controller-runtime's
``controllerutil.CreateOrUpdate(ctx, c, obj, mutate)``.

:func:`create_or_update` reads the object by name (and namespace, if it has one). Absent, it is
built from a copy of the caller's template, ``mutate`` applied, and created. Present, ``mutate`` is
applied to a copy of what was read, and the copy replaces it carrying the resourceVersion read (the
apiserver's precondition: a write in between makes it fail with 409 Conflict); if ``mutate``
changed nothing, nothing is written. A lost race (409 on the create or the replace, or 404 on the
replace: deleted after the read) reads again and decides again, a bounded number of times.

Limits: ``mutate`` sees whole objects and the replace sends the whole object back (an update, not
a patch): fields the apiserver or another writer set stay as they were read. Every request is
bounded by ``timeout_s`` on its own; a call makes at most ``2 * (conflict_retries + 1)`` of them.
"""

from __future__ import annotations

import asyncio
import copy
import enum
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from lightkube import ApiError, AsyncClient

from edgewatch.kube.errors import is_conflict, is_not_found

__all__ = ["Outcome", "Upserted", "create_or_update"]

log = logging.getLogger(__name__)

_R = TypeVar("_R")
_T = TypeVar("_T")


class Outcome(enum.StrEnum):
    """What :func:`create_or_update` did (controller-runtime's ``OperationResult``)."""

    CREATED = "created"      # it was absent: created from the template, mutated
    UPDATED = "updated"      # it was present and mutate changed it: replaced
    UNCHANGED = "unchanged"  # it was present and mutate changed nothing: nothing written


@dataclass(frozen=True)
class Upserted(Generic[_R]):
    """The result of :func:`create_or_update`: what it did, and the object as the apiserver now has
    it (the create's or the replace's answer; for UNCHANGED, the object read)."""

    outcome: Outcome
    obj: _R


async def _bounded(call: Awaitable[_T], timeout_s: float) -> _T:
    async with asyncio.timeout(timeout_s):
        return await call


def _identity(obj: Any) -> tuple[str | None, str | None]:
    meta = getattr(obj, "metadata", None)
    return (getattr(meta, "name", None), getattr(meta, "namespace", None))


async def create_or_update(*, client: AsyncClient, template: _R, mutate: Callable[[_R], None], timeout_s: float,
                           conflict_retries: int = 3) -> Upserted[_R]:
    """Make the object named by ``template`` what ``mutate`` makes of it; see the module docstring.

    Args (keyword-only):
        client: the API client (lightkube ``AsyncClient``).
        template: an object of the resource type, its ``metadata.name`` (and, for a namespaced
            resource, ``metadata.namespace``) set: names the object and, copied, is what ``mutate``
            starts from when it does not exist (labels, type and the like that only a new object
            gets go here). Never modified.
        mutate: brings an object to the wanted state, in place. Called once per attempt, on a copy
            (of the template, or of the object read); must not change the name or the namespace,
            and should be cheap and deterministic enough to run again after a lost race. What it
            raises propagates (nothing is written in that attempt).
        timeout_s: bound of each request (the GET, the create, the replace), seconds.
        conflict_retries: how many times a lost race (409 on the create or the replace; 404 on the
            replace) reads again and decides again (0: never).

    Returns:
        :class:`Upserted`: CREATED, UPDATED or UNCHANGED (nothing written), and the object.

    Raises:
        lightkube.ApiError: the apiserver refused a request (403, 422, ...); a 409 (or a replace's
            404) still there after ``conflict_retries`` re-reads; a create's 404 (the namespace
            does not exist).
        httpx.HTTPError, OSError: the request failed on the way.
        TimeoutError: one request took longer than ``timeout_s``.
        ValueError: ``template`` names no object, or ``mutate`` changed the name or namespace.
        Anything ``mutate`` raises.
        (All but ValueError and mutate's own are in :data:`edgewatch.kube.errors.API_ERRORS`.)
    """
    name, namespace = _identity(template)
    if not name:
        raise ValueError("create_or_update: the template has no metadata.name")
    res: Any = type(template)
    attempt = 0
    while True:
        try:
            current: Any = await _bounded(client.get(res, name, namespace=namespace), timeout_s)
        except ApiError as exc:
            if not is_not_found(exc):
                raise
            current = None
        source: Any = template if current is None else current
        desired: Any = copy.deepcopy(source)
        mutate(desired)
        if _identity(desired) != _identity(source):
            raise ValueError(f"create_or_update: mutate renamed {_identity(source)} to {_identity(desired)}")
        try:
            if current is None:
                created = await _bounded(client.create(desired), timeout_s)
                return Upserted(Outcome.CREATED, created)
            if desired.to_dict() == current.to_dict():
                return Upserted(Outcome.UNCHANGED, current)
            # the precondition: the write applies only to the version that was read
            desired.metadata.resourceVersion = current.metadata.resourceVersion
            replaced = await _bounded(client.replace(desired), timeout_s)
            return Upserted(Outcome.UPDATED, replaced)
        except ApiError as exc:
            lost = is_conflict(exc) or (current is not None and is_not_found(exc))
            if not lost or attempt >= conflict_retries:
                raise
            attempt += 1
            log.debug("%s %s/%s: %s while writing, reading again (retry %d of %d)", res.__name__, namespace, name,
                      exc.status.reason or exc.status.code, attempt, conflict_retries)

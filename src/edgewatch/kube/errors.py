"""What a call to the Kubernetes API may raise, classified once for every caller.

A caller that retries catches :data:`API_ERRORS`: the apiserver answered with an error Status
(lightkube's ``ApiError``), the HTTP exchange failed (httpx: connect, read, protocol, its own
timeouts), the socket failed (``OSError``), or the caller's own bound ran out (``TimeoutError``,
from ``asyncio.timeout``: every call edgewatch makes is bounded). Anything else is a bug and is
not caught here.

What an error Status means is read with the predicates, in the style of apimachinery's
``apierrors.IsNotFound`` / ``IsConflict``: :func:`is_not_found` (404), :func:`is_conflict` (409),
:func:`is_already_exists` (409, reason ``AlreadyExists``), :func:`is_gone` (410) and
:func:`is_too_many_requests` (429), the status codes of the Kubernetes API Conventions
(``https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#http-status-codes``).
Each is False for anything that is not an apiserver error Status (a transport error, a timeout,
a bug), so ``except API_ERRORS as exc: if is_not_found(exc): ...`` is safe.
:func:`status_code` stays for logging.

Limits: only the classes and the codes; what a code means to the caller (404 gone, 409 someone
else wrote first, 429 a PodDisruptionBudget) stays with the caller.
"""

from __future__ import annotations

from typing import Final

import httpx2 as httpx
from lightkube import ApiError

__all__ = [
    "API_ERRORS", "is_already_exists", "is_conflict", "is_gone", "is_not_found", "is_too_many_requests",
    "status_code",
]

API_ERRORS: Final[tuple[type[BaseException], ...]] = (ApiError, httpx.HTTPError, OSError, TimeoutError)
"""The errors of one bounded API call that a caller logs, counts and retries."""


def status_code(exc: BaseException) -> int | None:
    """The HTTP status of an apiserver error Status (e.g. 404, 409), or None for any other error."""
    if isinstance(exc, ApiError):
        code = getattr(exc.status, "code", None)
        return code if isinstance(code, int) else None
    return None


def _reason(exc: BaseException) -> str | None:
    """The Status ``reason`` (``NotFound``, ``AlreadyExists``, ``Conflict``, ...), or None."""
    if isinstance(exc, ApiError):
        reason = getattr(exc.status, "reason", None)
        return reason if isinstance(reason, str) else None
    return None


def is_not_found(exc: BaseException) -> bool:
    """404 Not Found: the object (or its namespace) does not exist. A read of it, an update, a
    patch, a delete or a subresource create (an Eviction of a Pod that is gone) names nothing."""
    return status_code(exc) == 404


def is_conflict(exc: BaseException) -> bool:
    """409 Conflict, whatever its reason: a write lost a race. Either an update or patch carried a
    stale ``metadata.resourceVersion`` (reason ``Conflict``, the optimistic-concurrency
    precondition failed), or a create named an object that exists (reason ``AlreadyExists``).

    Broader than apimachinery's ``IsConflict``, which leaves AlreadyExists out: edgewatch's callers
    treat both the same (read again, or someone else won); :func:`is_already_exists` tells them apart.
    """
    return status_code(exc) == 409


def is_already_exists(exc: BaseException) -> bool:
    """409 with reason ``AlreadyExists``: a create named an object that exists (another writer
    created it first). False for a 409 of a stale resourceVersion (reason ``Conflict``)."""
    return status_code(exc) == 409 and _reason(exc) == "AlreadyExists"


def is_gone(exc: BaseException) -> bool:
    """410 Gone: the resourceVersion asked for is older than the apiserver still keeps (reason
    ``Expired`` on a list or watch, ``Gone`` elsewhere); the caller re-lists from now."""
    return status_code(exc) == 410


def is_too_many_requests(exc: BaseException) -> bool:
    """429 Too Many Requests: try again later. The apiserver's rate limit or priority-and-fairness
    queue, or an Eviction refused because it would break a PodDisruptionBudget."""
    return status_code(exc) == 429

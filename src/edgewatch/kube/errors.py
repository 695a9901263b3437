"""What a call to the Kubernetes API may raise, classified once for every caller.

A caller that retries catches :data:`API_ERRORS`: the apiserver answered with an error Status
(lightkube's ``ApiError``), the HTTP exchange failed (httpx: connect, read, protocol, its own
timeouts), the socket failed (``OSError``), or the caller's own bound ran out (``TimeoutError``,
from ``asyncio.timeout``: every call edgewatch makes is bounded). Anything else is a bug and is
not caught here.

Limits: only the classes; what a status code means to the caller (404 gone, 409 conflict, 429
a PodDisruptionBudget) stays with the caller, read with :func:`status_code`.
"""

from __future__ import annotations

from typing import Final

import httpx2 as httpx
from lightkube import ApiError

__all__ = ["API_ERRORS", "status_code"]

API_ERRORS: Final[tuple[type[BaseException], ...]] = (ApiError, httpx.HTTPError, OSError, TimeoutError)
"""The errors of one bounded API call that a caller logs, counts and retries."""


def status_code(exc: BaseException) -> int | None:
    """The HTTP status of an apiserver error Status (e.g. 404, 409), or None for any other error."""
    if isinstance(exc, ApiError):
        code = getattr(exc.status, "code", None)
        return code if isinstance(code, int) else None
    return None

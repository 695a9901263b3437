"""The coordinator's errors: ``CoordinatorError`` (a reason for metrics and logs, a message for
the operator) and ``classify_error``, which turns whatever a session raised into one (the reasons
and hints of the package docstring's "Errors").

gRPC and aetcd are imported by :func:`classify_error` when it first runs (a session failed), not
with this module: an agent in a pool without a coordinator never loads them (about 11 MiB).
"""

from __future__ import annotations

__all__ = ["CoordinatorError", "Reconnect", "classify_error", "reconnect_of"]


class CoordinatorError(RuntimeError):
    """A coordinator problem with a clear message for the operator.

    Attributes:
        reason: short class for metrics/logs: ``config``, ``unreachable``, ``tls``, ``auth``,
            ``timeout``, ``etcd``, ``certificate_expired`` (``certlife``), ``internal``.
    """

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class Reconnect(Exception):
    """A session ended on purpose to reconnect at once (not an error): ``reason`` is
    ``certificate_rotated`` or ``trust_changed``."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def reconnect_of(exc: BaseException) -> Reconnect | None:
    """The :class:`Reconnect` a session ended with (also inside exception groups), else None."""
    if isinstance(exc, Reconnect):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = reconnect_of(inner)
            if found is not None:
                return found
    return None


def classify_error(exc: BaseException, *, url: str) -> CoordinatorError:
    """Turn an exception from a session into a ``CoordinatorError`` with a reason and a hint."""
    import aetcd  # noqa: PLC0415 - loaded only once a coordinator runs (module docstring)
    import grpc  # noqa: PLC0415

    leaf = exc
    while isinstance(leaf, BaseExceptionGroup) and leaf.exceptions:
        leaf = leaf.exceptions[0]
    if isinstance(leaf, CoordinatorError):
        return leaf
    cause = leaf.__cause__
    detail = str(leaf) or type(leaf).__name__
    code = cause.code() if isinstance(cause, grpc.aio.AioRpcError) else (
        leaf.code() if isinstance(leaf, grpc.aio.AioRpcError) else None)
    low = detail.lower()
    if isinstance(leaf, aetcd.exceptions.UnauthenticatedError) or code in (
            grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED) or "permission denied" in low:
        return CoordinatorError("auth", f"coordinator {url} refused this agent: {detail}; check its client "
                                        f"certificate and the etcd user/role for this node")
    # A client certificate the server rejects shows up as "Unwrap failed (TSI_DATA_CORRUPTED)".
    if any(word in low for word in ("ssl", "tls", "handshake", "certificate", "tsi_", "unwrap failed")):
        return CoordinatorError("tls", f"TLS with coordinator {url} failed: {detail}; check the CA, client "
                                       f"certificate and key, and that the scheme matches the server "
                                       f"(https:// for a TLS etcd)")
    if isinstance(leaf, (TimeoutError, aetcd.ConnectionTimeoutError, aetcd.WatchTimeoutError)) or \
            code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return CoordinatorError("timeout", f"coordinator {url} did not answer in time: {detail}")
    if isinstance(leaf, aetcd.ConnectionFailedError) or code == grpc.StatusCode.UNAVAILABLE:
        return CoordinatorError("unreachable", f"coordinator {url} unreachable: {detail}; check --coordinator "
                                               f"and that the pool's etcd is running (a TLS etcd needs https://)")
    if isinstance(leaf, aetcd.ClientError):
        return CoordinatorError("etcd", f"coordinator {url} returned an error: {detail}")
    return CoordinatorError("internal", f"coordinator session failed: {type(leaf).__name__}: {detail}")

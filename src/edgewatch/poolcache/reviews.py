"""The pure core of the pool cache's access control (:mod:`edgewatch.poolcache.authn`).

What it is for
    The values (:class:`UserInfo`, :class:`Attributes`, :class:`Refusal`, :class:`ReviewPolicy`),
    the bounded cache of the cloud's decisions (:class:`DecisionCache`), the choice between a
    cached decision and asking the cloud (:func:`next_step`), and the parsers of what comes from
    the network: the client's ``Authorization`` header (:func:`bearer_token`) and the cloud's
    TokenReview and SubjectAccessReview answers (:func:`parse_token_review`,
    :func:`parse_access_review`), plus kube-apiserver's 403 message (:func:`forbidden_message`).

Limits
    Pure: no I/O, no clock (``now`` is passed in, seconds on one monotonic clock), no globals.
    Behaviour, TTLs and their sources: :mod:`edgewatch.poolcache.authn`.
"""

from __future__ import annotations

import json
import re
from collections import Counter, OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass
from enum import Enum
from typing import Any, Final, Generic, TypeVar

__all__ = ["MAX_REVIEW_BYTES", "MAX_TOKEN_BYTES", "Attributes", "Authentication", "Authorization", "DecisionCache",
           "Hit", "MalformedReview", "Refusal", "ReviewPolicy", "Step", "UserInfo", "bearer_token",
           "forbidden_message", "next_step", "parse_access_review", "parse_token_review"]

MAX_TOKEN_BYTES: Final = 16 * 1024
"""Longest bearer token considered, bytes (a ServiceAccount JWT is about 1 KiB)."""

MAX_REVIEW_BYTES: Final = 64 * 1024
"""Largest TokenReview / SubjectAccessReview response read, bytes."""

_TOKEN = re.compile(r"[\x21-\x7e]+")
_MAX_NAME = 1024        # bytes of a username, uid, group, extra key or value kept
_MAX_GROUPS = 256
_MAX_EXTRA_KEYS = 64
_MAX_EXTRA_VALUES = 64

V = TypeVar("V")


# -- values --------------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class UserInfo:
    """Who the cloud says a token is (TokenReview ``status.user``).

    Attributes:
        username: e.g. ``system:serviceaccount:kube-system:kube-proxy``.
        uid: the user's uid ("" if none).
        groups: e.g. ``("system:serviceaccounts", ..., "system:authenticated")``.
        extra: sorted ``(key, values)`` pairs (pod name, node name, credential id of bound tokens).
    """

    username: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def subject(self) -> dict[str, Any]:
        """The subject fields of a SubjectAccessReview spec."""
        out: dict[str, Any] = {"user": self.username, "groups": list(self.groups)}
        if self.uid:
            out["uid"] = self.uid
        if self.extra:
            out["extra"] = {k: list(v) for k, v in self.extra}
        return out


@dataclass(frozen=True, kw_only=True)
class Attributes:
    """What a request does (SubjectAccessReview ``resourceAttributes``).

    Attributes:
        verb: ``get``, ``list`` or ``watch``.
        group: API group ("" for core); version: e.g. ``v1``; resource: e.g. ``services``.
        namespace: "" for all namespaces (cluster scope); name: "" unless one object.
        path: a non-resource URL such as ``/metrics`` (then ``nonResourceAttributes``; group,
            version and resource are ignored), "" for a resource request.
    """

    verb: str
    group: str = ""
    version: str = ""
    resource: str = ""
    namespace: str = ""
    name: str = ""
    path: str = ""

    def resource_attributes(self) -> dict[str, str]:
        """The ``resourceAttributes`` of a SubjectAccessReview (empty fields left out)."""
        out = {"verb": self.verb, "group": self.group, "version": self.version, "resource": self.resource}
        if self.namespace:
            out["namespace"] = self.namespace
        if self.name:
            out["name"] = self.name
        return out

    def review_attributes(self) -> dict[str, dict[str, str]]:
        """The attributes part of a SubjectAccessReview spec: ``{"nonResourceAttributes": {path,
        verb}}`` for a path, else ``{"resourceAttributes": ...}``."""
        if self.path:
            return {"nonResourceAttributes": {"path": self.path, "verb": self.verb}}
        return {"resourceAttributes": self.resource_attributes()}


@dataclass(frozen=True)
class Authentication:
    """A TokenReview's answer: ``user`` when authenticated, else None; ``error`` the cloud's
    ``status.error`` (untrusted, for the log only, never sent to the client)."""

    user: UserInfo | None
    error: str = ""


@dataclass(frozen=True)
class Authorization:
    """A SubjectAccessReview's answer: ``allowed`` and the authorizer's ``reason`` (untrusted)."""

    allowed: bool
    reason: str = ""


@dataclass(frozen=True, kw_only=True)
class Refusal:
    """Why a request is refused: the HTTP ``code`` (401, 403, 503), the ``reason`` label of the
    refusal metric, the ``Status`` reason and message for the client, and ``retry_after_s``
    (503 only)."""

    code: int
    reason: str
    status_reason: str
    message: str
    retry_after_s: int | None = None
    details: dict[str, str] | None = None


class MalformedReview(ValueError):
    """A review response that is not what the API defines."""


@dataclass(frozen=True, kw_only=True)
class ReviewPolicy:
    """TTLs (seconds) and bounds of the review caches (module docstring: why these values).

    Raises:
        ValueError: a TTL, timeout or rate is not > 0, or a bound < 1.
    """

    authenticated_ttl_s: float = 120.0
    unauthenticated_ttl_s: float = 10.0
    allowed_ttl_s: float = 300.0
    denied_ttl_s: float = 30.0
    max_positive: int = 1024
    max_negative: int = 256
    review_timeout_s: float = 5.0
    reviews_per_s: float = 10.0
    review_burst: float = 20.0
    max_concurrent: int = 4
    log_every_s: float = 10.0
    retry_after_s: int = 5

    def __post_init__(self) -> None:
        if min(self.authenticated_ttl_s, self.unauthenticated_ttl_s, self.allowed_ttl_s, self.denied_ttl_s,
               self.review_timeout_s, self.reviews_per_s, self.log_every_s) <= 0:
            raise ValueError("review TTLs, timeout, rate and log interval must be > 0 seconds")
        if min(self.max_positive, self.max_negative, self.max_concurrent, self.retry_after_s) < 1 or \
                self.review_burst < 1:
            raise ValueError("review cache bounds, burst, concurrency and Retry-After must be >= 1")


# -- the pure core: cache, next step, parsing ----------------------------------------------------------------


@dataclass(frozen=True)
class Hit(Generic[V]):
    """A cached decision: its value, and whether it is still within its TTL."""

    value: V
    fresh: bool


@dataclass
class _Entry(Generic[V]):
    value: V
    stored_at: float
    owner: Hashable = None


class DecisionCache(Generic[V]):
    """Decisions by key, positive and negative apart, each bounded and least-recently-used first out.

    Pure: no clock (``now`` in seconds on one monotonic clock is passed in), no I/O. An entry is
    *fresh* while younger than its TTL and *stale* after; stale entries are kept (the caller uses
    them only when the cloud cannot be asked) until pushed out by newer entries of their kind.

    Args (keyword-only):
        positive_ttl_s, negative_ttl_s: freshness of positive / negative decisions, seconds.
        max_positive, max_negative: entries of each kind kept.
    """

    def __init__(self, *, positive_ttl_s: float, negative_ttl_s: float, max_positive: int,
                 max_negative: int) -> None:
        self._ttl = {True: positive_ttl_s, False: negative_ttl_s}
        self._max = {True: max_positive, False: max_negative}
        self._entries: dict[bool, OrderedDict[bytes, _Entry[V]]] = {True: OrderedDict(), False: OrderedDict()}

    def get(self, key: bytes, *, now: float) -> Hit[V] | None:
        """The decision for ``key`` (marked recently used), or None."""
        for positive, entries in self._entries.items():
            entry = entries.get(key)
            if entry is not None:
                entries.move_to_end(key)
                return Hit(entry.value, fresh=0.0 <= now - entry.stored_at < self._ttl[positive])
        return None

    def put(self, key: bytes, value: V, *, positive: bool, now: float, owner: Hashable = None) -> None:
        """Store ``value`` for ``key`` as of ``now``; replaces a decision of either kind. When the
        kind is full, the least recently used entry of the owner holding the most goes first: one
        user's many requests (a local client asking for every name it may read) push out only its
        own decisions, never kube-proxy's."""
        self._entries[not positive].pop(key, None)
        entries = self._entries[positive]
        entries[key] = _Entry(value, now, owner)
        entries.move_to_end(key)
        while len(entries) > self._max[positive]:
            counts = Counter(e.owner for e in entries.values())
            heaviest = max(counts, key=lambda o: counts[o])
            victim = next(k for k, e in entries.items() if e.owner == heaviest)
            del entries[victim]

    def sizes(self) -> tuple[int, int]:
        """(positive, negative) entries held."""
        return len(self._entries[True]), len(self._entries[False])


class Step(Enum):
    """What to do for one lookup (:func:`next_step`)."""

    USE = "use"              # the cached decision (fresh, or stale while the cloud cannot be asked)
    ASK = "ask"              # ask the cloud; on failure fall back to the stale decision, if any
    UNVERIFIABLE = "refuse"  # no decision and the cloud cannot be asked


def next_step(hit: Hit[Any] | None, *, cloud_ok: bool, may_ask: bool, allows: bool = False) -> Step:
    """The step for a lookup (pure; table-tested).

    A decision past its TTL is used while the node is cut off (the last known state); while the
    cloud answers it is asked again, and if the budget is spent a stale *denial* stays a denial
    but a stale *allow* is never served (refused as unverifiable: the cloud could be asked, and an
    allow past its TTL is exactly what a revoked token would keep).

    Args:
        hit: the cached decision or None.
        cloud_ok: the node's cloud link is up (the agent's link check).
        may_ask: the review budget (rate limit) has room for one more review.
        allows: the cached decision lets the request through (an authenticated token, an allowed access).
    """
    if hit is not None and (hit.fresh or not cloud_ok):
        return Step.USE
    if cloud_ok and may_ask:
        return Step.ASK
    if hit is not None and not allows:
        return Step.USE
    return Step.UNVERIFIABLE


def bearer_token(header: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, or None (no header, another
    scheme, an empty, oversized or non-printable token). As kube-apiserver's bearer token
    authenticator (k8s.io/apiserver ``pkg/authentication/request/bearertoken``)."""
    if not header:
        return None
    parts = header.strip().split(" ")
    if len(parts) != 2 or parts[0].lower() != "bearer":
        return None
    token = parts[1]
    if not token or len(token) > MAX_TOKEN_BYTES or not _TOKEN.fullmatch(token):
        return None
    return token


def _string(value: object, what: str, *, required: bool = False) -> str:
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value):
        raise MalformedReview(f"{what} must be a string of at most {_MAX_NAME} bytes")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:  # a lone surrogate ("\ud800" in the JSON) is not text
        raise MalformedReview(f"{what} is not valid UTF-8") from None
    if size > _MAX_NAME:
        raise MalformedReview(f"{what} must be a string of at most {_MAX_NAME} bytes")
    return value


def _json_object(body: bytes, kind: str) -> dict[str, Any]:
    if len(body) > MAX_REVIEW_BYTES:
        raise MalformedReview(f"{kind} over {MAX_REVIEW_BYTES} bytes")
    try:
        doc = json.loads(body)
    except ValueError as exc:
        raise MalformedReview(f"{kind} is not JSON: {exc}") from None
    if not isinstance(doc, dict) or doc.get("kind") != kind or not isinstance(doc.get("status"), dict):
        raise MalformedReview(f"not a {kind} with a status")
    return doc


def parse_token_review(body: bytes) -> Authentication:
    """A TokenReview response (``authentication.k8s.io/v1``), checked field by field.

    Raises:
        MalformedReview: too large, not JSON, not a TokenReview, ``status.authenticated`` not a
            boolean, or an authenticated user without a username or with fields of the wrong
            type or over the bounds (1 KiB per string, 256 groups, 64 extra keys of 64 values).
    """
    status = _json_object(body, "TokenReview")["status"]
    authenticated = status.get("authenticated", False)
    if not isinstance(authenticated, bool):
        raise MalformedReview("status.authenticated must be a boolean")
    error = status.get("error")
    error = error[:300] if isinstance(error, str) else ""
    if not authenticated:
        return Authentication(None, error)
    user = status.get("user")
    if not isinstance(user, dict):
        raise MalformedReview("an authenticated TokenReview has no status.user")
    groups = user.get("groups") or []
    if not isinstance(groups, list) or len(groups) > _MAX_GROUPS:
        raise MalformedReview(f"status.user.groups must be a list of at most {_MAX_GROUPS}")
    extra = user.get("extra") or {}
    if not isinstance(extra, dict) or len(extra) > _MAX_EXTRA_KEYS:
        raise MalformedReview(f"status.user.extra must be a mapping of at most {_MAX_EXTRA_KEYS} keys")
    pairs = []
    for key, values in sorted(extra.items()):
        if not isinstance(values, list) or len(values) > _MAX_EXTRA_VALUES:
            raise MalformedReview("status.user.extra values must be lists")
        pairs.append((_string(key, "an extra key", required=True),
                      tuple(_string(v, "an extra value") for v in values)))
    return Authentication(UserInfo(username=_string(user.get("username"), "status.user.username", required=True),
                                   uid=_string(user.get("uid"), "status.user.uid"),
                                   groups=tuple(_string(g, "a group", required=True) for g in groups),
                                   extra=tuple(pairs)), error)


def parse_access_review(body: bytes) -> Authorization:
    """A SubjectAccessReview response (``authorization.k8s.io/v1``): ``status.allowed`` (a boolean,
    required) and ``status.reason`` (kept up to 300 characters).

    Raises:
        MalformedReview: too large, not JSON, not a SubjectAccessReview, or ``allowed`` missing
            or not a boolean.
    """
    status = _json_object(body, "SubjectAccessReview")["status"]
    allowed = status.get("allowed")
    if not isinstance(allowed, bool):
        raise MalformedReview("status.allowed must be a boolean")
    reason = status.get("reason")
    return Authorization(allowed and status.get("denied") is not True, reason[:300] if isinstance(reason, str) else "")


def forbidden_message(user: UserInfo, attrs: Attributes, reason: str = "") -> str:
    """kube-apiserver's 403 message (k8s.io/apiserver ``responsewriters.ForbiddenStatusError``):
    ``services is forbidden: User "u" cannot list resource "services" in API group "" at the
    cluster scope`` (``in the namespace "ns"``; ``services "x" is forbidden`` for one object;
    ``forbidden: User "u" cannot get path "/metrics"`` for a non-resource URL)."""
    if attrs.path:  # ``forbidden: User "u" cannot get path "/metrics"``
        msg = f'forbidden: User "{user.username}" cannot {attrs.verb} path "{attrs.path}"'
        msg = msg.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
        return f"{msg}: {reason}" if reason else msg
    qualified = f"{attrs.resource}.{attrs.group}" if attrs.group else attrs.resource
    subject = f'{qualified} "{attrs.name}"' if attrs.name else qualified
    scope = f'in the namespace "{attrs.namespace}"' if attrs.namespace else "at the cluster scope"
    msg = (f'{subject} is forbidden: User "{user.username}" cannot {attrs.verb} resource "{attrs.resource}" '
           f'in API group "{attrs.group}" {scope}')
    msg = msg.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return f"{msg}: {reason}" if reason else msg

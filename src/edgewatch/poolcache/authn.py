"""Who may read the node-local pool cache: the cloud's TokenReview and SubjectAccessReview, cached.

What it is for
    The endpoint (:mod:`edgewatch.poolcache.apiserver`) listens on the node's loopback, which every
    host process and hostNetwork pod of the node reaches. It serves a cached object only to a
    client the *cloud* has authenticated and authorized for that read, as kube-apiserver would
    have: :class:`AccessControl` answers "may this ``Authorization`` header do this verb on this
    resource?" from decisions the cloud made, kept for a bounded time, and still honoured while the
    node is cut off from the cloud (the cache then serves its last known state; the clients it
    served keep being served). This is what the kubelet does for its own API (webhook
    authentication and authorization, k8s.io/apiserver ``authenticatorfactory/delegating.go`` and
    ``authorizerfactory/delegating.go``), with the same TTLs.

Behaviour
    1. **Token** (kube-apiserver's bearer token authenticator): ``Authorization: Bearer <token>``,
       the scheme case-insensitive, the token printable ASCII without spaces, at most
       :data:`MAX_TOKEN_BYTES`. Anything else, or no header: 401, and no call to the cloud.
    2. **Authentication**: a ``TokenReview`` (``authentication.k8s.io/v1``, no audiences: the
       apiserver's own) with the agent's credentials. The result (username, uid, groups, extra, or
       "not authenticated") is cached under HMAC-SHA256 of the token with a per-process random key
       (as k8s.io/apiserver's ``cached_token_authenticator.go``): the token itself is never stored,
       logged or compared. Not authenticated: 401.
    3. **Authorization**: a ``SubjectAccessReview`` (``authorization.k8s.io/v1``) with the user,
       groups, uid and extra the TokenReview returned and the request's ``resourceAttributes``
       (verb ``get``/``list``/``watch``, group, version, resource, namespace, name), cached under a
       hash of that spec. Denied: 403 with kube-apiserver's message.
    4. **Discovery** (``/api``, ``/apis``, ...) needs authentication only: kube-apiserver grants it
       to ``system:authenticated`` (ClusterRole ``system:discovery``).

TTLs (:class:`ReviewPolicy`, seconds; Kubernetes' defaults for the kubelet's webhooks)
    * authenticated: 120 s (``authentication.webhook.cacheTTL``, 2 min): a deleted ServiceAccount
      or a revoked token reads for at most 2 more minutes, as with the kubelet;
    * not authenticated: 10 s (brief: a bogus token costs one review per 10 s, a just-created
      token is usable soon);
    * allowed: 300 s (``authorization.webhook.cacheAuthorizedTTL``, 5 min): RBAC changes reach
      the cache as they reach every kubelet;
    * denied: 30 s (``cacheUnauthorizedTTL``): a new RoleBinding works within 30 s.

Cut off from the cloud (the agent's link is down, or a review fails)
    A decision older than its TTL is re-checked before use while the cloud answers. When it
    cannot be (``cloud_ok()`` is False, the review times out or fails, or the node's review budget
    is spent, for a denial), the last decision is used, however old (after a review that timed out
    or found no route, no review is tried for :data:`UNREACHABLE_S`, 30 s, or until ``cloud_ok()``
    turns from False to True, so no request waits for another timeout meanwhile): a cached allow keeps working for as long
    as the node is cut off, as the cache's last known state does; a cached denial stays a denial.
    A token never seen before cannot be checked: 503 ``ServiceUnavailable`` with ``Retry-After``
    and a message saying so (never a 200: the cloud never vouched for it). While ``cloud_ok()`` is
    False no review is tried at all, so a cut-off node's clients never wait for a timeout.

Bounds
    Per cache :data:`ReviewPolicy.max_positive` positive and ``max_negative`` negative entries,
    least recently used dropped first; negative entries never push out positive ones (a flood of
    bogus tokens cannot evict kube-proxy's allow). Reviews sent to the cloud: a token bucket
    (``reviews_per_s``, ``review_burst``) per client address for tokens not authenticated yet, all
    of them also drawing on one shared bucket four times deeper, and one per authenticated user
    (refreshing kube-proxy's decisions never waits for a flood of bogus tokens or for another
    user's requests), and at most ``max_concurrent`` at once, each bounded by
    ``review_timeout_s``. While the cloud answers, an allow past its TTL is never served: if its
    user's budget is spent the request is refused (503, ``rate_limited``); a denial stays one. Responses are read up to :data:`MAX_REVIEW_BYTES` and checked
    field by field (untrusted input); a malformed one counts as a failed review.

Refusals
    :class:`Refusal` (code, reason, message), counted as
    ``edgewatch_poolcache_refused_requests_total{code,reason}`` (reasons ``no_token``,
    ``unauthenticated``, ``forbidden``, ``cut_off``, ``unavailable``, ``rate_limited``), and
    logged at most once per reason every ``log_every_s`` with the number not logged. Reviews:
    ``edgewatch_poolcache_reviews_total{review,result}``; cache lookups:
    ``edgewatch_poolcache_review_cache_total{review,result}`` (fresh, stale, refreshed, miss); entries:
    ``edgewatch_poolcache_review_cache_entries{review,kind}``.

Limits
    One agent's view: decisions are not shared between the nodes of a pool, so a token first
    used on a node while that node is cut off is refused even if another node has seen it. No
    ``selfsubjectaccessreviews``, impersonation, or field/label selectors in the authorization
    (kube-apiserver's RBAC ignores them too).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import secrets
import time
from collections.abc import Callable, Hashable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Protocol, TypeVar

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from edgewatch.core.ratelimit import RateLimiter
from edgewatch.kube.api import HttpClient, HttpError, HttpTimeout, HttpTimeoutError
from edgewatch.poolcache.reviews import (MAX_REVIEW_BYTES, Attributes, Authentication, Authorization, DecisionCache,
                                         MalformedReview, Refusal, ReviewPolicy, Step, UserInfo, bearer_token,
                                         forbidden_message, next_step, parse_access_review, parse_token_review)

__all__ = ["AccessControl", "Attributes", "CloudReviewClient", "Refusal", "ReviewClient", "ReviewPolicy",
           "ReviewUnavailable", "UserInfo"]

log = logging.getLogger(__name__)

#: The review budget's buckets for tokens not (yet) authenticated here start with this (then the address).
_NEW: Final = ("new",)
#: Review budget buckets kept (the shared one and one per authenticated user, least recently used dropped).
_BUDGET_SOURCES: Final = 256
#: After a review times out or finds no route, seconds during which no review is tried (cached
#: decisions are used, an unseen token is refused with 503), as while the link monitor says down.
UNREACHABLE_S: Final = 30.0
_REVIEW_PATHS: Final = {"token": "/apis/authentication.k8s.io/v1/tokenreviews",
                        "access": "/apis/authorization.k8s.io/v1/subjectaccessreviews"}

V = TypeVar("V")


class ReviewUnavailable(Exception):
    """The cloud could not give a review (network, timeout, HTTP error, malformed answer);
    ``reason`` is a short label: ``network``, ``timeout``, ``http_<code>``, ``malformed``."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason



# -- the cloud: thin I/O ---------------------------------------------------------------------------------------


class ReviewClient(Protocol):
    """Asks the cloud. Both methods raise :class:`ReviewUnavailable` when it gives no answer."""

    async def token_review(self, token: str, *, timeout_s: float) -> Authentication:
        """The cloud's TokenReview of ``token``."""
        ...

    async def access_review(self, user: UserInfo, attrs: Attributes, *, timeout_s: float) -> Authorization:
        """The cloud's SubjectAccessReview of ``user`` doing ``attrs``."""
        ...


class CloudReviewClient:
    """:class:`ReviewClient` over the agent's own cloud API client (lightkube's httpx client: base
    URL, TLS and the agent's ServiceAccount token, which RBAC lets ``create`` tokenreviews and
    subjectaccessreviews, deploy/10-rbac-agent.yaml). Every call is bounded by ``timeout_s``;
    answers are read up to :data:`MAX_REVIEW_BYTES` and parsed as untrusted input."""

    def __init__(self, *, http: HttpClient) -> None:
        self.http = http

    async def token_review(self, token: str, *, timeout_s: float) -> Authentication:
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}}
        return parse_token_review(await self._post("token", body, timeout_s=timeout_s))

    async def access_review(self, user: UserInfo, attrs: Attributes, *, timeout_s: float) -> Authorization:
        body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                "spec": {**user.subject(), **attrs.review_attributes()}}
        return parse_access_review(await self._post("access", body, timeout_s=timeout_s))

    async def _post(self, review: str, body: dict[str, Any], *, timeout_s: float) -> bytes:
        try:
            async with asyncio.timeout(timeout_s):
                async with self.http.stream("POST", _REVIEW_PATHS[review], json=body,
                                            timeout=HttpTimeout(timeout_s)) as resp:
                    chunks, size = [], 0
                    async for chunk in resp.aiter_bytes():
                        size += len(chunk)
                        if size > MAX_REVIEW_BYTES:
                            raise ReviewUnavailable("malformed", f"{review} review answer over {MAX_REVIEW_BYTES} "
                                                                 "bytes")
                        chunks.append(chunk)
                    if resp.status_code not in (200, 201):
                        raise ReviewUnavailable(f"http_{resp.status_code}", b"".join(chunks)[:300].decode(
                            errors="replace"))
        except (TimeoutError, HttpTimeoutError) as exc:
            raise ReviewUnavailable("timeout", f"no {review} review within {timeout_s} s") from exc
        except (HttpError, OSError) as exc:
            raise ReviewUnavailable("network", f"{type(exc).__name__}: {str(exc)[:200]}") from exc
        return b"".join(chunks)


# -- the control the endpoint calls ------------------------------------------------------------------------------


@dataclass
class _Counts:
    refused: dict[tuple[str, str], int] = field(default_factory=dict)     # (code, reason)
    reviews: dict[tuple[str, str], int] = field(default_factory=dict)     # (review, result)
    lookups: dict[tuple[str, str], int] = field(default_factory=dict)     # (review, fresh|stale|miss)

    @staticmethod
    def add(table: dict[tuple[str, str], int], key: tuple[str, str]) -> None:
        table[key] = table.get(key, 0) + 1


class AccessControl:
    """Decides, from the cloud's reviews, whether a request may read the cache (module docstring).

    Args (keyword-only):
        client: asks the cloud (:class:`CloudReviewClient` in the agent).
        cloud_ok: the node's cloud link state (False: no review is tried, cached decisions only).
        policy: TTLs and bounds.
        clock: monotonic seconds (tests pass their own).
        service: what is guarded, as refusal messages name it (default the pool cache).
        metric_prefix: the prefix of the collector's metric names (default ``edgewatch_poolcache``:
            ``<prefix>_refused_requests_total``, ``<prefix>_reviews_total``, ...).

    Keep one instance for the agent's life (decisions survive a restart of the endpoint) and
    register :attr:`collector` on each metrics registry that exports it.
    """

    def __init__(self, *, client: ReviewClient, cloud_ok: Callable[[], bool], policy: ReviewPolicy | None = None,
                 clock: Callable[[], float] = time.monotonic, service: str = "the node-local pool cache",
                 metric_prefix: str = "edgewatch_poolcache") -> None:
        self.client = client
        self.service = service
        self.metric_prefix = metric_prefix
        self.cloud_ok = cloud_ok
        self.policy = p = policy or ReviewPolicy()
        self.clock = clock
        self._hmac_key = secrets.token_bytes(32)
        self.tokens: DecisionCache[Authentication] = DecisionCache(
            positive_ttl_s=p.authenticated_ttl_s, negative_ttl_s=p.unauthenticated_ttl_s,
            max_positive=p.max_positive, max_negative=p.max_negative)
        self.access: DecisionCache[Authorization] = DecisionCache(
            positive_ttl_s=p.allowed_ttl_s, negative_ttl_s=p.denied_ttl_s,
            max_positive=p.max_positive, max_negative=p.max_negative)
        # one bucket for tokens never authenticated, one per authenticated user: a flood of bogus
        # tokens, or one user's many requests, never spends another user's reviews
        self._budget = RateLimiter(rate_per_s=p.reviews_per_s, burst=p.review_burst, max_sources=_BUDGET_SOURCES)
        # tokens never authenticated: a bucket per client address as well as the shared one, so
        # a flood from one address spends its own bucket before the shared one (4 times deeper)
        self._new_budget = RateLimiter(rate_per_s=4 * p.reviews_per_s, burst=4 * p.review_burst, max_sources=1)
        self._slots = asyncio.Semaphore(p.max_concurrent)
        self._unreachable_until = -float("inf")  # a review timed out or found no route: until then
        self._unreachable_why = ""
        self._link_was_up = True
        self.counts = _Counts()
        self._logged: dict[str, tuple[float, int]] = {}   # reason -> (last logged at, refusals not logged)
        self.collector: Collector = _AccessCollector(self)

    def token_id(self, token: str) -> bytes:
        """HMAC-SHA256 of ``token`` under this process's random key: the cache key (its first 6
        bytes in hex name the token in logs; meaningless outside this process)."""
        return hmac.new(self._hmac_key, token.encode(), hashlib.sha256).digest()

    async def check(self, *, authorization: str | None, attributes: Attributes | None, path: str = "",
                    origin: str = "") -> UserInfo | Refusal:
        """The user if the request may go on, else why not.

        Args:
            authorization: the request's ``Authorization`` header, or None.
            attributes: what the request does, or None for discovery (authentication only).
            path: the request path, for the log.
            origin: the client's address ("" if unknown): a token never authenticated is reviewed
                from that address's share of the budget for new tokens, then the shared one.

        Never raises for the cloud's or the client's faults: those are refusals.
        """
        token = bearer_token(authorization)
        if token is None:
            return self._refuse(Refusal(code=401, reason="no_token", status_reason="Unauthorized",
                                        message=f"Unauthorized: {self.service} serves only clients with a "
                                                "bearer token the cloud apiserver authenticates"), path=path)
        key = self.token_id(token)
        who = key[:6].hex()
        authn = await self._decide("token", self.tokens, key, lambda t: self.client.token_review(token, timeout_s=t),
                                   positive=lambda a: a.user is not None,
                                   source=lambda a: ("user", a.user.username) if a is not None and a.user is not None
                                   else ("new", origin))
        if isinstance(authn, Refusal):
            return self._refuse(authn, path=path, who=who)
        if authn.user is None:
            return self._refuse(Refusal(code=401, reason="unauthenticated", status_reason="Unauthorized",
                                        message="Unauthorized"), path=path, who=who, cloud_said=authn.error)
        user = authn.user
        if attributes is None:
            return user
        spec = json.dumps({"subject": user.subject(), "resource": attributes.review_attributes()},
                          sort_keys=True).encode()
        authz = await self._decide("access", self.access, hashlib.sha256(spec).digest(),
                                   lambda t: self.client.access_review(user, attributes, timeout_s=t),
                                   positive=lambda a: a.allowed, source=lambda _a: ("user", user.username))
        if isinstance(authz, Refusal):
            return self._refuse(authz, path=path, who=who, user=user.username)
        if not authz.allowed:
            details = {"kind": attributes.resource, **({"group": attributes.group} if attributes.group else {}),
                       **({"name": attributes.name} if attributes.name else {})}
            return self._refuse(Refusal(code=403, reason="forbidden", status_reason="Forbidden",
                                        message=forbidden_message(user, attributes, authz.reason), details=details),
                                path=path, who=who, user=user.username)
        return user

    async def _decide(self, review: str, cache: DecisionCache[V], key: bytes,
                      ask: Callable[[float], Any], *, positive: Callable[[V], bool],
                      source: Callable[[V | None], Hashable]) -> V | Refusal:
        now = self.clock()
        hit = cache.get(key, now=now)
        link_up = self.cloud_ok()
        if link_up and not self._link_was_up:  # the link monitor saw the link come back: ask again
            self._unreachable_until = -float("inf")
        self._link_was_up = link_up
        # a review that timed out or found no route: the cloud is taken as unreachable for a while,
        # so requests use their cached decisions at once instead of each waiting for a timeout
        cloud_ok = link_up and now >= self._unreachable_until
        # the budget is spent only on a review actually sent, from the bucket of whom it is for
        # (the cached decision's user; a token never authenticated: its address's, then the shared one)
        bucket = source(hit.value if hit is not None else None)
        may_ask = cloud_ok and not (hit is not None and hit.fresh) and self._budget.allow(bucket, now=now) and (
            not (isinstance(bucket, tuple) and bucket[:1] == _NEW) or self._new_budget.allow(_NEW, now=now))
        step = next_step(hit, cloud_ok=cloud_ok, may_ask=may_ask, allows=hit is not None and positive(hit.value))
        if step is Step.USE:
            assert hit is not None
            _Counts.add(self.counts.lookups, (review, "fresh" if hit.fresh else "stale"))
            return hit.value
        if step is Step.UNVERIFIABLE:
            _Counts.add(self.counts.lookups, (review, "miss"))
            return self._unverifiable("cut_off" if not link_up else "rate_limited" if cloud_ok else "unavailable",
                                      review, detail=f"{self._unreachable_why} in the last {UNREACHABLE_S:g} s")
        timeout_s = self.policy.review_timeout_s
        try:  # every review slot busy for a whole timeout is the budget spent, not a failed review
            async with asyncio.timeout(timeout_s):
                await self._slots.acquire()
        except TimeoutError:
            if hit is not None and not positive(hit.value):
                _Counts.add(self.counts.lookups, (review, "stale"))
                return hit.value  # a stale denial stays a denial
            _Counts.add(self.counts.lookups, (review, "miss"))
            return self._unverifiable("rate_limited", review)
        try:
            async with asyncio.timeout(timeout_s):
                value = await ask(timeout_s)
        except (ReviewUnavailable, MalformedReview, TimeoutError) as exc:
            why = exc.reason if isinstance(exc, ReviewUnavailable) else (
                "timeout" if isinstance(exc, TimeoutError) else "malformed")
            _Counts.add(self.counts.reviews, (review, "error"))
            if why in ("timeout", "network"):
                self._unreachable_until, self._unreachable_why = self.clock() + UNREACHABLE_S, why
            detail = str(exc)[:200] or f"no answer within {timeout_s:g} s"
            self._note(f"review_error_{review}", f"{review} review failed ({why}): {detail}; "
                       + ("using the cached decision" if hit is not None else "refusing (never seen)"))
            if hit is not None:
                _Counts.add(self.counts.lookups, (review, "stale"))
                return hit.value
            _Counts.add(self.counts.lookups, (review, "miss"))
            return self._unverifiable("unavailable", review, detail=why)
        finally:
            self._slots.release()
        ok = positive(value)
        _Counts.add(self.counts.lookups, (review, "miss" if hit is None else "refreshed"))
        _Counts.add(self.counts.reviews, (review, {("token", True): "authenticated", ("token", False):
                                                   "unauthenticated", ("access", True): "allowed",
                                                   ("access", False): "denied"}[(review, ok)]))
        cache.put(key, value, positive=ok, now=self.clock(), owner=source(value))
        return value  # type: ignore[no-any-return]

    def _unverifiable(self, reason: str, review: str, *, detail: str = "") -> Refusal:
        what = "token" if review == "token" else "permission"
        why = {"cut_off": "this node is cut off from the cloud apiserver",
               "rate_limited": "this node's budget of reviews sent to the cloud apiserver is spent for now",
               "unavailable": f"the cloud apiserver gave no review ({detail})"}[reason]
        return Refusal(code=503, reason=reason, status_reason="ServiceUnavailable",
                       retry_after_s=self.policy.retry_after_s,
                       message=f"this {what} cannot be checked: {why}, and {self.service} has no earlier "
                               f"decision of the cloud for it (a client it served before keeps being served); "
                               f"retry once the link is back")

    def _refuse(self, refusal: Refusal, *, path: str, who: str = "", user: str = "", cloud_said: str = "") -> Refusal:
        _Counts.add(self.counts.refused, (str(refusal.code), refusal.reason))
        self._note(refusal.reason, f"{self.service} refused a request: {refusal.code} {refusal.reason}",
                   path=path, token=who or None, user=user or None, cloud_said=cloud_said or None)
        return refusal

    def _note(self, reason: str, message: str, **fields: Any) -> None:
        """Log ``message`` unless this reason was logged within ``log_every_s``; then say how many
        were not."""
        now = self.clock()
        last, quiet = self._logged.get(reason, (-float("inf"), 0))
        if now - last < self.policy.log_every_s:
            self._logged[reason] = (last, quiet + 1)
            return
        self._logged[reason] = (now, 0)
        suffix = f" ({quiet} more of this kind in the last {self.policy.log_every_s:g} s not logged)" if quiet else ""
        log.warning(message + suffix, extra={"kind": "pool_cache_access", "reason": reason,
                                             **{k: v for k, v in fields.items() if v is not None}})


class _AccessCollector(Collector):
    """Refusals, reviews, lookups and cache entries of one :class:`AccessControl`, read at scrape time."""

    def __init__(self, access: AccessControl) -> None:
        self._access = access

    def collect(self) -> Iterator[Any]:
        counts, prefix = self._access.counts, self._access.metric_prefix
        families: list[tuple[str, str, list[str], Mapping[tuple[str, str], int]]] = [
            (f"{prefix}_refused_requests", "Requests refused by the access control.",
             ["code", "reason"], counts.refused),
            (f"{prefix}_reviews", "TokenReviews and SubjectAccessReviews asked of the cloud, by result.",
             ["review", "result"], counts.reviews),
            (f"{prefix}_review_cache", "Review cache lookups: fresh (used), stale (past its TTL, used "
             "because the cloud could not be asked), refreshed (past its TTL, asked again), miss (never seen).",
             ["review", "result"], counts.lookups),
        ]
        for name, doc, labels, table in families:
            family = CounterMetricFamily(name, doc, labels=labels)
            for key, value in sorted(table.items()):
                family.add_metric(list(key), value)
            yield family
        entries = GaugeMetricFamily(f"{prefix}_review_cache_entries", "Decisions held by the review "
                                    "caches.", labels=["review", "kind"])
        for review, cache in (("token", self._access.tokens), ("access", self._access.access)):
            positive, negative = cache.sizes()
            entries.add_metric([review, "positive"], positive)
            entries.add_metric([review, "negative"], negative)
        yield entries

    def describe(self) -> Iterator[Any]:
        return iter(())

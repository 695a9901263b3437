"""Who may read ``/metrics``: the scraper's bearer token, authenticated and authorized by the cloud.

What it is for
    Every edgewatch process serves Prometheus text on a port of its node (the agent on the peer
    port, 51005; the pool coordinator on its ops port; the controller on 51006), reachable from the
    node's network and from every pod. The text names the group's members, the pool's leader and
    each node's cloud link state: what an attacker on the LAN would map first. So ``/metrics`` is
    served only to a client the cloud apiserver says may ``get`` the non-resource URL
    ``/edgewatch/metrics`` (:data:`METRICS_ATTRIBUTES`), as kube-controller-manager, the kubelet
    and controller-runtime's secure metrics serving do for their own (k8s.io/apiserver delegated
    authentication and authorization: a ``TokenReview``, then a ``SubjectAccessReview`` with
    ``nonResourceAttributes {path: /edgewatch/metrics, verb: get}``).
    ``/healthz`` and ``/readyz`` stay open: the kubelet probes them without a token and they say
    only "ok" or why not.

Who is allowed
    Whoever RBAC lets ``get`` ``/edgewatch/metrics``: the shipped ClusterRole
    ``edgewatch-metrics-reader`` (deploy/13-rbac-metrics.yaml), bound to the shipped
    ServiceAccount ``edgewatch-metrics-scraper`` whose token Secret the PodMonitor uses, or to a
    Prometheus's own ServiceAccount (a role for ``/metrics`` alone does not do). Agents' own
    tokens are not allowed: one node's credential reads no other node's metrics.

Behaviour
    :class:`edgewatch.poolcache.authn.AccessControl` with its TTLs, bounds and review budget (a
    flood of bogus tokens spends its address's bucket of reviews, then a shared one four times
    deeper; a scraper's token checked before keeps its own), under the
    metric prefix ``edgewatch_metrics_access`` (``..._refused_requests_total{code,reason}``,
    ``..._reviews_total``, ``..._review_cache_total``, ``..._review_cache_entries``). Refusals:
    401 (no or unknown token), 403 (not allowed), 503 (not checkable now, with no earlier decision
    for this token: cut off from the cloud, no review answered lately, or the review budget
    spent). While a node is cut off, a scraper allowed before
    keeps being served from the cached decision.

Cost
    One TokenReview per scraper token per 2 min and one SubjectAccessReview per 5 min, per
    process (each under 1 KiB each way); nothing per scrape.

Limits
    HTTP, not HTTPS: the token crosses the node network in the clear. And a bearer token sent to
    a node is the node's to keep: scraping a compromised agent gives it the scraper's token,
    which reads every edgewatch process's metrics (no other component's). The shipped PodMonitor
    scrapes only the controller, on cloud nodes; scrape agents only with that in mind. A flood of
    bogus tokens from several addresses can delay the first check of a new scraper token (503).
"""

from __future__ import annotations

import asyncio
from typing import Final, Protocol

from edgewatch.kube.api import HttpClient
from edgewatch.poolcache.authn import AccessControl, Attributes, CloudReviewClient, Refusal, ReviewPolicy

__all__ = ["METRICS_ATTRIBUTES", "LinkState", "MetricsGuard"]

METRICS_ATTRIBUTES: Final = Attributes(verb="get", path="/edgewatch/metrics")
"""What a scrape asks of RBAC: ``get`` on the non-resource URL ``/edgewatch/metrics``, a name of its
own, so that a token that reads edgewatch's metrics reads no other component's (kube-apiserver's,
kube-controller-manager's and the kubelet's ``/metrics``), as kube-rbac-proxy authorizes its
upstream by attributes of its own."""


class LinkState(Protocol):
    """Whether this node reaches the cloud now (the agent's ``CloudLinkMonitor``)."""

    @property
    def up(self) -> bool:
        """True while the cloud apiserver answers."""
        ...


class MetricsGuard:
    """Decides whether a request may read ``/metrics`` (module docstring).

    Args (keyword-only):
        http: the process's cloud API client (its ServiceAccount may ``create`` tokenreviews and
            subjectaccessreviews).
        link: whether the cloud is reachable now (down: cached decisions only, no review
            tried); None: taken as up (the controller, in the cloud; the pool coordinator, which
            has no link monitor: a review that times out makes it use cached decisions for
            30 s, ``poolcache.authn.UNREACHABLE_S``).
        policy: TTLs and bounds (defaults: :class:`ReviewPolicy`).

    Register :attr:`collector` on the process's metrics registry.
    """

    def __init__(self, *, http: HttpClient, link: LinkState | None = None, policy: ReviewPolicy | None = None) -> None:
        self._link = link
        self.access = AccessControl(client=CloudReviewClient(http=http), cloud_ok=self._cloud_ok, policy=policy,
                                    service="edgewatch's /metrics", metric_prefix="edgewatch_metrics_access")
        self.collector = self.access.collector

    def _cloud_ok(self) -> bool:
        return self._link is None or self._link.up

    async def check(self, authorization: str | None, *, origin: str = "") -> Refusal | None:
        """None if the request whose ``Authorization`` header is ``authorization``, from the
        address ``origin``, may read ``/metrics``, else the refusal (code 401, 403 or 503, and
        its message). Never raises for the client's or the cloud's faults."""
        verdict = await self.access.check(authorization=authorization, attributes=METRICS_ATTRIBUTES,
                                          path="/metrics", origin=origin)
        return verdict if isinstance(verdict, Refusal) else None

    def check_from_thread(self, authorization: str | None, *, loop: asyncio.AbstractEventLoop,
                          timeout_s: float, origin: str = "") -> Refusal | None:
        """:meth:`check` from a thread other than ``loop``'s (a WSGI server's), waiting at most
        ``timeout_s`` seconds; a check that does not finish in time is a 503 refusal."""
        future = asyncio.run_coroutine_threadsafe(self.check(authorization, origin=origin), loop)
        try:
            return future.result(timeout=timeout_s)
        except TimeoutError:
            future.cancel()
            return Refusal(code=503, reason="unavailable", status_reason="ServiceUnavailable",
                           message=f"the scraper's token could not be checked within {timeout_s:g} s",
                           retry_after_s=1)

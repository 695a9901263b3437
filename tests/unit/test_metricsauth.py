"""Who may read /metrics: the SubjectAccessReview of a non-resource URL, kube-apiserver's 403 for a
path, and the standard-library ops server with a guard (the controller's and the pool
coordinator's), read from another thread as Prometheus would, with a table of cloud answers
standing in for the apiserver's reviews (the real reviews: tests/integration/test_agent.py)."""

from __future__ import annotations

import asyncio
import urllib.error
import urllib.request

import httpx2 as httpx
from prometheus_client import CollectorRegistry, Counter

from edgewatch.metricsauth import METRICS_ATTRIBUTES, MetricsGuard
from edgewatch.opsserver import serve_ops
from edgewatch.poolcache.reviews import Attributes, Authentication, Authorization, UserInfo, forbidden_message

SCRAPER = UserInfo(username="system:serviceaccount:edgewatch:edgewatch-metrics-scraper")
AGENT = UserInfo(username="system:serviceaccount:edgewatch:edgewatch-agent")


class _Cloud:
    """The apiserver's answers: token ``scraper`` may get /metrics, ``agent`` is authenticated but
    not allowed, anything else is not authenticated. Records every review asked."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, object]] = []

    async def token_review(self, token: str, *, timeout_s: float) -> Authentication:
        self.asked.append(("token", token))
        return Authentication({"scraper": SCRAPER, "agent": AGENT}.get(token))

    async def access_review(self, user: UserInfo, attrs: Attributes, *, timeout_s: float) -> Authorization:
        self.asked.append(("access", attrs))
        return Authorization(user == SCRAPER and attrs == METRICS_ATTRIBUTES)


def test_a_scrape_asks_for_the_non_resource_url() -> None:
    assert METRICS_ATTRIBUTES.review_attributes() == {"nonResourceAttributes": {"path": "/edgewatch/metrics",
                                                                                 "verb": "get"}}
    services = Attributes(verb="list", group="", version="v1", resource="services")
    assert set(services.review_attributes()) == {"resourceAttributes"}


def test_the_403_names_the_path_as_kube_apiserver_does() -> None:
    assert forbidden_message(AGENT, METRICS_ATTRIBUTES) == (
        'forbidden: User "system:serviceaccount:edgewatch:edgewatch-agent" cannot get path "/edgewatch/metrics"')


def _get(url: str, token: str | None) -> tuple[int, str]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=15) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


async def test_the_ops_server_serves_metrics_only_to_the_reader() -> None:
    cloud = _Cloud()
    guard = MetricsGuard(http=httpx.AsyncClient())
    guard.access.client = cloud
    registry = CollectorRegistry()
    Counter("edgewatch_topology_secret", "what a stranger must not read", registry=registry).inc()
    registry.register(guard.collector)
    with serve_ops(address="127.0.0.1", port=0, registry=registry, guard=guard) as port:
        base = f"http://127.0.0.1:{port}"
        for token, code in ((None, 401), ("stolen", 401), ("agent", 403)):
            status, body = await asyncio.to_thread(_get, f"{base}/metrics", token)
            assert status == code and "edgewatch_topology_secret" not in body, (token, status, body)
        status, body = await asyncio.to_thread(_get, f"{base}/metrics", "agent")
        assert 'cannot get path "/edgewatch/metrics"' in body
        status, body = await asyncio.to_thread(_get, f"{base}/metrics", "scraper")
        assert status == 200 and "edgewatch_topology_secret_total 1.0" in body
        assert 'edgewatch_metrics_access_refused_requests_total{code="401",reason="no_token"} 1.0' in body
        assert 'edgewatch_metrics_access_refused_requests_total{code="403",reason="forbidden"} 2.0' in body
        # the kubelet's probes carry no token
        assert await asyncio.to_thread(_get, f"{base}/healthz", None) == (200, "ok\n")
        assert (await asyncio.to_thread(_get, f"{base}/readyz", None))[0] == 200
        # decisions are cached: a second scrape asks the cloud nothing
        asked = len(cloud.asked)
        assert (await asyncio.to_thread(_get, f"{base}/metrics", "scraper"))[0] == 200
        assert len(cloud.asked) == asked
    # no token never reaches the cloud
    assert ("token", None) not in cloud.asked


async def test_a_check_that_cannot_finish_is_a_503_not_a_hang() -> None:
    class _Silent(_Cloud):
        async def token_review(self, token: str, *, timeout_s: float) -> Authentication:
            await asyncio.sleep(3600)
            raise AssertionError("unreachable")

    guard = MetricsGuard(http=httpx.AsyncClient())
    guard.access.client = _Silent()
    loop = asyncio.get_running_loop()
    refusal = await asyncio.to_thread(guard.check_from_thread, "Bearer scraper", loop=loop, timeout_s=0.3)
    assert refusal is not None and refusal.code == 503


async def test_idle_connections_are_bounded_and_cut() -> None:
    """A flood of idle half-sent requests: at most MAX_CONNECTIONS threads; a request dripping a
    byte every half second is cut at the read deadline; a probe answered after."""
    import socket
    import threading

    from edgewatch import opsserver

    registry = CollectorRegistry()
    with serve_ops(address="127.0.0.1", port=0, registry=registry) as port:
        before = threading.active_count()
        idle = []
        for _ in range(3 * opsserver.MAX_CONNECTIONS):
            conn = socket.create_connection(("127.0.0.1", port), timeout=5)
            conn.sendall(b"GET /metrics HTTP/1.1\r\n")  # never finished
            idle.append(conn)
        await asyncio.sleep(0.5)
        # a thread and its deadline's timer per connection served, none for those closed at once
        assert threading.active_count() - before <= 2 * opsserver.MAX_CONNECTIONS
        for conn in idle:
            conn.close()
        # one byte a second never finishes a request: cut at the deadline, however it drips
        drip = socket.create_connection(("127.0.0.1", port), timeout=5)
        started, cut = asyncio.get_running_loop().time(), False
        for byte in b"GET /metrics HTTP/1.1\r\nHost: x" * 2:
            try:
                drip.sendall(bytes([byte]))
            except OSError:
                cut = True
                break
            await asyncio.sleep(0.5)
            if asyncio.get_running_loop().time() - started > opsserver.READ_TIMEOUT_S + 2:
                drip.setblocking(False)
                try:
                    cut = drip.recv(1) == b""
                except BlockingIOError:
                    cut = False
                except OSError:
                    cut = True
                break
        drip.close()
        assert cut, "a dripping request outlived the read deadline"
        assert await asyncio.to_thread(_get, f"http://127.0.0.1:{port}/healthz", None) == (200, "ok\n")


async def test_a_flood_of_bogus_tokens_from_one_address_spends_its_own_budget() -> None:
    """One address sends bogus tokens until its budget is spent; a new scraper token from another
    address is still reviewed (until the shared budget, four times deeper, is spent too)."""
    from edgewatch.poolcache.reviews import ReviewPolicy

    now = [0.0]
    guard = MetricsGuard(http=httpx.AsyncClient(), policy=ReviewPolicy(reviews_per_s=0.001, review_burst=3))
    guard.access.client = _Cloud()
    guard.access.clock = lambda: now[0]
    refusals = [await guard.check(f"Bearer bogus-{i}", origin="10.0.0.66") for i in range(10)]
    assert [r.code for r in refusals if r is not None] == [401] * 3 + [503] * 7  # 3 reviewed, then its budget
    assert await guard.check("Bearer scraper", origin="10.0.0.5") is None        # another address: reviewed

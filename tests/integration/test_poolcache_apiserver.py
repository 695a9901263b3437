"""The node-local pool cache endpoint against the REAL kubectl (v1.36.3, built by
edgewatch_lab.testing.binaries): discovery fallback, list, get, selectors, watch with live changes,
read-only refusal, TLS, and forwarding to an upstream with the client's own Authorization only;
and, on the real control plane, who may read it: the attacker on the node (no token, a bogus token,
a real token without rights) is refused, kube-proxy's token is served, also after the cloud is cut.

The protocol tests need only the kubectl binary, with a fixed table of review answers standing in
for the cloud (``_StaticReviews``); the access tests run the real TokenReview and
SubjectAccessReview on the session control plane with the agent's RBAC from deploy/. The
``binaries`` fixture builds what is missing and fails (never skips) when that is impossible.
"""

from __future__ import annotations

import asyncio
import json
import os
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from prometheus_client import CollectorRegistry, generate_latest

from edgewatch.poolcache.apiserver import Upstream, client_kubeconfig, make_app, self_signed_tls
from edgewatch.poolcache.authn import AccessControl, Attributes, UserInfo
from edgewatch.poolcache.reviews import Authentication, Authorization
from edgewatch.poolcache.resources import ENDPOINTSLICES, SERVICES
from edgewatch.poolcache.store import ResourceCache
from edgewatch_lab.testing.binaries import Binaries

from _poolauth import AgentCloud


def _svc(ns: str, name: str, rv: int, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"namespace": ns, "name": name, "resourceVersion": str(rv), "labels": labels or {},
                         "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"type": "ClusterIP", "clusterIP": "10.96.0.10", "ports": [{"port": 80, "protocol": "TCP"}]}}


def _slice(ns: str, name: str, rv: int, service: str, ip: str = "10.1.0.1",
           extra: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"namespace": ns, "name": name, "resourceVersion": str(rv),
                         "labels": {"kubernetes.io/service-name": service, **(extra or {})}},
            "addressType": "IPv4", "endpoints": [{"addresses": [ip], "conditions": {"ready": True}}],
            "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}


NODE_AUTH = {"Authorization": "Bearer node-token"}


class _StaticReviews:
    """The cloud's reviews as a fixed table: ``node-token`` is a user allowed everything."""

    async def token_review(self, token: str, *, timeout_s: float) -> Authentication:
        return Authentication(UserInfo(username="node-client", groups=("system:authenticated",))
                              if token == "node-token" else None)

    async def access_review(self, user: UserInfo, attrs: Attributes, *, timeout_s: float) -> Authorization:
        return Authorization(True)


class _Env:
    def __init__(self, tmp: Path, kubectl: Path) -> None:
        self.tmp, self.kubectl_path = tmp, kubectl
        self.caches = {ENDPOINTSLICES: ResourceCache(ENDPOINTSLICES), SERVICES: ResourceCache(SERVICES)}
        self.caches[SERVICES].replace([_svc("web", "front", 5, {"app": "front"}), _svc("db", "pg", 6)], "100",
                                      source="cloud")
        self.caches[ENDPOINTSLICES].replace([
            _slice("web", "front-abc", 7, "front"),
            _slice("db", "pg-xyz", 8, "pg", "10.1.0.2", {"service.kubernetes.io/headless": ""}),
        ], "100", source="cloud")
        self.registry = CollectorRegistry()
        self.runner: web.AppRunner | None = None
        self.url = ""
        self.ca_pem = b""
        self.kubeconfig = tmp / "kubeconfig"

    async def start(self, upstream: Upstream | None = None, token: str | None = "node-token",
                    access: AccessControl | None = None) -> None:
        ctx, self.ca_pem = self_signed_tls(dir=self.tmp / "tls")
        access = access or AccessControl(client=_StaticReviews(), cloud_ok=lambda: True)
        self.runner = web.AppRunner(make_app(caches=self.caches, upstream=upstream, registry=self.registry,
                                             access=access, max_request_timeout_s=60))
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0, ssl_context=ctx)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"https://127.0.0.1:{port}"
        self.kubeconfig.write_text(client_kubeconfig(server=self.url, ca_pem=self.ca_pem, token=token))

    async def kubectl(self, *args: str, check: bool = True) -> tuple[int, str, str]:
        proc = await asyncio.create_subprocess_exec(
            str(self.kubectl_path), "--kubeconfig", str(self.kubeconfig), *args, stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env={**os.environ, "HOME": str(self.tmp)})
        out, err = await asyncio.wait_for(proc.communicate(), 30)
        assert proc.returncode is not None
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({proc.returncode}): {err.decode()}")
        return proc.returncode, out.decode(), err.decode()

    def client_ssl(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cadata=self.ca_pem.decode())
        return ctx


@pytest.fixture
async def env(tmp_path: Path, binaries: Binaries) -> AsyncIterator[_Env]:
    e = _Env(tmp_path, binaries.kubectl)
    yield e
    if e.runner is not None:
        await e.runner.cleanup()


async def test_kubectl_list_get_and_selectors(env: _Env) -> None:
    await env.start()
    _, out, _ = await env.kubectl("get", "endpointslices", "-A", "-o", "json")
    doc = json.loads(out)
    assert [(i["metadata"]["namespace"], i["metadata"]["name"]) for i in doc["items"]] == [
        ("db", "pg-xyz"), ("web", "front-abc")]
    assert doc["items"][0]["kind"] == "EndpointSlice" and doc["items"][0]["endpoints"][0]["addresses"] == ["10.1.0.2"]

    _, out, _ = await env.kubectl("get", "svc", "-n", "web")
    assert out.split("\n")[0].split()[0] == "NAME" and "front" in out and "pg" not in out

    _, out, _ = await env.kubectl("get", "svc", "pg", "-n", "db", "-o", "json")
    assert json.loads(out)["spec"]["clusterIP"] == "10.96.0.10"
    code, _, err = await env.kubectl("get", "svc", "nope", "-n", "db", check=False)
    assert code == 1 and 'services "nope" not found' in err

    # kube-proxy's selector, kubectl -l and --field-selector
    _, out, _ = await env.kubectl("get", "endpointslices", "-A", "-o", "name", "-l",
                                  "!service.kubernetes.io/headless,!service.kubernetes.io/service-proxy-name")
    assert out.split() == ["endpointslice.discovery.k8s.io/front-abc"]
    _, out, _ = await env.kubectl("get", "endpointslices", "-A", "-o", "name", "-l", "kubernetes.io/service-name in (pg)")
    assert out.split() == ["endpointslice.discovery.k8s.io/pg-xyz"]
    _, out, _ = await env.kubectl("get", "svc", "-A", "-o", "name", "--field-selector", "metadata.namespace!=web")
    assert out.split() == ["service/pg"]
    # kube-proxy's own Service selector (the apiserver's Service fields); anything else is a 400.
    _, out, _ = await env.kubectl("get", "svc", "-A", "-o", "name", "--field-selector", "spec.clusterIP!=None")
    assert out.split() and "None" not in out
    code, _, err = await env.kubectl("get", "svc", "-A", "--field-selector", "spec.ports=80", check=False)
    assert code == 1 and "BadRequest" in err and "field label not supported" in err
    code, _, err = await env.kubectl("get", "svc", "-A", "-l", "a in b", check=False)
    assert code == 1 and "BadRequest" in err

    # read-only
    code, _, err = await env.kubectl("delete", "svc", "pg", "-n", "db", check=False)
    assert code == 1 and "MethodNotAllowed" in err
    assert env.caches[SERVICES].get(namespace="db", name="pg") is not None

    metrics = generate_latest(env.registry).decode()
    assert 'edgewatch_poolcache_requests_total{code="200",resource="core/v1/services",verb="list"}' in metrics
    assert 'edgewatch_poolcache_objects{resource="discovery.k8s.io/v1/endpointslices"} 2.0' in metrics


async def test_kubectl_discovery(env: _Env) -> None:
    await env.start()
    _, out, _ = await env.kubectl("api-resources")
    rows = {line.split()[0]: line.split() for line in out.strip().split("\n")[1:]}
    assert set(rows) == {"services", "endpointslices"}
    assert rows["services"] == ["services", "svc", "v1", "true", "Service"]
    assert rows["endpointslices"] == ["endpointslices", "discovery.k8s.io/v1", "true", "EndpointSlice"]
    _, out, _ = await env.kubectl("get", "--raw", "/apis")
    assert json.loads(out)["groups"][0]["name"] == "discovery.k8s.io"
    # not cached, no upstream: a clear 503
    code, _, err = await env.kubectl("get", "--raw", "/api/v1/pods", check=False)
    assert code == 1 and "no cloud apiserver is configured" in err


async def test_not_synced_is_503(env: _Env) -> None:
    env.caches[SERVICES] = ResourceCache(SERVICES)
    await env.start()
    code, _, err = await env.kubectl("get", "svc", "-A", check=False)
    assert code == 1 and "ServiceUnavailable" in err and "first sync" in err


async def _read_events(stream: asyncio.StreamReader, n: int) -> list[dict[str, Any]]:
    """The next n watch events kubectl prints (--output-watch-events -o json: one JSON document each)."""
    decoder, buf, out = json.JSONDecoder(), "", []
    while len(out) < n:
        line = await asyncio.wait_for(stream.readline(), 15)
        assert line, f"kubectl ended early after {out}"
        buf += line.decode()
        try:
            obj, end = decoder.raw_decode(buf.strip())
        except json.JSONDecodeError:
            continue
        out.append(obj)
        buf = buf.strip()[end:]
    return out


async def test_kubectl_watch_sees_changes(env: _Env) -> None:
    await env.start()
    proc = await asyncio.create_subprocess_exec(
        str(env.kubectl_path), "--kubeconfig", str(env.kubeconfig), "get", "endpointslices", "-A", "--watch",
        "--output-watch-events", "-o", "json", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        stdin=asyncio.subprocess.DEVNULL)
    assert proc.stdout is not None
    cache = env.caches[ENDPOINTSLICES]
    try:
        initial = await _read_events(proc.stdout, 2)
        assert [(e["type"], e["object"]["metadata"]["name"]) for e in initial] == [("ADDED", "pg-xyz"),
                                                                                   ("ADDED", "front-abc")]
        await _wait_for_watchers(cache)
        assert cache.apply("ADDED", _slice("web", "front-def", 101, "front", "10.1.0.9"))
        assert cache.apply("MODIFIED", _slice("web", "front-abc", 102, "front", "10.1.0.5"))
        assert cache.apply("DELETED", {"metadata": {"namespace": "db", "name": "pg-xyz", "resourceVersion": "103"}})
        live = await _read_events(proc.stdout, 3)
        assert [(e["type"], e["object"]["metadata"]["name"], e["object"]["metadata"]["resourceVersion"])
                for e in live] == [("ADDED", "front-def", "101"), ("MODIFIED", "front-abc", "102"),
                                   ("DELETED", "pg-xyz", "103")]
        assert live[1]["object"]["endpoints"][0]["addresses"] == ["10.1.0.5"]
        assert live[2]["object"]["endpoints"][0]["addresses"] == ["10.1.0.2"]  # the last state
        assert 'edgewatch_poolcache_watches{resource="discovery.k8s.io/v1/endpointslices"} 1.0' in \
            generate_latest(env.registry).decode()
    finally:
        proc.kill()
        await proc.wait()


async def _wait_for_watchers(cache: ResourceCache) -> None:
    for _ in range(100):
        if cache.stats.watchers:
            return
        await asyncio.sleep(0.05)
    raise AssertionError("kubectl never opened its watch")


async def test_watch_protocol_over_https(env: _Env) -> None:
    """The raw stream as client-go reads it: WatchList initial events, bookmarks, 410 on relist."""
    await env.start()
    cache = env.caches[SERVICES]
    async with aiohttp.ClientSession(headers=NODE_AUTH) as http:
        url = f"{env.url}/api/v1/services?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan" \
              "&allowWatchBookmarks=true&timeoutSeconds=10"
        async with http.get(url, ssl=env.client_ssl()) as resp:
            assert resp.status == 200 and resp.content_type == "application/json"
            lines = [json.loads(await asyncio.wait_for(resp.content.readline(), 5)) for _ in range(3)]
            assert [(e["type"], e["object"]["metadata"].get("name")) for e in lines] == [
                ("ADDED", "pg"), ("ADDED", "front"), ("BOOKMARK", None)]
            assert lines[2]["object"]["metadata"] == {"resourceVersion": "100",
                                                      "annotations": {"k8s.io/initial-events-end": "true"}}
            cache.bookmark("120")
            bookmark = json.loads(await asyncio.wait_for(resp.content.readline(), 5))
            assert bookmark == {"type": "BOOKMARK", "object": {"kind": "Service", "apiVersion": "v1",
                                                               "metadata": {"resourceVersion": "120"}}}
            cache.replace([], "130", source="coordinator")
            error = json.loads(await asyncio.wait_for(resp.content.readline(), 5))
            assert error["type"] == "ERROR" and error["object"]["code"] == 410
            assert error["object"]["reason"] == "Expired"
            assert await asyncio.wait_for(resp.content.read(), 5) == b""  # the stream ends
        async with http.get(f"{env.url}/api/v1/services?watch=1&resourceVersion=120", ssl=env.client_ssl()) as resp:
            assert resp.status == 410 and (await resp.json())["reason"] == "Expired"
        async with http.get(f"{env.url}/api/v1/services?resourceVersion=999", ssl=env.client_ssl()) as resp:
            body = await resp.json()
            assert resp.status == 504 and body["details"]["causes"][0]["reason"] == "ResourceVersionTooLarge"
        async with http.get(f"{env.url}/api/v1/services?watch=true&timeoutSeconds=1&resourceVersion=130",
                            ssl=env.client_ssl()) as resp:
            assert await asyncio.wait_for(resp.content.read(), 5) == b""  # ends after timeoutSeconds
        async with http.get(f"{env.url}/api/v1/services?watch=yes", ssl=env.client_ssl()) as resp:
            assert resp.status == 400
        # a write is refused without reading its body
        async with http.post(f"{env.url}/api/v1/namespaces/db/services", data=b"x" * 100,
                             ssl=env.client_ssl()) as resp:
            assert resp.status == 405


async def test_tls_files_are_reused(tmp_path: Path) -> None:
    _, pem1 = self_signed_tls(dir=tmp_path)
    _, pem2 = self_signed_tls(dir=tmp_path)
    assert pem1 == pem2
    assert (tmp_path / "poolcache-tls.key").stat().st_mode & 0o077 == 0
    _, pem3 = self_signed_tls(dir=tmp_path, hosts=("127.0.0.1", "node-a.local"))  # a new host: new certificate
    assert pem3 != pem1


async def test_forwarding_passes_only_the_clients_authorization(env: _Env) -> None:
    seen: list[dict[str, str]] = []

    async def upstream_handler(request: web.Request) -> web.StreamResponse:
        seen.append({"path": request.path_qs, "method": request.method, "body": (await request.read()).decode(),
                     **{k.lower(): v for k, v in request.headers.items()}})
        if request.query.get("watch") == "true":
            resp = web.StreamResponse(headers={"Content-Type": "application/json"})
            await resp.prepare(request)
            for i in range(2):
                await resp.write(json.dumps({"type": "ADDED", "object": {"kind": "Pod", "apiVersion": "v1",
                                 "metadata": {"name": f"p{i}", "namespace": "x", "resourceVersion": str(i + 1)}}}
                                            ).encode() + b"\n")
            return resp
        if request.path == "/version":
            return web.json_response({"major": "1", "minor": "36", "gitVersion": "v1.36.3-upstream"})
        return web.json_response({"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "9"},
                                  "items": []}, status=201 if request.method == "POST" else 200)

    up = web.Application()
    up.router.add_route("*", "/{tail:.*}", upstream_handler)
    up_runner = web.AppRunner(up)
    await up_runner.setup()
    site = web.TCPSite(up_runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        await env.start(upstream=Upstream(url=f"http://127.0.0.1:{port}", tls=None, timeout_s=2))
        _, out, _ = await env.kubectl("get", "--raw", "/version")
        assert json.loads(out)["gitVersion"] == "v1.36.3-upstream"
        assert seen[-1]["authorization"] == "Bearer node-token"
        async with aiohttp.ClientSession() as http:
            # no Authorization from the client: none upstream either (we add no credential)
            async with http.get(f"{env.url}/api/v1/namespaces/x/pods?limit=5", ssl=env.client_ssl(),
                                headers={"X-Remote-User": "admin", "Cookie": "a=b"}) as resp:
                assert resp.status == 200 and (await resp.json())["kind"] == "PodList"
            last = seen[-1]
            assert last["path"] == "/api/v1/namespaces/x/pods?limit=5"
            assert "authorization" not in last and "x-remote-user" not in last and "cookie" not in last
            assert set(last) - {"path", "method", "body"} <= {"host", "user-agent", "content-length", "accept",
                                                              "accept-encoding", "content-type", "connection"}
            # a forwarded write keeps method, body and the client's own token
            async with http.post(f"{env.url}/api/v1/namespaces/x/pods", data=b'{"kind":"Pod"}',
                                 headers={"Authorization": "Bearer user-b", "Content-Type": "application/json"},
                                 ssl=env.client_ssl()) as resp:
                assert resp.status == 201
            assert (seen[-1]["method"], seen[-1]["body"], seen[-1]["authorization"]) == (
                "POST", '{"kind":"Pod"}', "Bearer user-b")
            # a forwarded watch is streamed
            async with http.get(f"{env.url}/api/v1/pods?watch=true", ssl=env.client_ssl()) as resp:
                names = [json.loads(line)["object"]["metadata"]["name"] async for line in resp.content]
            assert names == ["p0", "p1"]
            # too large a body: 413, never forwarded
            count = len(seen)
            async with http.post(f"{env.url}/api/v1/namespaces/x/configmaps", data=b"x" * (3 * 2**20 + 1),
                                 ssl=env.client_ssl()) as resp:
                assert resp.status == 413
            assert len(seen) == count
        # the cached resources are still served locally
        _, out, _ = await env.kubectl("get", "svc", "-A", "-o", "name")
        assert out.split() == ["service/pg", "service/front"]
        assert all("/services" not in s["path"] for s in seen)
    finally:
        await up_runner.cleanup()
    # upstream gone: 503 with a clear message
    code, _, err = await env.kubectl("get", "--raw", "/version", check=False)
    assert code == 1 and "unreachable" in err
    assert 'edgewatch_poolcache_forwarded_requests_total{code="503"} 1.0' in generate_latest(env.registry).decode()


async def test_idle_watch_of_a_vanished_client_is_closed(env: _Env) -> None:
    await env.start()
    cache = env.caches[SERVICES]
    async with aiohttp.ClientSession(headers=NODE_AUTH) as http:
        resp = await http.get(f"{env.url}/api/v1/services?watch=1&resourceVersion=100", ssl=env.client_ssl())
        assert resp.status == 200
        await _wait_for_watchers(cache)
        resp.close()  # the client goes away without a word; no event ever comes
    for _ in range(80):  # the server notices within its 5 s liveness check
        if cache.stats.watchers == 0:
            break
        await asyncio.sleep(0.1)
    assert cache.stats.watchers == 0
    assert 'edgewatch_poolcache_watches{resource="core/v1/services"} 0.0' in generate_latest(env.registry).decode()


# -- who may read: the attacker's view, on the real control plane -------------------------------------------------
#
# The attack (review): every host process and hostNetwork pod of a pool node reaches 127.0.0.1:51007, and
# the cache used to answer them without any credential. The tests below are the attacker: no token, a
# bogus token, a real token of a ServiceAccount the cloud does not authorize; then kube-proxy's own token
# (system:node-proxier), also after the cloud is cut.

@pytest.fixture
async def cloud(kube: Any, control_plane: Any) -> AsyncIterator[AgentCloud]:
    async with AgentCloud(kube, control_plane) as c:
        yield c


async def _read(http: aiohttp.ClientSession, env: _Env, path: str, token: str | None) -> tuple[int, dict[str, Any]]:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    async with http.get(f"{env.url}{path}", ssl=env.client_ssl(), headers=headers,
                        timeout=aiohttp.ClientTimeout(total=30)) as resp:
        return resp.status, await resp.json(content_type=None)


def _metric(registry: CollectorRegistry, line_start: str) -> float:
    for line in generate_latest(registry).decode().splitlines():
        if line.startswith(line_start):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


async def _start_guarded(env: _Env, cloud: AgentCloud, **ttls: float) -> None:
    """The endpoint as the agent runs it: reviews go to the real apiserver with the agent's own token."""
    await env.start(upstream=cloud.upstream(), access=cloud.access(**ttls))


@pytest.mark.controlplane
async def test_cached_reads_need_a_token_the_cloud_authenticates_and_authorizes(env: _Env, cloud: AgentCloud) -> None:
    await _start_guarded(env, cloud)
    async with aiohttp.ClientSession() as http:
        # The attacker, from the node's host network: no token, a bogus one, a real one without rights.
        for path in ("/api/v1/services", "/apis/discovery.k8s.io/v1/endpointslices",
                     "/api/v1/namespaces/db/services/pg", "/api/v1/services?watch=1&timeoutSeconds=1", "/api"):
            code, body = await _read(http, env, path, None)
            assert (code, body.get("kind"), body.get("reason")) == (401, "Status", "Unauthorized"), (path, body)
        code, body = await _read(http, env, "/api/v1/services", "not-a-real-token")
        assert (code, body["reason"]) == (401, "Unauthorized"), body
        code, body = await _read(http, env, "/api/v1/services", cloud.tokens["nobody"])
        assert (code, body["reason"]) == (403, "Forbidden"), body
        assert body["message"].startswith(f'services is forbidden: User "system:serviceaccount:{cloud.ns}:nobody" '
                                          'cannot list resource "services" in API group "" at the cluster scope')
        assert body["details"] == {"kind": "services"}
        code, body = await _read(http, env, "/apis/discovery.k8s.io/v1/namespaces/web/endpointslices?watch=1",
                                 cloud.tokens["nobody"])
        assert code == 403 and 'cannot watch resource "endpointslices" in API group "discovery.k8s.io" in the ' \
            'namespace "web"' in body["message"], body
        # kube-proxy's own token (system:node-proxier): served.
        code, body = await _read(http, env, "/api/v1/services", cloud.tokens["kube-proxy"])
        assert code == 200 and [i["metadata"]["name"] for i in body["items"]] == ["pg", "front"]
        code, body = await _read(http, env, "/apis/discovery.k8s.io/v1/endpointslices", cloud.tokens["kube-proxy"])
        assert code == 200 and len(body["items"]) == 2
        # Not cached, so forwarded with the client's own token, unchanged: the cloud judges it.
        code, body = await _read(http, env, "/api/v1/namespaces/default/pods", cloud.tokens["nobody"])
        assert (code, body["reason"]) == (403, "Forbidden") and "pods is forbidden" in body["message"], body
    env.kubeconfig.write_text(client_kubeconfig(server=env.url, ca_pem=env.ca_pem, token=cloud.tokens["kube-proxy"]))
    _, out, _ = await env.kubectl("get", "endpointslices", "-A", "-o", "name")
    assert out.split() == ["endpointslice.discovery.k8s.io/pg-xyz", "endpointslice.discovery.k8s.io/front-abc"]
    # Every refusal counted; the decisions came from the cloud's reviews.
    reg = env.registry
    assert _metric(reg, 'edgewatch_poolcache_refused_requests_total{code="401",reason="no_token"}') == 5
    assert _metric(reg, 'edgewatch_poolcache_refused_requests_total{code="401",reason="unauthenticated"}') == 1
    assert _metric(reg, 'edgewatch_poolcache_refused_requests_total{code="403",reason="forbidden"}') == 2
    assert _metric(reg, 'edgewatch_poolcache_reviews_total{result="authenticated",review="token"}') >= 2
    assert _metric(reg, 'edgewatch_poolcache_reviews_total{result="allowed",review="access"}') >= 2
    assert _metric(reg, 'edgewatch_poolcache_reviews_total{result="denied",review="access"}') == 2


@pytest.mark.controlplane
async def test_cached_decisions_hold_while_the_cloud_is_cut(env: _Env, cloud: AgentCloud) -> None:
    await _start_guarded(env, cloud, authenticated_ttl_s=1.0, allowed_ttl_s=1.0)
    async with aiohttp.ClientSession() as http:
        for token, want in (("kube-proxy", 200), ("nobody", 403)):
            code, _ = await _read(http, env, "/api/v1/services", cloud.tokens[token])
            assert code == want
        code, _ = await _read(http, env, "/apis/discovery.k8s.io/v1/endpointslices", cloud.tokens["kube-proxy"])
        assert code == 200
        code, _ = await _read(http, env, "/api/v1/services", "bogus")
        assert code == 401
        await cloud.relay.cut()
        await asyncio.sleep(1.5)  # kube-proxy's decisions are past their TTL: the cloud would be asked
        # The link is not yet known to be down: the review fails (connection refused) and the cached
        # allow is used, within the review timeout.
        started = asyncio.get_running_loop().time()
        code, body = await _read(http, env, "/api/v1/services", cloud.tokens["kube-proxy"])
        assert code == 200 and len(body["items"]) == 2
        assert asyncio.get_running_loop().time() - started < 6
        cloud.cloud_ok = False  # the agent's link check says: cut off
        for path in ("/api/v1/services", "/apis/discovery.k8s.io/v1/endpointslices"):
            code, _ = await _read(http, env, path, cloud.tokens["kube-proxy"])
            assert code == 200, path
        code, body = await _read(http, env, "/api/v1/services", cloud.tokens["nobody"])
        assert (code, body["reason"]) == (403, "Forbidden")  # a cached denial stays one
        code, body = await _read(http, env, "/api/v1/services", "bogus")
        assert code == 401
        # A token never seen before cannot be checked while cut off: refused, and told why.
        code, body = await _read(http, env, "/api/v1/services", cloud.tokens["latecomer"])
        assert (code, body["reason"]) == (503, "ServiceUnavailable"), body
        assert "cannot be checked" in body["message"] and "cut off" in body["message"], body
        # A permission never asked before (another verb) cannot be checked either.
        code, body = await _read(http, env, "/api/v1/namespaces/db/services/pg", cloud.tokens["kube-proxy"])
        assert (code, body["reason"]) == (503, "ServiceUnavailable") and "permission" in body["message"], body
        code, body = await _read(http, env, "/api/v1/services", None)
        assert code == 401
        assert _metric(env.registry, 'edgewatch_poolcache_review_cache_total{result="stale",review="token"}') >= 3
        assert _metric(env.registry, 'edgewatch_poolcache_refused_requests_total{code="503",reason="cut_off"}') == 2
        # The link is back: the latecomer is reviewed (and has no rights).
        await cloud.relay.start()
        cloud.cloud_ok = True
        code, body = await _read(http, env, "/api/v1/services", cloud.tokens["latecomer"])
        assert (code, body["reason"]) == (403, "Forbidden"), body


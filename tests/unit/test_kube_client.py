"""The API client and its raw handle (edgewatch.kube.client, edgewatch.kube.http): both reach the
kubeconfig's server with its credentials and the component's User-Agent, over one transport; a
fake or a bare lightkube client has no raw handle. A real HTTP server on loopback plays the
apiserver (only the requests' headers matter here)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from aiohttp import web
from lightkube import AsyncClient
from lightkube.config.kubeconfig import KubeConfig
from lightkube.resources.core_v1 import ConfigMap

from edgewatch.kube.client import CloudApi, api_client, user_agent
from edgewatch.kube.http import http_client_of


async def _apiserver(seen: list[tuple[str, str, str]]) -> tuple[web.AppRunner, int]:
    async def handle(request: web.Request) -> web.Response:
        seen.append((request.path, request.headers.get("Authorization", ""), request.headers.get("User-Agent", "")))
        if request.path == "/readyz":
            return web.Response(text="ok")
        return web.json_response({"apiVersion": "v1", "kind": "ConfigMap",
                                  "metadata": {"name": "c", "namespace": "n", "resourceVersion": "7"}})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    return runner, port


def _kubeconfig(tmp_path: Path, port: int) -> str:
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "x",
        "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
        "users": [{"name": "u", "user": {"token": "secret-token"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}]}))
    return str(path)


async def test_lightkube_calls_and_raw_requests_carry_the_credentials_and_the_user_agent(tmp_path: Path) -> None:
    seen: list[tuple[str, str, str]] = []
    runner, port = await _apiserver(seen)
    client = api_client(_kubeconfig(tmp_path, port), timeout_s=5, component="agent")
    try:
        cm = await client.get(ConfigMap, "c", namespace="n")
        assert cm.metadata.resourceVersion == "7"
        http = http_client_of(client)
        assert http is client.http
        assert (await http.get("/readyz")).text == "ok"
    finally:
        await client.close()
        await runner.cleanup()
    assert [path for path, _, _ in seen] == ["/api/v1/namespaces/n/configmaps/c", "/readyz"]
    assert all(auth == "Bearer secret-token" for _, auth, _ in seen)
    assert all(agent == user_agent("agent") for _, _, agent in seen)
    assert user_agent("agent").startswith("edgewatch-agent/")


async def test_closing_the_client_closes_its_raw_handle(tmp_path: Path) -> None:
    client = api_client(_kubeconfig(tmp_path, 1), timeout_s=1)
    assert isinstance(client, CloudApi)
    await client.close()
    assert client.http.is_closed


async def test_a_fake_or_a_bare_lightkube_client_has_no_raw_handle() -> None:
    assert http_client_of(object()) is None
    bare = AsyncClient(KubeConfig.from_dict({
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:6443"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x"}))
    assert http_client_of(bare) is None
    await bare.close()


def test_a_missing_kubeconfig_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(Exception, match="(?i)no such file|not found|kubeconfig|config"):
        api_client(str(tmp_path / "absent"), timeout_s=1)

"""What the pool cache's access tests share: a TCP relay to the apiserver that a test can cut and
restore (a node's uplink to the cloud), and the cloud identities of those tests (the agent with the
ClusterRole of deploy/10-rbac-agent.yaml, kube-proxy, a ServiceAccount without rights)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import ssl
from pathlib import Path
from typing import Any

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


class CuttableRelay:
    """Relays ``127.0.0.1:<port>`` to ``target``. ``cut()`` closes the listener and every open
    connection (connects are then refused at once); ``start()`` again serves the same port."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target, self.port = target, 0
        self._server: asyncio.AbstractServer | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    async def cut(self) -> None:
        if self._server is None:
            return
        self._server.close()
        for w in list(self._writers):
            w.close()
        await self._server.wait_closed()
        self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_r, up_w = await asyncio.wait_for(asyncio.open_connection(*self.target), 5)
        except (OSError, TimeoutError):
            writer.close()
            return
        self._writers |= {writer, up_w}

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                with contextlib.suppress(OSError):  # a side closed: the pipe ends
                    while data := await src.read(65536):
                        dst.write(data)
                        await dst.drain()
            finally:
                dst.close()

        try:
            await asyncio.gather(pipe(reader, up_w), pipe(up_r, writer))
        finally:
            self._writers -= {writer, up_w}


async def sa_token(kube: Any, namespace: str, name: str) -> str:
    """A token of ServiceAccount ``namespace/name`` (created if missing) from the TokenRequest API."""
    from lightkube import ApiError
    from lightkube.models.authentication_v1 import TokenRequestSpec
    from lightkube.models.meta_v1 import ObjectMeta
    from lightkube.resources.core_v1 import ServiceAccount, ServiceAccountToken

    try:
        await kube.create(ServiceAccount(metadata=ObjectMeta(name=name, namespace=namespace)))
    except ApiError as exc:
        if exc.status.code != 409:
            raise
    answer = await kube.create(ServiceAccountToken(metadata=ObjectMeta(name=name), spec=TokenRequestSpec(
        audiences=[], expirationSeconds=3600)), name, namespace=namespace)
    return str(answer.status.token)


class AgentCloud:
    """Identities on the real control plane: the agent's ServiceAccount bound to the ClusterRole of
    deploy/10-rbac-agent.yaml (under a test name), kube-proxy's (system:node-proxier), one without
    rights; and the agent's own HTTP client to the apiserver through a relay the test can cut."""

    def __init__(self, kube: Any, control_plane: Any) -> None:
        self.kube, self.cp = kube, control_plane
        self.suffix = os.urandom(3).hex()
        self.ns = f"pc-auth-{self.suffix}"
        self.role = f"edgewatch-agent-test-{self.suffix}"
        api = control_plane.apiserver_url.removeprefix("https://").rsplit(":", 1)
        self.relay = CuttableRelay((api[0], int(api[1])))
        self.http: Any = None
        self.tokens: dict[str, str] = {}
        self.cloud_ok = True

    async def __aenter__(self) -> AgentCloud:
        import httpx2 as httpx
        import yaml
        from lightkube import codecs

        from edgewatch_lab.testing.kubeproxy import kube_proxy_credentials

        kube = self.kube
        await kube.create(codecs.from_dict({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": self.ns}}))
        role = next(d for d in yaml.safe_load_all((DEPLOY / "10-rbac-agent.yaml").read_text())
                    if d and d["kind"] == "ClusterRole" and d["metadata"]["name"] == "edgewatch-agent")
        role["metadata"] = {"name": self.role}
        await kube.create(codecs.from_dict(role))
        await kube.create(codecs.from_dict({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": self.role},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": self.role},
            "subjects": [{"kind": "ServiceAccount", "name": "agent", "namespace": self.ns}]}))
        self.tokens["agent"] = await sa_token(kube, self.ns, "agent")
        self.tokens["nobody"] = await sa_token(kube, self.ns, "nobody")
        self.tokens["latecomer"] = await sa_token(kube, self.ns, "latecomer")  # first seen while cut off
        self.tokens["kube-proxy"] = (await kube_proxy_credentials(
            client=kube, server_url=self.cp.apiserver_url, ca_pem=self.cp.ca_file.read_bytes())).token
        await self.relay.start()
        self.http = httpx.AsyncClient(base_url=f"https://127.0.0.1:{self.relay.port}",
                                      verify=ssl.create_default_context(cafile=str(self.cp.ca_file)),
                                      headers={"Authorization": f"Bearer {self.tokens['agent']}"}, timeout=5.0)
        return self

    def access(self, **policy: Any) -> Any:
        """The agent's access control: reviews with its own client through the relay, ``cloud_ok``
        as its link check, ``policy`` overriding ReviewPolicy's fields."""
        from edgewatch.poolcache.authn import AccessControl, CloudReviewClient, ReviewPolicy

        return AccessControl(client=CloudReviewClient(http=self.http), cloud_ok=lambda: self.cloud_ok,
                             policy=ReviewPolicy(**policy))

    def upstream(self) -> Any:
        """Where the endpoint forwards what it does not cache: the apiserver, through the relay."""
        from edgewatch.poolcache.apiserver import Upstream

        return Upstream(url=f"https://127.0.0.1:{self.relay.port}",
                        tls=ssl.create_default_context(cafile=str(self.cp.ca_file)), timeout_s=5)

    async def __aexit__(self, *exc: object) -> None:
        from lightkube.resources.core_v1 import Namespace
        from lightkube.resources.rbac_authorization_v1 import ClusterRole, ClusterRoleBinding

        if self.http is not None:
            await self.http.aclose()
        for kind, name in ((ClusterRoleBinding, self.role), (ClusterRole, self.role), (Namespace, self.ns)):
            with contextlib.suppress(Exception):  # cleanup of a test's objects
                await self.kube.delete(kind, name)

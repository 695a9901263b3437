"""The agent's cloud-link probe on the real apiserver, with a ServiceAccount token as an agent in
a pod has: ``/readyz`` is asked without the token (about 1 KB of a probe's bytes, 30 times a
minute) and the link state is the same. Shown with a token the apiserver would refuse: an
authenticated probe with it gets 401, the probe as shipped gets 200, so the token was not sent."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
import yaml
from _poolauth import sa_token

from edgewatch.agent.cloudlink import ApiserverProbe, apiserver_ready
from edgewatch.kube.client import api_client

pytestmark = pytest.mark.controlplane

def _token_kubeconfig(path: Path, *, server: str, ca_file: Path, token: str) -> str:
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": server,
                                               "certificate-authority-data": base64.b64encode(ca_file.read_bytes()).decode()}}],
        "users": [{"name": "u", "user": {"token": token}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    return str(path)


async def test_the_probe_reads_readyz_without_the_agents_token(kube, control_plane, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    token = await sa_token(kube, "default", "cloud-probe-test")
    good = api_client(_token_kubeconfig(tmp_path / "good", server=control_plane.apiserver_url,
                                        ca_file=control_plane.ca_file, token=token), component="agent")
    bad = api_client(_token_kubeconfig(tmp_path / "bad", server=control_plane.apiserver_url,
                                       ca_file=control_plane.ca_file, token=token[:-8] + "AAAAAAAA"),
                     component="agent")
    try:
        assert await apiserver_ready(good) == 200           # the token works
        assert await apiserver_ready(bad) == 401            # a spoiled one is refused when sent
        for client in (good, bad):
            probe = ApiserverProbe(client=client)
            assert await probe() is True and await probe() is True
            assert probe.anonymous                          # never sent: the spoiled one too
    finally:
        await good.close()
        await bad.close()

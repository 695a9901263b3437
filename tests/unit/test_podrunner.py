"""The pure parts of the lab's pod runner and launcher: what a kubelet would compute for a container
($(VAR) expansion, the downward API, volume file modes, restart back-off) and how the launcher
decides what to expose of the image."""

from __future__ import annotations

import asyncio
import contextlib
import os
import stat
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from edgewatch_lab.playground.identities import fold_events
from edgewatch_lab.playground.install import overlay
from edgewatch_lab.testing.podexec import blocked_ancestors, deepest_existing, outermost
from edgewatch_lab.testing.podrunner import (
    PodRunner,
    PodRunnerConfig,
    PodSetupError,
    expand,
    field_value,
    file_mode,
    read_clock_offset,
    restart_delay,
    runs_here,
    write_clock_offset,
)

POD = {"metadata": {"name": "edgewatch-agent-x", "namespace": "edgewatch", "uid": "u-1",
                    "labels": {"app": "agent"}, "annotations": {"a": "b"}},
       "spec": {"nodeName": "a-1", "serviceAccountName": "edgewatch-agent",
                "containers": [{"name": "agent", "image": "ghcr.io/edgewatch/edgewatch:0.1.0"}]}}


@pytest.mark.parametrize(("text", "env", "out"), [
    ("--metrics-address=$(POD_IP)", {"POD_IP": "198.18.0.5"}, "--metrics-address=198.18.0.5"),
    ("$(UNKNOWN)", {}, "$(UNKNOWN)"),                 # unknown names stay as written (Kubernetes rule)
    ("$$(POD_IP)", {"POD_IP": "x"}, "$(POD_IP)"),     # $$ escapes
    ("$(A)$(B)", {"A": "1", "B": "2"}, "12"),
    ("no refs", {"A": "1"}, "no refs"),
])
def test_expand_follows_the_kubernetes_rules(text: str, env: dict[str, str], out: str) -> None:
    assert expand(text, env) == out


@given(st.text(alphabet=st.characters(blacklist_characters="$"), max_size=40))
def test_expand_leaves_text_without_references_alone(text: str) -> None:
    assert expand(text, {"A": "x"}) == text


@pytest.mark.parametrize(("path", "value"), [
    ("metadata.name", "edgewatch-agent-x"), ("metadata.namespace", "edgewatch"), ("metadata.uid", "u-1"),
    ("spec.nodeName", "a-1"), ("spec.serviceAccountName", "edgewatch-agent"),
    ("status.hostIP", "198.18.0.9"), ("status.podIP", "198.18.0.9"),   # hostNetwork: podIP is the node's
    ("metadata.labels['app']", "agent"), ("metadata.annotations['a']", "b"), ("metadata.labels['none']", ""),
])
def test_downward_api_values(path: str, value: str) -> None:
    assert field_value(POD, path, host_ip="198.18.0.9") == value


def test_unsupported_downward_api_field_is_a_setup_error() -> None:
    with pytest.raises(PodSetupError, match="unsupported fieldRef"):
        field_value(POD, "spec.containers[0].image", host_ip="x")


@pytest.mark.parametrize(("mode", "fs_group", "out"), [
    (0o400, None, 0o400),        # the shipped 0400 without fsGroup: only root reads the key (the bug)
    (0o400, 65532, 0o440),       # with fsGroup the group gets read (kubelet SetVolumeOwnership)
    (0o440, 65532, 0o440),
    (0o644, None, 0o644),
    (0o600, 1000, 0o640),
])
def test_volume_file_modes(mode: int, fs_group: int | None, out: int) -> None:
    assert file_mode(mode, fs_group=fs_group) == out


def test_restart_delay_is_the_kubelet_back_off() -> None:
    assert [restart_delay(n, ran_s=1) for n in range(1, 8)] == [0, 10, 20, 40, 80, 160, 300]
    assert restart_delay(9, ran_s=601) == 0  # ran 10 minutes: back-off starts over


@given(st.integers(min_value=1, max_value=200), st.floats(min_value=0, max_value=600))
def test_restart_delay_is_bounded_and_monotonic(n: int, ran: float) -> None:
    assert 0 <= restart_delay(n, ran_s=ran) <= 300
    assert restart_delay(n, ran_s=ran) <= restart_delay(n + 1, ran_s=ran)


def test_runs_here_matches_containers_and_init_containers_of_the_image() -> None:
    assert runs_here(POD, image_prefix="ghcr.io/edgewatch/edgewatch")
    other = {"spec": {"containers": [{"name": "app", "image": "registry.invalid/sample:1"}]}}
    assert not runs_here(other, image_prefix="ghcr.io/edgewatch/edgewatch")
    init = {"spec": {"containers": [{"name": "app", "image": "x"}],
                     "initContainers": [{"name": "i", "image": "ghcr.io/edgewatch/edgewatch:0.1.0"}]}}
    assert runs_here(init, image_prefix="ghcr.io/edgewatch/edgewatch")


def test_clock_offset_round_trip(tmp_path: Path) -> None:
    assert read_clock_offset(None) == 0.0
    assert read_clock_offset(tmp_path / "none") == 0.0
    write_clock_offset(tmp_path / "clock", -45)
    assert (tmp_path / "clock" / "faketime").read_text() == "-45\n"     # libfaketime's relative form
    assert read_clock_offset(tmp_path / "clock") == -45.0
    assert stat.S_IMODE(os.stat(tmp_path / "clock" / "faketime").st_mode) == 0o644  # the container user reads it
    write_clock_offset(tmp_path / "clock", 0)
    assert read_clock_offset(tmp_path / "clock") == 0.0


def test_outermost_keeps_only_the_top_paths() -> None:
    assert outermost(["/a/b", "/a", "/a/b/c", "/ab", "/x/y", "/a"]) == ["/a", "/ab", "/x/y"]


def test_blocked_ancestors_and_deepest_existing(tmp_path: Path) -> None:
    closed = tmp_path / "closed"
    (closed / "inner").mkdir(parents=True)
    os.chmod(closed, 0o700)
    os.chmod(tmp_path, 0o755)
    assert str(closed) in blocked_ancestors(str(closed / "inner" / "file"))
    assert str(closed / "inner") not in blocked_ancestors(str(closed / "inner" / "file"))
    assert deepest_existing(str(closed / "inner" / "new" / "deeper")) == os.path.realpath(closed / "inner")


def test_identities_fold_the_audit_log_by_component_and_user() -> None:
    sa = "system:serviceaccount:edgewatch:edgewatch-agent"
    lines = [
        '{"userAgent": "edgewatch-agent/0.1.0", "user": {"username": "%s", '
        '"extra": {"authentication.kubernetes.io/node-name": ["a-1"]}}}' % sa,
        '{"userAgent": "edgewatch-agent/0.1.0", "user": {"username": "%s", '
        '"extra": {"authentication.kubernetes.io/node-name": ["a-2"]}}}' % sa,
        '{"userAgent": "kube-scheduler/v1.36.3", "user": {"username": "kubernetes-admin"}}',
        '{"userAgent": "edgewatch-controller/0.1.0", "user": {"username": "kubernetes-admin"}}',
        "not json", "[1, 2]",
        '{"userAgent": "edgewatch-agent/0.1.0", "user": {}}',   # never authenticated: no identity
        '{"userAgent": "edgewatch-agent/0.3.0", "user": {"username": "system:anonymous"}, "requestURI": "/readyz"}',
        '{"userAgent": "edgewatch-agent/0.3.0", "user": {"username": "system:anonymous"}, "requestURI": "/readyz"}',
    ]
    assert fold_events(lines) == [
        {"component": "agent", "username": "system:anonymous", "requests": 2, "node_names": [], "paths": ["/readyz"]},
        {"component": "agent", "username": sa, "requests": 2, "node_names": ["a-1", "a-2"]},
        {"component": "controller", "username": "kubernetes-admin", "requests": 1, "node_names": []},
    ]


def test_playground_overlay_changes_only_config_controller_flags_and_replicas() -> None:
    k = overlay(config={"grouping": "on"}, controller_args=["--autonomy=300"], controller_replicas=1)
    assert k["resources"] == ["base"]
    assert [p["target"] for p in k["patches"]] == [
        {"kind": "ConfigMap", "name": "edgewatch-config"}, {"kind": "Deployment", "name": "edgewatch-controller"}]
    assert "--autonomy=300" in k["patches"][1]["patch"] and "/spec/replicas" in k["patches"][1]["patch"]


class _PatchRecorder:
    """A stand-in for the kubelet's API client: records pod status patches (pure logic under test)."""

    def __init__(self) -> None:
        self.patches: list[tuple[str, dict]] = []

    async def patch(self, _kind, name, body, *, namespace):  # type: ignore[no-untyped-def]
        self.patches.append((name, body))


class _Obj:
    def __init__(self, data: dict) -> None:
        self._data = data

    def to_dict(self) -> dict:
        return self._data


def _with_ready(pod: dict, ready: str) -> dict:
    return {**pod, "status": {"conditions": [{"type": "Ready", "status": ready}]}}


async def test_runner_puts_back_a_ready_condition_someone_else_changed(tmp_path: Path) -> None:
    """kube-controller-manager marks a node's pods NotReady when its Lease goes stale; like a
    kubelet's status manager, the runner re-posts its own view on the next pod event, and posts
    nothing while the API already agrees."""
    client = _PatchRecorder()
    runner = PodRunner(client=client, config=PodRunnerConfig(
        node_name="a-1", node_address="198.18.0.9", node_root=tmp_path, image_prefix="ghcr.io/edgewatch/",
        apiserver_host="198.18.0.1", apiserver_port=6443))
    task = asyncio.create_task(runner.run())
    await asyncio.sleep(0)
    try:
        from edgewatch_lab.testing.podrunner import ContainerState, PodState
        state = PodState(uid="u-1", pod=POD, initialized=True)
        container = ContainerState(spec=POD["spec"]["containers"][0], ready=True)
        container.proc = object()  # type: ignore[assignment]  # a running process, as far as status goes
        container.started_at = "2026-11-26T12:00:00Z"
        state.containers["agent"] = container
        runner.pods["u-1"] = state

        await runner.sync(_Obj(_with_ready(POD, "True")))
        assert client.patches == []  # the API agrees: nothing to post
        await runner.sync(_Obj(_with_ready(POD, "False")))  # MarkPodsNotReady
        assert len(client.patches) == 1
        name, body = client.patches[0]
        ready = {c["type"]: c["status"] for c in body["status"]["conditions"]}
        assert name == "edgewatch-agent-x" and ready["Ready"] == "True"
    finally:
        runner.pods.clear()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

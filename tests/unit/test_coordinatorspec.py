"""The pool coordinator's Deployment and the discovery of where it runs (edgewatch.controller.coordinatorspec)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from edgewatch.controller.coordinatorspec import (
    DATA_DIR,
    MANAGED_BY,
    coordinator_deployment,
    coordinator_labels,
    discovered_urls,
    drift,
    pool_of,
)
from edgewatch.names import (
    COORDINATOR_SERVICE_ACCOUNT,
    DEFAULT_COORDINATOR_OPS_PORT,
    DEFAULT_COORDINATOR_PORT,
    POOL_LABEL,
    coordinator_name,
)

LABELS = {"app.kubernetes.io/name": "edgewatch", "app.kubernetes.io/component": "coordinator",
          POOL_LABEL: "factory-1"}


def _dep(**kw: Any) -> dict[str, Any]:
    return coordinator_deployment(pool="factory-1", namespace="edgewatch", image="ghcr.io/edgewatch/edgewatch:1", **kw)


def _pod_spec(dep: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = dep["spec"]["template"]["spec"]
    return spec


def test_deployment_identity_and_labels() -> None:
    dep = _dep()
    assert dep["apiVersion"] == "apps/v1" and dep["kind"] == "Deployment"
    assert dep["metadata"]["name"] == coordinator_name("factory-1")
    assert dep["metadata"]["namespace"] == "edgewatch"
    assert dep["metadata"]["labels"] == {**LABELS, "app.kubernetes.io/managed-by": MANAGED_BY}
    assert dep["spec"]["selector"] == {"matchLabels": LABELS}
    assert dep["spec"]["template"]["metadata"]["labels"] == LABELS
    assert coordinator_labels("factory-1") == LABELS


def test_one_replica_recreated_never_rolled() -> None:
    dep = _dep()
    assert dep["spec"]["replicas"] == 1
    assert dep["spec"]["strategy"] == {"type": "Recreate"}


def test_pod_runs_on_the_pools_nodes_on_the_host_network() -> None:
    spec = _pod_spec(_dep())
    assert spec["hostNetwork"] is True and spec["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert spec["serviceAccountName"] == COORDINATOR_SERVICE_ACCOUNT
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchExpressions": [{"key": POOL_LABEL, "operator": "In", "values": ["factory-1"]}]}]
    assert "tolerations" not in spec  # a dead node's pod is evicted and rescheduled in the pool
    assert spec["terminationGracePeriodSeconds"] == 30
    assert spec["priorityClassName"] == "system-node-critical"  # as the agent (deploy/30-agent.yaml)


def test_priority_class_matches_the_agents() -> None:
    agent = yaml.safe_load((Path(__file__).resolve().parents[2] / "deploy" / "30-agent.yaml").read_text())
    assert _pod_spec(_dep())["priorityClassName"] == agent["spec"]["template"]["spec"]["priorityClassName"]
    volumes = agent["spec"]["template"]["spec"]["volumes"]
    assert not any("projected" in v for v in volumes)  # so ours has no projected token volume either
    assert not any("projected" in v for v in _pod_spec(_dep())["volumes"])


def test_container_command_env_and_data() -> None:
    spec = _pod_spec(_dep(port=2000, ops_port=2001, data_root="/data/"))
    (container,) = spec["containers"]
    assert container["name"] == "coordinator" and container["image"] == "ghcr.io/edgewatch/edgewatch:1"
    assert container["command"] == ["edgewatch", "pool-coordinator", "--pool", "factory-1", "--namespace", "edgewatch",
                                    "--port", "2000", "--ops-port", "2001", "--data-dir", DATA_DIR]
    assert container["env"] == [
        {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        {"name": "HOST_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}}]
    assert spec["volumes"] == [{"name": "data", "hostPath": {"path": "/data/factory-1", "type": "DirectoryOrCreate"}}]
    assert container["volumeMounts"] == [{"name": "data", "mountPath": "/var/lib/edgewatch/coordinator"}]
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": 2001}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": 2001}


def test_defaults_ports_and_data_root() -> None:
    (container,) = _pod_spec(_dep())["containers"]
    assert container["command"][6:10] == ["--port", str(DEFAULT_COORDINATOR_PORT), "--ops-port",
                                          str(DEFAULT_COORDINATOR_OPS_PORT)]
    assert _pod_spec(_dep())["volumes"][0]["hostPath"]["path"] == "/var/lib/edgewatch/coordinator/factory-1"


def test_resources_and_security() -> None:
    (container,) = _pod_spec(_dep())["containers"]
    assert container["resources"] == {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "512Mi"}}
    assert container["securityContext"] == {"readOnlyRootFilesystem": True, "allowPrivilegeEscalation": False,
                                            "runAsUser": 65532, "runAsGroup": 65532, "runAsNonRoot": True,
                                            "capabilities": {"drop": ["ALL"]}}
    # the kubelet makes the hostPath root's: an init container with CHOWN alone hands it over first
    (owner,) = _pod_spec(_dep())["initContainers"]
    assert owner["command"] == ["chown", "65532:65532", container["volumeMounts"][0]["mountPath"]]
    assert owner["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["CHOWN"]}
    assert owner["volumeMounts"] == container["volumeMounts"]


@pytest.mark.parametrize("kw", [{"pool": "Bad_Pool"}, {"pool": ""}, {"image": ""}, {"port": 0}, {"ops_port": 65536}])
def test_refuses_bad_input(kw: dict[str, Any]) -> None:
    args: dict[str, Any] = {"pool": "p", "namespace": "edgewatch", "image": "img", **kw}
    with pytest.raises(ValueError):
        coordinator_deployment(**args)


def test_two_pools_two_deployments() -> None:
    a = coordinator_deployment(pool="a", namespace="ns", image="i")
    b = coordinator_deployment(pool="b", namespace="ns", image="i")
    assert a["metadata"]["name"] != b["metadata"]["name"]
    assert _pod_spec(a)["volumes"] != _pod_spec(b)["volumes"]


# -- drift ------------------------------------------------------------------------------------------


def test_drift_ignores_api_defaults() -> None:
    want = _dep()
    have = copy.deepcopy(want)
    have["metadata"]["resourceVersion"] = "7"
    have["spec"]["revisionHistoryLimit"] = 10
    have["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"] = "IfNotPresent"
    have["spec"]["template"]["spec"]["containers"][0]["env"][0]["valueFrom"]["fieldRef"]["apiVersion"] = "v1"
    assert drift(want=want, have=have) == []


def test_drift_names_what_changed() -> None:
    want = _dep()
    have = copy.deepcopy(want)
    have["spec"]["replicas"] = 2
    have["spec"]["template"]["spec"]["containers"][0]["image"] = "old"
    del have["spec"]["strategy"]
    have["spec"]["template"]["spec"]["containers"][0]["env"].pop()
    assert sorted(drift(want=want, have=have)) == [
        ".spec.replicas", ".spec.strategy", ".spec.template.spec.containers[0].env",
        ".spec.template.spec.containers[0].image"]


def test_drift_types_and_roots() -> None:
    assert drift(want=1, have=True) == ["."]  # True == 1 in Python, not in the API
    assert drift(want={"a": 1}, have=[1]) == ["."]
    assert drift(want=[1], have={"a": 1}) == ["."]
    assert drift(want={"a": {"b": 1}}, have={"a": None}) == [".a"]


# -- discovery --------------------------------------------------------------------------------------


def _pod(name: str, *, pool: str | None = "p", ready: bool = True, host: str | None = "10.0.0.1",
         created: str = "2026-01-01T00:00:00Z", deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "edgewatch", "creationTimestamp": created,
                            "labels": {"app.kubernetes.io/component": "coordinator"} | ({POOL_LABEL: pool} if pool else {})}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:01:00Z"
    status: dict[str, Any] = {"conditions": [{"type": "PodScheduled", "status": "True"},
                                             {"type": "Ready", "status": "True" if ready else "False"}]}
    if host is not None:
        status["hostIP"] = host
    return {"metadata": meta, "status": status}


def test_discovers_a_ready_pod() -> None:
    assert discovered_urls([_pod("a")], port=12379) == {"p": "https://10.0.0.1:12379"}


@pytest.mark.parametrize("pod", [_pod("a", ready=False), _pod("a", deleting=True), _pod("a", host=None),
                                 _pod("a", host="not-an-ip"), _pod("a", pool=None), _pod("a", pool="Not_A_Pool"),
                                 {"metadata": {"name": "a", "labels": {POOL_LABEL: "p"}}, "status": {"hostIP": "1.2.3.4"}},
                                 {"metadata": {"name": "a", "labels": {POOL_LABEL: "p"}},
                                  "status": {"hostIP": "1.2.3.4", "conditions": "Ready"}}])
def test_no_url_for_a_pod_that_does_not_qualify(pod: dict[str, Any]) -> None:
    assert discovered_urls([pod], port=1) == {}


def test_ipv6_host_in_brackets() -> None:
    assert discovered_urls([_pod("a", host="fd00::1")], port=5) == {"p": "https://[fd00::1]:5"}


def test_oldest_pod_wins_then_name() -> None:
    pods = [_pod("z-new", host="10.0.0.3", created="2026-01-02T00:00:00Z"),
            _pod("b-old", host="10.0.0.2", created="2026-01-01T00:00:00Z"),
            _pod("a-old", host="10.0.0.1", created="2026-01-01T00:00:00Z")]
    assert discovered_urls(pods, port=9) == {"p": "https://10.0.0.1:9"}
    assert discovered_urls(list(reversed(pods)), port=9) == {"p": "https://10.0.0.1:9"}
    # the oldest is being deleted: the next qualifies
    pods[2]["metadata"]["deletionTimestamp"] = "2026-01-03T00:00:00Z"
    assert discovered_urls(pods, port=9) == {"p": "https://10.0.0.2:9"}


def test_one_url_per_pool() -> None:
    pods = [_pod("a", pool="p1", host="10.0.0.1"), _pod("b", pool="p2", host="10.0.0.2"),
            _pod("c", pool="p3", ready=False)]
    assert discovered_urls(pods, port=12379) == {"p1": "https://10.0.0.1:12379", "p2": "https://10.0.0.2:12379"}


def test_pool_of() -> None:
    assert pool_of(_pod("a", pool="p")) == "p"
    assert pool_of(_pod("a", pool=None)) is None
    assert pool_of({"metadata": {}}) is None
    assert pool_of({}) is None


_pods = st.lists(st.builds(
    _pod, st.sampled_from(["a", "b", "c", "d"]), pool=st.sampled_from(["p1", "p2", "p3", None, "Bad"]),
    ready=st.booleans(), host=st.sampled_from(["10.0.0.1", "10.0.0.2", "fd00::2", None, "x"]),
    created=st.sampled_from(["2026-01-01T00:00:00Z", "2026-01-01T00:00:01Z", "2025-12-31T23:59:59Z"]),
    deleting=st.booleans()), max_size=8)


def _url(pod: dict[str, Any]) -> str:
    host = pod["status"].get("hostIP", "")
    return f"https://[{host}]:12379" if ":" in host else f"https://{host}:12379"


def _qualifies(pod: dict[str, Any]) -> bool:
    return ("deletionTimestamp" not in pod["metadata"] and pod["status"].get("hostIP") not in (None, "x")
            and {"type": "Ready", "status": "True"} in pod["status"]["conditions"]
            and pod["metadata"]["labels"].get(POOL_LABEL) not in (None, "Bad"))


@given(pods=_pods)
@settings(max_examples=300, deadline=None)
def test_property_only_ready_live_pods_and_one_per_pool(pods: list[dict[str, Any]]) -> None:
    urls = discovered_urls(pods, port=12379)
    for pool, url in urls.items():
        # never a URL from an unready or deleting pod: some qualifying pod of that pool has it
        assert any(_qualifies(p) and p["metadata"]["labels"][POOL_LABEL] == pool and _url(p) == url for p in pods)
    # exactly the pools with a qualifying pod, one URL each
    assert set(urls) == {p["metadata"]["labels"][POOL_LABEL] for p in pods if _qualifies(p)}
    assert discovered_urls(list(reversed(pods)), port=12379) == urls  # the pods' order does not matter

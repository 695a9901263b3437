"""SuperEdge's manifests as the playground renders them, and its node state (pure)."""

from __future__ import annotations

import base64
import ipaddress
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes

from edgewatch_lab.playground import superedge

ADDRESS = "10.9.8.7"


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> str:
    return superedge.render(folder=tmp_path_factory.mktemp("superedge"), address=ADDRESS, hmac_key="k")


@pytest.fixture(scope="module")
def docs(rendered: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(rendered) if d]


def one(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(found) == 1, (kind, name, len(found))
    return found[0]


def test_render_leaves_no_placeholder(rendered: str) -> None:
    assert "${" not in rendered


def test_render_makes_its_pki_in_the_folder(tmp_path: Path) -> None:
    folder = tmp_path / "nested" / "pki"
    superedge.render(folder=folder, address=ADDRESS, hmac_key="k")
    assert folder.is_dir() and any(folder.iterdir())


def test_render_kinds(docs: list[dict[str, Any]]) -> None:
    assert Counter(d["kind"] for d in docs) == Counter({
        "Namespace": 1, "ServiceAccount": 2, "ClusterRole": 2, "ClusterRoleBinding": 2, "DaemonSet": 1,
        "ConfigMap": 1, "Secret": 1, "Deployment": 1, "MutatingWebhookConfiguration": 1,
    })
    assert one(docs, "Namespace")["metadata"]["name"] == superedge.NAMESPACE
    namespaced = [d for d in docs if d["kind"] in ("ServiceAccount", "DaemonSet", "ConfigMap", "Secret", "Deployment")]
    assert {d["metadata"]["namespace"] for d in namespaced} == {superedge.NAMESPACE}


def test_daemonset(docs: list[dict[str, Any]]) -> None:
    ds = one(docs, "DaemonSet", "edge-health")
    spec = ds["spec"]["template"]["spec"]
    assert spec["hostNetwork"] is True
    assert spec["serviceAccountName"] == "edge-health"
    (container,) = spec["containers"]
    assert container["image"] == superedge.EDGE_HEALTH_IMAGE
    assert container["image"].startswith(superedge.IMAGE_PREFIX)
    env = {e["name"]: e for e in container["env"]}
    for name in ("NODE_NAME", "NODE_IP", "POD_IP", "POD_NAME", "NAMESPACE"):
        assert "fieldRef" in env[name]["valueFrom"], name
        assert "value" not in env[name]
    paths = {name: e["valueFrom"]["fieldRef"]["fieldPath"] for name, e in env.items()}
    assert paths["NODE_IP"] == "status.hostIP"
    assert paths["NODE_NAME"] == "spec.nodeName"
    assert paths["POD_IP"] == "status.podIP"
    assert paths["POD_NAME"] == "metadata.name"
    assert paths["NAMESPACE"] == "metadata.namespace"
    plugins = [a for a in container["args"] if a.startswith("--kubeletplugin=")]
    assert len(plugins) == 1
    params = dict(p.split("=", 1) for p in plugins[0].removeprefix("--kubeletplugin=").split(","))
    assert params["port"] == "10248"
    assert params["weight"] == "1"


def test_edge_health_role_can_read_pods(docs: list[dict[str, Any]]) -> None:
    role = one(docs, "ClusterRole", "edge-health")
    pod_rules = [r for r in role["rules"] if "pods" in r["resources"] and "" in r["apiGroups"]]
    assert pod_rules
    verbs = {v for r in pod_rules for v in r["verbs"]}
    assert {"get", "list", "watch"} <= verbs
    binding = one(docs, "ClusterRoleBinding", "edge-health")
    assert binding["roleRef"]["name"] == "edge-health"
    assert binding["subjects"][0]["namespace"] == superedge.NAMESPACE


def test_hmac_configmap(docs: list[dict[str, Any]]) -> None:
    cm = one(docs, "ConfigMap", "hmac-config")
    assert cm["metadata"]["labels"] == {"name": "edge-health"}
    assert cm["data"]["hmackey"] == "k"


def test_webhook(docs: list[dict[str, Any]]) -> None:
    webhooks = one(docs, "MutatingWebhookConfiguration")["webhooks"]
    urls = sorted(w["clientConfig"]["url"] for w in webhooks)
    assert urls == [f"https://{ADDRESS}:8443/endpoint", f"https://{ADDRESS}:8443/node-taint"]
    for w in webhooks:
        assert w["admissionReviewVersions"] == ["v1beta1"]
        assert w["failurePolicy"] == "Ignore"
        assert "service" not in w["clientConfig"]
    resources = {w["clientConfig"]["url"].rsplit("/", 1)[1]: w["rules"][0]["resources"] for w in webhooks}
    assert resources == {"node-taint": ["nodes"], "endpoint": ["endpoints"]}


def test_admission_deployment(docs: list[dict[str, Any]]) -> None:
    dep = one(docs, "Deployment", "edge-health-admission")
    spec = dep["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    assert container["image"] == superedge.ADMISSION_IMAGE
    assert f"--adminssion-control-listen-addr={ADDRESS}:8443" in container["args"]
    assert "node-role.kubernetes.io/control-plane" in spec["nodeSelector"]
    assert "node-role.kubernetes.io/master" not in spec["nodeSelector"]
    assert spec["hostNetwork"] is True
    secret_names = {v["secret"]["secretName"] for v in spec["volumes"] if "secret" in v}
    assert secret_names == {one(docs, "Secret")["metadata"]["name"]}


# --- TLS ---------------------------------------------------------------------------------------


def _cert(b64: str) -> x509.Certificate:
    pem = base64.b64decode(b64)
    assert pem.startswith(b"-----BEGIN CERTIFICATE-----")
    return x509.load_pem_x509_certificate(pem)


@pytest.fixture(scope="module")
def server_cert(docs: list[dict[str, Any]]) -> x509.Certificate:
    return _cert(one(docs, "Secret")["data"]["server.crt"])


@pytest.fixture(scope="module")
def ca_cert(docs: list[dict[str, Any]]) -> x509.Certificate:
    bundles = {w["clientConfig"]["caBundle"] for w in one(docs, "MutatingWebhookConfiguration")["webhooks"]}
    assert len(bundles) == 1
    return _cert(bundles.pop())


def test_server_cert_is_for_the_address(server_cert: x509.Certificate) -> None:
    san = server_cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert ipaddress.ip_address(ADDRESS) in san.get_values_for_type(x509.IPAddress)


def test_server_cert_is_issued_by_the_ca_bundle(server_cert: x509.Certificate, ca_cert: x509.Certificate) -> None:
    assert server_cert.issuer == ca_cert.subject
    server_cert.verify_directly_issued_by(ca_cert)  # raises if the signature does not verify


def test_server_cert_does_not_verify_against_another_ca(server_cert: x509.Certificate, tmp_path: Path) -> None:
    other = superedge.render(folder=tmp_path, address=ADDRESS, hmac_key="k")
    hook = next(d for d in yaml.safe_load_all(other) if d and d["kind"] == "MutatingWebhookConfiguration")
    other_ca = _cert(hook["webhooks"][0]["clientConfig"]["caBundle"])
    with pytest.raises(Exception):
        server_cert.verify_directly_issued_by(other_ca)


def test_server_cert_is_not_sha1(server_cert: x509.Certificate) -> None:
    assert server_cert.signature_hash_algorithm is not None
    assert not isinstance(server_cert.signature_hash_algorithm, hashes.SHA1)


def test_server_key_is_a_pem_private_key(docs: list[dict[str, Any]]) -> None:
    key = base64.b64decode(one(docs, "Secret")["data"]["server.key"])
    assert b"PRIVATE KEY-----" in key


# --- hmac key ----------------------------------------------------------------------------------


def _hmac_key(text: str) -> str:
    cm = next(d for d in yaml.safe_load_all(text) if d and d["kind"] == "ConfigMap")
    return str(cm["data"]["hmackey"])


def test_default_hmac_key_is_random(tmp_path: Path) -> None:
    a = _hmac_key(superedge.render(folder=tmp_path / "a", address=ADDRESS))
    b = _hmac_key(superedge.render(folder=tmp_path / "b", address=ADDRESS))
    assert a != b
    for key in (a, b):
        assert re.fullmatch(r"[0-9a-f]{16,}", key), key


# --- node state --------------------------------------------------------------------------------


@pytest.mark.parametrize("ready", ["True", "False", "Unknown", "?"])
def test_node_state_unhealthy_annotation_wins(ready: str) -> None:
    assert superedge.node_state({"nodeunhealth": "yes"}, ready) == "unhealthy"


@pytest.mark.parametrize("annotations", [{"nodeunhealth": "no"}, {"nodeunhealth": ""}, {}, {"other": "yes"}])
@pytest.mark.parametrize(("ready", "expected"), [
    ("True", "normal"), ("False", "not_ready"), ("Unknown", "not_ready"), ("?", "not_ready"),
])
def test_node_state_without_verdict(annotations: dict[str, str], ready: str, expected: str) -> None:
    assert superedge.node_state(annotations, ready) == expected


def test_effective_periods() -> None:
    assert superedge.EFFECTIVE_PERIODS_S["communicate"] == 60

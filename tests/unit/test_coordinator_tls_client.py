"""The coordinator's client TLS from this node's own certificate (docs/security.md): the pool CA check, the
credentials built from the stored files, and the runner waiting for a certificate and the pool CA
before it starts a coordinator."""

from __future__ import annotations

import asyncio
import datetime as dt
from pathlib import Path
from types import SimpleNamespace

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from prometheus_client import CollectorRegistry

from edgewatch.core.identity import NodeKey, NodeKeyring
from edgewatch.agent.certstore import CertificateFiles
from edgewatch.agent.coordinating import _WAIT, CoordinatorRunner, node_tls
from edgewatch.agent.coordinator import CoordinatorError, CoordinatorTLS, NodeCertificateTLS, check_pool_ca
from edgewatch.controller.poolca import make_ca, sign_client_certificate
from edgewatch.names import POOL_CA_CONFIGMAP_KEY, pool_ca_name

NOW = dt.datetime.now(dt.timezone.utc)
CA = make_ca("p", now=NOW)


def write_pair(files: CertificateFiles, *, node: str = "n1") -> ec.EllipticCurvePrivateKey:
    key = ec.generate_private_key(ec.SECP256R1())
    files.key_file.parent.mkdir(parents=True, exist_ok=True)
    files.key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                 serialization.NoEncryption()))
    files.cert_file.write_bytes(sign_client_certificate(CA, public_key=key.public_key(), node=node,
                                                        lifetime_s=3600, now=NOW))
    return key


# -- check_pool_ca ---------------------------------------------------------------------------------------

def test_pool_ca_accepted_as_the_one_root() -> None:
    assert check_pool_ca(CA.cert_pem()) == CA.cert_pem()
    assert check_pool_ca(CA.cert_pem().decode()) == CA.cert_pem()  # as a ConfigMap holds it


@pytest.mark.parametrize("bad, match", [
    (None, "missing"), (b"", "missing"), (b"x" * 20000, "bytes"), (b"not pem", "nothing else"),
    (CA.cert_pem() * 5, "at most 4"), (CA.cert_pem() + CA.key_pem(), "nothing else"),
    (b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n", "does not parse"),
])
def test_bad_pool_ca_is_refused(bad: bytes | None, match: str) -> None:
    with pytest.raises(CoordinatorError, match=match) as err:
        check_pool_ca(bad)
    assert err.value.reason == "tls"


def test_a_bundle_of_old_and_new_pool_ca_is_trusted_together() -> None:
    new = make_ca("p", now=NOW)
    assert check_pool_ca(CA.cert_pem() + new.cert_pem()) == CA.cert_pem() + new.cert_pem()
    assert check_pool_ca(b"# rotation\n" + CA.cert_pem() + b"\n" + new.cert_pem()) == CA.cert_pem() + new.cert_pem()


def test_a_leaf_certificate_in_a_bundle_is_refused() -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    leaf = sign_client_certificate(CA, public_key=key.public_key(), node="n1", lifetime_s=3600, now=NOW)
    with pytest.raises(CoordinatorError, match="#2 is not a CA"):
        check_pool_ca(CA.cert_pem() + leaf)


def test_a_leaf_certificate_is_not_a_pool_ca() -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    leaf = sign_client_certificate(CA, public_key=key.public_key(), node="n1", lifetime_s=3600, now=NOW)
    with pytest.raises(CoordinatorError, match="not a CA"):
        check_pool_ca(leaf)


# -- NodeCertificateTLS ----------------------------------------------------------------------------------

def test_credentials_from_the_stored_pair(tmp_path: Path) -> None:
    files = CertificateFiles.under(tmp_path)
    write_pair(files)
    tls = node_tls(files, CA.cert_pem().decode())
    assert isinstance(tls, NodeCertificateTLS)
    assert (tls.cert_file, tls.key_file, tls.ca_pem) == (files.cert_file, files.key_file, CA.cert_pem())
    assert tls.credentials() is not None


def test_files_are_read_at_every_call(tmp_path: Path) -> None:
    files = CertificateFiles.under(tmp_path)
    tls = node_tls(files, CA.cert_pem())
    with pytest.raises(CoordinatorError, match="cannot read") as err:
        tls.credentials()  # no certificate yet
    assert err.value.reason == "tls"
    write_pair(files)
    assert tls.credentials() is not None  # the same object, the files written since


def test_a_rotation_caught_half_way_is_a_tls_error(tmp_path: Path) -> None:
    files = CertificateFiles.under(tmp_path)
    write_pair(files)
    other = ec.generate_private_key(ec.SECP256R1())  # the new key renamed in, the certificate not yet
    files.key_file.write_bytes(other.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                   serialization.NoEncryption()))
    with pytest.raises(CoordinatorError, match="do not match"):
        node_tls(files, CA.cert_pem()).credentials()


def test_garbage_files_are_a_tls_error(tmp_path: Path) -> None:
    files = CertificateFiles.under(tmp_path)
    write_pair(files)
    files.cert_file.write_bytes(b"junk")
    with pytest.raises(CoordinatorError, match="does not parse"):
        node_tls(files, CA.cert_pem()).credentials()


# -- the runner: which TLS, and waiting ------------------------------------------------------------------

class FakeKube:
    def __init__(self) -> None:
        self.data: dict[str, str] | None = None
        self.gets: list[tuple[str, str]] = []

    async def get(self, _kind: object, name: str, *, namespace: str) -> object:
        self.gets.append((namespace, name))
        if self.data is None:
            raise TimeoutError("no answer")
        return SimpleNamespace(data=self.data)


def runner(kube: FakeKube, files: CertificateFiles | None, tls: CoordinatorTLS | None = None) -> CoordinatorRunner:
    return CoordinatorRunner(node="n1", url="https://127.0.0.1:2379", pool="p", tls=tls, kube=kube,  # type: ignore[arg-type]
                             registry=CollectorRegistry(), link=SimpleNamespace(up=True),  # type: ignore[arg-type]
                             verdicts=SimpleNamespace(verdict_of=lambda _n: "healthy"),  # type: ignore[arg-type]
                             signer=NodeKeyring(node="n1", keys=[NodeKey.generate()]),
                             settings=SimpleNamespace(), clock=SimpleNamespace(),  # type: ignore[arg-type]
                             node_certificate=files, namespace="ew", ca_retry_s=0.0)


async def test_without_node_certificate_the_configured_tls_is_used(tmp_path: Path) -> None:
    configured = CoordinatorTLS(ca_file=tmp_path / "a", cert_file=tmp_path / "b", key_file=tmp_path / "c")
    kube = FakeKube()
    assert await runner(kube, None, configured)._tls_for("p") is configured
    assert await runner(kube, None)._tls_for("p") is None
    assert kube.gets == []


async def test_waits_for_a_certificate_then_for_the_pool_ca(tmp_path: Path) -> None:
    files = CertificateFiles.under(tmp_path)
    kube = FakeKube()
    r = runner(kube, files, CoordinatorTLS(ca_file=tmp_path / "a", cert_file=tmp_path / "b", key_file=tmp_path / "c"))
    assert await r._tls_for("p") is _WAIT and kube.gets == []  # no certificate: not even the CA is read
    write_pair(files)
    r.certificate_changed(files)
    assert await r._tls_for("p") is _WAIT  # the API does not answer
    kube.data = {"other": "x"}
    assert await r._tls_for("p") is _WAIT  # no ca.crt
    kube.data = {POOL_CA_CONFIGMAP_KEY: CA.cert_pem().decode()}
    tls = await r._tls_for("p")
    assert isinstance(tls, NodeCertificateTLS) and tls.ca_pem == CA.cert_pem()  # the operator's files ignored
    assert tls.cert_file == files.cert_file
    assert set(kube.gets) == {("ew", pool_ca_name("p"))}


async def test_a_failed_pool_ca_read_is_retried_after_ca_retry_s(tmp_path: Path) -> None:
    files = CertificateFiles.under(tmp_path)
    kube = FakeKube()
    r = runner(kube, files)
    r.ca_retry_s = 3600.0
    r.certificate_changed(files)
    assert await r._tls_for("p") is _WAIT
    kube.data = {POOL_CA_CONFIGMAP_KEY: CA.cert_pem().decode()}
    assert await r._tls_for("p") is _WAIT and len(kube.gets) == 1  # not asked again before the retry time
    await asyncio.sleep(0)

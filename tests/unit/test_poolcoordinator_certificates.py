"""The pool coordinator's certificates: the shared pure parts with SANs and usages
(edgewatch.certs), the coordinator's two specs, the tls/ files, the pool CA's install, and the
shared request loop (edgewatch.csr) with the serving spec against an in-memory CSR API."""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import ipaddress
import secrets
import stat
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, ExtensionOID, NameOID

from edgewatch import certfiles, certs
from edgewatch.controller.poolca import PoolCA, make_ca, sign_client_certificate
from edgewatch.csr import CertificateRequester
from edgewatch.kube.api import CertificateSigningRequest
from edgewatch.names import (
    COORDINATOR_CLIENT_SIGNER, COORDINATOR_SERVING_SIGNER, POOL_CA_CONFIGMAP_KEY, pool_ca_name,
)
from edgewatch.poolcoordinator.certificates import (
    SERVING_COMMON_NAME, TlsFiles, install_pool_ca, parse_ca, root_credentials, root_spec, serving_spec,
)

from _fakekube import FakeKube

NOW = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)


def sign_serving(ca: PoolCA, *, public_key: ec.EllipticCurvePublicKey, ips: list[str], dns: list[str],
                 lifetime_s: int = 3600, usage: x509.ObjectIdentifier = ExtendedKeyUsageOID.SERVER_AUTH,
                 cn: str = "edgewatch-coordinator") -> bytes:
    """A serving certificate as the controller's signer would make it (poolca has no serving function)."""
    from cryptography.hazmat.primitives import serialization

    names: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
    names += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)]))
            .issuer_name(ca.cert.subject).public_key(public_key).serial_number(secrets.randbits(64) + 1)
            .not_valid_before(NOW - dt.timedelta(minutes=5)).not_valid_after(NOW + dt.timedelta(seconds=lifetime_s))
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .sign(ca.key, hashes.SHA256()))
    return cert.public_bytes(serialization.Encoding.PEM)


@pytest.fixture(scope="module")
def ca() -> PoolCA:
    return make_ca("factory-1", now=NOW)


# -- edgewatch.certs: requests with SANs, checks of usage and SANs ------------------------------------------


def test_a_serving_request_carries_exactly_cn_and_the_sans() -> None:
    key = certs.new_key()
    pem = serving_spec(node="edge-1", host_ip="10.0.0.5").request(key)
    req = x509.load_pem_x509_csr(pem)
    assert req.is_signature_valid
    assert req.subject == x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, SERVING_COMMON_NAME)])
    assert [e.oid for e in req.extensions] == [ExtensionOID.SUBJECT_ALTERNATIVE_NAME]
    san = req.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["localhost"]
    assert san.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("10.0.0.5"),
                                                       ipaddress.ip_address("127.0.0.1")]


def test_a_root_request_has_no_extension_and_cn_root() -> None:
    req = x509.load_pem_x509_csr(root_spec(node="edge-1").request(certs.new_key()))
    assert req.subject.rfc4514_string() == "CN=root" and len(req.extensions) == 0


def test_the_specs_name_the_signers_and_usages_the_controller_accepts() -> None:
    s = serving_spec(node="edge-1", host_ip="10.0.0.5")
    assert (s.signer_name, s.usages, s.usage) == (COORDINATOR_SERVING_SIGNER, ("server auth", "digital signature"),
                                                  ExtendedKeyUsageOID.SERVER_AUTH)
    assert s.generate_name.startswith("edgewatch-coordinator-edge-1-")
    r = root_spec(node="edge-1")
    assert (r.signer_name, r.usages, r.common_name, r.usage) == (COORDINATOR_CLIENT_SIGNER, ("client auth",), "root",
                                                                 ExtendedKeyUsageOID.CLIENT_AUTH)
    assert r.dns_names == () and r.ip_addresses == ()
    # A node whose address is loopback (a lab) names 127.0.0.1 once.
    assert serving_spec(node="n", host_ip="127.0.0.1").ip_addresses == ("127.0.0.1",)


def test_a_good_serving_certificate_passes(ca: PoolCA) -> None:
    key = certs.new_key()
    spec = serving_spec(node="edge-1", host_ip="10.0.0.5")
    pem = sign_serving(ca, public_key=key.public_key(), ips=["10.0.0.5", "127.0.0.1"], dns=["localhost"])
    issued = spec.check(pem, key, 3600)
    assert issued.valid_s == 3600 and issued.lifetime_s == 3900


@pytest.mark.parametrize(("ips", "dns", "usage", "cn", "reason"), [
    (["127.0.0.1"], ["localhost"], ExtendedKeyUsageOID.SERVER_AUTH, "edgewatch-coordinator", "san"),
    (["10.0.0.5", "127.0.0.1"], [], ExtendedKeyUsageOID.SERVER_AUTH, "edgewatch-coordinator", "san"),
    (["10.0.0.5", "127.0.0.1"], ["localhost"], ExtendedKeyUsageOID.CLIENT_AUTH, "edgewatch-coordinator", "usage"),
    (["10.0.0.5", "127.0.0.1"], ["localhost"], ExtendedKeyUsageOID.SERVER_AUTH, "root", "subject"),
])
def test_a_wrong_serving_certificate_is_refused_with_its_reason(ca: PoolCA, ips: list[str], dns: list[str],
                                                                 usage: Any, cn: str, reason: str) -> None:
    key = certs.new_key()
    pem = sign_serving(ca, public_key=key.public_key(), ips=ips, dns=dns, usage=usage, cn=cn)
    with pytest.raises(certs.CertificateError) as err:
        serving_spec(node="edge-1", host_ip="10.0.0.5").check(pem, key, 3600)
    assert err.value.reason == reason


def test_extra_sans_are_accepted_and_another_key_is_not(ca: PoolCA) -> None:
    key = certs.new_key()
    spec = serving_spec(node="edge-1", host_ip="10.0.0.5")
    pem = sign_serving(ca, public_key=key.public_key(), ips=["10.0.0.5", "127.0.0.1", "10.0.0.6"],
                       dns=["localhost", "edge-1"])
    spec.check(pem, key, None)
    with pytest.raises(certs.CertificateError) as err:
        spec.check(pem, certs.new_key(), None)
    assert err.value.reason == "key"


def test_the_root_certificate_from_the_pool_ca_passes(ca: PoolCA) -> None:
    key = certs.new_key()
    pem = sign_client_certificate(ca, public_key=key.public_key(), node="root", lifetime_s=3600, now=NOW)
    assert root_spec(node="edge-1").check(pem, key, 3600).valid_s == 3600
    with pytest.raises(certs.CertificateError) as err:  # a server usage is not a client one
        root_spec(node="edge-1").check(sign_serving(ca, public_key=key.public_key(), ips=[], dns=["x"], cn="root"),
                                       key, 3600)
    assert err.value.reason == "usage"


# -- the files ------------------------------------------------------------------------------------------


def test_the_tls_folder_layout(tmp_path: Path) -> None:
    tls = TlsFiles.under(tmp_path)
    assert tls.ca_file == tmp_path / "tls" / "ca.crt"
    assert (tls.server.cert_file.name, tls.server.key_file.name) == ("server.crt", "server.key")
    assert (tls.root.cert_file.name, tls.root.key_file.name) == ("root.crt", "root.key")


def test_saved_certificates_are_atomic_private_and_reloaded(ca: PoolCA, tmp_path: Path) -> None:
    tls = TlsFiles.under(tmp_path)
    key = certs.new_key()
    spec = root_spec(node="edge-1")
    issued = spec.check(sign_client_certificate(ca, public_key=key.public_key(), node="root", lifetime_s=3600,
                                                now=NOW), key, 3600)
    certfiles.save(tls.root, key=key, certificate=issued, received_at=10.0)
    assert stat.S_IMODE(tls.root.key_file.stat().st_mode) == 0o600
    assert not list(tls.folder.glob(".*.tmp"))
    stored = certfiles.load(tls.root, check=spec.check, what="root")
    assert stored is not None and stored.certificate == issued and stored.received_at == 10.0
    # The serving spec does not accept the root's files.
    assert certfiles.load(tls.root, check=serving_spec(node="e", host_ip="10.0.0.5").check, what="x") is None
    tls.ca_file.write_bytes(ca.cert_pem())
    assert root_credentials(tls) is not None


# -- the pool CA ----------------------------------------------------------------------------------------


def test_parse_ca(ca: PoolCA) -> None:
    assert parse_ca(ca.cert_pem().decode()) == ca.cert_pem()
    key = certs.new_key()
    leaf = sign_client_certificate(ca, public_key=key.public_key(), node="n", lifetime_s=3600, now=NOW)
    for bad in (None, "", "junk", 5, leaf):
        with pytest.raises(ValueError):
            parse_ca(bad)


async def test_the_pool_ca_is_waited_for_and_installed(ca: PoolCA, tmp_path: Path) -> None:
    kube = FakeKube()
    ca_file = tmp_path / "tls" / "ca.crt"
    task = asyncio.create_task(install_pool_ca(client=kube, namespace="edgewatch", pool="factory-1",  # type: ignore[arg-type]
                                               ca_file=ca_file, timeout_s=1, backoff_initial_s=0.01,
                                               backoff_cap_s=0.05))
    await asyncio.sleep(0.1)
    assert not task.done() and not ca_file.exists()
    kube.put("ConfigMap", {"metadata": {"name": pool_ca_name("factory-1"), "namespace": "edgewatch"},
                           "data": {POOL_CA_CONFIGMAP_KEY: "not a certificate"}})
    await asyncio.sleep(0.1)
    assert not task.done()
    kube.put("ConfigMap", {"metadata": {"name": pool_ca_name("factory-1"), "namespace": "edgewatch"},
                           "data": {POOL_CA_CONFIGMAP_KEY: ca.cert_pem().decode()}})
    async with asyncio.timeout(5):
        assert await task == ca.cert_pem()
    assert ca_file.read_bytes() == ca.cert_pem()


# -- the shared request loop with the serving spec -------------------------------------------------------


class ServingSigner:
    """An in-memory CSR API that signs serving requests with the pool CA, SANs from the request."""

    def __init__(self, ca: PoolCA) -> None:
        self.ca = ca
        self.csrs: dict[str, dict[str, Any]] = {}

    async def create(self, obj: Any) -> Any:
        data = obj.to_dict()
        name = f"{data['metadata']['generateName']}{len(self.csrs):05d}"
        data["metadata"]["name"] = name
        request = x509.load_pem_x509_csr(base64.b64decode(data["spec"]["request"]))
        san = request.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        pem = sign_serving(self.ca, public_key=request.public_key(),  # type: ignore[arg-type]
                           ips=[str(i) for i in san.get_values_for_type(x509.IPAddress)],
                           dns=san.get_values_for_type(x509.DNSName), lifetime_s=data["spec"]["expirationSeconds"])
        self.csrs[name] = {**data, "status": {"conditions": [{"type": "Approved", "status": "True"}],
                                              "certificate": base64.b64encode(pem).decode()}}
        return CertificateSigningRequest.from_dict(self.csrs[name])

    async def get(self, res: Any, name: str) -> Any:
        return res.from_dict(self.csrs[name])


async def test_the_requester_obtains_and_stores_a_serving_certificate(ca: PoolCA, tmp_path: Path) -> None:
    api = ServingSigner(ca)
    tls = TlsFiles.under(tmp_path)
    results: list[str] = []
    r = CertificateRequester(client=api, spec=serving_spec(node="edge-1", host_ip="10.0.0.5"),  # type: ignore[arg-type]
                             files=tls.server, timeout_s=5, lifetime_s=3600, on_result=results.append, poll_s=0.01)
    task = asyncio.create_task(r.run())
    try:
        async with asyncio.timeout(5):
            while r.certificate is None:
                await asyncio.sleep(0.01)
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert results == ["issued"] and list(api.csrs)[0].startswith("edgewatch-coordinator-edge-1-serving-")
    spec = api.csrs[r.requested[0]]["spec"]
    assert spec["signerName"] == COORDINATOR_SERVING_SIGNER and spec["usages"] == ["server auth", "digital signature"]
    assert stat.S_IMODE(tls.server.key_file.stat().st_mode) == 0o600
    assert x509.load_pem_x509_certificate(tls.server.cert_file.read_bytes()).subject.rfc4514_string() == \
        "CN=edgewatch-coordinator"

"""The agent's coordinator client certificate: the pure core (edgewatch.agent.certificates), the
files (edgewatch.agent.certstore) and the request loop (edgewatch.agent.certrequester) against a
small in-memory CSR API with a test signer."""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import json
import random
import stat
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from edgewatch.agent import certstore
from edgewatch.agent.certificates import (
    CertificateError, build_request, check_certificate, new_key, rotation_at, rotation_due,
)
from edgewatch.agent.certrequester import CertificateRequester
from edgewatch.agent.certstore import CertificateFiles
from edgewatch.agent.config import AgentConfig
from edgewatch.core.types import node_name
from edgewatch.kube.api import CertificateSigningRequest
from edgewatch.names import COORDINATOR_CLIENT_SIGNER

CA_KEY = ec.generate_private_key(ec.SECP256R1())
CA_NAME = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test CA")])
N1 = node_name("n1")


def _issue(public: Any, *, cn: str = "n1", lifetime_s: int = 3600, backdate_s: int = 300,
           usage: x509.ObjectIdentifier = ExtendedKeyUsageOID.CLIENT_AUTH) -> bytes:
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)]))
            .issuer_name(CA_NAME).public_key(public).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(seconds=backdate_s))
            .not_valid_after(now + dt.timedelta(seconds=lifetime_s))
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .sign(CA_KEY, hashes.SHA256()))
    return cert.public_bytes(serialization.Encoding.PEM)


# -- the pure core --------------------------------------------------------------------------------------


def test_the_request_names_the_node_and_nothing_else() -> None:
    key = new_key()
    request = x509.load_pem_x509_csr(build_request("n1", key))
    assert request.subject.rfc4514_string() == "CN=n1"
    assert len(request.subject) == 1
    assert list(request.extensions) == []
    assert request.is_signature_valid
    assert isinstance(key.curve, ec.SECP256R1)
    assert request.public_key() == key.public_key()


def test_a_good_certificate_passes_with_the_validity_left_at_receipt() -> None:
    key = new_key()
    pem = _issue(key.public_key(), lifetime_s=3600, backdate_s=300)
    issued = check_certificate(pem, node="n1", key=key, requested_s=3600)
    assert issued.lifetime_s == 3900  # notAfter - notBefore, backdating included
    assert issued.valid_s == 3600     # bounded by what we asked
    assert issued.pem == pem
    assert check_certificate(pem, node="n1", key=key, requested_s=None).valid_s == 3900
    # a signer that gave less than asked: the certificate's own lifetime bounds it
    assert check_certificate(_issue(key.public_key(), lifetime_s=700, backdate_s=0), node="n1", key=key,
                             requested_s=86400).valid_s == 700


@pytest.mark.parametrize(("make", "reason", "message"), [
    (lambda key: _issue(key.public_key(), cn="n2"), "subject", "subject must be exactly CN=n1, got 'CN=n2'"),
    (lambda key: _issue(new_key().public_key()), "key", "the certificate's public key is not ours"),
    (lambda key: _issue(key.public_key(), usage=ExtendedKeyUsageOID.SERVER_AUTH), "usage",
     "the certificate has no client auth extended key usage"),
    (lambda key: _issue(key.public_key(), lifetime_s=300, backdate_s=0), "lifetime",
     "valid for 300 s, less than 600 s"),
    (lambda key: b"not a certificate", "malformed", "no PEM CERTIFICATE block"),
    (lambda key: b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n", "malformed", None),
    (lambda key: b"x" * (64 * 1024 + 1), "malformed", None),
])
def test_a_bad_certificate_is_refused_with_its_reason(make: Any, reason: str, message: str | None) -> None:
    key = new_key()
    with pytest.raises(CertificateError) as refused:
        check_certificate(make(key), node="n1", key=key, requested_s=3600)
    assert refused.value.reason == reason
    if message is not None:
        assert str(refused.value) == message


def test_an_ed25519_certificate_is_not_ours() -> None:
    key = new_key()
    with pytest.raises(CertificateError) as refused:
        check_certificate(_issue(ed25519.Ed25519PrivateKey.generate().public_key()), node="n1", key=key,
                          requested_s=None)
    assert refused.value.reason == "key"


KEY = new_key()


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=2048))
def test_untrusted_bytes_are_a_certificate_error_never_a_crash(data: bytes) -> None:
    for pem in (data, b"-----BEGIN CERTIFICATE-----\n" + base64.encodebytes(data) + b"-----END CERTIFICATE-----\n"):
        with pytest.raises(CertificateError):
            check_certificate(pem, node="n1", key=KEY, requested_s=3600)


def test_rotation_is_at_two_thirds_of_the_validity_on_our_clock() -> None:
    assert rotation_at(received_at=1000.0, valid_s=86400) == 1000.0 + 57600
    assert rotation_at(received_at=5.0, valid_s=600, fraction=0.5) == 305.0
    assert not rotation_due(received_at=1000.0, valid_s=86400, now=1000.0 + 57599)
    assert rotation_due(received_at=1000.0, valid_s=86400, now=1000.0 + 57600)
    assert rotation_due(received_at=1000.0, valid_s=86400, now=999.0)  # our clock went back: age unknown
    with pytest.raises(ValueError):
        rotation_at(received_at=0.0, valid_s=600, fraction=1.0)


# -- the files ----------------------------------------------------------------------------------------


def test_the_store_writes_the_key_0600_and_reads_back_what_agrees(tmp_path: Path) -> None:
    files = CertificateFiles.under(tmp_path / "state")
    key = new_key()
    issued = check_certificate(_issue(key.public_key()), node="n1", key=key, requested_s=3600)
    certstore.save(files, key=key, certificate=issued, received_at=1234.5)
    assert stat.S_IMODE(files.key_file.stat().st_mode) == 0o600
    assert json.loads(files.record_file.read_text()) == {"received_at": 1234.5, "valid_s": 3600.0}
    assert sorted(p.name for p in files.key_file.parent.iterdir()) == [
        "coordinator-client.crt", "coordinator-client.json", "coordinator-client.key"]  # no temporary left
    stored = certstore.load(files, node="n1")
    assert stored is not None
    assert stored.received_at == 1234.5 and stored.certificate == issued
    assert stored.key.private_numbers() == key.private_numbers()
    assert certstore.load(files, node="n2") is None  # not this node's


def test_the_store_ignores_a_key_and_certificate_that_do_not_match(tmp_path: Path,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    files = CertificateFiles.under(tmp_path)
    assert certstore.load(files, node="n1") is None
    key = new_key()
    certstore.save(files, key=key, certificate=check_certificate(_issue(key.public_key()), node="n1", key=key,
                                                                 requested_s=3600), received_at=1.0)
    files.key_file.write_bytes(new_key().private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                       serialization.NoEncryption()))
    assert certstore.load(files, node="n1") is None
    assert "stored coordinator client certificate not used (key): the certificate's public key is not ours" \
        in caplog.text
    files.record_file.write_text("{")
    assert certstore.load(files, node="n1") is None


# -- the loop, against an in-memory CSR API ----------------------------------------------------------------


class FakeCsrApi:
    """create (generateName) and get of CertificateSigningRequests; ``answers`` say how each new
    request is decided: "sign", "deny", "fail", "wrong-cn", "pending" (in order; the last repeats)."""

    def __init__(self, answers: list[str], lifetime_s: int | None = None) -> None:
        self.answers = answers
        self.lifetime_s = lifetime_s
        self.csrs: dict[str, dict[str, Any]] = {}
        self.created: list[dict[str, Any]] = []
        self.fail_create = 0

    async def create(self, obj: Any) -> Any:
        if self.fail_create:
            self.fail_create -= 1
            raise OSError("connection refused")
        data = obj.to_dict()
        name = f"{data['metadata']['generateName']}{len(self.created):05d}"
        data["metadata"] = {"name": name}
        self.created.append(data)
        answer = self.answers[min(len(self.created), len(self.answers)) - 1]
        request = x509.load_pem_x509_csr(base64.b64decode(data["spec"]["request"]))
        status: dict[str, Any] = {}
        if answer == "sign" or answer == "wrong-cn":
            lifetime = self.lifetime_s or data["spec"]["expirationSeconds"]
            status = {"conditions": [{"type": "Approved", "status": "True"}],
                      "certificate": base64.b64encode(_issue(request.public_key(), lifetime_s=lifetime,
                                                             cn="n1" if answer == "sign" else "n9")).decode()}
        elif answer in ("deny", "fail"):
            kind = "Denied" if answer == "deny" else "Failed"
            status = {"conditions": [{"type": kind, "status": "True", "reason": "EdgewatchPolicySubject",
                                      "message": "subject must be exactly CN=n1"}]}
        self.csrs[name] = {**data, "status": status}
        return CertificateSigningRequest.from_dict(self.csrs[name])

    async def get(self, res: Any, name: str) -> Any:
        return res.from_dict(self.csrs[name])


class Listener:
    def __init__(self) -> None:
        self.told: list[CertificateFiles] = []

    def certificate_changed(self, files: CertificateFiles) -> None:
        self.told.append(files)


def _requester(api: FakeCsrApi, state: Path, *, listener: Listener | None = None, fraction: float = 2 / 3,
               wall: Any = None, registry: CollectorRegistry | None = None,
               lifetime_s: int = 3600) -> CertificateRequester:
    return CertificateRequester(client=api, node=N1, state_dir=state, registry=registry or CollectorRegistry(),  # type: ignore[arg-type]
                                timeout_s=1.0, lifetime_s=lifetime_s, fraction=fraction,
                                listeners=[listener] if listener else [], poll_s=0.01, wait_s=0.2,
                                backoff_initial_s=0.01, backoff_cap_s=0.02, rng=random.Random(1),
                                **({"wall": wall} if wall else {}))


def _count(r: CertificateRequester, result: str) -> float:
    return r.metrics.requests.labels(result)._value.get()


async def _until(check: Any, timeout_s: float = 5.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not check():
            await asyncio.sleep(0.01)


async def _run_until(r: CertificateRequester, check: Any) -> None:
    task = asyncio.create_task(r.run())
    try:
        await _until(check)
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_the_agent_requests_stores_and_announces_its_certificate(tmp_path: Path) -> None:
    api, listener, registry = FakeCsrApi(["sign"]), Listener(), CollectorRegistry()
    r = _requester(api, tmp_path, listener=listener, registry=registry)
    await _run_until(r, lambda: listener.told)
    assert [c["metadata"]["name"] for c in api.created] == ["n1-coordinator-00000"]
    assert r.requested == ["n1-coordinator-00000"]
    spec = api.created[0]["spec"]
    assert (spec["signerName"], spec["usages"], spec["expirationSeconds"]) == \
        (COORDINATOR_CLIENT_SIGNER, ["client auth"], 3600)
    assert listener.told == [CertificateFiles.under(tmp_path)]
    assert registry.get_sample_value("edgewatch_agent_certificate_requests_total", {"result": "issued"}) == 1
    assert 3590 < (registry.get_sample_value("edgewatch_agent_certificate_expiry_seconds") or 0) <= 3600
    key = serialization.load_pem_private_key(CertificateFiles.under(tmp_path).key_file.read_bytes(), None)
    cert = x509.load_pem_x509_certificate(CertificateFiles.under(tmp_path).cert_file.read_bytes())
    assert cert.public_key() == key.public_key()  # type: ignore[comparison-overlap]
    assert stat.S_IMODE(CertificateFiles.under(tmp_path).key_file.stat().st_mode) == 0o600


async def test_a_denied_request_is_counted_and_retried_with_a_fresh_key(tmp_path: Path,
                                                                      caplog: pytest.LogCaptureFixture) -> None:
    api, listener = FakeCsrApi(["deny", "fail", "wrong-cn", "pending", "sign"]), Listener()
    api.fail_create = 1
    r = _requester(api, tmp_path, listener=listener)
    await _run_until(r, lambda: listener.told)
    assert [_count(r, x) for x in ("error", "denied", "failed", "invalid", "timeout", "issued")] == [1, 1, 1, 1, 1, 1]
    requests = {c["spec"]["request"] for c in api.created}
    assert len(api.created) == 5 and len(requests) == 5  # a new key every time
    assert "coordinator client certificate request denied: EdgewatchPolicySubject: subject must be exactly CN=n1" \
        in caplog.text
    assert "coordinator client certificate refused (subject): subject must be exactly CN=n1, got 'CN=n9'" \
        in caplog.text


async def test_a_restart_uses_the_stored_certificate_without_a_request(tmp_path: Path) -> None:
    r = _requester(FakeCsrApi(["sign"]), tmp_path)
    await _run_until(r, lambda: r.certificate is not None)
    first = r.certificate
    api, listener = FakeCsrApi(["sign"]), Listener()
    again = _requester(api, tmp_path, listener=listener)
    await _run_until(again, lambda: listener.told)
    await asyncio.sleep(0.1)
    assert api.created == [] and again.certificate == first
    assert listener.told == [CertificateFiles.under(tmp_path)]
    assert 3500 < again.expiry_s() <= 3600


async def test_a_stored_certificate_due_for_rotation_is_replaced(tmp_path: Path) -> None:
    r = _requester(FakeCsrApi(["sign"]), tmp_path)
    await _run_until(r, lambda: r.certificate is not None)
    received = json.loads(CertificateFiles.under(tmp_path).record_file.read_text())["received_at"]
    api = FakeCsrApi(["sign"])
    later = _requester(api, tmp_path, wall=lambda: received + 2400)  # 2/3 of 3600 s later, by our wall clock
    await _run_until(later, lambda: later.certificate is not None)
    assert len(api.created) == 1 and later.certificate != r.certificate


async def test_the_certificate_is_rotated_with_a_new_key(tmp_path: Path) -> None:
    api, listener = FakeCsrApi(["sign"]), Listener()
    r = _requester(api, tmp_path, listener=listener, fraction=0.0005, lifetime_s=600)  # rotate after 0.3 s
    keys: list[bytes] = []

    def rotated() -> bool:
        current = CertificateFiles.under(tmp_path).key_file.read_bytes() if listener.told else b""
        if current and (not keys or keys[-1] != current):
            keys.append(current)
        return len(keys) >= 2

    await _run_until(r, rotated)
    assert len(api.created) >= 2 and keys[0] != keys[1]
    assert _count(r, "issued") >= 2


def test_the_certificate_needs_a_state_folder(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="needs a state folder"):
        AgentConfig(node=N1, identity_file=tmp_path / "id", coordinator_client_certificate=True)
    with pytest.raises(ValueError, match="600 .. 86400"):
        AgentConfig(node=N1, identity_file=tmp_path / "id", coordinator_certificate_lifetime_s=90000)
    assert AgentConfig(node=N1, identity_file=tmp_path / "id").coordinator_client_certificate is False


def _loop_names(agent: Any) -> list[str]:
    loops = agent._loops()
    for coroutine in loops.values():
        coroutine.close()
    return list(loops)


def test_the_agent_runs_the_requester_only_when_asked(tmp_path: Path) -> None:
    from edgewatch.agent.agent import Agent

    off = Agent(config=AgentConfig(node=N1, identity_file=tmp_path / "id.key"), client=object())  # type: ignore[arg-type]
    assert off.certificates is None and "coordinator-certificate" not in _loop_names(off)
    on = Agent(config=AgentConfig(node=N1, identity_file=tmp_path / "id.key", state_dir=tmp_path / "state",
                                  coordinator_client_certificate=True, coordinator_certificate_lifetime_s=7200),
               client=object())  # type: ignore[arg-type]
    assert on.certificates is not None and on.certificates.lifetime_s == 7200
    assert on.certificates.files == CertificateFiles.under(tmp_path / "state")
    assert "coordinator-certificate" in _loop_names(on)
    assert on.registry.get_sample_value("edgewatch_agent_certificate_expiry_seconds") == 0.0


def test_a_certificate_listing_an_extension_twice_is_a_certificate_error_not_a_crash() -> None:
    """Found by make fuzz (issued certificates): cryptography raises DuplicateExtension, which is no
    ValueError, when a certificate with KeyUsage twice is read; check_certificate let it through."""
    key = new_key()
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "n1")]))
            .issuer_name(CA_NAME).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(seconds=60)).not_valid_after(now + dt.timedelta(seconds=3600))
            .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False, key_cert_sign=False,
                                         crl_sign=False, encipher_only=False, decipher_only=False), critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
            .sign(CA_KEY, hashes.SHA256()))
    der = cert.public_bytes(serialization.Encoding.DER).replace(b"\x06\x03\x55\x1d\x25", b"\x06\x03\x55\x1d\x0f")
    pem = (b"-----BEGIN CERTIFICATE-----\n" + base64.encodebytes(der) + b"-----END CERTIFICATE-----\n")
    with pytest.raises(CertificateError) as err:
        check_certificate(pem, node="n1", key=key, requested_s=3600)
    assert err.value.reason == "malformed"

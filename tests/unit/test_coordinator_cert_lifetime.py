"""A coordinator session lives no longer than its client certificate, and reconnects after a
rotation (docs/security.md): the pure decisions of ``edgewatch.agent.coordinator.certlife``, the runner
passing them on (validity from the requester's record, never notAfter against our clock), and the
pool CA re-read."""

from __future__ import annotations

import datetime as dt
import math
import random
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from cryptography.hazmat.primitives.asymmetric import ec
from prometheus_client import CollectorRegistry

from edgewatch.core.identity import NodeKey, NodeKeyring
from edgewatch.agent import certstore
from edgewatch.agent.certificates import check_certificate
from edgewatch.agent.certstore import CertificateFiles
from edgewatch.agent.coordinating import CoordinatorRunner, node_tls
from edgewatch.agent.coordinator import NodeCertificateTLS, PoolCoordinator
from edgewatch.agent.coordinator.certlife import (
    CERTIFICATE_EXPIRED,
    CERTIFICATE_ROTATED,
    certificate_deadline,
    reconnect_delay,
    session_end,
)
from edgewatch.agent.coordinator.errors import Reconnect, reconnect_of
from edgewatch.controller.poolca import make_ca, sign_client_certificate
from edgewatch.names import POOL_CA_CONFIGMAP_KEY

NOW = dt.datetime.now(dt.timezone.utc)
CA = make_ca("p", now=NOW)
NEW_CA = make_ca("p", now=NOW)


# -- certificate_deadline ----------------------------------------------------------------------------------

@pytest.mark.parametrize("now_wall, received_at, valid_s, expected", [
    (1000.0, 1000.0, 600.0, 100.0 + 600.0),    # just received: all of it left
    (1400.0, 1000.0, 600.0, 100.0 + 200.0),    # 400 s old: 200 s left
    (1700.0, 1000.0, 600.0, 100.0 - 100.0),    # past its end: already expired (in the past)
    (999.0, 1000.0, 600.0, 100.0),             # our clock went back: age unknown, expired now
    (math.nan, 1000.0, 600.0, 100.0),          # no usable clock: expired now
])
def test_certificate_deadline(now_wall: float, received_at: float, valid_s: float, expected: float) -> None:
    assert certificate_deadline(now_mono_s=100.0, now_wall_s=now_wall, received_at_wall_s=received_at,
                                valid_s=valid_s) == pytest.approx(expected)


# -- reconnect_delay ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("draw, jitter_s, expected", [
    (0.0, 30.0, 0.0), (0.5, 30.0, 15.0), (0.999, 30.0, 29.97), (1.5, 30.0, 30.0), (-1.0, 30.0, 0.0),
    (0.5, 0.0, 0.0), (0.5, -5.0, 0.0),
])
def test_reconnect_delay(draw: float, jitter_s: float, expected: float) -> None:
    assert reconnect_delay(draw=draw, jitter_s=jitter_s) == pytest.approx(expected)


def test_reconnect_delays_spread_a_pool_over_the_window() -> None:
    rng = random.Random(7)
    delays = [reconnect_delay(draw=rng.random()) for _ in range(200)]
    assert all(0 <= d <= 30 for d in delays) and max(delays) - min(delays) > 25


# -- session_end --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("now, connected, expires, rotated, reconnect_at, expected", [
    # no bound known (operator TLS), never rotated: wait for a notice
    (10.0, 0.0, None, None, None, (None, math.inf)),
    # bound ahead: wait until it
    (10.0, 0.0, 50.0, None, None, (None, 40.0)),
    # at / past the bound: expired
    (50.0, 0.0, 50.0, None, None, (CERTIFICATE_EXPIRED, 0.0)),
    (60.0, 0.0, 50.0, None, None, (CERTIFICATE_EXPIRED, 0.0)),
    # rotated after we connected: reconnect at reconnect_at, not before
    (10.0, 0.0, 500.0, 5.0, 20.0, (None, 10.0)),
    (20.0, 0.0, 500.0, 5.0, 20.0, (CERTIFICATE_ROTATED, 0.0)),
    # rotated before we connected: this session already has the new certificate
    (30.0, 6.0, 500.0, 5.0, 20.0, (None, 470.0)),
    # the same instant: reconnect (a spurious reconnect is harmless, a missed one is not)
    (30.0, 5.0, 500.0, 5.0, 20.0, (CERTIFICATE_ROTATED, 0.0)),
    # expiry first, even with a rotation pending
    (40.0, 0.0, 40.0, 5.0, 60.0, (CERTIFICATE_EXPIRED, 0.0)),
    # whichever comes first bounds the wait
    (10.0, 0.0, 15.0, 5.0, 60.0, (None, 5.0)),
])
def test_session_end(now: float, connected: float, expires: float | None, rotated: float | None,
                     reconnect_at: float | None, expected: tuple[str | None, float]) -> None:
    assert session_end(now_s=now, connected_at_s=connected, expires_at_s=expires, rotated_at_s=rotated,
                       reconnect_at_s=reconnect_at) == expected


def test_reconnect_is_found_inside_exception_groups() -> None:
    inner = Reconnect(CERTIFICATE_ROTATED)
    assert reconnect_of(ExceptionGroup("g", [ValueError(), ExceptionGroup("h", [inner])])) is inner
    assert reconnect_of(ExceptionGroup("g", [ValueError()])) is None
    assert reconnect_of(inner) is inner


# -- the runner ---------------------------------------------------------------------------------------------

def store(files: CertificateFiles, *, received_at: float, ca: object = CA) -> None:
    """What the requester stores on receipt: key, certificate, and the record (our wall clock)."""
    key = ec.generate_private_key(ec.SECP256R1())
    pem = sign_client_certificate(ca, public_key=key.public_key(), node="n1", lifetime_s=3600,  # type: ignore[arg-type]
                                  now=NOW)
    files.key_file.parent.mkdir(parents=True, exist_ok=True)
    certstore.save(files, key=key, certificate=check_certificate(pem, node="n1", key=key, requested_s=3600),
                   received_at=received_at)


class FakeKube:
    def __init__(self, pem: bytes) -> None:
        self.data = {POOL_CA_CONFIGMAP_KEY: pem.decode()}
        self.gets = 0

    async def get(self, _kind: object, _name: str, *, namespace: str) -> object:
        self.gets += 1
        return SimpleNamespace(data=self.data)


def make_runner(files: CertificateFiles, kube: FakeKube, *, wall: float = 10_000.0) -> CoordinatorRunner:
    return CoordinatorRunner(node="n1", url="https://127.0.0.1:2379", pool="p", tls=None, kube=kube,  # type: ignore[arg-type]
                             registry=CollectorRegistry(), link=SimpleNamespace(up=True),  # type: ignore[arg-type]
                             verdicts=SimpleNamespace(verdict_of=lambda _n: "healthy"),  # type: ignore[arg-type]
                             signer=NodeKeyring(node="n1", keys=[NodeKey.generate()]),
                             settings=SimpleNamespace(), clock=SimpleNamespace(),  # type: ignore[arg-type]
                             node_certificate=files, namespace="ew", ca_refresh_s=0.0,
                             rng=random.Random(1), wall=lambda: wall)


def coordinator_with(files: CertificateFiles) -> PoolCoordinator:
    return PoolCoordinator(url="https://127.0.0.1:2379", pool="p", node="n1", kube=object(),  # type: ignore[arg-type]
                           cloud_ok=lambda: True, verdict_of=lambda _n: "healthy", tls=node_tls(files, CA.cert_pem()),
                           signer=NodeKeyring(node="n1", keys=[NodeKey.generate()]))


def test_the_expiry_is_the_recorded_validity_from_receipt_on_our_clocks(tmp_path: Path) -> None:
    files = CertificateFiles.under(tmp_path)
    store(files, received_at=10_000.0 - 1000.0)  # received 1000 s ago (our wall clock), valid 3600 s
    r = make_runner(files, FakeKube(CA.cert_pem()))
    before = time.monotonic()
    r.certificate_changed(files)
    assert r._cert_expires_at is not None
    assert before + 2600 - 1 <= r._cert_expires_at <= time.monotonic() + 2600


def test_without_a_record_the_certificates_own_validity_counts_from_now(tmp_path: Path) -> None:
    files = CertificateFiles.under(tmp_path)
    store(files, received_at=0.0)
    files.record_file.unlink()
    r = make_runner(files, FakeKube(CA.cert_pem()))
    r.certificate_changed(files)
    # notBefore is backdated 5 min: 3600 + 300 s from now, notAfter never compared with our clock
    assert r._cert_expires_at == pytest.approx(time.monotonic() + 3900, abs=5)


def test_first_certificate_bounds_the_session_a_rotation_reconnects_it(tmp_path: Path) -> None:
    files = CertificateFiles.under(tmp_path)
    store(files, received_at=10_000.0)
    r = make_runner(files, FakeKube(CA.cert_pem()))
    r.certificate_changed(files)
    coordinator = coordinator_with(files)
    r.current = coordinator
    coordinator.certificate_changed(expires_at_s=r._cert_expires_at)  # as _start does
    assert coordinator._cert_expires_at == r._cert_expires_at and coordinator._cert_rotated_at is None

    store(files, received_at=10_000.0)  # the rotation
    r.certificate_changed(files)
    assert coordinator._cert_rotated_at is not None and coordinator._cert_reconnect_at is not None
    assert 0 <= coordinator._cert_reconnect_at - coordinator._cert_rotated_at <= r.rotation_jitter_s
    assert coordinator._cert_wake.is_set()


async def test_a_changed_pool_ca_is_the_new_trust_root(tmp_path: Path) -> None:
    files = CertificateFiles.under(tmp_path)
    store(files, received_at=10_000.0)
    kube = FakeKube(CA.cert_pem())
    r = make_runner(files, kube)
    r.certificate_changed(files)
    coordinator = coordinator_with(files)
    r.current = coordinator
    await r._refresh_pool_ca()  # unchanged: nothing happens
    assert kube.gets == 1 and coordinator._trust_changed_at is None

    kube.data = {POOL_CA_CONFIGMAP_KEY: (CA.cert_pem() + NEW_CA.cert_pem()).decode()}  # old + new
    await r._refresh_pool_ca()
    assert isinstance(coordinator.tls, NodeCertificateTLS)
    assert coordinator.tls.ca_pem == CA.cert_pem() + NEW_CA.cert_pem()
    assert coordinator._trust_reconnect_at is not None and coordinator._trust_changed_at is not None

    changed = coordinator._trust_changed_at
    kube.data = {POOL_CA_CONFIGMAP_KEY: "junk"}  # unusable: the roots in use are kept
    await r._refresh_pool_ca()
    assert coordinator.tls.ca_pem == CA.cert_pem() + NEW_CA.cert_pem() and coordinator._trust_changed_at == changed


async def test_the_pool_ca_is_re_read_only_every_ca_refresh_s(tmp_path: Path) -> None:
    files = CertificateFiles.under(tmp_path)
    store(files, received_at=10_000.0)
    kube = FakeKube(CA.cert_pem())
    r = make_runner(files, kube)
    r.ca_refresh_s = 3600.0
    r.certificate_changed(files)
    r.current = coordinator_with(files)
    await r._refresh_pool_ca()
    await r._refresh_pool_ca()
    assert kube.gets == 1

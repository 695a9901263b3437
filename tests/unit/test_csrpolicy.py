"""edgewatch.controller.csrpolicy: every rule with real PKCS#10 requests made by cryptography, and
random bytes as the request never raise. Also the pool CA's pure signing (edgewatch.controller.poolca)."""

from __future__ import annotations

import base64
import datetime as dt
from collections.abc import Sequence
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from hypothesis import given, settings
from hypothesis import strategies as st

from edgewatch.controller.csrpolicy import (
    MAX_LIFETIME_S,
    MIN_LIFETIME_S,
    AgentIdentity,
    CsrSpec,
    Deny,
    Ignore,
    Sign,
    decide,
    decide_api,
    parse_spec,
)
from edgewatch.controller.poolca import CLOCK_SKEW_S, load_ca, make_ca, sign_client_certificate
from edgewatch.names import COORDINATOR_CLIENT_SIGNER, NODE_NAME_EXTRA, pool_ca_name

from _csrs import SA_GROUPS, build_csr, duplicate_key_usage_csr, node_extra, pem_block

AGENT = AgentIdentity()
AGENT_USER = "system:serviceaccount:edgewatch:edgewatch-agent"
POOLS = {"n1": "shop-a", "n2": "shop-a"}
P256 = ec.generate_private_key(ec.SECP256R1())


def pool_of(node: str) -> str | None:
    return POOLS.get(node)


def csr_pem(*, cn: str | None = "n1", key: Any = None, names: Sequence[x509.NameAttribute] | None = None,
            sans: Sequence[x509.GeneralName] = (), extensions: Sequence[x509.ExtensionType] = ()) -> bytes:
    return build_csr(cn=cn, key=key or P256, names=names, sans=sans, extensions=extensions)

def spec(request: bytes | None = None, *, node: str | None = "n1", username: str = AGENT_USER,
         usages: Sequence[str] = ("client auth",), expiration: int | None = 3600,
         signer: str = COORDINATOR_CLIENT_SIGNER, extra: dict[str, tuple[str, ...]] | None = None) -> CsrSpec:
    return CsrSpec(signer_name=signer, request=csr_pem() if request is None else request, usages=tuple(usages),
                   username=username, groups=SA_GROUPS, extra=node_extra(node, extra), expiration_seconds=expiration)


def run(s: CsrSpec) -> Sign | Deny | Ignore:
    return decide(s, agent=AGENT, pool_of=pool_of)


def test_agent_username_matches_the_shipped_service_account() -> None:
    assert AGENT.username == AGENT_USER


def test_a_good_request_is_signed() -> None:
    d = run(spec())
    assert d == Sign(node="n1", pool="shop-a", lifetime_s=3600, public_key=P256.public_key())
    assert isinstance(d, Sign) and d.public_key == P256.public_key()


def test_ed25519_and_digital_signature_usage_are_signed() -> None:
    key = ed25519.Ed25519PrivateKey.generate()
    d = run(spec(csr_pem(key=key), usages=("digital signature", "client auth")))
    assert isinstance(d, Sign) and d.node == "n1"


def test_another_signer_is_ignored() -> None:
    assert run(spec(signer="kubernetes.io/kube-apiserver-client")) == Ignore("kubernetes.io/kube-apiserver-client")
    # whatever its shape: a malformed request of another signer is not ours to deny
    assert decide_api({"signerName": "example.com/x", "request": 5}, agent=AGENT, pool_of=pool_of) \
        == Ignore("example.com/x")
    assert decide_api(None, agent=AGENT, pool_of=pool_of) == Ignore("")


ED = ed25519.Ed25519PrivateKey.generate()


@pytest.mark.parametrize(("case", "expected_reason"), [
    (spec(username="system:serviceaccount:edgewatch:edgewatch-controller"), "not_agent"),
    (spec(username="system:node:n1"), "not_agent"),
    (spec(username="kubernetes-admin"), "not_agent"),
    (spec(node=None), "node_claim"),
    (spec(extra={NODE_NAME_EXTRA: ("n1", "n2")}), "node_claim"),
    (spec(extra={NODE_NAME_EXTRA: ("",)}), "node_claim"),
    (spec(b"not a pem"), "malformed"),
    (spec(b"-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n"), "malformed"),
    (spec(csr_pem() + csr_pem()), "malformed"),
    (spec(csr_pem(cn="n2")), "subject"),
    (spec(csr_pem(cn="n1 ")), "subject"),
    (spec(csr_pem(cn=None)), "subject"),
    (spec(csr_pem(names=[x509.NameAttribute(NameOID.COMMON_NAME, "n1"),
                         x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:masters")])), "subject"),
    (spec(csr_pem(names=[x509.NameAttribute(NameOID.COMMON_NAME, "n1"),
                         x509.NameAttribute(NameOID.COMMON_NAME, "n1")])), "subject"),
    (spec(csr_pem(names=[x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, "n1")])), "subject"),
    (spec(csr_pem(sans=[x509.DNSName("n1")])), "san"),
    (spec(csr_pem(sans=[x509.DNSName("n2"), x509.IPAddress(__import__("ipaddress").ip_address("10.0.0.2"))])), "san"),
    (spec(csr_pem(extensions=[x509.BasicConstraints(ca=True, path_length=None)])), "extensions"),
    (spec(csr_pem(extensions=[x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH])])), "extensions"),
    (spec(csr_pem(key=rsa.generate_private_key(public_exponent=65537, key_size=2048))), "key"),
    (spec(csr_pem(key=ec.generate_private_key(ec.SECP384R1()))), "key"),
    (spec(usages=()), "usages"),
    (spec(usages=("server auth",)), "usages"),
    (spec(usages=("client auth", "server auth")), "usages"),
    (spec(usages=("client auth", "client auth")), "usages"),
    (spec(usages=("client auth", "key encipherment")), "usages"),
    (spec(csr_pem(cn="n9"), node="n9"), "no_pool"),
])
def test_every_rule_denies(case: CsrSpec, expected_reason: str) -> None:
    d = run(case)
    assert isinstance(d, Deny), d
    assert d.reason == expected_reason, d
    assert d.message


def test_a_tampered_signature_is_denied() -> None:
    der = x509.load_pem_x509_csr(csr_pem()).public_bytes(serialization.Encoding.DER)
    tampered = der[:-3] + bytes([der[-3] ^ 0x01]) + der[-2:]  # inside the signature
    pem = pem_block(tampered)
    d = run(spec(pem))
    assert isinstance(d, Deny) and d.reason in ("signature", "malformed"), d
    # a subject swapped under the original signature: parses, does not verify
    good = x509.load_pem_x509_csr(csr_pem(cn="n1")).public_bytes(serialization.Encoding.DER)
    swapped = good.replace(b"\x0c\x02n1", b"\x0c\x02n2", 1)
    assert swapped != good
    pem = pem_block(swapped)
    d = decide(spec(pem, node="n2"), agent=AGENT, pool_of=pool_of)
    assert d == Deny("signature", "the request's signature does not verify with its own key")


@pytest.mark.parametrize(("requested", "lifetime"), [
    (None, MAX_LIFETIME_S), (600, 600), (3600, 3600), (MAX_LIFETIME_S, MAX_LIFETIME_S),
    (7 * 24 * 3600, MAX_LIFETIME_S), (60, MIN_LIFETIME_S), (0, MIN_LIFETIME_S), (-5, MIN_LIFETIME_S),
])
def test_lifetime_is_bounded(requested: int | None, lifetime: int) -> None:
    d = run(spec(expiration=requested))
    assert isinstance(d, Sign) and d.lifetime_s == lifetime


def test_pool_of_none_for_uncovered_node_denies_with_no_pool() -> None:
    d = decide(spec(), agent=AGENT, pool_of=lambda node: None)
    assert d == Deny("no_pool", "node n1 is not a covered node of a pool (label edgewatch.io/pool)")


def _api_spec(**over: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "signerName": COORDINATOR_CLIENT_SIGNER, "request": base64.b64encode(csr_pem()).decode(),
        "usages": ["client auth"], "username": AGENT_USER, "groups": ["system:serviceaccounts"],
        "extra": {NODE_NAME_EXTRA: ["n1"], "authentication.kubernetes.io/pod-name": ["agent-n1"]},
        "expirationSeconds": 1800}
    out.update(over)
    return out


def test_the_api_shape_is_parsed_and_signed() -> None:
    d = decide_api(_api_spec(), agent=AGENT, pool_of=pool_of)
    assert isinstance(d, Sign) and (d.node, d.pool, d.lifetime_s) == ("n1", "shop-a", 1800)


@pytest.mark.parametrize("over", [
    {"request": "!!!"}, {"request": 7}, {"request": None}, {"request": "A" * 100_000}, {"usages": "client auth"},
    {"usages": [1]}, {"groups": {"a": 1}}, {"extra": []}, {"extra": {NODE_NAME_EXTRA: "n1"}},
    {"extra": {NODE_NAME_EXTRA: [1]}}, {"expirationSeconds": "3600"}, {"expirationSeconds": True},
    {"expirationSeconds": 1.5}, {"username": None},
])
def test_malformed_api_specs_are_denied(over: dict[str, Any]) -> None:
    d = decide_api(_api_spec(**over), agent=AGENT, pool_of=pool_of)
    assert isinstance(d, Deny) and d.reason == "malformed", d
    assert isinstance(parse_spec(_api_spec(**over)), Deny)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=2048))
def test_random_bytes_as_the_request_never_raise(data: bytes) -> None:
    d = run(spec(data))
    assert isinstance(d, Deny)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=1200))
def test_random_der_in_a_pem_block_never_raises(data: bytes) -> None:
    pem = pem_block(data)
    assert isinstance(run(spec(pem)), Deny)


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=0, max_value=600), st.integers(min_value=0, max_value=255))
def test_a_flipped_byte_of_a_good_request_never_raises(position: int, flip: int) -> None:
    good = x509.load_pem_x509_csr(csr_pem())
    der = bytearray(good.public_bytes(serialization.Encoding.DER))
    der[position % len(der)] ^= flip
    pem = pem_block(bytes(der))
    d = run(spec(pem))
    assert isinstance(d, (Deny, Sign))
    if isinstance(d, Sign):  # only the same signed request passes (a flip of the signature BIT
        flipped = x509.load_pem_x509_csr(pem)  # STRING's unused-bits octet the parser accepts)
        assert (flipped.tbs_certrequest_bytes, flipped.signature) == (good.tbs_certrequest_bytes, good.signature)


@settings(max_examples=200, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=20),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner,
                                                                                  max_size=4), max_leaves=20))
def test_any_json_as_a_field_never_raises(value: object) -> None:
    for key in ("request", "usages", "username", "groups", "extra", "expirationSeconds"):
        d = decide_api(_api_spec(**{key: value}), agent=AGENT, pool_of=pool_of)
        assert isinstance(d, (Deny, Sign))


# -- the pool CA (pure) ------------------------------------------------------------------------------


def test_pool_ca_names_are_object_names() -> None:
    assert pool_ca_name("shop-a") == "edgewatch-pool-ca-shop-a-5402d12940"
    assert pool_ca_name("Shop_A").startswith("edgewatch-pool-ca-shop-a-") and pool_ca_name("Shop_A") != \
        pool_ca_name("shop-a")
    assert len(pool_ca_name("x" * 63)) <= 63


def test_leaf_certificate_is_a_client_certificate_for_the_node_only() -> None:
    now = dt.datetime(2026, 5, 1, 12, 0, tzinfo=dt.UTC)
    ca = make_ca("shop-a", now=now)
    assert ca.cert.subject.rfc4514_string() == "CN=edgewatch pool shop-a CA"
    assert ca.cert.not_valid_after_utc - now == dt.timedelta(days=365)
    loaded = load_ca(ca.cert_pem(), ca.key_pem())
    leaf_key = ec.generate_private_key(ec.SECP256R1())
    pem = sign_client_certificate(loaded, public_key=leaf_key.public_key(), node="n1", lifetime_s=3600, now=now)
    cert = x509.load_pem_x509_certificate(pem)
    cert.verify_directly_issued_by(ca.cert)
    assert cert.subject.rfc4514_string() == "CN=n1"
    assert cert.issuer == ca.cert.subject
    assert cert.not_valid_before_utc == now - dt.timedelta(seconds=CLOCK_SKEW_S)
    assert cert.not_valid_after_utc == now + dt.timedelta(seconds=3600)
    assert cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value == \
        x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH])
    assert cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is False
    usage = cert.extensions.get_extension_for_class(x509.KeyUsage).value
    assert usage.digital_signature and not usage.key_cert_sign
    assert cert.extensions.get_extension_for_class(x509.AuthorityKeyIdentifier).value.key_identifier == \
        ca.cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value.key_identifier
    with pytest.raises(x509.ExtensionNotFound):
        cert.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    assert 0 < cert.serial_number < 2**128
    assert cert.public_key() == leaf_key.public_key()


def test_leaf_never_outlives_its_ca_and_a_dying_ca_signs_nothing() -> None:
    now = dt.datetime(2026, 5, 1, 12, 0, tzinfo=dt.UTC)
    ca = make_ca("p", now=now)
    later = ca.cert.not_valid_after_utc - dt.timedelta(hours=1)
    pem = sign_client_certificate(ca, public_key=P256.public_key(), node="n1", lifetime_s=MAX_LIFETIME_S, now=later)
    assert x509.load_pem_x509_certificate(pem).not_valid_after_utc == ca.cert.not_valid_after_utc
    with pytest.raises(ValueError, match="too soon"):
        sign_client_certificate(ca, public_key=P256.public_key(), node="n1", lifetime_s=3600,
                                now=ca.cert.not_valid_after_utc - dt.timedelta(seconds=60))


def test_load_ca_refuses_what_is_not_a_p256_ca() -> None:
    now = dt.datetime.now(dt.UTC)
    ca, other = make_ca("p", now=now), make_ca("q", now=now)
    with pytest.raises(ValueError, match="does not match"):
        load_ca(ca.cert_pem(), other.key_pem())
    with pytest.raises(ValueError, match="parse"):
        load_ca(b"junk", ca.key_pem())
    leaf = sign_client_certificate(ca, public_key=P256.public_key(), node="n1", lifetime_s=3600, now=now)
    p256_pem = P256.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption())
    with pytest.raises(ValueError, match="not a CA"):
        load_ca(leaf, p256_pem)


def test_a_node_named_root_is_never_signed() -> None:
    """etcd takes a client certificate's CN as the user: ``CN=root`` would be etcd's administrator."""
    d = decide_api(_api_spec(extra={NODE_NAME_EXTRA: ["root"]}, request=base64.b64encode(csr_pem(cn="root")).decode()),
                   agent=AGENT, pool_of=lambda node: "shop-a")
    assert isinstance(d, Deny) and d.reason == "reserved", d


def test_a_validly_signed_request_with_a_duplicate_extension_is_denied_not_a_crash() -> None:
    """An agent writes its CSR by hand with KeyUsage twice (the builder refuses to): cryptography
    raises DuplicateExtension, no ValueError, when the extensions are first read; it crashed the
    policy before (found by make fuzz's issued-certificate target on the sibling check)."""
    d = run(spec(duplicate_key_usage_csr(P256, "n1")))
    assert isinstance(d, Deny) and d.reason == "malformed", d

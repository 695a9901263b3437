"""edgewatch.controller.coordinatorcsr: the pool coordinator's serving and root certificate requests,
every rule of both tables with real PKCS#10 requests; the agents' rules still apply to the agent
(no CN=root, no serving certificate) and the coordinator gets no node's CN; random input never
raises. Also poolca.sign_serving_certificate."""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
from collections.abc import Sequence
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from hypothesis import given, settings
from hypothesis import strategies as st

from edgewatch.controller.coordinatorcsr import (
    SERVING_CN,
    CoordinatorIdentity,
    SignRoot,
    SignServing,
    decide,
    decide_api,
)
from edgewatch.controller.csrpolicy import AgentIdentity, CsrSpec, Deny, Ignore, Sign
from edgewatch.controller.csrsigner import node_addresses
from edgewatch.controller.poolca import CLOCK_SKEW_S, make_ca, sign_serving_certificate
from edgewatch.kube.api import Node
from edgewatch.names import COORDINATOR_CLIENT_SIGNER, COORDINATOR_SERVING_SIGNER, NODE_NAME_EXTRA

from _csrs import SA_GROUPS, build_csr, duplicate_key_usage_csr, node_extra, pem_block

AGENT = AgentIdentity()
COORD = CoordinatorIdentity()
AGENT_USER = "system:serviceaccount:edgewatch:edgewatch-agent"
COORD_USER = "system:serviceaccount:edgewatch:edgewatch-coordinator"
POOLS = {"n1": "shop-a", "n2": "shop-a", "root": "shop-a"}
ADDRESSES = {"n1": ("10.0.0.1", "203.0.113.1"), "n2": ("10.0.0.2",)}
P256 = ec.generate_private_key(ec.SECP256R1())
IP = ipaddress.ip_address


def pool_of(node: str) -> str | None:
    return POOLS.get(node)


def addresses_of(node: str) -> tuple[str, ...]:
    return ADDRESSES.get(node, ())


def csr_pem(*, cn: str | None = SERVING_CN, key: Any = None, names: Sequence[x509.NameAttribute] | None = None,
            sans: Sequence[x509.GeneralName] | None = None,
            extensions: Sequence[x509.ExtensionType] = ()) -> bytes:
    return build_csr(cn=cn, key=key or P256, names=names, sans=sans, extensions=extensions)

GOOD_SANS = (x509.IPAddress(IP("10.0.0.1")), x509.IPAddress(IP("127.0.0.1")), x509.DNSName("localhost"))


def serving_pem(**over: Any) -> bytes:
    return csr_pem(**{"sans": GOOD_SANS, **over})


def root_pem(**over: Any) -> bytes:
    return csr_pem(**{"cn": "root", **over})


def spec(request: bytes | None = None, *, node: str | None = "n1", username: str = COORD_USER,
         groups: Sequence[str] = SA_GROUPS, usages: Sequence[str] = ("server auth",),
         expiration: int | None = 3600, signer: str = COORDINATOR_SERVING_SIGNER,
         extra: dict[str, tuple[str, ...]] | None = None) -> CsrSpec:
    return CsrSpec(signer_name=signer, request=serving_pem() if request is None else request, usages=tuple(usages),
                   username=username, groups=tuple(groups), extra=node_extra(node, extra), expiration_seconds=expiration)


def root_spec(request: bytes | None = None, **over: Any) -> CsrSpec:
    over.setdefault("usages", ("client auth",))
    return spec(root_pem() if request is None else request, signer=COORDINATOR_CLIENT_SIGNER, **over)


def run(s: CsrSpec) -> Sign | SignServing | SignRoot | Deny | Ignore:
    return decide(s, agent=AGENT, coordinator=COORD, pool_of=pool_of, node_addresses=addresses_of)


def test_identity_matches_the_shipped_service_account() -> None:
    assert COORD.username == COORD_USER


def test_a_good_serving_request_is_signed() -> None:
    d = run(spec())
    assert d == SignServing(node="n1", pool="shop-a", lifetime_s=3600, ips=(IP("10.0.0.1"), IP("127.0.0.1")),
                            dns_names=("localhost",), public_key=P256.public_key())
    assert isinstance(d, SignServing) and d.public_key == P256.public_key()


@pytest.mark.parametrize("usages", [("server auth",), ("digital signature", "server auth"),
                                    ("key encipherment", "server auth", "digital signature")])
def test_serving_usages_accepted(usages: tuple[str, ...]) -> None:
    assert isinstance(run(spec(usages=usages)), SignServing)


def test_serving_with_the_external_ip_only_and_ed25519_is_signed() -> None:
    key = ed25519.Ed25519PrivateKey.generate()
    d = run(spec(serving_pem(key=key, sans=[x509.IPAddress(IP("203.0.113.1"))])))
    assert isinstance(d, SignServing) and d.ips == (IP("203.0.113.1"),) and d.dns_names == ()


def test_a_good_root_request_is_signed() -> None:
    d = run(root_spec(usages=("client auth", "digital signature"), expiration=None))
    assert d == SignRoot(node="n1", pool="shop-a", lifetime_s=24 * 3600, public_key=P256.public_key())


FOREIGN = x509.IPAddress(IP("10.0.0.2"))  # n2's address: n1's coordinator may not name it


@pytest.mark.parametrize(("case", "expected_reason"), [
    (spec(username=AGENT_USER), "not_coordinator"),
    (spec(username="system:serviceaccount:other:edgewatch-coordinator"), "not_coordinator"),
    (spec(groups=("system:authenticated",)), "not_coordinator"),  # a user named like the SA, not the SA
    (spec(username="kubernetes-admin", groups=("system:masters",)), "not_coordinator"),
    (spec(node=None), "node_claim"),
    (spec(extra={NODE_NAME_EXTRA: ("n1", "n2")}), "node_claim"),
    (spec(extra={NODE_NAME_EXTRA: ("",)}), "node_claim"),
    (spec(b"not a pem"), "malformed"),
    (spec(serving_pem() + serving_pem()), "malformed"),
    (spec(serving_pem(cn="n1")), "subject"),
    (spec(serving_pem(cn="root")), "subject"),
    (spec(serving_pem(names=[x509.NameAttribute(NameOID.COMMON_NAME, SERVING_CN),
                             x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:masters")])), "subject"),
    (spec(serving_pem(extensions=[x509.BasicConstraints(ca=True, path_length=None)])), "extensions"),
    (spec(serving_pem(extensions=[x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH])])), "extensions"),
    (spec(serving_pem(key=rsa.generate_private_key(public_exponent=65537, key_size=2048))), "key"),
    (spec(serving_pem(key=ec.generate_private_key(ec.SECP384R1()))), "key"),
    (spec(usages=("client auth",)), "usages"),
    (spec(usages=("server auth", "client auth")), "usages"),
    (spec(usages=("server auth", "server auth")), "usages"),
    (spec(usages=("server auth", "key encipherment")), "usages"),
    (spec(node="n9"), "no_pool"),
    (spec(csr_pem()), "san"),                                                     # no SAN at all
    (spec(serving_pem(sans=[FOREIGN])), "san"),                                   # another node's IP
    (spec(serving_pem(sans=[*GOOD_SANS, FOREIGN])), "san"),
    (spec(serving_pem(sans=[x509.IPAddress(IP("8.8.8.8"))])), "san"),
    (spec(serving_pem(sans=[x509.IPAddress(IP("127.0.0.1")), x509.DNSName("localhost")])), "san"),  # no node IP
    (spec(serving_pem(sans=[*GOOD_SANS, x509.DNSName("n1")])), "san"),
    (spec(serving_pem(sans=[*GOOD_SANS, x509.DNSName("kubernetes.default.svc")])), "san"),
    (spec(serving_pem(sans=[*GOOD_SANS, x509.UniformResourceIdentifier("https://10.0.0.1")])), "san"),
    (spec(serving_pem(sans=[*GOOD_SANS, x509.IPAddress(IP("10.0.0.1"))])), "san"),  # twice
    (spec(serving_pem(sans=[x509.IPAddress(ipaddress.ip_network("10.0.0.0/8"))])), "san"),
    (spec(node="root"), "san"),  # in a pool, but no address known
])
def test_every_serving_rule_denies(case: CsrSpec, expected_reason: str) -> None:
    d = run(case)
    assert isinstance(d, Deny), d
    assert d.reason == expected_reason, d
    assert d.message


@pytest.mark.parametrize(("case", "expected_reason"), [
    (root_spec(groups=()), "not_coordinator"),
    (root_spec(node=None), "node_claim"),
    (root_spec(extra={NODE_NAME_EXTRA: ("n1", "n2")}), "node_claim"),
    (root_spec(b"junk"), "malformed"),
    (root_spec(root_pem(cn="n1")), "subject"),  # the coordinator SA never gets a node's CN
    (root_spec(root_pem(cn="Root")), "subject"),
    (root_spec(root_pem(names=[x509.NameAttribute(NameOID.COMMON_NAME, "root"),
                               x509.NameAttribute(NameOID.ORGANIZATION_NAME, "x")])), "subject"),
    (root_spec(root_pem(sans=[x509.DNSName("localhost")])), "san"),
    (root_spec(root_pem(extensions=[x509.BasicConstraints(ca=True, path_length=None)])), "extensions"),
    (root_spec(root_pem(key=rsa.generate_private_key(public_exponent=65537, key_size=2048))), "key"),
    (root_spec(usages=("server auth",)), "usages"),
    (root_spec(usages=("client auth", "server auth")), "usages"),
    (root_spec(node="n9"), "no_pool"),
])
def test_every_root_rule_denies(case: CsrSpec, expected_reason: str) -> None:
    d = run(case)
    assert isinstance(d, Deny), d
    assert d.reason == expected_reason, d


def test_the_agent_cannot_get_root_nor_a_serving_certificate() -> None:
    # CN=root on the client signer with the agent's token: the agents' rules (a node named root is reserved,
    # any other node's CN must equal its own)
    d = run(root_spec(username=AGENT_USER, node="root"))
    assert isinstance(d, Deny) and d.reason == "reserved", d
    d = run(root_spec(username=AGENT_USER, node="n1"))
    assert isinstance(d, Deny) and d.reason == "subject", d
    d = run(spec(username=AGENT_USER))
    assert isinstance(d, Deny) and d.reason == "not_coordinator", d
    # the agent's own node certificate still goes through csrpolicy
    d = run(root_spec(csr_pem(cn="n1"), username=AGENT_USER))
    assert isinstance(d, Sign) and d.node == "n1"


def test_the_coordinator_cannot_get_a_node_certificate() -> None:
    d = run(root_spec(csr_pem(cn="n1")))
    assert d == Deny("subject", "subject must be exactly CN=root, got 'CN=n1'")


def test_other_signers_are_ignored() -> None:
    assert run(spec(signer="example.com/x")) == Ignore("example.com/x")
    assert decide_api({"signerName": "kubernetes.io/kubelet-serving", "request": 3}, agent=AGENT, coordinator=COORD,
                      pool_of=pool_of, node_addresses=addresses_of) == Ignore("kubernetes.io/kubelet-serving")
    assert decide_api([], agent=AGENT, coordinator=COORD, pool_of=pool_of, node_addresses=addresses_of) == Ignore("")


def _api_spec(**over: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "signerName": COORDINATOR_SERVING_SIGNER, "request": base64.b64encode(serving_pem()).decode(),
        "usages": ["server auth", "digital signature"], "username": COORD_USER, "groups": list(SA_GROUPS),
        "extra": {NODE_NAME_EXTRA: ["n1"], "authentication.kubernetes.io/pod-name": ["coord-x"]},
        "expirationSeconds": 1800}
    out.update(over)
    return out


def api(spec_: object) -> Any:
    return decide_api(spec_, agent=AGENT, coordinator=COORD, pool_of=pool_of, node_addresses=addresses_of)


def test_the_api_shape_is_parsed_for_both_signers() -> None:
    d = api(_api_spec())
    assert isinstance(d, SignServing) and (d.node, d.pool, d.lifetime_s) == ("n1", "shop-a", 1800)
    d = api(_api_spec(signerName=COORDINATOR_CLIENT_SIGNER, request=base64.b64encode(root_pem()).decode(),
                      usages=["client auth"]))
    assert isinstance(d, SignRoot) and d.node == "n1"


@pytest.mark.parametrize("over", [
    {"request": "!!!"}, {"request": None}, {"usages": "server auth"}, {"groups": "x"}, {"extra": []},
    {"extra": {NODE_NAME_EXTRA: "n1"}}, {"expirationSeconds": "1"}, {"username": 5},
])
def test_malformed_api_specs_are_denied(over: dict[str, Any]) -> None:
    d = api(_api_spec(**over))
    assert isinstance(d, Deny) and d.reason == "malformed", d


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=2048), st.sampled_from([COORDINATOR_SERVING_SIGNER, COORDINATOR_CLIENT_SIGNER]))
def test_random_bytes_as_the_request_never_raise(data: bytes, signer: str) -> None:
    assert isinstance(run(spec(data, signer=signer)), Deny)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=1200), st.sampled_from([COORDINATOR_SERVING_SIGNER, COORDINATOR_CLIENT_SIGNER]))
def test_random_der_in_a_pem_block_never_raises(data: bytes, signer: str) -> None:
    pem = pem_block(data)
    assert isinstance(run(spec(pem, signer=signer)), Deny)


def test_a_san_of_a_kind_cryptography_does_not_model_is_malformed_not_a_crash() -> None:
    """A flipped tag byte that turns a SAN dNSName [2] into an x400Address [3] (found by the fuzz
    below in CI): cryptography raises UnsupportedGeneralNameType while parsing the extensions; the
    request is refused as malformed. The edit is made on the DER bytes by hand."""
    der = x509.load_pem_x509_csr(serving_pem()).public_bytes(serialization.Encoding.DER)
    name = b"localhost"  # GOOD_SANS' dNSName
    at = der.find(bytes([0x82, len(name)]) + name)
    assert at > 0
    bad = der[:at] + bytes([0xA3]) + der[at + 1:]
    d = run(spec(pem_block(bad)))
    assert isinstance(d, Deny) and d.reason == "malformed", d


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=0, max_value=800), st.integers(min_value=1, max_value=255))
def test_a_flipped_byte_of_a_good_serving_request_never_signs(position: int, flip: int) -> None:
    good = x509.load_pem_x509_csr(serving_pem())
    der = bytearray(good.public_bytes(serialization.Encoding.DER))
    der[position % len(der)] ^= flip
    pem = pem_block(bytes(der))
    d = run(spec(pem))
    if not isinstance(d, Deny):
        # Only a flip outside what is signed and meant can pass: the signature BIT STRING's
        # "unused bits" octet 0 -> 1 when the signature's last bit is 0 (the parser takes it): the
        # same request, signed by the same key.
        flipped = x509.load_pem_x509_csr(pem)
        assert flipped.tbs_certrequest_bytes == good.tbs_certrequest_bytes, (position, flip)
        assert flipped.signature == good.signature, (position, flip)


@settings(max_examples=150, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=20),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner,
                                                                                  max_size=4), max_leaves=20))
def test_any_json_as_a_field_never_raises(value: object) -> None:
    for key in ("request", "usages", "username", "groups", "extra", "expirationSeconds", "signerName"):
        assert isinstance(api(_api_spec(**{key: value})), (Deny, Ignore, SignServing))


@settings(max_examples=100, deadline=None)
@given(st.lists(st.text(max_size=40), max_size=4))
def test_any_node_addresses_never_raise(addresses: list[str]) -> None:
    d = decide(spec(), agent=AGENT, coordinator=COORD, pool_of=pool_of, node_addresses=lambda node: addresses)
    assert isinstance(d, (Deny, SignServing))
    if isinstance(d, SignServing):  # only when the request's 10.0.0.1 is among them
        assert IP("10.0.0.1") in {IP(a) for a in addresses if _is_ip(a)}


def _is_ip(text: str) -> bool:
    try:
        IP(text)
    except ValueError:
        return False
    return True


# -- the node's addresses, and the serving certificate (poolca) -----------------------------------


def test_node_addresses_are_internal_and_external_ips() -> None:
    node = Node.from_dict({"metadata": {"name": "n1"}, "status": {"addresses": [
        {"type": "Hostname", "address": "n1"}, {"type": "InternalIP", "address": "10.0.0.1"},
        {"type": "ExternalIP", "address": "203.0.113.1"}, {"type": "InternalDNS", "address": "n1.local"}]}})
    assert node_addresses(node) == ("10.0.0.1", "203.0.113.1")
    assert node_addresses(None) == ()
    assert node_addresses(Node.from_dict({"metadata": {"name": "n2"}})) == ()


def test_serving_certificate_is_for_tls_server_with_exactly_the_sans() -> None:
    now = dt.datetime(2026, 5, 1, 12, 0, tzinfo=dt.UTC)
    ca = make_ca("shop-a", now=now)
    d = run(spec())
    assert isinstance(d, SignServing)
    pem = sign_serving_certificate(ca, public_key=d.public_key, cn=SERVING_CN, ips=d.ips, dns_names=d.dns_names,
                                   lifetime_s=d.lifetime_s, now=now)
    cert = x509.load_pem_x509_certificate(pem)
    cert.verify_directly_issued_by(ca.cert)
    assert cert.subject.rfc4514_string() == "CN=edgewatch-coordinator"
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.IPAddress) == [IP("10.0.0.1"), IP("127.0.0.1")]
    assert san.get_values_for_type(x509.DNSName) == ["localhost"]
    assert cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value == \
        x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH])
    usage = cert.extensions.get_extension_for_class(x509.KeyUsage).value
    assert usage.digital_signature and not usage.key_cert_sign
    assert cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is False
    assert cert.not_valid_before_utc == now - dt.timedelta(seconds=CLOCK_SKEW_S)
    assert cert.not_valid_after_utc == now + dt.timedelta(seconds=3600)
    with pytest.raises(ValueError, match="too soon"):
        sign_serving_certificate(ca, public_key=d.public_key, cn=SERVING_CN, ips=d.ips, dns_names=(),
                                 lifetime_s=3600, now=ca.cert.not_valid_after_utc - dt.timedelta(seconds=60))
    with pytest.raises(ValueError, match="subjectAltName"):
        sign_serving_certificate(ca, public_key=d.public_key, cn=SERVING_CN, ips=(), dns_names=(),
                                 lifetime_s=3600, now=now)


@pytest.mark.parametrize("make", [lambda: spec(duplicate_key_usage_csr(P256, SERVING_CN)),
                                  lambda: root_spec(duplicate_key_usage_csr(P256, "root"))])
def test_a_request_with_a_duplicate_extension_is_denied_not_a_crash(make: Any) -> None:
    d = run(make())
    assert isinstance(d, Deny) and d.reason == "malformed", d

"""Fuzz every parser edgewatch exposes to the network or the API, with hypothesis, and print how
many inputs each took (``make fuzz``; docs/security.md).

A parser passes when, for every input, it returns or raises only its documented refusal (never
another exception, never a hang). Inputs mix pure junk with mutations of valid messages, so the
checks after the signature (schema, binding) are reached too: the mutations are signed with a real
key, as a compromised node could.

Usage: ``python hack/fuzz.py [examples per target, default 20000]``.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import json
import sys
import time
from collections.abc import Callable

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cryptography import x509
from cryptography.hazmat.primitives import serialization

from edgewatch.agent.coordinator import HeartbeatRejected, parse_heartbeat
from edgewatch.certs import CertificateError, build_request, check_certificate, new_key
from edgewatch.controller import coordinatorcsr
from edgewatch.controller.csrpolicy import AgentIdentity, Deny, Ignore, Sign
from edgewatch.controller.poolca import make_ca, sign_client_certificate
from edgewatch.names import COORDINATOR_CLIENT_SIGNER, COORDINATOR_SERVING_SIGNER, NODE_NAME_EXTRA
from edgewatch.controller.autonomy import parse_autonomy_duration
from edgewatch.core.beacon import BeaconHolder, Beacon, sign_beacon
from edgewatch.core.evidence import decode_evidence
from edgewatch.core.grouping import parse_grouping_config
from edgewatch.core.identity import NodeKey, NodeKeyring, PublicKeys, parse_key_record
from edgewatch.core.poolconfig import parse_pool_coordinators
from edgewatch.core.seal import SealRejected, seal, unseal
from edgewatch.core.roster import RosterError, decode_roster
from edgewatch.core.types import NodeName
from edgewatch.core.wire import (
    ENVELOPE_DOMAIN,
    ENVELOPE_MAGIC,
    Rejected,
    ReplayGuard,
    decode_envelope,
    encode_envelope,
    sign_heartbeat,
)
from edgewatch.poolcache.feed import ObjectRejected, check_object
from edgewatch.poolcache.reviews import MalformedReview, bearer_token, parse_access_review, parse_token_review
from edgewatch.poolcache.layout import CacheKeys, decode_value, encode_tombstone
from edgewatch.poolcache.resources import DEFAULT_RESOURCES, PoolResourcesError, parse_pool_resources
from edgewatch.poolcache.selectors import SelectorError, parse_field_selector, parse_label_selector
from edgewatch.timefmt import parse_rfc3339

PUBLIC = PublicKeys()
A = NodeKeyring(node=NodeName("a-1"), keys=(NodeKey.generate(),), public=PUBLIC)
B = NodeKeyring(node=NodeName("a-2"), keys=(NodeKey.generate(),), public=PUBLIC)
BEACON_KEY = NodeKey.generate()

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=12), inner, max_size=6),
    max_leaves=30)


def _valid_body() -> dict[str, object]:
    own = sign_heartbeat(origin=NodeName("a-1"), incarnation=1, seq=1, kubelet_ok=True, cloud_ok=True,
                         alive=[NodeName("a-1")], dead=[], keyring=A)
    raw = encode_envelope(sender=NodeName("a-1"), receiver=NodeName("a-2"), epoch=1, seq=1, nonce="0" * 32,
                          own=own, keyring=A)
    return json.loads(raw.split(b"\n", 1)[1])


VALID = _valid_body()


@st.composite
def envelopes(draw: st.DrawFn) -> bytes:
    """Junk, or a valid envelope body with one field replaced, re-signed by a-1's real key."""
    if draw(st.booleans()):
        return draw(st.binary(max_size=600))
    body = dict(VALID)
    body[draw(st.sampled_from(sorted(VALID) + ["extra"]))] = draw(json_values)
    data = json.dumps(body, separators=(",", ":")).encode()
    key_id, mac = A.sign_bytes(data, domain=ENVELOPE_DOMAIN)
    return ENVELOPE_MAGIC + f" {key_id} {mac}\n".encode() + data


def _envelope(raw: bytes) -> None:
    try:
        decode_envelope(raw, keyring=B, receiver=NodeName("a-2"), max_bytes=65_536, guard=ReplayGuard())
    except Rejected:
        pass


def _evidence(text: str) -> None:
    try:
        decode_evidence(text, writer=NodeName("a-1"), verifier=PUBLIC)
    except Rejected:
        pass


@st.composite
def evidence_texts(draw: st.DrawFn) -> str:
    if draw(st.booleans()):
        return draw(st.text(max_size=400))
    hb = dict(VALID["heartbeats"][0])  # type: ignore[index]
    hb[draw(st.sampled_from(sorted(hb)))] = draw(json_values)
    return json.dumps([A.sign({k: v for k, v in hb.items() if k not in ("key_id", "mac")},
                              domain="edgewatch/heartbeat/v4") if draw(st.booleans()) else hb])


def _key_record(text: str) -> None:
    """The form (parse_key_record) and the proofs of possession, as a reader takes a record in."""
    try:
        parse_key_record(text)
    except ValueError:
        pass
    try:
        PublicKeys().update(NodeName("a-1"), text)
    except ValueError:
        pass


def key_records() -> st.SearchStrategy[str]:
    """Junk, or a real record (a-1's, a-2's, both) with characters replaced or lines swapped."""
    real = st.sampled_from([A.record(), B.record(), A.record() + "\n" + B.record().splitlines()[0]])

    @st.composite
    def mutated(draw: st.DrawFn) -> str:
        text = draw(real)
        if text and draw(st.booleans()):
            i = draw(st.integers(0, len(text) - 1))
            text = text[:i] + draw(st.text(max_size=3)) + text[i + 1:]
        return text

    return st.text(max_size=400) | real | mutated()


def _beacon(token: str) -> None:
    holder = BeaconHolder()
    holder.trust(BEACON_KEY.public_raw)
    holder.offer(token)  # never raises


@st.composite
def beacon_tokens(draw: st.DrawFn) -> str:
    good = sign_beacon(Beacon(draw(st.integers(0, 10**15)), "ab" * 16), BEACON_KEY)
    return draw(st.sampled_from([good, good[:-1], good + "0", good.replace(".", ":")]) | st.text(max_size=220))


#: a-1 (``A``) writes heartbeats and leads the pool cache.
HEARTBEAT_KEY = b"/edgewatch/pools/a/heartbeats/a-1"


def _coordinator_heartbeat(item: tuple[bool, bytes]) -> None:
    sealed, value = item  # sealed by a-1: the parser behind the seal is reached
    try:
        parse_heartbeat("a-1", seal(value, key=HEARTBEAT_KEY, signer=A) if sealed else value, key=HEARTBEAT_KEY,
                        verifier=A)
    except HeartbeatRejected:
        pass


def _sealed_value(value: bytes) -> None:
    try:
        unseal(value, key=HEARTBEAT_KEY, writer="a-1", verifier=A)
    except SealRejected:
        pass


@st.composite
def sealed_values(draw: st.DrawFn) -> bytes:
    """A value of the coordinator's etcd as its host could write it: junk, or a-1's seal with one
    byte changed, cut, or moved from another key."""
    good = seal(draw(st.binary(max_size=120)), key=HEARTBEAT_KEY, signer=A)
    choice = draw(st.integers(0, 3))
    if choice == 0:
        return draw(st.binary(max_size=300))
    if choice == 1:
        i = draw(st.integers(0, len(good) - 1))
        return good[:i] + bytes([good[i] ^ draw(st.integers(1, 255))]) + good[i + 1:]
    if choice == 2:
        return good[:draw(st.integers(0, len(good)))]
    return seal(b"{}", key=draw(st.binary(max_size=60)), signer=A)


def _pool_object(obj: object) -> None:
    try:
        check_object(obj, DEFAULT_RESOURCES[0])
    except ObjectRejected:
        pass


def _selectors(text: str) -> None:
    for parse in (parse_label_selector, parse_field_selector):
        try:
            parse(text)
        except SelectorError:
            pass


def _roster(data: object) -> None:
    try:
        decode_roster(data)  # type: ignore[arg-type]
    except RosterError:
        pass


@st.composite
def roster_data(draw: st.DrawFn) -> object:
    """A roster ConfigMap's ``data``: junk, or a valid members map with one entry mutated."""
    if draw(st.booleans()):
        return draw(st.none() | st.dictionaries(st.sampled_from(["members", "group", "x"]),
                                                json_values | st.text(max_size=200), max_size=3))
    members: dict[str, object] = {"a-1": "198.18.0.10", "a-2": "fd00::2", "a-3": ""}
    members[draw(st.sampled_from(sorted(members)) | st.text(max_size=70))] = draw(
        json_values | st.text(max_size=60) | st.ip_addresses().map(str))
    text = json.dumps(members) if draw(st.booleans()) else json.dumps(members)[: draw(st.integers(0, 80))]
    return {"group": draw(st.text(max_size=20)), "members": text}


SLICES = CacheKeys(prefix="/edgewatch/pools/a/nodes/a-1/", resource=DEFAULT_RESOURCES[0], writer="a-1")
SLICE = {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "addressType": "IPv4", "endpoints": [],
         "metadata": {"name": "web-x1", "namespace": "default", "resourceVersion": "42"}}


def _pool_value(item: tuple[bytes, bytes]) -> None:
    try:
        decode_value(SLICES, *item, verifier=A)
    except ObjectRejected:
        pass


@st.composite
def pool_values(draw: st.DrawFn) -> tuple[bytes, bytes]:
    """A (key, value) of the coordinator's etcd: junk, or a valid object or tombstone with the key
    or one field mutated, sealed by the leader for the key (a compromised pool coordinator writes
    anything; what passes the seal must still be checked)."""
    key = draw(st.sampled_from([SLICES.object_key("default", "web-x1"), SLICES.objects, SLICES.base])
               | st.text(max_size=60).map(lambda t: SLICES.objects + t.encode()) | st.binary(max_size=80))
    if draw(st.booleans()):
        return key, draw(st.binary(max_size=300))
    if draw(st.booleans()):
        return key, encode_tombstone(draw(st.text(max_size=24)), key=key, signer=A)
    obj = json.loads(json.dumps(SLICE))
    where = obj if draw(st.booleans()) else obj["metadata"]
    where[draw(st.sampled_from(sorted(where)) | st.text(max_size=12))] = draw(json_values)
    return key, seal(json.dumps(obj).encode(), key=key, signer=A)


def _annotation_times(text: str) -> None:
    """The controller's readings of node annotations: autonomy-duration and unreachable-since."""
    for parse in (parse_autonomy_duration, parse_rfc3339):
        try:
            parse(text)
        except ValueError:
            pass


annotation_texts = (st.text(max_size=40)
                    | st.from_regex(r"\A[+-]?([0-9]*(\.[0-9]*)?(ns|us|µs|ms|s|m|h)){1,4}\Z")
                    | st.datetimes(timezones=st.timezones()).map(lambda d: d.isoformat()))


def _beacon_key(text: str) -> None:
    """The beacon Lease's key annotation as the agent reads it (``EvidenceReporter.apply_beacon_lease``)."""
    try:
        BeaconHolder().trust(base64.b64decode(text, validate=True))
    except (binascii.Error, ValueError):
        pass


beacon_keys = (st.text(max_size=60) | st.binary(max_size=40).map(lambda b: base64.b64encode(b).decode())
               | st.just(base64.b64encode(BEACON_KEY.public_raw).decode()))


def _config(data: dict[str, str]) -> None:
    try:
        parse_grouping_config(data)
    except ValueError:
        pass
    for parse, errors in ((parse_pool_coordinators, (ValueError,)), (parse_pool_resources, (PoolResourcesError,))):
        try:
            parse(data.get("x", ""))
        except errors:
            pass


def _cloud_reviews(item: tuple[str, bytes]) -> None:
    """What the pool-cache endpoint reads from its clients and from the cloud's answers: the
    Authorization header, TokenReview and SubjectAccessReview responses (``poolcache.reviews``)."""
    header, body = item
    bearer_token(header)
    for parse in (parse_token_review, parse_access_review):
        try:
            parse(body)
        except MalformedReview:
            pass


_REVIEW = {"kind": "TokenReview", "status": {"authenticated": True, "user": {
    "username": "system:serviceaccount:kube-system:kube-proxy", "uid": "u", "groups": ["system:serviceaccounts"],
    "extra": {"authentication.kubernetes.io/node-name": ["a-1"]}}}}


@st.composite
def cloud_reviews(draw: st.DrawFn) -> tuple[str, bytes]:
    """A header (junk or Bearer forms) and a review answer: junk, or a valid TokenReview /
    SubjectAccessReview with one field replaced by any JSON value (a hostile or broken upstream)."""
    header = draw(st.text(max_size=80) | st.text(max_size=60).map(lambda t: "Bearer " + t))
    if draw(st.booleans()):
        return header, draw(st.binary(max_size=300))
    doc = json.loads(json.dumps(_REVIEW))
    if draw(st.booleans()):
        doc = {"kind": "SubjectAccessReview", "status": {"allowed": True, "reason": "ok"}}
    where = draw(st.sampled_from([doc, doc["status"], doc["status"].get("user", doc["status"])]))
    # any JSON value, or text JSON can carry but UTF-8 cannot (a lone surrogate, "\ud800")
    where[draw(st.sampled_from(sorted(where)) | st.text(max_size=12))] = draw(
        json_values | st.text(st.characters(categories=["Cs", "Ll"]), max_size=4))
    return header, json.dumps(doc).encode()



CSR_KEY = new_key()
CSR_CA = make_ca("a", now=dt.datetime.now(dt.timezone.utc))
AGENT = AgentIdentity()
COORDINATOR = coordinatorcsr.CoordinatorIdentity()


def _csr_spec(request_pem: bytes, *, signer: str, username: str, node: str) -> dict[str, object]:
    return {"signerName": signer, "request": base64.b64encode(request_pem).decode(), "usages": ["client auth"],
            "username": username, "groups": ["system:serviceaccounts"], "extra": {NODE_NAME_EXTRA: [node]},
            "expirationSeconds": 3600}


@st.composite
def csr_specs(draw: st.DrawFn) -> object:
    """A CSR ``spec`` as the API serves it: junk, or a valid agent / coordinator request with one
    field replaced or its PEM's DER mutated (an attacker's own token and key)."""
    if draw(st.booleans()):
        return draw(json_values)
    kind = draw(st.sampled_from(["agent", "root", "serving"]))
    if kind == "serving":
        pem = build_request(common_name="edgewatch-coordinator", key=CSR_KEY, dns_names=("localhost",),
                            ip_addresses=("10.0.0.1", "127.0.0.1"))
        spec = _csr_spec(pem, signer=COORDINATOR_SERVING_SIGNER, username=COORDINATOR.username, node="a-1")
        spec["usages"] = ["server auth", "digital signature"]
    else:
        pem = build_request(common_name="root" if kind == "root" else "a-1", key=CSR_KEY)
        spec = _csr_spec(pem, signer=COORDINATOR_CLIENT_SIGNER, node="a-1",
                         username=COORDINATOR.username if kind == "root" else AGENT.username)
    how = draw(st.sampled_from(["field", "der", "none"]))
    if how == "field":
        spec[draw(st.sampled_from(sorted(spec)))] = draw(json_values)
    elif how == "der":
        der = bytearray(x509.load_pem_x509_csr(pem).public_bytes(serialization.Encoding.DER))
        der[draw(st.integers(0, 4095)) % len(der)] ^= draw(st.integers(1, 255))  # ECDSA DER lengths vary
        spec["request"] = base64.b64encode(b"-----BEGIN CERTIFICATE REQUEST-----\n" + base64.encodebytes(bytes(der))
                                           + b"-----END CERTIFICATE REQUEST-----\n").decode()
    return spec


def _csr_policy(spec: object) -> None:
    """The controller's signer policies (agents' client certificates, the coordinator's serving and
    root ones): a decision, never an exception."""
    d = coordinatorcsr.decide_api(spec, agent=AGENT, coordinator=COORDINATOR, pool_of=lambda node: "a",
                                  node_addresses=lambda node: ("10.0.0.1",))
    assert isinstance(d, (Deny, Ignore, Sign, coordinatorcsr.SignServing, coordinatorcsr.SignRoot)), d


@st.composite
def issued_certificates(draw: st.DrawFn) -> bytes:
    """What a signer returns: junk, or a real certificate for our key with one byte flipped."""
    if draw(st.booleans()):
        return draw(st.binary(max_size=600))
    pem = sign_client_certificate(CSR_CA, public_key=CSR_KEY.public_key(), node="a-1", lifetime_s=3600,
                                  now=dt.datetime.now(dt.timezone.utc))
    if draw(st.booleans()):
        return pem
    der = bytearray(x509.load_pem_x509_certificate(pem).public_bytes(serialization.Encoding.DER))
    der[draw(st.integers(0, 4095)) % len(der)] ^= draw(st.integers(1, 255))  # ECDSA DER lengths vary
    return b"-----BEGIN CERTIFICATE-----\n" + base64.encodebytes(bytes(der)) + b"-----END CERTIFICATE-----\n"


def _issued_certificate(pem: bytes) -> None:
    """The requester's check of what the signer returned (agents and the coordinator pod)."""
    try:
        check_certificate(pem, common_name="a-1", key=CSR_KEY, requested_s=3600)
    except CertificateError:
        pass

TARGETS: list[tuple[str, Callable[[object], None], st.SearchStrategy[object]]] = [
    ("peer envelope (decode_envelope)", _envelope, envelopes()),
    ("evidence Lease (decode_evidence)", _evidence, evidence_texts()),
    ("key record and its proofs (parse_key_record, PublicKeys.update)", _key_record, key_records()),
    ("beacon token (BeaconHolder.offer)", _beacon, beacon_tokens()),
    ("coordinator heartbeat (parse_heartbeat)", _coordinator_heartbeat,
     st.tuples(st.booleans(), st.binary(max_size=300) | json_values.map(lambda v: json.dumps(v).encode()))),
    ("sealed coordinator value (unseal)", _sealed_value, sealed_values()),
    ("pool-cache object (check_object)", _pool_object, json_values),
    ("label and field selectors", _selectors, st.text(max_size=120)),
    ("edgewatch-config keys", _config, st.dictionaries(st.sampled_from(
        ["grouping", "groupLabel", "coverLabel", "x", "poolCoordinators"]), st.text(max_size=80), max_size=4)),
    ("group roster (decode_roster)", _roster, roster_data()),
    ("pool-cache etcd value (decode_value)", _pool_value, pool_values()),
    ("node annotations (durations, RFC 3339)", _annotation_times, annotation_texts),
    ("beacon key annotation (BeaconHolder.trust)", _beacon_key, beacon_keys),
    ("pool-cache client token and cloud reviews (parse_token_review, parse_access_review)", _cloud_reviews,
     cloud_reviews()),
    ("certificate requests (csrpolicy, coordinatorcsr)", _csr_policy, csr_specs()),
    ("issued certificates (certs.check_certificate)", _issued_certificate, issued_certificates()),
]


def run(examples: int) -> int:
    """Fuzz every target; returns the total number of inputs tried."""
    total = 0
    for name, target, strategy in TARGETS:
        count = 0

        @settings(max_examples=examples, deadline=None, database=None, derandomize=False,
                  suppress_health_check=list(HealthCheck))
        @given(strategy)
        def case(value: object) -> None:
            nonlocal count
            count += 1
            target(value)

        started = time.monotonic()
        case()
        total += count
        print(f"{name:45s} {count:>8,d} inputs  {time.monotonic() - started:6.1f} s", flush=True)
    print(f"{'total':45s} {total:>8,d} inputs")
    return total


if __name__ == "__main__":
    run(int(sys.argv[1]) if len(sys.argv) > 1 else 20_000)

"""The pool coordinator's pure parts: the role state machine (exhaustively), heartbeat validation,
URL parsing, backoff and the configuration's hand-over bound."""

from __future__ import annotations

import datetime as dt
import itertools
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from edgewatch.core.identity import NodeKey, NodeKeyring, PublicKeys
from edgewatch.core.seal import seal
from edgewatch.agent.coordinator import (
    CoordinatorConfig,
    CoordinatorError,
    Heartbeat,
    HeartbeatRejected,
    Role,
    RoleDecision,
    decide_role,
    next_backoff,
    parse_coordinator_url,
    parse_heartbeat,
)

P, F, L = Role.PENDING, Role.FOLLOWER, Role.LEADER

# (reachable, elected, leader_present, cloud_ok) -> (role, campaign, release), written out by hand.
TABLE = {
    (False, False, False, False): (P, False, False),
    (False, False, False, True): (P, False, False),
    (False, False, True, False): (P, False, False),
    (False, False, True, True): (P, False, False),
    (False, True, False, False): (P, False, False),
    (False, True, False, True): (P, False, False),
    (False, True, True, False): (P, False, False),
    (False, True, True, True): (P, False, False),
    (True, False, False, False): (F, False, False),   # nobody leads, but a cut-off node never campaigns
    (True, False, False, True): (F, True, False),     # nobody leads and we reach the cloud: campaign
    (True, False, True, False): (F, False, False),
    (True, False, True, True): (F, False, False),     # someone leads: follow
    (True, True, False, False): (F, False, True),     # elected (key seen or not yet) but cut off: release
    (True, True, False, True): (L, False, False),
    (True, True, True, False): (F, False, True),
    (True, True, True, True): (L, False, False),
}


def test_table_covers_every_input() -> None:
    assert set(TABLE) == set(itertools.product((False, True), repeat=4))


@pytest.mark.parametrize(("inputs", "expected"), sorted(TABLE.items()))
def test_decide_role_matches_the_table(inputs: tuple[bool, bool, bool, bool],
                                       expected: tuple[Role, bool, bool]) -> None:
    reachable, elected, leader_present, cloud_ok = inputs
    got = decide_role(reachable=reachable, elected=elected, leader_present=leader_present, cloud_ok=cloud_ok)
    assert got == RoleDecision(role=expected[0], campaign=expected[1], release=expected[2])


@pytest.mark.parametrize("inputs", list(itertools.product((False, True), repeat=4)))
def test_invariants(inputs: tuple[bool, bool, bool, bool]) -> None:
    reachable, elected, leader_present, cloud_ok = inputs
    d = decide_role(reachable=reachable, elected=elected, leader_present=leader_present, cloud_ok=cloud_ok)
    assert (d.role is Role.PENDING) == (not reachable)
    assert (d.role is Role.LEADER) == (reachable and elected and cloud_ok)
    assert not (d.campaign and d.release)
    if d.campaign:  # campaign only when it could succeed and we could forward
        assert reachable and cloud_ok and not elected and not leader_present
    if not cloud_ok:  # a cut-off agent neither leads nor campaigns
        assert d.role is not Role.LEADER and not d.campaign
    assert d.release == (reachable and elected and not cloud_ok)
    assert isinstance(d.role.value, str) and str(d.role) == d.role.value


def test_role_values_are_strings() -> None:
    assert [r.value for r in Role] == ["pending", "follower", "leader"]


def _run(steps: list[tuple[bool, bool]]) -> list[Role]:
    """Drive the pure function like the election loop: (reachable, cloud_ok) per step, applying
    campaign (wins if nobody leads) and release to a one-node world."""
    elected, present, roles = False, False, []
    for reachable, cloud_ok in steps:
        if not reachable:
            elected = present = False  # after an outage the lease has expired in this model
        d = decide_role(reachable=reachable, elected=elected, leader_present=present, cloud_ok=cloud_ok)
        if d.campaign:
            elected = present = True
            d = decide_role(reachable=reachable, elected=elected, leader_present=present, cloud_ok=cloud_ok)
        if d.release:
            elected = present = False
        roles.append(d.role)
    return roles


def test_sequence_cloud_loss_releases_and_recovers() -> None:
    assert _run([(True, True), (True, True), (True, False), (True, False), (True, True)]) == [L, L, F, F, L]


def test_sequence_coordinator_outage_goes_pending_and_back() -> None:
    assert _run([(True, True), (False, True), (False, False), (True, True)]) == [L, P, P, L]


# -- backoff and configuration ------------------------------------------------------------------------


@given(st.integers(min_value=0, max_value=40))
def test_next_backoff_doubles_and_caps(steps: int) -> None:
    value, seen = 0.0, []
    for _ in range(steps):
        value = next_backoff(value, initial=1.0, cap=10.0)
        seen.append(value)
    assert all(1.0 <= v <= 10.0 for v in seen)
    assert seen == sorted(seen)
    assert seen[:5] == [1.0, 2.0, 4.0, 8.0, 10.0][: len(seen[:5])]


def test_default_handover_bound_fits_in_the_lease_with_margin() -> None:
    config = CoordinatorConfig()
    assert config.handover_bound_s() == pytest.approx(16.0)
    assert config.handover_bound_s() < 40 - 20  # at least 20 s margin against the 40 s Lease
    assert config.heartbeat_ttl_s == 40 and config.heartbeat_interval_s == 10.0


@pytest.mark.parametrize("bad", [
    {"leader_ttl_s": 1},
    {"leader_keepalive_s": 3.0},
    {"heartbeat_interval_s": 20.0},
    {"rpc_timeout_s": 0},
    {"forward_workers": 0},
    {"forward_backoff_initial_s": 5.0, "forward_backoff_max_s": 1.0},
])
def test_config_rejects_unsafe_settings(bad: dict) -> None:  # type: ignore[type-arg]
    with pytest.raises(CoordinatorError) as err:
        CoordinatorConfig(**bad)
    assert err.value.reason == "config"


# -- URL ---------------------------------------------------------------------------------------------


def test_parse_url_accepts_http_and_https() -> None:
    assert parse_coordinator_url("http://10.0.0.5:2379").url == "http://10.0.0.5:2379"
    assert parse_coordinator_url("https://etcd.pool-a:32379/").port == 32379
    assert parse_coordinator_url("http://etcd").port == 2379


@pytest.mark.parametrize(("url", "words"), [
    ("etcd:2379", "scheme"),
    ("ftp://etcd:2379", "scheme"),
    ("unix:///run/etcd.sock", "scheme"),
    ("http://", "no host"),
    ("http://user:pw@etcd:2379", "credentials"),
    ("http://etcd:2379/v3", "path"),
    ("http://etcd:99999", "Port out of range"),
])
def test_parse_url_rejects_with_a_clear_message(url: str, words: str) -> None:
    with pytest.raises(CoordinatorError) as err:
        parse_coordinator_url(url)
    assert err.value.reason == "config"
    assert words in str(err.value) and "http://HOST:PORT" in str(err.value)


# -- heartbeat validation -------------------------------------------------------------------------------


#: edge-1's keyring; edge-2 is another published node (the forger in the cases below).
_PUBLISHED = PublicKeys()
_EDGE1 = NodeKeyring(node="edge-1", keys=[NodeKey.generate()], public=_PUBLISHED)
_EDGE2 = NodeKeyring(node="edge-2", keys=[NodeKey.generate()], public=_PUBLISHED)
_KEY = b"/edgewatch/pools/p/heartbeats/edge-1"


def _value(*, sealed_by: NodeKeyring | None = _EDGE1, key: bytes = _KEY, **overrides: object) -> bytes:
    data: dict[str, object] = {"node": "edge-1", "renew_time": "2030-01-02T03:04:05.123456Z", "delegate": True,
                               "cloud_ok": False, "incarnation": 7}
    data.update(overrides)
    body = json.dumps(data).encode()
    return body if sealed_by is None else seal(body, key=key, signer=sealed_by)


def _parse(node: str, value: bytes) -> Heartbeat:
    return parse_heartbeat(node, value, key=_KEY, verifier=_EDGE2)


def test_heartbeat_round_trip() -> None:
    hb = Heartbeat(node="edge-1", renew_time=dt.datetime(2030, 1, 2, 3, 4, 5, 123456, tzinfo=dt.timezone.utc),
                   delegate=True, cloud_ok=False, incarnation=7)
    assert _parse("edge-1", seal(hb.to_json(), key=_KEY, signer=_EDGE1)) == hb
    assert json.loads(hb.to_json())["renew_time"] == "2030-01-02T03:04:05.123456Z"


def test_heartbeat_ignores_unknown_fields() -> None:
    assert _parse("edge-1", _value(future_field=1)).delegate is True


def _sealed(body: bytes) -> bytes:
    return seal(body, key=_KEY, signer=_EDGE1)


@pytest.mark.parametrize(("node", "value", "reason"), [
    ("edge-1", b"x" * 5000, "too_large"),
    ("edge-1", _sealed(b"{not json"), "json"),
    ("edge-1", _sealed(b"\xff\xfe"), "json"),
    ("edge-1", _sealed(b"[]"), "schema"),
    ("edge-1", _value(delegate="true"), "schema"),          # strict: no string for a bool
    ("edge-1", _value(renew_time="2030-01-02T03:04:05"), "schema"),  # naive time
    ("edge-1", _value(renew_time="yesterday"), "schema"),
    ("edge-1", _value(incarnation=-1), "schema"),
    ("edge-1", _value(node="Edge_1"), "schema"),
    ("edge-1", _value(node="edge-2"), "node_mismatch"),     # one node cannot speak for another
    ("edge-1", _sealed(json.dumps({"node": "edge-1"}).encode()), "schema"),
    # what the coordinator's host can write, and a member with its own real key
    ("edge-1", _value(sealed_by=None), "unsigned"),
    ("edge-1", _value(sealed_by=_EDGE2), "not_writer"),
    ("edge-1", _value(key=b"/edgewatch/pools/other/heartbeats/edge-1"), "bad_signature"),  # moved
])
def test_heartbeat_rejects(node: str, value: bytes, reason: str) -> None:
    with pytest.raises(HeartbeatRejected) as err:
        _parse(node, value)
    assert err.value.reason == reason


@given(st.binary(max_size=300), st.booleans())
def test_heartbeat_parser_never_crashes_on_garbage(value: bytes, sealed: bool) -> None:
    try:
        _parse("edge-1", _sealed(value) if sealed else value)
    except HeartbeatRejected as err:
        assert err.reason in {"too_large", "json", "schema", "node_mismatch", "unsigned", "malformed"}

"""Who may read the pool cache: the pure core (bearer token parsing, review parsing, the decision
cache's expiry and bounds, the next-step table, kube-apiserver's 403 message), AccessControl on a
fake clock with a table of cloud answers (TTLs, cut-off behaviour, failures, budget, logs, metrics),
and CloudReviewClient against a small HTTP server on loopback that answers as the apiserver does."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx2 as httpx
import pytest
from aiohttp import web
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest

from edgewatch.poolcache.authn import UNREACHABLE_S, AccessControl, CloudReviewClient, ReviewUnavailable
from edgewatch.poolcache.reviews import (MAX_REVIEW_BYTES, Attributes, Authentication, Authorization, DecisionCache,
                                         Hit, MalformedReview, Refusal, ReviewPolicy, Step, UserInfo, bearer_token,
                                         forbidden_message, next_step, parse_access_review, parse_token_review)

LIST_SVC = Attributes(verb="list", group="", version="v1", resource="services")
WATCH_ES = Attributes(verb="watch", group="discovery.k8s.io", version="v1", resource="endpointslices",
                      namespace="web")
KUBE_PROXY = UserInfo(username="system:serviceaccount:kube-system:kube-proxy", uid="u-1",
                      groups=("system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"),
                      extra=(("authentication.kubernetes.io/credential-id", ("JTI=abc",)),))


# -- bearer tokens ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("header", "token"), [
    (None, None),
    ("", None),
    ("Bearer abc.def-ghi_jkl", "abc.def-ghi_jkl"),
    ("bearer abc", "abc"),                 # the scheme is case-insensitive (kube-apiserver)
    ("BEARER abc", "abc"),
    ("  Bearer abc  ", "abc"),
    ("Bearer", None),
    ("Bearer ", None),
    ("Bearer  abc", None),                 # two spaces: an empty token, as kube-apiserver reads it
    ("Bearer a b", None),
    ("Basic dXNlcjpwYXNz", None),
    ("Bearer abc\x00", None),
    ("Bearer tökén", None),
    ("Bearer " + "a" * (16 * 1024), "a" * (16 * 1024)),
    ("Bearer " + "a" * (16 * 1024 + 1), None),
])
def test_bearer_token(header: str | None, token: str | None) -> None:
    assert bearer_token(header) == token


@given(st.text(max_size=200))
def test_bearer_token_never_raises_and_returns_printable_ascii(header: str) -> None:
    token = bearer_token(header)
    assert token is None or (token and all("\x21" <= c <= "\x7e" for c in token))


# -- review answers (untrusted) ----------------------------------------------------------------------------------


def _tr(status: dict[str, Any], kind: str = "TokenReview") -> bytes:
    return json.dumps({"kind": kind, "apiVersion": "authentication.k8s.io/v1", "status": status}).encode()


def test_token_review_of_a_service_account() -> None:
    answer = parse_token_review(_tr({"authenticated": True, "user": {
        "username": KUBE_PROXY.username, "uid": "u-1", "groups": list(KUBE_PROXY.groups),
        "extra": {"authentication.kubernetes.io/credential-id": ["JTI=abc"]}}, "audiences": ["https://x"]}))
    assert answer == Authentication(KUBE_PROXY)
    assert answer.user is not None and answer.user.subject() == {
        "user": KUBE_PROXY.username, "uid": "u-1", "groups": list(KUBE_PROXY.groups),
        "extra": {"authentication.kubernetes.io/credential-id": ["JTI=abc"]}}


@pytest.mark.parametrize(("status", "expected"), [
    ({"authenticated": False, "error": "invalid bearer token"}, Authentication(None, "invalid bearer token")),
    ({}, Authentication(None, "")),                           # authenticated omitted: false (omitempty)
    ({"user": {"username": "x"}}, Authentication(None, "")),  # not authenticated whatever the user says
    ({"authenticated": True, "user": {"username": "u"}}, Authentication(UserInfo(username="u"))),
    ({"authenticated": True, "user": {"username": "u", "groups": None, "extra": None}},
     Authentication(UserInfo(username="u"))),
])
def test_token_review_answers(status: dict[str, Any], expected: Authentication) -> None:
    assert parse_token_review(_tr(status)) == expected


@pytest.mark.parametrize("body", [
    b"", b"not json", b"[]", b'{"kind": "TokenReview"}', _tr({"authenticated": True}, kind="Status"),
    _tr({"authenticated": "true"}),
    _tr({"authenticated": True}),                                          # no user
    _tr({"authenticated": True, "user": {"username": ""}}),
    _tr({"authenticated": True, "user": {"username": 5}}),
    _tr({"authenticated": True, "user": {"username": "u", "groups": "system:masters"}}),
    _tr({"authenticated": True, "user": {"username": "u", "groups": [1]}}),
    _tr({"authenticated": True, "user": {"username": "u", "groups": ["g"] * 257}}),
    _tr({"authenticated": True, "user": {"username": "u", "extra": {"k": "v"}}}),
    _tr({"authenticated": True, "user": {"username": "u", "extra": ["k"]}}),
    _tr({"authenticated": True, "user": {"username": "u" * 1025}}),
    b"{" + b" " * MAX_REVIEW_BYTES + b"}",
])
def test_malformed_token_reviews_are_refused(body: bytes) -> None:
    with pytest.raises(MalformedReview):
        parse_token_review(body)


@pytest.mark.parametrize(("status", "expected"), [
    ({"allowed": True}, Authorization(True)),
    ({"allowed": True, "reason": 'RBAC: allowed by ClusterRoleBinding "x"'},
     Authorization(True, 'RBAC: allowed by ClusterRoleBinding "x"')),
    ({"allowed": False}, Authorization(False)),
    ({"allowed": False, "denied": True, "reason": "no"}, Authorization(False, "no")),
    ({"allowed": True, "denied": True}, Authorization(False)),   # contradictory: denied wins
    ({"allowed": False, "reason": "x" * 500}, Authorization(False, "x" * 300)),
])
def test_access_review_answers(status: dict[str, Any], expected: Authorization) -> None:
    assert parse_access_review(_tr(status, kind="SubjectAccessReview")) == expected


@pytest.mark.parametrize("body", [b"", b"{}", _tr({}, kind="SubjectAccessReview"),
                                  _tr({"allowed": "yes"}, kind="SubjectAccessReview"), _tr({"allowed": True})])
def test_malformed_access_reviews_are_refused(body: bytes) -> None:
    with pytest.raises(MalformedReview):
        parse_access_review(body)


@given(st.binary(max_size=400) | st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=20).map(lambda v: json.dumps({"kind": "TokenReview", "status": v}).encode()))
def test_review_parsers_raise_only_malformed(body: bytes) -> None:
    for parse, kind in ((parse_token_review, Authentication), (parse_access_review, Authorization)):
        try:
            result = parse(body)
        except MalformedReview as exc:
            assert str(exc)  # refused with a reason, never another exception
        else:
            assert isinstance(result, kind)


@pytest.mark.parametrize(("user", "attrs", "reason", "message"), [
    (UserInfo(username="system:serviceaccount:x:nobody"), LIST_SVC, "",
     'services is forbidden: User "system:serviceaccount:x:nobody" cannot list resource "services" in API group "" '
     "at the cluster scope"),
    (UserInfo(username="u"), WATCH_ES, "no RBAC",
     'endpointslices.discovery.k8s.io is forbidden: User "u" cannot watch resource "endpointslices" in API group '
     '"discovery.k8s.io" in the namespace "web": no RBAC'),
    (UserInfo(username="u<b>"), Attributes(verb="get", group="", version="v1", resource="services", namespace="db",
                                           name="pg"), "",
     'services "pg" is forbidden: User "u&lt;b&gt;" cannot get resource "services" in API group "" in the namespace '
     '"db"'),
])
def test_forbidden_message_is_kube_apiservers(user: UserInfo, attrs: Attributes, reason: str, message: str) -> None:
    assert forbidden_message(user, attrs, reason) == message


# -- the decision cache ------------------------------------------------------------------------------------------


def _cache(**kw: int) -> DecisionCache[str]:
    return DecisionCache(positive_ttl_s=120.0, negative_ttl_s=10.0, max_positive=kw.get("pos", 4),
                         max_negative=kw.get("neg", 2))


def test_decision_cache_expiry_is_per_kind() -> None:
    c = _cache()
    c.put(b"good", "allow", positive=True, now=100.0)
    c.put(b"bad", "deny", positive=False, now=100.0)
    assert c.get(b"good", now=219.9) == Hit("allow", fresh=True)
    assert c.get(b"good", now=220.0) == Hit("allow", fresh=False)    # stale is kept, never dropped by age
    assert c.get(b"good", now=1e9) == Hit("allow", fresh=False)
    assert c.get(b"bad", now=109.9) == Hit("deny", fresh=True)
    assert c.get(b"bad", now=110.0) == Hit("deny", fresh=False)
    assert c.get(b"nope", now=100.0) is None
    assert c.get(b"good", now=99.0) == Hit("allow", fresh=False)     # a clock that went back: not fresh


def test_decision_cache_bounds_keep_positives_from_a_flood_of_negatives() -> None:
    c = _cache(pos=2, neg=2)
    c.put(b"kube-proxy", "allow", positive=True, now=0.0)
    for i in range(1000):
        c.put(f"bogus-{i}".encode(), "deny", positive=False, now=float(i))
    assert c.sizes() == (1, 2)
    assert c.get(b"kube-proxy", now=1.0) == Hit("allow", fresh=True)
    c.put(b"a", "allow", positive=True, now=2.0)
    c.get(b"kube-proxy", now=3.0)                                     # recently used: kept
    c.put(b"b", "allow", positive=True, now=4.0)
    assert c.get(b"a", now=5.0) is None and c.get(b"kube-proxy", now=5.0) is not None
    c.put(b"kube-proxy", "deny", positive=False, now=6.0)             # a decision changes kind
    assert c.sizes() == (1, 2) and c.get(b"kube-proxy", now=6.0) == Hit("deny", fresh=True)


@given(st.lists(st.tuples(st.integers(0, 30), st.booleans()), max_size=200))
def test_decision_cache_never_exceeds_its_bounds(ops: list[tuple[int, bool]]) -> None:
    c = _cache(pos=5, neg=3)
    for i, (key, positive) in enumerate(ops):
        c.put(str(key).encode(), str(key), positive=positive, now=float(i))
        pos, neg = c.sizes()
        assert pos <= 5 and neg <= 3
        assert c.get(str(key).encode(), now=float(i)) == Hit(str(key), fresh=True)  # the newest is always there


@pytest.mark.parametrize(("hit", "cloud_ok", "may_ask", "step"), [
    (Hit("v", fresh=True), True, True, Step.USE),
    (Hit("v", fresh=True), False, False, Step.USE),
    (Hit("v", fresh=False), True, True, Step.ASK),          # past its TTL, the cloud answers: ask again
    (Hit("v", fresh=False), True, False, Step.USE),         # budget spent: a stale denial stays a denial
    (Hit("v", fresh=False), False, False, Step.USE),        # cut off: the last decision, however old
    (Hit("v", fresh=False), False, True, Step.USE),
    (None, True, True, Step.ASK),
    (None, True, False, Step.UNVERIFIABLE),
    (None, False, False, Step.UNVERIFIABLE),                # never seen, cut off: cannot be checked
    (None, False, True, Step.UNVERIFIABLE),
])
def test_next_step_table(hit: Hit[str] | None, cloud_ok: bool, may_ask: bool, step: Step) -> None:
    assert next_step(hit, cloud_ok=cloud_ok, may_ask=may_ask) is step


@pytest.mark.parametrize(("hit", "cloud_ok", "may_ask", "step"), [
    (Hit("v", fresh=False), True, False, Step.UNVERIFIABLE),  # the cloud answers: no allow past its TTL
    (Hit("v", fresh=False), False, False, Step.USE),          # cut off: the last allow
    (Hit("v", fresh=False), True, True, Step.ASK),
    (Hit("v", fresh=True), True, False, Step.USE),
])
def test_next_step_never_serves_a_stale_allow_while_the_cloud_answers(hit: Hit[str], cloud_ok: bool, may_ask: bool,
                                                                      step: Step) -> None:
    assert next_step(hit, cloud_ok=cloud_ok, may_ask=may_ask, allows=True) is step


def test_review_policy_checks_its_values() -> None:
    with pytest.raises(ValueError):
        ReviewPolicy(allowed_ttl_s=0)
    with pytest.raises(ValueError):
        ReviewPolicy(max_negative=0)


# -- AccessControl on a fake clock ---------------------------------------------------------------------------------


class FakeCloud:
    """The cloud's reviews as tables; records every call; can fail or hang."""

    def __init__(self) -> None:
        self.users = {"kp-token": KUBE_PROXY, "nobody-token": UserInfo(username="nobody")}
        self.allowed = {(KUBE_PROXY.username, "list", "services"), (KUBE_PROXY.username, "watch", "endpointslices")}
        self.calls: list[tuple[str, Any]] = []
        self.failure: Exception | None = None
        self.hang = False

    async def _maybe_fail(self) -> None:
        if self.hang:
            await asyncio.sleep(3600)
        if self.failure is not None:
            raise self.failure

    async def token_review(self, token: str, *, timeout_s: float) -> Authentication:
        self.calls.append(("token", token))
        await self._maybe_fail()
        return Authentication(self.users.get(token), "" if token in self.users else "invalid bearer token")

    async def access_review(self, user: UserInfo, attrs: Attributes, *, timeout_s: float) -> Authorization:
        self.calls.append(("access", (user, attrs)))
        await self._maybe_fail()
        return Authorization((user.username, attrs.verb, attrs.resource) in self.allowed)


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _control(cloud: FakeCloud, clock: Clock, link: list[bool], **policy: Any) -> AccessControl:
    return AccessControl(client=cloud, cloud_ok=lambda: link[0], policy=ReviewPolicy(**policy), clock=clock)


def _code(verdict: UserInfo | Refusal) -> int:
    return verdict.code if isinstance(verdict, Refusal) else 200


async def test_refusals_and_the_user_the_cloud_named() -> None:
    cloud, clock, link = FakeCloud(), Clock(), [True]
    ac = _control(cloud, clock, link)
    assert _code(await ac.check(authorization=None, attributes=LIST_SVC)) == 401
    assert _code(await ac.check(authorization="Basic eDp5", attributes=LIST_SVC)) == 401
    assert cloud.calls == []                                            # nothing to ask the cloud about
    r = await ac.check(authorization="Bearer bogus", attributes=LIST_SVC)
    assert isinstance(r, Refusal) and (r.code, r.reason, r.status_reason, r.message) == (
        401, "unauthenticated", "Unauthorized", "Unauthorized")          # the cloud's error is not passed on
    r = await ac.check(authorization="Bearer nobody-token", attributes=LIST_SVC)
    assert isinstance(r, Refusal) and (r.code, r.reason, r.status_reason) == (403, "forbidden", "Forbidden")
    assert r.message == forbidden_message(UserInfo(username="nobody"), LIST_SVC) and r.details == {"kind": "services"}
    assert await ac.check(authorization="Bearer kp-token", attributes=LIST_SVC) == KUBE_PROXY
    assert await ac.check(authorization="Bearer nobody-token", attributes=None) == UserInfo(username="nobody")
    # the SubjectAccessReview carries exactly what the TokenReview returned
    assert ("access", (KUBE_PROXY, LIST_SVC)) in cloud.calls
    r = await ac.check(authorization="Bearer kp-token", attributes=Attributes(
        verb="get", group="", version="v1", resource="services", namespace="db", name="pg"))
    assert isinstance(r, Refusal) and r.code == 403 and r.details == {"kind": "services", "name": "pg"}


async def test_decisions_are_cached_for_their_ttl() -> None:
    cloud, clock, link = FakeCloud(), Clock(), [True]
    ac = _control(cloud, clock, link)
    for _ in range(5):
        assert _code(await ac.check(authorization="Bearer kp-token", attributes=LIST_SVC)) == 200
        assert _code(await ac.check(authorization="Bearer bogus", attributes=LIST_SVC)) == 401
        assert _code(await ac.check(authorization="Bearer nobody-token", attributes=LIST_SVC)) == 403
    assert len(cloud.calls) == 5                         # kp: token + access; bogus: token; nobody: token + access
    clock.t += 10.0                                      # the bogus token's 10 s are over
    await ac.check(authorization="Bearer bogus", attributes=LIST_SVC)
    assert len(cloud.calls) == 6
    clock.t += 20.0                                      # 30 s: the denial is re-asked, the user is not
    await ac.check(authorization="Bearer nobody-token", attributes=LIST_SVC)
    assert [c[0] for c in cloud.calls[6:]] == ["access"]
    clock.t += 90.0                                      # 120 s: the tokens are reviewed again
    await ac.check(authorization="Bearer kp-token", attributes=LIST_SVC)
    assert [c[0] for c in cloud.calls[7:]] == ["token"]
    clock.t += 180.0                                     # 300 s: the allow is asked again
    await ac.check(authorization="Bearer kp-token", attributes=LIST_SVC)
    assert [c[0] for c in cloud.calls[8:]] == ["token", "access"]
    cloud.allowed.clear()                                # RBAC changed in the cloud: seen at the next review
    clock.t += 300.0
    assert _code(await ac.check(authorization="Bearer kp-token", attributes=LIST_SVC)) == 403


async def test_cut_off_the_last_decisions_hold_and_new_tokens_cannot_be_checked() -> None:
    cloud, clock, link = FakeCloud(), Clock(), [True]
    ac = _control(cloud, clock, link)
    for token in ("kp-token", "nobody-token", "bogus"):
        await ac.check(authorization=f"Bearer {token}", attributes=LIST_SVC)
    calls = len(cloud.calls)
    link[0] = False
    clock.t += 7 * 24 * 3600.0                           # a week cut off: every decision is stale
    for _ in range(3):
        assert _code(await ac.check(authorization="Bearer kp-token", attributes=LIST_SVC)) == 200
        assert _code(await ac.check(authorization="Bearer nobody-token", attributes=LIST_SVC)) == 403
        assert _code(await ac.check(authorization="Bearer bogus", attributes=LIST_SVC)) == 401
    r = await ac.check(authorization="Bearer new-token", attributes=LIST_SVC)
    assert isinstance(r, Refusal) and (r.code, r.reason, r.status_reason, r.retry_after_s) == (
        503, "cut_off", "ServiceUnavailable", 5)
    assert "cannot be checked" in r.message and "cut off" in r.message
    # kube-proxy's allow for another verb was never asked: it cannot be checked either
    r = await ac.check(authorization="Bearer kp-token", attributes=WATCH_ES)
    assert isinstance(r, Refusal) and (r.code, r.reason) == (503, "cut_off") and "permission" in r.message
    assert len(cloud.calls) == calls                     # cut off: the cloud is never tried
    link[0] = True
    assert _code(await ac.check(authorization="Bearer new-token", attributes=LIST_SVC)) == 401
    assert _code(await ac.check(authorization="Bearer kp-token", attributes=WATCH_ES)) == 200


@pytest.mark.parametrize("failure", [ReviewUnavailable("network", "connection refused"),
                                     ReviewUnavailable("http_500", "etcd down"), MalformedReview("junk")])
async def test_a_failed_review_falls_back_to_the_last_decision(failure: Exception) -> None:
    cloud, clock, link = FakeCloud(), Clock(), [True]
    ac = _control(cloud, clock, link)
    await ac.check(authorization="Bearer kp-token", attributes=LIST_SVC)
    cloud.failure = failure
    clock.t += 1000.0
    assert _code(await ac.check(authorization="Bearer kp-token", attributes=LIST_SVC)) == 200
    r = await ac.check(authorization="Bearer nobody-token", attributes=LIST_SVC)
    assert isinstance(r, Refusal) and (r.code, r.reason) == (503, "unavailable")
    cloud.failure = None
    clock.t += UNREACHABLE_S  # after a timeout or no route, no review for a while (none waits for another)
    assert _code(await ac.check(authorization="Bearer nobody-token", attributes=LIST_SVC)) == 403


async def test_a_review_that_hangs_is_bounded_by_the_timeout() -> None:
    cloud, clock, link = FakeCloud(), Clock(), [True]
    ac = _control(cloud, clock, link, review_timeout_s=0.05)
    await ac.check(authorization="Bearer kp-token", attributes=LIST_SVC)
    cloud.hang = True
    clock.t += 1000.0
    async with asyncio.timeout(2):
        assert _code(await ac.check(authorization="Bearer kp-token", attributes=LIST_SVC)) == 200
        r = await ac.check(authorization="Bearer nobody-token", attributes=LIST_SVC)
    assert isinstance(r, Refusal) and (r.code, r.reason) == (503, "unavailable") and "timeout" in r.message


async def test_after_a_timeout_no_request_waits_for_another() -> None:
    cloud, clock, link = FakeCloud(), Clock(), [True]
    ac = _control(cloud, clock, link, review_timeout_s=0.2)
    await ac.check(authorization="Bearer kp-token", attributes=LIST_SVC)
    cloud.hang = True
    clock.t += 1000.0
    assert _code(await ac.check(authorization="Bearer kp-token", attributes=LIST_SVC)) == 200  # waited once
    calls = len(cloud.calls)
    started = time.monotonic()
    for _ in range(5):  # stale decisions at once, nothing sent
        assert _code(await ac.check(authorization="Bearer kp-token", attributes=LIST_SVC)) == 200
    assert time.monotonic() - started < 0.2 and len(cloud.calls) == calls
    cloud.hang = False
    clock.t += UNREACHABLE_S
    assert _code(await ac.check(authorization="Bearer kp-token", attributes=LIST_SVC)) == 200
    assert len(cloud.calls) > calls  # asked again
    # the link monitor seeing the link come back ends the pause at once
    cloud.hang = True
    clock.t += 1000.0
    await ac.check(authorization="Bearer kp-token", attributes=LIST_SVC)  # times out: paused again
    cloud.hang = False
    link[0] = False
    await ac.check(authorization="Bearer kp-token", attributes=LIST_SVC)
    link[0] = True
    calls = len(cloud.calls)
    assert _code(await ac.check(authorization="Bearer kp-token", attributes=LIST_SVC)) == 200
    assert len(cloud.calls) > calls


async def test_the_review_budget_bounds_what_a_flood_costs_the_cloud() -> None:
    cloud, clock, link = FakeCloud(), Clock(), [True]
    ac = _control(cloud, clock, link, reviews_per_s=1.0, review_burst=5.0)
    assert _code(await ac.check(authorization="Bearer kp-token", attributes=LIST_SVC)) == 200  # 2 reviews
    codes = [_code(await ac.check(authorization=f"Bearer bogus-{i}", attributes=LIST_SVC)) for i in range(100)]
    assert codes[:4] == [401] * 4 and set(codes[4:]) == {503}  # kube-proxy's access review was its own
    assert len(cloud.calls) == 6
    clock.t += 1000.0                                   # kube-proxy's decisions are stale, budget refilled
    for i in range(100):
        await ac.check(authorization=f"Bearer bogus-x{i}", attributes=LIST_SVC)
    calls = len(cloud.calls)
    assert _code(await ac.check(authorization="Bearer kp-token", attributes=LIST_SVC)) == 200
    assert len(cloud.calls) == calls + 2                # refreshed from its own budget, not the flood's
    assert ac.tokens.sizes()[0] == 1                    # the flood never pushed kube-proxy out


async def test_one_users_requests_never_spend_another_users_reviews_and_no_stale_allow_is_served() -> None:
    """The attack: a local client spends the review budget so that stale allows are served with no
    end (a revoked token keeps reading) and other clients' reviews wait. Each authenticated user
    has a bucket of its own, and while the cloud answers an allow past its TTL is never served."""
    cloud, clock, link = FakeCloud(), Clock(), [True]
    ac = _control(cloud, clock, link, reviews_per_s=0.0001, review_burst=2.0)
    assert _code(await ac.check(authorization="Bearer kp-token", attributes=LIST_SVC)) == 200   # kube-proxy: 2
    assert _code(await ac.check(authorization="Bearer nobody-token", attributes=LIST_SVC)) == 403  # another: 2
    clock.t += 1000.0                                   # both stale; kube-proxy has one review left
    calls = len(cloud.calls)
    r = await ac.check(authorization="Bearer kp-token", attributes=LIST_SVC)  # token refreshed, then its access:
    assert isinstance(r, Refusal) and (r.code, r.reason) == (503, "rate_limited"), r  # its budget is spent
    assert cloud.calls[calls:] == [("token", "kp-token")]  # the other user's requests spent none of it
    link[0] = False                                     # cut off: the last decision, however old
    assert _code(await ac.check(authorization="Bearer kp-token", attributes=LIST_SVC)) == 200


async def test_refusals_are_logged_rate_limited_without_tokens_and_counted(caplog: pytest.LogCaptureFixture) -> None:
    cloud, clock, link = FakeCloud(), Clock(), [True]
    ac = _control(cloud, clock, link)
    registry = CollectorRegistry()
    registry.register(ac.collector)
    with caplog.at_level(logging.WARNING, logger="edgewatch.poolcache.authn"):
        for i in range(50):
            await ac.check(authorization=f"Bearer secret-bogus-{i}", attributes=LIST_SVC, path="/api/v1/services")
            clock.t += 0.1
        clock.t += 10.0
        await ac.check(authorization="Bearer secret-bogus-last", attributes=LIST_SVC)
        await ac.check(authorization="Bearer nobody-token", attributes=LIST_SVC)
    lines = [r for r in caplog.records if getattr(r, "reason", "") == "unauthenticated"]
    assert len(lines) == 2 and "49 more of this kind" in lines[1].getMessage()
    assert getattr(lines[0], "token") == ac.token_id("secret-bogus-0")[:6].hex()
    assert "secret" not in caplog.text and "nobody-token" not in caplog.text
    assert any(getattr(r, "user", None) == "nobody" for r in caplog.records)
    text = generate_latest(registry).decode()
    assert 'edgewatch_poolcache_refused_requests_total{code="401",reason="unauthenticated"} 51.0' in text
    assert 'edgewatch_poolcache_refused_requests_total{code="403",reason="forbidden"} 1.0' in text
    assert 'edgewatch_poolcache_reviews_total{result="unauthenticated",review="token"} 51.0' in text
    assert 'edgewatch_poolcache_review_cache_entries{kind="negative",review="token"} 51.0' in text
    assert 'edgewatch_poolcache_review_cache_total{result="miss",review="token"} 52.0' in text


# -- CloudReviewClient against an apiserver-shaped server ------------------------------------------------------------


class ReviewServer:
    def __init__(self) -> None:
        self.seen: list[tuple[str, dict[str, Any], str]] = []
        self.mode = "ok"
        self.url = ""
        self._runner: web.AppRunner | None = None

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.seen.append((request.path, body, request.headers.get("Authorization", "")))
        if self.mode == "500":
            return web.json_response({"kind": "Status", "code": 500}, status=500)
        if self.mode == "huge":
            return web.Response(body=b"{" + b" " * (MAX_REVIEW_BYTES + 10) + b"}", content_type="application/json")
        if self.mode == "slow":
            await asyncio.sleep(5)
        if request.path.endswith("/tokenreviews"):
            ok = body["spec"]["token"] == "good"
            status: dict[str, Any] = {"authenticated": ok}
            if ok:
                status["user"] = {"username": "u", "groups": ["g"], "extra": {"k": ["v"]}}
            return web.json_response({**body, "status": status}, status=201)
        return web.json_response({**body, "status": {"allowed": body["spec"]["user"] == "u"}}, status=201)

    async def __aenter__(self) -> ReviewServer:
        app = web.Application()
        app.router.add_post("/{tail:.*}", self.handle)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._runner is not None
        await self._runner.cleanup()


@pytest.fixture
async def server() -> AsyncIterator[ReviewServer]:
    async with ReviewServer() as s:
        yield s


async def test_cloud_review_client_speaks_the_review_apis(server: ReviewServer) -> None:
    async with httpx.AsyncClient(base_url=server.url, headers={"Authorization": "Bearer agent"}) as http:
        client = CloudReviewClient(http=http)
        answer = await client.token_review("good", timeout_s=2)
        assert answer == Authentication(UserInfo(username="u", groups=("g",), extra=(("k", ("v",)),)))
        assert (await client.token_review("bad", timeout_s=2)).user is None
        assert answer.user is not None
        assert await client.access_review(answer.user, WATCH_ES, timeout_s=2) == Authorization(True)
        (p1, b1, a1), _, (p3, b3, _) = server.seen
        assert (p1, a1) == ("/apis/authentication.k8s.io/v1/tokenreviews", "Bearer agent")
        assert b1 == {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": "good"}}
        assert p3 == "/apis/authorization.k8s.io/v1/subjectaccessreviews"
        assert b3 == {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": {
            "user": "u", "groups": ["g"], "extra": {"k": ["v"]}, "resourceAttributes": {
                "verb": "watch", "group": "discovery.k8s.io", "version": "v1", "resource": "endpointslices",
                "namespace": "web"}}}
        for mode, reason in (("500", "http_500"), ("huge", "malformed"), ("slow", "timeout")):
            server.mode = mode
            with pytest.raises(ReviewUnavailable) as err:
                await client.token_review("good", timeout_s=0.3)
            assert err.value.reason == reason
    async with httpx.AsyncClient(base_url="http://127.0.0.1:1") as http:   # nothing listens there
        with pytest.raises(ReviewUnavailable) as err:
            await CloudReviewClient(http=http).token_review("good", timeout_s=2)
        assert err.value.reason == "network"


@pytest.mark.parametrize("field", ["username", "uid"])
def test_a_review_with_text_utf8_cannot_carry_is_malformed_not_a_crash(field: str) -> None:
    """JSON may carry a lone surrogate ("\\ud800"), which no UTF-8 text holds (found by make fuzz)."""
    user = {"username": "system:serviceaccount:kube-system:kube-proxy", "uid": "u", field: "\ud800"}
    body = json.dumps({"kind": "TokenReview", "status": {"authenticated": True, "user": user}}).encode()
    with pytest.raises(MalformedReview, match="not valid UTF-8"):
        parse_token_review(body)


async def test_one_users_many_allowed_names_never_push_kube_proxys_decisions_out() -> None:
    """The attack: a local client allowed to get any Service asks for 2,000 different names (each an
    allowed decision of its own) before a cut-off, so kube-proxy's cached allow is pushed out and
    its reconnect while cut off is refused. Each user's flood now evicts only its own entries."""
    cloud, clock, link = FakeCloud(), Clock(), [True]
    mallory = UserInfo(username="mallory")
    cloud.users["mallory-token"] = mallory
    cloud.allowed.add(("mallory", "get", "services"))
    ac = _control(cloud, clock, link, max_positive=8, reviews_per_s=1e6, review_burst=1e6)
    assert _code(await ac.check(authorization="Bearer kp-token", attributes=LIST_SVC)) == 200
    for i in range(2000):
        name = Attributes(verb="get", group="", version="v1", resource="services", namespace="web", name=f"s-{i}")
        assert _code(await ac.check(authorization="Bearer mallory-token", attributes=name)) == 200
    link[0] = False                                       # cut off: kube-proxy's decisions are still there
    assert _code(await ac.check(authorization="Bearer kp-token", attributes=LIST_SVC)) == 200
    assert ac.access.sizes()[0] == 8


async def test_busy_review_slots_never_serve_a_stale_allow_while_the_cloud_answers() -> None:
    """Every review slot busy for a whole timeout (a flood on a slow link) counted as a failed review,
    which served a stale allow. Now it is the budget spent: a stale allow is refused, a stale
    denial stays one."""
    cloud, clock, link = FakeCloud(), Clock(), [True]
    ac = _control(cloud, clock, link, review_timeout_s=0.05)
    assert _code(await ac.check(authorization="Bearer kp-token", attributes=LIST_SVC)) == 200
    assert _code(await ac.check(authorization="Bearer bogus", attributes=LIST_SVC)) == 401
    clock.t += 1000.0                                    # every decision stale
    ac._slots = asyncio.Semaphore(0)                     # noqa: SLF001 - every slot busy
    r = await ac.check(authorization="Bearer kp-token", attributes=LIST_SVC)
    assert isinstance(r, Refusal) and (r.code, r.reason) == (503, "rate_limited"), r
    assert _code(await ac.check(authorization="Bearer bogus", attributes=LIST_SVC)) == 401  # the stale denial
    link[0] = False                                      # cut off: the last decision, as before
    assert _code(await ac.check(authorization="Bearer kp-token", attributes=LIST_SVC)) == 200

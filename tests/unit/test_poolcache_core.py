"""The pure parts of the pool cache: resource names and configuration, the etcd value codec, the
source choice (every combination), the reflector's backoff, and the reflector's handling of an
apiserver's answers (410 on watch and as an ERROR event, bookmarks, pagination, events split across
TCP segments, malformed events) against a small HTTP server on loopback that speaks the apiserver's
list/watch protocol."""

from __future__ import annotations

import asyncio
import itertools
import json
import random
from typing import Any

import httpx2 as httpx
import pytest
from aiohttp import web
from hypothesis import given
from hypothesis import strategies as st

from edgewatch.poolcache.feed import Bookmark, Change, ObjectRejected, Reset, check_object, strip_object
from edgewatch.core.types import is_decimal
from edgewatch.core.identity import NodeKey, NodeKeyring
from edgewatch.poolcache.layout import CacheKeys, Tombstone, decode_value, encode_object, encode_tombstone
from edgewatch.core.seal import seal
from edgewatch.poolcache.reflector import CloudReflector, ReflectorConfig, backoff_delay
from edgewatch.poolcache.resources import (DEFAULT_RESOURCES, ENDPOINTS, ENDPOINTSLICES, SERVICES,
                                           PoolResourcesError, parse_pool_resources, selectable_fields)
from edgewatch.poolcache.sources import Source, choose_source


def svc(name: str, rv: str, ns: str = "default", **extra: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": ns,
                                                                 "resourceVersion": rv}, **extra}


# -- resources ---------------------------------------------------------------------------------------


def test_pool_resources_parse_defaults_off_and_lists() -> None:
    assert parse_pool_resources(None) == DEFAULT_RESOURCES == parse_pool_resources("  ")
    assert parse_pool_resources("off") == () == parse_pool_resources("[]")
    assert parse_pool_resources("- v1/endpoints\n- discovery.k8s.io/v1/endpointslices\n- v1/endpoints") == (
        ENDPOINTS, ENDPOINTSLICES)
    assert ENDPOINTSLICES.path("ns", "x") == "/apis/discovery.k8s.io/v1/namespaces/ns/endpointslices/x"
    assert SERVICES.path() == "/api/v1/services" and SERVICES.name == "core/v1/services"


@pytest.mark.parametrize("bad", ["{a: 1}", "- apps/v1/deployments", "- v1/Services", "- a/b/c/d", "- 7",
                                 "- {group: x, version: v1, resource: r, kind: lower}", "[" , "- v0/pods"])
def test_pool_resources_refuse_bad_values_whole(bad: str) -> None:
    with pytest.raises(PoolResourcesError):
        parse_pool_resources(bad)


def test_service_fields_for_selectors() -> None:
    fields = selectable_fields(SERVICES, svc("a", "1", spec={"clusterIP": "None", "type": "ClusterIP"}))
    assert fields == {"metadata.name": "a", "metadata.namespace": "default", "spec.clusterIP": "None",
                      "spec.type": "ClusterIP"}
    assert set(selectable_fields(ENDPOINTSLICES, {"metadata": {"name": "a"}})) == {"metadata.name",
                                                                                  "metadata.namespace"}


# -- objects and the etcd codec ---------------------------------------------------------------------


def test_check_object_and_strip() -> None:
    obj = svc("a", "12")
    obj["metadata"]["managedFields"] = [{"manager": "x"}]
    stripped = strip_object(check_object(obj, SERVICES))
    assert "managedFields" not in stripped["metadata"] and "managedFields" in obj["metadata"]
    for bad, reason in [(svc("a", "x1"), "resource_version"), ({**svc("a", "1"), "kind": "Pod"}, "kind"),
                        (svc("A_b", "1"), "name"), ([], "shape"), ({**svc("a", "1"), "metadata": 3}, "shape")]:
        with pytest.raises(ObjectRejected) as err:
            check_object(bad, SERVICES)
        assert err.value.reason == reason


#: The leader's keyring (writes and, holding every published key, reads).
LEADER = NodeKeyring(node="a-1", keys=[NodeKey.generate()])


def test_etcd_values_round_trip_and_refuse_what_does_not_match_its_key() -> None:
    keys = CacheKeys("/edgewatch/pools/a/nodes/a-1/", SERVICES, "a-1")
    key = keys.object_key("default", "a")
    assert key == b"/edgewatch/pools/a/nodes/a-1/cache/core/v1/services/o/default/a"
    assert decode_value(keys, key, encode_object(svc("a", "5"), keys=keys, signer=LEADER),
                        verifier=LEADER) == svc("a", "5")
    assert decode_value(keys, key, encode_tombstone("9", key=key, signer=LEADER),
                        verifier=LEADER) == Tombstone("default", "a", "9")

    def sealed(body: bytes) -> bytes:
        return seal(body, key=key, signer=LEADER)

    cases = [(key, encode_object(svc("b", "5"), keys=keys, signer=LEADER), "bad_signature"),  # b's value under a's key
             (key, seal(b'{"kind":"Service"}', key=keys.object_key("default", "b"), signer=LEADER), "bad_signature"),
             (key, sealed(b"{"), "malformed"), (key, b"{}", "unsigned"),
             (key, b"x" * 1_100_000, "oversized"),
             (keys.base + b"zz", encode_object(svc("a", "5"), keys=keys, signer=LEADER), "key"),
             (key, sealed(json.dumps(svc("b", "5")).encode()), "mismatch"),
             (key, sealed(b'{"tombstone": {"resourceVersion": "x"}}'), "malformed"),
             # "\u00b2" ("²") passes str.isdigit but not int(): once it crashed the node feeds
             (key, sealed(b'{"tombstone": {"resourceVersion": "\\u00b2"}}'), "malformed"),
             (key, encode_object(svc("a", "\u00b2"), keys=keys, signer=LEADER), "resource_version")]
    for k, value, reason in cases:
        with pytest.raises(ObjectRejected) as err:
            decode_value(keys, k, value, verifier=LEADER)
        assert err.value.reason == reason, (k, value[:80])


@pytest.mark.parametrize(("text", "ok"), [("0", True), ("18446744073709551615", True), ("1" * 21, False),
                                         ("", False), ("\u00b2", False), ("\u0661", False), ("-1", False),
                                         (" 1", False), (1, False), (None, False)])
def test_a_resource_version_is_ascii_digits_only(text: object, ok: bool) -> None:
    assert is_decimal(text) is ok


@given(st.binary(max_size=300))
def test_decode_value_never_raises_anything_else(value: bytes) -> None:
    keys = CacheKeys("/p/nodes/a-1/", SERVICES, "a-1")
    key = keys.object_key("n", "a")
    try:  # the raw bytes, and the same bytes sealed by the leader (so the parser is reached)
        decode_value(keys, key, value, verifier=LEADER)
    except ObjectRejected as exc:
        assert exc.reason
    try:
        decoded = decode_value(keys, key, seal(value, key=key, signer=LEADER), verifier=LEADER)
    except ObjectRejected as exc:
        assert exc.reason  # refused with a metric label
    else:  # accepted only as a tombstone or the very object the key names
        assert decoded == Tombstone("n", "a", decoded.resource_version) if isinstance(decoded, Tombstone) \
            else (decoded["metadata"]["namespace"], decoded["metadata"]["name"]) == ("n", "a")


# -- the source choice --------------------------------------------------------------------------------


@pytest.mark.parametrize(("current", "ready", "healthy", "unready_for", "cloud"),
                         list(itertools.product(Source, (True, False), (True, False), (0.0, 5.0, 20.0),
                                                (True, False))))
def test_choose_source_every_case(current: Source, ready: bool, healthy: bool, unready_for: float,
                                  cloud: bool) -> None:
    got = choose_source(current=current, coordinator_ready=ready, coordinator_healthy=healthy,
                        unready_for_s=unready_for, cloud_ok=cloud, handover_grace_s=10.0)
    if ready:
        assert got is Source.COORDINATOR  # Ready wins, whatever the cloud link
    elif current is Source.COORDINATOR and unready_for < 10.0:
        assert got is Source.COORDINATOR  # a hand-over or a blip: no switch, no herd of cloud re-lists
    elif cloud:
        assert got is Source.CLOUD
    else:
        assert got is Source.LAST_KNOWN  # never an empty cache: the last state stays served


@given(st.integers(min_value=1, max_value=100))
def test_backoff_stays_within_its_bounds(attempt: int) -> None:
    delay = backoff_delay(attempt, initial=0.8, cap=30.0, rng=random.Random(attempt))
    ceiling = min(30.0, 0.8 * 2 ** (attempt - 1))
    assert ceiling / 2 <= delay <= ceiling


# -- the reflector against an apiserver-like server ---------------------------------------------------


class FakeApiserver:
    """Answers list (paged) and watch for Services with scripted watch streams; records requests."""

    def __init__(self, objects: list[dict[str, Any]], watches: list[list[bytes | int]]) -> None:
        self.objects = objects
        self.watches = watches  # per watch request: chunks to send, or an HTTP status int
        self.requests: list[dict[str, str]] = []

    async def handle(self, request: web.Request) -> web.StreamResponse:
        q = dict(request.query)
        self.requests.append(q)
        if q.get("watch") != "true":
            start = int(q.get("continue") or 0)
            limit = int(q["limit"])
            items = self.objects[start:start + limit]
            more = start + limit < len(self.objects)
            body = {"kind": "ServiceList", "apiVersion": "v1", "items": [
                {k: v for k, v in o.items() if k not in ("kind", "apiVersion")} for o in items],
                "metadata": {"resourceVersion": "100", **({"continue": str(start + limit)} if more else {})}}
            return web.json_response(body)
        script = self.watches.pop(0) if self.watches else [b""]
        if script and isinstance(script[0], int):
            return web.json_response({"kind": "Status", "code": script[0]}, status=script[0])
        resp = web.StreamResponse()
        await resp.prepare(request)
        for chunk in script:
            assert isinstance(chunk, bytes)
            await resp.write(chunk)
            await asyncio.sleep(0.01)
        await resp.write_eof()
        return resp


async def _run_reflector(api: FakeApiserver, *, until: int) -> tuple[list[Any], CloudReflector, list[str]]:
    app = web.Application()
    app.router.add_get("/api/v1/services", api.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    events: list[Any] = []
    rejected: list[str] = []

    async def sink(event: Any) -> None:
        events.append(event)

    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
        reflector = CloudReflector(resource=SERVICES, http=http, sink=sink, on_rejected=rejected.append,
                                   config=ReflectorConfig(page_size=2, backoff_initial_s=0.01, backoff_max_s=0.02,
                                                          watch_timeout_s=1))
        task = asyncio.create_task(reflector.run())
        try:
            async with asyncio.timeout(10):
                while len(events) < until:
                    await asyncio.sleep(0.01)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    await runner.cleanup()
    return events, reflector, rejected


def _line(kind: str, obj: dict[str, Any]) -> bytes:
    return json.dumps({"type": kind, "object": obj}).encode() + b"\n"


async def test_reflector_lists_in_pages_watches_and_relists_on_gone() -> None:
    objects = [svc(f"s{i}", str(90 + i)) for i in range(5)]
    modified = _line("MODIFIED", svc("s1", "101"))
    bookmark = _line("BOOKMARK", {"kind": "Service", "apiVersion": "v1", "metadata": {"resourceVersion": "105"}})
    api = FakeApiserver(objects, watches=[
        [modified[:7], modified[7:30], modified[30:] + bookmark],  # one event split over three segments
        [_line("ERROR", {"kind": "Status", "code": 410})],        # expired: list again
        [410],                                                    # and as an HTTP status
        [b"not json\n"],                                          # malformed: backoff, re-watch
    ])
    events, reflector, _rejected = await _run_reflector(api, until=4)
    assert isinstance(events[0], Reset) and [o["metadata"]["name"] for o in events[0].objects] == [
        f"s{i}" for i in range(5)] and events[0].resource_version == "100"
    assert events[0].objects[0]["kind"] == "Service"  # list items get their kind back
    assert events[1] == Change("MODIFIED", svc("s1", "101"))
    assert events[2] == Bookmark("105")
    assert isinstance(events[3], Reset)  # after the 410 ERROR event
    lists = [q for q in api.requests if q.get("watch") != "true"]
    watches = [q for q in api.requests if q.get("watch") == "true"]
    assert [q.get("continue") for q in lists[:3]] == [None, "2", "4"]  # pages of 2
    assert watches[0]["resourceVersion"] == "100" and watches[0]["allowWatchBookmarks"] == "true"
    assert watches[1]["resourceVersion"] == "105"  # re-watch from the bookmark, no list
    assert reflector.lists >= 2


async def test_reflector_drops_bad_objects_and_keeps_going() -> None:
    api = FakeApiserver([svc("ok", "1"), {"metadata": {"name": "Bad Name", "namespace": "x",
                                                         "resourceVersion": "2"}}],
                        watches=[[_line("ADDED", {**svc("x", "101"), "kind": "Pod"}), _line("WEIRD", svc("y", "102")),
                                  _line("ADDED", svc("z", "103"))]])
    events, _reflector, rejected = await _run_reflector(api, until=2)
    assert [o["metadata"]["name"] for o in events[0].objects] == ["ok"]
    assert events[1] == Change("ADDED", svc("z", "103"))
    assert sorted(rejected) == ["event_type", "kind", "name"]


class _View:
    """A Ready coordinator led by ``leader`` (what the node cache reads of it)."""

    def __init__(self, leader: str) -> None:
        from edgewatch.poolcache.layout import CacheArea

        self.cache_area = CacheArea(leader, f"/edgewatch/pools/a/nodes/{leader}/")
        self.ready = self.healthy = True

    def new_client(self) -> None:
        raise AssertionError("not read in this test")


@pytest.mark.parametrize(("leader", "source"), [("a-1", Source.COORDINATOR), ("a-9", Source.LAST_KNOWN)])
def test_a_coordinator_whose_leaders_keys_are_unknown_here_is_not_read(leader: str, source: Source) -> None:
    """Every value a9 wrote would be refused (and stay refused until it changes), so a node that has
    not seen a9's published keys (it joined while this node was cut off) does not read its area."""
    from prometheus_client import CollectorRegistry

    from edgewatch.poolcache.sources import NodePoolCache
    from edgewatch.poolcache.store import ResourceCache

    view = _View(leader)
    node = NodePoolCache(caches={SERVICES: ResourceCache(SERVICES)}, http=None,  # type: ignore[arg-type]
                         coordinator=lambda: view, cloud_ok=lambda: False, verifier=LEADER,
                         registry=CollectorRegistry())
    assert node._choose() is source

"""Tests of edgewatch.poolcache.store: list and watch with kube-apiserver's watch-cache semantics,
the history floor, selector transitions, bounds, refused input, and hypothesis properties (the
cache equals a model after random events; a watch from X replays exactly the events after X)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edgewatch.poolcache.resources import ENDPOINTSLICES, SERVICES
from edgewatch.poolcache.store import (
    INITIAL_EVENTS_END,
    BadRequest,
    CacheFull,
    Gone,
    NotSynced,
    ResourceCache,
    TooLargeResourceVersion,
    Watch,
)


def svc(ns: str, name: str, rv: int, labels: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"namespace": ns, "name": name, "resourceVersion": str(rv), "labels": labels or {}},
            "spec": spec}


def lst(cache: ResourceCache, **kw: Any) -> tuple[list[dict[str, Any]], str]:
    args: dict[str, Any] = {"namespace": None, "label_selector": None, "field_selector": None,
                            "resource_version": None, "resource_version_match": None}
    args.update(kw)
    return cache.list(**args)


def watch(cache: ResourceCache, rv: str | None = None, **kw: Any) -> Watch:
    args: dict[str, Any] = {"namespace": None, "label_selector": None, "field_selector": None,
                            "resource_version": rv, "allow_bookmarks": False}
    args.update(kw)
    return cache.watch(**args)


def drain(w: Watch) -> list[tuple[str, str, str]]:
    """(type, name, rv) of every event queued now, without waiting."""
    async def go() -> list[tuple[str, str, str]]:
        out = []
        while True:
            try:
                event = await w.next(timeout_s=0)
            except StopAsyncIteration:
                return out
            if event is None:
                return out
            typ, obj = event
            out.append((typ, obj["metadata"].get("name", ""), obj["metadata"]["resourceVersion"]))
    return asyncio.run(go())


def filled(**kw: Any) -> ResourceCache:
    cache = ResourceCache(SERVICES, **kw)
    cache.replace([svc("b", "y", 7, {"app": "web"}), svc("a", "x", 5), svc("a", "z", 6, {"app": "db"})], "10",
                  source="cloud")
    return cache


def test_not_synced_is_never_an_empty_list() -> None:
    cache = ResourceCache(SERVICES)
    assert not cache.synced and cache.resource_version == ""
    with pytest.raises(NotSynced):
        lst(cache)
    with pytest.raises(NotSynced):
        watch(cache)
    assert cache.apply("ADDED", svc("a", "x", 3)) is False
    assert cache.stats.refused["malformed"] == 1


def test_list_current_state_sorted_with_kind() -> None:
    cache = filled()
    assert (cache.synced, cache.source, cache.resource_version) == (True, "cloud", "10")
    for rv in (None, "", "0", "3", "10"):
        items, list_rv = lst(cache, resource_version=rv)
        assert list_rv == "10"
        assert [(o["metadata"]["namespace"], o["metadata"]["name"]) for o in items] == [("a", "x"), ("a", "z"),
                                                                                       ("b", "y")]
        assert all(o["kind"] == "Service" and o["apiVersion"] == "v1" for o in items)
    assert [o["metadata"]["name"] for o in lst(cache, namespace="a")[0]] == ["x", "z"]
    assert [o["metadata"]["name"] for o in lst(cache, label_selector="app in (web,db)")[0]] == ["z", "y"]
    assert [o["metadata"]["name"] for o in lst(cache, label_selector="!app")[0]] == ["x"]
    assert [o["metadata"]["name"] for o in lst(cache, field_selector="metadata.namespace!=a")[0]] == ["y"]
    assert [o["metadata"]["name"] for o in lst(cache, field_selector="metadata.name=z", namespace="a")[0]] == ["z"]
    assert len(lst(cache, limit=1)[0]) == 3  # limit ignored: one page


def test_list_resource_version_match() -> None:
    cache = filled()
    assert lst(cache, resource_version="10", resource_version_match="Exact")[1] == "10"
    assert lst(cache, resource_version="4", resource_version_match="NotOlderThan")[1] == "10"
    with pytest.raises(Gone):
        lst(cache, resource_version="9", resource_version_match="Exact")
    with pytest.raises(TooLargeResourceVersion, match="Too large resource version"):
        lst(cache, resource_version="11")
    with pytest.raises(TooLargeResourceVersion):
        lst(cache, resource_version="11", resource_version_match="Exact")
    for kw in ({"resource_version_match": "Exact"}, {"resource_version": "0", "resource_version_match": "Exact"},
               {"resource_version": "1", "resource_version_match": "Newest"}, {"resource_version": "abc"},
               {"resource_version": "-1"}, {"label_selector": "a in b"}, {"field_selector": "spec.x=1"}):
        with pytest.raises(BadRequest):
            lst(cache, **kw)


def test_get() -> None:
    cache = filled()
    assert cache.get(namespace="a", name="x")["metadata"]["resourceVersion"] == "5"  # type: ignore[index]
    assert cache.get(namespace="a", name="y") is None


def test_watch_from_zero_sends_state_then_live_events() -> None:
    cache = filled()
    w = watch(cache, "0", namespace="a")
    assert cache.apply("ADDED", svc("a", "n", 11))
    assert cache.apply("ADDED", svc("b", "other", 12))
    assert drain(w) == [("ADDED", "x", "5"), ("ADDED", "z", "6"), ("ADDED", "n", "11")]
    w2 = watch(cache, None)
    assert [e[1] for e in drain(w2)] == ["n", "x", "z", "other", "y"]  # by namespace/name


def test_watch_from_rv_replays_history_and_floor() -> None:
    cache = filled(history=3)
    for rv in (11, 12, 13):
        assert cache.apply("MODIFIED", svc("a", "x", rv))
    assert drain(watch(cache, "11")) == [("MODIFIED", "x", "12"), ("MODIFIED", "x", "13")]
    assert drain(watch(cache, "10")) == [("MODIFIED", "x", "11"), ("MODIFIED", "x", "12"), ("MODIFIED", "x", "13")]
    assert drain(watch(cache, "13")) == []
    with pytest.raises(Gone, match="too old"):
        watch(cache, "9")
    with pytest.raises(Gone, match="too large"):
        watch(cache, "14")  # newer than known: another feed may lag, the client must re-list
    assert cache.apply("DELETED", svc("a", "z", 14))  # the ring drops 11: the floor moves to 11
    with pytest.raises(Gone):
        watch(cache, "10")
    assert drain(watch(cache, "11")) == [("MODIFIED", "x", "12"), ("MODIFIED", "x", "13"), ("DELETED", "z", "14")]


def test_replace_ends_watches_with_gone_and_sets_floor() -> None:
    cache = filled()
    w = watch(cache, "10")
    cache.apply("ADDED", svc("a", "n", 11))
    cache.replace([svc("a", "x", 20)], "25", source="coordinator")
    assert w.closed and cache.source == "coordinator" and cache.resource_version == "25"

    async def read() -> None:
        with pytest.raises(Gone):
            await w.next(timeout_s=0)
    asyncio.run(read())
    for rv in ("10", "11", "24", "26"):
        with pytest.raises(Gone):
            watch(cache, rv)
    assert drain(watch(cache, "25")) == []
    # a lagging source: the RV goes back, watches from the old source's RVs are Gone
    cache.replace([], "18", source="cloud")
    with pytest.raises(Gone):
        watch(cache, "25")
    assert lst(cache) == ([], "18")


def test_deleted_carries_last_state_with_delete_rv() -> None:
    cache = filled()
    w = watch(cache, "10")
    assert cache.apply("DELETED", {"metadata": {"namespace": "b", "name": "y", "resourceVersion": "11"}})
    async def one() -> tuple[str, dict[str, Any]] | None:
        return await w.next(timeout_s=0)
    typ, obj = asyncio.run(one())  # type: ignore[misc]
    assert typ == "DELETED" and obj["metadata"]["resourceVersion"] == "11" and obj["metadata"]["labels"] == {"app": "web"}
    assert obj["kind"] == "Service"
    assert cache.get(namespace="b", name="y") is None
    assert cache.apply("DELETED", {"metadata": {"namespace": "b", "name": "gone", "resourceVersion": "12"}})
    assert cache.resource_version == "12" and drain(w) == []


def test_selector_transitions_become_added_and_deleted() -> None:
    cache = filled()
    w = watch(cache, "10", label_selector="app=web")
    cache.apply("MODIFIED", svc("a", "x", 11, {"app": "web"}))   # starts matching
    cache.apply("MODIFIED", svc("a", "x", 12, {"app": "web"}, port=1))
    cache.apply("MODIFIED", svc("a", "x", 13, {"app": "db"}))    # stops matching
    cache.apply("MODIFIED", svc("a", "x", 14, {"app": "db"}, port=2))  # not seen
    events = []

    async def read() -> None:
        while (e := await w.next(timeout_s=0)) is not None:
            events.append(e)
    asyncio.run(read())
    assert [(t, o["metadata"]["resourceVersion"]) for t, o in events] == [("ADDED", "11"), ("MODIFIED", "12"),
                                                                          ("DELETED", "13")]
    assert events[2][1]["metadata"]["labels"] == {"app": "web"}  # the previous state, with the event's RV
    # replay from history gives the same transitions
    assert drain(watch(cache, "10", label_selector="app=web")) == [("ADDED", "x", "11"), ("MODIFIED", "x", "12"),
                                                                   ("DELETED", "x", "13")]


def test_bookmarks() -> None:
    cache = filled()
    with_bm, without = watch(cache, "10", allow_bookmarks=True), watch(cache, "10")
    cache.bookmark("15")
    cache.bookmark("14")   # older: ignored
    cache.bookmark("x")    # not an integer: ignored
    assert drain(with_bm) == [("BOOKMARK", "", "15")] and drain(without) == []
    assert cache.resource_version == "15"
    assert cache.apply("ADDED", svc("a", "n", 15)) is False  # not newer than the bookmark
    assert cache.stats.refused["stale"] == 1


def test_send_initial_events_ends_with_annotated_bookmark() -> None:
    cache = filled()
    w = watch(cache, "", allow_bookmarks=True, send_initial_events=True, label_selector="app")
    events = []

    async def read() -> None:
        while (e := await w.next(timeout_s=0)) is not None:
            events.append(e)
    asyncio.run(read())
    assert [(t, o["metadata"].get("name")) for t, o in events] == [("ADDED", "z"), ("ADDED", "y"), ("BOOKMARK", None)]
    assert events[-1][1] == {"kind": "Service", "apiVersion": "v1",
                             "metadata": {"resourceVersion": "10", "annotations": {INITIAL_EVENTS_END: "true"}}}
    with pytest.raises(BadRequest):
        watch(cache, "", send_initial_events=True)
    assert drain(watch(cache, "", allow_bookmarks=True, send_initial_events=False)) == []


def test_slow_watcher_is_closed() -> None:
    cache = filled(watch_queue=2)
    w = watch(cache, "0")  # 3 initial events do not count against the queue bound
    for rv in (11, 12):
        cache.apply("MODIFIED", svc("a", "x", rv))
    assert not w.closed
    cache.apply("MODIFIED", svc("a", "x", 13))
    assert w.closed and w.overflowed and drain(w) == []
    assert cache.stats.watchers == 0


def test_close_watches_ends_them_normally() -> None:
    cache = filled()
    w = watch(cache, "10")
    cache.apply("ADDED", svc("a", "n", 11))
    cache.close_watches()
    assert drain(w) == [("ADDED", "n", "11")] and cache.stats.watchers == 0

    async def iterate() -> list[Any]:
        return [e async for e in w]
    assert asyncio.run(iterate()) == []


async def test_watch_wakes_up_on_apply() -> None:
    cache = filled()
    w = watch(cache, "10")
    task = asyncio.create_task(w.__anext__())
    await asyncio.sleep(0)
    cache.apply("ADDED", svc("a", "n", 11))
    typ, obj = await asyncio.wait_for(task, 1)
    assert (typ, obj["metadata"]["name"]) == ("ADDED", "n")


def test_memory_bounds() -> None:
    small = svc("a", "x", 1)
    cache = ResourceCache(SERVICES, max_bytes=600, max_object_bytes=250)
    cache.replace([small], "10", source="cloud")
    assert cache.apply("ADDED", svc("a", "big", 11, note="x" * 300)) is False
    assert cache.stats.refused["object_too_large"] == 1
    assert cache.apply("ADDED", svc("a", "b", 12)) and cache.apply("ADDED", svc("a", "c", 13))
    assert cache.apply("ADDED", svc("a", "d", 14)) and cache.apply("ADDED", svc("a", "e", 15)) is False
    assert cache.stats.refused["cache_full"] == 1 and cache.stats.bytes <= 600
    with pytest.raises(CacheFull):
        cache.replace([svc("a", f"n{i}", 1) for i in range(10)], "20", source="cloud")
    assert cache.resource_version == "14" and cache.stats.objects == 4  # unchanged
    with pytest.raises(BadRequest):
        cache.replace([], "not-a-number", source="cloud")


@pytest.mark.parametrize("bad", [
    None, 3, "x", [], {}, {"metadata": None}, {"metadata": {"name": "a", "resourceVersion": "11"}},
    {"metadata": {"name": "a", "namespace": "b", "resourceVersion": "x"}},
    {"metadata": {"name": "a", "namespace": "b", "resourceVersion": 11}},
    {"metadata": {"name": "", "namespace": "b", "resourceVersion": "11"}},
    {"kind": "Pod", "metadata": {"name": "a", "namespace": "b", "resourceVersion": "11"}},
    {"apiVersion": "v2", "metadata": {"name": "a", "namespace": "b", "resourceVersion": "11"}},
    {"metadata": {"name": "a", "namespace": "b", "resourceVersion": "11", "labels": {"a": 1}}},
    {"metadata": {"name": "a", "namespace": "b", "resourceVersion": "11"}, "x": {1, 2}},
])
def test_malformed_refused(bad: Any) -> None:
    cache = filled()
    assert cache.apply("ADDED", bad) is False
    assert cache.stats.refused["malformed"] == 1 and cache.stats.objects == 3
    assert cache.apply("BOGUS", svc("a", "q", 11)) is False
    cache.replace([bad, svc("a", "q", 3)], "12", source="cloud")  # bad entries skipped
    assert [o["metadata"]["name"] for o in lst(cache)[0]] == ["q"]


def test_stale_duplicate_ignored() -> None:
    cache = filled()
    assert cache.apply("MODIFIED", svc("a", "x", 11, port=1))
    assert cache.apply("MODIFIED", svc("a", "x", 11, port=2)) is False
    assert cache.apply("MODIFIED", svc("a", "x", 9, port=3)) is False
    assert cache.get(namespace="a", name="x")["spec"] == {"port": 1}  # type: ignore[index]


def test_other_resource_kind_checked() -> None:
    cache = ResourceCache(ENDPOINTSLICES)
    cache.replace([{"kind": "EndpointSlice", "apiVersion": "discovery.k8s.io/v1",
                    "metadata": {"namespace": "a", "name": "s", "resourceVersion": "2"}},
                   {"kind": "Service", "apiVersion": "v1",
                    "metadata": {"namespace": "a", "name": "t", "resourceVersion": "2"}}], "5", source="cloud")
    assert [o["metadata"]["name"] for o in lst(cache)[0]] == ["s"]


# --- properties --------------------------------------------------------------------------

_NAMES = [("a", "x"), ("a", "y"), ("b", "x"), ("b", "z")]
_ops = st.lists(st.tuples(st.sampled_from(["put", "delete", "bookmark"]), st.sampled_from(_NAMES),
                          st.sampled_from(["web", "db"]), st.integers(1, 3)), max_size=30)


@settings(max_examples=60, deadline=None)
@given(_ops, st.integers(0, 40), st.sampled_from([None, "app=web", "app!=web"]))
def test_random_events_match_model_and_replay(ops: list[Any], start: int, selector: str | None) -> None:
    cache = ResourceCache(SERVICES, history=1000)
    cache.replace([], "100", source="cloud")
    model: dict[tuple[str, str], dict[str, Any]] = {}
    log: list[tuple[int, str, tuple[str, str], dict[str, Any] | None, dict[str, Any] | None]] = []
    rv = 100
    for op, key, app, step in ops:
        rv += step
        if op == "bookmark":
            cache.bookmark(str(rv))
            continue
        if op == "put":
            obj = svc(key[0], key[1], rv, {"app": app})
            assert cache.apply("MODIFIED" if key in model else "ADDED", obj)
            log.append((rv, "put", key, model.get(key), obj))
            model[key] = {"kind": "Service", "apiVersion": "v1", **obj}
        else:
            assert cache.apply("DELETED", svc(key[0], key[1], rv))
            if key in model:
                log.append((rv, "delete", key, model[key], None))
            model.pop(key, None)
    items, list_rv = lst(cache)
    assert list_rv == str(rv)
    assert items == [model[k] for k in sorted(model)]
    # a watch from `since` replays exactly the events after it, as the selector sees them
    since = 100 + start
    if since > rv:
        with pytest.raises(Gone):
            watch(cache, str(since))
        return
    got = drain(watch(cache, str(since), label_selector=selector))
    want = []
    for ev_rv, kind, key, before, after in log:
        if ev_rv <= since:
            continue
        def sel(o: dict[str, Any] | None) -> bool:
            if o is None:
                return False
            return selector is None or (o["metadata"]["labels"]["app"] == "web") == (selector == "app=web")
        was, now = sel(before), sel(after)
        typ = "MODIFIED" if was and now else "ADDED" if now else "DELETED" if was else None
        if typ:
            want.append((typ, key[1], str(ev_rv)))
    assert got == want


@settings(max_examples=150, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
                        st.sampled_from(["metadata", "name", "namespace", "resourceVersion", "labels", "kind",
                                         "apiVersion", "x"]), inner, max_size=4), max_leaves=12),
       st.sampled_from(["ADDED", "MODIFIED", "DELETED", "ERROR", ""]))
def test_apply_never_raises(junk: Any, event_type: str) -> None:
    cache = filled()
    cache.apply(event_type, junk)
    cache.replace([junk], "11", source="cloud")


def test_services_select_on_cluster_ip_and_type_as_kube_proxy_asks() -> None:
    """kube-proxy lists Services with ``fieldSelector=spec.clusterIP!=None`` (headless ones are not
    its business); the apiserver supports spec.clusterIP and spec.type for Services, 400 for others."""
    from edgewatch.poolcache.resources import SERVICES as SVC
    from edgewatch.poolcache.store import BadRequest as Bad, ResourceCache as Cache

    def svc(name: str, ip: str, kind: str = "ClusterIP") -> dict:
        return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": "n",
                                                                     "resourceVersion": "5"},
                "spec": {"clusterIP": ip, "type": kind}}

    cache = Cache(SVC)
    cache.replace([svc("web", "10.96.0.10"), svc("headless", "None"), svc("np", "10.96.0.11", "NodePort")], "9",
                  source="t")
    items, _ = cache.list(namespace=None, label_selector=None, field_selector="spec.clusterIP!=None",
                          resource_version=None, resource_version_match=None)
    assert sorted(i["metadata"]["name"] for i in items) == ["np", "web"]
    items, _ = cache.list(namespace=None, label_selector=None, field_selector="spec.type=NodePort",
                          resource_version=None, resource_version_match=None)
    assert [i["metadata"]["name"] for i in items] == ["np"]
    with pytest.raises(Bad):
        cache.list(namespace=None, label_selector=None, field_selector="spec.ports=1", resource_version=None,
                   resource_version_match=None)

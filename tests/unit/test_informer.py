"""The cloud door's informer (edgewatch.kube.informer, over edgewatch.kube.listwatch's HTTP) against a
scripted apiserver over real HTTP: selectors and namespaces in the requests, typed decoding, dropped objects, a dead watch
re-opened without a list, pure backoff bounds. The pool cache's reflector tests
(test_poolcache_core.py) cover paging, bookmarks and 410; the integration suite runs it against
the real kube-apiserver."""

from __future__ import annotations

import asyncio
import json
import random
from typing import Any

import httpx2 as httpx
import pytest
from aiohttp import web
from hypothesis import given
from hypothesis import strategies as st
from lightkube.resources.core_v1 import ConfigMap

from edgewatch.kube.backoff import backoff_delay
from edgewatch.kube.events import Bookmark, Change, Reset
from edgewatch.kube.informer import Informer, InformerConfig, InvalidObject, check_metadata
from edgewatch.kube.listwatch import HttpListerWatcher
from edgewatch.kube.resources import CONFIGMAPS
from edgewatch.kube.store import Store


def cm(name: str, rv: str, **data: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "ns", "resourceVersion": rv}, "data": data}


class Api:
    """Serves one ConfigMap list and a script of watches (each a list of lines, or "hang")."""

    def __init__(self, objects: list[dict[str, Any]], watches: list[Any]) -> None:
        self.objects, self.watches = objects, watches
        self.requests: list[tuple[str, dict[str, str]]] = []

    async def handle(self, request: web.Request) -> web.StreamResponse:
        q = dict(request.query)
        self.requests.append((request.path, q))
        if q.get("watch") != "true":
            return web.json_response({"kind": "ConfigMapList", "apiVersion": "v1", "metadata": {"resourceVersion": "10"},
                                      "items": [{k: v for k, v in o.items() if k not in ("kind", "apiVersion")}
                                                for o in self.objects]})
        script = self.watches.pop(0) if self.watches else []
        resp = web.StreamResponse()
        await resp.prepare(request)
        if script == "hang":
            await asyncio.sleep(3600)
        for line in script:
            await resp.write(line)
        await resp.write_eof()
        return resp


async def run(api: Api, *, until: int, **kwargs: Any) -> tuple[list[Any], Informer[Any], list[str], list[str]]:
    app = web.Application()
    app.router.add_get("/api/v1/namespaces/ns/configmaps", api.handle)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    events: list[Any] = []
    errors: list[str] = []
    rejected: list[str] = []

    async def sink(event: Any) -> None:
        events.append(event)

    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
            source = HttpListerWatcher(http=http, resource=CONFIGMAPS, namespace="ns",
                                       label_selector=kwargs.pop("label_selector", None),
                                       field_selector=kwargs.pop("field_selector", None))
            informer: Informer[Any] = Informer(source=source, sink=sink, on_error=errors.append,
                                               on_rejected=rejected.append, **kwargs)
            task = asyncio.create_task(informer.run())
            try:
                async with asyncio.timeout(10):
                    while len(events) < until:
                        await asyncio.sleep(0.01)
            finally:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
    finally:
        await runner.cleanup()
    return events, informer, errors, rejected


def line(kind: str, obj: dict[str, Any]) -> bytes:
    return json.dumps({"type": kind, "object": obj}).encode() + b"\n"


async def test_selectors_and_namespace_reach_the_apiserver_and_objects_are_typed() -> None:
    api = Api([cm("a", "5", x="1")], watches=[[line("MODIFIED", cm("a", "11", x="2"))]])
    events, _i, _e, _r = await run(api, until=2, label_selector="app=x", field_selector="metadata.name=a",
                                   decode=ConfigMap.from_dict)
    assert isinstance(events[0], Reset) and isinstance(events[0].objects[0], ConfigMap)
    assert events[0].objects[0].data == {"x": "1"} and events[0].resource_version == "10"
    assert isinstance(events[1], Change) and events[1].type == "MODIFIED" and events[1].obj.data == {"x": "2"}
    for path, q in api.requests[:2]:
        assert path == "/api/v1/namespaces/ns/configmaps"
        assert q["labelSelector"] == "app=x" and q["fieldSelector"] == "metadata.name=a"
    assert api.requests[1][1]["resourceVersion"] == "10" and api.requests[1][1]["allowWatchBookmarks"] == "true"


async def test_objects_that_fail_check_or_decode_are_dropped_and_counted() -> None:
    bad_shape = cm("b", "12")
    bad_shape["data"] = ["not", "a", "map"]
    api = Api([cm("a", "5"), {"metadata": {"name": "norv"}}],
              watches=[[line("ADDED", bad_shape), line("ADDED", cm("c", "13"))]])
    events, _i, _e, rejected = await run(api, until=2, decode=ConfigMap.from_dict)
    assert [o.metadata.name for o in events[0].objects] == ["a"]
    assert events[1].obj.metadata.name == "c"
    assert sorted(rejected) == ["decode", "malformed"]


async def test_a_silent_watch_is_reopened_from_its_resource_version_without_a_list() -> None:
    api = Api([cm("a", "5")], watches=["hang", [line("MODIFIED", cm("a", "11"))]])
    events, informer, errors, _r = await run(
        api, until=2, config=InformerConfig(idle_timeout_s=0.3, backoff_initial_s=0.01, backoff_max_s=0.02))
    assert events[1].obj["metadata"]["resourceVersion"] == "11"
    assert errors == ["idle"] and informer.lists == 1
    watches = [q for _p, q in api.requests if q.get("watch") == "true"]
    assert [q["resourceVersion"] for q in watches[:2]] == ["10", "10"]


@pytest.mark.parametrize("obj", [None, [], {"metadata": []}, {"metadata": {"name": ""}},
                                 {"metadata": {"name": "a", "resourceVersion": "x1"}},
                                 {"metadata": {"name": "a", "resourceVersion": 5}}])
def test_check_metadata_refuses_what_has_no_name_or_decimal_resource_version(obj: object) -> None:
    with pytest.raises(InvalidObject):
        check_metadata(obj)


@given(st.integers(min_value=-3, max_value=200), st.floats(0.01, 5), st.floats(1, 60), st.integers(0, 2**32))
def test_backoff_stays_within_half_and_whole_of_its_capped_ceiling(attempt: int, initial: float, cap: float,
                                                                   seed: int) -> None:
    cap = max(cap, initial)
    delay = backoff_delay(attempt, initial=initial, cap=cap, rng=random.Random(seed))
    ceiling = min(cap, initial * 2 ** max(0, attempt - 1)) if attempt < 40 else cap
    assert ceiling / 2 <= delay <= ceiling


async def test_store_turns_a_relist_into_exact_per_object_changes() -> None:
    seen: list[tuple[str, str]] = []

    async def handler(op: str, obj: dict[str, Any]) -> None:
        seen.append((op, f"{obj['metadata']['name']}@{obj['metadata']['resourceVersion']}"))

    store: Store[dict[str, Any]] = Store(on_event=handler)
    await store(Reset([cm("a", "1"), cm("b", "2")], "2"))
    assert store.synced.is_set() and sorted(seen) == [("ADDED", "a@1"), ("ADDED", "b@2")]
    seen.clear()
    await store(Change("MODIFIED", cm("a", "3")))
    await store(Bookmark("4"))
    # a cut: b deleted and c added meanwhile, a unchanged since its last event
    await store(Reset([cm("a", "3"), cm("c", "5")], "5"))
    assert seen == [("MODIFIED", "a@3"), ("DELETED", "b@2"), ("ADDED", "c@5")]
    assert sorted(store.objects) == ["ns/a", "ns/c"]
    seen.clear()
    await store(Change("DELETED", cm("c", "6")))
    assert seen == [("DELETED", "c@6")] and sorted(store.objects) == ["ns/a"]


@given(st.lists(st.dictionaries(st.sampled_from("abcdef"), st.integers(1, 9)), min_size=1, max_size=6))
async def test_after_any_sequence_of_lists_a_plain_handler_mirrors_the_last_one(lists: list[dict[str, int]]) -> None:
    mirror: dict[str, str] = {}

    def handler(op: str, obj: dict[str, Any]) -> None:
        name = obj["metadata"]["name"]
        if op == "DELETED":
            del mirror[name]
        else:
            assert (op == "ADDED") == (name not in mirror)
            mirror[name] = obj["metadata"]["resourceVersion"]

    store: Store[dict[str, Any]] = Store(on_event=handler)
    for listing in lists:
        await store(Reset([cm(n, str(v)) for n, v in listing.items()], "9"))
        assert mirror == {n: str(v) for n, v in listing.items()}

"""edgewatch.kube.upsert.create_or_update against the real apiserver: created, updated, unchanged
(no write: the resourceVersion stays), a cluster-scoped object, and real races: another client
(kubectl) writes the object between the helper's read and its write, so the apiserver answers the
replace with 409 Conflict (a stale resourceVersion) or the create with 409 AlreadyExists; the
helper reads again and decides again, and gives up with the 409 after ``conflict_retries``.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator

import pytest
from lightkube import ApiError
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import ConfigMap, Namespace

from edgewatch.kube.errors import is_conflict, is_not_found
from edgewatch.kube.upsert import Outcome, create_or_update
from edgewatch_lab.testing.controlplane import ControlPlane

pytestmark = pytest.mark.controlplane

TIMEOUT_S = 10.0


@pytest.fixture
async def ns(kube) -> AsyncIterator[str]:  # type: ignore[no-untyped-def]
    name = f"upsert-{secrets.token_hex(3)}"
    await kube.create(Namespace(metadata=ObjectMeta(name=name)))
    try:
        yield name
    finally:
        await kube.delete(Namespace, name)


def _template(ns: str, name: str = "cm") -> ConfigMap:
    return ConfigMap(metadata=ObjectMeta(name=name, namespace=ns, labels={"app.kubernetes.io/part-of": "edgewatch"}))


def _setter(key: str, value: str):  # type: ignore[no-untyped-def]
    def mutate(cm: ConfigMap) -> None:
        if (cm.data or {}).get(key) != value:
            cm.data = {**(cm.data or {}), key: value}
    return mutate


async def test_created_then_updated_then_unchanged(kube, ns: str) -> None:  # type: ignore[no-untyped-def]
    template = _template(ns)
    done = await create_or_update(client=kube, template=template, mutate=_setter("a", "1"), timeout_s=TIMEOUT_S)
    assert done.outcome is Outcome.CREATED
    assert done.obj.data == {"a": "1"}
    assert done.obj.metadata.labels == {"app.kubernetes.io/part-of": "edgewatch"}  # the template's, on create
    assert template.data is None  # the template itself is never changed
    created_rv = done.obj.metadata.resourceVersion

    # someone else's label and key: an update keeps what it did not change (the template's labels
    # are for a new object only)
    stored = await kube.get(ConfigMap, "cm", namespace=ns)
    stored.metadata.labels = {"other": "x"}
    stored.data = {**stored.data, "theirs": "y"}
    await kube.replace(stored)

    done = await create_or_update(client=kube, template=template, mutate=_setter("a", "2"), timeout_s=TIMEOUT_S)
    assert done.outcome is Outcome.UPDATED
    now = await kube.get(ConfigMap, "cm", namespace=ns)
    assert now.data == {"a": "2", "theirs": "y"}
    assert now.metadata.labels == {"other": "x"}
    assert done.obj.metadata.resourceVersion == now.metadata.resourceVersion != created_rv

    done = await create_or_update(client=kube, template=template, mutate=_setter("a", "2"), timeout_s=TIMEOUT_S)
    assert done.outcome is Outcome.UNCHANGED
    assert done.obj.metadata.resourceVersion == now.metadata.resourceVersion
    assert (await kube.get(ConfigMap, "cm", namespace=ns)).metadata.resourceVersion == now.metadata.resourceVersion


async def test_a_write_between_the_read_and_the_replace_is_a_conflict_read_again(
        kube, ns: str, control_plane: ControlPlane) -> None:  # type: ignore[no-untyped-def]
    await kube.create(ConfigMap(metadata=ObjectMeta(name="cm", namespace=ns), data={"a": "0"}))
    seen: list[dict[str, str]] = []

    def mutate(cm: ConfigMap) -> None:
        seen.append(dict(cm.data or {}))
        if len(seen) == 1:  # another client writes after our read: our replace carries a stale resourceVersion
            control_plane.kubectl("patch", "configmap", "cm", "-n", ns, "--type=merge", "-p", '{"data":{"b":"race"}}')
        cm.data = {**(cm.data or {}), "a": "1"}

    done = await create_or_update(client=kube, template=_template(ns), mutate=mutate, timeout_s=TIMEOUT_S)
    assert done.outcome is Outcome.UPDATED
    assert seen == [{"a": "0"}, {"a": "0", "b": "race"}]  # decided again on what the other client wrote
    assert (await kube.get(ConfigMap, "cm", namespace=ns)).data == {"a": "1", "b": "race"}  # nothing lost


async def test_a_create_raced_by_another_client_reads_again_and_updates(
        kube, ns: str, control_plane: ControlPlane) -> None:  # type: ignore[no-untyped-def]
    calls: list[str | None] = []

    def mutate(cm: ConfigMap) -> None:
        calls.append(cm.metadata.resourceVersion)
        if len(calls) == 1:  # absent when we read; another client creates it before our create
            control_plane.kubectl("create", "configmap", "cm", "-n", ns, "--from-literal=theirs=y")
        cm.data = {**(cm.data or {}), "a": "1"}

    done = await create_or_update(client=kube, template=_template(ns), mutate=mutate, timeout_s=TIMEOUT_S)
    assert done.outcome is Outcome.UPDATED
    assert calls[0] is None and calls[1] is not None  # a fresh object, then the one the other client made
    assert (await kube.get(ConfigMap, "cm", namespace=ns)).data == {"theirs": "y", "a": "1"}


async def test_a_conflict_that_persists_gives_up_with_the_409(
        kube, ns: str, control_plane: ControlPlane) -> None:  # type: ignore[no-untyped-def]
    await kube.create(ConfigMap(metadata=ObjectMeta(name="cm", namespace=ns), data={"n": "0"}))
    calls = 0

    def mutate(cm: ConfigMap) -> None:
        nonlocal calls
        calls += 1
        control_plane.kubectl("patch", "configmap", "cm", "-n", ns, "--type=merge", "-p",
                              f'{{"data":{{"n":"{calls}"}}}}')
        cm.data = {"mine": "1"}

    with pytest.raises(ApiError) as raised:
        await create_or_update(client=kube, template=_template(ns), mutate=mutate, timeout_s=TIMEOUT_S,
                               conflict_retries=2)
    assert is_conflict(raised.value)
    assert calls == 3  # the first try and two re-reads
    assert (await kube.get(ConfigMap, "cm", namespace=ns)).data == {"n": "3"}  # ours never landed


async def test_a_cluster_scoped_object(kube) -> None:  # type: ignore[no-untyped-def]
    name = f"upsert-cluster-{secrets.token_hex(3)}"

    def label(value: str):  # type: ignore[no-untyped-def]
        def mutate(ns: Namespace) -> None:
            ns.metadata.labels = {**(ns.metadata.labels or {}), "edgewatch.io/test": value}
        return mutate

    template = Namespace(metadata=ObjectMeta(name=name))
    try:
        assert (await create_or_update(client=kube, template=template, mutate=label("a"),
                                       timeout_s=TIMEOUT_S)).outcome is Outcome.CREATED
        assert (await create_or_update(client=kube, template=template, mutate=label("b"),
                                       timeout_s=TIMEOUT_S)).outcome is Outcome.UPDATED
        assert (await create_or_update(client=kube, template=template, mutate=label("b"),
                                       timeout_s=TIMEOUT_S)).outcome is Outcome.UNCHANGED
        assert (await kube.get(Namespace, name)).metadata.labels["edgewatch.io/test"] == "b"
    finally:
        await kube.delete(Namespace, name)


async def test_a_template_without_a_name_or_a_renaming_mutate_is_refused(kube, ns: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match="no metadata.name"):
        await create_or_update(client=kube, template=ConfigMap(metadata=ObjectMeta(namespace=ns)),
                               mutate=_setter("a", "1"), timeout_s=TIMEOUT_S)

    def rename(cm: ConfigMap) -> None:
        cm.metadata.name = "other"

    with pytest.raises(ValueError, match="renamed"):
        await create_or_update(client=kube, template=_template(ns), mutate=rename, timeout_s=TIMEOUT_S)
    with pytest.raises(ApiError) as absent:
        await kube.get(ConfigMap, "other", namespace=ns)
    assert is_not_found(absent.value)

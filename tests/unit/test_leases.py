"""edgewatch.kube.leases on the in-memory API: the mark, the controller's autonomy hold (judged by what the
caller observed, written past a fast clock), and removing a stale mark without ever removing a
current one (resourceVersion precondition; the same race on the real apiserver is in
tests/integration/test_controller.py)."""

from __future__ import annotations

import datetime as dt

import pytest
from _fakekube import FakeKube
from lightkube.resources.coordination_v1 import Lease

from edgewatch.kube.leases import (
    MARK_ANNOTATIONS,
    RenewOutcome,
    clear_stale_mark,
    hold_renewal,
    is_marked,
    mark_is_current,
    renew_on_behalf,
)
from edgewatch.names import DELEGATE_HEARTBEAT_ANNOTATION, DELEGATED_RENEW_TIME_ANNOTATION, DELEGATED_VIA_ANNOTATION
from edgewatch.timefmt import format_micro_time

NOW = dt.datetime(2030, 1, 1, tzinfo=dt.timezone.utc)
R = "2030-01-01T00:00:00.000000Z"


def add_lease(kube: FakeKube, *, renew: str | None = R, annotations: dict[str, str] | None = None) -> None:
    spec = {"holderIdentity": "n1", "leaseDurationSeconds": 40}
    if renew is not None:
        spec["renewTime"] = renew
    kube.put("Lease", {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                       "metadata": {"name": "n1", "namespace": "kube-node-lease", "annotations": annotations or {}},
                       "spec": spec})


def lease(kube: FakeKube) -> dict:
    return kube.obj("Lease", "n1", "kube-node-lease")


@pytest.mark.parametrize(
    ("annotations", "renew", "current"),
    [
        ({DELEGATE_HEARTBEAT_ANNOTATION: "true", DELEGATED_RENEW_TIME_ANNOTATION: R}, R, True),
        ({DELEGATE_HEARTBEAT_ANNOTATION: "true", DELEGATED_RENEW_TIME_ANNOTATION: R}, "2030-01-01T00:00:10.000000Z",
         False),
        ({DELEGATE_HEARTBEAT_ANNOTATION: "true"}, R, False),
        ({DELEGATE_HEARTBEAT_ANNOTATION: "True", DELEGATED_RENEW_TIME_ANNOTATION: R}, R, False),
        ({DELEGATED_RENEW_TIME_ANNOTATION: R}, R, False),
        ({DELEGATE_HEARTBEAT_ANNOTATION: "true", DELEGATED_RENEW_TIME_ANNOTATION: R}, None, False),
    ],
)
def test_mark_is_current(annotations: dict[str, str], renew: str | None, current: bool) -> None:
    assert mark_is_current(annotations=annotations, renew_time=renew) is current
    kube = FakeKube()
    add_lease(kube, renew=renew, annotations=annotations)
    assert is_marked(Lease.from_dict(lease(kube))) is current


async def test_hold_writes_our_time_when_the_lease_is_unchanged() -> None:
    kube = FakeKube()
    add_lease(kube, renew="2029-12-31T23:59:50.000000Z")
    result = await hold_renewal(client=kube, node="n1", holder="ctl", expected_renew_time="2029-12-31T23:59:50.000000Z",
                                now=NOW)  # type: ignore[arg-type]
    assert result.outcome is RenewOutcome.RENEWED and result.renew_time == NOW
    got = lease(kube)
    assert got["spec"]["renewTime"] == R
    assert got["metadata"]["annotations"] == {DELEGATE_HEARTBEAT_ANNOTATION: "true", "edgewatch.io/delegated-by": "ctl",
                                              DELEGATED_RENEW_TIME_ANNOTATION: R, DELEGATED_VIA_ANNOTATION: "autonomy"}


async def test_hold_moves_past_a_renew_time_from_a_fast_clock() -> None:
    kube = FakeKube()
    ahead = "2030-01-01T01:00:00.000000Z"  # written by a node whose clock is an hour ahead of ours
    add_lease(kube, renew=ahead)
    result = await hold_renewal(client=kube, node="n1", holder="ctl", expected_renew_time=ahead, now=NOW)  # type: ignore[arg-type]
    assert result.outcome is RenewOutcome.RENEWED
    assert lease(kube)["spec"]["renewTime"] == "2030-01-01T01:00:00.000001Z"  # later than before, always


async def test_hold_writes_nothing_when_someone_renewed_since_it_was_observed() -> None:
    kube = FakeKube()
    add_lease(kube, renew="2030-01-01T00:00:05.000000Z")
    result = await hold_renewal(client=kube, node="n1", holder="ctl", expected_renew_time=R, now=NOW)  # type: ignore[arg-type]
    assert result.outcome is RenewOutcome.NODE_RENEWED_ITSELF
    assert lease(kube)["spec"]["renewTime"] == "2030-01-01T00:00:05.000000Z"
    assert not lease(kube)["metadata"]["annotations"]


async def test_hold_of_a_missing_lease_invents_nothing() -> None:
    result = await hold_renewal(client=FakeKube(), node="n1", holder="ctl", expected_renew_time=R, now=NOW)  # type: ignore[arg-type]
    assert result.outcome is RenewOutcome.NO_LEASE


async def test_renew_on_behalf_marks_the_renewal() -> None:
    kube = FakeKube()
    add_lease(kube, renew="2029-12-31T23:59:00.000000Z")
    result = await renew_on_behalf(client=kube, node="n1", delegate="a-2", via="peer", alive_at=NOW)  # type: ignore[arg-type]
    assert result.outcome is RenewOutcome.RENEWED
    assert is_marked(Lease.from_dict(lease(kube)))
    assert lease(kube)["metadata"]["annotations"][DELEGATED_VIA_ANNOTATION] == "peer"


async def test_clear_stale_mark_removes_a_stale_mark_only() -> None:
    kube = FakeKube()
    stale = {DELEGATE_HEARTBEAT_ANNOTATION: "true", DELEGATED_RENEW_TIME_ANNOTATION: "2029-12-31T23:59:00.000000Z",
             "edgewatch.io/delegated-by": "a-2", DELEGATED_VIA_ANNOTATION: "peer", "other": "kept"}
    add_lease(kube, annotations=stale)
    assert await clear_stale_mark(client=kube, node="n1")  # type: ignore[arg-type]
    assert lease(kube)["metadata"]["annotations"] == {"other": "kept"}
    assert not await clear_stale_mark(client=kube, node="n1")  # type: ignore[arg-type]
    current = {DELEGATE_HEARTBEAT_ANNOTATION: "true", DELEGATED_RENEW_TIME_ANNOTATION: R}
    add_lease(kube, annotations=current)
    assert not await clear_stale_mark(client=kube, node="n1")  # type: ignore[arg-type]
    assert set(MARK_ANNOTATIONS) & set(lease(kube)["metadata"]["annotations"])


async def test_clear_stale_mark_never_removes_a_mark_written_after_its_read() -> None:
    """A delegate writes a current mark between clear_stale_mark's GET and its patch: the patch's
    resourceVersion precondition fails (409), it re-reads, sees the current mark, and leaves it."""
    kube = FakeKube()
    add_lease(kube, annotations={DELEGATE_HEARTBEAT_ANNOTATION: "true",
                                 DELEGATED_RENEW_TIME_ANNOTATION: "2029-12-31T23:59:00.000000Z"})
    raced = False

    async def delegate_renews(kind: str, name: str) -> None:
        nonlocal raced
        if kind == "Lease" and not raced:
            raced = True
            await renew_on_behalf(client=kube, node="n1", delegate="a-2", via="peer",  # type: ignore[arg-type]
                                  alive_at=NOW + dt.timedelta(seconds=5))

    kube.hooks["patch"] = delegate_renews
    assert not await clear_stale_mark(client=kube, node="n1")  # type: ignore[arg-type]
    assert raced and is_marked(Lease.from_dict(lease(kube)))
    assert lease(kube)["spec"]["renewTime"] == format_micro_time(NOW + dt.timedelta(seconds=5))


async def test_a_newer_renewal_marked_as_another_carriers_is_never_this_carriers_success() -> None:
    """A compromised node keeps a cut-off peer's Lease just ahead of the honest carrier with its
    own mark: the honest carrier writes nothing (a renewTime must grow) and says so, never RENEWED."""
    kube = FakeKube()
    later = "2030-01-01T00:00:05.000000Z"
    add_lease(kube, renew=later, annotations={DELEGATE_HEARTBEAT_ANNOTATION: "true", DELEGATED_RENEW_TIME_ANNOTATION: later,
                                              "edgewatch.io/delegated-by": "mallory"})
    done = await renew_on_behalf(client=kube, node="n1", delegate="n2", via="peer", alive_at=NOW)  # type: ignore[arg-type]
    assert done.outcome is RenewOutcome.CARRIED_BY_ANOTHER and "mallory" in done.detail
    add_lease(kube, renew=later, annotations={DELEGATE_HEARTBEAT_ANNOTATION: "true", DELEGATED_RENEW_TIME_ANNOTATION: later,
                                              "edgewatch.io/delegated-by": "n2"})
    done = await renew_on_behalf(client=kube, node="n1", delegate="n2", via="peer", alive_at=NOW)  # type: ignore[arg-type]
    assert done.outcome is RenewOutcome.RENEWED

"""The pool coordinator's etcd probe (edgewatch.poolcoordinator.health): when etcd exits, readiness
is withdrawn at once, not at the next probe."""

from __future__ import annotations

from edgewatch.poolcoordinator.health import EtcdProbe


def test_invalidate_withdraws_readiness_once_and_says_why() -> None:
    changes: list[bool] = []
    probe = EtcdProbe(target="127.0.0.1:1", credentials=lambda: None, on_change=changes.append)  # type: ignore[arg-type, return-value]
    probe.invalidate("etcd exited")  # never ready: nothing flips
    assert (probe.ok, probe.reason, changes) == (False, "etcd exited", [])
    probe.ok, probe.reason = True, ""  # as a successful probe leaves it
    probe.invalidate("etcd exited; the new process is not probed yet")
    assert (probe.ok, probe.reason, changes) == (False, "etcd exited; the new process is not probed yet", [False])
    probe.invalidate("again")
    assert changes == [False]  # one flip, told once

"""edgewatch.controller.moves and the reconciler's NodeMovedPool Event: a node whose pool or group
label changes (its own kubelet may change them) is never moved silently."""

from __future__ import annotations

import asyncio

from _fakekube import FakeKube
from test_reconciler import add_lease, add_node, eventually, running

from edgewatch.controller.moves import LabelMoves
from edgewatch.names import POOL_LABEL


def test_a_first_sight_is_no_move_and_a_change_is_told_once() -> None:
    moves = LabelMoves()
    assert moves.note("a-1", {POOL_LABEL: "a"}, group_label="") is None
    assert moves.take("a-1") is None
    assert moves.note("a-1", {POOL_LABEL: "a", "other": "x"}, group_label="") is None  # another label: no move
    message = moves.note("a-1", {POOL_LABEL: "b"}, group_label="")
    assert message is not None and "pool a -> b" in message and "compromised" in message
    assert moves.take("a-1") == message and moves.take("a-1") is None
    assert "pool b -> (none)" in (moves.note("a-1", {}, group_label="") or "")


def test_a_group_move_counts_only_while_grouping_by_label() -> None:
    moves = LabelMoves()
    moves.note("a-1", {POOL_LABEL: "a", "zone": "z1"}, group_label="zone")
    assert "group (zone) z1 -> z2" in (moves.note("a-1", {POOL_LABEL: "a", "zone": "z2"}, group_label="zone") or "")
    assert moves.note("a-1", {POOL_LABEL: "a", "zone": "z3"}, group_label="") is not None  # grouping turned off
    moves.forget("a-1")
    assert moves.note("a-1", {POOL_LABEL: "c"}, group_label="") is None  # deleted, then new: no move


async def test_the_reconciler_records_a_warning_event_for_a_move() -> None:
    kube = FakeKube()
    add_node(kube, "a-1", labels={POOL_LABEL: "a"})
    add_lease(kube, "a-1")
    async with running(kube) as rec:
        await eventually(lambda: "a-1" in rec.plans, timeout_s=5, what="a-1 planned")
        node = kube.obj("Node", "a-1")
        node["metadata"]["labels"] = {POOL_LABEL: "b"}
        kube.put("Node", node)
        await eventually(lambda: any(e["reason"] == "NodeMovedPool" for e in kube.events), timeout_s=5,
                         what="the NodeMovedPool Event")
        await asyncio.sleep(0.2)
    moved = [e for e in kube.events if e["reason"] == "NodeMovedPool"]
    assert len(moved) == 1 and moved[0]["type"] == "Warning" and "pool a -> b" in moved[0]["message"]
    assert rec.metrics.node_moves._value.get() == 1  # noqa: SLF001 - the counter's value

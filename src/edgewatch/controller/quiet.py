"""A Lease renewal that changes nothing: when the controller need not reconcile a node at all.

At 1,000 nodes every kubelet renews its Lease every 10 s: 100 watch events a second. For a node
that is normal and renews its own Lease, such an event changes one thing only, the moment its
heartbeat goes overdue (``edgewatch.controller.views.lease_grace_s`` after the renewal was seen):
the plan would come out the same, with nothing to write. So instead of a reconcile the reconciler
moves that node's next look to the new deadline (``WorkQueue.reschedule``): the node is reconciled
when it misses a heartbeat, or when anything else about it changes (Node, verdict, config, resync).

Pure: no clock, no I/O.
"""

from __future__ import annotations

from edgewatch.controller.model import CloudView, LeaseSnapshot, NodePlan, NodeState
from edgewatch.controller.views import is_delegated

__all__ = ["only_renewed"]


def only_renewed(*, before: LeaseSnapshot | None, after: LeaseSnapshot | None, plan: NodePlan | None) -> bool:
    """True iff going from Lease ``before`` to ``after`` is an own renewal of a node whose last plan
    has nothing due but the heartbeat deadline, so reconciling it now would change nothing.

    That is: the last plan is normal, enforced, with the cloud view OK (own renewal, fresh), no
    Event and a requeue (the deadline); both Leases have a renewTime, neither is a current delegate
    mark (a carry, or the controller's hold, is judged by a reconcile), only the renewTime differs
    (annotations, holder and duration are the same).
    """
    if plan is None or before is None or after is None:
        return False
    if (plan.effective_state is not NodeState.NORMAL or plan.state is not NodeState.NORMAL
            or plan.cloud is not CloudView.OK or plan.event is not None or plan.requeue_after_s is None):
        return False
    if before.renew_time is None or after.renew_time is None or before.renew_time == after.renew_time:
        return False
    if is_delegated(before) or is_delegated(after):
        return False
    return (before.annotations == after.annotations and before.holder == after.holder
            and before.duration_s == after.duration_s)

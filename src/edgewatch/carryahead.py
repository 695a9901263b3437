"""How far past the controller's clock a carried Lease renewTime may be: a bound derived from the
kubelet's renew interval and kube-controller-manager's grace, so that no carry can hide a live
node's own renewals long enough to make it NotReady.

Why a bound at all: kube-controller-manager's node lifecycle controller counts a Lease renewal only
when ``renewTime`` grows (it keeps the Lease with the latest renewTime it saw and times its own
``probeTimestamp`` from there). A carried renewTime ``A`` seconds ahead therefore hides every later
renewal of the node's own kubelet until one of them is past it.

The derivation (all seconds): a carrier writes at time ``t`` (the controller's clock) a renewTime
``R <= beacon + A <= t + A`` (the beacon Lease shows the controller's clock at most one beacon period
old). The kubelet renews every ``I`` (a quarter of its Lease duration: 10 s of 40 s), with its own
clock, which may run up to ``s`` behind the controller's; its first renewal past ``R`` comes at most
``A + I + s`` after ``t``, and until then kube-controller-manager counts nothing. The node goes
NotReady if that exceeds ``G`` (``--node-monitor-grace-period``). So ``A <= G - I - slack`` with
``slack >= s`` plus the watch and write delays; :data:`CLOCK_SLACK_S` (5 s) is that slack. Honest
carriers never need more than the beacon's age: they write renewTimes on the controller's clock as
they last read it (``edgewatch.agent.cloudclock``), and never past the published bound.

Examples: stock ``G = 50`` (Kubernetes 1.32+) or ``40`` with ``I = 10``: ``A = 30`` (the cap) and
``25``; the lab's ``G = 20``: ``A = 5``. A grace below ``I + slack + MIN_AHEAD_S`` (20 s) cannot
be carried safely and is refused.

Which clock: the admission policy bounds carried renewTimes by the control plane's own clock (the
renewTime of kube-controller-manager's leader Lease, :data:`edgewatch.names.CONTROL_PLANE_CLOCK_LEASE`)
plus :data:`CONTROL_PLANE_AHEAD_S`, the ``A`` of the shortest grace carried, so no edgewatch component
needs to be up for carries to be admitted. The controller still publishes its derived ``A`` on the
beacon Lease for agents of earlier releases, which capped their renewTimes by it.

Pure: no clock, no I/O.
"""

from __future__ import annotations

import math
import re

__all__ = ["CLOCK_SLACK_S", "CONTROL_PLANE_AHEAD_S", "FALLBACK_AHEAD_S", "MAX_AHEAD_S", "MIN_AHEAD_S",
           "carry_ahead_s", "format_ahead", "parse_ahead"]

#: The carry-clock admission policy's bound past the control plane's clock (the renewTime of
#: kube-controller-manager's leader Lease, renewed every 2 s), seconds: ``G - I - slack`` for the
#: shortest grace edgewatch carries (20 s, with ``I = 10`` and :data:`CLOCK_SLACK_S`), so it is safe
#: for every supported grace, and independent of the edgewatch controller (it holds while no
#: controller replica runs). ``deploy/15-policy-agent.yaml`` spells the same number.
CONTROL_PLANE_AHEAD_S = 5
#: Slack for a kubelet clock behind the controller's and for watch and write delays, seconds.
CLOCK_SLACK_S = 5.0
#: The admission policy's own cap (deploy/15-policy-agent.yaml), seconds: whatever a controller publishes.
MAX_AHEAD_S = 30
#: The bound the admission policy applies while the beacon Lease names none (a controller older than
#: the policy, during an upgrade), seconds: the beacon period with room for an older agent's estimate.
FALLBACK_AHEAD_S = 10
#: The least bound a grace must leave, seconds: the admission policy's own fixed bound
#: (:data:`CONTROL_PLANE_AHEAD_S`), so a grace the controller accepts is safe for that bound too.
MIN_AHEAD_S = CONTROL_PLANE_AHEAD_S

_AHEAD = re.compile(r"[0-9]{1,2}s", re.ASCII)


def carry_ahead_s(*, node_monitor_grace_s: float, kubelet_renew_interval_s: float,
                  slack_s: float = CLOCK_SLACK_S) -> int:
    """The bound, whole seconds: ``min(MAX_AHEAD_S, floor(G - I - slack))`` (module docstring).

    Args:
        node_monitor_grace_s: kube-controller-manager's ``--node-monitor-grace-period``, seconds.
        kubelet_renew_interval_s: how often the kubelet renews its Lease, seconds (a quarter of
            ``leaseDurationSeconds``: 10 s by default).
        slack_s: kubelet clock lag and delays allowed for, seconds.

    Raises:
        ValueError: a value not finite or not positive, or a grace too short for any safe bound
            (below ``I + slack + MIN_AHEAD_S``).
    """
    for name, value in (("node_monitor_grace_s", node_monitor_grace_s),
                        ("kubelet_renew_interval_s", kubelet_renew_interval_s), ("slack_s", slack_s)):
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
            raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")
    ahead = math.floor(node_monitor_grace_s - kubelet_renew_interval_s - slack_s)
    if ahead < MIN_AHEAD_S:
        raise ValueError(
            f"a node-monitor grace of {node_monitor_grace_s:g} s leaves no safe carry bound: it must be at least "
            f"{kubelet_renew_interval_s + slack_s + MIN_AHEAD_S:g} s (the kubelet's {kubelet_renew_interval_s:g} s "
            f"renew interval + {slack_s:g} s slack + {MIN_AHEAD_S} s)")
    return min(MAX_AHEAD_S, ahead)


def format_ahead(seconds: int) -> str:
    """The bound as the beacon Lease's annotation value: a Go duration in whole seconds (``"25s"``),
    which the admission policy reads with CEL ``duration()``."""
    return f"{int(seconds)}s"


def parse_ahead(text: object) -> int | None:
    """The bound from the annotation value (``"25s"``, one or two digits), capped at
    :data:`MAX_AHEAD_S` as the policy caps it; None if absent or malformed."""
    if not isinstance(text, str) or _AHEAD.fullmatch(text) is None:
        return None
    return min(MAX_AHEAD_S, int(text[:-1]))

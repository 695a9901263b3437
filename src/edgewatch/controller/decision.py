"""The decision table of the edgewatch cloud controller: what happens to an edge node's pods.

Purpose
-------
Stock Kubernetes judges a node only by its heartbeat to the cloud, so a node that is cut off from the
cloud and a node that is dead look the same, and both lose their pods about six minutes after the last
heartbeat. edgewatch combines two views of each node:

* the **cloud view**, from the node's Lease in ``kube-node-lease``:

  - ``OK``: the Lease is fresh and was renewed by the node itself;
  - ``DELEGATED``: the Lease is fresh but carries ``edgewatch.io/delegate-heartbeat: "true"``, i.e. a peer
    (the pool leader) renewed it on the node's behalf because the node cannot reach the cloud (a mark
    whose ``edgewatch.io/delegated-renew-time`` no longer equals ``renewTime`` is stale: the kubelet
    renewed by itself since);
  - ``LOST``: no fresh Lease at all.

* the **edge view**, from the ``EdgeHealthy`` Node condition that the node's peers publish from their
  votes: ``HEALTHY`` (status ``"True"``), ``UNHEALTHY`` (``"False"``), ``UNKNOWN`` (``"Unknown"``, missing,
  or not refreshed for ``edge_view_ttl_s``).

and decides one :class:`NodeState` per node (seed 003 table, extended with the three heartbeat cases of
seed 002)::

    cloud \\ edge         | healthy      | unhealthy | unknown
    ---------------------+--------------+-----------+-------------------
    OK                   | NORMAL       | NORMAL    | NORMAL
    DELEGATED or LOST    | DISCONNECTED | FAILED    | UNKNOWN -> policy

What each state means on the API (we manage exactly two taints and never touch anyone else's):

* ``NORMAL``: no edgewatch taint.
* ``DISCONNECTED``: pods stay (and stay in endpoints); ``edgewatch.io/cloud-unreachable:NoSchedule`` so no
  new pods land on the node.
* ``UNKNOWN`` (no edge evidence: a whole pool cut off, a one-node group, agents down): like
  DISCONNECTED for a bounded *autonomy time*, then FAILED (see :class:`UnknownPolicy`).
* ``FAILED``: the NoSchedule taint plus ``edgewatch.io/failed:NoExecute`` (the stock taint manager evicts
  pods that do not tolerate it), and ``evict_pods`` so the reconciler evicts the pods itself through the
  Eviction API, honouring each pod's own toleration of the failed taint (:func:`pod_eviction_due`).

Two rules on top of the table:

* Confirmation: nothing is enforced (no taint, no eviction, no event) until the outage has lasted
  ``confirm_s``; until then ``effective_state`` is NORMAL while ``state`` already says what is coming.
* A node once FAILED stays FAILED while the edge view is merely unknown (losing the verdict is no
  evidence of life); a HEALTHY verdict (DISCONNECTED) or the node's own heartbeat (NORMAL) ends it.

Level-triggered and restart-safe
--------------------------------
:func:`plan` is a pure function of ``(node snapshot, lease snapshot, now, config)``. Everything it needs
to remember across controller restarts lives in API objects:

* when the outage began: the Lease ``renewTime`` (a Lease last renewed by the node itself went stale at
  ``renewTime + grace``) or, when the Lease cannot tell (delegated heartbeats, no Lease), the node
  annotation ``edgewatch.io/unreachable-since`` (RFC 3339) that the reconciler writes from the plan;
* when the edge evidence vanished: the ``EdgeHealthy`` condition's ``lastTransitionTime`` (status
  ``Unknown``) or ``lastHeartbeatTime + edge_view_ttl_s`` (stale verdict);
* the state last acted on: the node annotation ``edgewatch.io/state`` (absent = normal), from which
  transitions, and so Events, are derived;
* when the failed taint was added: its ``timeAdded``.

The reconciler just makes the API match the plan; planning again on the result gives the same plan and no
new event (idempotence), and a restarted controller computes the same answer.

Units: every time is a float in **seconds** (instants are seconds since the Unix epoch, durations are
seconds). Nothing here reads a clock or does I/O; ``now`` is always passed in.

Limits (known, deliberate)
--------------------------
* Clock skew: ``now`` is the controller's clock, while ``renewTime`` and the condition times are written
  by other machines. Skew shifts every deadline by the skew; future timestamps are treated as fresh.
* If the controller is down for the *whole* of a recovery and a following outage whose Lease is delegated
  (or absent), the old ``unreachable-since`` cannot be told apart from a new one, so the autonomy clock
  may start early. A Lease last renewed by the node itself always exposes a stale annotation.
* This module plans only edgewatch's own taints, annotations, events and evictions. Stock Kubernetes
  still marks a node without a fresh Lease NotReady after node-monitor-grace-period and taints it
  ``node.kubernetes.io/unreachable``; keeping such a node's pods is the job of heartbeat delegation.

Sources
-------
* Seed 003, TKE Edge "distributed node status determination": the cloud x edge table.
* Seed 002, OpenYurt Yurt-Coordinator: heartbeat without mark = healthy and connected; with the
  ``delegate-heartbeat: "true"`` mark = alive but cut off; no heartbeat = failed.
* Kubernetes docs, "Taints and Tolerations" (matching rules, ``tolerationSeconds``), "Nodes" (Lease,
  ``leaseDurationSeconds`` 40 s, renewed every 10 s) and "API-initiated Eviction"; the stock taint
  manager's ``getMinTolerationTime`` (pkg/controller/tainteviction).
* Go ``time.ParseDuration`` / ``Duration.String`` for the duration syntax of
  ``edgewatch.io/autonomy-duration``.
"""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from fractions import Fraction
from types import MappingProxyType

from edgewatch.names import (
    AUTONOMY_DURATION_ANNOTATION,
    CLOUD_UNREACHABLE_TAINT_KEY,
    DELEGATE_HEARTBEAT_ANNOTATION,
    DELEGATED_RENEW_TIME_ANNOTATION,
    DELEGATED_VIA_ANNOTATION,
    DOMAIN,
    EDGE_CONDITION_TYPE,
    FAILED_TAINT_KEY,
)

__all__ = [
    "DELEGATED_RENEW_TIME_ANNOTATION",
    "AUTONOMY_DURATION_ANNOTATION",
    "CLOUD_UNREACHABLE_TAINT",
    "CLOUD_UNREACHABLE_TAINT_KEY",
    "DELEGATE_HEARTBEAT_ANNOTATION",
    "EDGE_CONDITION_TYPE",
    "FAILED_TAINT",
    "FAILED_TAINT_KEY",
    "MANAGED_ANNOTATIONS",
    "MANAGED_TAINT_IDS",
    "MIN_REQUEUE_S",
    "STATE_ANNOTATION",
    "UNREACHABLE_SINCE_ANNOTATION",
    "CloudView",
    "ConditionSnapshot",
    "ControllerConfig",
    "EdgeView",
    "Event",
    "LeaseSnapshot",
    "NodePlan",
    "NodeSnapshot",
    "NodeState",
    "Taint",
    "TaintEffect",
    "Toleration",
    "TolerationOperator",
    "UnknownPolicy",
    "annotation_patch",
    "apply_plan",
    "autonomy_duration",
    "cloud_view",
    "decide_state",
    "edge_view",
    "format_go_duration",
    "format_rfc3339",
    "is_delegated",
    "is_held_by_controller",
    "is_fresh",
    "lease_grace_s",
    "merge_taints",
    "parse_autonomy_duration",
    "parse_go_duration",
    "parse_rfc3339",
    "plan",
    "pod_eviction_due",
    "tolerates",
]

# --------------------------------------------------------------------------------------------------
# Names on the API
# --------------------------------------------------------------------------------------------------

# Shared names (edgewatch.names): DELEGATE_HEARTBEAT_ANNOTATION (Lease, "true" when a peer renewed it
# on the node's behalf), DELEGATED_RENEW_TIME_ANNOTATION (Lease, the renewTime the delegate wrote),
# AUTONOMY_DURATION_ANNOTATION (Node, user-owned, read only), EDGE_CONDITION_TYPE ("EdgeHealthy"),
# CLOUD_UNREACHABLE_TAINT_KEY, FAILED_TAINT_KEY. The two node annotations below are written only here.

#: Node annotation (controller-owned): RFC 3339 start of the current outage; absent while NORMAL.
UNREACHABLE_SINCE_ANNOTATION = f"{DOMAIN}/unreachable-since"
#: Node annotation (controller-owned): the state last acted on (a :class:`NodeState` value); absent = normal.
STATE_ANNOTATION = f"{DOMAIN}/state"
#: The node annotations this module writes (a plan gives a desired value, or None = absent, for each).
MANAGED_ANNOTATIONS: tuple[str, ...] = (UNREACHABLE_SINCE_ANNOTATION, STATE_ANNOTATION)

#: How far (seconds) ``delegated-renew-time`` may be from ``renewTime`` and still name the same
#: renewal: both come from one MicroTime (microseconds); float conversions differ by far less.
_MARK_MATCH_S = 0.001

#: Smallest requeue delay, seconds. A boundary reached exactly at ``now`` whose change takes effect just
#: after it (a Lease is still fresh at ``renewTime + grace`` and stale right after) yields this, so the
#: delay stays positive.
MIN_REQUEUE_S = 0.001

_RFC3339_RE = re.compile(
    r"^(\d{4}-\d{2}-\d{2})[Tt ](\d{2}:\d{2}:\d{2})(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$"
)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


# --------------------------------------------------------------------------------------------------
# Enums
# --------------------------------------------------------------------------------------------------


class CloudView(enum.StrEnum):
    """What the cloud sees of a node, from its Lease."""

    OK = "ok"  #: Lease fresh, renewed by the node itself.
    DELEGATED = "delegated"  #: Lease fresh, renewed by a peer (``delegate-heartbeat: "true"``).
    LOST = "lost"  #: No fresh Lease.


class EdgeView(enum.StrEnum):
    """What the node's peers see of it, from the ``EdgeHealthy`` condition."""

    HEALTHY = "healthy"  #: status "True", fresh.
    UNHEALTHY = "unhealthy"  #: status "False", fresh.
    UNKNOWN = "unknown"  #: status "Unknown" or anything else, condition missing, or stale.


class NodeState(enum.StrEnum):
    """The decided state of a node (also the value of the ``edgewatch.io/state`` annotation)."""

    NORMAL = "normal"
    DISCONNECTED = "disconnected"
    FAILED = "failed"
    UNKNOWN = "unknown"


class UnknownPolicy(enum.StrEnum):
    """What to do with a node the cloud cannot hear and the edge has no verdict on (table: UNKNOWN).

    The policy only sets the *default* autonomy time; a node's ``edgewatch.io/autonomy-duration``
    annotation, being more specific, wins under every policy.
    """

    #: Keep pods for ``ControllerConfig.autonomy_s``, then FAILED.
    AUTONOMY = "autonomy"
    #: Never fail on missing evidence (default autonomy unlimited).
    KEEP = "keep"
    #: Fail as soon as the outage is confirmed (default autonomy 0 s).
    FAIL = "fail"


class TaintEffect(enum.StrEnum):
    """Kubernetes taint effects (equal to the API strings)."""

    NO_SCHEDULE = "NoSchedule"
    PREFER_NO_SCHEDULE = "PreferNoSchedule"
    NO_EXECUTE = "NoExecute"


class TolerationOperator(enum.StrEnum):
    """Kubernetes toleration operators (an empty operator means ``Equal``)."""

    EQUAL = "Equal"
    EXISTS = "Exists"


# --------------------------------------------------------------------------------------------------
# Snapshots (built by the reconciler from API objects) and configuration
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Taint:
    """A Node taint (``spec.taints[]``).

    Kubernetes identifies a taint on a node by ``(key, effect)``; ``time_added`` (seconds since the
    epoch, or None) is the API's ``timeAdded``, written for NoExecute taints.
    """

    key: str
    effect: str
    value: str = ""
    time_added: float | None = None

    @property
    def ident(self) -> tuple[str, str]:
        """``(key, effect)``: the identity of the taint on a node."""
        return (self.key, str(self.effect))


#: The taint of DISCONNECTED, UNKNOWN and FAILED nodes: no new pods.
CLOUD_UNREACHABLE_TAINT = Taint(CLOUD_UNREACHABLE_TAINT_KEY, TaintEffect.NO_SCHEDULE)
#: The taint of FAILED nodes (template: a planned one carries ``time_added``): evict non-tolerating pods.
FAILED_TAINT = Taint(FAILED_TAINT_KEY, TaintEffect.NO_EXECUTE)
#: The ``(key, effect)`` pairs we manage; every other taint is someone else's and is never touched.
MANAGED_TAINT_IDS: frozenset[tuple[str, str]] = frozenset(
    {CLOUD_UNREACHABLE_TAINT.ident, FAILED_TAINT.ident}
)


@dataclass(frozen=True)
class Toleration:
    """A pod toleration (``spec.tolerations[]``).

    ``key`` "" with ``Exists`` matches every taint; ``operator`` "" means ``Equal``; ``effect`` "" matches
    every effect; ``toleration_seconds`` (seconds, or None = forever) only matters for NoExecute taints.
    """

    key: str = ""
    operator: str = TolerationOperator.EQUAL
    value: str = ""
    effect: str = ""
    toleration_seconds: float | None = None


@dataclass(frozen=True)
class ConditionSnapshot:
    """The node's ``EdgeHealthy`` condition.

    ``status``: "True" / "False" / "Unknown". ``last_heartbeat_time`` and ``last_transition_time``: seconds
    since the epoch, or None when absent.
    """

    status: str
    last_heartbeat_time: float | None = None
    last_transition_time: float | None = None
    reason: str = ""
    message: str = ""


def _frozen_mapping(value: Mapping[str, str]) -> Mapping[str, str]:
    return MappingProxyType(dict(value))


@dataclass(frozen=True)
class NodeSnapshot:
    """What :func:`plan` needs of a Node.

    ``labels`` and ``annotations`` are copied into read-only mappings (so a snapshot is not hashable);
    ``taints`` is the node's full ``spec.taints`` in API order; ``edge_condition`` the ``EdgeHealthy``
    condition or None.
    """

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    edge_condition: ConditionSnapshot | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "labels", _frozen_mapping(self.labels))
        object.__setattr__(self, "annotations", _frozen_mapping(self.annotations))
        object.__setattr__(self, "taints", tuple(self.taints))


@dataclass(frozen=True)
class LeaseSnapshot:
    """What :func:`plan` needs of the node's Lease in ``kube-node-lease``.

    ``holder``: ``spec.holderIdentity``. ``renew_time``: ``spec.renewTime`` in seconds since the epoch, or
    None. ``duration_s``: ``spec.leaseDurationSeconds`` in seconds, or None (then
    ``ControllerConfig.default_lease_duration_s``). ``annotations``: the Lease's annotations.
    """

    holder: str | None = None
    renew_time: float | None = None
    duration_s: float | None = None
    annotations: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "annotations", _frozen_mapping(self.annotations))


def _check_seconds(name: str, value: float, *, allow_zero: bool) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number of seconds, got {value!r}")
    if value < 0 or (value == 0 and not allow_zero):
        raise ValueError(f"{name} must be {'>= 0' if allow_zero else '> 0'} seconds, got {value!r}")


@dataclass(frozen=True, kw_only=True)
class ControllerConfig:
    """Cluster-wide settings of the decision (all durations in seconds).

    Raises ValueError on construction if a value is out of range: configuration is operator input and a
    wrong value should stop the controller at start, not silently change its behaviour.
    """

    #: Lease grace when the Lease has no ``leaseDurationSeconds``: 40 s, the kubelet's default lease
    #: duration (it renews every 10 s, so four renewals in a row must be missed before the Lease is stale).
    default_lease_duration_s: float = 40.0
    #: Age of ``lastHeartbeatTime`` after which the ``EdgeHealthy`` verdict counts as unknown: 60 s. Longer
    #: than the Lease grace so a verdict refreshed at heartbeat cadence outlives a few missed
    #: publications (assumes the publisher refreshes it at least every ~20 s), yet short enough that a
    #: verdict from agents that died is trusted for one minute at most.
    edge_view_ttl_s: float = 60.0
    #: How long a DISCONNECTED or UNKNOWN state must persist before we act on it (taint, event): 20 s,
    #: two kubelet renew intervals. The cloud view leaves OK 12 s after the last renewal (see
    #: :func:`lease_grace_s`); one late or missed renewal is followed by the next within 10 s, so it
    #: never taints. FAILED uses ``failed_confirm_s`` instead (the peers' verdict is its confirmation).
    confirm_s: float = 20.0
    #: Slack after the kubelet's expected next renewal (a quarter of leaseDurationSeconds) before the
    #: cloud view counts a heartbeat as missed: 2 s, above the apiserver latency and scheduling jitter
    #: of a renewal, so a punctual kubelet is never overdue (see :func:`lease_grace_s`).
    overdue_slack_s: float = 2.0
    #: How long a FAILED verdict (cloud view not OK and a majority of peers see the node dead) must last
    #: before pods are evicted: 0 s. The peers' verdict is already confirmed — a strict majority, each
    #: behind a failure detector with hysteresis (``edgewatch.core.detector``) — so waiting longer only
    #: keeps a dead node's pods out of service.
    failed_confirm_s: float = 0.0
    #: What to do without edge evidence. Default AUTONOMY: keep pods for ``autonomy_s``, then fail.
    unknown_policy: UnknownPolicy = UnknownPolicy.AUTONOMY
    #: Default autonomy time under AUTONOMY: 300 s, the same as the 300 s ``tolerationSeconds`` that the
    #: DefaultTolerationSeconds admission plugin gives pods for ``node.kubernetes.io/unreachable``. With no
    #: evidence either way we are then never quicker to evict than stock Kubernetes (whose users already
    #: expect pods to move after about five minutes), nor slower; nodes whose outages are known to be
    #: cuts rather than crashes get a longer time (or ``unlimited``) through the per-node annotation.
    autonomy_s: float = 300.0

    def __post_init__(self) -> None:
        _check_seconds("default_lease_duration_s", self.default_lease_duration_s, allow_zero=False)
        _check_seconds("edge_view_ttl_s", self.edge_view_ttl_s, allow_zero=False)
        _check_seconds("confirm_s", self.confirm_s, allow_zero=True)
        _check_seconds("overdue_slack_s", self.overdue_slack_s, allow_zero=True)
        _check_seconds("failed_confirm_s", self.failed_confirm_s, allow_zero=True)
        _check_seconds("autonomy_s", self.autonomy_s, allow_zero=True)
        object.__setattr__(self, "unknown_policy", UnknownPolicy(self.unknown_policy))


@dataclass(frozen=True)
class Event:
    """A Kubernetes Event to record on the Node. ``type`` is "Normal" or "Warning"."""

    reason: str
    message: str
    type: str


@dataclass(frozen=True, kw_only=True)
class NodePlan:
    """The desired end state of one node, as computed by :func:`plan`.

    Fields:

    * ``node``: node name.
    * ``cloud``, ``edge``: the two views; ``table_state``: the table's answer before the unknown policy.
    * ``state``: the decided state (table + unknown policy; FAILED stays FAILED while there is no new
      evidence). ``confirmed``: whether the non-NORMAL state has lasted ``confirm_s``.
      ``effective_state``: what is enforced: ``state`` when confirmed, else NORMAL (so
      ``state=DISCONNECTED, confirmed=False`` means no taint yet).
    * ``taints``: the desired edgewatch taints (only keys in :data:`MANAGED_TAINT_IDS`), in canonical
      order; apply with :func:`merge_taints`, which keeps every other taint.
    * ``evict_pods``: evict the node's pods (those :func:`pod_eviction_due` says are due).
    * ``annotations``: desired value of each of :data:`MANAGED_ANNOTATIONS`, None = absent (a JSON merge
      patch; :func:`annotation_patch` keeps only the changes).
    * ``event``: Event to record because ``effective_state`` differs from the node's recorded state, or
      None.
    * ``unreachable_since``: start of the outage (seconds since the epoch) or None when NORMAL.
      ``confirm_at``: when the outage counts as confirmed. ``fail_at``: when a node without edge
      evidence becomes (or became) FAILED by its autonomy time running out (None = unlimited or the
      edge view is not unknown); a node judged FAILED before stays FAILED even earlier.
      ``autonomy_s``: the autonomy time in force (seconds, None = unlimited).
    * ``requeue_after_s``: seconds until the decision (state, confirmation, taints, eviction,
      annotations, deadlines) would next change with time alone, always > 0; None when nothing is
      pending (only an API change can change it). Informational fields may change earlier without a
      requeue (e.g. the edge view of a NORMAL node going stale). Pods' own eviction times
      (:func:`pod_eviction_due`) are not included.
    * ``explanation``: one human-readable line; ``warnings``: problems found in annotations (a plan is
      still made, never an exception).
    """

    node: str
    cloud: CloudView
    edge: EdgeView
    table_state: NodeState
    state: NodeState
    confirmed: bool
    effective_state: NodeState
    taints: tuple[Taint, ...]
    evict_pods: bool
    annotations: Mapping[str, str | None]
    event: Event | None
    unreachable_since: float | None
    confirm_at: float | None
    fail_at: float | None
    autonomy_s: float | None
    requeue_after_s: float | None
    explanation: str
    warnings: tuple[str, ...] = ()

    @property
    def failed_taint_added_at(self) -> float | None:
        """``time_added`` (seconds since the epoch) of the planned failed taint, or None if not planned."""
        for taint in self.taints:
            if taint.ident == FAILED_TAINT.ident:
                return taint.time_added
        return None


# --------------------------------------------------------------------------------------------------
# Times and durations
# --------------------------------------------------------------------------------------------------


def format_rfc3339(ts: float) -> str:
    """Format ``ts`` (seconds since the epoch) as RFC 3339 UTC, e.g. ``2024-05-01T12:00:00Z``.

    Whole seconds are written without a fraction; otherwise microseconds are written.
    """
    moment = _EPOCH + timedelta(seconds=ts)
    if float(ts).is_integer():
        return moment.strftime("%Y-%m-%dT%H:%M:%SZ")
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_rfc3339(text: str) -> float:
    """Parse an RFC 3339 timestamp (an offset or ``Z`` is required) to seconds since the epoch.

    Raises ValueError on anything else.
    """
    match = _RFC3339_RE.match(text) if isinstance(text, str) else None
    if match is None:
        raise ValueError(f"not an RFC 3339 timestamp: {text!r}")
    date, clock, frac, offset = match.groups()
    frac = (frac or "")[:7]  # datetime accepts at most microseconds
    offset = "+00:00" if offset in ("Z", "z") else offset
    try:
        moment = datetime.fromisoformat(f"{date}T{clock}{frac}{offset}")
        return (moment - _EPOCH).total_seconds()
    except (ValueError, OverflowError) as exc:
        raise ValueError(f"not an RFC 3339 timestamp: {text!r} ({exc})") from None


_GO_UNITS_NS: Mapping[str, int] = MappingProxyType(
    {
        "ns": 1,
        "us": 1_000,
        "\u00b5s": 1_000,  # MICRO SIGN
        "\u03bcs": 1_000,  # GREEK SMALL LETTER MU
        "ms": 1_000_000,
        "s": 1_000_000_000,
        "m": 60 * 1_000_000_000,
        "h": 3600 * 1_000_000_000,
    }
)
_GO_MAX_NS = (1 << 63) - 1


def parse_go_duration(text: str) -> float:
    """Parse a Go ``time.ParseDuration`` string to seconds, rejecting negative durations.

    Grammar: ``[-+]?([0-9]*(\\.[0-9]*)?[a-z]+)+`` with units ns, us (µs, μs), ms, s, m, h, or exactly
    ``0``; e.g. ``"90s"``, ``"10m"``, ``"1h30m"``, ``"1.5h"``, ``"300ms"``. Like Go: no unit-less numbers
    other than ``0``, no spaces, no ``d``; each component's fraction is truncated to whole nanoseconds;
    more than 2**63-1 ns is an overflow. Raises ValueError on bad input or a negative result.
    """
    if not isinstance(text, str):
        raise ValueError(f"invalid duration {text!r}")
    rest = text
    negative = False
    if rest[:1] in ("-", "+"):
        negative = rest[0] == "-"
        rest = rest[1:]
    if rest == "0":
        return 0.0
    if rest == "":
        raise ValueError(f"invalid duration {text!r}")
    total_ns = 0
    while rest:
        i = 0
        while i < len(rest) and "0" <= rest[i] <= "9":
            i += 1
        whole = rest[:i]
        rest = rest[i:]
        frac = ""
        has_point = rest[:1] == "."
        if has_point:
            rest = rest[1:]
            i = 0
            while i < len(rest) and "0" <= rest[i] <= "9":
                i += 1
            frac = rest[:i]
            rest = rest[i:]
        if not whole and not frac:
            raise ValueError(f"invalid duration {text!r}")
        i = 0
        while i < len(rest) and rest[i] != "." and not ("0" <= rest[i] <= "9"):
            i += 1
        if i == 0:
            raise ValueError(f"missing unit in duration {text!r}")
        unit = _GO_UNITS_NS.get(rest[:i])
        if unit is None:
            raise ValueError(f"unknown unit {rest[:i]!r} in duration {text!r}")
        rest = rest[i:]
        value = int(whole or "0") * unit
        if frac:
            value += math.floor(Fraction(int(frac), 10 ** len(frac)) * unit)
        total_ns += value
        if total_ns > _GO_MAX_NS:
            raise ValueError(f"duration {text!r} overflows")
    if negative and total_ns > 0:
        raise ValueError(f"negative duration {text!r}")
    return float(Fraction(total_ns, 1_000_000_000))


def format_go_duration(seconds: float) -> str:
    """Format ``seconds`` like Go's ``Duration.String`` (e.g. ``"1h30m0s"``, ``"1.5s"``, ``"300ms"``).

    The value is rounded to whole nanoseconds first. ``parse_go_duration(format_go_duration(x))`` gives
    back ``x`` rounded to nanoseconds.
    """
    ns = round(Fraction(seconds) * 1_000_000_000)
    sign = "-" if ns < 0 else ""
    ns = abs(ns)
    if ns == 0:
        return "0s"

    def with_fraction(whole: int, frac: int, digits: int) -> str:
        return f"{whole}.{frac:0{digits}d}".rstrip("0") if frac else str(whole)

    if ns < 1_000_000_000:
        if ns < 1_000:
            return f"{sign}{ns}ns"
        if ns < 1_000_000:
            return f"{sign}{with_fraction(*divmod(ns, 1_000), 3)}\u00b5s"
        return f"{sign}{with_fraction(*divmod(ns, 1_000_000), 6)}ms"
    secs, frac_ns = divmod(ns, 1_000_000_000)
    hours, rem = divmod(secs, 3600)
    minutes, secs = divmod(rem, 60)
    sec_text = with_fraction(secs, frac_ns, 9) + "s"
    if hours:
        return f"{sign}{hours}h{minutes}m{sec_text}"
    if minutes:
        return f"{sign}{minutes}m{sec_text}"
    return f"{sign}{sec_text}"


def parse_autonomy_duration(text: str) -> float | None:
    """Parse an ``edgewatch.io/autonomy-duration`` value to seconds; None means unlimited.

    Accepts a Go duration (:func:`parse_go_duration`), ``"0"`` (fail as soon as confirmed) or
    ``"unlimited"`` (any case); surrounding whitespace is ignored. Raises ValueError otherwise.
    """
    if not isinstance(text, str):
        raise ValueError(f"invalid autonomy duration {text!r}")
    stripped = text.strip()
    if stripped.lower() == "unlimited":
        return None
    return parse_go_duration(stripped)


def autonomy_duration(
    *, annotations: Mapping[str, str], config: ControllerConfig
) -> tuple[float | None, str | None]:
    """The autonomy time in force for a node: ``(seconds or None = unlimited, warning or None)``.

    The node's annotation wins over the policy's default; an invalid annotation falls back to the
    default with a warning (never an exception).
    """
    default: float | None
    if config.unknown_policy is UnknownPolicy.KEEP:
        default = None
    elif config.unknown_policy is UnknownPolicy.FAIL:
        default = 0.0
    else:
        default = float(config.autonomy_s)
    raw = annotations.get(AUTONOMY_DURATION_ANNOTATION)
    if raw is None:
        return default, None
    try:
        return parse_autonomy_duration(raw), None
    except ValueError as exc:
        shown = "unlimited" if default is None else f"{default:g} s"
        return default, (
            f"annotation {AUTONOMY_DURATION_ANNOTATION}={raw!r} is invalid ({exc}); "
            f"using the default autonomy time ({shown})"
        )


# --------------------------------------------------------------------------------------------------
# The two views and the table
# --------------------------------------------------------------------------------------------------


def is_fresh(*, timestamp: float | None, now: float, grace_s: float) -> bool:
    """True iff ``now - timestamp <= grace_s`` (all seconds); None is never fresh.

    Fresh *at* the boundary, stale right after it. Future timestamps (clock skew) are fresh.
    """
    if timestamp is None:
        return False
    return now <= timestamp + grace_s


def lease_grace_s(*, lease: LeaseSnapshot | None, config: ControllerConfig) -> float:
    """Seconds a Lease renewal stays fresh for the cloud view: one renew interval plus a slack.

    The kubelet renews its Lease every quarter of ``leaseDurationSeconds`` (10 s of 40 s; kubelet's
    ``renewInterval``), so a renewal more than ``renew interval + overdue_slack_s`` old (12 s by
    default) is *overdue*: the cloud has missed a heartbeat. That, not the Lease's expiry (40 s), is
    when the cloud view stops being OK — one missed heartbeat alone never acts (the DISCONNECTED taint
    waits for ``confirm_s``, FAILED needs the peers' verdict as well), but a dead node is seen 28 s
    sooner. Never longer than the duration itself; the default duration applies when the Lease has
    none.
    """
    duration = float(config.default_lease_duration_s)
    if lease is not None and lease.duration_s is not None and lease.duration_s > 0:
        duration = float(lease.duration_s)
    return min(duration, duration / 4 + config.overdue_slack_s)


def is_delegated(lease: LeaseSnapshot | None) -> bool:
    """True iff the Lease's last renewal was made by a delegate on the node's behalf.

    That is: ``edgewatch.io/delegate-heartbeat`` is exactly ``"true"`` and, when the delegate also wrote
    ``edgewatch.io/delegated-renew-time``, it still names the current ``renewTime`` (within 1 ms). The
    kubelet keeps a Lease's annotations when it renews, so once it renews by itself the mark is stale
    and the renewal is the node's own (see ``edgewatch.agent.delegation``). An unparseable
    ``delegated-renew-time`` cannot vouch for the renewal: not delegated. Without
    ``delegated-renew-time`` the mark alone counts (seed 002's convention).
    """
    if lease is None or lease.annotations.get(DELEGATE_HEARTBEAT_ANNOTATION) != "true":
        return False
    written = lease.annotations.get(DELEGATED_RENEW_TIME_ANNOTATION)
    if written is None:
        return True
    if lease.renew_time is None:
        return False
    try:
        return abs(parse_rfc3339(written) - lease.renew_time) <= _MARK_MATCH_S
    except ValueError:
        return False


def is_held_by_controller(lease: LeaseSnapshot | None) -> bool:
    """True iff the Lease's last renewal was the controller's own autonomy hold
    (``edgewatch.io/delegated-via: autonomy``): it keeps kube-controller-manager from marking the
    node NotReady during the autonomy time, and is no evidence of life."""
    if lease is None or not is_delegated(lease):
        return False
    return lease.annotations.get(DELEGATED_VIA_ANNOTATION) == "autonomy"


def cloud_view(*, lease: LeaseSnapshot | None, now: float, grace_s: float) -> CloudView:
    """The cloud view of a node from its Lease (``now`` and ``grace_s`` in seconds). A renewal by the
    controller's own autonomy hold is not a heartbeat: LOST."""
    if lease is None or not is_fresh(timestamp=lease.renew_time, now=now, grace_s=grace_s):
        return CloudView.LOST
    if is_held_by_controller(lease):
        return CloudView.LOST
    return CloudView.DELEGATED if is_delegated(lease) else CloudView.OK


def _condition_heartbeat(condition: ConditionSnapshot) -> float | None:
    """``lastHeartbeatTime``, falling back to ``lastTransitionTime`` when the former is absent."""
    if condition.last_heartbeat_time is not None:
        return condition.last_heartbeat_time
    return condition.last_transition_time


def edge_view(*, condition: ConditionSnapshot | None, now: float, ttl_s: float) -> EdgeView:
    """The edge view from the ``EdgeHealthy`` condition (``now`` and ``ttl_s`` in seconds).

    A verdict counts while ``now - lastHeartbeatTime <= ttl_s`` (``lastTransitionTime`` if there is no
    heartbeat time; neither = unknown).
    """
    if condition is None or condition.status not in ("True", "False"):
        return EdgeView.UNKNOWN
    if not is_fresh(timestamp=_condition_heartbeat(condition), now=now, grace_s=ttl_s):
        return EdgeView.UNKNOWN
    return EdgeView.HEALTHY if condition.status == "True" else EdgeView.UNHEALTHY


def decide_state(cloud: CloudView, edge: EdgeView) -> NodeState:
    """The seed 003 table: OK -> NORMAL; otherwise healthy -> DISCONNECTED, unhealthy -> FAILED,
    unknown -> UNKNOWN (resolved later by the :class:`UnknownPolicy`)."""
    if cloud is CloudView.OK:
        return NodeState.NORMAL
    if edge is EdgeView.HEALTHY:
        return NodeState.DISCONNECTED
    if edge is EdgeView.UNHEALTHY:
        return NodeState.FAILED
    return NodeState.UNKNOWN


# --------------------------------------------------------------------------------------------------
# Tolerations
# --------------------------------------------------------------------------------------------------


def tolerates(toleration: Toleration, taint: Taint) -> bool:
    """Kubernetes ``Toleration.ToleratesTaint``, exactly.

    A non-empty effect must equal the taint's; a non-empty key must equal the taint's; then operator
    ``Exists`` matches any value, ``Equal`` or "" requires equal values, any other operator never
    matches. (So an empty key with ``Exists`` tolerates everything.)
    """
    if toleration.effect and toleration.effect != taint.effect:
        return False
    if toleration.key and toleration.key != taint.key:
        return False
    if toleration.operator in ("", TolerationOperator.EQUAL):
        return toleration.value == taint.value
    return toleration.operator == TolerationOperator.EXISTS


def pod_eviction_due(
    *,
    tolerations: Iterable[Toleration],
    taint_added_at: float,
    now: float,
    taint: Taint = FAILED_TAINT,
) -> float | None:
    """When a pod on a node with ``taint`` (default: the failed taint) is due for eviction.

    Returns ``now`` to evict now, a later time (seconds since the epoch) when the pod's matching
    toleration runs out (``taint_added_at + tolerationSeconds``), or None for never (a matching
    toleration without ``tolerationSeconds``, or a taint that is not NoExecute). As in the stock taint
    manager, the smallest ``tolerationSeconds`` among matching tolerations counts, tolerations without it
    are ignored unless all lack it, and values <= 0 mean now. The result is never earlier than ``now``.
    """
    if taint.effect != TaintEffect.NO_EXECUTE:
        return None
    matching = [t for t in tolerations if tolerates(t, taint)]
    if not matching:
        return now
    seconds = [t.toleration_seconds for t in matching if t.toleration_seconds is not None]
    if not seconds:
        return None
    shortest = min(seconds)
    if shortest <= 0:
        return now
    return max(taint_added_at + shortest, now)


# --------------------------------------------------------------------------------------------------
# Applying a plan (pure helpers for the reconciler)
# --------------------------------------------------------------------------------------------------


def merge_taints(*, current: Sequence[Taint], managed: Iterable[Taint]) -> tuple[Taint, ...]:
    """The node's full taint list after making our taints equal ``managed``.

    Taints whose ``(key, effect)`` is not in :data:`MANAGED_TAINT_IDS` are kept as they are, in order.
    Our taints that are still wanted stay in place; missing ones are appended in ``managed`` order.
    """
    wanted = list(managed)
    for taint in wanted:
        if taint.ident not in MANAGED_TAINT_IDS:
            raise ValueError(f"not an edgewatch taint: {taint}")
    result: list[Taint] = []
    placed: set[tuple[str, str]] = set()
    for taint in current:
        if taint.ident not in MANAGED_TAINT_IDS:
            result.append(taint)
        elif taint in wanted and taint.ident not in placed:
            result.append(taint)
            placed.add(taint.ident)
    result.extend(t for t in wanted if t.ident not in placed)
    return tuple(result)


def annotation_patch(
    *, current: Mapping[str, str], desired: Mapping[str, str | None]
) -> dict[str, str | None]:
    """The JSON-merge-patch ``metadata.annotations`` body (None = delete) that turns ``current`` into
    ``desired`` for the keys of ``desired``; empty when nothing needs writing."""
    return {key: value for key, value in desired.items() if current.get(key) != value}


def apply_plan(*, node: NodeSnapshot, plan: NodePlan) -> NodeSnapshot:
    """The node snapshot as it is once the reconciler has made the API match ``plan``."""
    annotations = dict(node.annotations)
    for key, value in plan.annotations.items():
        if value is None:
            annotations.pop(key, None)
        else:
            annotations[key] = value
    return replace(
        node,
        taints=merge_taints(current=node.taints, managed=plan.taints),
        annotations=annotations,
    )


# --------------------------------------------------------------------------------------------------
# plan()
# --------------------------------------------------------------------------------------------------


_EVENT_REASONS: Mapping[NodeState, str] = MappingProxyType(
    {
        NodeState.NORMAL: "EdgewatchNormal",
        NodeState.DISCONNECTED: "EdgewatchDisconnected",
        NodeState.UNKNOWN: "EdgewatchUnknown",
        NodeState.FAILED: "EdgewatchFailed",
    }
)


def _recorded_state(annotations: Mapping[str, str]) -> tuple[NodeState, str | None]:
    raw = annotations.get(STATE_ANNOTATION)
    if raw is None:
        return NodeState.NORMAL, None
    try:
        return NodeState(raw), None
    except ValueError:
        return NodeState.NORMAL, (
            f"annotation {STATE_ANNOTATION}={raw!r} is not a known state; treating it as normal"
        )


def _outage_since(
    *, annotations: Mapping[str, str], lease: LeaseSnapshot | None, now: float, grace_s: float
) -> tuple[float, str, bool, str | None]:
    """Start of the current outage: ``(since, annotation text, recorded history trusted, warning)``.

    Whole seconds, rounded up, so the value survives the RFC 3339 round trip through the annotation and
    never makes an outage look longer than it is.
    """
    raw = annotations.get(UNREACHABLE_SINCE_ANNOTATION)
    parsed: float | None = None
    warning: str | None = None
    if raw is not None:
        try:
            parsed = parse_rfc3339(raw)
        except ValueError:
            warning = f"annotation {UNREACHABLE_SINCE_ANNOTATION}={raw!r} is not RFC 3339; re-derived"
        else:
            if parsed > math.ceil(now):
                warning = (
                    f"annotation {UNREACHABLE_SINCE_ANNOTATION}={raw!r} is in the future; re-derived"
                )
                parsed = None
    if lease is not None and lease.renew_time is not None and not is_delegated(lease):
        # The node renewed its own Lease at renew_time, so it was connected until then and the outage
        # began when that renewal expired. An annotation saying otherwise is left from an earlier outage.
        since = float(math.ceil(lease.renew_time + grace_s))
        if parsed is not None and parsed == since:
            return since, raw, True, warning  # type: ignore[return-value]
        return since, format_rfc3339(since), False, warning
    if parsed is not None:
        return parsed, raw, True, warning  # type: ignore[return-value]
    estimate = now
    if lease is not None and lease.renew_time is not None:
        estimate = min(lease.renew_time + grace_s, now)
    since = float(math.ceil(estimate))
    return since, format_rfc3339(since), True, warning


def _edge_unknown_since(
    condition: ConditionSnapshot | None, ttl_s: float
) -> float | None:
    """Since when the edge view has been unknown (seconds since the epoch), or None if not derivable."""
    if condition is None:
        return None
    if condition.status not in ("True", "False"):
        return condition.last_transition_time
    heartbeat = _condition_heartbeat(condition)
    return None if heartbeat is None else heartbeat + ttl_s


def _desired_taints(
    effective: NodeState, current: Sequence[Taint], now: float
) -> tuple[Taint, ...]:
    if effective is NodeState.NORMAL:
        return ()

    def existing(template: Taint, *, need_time: bool) -> Taint | None:
        for taint in current:
            if taint.ident == template.ident and taint.value == template.value:
                if not need_time or taint.time_added is not None:
                    return taint
        return None

    result = [existing(CLOUD_UNREACHABLE_TAINT, need_time=False) or CLOUD_UNREACHABLE_TAINT]
    if effective is NodeState.FAILED:
        failed = existing(FAILED_TAINT, need_time=True)
        # Whole seconds, rounded up: the API's timeAdded has second precision, and rounding up never
        # shortens a pod's tolerationSeconds.
        result.append(failed or replace(FAILED_TAINT, time_added=float(math.ceil(now))))
    return tuple(result)


def _fmt_time(ts: float | None) -> str:
    if ts is None:
        return "never"
    try:
        return format_rfc3339(ts)
    except (ValueError, OverflowError):
        return f"{ts!r} s"


def _fmt_duration(seconds: float | None) -> str:
    return "unlimited" if seconds is None else format_go_duration(seconds)


def plan(
    *,
    node: NodeSnapshot,
    lease: LeaseSnapshot | None,
    now: float,
    config: ControllerConfig,
) -> NodePlan:
    """Decide the desired end state of ``node`` at ``now`` (seconds since the epoch).

    Steps: cloud view and edge view -> table -> unknown policy (autonomy clock from the later of the
    outage start and the moment edge evidence vanished; the node's annotation overrides the default
    time; a node once FAILED stays FAILED while the edge view is unknown) -> confirmation (nothing is
    enforced until the outage is ``confirm_s`` old) -> taints, eviction, annotations, event, requeue.

    Pure: no clock, no I/O, never raises on bad annotations (they produce ``warnings``).
    """
    warnings: list[str] = []
    grace = lease_grace_s(lease=lease, config=config)
    cloud = cloud_view(lease=lease, now=now, grace_s=grace)
    edge = edge_view(condition=node.edge_condition, now=now, ttl_s=config.edge_view_ttl_s)
    table_state = decide_state(cloud, edge)
    autonomy, warning = autonomy_duration(annotations=node.annotations, config=config)
    if warning:
        warnings.append(warning)
    recorded, warning = _recorded_state(node.annotations)
    if warning:
        warnings.append(warning)

    # (time, open): the plan changes at `time` (closed: from `time` on; open: right after `time`).
    pending: list[tuple[float, bool]] = []
    if cloud is not CloudView.LOST:
        assert lease is not None and lease.renew_time is not None
        pending.append((lease.renew_time + grace, True))

    renew_text = _fmt_time(lease.renew_time if lease is not None else None)
    views = (
        f"cloud view {cloud.value} (lease renewed {renew_text}, grace {grace:g} s), "
        f"edge view {edge.value}"
    )

    since: float | None = None
    since_text: str | None = None
    confirm_at: float | None = None
    fail_at: float | None = None
    if table_state is NodeState.NORMAL:
        state = NodeState.NORMAL
        confirmed = True
        detail = "the node renews its own lease"
    else:
        since, since_text, trusted, warning = _outage_since(
            annotations=node.annotations, lease=lease, now=now, grace_s=grace
        )
        if warning:
            warnings.append(warning)
        previous = recorded if trusted else NodeState.NORMAL
        wait_s = config.failed_confirm_s if table_state is NodeState.FAILED else config.confirm_s
        confirm_at = since + wait_s
        # Confirmation is of the outage, not of one state: once this outage has been acted on (a trusted
        # recorded state other than normal), it stays confirmed. Otherwise a FAILED node acted on after
        # failed_confirm_s whose verdict turns unknown or healthy before confirm_s would drop back to
        # NORMAL (taints removed, its sticky FAILED forgotten).
        confirmed = now >= confirm_at or previous is not NodeState.NORMAL
        state = table_state
        if table_state is NodeState.UNKNOWN:
            edge_since = _edge_unknown_since(node.edge_condition, config.edge_view_ttl_s)
            clock_start = since if edge_since is None else max(since, edge_since)
            detail = f"no edge evidence since {_fmt_time(clock_start)}"
            if autonomy is None:
                detail += "; autonomy unlimited"
            else:
                fail_at = clock_start + autonomy
                detail += f"; autonomy {_fmt_duration(autonomy)} ends {_fmt_time(fail_at)}"
            # The last evidence said failed; an unknown edge view is no evidence of life.
            sticky = confirmed and previous is NodeState.FAILED
            if sticky:
                detail += "; judged failed before, so it stays failed"
            if sticky or (fail_at is not None and now >= fail_at):
                state = NodeState.FAILED
            elif fail_at is not None:
                pending.append((fail_at, False))
        elif table_state is NodeState.FAILED:
            detail = "its peers see it unhealthy"
        else:
            detail = "its peers see it healthy; pods kept, no new pods"
        if edge is not EdgeView.UNKNOWN:
            assert node.edge_condition is not None
            heartbeat = _condition_heartbeat(node.edge_condition)
            assert heartbeat is not None
            pending.append((heartbeat + config.edge_view_ttl_s, True))
        if not confirmed:
            pending.append((confirm_at, False))
            detail += f"; not acted on before {_fmt_time(confirm_at)} (confirmation)"
        detail = f"unreachable since {_fmt_time(since)}; {detail}"

    effective = state if confirmed else NodeState.NORMAL
    taints = _desired_taints(effective, node.taints, now)
    annotations = MappingProxyType(
        {
            UNREACHABLE_SINCE_ANNOTATION: since_text,
            STATE_ANNOTATION: None if effective is NodeState.NORMAL else effective.value,
        }
    )
    explanation = f"node {node.name} is {state.value}: {views}; {detail}"
    event = None
    if effective is not recorded:
        event = Event(
            reason=_EVENT_REASONS[effective],
            message=f"{recorded.value} -> {effective.value}: {explanation}",
            type="Normal" if effective is NodeState.NORMAL else "Warning",
        )
    requeue = min((max(t - now, MIN_REQUEUE_S) for t, _ in pending), default=None)
    return NodePlan(
        node=node.name,
        cloud=cloud,
        edge=edge,
        table_state=table_state,
        state=state,
        confirmed=confirmed,
        effective_state=effective,
        taints=taints,
        evict_pods=effective is NodeState.FAILED,
        annotations=annotations,
        event=event,
        unreachable_since=since,
        confirm_at=confirm_at,
        fail_at=fail_at,
        autonomy_s=autonomy,
        requeue_after_s=requeue,
        explanation=explanation,
        warnings=tuple(warnings),
    )

"""The vocabulary of the controller's decision core: the views, states and policies, its inputs (the
snapshots the reconciler builds from API objects and its own observations, and the verdict the
controller verified itself), the configuration, and the plan.

Pure data: no clock, no I/O. Units: every time is a float in **seconds**; instants are seconds since
the Unix epoch on the *controller's* clock (``edgewatch.timefmt.MonotonicClock``), durations are
seconds. A time written by another machine (a Lease's renewTime) never appears here as an instant:
the snapshots carry when the controller *observed* it change (docs/clock-skew.md); the remote text
is kept only as an identity (the delegate mark must equal it).

Data flows one way: API objects and signed statements in, a :class:`NodePlan` out. The ``EdgeHealthy``
Node condition is output only (the reconciler writes the verified verdict there for ``kubectl``); no
input here is ever read back from it.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from edgewatch.carryahead import carry_ahead_s
from edgewatch.core.types import Verdict
from edgewatch.names import CLOUD_UNREACHABLE_TAINT_KEY, DOMAIN, FAILED_TAINT_KEY, OUT_OF_SERVICE_TAINT_KEY

__all__ = [
    "CLOUD_UNREACHABLE_TAINT",
    "FAILED_TAINT",
    "MANAGED_ANNOTATIONS",
    "MANAGED_TAINT_IDS",
    "MIN_REQUEUE_S",
    "OUT_OF_SERVICE_TAINT",
    "STATE_ANNOTATION",
    "UNREACHABLE_SINCE_ANNOTATION",
    "ChallengeSnapshot",
    "CloudView",
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
    "VerifiedVerdict",
    "is_managed_taint",
]

#: Node annotation (controller-owned): RFC 3339 start of the current outage; absent while NORMAL.
UNREACHABLE_SINCE_ANNOTATION = f"{DOMAIN}/unreachable-since"
#: Node annotation (controller-owned): the state last acted on (a :class:`NodeState` value); absent = normal.
STATE_ANNOTATION = f"{DOMAIN}/state"
#: The node annotations the controller writes (a plan gives a desired value, or None = absent, for each).
MANAGED_ANNOTATIONS: tuple[str, ...] = (UNREACHABLE_SINCE_ANNOTATION, STATE_ANNOTATION)

#: Smallest requeue delay, seconds. A boundary reached exactly at ``now`` whose change takes effect just
#: after it (a Lease is still fresh at ``observed + grace`` and stale right after) yields this, so the
#: delay stays positive.
MIN_REQUEUE_S = 0.001


class CloudView(enum.StrEnum):
    """What the cloud sees of a node, from its Lease."""

    OK = "ok"  #: A renewal by the node itself, observed within the grace.
    DELEGATED = "delegated"  #: A renewal by a peer (current delegate mark), observed within the grace.
    LOST = "lost"  #: No fresh renewal (or only the controller's own autonomy hold).


class EdgeView(enum.StrEnum):
    """What the node's peers see of it: its :class:`VerifiedVerdict`, judged for freshness."""

    HEALTHY = "healthy"  #: verdict HEALTHY, counted within ``edge_view_ttl_s``.
    UNHEALTHY = "unhealthy"  #: verdict UNHEALTHY, counted within ``edge_view_ttl_s``.
    UNKNOWN = "unknown"  #: verdict UNKNOWN, no verdict, or one not counted within ``edge_view_ttl_s``.


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


@dataclass(frozen=True)
class Taint:
    """A Node taint (``spec.taints[]``).

    Kubernetes identifies a taint on a node by ``(key, effect)``; ``time_added`` (seconds since the
    epoch, or None) is the API's ``timeAdded``, written for NoExecute taints. edgewatch's own failed
    taint gets it from the controller's clock, and only the controller reads it back.
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
#: Kubernetes' out-of-service taint (KEP-2268) as edgewatch sets it, opt-in, on a node FAILED on verified
#: evidence (docs/out-of-service.md): kube-controller-manager force-deletes the node's terminating pods
#: and detaches their volumes. Its value marks it as ours: the same key with another value is an
#: operator's (the manual procedure of the Kubernetes docs) and never touched.
OUT_OF_SERVICE_TAINT = Taint(OUT_OF_SERVICE_TAINT_KEY, TaintEffect.NO_EXECUTE, "edgewatch")
#: The ``(key, effect)`` pairs we manage; every other taint is someone else's and is never touched.
#: (For the out-of-service pair only the value ``edgewatch`` is ours: :func:`is_managed_taint`.)
MANAGED_TAINT_IDS: frozenset[tuple[str, str]] = frozenset(
    {CLOUD_UNREACHABLE_TAINT.ident, FAILED_TAINT.ident, OUT_OF_SERVICE_TAINT.ident})


def is_managed_taint(taint: Taint) -> bool:
    """True iff ``taint`` (on a node) is edgewatch's: its ``(key, effect)`` is in
    :data:`MANAGED_TAINT_IDS` and, for the shared out-of-service key, its value is ours."""
    if taint.ident not in MANAGED_TAINT_IDS:
        return False
    return taint.ident != OUT_OF_SERVICE_TAINT.ident or taint.value == OUT_OF_SERVICE_TAINT.value


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


def _check_instant(name: str, value: float | None) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)
                              or not math.isfinite(value)):
        raise ValueError(f"{name} must be None or a finite number of seconds, got {value!r}")


@dataclass(frozen=True, kw_only=True)
class ChallengeSnapshot:
    """A challenge the controller put to a node through its beacon (``edgewatch.controller.challenges``),
    as :func:`edgewatch.controller.decision.plan` takes it. Times on the controller's clock, seconds.

    * ``issued_at``: when the controller recorded the challenging beacon (before writing it); a
      statement naming it, or a later beacon, was signed after this moment.
    * ``deadline``: when an unanswered challenge makes the node's cloud view LOST: the beacon's
      write returned plus ``ControllerConfig.challenge_timeout_s``.
    * ``answered``: the controller verified the node's own statement naming that beacon or a later
      one (its agent is alive after the challenge, whatever its kubelet says).
    * ``since``: since when its peers accused it (their dead votes or suspicions,
      ``VerifiedEdge.accused``): the edge verdict while the challenge is in force
      (:func:`edgewatch.controller.views.challenged_verdict`). None: not known.
    """

    issued_at: float
    deadline: float
    answered: bool = False
    since: float | None = None


@dataclass(frozen=True, kw_only=True)
class VerifiedVerdict:
    """A node's edge verdict as the controller verified it itself: the strict majority of its group's
    signed statements, each naming a beacon the controller issued (``edgewatch.controller.verified``).
    The decision core's only edge input; never read from the ``EdgeHealthy`` condition.

    * ``verdict``: HEALTHY (a majority sees the node alive), UNHEALTHY (a majority sees it dead) or
      UNKNOWN (no majority either way). Anything else is refused (ValueError).
    * ``since``: when the controller first counted this ``verdict`` (controller clock); a new
      verdict starts a new ``since``, new vote counts behind the same verdict do not. None: not known.
    * ``counted_at``: when the controller last counted it (its latest recount, controller clock): the
      verdict's freshness. A HEALTHY / UNHEALTHY verdict counts while ``now - counted_at <=
      ControllerConfig.edge_view_ttl_s``; None: never counted, so it never counts.

    After a controller start the first count is "just now" for both (docs/clock-skew.md).
    """

    verdict: Verdict
    since: float | None = None
    counted_at: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "verdict", Verdict(self.verdict))
        _check_instant("since", self.since)
        _check_instant("counted_at", self.counted_at)


def _frozen_mapping(value: Mapping[str, str]) -> Mapping[str, str]:
    return MappingProxyType(dict(value))


@dataclass(frozen=True, kw_only=True)
class NodeSnapshot:
    """What :func:`edgewatch.controller.decision.plan` needs of a Node.

    ``labels`` and ``annotations`` are copied into read-only mappings; ``taints`` is the node's full
    ``spec.taints`` in API order. Nothing of ``status`` (the ``EdgeHealthy`` condition is the
    controller's output, never its input).
    """

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "labels", _frozen_mapping(self.labels))
        object.__setattr__(self, "annotations", _frozen_mapping(self.annotations))
        object.__setattr__(self, "taints", tuple(self.taints))


@dataclass(frozen=True, kw_only=True)
class LeaseSnapshot:
    """What :func:`edgewatch.controller.decision.plan` needs of the node's Lease in ``kube-node-lease``.

    * ``renew_time``: ``spec.renewTime`` as MicroTime text, or None. Written with the writer's clock
      (the kubelet's, a delegate's): an identity of the renewal, never compared with a clock; the
      delegate mark is current only while ``delegated-renew-time`` equals it.
    * ``observed_at``: when the controller first saw this ``renew_time`` (controller clock); None
      iff ``renew_time`` is None.
    * ``first_sight``: ``observed_at`` is the controller's first look at the Lease since it started,
      not a renewal it watched happen; the renewal may be much older (docs/clock-skew.md).
    * ``duration_s``: ``spec.leaseDurationSeconds``, or None (then
      ``ControllerConfig.default_lease_duration_s``).
    * ``annotations``: the Lease's annotations (the delegate mark). ``holder``: ``spec.holderIdentity``.
    * ``delegation_proven``: the node's own recent signed statement (verified by the controller,
      ``edgewatch.controller.verified``) proves it alive. A delegate mark without it is anyone's
      claim: the renewal then counts as no heartbeat at all (LOST), never as the node's own.
    * ``own_observed_at``: when the controller saw the node's *own* latest renewal happen (controller
      clock), kept while carried renewals follow it; None if it saw none happen (only a first
      sight, or none at all). A node that reached the cloud itself that recently is not cut off,
      whatever its peers carry for it (``edgewatch.controller.views.cloud_view``).
    * ``carried``: how the controller first saw this renewal: True when the delegate mark named it
      then (a carried renewal, or the controller's own hold), False when it did not (the kubelet's
      own). Never changed for the same renewal, whatever its annotations say later: a mark removed
      or spoiled after a carry does not turn it into the node's own heartbeat. None: judge from the
      current mark (a snapshot built without the controller's observations).
    """

    renew_time: str | None = None
    observed_at: float | None = None
    first_sight: bool = False
    duration_s: float | None = None
    annotations: Mapping[str, str] = field(default_factory=dict)
    holder: str | None = None
    delegation_proven: bool = True
    own_observed_at: float | None = None
    carried: bool | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "annotations", _frozen_mapping(self.annotations))
        if (self.renew_time is None) != (self.observed_at is None):
            raise ValueError("a Lease snapshot has both a renew_time and its observed_at, or neither")


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
    #: How long a HEALTHY / UNHEALTHY verified verdict counts after the controller last counted it
    #: (``VerifiedVerdict.counted_at``): 60 s. The controller recounts every second
    #: (``edgewatch.controller.evidence``) and each statement behind a verdict expires on its own
    #: after the evidence TTL (30 s), so this bounds only how long a verdict outlives a stalled count:
    #: a minute at most.
    edge_view_ttl_s: float = 60.0
    #: How long a DISCONNECTED or UNKNOWN state must persist before we act on it (taint, event): 20 s,
    #: two kubelet renew intervals. The cloud view leaves OK 12 s after the last observed renewal (see
    #: ``lease_grace_s``); one late or missed renewal is followed by the next within 10 s, so it never
    #: taints. FAILED uses ``failed_confirm_s`` instead (the peers' verdict is its confirmation).
    confirm_s: float = 20.0
    #: Slack after the kubelet's expected next renewal (a quarter of leaseDurationSeconds) before the
    #: cloud view counts a heartbeat as missed: 2 s, above the apiserver latency, watch delivery and
    #: scheduling jitter of a renewal, so a punctual kubelet is never overdue.
    overdue_slack_s: float = 2.0
    #: How long a FAILED verdict (cloud view not OK and a majority of peers see the node dead) must last
    #: before pods are evicted: 0 s. The peers' verdict is already confirmed — a strict majority, each
    #: behind a failure detector with hysteresis (``edgewatch.core.detector``) — so waiting longer only
    #: keeps a dead node's pods out of service.
    failed_confirm_s: float = 0.0
    #: How long a node challenged through the beacon has to answer, seconds: 1.5 s. When a majority of its
    #: peers see a node dead or suspect it (``edgewatch.core.suspicion``) while its own Lease renewal is still fresh (the kubelet renews every 10 s,
    #: so a dead node's renewal stays fresh up to 12 s), the controller names it on a new beacon; a live
    #: agent answers with a statement naming that beacon over its own cloud link within a few hundred
    #: milliseconds (a watch event, one signature, one Lease write). Unanswered by then, the node's
    #: cloud view is LOST without waiting for the renewal to go overdue
    #: (``edgewatch.controller.challenges``). 1.5 s leaves a live agent several tries (the lab answers in
    #: about 20 ms; each retry of a lost TCP segment costs 0.2 s or more) while a kill is failed within
    #: 5 s of its death (1-3 s to the suspicion). 0 turns challenges off.
    challenge_timeout_s: float = 1.5
    #: What to do without edge evidence. Default AUTONOMY: keep pods for ``autonomy_s``, then fail.
    unknown_policy: UnknownPolicy = UnknownPolicy.AUTONOMY
    #: Default autonomy time under AUTONOMY: 300 s, the same as the 300 s ``tolerationSeconds`` that the
    #: DefaultTolerationSeconds admission plugin gives pods for ``node.kubernetes.io/unreachable``. With no
    #: evidence either way we are then never quicker to evict than stock Kubernetes (whose users already
    #: expect pods to move after about five minutes), nor slower; nodes whose outages are known to be
    #: cuts rather than crashes get a longer time (or ``unlimited``) through the per-node annotation.
    autonomy_s: float = 300.0
    #: The edgewatch image the controller runs pool coordinators with (``poolCoordinators: {<pool>:
    #: auto}``, ``edgewatch.controller.coordinators``); it carries etcd. The controller's manifest passes
    #: its own image (``--coordinator-image``, env ``EDGEWATCH_IMAGE``). Empty: no coordinator
    #: Deployment is written (the controller logs why).
    coordinator_image: str = ""
    #: kube-controller-manager's ``--node-monitor-grace-period`` in this cluster: 40 s, the stock
    #: default before Kubernetes 1.32 (50 s since), the shorter and so the safer guess. At least 20 s:
    #: the admission policy's fixed carry bound is safe only from there (``edgewatch.carryahead``); the
    #: bound derived from it (``carry_ahead_s``) is published on the beacon for agents of earlier releases.
    node_monitor_grace_s: float = 40.0

    @property
    def carry_ahead_s(self) -> int:
        """How far past the beacon's clock an earlier release's agent caps its carried renewTimes,
        whole seconds (``edgewatch.carryahead``: the kubelet renews every quarter of
        ``default_lease_duration_s``)."""
        return carry_ahead_s(node_monitor_grace_s=self.node_monitor_grace_s,
                             kubelet_renew_interval_s=self.default_lease_duration_s / 4)

    def __post_init__(self) -> None:
        _check_seconds("node_monitor_grace_s", self.node_monitor_grace_s, allow_zero=False)
        _check_seconds("default_lease_duration_s", self.default_lease_duration_s, allow_zero=False)
        _ = self.carry_ahead_s  # a grace too short to carry safely stops the controller at start
        _check_seconds("edge_view_ttl_s", self.edge_view_ttl_s, allow_zero=False)
        _check_seconds("confirm_s", self.confirm_s, allow_zero=True)
        _check_seconds("overdue_slack_s", self.overdue_slack_s, allow_zero=True)
        _check_seconds("failed_confirm_s", self.failed_confirm_s, allow_zero=True)
        _check_seconds("challenge_timeout_s", self.challenge_timeout_s, allow_zero=True)
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
    """The desired end state of one node, as computed by ``plan``.

    Fields:

    * ``node``: node name.
    * ``cloud``, ``edge``: the two views; ``table_state``: the table's answer before the unknown policy.
    * ``state``: the decided state (table + unknown policy; FAILED stays FAILED while there is no new
      evidence). ``confirmed``: whether the non-NORMAL state has lasted ``confirm_s``.
      ``effective_state``: what is enforced: ``state`` when confirmed, else NORMAL (so
      ``state=DISCONNECTED, confirmed=False`` means no taint yet).
    * ``taints``: the desired edgewatch taints (only keys in :data:`MANAGED_TAINT_IDS`), in canonical
      order; apply with ``merge_taints``, which keeps every other taint.
    * ``evict_pods``: evict the node's pods (those ``pod_eviction_due`` says are due).
    * ``annotations``: desired value of each of :data:`MANAGED_ANNOTATIONS`, None = absent (a JSON merge
      patch; ``annotation_patch`` keeps only the changes).
    * ``event``: Event to record because ``effective_state`` differs from the node's recorded state, or
      None.
    * ``unreachable_since``: start of the outage (controller clock) or None when NORMAL.
      ``confirm_at``: when the outage counts as confirmed. ``fail_at``: when a node without edge
      evidence becomes (or became) FAILED by its autonomy time running out (None = unlimited or the
      edge view is not unknown); a node judged FAILED before stays FAILED even earlier.
      ``autonomy_s``: the autonomy time in force (seconds, None = unlimited).
    * ``requeue_after_s``: seconds until the decision (state, confirmation, taints, eviction,
      annotations, deadlines) would next change with time alone, always > 0; None when nothing is
      pending (only an API change can change it). Pods' own eviction times are not included.
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

"""Per-peer failure detector with hysteresis: turns a stream of evidence about
one peer (probe results, fresh heartbeats) into ALIVE / SUSPECT / DEAD.

What it is for
    Every edgewatch agent keeps one detector per peer of its group. Its output
    is the agent's *vote* about that peer (:mod:`edgewatch.core.quorum`):
    ALIVE peers are voted alive, DEAD peers dead, SUSPECT peers not at all
    (the observer abstains). The vote of the whole group, not any single
    detector, decides what happens to a node.

The rule (defaults in brackets, all times in seconds)
    Evidence is recorded with :meth:`PeerDetector.record`:
    ``ok=True`` for a successful direct probe or the arrival of a *new*
    signed heartbeat from the peer, ``ok=False`` for a failed or timed-out
    probe. *Silence* is the time since the last success (or, before the
    first success, since the detector was created).

    * Initial state: SUSPECT ("never heard" — neither vote alive nor dead).
    * -> ALIVE on a success, unless the peer is recovering from DEAD (below).
    * ALIVE -> SUSPECT after ``suspect_after_failures`` [2] consecutive
      failures, or when silence exceeds ``suspect_timeout_s`` [3.0 s].
    * -> DEAD when silence exceeds ``dead_timeout_s`` [5.0 s] **and** at
      least :func:`required_failures` consecutive failures were recorded:
      ``dead_after_failures`` [3] on a clean link, more on a lossy one
      (below). Both are required: absence of evidence (an observer that was
      paused, overloaded, or did not probe) only ever makes a peer SUSPECT,
      never DEAD (Lifeguard's "local health awareness": a sick observer must
      not accuse healthy peers). The adapter must therefore record one
      failure for every probe period in which it looked for evidence and got
      none.
    * DEAD is latched: after it, the first success makes the peer SUSPECT,
      and only ``recover_successes`` [2] consecutive successes make it ALIVE
      again; a failure during recovery makes it DEAD again at once.

    Loss awareness (an accrual detector for periodic evidence): the
    detector keeps ``repeat``, the estimated probability that a failure is
    followed by another failure before any success, learnt from this
    peer's own history: each run of ``f`` failures that a success ends adds
    ``f - 1`` repeats and one end, into two exponentially weighted means
    over about ``loss_memory`` [10] and ten times as many such transitions
    (``repeat`` is the larger: the short one learns a link that turns lossy
    within a few runs, the long one keeps the estimate from dipping on a
    lucky streak). A run still under way is not folded in (it is what is
    being judged: a dead peer's failures must not slow its own detection),
    nor one that reached DEAD or ended with a restarted peer (an outage is
    not loss); a success that follows a success pulls both means towards 0
    with a small weight (:data:`HEAL_FACTOR`: a link that healed is judged
    by the fixed count again within about ten minutes). The failures required for DEAD are the fewest
    ``k`` with ``repeat ** (k - 1) <= max_false_dead`` [1e-6], at least
    ``dead_after_failures`` and at most ``max_dead_failures`` [30]. Why
    that bounds false verdicts: a run that has started goes on ``k - 1``
    more times with probability ``repeat ** (k - 1)`` when each failure is
    followed by another with probability ``repeat``, whatever makes
    failures come in bursts (a TCP connection's retransmissions, a radio's
    fades), as long as the estimate is current: at most ``max_false_dead``
    per run, and at most one run starts per probe period. At 30 % loss on
    both ends of every message (half of all messages lost) that is about 16
    failures in a row instead of 3; on a clean link ``repeat`` is 0 and the
    rule is the fixed one. Limits: the estimate starts at 0 (a detector
    created on an already lossy link accuses as fast as on a clean one
    until a few failure runs have ended); past a ``repeat`` of
    ``max_false_dead ** (1 / (max_dead_failures - 1))`` (0.62 by default)
    the bound is ``repeat ** (max_dead_failures - 1)``, not
    ``max_false_dead``; and a link whose failures repeat more, whether by
    nature or by someone dropping packets on it, slows that peer's
    detection (up to ``max_dead_failures`` periods) but never speeds it.

    Consequences: a single lost packet never makes a peer SUSPECT (with
    ``suspect_after_failures >= 2``) and never makes it DEAD (enforced:
    ``dead_after_failures >= 2``). No sequence without a run of
    ``dead_after_failures`` consecutive failures ever reaches DEAD. With a
    probe every ``p`` seconds a peer that stops answering is SUSPECT after
    ``max(suspect_after_failures * p, suspect_timeout_s)`` and DEAD after
    about ``max(k * p, dead_timeout_s) + p`` seconds, ``k`` the failures
    required at its last success (``dead_after_failures`` on a clean link,
    at most ``max_dead_failures``).

Limits
    Time is passed in (``now``, monotonic seconds; never a wall clock, so a
    clock step cannot kill a peer). A ``now`` earlier than the latest one
    seen is treated as equal to it: completions of concurrent probes may
    arrive out of order and must not rewind the detector. The detector does
    not probe, schedule or remember peers; that is the agent's job.
    Threshold-based (like SWIM), not accrual (phi): simple to reason about
    and to test, at the cost of adapting less to jittery links.

Sources
    TKE Edge (distributed node status determination); Hayashibara
    et al. 2004, "The phi accrual failure detector" (suspicion from the
    observed distribution of this peer's evidence, not a fixed count); SWIM
    (Das, Gupta, Motivala 2002) and Lifeguard (Dadgar et al. 2018) as
    implemented by hashicorp/memberlist, whose suspicion timeout scales with
    ``log10(n)`` (:func:`scaled_timeout`); van Renesse, Minsky, Hayden 1998,
    "A gossip-style failure detection service" (a heartbeat that has not
    increased for T_fail means failed); Rapid (Suresh et al. 2018) for
    hysteresis/stability over single observations.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from edgewatch.core.types import Health

__all__ = [
    "HEAL_FACTOR",
    "MAX_TRANSITIONS",
    "LONG_MEMORY_FACTOR",
    "DetectorConfig",
    "DetectorState",
    "PeerDetector",
    "advance",
    "evaluate",
    "initial_state",
    "on_failure",
    "on_success",
    "record",
    "required_failures",
    "scaled_timeout",
    "silence_s",
]


def _check_count(name: str, value: object, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")


def _check_seconds(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a number of seconds, got {type(value).__name__}")
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be finite and > 0 seconds, got {value}")
    return float(value)


def _check_now(now: object) -> float:
    if isinstance(now, bool) or not isinstance(now, (int, float)) or not math.isfinite(now):
        raise ValueError(f"now must be a finite number of seconds, got {now!r}")
    return float(now)


def scaled_timeout(*, base_s: float, group_size: int) -> float:
    """Scale a timeout for a group of ``group_size`` nodes, Lifeguard-style.

    Returns ``base_s * max(1, log10(group_size))`` seconds: unchanged up to 10
    nodes, x2 at 100, x3 at 1,000. In a bigger group a peer's evidence
    arrives through more hops and more observers can be wrong at once, so
    waiting longer keeps the false-positive rate flat. Source:
    hashicorp/memberlist ``suspicionTimeout = SuspicionMult *
    max(1, log10(max(1, n))) * ProbeInterval``.

    Raises:
        ValueError: ``base_s`` is not finite and >= 0, or ``group_size`` is
            not an int >= 1.
    """
    if isinstance(base_s, bool) or not isinstance(base_s, (int, float)):
        raise ValueError(f"base_s must be a number of seconds, got {type(base_s).__name__}")
    if not math.isfinite(base_s) or base_s < 0:
        raise ValueError(f"base_s must be finite and >= 0 seconds, got {base_s}")
    _check_count("group_size", group_size, 1)
    return float(base_s) * max(1.0, math.log10(group_size))


@dataclass(frozen=True, kw_only=True)
class DetectorConfig:
    """Thresholds of the failure detector. All durations in seconds.

    Raises:
        ValueError: on construction, if a count is not an int within range,
            a duration is not finite and > 0, ``dead_after_failures <
            suspect_after_failures``, or ``dead_timeout_s <
            suspect_timeout_s``.
    """

    suspect_after_failures: int = 2
    """Consecutive failures that make an ALIVE peer SUSPECT. Default 2: one
    lost probe on a LAN is common and must not even cause suspicion; two in a
    row are worth abstaining over. Must be >= 1."""

    suspect_timeout_s: float = 3.0
    """Seconds without a success after which a peer is SUSPECT even if no
    failure was recorded (the observer may not have probed). Default 3.0 s:
    three 1 s probe periods, the same order as memberlist's default
    detection (probe 1 s + suspicion) at small n."""

    dead_after_failures: int = 3
    """Consecutive failures required (together with ``dead_timeout_s``)
    before a peer is DEAD. Default 3: with independent 5 % loss a healthy
    peer loses three probes in a row with probability 1.25e-4 per window,
    and the timeout must also expire. Must be >= 2, so one lost packet can
    never kill a peer, and >= ``suspect_after_failures``."""

    dead_timeout_s: float = 5.0
    """Seconds without a success required (together with
    ``dead_after_failures``) before a peer is DEAD. Default 5.0 s: dead nodes
    are detected about ten times faster than the 50 s
    node-monitor-grace-period, and in line with Akka's phi accrual detector
    (~5.5 s). Must be >= ``suspect_timeout_s``."""

    max_false_dead: float | None = 1e-6
    """Probability, per run of failures, that a live peer whose failures
    repeat at the estimated rate is judged DEAD (the loss awareness of the
    module docstring). Default 1e-6: at most one run starts
    per probe period, so a peer checked once a second by 6 observers meets
    at most about 0.5 false DEAD claims a day at any loss below the cap
    (far fewer in practice: runs are rarer than periods), and one claim
    alone fails nobody (the vote counts several observers). None turns loss
    awareness off: DEAD after exactly ``dead_after_failures``. Must be in
    (0, 1)."""

    loss_memory: int = 10
    """Transitions from a failure over which the short ``repeat`` mean is
    taken (the weight of one is ``1 / loss_memory``; the long mean's is ten
    times smaller). Default 10: a link that turns lossy is learnt within a
    few failure runs; the long mean (about 100 transitions) keeps the
    estimate steady. Must be >= 1."""

    max_dead_failures: int = 30
    """Most consecutive failures ever required for DEAD, whatever the loss.
    Default 30 (30 s at one probe a second, the statement lifetime): a peer
    that answers nothing for that long is treated as dead even on a link
    that loses most messages. Must be >= ``dead_after_failures``."""

    recover_successes: int = 2
    """Consecutive successes needed before a DEAD peer is ALIVE again
    (hysteresis; the first success makes it SUSPECT). Default 2: a flapping
    node (up one period, down the next) never oscillates between dead and
    alive votes, which would evict and re-admit its pods. Must be >= 1."""

    def __post_init__(self) -> None:
        _check_count("suspect_after_failures", self.suspect_after_failures, 1)
        _check_count("dead_after_failures", self.dead_after_failures, 2)
        _check_count("recover_successes", self.recover_successes, 1)
        suspect = _check_seconds("suspect_timeout_s", self.suspect_timeout_s)
        dead = _check_seconds("dead_timeout_s", self.dead_timeout_s)
        if self.dead_after_failures < self.suspect_after_failures:
            raise ValueError(
                f"dead_after_failures ({self.dead_after_failures}) must be >= "
                f"suspect_after_failures ({self.suspect_after_failures})"
            )
        if dead < suspect:
            raise ValueError(
                f"dead_timeout_s ({dead} s) must be >= suspect_timeout_s ({suspect} s)"
            )
        _check_count("loss_memory", self.loss_memory, 1)
        _check_count("max_dead_failures", self.max_dead_failures, self.dead_after_failures)
        bound = self.max_false_dead
        if bound is not None and (
            isinstance(bound, bool) or not isinstance(bound, (int, float)) or not 0.0 < bound < 1.0
        ):
            raise ValueError(f"max_false_dead must be None or a probability in (0, 1), got {bound!r}")

    def scaled_for(self, *, group_size: int) -> DetectorConfig:
        """Return a copy with both timeouts scaled by :func:`scaled_timeout`.

        Counts are unchanged. Raises ValueError if ``group_size < 1``.
        """
        return dataclasses.replace(
            self,
            suspect_timeout_s=scaled_timeout(base_s=self.suspect_timeout_s, group_size=group_size),
            dead_timeout_s=scaled_timeout(base_s=self.dead_timeout_s, group_size=group_size),
        )


@dataclass(frozen=True, kw_only=True)
class DetectorState:
    """Everything the detector remembers about one peer (immutable).

    Times are monotonic seconds on the caller's clock.
    """

    started_at: float
    """When observation of this peer began; the silence reference before the
    first success."""
    last_event_at: float
    """Latest ``now`` applied by an event; earlier times are clamped to it."""
    last_success_at: float | None
    """Time of the latest success, ``None`` if never heard."""
    consecutive_failures: int
    """Failures since the latest success."""
    consecutive_successes: int
    """Successes since the latest failure."""
    dead: bool
    """DEAD was reached and recovery (``recover_successes`` successes in a
    row) has not completed."""
    repeat_short: float = 0.0
    """How often a failure of this peer was followed by another before a
    success (0..1), an exponentially weighted mean over about
    ``loss_memory`` such transitions, as of the latest success (the current
    run of failures is not in it); not yet corrected for its start at 0."""
    repeat_long: float = 0.0
    """The same over about ten times as many transitions."""
    transitions: int = 0
    """Transitions from a failure folded into the means so far (capped at
    :data:`MAX_TRANSITIONS`): what corrects their start at 0."""
    repeat: float = 0.0
    """The estimate the DEAD rule uses: the larger of the two means, each
    divided by ``1 - (1 - weight) ** max(transitions, 2 * loss_memory)``
    (the bias correction of an exponentially weighted mean that starts at
    0, so the long mean is about the plain average of what was seen while
    it has seen little; never fewer than 20 transitions by default, so a
    few do not speak for a link)."""


def initial_state(*, now: float) -> DetectorState:
    """State of a peer that has never been heard from, observed from ``now``.

    Raises:
        ValueError: ``now`` is not a finite number of seconds.
    """
    t = _check_now(now)
    return DetectorState(
        started_at=t,
        last_event_at=t,
        last_success_at=None,
        consecutive_failures=0,
        consecutive_successes=0,
        dead=False,
    )


def _effective_now(state: DetectorState, now: float) -> float:
    return max(_check_now(now), state.last_event_at)


def silence_s(state: DetectorState, *, now: float) -> float:
    """Seconds since the latest success (or since ``started_at`` if none).

    Raises ValueError if ``now`` is not finite.
    """
    reference = state.started_at if state.last_success_at is None else state.last_success_at
    return _effective_now(state, now) - reference


LONG_MEMORY_FACTOR = 10
"""The long ``repeat`` mean weighs a transition ``1 / (LONG_MEMORY_FACTOR * loss_memory)``."""
MAX_TRANSITIONS = 100_000
"""Cap of :attr:`DetectorState.transitions` (past it the bias correction is 1 to the last bit)."""
HEAL_FACTOR = 20
"""A success after a success pulls both ``repeat`` means towards 0 with weight
``1 / (HEAL_FACTOR * loss_memory)`` (1/200 by default): a link that healed is judged by the
fixed count again after about 1,300 successes (0.6 to 0.001; some ten minutes), and on a link that
stays lossy the estimate reads a few per cent low (at 30 % loss in the simulator about 4 %, which
the bound's margin absorbs: ``k`` moves by at most one)."""


def required_failures(*, config: DetectorConfig, repeat: float) -> int:
    """Consecutive failures needed for DEAD when a failure of the peer is followed by another with
    probability ``repeat`` (0..1): the fewest ``k`` with ``repeat ** (k - 1) <=
    config.max_false_dead``, clamped to ``[dead_after_failures, max_dead_failures]`` (see the
    module docstring for why this bounds false verdicts). ``dead_after_failures`` when loss
    awareness is off or ``repeat`` is 0.

    Raises:
        ValueError: ``repeat`` is not a number in [0, 1].
    """
    if isinstance(repeat, bool) or not isinstance(repeat, (int, float)) or not 0.0 <= repeat <= 1.0:
        raise ValueError(f"repeat must be a probability in [0, 1], got {repeat!r}")
    floor, cap = config.dead_after_failures, config.max_dead_failures
    if config.max_false_dead is None or repeat == 0.0:
        return floor
    if repeat >= 1.0:
        return cap
    more = math.ceil(math.log(config.max_false_dead * (1 + 1e-9)) / math.log(repeat))  # within float rounding
    return min(cap, max(floor, 1 + more))


def _fold(repeat: float, *, repeats: int, ends: int, memory: int) -> float:
    """The ``repeat`` mean after ``repeats`` transitions that repeated a failure and then ``ends``
    that ended a run, each weighted ``1 / memory`` (closed form of the exponentially weighted mean)."""
    keep = 1.0 - 1.0 / memory
    return (1.0 - keep**repeats * (1.0 - repeat)) * keep**ends


def _corrected(mean: float, *, memory: int, seen: int, least: int) -> float:
    """An exponentially weighted ``mean`` that started at 0, divided by the weight it has gathered
    after ``seen`` samples, counted as at least ``least`` (so a few samples never speak for a
    link: one run of two failures is not a 50 % repeat); at most 1."""
    return min(1.0, mean / (1.0 - (1.0 - 1.0 / memory) ** max(seen, least)))


def advance(state: DetectorState, *, config: DetectorConfig, now: float) -> DetectorState:
    """Let time pass to ``now`` without new evidence; latch DEAD if due.

    Idempotent and order-insensitive: ``advance(advance(s, t1), t2) ==
    advance(s, t2)`` for ``t1 <= t2``. Raises ValueError if ``now`` is not
    finite.
    """
    t = _effective_now(state, now)
    dead = state.dead or (
        state.consecutive_failures >= required_failures(config=config, repeat=state.repeat)
        and silence_s(state, now=t) > config.dead_timeout_s
    )
    if dead == state.dead and t == state.last_event_at:
        return state
    return dataclasses.replace(state, last_event_at=t, dead=dead)


def evaluate(state: DetectorState, *, config: DetectorConfig, now: float) -> Health:
    """The peer's health at ``now`` (pure; see the module docstring).

    Raises ValueError if ``now`` is not finite.
    """
    s = advance(state, config=config, now=now)
    if s.dead:
        return Health.DEAD if s.consecutive_successes == 0 else Health.SUSPECT
    if s.last_success_at is None:
        return Health.SUSPECT
    if (
        s.consecutive_failures >= config.suspect_after_failures
        or silence_s(s, now=s.last_event_at) > config.suspect_timeout_s
    ):
        return Health.SUSPECT
    return Health.ALIVE


def on_success(state: DetectorState, *, config: DetectorConfig, now: float, outage: bool = False) -> DetectorState:
    """Apply one success (probe answered / new heartbeat) at ``now``. ``outage``: the failures
    this success ends were an outage, not loss (the peer's agent restarted meanwhile: its epoch
    changed), so they are not folded into ``repeat``.

    Raises ValueError if ``now`` is not finite.
    """
    s = advance(state, config=config, now=now)
    successes = s.consecutive_successes + 1
    short, long, seen = s.repeat_short, s.repeat_long, s.transitions
    run = s.consecutive_failures
    if run == 0:  # a success after a success: the link heals slowly
        heal = 1.0 - 1.0 / (HEAL_FACTOR * config.loss_memory)
        short, long = short * heal, long * heal
    elif not (s.dead or outage):  # a run that reached DEAD, or a restart explains, was an outage, not loss
        short = _fold(short, repeats=run - 1, ends=1, memory=config.loss_memory)
        long = _fold(long, repeats=run - 1, ends=1, memory=LONG_MEMORY_FACTOR * config.loss_memory)
        seen = min(MAX_TRANSITIONS, seen + run)
    return dataclasses.replace(
        s,
        last_success_at=s.last_event_at,
        consecutive_failures=0,
        consecutive_successes=successes,
        dead=s.dead and successes < config.recover_successes,
        repeat_short=short,
        repeat_long=long,
        transitions=seen,
        repeat=max(_corrected(short, memory=config.loss_memory, seen=seen, least=2 * config.loss_memory),
                   _corrected(long, memory=LONG_MEMORY_FACTOR * config.loss_memory, seen=seen,
                              least=2 * config.loss_memory)),
    )


def on_failure(state: DetectorState, *, config: DetectorConfig, now: float) -> DetectorState:
    """Apply one failure (probe failed or timed out) at ``now``.

    Raises ValueError if ``now`` is not finite.
    """
    s = advance(state, config=config, now=now)
    failed = dataclasses.replace(
        s,
        consecutive_failures=s.consecutive_failures + 1,
        consecutive_successes=0,
    )
    return advance(failed, config=config, now=failed.last_event_at)


def record(state: DetectorState, *, ok: bool, config: DetectorConfig, now: float,
           outage: bool = False) -> DetectorState:
    """Apply one piece of evidence: :func:`on_success` if ``ok`` (with ``outage``) else
    :func:`on_failure`.

    Raises:
        ValueError: ``ok`` is not a bool or ``now`` is not finite.
    """
    if not isinstance(ok, bool):
        raise ValueError(f"ok must be a bool, got {type(ok).__name__}")
    if ok:
        return on_success(state, config=config, now=now, outage=outage)
    return on_failure(state, config=config, now=now)


class PeerDetector:
    """Mutable holder of one peer's :class:`DetectorState`.

    A thin shell over the pure functions of this module: ``record`` replaces
    the state, ``state`` only reads it (querying never changes what later
    evidence does).

    Example::

        d = PeerDetector(config=DetectorConfig(), now=0.0)
        d.record(True, now=1.0)    # Health.ALIVE
        d.state(now=9.0)           # Health.SUSPECT (silent > 3 s, no probes)
    """

    __slots__ = ("_config", "_state")

    def __init__(self, *, config: DetectorConfig | None = None, now: float) -> None:
        """Start observing a never-heard peer at ``now`` (monotonic seconds).

        ``config`` defaults to ``DetectorConfig()``. Raises ValueError if
        ``now`` is not finite.
        """
        self._config = DetectorConfig() if config is None else config
        self._state = initial_state(now=now)

    @property
    def config(self) -> DetectorConfig:
        """The thresholds in use."""
        return self._config

    def reconfigure(self, config: DetectorConfig) -> None:
        """Judge the evidence gathered so far, and what follows, with ``config`` (the group's size
        changed, so its scaled timeouts did): the state is kept, only the thresholds change."""
        self._config = config

    @property
    def snapshot(self) -> DetectorState:
        """The current immutable state (as of the latest recorded event)."""
        return self._state

    def record(self, ok: bool, *, now: float, outage: bool = False) -> Health:
        """Record one piece of evidence at ``now`` (monotonic seconds) and
        return the peer's health right after it. ``outage``: see :func:`on_success`.

        Raises ValueError if ``ok`` is not a bool or ``now`` is not finite.
        """
        self._state = record(self._state, ok=ok, config=self._config, now=now, outage=outage)
        return evaluate(self._state, config=self._config, now=now)

    def state(self, *, now: float) -> Health:
        """The peer's health at ``now`` (monotonic seconds); does not mutate.

        Raises ValueError if ``now`` is not finite.
        """
        return evaluate(self._state, config=self._config, now=now)

    def __repr__(self) -> str:
        return f"PeerDetector(config={self._config!r}, state={self._state!r})"

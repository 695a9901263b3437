"""When an agent suspects a neighbour dead and asks the controller to challenge it: a faster,
refutable verdict beside the failure detector's DEAD.

What it is for
    The failure detector (:mod:`edgewatch.core.detector`) votes a silent neighbour DEAD after
    ``dead_timeout_s`` (5 s) and a loss-aware run of failures that bounds false DEAD verdicts to
    ``max_false_dead`` (1e-6) per run: a dead vote can fail a node that is cut off from the cloud
    outright, so it must be very rarely wrong. A node whose own Lease renewal is still fresh need
    not wait that long: SWIM's suspicion subprotocol (Das, Gupta, Motivala 2002; Lifeguard,
    Dadgar et al. 2018) lets a member *suspected* by its peers refute the suspicion, and only an
    unrefuted one becomes a failure. Here an agent names the neighbours it suspects on its evidence
    Lease (``edgewatch.io/suspects``); when a strict majority of a node's peers suspect it, the
    controller challenges it through the beacon, and a live node refutes by answering over its own
    cloud link (``edgewatch.controller.challenges``). A suspicion therefore costs a live node one
    answer, never its pods, unless its cloud link fails it within the challenge's timeout too, so
    it may be wrong a thousand times more often than a dead vote.

The rule (:func:`suspects`)
    A neighbour is suspected at ``now`` iff the detector has it DEAD, or it was heard at least
    once and: silent for more than ``after_s`` seconds, with at least :func:`suspicion_failures`
    consecutive failures (the detector's loss-aware count with the looser ``max_false`` bound and
    a floor of ``min_failures``). A peer never heard since this agent started, or one recovering
    from DEAD, is not suspected (an agent that just started must not accuse its whole group).
    The agent also requires its host check to confirm (``edgewatch.core.hostalive``): an answering
    kubelet port means the agent is down, not the host.

Timing at one exchange period ``p`` (1 s): a node killed at ``t`` misses its first datagram
period ``0-2 p`` later, and is suspected one period after that (two failures, silence ``2 p`` >
``after_s``), 1-3 s after the kill: the challenge's timeout then decides.

Limits: pure; times are the caller's monotonic seconds, as the detector's.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from edgewatch.core.detector import DetectorConfig, DetectorState, advance, required_failures, silence_s

__all__ = ["SuspicionConfig", "suspects", "suspicion_failures"]


@dataclass(frozen=True, kw_only=True)
class SuspicionConfig:
    """Thresholds of a suspicion (see the module docstring). Durations in seconds.

    Raises:
        ValueError: on construction, if ``after_s`` is not finite and > 0, ``min_failures`` is not
            an int >= 2, or ``max_false`` is not a probability in (0, 1).
    """

    after_s: float = 1.5
    """Silence, seconds, beyond which a failing neighbour is suspected. Default 1.5 s: the second
    failed period (silence 2 s at a 1 s period) suspects, the first does not."""

    min_failures: int = 2
    """Fewest consecutive failures (datagram missed, TCP fallback failed) that suspect. Default 2:
    one lost period never does. Must be >= 2."""

    max_false: float = 1e-3
    """Probability per run of failures that a live neighbour whose failures repeat at the
    detector's estimated rate is suspected (the detector's ``max_false_dead`` is 1e-6). Default
    1e-3: on a clean link the floor (2) decides; at 30 % loss each way about 10 failures in a row
    are needed, so a lossy link is suspected about as rarely as a clean one."""

    def __post_init__(self) -> None:
        after = self.after_s
        if isinstance(after, bool) or not isinstance(after, (int, float)) or not 0 < after < float("inf"):
            raise ValueError(f"after_s must be finite and > 0 seconds, got {after!r}")
        if isinstance(self.min_failures, bool) or not isinstance(self.min_failures, int) or self.min_failures < 2:
            raise ValueError(f"min_failures must be an int >= 2, got {self.min_failures!r}")
        bound = self.max_false
        if isinstance(bound, bool) or not isinstance(bound, (int, float)) or not 0.0 < bound < 1.0:
            raise ValueError(f"max_false must be a probability in (0, 1), got {bound!r}")


def suspicion_failures(*, detector: DetectorConfig, config: SuspicionConfig, repeat: float) -> int:
    """Consecutive failures that suspect a neighbour whose failures repeat with probability
    ``repeat`` (0..1; the detector's estimate): the fewest ``k >= min_failures`` with
    ``repeat ** (k - 1) <= max_false``, at most the detector's ``max_dead_failures``.

    Raises:
        ValueError: ``repeat`` is not a number in [0, 1].
    """
    looser = dataclasses.replace(detector, max_false_dead=config.max_false,
                                 suspect_after_failures=min(detector.suspect_after_failures, config.min_failures),
                                 dead_after_failures=config.min_failures,
                                 max_dead_failures=max(detector.max_dead_failures, config.min_failures))
    return required_failures(config=looser, repeat=repeat)


def suspects(state: DetectorState, *, detector: DetectorConfig, config: SuspicionConfig, now: float) -> bool:
    """Whether the neighbour whose detector holds ``state`` is suspected at ``now`` (monotonic
    seconds; see the module docstring). ``detector``: the thresholds that detector uses.

    Raises:
        ValueError: ``now`` is not finite.
    """
    s = advance(state, config=detector, now=now)
    if s.dead:
        return s.consecutive_successes == 0
    if s.last_success_at is None:
        return False
    needed = suspicion_failures(detector=detector, config=config, repeat=s.repeat)
    return s.consecutive_failures >= needed and silence_s(s, now=s.last_event_at) > config.after_s

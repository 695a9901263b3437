"""Which neighbours this agent suspects dead: the I/O side of ``edgewatch.core.suspicion``, fed by
the peer exchange once a period, read by the evidence reporter (``edgewatch.io/suspects``).

A neighbour is suspected iff, at the end of a period:

* its failure detector suspects it (:func:`edgewatch.core.suspicion.suspects`: two failed periods
  and 1.5 s of silence on a clean link, more on a lossy one; or DEAD);
* nothing authentic came from its agent for ``SuspicionConfig.after_s``: no liveness datagram,
  whatever its kubelet flag says, and no answered exchange (:meth:`Suspicions.heard`). An agent that
  speaks while its kubelet restarts is alive: its host is not dead, and the controller leaves such
  a node to the Lease path rather than challenge it;
* its kubelet port answered a check of this agent within 5 minutes and a check since has failed
  (``edgewatch.agent.hostcheck``, ``edgewatch.core.hostalive.confirms_suspicion``): an answering
  port means the agent is down, not the host. A neighbour missing a datagram is checked as soon as
  one more failure would suspect it (:meth:`Suspicions.worth_checking`), and a suspicion is looked
  at three times a period: at its start (on earlier checks), when this period's checks end, and at
  its end (its TCP fallbacks settled). On a clean link a kill is suspected at the start of the
  second period that misses its datagram: 1.5-3.5 s after it (a datagram counts for 1.5 periods).

Each change is logged at info level (``kind`` ``suspected`` / ``suspicion_withdrawn``). Memory: one
time per neighbour. Monotonic seconds throughout.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Collection, Iterable, Mapping

from edgewatch.agent.hostcheck import HostChecks
from edgewatch.core.detector import PeerDetector, record
from edgewatch.core.suspicion import SuspicionConfig, suspects, suspicion_failures
from edgewatch.core.types import NodeName

__all__ = ["Suspicions"]

log = logging.getLogger(__name__)


class Suspicions:
    """The neighbours this agent suspects (:attr:`current`; see the module docstring).

    Args (keyword-only):
        config: the thresholds (``AgentConfig.suspicion``).
        hosts: the agent's kubelet-port checks, which must confirm each suspicion.
    """

    def __init__(self, *, config: SuspicionConfig, hosts: HostChecks) -> None:
        self.config = config
        self.hosts = hosts
        self.current: frozenset[NodeName] = frozenset()
        self._heard: dict[NodeName, float] = {}  # peer -> when something authentic of its agent last came

    def heard(self, peer: NodeName, *, at: float) -> None:
        """Something authentic of ``peer``'s agent came at ``at`` (a liveness datagram, kubelet flag
        aside; an answered exchange)."""
        if at > self._heard.get(peer, -math.inf):
            self._heard[peer] = at

    def worth_checking(self, detector: PeerDetector) -> bool:
        """Whether a neighbour whose datagram is missing this period is worth a kubelet-port check
        now: one more failure after this one would suspect it (on a clean link, from its first
        missed period, so the check confirms by the second; on a lossy one only near the count,
        so loss does not turn into handshakes)."""
        state = detector.snapshot
        needed = suspicion_failures(detector=detector.config, config=self.config, repeat=state.repeat)
        return state.consecutive_failures + 2 >= needed

    def update(self, detectors: Mapping[NodeName, PeerDetector], neighbours: Iterable[NodeName], *,
               now: float, missing: Collection[NodeName] = ()) -> frozenset[NodeName]:
        """The neighbours suspected at ``now`` (also kept in :attr:`current`); ``missing``: those
        whose datagram is missing again this period, judged as if that period's failure were
        recorded already (its TCP fallback may hang up to the probe timeout; if it succeeds, the
        next update withdraws the suspicion). What is kept of peers no longer ``neighbours`` is
        dropped."""
        near = frozenset(neighbours)
        for gone in [p for p in self._heard if p not in near]:
            del self._heard[gone]
        candidates = []
        for peer in sorted(near):
            detector = detectors.get(peer)
            if detector is None or now - self._heard.get(peer, -math.inf) <= self.config.after_s:
                continue
            state = detector.snapshot
            if peer in missing:
                state = record(state, ok=False, config=detector.config, now=now)
            if suspects(state, detector=detector.config, config=self.config, now=now):
                candidates.append(peer)
        new = self.hosts.confirm_suspicions(candidates, now=now)
        for peer in sorted(new - self.current):
            log.info("suspecting %s: its agent and its kubelet port are silent; the controller may challenge it",
                     peer, extra={"kind": "suspected", "peer": peer})
        for peer in sorted(self.current - new):
            log.info("no longer suspecting %s", peer, extra={"kind": "suspicion_withdrawn", "peer": peer})
        self.current = new
        return new

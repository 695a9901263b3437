"""The simulated network of ``edgewatch sim``: who can reach whom, and what each message costs.

A pure model with a seeded RNG, no sockets and no clocks: per-node packet loss (a message from a to
b is lost with probability ``1 - (1 - loss[a]) * (1 - loss[b])``: each node's own link drops its
share), k-way partitions (a message crosses only within one side), killed nodes (send and answer
nothing), cut cloud links (the node's statements reach the controller only through a carrier),
and per-node clock offsets and rates (every agent reads only its own clock, so skew must change
nothing; the simulator proves it by running with skew).

Limits: latency is not modelled inside a period (a LAN answers in milliseconds; a period is 1 s),
so a request and its answer share the sender's period; loss is independent per message (bursts
are modelled by partitions and kills).
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from edgewatch.core.types import NodeName

__all__ = ["SimClock", "SimNetwork"]


@dataclass(frozen=True)
class SimClock:
    """One node's clock: ``local = offset_s + rate * global`` (seconds)."""

    offset_s: float = 0.0
    rate: float = 1.0

    def local(self, t: float) -> float:
        """The node's reading at global time ``t`` (seconds)."""
        return self.offset_s + self.rate * t


@dataclass
class SimNetwork:
    """The state of the simulated network (mutated by the scenario between periods).

    Attributes:
        rng: the seeded source of every loss decision.
        loss: per-node loss probability (0..1) of its own link; missing = 0.
        side: per-node partition side; nodes on different sides never hear each other.
        dead: killed nodes.
        cloud_cut: nodes whose own cloud link is down.
        sent: messages sent per node (requests and answers), for the cost table.
        bytes_sent: bytes sent per node (wire fidelity only).
    """

    rng: random.Random
    loss: dict[NodeName, float] = field(default_factory=dict)
    side: dict[NodeName, int] = field(default_factory=dict)
    dead: set[NodeName] = field(default_factory=set)
    cloud_cut: set[NodeName] = field(default_factory=set)
    sent: dict[NodeName, int] = field(default_factory=dict)
    bytes_sent: dict[NodeName, int] = field(default_factory=dict)

    def count(self, sender: NodeName, size: int = 0) -> None:
        """Count one message of ``size`` bytes sent by ``sender``."""
        self.sent[sender] = self.sent.get(sender, 0) + 1
        if size:
            self.bytes_sent[sender] = self.bytes_sent.get(sender, 0) + size

    def delivers(self, a: NodeName, b: NodeName) -> bool:
        """Whether one message from ``a`` reaches ``b`` (draws from the RNG)."""
        if a in self.dead or b in self.dead or self.side.get(a, 0) != self.side.get(b, 0):
            return False
        keep = (1.0 - self.loss.get(a, 0.0)) * (1.0 - self.loss.get(b, 0.0))
        return keep >= 1.0 or self.rng.random() < keep

    def reaches_cloud(self, node: NodeName) -> bool:
        """Whether ``node``'s own cloud link is up."""
        return node not in self.dead and node not in self.cloud_cut

    def split(self, sides: Iterable[Iterable[NodeName]]) -> None:
        """Partition into the given sides (every node not named stays on side 0)."""
        self.side = {}
        for i, members in enumerate(sides):
            for m in members:
                self.side[m] = i

    def heal(self) -> None:
        """End every partition."""
        self.side = {}

    def set_loss(self, loss: Mapping[NodeName, float]) -> None:
        """Replace the per-node loss."""
        self.loss = dict(loss)

"""The deterministic simulator behind ``edgewatch sim``: n real agents' cores on a virtual clock.

What runs for real
    Every simulated node is an :class:`edgewatch.agent.peers.PeerExchange` — the agent's own peer
    logic: the monitoring topology, the failure detectors, heartbeat signing with the vote and the
    carrier choice, fallback probes, the local count. The controller side is the real count
    (:func:`edgewatch.core.reach.decide_reach` over each node's newest uploaded statement, timed by
    beacon as the controller does) and the real duty rule (:func:`edgewatch.core.duties.assign_duties`)
    decides which statements a connected node carries for its cut-off neighbours.

Two fidelities
    * ``wire=True``: every message is a real envelope — Ed25519 keys per node, encode, sign, verify,
      strict decode, replay guards — so bytes per message are measured, not estimated.
    * ``wire=False`` (default; about 20x faster): the heartbeat objects are handed over without
      encoding or signatures. Neither relays (the agent sends none). Everything that decides (detectors, topology,
      reach, duties) is the same code; used for long runs (false-positive rates over node-hours).

Time
    A virtual global clock in seconds; every node reads its own :class:`~edgewatch_lab.sim.network.SimClock`
    (offset up to an hour and a rate off by up to 100 ppm when ``skew`` is on), and all the agent code
    gets only its own node's reading. Each node runs its period at its own phase. Nothing sleeps: a
    1,000-node group simulates faster than real time.

Cloud model
    A node whose cloud link is up uploads its own statement by the evidence reporter's rule
    (:func:`edgewatch.agent.reporter.write_due`: at once when a neighbour is found dead or its own
    state changes, else every ``upload_every_s``) and the statements of the cut-off neighbours
    that named it carrier; an upload reaches the controller after ``upload_delay_s``. The controller
    recounts every ``recount_s`` with statements timed by their beacon (issued every
    ``beacon_period_s``), TTL ``evidence_ttl_s``.

Limits: no latency within a period; the kubelet is always healthy unless the node is killed; the
pool coordinator path is not simulated.
"""

from __future__ import annotations

import dataclasses
import heapq
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edgewatch.agent.config import AgentConfig
from edgewatch.agent.peers import PeerExchange
from edgewatch.agent.reporter import write_due
from edgewatch.core.detector import DetectorConfig
from edgewatch.core.duties import assign_duties
from edgewatch.core.identity import NodeKey, NodeKeyring, PublicKeys
from edgewatch.core.reach import decide_reach
from edgewatch.core.topology import DEFAULT_RINGS, neighbours
from edgewatch.core.types import NodeName, Verdict
from edgewatch.core.wire import DecodedEnvelope, Heartbeat, Rejected, WireConfig
from edgewatch_lab.sim.network import SimClock, SimNetwork

__all__ = ["SimConfig", "Simulation", "Transition"]


@dataclass(frozen=True, kw_only=True)
class SimConfig:
    """One simulation's settings (seconds where a duration)."""

    n: int
    seed: int = 1
    rings: int = DEFAULT_RINGS
    period_s: float = 1.0
    wire: bool = False
    skew: bool = True
    upload_every_s: float = 10.0
    upload_delay_s: float = 0.3
    beacon_period_s: float = 5.0
    evidence_ttl_s: float = 30.0
    recount_s: float = 1.0
    detector: DetectorConfig = field(default_factory=DetectorConfig)
    """Every agent's failure detector settings (the agent's default unless a bench compares rules)."""

    def __post_init__(self) -> None:
        if self.n < 1:
            raise ValueError("n must be >= 1")


@dataclass(frozen=True)
class Transition:
    """The controller's verdict on ``node`` became ``verdict`` at global time ``at`` (seconds)."""

    node: NodeName
    verdict: Verdict
    at: float


class _Count:
    """A no-op stand-in for the agent's Prometheus metrics (1,000 registries would only cost time)."""

    def labels(self, **_labels: object) -> _Count:
        return self

    def inc(self, *_args: object) -> None:
        return None

    def set(self, *_args: object) -> None:
        return None


class _Metrics:
    def __getattr__(self, _name: str) -> _Count:
        return _Count()


class _Members:
    def __init__(self, group: frozenset[NodeName]) -> None:
        self.group = group

    def group_of(self, _node: NodeName) -> frozenset[NodeName]:
        return self.group

    def address_of(self, _node: NodeName) -> str:
        return "sim"


class _CloudLink:
    """A simulated node's own cloud link as its agent reads it (``edgewatch.agent.ports.CloudLinkView``)."""

    def __init__(self, sim: Simulation, node: NodeName) -> None:
        self._sim = sim
        self._node = node

    @property
    def up(self) -> bool:
        return self._sim.net.reaches_cloud(self._node)


class _Unsigned:
    """The model fidelity's signer: the payload with a constant key id and signature (nothing
    verifies them: objects are handed over, never decoded)."""

    def sign(self, payload: dict[str, Any], *, domain: str) -> dict[str, Any]:
        return {**payload, "key_id": "0" * 32, "mac": "0" * 128}


@dataclass
class _Upload:
    arrives: float
    heartbeat: Heartbeat
    signed_at: float  # global time the origin signed it


@dataclass
class _Held:
    heartbeat: Heartbeat
    at: float  # beacon time (controller clock = global time)


@dataclass
class _NodeState:
    agent: PeerExchange
    clock: SimClock
    written: tuple[tuple[object, ...], str, float] | None = None
    carried: dict[NodeName, tuple[int, int]] = field(default_factory=dict)


class Simulation:
    """A group of ``config.n`` simulated agents and the controller's count (see the module docstring).

    Drive it with :meth:`run_until`; change the network (``self.net``) between calls; read the
    controller's verdicts (:attr:`verdicts`) and their :attr:`transitions`.
    """

    def __init__(self, config: SimConfig) -> None:
        self.config = config
        self.rng = random.Random(config.seed)
        self.names = [NodeName(f"edge-{i:04d}") for i in range(config.n)]
        self.group = frozenset(self.names)
        self.ring = dict(neighbours(self.group, k=config.rings))
        self.net = SimNetwork(rng=random.Random(self.rng.getrandbits(64)))
        members = _Members(self.group)
        metrics = _Metrics()
        public = PublicKeys()
        wire = WireConfig()  # the agent's: no relays
        self.nodes: dict[NodeName, _NodeState] = {}
        for name in self.names:
            keyring: Any = NodeKeyring(node=name, keys=(NodeKey.generate(),), public=public) if config.wire \
                else _Unsigned()
            agent = PeerExchange(me=name, config=AgentConfig(node=name, identity_file=Path("/nonexistent"),
                                                             rings=config.rings, wire=wire,
                                                             detector=config.detector),
                                 keyring=keyring, membership=members, metrics=metrics,  # type: ignore[arg-type]
                                 link=_CloudLink(self, name),
                                 rng=random.Random(self.rng.getrandbits(64)))
            agent.kubelet_ok = True
            agent.incarnation = 1 + self.rng.getrandbits(40)
            offset, rate = self.rng.uniform(-3600.0, 3600.0), 1.0 + self.rng.uniform(-1e-4, 1e-4)  # drawn either way
            clock = SimClock(offset_s=offset, rate=rate) if config.skew else SimClock()
            self.nodes[name] = _NodeState(agent=agent, clock=clock)
        self.now = 0.0
        self._events: list[tuple[float, int, NodeName]] = []
        for i, name in enumerate(self.names):
            heapq.heappush(self._events, (self.rng.uniform(0.0, config.period_s), i, name))
        self._uploads: list[_Upload] = []
        self._held: dict[NodeName, _Held] = {}
        self._next_recount = config.recount_s
        self.verdicts: dict[NodeName, Verdict] = dict.fromkeys(self.names, Verdict.UNKNOWN)
        self.transitions: list[Transition] = []
        self.periods = 0
        self.uploads = 0  # statements sent to the cloud (each one evidence Lease write in the agent)

    # -- driving -----------------------------------------------------------------------------------

    def run_until(self, t_end: float) -> None:
        """Advance the virtual clock to ``t_end`` seconds, running every node's periods and the
        controller's recounts in time order."""
        while True:
            next_event = self._events[0][0] if self._events else float("inf")
            if self._next_recount <= min(next_event, t_end):
                self.now = self._next_recount
                self._recount()
                self._next_recount += self.config.recount_s
                continue
            if next_event > t_end:
                break
            t, i, name = heapq.heappop(self._events)
            self.now = t
            if name not in self.net.dead:
                self._period(name)
                heapq.heappush(self._events, (t + self.config.period_s, i, name))
        self.now = t_end

    def kill(self, node: NodeName) -> None:
        """Kill ``node`` now: it sends, answers and uploads nothing more."""
        self.net.dead.add(node)

    # -- one node's period -------------------------------------------------------------------------

    def _local(self, name: NodeName) -> float:
        return self.nodes[name].clock.local(self.now)

    def _period(self, name: NodeName) -> None:
        state = self.nodes[name]
        agent = state.agent
        local = self._local(name)
        agent.refresh_group(now=local)
        agent.sign_own(now_mono=local)
        for peer in agent.targets(now=local):
            self._exchange(name, peer)
        agent.decide(now=self._local(name))
        self.periods += 1
        if self.net.reaches_cloud(name):
            self._upload(name, state, local)

    def _exchange(self, a: NodeName, b: NodeName) -> None:
        sender, receiver = self.nodes[a].agent, self.nodes[b].agent
        self.net.count(a)
        if not self.net.delivers(a, b):
            sender.record(b, ok=False, now=self._local(a))
            return
        if self.config.wire:
            self._exchange_wire(a, b)
            return
        assert sender.own is not None
        receiver.absorb(_handed(sender.own, a, b), now_mono=self._local(b), direct=True)
        self.net.count(b)
        if receiver.own is None or not self.net.delivers(b, a):  # not ready yet (503), or the answer lost
            sender.record(b, ok=False, now=self._local(a))
            return
        sender.absorb(_handed(receiver.own, b, a), now_mono=self._local(a), direct=True)

    def _exchange_wire(self, a: NodeName, b: NodeName) -> None:
        sender, receiver = self.nodes[a].agent, self.nodes[b].agent
        nonce = f"{self.rng.getrandbits(128):032x}"
        raw = sender.envelope_for(b, now_mono=self._local(a), nonce=nonce)
        self.net.bytes_sent[a] = self.net.bytes_sent.get(a, 0) + len(raw)
        try:
            env = receiver.decode(raw, sender_allowed=lambda s: s == a)
        except Rejected as exc:
            sender.record(b, ok=False, now=self._local(a))
            if exc.answer_to is None:
                return
            reply_to = exc.answer_to[1]  # refused by the replay guard only: answered anyway (409)
        else:
            receiver.absorb(env, now_mono=self._local(b), direct=True)
            reply_to = env.nonce
        if receiver.own is None:  # its first period has not come yet: 503
            sender.record(b, ok=False, now=self._local(a))
            return
        answer = receiver.envelope_for(a, now_mono=self._local(b), nonce=f"{self.rng.getrandbits(128):032x}",
                                       reply_to=reply_to)
        self.net.count(b, len(answer))
        if not self.net.delivers(b, a):
            sender.record(b, ok=False, now=self._local(a))
            return
        try:
            back = sender.decode(answer, sender_allowed=lambda s: s == b, reply_to=nonce)
        except Rejected:
            sender.record(b, ok=False, now=self._local(a))
            return
        sender.absorb(back, now_mono=self._local(a), direct=True)

    # -- cloud: uploads and the controller's count ------------------------------------------------

    def _upload(self, name: NodeName, state: _NodeState, local: float) -> None:
        agent = state.agent
        own = agent.own
        assert own is not None
        beacon = f"{int(self.now // self.config.beacon_period_s):032x}"  # the beacon it would name
        content = write_due(last=state.written, own=dataclasses.replace(own, beacon=beacon), carried=[],
                            now=self.now, refresh_s=self.config.upload_every_s)
        if content is not None:  # the evidence reporter's rule (carried statements are uploaded below)
            state.written = (content, beacon, self.now)
            self._uploads.append(_Upload(arrives=self.now + self.config.upload_delay_s, heartbeat=own,
                                         signed_at=self.now))
            self.uploads += 1
        duties = assign_duties(me=name, cloud_ok=True, reachable=agent.reachable(now=local),
                               verdicts={n: d.verdict for n, d in agent.decisions.items()},
                               reports=agent.reports(now=local))
        for origin in duties.statements:
            entry = agent.book.get(origin)
            if entry is None or state.carried.get(origin) == entry.heartbeat.order:
                continue
            state.carried[origin] = entry.heartbeat.order
            signed_at = self.now - entry.age_at(local)
            self._uploads.append(_Upload(arrives=self.now + self.config.upload_delay_s, heartbeat=entry.heartbeat,
                                         signed_at=signed_at))
            self.uploads += 1

    def _recount(self) -> None:
        arrived = [u for u in self._uploads if u.arrives <= self.now]
        self._uploads = [u for u in self._uploads if u.arrives > self.now]
        period = self.config.beacon_period_s
        for up in arrived:
            beacon_at = (up.signed_at // period) * period  # the newest beacon when it was signed
            held = self._held.get(up.heartbeat.origin)
            if held is None or (beacon_at, up.heartbeat.order) > (held.at, held.heartbeat.order):
                self._held[up.heartbeat.origin] = _Held(heartbeat=up.heartbeat, at=beacon_at)
        votes = {o: h.heartbeat.vote(observed_at=h.at) for o, h in self._held.items()}
        decisions = decide_reach(group=self.group, votes=votes, now=self.now, vote_ttl_s=self.config.evidence_ttl_s,
                                 ring=self.ring)
        for node, decision in decisions.items():
            if decision.verdict is not self.verdicts[node]:
                self.verdicts[node] = decision.verdict
                self.transitions.append(Transition(node=node, verdict=decision.verdict, at=self.now))


def _handed(own: Heartbeat, sender: NodeName, receiver: NodeName) -> DecodedEnvelope:
    """A heartbeat handed over as an accepted envelope (model fidelity: no codec)."""
    return DecodedEnvelope(sender=sender, receiver=receiver, epoch=0, seq=0, nonce="", reply_to=None,
                           key_id="", own=own, own_age_s=0.0, relayed=())

"""The agent's signed evidence for the controller, and the controller's beacon it signs with.

Two loops:

* **Beacon.** The agent watches the Lease ``<namespace>/edgewatch-beacon`` (written only by the
  controller): its annotation ``edgewatch.io/beacon-key`` is the controller's public key, trusted
  because it came over this agent's authenticated API connection; ``edgewatch.io/beacon`` the newest
  beacon token (:mod:`edgewatch.core.beacon`). Peers pass tokens on in every envelope, so an agent
  cut off from the cloud still signs with a current beacon; a token is adopted only if the trusted
  key signed it. With ``state_dir`` the trusted key is kept on disk for restarts during a cut. The
  watch is the cloud door's informer (``edgewatch.agent.watching.follow``); a deleted Lease changes
  nothing (the key and beacon held stay).
* **Report.** The agent writes its own Lease ``edgewatch-nodes/<node>`` (the only one the apiserver
  lets it write there) with the annotation ``edgewatch.io/evidence``: its newest signed heartbeat,
  followed by the newest heartbeats of the cut-off peers it carries, unchanged
  (:func:`edgewatch.core.evidence.encode_evidence`). It writes when what the statements *say*
  changes (not their seq) and at least every ``refresh_s`` with a current beacon, so a quiet node
  costs one small write per ``refresh_s`` (the kubelet's own Lease: one per 10 s).
* **Challenge.** A beacon Lease that names this node in ``edgewatch.io/challenge`` (the controller
  suspects it dead: ``edgewatch.controller.challenges``) makes the agent sign a statement with that
  beacon at once (:meth:`Statements.sign_now`) and write it without waiting for the tick, whatever
  the link monitor says (the challenge came over the link), again until it is written or
  :data:`ANSWER_WITHIN_S` has passed. Each evidence write says the agent answers challenges
  (``edgewatch.io/answers-challenges: v1:<incarnation>``), names the neighbours it votes dead
  without confirming it (``edgewatch.io/unconfirmed-dead``, :meth:`Statements.unconfirmed_dead`)
  and those it suspects dead (``edgewatch.io/suspects``, :meth:`Statements.suspected`: written as
  soon as the exchange loop sets ``news``, not at the next tick). Cost: one signature and one
  write per challenge of this node; one write per change of its suspicions.

Every write is bounded by ``timeout_s`` and carries the resourceVersion of the Lease as the last
write returned it (one request per write; a conflict makes the next tick read it again). Errors are
logged and counted, never fatal.

What it is handed: the statements to write (:class:`Statements`: the agent's exchange loop), this
node's cloud link (:class:`edgewatch.agent.ports.CloudLinkView`: no write is tried while it is
down), the beacon holder it shares with the peer exchange, the controller's clock it feeds, and
who is told of each write and watch event (:class:`ReporterEvents`).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import datetime as dt
import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Final, Protocol

from edgewatch.agent.cloudclock import CloudClock
from edgewatch.agent.ports import CloudLinkView, Unobserved, WatchEvents
from edgewatch.agent.watching import follow, informer_config
from edgewatch.core.beacon import BeaconHolder
from edgewatch.core.evidence import encode_evidence
from edgewatch.core.types import NodeName
from edgewatch.core.wire import Heartbeat
from edgewatch.kube.api import ApiError, AsyncClient, HttpError, Lease, LeaseSpec, ObjectMeta
from edgewatch.carryahead import FALLBACK_AHEAD_S, parse_ahead
from edgewatch.names import (
    ANSWERS_CHALLENGES_ANNOTATION,
    BEACON_ANNOTATION,
    BEACON_KEY_ANNOTATION,
    BEACON_LEASE_NAME,
    CARRY_AHEAD_ANNOTATION,
    CHALLENGE_ANNOTATION,
    EVIDENCE_ANNOTATION,
    IDENTITY_NAMESPACE,
    SUSPECTS_ANNOTATION,
    UNCONFIRMED_DEAD_ANNOTATION,
)
from edgewatch.kube.errors import is_conflict, is_not_found
from edgewatch.statefile import replace_file
from edgewatch.kube.resources import LEASES

log = logging.getLogger(__name__)

__all__ = ["EvidenceReporter", "ReporterEvents", "Statements", "write_due"]

_KEY_FILE = "controller-beacon.key"


ANSWER_WITHIN_S: Final = 2.0
"""How long the agent tries to write a challenge's answer, seconds (past the controller's default
``--challenge-timeout``, 1.5 s: an answer that comes late still ends the challenge, and the node
is back at once): a failed write is tried again after 0.05, 0.1, 0.2 ... s."""


class Statements(Protocol):
    """What this node states now: its own newest signed heartbeat, and the newest heartbeats of the
    cut-off peers whose statements it carries (the agent's exchange loop)."""

    def own_statement(self) -> Heartbeat | None:
        """This node's newest signed heartbeat (None before the first exchange period)."""
        ...

    def carried_statements(self) -> Sequence[Heartbeat]:
        """The newest heartbeats of the cut-off peers this node carries (empty: none)."""
        ...

    def unconfirmed_dead(self) -> frozenset[NodeName]:
        """The neighbours this node votes dead without confirming it (``edgewatch.agent.hostcheck``)."""
        ...

    def suspected(self) -> frozenset[NodeName]:
        """The neighbours this node suspects dead (``edgewatch.core.suspicion``)."""
        ...

    def sign_now(self) -> Heartbeat | None:
        """Sign this node's statement now, with the newest beacon (a controller's challenge); None
        before the first exchange period."""
        ...


class ReporterEvents(WatchEvents, Protocol):
    """What :class:`EvidenceReporter` tells the agent (its metrics count it): each beacon watch
    event (``watch_event_received("beacon")``) and each write's result."""

    def evidence_written(self, result: str) -> None:
        """One write of the evidence Lease ended: ``ok``, ``failed``, ``conflict`` or ``timeout``."""
        ...


def _content(hb: Heartbeat) -> tuple[object, ...]:
    """What a statement says that decides something at once: a neighbour found dead, the node's own
    kubelet and cloud link, its carrier. A neighbour moving between alive and suspect (an
    abstention; frequent on a lossy link) waits for the next refresh, so loss does not turn into
    API writes."""
    return (hb.origin, hb.kubelet_ok, hb.cloud_ok, hb.dead, hb.carrier)


def write_due(*, last: tuple[tuple[object, ...], str, float] | None, own: Heartbeat, carried: list[Heartbeat],
              now: float, refresh_s: float, unconfirmed: frozenset[str] = frozenset(),
              suspected: frozenset[str] = frozenset()) -> tuple[object, ...] | None:
    """The content to write now, or None (pure; the reporter's rule, also run by ``edgewatch sim``).

    ``last`` is ``(content, beacon, time)`` of the last write; times in seconds on one clock. Due
    when what decides changed (:func:`_content`, the ``unconfirmed`` dead votes, the ``suspected``
    neighbours), or after ``refresh_s`` once the beacon moved on.
    """
    content = _written_content(own, carried, unconfirmed, suspected)
    if last is not None and last[0] == content and (now - last[2] < refresh_s or own.beacon == last[1]):
        return None
    return content


def _written_content(own: Heartbeat, carried: list[Heartbeat], unconfirmed: frozenset[str],
                     suspected: frozenset[str]) -> tuple[object, ...]:
    return (_content(own), tuple(sorted(_content(hb) for hb in carried)), tuple(sorted(unconfirmed)),
            tuple(sorted(suspected)))


class EvidenceReporter:
    """Keeps the beacon current and this node's evidence Lease written.

    Args (keyword-only):
        client: API client (the agent's own identity).
        node: this node.
        beacon: the holder the agent signs with (shared with the peer exchange).
        statements: this node's newest signed heartbeat and those of the cut-off peers it carries
            (:class:`Statements`).
        link: this node's cloud link (no write is tried while it is down).
        config_namespace: where the beacon Lease lives (the agent's ``--namespace``).
        namespace: where the evidence Lease lives (default ``edgewatch-nodes``).
        state_dir: keep the trusted controller key here (None: memory only).
        refresh_s: rewrite unchanged evidence this often, seconds (default 10 s, the kubelet's
            Lease renewal; well inside the controller's 30 s evidence TTL).
        tick_s: how often the wanted content is compared with the written one, seconds.
        timeout_s: bound of one write, seconds; also of one list or of opening the beacon watch.
        retry_s: first pause after a failed list or watch of the beacon Lease, seconds (later ones
            double up to ``edgewatch.agent.watching.AGENT_BACKOFF_MAX_S``).
        idle_timeout_s: re-open a beacon watch that delivers nothing, not even the apiserver's
            bookmark (about one a minute), for this long, seconds.
        events: told of each write's result and each beacon watch event (the per-agent API load
            metric; :class:`ReporterEvents`; default: nobody).
        cloud_clock: where the beacon Lease's renewTime is noted (the controller's clock, which
            carried renewals are written in).
        news: set by the exchange loop when what the Lease says may have changed: compared at
            once, not at the next tick (None: ticks only).
    """

    def __init__(self, *, client: AsyncClient, node: NodeName, beacon: BeaconHolder, statements: Statements,
                 link: CloudLinkView, config_namespace: str = "edgewatch", namespace: str = IDENTITY_NAMESPACE,
                 state_dir: Path | None = None, refresh_s: float = 10.0, tick_s: float = 0.5,
                 timeout_s: float = 5.0, retry_s: float = 2.0, idle_timeout_s: float = 150.0,
                 events: ReporterEvents | None = None, cloud_clock: CloudClock | None = None,
                 news: asyncio.Event | None = None) -> None:
        self.client = client
        self.cloud_clock = cloud_clock if cloud_clock is not None else CloudClock()
        self.node = node
        self.beacon = beacon
        self._statements = statements
        self._link = link
        self._observer: ReporterEvents = events if events is not None else Unobserved()
        self.config_namespace = config_namespace
        self.namespace = namespace
        self.state_dir = state_dir
        self.refresh_s = refresh_s
        self.tick_s = tick_s
        self.timeout_s = timeout_s
        self.retry_s = retry_s
        self.idle_timeout_s = idle_timeout_s
        self._written: tuple[tuple[object, ...], str, float] | None = None  # (content, beacon, monotonic)
        self._lease: Lease | None = None  # the evidence Lease as the apiserver returned our last write
        self._wake = news if news is not None else asyncio.Event()  # a challenge, or news: look at once
        self._challenged = False  # a beacon named this node: answer at once
        self._challenge_token = ""  # the token of the last beacon that named this node
        self.writes = 0
        self._load_key()

    # -- beacon -----------------------------------------------------------------------------------

    def _load_key(self) -> None:
        if self.state_dir is None:
            return
        try:
            raw = (self.state_dir / _KEY_FILE).read_bytes()
            self.beacon.trust(raw)
        except FileNotFoundError:
            return
        except (OSError, ValueError) as exc:
            log.warning("ignoring the saved controller key: %s", exc)

    def _save_key(self, raw: bytes) -> None:
        if self.state_dir is None:
            return
        path = self.state_dir / _KEY_FILE
        try:
            replace_file(path, raw)
        except OSError as exc:
            log.info("cannot save the controller key to %s: %s", path, exc)

    def apply_beacon_lease(self, lease: Lease | None) -> None:
        """Adopt the controller key and beacon of the beacon Lease (None: deleted; nothing changes),
        and note its renewTime as a reading of the controller's clock (:mod:`edgewatch.agent.cloudclock`)."""
        if lease is None:
            return
        annotations = lease.metadata.annotations or {} if lease.metadata else {}
        ahead = parse_ahead(annotations.get(CARRY_AHEAD_ANNOTATION))
        self.cloud_clock.limit(FALLBACK_AHEAD_S if ahead is None else ahead)  # the policy's own fallback
        if lease.spec is not None and isinstance(lease.spec.renewTime, dt.datetime):
            self.cloud_clock.observe(lease.spec.renewTime)
        key_text = annotations.get(BEACON_KEY_ANNOTATION)
        if key_text:
            try:
                raw = base64.b64decode(key_text, validate=True)
                if raw != self.beacon.trusted_key:
                    self.beacon.trust(raw)
                    self._save_key(raw)
                    log.info("trusting the controller's beacon key %s", key_text, extra={"kind": "beacon_key"})
            except (binascii.Error, ValueError) as exc:
                log.warning("the beacon Lease's key is not an Ed25519 key: %s", exc)
                return
        token = annotations.get(BEACON_ANNOTATION, "")
        self.beacon.offer(token)
        named = annotations.get(CHALLENGE_ANNOTATION, "")
        if named and token != self._challenge_token and self.node in named.split(","):
            self._challenge_token = token
            self._challenged = True
            self._wake.set()

    async def _watch_beacon(self) -> None:
        """The beacon Lease (field selector ``metadata.name``), each change adopted
        (:meth:`apply_beacon_lease`), until cancelled."""
        def on_lease(op: str, lease: Lease) -> None:
            self.apply_beacon_lease(None if op == "DELETED" else lease)

        await follow(self.client, LEASES, model=Lease, name="beacon", on_event=on_lease, events=self._observer,
                     namespace=self.config_namespace, field_selector=f"metadata.name={BEACON_LEASE_NAME}",
                     config=informer_config(request_timeout_s=self.timeout_s, idle_timeout_s=self.idle_timeout_s,
                                            retry_s=self.retry_s))

    # -- report -----------------------------------------------------------------------------------

    def due(self, *, now: float) -> tuple[Heartbeat, list[Heartbeat]] | None:
        """What to write now, or None (nothing signed yet, no beacon yet, or nothing new)."""
        own = self._statements.own_statement()
        if own is None or not own.beacon:
            return None
        carried = [hb for hb in self._statements.carried_statements() if hb.origin != self.node]
        if write_due(last=self._written, own=own, carried=carried, now=now, refresh_s=self.refresh_s,
                     unconfirmed=self._statements.unconfirmed_dead(), suspected=self._statements.suspected()) is None:
            return None
        return own, carried

    async def write(self, own: Heartbeat, carried: list[Heartbeat], *, now: float | None = None) -> str:
        """Write the evidence Lease once; returns ``ok``, ``failed``, ``conflict`` or ``timeout``.
        ``now``: this agent's monotonic time (seconds) the write is noted at (default: the clock's)."""
        try:
            text = encode_evidence(own, carried)
        except ValueError as exc:
            log.warning("evidence too large, carrying fewer: %s", exc)
            text = encode_evidence(own)
        now_text = dt.datetime.now(dt.UTC)
        unconfirmed = frozenset(self._statements.unconfirmed_dead())
        suspected = frozenset(self._statements.suspected())
        marks = {ANSWERS_CHALLENGES_ANNOTATION: f"v1:{own.incarnation}",
                 UNCONFIRMED_DEAD_ANNOTATION: ",".join(sorted(unconfirmed)) or None,
                 SUSPECTS_ANNOTATION: ",".join(sorted(suspected)) or None}
        try:
            async with asyncio.timeout(self.timeout_s):
                try:
                    # The Lease as we last wrote it (its resourceVersion is the precondition); read
                    # it only when we have none, or after a conflict showed someone else wrote it.
                    lease = self._lease or await self.client.get(Lease, self.node, namespace=self.namespace)
                except ApiError as exc:
                    if not is_not_found(exc):
                        raise
                    self._lease = await self.client.create(Lease(
                        metadata=ObjectMeta(name=self.node, namespace=self.namespace,
                                            labels={"app.kubernetes.io/part-of": "edgewatch"},
                                            annotations={EVIDENCE_ANNOTATION: text, **{
                                                k: v for k, v in marks.items() if v is not None}}),
                        spec=LeaseSpec(holderIdentity=self.node, renewTime=now_text)))
                else:
                    kept = {k: v for k, v in (lease.metadata.annotations or {}).items() if k not in marks}
                    lease.metadata.annotations = {**kept, EVIDENCE_ANNOTATION: text,
                                                  **{k: v for k, v in marks.items() if v is not None}}
                    if lease.spec is None:
                        lease.spec = LeaseSpec()
                    lease.spec.holderIdentity = self.node
                    lease.spec.renewTime = now_text
                    self._lease = None
                    self._lease = await self.client.replace(lease)  # with its resourceVersion: 409 if raced
        except TimeoutError:
            self._lease = None
            return "timeout"
        except ApiError as exc:
            self._lease = None
            if is_conflict(exc):
                return "conflict"
            log.info("writing the evidence of %s failed: %s", self.node, exc)
            return "failed"
        except (HttpError, OSError) as exc:
            self._lease = None
            log.info("writing the evidence of %s failed: %s", self.node, exc or type(exc).__name__)
            return "failed"
        content = _written_content(own, carried, unconfirmed, suspected)
        self._written = (content, own.beacon, time.monotonic() if now is None else now)
        self.writes += 1
        return "ok"

    async def answer_challenge(self) -> str | None:
        """Sign a statement with the newest beacon now and write it (the challenge's answer), again
        after a failed write until one succeeds or :data:`ANSWER_WITHIN_S` has passed; returns the
        last write's result, or None when there is nothing to sign yet."""
        own = self._statements.sign_now()
        if own is None or not own.beacon:
            log.info("challenged before the first period: nothing to sign yet", extra={"kind": "challenge"})
            return None
        carried = [hb for hb in self._statements.carried_statements() if hb.origin != self.node]
        started, pause = time.monotonic(), 0.05
        while True:
            result = await self.write(own, carried)
            if result == "ok" or time.monotonic() - started + pause >= ANSWER_WITHIN_S:
                break
            self._observer.evidence_written(result)
            await asyncio.sleep(pause)  # a conflict re-reads the Lease on the next try
            pause *= 2
        log.info("answered the controller's challenge: %s", result, extra={"kind": "challenge", "result": result})
        return result

    async def _report_loop(self) -> None:
        while True:
            try:
                async with asyncio.timeout(self.tick_s):
                    await self._wake.wait()
            except TimeoutError:
                pass
            self._wake.clear()
            if self._challenged:
                self._challenged = False
                result = await self.answer_challenge()
                if result is not None:
                    self._observer.evidence_written(result)
                continue
            if not self._link.up:
                continue
            now = time.monotonic()
            wanted = self.due(now=now)
            if wanted is None:
                continue
            result = await self.write(*wanted, now=now)
            self._observer.evidence_written(result)

    async def run(self) -> None:
        """Both loops until cancelled."""
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self._watch_beacon())
            tg.create_task(self._report_loop())

"""The controller's I/O for verified evidence: it issues the beacon, and keeps
:class:`edgewatch.controller.verified.VerifiedEdge` fed from the agents' published keys and evidence
Leases.

* **Beacon** (:class:`BeaconIssuer`): every ``period_s`` a new random value, signed with the
  controller's Ed25519 key, written to the Lease ``<namespace>/edgewatch-beacon`` (annotations
  ``edgewatch.io/beacon`` and ``edgewatch.io/beacon-key``; ``spec.renewTime`` is the controller's
  clock at issue, the reference of the carry-clock admission policy and of the agents' carried
  renewals) and recorded with the controller's clock reading taken *before* the write, so a statement naming it can only look older than it is. The
  key lives in the Secret ``<namespace>/edgewatch-beacon-key`` (made by the first controller that
  needs it), so every replica signs with the same key and agents cut off from the cloud keep
  trusting beacons across a controller fail-over. Generations grow: ``max(previous + 1, now in
  ms)``, previous read from the Lease, so agents (which adopt only larger generations) follow a
  new leader at once. A challenge waiting for a beacon (``edgewatch.controller.challenges``) gets
  one at once, which names the challenged nodes (``edgewatch.io/challenge``).
* **Informers** (:class:`EvidenceInformer`): list+watch of the ConfigMaps (keys) and Leases
  (evidence) in ``edgewatch-nodes``. A key change re-verifies the evidence already seen (a statement
  refused for an unknown key may verify now).
* **Recount**: every ``recount_s``, and :data:`RECOUNT_GAP_S` after new evidence came in, the verified
  verdicts are recounted; nodes whose verdict changed go to the reconciler's queue (``on_change``).
  The early recount takes a dead node's verdict to the decision ~0.5 s sooner on average; it costs
  at most one recount of the changed groups per gap (each evidence Lease is written every 10 s, so
  at 1,000 nodes about 100 come in a second and every gap has some).

Only the leader runs this (it runs inside the reconciler). Every API call is bounded; errors are
logged and retried, never fatal.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import datetime as dt
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import Any, Final, TypeVar

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from edgewatch.core.types import is_decimal
from edgewatch.controller.challenges import Challenges, parse_names
from edgewatch.controller.verified import VerifiedEdge
from edgewatch.core.beacon import Beacon, sign_beacon
from edgewatch.core.identity import NodeKey
from edgewatch.kube.api import ApiError, AsyncClient, ConfigMap, Lease, LeaseSpec, ObjectMeta, Secret
from edgewatch.carryahead import format_ahead
from edgewatch.names import (
    ANSWERS_CHALLENGES_ANNOTATION,
    BEACON_ANNOTATION,
    BEACON_KEY_ANNOTATION,
    BEACON_LEASE_NAME,
    CARRY_AHEAD_ANNOTATION,
    CHALLENGE_ANNOTATION,
    EVIDENCE_ANNOTATION,
    IDENTITY_NAMESPACE,
    KEY_RECORD_KEY,
    SUSPECTS_ANNOTATION,
    UNCONFIRMED_DEAD_ANNOTATION,
)
from edgewatch.kube.errors import API_ERRORS, is_conflict, is_not_found
from edgewatch.kube.informer import Informer, InformerConfig
from edgewatch.kube.listwatch import lister_watcher
from edgewatch.kube.resources import CONFIGMAPS, LEASES, ApiResource
from edgewatch.kube.store import Store

__all__ = ["BEACON_SECRET_NAME", "CONTROLLER_BACKOFF_MAX_S", "BeaconIssuer", "EvidenceInformer",
           "controller_informer_config", "load_beacon_key"]

CONTROLLER_BACKOFF_MAX_S = 5.0
"""Longest wait between two tries of a failed list or watch of the controller's informers,
seconds (5 s: one process, so a short cap costs the apiserver little and the verdicts come back
within seconds of an apiserver restart; client-go's default cap is 30 s)."""

log = logging.getLogger(__name__)

BEACON_SECRET_NAME = "edgewatch-beacon-key"

RECOUNT_GAP_S: Final = 0.25
"""How long after new evidence the verdicts are recounted, seconds: evidence arriving meanwhile is
counted together."""

MIN_BEACON_GAP_S: Final = 0.2
"""Shortest time between two beacons, seconds: challenges asked meanwhile share the next one, and a
failing write is not retried in a tight loop."""
_T = TypeVar("_T")


async def _bounded(call: Awaitable[_T], timeout_s: float) -> _T:
    async with asyncio.timeout(timeout_s):
        return await call


def controller_informer_config(*, api_timeout_s: float, watch_timeout_s: float) -> InformerConfig:
    """The timings of every informer of the controller: ``api_timeout_s`` bounds a list page or
    opening a watch, a watch silent ``watch_timeout_s`` is re-opened, failures back off up to
    :data:`CONTROLLER_BACKOFF_MAX_S` (all seconds)."""
    return InformerConfig(request_timeout_s=api_timeout_s, idle_timeout_s=watch_timeout_s,
                          backoff_max_s=CONTROLLER_BACKOFF_MAX_S)


async def load_beacon_key(client: AsyncClient, *, namespace: str, api_timeout_s: float) -> NodeKey:
    """The controller's beacon key from its Secret (``BEACON_SECRET_NAME`` in ``namespace``),
    creating the Secret with a new Ed25519 key if there is none (a create race is settled by
    reading the winner's). Every replica, leading or standing by, reads the same key.

    Raises:
        API errors (retried by the caller); ValueError if the Secret holds no Ed25519 key.
    """
    try:
        secret = await _bounded(client.get(Secret, BEACON_SECRET_NAME, namespace=namespace), api_timeout_s)
    except ApiError as exc:
        if not is_not_found(exc):
            raise
        key = NodeKey.generate()
        try:
            await _bounded(client.create(Secret(
                metadata=ObjectMeta(name=BEACON_SECRET_NAME, namespace=namespace,
                                    labels={"app.kubernetes.io/part-of": "edgewatch"}),
                data={"key.pem": base64.b64encode(key.pem()).decode("ascii")})), api_timeout_s)
            return key
        except ApiError as exc2:
            if not is_conflict(exc2):
                raise
            secret = await _bounded(client.get(Secret, BEACON_SECRET_NAME, namespace=namespace), api_timeout_s)
    try:
        pem = base64.b64decode((secret.data or {}).get("key.pem", ""), validate=True)
        private = serialization.load_pem_private_key(pem, password=None)
    except (binascii.Error, ValueError, TypeError) as exc:
        raise ValueError(f"Secret {BEACON_SECRET_NAME} holds no usable key: {exc}") from None
    if not isinstance(private, Ed25519PrivateKey):
        raise ValueError(f"Secret {BEACON_SECRET_NAME} holds no Ed25519 key")
    return NodeKey(private)


class BeaconIssuer:
    """Issues the controller's beacons (see the module docstring).

    Args (keyword-only):
        client: the controller's API client.
        verified: where issued beacons are recorded.
        clock: the controller's clock (seconds), the one its plans use.
        namespace: the controller's namespace (Secret and Lease).
        period_s: seconds between beacons (default 5 s: a statement is at most one period older than
            it looks, well inside the 30 s evidence TTL).
        api_timeout_s: bound of every API call, seconds.
        carry_ahead_s: how far past the beacon's renewTime an agent's carried renewTime may be, whole
            seconds (``edgewatch.carryahead``), published with every beacon for the carry-clock
            admission policy and the agents; None publishes nothing (the policy then refuses carries).
        challenges: the open challenges (``edgewatch.controller.challenges``): a challenge waiting
            for a beacon gets one at once, naming its node (``edgewatch.io/challenge``), at most one
            beacon every :data:`MIN_BEACON_GAP_S`; None: beacons on the period only.
    """

    def __init__(self, *, client: AsyncClient, verified: VerifiedEdge, clock: Callable[[], float],
                 namespace: str = "edgewatch", period_s: float = 5.0, api_timeout_s: float = 10.0,
                 carry_ahead_s: int | None = None, challenges: Challenges | None = None) -> None:
        self.client = client
        self.challenges = challenges
        self.carry_ahead_s = carry_ahead_s
        self.verified = verified
        self.clock = clock
        self.namespace = namespace
        self.period_s = period_s
        self.api_timeout_s = api_timeout_s
        self.key: NodeKey | None = None
        self.generation = 0
        self.issued = 0

    async def load_key(self) -> NodeKey:
        """:func:`load_beacon_key` in this issuer's namespace."""
        return await load_beacon_key(self.client, namespace=self.namespace, api_timeout_s=self.api_timeout_s)

    async def issue(self) -> None:
        """Issue one beacon: record it, then write the Lease (create it if missing).

        Raises:
            API errors (the caller retries).
        """
        assert self.key is not None
        try:
            lease: Lease | None = await _bounded(
                self.client.get(Lease, BEACON_LEASE_NAME, namespace=self.namespace), self.api_timeout_s)
        except ApiError as exc:
            if not is_not_found(exc):
                raise
            lease = None
        annotations = dict((lease.metadata.annotations or {}) if lease is not None and lease.metadata else {})
        previous = annotations.get(BEACON_ANNOTATION, "").split(".", 1)[0]
        if is_decimal(previous):
            self.generation = max(self.generation, int(previous))
        beacon = Beacon(generation=max(self.generation + 1, time.time_ns() // 1_000_000),
                        value=secrets.token_hex(16))
        recorded_at = self.clock()
        self.verified.beacons.record(beacon.value, at=recorded_at)
        annotations[BEACON_ANNOTATION] = sign_beacon(beacon, self.key)
        challenged = self.challenges.waiting() if self.challenges is not None else []
        if challenged:
            annotations[CHALLENGE_ANNOTATION] = ",".join(challenged)
        else:
            annotations.pop(CHALLENGE_ANNOTATION, None)
        annotations[BEACON_KEY_ANNOTATION] = base64.b64encode(self.key.public_raw).decode("ascii")
        if self.carry_ahead_s is not None:
            annotations[CARRY_AHEAD_ANNOTATION] = format_ahead(self.carry_ahead_s)
        # renewTime: the controller's clock at issue, the reference the carry policy bounds an
        # agent's renewTime by and the clock agents write carried renewals in (agent.cloudclock)
        renew = dt.datetime.fromtimestamp(self.clock(), dt.UTC)
        if lease is None:
            await _bounded(self.client.create(Lease(metadata=ObjectMeta(
                name=BEACON_LEASE_NAME, namespace=self.namespace, annotations=annotations,
                labels={"app.kubernetes.io/part-of": "edgewatch"}),
                spec=LeaseSpec(renewTime=renew))), self.api_timeout_s)
        else:
            lease.metadata.annotations = annotations
            if lease.spec is None:
                lease.spec = LeaseSpec()
            lease.spec.renewTime = renew
            await _bounded(self.client.replace(lease), self.api_timeout_s)
        self.generation = beacon.generation
        self.issued += 1
        if self.challenges is not None:
            if challenged:
                log.info("beacon %d challenges %s", beacon.generation, ", ".join(challenged),
                         extra={"kind": "challenge", "nodes": challenged})
            self.challenges.issued(challenged, recorded_at=recorded_at, written_at=self.clock())

    async def run(self) -> None:
        """Load the key, then issue a beacon every ``period_s`` until cancelled."""
        while self.key is None:
            try:
                self.key = await self.load_key()
            except (*API_ERRORS, ValueError) as exc:
                log.error("cannot load the beacon key: %s; retrying", exc or type(exc).__name__)
                await asyncio.sleep(2)
        while True:
            try:
                await self.issue()
            except API_ERRORS as exc:
                log.info("issuing a beacon failed: %s", exc or type(exc).__name__)
                await asyncio.sleep(1.0)  # a failing write is not retried at the challenge pace
            await asyncio.sleep(MIN_BEACON_GAP_S)
            if self.challenges is not None:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.period_s - MIN_BEACON_GAP_S):
                        await self.challenges.wanted.wait()  # a challenge waits: its beacon now
            else:
                await asyncio.sleep(self.period_s - MIN_BEACON_GAP_S)


class EvidenceInformer:
    """Feeds :class:`VerifiedEdge` from ``edgewatch-nodes`` and recounts (see the module docstring).

    Args (keyword-only):
        client: the controller's API client.
        verified: the verified edge view.
        clock: the controller's clock (seconds).
        on_change: called with each node whose verified verdict changed (the reconciler's queue).
        namespace: where the keys and evidence live (default ``edgewatch-nodes``).
        recount_s: seconds between recounts (default 1 s).
        watch_timeout_s: a watch silent this long is re-opened, seconds (the informer's
            ``idle_timeout_s``; default 150 s).
        api_timeout_s: seconds each list page may take (the informer's ``request_timeout_s``;
            default 10 s, as the informer's own default).
        challenges: told which agents answer challenges (their evidence Lease's
            ``edgewatch.io/answers-challenges``) and of each new evidence of a node (None: nobody).
    """

    def __init__(self, *, client: AsyncClient, verified: VerifiedEdge, clock: Callable[[], float],
                 on_change: Callable[[str], None], namespace: str = IDENTITY_NAMESPACE, recount_s: float = 1.0,
                 watch_timeout_s: float = 150.0, api_timeout_s: float = 10.0,
                 challenges: Challenges | None = None) -> None:
        self.client = client
        self.challenges = challenges
        self.verified = verified
        self.clock = clock
        self.on_change = on_change
        self.namespace = namespace
        self.recount_s = recount_s
        self.watch_timeout_s = watch_timeout_s
        self.informer_config = controller_informer_config(api_timeout_s=api_timeout_s,
                                                          watch_timeout_s=watch_timeout_s)
        self._texts: dict[str, str] = {}  # writer -> its last evidence text
        self._news = asyncio.Event()  # new evidence since the last recount

    def on_keys(self, op: str, cm: ConfigMap) -> None:
        """A key record event."""
        name = cm.metadata.name
        before = self.verified.keys.keys_of(name)
        # A ConfigMap without a key record is no node's keys (e.g. kube-root-ca.crt, which
        # kube-controller-manager puts in every namespace): as if deleted, not a refusal.
        self.verified.apply_keys(name, None if op == "DELETED" else (cm.data or {}).get(KEY_RECORD_KEY))
        if self.verified.keys.keys_of(name) != before:
            for writer, text in list(self._texts.items()):  # statements refused for an unknown key
                self.verified.apply_evidence(writer, text)

    def on_evidence(self, op: str, lease: Lease) -> None:
        """An evidence Lease event."""
        name = lease.metadata.name
        if op == "DELETED":
            self._texts.pop(name, None)
            if self.challenges is not None:
                self.challenges.answers(name, mark=None)
                self.challenges.unconfirmed(name, None)
            if self.verified.set_suspicions(name, frozenset()):
                self._news.set()
            return
        annotations = lease.metadata.annotations or {}
        text = annotations.get(EVIDENCE_ANNOTATION, "")
        if self.challenges is not None:
            self.challenges.answers(name, mark=annotations.get(ANSWERS_CHALLENGES_ANNOTATION))
            self.challenges.unconfirmed(name, annotations.get(UNCONFIRMED_DEAD_ANNOTATION))
        if text and self._texts.get(name) != text:
            self._texts[name] = text
            if "new" in self.verified.apply_evidence(name, text):
                self._news.set()
            if self.challenges is not None:
                self.challenges.statement_came(name)
        if self.verified.set_suspicions(name, parse_names(annotations.get(SUSPECTS_ANNOTATION))):
            self._news.set()  # bound to the statement just taken in

    async def _informer(self, resource: ApiResource, model: Any, on_event: Callable[[str, Any], None]) -> None:
        """The cloud door's informer over ``resource`` in our namespace; a re-list hands over
        exact changes (objects deleted while the watch was down included)."""
        informer: Informer[Any] = Informer(
            source=lister_watcher(self.client, resource, namespace=self.namespace), sink=Store(on_event=on_event),
            decode=model.from_dict, name="evidence", config=self.informer_config)
        await informer.run()

    async def _recount(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.recount_s):
                    await self._news.wait()
                    await asyncio.sleep(RECOUNT_GAP_S)
            self._news.clear()
            for node in sorted(self.verified.recount_all(now=self.clock())):
                self.on_change(node)

    async def run(self) -> None:
        """Informers and recount until cancelled."""
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self._informer(CONFIGMAPS, ConfigMap, self.on_keys))
            tg.create_task(self._informer(LEASES, Lease, self.on_evidence))
            tg.create_task(self._recount())

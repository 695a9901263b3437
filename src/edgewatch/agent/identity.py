"""The agent's identity on the cluster: publish this node's public keys, and keep every other
node's published keys current for the peer wire (:class:`edgewatch.core.identity.PublicKeys`).

This node's record goes to the ConfigMap ``edgewatch-nodes/<node>`` (key ``keys``), and beside it
its exchange key record (key ``exchange-key``: the X25519 key of peer protocol v6's pair keys, signed
by this node's signing key, ``edgewatch.core.pairkey``). The apiserver
lets only an agent whose pod-bound ServiceAccount token names this node write that object
(``deploy/15-policy-agent.yaml``: the token's ``authentication.kubernetes.io/node-name`` claim),
so a published record is bound to its node by the cluster itself; no shared secret exists. Each key
in it carries its proof of possession over this node's name (``edgewatch.core.identity``), so no
other node can claim it as its own ("key squatting").

Publishing is level-triggered: the record is (re)written whenever the object is missing or holds
anything else, with the resourceVersion read (a concurrent writer wins with 409 and we look again).
The other nodes' records come from one list+watch of the namespace (the cloud door's informer,
``edgewatch.agent.watching.follow``: a re-list hands over exact changes, records deleted while the
watch was down included); a malformed record, one with a key whose proof does not verify for that
node, or one claiming a key another node already published, is refused (log line,
``events.key_record_refused(reason)``) and the node's previous keys stay. An exchange key record is
read after its node's keys, and kept only if one of them signed it for that node; otherwise (or
without one: an agent older than v6) the node has no exchange key (``bad_exchange_key`` counted
for a bad one). With ``state_dir`` the
known records are kept on disk, so an agent restarted while its node is cut off from the cloud still
verifies its peers (best effort: a failed save is logged and counted, never fatal); saved records
are checked again when loaded.

Limits: every agent watches every node's record (a small object that changes only on rotation:
O(nodes) bytes once, then nothing); records of deleted nodes are dropped on the DELETED event. A
refused record is judged again only when it changes (or the agent restarts), not when the record it
conflicted with goes away.
"""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Protocol

from edgewatch.agent.ports import Unobserved, WatchEvents
from edgewatch.agent.watching import follow, informer_config
from edgewatch.core.identity import KeyRecordError, NodeKeyring
from edgewatch.core.pairkey import ExchangeKey, ExchangeRecordError, format_exchange_record, verify_exchange_record
from edgewatch.core.types import NodeName, is_node_name
from edgewatch.kube.api import ApiError, AsyncClient, ConfigMap, ObjectMeta
from edgewatch.names import EXCHANGE_KEY_RECORD_KEY, IDENTITY_NAMESPACE, KEY_RECORD_KEY
from edgewatch.statefile import replace_file
from edgewatch.kube.errors import API_ERRORS, is_not_found
from edgewatch.kube.resources import CONFIGMAPS

log = logging.getLogger(__name__)

__all__ = ["IdentityEvents", "IdentityKeeper"]

_STATE_FILE = "public-keys.json"
_EXCHANGE_STATE_FILE = "exchange-keys.json"  # apart, so an older agent reads public-keys.json as before
BAD_EXCHANGE_KEY = "bad_exchange_key"


class IdentityEvents(WatchEvents, Protocol):
    """What :class:`IdentityKeeper` tells the agent (its metrics count it): each watch event
    received (``watch_event_received("keys")``) and each refused record."""

    def key_record_refused(self, reason: str) -> None:
        """Another node's record was refused: ``bad_key_record``, ``bad_key_proof`` (a key without
        a valid proof of possession for that node), ``key_conflict`` or ``bad_exchange_key`` (an
        exchange key record its node's keys did not sign)."""
        ...


class IdentityKeeper:
    """Publishes this node's key record and keeps the others' records in ``keyring.public``.

    Args (keyword-only):
        client: API client (the agent's own identity).
        keyring: this node's keyring; its ``public`` registry is updated here.
        namespace: where the records live (default ``edgewatch-nodes``).
        state_dir: where to keep known records across restarts (None: memory only).
        retry_s: pause after a failed publish, seconds; also the first pause after a failed list
            or watch (later ones double up to ``edgewatch.agent.watching.AGENT_BACKOFF_MAX_S``).
        idle_timeout_s: re-open a watch that delivers nothing, not even the apiserver's bookmark
            (about one a minute), for this long, seconds.
        api_timeout_s: bound of one list page or of opening the watch, seconds (default 10 s, the
            informer's: a page of records over a thin uplink).
        events: told of each refused record and each watch event received (the per-agent API
            load metric; :class:`IdentityEvents`; default: nobody).
        exchange_key: this node's exchange key, published signed by its signing key (None: none
            published, and no peer's is kept).
    """

    def __init__(self, *, client: AsyncClient, keyring: NodeKeyring, namespace: str = IDENTITY_NAMESPACE,
                 state_dir: Path | None = None, retry_s: float = 2.0, idle_timeout_s: float = 150.0,
                 api_timeout_s: float = 10.0, events: IdentityEvents | None = None,
                 exchange_key: ExchangeKey | None = None) -> None:
        self.client = client
        self.keyring = keyring
        self.namespace = namespace
        self.state_dir = state_dir
        self._observer: IdentityEvents = events if events is not None else Unobserved()
        self.retry_s = retry_s
        self.idle_timeout_s = idle_timeout_s
        self.api_timeout_s = api_timeout_s
        self.published = asyncio.Event()
        self._records: dict[NodeName, str] = {}
        self._exchange_record = None if exchange_key is None else format_exchange_record(
            exchange_key, identity=keyring.own_keys[0], node=keyring.node)
        self._exchange_records: dict[NodeName, str] = {}  # as published (verified or not)
        self._exchange: dict[NodeName, bytes] = {}         # verified raw X25519 public keys
        self._republish = asyncio.Event()
        self._loading = False
        self._load()

    def exchange_key_of(self, node: NodeName) -> bytes | None:
        """``node``'s raw X25519 exchange key, verified against its published keys; None if it
        published none, a bad one, or none is known yet (``edgewatch.agent.datagrams``)."""
        return self._exchange.get(node)

    # -- records ----------------------------------------------------------------------------------

    def apply(self, node: str, record: str | None, exchange: str | None = None) -> bool:
        """Adopt ``node``'s published record (None: deleted) and exchange key record (None: none).
        Returns False if the key record was refused. This node's own records are never taken from
        the cloud (our keys are our own)."""
        if node == self.keyring.node:
            if record != self.keyring.record() or (self._exchange_record is not None
                                                   and exchange != self._exchange_record):
                self._republish.set()
            return True
        if not is_node_name(node):
            return False
        name = NodeName(node)
        if record is None:
            self.keyring.public.remove(name)
            self._exchange.pop(name, None)
            keys_gone = self._records.pop(name, None) is not None
            exchange_gone = self._exchange_records.pop(name, None) is not None
            self._save(keys=keys_gone, exchange=exchange_gone)
            return True
        try:
            changed = self.keyring.public.update(name, record)
        except KeyRecordError as exc:
            log.warning("refusing the key record of %s (%s): %s", name, exc.reason, exc,
                        extra={"kind": "key_rejected", "node": name, "reason": exc.reason})
            self._observer.key_record_refused(exc.reason)
            return False
        if changed:
            log.info("keys of %s: %s", name, ", ".join(self.keyring.public.keys_of(name)),
                     extra={"kind": "keys", "node": name})
        self._apply_exchange(name, exchange)
        keys_changed = self._records.get(name) != record
        exchange_changed = self._exchange_records.get(name) != exchange
        self._records[name] = record
        if exchange is None:
            self._exchange_records.pop(name, None)
        else:
            self._exchange_records[name] = exchange
        self._save(keys=keys_changed, exchange=exchange_changed)
        return True

    def _apply_exchange(self, name: NodeName, exchange: str | None) -> None:
        """Keep ``name``'s exchange key if one of its (just adopted) keys signed it for it."""
        if self._exchange_record is None or exchange is None:
            self._exchange.pop(name, None)
            return
        try:
            public = verify_exchange_record(node=name, text=exchange,
                                            identity_keys=self.keyring.public.identity_keys(name))
        except ExchangeRecordError as exc:
            if self._exchange.pop(name, None) is not None or self._exchange_records.get(name) != exchange:
                log.warning("refusing the exchange key of %s: %s", name, exc,
                            extra={"kind": "key_rejected", "node": name, "reason": BAD_EXCHANGE_KEY})
                self._observer.key_record_refused(BAD_EXCHANGE_KEY)
            return
        self._exchange[name] = public

    def _load(self) -> None:
        if self.state_dir is None:
            return
        path = self.state_dir / _STATE_FILE
        try:
            saved = json.loads(path.read_text())
        except FileNotFoundError:
            return
        except (OSError, ValueError) as exc:
            log.warning("ignoring %s: %s", path, exc)
            return
        exchange: object = {}
        try:
            exchange = json.loads((self.state_dir / _EXCHANGE_STATE_FILE).read_text())
        except FileNotFoundError:
            pass
        except (OSError, ValueError) as exc:
            log.warning("ignoring %s: %s", self.state_dir / _EXCHANGE_STATE_FILE, exc)
        if not isinstance(exchange, dict):
            exchange = {}
        if isinstance(saved, dict):
            self._loading = True  # one save at the end, not one per record
            try:
                for node, record in saved.items():
                    if isinstance(node, str) and isinstance(record, str):
                        text = exchange.get(node)
                        self.apply(node, record, text if isinstance(text, str) else None)
            finally:
                self._loading = False
            self._save(keys=True, exchange=True)  # what was refused is not kept

    def _save(self, *, keys: bool, exchange: bool) -> None:
        """Rewrite the state file of the records that changed (``keys``, ``exchange``)."""
        if self.state_dir is None or self._loading:
            return
        for name, records, changed in ((_STATE_FILE, self._records, keys),
                                       (_EXCHANGE_STATE_FILE, self._exchange_records, exchange)):
            if not changed:
                continue
            path = self.state_dir / name
            try:
                replace_file(path, json.dumps(records, sort_keys=True))
            except OSError as exc:
                log.info("cannot save known keys to %s: %s", path, exc)

    # -- loops --------------------------------------------------------------------------------------

    async def run(self) -> None:
        """Publish and watch until cancelled."""
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self._publish_loop())
            tg.create_task(self._watch_loop())

    async def publish(self) -> bool:
        """Make ``edgewatch-nodes/<node>`` hold this node's record; True when it does. Errors are
        logged, never raised."""
        node, record = self.keyring.node, self.keyring.record()
        wanted = {KEY_RECORD_KEY: record}
        if self._exchange_record is not None:
            wanted[EXCHANGE_KEY_RECORD_KEY] = self._exchange_record
        try:
            try:
                current = await self.client.get(ConfigMap, node, namespace=self.namespace)
            except ApiError as exc:
                if not is_not_found(exc):
                    raise
                await self.client.create(ConfigMap(metadata=ObjectMeta(
                    name=node, namespace=self.namespace, labels={"app.kubernetes.io/part-of": "edgewatch"}),
                    data=wanted))
            else:
                if any((current.data or {}).get(k) != v for k, v in wanted.items()):
                    current.data = {**(current.data or {}), **wanted}
                    await self.client.replace(current)  # carries the resourceVersion read: 409 if raced
        except API_ERRORS as exc:
            log.info("publishing the keys of %s failed: %s", node, exc or type(exc).__name__)
            return False
        if not self.published.is_set():
            log.info("published the keys of %s: %s", node, self.keyring.primary_key_id,
                     extra={"kind": "keys_published", "node": node})
        self.published.set()
        return True

    async def _publish_loop(self) -> None:
        while True:
            self._republish.clear()
            if not await self.publish():
                await asyncio.sleep(self.retry_s)
                continue
            await self._republish.wait()

    async def _watch_loop(self) -> None:
        """Every record of the namespace, until cancelled: each change adopted (:meth:`apply`; a
        deleted record: the node's keys are forgotten). After each list, a record known before
        (the state folder) that is no longer there is forgotten too, and this node's own record is
        published if it is missing."""
        def on_record(op: str, cm: ConfigMap) -> None:
            # no key record in it (kube-root-ca.crt, which every namespace gets): no keys, not a refusal
            data = {} if op == "DELETED" else (cm.data or {})
            self.apply(cm.metadata.name, data.get(KEY_RECORD_KEY), data.get(EXCHANGE_KEY_RECORD_KEY))

        def listed(found: list[ConfigMap]) -> None:
            seen = {cm.metadata.name for cm in found}
            for gone in [n for n in self._records if n not in seen]:
                self.apply(gone, None)
            if self.keyring.node not in seen:
                self._republish.set()

        await follow(self.client, CONFIGMAPS, model=ConfigMap, name="keys", on_event=on_record, on_list=listed,
                     events=self._observer, namespace=self.namespace,
                     config=informer_config(request_timeout_s=self.api_timeout_s, idle_timeout_s=self.idle_timeout_s,
                                            retry_s=self.retry_s))

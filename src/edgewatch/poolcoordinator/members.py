"""The pool coordinator's access control loop: etcd's users and roles follow the pool's Nodes
(docs/security.md).

It lists and watches the Nodes labelled ``edgewatch.io/pool=<pool>`` (one
:class:`edgewatch.kube.Informer` with that label selector, its :class:`edgewatch.kube.store.Store`;
a Node whose label is removed or changed leaves the selection, which the watch reports as a
deletion), and after every change of the set of names, once no further change came for
``debounce_s`` (a rollout relabelling many Nodes costs one reconcile; never more than
``max_debounce_s`` after the first, so a label flapping faster cannot hold it back), it calls
:func:`edgewatch.pooletcd.provisioner.reconcile_acl` for those names with the root certificate
(one user and role per member node, less for a member over its write quota, whose suspensions
change with :meth:`MembersLoop.kick`, reconciled at once; a departed node's user is deleted;
authentication on). A
failed reconcile (etcd not up yet, a timeout) is retried after a capped jittered backoff
(``edgewatch.kube.backoff``) with the names current then. Every ``resync_s`` the reconcile runs
again even without a change (an etcd whose data was lost gets its users back; nothing changes
otherwise: the provisioner is idempotent).

State for readiness and metrics: :attr:`MembersLoop.members` (the names now),
:attr:`MembersLoop.reconciled` (the names of the last successful reconcile) and
:meth:`MembersLoop.current` (both equal, after the first list).

Limits: the pool's membership is what the apiserver said last; while the cloud is unreachable
the users stay as they were (a node that left the pool then keeps its access until the cloud
comes back).
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable, Iterable

import grpc

from edgewatch.kube.api import Node
from edgewatch.kube.backoff import backoff_delay
from edgewatch.kube.informer import Informer, InformerConfig
from edgewatch.kube.listwatch import lister_watcher
from edgewatch.kube.resources import NODES
from edgewatch.kube.store import Store
from edgewatch.names import POOL_LABEL
from edgewatch.pooletcd.acl import Suspensions
from edgewatch.pooletcd.provisioner import AclError, AclResult, reconcile_acl

__all__ = ["MembersLoop", "Reconcile", "pool_selector"]

log = logging.getLogger(__name__)

Reconcile = Callable[..., Awaitable[AclResult]]
"""``reconcile_acl``'s signature (keyword arguments ``target``, ``credentials``, ``pool``,
``members``, ``timeout_s``, ``suspended``)."""


def pool_selector(pool: str) -> str:
    """The label selector of the pool's Nodes: ``edgewatch.io/pool=<pool>``."""
    return f"{POOL_LABEL}={pool}"


def _ignore(_result: str) -> None:
    return None


class MembersLoop:
    """Keeps etcd's access control equal to the pool's Nodes (module docstring).

    Args (keyword-only):
        client: the API client (``list`` and ``watch`` on Nodes).
        pool: the pool.
        target: etcd's client endpoint, ``host:port`` (loopback: ``127.0.0.1:<port>``).
        credentials: makes the root TLS credentials (called for every reconcile, so a rotated
            root certificate is used); may raise ``OSError`` (counted as ``unreadable``).
        timeout_s: bound of each etcd call, seconds.
        debounce_s: quiet time after a change before reconciling, seconds (default 1 s).
        max_debounce_s: the longest a reconcile waits for quiet, seconds (default 10 s).
        resync_s: reconcile again after this long without a change, seconds (default 300 s).
        backoff_initial_s / backoff_cap_s: retry delays after a failure, seconds (default 1 s to 10 s).
        informer_config: the Node informer's timings.
        on_result: told each reconcile's result (``ok`` or the ``AclError`` reason); must not raise.
        suspended: the members over their write quota now (``edgewatch.pooletcd.quota``); read at
            each reconcile, and :meth:`kick` after it changes.
        reconcile: the reconcile function (``reconcile_acl``; a test's fake).
        rng: random source of the jitter.
    """

    def __init__(self, *, client: object, pool: str, target: str, credentials: Callable[[], grpc.ChannelCredentials],
                 timeout_s: float, debounce_s: float = 1.0, max_debounce_s: float = 10.0, resync_s: float = 300.0, backoff_initial_s: float = 1.0,
                 backoff_cap_s: float = 10.0, informer_config: InformerConfig | None = None,
                 on_result: Callable[[str], None] = _ignore, reconcile: Reconcile = reconcile_acl,
                 rng: random.Random | None = None, suspended: Callable[[], Suspensions] = Suspensions) -> None:
        self.pool = pool
        self._suspended = suspended
        self.target = target
        self._credentials = credentials
        self.timeout_s = timeout_s
        self.debounce_s = debounce_s
        self.max_debounce_s = max_debounce_s
        self.resync_s = resync_s
        self.backoff_initial_s = backoff_initial_s
        self.backoff_cap_s = backoff_cap_s
        self._on_result = on_result
        self._reconcile = reconcile
        self._rng = rng
        self._changed = asyncio.Event()
        self._urgent = False  # kicked: reconcile without the debounce
        self.store: Store[Node] = Store(on_event=self._on_node)
        self.informer: Informer[Node] = Informer(
            source=lister_watcher(client, NODES, label_selector=pool_selector(pool)), sink=self.store,
            decode=Node.from_dict, config=informer_config, name="pool-coordinator")
        self.members: frozenset[str] = frozenset()
        self.reconciled: frozenset[str] | None = None

    def current(self) -> bool:
        """True once the Nodes were listed and the last successful reconcile was for the names now."""
        return self.store.synced.is_set() and self.reconciled == self.members

    def kick(self) -> None:
        """Reconcile at once (no debounce) although the members did not change: the suspended
        members did, and every second a member over its quota keeps writing counts."""
        self._urgent = True
        self._changed.set()

    def _on_node(self, _op: str, _node: Node) -> None:
        names = frozenset(self.store.objects)
        if names != self.members:
            self.members = names
            self._changed.set()

    async def run(self) -> None:
        """Watch the Nodes and reconcile until cancelled; never raises for API or etcd errors."""
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self.informer.run())
            tg.create_task(self._reconcile_loop())

    async def _reconcile_loop(self) -> None:
        await self.store.synced.wait()
        attempt = 0
        while True:
            # debounce: until debounce_s pass without a change, but never longer than max_debounce_s
            # (a label flapping faster than the debounce must not hold every reconcile back); none
            # after a kick
            first = asyncio.get_running_loop().time()
            while True:
                self._changed.clear()
                if self._urgent:
                    self._urgent = False
                    break
                await asyncio.sleep(self.debounce_s)
                if not self._changed.is_set() or asyncio.get_running_loop().time() - first >= self.max_debounce_s:
                    break
            if await self._reconcile_once(self.members):
                attempt = 0
                try:
                    async with asyncio.timeout(self.resync_s):
                        await self._changed.wait()
                except TimeoutError:
                    pass
            else:
                attempt += 1
                await asyncio.sleep(backoff_delay(attempt, initial=self.backoff_initial_s, cap=self.backoff_cap_s,
                                                  rng=self._rng))

    async def _reconcile_once(self, members: Iterable[str]) -> bool:
        names = frozenset(members)
        try:
            result = await self._reconcile(target=self.target, credentials=self._credentials(), pool=self.pool,
                                           members=sorted(names), timeout_s=self.timeout_s,
                                           suspended=self._suspended().of(names))
        except AclError as exc:
            log.warning("pool etcd access control not reconciled: %s", exc,
                        extra={"pool": self.pool, "reason": exc.reason})
            self._on_result(exc.reason)
            return False
        except OSError as exc:
            log.warning("pool etcd access control not reconciled: root certificate unreadable: %s", exc,
                        extra={"pool": self.pool})
            self._on_result("unreadable")
            return False
        self.reconciled = names
        self._on_result("ok")
        if result.steps or result.enabled_auth:
            log.info("pool etcd members reconciled", extra={"pool": self.pool, "members": len(names),
                                                            "steps": len(result.steps)})
        return True

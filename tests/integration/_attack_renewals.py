"""Attack 1 (docs/security.md): a compromised node renews other nodes' Leases (tests in test_adversary.py).

kube-controller-manager counts any renewal of a node's Lease as the node's heartbeat, and the
agent's RBAC grants update on every Lease in kube-node-lease (it carries cut-off peers). With a-1's
real pod-bound token the attacker tries what that grant allowed before the carry policies:

* a **bare renewal** of dead a-5's Lease every 2 s (no delegate mark): on the old manifests every
  one was accepted, a-5 stayed Ready with its dead pods in every Service, forever;
* a **far-future renewal** of live a-2's Lease (marked as carried by a-1): kube-controller-manager
  counts a renewal only when renewTime grows, so it would ignore a-2's kubelet until then.

Both must be refused by the apiserver, and the dead node failed and evicted as without the attacker.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import time
from collections.abc import Awaitable, Callable, Iterator

from _attacker import Attacker, taints
from _pool import edge, node, wait
from lightkube import ApiError, AsyncClient
from lightkube.resources.coordination_v1 import Lease
from lightkube.types import PatchType

from edgewatch.names import FAILED_TAINT_KEY, NODE_LEASE_NAMESPACE
from edgewatch_lab.playground.cluster import PlaygroundCluster
from edgewatch.timefmt import format_micro_time

CARRY_POLICY = "edgewatch-agent-carry-mark"  # a bare renewal has no mark
CLOCK_POLICY = "edgewatch-agent-carry-clock"
DEADLINE_POLICY = "edgewatch-agent-carry"  # the group index, with its carry deadline


def _ready(c: PlaygroundCluster, name: str) -> str | None:
    conditions = node(c, name)["status"].get("conditions", [])
    return next((x["status"] for x in conditions if x["type"] == "Ready"), None)


def _refused_by(exc: ApiError, policy: str) -> bool:
    return exc.status.code == 403 and policy in (exc.status.message or "")


def _healthy(c: PlaygroundCluster, name: str) -> bool:
    return edge(c, name) == "True" and FAILED_TAINT_KEY + ":NoExecute" not in taints(c, name)


@contextlib.contextmanager
def _killed(c: PlaygroundCluster, name: str) -> Iterator[float]:
    """Kill ``name`` once it is healthy (an earlier test may have just revived it); yield the kill's
    monotonic time; revive it and wait until it is healthy again, whatever happened."""
    wait(lambda: _healthy(c, name), 120, f"{name} healthy before the attack")
    c.kill_node(name)
    try:
        yield time.monotonic()
    finally:
        c.revive_node(name)
        wait(lambda: _healthy(c, name), 120, f"{name} healthy again after revive")


async def _rounds_until_failed(c: PlaygroundCluster, attacker: Attacker, killed: float,
                               round_: Callable[[AsyncClient], Awaitable[None]], *, min_rounds: int) -> float | None:
    """Play ``round_`` with the attacker's client every 2 s (for at most 60 s after the kill) until
    a-5 carries the failed taint and ``min_rounds`` were played; seconds from the kill to the
    taint, or None if it never came."""
    client = attacker.client()
    rounds = 0
    failed_after: float | None = None
    try:
        while time.monotonic() - killed < 60:
            await round_(client)
            rounds += 1
            if failed_after is None and FAILED_TAINT_KEY + ":NoExecute" in taints(c, "a-5"):
                failed_after = time.monotonic() - killed
            if failed_after is not None and rounds >= min_rounds:
                break
            await asyncio.sleep(2)
    finally:
        await client.close()
    return failed_after


def attack_bare_renewals_of_a_dead_node(c: PlaygroundCluster) -> float:
    """a-5 is killed; a-1 renews its Lease with no mark every 2 s. Returns seconds from the kill
    to the failed taint (with every renewal refused)."""
    attacker = Attacker(c)
    with _killed(c, "a-5") as killed:
        tried = refused = 0

        async def bare_renewal(client: AsyncClient) -> None:
            nonlocal tried, refused
            body = {"spec": {"renewTime": format_micro_time(dt.datetime.now(dt.UTC))}}
            tried += 1
            try:
                await client.patch(Lease, "a-5", body, namespace=NODE_LEASE_NAMESPACE, patch_type=PatchType.MERGE)
            except ApiError as exc:
                assert _refused_by(exc, CARRY_POLICY), f"{exc.status.code} {exc.status.message}"
                refused += 1

        failed_after = asyncio.run(_rounds_until_failed(c, attacker, killed, bare_renewal, min_rounds=10))
        assert refused == tried > 0, f"{tried - refused} of {tried} bare renewals were accepted"
        assert failed_after is not None, "the dead node was never judged failed"
        print(f"\nbare renewals of a dead node: {refused}/{tried} refused; failed after {failed_after:.1f} s")
        # kube-controller-manager sees no heartbeat either: the node goes NotReady as it should
        wait(lambda: _ready(c, "a-5") != "True", 60, "a-5 NotReady for kube-controller-manager")
        return failed_after


def attack_future_renewal(c: PlaygroundCluster) -> None:
    """a-1 writes a renewTime years ahead on live a-2's Lease, marked as its own carry (all the
    other policies satisfied): refused, by the carry-clock policy (more than 5 s past the control
    plane's clock) and, 5 minutes or more ahead, also by the carry policy (past the group index's
    carry deadline; the apiserver names the first policy that denies); a-2 stays Ready."""
    attacker = Attacker(c)

    async def attack() -> list[str]:
        client = attacker.client()
        refusals = []
        try:
            for ahead in (dt.timedelta(days=365 * 4), dt.timedelta(minutes=5), dt.timedelta(seconds=60)):
                lease = await client.get(Lease, "a-2", namespace=NODE_LEASE_NAMESPACE)
                renew = dt.datetime.now(dt.UTC) + ahead
                lease.spec.renewTime = renew
                lease.metadata.annotations = {**(lease.metadata.annotations or {}),
                                              "edgewatch.io/delegate-heartbeat": "true",
                                              "edgewatch.io/delegated-by": attacker.node,
                                              "edgewatch.io/delegated-renew-time": format_micro_time(renew),
                                              "edgewatch.io/delegated-via": "peer"}
                try:
                    await client.replace(lease)
                except ApiError as exc:
                    message = exc.status.message or ""
                    by_deadline = exc.status.code == 403 and f"'{DEADLINE_POLICY}'" in message \
                        and "past edgewatch.io/carry-until" in message
                    assert _refused_by(exc, CLOCK_POLICY) or (ahead >= dt.timedelta(minutes=5) and by_deadline), \
                        f"{exc.status.code} {message}"
                    refusals.append(message)
        finally:
            await client.close()
        return refusals

    refusals = asyncio.run(attack())
    assert len(refusals) == 3, refusals
    assert "past the control plane's clock" in refusals[-1], refusals  # 60 s: the clock bound alone
    lease = json.loads(c.cp.kubectl("get", "lease", "a-2", "-n", NODE_LEASE_NAMESPACE, "-o", "json"))  # type: ignore[union-attr]
    assert not lease["spec"]["renewTime"].startswith(str(dt.datetime.now(dt.UTC).year + 4))
    for _ in range(20):  # a-2's kubelet keeps counting: Ready, healthy, untainted
        assert _ready(c, "a-2") == "True" and edge(c, "a-2") == "True"
        assert FAILED_TAINT_KEY + ":NoExecute" not in taints(c, "a-2")
        time.sleep(1)


def attack_carries_ahead_of_a_live_node(c: PlaygroundCluster, *, duration_s: float = 45) -> tuple[int, int, int]:
    """The measured attack on the bound: a-1 carries live a-2's Lease as far ahead of the
    control plane's clock as the apiserver admits (kube-controller-manager's leader Lease's
    renewTime + 5 s),
    then waits until a-2's kubelet renews past it, and again; kube-controller-manager counts a
    renewal only when renewTime grows, so each carry hides the kubelet's renewals until then. With
    the old fixed 30 s bound (test grace 20 s) a-2 went NotReady 5 times in 100 s. Returns (carries
    admitted, carries past the bound refused, samples of a-2 not Ready)."""
    attacker = Attacker(c)

    def text(at: dt.datetime) -> str:  # by hand, not with the formatter under test
        return at.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")

    async def attack() -> tuple[int, int, int]:
        client = attacker.client()
        ahead = 5  # s: the bound as deploy/15-policy-agent.yaml spells it (not the code's constant)
        admitted = refused = not_ready = 0
        deadline = time.monotonic() + duration_s
        try:
            while time.monotonic() < deadline:
                # the control plane's clock as the policy reads it: kube-controller-manager's
                # leader Lease (the agent's token may read it), renewed every 2 s, so the
                # apiserver's reading may be one renewal newer than ours: the refused probe is
                # 4 s past the bound, beyond that
                clock = await client.get(Lease, "kube-controller-manager", namespace="kube-system")
                base = clock.spec.renewTime
                target = base + dt.timedelta(seconds=ahead)
                for renew, allowed in ((target + dt.timedelta(seconds=4), False), (target, True)):
                    lease = await client.get(Lease, "a-2", namespace=NODE_LEASE_NAMESPACE)
                    lease.spec.renewTime = renew
                    lease.metadata.annotations = {**(lease.metadata.annotations or {}),
                                                  "edgewatch.io/delegate-heartbeat": "true",
                                                  "edgewatch.io/delegated-by": attacker.node,
                                                  "edgewatch.io/delegated-renew-time": text(renew),
                                                  "edgewatch.io/delegated-via": "peer"}
                    try:
                        await client.replace(lease)
                        assert allowed, f"a carry {ahead + 4} s past the control plane's clock was admitted"
                        admitted += 1
                    except ApiError as exc:  # an allowed one may race a newer beacon or the kubelet (409)
                        assert exc.status.code in (403, 409), f"{exc.status.code} {exc.status.message}"
                        if not allowed:
                            assert _refused_by(exc, CLOCK_POLICY), exc.status.message
                            refused += 1
                while time.monotonic() < deadline:  # until the kubelet renews past the carry
                    not_ready += _ready(c, "a-2") != "True"
                    lease = await client.get(Lease, "a-2", namespace=NODE_LEASE_NAMESPACE)
                    if lease.spec.renewTime > target:
                        break
                    await asyncio.sleep(1)
        finally:
            await client.close()
        return admitted, refused, not_ready

    admitted, refused, not_ready = asyncio.run(attack())
    print(f"\ncarries ahead of a live node: {admitted} admitted at the bound, {refused} past it refused, "
          f"{not_ready} samples not Ready")
    return admitted, refused, not_ready


def carry_not_believed_events(c: PlaygroundCluster, name: str) -> list[str]:
    """The messages of the controller's CarryNotBelieved Events on node ``name``."""
    events = json.loads(c.cp.kubectl("get", "events", "-n", "default", "-o", "json",  # type: ignore[union-attr]
                                     f"--field-selector=involvedObject.name={name},reason=CarryNotBelieved"))
    return [e.get("message", "") for e in events["items"]]


MARK_REMOVAL_POLICY = "edgewatch-agent-mark-removal"


def _whole_second(at: dt.datetime, *, micro: bool) -> str:
    """``at`` to the second, written by hand (not with edgewatch's formatter under test): with six
    fraction digits (the MicroTime spelling) or with none (another spelling of the same instant)."""
    base = at.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
    return base + (".000000Z" if micro else "Z")


def attack_respelled_and_spoiled_marks(c: PlaygroundCluster) -> tuple[int, int, float]:
    """a-5 is killed; a-1 (its real token) tries both spellings of "one field, two parsers":

    * a renewal of a-5's Lease with renewTime ``…:05.000000Z`` and the mark ``…:05Z`` (the same
      instant): the apiserver's policy took it as a carry, the controller as a-5's own renewal, and
      a dead a-5 stayed NORMAL (measured before the fix: 74 such renewals admitted in 100 s);
    * a correct carry, then a patch of the annotations alone that spoils the mark.

    Every respelled renewal and every spoiling patch must be refused (403), and a-5 failed. Returns
    (respelled refused, spoils refused, seconds from the kill to the failed taint)."""
    attacker = Attacker(c)
    mark = {"edgewatch.io/delegate-heartbeat": "true", "edgewatch.io/delegated-by": attacker.node,
            "edgewatch.io/delegated-via": "peer"}
    with _killed(c, "a-5") as killed:
        respelled = spoiled = 0

        async def both_spellings(client: AsyncClient) -> None:
            nonlocal respelled, spoiled
            now = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=1)
            body = {"spec": {"renewTime": _whole_second(now, micro=True)}, "metadata": {"annotations": {
                **mark, "edgewatch.io/delegated-renew-time": _whole_second(now, micro=False)}}}
            try:
                await client.patch(Lease, "a-5", body, namespace=NODE_LEASE_NAMESPACE, patch_type=PatchType.MERGE)
                raise AssertionError(f"a respelled mark was admitted: {body}")
            except ApiError as exc:
                assert _refused_by(exc, CARRY_POLICY), f"{exc.status.code} {exc.status.message}"
                respelled += 1
            # step one, a correct carry (allowed: a-1 is in a-5's group), then the spoiling patch
            carried = _whole_second(now, micro=True)
            try:
                await client.patch(Lease, "a-5", {"spec": {"renewTime": carried}, "metadata": {"annotations": {
                    **mark, "edgewatch.io/delegated-renew-time": carried}}},
                    namespace=NODE_LEASE_NAMESPACE, patch_type=PatchType.MERGE)
            except ApiError as exc:  # the controller's own hold may have written in between
                assert exc.status.code in (403, 409), f"{exc.status.code} {exc.status.message}"
            for spoil in ({"edgewatch.io/delegated-renew-time": "2000-01-01T00:00:00.000000Z"},
                          {"edgewatch.io/delegate-heartbeat": None}):
                try:
                    await client.patch(Lease, "a-5", {"metadata": {"annotations": spoil}},
                                       namespace=NODE_LEASE_NAMESPACE, patch_type=PatchType.MERGE)
                    raise AssertionError(f"a spoiling patch was admitted: {spoil}")
                except ApiError as exc:
                    assert _refused_by(exc, MARK_REMOVAL_POLICY), f"{exc.status.code} {exc.status.message}"
                    spoiled += 1

        failed_after = asyncio.run(_rounds_until_failed(c, attacker, killed, both_spellings, min_rounds=5))
        assert failed_after is not None, "the dead node was never judged failed"
        print(f"\nrespelled marks: {respelled} refused; spoiling patches: {spoiled} refused; "
              f"a-5 failed {failed_after:.1f} s after the kill")
        return respelled, spoiled, failed_after

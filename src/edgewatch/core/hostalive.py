"""Whether an agent can confirm a neighbour dead, or only that its agent is silent: the rule behind
the hint an agent gives the controller with its dead votes.

What it is for
    The controller fails a node fast (``edgewatch.controller.challenges``) when a strict majority
    of its peers vote it dead and it does not answer a challenge over its cloud link, which its
    edgewatch agent answers. A node whose *agent* is down (a crash, a DaemonSet rollout: about
    5-20 s) while its kubelet and pods run cannot answer, so its peers must say when they cannot
    tell "agent down" from "node dead". They tell by one TCP connect to the node's kubelet server
    port (10250, Kubernetes docs "Ports and Protocols"; the handshake needs no credentials). The
    agent (``edgewatch.agent.hostcheck``) connects once a period to each neighbour its failure
    detector does not see ALIVE, and every minute to each one it does (so it knows the check
    works for that neighbour).

The rule (:func:`confirms_dead`)
    A dead vote on a neighbour is *confirmed* iff its kubelet port answered at some time, at most
    ``verify_s`` seconds ago (the check works for that host), but not within the last
    ``window_s`` seconds (it does not answer now). Otherwise (the port answers: the agent is down,
    not the host; or it never answered: a firewall, the check off) the agent still votes it dead,
    as its detector says, but names it *unconfirmed* on its evidence Lease, and the controller
    keeps the node on the Lease path (no challenge). The dead vote is never withheld: an answer
    on the port is anyone's claim (another machine on the LAN can take a dead node's address), so
    it may only slow the controller back to the kubelet's Lease bound, never keep a dead node in.

    The window (:func:`host_window_s`) is :data:`HOST_WINDOW_PERIODS` (3) exchange periods: the
    vote is signed at the start of a period, before that period's check completes, so the newest
    answer is about one period old; a lost SYN is retransmitted only after 1 s (Linux's initial
    retransmission timeout, RFC 6298), past the check's 0.5 s bound, so each lost handshake costs
    one period's answer, and 3 periods survive two failed checks in a row plus jitter.

Limits: pure; times are the caller's monotonic seconds. An open kubelet port proves a listener at
that address, not that the node's kubelet is healthy.
"""

from __future__ import annotations

from typing import Final

from edgewatch.core.checks import finite_seconds, positive_seconds

__all__ = ["HOST_VERIFY_S", "HOST_WINDOW_PERIODS", "confirms_dead", "confirms_suspicion", "host_known_alive",
           "host_window_s"]

HOST_WINDOW_PERIODS: Final = 3
"""Exchange periods an answer of a neighbour's kubelet port counts (see the module docstring)."""

HOST_VERIFY_S: Final = 300.0
"""How long an answer of a neighbour's kubelet port shows that the check works for it, seconds:
five of the agent's once-a-minute checks of a neighbour it sees alive, so a few lost handshakes do
not turn a confirmable dead vote into an unconfirmed one."""


def host_window_s(*, period_s: float) -> float:
    """How long an answer of a neighbour's kubelet port counts, seconds:
    :data:`HOST_WINDOW_PERIODS` times ``period_s`` (the exchange period, seconds).

    Raises:
        ValueError: if ``period_s`` is not a finite number > 0.
    """
    return HOST_WINDOW_PERIODS * positive_seconds("period_s", period_s)


def host_known_alive(*, answered_at: float | None, now: float, window_s: float) -> bool:
    """Whether a neighbour's host is known alive at ``now``: its kubelet port answered at
    ``answered_at`` (None: never in this agent's run), at most ``window_s`` seconds before ``now``.
    All times are monotonic seconds; an ``answered_at`` after ``now`` counts as fresh.

    Raises:
        ValueError: if ``window_s`` is not a finite number > 0, or ``now`` or ``answered_at`` is
            not finite.
    """
    window = positive_seconds("window_s", window_s)
    at = finite_seconds("now", now)
    if answered_at is None:
        return False
    return at - finite_seconds("answered_at", answered_at) <= window


def confirms_dead(*, answered_at: float | None, now: float, window_s: float, verify_s: float = HOST_VERIFY_S) -> bool:
    """Whether a dead vote on a neighbour is confirmed at ``now``: its kubelet port last answered at
    ``answered_at`` (None: never in this agent's run), more than ``window_s`` but at most
    ``verify_s`` seconds before ``now`` (monotonic seconds; see the module docstring).

    Raises:
        ValueError: if ``window_s`` or ``verify_s`` is not a finite number > 0, or ``now`` or
            ``answered_at`` is not finite.
    """
    verify = positive_seconds("verify_s", verify_s)
    if host_known_alive(answered_at=answered_at, now=now, window_s=window_s) or answered_at is None:
        return False
    return now - answered_at <= verify


def confirms_suspicion(*, answered_at: float | None, failed_at: float | None, now: float, window_s: float,
                       verify_s: float = HOST_VERIFY_S) -> bool:
    """Whether a suspicion of a neighbour (``edgewatch.core.suspicion``) is confirmed at ``now``:
    its kubelet port answered at ``answered_at``, at most ``verify_s`` seconds before ``now`` (the
    check works for that host), and a later check failed at ``failed_at``, at most ``window_s``
    seconds before ``now`` (it does not answer now). Faster than :func:`confirms_dead`, which
    waits ``window_s`` after the last answer: a suspicion is only a request for a challenge the
    node can refute, and the check is repeated every period while the neighbour is silent, so an
    answer after ``failed_at`` withdraws it. None: never (in this agent's run). Monotonic seconds.

    Raises:
        ValueError: if ``window_s`` or ``verify_s`` is not a finite number > 0, or a time is not
            finite.
    """
    window = positive_seconds("window_s", window_s)
    verify = positive_seconds("verify_s", verify_s)
    at = finite_seconds("now", now)
    if answered_at is None or failed_at is None:
        return False
    answered, failed = finite_seconds("answered_at", answered_at), finite_seconds("failed_at", failed_at)
    return answered < failed and at - answered <= verify and at - failed <= window

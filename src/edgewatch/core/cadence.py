"""When an agent exchanges its signed statement with a neighbour, and what a liveness datagram is
worth to the failure detector, once peer protocol v6's datagrams speak for that neighbour.

What it is for
    Under v5 every period carried a whole signed envelope to each neighbour: liveness and the
    statement in one message. Under v6 liveness rides a 36-byte datagram each period
    (:mod:`edgewatch.core.liveness`) and the statement (the Ed25519-signed heartbeat the controller
    counts) is exchanged only when one side says something the other has not heard, or as a slow
    anti-entropy repair. Each datagram names the statement in which what its sender says last
    changed; a receiver holding that one or a later one holds what the sender says.
    These are the rules, pure, so the agent (``edgewatch.agent.peers``) and the tests share them.

Rules
    * :func:`exchange_reason`: a neighbour whose datagrams do not prove it alive (an agent older
      than v6, its exchange key unknown, or silent) gets the v5 exchange every period, as before
      (the N-1 rule of a rolling upgrade: a v5 agent's detector needs our envelope each period).
      Otherwise: when our statement changed since it last got one (``changed``); when its datagram
      names a statement we do not hold (``pull``: the exchange is request and answer, so one round
      trip moves both); when it is cut off from the cloud and names an older controller beacon than
      ours, which it has not been offered yet (``beacon``: a cut-off node's statements count at the
      controller only while the beacon they name is recent, and its neighbours are where it gets
      one); else every ``refresh_s`` seconds (``refresh``: the agent passes ``wire.anti_entropy_s``).
      A connected node's statement says nothing new when it only names a newer beacon (the agent
      signs it again on its own timer for its evidence, and does not announce it), so beacons do
      not set every pair exchanging at each beacon period.
    * :func:`datagram_success`: one period's detector evidence from datagrams is a success iff the
      peer's latest proof of life (a datagram echoing one of this node's recent seqs) arrived at
      most ``window_s`` seconds ago and says its kubelet is healthy, the same test a v5 answer met
      (an answer whose heartbeat said kubelet down was a failed probe). A proof is at most one
      period old when nothing is lost, so a window of 1.5 periods tolerates half a period of jitter
      and turns each lost datagram into about one failed period, as a lost v5 exchange was. A
      period without one makes the agent exchange with the peer over TCP at once (``fallback``),
      and that exchange's success counts instead: a flood or a filter that stops only the
      datagrams costs the v5 exchange, never a false verdict.

Limits: pure; times are the caller's monotonic seconds. Sources: SWIM (Das et al. 2002:
membership updates piggybacked on, and separate from, the failure detector's probes);
hashicorp/memberlist (compact UDP probes, state exchanged by push-pull on a slower timer).
"""

from __future__ import annotations

import enum
import math

__all__ = ["ExchangeReason", "datagram_success", "exchange_reason"]


class ExchangeReason(enum.StrEnum):
    """Why a statement exchange with a neighbour is due this period."""

    V5 = "v5"
    """Its datagrams do not speak for it: the v5 exchange every period."""
    CHANGED = "changed"
    """Our statement changed since it last got one."""
    PULL = "pull"
    """Its datagram names a statement we do not hold."""
    BEACON = "beacon"
    """It is cut off and names an older beacon than ours, not offered to it yet."""
    REFRESH = "refresh"
    """Nothing changed, but ``refresh_s`` seconds passed since the last exchange."""
    FALLBACK = "fallback"
    """Its datagram proof of life is missing this period: the exchange is a TCP probe too
    (memberlist's TCP fallback ping), so lost or flooded datagrams alone fail no live peer."""


def exchange_reason(*, by_datagram: bool, told_current: bool, hold_theirs: bool, since_exchange_s: float,
                    refresh_s: float, beacon_wanted: bool = False) -> ExchangeReason | None:
    """Why to exchange statements with a neighbour this period, or None (not due).

    Args (keyword-only):
        by_datagram: its liveness datagrams decide its detector's evidence (it speaks v6).
        told_current: it got our current statement (a successful exchange either way since we
            signed it).
        hold_theirs: we hold the statement its latest datagram names.
        since_exchange_s: seconds since the last successful exchange with it (``math.inf``: none).
        refresh_s: the slow refresh, seconds (> 0).
        beacon_wanted: it is cut off, names an older beacon than ours, and has not been offered ours.

    Raises:
        ValueError: if ``refresh_s`` is not positive or ``since_exchange_s`` is NaN or negative.
    """
    if not refresh_s > 0 or math.isinf(refresh_s):
        raise ValueError(f"refresh_s must be a positive number of seconds, not {refresh_s!r}")
    if math.isnan(since_exchange_s) or since_exchange_s < 0:
        raise ValueError(f"since_exchange_s must be >= 0 seconds, not {since_exchange_s!r}")
    if not by_datagram:
        return ExchangeReason.V5
    if not told_current:
        return ExchangeReason.CHANGED
    if not hold_theirs:
        return ExchangeReason.PULL
    if beacon_wanted:
        return ExchangeReason.BEACON
    if since_exchange_s >= refresh_s:
        return ExchangeReason.REFRESH
    return None


def datagram_success(*, proof_age_s: float | None, kubelet_ok: bool, window_s: float) -> bool:
    """One period's detector evidence from a peer's datagrams (see the module docstring).

    Args (keyword-only):
        proof_age_s: seconds since its latest proof of life arrived (None: none this session).
        kubelet_ok: that proof's kubelet flag.
        window_s: the longest a proof counts, seconds (> 0; the agent uses 1.5 periods).

    Raises:
        ValueError: if ``window_s`` is not positive or ``proof_age_s`` is NaN.
    """
    if not window_s > 0:
        raise ValueError(f"window_s must be > 0 seconds, not {window_s!r}")
    if proof_age_s is None:
        return False
    if math.isnan(proof_age_s):
        raise ValueError("proof_age_s is NaN")
    return kubelet_ok and proof_age_s <= window_s

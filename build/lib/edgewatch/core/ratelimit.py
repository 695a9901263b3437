"""Per-source rate limiting: a token bucket per source key (the peer server keys by source
address), so one flooding host costs a receiver a bounded share of its time and never crowds out
the others. Checked before the body is read or any signature verified.

Pure: no clock (``now`` is passed in, seconds on one monotonic clock), no I/O. Bounded: at most
``max_sources`` buckets, the least recently used dropped first (a dropped source starts full again,
which only ever errs towards letting a genuine peer through).

Source: the token bucket of RFC 2697 / the Linux tc ``tbf`` qdisc; memberlist has no inbound limit.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable

__all__ = ["RateLimiter"]


class RateLimiter:
    """``rate_per_s`` tokens a second per source, up to ``burst``; each request takes one.

    Raises:
        ValueError: ``rate_per_s`` or ``burst`` not > 0, or ``max_sources`` < 1.
    """

    def __init__(self, *, rate_per_s: float, burst: float, max_sources: int = 10_000) -> None:
        if not rate_per_s > 0 or not burst >= 1 or max_sources < 1:
            raise ValueError("rate_per_s must be > 0, burst >= 1 and max_sources >= 1")
        self.rate_per_s = float(rate_per_s)
        self.burst = float(burst)
        self.max_sources = max_sources
        self._buckets: OrderedDict[Hashable, tuple[float, float]] = OrderedDict()  # source -> (tokens, at)

    def allow(self, source: Hashable, *, now: float) -> bool:
        """Take a token for ``source`` at ``now`` (seconds); False if its bucket is empty."""
        tokens, at = self._buckets.get(source, (self.burst, now))
        tokens = min(self.burst, tokens + max(0.0, now - at) * self.rate_per_s)
        allowed = tokens >= 1.0
        if allowed:
            tokens -= 1.0
        self._buckets[source] = (tokens, now)
        self._buckets.move_to_end(source)
        while len(self._buckets) > self.max_sources:
            self._buckets.popitem(last=False)
        return allowed

    def __len__(self) -> int:
        return len(self._buckets)

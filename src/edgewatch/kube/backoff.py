"""Retry delays: exponential backoff with full jitter, the one schedule every edgewatch retry
loop against the cloud uses (informers, the pool cache's feeds).

Limits
    Pure given the random source; no timers here (the caller sleeps).
"""

from __future__ import annotations

import random

__all__ = ["backoff_delay"]


def backoff_delay(attempt: int, *, initial: float, cap: float, rng: random.Random | None = None) -> float:
    """Seconds to wait before retry ``attempt`` (1, 2, ...): drawn from [c/2, c] with
    ``c = min(cap, initial * 2**(attempt-1))`` ("exponential backoff and jitter", AWS
    architecture blog; client-go's reflector backs off 800 ms .. 30 s the same way).

    Args:
        attempt: 1 for the first retry; values below 1 count as 1.
        initial / cap: first and largest ceiling, seconds (``cap >= initial > 0``).
        rng: random source (a seeded ``random.Random`` in tests); the module's by default.
    """
    ceiling = min(cap, initial * 2 ** max(0, min(attempt - 1, 30)))
    return (rng or random).uniform(ceiling / 2, ceiling)

"""The coordinator's exponential backoff step, pure: reconnects (jittered by the session) and
failed forwards (per node) both use it."""

from __future__ import annotations

__all__ = ["next_backoff"]


def next_backoff(previous: float, *, initial: float, cap: float) -> float:
    """Exponential backoff step: ``initial`` first, then doubling, never above ``cap``."""
    return min(cap, initial if previous <= 0 else previous * 2)

"""Argument checks shared by the wire modules (:mod:`edgewatch.core.wire`, :mod:`edgewatch.core.replay`,
:mod:`edgewatch.core.book`): counts and seconds given by the caller, never network input (that goes
through the schemas and raises ``Rejected``). Each raises ValueError naming the argument.
"""

from __future__ import annotations

import math

__all__ = ["bounded_age", "finite_seconds", "positive_int", "positive_seconds"]


def positive_int(name: str, value: object, minimum: int = 1) -> int:
    """``value`` if it is an int (not a bool) >= ``minimum``. Raises ValueError."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
    return value


def finite_seconds(name: str, value: object) -> float:
    """``value`` as float seconds if it is a finite number (not a bool). Raises ValueError."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number of seconds, got {value!r}")
    return float(value)


def positive_seconds(name: str, value: object) -> float:
    """``value`` as float seconds if it is finite and > 0. Raises ValueError."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be finite and > 0 seconds, got {value!r}")
    return float(value)


def bounded_age(name: str, value: object, maximum: float) -> float:
    """``value`` as float seconds if it is finite and in ``[0, maximum]``. Raises ValueError."""
    age = finite_seconds(name, value)
    if not 0 <= age <= maximum:
        raise ValueError(f"{name} must be in [0, {maximum}] seconds, got {value!r}")
    return age

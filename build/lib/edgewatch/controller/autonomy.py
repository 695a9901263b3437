"""The autonomy time: how long a node without edge evidence keeps its pods (the UNKNOWN row of the
table), from the unknown policy and the node's ``edgewatch.io/autonomy-duration`` annotation.

Pure functions; durations in seconds (None = unlimited). The annotation is a Go duration
(``edgewatch.timefmt.parse_go_duration``), ``0`` or ``unlimited``, like OpenYurt's autonomy-duration.
"""

from __future__ import annotations

from collections.abc import Mapping

from edgewatch.controller.model import ControllerConfig, UnknownPolicy
from edgewatch.names import AUTONOMY_DURATION_ANNOTATION
from edgewatch.timefmt import parse_go_duration

__all__ = ["autonomy_duration", "parse_autonomy_duration"]


def parse_autonomy_duration(text: str) -> float | None:
    """Parse an ``edgewatch.io/autonomy-duration`` value to seconds; None means unlimited.

    Accepts a Go duration, ``"0"`` (fail as soon as confirmed) or ``"unlimited"`` (any case);
    surrounding whitespace is ignored. Raises ValueError otherwise (negative durations included).
    """
    if not isinstance(text, str):
        raise ValueError(f"invalid autonomy duration {text!r}")
    stripped = text.strip()
    if stripped.lower() == "unlimited":
        return None
    return parse_go_duration(stripped)


def autonomy_duration(*, annotations: Mapping[str, str], config: ControllerConfig) -> tuple[float | None, str | None]:
    """The autonomy time in force for a node: ``(seconds or None = unlimited, warning or None)``.

    The node's annotation wins over the policy's default (AUTONOMY: ``config.autonomy_s``; KEEP:
    unlimited; FAIL: 0 s); an invalid annotation falls back to the default with a warning (never an
    exception).
    """
    default: float | None
    if config.unknown_policy is UnknownPolicy.KEEP:
        default = None
    elif config.unknown_policy is UnknownPolicy.FAIL:
        default = 0.0
    else:
        default = float(config.autonomy_s)
    raw = annotations.get(AUTONOMY_DURATION_ANNOTATION)
    if raw is None:
        return default, None
    try:
        return parse_autonomy_duration(raw), None
    except ValueError as exc:
        shown = "unlimited" if default is None else f"{default:g} s"
        return default, (
            f"annotation {AUTONOMY_DURATION_ANNOTATION}={raw!r} is invalid ({exc}); "
            f"using the default autonomy time ({shown})"
        )

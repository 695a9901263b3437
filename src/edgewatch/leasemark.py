"""The delegate mark on a node's Lease, as one meaning shared by the apiserver and the controller.

A renewal of a node's Lease made by anyone but its kubelet carries the mark (OpenYurt's
heartbeat delegation): ``edgewatch.io/delegate-heartbeat: "true"``, ``delegated-by`` (the writer),
``delegated-via`` (``peer``, ``coordinator`` or ``autonomy``) and ``delegated-renew-time``, which
names the renewal it marks. The kubelet keeps annotations when it renews, so once it renews by
itself the mark names an older renewal and is *stale*.

One meaning per field: the apiserver's agent policy (``edgewatch-agent-carry-mark`` in
deploy/15-policy-agent.yaml) admits an agent's renewal only with ``delegated-renew-time`` spelled
exactly as a MicroTime (:data:`edgewatch.timefmt.MICRO_TIME_PATTERN`) and naming the same instant
as the new ``renewTime`` (CEL ``timestamp()``), and this module compares the two as instants
(:func:`edgewatch.timefmt.parse_instant_ns`), never as texts: two spellings of one instant can never
be "carried" to one side and "own" to the other. (Comparing texts made ``…:05Z`` a carry to the
apiserver and the node's own renewal to the controller.)

Pure: no clock, no I/O. Untrusted input: any annotation value; an unparseable one is not a mark.
"""

from __future__ import annotations

from collections.abc import Mapping

from edgewatch.names import (
    DELEGATE_HEARTBEAT_ANNOTATION,
    DELEGATED_BY_ANNOTATION,
    DELEGATED_RENEW_TIME_ANNOTATION,
    DELEGATED_VIA_ANNOTATION,
)
from edgewatch.timefmt import parse_instant_ns

__all__ = ["MARK_ANNOTATIONS", "MARK_PREFIX", "mark_is_current"]

#: The Lease annotations of the mark (all written together, all removed together).
MARK_ANNOTATIONS = (DELEGATE_HEARTBEAT_ANNOTATION, DELEGATED_BY_ANNOTATION,
                    DELEGATED_RENEW_TIME_ANNOTATION, DELEGATED_VIA_ANNOTATION)
#: Every mark annotation starts with this; the agent policies watch every key that does.
MARK_PREFIX = "edgewatch.io/delegat"


def _instant(text: object) -> int | None:
    if not isinstance(text, str):
        return None
    try:
        return parse_instant_ns(text)
    except ValueError:
        return None


def mark_is_current(*, annotations: Mapping[str, str], renew_time: str | None) -> bool:
    """True iff the delegate mark names the current renewal: ``delegate-heartbeat`` is exactly
    ``"true"`` and ``delegated-renew-time`` is the same *instant* as ``renew_time`` (the Lease's
    renewTime, RFC 3339 text). A mark without a parseable ``delegated-renew-time`` names no renewal:
    not current (the kubelet keeps annotations, so such a mark would outlive every later renewal of
    the node's own). Pure."""
    if annotations.get(DELEGATE_HEARTBEAT_ANNOTATION) != "true":
        return False
    renewed = _instant(renew_time)
    return renewed is not None and renewed == _instant(annotations.get(DELEGATED_RENEW_TIME_ANNOTATION))

"""The heartbeat a pool member puts under ``heartbeats/<node>`` (``Heartbeat``), sealed with its
node key (``edgewatch.core.seal``), and its validation on read (``parse_heartbeat``,
``HeartbeatRejected``): etcd content is untrusted, even from the coordinator's host."""

from __future__ import annotations

import json

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, ValidationError

from edgewatch.core.seal import SealRejected, unseal
from edgewatch.core.signing import Verifier
from edgewatch.core.types import DNS1123_SUBDOMAIN_PATTERN
from edgewatch.timefmt import format_micro_time

__all__ = ["Heartbeat", "HeartbeatRejected", "parse_heartbeat"]


class Heartbeat(BaseModel):
    """A node's heartbeat in the coordinator (validated on read: etcd content is untrusted).

    Unknown fields are ignored so a newer agent can add some without a leader of an older version
    rejecting every heartbeat.
    """

    model_config = ConfigDict(extra="ignore", frozen=True, strict=True)

    node: str = Field(min_length=1, max_length=253, pattern=DNS1123_SUBDOMAIN_PATTERN)
    renew_time: AwareDatetime
    delegate: bool
    cloud_ok: bool
    incarnation: int = Field(ge=0)

    def to_json(self) -> bytes:
        """The stored form (renew_time as Kubernetes MicroTime text)."""
        return json.dumps({"node": self.node, "renew_time": format_micro_time(self.renew_time),
                           "delegate": self.delegate, "cloud_ok": self.cloud_ok,
                           "incarnation": self.incarnation}, separators=(",", ":")).encode()


class HeartbeatRejected(ValueError):
    """A heartbeat value failed validation; ``reason`` is the metric label."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


def parse_heartbeat(node: str, value: bytes, *, key: bytes, verifier: Verifier, max_bytes: int = 4096) -> Heartbeat:
    """Validate the value of ``heartbeats/<node>`` (read under ``key``): its size, then ``node``'s
    seal (``verifier``: every node's published keys), then its JSON.

    Raises:
        HeartbeatRejected: reason ``too_large``, the seal's (``unsigned``, ``malformed``,
            ``unknown_key``, ``not_writer``, ``bad_signature``), ``json``, ``schema`` or
            ``node_mismatch``.
    """
    try:
        value = unseal(value, key=key, writer=node, verifier=verifier, max_bytes=max_bytes)
    except SealRejected as exc:
        raise HeartbeatRejected(exc.reason, str(exc)) from None
    try:
        json.loads(value)  # only to tell bad JSON from a bad schema
    except (ValueError, UnicodeDecodeError) as exc:
        raise HeartbeatRejected("json", str(exc)) from exc
    try:
        hb = Heartbeat.model_validate_json(value)
    except ValidationError as exc:
        raise HeartbeatRejected("schema", "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}"
                                                    for e in exc.errors())) from exc
    if hb.node != node:
        raise HeartbeatRejected("node_mismatch", f"key names {node!r}, value names {hb.node!r}")
    return hb

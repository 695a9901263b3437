"""The heartbeat (statement format 4, unchanged in protocol v5) of the agents' peer protocol (:mod:`edgewatch.core.wire` describes the whole
protocol): one agent's observation (its vote), signed by its origin with its own key (domain
``edgewatch/heartbeat/v4``, :mod:`edgewatch.core.identity`) and relayed unchanged by anyone.

Here: its strict schema, :class:`Heartbeat`, :func:`sign_heartbeat` (own) and
:func:`decode_heartbeat` (received: signature, schema, key owner). The envelope that carries it,
with its age, is :mod:`edgewatch.core.envelope`.

Limits: pure; a heartbeat holds no time (its age travels next to it in an envelope); it names at
most its origin and its neighbours, so it is under 1 KiB at any group size.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import BaseModel, Field, StringConstraints, ValidationError, model_validator

from edgewatch.core.protocol import HEARTBEAT_DOMAIN, MAX_NAMES_PER_LIST, STATEMENT_VERSION
from edgewatch.core.quorum import Vote
from edgewatch.core.rejection import Rejected, RejectReason
from edgewatch.core.signing import Signer, Verification, Verifier
from edgewatch.core.types import NodeName
from edgewatch.core.wireschema import (
    REJECT_REASON_OF,
    STRICT_MODEL_CONFIG,
    VERIFICATION_DETAIL,
    CounterInt,
    NodeNameStr,
    StatementVersion,
    check_owner,
    check_version,
    schema_detail,
)

__all__ = ["Heartbeat", "decode_heartbeat", "sign_heartbeat"]

_KeyIdStr = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{32}$")]
_MacStr = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{128}$")]
_Names = Annotated[list[NodeNameStr], Field(max_length=MAX_NAMES_PER_LIST)]


def _authenticate(obj: object, *, keyring: Verifier, domain: str, what: str) -> None:
    outcome = keyring.verify(obj, domain=domain)
    if outcome is not Verification.OK:
        raise Rejected(REJECT_REASON_OF[outcome], f"{what}: {VERIFICATION_DETAIL[outcome]}")


class _HeartbeatModel(BaseModel):
    model_config = STRICT_MODEL_CONFIG

    v: StatementVersion
    origin: NodeNameStr
    incarnation: CounterInt
    seq: CounterInt
    kubelet_ok: bool
    cloud_ok: bool
    alive: _Names
    dead: _Names
    carrier: NodeNameStr | Literal[""]
    beacon: Annotated[str, StringConstraints(pattern=r"^([0-9a-f]{32})?$")]
    key_id: _KeyIdStr
    mac: _MacStr

    @model_validator(mode="after")
    def _canonical_lists(self) -> _HeartbeatModel:
        for name, names in (("alive", self.alive), ("dead", self.dead)):
            if any(a >= b for a, b in zip(names, names[1:])):
                raise ValueError(f"{name} must be sorted and free of duplicates")
        if not set(self.alive).isdisjoint(self.dead):
            raise ValueError("a node cannot be both alive and dead")
        if self.carrier == self.origin:
            raise ValueError("a node cannot name itself its carrier")
        return self


@dataclass(frozen=True, kw_only=True)
class Heartbeat:
    """A signed observation of one origin node (see :mod:`edgewatch.core.wire`).

    Build with :func:`sign_heartbeat` (own) or :func:`decode_heartbeat`
    (received); :meth:`to_wire` reproduces exactly the signed object, so a
    relayed heartbeat still verifies. It holds no time: its age travels next
    to it in an envelope.
    """

    origin: NodeName
    incarnation: int
    seq: int
    kubelet_ok: bool
    cloud_ok: bool
    alive: tuple[NodeName, ...]
    dead: tuple[NodeName, ...]
    key_id: str
    mac: str
    beacon: str = ""
    carrier: str = ""
    """The neighbour chosen to carry this origin to the cloud ("": none)."""

    @property
    def order(self) -> tuple[int, int]:
        """``(incarnation, seq)``; within one incarnation a larger seq is
        newer (across incarnations see :meth:`HeartbeatBook.offer`)."""
        return (self.incarnation, self.seq)

    def to_wire(self) -> dict[str, object]:
        """The signed JSON object (as Python values)."""
        return {
            "v": STATEMENT_VERSION,
            "origin": self.origin,
            "incarnation": self.incarnation,
            "seq": self.seq,
            "kubelet_ok": self.kubelet_ok,
            "cloud_ok": self.cloud_ok,
            "alive": list(self.alive),
            "dead": list(self.dead),
            "carrier": self.carrier,
            "beacon": self.beacon,
            "key_id": self.key_id,
            "mac": self.mac,
        }

    def vote(self, *, observed_at: float) -> Vote:
        """This heartbeat as a :class:`~edgewatch.core.quorum.Vote` observed at
        ``observed_at`` (seconds on the deciding clock: local receipt time)."""
        return Vote(
            observer=self.origin,
            observed_at=observed_at,
            alive=frozenset(self.alive),
            dead=frozenset(self.dead),
        )


def _from_model(m: _HeartbeatModel) -> Heartbeat:
    return Heartbeat(
        origin=NodeName(m.origin),
        incarnation=m.incarnation,
        seq=m.seq,
        kubelet_ok=m.kubelet_ok,
        cloud_ok=m.cloud_ok,
        alive=tuple(NodeName(n) for n in m.alive),
        dead=tuple(NodeName(n) for n in m.dead),
        key_id=m.key_id,
        mac=m.mac,
        beacon=m.beacon,
        carrier=m.carrier,
    )


def sign_heartbeat(
    *,
    origin: NodeName,
    incarnation: int,
    seq: int,
    kubelet_ok: bool,
    cloud_ok: bool,
    alive: Iterable[NodeName],
    dead: Iterable[NodeName],
    keyring: Signer,
    beacon: str = "",
    carrier: str = "",
) -> Heartbeat:
    """Build and sign this node's heartbeat with the keyring's primary key.

    ``alive`` and ``dead`` may be given in any order (duplicates are
    merged); ``incarnation`` and ``seq`` are ints in ``[0, 2**63)``;
    ``beacon`` is the newest controller beacon value known (32 hex) or "";
    ``carrier`` the neighbour chosen to carry this node while its cloud link is
    down, or "".

    Raises:
        ValueError: an invalid node name, a node both alive and dead, itself as
            carrier, a
            counter out of range, or a list longer than
            :data:`MAX_NAMES_PER_LIST`.
    """
    try:
        payload: dict[str, object] = {
            "v": STATEMENT_VERSION,
            "origin": origin,
            "incarnation": incarnation,
            "seq": seq,
            "kubelet_ok": kubelet_ok,
            "cloud_ok": cloud_ok,
            "alive": sorted(set(alive)),
            "dead": sorted(set(dead)),
            "carrier": carrier,
            "beacon": beacon,
        }
        signed = keyring.sign(payload, domain=HEARTBEAT_DOMAIN)
        model = _HeartbeatModel.model_validate(signed)
    except ValidationError as exc:
        raise ValueError(schema_detail("heartbeat", exc)) from None
    except TypeError as exc:
        raise ValueError(f"heartbeat: {exc}") from None
    return _from_model(model)


def decode_heartbeat(obj: object, *, keyring: Verifier) -> Heartbeat:
    """Verify and parse one heartbeat object (parsed JSON).

    Checks in order: a ``v`` other than the statement version (VERSION: a statement of a release
    this one does not speak), signature (UNSIGNED / UNKNOWN_KEY / BAD_SIGNATURE /
    MALFORMED), then the strict schema (MALFORMED), then that the key is
    the origin's own (SENDER_MISMATCH). Freshness is not a
    property of the heartbeat but of the age it arrives with
    (:func:`edgewatch.core.envelope.decode_envelope`).

    Raises:
        Rejected: for any hostile ``obj``.
    """
    if isinstance(obj, dict):
        check_version(obj.get("v"), "heartbeat", low=STATEMENT_VERSION, high=STATEMENT_VERSION)
    _authenticate(obj, keyring=keyring, domain=HEARTBEAT_DOMAIN, what="heartbeat")
    try:
        model = _HeartbeatModel.model_validate(obj)
    except ValidationError as exc:
        raise Rejected(RejectReason.MALFORMED, schema_detail("heartbeat", exc)) from None
    check_owner(keyring, model.key_id, model.origin, "heartbeat")
    return _from_model(model)

"""The envelope of the agents' peer protocol, v4 and v5 (:mod:`edgewatch.core.wire` describes the whole
protocol and its freshness argument): one message from a sender to a receiver, a frame of one
ASCII header line (magic, key id, signature) and a canonical JSON body carrying the sender's own
heartbeat, a few relayed ones and their ages.

Here: its strict schema, :func:`encode_envelope` and :func:`decode_envelope`, which refuses an
oversized message, checks the signature over the body bytes before parsing anything (then JSON
without duplicate keys or non-finite numbers), then the schema, the sender and receiver binding,
the reply binding, the sender's own heartbeat (:mod:`edgewatch.core.heartbeat`) and the
:class:`~edgewatch.core.replay.ReplayGuard`; relayed heartbeats are checked one by one.

Versions: :func:`encode_envelope` writes the version it is given (per peer,
:class:`edgewatch.core.versions.PeerVersions`); :func:`decode_envelope` reads v4 exactly as release
0.1.0 writes it and v5 (v4 plus ``"versions": [min, max]``, the sender's supported range), chosen
by the header's magic ``edgewatch-envelope/v<N>``; any other N is VERSION, before the signature.

Limits: pure (nonces and epochs come from the caller); hostile input never raises anything but
:class:`~edgewatch.core.rejection.Rejected`; a relayed heartbeat that fails is reported, never
fatal.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Final

from pydantic import BaseModel, Field, StringConstraints, ValidationError, model_validator

from edgewatch.core.checks import bounded_age, positive_int, positive_seconds
from edgewatch.core.heartbeat import Heartbeat, decode_heartbeat
from edgewatch.core.protocol import (
    ENVELOPE_MAGIC,
    MAX_AGE_S,
    MAX_COUNTER,
    MAX_HEARTBEATS_PER_ENVELOPE,
    MIN_PROTOCOL_VERSION,
    PROTOCOL_VERSION,
    SUPPORTED_VERSIONS,
    envelope_domain,
    envelope_magic,
)
from edgewatch.core.rejection import Rejected, RejectReason
from edgewatch.core.replay import ReplayGuard
from edgewatch.core.signing import Signer, Verification, canonical_json
from edgewatch.core.types import NodeName, is_node_name
from edgewatch.core.wireschema import (
    REJECT_REASON_OF,
    STRICT_MODEL_CONFIG,
    VERIFICATION_DETAIL,
    CounterInt,
    NodeNameStr,
    check_owner,
    check_version,
    schema_detail,
)

__all__ = ["DecodedEnvelope", "HeartbeatResult", "decode_envelope", "encode_envelope", "parse_strict_json"]

_NONCE: Final = re.compile(r"[0-9a-f]{32}")
_MAGIC: Final = re.compile(rb"edgewatch-envelope/v([0-9]{1,6})")
_HEADER_MAX: Final = 256  # magic + space + 32-hex key id + space + 128 hex, with room to spare

_NonceStr = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{32}$")]


class _EnvelopeModel(BaseModel):
    """The body of a v4 envelope, exactly as release 0.1.0 writes it."""

    model_config = STRICT_MODEL_CONFIG

    v: Annotated[int, Field(ge=4, le=4)]
    sender: NodeNameStr
    receiver: NodeNameStr
    epoch: CounterInt
    seq: CounterInt
    nonce: _NonceStr
    reply_to: _NonceStr | None
    # Items are checked one by one (decode_heartbeat), so that one bad relayed
    # heartbeat is reported, not fatal.
    heartbeats: Annotated[list[Any], Field(min_length=1, max_length=MAX_HEARTBEATS_PER_ENVELOPE)]
    ages: Annotated[list[Any], Field(min_length=1, max_length=MAX_HEARTBEATS_PER_ENVELOPE)]
    # The newest controller beacon token the sender holds ("" if none); checked by the receiver
    # against the controller's key (edgewatch.core.beacon), never trusted as is.
    beacon: Annotated[str, StringConstraints(max_length=200)]

    @model_validator(mode="after")
    def _ages_match(self) -> _EnvelopeModel:
        if len(self.ages) != len(self.heartbeats):
            raise ValueError("ages must have one entry per heartbeat")
        for age in self.ages:
            if isinstance(age, bool) or not isinstance(age, (int, float)) or not 0 <= age <= MAX_AGE_S:
                raise ValueError(f"every age must be a number of seconds in [0, {MAX_AGE_S}]")
        return self


_Range = Annotated[int, Field(ge=1, le=1_000_000)]


class _EnvelopeModelV5(_EnvelopeModel):
    """The body of a v5 envelope: v4's, plus the sender's supported range ``versions``."""

    v: Annotated[int, Field(ge=5, le=5)]  # type: ignore[assignment]
    versions: Annotated[list[_Range], Field(min_length=2, max_length=2)]

    @model_validator(mode="after")
    def _range_holds_v(self) -> _EnvelopeModelV5:
        low, high = self.versions
        if not low <= self.v <= high:
            raise ValueError(f"versions [{low}, {high}] must hold v={self.v}")
        return self


_MODELS: Final[dict[int, type[_EnvelopeModel]]] = {4: _EnvelopeModel, 5: _EnvelopeModelV5}


@dataclass(frozen=True, kw_only=True)
class HeartbeatResult:
    """Outcome for one relayed heartbeat of an envelope: ``heartbeat`` and its
    ``age_s`` (seconds, as the sender reported it) if accepted, else
    ``reason`` and ``detail``. ``index`` is its position in the envelope's
    list (the sender's own heartbeat is index 0)."""

    index: int
    heartbeat: Heartbeat | None
    reason: RejectReason | None
    detail: str
    age_s: float = 0.0

    @property
    def accepted(self) -> bool:
        """True iff the heartbeat verified, parsed and was young enough."""
        return self.heartbeat is not None


@dataclass(frozen=True, kw_only=True)
class DecodedEnvelope:
    """An accepted envelope. ``own`` is the sender's own (verified)
    heartbeat, ``own_age_s`` its reported age in seconds; ``relayed`` has
    one result per further heartbeat. ``reply_to`` is the nonce of the
    request it answers (None for a request)."""

    sender: NodeName
    receiver: NodeName
    epoch: int
    seq: int
    nonce: str
    reply_to: str | None
    key_id: str
    own: Heartbeat
    own_age_s: float
    relayed: tuple[HeartbeatResult, ...]
    beacon: str = ""
    version: int = MIN_PROTOCOL_VERSION
    """The envelope's protocol version (its header's magic and body's ``v``)."""
    versions: tuple[int, int] = (MIN_PROTOCOL_VERSION, MIN_PROTOCOL_VERSION)
    """``(min, max)`` the sender advertised (a v4 envelope advertises nothing: ``(4, 4)``)."""

    @property
    def heartbeats(self) -> tuple[Heartbeat, ...]:
        """The own heartbeat followed by every accepted relayed one."""
        return (self.own, *(r.heartbeat for r in self.relayed if r.heartbeat is not None))


def encode_envelope(
    *,
    sender: NodeName,
    receiver: NodeName,
    epoch: int,
    seq: int,
    nonce: str,
    reply_to: str | None = None,
    own: Heartbeat,
    own_age_s: float = 0.0,
    relayed: Sequence[tuple[Heartbeat, float]] = (),
    keyring: Signer,
    max_bytes: int | None = None,
    beacon: str = "",
    version: int = PROTOCOL_VERSION,
) -> bytes:
    """Sign and encode one envelope: the header line, then canonical JSON.

    Args:
        sender, receiver: distinct valid node names.
        epoch: the sender's run (e.g. its agent's start time in ns), int in
            ``[0, 2**63)``; the same for every envelope of that run.
        seq: int in ``[0, 2**63)``, strictly increasing per receiver within
            the epoch.
        nonce: 16 random bytes as 32 lower-case hex characters (e.g.
            ``secrets.token_hex(16)``), fresh for every envelope.
        reply_to: the nonce of the request this envelope answers; None for
            a request.
        own: the sender's own heartbeat (``own.origin == sender``).
        own_age_s: seconds since ``own`` was signed (sender's monotonic clock).
        relayed: further heartbeats (:func:`select_relays`), unchanged, each
            with its age in seconds (age when received + time held).
        keyring: signs with its primary key.
        max_bytes: if given, refuse to produce a larger message.
        beacon: the newest controller beacon token the sender holds, passed on so that a peer
            cut off from the cloud can sign with a current beacon ("" if none).
        version: the protocol version to write, the one negotiated with ``receiver``
            (:meth:`edgewatch.core.versions.PeerVersions.version_for`): 4 exactly as release 0.1.0
            writes it, or 5 (adds ``versions``, this release's range).

    Raises:
        ValueError: any argument invalid, too many heartbeats, or the
            result longer than ``max_bytes``.
    """
    if version not in _MODELS:
        raise ValueError(f"version must be one of {sorted(_MODELS)}, got {version!r}")
    if not is_node_name(sender) or not is_node_name(receiver):
        raise ValueError("sender and receiver must be valid node names")
    if sender == receiver:
        raise ValueError("sender and receiver must differ")
    for name, counter in (("epoch", epoch), ("seq", seq)):
        if isinstance(counter, bool) or not isinstance(counter, int) or not 0 <= counter <= MAX_COUNTER:
            raise ValueError(f"{name} must be an int in [0, 2**63), got {counter!r}")
    for name, value in (("nonce", nonce), ("reply_to", reply_to)):
        if value is None and name == "reply_to":
            continue
        if not isinstance(value, str) or not _NONCE.fullmatch(value):
            raise ValueError(f"{name} must be 32 lower-case hex characters (16 random bytes)")
    if own.origin != sender:
        raise ValueError(f"own heartbeat has origin {own.origin!r}, not the sender {sender!r}")
    beats = [(own, own_age_s), *relayed]
    if len(beats) > MAX_HEARTBEATS_PER_ENVELOPE:
        raise ValueError(f"at most {MAX_HEARTBEATS_PER_ENVELOPE} heartbeats per envelope")
    ages = [round(bounded_age("age", age, MAX_AGE_S), 3) for _hb, age in beats]
    fields: dict[str, object] = {
        "v": version,
        "sender": sender,
        "receiver": receiver,
        "epoch": epoch,
        "seq": seq,
        "nonce": nonce,
        "reply_to": reply_to,
        "heartbeats": [hb.to_wire() for hb, _age_s in beats],
        "ages": ages,
        "beacon": beacon,
    }
    if version >= 5:
        fields["versions"] = list(SUPPORTED_VERSIONS)
    body = canonical_json(fields)
    key_id, mac = keyring.sign_bytes(body, domain=envelope_domain(version))
    raw = b"%s %s %s\n%s" % (envelope_magic(version), key_id.encode("ascii"), mac.encode("ascii"), body)
    if max_bytes is not None and len(raw) > max_bytes:
        raise ValueError(f"envelope is {len(raw)} bytes, more than max_bytes={max_bytes}")
    return raw


def _reject_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"duplicate key {key!r:.60}")
        result[key] = value
    return result


def _reject_constant(name: str) -> Any:
    raise ValueError(f"non-finite number {name}")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError("number out of float range")
    return value


def parse_strict_json(raw: bytes) -> object:
    """Parse UTF-8 JSON the strict way every wire message is parsed: a duplicate key, NaN or
    Infinity, or a number outside the float range is refused (two parsers of one field must not
    disagree on which duplicate wins).

    Raises:
        Rejected: MALFORMED, not UTF-8, not JSON, or one of the above.
    """
    try:
        text = raw.decode("utf-8")
        return json.loads(
            text,
            object_pairs_hook=_reject_duplicates,
            parse_constant=_reject_constant,
            parse_float=_finite_float,
        )
    except (ValueError, RecursionError) as exc:
        raise Rejected(RejectReason.MALFORMED, f"not UTF-8 JSON: {type(exc).__name__}: {exc}") from None


def _authenticate_frame(raw: bytes, *, keyring: Signer) -> tuple[str, bytes, int]:
    """Split the frame, refuse a version this release does not speak (VERSION) and check the
    signature over the body bytes; returns ``(key_id, body, version)``. Nothing of the body is
    interpreted here."""
    newline = raw.find(b"\n", 0, _HEADER_MAX + 1)
    if newline < 0:
        hint = " (JSON without a header line: an edgewatch v1 agent?)" if raw[:1] == b"{" else ""
        raise Rejected(RejectReason.MALFORMED,
                       f"envelope: no '{ENVELOPE_MAGIC.decode()} KEY_ID MAC' header line{hint}")
    header, body = raw[:newline], raw[newline + 1:]
    words = header.split(b" ")
    magic = _MAGIC.fullmatch(words[0]) if words else None
    if magic is None:
        raise Rejected(RejectReason.MALFORMED, f"envelope: header does not start with {ENVELOPE_MAGIC.decode()}")
    version = int(magic.group(1))
    check_version(version, "envelope")
    if len(words) < 3:
        raise Rejected(RejectReason.UNSIGNED, "envelope: header has no key id and MAC")
    if len(words) > 3 or not header.isascii():
        raise Rejected(RejectReason.MALFORMED, "envelope: header must be 'MAGIC KEY_ID MAC' in ASCII")
    key_id, mac = words[1].decode("ascii"), words[2].decode("ascii")
    outcome = keyring.verify_bytes(key_id=key_id, mac=mac, data=body, domain=envelope_domain(version))
    if outcome is not Verification.OK:
        raise Rejected(REJECT_REASON_OF[outcome], f"envelope: {VERIFICATION_DETAIL[outcome]}")
    return key_id, body, version


def decode_envelope(
    raw: bytes,
    *,
    keyring: Signer,
    receiver: NodeName,
    max_bytes: int,
    guard: ReplayGuard,
    reply_to: str | None = None,
    heartbeat_max_age_s: float = 30.0,
    sender_allowed: Callable[[NodeName], bool] | None = None,
) -> DecodedEnvelope:
    """Authenticate, decode and check one envelope received from the network.

    Args:
        raw: the message bytes, untrusted.
        keyring: keys accepted for envelopes and heartbeats.
        receiver: this node's name; envelopes for others are WRONG_RECEIVER.
        max_bytes: larger messages are OVERSIZED before anything else.
        guard: this node's :class:`ReplayGuard`; updated only when the
            envelope is accepted.
        reply_to: None to decode a request (its ``reply_to`` must be null);
            the nonce of the request we sent to decode its answer (its
            ``reply_to`` must equal it, else REPLAYED). A matching answer is
            fresh by construction (``proven`` for the guard).
        heartbeat_max_age_s: heartbeats with a larger reported age (seconds)
            are STALE: the whole envelope if it is the sender's own, else
            that heartbeat only.
        sender_allowed: optional binding hook, called with the authenticated
            sender name after every cheaper check; False means
            SENDER_MISMATCH (e.g. the source address is not that node's
            InternalIP, or the sender is not in this node's group). Its own
            exceptions propagate.

    Returns:
        The accepted envelope, with per-heartbeat results for relayed ones.

    Raises:
        Rejected: for any refused ``raw`` (hostile input raises nothing else).
        TypeError: ``raw`` is not bytes-like (caller bug).
        ValueError: invalid limits or ``reply_to`` (caller bug).
    """
    if not isinstance(raw, (bytes, bytearray, memoryview)):
        raise TypeError(f"raw must be bytes, got {type(raw).__name__}")
    limit = positive_int("max_bytes", max_bytes)
    max_age = positive_seconds("heartbeat_max_age_s", heartbeat_max_age_s)
    if not is_node_name(receiver):
        raise ValueError("receiver must be a valid node name")
    if reply_to is not None and (not isinstance(reply_to, str) or not _NONCE.fullmatch(reply_to)):
        raise ValueError("reply_to must be None or the 32-hex nonce of our request")

    size = len(raw) if not isinstance(raw, memoryview) else raw.nbytes
    if size > limit:
        raise Rejected(RejectReason.OVERSIZED, f"{size} bytes > max_bytes={limit}")
    key_id, body, version = _authenticate_frame(bytes(raw), keyring=keyring)
    obj = parse_strict_json(body)
    if not isinstance(obj, dict):
        raise Rejected(RejectReason.MALFORMED, f"envelope: body is {type(obj).__name__}, not an object")
    if obj.get("v") != version:
        raise Rejected(RejectReason.MALFORMED, f"envelope: body's v is not the header's version {version}")
    try:
        env = _MODELS[version].model_validate(obj)
    except ValidationError as exc:
        raise Rejected(RejectReason.MALFORMED, schema_detail("envelope", exc)) from None
    if env.sender == env.receiver:
        raise Rejected(RejectReason.MALFORMED, "envelope: sender equals receiver")
    check_owner(keyring, key_id, env.sender, "envelope")
    if env.receiver != receiver:
        raise Rejected(RejectReason.WRONG_RECEIVER, f"envelope for {env.receiver}, this is {receiver}")
    sender = NodeName(env.sender)
    first = env.heartbeats[0]
    first_origin = first.get("origin") if isinstance(first, dict) else None
    if not isinstance(first_origin, str):
        raise Rejected(RejectReason.MALFORMED, "envelope: first heartbeat has no origin")
    if first_origin != sender:
        raise Rejected(
            RejectReason.SENDER_MISMATCH, f"first heartbeat is from {first_origin!r:.260}, sender is {sender}"
        )
    if sender_allowed is not None and not sender_allowed(sender):
        raise Rejected(RejectReason.SENDER_MISMATCH, f"sender {sender} is not allowed from here")
    if reply_to is None and env.reply_to is not None:
        raise Rejected(RejectReason.REPLAYED, f"an answer from {sender} (to {env.reply_to}) sent as a request")
    if reply_to is not None and env.reply_to != reply_to:
        raise Rejected(RejectReason.REPLAYED, f"from {sender}: not the answer to our request {reply_to}")
    try:
        own = decode_heartbeat(env.heartbeats[0], keyring=keyring)
    except Rejected as exc:
        raise Rejected(exc.reason, f"sender's own {exc.detail}") from None
    own_age = float(env.ages[0])
    if own_age > max_age:
        raise Rejected(RejectReason.STALE, f"sender's own heartbeat is {own_age:.3f} s old (> {max_age:g} s)")
    try:
        guard.admit(sender=sender, epoch=env.epoch, seq=env.seq, proven=reply_to is not None, nonce=env.nonce)
    except Rejected as exc:
        exc.answer_version = version
        raise
    results: list[HeartbeatResult] = []
    for index, (item, age) in enumerate(zip(env.heartbeats[1:], env.ages[1:]), start=1):
        try:
            hb = decode_heartbeat(item, keyring=keyring)
        except Rejected as exc:
            results.append(HeartbeatResult(index=index, heartbeat=None, reason=exc.reason, detail=exc.detail))
            continue
        if age > max_age:
            results.append(HeartbeatResult(index=index, heartbeat=None, reason=RejectReason.STALE,
                                           detail=f"heartbeat of {hb.origin} is {float(age):.3f} s old"))
        else:
            results.append(HeartbeatResult(index=index, heartbeat=hb, reason=None, detail="accepted",
                                           age_s=float(age)))
    return DecodedEnvelope(
        sender=sender,
        receiver=NodeName(env.receiver),
        epoch=env.epoch,
        seq=env.seq,
        nonce=env.nonce,
        reply_to=env.reply_to,
        key_id=key_id,
        own=own,
        own_age_s=own_age,
        relayed=tuple(results),
        beacon=env.beacon,
        version=version,
        versions=(env.versions[0], env.versions[1]) if isinstance(env, _EnvelopeModelV5) else (version, version),
    )

"""What the strict decoders of the wire's two signed objects share (:mod:`edgewatch.core.heartbeat`,
:mod:`edgewatch.core.envelope`): the pydantic field types and model configuration of their
schemas, the refusal reason of each failed signature check, the binding of a signing key to its
owner and the one-line detail of a schema violation.

Everything here raises :class:`~edgewatch.core.rejection.Rejected` or builds a schema; nothing
parses bytes. Limits: a detail is cut to a few hundred characters of the hostile input (by
``Rejected``).
"""

from __future__ import annotations

from typing import Annotated, Final

from pydantic import ConfigDict, Field, StringConstraints, ValidationError

from edgewatch.core.protocol import MAX_COUNTER, MIN_PROTOCOL_VERSION, PROTOCOL_VERSION, STATEMENT_VERSION
from edgewatch.core.rejection import Rejected, RejectReason
from edgewatch.core.signing import Verification, Verifier
from edgewatch.core.types import DNS1123_SUBDOMAIN_PATTERN, NODE_NAME_MAX_LENGTH

__all__ = [
    "REJECT_REASON_OF",
    "STRICT_MODEL_CONFIG",
    "VERIFICATION_DETAIL",
    "CounterInt",
    "NodeNameStr",
    "StatementVersion",
    "check_owner",
    "check_version",
    "schema_detail",
]

#: The refusal reason of each failed signature check (:class:`~edgewatch.core.signing.Verification`
#: other than OK).
REJECT_REASON_OF: Final = {
    Verification.MALFORMED: RejectReason.MALFORMED,
    Verification.UNSIGNED: RejectReason.UNSIGNED,
    Verification.UNKNOWN_KEY: RejectReason.UNKNOWN_KEY,
    Verification.BAD_SIGNATURE: RejectReason.BAD_SIGNATURE,
}

#: The one-line detail logged with each failed signature check.
VERIFICATION_DETAIL: Final = {
    Verification.MALFORMED: "not an object with string key_id and mac",
    Verification.UNSIGNED: "no key_id or mac",
    Verification.UNKNOWN_KEY: "key id not published by any node",
    Verification.BAD_SIGNATURE: "signature does not match",
}


def check_owner(keyring: Verifier, key_id: str, claimed: str, what: str) -> None:
    """The signing key must be one ``claimed`` published: no node signs as another.

    Raises:
        Rejected: SENDER_MISMATCH, ``key_id`` belongs to another node (or to none).
    """
    owner = keyring.owner(key_id)
    if owner != claimed:
        raise Rejected(RejectReason.SENDER_MISMATCH,
                       f"{what} of {claimed!r:.260} is signed with the key of {owner!r:.260}")


def schema_detail(what: str, exc: ValidationError) -> str:
    """``"<what>: <field path>: <message>"`` of the first violation in ``exc``, without the input
    (hostile bytes are never echoed whole)."""
    errors = exc.errors(include_url=False, include_input=False, include_context=False)
    if not errors:
        return f"{what}: schema violation"
    first = errors[0]
    loc = ".".join(str(p) for p in first.get("loc", ()))
    return f"{what}: {loc}: {first.get('msg', 'invalid')}"


#: A node name as Kubernetes allows it: a DNS-1123 subdomain of at most 253 characters.
NodeNameStr = Annotated[
    str,
    StringConstraints(min_length=1, max_length=NODE_NAME_MAX_LENGTH, pattern=DNS1123_SUBDOMAIN_PATTERN),
]
StatementVersion = Annotated[int, Field(ge=STATEMENT_VERSION, le=STATEMENT_VERSION)]
"""``v`` of a statement (heartbeat): :data:`~edgewatch.core.protocol.STATEMENT_VERSION`."""


def check_version(value: object, what: str, *, low: int = MIN_PROTOCOL_VERSION,
                  high: int = PROTOCOL_VERSION) -> None:
    """Refuse (VERSION) an integer ``v`` outside ``[low, high]``; anything not an integer is left
    to the schema (MALFORMED). Called before the signature check, on untrusted input: it only
    refuses, it never accepts anything."""
    if isinstance(value, int) and not isinstance(value, bool) and not low <= value <= high:
        raise Rejected(RejectReason.VERSION,
                       f"{what} is version {str(value)[:20]}; this release speaks {low}-{high}")
#: A non-negative counter (sequence number, epoch) that fits the wire's integer range.
CounterInt = Annotated[int, Field(ge=0, le=MAX_COUNTER)]

#: The configuration of every wire model: unknown fields refused, no type coercion, immutable,
#: Rust's linear-time regex engine (no catastrophic backtracking on hostile names).
STRICT_MODEL_CONFIG: Final = ConfigDict(extra="forbid", strict=True, frozen=True, regex_engine="rust-regex")

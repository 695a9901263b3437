"""What signing means on the wire: canonical JSON, signature domains, the outcome of a check, and
the :class:`Signer` interface :mod:`edgewatch.core.wire` signs and verifies with.

The signer itself is per node (:class:`edgewatch.core.identity.NodeKeyring`: Ed25519, each node its
own key). There is no shared secret: the cluster-wide HMAC key of edgewatch 0.1 let any holder sign
as any node, and is gone (docs/security.md).

Canonical JSON: UTF-8, object keys sorted, no whitespace (``separators=(",", ":")``), non-ASCII
characters literal (``ensure_ascii=False``), only str keys, only finite floats (NaN and infinities
are refused), at most :data:`MAX_DEPTH` levels of nesting. Defined for Python's ``json`` float
formatting (shortest repr), which is what both ends use; it is not RFC 8785.

Domains: every signature covers ``domain || 0x00 || data``, so a heartbeat's signature can never
pass as an envelope's.
"""

from __future__ import annotations

import enum
import json
import math
from collections.abc import Mapping
from typing import Final, Protocol

__all__ = [
    "MAX_DEPTH",
    "Signer",
    "Verifier",
    "Verification",
    "canonical_json",
    "check_domain",
]

MAX_DEPTH: Final = 32
"""Deepest nesting :func:`canonical_json` accepts (edgewatch messages use 3)."""


def _no_default(value: object) -> object:
    raise TypeError(f"{type(value).__name__} has no canonical JSON form")


def _check_canonical(value: object, depth: int) -> None:
    if depth > MAX_DEPTH:
        raise ValueError(f"nesting deeper than {MAX_DEPTH} levels")
    if value is None or isinstance(value, (bool, int, str)):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"non-finite float {value!r} has no canonical JSON form")
        return
    if isinstance(value, (list, tuple)):
        for item in value:
            _check_canonical(item, depth + 1)
        return
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(f"object keys must be str, got {type(key).__name__}")
            _check_canonical(item, depth + 1)
        return
    raise TypeError(f"{type(value).__name__} has no canonical JSON form")


def canonical_json(value: object) -> bytes:
    """Encode ``value`` as canonical JSON bytes (see the module docstring).

    Supported: None, bool, int, finite float, str, list/tuple, Mapping with
    str keys.

    Raises:
        ValueError: a non-finite float, nesting deeper than
            :data:`MAX_DEPTH`, or a string that is not valid Unicode (lone
            surrogate).
        TypeError: an unsupported type or a non-str object key.
    """
    _check_canonical(value, 0)
    text = json.dumps(
        value,
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
        allow_nan=False,
        default=_no_default,
    )
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError("string is not valid Unicode (lone surrogate)") from exc


class Verification(enum.StrEnum):
    """Outcome of a signature check (:class:`Signer`)."""

    OK = "ok"
    UNSIGNED = "unsigned"
    """No ``key_id`` or no ``mac`` field."""
    UNKNOWN_KEY = "unknown_key"
    """``key_id`` is not published (unknown, or rotated out)."""
    BAD_SIGNATURE = "bad_signature"
    """The signature does not match."""
    MALFORMED = "malformed"
    """Not an object, ``key_id``/``mac`` not strings, or no canonical form."""


def check_domain(domain: str) -> bytes:
    """The signed prefix for ``domain``: its ASCII bytes and a NUL.

    Raises:
        ValueError: ``domain`` is empty, not ASCII, or contains NUL.
    """
    if not isinstance(domain, str) or not domain or not domain.isascii() or "\x00" in domain:
        raise ValueError(f"domain must be a non-empty ASCII string without NUL, got {domain!r}")
    return domain.encode("ascii") + b"\x00"


class Verifier(Protocol):
    """What checking a signature needs: the published keys and whose each one is."""

    def verify(self, signed: object, *, domain: str) -> Verification:
        """Check a signed object; never raises for hostile input."""
        ...

    def verify_bytes(self, *, key_id: object, mac: object, data: bytes, domain: str) -> Verification:
        """Check a signature over raw bytes; never raises for hostile input."""
        ...

    def owner(self, key_id: object) -> str | None:
        """The node that published ``key_id`` (None: unknown)."""
        ...


class Signer(Verifier, Protocol):
    """What the wire needs of a signer: sign as this node, verify anyone, and say whose a key is."""

    @property
    def primary_key_id(self) -> str:
        """Id of the key that signs."""
        ...

    def sign(self, payload: Mapping[str, object], *, domain: str) -> dict[str, object]:
        """``payload`` plus ``key_id`` and ``mac`` (signature over its canonical JSON)."""
        ...

    def sign_bytes(self, data: bytes, *, domain: str) -> tuple[str, str]:
        """``(key id, signature)`` over raw bytes."""
        ...

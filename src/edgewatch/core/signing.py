"""Message signing: HMAC-SHA256 over a canonical JSON encoding, with a keyring
that supports key rotation.

What it is for
    Every heartbeat (signed by its origin, relayable unchanged) carries
    ``key_id`` and ``mac`` fields (:mod:`edgewatch.core.wire`): the MAC is
    ``HMAC-SHA256(secret[key_id], domain || 0x00 || canonical_json(message
    without "mac"))``, hex encoded (64 lower-case characters), with
    ``key_id`` inside the MACed bytes. Every envelope (signed by its sender)
    is MACed as raw bytes (:meth:`Keyring.sign_bytes` /
    :meth:`Keyring.verify_bytes`): the receiver authenticates the bytes
    before it parses them. ``domain`` separates message kinds, so a
    heartbeat's MAC can never pass as an envelope's.

    Canonical JSON: UTF-8, object keys sorted, no whitespace
    (``separators=(",", ":")``), non-ASCII characters literal
    (``ensure_ascii=False``), only str keys, only finite floats (NaN and
    infinities are refused), at most :data:`MAX_DEPTH` levels of nesting.

Key rotation
    A :class:`Keyring` signs with its first (primary) key and verifies with
    any of its keys. To rotate without dropping a message: (1) add the new
    key as the *second* line everywhere, (2) once every node has it, make it
    the first line, (3) once every node signs with it, delete the old line.
    A message signed with a key that is no longer in the keyring is refused
    as UNKNOWN_KEY.

Key file (:func:`load_keyring`)
    One file, mounted from a Kubernetes Secret, one key per line::

        # comments and blank lines are ignored
        k2026a:<base64 of >= 32 random bytes>     <- primary (signs)
        k2025b:<base64 ...>                       <- accepted too

    ``key_id`` is 1-64 characters of ``[A-Za-z0-9._-]``; the secret is
    standard padded base64 of at least :data:`MIN_SECRET_BYTES` bytes (make
    one with ``head -c 32 /dev/urandom | base64``). There is no built-in or
    fallback key (SuperEdge shipped a public default key).

Limits
    HMAC with a key shared by the cluster authenticates *membership*, not the
    individual node: any holder of the key can sign as any node. Binding a
    message to its sender is done by :mod:`edgewatch.core.wire` (receiver,
    per-sender epoch and sequence number, reply binding, sender address
    hook), not by the key. Canonicalisation
    is defined for Python's ``json`` float formatting (shortest repr), which
    is what both ends use; it is not RFC 8785.

Sources
    RFC 2104 (HMAC); Python ``hmac.compare_digest`` for constant-time
    comparison; SuperEdge edge-health's HMAC without nonce or timestamp and
    with a public fallback key (what not to do).
"""

from __future__ import annotations

import base64
import binascii
import enum
import hashlib
import hmac
import json
import math
import os
import re
from collections.abc import Iterable, Mapping
from typing import Final

__all__ = [
    "HMAC_HEX_LENGTH",
    "KEY_ID_PATTERN",
    "MAX_DEPTH",
    "MIN_SECRET_BYTES",
    "Keyring",
    "Verification",
    "canonical_json",
    "load_keyring",
    "parse_keyring",
]

MIN_SECRET_BYTES: Final = 32
"""Shortest accepted secret, in bytes (256 bits, the HMAC-SHA256 block-size
guidance of RFC 2104 section 3 for full strength)."""

HMAC_HEX_LENGTH: Final = 64
"""Length of a MAC in hex characters (32 bytes of SHA-256)."""

KEY_ID_PATTERN: Final = r"^[A-Za-z0-9._-]{1,64}$"
"""Allowed key ids."""

MAX_DEPTH: Final = 32
"""Deepest nesting :func:`canonical_json` accepts (edgewatch messages use 3)."""

_KEY_ID: Final = re.compile(KEY_ID_PATTERN)
_MAC_FIELD: Final = "mac"
_KEY_ID_FIELD: Final = "key_id"


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


def _no_default(value: object) -> object:
    raise TypeError(f"{type(value).__name__} has no canonical JSON form")


class Verification(enum.StrEnum):
    """Outcome of :meth:`Keyring.verify`."""

    OK = "ok"
    UNSIGNED = "unsigned"
    """No ``key_id`` or no ``mac`` field."""
    UNKNOWN_KEY = "unknown_key"
    """``key_id`` is not in the keyring (e.g. rotated out)."""
    BAD_SIGNATURE = "bad_signature"
    """The MAC does not match."""
    MALFORMED = "malformed"
    """Not an object, ``key_id``/``mac`` not strings, or no canonical form."""


def _check_domain(domain: str) -> bytes:
    if not isinstance(domain, str) or not domain or not domain.isascii() or "\x00" in domain:
        raise ValueError(f"domain must be a non-empty ASCII string without NUL, got {domain!r}")
    return domain.encode("ascii") + b"\x00"


class Keyring:
    """Signing keys: the first signs, all verify. Immutable.

    Construct from ``[(key_id, secret_bytes), ...]``, primary first. The
    repr never shows secrets.

    Raises:
        ValueError: no keys, a key id not matching :data:`KEY_ID_PATTERN`, a
            duplicate key id, a secret that is not bytes, or a secret shorter
            than :data:`MIN_SECRET_BYTES` bytes.
    """

    __slots__ = ("_ids", "_secrets")

    def __init__(self, keys: Iterable[tuple[str, bytes]]) -> None:
        ids: list[str] = []
        secrets: dict[str, bytes] = {}
        for key_id, secret in keys:
            if not isinstance(key_id, str) or not _KEY_ID.fullmatch(key_id):
                raise ValueError(f"key id must match {KEY_ID_PATTERN}, got {key_id!r:.80}")
            if key_id in secrets:
                raise ValueError(f"duplicate key id {key_id!r}")
            if not isinstance(secret, (bytes, bytearray)):
                raise ValueError(f"secret of key {key_id!r} must be bytes, got {type(secret).__name__}")
            if len(secret) < MIN_SECRET_BYTES:
                raise ValueError(
                    f"secret of key {key_id!r} is {len(secret)} bytes; at least {MIN_SECRET_BYTES} required"
                )
            ids.append(key_id)
            secrets[key_id] = bytes(secret)
        if not ids:
            raise ValueError("a keyring needs at least one key")
        self._ids: tuple[str, ...] = tuple(ids)
        self._secrets: Mapping[str, bytes] = secrets

    @property
    def primary_key_id(self) -> str:
        """Id of the key that signs."""
        return self._ids[0]

    @property
    def key_ids(self) -> tuple[str, ...]:
        """All key ids, primary first."""
        return self._ids

    def __contains__(self, key_id: object) -> bool:
        return isinstance(key_id, str) and key_id in self._secrets

    def __repr__(self) -> str:
        return f"Keyring(key_ids={list(self._ids)!r})"

    def mac(self, *, key_id: str, domain: str, data: bytes) -> str:
        """Hex HMAC-SHA256 of ``domain || 0x00 || data`` under ``key_id``.

        Raises:
            ValueError: unknown ``key_id`` or invalid ``domain``.
        """
        prefix = _check_domain(domain)
        secret = self._secrets.get(key_id)
        if secret is None:
            raise ValueError(f"unknown key id {key_id!r:.80}")
        return hmac.new(secret, prefix + data, hashlib.sha256).hexdigest()

    def sign(self, payload: Mapping[str, object], *, domain: str) -> dict[str, object]:
        """Return a copy of ``payload`` with ``key_id`` (the primary key's) and
        ``mac`` added.

        Raises:
            ValueError: ``payload`` already has ``key_id`` or ``mac``, an
                invalid ``domain``, or ``payload`` has no canonical form
                (see :func:`canonical_json`; TypeError for bad types).
        """
        if _MAC_FIELD in payload or _KEY_ID_FIELD in payload:
            raise ValueError("payload must not contain 'key_id' or 'mac' before signing")
        body: dict[str, object] = dict(payload)
        body[_KEY_ID_FIELD] = self.primary_key_id
        body[_MAC_FIELD] = self.mac(key_id=self.primary_key_id, domain=domain, data=canonical_json(body))
        return body

    def sign_bytes(self, data: bytes, *, domain: str) -> tuple[str, str]:
        """MAC raw bytes with the primary key: ``(key_id, hex MAC of domain ||
        0x00 || data)``. For messages authenticated as bytes before they are
        parsed (the envelope frame of :mod:`edgewatch.core.wire`).

        Raises:
            ValueError: invalid ``domain``.
            TypeError: ``data`` is not bytes.
        """
        if not isinstance(data, (bytes, bytearray)):
            raise TypeError(f"data must be bytes, got {type(data).__name__}")
        return self.primary_key_id, self.mac(key_id=self.primary_key_id, domain=domain, data=bytes(data))

    def verify_bytes(self, *, key_id: str, mac: str, data: bytes, domain: str) -> Verification:
        """Check a MAC over raw bytes (see :meth:`sign_bytes`) in constant time,
        before anything in ``data`` is interpreted.

        Returns UNKNOWN_KEY for a key id not in the keyring, MALFORMED for a
        key id or MAC that is not well-formed text, BAD_SIGNATURE for a
        mismatch, OK otherwise. Never raises for hostile ``key_id``/``mac``/
        ``data``; raises ValueError only for an invalid ``domain``.
        """
        prefix = _check_domain(domain)
        if not isinstance(key_id, str) or not isinstance(mac, str) or not isinstance(data, (bytes, bytearray)):
            return Verification.MALFORMED
        if not _KEY_ID.fullmatch(key_id) or not mac.isascii():
            return Verification.MALFORMED
        secret = self._secrets.get(key_id)
        if secret is None:
            return Verification.UNKNOWN_KEY
        expected = hmac.new(secret, prefix + bytes(data), hashlib.sha256).hexdigest()
        return Verification.OK if hmac.compare_digest(expected, mac) else Verification.BAD_SIGNATURE

    def verify(self, signed: object, *, domain: str) -> Verification:
        """Check the ``key_id``/``mac`` of a signed object (e.g. parsed JSON).

        Never raises for any ``signed`` value (hostile input); raises
        ValueError only for an invalid ``domain``.
        """
        prefix = _check_domain(domain)
        if not isinstance(signed, Mapping):
            return Verification.MALFORMED
        if _MAC_FIELD not in signed or _KEY_ID_FIELD not in signed:
            return Verification.UNSIGNED
        key_id = signed[_KEY_ID_FIELD]
        mac = signed[_MAC_FIELD]
        if not isinstance(key_id, str) or not isinstance(mac, str):
            return Verification.MALFORMED
        secret = self._secrets.get(key_id)
        if secret is None:
            return Verification.UNKNOWN_KEY
        body = {k: v for k, v in signed.items() if k != _MAC_FIELD}
        try:
            data = canonical_json(body)
        except (ValueError, TypeError, RecursionError):
            return Verification.MALFORMED
        expected = hmac.new(secret, prefix + data, hashlib.sha256).hexdigest()
        if not mac.isascii():
            return Verification.BAD_SIGNATURE
        if hmac.compare_digest(expected, mac):
            return Verification.OK
        return Verification.BAD_SIGNATURE


def parse_keyring(text: str) -> Keyring:
    """Parse the key file format (see the module docstring) into a Keyring.

    Raises:
        ValueError: a line without ``:``, an invalid key id, a secret that is
            not strict padded base64, a secret shorter than
            :data:`MIN_SECRET_BYTES` bytes, a duplicate key id, or no key at
            all. Messages name the line number, never the secret.
    """
    keys: list[tuple[str, bytes]] = []
    for number, raw_line in enumerate(text.splitlines(), start=1):
        line = raw_line.strip()
        if not line or line.startswith("#"):
            continue
        key_id, sep, encoded = line.partition(":")
        if not sep:
            raise ValueError(f"key file line {number}: expected 'key_id:base64secret'")
        key_id = key_id.strip()
        if not _KEY_ID.fullmatch(key_id):
            raise ValueError(f"key file line {number}: key id must match {KEY_ID_PATTERN}")
        try:
            secret = base64.b64decode(encoded.strip(), validate=True)
        except (binascii.Error, ValueError):
            raise ValueError(f"key file line {number} (key {key_id!r}): secret is not valid base64") from None
        if len(secret) < MIN_SECRET_BYTES:
            raise ValueError(
                f"key file line {number} (key {key_id!r}): secret is {len(secret)} bytes; "
                f"at least {MIN_SECRET_BYTES} required"
            )
        keys.append((key_id, secret))
    if not keys:
        raise ValueError("key file holds no key")
    return Keyring(keys)


def load_keyring(path: str | os.PathLike[str]) -> Keyring:
    """Read a key file (one ``key_id:base64secret`` per line, primary first)
    mounted from a Secret.

    Raises:
        ValueError: ``path`` is a directory (mount the Secret's key as a
            file and point at that file) or the content is invalid (see
            :func:`parse_keyring`).
        OSError: the file cannot be read.
    """
    if os.path.isdir(path):
        raise ValueError(f"{os.fspath(path)!r} is a directory; expected the key file inside it")
    with open(path, encoding="utf-8") as handle:
        text = handle.read()
    return parse_keyring(text)

"""Values in the pool coordinator signed by the node that wrote them, checked before they are parsed.

What it is for (docs/security.md "What the host of the pool coordinator can do")
    etcd's per-node users (``edgewatch.pooletcd``) stop one *node* from writing another's keys,
    but not the *host* of the coordinator: root there owns etcd's data directory and can put any
    value under any key, e.g. a forged ``kubernetes`` EndpointSlice that every node's kube-proxy
    would then serve, a heartbeat for a dead node, or a candidacy. So every value a node writes
    there is sealed with its node key (the Ed25519 key its agent publishes,
    :mod:`edgewatch.core.identity`), bound to the etcd key it is stored under, and a reader
    unseals it with the published keys of the node the key names (the writer) before parsing a
    byte of it. A value moved to another key, written with another node's key, altered or unsigned
    is refused.

Format
    ``b"ewseal1 " + key_id (32 hex) + b" " + signature (128 hex) + b"\\n" + payload``. The
    signature (domain :data:`SEAL_DOMAIN`) covers ``len(key)`` (4 bytes, big-endian), the etcd key
    and the payload, so it names where the value may live.

Limits
    Pure, no I/O. A seal proves who wrote a value and where, not when: the host of the coordinator
    can still serve an *older* value a node once wrote under the same key (a stale object, an old
    heartbeat or candidacy), or withhold values; docs/security.md says what bounds each. A reader
    that has not seen the writer's published keys (a node that joined while the reader was cut off) refuses its values (``unknown_key``) until it has. Verification costs
    about 60 us per value (``cryptography``'s Ed25519); verified signatures are remembered by the
    keyring, so a re-read of unchanged values costs a hash each.
"""

from __future__ import annotations

from typing import Final, Protocol

from edgewatch.core.signing import Signer, Verification, Verifier

__all__ = ["SEAL_DOMAIN", "SealRejected", "SealVerifier", "seal", "unseal"]

SEAL_DOMAIN: Final = "edgewatch/pool-coordinator/v1"
"""Signature domain of a sealed value (separates it from every other signed message; the etcd key
inside the signed bytes separates one kind of value from another)."""


class SealVerifier(Verifier, Protocol):
    """A verifier that can also say whether it holds a node's keys (the agent's keyring)."""

    def keys_of(self, node: str) -> tuple[str, ...]:
        """The ids of ``node``'s published keys; empty if none are known."""
        ...


class SealRejected(ValueError):
    """A sealed value was refused; ``reason`` is the metric label."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason

_MAGIC: Final = b"ewseal1 "
_KEY_ID_LEN: Final = 32
_MAC_LEN: Final = 128
_HEADER_LEN: Final = len(_MAGIC) + _KEY_ID_LEN + 1 + _MAC_LEN + 1


def _signed_data(key: bytes, payload: bytes) -> bytes:
    return len(key).to_bytes(4, "big") + key + payload


def seal(payload: bytes, *, key: bytes, signer: Signer) -> bytes:
    """``payload`` sealed for the etcd ``key`` with ``signer``'s signing key.

    Raises:
        TypeError: ``payload`` or ``key`` is not bytes.
    """
    if not isinstance(payload, (bytes, bytearray)) or not isinstance(key, (bytes, bytearray)):
        raise TypeError("seal takes bytes")
    key_id, mac = signer.sign_bytes(_signed_data(bytes(key), bytes(payload)), domain=SEAL_DOMAIN)
    return _MAGIC + key_id.encode() + b" " + mac.encode() + b"\n" + bytes(payload)


def unseal(value: bytes, *, key: bytes, writer: str, verifier: Verifier, max_bytes: int | None = None) -> bytes:
    """The payload of a sealed ``value`` read under ``key``, if ``writer`` sealed it for that key.

    Args:
        value: the etcd value as read (untrusted).
        key: the etcd key it was read under.
        writer: the node ``key`` belongs to (only its published keys are accepted).
        verifier: every node's published keys (the agent's keyring).
        max_bytes: the largest ``value`` (seal included) accepted, checked before anything else
            is read; None: no bound.

    Raises:
        SealRejected: ``too_large`` (over ``max_bytes``), ``unsigned`` (no seal), ``malformed`` (a seal of the wrong shape),
            ``unknown_key`` (a key nobody published), ``not_writer`` (another node's key),
            ``bad_signature`` (altered, or sealed for another key).
    """
    if max_bytes is not None and len(value) > max_bytes:
        raise SealRejected("too_large", f"{len(value)} bytes > {max_bytes}")
    if not value.startswith(_MAGIC):
        raise SealRejected("unsigned", "the value carries no seal")
    if len(value) < _HEADER_LEN or value[_HEADER_LEN - 1:_HEADER_LEN] != b"\n" \
            or value[len(_MAGIC) + _KEY_ID_LEN:len(_MAGIC) + _KEY_ID_LEN + 1] != b" ":
        raise SealRejected("malformed", "the seal's header is not '<key id> <signature>'")
    key_id = value[len(_MAGIC):len(_MAGIC) + _KEY_ID_LEN].decode("ascii", errors="replace")
    mac = value[len(_MAGIC) + _KEY_ID_LEN + 1:_HEADER_LEN - 1].decode("ascii", errors="replace")
    payload = value[_HEADER_LEN:]
    owner = verifier.owner(key_id)
    if owner is None:
        result = verifier.verify_bytes(key_id=key_id, mac=mac, data=b"", domain=SEAL_DOMAIN)
        if result is Verification.MALFORMED:
            raise SealRejected("malformed", "the seal's key id or signature is not hex of the right length")
        raise SealRejected("unknown_key", f"sealed with key {key_id}, which no node published")
    if owner != writer:
        raise SealRejected("not_writer", f"sealed by {owner}, but the key is {writer}'s")
    result = verifier.verify_bytes(key_id=key_id, mac=mac, data=_signed_data(key, payload), domain=SEAL_DOMAIN)
    if result is Verification.MALFORMED:
        raise SealRejected("malformed", "the seal's key id or signature is not hex of the right length")
    if result is not Verification.OK:
        raise SealRejected("bad_signature", f"the seal does not match the value under this key ({result.value})")
    return payload
